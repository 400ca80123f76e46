/*
 * The GeGLU epilogue's exact arithmetic: gelu_tanh and the division it needs,
 * the same IEEE operations as the CPU's ingot_gelu_tanh (src/common), in a
 * branch-free form valid on the ranges the epilogue guarantees. Shared by
 * nvfp4_gemm.cu and the test kernels that check it bit for bit against the
 * CPU (tests/cuda/nvfp4_epilogue_kernels.cu).
 */
#ifndef INGOT_CUDA_NVFP4_EPILOGUE_MATH_CUH
#define INGOT_CUDA_NVFP4_EPILOGUE_MATH_CUH

#include <cuda_runtime.h>

#include <cstdint>

#include "common/nvfp4_ref.h"

namespace ingot_nvfp4 {

// E4M3 conversions, identical to ingot_f32_to_e4m3_sat (p >= 0 or +Inf, never NaN) and
// ingot_e4m3_to_f32; the hardware converts on sm_89+.
__device__ __forceinline__ uint8_t e4m3_from_f32(float p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(p));
  return static_cast<uint8_t>(r & 0xffu);
#else
  return ingot_f32_to_e4m3_sat(p);
#endif
}
__device__ __forceinline__ float e4m3_to_f32(uint8_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned int h2;
  float f;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<unsigned short>(v)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(h2 & 0xffffu)));
  return f; // E4M3 -> f16 -> f32: exact
#else
  return ingot_e4m3_to_f32(v);
#endif
}

// y of ingot_gelu_tanh(g): 2 sqrt(2/pi) (g + 0.044715 g^3), the same operations.
__device__ __forceinline__ float gelu_y(float g) {
  const float g3 = ingot_fmul_rn(ingot_fmul_rn(g, g), g);
  return ingot_fmul_rn(1.5957691216057308f, ingot_fadd_rn(g, ingot_fmul_rn(0.044715f, g3)));
}

// n / d rounded to nearest: the 8-instruction sequence that __fdiv_rn runs whenever its
// operands pass its range check (FCHK), i.e. for normal operands whose quotient is far
// from under / overflow. Used only where the callers guarantee n in [2^-100, 2^100] (or
// 0) and d in [2^-9, 448]; checked against the CPU division in tests/test_nvfp4_gemm_cuda.c.
__device__ __forceinline__ float fdiv_fast(float n, float d) {
  float rc;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rc) : "f"(d));
  const float t0 = __fmaf_rn(-d, rc, 1.0f);
  const float y1 = __fmaf_rn(rc, t0, rc);
  const float q0 = __fmaf_rn(n, y1, 0.0f);
  const float r0 = __fmaf_rn(-d, q0, n);
  const float q1 = __fmaf_rn(y1, r0, q0);
  const float r1 = __fmaf_rn(-d, q1, n);
  return __fmaf_rn(y1, r1, q1);
}

// ingot_gelu_tanh(g) for |y| <= 69 (finite), without branches: the same IEEE operations
// in the same order, specialised to that range (exp's argument in [-69, 0]: no clamp,
// no NaN, 2^k normal; the quotient n / d with n in [2^-100, 1], d in [1, 2] by the
// 8-instruction sequence that __fdiv_rn runs whenever its operands pass its range
// check, which these do). Checked bit for bit against the CPU in
// tests/test_nvfp4_gemm_cuda.c (gelu_fast).
__device__ __forceinline__ float gelu_fast(float g, float y) {
  const float x = y < 0.0f ? y : -y;
  const float kf = ingot_fsub_rn(
      ingot_fadd_rn(ingot_fmul_rn(x, 1.44269502162933349609375f), 12582912.0f), 12582912.0f);
  float r = ingot_fsub_rn(x, ingot_fmul_rn(kf, INGOT_SAMPLING_LN2_HI));
  r = ingot_fsub_rn(r, ingot_fmul_rn(kf, INGOT_SAMPLING_LN2_LO));
  float pp = 1.98412698e-4f;
  pp = ingot_fadd_rn(ingot_fmul_rn(pp, r), 1.38888889e-3f);
  pp = ingot_fadd_rn(ingot_fmul_rn(pp, r), 8.33333333e-3f);
  pp = ingot_fadd_rn(ingot_fmul_rn(pp, r), 4.16666667e-2f);
  pp = ingot_fadd_rn(ingot_fmul_rn(pp, r), 1.66666667e-1f);
  pp = ingot_fadd_rn(ingot_fmul_rn(pp, r), 0.5f);
  pp = ingot_fadd_rn(ingot_fmul_rn(pp, r), 1.0f);
  pp = ingot_fadd_rn(ingot_fmul_rn(pp, r), 1.0f);
  const int k = static_cast<int>(kf);
  const float e = ingot_fmul_rn(pp, __uint_as_float(static_cast<uint32_t>(k + 127) << 23));
  const float d = ingot_fadd_rn(1.0f, e);
  const float n = y < 0.0f ? e : 1.0f;
  return ingot_fmul_rn(g, fdiv_fast(n, d)); // n in [2^-100, 1], d in [1, 2]
}

// 1 if gelu_fast is valid for y
__device__ __forceinline__ bool gelu_fast_ok(float y) { return fabsf(y) <= 69.0f; }

}  // namespace ingot_nvfp4

#endif /* INGOT_CUDA_NVFP4_EPILOGUE_MATH_CUH */
