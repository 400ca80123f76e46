/*
 * Sampling, CUDA backend: the GENERAL kernel, sampling_kernel<kMode>, for
 * ingot_sample and ingot_sampling_softmax in ONE launch each: any row, every
 * filter (top-k, top-p, min-p), top-n outputs of any n, the raw
 * distribution's outputs. The dispatcher (sampling_dispatch.cu) gives it the
 * calls the other paths do not take and, in a call with filter tensors, the
 * rows the dense kernel leaves (split: it runs after the dense kernel and
 * skips that kernel's rows, row_done_by_dense in sampling_paths.cuh). The
 * rules are the Sampling section of include/ingot/ingot.h; the arithmetic of
 * every rounding-relevant step (Philox, the uniform, the Gumbel noise, exp,
 * the min-p log, the parameter rule) is src/common/sampling_ref.h, shared
 * with the CPU reference.
 *
 * Shape of the kernel. A row is processed by a CLUSTER of c thread blocks
 * (Hopper thread-block clusters; c = 1 before sm_90): block b holds the
 * tokens [b * chunk, (b + 1) * chunk) of the row in shared memory, so every
 * pass after the first reads shared memory, not the logits. Row-wide values
 * (max, counts, masses, histograms, the argmax) are combined through
 * distributed shared memory after a cluster barrier. Small batches get
 * c = 8 or 16 blocks per row; large batches fewer.
 *
 * Exactness, and why the result does not depend on c, the batch or the
 * neighbours:
 *   - per-element values (s_i, w_i, the Gumbel key) are the reference's
 *     single IEEE operations;
 *   - every reduction is exact and order-free: max / argmax (ties to the
 *     lowest id), integer counts, and probability masses as 64-bit FIXED
 *     POINT integers (w_i * 2^F rounded, F = 63 - ceil(log2 V) so that no
 *     sum overflows); the only difference from the CPU (which sums in
 *     double) is that rounding, at most V * 2^-(F+1) absolute against a
 *     total >= 1 (<= 4e-9 relative for V <= 2^18);
 *   - top-k / top-p / top-n are exact radix selects (4 rounds of 8 bits)
 *     on an order-preserving 32-bit key of the value; the elements equal
 *     to the threshold are ranked by token id. Only top-p can differ from
 *     the CPU: when the cumulative mass lands within that rounding of
 *     p * total.
 *
 * The draw skips the Gumbel noise of tokens that cannot win: the final set
 * always holds a token with s = 0, whose key is >= g_min = -2.82, and a key
 * is s + g with g <= 22.88, so s < -26 never wins (rounding included).
 */
#include <climits>
#include <cmath>

#include "common/sampling_ref.h"
#include "cuda/common.cuh"
#include "cuda/cuda.cuh"
#include "cuda/sampling/sampling_common.cuh"
#include "cuda/sampling/sampling_paths.cuh"

