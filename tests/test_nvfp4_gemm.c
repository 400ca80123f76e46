/*
 * NVFP4 GEMM, fused GeGLU and MLP on the CPU backend, against an oracle
 * written here: operands decoded with this file's own E2M1 / E4M3 tables,
 * dot products summed in long double with k DESCENDING (the library sums
 * exact integers per block; with x86's 64-bit long double mantissa and
 * these magnitudes the oracle's sum is exact too, so the two must agree bit
 * for bit), rounded once to fp32. Fresh random inputs every run (the seed is
 * printed). Scale padding bytes are 0x7F (NaN) in every input: the op must
 * not read them. Also: results with known exact answers, correct rounding
 * of a tie, GeGLU codes / scales / padding, MLP == geglu + gemm byte for
 * byte, NaN rules, M = 0, and every invalid argument (named, nothing
 * written).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/nvfp4_ref.h" /* the shared epilogue math the oracle reuses */
#include "test_util.h"

static ingot_context_t ctx;

static const double kE2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

static uint32_t f_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* E4M3 byte -> value; NaN for 0x7F / 0xFF. */
static double e4m3_value(uint8_t b) {
  int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return (double)NAN;
  double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
  return s ? -v : v;
}

static int64_t spec_offset(int64_t m, int64_t k, int64_t cols) {
  int64_t kt = ((cols / 16) + 3) / 4;
  return (m / 128) * (kt * 512) + (k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + (k % 4);
}

/* fp32 -> bf16, nearest even, NaN -> 0x7FC0 (written again here). */
static uint16_t bf16_of(float f) {
  if (isnan(f)) return 0x7fc0;
  uint32_t u = f_bits(f), lo = u & 0xffffu, hi = u >> 16;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi++;
  return (uint16_t)hi;
}

/* ---- NVFP4 test matrices -------------------------------------------------------- */

typedef struct nvm {
  int64_t rows, cols, vstride, sr, sc;
  uint8_t *values, *scales;
  float gs;
  ingot_tensor tv, ts, tg;
  ingot_nvfp4_matrix mat;
} nvm;

/* A random non-negative scale byte: mostly normal around 1, sometimes 0,
 * subnormal or large. */
static uint8_t rand_scale(void) {
  uint64_t r = test_rand() % 100;
  if (r < 3) return 0;
  if (r < 8) return (uint8_t)test_rand_range(1, 7);
  if (r < 12) return (uint8_t)test_rand_range(0x50, 0x7e);
  return (uint8_t)test_rand_range(0x28, 0x48);
}

static void nvm_init(nvm *a, int64_t rows, int64_t cols, int64_t vpad) {
  memset(a, 0, sizeof *a);
  a->rows = rows;
  a->cols = cols;
  a->vstride = cols / 2 + vpad;
  a->sr = (rows + 127) / 128 * 128;
  a->sc = (cols / 16 + 3) / 4 * 4;
  a->values = malloc((size_t)(rows * a->vstride) + 1);
  a->scales = malloc((size_t)(a->sr * a->sc) + 1);
  for (int64_t i = 0; i < rows * a->vstride; i++) a->values[i] = (uint8_t)test_rand();
  memset(a->scales, 0x7f, (size_t)(a->sr * a->sc)); /* padding: NaN, never read */
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < cols / 16; k++) a->scales[spec_offset(r, k, cols)] = rand_scale();
  a->gs = (float)ldexp(1.0 + test_rand_unit(), (int)test_rand_range(-4, 10));
}

/* The descriptors (after the struct has its final address). */
static void nvm_bind(nvm *a) {
  a->tv = ingot_tensor_2d(a->values, INGOT_DTYPE_U8, a->rows, a->cols / 2, a->vstride);
  a->ts = ingot_tensor_2d(a->scales, INGOT_DTYPE_U8, a->sr, a->sc, a->sc);
  a->tg = ingot_tensor_1d(&a->gs, INGOT_DTYPE_F32, 1);
  a->mat.values = &a->tv;
  a->mat.scales = &a->ts;
  a->mat.global_scale = &a->tg;
}

static void nvm_free(nvm *a) {
  free(a->values);
  free(a->scales);
}

static void nvm_set_code(nvm *a, int64_t r, int64_t c, uint8_t code) {
  uint8_t *p = a->values + r * a->vstride + c / 2;
  *p = (c & 1) ? (uint8_t)((*p & 0x0f) | (code << 4)) : (uint8_t)((*p & 0xf0) | code);
}

static long double decoded(const nvm *a, int64_t r, int64_t c) {
  uint8_t byte = a->values[r * a->vstride + c / 2];
  uint8_t code = (c & 1) ? byte >> 4 : byte & 15;
  return (long double)kE2m1[code] * (long double)e4m3_value(a->scales[spec_offset(r, c / 16, a->cols)]);
}

/* acc[m * n_rows + n], the oracle's fp32 accumulators. */
static float *oracle_acc(const nvm *a, const nvm *b) {
  int64_t M = a->rows, N = b->rows, K = a->cols;
  float *acc = malloc(sizeof(float) * (size_t)(M * N) + 1);
  long double *bd = malloc(sizeof(long double) * (size_t)(N * K));
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++) bd[n * K + k] = decoded(b, n, k);
  long double *ad = malloc(sizeof(long double) * (size_t)K);
  for (int64_t m = 0; m < M; m++) {
    for (int64_t k = 0; k < K; k++) ad[k] = decoded(a, m, k);
    for (int64_t n = 0; n < N; n++) {
      long double s = 0;
      for (int64_t k = K - 1; k >= 0; k--) s += ad[k] * bd[n * K + k];
      acc[m * N + n] = (float)s;
    }
  }
  free(ad);
  free(bd);
  return acc;
}

static float alpha_of(float ga, float gb) {
  if (!(ga > 0.0f && ga <= FLT_MAX) || !(gb > 0.0f && gb <= FLT_MAX)) return NAN;
  volatile float p = ga * gb;
  return 1.0f / p;
}

/* The workspace for a size, 16-byte aligned, filled with junk. */
static void *ws_alloc(size_t bytes) {
  size_t n = (bytes + 16 + 63) / 64 * 64;
  void *p = aligned_alloc(64, n);
  if (p != NULL) memset(p, 0xa5, n);
  return p;
}

/* ---- GEMM vs the oracle ------------------------------------------------------------- */

/* Runs the GEMM into d (dtype, row stride ld) and compares with acc*alpha;
 * returns the relative L2 error (or 1 on a failure to run). */
