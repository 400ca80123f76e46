/*
 * NVFP4 reference arithmetic (docs/nvfp4.md; the rules are stated in
 * include/ingot/ingot.h), shared by the CPU backend and the CUDA reference /
 * edge-case paths so that both run the very same operations. Every float
 * operation is one IEEE fp32 operation, round to nearest even: the CUDA
 * build uses the explicit _rn intrinsics (no contraction, no approximate
 * division), the C build -ffp-contract=off.
 */
#ifndef INGOT_COMMON_NVFP4_REF_H
#define INGOT_COMMON_NVFP4_REF_H

#include "common/numeric.h"
#include "common/sampling_ref.h" /* the portable exp */
#include "ingot/ingot.h"

#define INGOT_NVFP4_CANONICAL_NAN 0x7fc00000u
#define INGOT_F32_MAX_BITS 0x7f7fffffu

/* 1 iff 0 < gs <= FLT_MAX (a usable global scale). */
INGOT_HD int ingot_nvfp4_gs_valid(float gs) {
  return ingot_f32_bits(gs) - 1u < INGOT_F32_MAX_BITS;
}

/* Byte offset of (row m, scale column k) in the 128x4 swizzled layout with
 * scale_cols (= round_up(cols/16, 4)) padded scale columns:
 * KT * 512 == scale_cols * 128. */
INGOT_HD int64_t ingot_nvfp4_swizzle_offset(int64_t m, int64_t k, int64_t scale_cols) {
  return (m >> 7) * (scale_cols * 128) + (k >> 2) * 512 + (m & 31) * 16 + ((m >> 5) & 3) * 4 +
         (k & 3);
}

/* One element of a BF16 / F16 / F32 row, converted exactly to fp32. */
INGOT_HD float ingot_nvfp4_load(const void *row, ingot_dtype dtype, int64_t i) {
  switch (dtype) {
    case INGOT_DTYPE_BF16: return ingot_bf16_to_f32(((const uint16_t *)row)[i]);
    case INGOT_DTYPE_F16: return ingot_f16_to_f32(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
  }
}

/* sf = E4M3(gs * (amax / 6)), or 0 for an unusable gs. */
INGOT_HD uint8_t ingot_nvfp4_block_scale(float gs, float amax) {
  if (!ingot_nvfp4_gs_valid(gs)) return 0;
  return ingot_f32_to_e4m3_sat(ingot_fmul_rn(gs, ingot_fdiv_rn(amax, 6.0f)));
}

/* Quantizes one block of 16 values: writes its scale byte and 8 value bytes
 * (even element in the low nibble); returns the number of non-finite
 * elements. */
INGOT_HD uint32_t ingot_nvfp4_ref_block(const float x[16], float gs, uint8_t *sf_out,
                                        uint8_t codes[8]) {
  float amax = 0.0f;
  uint32_t nonfinite = 0;
  for (int i = 0; i < 16; i++) {
    if (!ingot_f32_finite(x[i])) {
      nonfinite++;
      continue;
    }
    float ax = ingot_bits_f32(ingot_f32_bits(x[i]) & 0x7fffffffu);
    if (ax > amax) amax = ax;
  }
  uint8_t sf = ingot_nvfp4_block_scale(gs, amax);
  *sf_out = sf;
  if (sf == 0) {
    for (int i = 0; i < 8; i++) codes[i] = 0;
    return nonfinite;
  }
  float r = ingot_fdiv_rn(gs, ingot_e4m3_to_f32(sf));
  for (int i = 0; i < 8; i++) {
    uint8_t lo = ingot_f32_to_e2m1(ingot_fmul_rn(x[2 * i], r));
    uint8_t hi = ingot_f32_to_e2m1(ingot_fmul_rn(x[2 * i + 1], r));
    codes[i] = (uint8_t)(lo | (hi << 4));
  }
  return nonfinite;
}

/* One decoded element: (e2m1(code) * float(sf)) / gs; canonical NaN for an
 * unusable gs or a NaN result. */
INGOT_HD float ingot_nvfp4_decode(uint8_t code, uint8_t sf, float gs) {
  if (!ingot_nvfp4_gs_valid(gs)) return ingot_bits_f32(INGOT_NVFP4_CANONICAL_NAN);
  float q = ingot_fdiv_rn(ingot_fmul_rn(ingot_e2m1_to_f32(code), ingot_e4m3_to_f32(sf)), gs);
  if (!(q == q)) q = ingot_bits_f32(INGOT_NVFP4_CANONICAL_NAN);
  return q;
}

/* gs = 2688 / amax; 1 for amax == 0; FLT_MAX if the quotient overflows. */
INGOT_HD float ingot_nvfp4_global_scale_from_amax(float amax) {
  if (amax == 0.0f) return 1.0f;
  float gs = ingot_fdiv_rn(2688.0f, amax);
  if (!ingot_f32_finite(gs)) gs = ingot_bits_f32(INGOT_F32_MAX_BITS);
  return gs;
}

/* gelu_tanh(g) = 0.5 g (1 + tanh(c (g + 0.044715 g^3))), c = sqrt(2/pi),
 * computed as g * sigmoid(y) with y = 2c (g + 0.044715 g^3), using the
 * portable exp on -|y| (never overflows): one fixed sequence of IEEE fp32
 * operations, so the CPU and CUDA epilogues give the same bits for the same
 * accumulator. NaN gives NaN, +Inf gives +Inf, -Inf gives -0. Within
 * 1.1e-5 relative of the exact function for |g| < 12 (the loss is y's own
 * rounding, amplified by e^y where the result is tiny). */
INGOT_HD float ingot_gelu_tanh(float g) {
  float g3 = ingot_fmul_rn(ingot_fmul_rn(g, g), g);
  float y = ingot_fmul_rn(1.5957691216057308f, ingot_fadd_rn(g, ingot_fmul_rn(0.044715f, g3)));
  float e = ingot_sampling_ref_exp(y < 0.0f ? y : -y); /* e^-|y| in (0, 1] */
  float d = ingot_fadd_rn(1.0f, e);
  float sig = y < 0.0f ? ingot_fdiv_rn(e, d) : ingot_fdiv_rn(1.0f, d);
  if (sig == 0.0f) return -0.0f; /* g very negative, also -Inf (not -Inf * 0) */
  return ingot_fmul_rn(g, sig);
}

#endif /* INGOT_COMMON_NVFP4_REF_H */
