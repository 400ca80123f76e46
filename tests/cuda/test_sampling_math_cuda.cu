// GPU test of src/cuda/sampling/sampling_math.cuh: the bounds its comments state,
// which the dense sampling kernel relies on, checked exhaustively or over 2^32+
// random cases on the device:
//   1. div_exact == __fdiv_rn bit for bit: every fp32 a against 16 typical
//      temperatures, and 2^36 random (a, b) pairs, b over [2^-40, 2^40];
//   2. fast_exp: every fp32 x in [-105, 0] against exp in double, worst error
//      in ulps of the result (0 allowed below 2^-125), and its special
//      inputs: e^0 = 1, and 0 for -Inf, NaN and x <= -128;
//   3. gumbel_approx: every uniform the generator can make, worst absolute
//      difference from ingot_sampling_ref_gumbel_of;
//   4. x_floor: 2^32 random (m, x_L <= m, T) with s_L = RN(RN(x_L - m) / T)
//      finite, m up to 2^126, T over [2^-45, 2^45]: the float just below
//      x_floor(s_L, m, T) must give an s below s_L, and x_L must not lie
//      below it; reported: the widest window (x_L - floor) / (|x_L - m| +
//      ulp(x_L) + T 2^-126), which bounds the tokens the selection divides
//      needlessly (about 1: one float, or 2^-19 of x_L - m).
// Skipped (exit 77) without a GPU; prints "N passed, N failed" like the C tests.
#include <cstdio>
#include <cmath>

#include "cuda/sampling/sampling_math.cuh"

using namespace ingot_sampling;

__device__ unsigned long long g_div_bad, g_div_total;
__device__ unsigned int g_exp_ulps_x1000, g_gumbel_err_x1e9;
__device__ unsigned long long g_floor_bad, g_floor_cases;
__device__ unsigned int g_floor_window_x1000;

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

__device__ void check_div(float a, float b, unsigned long long &bad) {
  const float want = __fdiv_rn(a, b);
  const float got = div_exact(a, divisor_of(b));
  if (__float_as_uint(want) != __float_as_uint(got) && !(want != want && got != got)) bad++;
}

__global__ void div_all_a(const float *temps, int nt) {
  unsigned long long bad = 0;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (1ull << 32);
       i += (uint64_t)gridDim.x * blockDim.x) {
    const float a = __uint_as_float((uint32_t)i);
    for (int t = 0; t < nt; t++) check_div(a, temps[t], bad);
  }
  atomicAdd(&g_div_bad, bad);
  atomicAdd(&g_div_total, 0ull);
}

__global__ void div_random(uint64_t pairs) {
  unsigned long long bad = 0;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < pairs;
       i += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t h = mix(i + 0x9e3779b97f4a7c15ull);
    const float a = __uint_as_float((uint32_t)h);
    /* b > 0 with exponent in [2^-40, 2^40] */
    const uint32_t be = 127 - 40 + (uint32_t)((h >> 32) % 81);
    const float b = __uint_as_float((be << 23) | ((uint32_t)(h >> 40) & 0x7fffffu));
    check_div(a, b, bad);
  }
  atomicAdd(&g_div_bad, bad);
}

__global__ void exp_all() {
  unsigned int worst = 0;
  /* x = -0 .. -105: the bit patterns 0x80000000 .. bits(-105) */
  const uint32_t hi = __float_as_uint(-105.0f);
  for (uint32_t u = 0x80000000u + blockIdx.x * blockDim.x + threadIdx.x; u <= hi;
       u += gridDim.x * blockDim.x) {
    const float x = __uint_as_float(u);
    const double want = exp((double)x);
    const float got = fast_exp(x);
    /* below 2^-125 the result may be 0 by design; a nonzero one must be close */
    const double err = got == 0.0f && want < 2.350988701644575e-38
                           ? 0.0
                           : fabs((double)got - want) / ldexp(1.0, ilogb(want) - 23);
    const unsigned int e = (unsigned int)fmin(err * 1000.0, 4e9);
    if (e > worst) worst = e;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 &&
      (fast_exp(0.0f) != 1.0f || fast_exp(-INFINITY) != 0.0f || fast_exp(NAN) != 0.0f ||
       fast_exp(-128.0f) != 0.0f || fast_exp(-3e38f) != 0.0f))
    worst = 4000000000u; /* reported as a huge error */
  atomicMax(&g_exp_ulps_x1000, worst);
}

__global__ void gumbel_all() {
  unsigned int worst = 0;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < 33u << 23;
       i += gridDim.x * blockDim.x) {
    const uint32_t z = i >> 23, m = i & 0x7fffffu;
    const float u = __uint_as_float(((126u - z) << 23) | m);
    if (u >= 1.0f - 5.9604645e-8f) continue; /* the generator's u <= 1 - 2^-24 */
    const float exact = ingot_sampling_ref_gumbel_of(u);
    const float approx = gumbel_approx(u);
    const double err = fabs((double)exact - (double)approx);
    const unsigned int e = (unsigned int)fmin(err * 1e9, 4e9);
    if (e > worst) worst = e;
  }
  atomicMax(&g_gumbel_err_x1e9, worst);
}

__device__ __forceinline__ float s_of(float x, float m, float T) {
  return __fdiv_rn(__fsub_rn(x, m), T);
}