static double run_gemm_and_compare(nvm *a, nvm *b, const float *acc, ingot_dtype dtype,
                                   int64_t ld, int *mismatches) {
  int64_t M = a->rows, N = b->rows;
  size_t esz = dtype == INGOT_DTYPE_F32 ? 4 : 2;
  size_t dbytes = (size_t)((M > 0 ? M - 1 : 0) * ld + N) * esz;
  uint8_t *d = malloc(dbytes + 1);
  memset(d, 0xee, dbytes + 1);
  ingot_tensor td = ingot_tensor_2d(d, dtype, M, N, ld);
  size_t wsb = 0;
  EXPECT_OK(ctx, ingot_nvfp4_gemm_workspace_size(ctx, M, N, a->cols, &wsb));
  void *ws = ws_alloc(wsb);
  ingot_status st = ingot_nvfp4_gemm(ctx, &a->mat, &b->mat, &td, ws, wsb, NULL);
  EXPECT_OK(ctx, st);
  float alpha = alpha_of(a->gs, b->gs);
  double num = 0, den = 0;
  *mismatches = 0;
  for (int64_t m = 0; m < M && st == INGOT_OK; m++)
    for (int64_t n = 0; n < N; n++) {
      volatile float want = acc[m * N + n] * alpha;
      float got;
      int same;
      if (dtype == INGOT_DTYPE_F32) {
        memcpy(&got, d + (size_t)(m * ld + n) * 4, 4);
        same = isnan(want) ? f_bits(got) == 0x7fc00000u : f_bits(got) == f_bits(want);
      } else {
        uint16_t h;
        memcpy(&h, d + (size_t)(m * ld + n) * 2, 2);
        uint32_t u = (uint32_t)h << 16;
        memcpy(&got, &u, 4);
        same = h == bf16_of(want);
      }
      if (!same && ++*mismatches <= 3)
        test_fail_at(__FILE__, __LINE__, "M=%lld N=%lld K=%lld %s d[%lld, %lld] = %a, want %a",
                     (long long)M, (long long)N, (long long)a->cols, ingot_dtype_name(dtype),
                     (long long)m, (long long)n, (double)got, (double)want);
      float ref = want; /* bf16: against the rounded reference */
      if (dtype == INGOT_DTYPE_BF16) {
        uint32_t u = (uint32_t)bf16_of(want) << 16;
        memcpy(&ref, &u, 4);
      }
      double e = (double)got - (double)ref;
      num += e * e;
      den += (double)ref * (double)ref;
    }
  /* the row padding of d is untouched */
  for (int64_t m = 0; m + 1 < M; m++)
    for (int64_t c = N * (int64_t)esz; c < ld * (int64_t)esz; c++)
      EXPECT(d[(size_t)(m * ld) * esz + (size_t)c] == 0xee, "d padding written");
  free(ws);
  free(d);
  return st == INGOT_OK ? (den > 0 ? sqrt(num / den) : sqrt(num)) : 1.0;
}

static int test_gemm_random(void) {
  static const int64_t ms[] = {1, 17, 128, 130}, ks[] = {64, 128, 2048}, ns[] = {64, 192};
  int exact = LDBL_MANT_DIG >= 64;
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
    for (size_t j = 0; j < sizeof ks / sizeof *ks; j++)
      for (size_t l = 0; l < sizeof ns / sizeof *ns; l++) {
        nvm a, b;
        nvm_init(&a, ms[i], ks[j], test_rand_range(0, 1) * 24);
        nvm_init(&b, ns[l], ks[j], test_rand_range(0, 1) * 8);
        nvm_bind(&a);
        nvm_bind(&b);
        float *acc = oracle_acc(&a, &b);
        for (int dt = 0; dt < 2; dt++) {
          ingot_dtype dtype = dt ? INGOT_DTYPE_BF16 : INGOT_DTYPE_F32;
          int64_t ld = ns[l] + test_rand_range(0, 1) * 40;
          int bad;
          double rel = run_gemm_and_compare(&a, &b, acc, dtype, ld, &bad);
          EXPECT(rel < 1e-6, "M=%lld K=%lld N=%lld: rel L2 %g", (long long)ms[i],
                 (long long)ks[j], (long long)ns[l], rel);
          if (exact) EXPECT(bad == 0, "%d elements differ from the exact oracle", bad);
        }
        free(acc);
        nvm_free(&a);
        nvm_free(&b);
      }
  return 0;
}

/* K above the CPU backend's chunk of 2048 (several K chunks per tile, and
 * row tiles sharing a column tile). */
static int test_gemm_long_k(void) {
  nvm a, b;
  nvm_init(&a, 70, 4096 + 64, 0);
  nvm_init(&b, 128, 4096 + 64, 16);
  nvm_bind(&a);
  nvm_bind(&b);
  float *acc = oracle_acc(&a, &b);
  int bad;
  double rel = run_gemm_and_compare(&a, &b, acc, INGOT_DTYPE_F32, 128, &bad);
  EXPECT(rel < 1e-6, "rel L2 %g", rel);
  if (LDBL_MANT_DIG >= 64) EXPECT(bad == 0, "%d elements differ from the exact oracle", bad);
  free(acc);
  nvm_free(&a);
  nvm_free(&b);
  return 0;
}

