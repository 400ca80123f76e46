/*
 * Sharded sampling, CPU reference backend: the steps of the Sharded
 * sampling section of include/ingot/ingot.h on one shard's slice (global
 * ids [v0, v0 + Vr)), over the per-token rules the whole-row CPU ops use
 * (cpu/sampling_cpu_row.h), so that the finish writes their bits.
 *
 * Each step first ABSORBS the gathered records of the previous step into
 * the row's state (every shard computes the same combination: maxima with
 * the lowest id, ORs, integer sums; only the tie resolution below differs
 * by shard), then rescans the slice for its own record.
 *
 * The final set F of a row (T > 0) is the allowed tokens with finite s
 * that are in the kept prefix P of rank order (top-k, then top-p) and pass
 * min-p (s >= log q). P is stored as a CUT: key u = |s| bits (ascending u
 * = descending s) and an id bound, F = {u < cut_key} + {u == cut_key, id
 * <= cut_id}. The candidates give the cut's global id directly. A radix
 * selection ends with the cut's key U and a number `take` of the tokens
 * with key U (in global id order); as the shards hold contiguous ranges,
 * this shard keeps take - (such tokens of the shards before it in v0
 * order), clamped to its own, and converts that to its own id bound.
 *
 * Workspace: state [B] (row_state: carried from step to step), vals [Vr]
 * (l, then s; -Inf outside the allowed set), weights [Vr] (the terms of an
 * exact sum), order [max(Vr, S kc, S n, 1)] (candidates and top-n lists
 * merged), top [max(n, 1)] (this shard's top-n list).
 */
#include <math.h>
#include <string.h>

#include "common/sampling_shard.h"
#include "cpu/cpu.h"
#include "cpu/sampling_cpu_row.h"

typedef ingot_cpu_ranked ranked;
typedef ingot_cpu_row_params row_params;

enum { MODE_EMPTY = 0, MODE_GREEDY = 1, MODE_DRAW = 2 };
enum { GOAL_NONE = 0, GOAL_CANDIDATES = 1, GOAL_TOP_K = 2, GOAL_TOP_P = 3 };

#define NO_CUT 0xffffffffu /* above every key (keys are at most 0x7f800000) */

/* A row's state between steps. */
typedef struct row_state {
  uint32_t flags;  /* status bits of the row (all shards) */
  int32_t mode;    /* MODE_* */
  uint32_t count;  /* allowed tokens (all shards) */
  int32_t max_id;  /* the greedy token */
  float max;       /* m: the allowed maximum */
  float raw_max;   /* the raw maximum */
  uint32_t cut_key; /* the kept prefix P (NO_CUT: every token) ... */
  int32_t cut_id;   /* ... with this shard's id bound at cut_key */
  uint32_t k_key;   /* the top-k set K, universe of the top-p rounds (same form) */
  int32_t k_id;
  int32_t goal;     /* GOAL_*: the selection in progress */
  uint32_t prefix;  /* the key bits the rounds have fixed */
  uint32_t need;    /* top-k: the cut's position from the prefix's first token on */
  double target;    /* top-p: p * sum_K w */
  ingot_exact_sum mass_before; /* top-p: mass of the universe before the prefix */
} row_state;

/* A cut found by the last radix round, resolved once the slice is scanned. */
typedef struct pending_tie {
  int pending;
  int of_top_k;  /* the cut of K (1) or of P (0) */
  uint32_t key;  /* U */
  int64_t take;  /* this shard's tokens with key U that stay */
} pending_tie;

typedef struct shard_scratch {
  row_state *state;
  float *vals, *weights;
  ranked *order, *top;
} shard_scratch;

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static int64_t order_length(const ingot_sampling_shard_call *c) {
  int64_t n = c->vocab_count > 1 ? c->vocab_count : 1;
  int64_t cand = (int64_t)c->num_shards * c->max_top_k, top = (int64_t)c->num_shards * c->num_top;
  if (cand > n) n = cand;
  if (top > n) n = top;
  return n;
}

static size_t top_length(const ingot_sampling_shard_call *c) {
  return c->num_top > 1 ? (size_t)c->num_top : 1;
}

ingot_status ingot_cpu_sampling_shard_workspace_size(struct ingot_context *ctx,
                                                     const ingot_sampling_shard_call *call,
                                                     size_t *bytes) {
  (void)ctx;
  if (call->in.batch == 0) {
    *bytes = 0;
    return INGOT_STATUS_SUCCESS;
  }
  *bytes = round16(sizeof(row_state) * (size_t)call->in.batch) +
           2 * round16(sizeof(float) * (size_t)call->vocab_count) +
           round16(sizeof(ranked) * (size_t)order_length(call)) +
           round16(sizeof(ranked) * top_length(call));
  return INGOT_STATUS_SUCCESS;
}

