/*
 * PLE (hashed n-gram embeddings) on the CPU reference backend: the documented
 * worked checks, randomized ragged batches against an independent oracle,
 * decode == prefill through the context roll, gathers of every table dtype,
 * the fused op, and every kind of bad argument.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ngram_cases.h"
#include "test_util.h"

static ingot_context_t cpu;

static ingot_ngram_config toy_config(int64_t boundary) {
  ingot_ngram_config cfg;
  ingot_status st = ingot_ngram_config_derive(512, 3, 2, 1000, 1234, 0, boundary, &cfg);
  if (st) fprintf(stderr, "derive failed: %s\n", ingot_last_error(NULL));
  return cfg;
}

static ingot_ngram_config random_config(int n, int hpn, int64_t boundary) {
  return ngram_random_config(n, hpn, boundary, INT64_C(1) << 40);
}

/* Runs ingot_ngram_row_ids on the CPU for case c with the given dtypes. */
static ingot_status run_row_ids(const ingot_ngram_config *cfg, const ngram_case *c,
                                ingot_dtype id_dt, ingot_dtype cu_dt, int64_t *rows,
                                int64_t rows_stride) {
  void *ids = ngram_pack(c->ids, c->T, id_dt);
  void *cu = ngram_pack(c->cu, c->B + 1, cu_dt);
  void *context = ngram_pack(c->context, c->B * (c->n - 1), id_dt);
  ingot_tensor tids = ingot_tensor_1d(ids, id_dt, c->T);
  ingot_tensor tcu = ingot_tensor_1d(cu, cu_dt, c->B + 1);
  ingot_tensor tctx = ingot_tensor_2d(context, id_dt, c->B, c->n - 1, c->n - 1);
  ingot_tensor trows = ingot_tensor_2d(rows, INGOT_DTYPE_I64, c->T, cfg->num_heads, rows_stride);
  ingot_status st = ingot_ngram_row_ids(cpu, cfg, &tids, &tcu, &tctx, &trows, NULL);
  free(ids);
  free(cu);
  free(context);
  return st;
}

/* ---- the documented worked checks --------------------------------------------- */

static int test_derive_toy(void) {
  ingot_ngram_config cfg = toy_config(7);
  static const int64_t P[] = {1009, 1013, 1019, 1021};
  static const int64_t off[] = {0, 1009, 2022, 3041};
  static const int64_t mult[] = {INT64_C(4295158889763781), INT64_C(17440218147737327),
                                 INT64_C(1270917961434445)};
  EXPECT(cfg.num_heads == 4, "H = %d", cfg.num_heads);
  for (int h = 0; h < 4; h++) {
    EXPECT(cfg.primes[h] == P[h], "P[%d] = %" PRId64 ", want %" PRId64, h, cfg.primes[h], P[h]);
    EXPECT(cfg.offsets[h] == off[h], "off[%d] = %" PRId64, h, cfg.offsets[h]);
  }
  for (int i = 0; i < 3; i++)
    EXPECT(cfg.multipliers[i] == mult[i], "mult[%d] = %" PRId64 ", want %" PRId64, i,
           cfg.multipliers[i], mult[i]);
  int64_t rows = 0;
  EXPECT_OK(NULL, ingot_ngram_table_rows(&cfg, 1, &rows));
  EXPECT(rows == 1021 + 3041, "table rows %" PRId64, rows);
  return 0;
}

static int test_derive_real(void) {
  ingot_ngram_config cfg;
  EXPECT_OK(NULL, ingot_ngram_config_derive(248320, 3, 8, 20000000, 1234, 0, 248044, &cfg));
  EXPECT(cfg.num_heads == 16, "H = %d", cfg.num_heads);
  EXPECT(cfg.primes[0] == 20000003, "first prime %" PRId64, cfg.primes[0]);
  int64_t sum = 0;
  for (int h = 0; h < 16; h++) {
    sum += cfg.primes[h];
    if (h) EXPECT(cfg.primes[h] > cfg.primes[h - 1], "primes not increasing at %d", h);
  }
  EXPECT(sum == 320001446, "sum of primes %" PRId64 ", want 320001446", sum);
  int64_t rows = 0;
  EXPECT_OK(NULL, ingot_ngram_table_rows(&cfg, 128, &rows));
  EXPECT(rows == 320001536, "padded rows %" PRId64 ", want 320001536", rows);
  /* layer 1 continues the prime sequence after layer 0's 16 primes */
  ingot_ngram_config l1;
  EXPECT_OK(NULL, ingot_ngram_config_derive(248320, 3, 8, 20000000, 1234, 1, 248044, &l1));
  EXPECT(l1.primes[0] > cfg.primes[15], "layer 1 prime %" PRId64, l1.primes[0]);
  EXPECT(l1.multipliers[0] != cfg.multipliers[0], "layer 1 has the same multipliers");
  return 0;
}

static int test_worked_rows(void) {
  static const int64_t want[6][4] = {{883, 1988, 2795, 3714}, {105, 1826, 2064, 3895},
                                     {365, 2017, 2662, 3065}, {131, 1966, 2423, 3454},
                                     {364, 1785, 2045, 3807}, {210, 1630, 2777, 3529}};
  ingot_ngram_config cfg = toy_config(7);
  int64_t ids[] = {3, 4, 7, 5, 6, 8}, cu[] = {0, 6}, context[] = {7, 7};
  ngram_case c = {1, 6, ids, cu, context, 3};
  static const ingot_dtype dts[] = {INGOT_DTYPE_I32, INGOT_DTYPE_I64};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      int64_t rows[6 * 4];
      memset(rows, 0xab, sizeof rows);
      EXPECT_OK(cpu, run_row_ids(&cfg, &c, dts[a], dts[b], rows, 4));
      for (int t = 0; t < 6; t++)
        for (int h = 0; h < 4; h++)
          EXPECT(rows[t * 4 + h] == want[t][h], "ids %s cu %s: row[%d][%d] = %" PRId64
                 ", want %" PRId64, ingot_dtype_name(dts[a]), ingot_dtype_name(dts[b]), t, h,
                 rows[t * 4 + h], want[t][h]);
      int64_t oracle[6 * 4];
      ngram_oracle_rows(&cfg, &c, oracle);
      EXPECT(memcmp(oracle, want, sizeof oracle) == 0, "the oracle disagrees with the worked example");
    }
  return 0;
}

