/*
 * Sampling, CUDA backend: THE dispatcher. It holds the backend's entry
 * points for ingot_sample and ingot_sampling_softmax (the rules: the
 * Sampling section of include/ingot/ingot.h), their workspace queries and
 * the per-context set-up, and decides which path takes which call and, in a
 * call with filter tensors, which row. Five paths, each exact to the CPU
 * reference in the same way (below):
 *   general     sampling_general.cu       any row, every filter, any top-n
 *   dense       sampling_dense.cu         rows without a filter; small top-k
 *                                         and nucleus rows; top-n <= small_k
 *   16-bit      sampling_softmax_half.cu  the dense kernel's softmax, bf16 /
 *                                         f16 logits, 2 bytes a token
 *   wide        sampling_wide_softmax.cu  one or two rows, each over the
 *   wide        sampling_wide_sample.cu   whole GPU
 *
 * THE ROUTING RULE, tested in this order (the first that holds takes the
 * call). "Dense-sized": the dense kernel is set up and its cluster (up to
 * 16 blocks) holds a row in shared memory, at most 65536 tokens a block
 * (dense_fits).
 *
 * ingot_sampling_softmax
 *   1. B <= 2, V >= 32768, no filter tensors, no bias / ban lists, sm_90
 *      code, dense-sized: the WIDE SOFTMAX. A cluster a row would leave all
 *      but 16 SMs idle; spread over the whole GPU a row takes 7.36 / 7.71 us
 *      at B = 1 / 2 against the dense kernel's 7.84 (8.83 at B = 4).
 *   2. no filter tensors, dense-sized: the DENSE KERNEL takes every row
 *      (one pass over shared memory, no radix select) ...
 *   2a. ... unless bf16 / f16 logits, no lists, B > 2, and more blocks than
 *      the dense kernel runs at once (B C > 3 SMs) or 16-block rows of at
 *      most 14848 tokens (61441 <= V <= 237568): the 16-BIT SOFTMAX, twice
 *      the rows in flight, which a write-bound batch needs more than the
 *      exps it saves (B = 64, V = 262144: 39.5 against 45.5 us).
 *   3. filter tensors, dense-sized: SPLIT. The dense kernel, launched
 *      first, takes the rows without a filter whose per-row values are
 *      valid, the general kernel (split = 1) the others: a row with a filter
 *      needs the general kernel's radix selects (four rounds over the row,
 *      a cluster exchange each), a row without one does not.
 *   4. otherwise: the GENERAL KERNEL, every row (NOT_SUPPORTED, before
 *      anything is launched, where a row does not fit the device).
 *
 * ingot_sample (small_k: 64, or 32 for V <= 512: dense_small_k)
 *   1. B <= 2, V >= 32768, no filter tensors, no lists, no top-n outputs,
 *      sm_90 code, dense-sized: the WIDE SAMPLER, for the same reason (the
 *      masked decode step of one sequence).
 *   2. no filter tensors, dense-sized, n <= small_k top-n outputs (or
 *      none): the DENSE KERNEL, every row (kDenseSample; kDenseSampleTop
 *      with top-n outputs, found by its own exact small top-k selection).
 *   3. filter tensors, dense-sized, n <= small_k: SPLIT as for the softmax.
 *      In calls without top-n outputs the dense kernel (kDenseSampleFilter)
 *      also takes the rows with top_k <= small_k (any top_p, min_p: decided
 *      exactly in their top-k set) and the nucleus rows (top-p / min-p, no
 *      top-k: decided in their top-small_k set when the final set lies in
 *      it; otherwise handed to the general kernel, kHandOffToken): every
 *      filter keeps a prefix of rank order inside the top-k set, so with
 *      k <= small_k the row is decided exactly in its k largest keys,
 *      without the radix selects.
 *   4. otherwise: the GENERAL KERNEL, every row.
 *
 * The per-row half of a split (which row each kernel takes, from the row's
 * own parameters on the device) is row_for_dense and row_done_by_dense in
 * sampling_paths.cuh. Workspace: only the wide paths use one; it is sized
 * for their largest batch whenever some call of that V may take them.
 *
 * Who holds a row: in the general kernel, the dense kernel and the 16-bit
 * softmax, a CLUSTER of C blocks (row r = cluster r of the grid), block b
 * holding the row's tokens [b * chunk, (b + 1) * chunk) in shared memory
 * (the dense family's C and chunk depend on V and the device only:
 * dense_geometry; the general kernel's on the batch too). In the wide paths
 * nch blocks of one chunk each over the whole GPU (block b: chunk b % nch of
 * row b / nch), partial results in the workspace.
 *
 * Exactness, common to every path (each path's file has its own part):
 *   - per-element values (s_i = (x_i - m) / T, the Philox uniform, the
 *     Gumbel noise and key s_i + g_i) are the reference's single IEEE
 *     operations, src/common/sampling_ref.h, shared with the CPU reference:
 *     the drawn token is the CPU's, bit for bit, except where a top-p
 *     boundary lands within the masses' rounding;
 *   - every reduction is exact and order-free: maxima and argmax (ties to
 *     the lowest id), integer counts and flags, masses as 64-bit fixed-point
 *     integers; so no result depends on how a row is cut into blocks, on the
 *     batch or on the neighbouring rows;
 *   - the paths that share calls give the same bits: the wide softmax and
 *     the 16-bit softmax the dense kernel's probabilities, the wide sampler
 *     the dense kernel's token, status and log-probabilities. The dense
 *     family's masses (an FMA exp, units of 2^-40: sampling_cluster.cuh)
 *     differ from the general kernel's (the portable exp, units of
 *     2^-(63 - ceil(log2 V))) in the last bits only: each within 1e-6 of
 *     the CPU's double sums.
 */
