/*
 * Test-only kernels (built into the tests, not into libingot): the NVFP4 GeGLU
 * epilogue's gelu_tanh and division, element by element, so that
 * test_nvfp4_gemm_cuda.c can compare them bit for bit with the CPU's.
 */
#include "cuda/common.cuh"
#include "cuda/nvfp4/nvfp4_epilogue_math.cuh"

using namespace ingot_nvfp4;

namespace {

__global__ void epilogue_gelu_kernel(const float *g, float *out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float y = gelu_y(g[i]);
    out[i] = gelu_fast_ok(y) ? gelu_fast(g[i], y) : ingot_gelu_tanh(g[i]);
  }
}

__global__ void epilogue_div_kernel(const float *n, const float *d, float *out, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = fdiv_fast(n[i], d[i]);
}

}  // namespace

// out[i] = the GeGLU epilogue's gelu_tanh(g[i]) (device pointers).
extern "C" ingot_status ingot_test_epilogue_gelu(struct ingot_context *ctx, const float *g,
                                                float *out, int64_t n, cudaStream_t stream) {
  static const char op[] = "ingot_test_epilogue_gelu";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  epilogue_gelu_kernel<<<ingot_cuda_grid(ctx, n, 256, 8), 256, 0, stream>>>(g, out, n);
  return ingot_cuda_check_launch(ctx, op);
}

// out[i] = the epilogue's fast division n[i] / d[i] (device pointers; operands in the
// range its callers guarantee).
extern "C" ingot_status ingot_test_epilogue_div(struct ingot_context *ctx, const float *n,
                                               const float *d, float *out, int64_t count,
                                               cudaStream_t stream) {
  static const char op[] = "ingot_test_epilogue_div";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  epilogue_div_kernel<<<ingot_cuda_grid(ctx, count, 256, 8), 256, 0, stream>>>(n, d, out, count);
  return ingot_cuda_check_launch(ctx, op);
}
