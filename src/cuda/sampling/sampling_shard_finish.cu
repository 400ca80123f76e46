/*
 * Sharded sampling, CUDA backend: the finishes (ingot_sampling_shard_
 * finish_sample / _finish_softmax) and the local exchanges (_gather: S
 * device-to-device copies; _sum: one kernel adding the S records as uint64
 * words). One thread block a row, as the steps (sampling_shard.cu); the
 * reference is src/cpu/sampling_shard_cpu.c. The outputs are the CPU's bit
 * for bit: tokens and statuses are decisions on the same exact values;
 * log-probabilities are (float)((double)s - log(z)) with z the same exact
 * sum rounded to the same double, probabilities (float)((double)w / z).
 * The one operation that is not a single IEEE operation is the double log
 * (CUDA's log, within 1 ulp, against the host libm's); the float result
 * differs only if the difference lies within a double ulp of a float
 * rounding boundary. Rows with a bad per-row value (sampling_shard.cu) get
 * token -1, BAD_PARAMETER, -Inf log-probabilities, top-n -1 / -Inf and zero
 * probabilities, as ingot_sample / ingot_sampling_softmax on CUDA.
 */
#include <climits>
#include <cmath>
#include <cstring>

#include "cuda/common.cuh"
#include "cuda/cuda.cuh"
#include "cuda/sampling/sampling_shard.cuh"

using namespace ingot_shard;