/* ---- randomized ------------------------------------------------------------ */

static int compare_rows_case(const ingot_ngram_config *cfg, const ngram_case *c,
                             ingot_dtype id_dt, ingot_dtype cu_dt) {
  int64_t H = cfg->num_heads, stride = H + (int64_t)(test_rand() % 3);
  int64_t *rows = malloc((size_t)(c->T > 0 ? c->T : 1) * (size_t)stride * sizeof(int64_t));
  int64_t *want = malloc((size_t)(c->T > 0 ? c->T : 1) * (size_t)H * sizeof(int64_t));
  memset(rows, 0xcd, (size_t)(c->T > 0 ? c->T : 1) * (size_t)stride * sizeof(int64_t));
  ngram_oracle_rows(cfg, c, want);
  ingot_status st = run_row_ids(cfg, c, id_dt, cu_dt, rows, stride);
  EXPECT_OK(cpu, st);
  int bad = 0;
  for (int64_t t = 0; t < c->T && !bad; t++)
    for (int64_t h = 0; h < H; h++)
      if (rows[t * stride + h] != want[t * H + h]) {
        EXPECT(0, "n=%d hpn=%d B=%" PRId64 " T=%" PRId64 " ids %s: row[%" PRId64 "][%" PRId64
               "] = %" PRId64 ", oracle %" PRId64, cfg->n, cfg->heads_per_order, c->B, c->T,
               ingot_dtype_name(id_dt), t, h, rows[t * stride + h], want[t * H + h]);
        bad = 1;
        break;
      }
  free(rows);
  free(want);
  return bad;
}

static int test_random_batches(void) {
  for (int iter = 0; iter < 200; iter++) {
    int n = (int)test_rand_range(2, INGOT_NGRAM_MAX_N);
    int hpn = (int)test_rand_range(1, INGOT_NGRAM_MAX_HEADS / (n - 1) < 4 ? INGOT_NGRAM_MAX_HEADS / (n - 1) : 4);
    ingot_dtype id_dt = test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64;
    ingot_dtype cu_dt = test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64;
    int64_t boundary = ngram_random_token(id_dt, 0);
    ingot_ngram_config cfg = random_config(n, hpn, boundary);
    ngram_case c = ngram_random_case(n, test_rand_range(0, 40), 30, id_dt, boundary);
    compare_rows_case(&cfg, &c, id_dt, cu_dt);
    ngram_case_free(&c);
  }
  return 0;
}

static int test_large_batch(void) {
  /* 65536 tokens: one long prefill plus many decodes, real geometry */
  ingot_ngram_config cfg;
  EXPECT_OK(NULL, ingot_ngram_config_derive(248320, 3, 8, 20000000, 1234, 0, 248044, &cfg));
  ngram_case c;
  c.n = 3;
  c.B = 4097;
  c.cu = malloc((size_t)(c.B + 1) * sizeof(int64_t));
  c.cu[0] = 0;
  c.cu[1] = 65536 - 4096;
  for (int64_t b = 1; b < c.B; b++) c.cu[b + 1] = c.cu[b] + 1;
  c.T = c.cu[c.B];
  c.ids = malloc((size_t)c.T * sizeof(int64_t));
  for (int64_t t = 0; t < c.T; t++) c.ids[t] = ngram_random_token(INGOT_DTYPE_I32, 248044);
  c.context = malloc((size_t)c.B * 2 * sizeof(int64_t));
  for (int64_t i = 0; i < c.B * 2; i++) c.context[i] = ngram_random_token(INGOT_DTYPE_I32, 248044);
  EXPECT(c.T == 65536, "T = %" PRId64, c.T);
  compare_rows_case(&cfg, &c, INGOT_DTYPE_I32, INGOT_DTYPE_I32);
  ngram_case_free(&c);
  return 0;
}

/* ---- decode == prefill through the context roll ------------------------------- */

/* Runs the history of R requests in steps: at step s request r processes
 * schedule[r][s] tokens (0 allowed); after each step the context is committed.
 * The rows of every token must equal those of one prefill of the whole history. */
