/*
 * `ingot bench` cases for the sampling ops (include/ingot/ingot.h, Sampling
 * section), at the documented shapes:
 *   softmax  B=1 V=151936 and B=64 V=262144 (f32 logits, temperature 0.8; the
 *            latter again with bf16 logits)
 *   sample   "masked step": an xgrammar bitmask (half the tokens allowed),
 *            temperature 0.8, the drawn token's final and raw logprob;
 *            B=1 V=151936 and B=64 V=262144 (the latter's LLM-like form, below,
 *            again with bf16 logits)
 *   sample   top-k 50 + top-p 0.9 (temperature 1), B=1 and B=64, V=151936
 *            (the dense kernel's small top-k path; the general kernel is
 *            launched too and finds no row of its own)
 *   sample   top-p 0.9 alone (temperature 1), B=1 and B=64, V=151936: on
 *            logits like a language model's (F 5-35 tokens deep) the dense
 *            kernel draws every row in its top-64 set; on the stress logits
 *            (F thousands deep) it hands every row to the general kernel's
 *            radix selects once it has the row's mass: the hand-off's cost
 *   sample   the masked step with 8 top (token, logprob) pairs as well, B=1
 *            V=151936 and B=64 V=262144, of the raw distribution (the
 *            logits read again) and of the final one; and the raw top-8 of
 *            a step without a bitmask (the dense kernel's top-n kernel)
 * and the softmax and masked-step rows again with top_k (0) and top_p (1)
 * tensors passed, as engines do: two launches (the dense kernel takes the
 * rows, the general kernel finds none of its own).
 * Logits: 3 x a normal-ish variate (Irwin-Hall sum of four uniforms), so s =
 * (l - max) / T spreads over about [-30, 0] and almost every token needs its
 * Gumbel noise (the draw skips only tokens with s < -26): a hard case for the
 * draw, not the easiest one. The masked step runs again on logits shaped
 * like a language model's (llm_logit), where the draw's filter leaves ~0.2%
 * of the tokens: what a decode step usually costs. Every slot has its own
 * logits and seeds.
 *
 * Floors: bytes of logits read once, plus probs written once (softmax), at
 * the measured copy rate. The masked step also reads the bitmask.
 *
 * Checks against the CPU reference backend: tokens and row statuses
 * identical; probabilities and log-probabilities within 2e-6 relative (the
 * CPU sums masses in double; on CUDA the general kernel in 64-bit fixed
 * point, the dense kernel in fp32 groups of four, then double).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

enum { CASE_SOFTMAX, CASE_MASKED, CASE_TOPK_TOPP, CASE_TOPP, CASE_TOPN };

enum { kTopN = 8 }; /* CASE_TOPN's top-n columns */

typedef struct sampling_params {
  int kind;
  int64_t batch, vocab;
  int off_tensors; /* pass top_k = 0 and top_p = 1 tensors (every row off) */
  int llm_like;    /* logits shaped like a language model's (see llm_logit) */
  int top_final;   /* CASE_TOPN: the final distribution's top-n (else the raw one's) */
  int no_mask;     /* CASE_TOPN: no bitmask */
  int bf16;        /* bf16 logits (else f32) */
} sampling_params;

typedef struct sampling_state {
  sampling_params p;
  int slots;
  int64_t words;
  /* bench memory, [slots][...] */
  void *logits; /* f32 or bf16 */
  float *probs, *temperature, *top_p, *lp, *raw_lp;
  int32_t *top_k, *tokens, *top_ids; /* top_ids, top_lp: [B, kTopN] */
  float *top_lp;
  uint64_t *seed;
  uint32_t *allowed, *status;
  /* host copies of slot 0 */
  void *h_logits;
  float *h_temperature, *h_top_p;
  int32_t *h_top_k;
  uint64_t *h_seed;
  uint32_t *h_allowed;
  void *ws; /* env->ctx's workspace (none on CUDA) */
  size_t ws_bytes;
} sampling_state;

