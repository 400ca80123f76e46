/*
 * PLE / hashed n-gram embeddings: a prefill of a ragged batch of three
 * requests, then one decode step, with the context rolled forward between
 * them.
 *
 *   1. derive a layer's constants (ingot_ngram_config_derive) and size its
 *      table (ingot_ngram_table_rows); fill a small random bf16 table;
 *   2. prefill: ingot_ngram_embed over the three prompts, each request's
 *      context all end-of-sequence (a fresh request);
 *   3. ingot_ngram_commit_context: each context now holds its request's
 *      last n-1 tokens;
 *   4. decode: one new token per request, ingot_ngram_embed again.
 *
 * Checks: the decode step's rows equal those of a prefill of the whole
 * history; the fused op equals ingot_ngram_row_ids + ingot_ngram_gather;
 * one embedding recomputed by hand from the hashing rule; every value
 * finite.
 *
 *   ple_embed [cpu|cuda]
 */
#include <inttypes.h>
#include <math.h>

#include "example_util.h"

enum {
  VOCAB = 32000,
  EOS = 2,   /* the boundary token: the model's end-of-sequence id */
  NGRAM = 3, /* orders 2 and 3 */
  HPN = 4,   /* heads per order: H = 4 * (3 - 1) = 8 */
  DIM = 32,  /* D, the width of a table row */
  B = 3      /* requests */
};
static const int32_t prompt_len[B] = {5, 3, 7};
static const float scale = 0.5f;

static float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t float_to_bf16_truncated(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

/* out [T, H*D] bf16 of the given batch, on the context's memory; the result
 * is copied to `host_out`. ids, cu and context are host arrays. */
static void embed(ingot_context_t ctx, const ingot_ngram_config *cfg, const int32_t *ids, int64_t T,
                  const int32_t *cu, void *context_buf, const ingot_tensor *table,
                  uint16_t *host_out) {
  int64_t H = cfg->num_heads;
  size_t out_bytes = (size_t)(T * H * DIM) * sizeof(uint16_t);
  void *d_ids = example_upload(ctx, ids, (size_t)T * sizeof(int32_t));
  void *d_cu = example_upload(ctx, cu, (B + 1) * sizeof(int32_t));
  void *d_out = example_alloc(ctx, out_bytes);
  ingot_tensor t_ids = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, T);
  ingot_tensor t_cu = ingot_tensor_1d(d_cu, INGOT_DTYPE_I32, B + 1);
  ingot_tensor t_ctx = ingot_tensor_2d(context_buf, INGOT_DTYPE_I32, B, NGRAM - 1, NGRAM - 1);
  ingot_tensor t_out = ingot_tensor_2d(d_out, INGOT_DTYPE_BF16, T, H * DIM, H * DIM);
  CHECK(ctx, ingot_ngram_embed(ctx, cfg, &t_ids, &t_cu, &t_ctx, table, scale, &t_out, NULL));
  /* CUDA reads cu_seqlens on the device; a bad one is reported here. */
  CHECK(ctx, ingot_context_check_device_errors(ctx, NULL));
  example_read(ctx, host_out, d_out, out_bytes);
  example_free(ctx, d_ids);
  example_free(ctx, d_cu);
  example_free(ctx, d_out);
}

