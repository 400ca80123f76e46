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
 *     bad value. On any error but CUDA_ERROR nothing has been written or
 *     launched; CUDA_ERROR is the CUDA runtime failing a launch, after the
 *     op's earlier launches (if it has several) may have been enqueued.
 *   - Arguments are validated once, before any launch, identically for every
 *     backend. No op allocates memory, synchronises the host, or reads device
 *     data from the host: every CUDA op can be captured in a CUDA graph and
 *     replayed with new data written into the captured buffers.
 *   - Ops enqueue work on `stream` (last argument) and return; results are
 *     ready when the stream reaches that point. CPU ops run synchronously.
 *   - Tensors are `ingot_tensor` descriptors: data pointer, dtype, up to 4
 *     dimensions, strides in elements. Each op states the layout it needs;
 *     most accept any row stride but need a contiguous last dimension. The
 *     data pointer of a non-empty tensor must be aligned to its element size
 *     (4 bytes for F32, 8 for U64, ...); INVALID_ARGUMENT otherwise.
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
  INGOT_STATUS_ALLOC_FAILED = 4,      /* only setup calls allocate (contexts, host tables) */
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
   * value other than "0" when the context was created: the n-gram and NVFP4
   * format ops (quantize, dequantize, global scale, swizzle) run their
   * plainest CUDA kernels, written line by line after the documented
   * arithmetic (same results; for debugging without a rebuild). Sampling and
   * the NVFP4 GEMM / GeGLU have one form each and ignore it. */
  INGOT_CONTEXT_FLAG_FORCE_REFERENCE = 1u << 0
};

/* 1 if `backend` can be created here (CUDA: compiled in and >= 1 device). */
INGOT_API int ingot_backend_available(ingot_backend backend);

/* Creates a context for `backend` on `device` (CPU: must be 0). CUDA: sets no
 * current device for the caller (cudaSetDevice back to the caller's current
 * device, which makes that device's primary context current if it was not
 * initialised yet: select a device on each thread first, as frameworks
 * do, to avoid a context on device 0); ops switch to the context's device for the
 * duration of a call when needed. Allocates a 4-byte device word for errors
 * detected on the device (see ingot_context_check_device_errors).
 * Returns INVALID_ARGUMENT (bad backend, device, NULL out), NOT_SUPPORTED
 * (CUDA not compiled in, or no such device / compute capability < 8.0),
 * ALLOC_FAILED, CUDA_ERROR. On error *out is set to NULL; the reason is in
 * ingot_last_error(NULL). */
INGOT_API ingot_status ingot_context_create(ingot_backend backend, int device,
                                            ingot_context_t *out);