/* A language model's logits at a decode step, roughly: a bulk (2.5 x the
 * variate above, within +-8.7) and a head of one token in 256 raised by 8 to
 * 24, so the maximum sits ~20-30 above the bulk. At T = 0.8 the bulk has
 * s < -26 and needs no Gumbel noise; ~0.1-0.2% of the tokens do. */
static float llm_logit(bench_rng *r) {
  const float bulk = 2.5f * bench_normalish(r);
  if (bench_rand_below(r, 256) != 0) return bulk;
  return bulk + 8.0f + 16.0f * (float)bench_rand_below(r, 1u << 24) / (float)(1u << 24);
}

static int64_t num_top_of(const sampling_params *p) { return p->kind == CASE_TOPN ? kTopN : 0; }

static ingot_dtype logits_dtype(const sampling_params *p) {
  return p->bf16 ? INGOT_DTYPE_BF16 : INGOT_DTYPE_F32;
}

/* The masked step's outputs: both log-probabilities. */
static int masked_kind(int kind) { return kind == CASE_MASKED || kind == CASE_TOPN; }

static int sampling_setup(bench_env *env, const void *params, void **state, bench_info *info) {
  const sampling_params *p = params;
  sampling_state *s = bench_alloc(env, BENCH_MEM_HOST, sizeof *s);
  if (!s) return BENCH_FAIL;
  memset(s, 0, sizeof *s);
  s->p = *p;
  const int64_t B = p->batch, V = p->vocab;
  const size_t esize = p->bf16 ? 2 : 4;
  const char *dname = p->bf16 ? "bf16" : "f32";
  s->words = (V + 31) / 32;
  double logits_bytes = (double)esize * (double)(B * V);
  s->slots = bench_slots_for(env, logits_bytes);
  const size_t S = (size_t)s->slots;
  s->logits = bench_alloc(env, BENCH_MEM_DEVICE, S * (size_t)(B * V) * esize);
  s->allowed = bench_alloc(env, BENCH_MEM_DEVICE, S * (size_t)(B * s->words) * 4);
  s->seed = bench_alloc(env, BENCH_MEM_DEVICE, S * (size_t)B * 8);
  s->temperature = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->top_p = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->top_k = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->tokens = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->status = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->lp = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->raw_lp = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)B * 4);
  s->top_ids = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)(B * kTopN) * 4);
  s->top_lp = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)(B * kTopN) * 4);
  s->probs = p->kind == CASE_SOFTMAX ? bench_alloc(env, BENCH_MEM_DEVICE, (size_t)(B * V) * 4)
                                     : NULL;
  s->h_logits = bench_alloc(env, BENCH_MEM_HOST, (size_t)(B * V) * esize);
  s->h_allowed = bench_alloc(env, BENCH_MEM_HOST, (size_t)(B * s->words) * 4);
  s->h_seed = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 8);
  s->h_temperature = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 4);
  s->h_top_p = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 4);
  s->h_top_k = bench_alloc(env, BENCH_MEM_HOST, (size_t)B * 4);
  if (!s->logits || !s->allowed || !s->seed || !s->temperature || !s->top_p || !s->top_k ||
      !s->tokens || !s->status || !s->lp || !s->raw_lp || !s->top_ids || !s->top_lp ||
      !s->h_logits || !s->h_allowed ||
      !s->h_seed || !s->h_temperature || !s->h_top_p || !s->h_top_k ||
      (p->kind == CASE_SOFTMAX && !s->probs))
    return BENCH_FAIL;
  for (int64_t r = 0; r < B; r++) {
    const int filtered = p->kind == CASE_TOPK_TOPP || p->kind == CASE_TOPP;
    s->h_temperature[r] = filtered ? 1.0f : 0.8f;
    s->h_top_p[r] = filtered ? 0.9f : 1.0f;
    s->h_top_k[r] = p->kind == CASE_TOPK_TOPP ? 50 : 0;
  }
  if (bench_upload(env, s->temperature, s->h_temperature, (size_t)B * 4) ||
      bench_upload(env, s->top_p, s->h_top_p, (size_t)B * 4) ||
      bench_upload(env, s->top_k, s->h_top_k, (size_t)B * 4))
    return BENCH_FAIL;
  /* slot 0 last, so that the host copies hold slot 0 */
  for (int slot = s->slots - 1; slot >= 0; slot--) {
    bench_rng rng = bench_rng_seed("sampling", (uint64_t)slot * 1000 + (uint64_t)p->kind);
    for (int64_t i = 0; i < B * V; i++) {
      const float v = p->llm_like ? llm_logit(&rng) : 3.0f * bench_normalish(&rng);
      if (p->bf16)
        ((uint16_t *)s->h_logits)[i] = bench_bf16_of(v);
      else
        ((float *)s->h_logits)[i] = v;
    }
    for (int64_t i = 0; i < B * s->words; i++) s->h_allowed[i] = (uint32_t)bench_rand(&rng);
    for (int64_t r = 0; r < B; r++) s->h_seed[r] = bench_rand(&rng);
    if (bench_upload(env, (char *)s->logits + (size_t)slot * (size_t)(B * V) * esize, s->h_logits,
                     (size_t)(B * V) * esize) ||
        bench_upload(env, s->allowed + (size_t)slot * (size_t)(B * s->words), s->h_allowed,
                     (size_t)(B * s->words) * 4) ||
        bench_upload(env, s->seed + (size_t)slot * (size_t)B, s->h_seed, (size_t)B * 8))
      return BENCH_FAIL;
  }
  ingot_status st =
      p->kind == CASE_SOFTMAX
          ? ingot_sampling_softmax_workspace_size(env->ctx, B, V, logits_dtype(p), &s->ws_bytes)
          : ingot_sample_workspace_size(env->ctx, B, V, logits_dtype(p), num_top_of(p),
                                        &s->ws_bytes);
  if (bench_status(env, env->ctx, st, "workspace size")) return BENCH_FAIL;
  if (s->ws_bytes && !(s->ws = bench_alloc(env, BENCH_MEM_DEVICE, s->ws_bytes))) return BENCH_FAIL;
  info->slots = s->slots;
  info->bytes_device = logits_bytes;
  if (p->kind == CASE_SOFTMAX) {
    info->bytes_device += 4.0 * (double)(B * V);
    snprintf(info->floor_note, sizeof info->floor_note, "logits (%s) read + probs (f32) written",
             dname);
  } else if (masked_kind(p->kind) && !p->no_mask) {
    info->bytes_device += 4.0 * (double)(B * s->words);
    snprintf(info->floor_note, sizeof info->floor_note, "logits (%s) + bitmask read", dname);
  } else {
    snprintf(info->floor_note, sizeof info->floor_note, "logits read (%s)", dname);
  }
  *state = s;
  return BENCH_OK;
}

