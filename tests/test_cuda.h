/*
 * Shared by the GPU tests (built only with INGOT_WITH_CUDA): a CUDA runtime
 * call that fails records a test failure naming the call and returns 1 from
 * the test function.
 */
#ifndef INGOT_TEST_CUDA_H
#define INGOT_TEST_CUDA_H

#include <cuda_runtime_api.h>

#include "test_util.h"

#define CUDA_OK(call)                                                            \
  do {                                                                           \
    cudaError_t e_ = (call);                                                     \
    if (e_ != cudaSuccess) {                                                     \
      test_fail_at(__FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(e_)); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

/* Host -> device copies and fills that are complete on return. cudaMemcpy from
 * pageable memory may return before its DMA lands, and cudaMemset is
 * asynchronous; both run on the legacy stream, which the tests' non-blocking
 * stream does not wait for, so a kernel on it could read the old bytes, or
 * write before the fill lands (seen with GPU tests run side by side). */
static inline cudaError_t test_upload(void *dst, const void *src, size_t bytes) {
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}
static inline cudaError_t test_fill(void *dst, int byte, size_t bytes) {
  cudaError_t e = cudaMemset(dst, byte, bytes);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

#endif /* INGOT_TEST_CUDA_H */
