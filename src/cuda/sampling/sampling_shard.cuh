/*
 * Sharded sampling, CUDA backend: the device helpers of the steps
 * (sampling_shard.cu) and the finishes (sampling_shard_finish.cu). The rules
 * are the Sharded sampling section of include/ingot/ingot.h; the steps and
 * the record layout are common/sampling_shard.h; the reference these
 * kernels follow line for line is src/cpu/sampling_shard_cpu.c (the same
 * state machine, the same records byte for byte).
 *
 * Shape: ONE thread block a row (kThreads threads), a launch a step. The
 * block rebuilds the row's values over the shard's slice in the workspace
 * (global memory: l, then s = (l - m) / T), then combines them with block
 * reductions that are exact and order-free: maxima with the lowest id on
 * ties, ORs, integer counts, and the 192-bit exact sums of
 * common/sampling_exact_sum.h. Lists in rank order (candidates, top-n) come
 * from a radix selection over the rank key |s| bits (ties by id) and a
 * bitonic sort; the S gathered lists are merged by computing each entry's
 * rank (binary search in the other lists). Small serial parts (absorbing
 * the previous step's records into the row's state) run on thread 0, as
 * the CPU code does, so the same decisions are taken on the same values.
 * Correct first: no cluster, no shared-memory copy of the slice.
 */
#ifndef INGOT_CUDA_SAMPLING_SHARD_CUH
#define INGOT_CUDA_SAMPLING_SHARD_CUH

#include <climits>
#include <cmath>

#include "common/sampling_exact_sum.h"
#include "common/sampling_ref.h"
#include "common/sampling_shard.h"
#include "cuda/sampling/sampling_common.cuh"

