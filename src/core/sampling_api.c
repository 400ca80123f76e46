/*
 * Sampling: argument validation and dispatch (every backend), and the host
 * entry points of the generator. The rules are stated in the Sampling
 * section of include/ingot/ingot.h.
 */
#include <inttypes.h>
#include <math.h>

#include "common/sampling_ref.h"
#include "core/sampling_check.h"

#define LOGIT_DTYPES                                                     \
  (INGOT_DTYPE_BIT(INGOT_DTYPE_F32) | INGOT_DTYPE_BIT(INGOT_DTYPE_BF16) | \
   INGOT_DTYPE_BIT(INGOT_DTYPE_F16))
#define WORD32_DTYPES (INGOT_DTYPE_BIT(INGOT_DTYPE_I32) | INGOT_DTYPE_BIT(INGOT_DTYPE_U32))
#define WORD64_DTYPES (INGOT_DTYPE_BIT(INGOT_DTYPE_U64) | INGOT_DTYPE_BIT(INGOT_DTYPE_I64))
#define F32_ONLY INGOT_DTYPE_BIT(INGOT_DTYPE_F32)
#define I32_ONLY INGOT_DTYPE_BIT(INGOT_DTYPE_I32)

/* ---- the generator on the host -------------------------------------------- */

float ingot_sampling_uniform(uint64_t seed, uint64_t position, int32_t token) {
  return ingot_sampling_ref_uniform(seed, position, (uint32_t)token);
}

float ingot_sampling_gumbel(uint64_t seed, uint64_t position, int32_t token) {
  return ingot_sampling_ref_gumbel(seed, position, (uint32_t)token);
}

float ingot_sampling_exp(float x) { return ingot_sampling_ref_exp(x); }

float ingot_sampling_log(float x) {
  if (x != x || x < 0.0f) return NAN;
  if (x == 0.0f) return -INFINITY;
  if (x == INFINITY) return INFINITY;
  return ingot_sampling_ref_log(x);
}

/* ---- named spans, for the overlap checks ------------------------------------ */

typedef ingot_sampling_spans span_list; /* core/sampling_check.h */
#define span_add ingot_sampling_span_add

/* Every output against every input and every earlier output. */
static ingot_status check_overlaps(struct ingot_context *ctx, const char *op,
                                   const span_list *outs, const span_list *ins) {
  return ingot_core_check_all_disjoint(ctx, op, outs->count, (const char *const *)outs->names,
                                       outs->spans, ins->count,
                                       (const char *const *)ins->names, ins->spans);
}

/* ---- shapes ------------------------------------------------------------------ */

/* batch in [0, 2^31), vocab in [1, 2^31), named as the caller's arguments. */
static ingot_status check_extent(struct ingot_context *ctx, const char *op, const char *b_name,
                                 int64_t batch, const char *v_name, int64_t vocab) {
  if (batch < 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "%s = %" PRId64 " < 0", b_name,
                           batch);
  if (batch > INT32_MAX)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s = %" PRId64 ", expected B <= 2^31 - 1 (rows of the sparse lists "
                           "are int32)",
                           b_name, batch);
  if (vocab < 1)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s = %" PRId64 ", expected V >= 1", v_name, vocab);
  if (vocab > INT32_MAX)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s = %" PRId64 ", expected V <= 2^31 - 1 (token ids are int32)",
                           v_name, vocab);
  return INGOT_STATUS_SUCCESS;
}

static ingot_status check_logits_dtype(struct ingot_context *ctx, const char *op,
                                       ingot_dtype dtype) {
  if ((int)dtype <= 0 || dtype >= INGOT_DTYPE_COUNT || !(LOGIT_DTYPES & INGOT_DTYPE_BIT(dtype)))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "logits_dtype: %s (%d), expected one of: f32, f16, bf16",
                           ingot_dtype_name(dtype), (int)dtype);
  return INGOT_STATUS_SUCCESS;
}

static ingot_status check_logits(struct ingot_context *ctx, const char *op,
                                 const ingot_tensor *logits, span_list *ins) {
  static const ingot_tensor_rule rule = {"logits", 2, LOGIT_DTYPES, 0};
  ingot_span span;
  ingot_status st = ingot_core_check_tensor(ctx, op, logits, &rule, &span);
  if (st) return st;
  if ((st = check_extent(ctx, op, "logits: shape[0]", logits->shape[0], "logits: shape[1]",
                         logits->shape[1])))
    return st;
  span_add(ins, "logits", span);
  return INGOT_STATUS_SUCCESS;
}

