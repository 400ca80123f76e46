/*
 * `ingot ple load`: loads a checkpoint's n-gram (PLE) table into one host
 * buffer through ingot_ngram_table_load, the way an engine would: the shape
 * comes from the configuration (or --rows), the files are checked against
 * it (ingot_ngram_table_probe) before the buffer is allocated, the buffer is
 * pinned with cudaHostAlloc when the library has a usable CUDA backend
 * (else malloc), or with --host-table a host table (ingot_host_table_create:
 * hugetlb / THP / pinned, registered with GPU 0), and the load reports its
 * progress and rate. --out writes the raw table.
 */
#define _POSIX_C_SOURCE 200809L

#include "ple_cli.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ingot/ingot.h"

#ifdef INGOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

static void print_usage(FILE *f) {
  fprintf(f,
          "usage: ingot ple load PATH... --dim D (--rows R | --n N --heads-per-order H\n"
          "                      --base B [--layer-index L] [--pad-multiple P]) [options]\n"
          "\n"
          "Loads the n-gram (PLE) table of a safetensors checkpoint into one host buffer\n"
          "and checks it. The table is stored as\n"
          "  <prefix>ngram_embedding.shard_<i>.weight  F8_E4M3 [rows_i, D], i = 0..S-1\n"
          "  <prefix>ngram_embedding.weight_scale      F32 or BF16, [] or [1]\n"
          "in any files, in any order; the table is the shards in index order. PATH is a\n"
          "file or a directory (its *.safetensors files). The buffer is pinned host\n"
          "memory (cudaHostAlloc) when CUDA is available, else plain memory; or, with\n"
          "--host-table, a host table (ingot_host_table_create).\n"
          "\n"
          "the table's shape (the load fails unless the files hold exactly this):\n"
          "  --dim D                row bytes D (required)\n"
          "  --rows R               rows; or the configuration they come from:\n"
          "  --n N --heads-per-order H --base B [--layer-index L] [--pad-multiple P]\n"
          "                         R = the rows of ingot_ngram_config_derive's constants\n"
          "                         (ingot_ngram_table_rows, P default 1)\n"
          "options:\n"
          "  --prefix TEXT          the text before \"ngram_embedding.\" in the names (\"\" for\n"
          "                         none; default: the one prefix the shards have)\n"
          "  --out FILE             also write the raw table (R*D bytes) to FILE (written\n"
          "                         beside it and renamed when complete)\n"
          "  --host-table STRATEGY  load into a host table made by ingot_host_table_create:\n"
          "                         auto, hugetlb-1g, hugetlb-2m, thp or pinned (auto: the\n"
          "                         first that works, in that order); registered with GPU 0\n"
          "                         when CUDA is available. Prints the strategy and the\n"
          "                         huge-page bytes obtained. A named strategy the system\n"
          "                         lacks fails (exit 1) with the reason\n"
          "  --no-pin               plain host memory even when CUDA is available; with\n"
          "                         --host-table: mapped by the strategy, not registered\n"
          "  --dry-run              check the files against the shape; load nothing\n"
          "  -q, --quiet            print only errors\n"
          "  -h, --help             this text\n"
          "\n"
          "Progress is a bar on a terminal, lines otherwise (on stderr). Exit status: 0\n"
          "loaded, 1 failed (bad files, I/O, allocation), 2 usage error.\n");
}

static int usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ingot ple load: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(ingot ple load --help for usage)\n");
  va_end(ap);
  return 2;
}

typedef struct {
  const char **paths;
  int32_t num_paths;
  const char *prefix, *out_path;
  int64_t rows, dim;
  int64_t n, heads_per_order, base, layer_index, pad_multiple; /* -1: not given */
  int no_pin, dry_run, quiet;
  const char *host_table; /* --host-table STRATEGY; NULL: not given */
  uint32_t host_strategy;
} ple_args;

