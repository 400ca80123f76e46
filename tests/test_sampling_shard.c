/*
 * Sharded sampling on the CPU backend (include/ingot/ingot.h, Sharded
 * sampling): every row split into 1, 2, 3, 4 and 8 uneven shards (shards of
 * one token or none, cuts inside groups of equal logits, slots in a random
 * order), the steps run shard by shard with the local exchange
 * (ingot_sampling_shard_gather), and the finish's outputs compared BIT FOR
 * BIT with the unsharded call on the same logits: tokens, row_status,
 * token_logprob, token_raw_logprob, top-n ids and log-probabilities (raw and
 * final), and each shard's slice of ingot_sampling_softmax's probs. Each
 * batch runs twice: with candidate lists (top-k / top-p from them where
 * they serve) and with max_top_k = 0 (every top-k and top-p by the radix
 * selection). Fresh random inputs every run (the seed is printed), with
 * every feature: temperature (greedy, tiny, huge), top-k, top-p with and
 * without top-k, min-p, bitmask, banned and bias lists in global ids
 * (entries on shard borders, repeated, out of range), NaN / +Inf, all-masked
 * rows, rows whose allowed tokens all sit in one shard, ties. Then the
 * argument checks: bad shard fields, plans that do not serve a row,
 * records of another step or call, ranges that do not tile, sizes,
 * overlaps; nothing written on error.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sampling_exact_sum.h"
#include "sampling_shard_batch.h"
#include "test_util.h"

static ingot_context_t ctx;

/* ---- outputs ------------------------------------------------------------------------------- */

typedef struct outputs {
  int64_t B, n;
  int32_t *tokens, *top_ids;
  uint32_t *status;
  float *lp, *raw, *top_lp;
  float *probs; /* [B, V] */
  ingot_tensor t_tokens, t_status, t_lp, t_raw, t_top_ids, t_top_lp;
  ingot_sampling_logprobs logprobs;
} outputs;

static void alloc_outputs(outputs *o, int64_t B, int64_t V, int64_t n, uint32_t top_flags) {
  o->B = B, o->n = n;
  o->tokens = xalloc((size_t)B * 4, 0x5a), o->status = xalloc((size_t)B * 4, 0x5a);
  o->lp = xalloc((size_t)B * 4, 0x5a), o->raw = xalloc((size_t)B * 4, 0x5a);
  o->top_ids = xalloc((size_t)(B * n) * 4, 0x5a), o->top_lp = xalloc((size_t)(B * n) * 4, 0x5a);
  o->probs = xalloc((size_t)(B * V) * 4, 0x5a);
  o->t_tokens = ingot_tensor_1d(o->tokens, INGOT_DTYPE_I32, B);
  o->t_status = ingot_tensor_1d(o->status, INGOT_DTYPE_U32, B);
  o->t_lp = ingot_tensor_1d(o->lp, INGOT_DTYPE_F32, B);
  o->t_raw = ingot_tensor_1d(o->raw, INGOT_DTYPE_F32, B);
  o->t_top_ids = ingot_tensor_2d(o->top_ids, INGOT_DTYPE_I32, B, n, n);
  o->t_top_lp = ingot_tensor_2d(o->top_lp, INGOT_DTYPE_F32, B, n, n);
  ingot_sampling_logprobs lp = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  lp.flags = top_flags;
  lp.token_logprob = &o->t_lp, lp.token_raw_logprob = &o->t_raw;
  if (n > 0) lp.top_ids = &o->t_top_ids, lp.top_logprobs = &o->t_top_lp;
  o->logprobs = lp;
}

static void free_outputs(outputs *o) {
  free(o->tokens), free(o->status), free(o->lp), free(o->raw), free(o->top_ids), free(o->top_lp);
  free(o->probs);
}

/* Bit-for-bit equality of the sample outputs; prints the first difference. */
static int same_sample(const outputs *a, const outputs *b, const char *what) {
  for (int64_t r = 0; r < a->B; r++) {
    if (a->tokens[r] != b->tokens[r] || a->status[r] != b->status[r] ||
        f_bits(a->lp[r]) != f_bits(b->lp[r]) || f_bits(a->raw[r]) != f_bits(b->raw[r])) {
      test_fail_at(__FILE__, __LINE__,
                   "%s row %" PRId64 ": token %d status %u lp %.9g raw %.9g, unsharded %d %u "
                   "%.9g %.9g",
                   what, r, b->tokens[r], b->status[r], (double)b->lp[r], (double)b->raw[r],
                   a->tokens[r], a->status[r], (double)a->lp[r], (double)a->raw[r]);
      return 0;
    }
    for (int64_t j = 0; j < a->n; j++) {
      int64_t at = r * a->n + j;
      if (a->top_ids[at] != b->top_ids[at] || f_bits(a->top_lp[at]) != f_bits(b->top_lp[at])) {
        test_fail_at(__FILE__, __LINE__,
                     "%s row %" PRId64 " top %" PRId64 ": (%d, %.9g), unsharded (%d, %.9g)", what,
                     r, j, b->top_ids[at], (double)b->top_lp[at], a->top_ids[at],
                     (double)a->top_lp[at]);
        return 0;
      }
    }
  }
  return 1;
}

/* ---- the sharded call ----------------------------------------------------------------------- */

typedef struct shard_bufs {
  void *records[INGOT_SAMPLING_SHARD_MAX_SHARDS], *ws[INGOT_SAMPLING_SHARD_MAX_SHARDS];
  void *gathered;
  ingot_sampling_shard_plan plan;
  size_t gathered_bytes;
} shard_bufs;

static int run_steps(const batch *b, const split *sp, int64_t kc, int64_t n, uint32_t flags,
                     shard_bufs *u) {
  ingot_sampling_shard sh0 = shard_of(b, sp, 0, kc, n, flags);
  ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  ingot_status st = ingot_sampling_shard_get_plan(ctx, &sh0, b->B, b->dtype, &plan);
  EXPECT_OK(ctx, st);
  if (st) return 0;
  u->plan = plan;
  u->gathered_bytes = plan.max_exchanged_bytes;
  EXPECT(plan.max_exchanged_bytes <= (size_t)sp->S * plan.max_record_bytes, "exchanged bytes");
  u->gathered = xalloc(u->gathered_bytes, 0x77);
  for (int32_t j = 0; j < sp->S; j++) {
    ingot_sampling_shard sh = shard_of(b, sp, j, kc, n, flags);
    ingot_sampling_shard_plan pj = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
    EXPECT_OK(ctx, ingot_sampling_shard_get_plan(ctx, &sh, b->B, b->dtype, &pj));
    for (int i = 0; i < plan.num_steps; i++)
      EXPECT(pj.record_bytes[i] == plan.record_bytes[i], "shards disagree on record sizes");
    u->records[j] = xalloc(plan.max_record_bytes, 0x66);
    u->ws[j] = xalloc(pj.workspace_bytes, 0x55);
  }
  for (int i = 0; i < plan.num_steps; i++) {
    for (int32_t j = 0; j < sp->S; j++) {
      ingot_sampling_shard sh = shard_of(b, sp, j, kc, n, flags);
      ingot_tensor slice = slice_of(b, sp, j, 0);
      ingot_sampling_shard_plan pj = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
      ingot_sampling_shard_get_plan(ctx, &sh, b->B, b->dtype, &pj);
      st = ingot_sampling_shard_step(ctx, i, &slice, &b->params[0], &sh, i ? u->gathered : NULL,
                                     i ? plan.exchanged_bytes[i - 1] : 0, u->records[j],
                                     plan.record_bytes[i], u->ws[j], pj.workspace_bytes, NULL);
      EXPECT_OK(ctx, st);
      if (st) return 0;
    }
    /* the plan's exchange: all-gather, or the uint64 sum of an all-reduce */
    st = (plan.exchange[i] == INGOT_SAMPLING_SHARD_EXCHANGE_SUM
              ? ingot_sampling_shard_sum
              : ingot_sampling_shard_gather)(ctx, sp->S, (const void *const *)u->records,
                                             plan.record_bytes[i], u->gathered,
                                             u->gathered_bytes, NULL);
    EXPECT_OK(ctx, st);
    if (st) return 0;
  }
  return 1;
}

