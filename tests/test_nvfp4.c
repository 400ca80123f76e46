/*
 * NVFP4 on the CPU backend: the format rules of include/ingot/ingot.h
 * checked against an independent formulation written here (nearest-value
 * search over the 8 E2M1 magnitudes and the 127 finite non-negative E4M3
 * codes, ties to the even code, in double precision), on fresh random
 * inputs every run, plus the hard cases: every E2M1 tie, saturation, zero
 * blocks, E4M3 subnormal scales, padding, nibble order, NaN / Inf and the
 * counter, round-trip error bound, swizzle round trip, gate/up interleave,
 * and invalid arguments (named error, nothing written).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/nvfp4_ref.h" /* only for the fast-encoder identity test */
#include "test_util.h"

static ingot_context_t ctx;

/* ---- independent formulation --------------------------------------------------- */

static const double kE2m1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

static float bits_to_f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint32_t f_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Value of a non-negative, non-NaN E4M3 code. */
static double e4m3_value(int code) {
  int e = (code >> 3) & 15, m = code & 7;
  if (e == 0) return ldexp((double)m, -9);
  return ldexp(1.0 + m / 8.0, e - 7);
}

/* Nearest finite non-negative E4M3 code to p >= 0 (or +Inf), ties to the even
 * code, saturating at 448. */
static int e4m3_nearest(float p) {
  if (isinf(p) || p >= 448.0f) return 0x7e;
  int best = 0;
  double best_d = (double)INFINITY;
  for (int c = 0; c <= 0x7e; c++) {
    double d = fabs(e4m3_value(c) - (double)p);
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  return best;
}

/* E2M1 code of y: nearest magnitude, ties to the even index, saturate at 6,
 * sign kept; NaN -> 0. */
static int e2m1_nearest(float y) {
  if (isnan(y)) return 0;
  int sign = signbit(y) ? 8 : 0;
  double a = fabs((double)y);
  if (a >= 6.0) return sign | 7;
  int best = 0;
  double best_d = (double)INFINITY;
  for (int i = 0; i < 8; i++) {
    double d = fabs(kE2m1[i] - a);
    if (d < best_d || (d == best_d && (i & 1) == 0)) best = i, best_d = d;
  }
  return sign | best;
}

static int gs_usable(float gs) { return gs > 0.0f && gs <= FLT_MAX; }

/* One block by the stated rule; returns the number of non-finite inputs. */
static int indep_block(const float x[16], float gs, uint8_t *sf_out, uint8_t codes[8]) {
  float amax = 0.0f;
  int nonfinite = 0;
  for (int i = 0; i < 16; i++) {
    if (!isfinite(x[i])) {
      nonfinite++;
      continue;
    }
    if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
  }
  int sf = 0;
  if (gs_usable(gs)) {
    float t = amax / 6.0f;
    float p = gs * t;
    sf = e4m3_nearest(p);
  }
  *sf_out = (uint8_t)sf;
  memset(codes, 0, 8);
  if (sf == 0) return nonfinite;
  float r = gs / (float)e4m3_value(sf);
  for (int i = 0; i < 16; i++) {
    float y = x[i] * r;
    codes[i / 2] |= (uint8_t)(e2m1_nearest(y) << (4 * (i % 2)));
  }
  return nonfinite;
}

/* The documented swizzle formula, written out again. */
static int64_t spec_offset(int64_t m, int64_t k, int64_t cols) {
  int64_t kt = ((cols / 16) + 3) / 4;
  return (m / 128) * (kt * 512) + (k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + (k % 4);
}

static double f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return m ? (double)NAN : s * (double)INFINITY;
  if (e == 0) return s * ldexp(m, -24);
  return s * ldexp(1024 + m, e - 25);
}

/* fp32 -> bf16 by nearest-even search between the two truncations. */
static uint16_t bf16_nearest(float f) {
  if (isnan(f)) return 0x7fc0;
  uint32_t u = f_to_bits(f);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  if ((u & 0xffff) == 0) return lo;
  double dl = fabs((double)bits_to_f((uint32_t)lo << 16) - (double)f);
  double dh = fabs((double)bits_to_f((uint32_t)hi << 16) - (double)f);
  if ((lo & 0x7f80) == 0x7f00 && (hi & 0x7f80) == 0x7f80) /* rounding past FLT_MAX */
    dh = ldexp(1.0, 128) - fabs((double)f);
  if (dl < dh || (dl == dh && (lo & 1) == 0)) return lo;
  return hi;
}

/* ---- data ------------------------------------------------------------------------ */

/* A random value: mostly ~N(0,1)-like times a per-call scale, sometimes an
 * exact grid value, zero, or a tiny/huge magnitude. */
static float rand_value(float scale) {
  uint64_t r = test_rand() % 100;
  float sign = (test_rand() & 1) ? -1.0f : 1.0f;
  if (r < 5) return 0.0f * sign;
  if (r < 15) return sign * (float)kE2m1[test_rand() % 8] * scale;
  if (r < 20) return sign * (float)kE2m1[test_rand() % 8] * scale * 1.0000001f;
  double u = test_rand_unit() * 2.0 - 1.0;
  double v = test_rand_unit() * 2.0 - 1.0;
  return (float)((u + v + u * v * v) * (double)scale);
}

static uint16_t f32_to_bf16_trunc_rne(float f) { return bf16_nearest(f); }

/* f16 bits near value v (nearest by search over the neighbourhood). */
static uint16_t f16_from(float v) {
  if (isnan(v)) return 0x7e00;
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  double a = fabs((double)v);
  if (a >= 65520.0) return sign | 0x7c00;
  /* binary search over the ordered magnitudes 0..0x7bff */
  int lo = 0, hi = 0x7bff;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (f16_value((uint16_t)mid) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  int best = lo;
  if (lo < 0x7bff && f16_value((uint16_t)(lo + 1)) - a < a - f16_value((uint16_t)lo)) best = lo + 1;
  return sign | (uint16_t)best;
}

typedef struct matrix {
  ingot_dtype dtype;
  int64_t rows, cols, stride;
  void *data;
  float *f; /* exact values, [rows, cols] */
} matrix;

static void matrix_alloc(matrix *m, ingot_dtype dtype, int64_t rows, int64_t cols,
                         int64_t stride) {
  m->dtype = dtype;
  m->rows = rows;
  m->cols = cols;
  m->stride = stride;
  size_t n = (size_t)(rows > 0 ? (rows - 1) * stride + cols : 0) + 1;
  m->data = calloc(n, ingot_dtype_size(dtype));
  m->f = calloc((size_t)(rows * cols) + 1, sizeof(float));
}

static void matrix_free(matrix *m) {
  free(m->data);
  free(m->f);
}

/* Stores v at (r, c); keeps the exactly representable value in m->f. */
static void matrix_set(matrix *m, int64_t r, int64_t c, float v) {
  size_t at = (size_t)(r * m->stride + c);
  float exact;
  if (m->dtype == INGOT_DTYPE_F32) {
    ((float *)m->data)[at] = v;
    exact = v;
  } else if (m->dtype == INGOT_DTYPE_BF16) {
    uint16_t h = f32_to_bf16_trunc_rne(v);
    ((uint16_t *)m->data)[at] = h;
    exact = bits_to_f((uint32_t)h << 16);
  } else {
    uint16_t h = f16_from(v);
    ((uint16_t *)m->data)[at] = h;
    exact = (float)f16_value(h);
  }
  m->f[r * m->cols + c] = exact;
}

static void matrix_fill_random(matrix *m) {
  for (int64_t r = 0; r < m->rows; r++)
    for (int64_t c = 0; c < m->cols; c += 16) {
      /* per-block magnitude, wide for f32, narrower for the 16-bit types */
      int span = m->dtype == INGOT_DTYPE_F32 ? 60 : m->dtype == INGOT_DTYPE_BF16 ? 40 : 10;
      float scale = ldexpf(1.0f, (int)test_rand_range(-span, span));
      for (int i = 0; i < 16 && c + i < m->cols; i++) matrix_set(m, r, c + i, rand_value(scale));
    }
}

static ingot_tensor matrix_tensor(const matrix *m) {
  return ingot_tensor_2d(m->data, m->dtype, m->rows, m->cols, m->stride);
}

/* Expected packed output of m with gs, by the independent formulation. */
typedef struct packed {
  int64_t rows, cols, vstride, srows, scols;
  uint8_t *values, *scales;
} packed;

static void packed_alloc(packed *p, int64_t rows, int64_t cols, int64_t vstride, uint8_t fill) {
  p->rows = rows;
  p->cols = cols;
  p->vstride = vstride;
  p->srows = (rows + 127) / 128 * 128;
  p->scols = (cols / 16 + 3) / 4 * 4;
  size_t vbytes = (size_t)(rows * vstride) + 1, sbytes = (size_t)(p->srows * p->scols) + 1;
  p->values = malloc(vbytes);
  p->scales = malloc(sbytes);
  memset(p->values, fill, vbytes);
  memset(p->scales, fill, sbytes);
}

static void packed_free(packed *p) {
  free(p->values);
  free(p->scales);
}

static int indep_quantize(const float *f, int64_t rows, int64_t cols, float gs, packed *p) {
  int nonfinite = 0;
  memset(p->scales, 0, (size_t)(p->srows * p->scols));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < cols / 16; k++) {
      uint8_t sf;
      nonfinite += indep_block(f + r * cols + k * 16, gs, &sf, p->values + r * p->vstride + k * 8);
      p->scales[spec_offset(r, k, cols)] = sf;
    }
  return nonfinite;
}

static int compare_packed(const packed *got, const packed *want, const char *what) {
  int bad = 0;
  for (int64_t r = 0; r < got->rows; r++)
    for (int64_t b = 0; b < got->cols / 2; b++) {
      uint8_t g = got->values[r * got->vstride + b], w = want->values[r * want->vstride + b];
      if (g != w && bad++ < 5)
        test_fail_at(__FILE__, __LINE__, "%s: values[%lld][%lld] = 0x%02x, expected 0x%02x", what,
                     (long long)r, (long long)b, g, w);
    }
  for (int64_t i = 0; i < got->srows * got->scols; i++)
    if (got->scales[i] != want->scales[i] && bad++ < 10)
      test_fail_at(__FILE__, __LINE__, "%s: scales[%lld] = 0x%02x, expected 0x%02x", what,
                   (long long)i, got->scales[i], want->scales[i]);
  return bad;
}

static ingot_tensor packed_values(const packed *p) {
  return ingot_tensor_2d(p->values, INGOT_DTYPE_U8, p->rows, p->cols / 2, p->vstride);
}
static ingot_tensor packed_scales(const packed *p) {
  return ingot_tensor_2d(p->scales, INGOT_DTYPE_U8, p->srows, p->scols, p->scols);
}

/* Quantizes one block given as 16 floats (f32 input) on the CPU backend. */
static void quantize_block(const float x[16], float gs, uint8_t *sf, uint8_t codes[8],
                           uint32_t *count) {
  float xs[16];
  memcpy(xs, x, sizeof xs);
  uint8_t scales[128 * 4];
  ingot_tensor tx = ingot_tensor_2d(xs, INGOT_DTYPE_F32, 1, 16, 16);
  ingot_tensor tg = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);
  ingot_tensor tv = ingot_tensor_2d(codes, INGOT_DTYPE_U8, 1, 8, 8);
  ingot_tensor ts = ingot_tensor_1d(scales, INGOT_DTYPE_U8, 512);
  ingot_tensor tc = ingot_tensor_1d(count, INGOT_DTYPE_U32, 1);
  EXPECT_OK(ctx, ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &ts, count ? &tc : NULL, NULL));
  *sf = scales[0];
}

