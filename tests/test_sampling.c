/*
 * Sampling on the CPU backend, against an oracle written here from the
 * rules of include/ingot/ingot.h (double precision, sort-based, its own
 * mask/bias handling), on fresh random inputs every run:
 *   - the generator: Philox-4x32-10 known answers (Random123), the uniform
 *     conversion restated in double, pinned (seed, position, token) values
 *     every backend must reproduce, its distribution; the portable exp/log
 *     against libm in double (max ulp printed);
 *   - the known-hard masked softmax rows (first 16384 columns -Inf, all but 3
 *     ids -Inf, a 20000-column -Inf block in the middle; B = 1, 3, 8;
 *     V = 151936, 201088, 262144) against a float64 softmax (max relative
 *     error printed), and draws under a 3-id mask;
 *   - chi-square agreement of draws with the target distribution over many
 *     seeds (temperatures, masks, filters), each at significance 1e-6;
 *   - exact top-k / top-p / min-p sets against a sort-based reference;
 *   - determinism and batch invariance (row 0 of B = 1 == row 37 of B = 64
 *     with other neighbours), greedy ties, empty / NaN rows, sparse lists,
 *     log-probabilities and top-n, dtypes and strides, bad arguments.
 * The statistical tests use p < 1e-6 as the failure threshold: with the
 * 12 chi-square and uniformity tests of a run, a correct library fails a
 * run with probability < 2e-5.
 */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sampling_ref.h" /* only for the Philox known-answer test */
#include "test_util.h"

static ingot_context_t ctx;

#define P_FAIL 1e-6 /* significance threshold of every statistical test */

/* ---- small helpers ----------------------------------------------------------------- */

static uint32_t f_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static double rand_normal(void) {
  double u = test_rand_unit(), v = test_rand_unit();
  if (u < 1e-300) u = 1e-300;
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "out of memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

/* Upper regularized gamma Q(a, x): the chi-square p-value is Q(df/2, x/2). */
static double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  double lead = exp(-x + a * log(x) - lgamma(a));
  if (x < a + 1.0) {
    double ap = a, del = 1.0 / a, sum = del;
    for (int n = 0; n < 100000; n++) {
      ap += 1.0;
      del *= x / ap;
      sum += del;
      if (fabs(del) < fabs(sum) * 1e-16) break;
    }
    return 1.0 - sum * lead;
  }
  double b = x + 1.0 - a, c = 1e300, d = 1.0 / b, h = d;
  for (int i = 1; i < 100000; i++) {
    double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (fabs(c) < 1e-300) c = 1e-300;
    d = 1.0 / d;
    double del = d * c;
    h *= del;
    if (fabs(del - 1.0) < 1e-16) break;
  }
  return lead * h;
}

/* ---- logits buffers in every dtype ---------------------------------------------------- */

