/*
 * Sampling reference arithmetic (docs/sampling.md; the rules are stated in
 * the Sampling section of include/ingot/ingot.h), shared by the CPU backend
 * and the CUDA kernels so that both compute the very same bits:
 *
 *   - the counter-based generator: Philox-4x32-10 (Random123's philox4x32,
 *     10 rounds) keyed by the request's seed, counting (token, 0, position),
 *     and its conversion to a uniform u in (0, 1) and to Gumbel noise;
 *   - a portable fp32 exp and log built from single IEEE operations (add,
 *     subtract, multiply, divide, bit moves), so that the CPU (C compiled
 *     with -ffp-contract=off) and the GPU (explicit _rn intrinsics, no
 *     contraction) round identically. libm / CUDA expf and logf differ
 *     between platforms in the last bit, which would make draws differ;
 *   - logit loading and the per-row parameter rules.
 *
 * Accuracy (tests/test_sampling.c measures it against double precision):
 * ingot_sampling_ref_exp is within 1.3 ulp and ingot_sampling_ref_log within
 * 1 ulp (as the public header states; measured 1.21 and 0.89); the Gumbel
 * noise within 1e-6 relative of -log(-log(1 - u)) computed in double.
 */
#ifndef INGOT_COMMON_SAMPLING_REF_H
#define INGOT_COMMON_SAMPLING_REF_H

#include "common/numeric.h"
#include "ingot/ingot.h"

/* ---- Philox-4x32-10 -------------------------------------------------------- */

#define INGOT_PHILOX_M0 0xD2511F53u
#define INGOT_PHILOX_M1 0xCD9E8D57u
#define INGOT_PHILOX_W0 0x9E3779B9u
#define INGOT_PHILOX_W1 0xBB67AE85u

/* Random123's philox4x32 with 10 rounds: ctr[4], key[2] -> out[4]. Each
 * round: (hi0, lo0) = M0 * c0, (hi1, lo1) = M1 * c2 (32x32 -> 64 bits),
 * c = {hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0}; the key is bumped by
 * (W0, W1) between rounds. Known answers (Random123 tests/kat_vectors) are
 * checked in tests/test_sampling.c. */
INGOT_HD void ingot_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k0 += INGOT_PHILOX_W0;
      k1 += INGOT_PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)INGOT_PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)INGOT_PHILOX_M1 * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* Leading zero bits of a 32-bit word (32 for 0). */
INGOT_HD uint32_t ingot_sampling_clz32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return (uint32_t)__clz((int)x);
#else
  return x ? (uint32_t)__builtin_clz(x) : 32u;
#endif
}

/* The uniform of (seed, position, token):
 *   (x0, x1, x2, x3) = philox4x32_10({token, 0, position lo, position hi},
 *                                    {seed lo, seed hi})
 *   u = (1 + (x0 >> 9) * 2^-23) * 2^-(1 + clz(x1))
 * i.e. the fp32 with mantissa x0 >> 9 and exponent field 126 - clz(x1): an
 * exact float in [2^-33, 1 - 2^-24], never 0 or 1. Each float of a binade
 * [2^-(z+1), 2^-z) is the left end of a cell of its own width, drawn with
 * probability equal to that width, so u is uniform on (0, 1) up to the
 * float grid, with full relative precision near 0 (which 1 - u needs for
 * the exponential below). Counter word 1 is 0 for the token draw; other
 * values are reserved for future streams. */
INGOT_HD float ingot_sampling_ref_uniform(uint64_t seed, uint64_t position, uint32_t token) {
  uint32_t ctr[4] = {token, 0u, (uint32_t)position, (uint32_t)(position >> 32)};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t x[4];
  ingot_philox4x32_10(ctr, key, x);
  uint32_t z = ingot_sampling_clz32(x[1]); /* P(z = j) = 2^-(j+1) */
  return ingot_bits_f32(((126u - z) << 23) | (x[0] >> 9));
}

/* ---- portable exp / log ------------------------------------------------------ */

