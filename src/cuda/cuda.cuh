/* CUDA backend entry points, one per op (listed in backend.cu's table). */
#ifndef INGOT_CUDA_CUDA_CUH
#define INGOT_CUDA_CUDA_CUH

#include "core/internal.h"

ingot_status ingot_cuda_ngram_row_ids(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                                      const ingot_ngram_batch *batch, ingot_ngram_rows rows,
                                      struct CUstream_st *stream);
ingot_status ingot_cuda_ngram_commit_context(struct ingot_context *ctx,
                                             const ingot_ngram_config *cfg,
                                             const ingot_ngram_batch *batch,
                                             struct CUstream_st *stream);
ingot_status ingot_cuda_ngram_gather(struct ingot_context *ctx, const int64_t *rows,
                                     int64_t rows_stride, int64_t num_tokens, int64_t num_heads,
                                     const ingot_ngram_table *table, ingot_bf16_matrix out,
                                     struct CUstream_st *stream);
ingot_status ingot_cuda_ngram_embed(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                                    const ingot_ngram_batch *batch,
                                    const ingot_ngram_table *table, ingot_bf16_matrix out,
                                    struct CUstream_st *stream);

ingot_status ingot_cuda_nvfp4_global_scale(struct ingot_context *ctx, const ingot_nvfp4_source *x,
                                           float *global_scale, struct CUstream_st *stream);
ingot_status ingot_cuda_nvfp4_quantize(struct ingot_context *ctx, const ingot_nvfp4_source *x,
                                       const float *global_scale, const ingot_nvfp4_packed *out,
                                       uint32_t *nonfinite_count, struct CUstream_st *stream);
ingot_status ingot_cuda_nvfp4_dequantize(struct ingot_context *ctx, const ingot_nvfp4_packed *in,
                                         const float *global_scale, ingot_nvfp4_dense out,
                                         struct CUstream_st *stream);
ingot_status ingot_cuda_nvfp4_swizzle_scales(struct ingot_context *ctx, const uint8_t *linear,
                                             int64_t linear_stride,
                                             const ingot_nvfp4_packed *layout,
                                             struct CUstream_st *stream);
ingot_status ingot_cuda_nvfp4_unswizzle_scales(struct ingot_context *ctx,
                                               const ingot_nvfp4_packed *layout, uint8_t *linear,
                                               int64_t linear_stride, struct CUstream_st *stream);

#endif
