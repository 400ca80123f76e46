/*
 * Bit-exact scalar conversions shared by the CPU reference and the CUDA
 * kernels, so that both round identically. Integer arithmetic only: no
 * dependence on compiler flags, fast-math or the hardware's conversion
 * instructions.
 */
#ifndef INGOT_COMMON_NUMERIC_H
#define INGOT_COMMON_NUMERIC_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define INGOT_HD __host__ __device__ __forceinline__
#else
#define INGOT_HD static inline
#endif

INGOT_HD uint32_t ingot_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

INGOT_HD float ingot_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/* 1 iff x is neither NaN nor +-Inf. */
INGOT_HD int ingot_f32_finite(float x) { return (ingot_f32_bits(x) & 0x7f800000u) != 0x7f800000u; }

/* Single IEEE fp32 operations, rounded to nearest even, never contracted
 * into an fma (the CUDA intrinsics forbid it; the C code is built with
 * -ffp-contract=off): the same bits on every backend. */
INGOT_HD float ingot_fadd_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

INGOT_HD float ingot_fsub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

INGOT_HD float ingot_fmul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

INGOT_HD float ingot_fdiv_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/* fp32 -> bf16, round to nearest even. Every NaN becomes the canonical
 * 0x7fc0: NaN payloads and signs differ between CPUs and GPUs after
 * arithmetic (a GPU multiply returns 0x7fffffff), so only a canonical NaN
 * keeps the backends byte-identical. */
INGOT_HD uint16_t ingot_f32_to_bf16(float f) {
  uint32_t u = ingot_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)0x7fc0u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

INGOT_HD float ingot_bf16_to_f32(uint16_t h) { return ingot_bits_f32((uint32_t)h << 16); }

/* OCP FP8 E4M3 -> fp32, exact. Bias 7, no infinities, S.1111.111 is NaN. */
INGOT_HD float ingot_e4m3_to_f32(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t exp = (v >> 3) & 0xfu;
  uint32_t man = v & 0x7u;
  if (exp == 0xfu && man == 0x7u) return ingot_bits_f32(sign | 0x7fc00000u);
  if (exp == 0) {
    /* subnormal: man * 2^-9, exact in fp32 */
    float mag = (float)man * 0.001953125f;
    return sign ? -mag : mag;
  }
  return ingot_bits_f32(sign | ((exp + 120u) << 23) | (man << 20));
}


/* ---- NVFP4 helpers (E2M1 / E4M3 encoders, fp16 input) --------------------- */

/* fp16 -> fp32, exact (subnormals, Inf, NaN payload kept). */
INGOT_HD float ingot_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return ingot_bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    /* subnormal: man * 2^-24, exact in fp32 */
    float mag = (float)man * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }
  return ingot_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* fp32 -> OCP FP8 E4M3, round to nearest even, saturating: |f| >= 448
 * (including Inf) gives +-448 (0x7E / 0xFE); NaN gives 0x7F with f's sign.
 * (The cvt.rn.satfinite.e4m3x2.f32 rule.) */
INGOT_HD uint8_t ingot_f32_to_e4m3_sat(float f) {
  uint32_t u = ingot_f32_bits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
  if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7eu); /* >= 448 */
  uint32_t exp = a >> 23;
  if (exp >= 121u) {
    /* normal E4M3 range [2^-6, 448): keep 3 mantissa bits; a carry out of
     * the mantissa correctly bumps the exponent */
    uint32_t q = a >> 20, rem = a & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) q++;
    return (uint8_t)(sign | (q - (120u << 3)));
  }
  /* below 2^-6: the code is rne(|f| * 2^9) in 0..8 (8 is 2^-6, code 0x08).
   * |f| = m * 2^(e - 150), so |f| * 2^9 = m >> (141 - e). */
  uint32_t m = exp ? ((a & 0x7fffffu) | 0x800000u) : a;
  uint32_t e = exp ? exp : 1u;
  uint32_t s = 141u - e; /* >= 21 */
  if (s > 31u) return (uint8_t)sign;
  uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (uint8_t)(sign | q);
}

/* fp32 -> E2M1 code (sign << 3 | index into {0, .5, 1, 1.5, 2, 3, 4, 6}):
 * nearest, ties to the even index, |f| > 6 and Inf saturate to 6, the sign
 * is kept (-0.0 -> 8); NaN -> 0. Written as threshold counts on the bits of
 * |f| (non-negative floats order like their bit patterns). */
INGOT_HD uint8_t ingot_f32_to_e2m1(float f) {
  uint32_t u = ingot_f32_bits(f);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0;
  uint32_t idx = (uint32_t)(a > 0x3e800000u) +  /* > 0.25 */
                 (uint32_t)(a >= 0x3f400000u) + /* >= 0.75 */
                 (uint32_t)(a > 0x3fa00000u) +  /* > 1.25 */
                 (uint32_t)(a >= 0x3fe00000u) + /* >= 1.75 */
                 (uint32_t)(a > 0x40200000u) +  /* > 2.5 */
                 (uint32_t)(a >= 0x40600000u) + /* >= 3.5 */
                 (uint32_t)(a > 0x40a00000u);   /* > 5 */
  return (uint8_t)(((u >> 28) & 8u) | idx);
}

