/*
 * Fast fp32 arithmetic of the dense sampling kernel (sampling_dense.cu) and
 * of the paths that share its bits (the 16-bit softmax, the wide softmax,
 * the wide sampler; sampling_cluster.cuh), each with its error bound: an exp
 * for the masses, an exact division by a row constant, an approximate
 * Gumbel noise used only to decide which tokens need the exact one, and a
 * floor of x below which no s reaches a given one. A device check of all
 * four against __fdiv_rn, double precision and the portable reference is
 * docs/decisions/0041-device-checks-of-the-dense-kernel.md.
 */
#ifndef INGOT_CUDA_SAMPLING_MATH_CUH
#define INGOT_CUDA_SAMPLING_MATH_CUH

#include <cmath>
#include <cstdint>

#include "common/sampling_ref.h"

namespace ingot_sampling {

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* max(a, b), NaN if either is NaN (fmaxf would drop it). */
__device__ __forceinline__ float max_nan(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

/* e^x for x <= 0 within 3 ulp while the result is a normal float
 * (x >= -87.3); below that, for -Inf and for NaN: 0 (such masses are below
 * 1e-38 of the maximum's and no caller needs them). 2^t by the hardware on
 * t = RN(x log2 e), times 1 + d for d = x - t ln 2, the part of x that t
 * lost (|d| <= 2^-17 ln 2), computed with ln 2 in two parts, each step one
 * FMA whose rounding is far below 2^-24 of e^x: six operations, no branch. */
__device__ __forceinline__ float fast_exp(float x) {
  x = fmaxf(x, -128.0f); /* also -Inf and NaN: 2^-184 flushes to 0 */
  const float t = __fmul_rn(x, 1.44269502162933349609375f); /* log2 e, rounded */
  const float h = __fmaf_rn(-t, 0.693147182464599609375f, x); /* x - t RN(ln 2) */
  const float d = __fmaf_rn(-t, -1.9046542121259336e-9f, h);    /* - t (ln 2 - RN(ln 2)) */
  const float p = ex2_approx(t);
  return __fmaf_rn(p, d, p);
}

/* IEEE division by a row constant b, correctly rounded like __fdiv_rn but
 * with the reciprocal computed once: q = a y, r = a - q b (exact), q + r y
 * with y = RN(1 / b), the fast path of CUDA's own division, valid while
 * every intermediate stays normal; here |a| in [2^-60, 2^90) and b in
 * [2^-30, 2^30) (checked once); 0 gives itself; anything else
 * (subnormal, huge, Inf, NaN) goes to __fdiv_rn. The device check
 * (docs/decisions/0041-device-checks-of-the-dense-kernel.md) compares it
 * with __fdiv_rn on billions of pairs. */
struct Divisor {
  float b, y;
  bool fast;
};

__device__ __forceinline__ Divisor divisor_of(float b) {
  const uint32_t e = (__float_as_uint(b) >> 23) & 0xffu; /* b > 0 */
  return Divisor{b, __frcp_rn(b), e - 97u < 60u};
}

/* The fast path alone: the caller has checked the ranges. */
__device__ __forceinline__ float div_fast(float a, const Divisor &d) {
  const float q = __fmul_rn(a, d.y);
  return __fmaf_rn(__fmaf_rn(-d.b, q, a), d.y, q);
}

__device__ __forceinline__ float div_exact(float a, const Divisor &d) {
  const uint32_t u = __float_as_uint(a);
  if ((u << 1) == 0) return a; /* +-0 / b: a itself */
  if (d.fast && ((u >> 23) & 0xffu) - 67u < 150u) return div_fast(a, d);
  return __fdiv_rn(a, d.b);
}

/* The Gumbel noise -log(-log(1 - u)) with hardware logs, within 2e-5 of
 * ingot_sampling_ref_gumbel_of(u) for every u the generator makes: E = -log
 * (1 - u) by its series for u < 2^-6 (truncation < 2^-24 relative), else
 * from 1 - u (rounding < 2^-24 relative, E > 0.0157, lg2 within 2^-22);
 * then -log E (lg2 within 2^-22 relative over |log2 E| <= 33). */
__device__ __forceinline__ float gumbel_approx(float u) {
  const float series = __fmul_rn(
      u, __fmaf_rn(u, __fmaf_rn(u, __fmaf_rn(u, 0.25f, 0.333333343f), 0.5f), 1.0f));
  const float logged = __fmul_rn(-0.693147182f, lg2_approx(__fsub_rn(1.0f, u)));
  const float e = u < 0.015625f ? series : logged;
  return __fmul_rn(-0.693147182f, lg2_approx(e));
}

/* A float below every finite x whose s = RN(RN(x - m) / T) is >= s_l, for
 * m and T > 0 finite and s_l <= 0 finite: the dense kernel's small top-k
 * selection computes s only above it. RN(v) >= s_l needs v >= s_l (1 +
 * 2^-24) - 2^-150 (half the gap below s_l); so a = RN(x - m) >= A = T (s_l
 * (1 + 2^-24) - 2^-150), and the same step for a: x >= m + A (1 + 2^-24) -
 * 2^-150. In double with wider margins (2^-20, 2^-140) and 2^-48 (|m| +
 * |A|) for the double roundings, rounded down: x, a float, is >= it. */
__device__ __forceinline__ float x_floor(float s_l, float m, float T) {
  const double A = (double)T * ((double)s_l * (1.0 + 0x1p-20) - 0x1p-140);
  const double b = (double)m + A * (1.0 + 0x1p-20) - 0x1p-140;
  return __double2float_rd(b - 0x1p-48 * (fabs((double)m) + fabs(A)));
}

}  // namespace ingot_sampling

#endif /* INGOT_CUDA_SAMPLING_MATH_CUH */