/* Small integers: every result exact in fp32, known without an oracle. */
static int test_gemm_exact(void) {
  enum { M = 3, K = 128, N = 64 };
  nvm a, b;
  nvm_init(&a, M, K, 0);
  nvm_init(&b, N, K, 0);
  a.gs = 2.0f; /* alpha = 1 / (2 * 0.5) = 1 */
  b.gs = 0.5f;
  for (int64_t r = 0; r < M; r++)
    for (int64_t k = 0; k < K / 16; k++) a.scales[spec_offset(r, k, K)] = 0x38; /* 1.0 */
  for (int64_t r = 0; r < N; r++)
    for (int64_t k = 0; k < K / 16; k++) b.scales[spec_offset(r, k, K)] = 0x40; /* 2.0 */
  nvm_bind(&a);
  nvm_bind(&b);
  float d[M * N];
  uint16_t d16[M * N];
  ingot_tensor td = ingot_tensor_2d(d, INGOT_DTYPE_F32, M, N, N);
  ingot_tensor td16 = ingot_tensor_2d(d16, INGOT_DTYPE_BF16, M, N, N);
  size_t wsb;
  EXPECT_OK(ctx, ingot_nvfp4_gemm_workspace_size(ctx, M, N, K, &wsb));
  void *ws = ws_alloc(wsb);
  EXPECT_OK(ctx, ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td, ws, wsb, NULL));
  EXPECT_OK(ctx, ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td16, ws, wsb, NULL));
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      int64_t s4 = 0; /* 4 * sum of e2m1 products, an integer */
      for (int k = 0; k < K; k++) {
        uint8_t ca = (a.values[m * a.vstride + k / 2] >> (4 * (k & 1))) & 15;
        uint8_t cb = (b.values[n * b.vstride + k / 2] >> (4 * (k & 1))) & 15;
        s4 += (int64_t)(2 * kE2m1[ca]) * (int64_t)(2 * kE2m1[cb]);
      }
      float want = (float)s4 * 0.5f; /* b scale 2.0: sum * 2 = s4 / 2 */
      EXPECT(f_bits(d[m * N + n]) == f_bits(want), "d[%d,%d] = %g, want %g", m, n,
             (double)d[m * N + n], (double)want);
      EXPECT(d16[m * N + n] == bf16_of(want), "bf16 d[%d,%d] = 0x%04x, want 0x%04x", m, n,
             d16[m * N + n], bf16_of(want));
    }

  /* Correct rounding of the exact sum: 2^20 + 2^-4 is a tie (ulp 2^-3) and
   * goes to 2^20; adding 2^-20 makes it round up. gs = 1. */
  nvm_free(&a);
  nvm_free(&b);
  nvm_init(&a, 2, 64, 0);
  nvm_init(&b, 64, 64, 0);
  a.gs = b.gs = 1.0f;
  memset(a.values, 0, (size_t)(2 * a.vstride));
  memset(b.values, 0, (size_t)(64 * b.vstride));
  for (int64_t r = 0; r < 2; r++) {
    a.scales[spec_offset(r, 0, 64)] = 0x78; /* 256 */
    a.scales[spec_offset(r, 1, 64)] = 0x38; /* 1 */
    a.scales[spec_offset(r, 2, 64)] = 0x01; /* 2^-9 */
    a.scales[spec_offset(r, 3, 64)] = 0x38;
    nvm_set_code(&a, r, 0, 6);  /* 4 * 256 = 2^10 */
    nvm_set_code(&a, r, 16, 1); /* 0.5 */
  }
  nvm_set_code(&a, 1, 32, 1); /* row 1 only: 0.5 * 2^-9 = 2^-10 */
  for (int64_t r = 0; r < 64; r++) {
    b.scales[spec_offset(r, 0, 64)] = 0x78;
    b.scales[spec_offset(r, 1, 64)] = 0x28; /* 0.25 */
    b.scales[spec_offset(r, 2, 64)] = 0x01;
    b.scales[spec_offset(r, 3, 64)] = 0x38;
    nvm_set_code(&b, r, 0, 6);
    nvm_set_code(&b, r, 16, 1); /* 0.5 * 0.25: product with a 2^-4 */
    nvm_set_code(&b, r, 32, 1); /* 2^-10: product with a's 2^-20 */
  }
  nvm_bind(&a);
  nvm_bind(&b);
  float d2[2 * 64];
  ingot_tensor td2 = ingot_tensor_2d(d2, INGOT_DTYPE_F32, 2, 64, 64);
  free(ws);
  EXPECT_OK(ctx, ingot_nvfp4_gemm_workspace_size(ctx, 2, 64, 64, &wsb));
  ws = ws_alloc(wsb);
  EXPECT_OK(ctx, ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td2, ws, wsb, NULL));
  for (int n = 0; n < 64; n++) {
    EXPECT(d2[n] == 1048576.0f, "tie: %a, want 2^20", (double)d2[n]);
    EXPECT(d2[64 + n] == 1048576.125f, "above the tie: %a, want 2^20 + 2^-3", (double)d2[64 + n]);
  }
  free(ws);
  nvm_free(&a);
  nvm_free(&b);
  return 0;
}

/* ---- GeGLU ---------------------------------------------------------------------------- */

typedef struct hbuf {
  int64_t rows, hidden, vstride, sr, sc;
  uint8_t *values, *scales;
  float gs;
  ingot_tensor tv, ts, tg;
  ingot_nvfp4_matrix mat;
} hbuf;

static void hbuf_init(hbuf *h, int64_t rows, int64_t hidden, int64_t vpad, float gs) {
  h->rows = rows;
  h->hidden = hidden;
  h->vstride = hidden / 2 + vpad;
  h->sr = (rows + 127) / 128 * 128;
  h->sc = (hidden / 16 + 3) / 4 * 4;
  h->values = malloc((size_t)(rows * h->vstride) + 1);
  h->scales = malloc((size_t)(h->sr * h->sc) + 1);
  memset(h->values, 0xab, (size_t)(rows * h->vstride) + 1);
  memset(h->scales, 0xab, (size_t)(h->sr * h->sc) + 1);
  h->gs = gs;
  h->tv = ingot_tensor_2d(h->values, INGOT_DTYPE_U8, rows, hidden / 2, h->vstride);
  h->ts = ingot_tensor_1d(h->scales, INGOT_DTYPE_F8_E4M3, h->sr * h->sc);
  h->tg = ingot_tensor_1d(&h->gs, INGOT_DTYPE_F32, 1);
  h->mat.values = &h->tv;
  h->mat.scales = &h->ts;
  h->mat.global_scale = &h->tg;
}

static void hbuf_free(hbuf *h) {
  free(h->values);
  free(h->scales);
}

/* Checks h against the oracle's accumulators; returns differing codes. */
static int64_t check_h(const hbuf *h, const float *acc, int64_t two_h, float alpha) {
  int64_t bad = 0, H = h->hidden;
  for (int64_t m = 0; m < h->rows; m++)
    for (int64_t blk = 0; blk < H / 16; blk++) {
      float x[16];
      for (int e = 0; e < 16; e++) {
        int64_t j = blk * 16 + e;
        float g = ingot_fmul_rn(acc[m * two_h + 2 * j], alpha);
        float u = ingot_fmul_rn(acc[m * two_h + 2 * j + 1], alpha);
        x[e] = ingot_fmul_rn(ingot_gelu_tanh(g), u);
      }
      uint8_t sf, codes[8];
      ingot_nvfp4_ref_block(x, h->gs, &sf, codes);
      uint8_t got_sf = h->scales[spec_offset(m, blk, H)];
      EXPECT(got_sf == sf, "h scale [%lld, %lld] = 0x%02x, want 0x%02x", (long long)m,
             (long long)blk, got_sf, sf);
      for (int i = 0; i < 8; i++) bad += h->values[m * h->vstride + blk * 8 + i] != codes[i];
    }
  /* padding of the scale buffer is 0, value row padding untouched */
  for (int64_t r = 0; r < h->sr; r++)
    for (int64_t c = 0; c < h->sc; c++)
      if (r >= h->rows || c >= H / 16)
        EXPECT(h->scales[spec_offset(r, c, H)] == 0, "h scale padding [%lld, %lld] = 0x%02x",
               (long long)r, (long long)c, h->scales[spec_offset(r, c, H)]);
  for (int64_t r = 0; r < h->rows; r++)
    for (int64_t c = H / 2; c < h->vstride; c++)
      EXPECT(h->values[r * h->vstride + c] == 0xab, "h value row padding written");
  return bad;
}

