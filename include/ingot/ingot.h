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

/* ------------------------------------------------------------------------ */
/* NVFP4 (E2M1 values, E4M3 block scales, fp32 global scale)                 */
/* ------------------------------------------------------------------------ */
/*
 * Format (spec/nvfp4.md). A [rows, cols] matrix (cols % 16 == 0) is stored as
 *   values  [rows, cols/2] U8: E2M1 codes, two per byte, the even element in
 *           the LOW nibble. code = sign << 3 | index, magnitudes
 *           {0, 0.5, 1, 1.5, 2, 3, 4, 6} at index 0..7.
 *   scales  one E4M3 byte (sf) per 16 consecutive elements of a row, in the
 *           CUTLASS / FlashInfer "128x4" swizzled layout, in a buffer of
 *           round_up(rows, 128) x round_up(cols/16, 4) bytes whose padding
 *           bytes are 0 (see ingot_nvfp4_scale_offset). Scale tensors are
 *           U8 or F8_E4M3, either 1-D [Rp * Kp] or 2-D [Rp, Kp] contiguous
 *           (Rp, Kp from ingot_nvfp4_scale_shape).
 *   gs      the fp32 global scale, the ENCODE multiplier (conventionally
 *           448 * 6 / amax). An element decodes as e2m1 * float(sf) / gs.
 *           Ops take it as a 1-element F32 tensor [1] in the context's memory
 *           (device memory on CUDA), so it can be produced on the device
 *           (ingot_nvfp4_global_scale) without a host read.
 *
 * Quantization of one block of 16 (x_i converted exactly to fp32; every
 * operation below is one IEEE fp32 operation rounded to nearest even, the
 * same on every backend, no fused multiply-add, no approximate division):
 *   amax = max |x_i| over the block's FINITE elements (0 if none)
 *   t    = amax / 6.0f
 *   p    = gs * t
 *   sf   = E4M3(p): round to nearest even, saturating: p >= 448 (incl. +Inf)
 *          gives 448 (0x7E). A gs that is not finite or not > 0 gives sf = 0.
 *   if sf == 0: every code of the block is 0.
 *   else:  r = gs / float(sf);  code_i = E2M1(x_i * r)
 *          E2M1: round |y| to the nearest magnitude, ties to the even index
 *          (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4),
 *          |y| > 6 (incl. Inf) saturates to 6, sign kept (-0.0 and small
 *          negatives give code 8, "-0"); y NaN gives code 0.
 * Non-finite inputs therefore encode deterministically: NaN -> code 0, +Inf
 * -> 0x7 (+6), -Inf -> 0xF (-6) (0 when the block's sf is 0); neither takes
 * part in the block's amax. Every input element that is NaN or +-Inf is
 * counted in the optional `nonfinite_count` (U32 [1], NULL for none): the op
 * adds the count to it (atomically on CUDA, wrapping mod 2^32), so callers
 * can detect bad inputs without a host sync. Results are byte-identical on
 * every backend, for every input including non-finite ones.
 *
 * Dequantization, per element (same fp32 IEEE operations on every backend):
 *   q = (e2m1(code) * float(sf)) / gs   (the product is exact; one rounding)
 *   F32 out: q;  BF16 out: q rounded to nearest even (two roundings).
 *   A NaN result (sf byte is an E4M3 NaN, 0x7F / 0xFF) and every element when
 *   gs is not finite or not > 0 is written as the quiet NaN 0x7FC00000
 *   (bf16 0x7FC0). For gs = 1 (or any power of two in range) dequantize is
 *   exact.
 *
 * Round-trip error bound (F32 out): for a finite x in a block whose
 * p = gs * amax / 6 lies in [2^-6, 448] (sf normal, not saturated),
 *   |dequant(quant(x)) - x| <= (|x| / 4 + sf / (4 gs)) * (1 + 2^-20),
 * i.e. at most half an E2M1 step at x's magnitude. BF16 out adds one bf16
 * rounding (2^-9 relative).
 *
 * Layouts of the data tensors: the last dimension contiguous, any row
 * stride. Outputs must not overlap inputs or each other. On error nothing is
 * written or launched. CUDA: each op is a fixed, small number of kernel
 * launches (stated per op), no allocation, no host synchronisation: safe
 * to capture in a CUDA graph. Best speed with 16-byte aligned matrices and
 * row strides (8-byte for `values`); other alignments run a slower kernel
 * with identical results.
 */

#define INGOT_NVFP4_BLOCK 16       /* elements per E4M3 block scale */
#define INGOT_NVFP4_SCALE_ROWS 128 /* the swizzled layout pads rows to this */
#define INGOT_NVFP4_SCALE_COLS 4   /* ... and scale columns to this */

/* Byte offset of the scale of row `row`, scale column `scale_col`
 * (= element column / 16) in the 128x4 swizzled buffer of a matrix with
 * `cols` element columns (a multiple of 16). With KT = ceil(cols/16 / 4):
 *   (row/128)*KT*512 + (scale_col/4)*512 + (row%32)*16 + ((row%128)/32)*4
 *   + scale_col%4
 * No argument checks: 0 <= row, 0 <= scale_col < round_up(cols/16, 4). */
static inline int64_t ingot_nvfp4_scale_offset(int64_t row, int64_t scale_col, int64_t cols) {
  int64_t kt = (cols / 16 + 3) / 4;
  return (row / 128) * kt * 512 + (scale_col / 4) * 512 + (row % 32) * 16 +
         ((row % 128) / 32) * 4 + scale_col % 4;
}

