/*
 * ingot: fused GPU kernels for LLM and VLA inference, each with an exact CPU
 * reference beside it.
 *
 * This header is the whole public C API and its manual. It needs no CUDA
 * header: streams are `struct CUstream_st *`, which is what `cudaStream_t`
 * is, so CUDA callers pass their stream without a cast (CPU contexts take
 * NULL).
 *
 * Conventions
 *   - Every function returns `ingot_status`; INGOT_STATUS_SUCCESS is 0.
 *     `ingot_last_error(ctx)` gives a text naming the op, the argument and the
 *     bad value. On any error nothing has been written or launched.
 *   - Arguments are validated once, before any launch, identically for every
 *     backend. No op allocates memory, synchronises the host, or reads device
 *     data from the host: every CUDA op can be captured in a CUDA graph and
 *     replayed with new data written into the captured buffers.
 *   - Ops enqueue work on `stream` (last argument) and return; results are
 *     ready when the stream reaches that point. CPU ops run synchronously.
 *   - Tensors are `ingot_tensor` descriptors: data pointer, dtype, up to 4
 *     dimensions, strides in elements. Each op states the layout it needs;
 *     most accept any row stride but need a contiguous last dimension.
 *   - Threading: a context may be used from several threads as long as two
 *     threads do not call ops on the same context at the same time (the
 *     last-error text is per context). Distinct contexts are independent.
 *
 * Minimal use (CUDA; error handling shortened):
 *
 *     ingot_context_t ctx;
 *     ingot_context_create(INGOT_BACKEND_CUDA, 0, &ctx);
 *     ingot_ngram_config cfg;
 *     ingot_ngram_config_derive(248320, 3, 8, 20000000, 1234, 0, eos_id, &cfg);
 *     ingot_tensor ids  = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, T);
 *     ingot_tensor cu   = ingot_tensor_1d(d_cu, INGOT_DTYPE_I32, B + 1);
 *     ingot_tensor hist = ingot_tensor_2d(d_ctx, INGOT_DTYPE_I32, B, 2, 2);
 *     ingot_tensor tab  = ingot_tensor_2d(h_table, INGOT_DTYPE_F8_E4M3, R, D, D);
 *     ingot_tensor out  = ingot_tensor_2d(d_out, INGOT_DTYPE_BF16, T, 16 * D, 16 * D);
 *     if (ingot_ngram_embed(ctx, &cfg, &ids, &cu, &hist, &tab, 1.0f, &out, stream))
 *         fprintf(stderr, "%s\n", ingot_last_error(ctx));
 *     ingot_ngram_commit_context(ctx, &cfg, &ids, &cu, &hist, stream);
 *     ingot_context_destroy(ctx);
 */
#ifndef INGOT_INGOT_H
#define INGOT_INGOT_H

#include <stddef.h>
#include <stdint.h>

#include "ingot/version.h"

#if defined(_WIN32)
#if defined(INGOT_BUILDING_LIBRARY)
#define INGOT_API __declspec(dllexport)
#elif defined(INGOT_SHARED)
#define INGOT_API __declspec(dllimport)
#else
#define INGOT_API
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define INGOT_API __attribute__((visibility("default")))
#else
#define INGOT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cudaStream_t == struct CUstream_st * */

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

/* The library's INGOT_VERSION_NUMBER (compare with the header's). */
INGOT_API int ingot_version_number(void);
/* The library's version as "MAJOR.MINOR.PATCH". Static storage. */
INGOT_API const char *ingot_version(void);

/* ------------------------------------------------------------------------ */
/* Status                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum ingot_status {
  INGOT_STATUS_SUCCESS = 0,
  INGOT_STATUS_INVALID_ARGUMENT = 1,  /* a shape, dtype, pointer or value is wrong */
  INGOT_STATUS_NOT_SUPPORTED = 2,     /* valid, but not implemented here (backend, arch) */
  INGOT_STATUS_INSUFFICIENT_WORKSPACE = 3,
  INGOT_STATUS_ALLOC_FAILED = 4,      /* only context creation allocates */
  INGOT_STATUS_CUDA_ERROR = 5,        /* the CUDA runtime reported an error */
  INGOT_STATUS_INTERNAL = 6,          /* a bug in ingot: please report it */
  INGOT_STATUS_COUNT                  /* number of statuses, not a status */
} ingot_status;

