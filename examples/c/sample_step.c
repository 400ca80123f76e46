/*
 * One decode sampling step for a batch of 4 requests over a 32000-token
 * vocabulary with ingot_sample: per-row temperature, top-k, top-p and
 * min-p, per-row seed and position (the draw is a pure function of them),
 * a grammar bitmask on one row, and the log-probabilities an engine
 * returns (the drawn token's, and the 3 most probable tokens').
 *
 *   row 0  greedy (temperature 0)
 *   row 1  temperature 0.7, top-k 50, top-p 0.9
 *   row 2  temperature 1, only the tokens whose id is a multiple of 3 allowed (a bitmask)
 *   row 3  temperature 1.2, top-k 20, top-p 0.95, min-p 0.05
 *
 * Checks: every row status 0 and every token in range and allowed; the
 * greedy row takes the argmax; the top-k rows draw from their k best; row
 * 2's token equals the Gumbel-max draw recomputed on the host with
 * ingot_sampling_gumbel; the log-probabilities match a softmax computed
 * here; a second call gives the same bytes.
 *
 *   sample_step [cpu|cuda]
 */
#include <math.h>

#include "example_util.h"

enum { B = 4, V = 32000, WORDS = (V + 31) / 32, NTOP = 3 };

/* What one call writes, copied to the host. */
typedef struct step_out {
  int32_t tokens[B];
  uint32_t status[B];
  float logprob[B], raw_logprob[B];
  int32_t top_ids[B * NTOP];
  float top_logprobs[B * NTOP];
} step_out;

static int allowed_bit(const uint32_t *mask, int row, int token) {
  return (int)((mask[row * WORDS + token / 32] >> (token % 32)) & 1u);
}