namespace {

using namespace ingot_sampling;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kMaxTop = INGOT_SAMPLING_MAX_TOP; /* 1024, a power of two */
constexpr float kCannotWin = -26.0f;           /* see the file comment */
constexpr int kMinTokensPerBlock = 2048;

enum Mode { kSoftmax = 0, kSample = 1 };

typedef SamplingArgs Args;

/* Barrier of every thread of the cluster, with release / acquire of shared
 * memory at cluster scope. `phase` counts them: double-buffered exchange
 * slots alternate on its parity, so a slot is rewritten only after every
 * block has passed the barrier that follows its readers. */
__device__ __forceinline__ void cluster_barrier(int &phase) {
  cluster_sync();
  phase++;
}

/* ---- values ------------------------------------------------------------------------ */

/* w = exp(v) (v <= 0) as a fixed-point integer, w * 2^F rounded to nearest:
 * the product by a power of two is exact. */
__device__ __forceinline__ unsigned long long fixed_of(float w, float scale) {
  return __float2ull_rn(__fmul_rn(w, scale));
}

__device__ __forceinline__ unsigned long long fixed_mass(float v, float scale) {
  return fixed_of(ingot_sampling_ref_exp(v), scale);
}

/* log of a fixed-point mass; the scaling is exact, so a mass of exactly 1
 * (a one-hot row) gives exactly 0. */
__device__ __forceinline__ double log_of_mass(unsigned long long mass, int frac_bits) {
  if (mass == 0) return -(double)INFINITY;
  return log(ldexp((double)mass, -frac_bits));
}

struct Pair {
  float value;
  int32_t id;
};

/* Rank order: value descending, then id ascending. */
__device__ __forceinline__ bool before(const Pair &a, const Pair &b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

/* Per-block partial results of a row, combined exactly in any order. */
struct Partial {
  unsigned long long mass;
  float key; /* argmax: key descending, then id ascending */
  int32_t id;
  float raw_max;
  uint32_t count;
  uint32_t flags;
};

__device__ __forceinline__ Partial partial_identity() {
  Partial p;
  p.mass = 0;
  p.key = -INFINITY;
  p.id = INT_MAX;
  p.raw_max = -INFINITY;
  p.count = 0;
  p.flags = 0;
  return p;
}

__device__ __forceinline__ void combine(Partial &a, const Partial &b) {
  a.mass += b.mass;
  if (b.key > a.key || (b.key == a.key && b.id < a.id)) {
    a.key = b.key;
    a.id = b.id;
  }
  if (b.raw_max > a.raw_max) a.raw_max = b.raw_max;
  a.count += b.count;
  a.flags |= b.flags;
}

__device__ __forceinline__ void combine_warp(Partial &p) {
  for (int o = 16; o > 0; o >>= 1) {
    Partial q;
    q.mass = __shfl_xor_sync(0xffffffffu, p.mass, o);
    q.key = __shfl_xor_sync(0xffffffffu, p.key, o);
    q.id = __shfl_xor_sync(0xffffffffu, p.id, o);
    q.raw_max = __shfl_xor_sync(0xffffffffu, p.raw_max, o);
    q.count = __shfl_xor_sync(0xffffffffu, p.count, o);
    q.flags = __shfl_xor_sync(0xffffffffu, p.flags, o);
    combine(p, q);
  }
}

/* A radix-select result: the candidates of rank < target are those with
 * key > `key`, plus the first `need` of the `ties` candidates with key ==
 * `key` in token-id order (all of them when need == ties). */
struct Selection {
  bool all; /* fewer candidates than the target: every one is kept */
  uint32_t key;
  uint32_t above;
  unsigned long long above_mass;
  uint32_t ties;
  unsigned long long tie_mass; /* of ONE tie (equal keys, equal masses) */
  uint32_t need;
  uint32_t tie_prefix;         /* ties held by lower-ranked blocks */
  unsigned long long total_mass; /* of every candidate (when masses are kept) */
};

struct Shared {
  uint32_t hist_count[2][kBins];
  unsigned long long hist_mass[2][kBins];
  uint32_t comb_count[kBins];
  unsigned long long comb_mass[kBins];
  Partial slot[2];
  Partial warp_part[kWarps];
  Partial result;
  uint32_t warp_total[kWarps];
  Selection sel;
  unsigned long long remaining; /* of the current radix select */
  int list_count;
  Pair list[kMaxTop];
  Pair merge[kMaxTop];
};

/* Combines one Partial per thread over the whole cluster; every thread gets
 * the result. */
__device__ Partial cluster_reduce(Partial p, Shared &sh, int &phase) {
  const unsigned csize = cluster_blocks();
  const int slot = phase & 1;
  combine_warp(p);
  if (lane_id() == 0) sh.warp_part[warp_id()] = p;
  __syncthreads();
  if (warp_id() == 0) {
    Partial q = lane_id() < kWarps ? sh.warp_part[lane_id()] : partial_identity();
    combine_warp(q);
    if (lane_id() == 0) sh.slot[slot] = q;
  }
  cluster_barrier(phase);
  if (warp_id() == 0) {
    Partial q = (unsigned)lane_id() < csize ? *remote(&sh.slot[slot], lane_id())
                                            : partial_identity();
    combine_warp(q);
    if (lane_id() == 0) sh.result = q;
  }
  __syncthreads();
  return sh.result;
}

/* The row's values held by this block (s_i, or -Inf outside the set). */
struct SharedValues {
  const float *v;
  __device__ float operator()(int j) const { return v[j]; }
};

/* The raw distribution's values (x - m) / T' of the logits as given, -Inf for
 * non-finite logits, from this block's copy of the logits in shared memory. */
struct RawValues {
  const float *x;
  float max, temperature;
  __device__ float operator()(int j) const {
    const float v = x[j];
    if (!ingot_f32_finite(v)) return -INFINITY;
    return __fdiv_rn(__fsub_rn(v, max), temperature);
  }
};

/* Adds the lanes' (bin, mass) to a shared histogram with one atomic per
 * distinct bin of the warp: float keys crowd into few bins (round 1 sees
 * mostly sign and exponent), and plain atomics on one address serialise.
 * Called by every lane of the warp. */
__device__ __forceinline__ void hist_add(uint32_t *count, unsigned long long *mass, bool active,
                                         uint32_t bin, unsigned long long m, bool keep_mass) {
  const unsigned act = __ballot_sync(0xffffffffu, active);
  if (!active) return;
  const unsigned peers = __match_any_sync(act, bin);
  const int lane = lane_id();
  const bool leader = lane == __ffs(peers) - 1;
  if (keep_mass) {
    /* m < 2^63 in three 21-bit parts: 32 of each sum below 2^26 */
    const uint32_t s0 = __reduce_add_sync(peers, (uint32_t)(m & 0x1fffffu));
    const uint32_t s1 = __reduce_add_sync(peers, (uint32_t)((m >> 21) & 0x1fffffu));
    const uint32_t s2 = __reduce_add_sync(peers, (uint32_t)(m >> 42));
    if (leader)
      atomicAdd(&mass[bin], (unsigned long long)s0 + ((unsigned long long)s1 << 21) +
                                ((unsigned long long)s2 << 42));
  }
  if (leader) atomicAdd(&count[bin], (uint32_t)__popc(peers));
}

/* Radix select over the finite values of src (this block's n of them):
 * by count (target = rank, 1-based) or, when by_mass, by cumulative mass in
 * rank order (target = the first element whose cumulative mass reaches
 * `target`; target_fraction > 0 instead asks for ceil(fraction * total)
 * of the round-1 total). Masses are accumulated when keep_mass. Values
 * whose key is below min_key are not candidates (a cut known to lie above
 * them: cheaper rounds). */
template <class Src>
__device__ Selection radix_select(const Src &src, int n, bool by_mass, unsigned long long target,
                                  double target_fraction, bool keep_mass, float scale,
                                  uint32_t min_key, Shared &sh, int &phase) {
  const unsigned csize = cluster_blocks(), crank = cluster_rank();
  uint32_t prefix = 0, mask = 0;
  uint32_t above = 0;
  unsigned long long above_mass = 0;
  unsigned long long remaining = target;
  Selection out{};
  for (int shift = 24; shift >= 0; shift -= 8) {
    const int slot = phase & 1;
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      sh.hist_count[slot][b] = 0;
      if (keep_mass) sh.hist_mass[slot][b] = 0;
    }
    __syncthreads();
    for (int j0 = 0; j0 < n; j0 += kThreads) { /* warp-uniform trip count */
      const int j = j0 + threadIdx.x;
      const float v = j < n ? src(j) : -INFINITY;
      const uint32_t k = rank_key(v);
      const bool in = v != -INFINITY && k >= min_key && (k & mask) == prefix;
      hist_add(sh.hist_count[slot], sh.hist_mass[slot], in, (k >> shift) & 255u,
               in && keep_mass ? fixed_mass(v, scale) : 0ull, keep_mass);
    }
    cluster_barrier(phase);
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      /* every remote load started before the first add: a distributed
       * shared memory round trip costs about as much as a global one */
      uint32_t cs[kMaxCluster];
      unsigned long long ms[kMaxCluster];
#pragma unroll
      for (unsigned r = 0; r < kMaxCluster; r++) {
        cs[r] = r < csize ? *remote(&sh.hist_count[slot][b], r) : 0u;
        ms[r] = keep_mass && r < csize ? *remote(&sh.hist_mass[slot][b], r) : 0ull;
      }
      uint32_t c = 0;
      unsigned long long m = 0;
#pragma unroll
      for (unsigned r = 0; r < kMaxCluster; r++) c += cs[r], m += ms[r];
      sh.comb_count[b] = c;
      sh.comb_mass[b] = m;
    }
    __syncthreads();
    if (warp_id() == 0) {
      const int lane = lane_id();
      /* lane l owns bins 255 - 8l ... 248 - 8l, in descending key order */
      uint32_t lc = 0;
      unsigned long long lm = 0;
      for (int i = 0; i < 8; i++) {
        lc += sh.comb_count[255 - 8 * lane - i];
        lm += sh.comb_mass[255 - 8 * lane - i];
      }
      uint32_t ic = lc;
      unsigned long long im = lm;
      for (int o = 1; o < 32; o <<= 1) {
        uint32_t tc = __shfl_up_sync(0xffffffffu, ic, o);
        unsigned long long tm = __shfl_up_sync(0xffffffffu, im, o);
        if (lane >= o) ic += tc, im += tm;
      }
      const uint32_t total_count = __shfl_sync(0xffffffffu, ic, 31);
      const unsigned long long total_mass = __shfl_sync(0xffffffffu, im, 31);
      if (shift == 24) {
        /* round 1 sees every candidate */
        if (by_mass && target_fraction > 0.0) {
          double t = ceil(target_fraction * (double)total_mass);
          remaining = t < 1.0 ? 1ull : (unsigned long long)t;
        }
        if (by_mass && remaining > total_mass) remaining = total_mass;
        if (lane == 0) {
          sh.sel.total_mass = total_mass;
          sh.sel.all = by_mass ? total_mass == 0 : total_count <= remaining;
          sh.remaining = remaining;
        }
      }
      const unsigned long long reach = by_mass ? im : ic;
      const unsigned ballot = __ballot_sync(0xffffffffu, reach >= remaining);
      const int found = ballot ? __ffs(ballot) - 1 : 31;
      if (lane == found) {
        uint32_t c = ic - lc;
        unsigned long long m = im - lm;
        int digit = 248 - 8 * lane;
        for (int i = 0; i < 8; i++) {
          int bin = 255 - 8 * lane - i;
          uint32_t bc = sh.comb_count[bin];
          unsigned long long bm = sh.comb_mass[bin];
          if ((by_mass ? m + bm : (unsigned long long)(c + bc)) >= remaining) {
            digit = bin;
            break;
          }
          c += bc;
          m += bm;
        }
        sh.sel.key = (uint32_t)digit; /* this round's digit */
        sh.sel.above = c;
        sh.sel.above_mass = m;
        sh.sel.ties = sh.comb_count[digit];
        sh.sel.tie_mass = sh.comb_mass[digit];
      }
    }
    __syncthreads();
    if (shift == 24) remaining = sh.remaining; /* warp 0 may have set it */
    const uint32_t digit = sh.sel.key;
    above += sh.sel.above;
    above_mass += sh.sel.above_mass;
    remaining -= by_mass ? sh.sel.above_mass : sh.sel.above;
    prefix |= digit << shift;
    mask |= 255u << shift;
    out.all = sh.sel.all;
    out.total_mass = sh.sel.total_mass;
    if (out.all) break; /* uniform across the cluster */
    if (shift == 0) {
      out.key = prefix;
      out.above = above;
      out.above_mass = above_mass;
      out.ties = sh.sel.ties;
      out.tie_mass = keep_mass && out.ties ? sh.sel.tie_mass / out.ties : 0;
      if (!by_mass) {
        out.need = (uint32_t)remaining;
      } else if (out.tie_mass == 0) {
        out.need = out.ties;
      } else {
        unsigned long long j = (remaining + out.tie_mass - 1) / out.tie_mass;
        out.need = (uint32_t)(j < 1 ? 1 : (j > out.ties ? out.ties : j));
      }
      /* ties in lower-ranked blocks: their last-round bin, still readable
       * until the next barrier */
      uint32_t lower = 0;
#pragma unroll
      for (unsigned r = 0; r < kMaxCluster; r++)
        lower += r < crank ? *remote(&sh.hist_count[slot][digit], r) : 0u;
      out.tie_prefix = lower;
    }
    __syncthreads(); /* sh.sel is rewritten by the next round */
  }
  return out;
}