#include <climits>

#include "cuda/common.cuh"
#include "cuda/cuda.cuh"
#include "cuda/sampling/sampling_common.cuh"
#include "cuda/sampling/sampling_paths.cuh"

namespace {

using namespace ingot_sampling;

/* ---- the rule's predicates, in the order the calls test them ------------------------- */

/* Whether the dense kernel (instantiation `mode`) holds a row of the call:
 * its geometry (a function of V and the device) within its shared memory
 * and a chunk of at most kDenseMaxChunk tokens, and the grid within 2^31 - 1
 * blocks. */
bool dense_fits(const struct ingot_context *ctx, const ingot_sampling_input *in, int mode) {
  if (ctx->cuda->sampling.dense_cluster < 1) return false;
  int c, chunk;
  dense_geometry(ctx, in->vocab, &c, &chunk);
  return chunk <= kDenseMaxChunk &&
         dense_smem_bytes(mode, chunk) <= (size_t)ctx->cuda->sampling.dense_smem &&
         in->batch * c <= INT_MAX;
}

/* 1. The wide paths: a call of one or two rows without what they do not
 * implement (filter tensors, lists, top-n outputs), sm_90 code (their
 * kernels are chained by programmatic dependent launch). Measured on the
 * H200 at V = 151936 (one call a graph; the probe is in git history at
 * d897405:dev/cuda/wave_probe.c): the wide path 7.36 / 7.71 / 8.83 us at
 * B = 1 / 2 / 4 against the dense kernel's 7.84, so it takes B <=
 * kWideMaxBatch = 2 only (and rows of V >= kWideMinVocab = 32768). Larger
 * batches of the same rows take the dense kernel, whose bits the wide paths
 * give: so they ask for a dense-sized row too. */
bool softmax_wide_fits(const struct ingot_context *ctx, const ingot_sampling_input *in) {
  return ctx->cuda->sampling.pdl && in->batch <= kWideMaxBatch && in->vocab >= kWideMinVocab &&
         !in->top_k && !in->top_p && !in->min_p && in->num_bias == 0 && in->num_banned == 0 &&
         dense_fits(ctx, in, kDenseSoftmax);
}

bool sample_wide_fits(const struct ingot_context *ctx, const ingot_sampling_input *in,
                      const ingot_sampling_output *out) {
  return ctx->cuda->sampling.pdl && in->batch <= kWideMaxBatch && in->vocab >= kWideMinVocab &&
         out->num_top == 0 && !in->top_k && !in->top_p && !in->min_p && in->num_bias == 0 &&
         in->num_banned == 0 && dense_fits(ctx, in, kDenseSample);
}

/* The workspace of a call of V tokens a row: the wide path's, when some
 * batch of such calls may take it (its fits above, but for the batch and the
 * per-call tensors), sized for the largest batch; none otherwise. */
bool softmax_wide_may_fit(const struct ingot_context *ctx, int64_t vocab) {
  return ctx->cuda->sampling.pdl && vocab >= kWideMinVocab;
}

bool sample_wide_may_fit(const struct ingot_context *ctx, int64_t vocab, int64_t num_top) {
  return ctx->cuda->sampling.pdl && vocab >= kWideMinVocab && num_top <= 0 &&
         ctx->cuda->sampling.dense_cluster >= 1;
}

/* 2-3. The largest top_k (and top-n) the dense kernel takes in an
 * ingot_sample call (0: none): its small top-k selection keeps the C lists
 * of k keys in the block's scratch (chunk * 2 bytes); in its second pass at
 * most k threads hold candidates, each at most 4 per 128 tokens of its
 * warp's region, which the stage (chunk / 4 keys) and block 0's values
 * (chunk / 2) must hold (sampling_small_k.cuh). The largest k (a power of 2
 * up to kSmallK) for which both bounds hold: 64 from V > 512 on. */
int dense_small_k(const struct ingot_context *ctx, const ingot_sampling_input *in) {
  int c, chunk;
  dense_geometry(ctx, in->vocab, &c, &chunk);
  const int64_t region = chunk / kDenseWarps, per_thread = 4 * ((region + 127) / 128);
  for (int k = kSmallK; k >= 1; k >>= 1)
    if (k * per_thread <= chunk / 4 && (int64_t)chunk * 2 >= (int64_t)c * k * 8) return k;
  return 0;
}

/* The dense kernel's instantiation for an ingot_sample call: code a call
 * cannot use does not weigh on the register allocation of the common one
 * (their shared memory differs too). */
DenseMode dense_sample_mode(int64_t num_top, int small_k) {
  return num_top > 0 ? kDenseSampleTop : small_k > 0 ? kDenseSampleFilter : kDenseSample;
}

/* Which rows of a call the dense kernel takes (host only, nothing
 * launched), and how. */
struct DenseRoute {
  int rows;       /* 0: none, the general kernel takes the call; 1: every row (no filter
                   * tensor); 2: its rows of a split call, the general kernel the others */
  DenseMode mode; /* the instantiation */
  int small_k;    /* SamplingArgs::small_k of both launches of the call: 0 in calls without
                   * filter tensors, with top-n outputs and in ingot_sampling_softmax */
};

DenseRoute dense_mode(const struct ingot_context *ctx, const ingot_sampling_input *in,
                      int64_t num_top, int softmax) {
  const bool filters = in->top_k || in->top_p || in->min_p;
  const int small_k = dense_small_k(ctx, in);
  DenseRoute route;
  /* filter tensors without top-n outputs: the small top-k and nucleus rows
   * too (kDenseSampleFilter); with top-n outputs the rows without a filter
   * only (kDenseSampleTop) */
  route.small_k = !softmax && filters && num_top == 0 ? small_k : 0;
  route.mode = softmax ? kDenseSoftmax : dense_sample_mode(num_top, route.small_k);
  route.rows = filters ? 2 : 1;
  /* a row the dense kernel cannot hold: the general kernel's (its plan
   * says whether the device holds the row at all) */
  if (!dense_fits(ctx, in, route.mode)) route.rows = 0;
  /* the top-n of a row without a filter is found as a small top-k set */
  if (num_top > small_k) route.rows = 0;
  return route;
}

/* Chunks up to this many tokens of 16-block rows take the 16-bit softmax in
 * any batch. */
constexpr int kHalfAnyBatchChunk = 14848;

/* 2a. Whether a softmax call the dense kernel takes whole (no filter
 * tensors; c blocks a row of `chunk` tokens) goes to the 16-bit softmax
 * instead: 16-bit logits, no lists, B > kWideMaxBatch (as the wide
 * softmax's calls, tried first, are), and more blocks than the dense kernel
 * runs at once (kDenseBlocksPerSm a SM), or 16 blocks a row of at most
 * kHalfAnyBatchChunk tokens (61441 <= V <= 237568 where the device runs
 * 16-block clusters). In a batch that fits at once the 16-bit kernel's two
 * exp passes over 2 chunk / 512 tokens a thread cost more as the chunk
 * grows, the dense kernel's passes much less: at V = 262144 B = 8 the dense
 * kernel took 12.6 us against 13.8, at V = 151936 9.8 against 9.0 (H200,
 * one call a graph, d897405:dev/cuda/wave_probe.c; docs/sampling.md has the
 * V x B table). Fewer than 16 blocks a row lost (V = 32771, 9 blocks: 7.8
 * against 8.6 at B = 8; not understood). From B = 25 on the 16-bit kernel wins at
 * every V measured (B = 64, V = 262144: 45.5 against 39.5). */
bool half_fits(const struct ingot_context *ctx, const ingot_sampling_input *in) {
  int c, chunk;
  dense_geometry(ctx, in->vocab, &c, &chunk);
  return ctx->cuda->sampling.half && in->dtype != INGOT_DTYPE_F32 && in->num_bias == 0 &&
         in->num_banned == 0 && in->batch > kWideMaxBatch &&
         ((c == (int)kMaxCluster && chunk <= kHalfAnyBatchChunk) ||
          in->batch * c > kDenseBlocksPerSm * (int64_t)ctx->sm_count);
}

}  // namespace