/* ---- tests ------------------------------------------------------------------------ */

static int test_e2m1_ties(void) {
  /* The rounding rule itself, then through the op with r == 1 exactly
   * (amax = 6, gs = 448 -> sf = 448 -> r = 448 / 448). */
  static const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f,
                             0.5f,  1.0f,  1.5f,  2.0f,  3.0f, 4.0f, 0.0f, 0.24f};
  static const int idx[] = {0, 2, 2, 4, 4, 6, 6, 7, 1, 2, 3, 4, 5, 6, 0, 0};
  for (int s = 0; s < 2; s++) {
    float x[16];
    for (int i = 0; i < 16; i++) x[i] = s ? -in[i] : in[i];
    for (int i = 0; i < 16; i++) {
      int want = (s ? 8 : 0) | idx[i];
      EXPECT(ingot_f32_to_e2m1(x[i]) == want, "e2m1(%g) = %d, expected %d", (double)x[i],
             ingot_f32_to_e2m1(x[i]), want);
      EXPECT(e2m1_nearest(x[i]) == want, "independent e2m1(%g) = %d, expected %d", (double)x[i],
             e2m1_nearest(x[i]), want);
    }
    uint8_t sf, codes[8];
    quantize_block(x, 448.0f, &sf, codes, NULL);
    EXPECT(sf == 0x7e, "sf = 0x%02x, expected 0x7e (448)", sf);
    for (int i = 0; i < 16; i++) {
      int got = (codes[i / 2] >> (4 * (i % 2))) & 15, want = (s ? 8 : 0) | idx[i];
      EXPECT(got == want, "x = %g: code %d, expected %d", (double)x[i], got, want);
    }
  }
  /* just off the ties */
  EXPECT(ingot_f32_to_e2m1(nextafterf(0.25f, 1)) == 1, "0.25+ulp -> 0.5");
  EXPECT(ingot_f32_to_e2m1(nextafterf(0.75f, 0)) == 1, "0.75-ulp -> 0.5");
  EXPECT(ingot_f32_to_e2m1(nextafterf(1.25f, 2)) == 3, "1.25+ulp -> 1.5");
  EXPECT(ingot_f32_to_e2m1(nextafterf(5.0f, 6)) == 7, "5+ulp -> 6");
  EXPECT(ingot_f32_to_e2m1(-0.0f) == 8, "-0 -> code 8");
  EXPECT(ingot_f32_to_e2m1(-0.1f) == 8, "-0.1 -> code 8");
  return 0;
}

