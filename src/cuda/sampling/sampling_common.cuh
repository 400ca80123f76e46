/*
 * Device helpers shared by every sampling path (sampling_general.cu,
 * sampling_dense.cu, sampling_softmax_half.cu, sampling_wide_softmax.cu,
 * sampling_wide_sample.cu): the arguments of the cluster kernels, the
 * thread-block cluster of a row, the order-preserving key of a value, the
 * rows with a bad per-row value, the sparse lists (bias, bans) applied to a
 * block's tokens, and the host side of a launch in clusters with
 * programmatic dependent launch. A cluster kernel's row r is cluster r of
 * the grid; its block of rank b holds the row's tokens [b * chunk, (b + 1)
 * * chunk) (block_part). sampling_paths.cuh builds on this header (the
 * dispatcher's interface), sampling_cluster.cuh too (the helpers of the
 * paths that work in groups of 4 tokens).
 */
#ifndef INGOT_CUDA_SAMPLING_COMMON_CUH
#define INGOT_CUDA_SAMPLING_COMMON_CUH

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/sampling_ref.h"
#include "core/internal.h"

namespace ingot_sampling {

namespace cg = cooperative_groups;

/* The arguments of the cluster kernels: the general kernel, the dense kernel
 * and the 16-bit softmax (one struct: a launch passes it by value). */
struct SamplingArgs {
  ingot_sampling_input in;
  ingot_sampling_output out; /* ingot_sample */
  float *probs;              /* ingot_sampling_softmax */
  int64_t probs_stride;
  uint32_t *row_status;      /* both (NULL: not written) */
  int chunk;                 /* tokens per block */
  int frac_bits;             /* general kernel: F of the fixed-point masses */
  int keep_raw;              /* general kernel: the raw logits stay in shared memory too */
  int split;   /* filter tensors given: the dense kernel takes its rows (row_for_dense,
                * sampling_paths.cuh), the general kernel the others; 0: a kernel takes
                * every row */
  int small_k; /* ingot_sample: the dense kernel also takes rows with 1 <= top_k <= small_k
                * (any top_p, min_p); 0: none. The same value in both launches of a call */
};

/* Row r's top-n slots: id -1, log-probability -Inf (block 0 of the row). */
__device__ __forceinline__ void write_empty_top(const ingot_sampling_output &o, int64_t r,
                                                bool rank0) {
  if (!rank0) return;
  for (int e = threadIdx.x; e < o.num_top; e += blockDim.x) {
    if (o.top_ids) o.top_ids[r * o.top_ids_stride + e] = -1;
    if (o.top_logprobs) o.top_logprobs[r * o.top_logprobs_stride + e] = -INFINITY;
  }
}

/* A row whose per-row parameter breaks a rule (checked on the device, no
 * host read): BAD_PARAMETER, token -1, -Inf log-probabilities and empty
 * top-n slots (sample), zero probabilities for this block's n tokens from lo
 * (softmax). Called by every thread of each block of the row, before
 * anything is exchanged. */
__device__ __forceinline__ void write_bad_softmax_row(float *probs, int64_t probs_stride,
                                                      uint32_t *row_status, int64_t r, int64_t lo,
                                                      int n) {
  if (threadIdx.x == 0 && lo == 0 && row_status) row_status[r] = INGOT_SAMPLING_ROW_BAD_PARAMETER;
  for (int j = threadIdx.x; j < n; j += blockDim.x) probs[r * probs_stride + lo + j] = 0.0f;
}

__device__ __forceinline__ void write_bad_parameter_row(const SamplingArgs &a, bool sample,
                                                        int64_t r, int64_t lo, int n) {
  if (!sample) {
    write_bad_softmax_row(a.probs, a.probs_stride, a.row_status, r, lo, n);
    return;
  }
  if (threadIdx.x == 0 && lo == 0) {
    if (a.row_status) a.row_status[r] = INGOT_SAMPLING_ROW_BAD_PARAMETER;
    a.out.tokens[r] = -1;
    if (a.out.token_logprob) a.out.token_logprob[r] = -INFINITY;
    if (a.out.token_raw_logprob) a.out.token_raw_logprob[r] = -INFINITY;
  }
  write_empty_top(a.out, r, lo == 0);
}

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

/* The part of a row this block holds: row r is the cluster's index; its
 * tokens lo .. lo + n - 1 (n may be 0 for the last blocks of a short row). */
struct BlockPart {
  int64_t r, lo;
  int n;
  unsigned rank; /* in the cluster */
};

__device__ __forceinline__ BlockPart block_part(const SamplingArgs &a) {
  BlockPart p;
  p.rank = cluster_rank();
  p.r = blockIdx.x / cluster_blocks();
  p.lo = (int64_t)p.rank * a.chunk;
  const int64_t left = a.in.vocab - p.lo;
  p.n = (int)(left < a.chunk ? (left > 0 ? left : 0) : a.chunk);
  return p;
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
 * this thread's flags, and sets *changed (if given) when this thread
 * changed a token. Callers synchronise the block before and after. */
__device__ __forceinline__ uint32_t apply_lists(const ingot_sampling_input &in, int64_t r,
                                                int64_t lo, int n, float *sv,
                                                bool *changed = nullptr) {
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
      if (mine && changed) *changed = true;
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
    if (changed) *changed = true;
  }
  return flags;
}

/* ---- host: launches in clusters ---- */

/* cfg for `blocks` blocks of `threads` threads with `smem` bytes of dynamic
 * shared memory, in clusters of `cluster` blocks (0: no cluster attribute,
 * as before sm_90). attr is pointed to by cfg: it must outlive it. */
inline void cluster_launch_config(cudaLaunchConfig_t *cfg, cudaLaunchAttribute attr[2],
                                  unsigned blocks, int threads, size_t smem, cudaStream_t stream,
                                  int cluster, bool pdl = false) {
  *cfg = cudaLaunchConfig_t{};
  cfg->gridDim = dim3(blocks);
  cfg->blockDim = dim3((unsigned)threads);
  cfg->dynamicSmemBytes = smem;
  cfg->stream = stream;
  cfg->attrs = attr;
  if (cluster > 0) {
    attr[cfg->numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg->numAttrs].val.clusterDim.x = (unsigned)cluster;
    attr[cfg->numAttrs].val.clusterDim.y = 1;
    attr[cfg->numAttrs].val.clusterDim.z = 1;
    cfg->numAttrs++;
  }
  if (pdl) { /* the kernel calls wait_for_previous_grid() before its first memory access */
    attr[cfg->numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg->numAttrs].val.programmaticStreamSerializationAllowed = 1;
    cfg->numAttrs++;
  }
}

/* Programmatic dependent launch (sm_90): a sampling kernel is launched
 * while the previous kernel of the stream still runs, and waits here, before
 * it reads or writes global memory, until that kernel has finished and its
 * writes are visible; then it lets the next kernel of the stream launch (that
 * one waits in the same way for this one to finish). Outside such a launch
 * both are no-ops. The kernels read their parameters (constant memory, never
 * written by a kernel) and compute their addresses BEFORE the wait: those
 * constant-cache misses then overlap the previous kernel's tail (~0.3-0.4 us
 * a call at B = 1 on the H200). */
__device__ __forceinline__ void wait_for_previous_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The largest cluster size the kernels use (Hopper's non-portable limit). */
constexpr unsigned kMaxCluster = 16;

/* The largest cluster, kMaxCluster (when non-portable sizes are
 * allowed), 8, 4 or 2, that the device co-schedules for `kernel` with that
 * block size and dynamic shared memory; 1 when none. */
template <class Kernel>
inline int largest_cluster(Kernel kernel, int threads, size_t smem, bool nonportable) {
  for (int size = nonportable ? (int)kMaxCluster : 8; size > 1; size >>= 1) {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[2];
    cluster_launch_config(&cfg, attr, (unsigned)size, threads, smem, nullptr, size);
    int clusters = 0;
    const bool ok =
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess && clusters > 0;
    cudaGetLastError();
    if (ok) return size;
  }
  return 1;
}

}  // namespace ingot_sampling

#endif /* INGOT_CUDA_SAMPLING_COMMON_CUH */
