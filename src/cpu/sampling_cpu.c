/*
 * Sampling, CPU reference backend: the rules of the Sampling section of
 * include/ingot/ingot.h written out plainly, one row after another, over
 * common/sampling_ref.h (the generator and the portable exp / log the CUDA
 * kernels use too) and cpu/sampling_cpu_row.h (the per-token rules, shared
 * with the sharded steps of sampling_shard_cpu.c). This is the test oracle;
 * keep it plain.
 *
 * Workspace (reused by every row): vals [V] f32, the row's current values
 * (l_i, then s_i; -Inf for a token outside the current set), order [V]
 * (value, id) pairs for the rank-order sort, top [num_top] pairs for the
 * top-n outputs. Sums of weights are exact (common/sampling_exact_sum.h),
 * so they do not depend on the order of their terms: the sharded steps,
 * which add per-shard sums, get the same bits.
 */
#include <math.h>

#include "cpu/cpu.h"
#include "cpu/sampling_cpu_row.h"

typedef ingot_cpu_ranked ranked;
typedef ingot_cpu_row_params row_params;

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- workspace ------------------------------------------------------------------ */

typedef struct scratch {
  float *vals;    /* [V] */
  ranked *order;  /* [V], for the filters */
  float *weights; /* [V], the weights of a sum: order's memory, free by then */
  ranked *top;    /* [num_top] */
} scratch;

static scratch carve(void *workspace, int64_t vocab) {
  scratch s;
  s.vals = (float *)workspace;
  s.order = (ranked *)(void *)(s.vals + vocab);
  s.weights = (float *)(void *)s.order;
  s.top = s.order + vocab;
  return s;
}

