/*
 * `ingot bench`: a small benchmark harness shared by every op family.
 *
 * A family (tools/bench_<family>.c) registers cases. A case is a name plus
 * four callbacks and a parameter blob; the harness owns everything else:
 * memory of the right kind for the mode, the check-before-timing order, CUDA
 * graph capture, timing, floors, the table and the JSON file.
 *
 * For every selected case the harness does, in this order:
 *   1. setup     allocate (bench_alloc), fill inputs, state the floor in
 *                *info (bytes through device memory, bytes over host->device,
 *                optional extra floor) and the number of input slots.
 *   2. check     run the op once on env->ctx and once on the CPU reference
 *                env->ref, compare (bench_compare_bytes). Fails -> row FAILED,
 *                no timing, exit status 1 at the end.
 *   3. timing    GPU: capture one call in a CUDA graph and count its kernel
 *                nodes (launches per call); capture BENCH_GRAPH_CALLS calls
 *                (slot i % slots for call i, so a large working set does not
 *                sit in L2), warm up, replay many times between CUDA events,
 *                median / BENCH_GRAPH_CALLS = device time per call; then the
 *                median wall clock of one eager call (host enqueue cost).
 *                CPU: median wall clock of one call.
 *   4. teardown  free what setup allocated outside bench_alloc (may be NULL);
 *                then the harness frees the case's bench_alloc memory.
 *
 * The floor of a call is max(bytes_device / bw_device, bytes_host / bw_h2d,
 * floor_extra_s), with bw_device the measured device-to-device copy rate
 * (bytes read + written per second) and bw_h2d the measured pinned
 * host-to-device copy rate; the table shows floor / measured time.
 *
 * Usage sketch (a family file):
 *
 *     typedef struct { int64_t n; } my_params;
 *     typedef struct { int64_t n; int slots; void *x, *y; uint8_t *hx; } my_state;
 *
 *     static int my_setup(bench_env *env, const void *params, void **state,
 *                         bench_info *info) {
 *       const my_params *p = params;
 *       my_state *s = bench_alloc(env, BENCH_MEM_HOST, sizeof *s);
 *       if (!s) return BENCH_FAIL;              // message already set
 *       s->n = p->n;
 *       s->slots = bench_slots_for(env, 2.0 * p->n);
 *       s->x = bench_alloc(env, BENCH_MEM_DEVICE, s->slots * p->n);
 *       ...fill host copies with bench_rng, bench_upload(env, s->x, s->hx, bytes)...
 *       info->slots = s->slots;
 *       info->bytes_device = 2.0 * p->n;        // read n + write n
 *       snprintf(info->floor_note, sizeof info->floor_note, "x read + y written");
 *       *state = s;
 *       return BENCH_OK;
 *     }
 *     static ingot_status my_run(bench_env *env, void *state, int slot) {
 *       my_state *s = state;                    // enqueue exactly one call
 *       return ingot_my_op(env->ctx, ..., env->stream);
 *     }
 *     static int my_check(bench_env *env, void *state) {
 *       ...run once on env->ctx, bench_download(); run on env->ref with host
 *       copies; return bench_compare_bytes(env, "y", got, want, bytes, 2);
 *     }
 *     static const bench_ops my_ops = {my_setup, my_run, my_check, NULL};
 *
 *     void bench_my_register(bench_registry *reg) {
 *       my_params p = {1 << 20};
 *       bench_add(reg, "myfam", "my_op", "n=1M", &my_ops, &p, sizeof p);
 *     }
 *
 * and one line in bench.c's family list plus the file in tools/CMakeLists.txt.
 */
#ifndef INGOT_TOOLS_BENCH_H
#define INGOT_TOOLS_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "ingot/ingot.h"

#define BENCH_GRAPH_CALLS 20 /* K: calls captured in each timed CUDA graph */
#define BENCH_MAX_SLOTS 20   /* input sets a case may rotate among (<= K) */

/* Callback results. */
enum { BENCH_OK = 0, BENCH_FAIL = 1, BENCH_SKIP = 2 };

/* Where bench_alloc puts memory. In CPU mode all three are host memory. */
typedef enum bench_mem {
  BENCH_MEM_DEVICE = 0, /* cudaMalloc                                       */
  BENCH_MEM_PINNED = 1, /* cudaHostAlloc: host memory the GPU reads over UVA */
  BENCH_MEM_HOST = 2    /* plain host memory (reference copies, state)       */
} bench_mem;