/* Frees the context. NULL is a no-op. Work already enqueued is not waited
 * for; the caller synchronises its streams first. CUDA graphs that captured
 * this context's ops must not be replayed afterwards (they hold its device
 * error word). */
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
 * error word (one bit per op; the word collects errors from every stream
 * that used the context). This call takes and clears the word in one
 * atomic step on `stream`, synchronises `stream`, and returns
 * INVALID_ARGUMENT with a text naming the op and argument if any error was
 * recorded since the last check, else SUCCESS. During graph capture of
 * `stream` it returns INVALID_ARGUMENT and does nothing (check after a
 * replay). CPU contexts: always SUCCESS (the CPU backend checks before
 * running). */
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
 * hashes of the token's last n-gram windows. Full definition: docs/ple.md.
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
 * error for ingot_context_check_device_errors() (also when T = 0 or B = 0:
 * the check still runs). The CPU backend checks it before running and
 * returns INVALID_ARGUMENT.
 *
 * Errors: INVALID_ARGUMENT for every rule stated here (text names the
 * argument); on CUDA also memory the GPU cannot read (pageable host memory,
 * another device's memory). NOT_SUPPORTED on CUDA for T * H >= 2^31 rows in
 * one call, or a table with D >= 2^27. CUDA_ERROR when a launch fails.
 */

#define INGOT_NGRAM_MAX_N 8      /* largest supported n-gram size */
#define INGOT_NGRAM_MAX_HEADS 64 /* largest supported H */
#define INGOT_NGRAM_MAX_LAYER_INDEX 4095 /* largest layer_index of ingot_ngram_config_derive */

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

/* Derives a layer's constants as in docs/ple.md (for checkpoints that do not
 * ship them): splitmix64 multipliers from seed + 10007 * layer_index, P[h] the
 * (layer_index*H + h + 1)-th prime >= base, off the exclusive prefix sum of P.
 * vocab_size >= 1, 2 <= n <= INGOT_NGRAM_MAX_N, heads_per_order >= 1,
 * H <= INGOT_NGRAM_MAX_HEADS, 2 <= base <= 2^61,
 * 0 <= layer_index <= INGOT_NGRAM_MAX_LAYER_INDEX (the primes of all lower
 * layers are skipped, so the search grows with layer_index).
 * Returns INVALID_ARGUMENT (text in ingot_last_error(NULL)). */
INGOT_API ingot_status ingot_ngram_config_derive(int64_t vocab_size, int32_t n,
                                                 int32_t heads_per_order, int64_t base,
                                                 int64_t seed, int32_t layer_index,
                                                 int64_t boundary_token,
                                                 ingot_ngram_config *out);

/* Rows a table for `cfg` needs: off[H-1] + P[H-1], rounded up to a multiple
 * of pad_multiple (>= 1). Returns INVALID_ARGUMENT for a bad config, or for
 * a row count that overflows int64 (the text names pad_multiple and its
 * value; in ingot_last_error(NULL)); *rows is written only on success. */
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

/* ---- Loading a checkpoint's table (host only, no context) ---------------- */
/*
 * A checkpoint ships the table as safetensors tensors, in any number of
 * files, in any order:
 *   <prefix>ngram_embedding.shard_<i>.weight   F8_E4M3 [rows_i, D], i = 0..S-1
 *   <prefix>ngram_embedding.weight_scale       F32 or BF16, shape [] or [1]
 * The table [R, D] is the shards concatenated in index order
 * (R = sum rows_i); the scale is the `scale` of ingot_ngram_gather / embed.
 *
 * paths, num_paths  num_paths >= 1 non-empty paths. A path that is a
 *          directory stands for its *.safetensors files (not recursive;
 *          names starting with '.' skipped). Links are followed. Every file
 *          named or found must be a regular, valid safetensors file, opened
 *          once: a file reached twice (the same path twice, a directory and
 *          a file in it, two links) is refused. Files without a tensor of
 *          the table are read (header only) and then ignored.
 * prefix   the text before "ngram_embedding." in the names ("" for none,
 *          e.g. "model." or "model.layers.3."), or NULL: the one prefix of
 *          the shards found (shards of two prefixes: an error that names
 *          both).
 *
 * Checks, in this order, before anything is written: every file's header
 * (strict JSON, dtypes, shapes, offsets within the file: a truncated file is
 * refused); under the prefix, every "shard_" name is exactly shard_<i>.weight
 * (i decimal, no leading zeros, below 10^9); every shard 0..S-1 is present
 * once (a missing or duplicate index is named); each is F8_E4M3, 2-D, with
 * D >= 1 equal to row_bytes (probe: to shard_0's); the rows' total fits;
 * weight_scale is present once, F32 or BF16, shape [] or [1], finite. Other
 * tensors under the prefix ("<prefix>ngram_embedding.something") are ignored.
 *
 * Errors (text in ingot_last_error(NULL), naming the file, the tensor and
 * the value): INVALID_ARGUMENT for a bad argument or any file that breaks a
 * rule above, cannot be opened or read; ALLOC_FAILED when host memory for
 * the headers runs out. Memory: about three times the headers' bytes (a
 * few KB to a few MB per file), never the table. Thread-safe: several loads
 * may run at once (the error text is per thread).
 */

/* Called by ingot_ngram_table_load on the calling thread, only once every
 * check has passed: first with bytes_done = 0, then after each chunk read
 * (at most 64 MiB), the last call with bytes_done = bytes_total. A read that
 * fails ends the calls there (the load returns its error). */
typedef void (*ingot_ngram_table_progress_fn)(int64_t bytes_done, int64_t bytes_total,
                                              void *user);

/* Finds and checks the table as above, reading only headers and the scale:
 * *rows = R, *row_bytes = D, *num_shards = S, *weight_scale (each output may
 * be NULL; written only on success). For sizing the buffer of
 * ingot_ngram_table_load when the configuration is not at hand. */
INGOT_API ingot_status ingot_ngram_table_probe(const char *const *paths, int32_t num_paths,
                                               const char *prefix, int64_t *rows,
                                               int64_t *row_bytes, int32_t *num_shards,
                                               float *weight_scale);

/* Loads the table into dst: dst[0, R*D) <- the shards in index order, byte
 * for byte; *weight_scale <- the scale (weight_scale may be NULL).
 *   expected_rows  R the configuration needs (ingot_ngram_table_rows), >= 1:
 *                  the shards must hold exactly that many rows.
 *   row_bytes      D, >= 1: every shard's D must equal it.
 *   dst, dst_bytes host memory the host can write (pinned with
 *                  cudaHostAlloc / cudaHostRegister for a CUDA gather over
 *                  UVA, or plain memory); dst_bytes >= expected_rows *
 *                  row_bytes. CUDA device memory is refused (in a CUDA
 *                  build). Bytes past R*D are not touched.
 *   progress       optional (NULL), with progress_user passed through.
 * Each shard is read in chunks straight into its place in dst (no second
 * copy, no allocation of table size).
 * Nothing half-loaded: the arguments and every check above pass before the
 * first byte of dst is written, so a check that fails leaves dst untouched.
 * If a read fails after that (an I/O error, a file truncated while being
 * read) the call returns INVALID_ARGUMENT naming the file and the bytes dst
 * received are set to zero (the rest untouched), so that dst never holds
 * part of a table. (Files are read through the descriptors that were
 * checked, so a file replaced meanwhile is not mixed in; one rewritten in
 * place during the load cannot be detected.) */
INGOT_API ingot_status ingot_ngram_table_load(const char *const *paths, int32_t num_paths,
                                              const char *prefix, int64_t expected_rows,
                                              int64_t row_bytes, void *dst, int64_t dst_bytes,
                                              float *weight_scale,
                                              ingot_ngram_table_progress_fn progress,
                                              void *progress_user);

/* ---- Host tables: memory for a table the GPU reads over UVA (setup) ------ */
/*
 * A PLE table (51.2 GB for the real configuration) lives in host memory and
 * the gather reads its rows over the bus. How that memory is mapped matters:
 * the GPU translates host addresses page by page, and random rows from a
 * table of many small pages read far slower than the copy rate
 * (docs/ple.md, "Host tables"). ingot_host_table_create allocates the
 * memory with one of these strategies and, on a CUDA context, makes it
 * readable by the context's GPU (registered, mapped, portable: the pointer
 * itself is what the ops take):
 *
 *   INGOT_HOST_TABLE_HUGETLB_1G  mmap(MAP_HUGETLB | MAP_HUGE_1GB) + cudaHostRegister.
 *       Needs 1 GiB pages reserved: /sys/kernel/mm/hugepages/
 *       hugepages-1048576kB/nr_hugepages, or the boot parameters
 *       "hugepagesz=1G hugepages=N" (and a CPU with 1 GiB pages).
 *   INGOT_HOST_TABLE_HUGETLB_2M  mmap(MAP_HUGETLB | MAP_HUGE_2MB) + cudaHostRegister.
 *       Needs 2 MiB pages reserved: /proc/sys/vm/nr_hugepages.
 *   INGOT_HOST_TABLE_THP         anonymous mmap, 2 MiB aligned, madvise(MADV_HUGEPAGE)
 *       + cudaHostRegister. Needs transparent huge pages set to "madvise" or
 *       "always" (/sys/kernel/mm/transparent_hugepage/enabled); the kernel
 *       may still back parts with 4 KiB pages (fragmented memory): see
 *       ingot_host_table_huge_page_bytes.
 *   INGOT_HOST_TABLE_PINNED      cudaHostAlloc (mapped, portable) on a CUDA context;
 *       plain anonymous memory of the base page size on a CPU context.
 *
 * Registration page-locks the whole table: it needs that much physical
 * memory free, and may be refused under a locked-memory limit
 * (RLIMIT_MEMLOCK, `ulimit -l`) or a container's memory limit. The
 * hugetlb and THP strategies need Linux (NOT_SUPPORTED elsewhere).
 *
 * This is a setup call (it allocates, page-locks, and may take seconds for
 * tens of GB); no op allocates. Load a checkpoint straight into it:
 *
 *     ingot_host_table_t tab;
 *     ingot_host_table_create(ctx, R * 160, INGOT_HOST_TABLE_AUTO, &tab);
 *     ingot_ngram_table_load(paths, 1, NULL, R, 160, ingot_host_table_data(tab),
 *                            ingot_host_table_bytes(tab), &scale, NULL, NULL);
 *     ingot_tensor t = ingot_tensor_2d(ingot_host_table_data(tab),
 *                                      INGOT_DTYPE_F8_E4M3, R, 160, 160);
 *     ... ingot_ngram_gather(ctx, &rows, &t, scale, &out, stream) ...
 *     ingot_host_table_destroy(tab);   // after the GPU work that reads it
 */

typedef struct ingot_host_table *ingot_host_table_t;

/* Strategies: the `strategies` argument of ingot_host_table_create is an OR
 * of these (the ones allowed), tried in the order listed; 0 (AUTO) allows
 * all four. */
enum {
  INGOT_HOST_TABLE_AUTO = 0,
  INGOT_HOST_TABLE_HUGETLB_1G = 1u << 0,
  INGOT_HOST_TABLE_HUGETLB_2M = 1u << 1,
  INGOT_HOST_TABLE_THP = 1u << 2,
  INGOT_HOST_TABLE_PINNED = 1u << 3
};

/* Allocates `bytes` (>= 1) of host memory for a table, by the first of the
 * allowed strategies that works, and makes it readable by ctx's GPU (CUDA
 * context) or just allocates it (CPU context). The size is rounded up to
 * the strategy's page size (ingot_host_table_mapped_bytes); the contents
 * are unspecified. *out is NULL on failure.
 * Returns INVALID_ARGUMENT (NULL ctx or out, bytes < 1 or too large,
 * unknown strategy bits); with one strategy allowed, its failure by name:
 * ALLOC_FAILED (no / too few huge pages reserved, out of memory: the text
 * says which pool and how to reserve it), NOT_SUPPORTED (not Linux, no
 * 1 GiB pages, THP disabled, a GPU that cannot use the host pointer
 * itself), CUDA_ERROR (registration or cudaHostAlloc refused; the text
 * gives RLIMIT_MEMLOCK). With several allowed, the status of the last one
 * tried and a text listing each one's reason. */
INGOT_API ingot_status ingot_host_table_create(ingot_context_t ctx, int64_t bytes,
                                               uint32_t strategies, ingot_host_table_t *out);
/* Unregisters and frees the memory. NULL is a no-op. The caller first waits
 * for every GPU work that reads it. The context it was made with may have
 * been destroyed already. */
INGOT_API void ingot_host_table_destroy(ingot_host_table_t table);
/* The table's first byte (aligned to its page size); NULL for NULL. */
INGOT_API void *ingot_host_table_data(ingot_host_table_t table);
/* bytes as asked at creation (0 for NULL). */
INGOT_API int64_t ingot_host_table_bytes(ingot_host_table_t table);
/* bytes rounded up to the page size: what is mapped and registered. */
INGOT_API int64_t ingot_host_table_mapped_bytes(ingot_host_table_t table);
/* The INGOT_HOST_TABLE_* bit of the strategy used (0 for NULL). */
INGOT_API uint32_t ingot_host_table_strategy(ingot_host_table_t table);
/* Static name of one strategy bit: "hugetlb-1g", "hugetlb-2m", "thp",
 * "pinned"; "auto" for 0; "invalid" otherwise. */
INGOT_API const char *ingot_host_table_strategy_name(uint32_t strategy);
/* The page size the strategy maps with: 1 GiB, 2 MiB, 2 MiB (THP: asked
 * for, not promised) or the base page size (PINNED). 0 for NULL. */
INGOT_API int64_t ingot_host_table_page_bytes(ingot_host_table_t table);
/* *bytes <- how much of the table the kernel backs with pages larger than
 * the base page right now (Linux: /proc/self/smaps, AnonHugePages +
 * Private_Hugetlb + Shared_Hugetlb of the mappings that hold it; a mapping
 * merged with a neighbour is counted in proportion). Only pages touched so
 * far count: a CUDA registration touches every page; on a CPU context
 * write the table first. cudaHostAlloc memory reports 0. Returns
 * INVALID_ARGUMENT (NULL table or bytes), NOT_SUPPORTED (not Linux, smaps
 * unreadable); text in ingot_last_error(NULL). Reads a file: setup use. */
INGOT_API ingot_status ingot_host_table_huge_page_bytes(ingot_host_table_t table,
                                                        int64_t *bytes);

/* ------------------------------------------------------------------------ */
/* NVFP4 (E2M1 values, E4M3 block scales, fp32 global scale)                 */
/* ------------------------------------------------------------------------ */
/*
 * Format (docs/nvfp4.md). A [rows, cols] matrix (cols % 16 == 0) is stored as
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
 * launches, no allocation, no host synchronisation: safe
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
 * Returns INVALID_ARGUMENT (bad value, NULL output, or a buffer whose byte
 * count overflows int64: the text names rows and cols with their values;
 * in ingot_last_error(NULL)); nothing is written on error. */
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
 * bits, a one-thread finalize; two for an empty x); no workspace. */
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
 * four with the compute flag (memset, amax, finalize, quantize). All
 * arguments are checked before the first launch; only a CUDA runtime error
 * in a later launch of the compute path can leave global_scale written. */
INGOT_API ingot_status ingot_nvfp4_quantize_gate_up(ingot_context_t ctx,
                                                    const ingot_tensor *gate,
                                                    const ingot_tensor *up,
                                                    const ingot_tensor *global_scale,
                                                    uint32_t flags,
                                                    const ingot_tensor *values,
                                                    const ingot_tensor *scales,
                                                    const ingot_tensor *nonfinite_count,
                                                    struct CUstream_st *stream);