/* Shape of the swizzled scale buffer of a [rows, cols] matrix:
 * *scale_rows = round_up(rows, 128), *scale_cols = round_up(cols/16, 4)
 * (bytes = their product). rows >= 0, cols >= 0, cols % 16 == 0.
 * Returns INVALID_ARGUMENT (bad value, NULL output, overflow; text in
 * ingot_last_error(NULL)). */
INGOT_API ingot_status ingot_nvfp4_scale_shape(int64_t rows, int64_t cols, int64_t *scale_rows,
                                               int64_t *scale_cols);

/* Quantizes x [rows, cols] (BF16, F16 or F32; cols % 16 == 0) to NVFP4 with
 * the global scale global_scale[0] (F32 [1]), by the rule above:
 *   values  [rows, cols/2] U8, any row stride
 *   scales  the swizzled buffer of [rows, cols], padding bytes written as 0
 *   nonfinite_count  NULL or U32 [1]: += number of NaN / Inf elements of x.
 * CUDA: one launch. */
INGOT_API ingot_status ingot_nvfp4_quantize(ingot_context_t ctx, const ingot_tensor *x,
                                            const ingot_tensor *global_scale,
                                            const ingot_tensor *values,
                                            const ingot_tensor *scales,
                                            const ingot_tensor *nonfinite_count,
                                            struct CUstream_st *stream);

/* global_scale[0] (F32 [1], written) <- the conventional encode multiplier
 * of x [rows, cols] (BF16, F16 or F32, any cols, any row stride):
 *   amax = max |x| over the finite elements of x
 *   gs   = 2688.0f / amax  (448 * 6; one IEEE fp32 division)
 *   gs   = 1.0f when amax == 0 (also for an empty x), FLT_MAX when the
 *          division overflows (amax < ~7.9e-36).
 * global_scale must not overlap x. CUDA: three launches (a 4-byte memset,
 * a max-reduction into global_scale's own word with atomicMax on the float
 * bits, a one-thread finalize); no workspace. */
INGOT_API ingot_status ingot_nvfp4_global_scale(ingot_context_t ctx, const ingot_tensor *x,
                                                const ingot_tensor *global_scale,
                                                struct CUstream_st *stream);

/* out [rows, cols] (BF16 or F32, any row stride) <- the NVFP4 matrix given by
 * values [rows, cols/2] U8 (any row stride), its swizzled scales (padding
 * not read) and global_scale[0] (F32 [1]), by the rule above. cols % 16 == 0.
 * CUDA: one launch. */
INGOT_API ingot_status ingot_nvfp4_dequantize(ingot_context_t ctx, const ingot_tensor *values,
                                              const ingot_tensor *scales,
                                              const ingot_tensor *global_scale,
                                              const ingot_tensor *out,
                                              struct CUstream_st *stream);

/* Swizzled <-> linear scales of a [rows, cols] matrix.
 *   linear    [rows, cols/16] U8 or F8_E4M3, any row stride
 *   swizzled  the 128x4 buffer of [rows, cols] (see the format notes)
 * swizzle writes every byte of `swizzled` (padding 0); unswizzle reads only
 * the non-padding bytes. CUDA: one launch each. */
INGOT_API ingot_status ingot_nvfp4_swizzle_scales(ingot_context_t ctx,
                                                  const ingot_tensor *linear,
                                                  const ingot_tensor *swizzled,
                                                  struct CUstream_st *stream);
INGOT_API ingot_status ingot_nvfp4_unswizzle_scales(ingot_context_t ctx,
                                                    const ingot_tensor *swizzled,
                                                    const ingot_tensor *linear,
                                                    struct CUstream_st *stream);

/* Flags of ingot_nvfp4_quantize_gate_up. */
enum {
  /* Compute global_scale[0] from gate and up first (the rule of
   * ingot_nvfp4_global_scale over both matrices) and quantize with it;
   * without the flag global_scale is an input. */
  INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE = 1u << 0
};

/* Weight preparation for the fused gate/up + GeGLU GEMM: gate [H, K] and up
 * [H, K] (same dtype: BF16, F16 or F32; any row strides; K % 16 == 0) are
 * interleaved pairwise into W [2H, K] (row 2j = gate row j, row 2j+1 = up
 * row j) and W is quantized exactly as ingot_nvfp4_quantize would quantize
 * it, with ONE global scale:
 *   values  [2H, K/2] U8, any row stride
 *   scales  the swizzled buffer of [2H, K]
 *   global_scale F32 [1]: read, or written first when flags has
 *           INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE
 *   nonfinite_count  NULL or U32 [1], as for ingot_nvfp4_quantize.
 * flags: OR of INGOT_NVFP4_GATE_UP_* (others must be 0). CUDA: one launch,
 * four with the compute flag (memset, amax, finalize, quantize). */
INGOT_API ingot_status ingot_nvfp4_quantize_gate_up(ingot_context_t ctx,
                                                    const ingot_tensor *gate,
                                                    const ingot_tensor *up,
                                                    const ingot_tensor *global_scale,
                                                    uint32_t flags,
                                                    const ingot_tensor *values,
                                                    const ingot_tensor *scales,
                                                    const ingot_tensor *nonfinite_count,
                                                    struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_INGOT_H */
