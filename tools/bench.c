/*
 * `ingot bench`: the harness (see bench.h). Option parsing, the run's
 * environment (contexts, stream, device properties, measured copy
 * bandwidths), per-case check / capture / timing, the table and the JSON.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef INGOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- families ------------------------------------------------------------------ */

typedef void (*bench_family_fn)(bench_registry *reg);

/* Every op family's registration function, in table order. A new family
 * adds its function here. */
static const bench_family_fn families[] = {
    bench_ngram_register,
    bench_nvfp4_register,
    bench_nvfp4_gemm_register,
    bench_sampling_register,
    bench_sampling_shard_register,
};

/* ---- repetition counts ------------------------------------------------------------ */

#define GPU_MAX_REPS 200          /* graph replays timed, at most */
#define GPU_MIN_REPS 10
#define GPU_TARGET_S 0.08         /* device time spent timing one case */
#define GPU_QUICK_MAX_REPS 30
#define GPU_QUICK_MIN_REPS 5
#define GPU_QUICK_TARGET_S 0.015
#define HOST_REPS 200             /* eager calls timed for the host cost */
#define HOST_QUICK_REPS 50
#define HOST_SYNC_EVERY 16        /* keep the launch queue short (not timed) */
#define CPU_TARGET_S 0.15         /* wall time spent timing one CPU case */
#define CPU_QUICK_TARGET_S 0.03
#define CPU_MIN_REPS 3
#define CPU_MAX_REPS 1000

/* ---- private state ------------------------------------------------------------------ */

typedef struct alloc_rec {
  void *ptr;
  bench_mem where;
  struct alloc_rec *next;
} alloc_rec;

struct bench_private {
  alloc_rec *case_allocs; /* freed after each case */
  alloc_rec *run_allocs;  /* freed at the end of the run */
  int in_case;
  int capture_mode; /* index into capture_modes */
  char msg[512];
  void (*at_end[8])(bench_env *env);
  int num_at_end;
#ifdef INGOT_WITH_CUDA
  cudaEvent_t events[GPU_MAX_REPS + 1];
  int num_events;
#endif
};

typedef struct bench_case {
  char family[32];
  char op[48];
  char name[160];
  char label[256]; /* "family/op name" */
  bench_ops ops;
  void *params;
  int large; /* runs only with --large */
} bench_case;

struct bench_registry {
  bench_case *cases;
  int count, cap;
  int oom;
};

typedef enum row_status { ROW_OK = 0, ROW_FAILED = 1, ROW_SKIPPED = 2 } row_status;

typedef struct bench_row {
  const bench_case *c;
  row_status status;
  char message[512];
  int launches;     /* kernel nodes in a graph of one call; -1 unknown */
  int slots;
  int reps;         /* timed repetitions (graph replays / CPU calls) */
  int host_reps;
  double time_s;    /* device (or CPU wall) time per call; < 0 unknown */
  double host_s;    /* host wall clock of one eager call; < 0 unknown */
  double bytes_device, bytes_host, floor_extra_s, flops;
  double floor_s;   /* < 0 unknown */
  char floor_note[256];
} bench_row;

static const char *const capture_modes[] = {"global", "thread_local", "relaxed"};

typedef struct bench_options {
  int cpu, quick, list, large;
  int device;
  int capture_mode;
  const char *json;
  const char *filter;
  const char *commit;
} bench_options;

/* ---- messages ---------------------------------------------------------------------- */

static int set_message(bench_env *env, int result, const char *fmt, va_list ap)
    BENCH_PRINTF(3, 0);
static int set_message(bench_env *env, int result, const char *fmt, va_list ap) {
  vsnprintf(env->priv->msg, sizeof env->priv->msg, fmt, ap);
  return result;
}

int bench_fail(bench_env *env, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = set_message(env, BENCH_FAIL, fmt, ap);
  va_end(ap);
  return r;
}

int bench_skip(bench_env *env, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = set_message(env, BENCH_SKIP, fmt, ap);
  va_end(ap);
  return r;
}

int bench_status(bench_env *env, ingot_context_t ctx, ingot_status st, const char *what) {
  if (st == INGOT_STATUS_SUCCESS) return BENCH_OK;
  return bench_fail(env, "%s: %s: %s", what, ingot_status_name(st), ingot_last_error(ctx));
}