static int test_geglu_random(void) {
  static const int64_t ms[] = {1, 33, 130}, ks[] = {64, 256}, hs[] = {32, 96};
  for (size_t i = 0; i < 3; i++)
    for (size_t j = 0; j < 2; j++)
      for (size_t l = 0; l < 2; l++) {
        int64_t M = ms[i], K = ks[j], H = hs[l];
        nvm x, w;
        nvm_init(&x, M, K, 8);
        nvm_init(&w, 2 * H, K, 0);
        nvm_bind(&x);
        nvm_bind(&w);
        float *acc = oracle_acc(&x, &w);
        float alpha = alpha_of(x.gs, w.gs);
        /* an h global scale that puts typical |h| mid-range */
        double amax = 0;
        for (int64_t e = 0; e < M * 2 * H; e++)
          if (fabs((double)acc[e] * (double)alpha) > amax) amax = fabs((double)acc[e] * (double)alpha);
        hbuf h;
        hbuf_init(&h, M, H, test_rand_range(0, 1) * 16,
                  amax > 0 ? (float)(2688.0 / (amax * amax)) : 1.0f);
        size_t wsb;
        EXPECT_OK(ctx, ingot_nvfp4_geglu_workspace_size(ctx, M, H, K, &wsb));
        void *ws = ws_alloc(wsb);
        EXPECT_OK(ctx, ingot_nvfp4_geglu(ctx, &x.mat, &w.mat, &h.mat, ws, wsb, NULL));
        int64_t bad = check_h(&h, acc, 2 * H, alpha);
        if (LDBL_MANT_DIG >= 64)
          EXPECT(bad == 0, "M=%lld K=%lld H=%lld: %lld h codes differ", (long long)M,
                 (long long)K, (long long)H, (long long)bad);
        else
          EXPECT(bad * 1000 <= M * H, "%lld h codes differ", (long long)bad);
        free(ws);
        hbuf_free(&h);
        free(acc);
        nvm_free(&x);
        nvm_free(&w);
      }
  return 0;
}

/* ---- MLP == geglu then gemm ------------------------------------------------------------- */

static int test_mlp(void) {
  static const int64_t cases[][4] = {{5, 128, 64, 64}, {130, 64, 128, 128}, {1, 192, 64, 192}};
  for (size_t c = 0; c < 3; c++) {
    int64_t M = cases[c][0], K = cases[c][1], H = cases[c][2], N = cases[c][3];
    nvm x, w, down;
    nvm_init(&x, M, K, 0);
    nvm_init(&w, 2 * H, K, 0);
    nvm_init(&down, N, H, 8);
    nvm_bind(&x);
    nvm_bind(&w);
    nvm_bind(&down);
    hbuf h;
    hbuf_init(&h, M, H, 0, (float)ldexp(1.0 + test_rand_unit(), (int)test_rand_range(-8, 2)));
    size_t g_ws, d_ws, m_ws;
    EXPECT_OK(ctx, ingot_nvfp4_geglu_workspace_size(ctx, M, H, K, &g_ws));
    EXPECT_OK(ctx, ingot_nvfp4_gemm_workspace_size(ctx, M, N, H, &d_ws));
    EXPECT_OK(ctx, ingot_nvfp4_mlp_workspace_size(ctx, M, K, H, N, &m_ws));
    EXPECT(m_ws >= (size_t)(M * H / 2) + (size_t)(h.sr * h.sc) + (g_ws > d_ws ? g_ws : d_ws),
           "mlp workspace %zu too small for h", m_ws);
    void *ws = ws_alloc(m_ws);
    for (int dt = 0; dt < 2; dt++) {
      ingot_dtype dtype = dt ? INGOT_DTYPE_BF16 : INGOT_DTYPE_F32;
      size_t esz = dt ? 2 : 4;
      uint8_t *o1 = malloc((size_t)(M * N) * esz), *o2 = malloc((size_t)(M * N) * esz);
      memset(o1, 0x11, (size_t)(M * N) * esz);
      memset(o2, 0x22, (size_t)(M * N) * esz);
      ingot_tensor t1 = ingot_tensor_2d(o1, dtype, M, N, N), t2 = ingot_tensor_2d(o2, dtype, M, N, N);
      EXPECT_OK(ctx, ingot_nvfp4_geglu(ctx, &x.mat, &w.mat, &h.mat, ws, g_ws, NULL));
      ingot_tensor hv = ingot_tensor_2d(h.values, INGOT_DTYPE_U8, M, H / 2, h.vstride);
      ingot_tensor hsc = ingot_tensor_2d(h.scales, INGOT_DTYPE_U8, h.sr, h.sc, h.sc);
      ingot_nvfp4_matrix hm = {&hv, &hsc, &h.tg};
      EXPECT_OK(ctx, ingot_nvfp4_gemm(ctx, &hm, &down.mat, &t1, ws, d_ws, NULL));
      EXPECT_OK(ctx, ingot_nvfp4_mlp(ctx, &x.mat, &w.mat, &h.tg, &down.mat, &t2, ws, m_ws, NULL));
      EXPECT(memcmp(o1, o2, (size_t)(M * N) * esz) == 0, "M=%lld K=%lld H=%lld N=%lld %s: mlp != "
             "geglu + gemm", (long long)M, (long long)K, (long long)H, (long long)N,
             ingot_dtype_name(dtype));
      free(o1);
      free(o2);
    }
    free(ws);
    hbuf_free(&h);
    nvm_free(&x);
    nvm_free(&w);
    nvm_free(&down);
  }
  return 0;
}

/* ---- NaN rules -------------------------------------------------------------------------- */