static shard_scratch carve(const ingot_sampling_shard_call *c, void *workspace) {
  shard_scratch w;
  char *p = (char *)workspace;
  w.state = (row_state *)(void *)p;
  p += round16(sizeof(row_state) * (size_t)c->in.batch);
  w.vals = (float *)(void *)p;
  p += round16(sizeof(float) * (size_t)c->vocab_count);
  w.weights = (float *)(void *)p;
  p += round16(sizeof(float) * (size_t)c->vocab_count);
  w.order = (ranked *)(void *)p;
  p += round16(sizeof(ranked) * (size_t)order_length(c));
  w.top = (ranked *)(void *)p;
  return w;
}

/* ---- records ----------------------------------------------------------------------------- */

/* The exchanged records of one step: S slots (all-gather) or one sum. */
typedef struct gathered_view {
  const char *base;
  int64_t record_bytes, row_bytes, header_bytes;
  int32_t slots;
} gathered_view;

static gathered_view view_of(const ingot_sampling_shard_call *c, const ingot_shard_steps *s,
                             int step, const void *gathered) {
  gathered_view g;
  const int exchange = s->exchange[step];
  g.base = (const char *)gathered;
  g.row_bytes = s->row_bytes[step];
  g.header_bytes = ingot_shard_header_bytes(exchange);
  g.record_bytes = ingot_shard_record_bytes(c->in.batch, g.row_bytes, exchange);
  g.slots = exchange == INGOT_SAMPLING_SHARD_EXCHANGE_SUM ? 1 : c->num_shards;
  return g;
}

static const char *slot_row(const gathered_view *g, int32_t slot, int64_t r) {
  return g->base + slot * g->record_bytes + g->header_bytes + r * g->row_bytes;
}

static int64_t slot_begin(const gathered_view *g, int32_t slot) {
  ingot_shard_header h;
  memcpy(&h, g->base + slot * g->record_bytes, sizeof h);
  return h.vocab_begin;
}

/* Bucket d of a round row: a summed count (TOP-K rounds 0-2), a summed
 * mass (TOP-P rounds 0-2), or one shard's count (round 3). */
static uint64_t summed_count(const char *row, int d) {
  uint64_t c;
  memcpy(&c, row + (size_t)d * sizeof c, sizeof c);
  return c;
}

static void summed_mass(const char *row, int d, ingot_exact_sum *m) {
  uint64_t limb[INGOT_EXACT_SUM_LIMBS];
  memcpy(limb, row + (size_t)d * INGOT_SHARD_MASS_BYTES, sizeof limb);
  ingot_exact_sum_from_limbs(limb, m);
}

static uint32_t last_count(const char *row, int d) {
  uint32_t c;
  memcpy(&c, row + (size_t)d * sizeof c, sizeof c);
  return c;
}

/* This shard's header of `step`, and the record's padding (records are
 * compared and copied as bytes). */
static void write_header(const ingot_sampling_shard_call *c, int step, int64_t row_bytes,
                         int exchange, void *record) {
  uint64_t header[INGOT_SHARD_SUM_HEADER_BYTES / 8];
  ingot_shard_header_of(c, step, row_bytes, exchange, header);
  const int64_t header_bytes = ingot_shard_header_bytes(exchange);
  memcpy(record, header, (size_t)header_bytes);
  int64_t used = header_bytes + c->in.batch * row_bytes;
  int64_t total = ingot_shard_record_bytes(c->in.batch, row_bytes, exchange);
  memset((char *)record + used, 0, (size_t)(total - used));
}

/* ---- per-row helpers --------------------------------------------------------------------- */

/* (v, id) replaces (*best, *best_id) if larger, or equal with a lower id. */
static void take_max(float *best, int32_t *best_id, float v, int32_t id) {
  if (id >= 0 && (*best_id < 0 || v > *best || (v == *best && id < *best_id)))
    *best = v, *best_id = id;
}

static int in_prefix(uint32_t key, int32_t id, uint32_t cut_key, int32_t cut_id) {
  return key < cut_key || (key == cut_key && id <= cut_id);
}

/* Token (s, id) of a MODE_DRAW row is in F. */
static int in_final(const row_state *st, float s, int32_t id, float min_p_threshold) {
  if (s == -INFINITY || s < min_p_threshold) return 0;
  return in_prefix(ingot_shard_rank_key(s), id, st->cut_key, st->cut_id);
}

/* vals <- the row's l (s for a MODE_DRAW row) over the slice. */
static void row_values(const ingot_sampling_shard_call *c, int64_t r, const row_state *st,
                       const row_params *p, float *vals) {
  uint32_t flags = 0;
  float m;
  int32_t id;
  ingot_cpu_row_allowed(&c->in, r, c->vocab_begin, c->vocab_count, vals, &flags, &m, &id);
  if (st->mode == MODE_DRAW) ingot_cpu_row_scale(vals, c->vocab_count, st->max, p->temperature);
}

