/* CUDA backend: ingot_cuda_<op> for every op of core/ops.h (cuda_backend.cu's table),
 * the per-context set-up of each family, and the backend's own state. */
#ifndef INGOT_CUDA_CUDA_CUH
#define INGOT_CUDA_CUDA_CUH

#include "core/internal.h"
#include "cuda/cuda_state.h"

#define INGOT_CUDA_PROTOTYPE(op, params) ingot_status ingot_cuda_##op params;
INGOT_BACKEND_OPS(INGOT_CUDA_PROTOTYPE)
#undef INGOT_CUDA_PROTOTYPE

/* Per-context set-up of the NVFP4 GEMM kernels (src/cuda/nvfp4/nvfp4_gemm.cu):
 * their dynamic shared memory limits, set once instead of on every call. */
extern "C" void ingot_cuda_nvfp4_gemm_init(struct ingot_context *ctx);

/* Per-context set-up of the sampling kernels (src/cuda/sampling/sampling_dispatch.cu;
 * the paths' own interface is src/cuda/sampling/sampling_paths.cuh). */
extern "C" void ingot_cuda_sampling_init(struct ingot_context *ctx);

#endif
