/*
 * `ingot bench` cases for sharded sampling (include/ingot/ingot.h, "Sharded
 * sampling"): the logits [B, V] split evenly into S = 2 or 8 vocabulary
 * shards, and every shard's steps, the plan's exchanges (the one-process
 * ingot_sampling_shard_gather / _sum) and one shard's finish enqueued on one
 * device: the whole work of a sharded call, to hold beside the unsharded
 * call's row of the same shape (family "sampling"). A tensor-parallel rank
 * runs one shard's steps, its collectives and the finish; this case runs
 * all S shards' steps on one GPU.
 *   sample  top-k 50 + top-p 0.9 (temperature 1; the shards send their top-64
 *           candidates), B = 1 and 64, V = 151936, f32 logits
 *   sample  temperature 0.8 with both log-probabilities, B = 1 and 64,
 *           V = 151936
 * Logits as the sampling family's stress rows (3 x a normal-ish variate).
 *
 * Floor: the logits read once. The note also gives the bytes the records
 * exchange in one call against an all-gather of the f32 logits.
 *
 * Check: tokens, row statuses and both log-probabilities bit for bit those
 * of ingot_sample on the CPU reference (the header's promise for either
 * backend).
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

enum { CASE_TOPK_TOPP, CASE_LOGPROBS };
enum { kCandidates = 64 };

typedef struct shard_params {
  int kind;
  int32_t shards;
  int64_t batch, vocab;
} shard_params;

typedef struct shard_state {
  shard_params p;
  int slots;
  float *logits; /* [slots][B, V] */
  float *temperature, *top_p, *lp, *raw_lp;
  int32_t *top_k, *tokens;
  uint64_t *seed; /* [slots][B] */
  uint32_t *status;
  ingot_sampling_shard shard[INGOT_SAMPLING_SHARD_MAX_SHARDS];
  ingot_sampling_shard_plan plan[INGOT_SAMPLING_SHARD_MAX_SHARDS];
  void *records[INGOT_SAMPLING_SHARD_MAX_SHARDS], *ws[INGOT_SAMPLING_SHARD_MAX_SHARDS];
  void *gathered;
  /* host copies of slot 0 */
  float *h_logits, *h_temperature, *h_top_p;
  int32_t *h_top_k;
  uint64_t *h_seed;
} shard_state;

/* The call's parameters on the given buffers (device or host): the
 * unsharded call's, identical on every shard. */
typedef struct param_tensors {
  ingot_tensor t, k, p, seed;
  ingot_sampling_params prm;
} param_tensors;

static void describe_params(param_tensors *d, const shard_state *s, const float *temperature,
                            const int32_t *top_k, const float *top_p, const uint64_t *seed) {
  const int64_t B = s->p.batch;
  d->t = ingot_tensor_1d((void *)temperature, INGOT_DTYPE_F32, B);
  d->k = ingot_tensor_1d((void *)top_k, INGOT_DTYPE_I32, B);
  d->p = ingot_tensor_1d((void *)top_p, INGOT_DTYPE_F32, B);
  d->seed = ingot_tensor_1d((void *)seed, INGOT_DTYPE_U64, B);
  ingot_sampling_params prm = INGOT_SAMPLING_PARAMS_INITIALIZER;
  prm.temperature = &d->t, prm.seed = &d->seed;
  if (s->p.kind == CASE_TOPK_TOPP) prm.top_k = &d->k, prm.top_p = &d->p;
  d->prm = prm;
}

/* The outputs' descriptors (both log-probabilities for CASE_LOGPROBS). */
typedef struct out_tensors {
  ingot_tensor tokens, status, lp, raw;
  ingot_sampling_logprobs lps;
} out_tensors;

static void describe_outs(out_tensors *d, const shard_state *s, int32_t *tokens, uint32_t *status,
                          float *lp, float *raw) {
  const int64_t B = s->p.batch;
  d->tokens = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B);
  d->status = ingot_tensor_1d(status, INGOT_DTYPE_U32, B);
  d->lp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, B);
  d->raw = ingot_tensor_1d(raw, INGOT_DTYPE_F32, B);
  ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  if (s->p.kind == CASE_LOGPROBS) lps.token_logprob = &d->lp, lps.token_raw_logprob = &d->raw;
  d->lps = lps;
}