/* The E2M1 index (0..7) of |y| = a, for any a >= 0 that is not NaN (Inf
 * included); equal to ingot_f32_to_e2m1(a) & 7. Branch-free form for the
 * kernels: idx = min(rint(2a), rint(a) + 2, rint(a/2) + 4, 7), each rint
 * done by adding a magic constant (2^23 + even offset, so ties still go to
 * the even integer). Each candidate is exact in its own range ([0,2),
 * [2,4), [4,6]) and larger than the true index elsewhere:
 *   2a >= a + 2 for a >= 2, a + 2 >= a/2 + 4 for a >= 4, and
 *   a/2 + 4 >= 2a for a <= 8/3, a/2 + 4 >= a + 2 for a <= 4,
 * and rint is monotonic, so the minimum is the index. The products a*2 and
 * a*0.5 are exact (or too small to matter), so a fused multiply-add gives
 * the same result as the separate operations. */
INGOT_HD uint32_t ingot_e2m1_index_minmagic(float a) {
#if defined(__CUDA_ARCH__)
  float qa = __fmaf_rn(a, 2.0f, 8388608.0f);
  float qb = __fadd_rn(a, 8388610.0f);
  float qc = __fmaf_rn(a, 0.5f, 8388612.0f);
  float q = fminf(fminf(qa, qb), fminf(qc, 8388615.0f));
#else
  float qa = a * 2.0f + 8388608.0f;
  float qb = a + 8388610.0f;
  float qc = a * 0.5f + 8388612.0f;
  float q = qa < qb ? qa : qb;
  q = qc < q ? qc : q;
  q = 8388615.0f < q ? 8388615.0f : q;
#endif
  return ingot_f32_bits(q) - 0x4b000000u;
}

/* CUDA's __byte_perm: byte n of the result is byte (s >> 4n) & 7 of y:x. */
INGOT_HD uint32_t ingot_byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  uint64_t in = ((uint64_t)y << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; n++) r |= (uint32_t)((in >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
  return r;
#endif
}

/* Kernel form of the E2M1 encoding of 8 values (y_j = v_j * r, r > 0
 * finite, v_j finite): the 8 indices as nibbles (element j at bits 4j..4j+2,
 * sign bits clear), by the minimum of the candidates above; `clamp` adds
 * the min with 7, which is needed only when some |y_j| >= 7 (for a < 7,
 * rint(a/2) + 4 <= 7 already). The nibbles are accumulated as
 * sum_j bits(q_j) << 4j (mod 2^32) and the 2^23 offsets removed at once. */
INGOT_HD uint32_t ingot_e2m1_pack8_minmagic(const float *v, float r, int clamp) {
  uint32_t acc = 0;
  for (int j = 0; j < 8; j++) {
#if defined(__CUDA_ARCH__)
    float a = fabsf(__fmul_rn(v[j], r));
    float q = fminf(fminf(__fmaf_rn(a, 2.0f, 8388608.0f), __fadd_rn(a, 8388610.0f)),
                    __fmaf_rn(a, 0.5f, 8388612.0f));
    if (clamp) q = fminf(q, 8388615.0f);
#else
    float y = v[j] * r;
    float a = y < 0.0f ? -y : y;
    float qa = a * 2.0f + 8388608.0f, qb = a + 8388610.0f, qc = a * 0.5f + 8388612.0f;
    float q = qa < qb ? qa : qb;
    q = qc < q ? qc : q;
    if (clamp) q = 8388615.0f < q ? 8388615.0f : q;
#endif
    acc += ingot_f32_bits(q) << (4 * j);
  }
  return acc - 0x4b000000u * 0x11111111u;
}

/* The E2M1 sign bits (bit 4j+3 for element j) of 8 16-bit values (bf16 /
 * fp16) held two per word, element 2i in the low half of w[i]: the sign
 * bytes gathered with byte permutes. */
INGOT_HD uint32_t ingot_e2m1_signs16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  uint32_t p01 = ingot_byte_perm(w0, w1, 0x7351), p23 = ingot_byte_perm(w2, w3, 0x7351);
  uint32_t even = ingot_byte_perm(p01, p23, 0x5410); /* elements 0 2 4 6 */
  uint32_t odd = ingot_byte_perm(p01, p23, 0x7632);  /* elements 1 3 5 7 */
  return ((even & 0x80808080u) >> 4) | (odd & 0x80808080u);
}

/* The same for 8 fp32 values w[0..7]. */
INGOT_HD uint32_t ingot_e2m1_signs32(const uint32_t *w) {
  uint32_t e = ingot_byte_perm(ingot_byte_perm(w[0], w[2], 0x7373),
                               ingot_byte_perm(w[4], w[6], 0x7373), 0x5410);
  uint32_t o = ingot_byte_perm(ingot_byte_perm(w[1], w[3], 0x7373),
                               ingot_byte_perm(w[5], w[7], 0x7373), 0x5410);
  return ((e & 0x80808080u) >> 4) | (o & 0x80808080u);
}

/* E2M1 code -> fp32, exact. */
INGOT_HD float ingot_e2m1_to_f32(uint8_t code) {
  uint32_t idx = code & 7u;
  uint32_t mag = idx < 2u ? (idx ? 0x3f000000u : 0u)
                          : ((126u + (idx >> 1)) << 23) | ((idx & 1u) << 22);
  return ingot_bits_f32(((uint32_t)(code & 8u) << 28) | mag);
}

#endif /* INGOT_COMMON_NUMERIC_H */