static int test_encoders_exhaustive(void) {
  /* The kernels' branch-free E2M1 encoder against the reference encoder,
   * over every float in [0, 8] whose low mantissa bits are tie-relevant
   * patterns, plus random patterns, plus the infinities. */
  static const uint32_t lows[] = {0, 1, 2, 0x7ff, 0x800, 0x801, 0xffe, 0xfff};
  long bad = 0;
  for (uint32_t hi = 0; hi <= (0x41000000u >> 12); hi++)
    for (size_t j = 0; j < sizeof lows / sizeof lows[0] + 2; j++) {
      uint32_t low = j < 8 ? lows[j] : (uint32_t)(test_rand() & 0xfff);
      float a = bits_to_f((hi << 12) | low);
      uint32_t fast = ingot_e2m1_index_minmagic(a), ref = ingot_f32_to_e2m1(a) & 7u;
      if (fast != ref && bad++ < 5)
        test_fail_at(__FILE__, __LINE__, "minmagic(%a) = %u, reference %u", (double)a, fast, ref);
    }
  EXPECT(ingot_e2m1_index_minmagic(INFINITY) == 7, "minmagic(inf) != 7");
  EXPECT(ingot_e2m1_index_minmagic(1e30f) == 7, "minmagic(1e30) != 7");
  EXPECT(ingot_e2m1_index_minmagic(FLT_MAX) == 7, "minmagic(FLT_MAX) != 7");
  /* E4M3 encoder vs nearest search: all boundaries +- 1 ulp, and random. */
  for (int c = 0; c <= 0x7e; c++) {
    double v = e4m3_value(c), next = c < 0x7e ? e4m3_value(c + 1) : 464.0;
    float mids[] = {(float)v, (float)((v + next) / 2)};
    for (int k = 0; k < 2; k++)
      for (int d = -2; d <= 2; d++) {
        float p = mids[k];
        for (int s = 0; s < abs(d); s++) p = nextafterf(p, d < 0 ? 0.0f : INFINITY);
        int got = ingot_f32_to_e4m3_sat(p), want = e4m3_nearest(p);
        if (got != want && bad++ < 10)
          test_fail_at(__FILE__, __LINE__, "e4m3(%a) = 0x%02x, expected 0x%02x", (double)p, got,
                       want);
      }
  }
  for (int i = 0; i < 200000; i++) {
    float p = bits_to_f((uint32_t)test_rand_range(0, 0x44000000));
    int got = ingot_f32_to_e4m3_sat(p), want = e4m3_nearest(p);
    if (got != want && bad++ < 10)
      test_fail_at(__FILE__, __LINE__, "e4m3(%a) = 0x%02x, expected 0x%02x", (double)p, got,
                   want);
  }
  EXPECT(ingot_f32_to_e4m3_sat(INFINITY) == 0x7e, "e4m3(inf) != 448");
  EXPECT(ingot_f32_to_e4m3_sat(1e30f) == 0x7e, "e4m3(1e30) != 448");
  EXPECT(ingot_f32_to_e4m3_sat(-1e30f) == 0xfe, "e4m3(-1e30) != -448");
  EXPECT((ingot_f32_to_e4m3_sat(NAN) & 0x7f) == 0x7f, "e4m3(nan) not NaN");
  /* decoders are exact */
  for (int c = 0; c < 256; c++) {
    double want = (c & 0x7f) == 0x7f ? (double)NAN : ((c & 0x80) ? -1 : 1) * e4m3_value(c & 0x7f);
    float got = ingot_e4m3_to_f32((uint8_t)c);
    EXPECT((isnan(want) && isnan(got)) || (double)got == want, "e4m3 decode 0x%02x", c);
  }
  for (int c = 0; c < 16; c++) {
    float got = ingot_e2m1_to_f32((uint8_t)c);
    EXPECT(fabs((double)got) == kE2m1[c & 7] && (signbit(got) != 0) == ((c & 8) != 0),
           "e2m1 decode %d = %g", c, (double)got);
  }
  for (int h = 0; h < 65536; h++) {
    float got = ingot_f16_to_f32((uint16_t)h);
    double want = f16_value((uint16_t)h);
    EXPECT((isnan(want) && isnan(got)) || ((double)got == want && !signbit(got) == !signbit(want)),
           "f16 decode 0x%04x", h);
  }
  return 0;
}

/* The kernels' block encoder (min-magic nibbles + sign bytes gathered with
 * byte permutes) against the reference block rule, on random blocks. */
static int test_kernel_block_encoder(void) {
  long bad = 0;
  for (int iter = 0; iter < 20000; iter++) {
    int f32 = iter & 1;
    uint32_t w[16];
    float v[16];
    float scale = ldexpf(1.0f, (int)test_rand_range(-30, 30));
    for (int i = 0; i < 16; i++) {
      float x = rand_value(scale);
      if (f32) {
        w[i] = f_to_bits(x);
        v[i] = x;
      } else {
        uint16_t h = ingot_f32_to_bf16(x);
        v[i] = bits_to_f((uint32_t)h << 16);
        if (i % 2) w[i / 2] |= (uint32_t)h << 16;
        else w[i / 2] = h;
      }
    }
    float gs = iter % 7 == 0 ? 1e30f : (float)(test_rand_unit() * 4000.0);
    uint8_t sf, codes[8];
    ingot_nvfp4_ref_block(v, gs, &sf, codes);
    if (sf == 0) continue;
    float r = gs / ingot_e4m3_to_f32(sf), amax = 0.0f;
    if (!isfinite(r)) continue;
    for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(v[i]));
    int clamp = !(amax * r < 7.0f);
    uint32_t lo = ingot_e2m1_pack8_minmagic(v, r, clamp);
    uint32_t hi = ingot_e2m1_pack8_minmagic(v + 8, r, clamp);
    if (f32) {
      lo |= ingot_e2m1_signs32(w);
      hi |= ingot_e2m1_signs32(w + 8);
    } else {
      lo |= ingot_e2m1_signs16(w[0], w[1], w[2], w[3]);
      hi |= ingot_e2m1_signs16(w[4], w[5], w[6], w[7]);
    }
    uint32_t want_lo = (uint32_t)codes[0] | (uint32_t)codes[1] << 8 | (uint32_t)codes[2] << 16 |
                       (uint32_t)codes[3] << 24;
    uint32_t want_hi = (uint32_t)codes[4] | (uint32_t)codes[5] << 8 | (uint32_t)codes[6] << 16 |
                       (uint32_t)codes[7] << 24;
    if ((lo != want_lo || hi != want_hi) && bad++ < 5)
      test_fail_at(__FILE__, __LINE__, "%s block (clamp %d): 0x%08x%08x, reference 0x%08x%08x",
                   f32 ? "f32" : "bf16", clamp, hi, lo, want_hi, want_lo);
  }
  /* byte permute semantics */
  EXPECT(ingot_byte_perm(0x03020100u, 0x07060504u, 0x7531) == 0x07050301u, "byte_perm");
  EXPECT(ingot_byte_perm(0x03020100u, 0x07060504u, 0xf8f9) == 0x07000701u, "byte_perm & 7");
  return 0;
}