/* Calls fn(j, rank) for each of this block's candidates whose key equals
 * `key`, rank = its position among all such candidates of the row in
 * token-id order. */
template <class Src, class Fn>
__device__ void for_each_tie(const Src &src, int n, uint32_t key, uint32_t base, Shared &sh,
                             Fn fn) {
  const int lane = lane_id(), warp = warp_id();
  for (int t0 = 0; t0 < n; t0 += kThreads) {
    const int j = t0 + threadIdx.x;
    bool tie = false;
    if (j < n) {
      float v = src(j);
      tie = v != -INFINITY && rank_key(v) == key;
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, tie);
    if (lane == 0) sh.warp_total[warp] = __popc(ballot);
    __syncthreads();
    uint32_t offset = 0, total = 0;
    for (int w = 0; w < kWarps; w++) {
      uint32_t c = sh.warp_total[w];
      if (w < warp) offset += c;
      total += c;
    }
    if (tie) fn(j, base + offset + __popc(ballot & ((1u << lane) - 1u)));
    __syncthreads();
    base += total;
  }
}

/* Whether a candidate of key k is selected (ties resolved by the caller). */
__device__ __forceinline__ int selected(const Selection &s, uint32_t k) {
  if (s.all || k > s.key) return 1;
  if (k < s.key) return 0;
  return s.need >= s.ties ? 1 : -1; /* -1: a tie that needs its rank */
}

