/*
 * Sampling, CUDA backend: the 16-BIT SOFTMAX, half_softmax<kDtype>:
 * ingot_sampling_softmax of bf16 / f16 logits without bias / ban lists or
 * filter tensors, B > 2, in batches the dense kernel does not hold at once
 * or (any batch) for 61441 <= V <= 237568 (half_fits, sampling_dispatch.cu).
 *
 * Shape. The dense kernel's (sampling_dense.cu: a cluster a row, the same C
 * and chunk, dense_geometry), but a block keeps its chunk AS COPIED, 2
 * bytes a token instead of 4, and computes each weight twice: in the exp
 * pass for the fixed-point mass, again in the write pass for p_i = w_i *
 * fp32(1 / Z). With 256 threads a block (six a SM: 34 KB a block at V =
 * 262144) twice the dense kernel's rows are in flight, which a write-bound
 * batch needs more than the exps it saves (B = 64, V = 262144: 42.7 -> 36.3
 * us; V = 151936: 32.8 -> 25.9). Two cluster reductions (cluster_reduce,
 * sampling_cluster.cuh): the argmax and flags after the load, then the
 * mass. Thread t holds the units of 8 tokens (16 bytes of hv) at 8 (t +
 * 256 k).
 *
 * Exactness. Every w_i, group mass, total and p_i is the dense kernel's
 * softmax_finish's to the bit (the same operations on the same values,
 * groups of 4 tokens in token order; the fixed-point masses of
 * sampling_cluster.cuh), so a row's probabilities do not depend on the
 * kernel or the batch.
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

constexpr int kHalfThreads = 256;
constexpr int kHalfBlocksPerSm = 6;

/* The 8 tokens of a unit as fp32. */
template <int kDtype>
__device__ __forceinline__ void decode8(const uint4 &q, float x[8]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  decode_halves<kDtype, 4>(w, x);
}