/* ---- NVFP4 GEMM and the fused gate/up + GeGLU MLP ----------------------- */
/*
 * An NVFP4 matrix operand: values, swizzled scales and global scale, each
 * in the context's memory, as for the format ops above. For a [rows, cols]
 * matrix: values U8 [rows, cols/2], last dimension contiguous, any row
 * stride (16-byte aligned rows run fastest); scales the 128x4 buffer of
 * [rows, cols] (its padding bytes may be read, whatever they hold, but never
 * reach an output); global_scale F32 [1].
 *
 * GEMM (docs/nvfp4.md): A [M, K], B [N, K] (B is a linear layer's weight,
 * [out, in]):
 *   acc[m, n] = sum_k decode(a[m, k]) * decode(b[n, k])   fp32 accumulation
 *   alpha     = 1.0f / (gsA * gsB)                          (two fp32 roundings)
 *   D[m, n]   = acc[m, n] * alpha, stored as F32 or rounded to BF16.
 * decode(x) = e2m1(code) * float(sf), exact in bf16 and fp32, so the only
 * rounding before the epilogue is the fp32 accumulation: backends differ by
 * summation order only. The CPU reference computes each dot product
 * EXACTLY (integer arithmetic on 2^10 * decode(x), an integer of at most 22
 * bits) and rounds it once to fp32, nearest even: the correctly rounded
 * acc, independent of blocking and thread count.
 *
 * Non-finite rules (every backend):
 *   - A NaN scale byte (0x7F / 0xFF) in the K range of row m of A makes
 *     acc[m, n] NaN for every n (decode is NaN, and NaN * 0 = NaN); the
 *     same for row n of B. Padding bytes of a scale buffer never reach an
 *     output (CUDA reads whole 512-byte scale tiles; the CPU does not).
 *   - A global scale of A or B that is not finite or not > 0 makes alpha,
 *     and so every output, NaN. Valid but extreme scales follow the fp32
 *     arithmetic (gsA * gsB overflowing gives alpha = 0; underflowing to 0
 *     gives alpha = +Inf and Inf / NaN outputs).
 *   - NaN outputs are written as the canonical quiet NaN: F32 0x7FC00000,
 *     BF16 0x7FC0.
 *   - GeGLU: a NaN g or u gives a NaN h, which the quantize rule encodes as
 *     code 0 outside the block's amax (a NaN row of x, or a bad w_gate_up
 *     global scale, gives an all-zero h row / h: codes 0, scales 0). An h
 *     global scale that is not finite or not > 0 gives sf = 0 and codes 0
 *     everywhere (the quantize rule).
 *
 * Fused GeGLU: A [M, K] times W [2H, K] whose rows are gate/up PAIRWISE
 * INTERLEAVED (row 2j = gate row j, row 2j+1 = up row j; see
 * ingot_nvfp4_quantize_gate_up):
 *   g = acc[m, 2j] * alpha,  u = acc[m, 2j+1] * alpha        (fp32)
 *   h[m, j] = gelu_tanh(g) * u,
 *   gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
 * and h [M, H] is quantized by the quantize rule above with the caller's
 * output global scale (static, calibrated) straight from the epilogue: no
 * [M, H] bf16/fp32 intermediate exists in memory. Because acc differs by
 * summation order across backends, h codes can differ by one E2M1 step
 * where h lies on a rounding boundary (tests: >= 99.9% identical).
 *
 * Shapes: M >= 0; K a positive multiple of 64; N a positive multiple of 64
 * (GeGLU: 2H a positive multiple of 64, i.e. H % 32 == 0; the MLP: H % 64
 * == 0 because h is the down GEMM's K). M = 0 (an empty batch) is a
 * successful no-op that writes nothing (its workspace size is 0); the
 * tensors are still checked. Anything else is rejected before launch with
 * INVALID_ARGUMENT naming the value; there is no hidden fallback. CUDA
 * needs compute capability 8.0 or newer (bf16 tensor cores; the weight B is
 * decoded in the kernel with its block scales folded in, never into a
 * dequantized copy in memory; on Hopper A is first decoded once into bf16
 * in the workspace, M x K x 2 bytes) and, for its tiles, 102-200 KB of shared
 * memory per block (A100, H100, H200 have it); other devices (older ones,
 * and cc 8.6 / 8.9 GPUs with ~100 KB) get NOT_SUPPORTED before anything
 * is enqueued. Dimensions beyond 2^31 are NOT_SUPPORTED on CUDA.
 *
 * Workspace: ask the *_workspace_size query with the same shape and pass
 * at least that many bytes, 16-byte aligned (NULL when 0 is needed); its
 * contents on entry do not matter. Outputs must not overlap inputs, each
 * other or the workspace. On error nothing is written or launched. CUDA: no
 * allocation, no host synchronisation: capturable in a CUDA graph.
 *
 * CPU backend: runs synchronously on up to min(online CPUs, 64) threads
 * that it starts and joins within the call (POSIX threads; rows x 64-column
 * tiles of D are split between them). Results do not depend on the number
 * of threads. Its workspace holds, per thread, one tile's operands decoded
 * for a K chunk of up to 2048 and the tile's exact accumulators (about
 * 280 KB per thread for K >= 2048), for min(64, tiles) threads whatever
 * the machine: the size depends only on the shape.
 */
typedef struct ingot_nvfp4_matrix {
  const ingot_tensor *values;       /* U8 [rows, cols/2] */
  const ingot_tensor *scales;       /* U8 / F8_E4M3 128x4 buffer of [rows, cols] */
  const ingot_tensor *global_scale; /* F32 [1] */
} ingot_nvfp4_matrix;

/* Workspace bytes of ingot_nvfp4_gemm for D [m, n] = A [m, k] x B [n, k]^T
 * (m >= 0; n, k positive multiples of 64). 0 for m = 0. Returns
 * INVALID_ARGUMENT (bad value, NULL bytes, or a shape whose byte counts
 * overflow int64 / size_t: the values and scales of the operands, D at 2
 * bytes an element, any intermediate product; the text names the arguments
 * and their values), NOT_SUPPORTED (the backend has no NVFP4 GEMM); *bytes
 * is written only on success. The same rules for the two queries below. */
INGOT_API ingot_status ingot_nvfp4_gemm_workspace_size(ingot_context_t ctx, int64_t m,
                                                       int64_t n, int64_t k, size_t *bytes);

/* d [M, N] (F32 or BF16, last dimension contiguous, any row stride) <- the
 * GEMM above of a [M, K] and b [N, K]. Returns INVALID_ARGUMENT (shape,
 * dtype, NULL, overlap, alignment, residency), INSUFFICIENT_WORKSPACE,
 * NOT_SUPPORTED (backend / device), CUDA_ERROR; the same for the two ops
 * below. */
INGOT_API ingot_status ingot_nvfp4_gemm(ingot_context_t ctx, const ingot_nvfp4_matrix *a,
                                        const ingot_nvfp4_matrix *b, const ingot_tensor *d,
                                        void *workspace, size_t workspace_bytes,
                                        struct CUstream_st *stream);

/* Workspace bytes of ingot_nvfp4_geglu for x [m, k] and W [2 * hidden, k]. */
INGOT_API ingot_status ingot_nvfp4_geglu_workspace_size(ingot_context_t ctx, int64_t m,
                                                        int64_t hidden, int64_t k,
                                                        size_t *bytes);

/* h <- quantize(gelu_tanh(gate) * up) of x [M, K] and the interleaved
 * w_gate_up [2H, K], by the rule above. h describes the NVFP4 [M, H]
 * output: h->values and h->scales are WRITTEN (every scale byte, padding 0),
 * h->global_scale is READ (the caller's output global scale). */
INGOT_API ingot_status ingot_nvfp4_geglu(ingot_context_t ctx, const ingot_nvfp4_matrix *x,
                                         const ingot_nvfp4_matrix *w_gate_up,
                                         const ingot_nvfp4_matrix *h, void *workspace,
                                         size_t workspace_bytes, struct CUstream_st *stream);

/* Workspace bytes of ingot_nvfp4_mlp for x [m, k], W_gate_up [2 * hidden, k]
 * and W_down [n, hidden]: the NVFP4 h [m, hidden] (values m * hidden / 2
 * bytes, then its swizzled scales, each 16-byte aligned) followed by
 * max(geglu workspace, gemm workspace) of the two steps. 0 for m = 0.
 * Rejects sizes that overflow as the GEMM query does. */
INGOT_API ingot_status ingot_nvfp4_mlp_workspace_size(ingot_context_t ctx, int64_t m,
                                                      int64_t k, int64_t hidden, int64_t n,
                                                      size_t *bytes);

/* The gated MLP in one call: h = ingot_nvfp4_geglu(x, w_gate_up) quantized
 * with h_global_scale (F32 [1]) into the workspace, then
 * out [M, N] (F32 or BF16) = ingot_nvfp4_gemm(h, w_down [N, H]). Results are
 * identical to the two calls. */
INGOT_API ingot_status ingot_nvfp4_mlp(ingot_context_t ctx, const ingot_nvfp4_matrix *x,
                                       const ingot_nvfp4_matrix *w_gate_up,
                                       const ingot_tensor *h_global_scale,
                                       const ingot_nvfp4_matrix *w_down,
                                       const ingot_tensor *out, void *workspace,
                                       size_t workspace_bytes, struct CUstream_st *stream);

