/*
 * `ingot quantize` on the command line: parses the arguments, prints the
 * usage text, and runs the steps: check IN (safetensors_read.c), plan
 * (quantize_plan.c), then write OUT (safetensors_write.c) while quantizing
 * each planned unit through the library (a CUDA context when a usable GPU is
 * present, else the CPU reference: identical bytes). Prints progress,
 * warnings and the error; returns the exit status.
 *
 * Trust: argv is only stored and compared (paths, globs, names, --device is
 * range-checked); IN is trusted only after st_open() accepted it. Without
 * cJSON only the usage text is built: the command says how to get it and
 * exits 2.
 */
#define _POSIX_C_SOURCE 200809L

#include "quantize.h"

#include <stdio.h>
#include <string.h>

#include "ingot/ingot.h"

static void print_usage(FILE *f) {
  fprintf(f,
          "usage: ingot quantize IN.safetensors OUT.safetensors [options]\n"
          "\n"
          "Copies IN to OUT, replacing the chosen weights by NVFP4: a 2-D BF16/F16/F32\n"
          "tensor NAME [rows, cols] (cols %% 16 == 0) becomes\n"
          "  NAME.nvfp4_values        U8 [rows, cols/2]: E2M1 codes, even element in\n"
          "                           the low nibble\n"
          "  NAME.nvfp4_scales        F8_E4M3 [round_up(rows,128), round_up(cols/16,4)]:\n"
          "                           one scale per 16 elements, 128x4 swizzled\n"
          "  NAME.nvfp4_global_scale  F32 [1]: gs (x ~ e2m1 * scale / gs)\n"
          "Every other tensor is copied byte for byte; __metadata__ is kept, plus an\n"
          "\"ingot.quantize\" entry. Without --pattern or --gate-up nothing is quantized.\n"
          "\n"
          "options:\n"
          "  -p, --pattern GLOB     quantize the 2-D BF16/F16/F32 tensors whose name\n"
          "                         matches GLOB (fnmatch: * ? [..]; '*' also matches\n"
          "                         '.'); repeatable. Matched tensors of another rank\n"
          "                         or dtype are copied.\n"
          "  --gate-up GATE UP OUT  interleave the [H, K] tensors GATE and UP (row 2j =\n"
          "                         GATE row j, row 2j+1 = UP row j) into one NVFP4\n"
          "                         [2H, K] tensor OUT with one global scale; GATE and\n"
          "                         UP are not copied. Repeatable.\n"
          "  --cpu                  use the CPU backend even when CUDA is available\n"
          "  --device N             CUDA device (default 0). The default backend is CUDA\n"
          "                         when a usable GPU is present, else the CPU.\n"
          "  --dry-run              check IN and print what would be done; write nothing\n"
          "  -q, --quiet            print only warnings and errors\n"
          "  -h, --help             this text\n"
          "\n"
          "OUT is written to a temporary file beside it and renamed when complete; on any\n"
          "error nothing is left behind. Exit status: 0 done, 1 failed, 2 usage error.\n");
}

#ifndef INGOT_HAVE_CJSON

int quantize_main(int argc, char **argv) {
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    print_usage(stdout);
    printf("\n(this ingot was built without JSON support: the command is not available)\n");
    return 0;
  }
  fprintf(stderr,
          "ingot quantize: built without JSON support (install libcjson-dev and rebuild)\n");
  return 2;
}

#else /* INGOT_HAVE_CJSON */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#include "quantize_plan.h"
#include "safetensors.h"

#ifdef INGOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct {
  /* options (the rest are in plan) */
  const char *in_path, *out_path;
  int force_cpu, device, device_given, dry_run, quiet;
  st_file in;
  qplan plan;
  /* run */
  ingot_context_t ctx;
  int cuda;
  st_error err;
} quant;