/* Shorthand for INGOT_STATUS_SUCCESS. */
#define INGOT_OK INGOT_STATUS_SUCCESS

/* Static one-line description of a status ("invalid argument"). Never NULL. */
INGOT_API const char *ingot_status_string(ingot_status status);
/* Static name of a status ("INGOT_STATUS_INVALID_ARGUMENT"). Never NULL. */
INGOT_API const char *ingot_status_name(ingot_status status);

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum ingot_backend {
  INGOT_BACKEND_CPU = 0,  /* the reference; host pointers, stream NULL */
  INGOT_BACKEND_CUDA = 1, /* device-accessible pointers, any stream */
  INGOT_BACKEND_COUNT
} ingot_backend;

typedef struct ingot_context *ingot_context_t;

/* Context flags, reported by ingot_context_flags(). */
enum {
  /* The environment variable INGOT_FORCE_REFERENCE was set to a non-empty
   * value other than "0" when the context was created: every op runs the
   * plainest kernels, written line by line after the spec's arithmetic
   * (same results; for debugging without a rebuild). */
  INGOT_CONTEXT_FLAG_FORCE_REFERENCE = 1u << 0
};

/* 1 if `backend` can be created here (CUDA: compiled in and >= 1 device). */
INGOT_API int ingot_backend_available(ingot_backend backend);

/* Creates a context for `backend` on `device` (CPU: must be 0). CUDA: sets no
 * current device for the caller; ops switch to the context's device for the
 * duration of a call when needed. Allocates a 4-byte device word for errors
 * detected on the device (see ingot_context_check_device_errors).
 * Returns INVALID_ARGUMENT (bad backend, device, NULL out), NOT_SUPPORTED
 * (CUDA not compiled in, or no such device / compute capability < 8.0),
 * ALLOC_FAILED, CUDA_ERROR. On error *out is set to NULL; the reason is in
 * ingot_last_error(NULL). */
INGOT_API ingot_status ingot_context_create(ingot_backend backend, int device,
                                            ingot_context_t *out);
/* Frees the context. NULL is a no-op. Work already enqueued is not waited
 * for; the caller synchronises its streams first. */
INGOT_API void ingot_context_destroy(ingot_context_t ctx);

INGOT_API ingot_backend ingot_context_backend(ingot_context_t ctx);
INGOT_API int ingot_context_device(ingot_context_t ctx);
/* Bitwise OR of INGOT_CONTEXT_FLAG_* . */
INGOT_API uint32_t ingot_context_flags(ingot_context_t ctx);

/* Text of the last error on this context: "<op>: <argument>: <what>".
 * With ctx == NULL: the last error of a call that has no context (context
 * creation, config helpers) on this thread. Empty string when none. Valid
 * until the next call on the same context / thread. */
INGOT_API const char *ingot_last_error(ingot_context_t ctx);

/* Some inputs live in device memory and can only be checked there (e.g.
 * cu_seqlens on the CUDA backend). A kernel that finds such an input invalid
 * writes none of its outputs and records the fact in the context's device
 * error word. This call synchronises `stream`, reads and clears that word,
 * and returns INVALID_ARGUMENT with a text naming the op and argument if any
 * error was recorded, else SUCCESS. Not for use during graph capture.
 * CPU contexts: always SUCCESS (the CPU backend checks before running). */
INGOT_API ingot_status ingot_context_check_device_errors(ingot_context_t ctx,
                                                         struct CUstream_st *stream);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum ingot_dtype {
  INGOT_DTYPE_INVALID = 0,
  INGOT_DTYPE_F32 = 1,
  INGOT_DTYPE_F16 = 2,
  INGOT_DTYPE_BF16 = 3,
  INGOT_DTYPE_F8_E4M3 = 4, /* OCP FP8 E4M3 (finite, NaN = S.1111.111) */
  INGOT_DTYPE_I32 = 5,
  INGOT_DTYPE_I64 = 6,
  INGOT_DTYPE_U8 = 7,
  INGOT_DTYPE_U32 = 8,
  INGOT_DTYPE_U64 = 9,
  INGOT_DTYPE_COUNT
} ingot_dtype;

#define INGOT_TENSOR_MAX_DIMS 4

/* A strided view. shape[i] >= 0; stride[i] in elements (not bytes), >= 0.
 * Entries at i >= ndim are ignored. data may be NULL only when the tensor has
 * no elements. Mirrors DLPack's dtype/strides conventions. */