/* Keeps only the selection in sv (others -> -Inf). */
__device__ void apply_selection(float *sv, int n, const Selection &s, Shared &sh) {
  for (int j = threadIdx.x; j < n; j += kThreads) {
    float v = sv[j];
    if (v == -INFINITY) continue;
    if (selected(s, rank_key(v)) == 0) sv[j] = -INFINITY;
  }
  __syncthreads();
  if (s.all || s.need >= s.ties) return;
  for_each_tie(SharedValues{sv}, n, s.key, s.tie_prefix, sh, [&](int j, uint32_t rank) {
    if (rank >= s.need) sv[j] = -INFINITY;
  });
  __syncthreads();
}

/* The n most probable candidates of src in rank order, with log-probability
 * value - log_z, into ids / logprobs (either may be NULL); slots past the
 * candidates get -1 / -Inf. Collective over the cluster. */
template <class Src>
__device__ void write_top(const Src &src, int n, int64_t lo, int num, double log_z,
                          int32_t *ids, float *logprobs, Shared &sh, int &phase) {
  Selection s =
      radix_select(src, n, false, (unsigned long long)num, 0.0, false, 1.0f, 0u, sh, phase);
  if (threadIdx.x == 0) sh.list_count = 0;
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kThreads) {
    float v = src(j);
    if (v == -INFINITY || selected(s, rank_key(v)) != 1) continue;
    int pos = atomicAdd(&sh.list_count, 1);
    sh.list[pos] = Pair{v, (int32_t)(lo + j)};
  }
  if (!s.all && s.need < s.ties) {
    __syncthreads();
    for_each_tie(src, n, s.key, s.tie_prefix, sh, [&](int j, uint32_t rank) {
      if (rank < s.need) {
        int pos = atomicAdd(&sh.list_count, 1);
        sh.list[pos] = Pair{src(j), (int32_t)(lo + j)};
      }
    });
  }
  cluster_barrier(phase);
  if (cluster_rank() == 0) {
    /* gather every block's list (at most num entries in all), sort, write */
    const unsigned csize = cluster_blocks();
    int total = 0;
    for (unsigned r = 0; r < csize; r++) {
      const int cnt = *remote(&sh.list_count, r);
      const Pair *l = remote(sh.list, r);
      for (int e = threadIdx.x; e < cnt; e += kThreads) sh.merge[total + e] = l[e];
      total += cnt;
    }
    for (int e = total + threadIdx.x; e < kMaxTop; e += kThreads)
      sh.merge[e] = Pair{-INFINITY, INT_MAX};
    __syncthreads();
    int size = 1;
    while (size < total) size <<= 1;
    for (int k = 2; k <= size; k <<= 1) {
      for (int jj = k >> 1; jj > 0; jj >>= 1) {
        for (int i = threadIdx.x; i < size; i += kThreads) {
          int partner = i ^ jj;
          if (partner > i) {
            Pair a = sh.merge[i], b = sh.merge[partner];
            bool ascending_block = (i & k) == 0;
            /* "ascending" here means rank order: best first */
            if (ascending_block ? before(b, a) : before(a, b)) {
              sh.merge[i] = b;
              sh.merge[partner] = a;
            }
          }
        }
        __syncthreads();
      }
    }
    for (int e = threadIdx.x; e < num; e += kThreads) {
      bool found = e < total;
      if (ids) ids[e] = found ? sh.merge[e].id : -1;
      if (logprobs)
        logprobs[e] = found ? (float)((double)sh.merge[e].value - log_z) : -INFINITY;
    }
  }
  cluster_barrier(phase); /* the lists were read remotely */
}