static int check_chunked(const ingot_ngram_config *cfg, ingot_dtype dt, int R,
                         const int (*schedule)[16], int steps) {
  const int w = cfg->n - 1;
  const int64_t H = cfg->num_heads, E = cfg->boundary_token;
  int64_t total[8] = {0};
  for (int r = 0; r < R; r++)
    for (int s = 0; s < steps; s++) total[r] += schedule[r][s];
  /* history and the prefill rows, per request */
  int64_t *hist[8], *want[8];
  for (int r = 0; r < R; r++) {
    hist[r] = malloc((size_t)total[r] * sizeof(int64_t));
    for (int64_t i = 0; i < total[r]; i++) hist[r][i] = ngram_random_token(dt, E);
    want[r] = malloc((size_t)total[r] * (size_t)H * sizeof(int64_t));
    int64_t cu[2] = {0, total[r]};
    int64_t ctx0[INGOT_NGRAM_MAX_N];
    for (int i = 0; i < w; i++) ctx0[i] = E;
    ngram_case one = {1, total[r], hist[r], cu, ctx0, cfg->n};
    ngram_oracle_rows(cfg, &one, want[r]);
  }
  /* the device-style state: one context tensor for the batch */
  int64_t *context = malloc((size_t)R * (size_t)w * sizeof(int64_t));
  for (int64_t i = 0; i < (int64_t)R * w; i++) context[i] = E;
  int64_t done[8] = {0};
  for (int s = 0; s < steps; s++) {
    int64_t cu[9];
    cu[0] = 0;
    for (int r = 0; r < R; r++) cu[r + 1] = cu[r] + schedule[r][s];
    int64_t T = cu[R];
    int64_t *ids = malloc((size_t)(T > 0 ? T : 1) * sizeof(int64_t));
    for (int r = 0; r < R; r++)
      for (int i = 0; i < schedule[r][s]; i++) ids[cu[r] + i] = hist[r][done[r] + i];
    void *pids = ngram_pack(ids, T, dt), *pcu = ngram_pack(cu, R + 1, INGOT_DTYPE_I32);
    void *pctx = ngram_pack(context, (int64_t)R * w, dt);
    ingot_tensor tids = ingot_tensor_1d(pids, dt, T);
    ingot_tensor tcu = ingot_tensor_1d(pcu, INGOT_DTYPE_I32, R + 1);
    ingot_tensor tctx = ingot_tensor_2d(pctx, dt, R, w, w);
    int64_t *rows = malloc((size_t)(T > 0 ? T : 1) * (size_t)H * sizeof(int64_t));
    ingot_tensor trows = ingot_tensor_2d(rows, INGOT_DTYPE_I64, T, H, H);
    EXPECT_OK(cpu, ingot_ngram_row_ids(cpu, cfg, &tids, &tcu, &tctx, &trows, NULL));
    EXPECT_OK(cpu, ingot_ngram_commit_context(cpu, cfg, &tids, &tcu, &tctx, NULL));
    for (int r = 0; r < R; r++) {
      for (int i = 0; i < schedule[r][s]; i++)
        for (int64_t h = 0; h < H; h++)
          EXPECT(rows[(cu[r] + i) * H + h] == want[r][(done[r] + i) * H + h],
                 "step %d request %d token %d head %" PRId64 ": chunked != prefill", s, r, i, h);
      done[r] += schedule[r][s];
      /* the committed context is the last w tokens of E.. ++ history so far */
      for (int i = 0; i < w; i++) {
        int64_t src = done[r] - w + i;
        int64_t expect = src < 0 ? E : hist[r][src];
        EXPECT(ngram_unpack(pctx, (int64_t)r * w + i, dt) == expect,
               "step %d request %d context[%d] wrong", s, r, i);
      }
    }
    for (int64_t i = 0; i < (int64_t)R * w; i++) context[i] = ngram_unpack(pctx, i, dt);
    free(rows);
    free(ids);
    free(pids);
    free(pcu);
    free(pctx);
  }
  for (int r = 0; r < R; r++) {
    free(hist[r]);
    free(want[r]);
  }
  free(context);
  return 0;
}

static int test_decode_equals_prefill(void) {
  /* a prefill-then-decode schedule: chunks of 3, 1, 2, 5 then 3 decodes; batch-mates
   * on other schedules (with empty steps) share every call */
  static const int schedule[4][16] = {
      {3, 1, 2, 5, 1, 1, 1},
      {1, 1, 1, 1, 1, 1, 1},
      {0, 4, 0, 1, 2, 0, 1},
      {7, 0, 0, 0, 1, 1, 0},
  };
  for (int n = 2; n <= INGOT_NGRAM_MAX_N; n++) {
    for (int d = 0; d < 2; d++) {
      ingot_dtype dt = d ? INGOT_DTYPE_I64 : INGOT_DTYPE_I32;
      int64_t E = ngram_random_token(dt, 0);
      ingot_ngram_config cfg = random_config(n, n == 3 ? 8 : 2, E);
      check_chunked(&cfg, dt, 4, schedule, 7);
    }
  }
  ingot_ngram_config real;
  EXPECT_OK(NULL, ingot_ngram_config_derive(248320, 3, 8, 20000000, 1234, 0, 248044, &real));
  check_chunked(&real, INGOT_DTYPE_I32, 4, schedule, 7);
  return 0;
}

static int test_commit_random(void) {
  for (int iter = 0; iter < 100; iter++) {
    int n = (int)test_rand_range(2, INGOT_NGRAM_MAX_N), w = n - 1;
    ingot_dtype dt = test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64;
    ingot_ngram_config cfg = random_config(n, 1, 0);
    ngram_case c = ngram_random_case(n, test_rand_range(1, 30), 12, dt, 0);
    int64_t *want = malloc((size_t)c.B * (size_t)w * sizeof(int64_t));
    ngram_oracle_commit(&c, want);
    /* a strided context: padding columns must stay untouched */
    int64_t stride = w + (int64_t)(test_rand() % 3);
    int64_t *wide = malloc((size_t)c.B * (size_t)stride * sizeof(int64_t));
    for (int64_t b = 0; b < c.B; b++)
      for (int64_t i = 0; i < stride; i++) wide[b * stride + i] = i < w ? c.context[b * w + i] : -77;
    void *pctx = ngram_pack(wide, c.B * stride, dt);
    void *pids = ngram_pack(c.ids, c.T, dt), *pcu = ngram_pack(c.cu, c.B + 1, INGOT_DTYPE_I64);
    ingot_tensor tids = ingot_tensor_1d(pids, dt, c.T);
    ingot_tensor tcu = ingot_tensor_1d(pcu, INGOT_DTYPE_I64, c.B + 1);
    ingot_tensor tctx = ingot_tensor_2d(pctx, dt, c.B, w, stride);
    EXPECT_OK(cpu, ingot_ngram_commit_context(cpu, &cfg, &tids, &tcu, &tctx, NULL));
    for (int64_t b = 0; b < c.B; b++)
      for (int64_t i = 0; i < stride; i++) {
        int64_t got = ngram_unpack(pctx, b * stride + i, dt);
        int64_t expect = i < w ? want[b * w + i] : -77;
        EXPECT(got == expect, "n=%d request %" PRId64 " col %" PRId64 ": %" PRId64 " != %" PRId64,
               n, b, i, got, expect);
      }
    free(want);
    free(wide);
    free(pctx);
    free(pids);
    free(pcu);
    ngram_case_free(&c);
  }
  return 0;
}