namespace {

struct FinishArgs {
  ingot_sampling_shard_call c;
  View g; /* the last step's records */
  ingot_sampling_output out;
  float *probs;
  int64_t probs_stride;
  uint32_t *row_status;
  Workspace w;
};

struct FinishShared {
  ingot_shard_draw best;
  ingot_exact_sum mass, raw_mass;
  Pair list[kMaxList];
  int len[INGOT_SAMPLING_SHARD_MAX_SHARDS];
};

/* Row r of the top-n outputs: the first `filled` of list with
 * log-probability value - log_z, then -1 / -Inf (ingot_cpu_write_top). */
__device__ void write_top(const ingot_sampling_output &o, int64_t r, const Pair *list,
                          int filled, double log_z) {
  for (int64_t j = threadIdx.x; j < o.num_top; j += kThreads) {
    const bool found = j < filled;
    if (o.top_ids) o.top_ids[r * o.top_ids_stride + j] = found ? list[j].id : -1;
    if (o.top_logprobs)
      o.top_logprobs[r * o.top_logprobs_stride + j] =
          found ? __double2float_rn(__dsub_rn((double)list[j].value, log_z)) : -INFINITY;
  }
}

/* The S top-n lists of row r, merged in rank order into sh.list. */
__device__ int merge_top(const FinishArgs &a, int64_t r, FinishShared &sh) {
  ListView l;
  l.base = a.g.row(0, r) + sizeof(ingot_shard_draw);
  l.stride = a.g.record_bytes;
  l.cap = a.c.num_top;
  l.slots = a.g.slots;
  return merge_lists(l, a.c.num_top, sh.list, sh.len);
}

__global__ void __launch_bounds__(kThreads) shard_finish_sample_kernel(const FinishArgs a) {
  __shared__ FinishShared sh;
  const int64_t r = blockIdx.x;
  const RowState st = a.w.state[r];
  const ingot_sampling_output &o = a.out;
  const bool final_top = o.num_top > 0 && (o.flags & INGOT_SAMPLING_TOP_FINAL);
  const bool raw_top = o.num_top > 0 && !final_top;
  if (st.mode == kModeBad) {
    if (threadIdx.x == 0) {
      o.tokens[r] = -1;
      if (o.row_status) o.row_status[r] = INGOT_SAMPLING_ROW_BAD_PARAMETER;
      if (o.token_logprob) o.token_logprob[r] = -INFINITY;
      if (o.token_raw_logprob) o.token_raw_logprob[r] = -INFINITY;
    }
    write_top(o, r, sh.list, 0, 0.0);
    return;
  }
  if (threadIdx.x == 0) {
    ingot_shard_draw best;
    best.key = -INFINITY, best.id = -1, best.s = 0.0f, best.raw = -INFINITY;
    ingot_exact_sum mass, raw_mass;
    ingot_exact_sum_clear(&mass);
    ingot_exact_sum_clear(&raw_mass);
    for (int32_t slot = 0; slot < a.g.slots; slot++) {
      const ingot_shard_draw d = *reinterpret_cast<const ingot_shard_draw *>(a.g.row(slot, r));
      ingot_exact_sum_add(&mass, &d.mass);
      ingot_exact_sum_add(&raw_mass, &d.raw_mass);
      if (d.id >= 0 && (best.id < 0 || d.key > best.key || (d.key == best.key && d.id < best.id)))
        best = d;
    }
    sh.best = best, sh.mass = mass, sh.raw_mass = raw_mass;
  }
  __syncthreads();
  const ingot_shard_draw best = sh.best;
  const int32_t token = st.mode == kModeEmpty ? -1 : st.mode == kModeGreedy ? st.max_id : best.id;
  if (threadIdx.x == 0) {
    o.tokens[r] = token;
    if (o.row_status) o.row_status[r] = st.flags;
  }
  if (o.token_logprob || final_top) {
    const double log_z = log_mass(sh.mass);
    if (o.token_logprob && threadIdx.x == 0)
      o.token_logprob[r] =
          token >= 0 ? __double2float_rn(__dsub_rn((double)best.s, log_z)) : -INFINITY;
    if (final_top) {
      const int filled = merge_top(a, r, sh);
      write_top(o, r, sh.list, token >= 0 ? filled : 0, log_z);
    }
  }
  if (o.token_raw_logprob || raw_top) {
    const double log_z = log_mass(sh.raw_mass);
    if (o.token_raw_logprob && threadIdx.x == 0)
      o.token_raw_logprob[r] = token >= 0 && best.raw != -INFINITY
                                   ? __double2float_rn(__dsub_rn((double)best.raw, log_z))
                                   : -INFINITY;
    if (raw_top) {
      __syncthreads(); /* sh.list of the final top-n was read */
      const int filled = merge_top(a, r, sh);
      write_top(o, r, sh.list, filled, log_z);
    }
  }
}

__global__ void __launch_bounds__(kThreads) shard_finish_softmax_kernel(const FinishArgs a) {
  __shared__ ingot_exact_sum total;
  const int64_t r = blockIdx.x;
  const RowState st = a.w.state[r];
  if (threadIdx.x == 0) {
    ingot_exact_sum mass;
    ingot_exact_sum_clear(&mass);
    for (int32_t slot = 0; slot < a.g.slots; slot++)
      ingot_exact_sum_add(&mass, reinterpret_cast<const ingot_exact_sum *>(a.g.row(slot, r)));
    total = mass;
    if (a.row_status)
      a.row_status[r] = st.mode == kModeBad ? (uint32_t)INGOT_SAMPLING_ROW_BAD_PARAMETER : st.flags;
  }
  __syncthreads();
  const int64_t Vr = a.c.vocab_count, v0 = a.c.vocab_begin;
  if (Vr == 0) return; /* probs may have no data */
  const double z = ingot_exact_sum_value(&total);
  const RowParams p = params_of(a.c.in, r);
  float *v = a.w.vals + r * Vr;
  if (st.mode == kModeDraw) build_values(a.c, r, v, true, st.max, p.temperature);
  const float threshold = min_p_threshold(p.min_p);
  float *prow = a.probs + r * a.probs_stride;
  for (int64_t j = threadIdx.x; j < Vr; j += kThreads) {
    const int32_t id = (int32_t)(v0 + j);
    float w = 0.0f;
    if (st.mode == kModeDraw && in_final(st, v[j], id, threshold))
      w = ingot_sampling_ref_exp(v[j]);
    else if (st.mode == kModeGreedy && id == st.max_id)
      w = ingot_sampling_ref_exp(0.0f);
    prow[j] = z > 0.0 ? __double2float_rn(__ddiv_rn((double)w, z)) : 0.0f;
  }
}

/* The local all-reduce: summed word w = the sum of word w of the S records
 * (modulo 2^64). */
struct SumArgs {
  const uint64_t *records[INGOT_SAMPLING_SHARD_MAX_SHARDS];
  uint64_t *summed;
  int64_t words;
  int32_t num_shards;
};

__global__ void __launch_bounds__(kThreads) shard_sum_kernel(const SumArgs a) {
  for (int64_t w = (int64_t)blockIdx.x * kThreads + threadIdx.x; w < a.words;
       w += (int64_t)gridDim.x * kThreads) {
    uint64_t total = 0;
    for (int32_t j = 0; j < a.num_shards; j++) total += a.records[j][w];
    a.summed[w] = total;
  }
}

FinishArgs finish_args(const ingot_sampling_shard_call *call, const void *gathered,
                       void *workspace) {
  const ingot_shard_steps steps = ingot_shard_steps_of(call->max_top_k, call->num_top, call->flags);
  FinishArgs a;
  memset(&a, 0, sizeof a);
  a.c = *call;
  a.g = view_of(call, steps, steps.count - 1, gathered);
  a.w = carve(call, workspace);
  return a;
}

}  // namespace