static int shard_setup(bench_env *env, const void *params, void **state, bench_info *info) {
  const shard_params *p = params;
  shard_state *s = bench_alloc(env, BENCH_MEM_HOST, sizeof *s);
  if (!s) return BENCH_FAIL;
  memset(s, 0, sizeof *s);
  s->p = *p;
  const int64_t B = p->batch, V = p->vocab;
  const int32_t S = p->shards;
  const double logits_bytes = 4.0 * (double)(B * V);
  s->slots = bench_slots_for(env, logits_bytes);
  const size_t slots = (size_t)s->slots;
  s->logits = bench_alloc(env, BENCH_MEM_DEVICE, slots * (size_t)(B * V) * 4);
  s->seed = bench_alloc(env, BENCH_MEM_DEVICE, slots * (size_t)B * 8);
  s->temperature = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->top_p = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->top_k = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->tokens = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->status = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->lp = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->raw_lp = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->h_logits = bench_alloc(env, BENCH_MEM_HOST, (size_t)(B * V) * 4);
  s->h_seed = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 8);
  s->h_temperature = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 4);
  s->h_top_p = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 4);
  s->h_top_k = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 4);
  if (!s->logits || !s->seed || !s->temperature || !s->top_p || !s->top_k || !s->tokens ||
      !s->status || !s->lp || !s->raw_lp || !s->h_logits || !s->h_seed || !s->h_temperature ||
      !s->h_top_p || !s->h_top_k)
    return BENCH_FAIL;
  for (int64_t r = 0; r < B; r++) {
    s->h_temperature[r] = p->kind == CASE_TOPK_TOPP ? 1.0f : 0.8f;
    s->h_top_p[r] = p->kind == CASE_TOPK_TOPP ? 0.9f : 1.0f;
    s->h_top_k[r] = p->kind == CASE_TOPK_TOPP ? 50 : 0;
  }
  if (bench_upload(env, s->temperature, s->h_temperature, (size_t)B * 4) ||
      bench_upload(env, s->top_p, s->h_top_p, (size_t)B * 4) ||
      bench_upload(env, s->top_k, s->h_top_k, (size_t)B * 4))
    return BENCH_FAIL;
  /* slot 0 last, so that the host copies hold slot 0 */
  for (int slot = s->slots - 1; slot >= 0; slot--) {
    bench_rng rng = bench_rng_seed("sampling_shard", (uint64_t)slot * 1000 + (uint64_t)p->kind);
    for (int64_t i = 0; i < B * V; i++) s->h_logits[i] = 3.0f * bench_normalish(&rng);
    for (int64_t r = 0; r < B; r++) s->h_seed[r] = bench_rand(&rng);
    if (bench_upload(env, s->logits + (size_t)slot * (size_t)(B * V), s->h_logits,
                     (size_t)(B * V) * 4) ||
        bench_upload(env, s->seed + (size_t)slot * (size_t)B, s->h_seed, (size_t)B * 8))
      return BENCH_FAIL;
  }
  /* an even split; every shard's plan (record sizes are the same on all) */
  size_t exchanged = 0;
  for (int32_t j = 0; j < S; j++) {
    ingot_sampling_shard sh = INGOT_SAMPLING_SHARD_INITIALIZER;
    sh.vocab_size = V;
    sh.vocab_begin = V * j / S;
    sh.vocab_count = V * (j + 1) / S - sh.vocab_begin;
    sh.num_shards = S;
    sh.shard_index = j;
    sh.max_top_k = p->kind == CASE_TOPK_TOPP ? kCandidates : 0;
    s->shard[j] = sh;
    ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
    ingot_status st = ingot_sampling_shard_get_plan(env->ctx, &sh, B, INGOT_DTYPE_F32, &plan);
    if (bench_status(env, env->ctx, st, "shard plan")) return BENCH_FAIL;
    s->plan[j] = plan;
    s->records[j] = bench_alloc(env, BENCH_MEM_DEVICE, plan.max_record_bytes);
    s->ws[j] = bench_alloc(env, BENCH_MEM_DEVICE, plan.workspace_bytes ? plan.workspace_bytes : 1);
    if (!s->records[j] || !s->ws[j]) return BENCH_FAIL;
  }
  const ingot_sampling_shard_plan *plan = &s->plan[0];
  for (int i = 0; i < plan->num_steps; i++) exchanged += plan->exchanged_bytes[i];
  if (!(s->gathered = bench_alloc(env, BENCH_MEM_DEVICE, plan->max_exchanged_bytes)))
    return BENCH_FAIL;
  info->slots = s->slots;
  info->bytes_device = logits_bytes;
  snprintf(info->floor_note, sizeof info->floor_note,
           "logits read once; %d steps exchange %zu B a shard (all-gather of the f32 logits: "
           "%.0f B)",
           plan->num_steps, exchanged, logits_bytes);
  *state = s;
  return BENCH_OK;
}

