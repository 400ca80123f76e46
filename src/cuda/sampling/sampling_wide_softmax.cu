/*
 * Sampling, CUDA backend: the WIDE SOFTMAX, wide_max / wide_mass /
 * wide_write<kDtype, kGroups>: ingot_sampling_softmax for one or two rows
 * (B <= kWideMaxBatch, V >= kWideMinVocab) without filter tensors or bias /
 * ban lists (softmax_wide_fits, sampling_dispatch.cu). A cluster a row
 * would leave all but 16 SMs idle, so each row is cut into nch chunks of
 * one block each over the whole GPU (132 / B on the H200: wide_geometry,
 * sampling_cluster.cuh), and the row's two reductions go through the
 * caller's workspace between three kernels chained by programmatic
 * dependent launch:
 *   1. wide_max: the chunk's argmax key and flags -> keys[b], flags[b];
 *   2. wide_mass: loads its chunk BEFORE its wait (it is launched once every
 *      block of 1 has passed its own wait, so the logits are final), then
 *      the row's maximum from keys, the chunk's weights w_i -> probs (as the
 *      dense kernel keeps them in shared memory) and its fixed-point mass
 *      -> mass[b];
 *   3. wide_write: reads keys and flags before its wait (2 passed its wait,
 *      so 1 is complete), then the row's mass and the chunk's w_i, and
 *      writes p_i = w_i * fp32(1 / Z) over them (or the greedy row's one-hot,
 *      an empty or bad row's zeros).
 * Block b of the grid holds chunk b % nch of row b / nch; thread t the
 * groups of 4 tokens at 4 t + 4 kWideThreads g of its chunk, g < kGroups,
 * in registers.
 *
 * Exactness. Each w_i, each group's fixed-point mass, the integer total and
 * each p_i are the dense kernel's softmax_finish's to the bit
 * (sampling_dense.cu), and none depends on the partition: a row's
 * probabilities are the same bits on either path, whatever the batch.
 */
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

/* Every field the three kernels read, and nothing else: 104 bytes from
 * c[0x0][0x210], two lines of the constant cache, which each kernel reads
 * before its wait (the row's geometry, or wide_touch). A field in a line
 * first read after the wait costs that wait a constant-cache miss (the
 * SamplingArgs of the first version spanned six lines; this layout and
 * wide_touch measured 4.82 -> 4.69 us at B = 1, V = 151936). */
struct WideArgs {
  const void *logits;
  int64_t logits_stride;
  const uint32_t *allowed; /* NULL: every token allowed */
  int64_t allowed_stride;
  const float *temperature; /* NULL: 1 */
  float *probs;
  int64_t probs_stride;
  uint32_t *row_status;     /* NULL: not written */
  unsigned long long *keys; /* workspace: [B * nch] argmax keys, */
  unsigned long long *mass; /* [B * nch] fixed-point masses, */
  uint32_t *flags;          /* [B * nch] flags */
  int64_t vocab;
  int chunk, nch; /* nch chunks a row, of chunk tokens (the last may be shorter) */
};

/* The chunk's values as the dense kernel's pass 1 leaves them (bitmask,
 * then the finite rule: mask4), -Inf past its end; returns whether a NaN or
 * +Inf was seen. */
template <int kDtype, int kGroups, bool kL2>
__device__ __forceinline__ bool wide_load(const WideArgs &w, const WidePart &p,
                                          float x[kGroups][4]) {
  uint32_t bits[kGroups];
  wide_fetch<kDtype, kGroups, kL2>(w, p, x, bits);
  bool nan = false;
#pragma unroll
  for (int g = 0; g < kGroups; g++) mask4(x[g], bits[g], nan);
  return nan;
}

