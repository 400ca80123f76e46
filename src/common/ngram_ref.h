/*
 * Hashed n-gram embeddings: the documented arithmetic (docs/ple.md), written once
 * as plainly as possible, per token / per request / per row. The CPU backend
 * loops over these; the CUDA backend runs them one thread per item when
 * INGOT_FORCE_REFERENCE is set. The optimized CUDA kernels are separate code
 * and are tested against these.
 */
#ifndef INGOT_COMMON_NGRAM_REF_H
#define INGOT_COMMON_NGRAM_REF_H

#include "common/numeric.h"
#include "core/internal.h"

INGOT_HD int64_t ingot_ref_load_index(const void *p, ingot_dtype dtype, int64_t i) {
  return dtype == INGOT_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

INGOT_HD void ingot_ref_store_index(void *p, ingot_dtype dtype, int64_t i, int64_t v) {
  if (dtype == INGOT_DTYPE_I32)
    ((int32_t *)p)[i] = (int32_t)v;
  else
    ((int64_t *)p)[i] = v;
}

/* Non-negative remainder of a by m (m >= 1); C's % truncates toward zero. */
INGOT_HD int64_t ingot_ref_floor_mod(int64_t a, int64_t m) {
  int64_t r = a % m;
  return r < 0 ? r + m : r;
}

/* The token s places left of token t (s >= 0), t at offset `local` of
 * request b: ids[t-s] if local >= s, else context[b][n-1+local-s]. */
INGOT_HD int64_t ingot_ref_token_left(const ingot_ngram_config *cfg,
                                      const ingot_ngram_batch *batch, int64_t b, int64_t t,
                                      int64_t local, int s) {
  if (local >= s) return ingot_ref_load_index(batch->ids, batch->ids_dtype, t - s);
  int64_t col = cfg->n - 1 + local - s;
  return ingot_ref_load_index(batch->context, batch->ids_dtype, b * batch->context_stride + col);
}

/* rows_out[0..H-1] for token t at offset `local` of request b. */
INGOT_HD void ingot_ref_token_rows(const ingot_ngram_config *cfg, const ingot_ngram_batch *batch,
                                   int64_t b, int64_t t, int64_t local, int64_t *rows_out) {
  const int64_t E = cfg->boundary_token;
  int64_t x[INGOT_NGRAM_MAX_N];
  int valid = 1;
  x[0] = ingot_ref_load_index(batch->ids, batch->ids_dtype, t); /* shift 0: never masked */
  for (int s = 1; s < cfg->n; s++) {
    int64_t v = ingot_ref_token_left(cfg, batch, b, t, local, s);
    if (v == E) valid = 0; /* a boundary is itself a wall: x_s.. are invalid */
    x[s] = valid ? v : E;
  }
  /* two's-complement wrapping products: unsigned arithmetic */
  uint64_t mix = (uint64_t)x[0] * (uint64_t)cfg->multipliers[0];
  for (int k = 2; k <= cfg->n; k++) {
    mix ^= (uint64_t)x[k - 1] * (uint64_t)cfg->multipliers[k - 1];
    for (int j = 0; j < cfg->heads_per_order; j++) {
      int h = (k - 2) * cfg->heads_per_order + j;
      rows_out[h] = ingot_ref_floor_mod((int64_t)mix, cfg->primes[h]) + cfg->offsets[h];
    }
  }
}

/* context[b] <- last n-1 tokens of context[b] ++ ids[cu[b], cu[b+1]). */
INGOT_HD void ingot_ref_commit_request(const ingot_ngram_config *cfg,
                                       const ingot_ngram_batch *batch, int64_t b) {
  const int w = cfg->n - 1;
  int64_t begin = ingot_ref_load_index(batch->cu_seqlens, batch->cu_dtype, b);
  int64_t len = ingot_ref_load_index(batch->cu_seqlens, batch->cu_dtype, b + 1) - begin;
  int64_t window[INGOT_NGRAM_MAX_N];
  for (int i = 0; i < w; i++) {
    int64_t src = len + i - w; /* < 0: inside the old context */
    window[i] = src < 0 ? ingot_ref_load_index(batch->context, batch->ids_dtype,
                                               b * batch->context_stride + w + src)
                        : ingot_ref_load_index(batch->ids, batch->ids_dtype, begin + src);
  }
  for (int i = 0; i < w; i++)
    ingot_ref_store_index(batch->context, batch->ids_dtype, b * batch->context_stride + i,
                          window[i]);
}

INGOT_HD float ingot_ref_table_value(const ingot_ngram_table *table, int64_t row, int64_t d) {
  int64_t i = row * table->stride + d;
  if (table->dtype == INGOT_DTYPE_F8_E4M3)
    return ingot_e4m3_to_f32(((const uint8_t *)table->data)[i]);
  if (table->dtype == INGOT_DTYPE_BF16)
    return ingot_bf16_to_f32(((const uint16_t *)table->data)[i]);
  return ((const float *)table->data)[i];
}

/* dst[0..D-1] <- bf16(table[row] * scale), or zeros for a row outside the table. */
INGOT_HD void ingot_ref_gather_row(const ingot_ngram_table *table, int64_t row, uint16_t *dst) {
  int in_range = row >= 0 && row < table->num_rows;
  for (int64_t d = 0; d < table->dim; d++)
    dst[d] = in_range ? ingot_f32_to_bf16(ingot_ref_table_value(table, row, d) * table->scale)
                      : (uint16_t)0;
}

#endif /* INGOT_COMMON_NGRAM_REF_H */
