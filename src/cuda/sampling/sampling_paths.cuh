/*
 * The interface between the sampling dispatcher (sampling_dispatch.cu, which
 * decides which path takes which call and which row: its file comment has
 * the whole rule) and the paths it launches:
 *   - the general kernel (sampling_general.cu): any row, every filter;
 *   - the dense kernel (sampling_dense.cu): rows without a filter, small
 *     top-k and nucleus rows, top-n outputs of at most small_k entries;
 *   - the 16-bit softmax (sampling_softmax_half.cu): the dense kernel's
 *     softmax calls of bf16 / f16 logits in large batches;
 *   - the wide softmax and the wide sampler (sampling_wide_softmax.cu,
 *     sampling_wide_sample.cu): calls of one or two rows over the whole GPU.
 * Here: the launchers' prototypes, the rule by which the general and the
 * dense kernel split the rows of one call (both kernels evaluate it on the
 * device), and the constants and geometry that the dispatcher's predicates
 * share with the paths (so that neither repeats the other's numbers).
 */
#ifndef INGOT_CUDA_SAMPLING_PATHS_CUH
#define INGOT_CUDA_SAMPLING_PATHS_CUH

#include <climits>
#include <cstddef>
#include <cstdint>

#include "cuda/cuda.cuh"
#include "cuda/sampling/sampling_common.cuh"

