/*
 * The dense kernel's small top-k selection (sampling_dense.cu includes this;
 * no other file does): the exact top-k set of a row held by a cluster, for
 * ingot_sample rows with 1 <= top_k <= small_k, for nucleus rows (their
 * top-small_k set) and for the top-n outputs (n <= small_k) of rows without
 * a filter. small_k <= kSmallK is the dispatcher's (dense_small_k in
 * sampling_dispatch.cu), chosen so that the lists below fit the block's
 * scratch and block 0's values. The steps, and why the set and the token
 * are the reference's, are in the comment above SmallKShared.
 *
 * The functions that are not forced inline are static, internal to the
 * including file as the dense kernel's own helpers: small_k_select
 * (__noinline__) is compiled into each kernel that calls it.
 */
#ifndef INGOT_CUDA_SAMPLING_SMALL_K_CUH
#define INGOT_CUDA_SAMPLING_SMALL_K_CUH

#include <cmath>
#include <cstdint>

#include "common/sampling_ref.h"
#include "cuda/sampling/sampling_cluster.cuh"

namespace ingot_sampling {

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
 *      fit (dense_small_k, sampling_dispatch.cu);
 *   4. block 0 (after a cluster barrier): gathers the lists into its sv, ranks
 *      them by counting, keeps ranks < k: the top-k set in rank order;
 *   5. warp 0 of block 0: top-p, min-p, the draw and the final mass. */
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
static __device__ unsigned long long exact_thread_max(const float *sv, int64_t lo, int wlo,
                                                      int wend, float m, Divisor div_t) {
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
static __device__ void raw_reload(float *sv, const void *raw_row, int wlo, int wend, int n,
                                  float &bm, int &bi) {
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
 * instructions and their time by ~1%
 * (docs/decisions/0015-register-allocation-at-the-edge.md);
 * kDenseSample does not call it.
 * stage, the block's scratch (chunk * 2 bytes, at least C * kSmallK keys:
 * dense_small_k in sampling_dispatch.cu). In block 0 the set is left
 * in sh.top (rank order; 0 past the last candidate) and sh.s, with `draw`
 * also each token's portable exp sh.w and draw key sh.key; the other blocks
 * return after step 3 (block 0 reads their lists until the caller's next
 * cluster barrier). */
static __device__ __noinline__ void small_k_select(float *sv, unsigned long long *stage,
                                                   SmallKShared &sh, int64_t lo, int wlo,
                                                   int wend, float m, const Divisor &div_ref,
                                                   int k, bool draw, uint64_t seed,
                                                   uint64_t position, float hint, int hint_j,
                                                   const void *raw_row = nullptr,
                                                   ingot_dtype dtype = INGOT_DTYPE_F32,
                                                   int n = 0) {
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
static __device__ void small_k_draw(float *sv, unsigned long long *stage, SmallKShared &sh,
                                    int64_t lo, int wlo, int wend, float m, const Divisor &div_t,
                                    int k, float top_p, float min_p, uint64_t seed,
                                    uint64_t position, double total, float hint, int hint_j) {
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

}  // namespace ingot_sampling

#endif /* INGOT_CUDA_SAMPLING_SMALL_K_CUH */
