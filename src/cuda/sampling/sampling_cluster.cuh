/*
 * Device helpers shared by the sampling paths that work in groups of 4
 * tokens: the dense kernel (sampling_dense.cu), the 16-bit softmax
 * (sampling_softmax_half.cu), the wide softmax (sampling_wide_softmax.cu)
 * and the wide sampler (sampling_wide_sample.cu). The general kernel
 * (sampling_general.cu) has its own. Here:
 *   - the division by T for masses and filters (scaled, mass_of, with_fast);
 *   - the statistics the paths reduce (argmax keys, flags, raw maxima,
 *     fixed-point masses, best draw keys) and their warp reductions;
 *   - the reduction over a row's cluster (C blocks, block b holding tokens
 *     [b * chunk, (b + 1) * chunk): block_part) by st.async into each
 *     block's inbox (cluster_reduce: the dense kernel and the 16-bit
 *     softmax);
 *   - the loads of groups of 4 tokens (cp.async, the bitmask, the finite
 *     rule, the raw distribution's terms);
 *   - the wide paths' cut of a row into nch chunks of one block each over
 *     the whole GPU (block b: chunk b % nch of row b / nch, wide_part):
 *     their loads and block reductions, and on the host their geometry,
 *     instantiations and launches.
 * The one helper not forced inline, cluster_reduce, is static: internal to
 * each including file, as the kernels that call it.
 *
 * Exactness, common to these paths (each path's file has its own part):
 *   - the draw keys s_i + g_i, with s_i = (l_i - m) / T, are the reference's
 *     single IEEE operations (src/common/sampling_ref.h), so the drawn token
 *     is the CPU's, bit for bit; s_i is computed exactly (div_exact) only
 *     where a key needs it, and by `scaled` (exact in the normal range, no
 *     range check) for masses and the draw's filter;
 *   - the masses (probabilities, log-probabilities) use an FMA exp within
 *     3 ulp (not the portable one; masses below 2^-126 are 0), summed four
 *     at a time in fp32 (groups of 4 tokens in token order), then as exact
 *     fixed-point integers (fixed_mass: any order gives the same total), so
 *     a row's masses do not depend on how it is cut: deterministic and
 *     batch-invariant, within 1e-6 of the CPU's double sums, and the same
 *     bits on the dense kernel, the 16-bit softmax and the wide kernels;
 *   - per token the common case costs about a dozen FMA-pipe operations and
 *     one hardware 2^x a pass: the division by T reuses one reciprocal
 *     (div_fast; the device check of
 *     docs/decisions/0041-device-checks-of-the-dense-kernel.md covers it and
 *     the exp on every input that matters), and the loops that divide carry
 *     no range check (the row's T decides once, through with_fast).
 *
 * The draw (the dense kernel's and the wide sampler's) evaluates the exact
 * Gumbel noise (two portable logs) only where it can matter. L0 = the exact
 * key of the argmax token (s = 0) bounds the winning key from below. A
 * token whose s < L0 - 22.9 cannot reach it (g <= 33 ln 2 < 22.9:
 * kGumbelMax) and is skipped before its Philox call. For the others, the
 * uniform's noise is first approximated with the hardware log2 (error <
 * 2e-5, see gumbel_approx); only a token whose approximate key is within
 * kApproxSlack = 1e-3 of the best key known (L0 or the thread's own exact
 * best) gets its exact key.
 */
#ifndef INGOT_CUDA_SAMPLING_CLUSTER_CUH
#define INGOT_CUDA_SAMPLING_CLUSTER_CUH

#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "common/sampling_ref.h"
#include "cuda/common.cuh"
#include "cuda/sampling/sampling_common.cuh"
#include "cuda/sampling/sampling_math.cuh"
#include "cuda/sampling/sampling_paths.cuh"