ingot_status ingot_cuda_sampling_shard_finish_sample(struct ingot_context *ctx,
                                                     const ingot_sampling_shard_call *call,
                                                     const void *gathered,
                                                     const ingot_sampling_output *out,
                                                     void *workspace, size_t workspace_bytes,
                                                     struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_finish_sample";
  (void)workspace_bytes;
  FinishArgs a = finish_args(call, gathered, workspace);
  a.out = *out;
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  shard_finish_sample_kernel<<<(unsigned)call->in.batch, kThreads, 0, stream>>>(a);
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status ingot_cuda_sampling_shard_finish_softmax(struct ingot_context *ctx,
                                                      const ingot_sampling_shard_call *call,
                                                      const void *gathered, float *probs,
                                                      int64_t probs_stride, uint32_t *row_status,
                                                      void *workspace, size_t workspace_bytes,
                                                      struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_finish_softmax";
  (void)workspace_bytes;
  FinishArgs a = finish_args(call, gathered, workspace);
  a.probs = probs;
  a.probs_stride = probs_stride;
  a.row_status = row_status;
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  shard_finish_softmax_kernel<<<(unsigned)call->in.batch, kThreads, 0, stream>>>(a);
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status ingot_cuda_sampling_shard_gather(struct ingot_context *ctx, int32_t num_shards,
                                              const void *const *records, size_t record_bytes,
                                              void *gathered, struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_gather";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  for (int32_t j = 0; j < num_shards; j++)
    INGOT_CUDA_TRY(ctx, op,
                   cudaMemcpyAsync(static_cast<char *>(gathered) + (size_t)j * record_bytes,
                                   records[j], record_bytes, cudaMemcpyDefault, stream));
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cuda_sampling_shard_sum(struct ingot_context *ctx, int32_t num_shards,
                                           const void *const *records, size_t record_bytes,
                                           void *summed, struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_sum";
  SumArgs a;
  memset(&a, 0, sizeof a);
  for (int32_t j = 0; j < num_shards; j++) a.records[j] = static_cast<const uint64_t *>(records[j]);
  a.summed = static_cast<uint64_t *>(summed);
  a.words = (int64_t)(record_bytes / sizeof(uint64_t));
  a.num_shards = num_shards;
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  shard_sum_kernel<<<ingot_cuda_grid(ctx, a.words, kThreads, 4), kThreads, 0, stream>>>(a);
  return ingot_cuda_check_launch(ctx, op);
}