static void free_bufs(shard_bufs *u, int32_t S) {
  for (int32_t j = 0; j < S; j++) free(u->records[j]), free(u->ws[j]);
  free(u->gathered);
}

typedef struct tally {
  int64_t rows, calls, softmax_rows, shards;
} tally;

/* The sample of b split by sp (plan kc, flags) against the unsharded `want`. */
static void check_sample(const batch *b, const split *sp, int64_t kc, uint32_t flags,
                         const outputs *want, uint32_t top_flags, tally *t, const char *what) {
  shard_bufs u;
  memset(&u, 0, sizeof u);
  uint32_t shard_flags = flags | (top_flags ? INGOT_SAMPLING_SHARD_TOP_FINAL : 0u);
  if (run_steps(b, sp, kc, want->n, shard_flags, &u)) {
    size_t last = u.plan.exchanged_bytes[u.plan.num_steps - 1];
    for (int32_t j = 0; j < sp->S; j++) {
      outputs got;
      alloc_outputs(&got, b->B, 1, want->n, top_flags);
      ingot_sampling_shard sh = shard_of(b, sp, j, kc, want->n, shard_flags);
      ingot_sampling_shard_plan pj = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
      ingot_sampling_shard_get_plan(ctx, &sh, b->B, b->dtype, &pj);
      EXPECT_OK(ctx, ingot_sampling_shard_finish_sample(
                         ctx, &sh, u.gathered, last, &got.t_tokens, &got.t_status,
                         &got.logprobs, u.ws[j], pj.workspace_bytes, NULL));
      char msg[160];
      snprintf(msg, sizeof msg, "%s, S=%d slot %d [%" PRId64 ", +%" PRId64 ") kc %" PRId64
               " flags 0x%x", what, (int)sp->S, (int)j, sp->begin[j], sp->count[j], kc,
               (unsigned)shard_flags);
      same_sample(want, &got, msg);
      free_outputs(&got);
    }
    t->rows += b->B, t->calls++, t->shards += sp->S;
  }
  free_bufs(&u, sp->S);
}

static void check_softmax(const batch *b, const split *sp, int64_t kc, uint32_t flags,
                          const float *want, tally *t, const char *what) {
  shard_bufs u;
  memset(&u, 0, sizeof u);
  flags |= INGOT_SAMPLING_SHARD_SOFTMAX;
  if (run_steps(b, sp, kc, 0, flags, &u)) {
    size_t last = u.plan.exchanged_bytes[u.plan.num_steps - 1];
    float *probs = xalloc((size_t)(b->B * b->V) * 4, 0x5a);
    uint32_t *status = xalloc((size_t)b->B * 4, 0x5a);
    for (int32_t j = 0; j < sp->S; j++) {
      ingot_sampling_shard sh = shard_of(b, sp, j, kc, 0, flags);
      ingot_sampling_shard_plan pj = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
      ingot_sampling_shard_get_plan(ctx, &sh, b->B, b->dtype, &pj);
      ingot_tensor slice = slice_of(b, sp, j, 0);
      ingot_tensor tp = ingot_tensor_2d(sp->count[j] ? probs + sp->begin[j] : NULL,
                                        INGOT_DTYPE_F32, b->B, sp->count[j], b->V);
      ingot_tensor ts = ingot_tensor_1d(status, INGOT_DTYPE_U32, b->B);
      EXPECT_OK(ctx, ingot_sampling_shard_finish_softmax(ctx, &slice, &b->params[0], &sh,
                                                         u.gathered, last, &tp, &ts, u.ws[j],
                                                         pj.workspace_bytes, NULL));
    }
    if (memcmp(probs, want, (size_t)(b->B * b->V) * 4) != 0) {
      int64_t at = 0;
      while (f_bits(probs[at]) == f_bits(want[at])) at++;
      test_fail_at(__FILE__, __LINE__,
                   "%s softmax S=%d kc %" PRId64 " flags 0x%x: probs[%" PRId64 ", %" PRId64
                   "] = %.9g, unsharded %.9g",
                   what, (int)sp->S, kc, (unsigned)flags, at / b->V, at % b->V,
                   (double)probs[at], (double)want[at]);
    }
    t->softmax_rows += b->B;
    free(probs), free(status);
  }
  free_bufs(&u, sp->S);
}

/* ---- tests ----------------------------------------------------------------------------------- */

/* Random batches, every split, both plans (candidates; radix only). */
static int test_bit_identical(void) {
  static const int64_t vocabs[] = {1, 2, 7, 33, 100, 1000, 4099, 30000};
  static const int32_t splits[] = {1, 2, 3, 4, 8};
  tally t = {0, 0, 0, 0};
  for (int rep = 0; rep < 48; rep++) {
    const int64_t V = vocabs[rep % 8];
    const int64_t B = V >= 30000 ? test_rand_range(1, 4) : test_rand_range(1, 10);
    const int64_t kc = (int64_t[]){1, 8, 64, 200}[test_rand() % 4];
    batch b;
    make_batch(&b, B, V, kc);
    const int64_t n = (int64_t[]){0, 1, 5, 20}[test_rand() % 4];
    const uint32_t top_flags = test_rand() % 2 ? INGOT_SAMPLING_TOP_FINAL : 0u;
    outputs want;
    alloc_outputs(&want, B, V, n, top_flags);
    size_t need = 0;
    EXPECT_OK(ctx, ingot_sample_workspace_size(ctx, B, V, b.dtype, n, &need));
    void *ws = xalloc(need, 0);
    EXPECT_OK(ctx, ingot_sample(ctx, &b.t_logits[0], &b.params[0], &want.t_tokens, &want.t_status,
                                &want.logprobs, ws, need, NULL));
    EXPECT_OK(ctx, ingot_sampling_softmax_workspace_size(ctx, B, V, b.dtype, &need));
    free(ws);
    ws = xalloc(need, 0);
    ingot_tensor tp = ingot_tensor_2d(want.probs, INGOT_DTYPE_F32, B, V, V);
    EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &b.t_logits[0], &b.params[0], &tp, NULL, ws, need,
                                          NULL));
    free(ws);
    char what[96];
    snprintf(what, sizeof what, "B=%" PRId64 " V=%" PRId64 " dtype %d n %" PRId64 "%s", B, V,
             (int)b.dtype, n, top_flags ? " final" : " raw");
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
      split sp = make_split(V, splits[s]);
      /* candidates where they serve, radix rounds for the rest */
      check_sample(&b, &sp, kc, select_flags(&b, kc), &want, top_flags, &t, what);
      /* every selection by the radix rounds */
      uint32_t all = INGOT_SAMPLING_SHARD_SELECT_TOP_K | INGOT_SAMPLING_SHARD_SELECT_TOP_P;
      check_sample(&b, &sp, 0, all, &want, top_flags, &t, what);
      check_softmax(&b, &sp, s % 2 ? kc : 0, s % 2 ? select_flags(&b, kc) : all, want.probs, &t,
                    what);
      if (test_failures_in_current() > 5) break;
    }
    free_outputs(&want);
    free_batch(&b);
    if (test_failures_in_current() > 5) break;
  }
  printf("  %" PRId64 " rows in %" PRId64 " sharded sample calls (%" PRId64
         " shard finishes), %" PRId64 " softmax rows: bit-identical to the unsharded calls\n",
         t.rows, t.calls, t.shards, t.softmax_rows);
  return 0;
}

