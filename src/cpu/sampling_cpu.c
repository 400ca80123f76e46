/*
 * Sampling, CPU reference backend: the rules of the Sampling section of
 * include/ingot/ingot.h written out plainly, one row after another, over
 * common/sampling_ref.h (the generator and the portable exp / log the CUDA
 * kernels use too). This is the test oracle; keep it plain.
 *
 * Workspace (reused by every row): vals [V] f32, the row's current values
 * (l_i, then s_i; -Inf for a token outside the current set), order [V]
 * (value, id) pairs for the rank-order sort, top [num_top] pairs for the
 * top-n outputs. Sums of probabilities are accumulated in double.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sampling_ref.h"
#include "cpu/cpu.h"

typedef struct ranked {
  float value;
  int32_t id;
} ranked;

/* Rank order: value descending, then id ascending. 1 if x comes before y. */
static int rank_before(const ranked *x, const ranked *y) {
  if (x->value != y->value) return x->value > y->value;
  return x->id < y->id;
}

/* Sorts into rank order in place: heapsort, because an op must not allocate
 * and the C library's qsort may (glibc sorts through a malloc'd buffer). */
static void sort_ranked(ranked *a, int64_t n) {
  /* a max-heap under "comes after", so the root is the last in rank order */
  for (int64_t start = n / 2 - 1, end = n;; ) {
    int64_t root;
    if (start >= 0) {
      root = start--;
    } else {
      if (--end <= 0) return;
      ranked t = a[0];
      a[0] = a[end];
      a[end] = t;
      root = 0;
    }
    for (int64_t child; (child = 2 * root + 1) < end; root = child) {
      if (child + 1 < end && rank_before(&a[child], &a[child + 1])) child++;
      if (!rank_before(&a[root], &a[child])) break;
      ranked t = a[root];
      a[root] = a[child];
      a[child] = t;
    }
  }
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- workspace ------------------------------------------------------------------ */

typedef struct scratch {
  float *vals;   /* [V] */
  ranked *order; /* [V] */
  ranked *top;   /* [num_top] */
} scratch;

static scratch carve(void *workspace, int64_t vocab) {
  scratch s;
  s.vals = (float *)workspace;
  s.order = (ranked *)(void *)(s.vals + vocab);
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

typedef struct row_params {
  float temperature;
  int32_t top_k;
  float top_p, min_p;
  uint64_t seed, position;
} row_params;

static row_params params_of(const ingot_sampling_input *in, int64_t r) {
  row_params p;
  p.temperature = in->temperature ? in->temperature[r] : 1.0f;
  p.top_k = in->top_k ? in->top_k[r] : 0;
  p.top_p = in->top_p ? in->top_p[r] : 1.0f;
  p.min_p = in->min_p ? in->min_p[r] : 0.0f;
  p.seed = in->seed ? in->seed[r] : 0;
  p.position = in->position ? in->position[r] : 0;
  return p;
}

static const void *logits_row(const ingot_sampling_input *in, int64_t r) {
  return (const char *)in->logits + (size_t)(r * in->logits_stride) * ingot_dtype_size(in->dtype);
}

/* Steps 1-2: vals[i] = l_i for the allowed tokens, -Inf for the others.
 * Returns the number of allowed tokens and their maximum in *max. */
static int64_t allowed_values(const ingot_sampling_input *in, int64_t r, float *vals,
                              uint32_t *flags, float *max) {
  const int64_t V = in->vocab;
  const void *row = logits_row(in, r);
  for (int64_t i = 0; i < V; i++) vals[i] = ingot_sampling_load(row, in->dtype, i);
  /* logit bias, in list order */
  for (int64_t j = 0; j < in->num_bias; j++) {
    const int32_t *e = in->bias_ids + j * in->bias_ids_stride;
    if (e[0] != r) continue;
    if (e[1] < 0 || e[1] >= V) {
      *flags |= INGOT_SAMPLING_ROW_BAD_ENTRY;
      continue;
    }
    vals[e[1]] = ingot_fadd_rn(vals[e[1]], in->bias_values[j]);
  }
  /* banned tokens (a NaN / +Inf there still counts) */
  for (int64_t j = 0; j < in->num_banned; j++) {
    const int32_t *e = in->banned + j * in->banned_stride;
    if (e[0] != r) continue;
    if (e[1] < 0 || e[1] >= V) {
      *flags |= INGOT_SAMPLING_ROW_BAD_ENTRY;
      continue;
    }
    if (!ingot_f32_finite(vals[e[1]]) && vals[e[1]] != -INFINITY)
      *flags |= INGOT_SAMPLING_ROW_NAN;
    vals[e[1]] = -INFINITY;
  }
  /* NaN / +Inf (in x or after the bias): flagged, masked; then the bitmask */
  const uint32_t *words = in->allowed ? in->allowed + r * in->allowed_stride : NULL;
  int64_t count = 0;
  float m = -INFINITY;
  for (int64_t i = 0; i < V; i++) {
    float v = vals[i];
    if (!ingot_f32_finite(v)) {
      if (v != -INFINITY) *flags |= INGOT_SAMPLING_ROW_NAN;
      vals[i] = -INFINITY;
      continue;
    }
    if (words && !((words[i >> 5] >> (i & 31)) & 1u)) {
      vals[i] = -INFINITY;
      continue;
    }
    count++;
    if (v > m) m = v;
  }
  *max = m;
  return count;
}

/* Steps 4: top-k, top-p, min-p on vals = s (in place: dropped tokens -Inf). */
static void apply_filters(float *vals, int64_t V, int64_t count, const row_params *p,
                          ranked *order) {
  int topk_on = p->top_k > 0 && p->top_k < count;
  int topp_on = p->top_p < 1.0f;
  if (topk_on || topp_on) {
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
      if (vals[i] != -INFINITY) order[n++] = (ranked){vals[i], (int32_t)i};
    sort_ranked(order, n);
    int64_t keep = n;
    if (topk_on && p->top_k < keep) keep = p->top_k;
    if (topp_on) {
      double total = 0.0;
      for (int64_t j = 0; j < keep; j++) total += (double)ingot_sampling_ref_exp(order[j].value);
      double target = (double)p->top_p * total, cum = 0.0;
      for (int64_t j = 0; j < keep; j++) {
        cum += (double)ingot_sampling_ref_exp(order[j].value);
        if (cum >= target) {
          keep = j + 1;
          break;
        }
      }
    }
    for (int64_t j = keep; j < n; j++) vals[order[j].id] = -INFINITY;
  }
  if (p->min_p > 0.0f) {
    float threshold = ingot_sampling_ref_log(p->min_p);
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
  int64_t count = allowed_values(in, r, s->vals, flags, &m);
  if (count == 0) {
    *flags |= INGOT_SAMPLING_ROW_EMPTY;
    return -1;
  }
  if (p->temperature == 0.0f) {
    int32_t token = -1;
    for (int64_t i = 0; i < V; i++) {
      if (token < 0 && s->vals[i] == m) token = (int32_t)i;
      s->vals[i] = -INFINITY;
    }
    s->vals[token] = 0.0f;
    return token;
  }
  for (int64_t i = 0; i < V; i++)
    if (s->vals[i] != -INFINITY)
      s->vals[i] = ingot_fdiv_rn(ingot_fsub_rn(s->vals[i], m), p->temperature);
  apply_filters(s->vals, V, count, p, s->order);
  if (!draw) return -1;
  int32_t best = -1;
  float best_key = -INFINITY;
  for (int64_t i = 0; i < V; i++) {
    if (s->vals[i] == -INFINITY) continue;
    float key = ingot_fadd_rn(
        s->vals[i], ingot_sampling_ref_gumbel(p->seed, p->position, (uint32_t)i));
    if (best < 0 || key > best_key) {
      best = (int32_t)i;
      best_key = key;
    }
  }
  return best;
}

/* log sum_F w over vals (-Inf for an empty set). */
static double log_mass(const float *vals, int64_t V) {
  double z = 0.0;
  for (int64_t i = 0; i < V; i++)
    if (vals[i] != -INFINITY) z += (double)ingot_sampling_ref_exp(vals[i]);
  return z > 0.0 ? log(z) : -(double)INFINITY;
}

/* Inserts (value, id) into the n best so far (rank order); ids arrive in
 * ascending order, so an equal value never displaces an earlier id. */
static void top_insert(ranked *top, int64_t n, int64_t *filled, float value, int32_t id) {
  int64_t pos;
  if (*filled == n) {
    if (!(value > top[n - 1].value)) return;
    pos = n - 1;
  } else {
    pos = (*filled)++;
  }
  while (pos > 0 && value > top[pos - 1].value) {
    top[pos] = top[pos - 1];
    pos--;
  }
  top[pos] = (ranked){value, id};
}

static void write_top(const ingot_sampling_output *out, int64_t r, const ranked *top,
                      int64_t filled, double log_z) {
  for (int64_t j = 0; j < out->num_top; j++) {
    int found = j < filled;
    if (out->top_ids) out->top_ids[r * out->top_ids_stride + j] = found ? top[j].id : -1;
    if (out->top_logprobs)
      out->top_logprobs[r * out->top_logprobs_stride + j] =
          found ? (float)((double)top[j].value - log_z) : -INFINITY;
  }
}

/* The raw distribution softmax(x / T') of row r: the token's logprob and
 * the top-n outputs (when asked). */
static void raw_outputs(const ingot_sampling_input *in, int64_t r, const row_params *p,
                        int32_t token, const ingot_sampling_output *out, const scratch *s) {
  const int64_t V = in->vocab;
  const void *row = logits_row(in, r);
  const float t = p->temperature > 0.0f ? p->temperature : 1.0f;
  float m = -INFINITY;
  for (int64_t i = 0; i < V; i++) {
    float x = ingot_sampling_load(row, in->dtype, i);
    if (ingot_f32_finite(x) && x > m) m = x;
  }
  int want_top = out->num_top > 0 && !(out->flags & INGOT_SAMPLING_TOP_FINAL);
  int64_t filled = 0;
  double z = 0.0;
  float token_value = -INFINITY;
  if (m != -INFINITY) {
    for (int64_t i = 0; i < V; i++) {
      float x = ingot_sampling_load(row, in->dtype, i);
      if (!ingot_f32_finite(x)) continue;
      float v = ingot_fdiv_rn(ingot_fsub_rn(x, m), t);
      z += (double)ingot_sampling_ref_exp(v);
      if (i == token) token_value = v;
      if (want_top && v != -INFINITY) top_insert(s->top, out->num_top, &filled, v, (int32_t)i);
    }
  }
  double log_z = z > 0.0 ? log(z) : -(double)INFINITY;
  if (out->token_raw_logprob)
    out->token_raw_logprob[r] =
        token >= 0 && token_value != -INFINITY ? (float)((double)token_value - log_z) : -INFINITY;
  if (want_top) write_top(out, r, s->top, filled, log_z);
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
    row_params p = params_of(in, r);
    uint32_t flags = 0;
    int32_t token = final_distribution(in, r, &p, &s, &flags, 1);
    out->tokens[r] = token;
    if (out->row_status) out->row_status[r] = flags;
    if (out->token_logprob || want_final_top) {
      double log_z = log_mass(s.vals, V);
      if (out->token_logprob)
        out->token_logprob[r] =
            token >= 0 ? (float)((double)s.vals[token] - log_z) : -INFINITY;
      if (want_final_top) {
        int64_t filled = 0;
        if (token >= 0)
          for (int64_t i = 0; i < V; i++)
            if (s.vals[i] != -INFINITY) top_insert(s.top, out->num_top, &filled, s.vals[i], (int32_t)i);
        write_top(out, r, s.top, filled, log_z);
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
    row_params p = params_of(in, r);
    uint32_t flags = 0;
    float *prow = probs + r * probs_stride;
    final_distribution(in, r, &p, &s, &flags, 0);
    if (row_status) row_status[r] = flags;
    /* vals <- w_i (0 outside F), then p_i = w_i / sum w */
    double z = 0.0;
    for (int64_t i = 0; i < V; i++) {
      float w = s.vals[i] != -INFINITY ? ingot_sampling_ref_exp(s.vals[i]) : 0.0f;
      s.vals[i] = w;
      z += (double)w;
    }
    for (int64_t i = 0; i < V; i++) prow[i] = z > 0.0 ? (float)((double)s.vals[i] / z) : 0.0f;
  }
  return INGOT_STATUS_SUCCESS;
}