/* fp32 -> bf16 bits, nearest even (written here independently of ingot). */
static uint16_t bf16_of(float f) {
  uint32_t u = f_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* bits of a value that is exactly a half float: 0, +-Inf, NaN, or k/64
 * with 1 <= |k| <= 2047 (a normal f16). */
static uint16_t f16_exact(double v) {
  if (v != v) return 0x7e00;
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  if (isinf(v)) return sign | 0x7c00;
  if (v == 0.0) return sign;
  int e;
  double m = frexp(fabs(v), &e); /* |v| = m 2^e, m in [0.5, 1) */
  int exp_field = e - 1 + 15;
  int man = (int)((2.0 * m - 1.0) * 1024.0);
  return (uint16_t)(sign | (exp_field << 10) | man);
}

typedef struct logits_buf {
  ingot_dtype dtype;
  int64_t B, V, stride;
  void *data; /* B x stride elements of dtype */
  float *x;   /* B x V exact values */
} logits_buf;

static void lb_alloc(logits_buf *lb, ingot_dtype dtype, int64_t B, int64_t V, int64_t stride) {
  lb->dtype = dtype;
  lb->B = B;
  lb->V = V;
  lb->stride = stride;
  lb->data = xmalloc((size_t)(B * stride) * ingot_dtype_size(dtype));
  memset(lb->data, 0x7f, (size_t)(B * stride) * ingot_dtype_size(dtype));
  lb->x = (float *)xmalloc((size_t)(B * V) * sizeof(float));
}

static void lb_free(logits_buf *lb) {
  free(lb->data);
  free(lb->x);
}

/* Stores v rounded to the dtype; keeps the exact stored value. F16 values
 * are first rounded to the grid k/64 (|k| <= 2047). */
static void lb_set(logits_buf *lb, int64_t r, int64_t i, float v) {
  size_t at = (size_t)(r * lb->stride + i);
  float exact = v;
  if (lb->dtype == INGOT_DTYPE_F32) {
    ((float *)lb->data)[at] = v;
  } else if (lb->dtype == INGOT_DTYPE_BF16) {
    uint16_t h = bf16_of(v);
    ((uint16_t *)lb->data)[at] = h;
    exact = bits_f((uint32_t)h << 16);
  } else {
    double g = (double)v;
    if (isfinite(g)) {
      g = nearbyint(g * 64.0) / 64.0;
      if (g > 2047.0 / 64.0) g = 2047.0 / 64.0;
      if (g < -2047.0 / 64.0) g = -2047.0 / 64.0;
    }
    ((uint16_t *)lb->data)[at] = f16_exact(g);
    exact = (float)g;
  }
  lb->x[r * lb->V + i] = exact;
}

static ingot_tensor lb_tensor(const logits_buf *lb) {
  return ingot_tensor_2d(lb->data, lb->dtype, lb->B, lb->V, lb->stride);
}

static ingot_dtype random_dtype(void) {
  static const ingot_dtype d[] = {INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16};
  return d[test_rand() % 3];
}

/* A workspace big enough for ingot_sample / softmax on [B, V] with num_top. */
typedef struct ws_buf {
  void *p;
  size_t bytes;
} ws_buf;

static ws_buf ws_for(int64_t B, int64_t V, ingot_dtype dt, int64_t num_top) {
  ws_buf w = {NULL, 0};
  size_t a = 0, b = 0;
  EXPECT_OK(ctx, ingot_sample_workspace_size(ctx, B, V, dt, num_top, &a));
  EXPECT_OK(ctx, ingot_sampling_softmax_workspace_size(ctx, B, V, dt, &b));
  w.bytes = a > b ? a : b;
  if (w.bytes) w.p = aligned_alloc(64, (w.bytes + 63) / 64 * 64);
  return w;
}

/* ---- the oracle: the header's rules, written out again ------------------------------ */

typedef struct row_spec {
  int64_t V;
  const float *x;            /* the row's exact logits */
  const uint32_t *allowed;   /* ceil(V/32) words, or NULL */
  const int32_t *banned;     /* tokens banned in this row */
  int64_t nbanned;
  const int32_t *bias_tok;   /* this row's bias entries, in list order */
  const float *bias_val;
  int64_t nbias;
  float T;
  int32_t k;
  float p, q;
} row_spec;

typedef struct oracle {
  int64_t V;
  float *s;        /* T > 0: s_i of allowed tokens (-Inf otherwise); T == 0: l_i */
  int *keep;       /* final set */
  double *prob;    /* final distribution */
  int64_t *rank;   /* allowed tokens with s > -Inf, in rank order */
  int64_t nrank;
  int64_t count;   /* allowed tokens */
  int32_t greedy;  /* T == 0: the token; -1 for an empty row */
  uint32_t flags;
  int ambiguous;   /* a filter boundary lies within rounding: skip exact checks */
} oracle;

static const float *g_sort_key;

static int oracle_rank_cmp(const void *a, const void *b) {
  int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
  float x = g_sort_key[i], y = g_sort_key[j];
  if (x != y) return x > y ? -1 : 1;
  return i < j ? -1 : 1;
}

static void oracle_init(oracle *o, int64_t V) {
  o->V = V;
  o->s = (float *)xmalloc((size_t)V * sizeof(float));
  o->keep = (int *)xmalloc((size_t)V * sizeof(int));
  o->prob = (double *)xmalloc((size_t)V * sizeof(double));
  o->rank = (int64_t *)xmalloc((size_t)V * sizeof(int64_t));
}

static void oracle_free(oracle *o) {
  free(o->s);
  free(o->keep);
  free(o->prob);
  free(o->rank);
}

static void oracle_run(const row_spec *rs, oracle *o) {
  const int64_t V = rs->V;
  float *l = o->s;
  o->flags = 0;
  o->ambiguous = 0;
  o->greedy = -1;
  o->nrank = 0;
  for (int64_t i = 0; i < V; i++) {
    l[i] = rs->x[i];
    o->keep[i] = 0;
    o->prob[i] = 0.0;
  }
  for (int64_t j = 0; j < rs->nbias; j++) {
    int32_t t = rs->bias_tok[j];
    if (t < 0 || t >= V) {
      o->flags |= INGOT_SAMPLING_ROW_BAD_ENTRY;
      continue;
    }
    l[t] = l[t] + rs->bias_val[j];
  }
  int *allowed = o->keep; /* reused as "allowed" until the end */
  for (int64_t i = 0; i < V; i++) {
    if (isnan(l[i]) || l[i] == INFINITY) o->flags |= INGOT_SAMPLING_ROW_NAN;
    allowed[i] = isfinite(l[i]) && (!rs->allowed || ((rs->allowed[i / 32] >> (i % 32)) & 1u));
  }
  for (int64_t j = 0; j < rs->nbanned; j++) {
    int32_t t = rs->banned[j];
    if (t < 0 || t >= V)
      o->flags |= INGOT_SAMPLING_ROW_BAD_ENTRY;
    else
      allowed[t] = 0;
  }
  float m = -INFINITY;
  o->count = 0;
  for (int64_t i = 0; i < V; i++)
    if (allowed[i]) {
      o->count++;
      if (l[i] > m) m = l[i];
    }
  if (o->count == 0) {
    o->flags |= INGOT_SAMPLING_ROW_EMPTY;
    for (int64_t i = 0; i < V; i++) allowed[i] = 0, l[i] = -INFINITY;
    return;
  }
  if (rs->T == 0.0f) {
    for (int64_t i = 0; i < V; i++)
      if (allowed[i] && l[i] == m && o->greedy < 0) o->greedy = (int32_t)i;
    for (int64_t i = 0; i < V; i++) o->keep[i] = i == o->greedy;
    o->prob[o->greedy] = 1.0;
    return;
  }
  for (int64_t i = 0; i < V; i++) {
    if (!allowed[i]) {
      l[i] = -INFINITY;
      continue;
    }
    float d = l[i] - m;
    l[i] = d / rs->T;
    if (l[i] != -INFINITY) o->rank[o->nrank++] = i;
  }
  g_sort_key = l;
  qsort(o->rank, (size_t)o->nrank, sizeof(int64_t), oracle_rank_cmp);
  int64_t keep = o->nrank;
  if (rs->k > 0 && rs->k < o->count && rs->k < keep) keep = rs->k;
  if (rs->p < 1.0f) {
    double total = 0.0, cum = 0.0, prev = 0.0;
    for (int64_t j = 0; j < keep; j++) total += exp((double)l[o->rank[j]]);
    double target = (double)rs->p * total;
    for (int64_t j = 0; j < keep; j++) {
      prev = cum;
      cum += exp((double)l[o->rank[j]]);
      if (cum >= target) {
        /* the first token is always kept; elsewhere the backends' sums may
         * fall on the other side of a target this close */
        if (cum - target <= 1e-6 * total || (j > 0 && target - prev <= 1e-6 * total))
          o->ambiguous = 1;
        keep = j + 1;
        break;
      }
    }
  }
  for (int64_t i = 0; i < V; i++) o->keep[i] = 0;
  for (int64_t j = 0; j < keep; j++) o->keep[o->rank[j]] = 1;
  if (rs->q > 0.0f) {
    /* ingot compares with its fp32 log(q) (within 1 ulp): an s within 2
     * fp32 ulp of log q may fall either way (q = 1: log q = 0 exactly) */
    double lq = log((double)rs->q);
    double tol = lq != 0.0 ? ldexp(1.0, ilogb(lq) - 22) : 0.0;
    for (int64_t j = 0; j < keep; j++) {
      double s = (double)l[o->rank[j]];
      if (tol > 0.0 && fabs(s - lq) <= tol) o->ambiguous = 1;
      if (s < lq) o->keep[o->rank[j]] = 0;
    }
  }
  double z = 0.0;
  for (int64_t i = 0; i < V; i++)
    if (o->keep[i]) z += exp((double)l[i]);
  for (int64_t i = 0; i < V; i++) o->prob[i] = o->keep[i] ? exp((double)l[i]) / z : 0.0;
}

/* Oracle log-softmax of the raw logits x / T' at token t (NaN/Inf left out),
 * the fp32 scaled values of the header. Returns -Inf if nothing finite. */
static double oracle_raw_logprob(const float *x, int64_t V, float T, int64_t t,
                                 double *log_z_out, float *scaled) {
  float tt = T > 0.0f ? T : 1.0f;
  float m = -INFINITY;
  for (int64_t i = 0; i < V; i++)
    if (isfinite(x[i]) && x[i] > m) m = x[i];
  double z = 0.0;
  for (int64_t i = 0; i < V; i++) {
    float v = -INFINITY;
    if (isfinite(x[i]) && m != -INFINITY) {
      float d = x[i] - m;
      v = d / tt;
    }
    if (scaled) scaled[i] = v;
    if (v != -INFINITY) z += exp((double)v);
  }
  double log_z = z > 0.0 ? log(z) : -(double)INFINITY;
  if (log_z_out) *log_z_out = log_z;
  if (t < 0 || m == -INFINITY || !isfinite(x[t])) return -(double)INFINITY;
  float d = x[t] - m;
  float v = d / tt;
  return (double)v - log_z;
}

/* ---- generator ------------------------------------------------------------------------- */

static int test_generator_known_answers(void) {
  /* Random123 tests/kat_vectors, philox4x32 10: ctr[4] key[2] -> out[4] */
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int v = 0; v < 3; v++) {
    uint32_t out[4];
    ingot_philox4x32_10(kat[v], kat[v] + 4, out);
    for (int j = 0; j < 4; j++)
      EXPECT(out[j] == kat[v][6 + j], "philox KAT %d word %d: %08x, want %08x", v, j, out[j],
             kat[v][6 + j]);
  }
  /* the conversion, restated in double */
  for (int n = 0; n < 20000; n++) {
    uint64_t seed = test_rand(), pos = n < 100 ? (uint64_t)n : test_rand();
    int32_t token = (int32_t)(test_rand() % 300000);
    uint32_t ctr[4] = {(uint32_t)token, 0, (uint32_t)pos, (uint32_t)(pos >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, x[4];
    ingot_philox4x32_10(ctr, key, x);
    int z = 0;
    while (z < 32 && !((x[1] << z) & 0x80000000u)) z++;
    double want = ldexp(1.0 + (double)(x[0] >> 9) * 0x1p-23, -(1 + z));
    float u = ingot_sampling_uniform(seed, pos, token);
    EXPECT((double)u == want && u > 0.0f && u < 1.0f,
           "uniform(%" PRIu64 ", %" PRIu64 ", %d) = %.9g, want %.17g", seed, pos, (int)token,
           (double)u, want);
    double g = -log(-log1p(-want));
    float got = ingot_sampling_gumbel(seed, pos, token);
    EXPECT(fabs((double)got - g) <= 1e-6 * fmax(1.0, fabs(g)), "gumbel %.9g, want %.12g",
           (double)got, g);
  }
  /* pinned values: any backend (and any later change) must reproduce these bits */
  static const struct {
    uint64_t seed, pos;
    int32_t token;
    uint32_t u_bits, g_bits;
  } pinned[] = {
      {UINT64_C(0x0000000000000000), UINT64_C(0x0), 0, 0x3f3313f4u, 0xbe3cbaefu}, /* u 0.699523211 g -0.184306845 */
      {UINT64_C(0x0000000000000000), UINT64_C(0x0), 1, 0x3efc7266u, 0x3ec5f05bu}, /* u 0.493060291 g 0.386599392 */
      {UINT64_C(0x0000000000000001), UINT64_C(0x0), 0, 0x3f71f403u, 0xbf8867d9u}, /* u 0.945129573 g -1.06566918 */
      {UINT64_C(0x0000000000000000), UINT64_C(0x1), 0, 0x3f42228au, 0xbeb39dc0u}, /* u 0.758339524 g -0.350812912 */
      {UINT64_C(0x0123456789abcdef), UINT64_C(0x2a), 151935, 0x3f414eefu, 0xbeaecf0fu}, /* u 0.755110681 g -0.341423482 */
      {UINT64_C(0xffffffffffffffff), UINT64_C(0xffffffffffffffff), 262143, 0x3f4aa88eu, 0xbee672dau}, /* u 0.79163444 g -0.450094998 */
      {UINT64_C(0x0000000000003039), UINT64_C(0x3b9aca07), 7, 0x3ecfb68au, 0x3f273b32u}, /* u 0.405689538 g 0.653246999 */
      {UINT64_C(0x00000000deadbeef), UINT64_C(0x100000000), 100000, 0x3f7b86dfu, 0xbfb2f18au}, /* u 0.98252672 g -1.39799619 */
  };
  for (size_t j = 0; j < sizeof pinned / sizeof pinned[0]; j++) {
    uint32_t ub = f_bits(ingot_sampling_uniform(pinned[j].seed, pinned[j].pos, pinned[j].token));
    uint32_t gb = f_bits(ingot_sampling_gumbel(pinned[j].seed, pinned[j].pos, pinned[j].token));
    EXPECT(ub == pinned[j].u_bits && gb == pinned[j].g_bits,
           "pinned %zu: u %08x g %08x, want %08x %08x", j, ub, gb, pinned[j].u_bits,
           pinned[j].g_bits);
  }
  return 0;
}

static double ulps(float got, double want) {
  if (want == 0.0) return got == 0.0f ? 0.0 : 1e30;
  int e;
  frexp(want, &e);
  double ulp = ldexp(1.0, e - 24);
  if (ulp < 0x1p-149) ulp = 0x1p-149;
  return fabs((double)got - want) / ulp;
}

static int test_portable_exp_log(void) {
  double worst_exp = 0.0, worst_log = 0.0;
  float at_exp = 0.0f, at_log = 0.0f;
  for (int n = 0; n < 400000; n++) {
    float x;
    if (n < 200000)
      x = -(float)(test_rand_unit() * 104.0);
    else
      x = -bits_f((uint32_t)test_rand_range(0, 0x42d00000));
    double e = ulps(ingot_sampling_exp(x), exp((double)x));
    if (e > worst_exp) worst_exp = e, at_exp = x;
    float y = bits_f((uint32_t)test_rand_range(1, 0x7f7fffff));
    double l = ulps(ingot_sampling_log(y), log((double)y));
    if (l > worst_log) worst_log = l, at_log = y;
  }
  printf("  portable exp: max %.3f ulp (at %.9g); log: max %.3f ulp (at %.9g)\n", worst_exp,
         (double)at_exp, worst_log, (double)at_log);
  EXPECT(worst_exp <= 2.0, "exp error %.3f ulp at %.9g", worst_exp, (double)at_exp);
  EXPECT(worst_log <= 2.0, "log error %.3f ulp at %.9g", worst_log, (double)at_log);
  EXPECT(ingot_sampling_exp(0.0f) == 1.0f && ingot_sampling_exp(-0.0f) == 1.0f, "exp(0) != 1");
  EXPECT(ingot_sampling_exp(-INFINITY) == 0.0f, "exp(-inf)");
  EXPECT(ingot_sampling_exp(-104.5f) == 0.0f, "exp(-104.5)");
  EXPECT(ingot_sampling_exp(-100.0f) > 0.0f, "exp(-100) is a subnormal, not 0");
  EXPECT(isnan(ingot_sampling_exp(NAN)), "exp(NaN)");
  EXPECT(ingot_sampling_log(1.0f) == 0.0f, "log(1) = %.9g", (double)ingot_sampling_log(1.0f));
  EXPECT(ingot_sampling_log(0.0f) == -INFINITY && isnan(ingot_sampling_log(-1.0f)), "log(0), log(-1)");
  return 0;
}

/* The uniforms and Exp(1) variates of many (seed, position, token). */
static int test_uniform_distribution(void) {
  enum { BINS = 64, N = 256000 };
  long counts[BINS] = {0};
  double sum_e = 0.0;
  long tiny = 0;
  for (int n = 0; n < N; n++) {
    uint64_t seed = test_rand();
    float u = ingot_sampling_uniform(seed, (uint64_t)n, (int32_t)(n % 1000));
    counts[(int)((double)u * BINS)]++;
    sum_e += -log1p(-(double)u);
    if (u < 1.0f / 4096) tiny++;
  }
  double chi2 = 0.0, expect = (double)N / BINS;
  for (int b = 0; b < BINS; b++) chi2 += (counts[b] - expect) * (counts[b] - expect) / expect;
  double p = gamma_q((BINS - 1) / 2.0, chi2 / 2.0);
  double mean = sum_e / N; /* Exp(1): mean 1, sd 1/sqrt(N) */
  printf("  uniform: chi2 %.1f (df %d, p = %.3g); mean of -log(1-u) %.5f\n", chi2, BINS - 1, p,
         mean);
  EXPECT(p > P_FAIL, "uniform bins: chi2 %.1f, p = %.3g", chi2, p);
  EXPECT(fabs(mean - 1.0) < 5.5 / sqrt((double)N), "mean of Exp(1) %.5f", mean);
  /* the fine end: P(u < 2^-12) = 2^-12 */
  double pt = (double)tiny / N, sd = sqrt(0x1p-12 / N);
  EXPECT(fabs(pt - 0x1p-12) < 5.5 * sd, "P(u < 2^-12) = %.3g", pt);
  return 0;
}

/* ---- the known-hard masked softmax rows --------------------------------------------------------- */

enum { MASK_PREFIX = 0, MASK_THREE = 1, MASK_BLOCK = 2, MASK_NONE = 3 };

/* 1 if token i is masked in a row of the given kind. */
static int masked_by(int kind, int64_t i, int64_t V, const int64_t three[3]) {
  switch (kind) {
    case MASK_PREFIX: return i < 16384;
    case MASK_THREE: return i != three[0] && i != three[1] && i != three[2];
    case MASK_BLOCK: return i >= V / 2 - 10000 && i < V / 2 + 10000;
    default: return 0;
  }
}

static int test_seed_masked_softmax(void) {
  static const int64_t Vs[] = {151936, 201088, 262144};
  static const int64_t Bs[] = {1, 3, 8};
  double worst_rel = 0.0, worst_abs_small = 0.0, worst_sum = 0.0;
  int cases = 0;
  /* every (B, V) pair with every mask: B = 1 runs once per mask, the rows
   * of B = 3 and 8 cycle through the three, and the last row of B = 8 has none */
  for (int vi = 0; vi < 3; vi++)
    for (int bi = 0; bi < 3; bi++) {
      for (int pass = 0; pass < (Bs[bi] == 1 ? 3 : 1); pass++) {
        int kind = (vi + bi + pass) % 3;
        int64_t V = Vs[vi], B = Bs[bi];
        static const ingot_dtype dts[3] = {INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16};
        ingot_dtype dt = dts[(vi + bi + kind) % 3];
        logits_buf lb;
        lb_alloc(&lb, dt, B, V, V + (int64_t)(test_rand() % 5));
        int use_bitmask = (int)(test_rand() & 1); /* -Inf in the logits, or the bitmask */
        int64_t W = (V + 31) / 32;
        uint32_t *words = (uint32_t *)xmalloc((size_t)(B * W) * sizeof(uint32_t));
        float *temps = (float *)xmalloc((size_t)B * sizeof(float));
        int kinds[8];
        int64_t three[8][3];
        for (int64_t r = 0; r < B; r++) {
          kinds[r] = r == B - 1 && B > 3 ? MASK_NONE : (int)((kind + r) % 3);
          for (int j = 0; j < 3; j++) three[r][j] = (int64_t)(test_rand() % (uint64_t)V);
          temps[r] = (float)(0.3 + 1.7 * test_rand_unit());
          for (int64_t w = 0; w < W; w++) words[r * W + w] = 0xffffffffu;
          for (int64_t i = 0; i < V; i++) {
            float v = (float)(rand_normal() * 3.0);
            int masked = masked_by(kinds[r], i, V, three[r]);
            if (masked && use_bitmask)
              words[r * W + i / 32] &= ~(1u << (i % 32));
            else if (masked)
              v = -INFINITY;
            lb_set(&lb, r, i, v);
          }
        }
        float *probs = (float *)xmalloc((size_t)(B * V) * sizeof(float));
        uint32_t status[8];
        ingot_tensor tl = lb_tensor(&lb), tp = ingot_tensor_2d(probs, INGOT_DTYPE_F32, B, V, V);
        ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B);
        ingot_tensor tw = ingot_tensor_2d(words, INGOT_DTYPE_U32, B, W, W);
        ingot_tensor ts = ingot_tensor_1d(status, INGOT_DTYPE_U32, B);
        ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
        params.temperature = &tt;
        if (use_bitmask) params.allowed = &tw;
        ws_buf ws = ws_for(B, V, dt, 0);
        EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &tl, &params, &tp, &ts, ws.p, ws.bytes, NULL));
        double *e = (double *)xmalloc((size_t)V * sizeof(double));
        for (int64_t r = 0; r < B; r++) {
          /* float64 softmax of x / T over the unmasked columns */
          const float *x = lb.x + r * V;
          double m = -(double)INFINITY, z = 0.0, sum = 0.0;
          for (int64_t i = 0; i < V; i++) {
            e[i] = masked_by(kinds[r], i, V, three[r]) ? -(double)INFINITY : (double)x[i];
            if (e[i] > m) m = e[i];
          }
          for (int64_t i = 0; i < V; i++) {
            e[i] = e[i] == -(double)INFINITY ? 0.0 : exp((e[i] - m) / (double)temps[r]);
            z += e[i];
          }
          int bad = 0;
          for (int64_t i = 0; i < V; i++) {
            double want = e[i] / z;
            double got = (double)probs[r * V + i];
            sum += got;
            if (!isfinite(got) || (want == 0.0 && got != 0.0)) {
              if (!bad++)
                EXPECT(0, "V=%" PRId64 " B=%" PRId64 " kind %d row %" PRId64 " col %" PRId64
                       ": prob %g, want %g",
                       V, B, kinds[r], r, i, got, want);
              continue;
            }
            if (want > 1e-6) {
              double rel = fabs(got - want) / want;
              if (rel > worst_rel) worst_rel = rel;
            } else if (fabs(got - want) > worst_abs_small) {
              worst_abs_small = fabs(got - want);
            }
          }
          if (fabs(sum - 1.0) > worst_sum) worst_sum = fabs(sum - 1.0);
          EXPECT(status[r] == 0, "row %" PRId64 " status %u", r, status[r]);
        }
        cases++;
        free(e);
        free(ws.p);
        free(probs);
        free(words);
        free(temps);
        lb_free(&lb);
      }
    }
  printf("  %d seed cases (B = 1, 3, 8 x V = 151936, 201088, 262144; three masks): max rel err "
         "vs float64 softmax %.3g over probs > 1e-6, max abs err below %.3g, max |sum - 1| %.3g\n",
         cases, worst_rel, worst_abs_small, worst_sum);
  EXPECT(worst_rel < 1e-5, "max relative error %.3g", worst_rel);
  EXPECT(worst_abs_small < 1e-11, "max absolute error of small probabilities %.3g",
         worst_abs_small);
  EXPECT(worst_sum < 1e-5, "sum of probabilities off by %.3g", worst_sum);
  return 0;
}

