/*
 * Sharded sampling, CUDA backend: not implemented yet. Core has validated
 * every argument (include/ingot/ingot.h, Sharded sampling); each entry
 * answers NOT_SUPPORTED, naming the op. The CPU backend
 * (src/cpu/sampling_shard_cpu.c) and common/sampling_shard.h (steps, record
 * layout) are the reference a CUDA version must match byte for byte.
 */
#include "cuda/cuda.cuh"

namespace {

ingot_status not_yet(struct ingot_context *ctx, const char *op) {
  return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                         "sharded sampling is implemented on the CPU backend only for now");
}

}  // namespace

ingot_status ingot_cuda_sampling_shard_workspace_size(struct ingot_context *ctx,
                                                      const ingot_sampling_shard_call *,
                                                      size_t *) {
  return not_yet(ctx, "ingot_sampling_shard_get_plan");
}

ingot_status ingot_cuda_sampling_shard_step(struct ingot_context *ctx,
                                            const ingot_sampling_shard_call *, int32_t,
                                            const void *, void *, void *, size_t,
                                            struct CUstream_st *) {
  return not_yet(ctx, "ingot_sampling_shard_step");
}

ingot_status ingot_cuda_sampling_shard_finish_sample(struct ingot_context *ctx,
                                                     const ingot_sampling_shard_call *,
                                                     const void *, const ingot_sampling_output *,
                                                     void *, size_t, struct CUstream_st *) {
  return not_yet(ctx, "ingot_sampling_shard_finish_sample");
}

ingot_status ingot_cuda_sampling_shard_finish_softmax(struct ingot_context *ctx,
                                                      const ingot_sampling_shard_call *,
                                                      const void *, float *, int64_t, uint32_t *,
                                                      void *, size_t, struct CUstream_st *) {
  return not_yet(ctx, "ingot_sampling_shard_finish_softmax");
}

ingot_status ingot_cuda_sampling_shard_gather(struct ingot_context *ctx, int32_t,
                                              const void *const *, size_t, void *,
                                              struct CUstream_st *) {
  return not_yet(ctx, "ingot_sampling_shard_gather");
}

ingot_status ingot_cuda_sampling_shard_sum(struct ingot_context *ctx, int32_t,
                                           const void *const *, size_t, void *,
                                           struct CUstream_st *) {
  return not_yet(ctx, "ingot_sampling_shard_sum");
}