/* ---- the ops ---------------------------------------------------------------------------- */

ingot_status ingot_cuda_sample(struct ingot_context *ctx, const ingot_sampling_input *in,
                               const ingot_sampling_output *out, void *workspace,
                               size_t workspace_bytes, struct CUstream_st *stream) {
  (void)workspace_bytes; /* core checked it against the size query */
  static const char op[] = "ingot_sample";
  /* 1. one or two plain rows: spread over the whole GPU */
  if (sample_wide_fits(ctx, in, out))
    return ingot_cuda_sample_wide(ctx, in, out, workspace, stream);
  const DenseRoute dense = dense_mode(ctx, in, out->num_top, 0);
  /* 2. no filter tensors: the dense kernel alone */
  if (dense.rows == 1)
    return ingot_cuda_sample_dense(ctx, in, out, dense.mode, 0, dense.small_k, stream);
  /* 3-4. the general kernel must be able to take its rows before anything is launched */
  SamplingArgs args = {};
  args.in = *in;
  args.out = *out;
  args.row_status = out->row_status;
  GeneralGeometry g;
  ingot_status st = ingot_cuda_sampling_general_plan(ctx, op, 0, &args, &g);
  if (st) return st;
  if (dense.rows == 2) {
    /* 3. the dense kernel first: the general kernel reads its hand-offs */
    args.small_k = dense.small_k;
    if ((st = ingot_cuda_sample_dense(ctx, in, out, dense.mode, 1, args.small_k, stream)))
      return st;
    args.split = 1;
  }
  return ingot_cuda_sampling_general_launch(ctx, op, 0, args, g, stream);
}