namespace ingot_sampling {

constexpr float kGumbelMax = 22.9f;   /* g <= -log(2^-33) = 22.87 */
constexpr float kApproxSlack = 1e-3f; /* >> |approximate key - exact key| */

/* a / T for a mass or a filter, not for a draw key. kFast (the row's
 * T.fast, a compile-time copy so that loops carry no check): div_fast, which
 * is exact wherever its intermediates stay normal; where they do not, the
 * mass is right anyway (|a| tiny: s ~ 0 and e^s = 1; overflow: NaN, which
 * fast_exp maps to 0, the true e^s). */
template <bool kFast>
__device__ __forceinline__ float scaled(float a, const Divisor &T) {
  return kFast ? div_fast(a, T) : div_exact(a, T);
}

template <bool kFast>
__device__ __forceinline__ float mass_of(float a, const Divisor &T) {
  return fast_exp(scaled<kFast>(a, T));
}

/* A compile-time bool for the generic lambdas that take the T.fast branch
 * out of the loops. */
template <bool B>
struct Flag {
  static constexpr bool value = B;
};

template <class F>
__device__ __forceinline__ void with_fast(bool fast, F f) {
  if (fast)
    f(Flag<true>{});
  else
    f(Flag<false>{});
}

/* ---- reductions over the cluster --------------------------------------------------- */

template <class S>
__device__ __forceinline__ S shfl_xor(const S &v, int offset) {
  constexpr int kWords = (int)((sizeof(S) + 3) / 4);
  union U {
    S s;
    uint32_t w[kWords];
  };
  U a, b;
  a.s = v;
#pragma unroll
  for (int i = 0; i < kWords; i++) b.w[i] = __shfl_xor_sync(0xffffffffu, a.w[i], offset);
  return b.s;
}

/* After the load: the argmax (value key << 32 | ~id, 0 when nothing is
 * allowed), the flags, and the raw distribution's maximum; l0, the argmax
 * token's Gumbel noise, is not reduced: the result's finish computes it. */
struct LoadStats {
  unsigned long long best;
  float raw_max, l0;
  uint32_t flags;
};

/* After the values: the mass of the final set and the raw distribution's
 * sum (relative to its maximum), both in fixed point (fixed_mass), and the
 * best draw key. */
struct DrawStats {
  unsigned long long mass, raw_sum, best;
};

__device__ __forceinline__ unsigned long long best_key(float v, int32_t id) {
  return ((unsigned long long)rank_key(v) << 32) | (uint32_t)~(uint32_t)id;
}

__device__ __forceinline__ int32_t best_id(unsigned long long k) { return (int32_t)~(uint32_t)k; }

/* The value of a rank_key. */
__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

__device__ __forceinline__ float best_value(unsigned long long k) {
  return key_value((uint32_t)(k >> 32));
}

/* The largest of the warp's 64-bit keys, on every lane: two 32-bit
 * reductions (the high words, then the low words of the lanes holding the
 * largest high word) instead of five rounds of shuffles. */
__device__ __forceinline__ unsigned long long warp_max_key(unsigned long long v) {
  const uint32_t hi = __reduce_max_sync(0xffffffffu, (uint32_t)(v >> 32));
  const uint32_t lo =
      __reduce_max_sync(0xffffffffu, (uint32_t)(v >> 32) == hi ? (uint32_t)v : 0u);
  return (unsigned long long)hi << 32 | lo;
}

/* s = (x - m) / T of a group (`scaled`; a masked token's is NaN or -Inf),
 * and the sum of the group's masses e^s. */
template <bool kFast>
__device__ __forceinline__ void scale4(const float x[4], float m, const Divisor &T, float sc[4]) {
#pragma unroll
  for (int e = 0; e < 4; e++) sc[e] = scaled<kFast>(__fsub_rn(x[e], m), T);
}

/* The reductions over a warp, every lane getting the result. */
struct ReduceLoad {
  __device__ __forceinline__ LoadStats operator()(LoadStats v) const {
    v.best = warp_max_key(v.best);
    v.raw_max = key_value(__reduce_max_sync(0xffffffffu, rank_key(v.raw_max))); /* no NaN */
    v.flags = __reduce_or_sync(0xffffffffu, v.flags);
    return v;
  }
  /* two results (l0 is a's) */
  __device__ static __forceinline__ LoadStats combine(LoadStats a, const LoadStats &b) {
    a.best = max(a.best, b.best);
    a.raw_max = fmaxf(a.raw_max, b.raw_max);
    a.flags |= b.flags;
    return a;
  }
};

/* The softmax's first reduction: LoadStats without the raw maximum and l0,
 * so that a block pushes 16 bytes by one st.async. */
struct ArgmaxStats {
  unsigned long long best;
  uint32_t flags, unused;
};

struct ReduceArgmax {
  __device__ __forceinline__ ArgmaxStats operator()(ArgmaxStats v) const {
    v.best = warp_max_key(v.best);
    v.flags = __reduce_or_sync(0xffffffffu, v.flags);
    return v;
  }
  __device__ static __forceinline__ ArgmaxStats combine(ArgmaxStats a, const ArgmaxStats &b) {
    a.best = max(a.best, b.best);
    a.flags |= b.flags;
    return a;
  }
};

/* Masses in FIXED POINT (the softmax's; the sampler's final and raw
 * masses), units of 1 / kMassUnit = 2^-40: every
 * w = e^((x - max) / T) is <= 1, a group's fp32 sum of four <= 4, so a
 * row's total stays below 2^40 V <= 2^60 for V <= 2^20. Integer sums are
 * exact, so the total is the same whatever the order of the partial sums;
 * the grid costs at most 2^-41 a group, under 2^-23 of the total (which is
 * >= 1: the maximum's own w is 1). */
constexpr float kMassUnit = 0x1p40f;

__device__ __forceinline__ unsigned long long fixed_mass(const float w[4]) {
  const float s = __fadd_rn(__fadd_rn(w[0], w[1]), __fadd_rn(w[2], w[3]));
  return __float2ull_rn(__fmul_rn(s, kMassUnit));
}

/* The warp's sum of one fixed-point mass a lane (each < 2^60), on every
 * lane: three 32-bit reductions of 22-, 22- and 20-bit pieces. */
struct ReduceMass {
  __device__ __forceinline__ unsigned long long operator()(unsigned long long v) const {
    const uint32_t a = __reduce_add_sync(0xffffffffu, (uint32_t)v & 0x3fffffu);
    const uint32_t b = __reduce_add_sync(0xffffffffu, (uint32_t)(v >> 22) & 0x3fffffu);
    const uint32_t c = __reduce_add_sync(0xffffffffu, (uint32_t)(v >> 44));
    return a + ((unsigned long long)b << 22) + ((unsigned long long)c << 44);
  }
  __device__ static __forceinline__ unsigned long long combine(unsigned long long a,
                                                               unsigned long long b) {
    return a + b;
  }
};

struct ReduceDraw {
  __device__ __forceinline__ DrawStats operator()(DrawStats v) const {
    v.mass = ReduceMass{}(v.mass);
    v.raw_sum = ReduceMass{}(v.raw_sum);
    v.best = warp_max_key(v.best);
    return v;
  }
  __device__ static __forceinline__ DrawStats combine(DrawStats a, const DrawStats &b) {
    a.mass += b.mass;
    a.raw_sum += b.raw_sum;
    a.best = max(a.best, b.best);
    return a;
  }
};

/* The fixed-point mass of a group of scaled values s (e^s each; a masked
 * token's s is NaN or -Inf, its mass 0). */
__device__ __forceinline__ unsigned long long exp_fixed4(const float sc[4]) {
  float w[4];
#pragma unroll
  for (int e = 0; e < 4; e++) w[e] = fast_exp(sc[e]);
  return fixed_mass(w);
}

/* A fixed-point mass as a double (exact but for the rounding of a total above 2^53 units). */
__device__ __forceinline__ double mass_value(unsigned long long fx) {
  return (double)fx * (1.0 / (double)kMassUnit);
}

/* A cluster barrier in two halves, without memory ordering: the start of a
 * launch (reduce_ready: every block runs), and its end after the small
 * top-k selection, whose lists other blocks read until then. */
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#else
  __syncthreads();
#endif
}