/* The tokens the rounds of `goal` count: finite s, and (top-p) in K. */
static int in_universe(const row_state *st, int goal, float s, int32_t id) {
  if (s == -INFINITY) return 0;
  return goal == GOAL_TOP_K || in_prefix(ingot_shard_rank_key(s), id, st->k_key, st->k_id);
}

/* This shard's share of `take` tokens with key U in bucket d of the last
 * round (counts per slot), the shards ordered by v0. */
static int64_t own_take(const ingot_sampling_shard_call *c, const gathered_view *g, int64_t r,
                        int d, int64_t take) {
  int64_t before = 0, own = 0;
  for (int32_t slot = 0; slot < g->slots; slot++) {
    int64_t n = last_count(slot_row(g, slot, r), d);
    if (slot == c->shard_index)
      own = n;
    else if (slot_begin(g, slot) < c->vocab_begin)
      before += n;
  }
  if (take <= before) return 0;
  return take - before < own ? take - before : own;
}

/* The id of this shard's take-th token with key U in the universe (-1 for
 * none), from vals. */
static void resolve_tie(const ingot_sampling_shard_call *c, row_state *st, const pending_tie *t,
                        const float *vals) {
  int32_t id = -1;
  int64_t seen = 0;
  for (int64_t j = 0; j < c->vocab_count && seen < t->take; j++) {
    int32_t i = (int32_t)(c->vocab_begin + j);
    if (vals[j] == -INFINITY || ingot_shard_rank_key(vals[j]) != t->key) continue;
    if (!t->of_top_k && !in_universe(st, GOAL_TOP_P, vals[j], i)) continue;
    seen++;
    id = i;
  }
  if (t->of_top_k) {
    st->k_key = t->key, st->k_id = id;
    if (st->goal == GOAL_NONE) st->cut_key = t->key, st->cut_id = id; /* top-p off: P = K */
  } else {
    st->cut_key = t->key, st->cut_id = id;
  }
}

/* ---- absorbing the previous step's records ------------------------------------------------ */

static void absorb_stats(const ingot_sampling_shard_call *c, const gathered_view *g, int64_t r,
                         const row_params *p, row_state *st) {
  uint32_t flags = 0;
  uint64_t count = 0;
  float m = -INFINITY, raw = -INFINITY;
  int32_t m_id = -1, raw_id = -1;
  for (int32_t slot = 0; slot < g->slots; slot++) {
    ingot_shard_stats s;
    memcpy(&s, slot_row(g, slot, r), sizeof s);
    flags |= s.flags;
    count += s.count;
    take_max(&m, &m_id, s.max, s.max_id);
    take_max(&raw, &raw_id, s.raw_max, s.raw_max_id);
  }
  memset(st, 0, sizeof *st);
  st->count = (uint32_t)count;
  st->max = m;
  st->max_id = m_id;
  st->raw_max = raw;
  st->cut_key = st->k_key = NO_CUT;
  st->cut_id = st->k_id = -1;
  st->goal = GOAL_NONE;
  if (count == 0 || m_id < 0) {
    st->mode = MODE_EMPTY;
    flags |= INGOT_SAMPLING_ROW_EMPTY;
  } else if (p->temperature == 0.0f) {
    st->mode = MODE_GREEDY;
  } else {
    st->mode = MODE_DRAW;
    const int64_t k = p->top_k, kc = c->max_top_k;
    int topk_on = k > 0 && (uint64_t)k < count;
    int served = kc > 0 && (c->in.vocab <= kc || (k >= 1 && k <= kc));
    if (topk_on || p->top_p < 1.0f)
      st->goal = served ? GOAL_CANDIDATES : topk_on ? GOAL_TOP_K : GOAL_TOP_P;
    st->need = (uint32_t)k;
  }
  st->flags = flags;
}

/* The merged candidates hold the row's top-k set K in rank order: top-k
 * and top-p exactly as the whole-row op computes them on the same list. */
static void absorb_candidates(const ingot_sampling_shard_call *c, const gathered_view *g,
                              int64_t r, const row_params *p, row_state *st, ranked *order) {
  if (st->goal != GOAL_CANDIDATES) return;
  st->goal = GOAL_NONE;
  int64_t n = 0;
  for (int32_t slot = 0; slot < g->slots; slot++) {
    const char *row = slot_row(g, slot, r);
    for (int32_t j = 0; j < c->max_top_k; j++) {
      ingot_shard_ranked e;
      memcpy(&e, row + (size_t)j * sizeof e, sizeof e);
      if (e.id < 0) break;
      order[n++] = (ranked){e.value, e.id};
    }
  }
  if (n == 0) return;
  ingot_cpu_sort_ranked(order, n);
  int64_t keep = n;
  if (p->top_k > 0 && (uint32_t)p->top_k < st->count && p->top_k < keep) keep = p->top_k;
  if (p->top_p < 1.0f) keep = ingot_cpu_top_p_keep(order, keep, p->top_p);
  st->cut_key = ingot_shard_rank_key(order[keep - 1].value);
  st->cut_id = order[keep - 1].id;
}