#ifdef INGOT_WITH_CUDA
static int cuda_fail(bench_env *env, const char *what, cudaError_t e) {
  cudaGetLastError(); /* clear a non-sticky error */
  return bench_fail(env, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}
#define CUDA_OR_FAIL(env, call)                                  \
  do {                                                           \
    cudaError_t e_ = (call);                                     \
    if (e_ != cudaSuccess) return cuda_fail((env), #call, e_);   \
  } while (0)
#endif

/* ---- time --------------------------------------------------------------------------- */

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int clamp_int(double v, int lo, int hi) {
  if (!(v >= lo)) return lo; /* also NaN */
  if (v > hi) return hi;
  return (int)v;
}

/* ---- random numbers ------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

bench_rng bench_rng_seed(const char *text, uint64_t n) {
  uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a */
  for (const char *p = text ? text : ""; *p; p++) h = (h ^ (uint8_t)*p) * UINT64_C(0x100000001b3);
  bench_rng r = {h ^ (n * UINT64_C(0x9E3779B97F4A7C15))};
  return r;
}

uint64_t bench_rand(bench_rng *r) { return splitmix64(&r->s); }

uint64_t bench_rand_below(bench_rng *r, uint64_t n) {
  if (n <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* rejection: no modulo bias */
  uint64_t v;
  do v = bench_rand(r);
  while (v >= limit);
  return v % n;
}

float bench_normalish(bench_rng *r) {
  double s = 0;
  for (int i = 0; i < 4; i++) s += (double)bench_rand_below(r, 1u << 24) / (double)(1u << 24);
  return (float)((s - 2.0) * 1.7320508075688772); /* sqrt(12 / 4) */
}

uint16_t bench_bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

void bench_rand_fill(bench_rng *r, void *dst, size_t bytes) {
  uint8_t *p = (uint8_t *)dst;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t v = bench_rand(r);
    memcpy(p + i, &v, 8);
  }
  if (i < bytes) {
    uint64_t v = bench_rand(r);
    memcpy(p + i, &v, bytes - i);
  }
}

/* ---- memory -------------------------------------------------------------------------- */

static void free_one(bench_env *env, void *ptr, bench_mem where) {
  if (ptr == NULL) return;
#ifdef INGOT_WITH_CUDA
  if (!env->cpu_mode && where == BENCH_MEM_DEVICE) {
    cudaFree(ptr);
    return;
  }
  if (!env->cpu_mode && where == BENCH_MEM_PINNED) {
    cudaFreeHost(ptr);
    return;
  }
#endif
  (void)env, (void)where;
  free(ptr);
}

static void free_list(bench_env *env, alloc_rec **list) {
  while (*list) {
    alloc_rec *r = *list;
    *list = r->next;
    free_one(env, r->ptr, r->where);
    free(r);
  }
}

static void *alloc_into(bench_env *env, alloc_rec **list, bench_mem where, size_t bytes) {
  static const char *const kind[] = {"device", "pinned host", "host"};
  size_t size = bytes < 256 ? 256 : (bytes + 255) / 256 * 256;
  if (size < bytes) {
    bench_fail(env, "bench_alloc: %zu bytes overflow", bytes);
    return NULL;
  }
  alloc_rec *rec = (alloc_rec *)malloc(sizeof *rec);
  if (rec == NULL) {
    bench_fail(env, "bench_alloc: out of host memory");
    return NULL;
  }
  void *ptr = NULL;
#ifdef INGOT_WITH_CUDA
  if (!env->cpu_mode && where == BENCH_MEM_DEVICE) {
    cudaError_t e = cudaMalloc(&ptr, size);
    if (e != cudaSuccess) ptr = NULL, cudaGetLastError();
  } else if (!env->cpu_mode && where == BENCH_MEM_PINNED) {
    cudaError_t e = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    if (e != cudaSuccess) ptr = NULL, cudaGetLastError();
  } else
#endif
  {
    ptr = aligned_alloc(256, size);
  }
  if (ptr == NULL) {
    free(rec);
    bench_fail(env, "could not allocate %.1f MiB of %s memory", (double)size / 1048576.0,
               kind[where]);
    return NULL;
  }
  rec->ptr = ptr;
  rec->where = where;
  rec->next = *list;
  *list = rec;
  return ptr;
}

void *bench_alloc(bench_env *env, bench_mem where, size_t bytes) {
  return alloc_into(env, env->priv->in_case ? &env->priv->case_allocs : &env->priv->run_allocs,
                    where, bytes);
}

void *bench_alloc_run(bench_env *env, bench_mem where, size_t bytes) {
  return alloc_into(env, &env->priv->run_allocs, where, bytes);
}

int bench_sync(bench_env *env) {
#ifdef INGOT_WITH_CUDA
  if (!env->cpu_mode) CUDA_OR_FAIL(env, cudaStreamSynchronize(env->stream));
#endif
  (void)env;
  return BENCH_OK;
}

int bench_at_end(bench_env *env, void (*fn)(bench_env *env)) {
  struct bench_private *p = env->priv;
  if (p->num_at_end == (int)(sizeof p->at_end / sizeof p->at_end[0]))
    return bench_fail(env, "bench_at_end: more than %d functions", p->num_at_end);
  p->at_end[p->num_at_end++] = fn;
  return BENCH_OK;
}

#ifdef INGOT_WITH_CUDA
static int time_copies(bench_env *env, void *dst, const void *src, size_t bytes, int reps,
                       double *seconds);
#endif

int bench_h2d_rate(bench_env *env, const void *host, size_t bytes, double *bytes_per_s) {
  *bytes_per_s = 0;
#ifdef INGOT_WITH_CUDA
  if (!env->cpu_mode && bytes > 0) {
    void *dev = NULL;
    double t = 0;
    CUDA_OR_FAIL(env, cudaMalloc(&dev, bytes));
    int r = time_copies(env, dev, host, bytes, env->quick ? 3 : 7, &t);
    cudaFree(dev);
    if (r) return r;
    *bytes_per_s = t > 0 ? (double)bytes / t : 0;
  }
#else
  (void)host, (void)bytes;
#endif
  (void)env;
  return BENCH_OK;
}

static int copy_ordered(bench_env *env, void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return BENCH_OK;
#ifdef INGOT_WITH_CUDA
  if (!env->cpu_mode) {
    /* on the bench stream (non-blocking), so it follows the enqueued work */
    CUDA_OR_FAIL(env, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, env->stream));
    CUDA_OR_FAIL(env, cudaStreamSynchronize(env->stream));
    return BENCH_OK;
  }
#endif
  (void)env;
  memcpy(dst, src, bytes);
  return BENCH_OK;
}

int bench_upload(bench_env *env, void *dst, const void *src, size_t bytes) {
  return copy_ordered(env, dst, src, bytes);
}

int bench_download(bench_env *env, void *dst, const void *src, size_t bytes) {
  return copy_ordered(env, dst, src, bytes);
}

int bench_slots_for(const bench_env *env, double bytes_per_slot) {
  double target = 3.0 * (double)env->l2_bytes;
  if (!(bytes_per_slot > 0)) return 1;
  return clamp_int(ceil(target / bytes_per_slot), 1, BENCH_MAX_SLOTS);
}

/* ---- checks ----------------------------------------------------------------------------- */

static uint64_t load_elem(const uint8_t *p, size_t elem_size) {
  uint64_t v = 0;
  memcpy(&v, p, elem_size); /* little-endian hosts */
  return v;
}

