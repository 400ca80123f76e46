/*
 * Sampling, CUDA backend: the DENSE path. Rows of ingot_sampling_softmax
 * and ingot_sample without a filter: masks, bias, bans, temperature, greedy,
 * the Gumbel-max draw and the drawn token's two log-probabilities. That is
 * the common decode step, and it needs no radix select. Also ingot_sample
 * rows with 1 <= top_k <= kSmallK (any top_p, min_p; calls without top-n
 * outputs): the filters act on the top-k set only, which small_k_draw
 * finds exactly; and the top-n outputs (n <= kSmallK) of rows without a
 * filter, the same selection (small_k_select, after the second reduction,
 * over the masked values or the logits read again; instantiated as a
 * kernel of its own, kDenseSampleTop; the host's routing is in
 * ingot_cuda_sampling_dense_mode). And NUCLEUS rows (top-p
 * and / or min-p without a top-k): the same draw over the row's top-small_k
 * set K, with top-p's total the row's mass (the second reduction), when the
 * final set lies in K; otherwise the row is handed to the general kernel
 * (kHandOffToken in tokens[r], read by that kernel after its wait).
 * src/cuda/sampling.cu keeps the general kernel for the other rows. The
 * rules are the Sampling section of include/ingot/ingot.h.
 *
 * Shape. ONE launch; a row is processed by a cluster of C blocks (C depends
 * on V and the device, never on B), block b holding the row's tokens
 * [b * chunk, (b + 1) * chunk) in shared memory, so the logits are read once
 * and the probabilities written once. Block: 16 warps, warp w owns the
 * contiguous tokens [w * chunk / 16, (w + 1) * chunk / 16) of the block;
 * the whole chunk is copied in with cp.async, every copy in flight at once.
 * Two cluster reductions (cluster_reduce: pushed by st.async into each
 * block's inbox, no cluster barrier): ingot_sample's (argmax, flags, the
 * raw distribution's max) after the load, then (mass, raw sum, best key);
 * ingot_sampling_softmax's (argmax, flags) after the load, then the mass,
 * summed over the weights w_i that its exp pass stores in place of the
 * values, so that the write pass is one multiplication a token.
 *
 * What is exact and what is within a tolerance:
 *   - the draw keys s_i + g_i, with s_i = (l_i - m) / T, are the reference's
 *     single IEEE operations (src/common/sampling_ref.h), so the drawn token
 *     is the CPU's, bit for bit, always (no filter, no mass-dependent
 *     decision); s_i is computed exactly (div_exact) only where a key needs
 *     it, and by `scaled` (exact in the normal range, no range check) for
 *     masses and the draw's filter;
 *   - the masses (probabilities, log-probabilities) use an FMA exp within
 *     3 ulp (not the portable one; masses below 2^-126 are 0), summed four
 *     at a time in fp32 (groups of 4 tokens in token order), then as exact
 *     fixed-point integers (fixed_mass: any order gives the same total), so
 *     a row's masses do not depend on how it is cut: deterministic and
 *     batch-invariant, within 1e-6 of the CPU's double sums, and the same on
 *     the wide kernels that take small batches. The raw distribution
 *     (token_raw_logprob) is summed after the first reduction, relative to
 *     the row's raw maximum, from the values before the bitmask.
 * Per token the common case costs about a dozen FMA-pipe operations and one
 * hardware 2^x a pass: the division by T reuses one reciprocal (div_fast;
 * dev/cuda/sampling_math.cu checks it and the exp on every input that
 * matters), and the loops that divide carry no range check (the row's T
 * decides once, through with_fast).
 *
 * The draw evaluates the exact Gumbel noise (two portable logs) only where
 * it can matter. L0 = the exact key of the argmax token (s = 0) bounds the
 * winning key from below. A token whose s < L0 - 22.9 cannot reach it
 * (g <= 33 ln 2 < 22.9) and is skipped before its Philox call. For the
 * others, the uniform's noise is first approximated with the hardware log2
 * (error < 2e-5, see gumbel_approx); only a token whose approximate key is
 * within kApproxSlack = 1e-3 of the best key known (L0 or the thread's own
 * exact best) gets its exact key.
 */
#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "common/sampling_ref.h"
#include "cuda/common.cuh"
#include "cuda/cuda.cuh"
#include "cuda/sampling/sampling_common.cuh"
#include "cuda/sampling/sampling_math.cuh"

namespace {

using namespace ingot_sampling;

constexpr int kDenseThreads = 512;
constexpr int kDenseWarps = kDenseThreads / 32;
constexpr int kChunkUnit = 512;          /* tokens per block: a multiple of this */
constexpr int kMinTokensPerBlock = 4096; /* fewer blocks for small V */
constexpr float kGumbelMax = 22.9f;      /* g <= -log(2^-33) = 22.87 */
constexpr float kApproxSlack = 1e-3f;    /* >> |approximate key - exact key| */
constexpr int kAhead = 4;                /* the softmax's write pass: groups loaded at once */
constexpr int kCandCap = 256;            /* a warp's list of draw candidates (16-bit offsets) */

/* ingot_sample's three kernels, so that code a call cannot use does not weigh
 * on the register allocation of the common one: kDenseSample, rows without a
 * filter; kDenseSampleFilter, calls with filter tensors whose small top-k and
 * nucleus rows are the dense kernel's (a.small_k > 0); kDenseSampleTop, calls
 * with top-n outputs (rows without a filter, a.small_k = 0). */
enum DenseMode { kDenseSoftmax = 0, kDenseSample = 1, kDenseSampleTop = 2, kDenseSampleFilter = 3 };

/* The scratch area after the block's values (dense_smem_bytes), in 16-bit
 * units: kDenseSample's candidate lists (kCandCap a warp), the selection
 * kernels' lists as long as the chunk (also the small top-k's keys:
 * ingot_cuda_sampling_dense_small_k). 16-bit logits are staged in place
 * (the kernel), so the dtype does not matter: at V = 262144 a block of the
 * softmax takes 66 KB, of kDenseSample 74 KB, three blocks a SM. */
__host__ __device__ constexpr int dense_scratch_len(int mode, int chunk) {
  return mode == kDenseSoftmax ? 0 : mode == kDenseSample ? kDenseWarps * kCandCap : chunk;
}

/* SamplingArgs (sampling_common.cuh); chunk is a multiple of kChunkUnit,
 * frac_bits and keep_raw are not used. */
typedef SamplingArgs DenseArgs;

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
__device__ S cluster_reduce(S v, const S &identity, WarpReduce warp_reduce, S *part, S *inbox,
                            unsigned long long *bar, S *result = nullptr,
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
     * only bounds the sleep. Sixteen spinning warps a block issued 14% of
     * the plain sampler's instructions at B = 64; one sleeping warp and a
     * block barrier: 0.2-1.5% faster, but the stress masked step at B = 64
     * 0.7-1% slower (docs/perf-notes.md, session 16). */
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

/* ---- ingot_sample with a small top-k ------------------------------------------------ */

/* Rows with 1 <= top_k <= kSmallK: the filters and the draw act on the top-k
 * set only, so the kernel finds that set exactly and hands it to one warp,
 * which runs the reference's own steps on it (portable exp, top-p sums in
 * double in rank order, min-p, Gumbel keys): tokens identical to the CPU's
 * even at top-p boundaries. A token's KEY is (rank_key(s) << 32 | ~id): the
 * rank order as one integer, distinct for distinct tokens, 0 for none.
 *   1. every block: each thread's largest key, that of its largest x (from
 *      the load pass, or from the pass that reads the raw logits again into
 *      sv), sorted over each warp (bitonic);
 *   2. every block: its t = ceil(2k / C) largest thread maxima (ranked by
 *      counting among the warps' t largest); after a cluster barrier, L = the
 *      k-th largest of the C lists' keys. At least k keys are >= L;
 *   3. every block: its keys >= L into a list in its scratch (s by
 *      div_exact only for the x above x_floor(L), the few that can reach L);
 *      after a cluster barrier, every block reads the C counts. If some list
 *      would overflow (the row's largest values crowded into few blocks),
 *      steps 2-3 again with k-deep lists of the exact thread maxima (ranked
 *      by binary searches over the warp lists): L is then the exact k-th
 *      largest thread maximum, only the k
 *      threads whose maximum is >= L hold keys >= L, at most 4 per 128 tokens
 *      of a warp's region each, which the host's choice of small_k makes
 *      fit (ingot_cuda_sampling_dense_small_k);
 *   4. block 0 (after a cluster barrier): gathers the lists into its sv, ranks
 *      them by counting, keeps ranks < k: the top-k set in rank order;
 *   5. warp 0 of block 0: top-p, min-p, the draw and the final mass. */
constexpr int kSmallK = 64;

struct SmallKShared {
  unsigned long long warp_max[kDenseWarps][32]; /* each warp's thread maxima, descending */
  unsigned long long block_top[kSmallK];        /* the block's k largest thread maxima */
  unsigned long long top[kSmallK];              /* block 0: the row's top-k, rank order */
  float s[kSmallK], w[kSmallK];                 /* block 0: their s and portable exp, */
  float key[kSmallK];                           /* draw key s + g */
  double cum[kSmallK];                          /* and the cumulative sums of w */
  unsigned long long threshold;                 /* L */
  int count[2];                                 /* this block's keys >= L, each attempt */
  int fits;                                     /* the keys fit (both lists, all blocks) */
  int offset[kMaxCluster + 1];                  /* block 0: where each block's keys go */
  int32_t token;                                /* block 0: the result */
  float logprob;
};

/* Entries of a[0, len) greater than x, len <= kMax (a power of 2); a is
 * descending (zeros, for none, last). A binary search of fixed steps (the
 * count's bits, highest first) with no loop: the searches of several lists
 * unroll into independent chains whose shared-memory loads overlap (a
 * `while` search a list ran one load latency a step, list after list). */
template <int kMax>
__device__ __forceinline__ int count_greater(const unsigned long long *a, int len,
                                             unsigned long long x) {
  int pos = 0; /* a[0, pos) > x */
#pragma unroll
  for (int step = kMax; step > 0; step >>= 1)
    if (pos + step <= len && a[pos + step - 1] > x) pos += step;
  return pos;
}

/* Entries of a[0, n) greater than x, a 16-byte aligned: eight loads in
 * flight (a loop of one load an entry ran one load latency an entry). */
__device__ __forceinline__ int count_above(const unsigned long long *a, int n,
                                           unsigned long long x) {
  int count = 0, d = 0;
  for (; d + 8 <= n; d += 8) {
    ulonglong2 q[4];
#pragma unroll
    for (int u = 0; u < 4; u++) q[u] = reinterpret_cast<const ulonglong2 *>(a + d)[u];
#pragma unroll
    for (int u = 0; u < 4; u++) count += (q[u].x > x) + (q[u].y > x);
  }
  for (; d < n; d++) count += a[d] > x;
  return count;
}

/* The warp's 32 values (one a lane), sorted descending over the lanes. */
__device__ __forceinline__ unsigned long long warp_sort_desc(unsigned long long v) {
  const int lane = lane_id();
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1)
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const unsigned long long o = shfl_xor(v, stride);
      const bool keep_max = ((lane & size) == 0) == ((lane & stride) == 0);
      v = keep_max ? (v > o ? v : o) : (v < o ? v : o);
    }
  return v;
}