/* The known-hard sampling case: everything but 3 ids masked, 8 rows x 64
 * draws; every draw must be one of the row's 3 ids, and each id appears
 * (each has p > 0.3: P(one of the 24 never drawn) < 24 * 0.7^64 = 3e-9). */
static int test_three_allowed_ids(void) {
  const int64_t V = 151936, B = 8, DRAWS = 64;
  logits_buf lb;
  lb_alloc(&lb, INGOT_DTYPE_F32, B, V, V);
  int64_t W = (V + 31) / 32;
  uint32_t *words = (uint32_t *)xmalloc((size_t)(B * W) * sizeof(uint32_t));
  int64_t ids[8][3];
  for (int64_t r = 0; r < B; r++) {
    for (int j = 0; j < 3; j++) ids[r][j] = (int64_t)(test_rand() % (uint64_t)V);
    ids[r][2] = r == 0 ? V - 1 : ids[r][2]; /* the last token too */
    memset(words + r * W, 0, (size_t)W * sizeof(uint32_t));
    int via_mask = r % 2;
    for (int64_t i = 0; i < V; i++) {
      int in3 = i == ids[r][0] || i == ids[r][1] || i == ids[r][2];
      if (in3) words[r * W + i / 32] |= 1u << (i % 32);
      lb_set(&lb, r, i, in3 || via_mask ? (float)(rand_normal() * 0.05) : -INFINITY);
    }
  }
  uint64_t seeds[8], pos[8];
  float temps[8];
  int32_t tokens[8];
  int64_t seen[8][3] = {{0}};
  for (int64_t r = 0; r < B; r++) seeds[r] = test_rand(), temps[r] = 0.5f + (float)r * 0.1f;
  ingot_tensor tl = lb_tensor(&lb), tw = ingot_tensor_2d(words, INGOT_DTYPE_I32, B, W, W);
  ingot_tensor ts = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, B),
               tpos = ingot_tensor_1d(pos, INGOT_DTYPE_U64, B),
               tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B),
               tk = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B);
  ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
  params.temperature = &tt;
  params.seed = &ts;
  params.position = &tpos;
  params.allowed = &tw;
  ws_buf ws = ws_for(B, V, INGOT_DTYPE_F32, 0);
  int64_t bad = 0;
  for (int64_t d = 0; d < DRAWS; d++) {
    for (int64_t r = 0; r < B; r++) pos[r] = (uint64_t)(1000 + d);
    EXPECT_OK(ctx, ingot_sample(ctx, &tl, &params, &tk, NULL, NULL, ws.p, ws.bytes, NULL));
    for (int64_t r = 0; r < B; r++) {
      int hit = 0;
      for (int j = 0; j < 3; j++)
        if (tokens[r] == ids[r][j]) seen[r][j]++, hit = 1;
      if (!hit) bad++;
    }
  }
  int64_t missing = 0;
  for (int64_t r = 0; r < B; r++)
    for (int j = 0; j < 3; j++) missing += seen[r][j] == 0;
  printf("  %" PRId64 " draws under a 3-id mask: %" PRId64 " outside the 3 ids, %" PRId64
         " (row, id) pairs never drawn\n",
         B * DRAWS, bad, missing);
  EXPECT(bad == 0, "%" PRId64 " draws outside the allowed ids", bad);
  /* each id has probability >= ~0.2 per draw: P(never in 64) < 1e-6 */
  EXPECT(missing == 0, "%" PRId64 " allowed ids never drawn", missing);
  free(ws.p);
  free(words);
  lb_free(&lb);
  return 0;
}

/* ---- chi-square over many seeds ---------------------------------------------------------- */

typedef struct chi_case {
  const char *name;
  int64_t V;
  ingot_dtype dtype;
  float T;
  int32_t k;
  float p, q;
  double mask_fraction; /* of tokens masked through the bitmask */
  int prefix;           /* -Inf on the first V/2 columns */
} chi_case;

/* Chi-square of `counts` against `prob` (bins with expectation < 5 merged);
 * returns the p-value, or -1 if a token of probability 0 was drawn. */
static double chi_square(const long *counts, const double *prob, int64_t V, long n, int *df_out) {
  double chi2 = 0.0, small_e = 0.0;
  long small_o = 0;
  int bins = 0;
  for (int64_t i = 0; i < V; i++) {
    double e = prob[i] * (double)n;
    if (prob[i] == 0.0) {
      if (counts[i]) return -1.0;
      continue;
    }
    if (e < 5.0) {
      small_e += e;
      small_o += counts[i];
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    bins++;
  }
  if (small_e > 0.0) {
    chi2 += (small_o - small_e) * (small_o - small_e) / small_e;
    bins++;
  }
  *df_out = bins - 1;
  if (bins < 2) return 1.0;
  return gamma_q((bins - 1) / 2.0, chi2 / 2.0);
}

static int test_chi_square_draws(void) {
  static const chi_case cases[] = {
      {"V64 T1", 64, INGOT_DTYPE_F32, 1.0f, 0, 1.0f, 0.0f, 0.0, 0},
      {"V64 T0.5", 64, INGOT_DTYPE_F32, 0.5f, 0, 1.0f, 0.0f, 0.0, 0},
      {"V64 T2.5 bf16", 64, INGOT_DTYPE_BF16, 2.5f, 0, 1.0f, 0.0f, 0.0, 0},
      {"V200 T1 bitmask", 200, INGOT_DTYPE_F32, 1.0f, 0, 1.0f, 0.0f, 0.7, 0},
      {"V200 T0.7 top-k 10", 200, INGOT_DTYPE_F32, 0.7f, 10, 1.0f, 0.0f, 0.0, 0},
      {"V200 T1.3 top-p 0.8", 200, INGOT_DTYPE_F16, 1.3f, 0, 0.8f, 0.0f, 0.0, 0},
      {"V200 T1 min-p 0.05", 200, INGOT_DTYPE_F32, 1.0f, 0, 1.0f, 0.05f, 0.0, 0},
      {"V300 T0.9 k40 p0.9 q0.02 bitmask", 300, INGOT_DTYPE_BF16, 0.9f, 40, 0.9f, 0.02f, 0.3, 0},
      {"V1000 -inf prefix + bitmask", 1000, INGOT_DTYPE_F32, 1.0f, 0, 1.0f, 0.0f, 0.97, 1},
      {"V128 T1 ties (f16 grid)", 128, INGOT_DTYPE_F16, 1.0f, 0, 1.0f, 0.0f, 0.0, 0},
  };
  const int64_t B = 2000;
  const int calls = 6; /* 12000 draws per case */
  double min_p = 1.0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const chi_case *cc = &cases[c];
    int64_t V = cc->V, W = (V + 31) / 32;
    logits_buf lb;
    uint32_t *words = (uint32_t *)xmalloc((size_t)(B * W) * sizeof(uint32_t));
    oracle o;
    oracle_init(&o, V);
    float *row = (float *)xmalloc((size_t)V * sizeof(float));
    /* one random target row per case (redrawn if a filter boundary is ambiguous) */
    for (int attempt = 0;; attempt++) {
      for (int64_t i = 0; i < V; i++) {
        row[i] = cc->prefix && i < V / 2 ? -INFINITY : (float)(rand_normal() * 1.5);
        if (cc->dtype == INGOT_DTYPE_F16) row[i] = (float)(nearbyint((double)row[i] * 4.0) / 4.0);
      }
      for (int64_t w = 0; w < W; w++) words[w] = 0;
      for (int64_t i = 0; i < V; i++)
        if (test_rand_unit() >= cc->mask_fraction || i == V - 1) words[i / 32] |= 1u << (i % 32);
      lb_alloc(&lb, cc->dtype, B, V, V);
      for (int64_t i = 0; i < V; i++) lb_set(&lb, 0, i, row[i]);
      row_spec rs = {V, lb.x, cc->mask_fraction > 0.0 ? words : NULL, NULL, 0, NULL, NULL, 0,
                     cc->T, cc->k, cc->p, cc->q};
      oracle_run(&rs, &o);
      if (!o.ambiguous || attempt == 20) break;
      lb_free(&lb);
    }
    for (int64_t r = 1; r < B; r++) {
      memcpy((char *)lb.data + (size_t)(r * V) * ingot_dtype_size(cc->dtype), lb.data,
             (size_t)V * ingot_dtype_size(cc->dtype));
      memcpy(words + r * W, words, (size_t)W * sizeof(uint32_t));
    }
    float *temps = (float *)xmalloc((size_t)B * sizeof(float));
    int32_t *ks = (int32_t *)xmalloc((size_t)B * sizeof(int32_t));
    float *ps = (float *)xmalloc((size_t)B * sizeof(float)), *qs = (float *)xmalloc((size_t)B * sizeof(float));
    uint64_t *seeds = (uint64_t *)xmalloc((size_t)B * sizeof(uint64_t));
    int64_t *pos = (int64_t *)xmalloc((size_t)B * sizeof(int64_t));
    int32_t *tokens = (int32_t *)xmalloc((size_t)B * sizeof(int32_t));
    for (int64_t r = 0; r < B; r++) temps[r] = cc->T, ks[r] = cc->k, ps[r] = cc->p, qs[r] = cc->q;
    ingot_tensor tl = lb_tensor(&lb), tw = ingot_tensor_2d(words, INGOT_DTYPE_U32, B, W, W);
    ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B), tk = ingot_tensor_1d(ks, INGOT_DTYPE_I32, B);
    ingot_tensor tp = ingot_tensor_1d(ps, INGOT_DTYPE_F32, B), tq = ingot_tensor_1d(qs, INGOT_DTYPE_F32, B);
    ingot_tensor tsd = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, B), tpos = ingot_tensor_1d(pos, INGOT_DTYPE_I64, B);
    ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B);
    ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
    params.temperature = &tt;
    params.top_k = &tk;
    params.top_p = &tp;
    params.min_p = &tq;
    params.seed = &tsd;
    params.position = &tpos;
    if (cc->mask_fraction > 0.0) params.allowed = &tw;
    ws_buf ws = ws_for(B, V, cc->dtype, 0);
    long *counts = (long *)calloc((size_t)V, sizeof(long));
    long n = 0;
    for (int call = 0; call < calls; call++) {
      for (int64_t r = 0; r < B; r++) seeds[r] = test_rand(), pos[r] = (int64_t)(test_rand() >> 1);
      EXPECT_OK(ctx, ingot_sample(ctx, &tl, &params, &ttok, NULL, NULL, ws.p, ws.bytes, NULL));
      for (int64_t r = 0; r < B; r++) {
        if (tokens[r] >= 0 && tokens[r] < V) counts[tokens[r]]++, n++;
      }
    }
    int df = 0;
    double pv = chi_square(counts, o.prob, V, n, &df);
    printf("  chi-square %-34s %ld draws, df %3d, p = %.3g%s\n", cc->name, n, df, pv,
           o.ambiguous ? " (boundary ambiguous)" : "");
    EXPECT(n == B * calls, "%s: %ld valid tokens of %" PRId64, cc->name, n, B * calls);
    EXPECT(pv != -1.0, "%s: a token of probability 0 was drawn", cc->name);
    EXPECT(pv > P_FAIL, "%s: chi-square p = %.3g < %g", cc->name, pv, P_FAIL);
    if (pv >= 0.0 && pv < min_p) min_p = pv;
    free(counts);
    free(ws.p);
    free(temps), free(ks), free(ps), free(qs), free(seeds), free(pos), free(tokens);
    free(row);
    free(words);
    oracle_free(&o);
    lb_free(&lb);
  }
  printf("  smallest chi-square p-value of this run: %.3g (threshold %g)\n", min_p, P_FAIL);
  return 0;
}

/* ---- exact filter sets ---------------------------------------------------------------------- */

/* Random logits with many exact ties (a coarse grid) and random masks. */
static void random_row(logits_buf *lb, int64_t r, uint32_t *words, int masks) {
  int64_t V = lb->V;
  double scale = test_rand_unit() < 0.2 ? 40.0 : 3.0;
  int grid = test_rand_unit() < 0.5;
  for (int64_t i = 0; i < V; i++) {
    double v = rand_normal() * scale;
    if (grid) v = nearbyint(v * 2.0) / 2.0;
    if (masks && test_rand_unit() < 0.1) v = -(double)INFINITY;
    lb_set(lb, r, i, (float)v);
  }
  int64_t W = (V + 31) / 32;
  for (int64_t w = 0; w < W; w++)
    words[w] = masks && test_rand_unit() < 0.5 ? (uint32_t)test_rand() | (uint32_t)test_rand()
                                               : 0xffffffffu;
}

static float random_temperature(void) {
  double u = test_rand_unit();
  if (u < 0.1) return 0.0f;
  if (u < 0.15) return (float)(1e-3 * test_rand_unit() + 1e-6);
  if (u < 0.2) return (float)(50.0 + 500.0 * test_rand_unit());
  return (float)(0.2 + 2.0 * test_rand_unit());
}

static int32_t random_top_k(int64_t V) {
  switch (test_rand() % 6) {
    case 0: return 0;
    case 1: return 1;
    case 2: return (int32_t)V + (int32_t)(test_rand() % 3);
    default: return (int32_t)test_rand_range(1, V > 1 ? V - 1 : 1);
  }
}

static float random_top_p(void) {
  switch (test_rand() % 5) {
    case 0: return 1.0f;
    case 1: return 1e-6f;
    default: return (float)(0.05 + 0.94 * test_rand_unit());
  }
}

static float random_min_p(void) {
  switch (test_rand() % 5) {
    case 0:
    case 1: return 0.0f;
    case 2: return 1.0f;
    default: return (float)(0.3 * test_rand_unit());
  }
}