/* One call on ctx over the given buffers (device or host). */
static ingot_status sampling_call(ingot_context_t ctx, const sampling_state *s, const void *logits,
                                  const uint32_t *allowed, const uint64_t *seed,
                                  const float *temperature, const int32_t *top_k,
                                  const float *top_p, float *probs, int32_t *tokens,
                                  uint32_t *status, float *lp, float *raw_lp, int32_t *top_ids,
                                  float *top_lp, void *ws, size_t ws_bytes,
                                  struct CUstream_st *stream) {
  const int64_t B = s->p.batch, V = s->p.vocab;
  ingot_tensor tl = ingot_tensor_2d((void *)logits, logits_dtype(&s->p), B, V, V);
  ingot_tensor tA = ingot_tensor_2d((void *)allowed, INGOT_DTYPE_U32, B, s->words, s->words);
  ingot_tensor tS = ingot_tensor_1d((void *)seed, INGOT_DTYPE_U64, B);
  ingot_tensor tT = ingot_tensor_1d((void *)temperature, INGOT_DTYPE_F32, B);
  ingot_tensor tK = ingot_tensor_1d((void *)top_k, INGOT_DTYPE_I32, B);
  ingot_tensor tP = ingot_tensor_1d((void *)top_p, INGOT_DTYPE_F32, B);
  ingot_tensor tTok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B);
  ingot_tensor tSt = ingot_tensor_1d(status, INGOT_DTYPE_U32, B);
  ingot_tensor tLp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, B);
  ingot_tensor tRaw = ingot_tensor_1d(raw_lp, INGOT_DTYPE_F32, B);
  ingot_tensor tIds = ingot_tensor_2d(top_ids, INGOT_DTYPE_I32, B, kTopN, kTopN);
  ingot_tensor tTlp = ingot_tensor_2d(top_lp, INGOT_DTYPE_F32, B, kTopN, kTopN);
  ingot_sampling_params prm = INGOT_SAMPLING_PARAMS_INITIALIZER;
  prm.temperature = &tT;
  prm.seed = &tS;
  if (s->p.kind == CASE_TOPK_TOPP || s->p.kind == CASE_TOPP || s->p.off_tensors)
    prm.top_k = &tK, prm.top_p = &tP;
  if (masked_kind(s->p.kind) && !s->p.no_mask) prm.allowed = &tA;
  if (s->p.kind == CASE_SOFTMAX) {
    ingot_tensor tPr = ingot_tensor_2d(probs, INGOT_DTYPE_F32, B, V, V);
    return ingot_sampling_softmax(ctx, &tl, &prm, &tPr, &tSt, ws, ws_bytes, stream);
  }
  ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  if (masked_kind(s->p.kind)) lps.token_logprob = &tLp, lps.token_raw_logprob = &tRaw;
  if (s->p.kind == CASE_TOPN) lps.top_ids = &tIds, lps.top_logprobs = &tTlp;
  if (s->p.top_final) lps.flags = INGOT_SAMPLING_TOP_FINAL;
  return ingot_sample(ctx, &tl, &prm, &tTok, &tSt, &lps, ws, ws_bytes, stream);
}