/* The exact key of this thread's largest value (0: none): the largest key
 * (s, id) with s = (x - m) / T over the finite x of its groups of sv (-Inf:
 * not a candidate). s is monotone in x, so the largest s is that of the
 * largest x, and the tokens of that s lie above x_floor: a pass of maxima,
 * then exact divisions for those few tokens only. */
__device__ unsigned long long exact_thread_max(const float *sv, int64_t lo, int wlo, int wend,
                                               float m, Divisor div_t) {
  float bm = -INFINITY;
  for (int j = wlo + 4 * lane_id(); j < wend; j += 128) {
    const float4 q = *reinterpret_cast<const float4 *>(sv + j);
    bm = fmaxf(bm, fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)));
  }
  const float sb = bm == -INFINITY ? -INFINITY : div_exact(__fsub_rn(bm, m), div_t);
  if (sb == -INFINITY) return 0; /* every s is -Inf */
  const float lim = x_floor(sb, m, div_t.b);
  unsigned long long tmax = 0;
  for (int j = wlo + 4 * lane_id(); j < wend; j += 128) {
    const float4 q = *reinterpret_cast<const float4 *>(sv + j);
    const float x[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
      if (!(x[e] >= lim) || x[e] == -INFINITY) continue;
      const float v = div_exact(__fsub_rn(x[e], m), div_t);
      if (v == -INFINITY) continue;
      const unsigned long long key = best_key(v, (int32_t)(lo + j + e));
      tmax = key > tmax ? key : tmax;
    }
  }
  return tmax;
}

/* The raw logits of the block (n of them, dtype kDtype) into sv, -Inf for a
 * non-finite one (not a candidate), and this thread's largest, bm at block
 * token bi (-Inf: none), as the load pass gives them for the masked values:
 * small_k_select then runs as on those. A template: the loop holds the one
 * conversion. */
template <ingot_dtype kDtype>
__device__ void raw_reload(float *sv, const void *raw_row, int wlo, int wend, int n, float &bm,
                           int &bi) {
  const uintptr_t align = kDtype == INGOT_DTYPE_F32 ? 15u : 7u;
  const bool vec = (reinterpret_cast<uintptr_t>(raw_row) & align) == 0;
  int bj = 0;
  bm = -INFINITY;
  for (int j = wlo + 4 * lane_id(); j < wend; j += 128) {
    float x[4];
    load4(raw_row, kDtype, vec, j, n, x);
#pragma unroll
    for (int e = 0; e < 4; e++) x[e] = fabsf(x[e]) < INFINITY ? x[e] : -INFINITY;
    const float m4 = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    if (m4 > bm) bm = m4, bj = j;
    *reinterpret_cast<float4 *>(sv + j) = make_float4(x[0], x[1], x[2], x[3]);
  }
  bi = bm > -INFINITY ? first_token(sv, bj, bm) : 0; /* this thread's own store */
}

/* Steps 1-4 above for row r (a row-uniform branch: every thread of every
 * block of the cluster calls it): the k largest keys of s = (x - m) / T over
 * the block's values x in sv (-Inf: not a candidate; hint: this thread's
 * largest x, at block token hint_j, or -Inf for none), or, with raw_row (the
 * block's n logits as given, `dtype`), over those logits (non-finite ones
 * are not candidates; sv is overwritten with them, -Inf for those). A
 * function of its own (not inlined): inlined, it made kDenseSample spill.
 * Out of line, ptxas still allocates each kernel's registers together with
 * it, so a change here moves the calling kernels' hot loops by a few
 * instructions and their time by ~1% (docs/perf-notes.md, sessions 12-13);
 * kDenseSample does not call it.
 * stage, the block's scratch (chunk * 2 bytes, at least C * kSmallK keys:
 * ingot_cuda_sampling_dense_small_k). In block 0 the set is left
 * in sh.top (rank order; 0 past the last candidate) and sh.s, with `draw`
 * also each token's portable exp sh.w and draw key sh.key; the other blocks
 * return after step 3 (block 0 reads their lists until the caller's next
 * cluster barrier). */
__device__ __noinline__ void small_k_select(float *sv, unsigned long long *stage, SmallKShared &sh,
                                            int64_t lo, int wlo, int wend, float m,
                                            const Divisor &div_ref, int k, bool draw,
                                            uint64_t seed, uint64_t position, float hint,
                                            int hint_j, const void *raw_row = nullptr,
                                            ingot_dtype dtype = INGOT_DTYPE_F32, int n = 0) {
  /* a copy: through the reference (the caller's stack), every division
   * would load it again, since stores to shared memory might alias it */
  const Divisor div_t = div_ref;
  const int lane = lane_id(), warp = warp_id();
  const unsigned crank = cluster_rank(), cblocks = cluster_blocks();
  /* 1. The thread's largest key: that of its largest x, whose s is the
   * largest s, though another x may round to the same s with a lower id: a
   * real key all the same, which is all that step 2's L needs (k real keys
   * >= L); the exact one only if the second attempt runs (its bound counts
   * keys). The raw logits, read again, replace sv and the hint. */
  if (raw_row) {
    switch (dtype) { /* a loop for the one dtype */
      case INGOT_DTYPE_BF16:
        raw_reload<INGOT_DTYPE_BF16>(sv, raw_row, wlo, wend, n, hint, hint_j);
        break;
      case INGOT_DTYPE_F16:
        raw_reload<INGOT_DTYPE_F16>(sv, raw_row, wlo, wend, n, hint, hint_j);
        break;
      default: raw_reload<INGOT_DTYPE_F32>(sv, raw_row, wlo, wend, n, hint, hint_j);
    }
  }
  unsigned long long tmax = 0;
  if (hint > -INFINITY) {
    const float v = div_exact(__fsub_rn(hint, m), div_t);
    if (v != -INFINITY) tmax = best_key(v, (int32_t)(lo + hint_j));
  }
  sh.warp_max[warp][lane] = warp_sort_desc(tmax);
  if (threadIdx.x < kSmallK) sh.block_top[threadIdx.x] = 0;
  if (threadIdx.x == 0) sh.count[0] = sh.count[1] = 0;
  __syncthreads();
  /* 2-3, first with the t largest of each block's list (L is then the k-th
   * largest of a subset: still valid, usually close, cheap to rank by
   * counting); if that leaves more keys than the lists can hold, again with
   * all k (the bound above), ranked by binary searches. The branch is the
   * cluster's: every block sees the same counts. */
  const int t = (int)min((unsigned)k, (2u * (unsigned)k + cblocks - 1) / cblocks);
  const int block_cap = (wend - wlo) * kDenseWarps / 4; /* stage: chunk / 4 keys */
  const int all_cap = (wend - wlo) * kDenseWarps / 2;   /* block 0's sv: chunk / 2 keys */
  for (int attempt = 0;; attempt++) {
    if (attempt == 0) {
      /* the block's t largest thread maxima lie among the warps' t largest:
       * rank those 16 x min(t, 32) entries by counting */
      const int tt = min(t, 32), entries = kDenseWarps * tt;
      for (int e = threadIdx.x; e < entries; e += kDenseThreads) {
        const unsigned long long x = sh.warp_max[e / tt][e % tt];
        if (x == 0) continue;
        int rank = 0;
#pragma unroll
        for (int w = 0; w < kDenseWarps; w++) rank += count_greater<32>(sh.warp_max[w], tt, x);
        if (rank < t) sh.block_top[rank] = x;
      }
    } else {
      tmax = exact_thread_max(sv, lo, wlo, wend, m, div_t); /* the exact thread maxima */
      sh.warp_max[warp][lane] = warp_sort_desc(tmax);
      __syncthreads();
      if (tmax != 0) { /* all k: each thread ranks its own maximum */
        int rank = 0;
#pragma unroll
        for (int w = 0; w < kDenseWarps; w++) rank += count_greater<32>(sh.warp_max[w], 32, tmax);
        if (rank < k) sh.block_top[rank] = tmax;
      }
    }
    cluster_sync();
    const int len = attempt == 0 ? t : k, lists = (int)cblocks * len;
    for (int e = threadIdx.x; e < lists; e += kDenseThreads)
      stage[e] = *remote(&sh.block_top[e % len], (unsigned)(e / len));
    if (threadIdx.x == 0) sh.threshold = 1; /* fewer than k thread maxima: every token */
    __syncthreads();
    for (int e = threadIdx.x; e < lists; e += kDenseThreads) {
      const unsigned long long x = stage[e];
      if (x == 0) continue;
      int rank = 0;
      if (attempt == 0)
        rank = count_above(stage, lists, x);
      else /* each block's list is descending */
        for (unsigned b = 0; b < cblocks; b++)
          rank += count_greater<kSmallK>(stage + b * len, len, x);
      if (rank == k - 1) sh.threshold = x;
    }
    __syncthreads();
    /* 3. s only above x_floor (a few tokens), exactly */
    const unsigned long long L = sh.threshold;
    const float lim = L >> 32 ? x_floor(best_value(L), m, div_t.b) : -INFINITY; /* L = 1: all */
    int *count = &sh.count[attempt];
    for (int j = wlo + 4 * lane; j < wend; j += 128) {
      const float4 q = *reinterpret_cast<const float4 *>(sv + j);
      const float x[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        if (!(x[e] >= lim) || x[e] == -INFINITY) continue;
        const float v = div_exact(__fsub_rn(x[e], m), div_t);
        if (v == -INFINITY) continue;
        const unsigned long long key = best_key(v, (int32_t)(lo + j + e));
        if (key < L) continue;
        const int at = atomicAdd(count, 1);
        if (at < block_cap) stage[at] = key;
      }
    }
    cluster_sync();
    if (threadIdx.x < cblocks) sh.offset[threadIdx.x + 1] = *remote(count, threadIdx.x);
    __syncthreads();
    if (threadIdx.x == 0) {
      bool fits = true;
      sh.offset[0] = 0;
      for (unsigned b = 0; b < cblocks; b++) {
        fits = fits && sh.offset[b + 1] <= block_cap;
        sh.offset[b + 1] += sh.offset[b];
      }
      sh.fits = fits && sh.offset[cblocks] <= all_cap;
    }
    __syncthreads();
    if (sh.fits || attempt == 1) break; /* the second attempt always fits */
    __syncthreads(); /* sh.fits is read by all before the next attempt rewrites state */
  }
  if (crank != 0) return; /* the lists are read until the caller's next cluster barrier */
  /* 4. */
  if (threadIdx.x < kSmallK) sh.top[threadIdx.x] = 0, sh.w[threadIdx.x] = 0.0f;
  unsigned long long *all = reinterpret_cast<unsigned long long *>(sv); /* chunk / 2 keys */
  for (int b = warp; b < (int)cblocks; b += kDenseWarps) { /* a warp a block's list */
    const unsigned long long *src = remote(stage, (unsigned)b);
    /* the host's small_k keeps both within bounds; clamped all the same */
    const int at = sh.offset[b], c = min(sh.offset[b + 1] - at, block_cap);
    for (int i = lane; i < c && at + i < all_cap; i += 32) all[at + i] = src[i];
  }
  __syncthreads();
  /* ranks by counting; the k first get their exp and draw key here, in
   * parallel (whether they are drawn from is decided below) */
  const int total = min(sh.offset[cblocks], all_cap);
  for (int c = threadIdx.x; c < total; c += kDenseThreads) {
    const unsigned long long x = all[c];
    const int rank = count_above(all, total, x);
    if (rank >= k) continue;
    const float sx = best_value(x);
    sh.top[rank] = x;
    sh.s[rank] = sx;
    if (draw) {
      sh.w[rank] = ingot_sampling_ref_exp(sx);
      sh.key[rank] = __fadd_rn(sx, ingot_sampling_ref_gumbel(seed, position, (uint32_t)best_id(x)));
    }
  }
  __syncthreads();
}