/* Combines one S per thread over the cluster in a fixed order (warp_reduce
 * over each warp, then over the warps, then over the blocks in rank order),
 * so every block gets the same bits whatever the batch. The blocks PUSH:
 * warp 0's lane b stores the block's value into slot [rank] of block b's
 * inbox by st.async, whose bytes complete a transaction count on block b's
 * mbarrier; each block's warp 0 waits on its own barrier (asleep, not
 * spinning), a block barrier releases the other warps, and every warp
 * folds the inbox (and applies `finish`). No cluster barrier, no remote
 * load, no fence: a barrier's phase completes when every block's bytes
 * have landed, and a block waits for its own inbox before it goes on, so
 * nobody writes into a block that has left. Each reduction of a launch has
 * a barrier of its own, set up at the kernel's start (reduce_init, then
 * reduce_ready) and used once.
 *
 * ReduceSpace, the shared memory of a launch's two reductions: a barrier
 * each, and two areas of 16 values (of up to 24 bytes) used crosswise: the
 * first's parts in `a` and inbox in `b`, the second's parts in `b` (free
 * once the first's finish has synchronised the block; the softmax, whose
 * first has no finish, keeps its second's parts apart) and inbox in `a`
 * (other blocks write it only after every block has pushed its first
 * value, so after this block's warp 0 has read the first's parts). Small on
 * purpose: three blocks a SM of the plain sampler at V = 262144 leave 160
 * bytes of static shared memory to spare. */
