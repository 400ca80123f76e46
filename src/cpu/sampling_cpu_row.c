/*
 * The per-row, per-token sampling rules on the CPU, shared by the whole-row
 * ops and the sharded steps (sampling_cpu_row.h says why).
 */
#include "cpu/sampling_cpu_row.h"

#include <math.h>

ingot_cpu_row_params ingot_cpu_row_params_of(const ingot_sampling_input *in, int64_t r) {
  ingot_cpu_row_params p;
  p.temperature = in->temperature ? in->temperature[r] : 1.0f;
  p.top_k = in->top_k ? in->top_k[r] : 0;
  p.top_p = in->top_p ? in->top_p[r] : 1.0f;
  p.min_p = in->min_p ? in->min_p[r] : 0.0f;
  p.seed = in->seed ? in->seed[r] : 0;
  p.position = in->position ? in->position[r] : 0;
  return p;
}

const void *ingot_cpu_logits_row(const ingot_sampling_input *in, int64_t r) {
  return (const char *)in->logits + (size_t)(r * in->logits_stride) * ingot_dtype_size(in->dtype);
}

int64_t ingot_cpu_row_allowed(const ingot_sampling_input *in, int64_t r, int64_t begin,
                              int64_t count, float *vals, uint32_t *flags, float *max,
                              int32_t *max_id) {
  const int64_t V = in->vocab;
  if (count > 0) { /* an empty shard's slice may have no data at all */
    const void *row = ingot_cpu_logits_row(in, r);
    for (int64_t j = 0; j < count; j++) vals[j] = ingot_sampling_load(row, in->dtype, j);
  }
  /* logit bias, in list order (a token outside [0, V) is flagged by every range) */
  for (int64_t e = 0; e < in->num_bias; e++) {
    const int32_t *entry = in->bias_ids + e * in->bias_ids_stride;
    if (entry[0] != r) continue;
    if (entry[1] < 0 || entry[1] >= V) {
      *flags |= INGOT_SAMPLING_ROW_BAD_ENTRY;
      continue;
    }
    int64_t j = entry[1] - begin;
    if (j >= 0 && j < count) vals[j] = ingot_fadd_rn(vals[j], in->bias_values[e]);
  }
  /* banned tokens (a NaN / +Inf there still counts) */
  for (int64_t e = 0; e < in->num_banned; e++) {
    const int32_t *entry = in->banned + e * in->banned_stride;
    if (entry[0] != r) continue;
    if (entry[1] < 0 || entry[1] >= V) {
      *flags |= INGOT_SAMPLING_ROW_BAD_ENTRY;
      continue;
    }
    int64_t j = entry[1] - begin;
    if (j < 0 || j >= count) continue;
    if (!ingot_f32_finite(vals[j]) && vals[j] != -INFINITY) *flags |= INGOT_SAMPLING_ROW_NAN;
    vals[j] = -INFINITY;
  }
  /* NaN / +Inf (in x or after the bias): flagged, masked; then the bitmask */
  const uint32_t *words = in->allowed ? in->allowed + r * in->allowed_stride : NULL;
  int64_t allowed = 0;
  float m = -INFINITY;
  int32_t at = -1;
  for (int64_t j = 0; j < count; j++) {
    float v = vals[j];
    int64_t i = begin + j;
    if (!ingot_f32_finite(v)) {
      if (v != -INFINITY) *flags |= INGOT_SAMPLING_ROW_NAN;
      vals[j] = -INFINITY;
      continue;
    }
    if (words && !((words[i >> 5] >> (i & 31)) & 1u)) {
      vals[j] = -INFINITY;
      continue;
    }
    allowed++;
    if (v > m) m = v, at = (int32_t)i;
  }
  *max = m;
  *max_id = at;
  return allowed;
}

void ingot_cpu_row_scale(float *vals, int64_t count, float max, float temperature) {
  for (int64_t j = 0; j < count; j++)
    if (vals[j] != -INFINITY) vals[j] = ingot_fdiv_rn(ingot_fsub_rn(vals[j], max), temperature);
}

float ingot_cpu_raw_temperature(float temperature) {
  return temperature > 0.0f ? temperature : 1.0f;
}