/* The selection's next state after a round: its bucket (a top-k or top-p
 * cut lies there), and after the last round the tie at its key. Rounds 0-2
 * read the summed record; round 3 the shards' counts, whose masses are
 * count x w of the bucket's one key. */
static void absorb_round(const ingot_sampling_shard_call *c, const gathered_view *g, int64_t r,
                         int goal, int round, const row_params *p, row_state *st,
                         pending_tie *tie) {
  if (st->goal != goal) return;
  const int bits = ingot_shard_digit_bits(round), buckets = 1 << bits;
  const int last = round == INGOT_SHARD_ROUNDS - 1;
  uint64_t count[INGOT_SHARD_BUCKETS];
  ingot_exact_sum mass[INGOT_SHARD_BUCKETS];
  for (int d = 0; d < buckets; d++) {
    count[d] = 0;
    ingot_exact_sum_clear(&mass[d]);
    if (!last) {
      const char *row = slot_row(g, 0, r);
      if (goal == GOAL_TOP_K)
        count[d] = summed_count(row, d);
      else
        summed_mass(row, d, &mass[d]);
      continue;
    }
    for (int32_t slot = 0; slot < g->slots; slot++) count[d] += last_count(slot_row(g, slot, r), d);
    const uint32_t key = (st->prefix << bits) | (uint32_t)d;
    /* finite keys only: records that are not ingot's must not shift past the sum */
    if (goal == GOAL_TOP_P && count[d] > 0 && key < 0x7f800000u)
      ingot_exact_sum_add_f32_times(&mass[d], ingot_sampling_ref_exp(ingot_shard_key_value(key)),
                                    count[d] > UINT32_MAX ? UINT32_MAX : (uint32_t)count[d]);
  }
  int d = 0;
  if (goal == GOAL_TOP_K) {
    if (round == 0) {
      uint64_t finite = 0;
      for (int b = 0; b < buckets; b++) finite += count[b];
      if (st->need > finite) { /* k beyond the finite tokens: K is all of them */
        st->goal = p->top_p < 1.0f ? GOAL_TOP_P : GOAL_NONE;
        st->prefix = 0;
        return;
      }
    }
    for (; d < buckets && count[d] < st->need; d++) st->need -= (uint32_t)count[d];
  } else {
    if (round == 0) {
      ingot_exact_sum total;
      ingot_exact_sum_clear(&total);
      for (int b = 0; b < buckets; b++) ingot_exact_sum_add(&total, &mass[b]);
      st->target = ingot_sampling_top_p_target(p->top_p, &total);
      ingot_exact_sum_clear(&st->mass_before);
    }
    for (; d < buckets; d++) {
      ingot_exact_sum through = st->mass_before;
      ingot_exact_sum_add(&through, &mass[d]);
      if (ingot_sampling_top_p_reached(&through, st->target)) break;
      st->mass_before = through;
    }
  }
  if (d == buckets || (last && ((st->prefix << bits) | (uint32_t)d) >= 0x7f800000u)) {
    /* not reached, or a key of no finite s: only records that are not ingot's get here */
    st->goal = GOAL_NONE;
    return;
  }
  st->prefix = (st->prefix << bits) | (uint32_t)d;
  if (round < INGOT_SHARD_ROUNDS - 1) return;
  /* the last round: every token of bucket d has key U = prefix, so the same w */
  int64_t take = st->need;
  if (goal == GOAL_TOP_P) {
    const float w = ingot_sampling_ref_exp(ingot_shard_key_value(st->prefix));
    int64_t lo = 1, hi = (int64_t)count[d];
    while (lo < hi) { /* the fewest tied tokens that reach the target */
      int64_t mid = lo + (hi - lo) / 2;
      ingot_exact_sum through = st->mass_before;
      ingot_exact_sum_add_f32_times(&through, w, (uint32_t)mid);
      if (ingot_sampling_top_p_reached(&through, st->target))
        hi = mid;
      else
        lo = mid + 1;
    }
    take = lo;
  }
  tie->pending = 1;
  tie->of_top_k = goal == GOAL_TOP_K;
  tie->key = st->prefix;
  tie->take = own_take(c, g, r, d, take);
  st->prefix = 0;
  st->goal = goal == GOAL_TOP_K && p->top_p < 1.0f ? GOAL_TOP_P : GOAL_NONE;
}

/* ---- this step's records ------------------------------------------------------------------- */