/* sv[0, n) <- logits lo .. lo + n - 1 of the row, exactly as fp32; returns
 * this thread's max over the finite ones. 16-byte loads, four in flight per
 * thread, when the chunk is 16-byte aligned (the common case: lo is a
 * multiple of 32 tokens); plain loads otherwise. */
__device__ float load_chunk(const ingot_sampling_input &in, const void *row, int64_t lo, int n,
                            float *sv, float *rv) {
  const bool f32 = in.dtype == INGOT_DTYPE_F32;
  const char *base = static_cast<const char *>(row) + lo * (f32 ? 4 : 2);
  float mx = -INFINITY;
  int done = 0;
  if ((reinterpret_cast<uintptr_t>(base) & 15u) == 0) {
    const int per = f32 ? 4 : 8;
    const int nv = n / per;
    const uint4 *src = reinterpret_cast<const uint4 *>(base);
    for (int v0 = threadIdx.x; v0 < nv; v0 += 4 * kThreads) {
      uint4 q[4];
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (v0 + u * kThreads < nv) q[u] = __ldg(src + v0 + u * kThreads);
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const int v = v0 + u * kThreads;
        if (v >= nv) break;
        const uint32_t w[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
        float f[8];
        if (f32) {
          for (int e = 0; e < 4; e++) f[e] = __uint_as_float(w[e]);
        } else {
          for (int e = 0; e < 4; e++) {
            const uint16_t lo16 = (uint16_t)(w[e] & 0xffffu), hi16 = (uint16_t)(w[e] >> 16);
            const bool bf = in.dtype == INGOT_DTYPE_BF16;
            f[2 * e] = bf ? ingot_bf16_to_f32(lo16) : ingot_f16_to_f32(lo16);
            f[2 * e + 1] = bf ? ingot_bf16_to_f32(hi16) : ingot_f16_to_f32(hi16);
          }
        }
        float4 *dst = reinterpret_cast<float4 *>(sv + v * per);
        dst[0] = make_float4(f[0], f[1], f[2], f[3]);
        if (!f32) dst[1] = make_float4(f[4], f[5], f[6], f[7]);
        if (rv) {
          float4 *raw = reinterpret_cast<float4 *>(rv + v * per);
          raw[0] = dst[0];
          if (!f32) raw[1] = dst[1];
        }
        for (int e = 0; e < per; e++)
          if (ingot_f32_finite(f[e]) && f[e] > mx) mx = f[e];
      }
    }
    done = nv * per;
  }
  for (int j = done + threadIdx.x; j < n; j += kThreads) {
    const float x = ingot_sampling_load(row, in.dtype, lo + j);
    sv[j] = x;
    if (rv) rv[j] = x;
    if (ingot_f32_finite(x) && x > mx) mx = x;
  }
  return mx;
}