/* The INGOT_HOST_TABLE_* value of a strategy name; 0 and -1 if unknown. */
static int parse_strategy(const char *name, uint32_t *out) {
  static const uint32_t all[] = {INGOT_HOST_TABLE_AUTO, INGOT_HOST_TABLE_HUGETLB_1G,
                                 INGOT_HOST_TABLE_HUGETLB_2M, INGOT_HOST_TABLE_THP,
                                 INGOT_HOST_TABLE_PINNED};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
    if (strcmp(name, ingot_host_table_strategy_name(all[k])) == 0) {
      *out = all[k];
      return 0;
    }
  }
  *out = 0;
  return -1;
}

/* A whole-string decimal int64 in [lo, hi]; 0, or the usage error's status. */
static int parse_int(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end != '\0' || v < lo || v > hi)
    return usage_error("%s: '%s' is not an integer in [%" PRId64 ", %" PRId64 "]", opt, text, lo,
                       hi);
  *out = (int64_t)v;
  return 0;
}

/* Fills a; returns 0, or the exit status to return now (-1: 0). */
static int parse_args(ple_args *a, int argc, char **argv) {
  a->paths = calloc((size_t)argc, sizeof *a->paths);
  if (a->paths == NULL) {
    fprintf(stderr, "ingot ple load: out of memory\n");
    return 1;
  }
  a->rows = a->dim = a->n = a->heads_per_order = a->base = a->layer_index = a->pad_multiple = -1;
  for (int i = 2; i < argc; i++) {
    const char *o = argv[i];
    struct {
      const char *name;
      int64_t *dst, lo, hi;
    } ints[] = {
        {"--rows", &a->rows, 1, INT64_MAX},
        {"--dim", &a->dim, 1, INT64_MAX},
        {"--n", &a->n, 2, INGOT_NGRAM_MAX_N},
        {"--heads-per-order", &a->heads_per_order, 1, INGOT_NGRAM_MAX_HEADS},
        {"--base", &a->base, 2, INT64_MAX},
        {"--layer-index", &a->layer_index, 0, INGOT_NGRAM_MAX_LAYER_INDEX},
        {"--pad-multiple", &a->pad_multiple, 1, INT64_MAX},
    };
    int matched = 0;
    for (size_t k = 0; k < sizeof ints / sizeof ints[0] && !matched; k++) {
      if (strcmp(o, ints[k].name) != 0) continue;
      if (i + 1 >= argc) return usage_error("%s needs a value", o);
      int st = parse_int(o, argv[++i], ints[k].lo, ints[k].hi, ints[k].dst);
      if (st) return st;
      matched = 1;
    }
    if (matched) continue;
    if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
      print_usage(stdout);
      return -1;
    } else if (strcmp(o, "--prefix") == 0 || strcmp(o, "--out") == 0) {
      if (i + 1 >= argc) return usage_error("%s needs a value", o);
      *(strcmp(o, "--prefix") == 0 ? &a->prefix : &a->out_path) = argv[++i];
    } else if (strcmp(o, "--host-table") == 0) {
      if (i + 1 >= argc) return usage_error("%s needs a value", o);
      a->host_table = argv[++i];
      if (parse_strategy(a->host_table, &a->host_strategy) != 0)
        return usage_error("--host-table: '%s' is not a strategy (auto, hugetlb-1g, hugetlb-2m, "
                           "thp, pinned)",
                           a->host_table);
    } else if (strcmp(o, "--no-pin") == 0) {
      a->no_pin = 1;
    } else if (strcmp(o, "--dry-run") == 0) {
      a->dry_run = 1;
    } else if (strcmp(o, "-q") == 0 || strcmp(o, "--quiet") == 0) {
      a->quiet = 1;
    } else if (o[0] == '-' && o[1] != '\0') {
      return usage_error("unknown option '%s'", o);
    } else {
      a->paths[a->num_paths++] = o;
    }
  }
  if (a->num_paths == 0) return usage_error("needs at least one .safetensors file or directory");
  if (a->dim < 0) return usage_error("needs --dim D (the table's row bytes)");
  int config = a->n >= 0 || a->heads_per_order >= 0 || a->base >= 0 || a->layer_index >= 0 ||
               a->pad_multiple >= 0;
  if (a->rows >= 0 && config)
    return usage_error("--rows and the configuration (--n, --heads-per-order, --base, ...) "
                       "exclude each other");
  if (a->rows < 0 && !config)
    return usage_error("needs the table's rows: --rows R, or --n, --heads-per-order and --base");
  if (config && (a->n < 0 || a->heads_per_order < 0 || a->base < 0))
    return usage_error("the configuration needs --n, --heads-per-order and --base");
  return 0;
}

