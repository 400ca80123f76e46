/*
 * The CUDA backend's part of a context (ctx->cuda): made by the backend's
 * context_init, freed by its context_fini, never seen by core or the CPU
 * backend. Plain C, so that the CUDA tests can read what was set up.
 */
#ifndef INGOT_CUDA_CUDA_STATE_H
#define INGOT_CUDA_CUDA_STATE_H

#include <stdint.h>

typedef struct ingot_cuda_sampling_state {
  int max_cluster;        /* blocks per row the sampling kernels may use */
  int dynamic_smem;       /* their dynamic shared memory limit (bytes) */
  int dense_cluster;      /* blocks per row of the dense path (0: unusable) */
  int dense_smem;         /* its dynamic shared memory limit (bytes) */
  int half;               /* the 16-bit softmax runs the dense path's clusters */
  int pdl;                /* the kernels run their sm_90 code (griddepcontrol): launch them
                           * with programmatic dependent launch; the wide paths may run */
  const char *init_error; /* why the sampling kernels could not be set up */
} ingot_cuda_sampling_state;

typedef struct ingot_cuda_state {
  uint32_t *device_errors;       /* one device word of INGOT_DEVICE_ERROR_* bits */
  uint32_t *device_errors_taken; /* where the check reads the word out */
  int smem_optin;                /* shared memory a block may opt in to (bytes) */
  int nvfp4_sm90;                /* the NVFP4 GEMM runs its Hopper path (sm_90a code) */
  ingot_cuda_sampling_state sampling;
} ingot_cuda_state;

#endif /* INGOT_CUDA_CUDA_STATE_H */