int bench_compare_bytes(bench_env *env, const char *what, const void *got, const void *want,
                        size_t bytes, size_t elem_size) {
  if (bytes == 0 || memcmp(got, want, bytes) == 0) return BENCH_OK;
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8) elem_size = 1;
  const uint8_t *g = (const uint8_t *)got, *w = (const uint8_t *)want;
  size_t n = bytes / elem_size, first = n, differ = 0;
  for (size_t i = 0; i < n; i++) {
    if (memcmp(g + i * elem_size, w + i * elem_size, elem_size) != 0) {
      if (first == n) first = i;
      differ++;
    }
  }
  if (first == n) return bench_fail(env, "%s: trailing bytes differ", what);
  int digits = (int)(2 * elem_size);
  return bench_fail(env, "%s: %zu of %zu elements differ from the CPU reference; first at %zu: "
                    "got 0x%0*llx, want 0x%0*llx",
                    what, differ, n, first, digits,
                    (unsigned long long)load_elem(g + first * elem_size, elem_size), digits,
                    (unsigned long long)load_elem(w + first * elem_size, elem_size));
}

/* ---- registry ------------------------------------------------------------------------------- */

static void add_case(bench_registry *reg, const char *family, const char *op, const char *name,
                     const bench_ops *ops, const void *params, size_t params_size, int large) {
  if (reg->count == reg->cap) {
    int cap = reg->cap ? 2 * reg->cap : 64;
    bench_case *cases = (bench_case *)realloc(reg->cases, (size_t)cap * sizeof *cases);
    if (cases == NULL) {
      reg->oom = 1;
      return;
    }
    reg->cases = cases;
    reg->cap = cap;
  }
  bench_case *c = &reg->cases[reg->count];
  memset(c, 0, sizeof *c);
  snprintf(c->family, sizeof c->family, "%s", family);
  snprintf(c->op, sizeof c->op, "%s", op);
  snprintf(c->name, sizeof c->name, "%s", name);
  snprintf(c->label, sizeof c->label, "%s/%s %s", c->family, c->op, c->name);
  c->ops = *ops;
  c->large = large;
  if (params_size) {
    c->params = malloc(params_size);
    if (c->params == NULL) {
      reg->oom = 1;
      return;
    }
    memcpy(c->params, params, params_size);
  }
  reg->count++;
}

void bench_add(bench_registry *reg, const char *family, const char *op, const char *name,
               const bench_ops *ops, const void *params, size_t params_size) {
  add_case(reg, family, op, name, ops, params, params_size, 0);
}

void bench_add_large(bench_registry *reg, const char *family, const char *op, const char *name,
                     const bench_ops *ops, const void *params, size_t params_size) {
  add_case(reg, family, op, name, ops, params, params_size, 1);
}

static void registry_free(bench_registry *reg) {
  for (int i = 0; i < reg->count; i++) free(reg->cases[i].params);
  free(reg->cases);
  memset(reg, 0, sizeof *reg);
}

/* ---- the environment --------------------------------------------------------------------------- */

static void cpu_model_name(char *out, size_t size) {
  snprintf(out, size, "CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *colon = strchr(line, ':');
      if (colon) {
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(out, size, "CPU: %s", colon);
      }
      break;
    }
  }
  fclose(f);
}

/* Median of a few copies of `bytes` between two host buffers: read + written. */
static double measure_memcpy(bench_env *env, size_t bytes) {
  uint8_t *a = (uint8_t *)malloc(bytes), *b = (uint8_t *)malloc(bytes);
  double bw = 0;
  if (a && b) {
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double t[5];
    volatile uint8_t sink = 0;
    for (int i = 0; i < 5; i++) {
      double t0 = bench_now();
      memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
      t[i] = bench_now() - t0;
      sink ^= a[bytes / 2] ^ b[bytes - 1];
    }
    (void)sink;
    bw = 2.0 * (double)bytes / bench_median(t, 5);
  }
  free(a);
  free(b);
  (void)env;
  return bw;
}

#ifdef INGOT_WITH_CUDA
/* Median of reps cudaMemcpyAsync of `bytes` from src to dst between events. */
static int time_copies(bench_env *env, void *dst, const void *src, size_t bytes, int reps,
                       double *seconds) {
  double t[16];
  cudaEvent_t e0 = env->priv->events[0], e1 = env->priv->events[1];
  if (reps > 16) reps = 16;
  CUDA_OR_FAIL(env, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, env->stream)); /* warm */
  for (int i = 0; i < reps; i++) {
    float ms = 0;
    CUDA_OR_FAIL(env, cudaEventRecord(e0, env->stream));
    CUDA_OR_FAIL(env, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, env->stream));
    CUDA_OR_FAIL(env, cudaEventRecord(e1, env->stream));
    CUDA_OR_FAIL(env, cudaEventSynchronize(e1));
    CUDA_OR_FAIL(env, cudaEventElapsedTime(&ms, e0, e1));
    t[i] = (double)ms * 1e-3;
  }
  *seconds = bench_median(t, reps);
  return BENCH_OK;
}

/* bw_device: D2D copy of 1 GiB (read + written); bw_h2d: pinned H2D copy. */
static int measure_gpu_bandwidths(bench_env *env, size_t *d2d_bytes, size_t *h2d_bytes) {
  size_t d2d = env->quick ? ((size_t)256 << 20) : ((size_t)1 << 30);
  size_t h2d = env->quick ? ((size_t)128 << 20) : ((size_t)512 << 20);
  int reps = env->quick ? 5 : 10;
  double t;
  void *a = NULL, *b = NULL, *h = NULL;
  int r = BENCH_FAIL;
  for (; d2d >= ((size_t)64 << 20); d2d /= 2) {
    if (cudaMalloc(&a, d2d) == cudaSuccess && cudaMalloc(&b, d2d) == cudaSuccess) break;
    cudaGetLastError();
    if (a) cudaFree(a);
    a = NULL;
  }
  if (b == NULL) {
    bench_fail(env, "no device memory for the bandwidth measurement");
    goto done;
  }
  if (cudaMemsetAsync(a, 1, d2d, env->stream) != cudaSuccess) goto cuda_error;
  if (time_copies(env, b, a, d2d, reps, &t)) goto done;
  env->bw_device = 2.0 * (double)d2d / t;
  *d2d_bytes = d2d;
  if (h2d > d2d) h2d = d2d;
  if (cudaHostAlloc(&h, h2d, cudaHostAllocDefault) != cudaSuccess) goto cuda_error;
  memset(h, 1, h2d);
  if (time_copies(env, a, h, h2d, reps, &t)) goto done;
  env->bw_h2d = (double)h2d / t;
  *h2d_bytes = h2d;
  r = BENCH_OK;
  goto done;
cuda_error:
  r = cuda_fail(env, "bandwidth measurement", cudaGetLastError());
done:
  if (a) cudaFree(a);
  if (b) cudaFree(b);
  if (h) cudaFreeHost(h);
  return r;
}