/* Steps 1-5 above for row r (T > 0; every thread of every block of the
 * cluster calls it). In block 0 the result is left in sh.token and
 * sh.logprob. total: 0 for a top-k row (top-p's total is K's own sum);
 * for a nucleus row (no top-k; K is the row's top-k set, k = small_k) the
 * row's mass, which top-p compares with K's cumulative sums. A nucleus row
 * whose final set F may reach past K (top-p not reached within K, no
 * min-p cut within it, and K not the whole row) gets sh.token =
 * kHandOffToken. */
__device__ void small_k_draw(float *sv, unsigned long long *stage, SmallKShared &sh, int64_t lo,
                             int wlo, int wend, float m, const Divisor &div_t, int k, float top_p,
                             float min_p, uint64_t seed, uint64_t position, double total,
                             float hint, int hint_j) {
  small_k_select(sv, stage, sh, lo, wlo, wend, m, div_t, k, true, seed, position, hint, hint_j);
  if (cluster_rank() != 0 || warp_id() != 0) return;
  const int lane = lane_id();
  /* 5. K = entries 0 .. nk - 1 in rank order. The reference's cumulative sum
   * in double, in its order (every lane adds the same chain; the loads are
   * off it; w = 0 past K, which leaves the sum as it is); top-p keeps the
   * prefix up to the first sum >= p * total; min-p drops a suffix (s
   * descends): F is a prefix too */
  {
    double sum = 0.0;
#pragma unroll
    for (int j = 0; j < kSmallK; j++) {
      sum += (double)sh.w[j];
      if (lane == 0) sh.cum[j] = sum;
    }
  }
  __syncwarp();
  const float floor_s = min_p > 0.0f ? ingot_sampling_ref_log(min_p) : -INFINITY;
  int nk = 0, keep = kSmallK + 1, kept = kSmallK; /* + 1: not reached (keep <= kSmallK) */
  unsigned long long best = 0;
  for (int h = 0; h < kSmallK / 32; h++) {
    const int j = lane + 32 * h;
    nk += __popc(__ballot_sync(0xffffffffu, sh.top[j] != 0));
  }
  const double target = (double)top_p * (total > 0.0 ? total : sh.cum[nk - 1]);
  for (int h = 0; h < kSmallK / 32; h++) {
    const int j = lane + 32 * h;
    const bool valid = j < nk;
    const unsigned reach = __ballot_sync(0xffffffffu, valid && top_p < 1.0f && sh.cum[j] >= target);
    const unsigned low = __ballot_sync(0xffffffffu, valid && sh.s[j] < floor_s);
    if (reach && keep > kSmallK) keep = 32 * h + __ffs(reach);      /* through the first */
    if (low && kept == kSmallK) kept = 32 * h + __ffs(low) - 1;     /* before the first */
  }
  if (total > 0.0 && keep > kSmallK && kept == kSmallK && nk == k) {
    if (lane == 0) sh.token = kHandOffToken; /* F may reach past K */
    __syncwarp();
    return;
  }
  const int f = min(min(keep, kept), nk); /* |F| >= 1: the maximum is never dropped */
  for (int h = 0; h < kSmallK / 32; h++) {
    const int j = lane + 32 * h;
    if (j < f) {
      const unsigned long long b = best_key(sh.key[j], best_id(sh.top[j]));
      best = b > best ? b : best;
    }
  }
  best = warp_max_key(best);
  const int32_t token = best_id(best);
  for (int h = 0; h < kSmallK / 32; h++) {
    const int j = lane + 32 * h;
    if (j < f && best_id(sh.top[j]) == token) {
      sh.token = token;
      sh.logprob = (float)((double)sh.s[j] - log(sh.cum[f - 1]));
    }
  }
  __syncwarp(); /* lane 0 reads the result */
}

/* ---- the softmax after pass 1 ------------------------------------------------------ */

/* ingot_sampling_softmax after the first reduction (st: the row's argmax
 * and flags): the exp pass stores w_i = e^((x_i - max) / T) over the
 * thread's groups of sv (the block's masked values) and sums them in fixed
 * point, the second reduction gives Z, and the write pass stores p_i = w_i
 * * fp32(1 / Z); one-hot for a greedy row, zeros for an empty row. One exp
 * a token and no loop-carried rescale: with the cheap reductions this beats
 * summing online in pass 1 (one reduction) and evaluating the exp again
 * (docs/perf-notes.md, session 15). */
__device__ __forceinline__ void softmax_finish(const DenseArgs &a, int64_t r, int64_t lo, int n,
                                               int wlo, int wend, float T, const Divisor &div_t,
                                               const ArgmaxStats &st,
                                               ReduceSpace &space, float *sv) {
  __shared__ unsigned long long mass_part[kDenseWarps]; /* see ReduceSpace */
  const int lane = lane_id();
  const unsigned long long best = st.best;
  const bool empty = best == 0;
  if (cluster_rank() == 0 && threadIdx.x == 0 && a.row_status)
    a.row_status[r] = st.flags | (empty ? INGOT_SAMPLING_ROW_EMPTY : 0u);
  const bool soft = !empty && T > 0.0f; /* uniform over the cluster */
  const int j0 = wlo + 4 * lane;
  float inv_z = 0.0f;
  if (soft) {
    const float m = best_value(best);
    unsigned long long mass = 0;
    with_fast(div_t.fast, [&](auto fast) {
      constexpr bool kFast = decltype(fast)::value;
      for (int j = j0; j < wend; j += 128) {
        float4 *q = reinterpret_cast<float4 *>(sv + j);
        const float4 v = *q;
        float w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; e++) w[e] = mass_of<kFast>(__fsub_rn(w[e], m), div_t);
        *q = make_float4(w[0], w[1], w[2], w[3]);
        mass += fixed_mass(w);
      }
    });
    const unsigned long long z =
        cluster_reduce(mass, 0ull, ReduceMass{}, mass_part, space.a, &space.bar[1]);
    inv_z = (float)((double)kMassUnit / (double)z);
  }
  const int64_t argmax = empty ? -1 : best_id(best);
  const int hot = soft || argmax < lo || argmax >= lo + n ? -1 : (int)(argmax - lo);
  float *prow = a.probs + r * a.probs_stride + lo;
  const bool pvec = (reinterpret_cast<uintptr_t>(prow) & 15u) == 0;
  int j = j0;
  if (soft && pvec) { /* whole aligned groups: the lean loop, kAhead groups at a time */
    const int jend = min(wend, n & ~3);
    for (; j < jend; j += 128 * kAhead) {
      /* every load unpredicated (a group past jend loads group j again, not
       * stored): a predicated load keeps its register's old value alive */
      float4 w[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; u++)
        w[u] = *reinterpret_cast<const float4 *>(sv + (j + 128 * u < jend ? j + 128 * u : j));
#pragma unroll
      for (int u = 0; u < kAhead; u++) {
        if (j + 128 * u >= jend) break;
        *reinterpret_cast<float4 *>(prow + j + 128 * u) =
            make_float4(__fmul_rn(w[u].x, inv_z), __fmul_rn(w[u].y, inv_z),
                        __fmul_rn(w[u].z, inv_z), __fmul_rn(w[u].w, inv_z));
      }
    }
    j = j0 + max(jend - j0 + 127, 0) / 128 * 128; /* the first group past the lean ones */
  }
  for (; j < wend && j < n; j += 128) {
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; e++)
      p[e] = soft ? __fmul_rn(sv[j + e], inv_z) : j + e == hot ? 1.0f : 0.0f;
    if (pvec && j + 3 < n) {
      *reinterpret_cast<float4 *>(prow + j) = make_float4(p[0], p[1], p[2], p[3]);
    } else {
      for (int e = 0; e < 4 && j + e < n; e++) prow[j + e] = p[e];
    }
  }
}