int main(int argc, char **argv) {
  ingot_context_t ctx;
  int rc = example_open(argc, argv, &ctx);
  if (rc != 0) return rc;

  /* ---- the layer: constants and table ---------------------------------- */
  ingot_ngram_config cfg;
  /* base 1000 keeps the table small (a real layer uses millions of rows). */
  CHECK(NULL, ingot_ngram_config_derive(VOCAB, NGRAM, HPN, 1000, 1234, 0, EOS, &cfg));
  const int64_t H = cfg.num_heads;
  int64_t R;
  CHECK(NULL, ingot_ngram_table_rows(&cfg, 64, &R));
  printf("config: n=%d, H=%" PRId64 " heads, P[0]=%" PRId64 ", table %" PRId64 " x %d bf16\n",
         cfg.n, H, cfg.primes[0], R, DIM);

  size_t table_bytes = (size_t)(R * DIM) * sizeof(uint16_t);
  uint16_t *h_table = malloc(table_bytes);
  for (int64_t i = 0; i < R * DIM; i++)
    h_table[i] = float_to_bf16_truncated(2.0f * example_uniform() - 1.0f);
  void *d_table = example_upload(ctx, h_table, table_bytes);
  ingot_tensor table = ingot_tensor_2d(d_table, INGOT_DTYPE_BF16, R, DIM, DIM);

  /* ---- the requests: prompt_len[b] tokens, then one decoded token ------ */
  int32_t full_cu[B + 1] = {0}, prompt_cu[B + 1] = {0}, step_cu[B + 1] = {0};
  for (int b = 0; b < B; b++) {
    prompt_cu[b + 1] = prompt_cu[b] + prompt_len[b];
    full_cu[b + 1] = full_cu[b] + prompt_len[b] + 1;
    step_cu[b + 1] = b + 1;
  }
  const int64_t T_prompt = prompt_cu[B], T_full = full_cu[B];
  int32_t *full = malloc((size_t)T_full * sizeof(int32_t));
  int32_t *prompts = malloc((size_t)T_prompt * sizeof(int32_t));
  int32_t step[B];
  for (int64_t t = 0; t < T_full; t++) full[t] = (int32_t)(3 + example_rand() % (VOCAB - 3));
  for (int b = 0; b < B; b++) {
    memcpy(prompts + prompt_cu[b], full + full_cu[b], (size_t)prompt_len[b] * sizeof(int32_t));
    step[b] = full[full_cu[b + 1] - 1];
  }

  /* Fresh requests: each context is n-1 boundary tokens. */
  int32_t fresh[B * (NGRAM - 1)];
  for (int i = 0; i < B * (NGRAM - 1); i++) fresh[i] = EOS;
  void *d_context = example_upload(ctx, fresh, sizeof fresh);

  /* ---- prefill, commit, decode ------------------------------------------ */
  size_t row_bytes = (size_t)(H * DIM) * sizeof(uint16_t);
  uint16_t *out_prompt = malloc((size_t)T_prompt * row_bytes);
  uint16_t *out_step = malloc(B * row_bytes);
  embed(ctx, &cfg, prompts, T_prompt, prompt_cu, d_context, &table, out_prompt);

  {
    void *d_ids = example_upload(ctx, prompts, (size_t)T_prompt * sizeof(int32_t));
    void *d_cu = example_upload(ctx, prompt_cu, sizeof prompt_cu);
    ingot_tensor t_ids = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, T_prompt);
    ingot_tensor t_cu = ingot_tensor_1d(d_cu, INGOT_DTYPE_I32, B + 1);
    ingot_tensor t_ctx = ingot_tensor_2d(d_context, INGOT_DTYPE_I32, B, NGRAM - 1, NGRAM - 1);
    CHECK(ctx, ingot_ngram_commit_context(ctx, &cfg, &t_ids, &t_cu, &t_ctx, NULL));
    example_free(ctx, d_ids);
    example_free(ctx, d_cu);
  }
  int32_t rolled[B * (NGRAM - 1)];
  example_read(ctx, rolled, d_context, sizeof rolled);
  for (int b = 0; b < B; b++)
    for (int j = 0; j < NGRAM - 1; j++)
      VERIFY(rolled[b * (NGRAM - 1) + j] == prompts[prompt_cu[b + 1] - (NGRAM - 1) + j],
             "context[%d][%d] = %d after the commit, expected the prompt's token %d", b, j,
             rolled[b * (NGRAM - 1) + j], prompts[prompt_cu[b + 1] - (NGRAM - 1) + j]);

  embed(ctx, &cfg, step, B, step_cu, d_context, &table, out_step);

  /* ---- checks --------------------------------------------------------------- */
  /* (a) The same history as one prefill gives the same rows, byte for byte. */
  uint16_t *out_full = malloc((size_t)T_full * row_bytes);
  example_write(ctx, d_context, fresh, sizeof fresh);
  embed(ctx, &cfg, full, T_full, full_cu, d_context, &table, out_full);
  for (int b = 0; b < B; b++) {
    for (int32_t l = 0; l < prompt_len[b]; l++)
      VERIFY(memcmp(out_prompt + (size_t)(prompt_cu[b] + l) * H * DIM,
                    out_full + (size_t)(full_cu[b] + l) * H * DIM, row_bytes) == 0,
             "request %d token %d: the prefill differs from the longer prefill", b, l);
    VERIFY(memcmp(out_step + (size_t)b * H * DIM, out_full + (size_t)(full_cu[b + 1] - 1) * H * DIM,
                  row_bytes) == 0,
           "request %d: the decode step differs from a prefill of the same history", b);
  }

  /* (b) The fused op equals its two parts: row ids, then the gather. */
  {
    void *d_ids = example_upload(ctx, full, (size_t)T_full * sizeof(int32_t));
    void *d_cu = example_upload(ctx, full_cu, sizeof full_cu);
    void *d_rows = example_alloc(ctx, (size_t)(T_full * H) * sizeof(int64_t));
    void *d_out = example_alloc(ctx, (size_t)T_full * row_bytes);
    uint16_t *out_parts = malloc((size_t)T_full * row_bytes);
    ingot_tensor t_ids = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, T_full);
    ingot_tensor t_cu = ingot_tensor_1d(d_cu, INGOT_DTYPE_I32, B + 1);
    ingot_tensor t_ctx = ingot_tensor_2d(d_context, INGOT_DTYPE_I32, B, NGRAM - 1, NGRAM - 1);
    ingot_tensor t_rows = ingot_tensor_2d(d_rows, INGOT_DTYPE_I64, T_full, H, H);
    ingot_tensor t_out = ingot_tensor_2d(d_out, INGOT_DTYPE_BF16, T_full, H * DIM, H * DIM);
    CHECK(ctx, ingot_ngram_row_ids(ctx, &cfg, &t_ids, &t_cu, &t_ctx, &t_rows, NULL));
    CHECK(ctx, ingot_ngram_gather(ctx, &t_rows, &table, scale, &t_out, NULL));
    CHECK(ctx, ingot_context_check_device_errors(ctx, NULL));
    example_read(ctx, out_parts, d_out, (size_t)T_full * row_bytes);
    VERIFY(memcmp(out_parts, out_full, (size_t)T_full * row_bytes) == 0,
           "ingot_ngram_embed differs from ingot_ngram_row_ids + ingot_ngram_gather");
    free(out_parts);
    example_free(ctx, d_ids);
    example_free(ctx, d_cu);
    example_free(ctx, d_rows);
    example_free(ctx, d_out);
  }

  /* (c) By hand: the 2-gram head 0 of request 0's decoded token.
   *   mix = x0 * mult[0] ^ x1 * mult[1]   (wrapping int64)
   *   row = floor_mod(mix, P[0]) + off[0]
   *   out[h = 0, d] = bf16(table[row, d] * scale)   (exact here: scale 0.5) */
  {
    uint64_t x0 = (uint64_t)step[0], x1 = (uint64_t)prompts[prompt_cu[1] - 1];
    int64_t mix =
        (int64_t)((x0 * (uint64_t)cfg.multipliers[0]) ^ (x1 * (uint64_t)cfg.multipliers[1]));
    int64_t row = (mix % cfg.primes[0] + cfg.primes[0]) % cfg.primes[0] + cfg.offsets[0];
    printf("request 0, decoded token %d after %d: head 0 reads table row %" PRId64 "\n", step[0],
           prompts[prompt_cu[1] - 1], row);
    printf("  out[0, 0:4] = ");
    for (int d = 0; d < DIM; d++) {
      float want = bf16_to_float(h_table[row * DIM + d]) * scale;
      float got = bf16_to_float(out_step[d]);
      if (d < 4) printf("%+.5f ", (double)got);
      VERIFY(got == want, "head 0, d=%d: %g, by hand %g", d, (double)got, (double)want);
    }
    printf("\n");
  }

  /* (d) Every value finite, and not all zero. */
  int nonzero = 0;
  for (int64_t i = 0; i < T_full * H * DIM; i++) {
    float v = bf16_to_float(out_full[i]);
    VERIFY(isfinite(v), "out[%" PRId64 "] = %g", i, (double)v);
    nonzero += v != 0.0f;
    if (!isfinite(v)) break;
  }
  VERIFY(nonzero > 0, "every output is zero");
  printf("prefill %" PRId64 " tokens + decode %d tokens -> [%" PRId64 ", %" PRId64 "] bf16 each\n",
         T_prompt, B, T_full, H * DIM);

  free(h_table), free(full), free(prompts), free(out_prompt), free(out_step), free(out_full);
  example_free(ctx, d_table);
  example_free(ctx, d_context);
  return example_finish(ctx);
}