/* ------------------------------------------------------------------------ */
/* Sampling                                                                  */
/* ------------------------------------------------------------------------ */
/*
 * One sampling step for B rows (requests) over a vocabulary of V tokens
 * (docs/sampling.md): masks and logit
 * bias, temperature, top-k, top-p, min-p, a seeded draw or greedy, the
 * drawn token's log-probabilities and the top-n (token, logprob) pairs,
 * in one call. Rows are independent: a row's result depends only on its
 * own logits, masks and parameters, never on its index, on B or on the
 * other rows (a NaN or fully masked row poisons nothing else).
 *
 * Inputs
 *   logits [B, V]  F32, BF16 or F16; any row stride, last dimension
 *                  contiguous. 1 <= V <= 2^31 - 1, B <= 2^31 - 1; B = 0 is
 *                  a successful no-op. Any value may be -Inf, +Inf or NaN.
 *   params         an ingot_sampling_params (below; NULL: every field
 *                  absent). Its tensors live in the context's memory:
 *                  device (or pinned host) memory on CUDA, host memory on
 *                  the CPU, so a CUDA graph replays them with new values.
 *
 * Per row r (x_i = logits[r, i] converted exactly to fp32):
 *  1. Bias and masks. l_i = x_i + b_1 + b_2 + ... over the bias entries
 *     (r, i, b) in list order (fp32 additions). Token i is ALLOWED iff its
 *     bit in allowed[r] is 1 (when a bitmask is given), no banned entry
 *     (r, i) exists, and l_i is finite: -Inf masks a token, and NaN or +Inf
 *     (in x_i or in l_i) is treated as masked and sets
 *     INGOT_SAMPLING_ROW_NAN.
 *  2. No allowed token: the row is EMPTY (INGOT_SAMPLING_ROW_EMPTY): token
 *     -1, probabilities 0, log-probabilities -Inf (the raw top-n below
 *     still lists the raw distribution, which is taken before the masks).
 *  3. m = max of the allowed l_i; T = temperature[r].
 *     T == 0 (greedy): the token is the lowest allowed id with l_i == m;
 *     the final distribution is one-hot on it (top-k/p, min-p, seed and
 *     position are not used).
 *     T > 0: s_i = (l_i - m) / T for allowed i (one fp32 subtraction, one
 *     IEEE division; s_i <= 0, s = 0 at the maximum) and
 *     w_i = ingot_sampling_exp(s_i) (fp32, in [0, 1]). RANK ORDER sorts the
 *     allowed tokens by s_i descending, then by id ascending.
 *  4. Filters (T > 0), each exact, each keeping a prefix of rank order:
 *     top-k: k = top_k[r]; if 0 < k < (allowed count) keep the first k in
 *            rank order: exactly k tokens; among equal values at the
 *            boundary the lowest ids are kept.
 *     top-p: p = top_p[r]; if p < 1, keep the shortest rank-order prefix
 *            of the top-k set K whose cumulative sum of w reaches
 *            p * sum_K w (the top-k-renormalised mass reaches p). Sums of
 *            w are EXACT (each fp32 w is a multiple of 2^-149; the CPU
 *            adds them as 192-bit integers) and rounded once to double:
 *            the prefix ends at the first token where double(cumulative)
 *            >= (double)p * double(sum_K w). The same for every order of
 *            the terms, so any cut of the row sums the same.
 *     min-p: q = min_p[r]; if q > 0, drop every token with
 *            s_i < ingot_sampling_log(q), i.e. with probability below
 *            q * p_max (q = 1 keeps the tokens equal to the maximum).
 *     The FINAL set F keeps the maximum token whatever the parameters, so
 *     it is never empty; a token whose s_i is -Inf (underflow of the
 *     division) is dropped. Final distribution: p_i = w_i / sum_F w for i
 *     in F, 0 elsewhere (w_i, and so p_i, underflows to 0 for s_i < -104;
 *     such a token is never drawn).
 *  5. Draw (T > 0): token = argmax over i in F of s_i + g_i (one fp32
 *     addition; lowest id on ties), g_i = ingot_sampling_gumbel(seed[r],
 *     position[r], i): Gumbel-max, an exact draw from the final
 *     distribution up to fp32 rounding of the keys. The draw depends only
 *     on (seed, position, the row's logits, masks and parameters).
 *
 * The generator (bit-exact, the same on every backend):
 *   (x0, x1, x2, x3) = Philox-4x32-10(counter = {i, 0, position & 0xffffffff,
 *                      position >> 32}, key = {seed & 0xffffffff, seed >> 32})
 *   (Random123's philox4x32, 10 rounds);
 *   u = (1 + (x0 >> 9) 2^-23) 2^-(1 + clz(x1)), clz(0) = 32: the fp32 with
 *       exponent field 126 - clz(x1) and mantissa x0 >> 9, in
 *       [2^-33, 1 - 2^-24], never 0 or 1, uniform up to the float grid;
 *   g = -log(-log(1 - u)) evaluated with ingot's portable fp32 log (single
 *       IEEE operations only; src/common/sampling_ref.h).
 * Because s_i, w_i and g_i are computed with single IEEE operations, every
 * backend draws the same token whenever it keeps the same final set; they
 * can differ only when a top-p cumulative sum lies within float rounding of
 * its threshold (the CUDA kernels round their sums differently from the
 * CPU's exact ones; docs/sampling.md gives the measured rate).
 *
 * Parameter rules. Per-row values: temperature finite and >= 0; top_k >= 0
 * (0 or >= V: off); top_p in (0, 1] (1: off); min_p in [0, 1] (0: off).
 * CPU: checked before running; a bad value returns INVALID_ARGUMENT naming
 * the element, nothing written. CUDA: values in device memory are checked
 * on the device without a host read: a row with a bad value gets token -1
 * and INGOT_SAMPLING_ROW_BAD_PARAMETER, -Inf log-probabilities, top-n
 * slots -1 / -Inf and (softmax) zero probabilities; other rows are
 * unaffected.
 *
 * Sparse lists. banned [N, 2] I32 holds (row, token) pairs; bias_ids
 * [M, 2] I32 (row, token) with bias_values [M] F32. Any row strides. An
 * entry whose row is outside [0, B) is ignored: pad a fixed-capacity list
 * with row = -1 to replay a CUDA graph with fewer entries. An entry with a
 * row in range but a token outside [0, V) is ignored and sets
 * INGOT_SAMPLING_ROW_BAD_ENTRY on that row.
 *
 * Common rules. Outputs must not overlap inputs, each other or the
 * workspace. On any error but CUDA_ERROR nothing is written or launched. No op allocates,
 * synchronises the host or reads device data from the host: a whole step is
 * capturable in a CUDA graph. Scratch memory comes from the caller: ask
 * *_workspace_size with the same shape and pass at least that many bytes,
 * 16-byte aligned (workspace may be NULL when 0 bytes are needed); its
 * contents on entry do not matter and are undefined after the call.
 *
 * CUDA: each op is one kernel launch (two or three in the cases below) and
 * needs no workspace except for the WIDE paths below (a few KB, for
 * V >= 32768 on sm_90 code). A row is processed by a cluster of up to 16 thread blocks
 * (sm_90; one block before) holding the row in shared memory, so V is
 * bounded by the device: on an H200 about 800k tokens, and with the raw
 * outputs of ingot_sample 400k on the general kernel, 580k on the dense
 * one (830k in a call without filters or top-n); on
 * pre-Hopper GPUs (one block a row) about 34k (17k with the raw outputs) on
 * an A100, so typical LLM vocabularies need sm_90 for now; larger V
 * returns NOT_SUPPORTED before launch. Two kernels (and, for one or two
 * rows, the WIDE paths below); which kernel serves a row
 * depends only on that row's parameters and the call's outputs:
 *   - DENSE (the faster one): rows with no filter (top_k 0 or >= V,
 *     top_p 1, min_p 0), and rows of ingot_sample with 1 <= top_k <= 64
 *     (32 when V <= 512), whatever their top_p and min_p, in a call
 *     without top-n outputs; in a call with top-n outputs of n <= 64 (32
 *     when V <= 512), its rows without a filter (the top-n set is found
 *     exactly, like a small top-k). Tokens are the
 *     CPU's bit for bit but for one boundary: without a filter no mass
 *     decides anything; with a small top-k the kernel finds the top-k set
 *     exactly and runs top-p (portable exp, sums in double in rank order,
 *     within 64 x 2^-53 of the total from the CPU's exact sums: a token can
 *     differ only if a cumulative sum lies that close to its target),
 *     min-p and the draw on it. Other masses use a fast exp (within 3 ulp; a weight e^{s_i}
 *     below 2^-126 counts as 0, so such a probability is 0), summed four
 *     tokens at a time in fp32, then as exact fixed-point integers (units
 *     of 2^-40), so a row's sums do not depend on their order at all.
 *     Also, in such a call, rows of ingot_sample with top-p and / or min-p
 *     but no top-k whose final set lies within the row's 64 (32) most
 *     probable tokens: the common case of a language model's top-p. The
 *     kernel finds those tokens as for a small top-k and runs the same
 *     steps on them, top-p's total being the row's mass (fast exp, so a
 *     top-p boundary may differ from the CPU as on the general kernel). A
 *     row whose final set may reach further is handed to the general
 *     kernel: it costs the dense kernel's pass and reduction on top of the
 *     general kernel's work.
 *   - GENERAL: the other rows (a larger top-k, the nucleus rows above that
 *     reach past the 64, any filtered row of ingot_sampling_softmax, any
 *     filtered row of a call with top-n outputs), rows with a bad value,
 *     and every row of a call with a larger top-n. Masses are the
 *     portable exp summed as exact 64-bit fixed-point integers (w * 2^F,
 *     F = min(62, 63 - ceil(log2 V))); tokens identical to the CPU except at
 *     top-p boundaries (see above).
 *   A call the dense kernel can serve launches it alone when it has no
 *   top_k / top_p / min_p tensors; with them both kernels are launched,
 *   each taking its rows, so passing NULL for unused filters saves a
 *   launch.
 *   - WIDE (ingot_sampling_softmax and ingot_sample, where the library's
 *     sm_90 code runs, i.e. Hopper): a call of B <= 2 rows, V >= 32768, no
 *     top_k / top_p / min_p tensors, no bias / ban lists and (ingot_sample)
 *     no top-n outputs (properties of the call, not of a row), that the
 *     dense kernel could serve, spreads each row over about 132 / B blocks
 *     of the whole GPU instead of one cluster: three kernels (the softmax)
 *     or two (the sample) chained by programmatic dependent launch, the
 *     partial results (a few KB) in the workspace. The same bits as the
 *     dense kernel.
 *   - 16-BIT (ingot_sampling_softmax): a call of bf16 / f16 logits without
 *     filter tensors or bias / ban lists that the dense kernel would take,
 *     with more blocks than the dense kernel runs at once (B x blocks a
 *     row > 3 x SMs: B >= 25 at V >= 61441 on an H200), or of any B > 2
 *     with 61441 <= V <= 237568 (on 16-block clusters, as on an H200),
 *     keeps each block's logits as 16-bit values instead of fp32 and
 *     computes each weight twice, so that twice as many rows are in
 *     flight. The same bits as the dense kernel.
 * Either way probabilities and log-probabilities agree with the CPU within
 * 2e-6 relative, and a row's result does not depend on the batch, its index
 * or its neighbours.
 * Where the library's sm_90 code runs (Hopper; a newer GPU runs the
 * compute_80 PTX, without these launches), the kernels use programmatic
 * dependent launch: each may be
 * scheduled while the stream's previous kernel still runs, and waits for
 * it to complete before touching global memory (only its own launch
 * parameters are read before; the kernels of the wide paths after their
 * first also read the logits, bitmask, temperatures, seeds, positions and
 * partial results that the first one has already waited for); it then lets the stream's next
 * kernel be scheduled early, which matters only if that kernel was itself
 * launched with programmatic stream serialization (and so must wait the
 * same way before reading these outputs). In a CUDA graph of consecutive
 * sampling calls this hides most of each kernel's launch latency and
 * parameter fetch.
 */