struct bench_private;

/* The run's environment. Cases read it; only the harness writes it. */
typedef struct bench_env {
  int cpu_mode;                /* 1: the CPU backend is timed (wall clock) */
  int quick;                   /* --quick: fewer repetitions */
  int large;                   /* --large: the cases of bench_add_large run too */
  ingot_context_t ctx;         /* the backend under test (CUDA; CPU in cpu_mode) */
  ingot_context_t ref;         /* the CPU reference backend (the oracle) */
  struct CUstream_st *stream;  /* stream for ops on ctx; NULL in cpu_mode */
  int device;                  /* CUDA device ordinal (0 in cpu_mode) */
  char device_name[256];       /* GPU name, or "CPU" */
  char driver[64];             /* CUDA driver and runtime versions ("" in cpu_mode) */
  const char *commit;          /* --commit: the source revision measured (or "unknown") */
  int sm_count;                /* 0 in cpu_mode */
  int cc_major, cc_minor;      /* compute capability; 0 in cpu_mode */
  size_t l2_bytes;             /* last-level cache the rotation should defeat */
  size_t mem_bytes;            /* device (or host) memory size */
  double bw_device;            /* bytes/s: D2D copy, read + written (cpu: memcpy) */
  double bw_h2d;               /* bytes/s: pinned H2D copy (cpu: = bw_device) */
  struct bench_private *priv;  /* harness internals */
} bench_env;

/* What setup tells the harness about a case. Zeroed before setup. */
typedef struct bench_info {
  int slots;             /* input sets run() rotates among, 1..BENCH_MAX_SLOTS (0 -> 1) */
  double bytes_device;   /* least bytes one call moves through device memory */
  double bytes_host;     /* least bytes one call reads over host->device (UVA) */
  double floor_extra_s;  /* another lower bound in seconds (e.g. FLOPs / rate), or 0 */
  double flops;          /* floating-point operations of one call (TF/s column), or 0 */
  char floor_note[256];  /* what the floor counts, for people and the JSON */
} bench_info;

typedef struct bench_ops {
  /* Allocate and fill; *state is passed to the other callbacks. Returns
   * BENCH_OK, BENCH_SKIP (e.g. not enough memory; say why with bench_skip)
   * or BENCH_FAIL (bench_fail). */
  int (*setup)(bench_env *env, const void *params, void **state, bench_info *info);
  /* Enqueue exactly one call of the op on env->ctx / env->stream using input
   * set `slot` (0 <= slot < info->slots). No sync, no allocation: it is
   * captured in a CUDA graph. Returns the op's status. */
  ingot_status (*run)(bench_env *env, void *state, int slot);
  /* Run the op on env->ctx and on env->ref, compare. BENCH_OK or BENCH_FAIL. */
  int (*check)(bench_env *env, void *state);
  /* Optional (NULL): release what setup got outside bench_alloc. */
  void (*teardown)(bench_env *env, void *state);
} bench_ops;

typedef struct bench_registry bench_registry;

/* Registers a case. `name` is the geometry ("real H=16 decode B=64 T=64");
 * --filter matches "family/op name". params (params_size bytes) is copied. */
void bench_add(bench_registry *reg, const char *family, const char *op, const char *name,
               const bench_ops *ops, const void *params, size_t params_size);
/* The same for a case that runs only with --large (long or memory-hungry:
 * e.g. tables of real size); --list marks it. */
void bench_add_large(bench_registry *reg, const char *family, const char *op, const char *name,
                     const bench_ops *ops, const void *params, size_t params_size);

/* ---- families ---------------------------------------------------------------
 * One registration function per op family; bench.c calls each in turn. A new
 * family declares its function here and adds it to `families` in bench.c. */
void bench_ngram_register(bench_registry *reg); /* tools/bench_ngram.c */
void bench_nvfp4_register(bench_registry *reg); /* tools/bench_nvfp4.c */
void bench_nvfp4_gemm_register(bench_registry *reg); /* tools/bench_nvfp4_gemm.c */
void bench_sampling_register(bench_registry *reg); /* tools/bench_sampling.c */
void bench_sampling_shard_register(bench_registry *reg); /* tools/bench_sampling_shard.c */