static void record_stats(const ingot_sampling_shard_call *c, int64_t r, float *vals, char *out) {
  ingot_shard_stats s;
  uint32_t flags = 0;
  s.count = (uint32_t)ingot_cpu_row_allowed(&c->in, r, c->vocab_begin, c->vocab_count, vals,
                                            &flags, &s.max, &s.max_id);
  s.flags = flags;
  s.raw_max = -INFINITY;
  s.raw_max_id = -1;
  if (c->vocab_count > 0) {
    int32_t at;
    s.raw_max = ingot_cpu_raw_max(ingot_cpu_logits_row(&c->in, r), c->in.dtype, c->vocab_count,
                                  &at);
    if (at >= 0) s.raw_max_id = (int32_t)(c->vocab_begin + at);
  }
  memcpy(out, &s, sizeof s);
}

/* The shard's first kc allowed tokens with finite s, in rank order. */
static void record_candidates(const ingot_sampling_shard_call *c, const row_state *st,
                              const float *vals, ranked *order, char *out) {
  int64_t n = 0;
  if (st->goal == GOAL_CANDIDATES) {
    for (int64_t j = 0; j < c->vocab_count; j++)
      if (vals[j] != -INFINITY) order[n++] = (ranked){vals[j], (int32_t)(c->vocab_begin + j)};
    ingot_cpu_sort_ranked(order, n);
  }
  for (int32_t j = 0; j < c->max_top_k; j++) {
    ingot_shard_ranked e = {-INFINITY, -1};
    if (j < n) e.value = order[j].value, e.id = order[j].id;
    memcpy(out + (size_t)j * sizeof e, &e, sizeof e);
  }
}

/* A radix round: per bucket of the digit, the universe's tokens under the
 * prefix. Rounds 0-2 (summed): top-k uint64 counts, top-p exact masses in
 * limbs; round 3 (gathered): uint32 counts. */
static void record_round(const ingot_sampling_shard_call *c, const row_state *st, int goal,
                         int round, const float *vals, char *out) {
  const int shift = ingot_shard_digit_shift(round), bits = ingot_shard_digit_bits(round);
  const int last = round == INGOT_SHARD_ROUNDS - 1;
  uint64_t count[INGOT_SHARD_BUCKETS];
  ingot_exact_sum mass[INGOT_SHARD_BUCKETS];
  for (int d = 0; d < INGOT_SHARD_BUCKETS; d++) count[d] = 0, ingot_exact_sum_clear(&mass[d]);
  const int masses = goal == GOAL_TOP_P && !last;
  if (st->goal == goal) {
    for (int64_t j = 0; j < c->vocab_count; j++) {
      if (!in_universe(st, goal, vals[j], (int32_t)(c->vocab_begin + j))) continue;
      uint32_t key = ingot_shard_rank_key(vals[j]);
      if ((key >> (shift + bits)) != st->prefix) continue;
      int d = (int)((key >> shift) & ((1u << bits) - 1u));
      count[d]++;
      if (masses) ingot_exact_sum_add_f32(&mass[d], ingot_sampling_ref_exp(vals[j]));
    }
  }
  if (last) {
    for (int d = 0; d < INGOT_SHARD_LAST_BUCKETS; d++) {
      uint32_t n = (uint32_t)count[d]; /* a shard holds fewer than 2^31 tokens */
      memcpy(out + (size_t)d * sizeof n, &n, sizeof n);
    }
  } else if (masses) {
    for (int d = 0; d < INGOT_SHARD_BUCKETS; d++) {
      uint64_t limb[INGOT_EXACT_SUM_LIMBS];
      ingot_exact_sum_to_limbs(&mass[d], limb);
      memcpy(out + (size_t)d * INGOT_SHARD_MASS_BYTES, limb, sizeof limb);
    }
  } else {
    memcpy(out, count, sizeof count);
  }
}