__global__ void floor_random(uint64_t cases) {
  unsigned long long bad = 0, n = 0;
  unsigned int window = 0;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < cases;
       i += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t h = mix(i ^ 0x243f6a8885a308d3ull), g = mix(h);
    const uint32_t em = 127 - 60 + (uint32_t)(h % 187); /* m in [2^-60, 2^127) */
    const float m = __uint_as_float(((uint32_t)(h >> 8) & 0x80000000u) | em << 23 |
                                    ((uint32_t)(h >> 9) & 0x7fffffu));
    const int ed = (int)em - 30 + (int)((g >> 3) % 41); /* d from 2^-30 to 2^10 of m */
    const float d = (g & 7) == 0 ? 0.0f
                                 : __uint_as_float((uint32_t)min(max(ed, 1), 254) << 23 |
                                                   ((uint32_t)(g >> 11) & 0x7fffffu));
    const float x_l = __fsub_rn(m, d);
    const float T = __uint_as_float((127u - 45u + (uint32_t)((g >> 40) % 91)) << 23 |
                                    ((uint32_t)(h >> 40) & 0x7fffffu));
    const float s_l = s_of(x_l, m, T);
    if (!(fabsf(x_l) < INFINITY) || !(s_l > -INFINITY)) continue;
    n++;
    const float lim = x_floor(s_l, m, T);
    if (!(lim <= x_l)) {
      bad++;
      continue;
    }
    const float below = nextafterf(lim, -INFINITY);
    if (lim > -INFINITY && below > -INFINITY && s_of(below, m, T) >= s_l) bad++;
    if (lim > -INFINITY) {
      const double ulp = (double)x_l - (double)nextafterf(x_l, -INFINITY);
      const double w = ((double)x_l - (double)lim) /
                       (fabs((double)x_l - (double)m) + ulp + (double)T * 0x1p-126);
      window = max(window, (unsigned int)fmin(w * 1000.0, 4e9));
    }
  }
  atomicAdd(&g_floor_bad, bad);
  atomicAdd(&g_floor_cases, n);
  atomicMax(&g_floor_window_x1000, window);
}

// One line per check; returns 1 if it failed.
static int report(const char *what, bool ok) {
  printf("%s %s\n", ok ? "ok    " : "FAILED", what);
  return ok ? 0 : 1;
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("SKIPPED test_sampling_math_cuda: no CUDA device\n");
    return 77;
  }
  const float temps[16] = {1.0f, 0.8f, 0.7f, 0.6f, 0.5f, 0.3f, 0.1f, 1.5f,
                           2.0f, 1.3f, 0.95f, 0.05f, 1e-3f, 7.0f, 0.333f, 1.1f};
  float *dt;
  cudaMalloc(&dt, sizeof temps);
  cudaMemcpy(dt, temps, sizeof temps, cudaMemcpyHostToDevice);
  char line[160];
  int failed = 0;
  unsigned long long bad = 0;
  div_all_a<<<2048, 256>>>(dt, 16);
  cudaMemcpyFromSymbol(&bad, g_div_bad, sizeof bad);
  snprintf(line, sizeof line, "div_exact vs __fdiv_rn, every fp32 a x 16 temperatures: %llu differ",
           bad);
  failed += report(line, bad == 0);
  const uint64_t pairs = 1ull << 36;
  div_random<<<4096, 256>>>(pairs);
  unsigned long long bad2 = 0;
  cudaMemcpyFromSymbol(&bad2, g_div_bad, sizeof bad2);
  snprintf(line, sizeof line,
           "div_exact vs __fdiv_rn, 2^36 random pairs (b in [2^-40, 2^40]): %llu differ",
           bad2 - bad);
  failed += report(line, bad2 == bad);
  exp_all<<<2048, 256>>>();
  unsigned int ulps = 0;
  cudaMemcpyFromSymbol(&ulps, g_exp_ulps_x1000, sizeof ulps);
  snprintf(line, sizeof line, "fast_exp over every fp32 in [-105, 0]: worst error %.3f ulp (<= 3)",
           ulps / 1000.0);
  failed += report(line, ulps <= 3000);
  gumbel_all<<<2048, 256>>>();
  unsigned int gerr = 0;
  cudaMemcpyFromSymbol(&gerr, g_gumbel_err_x1e9, sizeof gerr);
  snprintf(line, sizeof line,
           "gumbel_approx over every generator uniform: worst |error| %.3g (<= 2e-5)", gerr / 1e9);
  failed += report(line, gerr <= 20000);
  floor_random<<<4096, 256>>>(1ull << 32);
  unsigned long long fbad = 0, fcases = 0;
  unsigned int fwin = 0;
  cudaMemcpyFromSymbol(&fbad, g_floor_bad, sizeof fbad);
  cudaMemcpyFromSymbol(&fcases, g_floor_cases, sizeof fcases);
  cudaMemcpyFromSymbol(&fwin, g_floor_window_x1000, sizeof fwin);
  snprintf(line, sizeof line,
           "x_floor over %llu random (m, x_L, T): %llu reach s_L below it, widest window %.3f",
           fcases, fbad, fwin / 1000.0);
  failed += report(line, fbad == 0 && fcases > 0);
  const cudaError_t e = cudaDeviceSynchronize();
  failed += report(cudaGetErrorString(e), e == cudaSuccess);
  cudaFree(dt);
  printf("%d passed, %d failed\n", 6 - failed, failed);
  return failed ? 1 : 0;
}