ingot_status ingot_cpu_sample_workspace_size(struct ingot_context *ctx, int64_t batch,
                                             int64_t vocab, ingot_dtype dtype, int64_t num_top,
                                             size_t *bytes) {
  (void)ctx, (void)dtype;
  *bytes = batch == 0 ? 0
                      : round16((sizeof(float) + sizeof(ranked)) * (size_t)vocab +
                                sizeof(ranked) * (size_t)num_top);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_sampling_softmax_workspace_size(struct ingot_context *ctx, int64_t batch,
                                                       int64_t vocab, ingot_dtype dtype,
                                                       size_t *bytes) {
  return ingot_cpu_sample_workspace_size(ctx, batch, vocab, dtype, 0, bytes);
}

/* ---- one row ------------------------------------------------------------------------ */

/* Steps 4: top-k, top-p, min-p on vals = s (in place: dropped tokens -Inf). */
static void apply_filters(float *vals, int64_t V, int64_t count, const row_params *p,
                          ranked *order) {
  int topk_on = p->top_k > 0 && p->top_k < count;
  int topp_on = p->top_p < 1.0f;
  if (topk_on || topp_on) {
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
      if (vals[i] != -INFINITY) order[n++] = (ranked){vals[i], (int32_t)i};
    ingot_cpu_sort_ranked(order, n);
    int64_t keep = n;
    if (topk_on && p->top_k < keep) keep = p->top_k;
    if (topp_on) keep = ingot_cpu_top_p_keep(order, keep, p->top_p);
    for (int64_t j = keep; j < n; j++) vals[order[j].id] = -INFINITY;
  }
  if (p->min_p > 0.0f) {
    float threshold = ingot_cpu_min_p_threshold(p->min_p);
    for (int64_t i = 0; i < V; i++)
      if (vals[i] < threshold) vals[i] = -INFINITY;
  }
}

/* Steps 1-5 for row r: vals = s_i on the final set F, -Inf elsewhere (a
 * greedy row: 0 at its token). Returns the drawn token (-1: empty). */
static int32_t final_distribution(const ingot_sampling_input *in, int64_t r,
                                  const row_params *p, const scratch *s, uint32_t *flags,
                                  int draw) {
  const int64_t V = in->vocab;
  float m;
  int32_t max_id;
  int64_t count = ingot_cpu_row_allowed(in, r, 0, V, s->vals, flags, &m, &max_id);
  if (count == 0) {
    *flags |= INGOT_SAMPLING_ROW_EMPTY;
    return -1;
  }
  if (p->temperature == 0.0f) { /* greedy: the lowest id holding the maximum */
    for (int64_t i = 0; i < V; i++) s->vals[i] = -INFINITY;
    s->vals[max_id] = 0.0f;
    return max_id;
  }
  ingot_cpu_row_scale(s->vals, V, m, p->temperature);
  apply_filters(s->vals, V, count, p, s->order);
  if (!draw) return -1;
  int32_t best = -1;
  float best_key = -INFINITY;
  for (int64_t i = 0; i < V; i++) {
    if (s->vals[i] == -INFINITY) continue;
    float key = ingot_cpu_draw_key(p, s->vals[i], (int32_t)i);
    if (best < 0 || key > best_key) {
      best = (int32_t)i;
      best_key = key;
    }
  }
  return best;
}

/* log sum_F w over vals (-Inf for an empty set); weights [V] gets the w. */
static double log_mass(const float *vals, int64_t V, float *weights) {
  for (int64_t i = 0; i < V; i++)
    weights[i] = vals[i] != -INFINITY ? ingot_sampling_ref_exp(vals[i]) : 0.0f;
  ingot_exact_sum z;
  ingot_cpu_exact_sum_of(weights, V, &z);
  return ingot_cpu_log_mass(&z);
}

/* The raw distribution softmax(x / T') of row r: the token's logprob and
 * the top-n outputs (when asked). */
static void raw_outputs(const ingot_sampling_input *in, int64_t r, const row_params *p,
                        int32_t token, const ingot_sampling_output *out, const scratch *s) {
  const int64_t V = in->vocab;
  const void *row = ingot_cpu_logits_row(in, r);
  const float t = ingot_cpu_raw_temperature(p->temperature);
  int32_t at;
  float m = ingot_cpu_raw_max(row, in->dtype, V, &at);
  int want_top = out->num_top > 0 && !(out->flags & INGOT_SAMPLING_TOP_FINAL);
  int64_t filled = 0;
  float *w = s->weights;
  float token_value = -INFINITY;
  for (int64_t i = 0; i < V; i++) {
    float x = ingot_sampling_load(row, in->dtype, i);
    w[i] = 0.0f;
    if (m == -INFINITY || !ingot_f32_finite(x)) continue;
    float v = ingot_cpu_raw_value(x, m, t);
    w[i] = ingot_sampling_ref_exp(v);
    if (i == token) token_value = v;
    if (want_top && v != -INFINITY)
      ingot_cpu_top_insert(s->top, out->num_top, &filled, v, (int32_t)i);
  }
  ingot_exact_sum z;
  ingot_cpu_exact_sum_of(w, V, &z);
  double log_z = ingot_cpu_log_mass(&z);
  if (out->token_raw_logprob)
    out->token_raw_logprob[r] =
        token >= 0 && token_value != -INFINITY ? (float)((double)token_value - log_z) : -INFINITY;
  if (want_top) ingot_cpu_write_top(out, r, s->top, filled, log_z);
}

/* ---- ops -------------------------------------------------------------------------------- */

ingot_status ingot_cpu_sample(struct ingot_context *ctx, const ingot_sampling_input *in,
                              const ingot_sampling_output *out, void *workspace,
                              size_t workspace_bytes, struct CUstream_st *stream) {
  (void)ctx, (void)workspace_bytes, (void)stream;
  const int64_t V = in->vocab;
  scratch s = carve(workspace, V);
  int want_final_top = out->num_top > 0 && (out->flags & INGOT_SAMPLING_TOP_FINAL);
  for (int64_t r = 0; r < in->batch; r++) {
    row_params p = ingot_cpu_row_params_of(in, r);
    uint32_t flags = 0;
    int32_t token = final_distribution(in, r, &p, &s, &flags, 1);
    out->tokens[r] = token;
    if (out->row_status) out->row_status[r] = flags;
    if (out->token_logprob || want_final_top) {
      double log_z = log_mass(s.vals, V, s.weights);
      if (out->token_logprob)
        out->token_logprob[r] =
            token >= 0 ? (float)((double)s.vals[token] - log_z) : -INFINITY;
      if (want_final_top) {
        int64_t filled = 0;
        if (token >= 0)
          for (int64_t i = 0; i < V; i++)
            if (s.vals[i] != -INFINITY)
              ingot_cpu_top_insert(s.top, out->num_top, &filled, s.vals[i], (int32_t)i);
        ingot_cpu_write_top(out, r, s.top, filled, log_z);
      }
    }
    if (out->token_raw_logprob || (out->num_top > 0 && !want_final_top))
      raw_outputs(in, r, &p, token, out, &s);
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_sampling_softmax(struct ingot_context *ctx, const ingot_sampling_input *in,
                                        float *probs, int64_t probs_stride, uint32_t *row_status,
                                        void *workspace, size_t workspace_bytes,
                                        struct CUstream_st *stream) {
  (void)ctx, (void)workspace_bytes, (void)stream;
  const int64_t V = in->vocab;
  scratch s = carve(workspace, V);
  for (int64_t r = 0; r < in->batch; r++) {
    row_params p = ingot_cpu_row_params_of(in, r);
    uint32_t flags = 0;
    float *prow = probs + r * probs_stride;
    final_distribution(in, r, &p, &s, &flags, 0);
    if (row_status) row_status[r] = flags;
    /* vals <- w_i (0 outside F), then p_i = w_i / sum w */
    for (int64_t i = 0; i < V; i++)
      s.vals[i] = s.vals[i] != -INFINITY ? ingot_sampling_ref_exp(s.vals[i]) : 0.0f;
    ingot_exact_sum mass;
    ingot_cpu_exact_sum_of(s.vals, V, &mass);
    double z = ingot_exact_sum_value(&mass);
    for (int64_t i = 0; i < V; i++) prow[i] = z > 0.0 ? (float)((double)s.vals[i] / z) : 0.0f;
  }
  return INGOT_STATUS_SUCCESS;
}