/* The DRAW row: best key over the shard's part of F, both masses, top-n. */
static void record_draw(const ingot_sampling_shard_call *c, int64_t r, const row_state *st,
                        const row_params *p, const shard_scratch *w, char *out) {
  const int64_t Vr = c->vocab_count, n = c->num_top;
  const int32_t v0 = (int32_t)c->vocab_begin;
  const int final_top = n > 0 && (c->flags & INGOT_SAMPLING_SHARD_TOP_FINAL);
  const int raw_top = n > 0 && !final_top;
  ingot_shard_draw d;
  d.key = -INFINITY, d.id = -1, d.s = 0.0f, d.raw = -INFINITY;
  ingot_exact_sum_clear(&d.mass);
  ingot_exact_sum_clear(&d.raw_mass);
  int64_t filled = 0;
  if (st->mode == MODE_DRAW) {
    const float threshold = ingot_cpu_min_p_threshold(p->min_p);
    for (int64_t j = 0; j < Vr; j++) {
      float s = w->vals[j];
      int32_t id = v0 + (int32_t)j;
      w->weights[j] = 0.0f;
      if (!in_final(st, s, id, threshold)) continue;
      w->weights[j] = ingot_sampling_ref_exp(s);
      float key = ingot_cpu_draw_key(p, s, id);
      if (d.id < 0 || key > d.key) d.key = key, d.id = id, d.s = s;
      if (final_top) ingot_cpu_top_insert(w->top, n, &filled, s, id);
    }
    ingot_cpu_exact_sum_of(w->weights, Vr, &d.mass);
  } else if (st->mode == MODE_GREEDY && st->max_id >= v0 && st->max_id - v0 < Vr) {
    d.key = 0.0f, d.id = st->max_id, d.s = 0.0f; /* F = {max_id}, s = 0 */
    ingot_exact_sum_add_f32(&d.mass, ingot_sampling_ref_exp(0.0f));
    if (final_top) ingot_cpu_top_insert(w->top, n, &filled, 0.0f, st->max_id);
  }
  /* the raw distribution softmax(x / T') */
  if (st->raw_max != -INFINITY && Vr > 0) {
    const void *row = ingot_cpu_logits_row(&c->in, r);
    const float t = ingot_cpu_raw_temperature(p->temperature);
    for (int64_t j = 0; j < Vr; j++) {
      float x = ingot_sampling_load(row, c->in.dtype, j);
      w->weights[j] = 0.0f;
      if (!ingot_f32_finite(x)) continue;
      float v = ingot_cpu_raw_value(x, st->raw_max, t);
      w->weights[j] = ingot_sampling_ref_exp(v);
      if (raw_top && v != -INFINITY) ingot_cpu_top_insert(w->top, n, &filled, v, v0 + (int32_t)j);
    }
    ingot_cpu_exact_sum_of(w->weights, Vr, &d.raw_mass);
    if (d.id >= 0)
      d.raw = ingot_cpu_raw_value(ingot_sampling_load(row, c->in.dtype, d.id - v0), st->raw_max,
                                  t);
  }
  memcpy(out, &d, sizeof d);
  for (int64_t j = 0; j < n; j++) {
    ingot_shard_ranked e = {-INFINITY, -1};
    if (j < filled) e.value = w->top[j].value, e.id = w->top[j].id;
    memcpy(out + sizeof d + (size_t)j * sizeof e, &e, sizeof e);
  }
}

/* The MASS row: sum of w over the shard's part of F. */
static void record_mass(const ingot_sampling_shard_call *c, const row_state *st,
                        const row_params *p, const shard_scratch *w, char *out) {
  ingot_exact_sum mass;
  ingot_exact_sum_clear(&mass);
  if (st->mode == MODE_DRAW) {
    const float threshold = ingot_cpu_min_p_threshold(p->min_p);
    for (int64_t j = 0; j < c->vocab_count; j++) {
      float s = w->vals[j];
      int in = in_final(st, s, (int32_t)(c->vocab_begin + j), threshold);
      w->weights[j] = in ? ingot_sampling_ref_exp(s) : 0.0f;
    }
    ingot_cpu_exact_sum_of(w->weights, c->vocab_count, &mass);
  } else if (st->mode == MODE_GREEDY && st->max_id >= c->vocab_begin &&
             st->max_id - c->vocab_begin < c->vocab_count) {
    ingot_exact_sum_add_f32(&mass, ingot_sampling_ref_exp(0.0f));
  }
  memcpy(out, &mass, sizeof mass);
}

/* ---- ops ------------------------------------------------------------------------------------ */

