/*
 * `ingot quantize`: safetensors -> safetensors with NVFP4 weights (the format
 * of its output: docs/quantize.md); the entry point that ingot_main.c calls,
 * defined in quantize_cli.c. The steps: safetensors_read.c checks IN (which
 * it does not trust), quantize_plan.c decides what each tensor becomes,
 * safetensors_write.c writes OUT atomically.
 *
 * Trust: argv is the user's command line; nothing in it is trusted beyond
 * being NUL-terminated strings.
 */
#ifndef INGOT_TOOLS_QUANTIZE_H
#define INGOT_TOOLS_QUANTIZE_H

/* argv[0] is "quantize". Returns 0 on success, 1 on failure (bad input file,
 * I/O, library error), 2 on a usage error or when the program was built
 * without a JSON library. */
int quantize_main(int argc, char **argv);

#endif /* INGOT_TOOLS_QUANTIZE_H */