struct alignas(16) ReduceSpace {
  unsigned long long a[kDenseWarps * 3], b[kDenseWarps * 3];
  unsigned long long result[3]; /* a finished first reduction: LoadStats */
  unsigned long long bar[2];    /* mbarriers: the two inboxes' bytes */
};
static_assert(sizeof(LoadStats) <= sizeof(ReduceSpace::result), "the first reduction's result");

struct NoFinish {
  template <class S>
  __device__ __forceinline__ S operator()(const S &v) const {
    return v;
  }
};

template <class F>
struct HasFinish {
  static constexpr bool value = true;
};
template <>
struct HasFinish<NoFinish> {
  static constexpr bool value = false;
};

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t cluster_addr(const void *p, unsigned rank) {
  uint32_t a;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_u32(p)), "r"(rank));
  return a;
}
#endif

/* Thread 0, before reduce_ready: barrier `bar` expects C values of `bytes`. */
__device__ __forceinline__ void reduce_init(unsigned long long *bar, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
  const uint32_t b = smem_u32(bar);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b),
               "r"(cluster_blocks() * bytes)
               : "memory");
#else
  (void)bar, (void)bytes;
#endif
}

/* Every thread, after thread 0's reduce_init calls: the barriers are
 * published to the cluster; a cluster_wait must come before the first
 * cluster_reduce (every block runs and has set up its barriers then). */
__device__ __forceinline__ void reduce_ready() {
#if __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
  cluster_arrive_relaxed();
}

/* part, inbox: kWarps (the block's) and 16 values (ReduceSpace); result:
 * where warp 0 puts the finished value (with a Finish only). */
template <int kWarps = kDenseWarps, class S, class WarpReduce, class Finish = NoFinish>
static __device__ S cluster_reduce(S v, const S &identity, WarpReduce warp_reduce, S *part,
                                   S *inbox, unsigned long long *bar, S *result = nullptr,
                                   Finish finish = Finish{}) {
  static_assert(sizeof(S) % 8 == 0 && sizeof(S) <= 24, "pushed as 8-byte words (ReduceSpace)");
  const int lane = lane_id(), warp = warp_id();
  const unsigned C = cluster_blocks();
  v = warp_reduce(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    union {
      S s;
      unsigned long long w[sizeof(S) / 8];
    } y;
    y.s = warp_reduce(lane < kWarps ? part[lane] : identity);
#if __CUDA_ARCH__ >= 900
    if (C > 1 && (unsigned)lane < C) { /* st.async needs a cluster of two or more */
      const uint32_t dst = cluster_addr(&inbox[cluster_rank()], (unsigned)lane);
      const uint32_t rbar = cluster_addr(bar, (unsigned)lane);
      if (sizeof(S) == 16) /* one 16-byte store (the slots are 16-byte aligned) */
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b64 [%0], {%1, %2}, "
            "[%3];" ::"r"(dst),
            "l"(y.w[0]), "l"(y.w[sizeof(S) / 8 - 1]), "r"(rbar)
            : "memory");
      else
#pragma unroll
        for (int i = 0; i < (int)(sizeof(S) / 8); i++)
          asm volatile(
              "st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(
                  dst + 8 * i),
              "l"(y.w[i]), "r"(rbar)
              : "memory");
    }
#endif
    if (C == 1 && lane == 0) inbox[0] = y.s;
  }
  if (C == 1) {
    __syncthreads();
  } else {
#if __CUDA_ARCH__ >= 900
    /* How long the waiting warp may sleep in try_wait (ns). The phase's
     * completion wakes it (measured: no slower than spinning); the hint
     * only bounds the sleep. Sixteen spinning warps a block executed 14% of
     * the plain sampler's instructions at B = 64; one sleeping warp and a
     * block barrier: 0.2-1.5% faster, but the stress masked step at B = 64
     * 0.7-1% slower (docs/decisions/0011-cluster-reduction-shapes.md,
     * 0038-masked-step-b64-profile.md). */
    constexpr uint32_t kWaitHintNs = 1000000;
    if (warp == 0) {
      uint32_t done = 0;
      while (!done)
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0, "
            "%2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(smem_u32(bar)), "r"(kWaitHintNs)
            : "memory");
    }
    __syncthreads();