/* Every shard's steps with the plan's exchange after each, then shard 0's finish. */
static ingot_status shard_call(bench_env *env, shard_state *s, int slot) {
  const int64_t B = s->p.batch, V = s->p.vocab;
  const ingot_sampling_shard_plan *plan = &s->plan[0];
  const float *logits = s->logits + (size_t)slot * (size_t)(B * V);
  param_tensors d;
  describe_params(&d, s, s->temperature, s->top_k, s->top_p, s->seed + (size_t)slot * (size_t)B);
  for (int i = 0; i < plan->num_steps; i++) {
    for (int32_t j = 0; j < s->p.shards; j++) {
      const ingot_sampling_shard *sh = &s->shard[j];
      ingot_tensor slice = ingot_tensor_2d((void *)(logits + sh->vocab_begin), INGOT_DTYPE_F32, B,
                                           sh->vocab_count, V);
      ingot_status st = ingot_sampling_shard_step(
          env->ctx, i, &slice, &d.prm, sh, i ? s->gathered : NULL,
          i ? plan->exchanged_bytes[i - 1] : 0, s->records[j], plan->record_bytes[i], s->ws[j],
          s->plan[j].workspace_bytes, env->stream);
      if (st) return st;
    }
    ingot_status st = (plan->exchange[i] == INGOT_SAMPLING_SHARD_EXCHANGE_SUM
                           ? ingot_sampling_shard_sum
                           : ingot_sampling_shard_gather)(
        env->ctx, s->p.shards, (const void *const *)s->records, plan->record_bytes[i],
        s->gathered, plan->max_exchanged_bytes, env->stream);
    if (st) return st;
  }
  out_tensors o;
  describe_outs(&o, s, s->tokens, s->status, s->lp, s->raw_lp);
  return ingot_sampling_shard_finish_sample(env->ctx, &s->shard[0], s->gathered,
                                            plan->exchanged_bytes[plan->num_steps - 1],
                                            &o.tokens, &o.status, &o.lps, s->ws[0],
                                            s->plan[0].workspace_bytes, env->stream);
}

static ingot_status shard_run(bench_env *env, void *state, int slot) {
  return shard_call(env, state, slot);
}

static int shard_check(bench_env *env, void *state) {
  shard_state *s = state;
  const int64_t B = s->p.batch, V = s->p.vocab;
  ingot_status st = shard_call(env, s, 0);
  if (bench_status(env, env->ctx, st, "sharded call") || bench_sync(env)) return BENCH_FAIL;
  /* [tokens][status][lp][raw]: got, then want */
  uint32_t *got = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 16);
  uint32_t *want = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 16);
  size_t ws_bytes = 0;
  st = ingot_sample_workspace_size(env->ref, B, V, INGOT_DTYPE_F32, 0, &ws_bytes);
  void *ws = bench_alloc(env, BENCH_MEM_HOST, ws_bytes ? ws_bytes : 1);
  if (!got || !want || !ws || bench_status(env, env->ref, st, "reference workspace size"))
    return BENCH_FAIL;
  memset(want, 0, (size_t)B * 16), memset(got, 0, (size_t)B * 16);
  param_tensors d;
  describe_params(&d, s, s->h_temperature, s->h_top_k, s->h_top_p, s->h_seed);
  out_tensors o;
  describe_outs(&o, s, (int32_t *)(void *)want, want + B, (float *)(void *)(want + 2 * B),
                (float *)(void *)(want + 3 * B));
  ingot_tensor tl = ingot_tensor_2d(s->h_logits, INGOT_DTYPE_F32, B, V, V);
  st = ingot_sample(env->ref, &tl, &d.prm, &o.tokens, &o.status, &o.lps, ws, ws_bytes, NULL);
  if (bench_status(env, env->ref, st, "reference")) return BENCH_FAIL;
  if (bench_download(env, got, s->tokens, (size_t)B * 4) ||
      bench_download(env, got + B, s->status, (size_t)B * 4))
    return BENCH_FAIL;
  if (s->p.kind == CASE_LOGPROBS && (bench_download(env, got + 2 * B, s->lp, (size_t)B * 4) ||
                                     bench_download(env, got + 3 * B, s->raw_lp, (size_t)B * 4)))
    return BENCH_FAIL;
  return bench_compare_bytes(env, "tokens, row_status, token_logprob, token_raw_logprob", got,
                             want, (size_t)B * 16, 4);
}

static const bench_ops shard_ops = {shard_setup, shard_run, shard_check, NULL};

void bench_sampling_shard_register(bench_registry *reg) {
  static const struct {
    int kind;
    int32_t S;
    int64_t B;
    const char *name;
  } cases[] = {
      {CASE_TOPK_TOPP, 2, 1, "top-k 50 + top-p 0.9 S=2 B=1 V=151936"},
      {CASE_TOPK_TOPP, 8, 1, "top-k 50 + top-p 0.9 S=8 B=1 V=151936"},
      {CASE_TOPK_TOPP, 2, 64, "top-k 50 + top-p 0.9 S=2 B=64 V=151936"},
      {CASE_TOPK_TOPP, 8, 64, "top-k 50 + top-p 0.9 S=8 B=64 V=151936"},
      {CASE_LOGPROBS, 8, 1, "temperature + both logprobs S=8 B=1 V=151936"},
      {CASE_LOGPROBS, 8, 64, "temperature + both logprobs S=8 B=64 V=151936"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    shard_params p = {cases[i].kind, cases[i].S, cases[i].B, 151936};
    bench_add(reg, "sampling_shard", "sample", cases[i].name, &shard_ops, &p, sizeof p);
  }
}