/* NULL, or a contiguous [B] vector of one of `dtypes`; returns its data. */
static ingot_status check_row_vector(struct ingot_context *ctx, const char *op, const char *name,
                                     const ingot_tensor *t, uint32_t dtypes, int64_t batch,
                                     int writable, const void **data, span_list *list) {
  *data = NULL;
  if (t == NULL) return INGOT_STATUS_SUCCESS;
  const ingot_tensor_rule rule = {name, 1, dtypes, writable};
  ingot_span span;
  ingot_status st = ingot_core_check_tensor(ctx, op, t, &rule, &span);
  if (st) return st;
  if ((st = ingot_core_check_dim(ctx, op, name, t, 0, batch, "B (logits rows)"))) return st;
  *data = t->data;
  span_add(list, name, span);
  return INGOT_STATUS_SUCCESS;
}

/* NULL, or an I32 [N, 2] list of (row, token) pairs. */
static ingot_status check_pairs(struct ingot_context *ctx, const char *op, const char *name,
                                const ingot_tensor *t, const int32_t **data, int64_t *stride,
                                int64_t *count, span_list *ins) {
  *data = NULL;
  *stride = 2;
  *count = 0;
  if (t == NULL) return INGOT_STATUS_SUCCESS;
  const ingot_tensor_rule rule = {name, 2, I32_ONLY, 0};
  ingot_span span;
  ingot_status st = ingot_core_check_tensor(ctx, op, t, &rule, &span);
  if (st) return st;
  if ((st = ingot_core_check_dim(ctx, op, name, t, 1, 2, "2 (row, token)"))) return st;
  if (t->shape[0] > 0) {
    *data = (const int32_t *)t->data;
    *stride = t->stride[0];
    *count = t->shape[0];
  }
  span_add(ins, name, span);
  return INGOT_STATUS_SUCCESS;
}

/* The per-row values (CPU only: host memory core may read). */
static ingot_status check_param_values(struct ingot_context *ctx, const char *op,
                                       const ingot_sampling_input *in) {
  for (int64_t r = 0; r < in->batch; r++) {
    float t = in->temperature ? in->temperature[r] : 1.0f;
    int32_t k = in->top_k ? in->top_k[r] : 0;
    float p = in->top_p ? in->top_p[r] : 1.0f;
    float q = in->min_p ? in->min_p[r] : 0.0f;
    switch (ingot_sampling_params_check(t, k, p, q)) {
      case 0: break;
      case 1:
        return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "temperature: temperature[%" PRId64
                               "] = %g, expected a finite value >= 0 (0: greedy)",
                               r, (double)t);
      case 2:
        return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "top_k: top_k[%" PRId64 "] = %d < 0 (0: off)", r, (int)k);
      case 3:
        return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "top_p: top_p[%" PRId64 "] = %g, expected a value in (0, 1]", r,
                               (double)p);
      default:
        return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "min_p: min_p[%" PRId64 "] = %g, expected a value in [0, 1]", r,
                               (double)q);
    }
  }
  return INGOT_STATUS_SUCCESS;
}

