/*
 * Argument checks of the sampling ops, shared by the whole-row ops
 * (sampling_api.c, which defines them) and the sharded ones
 * (sampling_shard_api.c). Core only.
 */
#ifndef INGOT_CORE_SAMPLING_CHECK_H
#define INGOT_CORE_SAMPLING_CHECK_H

#include "core/check.h"

/* Named spans of the inputs or outputs of one call, for the overlap checks. */
#define INGOT_SAMPLING_MAX_SPANS 16

typedef struct ingot_sampling_spans {
  const char *names[INGOT_SAMPLING_MAX_SPANS];
  ingot_span spans[INGOT_SAMPLING_MAX_SPANS];
  int count;
} ingot_sampling_spans;

static inline void ingot_sampling_span_add(ingot_sampling_spans *l, const char *name,
                                           ingot_span span) {
  if (span.begin == span.end || l->count == INGOT_SAMPLING_MAX_SPANS) return;
  l->names[l->count] = name;
  l->spans[l->count] = span;
  l->count++;
}

/* Every output against every input and every earlier output. */
ingot_status ingot_sampling_check_overlaps(struct ingot_context *ctx, const char *op,
                                           const ingot_sampling_spans *outs,
                                           const ingot_sampling_spans *ins);

/* batch in [0, 2^31), vocab in [1, 2^31), named as the caller's arguments. */
ingot_status ingot_sampling_check_extent(struct ingot_context *ctx, const char *op,
                                         const char *b_name, int64_t batch, const char *v_name,
                                         int64_t vocab);

/* F32, BF16 or F16. */
ingot_status ingot_sampling_check_logits_dtype(struct ingot_context *ctx, const char *op,
                                               ingot_dtype dtype);

/* NULL, or a contiguous [B] vector of one of `dtypes`; *data gets its data. */
ingot_status ingot_sampling_check_row_vector(struct ingot_context *ctx, const char *op,
                                             const char *name, const ingot_tensor *t,
                                             uint32_t dtypes, int64_t batch, int writable,
                                             const void **data, ingot_sampling_spans *list);

/* params (may be NULL) -> the parameter and mask fields of `in` (in->batch
 * and in->vocab set: V is the whole vocabulary); on the CPU also the
 * per-row values. */
ingot_status ingot_sampling_check_params(struct ingot_context *ctx, const char *op,
                                         const ingot_sampling_params *params,
                                         ingot_sampling_input *in, ingot_sampling_spans *ins);

/* logprobs (may be NULL) -> the optional fields of `out`. */
ingot_status ingot_sampling_check_logprobs(struct ingot_context *ctx, const char *op,
                                           const ingot_sampling_logprobs *lp, int64_t batch,
                                           ingot_sampling_output *out,
                                           ingot_sampling_spans *outs);

#endif /* INGOT_CORE_SAMPLING_CHECK_H */
