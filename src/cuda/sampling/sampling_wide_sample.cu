/*
 * Sampling, CUDA backend: the WIDE SAMPLER, wide_sample_max /
 * wide_sample_draw<kDtype, kGroups>: ingot_sample for one or two rows (B <=
 * kWideMaxBatch, V >= kWideMinVocab) without filter tensors, bias / ban
 * lists or top-n outputs (sample_wide_fits, sampling_dispatch.cu): the
 * masked step of a decode, cut as the wide softmax cuts its rows
 * (wide_geometry, sampling_cluster.cuh) over the whole GPU instead of one
 * cluster. Block b of the grid holds chunk b % nch of row b / nch. Two
 * kernels chained by programmatic dependent launch:
 *   1. wide_sample_max: the chunk's argmax key, finite raw maximum and
 *      flags -> load[b]; the row's counter done[r] = 0;
 *   2. wide_sample_draw: loads its chunk BEFORE its wait (as wide_mass),
 *      then the row's argmax and raw maximum from load, L0 (the argmax
 *      token's noise), the chunk's final and raw masses and its best draw
 *      key -> draw[b]; the row's last block to finish (done[r]) adds up the
 *      row's and writes the token, the status and the log-probabilities.
 *
 * Exactness. The dense kernel's bits (sampling_dense.cu): its masses are
 * fixed-point sums of terms that depend only on their token, and its draw
 * is the exact largest key, lowest id on ties (the draw of
 * sampling_cluster.cuh's comment), so neither depends on the cut: token,
 * status and both log-probabilities are the dense kernel's, whatever the
 * batch.
 */
#include <climits>
#include <cmath>

#include "common/sampling_ref.h"
#include "cuda/common.cuh"
#include "cuda/cuda.cuh"
#include "cuda/sampling/sampling_cluster.cuh"
#include "cuda/sampling/sampling_common.cuh"
#include "cuda/sampling/sampling_math.cuh"
#include "cuda/sampling/sampling_paths.cuh"