/* The rows of the configuration given on the command line. */
static int config_rows(ple_args *a) {
  if (a->rows >= 0) return 0;
  ingot_ngram_config cfg;
  /* the rows depend on n, hpn, base and the layer only: any vocabulary, seed
   * and boundary token do */
  if (ingot_ngram_config_derive(1, (int32_t)a->n, (int32_t)a->heads_per_order, a->base, 0,
                                (int32_t)(a->layer_index < 0 ? 0 : a->layer_index), 0, &cfg) ||
      ingot_ngram_table_rows(&cfg, a->pad_multiple < 0 ? 1 : a->pad_multiple, &a->rows)) {
    fprintf(stderr, "ingot ple load: error: %s\n", ingot_last_error(NULL));
    return 1;
  }
  return 0;
}

/* ---- progress --------------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  int tty, quiet;
  double start;
  int last_step; /* the last tenth printed (lines) */
} progress_state;

static void on_progress(int64_t done, int64_t total, void *user) {
  progress_state *p = user;
  if (p->quiet) return;
  double elapsed = now_s() - p->start, gb = 1e-9 * (double)done;
  double rate = elapsed > 0 ? gb / elapsed : 0.0;
  double fraction = total > 0 ? (double)done / (double)total : 1.0;
  if (p->tty) {
    char bar[41];
    int filled = (int)(fraction * 40.0);
    for (int i = 0; i < 40; i++) bar[i] = i < filled ? '#' : '.';
    bar[40] = '\0';
    fprintf(stderr, "\r  [%s] %5.1f%%  %.2f / %.2f GB  %.2f GB/s", bar, 100.0 * fraction, gb,
            1e-9 * (double)total, rate);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
    return;
  }
  int step = (int)(fraction * 10.0);
  if (step == p->last_step && done != 0) return;
  p->last_step = step;
  fprintf(stderr, "  loaded %3d%%  %.2f / %.2f GB  %.2f GB/s\n", 10 * step, gb,
          1e-9 * (double)total, rate);
}

/* ---- the table buffer ------------------------------------------------------------------- */

typedef struct {
  unsigned char *p;
  int pinned;
  ingot_context_t ctx;       /* --host-table: the context it is made with */
  ingot_host_table_t table;  /* --host-table: p is its data */
} host_buffer;

/* "2 MiB", "4 KiB" or "N bytes": a page size. */
static void page_text(int64_t bytes, char *buf, size_t size) {
  if (bytes > 0 && bytes % ((int64_t)1 << 30) == 0)
    snprintf(buf, size, "%" PRId64 " GiB", bytes >> 30);
  else if (bytes > 0 && bytes % ((int64_t)1 << 20) == 0)
    snprintf(buf, size, "%" PRId64 " MiB", bytes >> 20);
  else if (bytes > 0 && bytes % 1024 == 0)
    snprintf(buf, size, "%" PRId64 " KiB", bytes >> 10);
  else
    snprintf(buf, size, "%" PRId64 " bytes", bytes);
}

/* A host table of `bytes` by a->host_strategy, on a CUDA context (registered
 * with GPU 0) when CUDA is available and --no-pin is not given, else on a
 * CPU context (mapped only). Prints what was obtained. */