#define INGOT_SAMPLING_LN2_HI 0.693145751953125f     /* 0x3f317200: 15 significant bits */
#define INGOT_SAMPLING_LN2_LO 1.428606765330187e-06f /* ln 2 - LN2_HI */

/* e^x for x <= 0 (the only use: scaled logits minus their maximum), -Inf
 * gives 0, NaN gives NaN, exp(0) = 1 exactly; x > 0 is clamped to 0.
 * Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2, Taylor polynomial to
 * degree 7 in Horner form, scaled by 2^k in one or two exact steps (so a
 * subnormal result is rounded once). */
INGOT_HD float ingot_sampling_ref_exp(float x) {
  if (x != x) return x;
  if (x > 0.0f) x = 0.0f;
  if (x < -104.0f) return 0.0f; /* e^-104 < 2^-150: rounds to 0 */
  /* k = round(x / ln 2): adding 1.5 * 2^23 rounds to an integer (ties even) */
  float kf = ingot_fsub_rn(
      ingot_fadd_rn(ingot_fmul_rn(x, 1.44269502162933349609375f), 12582912.0f),
      12582912.0f);
  float r = ingot_fsub_rn(x, ingot_fmul_rn(kf, INGOT_SAMPLING_LN2_HI));
  r = ingot_fsub_rn(r, ingot_fmul_rn(kf, INGOT_SAMPLING_LN2_LO));
  float p = 1.98412698e-4f; /* 1/7! */
  p = ingot_fadd_rn(ingot_fmul_rn(p, r), 1.38888889e-3f); /* 1/6! */
  p = ingot_fadd_rn(ingot_fmul_rn(p, r), 8.33333333e-3f); /* 1/5! */
  p = ingot_fadd_rn(ingot_fmul_rn(p, r), 4.16666667e-2f); /* 1/4! */
  p = ingot_fadd_rn(ingot_fmul_rn(p, r), 1.66666667e-1f); /* 1/3! */
  p = ingot_fadd_rn(ingot_fmul_rn(p, r), 0.5f);
  p = ingot_fadd_rn(ingot_fmul_rn(p, r), 1.0f);
  p = ingot_fadd_rn(ingot_fmul_rn(p, r), 1.0f);
  int k = (int)kf; /* in [-150, 0] */
  if (k >= -126) return ingot_fmul_rn(p, ingot_bits_f32((uint32_t)(k + 127) << 23));
  p = ingot_fmul_rn(p, ingot_bits_f32((uint32_t)(k + 64 + 127) << 23));
  return ingot_fmul_rn(p, 5.421010862427522e-20f); /* 2^-64 */
}

/* log(2^e * (1 + f)) for f in [-0.2929, 0.4143] (1 + f within [1/sqrt2,
 * sqrt2] up to the ends), fdlibm's form: s = f / (2 + f), z = s^2,
 * R = z (2/3 + z (2/5 + z (2/7 + z (2/9 + z 2/11)))), hfsq = f^2 / 2,
 * log(1 + f) = f - (hfsq - s (hfsq + R)). */
INGOT_HD float ingot_sampling_ref_log_core(int e, float f) {
  float s = ingot_fdiv_rn(f, ingot_fadd_rn(2.0f, f));
  float z = ingot_fmul_rn(s, s);
  float R = 1.81818182e-1f; /* 2/11 */
  R = ingot_fadd_rn(ingot_fmul_rn(R, z), 2.22222222e-1f); /* 2/9 */
  R = ingot_fadd_rn(ingot_fmul_rn(R, z), 2.85714286e-1f); /* 2/7 */
  R = ingot_fadd_rn(ingot_fmul_rn(R, z), 4.0e-1f);        /* 2/5 */
  R = ingot_fadd_rn(ingot_fmul_rn(R, z), 6.66666667e-1f); /* 2/3 */
  R = ingot_fmul_rn(R, z);
  float hfsq = ingot_fmul_rn(ingot_fmul_rn(0.5f, f), f);
  float l = ingot_fsub_rn(
      f, ingot_fsub_rn(hfsq, ingot_fmul_rn(s, ingot_fadd_rn(hfsq, R))));
  float ef = (float)e;
  return ingot_fadd_rn(ingot_fmul_rn(ef, INGOT_SAMPLING_LN2_HI),
                             ingot_fadd_rn(ingot_fmul_rn(ef, INGOT_SAMPLING_LN2_LO), l));
}