/* Bits of the per-row status (row_status outputs). */
enum {
  INGOT_SAMPLING_ROW_EMPTY = 1u << 0,         /* no allowed token: token -1 */
  INGOT_SAMPLING_ROW_NAN = 1u << 1,           /* a NaN or +Inf logit (masked) */
  INGOT_SAMPLING_ROW_BAD_ENTRY = 1u << 2,     /* a banned/bias token outside [0, V) */
  INGOT_SAMPLING_ROW_BAD_PARAMETER = 1u << 3  /* CUDA: a per-row value broke a rule */
};

#define INGOT_SAMPLING_STRUCT_VERSION 1 /* of the structs below */
#define INGOT_SAMPLING_MAX_TOP 1024     /* largest n of the top-n outputs */

/* Per-row parameters and masks. Every tensor is optional (NULL: absent).
 * Start from INGOT_SAMPLING_PARAMS_INITIALIZER. */
typedef struct ingot_sampling_params {
  uint32_t struct_size;    /* sizeof(ingot_sampling_params) */
  uint32_t struct_version; /* INGOT_SAMPLING_STRUCT_VERSION */
  const ingot_tensor *temperature; /* F32 [B]; absent: 1 */
  const ingot_tensor *top_k;       /* I32 [B]; absent: off */
  const ingot_tensor *top_p;       /* F32 [B]; absent: off */
  const ingot_tensor *min_p;       /* F32 [B]; absent: off */
  const ingot_tensor *seed;        /* U64 or I64 (same bits) [B]; absent: 0 */
  const ingot_tensor *position;    /* U64 or I64 [B], e.g. the token's index in
                                    * its sequence; absent: 0 */
  const ingot_tensor *allowed;     /* I32 or U32 [B, ceil(V/32)], any row
                                    * stride: xgrammar's bitmask, token t is
                                    * bit t & 31 (LSB first) of word t >> 5,
                                    * 1 = allowed; bits past V are ignored */
  const ingot_tensor *banned;      /* I32 [N, 2]: (row, token) pairs */
  const ingot_tensor *bias_ids;    /* I32 [M, 2]: (row, token) pairs ... */
  const ingot_tensor *bias_values; /* F32 [M]: ... and the added logit bias */
} ingot_sampling_params;

#define INGOT_SAMPLING_PARAMS_INITIALIZER                                          \
  {                                                                                \
    (uint32_t) sizeof(ingot_sampling_params), INGOT_SAMPLING_STRUCT_VERSION, NULL, \
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL                       \
  }

/* Flags of ingot_sampling_logprobs. */
enum {
  /* top-n pairs from the final distribution (after masks, bias, temperature
   * and filters) instead of the raw one. */
  INGOT_SAMPLING_TOP_FINAL = 1u << 0
};

/* Optional log-probability outputs of ingot_sample. Every tensor is
 * optional (NULL: not written). Start from
 * INGOT_SAMPLING_LOGPROBS_INITIALIZER.
 *   token_logprob      F32 [B]: log p_i of the drawn token under the final
 *                      distribution (0 for a greedy row; -Inf for an empty
 *                      row).
 *   token_raw_logprob  F32 [B]: its log-probability under the RAW
 *                      distribution softmax(x / T') of the logits as given
 *                      (before masks and bias; NaN and +-Inf entries left
 *                      out), T' = T, or 1 for a greedy row. -Inf for an
 *                      empty row.
 *   top_ids [B, n] I32 and top_logprobs [B, n] F32 (either or both, same
 *                      n, 0 <= n <= INGOT_SAMPLING_MAX_TOP; any row
 *                      stride): the n most probable tokens of the raw
 *                      distribution (of the final one with
 *                      INGOT_SAMPLING_TOP_FINAL), most probable first,
 *                      lowest id first among equal values, with their
 *                      log-probabilities. Slots past the tokens with a
 *                      finite log-probability hold id -1 and -Inf (all of
 *                      them for an empty row with the final distribution, or
 *                      a row whose logits are all -Inf / NaN). */
typedef struct ingot_sampling_logprobs {
  uint32_t struct_size;    /* sizeof(ingot_sampling_logprobs) */
  uint32_t struct_version; /* INGOT_SAMPLING_STRUCT_VERSION */
  uint32_t flags;          /* OR of INGOT_SAMPLING_TOP_FINAL */
  uint32_t reserved;       /* must be 0 */
  const ingot_tensor *token_logprob;
  const ingot_tensor *token_raw_logprob;
  const ingot_tensor *top_ids;
  const ingot_tensor *top_logprobs;
} ingot_sampling_logprobs;

#define INGOT_SAMPLING_LOGPROBS_INITIALIZER                                            \
  {                                                                                    \
    (uint32_t) sizeof(ingot_sampling_logprobs), INGOT_SAMPLING_STRUCT_VERSION, 0u, 0u, \
        NULL, NULL, NULL, NULL                                                         \
  }

/* Bytes of workspace ingot_sample needs for logits [batch, vocab_size] of
 * logits_dtype (F32, BF16 or F16) and top-n outputs of num_top columns
 * (0 when none); the same for every params and flags. Depends on the
 * context's backend and device; 0 for batch = 0. CPU: 12 * V + 8 * num_top
 * rounded up to 16 (a row's values and a sort buffer, reused row after
 * row). CUDA: a few KB for batch >= 1, V >= 32768 and num_top = 0 where the
 * library's sm_90 code runs (6400 bytes at V = 151936 on an H200), else 0; whether
 * or not the call takes the WIDE path (B, filter tensors, lists), and the
 * same for every batch, so a buffer sized for the largest batch serves
 * every smaller one: the wide sampler's partial results and a counter a
 * row. Returns INVALID_ARGUMENT (bad value, NULL bytes, or a shape whose
 * logits [batch, vocab_size] byte count overflows int64: the text names
 * batch and vocab_size with their values); *bytes is written only on
 * success. */
INGOT_API ingot_status ingot_sample_workspace_size(ingot_context_t ctx, int64_t batch,
                                                   int64_t vocab_size, ingot_dtype logits_dtype,
                                                   int64_t num_top, size_t *bytes);

/* The sampling step, by the rules above.
 *   logits      [B, V] F32 / BF16 / F16, any row stride
 *   params      NULL or per-row parameters and masks
 *   tokens      [B] I32 (written): the drawn token, -1 for an empty row (or,
 *               on CUDA, a row with a bad parameter)
 *   row_status  NULL or [B] U32 / I32 (written): OR of INGOT_SAMPLING_ROW_*
 *   logprobs    NULL or the optional log-probability outputs
 *   workspace   >= ingot_sample_workspace_size(ctx, B, V, dtype, n) bytes
 * Nothing of size [B, V] is written. CPU: runs synchronously, stream NULL.
 * Returns INVALID_ARGUMENT (shape, dtype, NULL, alignment, residency,
 * overlap, struct size or version, a per-row value on the CPU),
 * INSUFFICIENT_WORKSPACE, NOT_SUPPORTED (CUDA: V too large for the device,
 * see above; B x blocks a row beyond 2^31 - 1; kernels that could not be set
 * up on the device), CUDA_ERROR (a launch failed; of the two launches of a
 * call with filter tensors, the first may then have run, and the outputs
 * are undefined: a handed-off row's token is -2 until the second runs). */
INGOT_API ingot_status ingot_sample(ingot_context_t ctx, const ingot_tensor *logits,
                                    const ingot_sampling_params *params,
                                    const ingot_tensor *tokens, const ingot_tensor *row_status,
                                    const ingot_sampling_logprobs *logprobs, void *workspace,
                                    size_t workspace_bytes, struct CUstream_st *stream);