template <int kMode>
__global__ void __launch_bounds__(kThreads, 1) sampling_kernel(const Args a) {
  extern __shared__ float4 dynamic_smem[];
  float *sv = reinterpret_cast<float *>(dynamic_smem);
  __shared__ Shared sh;
  const ingot_sampling_input &in = a.in;
  const BlockPart part = block_part(a);
  const int64_t r = part.r, lo = part.lo;
  const int n = part.n;
  const unsigned crank = part.rank;
  const float scale = ldexpf(1.0f, a.frac_bits);
  const bool rank0 = crank == 0;
  int phase = 0;
  /* the above reads only the kernel's parameters: before the wait, so that
   * their constant-cache misses overlap the previous kernel's tail */
  wait_for_previous_grid();

  if (a.split && row_done_by_dense(a, r, kMode == kSample)) return; /* the dense kernel's row */

  /* ---- 1. load, bias, bans, NaN / bitmask; row max, count, flags ---- */
  const void *row = static_cast<const char *>(in.logits) +
                    (size_t)(r * in.logits_stride) * (in.dtype == INGOT_DTYPE_F32 ? 4 : 2);
  /* dynamic shared memory: sv [chunk], then rv [chunk] when the raw
   * distribution is asked for, then the bitmask words [chunk / 32] */
  float *rv = a.keep_raw ? sv + a.chunk : nullptr;
  uint32_t *words = reinterpret_cast<uint32_t *>(sv + a.chunk * (a.keep_raw ? 2 : 1));
  Partial p = partial_identity();
  p.raw_max = load_chunk(in, row, lo, n, sv, rv);
  if (in.allowed) {
    const uint32_t *w = in.allowed + r * in.allowed_stride + (lo >> 5);
    for (int k = threadIdx.x; k < (n + 31) / 32; k += kThreads) words[k] = __ldg(w + k);
  }
  __syncthreads();

  const float T = in.temperature ? in.temperature[r] : 1.0f;
  const int32_t top_k = in.top_k ? in.top_k[r] : 0;
  const float top_p = in.top_p ? in.top_p[r] : 1.0f;
  const float min_p = in.min_p ? in.min_p[r] : 0.0f;

  if (ingot_sampling_params_check(T, top_k, top_p, min_p) != 0) {
    write_bad_parameter_row(a, kMode == kSample, r, lo, n);
    return; /* no shared memory was exchanged (the chunk load was local) */
  }

  uint32_t flags = apply_lists(in, r, lo, n, sv);
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const int64_t i = lo + j;
    float v = sv[j];
    if (!ingot_f32_finite(v)) {
      if (v != -INFINITY) flags |= INGOT_SAMPLING_ROW_NAN;
      v = -INFINITY;
    } else if (in.allowed && !((words[j >> 5] >> (j & 31)) & 1u)) {
      v = -INFINITY;
    } else {
      p.count++;
      if (v > p.key || (v == p.key && (int32_t)i < p.id)) {
        p.key = v;
        p.id = (int32_t)i;
      }
    }
    sv[j] = v;
  }
  p.flags = flags;
  const Partial stats = cluster_reduce(p, sh, phase);
  flags = stats.flags;
  const float m = stats.key;
  const bool empty = stats.count == 0;
  int32_t token = -1;

  /* ---- 2. the final set F: s_i in sv, -Inf outside ---- */
  if (empty) {
    flags |= INGOT_SAMPLING_ROW_EMPTY; /* sv is all -Inf already */
  } else if (T == 0.0f) {
    token = stats.id; /* lowest id among the maxima */
    for (int j = threadIdx.x; j < n; j += kThreads) sv[j] = lo + j == token ? 0.0f : -INFINITY;
  } else {
#pragma unroll 4
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const float v = sv[j];
      const float s = __fdiv_rn(__fsub_rn(v, m), T);
      sv[j] = v == -INFINITY ? v : s;
    }
    __syncthreads();
    const bool topk_on = top_k > 0 && (uint32_t)top_k < stats.count;
    const bool topp_on = top_p < 1.0f;
    if (topk_on || topp_on) {
      const SharedValues src{sv};
      Selection cut{};
      unsigned long long total_k = 0;
      if (topk_on) {
        cut = radix_select(src, n, false, (unsigned long long)top_k, 0.0, topp_on, scale, 0u, sh,
                           phase);
        total_k = cut.all ? cut.total_mass : cut.above_mass + cut.need * cut.tie_mass;
      }
      if (topp_on) {
        /* the smallest rank-order prefix whose mass reaches p * sum_K w: a
         * prefix of the top-k set, so it is the whole cut */
        if (topk_on && !cut.all) {
          /* only keys >= the top-k threshold can be in the cut (ties past
           * the top-k set come after every kept token in rank order) */
          const double t = ceil((double)top_p * (double)total_k);
          cut = radix_select(src, n, true, t < 1.0 ? 1ull : (unsigned long long)t, 0.0, true,
                             scale, cut.key, sh, phase);
        } else {
          cut = radix_select(src, n, true, 0, (double)top_p, true, scale, 0u, sh, phase);
        }
      }
      apply_selection(sv, n, cut, sh);
    }
    if (min_p > 0.0f) {
      const float threshold = ingot_sampling_ref_log(min_p);
      for (int j = threadIdx.x; j < n; j += kThreads)
        if (sv[j] < threshold) sv[j] = -INFINITY;
    }
  }
  __syncthreads();

  /* ---- 3. mass of F and (sample) the Gumbel-max draw ---- */
  Partial q = partial_identity();
  const bool draw = kMode == kSample && !empty && T > 0.0f;
  /* the mass of F: for the softmax, the token's logprob and the final top-n */
  const bool want_mass = kMode == kSoftmax || a.out.token_logprob ||
                         (a.out.num_top > 0 && (a.out.flags & INGOT_SAMPLING_TOP_FINAL));
  const uint64_t seed = in.seed ? in.seed[r] : 0;
  const uint64_t position = in.position ? in.position[r] : 0;
  if (kMode == kSoftmax || (want_mass && !draw)) {
    /* exp(-Inf) = 0: no branch, four tokens in flight a thread */
#pragma unroll 4
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const float w = ingot_sampling_ref_exp(sv[j]);
      if (kMode == kSoftmax) sv[j] = w; /* written out below */
      q.mass += fixed_of(w, scale);
    }
  } else
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const float s = sv[j];
    if (s == -INFINITY) continue;
    if (want_mass) q.mass += fixed_mass(s, scale);
    if (draw && s >= kCannotWin) {
      const int32_t i = (int32_t)(lo + j);
      const float key = __fadd_rn(s, ingot_sampling_ref_gumbel(seed, position, (uint32_t)i));
      if (key > q.key) { /* j ascending: the first of equal keys stays */
        q.key = key;
        q.id = i;
      }
    }
  }
  const Partial fin = cluster_reduce(q, sh, phase);
  if (draw) token = fin.id;
  const double log_z = log_of_mass(fin.mass, a.frac_bits);

  if (kMode == kSoftmax) {
    if (rank0 && threadIdx.x == 0 && a.row_status) a.row_status[r] = flags;
    /* p = w * (1 / Z) in fp32: within 1.5 ulp of w / Z, no fp64 per token */
    const float inv_z = fin.mass ? (float)(ldexp(1.0, a.frac_bits) / (double)fin.mass) : 0.0f;
    float *prow = a.probs + r * a.probs_stride + lo;
    for (int j = threadIdx.x; j < n; j += kThreads) prow[j] = __fmul_rn(sv[j], inv_z);
    cluster_barrier(phase); /* the slots were read remotely */
    return;
  }

  /* ---- 4. outputs of the sample ---- */
  const ingot_sampling_output &o = a.out;
  const bool owner = token >= lo && token < lo + n;
  if (rank0 && threadIdx.x == 0) {
    o.tokens[r] = token;
    if (a.row_status) a.row_status[r] = flags;
    if (token < 0) {
      if (o.token_logprob) o.token_logprob[r] = -INFINITY;
      if (o.token_raw_logprob) o.token_raw_logprob[r] = -INFINITY;
    }
  }
  if (owner && threadIdx.x == 0 && o.token_logprob)
    o.token_logprob[r] = (float)((double)sv[token - lo] - log_z);
  const bool top_final = o.num_top > 0 && (o.flags & INGOT_SAMPLING_TOP_FINAL);
  if (top_final) {
    if (token < 0)
      write_empty_top(o, r, rank0);
    else
      write_top(SharedValues{sv}, n, lo, (int)o.num_top, log_z,
                o.top_ids ? o.top_ids + r * o.top_ids_stride : nullptr,
                o.top_logprobs ? o.top_logprobs + r * o.top_logprobs_stride : nullptr, sh,
                phase);
  }
  const bool top_raw = o.num_top > 0 && !top_final;
  if (o.token_raw_logprob || top_raw) {
    const RawValues raw{rv, stats.raw_max, T > 0.0f ? T : 1.0f};
    Partial z = partial_identity();
    if (stats.raw_max != -INFINITY)
#pragma unroll 4
      for (int j = threadIdx.x; j < n; j += kThreads) z.mass += fixed_mass(raw(j), scale);
    const Partial zr = cluster_reduce(z, sh, phase);
    const double log_zr = log_of_mass(zr.mass, a.frac_bits);
    if (owner && threadIdx.x == 0 && o.token_raw_logprob) {
      const float v = stats.raw_max != -INFINITY ? raw(token - (int32_t)lo) : -INFINITY;
      o.token_raw_logprob[r] = v != -INFINITY ? (float)((double)v - log_zr) : -INFINITY;
    }
    if (top_raw) {
      if (stats.raw_max == -INFINITY)
        write_empty_top(o, r, rank0);
      else
        write_top(raw, n, lo, (int)o.num_top, log_zr,
                  o.top_ids ? o.top_ids + r * o.top_ids_stride : nullptr,
                  o.top_logprobs ? o.top_logprobs + r * o.top_logprobs_stride : nullptr, sh,
                  phase);
    }
  }
  cluster_barrier(phase); /* the slots were read remotely */
}

}  // namespace