static int test_exact_filter_sets(void) {
  int checked = 0, ambiguous = 0, mismatched = 0;
  double worst_rel = 0.0;
  for (int iter = 0; iter < 300; iter++) {
    int64_t V = test_rand_range(1, iter < 150 ? 64 : 3000), W = (V + 31) / 32;
    const int64_t B = 4;
    ingot_dtype dt = random_dtype();
    logits_buf lb;
    lb_alloc(&lb, dt, B, V, V + (int64_t)(test_rand() % 3));
    uint32_t *words = (uint32_t *)xmalloc((size_t)(B * W) * sizeof(uint32_t));
    float temps[4], ps[4], qs[4];
    int32_t ks[4], tokens[4], top_ids[4 * 8];
    uint32_t status[4];
    uint64_t seeds[4];
    float lp[4], top_lp[4 * 8];
    for (int64_t r = 0; r < B; r++) {
      random_row(&lb, r, words + r * W, 1);
      temps[r] = random_temperature();
      ks[r] = random_top_k(V);
      ps[r] = random_top_p();
      qs[r] = random_min_p();
      seeds[r] = test_rand();
    }
    float *probs = (float *)xmalloc((size_t)(B * V) * sizeof(float));
    ingot_tensor tl = lb_tensor(&lb), tw = ingot_tensor_2d(words, INGOT_DTYPE_U32, B, W, W);
    ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B), tk = ingot_tensor_1d(ks, INGOT_DTYPE_I32, B);
    ingot_tensor tp = ingot_tensor_1d(ps, INGOT_DTYPE_F32, B), tq = ingot_tensor_1d(qs, INGOT_DTYPE_F32, B);
    ingot_tensor tsd = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, B);
    ingot_tensor tpr = ingot_tensor_2d(probs, INGOT_DTYPE_F32, B, V, V);
    ingot_tensor tst = ingot_tensor_1d(status, INGOT_DTYPE_U32, B);
    ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B);
    ingot_tensor tlp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, B);
    ingot_tensor tti = ingot_tensor_2d(top_ids, INGOT_DTYPE_I32, B, 8, 8);
    ingot_tensor ttl = ingot_tensor_2d(top_lp, INGOT_DTYPE_F32, B, 8, 8);
    ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
    params.temperature = &tt;
    params.top_k = &tk;
    params.top_p = &tp;
    params.min_p = &tq;
    params.seed = &tsd;
    params.allowed = &tw;
    ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
    lps.flags = INGOT_SAMPLING_TOP_FINAL;
    lps.token_logprob = &tlp;
    lps.top_ids = &tti;
    lps.top_logprobs = &ttl;
    ws_buf ws = ws_for(B, V, dt, 8);
    EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &tl, &params, &tpr, &tst, ws.p, ws.bytes, NULL));
    uint32_t status2[4];
    ingot_tensor tst2 = ingot_tensor_1d(status2, INGOT_DTYPE_U32, B);
    EXPECT_OK(ctx, ingot_sample(ctx, &tl, &params, &ttok, &tst2, &lps, ws.p, ws.bytes, NULL));
    oracle o;
    oracle_init(&o, V);
    for (int64_t r = 0; r < B; r++) {
      row_spec rs = {V, lb.x + r * V, words + r * W, NULL, 0, NULL, NULL, 0,
                     temps[r], ks[r], ps[r], qs[r]};
      oracle_run(&rs, &o);
      EXPECT(status[r] == o.flags && status2[r] == o.flags, "status %u / %u, oracle %u",
             status[r], status2[r], o.flags);
      if (o.ambiguous) {
        ambiguous++;
        continue;
      }
      checked++;
      int bad = 0;
      for (int64_t i = 0; i < V && !bad; i++) {
        double got = (double)probs[r * V + i], want = o.prob[i];
        int in_set = got > 0.0;
        if ((!o.keep[i] && in_set) || (o.keep[i] && want >= 1e-30 && !in_set)) {
          EXPECT(0, "V=%" PRId64 " T=%g k=%d p=%g q=%g: token %" PRId64
                 " kept %d by ingot, %d by the sort-based reference",
                 V, (double)temps[r], (int)ks[r], (double)ps[r], (double)qs[r], i, in_set,
                 o.keep[i]);
          bad = 1;
        } else if (want > 1e-30) {
          double rel = fabs(got - want) / want;
          if (want > 1e-6 && rel > worst_rel) worst_rel = rel;
          if (rel > 1e-4 && fabs(got - want) > 1e-30) {
            EXPECT(0, "token %" PRId64 ": prob %.9g, reference %.9g", i, got, want);
            bad = 1;
          }
        }
      }
      mismatched += bad;
      /* the draw lies in the set; its logprob; the final top-n */
      int32_t t = tokens[r];
      if (o.flags & INGOT_SAMPLING_ROW_EMPTY) {
        EXPECT(t == -1 && lp[r] == -INFINITY, "empty row: token %d logprob %g", (int)t,
               (double)lp[r]);
      } else {
        EXPECT(t >= 0 && t < V && o.keep[t], "drawn token %d outside the final set", (int)t);
        if (t >= 0 && t < V && o.prob[t] > 0.0)
          EXPECT(fabs((double)lp[r] - log(o.prob[t])) <= 1e-4 + 1e-5 * fabs(log(o.prob[t])),
                 "token logprob %.9g, reference %.9g", (double)lp[r], log(o.prob[t]));
        if (temps[r] == 0.0f) EXPECT(t == o.greedy, "greedy %d, reference %d", (int)t, (int)o.greedy);
      }
      /* top-n of the final distribution: the first kept tokens in rank order */
      int64_t j = 0;
      if (!(o.flags & INGOT_SAMPLING_ROW_EMPTY)) {
        if (temps[r] == 0.0f) {
          EXPECT(top_ids[r * 8] == o.greedy && top_lp[r * 8] == 0.0f, "greedy top-1");
          j = 1;
        } else {
          for (int64_t a = 0; a < o.nrank && j < 8; a++) {
            int64_t id = o.rank[a];
            if (!o.keep[id]) continue;
            EXPECT(top_ids[r * 8 + j] == id, "final top[%" PRId64 "] = %d, reference %" PRId64,
                   j, (int)top_ids[r * 8 + j], id);
            j++;
          }
        }
      }
      for (; j < 8; j++)
        EXPECT(top_ids[r * 8 + j] == -1 && top_lp[r * 8 + j] == -INFINITY,
               "padding top[%" PRId64 "] = %d", j, (int)top_ids[r * 8 + j]);
    }
    oracle_free(&o);
    free(ws.p);
    free(probs);
    free(words);
    lb_free(&lb);
  }
  printf("  %d rows: %d exact-set checks (%d mismatched), %d skipped at a rounding boundary; "
         "max rel err of kept probs %.3g\n",
         checked + ambiguous, checked, mismatched, ambiguous, worst_rel);
  EXPECT(ambiguous * 20 < checked + ambiguous, "too many ambiguous rows: %d", ambiguous);
  return 0;
}

/* ---- greedy ----------------------------------------------------------------------------------- */

static int test_greedy_ties(void) {
  const int64_t V = 100;
  float x[5 * 100];
  for (int i = 0; i < 5 * 100; i++) x[i] = (float)(i % 7) * 0.25f - 3.0f;
  /* row 0: maxima at 17, 40, 83 -> 17 */
  x[17] = x[40] = x[83] = 9.0f;
  /* row 1: the same but 17 masked by the bitmask and 40 banned -> 83 */
  x[100 + 17] = x[100 + 40] = x[100 + 83] = 9.0f;
  /* row 2: -0.0 and +0.0 are equal maxima -> the lower id */
  for (int i = 0; i < 100; i++) x[200 + i] = -1.0f;
  x[200 + 55] = 0.0f;
  x[200 + 12] = -0.0f;
  /* row 3: maxima at 3 and 99 after a bias lifts 99 to equal -> 3 */
  x[300 + 3] = 5.0f;
  x[300 + 99] = 4.0f;
  /* row 4: all equal -> 0 */
  for (int i = 0; i < 100; i++) x[400 + i] = 1.5f;
  uint32_t words[5 * 4];
  for (int i = 0; i < 20; i++) words[i] = 0xffffffffu;
  words[4 + 0] &= ~(1u << 17);
  int32_t banned[2] = {1, 40};
  int32_t bias_ids[2] = {3, 99};
  float bias_vals[1] = {1.0f};
  float temps[5] = {0, 0, 0, 0, 0}, ks_p[5] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  int32_t tokens[5];
  uint32_t status[5];
  float lp[5], raw[5];
  ingot_tensor tl = ingot_tensor_2d(x, INGOT_DTYPE_F32, 5, V, V);
  ingot_tensor tw = ingot_tensor_2d(words, INGOT_DTYPE_U32, 5, 4, 4);
  ingot_tensor tb = ingot_tensor_2d(banned, INGOT_DTYPE_I32, 1, 2, 2);
  ingot_tensor tbi = ingot_tensor_2d(bias_ids, INGOT_DTYPE_I32, 1, 2, 2);
  ingot_tensor tbv = ingot_tensor_1d(bias_vals, INGOT_DTYPE_F32, 1);
  ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, 5);
  ingot_tensor tp = ingot_tensor_1d(ks_p, INGOT_DTYPE_F32, 5);
  ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, 5);
  ingot_tensor tst = ingot_tensor_1d(status, INGOT_DTYPE_U32, 5);
  ingot_tensor tlp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, 5), traw = ingot_tensor_1d(raw, INGOT_DTYPE_F32, 5);
  ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
  params.temperature = &tt;
  params.top_p = &tp;
  params.allowed = &tw;
  params.banned = &tb;
  params.bias_ids = &tbi;
  params.bias_values = &tbv;
  ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  lps.token_logprob = &tlp;
  lps.token_raw_logprob = &traw;
  ws_buf ws = ws_for(5, V, INGOT_DTYPE_F32, 0);
  EXPECT_OK(ctx, ingot_sample(ctx, &tl, &params, &ttok, &tst, &lps, ws.p, ws.bytes, NULL));
  static const int32_t want[5] = {17, 83, 12, 3, 0};
  for (int r = 0; r < 5; r++) {
    EXPECT(tokens[r] == want[r], "greedy row %d: token %d, want %d", r, (int)tokens[r], (int)want[r]);
    EXPECT(lp[r] == 0.0f, "greedy row %d: final logprob %g", r, (double)lp[r]);
    EXPECT(status[r] == 0, "greedy row %d: status %u", r, status[r]);
    double raw_want = oracle_raw_logprob(x + r * V, V, 0.0f, want[r], NULL, NULL);
    EXPECT(fabs((double)raw[r] - raw_want) < 1e-5, "greedy row %d: raw logprob %g, want %g", r,
           (double)raw[r], raw_want);
  }
  /* the softmax of greedy rows is one-hot */
  float probs[5 * 100];
  ingot_tensor tpr = ingot_tensor_2d(probs, INGOT_DTYPE_F32, 5, V, V);
  EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &tl, &params, &tpr, NULL, ws.p, ws.bytes, NULL));
  for (int r = 0; r < 5; r++)
    for (int i = 0; i < V; i++)
      EXPECT(probs[r * V + i] == (i == want[r] ? 1.0f : 0.0f), "one-hot row %d col %d: %g", r, i,
             (double)probs[r * V + i]);
  /* bf16 ties: 1.00390625 and 1.0 collapse to the same bf16 value */
  uint16_t hb[8];
  for (int i = 0; i < 8; i++) hb[i] = bf16_of(0.5f);
  hb[6] = bf16_of(1.0f);
  hb[2] = bf16_of(1.00390625f); /* rounds to 1.0 in bf16 */
  ingot_tensor tlb = ingot_tensor_2d(hb, INGOT_DTYPE_BF16, 1, 8, 8);
  float t0 = 0.0f;
  ingot_tensor tt0 = ingot_tensor_1d(&t0, INGOT_DTYPE_F32, 1);
  ingot_sampling_params p1 = INGOT_SAMPLING_PARAMS_INITIALIZER;
  p1.temperature = &tt0;
  ingot_tensor tk1 = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, 1);
  EXPECT_OK(ctx, ingot_sample(ctx, &tlb, &p1, &tk1, NULL, NULL, ws.p, ws.bytes, NULL));
  EXPECT(tokens[0] == 2, "bf16 tie: token %d, want 2", (int)tokens[0]);
  free(ws.p);
  return 0;
}

/* ---- determinism and batch invariance ---------------------------------------------------------- */

typedef struct one_row {
  float temperature, top_p, min_p;
  int32_t top_k;
  uint64_t seed, position;
} one_row;