static int buffer_alloc_table(host_buffer *b, size_t bytes, const ple_args *a) {
  int cuda = !a->no_pin && ingot_backend_available(INGOT_BACKEND_CUDA);
  if (ingot_context_create(cuda ? INGOT_BACKEND_CUDA : INGOT_BACKEND_CPU, 0, &b->ctx)) {
    fprintf(stderr, "ingot ple load: error: %s\n", ingot_last_error(NULL));
    return -1;
  }
  if (ingot_host_table_create(b->ctx, (int64_t)bytes, a->host_strategy, &b->table)) {
    fprintf(stderr, "ingot ple load: error: --host-table %s: %s\n", a->host_table,
            ingot_last_error(b->ctx));
    ingot_context_destroy(b->ctx);
    b->ctx = NULL;
    return -1;
  }
  b->p = ingot_host_table_data(b->table);
  if (!a->quiet) {
    char page[32];
    page_text(ingot_host_table_page_bytes(b->table), page, sizeof page);
    printf("host table: %s, %s pages, %" PRId64 " bytes mapped, %s\n",
           ingot_host_table_strategy_name(ingot_host_table_strategy(b->table)), page,
           ingot_host_table_mapped_bytes(b->table),
           cuda ? "registered with GPU 0" : "not registered (CPU context)");
  }
  return 0;
}

/* The huge-page bytes of the host table, once the load has touched it. */
static void print_huge_pages(const host_buffer *b) {
  int64_t huge = 0, mapped = ingot_host_table_mapped_bytes(b->table);
  if (ingot_host_table_huge_page_bytes(b->table, &huge)) {
    printf("huge pages: unknown (%s)\n", ingot_last_error(NULL));
    return;
  }
  printf("huge pages: %" PRId64 " of %" PRId64 " bytes (%.1f%%)\n", huge, mapped,
         mapped > 0 ? 100.0 * (double)huge / (double)mapped : 0.0);
}

static int buffer_alloc(host_buffer *b, size_t bytes, const ple_args *a) {
  int no_pin = a->no_pin;
  memset(b, 0, sizeof *b);
  if (a->host_table != NULL) return buffer_alloc_table(b, bytes, a);
#ifdef INGOT_WITH_CUDA
  if (!no_pin && ingot_backend_available(INGOT_BACKEND_CUDA)) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (e == cudaSuccess) {
      b->p = p;
      b->pinned = 1;
      return 0;
    }
    fprintf(stderr, "ingot ple load: warning: cudaHostAlloc of %zu bytes: %s; using malloc\n",
            bytes, cudaGetErrorString(e));
    cudaGetLastError();
  }
#else
  (void)no_pin;
#endif
  b->p = malloc(bytes ? bytes : 1);
  return b->p == NULL ? -1 : 0;
}

static void buffer_free(host_buffer *b) {
  if (b->table != NULL || b->ctx != NULL) {
    ingot_host_table_destroy(b->table);
    ingot_context_destroy(b->ctx);
    return;
  }
#ifdef INGOT_WITH_CUDA
  if (b->pinned) {
    cudaFreeHost(b->p);
    return;
  }
#endif
  free(b->p);
}

/* Writes the table to path atomically (path.tmp-XXXXXX, then rename). */
static int write_table(const char *path, const unsigned char *p, size_t bytes) {
  size_t len = strlen(path) + sizeof ".tmp-XXXXXX";
  char *tmp = malloc(len);
  if (tmp == NULL) {
    fprintf(stderr, "ingot ple load: error: out of memory\n");
    return 1;
  }
  snprintf(tmp, len, "%s.tmp-XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(stderr, "ingot ple load: error: %s: cannot create %s: %s\n", path, tmp,
            strerror(errno));
    free(tmp);
    return 1;
  }
  const char *failed = NULL;
  for (size_t at = 0; at < bytes && failed == NULL;) {
    ssize_t put = write(fd, p + at, bytes - at < ((size_t)1 << 30) ? bytes - at : (size_t)1 << 30);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) failed = "write";
    else at += (size_t)put;
  }
  if (failed == NULL && fchmod(fd, 0644) != 0) failed = "chmod";
  if (failed == NULL && fsync(fd) != 0) failed = "fsync";
  if (close(fd) != 0 && failed == NULL) failed = "close";
  if (failed == NULL && rename(tmp, path) != 0) failed = "rename";
  if (failed != NULL) {
    fprintf(stderr, "ingot ple load: error: %s: %s: %s\n", path, failed, strerror(errno));
    unlink(tmp);
  }
  free(tmp);
  return failed != NULL;
}