/* ---- gather ------------------------------------------------------------------ */

static float oracle_table_value(const void *table, ingot_dtype dt, int64_t i) {
  if (dt == INGOT_DTYPE_F8_E4M3) return ngram_oracle_e4m3(((const uint8_t *)table)[i]);
  if (dt == INGOT_DTYPE_BF16) {
    uint32_t u = (uint32_t)((const uint16_t *)table)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  return ((const float *)table)[i];
}

/* Random table bytes: every bit pattern (NaN, Inf, subnormals included). */
static void *random_table(ingot_dtype dt, int64_t count) {
  size_t es = ingot_dtype_size(dt);
  uint8_t *p = malloc((size_t)count * es + 16);
  for (size_t i = 0; i < (size_t)count * es; i++) p[i] = (uint8_t)test_rand();
  return p;
}

static int64_t random_row_id(int64_t R) {
  switch (test_rand() % 6) {
    case 0: return -test_rand_range(1, 1000);
    case 1: return R + test_rand_range(0, 3);
    case 2: return (test_rand() & 1) ? INT64_MIN : INT64_MAX;
    default: return R > 0 ? test_rand_range(0, R - 1) : 0;
  }
}

static int test_gather(void) {
  static const ingot_dtype dts[] = {INGOT_DTYPE_F8_E4M3, INGOT_DTYPE_BF16, INGOT_DTYPE_F32};
  static const float scales[] = {1.0f, 0.0625f, 3.7f, 1e-30f, 1e30f, -2.5f, 0.0f};
  for (int iter = 0; iter < 60; iter++) {
    ingot_dtype dt = dts[iter % 3];
    float scale = scales[test_rand() % (sizeof scales / sizeof scales[0])];
    int64_t R = test_rand_range(0, 300), D = test_rand_range(1, 40);
    int64_t tstride = D + (int64_t)(test_rand() % 4);
    int64_t T = test_rand_range(0, 50), H = test_rand_range(1, 17);
    int64_t rstride = H + (int64_t)(test_rand() % 2), ostride = H * D + (int64_t)(test_rand() % 5);
    void *table = random_table(dt, R * tstride);
    int64_t *rows = malloc((size_t)(T * rstride + 1) * sizeof(int64_t));
    for (int64_t i = 0; i < T * rstride; i++) rows[i] = random_row_id(R);
    uint16_t *out = malloc((size_t)(T * ostride + 1) * sizeof(uint16_t));
    memset(out, 0x5a, (size_t)(T * ostride + 1) * sizeof(uint16_t));
    ingot_tensor trows = ingot_tensor_2d(rows, INGOT_DTYPE_I64, T, H, rstride);
    ingot_tensor ttab = ingot_tensor_2d(table, dt, R, D, tstride);
    ingot_tensor tout = ingot_tensor_2d(out, INGOT_DTYPE_BF16, T, H * D, ostride);
    EXPECT_OK(cpu, ingot_ngram_gather(cpu, &trows, &ttab, scale, &tout, NULL));
    int bad = 0;
    for (int64_t t = 0; t < T && !bad; t++)
      for (int64_t h = 0; h < H && !bad; h++) {
        int64_t row = rows[t * rstride + h];
        for (int64_t d = 0; d < D; d++) {
          uint16_t want = row >= 0 && row < R
                              ? ngram_oracle_bf16(oracle_table_value(table, dt, row * tstride + d) * scale)
                              : 0;
          uint16_t got = out[t * ostride + h * D + d];
          if (got != want) {
            EXPECT(0, "%s scale %g: out[%" PRId64 "][%" PRId64 "*D+%" PRId64 "] = 0x%04x, want 0x%04x (row %" PRId64 ")",
                   ingot_dtype_name(dt), (double)scale, t, h, d, got, want, row);
            bad = 1;
            break;
          }
        }
        for (int64_t p = H * D; p < ostride && t < T; p++)
          if (out[t * ostride + p] != 0x5a5a) {
            EXPECT(0, "out padding column %" PRId64 " of row %" PRId64 " was written", p, t);
            bad = 1;
            break;
          }
      }
    free(table);
    free(rows);
    free(out);
  }
  return 0;
}

static int test_embed_equals_row_ids_plus_gather(void) {
  static const ingot_dtype dts[] = {INGOT_DTYPE_F8_E4M3, INGOT_DTYPE_BF16, INGOT_DTYPE_F32};
  for (int iter = 0; iter < 30; iter++) {
    ingot_dtype dt = dts[iter % 3];
    int n = (int)test_rand_range(2, 5);
    ingot_dtype id_dt = test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64;
    int64_t E = ngram_random_token(id_dt, 0);
    ingot_ngram_config cfg = random_config(n, (int)test_rand_range(1, 3), E);
    /* small moduli so that many rows land inside a small table, some outside */
    for (int h = 0; h < cfg.num_heads; h++) {
      cfg.primes[h] = test_rand_range(1, 50);
      cfg.offsets[h] = test_rand_range(0, 60);
    }
    int64_t R = 100, D = test_rand_range(1, 24);
    void *table = random_table(dt, R * D);
    ngram_case c = ngram_random_case(n, test_rand_range(0, 12), 9, id_dt, E);
    int64_t H = cfg.num_heads;
    int64_t *rows = malloc((size_t)(c.T + 1) * (size_t)H * sizeof(int64_t));
    EXPECT_OK(cpu, run_row_ids(&cfg, &c, id_dt, INGOT_DTYPE_I32, rows, H));
    uint16_t *a = calloc((size_t)(c.T + 1) * (size_t)(H * D), 2);
    uint16_t *b = calloc((size_t)(c.T + 1) * (size_t)(H * D), 2);
    ingot_tensor trows = ingot_tensor_2d(rows, INGOT_DTYPE_I64, c.T, H, H);
    ingot_tensor ttab = ingot_tensor_2d(table, dt, R, D, D);
    ingot_tensor ta = ingot_tensor_2d(a, INGOT_DTYPE_BF16, c.T, H * D, H * D);
    ingot_tensor tb = ingot_tensor_2d(b, INGOT_DTYPE_BF16, c.T, H * D, H * D);
    EXPECT_OK(cpu, ingot_ngram_gather(cpu, &trows, &ttab, 0.5f, &ta, NULL));
    void *pids = ngram_pack(c.ids, c.T, id_dt), *pcu = ngram_pack(c.cu, c.B + 1, INGOT_DTYPE_I32);
    void *pctx = ngram_pack(c.context, c.B * (n - 1), id_dt);
    ingot_tensor tids = ingot_tensor_1d(pids, id_dt, c.T);
    ingot_tensor tcu = ingot_tensor_1d(pcu, INGOT_DTYPE_I32, c.B + 1);
    ingot_tensor tctx = ingot_tensor_2d(pctx, id_dt, c.B, n - 1, n - 1);
    EXPECT_OK(cpu, ingot_ngram_embed(cpu, &cfg, &tids, &tcu, &tctx, &ttab, 0.5f, &tb, NULL));
    EXPECT(memcmp(a, b, (size_t)c.T * (size_t)(H * D) * 2) == 0, "embed != row_ids + gather");
    free(rows), free(a), free(b), free(table), free(pids), free(pcu), free(pctx);
    ngram_case_free(&c);
  }
  return 0;
}

/* ---- bad arguments --------------------------------------------------------- */

typedef struct bad_fixture {
  ingot_ngram_config cfg;
  int32_t ids[6], cu[3];
  _Alignas(8) int32_t context[4]; /* an i64 tensor laid over it must be aligned */
  int64_t rows[6 * 4];
  uint8_t table[64 * 8];
  uint16_t out[6 * 4 * 8];
  ingot_tensor tids, tcu, tctx, trows, ttab, tout;
} bad_fixture;

static void bad_fixture_init(bad_fixture *f) {
  memset(f, 0, sizeof *f);
  f->cfg = toy_config(7);
  int32_t ids[] = {3, 4, 7, 5, 6, 8}, cu[] = {0, 2, 6}, context[] = {7, 7, 1, 2};
  memcpy(f->ids, ids, sizeof ids);
  memcpy(f->cu, cu, sizeof cu);
  memcpy(f->context, context, sizeof context);
  memset(f->rows, 0x11, sizeof f->rows);
  memset(f->out, 0x22, sizeof f->out);
  f->tids = ingot_tensor_1d(f->ids, INGOT_DTYPE_I32, 6);
  f->tcu = ingot_tensor_1d(f->cu, INGOT_DTYPE_I32, 3);
  f->tctx = ingot_tensor_2d(f->context, INGOT_DTYPE_I32, 2, 2, 2);
  f->trows = ingot_tensor_2d(f->rows, INGOT_DTYPE_I64, 6, 4, 4);
  f->ttab = ingot_tensor_2d(f->table, INGOT_DTYPE_F8_E4M3, 64, 8, 8);
  f->tout = ingot_tensor_2d(f->out, INGOT_DTYPE_BF16, 6, 32, 32);
}

/* Every op on the fixture; each must fail with INVALID_ARGUMENT naming `arg`
 * and leave rows, out and context untouched. */
static void expect_rejected(bad_fixture *f, const char *what, const char *arg, int ops_mask) {
  int32_t context0[4];
  memcpy(context0, f->context, sizeof context0);
  for (int op = 0; op < 4; op++) {
    if (!(ops_mask & (1 << op))) continue;
    ingot_status st;
    switch (op) {
      case 0: st = ingot_ngram_row_ids(cpu, &f->cfg, &f->tids, &f->tcu, &f->tctx, &f->trows, NULL); break;
      case 1: st = ingot_ngram_commit_context(cpu, &f->cfg, &f->tids, &f->tcu, &f->tctx, NULL); break;
      case 2: st = ingot_ngram_gather(cpu, &f->trows, &f->ttab, 1.0f, &f->tout, NULL); break;
      default: st = ingot_ngram_embed(cpu, &f->cfg, &f->tids, &f->tcu, &f->tctx, &f->ttab, 1.0f, &f->tout, NULL); break;
    }
    const char *msg = ingot_last_error(cpu);
    EXPECT(st == INGOT_STATUS_INVALID_ARGUMENT, "%s (op %d): status %s, message '%s'", what, op,
           ingot_status_name(st), msg);
    EXPECT(strstr(msg, arg) != NULL, "%s (op %d): message '%s' does not name '%s'", what, op, msg, arg);
    EXPECT(strncmp(msg, "ingot_ngram_", 12) == 0, "%s: message '%s' does not name the op", what, msg);
  }
  int64_t rows0[6 * 4];
  uint16_t out0[6 * 4 * 8];
  memset(rows0, 0x11, sizeof rows0);
  memset(out0, 0x22, sizeof out0);
  EXPECT(memcmp(f->rows, rows0, sizeof rows0) == 0, "%s: rows written", what);
  EXPECT(memcmp(f->out, out0, sizeof out0) == 0, "%s: out written", what);
  EXPECT(memcmp(f->context, context0, sizeof context0) == 0, "%s: context written", what);
}

#define ROW_IDS 1
#define COMMIT 2
#define GATHER 4
#define EMBED 8
#define BATCH_OPS (ROW_IDS | COMMIT | EMBED)

static int test_bad_arguments(void) {
  bad_fixture f;
  /* the fixture itself is valid */
  bad_fixture_init(&f);
  EXPECT_OK(cpu, ingot_ngram_row_ids(cpu, &f.cfg, &f.tids, &f.tcu, &f.tctx, &f.trows, NULL));
  EXPECT_OK(cpu, ingot_ngram_gather(cpu, &f.trows, &f.ttab, 1.0f, &f.tout, NULL));

  bad_fixture_init(&f); f.tctx.shape[1] = 3; f.tctx.stride[0] = 3;
  expect_rejected(&f, "context width != n-1", "context", BATCH_OPS);
  bad_fixture_init(&f); f.cfg.num_heads = 5;
  expect_rejected(&f, "H != hpn*(n-1)", "num_heads", BATCH_OPS);
  bad_fixture_init(&f); f.cfg.n = 1;
  expect_rejected(&f, "n < 2", "cfg->n", BATCH_OPS);
  bad_fixture_init(&f); f.cfg.n = INGOT_NGRAM_MAX_N + 1;
  expect_rejected(&f, "n too large", "cfg->n", BATCH_OPS);
  bad_fixture_init(&f); f.cfg.primes[2] = 0;
  expect_rejected(&f, "zero modulus", "cfg->primes[2]", BATCH_OPS);
  bad_fixture_init(&f); f.cfg.offsets[1] = -1;
  expect_rejected(&f, "negative offset", "cfg->offsets[1]", BATCH_OPS);
  bad_fixture_init(&f); f.cfg.offsets[3] = INT64_MAX;
  expect_rejected(&f, "offset + P overflows", "cfg->offsets[3]", BATCH_OPS);
  bad_fixture_init(&f); f.cu[1] = 7; f.cu[2] = 6;
  expect_rejected(&f, "decreasing cu_seqlens", "cu_seqlens", BATCH_OPS);
  bad_fixture_init(&f); f.cu[2] = 5;
  expect_rejected(&f, "cu_seqlens[B] != T", "cu_seqlens", BATCH_OPS);
  bad_fixture_init(&f); f.cu[0] = 1;
  expect_rejected(&f, "cu_seqlens[0] != 0", "cu_seqlens", BATCH_OPS);
  bad_fixture_init(&f); f.cu[1] = -1;
  expect_rejected(&f, "negative cu_seqlens", "cu_seqlens", BATCH_OPS);
  bad_fixture_init(&f); f.tcu.shape[0] = 0;
  expect_rejected(&f, "empty cu_seqlens", "cu_seqlens", BATCH_OPS);
  bad_fixture_init(&f); f.tcu.shape[0] = 2;
  expect_rejected(&f, "B mismatch", "context", BATCH_OPS);
  bad_fixture_init(&f); f.tids.data = NULL;
  expect_rejected(&f, "NULL ids", "ids", BATCH_OPS);
  bad_fixture_init(&f); f.tcu.data = NULL;
  expect_rejected(&f, "NULL cu_seqlens", "cu_seqlens", BATCH_OPS);
  bad_fixture_init(&f); f.tctx.data = NULL;
  expect_rejected(&f, "NULL context", "context", BATCH_OPS);
  bad_fixture_init(&f); f.trows.data = NULL;
  expect_rejected(&f, "NULL rows", "rows", ROW_IDS | GATHER);
  bad_fixture_init(&f); f.ttab.data = NULL;
  expect_rejected(&f, "NULL table", "table", GATHER | EMBED);
  bad_fixture_init(&f); f.tout.data = NULL;
  expect_rejected(&f, "NULL out", "out", GATHER | EMBED);
  bad_fixture_init(&f); f.tids.dtype = INGOT_DTYPE_F32;
  expect_rejected(&f, "float ids", "ids", BATCH_OPS);
  bad_fixture_init(&f); f.tctx.dtype = INGOT_DTYPE_I64;
  expect_rejected(&f, "context dtype != ids dtype", "context", BATCH_OPS);
  bad_fixture_init(&f); f.trows.dtype = INGOT_DTYPE_I32;
  expect_rejected(&f, "i32 rows", "rows", ROW_IDS | GATHER);
  bad_fixture_init(&f); f.ttab.dtype = INGOT_DTYPE_F16;
  expect_rejected(&f, "f16 table", "table", GATHER | EMBED);
  bad_fixture_init(&f); f.tout.dtype = INGOT_DTYPE_F32;
  expect_rejected(&f, "f32 out", "out", GATHER | EMBED);
  bad_fixture_init(&f); f.trows.shape[1] = 3;
  expect_rejected(&f, "rows width != H", "rows", ROW_IDS);
  bad_fixture_init(&f); f.trows.shape[0] = 5;
  expect_rejected(&f, "rows height != T", "rows", ROW_IDS);
  bad_fixture_init(&f); f.tout.shape[1] = 31;
  expect_rejected(&f, "out width != H*D", "out", GATHER | EMBED);
  bad_fixture_init(&f); f.tout.shape[0] = 5;
  expect_rejected(&f, "out height != T", "out", GATHER | EMBED);
  bad_fixture_init(&f); f.tids.ndim = 2;
  expect_rejected(&f, "2-D ids", "ids", BATCH_OPS);
  bad_fixture_init(&f); f.tids.stride[0] = 2;
  expect_rejected(&f, "strided ids", "ids", BATCH_OPS);
  bad_fixture_init(&f); f.trows.stride[0] = 3;
  expect_rejected(&f, "overlapping rows", "rows", ROW_IDS | GATHER);
  bad_fixture_init(&f); f.trows.shape[0] = -1;
  expect_rejected(&f, "negative shape", "rows", GATHER);
  bad_fixture_init(&f); f.ttab.shape[0] = INT64_MAX / 2; f.ttab.stride[0] = 8;
  expect_rejected(&f, "table size overflows", "table", GATHER | EMBED);
  bad_fixture_init(&f); f.ttab.shape[0] = 1; f.ttab.shape[1] = INT64_MAX / 3;
  expect_rejected(&f, "H*D overflows", "H * D", GATHER);
  bad_fixture_init(&f); f.ttab.shape[1] = 0;
  expect_rejected(&f, "D = 0", "table", GATHER | EMBED);
  bad_fixture_init(&f); f.tout.data = f.rows;
  f.tout.shape[1] = 8; f.tout.stride[0] = 8; f.ttab.shape[1] = 2; f.ttab.stride[0] = 2;
  expect_rejected(&f, "out aliases rows", "overlaps", GATHER);
  bad_fixture_init(&f); f.trows.data = f.context; f.trows.shape[0] = 1; f.trows.shape[1] = 4;
  f.trows.stride[0] = 4;
  /* rows [1, 4] i64 lies over the context */
  f.tids.shape[0] = 1; f.cu[1] = 1; f.cu[2] = 1;
  expect_rejected(&f, "rows aliases context", "overlaps", ROW_IDS);

  /* scale must be finite */
  bad_fixture_init(&f);
  EXPECT_STATUS(cpu, ingot_ngram_gather(cpu, &f.trows, &f.ttab, NAN, &f.tout, NULL),
                INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(cpu), "scale") != NULL, "%s", ingot_last_error(cpu));
  EXPECT_STATUS(cpu, ingot_ngram_embed(cpu, &f.cfg, &f.tids, &f.tcu, &f.tctx, &f.ttab, INFINITY, &f.tout, NULL),
                INGOT_STATUS_INVALID_ARGUMENT);
  /* a CPU context takes no stream */
  EXPECT_STATUS(cpu, ingot_ngram_row_ids(cpu, &f.cfg, &f.tids, &f.tcu, &f.tctx, &f.trows,
                                         (struct CUstream_st *)(uintptr_t)0x10),
                INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(cpu), "stream") != NULL, "%s", ingot_last_error(cpu));
  /* NULL context and config */
  EXPECT_STATUS(NULL, ingot_ngram_row_ids(NULL, &f.cfg, &f.tids, &f.tcu, &f.tctx, &f.trows, NULL),
                INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(NULL), "ctx") != NULL, "%s", ingot_last_error(NULL));
  EXPECT_STATUS(cpu, ingot_ngram_row_ids(cpu, NULL, &f.tids, &f.tcu, &f.tctx, &f.trows, NULL),
                INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(cpu), "cfg") != NULL, "%s", ingot_last_error(cpu));
  EXPECT_STATUS(cpu, ingot_ngram_row_ids(cpu, &f.cfg, NULL, &f.tcu, &f.tctx, &f.trows, NULL),
                INGOT_STATUS_INVALID_ARGUMENT);
  /* derive's own checks */
  ingot_ngram_config cfg;
  EXPECT_STATUS(NULL, ingot_ngram_config_derive(0, 3, 2, 1000, 1, 0, 7, &cfg), INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(NULL), "vocab_size") != NULL, "%s", ingot_last_error(NULL));
  EXPECT_STATUS(NULL, ingot_ngram_config_derive(512, 1, 2, 1000, 1, 0, 7, &cfg), INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(NULL, ingot_ngram_config_derive(512, 3, 40, 1000, 1, 0, 7, &cfg), INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(NULL), "heads_per_order") != NULL, "%s", ingot_last_error(NULL));
  EXPECT_STATUS(NULL, ingot_ngram_config_derive(512, 3, 2, 1, 1, 0, 7, &cfg), INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(NULL, ingot_ngram_config_derive(512, 3, 2, 1000, 1, -1, 7, &cfg), INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(NULL, ingot_ngram_config_derive(512, 3, 2, 1000, 1, INGOT_NGRAM_MAX_LAYER_INDEX + 1, 7, &cfg),
                INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(NULL), "layer_index") != NULL, "%s", ingot_last_error(NULL));
  EXPECT_STATUS(NULL, ingot_ngram_config_derive(512, 3, 2, 1000, 1, 0, 7, NULL), INGOT_STATUS_INVALID_ARGUMENT);
  int64_t rows;
  cfg = toy_config(7);
  EXPECT_STATUS(NULL, ingot_ngram_table_rows(&cfg, 0, &rows), INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(NULL), "pad_multiple") != NULL, "%s", ingot_last_error(NULL));
  return 0;
}