static int gpu_env_init(bench_env *env, int device) {
  struct cudaDeviceProp prop;
  env->device = device;
  CUDA_OR_FAIL(env, cudaSetDevice(device));
  CUDA_OR_FAIL(env, cudaGetDeviceProperties(&prop, device));
  snprintf(env->device_name, sizeof env->device_name, "%s", prop.name);
  int driver = 0, runtime = 0;
  CUDA_OR_FAIL(env, cudaDriverGetVersion(&driver));
  CUDA_OR_FAIL(env, cudaRuntimeGetVersion(&runtime));
  snprintf(env->driver, sizeof env->driver, "CUDA driver %d.%d, runtime %d.%d", driver / 1000,
           driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  env->sm_count = prop.multiProcessorCount;
  env->cc_major = prop.major;
  env->cc_minor = prop.minor;
  env->l2_bytes = prop.l2CacheSize > 0 ? (size_t)prop.l2CacheSize : ((size_t)50 << 20);
  env->mem_bytes = prop.totalGlobalMem;
  cudaStream_t s;
  CUDA_OR_FAIL(env, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  env->stream = s;
  for (int i = 0; i <= GPU_MAX_REPS; i++) {
    CUDA_OR_FAIL(env, cudaEventCreate(&env->priv->events[i]));
    env->priv->num_events = i + 1;
  }
  ingot_status st = ingot_context_create(INGOT_BACKEND_CUDA, device, &env->ctx);
  if (st) return bench_status(env, NULL, st, "ingot_context_create(CUDA)");
  return BENCH_OK;
}
#endif

static void env_fini(bench_env *env) {
#ifdef INGOT_WITH_CUDA
  if (!env->cpu_mode && env->stream) cudaStreamSynchronize(env->stream);
#endif
  for (int i = env->priv->num_at_end - 1; i >= 0; i--) env->priv->at_end[i](env);
  env->priv->num_at_end = 0;
  free_list(env, &env->priv->case_allocs);
  free_list(env, &env->priv->run_allocs);
#ifdef INGOT_WITH_CUDA
  if (!env->cpu_mode) {
    for (int i = 0; i < env->priv->num_events; i++) cudaEventDestroy(env->priv->events[i]);
    if (env->stream) cudaStreamDestroy(env->stream);
  }
#endif
  ingot_context_destroy(env->ctx);
  ingot_context_destroy(env->ref);
  env->ctx = env->ref = NULL;
}

/* ---- timing ----------------------------------------------------------------------------------------- */

static int run_status(bench_env *env, ingot_status st, const char *what) {
  return bench_status(env, env->ctx, st, what);
}

/* CPU: median wall clock of one call. */
static int time_cpu(bench_env *env, const bench_case *c, void *state, bench_row *row) {
  double target = env->quick ? CPU_QUICK_TARGET_S : CPU_TARGET_S;
  double t0 = bench_now();
  ingot_status st = c->ops.run(env, state, 0); /* warm */
  double first = bench_now() - t0;
  if (st) return run_status(env, st, "run");
  int reps = clamp_int(target / (first > 1e-9 ? first : 1e-9), CPU_MIN_REPS, CPU_MAX_REPS);
  double *t = (double *)malloc((size_t)reps * sizeof *t);
  if (t == NULL) return bench_fail(env, "out of host memory");
  for (int i = 0; i < reps; i++) {
    double a = bench_now();
    st = c->ops.run(env, state, (i + 1) % row->slots);
    t[i] = bench_now() - a;
    if (st) {
      free(t);
      return run_status(env, st, "run");
    }
  }
  row->time_s = bench_median(t, reps);
  row->reps = reps;
  free(t);
  return BENCH_OK;
}

#ifdef INGOT_WITH_CUDA
/* Captures `calls` calls (slot i % slots) on env->stream, by default in
 * global mode (as PyTorch does): a call that is not capture-safe fails. */
static int capture_calls(bench_env *env, const bench_case *c, void *state, int calls,
                         int slots, cudaGraph_t *graph) {
  static const enum cudaStreamCaptureMode modes[] = {
      cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed};
  *graph = NULL;
  CUDA_OR_FAIL(env, cudaStreamBeginCapture(env->stream, modes[env->priv->capture_mode]));
  ingot_status st = INGOT_STATUS_SUCCESS;
  for (int i = 0; i < calls && st == INGOT_STATUS_SUCCESS; i++)
    st = c->ops.run(env, state, i % slots);
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(env->stream, &g);
  if (st != INGOT_STATUS_SUCCESS || e != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    if (st != INGOT_STATUS_SUCCESS) {
      cudaGetLastError();
      return run_status(env, st, "run during graph capture");
    }
    return cuda_fail(env, "cudaStreamEndCapture", e);
  }
  *graph = g;
  return BENCH_OK;
}

static int count_kernel_nodes(bench_env *env, cudaGraph_t g, int *kernels) {
  size_t n = 0;
  CUDA_OR_FAIL(env, cudaGraphGetNodes(g, NULL, &n));
  *kernels = 0;
  if (n == 0) return BENCH_OK;
  cudaGraphNode_t *nodes = (cudaGraphNode_t *)malloc(n * sizeof *nodes);
  if (nodes == NULL) return bench_fail(env, "out of host memory");
  cudaError_t e = cudaGraphGetNodes(g, nodes, &n);
  for (size_t i = 0; i < n && e == cudaSuccess; i++) {
    enum cudaGraphNodeType type;
    e = cudaGraphNodeGetType(nodes[i], &type);
    if (e == cudaSuccess && type == cudaGraphNodeTypeKernel) ++*kernels;
  }
  free(nodes);
  if (e != cudaSuccess) return cuda_fail(env, "cudaGraphNodeGetType", e);
  return BENCH_OK;
}

static int time_graph(bench_env *env, cudaGraphExec_t exec, bench_row *row) {
  cudaEvent_t *ev = env->priv->events;
  int min_reps = env->quick ? GPU_QUICK_MIN_REPS : GPU_MIN_REPS;
  int max_reps = env->quick ? GPU_QUICK_MAX_REPS : GPU_MAX_REPS;
  double target = env->quick ? GPU_QUICK_TARGET_S : GPU_TARGET_S;
  float ms = 0;
  /* warm up, then one replay to size the repetitions */
  for (int i = 0; i < 3; i++) CUDA_OR_FAIL(env, cudaGraphLaunch(exec, env->stream));
  CUDA_OR_FAIL(env, cudaEventRecord(ev[0], env->stream));
  CUDA_OR_FAIL(env, cudaGraphLaunch(exec, env->stream));
  CUDA_OR_FAIL(env, cudaEventRecord(ev[1], env->stream));
  CUDA_OR_FAIL(env, cudaEventSynchronize(ev[1]));
  CUDA_OR_FAIL(env, cudaEventElapsedTime(&ms, ev[0], ev[1]));
  double one = (double)ms * 1e-3;
  int reps = clamp_int(target / (one > 1e-7 ? one : 1e-7), min_reps, max_reps);
  /* back to back, so the GPU never idles between replays: two replays
   * ahead of the first event keep the queue fed */
  CUDA_OR_FAIL(env, cudaGraphLaunch(exec, env->stream));
  CUDA_OR_FAIL(env, cudaGraphLaunch(exec, env->stream));
  CUDA_OR_FAIL(env, cudaEventRecord(ev[0], env->stream));
  for (int i = 0; i < reps; i++) {
    CUDA_OR_FAIL(env, cudaGraphLaunch(exec, env->stream));
    CUDA_OR_FAIL(env, cudaEventRecord(ev[i + 1], env->stream));
  }
  CUDA_OR_FAIL(env, cudaEventSynchronize(ev[reps]));
  double t[GPU_MAX_REPS];
  for (int i = 0; i < reps; i++) {
    CUDA_OR_FAIL(env, cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    t[i] = (double)ms * 1e-3 / BENCH_GRAPH_CALLS;
  }
  row->time_s = bench_median(t, reps);
  row->reps = reps;
  return BENCH_OK;
}

/* Host cost of one eager call: wall clock around the enqueue only. */
static int time_host(bench_env *env, const bench_case *c, void *state, bench_row *row) {
  int reps = env->quick ? HOST_QUICK_REPS : HOST_REPS;
  double t[HOST_REPS];
  for (int i = 0; i < reps; i++) {
    if (i % HOST_SYNC_EVERY == 0) CUDA_OR_FAIL(env, cudaStreamSynchronize(env->stream));
    double a = bench_now();
    ingot_status st = c->ops.run(env, state, i % row->slots);
    t[i] = bench_now() - a;
    if (st) return run_status(env, st, "eager run");
  }
  CUDA_OR_FAIL(env, cudaStreamSynchronize(env->stream));
  row->host_s = bench_median(t, reps);
  row->host_reps = reps;
  return BENCH_OK;
}

static int time_gpu(bench_env *env, const bench_case *c, void *state, bench_row *row) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  int r = capture_calls(env, c, state, 1, row->slots, &g);
  if (r) return r;
  r = count_kernel_nodes(env, g, &row->launches);
  cudaGraphDestroy(g);
  if (r) return r;
  if ((r = capture_calls(env, c, state, BENCH_GRAPH_CALLS, row->slots, &g))) return r;
  cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  if (e != cudaSuccess) return cuda_fail(env, "cudaGraphInstantiate", e);
  r = time_graph(env, exec, row);
  cudaStreamSynchronize(env->stream);
  cudaGraphExecDestroy(exec);
  if (r) return r;
  return time_host(env, c, state, row);
}
#endif

/* ---- one case ------------------------------------------------------------------------------------------ */

static int device_errors(bench_env *env, const char *when) {
  ingot_status st = ingot_context_check_device_errors(env->ctx, env->stream);
  if (st == INGOT_STATUS_SUCCESS) return BENCH_OK;
  return bench_fail(env, "device error after %s: %s: %s", when, ingot_status_name(st),
                    ingot_last_error(env->ctx));
}

static void run_case(bench_env *env, const bench_case *c, bench_row *row) {
  memset(row, 0, sizeof *row);
  row->c = c;
  row->launches = -1;
  row->time_s = row->host_s = row->floor_s = -1;
  env->priv->in_case = 1;
  env->priv->msg[0] = '\0';

  bench_info info;
  memset(&info, 0, sizeof info);
  void *state = NULL;
  int r = c->ops.setup(env, c->params, &state, &info);
  if (r != BENCH_OK) {
    row->status = r == BENCH_SKIP ? ROW_SKIPPED : ROW_FAILED;
    if (r != BENCH_SKIP && env->priv->msg[0] == '\0') bench_fail(env, "setup failed");
    goto done;
  }
  row->slots = info.slots < 1 ? 1 : info.slots > BENCH_MAX_SLOTS ? BENCH_MAX_SLOTS : info.slots;
  row->bytes_device = info.bytes_device;
  row->bytes_host = info.bytes_host;
  row->floor_extra_s = info.floor_extra_s;
  row->flops = info.flops;
  snprintf(row->floor_note, sizeof row->floor_note, "%s", info.floor_note);
  {
    double f = info.floor_extra_s > 0 ? info.floor_extra_s : 0;
    if (env->bw_device > 0 && info.bytes_device / env->bw_device > f)
      f = info.bytes_device / env->bw_device;
    if (env->bw_h2d > 0 && info.bytes_host / env->bw_h2d > f) f = info.bytes_host / env->bw_h2d;
    row->floor_s = f > 0 ? f : -1;
  }

  r = c->ops.check(env, state);
  if (r == BENCH_OK) r = device_errors(env, "the check");
  if (r == BENCH_OK) {
#ifdef INGOT_WITH_CUDA
    r = env->cpu_mode ? time_cpu(env, c, state, row) : time_gpu(env, c, state, row);
#else
    r = time_cpu(env, c, state, row);
#endif
    if (r == BENCH_OK) r = device_errors(env, "timing");
  }
  row->status = r == BENCH_OK ? ROW_OK : r == BENCH_SKIP ? ROW_SKIPPED : ROW_FAILED;
  if (r != BENCH_OK && env->priv->msg[0] == '\0') bench_fail(env, "check failed");
  bench_sync(env);
  if (c->ops.teardown) c->ops.teardown(env, state);
done:
  snprintf(row->message, sizeof row->message, "%s", r == BENCH_OK ? "" : env->priv->msg);
  free_list(env, &env->priv->case_allocs);
  env->priv->in_case = 0;
}

/* ---- output ------------------------------------------------------------------------------------------------ */

static void iso_date(char *out, size_t size) {
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void print_header(const bench_env *env, const char *date, const char *note,
                         size_t d2d_bytes, size_t h2d_bytes) {
  const char *capture = capture_modes[env->priv->capture_mode];
  printf("ingot bench: ingot %s, commit %s, %s\n", ingot_version(), env->commit, date);
  if (env->cpu_mode) {
    printf("device : %s (CPU reference backend%s)\n", env->device_name, note);
    printf("floors : host memcpy %.1f GB/s (bytes read + written); used for every floor\n",
           env->bw_device * 1e-9);
    printf("timing : CPU TIMINGS: median wall clock of one call on the CPU backend; these "
           "are not GPU numbers\n");
    printf("check  : the CPU backend against the CPU reference, i.e. against itself: these "
           "rows check the harness and the cases, not a GPU kernel\n");
  } else {
    printf("device : %s, %d SMs, cc %d.%d, L2 %.0f MiB, %.1f GiB; %s\n", env->device_name,
           env->sm_count, env->cc_major, env->cc_minor, (double)env->l2_bytes / 1048576.0,
           (double)env->mem_bytes / 1073741824.0, env->driver);
    printf("floors : D2D copy %.1f GB/s (bytes read + written, %zu MiB copy); pinned H2D "
           "%.1f GB/s (%zu MiB copy)\n",
           env->bw_device * 1e-9, d2d_bytes >> 20, env->bw_h2d * 1e-9, h2d_bytes >> 20);
    printf("timing : us/call = median over CUDA-graph replays of %d calls (inputs rotated "
           "over 'slots' sets; capture mode %s) / %d; host us = median wall clock of one "
           "eager call (enqueue only); launch = kernel nodes in a graph of one call\n",
           BENCH_GRAPH_CALLS, capture, BENCH_GRAPH_CALLS);
  }
  printf("floor  : max(device bytes / D2D rate, host bytes / H2D rate); %%floor = floor / "
         "measured time\n\n");
}

static void print_columns(const bench_env *env, int width) {
  printf("%-*s %6s %10s %9s %9s %7s %8s %7s %5s  %s\n", width, "case", "launch",
         env->cpu_mode ? "cpu us" : "us/call", "host us", "floor us", "%floor", "GB/s", "TF/s",
         "slots", "check");
}

static void print_row(const bench_env *env, const bench_row *row, int width) {
  char launch[16] = "-", t[24] = "-", host[24] = "-", floor_us[24] = "-", frac[24] = "-",
       gbs[24] = "-", tfs[24] = "-";
  if (row->launches >= 0) snprintf(launch, sizeof launch, "%d", row->launches);
  if (row->time_s >= 0) snprintf(t, sizeof t, "%.2f", row->time_s * 1e6);
  if (row->host_s >= 0) snprintf(host, sizeof host, "%.2f", row->host_s * 1e6);
  if (row->floor_s >= 0) snprintf(floor_us, sizeof floor_us, "%.3f", row->floor_s * 1e6);
  if (row->floor_s >= 0 && row->time_s > 0)
    snprintf(frac, sizeof frac, "%.1f%%", 100.0 * row->floor_s / row->time_s);
  if (row->time_s > 0 && row->bytes_device + row->bytes_host > 0)
    snprintf(gbs, sizeof gbs, "%.1f", (row->bytes_device + row->bytes_host) / row->time_s * 1e-9);
  if (row->time_s > 0 && row->flops > 0)
    snprintf(tfs, sizeof tfs, "%.1f", row->flops / row->time_s * 1e-12);
  const char *check = row->status == ROW_OK ? "ok" : row->status == ROW_SKIPPED ? "skipped" : "FAILED";
  (void)env;
  printf("%-*s %6s %10s %9s %9s %7s %8s %7s %5d  %s\n", width, row->c->label, launch, t, host,
         floor_us, frac, gbs, tfs, row->slots, check);
  if (row->message[0]) printf("    %s: %s\n", check, row->message);
  fflush(stdout);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

static void json_number(FILE *f, double v) {
  if (v < 0 || !isfinite(v))
    fputs("null", f);
  else
    fprintf(f, "%.6g", v);
}

static int write_json(const char *path, const bench_env *env, const char *date,
                      const bench_row *rows, int n, int failed, int skipped) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "ingot bench: cannot write %s\n", path);
    return 1;
  }
  fprintf(f, "{\n  \"tool\": \"ingot bench\",\n  \"ingot_version\": ");
  json_string(f, ingot_version());
  fprintf(f, ",\n  \"commit\": ");
  json_string(f, env->commit);
  fprintf(f, ",\n  \"date\": ");
  json_string(f, date);
  fprintf(f, ",\n  \"mode\": \"%s\",\n  \"quick\": %s,\n", env->cpu_mode ? "cpu" : "cuda",
          env->quick ? "true" : "false");
  fprintf(f, "  \"machine\": {\n    \"device_name\": ");
  json_string(f, env->device_name);
  fprintf(f, ",\n    \"driver\": ");
  json_string(f, env->driver);
  fprintf(f, ",\n    \"sm_count\": %d,\n    \"compute_capability\": \"%d.%d\",\n",
          env->sm_count, env->cc_major, env->cc_minor);
  fprintf(f, "    \"l2_bytes\": %zu,\n    \"memory_bytes\": %zu,\n", env->l2_bytes,
          env->mem_bytes);
  fprintf(f, "    \"copy_bandwidth_bytes_per_s\": ");
  json_number(f, env->bw_device);
  fprintf(f, ",\n    \"copy_bandwidth_method\": \"%s\",\n",
          env->cpu_mode ? "host memcpy, bytes read + written"
                        : "cudaMemcpyAsync device to device, bytes read + written");
  fprintf(f, "    \"h2d_bandwidth_bytes_per_s\": ");
  json_number(f, env->cpu_mode ? -1 : env->bw_h2d);
  fprintf(f, "\n  },\n  \"timing\": {\n    \"graph_calls\": %d,\n    \"capture_mode\": \"%s\",\n"
          "    \"method\": \"%s\"\n  },\n",
          BENCH_GRAPH_CALLS, env->cpu_mode ? "none" : capture_modes[env->priv->capture_mode],
          env->cpu_mode ? "CPU backend: median wall clock of one call"
                        : "device: median over CUDA-graph replays / graph_calls; host: "
                          "median wall clock of one eager enqueue");
  fprintf(f, "  \"summary\": {\"cases\": %d, \"failed\": %d, \"skipped\": %d},\n", n, failed,
          skipped);
  fprintf(f, "  \"cases\": [");
  for (int i = 0; i < n; i++) {
    const bench_row *r = &rows[i];
    fprintf(f, "%s\n    {\"family\": ", i ? "," : "");
    json_string(f, r->c->family);
    fprintf(f, ", \"op\": ");
    json_string(f, r->c->op);
    fprintf(f, ", \"name\": ");
    json_string(f, r->c->name);
    fprintf(f, ",\n     \"status\": \"%s\", \"message\": ",
            r->status == ROW_OK ? "ok" : r->status == ROW_SKIPPED ? "skipped" : "failed");
    json_string(f, r->message);
    fprintf(f, ",\n     \"launches\": ");
    if (r->launches >= 0)
      fprintf(f, "%d", r->launches);
    else
      fputs("null", f);
    fprintf(f, ", \"slots\": %d, \"reps\": %d, \"host_reps\": %d,\n     \"time_s\": ", r->slots,
            r->reps, r->host_reps);
    json_number(f, r->time_s);
    fprintf(f, ", \"host_s\": ");
    json_number(f, r->host_s);
    fprintf(f, ",\n     \"floor_bytes_device\": ");
    json_number(f, r->bytes_device);
    fprintf(f, ", \"floor_bytes_host\": ");
    json_number(f, r->bytes_host);
    fprintf(f, ", \"floor_extra_s\": ");
    json_number(f, r->floor_extra_s > 0 ? r->floor_extra_s : -1);
    fprintf(f, ", \"flops\": ");
    json_number(f, r->flops > 0 ? r->flops : -1);
    fprintf(f, ", \"floor_s\": ");
    json_number(f, r->floor_s);
    fprintf(f, ", \"floor_fraction\": ");
    json_number(f, r->floor_s >= 0 && r->time_s > 0 ? r->floor_s / r->time_s : -1);
    fprintf(f, ",\n     \"floor_note\": ");
    json_string(f, r->floor_note);
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n}\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    fprintf(stderr, "ingot bench: error writing %s\n", path);
    return 1;
  }
  return 0;
}