typedef struct ingot_tensor {
  void *data;
  ingot_dtype dtype;
  int32_t ndim;
  int64_t shape[INGOT_TENSOR_MAX_DIMS];
  int64_t stride[INGOT_TENSOR_MAX_DIMS];
} ingot_tensor;

/* Size of one element in bytes (0 for an invalid dtype). */
INGOT_API size_t ingot_dtype_size(ingot_dtype dtype);
/* Static name ("bf16", "i32", ...); "invalid" for an unknown value. */
INGOT_API const char *ingot_dtype_name(ingot_dtype dtype);

/* A contiguous vector of n elements. */
static inline ingot_tensor ingot_tensor_1d(void *data, ingot_dtype dtype, int64_t n) {
  ingot_tensor t = {data, dtype, 1, {n, 0, 0, 0}, {1, 0, 0, 0}};
  return t;
}
/* A [rows, cols] matrix whose rows are row_stride elements apart. */
static inline ingot_tensor ingot_tensor_2d(void *data, ingot_dtype dtype, int64_t rows,
                                           int64_t cols, int64_t row_stride) {
  ingot_tensor t = {data, dtype, 2, {rows, cols, 0, 0}, {row_stride, 1, 0, 0}};
  return t;
}

/* ------------------------------------------------------------------------ */
/* Hashed n-gram embeddings (PLE / Engram)                                   */
/* ------------------------------------------------------------------------ */
/*
 * A PLE layer looks up, for each token, H rows of a large table addressed by
 * hashes of the token's last n-gram windows. Full definition: spec/ple.md.
 *
 * Terms used below:
 *   n      n-gram size (orders k = 2..n); hpn heads per order;
 *          H = hpn * (n - 1) heads, 2-gram heads first.
 *   T, B   tokens and requests of one forward (a ragged batch).
 *   ids        [T]      token ids, INGOT_DTYPE_I32 or I64, contiguous.
 *   cu_seqlens [B + 1]  I32 or I64, contiguous: cu[0] = 0, non-decreasing,
 *                       cu[B] = T; request b owns tokens [cu[b], cu[b+1]).
 *   context    [B, n-1] same dtype as ids, any row stride: the n-1 tokens just
 *                       before each request's first token here, oldest first
 *                       (all boundary_token for a fresh request).
 *
 * Row ids. For token t at offset l = t - cu[b] of request b, x_s is the token
 * s places left of t (ids[t-s] if l >= s, else context[b][n-1+l-s]). x_s for
 * s >= 1 is valid iff none of x_1..x_s equals boundary_token; an invalid x_s
 * is replaced by boundary_token. With wrapping int64 arithmetic,
 *   mix_2 = x_0*mult[0] ^ x_1*mult[1],  mix_k = mix_{k-1} ^ x_{k-1}*mult[k-1],
 *   rows[t][h] = floor_mod(mix_k, P[h]) + off[h]   for h in order k's block.
 * A decode step (one token per request) gives exactly the rows of a prefill
 * of the same history.
 *
 * CUDA: cu_seqlens is read on the device; a cu_seqlens that is not
 * 0 = cu[0] <= ... <= cu[B] = T makes the kernel write nothing and record an
 * error for ingot_context_check_device_errors(). The CPU backend checks it
 * before running and returns INVALID_ARGUMENT.
 */

#define INGOT_NGRAM_MAX_N 8      /* largest supported n-gram size */
#define INGOT_NGRAM_MAX_HEADS 64 /* largest supported H */

/* The constants of one PLE layer, passed by value to the kernels (no device
 * copy to manage). Entries past n (multipliers) and past num_heads (primes,
 * offsets) are ignored. */
typedef struct ingot_ngram_config {
  int32_t n;               /* n-gram size, 2..INGOT_NGRAM_MAX_N */
  int32_t heads_per_order; /* hpn >= 1 */
  int32_t num_heads;       /* H: must equal hpn * (n - 1), <= INGOT_NGRAM_MAX_HEADS */
  int32_t reserved;        /* must be 0 */
  int64_t boundary_token;  /* E, the model's end-of-sequence id */
  int64_t multipliers[INGOT_NGRAM_MAX_N];   /* mult[0..n-1] */
  int64_t primes[INGOT_NGRAM_MAX_HEADS];    /* P[0..H-1], each >= 1 */
  int64_t offsets[INGOT_NGRAM_MAX_HEADS];   /* off[0..H-1], each >= 0 */
} ingot_ngram_config;