#endif
  }
  S y = warp_reduce((unsigned)lane < C ? inbox[lane] : identity);
  if (!HasFinish<Finish>::value) return y;
  if (warp == 0) { /* once a block */
    y = finish(y);
    if (lane == 0) *result = y;
  }
  __syncthreads();
  return *result;
}

/* ---- loads ------------------------------------------------------------------------- */

/* Tokens j .. j + 3 of the block (j a multiple of 4) as fp32, -Inf past n.
 * `vec`: the block's first token is 16-byte (f32) / 8-byte aligned. */
__device__ __forceinline__ void load4(const void *base, ingot_dtype dtype, bool vec, int j, int n,
                                      float x[4]) {
  if (vec && j + 3 < n) {
    if (dtype == INGOT_DTYPE_F32) {
      const float4 q = __ldg(reinterpret_cast<const float4 *>(base) + (j >> 2));
      x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
    } else {
      const uint2 q = __ldg(reinterpret_cast<const uint2 *>(base) + (j >> 2));
      const uint32_t w[2] = {q.x, q.y};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const uint16_t h = (uint16_t)(w[e >> 1] >> (16 * (e & 1)));
        x[e] = dtype == INGOT_DTYPE_BF16 ? ingot_bf16_to_f32(h) : ingot_f16_to_f32(h);
      }
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; e++)
    x[e] = j + e < n ? ingot_sampling_load(base, dtype, j + e) : -INFINITY;
}

template <int kBytes>
__device__ __forceinline__ void cp_async(void *dst, const void *src) {
  const uint32_t d = smem_u32(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(kBytes)
               : "memory");
}

/* Tokens j .. j + 3 as fp32: from the copy in shared memory where the load
 * went there (see the kernel), else from the row. */
__device__ __forceinline__ void fetch4(ingot_dtype dtype, const void *row, const float *sv,
                                       const uint16_t *stage16, bool vec, int j, int n,
                                       float x[4]) {
  if (!vec || j + 3 >= n) {
    load4(row, dtype, vec, j, n, x);
  } else if (dtype == INGOT_DTYPE_F32) {
    const float4 q = *reinterpret_cast<const float4 *>(sv + j);
    x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
  } else {
    const uint2 q = *reinterpret_cast<const uint2 *>(stage16 + j);
    const uint32_t w[2] = {q.x, q.y};
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const uint16_t h = (uint16_t)(w[e >> 1] >> (16 * (e & 1)));
      x[e] = dtype == INGOT_DTYPE_BF16 ? ingot_bf16_to_f32(h) : ingot_f16_to_f32(h);
    }
  }
}

/* The finite values of a group (the raw distribution's: NaN and +-Inf count as -Inf). */
__device__ __forceinline__ void finite4(const float x[4], float f[4]) {
#pragma unroll
  for (int e = 0; e < 4; e++) f[e] = fabsf(x[e]) < INFINITY ? x[e] : -INFINITY;
}

/* The raw distribution's fixed-point mass of a group of raw logits, each
 * finite or -Inf: e^((x - rm) / T), rm the row's finite maximum. A sum of
 * terms that each depend only on their token, so the row's total does not
 * depend on how the row is cut (the wide sampler's and the dense kernel's). */
template <bool kFast>
__device__ __forceinline__ unsigned long long raw_fixed4(const float x[4], float rm,
                                                         const Divisor &T) {
  float w[4];
#pragma unroll
  for (int e = 0; e < 4; e++) w[e] = mass_of<kFast>(__fsub_rn(x[e], rm), T);
  return fixed_mass(w);
}

/* The largest finite value of a group (-Inf: none). */
__device__ __forceinline__ float finite_max4(const float x[4]) {
  float f[4];
  finite4(x, f);
  return fmaxf(fmaxf(f[0], f[1]), fmaxf(f[2], f[3]));
}

/* The bitmask's 4 bits of tokens j .. j + 3 of the block (j a multiple of
 * 4, words the block's words in shared memory; all set without a mask). */
__device__ __forceinline__ uint32_t bits4(const uint32_t *swords, bool words, int j, int n) {
  return words && j < n ? swords[j >> 5] >> (j & 31) : 0xfu;
}

/* x with the bitmask applied: a token whose bit is clear is -Inf. */
__device__ __forceinline__ void allow4(const float x[4], uint32_t bits, float xm[4]) {
#pragma unroll
  for (int e = 0; e < 4; e++) xm[e] = (bits >> e) & 1u ? x[e] : -INFINITY;
}