ingot_status ingot_cpu_sampling_shard_step(struct ingot_context *ctx,
                                           const ingot_sampling_shard_call *call, int32_t step,
                                           const void *gathered, void *record, void *workspace,
                                           size_t workspace_bytes, struct CUstream_st *stream) {
  (void)ctx, (void)workspace_bytes, (void)stream;
  const ingot_shard_steps steps = ingot_shard_steps_of(call->max_top_k, call->num_top, call->flags);
  const int kind = steps.kind[step], round = steps.round[step];
  const int prev = step > 0 ? steps.kind[step - 1] : -1;
  const int prev_round = step > 0 ? steps.round[step - 1] : 0;
  const int64_t row_bytes = steps.row_bytes[step];
  shard_scratch w = carve(call, workspace);
  gathered_view g = {NULL, 0, 0, 0, 0};
  if (step > 0) g = view_of(call, &steps, step - 1, gathered);
  const int64_t header_bytes = ingot_shard_header_bytes(steps.exchange[step]);
  write_header(call, step, row_bytes, steps.exchange[step], record);
  for (int64_t r = 0; r < call->in.batch; r++) {
    row_state *st = &w.state[r];
    const row_params p = ingot_cpu_row_params_of(&call->in, r);
    char *out = (char *)record + header_bytes + r * row_bytes;
    if (kind == INGOT_SHARD_STEP_STATS) {
      record_stats(call, r, w.vals, out);
      continue;
    }
    pending_tie tie = {0, 0, 0, 0};
    if (prev == INGOT_SHARD_STEP_STATS) absorb_stats(call, &g, r, &p, st);
    if (prev == INGOT_SHARD_STEP_CANDIDATES) absorb_candidates(call, &g, r, &p, st, w.order);
    if (prev == INGOT_SHARD_STEP_TOPK) absorb_round(call, &g, r, GOAL_TOP_K, prev_round, &p, st, &tie);
    if (prev == INGOT_SHARD_STEP_TOPP) absorb_round(call, &g, r, GOAL_TOP_P, prev_round, &p, st, &tie);
    /* the slice's values, where this step or the tie needs them */
    const int work = kind == INGOT_SHARD_STEP_DRAW || kind == INGOT_SHARD_STEP_MASS ||
                     (kind == INGOT_SHARD_STEP_CANDIDATES && st->goal == GOAL_CANDIDATES) ||
                     (kind == INGOT_SHARD_STEP_TOPK && st->goal == GOAL_TOP_K) ||
                     (kind == INGOT_SHARD_STEP_TOPP && st->goal == GOAL_TOP_P);
    if (st->mode == MODE_DRAW && (work || tie.pending)) row_values(call, r, st, &p, w.vals);
    if (tie.pending) resolve_tie(call, st, &tie, w.vals);
    switch (kind) {
      case INGOT_SHARD_STEP_CANDIDATES: record_candidates(call, st, w.vals, w.order, out); break;
      case INGOT_SHARD_STEP_TOPK: record_round(call, st, GOAL_TOP_K, round, w.vals, out); break;
      case INGOT_SHARD_STEP_TOPP: record_round(call, st, GOAL_TOP_P, round, w.vals, out); break;
      case INGOT_SHARD_STEP_DRAW: record_draw(call, r, st, &p, &w, out); break;
      default: record_mass(call, st, &p, &w, out); break;
    }
  }
  return INGOT_STATUS_SUCCESS;
}

/* Merges the S top-n lists of row r (DRAW rows, after the header) into
 * order, in rank order; returns how many of the n best exist. */
static int64_t merge_top(const ingot_sampling_shard_call *c, const gathered_view *g, int64_t r,
                         ranked *order) {
  int64_t n = 0;
  for (int32_t slot = 0; slot < g->slots; slot++) {
    const char *row = slot_row(g, slot, r) + sizeof(ingot_shard_draw);
    for (int32_t j = 0; j < c->num_top; j++) {
      ingot_shard_ranked e;
      memcpy(&e, row + (size_t)j * sizeof e, sizeof e);
      if (e.id < 0) break;
      order[n++] = (ranked){e.value, e.id};
    }
  }
  ingot_cpu_sort_ranked(order, n);
  return n < c->num_top ? n : c->num_top;
}

