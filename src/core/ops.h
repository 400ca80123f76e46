/*
 * The one list of backend ops. Each entry is X(op, (parameters)); from it
 * come the op-table struct (core/internal.h), the prototypes of each backend
 * (ingot_cpu_<op> in cpu/cpu.h, ingot_cuda_<op> in cuda/cuda.cuh) and both
 * backend tables (cpu_backend.c, cuda_backend.cu). Adding an op: one line
 * here, its validation in src/core/<family>_api.c, then ingot_cpu_<op> and
 * ingot_cuda_<op>; the compiler names whatever is missing.
 *
 * Core validates every argument before it calls an entry (see internal.h for
 * the argument bundles); an entry only rejects what is specific to its
 * backend. The size queries get validated shapes (batch >= 0, sizes whose
 * byte counts fit); the ops get a workspace of at least the size their query
 * gave.
 */
#ifndef INGOT_CORE_OPS_H
#define INGOT_CORE_OPS_H

/* clang-format off */
#define INGOT_BACKEND_OPS(X)                                                                   \
  /* ---- n-gram embeddings. rows [T, H]; out [T, H*D] bf16 ---- */                            \
  X(ngram_row_ids, (struct ingot_context *ctx, const ingot_ngram_config *cfg,                 \
                    const ingot_ngram_batch *batch, ingot_ngram_rows rows,                    \
                    struct CUstream_st *stream))                                              \
  X(ngram_commit_context, (struct ingot_context *ctx, const ingot_ngram_config *cfg,          \
                           const ingot_ngram_batch *batch, struct CUstream_st *stream))       \
  X(ngram_gather, (struct ingot_context *ctx, const int64_t *rows, int64_t rows_stride,       \
                   int64_t num_tokens, int64_t num_heads, const ingot_ngram_table *table,     \
                   ingot_bf16_matrix out, struct CUstream_st *stream))                        \
  X(ngram_embed, (struct ingot_context *ctx, const ingot_ngram_config *cfg,                   \
                  const ingot_ngram_batch *batch, const ingot_ngram_table *table,             \
                  ingot_bf16_matrix out, struct CUstream_st *stream))                         \
  /* ---- NVFP4 format. global_scale: one float in the context's memory; quantize's        */ \
  /* nonfinite_count may be NULL; quantize and swizzle write every scale byte (padding 0) */  \
  X(nvfp4_global_scale, (struct ingot_context *ctx, const ingot_nvfp4_source *x,              \
                         float *global_scale, struct CUstream_st *stream))                    \
  X(nvfp4_quantize, (struct ingot_context *ctx, const ingot_nvfp4_source *x,                  \
                     const float *global_scale, const ingot_nvfp4_packed *out,                \
                     uint32_t *nonfinite_count, struct CUstream_st *stream))                  \
  X(nvfp4_dequantize, (struct ingot_context *ctx, const ingot_nvfp4_packed *in,               \
                       const float *global_scale, ingot_nvfp4_dense out,                      \
                       struct CUstream_st *stream))                                           \
  X(nvfp4_swizzle_scales, (struct ingot_context *ctx, const uint8_t *linear,                  \
                           int64_t linear_stride, const ingot_nvfp4_packed *layout,           \
                           struct CUstream_st *stream))                                       \
  X(nvfp4_unswizzle_scales, (struct ingot_context *ctx, const ingot_nvfp4_packed *layout,     \
                             uint8_t *linear, int64_t linear_stride,                          \
                             struct CUstream_st *stream))                                     \
  /* ---- NVFP4 GEMM / fused GeGLU. Core checked K % 64, N % 64, 2H % 64.                  */ \
  /* gemm: d [M, N] <- a [M, K] x b [N, K]^T; geglu: h [M, H] (values + every scale byte) */  \
  /* <- GeGLU(a [M, K] x w [2H, K]^T), quantized with h_global_scale                       */ \
  X(nvfp4_gemm_workspace_size, (struct ingot_context *ctx, int64_t m, int64_t n, int64_t k,   \
                                size_t *bytes))                                               \
  X(nvfp4_gemm, (struct ingot_context *ctx, const ingot_nvfp4_operand *a,                     \
                 const ingot_nvfp4_operand *b, ingot_nvfp4_dense d, void *workspace,          \
                 size_t workspace_bytes, struct CUstream_st *stream))                         \
  X(nvfp4_geglu_workspace_size, (struct ingot_context *ctx, int64_t m, int64_t hidden,        \
                                 int64_t k, size_t *bytes))                                   \
  X(nvfp4_geglu, (struct ingot_context *ctx, const ingot_nvfp4_operand *a,                    \
                  const ingot_nvfp4_operand *w, const ingot_nvfp4_packed *h,                  \
                  const float *h_global_scale, void *workspace, size_t workspace_bytes,       \
                  struct CUstream_st *stream))                                                \
  /* ---- sampling. probs [B, V]; row_status may be NULL; the ops get batch >= 1          */ \
  X(sampling_softmax_workspace_size, (struct ingot_context *ctx, int64_t batch,               \
                                      int64_t vocab, ingot_dtype dtype, size_t *bytes))       \
  X(sampling_softmax, (struct ingot_context *ctx, const ingot_sampling_input *in,             \
                       float *probs, int64_t probs_stride, uint32_t *row_status,              \
                       void *workspace, size_t workspace_bytes, struct CUstream_st *stream))  \
  X(sample_workspace_size, (struct ingot_context *ctx, int64_t batch, int64_t vocab,          \
                            ingot_dtype dtype, int64_t num_top, size_t *bytes))               \
  X(sample, (struct ingot_context *ctx, const ingot_sampling_input *in,                       \
             const ingot_sampling_output *out, void *workspace, size_t workspace_bytes,       \
             struct CUstream_st *stream))                                                     \
  /* ---- sharded sampling (records: common/sampling_shard.h). gathered: the S records of */ \
  /* the previous step (NULL at step 0). The ops but the size query get batch >= 1.       */ \
  X(sampling_shard_workspace_size, (struct ingot_context *ctx,                                \
                                    const ingot_sampling_shard_call *call, size_t *bytes))    \
  X(sampling_shard_step, (struct ingot_context *ctx, const ingot_sampling_shard_call *call,   \
                          int32_t step, const void *gathered, void *record, void *workspace,  \
                          size_t workspace_bytes, struct CUstream_st *stream))                \
  X(sampling_shard_finish_sample, (struct ingot_context *ctx,                                 \
                                   const ingot_sampling_shard_call *call,                     \
                                   const void *gathered, const ingot_sampling_output *out,    \
                                   void *workspace, size_t workspace_bytes,                   \
                                   struct CUstream_st *stream))                               \
  X(sampling_shard_finish_softmax, (struct ingot_context *ctx,                                \
                                    const ingot_sampling_shard_call *call,                    \
                                    const void *gathered, float *probs, int64_t probs_stride, \
                                    uint32_t *row_status, void *workspace,                    \
                                    size_t workspace_bytes, struct CUstream_st *stream))      \
  X(sampling_shard_gather, (struct ingot_context *ctx, int32_t num_shards,                    \
                            const void *const *records, size_t record_bytes, void *gathered,  \
                            struct CUstream_st *stream))                                      \
  X(sampling_shard_sum, (struct ingot_context *ctx, int32_t num_shards,                       \
                         const void *const *records, size_t record_bytes, void *summed,       \
                         struct CUstream_st *stream))                                         \
  /* ---- NCCL (CUDA only; NOT_SUPPORTED when not built with it or not loadable).          */ \
  /* exchange: INGOT_SAMPLING_SHARD_EXCHANGE_GATHER (all-gather of bytes) or _SUM          */ \
  /* (all-reduce of uint64 words, ncclSum), enqueued on stream                             */ \
  X(nccl_comm_info, (struct ingot_context *ctx, const char *op, struct ncclComm *comm,        \
                     int32_t *ranks, int32_t *rank, int32_t *device))                         \
  X(nccl_exchange, (struct ingot_context *ctx, const char *op, struct ncclComm *comm,         \
                    int32_t exchange, const void *record, size_t record_bytes, void *out,     \
                    struct CUstream_st *stream))                                         \
  /* mine (host, `bytes`) of every rank -> all (host, ranks x bytes), through device     */ \
  /* memory it allocates; waits for the stream: a setup call, refused during capture      */ \
  X(nccl_all_gather_host, (struct ingot_context *ctx, const char *op, struct ncclComm *comm,  \
                           const void *mine, size_t bytes, int32_t ranks, void *all,         \
                           struct CUstream_st *stream))
/* clang-format on */

#endif /* INGOT_CORE_OPS_H */
