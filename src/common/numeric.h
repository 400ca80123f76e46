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

#endif /* INGOT_COMMON_NUMERIC_H */