/* ingot_ngram_table_rows: a padded row count past int64 is rejected with
 * pad_multiple and its value named, and *rows is left alone. */
static int test_table_rows_overflow(void) {
  ingot_ngram_config cfg = toy_config(7); /* 4062 rows */
  int64_t rows = -7;
  EXPECT_ERROR(NULL, ingot_ngram_table_rows(&cfg, INT64_MAX, &rows), INGOT_STATUS_INVALID_ARGUMENT,
               "pad_multiple = 9223372036854775807: the table's 4062 rows rounded up");
  EXPECT_ERROR(NULL, ingot_ngram_table_rows(&cfg, INT64_MAX - 4000, &rows),
               INGOT_STATUS_INVALID_ARGUMENT, "pad_multiple = 9223372036854771807");
  EXPECT_ERROR(NULL, ingot_ngram_table_rows(&cfg, -1, &rows), INGOT_STATUS_INVALID_ARGUMENT,
               "pad_multiple: -1 < 1");
  EXPECT_ERROR(NULL, ingot_ngram_table_rows(&cfg, INT64_MIN, &rows), INGOT_STATUS_INVALID_ARGUMENT,
               "pad_multiple: -9223372036854775808 < 1");
  /* a table of INT64_MAX rows: exact with pad 1, past int64 once padded */
  ingot_ngram_config top = cfg;
  top.offsets[3] = INT64_MAX - top.primes[3];
  EXPECT_ERROR(NULL, ingot_ngram_table_rows(&top, 2, &rows), INGOT_STATUS_INVALID_ARGUMENT,
               "pad_multiple = 2: the table's 9223372036854775807 rows");
  EXPECT_ERROR(NULL, ingot_ngram_table_rows(&top, INT64_C(1) << 56, &rows),
               INGOT_STATUS_INVALID_ARGUMENT, "pad_multiple = 72057594037927936");
  top.offsets[3] = INT64_MAX - 1;
  EXPECT_ERROR(NULL, ingot_ngram_table_rows(&top, 1, &rows), INGOT_STATUS_INVALID_ARGUMENT,
               "cfg->offsets[3] + cfg->primes[3] = 9223372036854775806 + 1021 overflows int64");
  EXPECT(rows == -7, "table_rows wrote %lld on error", (long long)rows);
  top.offsets[3] = INT64_MAX - top.primes[3];
  EXPECT_OK(NULL, ingot_ngram_table_rows(&top, 1, &rows));
  EXPECT(rows == INT64_MAX, "rows %lld", (long long)rows);
  EXPECT_OK(NULL, ingot_ngram_table_rows(&cfg, INT64_C(1) << 56, &rows));
  EXPECT(rows == INT64_C(1) << 56, "rows %lld", (long long)rows);
  return 0;
}