/* Those of the 8 tokens whose bit is clear set to -Inf (h: -Inf's 16 bits). */
__device__ __forceinline__ uint4 mask8(uint4 q, uint32_t bits, uint32_t h) {
  uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const uint32_t keep = ((bits >> (2 * k)) & 1u ? 0xffffu : 0u) |
                          ((bits >> (2 * k + 1)) & 1u ? 0xffff0000u : 0u);
    w[k] = (w[k] & keep) | ((h | h << 16) & ~keep);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <int kDtype>
__global__ void __launch_bounds__(kHalfThreads, kHalfBlocksPerSm) half_softmax(const DenseArgs a) {
  constexpr int kWarps = kHalfThreads / 32;
  constexpr uint32_t ninf = (ingot_dtype)kDtype == INGOT_DTYPE_BF16 ? 0xff80u : 0xfc00u;
  /* dynamic shared memory (half_smem_bytes): hv [chunk] 16-bit, then the
   * bitmask words [chunk / 32] */
  extern __shared__ float4 dense_smem[];
  uint16_t *hv = reinterpret_cast<uint16_t *>(dense_smem);
  uint32_t *swords = reinterpret_cast<uint32_t *>(hv + a.chunk);
  __shared__ ReduceSpace space;
  __shared__ unsigned long long mass_part[kWarps];
  const ingot_sampling_input &in = a.in;
  const BlockPart part = block_part(a);
  const int64_t r = part.r, lo = part.lo;
  const int n = part.n, units = (n + 7) / 8;
  const uint16_t *row = static_cast<const uint16_t *>(in.logits) + r * in.logits_stride + lo;
  const bool vec = (reinterpret_cast<uintptr_t>(row) & 15u) == 0;
  const uint32_t *words = in.allowed ? in.allowed + r * in.allowed_stride + (lo >> 5) : nullptr;
  float *const prow = a.probs + r * a.probs_stride + lo;
  const bool pvec = (reinterpret_cast<uintptr_t>(prow) & 15u) == 0;
  if (threadIdx.x == 0) {
    reduce_init(&space.bar[0], sizeof(ArgmaxStats));
    reduce_init(&space.bar[1], sizeof(unsigned long long));
  }
  reduce_ready();
  wait_for_previous_grid();

  /* the chunk by cp.async, all in flight at once; an unaligned row and the
   * last partial unit directly, -Inf past n */
  for (int u = threadIdx.x; u < units; u += kHalfThreads) {
    const int j = 8 * u;
    if (vec && j + 8 <= n) {
      cp_async<16>(hv + j, row + j);
    } else {
      uint32_t w[4];
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const uint32_t l = j + 2 * k < n ? __ldg(row + j + 2 * k) : ninf;
        const uint32_t h = j + 2 * k + 1 < n ? __ldg(row + j + 2 * k + 1) : ninf;
        w[k] = l | h << 16;
      }
      *reinterpret_cast<uint4 *>(hv + j) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  if (words)
    for (int w = threadIdx.x; w < (n + 31) / 32; w += kHalfThreads)
      cp_async<4>(swords + w, words + w);
  asm volatile("cp.async.commit_group;" ::: "memory");
  const float T = in.temperature ? in.temperature[r] : 1.0f;
  asm volatile("cp.async.wait_all;" ::: "memory");
  if (ingot_sampling_params_check(T, 0, 1.0f, 0.0f) != 0) {
    write_bad_softmax_row(a.probs, a.probs_stride, a.row_status, r, lo, n);
    return; /* uniform over the cluster: nothing was exchanged */
  }
  if (words) __syncthreads(); /* a thread reads words other threads copied */

  /* ---- pass 1: the bitmask (written back), the maximum, its first group of 4 ---- */
  float bm = -INFINITY, seen = -INFINITY;
  int bg = 0; /* a group of 4 tokens: bg = 2 u or 2 u + 1 */
  const auto track8 = [&](const float x[8], int u) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float *g = x + 4 * h;
      const float m4 = fmaxf(fmaxf(g[0], g[1]), fmaxf(g[2], g[3]));
      if (m4 > bm) bm = m4, bg = 2 * u + h;
    }
  };
  for (int u = threadIdx.x; u < units; u += kHalfThreads) {
    uint4 *q = reinterpret_cast<uint4 *>(hv + 8 * u);
    uint4 v = *q;
    float x[8];
    decode8<kDtype>(v, x);
#pragma unroll
    for (int e = 0; e < 8; e += 2) seen = max_nan(seen, max_nan(x[e], x[e + 1]));
    if (words) {
      const uint32_t bits = (swords[u >> 2] >> (8 * (u & 3))) & 0xffu;
      if (bits != 0xffu) {
        v = mask8(v, bits, ninf);
        *q = v;
        decode8<kDtype>(v, x);
      }
    }
    track8(x, u);
  }
  const bool nan = !(seen < INFINITY);
  if (nan) { /* a NaN or +Inf (rare): only the finite values stay */
    bm = -INFINITY;
    for (int u = threadIdx.x; u < units; u += kHalfThreads) {
      uint4 *q = reinterpret_cast<uint4 *>(hv + 8 * u);
      float x[8];
      decode8<kDtype>(*q, x);
      uint32_t bits = 0;
#pragma unroll
      for (int e = 0; e < 8; e++) bits |= (fabsf(x[e]) < INFINITY ? 1u : 0u) << e;
      if (bits != 0xffu) {
        *q = mask8(*q, bits, ninf);
        decode8<kDtype>(*q, x);
      }
      track8(x, u);
    }
  }
  ArgmaxStats mine{0ull, nan ? (uint32_t)INGOT_SAMPLING_ROW_NAN : 0u, 0u};
  if (bm > -INFINITY) {
    const uint2 q = *reinterpret_cast<const uint2 *>(hv + 4 * bg);
    const uint32_t w[2] = {q.x, q.y};
    float x[4];
    decode_halves<kDtype, 2>(w, x);
    const int e = x[0] == bm ? 0 : x[1] == bm ? 1 : x[2] == bm ? 2 : 3;
    mine.best = best_key(bm, (int32_t)(lo + 4 * bg + e));
  }
  cluster_wait(); /* reduce_ready's: every block of the cluster runs */
  const ArgmaxStats st = cluster_reduce<kWarps>(
      mine, ArgmaxStats{0ull, 0u, 0u}, ReduceArgmax{}, reinterpret_cast<ArgmaxStats *>(space.a),
      reinterpret_cast<ArgmaxStats *>(space.b), &space.bar[0]);

  /* ---- the mass, then the probabilities (softmax_finish's) ---- */
  const bool empty = st.best == 0;
  if (part.rank == 0 && threadIdx.x == 0 && a.row_status)
    a.row_status[r] = st.flags | (empty ? INGOT_SAMPLING_ROW_EMPTY : 0u);
  const int64_t hot = empty ? -1 : best_id(st.best); /* a greedy row's one */
  const bool soft = !empty && T > 0.0f;              /* uniform over the cluster */
  const Divisor div_t = divisor_of(soft ? T : 1.0f);
  const float m = soft ? best_value(st.best) : 0.0f;
  with_fast(div_t.fast, [&](auto fast) {
    constexpr bool kFast = decltype(fast)::value;
    const auto weights = [&](int u, float w[8]) {
      decode8<kDtype>(*reinterpret_cast<const uint4 *>(hv + 8 * u), w);
#pragma unroll
      for (int e = 0; e < 8; e++) w[e] = mass_of<kFast>(__fsub_rn(w[e], m), div_t);
    };
    float inv_z = 0.0f;
    if (soft) {
      unsigned long long mass = 0;
#pragma unroll 2
      for (int u = threadIdx.x; u < units; u += kHalfThreads) {
        float w[8];
        weights(u, w);
        mass += fixed_mass(w) + fixed_mass(w + 4);
      }
      const unsigned long long z = cluster_reduce<kWarps>(mass, 0ull, ReduceMass{}, mass_part,
                                                              space.a, &space.bar[1]);
      inv_z = (float)((double)kMassUnit / (double)z);
    }
#pragma unroll 2
    for (int u = threadIdx.x; u < units; u += kHalfThreads) {
      const int j = 8 * u;
      float p[8];
      if (soft) {
        weights(u, p);
#pragma unroll
        for (int e = 0; e < 8; e++) p[e] = __fmul_rn(p[e], inv_z);
      } else {
#pragma unroll
        for (int e = 0; e < 8; e++) p[e] = lo + j + e == hot ? 1.0f : 0.0f;
      }
      if (pvec && j + 8 <= n) {
        float4 *o = reinterpret_cast<float4 *>(prow + j);
        o[0] = make_float4(p[0], p[1], p[2], p[3]);
        o[1] = make_float4(p[4], p[5], p[6], p[7]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; e++)
          if (j + e < n) prow[j + e] = p[e];
      }
    }
  });
}