/* The thread's maximum bm over its masked groups (ascending) and the first
 * group holding it (bj; the token is found after the pass, first_token). */
__device__ __forceinline__ void track4(const float x[4], int j, float &bm, int &bj) {
  const float m4 = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
  if (m4 > bm) bm = m4, bj = j;
}

/* The first token of group bj of sv equal to bm (the thread's maximum)
 * among those whose bit is set (`bits`: the group's 4; sv may hold the
 * values of tokens the bitmask masks). */
__device__ __forceinline__ int first_token(const float *sv, int bj, float bm,
                                           uint32_t bits = 0xfu) {
  const float4 q = *reinterpret_cast<const float4 *>(sv + bj);
  const unsigned hit = ((q.x == bm ? 1u : 0u) | (q.y == bm ? 2u : 0u) | (q.z == bm ? 4u : 0u) |
                        8u) & (bits | 8u);
  return bj + __ffs(hit) - 1;
}

/* Masks tokens j .. j + 3 in place: a token stays iff its bit is set and
 * its value finite (NaN and +Inf set `nan`). */
__device__ __forceinline__ void mask4(float x[4], uint32_t bits, bool &nan) {
#pragma unroll
  for (int e = 0; e < 4; e++) {
    const float v = x[e];
    nan |= !(v < INFINITY);
    x[e] = ((bits >> e) & 1u) && fabsf(v) < INFINITY ? v : -INFINITY;
  }
}

/* ---- the wide paths: a row over many blocks ------------------------------------------ */

/* A wide path cuts each row into nch chunks of one block each over the
 * whole GPU (wide_geometry), instead of one cluster a row; a block's
 * partial results go through the caller's workspace to the kernel that
 * follows it (programmatic dependent launch). Thread t holds the groups of
 * 4 tokens at 4 t + 4 kWideThreads g of its chunk, g < kGroups, in
 * registers. */
constexpr int kWideThreads = 256;
constexpr int kWideMaxGroups = 8;

struct WidePart {
  int64_t r, lo;
  int n;
};

template <class A> /* WideArgs or WideSampleArgs */
__device__ __forceinline__ WidePart wide_part(const A &w) {
  WidePart p;
  p.r = blockIdx.x / w.nch;
  p.lo = (int64_t)(blockIdx.x % w.nch) * w.chunk;
  p.n = (int)min((int64_t)w.chunk, w.vocab - p.lo);
  return p;
}

/* The first token of thread t's group g of a part. */
__device__ __forceinline__ int wide_token(int g) {
  return 4 * (int)threadIdx.x + 4 * kWideThreads * g;
}

/* Tokens j .. j + 3 of a row AS LOADED (fp32 words, or 16-bit halves in x
 * and y), -Inf's bits past n: wide_load starts every group's loads before it
 * decodes any, so that a thread's loads are in flight together (a load4 a
 * group waited for each group in turn: three round trips at 3 groups).
 * kL2 (a read before the kernel's wait: wide_mass's): through L2 only
 * (ld.global.cg), where the writes of the grids it follows are known to be;
 * after the wait (wide_max's) the read-only path. */
template <bool kL2, class T>
__device__ __forceinline__ T wide_ld(const T *p) {
  return kL2 ? __ldcg(p) : __ldg(p);
}

template <int kDtype, bool kL2>
__device__ __forceinline__ uint4 raw4(const void *base, bool vec, int j, int n) {
  constexpr ingot_dtype dtype = (ingot_dtype)kDtype;
  if (dtype == INGOT_DTYPE_F32) {
    const uint32_t *w = static_cast<const uint32_t *>(base);
    if (vec && j + 3 < n) return wide_ld<kL2>(reinterpret_cast<const uint4 *>(w + j));
    uint32_t e[4];
#pragma unroll
    for (int i = 0; i < 4; i++) e[i] = j + i < n ? wide_ld<kL2>(w + j + i) : 0xff800000u;
    return make_uint4(e[0], e[1], e[2], e[3]);
  }
  const uint16_t *h = static_cast<const uint16_t *>(base);
  if (vec && j + 3 < n) {
    const uint2 q = wide_ld<kL2>(reinterpret_cast<const uint2 *>(h + j));
    return make_uint4(q.x, q.y, 0u, 0u);
  }
  const uint32_t ninf = dtype == INGOT_DTYPE_BF16 ? 0xff80u : 0xfc00u;
  uint32_t e[4];
#pragma unroll
  for (int i = 0; i < 4; i++) e[i] = j + i < n ? (uint32_t)wide_ld<kL2>(h + j + i) : ninf;
  return make_uint4(e[0] | e[1] << 16, e[2] | e[3] << 16, 0u, 0u);
}