float ingot_cpu_raw_max(const void *row, ingot_dtype dtype, int64_t count, int32_t *at) {
  float m = -INFINITY;
  *at = -1;
  for (int64_t j = 0; j < count; j++) {
    float x = ingot_sampling_load(row, dtype, j);
    if (ingot_f32_finite(x) && x > m) m = x, *at = (int32_t)j;
  }
  return m;
}

float ingot_cpu_min_p_threshold(float min_p) {
  return min_p > 0.0f ? ingot_sampling_ref_log(min_p) : -INFINITY;
}

void ingot_cpu_exact_sum_of(const float *w, int64_t n, ingot_exact_sum *sum) {
  ingot_exact_sum_bins bins;
  ingot_exact_sum_bins_clear(&bins);
  for (int64_t i = 0; i < n; i++) ingot_exact_sum_bins_add_f32(&bins, i, w[i]);
  ingot_exact_sum_clear(sum);
  ingot_exact_sum_bins_fold(&bins, sum);
}

double ingot_cpu_log_mass(const ingot_exact_sum *mass) {
  double z = ingot_exact_sum_value(mass);
  return z > 0.0 ? log(z) : -(double)INFINITY;
}

/* ---- rank order -------------------------------------------------------------------- */

int ingot_cpu_rank_before(const ingot_cpu_ranked *x, const ingot_cpu_ranked *y) {
  if (x->value != y->value) return x->value > y->value;
  return x->id < y->id;
}

void ingot_cpu_sort_ranked(ingot_cpu_ranked *a, int64_t n) {
  /* a max-heap under "comes after", so the root is the last in rank order */
  for (int64_t start = n / 2 - 1, end = n;;) {
    int64_t root;
    if (start >= 0) {
      root = start--;
    } else {
      if (--end <= 0) return;
      ingot_cpu_ranked t = a[0];
      a[0] = a[end];
      a[end] = t;
      root = 0;
    }
    for (int64_t child; (child = 2 * root + 1) < end; root = child) {
      if (child + 1 < end && ingot_cpu_rank_before(&a[child], &a[child + 1])) child++;
      if (!ingot_cpu_rank_before(&a[root], &a[child])) break;
      ingot_cpu_ranked t = a[root];
      a[root] = a[child];
      a[child] = t;
    }
  }
}

int64_t ingot_cpu_top_p_keep(const ingot_cpu_ranked *order, int64_t n, float top_p) {
  ingot_exact_sum_bins bins;
  ingot_exact_sum total, cumulative;
  ingot_exact_sum_bins_clear(&bins);
  for (int64_t j = 0; j < n; j++)
    ingot_exact_sum_bins_add_f32(&bins, j, ingot_sampling_ref_exp(order[j].value));
  ingot_exact_sum_clear(&total);
  ingot_exact_sum_bins_fold(&bins, &total);
  double target = ingot_sampling_top_p_target(top_p, &total);
  ingot_exact_sum_clear(&cumulative);
  for (int64_t j = 0; j < n; j++) {
    ingot_exact_sum_add_f32(&cumulative, ingot_sampling_ref_exp(order[j].value));
    if (ingot_sampling_top_p_reached(&cumulative, target)) return j + 1;
  }
  return n; /* not reached: the prefix of the whole set reaches p <= 1 */
}

void ingot_cpu_top_insert(ingot_cpu_ranked *top, int64_t n, int64_t *filled, float value,
                          int32_t id) {
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
  top[pos] = (ingot_cpu_ranked){value, id};
}

void ingot_cpu_write_top(const ingot_sampling_output *out, int64_t r, const ingot_cpu_ranked *top,
                         int64_t filled, double log_z) {
  for (int64_t j = 0; j < out->num_top; j++) {
    int found = j < filled;
    if (out->top_ids) out->top_ids[r * out->top_ids_stride + j] = found ? top[j].id : -1;
    if (out->top_logprobs)
      out->top_logprobs[r * out->top_logprobs_stride + j] =
          found ? (float)((double)top[j].value - log_z) : -INFINITY;
  }
}