/* The 16-bit softmax's dynamic shared memory (its layout is in the kernel). */
size_t half_smem_bytes(int chunk) { return (size_t)chunk * 2 + (size_t)chunk / 8; }

typedef void (*HalfKernel)(const DenseArgs);

HalfKernel half_kernel_for(ingot_dtype dtype) {
  return dtype == INGOT_DTYPE_BF16 ? half_softmax<INGOT_DTYPE_BF16> : half_softmax<INGOT_DTYPE_F16>;
}

}  // namespace

/* Whether the 16-bit softmax kernels launch the dense kernel's clusters
 * with the dense kernel's shared memory limit (its chunks are never
 * larger). */
bool ingot_cuda_sampling_half_init(const struct ingot_context *ctx) {
  const HalfKernel k[2] = {half_softmax<INGOT_DTYPE_BF16>, half_softmax<INGOT_DTYPE_F16>};
  const int c = ctx->cuda->sampling.dense_cluster;
  for (int i = 0; i < 2; i++) {
    if (cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                             ctx->cuda->sampling.dense_smem) != cudaSuccess ||
        (c > 8 && cudaFuncSetAttribute(k[i], cudaFuncAttributeNonPortableClusterSizeAllowed,
                                       1) != cudaSuccess) ||
        (c > 1 && largest_cluster(k[i], kHalfThreads, (size_t)ctx->cuda->sampling.dense_smem,
                                  c > 8) < c)) {
      cudaGetLastError();
      return false;
    }
  }
  return true;
}

ingot_status ingot_cuda_sampling_softmax_half(struct ingot_context *ctx,
                                              const ingot_sampling_input *in, float *probs,
                                              int64_t probs_stride, uint32_t *row_status,
                                              struct CUstream_st *stream) {
  DenseArgs args = {};
  args.in = *in;
  args.probs = probs;
  args.probs_stride = probs_stride;
  args.row_status = row_status;
  static const char op[] = "ingot_sampling_softmax";
  int c, chunk;
  dense_geometry(ctx, in->vocab, &c, &chunk);
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  args.chunk = chunk;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  cluster_launch_config(&cfg, attr, (unsigned)(in->batch * c), kHalfThreads,
                        half_smem_bytes(chunk), stream, c > 1 ? c : 0,
                        ctx->cuda->sampling.pdl != 0);
  INGOT_CUDA_TRY(ctx, op, cudaLaunchKernelEx(&cfg, half_kernel_for(in->dtype), args));
  return ingot_cuda_check_launch(ctx, op);
}

cudaError_t ingot_cuda_sampling_half_blocks_per_sm(int *blocks, ingot_dtype dtype, int chunk) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, half_kernel_for(dtype), kHalfThreads,
                                                       half_smem_bytes(chunk));
}