/* kWords words of 16-bit values (bf16 / f16), the lower half first, as fp32
 * (f16 by cvt: exact, one instruction where ingot_f16_to_f32 takes ten). */
template <int kDtype, int kWords>
__device__ __forceinline__ void decode_halves(const uint32_t w[kWords], float x[2 * kWords]) {
#pragma unroll
  for (int e = 0; e < 2 * kWords; e++) {
    const uint16_t h = (uint16_t)(w[e >> 1] >> (16 * (e & 1)));
    if ((ingot_dtype)kDtype == INGOT_DTYPE_BF16)
      x[e] = ingot_bf16_to_f32(h);
    else
      asm("cvt.f32.f16 %0, %1;" : "=f"(x[e]) : "h"(h));
  }
}

/* raw4's tokens as fp32 (load4's values). */
template <int kDtype>
__device__ __forceinline__ void decode4(uint4 r, float x[4]) {
  if ((ingot_dtype)kDtype == INGOT_DTYPE_F32) {
    x[0] = __uint_as_float(r.x), x[1] = __uint_as_float(r.y);
    x[2] = __uint_as_float(r.z), x[3] = __uint_as_float(r.w);
    return;
  }
  const uint32_t w[2] = {r.x, r.y};
  decode_halves<kDtype, 2>(w, x);
}

/* The chunk's raw values (-Inf past its end) and each group's 4 bitmask
 * bits (all set without a mask). */
template <int kDtype, int kGroups, bool kL2, class A>
__device__ __forceinline__ void wide_fetch(const A &w, const WidePart &p, float x[kGroups][4],
                                           uint32_t bits[kGroups]) {
  constexpr size_t esize = (ingot_dtype)kDtype == INGOT_DTYPE_F32 ? 4 : 2;
  const void *row =
      static_cast<const char *>(w.logits) + (size_t)(p.r * w.logits_stride + p.lo) * esize;
  const bool vec = (reinterpret_cast<uintptr_t>(row) & (esize == 4 ? 15u : 7u)) == 0;
  const uint32_t *words = w.allowed ? w.allowed + p.r * w.allowed_stride : nullptr;
  uint4 raw[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; g++) { /* every load first */
    const int j = wide_token(g);
    raw[g] = raw4<kDtype, kL2>(row, vec, j, p.n);
    /* a multiple of 4: its 4 bits lie in one word */
    bits[g] = words && j < p.n ? wide_ld<kL2>(words + ((p.lo + j) >> 5)) : 0xffffffffu;
  }
#pragma unroll
  for (int g = 0; g < kGroups; g++) {
    decode4<kDtype>(raw[g], x[g]);
    bits[g] >>= (p.lo + wide_token(g)) & 31;
  }
}

/* The argmax key of a thread's masked groups: its maximum and first group
 * holding it (track4), then its first token there (first_token), the
 * lowest id among equals; 0 when nothing is allowed. */
template <int kGroups>
__device__ __forceinline__ unsigned long long wide_thread_best(const float x[kGroups][4],
                                                               const WidePart &p) {
  float bm = -INFINITY;
  int bg = 0;
#pragma unroll
  for (int g = 0; g < kGroups; g++) {
    const float m4 = fmaxf(fmaxf(x[g][0], x[g][1]), fmaxf(x[g][2], x[g][3]));
    if (m4 > bm) bm = m4, bg = g;
  }
  if (!(bm > -INFINITY)) return 0ull;
  int e = 0;
#pragma unroll
  for (int g = 0; g < kGroups; g++)
    if (g == bg) e = x[g][0] == bm ? 0 : x[g][1] == bm ? 1 : x[g][2] == bm ? 2 : 3;
  return best_key(bm, (int32_t)(p.lo + wide_token(bg) + e));
}

/* A block's reduction in the wide kernels, on every thread: R over each
 * warp, then R::combine over the warps (maxima, OR, exact sums: any order).
 * A kernel that calls it twice for one type needs a block barrier between
 * the calls (part). */
template <class R, class S>
__device__ __forceinline__ S wide_block_reduce(S v) {
  __shared__ S part[kWideThreads / 32];
  v = R{}(v);
  if (lane_id() == 0) part[warp_id()] = v;
  __syncthreads();
  v = part[0];
#pragma unroll
  for (int i = 1; i < kWideThreads / 32; i++) v = R::combine(v, part[i]);
  return v;
}