static int test_saturation_and_zero(void) {
  float x[16];
  uint8_t sf, codes[8];
  /* E4M3 saturation: gs * amax / 6 far above 448 -> sf 448, codes +-6 */
  for (int i = 0; i < 16; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * (float)(i + 1);
  quantize_block(x, 1e6f, &sf, codes, NULL);
  EXPECT(sf == 0x7e, "saturated sf = 0x%02x", sf);
  for (int i = 0; i < 8; i++) EXPECT(codes[i] == 0xf7, "saturated codes[%d] = 0x%02x", i, codes[i]);
  /* E2M1 saturation inside a normal block: sf rounds down, |y| > 6 */
  for (int i = 0; i < 16; i++) x[i] = 0.0f;
  x[0] = 6.9f; /* p = 6.9 * 448/6 / ... pick gs = 1: p = 1.15 -> sf 1.125 -> y = 6.13 */
  quantize_block(x, 1.0f, &sf, codes, NULL);
  EXPECT(sf == ingot_f32_to_e4m3_sat(6.9f / 6.0f), "sf");
  EXPECT((codes[0] & 15) == 7, "6.13 saturates to code 7, got %d", codes[0] & 15);
  /* zero blocks (+0 and -0) */
  for (int i = 0; i < 16; i++) x[i] = i % 2 ? -0.0f : 0.0f;
  quantize_block(x, 448.0f, &sf, codes, NULL);
  EXPECT(sf == 0, "zero block sf = 0x%02x", sf);
  for (int i = 0; i < 8; i++) EXPECT(codes[i] == 0, "zero block codes[%d] = 0x%02x", i, codes[i]);
  /* tiny scales: E4M3 subnormals 2^-9 .. 7 * 2^-9, and underflow to 0 */
  for (int m = 1; m <= 7; m++) {
    for (int i = 0; i < 16; i++) x[i] = (float)(i - 8) * 0.05f;
    x[3] = ldexpf((float)m * 6.0f, -9); /* amax: p = m * 2^-9 exactly with gs = 1 */
    for (int i = 0; i < 16; i++)
      if (i != 3) x[i] = x[i] * x[3] * 0.1f;
    uint8_t want_sf, want_codes[8];
    indep_block(x, 1.0f, &want_sf, want_codes);
    quantize_block(x, 1.0f, &sf, codes, NULL);
    EXPECT(sf == m && want_sf == m, "subnormal sf = 0x%02x (independent 0x%02x), expected %d", sf,
           want_sf, m);
    EXPECT(memcmp(codes, want_codes, 8) == 0, "subnormal block codes differ (m = %d)", m);
  }
  for (int i = 0; i < 16; i++) x[i] = ldexpf(1.0f, -14) * (float)(i + 1); /* p < 2^-10 */
  quantize_block(x, 1.0f / 64.0f, &sf, codes, NULL);
  EXPECT(sf == 0, "underflowing sf = 0x%02x", sf);
  for (int i = 0; i < 8; i++) EXPECT(codes[i] == 0, "underflow codes[%d] = 0x%02x", i, codes[i]);
  /* unusable global scales: 0, negative, NaN, Inf -> sf 0, codes 0 */
  const float bad_gs[] = {0.0f, -1.0f, NAN, INFINITY, -0.0f};
  for (int i = 0; i < 16; i++) x[i] = (float)i;
  for (size_t g = 0; g < sizeof bad_gs / sizeof bad_gs[0]; g++) {
    quantize_block(x, bad_gs[g], &sf, codes, NULL);
    EXPECT(sf == 0, "gs %g: sf = 0x%02x", (double)bad_gs[g], sf);
    for (int i = 0; i < 8; i++) EXPECT(codes[i] == 0, "gs %g: codes[%d]", (double)bad_gs[g], i);
  }
  return 0;
}

static int test_nibble_order(void) {
  float x[16] = {0};
  x[0] = 6.0f;  /* element 0 -> low nibble of byte 0 */
  x[1] = -0.5f; /* element 1 -> high nibble of byte 0 */
  x[14] = 1.0f;
  x[15] = -3.0f;
  uint8_t sf, codes[8];
  quantize_block(x, 448.0f, &sf, codes, NULL); /* r == 1 */
  EXPECT(codes[0] == 0x97, "byte 0 = 0x%02x, expected 0x97 (hi -0.5 = 9, lo 6 = 7)", codes[0]);
  EXPECT(codes[7] == 0xd2, "byte 7 = 0x%02x, expected 0xd2 (hi -3 = 0xd, lo 1 = 2)", codes[7]);
  for (int i = 1; i < 7; i++) EXPECT(codes[i] == 0, "byte %d = 0x%02x", i, codes[i]);
  return 0;
}

static int test_nonfinite(void) {
  float x[16];
  uint8_t sf, codes[8];
  uint32_t count = 5;
  for (int i = 0; i < 16; i++) x[i] = (float)(i - 8) * 0.25f; /* amax 2 */
  x[1] = NAN;
  x[2] = INFINITY;
  x[3] = -INFINITY;
  x[4] = -NAN;
  quantize_block(x, 448.0f, &sf, codes, &count);
  EXPECT(count == 9, "counter = %u, expected 5 + 4", count);
  /* amax ignores them: 448 * (2 / 6) -> sf = e4m3(149.33) = 144 */
  EXPECT(sf == ingot_f32_to_e4m3_sat(448.0f * (2.0f / 6.0f)), "sf = 0x%02x", sf);
  int c1 = codes[0] >> 4, c2 = codes[1] & 15, c3 = codes[1] >> 4, c4 = codes[2] & 15;
  EXPECT(c1 == 0 && c4 == 0, "NaN codes %d %d, expected 0", c1, c4);
  EXPECT(c2 == 7 && c3 == 15, "Inf codes %d %d, expected 7 and 15", c2, c3);
  uint8_t want_sf, want_codes[8];
  EXPECT(indep_block(x, 448.0f, &want_sf, want_codes) == 4, "independent count");
  EXPECT(sf == want_sf && memcmp(codes, want_codes, 8) == 0, "block differs from independent");
  /* all non-finite -> amax 0 -> sf 0 -> all codes 0 (Inf included) */
  for (int i = 0; i < 16; i++) x[i] = i % 2 ? INFINITY : NAN;
  count = 0;
  quantize_block(x, 448.0f, &sf, codes, &count);
  EXPECT(count == 16 && sf == 0, "all non-finite: count %u sf 0x%02x", count, sf);
  for (int i = 0; i < 8; i++) EXPECT(codes[i] == 0, "all non-finite codes[%d]", i);
  /* NULL counter is allowed */
  quantize_block(x, 448.0f, &sf, codes, NULL);
  return 0;
}

/* Random matrices of every dtype and odd shapes vs the independent
 * formulation (values, scales, padding, untouched bytes around values). */
static int test_random_vs_independent(void) {
  static const ingot_dtype dtypes[] = {INGOT_DTYPE_BF16, INGOT_DTYPE_F16, INGOT_DTYPE_F32};
  static const int64_t shapes[][2] = {{1, 16}, {3, 48}, {130, 80}, {128, 64}, {200, 16 * 9},
                                      {257, 32}};
  for (size_t d = 0; d < 3; d++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1];
      int64_t stride = cols + (int64_t)test_rand_range(0, 3) * 8;
      matrix m;
      matrix_alloc(&m, dtypes[d], rows, cols, stride);
      matrix_fill_random(&m);
      /* sprinkle non-finite values */
      for (int i = 0; i < 3; i++) {
        int64_t r = test_rand_range(0, rows - 1), c = test_rand_range(0, cols - 1);
        matrix_set(&m, r, c, (test_rand() & 1) ? NAN : -INFINITY);
      }
      float gs = (float)(test_rand_unit() * 1000.0 + 0.001);
      packed got, want;
      int64_t vstride = cols / 2 + test_rand_range(0, 5);
      packed_alloc(&got, rows, cols, vstride, 0xa5);
      packed_alloc(&want, rows, cols, vstride, 0xa5);
      int want_count = indep_quantize(m.f, rows, cols, gs, &want);
      ingot_tensor tx = matrix_tensor(&m), tv = packed_values(&got), ts = packed_scales(&got);
      ingot_tensor tg = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);
      uint32_t count = 0;
      ingot_tensor tc = ingot_tensor_1d(&count, INGOT_DTYPE_U32, 1);
      EXPECT_OK(ctx, ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &ts, &tc, NULL));
      char what[96];
      snprintf(what, sizeof what, "%s [%lld, %lld] stride %lld", ingot_dtype_name(dtypes[d]),
               (long long)rows, (long long)cols, (long long)stride);
      compare_packed(&got, &want, what);
      EXPECT(count == (uint32_t)want_count, "%s: count %u, expected %d", what, count, want_count);
      /* bytes between value rows untouched */
      for (int64_t r = 0; r < rows; r++)
        for (int64_t b = cols / 2; b < vstride; b++)
          EXPECT(got.values[r * vstride + b] == 0xa5, "%s: row gap byte written", what);
      /* padding scale bytes are 0 */
      for (int64_t r = 0; r < got.srows; r++)
        for (int64_t k = 0; k < got.scols; k++)
          if (r >= rows || k >= cols / 16)
            EXPECT(got.scales[spec_offset(r, k, cols)] == 0, "%s: padding (%lld, %lld) not 0",
                   what, (long long)r, (long long)k);
      packed_free(&got);
      packed_free(&want);
      matrix_free(&m);
    }
  return 0;
}