/* Ties across shard borders: flat rows (greedy, top-k 1 and 3, top-p,
 * raw / final top-n) must pick the lowest global ids whatever the cut. */
static int test_ties_across_borders(void) {
  tally t = {0, 0, 0, 0};
  batch b;
  make_tie_batch(&b);
  const int64_t V = b.V, B = b.B;
  outputs want;
  alloc_outputs(&want, B, V, 12, INGOT_SAMPLING_TOP_FINAL);
  size_t need = 0;
  ingot_sample_workspace_size(ctx, B, V, b.dtype, 12, &need);
  void *ws = xalloc(need, 0);
  EXPECT_OK(ctx, ingot_sample(ctx, &b.t_logits[0], &b.params[0], &want.t_tokens, &want.t_status,
                              &want.logprobs, ws, need, NULL));
  free(ws);
  EXPECT(want.tokens[0] == 0, "greedy over ties: token %d, expected 0", want.tokens[0]);
  EXPECT(want.tokens[1] == 0, "top-k 1 over ties: token %d, expected 0", want.tokens[1]);
  for (int cut = 1; cut < 16; cut += 3) { /* every cut inside the first tie group */
    split sp;
    sp.S = 3;
    sp.begin[0] = cut, sp.count[0] = 20; /* slots out of v0 order */
    sp.begin[1] = 0, sp.count[1] = cut;
    sp.begin[2] = cut + 20, sp.count[2] = V - cut - 20;
    uint32_t all = INGOT_SAMPLING_SHARD_SELECT_TOP_K | INGOT_SAMPLING_SHARD_SELECT_TOP_P;
    check_sample(&b, &sp, 8, select_flags(&b, 8) | INGOT_SAMPLING_SHARD_TOP_FINAL, &want,
                 INGOT_SAMPLING_TOP_FINAL, &t, "ties");
    check_sample(&b, &sp, 0, all, &want, INGOT_SAMPLING_TOP_FINAL, &t, "ties, radix");
  }
  free_outputs(&want);
  free_batch(&b);
  return 0;
}

/* Rows built to hit rare cases on purpose, each split so that the tokens
 * involved sit in different shards, slots out of v0 order:
 *   row 0: two draw keys exactly equal (s_b + g_b == g_a, b < a, a the
 *          maximum): the lower id must win across the border;
 *   row 1: top_k between the finite-s tokens and the allowed ones (T so
 *          small that every s but the maximum's overflows to -Inf), k above
 *          the candidates, with top-p: K is every finite token, then top-p
 *          cuts inside the tie at the maximum;
 *   row 2: the same with min-p 1 and a top-k inside the tie. */
static int test_constructed_rows(void) {
  const int64_t V = 96, B = 3;
  tally t = {0, 0, 0, 0};
  batch b;
  make_batch(&b, B, V, 4);
  while (b.dtype != INGOT_DTYPE_F32) { /* row 0 needs exact fp32 logits */
    free_batch(&b);
    make_batch(&b, B, V, 4);
  }
  b.num_banned = 0, b.num_bias = 0;
  b.t_banned[0].shape[0] = 0, b.t_bias_ids[0].shape[0] = 0, b.t_bias_values[0].shape[0] = 0;
  b.params[0].allowed = NULL;
  /* row 0: find b < a with fl(fl(g_a - g_b) + g_b) == g_a, g_b > g_a */
  int32_t ida = -1, idb = -1;
  float lb = 0.0f;
  b.seed[0] = 12345, b.position[0] = 7;
  for (int32_t a = 60; a < V && ida < 0; a++) {
    float ga = ingot_sampling_gumbel(b.seed[0], b.position[0], a);
    for (int32_t c = 0; c < 40; c++) {
      float gc = ingot_sampling_gumbel(b.seed[0], b.position[0], c);
      float l = ga - gc;
      if (gc > ga && l + gc == ga) {
        ida = a, idb = c, lb = l;
        break;
      }
    }
  }
  REQUIRE(ida >= 0, "no exactly equal draw keys found");
  for (int64_t i = 0; i < V; i++) set_logit(&b, 0, i, -INFINITY);
  set_logit(&b, 0, ida, 0.0f);
  set_logit(&b, 0, idb, lb);
  b.temperature[0] = 1.0f, b.top_k[0] = 0, b.top_p[0] = 1.0f, b.min_p[0] = 0.0f;
  /* rows 1 and 2: 5 maxima spread out, the rest -10, T = 1e-38 */
  for (int64_t r = 1; r < 3; r++) {
    for (int64_t i = 0; i < V; i++) set_logit(&b, r, i, i % 19 == 3 ? 1.0f : -10.0f);
    b.temperature[r] = 1e-38f;
    b.top_k[r] = r == 1 ? 8 : 4;
    b.top_p[r] = r == 1 ? 0.5f : 1.0f;
    b.min_p[r] = r == 1 ? 0.0f : 1.0f;
  }
  outputs want;
  alloc_outputs(&want, B, V, 8, INGOT_SAMPLING_TOP_FINAL);
  size_t need = 0;
  ingot_sample_workspace_size(ctx, B, V, b.dtype, 8, &need);
  void *ws = xalloc(need, 0);
  EXPECT_OK(ctx, ingot_sample(ctx, &b.t_logits[0], &b.params[0], &want.t_tokens, &want.t_status,
                              &want.logprobs, ws, need, NULL));
  free(ws);
  EXPECT(want.tokens[0] == idb, "equal keys: token %d, expected the lower id %d", want.tokens[0],
         idb);
  EXPECT(want.top_ids[8 + 3] == -1 && want.top_ids[8 + 2] == 41,
         "row 1: final top-n should hold the 3 lowest maxima (3, 22, 41)");
  for (int rep = 0; rep < 4; rep++) {
    split sp;
    sp.S = 4;
    int64_t cut = (idb + ida) / 2 + rep; /* a and b in different shards */
    sp.begin[0] = cut, sp.count[0] = V - cut;
    sp.begin[1] = 0, sp.count[1] = 10 + rep;
    sp.begin[2] = 10 + rep, sp.count[2] = 13;
    sp.begin[3] = 23 + rep, sp.count[3] = cut - 23 - rep;
    check_sample(&b, &sp, 2, select_flags(&b, 2) | INGOT_SAMPLING_SHARD_TOP_FINAL, &want,
                 INGOT_SAMPLING_TOP_FINAL, &t, "constructed rows");
    check_sample(&b, &sp, 0,
                 INGOT_SAMPLING_SHARD_SELECT_TOP_K | INGOT_SAMPLING_SHARD_SELECT_TOP_P |
                     INGOT_SAMPLING_SHARD_TOP_FINAL,
                 &want, INGOT_SAMPLING_TOP_FINAL, &t, "constructed rows, radix");
  }
  free_outputs(&want);
  free_batch(&b);
  return 0;
}