static int test_nan_rules(void) {
  enum { M = 40, K = 128, N = 128 };
  nvm a, b;
  nvm_init(&a, M, K, 0);
  nvm_init(&b, N, K, 0);
  a.scales[spec_offset(7, 5, K)] = 0x7f;  /* row 7 of A */
  b.scales[spec_offset(70, 0, K)] = 0xff; /* row 70 of B: column 70 of D */
  nvm_bind(&a);
  nvm_bind(&b);
  float *acc = oracle_acc(&a, &b);
  float d[M * N];
  uint16_t d16[M * N];
  ingot_tensor td = ingot_tensor_2d(d, INGOT_DTYPE_F32, M, N, N);
  ingot_tensor td16 = ingot_tensor_2d(d16, INGOT_DTYPE_BF16, M, N, N);
  size_t wsb;
  EXPECT_OK(ctx, ingot_nvfp4_gemm_workspace_size(ctx, M, N, K, &wsb));
  void *ws = ws_alloc(wsb);
  EXPECT_OK(ctx, ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td, ws, wsb, NULL));
  EXPECT_OK(ctx, ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td16, ws, wsb, NULL));
  float alpha = alpha_of(a.gs, b.gs);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      int nan = m == 7 || n == 70;
      volatile float want = acc[m * N + n] * alpha;
      if (nan)
        EXPECT(f_bits(d[m * N + n]) == 0x7fc00000u && d16[m * N + n] == 0x7fc0,
               "d[%d,%d] = %a should be the canonical NaN", m, n, (double)d[m * N + n]);
      else
        EXPECT(f_bits(d[m * N + n]) == f_bits(want), "d[%d,%d] = %a, want %a", m, n,
               (double)d[m * N + n], (double)want);
    }
  /* unusable global scales: every output NaN */
  static const float bad_gs[] = {0.0f, -1.0f, INFINITY, NAN, -0.0f};
  for (size_t i = 0; i < sizeof bad_gs / sizeof *bad_gs; i++)
    for (int which = 0; which < 2; which++) {
      float keep = which ? b.gs : a.gs;
      if (which)
        b.gs = bad_gs[i];
      else
        a.gs = bad_gs[i];
      EXPECT_OK(ctx, ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td, ws, wsb, NULL));
      EXPECT_OK(ctx, ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td16, ws, wsb, NULL));
      int all = 1;
      for (int e = 0; e < M * N; e++) all &= f_bits(d[e]) == 0x7fc00000u && d16[e] == 0x7fc0;
      EXPECT(all, "gs %g for %s: not every output is NaN", (double)bad_gs[i], which ? "b" : "a");
      if (which)
        b.gs = keep;
      else
        a.gs = keep;
    }
  free(ws);

  /* GeGLU: a NaN row of x gives an all-zero h row (NaN h encodes as code
   * 0, amax 0: sf 0); an unusable h global scale gives all zeros. */
  enum { H = 64 };
  nvm w;
  nvm_init(&w, 2 * H, K, 0);
  nvm_bind(&w);
  hbuf h;
  hbuf_init(&h, M, H, 0, 1.0f);
  EXPECT_OK(ctx, ingot_nvfp4_geglu_workspace_size(ctx, M, H, K, &wsb));
  ws = ws_alloc(wsb);
  EXPECT_OK(ctx, ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &h.mat, ws, wsb, NULL));
  for (int c = 0; c < H / 2; c++) EXPECT(h.values[7 * h.vstride + c] == 0, "NaN row: code");
  for (int blk = 0; blk < H / 16; blk++)
    EXPECT(h.scales[spec_offset(7, blk, H)] == 0, "NaN row: scale");
  static const float bad_h[] = {0.0f, -2.0f, INFINITY, NAN};
  for (size_t i = 0; i < 4; i++) {
    h.gs = bad_h[i];
    memset(h.values, 0xab, (size_t)(M * h.vstride));
    memset(h.scales, 0xab, (size_t)(h.sr * h.sc));
    EXPECT_OK(ctx, ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &h.mat, ws, wsb, NULL));
    int zero = 1;
    for (int64_t e = 0; e < M * h.vstride; e++) zero &= h.values[e] == 0;
    for (int64_t e = 0; e < h.sr * h.sc; e++) zero &= h.scales[e] == 0;
    EXPECT(zero, "h gs %g: h not all zero", (double)bad_h[i]);
  }
  free(ws);
  hbuf_free(&h);
  nvm_free(&w);
  free(acc);
  nvm_free(&a);
  nvm_free(&b);
  return 0;
}

/* ---- M = 0 ------------------------------------------------------------------------------ */

static int test_empty_batch(void) {
  float gs = 1.0f;
  uint8_t wv[64 * 32], wsc[128 * 4];
  memset(wv, 0, sizeof wv);
  memset(wsc, 0, sizeof wsc);
  ingot_tensor xv = ingot_tensor_2d(NULL, INGOT_DTYPE_U8, 0, 32, 32);
  ingot_tensor xs = ingot_tensor_1d(NULL, INGOT_DTYPE_U8, 0);
  ingot_tensor g = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);
  ingot_tensor bv = ingot_tensor_2d(wv, INGOT_DTYPE_U8, 64, 32, 32);
  ingot_tensor bs = ingot_tensor_2d(wsc, INGOT_DTYPE_U8, 128, 4, 4);
  ingot_tensor d = ingot_tensor_2d(NULL, INGOT_DTYPE_BF16, 0, 64, 64);
  ingot_nvfp4_matrix a = {&xv, &xs, &g}, b = {&bv, &bs, &g};
  size_t wsb = 1;
  EXPECT_OK(ctx, ingot_nvfp4_gemm_workspace_size(ctx, 0, 64, 64, &wsb));
  EXPECT(wsb == 0, "M = 0: workspace %zu", wsb);
  EXPECT_OK(ctx, ingot_nvfp4_gemm(ctx, &a, &b, &d, NULL, 0, NULL));
  ingot_tensor hv = ingot_tensor_2d(NULL, INGOT_DTYPE_U8, 0, 16, 16);
  ingot_tensor hs = ingot_tensor_2d(NULL, INGOT_DTYPE_U8, 0, 4, 4);
  ingot_nvfp4_matrix h = {&hv, &hs, &g};
  EXPECT_OK(ctx, ingot_nvfp4_geglu_workspace_size(ctx, 0, 32, 64, &wsb));
  EXPECT(wsb == 0, "M = 0: geglu workspace %zu", wsb);
  EXPECT_OK(ctx, ingot_nvfp4_geglu(ctx, &a, &b, &h, NULL, 0, NULL));
  ingot_tensor dv = ingot_tensor_2d(wv, INGOT_DTYPE_U8, 64, 32, 32);
  ingot_nvfp4_matrix down = {&dv, &bs, &g};
  uint8_t wv2[128 * 32], wsc2[128 * 4];
  memset(wv2, 0, sizeof wv2);
  memset(wsc2, 0, sizeof wsc2);
  ingot_tensor wv2t = ingot_tensor_2d(wv2, INGOT_DTYPE_U8, 128, 32, 32);
  ingot_tensor ws2t = ingot_tensor_2d(wsc2, INGOT_DTYPE_U8, 128, 4, 4);
  ingot_nvfp4_matrix w2 = {&wv2t, &ws2t, &g};
  ingot_tensor bs32 = ingot_tensor_2d(wsc, INGOT_DTYPE_U8, 128, 4, 4);
  down.scales = &bs32;
  EXPECT_OK(ctx, ingot_nvfp4_mlp_workspace_size(ctx, 0, 64, 64, 64, &wsb));
  EXPECT(wsb == 0, "M = 0: mlp workspace %zu", wsb);
  EXPECT_OK(ctx, ingot_nvfp4_mlp(ctx, &a, &w2, &g, &down, &d, NULL, 0, NULL));
  return 0;
}

/* ---- invalid arguments ---------------------------------------------------------------- */

#define EXPECT_FAIL(call, want, needle) EXPECT_ERROR(ctx, call, want, needle)
#define EXPECT_REJECT(call, needle) EXPECT_FAIL(call, INGOT_STATUS_INVALID_ARGUMENT, needle)

