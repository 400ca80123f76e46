/*
 * Sharded sampling, CUDA backend: the steps (ingot_sampling_shard_step) and
 * the workspace query. One launch a step, ONE thread block a row
 * (shard_step_kernel): the block absorbs the previous step's gathered
 * records into the row's state, rebuilds the row's values over the slice
 * and writes the row of this step's record. The records are
 * src/cpu/sampling_shard_cpu.c's byte for byte (common/sampling_shard.h:
 * fixed-width fields, no padding inside a row, little-endian on both
 * sides), so CPU and CUDA shards can exchange them; the finishes and the
 * local exchanges are sampling_shard_finish.cu; the device helpers
 * sampling_shard.cuh.
 *
 * Per-row bad values: the host never reads device values, so a row whose
 * value breaks ingot_sampling_params_check, or whose top-k / top-p the plan
 * does not serve, is flagged on the device as ingot_sample does on CUDA:
 * its STATS row carries INGOT_SAMPLING_ROW_BAD_PARAMETER (count 0, no
 * maximum), its later rows are those of an empty row, and the finish
 * writes token -1, status BAD_PARAMETER, -Inf log-probabilities, top-n
 * slots -1 / -Inf, zero probabilities. The CPU refuses such a call
 * (INVALID_ARGUMENT) instead.
 *
 * Workspace: RowState[B], then the values of every row over the slice,
 * float [B, Vr] (rebuilt at every step, never carried between steps).
 */
#include <climits>
#include <cmath>
#include <cstring>

#include "cuda/common.cuh"
#include "cuda/cuda.cuh"
#include "cuda/sampling/sampling_shard.cuh"

using namespace ingot_shard;