ingot_status ingot_cuda_sampling_softmax(struct ingot_context *ctx,
                                         const ingot_sampling_input *in, float *probs,
                                         int64_t probs_stride, uint32_t *row_status,
                                         void *workspace, size_t workspace_bytes,
                                         struct CUstream_st *stream) {
  (void)workspace_bytes; /* core checked it against the size query */
  static const char op[] = "ingot_sampling_softmax";
  /* 1. one or two plain rows: spread over the whole GPU */
  if (softmax_wide_fits(ctx, in))
    return ingot_cuda_sampling_softmax_wide(ctx, in, probs, probs_stride, row_status, workspace,
                                            stream);
  const DenseRoute dense = dense_mode(ctx, in, 0, 1);
  if (dense.rows == 1) {
    /* 2a. large batches of 16-bit logits: more rows in flight */
    if (half_fits(ctx, in))
      return ingot_cuda_sampling_softmax_half(ctx, in, probs, probs_stride, row_status, stream);
    /* 2. no filter tensors: the dense kernel alone */
    return ingot_cuda_sampling_softmax_dense(ctx, in, probs, probs_stride, row_status, 0, stream);
  }
  /* 3-4. the general kernel must be able to take its rows before anything is launched */
  SamplingArgs args = {};
  args.in = *in;
  args.probs = probs;
  args.probs_stride = probs_stride;
  args.row_status = row_status;
  GeneralGeometry g;
  ingot_status st = ingot_cuda_sampling_general_plan(ctx, op, 1, &args, &g);
  if (st) return st;
  if (dense.rows == 2) {
    /* 3. the dense kernel takes the rows without a filter */
    if ((st = ingot_cuda_sampling_softmax_dense(ctx, in, probs, probs_stride, row_status, 1,
                                                stream)))
      return st;
    args.split = 1;
  }
  return ingot_cuda_sampling_general_launch(ctx, op, 1, args, g, stream);
}