/* params (may be NULL) -> the parameter and mask fields of `in`. */
static ingot_status check_params(struct ingot_context *ctx, const char *op,
                                 const ingot_sampling_params *params, ingot_sampling_input *in,
                                 span_list *ins) {
  int64_t B = in->batch, V = in->vocab;
  if (params == NULL) return INGOT_STATUS_SUCCESS;
  if (params->struct_size != sizeof(ingot_sampling_params))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "params: struct_size = %u, expected sizeof(ingot_sampling_params) = "
                           "%u (start from INGOT_SAMPLING_PARAMS_INITIALIZER)",
                           (unsigned)params->struct_size, (unsigned)sizeof(ingot_sampling_params));
  if (params->struct_version != INGOT_SAMPLING_STRUCT_VERSION)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "params: struct_version = %u, expected %d", (unsigned)params->struct_version,
                           INGOT_SAMPLING_STRUCT_VERSION);
  const void *p;
  ingot_status st;
  if ((st = check_row_vector(ctx, op, "temperature", params->temperature, F32_ONLY, B, 0, &p, ins)))
    return st;
  in->temperature = (const float *)p;
  if ((st = check_row_vector(ctx, op, "top_k", params->top_k, I32_ONLY, B, 0, &p, ins))) return st;
  in->top_k = (const int32_t *)p;
  if ((st = check_row_vector(ctx, op, "top_p", params->top_p, F32_ONLY, B, 0, &p, ins))) return st;
  in->top_p = (const float *)p;
  if ((st = check_row_vector(ctx, op, "min_p", params->min_p, F32_ONLY, B, 0, &p, ins))) return st;
  in->min_p = (const float *)p;
  if ((st = check_row_vector(ctx, op, "seed", params->seed, WORD64_DTYPES, B, 0, &p, ins)))
    return st;
  in->seed = (const uint64_t *)p;
  if ((st = check_row_vector(ctx, op, "position", params->position, WORD64_DTYPES, B, 0, &p, ins)))
    return st;
  in->position = (const uint64_t *)p;

  if (params->allowed != NULL) {
    static const ingot_tensor_rule rule = {"allowed", 2, WORD32_DTYPES, 0};
    ingot_span span;
    const ingot_tensor *t = params->allowed;
    if ((st = ingot_core_check_tensor(ctx, op, t, &rule, &span))) return st;
    if ((st = ingot_core_check_dim(ctx, op, "allowed", t, 0, B, "B (logits rows)"))) return st;
    if ((st = ingot_core_check_dim(ctx, op, "allowed", t, 1, (V + 31) / 32,
                                   "ceil(V / 32) (32 tokens per word)")))
      return st;
    in->allowed = (const uint32_t *)t->data;
    in->allowed_stride = t->stride[0];
    span_add(ins, "allowed", span);
  }
  if ((st = check_pairs(ctx, op, "banned", params->banned, &in->banned, &in->banned_stride,
                        &in->num_banned, ins)))
    return st;
  if ((params->bias_ids == NULL) != (params->bias_values == NULL))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: NULL while %s is given (pass both or neither)",
                           params->bias_ids ? "bias_values" : "bias_ids",
                           params->bias_ids ? "bias_ids" : "bias_values");
  if ((st = check_pairs(ctx, op, "bias_ids", params->bias_ids, &in->bias_ids,
                        &in->bias_ids_stride, &in->num_bias, ins)))
    return st;
  if (params->bias_values != NULL) {
    static const ingot_tensor_rule rule = {"bias_values", 1, F32_ONLY, 0};
    ingot_span span;
    if ((st = ingot_core_check_tensor(ctx, op, params->bias_values, &rule, &span))) return st;
    if ((st = ingot_core_check_dim(ctx, op, "bias_values", params->bias_values, 0,
                                   params->bias_ids->shape[0], "bias_ids.shape[0] = M")))
      return st;
    in->bias_values = (const float *)params->bias_values->data;
    span_add(ins, "bias_values", span);
    if (in->num_bias == 0) in->bias_ids = NULL, in->bias_values = NULL;
  }
  if (ctx->backend == INGOT_BACKEND_CPU) return check_param_values(ctx, op, in);
  return INGOT_STATUS_SUCCESS;
}

static void fill_logits(ingot_sampling_input *in, const ingot_tensor *logits) {
  in->logits = logits->data;
  in->dtype = logits->dtype;
  in->logits_stride = logits->stride[0];
  in->batch = logits->shape[0];
  in->vocab = logits->shape[1];
}

/* ---- workspace ---------------------------------------------------------------- */

static ingot_status check_workspace(struct ingot_context *ctx, const char *op, size_t need,
                                    void *workspace, size_t bytes, const char *query,
                                    span_list *outs) {
  ingot_span span;
  ingot_status st = ingot_core_check_workspace(ctx, op, need, workspace, bytes, query, &span);
  if (st == INGOT_STATUS_SUCCESS) span_add(outs, "workspace", span);
  return st;
}

/* ---- workspace size queries ----------------------------------------------------- */

/* The arguments both size queries take: the context, bytes, the shape and the dtype. */
static ingot_status check_query(struct ingot_context *ctx, const char *op, int64_t batch,
                                int64_t vocab_size, ingot_dtype logits_dtype,
                                const size_t *bytes) {
  ingot_status st = ingot_core_begin(ctx, op, NULL);
  if (st) return st;
  if (bytes == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "bytes: NULL");
  if ((st = check_extent(ctx, op, "batch", batch, "vocab_size", vocab_size))) return st;
  return check_logits_dtype(ctx, op, logits_dtype);
}