static int test_invalid(void) {
  enum { M = 4, K = 64, N = 64, H = 64 };
  nvm a, b, w, down;
  nvm_init(&a, M, K, 0);
  nvm_init(&b, N, K, 0);
  nvm_init(&w, 2 * H, K, 0);
  nvm_init(&down, N, H, 0);
  nvm_bind(&a);
  nvm_bind(&b);
  nvm_bind(&w);
  nvm_bind(&down);
  float d[M * N];
  memset(d, 0x33, sizeof d);
  ingot_tensor td = ingot_tensor_2d(d, INGOT_DTYPE_F32, M, N, N);
  hbuf h;
  hbuf_init(&h, M, H, 0, 1.0f);
  size_t wsb, gwsb, mwsb;
  EXPECT_OK(ctx, ingot_nvfp4_gemm_workspace_size(ctx, M, N, K, &wsb));
  EXPECT_OK(ctx, ingot_nvfp4_geglu_workspace_size(ctx, M, H, K, &gwsb));
  EXPECT_OK(ctx, ingot_nvfp4_mlp_workspace_size(ctx, M, K, H, N, &mwsb));
  size_t big = mwsb + gwsb + wsb + 64;
  uint8_t *ws = ws_alloc(big);
  memset(ws, 0x5a, big);
  ingot_tensor t, t2;
  ingot_nvfp4_matrix mm;
  float gs = 1.0f;
  ingot_tensor tg = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);

  /* size queries */
  size_t q = 12345;
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, M, 96, K, &q), "n = 96");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, M, N, 80, &q), "k = 80");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, -1, N, K, &q), "m = -1");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, M, N, 0, &q), "k = 0");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, M, N, K, NULL), "bytes: NULL");
  EXPECT_REJECT(ingot_nvfp4_geglu_workspace_size(ctx, M, 48, K, &q), "hidden = 48");
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, M, K, 32, N, &q), "hidden = 32");
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, M, K, H, 65, &q), "n = 65");
  EXPECT(q == 12345, "size query wrote on error");
  EXPECT(ingot_nvfp4_gemm_workspace_size(NULL, M, N, K, &q) == INGOT_STATUS_INVALID_ARGUMENT,
         "NULL ctx");

  /* gemm: shapes */
  t = ingot_tensor_2d(a.values, INGOT_DTYPE_U8, M, 40, 40); /* K = 80 */
  mm = a.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &mm, &b.mat, &td, ws, wsb, NULL), "K = 2 * shape[1] = 80");
  t = ingot_tensor_2d(b.values, INGOT_DTYPE_U8, 32, K / 2, b.vstride); /* N = 32 */
  mm = b.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &mm, &td, ws, wsb, NULL), "N = shape[0] = 32");
  {
    nvm b2; /* B with K = 128: mismatched K */
    nvm_init(&b2, N, 128, 0);
    nvm_bind(&b2);
    EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b2.mat, &td, ws, wsb, NULL),
                  "b.values: shape[1] = 64, expected a.values.shape[1] = K / 2 = 32");
    nvm_free(&b2);
  }
  t = ingot_tensor_2d(d, INGOT_DTYPE_F32, M + 1, N, N);
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &t, ws, wsb, NULL), "d: shape[0] = 5");
  t = ingot_tensor_2d(d, INGOT_DTYPE_F32, M, N - 16, N);
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &t, ws, wsb, NULL), "d: shape[1] = 48");
  /* dtypes */
  t = ingot_tensor_2d(d, INGOT_DTYPE_F16, M, N, N);
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &t, ws, wsb, NULL), "d: dtype f16");
  t = ingot_tensor_2d(a.values, INGOT_DTYPE_I32, M, K / 2, a.vstride);
  mm = a.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &mm, &b.mat, &td, ws, wsb, NULL), "a.values: dtype i32");
  t = ingot_tensor_2d(b.scales, INGOT_DTYPE_BF16, b.sr, b.sc / 2, b.sc / 2);
  mm = b.mat, mm.scales = &t;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &mm, &td, ws, wsb, NULL), "b.scales: dtype bf16");
  t = ingot_tensor_1d(b.scales, INGOT_DTYPE_U8, b.sr * b.sc - 1);
  mm = b.mat, mm.scales = &t;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &mm, &td, ws, wsb, NULL), "b.scales: shape[0] = 511");
  t = ingot_tensor_1d(&gs, INGOT_DTYPE_U32, 1);
  mm = a.mat, mm.global_scale = &t;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &mm, &b.mat, &td, ws, wsb, NULL), "a.global_scale: dtype u32");
  t = ingot_tensor_1d(d, INGOT_DTYPE_F32, 2);
  mm = b.mat, mm.global_scale = &t;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &mm, &td, ws, wsb, NULL), "b.global_scale: shape[0] = 2");
  /* NULLs */
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, NULL, &b.mat, &td, ws, wsb, NULL), "a: NULL");
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, NULL, &td, ws, wsb, NULL), "b: NULL");
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, NULL, ws, wsb, NULL), "d: NULL");
  mm = a.mat, mm.values = NULL;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &mm, &b.mat, &td, ws, wsb, NULL), "a.values: NULL");
  mm = b.mat, mm.scales = NULL;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &mm, &td, ws, wsb, NULL), "b.scales: NULL");
  mm = a.mat, mm.global_scale = NULL;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &mm, &b.mat, &td, ws, wsb, NULL), "a.global_scale: NULL");
  t = ingot_tensor_2d(NULL, INGOT_DTYPE_U8, M, K / 2, K / 2);
  mm = a.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &mm, &b.mat, &td, ws, wsb, NULL), "a.values: data is NULL");
  /* workspace */
  if (wsb > 0) {
    EXPECT_FAIL(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td, ws, wsb - 1, NULL),
                INGOT_STATUS_INSUFFICIENT_WORKSPACE, "ingot_nvfp4_gemm_workspace_size");
    EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td, ws + 8, wsb, NULL), "16-byte");
    EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td, NULL, wsb, NULL), "workspace: NULL");
  }
  /* overlap */
  {
    /* d over a.values / b.scales, all inside one buffer */
    uint8_t *blob = aligned_alloc(64, 4096);
    memset(blob, 0x44, 4096);
    ingot_tensor av = ingot_tensor_2d(blob, INGOT_DTYPE_U8, M, K / 2, K / 2);
    ingot_tensor bsc = ingot_tensor_1d(blob + 1024, INGOT_DTYPE_U8, b.sr * b.sc);
    ingot_nvfp4_matrix am = a.mat, bm = b.mat;
    am.values = &av;
    bm.scales = &bsc;
    t = ingot_tensor_2d(blob + 64, INGOT_DTYPE_BF16, M, N, N);
    EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &am, &b.mat, &t, ws, wsb, NULL), "d: overlaps a.values");
    t = ingot_tensor_2d(blob + 1024 + 256, INGOT_DTYPE_BF16, M, N, N);
    EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &bm, &t, ws, wsb, NULL), "d: overlaps b.scales");
    for (int i = 0; i < 4096; i++) EXPECT(blob[i] == 0x44, "overlap case wrote");
    free(blob);
  }
  t = ingot_tensor_2d(ws, INGOT_DTYPE_F32, M, N, N);
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &t, ws, wsb, NULL), "workspace: overlaps d");
  if (wsb > 0 && (uintptr_t)a.values % 16 == 0)
    EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td, a.values, wsb, NULL),
                  "workspace: overlaps a.values");
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &td, ws, wsb, (struct CUstream_st *)&t),
                "stream");
  EXPECT(ingot_nvfp4_gemm(NULL, &a.mat, &b.mat, &td, ws, wsb, NULL) ==
             INGOT_STATUS_INVALID_ARGUMENT,
         "NULL ctx");

  /* geglu */
  t = ingot_tensor_2d(w.values, INGOT_DTYPE_U8, 96, K / 2, w.vstride); /* 2H = 96 */
  mm = w.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_geglu(ctx, &a.mat, &mm, &h.mat, ws, gwsb, NULL), "2H = shape[0] = 96");
  t = ingot_tensor_2d(h.values, INGOT_DTYPE_U8, M, H / 4, h.vstride);
  mm = h.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &mm, ws, gwsb, NULL),
                "h.values: shape[1] = 16, expected H / 2");
  t = ingot_tensor_2d(h.values, INGOT_DTYPE_U8, M + 1, H / 2, h.vstride);
  mm = h.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &mm, ws, gwsb, NULL),
                "h.values: shape[0] = 5, expected M");
  EXPECT_REJECT(ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, NULL, ws, gwsb, NULL), "h: NULL");
  mm = h.mat, mm.global_scale = NULL;
  EXPECT_REJECT(ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &mm, ws, gwsb, NULL), "h.global_scale: NULL");
  t = ingot_tensor_1d(h.values, INGOT_DTYPE_F32, 1); /* h gs inside h values */
  mm = h.mat, mm.global_scale = &t;
  EXPECT_REJECT(ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &mm, ws, gwsb, NULL),
                "h.values: overlaps h.global_scale");
  t = ingot_tensor_2d(h.scales, INGOT_DTYPE_U8, M, H / 2, h.vstride); /* values in scales */
  mm = h.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &mm, ws, gwsb, NULL),
                "h.scales: overlaps h.values");
  t = ingot_tensor_2d(w.values, INGOT_DTYPE_U8, M, H / 2, w.vstride); /* h over the weight */
  mm = h.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &mm, ws, gwsb, NULL),
                "h.values: overlaps w_gate_up.values");
  EXPECT_FAIL(ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &h.mat, ws, gwsb - 16, NULL),
              INGOT_STATUS_INSUFFICIENT_WORKSPACE, "ingot_nvfp4_geglu_workspace_size");
  t = ingot_tensor_2d(h.values, INGOT_DTYPE_F32, M, H / 2, h.vstride);
  mm = h.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_geglu(ctx, &a.mat, &w.mat, &mm, ws, gwsb, NULL), "h.values: dtype f32");

  /* mlp */
  t = ingot_tensor_2d(w.values, INGOT_DTYPE_U8, 64, K / 2, w.vstride); /* H = 32 */
  mm = w.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_mlp(ctx, &a.mat, &mm, &tg, &down.mat, &td, ws, mwsb, NULL),
                "2H = shape[0] = 64, expected a positive multiple of 128");
  t = ingot_tensor_2d(down.values, INGOT_DTYPE_U8, N, H, down.vstride + H); /* H/2 mismatch */
  mm = down.mat, mm.values = &t;
  EXPECT_REJECT(ingot_nvfp4_mlp(ctx, &a.mat, &w.mat, &tg, &mm, &td, ws, mwsb, NULL),
                "w_down.values: shape[1] = 64, expected H / 2");
  EXPECT_REJECT(ingot_nvfp4_mlp(ctx, &a.mat, &w.mat, NULL, &down.mat, &td, ws, mwsb, NULL),
                "h_global_scale: NULL");
  t2 = ingot_tensor_1d(d + 3, INGOT_DTYPE_F32, 1);
  EXPECT_REJECT(ingot_nvfp4_mlp(ctx, &a.mat, &w.mat, &t2, &down.mat, &td, ws, mwsb, NULL),
                "out: overlaps h_global_scale");
  t2 = ingot_tensor_1d(ws + 16, INGOT_DTYPE_F32, 1);
  EXPECT_REJECT(ingot_nvfp4_mlp(ctx, &a.mat, &w.mat, &t2, &down.mat, &td, ws, mwsb, NULL),
                "workspace: overlaps h_global_scale");
  EXPECT_FAIL(ingot_nvfp4_mlp(ctx, &a.mat, &w.mat, &tg, &down.mat, &td, ws, mwsb - 1, NULL),
              INGOT_STATUS_INSUFFICIENT_WORKSPACE, "ingot_nvfp4_mlp_workspace_size");
  EXPECT_REJECT(ingot_nvfp4_mlp(ctx, &a.mat, &w.mat, &tg, NULL, &td, ws, mwsb, NULL),
                "w_down: NULL");
  t = ingot_tensor_2d(d, INGOT_DTYPE_U8, M, N, N);
  EXPECT_REJECT(ingot_nvfp4_mlp(ctx, &a.mat, &w.mat, &tg, &down.mat, &t, ws, mwsb, NULL),
                "out: dtype u8");

  /* nothing written by any failed call */
  for (int i = 0; i < M * N; i++) EXPECT(f_bits(d[i]) == 0x33333333u, "d written");
  for (size_t i = 0; i < big; i++) EXPECT(ws[i] == 0x5a, "workspace written");
  for (int64_t i = 0; i < M * h.vstride; i++) EXPECT(h.values[i] == 0xab, "h values written");
  for (int64_t i = 0; i < h.sr * h.sc; i++) EXPECT(h.scales[i] == 0xab, "h scales written");
  EXPECT(gs == 1.0f, "gs written");
  free(ws);
  hbuf_free(&h);
  nvm_free(&a);
  nvm_free(&b);
  nvm_free(&w);
  nvm_free(&down);
  return 0;
}