/* Derives a layer's constants as in spec/ple.md (for checkpoints that do not
 * ship them): splitmix64 multipliers from seed + 10007 * layer_index, P[h] the
 * (layer_index*H + h + 1)-th prime >= base, off the exclusive prefix sum of P.
 * vocab_size >= 1, 2 <= n <= INGOT_NGRAM_MAX_N, heads_per_order >= 1,
 * H <= INGOT_NGRAM_MAX_HEADS, base >= 2, layer_index >= 0.
 * Returns INVALID_ARGUMENT (text in ingot_last_error(NULL)). */
INGOT_API ingot_status ingot_ngram_config_derive(int64_t vocab_size, int32_t n,
                                                 int32_t heads_per_order, int64_t base,
                                                 int64_t seed, int32_t layer_index,
                                                 int64_t boundary_token,
                                                 ingot_ngram_config *out);

/* Rows a table for `cfg` needs: off[H-1] + P[H-1], rounded up to a multiple
 * of pad_multiple (>= 1). Returns INVALID_ARGUMENT for a bad config or
 * overflow (text in ingot_last_error(NULL)). */
INGOT_API ingot_status ingot_ngram_table_rows(const ingot_ngram_config *cfg,
                                              int64_t pad_multiple, int64_t *rows);

/* rows [T, H] I64 (any row stride) <- the row ids of every token of the
 * batch. CUDA: one launch. rows must not overlap the inputs. */
INGOT_API ingot_status ingot_ngram_row_ids(ingot_context_t ctx,
                                           const ingot_ngram_config *cfg,
                                           const ingot_tensor *ids,
                                           const ingot_tensor *cu_seqlens,
                                           const ingot_tensor *context,
                                           const ingot_tensor *rows,
                                           struct CUstream_st *stream);

/* Rolls each request's context forward in place, after this forward's row
 * ids were computed: context[b] <- the last n-1 tokens of
 * context[b] ++ ids[cu[b] .. cu[b+1]). A request with fewer than n-1 tokens
 * keeps the tail of its old context; one with none keeps it unchanged.
 * CUDA: one launch; enqueue it after every op that reads the old context. */
INGOT_API ingot_status ingot_ngram_commit_context(ingot_context_t ctx,
                                                  const ingot_ngram_config *cfg,
                                                  const ingot_tensor *ids,
                                                  const ingot_tensor *cu_seqlens,
                                                  const ingot_tensor *context,
                                                  struct CUstream_st *stream);

/* Gathers table rows:
 *   out[t, h*D + d] = bf16(float(table[rows[t,h], d]) * scale)
 * (fp32 product, then round to nearest even; any NaN becomes the canonical
 * bf16 NaN 0x7fc0, so that backends agree byte for byte).
 *   rows  [T, H] I64, any row stride. A row id outside [0, R) gives a zero
 *         row; the table is never read outside its bounds.
 *   table [R, D] F8_E4M3, BF16 or F32, any row stride. CUDA: device memory, or
 *         pinned/registered host memory reached over UVA (zero copy).
 *   scale finite.
 *   out   [T, H*D] BF16, any row stride; must not overlap the inputs.
 * Results are bit-identical between backends and residencies. */
INGOT_API ingot_status ingot_ngram_gather(ingot_context_t ctx, const ingot_tensor *rows,
                                          const ingot_tensor *table, float scale,
                                          const ingot_tensor *out,
                                          struct CUstream_st *stream);

/* Row ids and gather fused: out as ingot_ngram_gather would write it for the
 * rows ingot_ngram_row_ids computes, without materialising the ids. Same
 * arguments and rules as those two ops; CUDA: one launch. Keep the separate
 * ops to compute ids early and prefetch rows on a side stream. */
INGOT_API ingot_status ingot_ngram_embed(ingot_context_t ctx, const ingot_ngram_config *cfg,
                                         const ingot_tensor *ids,
                                         const ingot_tensor *cu_seqlens,
                                         const ingot_tensor *context,
                                         const ingot_tensor *table, float scale,
                                         const ingot_tensor *out,
                                         struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_INGOT_H */