/* Reads the first line of WideArgs into the SM's constant cache before
 * wide_max's wait, so that the loads after the wait do not miss there: one
 * thread prefetches the chunk's start, whose address needs logits and
 * logits_stride (every thread at one address would crowd an L2 slice). */
template <int kDtype, class A>
__device__ __forceinline__ void wide_touch(const A &w, const WidePart &p) {
  constexpr size_t esize = (ingot_dtype)kDtype == INGOT_DTYPE_F32 ? 4 : 2;
  const void *start =
      static_cast<const char *>(w.logits) + (size_t)(p.r * w.logits_stride + p.lo) * esize;
  if (threadIdx.x == 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(start));
}

/* ---- the wide paths: host side -------------------------------------------------------- */

/* Chunks a row and tokens a chunk: about one block a SM over the batch
 * (B = 1 on all 132 SMs of the H200 took 4.44 us, on 66 4.69), whole
 * groups of 4, 1 to kWideMaxGroups groups a thread. */
inline void wide_geometry(const struct ingot_context *ctx, int64_t batch, int64_t vocab,
                          int *nch, int *chunk) {
  const int64_t per = std::max<int64_t>(ctx->sm_count / batch, 1);
  int64_t ch = ((vocab + per - 1) / per + 3) / 4 * 4;
  ch = std::min<int64_t>(std::max<int64_t>(ch, 4 * kWideThreads),
                         4 * kWideThreads * kWideMaxGroups);
  *chunk = (int)ch;
  *nch = (int)((vocab + ch - 1) / ch);
}

/* The most blocks a wide call of V tokens a row runs, over its batches
 * (B <= kWideMaxBatch): a workspace sized for them serves every batch. */
inline int64_t wide_most_blocks(const struct ingot_context *ctx, int64_t vocab) {
  int64_t most = 0;
  for (int64_t b = 1; b <= kWideMaxBatch; b++) {
    int nch, chunk;
    wide_geometry(ctx, b, vocab, &nch, &chunk);
    most = std::max(most, b * nch);
  }
  return most;
}

/* f(dtype, groups) with both as compile-time constants (std::integral_constant):
 * the wide kernels' instantiations for chunks of `chunk` tokens, 1 to
 * kWideMaxGroups groups of 4 tokens a thread. */
template <class F>
void with_wide_shape(ingot_dtype dtype, int chunk, F f) {
  const int groups = (chunk + 4 * kWideThreads - 1) / (4 * kWideThreads);
  const auto by_groups = [&](auto d) {
    switch (groups) {
      case 1: f(d, std::integral_constant<int, 1>{}); return;
      case 2: f(d, std::integral_constant<int, 2>{}); return;
      case 3: f(d, std::integral_constant<int, 3>{}); return;
      case 4: f(d, std::integral_constant<int, 4>{}); return;
      case 5: f(d, std::integral_constant<int, 5>{}); return;
      case 6: f(d, std::integral_constant<int, 6>{}); return;
      case 7: f(d, std::integral_constant<int, 7>{}); return;
      default: f(d, std::integral_constant<int, 8>{}); return;
    }
  };
  static_assert(kWideMaxGroups == 8, "the cases above");
  switch (dtype) {
    case INGOT_DTYPE_BF16: by_groups(std::integral_constant<int, INGOT_DTYPE_BF16>{}); return;
    case INGOT_DTYPE_F16: by_groups(std::integral_constant<int, INGOT_DTYPE_F16>{}); return;
    default: by_groups(std::integral_constant<int, INGOT_DTYPE_F32>{});
  }
}

/* Launches the kN kernels of a wide path, `blocks` blocks of kWideThreads
 * each, chained by programmatic dependent launch. */
template <class A, int kN>
ingot_status wide_launch(struct ingot_context *ctx, const char *op, void (*(&k)[kN])(A),
                         int64_t blocks, const A &w, struct CUstream_st *stream) {
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  for (int i = 0; i < kN; i++) {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[2];
    cluster_launch_config(&cfg, attr, (unsigned)blocks, kWideThreads, 0, stream, 0, true);
    INGOT_CUDA_TRY(ctx, op, cudaLaunchKernelEx(&cfg, k[i], w));
  }
  return ingot_cuda_check_launch(ctx, op);
}

}  // namespace ingot_sampling

#endif /* INGOT_CUDA_SAMPLING_CLUSTER_CUH */
