/*
 * Device helpers shared by the two sampling kernels (src/cuda/sampling.cu,
 * the general one, and src/cuda/sampling_dense.cu, the path without
 * filters): the thread-block cluster of a row, the order-preserving key of a
 * value, and the sparse lists (bias, bans) applied to a block's tokens.
 */
#ifndef INGOT_CUDA_SAMPLING_COMMON_CUH
#define INGOT_CUDA_SAMPLING_COMMON_CUH

#include <cooperative_groups.h>

#include <cstdint>

#include "common/sampling_ref.h"
#include "core/internal.h"

namespace ingot_sampling {

namespace cg = cooperative_groups;

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ int warp_id() { return threadIdx.x >> 5; }

/* ---- the cluster of a row (one block before sm_90) ---- */

__device__ __forceinline__ unsigned cluster_rank() {
#if __CUDA_ARCH__ >= 900
  return cg::this_cluster().block_rank();
#else
  return 0;
#endif
}

__device__ __forceinline__ unsigned cluster_blocks() {
#if __CUDA_ARCH__ >= 900
  return cg::this_cluster().num_blocks();
#else
  return 1;
#endif
}

/* Barrier of every thread of the cluster, with release / acquire of shared
 * memory at cluster scope. */
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  cg::this_cluster().sync();
#else
  __syncthreads();
#endif
}

/* p in the shared memory of block `rank` of the cluster. */
template <class T>
__device__ __forceinline__ const T *remote(const T *p, unsigned rank) {
#if __CUDA_ARCH__ >= 900
  return cg::this_cluster().map_shared_rank(const_cast<T *>(p), rank);
#else
  (void)rank;
  return p;
#endif
}

/* ---- values ---- */

/* Larger value -> larger key; -0 and +0 share a key (they compare equal). */
__device__ __forceinline__ uint32_t rank_key(float v) {
  uint32_t u = __float_as_uint(v);
  if ((u << 1) == 0) return 0x80000000u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* ---- the sparse lists ---- */

/* Applies row r's bias entries and bans to sv[0, n), the block's copy of the
 * row's tokens lo .. lo + n - 1 (raw logits as fp32), exactly as the CPU
 * reference does: biases added in list order, banned tokens set to -Inf (a
 * NaN or +Inf there sets ROW_NAN); an entry of row r whose token lies
 * outside [0, V) sets ROW_BAD_ENTRY. Collective over the block; returns
 * this thread's flags. Callers synchronise the block before and after. */
__device__ __forceinline__ uint32_t apply_lists(const ingot_sampling_input &in, int64_t r,
                                                int64_t lo, int n, float *sv) {
  uint32_t flags = 0;
  const int64_t V = in.vocab;
  if (in.num_bias > 0 && warp_id() == 0) {
    /* in list order: lane order within each group of 32 entries */
    for (int64_t base = 0; base < in.num_bias; base += 32) {
      const int64_t e = base + lane_id();
      bool mine = false;
      int32_t tok = 0;
      float b = 0.0f;
      if (e < in.num_bias) {
        const int32_t *ent = in.bias_ids + e * in.bias_ids_stride;
        if (ent[0] == r) {
          tok = ent[1];
          if (tok < 0 || tok >= V) {
            flags |= INGOT_SAMPLING_ROW_BAD_ENTRY;
          } else if (tok >= lo && tok < lo + n) {
            mine = true;
            b = in.bias_values[e];
          }
        }
      }
      unsigned todo = __ballot_sync(0xffffffffu, mine);
      while (todo) {
        const int src = __ffs(todo) - 1;
        todo &= todo - 1;
        if (lane_id() == src) sv[tok - lo] = __fadd_rn(sv[tok - lo], b);
        __syncwarp();
      }
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < in.num_banned; e += blockDim.x) {
    const int32_t *ent = in.banned + e * in.banned_stride;
    if (ent[0] != r) continue;
    const int32_t tok = ent[1];
    if (tok < 0 || tok >= V) {
      flags |= INGOT_SAMPLING_ROW_BAD_ENTRY;
      continue;
    }
    if (tok < lo || tok >= lo + n) continue;
    const float old = sv[tok - lo];
    if (!ingot_f32_finite(old) && old != -INFINITY) flags |= INGOT_SAMPLING_ROW_NAN;
    sv[tok - lo] = -INFINITY;
  }
  return flags;
}

}  // namespace ingot_sampling

#endif /* INGOT_CUDA_SAMPLING_COMMON_CUH */