/* Natural log of a positive finite fp32 x (uses: the Gumbel noise, where
 * 2^-34 < x < 17, and the min-p threshold log(min_p), 0 < min_p <= 1). */
INGOT_HD float ingot_sampling_ref_log(float x) {
  uint32_t u = ingot_f32_bits(x);
  int e = (int)(u >> 23) - 127;
  if (u < 0x00800000u) { /* subnormal: scale by 2^24 (exact) */
    u = ingot_f32_bits(ingot_fmul_rn(x, 16777216.0f));
    e = (int)(u >> 23) - 127 - 24;
  }
  uint32_t mb = (u & 0x7fffffu) | 0x3f800000u; /* mantissa as m in [1, 2) */
  if (mb > 0x3fb504f3u) {                      /* m > sqrt2: use m / 2, e + 1 */
    mb -= 0x00800000u;
    e += 1;
  }
  return ingot_sampling_ref_log_core(e, ingot_fsub_rn(ingot_bits_f32(mb), 1.0f)); /* exact */
}

/* log(1 - u) for u in [2^-33, 1 - 2^-24], accurate for small u too:
 *   u <= 1 - 1/sqrt2: f = -u, e = 0 (exact);
 *   u <  1/2:         1 - u = 2^-1 (1 + f), f = 1 - 2u (exact, Sterbenz);
 *   u >= 1/2:         1 - u is exact: log of it. */
INGOT_HD float ingot_sampling_ref_log1m(float u) {
  if (u <= 0.29289321881345247f) return ingot_sampling_ref_log_core(0, -u);
  if (u < 0.5f) return ingot_sampling_ref_log_core(-1, ingot_fsub_rn(1.0f, ingot_fmul_rn(2.0f, u)));
  return ingot_sampling_ref_log(ingot_fsub_rn(1.0f, u));
}

/* Gumbel noise from a uniform: g = -log(E), E = -log(1 - u) (an Exp(1)
 * variate, E in [2^-33, 16.7], so g in [-2.82, 22.9]). */
INGOT_HD float ingot_sampling_ref_gumbel_of(float u) {
  float e = -ingot_sampling_ref_log1m(u);
  return -ingot_sampling_ref_log(e);
}

/* g_i of the draw: the Gumbel noise of (seed, position, token). */
INGOT_HD float ingot_sampling_ref_gumbel(uint64_t seed, uint64_t position, uint32_t token) {
  return ingot_sampling_ref_gumbel_of(ingot_sampling_ref_uniform(seed, position, token));
}

/* ---- rows ------------------------------------------------------------------- */

/* Logit i of a row, converted exactly to fp32. */
INGOT_HD float ingot_sampling_load(const void *row, ingot_dtype dtype, int64_t i) {
  switch (dtype) {
    case INGOT_DTYPE_BF16: return ingot_bf16_to_f32(((const uint16_t *)row)[i]);
    case INGOT_DTYPE_F16: return ingot_f16_to_f32(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
  }
}

/* The per-row parameter rules (absent parameters are valid): temperature
 * finite and >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1]. Returns 0
 * if valid, else 1 + the index of the first bad one in that order. The CPU
 * backend's core rejects such rows before running; the CUDA kernels apply
 * this rule on the device (no host read) and flag the row. */
INGOT_HD int ingot_sampling_params_check(float temperature, int32_t top_k, float top_p,
                                         float min_p) {
  if (!(temperature >= 0.0f) || !ingot_f32_finite(temperature)) return 1;
  if (top_k < 0) return 2;
  if (!(top_p > 0.0f && top_p <= 1.0f)) return 3;
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return 4;
  return 0;
}

#endif /* INGOT_COMMON_SAMPLING_REF_H */
