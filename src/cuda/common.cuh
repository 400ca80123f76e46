/*
 * Shared helpers of the CUDA backend: error checks that return an
 * ingot_status (never exit), a guard that makes the context's device current
 * for the duration of a call, and launch geometry.
 */
#ifndef INGOT_CUDA_COMMON_CUH
#define INGOT_CUDA_COMMON_CUH

#include <cuda_runtime.h>

#include "core/internal.h"

/* Returns CUDA_ERROR with "<op>: <call>: <cuda error>" from the enclosing
 * function if `call` fails. */
#define INGOT_CUDA_TRY(ctx, op, call)                                                   \
  do {                                                                                  \
    cudaError_t ingot_err_ = (call);                                                    \
    if (ingot_err_ != cudaSuccess)                                                      \
      return ingot_core_fail((ctx), INGOT_STATUS_CUDA_ERROR, (op), "%s: %s (%s)", #call, \
                             cudaGetErrorString(ingot_err_), cudaGetErrorName(ingot_err_)); \
  } while (0)

/* Makes ctx->device current and restores the caller's device on scope exit. */
struct ingot_device_guard {
  int previous = -1;
  bool changed = false;
  cudaError_t enter(int device) {
    cudaError_t e = cudaGetDevice(&previous);
    if (e != cudaSuccess) return e;
    if (previous != device) {
      e = cudaSetDevice(device);
      changed = e == cudaSuccess;
    }
    return e;
  }
  ~ingot_device_guard() {
    if (changed) cudaSetDevice(previous);
  }
};

/* A shared-memory pointer as the 32-bit shared-space address that PTX
 * instructions (cp.async, mbarrier, st.async, ldmatrix, ...) take. */
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* Checks the launch that was just enqueued. */
static inline ingot_status ingot_cuda_check_launch(struct ingot_context *ctx, const char *op) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return ingot_core_fail(ctx, INGOT_STATUS_CUDA_ERROR, op,
                           "kernel launch (or an earlier CUDA error still pending): %s (%s)",
                           cudaGetErrorString(e), cudaGetErrorName(e));
  return INGOT_STATUS_SUCCESS;
}

/* Blocks for `items` work items of `per_block` each, capped for grid-stride
 * kernels at `waves` blocks per SM. */
static inline unsigned ingot_cuda_grid(const struct ingot_context *ctx, int64_t items,
                                       int per_block, int waves) {
  int64_t blocks = (items + per_block - 1) / per_block;
  int64_t cap = (int64_t)ctx->sm_count * waves;
  if (blocks > cap) blocks = cap;
  return (unsigned)(blocks < 1 ? 1 : blocks);
}

#endif /* INGOT_CUDA_COMMON_CUH */