static ingot_status sampling_run(bench_env *env, void *state, int slot) {
  sampling_state *s = state;
  const int64_t B = s->p.batch, V = s->p.vocab;
  const size_t esize = s->p.bf16 ? 2 : 4;
  return sampling_call(env->ctx, s, (char *)s->logits + (size_t)slot * (size_t)(B * V) * esize,
                       s->allowed + (size_t)slot * (size_t)(B * s->words),
                       s->seed + (size_t)slot * (size_t)B, s->temperature, s->top_k, s->top_p,
                       s->probs, s->tokens, s->status, s->lp, s->raw_lp, s->top_ids, s->top_lp,
                       s->ws, s->ws_bytes, env->stream);
}

static int close_all(bench_env *env, const char *what, const float *got, const float *want,
                     int64_t n) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++) {
    double g = (double)got[i], w = (double)want[i];
    if (g == w) continue;
    if (fabs(g - w) <= 2e-6 * (1e-30 + fabs(w)) || (w == 0 && g == 0)) continue;
    if (first < 0) first = i;
    bad++;
  }
  if (!bad) return BENCH_OK;
  return bench_fail(env, "%s: %lld values differ by more than 2e-6 relative (first at %lld: %.9g "
                         "vs the CPU's %.9g)",
                    what, (long long)bad, (long long)first, (double)got[first],
                    (double)want[first]);
}