/* Dequantize vs the independent formula, random bytes (incl. NaN scales). */
static int test_dequantize(void) {
  const int64_t rows = 131, cols = 96;
  const float gss[] = {1.0f, 3.7f, 1e-30f, 1e30f, 448.0f * 6.0f / 0.001f, 0.0f, -2.0f, NAN,
                       INFINITY};
  for (size_t g = 0; g < sizeof gss / sizeof gss[0]; g++) {
    float gs = gss[g];
    packed p;
    packed_alloc(&p, rows, cols, cols / 2 + 3, 0);
    for (int64_t i = 0; i < rows * p.vstride; i++) p.values[i] = (uint8_t)test_rand();
    for (int64_t i = 0; i < p.srows * p.scols; i++) p.scales[i] = (uint8_t)test_rand();
    int64_t ostride = cols + 5;
    float *of = malloc(sizeof(float) * (size_t)(rows * ostride));
    uint16_t *ob = malloc(sizeof(uint16_t) * (size_t)(rows * ostride));
    ingot_tensor tv = packed_values(&p), ts = packed_scales(&p);
    ingot_tensor tg = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);
    ingot_tensor tof = ingot_tensor_2d(of, INGOT_DTYPE_F32, rows, cols, ostride);
    ingot_tensor tob = ingot_tensor_2d(ob, INGOT_DTYPE_BF16, rows, cols, ostride);
    EXPECT_OK(ctx, ingot_nvfp4_dequantize(ctx, &tv, &ts, &tg, &tof, NULL));
    EXPECT_OK(ctx, ingot_nvfp4_dequantize(ctx, &tv, &ts, &tg, &tob, NULL));
    int bad = 0;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) {
        int code = (p.values[r * p.vstride + c / 2] >> (4 * (c % 2))) & 15;
        int sfb = p.scales[spec_offset(r, c / 16, cols)];
        float want;
        if (!gs_usable(gs) || (sfb & 0x7f) == 0x7f) {
          want = bits_to_f(0x7fc00000u);
        } else {
          double v = kE2m1[code & 7] * ((code & 8) ? -1 : 1);
          double sf = e4m3_value(sfb & 0x7f) * ((sfb & 0x80) ? -1 : 1);
          want = (float)(v * sf / (double)gs); /* double rounding is innocuous for / */
        }
        uint32_t gf = f_to_bits(of[r * ostride + c]), wf = f_to_bits(want);
        uint16_t gb = ob[r * ostride + c], wb = bf16_nearest(want);
        if ((gf != wf || gb != wb) && bad++ < 5)
          test_fail_at(__FILE__, __LINE__,
                       "gs %g (%lld,%lld) code %d sf 0x%02x: f32 0x%08x want 0x%08x, bf16 0x%04x "
                       "want 0x%04x",
                       (double)gs, (long long)r, (long long)c, code, sfb, gf, wf, gb, wb);
      }
    free(of);
    free(ob);
    packed_free(&p);
  }
  return 0;
}

/* Round trip within the stated bound, with the device-side style gs. */
static int test_round_trip_bound(void) {
  static const ingot_dtype dtypes[] = {INGOT_DTYPE_BF16, INGOT_DTYPE_F32};
  for (size_t d = 0; d < 2; d++) {
    const int64_t rows = 70, cols = 256;
    matrix m;
    matrix_alloc(&m, dtypes[d], rows, cols, cols);
    for (int64_t r = 0; r < rows; r++) {
      float scale = ldexpf(1.0f, (int)test_rand_range(-6, 6));
      for (int64_t c = 0; c < cols; c++) matrix_set(&m, r, c, rand_value(scale));
    }
    float gs = -1.0f;
    ingot_tensor tx = matrix_tensor(&m), tg = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);
    EXPECT_OK(ctx, ingot_nvfp4_global_scale(ctx, &tx, &tg, NULL));
    packed p;
    packed_alloc(&p, rows, cols, cols / 2, 0);
    ingot_tensor tv = packed_values(&p), ts = packed_scales(&p);
    EXPECT_OK(ctx, ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &ts, NULL, NULL));
    float *out = malloc(sizeof(float) * (size_t)(rows * cols));
    ingot_tensor to = ingot_tensor_2d(out, INGOT_DTYPE_F32, rows, cols, cols);
    EXPECT_OK(ctx, ingot_nvfp4_dequantize(ctx, &tv, &ts, &tg, &to, NULL));
    double worst = 0.0;
    int checked = 0;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t k = 0; k < cols / 16; k++) {
        float amax = 0.0f;
        for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(m.f[r * cols + k * 16 + i]));
        float pv = gs * (amax / 6.0f);
        if (!(pv >= ldexpf(1.0f, -6) && pv <= 448.0f)) continue;
        double sf = e4m3_value(p.scales[spec_offset(r, k, cols)]);
        for (int i = 0; i < 16; i++) {
          double x = (double)m.f[r * cols + k * 16 + i], q = (double)out[r * cols + k * 16 + i];
          double bound = (fabs(x) / 4 + sf / (4.0 * (double)gs)) * (1.0 + ldexp(1.0, -20));
          double err = fabs(q - x);
          if (err / bound > worst) worst = err / bound;
          EXPECT(err <= bound, "x %g -> %g: error %g > bound %g", x, q, err, bound);
          checked++;
        }
      }
    EXPECT(checked > rows * cols / 2, "only %d elements in the bound's range", checked);
    printf("  %s round trip: worst error / bound = %.3f over %d elements\n",
           ingot_dtype_name(dtypes[d]), worst, checked);
    free(out);
    packed_free(&p);
    matrix_free(&m);
  }
  return 0;
}

static int test_global_scale(void) {
  matrix m;
  matrix_alloc(&m, INGOT_DTYPE_F32, 5, 7, 9); /* any cols */
  for (int64_t r = 0; r < 5; r++)
    for (int64_t c = 0; c < 7; c++) matrix_set(&m, r, c, (float)(r * 7 + c) * 0.01f - 0.2f);
  matrix_set(&m, 2, 3, -3.5f);
  matrix_set(&m, 1, 1, NAN);
  matrix_set(&m, 4, 6, INFINITY);
  float gs = 0.0f;
  ingot_tensor tx = matrix_tensor(&m), tg = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);
  EXPECT_OK(ctx, ingot_nvfp4_global_scale(ctx, &tx, &tg, NULL));
  EXPECT(gs == 2688.0f / 3.5f, "gs = %g, expected 2688 / 3.5", (double)gs);
  for (int64_t r = 0; r < 5; r++)
    for (int64_t c = 0; c < 7; c++) matrix_set(&m, r, c, (r + c) % 2 ? -0.0f : NAN);
  EXPECT_OK(ctx, ingot_nvfp4_global_scale(ctx, &tx, &tg, NULL));
  EXPECT(gs == 1.0f, "all zero / NaN: gs = %g, expected 1", (double)gs);
  matrix_set(&m, 0, 0, 1e-40f);
  EXPECT_OK(ctx, ingot_nvfp4_global_scale(ctx, &tx, &tg, NULL));
  EXPECT(gs == FLT_MAX, "tiny amax: gs = %g, expected FLT_MAX", (double)gs);
  ingot_tensor empty = ingot_tensor_2d(NULL, INGOT_DTYPE_BF16, 0, 16, 16);
  gs = 0.0f;
  EXPECT_OK(ctx, ingot_nvfp4_global_scale(ctx, &empty, &tg, NULL));
  EXPECT(gs == 1.0f, "empty: gs = %g", (double)gs);
  matrix_free(&m);
  return 0;
}