/* ---- the wide softmax (small batches) ---------------------------------------------- */

/* ingot_sampling_softmax for one or two rows (B <= kWideMaxBatch, V >=
 * kWideMinVocab) without filter tensors or bias / ban lists. A cluster a row
 * would leave all but 16 SMs idle, so each row is cut into nch chunks of
 * one block each over the whole GPU (132 / B on the H200), and the row's two
 * reductions go through the caller's workspace between three kernels
 * chained by programmatic dependent launch:
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
 * Each w_i, each group's fixed-point mass, the integer total and each p_i
 * are softmax_finish's to the bit, and none depends on the partition: a
 * row's probabilities are the same bits on either path, whatever the batch.
 * Thread t holds the groups of 4 tokens at 4 t + 4 kWideThreads g of its
 * chunk, g < kGroups, in registers. */
constexpr int kWideThreads = 256;
constexpr int kWideMaxGroups = 8;

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
 * and y), -Inf's bits past n: wide_load issues every group's loads before it
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

/* ---- the wide sampler (small batches) ---------------------------------------------- */

/* ingot_sample for one or two rows (B <= kWideMaxBatch, V >= kWideMinVocab)
 * without filter tensors, bias / ban lists or top-n outputs: the masked
 * step of a decode, cut as the wide softmax cuts its rows (wide_geometry)
 * over the whole GPU instead of one cluster, with the dense kernel's bits:
 * its masses are fixed-point sums of terms that depend only on their token,
 * and its draw is the exact largest key, lowest id on ties, so neither
 * depends on the cut. Two kernels chained by programmatic dependent launch:
 *   1. wide_sample_max: the chunk's argmax key, finite raw maximum and
 *      flags -> load[b]; the row's counter done[r] = 0;
 *   2. wide_sample_draw: loads its chunk BEFORE its wait (as wide_mass),
 *      then the row's argmax and raw maximum from load, L0 (the argmax
 *      token's noise), the chunk's final and raw masses and its best draw
 *      key -> draw[b]; the row's last block to finish (done[r]) adds up the
 *      row's and writes the token, the status and the log-probabilities. */
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

/* ---- the 16-bit softmax (batches) ------------------------------------------------ */

/* ingot_sampling_softmax of bf16 / f16 logits without bias / ban lists or
 * filter tensors, B > 2, in batches the dense kernel does not hold at once
 * or (any batch) for 61441 <= V <= 237568 (half_fits). The dense
 * kernel's shape (a cluster a row, the same C and chunk), but a block keeps
 * its chunk AS COPIED, 2 bytes a token instead of 4, and computes each
 * weight twice: in the exp pass for the fixed-point mass, again in the
 * write pass for p_i = w_i * fp32(1 / Z). With 256 threads a block (six a
 * SM: 34 KB a block at V = 262144) twice the dense kernel's rows are in
 * flight, which a write-bound batch needs more than the exps it saves
 * (B = 64, V = 262144: 42.7 -> 36.3 us; V = 151936: 32.8 -> 25.9).
 * Every w_i, group mass, total and p_i is softmax_finish's to the bit (the
 * same operations on the same values, groups of 4 tokens in token order),
 * so a row's probabilities do not depend on the kernel or the batch.
 * Thread t holds the units of 8 tokens (16 bytes of hv) at 8 (t + 256 k). */
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

/* ---- the kernel -------------------------------------------------------------------- */

/* Blocks per SM the registers must allow: three for the softmax and the
 * plain sample (64 KB rows at V = 262144, with 8 KB of candidate lists for
 * the sample: dense_scratch_len), two for the kernels with a selection
 * (their scratch holds a row of 16-bit keys; at 40 registers they spill). */