static void PRINTF_LIKE(2, 3) info(const quant *q, const char *fmt, ...) {
  if (q->quiet) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

static int host_is_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ---- quantizing ----------------------------------------------------------------------- */

static const char *dtype_label(const quant *q, const qjob *j) {
  return st_dtypes[q->in.t[j->src[0]].dtype].name;
}

/* Runs the job's ops on q->ctx; every pointer is in the context's memory. */
static int run_ops(quant *q, const qjob *j, void *x0, void *x1, float *gs, uint8_t *values,
                   uint8_t *scales, uint32_t *count) {
  const st_tensor *t = &q->in.t[j->src[0]];
  ingot_dtype dt = st_dtypes[t->dtype].ingot;
  int64_t h = (int64_t)t->shape[0], k = j->cols;
  ingot_tensor tg = ingot_tensor_1d(gs, INGOT_DTYPE_F32, 1);
  ingot_tensor tv = ingot_tensor_2d(values, INGOT_DTYPE_U8, j->rows, k / 2, k / 2);
  ingot_tensor ts =
      ingot_tensor_2d(scales, INGOT_DTYPE_F8_E4M3, j->scale_rows, j->scale_cols, j->scale_cols);
  ingot_tensor tc = ingot_tensor_1d(count, INGOT_DTYPE_U32, 1);
  ingot_status st;
  if (j->src[1] >= 0) {
    ingot_tensor tgate = ingot_tensor_2d(x0, dt, h, k, k);
    ingot_tensor tup = ingot_tensor_2d(x1, dt, h, k, k);
    st = ingot_nvfp4_quantize_gate_up(
        q->ctx, &tgate, &tup, &tg, INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE, &tv, &ts, &tc, NULL);
  } else {
    ingot_tensor tx = ingot_tensor_2d(x0, dt, h, k, k);
    st = ingot_nvfp4_global_scale(q->ctx, &tx, &tg, NULL);
    if (st == INGOT_OK) st = ingot_nvfp4_quantize(q->ctx, &tx, &tg, &tv, &ts, &tc, NULL);
  }
  if (st != INGOT_OK)
    return st_fail(&q->err, "quantizing '%s': %s (%s)", j->name, ingot_last_error(q->ctx),
                   ingot_status_name(st));
  return 0;
}

#ifdef INGOT_WITH_CUDA
static int cuda_check(quant *q, cudaError_t e, const char *what, const qjob *j) {
  if (e == cudaSuccess) return 0;
  return st_fail(&q->err, "quantizing '%s': %s: %s", j->name, what, cudaGetErrorString(e));
}

/* The job on the GPU: copies in, ops on the legacy default stream, copies
 * out (cudaMemcpy waits for the ops). */
static int run_ops_cuda(quant *q, const qjob *j, const void *h0, const void *h1, size_t in_bytes,
                        float *gs, uint8_t *values, uint8_t *scales, uint32_t *count) {
  void *d[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
  size_t sizes[6] = {in_bytes,
                     h1 ? in_bytes : 1,
                     sizeof(float),
                     (size_t)j->values_bytes,
                     (size_t)j->scales_bytes,
                     sizeof(uint32_t)};
  int rc = 0;
  for (int i = 0; i < 6 && rc == 0; i++)
    rc = cuda_check(q, cudaMalloc(&d[i], sizes[i] ? sizes[i] : 1), "cudaMalloc", j);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(d[0], h0, in_bytes, cudaMemcpyHostToDevice), "copy in", j);
  if (rc == 0 && h1 != NULL)
    rc = cuda_check(q, cudaMemcpy(d[1], h1, in_bytes, cudaMemcpyHostToDevice), "copy in", j);
  if (rc == 0) rc = cuda_check(q, cudaMemset(d[5], 0, sizeof(uint32_t)), "cudaMemset", j);
  if (rc == 0) rc = run_ops(q, j, d[0], h1 ? d[1] : NULL, d[2], d[3], d[4], d[5]);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(gs, d[2], sizeof(float), cudaMemcpyDeviceToHost), "copy out", j);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(values, d[3], sizes[3], cudaMemcpyDeviceToHost), "copy out", j);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(scales, d[4], sizes[4], cudaMemcpyDeviceToHost), "copy out", j);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(count, d[5], sizeof(uint32_t), cudaMemcpyDeviceToHost),
                    "copy out", j);
  if (rc == 0) rc = cuda_check(q, cudaGetLastError(), "kernel", j);
  for (int i = 0; i < 6; i++) cudaFree(d[i]);
  return rc;
}
#endif

/* Reads the job's sources, quantizes them and writes values, scales and the
 * global scale to w. */