/* ---- options ------------------------------------------------------------------------------------------------ */

static void bench_usage(FILE *f) {
  fprintf(f,
          "usage: ingot bench [options]\n"
          "\n"
          "Checks every case against the CPU reference (byte-identical where the math\n"
          "allows), then times it: on the GPU with CUDA graphs and events, else (or\n"
          "with --cpu) on the CPU backend with the wall clock. Exit status 0 only if\n"
          "every check passed, 1 if one failed, 2 on a usage error.\n"
          "\n"
          "options:\n"
          "  --filter SUBSTR  run only cases whose \"family/op name\" contains SUBSTR\n"
          "  --json FILE      also write every row and the machine info as JSON\n"
          "  --commit REV     the source revision being measured, recorded in the\n"
          "                   header and the JSON (make bench passes git's)\n"
          "  --quick          fewer repetitions (a smoke run)\n"
          "  --large          also run the long, memory-hungry cases (real-size PLE\n"
          "                   host tables, 51 GB each; --list marks them)\n"
          "  --cpu            time the CPU backend even if a GPU is present\n"
          "  --device N       CUDA device ordinal (default 0)\n"
          "  --capture MODE   stream capture mode for the timed graphs: global\n"
          "                   (default, the strictest), thread_local or relaxed\n"
          "  --list           print the case names and exit\n"
          "  -h, --help       this text\n");
}