/* The byte counts of a call of this shape fit int64 and size_t (batch and
 * vocab in range, dtype valid): logits [B, V] of `dtype` and, for the
 * softmax, probs [B, V] F32. So the backends' queries compute with sizes that
 * fit (core/ops.h); an op whose tensors passed their checks always passes. */
static ingot_status check_sizes(struct ingot_context *ctx, const char *op, int64_t batch,
                                int64_t vocab, ingot_dtype dtype, int softmax) {
  int64_t elements, bytes;
  size_t size = ingot_dtype_size(dtype);
  if (ingot_core_size_mul(batch, vocab, &elements) ||
      ingot_core_size_mul(elements, (int64_t)size, &bytes))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "batch = %" PRId64 ", vocab_size = %" PRId64
                           ": logits [batch, vocab_size] of %s (batch * vocab_size * %zu bytes) "
                           "overflow int64",
                           batch, vocab, ingot_dtype_name(dtype), size);
  if (softmax && ingot_core_size_mul(elements, (int64_t)sizeof(float), &bytes))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "batch = %" PRId64 ", vocab_size = %" PRId64
                           ": probs [batch, vocab_size] of f32 (batch * vocab_size * 4 bytes) "
                           "overflow int64",
                           batch, vocab);
  return INGOT_STATUS_SUCCESS;
}

/* The backends' sizes (shape checked); *bytes written only on success. */
static ingot_status sample_need(struct ingot_context *ctx, const char *op, int64_t batch,
                                int64_t vocab, ingot_dtype dtype, int64_t num_top,
                                size_t *bytes) {
  size_t need = 0;
  ingot_status st = check_sizes(ctx, op, batch, vocab, dtype, 0);
  if (st) return st;
  if ((st = ctx->ops->sample_workspace_size(ctx, batch, vocab, dtype, num_top, &need))) return st;
  *bytes = need;
  return INGOT_STATUS_SUCCESS;
}

static ingot_status softmax_need(struct ingot_context *ctx, const char *op, int64_t batch,
                                 int64_t vocab, ingot_dtype dtype, size_t *bytes) {
  size_t need = 0;
  ingot_status st = check_sizes(ctx, op, batch, vocab, dtype, 1);
  if (st) return st;
  if ((st = ctx->ops->sampling_softmax_workspace_size(ctx, batch, vocab, dtype, &need)))
    return st;
  *bytes = need;
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_sample_workspace_size(ingot_context_t ctx, int64_t batch, int64_t vocab_size,
                                         ingot_dtype logits_dtype, int64_t num_top,
                                         size_t *bytes) {
  static const char op[] = "ingot_sample_workspace_size";
  ingot_status st = check_query(ctx, op, batch, vocab_size, logits_dtype, bytes);
  if (st) return st;
  if (num_top < 0 || num_top > INGOT_SAMPLING_MAX_TOP)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "num_top = %" PRId64 ", expected 0 <= n <= INGOT_SAMPLING_MAX_TOP = %d",
                           num_top, INGOT_SAMPLING_MAX_TOP);
  return sample_need(ctx, op, batch, vocab_size, logits_dtype, num_top, bytes);
}

ingot_status ingot_sampling_softmax_workspace_size(ingot_context_t ctx, int64_t batch,
                                                   int64_t vocab_size, ingot_dtype logits_dtype,
                                                   size_t *bytes) {
  static const char op[] = "ingot_sampling_softmax_workspace_size";
  ingot_status st = check_query(ctx, op, batch, vocab_size, logits_dtype, bytes);
  if (st) return st;
  return softmax_need(ctx, op, batch, vocab_size, logits_dtype, bytes);
}

/* ---- ops --------------------------------------------------------------------------- */