static int write_unit(quant *q, const qjob *j, st_writer *w) {
  const st_tensor *t0 = &q->in.t[j->src[0]];
  const st_tensor *t1 = j->src[1] >= 0 ? &q->in.t[j->src[1]] : NULL;
  uint64_t in_bytes64 = t0->end - t0->begin;
  if (in_bytes64 > SIZE_MAX || j->values_bytes > SIZE_MAX || j->scales_bytes > SIZE_MAX)
    return st_fail(&q->err, "tensor '%s' is too large for this machine", t0->name);
  size_t in_bytes = (size_t)in_bytes64;
  uint64_t data0 = 8 + q->in.header_len;
  void *h0 = malloc(in_bytes ? in_bytes : 1);
  void *h1 = t1 ? malloc(in_bytes ? in_bytes : 1) : NULL;
  uint8_t *values = malloc(j->values_bytes ? (size_t)j->values_bytes : 1);
  uint8_t *scales = malloc(j->scales_bytes ? (size_t)j->scales_bytes : 1);
  float gs = 0.0f;
  uint32_t count = 0;
  int rc = 0;
  if (h0 == NULL || (t1 && h1 == NULL) || values == NULL || scales == NULL)
    rc = st_fail(&q->err, "out of memory (tensor '%s')", t0->name);
  if (rc == 0) rc = st_read_at(&q->in, h0, in_bytes, data0 + t0->begin, t0->name);
  if (rc == 0 && t1) rc = st_read_at(&q->in, h1, in_bytes, data0 + t1->begin, t1->name);
  if (rc == 0) {
#ifdef INGOT_WITH_CUDA
    if (q->cuda)
      rc = run_ops_cuda(q, j, h0, h1, in_bytes, &gs, values, scales, &count);
    else
#endif
      rc = run_ops(q, j, h0, h1, &gs, values, scales, &count);
  }
  if (rc == 0) rc = st_write(w, values, (size_t)j->values_bytes);
  if (rc == 0) rc = st_write(w, scales, (size_t)j->scales_bytes);
  if (rc == 0) {
    unsigned char b[4];
    memcpy(b, &gs, 4); /* little-endian host (checked at start) */
    rc = st_write(w, b, 4);
  }
  if (rc == 0) {
    if (t1)
      info(q,
           "  nvfp4     %s <- gate '%s' + up '%s' [%" PRIu64 ", %" PRIu64 "] %s -> [%" PRId64
           ", %" PRId64 "], global scale %.9g\n",
           j->name, t0->name, t1->name, t0->shape[0], t0->shape[1], dtype_label(q, j), j->rows,
           j->cols, (double)gs);
    else
      info(q, "  nvfp4     %s [%" PRId64 ", %" PRId64 "] %s, global scale %.9g\n", j->name, j->rows,
           j->cols, dtype_label(q, j), (double)gs);
    if (count != 0)
      fprintf(stderr,
              "ingot quantize: warning: '%s': %" PRIu32
              " NaN/Inf input elements (NaN encoded as 0, +-Inf as +-6 x the block scale)\n",
              j->name, count);
  }
  free(h0);
  free(h1);
  free(values);
  free(scales);
  return rc;
}

static int open_backend(quant *q) {
  if (!q->force_cpu && ingot_backend_available(INGOT_BACKEND_CUDA)) {
    ingot_status st = ingot_context_create(INGOT_BACKEND_CUDA, q->device, &q->ctx);
    if (st == INGOT_OK) {
#ifdef INGOT_WITH_CUDA
      cudaError_t e = cudaSetDevice(q->device);
      if (e != cudaSuccess)
        return st_fail(&q->err, "cudaSetDevice(%d): %s", q->device, cudaGetErrorString(e));
      q->cuda = 1;
      return 0;
#else
      ingot_context_destroy(q->ctx); /* a library with CUDA, a CLI without */
      q->ctx = NULL;
#endif
    } else if (q->device_given) {
      return st_fail(&q->err, "--device %d: %s", q->device, ingot_last_error(NULL));
    } else {
      fprintf(stderr, "ingot quantize: warning: CUDA backend unusable (%s); using the CPU\n",
              ingot_last_error(NULL));
    }
  } else if (q->device_given) {
    return st_fail(&q->err,
                   "--device %d: the CUDA backend is not available here (see `ingot version`)",
                   q->device);
  }
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &q->ctx) != INGOT_OK)
    return st_fail(&q->err, "CPU context: %s", ingot_last_error(NULL));
  return 0;
}

/* OUT, item by item in the planned order. */
static int write_output(quant *q) {
  const qplan *p = &q->plan;
  st_writer w;
  int rc = st_write_begin(&w, q->out_path, p->out_header, p->out_header_len, &q->err);
  if (rc != 0) return rc;
  uint64_t written = 0;
  for (size_t k = 0; k < p->no && rc == 0; k++) {
    const out_item *o = &p->outs[k];
    if (o->begin != written) {
      rc = st_fail(&q->err, "internal error: output item %zu at %" PRIu64 ", expected %" PRIu64,
                   k, written, o->begin);
      break;
    }
    if (o->kind == OUT_COPY) {
      const st_tensor *t = &q->in.t[o->index];
      rc = st_write_copy(&w, &q->in, t);
      written += t->end - t->begin;
    } else {
      rc = write_unit(q, &p->jobs[o->index], &w);
      written += plan_unit_bytes(&p->jobs[o->index]);
    }
  }
  return st_write_end(&w, rc);
}

/* ---- main ------------------------------------------------------------------------------- */

static void quant_free(quant *q) {
  st_close(&q->in);
  plan_free(&q->plan);
  ingot_context_destroy(q->ctx);
  free(q->plan.patterns);
  free(q->plan.gate_up);
}

static int PRINTF_LIKE(1, 2) usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ingot quantize: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(ingot quantize --help for usage)\n");
  va_end(ap);
  return 2;
}