static int test_swizzle(void) {
  /* offset formula: public inline == spec == internal, and a bijection */
  static const int64_t shapes[][2] = {{1, 16}, {128, 64}, {129, 80}, {300, 16 * 13}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t rows = shapes[s][0], cols = shapes[s][1], sr, sc;
    EXPECT_OK(NULL, ingot_nvfp4_scale_shape(rows, cols, &sr, &sc));
    EXPECT(sr == (rows + 127) / 128 * 128 && sc == (cols / 16 + 3) / 4 * 4, "scale shape");
    uint8_t *seen = calloc((size_t)(sr * sc), 1);
    for (int64_t m = 0; m < sr; m++)
      for (int64_t k = 0; k < sc; k++) {
        int64_t o = ingot_nvfp4_scale_offset(m, k, cols);
        EXPECT(o == spec_offset(m, k, cols) && o == ingot_nvfp4_swizzle_offset(m, k, sc),
               "offset (%lld, %lld)", (long long)m, (long long)k);
        if (o >= 0 && o < sr * sc) seen[o]++;
      }
    for (int64_t i = 0; i < sr * sc; i++) EXPECT(seen[i] == 1, "offset %lld hit %d times",
                                                 (long long)i, seen[i]);
    free(seen);
    /* linear -> swizzled -> linear, padding 0, one-byte strides */
    int64_t nb = cols / 16, lstride = nb + 3;
    uint8_t *lin = malloc((size_t)(rows * lstride)), *back = malloc((size_t)(rows * lstride));
    uint8_t *sw = malloc((size_t)(sr * sc));
    for (int64_t i = 0; i < rows * lstride; i++) lin[i] = (uint8_t)test_rand(), back[i] = 0xee;
    memset(sw, 0xcc, (size_t)(sr * sc));
    ingot_tensor tl = ingot_tensor_2d(lin, INGOT_DTYPE_F8_E4M3, rows, nb, lstride);
    ingot_tensor tb = ingot_tensor_2d(back, INGOT_DTYPE_U8, rows, nb, lstride);
    ingot_tensor tsw = ingot_tensor_1d(sw, INGOT_DTYPE_U8, sr * sc);
    EXPECT_OK(ctx, ingot_nvfp4_swizzle_scales(ctx, &tl, &tsw, NULL));
    for (int64_t m = 0; m < sr; m++)
      for (int64_t k = 0; k < sc; k++) {
        uint8_t want = m < rows && k < nb ? lin[m * lstride + k] : 0;
        EXPECT(sw[spec_offset(m, k, cols)] == want, "swizzled (%lld, %lld)", (long long)m,
               (long long)k);
      }
    EXPECT_OK(ctx, ingot_nvfp4_unswizzle_scales(ctx, &tsw, &tb, NULL));
    for (int64_t m = 0; m < rows; m++)
      for (int64_t k = 0; k < lstride; k++)
        EXPECT(back[m * lstride + k] == (k < nb ? lin[m * lstride + k] : 0xee),
               "round trip (%lld, %lld)", (long long)m, (long long)k);
    free(lin);
    free(back);
    free(sw);
  }
  return 0;
}

static int test_gate_up(void) {
  const int64_t H = 70, K = 48;
  matrix gate, up, w;
  matrix_alloc(&gate, INGOT_DTYPE_BF16, H, K, K + 8);
  matrix_alloc(&up, INGOT_DTYPE_BF16, H, K, K);
  matrix_alloc(&w, INGOT_DTYPE_BF16, 2 * H, K, K);
  matrix_fill_random(&gate);
  matrix_fill_random(&up);
  matrix_set(&up, 3, 5, NAN);
  for (int64_t j = 0; j < H; j++)
    for (int64_t c = 0; c < K; c++) {
      matrix_set(&w, 2 * j, c, gate.f[j * K + c]);
      matrix_set(&w, 2 * j + 1, c, up.f[j * K + c]);
    }
  float gs_w = 0.0f, gs = 0.0f;
  ingot_tensor tw = matrix_tensor(&w), tgw = ingot_tensor_1d(&gs_w, INGOT_DTYPE_F32, 1);
  EXPECT_OK(ctx, ingot_nvfp4_global_scale(ctx, &tw, &tgw, NULL));
  packed want, got;
  packed_alloc(&want, 2 * H, K, K / 2, 0);
  packed_alloc(&got, 2 * H, K, K / 2, 0x5a);
  ingot_tensor twv = packed_values(&want), tws = packed_scales(&want);
  uint32_t want_count = 0, count = 0;
  ingot_tensor twc = ingot_tensor_1d(&want_count, INGOT_DTYPE_U32, 1);
  EXPECT_OK(ctx, ingot_nvfp4_quantize(ctx, &tw, &tgw, &twv, &tws, &twc, NULL));
  ingot_tensor tg = matrix_tensor(&gate), tu = matrix_tensor(&up);
  ingot_tensor tgs = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);
  ingot_tensor tv = packed_values(&got), ts = packed_scales(&got);
  ingot_tensor tc = ingot_tensor_1d(&count, INGOT_DTYPE_U32, 1);
  EXPECT_OK(ctx, ingot_nvfp4_quantize_gate_up(ctx, &tg, &tu, &tgs,
                                              INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE, &tv, &ts,
                                              &tc, NULL));
  EXPECT(gs == gs_w, "gate/up gs %g, interleaved matrix gs %g", (double)gs, (double)gs_w);
  EXPECT(count == 1 && want_count == 1, "count %u / %u", count, want_count);
  compare_packed(&got, &want, "gate/up (computed gs)");
  /* given gs */
  gs = 7.5f;
  gs_w = 7.5f;
  memset(got.values, 0, (size_t)(2 * H * K / 2));
  EXPECT_OK(ctx, ingot_nvfp4_quantize(ctx, &tw, &tgw, &twv, &tws, NULL, NULL));
  EXPECT_OK(ctx, ingot_nvfp4_quantize_gate_up(ctx, &tg, &tu, &tgs, 0, &tv, &ts, NULL, NULL));
  compare_packed(&got, &want, "gate/up (given gs)");
  EXPECT(gs == 7.5f, "given gs modified");
  packed_free(&want);
  packed_free(&got);
  matrix_free(&gate);
  matrix_free(&up);
  matrix_free(&w);
  return 0;
}

/* ---- invalid arguments ---------------------------------------------------------------- */

#define EXPECT_REJECT(call, needle) EXPECT_ERROR(ctx, call, INGOT_STATUS_INVALID_ARGUMENT, needle)