/* logprobs (may be NULL) -> the optional fields of `out`. */
static ingot_status check_logprobs(struct ingot_context *ctx, const char *op,
                                   const ingot_sampling_logprobs *lp, int64_t B,
                                   ingot_sampling_output *out, span_list *outs) {
  if (lp == NULL) return INGOT_STATUS_SUCCESS;
  if (lp->struct_size != sizeof(ingot_sampling_logprobs))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "logprobs: struct_size = %u, expected sizeof(ingot_sampling_logprobs) "
                           "= %u (start from INGOT_SAMPLING_LOGPROBS_INITIALIZER)",
                           (unsigned)lp->struct_size, (unsigned)sizeof(ingot_sampling_logprobs));
  if (lp->struct_version != INGOT_SAMPLING_STRUCT_VERSION)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "logprobs: struct_version = %u, expected %d",
                           (unsigned)lp->struct_version, INGOT_SAMPLING_STRUCT_VERSION);
  if (lp->flags & ~(uint32_t)INGOT_SAMPLING_TOP_FINAL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "logprobs: flags = 0x%x has unknown bits 0x%x", (unsigned)lp->flags,
                           (unsigned)(lp->flags & ~(uint32_t)INGOT_SAMPLING_TOP_FINAL));
  if (lp->reserved != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "logprobs: reserved = %u, must be 0", (unsigned)lp->reserved);
  out->flags = lp->flags;
  const void *p;
  ingot_status st;
  if ((st = check_row_vector(ctx, op, "token_logprob", lp->token_logprob, F32_ONLY, B, 1, &p,
                             outs)))
    return st;
  out->token_logprob = (float *)p;
  if ((st = check_row_vector(ctx, op, "token_raw_logprob", lp->token_raw_logprob, F32_ONLY, B, 1,
                             &p, outs)))
    return st;
  out->token_raw_logprob = (float *)p;
  static const struct {
    const char *name;
    uint32_t dtypes;
  } top[2] = {{"top_ids", I32_ONLY}, {"top_logprobs", F32_ONLY}};
  const ingot_tensor *tt[2] = {lp->top_ids, lp->top_logprobs};
  int64_t n = -1;
  for (int j = 0; j < 2; j++) {
    const ingot_tensor *t = tt[j];
    if (t == NULL) continue;
    const ingot_tensor_rule rule = {top[j].name, 2, top[j].dtypes, 1};
    ingot_span span;
    if ((st = ingot_core_check_tensor(ctx, op, t, &rule, &span))) return st;
    if ((st = ingot_core_check_dim(ctx, op, top[j].name, t, 0, B, "B (logits rows)"))) return st;
    if (n >= 0) {
      if ((st = ingot_core_check_dim(ctx, op, top[j].name, t, 1, n, "top_ids.shape[1] = n")))
        return st;
    } else {
      n = t->shape[1];
      if (n > INGOT_SAMPLING_MAX_TOP)
        return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "%s: shape[1] = %" PRId64 " > INGOT_SAMPLING_MAX_TOP = %d",
                               top[j].name, n, INGOT_SAMPLING_MAX_TOP);
    }
    span_add(outs, top[j].name, span);
  }
  out->num_top = n > 0 ? n : 0;
  if (out->num_top > 0) {
    if (lp->top_ids) {
      out->top_ids = (int32_t *)lp->top_ids->data;
      out->top_ids_stride = lp->top_ids->stride[0];
    }
    if (lp->top_logprobs) {
      out->top_logprobs = (float *)lp->top_logprobs->data;
      out->top_logprobs_stride = lp->top_logprobs->stride[0];
    }
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_sample(ingot_context_t ctx, const ingot_tensor *logits,
                          const ingot_sampling_params *params, const ingot_tensor *tokens,
                          const ingot_tensor *row_status, const ingot_sampling_logprobs *logprobs,
                          void *workspace, size_t workspace_bytes, struct CUstream_st *stream) {
  static const char op[] = "ingot_sample";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  span_list ins = {{0}, {{0, 0}}, 0}, outs = {{0}, {{0, 0}}, 0};
  ingot_sampling_input in = {0};
  ingot_sampling_output out = {0};
  if ((st = check_logits(ctx, op, logits, &ins))) return st;
  fill_logits(&in, logits);
  if ((st = check_params(ctx, op, params, &in, &ins))) return st;
  const void *p;
  if (tokens == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "tokens: NULL descriptor");
  if ((st = check_row_vector(ctx, op, "tokens", tokens, I32_ONLY, in.batch, 1, &p, &outs)))
    return st;
  out.tokens = (int32_t *)p;
  if ((st = check_row_vector(ctx, op, "row_status", row_status, WORD32_DTYPES, in.batch, 1, &p,
                             &outs)))
    return st;
  out.row_status = (uint32_t *)p;
  if ((st = check_logprobs(ctx, op, logprobs, in.batch, &out, &outs))) return st;
  size_t need = 0;
  if ((st = sample_need(ctx, op, in.batch, in.vocab, in.dtype, out.num_top, &need))) return st;
  if ((st = check_workspace(ctx, op, need, workspace, workspace_bytes,
                            "ingot_sample_workspace_size", &outs)))
    return st;
  if ((st = check_overlaps(ctx, op, &outs, &ins))) return st;
  if (in.batch == 0) return INGOT_STATUS_SUCCESS;
  return ctx->ops->sample(ctx, &in, &out, workspace, workspace_bytes, stream);
}

ingot_status ingot_sampling_softmax(ingot_context_t ctx, const ingot_tensor *logits,
                                    const ingot_sampling_params *params, const ingot_tensor *probs,
                                    const ingot_tensor *row_status, void *workspace,
                                    size_t workspace_bytes, struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_softmax";
  static const ingot_tensor_rule probs_rule = {"probs", 2, F32_ONLY, 1};
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  span_list ins = {{0}, {{0, 0}}, 0}, outs = {{0}, {{0, 0}}, 0};
  ingot_sampling_input in = {0};
  if ((st = check_logits(ctx, op, logits, &ins))) return st;
  fill_logits(&in, logits);
  if ((st = check_params(ctx, op, params, &in, &ins))) return st;
  ingot_span span;
  if ((st = ingot_core_check_tensor(ctx, op, probs, &probs_rule, &span))) return st;
  if ((st = ingot_core_check_dim(ctx, op, "probs", probs, 0, in.batch, "B (logits rows)")))
    return st;
  if ((st = ingot_core_check_dim(ctx, op, "probs", probs, 1, in.vocab, "V (logits columns)")))
    return st;
  span_add(&outs, "probs", span);
  const void *p;
  if ((st = check_row_vector(ctx, op, "row_status", row_status, WORD32_DTYPES, in.batch, 1, &p,
                             &outs)))
    return st;
  size_t need = 0;
  if ((st = softmax_need(ctx, op, in.batch, in.vocab, in.dtype, &need))) return st;
  if ((st = check_workspace(ctx, op, need, workspace, workspace_bytes,
                            "ingot_sampling_softmax_workspace_size", &outs)))
    return st;
  if ((st = check_overlaps(ctx, op, &outs, &ins))) return st;
  if (in.batch == 0) return INGOT_STATUS_SUCCESS;
  return ctx->ops->sampling_softmax(ctx, &in, (float *)probs->data, probs->stride[0],
                                    (uint32_t *)p, workspace, workspace_bytes, stream);
}

/* ---- the checks the sharded ops share (core/sampling_check.h) ------------------------- */

ingot_status ingot_sampling_check_overlaps(struct ingot_context *ctx, const char *op,
                                           const span_list *outs, const span_list *ins) {
  return check_overlaps(ctx, op, outs, ins);
}

ingot_status ingot_sampling_check_extent(struct ingot_context *ctx, const char *op,
                                         const char *b_name, int64_t batch, const char *v_name,
                                         int64_t vocab) {
  return check_extent(ctx, op, b_name, batch, v_name, vocab);
}

ingot_status ingot_sampling_check_logits_dtype(struct ingot_context *ctx, const char *op,
                                               ingot_dtype dtype) {
  return check_logits_dtype(ctx, op, dtype);
}

ingot_status ingot_sampling_check_row_vector(struct ingot_context *ctx, const char *op,
                                             const char *name, const ingot_tensor *t,
                                             uint32_t dtypes, int64_t batch, int writable,
                                             const void **data, span_list *list) {
  return check_row_vector(ctx, op, name, t, dtypes, batch, writable, data, list);
}

ingot_status ingot_sampling_check_params(struct ingot_context *ctx, const char *op,
                                         const ingot_sampling_params *params,
                                         ingot_sampling_input *in, span_list *ins) {
  return check_params(ctx, op, params, in, ins);
}

ingot_status ingot_sampling_check_logprobs(struct ingot_context *ctx, const char *op,
                                           const ingot_sampling_logprobs *lp, int64_t batch,
                                           ingot_sampling_output *out, span_list *outs) {
  return check_logprobs(ctx, op, lp, batch, out, outs);
}