/* The part's probabilities row: 4 values at token j (those below n). */
__device__ __forceinline__ void wide_store4(float *prow, bool pvec, int j, int n,
                                            const float q[4]) {
  if (pvec && j + 3 < n) {
    *reinterpret_cast<float4 *>(prow + j) = make_float4(q[0], q[1], q[2], q[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; e++) /* unrolled: q stays in registers */
      if (j + e < n) prow[j + e] = q[e];
  }
}

/* The row's argmax key, and its flags if kFlags: wide_max's of every chunk
 * (kL2: read before the kernel's wait, see raw4). */
template <bool kFlags, bool kL2>
__device__ __forceinline__ ArgmaxStats wide_row_argmax(const WideArgs &w, int64_t r) {
  ArgmaxStats v{0ull, 0u, 0u};
  for (int i = threadIdx.x; i < w.nch; i += kWideThreads) {
    const unsigned long long *k = w.keys + r * w.nch + i;
    v.best = max(v.best, kL2 ? __ldcg(k) : *k);
    if (kFlags) v.flags |= kL2 ? __ldcg(w.flags + r * w.nch + i) : w.flags[r * w.nch + i];
  }
  return wide_block_reduce<ReduceArgmax>(v);
}

/* The row's temperature, read before the kernel's wait (an input: the
 * kernels that read it are launched after wide_max passed its wait). */
__device__ __forceinline__ float wide_t(const WideArgs &w, const WidePart &p) {
  return w.temperature ? __ldcg(w.temperature + p.r) : 1.0f; /* L2: see raw4 */
}

/* T when it is valid and the row draws softly (T > 0, something allowed); 0 otherwise. */
__device__ __forceinline__ float wide_soft_t(float T, const ArgmaxStats &st) {
  return ingot_sampling_params_check(T, 0, 1.0f, 0.0f) == 0 && st.best != 0 && T > 0.0f ? T
                                                                                        : 0.0f;
}

template <int kDtype, int kGroups>
__global__ void __launch_bounds__(kWideThreads, 1) wide_max(const WideArgs w) {
  const WidePart p = wide_part(w);
  wide_touch<kDtype>(w, p);
  wait_for_previous_grid();
  float x[kGroups][4];
  const bool nan = wide_load<kDtype, kGroups, false>(w, p, x);
  const unsigned long long best = wide_thread_best<kGroups>(x, p);
  const ArgmaxStats s = wide_block_reduce<ReduceArgmax>(
      ArgmaxStats{best, nan ? (uint32_t)INGOT_SAMPLING_ROW_NAN : 0u, 0u});
  if (threadIdx.x == 0) w.keys[blockIdx.x] = s.best, w.flags[blockIdx.x] = s.flags;
}

template <int kDtype, int kGroups>
__global__ void __launch_bounds__(kWideThreads, 1) wide_mass(const WideArgs w) {
  const WidePart p = wide_part(w);
  const float t_given = wide_t(w, p);
  float x[kGroups][4];
  wide_load<kDtype, kGroups, true>(w, p, x); /* wide_max has passed its wait */
  wait_for_previous_grid();
  const ArgmaxStats st = wide_row_argmax<false, false>(w, p.r);
  const float T = wide_soft_t(t_given, st);
  unsigned long long mass = 0;
  if (T > 0.0f) { /* uniform over the row */
    /* w_i = e^((x - m) / T), softmax_finish's, kept in probs for wide_write */
    const Divisor div_t = divisor_of(T);
    const float m = best_value(st.best);
    float *const prow = w.probs + p.r * w.probs_stride + p.lo;
    const bool pvec = (reinterpret_cast<uintptr_t>(prow) & 15u) == 0;
    with_fast(div_t.fast, [&](auto fast) {
      constexpr bool kFast = decltype(fast)::value;
#pragma unroll
      for (int g = 0; g < kGroups; g++) {
#pragma unroll
        for (int e = 0; e < 4; e++) x[g][e] = mass_of<kFast>(__fsub_rn(x[g][e], m), div_t);
        mass += fixed_mass(x[g]);
        if (wide_token(g) < p.n) wide_store4(prow, pvec, wide_token(g), p.n, x[g]);
      }
    });
  }
  mass = wide_block_reduce<ReduceMass>(mass);
  if (threadIdx.x == 0) w.mass[blockIdx.x] = mass;
}

template <int kDtype, int kGroups>
__global__ void __launch_bounds__(kWideThreads, 1) wide_write(const WideArgs w) {
  const WidePart p = wide_part(w);
  const float t_given = wide_t(w, p);
  /* wide_mass has passed its wait: wide_max is complete */
  const ArgmaxStats st = wide_row_argmax<true, true>(w, p.r);
  const float T = wide_soft_t(t_given, st);
  const bool bad = ingot_sampling_params_check(t_given, 0, 1.0f, 0.0f) != 0;
  float *const prow = w.probs + p.r * w.probs_stride + p.lo;
  const bool pvec = (reinterpret_cast<uintptr_t>(prow) & 15u) == 0;
  wait_for_previous_grid();
  if (bad) {
    write_bad_softmax_row(w.probs, w.probs_stride, w.row_status, p.r, p.lo, p.n);
    return;
  }
  const bool empty = st.best == 0;
  if (threadIdx.x == 0 && p.lo == 0 && w.row_status)
    w.row_status[p.r] = st.flags | (empty ? INGOT_SAMPLING_ROW_EMPTY : 0u);
  if (T > 0.0f) { /* uniform over the row: wide_mass's w_i, scaled */
    float q[kGroups][4];
#pragma unroll
    for (int g = 0; g < kGroups; g++) { /* loaded first: they travel with the masses */
      const int j = wide_token(g);
      if (pvec && j + 3 < p.n) {
        const float4 v = *reinterpret_cast<const float4 *>(prow + j);
        q[g][0] = v.x, q[g][1] = v.y, q[g][2] = v.z, q[g][3] = v.w;
      } else {
#pragma unroll
        for (int e = 0; e < 4; e++) q[g][e] = j + e < p.n ? prow[j + e] : 0.0f;
      }
    }
    unsigned long long z = 0;
    for (int i = threadIdx.x; i < w.nch; i += kWideThreads) z += w.mass[p.r * w.nch + i];
    const float inv_z = (float)((double)kMassUnit / (double)wide_block_reduce<ReduceMass>(z));
#pragma unroll
    for (int g = 0; g < kGroups; g++) {
      if (wide_token(g) >= p.n) break;
#pragma unroll
      for (int e = 0; e < 4; e++) q[g][e] = __fmul_rn(q[g][e], inv_z);
      wide_store4(prow, pvec, wide_token(g), p.n, q[g]);
    }
    return;
  }
  const int64_t hot = empty ? -1 : best_id(st.best); /* a greedy row's one */
#pragma unroll
  for (int g = 0; g < kGroups; g++) {
    const int j = wide_token(g);
    if (j >= p.n) break;
    float q[4];
#pragma unroll
    for (int e = 0; e < 4; e++) q[e] = p.lo + j + e == hot ? 1.0f : 0.0f;
    wide_store4(prow, pvec, j, p.n, q);
  }
}

/* The workspace: keys, masses (8 bytes each) and flags (4) for every block. */
size_t wide_bytes(int64_t blocks) { return (size_t)blocks * 20; }

}  // namespace