/* ---- messages --------------------------------------------------------------- */

#if defined(__GNUC__)
#define BENCH_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BENCH_PRINTF(f, a)
#endif

/* Set the current case's message; return BENCH_FAIL / BENCH_SKIP. */
int bench_fail(bench_env *env, const char *fmt, ...) BENCH_PRINTF(2, 3);
int bench_skip(bench_env *env, const char *fmt, ...) BENCH_PRINTF(2, 3);
/* BENCH_OK if st is success, else BENCH_FAIL with "what: STATUS: last error of ctx". */
int bench_status(bench_env *env, ingot_context_t ctx, ingot_status st, const char *what);

/* ---- memory ------------------------------------------------------------------ */

/* `bytes` (>= 0; at least 256 are reserved), 256-byte aligned, owned by the
 * current case (freed after teardown). Outside a case (family-wide caches),
 * memory lives until the run ends. NULL on failure, with the message set. */
void *bench_alloc(bench_env *env, bench_mem where, size_t bytes);
/* Same, always owned by the run (shared between a family's cases). */
void *bench_alloc_run(bench_env *env, bench_mem where, size_t bytes);
/* Host -> bench memory and bench memory -> host; ordered after everything
 * enqueued on env->stream and complete on return. BENCH_OK or BENCH_FAIL. */
int bench_upload(bench_env *env, void *dst, const void *src, size_t bytes);
int bench_download(bench_env *env, void *dst, const void *src, size_t bytes);
/* Calls fn(env) once when the run ends, after the stream is idle and before
 * the contexts are destroyed: for a family's resources that are not
 * bench_alloc memory (e.g. host tables). At most 8. BENCH_OK or BENCH_FAIL. */
int bench_at_end(bench_env *env, void (*fn)(bench_env *env));
/* *bytes_per_s <- the rate of a host-to-device copy of `bytes` from `host`
 * (pinned or registered memory) into a device buffer, median of a few;
 * 0 in cpu_mode. BENCH_OK or BENCH_FAIL. */
int bench_h2d_rate(bench_env *env, const void *host, size_t bytes, double *bytes_per_s);
/* Waits for env->stream. BENCH_OK or BENCH_FAIL (CUDA error). */
int bench_sync(bench_env *env);

/* How many input slots (1..BENCH_MAX_SLOTS) rotate a working set of
 * bytes_per_slot out of the last-level cache (about 3x its size in all). */
int bench_slots_for(const bench_env *env, double bytes_per_slot);

/* ---- checks ------------------------------------------------------------------- */

/* memcmp; on a difference, BENCH_FAIL naming the first differing element
 * (elem_size 1, 2, 4 or 8 bytes) and how many elements differ. */
int bench_compare_bytes(bench_env *env, const char *what, const void *got, const void *want,
                        size_t bytes, size_t elem_size);

/* ---- random numbers (deterministic per seed) ---------------------------------- */

typedef struct bench_rng {
  uint64_t s;
} bench_rng;

/* A generator seeded from a string (e.g. the case name) and a number. */
bench_rng bench_rng_seed(const char *text, uint64_t n);
uint64_t bench_rand(bench_rng *r);
/* Uniform in [0, n), n >= 1. */
uint64_t bench_rand_below(bench_rng *r, uint64_t n);
/* bytes of random bytes. */
void bench_rand_fill(bench_rng *r, void *dst, size_t bytes);
/* Mean 0, variance 1, within +-3.5: four 24-bit uniforms summed (Irwin-Hall), scaled. */
float bench_normalish(bench_rng *r);
/* The bf16 nearest (ties to even) to a finite float, as bits. */
uint16_t bench_bf16_of(float f);

/* ---- time --------------------------------------------------------------------- */

/* Monotonic wall clock in seconds. */
double bench_now(void);
/* Median of v[0..n-1] (reorders v). n >= 1. */
double bench_median(double *v, int n);

/* ---- entry point ---------------------------------------------------------------- */

/* `ingot bench [options]`: argv[0] is "bench". Returns the exit status:
 * 0 every check passed, 1 a check (or setup) failed, 2 usage error. */
int bench_main(int argc, char **argv);

#endif /* INGOT_TOOLS_BENCH_H */