/* The exact sums: any order of the same terms gives the same bits (what
 * the sharded steps rely on); a double sum in another order does not. */
static int test_exact_sum_order_free(void) {
  enum { N = 4096 };
  static float w[N];
  for (int rep = 0; rep < 20; rep++) {
    for (int i = 0; i < N; i++)
      w[i] = ingot_sampling_exp((float)(-fabs(rand_normal()) * (rep % 2 ? 3.0 : 60.0)));
    ingot_sampling_params p = INGOT_SAMPLING_PARAMS_INITIALIZER;
    float x[N], y[N], probs_x[N], probs_y[N];
    /* the softmax's sum over a row and over the same row reversed */
    for (int i = 0; i < N; i++) x[i] = (float)log((double)w[i] + 1e-300), y[N - 1 - i] = x[i];
    ingot_tensor tx = ingot_tensor_2d(x, INGOT_DTYPE_F32, 1, N, N);
    ingot_tensor ty = ingot_tensor_2d(y, INGOT_DTYPE_F32, 1, N, N);
    ingot_tensor px = ingot_tensor_2d(probs_x, INGOT_DTYPE_F32, 1, N, N);
    ingot_tensor py = ingot_tensor_2d(probs_y, INGOT_DTYPE_F32, 1, N, N);
    size_t need = 0;
    ingot_sampling_softmax_workspace_size(ctx, 1, N, INGOT_DTYPE_F32, &need);
    void *ws = xalloc(need, 0);
    EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &tx, &p, &px, NULL, ws, need, NULL));
    EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &ty, &p, &py, NULL, ws, need, NULL));
    free(ws);
    for (int i = 0; i < N; i++)
      if (f_bits(probs_x[i]) != f_bits(probs_y[N - 1 - i])) {
        test_fail_at(__FILE__, __LINE__, "softmax of a reversed row: probs differ at %d", i);
        break;
      }
  }
  return 0;
}

/* B = 0, an empty shard, bad per-row values, plans that do not serve a row. */
static int test_special_calls(void) {
  const int64_t V = 40, B = 2;
  batch b;
  make_batch(&b, B, V, 4);
  for (int64_t r = 0; r < B; r++) b.temperature[r] = 1.0f, b.top_k[r] = 0, b.top_p[r] = 1.0f;
  ingot_sampling_shard sh = INGOT_SAMPLING_SHARD_INITIALIZER;
  sh.vocab_size = V, sh.vocab_begin = 10, sh.vocab_count = 30, sh.num_shards = 2;
  ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  EXPECT_OK(ctx, ingot_sampling_shard_get_plan(ctx, &sh, B, b.dtype, &plan));
  EXPECT(plan.num_steps == 2 && plan.record_bytes[0] == 64 + 48 &&
             plan.record_bytes[1] == (size_t)((64 + 2 * 64 + 15) / 16 * 16),
         "plan of a plain call: %d steps, records %zu %zu", (int)plan.num_steps,
         plan.record_bytes[0], plan.record_bytes[1]);
  void *record = xalloc(plan.max_record_bytes, 0x11);
  void *gathered = xalloc(2 * plan.max_record_bytes, 0x22);
  void *ws = xalloc(plan.workspace_bytes, 0x33);
  ingot_tensor slice = ingot_tensor_2d((char *)b.logits + 10 * (b.dtype == INGOT_DTYPE_F32 ? 4 : 2),
                                       b.dtype, B, 30, b.stride);
  /* B = 0: nothing to do, nothing written */
  ingot_tensor empty = ingot_tensor_2d(b.logits, b.dtype, 0, 30, b.stride);
  ingot_sampling_shard_plan plan0 = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  EXPECT_OK(ctx, ingot_sampling_shard_get_plan(ctx, &sh, 0, b.dtype, &plan0));
  EXPECT(plan0.workspace_bytes == 0 && plan0.record_bytes[0] == 64, "B = 0 plan");
  EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 0, &empty, NULL, &sh, NULL, 0, record,
                                           plan0.record_bytes[0], NULL, 0, NULL));
  EXPECT(((unsigned char *)record)[0] == 0x11, "B = 0 wrote the record");
  /* a row whose top-k / top-p the plan does not serve */
  b.top_k[1] = 7;
  EXPECT_ERROR(ctx,
               ingot_sampling_shard_step(ctx, 0, &slice, &b.params[0], &sh, NULL, 0, record,
                                         plan.record_bytes[0], ws, plan.workspace_bytes, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "top_k[1] = 7 > shard->max_top_k = 0");
  b.top_k[1] = 0, b.top_p[0] = 0.5f;
  EXPECT_ERROR(ctx,
               ingot_sampling_shard_step(ctx, 0, &slice, &b.params[0], &sh, NULL, 0, record,
                                         plan.record_bytes[0], ws, plan.workspace_bytes, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "top_p[0] = 0.5");
  /* greedy rows need nothing; bad per-row values as ingot_sample */
  b.temperature[0] = 0.0f;
  EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 0, &slice, &b.params[0], &sh, NULL, 0, record,
                                           plan.record_bytes[0], ws, plan.workspace_bytes, NULL));
  b.temperature[0] = -1.0f;
  EXPECT_ERROR(ctx,
               ingot_sampling_shard_step(ctx, 0, &slice, &b.params[0], &sh, NULL, 0, record,
                                         plan.record_bytes[0], ws, plan.workspace_bytes, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "temperature[0] = -1");
  free(record), free(gathered), free(ws);
  free_batch(&b);
  return 0;
}