static int test_batch_invariance(void) {
  const int64_t V = 5003, BIG = 64, AT = 37, NTOP = 5;
  ingot_dtype dt = random_dtype();
  logits_buf big;
  lb_alloc(&big, dt, BIG, V, V + 7);
  int64_t W = (V + 31) / 32;
  uint32_t *words = (uint32_t *)xmalloc((size_t)(BIG * W) * sizeof(uint32_t));
  float temps[64], ps[64], qs[64], lp[64], raw[64], toplp[64 * 5];
  int32_t ks[64], tokens[64], tids[64 * 5];
  uint32_t status[64];
  uint64_t seeds[64], pos[64];
  ws_buf ws = ws_for(BIG, V, dt, NTOP);
  int differs_by_position = 0;
  for (int trial = 0; trial < 12; trial++) {
    /* neighbours: random rows, some empty or NaN */
    for (int64_t r = 0; r < BIG; r++) {
      random_row(&big, r, words + r * W, 1);
      if (r % 9 == 4)
        for (int64_t i = 0; i < V; i++) lb_set(&big, r, i, NAN);
      if (r % 11 == 5) memset(words + r * W, 0, (size_t)W * sizeof(uint32_t));
      temps[r] = random_temperature();
      ks[r] = random_top_k(V);
      ps[r] = random_top_p();
      qs[r] = random_min_p();
      seeds[r] = test_rand();
      pos[r] = test_rand();
    }
    temps[AT] = (float)(0.5 + test_rand_unit());
    ks[AT] = trial % 3 == 0 ? 0 : 50;
    ps[AT] = trial % 2 ? 0.9f : 1.0f;
    qs[AT] = trial % 4 == 1 ? 0.01f : 0.0f;
    ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, BIG), tk = ingot_tensor_1d(ks, INGOT_DTYPE_I32, BIG);
    ingot_tensor tp = ingot_tensor_1d(ps, INGOT_DTYPE_F32, BIG), tq = ingot_tensor_1d(qs, INGOT_DTYPE_F32, BIG);
    ingot_tensor tsd = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, BIG), tpos = ingot_tensor_1d(pos, INGOT_DTYPE_U64, BIG);
    ingot_tensor tl = lb_tensor(&big), tw = ingot_tensor_2d(words, INGOT_DTYPE_U32, BIG, W, W);
    ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, BIG), tst = ingot_tensor_1d(status, INGOT_DTYPE_U32, BIG);
    ingot_tensor tlp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, BIG), traw = ingot_tensor_1d(raw, INGOT_DTYPE_F32, BIG);
    ingot_tensor tti = ingot_tensor_2d(tids, INGOT_DTYPE_I32, BIG, NTOP, NTOP);
    ingot_tensor ttl = ingot_tensor_2d(toplp, INGOT_DTYPE_F32, BIG, NTOP, NTOP);
    ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
    params.temperature = &tt, params.top_k = &tk, params.top_p = &tp, params.min_p = &tq;
    params.seed = &tsd, params.position = &tpos, params.allowed = &tw;
    ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
    lps.token_logprob = &tlp, lps.token_raw_logprob = &traw, lps.top_ids = &tti,
    lps.top_logprobs = &ttl;
    EXPECT_OK(ctx, ingot_sample(ctx, &tl, &params, &ttok, &tst, &lps, ws.p, ws.bytes, NULL));

    /* the same row alone, as row 0 of B = 1 (own buffers, another stride) */
    logits_buf one;
    lb_alloc(&one, dt, 1, V, V);
    memcpy(one.data, (char *)big.data + (size_t)(AT * big.stride) * ingot_dtype_size(dt),
           (size_t)V * ingot_dtype_size(dt));
    float t1 = temps[AT], p1 = ps[AT], q1 = qs[AT], lp1, raw1, tlp1[5];
    int32_t k1 = ks[AT], tok1, tids1[5];
    uint32_t st1;
    uint64_t s1 = seeds[AT], pos1 = pos[AT];
    ingot_tensor a_tt = ingot_tensor_1d(&t1, INGOT_DTYPE_F32, 1), a_tk = ingot_tensor_1d(&k1, INGOT_DTYPE_I32, 1);
    ingot_tensor a_tp = ingot_tensor_1d(&p1, INGOT_DTYPE_F32, 1), a_tq = ingot_tensor_1d(&q1, INGOT_DTYPE_F32, 1);
    ingot_tensor a_sd = ingot_tensor_1d(&s1, INGOT_DTYPE_I64, 1), a_pos = ingot_tensor_1d(&pos1, INGOT_DTYPE_U64, 1);
    ingot_tensor a_l = lb_tensor(&one), a_w = ingot_tensor_2d(words + AT * W, INGOT_DTYPE_I32, 1, W, W);
    ingot_tensor a_tok = ingot_tensor_1d(&tok1, INGOT_DTYPE_I32, 1), a_st = ingot_tensor_1d(&st1, INGOT_DTYPE_I32, 1);
    ingot_tensor a_lp = ingot_tensor_1d(&lp1, INGOT_DTYPE_F32, 1), a_raw = ingot_tensor_1d(&raw1, INGOT_DTYPE_F32, 1);
    ingot_tensor a_ti = ingot_tensor_2d(tids1, INGOT_DTYPE_I32, 1, NTOP, NTOP);
    ingot_tensor a_tl = ingot_tensor_2d(tlp1, INGOT_DTYPE_F32, 1, NTOP, NTOP);
    ingot_sampling_params pa = INGOT_SAMPLING_PARAMS_INITIALIZER;
    pa.temperature = &a_tt, pa.top_k = &a_tk, pa.top_p = &a_tp, pa.min_p = &a_tq;
    pa.seed = &a_sd, pa.position = &a_pos, pa.allowed = &a_w;
    ingot_sampling_logprobs la = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
    la.token_logprob = &a_lp, la.token_raw_logprob = &a_raw, la.top_ids = &a_ti,
    la.top_logprobs = &a_tl;
    for (int rep = 0; rep < 2; rep++) {
      EXPECT_OK(ctx, ingot_sample(ctx, &a_l, &pa, &a_tok, &a_st, &la, ws.p, ws.bytes, NULL));
      EXPECT(tok1 == tokens[AT] && st1 == status[AT], "trial %d: B=1 token %d / B=64 row 37 token %d",
             trial, (int)tok1, (int)tokens[AT]);
      EXPECT(f_bits(lp1) == f_bits(lp[AT]) && f_bits(raw1) == f_bits(raw[AT]),
             "trial %d: logprobs differ between B=1 and B=64", trial);
      EXPECT(memcmp(tids1, tids + AT * NTOP, sizeof tids1) == 0 &&
                 memcmp(tlp1, toplp + AT * NTOP, sizeof tlp1) == 0,
             "trial %d: top-n differ", trial);
    }
    /* another position usually draws differently */
    int32_t first = tok1;
    for (int d = 0; d < 16 && !differs_by_position; d++) {
      pos1 = test_rand();
      EXPECT_OK(ctx, ingot_sample(ctx, &a_l, &pa, &a_tok, NULL, NULL, ws.p, ws.bytes, NULL));
      if (tok1 != first) differs_by_position = 1;
    }
    lb_free(&one);
  }
  EXPECT(differs_by_position, "different positions never changed the draw");
  free(ws.p);
  free(words);
  lb_free(&big);
  return 0;
}

/* ---- empty and NaN rows ---------------------------------------------------------------------- */

static int test_empty_and_nan_rows(void) {
  const int64_t V = 1000, B = 8, W = (V + 31) / 32;
  logits_buf lb;
  lb_alloc(&lb, INGOT_DTYPE_F32, B, V, V);
  uint32_t *words = (uint32_t *)xmalloc((size_t)(B * W) * sizeof(uint32_t));
  for (int64_t r = 0; r < B; r++) random_row(&lb, r, words + r * W, 0);
  for (int64_t i = 0; i < V; i++) {
    lb_set(&lb, 1, i, -INFINITY);                      /* all -Inf */
    lb_set(&lb, 2, i, NAN);                            /* all NaN */
    if (i % 3 == 0) lb_set(&lb, 3, i, NAN);            /* some NaN */
    if (i % 5 == 1) lb_set(&lb, 5, i, INFINITY);       /* some +Inf */
  }
  memset(words + 4 * W, 0, (size_t)W * sizeof(uint32_t)); /* row 4: bitmask allows nothing */
  /* row 6: 2 tokens allowed by the bitmask, both banned */
  memset(words + 6 * W, 0, (size_t)W * sizeof(uint32_t));
  words[6 * W + 3] = (1u << 4) | (1u << 9);
  int32_t banned[2 * 3] = {6, 3 * 32 + 4, 6, 3 * 32 + 9, -1, 7};
  float temps[8], lp[8], raw[8], probs[8 * 1000];
  int32_t tokens[8];
  uint32_t status[8], status_sm[8];
  uint64_t seeds[8];
  for (int64_t r = 0; r < B; r++) temps[r] = 0.8f, seeds[r] = test_rand();
  temps[7] = 0.0f;
  ingot_tensor tl = lb_tensor(&lb), tw = ingot_tensor_2d(words, INGOT_DTYPE_U32, B, W, W);
  ingot_tensor tb = ingot_tensor_2d(banned, INGOT_DTYPE_I32, 3, 2, 2);
  ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B), tsd = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, B);
  ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B), tst = ingot_tensor_1d(status, INGOT_DTYPE_U32, B);
  ingot_tensor tlp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, B), traw = ingot_tensor_1d(raw, INGOT_DTYPE_F32, B);
  ingot_tensor tpr = ingot_tensor_2d(probs, INGOT_DTYPE_F32, B, V, V);
  ingot_tensor tss = ingot_tensor_1d(status_sm, INGOT_DTYPE_U32, B);
  ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
  params.temperature = &tt, params.seed = &tsd, params.allowed = &tw, params.banned = &tb;
  ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  lps.token_logprob = &tlp, lps.token_raw_logprob = &traw;
  ws_buf ws = ws_for(B, V, INGOT_DTYPE_F32, 0);
  EXPECT_OK(ctx, ingot_sample(ctx, &tl, &params, &ttok, &tst, &lps, ws.p, ws.bytes, NULL));
  EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &tl, &params, &tpr, &tss, ws.p, ws.bytes, NULL));
  static const uint32_t want_status[8] = {0,
                                          INGOT_SAMPLING_ROW_EMPTY,
                                          INGOT_SAMPLING_ROW_EMPTY | INGOT_SAMPLING_ROW_NAN,
                                          INGOT_SAMPLING_ROW_NAN,
                                          INGOT_SAMPLING_ROW_EMPTY,
                                          INGOT_SAMPLING_ROW_NAN,
                                          INGOT_SAMPLING_ROW_EMPTY,
                                          0};
  for (int64_t r = 0; r < B; r++) {
    EXPECT(status[r] == want_status[r] && status_sm[r] == want_status[r],
           "row %" PRId64 ": status %u / %u, want %u", r, status[r], status_sm[r], want_status[r]);
    int empty = (want_status[r] & INGOT_SAMPLING_ROW_EMPTY) != 0;
    if (empty) {
      EXPECT(tokens[r] == -1 && lp[r] == -INFINITY && raw[r] == -INFINITY,
             "empty row %" PRId64 ": token %d logprob %g raw %g", r, (int)tokens[r], (double)lp[r],
             (double)raw[r]);
      for (int64_t i = 0; i < V; i++)
        EXPECT(probs[r * V + i] == 0.0f, "empty row %" PRId64 " prob[%" PRId64 "] = %g", r, i,
               (double)probs[r * V + i]);
    } else {
      EXPECT(tokens[r] >= 0 && isfinite(lb.x[r * V + tokens[r]]),
             "row %" PRId64 ": token %d has logit %g", r, (int)tokens[r],
             tokens[r] >= 0 ? (double)lb.x[r * V + tokens[r]] : 0.0);
      EXPECT(isfinite(lp[r]) && isfinite(raw[r]), "row %" PRId64 ": logprobs %g %g", r,
             (double)lp[r], (double)raw[r]);
      double sum = 0.0;
      for (int64_t i = 0; i < V; i++) {
        EXPECT(isfinite(probs[r * V + i]), "row %" PRId64 ": prob not finite", r);
        if (!isfinite(lb.x[r * V + i])) EXPECT(probs[r * V + i] == 0.0f, "NaN/Inf token has prob");
        sum += (double)probs[r * V + i];
      }
      EXPECT(fabs(sum - 1.0) < 1e-5, "row %" PRId64 " sums to %.9g", r, sum);
    }
    /* every row equals the same row computed alone */
    int32_t tok1;
    uint32_t st1;
    ingot_tensor a_l = ingot_tensor_2d(lb.x + r * V, INGOT_DTYPE_F32, 1, V, V);
    ingot_tensor a_w = ingot_tensor_2d(words + r * W, INGOT_DTYPE_U32, 1, W, W);
    int32_t ban1[4] = {0, banned[1], 0, banned[3]};
    ingot_tensor a_b = ingot_tensor_2d(ban1, INGOT_DTYPE_I32, r == 6 ? 2 : 0, 2, 2);
    ingot_tensor a_t = ingot_tensor_1d(temps + r, INGOT_DTYPE_F32, 1);
    ingot_tensor a_s = ingot_tensor_1d(seeds + r, INGOT_DTYPE_U64, 1);
    ingot_tensor a_tok = ingot_tensor_1d(&tok1, INGOT_DTYPE_I32, 1), a_st = ingot_tensor_1d(&st1, INGOT_DTYPE_U32, 1);
    ingot_sampling_params pa = INGOT_SAMPLING_PARAMS_INITIALIZER;
    pa.temperature = &a_t, pa.seed = &a_s, pa.allowed = &a_w, pa.banned = &a_b;
    EXPECT_OK(ctx, ingot_sample(ctx, &a_l, &pa, &a_tok, &a_st, NULL, ws.p, ws.bytes, NULL));
    EXPECT(tok1 == tokens[r] && st1 == status[r], "row %" PRId64 " alone: token %d status %u, in "
           "the batch %d %u", r, (int)tok1, st1, (int)tokens[r], status[r]);
  }
  free(ws.p);
  free(words);
  lb_free(&lb);
  return 0;
}

/* ---- sparse lists --------------------------------------------------------------------------- */