/* Every size query rejects a shape whose byte counts (or an intermediate
 * product) overflow int64 / size_t, naming the arguments and their values,
 * and leaves *bytes alone; the ops reject such tensors in their descriptor
 * checks. Runs under ASan + UBSan without a report. */
static int test_size_overflow(void) {
  const int64_t big = INT64_C(1) << 56, two32 = INT64_C(1) << 32;
  const int64_t max64 = INT64_MAX / 64 * 64; /* the largest multiple of 64 */
  size_t q = 12345;
  /* gemm (m, n, k) */
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, INT64_MAX, big, 64, &q),
                "m = 9223372036854775807, k = 64: a.values");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, 0, big, big, &q),
                "n = 72057594037927936, k = 72057594037927936: b.values");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, 1, 64, max64, &q),
                "m = 1, k = 9223372036854775744: a.scales");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, big, 64, 64, &q),
                "m = 72057594037927936, n = 64: d [m, n]");
  /* D of m * n = 2^64 = SIZE_MAX + 1 elements */
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, two32, two32, 64, &q),
                "m = 4294967296, n = 4294967296: d [m, n]");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, INT64_MIN, 64, 64, &q),
                "m = -9223372036854775808 < 0");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, 1, -64, 64, &q), "n = -64");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, 1, 64, INT64_MIN, &q),
                "k = -9223372036854775808");
  EXPECT_REJECT(ingot_nvfp4_gemm_workspace_size(ctx, 0, max64, max64, &q),
                "n = 9223372036854775744, k = 9223372036854775744: b.values");
  /* geglu (m, hidden, k) */
  EXPECT_REJECT(ingot_nvfp4_geglu_workspace_size(ctx, INT64_MAX, 32, 64, &q),
                "m = 9223372036854775807, k = 64: x.values");
  EXPECT_REJECT(ingot_nvfp4_geglu_workspace_size(ctx, 1, INT64_MAX / 32 * 32, 64, &q),
                "hidden = 9223372036854775776: w_gate_up's 2 * hidden rows overflow");
  EXPECT_REJECT(ingot_nvfp4_geglu_workspace_size(ctx, 1, big, big, &q),
                "2 * hidden = 144115188075855872, k = 72057594037927936: w_gate_up.values");
  EXPECT_REJECT(ingot_nvfp4_geglu_workspace_size(ctx, big, big, 64, &q),
                "m = 72057594037927936, hidden = 72057594037927936: h.values");
  /* h values of m * hidden / 2 = 2^64 = SIZE_MAX + 1 bytes */
  EXPECT_REJECT(ingot_nvfp4_geglu_workspace_size(ctx, 2 * two32, two32, 64, &q),
                "m = 8589934592, hidden = 4294967296: h.values");
  EXPECT_REJECT(ingot_nvfp4_geglu_workspace_size(ctx, -1, 32, 64, &q), "m = -1 < 0");
  EXPECT_REJECT(ingot_nvfp4_geglu_workspace_size(ctx, 1, -32, 64, &q), "hidden = -32");
  EXPECT_REJECT(ingot_nvfp4_geglu_workspace_size(ctx, 1, 32, INT64_MIN, &q),
                "k = -9223372036854775808");
  /* mlp (m, k, hidden, n) */
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, INT64_MAX, 64, 64, 64, &q),
                "m = 9223372036854775807, k = 64: x.values");
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, 1, 64, big, big, &q),
                "n = 72057594037927936, hidden = 72057594037927936: w_down.values");
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, 1, 64, max64, 64, &q),
                "hidden = 9223372036854775744: w_gate_up's 2 * hidden rows");
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, big, 64, 64, 64, &q),
                "m = 72057594037927936, n = 64: out [m, n]");
  /* out of m * n = 2^64 = SIZE_MAX + 1 elements */
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, two32, 64, 64, two32, &q),
                "m = 4294967296, n = 4294967296: out [m, n]");
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, INT64_MIN, 64, 64, 64, &q),
                "m = -9223372036854775808 < 0");
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, 1, -64, 64, 64, &q), "k = -64");
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, 1, 64, -64, 64, &q), "hidden = -64");
  EXPECT_REJECT(ingot_nvfp4_mlp_workspace_size(ctx, 1, 64, 64, INT64_MIN, &q),
                "n = -9223372036854775808");
  EXPECT(q == 12345, "size query wrote on error: %zu", q);
  /* large shapes whose byte counts fit are answered */
  EXPECT_OK(ctx, ingot_nvfp4_gemm_workspace_size(ctx, INT64_C(1) << 55, 64, 64, &q));
  EXPECT(q > 0 && q != 12345, "gemm workspace %zu", q);
  EXPECT_OK(ctx, ingot_nvfp4_geglu_workspace_size(ctx, two32, 32, 64, &q));
  EXPECT_OK(ctx, ingot_nvfp4_mlp_workspace_size(ctx, two32, 64, 64, 64, &q));
  EXPECT(q > (size_t)two32 * 32, "mlp workspace %zu holds no h", q);

  /* the ops: operands whose byte spans overflow fail their descriptor checks */
  nvm a, b;
  nvm_init(&a, 4, 64, 0);
  nvm_init(&b, 64, 64, 0);
  nvm_bind(&a);
  nvm_bind(&b);
  float d[4 * 64];
  memset(d, 0x33, sizeof d);
  ingot_tensor t = ingot_tensor_2d(a.values, INGOT_DTYPE_U8, INT64_C(1) << 62, 32, 32);
  ingot_nvfp4_matrix mm = a.mat;
  mm.values = &t;
  ingot_tensor td = ingot_tensor_2d(d, INGOT_DTYPE_F32, 4, 64, 64);
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &mm, &b.mat, &td, NULL, 0, NULL),
                "a.values: shape x stride overflows int64 (shape[0] = 4611686018427387904");
  t = ingot_tensor_2d(d, INGOT_DTYPE_F32, big, 64, 64); /* 2^62 elements, 2^64 bytes */
  EXPECT_REJECT(ingot_nvfp4_gemm(ctx, &a.mat, &b.mat, &t, NULL, 0, NULL),
                "d: 4611686018427387904 elements of f32 overflow int64 bytes");
  for (int i = 0; i < 4 * 64; i++) EXPECT(f_bits(d[i]) == 0x33333333u, "d written");
  nvm_free(&a);
  nvm_free(&b);
  return 0;
}

int main(void) {
  test_init("test_nvfp4_gemm");
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &ctx) != INGOT_OK) {
    printf("cannot create a CPU context: %s\n", ingot_last_error(NULL));
    return 1;
  }
  test_run("gemm_random_vs_oracle", test_gemm_random);
  test_run("gemm_long_k", test_gemm_long_k);
  test_run("gemm_exact_and_rounding", test_gemm_exact);
  test_run("geglu_random_vs_oracle", test_geglu_random);
  test_run("mlp_is_geglu_then_gemm", test_mlp);
  test_run("nan_rules", test_nan_rules);
  test_run("empty_batch", test_empty_batch);
  test_run("invalid_arguments", test_invalid);
  test_run("size_overflow", test_size_overflow);
  ingot_context_destroy(ctx);
  return test_finish();
}