namespace {

struct StepArgs {
  ingot_sampling_shard_call c;
  int kind, round, prev_kind, prev_round;
  View g;               /* the previous step's records (step > 0) */
  char *record;         /* this step's record */
  int64_t row_bytes;    /* of this step */
  int64_t header_bytes; /* of this step's record */
  int64_t used_bytes, total_bytes;
  uint64_t header[INGOT_SHARD_SUM_HEADER_BYTES / 8]; /* this shard's header, header_bytes of it */
  Workspace w;
};

/* A cut found by the last radix round, resolved once the slice is known. */
struct PendingTie {
  int pending;
  int of_top_k;
  uint32_t key;
  int64_t take;
};

struct StepShared {
  RowState st;
  PendingTie tie;
  int32_t tie_id;
  uint64_t count[INGOT_SHARD_BUCKETS];
  ingot_exact_sum mass[INGOT_SHARD_BUCKETS];
  uint32_t hist[INGOT_SHARD_BUCKETS];
  unsigned long long limbs[INGOT_SHARD_BUCKETS][6]; /* 32-bit limbs of exact masses */
  SelectShared select;
  Pair list[kMaxList];
  int len[INGOT_SAMPLING_SHARD_MAX_SHARDS];
};

/* ---- absorbing the previous step's records (the CPU's absorb_*) ---------------------- */

/* Thread 0. */
__device__ void absorb_stats(const StepArgs &a, int64_t r, const RowParams &p, RowState &st) {
  uint32_t flags = 0;
  uint64_t count = 0;
  Best m = no_best(), raw = no_best();
  for (int32_t slot = 0; slot < a.g.slots; slot++) {
    const ingot_shard_stats s = *reinterpret_cast<const ingot_shard_stats *>(a.g.row(slot, r));
    flags |= s.flags;
    count += s.count;
    take_best(m, Best{s.max, s.max_id, 0.0f});
    take_best(raw, Best{s.raw_max, s.raw_max_id, 0.0f});
  }
  memset(&st, 0, sizeof st);
  st.count = (uint32_t)count;
  st.max = m.value;
  st.max_id = m.id;
  st.raw_max = raw.value;
  st.cut_key = st.k_key = kNoCut;
  st.cut_id = st.k_id = -1;
  st.goal = kGoalNone;
  if ((flags & INGOT_SAMPLING_ROW_BAD_PARAMETER) || row_bad(a.c, p)) {
    st.mode = kModeBad;
    flags = INGOT_SAMPLING_ROW_BAD_PARAMETER;
  } else if (count == 0 || m.id < 0) {
    st.mode = kModeEmpty;
    flags |= INGOT_SAMPLING_ROW_EMPTY;
  } else if (p.temperature == 0.0f) {
    st.mode = kModeGreedy;
  } else {
    st.mode = kModeDraw;
    const int64_t k = p.top_k, kc = a.c.max_top_k;
    const bool topk_on = k > 0 && (uint64_t)k < count;
    const bool served = kc > 0 && (a.c.in.vocab <= kc || (k >= 1 && k <= kc));
    if (topk_on || p.top_p < 1.0f)
      st.goal = served ? kGoalCandidates : topk_on ? kGoalTopK : kGoalTopP;
    st.need = (uint32_t)k;
  }
  st.flags = flags;
}

/* Collective: the merged candidates hold the row's top-k set K in rank
 * order; top-k and top-p on it as ingot_cpu_top_p_keep. */
__device__ void absorb_candidates(const StepArgs &a, int64_t r, const RowParams &p,
                                  StepShared &sh) {
  if (sh.st.goal != kGoalCandidates) return; /* uniform: sh.st is shared */
  ListView l;
  l.base = a.g.row(0, r);
  l.stride = a.g.record_bytes;
  l.cap = a.c.max_top_k;
  l.slots = a.g.slots;
  const int n = merge_lists(l, a.c.max_top_k, sh.list, sh.len);
  if (threadIdx.x == 0) {
    RowState &st = sh.st;
    st.goal = kGoalNone;
    if (n > 0) {
      /* keep <= kc: a served row has top_k <= kc, or V <= kc */
      int64_t keep = n;
      if (p.top_k > 0 && (uint32_t)p.top_k < st.count && p.top_k < keep) keep = p.top_k;
      if (p.top_p < 1.0f) {
        ingot_exact_sum total, cumulative;
        ingot_exact_sum_clear(&total);
        for (int64_t j = 0; j < keep; j++)
          ingot_exact_sum_add_f32(&total, ingot_sampling_ref_exp(sh.list[j].value));
        const double target = ingot_sampling_top_p_target(p.top_p, &total);
        ingot_exact_sum_clear(&cumulative);
        for (int64_t j = 0; j < keep; j++) {
          ingot_exact_sum_add_f32(&cumulative, ingot_sampling_ref_exp(sh.list[j].value));
          if (ingot_sampling_top_p_reached(&cumulative, target)) {
            keep = j + 1;
            break;
          }
        }
      }
      st.cut_key = shard_key(sh.list[keep - 1].value);
      st.cut_id = sh.list[keep - 1].id;
    }
  }
  __syncthreads();
}

/* This shard's share of `take` tokens with key U in bucket d of the last
 * round, the shards ordered by v0 (thread 0). */
__device__ int64_t own_take(const StepArgs &a, int64_t r, int d, int64_t take) {
  int64_t before = 0, own = 0;
  for (int32_t slot = 0; slot < a.g.slots; slot++) {
    const int64_t n = reinterpret_cast<const uint32_t *>(a.g.row(slot, r))[d];
    if (slot == a.c.shard_index)
      own = n;
    else if (a.g.begin(slot) < a.c.vocab_begin)
      before += n;
  }
  if (take <= before) return 0;
  return take - before < own ? take - before : own;
}

/* Collective: a radix round's records -> the selection's next state. */
__device__ void absorb_round(const StepArgs &a, int64_t r, int goal, int round,
                             const RowParams &p, StepShared &sh) {
  if (sh.st.goal != goal) return; /* uniform */
  const int bits = ingot_shard_digit_bits(round), buckets = 1 << bits;
  const bool last = round == INGOT_SHARD_ROUNDS - 1;
  const uint32_t prefix = sh.st.prefix;
  for (int d = threadIdx.x; d < buckets; d += kThreads) {
    sh.count[d] = 0;
    ingot_exact_sum_clear(&sh.mass[d]);
    if (!last) {
      const uint64_t *row = reinterpret_cast<const uint64_t *>(a.g.row(0, r));
      if (goal == kGoalTopK)
        sh.count[d] = row[d];
      else
        ingot_exact_sum_from_limbs(row + (size_t)d * INGOT_EXACT_SUM_LIMBS, &sh.mass[d]);
      continue;
    }
    uint64_t c = 0;
    for (int32_t slot = 0; slot < a.g.slots; slot++)
      c += reinterpret_cast<const uint32_t *>(a.g.row(slot, r))[d];
    sh.count[d] = c;
    const uint32_t key = (prefix << bits) | (uint32_t)d;
    if (goal == kGoalTopP && c > 0 && key < 0x7f800000u)
      ingot_exact_sum_add_f32_times(&sh.mass[d], ingot_sampling_ref_exp(key_value(key)),
                                    c > UINT32_MAX ? UINT32_MAX : (uint32_t)c);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    RowState &st = sh.st;
    PendingTie &tie = sh.tie;
    int d = 0;
    bool done = false;
    if (goal == kGoalTopK) {
      if (round == 0) {
        uint64_t finite = 0;
        for (int b = 0; b < buckets; b++) finite += sh.count[b];
        if (st.need > finite) { /* k beyond the finite tokens: K is all of them */
          st.goal = p.top_p < 1.0f ? kGoalTopP : kGoalNone;
          st.prefix = 0;
          done = true;
        }
      }
      if (!done)
        for (; d < buckets && sh.count[d] < st.need; d++) st.need -= (uint32_t)sh.count[d];
    } else {
      if (round == 0) {
        ingot_exact_sum total;
        ingot_exact_sum_clear(&total);
        for (int b = 0; b < buckets; b++) ingot_exact_sum_add(&total, &sh.mass[b]);
        st.target = ingot_sampling_top_p_target(p.top_p, &total);
        ingot_exact_sum_clear(&st.mass_before);
      }
      for (; d < buckets; d++) {
        ingot_exact_sum through = st.mass_before;
        ingot_exact_sum_add(&through, &sh.mass[d]);
        if (ingot_sampling_top_p_reached(&through, st.target)) break;
        st.mass_before = through;
      }
    }
    if (!done && (d == buckets || (last && ((st.prefix << bits) | (uint32_t)d) >= 0x7f800000u))) {
      st.goal = kGoalNone; /* only records that are not ingot's get here */
      done = true;
    }
    if (!done) {
      st.prefix = (st.prefix << bits) | (uint32_t)d;
      if (last) {
        int64_t take = st.need;
        if (goal == kGoalTopP) {
          const float w = ingot_sampling_ref_exp(key_value(st.prefix));
          int64_t lo = 1, hi = (int64_t)sh.count[d];
          while (lo < hi) { /* the fewest tied tokens that reach the target */
            const int64_t mid = lo + (hi - lo) / 2;
            ingot_exact_sum through = st.mass_before;
            ingot_exact_sum_add_f32_times(&through, w, (uint32_t)mid);
            if (ingot_sampling_top_p_reached(&through, st.target))
              hi = mid;
            else
              lo = mid + 1;
          }
          take = lo;
        }
        tie.pending = 1;
        tie.of_top_k = goal == kGoalTopK;
        tie.key = st.prefix;
        tie.take = own_take(a, r, d, take);
        st.prefix = 0;
        st.goal = goal == kGoalTopK && p.top_p < 1.0f ? kGoalTopP : kGoalNone;
      }
    }
  }
  __syncthreads();
}

/* Collective: the id of this shard's take-th token with key U in the
 * universe (-1 for none; the last one if fewer), as resolve_tie. */
__device__ void resolve_tie(const StepArgs &a, const float *v, StepShared &sh) {
  const PendingTie t = sh.tie;
  const int64_t Vr = a.c.vocab_count, v0 = a.c.vocab_begin;
  auto match = [&](int64_t j) {
    const float s = v[j];
    if (s == -INFINITY || shard_key(s) != t.key) return false;
    return t.of_top_k || in_universe(sh.st, kGoalTopP, s, (int32_t)(v0 + j));
  };
  unsigned long long mine = 0;
  for (int64_t j = threadIdx.x; j < Vr; j += kThreads) mine += match(j) ? 1u : 0u;
  const uint64_t total = block_sum(mine);
  const uint64_t want = (uint64_t)t.take < total ? (uint64_t)t.take : total;
  if (threadIdx.x == 0) sh.tie_id = -1;
  __syncthreads();
  if (want > 0)
    scan_in_order(Vr, match, [&](int64_t j, uint64_t rank) {
      if (rank == want - 1) sh.tie_id = (int32_t)(v0 + j);
    }, want);
  __syncthreads();
  if (threadIdx.x == 0) {
    RowState &st = sh.st;
    if (t.of_top_k) {
      st.k_key = t.key, st.k_id = sh.tie_id;
      if (st.goal == kGoalNone) st.cut_key = t.key, st.cut_id = sh.tie_id; /* top-p off: P = K */
    } else {
      st.cut_key = t.key, st.cut_id = sh.tie_id;
    }
  }
  __syncthreads();
}

/* ---- this step's records (the CPU's record_*) ------------------------------------------ */

__device__ void record_stats(const StepArgs &a, int64_t r, const RowParams &p, float *v,
                             char *out) {
  ingot_shard_stats s;
  s.flags = INGOT_SAMPLING_ROW_BAD_PARAMETER;
  s.count = 0;
  s.max = -INFINITY, s.max_id = -1;
  s.raw_max = -INFINITY, s.raw_max_id = -1;
  if (!row_bad(a.c, p)) { /* uniform */
    const SliceStats t = build_values(a.c, r, v, false, 0.0f, 1.0f);
    Best raw = no_best();
    const int64_t Vr = a.c.vocab_count;
    if (Vr > 0) {
      const void *row = logits_row(a.c.in, r);
      for (int64_t j = threadIdx.x; j < Vr; j += kThreads) {
        const float x = ingot_sampling_load(row, a.c.in.dtype, j);
        if (ingot_f32_finite(x)) take_best(raw, Best{x, (int32_t)(a.c.vocab_begin + j), 0.0f});
      }
    }
    raw = block_best(raw);
    s.flags = t.flags;
    s.count = t.count;
    s.max = t.max.value, s.max_id = t.max.id;
    s.raw_max = raw.value, s.raw_max_id = raw.id;
  }
  if (threadIdx.x == 0) *reinterpret_cast<ingot_shard_stats *>(out) = s;
}

/* The shard's first kc tokens with finite s, in rank order. */
__device__ void record_candidates(const StepArgs &a, const float *v, StepShared &sh, char *out) {
  const int kc = a.c.max_top_k;
  int n = 0;
  if (sh.st.goal == kGoalCandidates) /* uniform */
    n = select_top([&](int64_t j) { return v[j]; }, a.c.vocab_count, a.c.vocab_begin, kc,
                   sh.list, sh.select);
  Pair *o = reinterpret_cast<Pair *>(out);
  for (int j = threadIdx.x; j < kc; j += kThreads) o[j] = j < n ? sh.list[j] : Pair{-INFINITY, -1};
}

/* A mass term w (an fp32 in [0, 1]) into 32-bit limbs held in 64-bit words
 * (2^32 terms cannot overflow them). */
__device__ __forceinline__ void add_limbs(unsigned long long *limb, float w) {
  const uint32_t bits = __float_as_uint(w) & 0x7fffffffu;
  const uint32_t field = bits >> 23;
  uint64_t mantissa = bits & 0x7fffffu;
  if (mantissa == 0 && field == 0) return;
  if (field != 0) mantissa |= 0x800000u;
  const unsigned shift = field ? field - 1u : 0u; /* <= 126 */
  const uint64_t v = mantissa << (shift & 31u);     /* < 2^55 */
  atomicAdd(&limb[shift >> 5], (unsigned long long)(v & 0xffffffffu));
  if (v >> 32) atomicAdd(&limb[(shift >> 5) + 1], (unsigned long long)(v >> 32));
}

/* A radix round: per bucket of the digit, the universe's tokens under the
 * prefix (counts; masses in rounds 0-2 of top-p). */
__device__ void record_round(const StepArgs &a, int goal, int round, const float *v,
                             StepShared &sh, char *out) {
  const int shift = ingot_shard_digit_shift(round), bits = ingot_shard_digit_bits(round);
  const bool last = round == INGOT_SHARD_ROUNDS - 1;
  const bool masses = goal == kGoalTopP && !last;
  for (int d = threadIdx.x; d < INGOT_SHARD_BUCKETS; d += kThreads) {
    sh.hist[d] = 0;
    for (int k = 0; k < 6; k++) sh.limbs[d][k] = 0;
  }
  __syncthreads();
  if (sh.st.goal == goal) { /* uniform */
    const RowState &st = sh.st;
    const int64_t v0 = a.c.vocab_begin;
    for (int64_t j = threadIdx.x; j < a.c.vocab_count; j += kThreads) {
      const float s = v[j];
      if (!in_universe(st, goal, s, (int32_t)(v0 + j))) continue;
      const uint32_t key = shard_key(s);
      if ((key >> (shift + bits)) != st.prefix) continue;
      const int d = (int)((key >> shift) & ((1u << bits) - 1u));
      atomicAdd(&sh.hist[d], 1u);
      if (masses) add_limbs(sh.limbs[d], ingot_sampling_ref_exp(s));
    }
  }
  __syncthreads();
  if (last) {
    for (int d = threadIdx.x; d < INGOT_SHARD_LAST_BUCKETS; d += kThreads)
      reinterpret_cast<uint32_t *>(out)[d] = sh.hist[d];
  } else if (masses) {
    for (int d = threadIdx.x; d < INGOT_SHARD_BUCKETS; d += kThreads) {
      ingot_exact_sum m;
      ingot_exact_sum_clear(&m);
      for (unsigned k = 0; k < 6; k++) ingot_exact_sum_add_shifted(&m, sh.limbs[d][k], 32u * k);
      uint64_t limb[INGOT_EXACT_SUM_LIMBS];
      ingot_exact_sum_to_limbs(&m, limb);
      uint64_t *o = reinterpret_cast<uint64_t *>(out) + (size_t)d * INGOT_EXACT_SUM_LIMBS;
      for (int k = 0; k < INGOT_EXACT_SUM_LIMBS; k++) o[k] = limb[k];
    }
  } else {
    for (int d = threadIdx.x; d < INGOT_SHARD_BUCKETS; d += kThreads)
      reinterpret_cast<uint64_t *>(out)[d] = sh.hist[d];
  }
}

/* The DRAW row: best key over the shard's part of F, both masses, top-n. */
__device__ void record_draw(const StepArgs &a, int64_t r, const RowParams &p, const float *v,
                            StepShared &sh, char *out) {
  const RowState &st = sh.st;
  const int64_t Vr = a.c.vocab_count, v0 = a.c.vocab_begin;
  const int n = a.c.num_top;
  const bool final_top = n > 0 && (a.c.flags & INGOT_SAMPLING_SHARD_TOP_FINAL);
  const bool raw_top = n > 0 && !final_top;
  ingot_shard_draw d;
  d.key = -INFINITY, d.id = -1, d.s = 0.0f, d.raw = -INFINITY;
  ingot_exact_sum_clear(&d.mass);
  ingot_exact_sum_clear(&d.raw_mass);
  int filled = 0;
  if (st.mode == kModeDraw) {
    const float threshold = min_p_threshold(p.min_p);
    ingot_exact_sum mass;
    ingot_exact_sum_clear(&mass);
    Best best = no_best();
    for (int64_t j = threadIdx.x; j < Vr; j += kThreads) {
      const float s = v[j];
      const int32_t id = (int32_t)(v0 + j);
      if (!in_final(st, s, id, threshold)) continue;
      ingot_exact_sum_add_f32(&mass, ingot_sampling_ref_exp(s));
      const float key =
          __fadd_rn(s, ingot_sampling_ref_gumbel(p.seed, p.position, (uint32_t)id));
      take_best(best, Best{key, id, s});
    }
    d.mass = block_exact_sum(mass);
    best = block_best(best);
    d.key = best.value, d.id = best.id, d.s = best.id >= 0 ? best.s : 0.0f;
    if (final_top)
      filled = select_top(
          [&](int64_t j) {
            const float s = v[j];
            return in_final(st, s, (int32_t)(v0 + j), threshold) ? s : -INFINITY;
          },
          Vr, v0, n, sh.list, sh.select);
  } else if (st.mode == kModeGreedy && st.max_id >= v0 && st.max_id - v0 < Vr) {
    d.key = 0.0f, d.id = st.max_id, d.s = 0.0f; /* F = {max_id}, s = 0 */
    ingot_exact_sum_add_f32(&d.mass, ingot_sampling_ref_exp(0.0f));
    if (final_top) {
      if (threadIdx.x == 0) sh.list[0] = Pair{0.0f, st.max_id};
      filled = 1;
    }
  }
  /* the raw distribution softmax(x / T') */
  if (st.mode != kModeBad && st.raw_max != -INFINITY && Vr > 0) {
    const void *row = logits_row(a.c.in, r);
    const float t = p.temperature > 0.0f ? p.temperature : 1.0f;
    const float raw_max = st.raw_max;
    const ingot_dtype dtype = a.c.in.dtype;
    auto raw = [&](int64_t j) {
      const float x = ingot_sampling_load(row, dtype, j);
      if (!ingot_f32_finite(x)) return -INFINITY;
      return __fdiv_rn(__fsub_rn(x, raw_max), t);
    };
    ingot_exact_sum mass;
    ingot_exact_sum_clear(&mass);
    for (int64_t j = threadIdx.x; j < Vr; j += kThreads) {
      const float x = ingot_sampling_load(row, dtype, j);
      if (!ingot_f32_finite(x)) continue;
      ingot_exact_sum_add_f32(&mass, ingot_sampling_ref_exp(__fdiv_rn(__fsub_rn(x, raw_max), t)));
    }
    d.raw_mass = block_exact_sum(mass);
    if (raw_top) filled = select_top(raw, Vr, v0, n, sh.list, sh.select);
    if (d.id >= 0)
      d.raw = __fdiv_rn(__fsub_rn(ingot_sampling_load(row, dtype, d.id - v0), raw_max), t);
  }
  __syncthreads(); /* sh.list of the greedy row */
  if (threadIdx.x == 0) *reinterpret_cast<ingot_shard_draw *>(out) = d;
  Pair *o = reinterpret_cast<Pair *>(out + sizeof(ingot_shard_draw));
  for (int j = threadIdx.x; j < n; j += kThreads) o[j] = j < filled ? sh.list[j] : Pair{-INFINITY, -1};
}

/* The MASS row: sum of w over the shard's part of F. */
__device__ void record_mass(const StepArgs &a, const RowParams &p, const float *v,
                            const RowState &st, char *out) {
  ingot_exact_sum mass;
  ingot_exact_sum_clear(&mass);
  const int64_t Vr = a.c.vocab_count, v0 = a.c.vocab_begin;
  if (st.mode == kModeDraw) {
    const float threshold = min_p_threshold(p.min_p);
    for (int64_t j = threadIdx.x; j < Vr; j += kThreads)
      if (in_final(st, v[j], (int32_t)(v0 + j), threshold))
        ingot_exact_sum_add_f32(&mass, ingot_sampling_ref_exp(v[j]));
    mass = block_exact_sum(mass);
  } else if (st.mode == kModeGreedy && st.max_id >= v0 && st.max_id - v0 < Vr) {
    ingot_exact_sum_add_f32(&mass, ingot_sampling_ref_exp(0.0f));
  }
  if (threadIdx.x == 0) *reinterpret_cast<ingot_exact_sum *>(out) = mass;
}

/* ---- the step kernel: block r = row r ------------------------------------------------------- */

__global__ void __launch_bounds__(kThreads) shard_step_kernel(const StepArgs a) {
  __shared__ StepShared sh;
  const int64_t r = blockIdx.x;
  if (r == 0) { /* the header, and the padding: records are compared and copied as bytes */
    uint64_t *h = reinterpret_cast<uint64_t *>(a.record);
    for (int k = threadIdx.x; k < (int)(a.header_bytes / 8); k += kThreads) h[k] = a.header[k];
    for (int64_t k = a.used_bytes + threadIdx.x; k < a.total_bytes; k += kThreads)
      a.record[k] = 0;
  }
  char *out = a.record + a.header_bytes + r * a.row_bytes;
  float *v = a.w.vals + r * a.c.vocab_count;
  const RowParams p = params_of(a.c.in, r);
  if (a.kind == INGOT_SHARD_STEP_STATS) {
    record_stats(a, r, p, v, out);
    return;
  }
  if (threadIdx.x == 0) {
    sh.tie.pending = 0;
    if (a.prev_kind == INGOT_SHARD_STEP_STATS)
      absorb_stats(a, r, p, sh.st);
    else
      sh.st = a.w.state[r];
  }
  __syncthreads();
  if (a.prev_kind == INGOT_SHARD_STEP_CANDIDATES) absorb_candidates(a, r, p, sh);
  if (a.prev_kind == INGOT_SHARD_STEP_TOPK) absorb_round(a, r, kGoalTopK, a.prev_round, p, sh);
  if (a.prev_kind == INGOT_SHARD_STEP_TOPP) absorb_round(a, r, kGoalTopP, a.prev_round, p, sh);
  /* the slice's values (s) of a row that draws */
  if (sh.st.mode == kModeDraw) {
    build_values(a.c, r, v, true, sh.st.max, p.temperature);
    if (sh.tie.pending) resolve_tie(a, v, sh);
  }
  switch (a.kind) {
    case INGOT_SHARD_STEP_CANDIDATES: record_candidates(a, v, sh, out); break;
    case INGOT_SHARD_STEP_TOPK: record_round(a, kGoalTopK, a.round, v, sh, out); break;
    case INGOT_SHARD_STEP_TOPP: record_round(a, kGoalTopP, a.round, v, sh, out); break;
    case INGOT_SHARD_STEP_DRAW: record_draw(a, r, p, v, sh, out); break;
    default: record_mass(a, p, v, sh.st, out); break;
  }
  if (threadIdx.x == 0) a.w.state[r] = sh.st;
}

static_assert(sizeof(ingot_shard_header) == INGOT_SHARD_HEADER_BYTES, "record header layout");
static_assert(sizeof(ingot_shard_sum_header) == INGOT_SHARD_SUM_HEADER_BYTES, "sum header layout");
static_assert(sizeof(ingot_shard_stats) == 24 && sizeof(ingot_shard_ranked) == 8 &&
                  sizeof(ingot_shard_draw) == 64 && sizeof(ingot_exact_sum) == 24,
              "record rows: the CPU's layout, no padding");
static_assert(sizeof(RowState) == 88, "ingot.h states the CUDA workspace as 88 B + 4 B Vr");

}  // namespace