static int test_sparse_lists(void) {
  for (int iter = 0; iter < 40; iter++) {
    const int64_t B = 6;
    int64_t V = test_rand_range(2, 700), W = (V + 31) / 32;
    logits_buf lb, lb2;
    lb_alloc(&lb, INGOT_DTYPE_F32, B, V, V);
    lb_alloc(&lb2, INGOT_DTYPE_F32, B, V, V);
    uint32_t *words = (uint32_t *)xmalloc((size_t)(B * W) * sizeof(uint32_t));
    uint32_t *words2 = (uint32_t *)xmalloc((size_t)(B * W) * sizeof(uint32_t));
    for (int64_t r = 0; r < B; r++) random_row(&lb, r, words + r * W, 0);
    memcpy(lb2.data, lb.data, (size_t)(B * V) * sizeof(float));
    for (int64_t i = 0; i < B * W; i++) words2[i] = 0xffffffffu;
    /* banned list (with padding and bad entries) vs the bitmask */
    enum { NB = 40, NBIAS = 40 };
    int32_t banned[NB * 3];
    int bad_rows = 0;
    for (int j = 0; j < NB; j++) {
      int32_t r = (int32_t)test_rand_range(-1, B), t = (int32_t)test_rand_range(0, V - 1);
      if (j % 13 == 7) t = (int32_t)(j % 2 ? V + j : -1 - j), bad_rows |= r >= 0 && r < B ? 1 << r : 0;
      banned[j * 3] = r, banned[j * 3 + 1] = t, banned[j * 3 + 2] = 12345; /* stride 3 */
      if (r >= 0 && r < B && t >= 0 && t < V) words2[r * W + t / 32] &= ~(1u << (t % 32));
    }
    /* bias list vs logits with the bias pre-added in list order */
    int32_t bias_ids[NBIAS * 2];
    float bias_vals[NBIAS];
    for (int j = 0; j < NBIAS; j++) {
      int32_t r = (int32_t)test_rand_range(-1, B), t = (int32_t)test_rand_range(0, V - 1);
      if (j % 3 == 0 && j > 0) t = bias_ids[(j - 1) * 2 + 1], r = bias_ids[(j - 1) * 2]; /* duplicates */
      float b = (float)(rand_normal() * 2.0);
      if (j % 17 == 5) b = -INFINITY;
      if (j % 11 == 10) t = (int32_t)(V + 3), bad_rows |= r >= 0 && r < B ? 1 << r : 0;
      bias_ids[j * 2] = r, bias_ids[j * 2 + 1] = t, bias_vals[j] = b;
      if (r >= 0 && r < B && t >= 0 && t < V) {
        float *v = (float *)lb2.data + r * V + t;
        *v = *v + b;
      }
    }
    float temps[6], lp[6], lp2[6], probs[6 * 700], probs2[6 * 700];
    int32_t tokens[6], tokens2[6], ks[6];
    uint32_t st[6], st2[6];
    uint64_t seeds[6];
    for (int64_t r = 0; r < B; r++)
      temps[r] = random_temperature(), ks[r] = random_top_k(V), seeds[r] = test_rand();
    ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B), tk = ingot_tensor_1d(ks, INGOT_DTYPE_I32, B);
    ingot_tensor tsd = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, B);
    ingot_tensor tl = lb_tensor(&lb), tl2 = lb_tensor(&lb2);
    ingot_tensor tw2 = ingot_tensor_2d(words2, INGOT_DTYPE_U32, B, W, W);
    ingot_tensor tb = {banned, INGOT_DTYPE_I32, 2, {NB, 2, 0, 0}, {3, 1, 0, 0}};
    ingot_tensor tbi = ingot_tensor_2d(bias_ids, INGOT_DTYPE_I32, NBIAS, 2, 2);
    ingot_tensor tbv = ingot_tensor_1d(bias_vals, INGOT_DTYPE_F32, NBIAS);
    ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B), ttok2 = ingot_tensor_1d(tokens2, INGOT_DTYPE_I32, B);
    ingot_tensor tst = ingot_tensor_1d(st, INGOT_DTYPE_U32, B), tst2 = ingot_tensor_1d(st2, INGOT_DTYPE_U32, B);
    ingot_tensor tlp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, B), tlp2 = ingot_tensor_1d(lp2, INGOT_DTYPE_F32, B);
    ingot_tensor tpr = ingot_tensor_2d(probs, INGOT_DTYPE_F32, B, V, V), tpr2 = ingot_tensor_2d(probs2, INGOT_DTYPE_F32, B, V, V);
    ingot_sampling_params pl = INGOT_SAMPLING_PARAMS_INITIALIZER, pm = INGOT_SAMPLING_PARAMS_INITIALIZER;
    pl.temperature = pm.temperature = &tt;
    pl.top_k = pm.top_k = &tk;
    pl.seed = pm.seed = &tsd;
    pl.banned = &tb, pl.bias_ids = &tbi, pl.bias_values = &tbv;
    pm.allowed = &tw2;
    ingot_sampling_logprobs l1 = INGOT_SAMPLING_LOGPROBS_INITIALIZER, l2 = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
    l1.token_logprob = &tlp, l2.token_logprob = &tlp2;
    ws_buf ws = ws_for(B, V, INGOT_DTYPE_F32, 0);
    EXPECT_OK(ctx, ingot_sample(ctx, &tl, &pl, &ttok, &tst, &l1, ws.p, ws.bytes, NULL));
    EXPECT_OK(ctx, ingot_sample(ctx, &tl2, &pm, &ttok2, &tst2, &l2, ws.p, ws.bytes, NULL));
    EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &tl, &pl, &tpr, NULL, ws.p, ws.bytes, NULL));
    EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &tl2, &pm, &tpr2, NULL, ws.p, ws.bytes, NULL));
    for (int64_t r = 0; r < B; r++) {
      uint32_t want = st2[r] | ((bad_rows >> r) & 1 ? (uint32_t)INGOT_SAMPLING_ROW_BAD_ENTRY : 0u);
      EXPECT(tokens[r] == tokens2[r] && f_bits(lp[r]) == f_bits(lp2[r]) && st[r] == want,
             "iter %d row %" PRId64 ": lists give token %d status %u, bitmask/pre-added %d %u",
             iter, r, (int)tokens[r], st[r], (int)tokens2[r], want);
    }
    EXPECT(memcmp(probs, probs2, (size_t)(B * V) * sizeof(float)) == 0,
           "iter %d: softmax with lists differs from bitmask/pre-added", iter);
    free(ws.p);
    free(words);
    free(words2);
    lb_free(&lb);
    lb_free(&lb2);
  }
  /* a NaN bias and a +Inf bias flag the row and mask the token */
  float x[4] = {1.0f, 2.0f, 3.0f, 0.5f};
  int32_t ids[4] = {0, 2, 0, 1};
  float vals[2] = {NAN, INFINITY};
  int32_t tok;
  uint32_t st;
  float probs[4];
  ingot_tensor tl = ingot_tensor_2d(x, INGOT_DTYPE_F32, 1, 4, 4);
  ingot_tensor tbi = ingot_tensor_2d(ids, INGOT_DTYPE_I32, 2, 2, 2);
  ingot_tensor tbv = ingot_tensor_1d(vals, INGOT_DTYPE_F32, 2);
  ingot_tensor ttok = ingot_tensor_1d(&tok, INGOT_DTYPE_I32, 1), tst = ingot_tensor_1d(&st, INGOT_DTYPE_U32, 1);
  ingot_tensor tpr = ingot_tensor_2d(probs, INGOT_DTYPE_F32, 1, 4, 4);
  ingot_sampling_params p = INGOT_SAMPLING_PARAMS_INITIALIZER;
  p.bias_ids = &tbi, p.bias_values = &tbv;
  ws_buf ws = ws_for(1, 4, INGOT_DTYPE_F32, 0);
  EXPECT_OK(ctx, ingot_sample(ctx, &tl, &p, &ttok, &tst, NULL, ws.p, ws.bytes, NULL));
  EXPECT(st == INGOT_SAMPLING_ROW_NAN && (tok == 0 || tok == 3), "NaN/Inf bias: token %d status %u",
         (int)tok, st);
  EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &tl, &p, &tpr, NULL, ws.p, ws.bytes, NULL));
  EXPECT(probs[1] == 0.0f && probs[2] == 0.0f && probs[0] > 0.0f && probs[3] > 0.0f,
         "NaN/Inf-biased tokens must get 0");
  free(ws.p);
  return 0;
}

/* ---- logprobs and top-n of the raw distribution --------------------------------------------- */

static int test_raw_logprobs_and_top(void) {
  double worst = 0.0;
  for (int iter = 0; iter < 60; iter++) {
    const int64_t B = 3, N = 1 + (int64_t)(test_rand() % 12);
    int64_t V = test_rand_range(1, 400), W = (V + 31) / 32;
    ingot_dtype dt = random_dtype();
    logits_buf lb;
    lb_alloc(&lb, dt, B, V, V);
    uint32_t *words = (uint32_t *)xmalloc((size_t)(B * W) * sizeof(uint32_t));
    for (int64_t r = 0; r < B; r++) random_row(&lb, r, words + r * W, 1);
    float temps[3], lp[3], raw[3], top_lp[3 * 16];
    int32_t tokens[3], top_ids[3 * 16];
    uint64_t seeds[3];
    for (int64_t r = 0; r < B; r++) temps[r] = random_temperature(), seeds[r] = test_rand();
    ingot_tensor tl = lb_tensor(&lb), tw = ingot_tensor_2d(words, INGOT_DTYPE_U32, B, W, W);
    ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B), tsd = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, B);
    ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B);
    ingot_tensor tlp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, B), traw = ingot_tensor_1d(raw, INGOT_DTYPE_F32, B);
    ingot_tensor tti = ingot_tensor_2d(top_ids, INGOT_DTYPE_I32, B, N, 16);
    ingot_tensor ttl = ingot_tensor_2d(top_lp, INGOT_DTYPE_F32, B, N, 16);
    ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
    params.temperature = &tt, params.seed = &tsd, params.allowed = &tw;
    ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
    lps.token_logprob = &tlp, lps.token_raw_logprob = &traw, lps.top_ids = &tti,
    lps.top_logprobs = &ttl;
    ws_buf ws = ws_for(B, V, dt, N);
    EXPECT_OK(ctx, ingot_sample(ctx, &tl, &params, &ttok, NULL, &lps, ws.p, ws.bytes, NULL));
    float *scaled = (float *)xmalloc((size_t)V * sizeof(float));
    int64_t *order = (int64_t *)xmalloc((size_t)V * sizeof(int64_t));
    for (int64_t r = 0; r < B; r++) {
      double log_z;
      double want = oracle_raw_logprob(lb.x + r * V, V, temps[r], tokens[r], &log_z, scaled);
      if (tokens[r] < 0) {
        EXPECT(raw[r] == -INFINITY, "raw logprob of token -1: %g", (double)raw[r]);
      } else {
        double err = fabs((double)raw[r] - want);
        if (err > worst) worst = err;
        EXPECT(err <= 1e-5 + 2e-6 * fabs(want), "raw logprob %.9g, oracle %.9g", (double)raw[r], want);
      }
      /* top-n: rank order of the raw scaled values */
      int64_t n = 0;
      for (int64_t i = 0; i < V; i++)
        if (scaled[i] != -INFINITY) order[n++] = i;
      g_sort_key = scaled;
      qsort(order, (size_t)n, sizeof(int64_t), oracle_rank_cmp);
      for (int64_t j = 0; j < N; j++) {
        int32_t id = j < n ? (int32_t)order[j] : -1;
        double wl = j < n ? (double)scaled[order[j]] - log_z : -(double)INFINITY;
        EXPECT(top_ids[r * 16 + j] == id, "raw top[%" PRId64 "] = %d, oracle %d", j,
               (int)top_ids[r * 16 + j], (int)id);
        EXPECT(j >= n ? top_lp[r * 16 + j] == -INFINITY
                      : fabs((double)top_lp[r * 16 + j] - wl) <= 1e-5 + 2e-6 * fabs(wl),
               "raw top[%" PRId64 "] logprob %g, oracle %g", j, (double)top_lp[r * 16 + j], wl);
      }
    }
    free(scaled);
    free(order);
    free(ws.p);
    free(words);
    lb_free(&lb);
  }
  printf("  raw log-probabilities: max abs error vs oracle %.3g\n", worst);
  return 0;
}

/* ---- dtypes and strides ------------------------------------------------------------------------ */

static int test_dtypes_and_strides(void) {
  const int64_t B = 5, V = 777;
  /* values on the f16 grid are exact in f32, bf16 (8 bits) when coarse enough, and f16 */
  float vals[5 * 777];
  for (int64_t i = 0; i < B * V; i++) vals[i] = (float)(nearbyint(rand_normal() * 8.0) / 4.0);
  vals[3] = -INFINITY;
  static const ingot_dtype dts[3] = {INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16};
  int32_t tokens[3][5], top_ids[3][5 * 4];
  float lp[3][5], probs[3][5 * 800];
  float temps[5] = {1.0f, 0.5f, 0.0f, 2.0f, 1.0f}, ps[5] = {1.0f, 0.9f, 1.0f, 0.5f, 0.99f};
  uint64_t seeds[5] = {1, 2, 3, 4, 5};
  for (int d = 0; d < 3; d++) {
    logits_buf lb;
    lb_alloc(&lb, dts[d], B, V, V + 3 + d);
    for (int64_t r = 0; r < B; r++)
      for (int64_t i = 0; i < V; i++) lb_set(&lb, r, i, vals[r * V + i]);
    EXPECT(memcmp(lb.x, vals, sizeof vals) == 0, "%s does not hold the values exactly",
           ingot_dtype_name(dts[d]));
    ingot_tensor tl = lb_tensor(&lb);
    ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B), tp = ingot_tensor_1d(ps, INGOT_DTYPE_F32, B);
    ingot_tensor tsd = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, B);
    ingot_tensor ttok = ingot_tensor_1d(tokens[d], INGOT_DTYPE_I32, B);
    ingot_tensor tlp = ingot_tensor_1d(lp[d], INGOT_DTYPE_F32, B);
    ingot_tensor tti = ingot_tensor_2d(top_ids[d], INGOT_DTYPE_I32, B, 3, 4); /* strided */
    ingot_tensor tpr = ingot_tensor_2d(probs[d], INGOT_DTYPE_F32, B, V, 800);
    ingot_sampling_params params = INGOT_SAMPLING_PARAMS_INITIALIZER;
    params.temperature = &tt, params.top_p = &tp, params.seed = &tsd;
    ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
    lps.token_logprob = &tlp, lps.top_ids = &tti;
    memset(top_ids[d], 0x5a, sizeof top_ids[d]);
    memset(probs[d], 0, sizeof probs[d]);
    ws_buf ws = ws_for(B, V, dts[d], 3);
    EXPECT_OK(ctx, ingot_sample(ctx, &tl, &params, &ttok, NULL, &lps, ws.p, ws.bytes, NULL));
    EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &tl, &params, &tpr, NULL, ws.p, ws.bytes, NULL));
    for (int64_t r = 0; r < B; r++) {
      EXPECT(top_ids[d][r * 4 + 3] == 0x5a5a5a5a, "top_ids stride padding written");
      for (int64_t i = V; i < 800 && r < B - 1; i++)
        EXPECT(probs[d][r * 800 + i] == 0.0f, "probs padding written");
    }
    if (d > 0) {
      EXPECT(memcmp(tokens[d], tokens[0], sizeof tokens[0]) == 0, "%s tokens differ from f32",
             ingot_dtype_name(dts[d]));
      EXPECT(memcmp(lp[d], lp[0], sizeof lp[0]) == 0, "%s logprobs differ", ingot_dtype_name(dts[d]));
      EXPECT(memcmp(probs[d], probs[0], sizeof probs[0]) == 0, "%s probs differ", ingot_dtype_name(dts[d]));
      for (int64_t r = 0; r < B; r++)
        EXPECT(memcmp(top_ids[d] + r * 4, top_ids[0] + r * 4, 3 * sizeof(int32_t)) == 0,
               "%s top ids differ", ingot_dtype_name(dts[d]));
    }
    free(ws.p);
    lb_free(&lb);
  }
  return 0;
}