/* ---- main ------------------------------------------------------------------------------- */

static int load_main(int argc, char **argv) {
  ple_args a;
  memset(&a, 0, sizeof a);
  int status = parse_args(&a, argc, argv);
  if (status == 0) status = config_rows(&a);
  if (status != 0) {
    free(a.paths);
    return status < 0 ? 0 : status;
  }
  const char *const *paths = a.paths;
  int64_t rows = 0, dim = 0, bytes = 0;
  int32_t shards = 0;
  float scale = 0.0f;
  // ---- the files against the shape, before allocating
  if (ingot_ngram_table_probe(paths, a.num_paths, a.prefix, &rows, &dim, &shards, &scale)) {
    fprintf(stderr, "ingot ple load: error: %s\n", ingot_last_error(NULL));
    free(a.paths);
    return 1;
  }
  if (rows != a.rows || dim != a.dim || __builtin_mul_overflow(rows, dim, &bytes) ||
      (uint64_t)bytes > SIZE_MAX) {
    fprintf(stderr,
            "ingot ple load: error: the files hold a table of %" PRId64 " rows x %" PRId64
            " bytes (%d shards), but the shape given is %" PRId64 " x %" PRId64 "\n",
            rows, dim, (int)shards, a.rows, a.dim);
    free(a.paths);
    return 1;
  }
  if (!a.quiet)
    printf("ingot ple load: %d shards, %" PRId64 " rows x %" PRId64 " bytes = %.2f GB (%.2f GiB)\n",
           (int)shards, rows, dim, 1e-9 * (double)bytes, (double)bytes / (1024.0 * 1024 * 1024));
  if (a.dry_run) {
    if (!a.quiet)
      printf("weight_scale = %.9g\ndry run: the files match; nothing loaded\n", (double)scale);
    free(a.paths);
    return 0;
  }

  // ---- load
  host_buffer buf;
  if (buffer_alloc(&buf, (size_t)bytes, &a)) {
    if (a.host_table == NULL)  /* a host table's failure is printed with its reason */
      fprintf(stderr, "ingot ple load: error: cannot allocate %" PRId64 " bytes of host memory\n",
              bytes);
    free(a.paths);
    return 1;
  }
  progress_state progress = {isatty(STDERR_FILENO), a.quiet, now_s(), -1};
  double start = now_s();
  int rc = 0;
  if (ingot_ngram_table_load(paths, a.num_paths, a.prefix, a.rows, a.dim, buf.p, bytes, &scale,
                             on_progress, &progress)) {
    if (progress.tty && !a.quiet) fputc('\n', stderr);
    fprintf(stderr, "ingot ple load: error: %s\n", ingot_last_error(NULL));
    rc = 1;
  }
  double seconds = now_s() - start;
  if (rc == 0 && !a.quiet) {
    printf("loaded into %s in %.2f s: %.2f GB/s\nweight_scale = %.9g\n",
           buf.table != NULL ? "the host table"
           : buf.pinned      ? "pinned host memory (cudaHostAlloc)"
                             : "host memory (malloc)",
           seconds, seconds > 0 ? 1e-9 * (double)bytes / seconds : 0.0, (double)scale);
    if (buf.table != NULL) print_huge_pages(&buf);
  }
  if (rc == 0 && a.out_path != NULL) {
    rc = write_table(a.out_path, buf.p, (size_t)bytes);
    if (rc == 0 && !a.quiet) printf("wrote %s (%" PRId64 " bytes)\n", a.out_path, bytes);
  }
  buffer_free(&buf);
  free(a.paths);
  return rc;
}

int ple_main(int argc, char **argv) {
  if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    print_usage(stdout);
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "load") == 0) return load_main(argc, argv);
  if (argc < 2)
    fprintf(stderr, "ingot ple: needs an action: load\n");
  else
    fprintf(stderr, "ingot ple: unknown action '%s' (known: load)\n", argv[1]);
  print_usage(stderr);
  return 2;
}