namespace {

using namespace ingot_sampling;

struct WideSampleArgs {
  const void *logits;
  int64_t logits_stride;
  const uint32_t *allowed; /* NULL: every token allowed */
  int64_t allowed_stride;
  const float *temperature;        /* NULL: 1 */
  const uint64_t *seed, *position; /* NULL: 0 */
  int32_t *tokens;
  uint32_t *row_status;                     /* NULL: not written */
  float *token_logprob, *token_raw_logprob; /* NULL: not written */
  LoadStats *load;                          /* workspace: [B * nch] each, */
  DrawStats *draw;
  unsigned *done; /* [B] */
  int64_t vocab;
  int chunk, nch; /* nch chunks a row, of chunk tokens (the last may be shorter) */
};

template <int kDtype, int kGroups>
__global__ void __launch_bounds__(kWideThreads, 1) wide_sample_max(const WideSampleArgs w) {
  const WidePart p = wide_part(w);
  wide_touch<kDtype>(w, p);
  wait_for_previous_grid();
  float x[kGroups][4];
  uint32_t bits[kGroups];
  wide_fetch<kDtype, kGroups, false>(w, p, x, bits);
  float rm = -INFINITY;
  bool nan = false;
#pragma unroll
  for (int g = 0; g < kGroups; g++) {
    rm = fmaxf(rm, finite_max4(x[g]));
    mask4(x[g], bits[g], nan);
  }
  const LoadStats s = wide_block_reduce<ReduceLoad>(LoadStats{
      wide_thread_best<kGroups>(x, p), rm, 0.0f, nan ? (uint32_t)INGOT_SAMPLING_ROW_NAN : 0u});
  if (threadIdx.x == 0) {
    w.load[blockIdx.x] = s;
    if (p.lo == 0) w.done[p.r] = 0; /* wide_sample_draw counts after its wait */
  }
}

template <int kDtype, int kGroups>
__global__ void __launch_bounds__(kWideThreads, 1) wide_sample_draw(const WideSampleArgs w) {
  const WidePart p = wide_part(w);
  /* inputs, final since wide_sample_max passed its wait (see raw4) */
  const float T = w.temperature ? __ldcg(w.temperature + p.r) : 1.0f;
  const uint64_t seed = w.seed ? __ldcg(w.seed + p.r) : 0;
  const uint64_t position = w.position ? __ldcg(w.position + p.r) : 0;
  float x[kGroups][4];
  uint32_t bits[kGroups];
  wide_fetch<kDtype, kGroups, true>(w, p, x, bits);
  wait_for_previous_grid();
  LoadStats st{0ull, -INFINITY, 0.0f, 0u};
  for (int i = threadIdx.x; i < w.nch; i += kWideThreads)
    st = ReduceLoad::combine(st, w.load[p.r * w.nch + i]);
  st = wide_block_reduce<ReduceLoad>(st);
  const bool bad = ingot_sampling_params_check(T, 0, 1.0f, 0.0f) != 0;
  const bool empty = st.best == 0, soft = !bad && !empty && T > 0.0f;
  const float m = empty ? 0.0f : best_value(st.best);
  const Divisor div_t = divisor_of(T > 0.0f ? T : 1.0f); /* the raw distribution's too */
  const bool want_mass = soft && w.token_logprob;
  const bool want_raw = !bad && w.token_raw_logprob && st.raw_max > -INFINITY;
  /* without a bitmask the raw distribution of a soft row is the final one */
  const bool raw_same = soft && !w.allowed;
  const bool sum_final = want_mass || (want_raw && raw_same);
  DrawStats d{0ull, 0ull, 0ull};
  with_fast(div_t.fast, [&](auto fast) {
    constexpr bool kFast = decltype(fast)::value;
    const float l0 =
        soft ? ingot_sampling_ref_gumbel(seed, position, (uint32_t)best_id(st.best)) : 0.0f;
    const float cut = __fsub_rn(__fsub_rn(l0, kGumbelMax), kApproxSlack);
    float best_k = -INFINITY;
    int32_t best_tok = INT_MAX;
#pragma unroll
    for (int g = 0; g < kGroups; g++) {
      float f[4];
      finite4(x[g], f);
      if (want_raw && !raw_same) d.raw_sum += raw_fixed4<kFast>(f, st.raw_max, div_t);
      if (!soft) continue;
      allow4(f, bits[g], f);
      float sc[4];
      scale4<kFast>(f, m, div_t, sc);
      if (sum_final) d.mass += exp_fixed4(sc);
#pragma unroll
      for (int e = 0; e < 4; e++) {
        if (!(sc[e] >= cut)) continue;
        /* a candidate: its approximate key first, the exact one only near the best */
        const int32_t id = (int32_t)(p.lo + wide_token(g) + e);
        const float u = ingot_sampling_ref_uniform(seed, position, (uint32_t)id);
        const float approx = __fadd_rn(sc[e], gumbel_approx(u));
        if (approx < __fsub_rn(fmaxf(l0, best_k), kApproxSlack)) continue;
        const float key =
            __fadd_rn(div_exact(__fsub_rn(f[e], m), div_t), ingot_sampling_ref_gumbel_of(u));
        if (key > best_k || (key == best_k && id < best_tok)) best_k = key, best_tok = id;
      }
    }
    if (best_k > -INFINITY) d.best = best_key(best_k, best_tok);
  });
  if (raw_same && want_raw) d.raw_sum = d.mass;
  d = wide_block_reduce<ReduceDraw>(d);
  /* the row's last block to get here finishes it */
  __shared__ bool last;
  if (threadIdx.x == 0) {
    w.draw[blockIdx.x] = d;
    __threadfence();
    last = atomicAdd(w.done + p.r, 1u) == (unsigned)w.nch - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  DrawStats fin{0ull, 0ull, 0ull};
  for (int i = threadIdx.x; i < w.nch; i += kWideThreads) {
    const DrawStats *e = w.draw + p.r * w.nch + i;
    fin = ReduceDraw::combine(fin, DrawStats{__ldcg(&e->mass), __ldcg(&e->raw_sum),
                                             __ldcg(&e->best)});
  }
  fin = wide_block_reduce<ReduceDraw>(fin); /* d's reads of part: before the barrier above */
  if (threadIdx.x != 0) return;
  const int64_t r = p.r;
  if (bad) {
    if (w.row_status) w.row_status[r] = INGOT_SAMPLING_ROW_BAD_PARAMETER;
    w.tokens[r] = -1;
    if (w.token_logprob) w.token_logprob[r] = -INFINITY;
    if (w.token_raw_logprob) w.token_raw_logprob[r] = -INFINITY;
    return;
  }
  const int32_t token = soft ? best_id(fin.best) : empty ? -1 : best_id(st.best);
  if (w.row_status) w.row_status[r] = st.flags | (empty ? INGOT_SAMPLING_ROW_EMPTY : 0u);
  w.tokens[r] = token;
  if (token < 0) {
    if (w.token_logprob) w.token_logprob[r] = -INFINITY;
    if (w.token_raw_logprob) w.token_raw_logprob[r] = -INFINITY;
    return;
  }
  /* the drawn token is allowed: its logit is finite (the dense kernel's sv value) */
  const float xt = ingot_sampling_load(
      static_cast<const char *>(w.logits) +
          (size_t)(r * w.logits_stride) * ((ingot_dtype)kDtype == INGOT_DTYPE_F32 ? 4 : 2),
      (ingot_dtype)kDtype, token);
  if (w.token_logprob)
    w.token_logprob[r] =
        soft ? (float)((double)div_exact(__fsub_rn(xt, m), div_t) - log(mass_value(fin.mass)))
             : 0.0f;
  if (w.token_raw_logprob)
    w.token_raw_logprob[r] = (float)((double)div_exact(__fsub_rn(xt, st.raw_max), div_t) -
                                     log(mass_value(fin.raw_sum)));
}

/* Its workspace for B rows of nch chunks: a LoadStats and a DrawStats a
 * chunk, a counter a row (the same for every batch: sized for the largest). */
size_t ws_bytes(int64_t blocks) {
  return (size_t)blocks * (sizeof(LoadStats) + sizeof(DrawStats)) + kWideMaxBatch * 4;
}

}  // namespace

size_t ingot_cuda_sample_wide_workspace(const struct ingot_context *ctx, int64_t vocab) {
  return (ws_bytes(wide_most_blocks(ctx, vocab)) + 255) / 256 * 256;
}

ingot_status ingot_cuda_sample_wide(struct ingot_context *ctx, const ingot_sampling_input *in,
                                    const ingot_sampling_output *out, void *workspace,
                                    struct CUstream_st *stream) {
  static const char op[] = "ingot_sample";
  WideSampleArgs w = {};
  w.logits = in->logits;
  w.logits_stride = in->logits_stride;
  w.allowed = in->allowed;
  w.allowed_stride = in->allowed_stride;
  w.temperature = in->temperature;
  w.seed = in->seed;
  w.position = in->position;
  w.tokens = out->tokens;
  w.row_status = out->row_status;
  w.token_logprob = out->token_logprob;
  w.token_raw_logprob = out->token_raw_logprob;
  w.vocab = in->vocab;
  wide_geometry(ctx, in->batch, in->vocab, &w.nch, &w.chunk);
  const int64_t blocks = in->batch * w.nch;
  w.load = static_cast<LoadStats *>(workspace);
  w.draw = reinterpret_cast<DrawStats *>(w.load + blocks);
  w.done = reinterpret_cast<unsigned *>(w.draw + blocks);
  void (*k[2])(const WideSampleArgs) = {};
  with_wide_shape(in->dtype, w.chunk, [&k](auto d, auto g) {
    constexpr int kDtype = decltype(d)::value, kGroups = decltype(g)::value;
    k[0] = wide_sample_max<kDtype, kGroups>, k[1] = wide_sample_draw<kDtype, kGroups>;
  });
  return wide_launch(ctx, op, k, blocks, w, stream);
}