/* ---- bad arguments ------------------------------------------------------------------------------- */

#define EXPECT_FAIL(call, want_status, needle) EXPECT_ERROR(ctx, call, want_status, needle)
#define EXPECT_REJECT(call, needle) EXPECT_FAIL(call, INGOT_STATUS_INVALID_ARGUMENT, needle)

static int test_invalid_arguments(void) {
  enum { B = 3, V = 40, W = 2 };
  float x[B * V], temps[B] = {1.0f, 0.5f, 0.0f}, ps[B] = {1.0f, 0.9f, 0.5f}, qs[B] = {0, 0, 0};
  float probs[B * V], lp[B], raw_lp[B], top_lp[B * 4], big[4096];
  int32_t ks[B] = {0, 5, 1}, tokens[B], words[B * W], pairs[4] = {0, 1, 1, 2}, top_ids[B * 4];
  uint32_t status[B];
  uint64_t seeds[B] = {1, 2, 3};
  for (int i = 0; i < B * V; i++) x[i] = (float)(i % 13);
  for (int i = 0; i < B * W; i++) words[i] = -1;
  float bias[2] = {1.0f, 2.0f};
  memset(tokens, 0x11, sizeof tokens);
  memset(status, 0x22, sizeof status);
  memset(probs, 0x33, sizeof probs);
  memset(lp, 0x44, sizeof lp);
  memset(raw_lp, 0x66, sizeof raw_lp);
  memset(top_lp, 0x77, sizeof top_lp);
  memset(top_ids, 0x55, sizeof top_ids);
  ingot_tensor tl = ingot_tensor_2d(x, INGOT_DTYPE_F32, B, V, V);
  ingot_tensor tt = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B), tk = ingot_tensor_1d(ks, INGOT_DTYPE_I32, B);
  ingot_tensor tp = ingot_tensor_1d(ps, INGOT_DTYPE_F32, B), tq = ingot_tensor_1d(qs, INGOT_DTYPE_F32, B);
  ingot_tensor tsd = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, B);
  ingot_tensor tw = ingot_tensor_2d(words, INGOT_DTYPE_I32, B, W, W);
  ingot_tensor tpair = ingot_tensor_2d(pairs, INGOT_DTYPE_I32, 2, 2, 2);
  ingot_tensor tbias = ingot_tensor_1d(bias, INGOT_DTYPE_F32, 2);
  ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B), tst = ingot_tensor_1d(status, INGOT_DTYPE_U32, B);
  ingot_tensor tpr = ingot_tensor_2d(probs, INGOT_DTYPE_F32, B, V, V);
  ingot_tensor tlp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, B);
  ingot_tensor tti = ingot_tensor_2d(top_ids, INGOT_DTYPE_I32, B, 4, 4);
  ingot_tensor traw = ingot_tensor_1d(raw_lp, INGOT_DTYPE_F32, B);
  ingot_tensor ttlp = ingot_tensor_2d(top_lp, INGOT_DTYPE_F32, B, 4, 4);
  ingot_sampling_params pr = INGOT_SAMPLING_PARAMS_INITIALIZER;
  pr.temperature = &tt, pr.top_k = &tk, pr.top_p = &tp, pr.min_p = &tq, pr.seed = &tsd;
  pr.allowed = &tw, pr.banned = &tpair, pr.bias_ids = &tpair, pr.bias_values = &tbias;
  ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  lps.token_logprob = &tlp, lps.token_raw_logprob = &traw, lps.top_ids = &tti,
  lps.top_logprobs = &ttlp;
  size_t need = 0, need_sm = 0;
  EXPECT_OK(ctx, ingot_sample_workspace_size(ctx, B, V, INGOT_DTYPE_F32, 4, &need));
  EXPECT_OK(ctx, ingot_sampling_softmax_workspace_size(ctx, B, V, INGOT_DTYPE_F32, &need_sm));
  EXPECT(need > 0 && need % 16 == 0 && need <= sizeof big && need_sm <= sizeof big,
         "workspace sizes %zu %zu", need, need_sm);
  char *ws = (char *)aligned_alloc(64, 8192);
  /* sanity: the full call works */
  EXPECT_OK(ctx, ingot_sample(ctx, &tl, &pr, &ttok, &tst, &lps, ws, need, NULL));
  memset(tokens, 0x11, sizeof tokens);
  memset(status, 0x22, sizeof status);
  memset(lp, 0x44, sizeof lp);
  memset(raw_lp, 0x66, sizeof raw_lp);
  memset(top_lp, 0x77, sizeof top_lp);
  memset(top_ids, 0x55, sizeof top_ids);
  ingot_tensor t;
  ingot_sampling_params pb;
  ingot_sampling_logprobs lb2;