static int sampling_check(bench_env *env, void *state) {
  sampling_state *s = state;
  const int64_t B = s->p.batch, V = s->p.vocab;
  const int softmax = s->p.kind == CASE_SOFTMAX;
  ingot_status st = sampling_run(env, state, 0);
  if (bench_status(env, env->ctx, st, "op") || bench_sync(env)) return BENCH_FAIL;
  size_t out_floats = softmax ? (size_t)(B * V) : (size_t)B;
  const size_t top = (size_t)(B * kTopN);
  /* [probs or tokens][status][lp][raw_lp][top ids][top logprobs] */
  float *got = bench_alloc(env, BENCH_MEM_HOST, (out_floats + 3 * (size_t)B + 2 * top) * 4);
  float *want = bench_alloc(env, BENCH_MEM_HOST, (out_floats + 3 * (size_t)B + 2 * top) * 4);
  size_t ws_bytes = 0;
  st = softmax ? ingot_sampling_softmax_workspace_size(env->ref, B, V, logits_dtype(&s->p),
                                                       &ws_bytes)
               : ingot_sample_workspace_size(env->ref, B, V, logits_dtype(&s->p),
                                             num_top_of(&s->p), &ws_bytes);
  void *ws = bench_alloc(env, BENCH_MEM_HOST, ws_bytes);
  if (!got || !want || !ws || bench_status(env, env->ref, st, "reference workspace size"))
    return BENCH_FAIL;
  float *w_out = want, *w_lp = want + out_floats + B, *w_raw = want + out_floats + 2 * B;
  float *w_tlp = w_raw + B + top;
  int32_t *w_ids = (int32_t *)(void *)(w_raw + B);
  uint32_t *w_status = (uint32_t *)(void *)(want + out_floats);
  st = sampling_call(env->ref, s, s->h_logits, s->h_allowed, s->h_seed, s->h_temperature,
                     s->h_top_k, s->h_top_p, w_out, (int32_t *)(void *)w_out, w_status, w_lp,
                     w_raw, w_ids, w_tlp, ws, ws_bytes, NULL);
  if (bench_status(env, env->ref, st, "reference")) return BENCH_FAIL;
  float *g_out = got, *g_lp = got + out_floats + B, *g_raw = got + out_floats + 2 * B;
  float *g_tlp = g_raw + B + top;
  int32_t *g_ids = (int32_t *)(void *)(g_raw + B);
  uint32_t *g_status = (uint32_t *)(void *)(got + out_floats);
  if (bench_download(env, g_out, softmax ? (void *)s->probs : (void *)s->tokens, out_floats * 4) ||
      bench_download(env, g_status, s->status, (size_t)B * 4) ||
      bench_download(env, g_lp, s->lp, (size_t)B * 4) ||
      bench_download(env, g_raw, s->raw_lp, (size_t)B * 4) ||
      bench_download(env, g_ids, s->top_ids, top * 4) ||
      bench_download(env, g_tlp, s->top_lp, top * 4))
    return BENCH_FAIL;
  if (bench_compare_bytes(env, "row_status", g_status, w_status, (size_t)B * 4, 4))
    return BENCH_FAIL;
  if (softmax) return close_all(env, "probs", g_out, w_out, B * V);
  if (bench_compare_bytes(env, "tokens", g_out, w_out, (size_t)B * 4, 4)) return BENCH_FAIL;
  if (masked_kind(s->p.kind) &&
      (close_all(env, "token_logprob", g_lp, w_lp, B) ||
       close_all(env, "token_raw_logprob", g_raw, w_raw, B)))
    return BENCH_FAIL;
  if (s->p.kind == CASE_TOPN &&
      (bench_compare_bytes(env, "top_ids", g_ids, w_ids, top * 4, 4) ||
       close_all(env, "top_logprobs", g_tlp, w_tlp, (int64_t)top)))
    return BENCH_FAIL;
  return BENCH_OK;
}

static const bench_ops sampling_ops = {sampling_setup, sampling_run, sampling_check, NULL};

