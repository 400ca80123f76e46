/*
 * Hashed n-gram embeddings, CPU reference backend: loops over the documented
 * arithmetic in common/ngram_ref.h. This is the test oracle; keep it plain.
 */
#include "common/ngram_ref.h"
#include "cpu/cpu.h"

ingot_status ingot_cpu_ngram_row_ids(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                                     const ingot_ngram_batch *batch, ingot_ngram_rows rows,
                                     struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  for (int64_t b = 0; b < batch->num_requests; b++) {
    int64_t begin = ingot_ref_load_index(batch->cu_seqlens, batch->cu_dtype, b);
    int64_t end = ingot_ref_load_index(batch->cu_seqlens, batch->cu_dtype, b + 1);
    for (int64_t t = begin; t < end; t++)
      ingot_ref_token_rows(cfg, batch, b, t, t - begin, rows.data + t * rows.stride);
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_ngram_commit_context(struct ingot_context *ctx,
                                            const ingot_ngram_config *cfg,
                                            const ingot_ngram_batch *batch,
                                            struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  for (int64_t b = 0; b < batch->num_requests; b++) ingot_ref_commit_request(cfg, batch, b);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_ngram_gather(struct ingot_context *ctx, const int64_t *rows,
                                    int64_t rows_stride, int64_t num_tokens, int64_t num_heads,
                                    const ingot_ngram_table *table, ingot_bf16_matrix out,
                                    struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  for (int64_t t = 0; t < num_tokens; t++)
    for (int64_t h = 0; h < num_heads; h++)
      ingot_ref_gather_row(table, rows[t * rows_stride + h],
                           out.data + t * out.stride + h * table->dim);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_ngram_embed(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                                   const ingot_ngram_batch *batch,
                                   const ingot_ngram_table *table, ingot_bf16_matrix out,
                                   struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  for (int64_t b = 0; b < batch->num_requests; b++) {
    int64_t begin = ingot_ref_load_index(batch->cu_seqlens, batch->cu_dtype, b);
    int64_t end = ingot_ref_load_index(batch->cu_seqlens, batch->cu_dtype, b + 1);
    for (int64_t t = begin; t < end; t++) {
      int64_t rows[INGOT_NGRAM_MAX_HEADS];
      ingot_ref_token_rows(cfg, batch, b, t, t - begin, rows);
      for (int h = 0; h < cfg->num_heads; h++)
        ingot_ref_gather_row(table, rows[h], out.data + t * out.stride + h * table->dim);
    }
  }
  return INGOT_STATUS_SUCCESS;
}
