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

/* Per-context set-up of the sampling kernels (src/cuda/sampling/). */
extern "C" void ingot_cuda_sampling_init(struct ingot_context *ctx);

/* The dense kernel (src/cuda/sampling_dense.cu), for rows without a filter
 * (in ingot_sample calls with top-n outputs too, n <= dense_small_k) and
 * (ingot_sample, in calls without top-n outputs) rows with a small top-k.
 * dense_mode (host only, nothing launched): 0 when it
 * serves no row of the call; 1 when it serves every row (no filter tensor
 * given); 2 when filter tensors are given: it serves its rows (launch it with
 * split = 1) and the general kernel the others (also with split = 1).
 * dense_small_k: the largest top_k (or top-n) the dense kernel takes in an
 * ingot_sample call (0: none); both launches of a call get the same small_k,
 * 0 in calls with top-n outputs and in ingot_sampling_softmax. */
extern "C" void ingot_cuda_sampling_dense_init(struct ingot_context *ctx);
int ingot_cuda_sampling_dense_mode(const struct ingot_context *ctx,
                                   const ingot_sampling_input *in, int64_t num_top, int softmax);
int ingot_cuda_sampling_dense_small_k(const struct ingot_context *ctx,
                                      const ingot_sampling_input *in);
ingot_status ingot_cuda_sample_dense(struct ingot_context *ctx, const ingot_sampling_input *in,
                                     const ingot_sampling_output *out, int split, int small_k,
                                     struct CUstream_st *stream);
ingot_status ingot_cuda_sampling_softmax_dense(struct ingot_context *ctx,
                                               const ingot_sampling_input *in, float *probs,
                                               int64_t probs_stride, uint32_t *row_status,
                                               int split, struct CUstream_st *stream);
/* The wide softmax (sampling_dense.cu): ingot_sampling_softmax for a few
 * rows without filter tensors or lists, each row over many blocks of the
 * whole GPU, partial results in the workspace (wide_fits: it takes the
 * call; wide_workspace: its bytes for any batch, 0 when it is never used). */
size_t ingot_cuda_sampling_wide_workspace(const struct ingot_context *ctx, int64_t vocab);
int ingot_cuda_sampling_softmax_wide_fits(const struct ingot_context *ctx,
                                          const ingot_sampling_input *in);
ingot_status ingot_cuda_sampling_softmax_wide(struct ingot_context *ctx,
                                              const ingot_sampling_input *in, float *probs,
                                              int64_t probs_stride, uint32_t *row_status,
                                              void *workspace, struct CUstream_st *stream);
/* The wide sampler (sampling_dense.cu): the same for ingot_sample calls
 * without filter tensors, lists or top-n outputs (the dense kernel's bits). */
size_t ingot_cuda_sample_wide_workspace(const struct ingot_context *ctx, int64_t vocab,
                                        int64_t num_top);
int ingot_cuda_sample_wide_fits(const struct ingot_context *ctx, const ingot_sampling_input *in,
                                const ingot_sampling_output *out);
ingot_status ingot_cuda_sample_wide(struct ingot_context *ctx, const ingot_sampling_input *in,
                                    const ingot_sampling_output *out, void *workspace,
                                    struct CUstream_st *stream);

#endif