/* Bytes of workspace ingot_sampling_softmax needs for logits
 * [batch, vocab_size] of logits_dtype. CPU: 12 * V rounded up to 16 (0
 * would do without top-k / top-p, but the size cannot depend on params).
 * CUDA: a few KB for batch >= 1 and V >= 32768 where the library's sm_90
 * code runs (2816 bytes at V = 151936 on an H200), else 0; whether or not the call takes
 * the wide path (B, filter tensors, lists), and the same for every batch, so a buffer
 * sized for the largest batch serves every smaller one: the partial
 * results of the WIDE softmax, which takes calls of B <= 2 rows without
 * filter tensors or bias / ban lists and spreads each row over blocks of
 * the whole GPU (three kernels chained by programmatic dependent launch;
 * the same bits as the dense kernel, which takes the other calls).
 * Returns INVALID_ARGUMENT as ingot_sample_workspace_size does, also when
 * the F32 probs [batch, vocab_size] would overflow int64 bytes. */
INGOT_API ingot_status ingot_sampling_softmax_workspace_size(ingot_context_t ctx, int64_t batch,
                                                             int64_t vocab_size,
                                                             ingot_dtype logits_dtype,
                                                             size_t *bytes);

/* probs [B, V] F32 (any row stride, written) <- the final distribution of
 * every row, by the rules above (seed and position are not used):
 *   - with only temperature (and masks) given: the temperature softmax
 *     softmax((l - m) / T) over the allowed tokens, 0 elsewhere; finite
 *     under any -Inf pattern; exactly 0 for masked tokens;
 *   - with top_k / top_p / min_p: the renormalised filtered distribution;
 *   - T == 0: one-hot on the greedy token; an EMPTY row: all zeros.
 * Each probability is w_i / sum_F w rounded to fp32 (CPU: the exact sum
 * rounded once to double; CUDA: w_i times the fp32 reciprocal of the sum, within
 * 2e-6 relative; the dense kernel's w_i and sum are described above). row_status: NULL or [B] U32 / I32, OR of
 * INGOT_SAMPLING_ROW_*. Statuses as for ingot_sample. */
INGOT_API ingot_status ingot_sampling_softmax(ingot_context_t ctx, const ingot_tensor *logits,
                                              const ingot_sampling_params *params,
                                              const ingot_tensor *probs,
                                              const ingot_tensor *row_status, void *workspace,
                                              size_t workspace_bytes,
                                              struct CUstream_st *stream);

/* The generator, on the host, for tests and for engines that must
 * reproduce a draw (e.g. to verify speculative tokens): the uniform u and
 * the Gumbel noise g of (seed, position, token) defined above, bit for bit
 * what every backend uses. No context; never fails. */
INGOT_API float ingot_sampling_uniform(uint64_t seed, uint64_t position, int32_t token);
INGOT_API float ingot_sampling_gumbel(uint64_t seed, uint64_t position, int32_t token);
/* The portable fp32 exp of step 3 (x <= 0; x > 0 counts as 0; within
 * 1.3 ulp) and log of the min-p rule (x > 0 finite; within 1 ulp). */
INGOT_API float ingot_sampling_exp(float x);
INGOT_API float ingot_sampling_log(float x);

/* ------------------------------------------------------------------------ */
/* Sharded sampling                                                          */
/* ------------------------------------------------------------------------ */
/*
 * Sampling from VOCABULARY-SHARDED logits (tensor parallelism: shard j holds
 * logits[:, v0_j : v0_j + Vr_j] of a vocabulary of V) without gathering the
 * B x V logits (docs/sampling.md, "Sharded sampling"). Each shard runs the
 * same short sequence of STEPS on its own slice; after each step the caller
 * exchanges the shards' small RECORDS over any transport (NCCL, MPI, a host
 * copy), as the plan says for that step: an ALL-GATHER of the records, or
 * an elementwise uint64 SUM of them (an all-reduce; its size does not grow
 * with S). In one process, ingot_sampling_shard_gather and
 * ingot_sampling_shard_sum do it. The last exchange feeds a FINISH that
 * writes the outputs. On either backend the result is, bit for bit, the
 * reference: what ingot_sample (or ingot_sampling_softmax, each shard
 * writing its slice of probs) gives on the unsharded logits on a CPU
 * context: tokens, row_status, token_logprob, token_raw_logprob, top-n raw
 * and final, for ANY number of shards and ANY split. (CUDA's unsharded
 * calls agree with the CPU within their own stated bounds, e.g. the fast
 * exp of the dense kernel: their log-probabilities and probs can differ
 * from the sharded ones in the last bits.) The bits do not depend on the
 * split because
 *   - every per-token value (l_i, s_i, w_i, the Gumbel noise keyed by
 *     (seed, position, GLOBAL id)) is the same operations on the same
 *     inputs;
 *   - every combination is exact and order-free: maxima with the lowest id
 *     on ties, OR of the status bits, integer counts, and masses summed
 *     EXACTLY (each w_i is an integer multiple of 2^-149: a 192-bit integer
 *     sum, rounded once to double; the unsharded ops sum the same way);
 *   - top-k, top-p and top-n keep prefixes of rank order (s descending, id
 *     ascending), found exactly from per-shard candidate lists or by a
 *     distributed radix selection, ties at the cut resolved by global id.
 *
 * Use (every shard runs the same calls; error handling left out):
 *
 *     ingot_sampling_shard sh = INGOT_SAMPLING_SHARD_INITIALIZER;
 *     sh.vocab_size = V; sh.vocab_begin = v0; sh.vocab_count = Vr;
 *     sh.num_shards = S; sh.shard_index = rank; sh.max_top_k = 64;
 *     ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
 *     ingot_sampling_shard_get_plan(ctx, &sh, B, INGOT_DTYPE_BF16, &plan);
 *     // record: plan.max_record_bytes; gathered: plan.max_exchanged_bytes;
 *     // ws: plan.workspace_bytes, the same buffer from step 0 to the finish
 *     for (int i = 0; i < plan.num_steps; i++) {
 *       size_t prev = i ? plan.exchanged_bytes[i - 1] : 0, n = plan.record_bytes[i];
 *       ingot_sampling_shard_step(ctx, i, &slice, &params, &sh, i ? gathered : NULL,
 *                                 prev, record, n, ws, plan.workspace_bytes, stream);
 *       if (plan.exchange[i] == INGOT_SAMPLING_SHARD_EXCHANGE_SUM)
 *         ncclAllReduce(record, gathered, n / 8, ncclUint64, ncclSum, comm, stream);
 *       else
 *         ncclAllGather(record, gathered, n, ncclUint8, comm, stream);
 *     }
 *     ingot_sampling_shard_finish_sample(ctx, &sh, gathered,
 *         plan.exchanged_bytes[plan.num_steps - 1], tokens, row_status, &logprobs,
 *         ws, plan.workspace_bytes, stream);
 *
 * Inputs of every shard
 *   logits     [B, Vr] (F32 / BF16 / F16, any row stride): the shard's slice;
 *              column j is global token v0 + j. Vr = 0 is allowed (the shard
 *              holds no token and contributes empty records), so a padded
 *              split can pass each shard's real columns only.
 *   params     the unsharded call's ingot_sampling_params, identical on every
 *              shard: per-row values, the bitmask over the WHOLE vocabulary
 *              ([B, ceil(V/32)], global bit positions), banned / bias lists
 *              in GLOBAL ids (each shard applies the entries inside its
 *              range; an entry with a token outside [0, V) sets
 *              INGOT_SAMPLING_ROW_BAD_ENTRY, which the shards OR: reported
 *              once, as by the unsharded call).
 *   shard      an ingot_sampling_shard (below), describing this shard and
 *              the plan (max_top_k, num_top, flags) that every shard must
 *              share.
 * The shards' ranges must tile [0, V): disjoint, covering it; slot order
 * (shard_index) is the order of the all-gather and need not follow v0.
 *
 * Steps (which ones a call runs depends only on max_top_k = kc, num_top =
 * n and the flags; bytes are per row, per shard; an all-gather leaves S
 * times them on every shard, a sum once; every record also has a header,
 * 64 bytes (all-gather) or 128 (sum), and is padded to 16 bytes):
 *   STATS       always, all-gather. Status bits, allowed count, maximum and
 *               raw maximum with their ids. 24 bytes.
 *   CANDIDATES  when kc > 0, all-gather. The shard's first kc allowed tokens
 *               of rank order as (s, id). 8 kc bytes.
 *   TOP-K x 4   with INGOT_SAMPLING_SHARD_SELECT_TOP_K. Four radix rounds
 *               (digits of 8, 8, 8, 7 bits of the rank key |s|): rounds
 *               1-3 sum 256 uint64 per-bucket counts (2048 bytes); round 4
 *               all-gathers 128 uint32 counts (512 bytes: the tie at the
 *               cut is split by the shards' own counts).
 *   TOP-P x 4   with INGOT_SAMPLING_SHARD_SELECT_TOP_P. Four radix rounds:
 *               rounds 1-3 sum 256 exact per-bucket masses, each four
 *               48-bit limbs in uint64 words (8192 bytes); round 4
 *               all-gathers 128 uint32 counts (512 bytes).
 *   DRAW        ingot_sample, all-gather: the best draw key, the final and
 *               raw masses, the shard's top-n list. 64 + 8 n bytes.
 *   MASS        (INGOT_SAMPLING_SHARD_SOFTMAX) all-gather: the final mass.
 *               24 bytes.
 * So a call costs 2 exchanges (masks, bias, bans, temperature, greedy,
 * min-p, both log-probabilities, top-n), 3 with candidates (top-k <= kc,
 * with top-p and min-p), and 4 more for each selection; at most
 * INGOT_SAMPLING_SHARD_MAX_STEPS. For comparison, an all-gather of the
 * logits leaves 4 V bytes a row on every shard (607,744 at V = 151936);
 * top-p without top-k leaves 24 S + 3 x 8192 + 512 S + 64 S (25,776 at
 * S = 2, 29,376 at S = 8).
 *
 * Which rows need what (T > 0; a greedy or empty row needs nothing):
 *   - a row is SERVED BY THE CANDIDATES when kc > 0 and (V <= kc or
 *     1 <= top_k <= kc): its top-k and top-p are found from the S kc
 *     candidates, which hold its top-k set;
 *   - otherwise a row with 0 < top_k < V needs SELECT_TOP_K, and a row with
 *     top_p < 1 needs SELECT_TOP_P.
 * A row that needs a selection its plan lacks is a bad per-row value: the
 * CPU returns INVALID_ARGUMENT naming the row. Rows that need nothing (or
 * less) still travel in every record: the sizes depend on the plan only.
 *
 * Every step function reads the previous step's gathered records, then
 * scans its slice again (nothing of size [B, Vr] is kept between steps);
 * the workspace carries each row's state from step to step, so the SAME
 * workspace, untouched in between, must be passed from step 0 to the
 * finish. Records and gathered buffers: 16-byte aligned, in the context's
 * memory (same byte order on every shard). After an all-gather step,
 * gathered holds the S records back to back in slot order (slot j at j *
 * record_bytes[step]); after a sum step, the elementwise sum of the S
 * records as uint64 words (record_bytes[step] / 8 of them; modulo 2^64,
 * though no field of ingot's can wrap for S <= 65536). The records' contents
 * are ingot's: a transport copies or adds them, never edits them otherwise.
 * On the CPU each step checks the exchanged headers (which step, which
 * call, the slots, the tiling) and returns INVALID_ARGUMENT naming the slot
 * (all-gather) or the sum (sum).
 *
 * B = 0: every call succeeds and writes nothing.
 * CUDA: each step and each finish is one launch, without host
 * synchronisation or allocation (records, gathered buffers and workspace in
 * device memory), so a step sequence can be captured in a CUDA graph with
 * the NCCL collectives. The records are the CPU's byte for byte (CPU and
 * CUDA shards may exchange them) and the outputs the CPU sharded call's
 * (log-probabilities: up to the double log of the device against the
 * host's libm, see docs/sampling.md). The host reads no device value, so
 * the exchanged headers are not checked, and a row with a bad per-row
 * value, or whose selection the plan lacks, is not refused: as in
 * ingot_sample on CUDA it gets token -1, INGOT_SAMPLING_ROW_BAD_PARAMETER,
 * -Inf log-probabilities, top-n slots -1 / -Inf and zero probabilities;
 * the other rows are unaffected. ingot_sampling_shard_gather is S
 * device-to-device copies, ingot_sampling_shard_sum one launch.
 */