ingot_status ingot_cuda_sampling_shard_workspace_size(struct ingot_context *ctx,
                                                      const ingot_sampling_shard_call *call,
                                                      size_t *bytes) {
  if (call->in.batch == 0) {
    *bytes = 0;
    return INGOT_STATUS_SUCCESS;
  }
  size_t values = 0; /* every row's values over the slice: B x Vr floats */
  if (__builtin_mul_overflow(sizeof(float) * (size_t)call->in.batch, (size_t)call->vocab_count,
                             &values) ||
      values > (size_t)INT64_MAX / 2)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, "sharded sampling",
                           "batch = %lld x shard: vocab_count = %lld floats of CUDA workspace "
                           "overflow",
                           (long long)call->in.batch, (long long)call->vocab_count);
  *bytes = round16(sizeof(RowState) * (size_t)call->in.batch) + round16(values);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cuda_sampling_shard_step(struct ingot_context *ctx,
                                            const ingot_sampling_shard_call *call, int32_t step,
                                            const void *gathered, void *record, void *workspace,
                                            size_t workspace_bytes, struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_step";
  (void)workspace_bytes;
  const ingot_shard_steps steps = ingot_shard_steps_of(call->max_top_k, call->num_top, call->flags);
  StepArgs a;
  memset(&a, 0, sizeof a);
  a.c = *call;
  a.kind = steps.kind[step];
  a.round = steps.round[step];
  a.prev_kind = step > 0 ? steps.kind[step - 1] : -1;
  a.prev_round = step > 0 ? steps.round[step - 1] : 0;
  if (step > 0) a.g = view_of(call, steps, step - 1, gathered);
  const int exchange = steps.exchange[step];
  a.record = static_cast<char *>(record);
  a.row_bytes = steps.row_bytes[step];
  a.header_bytes = ingot_shard_header_bytes(exchange);
  a.used_bytes = a.header_bytes + call->in.batch * a.row_bytes;
  a.total_bytes = ingot_shard_record_bytes(call->in.batch, a.row_bytes, exchange);
  ingot_shard_header_of(call, step, a.row_bytes, exchange, a.header);
  a.w = carve(call, workspace);
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  shard_step_kernel<<<(unsigned)call->in.batch, kThreads, 0, stream>>>(a);
  return ingot_cuda_check_launch(ctx, op);
}
