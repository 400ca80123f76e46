/*
 * The per-row, per-token rules of sampling on the CPU (the Sampling section
 * of include/ingot/ingot.h), written once for both CPU ops: the whole-row
 * calls (sampling_cpu.c) and the sharded steps (sampling_shard_cpu.c), which
 * must give the same bits. Each function works on a range of GLOBAL token
 * ids [begin, begin + count) of row r: the logits row holds id begin + j at
 * element j, the bitmask and the sparse lists speak global ids, and
 * in->vocab is the whole vocabulary V (the whole-row call: begin = 0,
 * count = V).
 */
#ifndef INGOT_CPU_SAMPLING_CPU_ROW_H
#define INGOT_CPU_SAMPLING_CPU_ROW_H

#include "common/sampling_exact_sum.h"
#include "common/sampling_ref.h"
#include "core/internal.h"

typedef struct ingot_cpu_row_params {
  float temperature;
  int32_t top_k;
  float top_p, min_p;
  uint64_t seed, position;
} ingot_cpu_row_params;

/* Row r's parameters, absent ones at their "off" values. */
ingot_cpu_row_params ingot_cpu_row_params_of(const ingot_sampling_input *in, int64_t r);

/* Row r of the logits (element 0 is the range's first token). */
const void *ingot_cpu_logits_row(const ingot_sampling_input *in, int64_t r);

/* Steps 1-2 over the range: vals[j] = l of token begin + j if ALLOWED, else
 * -Inf. ORs INGOT_SAMPLING_ROW_NAN (a NaN / +Inf there) and
 * INGOT_SAMPLING_ROW_BAD_ENTRY (a list entry of row r with a token outside
 * [0, V), whichever range is scanned) into *flags. Returns the number of
 * allowed tokens; *max gets their maximum and *max_id the lowest id holding
 * it (-Inf and -1 when none). */
int64_t ingot_cpu_row_allowed(const ingot_sampling_input *in, int64_t r, int64_t begin,
                              int64_t count, float *vals, uint32_t *flags, float *max,
                              int32_t *max_id);

/* Step 3 (T > 0): vals[j] <- s = (l - max) / T for the allowed tokens. */
void ingot_cpu_row_scale(float *vals, int64_t count, float max, float temperature);

/* The raw distribution softmax(x / T'): T' of a row, the maximum of the
 * finite x over the range (the lowest id's on ties: -Inf and -1 when
 * none), and the scaled value of one logit. */
float ingot_cpu_raw_temperature(float temperature);
float ingot_cpu_raw_max(const void *row, ingot_dtype dtype, int64_t count, int32_t *at);
static inline float ingot_cpu_raw_value(float x, float raw_max, float raw_temperature) {
  return ingot_fdiv_rn(ingot_fsub_rn(x, raw_max), raw_temperature);
}

/* The draw key s + g of token id (step 5). */
static inline float ingot_cpu_draw_key(const ingot_cpu_row_params *p, float s, int32_t id) {
  return ingot_fadd_rn(s, ingot_sampling_ref_gumbel(p->seed, p->position, (uint32_t)id));
}

/* The min-p threshold on s (-Inf when min-p is off). */
float ingot_cpu_min_p_threshold(float min_p);

/* *sum = the exact sum of the weights w[0, n) (each in [0, 1]). */
void ingot_cpu_exact_sum_of(const float *w, int64_t n, ingot_exact_sum *sum);

/* log of a mass (-Inf for 0). */
double ingot_cpu_log_mass(const ingot_exact_sum *mass);

/* (value, id) pairs in RANK ORDER: value descending, then id ascending. */
typedef struct ingot_cpu_ranked {
  float value;
  int32_t id;
} ingot_cpu_ranked;

int ingot_cpu_rank_before(const ingot_cpu_ranked *x, const ingot_cpu_ranked *y);
/* Heapsort into rank order (an op must not allocate; glibc's qsort may). */
void ingot_cpu_sort_ranked(ingot_cpu_ranked *a, int64_t n);

/* top-p over the first n tokens of rank order (values s): the number kept,
 * >= 1 (common/sampling_exact_sum.h states the rule). */
int64_t ingot_cpu_top_p_keep(const ingot_cpu_ranked *order, int64_t n, float top_p);

/* Inserts (value, id) into the n best so far, in rank order; ids must
 * arrive in ascending order (an equal value never displaces an earlier
 * id). */
void ingot_cpu_top_insert(ingot_cpu_ranked *top, int64_t n, int64_t *filled, float value,
                          int32_t id);

/* Row r of the top-n outputs: the first `filled` pairs with log-probability
 * value - log_z, then -1 / -Inf. */
void ingot_cpu_write_top(const ingot_sampling_output *out, int64_t r, const ingot_cpu_ranked *top,
                         int64_t filled, double log_z);

#endif /* INGOT_CPU_SAMPLING_CPU_ROW_H */