static int test_empty_batches(void) {
  ingot_ngram_config cfg = toy_config(7);
  int32_t cu[4] = {0, 0, 0, 0}, context[6] = {1, 2, 3, 4, 5, 6}, ids[1] = {0};
  int64_t rows[1] = {42};
  ingot_tensor tids = ingot_tensor_1d(ids, INGOT_DTYPE_I32, 0);
  ingot_tensor tcu = ingot_tensor_1d(cu, INGOT_DTYPE_I32, 4);
  ingot_tensor tctx = ingot_tensor_2d(context, INGOT_DTYPE_I32, 3, 2, 2);
  ingot_tensor trows = ingot_tensor_2d(rows, INGOT_DTYPE_I64, 0, 4, 4);
  EXPECT_OK(cpu, ingot_ngram_row_ids(cpu, &cfg, &tids, &tcu, &tctx, &trows, NULL));
  EXPECT_OK(cpu, ingot_ngram_commit_context(cpu, &cfg, &tids, &tcu, &tctx, NULL));
  EXPECT(rows[0] == 42 && context[0] == 1 && context[5] == 6, "empty batch wrote something");
  /* B = 0 */
  tcu.shape[0] = 1;
  tctx.shape[0] = 0;
  EXPECT_OK(cpu, ingot_ngram_row_ids(cpu, &cfg, &tids, &tcu, &tctx, &trows, NULL));
  return 0;
}