/* Fills q's options; returns 0, or the exit status to return now (-1: 0). */
static int parse_args(quant *q, int argc, char **argv) {
  qplan *p = &q->plan;
  p->patterns = calloc((size_t)argc, sizeof *p->patterns);
  p->gate_up = calloc((size_t)argc, sizeof *p->gate_up);
  if (p->patterns == NULL || p->gate_up == NULL) {
    fprintf(stderr, "ingot quantize: out of memory\n");
    return 1;
  }
  const char *pos[2];
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      print_usage(stdout);
      return -1;
    } else if (strcmp(a, "-p") == 0 || strcmp(a, "--pattern") == 0) {
      if (i + 1 >= argc) return usage_error("%s needs a GLOB", a);
      p->patterns[p->n_patterns++] = argv[++i];
    } else if (strcmp(a, "--gate-up") == 0) {
      if (i + 3 >= argc) return usage_error("%s needs three names: GATE UP OUT", a);
      for (int k = 0; k < 3; k++) p->gate_up[3 * p->n_gate_up + k] = argv[i + 1 + k];
      p->n_gate_up++;
      i += 3;
    } else if (strcmp(a, "--cpu") == 0) {
      q->force_cpu = 1;
    } else if (strcmp(a, "--device") == 0) {
      if (i + 1 >= argc) return usage_error("%s needs a device number", a);
      char *end;
      errno = 0;
      long v = strtol(argv[++i], &end, 10);
      if (errno || *end || end == argv[i] || v < 0 || v > 1024)
        return usage_error("--device: '%s' is not a device number", argv[i]);
      q->device = (int)v;
      q->device_given = 1;
    } else if (strcmp(a, "--dry-run") == 0) {
      q->dry_run = 1;
    } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
      q->quiet = 1;
    } else if (a[0] == '-' && a[1] != '\0') {
      return usage_error("unknown option '%s'", a);
    } else {
      if (npos == 2) return usage_error("unexpected argument '%s' (IN and OUT already given)", a);
      pos[npos++] = a;
    }
  }
  if (npos != 2) return usage_error("%s", "needs IN.safetensors and OUT.safetensors");
  if (q->force_cpu && q->device_given)
    return usage_error("%s", "--cpu and --device exclude each other");
  q->in_path = pos[0];
  q->out_path = pos[1];
  return 0;
}

int quantize_main(int argc, char **argv) {
  quant q;
  memset(&q, 0, sizeof q);
  q.in.fd = -1;
  int status = parse_args(&q, argc, argv);
  if (status != 0) {
    quant_free(&q);
    return status < 0 ? 0 : status;
  }
  int rc = 0;
  if (!host_is_little_endian())
    rc = st_fail(&q.err, "this host is big-endian; safetensors is little-endian");
  if (rc == 0) rc = st_open(&q.in, q.in_path, &q.err);
  if (rc == 0) {
    q.plan.in = &q.in;
    q.plan.log = q.quiet ? NULL : stdout;
    q.plan.err = &q.err;
    rc = plan_build(&q.plan);
  }
  if (rc == 0 && q.plan.n_patterns == 0 && q.plan.n_gate_up == 0)
    fprintf(stderr,
            "ingot quantize: note: no --pattern or --gate-up given: nothing is quantized (OUT is a "
            "copy of IN)\n");
  const qplan *p = &q.plan;
  if (rc == 0 && q.dry_run) {
    for (size_t j = 0; j < p->nj; j++)
      info(&q, "  nvfp4     %s [%" PRId64 ", %" PRId64 "] %s%s\n", p->jobs[j].name,
           p->jobs[j].rows, p->jobs[j].cols, dtype_label(&q, &p->jobs[j]),
           p->jobs[j].src[1] >= 0 ? " (gate/up)" : "");
    info(&q,
         "dry run: %s -> %s: %zu tensors quantized, %zu copied, %" PRIu64
         " bytes; nothing written\n",
         q.in_path, q.out_path, p->nj, p->no - p->nj,
         8 + (uint64_t)p->out_header_len + p->out_data_len);
  } else if (rc == 0) {
    rc = open_backend(&q);
    if (rc == 0) {
      info(&q, "ingot quantize: %s -> %s (%s backend)\n", q.in_path, q.out_path,
           q.cuda ? "cuda" : "cpu");
      rc = write_output(&q);
    }
    if (rc == 0)
      info(&q, "wrote %s: %zu tensors quantized, %zu copied, %" PRIu64 " bytes\n", q.out_path,
           p->nj, p->no - p->nj, 8 + (uint64_t)p->out_header_len + p->out_data_len);
  }
  if (rc != 0) fprintf(stderr, "ingot quantize: error: %s\n", q.err.msg);
  quant_free(&q);
  return rc == 0 ? 0 : 1;
}

#endif /* INGOT_HAVE_CJSON */
