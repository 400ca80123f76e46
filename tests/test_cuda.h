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

#endif /* INGOT_TEST_CUDA_H */