static int test_force_reference_env(void) {
  setenv("INGOT_FORCE_REFERENCE", "1", 1);
  ingot_context_t ref = NULL;
  EXPECT_OK(NULL, ingot_context_create(INGOT_BACKEND_CPU, 0, &ref));
  EXPECT(ingot_context_flags(ref) & INGOT_CONTEXT_FLAG_FORCE_REFERENCE, "flag not set");
  ingot_context_destroy(ref);
  setenv("INGOT_FORCE_REFERENCE", "0", 1);
  EXPECT_OK(NULL, ingot_context_create(INGOT_BACKEND_CPU, 0, &ref));
  EXPECT(!(ingot_context_flags(ref) & INGOT_CONTEXT_FLAG_FORCE_REFERENCE), "'0' set the flag");
  ingot_context_destroy(ref);
  unsetenv("INGOT_FORCE_REFERENCE");
  return 0;
}

int main(void) {
  test_init("test_ngram");
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &cpu) != INGOT_STATUS_SUCCESS) {
    fprintf(stderr, "cannot create a CPU context: %s\n", ingot_last_error(NULL));
    return 1;
  }
  test_run("derive_toy", test_derive_toy);
  test_run("derive_real", test_derive_real);
  test_run("worked_rows", test_worked_rows);
  test_run("random_batches", test_random_batches);
  test_run("large_batch_65536", test_large_batch);
  test_run("decode_equals_prefill", test_decode_equals_prefill);
  test_run("commit_random", test_commit_random);
  test_run("gather", test_gather);
  test_run("embed_equals_row_ids_plus_gather", test_embed_equals_row_ids_plus_gather);
  test_run("bad_arguments", test_bad_arguments);
  test_run("table_rows_overflow", test_table_rows_overflow);
  test_run("empty_batches", test_empty_batches);
  test_run("force_reference_env", test_force_reference_env);
  ingot_context_destroy(cpu);
  return test_finish();
}