namespace ingot_sampling {

/* ---- the rows of a split call ------------------------------------------------------- */

/* With filter tensors given (SamplingArgs::split = 1), the dense kernel and
 * the general kernel are both launched, in that order, over every row; each
 * decides from the row's parameters alone (no host read) whether the row is
 * its own, by the predicates below. */

/* Whether a row with these parameters needs no filter: top_k 0 or >= V,
 * top_p 1, min_p 0. */
__device__ __forceinline__ bool params_plain(int32_t k, float p, float q, int64_t vocab) {
  return (k == 0 || k >= vocab) && p == 1.0f && q == 0.0f;
}

/* Whether a row's filters are top-p and / or min-p without a top-k: the
 * dense kernel's nucleus rows (ingot_sample), decided in its top-small_k set
 * when they can be, else handed to the general kernel (kHandOffToken). */
__device__ __forceinline__ bool params_nucleus(int32_t k, float p, float q, int64_t vocab) {
  return (k == 0 || k >= vocab) && (p != 1.0f || q != 0.0f);
}

/* Whether row r is the dense kernel's: every per-row value valid (a bad one
 * is flagged by the general kernel) and no filter, or (ingot_sample, with
 * a.small_k > 0) a top-k of at most a.small_k or no top-k at all (any
 * top_p, min_p: a nucleus row). Decided from the row's parameters alone. */
__device__ __forceinline__ bool row_for_dense(const SamplingArgs &a, int64_t r, bool sample) {
  const ingot_sampling_input &in = a.in;
  const float T = in.temperature ? in.temperature[r] : 1.0f;
  const int32_t k = in.top_k ? in.top_k[r] : 0;
  const float p = in.top_p ? in.top_p[r] : 1.0f;
  const float q = in.min_p ? in.min_p[r] : 0.0f;
  return ingot_sampling_params_check(T, k, p, q) == 0 &&
         (params_plain(k, p, q, in.vocab) ||
          (sample && a.small_k > 0 && (k <= a.small_k || k >= in.vocab)));
}

/* The token the dense kernel writes for a nucleus row whose final set
 * reaches past its top-small_k set: the general kernel, launched after it
 * in the same call, takes the row then (and overwrites it). */
constexpr int32_t kHandOffToken = -2;

/* Whether the general kernel leaves row r to the dense kernel: the row is
 * the dense kernel's and, for a nucleus row, was not handed off. Called
 * after the wait for the dense kernel's grid, whose writes it reads. */
__device__ __forceinline__ bool row_done_by_dense(const SamplingArgs &a, int64_t r, bool sample) {
  if (!row_for_dense(a, r, sample)) return false;
  const ingot_sampling_input &in = a.in;
  const int32_t k = in.top_k ? in.top_k[r] : 0;
  const float p = in.top_p ? in.top_p[r] : 1.0f;
  const float q = in.min_p ? in.min_p[r] : 0.0f;
  return !(sample && params_nucleus(k, p, q, in.vocab) && a.out.tokens[r] == kHandOffToken);
}

/* ---- the general kernel (sampling_general.cu) ---------------------------------------- */

/* The general kernel's blocks per row and tokens per block (plan). */
struct GeneralGeometry {
  int cluster;
  int chunk;
};

/* ---- the dense kernel (sampling_dense.cu) -------------------------------------------- */

constexpr int kDenseThreads = 512;
constexpr int kDenseWarps = kDenseThreads / 32;
constexpr int kChunkUnit = 512;               /* tokens per block: a multiple of this */
constexpr int kDenseMinTokensPerBlock = 4096; /* fewer blocks for small V */
constexpr int kCandCap = 256; /* a warp's list of draw candidates (16-bit offsets) */
/* The largest chunk: the draw's candidate lists hold 16-bit token offsets. */
constexpr int kDenseMaxChunk = 65536;
/* Blocks a SM of the softmax and the plain sampler (the kernel's launch
 * bounds: dense_kernel); the kernels with a selection run two. */
constexpr int kDenseBlocksPerSm = 3;
/* The largest top-k (and top-n) the dense kernel selects itself (small_k <= it). */
constexpr int kSmallK = 64;

/* ingot_sample's three kernels, so that code a call cannot use does not weigh
 * on the register allocation of the common one: kDenseSample, rows without a
 * filter; kDenseSampleFilter, calls with filter tensors whose small top-k and
 * nucleus rows are the dense kernel's (a.small_k > 0); kDenseSampleTop, calls
 * with top-n outputs (rows without a filter, a.small_k = 0). */
enum DenseMode { kDenseSoftmax = 0, kDenseSample = 1, kDenseSampleTop = 2, kDenseSampleFilter = 3 };

/* SamplingArgs as the dense kernel and the 16-bit softmax read them: chunk
 * is a multiple of kChunkUnit, frac_bits and keep_raw are not used. */
typedef SamplingArgs DenseArgs;

/* The scratch area after the block's values (dense_smem_bytes), in 16-bit
 * units: kDenseSample's candidate lists (kCandCap a warp), the selection
 * kernels' lists as long as the chunk (also the small top-k's keys: the
 * dispatcher's dense_small_k). 16-bit logits are staged in place
 * (the kernel), so the dtype does not matter: at V = 262144 a block of the
 * softmax takes 66 KB, of kDenseSample 74 KB, three blocks a SM. */
__host__ __device__ constexpr int dense_scratch_len(int mode, int chunk) {
  return mode == kDenseSoftmax ? 0 : mode == kDenseSample ? kDenseWarps * kCandCap : chunk;
}

/* The kernel's dynamic shared memory (its layout is in the kernel). */
inline size_t dense_smem_bytes(int mode, int chunk) {
  return (size_t)chunk * 4 + (size_t)dense_scratch_len(mode, chunk) * 2 + (size_t)chunk / 8;
}

/* Blocks per row and tokens per block: a function of V and the device only
 * (the sums' order, so the results, must not depend on the batch). The
 * 16-bit softmax runs the same geometry. */
inline void dense_geometry(const struct ingot_context *ctx, int64_t vocab, int *cluster,
                           int *chunk) {
  int64_t c = (vocab + kDenseMinTokensPerBlock - 1) / kDenseMinTokensPerBlock;
  if (c > ctx->cuda->sampling.dense_cluster) c = ctx->cuda->sampling.dense_cluster;
  if (c < 1) c = 1;
  const int64_t per = (vocab + c - 1) / c;
  const int64_t ch = (per + kChunkUnit - 1) / kChunkUnit * kChunkUnit;
  *cluster = (int)c;
  *chunk = ch > INT_MAX ? INT_MAX : (int)ch;
}

/* ---- the wide paths (sampling_wide_softmax.cu, sampling_wide_sample.cu) --------------- */

/* The calls they are given: B <= kWideMaxBatch rows of V >= kWideMinVocab
 * tokens (the measured reason is the dispatcher's); their workspace is
 * sized for the largest such batch. */
constexpr int64_t kWideMaxBatch = 2;
constexpr int64_t kWideMinVocab = 32768;

}  // namespace ingot_sampling