ingot_status ingot_cpu_sampling_shard_finish_sample(struct ingot_context *ctx,
                                                    const ingot_sampling_shard_call *call,
                                                    const void *gathered,
                                                    const ingot_sampling_output *out,
                                                    void *workspace, size_t workspace_bytes,
                                                    struct CUstream_st *stream) {
  (void)ctx, (void)workspace_bytes, (void)stream;
  const ingot_shard_steps steps = ingot_shard_steps_of(call->max_top_k, call->num_top, call->flags);
  const gathered_view g = view_of(call, &steps, steps.count - 1, gathered);
  shard_scratch w = carve(call, workspace);
  const int final_top = out->num_top > 0 && (out->flags & INGOT_SAMPLING_TOP_FINAL);
  const int raw_top = out->num_top > 0 && !final_top;
  for (int64_t r = 0; r < call->in.batch; r++) {
    const row_state *st = &w.state[r];
    ingot_shard_draw best;
    best.key = -INFINITY, best.id = -1, best.s = 0.0f, best.raw = -INFINITY;
    ingot_exact_sum mass, raw_mass;
    ingot_exact_sum_clear(&mass);
    ingot_exact_sum_clear(&raw_mass);
    for (int32_t slot = 0; slot < g.slots; slot++) {
      ingot_shard_draw d;
      memcpy(&d, slot_row(&g, slot, r), sizeof d);
      ingot_exact_sum_add(&mass, &d.mass);
      ingot_exact_sum_add(&raw_mass, &d.raw_mass);
      if (d.id >= 0 && (best.id < 0 || d.key > best.key || (d.key == best.key && d.id < best.id)))
        best = d;
    }
    int32_t token = st->mode == MODE_EMPTY ? -1 : st->mode == MODE_GREEDY ? st->max_id : best.id;
    out->tokens[r] = token;
    if (out->row_status) out->row_status[r] = st->flags;
    if (out->token_logprob || final_top) {
      double log_z = ingot_cpu_log_mass(&mass);
      if (out->token_logprob)
        out->token_logprob[r] = token >= 0 ? (float)((double)best.s - log_z) : -INFINITY;
      if (final_top) {
        int64_t filled = merge_top(call, &g, r, w.order);
        ingot_cpu_write_top(out, r, w.order, token >= 0 ? filled : 0, log_z);
      }
    }
    if (out->token_raw_logprob || raw_top) {
      double log_z = ingot_cpu_log_mass(&raw_mass);
      if (out->token_raw_logprob)
        out->token_raw_logprob[r] =
            token >= 0 && best.raw != -INFINITY ? (float)((double)best.raw - log_z) : -INFINITY;
      if (raw_top) ingot_cpu_write_top(out, r, w.order, merge_top(call, &g, r, w.order), log_z);
    }
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_sampling_shard_finish_softmax(struct ingot_context *ctx,
                                                     const ingot_sampling_shard_call *call,
                                                     const void *gathered, float *probs,
                                                     int64_t probs_stride, uint32_t *row_status,
                                                     void *workspace, size_t workspace_bytes,
                                                     struct CUstream_st *stream) {
  (void)ctx, (void)workspace_bytes, (void)stream;
  const ingot_shard_steps steps = ingot_shard_steps_of(call->max_top_k, call->num_top, call->flags);
  const gathered_view g = view_of(call, &steps, steps.count - 1, gathered);
  shard_scratch w = carve(call, workspace);
  for (int64_t r = 0; r < call->in.batch; r++) {
    const row_state *st = &w.state[r];
    const row_params p = ingot_cpu_row_params_of(&call->in, r);
    ingot_exact_sum mass;
    ingot_exact_sum_clear(&mass);
    for (int32_t slot = 0; slot < g.slots; slot++) {
      ingot_exact_sum m;
      memcpy(&m, slot_row(&g, slot, r), sizeof m);
      ingot_exact_sum_add(&mass, &m);
    }
    const double z = ingot_exact_sum_value(&mass);
    if (row_status) row_status[r] = st->flags;
    if (call->vocab_count == 0) continue; /* probs may have no data */
    float *prow = probs + r * probs_stride;
    if (st->mode == MODE_DRAW) row_values(call, r, st, &p, w.vals);
    const float threshold = ingot_cpu_min_p_threshold(p.min_p);
    for (int64_t j = 0; j < call->vocab_count; j++) {
      int32_t id = (int32_t)(call->vocab_begin + j);
      float wj = 0.0f;
      if (st->mode == MODE_DRAW && in_final(st, w.vals[j], id, threshold))
        wj = ingot_sampling_ref_exp(w.vals[j]);
      else if (st->mode == MODE_GREEDY && id == st->max_id)
        wj = ingot_sampling_ref_exp(0.0f);
      prow[j] = z > 0.0 ? (float)((double)wj / z) : 0.0f;
    }
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_sampling_shard_gather(struct ingot_context *ctx, int32_t num_shards,
                                             const void *const *records, size_t record_bytes,
                                             void *gathered, struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  for (int32_t j = 0; j < num_shards; j++)
    memcpy((char *)gathered + (size_t)j * record_bytes, records[j], record_bytes);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_sampling_shard_sum(struct ingot_context *ctx, int32_t num_shards,
                                          const void *const *records, size_t record_bytes,
                                          void *summed, struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  const size_t words = record_bytes / sizeof(uint64_t);
  for (size_t w = 0; w < words; w++) {
    uint64_t total = 0, term;
    for (int32_t j = 0; j < num_shards; j++) {
      memcpy(&term, (const char *)records[j] + w * sizeof term, sizeof term);
      total += term; /* modulo 2^64, as an all-reduce adds */
    }
    memcpy((char *)summed + w * sizeof total, &total, sizeof total);
  }
  return INGOT_STATUS_SUCCESS;
}

/* NCCL is a GPU transport: core refuses a CPU context before these. */
ingot_status ingot_cpu_nccl_comm_info(struct ingot_context *ctx, const char *op,
                                      struct ncclComm *comm, int32_t *ranks, int32_t *rank,
                                      int32_t *device) {
  (void)comm, (void)ranks, (void)rank, (void)device;
  return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op, "ctx: NCCL needs a CUDA context");
}

ingot_status ingot_cpu_nccl_exchange(struct ingot_context *ctx, const char *op,
                                     struct ncclComm *comm, int32_t exchange, const void *record,
                                     size_t record_bytes, void *out, struct CUstream_st *stream) {
  (void)comm, (void)exchange, (void)record, (void)record_bytes, (void)out, (void)stream;
  return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op, "ctx: NCCL needs a CUDA context");
}

ingot_status ingot_cpu_nccl_all_gather_host(struct ingot_context *ctx, const char *op,
                                            struct ncclComm *comm, const void *mine,
                                            size_t bytes, int32_t ranks, void *all,
                                            struct CUstream_st *stream) {
  (void)comm, (void)mine, (void)bytes, (void)ranks, (void)all, (void)stream;
  return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op, "ctx: NCCL needs a CUDA context");
}