/* "--opt value" or "--opt=value"; returns the value or NULL (usage error). */
static const char *option_value(int argc, char **argv, int *i, const char *opt) {
  size_t len = strlen(opt);
  const char *a = argv[*i];
  if (strncmp(a, opt, len) != 0) return NULL;
  if (a[len] == '=') return a + len + 1;
  if (a[len] == '\0' && *i + 1 < argc) return argv[++*i];
  return NULL;
}

static int is_option(const char *arg, const char *opt) {
  size_t len = strlen(opt);
  return strncmp(arg, opt, len) == 0 && (arg[len] == '\0' || arg[len] == '=');
}

static int parse_options(int argc, char **argv, bench_options *o) {
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      bench_usage(stdout);
      return -1;
    } else if (strcmp(a, "--cpu") == 0) {
      o->cpu = 1;
    } else if (strcmp(a, "--quick") == 0) {
      o->quick = 1;
    } else if (strcmp(a, "--list") == 0) {
      o->list = 1;
    } else if (strcmp(a, "--large") == 0) {
      o->large = 1;
    } else if (is_option(a, "--json")) {
      if ((o->json = option_value(argc, argv, &i, "--json")) == NULL || !o->json[0]) goto bad;
    } else if (is_option(a, "--commit")) {
      if ((o->commit = option_value(argc, argv, &i, "--commit")) == NULL || !o->commit[0])
        goto bad;
    } else if (is_option(a, "--filter")) {
      if ((o->filter = option_value(argc, argv, &i, "--filter")) == NULL) goto bad;
    } else if (is_option(a, "--capture")) {
      const char *v = option_value(argc, argv, &i, "--capture");
      int m = -1;
      for (int k = 0; v && k < 3; k++)
        if (strcmp(v, capture_modes[k]) == 0) m = k;
      if (m < 0) goto bad;
      o->capture_mode = m;
    } else if (is_option(a, "--device")) {
      const char *v = option_value(argc, argv, &i, "--device");
      char *end;
      long d = v ? strtol(v, &end, 10) : -1;
      if (v == NULL || *v == '\0' || *end != '\0' || d < 0 || d > 1024) goto bad;
      o->device = (int)d;
    } else {
      fprintf(stderr, "ingot bench: unknown option '%s'\n", a);
      bench_usage(stderr);
      return 2;
    }
    continue;
  bad:
    fprintf(stderr, "ingot bench: option '%s' needs a valid value\n", a);
    bench_usage(stderr);
    return 2;
  }
  return 0;
}