/* ---- host side ---------------------------------------------------------------------- */

static int ceil_log2(int64_t v) {
  int b = 0;
  while (((int64_t)1 << b) < v) b++;
  return b;
}

template <int kMode>
static cudaError_t set_kernel_attributes(int dynamic_limit) {
  cudaError_t e = cudaFuncSetAttribute(sampling_kernel<kMode>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_limit);
  return e;
}

/* Per-context set-up: whether the kernels run their sm_90 code (pdl), the
 * dynamic shared memory limit and the largest cluster (16, 8, 4 or 2; 1
 * before sm_90 or without sm_90 code) the device can co-schedule with it.
 * Never fails the context: without clusters the sampling ops cover fewer
 * vocabulary sizes. */
void ingot_cuda_sampling_general_init(struct ingot_context *ctx) {
  ctx->cuda->sampling.init_error = "not initialised";
  /* Programmatic dependent launch only where the kernels hold the sm_90
   * code: the compute_80 PTX that a newer GPU JIT-compiles has no
   * griddepcontrol.wait, so launched with the attribute such a kernel could
   * read its inputs before the kernel writing them (one that triggers its
   * dependents early) has finished. */
  cudaFuncAttributes pa;
  ctx->cuda->sampling.pdl = ctx->cc_major >= 9 &&
                      cudaFuncGetAttributes(&pa, sampling_kernel<kSample>) == cudaSuccess &&
                      pa.ptxVersion >= 90;
  cudaGetLastError();
  ctx->cuda->sampling.max_cluster = 1;
  ctx->cuda->sampling.dynamic_smem = 0;
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, sampling_kernel<kSample>);
  int limit = e == cudaSuccess ? ctx->cuda->smem_optin - (int)fa.sharedSizeBytes : 0;
  /* the first limit is the documented one; step down if a driver wants
   * room of its own */
  for (int attempt = 0; attempt < 8 && limit > 0; attempt++, limit -= 1024) {
    e = set_kernel_attributes<kSoftmax>(limit);
    if (e == cudaSuccess) e = set_kernel_attributes<kSample>(limit);
    if (e == cudaSuccess) break;
    cudaGetLastError();
  }
  if (e != cudaSuccess || limit <= 0) {
    ctx->cuda->sampling.init_error = e != cudaSuccess ? cudaGetErrorString(e) : "no shared memory";
    cudaGetLastError();
    return;
  }
  ctx->cuda->sampling.init_error = nullptr;
  ctx->cuda->sampling.dynamic_smem = limit;
  /* Clusters need the sm_90 code: on a newer GPU that JIT-compiles the
   * compute_80 PTX, cluster_blocks() is 1 and a row must be one block. */
  if (ctx->cc_major < 9 || fa.ptxVersion < 90) return;
  const bool nonportable =
      cudaFuncSetAttribute(sampling_kernel<kSample>,
                           cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess &&
      cudaFuncSetAttribute(sampling_kernel<kSoftmax>,
                           cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
  cudaGetLastError();
  /* the largest cluster the device co-schedules at full shared memory */
  ctx->cuda->sampling.max_cluster =
      largest_cluster(sampling_kernel<kSample>, kThreads, (size_t)limit, nonportable);
}

namespace {

typedef GeneralGeometry Geometry;

/* Tokens per block for c blocks a row: a multiple of 32, so that every
 * block's tokens start at a bitmask word and a 16-byte boundary. */
int64_t chunk_of(int64_t vocab, int c) { return ((vocab + c - 1) / c + 31) / 32 * 32; }

/* Blocks per row: enough shared memory for the row, about two blocks per
 * SM over the batch, at least kMinTokensPerBlock tokens a block. */
ingot_status choose_geometry(struct ingot_context *ctx, const char *op, int64_t batch,
                             int64_t vocab, bool keep_raw, Geometry *g) {
  /* per token: its value (4 bytes), its raw logit (4, if kept) and its
   * bitmask bit; chunks of 32 tokens */
  const int64_t capacity = ctx->cuda->sampling.dynamic_smem / (keep_raw ? 260 : 132) * 32;
  int fit = 1;
  while (fit <= ctx->cuda->sampling.max_cluster && chunk_of(vocab, fit) > capacity) fit <<= 1;
  if (capacity <= 0)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "the sampling kernels could not be set up on this device (%s)",
                           ctx->cuda->sampling.init_error ? ctx->cuda->sampling.init_error : "?");
  if (fit > ctx->cuda->sampling.max_cluster)
    return ingot_core_fail(
        ctx, INGOT_STATUS_NOT_SUPPORTED, op,
        "vocab_size = %lld does not fit in the shared memory of %d block(s) of this device "
        "(%lld tokens each%s; clusters of more than one block need compute capability 9.0)",
        (long long)vocab, ctx->cuda->sampling.max_cluster, (long long)(capacity > 0 ? capacity : 0),
        keep_raw ? " with the raw-distribution outputs" : "");
  int want = 1;
  while (want < ctx->cuda->sampling.max_cluster &&
         (int64_t)want * batch < 2 * (int64_t)ctx->sm_count &&
         vocab / (2 * want) >= kMinTokensPerBlock)
    want <<= 1;
  g->cluster = want > fit ? want : fit;
  g->chunk = (int)chunk_of(vocab, g->cluster);
  if (batch * g->cluster > INT_MAX)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "batch = %lld needs more than 2^31 - 1 thread blocks", (long long)batch);
  return INGOT_STATUS_SUCCESS;
}

