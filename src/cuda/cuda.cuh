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

#endif