/* ---- workspace queries ----------------------------------------------------------------- */

ingot_status ingot_cuda_sample_workspace_size(struct ingot_context *ctx, int64_t batch,
                                              int64_t vocab, ingot_dtype dtype, int64_t num_top,
                                              size_t *bytes) {
  (void)dtype;
  /* the wide sampler's partials (none for B = 0: no call runs) */
  *bytes = batch > 0 && sample_wide_may_fit(ctx, vocab, num_top)
               ? ingot_cuda_sample_wide_workspace(ctx, vocab)
               : 0;
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cuda_sampling_softmax_workspace_size(struct ingot_context *ctx, int64_t batch,
                                                        int64_t vocab, ingot_dtype dtype,
                                                        size_t *bytes) {
  (void)dtype;
  /* the wide softmax's partials (none for B = 0: no call runs) */
  *bytes = batch > 0 && softmax_wide_may_fit(ctx, vocab)
               ? ingot_cuda_sampling_softmax_wide_workspace(ctx, vocab)
               : 0;
  return INGOT_STATUS_SUCCESS;
}

/* ---- per-context set-up ------------------------------------------------------------------ */

/* Each path's attributes, set once instead of on every call. Never fails the
 * context: a path that cannot be set up is not routed to (the dense kernel:
 * dense_cluster 0; the 16-bit softmax: half 0; the wide paths: pdl 0), and
 * the general kernel's calls then fail NOT_SUPPORTED (init_error). */
extern "C" void ingot_cuda_sampling_init(struct ingot_context *ctx) {
  ingot_cuda_sampling_general_init(ctx); /* also pdl: whether the kernels run sm_90 code */
  ingot_cuda_sampling_dense_init(ctx);
  /* the 16-bit softmax runs the dense kernel's clusters and shared memory limit */
  ctx->cuda->sampling.half =
      ctx->cuda->sampling.dense_cluster > 0 && ingot_cuda_sampling_half_init(ctx);
}