static int test_invalid(void) {
  enum { R = 5, C = 32 };
  float x[R * C], gs = 1.0f, out[R * C];
  /* values has room past its R x C/2 bytes, so that a tensor laid over it (below) overlaps
   * values alone, whatever the compiler puts next to it */
  uint8_t values[R * C / 2 + 128 * 4], scales[128 * 4], lin[R * 2];
  uint32_t count = 0;
  for (int i = 0; i < R * C; i++) x[i] = (float)i;
  memset(values, 0x11, sizeof values);
  memset(scales, 0x22, sizeof scales);
  memset(out, 0x33, sizeof out);
  memset(lin, 0x44, sizeof lin);
  ingot_tensor tx = ingot_tensor_2d(x, INGOT_DTYPE_F32, R, C, C);
  ingot_tensor tg = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);
  ingot_tensor tv = ingot_tensor_2d(values, INGOT_DTYPE_U8, R, C / 2, C / 2);
  ingot_tensor ts = ingot_tensor_2d(scales, INGOT_DTYPE_U8, 128, 4, 4);
  ingot_tensor to = ingot_tensor_2d(out, INGOT_DTYPE_F32, R, C, C);
  ingot_tensor tl = ingot_tensor_2d(lin, INGOT_DTYPE_U8, R, 2, 2);
  ingot_tensor t;

  /* quantize */
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, NULL, &tg, &tv, &ts, NULL, NULL), "x: NULL");
  t = ingot_tensor_2d(x, INGOT_DTYPE_F32, R, 40, 40);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &t, &tg, &tv, &ts, NULL, NULL), "x: shape[1] = 40");
  t = ingot_tensor_2d(x, INGOT_DTYPE_I32, R, C, C);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &t, &tg, &tv, &ts, NULL, NULL), "x: dtype i32");
  t = ingot_tensor_2d(NULL, INGOT_DTYPE_F32, R, C, C);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &t, &tg, &tv, &ts, NULL, NULL), "x: data is NULL");
  t = ingot_tensor_2d(x, INGOT_DTYPE_F32, INT64_C(1) << 40, C, INT64_C(1) << 40);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &t, &tg, &tv, &ts, NULL, NULL), "x:");
  t = ingot_tensor_1d(&gs, INGOT_DTYPE_F16, 1);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &t, &tv, &ts, NULL, NULL), "global_scale: dtype");
  t = ingot_tensor_1d(x, INGOT_DTYPE_F32, 2);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &t, &tv, &ts, NULL, NULL), "global_scale: shape");
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, NULL, &tv, &ts, NULL, NULL), "global_scale: NULL");
  t = ingot_tensor_2d(values, INGOT_DTYPE_U8, R, C / 2 - 1, C / 2);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &t, &ts, NULL, NULL), "values: shape[1]");
  t = ingot_tensor_2d(values, INGOT_DTYPE_U32, R, C / 2, C / 2);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &t, &ts, NULL, NULL), "values: dtype");
  t = ingot_tensor_1d(scales, INGOT_DTYPE_U8, 511);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &t, NULL, NULL), "scales: shape[0] = 511");
  t = ingot_tensor_2d(scales, INGOT_DTYPE_U8, 64, 8, 8);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &t, NULL, NULL), "scales: shape[0] = 64");
  t = ingot_tensor_2d(scales, INGOT_DTYPE_U8, 128, 4, 3);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &t, NULL, NULL), "scales: stride");
  t = ingot_tensor_2d(scales, INGOT_DTYPE_I32, 128, 4, 4);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &t, NULL, NULL), "scales: dtype");
  t = ingot_tensor_1d(&count, INGOT_DTYPE_I32, 1);
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &ts, &t, NULL), "nonfinite_count: dtype");
  t = ingot_tensor_2d(x, INGOT_DTYPE_U8, R, C / 2, C / 2); /* values over x */
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &t, &ts, NULL, NULL), "values: overlaps x");
  t = ingot_tensor_1d(values + 4, INGOT_DTYPE_U8, 512); /* scales over values */
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &t, NULL, NULL),
                "scales: overlaps values");
  t = ingot_tensor_1d(scales + 8, INGOT_DTYPE_U32, 1); /* counter over scales */
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &ts, &t, NULL),
                "nonfinite_count: overlaps scales");
  t = ingot_tensor_1d(values, INGOT_DTYPE_F32, 1); /* gs inside values */
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &t, &tv, &ts, NULL, NULL),
                "values: overlaps global_scale");
  EXPECT_REJECT(ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &ts, NULL, (struct CUstream_st *)&t),
                "stream");
  EXPECT(ingot_nvfp4_quantize(NULL, &tx, &tg, &tv, &ts, NULL, NULL) ==
             INGOT_STATUS_INVALID_ARGUMENT,
         "NULL ctx");
  EXPECT(strstr(ingot_last_error(NULL), "ctx") != NULL, "NULL ctx text");

  /* dequantize */
  t = ingot_tensor_2d(out, INGOT_DTYPE_F32, R, 24, 24);
  EXPECT_REJECT(ingot_nvfp4_dequantize(ctx, &tv, &ts, &tg, &t, NULL), "out: shape[1] = 24");
  t = ingot_tensor_2d(out, INGOT_DTYPE_F16, R, C, C);
  EXPECT_REJECT(ingot_nvfp4_dequantize(ctx, &tv, &ts, &tg, &t, NULL), "out: dtype f16");
  t = ingot_tensor_2d(values, INGOT_DTYPE_U8, R + 1, C / 2, C / 2);
  EXPECT_REJECT(ingot_nvfp4_dequantize(ctx, &t, &ts, &tg, &to, NULL), "values: shape[0]");
  t = ingot_tensor_1d(scales, INGOT_DTYPE_U8, 256);
  EXPECT_REJECT(ingot_nvfp4_dequantize(ctx, &tv, &t, &tg, &to, NULL), "scales: shape[0] = 256");
  t = ingot_tensor_2d(values, INGOT_DTYPE_F32, R, C / 8, C / 8); /* out over values */
  EXPECT_REJECT(ingot_nvfp4_dequantize(ctx, &tv, &ts, &tg, &t, NULL), "out: shape[1]");
  {
    float big[256]; /* out [1, 16] f32 inside the scale buffer */
    memset(big, 0x77, sizeof big);
    ingot_tensor v1 = ingot_tensor_2d(values, INGOT_DTYPE_U8, 1, 8, 8);
    ingot_tensor s1 = ingot_tensor_2d(big, INGOT_DTYPE_U8, 128, 4, 4);
    t = ingot_tensor_2d(big + 4, INGOT_DTYPE_F32, 1, 16, 16);
    EXPECT_REJECT(ingot_nvfp4_dequantize(ctx, &v1, &s1, &tg, &t, NULL), "out: overlaps scales");
    for (int i = 0; i < 256; i++) EXPECT(f_to_bits(big[i]) == 0x77777777u, "dequantize wrote");
  }

  /* global scale */
  t = ingot_tensor_1d(x + 3, INGOT_DTYPE_F32, 1);
  EXPECT_REJECT(ingot_nvfp4_global_scale(ctx, &tx, &t, NULL), "global_scale: overlaps x");
  t = ingot_tensor_1d(&count, INGOT_DTYPE_U32, 1);
  EXPECT_REJECT(ingot_nvfp4_global_scale(ctx, &tx, &t, NULL), "global_scale: dtype u32");

  /* swizzle */
  t = ingot_tensor_1d(scales, INGOT_DTYPE_U8, 513);
  EXPECT_REJECT(ingot_nvfp4_swizzle_scales(ctx, &tl, &t, NULL), "swizzled: shape[0] = 513");
  t = ingot_tensor_1d(lin, INGOT_DTYPE_U8, 512);
  {
    uint8_t big[600];
    memset(big, 0x55, sizeof big);
    ingot_tensor l2 = ingot_tensor_2d(big + 10, INGOT_DTYPE_U8, R, 2, 2);
    ingot_tensor s2 = ingot_tensor_1d(big + 15, INGOT_DTYPE_U8, 512);
    EXPECT_REJECT(ingot_nvfp4_swizzle_scales(ctx, &l2, &s2, NULL), "swizzled: overlaps linear");
    EXPECT_REJECT(ingot_nvfp4_unswizzle_scales(ctx, &s2, &l2, NULL), "linear: overlaps swizzled");
    for (size_t i = 0; i < sizeof big; i++) EXPECT(big[i] == 0x55, "overlap case wrote");
  }

  /* gate/up */
  {
    float up_buf[R * C];
    for (int i = 0; i < R * C; i++) up_buf[i] = 1.0f;
    ingot_tensor tu = ingot_tensor_2d(up_buf, INGOT_DTYPE_F32, R, C, C);
    ingot_tensor v2 = ingot_tensor_2d(values, INGOT_DTYPE_U8, 2 * R, C / 2, C / 2);
    uint8_t big_scales[128 * 4];
    ingot_tensor s2 = ingot_tensor_1d(big_scales, INGOT_DTYPE_U8, 512);
    uint8_t vbig[2 * R * C / 2];
    ingot_tensor v3 = ingot_tensor_2d(vbig, INGOT_DTYPE_U8, 2 * R, C / 2, C / 2);
    memset(big_scales, 0x66, sizeof big_scales);
    memset(vbig, 0x66, sizeof vbig);
    (void)v2;
    t = ingot_tensor_2d(up_buf, INGOT_DTYPE_F32, R - 1, C, C);
    EXPECT_REJECT(ingot_nvfp4_quantize_gate_up(ctx, &tx, &t, &tg, 0, &v3, &s2, NULL, NULL),
                  "up: shape[0] = 4");
    t = ingot_tensor_2d(up_buf, INGOT_DTYPE_BF16, R, C, C);
    EXPECT_REJECT(ingot_nvfp4_quantize_gate_up(ctx, &tx, &t, &tg, 0, &v3, &s2, NULL, NULL),
                  "up: dtype bf16 differs");
    EXPECT_REJECT(ingot_nvfp4_quantize_gate_up(ctx, &tx, &tu, &tg, 6, &v3, &s2, NULL, NULL),
                  "flags: 0x6");
    t = ingot_tensor_1d(values, INGOT_DTYPE_U8, 1);
    EXPECT_REJECT(ingot_nvfp4_quantize_gate_up(ctx, &tx, &tu, &t, 0, &v3, &s2, NULL, NULL),
                  "global_scale: dtype u8");
    t = ingot_tensor_1d(up_buf + 7, INGOT_DTYPE_F32, 1);
    EXPECT_REJECT(ingot_nvfp4_quantize_gate_up(ctx, &tx, &tu, &t,
                                               INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE, &v3, &s2,
                                               NULL, NULL),
                  "global_scale: overlaps up");
    EXPECT_REJECT(ingot_nvfp4_quantize_gate_up(ctx, &tx, &tu, &tg, 0, &tv, &s2, NULL, NULL),
                  "values: shape[0] = 5, expected rows = 10");
    for (size_t i = 0; i < sizeof big_scales; i++) EXPECT(big_scales[i] == 0x66, "gate/up wrote");
    for (size_t i = 0; i < sizeof vbig; i++) EXPECT(vbig[i] == 0x66, "gate/up wrote values");
    for (int i = 0; i < R * C; i++) EXPECT(up_buf[i] == 1.0f, "gate/up wrote up");
  }

  /* shape helper */
  int64_t sr = -1, sc = -1;
  EXPECT(ingot_nvfp4_scale_shape(4, 24, &sr, &sc) == INGOT_STATUS_INVALID_ARGUMENT &&
             strstr(ingot_last_error(NULL), "cols = 24") != NULL,
         "scale_shape(4, 24): %s", ingot_last_error(NULL));
  EXPECT(ingot_nvfp4_scale_shape(INT64_MAX, 16, &sr, &sc) == INGOT_STATUS_INVALID_ARGUMENT &&
             strstr(ingot_last_error(NULL), "overflow") != NULL,
         "scale_shape(INT64_MAX): %s", ingot_last_error(NULL));
  EXPECT(ingot_nvfp4_scale_shape(-1, 16, &sr, &sc) == INGOT_STATUS_INVALID_ARGUMENT,
         "scale_shape(-1)");
  EXPECT(ingot_nvfp4_scale_shape(1, 16, NULL, &sc) == INGOT_STATUS_INVALID_ARGUMENT,
         "scale_shape NULL");
  EXPECT(sr == -1 && sc == -1, "scale_shape wrote on error");
  /* sizes whose scale buffer overflows: named with their values, nothing written */
  {
    static const struct {
      int64_t rows, cols;
      const char *needle;
    } cases[] = {
        {INT64_MAX, 16, "rows = 9223372036854775807 overflows when padded to 128"},
        {1, INT64_MAX / 16 * 16, "rows = 1, cols = 9223372036854775792: the scale buffer"},
        {INT64_C(1) << 56, INT64_C(1) << 56, "rows = 72057594037927936, cols = 72057594037927936"},
        /* 2^32 x 2^32 scale bytes: SIZE_MAX + 1 */
        {INT64_C(1) << 32, INT64_C(1) << 36, "rows = 4294967296, cols = 68719476736"},
        {INT64_MIN, 16, "rows = -9223372036854775808 < 0"},
        {16, -16, "cols = -16"},
        {16, INT64_MIN, "cols = -9223372036854775808"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      EXPECT_ERROR(NULL, ingot_nvfp4_scale_shape(cases[i].rows, cases[i].cols, &sr, &sc),
                   INGOT_STATUS_INVALID_ARGUMENT, cases[i].needle);
    EXPECT(sr == -1 && sc == -1, "scale_shape wrote on error");
    /* the largest shapes that fit are answered */
    EXPECT_OK(NULL, ingot_nvfp4_scale_shape(INT64_C(1) << 32, INT64_C(1) << 33, &sr, &sc));
    EXPECT(sr == INT64_C(1) << 32 && sc == INT64_C(1) << 29, "scale shape %lld x %lld",
           (long long)sr, (long long)sc);
    sr = sc = -1;
  }

  /* nothing written by any failed call */
  for (size_t i = 0; i < sizeof values; i++) EXPECT(values[i] == 0x11, "values written");
  for (size_t i = 0; i < sizeof scales; i++) EXPECT(scales[i] == 0x22, "scales written");
  for (size_t i = 0; i < sizeof lin; i++) EXPECT(lin[i] == 0x44, "linear written");
  EXPECT(count == 0 && gs == 1.0f, "count / gs written");
  for (int i = 0; i < R * C; i++) EXPECT(f_to_bits(out[i]) == 0x33333333u, "out written");
  return 0;
}

static int test_empty(void) {
  float gs = 1.0f;
  ingot_tensor tx = ingot_tensor_2d(NULL, INGOT_DTYPE_BF16, 0, 32, 32);
  ingot_tensor tg = ingot_tensor_1d(&gs, INGOT_DTYPE_F32, 1);
  ingot_tensor tv = ingot_tensor_2d(NULL, INGOT_DTYPE_U8, 0, 16, 16);
  ingot_tensor ts = ingot_tensor_1d(NULL, INGOT_DTYPE_U8, 0);
  EXPECT_OK(ctx, ingot_nvfp4_quantize(ctx, &tx, &tg, &tv, &ts, NULL, NULL));
  ingot_tensor to = ingot_tensor_2d(NULL, INGOT_DTYPE_F32, 0, 32, 32);
  EXPECT_OK(ctx, ingot_nvfp4_dequantize(ctx, &tv, &ts, &tg, &to, NULL));
  return 0;
}

int main(void) {
  test_init("test_nvfp4");
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &ctx) != INGOT_OK) {
    printf("cannot create a CPU context: %s\n", ingot_last_error(NULL));
    return 1;
  }
  test_run("e2m1_ties", test_e2m1_ties);
  test_run("encoders_exhaustive", test_encoders_exhaustive);
  test_run("kernel_block_encoder", test_kernel_block_encoder);
  test_run("saturation_zero_tiny_scales", test_saturation_and_zero);
  test_run("nibble_order", test_nibble_order);
  test_run("nonfinite_rule_and_counter", test_nonfinite);
  test_run("random_vs_independent", test_random_vs_independent);
  test_run("dequantize_vs_independent", test_dequantize);
  test_run("round_trip_bound", test_round_trip_bound);
  test_run("global_scale", test_global_scale);
  test_run("swizzle_round_trip", test_swizzle);
  test_run("gate_up_interleave", test_gate_up);
  test_run("invalid_arguments", test_invalid);
  test_run("empty", test_empty);
  ingot_context_destroy(ctx);
  return test_finish();
}