template <int kMode, int kDtype>
__global__ void __launch_bounds__(kDenseThreads, kMode <= kDenseSample ? 3 : 2)
    dense_kernel(const DenseArgs a) {
  constexpr ingot_dtype dtype = (ingot_dtype)kDtype;
  constexpr bool f32 = dtype == INGOT_DTYPE_F32;
  constexpr bool kSampling = kMode != kDenseSoftmax;
  /* kDenseSampleFilter draws every small row (top-k or nucleus) after the
   * second reduction, which gives a nucleus row's top-p total. The other
   * modes get no such row (a.small_k = 0); kDenseSampleTop keeps the small
   * top-k draw before that reduction, compiled in but never taken, as its
   * register allocation was measured with it. kDenseSample has no selection
   * code at all: its draw loop addresses shared memory by 32-bit addresses
   * of its own, without which ptxas rebuilt the window's address before
   * every access (docs/perf-notes.md, sessions 11, 13 and 14). */
  constexpr bool kNucleus = kMode == kDenseSampleFilter;
  /* dynamic shared memory (dense_smem_bytes): the block's values sv
   * [chunk] f32; scratch [dense_scratch_len] u16, the draw's candidates or
   * the small top-k's keys; the bitmask words [chunk / 32] */
  extern __shared__ float4 dense_smem[];
  float *sv = reinterpret_cast<float *>(dense_smem);
  uint16_t *scratch = reinterpret_cast<uint16_t *>(sv + a.chunk);
  uint16_t *cand = scratch;
  uint32_t *swords = reinterpret_cast<uint32_t *>(scratch + dense_scratch_len(kMode, a.chunk));
  __shared__ ReduceSpace reduce_space;
  __shared__ SmallKShared small_sh;

  const ingot_sampling_input &in = a.in;
  const BlockPart part = block_part(a);
  const int64_t r = part.r, lo = part.lo;
  const int n = part.n;
  const unsigned crank = part.rank;
  const int lane = lane_id(), warp = warp_id();
  const int region = a.chunk / kDenseWarps; /* tokens of a warp, a multiple of 32 */
  const int wlo = warp * region;
  const int wend = wlo + region;
  /* 16-bit logits are copied IN PLACE: token j (of this warp's window) at
   * stage16[j], the upper half of the window's bytes in sv. Converting a
   * group at offset o of the window overwrites the staged groups near 2 o -
   * region, below o: pass 1 reads a round of groups, waits for the warp
   * (__syncwarp), then stores them, so every group it overwrites has been
   * read (in this round or an earlier one). */
  const uint16_t *stage16 = reinterpret_cast<const uint16_t *>(sv) + wlo + region;
  const bool rank0 = crank == 0;
  constexpr size_t esize = f32 ? 4 : 2;
  const void *row =
      static_cast<const char *>(in.logits) + (size_t)(r * in.logits_stride + lo) * esize;
  const bool vec = (reinterpret_cast<uintptr_t>(row) & (esize == 4 ? 15u : 7u)) == 0;
  /* tokens below jfull come from the shared-memory copy (whole groups of 4) */
  const int jfull = vec ? (n & ~3) : 0;
  /* top-n outputs (ingot_sample rows without a filter, n <= small k): of the
   * final distribution (the masked values in sv), or of the raw one (the
   * logits as given, read again) */
  const bool top_final = (a.out.flags & INGOT_SAMPLING_TOP_FINAL) != 0;
  const bool want_top = kMode == kDenseSampleTop && a.out.num_top > 0;
  const bool want_raw = kSampling && (a.out.token_raw_logprob || (want_top && !top_final));
  const bool want_mass = a.out.token_logprob || (want_top && top_final);
  const uint32_t *words = in.allowed ? in.allowed + r * in.allowed_stride + (lo >> 5) : nullptr;
  /* Everything above reads only the kernel's parameters, which the previous
   * kernel does not write: computed before the wait, their constant-cache
   * misses overlap that kernel's tail. */
  ReduceSpace &space = reduce_space;
  if (threadIdx.x == 0) {
    reduce_init(&space.bar[0], kSampling ? sizeof(LoadStats) : sizeof(ArgmaxStats));
    reduce_init(&space.bar[1], kSampling ? sizeof(DrawStats) : sizeof(unsigned long long));
  }
  reduce_ready();
  wait_for_previous_grid();

  /* a row of the general kernel's (filter tensors given): decided before
   * anything is loaded, the whole cluster alike */
  if (a.split && !row_for_dense(a, r, kSampling)) return;

  /* ---- 1. load, bias, bans, NaN / bitmask; argmax, flags, raw stats ---- */
  /* Every 16-byte (f32) / 8-byte (16-bit) group of the block's logits and
   * its bitmask words are copied to shared memory asynchronously, all in
   * flight at once, and the row's parameters are loaded meanwhile; a thread
   * later reads only the groups it copied (no barrier for those), and the
   * words after the block barrier. Unaligned rows and the row's last
   * partial group are loaded directly. */
  const int jcopy = min(wend, jfull);
#pragma unroll 4
  for (int j = wlo + 4 * lane; j < jcopy; j += 128) {
    if (f32)
      cp_async<16>(sv + j, static_cast<const float *>(row) + j);
    else
      cp_async<8>(const_cast<uint16_t *>(stage16) + j, static_cast<const uint16_t *>(row) + j);
  }
  if (words)
    for (int w = threadIdx.x; w < (n + 31) / 32; w += kDenseThreads)
      cp_async<4>(swords + w, words + w);
  asm volatile("cp.async.commit_group;" ::: "memory");
  const float T = in.temperature ? in.temperature[r] : 1.0f;
  const uint64_t seed = kSampling && in.seed ? in.seed[r] : 0;
  const uint64_t position = kSampling && in.position ? in.position[r] : 0;
  /* a row with a filter here has a small top-k, or none (a nucleus row:
   * top-p / min-p decided in the top-small_k set), row_for_dense */
  const int32_t top_k = kSampling && in.top_k ? in.top_k[r] : 0;
  const float top_p = kSampling && in.top_p ? in.top_p[r] : 1.0f;
  const float min_p = kSampling && in.min_p ? in.min_p[r] : 0.0f;
  const bool small = kSampling && !params_plain(top_k, top_p, min_p, in.vocab);
  const bool nucleus = kNucleus && small && params_nucleus(top_k, top_p, min_p, in.vocab);
  asm volatile("cp.async.wait_all;" ::: "memory");
  if (ingot_sampling_params_check(T, 0, 1.0f, 0.0f) != 0) {
    write_bad_parameter_row(a, kSampling, r, lo, n);
    return; /* uniform over the cluster: nothing was exchanged */
  }
  const Divisor raw_t = divisor_of(T > 0.0f ? T : 1.0f);
  __syncthreads();
  const bool lists = in.num_bias > 0 || in.num_banned > 0;
  uint32_t flags = 0;
  float rm = -INFINITY; /* the thread's finite raw maximum */
  float bm = -INFINITY;
  int bj = 0;
  bool nan = false;
  /* What pass 1 leaves in sv: the masked values (bitmask and finite rule),
   * or, where the raw distribution is wanted, the values before the
   * bitmask (finite rule, bias and bans), from which pass 2 sums it before
   * it writes the masked values back. f32 logits without lists stay as
   * loaded where nothing is masked in place (finite, or the thread masks
   * its groups again below). */
  const bool hold_raw = kSampling && want_raw;
  const bool in_place = !f32 || lists || (words && !hold_raw);
  /* a list entry changed a token of this block (block-uniform): pass 2
   * reads the raw logits again for the raw distribution */
  bool listed = false;
  bool redo = false;
  /* (under with_fast, as when pass 1 summed the raw distribution: the code
   * the softmax was measured with, 49.9 us at B = 64 in session 24 as before) */
  with_fast(raw_t.fast, [&](auto) {
    if (lists) {
      /* the lists touch any token: the raw logits as fp32 first (16-bit
       * ones in rounds of the warp: see stage16) */
      const int jround = f32 ? wlo + 4 * lane : wlo; /* f32: each thread its own groups */
      for (int j0 = jround; j0 < wend; j0 += 128) {
        const int j = f32 ? j0 : j0 + 4 * lane;
        float x[4];
        if (j < wend) fetch4(dtype, row, sv, stage16, j < jfull, j, n, x);
        if (!f32) __syncwarp();
        if (j >= wend) continue;
        rm = fmaxf(rm, finite_max4(x));
        *reinterpret_cast<float4 *>(sv + j) = make_float4(x[0], x[1], x[2], x[3]);
      }
      __syncthreads();
      bool changed = false;
      flags = apply_lists(in, r, lo, n, sv, kSampling ? &changed : nullptr);
      if (kSampling)
        listed = __syncthreads_or(changed) != 0;
      else
        __syncthreads();
    }
    int j = wlo + 4 * lane;
    if (!lists) {
      /* the groups of the shared-memory copy: the lean loop. `seen`, the
       * NaN-propagating maximum of the raw values, is not below +Inf iff a
       * NaN or +Inf was among them; then the thread's groups are masked
       * again by the exact rule (rare); otherwise it is the thread's
       * finite raw maximum */
      const int jend = min(wend, jfull);
      float seen = -INFINITY;
      const auto group = [&](float x[4]) { /* all but the store */
        seen = max_nan(seen, max_nan(max_nan(x[0], x[1]), max_nan(x[2], x[3])));
        float xm[4] = {x[0], x[1], x[2], x[3]};
        if (words) allow4(x, swords[j >> 5] >> (j & 31), xm); /* j < n here */
        track4(xm, j, bm, bj);
        if (!hold_raw)
#pragma unroll
          for (int e = 0; e < 4; e++) x[e] = xm[e];
      };
      if (f32) {
        for (; j < jend; j += 128) {
          const float4 q = *reinterpret_cast<const float4 *>(sv + j);
          float x[4] = {q.x, q.y, q.z, q.w};
          group(x);
          if (in_place) *reinterpret_cast<float4 *>(sv + j) = make_float4(x[0], x[1], x[2], x[3]);
        }
      } else { /* in rounds of the warp (see stage16); j stops at its first group >= jend */
        for (int j0 = wlo; j0 < jend; j0 += 128) {
          const bool mine = j < jend;
          float x[4];
          if (mine) fetch4(dtype, row, sv, stage16, true, j, n, x);
          __syncwarp();
          if (!mine) continue;
          group(x);
          *reinterpret_cast<float4 *>(sv + j) = make_float4(x[0], x[1], x[2], x[3]);
          j += 128;
        }
      }
      redo = !(seen < INFINITY);
      rm = seen;
    }
    for (; j < wend; j += 128) { /* the lists' rows, unaligned rows, the row's end */
      float x[4];
      if (lists) {
        const float4 q = *reinterpret_cast<const float4 *>(sv + j);
        x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
      } else {
        fetch4(dtype, row, sv, stage16, j < jfull, j, n, x);
        if (kSampling) rm = fmaxf(rm, finite_max4(x));
      }
      const uint32_t bits = bits4(swords, words, j, n);
      mask4(x, hold_raw ? 0xfu : bits, nan);
      if (hold_raw) {
        float xm[4];
        allow4(x, bits, xm);
        track4(xm, j, bm, bj);
      } else {
        track4(x, j, bm, bj);
      }
      *reinterpret_cast<float4 *>(sv + j) = make_float4(x[0], x[1], x[2], x[3]);
    }
  });
  if (redo) { /* sv holds the values (the softmax's allowed or -Inf): only the finite ones stay */
    nan = true;
    bm = rm = -INFINITY;
    for (int j = wlo + 4 * lane; j < wend; j += 128) {
      float4 *q = reinterpret_cast<float4 *>(sv + j);
      float x[4] = {q->x, q->y, q->z, q->w};
      mask4(x, 0xfu, nan);
      if (hold_raw) {
        rm = fmaxf(rm, fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3])));
        float xm[4];
        allow4(x, bits4(swords, words, j, n), xm);
        track4(xm, j, bm, bj);
      } else {
        track4(x, j, bm, bj);
      }
      *q = make_float4(x[0], x[1], x[2], x[3]);
    }
  }
  if (nan) flags |= INGOT_SAMPLING_ROW_NAN;
  /* sv holds this thread's values (it wrote or re-masked its groups) */
  const int bi =
      bm > -INFINITY ? first_token(sv, bj, bm, hold_raw ? bits4(swords, words, bj, n) : 0xfu)
                     : 0;
  LoadStats mine;
  mine.best = bm > -INFINITY ? best_key(bm, (int32_t)(lo + bi)) : 0ull;
  mine.raw_max = rm;
  mine.l0 = 0.0f;
  mine.flags = flags;
  const LoadStats identity1 = {0ull, -INFINITY, 0.0f, 0u};
  /* the argmax token's key, for a soft row's draw: s = 0, so the key is its
   * noise exactly; once a block, by warp 0 (the other warps wait anyway) */
  const bool draws = kSampling && T > 0.0f && !small;
  const auto noise_of_argmax = [&](LoadStats v) {
    if (draws && v.best != 0)
      v.l0 = ingot_sampling_ref_gumbel(seed, position, (uint32_t)best_id(v.best));
    return v;
  };
  cluster_wait(); /* reduce_ready's: every block of the cluster runs */
  LoadStats *const load_part = reinterpret_cast<LoadStats *>(space.a);
  LoadStats *const load_inbox = reinterpret_cast<LoadStats *>(space.b);
  if (kMode == kDenseSoftmax) {
    const ArgmaxStats st = cluster_reduce(
        ArgmaxStats{mine.best, flags, 0u}, ArgmaxStats{0ull, 0u, 0u}, ReduceArgmax{},
        reinterpret_cast<ArgmaxStats *>(space.a), reinterpret_cast<ArgmaxStats *>(space.b),
        &space.bar[0]);
    softmax_finish(a, r, lo, n, wlo, wend, T, raw_t, st, space, sv);
    return;
  }
  const LoadStats st =
      cluster_reduce(mine, identity1, ReduceLoad{}, load_part, load_inbox, &space.bar[0],
                     reinterpret_cast<LoadStats *>(space.result), noise_of_argmax);
  flags = st.flags;
  const bool empty = st.best == 0;
  if (empty) flags |= INGOT_SAMPLING_ROW_EMPTY;
  const float m = empty ? 0.0f : best_value(st.best);
  const int32_t argmax = empty ? -1 : best_id(st.best);

  /* ---- 2. the draw and the mass ---- */
  /* s_i = (l_i - m) / T is computed where it is used: by `scaled` for
   * masses and the draw's filters, by div_exact (the CPU's bits) for the
   * draw keys and the drawn token. Masses are fixed-point sums of terms
   * that each depend only on their token, so a row's are the same however
   * it is cut. Where the raw distribution is wanted, sv holds the values
   * before the bitmask (pass 1): `prep` sums it from them and writes the
   * masked values back, which the later steps read. */
  const bool soft = !empty && T > 0.0f;
  unsigned long long mass_fx = 0, raw_fx = 0;
  double mass = 0.0, raw_sum = 0.0;
  int32_t token = argmax; /* greedy, or -1 */
  const Divisor &div_t = raw_t; /* only soft rows divide: T > 0 */
  unsigned long long best = 0ull;
  /* without a bitmask or lists the raw distribution is the final one (the
   * same values and maximum), whose mass the draw loop sums anyway */
  const bool raw_same = soft && !small && !words && !lists;
  const bool raw_terms = want_raw && st.raw_max > -INFINITY && !raw_same;
  /* f32 rows of kDenseSample sum it and apply the bitmask in the draw
   * loop instead (B = 64 LLM-like: 71.5 -> 70.6 us); the 16-bit kernels
   * spilled there (bf16: 73.8 us) */
  const bool fused = kMode == kDenseSample && f32 && soft;
  const bool loop_raw = fused && raw_terms && !listed;
  const bool loop_words = fused && hold_raw && words;
  /* (only soft rows read masked values after this) */
  const bool write_masked = hold_raw && words && soft && !fused;
  if ((raw_terms && !loop_raw) || write_masked) { /* prep */
    with_fast(raw_t.fast, [&](auto fast) {
      constexpr bool kFast = decltype(fast)::value;
      for (int j = wlo + 4 * lane; j < wend; j += 128) {
        float4 *q = reinterpret_cast<float4 *>(sv + j);
        float x[4] = {q->x, q->y, q->z, q->w};
        if (raw_terms) {
          /* the raw logits: sv's, or read again where a list entry changed
           * one of the block's tokens (block-uniform) */
          float xr[4] = {x[0], x[1], x[2], x[3]};
          if (listed) {
            load4(row, dtype, vec, j, n, xr);
            finite4(xr, xr);
          }
          raw_fx += raw_fixed4<kFast>(xr, st.raw_max, raw_t);
        }
        if (write_masked) {
          allow4(x, bits4(swords, words, j, n), x);
          *q = make_float4(x[0], x[1], x[2], x[3]);
        }
      }
    });
  }
  if (kMode != kDenseSample && soft && small && !kNucleus) {
    small_k_draw(sv, reinterpret_cast<unsigned long long *>(scratch), small_sh, lo, wlo, wend, m,
                 div_t, top_k, top_p, min_p, seed, position, 0.0, bm, bi);
  } else if (soft && nucleus) { /* the row's mass, for top-p's total */
    with_fast(div_t.fast, [&](auto fast) {
      constexpr bool kFast = decltype(fast)::value;
      for (int j = wlo + 4 * lane; j < wend; j += 128) {
        const float4 q = *reinterpret_cast<const float4 *>(sv + j);
        const float x[4] = {q.x, q.y, q.z, q.w};
        float sc[4];
        scale4<kFast>(x, m, div_t, sc);
        mass_fx += exp_fixed4(sc);
      }
    });
  } else if (soft && !small) {
    const float l0 = st.l0;
    const float cut = __fsub_rn(__fsub_rn(l0, kGumbelMax), kApproxSlack);
    /* this warp's candidates (offsets in the block): kCandCap of them in
     * kDenseSample (so that three blocks fit a SM), drawn in segments; as
     * many as its tokens in the other modes, whose scratch has room for them
     * (segments cost their register allocation spills) */
    constexpr bool kSegments = kMode == kDenseSample;
    uint16_t *wcand = cand + (kSegments ? warp * kCandCap : wlo);
    /* shared-space addresses, computed once and opaque to the compiler,
     * which otherwise recomputes the generic-to-shared conversion (cluster
     * id and all) at every access of the loop below */
    uint32_t sv_s = smem_u32(sv);
    uint32_t wcand_s = smem_u32(wcand);
    uint32_t swords_s = smem_u32(swords);
    asm("" : "+r"(sv_s), "+r"(wcand_s), "+r"(swords_s));
    float best_k = -INFINITY;
    int32_t best_tok = INT_MAX;
    /* the final mass, and the raw one where they are the same */
    const bool sum_final = want_mass || (want_raw && raw_same);
    /* where the row's maximum equals its raw one (the raw argmax is allowed,
     * or a bias made another token reach it), a token's two terms are one
     * e^((x - m) / T): the raw sum's for every token, the final mass's for
     * an allowed one (the final mass is summed here even in a call that
     * wants only the raw log-probability: unread, some work wasted there) */
    const bool one_exp = loop_raw && m == st.raw_max;
    with_fast(div_t.fast, [&](auto fast) {
      constexpr bool kFast = decltype(fast)::value;
      /* one candidate: its approximate key first, the exact one only near the best */
      const auto consider = [&](int j, float u) {
        const float d = __fsub_rn(sv[j], m);
        const int32_t id = (int32_t)(lo + j);
        /* `scaled` is exact here but for |s| tiny or huge, far below the slack */
        const float approx = __fadd_rn(scaled<kFast>(d, div_t), gumbel_approx(u));
        if (approx < __fsub_rn(fmaxf(l0, best_k), kApproxSlack)) return;
        const float key = __fadd_rn(div_exact(d, div_t), ingot_sampling_ref_gumbel_of(u));
        if (key > best_k || (key == best_k && id < best_tok)) {
          best_k = key;
          best_tok = id;
        }
      };
      int count = 0; /* warp-uniform: listed, not yet drawn */
      const unsigned below = (1u << lane) - 1u;
      /* the warp's tokens in segments: list candidates while a further
       * group of 128 surely fits, then draw the whole rounds of 64 (all of
       * them after the last group); the rest waits for the next segment */
      for (int j0 = wlo;;) {
        for (; j0 < wend && (!kSegments || count <= kCandCap - 128); j0 += 128) {
          const int j = j0 + 4 * lane;
          unsigned c = 0; /* bit e: token j + e is a candidate */
          if (j < wend) {
            float x[4];
            asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                         : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3])
                         : "r"(sv_s + 4u * (uint32_t)j)
                         : "memory");
            uint32_t bits = 0xfu;
            if (loop_words) { /* past n: -Inf either way (the words cover the chunk) */
              uint32_t word;
              asm volatile("ld.shared.u32 %0, [%1];"
                           : "=r"(word)
                           : "r"(swords_s + 4u * (uint32_t)(j >> 5))
                           : "memory");
              bits = word >> (j & 31);
            }
            float sc[4];
            if (one_exp) {
              /* raw_fixed4's terms, and an allowed token's final term is its
               * raw one: the same bits as below, one exp a token */
              scale4<kFast>(x, m, div_t, sc);
              float wr[4], wf[4];
#pragma unroll
              for (int e = 0; e < 4; e++) {
                wr[e] = fast_exp(sc[e]);
                const bool allowed = (bits >> e) & 1u;
                wf[e] = allowed ? wr[e] : 0.0f;
                c |= (allowed && sc[e] >= cut ? 1u : 0u) << e;
              }
              raw_fx += fixed_mass(wr);
              mass_fx += fixed_mass(wf);
            } else {
              if (loop_raw) raw_fx += raw_fixed4<kFast>(x, st.raw_max, raw_t);
              if (loop_words) allow4(x, bits, x);
              scale4<kFast>(x, m, div_t, sc);
#pragma unroll
              for (int e = 0; e < 4; e++) c |= (sc[e] >= cut ? 1u : 0u) << e;
              if (sum_final) mass_fx += exp_fixed4(sc);
            }
          }
          /* compaction: this thread's count (0-4) by its three bits, one ballot
           * each; nothing to do where the warp has no candidate (most groups of
           * a language model's logits) */
          if (__ballot_sync(0xffffffffu, c != 0) == 0) continue;
          const unsigned k = __popc(c);
          const unsigned b0 = __ballot_sync(0xffffffffu, k & 1u);
          const unsigned b1 = __ballot_sync(0xffffffffu, k & 2u);
          const unsigned b2 = __ballot_sync(0xffffffffu, k & 4u);
          int at = count + __popc(b0 & below) + 2 * __popc(b1 & below) + 4 * __popc(b2 & below);
#pragma unroll
          for (int e = 0; e < 4; e++)
            if (c & (1u << e)) {
              asm volatile("st.shared.u16 [%0], %1;" ::"r"(wcand_s + 2u * (uint32_t)at),
                           "h"((uint16_t)(j + e))
                           : "memory");
              at++;
            }
          count += __popc(b0) + 2 * __popc(b1) + 4 * __popc(b2);
        }
        __syncwarp();
        const bool last = !kSegments || j0 >= wend;
        const int take = last ? count : count & ~63;
        /* two candidates a lane at a time: their generator calls are two
         * independent chains of dependent multiplies, which the scheduler
         * interleaves (the best key does not depend on the order); a lane
         * without a second one repeats the first call, unused */
        for (int i = lane; i < take; i += 64) {
          const bool two = i + 32 < take;
          const int ja = wcand[i], jb = two ? wcand[i + 32] : ja;
          /* an opaque copy: the generator's first products of the position,
           * hoisted out of this loop, would be spilled at 64 registers */
          uint64_t pos = position;
          asm volatile("" : "+l"(pos));
          const float u0 = ingot_sampling_ref_uniform(seed, pos, (uint32_t)(lo + ja));
          const float u1 = ingot_sampling_ref_uniform(seed, pos, (uint32_t)(lo + jb));
          consider(ja, u0);
          if (two) consider(jb, u1);
        }
        if (last) break;
        /* the rest (fewer than 64) to the list's front */
        const int rest = count - take;
        const uint16_t c0 = lane < rest ? wcand[take + lane] : 0;
        const uint16_t c1 = lane + 32 < rest ? wcand[take + lane + 32] : 0;
        __syncwarp();
        if (lane < rest) wcand[lane] = c0;
        if (lane + 32 < rest) wcand[lane + 32] = c1;
        __syncwarp();
        count = rest;
      }
    });
    if (best_k > -INFINITY) best = best_key(best_k, best_tok);
    if (want_raw && raw_same) raw_fx = mass_fx;
  }
  /* The second reduction: the draw's best key, the final mass (a nucleus
   * row's is top-p's total), the raw sum. */
  const bool second = (soft && (!small || nucleus)) || want_raw; /* row-uniform */
  /* the top-n set by small_k_select: the final distribution's of a soft row
   * (a greedy row's is one-hot, an empty row's empty), the raw one's of a
   * row with a finite logit (masks do not empty it) */
  const bool select_top =
      want_top && (top_final ? soft : st.raw_max > -INFINITY); /* row-uniform */
  const bool small_draw = soft && small;
  const bool draw_late = kNucleus && small_draw; /* after the reduction */
  bool handed_off = false; /* row-uniform */
  if (second) {
    DrawStats d;
    d.mass = mass_fx;
    d.raw_sum = raw_fx;
    d.best = best;
    const DrawStats identity2 = {0ull, 0ull, 0ull};
    const DrawStats fin =
        cluster_reduce(d, identity2, ReduceDraw{}, reinterpret_cast<DrawStats *>(space.b),
                       reinterpret_cast<DrawStats *>(space.a), &space.bar[1]);
    mass = mass_value(fin.mass);
    raw_sum = mass_value(fin.raw_sum);
    /* K's mass is at most small_k (every w <= 1): past that, top-p cannot
     * be reached in K, and without min-p nothing else cuts F there */
    handed_off = soft && nucleus && min_p == 0.0f && (double)top_p * mass > (double)a.small_k;
    if (soft && !small) token = best_id(fin.best);
  }
  if (draw_late && !handed_off) /* k = small_k and the row's mass for a nucleus row */
    small_k_draw(sv, reinterpret_cast<unsigned long long *>(scratch), small_sh, lo, wlo, wend, m,
                 div_t, nucleus ? a.small_k : top_k, top_p, min_p, seed, position,
                 nucleus ? mass : 0.0, bm, bi);
  /* block 0's thread 0 (of warp 0, which ran the last step) writes the outputs */
  if (small_draw)
    token = handed_off ? kHandOffToken : rank0 && threadIdx.x == 0 ? small_sh.token : -1;
  /* the general kernel takes a handed-off row and writes all its outputs */
  handed_off = kNucleus && token == kHandOffToken;

  /* ---- 3. outputs ---- */
  if (rank0 && threadIdx.x == 0 && a.row_status && !handed_off) a.row_status[r] = flags;
  const ingot_sampling_output &o = a.out;
  if (rank0 && threadIdx.x == 0) {
    o.tokens[r] = token;
    if (token < 0 && !handed_off) {
      if (o.token_logprob) o.token_logprob[r] = -INFINITY;
      if (o.token_raw_logprob) o.token_raw_logprob[r] = -INFINITY;
    }
  }
  /* the block holding the token writes its log-probabilities; block 0 for
   * a small top-k (it alone knows the token, and its sv is scratch now) */
  if (token >= 0 && threadIdx.x == 0 &&
      (small_draw ? rank0 : token >= lo && token < lo + n)) {
    if (o.token_logprob)
      o.token_logprob[r] =
          small_draw ? small_sh.logprob
          : T > 0.0f ? (float)((double)div_exact(__fsub_rn(sv[token - lo], m), div_t) - log(mass))
                     : 0.0f;
    if (o.token_raw_logprob) {
      /* the drawn token is allowed, so its raw logit is finite, and sv holds
       * it unless a bias changed it (a small top-k draw overwrote sv) */
      const float x = lists || small_draw ? ingot_sampling_load(row, dtype, token - lo)
                                          : sv[token - lo];
      const float v = div_exact(__fsub_rn(x, st.raw_max), raw_t);
      o.token_raw_logprob[r] = (float)((double)v - log(raw_sum));
    }
  }
  if (want_top) {
    if (select_top) {
      /* sv is scratch once thread 0 has read the drawn token's value above */
      __syncthreads();
      /* the raw values: sv's own where nothing masked or changed a token */
      const bool reread = !top_final && (words || lists);
      small_k_select(sv, reinterpret_cast<unsigned long long *>(scratch), small_sh, lo, wlo,
                     wend, top_final ? m : st.raw_max, raw_t, (int)a.out.num_top, false, 0, 0, bm,
                     bi, reread ? row : nullptr, dtype, n);
      const double log_z = log(top_final ? mass : raw_sum);
      if (rank0)
        for (int j = threadIdx.x; j < (int)a.out.num_top; j += kDenseThreads) {
          const unsigned long long x = small_sh.top[j];
          if (o.top_ids) o.top_ids[r * o.top_ids_stride + j] = x ? best_id(x) : -1;
          if (o.top_logprobs)
            o.top_logprobs[r * o.top_logprobs_stride + j] =
                x ? (float)((double)small_sh.s[j] - log_z) : -INFINITY;
        }
    } else {
      write_empty_top(o, r, rank0);
      const bool one_hot = top_final && token >= 0; /* a greedy row's final list */
      if (rank0 && threadIdx.x == 0 && one_hot && o.top_ids)
        o.top_ids[r * o.top_ids_stride] = token;
      if (rank0 && threadIdx.x == 0 && one_hot && o.top_logprobs)
        o.top_logprobs[r * o.top_logprobs_stride] = 0.0f;
    }
  }
  /* block 0 reads the other blocks' lists of a small top-k draw or top-n
   * selection until it is done; otherwise no block reads another's shared
   * memory, and each leaves when done */
  if (small_draw || select_top) {
    cluster_arrive_relaxed();
    cluster_wait();
  }
}

