/*
 * Sampling, CUDA backend: the DENSE kernel, dense_kernel<kMode, kDtype>.
 * Rows of ingot_sampling_softmax and ingot_sample without a filter: masks,
 * bias, bans, temperature, greedy, the Gumbel-max draw and the drawn
 * token's two log-probabilities. That is the common decode step, and it
 * needs no radix select. Also ingot_sample rows with 1 <= top_k <= small_k
 * (any top_p, min_p; calls without top-n outputs): the filters act on the
 * top-k set only, which small_k_draw finds exactly (sampling_small_k.cuh);
 * and the top-n outputs (n <= small_k) of rows without a filter, the same
 * selection (small_k_select, after the second reduction, over the masked
 * values or the logits read again; instantiated as a kernel of its own,
 * kDenseSampleTop). And NUCLEUS rows (top-p and / or min-p without a
 * top-k): the same draw over the row's top-small_k set K, with top-p's
 * total the row's mass (the second reduction), when the final set lies in
 * K; otherwise the row is handed to the general kernel (kHandOffToken in
 * tokens[r], read by that kernel after its wait). Which calls and rows come
 * here is the dispatcher's rule (sampling_dispatch.cu); the general kernel
 * (sampling_general.cu) takes the other rows. The rules are the Sampling
 * section of include/ingot/ingot.h.
 *
 * Shape. ONE launch; a row is processed by a cluster of C blocks (C depends
 * on V and the device, never on B: dense_geometry), block b holding the
 * row's tokens [b * chunk, (b + 1) * chunk) in shared memory, so the logits
 * are read once and the probabilities written once. Block: 16 warps, warp w
 * owns the contiguous tokens [w * chunk / 16, (w + 1) * chunk / 16) of the
 * block; the whole chunk is copied in with cp.async, every copy in flight
 * at once. Two cluster reductions (cluster_reduce, sampling_cluster.cuh:
 * pushed by st.async into each block's inbox, no cluster barrier):
 * ingot_sample's (argmax, flags, the raw distribution's max) after the
 * load, then (mass, raw sum, best key); ingot_sampling_softmax's (argmax,
 * flags) after the load, then the mass, summed over the weights w_i that
 * its exp pass stores in place of the values, so that the write pass is one
 * multiplication a token.
 *
 * What is exact and what is within a tolerance (sampling_cluster.cuh has
 * the part shared with the other paths of groups of 4 tokens):
 *   - the draw keys are the reference's single IEEE operations, so the
 *     drawn token is the CPU's, bit for bit, always (no filter, no
 *     mass-dependent decision); a small top-k or nucleus row's token too
 *     (the reference's own steps on its exact top-k set:
 *     sampling_small_k.cuh);
 *   - the masses are fixed-point sums of terms that each depend only on
 *     their token (fixed_mass), so a row's masses are the same bits however
 *     it is cut: on any batch, and on the wide kernels and the 16-bit
 *     softmax that take some of the same calls; within 1e-6 of the CPU's
 *     double sums. The raw distribution (token_raw_logprob) is summed after
 *     the first reduction, relative to the row's raw maximum, from the
 *     values before the bitmask.
 * The draw evaluates the exact Gumbel noise only where it can matter
 * (kGumbelMax, kApproxSlack: sampling_cluster.cuh's comment).
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
#include "cuda/sampling/sampling_small_k.cuh"

namespace {

using namespace ingot_sampling;

constexpr int kAhead = 4; /* the softmax's write pass: groups loaded at once */

/* ---- the softmax after pass 1 ------------------------------------------------------ */

/* ingot_sampling_softmax after the first reduction (st: the row's argmax
 * and flags): the exp pass stores w_i = e^((x_i - max) / T) over the
 * thread's groups of sv (the block's masked values) and sums them in fixed
 * point, the second reduction gives Z, and the write pass stores p_i = w_i
 * * fp32(1 / Z); one-hot for a greedy row, zeros for an empty row. One exp
 * a token and no loop-carried rescale: with the cheap reductions this beats
 * summing online in pass 1 (one reduction) and evaluating the exp again. */
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

/* ---- the kernel -------------------------------------------------------------------- */

/* Blocks per SM the registers must allow: three for the softmax and the
 * plain sample (64 KB rows at V = 262144, with 8 KB of candidate lists for
 * the sample: dense_scratch_len), two for the kernels with a selection
 * (their scratch holds a row of 16-bit keys; at 40 registers they spill). */
template <int kMode, int kDtype>
__global__ void __launch_bounds__(kDenseThreads, kMode <= kDenseSample ? kDenseBlocksPerSm : 2)
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
   * every access (docs/decisions/0015-register-allocation-at-the-edge.md). */
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
   * whose softmax was measured at 49.9 us at B = 64) */
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

/* Per-context set-up: the dynamic shared memory limit of the dense kernels
 * and the cluster size they use (16 where the device co-schedules it, 8,
 * ...; 1 before sm_90 or without sm_90 code). Never fails the context: the
 * general kernel then serves every call. */
void ingot_cuda_sampling_dense_init(struct ingot_context *ctx) {
  ctx->cuda->sampling.dense_cluster = 0;
  ctx->cuda->sampling.dense_smem = 0;
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
  const DenseKernel k =
      softmax ? dense_kernel_for<kDenseSoftmax>(dtype) : dense_kernel_for<kDenseSample>(dtype);
  if (guard.enter(ctx->device) != cudaSuccess ||
      (half ? ingot_cuda_sampling_half_blocks_per_sm(&blocks, dtype, chunk)
            : cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                  &blocks, k, kDenseThreads, dense_smem_bytes(mode, chunk))) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return blocks;
}

ingot_status ingot_cuda_sample_dense(struct ingot_context *ctx, const ingot_sampling_input *in,
                                     const ingot_sampling_output *out, DenseMode mode, int split,
                                     int small_k, struct CUstream_st *stream) {
  DenseArgs args = {};
  args.in = *in;
  args.out = *out;
  args.row_status = out->row_status;
  args.split = split;
  args.small_k = small_k;
  static const char op[] = "ingot_sample";
  switch (mode) {
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
  return dense_launch<kDenseSoftmax>(ctx, op, args, stream);
}
