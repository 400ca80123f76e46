/* CPU reference backend: one function per op, listed in backend.c's table. */
#ifndef INGOT_CPU_CPU_H
#define INGOT_CPU_CPU_H

#include "core/internal.h"

ingot_status ingot_cpu_ngram_row_ids(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                                     const ingot_ngram_batch *batch, ingot_ngram_rows rows,
                                     struct CUstream_st *stream);
ingot_status ingot_cpu_ngram_commit_context(struct ingot_context *ctx,
                                            const ingot_ngram_config *cfg,
                                            const ingot_ngram_batch *batch,
                                            struct CUstream_st *stream);
ingot_status ingot_cpu_ngram_gather(struct ingot_context *ctx, const int64_t *rows,
                                    int64_t rows_stride, int64_t num_tokens, int64_t num_heads,
                                    const ingot_ngram_table *table, ingot_bf16_matrix out,
                                    struct CUstream_st *stream);
ingot_status ingot_cpu_ngram_embed(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                                   const ingot_ngram_batch *batch,
                                   const ingot_ngram_table *table, ingot_bf16_matrix out,
                                   struct CUstream_st *stream);

#endif /* INGOT_CPU_CPU_H */
