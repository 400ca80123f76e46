/*
 * `ingot`: the command-line program.
 *
 *   ingot bench [options]   check every op against the CPU reference, time it
 *   ingot quantize IN OUT   safetensors -> safetensors with NVFP4 weights
 *   ingot ple load PATH...  a checkpoint's n-gram (PLE) table into host memory
 *   ingot version           library and header versions, backends available
 *   ingot help [COMMAND]    usage
 *
 * Each subcommand lives in its own file with an entry point
 * `int <command>_main(int argc, char **argv)` (argv[0] is the subcommand's
 * name) that returns the exit status: 0 success, 1 failure, 2 usage error.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "ingot/ingot.h"
#include "ple_cli.h"
#include "quantize/quantize.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ingot <command> [options]\n"
          "\n"
          "commands:\n"
          "  bench     check every op against the CPU reference, then time it\n"
          "            (ingot bench --help for its options)\n"
          "  quantize  copy a .safetensors file with chosen weights in NVFP4\n"
          "            (ingot quantize --help for its options)\n"
          "  ple load  load a checkpoint's n-gram (PLE) table into host memory\n"
          "            (ingot ple --help for its options)\n"
          "  version   print the library and header versions and the backends\n"
          "  help      print this text (ingot help COMMAND: that command's options)\n");
}

static int version_main(void) {
  printf("ingot %s (header %s)\n", ingot_version(), INGOT_VERSION_STRING);
  printf("backends: cpu%s\n", ingot_backend_available(INGOT_BACKEND_CUDA) ? ", cuda"
#ifdef INGOT_WITH_CUDA
                                                                          : " (cuda compiled in, no usable device)"
#else
                                                                          : " (cuda not compiled in)"
#endif
  );
  if (ingot_version_number() != INGOT_VERSION_NUMBER) {
    fprintf(stderr, "ingot: warning: library version %d differs from header version %d\n",
            ingot_version_number(), INGOT_VERSION_NUMBER);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "bench") == 0) return bench_main(argc - 1, argv + 1);
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    if (argc > 2) {
      usage(stderr);
      return 2;
    }
    return version_main();
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    if (argc > 2 && strcmp(argv[2], "bench") == 0) {
      char *args[] = {argv[2], (char *)"--help"};
      return bench_main(2, args);
    }
    if (argc > 2 && strcmp(argv[2], "quantize") == 0) {
      char *args[] = {argv[2], (char *)"--help"};
      return quantize_main(2, args);
    }
    if (argc > 2 && strcmp(argv[2], "ple") == 0) {
      char *args[] = {argv[2], (char *)"--help"};
      return ple_main(2, args);
    }
    if (argc > 2) {
      fprintf(stderr, "ingot: no help for unknown command '%s'\n", argv[2]);
      usage(stderr);
      return 2;
    }
    usage(stdout);
    return 0;
  }

  if (strcmp(cmd, "quantize") == 0) return quantize_main(argc - 1, argv + 1);
  if (strcmp(cmd, "ple") == 0) return ple_main(argc - 1, argv + 1);

  fprintf(stderr, "ingot: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