/* The general kernel's geometry for args (host only: nothing is launched),
 * or NOT_SUPPORTED. */
template <int kMode>
ingot_status plan(struct ingot_context *ctx, const char *op, Args &args, Geometry *g) {
  args.keep_raw = kMode == kSample && (args.out.token_raw_logprob ||
                                        (args.out.num_top > 0 &&
                                         !(args.out.flags & INGOT_SAMPLING_TOP_FINAL)));
  ingot_status st = choose_geometry(ctx, op, args.in.batch, args.in.vocab, args.keep_raw, g);
  if (st) return st;
  args.chunk = g->chunk;
  int bits = 63 - ceil_log2(args.in.vocab);
  args.frac_bits = bits > 62 ? 62 : bits;
  return INGOT_STATUS_SUCCESS;
}

template <int kMode>
ingot_status launch(struct ingot_context *ctx, const char *op, const Args &args,
                    const Geometry &g, cudaStream_t stream) {
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  cluster_launch_config(&cfg, attr, (unsigned)(args.in.batch * g.cluster), kThreads,
                        (size_t)g.chunk * sizeof(float) * (args.keep_raw ? 2 : 1) +
                            (size_t)g.chunk / 8,
                        stream, ctx->cc_major >= 9 ? g.cluster : 0, ctx->cuda->sampling.pdl != 0);
  INGOT_CUDA_TRY(ctx, op, cudaLaunchKernelEx(&cfg, sampling_kernel<kMode>, args));
  return ingot_cuda_check_launch(ctx, op);
}

}  // namespace

ingot_status ingot_cuda_sampling_general_plan(struct ingot_context *ctx, const char *op,
                                              int softmax, SamplingArgs *args,
                                              GeneralGeometry *g) {
  return softmax ? plan<kSoftmax>(ctx, op, *args, g) : plan<kSample>(ctx, op, *args, g);
}

ingot_status ingot_cuda_sampling_general_launch(struct ingot_context *ctx, const char *op,
                                                int softmax, const SamplingArgs &args,
                                                const GeneralGeometry &g,
                                                struct CUstream_st *stream) {
  return softmax ? launch<kSoftmax>(ctx, op, args, g, stream)
                 : launch<kSample>(ctx, op, args, g, stream);
}