/* ---- main -------------------------------------------------------------------------------------------------- */

int bench_main(int argc, char **argv) {
  bench_options opt;
  int pr = parse_options(argc, argv, &opt);
  if (pr < 0) return 0;
  if (pr) return pr;

  bench_registry reg;
  memset(&reg, 0, sizeof reg);
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) families[i](&reg);
  if (reg.oom) {
    fprintf(stderr, "ingot bench: out of memory\n");
    registry_free(&reg);
    return 1;
  }

  int *selected = (int *)malloc((size_t)(reg.count ? reg.count : 1) * sizeof *selected);
  int n = 0, width = 4;
  if (selected == NULL) {
    registry_free(&reg);
    return 1;
  }
  for (int i = 0; i < reg.count; i++) {
    if (opt.filter && !strstr(reg.cases[i].label, opt.filter)) continue;
    if (reg.cases[i].large && !opt.large && !opt.list) continue;
    selected[n++] = i;
    int len = (int)strlen(reg.cases[i].label);
    if (len > width) width = len;
  }
  if (opt.list) {
    for (int i = 0; i < n; i++)
      printf("%s%s\n", reg.cases[selected[i]].label,
             reg.cases[selected[i]].large ? "   (--large)" : "");
    free(selected);
    registry_free(&reg);
    return 0;
  }
  if (n == 0) {
    fprintf(stderr,
            "ingot bench: no case matches --filter '%s' (see ingot bench --list; the cases "
            "it marks (--large) run only with --large)\n",
            opt.filter ? opt.filter : "");
    free(selected);
    registry_free(&reg);
    return 2;
  }

  struct bench_private priv;
  memset(&priv, 0, sizeof priv);
  bench_env env;
  memset(&env, 0, sizeof env);
  env.priv = &priv;
  env.quick = opt.quick;
  env.large = opt.large;
  env.commit = opt.commit ? opt.commit : "unknown";
  priv.capture_mode = opt.capture_mode;
  const char *note = "";
  int status = 0;
  size_t d2d_bytes = 0, h2d_bytes = 0;

  int have_gpu = ingot_backend_available(INGOT_BACKEND_CUDA);
  env.cpu_mode = opt.cpu || !have_gpu;
  if (!env.cpu_mode) {
#ifdef INGOT_WITH_CUDA
    if (gpu_env_init(&env, opt.device) != BENCH_OK ||
        measure_gpu_bandwidths(&env, &d2d_bytes, &h2d_bytes) != BENCH_OK) {
      fprintf(stderr, "ingot bench: GPU set-up failed: %s\n", priv.msg);
      status = 1;
      goto out;
    }
#endif
  } else {
    note = opt.cpu ? ", --cpu" : have_gpu ? "" : ", no usable CUDA device";
    cpu_model_name(env.device_name, sizeof env.device_name);
    env.l2_bytes = (size_t)32 << 20;
    ingot_status st = ingot_context_create(INGOT_BACKEND_CPU, 0, &env.ctx);
    if (st) {
      fprintf(stderr, "ingot bench: %s\n", ingot_last_error(NULL));
      status = 1;
      goto out;
    }
    env.bw_device = env.bw_h2d = measure_memcpy(&env, (env.quick ? 64u : 256u) << 20);
  }
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &env.ref) != INGOT_STATUS_SUCCESS) {
    fprintf(stderr, "ingot bench: %s\n", ingot_last_error(NULL));
    status = 1;
    goto out;
  }

  char date[64];
  iso_date(date, sizeof date);
  print_header(&env, date, note, d2d_bytes, h2d_bytes);
  print_columns(&env, width);

  bench_row *rows = (bench_row *)calloc((size_t)n, sizeof *rows);
  if (rows == NULL) {
    status = 1;
    goto out;
  }
  int failed = 0, skipped = 0;
  double t0 = bench_now();
  for (int i = 0; i < n; i++) {
    run_case(&env, &reg.cases[selected[i]], &rows[i]);
    failed += rows[i].status == ROW_FAILED;
    skipped += rows[i].status == ROW_SKIPPED;
    print_row(&env, &rows[i], width);
  }
  printf("\n%d cases: %d passed, %d FAILED, %d skipped (%.1f s)%s\n", n, n - failed - skipped,
         failed, skipped, bench_now() - t0,
         env.cpu_mode ? "; timings are CPU timings" : "");
  if (failed) status = 1;
  if (opt.json) {
    if (write_json(opt.json, &env, date, rows, n, failed, skipped))
      status = 1;
    else
      printf("wrote %s\n", opt.json);
  }
  free(rows);

out:
  env_fini(&env);
  free(selected);
  registry_free(&reg);
  return status;
}