#define INGOT_SAMPLING_SHARD_MAX_SHARDS 256 /* S */
#define INGOT_SAMPLING_SHARD_MAX_STEPS 11   /* STATS + CANDIDATES + 4 + 4 + DRAW */

/* Flags of ingot_sampling_shard. */
enum {
  /* top-n of the final distribution (as INGOT_SAMPLING_TOP_FINAL) */
  INGOT_SAMPLING_SHARD_TOP_FINAL = 1u << 0,
  /* the steps of ingot_sampling_softmax (finish: ..._finish_softmax; num_top 0) */
  INGOT_SAMPLING_SHARD_SOFTMAX = 1u << 1,
  /* the radix rounds of a top-k larger than max_top_k */
  INGOT_SAMPLING_SHARD_SELECT_TOP_K = 1u << 2,
  /* the radix rounds of a top-p the candidates do not serve */
  INGOT_SAMPLING_SHARD_SELECT_TOP_P = 1u << 3
};

/* The exchange after a step (ingot_sampling_shard_plan.exchange). */
enum {
  /* all-gather: every shard gets the S records back to back in slot order */
  INGOT_SAMPLING_SHARD_EXCHANGE_GATHER = 0,
  /* all-reduce: every shard gets the S records summed as uint64 words */
  INGOT_SAMPLING_SHARD_EXCHANGE_SUM = 1
};

/* One shard of a call and the call's plan. Start from
 * INGOT_SAMPLING_SHARD_INITIALIZER. */
typedef struct ingot_sampling_shard {
  uint32_t struct_size;    /* sizeof(ingot_sampling_shard) */
  uint32_t struct_version; /* INGOT_SAMPLING_STRUCT_VERSION */
  int64_t vocab_size;      /* V, the whole vocabulary: 1 <= V <= 2^31 - 1 */
  int64_t vocab_begin;     /* v0: this shard holds global ids [v0, v0 + Vr) */
  int64_t vocab_count;     /* Vr >= 0, v0 + Vr <= V (= logits.shape[1]) */
  int32_t num_shards;      /* S, 1 .. INGOT_SAMPLING_SHARD_MAX_SHARDS */
  int32_t shard_index;     /* this shard's slot in the gathered records, 0 .. S-1 */
  int32_t max_top_k;       /* kc, 0 .. INGOT_SAMPLING_MAX_TOP: candidates a shard sends */
  int32_t num_top;         /* n of the top-n outputs, 0 .. INGOT_SAMPLING_MAX_TOP */
  uint32_t flags;          /* OR of INGOT_SAMPLING_SHARD_* */
  uint32_t reserved;       /* must be 0 */
} ingot_sampling_shard;

#define INGOT_SAMPLING_SHARD_INITIALIZER                                                   \
  {                                                                                        \
    (uint32_t) sizeof(ingot_sampling_shard), INGOT_SAMPLING_STRUCT_VERSION, 0, 0, 0, 1, 0, \
        0, 0, 0u, 0u                                                                       \
  }

/* What a call costs, from ingot_sampling_shard_get_plan. */
typedef struct ingot_sampling_shard_plan {
  uint32_t struct_size;    /* sizeof(ingot_sampling_shard_plan) (set by the caller) */
  uint32_t struct_version; /* INGOT_SAMPLING_STRUCT_VERSION (set by the caller) */
  int32_t num_steps;       /* steps, i.e. exchanges, of a call */
  int32_t reserved;
  size_t record_bytes[INGOT_SAMPLING_SHARD_MAX_STEPS]; /* one shard's record of step i */
  /* what the exchange of step i leaves on every shard: S x record_bytes[i]
   * (all-gather) or record_bytes[i] (sum) */
  size_t exchanged_bytes[INGOT_SAMPLING_SHARD_MAX_STEPS];
  int32_t exchange[INGOT_SAMPLING_SHARD_MAX_STEPS]; /* INGOT_SAMPLING_SHARD_EXCHANGE_* */
  int32_t reserved2;
  size_t max_record_bytes;    /* the largest record_bytes */
  size_t max_exchanged_bytes; /* the largest exchanged_bytes */
  size_t workspace_bytes;     /* the shard's workspace, kept from step 0 to the finish */
} ingot_sampling_shard_plan;

#define INGOT_SAMPLING_SHARD_PLAN_INITIALIZER                                         \
  {                                                                                   \
    (uint32_t) sizeof(ingot_sampling_shard_plan), INGOT_SAMPLING_STRUCT_VERSION, 0, 0, \
        {0}, {0}, {0}, 0, 0, 0, 0                                                     \
  }

/* The plan of a call of `batch` rows whose logits slice has logits_dtype:
 * the steps, each step's exchange, record bytes (header + B x the bytes
 * above, rounded up to 16) and exchanged bytes, and the workspace bytes
 * (CPU: 88 B + 8 Vr + 8 max(Vr, S kc, S n, 1) + 8 max(n, 1), each part
 * rounded up to 16: the rows' state, the slice's values and the merge
 * buffers; CUDA: 88 B + 4 B Vr, each part rounded up to 16: the rows'
 * states and every row's values over the slice; 0 for B = 0). Every shard
 * of a call gets the same exchanges and record sizes. Returns
 * INVALID_ARGUMENT (a bad shard field, batch, dtype, struct size /
 * version, NULL); *plan is written only on success. */
INGOT_API ingot_status ingot_sampling_shard_get_plan(ingot_context_t ctx,
                                                     const ingot_sampling_shard *shard,
                                                     int64_t batch, ingot_dtype logits_dtype,
                                                     ingot_sampling_shard_plan *plan);

/* Step `step` (0 .. num_steps - 1) of one shard.
 *   logits      [B, Vr] the shard's slice (shape[1] == shard->vocab_count)
 *   params      NULL or the unsharded call's parameters (see above)
 *   gathered    step 0: NULL (gathered_bytes 0); else the exchanged records of
 *               step - 1, gathered_bytes >= plan.exchanged_bytes[step - 1]
 *   record      written: this shard's record, record_bytes >=
 *               plan.record_bytes[step]
 *   workspace   >= plan.workspace_bytes, the same from step 0 to the finish
 * Returns INVALID_ARGUMENT (any bad argument, as ingot_sample's, a per-row
 * value, a row whose selection the plan lacks, a record or gathered buffer
 * too small, misaligned or overlapping; CPU: gathered records of another
 * step, call or slot, ranges that do not tile [0, V)),
 * INSUFFICIENT_WORKSPACE, CUDA_ERROR (the launch failed). Nothing is
 * written on error. */
INGOT_API ingot_status ingot_sampling_shard_step(ingot_context_t ctx, int32_t step,
                                                 const ingot_tensor *logits,
                                                 const ingot_sampling_params *params,
                                                 const ingot_sampling_shard *shard,
                                                 const void *gathered, size_t gathered_bytes,
                                                 void *record, size_t record_bytes,
                                                 void *workspace, size_t workspace_bytes,
                                                 struct CUstream_st *stream);