namespace ingot_shard {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxList = INGOT_SAMPLING_MAX_TOP; /* 1024: kc and n, a power of two */
constexpr uint32_t kNoCut = 0xffffffffu;       /* above every key (at most 0x7f800000) */

/* The CPU's modes, plus the CUDA row with a bad per-row value (the CPU
 * refuses such a call before running). */
enum { kModeEmpty = 0, kModeGreedy = 1, kModeDraw = 2, kModeBad = 3 };
enum { kGoalNone = 0, kGoalCandidates = 1, kGoalTopK = 2, kGoalTopP = 3 };

/* A row's state between steps (workspace; the CPU's row_state). */
struct RowState {
  uint32_t flags;
  int32_t mode;
  uint32_t count;
  int32_t max_id;
  float max;
  float raw_max;
  uint32_t cut_key;
  int32_t cut_id;
  uint32_t k_key;
  int32_t k_id;
  int32_t goal;
  uint32_t prefix;
  uint32_t need;
  uint32_t unused;
  double target;
  ingot_exact_sum mass_before;
};

struct RowParams {
  float temperature;
  int32_t top_k;
  float top_p, min_p;
  uint64_t seed, position;
};

__device__ __forceinline__ RowParams params_of(const ingot_sampling_input &in, int64_t r) {
  RowParams p;
  p.temperature = in.temperature ? in.temperature[r] : 1.0f;
  p.top_k = in.top_k ? in.top_k[r] : 0;
  p.top_p = in.top_p ? in.top_p[r] : 1.0f;
  p.min_p = in.min_p ? in.min_p[r] : 0.0f;
  p.seed = in.seed ? in.seed[r] : 0;
  p.position = in.position ? in.position[r] : 0;
  return p;
}

/* A row the CUDA steps flag BAD_PARAMETER: a value that breaks
 * ingot_sampling_params_check, or a top-k / top-p that neither the
 * candidates nor the plan's selections serve (the CPU's check_rows_served,
 * src/core/sampling_shard_api.c). */
__device__ __forceinline__ bool row_bad(const ingot_sampling_shard_call &c, const RowParams &p) {
  if (ingot_sampling_params_check(p.temperature, p.top_k, p.top_p, p.min_p) != 0) return true;
  if (p.temperature == 0.0f) return false;
  const int64_t V = c.in.vocab, kc = c.max_top_k, k = p.top_k;
  if (kc > 0 && (V <= kc || (k >= 1 && k <= kc))) return false;
  if (k > 0 && k < V && !(c.flags & INGOT_SAMPLING_SHARD_SELECT_TOP_K)) return true;
  if (p.top_p < 1.0f && !(c.flags & INGOT_SAMPLING_SHARD_SELECT_TOP_P)) return true;
  return false;
}

__device__ __forceinline__ const void *logits_row(const ingot_sampling_input &in, int64_t r) {
  const size_t elem = in.dtype == INGOT_DTYPE_F32 ? 4 : 2;
  return static_cast<const char *>(in.logits) + (size_t)(r * in.logits_stride) * elem;
}

__device__ __forceinline__ uint32_t shard_key(float s) { return ingot_shard_rank_key(s); }
__device__ __forceinline__ float key_value(uint32_t key) { return ingot_shard_key_value(key); }

__device__ __forceinline__ bool in_prefix(uint32_t key, int32_t id, uint32_t cut_key,
                                          int32_t cut_id) {
  return key < cut_key || (key == cut_key && id <= cut_id);
}

__device__ __forceinline__ float min_p_threshold(float min_p) {
  return min_p > 0.0f ? ingot_sampling_ref_log(min_p) : -INFINITY;
}

/* Token (s, id) of a kModeDraw row is in F. */
__device__ __forceinline__ bool in_final(const RowState &st, float s, int32_t id,
                                         float threshold) {
  if (s == -INFINITY || s < threshold) return false;
  return in_prefix(shard_key(s), id, st.cut_key, st.cut_id);
}

/* The tokens the rounds of `goal` count: finite s, and (top-p) in K. */
__device__ __forceinline__ bool in_universe(const RowState &st, int goal, float s, int32_t id) {
  if (s == -INFINITY) return false;
  return goal == kGoalTopK || in_prefix(shard_key(s), id, st.k_key, st.k_id);
}

/* ---- block reductions (every thread gets the result) -------------------------------- */

/* The maximum of (value, id) pairs with the lowest id on equal values;
 * id -1 is none. `s` rides along (the draw's s). */
struct Best {
  float value;
  int32_t id;
  float s;
};

__device__ __forceinline__ void take_best(Best &a, const Best &b) {
  if (b.id >= 0 && (a.id < 0 || b.value > a.value || (b.value == a.value && b.id < a.id))) a = b;
}

__device__ __forceinline__ Best no_best() {
  Best b;
  b.value = -INFINITY;
  b.id = -1;
  b.s = 0.0f;
  return b;
}

static __device__ __noinline__ Best block_best(Best a) {
  __shared__ Best part[kWarps];
  for (int o = 16; o > 0; o >>= 1) {
    Best b;
    b.value = __shfl_xor_sync(0xffffffffu, a.value, o);
    b.id = __shfl_xor_sync(0xffffffffu, a.id, o);
    b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
    take_best(a, b);
  }
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = a;
  __syncthreads();
  Best out = no_best();
  for (int w = 0; w < kWarps; w++) take_best(out, part[w]);
  __syncthreads();
  return out;
}

static __device__ __noinline__ unsigned long long block_sum(unsigned long long x) {
  __shared__ unsigned long long part[kWarps];
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
  __syncthreads();
  unsigned long long out = 0;
  for (int w = 0; w < kWarps; w++) out += part[w];
  __syncthreads();
  return out;
}

static __device__ __noinline__ uint32_t block_or(uint32_t x) {
  __shared__ uint32_t part[kWarps];
  for (int o = 16; o > 0; o >>= 1) x |= __shfl_xor_sync(0xffffffffu, x, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
  __syncthreads();
  uint32_t out = 0;
  for (int w = 0; w < kWarps; w++) out |= part[w];
  __syncthreads();
  return out;
}

/* The exact sum of every thread's exact sum (integer addition: any order). */
static __device__ __noinline__ ingot_exact_sum block_exact_sum(ingot_exact_sum a) {
  __shared__ ingot_exact_sum part[kWarps];
  for (int o = 16; o > 0; o >>= 1) {
    ingot_exact_sum b;
    for (int k = 0; k < 3; k++) b.word[k] = __shfl_xor_sync(0xffffffffu, a.word[k], o);
    ingot_exact_sum_add(&a, &b);
  }
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = a;
  __syncthreads();
  ingot_exact_sum out;
  ingot_exact_sum_clear(&out);
  for (int w = 0; w < kWarps; w++) ingot_exact_sum_add(&out, &part[w]);
  __syncthreads();
  return out;
}

/* Calls fn(j, rank) for each j in [0, n) with pred(j), rank = its position
 * among them in ascending j, while the ranks before the tile are below
 * `limit` (a tile of kThreads at a time; uniform trip count). */
template <class Pred, class Fn>
__device__ void scan_in_order(int64_t n, const Pred &pred, Fn fn, uint64_t limit) {
  __shared__ uint32_t warp_total[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint64_t base = 0;
  for (int64_t t0 = 0; t0 < n && base < limit; t0 += kThreads) {
    const int64_t j = t0 + threadIdx.x;
    const bool hit = j < n && pred(j);
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_total[warp] = (uint32_t)__popc(ballot);
    __syncthreads();
    uint32_t offset = 0, total = 0;
    for (int w = 0; w < kWarps; w++) {
      const uint32_t c = warp_total[w];
      if (w < warp) offset += c;
      total += c;
    }
    if (hit) fn(j, base + offset + (uint32_t)__popc(ballot & ((1u << lane) - 1u)));
    __syncthreads();
    base += total;
  }
}

/* ---- the row's values over the slice ------------------------------------------------- */

struct SliceStats {
  uint32_t flags; /* NAN | BAD_ENTRY */
  uint32_t count; /* allowed tokens */
  Best max;       /* the allowed maximum of l, lowest id */
};

/* v[0, Vr) <- the row's l over the slice, -Inf outside the allowed set
 * (ingot_cpu_row_allowed), then s = (l - max) / T for the allowed tokens
 * when `scale` (ingot_cpu_row_scale). Collective; v is visible to the whole
 * block on return. */
static __device__ __noinline__ SliceStats build_values(const ingot_sampling_shard_call &c, int64_t r,
                                                float *v, bool scale, float max, float T) {
  const ingot_sampling_input &in = c.in;
  const int64_t Vr = c.vocab_count, v0 = c.vocab_begin;
  if (Vr > 0) {
    const void *row = logits_row(in, r);
    for (int64_t j = threadIdx.x; j < Vr; j += kThreads) v[j] = ingot_sampling_load(row, in.dtype, j);
  }
  __syncthreads();
  /* bias in list order, bans (a token outside [0, V) is flagged by every shard) */
  uint32_t flags = ingot_sampling::apply_lists(in, r, v0, (int)Vr, v);
  __syncthreads();
  const uint32_t *words = in.allowed ? in.allowed + r * in.allowed_stride : nullptr;
  uint32_t count = 0;
  Best m = no_best();
  for (int64_t j = threadIdx.x; j < Vr; j += kThreads) {
    const float x = v[j];
    const int64_t i = v0 + j;
    if (!ingot_f32_finite(x)) {
      if (x != -INFINITY) flags |= INGOT_SAMPLING_ROW_NAN;
      v[j] = -INFINITY;
      continue;
    }
    if (words && !((words[i >> 5] >> (i & 31)) & 1u)) {
      v[j] = -INFINITY;
      continue;
    }
    count++;
    Best b;
    b.value = x, b.id = (int32_t)i, b.s = 0.0f;
    take_best(m, b);
    if (scale) v[j] = __fdiv_rn(__fsub_rn(x, max), T);
  }
  SliceStats s;
  s.flags = block_or(flags);
  s.count = (uint32_t)block_sum(count);
  s.max = block_best(m);
  return s;
}

/* ---- lists in rank order ----------------------------------------------------------- */

typedef ingot_shard_ranked Pair;

/* Rank order (value descending = key ascending, then id ascending); id < 0
 * (padding) after everything. */
__device__ __forceinline__ bool before(const Pair &a, const Pair &b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  const uint32_t ka = shard_key(a.value), kb = shard_key(b.value);
  return ka < kb || (ka == kb && a.id < b.id);
}

/* Sorts list[0, n) (n <= kMaxList) into rank order. Collective. */
static __device__ __noinline__ void sort_list(Pair *list, int n) {
  int size = 1;
  while (size < n) size <<= 1;
  for (int e = n + threadIdx.x; e < size; e += kThreads) list[e] = Pair{-INFINITY, -1};
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int jj = k >> 1; jj > 0; jj >>= 1) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int partner = i ^ jj;
        if (partner > i) {
          const Pair a = list[i], b = list[partner];
          const bool ascending = (i & k) == 0;
          if (ascending ? before(b, a) : before(a, b)) {
            list[i] = b;
            list[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

struct SelectShared {
  uint32_t hist[256];
  uint32_t prefix, remaining, total;
  int all;
  int count;
};

/* The first `want` (<= kMaxList) tokens of the slice in rank order, among
 * those whose src(j) (a value <= 0) is not -Inf, into list (global id v0 +
 * j); returns how many (min(want, candidates)). A radix selection of the
 * want-th key (four rounds of 8 bits over the 31-bit key), the tokens
 * below it and the first of its ties in id order, then a sort. */
template <class Src>
__device__ int select_top(const Src &src, int64_t n, int64_t v0, int want, Pair *list,
                          SelectShared &sh) {
  if (threadIdx.x == 0) sh.prefix = 0, sh.remaining = (uint32_t)want, sh.all = 0, sh.count = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t high = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = sh.prefix;
    for (int64_t j = threadIdx.x; j < n; j += kThreads) {
      const float v = src(j);
      if (v == -INFINITY) continue;
      const uint32_t u = shard_key(v);
      if ((u & high) != prefix) continue;
      atomicAdd(&sh.hist[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (shift == 24) {
        uint64_t total = 0;
        for (int b = 0; b < 256; b++) total += sh.hist[b];
        sh.total = (uint32_t)total;
        if (total <= (uint64_t)want) sh.all = 1;
      }
      if (!sh.all) {
        uint32_t below = 0;
        int digit = 255;
        for (int b = 0; b < 256; b++) {
          if (below + sh.hist[b] >= sh.remaining) {
            digit = b;
            break;
          }
          below += sh.hist[b];
        }
        sh.remaining -= below;
        sh.prefix |= (uint32_t)digit << shift;
      }
    }
    __syncthreads();
    if (sh.all) break;
  }
  const bool all = sh.all != 0;
  const uint32_t cut = sh.prefix, need = sh.remaining;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float v = src(j);
    if (v == -INFINITY) continue;
    if (all || shard_key(v) < cut) list[atomicAdd(&sh.count, 1)] = Pair{v, (int32_t)(v0 + j)};
  }
  __syncthreads();
  if (!all) {
    scan_in_order(
        n,
        [&](int64_t j) {
          const float v = src(j);
          return v != -INFINITY && shard_key(v) == cut;
        },
        [&](int64_t j, uint64_t rank) {
          if (rank < need) list[atomicAdd(&sh.count, 1)] = Pair{src(j), (int32_t)(v0 + j)};
        },
        need);
  }
  __syncthreads();
  const int filled = all ? (int)sh.total : want;
  sort_list(list, filled);
  return filled;
}

/* S gathered lists of `cap` ranked entries (slot j's at base + j * stride),
 * each in rank order up to its first id < 0. */
struct ListView {
  const char *base;
  int64_t stride;
  int cap;
  int slots;
  __device__ Pair at(int slot, int i) const {
    return reinterpret_cast<const Pair *>(base + slot * stride)[i];
  }
};

/* The first `want` (<= kMaxList) entries of the S lists merged in rank
 * order, into out; returns how many (min(want, entries)). Each entry's rank
 * is its index plus, in every other list, the entries before it (binary
 * search): the order of a sort of the union, as the CPU merges them. An
 * entry equal to one of another list (only if shards' ranges overlap, which
 * the CPU refuses and CUDA cannot see) counts the earlier slot's copy as
 * before it, so every rank below the count is still written exactly once.
 * len: shared scratch of INGOT_SAMPLING_SHARD_MAX_SHARDS ints. */
static __device__ __noinline__ int merge_lists(const ListView &l, int want, Pair *out, int *len) {
  uint64_t mine = 0;
  for (int slot = threadIdx.x; slot < l.slots; slot += kThreads) {
    int n = 0;
    while (n < l.cap && l.at(slot, n).id >= 0) n++;
    len[slot] = n;
    mine += (uint64_t)n;
  }
  const uint64_t total = block_sum(mine); /* synchronises: len is visible */
  const int64_t entries = (int64_t)l.slots * l.cap;
  for (int64_t e = threadIdx.x; e < entries; e += kThreads) {
    const int slot = (int)(e / l.cap), i = (int)(e % l.cap);
    if (i >= len[slot]) continue;
    const Pair x = l.at(slot, i);
    int64_t rank = i;
    for (int other = 0; other < l.slots && rank < want; other++) {
      if (other == slot) continue;
      int lo = 0, hi = len[other]; /* entries of `other` before x: a prefix */
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        const Pair y = l.at(other, mid);
        if (other < slot ? !before(x, y) : before(y, x))
          lo = mid + 1;
        else
          hi = mid;
      }
      rank += lo;
    }
    if (rank < want) out[rank] = x;
  }
  __syncthreads();
  return total < (uint64_t)want ? (int)total : want;
}

/* log of a mass (-Inf for 0), ingot_cpu_log_mass. */
__device__ __forceinline__ double log_mass(const ingot_exact_sum &m) {
  const double z = ingot_exact_sum_value(&m);
  return z > 0.0 ? log(z) : -(double)INFINITY;
}

/* ---- host and device: the workspace and the exchanged records ------------------------ */

inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The workspace of a call: the rows' states, then their values. */
struct Workspace {
  RowState *state;
  float *vals; /* row r at r * Vr */
};

inline Workspace carve(const ingot_sampling_shard_call *c, void *workspace) {
  Workspace w;
  char *p = static_cast<char *>(workspace);
  w.state = reinterpret_cast<RowState *>(p);
  w.vals = reinterpret_cast<float *>(p + round16(sizeof(RowState) * (size_t)c->in.batch));
  return w;
}

/* The exchanged records of a step as the kernels read them. */
struct View {
  const char *base;
  int64_t record_bytes, row_bytes, header_bytes;
  int32_t slots;
  __device__ const char *row(int32_t slot, int64_t r) const {
    return base + slot * record_bytes + header_bytes + r * row_bytes;
  }
  __device__ int64_t begin(int32_t slot) const {
    return reinterpret_cast<const ingot_shard_header *>(base + slot * record_bytes)->vocab_begin;
  }
};

inline View view_of(const ingot_sampling_shard_call *c, const ingot_shard_steps &s, int step,
             const void *gathered) {
  View g;
  const int exchange = s.exchange[step];
  g.base = static_cast<const char *>(gathered);
  g.row_bytes = s.row_bytes[step];
  g.header_bytes = ingot_shard_header_bytes(exchange);
  g.record_bytes = ingot_shard_record_bytes(c->in.batch, g.row_bytes, exchange);
  g.slots = exchange == INGOT_SAMPLING_SHARD_EXCHANGE_SUM ? 1 : c->num_shards;
  return g;
}

}  // namespace ingot_shard

#endif /* INGOT_CUDA_SAMPLING_SHARD_CUH */