#define SAMPLE(...) ingot_sample(ctx, __VA_ARGS__)
  /* logits */
  EXPECT_REJECT(SAMPLE(NULL, &pr, &ttok, &tst, &lps, ws, need, NULL), "logits: NULL");
  t = ingot_tensor_2d(x, INGOT_DTYPE_I32, B, V, V);
  EXPECT_REJECT(SAMPLE(&t, &pr, &ttok, &tst, &lps, ws, need, NULL), "logits: dtype i32");
  t = ingot_tensor_2d(x, INGOT_DTYPE_F32, B, 0, V);
  EXPECT_REJECT(SAMPLE(&t, &pr, &ttok, &tst, &lps, ws, need, NULL), "logits: shape[1] = 0");
  t = ingot_tensor_2d(x, INGOT_DTYPE_F32, B, V, V - 1);
  EXPECT_REJECT(SAMPLE(&t, &pr, &ttok, &tst, &lps, ws, need, NULL), "logits: stride[0]");
  t = ingot_tensor_2d(NULL, INGOT_DTYPE_F32, B, V, V);
  EXPECT_REJECT(SAMPLE(&t, &pr, &ttok, &tst, &lps, ws, need, NULL), "logits: data is NULL");
  /* element alignment: f32 logits 2 bytes in, a u64 seed 4 bytes in */
  _Alignas(16) unsigned char odd[64] = {0};
  t = ingot_tensor_2d((char *)x + 2, INGOT_DTYPE_F32, B, V - 1, V);
  EXPECT_REJECT(SAMPLE(&t, &pr, &ttok, &tst, &lps, ws, need, NULL),
                "is not aligned to its 4-byte f32 elements");
  EXPECT(strncmp(ingot_last_error(ctx), "ingot_sample: logits: data", 26) == 0, "%s",
         ingot_last_error(ctx));
  pb = pr, t = ingot_tensor_1d(odd + 4, INGOT_DTYPE_U64, B), pb.seed = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL),
                "is not aligned to its 8-byte u64 elements");
  t = ingot_tensor_2d(x, INGOT_DTYPE_F32, 1, INT64_C(1) << 31, INT64_C(1) << 31);
  EXPECT_REJECT(SAMPLE(&t, NULL, &ttok, NULL, NULL, ws, need, NULL), "token ids are int32");
  t = ingot_tensor_2d(x, INGOT_DTYPE_F32, INT64_C(1) << 62, V, INT64_C(1) << 40);
  EXPECT_REJECT(SAMPLE(&t, NULL, &ttok, NULL, NULL, ws, need, NULL), "logits: shape x stride overflows");
  /* params */
  pb = pr, pb.struct_size = 8;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "params: struct_size = 8");
  pb = pr, pb.struct_version = 99;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "params: struct_version = 99");
  pb = pr, t = ingot_tensor_1d(temps, INGOT_DTYPE_F32, B - 1), pb.temperature = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "temperature: shape[0] = 2");
  pb = pr, t = ingot_tensor_1d(temps, INGOT_DTYPE_BF16, B), pb.temperature = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "temperature: dtype bf16");
  pb = pr, t = ingot_tensor_1d(ks, INGOT_DTYPE_I64, B), pb.top_k = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "top_k: dtype i64");
  pb = pr, t = ingot_tensor_1d(seeds, INGOT_DTYPE_U32, B), pb.seed = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "seed: dtype u32");
  pb = pr, t = ingot_tensor_1d(seeds, INGOT_DTYPE_U64, B + 1), pb.position = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "position: shape[0] = 4");
  pb = pr, t = ingot_tensor_2d(words, INGOT_DTYPE_I32, B, W - 1, W), pb.allowed = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "allowed: shape[1] = 1, expected ceil(V / 32)");
  pb = pr, t = ingot_tensor_2d(words, INGOT_DTYPE_I32, 1, W + 1, W + 1), pb.allowed = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "allowed: shape[0] = 1");
  pb = pr, t = ingot_tensor_2d(words, INGOT_DTYPE_U8, B, W, W), pb.allowed = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "allowed: dtype u8");
  pb = pr, t = ingot_tensor_2d(pairs, INGOT_DTYPE_I32, 1, 3, 3), pb.banned = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "banned: shape[1] = 3");
  pb = pr, pb.bias_values = NULL;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "bias_values: NULL while bias_ids");
  pb = pr, pb.bias_ids = NULL;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "bias_ids: NULL while bias_values");
  pb = pr, t = ingot_tensor_1d(bias, INGOT_DTYPE_F32, 1), pb.bias_values = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), "bias_values: shape[0] = 1");
  /* per-row values (CPU: checked before running) */
  {
    static const struct {
      int which;
      float f;
      int32_t k;
      const char *needle;
    } bad[] = {{0, -1.0f, 0, "temperature: temperature[1] = -1"},
               {0, INFINITY, 0, "temperature: temperature[1] = inf"},
               {0, NAN, 0, "temperature: temperature[1] = nan"},
               {1, 0.0f, -3, "top_k: top_k[1] = -3 < 0"},
               {2, 0.0f, 0, "top_p: top_p[1] = 0, expected a value in (0, 1]"},
               {2, 1.5f, 0, "top_p: top_p[1] = 1.5"},
               {2, NAN, 0, "top_p: top_p[1] = nan"},
               {3, -0.5f, 0, "min_p: min_p[1] = -0.5"},
               {3, 2.0f, 0, "min_p: min_p[1] = 2"}};
    for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
      float t2[B], p2[B], q2[B];
      int32_t k2[B];
      memcpy(t2, temps, sizeof t2), memcpy(p2, ps, sizeof p2), memcpy(q2, qs, sizeof q2),
          memcpy(k2, ks, sizeof k2);
      if (bad[j].which == 0) t2[1] = bad[j].f;
      if (bad[j].which == 1) k2[1] = bad[j].k;
      if (bad[j].which == 2) p2[1] = bad[j].f;
      if (bad[j].which == 3) q2[1] = bad[j].f;
      ingot_tensor a = ingot_tensor_1d(t2, INGOT_DTYPE_F32, B), b = ingot_tensor_1d(k2, INGOT_DTYPE_I32, B);
      ingot_tensor c = ingot_tensor_1d(p2, INGOT_DTYPE_F32, B), d = ingot_tensor_1d(q2, INGOT_DTYPE_F32, B);
      pb = pr, pb.temperature = &a, pb.top_k = &b, pb.top_p = &c, pb.min_p = &d;
      EXPECT_REJECT(SAMPLE(&tl, &pb, &ttok, &tst, &lps, ws, need, NULL), bad[j].needle);
      EXPECT_REJECT(ingot_sampling_softmax(ctx, &tl, &pb, &tpr, &tst, ws, need_sm, NULL),
                    bad[j].needle);
    }
  }
  /* outputs */
  EXPECT_REJECT(SAMPLE(&tl, &pr, NULL, &tst, &lps, ws, need, NULL), "tokens: NULL");
  t = ingot_tensor_1d(tokens, INGOT_DTYPE_I64, B);
  EXPECT_REJECT(SAMPLE(&tl, &pr, &t, &tst, &lps, ws, need, NULL), "tokens: dtype i64");
  t = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B + 1);
  EXPECT_REJECT(SAMPLE(&tl, &pr, &t, &tst, &lps, ws, need, NULL), "tokens: shape[0] = 4");
  t = ingot_tensor_1d(status, INGOT_DTYPE_F32, B);
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &t, &lps, ws, need, NULL), "row_status: dtype f32");
  lb2 = lps, lb2.struct_size = 4;
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &tst, &lb2, ws, need, NULL), "logprobs: struct_size = 4");
  lb2 = lps, lb2.flags = 6;
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &tst, &lb2, ws, need, NULL), "logprobs: flags = 0x6");
  lb2 = lps, lb2.reserved = 1;
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &tst, &lb2, ws, need, NULL), "logprobs: reserved = 1");
  lb2 = lps, t = ingot_tensor_2d(lp, INGOT_DTYPE_F32, B, 3, 3), lb2.top_logprobs = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &tst, &lb2, ws, need, NULL), "top_logprobs: shape[1] = 3");
  lb2 = lps, t = ingot_tensor_2d(big, INGOT_DTYPE_I32, B, 1025, 1025), lb2.top_ids = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &tst, &lb2, ws, need, NULL), "top_ids: shape[1] = 1025 > INGOT_SAMPLING_MAX_TOP");
  /* overlaps */
  t = ingot_tensor_1d(x + 5, INGOT_DTYPE_I32, B);
  EXPECT_REJECT(SAMPLE(&tl, &pr, &t, &tst, &lps, ws, need, NULL), "tokens: overlaps logits");
  {
    ingot_tensor t4 = ingot_tensor_1d(tokens, INGOT_DTYPE_U32, B);
    EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &t4, &lps, ws, need, NULL), "row_status: overlaps tokens");
  }
  t = ingot_tensor_1d(seeds, INGOT_DTYPE_F32, B);
  lb2 = lps, lb2.token_logprob = &t;
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &tst, &lb2, ws, need, NULL), "token_logprob: overlaps seed");
  {
    /* logits / tokens placed inside the workspace buffer */
    ingot_tensor tl_in = ingot_tensor_2d(ws + 3200, INGOT_DTYPE_F32, B, V, V);
    ingot_tensor tok_in = ingot_tensor_1d(ws + 256, INGOT_DTYPE_I32, B);
    EXPECT_REJECT(SAMPLE(&tl_in, &pr, &ttok, &tst, &lps, ws + 3072, need + 64, NULL),
                  "workspace: overlaps logits");
    EXPECT_REJECT(SAMPLE(&tl, &pr, &tok_in, &tst, &lps, ws, need, NULL), "workspace: overlaps tokens");
  }
  /* workspace */
  EXPECT_FAIL(SAMPLE(&tl, &pr, &ttok, &tst, &lps, ws, need - 1, NULL),
              INGOT_STATUS_INSUFFICIENT_WORKSPACE, "workspace: workspace_bytes");
  EXPECT_FAIL(SAMPLE(&tl, &pr, &ttok, &tst, &lps, NULL, 0, NULL),
              INGOT_STATUS_INSUFFICIENT_WORKSPACE, "ingot_sample_workspace_size gives");
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &tst, &lps, NULL, need, NULL), "workspace: NULL");
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &tst, &lps, ws + 4, need, NULL), "16-byte aligned");
  EXPECT_FAIL(ingot_sampling_softmax(ctx, &tl, &pr, &tpr, &tst, ws, need_sm - 1, NULL),
              INGOT_STATUS_INSUFFICIENT_WORKSPACE, "ingot_sampling_softmax_workspace_size");
  /* softmax */
  t = ingot_tensor_2d(probs, INGOT_DTYPE_BF16, B, V, V);
  EXPECT_REJECT(ingot_sampling_softmax(ctx, &tl, &pr, &t, &tst, ws, need_sm, NULL), "probs: dtype bf16");
  t = ingot_tensor_2d(probs, INGOT_DTYPE_F32, B, V - 1, V);
  EXPECT_REJECT(ingot_sampling_softmax(ctx, &tl, &pr, &t, &tst, ws, need_sm, NULL), "probs: shape[1] = 39");
  t = ingot_tensor_2d(x, INGOT_DTYPE_F32, B, V, V);
  EXPECT_REJECT(ingot_sampling_softmax(ctx, &tl, &pr, &t, &tst, ws, need_sm, NULL), "probs: overlaps logits");
  EXPECT_REJECT(ingot_sampling_softmax(ctx, &tl, &pr, NULL, &tst, ws, need_sm, NULL), "probs: NULL");
  t = ingot_tensor_2d(x, INGOT_DTYPE_F32, B, 0, V);
  EXPECT_REJECT(ingot_sampling_softmax(ctx, &t, &pr, &tpr, &tst, ws, need_sm, NULL), "logits: shape[1] = 0");
  pb = pr, t = ingot_tensor_2d(words, INGOT_DTYPE_I32, B, W - 1, W), pb.allowed = &t;
  EXPECT_REJECT(ingot_sampling_softmax(ctx, &tl, &pb, &tpr, &tst, ws, need_sm, NULL),
                "allowed: shape[1] = 1, expected ceil(V / 32)");
  /* context and stream */
  EXPECT_REJECT(SAMPLE(&tl, &pr, &ttok, &tst, &lps, ws, need, (struct CUstream_st *)&t), "stream");
  EXPECT(ingot_sample(NULL, &tl, &pr, &ttok, &tst, &lps, ws, need, NULL) == INGOT_STATUS_INVALID_ARGUMENT &&
             strstr(ingot_last_error(NULL), "ctx") != NULL,
         "NULL ctx");
  /* size queries */
  size_t bytes = 777;
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, B, 0, INGOT_DTYPE_F32, 0, &bytes), "vocab_size = 0");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, -1, V, INGOT_DTYPE_F32, 0, &bytes), "batch = -1 < 0");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, B, V, INGOT_DTYPE_I32, 0, &bytes), "logits_dtype: i32");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, B, V, INGOT_DTYPE_F32, 1025, &bytes), "num_top = 1025");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, B, INT64_C(1) << 31, INGOT_DTYPE_F32, 0, &bytes),
                "vocab_size = 2147483648");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, B, V, INGOT_DTYPE_F32, 0, NULL), "bytes: NULL");
  EXPECT_REJECT(ingot_sampling_softmax_workspace_size(ctx, B, -5, INGOT_DTYPE_F16, &bytes), "vocab_size = -5");
  EXPECT(bytes == 777, "size query wrote on error");
  /* nothing written by any failed call */
  for (int i = 0; i < B; i++) {
    EXPECT(tokens[i] == 0x11111111 && status[i] == 0x22222222u && f_bits(lp[i]) == 0x44444444u &&
               f_bits(raw_lp[i]) == 0x66666666u,
           "a failed call wrote an output");
  }
  for (int i = 0; i < B * 4; i++) EXPECT(f_bits(top_lp[i]) == 0x77777777u, "top logprobs written");
  for (int i = 0; i < B * V; i++) EXPECT(f_bits(probs[i]) == 0x33333333u, "probs written");
  for (int i = 0; i < B * 4; i++) EXPECT(top_ids[i] == 0x55555555, "top ids written");
  /* B = 0: success, nothing to do, no workspace needed */
  t = ingot_tensor_2d(NULL, INGOT_DTYPE_BF16, 0, V, V);
  ingot_tensor t0 = ingot_tensor_1d(NULL, INGOT_DTYPE_I32, 0), tp0 = ingot_tensor_2d(NULL, INGOT_DTYPE_F32, 0, V, V);
  EXPECT_OK(ctx, ingot_sample(ctx, &t, NULL, &t0, NULL, NULL, NULL, 0, NULL));
  EXPECT_OK(ctx, ingot_sampling_softmax(ctx, &t, NULL, &tp0, NULL, NULL, 0, NULL));
  EXPECT_OK(ctx, ingot_sample_workspace_size(ctx, 0, V, INGOT_DTYPE_BF16, 0, &bytes));
  EXPECT(bytes == 0, "B = 0 needs %zu workspace bytes", bytes);
  t = ingot_tensor_2d(NULL, INGOT_DTYPE_F32, 0, 0, 0);
  EXPECT_REJECT(ingot_sample(ctx, &t, NULL, &t0, NULL, NULL, NULL, 0, NULL), "logits: shape[1] = 0");
#undef SAMPLE
  free(ws);
  return 0;
}

/* No params at all: T = 1, no filters, seed 0, position 0; n = 0 top outputs. */
/* The size queries reject a shape whose byte counts overflow, naming the
 * arguments and their values, and leave *bytes alone. batch and vocab_size
 * are below 2^31, so B * V * 4 stays below SIZE_MAX; the largest of them
 * passes int64 only for 2-byte logits (and never for the f32 probs). */
static int test_size_overflow(void) {
  const int64_t i32max = INT32_MAX, big = INT64_C(1) << 56;
  size_t bytes = 777;
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, INT64_MAX, 8, INGOT_DTYPE_F32, 0, &bytes),
                "batch = 9223372036854775807, expected B <= 2^31 - 1");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, 1, INT64_MAX, INGOT_DTYPE_F32, 0, &bytes),
                "vocab_size = 9223372036854775807, expected V <= 2^31 - 1");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, big, big, INGOT_DTYPE_F32, 0, &bytes),
                "batch = 72057594037927936");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, 1, big, INGOT_DTYPE_BF16, 0, &bytes),
                "vocab_size = 72057594037927936");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, i32max, i32max, INGOT_DTYPE_F32, 0, &bytes),
                "batch = 2147483647, vocab_size = 2147483647: logits [batch, vocab_size] of f32");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, INT64_MIN, 8, INGOT_DTYPE_F32, 0, &bytes),
                "batch = -9223372036854775808 < 0");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, 1, INT64_MIN, INGOT_DTYPE_F32, 0, &bytes),
                "vocab_size = -9223372036854775808");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, 1, 8, INGOT_DTYPE_F32, INT64_MAX, &bytes),
                "num_top = 9223372036854775807");
  EXPECT_REJECT(ingot_sample_workspace_size(ctx, 1, 8, INGOT_DTYPE_F32, -1, &bytes),
                "num_top = -1");
  EXPECT_REJECT(ingot_sampling_softmax_workspace_size(ctx, INT64_MAX, 8, INGOT_DTYPE_F32, &bytes),
                "batch = 9223372036854775807");
  EXPECT_REJECT(ingot_sampling_softmax_workspace_size(ctx, 1, big, INGOT_DTYPE_F16, &bytes),
                "vocab_size = 72057594037927936");
  EXPECT_REJECT(ingot_sampling_softmax_workspace_size(ctx, i32max, i32max, INGOT_DTYPE_F32, &bytes),
                "batch = 2147483647, vocab_size = 2147483647: logits");
  EXPECT_REJECT(ingot_sampling_softmax_workspace_size(ctx, i32max, i32max, INGOT_DTYPE_BF16, &bytes),
                "batch = 2147483647, vocab_size = 2147483647: probs [batch, vocab_size] of f32");
  EXPECT_REJECT(ingot_sampling_softmax_workspace_size(ctx, -1, 8, INGOT_DTYPE_BF16, &bytes),
                "batch = -1 < 0");
  EXPECT(bytes == 777, "size query wrote %zu on error", bytes);
  /* 2-byte logits of that shape fit: the CPU needs 12 * V (rounded to 16) */
  EXPECT_OK(ctx, ingot_sample_workspace_size(ctx, i32max, i32max, INGOT_DTYPE_BF16, 0, &bytes));
  EXPECT(bytes == ((size_t)12 * (size_t)i32max + 15) / 16 * 16, "sample workspace %zu", bytes);
  return 0;
}

static int test_defaults(void) {
  float x[3 * 16];
  for (int i = 0; i < 48; i++) x[i] = (float)(i % 16) * 0.1f;
  int32_t tokens[3], top[3 * 1];
  ingot_tensor tl = ingot_tensor_2d(x, INGOT_DTYPE_F32, 3, 16, 16);
  ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, 3);
  ingot_tensor tti = ingot_tensor_2d(top, INGOT_DTYPE_I32, 3, 0, 1);
  ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  lps.top_ids = &tti;
  ws_buf ws = ws_for(3, 16, INGOT_DTYPE_F32, 0);
  EXPECT_OK(ctx, ingot_sample(ctx, &tl, NULL, &ttok, NULL, &lps, ws.p, ws.bytes, NULL));
  /* identical rows, same (seed 0, position 0): the same token */
  EXPECT(tokens[0] == tokens[1] && tokens[1] == tokens[2], "rows drew %d %d %d", (int)tokens[0],
         (int)tokens[1], (int)tokens[2]);
  /* that token is the Gumbel-max of x_i - max over the generator of (0, 0) */
  int32_t want = -1;
  float best = -INFINITY;
  for (int i = 0; i < 16; i++) {
    float s = x[i] - x[15];
    float key = s + ingot_sampling_gumbel(0, 0, i);
    if (key > best) best = key, want = i;
  }
  EXPECT(tokens[0] == want, "default draw %d, Gumbel-max %d", (int)tokens[0], (int)want);
  free(ws.p);
  return 0;
}

int main(void) {
  test_init("test_sampling");
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &ctx) != INGOT_OK) {
    printf("cannot create a CPU context: %s\n", ingot_last_error(NULL));
    return 1;
  }
  test_run("generator_known_answers", test_generator_known_answers);
  test_run("portable_exp_log", test_portable_exp_log);
  test_run("uniform_distribution", test_uniform_distribution);
  test_run("seed_masked_softmax_vs_float64", test_seed_masked_softmax);
  test_run("three_allowed_ids", test_three_allowed_ids);
  test_run("chi_square_draws", test_chi_square_draws);
  test_run("exact_filter_sets", test_exact_filter_sets);
  test_run("greedy_ties", test_greedy_ties);
  test_run("batch_invariance", test_batch_invariance);
  test_run("empty_and_nan_rows", test_empty_and_nan_rows);
  test_run("sparse_lists", test_sparse_lists);
  test_run("raw_logprobs_and_top", test_raw_logprobs_and_top);
  test_run("dtypes_and_strides", test_dtypes_and_strides);
  test_run("invalid_arguments", test_invalid_arguments);
  test_run("size_overflow", test_size_overflow);
  test_run("defaults", test_defaults);
  ingot_context_destroy(ctx);
  return test_finish();
}