/* The finish of ingot_sample (a plan without INGOT_SAMPLING_SHARD_SOFTMAX):
 * from the S gathered records of the last step (the DRAW step) and the
 * workspace of the steps, writes tokens [B] I32, row_status (NULL or [B]),
 * and the logprobs outputs (NULL or as for ingot_sample; top-n outputs of
 * n == shard->num_top columns and (flags & INGOT_SAMPLING_TOP_FINAL) ==
 * (shard->flags & INGOT_SAMPLING_SHARD_TOP_FINAL)), exactly as ingot_sample
 * writes them for the unsharded logits. Every shard may call it (all get
 * the same outputs) or only those that need them. Statuses as for
 * ingot_sampling_shard_step. */
INGOT_API ingot_status ingot_sampling_shard_finish_sample(
    ingot_context_t ctx, const ingot_sampling_shard *shard, const void *gathered,
    size_t gathered_bytes, const ingot_tensor *tokens, const ingot_tensor *row_status,
    const ingot_sampling_logprobs *logprobs, void *workspace, size_t workspace_bytes,
    struct CUstream_st *stream);

/* The finish of ingot_sampling_softmax (a plan with
 * INGOT_SAMPLING_SHARD_SOFTMAX): probs [B, Vr] F32 (any row stride) gets
 * this shard's slice of the unsharded call's probs (on a CPU context), bit
 * for bit, and
 * row_status (NULL or [B]) the row's status. Reads the slice again (logits
 * and params as in the steps). Statuses as for ingot_sampling_shard_step. */
INGOT_API ingot_status ingot_sampling_shard_finish_softmax(
    ingot_context_t ctx, const ingot_tensor *logits, const ingot_sampling_params *params,
    const ingot_sampling_shard *shard, const void *gathered, size_t gathered_bytes,
    const ingot_tensor *probs, const ingot_tensor *row_status, void *workspace,
    size_t workspace_bytes, struct CUstream_st *stream);

/* The local exchange of an all-gather step: gathered <- records[0], ...,
 * records[S - 1] back to back (slot j at j x record_bytes), as an
 * all-gather would leave them, for shards that live in one process (tests,
 * engines without a collective library). records[j] must be each shard's
 * record of the same step (record_bytes = plan.record_bytes[step]);
 * gathered_bytes >= S x record_bytes and gathered must not overlap a
 * record. Returns
 * INVALID_ARGUMENT, CUDA_ERROR. */
INGOT_API ingot_status ingot_sampling_shard_gather(ingot_context_t ctx, int32_t num_shards,
                                                   const void *const *records,
                                                   size_t record_bytes, void *gathered,
                                                   size_t gathered_bytes,
                                                   struct CUstream_st *stream);

/* The local exchange of a sum step: summed <- records[0] + ... +
 * records[S - 1] as uint64 words (record_bytes / 8 of them, modulo 2^64),
 * as an all-reduce would leave it. records[j]: each shard's record of the
 * same step (record_bytes = plan.record_bytes[step]); summed_bytes >=
 * record_bytes, and summed must not overlap a record. Returns
 * INVALID_ARGUMENT, CUDA_ERROR. */
INGOT_API ingot_status ingot_sampling_shard_sum(ingot_context_t ctx, int32_t num_shards,
                                                const void *const *records, size_t record_bytes,
                                                void *summed, size_t summed_bytes,
                                                struct CUstream_st *stream);

/* ---- The whole sharded call over NCCL ---------------------------------- */
/*
 * The step sequence above in one call per shard: every step, the NCCL
 * collective the plan gives after it (ncclAllGather of the record, or
 * ncclAllReduce of its uint64 words with ncclSum), and the finish, all
 * enqueued on `stream` of a CUDA context, with no host synchronisation or
 * allocation: the call can be captured in a CUDA graph. Every rank of the
 * communicator calls it with its own slice, the same params and the same
 * plan fields; shard->num_shards must be the communicator's rank count and
 * shard->shard_index the caller's rank (its slot in the all-gathers), and
 * the communicator's device the context's. The outputs are those of the
 * step functions, on every rank: bit for bit ingot_sample
 * (ingot_sampling_softmax: this shard's slice of probs) on the unsharded
 * logits on a CPU context.
 *
 * NCCL: the library must be built with nccl.h found (CMake INGOT_NCCL; the
 * CUDA toolkit's, or NCCL_HOME). libnccl is not linked: the NCCL functions
 * are looked up when first needed in the NCCL that made `comm`, which the
 * process has loaded already: its global scope, else a loaded libnccl.so.2
 * (or only the file named by the environment variable INGOT_NCCL_LIBRARY,
 * when set). Without either, these functions return NOT_SUPPORTED and say
 * why.
 *
 * The calls enqueue NCCL collectives between kernels that read their
 * results, so they must run one thread per rank, OUTSIDE any
 * ncclGroupStart / ncclGroupEnd (inside a group the collectives would start
 * only at ncclGroupEnd, after the kernels that read them: wrong results,
 * which NCCL gives no way to detect), on a blocking communicator (the
 * default; a non-blocking one's ncclInProgress is reported as CUDA_ERROR).
 *
 * workspace: ingot_sampling_sharded_nccl_workspace_size bytes of device
 * memory, 16-byte aligned (the steps' workspace, one record and one
 * gathered buffer), used from the first step to the finish.
 *
 * Every rank must make the call with the same B and plan, and the ranks'
 * vocabulary ranges must tile [0, V): a rank that returns an error before
 * its first collective, or that issues collectives of other sizes, leaves
 * the others waiting in one (as with any NCCL collective). The calls check
 * what one rank can see; ingot_sampling_sharded_nccl_verify checks the
 * ranks against each other at setup (whenever B or the split changes).
 */
struct ncclComm; /* NCCL's communicator: ncclComm_t is struct ncclComm * */

/* Bytes of workspace of the calls below for `batch` rows of logits_dtype
 * under shard's plan: plan.workspace_bytes + plan.max_record_bytes +
 * plan.max_exchanged_bytes, each part rounded up to 256. Returns
 * INVALID_ARGUMENT as ingot_sampling_shard_get_plan. */
INGOT_API ingot_status ingot_sampling_sharded_nccl_workspace_size(
    ingot_context_t ctx, const ingot_sampling_shard *shard, int64_t batch,
    ingot_dtype logits_dtype, size_t *bytes);

/* The setup check of a sharded call over NCCL, made by every rank of comm
 * with the arguments of the calls to come (shard, batch, logits dtype):
 * one all-gather of each rank's call shape, then the comparison. Every rank
 * that gets a usable communicator (a CUDA context, comm non-NULL, NCCL
 * found) joins the all-gather, even when its own arguments are wrong, so no
 * rank is left waiting: a rank whose own checks fail (those of the calls:
 * shard fields, batch, dtype, comm's ranks / rank / device) returns their
 * error, the others INVALID_ARGUMENT naming that rank; ranks that disagree
 * (B, V, max_top_k, num_top, flags, ranges that overlap or leave a gap in
 * [0, V)) get INVALID_ARGUMENT on every rank, the same text, each rank
 * compared with rank 0. It WAITS for `stream` and allocates a few bytes of
 * device memory for the exchange: a setup call, not for the hot path
 * (INVALID_ARGUMENT while the stream is capturing a graph). */
INGOT_API ingot_status ingot_sampling_sharded_nccl_verify(
    ingot_context_t ctx, struct ncclComm *comm, const ingot_sampling_shard *shard, int64_t batch,
    ingot_dtype logits_dtype, struct CUstream_st *stream);

/* ingot_sample on vocabulary-sharded logits: logits is this rank's slice
 * [B, Vr], params the unsharded call's, shard this rank's descriptor (a
 * plan without INGOT_SAMPLING_SHARD_SOFTMAX); tokens, row_status and
 * logprobs as for ingot_sampling_shard_finish_sample, written on every
 * rank. Returns INVALID_ARGUMENT (any argument the step and finish
 * functions refuse; comm NULL, or a communicator whose rank count, rank or
 * device is not shard->num_shards, shard->shard_index, the context's
 * device: the text gives both), NOT_SUPPORTED (a CPU context, or no NCCL:
 * see above), INSUFFICIENT_WORKSPACE, CUDA_ERROR (a launch failed; an NCCL
 * call failed: the text gives ncclGetErrorString). Every argument is
 * checked before the first launch, so nothing is written on those errors
 * but CUDA_ERROR. */
INGOT_API ingot_status ingot_sample_sharded_nccl(
    ingot_context_t ctx, struct ncclComm *comm, const ingot_tensor *logits,
    const ingot_sampling_params *params, const ingot_sampling_shard *shard,
    const ingot_tensor *tokens, const ingot_tensor *row_status,
    const ingot_sampling_logprobs *logprobs, void *workspace, size_t workspace_bytes,
    struct CUstream_st *stream);

/* ingot_sampling_softmax on vocabulary-sharded logits: probs [B, Vr] F32
 * gets this rank's slice of the unsharded probs, row_status (NULL or [B])
 * the row's status; shard's plan has INGOT_SAMPLING_SHARD_SOFTMAX. Returns
 * as ingot_sample_sharded_nccl. */
INGOT_API ingot_status ingot_sampling_softmax_sharded_nccl(
    ingot_context_t ctx, struct ncclComm *comm, const ingot_tensor *logits,
    const ingot_sampling_params *params, const ingot_sampling_shard *shard,
    const ingot_tensor *probs, const ingot_tensor *row_status, void *workspace,
    size_t workspace_bytes, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_INGOT_H */