/* Argument checks: named errors, nothing written. */
static int test_invalid_arguments(void) {
  const int64_t V = 50, B = 3;
  batch b;
  make_batch(&b, B, V, 4);
  for (int64_t r = 0; r < B; r++) b.temperature[r] = 1.0f, b.top_k[r] = 0, b.top_p[r] = 1.0f;
  split sp;
  sp.S = 2, sp.begin[0] = 0, sp.count[0] = 20, sp.begin[1] = 20, sp.count[1] = 30;
  ingot_sampling_shard sh = shard_of(&b, &sp, 1, 0, 4, 0);
  ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  EXPECT_OK(ctx, ingot_sampling_shard_get_plan(ctx, &sh, B, b.dtype, &plan));
  const size_t rec0 = plan.record_bytes[0], rec1 = plan.record_bytes[1];
  void *record = xalloc(plan.max_record_bytes, 0x11);
  void *gathered = xalloc(2 * plan.max_record_bytes, 0x22);
  void *ws = xalloc(plan.workspace_bytes, 0x33);
  ingot_tensor slice = slice_of(&b, &sp, 1, 0);
#define STEP(i, shp, g, gb, rec, rb)                                                   \
  ingot_sampling_shard_step(ctx, i, &slice, &b.params[0], shp, g, gb, rec, rb, ws,     \
                            plan.workspace_bytes, NULL)
  /* the shard descriptor */
  ingot_sampling_shard bad = sh;
  bad.struct_size = 8;
  EXPECT_ERROR(ctx, STEP(0, &bad, NULL, 0, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "shard: struct_size = 8");
  bad = sh, bad.vocab_begin = 21;
  EXPECT_ERROR(ctx, STEP(0, &bad, NULL, 0, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "shard: vocab_count = 30, expected 0 <= Vr <= vocab_size - vocab_begin = 29");
  bad = sh, bad.shard_index = 2;
  EXPECT_ERROR(ctx, STEP(0, &bad, NULL, 0, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "shard: shard_index = 2");
  bad = sh, bad.num_shards = 257;
  EXPECT_ERROR(ctx, STEP(0, &bad, NULL, 0, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "shard: num_shards = 257");
  bad = sh, bad.max_top_k = 1025;
  EXPECT_ERROR(ctx, STEP(0, &bad, NULL, 0, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "shard: max_top_k = 1025");
  bad = sh, bad.flags = 0x40;
  EXPECT_ERROR(ctx, STEP(0, &bad, NULL, 0, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "shard: flags = 0x40 has unknown bits");
  bad = sh, bad.flags = INGOT_SAMPLING_SHARD_SOFTMAX;
  EXPECT_ERROR(ctx, STEP(0, &bad, NULL, 0, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "the softmax's plan has no top-n");
  bad = sh, bad.reserved = 1;
  EXPECT_ERROR(ctx, STEP(0, &bad, NULL, 0, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "shard: reserved = 1");
  EXPECT_ERROR(ctx, STEP(0, NULL, NULL, 0, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "shard: NULL");
  /* steps, slice, buffers */
  EXPECT_ERROR(ctx, STEP(2, &sh, gathered, 2 * rec1, record, rec1), INGOT_STATUS_INVALID_ARGUMENT,
               "step = 2, expected 0 <= step < 2");
  ingot_tensor wrong = slice;
  wrong.shape[1] = 29;
  EXPECT_ERROR(ctx,
               ingot_sampling_shard_step(ctx, 0, &wrong, &b.params[0], &sh, NULL, 0, record, rec0,
                                         ws, plan.workspace_bytes, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "logits: shape[1] = 29, expected shard->vocab_count");
  EXPECT_ERROR(ctx, STEP(0, &sh, NULL, 0, record, rec0 - 16), INGOT_STATUS_INVALID_ARGUMENT,
               "record:");
  EXPECT_ERROR(ctx, STEP(0, &sh, NULL, 0, (char *)record + 8, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "record: ");
  EXPECT_ERROR(ctx, STEP(0, &sh, gathered, 16, record, rec0), INGOT_STATUS_INVALID_ARGUMENT,
               "gathered: ");
  EXPECT_ERROR(ctx, STEP(1, &sh, NULL, 0, record, rec1), INGOT_STATUS_INVALID_ARGUMENT,
               "gathered: NULL");
  EXPECT_ERROR(ctx, STEP(1, &sh, gathered, 2 * rec0 - 16, record, rec1),
               INGOT_STATUS_INVALID_ARGUMENT, "gathered: ");
  EXPECT_ERROR(ctx, STEP(1, &sh, gathered, 2 * rec0, gathered, rec1),
               INGOT_STATUS_INVALID_ARGUMENT, "record: overlaps gathered");
  EXPECT_STATUS(ctx,
                ingot_sampling_shard_step(ctx, 0, &slice, &b.params[0], &sh, NULL, 0, record, rec0,
                                          ws, plan.workspace_bytes - 16, NULL),
                INGOT_STATUS_INSUFFICIENT_WORKSPACE);
  /* gathered records that are not this call's step 0 */
  EXPECT_ERROR(ctx, STEP(1, &sh, gathered, 2 * rec0, record, rec1), INGOT_STATUS_INVALID_ARGUMENT,
               "gathered: slot 0 holds no record");
  void *recs[2] = {xalloc(plan.max_record_bytes, 0), xalloc(plan.max_record_bytes, 0)};
  ingot_sampling_shard sh0 = shard_of(&b, &sp, 0, 0, 4, 0);
  ingot_tensor slice0 = slice_of(&b, &sp, 0, 0);
  EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 0, &slice0, &b.params[0], &sh0, NULL, 0, recs[0],
                                           rec0, ws, plan.workspace_bytes, NULL));
  EXPECT_OK(ctx, STEP(0, &sh, NULL, 0, recs[1], rec0));
  const void *swapped[2] = {recs[1], recs[0]};
  EXPECT_OK(ctx, ingot_sampling_shard_gather(ctx, 2, swapped, rec0, gathered, 2 * rec0, NULL));
  EXPECT_ERROR(ctx, STEP(1, &sh, gathered, 2 * rec0, record, rec1), INGOT_STATUS_INVALID_ARGUMENT,
               "gathered: slot 0 holds the record of shard 1 of 2, expected shard 0 of 2");
  EXPECT_ERROR(ctx, STEP(2 - 1, &sh, gathered, 2 * rec0, record, rec1),
               INGOT_STATUS_INVALID_ARGUMENT, "gather in shard_index order");
  const void *twice[2] = {recs[0], recs[0]};
  EXPECT_OK(ctx, ingot_sampling_shard_gather(ctx, 2, twice, rec0, gathered, 2 * rec0, NULL));
  EXPECT_ERROR(ctx, STEP(1, &sh, gathered, 2 * rec0, record, rec1), INGOT_STATUS_INVALID_ARGUMENT,
               "gathered: slot 1 holds the record of shard 0 of 2");
  /* ranges that do not tile [0, V): the other shard claims [0, 25) */
  ingot_sampling_shard over = sh0;
  over.vocab_count = 25;
  ingot_tensor slice_over = ingot_tensor_2d(b.logits, b.dtype, B, 25, b.stride);
  EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 0, &slice_over, &b.params[0], &over, NULL, 0,
                                           recs[0], rec0, ws, plan.workspace_bytes, NULL));
  const void *pair[2] = {recs[0], recs[1]};
  EXPECT_OK(ctx, ingot_sampling_shard_gather(ctx, 2, pair, rec0, gathered, 2 * rec0, NULL));
  EXPECT_ERROR(ctx, STEP(1, &sh, gathered, 2 * rec0, record, rec1), INGOT_STATUS_INVALID_ARGUMENT,
               "overlap");
  over.vocab_count = 15; /* a gap [15, 20) */
  slice_over.shape[1] = 15;
  EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 0, &slice_over, &b.params[0], &over, NULL, 0,
                                           recs[0], rec0, ws, plan.workspace_bytes, NULL));
  EXPECT_OK(ctx, ingot_sampling_shard_gather(ctx, 2, pair, rec0, gathered, 2 * rec0, NULL));
  EXPECT_ERROR(ctx, STEP(1, &sh, gathered, 2 * rec0, record, rec1), INGOT_STATUS_INVALID_ARGUMENT,
               "the shards hold 45 tokens, the vocabulary has 50");
  /* another call's records (another B) */
  ingot_sampling_shard other = sh0;
  other.num_top = 5;
  ingot_sampling_shard_plan plan5 = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  EXPECT_OK(ctx, ingot_sampling_shard_get_plan(ctx, &other, B, b.dtype, &plan5));
  EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 0, &slice0, &b.params[0], &other, NULL, 0, recs[0],
                                           rec0, ws, plan.workspace_bytes, NULL));
  EXPECT_OK(ctx, ingot_sampling_shard_gather(ctx, 2, pair, rec0, gathered, 2 * rec0, NULL));
  EXPECT_ERROR(ctx, STEP(1, &sh, gathered, 2 * rec0, record, rec1), INGOT_STATUS_INVALID_ARGUMENT,
               "gathered: slot 0 was written for another call");
  /* nothing was written by a failed step */
  for (size_t i = 0; i < plan.max_record_bytes; i++)
    if (((unsigned char *)record)[i] != 0x11) {
      test_fail_at(__FILE__, __LINE__, "a failed step wrote the record (byte %zu)", i);
      break;
    }
  /* good steps (shard 0 with its own workspace), then the finishes' own checks */
  void *ws0 = xalloc(plan.workspace_bytes, 0);
  EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 0, &slice0, &b.params[0], &sh0, NULL, 0, recs[0],
                                           rec0, ws0, plan.workspace_bytes, NULL));
  EXPECT_OK(ctx, STEP(0, &sh, NULL, 0, recs[1], rec0));
  EXPECT_OK(ctx, ingot_sampling_shard_gather(ctx, 2, pair, rec0, gathered, 2 * rec0, NULL));
  EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 1, &slice0, &b.params[0], &sh0, gathered, 2 * rec0,
                                           recs[0], rec1, ws0, plan.workspace_bytes, NULL));
  EXPECT_OK(ctx, STEP(1, &sh, gathered, 2 * rec0, recs[1], rec1));
  EXPECT_OK(ctx, ingot_sampling_shard_gather(ctx, 2, pair, rec1, gathered, 2 * rec1, NULL));
  outputs o;
  alloc_outputs(&o, B, V, 4, 0);
  EXPECT_ERROR(ctx,
               ingot_sampling_shard_finish_sample(ctx, &sh, record, rec1, &o.t_tokens,
                                                  &o.t_status, &o.logprobs, ws,
                                                  plan.workspace_bytes, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "gathered: ");
  outputs o3;
  alloc_outputs(&o3, B, V, 3, 0);
  EXPECT_ERROR(ctx,
               ingot_sampling_shard_finish_sample(ctx, &sh, gathered, 2 * rec1, &o3.t_tokens,
                                                  &o3.t_status, &o3.logprobs, ws,
                                                  plan.workspace_bytes, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "the plan's shard->num_top = 4");
  o.logprobs.flags = INGOT_SAMPLING_TOP_FINAL;
  EXPECT_ERROR(ctx,
               ingot_sampling_shard_finish_sample(ctx, &sh, gathered, 2 * rec1, &o.t_tokens,
                                                  &o.t_status, &o.logprobs, ws,
                                                  plan.workspace_bytes, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "the top-n kind");
  o.logprobs.flags = 0;
  ingot_tensor tp = ingot_tensor_2d(o.probs, INGOT_DTYPE_F32, B, 30, 30);
  EXPECT_ERROR(ctx,
               ingot_sampling_shard_finish_softmax(ctx, &slice, &b.params[0], &sh, gathered,
                                                   2 * rec1, &tp, NULL, ws, plan.workspace_bytes,
                                                   NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "expected INGOT_SAMPLING_SHARD_SOFTMAX");
  for (size_t i = 0; i < (size_t)B * 4; i++)
    if (((unsigned char *)o.tokens)[i] != 0x5a || ((unsigned char *)o.lp)[i] != 0x5a) {
      test_fail_at(__FILE__, __LINE__, "a failed finish wrote an output (byte %zu)", i);
      break;
    }
  EXPECT_OK(ctx, ingot_sampling_shard_finish_sample(ctx, &sh, gathered, 2 * rec1, &o.t_tokens,
                                                    &o.t_status, &o.logprobs, ws,
                                                    plan.workspace_bytes, NULL));
  /* the gather's own checks */
  EXPECT_ERROR(ctx, ingot_sampling_shard_gather(ctx, 0, pair, rec0, gathered, 2 * rec0, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "num_shards = 0");
  EXPECT_ERROR(ctx, ingot_sampling_shard_gather(ctx, 2, pair, rec0 + 8, gathered, 4 * rec0, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "record_bytes = ");
  EXPECT_ERROR(ctx, ingot_sampling_shard_gather(ctx, 2, pair, rec0, gathered, 2 * rec0 - 16, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "gathered: ");
  const void *self[2] = {recs[0], gathered};
  EXPECT_ERROR(ctx, ingot_sampling_shard_gather(ctx, 2, self, rec0, gathered, 2 * rec0, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "gathered: overlaps records[1]");
  EXPECT_ERROR(ctx, ingot_sampling_shard_gather(ctx, 2, NULL, rec0, gathered, 2 * rec0, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "records: NULL");
  /* the plan query */
  ingot_sampling_shard_plan p2 = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  p2.struct_size = 4;
  EXPECT_ERROR(ctx, ingot_sampling_shard_get_plan(ctx, &sh, B, b.dtype, &p2),
               INGOT_STATUS_INVALID_ARGUMENT, "plan: struct_size = 4");
  EXPECT(p2.num_steps == 0, "a failed plan query wrote the plan");
  EXPECT_ERROR(ctx, ingot_sampling_shard_get_plan(ctx, &sh, -1, b.dtype, &plan),
               INGOT_STATUS_INVALID_ARGUMENT, "batch = -1");
  EXPECT_ERROR(ctx, ingot_sampling_shard_get_plan(ctx, &sh, B, INGOT_DTYPE_I32, &plan),
               INGOT_STATUS_INVALID_ARGUMENT, "logits_dtype");
  EXPECT_ERROR(ctx, ingot_sampling_shard_get_plan(ctx, &sh, B, b.dtype, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "plan: NULL");
#undef STEP
  free_outputs(&o), free_outputs(&o3);
  free(recs[0]), free(recs[1]), free(record), free(gathered), free(ws), free(ws0);
  free_batch(&b);
  return 0;
}

/* The sum exchange: the local sum's own checks, and steps that refuse a
 * sum of the wrong records (too few, one slot twice, a gather). */
static int test_sum_exchange(void) {
  const int64_t V = 60, B = 2;
  batch b;
  make_batch(&b, B, V, 4);
  for (int64_t r = 0; r < B; r++) b.temperature[r] = 1.0f, b.top_k[r] = 0, b.top_p[r] = 0.5f;
  split sp;
  sp.S = 2, sp.begin[0] = 0, sp.count[0] = 25, sp.begin[1] = 25, sp.count[1] = 35;
  const uint32_t flags = INGOT_SAMPLING_SHARD_SELECT_TOP_P;
  ingot_sampling_shard sh[2] = {shard_of(&b, &sp, 0, 0, 0, flags),
                                shard_of(&b, &sp, 1, 0, 0, flags)};
  ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  EXPECT_OK(ctx, ingot_sampling_shard_get_plan(ctx, &sh[0], B, b.dtype, &plan));
  EXPECT(plan.num_steps == 6 && plan.exchange[0] == INGOT_SAMPLING_SHARD_EXCHANGE_GATHER &&
             plan.exchange[1] == INGOT_SAMPLING_SHARD_EXCHANGE_SUM &&
             plan.exchange[4] == INGOT_SAMPLING_SHARD_EXCHANGE_GATHER &&
             plan.record_bytes[1] == 128 + 2 * 8192 && plan.exchanged_bytes[1] == 128 + 2 * 8192 &&
             plan.exchanged_bytes[0] == 2 * plan.record_bytes[0],
         "the plan of top-p by radix rounds");
  void *recs[2], *ws[2];
  void *gathered = xalloc(2 * plan.max_record_bytes, 0);
  void *out = xalloc(plan.max_record_bytes, 0);
  ingot_tensor slice[2] = {slice_of(&b, &sp, 0, 0), slice_of(&b, &sp, 1, 0)};
  size_t ws_bytes[2];
  for (int j = 0; j < 2; j++) {
    ingot_sampling_shard_plan pj = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
    EXPECT_OK(ctx, ingot_sampling_shard_get_plan(ctx, &sh[j], B, b.dtype, &pj));
    ws_bytes[j] = pj.workspace_bytes;
    recs[j] = xalloc(plan.max_record_bytes, 0), ws[j] = xalloc(ws_bytes[j], 0);
  }
  for (int j = 0; j < 2; j++)
    EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 0, &slice[j], &b.params[0], &sh[j], NULL, 0,
                                             recs[j], plan.record_bytes[0], ws[j], ws_bytes[j],
                                             NULL));
  const void *pair[2] = {recs[0], recs[1]};
  EXPECT_OK(ctx, ingot_sampling_shard_gather(ctx, 2, pair, plan.record_bytes[0], gathered,
                                             plan.exchanged_bytes[0], NULL));
  for (int j = 0; j < 2; j++)
    EXPECT_OK(ctx, ingot_sampling_shard_step(ctx, 1, &slice[j], &b.params[0], &sh[j], gathered,
                                             plan.exchanged_bytes[0], recs[j],
                                             plan.record_bytes[1], ws[j], ws_bytes[j], NULL));
  const size_t rec = plan.record_bytes[1];
#define STEP2(g, gb)                                                              \
  ingot_sampling_shard_step(ctx, 2, &slice[1], &b.params[0], &sh[1], g, gb, out,     \
                            plan.record_bytes[2], ws[1], ws_bytes[1], NULL)
  /* the local sum's own checks */
  EXPECT_ERROR(ctx, ingot_sampling_shard_sum(ctx, 2, pair, 64, gathered, rec, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "record_bytes = 64");
  EXPECT_ERROR(ctx, ingot_sampling_shard_sum(ctx, 2, pair, rec, gathered, rec - 16, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "summed: ");
  EXPECT_ERROR(ctx, ingot_sampling_shard_sum(ctx, 2, pair, rec, recs[1], rec, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "summed: overlaps records[1]");
  EXPECT_ERROR(ctx, ingot_sampling_shard_sum(ctx, 300, pair, rec, gathered, rec, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "num_shards = 300");
  /* sums of the wrong records */
  EXPECT_OK(ctx, ingot_sampling_shard_sum(ctx, 1, pair, rec, gathered, rec, NULL));
  EXPECT_ERROR(ctx, STEP2(gathered, rec), INGOT_STATUS_INVALID_ARGUMENT,
               "gathered: not the sum of 2 records");
  const void *twice[2] = {recs[1], recs[1]};
  EXPECT_OK(ctx, ingot_sampling_shard_sum(ctx, 2, twice, rec, gathered, rec, NULL));
  EXPECT_ERROR(ctx, STEP2(gathered, rec), INGOT_STATUS_INVALID_ARGUMENT,
               "gathered: the sum is not of one record per slot 0 .. 1");
  EXPECT_OK(ctx, ingot_sampling_shard_gather(ctx, 2, pair, rec, gathered, 2 * rec, NULL));
  EXPECT_ERROR(ctx, STEP2(gathered, 2 * rec), INGOT_STATUS_INVALID_ARGUMENT,
               "gathered: not the sum of 2 records");
  EXPECT_ERROR(ctx, STEP2(gathered, rec - 16), INGOT_STATUS_INVALID_ARGUMENT, "gathered: ");
  EXPECT_OK(ctx, ingot_sampling_shard_sum(ctx, 2, pair, rec, gathered, rec, NULL));
  EXPECT_OK(ctx, STEP2(gathered, rec));
#undef STEP2
  /* the carry-safe limbs: 256 sums near 2^181 add word by word to the exact total */
  for (int rep = 0; rep < 50; rep++) {
    ingot_exact_sum total, part;
    uint64_t limbs[INGOT_EXACT_SUM_LIMBS] = {0, 0, 0, 0}, one[INGOT_EXACT_SUM_LIMBS];
    ingot_exact_sum_clear(&total);
    for (int j = 0; j < 256; j++) {
      ingot_exact_sum_clear(&part);
      for (int t = 0; t < 4; t++)
        ingot_exact_sum_add_f32_times(&part, ingot_sampling_exp((float)(-3.0 * test_rand_unit())),
                                      (uint32_t)(test_rand() >> 40) | (rep % 2 ? 0x800000u : 0u));
      ingot_exact_sum_add_shifted(&part, test_rand() >> 20, (unsigned)(test_rand() % 130));
      ingot_exact_sum_add(&total, &part);
      ingot_exact_sum_to_limbs(&part, one);
      for (int w = 0; w < INGOT_EXACT_SUM_LIMBS; w++) limbs[w] += one[w];
    }
    ingot_exact_sum back;
    ingot_exact_sum_from_limbs(limbs, &back);
    if (memcmp(&back, &total, sizeof back) != 0) {
      test_fail_at(__FILE__, __LINE__, "limbs: the normalised sum differs from the exact total");
      break;
    }
  }
  for (int j = 0; j < 2; j++) free(recs[j]), free(ws[j]);
  free(gathered), free(out);
  free_batch(&b);
  return 0;
}

/* The exchange sizes of typical plans: bytes a row that every shard holds
 * after the exchanges (all-gather: S records; sum: one), against an
 * all-gather of the f32 logits (4 V). Headers left out (B = 64 spreads
 * them to about 1-2 bytes a row). */
static int test_exchange_sizes(void) {
  const int64_t B = 64;
  static const int32_t shard_counts[] = {2, 4, 8};
  static const struct {
    const char *what;
    int32_t kc, n;
    uint32_t flags;
  } plans[] = {
      {"plain step (masks, temperature, min-p, logprobs)", 0, 0, 0},
      {"plain + top-8 logprobs", 0, 8, 0},
      {"top-k <= 64 (+ top-p, min-p)", 64, 0, 0},
      {"top-p alone (radix)", 0, 0, INGOT_SAMPLING_SHARD_SELECT_TOP_P},
      {"top-k > kc + top-p (radix)", 0, 0,
       INGOT_SAMPLING_SHARD_SELECT_TOP_K | INGOT_SAMPLING_SHARD_SELECT_TOP_P},
      {"softmax, top-k <= 64", 64, 0, INGOT_SAMPLING_SHARD_SOFTMAX},
  };
  printf("  bytes a row on every shard after the exchanges, S = 2 / 4 / 8 (logits all-gather: "
         "607744 at V = 151936, 1048576 at V = 262144):\n");
  for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
    size_t total[3] = {0, 0, 0};
    char steps[160] = "";
    int num_steps = 0;
    for (int k = 0; k < 3; k++) {
      ingot_sampling_shard sh = INGOT_SAMPLING_SHARD_INITIALIZER;
      sh.vocab_size = 151936, sh.vocab_count = 151936, sh.num_shards = shard_counts[k];
      sh.max_top_k = plans[i].kc, sh.num_top = plans[i].n, sh.flags = plans[i].flags;
      ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
      EXPECT_OK(ctx, ingot_sampling_shard_get_plan(ctx, &sh, B, INGOT_DTYPE_F32, &plan));
      num_steps = plan.num_steps;
      for (int s = 0; s < plan.num_steps; s++) {
        const int sum = plan.exchange[s] == INGOT_SAMPLING_SHARD_EXCHANGE_SUM;
        const size_t copies = sum ? 1u : (size_t)sh.num_shards;
        size_t per_row = (plan.record_bytes[s] - (sum ? 128 : 64)) / (size_t)B;
        EXPECT(plan.exchanged_bytes[s] == plan.record_bytes[s] * copies,
               "exchanged_bytes of step %d", s);
        total[k] += per_row * copies;
        size_t used = strlen(steps);
        if (k == 0)
          snprintf(steps + used, sizeof steps - used, "%s%zu%s", s ? " + " : "", per_row,
                   sum ? " sum" : "");
      }
    }
    printf("    %-50s %2d exchanges, %6zu / %6zu / %6zu (%s)\n", plans[i].what, num_steps,
           total[0], total[1], total[2], steps);
  }
  return 0;
}

/* The NCCL form on the CPU: its workspace query (the steps' workspace, one
 * record and one gathered buffer, each rounded up to 256) and a refusal by
 * name that writes nothing (NCCL is a GPU transport). */
static int test_nccl_form_on_cpu(void) {
  ingot_sampling_shard sh = INGOT_SAMPLING_SHARD_INITIALIZER;
  sh.vocab_size = 1000, sh.vocab_begin = 0, sh.vocab_count = 600, sh.num_shards = 2;
  sh.max_top_k = 8, sh.num_top = 2;
  const int64_t B = 3;
  ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  EXPECT_OK(ctx, ingot_sampling_shard_get_plan(ctx, &sh, B, INGOT_DTYPE_F32, &plan));
  size_t bytes = 0;
  EXPECT_OK(ctx, ingot_sampling_sharded_nccl_workspace_size(ctx, &sh, B, INGOT_DTYPE_F32, &bytes));
#define UP256(x) (((x) + 255) / 256 * 256)
  EXPECT(bytes == UP256(plan.workspace_bytes) + UP256(plan.max_record_bytes) +
                      UP256(plan.max_exchanged_bytes),
         "workspace %zu for plan parts %zu + %zu + %zu", bytes, plan.workspace_bytes,
         plan.max_record_bytes, plan.max_exchanged_bytes);
#undef UP256
  EXPECT_OK(ctx, ingot_sampling_sharded_nccl_workspace_size(ctx, &sh, 0, INGOT_DTYPE_F32, &bytes));
  EXPECT(bytes == 0, "workspace %zu for B = 0", bytes);
  EXPECT_ERROR(ctx, ingot_sampling_sharded_nccl_workspace_size(ctx, &sh, B, INGOT_DTYPE_F32, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "bytes: NULL");
  sh.num_shards = 0;
  EXPECT_ERROR(ctx,
               ingot_sampling_sharded_nccl_workspace_size(ctx, &sh, B, INGOT_DTYPE_F32, &bytes),
               INGOT_STATUS_INVALID_ARGUMENT, "shard: num_shards = 0");
  sh.num_shards = 2;
  float logits[3 * 600];
  memset(logits, 0, sizeof logits);
  int32_t tokens[3] = {-7, -7, -7};
  ingot_tensor tl = ingot_tensor_2d(logits, INGOT_DTYPE_F32, B, 600, 600);
  ingot_tensor tt = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B);
  struct ncclComm *comm = (struct ncclComm *)(uintptr_t)0x1000; /* never used by a CPU context */
  EXPECT_ERROR(ctx,
               ingot_sample_sharded_nccl(ctx, comm, &tl, NULL, &sh, &tt, NULL, NULL, NULL, 0, NULL),
               INGOT_STATUS_NOT_SUPPORTED, "needs a CUDA context");
  sh.flags = INGOT_SAMPLING_SHARD_SOFTMAX, sh.num_top = 0;
  float probs[3 * 600];
  ingot_tensor tp = ingot_tensor_2d(probs, INGOT_DTYPE_F32, B, 600, 600);
  EXPECT_ERROR(ctx,
               ingot_sampling_softmax_sharded_nccl(ctx, comm, &tl, NULL, &sh, &tp, NULL, NULL, 0,
                                                   NULL),
               INGOT_STATUS_NOT_SUPPORTED, "needs a CUDA context");
  EXPECT_ERROR(ctx,
               ingot_sample_sharded_nccl(ctx, comm, &tl, NULL, &sh, &tt, NULL, NULL, NULL, 0, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "expected INGOT_SAMPLING_SHARD_SOFTMAX");
  for (int r = 0; r < 3; r++) EXPECT(tokens[r] == -7, "tokens[%d] written by a refused call", r);
  EXPECT_ERROR(ctx, ingot_sampling_sharded_nccl_verify(ctx, comm, &sh, B, INGOT_DTYPE_F32, NULL),
               INGOT_STATUS_NOT_SUPPORTED, "needs a CUDA context");
  return 0;
}

int main(void) {
  test_init("test_sampling_shard");
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &ctx) != INGOT_OK) {
    printf("cannot create a CPU context: %s\n", ingot_last_error(NULL));
    return 1;
  }
  test_run("bit_identical_to_unsharded", test_bit_identical);
  test_run("ties_across_borders", test_ties_across_borders);
  test_run("constructed_rows", test_constructed_rows);
  test_run("exact_sum_order_free", test_exact_sum_order_free);
  test_run("special_calls", test_special_calls);
  test_run("invalid_arguments", test_invalid_arguments);
  test_run("sum_exchange", test_sum_exchange);
  test_run("exchange_sizes", test_exchange_sizes);
  test_run("nccl_form_on_cpu", test_nccl_form_on_cpu);
  ingot_context_destroy(ctx);
  return test_finish();
}