/* ---- the launchers ---------------------------------------------------------------------- */

/* Per-context set-up of each path, in the order ingot_cuda_sampling_init
 * calls them: the general kernel's (also ctx->cuda->sampling.pdl: whether
 * the kernels run their sm_90 code), the dense kernel's (dense_cluster 0
 * when it is unusable), the 16-bit softmax's (its result is
 * ctx->cuda->sampling.half; called only when the dense kernel is usable). */
void ingot_cuda_sampling_general_init(struct ingot_context *ctx);
void ingot_cuda_sampling_dense_init(struct ingot_context *ctx);
bool ingot_cuda_sampling_half_init(const struct ingot_context *ctx);

/* The general kernel: plan sets the args' geometry fields (keep_raw, chunk,
 * frac_bits) and g, or fails NOT_SUPPORTED (the row does not fit the
 * device) with nothing launched; launch runs it over every row (split = 0)
 * or over the rows the dense kernel left (split = 1, after that kernel).
 * softmax: 1 for ingot_sampling_softmax (args.probs), 0 for ingot_sample. */
ingot_status ingot_cuda_sampling_general_plan(struct ingot_context *ctx, const char *op,
                                              int softmax, ingot_sampling::SamplingArgs *args,
                                              ingot_sampling::GeneralGeometry *g);
ingot_status ingot_cuda_sampling_general_launch(struct ingot_context *ctx, const char *op,
                                                int softmax,
                                                const ingot_sampling::SamplingArgs &args,
                                                const ingot_sampling::GeneralGeometry &g,
                                                struct CUstream_st *stream);

/* The dense kernel: every row (split = 0) or its rows of a split call
 * (split = 1, row_for_dense); mode, its instantiation; small_k, the
 * largest top-k it takes (SamplingArgs::small_k, the same in both launches
 * of a call; 0: none). */
ingot_status ingot_cuda_sample_dense(struct ingot_context *ctx, const ingot_sampling_input *in,
                                     const ingot_sampling_output *out,
                                     ingot_sampling::DenseMode mode, int split, int small_k,
                                     struct CUstream_st *stream);
ingot_status ingot_cuda_sampling_softmax_dense(struct ingot_context *ctx,
                                               const ingot_sampling_input *in, float *probs,
                                               int64_t probs_stride, uint32_t *row_status,
                                               int split, struct CUstream_st *stream);

/* The 16-bit softmax: every row of the call (no split); its blocks a SM at
 * `chunk` tokens a block (ingot_cuda_sampling_dense_blocks_per_sm). */
ingot_status ingot_cuda_sampling_softmax_half(struct ingot_context *ctx,
                                              const ingot_sampling_input *in, float *probs,
                                              int64_t probs_stride, uint32_t *row_status,
                                              struct CUstream_st *stream);
cudaError_t ingot_cuda_sampling_half_blocks_per_sm(int *blocks, ingot_dtype dtype, int chunk);

/* The wide paths: every row of the call, partial results in the workspace,
 * whose bytes (for any batch the dispatcher gives them) the _workspace
 * functions return. */
size_t ingot_cuda_sampling_softmax_wide_workspace(const struct ingot_context *ctx,
                                                  int64_t vocab);
ingot_status ingot_cuda_sampling_softmax_wide(struct ingot_context *ctx,
                                              const ingot_sampling_input *in, float *probs,
                                              int64_t probs_stride, uint32_t *row_status,
                                              void *workspace, struct CUstream_st *stream);
size_t ingot_cuda_sample_wide_workspace(const struct ingot_context *ctx, int64_t vocab);
ingot_status ingot_cuda_sample_wide(struct ingot_context *ctx, const ingot_sampling_input *in,
                                    const ingot_sampling_output *out, void *workspace,
                                    struct CUstream_st *stream);

#endif /* INGOT_CUDA_SAMPLING_PATHS_CUH */