size_t ingot_cuda_sampling_softmax_wide_workspace(const struct ingot_context *ctx,
                                                  int64_t vocab) {
  return (wide_bytes(wide_most_blocks(ctx, vocab)) + 255) / 256 * 256;
}

ingot_status ingot_cuda_sampling_softmax_wide(struct ingot_context *ctx,
                                              const ingot_sampling_input *in, float *probs,
                                              int64_t probs_stride, uint32_t *row_status,
                                              void *workspace, struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_softmax";
  WideArgs w = {};
  w.logits = in->logits;
  w.logits_stride = in->logits_stride;
  w.allowed = in->allowed;
  w.allowed_stride = in->allowed_stride;
  w.temperature = in->temperature;
  w.probs = probs;
  w.probs_stride = probs_stride;
  w.row_status = row_status;
  w.vocab = in->vocab;
  wide_geometry(ctx, in->batch, in->vocab, &w.nch, &w.chunk);
  const int64_t blocks = in->batch * w.nch;
  w.keys = static_cast<unsigned long long *>(workspace);
  w.mass = w.keys + blocks;
  w.flags = reinterpret_cast<uint32_t *>(w.mass + blocks);
  void (*k[3])(const WideArgs) = {};
  with_wide_shape(in->dtype, w.chunk, [&k](auto d, auto g) {
    constexpr int kDtype = decltype(d)::value, kGroups = decltype(g)::value;
    k[0] = wide_max<kDtype, kGroups>, k[1] = wide_mass<kDtype, kGroups>;
    k[2] = wide_write<kDtype, kGroups>;
  });
  return wide_launch(ctx, op, k, blocks, w, stream);
}