/* The kernel's dynamic shared memory (its layout is in the kernel). */
size_t dense_smem_bytes(int mode, int chunk) {
  return (size_t)chunk * 4 + (size_t)dense_scratch_len(mode, chunk) * 2 + (size_t)chunk / 8;
}

}  // namespace

/* ---- host side ---------------------------------------------------------------------- */

namespace {

typedef void (*DenseKernel)(const DenseArgs);

template <int kMode>
DenseKernel dense_kernel_for(ingot_dtype dtype) {
  switch (dtype) {
    case INGOT_DTYPE_BF16: return dense_kernel<kMode, INGOT_DTYPE_BF16>;
    case INGOT_DTYPE_F16: return dense_kernel<kMode, INGOT_DTYPE_F16>;
    default: return dense_kernel<kMode, INGOT_DTYPE_F32>;
  }
}

const ingot_dtype kDenseDtypes[3] = {INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16};

typedef void (*HalfKernel)(const DenseArgs);

HalfKernel half_kernel_for(ingot_dtype dtype) {
  return dtype == INGOT_DTYPE_BF16 ? half_softmax<INGOT_DTYPE_BF16> : half_softmax<INGOT_DTYPE_F16>;
}

/* Every instantiation (four modes, three dtypes). */
DenseKernel dense_kernel_of(int index) {
  const ingot_dtype d = kDenseDtypes[index % 3];
  switch (index / 3) {
    case 0: return dense_kernel_for<kDenseSoftmax>(d);
    case 1: return dense_kernel_for<kDenseSample>(d);
    case 2: return dense_kernel_for<kDenseSampleTop>(d);
    default: return dense_kernel_for<kDenseSampleFilter>(d);
  }
}
constexpr int kDenseKernels = 12;

/* Sets an attribute on every instantiation. */
cudaError_t set_dense_attribute(cudaFuncAttribute attr, int value) {
  for (int i = 0; i < kDenseKernels; i++) {
    const cudaError_t e = cudaFuncSetAttribute(dense_kernel_of(i), attr, value);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

/* Whether the 16-bit softmax kernels launch the dense kernel's clusters
 * with the dense kernel's shared memory limit (its chunks are never
 * larger). */
bool half_init(const struct ingot_context *ctx) {
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

}  // namespace

/* Per-context set-up: the dynamic shared memory limit of the dense kernels
 * and the cluster size they use (16 where the device co-schedules it, 8,
 * ...; 1 before sm_90 or without sm_90 code). Never fails the context: the
 * general kernel then serves every call. */
extern "C" void ingot_cuda_sampling_dense_init(struct ingot_context *ctx) {
  ctx->cuda->sampling.dense_cluster = 0;
  ctx->cuda->sampling.dense_smem = 0;
  ctx->cuda->sampling.half = 0;
  /* the limit and the cluster size hold for every kernel: those of the one
   * with the most static shared memory */
  cudaFuncAttributes fa = {}, each;
  DenseKernel largest = dense_kernel_of(0);
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < kDenseKernels && e == cudaSuccess; i++) {
    e = cudaFuncGetAttributes(&each, dense_kernel_of(i));
    if (e == cudaSuccess && (i == 0 || each.sharedSizeBytes > fa.sharedSizeBytes))
      fa = each, largest = dense_kernel_of(i);
  }
  const int limit = e == cudaSuccess ? ctx->cuda->smem_optin - (int)fa.sharedSizeBytes - 1024 : 0;
  if (e == cudaSuccess && limit > 0)
    e = set_dense_attribute(cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  if (e != cudaSuccess || limit <= 0) {
    cudaGetLastError();
    return;
  }
  ctx->cuda->sampling.dense_smem = limit;
  ctx->cuda->sampling.dense_cluster = 1;
  if (ctx->cc_major >= 9 && fa.ptxVersion >= 90) {
    const bool nonportable =
        set_dense_attribute(cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    cudaGetLastError();
    ctx->cuda->sampling.dense_cluster =
        largest_cluster(largest, kDenseThreads, (size_t)limit, nonportable);
  }
  ctx->cuda->sampling.half = half_init(ctx);
}

namespace {

/* Blocks per row and tokens per block: a function of V and the device only
 * (the sums' order, so the results, must not depend on the batch). */
void dense_geometry(const struct ingot_context *ctx, int64_t vocab, int *cluster, int *chunk) {
  int64_t c = (vocab + kMinTokensPerBlock - 1) / kMinTokensPerBlock;
  if (c > ctx->cuda->sampling.dense_cluster) c = ctx->cuda->sampling.dense_cluster;
  if (c < 1) c = 1;
  const int64_t per = (vocab + c - 1) / c;
  const int64_t ch = (per + kChunkUnit - 1) / kChunkUnit * kChunkUnit;
  *cluster = (int)c;
  *chunk = ch > INT_MAX ? INT_MAX : (int)ch;
}

bool dense_fits(const struct ingot_context *ctx, const ingot_sampling_input *in, int mode) {
  if (ctx->cuda->sampling.dense_cluster < 1) return false;
  int c, chunk;
  dense_geometry(ctx, in->vocab, &c, &chunk);
  return chunk <= 65536 &&
         dense_smem_bytes(mode, chunk) <= (size_t)ctx->cuda->sampling.dense_smem &&
         in->batch * c <= INT_MAX;
}

/* Measured on the H200 at V = 151936 (dev/cuda/wave_probe.c, one call a
 * graph): the wide path 7.36 / 7.71 / 8.83 us at B = 1 / 2 / 4 against the
 * dense kernel's 7.84, so it takes B <= 2 only. */
constexpr int64_t kWideMaxBatch = 2;
constexpr int64_t kWideMinVocab = 32768;

/* Chunks up to this many tokens of 16-block rows take the 16-bit softmax in
 * any batch. */
constexpr int kHalfAnyBatchChunk = 14848;

/* Whether a softmax call the dense kernel takes whole (no filter tensors;
 * c blocks a row of `chunk` tokens) goes to the 16-bit softmax instead:
 * 16-bit logits, no lists, B > kWideMaxBatch (as the wide softmax's calls,
 * tried first, are), and more blocks than the dense kernel runs at once
 * (three a SM), or 16 blocks a row of at most kHalfAnyBatchChunk tokens
 * (61441 <= V <= 237568 where the device runs 16-block clusters). In a
 * batch that fits at once the 16-bit kernel's two exp passes over 2 chunk /
 * 512 tokens a thread cost more as the chunk grows, the dense kernel's
 * passes much less: at V = 262144 B = 8
 * the dense kernel took 12.6 us against 13.8, at V = 151936 9.8 against 9.0
 * (H200, one call a graph, dev/cuda/wave_probe.c; docs/sampling.md has the
 * V x B table). Fewer than 16 blocks a row lost (V = 32771, 9 blocks: 7.8
 * against 8.6 at B = 8; not understood). From B = 25 on the 16-bit kernel
 * wins at every V measured (B = 64, V = 262144: 45.5 against 39.5). */
bool half_fits(const struct ingot_context *ctx, const ingot_sampling_input *in, int c,
               int chunk) {
  return ctx->cuda->sampling.half && in->dtype != INGOT_DTYPE_F32 && in->num_bias == 0 &&
         in->num_banned == 0 && in->batch > kWideMaxBatch &&
         ((c == (int)kMaxCluster && chunk <= kHalfAnyBatchChunk) ||
          in->batch * c > 3 * (int64_t)ctx->sm_count);
}

/* The kernel of an ingot_sample call (their shared memory differs). */
int dense_sample_mode(int64_t num_top, int small_k) {
  return num_top > 0 ? kDenseSampleTop : small_k > 0 ? kDenseSampleFilter : kDenseSample;
}

template <int kMode>
ingot_status dense_launch(struct ingot_context *ctx, const char *op, DenseArgs &args,
                          cudaStream_t stream) {
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  int c, chunk;
  dense_geometry(ctx, args.in.vocab, &c, &chunk);
  args.chunk = chunk;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  cluster_launch_config(&cfg, attr, (unsigned)(args.in.batch * c), kDenseThreads,
                        dense_smem_bytes(kMode, chunk), stream, c > 1 ? c : 0,
                        ctx->cuda->sampling.pdl != 0);
  INGOT_CUDA_TRY(ctx, op,
                 cudaLaunchKernelEx(&cfg, dense_kernel_for<kMode>(args.in.dtype), args));
  return ingot_cuda_check_launch(ctx, op);
}

}  // namespace

int ingot_cuda_sampling_dense_small_k(const struct ingot_context *ctx,
                                      const ingot_sampling_input *in) {
  int c, chunk;
  dense_geometry(ctx, in->vocab, &c, &chunk);
  /* small_k_draw's buffers: the C lists of k keys in the block's scratch (chunk
   * * 2 bytes); in its second pass at most k threads hold candidates, each
   * at most 4 per 128 tokens of its warp's region, which the stage (chunk /
   * 4 keys) and block 0's sv (chunk / 2) must hold. The largest k (a power of
   * 2 up to kSmallK) for which both bounds hold: 64 from V > 512 on. */
  const int64_t region = chunk / kDenseWarps, per_thread = 4 * ((region + 127) / 128);
  for (int k = kSmallK; k >= 1; k >>= 1)
    if (k * per_thread <= chunk / 4 && (int64_t)chunk * 2 >= (int64_t)c * k * 8) return k;
  return 0;
}

int ingot_cuda_sampling_dense_mode(const struct ingot_context *ctx,
                                   const ingot_sampling_input *in, int64_t num_top, int softmax) {
  const bool filters = in->top_k || in->top_p || in->min_p;
  const int small_k = ingot_cuda_sampling_dense_small_k(ctx, in);
  /* the kernel ingot_cuda_sample_dense will launch (small_k as ingot_cuda_sample passes it) */
  const int mode =
      softmax ? kDenseSoftmax : dense_sample_mode(num_top, filters && num_top == 0 ? small_k : 0);
  if (!dense_fits(ctx, in, mode)) return 0;
  /* the top-n of a row without a filter is found as a small top-k set */
  if (num_top > small_k) return 0;
  return filters ? 2 : 1;
}

extern "C" int ingot_cuda_sampling_dense_blocks_per_sm(const struct ingot_context *ctx,
                                                       int softmax, ingot_dtype dtype,
                                                       int64_t vocab) {
  ingot_device_guard guard;
  int c, chunk, blocks = 0;
  dense_geometry(ctx, vocab, &c, &chunk);
  const int mode = softmax ? kDenseSoftmax : kDenseSample;
  const bool half = softmax == 2;
  if (half && dtype == INGOT_DTYPE_F32) return -1; /* the 16-bit softmax has no f32 kernel */
  const DenseKernel k = half      ? half_kernel_for(dtype)
                        : softmax ? dense_kernel_for<kDenseSoftmax>(dtype)
                                  : dense_kernel_for<kDenseSample>(dtype);
  if (guard.enter(ctx->device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, k, half ? kHalfThreads : kDenseThreads,
          half ? half_smem_bytes(chunk) : dense_smem_bytes(mode, chunk)) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return blocks;
}

ingot_status ingot_cuda_sample_dense(struct ingot_context *ctx, const ingot_sampling_input *in,
                                     const ingot_sampling_output *out, int split, int small_k,
                                     struct CUstream_st *stream) {
  DenseArgs args = {};
  args.in = *in;
  args.out = *out;
  args.row_status = out->row_status;
  args.split = split;
  args.small_k = small_k;
  static const char op[] = "ingot_sample";
  switch (dense_sample_mode(out->num_top, small_k)) {
    case kDenseSampleTop: return dense_launch<kDenseSampleTop>(ctx, op, args, stream);
    case kDenseSampleFilter: return dense_launch<kDenseSampleFilter>(ctx, op, args, stream);
    default: return dense_launch<kDenseSample>(ctx, op, args, stream);
  }
}

ingot_status ingot_cuda_sampling_softmax_dense(struct ingot_context *ctx,
                                               const ingot_sampling_input *in, float *probs,
                                               int64_t probs_stride, uint32_t *row_status,
                                               int split, struct CUstream_st *stream) {
  DenseArgs args = {};
  args.in = *in;
  args.probs = probs;
  args.probs_stride = probs_stride;
  args.row_status = row_status;
  args.split = split;
  static const char op[] = "ingot_sampling_softmax";
  int c, chunk;
  dense_geometry(ctx, in->vocab, &c, &chunk);
  if (split || !half_fits(ctx, in, c, chunk))
    return dense_launch<kDenseSoftmax>(ctx, op, args, stream);
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  args.chunk = chunk;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  cluster_launch_config(&cfg, attr, (unsigned)(in->batch * c), kHalfThreads,
                        half_smem_bytes(chunk), stream, c > 1 ? c : 0, ctx->cuda->sampling.pdl != 0);
  INGOT_CUDA_TRY(ctx, op, cudaLaunchKernelEx(&cfg, half_kernel_for(in->dtype), args));
  return ingot_cuda_check_launch(ctx, op);
}

/* ---- the wide softmax: host side ---------------------------------------------------- */

namespace {

/* Chunks a row and tokens a chunk: about one block a SM over the batch
 * (B = 1 on all 132 SMs of the H200 took 4.44 us, on 66 4.69), whole
 * groups of 4, 1 to kWideMaxGroups groups a thread. */
void wide_geometry(const struct ingot_context *ctx, int64_t batch, int64_t vocab, int *nch,
                   int *chunk) {
  const int64_t per = std::max<int64_t>(ctx->sm_count / batch, 1);
  int64_t ch = ((vocab + per - 1) / per + 3) / 4 * 4;
  ch = std::min<int64_t>(std::max<int64_t>(ch, 4 * kWideThreads),
                         4 * kWideThreads * kWideMaxGroups);
  *chunk = (int)ch;
  *nch = (int)((vocab + ch - 1) / ch);
}

/* The workspace: keys, masses (8 bytes each) and flags (4) for every block. */
size_t wide_bytes(int64_t blocks) { return (size_t)blocks * 20; }

/* The most blocks a wide call of V tokens a row runs, over its batches
 * (B <= kWideMaxBatch): a workspace sized for them serves every batch. */
int64_t wide_most_blocks(const struct ingot_context *ctx, int64_t vocab) {
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

}  // namespace

size_t ingot_cuda_sampling_wide_workspace(const struct ingot_context *ctx, int64_t vocab) {
  if (!ctx->cuda->sampling.pdl || vocab < kWideMinVocab) return 0;
  return (wide_bytes(wide_most_blocks(ctx, vocab)) + 255) / 256 * 256;
}

int ingot_cuda_sampling_softmax_wide_fits(const struct ingot_context *ctx,
                                          const ingot_sampling_input *in) {
  return ctx->cuda->sampling.pdl && in->batch <= kWideMaxBatch && in->vocab >= kWideMinVocab &&
         !in->top_k && !in->top_p && !in->min_p && in->num_bias == 0 && in->num_banned == 0 &&
         /* larger batches of the same rows take the dense kernel: the same bits */
         dense_fits(ctx, in, kDenseSoftmax);
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

/* ---- the wide sampler: host side ---------------------------------------------------- */

namespace {

/* Its workspace for B rows of nch chunks: a LoadStats and a DrawStats a
 * chunk, a counter a row (the same for every batch: sized for the largest). */
size_t ws_bytes(int64_t blocks) {
  return (size_t)blocks * (sizeof(LoadStats) + sizeof(DrawStats)) + kWideMaxBatch * 4;
}

}  // namespace

size_t ingot_cuda_sample_wide_workspace(const struct ingot_context *ctx, int64_t vocab,
                                        int64_t num_top) {
  if (!ctx->cuda->sampling.pdl || vocab < kWideMinVocab || num_top > 0 ||
      ctx->cuda->sampling.dense_cluster < 1)
    return 0;
  return (ws_bytes(wide_most_blocks(ctx, vocab)) + 255) / 256 * 256;
}

int ingot_cuda_sample_wide_fits(const struct ingot_context *ctx, const ingot_sampling_input *in,
                                const ingot_sampling_output *out) {
  return ctx->cuda->sampling.pdl && in->batch <= kWideMaxBatch && in->vocab >= kWideMinVocab &&
         out->num_top == 0 && !in->top_k && !in->top_p && !in->min_p && in->num_bias == 0 &&
         in->num_banned == 0 &&
         /* larger batches of the same rows take the dense kernel: the same bits */
         dense_fits(ctx, in, kDenseSample);
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