void bench_sampling_register(bench_registry *reg) {
  static const struct {
    int kind;
    int64_t B, V;
    const char *op, *name;
    int off_tensors, llm_like, top_final, no_mask, bf16;
  } cases[] = {
      {CASE_SOFTMAX, 1, 4096, "softmax", "B=1 V=4096 f32 (fixed cost)", 0, 0, 0, 0, 0},
      {CASE_SOFTMAX, 1, 151936, "softmax", "B=1 V=151936 f32", 0, 0, 0, 0, 0},
      {CASE_SOFTMAX, 64, 262144, "softmax", "B=64 V=262144 f32", 0, 0, 0, 0, 0},
      {CASE_SOFTMAX, 64, 262144, "softmax", "B=64 V=262144 bf16", 0, 0, 0, 0, 1},
      {CASE_MASKED, 1, 151936, "sample", "masked step + logprobs B=1 V=151936", 0, 0, 0, 0, 0},
      {CASE_MASKED, 64, 262144, "sample", "masked step + logprobs B=64 V=262144", 0, 0, 0, 0, 0},
      /* the same with logits shaped like a language model's: the draw's
       * filter leaves ~0.2% of the tokens (the rows above: ~all allowed) */
      {CASE_MASKED, 1, 151936, "sample", "masked step + logprobs, LLM-like logits B=1 V=151936",
       0, 1, 0, 0, 0},
      {CASE_MASKED, 64, 262144, "sample",
       "masked step + logprobs, LLM-like logits B=64 V=262144", 0, 1, 0, 0, 0},
      {CASE_MASKED, 64, 262144, "sample",
       "masked step + logprobs, LLM-like logits B=64 V=262144 bf16", 0, 1, 0, 0, 1},
      {CASE_TOPK_TOPP, 1, 151936, "sample", "top-k 50 + top-p 0.9 B=1 V=151936", 0, 0, 0, 0, 0},
      {CASE_TOPK_TOPP, 64, 151936, "sample", "top-k 50 + top-p 0.9 B=64 V=151936", 0, 0, 0, 0, 0},
      /* top-p alone: the dense kernel's nucleus rows, drawn there (LLM-like
       * logits) or handed to the general kernel (the stress logits) */
      {CASE_TOPP, 1, 151936, "sample", "top-p 0.9, LLM-like logits B=1 V=151936", 0, 1, 0, 0, 0},
      {CASE_TOPP, 64, 151936, "sample", "top-p 0.9, LLM-like logits B=64 V=151936", 0, 1, 0, 0, 0},
      {CASE_TOPP, 1, 151936, "sample", "top-p 0.9 B=1 V=151936", 0, 0, 0, 0, 0},
      {CASE_TOPP, 64, 151936, "sample", "top-p 0.9 B=64 V=151936", 0, 0, 0, 0, 0},
      /* top-n outputs: the dense kernel's top-n kernel (a raw top-n with a
       * bitmask reads the logits again) */
      {CASE_TOPN, 1, 151936, "sample", "masked step + logprobs + raw top-8 B=1 V=151936", 0, 1,
       0, 0, 0},
      {CASE_TOPN, 64, 262144, "sample", "masked step + logprobs + raw top-8 B=64 V=262144", 0,
       1, 0, 0, 0},
      {CASE_TOPN, 1, 151936, "sample", "masked step + logprobs + final top-8 B=1 V=151936", 0, 1,
       1, 0, 0},
      {CASE_TOPN, 64, 262144, "sample", "masked step + logprobs + final top-8 B=64 V=262144", 0,
       1, 1, 0, 0},
      {CASE_TOPN, 1, 151936, "sample", "step + logprobs + raw top-8, no mask B=1 V=151936", 0, 1,
       0, 1, 0},
      {CASE_TOPN, 64, 262144, "sample", "step + logprobs + raw top-8, no mask B=64 V=262144", 0,
       1, 0, 1, 0},
      /* the same work with top_k / top_p tensors passed, every row off: the
       * dense kernel for the rows, then the general one finding none */
      {CASE_SOFTMAX, 1, 151936, "softmax", "B=1 V=151936 f32, filter tensors all off", 1, 0, 0,
       0, 0},
      {CASE_SOFTMAX, 64, 262144, "softmax", "B=64 V=262144 f32, filter tensors all off", 1, 0,
       0, 0, 0},
      {CASE_MASKED, 1, 151936, "sample", "masked step B=1 V=151936, filter tensors all off", 1, 0,
       0, 0, 0},
      {CASE_MASKED, 64, 262144, "sample", "masked step B=64 V=262144, filter tensors all off", 1,
       0, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sampling_params p = {cases[i].kind,      cases[i].B,         cases[i].V,
                         cases[i].off_tensors, cases[i].llm_like, cases[i].top_final,
                         cases[i].no_mask,     cases[i].bf16};
    bench_add(reg, "sampling", cases[i].op, cases[i].name, &sampling_ops, &p, sizeof p);
  }
}