int main(int argc, char **argv) {
  ingot_context_t ctx;
  int rc = example_open(argc, argv, &ctx);
  if (rc != 0) return rc;

  /* ---- inputs, on the host -------------------------------------------- */
  float *logits = malloc((size_t)B * V * sizeof(float));
  for (int i = 0; i < B * V; i++) /* roughly normal, sd 2, plus a few strong tokens */
    logits[i] = 2.0f * (example_uniform() + example_uniform() + example_uniform() - 1.5f) +
                (example_rand() % 1000 == 0 ? 6.0f : 0.0f);
  const float temperature[B] = {0.0f, 0.7f, 1.0f, 1.2f};
  const int32_t top_k[B] = {0, 50, 0, 20};           /* 0: off */
  const float top_p[B] = {1.0f, 0.9f, 1.0f, 0.95f};  /* 1: off */
  const float min_p[B] = {0.0f, 0.0f, 0.0f, 0.05f};  /* 0: off */
  const uint64_t seed[B] = {1001, 1002, 1003, 1004}; /* e.g. one per request */
  const uint64_t position[B] = {17, 5, 230, 64};     /* e.g. the token's index */
  /* xgrammar's layout: token t is bit t % 32 of word t / 32, 1 = allowed. */
  uint32_t *mask = malloc((size_t)B * WORDS * sizeof(uint32_t));
  for (int i = 0; i < B * WORDS; i++) mask[i] = 0xFFFFFFFFu;
  memset(mask + 2 * WORDS, 0, WORDS * sizeof(uint32_t));
  for (int t = 0; t < V; t += 3) mask[2 * WORDS + t / 32] |= 1u << (t % 32);

  /* ---- the same, in the context's memory -------------------------------- */
  void *d_logits = example_upload(ctx, logits, (size_t)B * V * sizeof(float));
  void *d_temp = example_upload(ctx, temperature, sizeof temperature);
  void *d_top_k = example_upload(ctx, top_k, sizeof top_k);
  void *d_top_p = example_upload(ctx, top_p, sizeof top_p);
  void *d_min_p = example_upload(ctx, min_p, sizeof min_p);
  void *d_seed = example_upload(ctx, seed, sizeof seed);
  void *d_pos = example_upload(ctx, position, sizeof position);
  void *d_mask = example_upload(ctx, mask, (size_t)B * WORDS * sizeof(uint32_t));
  ingot_tensor t_logits = ingot_tensor_2d(d_logits, INGOT_DTYPE_F32, B, V, V);
  ingot_tensor t_temp = ingot_tensor_1d(d_temp, INGOT_DTYPE_F32, B);
  ingot_tensor t_top_k = ingot_tensor_1d(d_top_k, INGOT_DTYPE_I32, B);
  ingot_tensor t_top_p = ingot_tensor_1d(d_top_p, INGOT_DTYPE_F32, B);
  ingot_tensor t_min_p = ingot_tensor_1d(d_min_p, INGOT_DTYPE_F32, B);
  ingot_tensor t_seed = ingot_tensor_1d(d_seed, INGOT_DTYPE_U64, B);
  ingot_tensor t_pos = ingot_tensor_1d(d_pos, INGOT_DTYPE_U64, B);
  ingot_tensor t_mask = ingot_tensor_2d(d_mask, INGOT_DTYPE_U32, B, WORDS, WORDS);

  ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
  params.temperature = &t_temp;
  params.top_k = &t_top_k;
  params.top_p = &t_top_p;
  params.min_p = &t_min_p;
  params.seed = &t_seed;
  params.position = &t_pos;
  params.allowed = &t_mask;

  /* ---- outputs and workspace ---------------------------------------------- */
  step_out *out = calloc(2, sizeof(step_out)); /* two calls */
  void *d_tokens = example_alloc(ctx, sizeof out->tokens);
  void *d_status = example_alloc(ctx, sizeof out->status);
  void *d_logprob = example_alloc(ctx, sizeof out->logprob);
  void *d_raw = example_alloc(ctx, sizeof out->raw_logprob);
  void *d_top_ids = example_alloc(ctx, sizeof out->top_ids);
  void *d_top_lp = example_alloc(ctx, sizeof out->top_logprobs);
  ingot_tensor t_tokens = ingot_tensor_1d(d_tokens, INGOT_DTYPE_I32, B);
  ingot_tensor t_status = ingot_tensor_1d(d_status, INGOT_DTYPE_U32, B);
  ingot_tensor t_logprob = ingot_tensor_1d(d_logprob, INGOT_DTYPE_F32, B);
  ingot_tensor t_raw = ingot_tensor_1d(d_raw, INGOT_DTYPE_F32, B);
  ingot_tensor t_top_ids = ingot_tensor_2d(d_top_ids, INGOT_DTYPE_I32, B, NTOP, NTOP);
  ingot_tensor t_top_lp = ingot_tensor_2d(d_top_lp, INGOT_DTYPE_F32, B, NTOP, NTOP);
  ingot_sampling_logprobs lp = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  lp.token_logprob = &t_logprob;
  lp.token_raw_logprob = &t_raw; /* before masks, bias and filters */
  lp.top_ids = &t_top_ids;       /* of the raw distribution */
  lp.top_logprobs = &t_top_lp;

  size_t ws_bytes;
  CHECK(ctx, ingot_sample_workspace_size(ctx, B, V, INGOT_DTYPE_F32, NTOP, &ws_bytes));
  void *ws = example_alloc(ctx, ws_bytes); /* NULL when 0 bytes */

  /* ---- the step, twice (the draw depends only on seed and position) -------- */
  for (int call = 0; call < 2; call++) {
    step_out *o = &out[call];
    CHECK(ctx,
          ingot_sample(ctx, &t_logits, &params, &t_tokens, &t_status, &lp, ws, ws_bytes, NULL));
    example_read(ctx, o->tokens, d_tokens, sizeof o->tokens);
    example_read(ctx, o->status, d_status, sizeof o->status);
    example_read(ctx, o->logprob, d_logprob, sizeof o->logprob);
    example_read(ctx, o->raw_logprob, d_raw, sizeof o->raw_logprob);
    example_read(ctx, o->top_ids, d_top_ids, sizeof o->top_ids);
    example_read(ctx, o->top_logprobs, d_top_lp, sizeof o->top_logprobs);
  }
  VERIFY(memcmp(&out[0], &out[1], sizeof(step_out)) == 0, "a second call gave other results");

  /* ---- print and check ------------------------------------------------------ */
  const step_out *o = &out[0];
  for (int r = 0; r < B; r++) {
    const float *x = logits + (size_t)r * V;
    int32_t tok = o->tokens[r];
    printf("row %d: token %5d  status %u  logprob %8.4f  raw logprob %8.4f  top:", r, tok,
           o->status[r], (double)o->logprob[r], (double)o->raw_logprob[r]);
    for (int j = 0; j < NTOP; j++)
      printf(" %d (%.3f)", o->top_ids[r * NTOP + j], (double)o->top_logprobs[r * NTOP + j]);
    printf("\n");

    VERIFY(o->status[r] == 0, "row %d: status %u", r, o->status[r]);
    VERIFY(tok >= 0 && tok < V, "row %d: token %d out of range", r, tok);
    if (tok < 0 || tok >= V) continue;
    VERIFY(allowed_bit(mask, r, tok), "row %d: token %d is not allowed by the mask", r, tok);

    /* The raw distribution softmax(x / T'), T' = T or 1 for greedy. */
    double t = temperature[r] > 0.0f ? (double)temperature[r] : 1.0, max = -(double)INFINITY, sum = 0.0;
    int rank = 0; /* tokens before tok in rank order */
    for (int i = 0; i < V; i++) {
      if ((double)x[i] > max) max = (double)x[i];
      rank += x[i] > x[tok] || (x[i] == x[tok] && i < tok);
    }
    for (int i = 0; i < V; i++) sum += exp(((double)x[i] - max) / t);
    double lse = max / t + log(sum);
    double raw = (double)x[tok] / t - lse;
    VERIFY(fabs((double)o->raw_logprob[r] - raw) <= 1e-4 * (1.0 + fabs(raw)),
           "row %d: raw logprob %g, softmax here %g", r, (double)o->raw_logprob[r], raw);
    /* Masks and filters only remove tokens: the final probability is >= the raw one. */
    VERIFY(o->logprob[r] <= 0.0f && (double)o->logprob[r] >= raw - 1e-4,
           "row %d: logprob %g (raw %g)", r, (double)o->logprob[r], raw);
    if (top_k[r] > 0)
      VERIFY(rank < top_k[r], "row %d: token of rank %d, top-k %d", r, rank, top_k[r]);
    if (temperature[r] == 0.0f) {
      VERIFY(rank == 0, "row %d: greedy, but the token has rank %d", r, rank);
      VERIFY(o->logprob[r] == 0.0f, "row %d: greedy, logprob %g", r, (double)o->logprob[r]);
    }
    /* The top-n of the raw distribution: the largest logits, lowest id on ties. */
    for (int j = 0; j < NTOP; j++) {
      int id = o->top_ids[r * NTOP + j], ahead = 0;
      VERIFY(id >= 0 && id < V, "row %d: top id %d", r, id);
      if (id < 0 || id >= V) continue;
      for (int i = 0; i < V; i++) ahead += x[i] > x[id] || (x[i] == x[id] && i < id);
      VERIFY(ahead == j, "row %d: top slot %d holds the token of rank %d", r, j, ahead);
      double want = (double)x[id] / t - lse;
      VERIFY(fabs((double)o->top_logprobs[r * NTOP + j] - want) <= 1e-4 * (1.0 + fabs(want)),
             "row %d: top logprob %g, softmax here %g", r, (double)o->top_logprobs[r * NTOP + j],
             want);
    }
  }

  /* Row 2 (no filter) by hand: argmax over allowed i of s_i + g_i with
   * s_i = (x_i - max allowed x) / T in fp32, g_i the generator's Gumbel noise. */
  {
    const float *x = logits + 2 * (size_t)V;
    float m = -INFINITY, best = -INFINITY;
    int want = -1;
    for (int i = 0; i < V; i++)
      if (allowed_bit(mask, 2, i) && x[i] > m) m = x[i];
    for (int i = 0; i < V; i++) {
      if (!allowed_bit(mask, 2, i)) continue;
      float s = (x[i] - m) / temperature[2];
      float key = s + ingot_sampling_gumbel(seed[2], position[2], i);
      if (key > best) best = key, want = i;
    }
    printf("row 2 redrawn here with ingot_sampling_gumbel: token %d\n", want);
    VERIFY(o->tokens[2] == want, "row 2: token %d, the host draw gives %d", o->tokens[2], want);
  }

  free(logits), free(mask), free(out);
  void *bufs[] = {d_logits, d_temp,   d_top_k,   d_top_p, d_min_p,   d_seed,   d_pos, d_mask,
                  d_tokens, d_status, d_logprob, d_raw,   d_top_ids, d_top_lp, ws};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) example_free(ctx, bufs[i]);
  return example_finish(ctx);
}
