/*
 * The sharded-sampling tests' batches (tests/test_sampling_shard.c on the
 * CPU; test_sampling_shard_cuda.c and test_sampling_shard_nccl.c on the
 * GPU): random logits of every kind of row
 * (ties, empty, one region, NaN / +Inf, flat, one token, underflowing) in
 * f32 / bf16 / f16, parameters of every feature (greedy and extreme
 * temperatures, top-k below and above the candidates, top-p, min-p, bitmask,
 * banned and bias lists in global ids with bad entries), on the host and
 * the device (side 0 and 1 of the descriptors); uneven vocabulary splits in
 * a random slot order. With INGOT_WITH_CUDA also the device copies, the
 * sample outputs on either side and their bit-for-bit comparison.
 */
#ifndef INGOT_TESTS_SAMPLING_SHARD_BATCH_H
#define INGOT_TESTS_SAMPLING_SHARD_BATCH_H

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#if defined(INGOT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "test_cuda.h"
#endif

static void *xalloc(size_t n, int fill) {
  size_t size = (n + 15) / 16 * 16;
  void *p = aligned_alloc(16, size ? size : 16);
  if (!p) abort();
  memset(p, fill, size ? size : 16);
  return p;
}

static uint32_t f_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static double rand_normal(void) {
  double u = test_rand_unit(), v = test_rand_unit();
  return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

static uint16_t to_f16(float f) {
  uint32_t u = f_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  if (f != f) return 0x7e00;
  float a = fabsf(f);
  if (a >= 65504.0f) return (uint16_t)(sign | 0x7c00u);
  if (a < 6.103515625e-05f) return sign;
  int e = (int)((u >> 23) & 0xffu) - 127;
  return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((u >> 13) & 0x3ffu));
}

/* ---- a batch: host arrays and their device copies, params for each -------------------- */

typedef struct batch {
  int64_t B, V, stride, words;
  ingot_dtype dtype;
  void *logits;
  float *temperature, *top_p, *min_p, *bias_values;
  int32_t *top_k, *banned, *bias_ids;
  uint64_t *seed, *position;
  uint32_t *allowed;
  int64_t num_banned, num_bias;
  /* device copies */
  void *d_logits, *d_temperature, *d_top_p, *d_min_p, *d_top_k, *d_seed, *d_position, *d_allowed,
      *d_banned, *d_bias_ids, *d_bias_values;
  /* descriptors: [0] host, [1] device */
  ingot_tensor t_logits[2], t_temp[2], t_k[2], t_p[2], t_q[2], t_seed[2], t_pos[2], t_allowed[2], t_banned[2],
      t_bias_ids[2], t_bias_values[2];
  ingot_sampling_params params[2];
} batch;

static size_t elem_of(ingot_dtype d) { return d == INGOT_DTYPE_F32 ? 4 : 2; }

static void set_logit(batch *b, int64_t r, int64_t i, float v) {
  int64_t at = r * b->stride + i;
  if (b->dtype == INGOT_DTYPE_F32)
    ((float *)b->logits)[at] = v;
  else if (b->dtype == INGOT_DTYPE_BF16)
    ((uint16_t *)b->logits)[at] = v != v ? (uint16_t)0x7fc0 : (uint16_t)(f_bits(v) >> 16);
  else
    ((uint16_t *)b->logits)[at] = to_f16(v);
}

static void make_row(batch *b, int64_t r, int kind) {
  const int64_t V = b->V;
  const double scale = (double[]){0.5, 2.0, 4.0, 30.0}[test_rand() % 4];
  const int64_t lo = test_rand_range(0, V - 1), hi = test_rand_range(lo, V - 1);
  for (int64_t i = 0; i < V; i++) {
    double v = rand_normal() * scale;
    switch (kind) {
      case 1: v = (double)((int)(test_rand() % 4)) * -0.5; break; /* ties everywhere */
      case 2: v = test_rand_unit() < 0.01 ? 8.0 + 4.0 * rand_normal() : -4.0 + rand_normal(); break;
      case 3: v = -(double)INFINITY; break;                       /* empty */
      case 4: if (i < lo || i > hi) v = -(double)INFINITY; break; /* one region */
      case 5: if (test_rand() % 50 == 0) v = test_rand() % 2 ? (double)NAN : (double)INFINITY; break;
      case 6: v = 1.0; break;                                      /* flat */
      case 7: v = i == lo ? 0.0 : -(double)INFINITY; break;        /* one token */
      case 8: v = rand_normal() * 300.0; break;                    /* underflows */
      default: if (test_rand() % 8 == 0) v = -(double)INFINITY; break;
    }
    set_logit(b, r, i, (float)v);
  }
}

static void make_params(batch *b, int64_t r, int64_t kc) {
  const int64_t V = b->V;
  int u = (int)(test_rand() % 20);
  b->temperature[r] = u < 3 ? 0.0f : u == 3 ? 1e-3f : u == 4 ? 60.0f : u == 5 ? 1e-30f
                                                                      : (float)(0.3 + 1.5 * test_rand_unit());
  switch (test_rand() % 6) {
    case 0: b->top_k[r] = 0; break;
    case 1: b->top_k[r] = 1; break;
    case 2: b->top_k[r] = (int32_t)test_rand_range(1, kc > 1 ? kc : 2); break;
    case 3: b->top_k[r] = (int32_t)test_rand_range(1, V > 1 ? V - 1 : 1); break;
    case 4: b->top_k[r] = (int32_t)(V + test_rand_range(0, 3)); break;
    default: b->top_k[r] = (int32_t)test_rand_range(1, 3000); break;
  }
  switch (test_rand() % 5) {
    case 0: case 1: b->top_p[r] = 1.0f; break;
    case 2: b->top_p[r] = (float)(0.05 + 0.94 * test_rand_unit()); break;
    case 3: b->top_p[r] = test_rand() % 2 ? 1e-6f : 0.999999f; break;
    default: b->top_p[r] = (float)test_rand_unit() * 0.5f + 0.3f; break;
  }
  switch (test_rand() % 4) {
    case 0: b->min_p[r] = (float)(0.2 * test_rand_unit()); break;
    case 1: b->min_p[r] = test_rand() % 4 == 0 ? 1.0f : 0.02f; break;
    default: b->min_p[r] = 0.0f; break;
  }
  b->seed[r] = test_rand();
  b->position[r] = test_rand() % 1000;
}

static int32_t list_token(int64_t V) {
  int u = (int)(test_rand() % 10);
  if (u == 0) return -1 - (int32_t)(test_rand() % 3);
  if (u == 1) return (int32_t)(V + (int64_t)(test_rand() % 3));
  if (u < 5) return (int32_t)((V / 2 + (int64_t)(test_rand() % 3) - 1 + V) % V);
  return (int32_t)test_rand_range(0, V - 1);
}

/* The descriptors and parameters of one side (0: the host arrays, 1: the
 * device copies), from the arrays as they are now. */
static void describe_batch(batch *b, int side) {
  const int64_t B = b->B;
  b->t_logits[side] = ingot_tensor_2d(side ? b->d_logits : b->logits, b->dtype, B, b->V,
                                      b->stride);
  b->t_temp[side] = ingot_tensor_1d(side ? b->d_temperature : b->temperature, INGOT_DTYPE_F32, B);
  b->t_k[side] = ingot_tensor_1d(side ? b->d_top_k : b->top_k, INGOT_DTYPE_I32, B);
  b->t_p[side] = ingot_tensor_1d(side ? b->d_top_p : b->top_p, INGOT_DTYPE_F32, B);
  b->t_q[side] = ingot_tensor_1d(side ? b->d_min_p : b->min_p, INGOT_DTYPE_F32, B);
  b->t_seed[side] = ingot_tensor_1d(side ? b->d_seed : b->seed, INGOT_DTYPE_U64, B);
  b->t_pos[side] = ingot_tensor_1d(side ? b->d_position : b->position, INGOT_DTYPE_U64, B);
  b->t_allowed[side] = ingot_tensor_2d(side ? b->d_allowed : b->allowed, INGOT_DTYPE_U32, B,
                                       b->words, b->words);
  b->t_banned[side] = ingot_tensor_2d(side ? b->d_banned : b->banned, INGOT_DTYPE_I32,
                                      b->num_banned, 2, 2);
  b->t_bias_ids[side] = ingot_tensor_2d(side ? b->d_bias_ids : b->bias_ids, INGOT_DTYPE_I32,
                                        b->num_bias, 2, 2);
  b->t_bias_values[side] = ingot_tensor_1d(side ? b->d_bias_values : b->bias_values,
                                           INGOT_DTYPE_F32, b->num_bias);
  ingot_sampling_params p = INGOT_SAMPLING_PARAMS_INITIALIZER;
  p.temperature = &b->t_temp[side], p.top_k = &b->t_k[side], p.top_p = &b->t_p[side];
  p.min_p = &b->t_q[side], p.seed = &b->t_seed[side], p.position = &b->t_pos[side];
  if (b->allowed) p.allowed = &b->t_allowed[side];
  if (b->num_banned) p.banned = &b->t_banned[side];
  if (b->num_bias) p.bias_ids = &b->t_bias_ids[side], p.bias_values = &b->t_bias_values[side];
  b->params[side] = p;
}

static void make_batch(batch *b, int64_t B, int64_t V, int64_t kc) {
  memset(b, 0, sizeof *b);
  b->B = B, b->V = V;
  b->dtype = (ingot_dtype[]){INGOT_DTYPE_F32, INGOT_DTYPE_F32, INGOT_DTYPE_BF16,
                             INGOT_DTYPE_F16}[test_rand() % 4];
  b->stride = V + (int64_t)(test_rand() % 3);
  b->logits = xalloc((size_t)(B * b->stride) * 4, 0);
  b->temperature = xalloc((size_t)B * 4, 0), b->top_p = xalloc((size_t)B * 4, 0);
  b->min_p = xalloc((size_t)B * 4, 0), b->top_k = xalloc((size_t)B * 4, 0);
  b->seed = xalloc((size_t)B * 8, 0), b->position = xalloc((size_t)B * 8, 0);
  for (int64_t r = 0; r < B; r++) {
    make_row(b, r, (int)(test_rand() % 10));
    make_params(b, r, kc);
  }
  b->words = (V + 31) / 32;
  if (test_rand() % 2) {
    b->allowed = xalloc((size_t)(B * b->words) * 4, 0);
    for (int64_t r = 0; r < B; r++)
      for (int64_t w = 0; w < b->words; w++)
        b->allowed[r * b->words + w] =
            r % 3 == 0 ? 0xffffffffu : (uint32_t)test_rand() | (uint32_t)test_rand();
  }
  b->num_banned = (int64_t)(test_rand() % 12);
  b->banned = xalloc((size_t)b->num_banned * 8, 0);
  for (int64_t e = 0; e < b->num_banned; e++) {
    b->banned[2 * e] = (int32_t)test_rand_range(-1, B);
    b->banned[2 * e + 1] = list_token(V);
  }
  b->num_bias = (int64_t)(test_rand() % 12);
  b->bias_ids = xalloc((size_t)b->num_bias * 8, 0);
  b->bias_values = xalloc((size_t)b->num_bias * 4, 0);
  for (int64_t e = 0; e < b->num_bias; e++) {
    b->bias_ids[2 * e] = (int32_t)test_rand_range(0, B - 1);
    b->bias_ids[2 * e + 1] = e > 0 && test_rand() % 3 == 0 ? b->bias_ids[2 * e - 1] : list_token(V);
    b->bias_values[e] = test_rand() % 10 == 0 ? INFINITY : (float)(rand_normal() * 3.0);
  }
  describe_batch(b, 0);
}

static void free_batch(batch *b) {
  free(b->logits), free(b->temperature), free(b->top_p), free(b->min_p), free(b->top_k);
  free(b->seed), free(b->position), free(b->allowed), free(b->banned), free(b->bias_ids);
  free(b->bias_values);
#if defined(INGOT_WITH_CUDA)
  cudaFree(b->d_logits), cudaFree(b->d_temperature), cudaFree(b->d_top_p), cudaFree(b->d_min_p);
  cudaFree(b->d_top_k), cudaFree(b->d_seed), cudaFree(b->d_position), cudaFree(b->d_allowed);
  cudaFree(b->d_banned), cudaFree(b->d_bias_ids), cudaFree(b->d_bias_values);
#endif
}

/* Flat rows, ties across every shard border (logit 2 where i % 16 < 8, else 1):
 * greedy, top-k 1 and 3, top-p 0.3, 0.5 (k 40) and 0.9 (k 9); no lists, no mask. */
static void make_tie_batch(batch *b) {
  const int64_t B = 6, V = 64;
  make_batch(b, B, V, 8);
  for (int64_t r = 0; r < B; r++) {
    for (int64_t i = 0; i < V; i++) set_logit(b, r, i, (i % 16) < 8 ? 2.0f : 1.0f);
    b->temperature[r] = r == 0 ? 0.0f : 1.0f;
    b->top_k[r] = (int32_t[]){0, 1, 3, 0, 40, 9}[r];
    b->top_p[r] = (float[]){1.0f, 1.0f, 1.0f, 0.3f, 0.5f, 0.9f}[r];
    b->min_p[r] = 0.0f;
  }
  b->num_banned = 0, b->num_bias = 0;
  free(b->allowed);
  b->allowed = NULL;
  describe_batch(b, 0);
}

/* The flags a plan of candidate length kc needs for b's rows. */
static uint32_t select_flags(const batch *b, int64_t kc) {
  uint32_t flags = 0;
  for (int64_t r = 0; r < b->B; r++) {
    int32_t k = b->top_k[r];
    if (b->temperature[r] == 0.0f) continue;
    if (kc > 0 && (b->V <= kc || (k >= 1 && k <= kc))) continue;
    if (k > 0 && k < b->V) flags |= INGOT_SAMPLING_SHARD_SELECT_TOP_K;
    if (b->top_p[r] < 1.0f) flags |= INGOT_SAMPLING_SHARD_SELECT_TOP_P;
  }
  return flags;
}

/* ---- splits ------------------------------------------------------------------------------- */

/* S <= 8 ranges tiling [0, V), in slot order. */
typedef struct split {
  int32_t S;
  int64_t begin[8], count[8];
} split;

static split make_split(int64_t V, int32_t S) {
  if (S < 1 || S > 8) abort(); /* the tests' splits */
  int64_t cuts[9];
  cuts[0] = 0, cuts[S] = V;
  for (int32_t j = 1; j < S; j++) {
    int u = (int)(test_rand() % 6);
    cuts[j] = u == 0 ? cuts[j - 1] : u == 1 ? (cuts[j - 1] + 1 < V ? cuts[j - 1] + 1 : V)
                                              : test_rand_range(0, V);
  }
  for (int32_t j = 1; j < S; j++)
    for (int32_t i = j; i > 1 && cuts[i] < cuts[i - 1]; i--) {
      int64_t t = cuts[i];
      cuts[i] = cuts[i - 1], cuts[i - 1] = t;
    }
  int32_t order[8];
  for (int32_t j = 0; j < S; j++) order[j] = j;
  for (int32_t j = S - 1; j > 0; j--) {
    int32_t i = (int32_t)(test_rand() % (uint64_t)(j + 1)), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  split s;
  s.S = S;
  for (int32_t j = 0; j < S; j++) {
    s.begin[order[j]] = cuts[j];
    s.count[order[j]] = cuts[j + 1] - cuts[j];
  }
  return s;
}

static ingot_sampling_shard shard_of(const batch *b, const split *sp, int32_t slot, int64_t kc,
                                     int64_t n, uint32_t flags) {
  ingot_sampling_shard sh = INGOT_SAMPLING_SHARD_INITIALIZER;
  sh.vocab_size = b->V;
  sh.vocab_begin = sp->begin[slot];
  sh.vocab_count = sp->count[slot];
  sh.num_shards = sp->S;
  sh.shard_index = slot;
  sh.max_top_k = (int32_t)kc;
  sh.num_top = (int32_t)n;
  sh.flags = flags;
  return sh;
}

static ingot_tensor slice_of(const batch *b, const split *sp, int32_t slot, int side) {
  void *base = side ? b->d_logits : b->logits;
  void *data = sp->count[slot] ? (char *)base + (size_t)sp->begin[slot] * elem_of(b->dtype) : NULL;
  return ingot_tensor_2d(data, b->dtype, b->B, sp->count[slot], b->stride);
}


/* ---- the device side ----------------------------------------------------------------- */

#if defined(INGOT_WITH_CUDA)

/* Device memory filled with `fill` (so that a byte not written shows). */
static void *dalloc(size_t n, int fill) {
  void *d = NULL;
  if (cudaMalloc(&d, n ? n : 16) != cudaSuccess) abort();
  if (test_fill(d, fill, n ? n : 16) != cudaSuccess) abort();
  return d;
}

static void *dcopy(const void *h, size_t n) {
  void *d = dalloc(n, 0);
  if (n && test_upload(d, h, n) != cudaSuccess) abort();
  return d;
}

/* Device -> host, after all the device's work (any stream). */
static void download(void *h, const void *d, size_t n) {
  if (cudaDeviceSynchronize() != cudaSuccess) abort();
  if (n && cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess) abort();
}

/* The device copies of the host arrays as they are now, and the
 * descriptors of both sides. */
static void upload_batch(batch *b) {
  const int64_t B = b->B;
  b->d_logits = dcopy(b->logits, (size_t)(B * b->stride) * elem_of(b->dtype));
  b->d_temperature = dcopy(b->temperature, (size_t)B * 4);
  b->d_top_p = dcopy(b->top_p, (size_t)B * 4), b->d_min_p = dcopy(b->min_p, (size_t)B * 4);
  b->d_top_k = dcopy(b->top_k, (size_t)B * 4);
  b->d_seed = dcopy(b->seed, (size_t)B * 8), b->d_position = dcopy(b->position, (size_t)B * 8);
  b->d_allowed = b->allowed ? dcopy(b->allowed, (size_t)(B * b->words) * 4) : NULL;
  b->d_banned = dcopy(b->banned, (size_t)b->num_banned * 8);
  b->d_bias_ids = dcopy(b->bias_ids, (size_t)b->num_bias * 8);
  b->d_bias_values = dcopy(b->bias_values, (size_t)b->num_bias * 4);
  describe_batch(b, 0);
  describe_batch(b, 1);
}

typedef struct outs {
  int32_t *tokens, *top_ids;
  uint32_t *status;
  float *lp, *raw, *top_lp;
} outs;

static void alloc_outs(outs *o, int64_t B, int64_t n, int device) {
  size_t sizes[6] = {(size_t)B * 4, (size_t)(B * n) * 4, (size_t)B * 4,
                     (size_t)B * 4, (size_t)B * 4, (size_t)(B * n) * 4};
  void **p[6] = {(void **)&o->tokens, (void **)&o->top_ids, (void **)&o->status,
                 (void **)&o->lp, (void **)&o->raw, (void **)&o->top_lp};
  for (int k = 0; k < 6; k++) *p[k] = device ? dalloc(sizes[k], 0x5a) : xalloc(sizes[k], 0x5a);
}

/* The descriptors of o ([B] tokens, statuses, log-probabilities; [B, n]
 * top-n) and its logprobs struct (pointing into d: keep d for the call). */
typedef struct outs_desc {
  ingot_tensor tokens, status, lp, raw, top_ids, top_lp;
  ingot_sampling_logprobs logprobs;
} outs_desc;

static void describe_outs(outs_desc *d, const outs *o, int64_t B, int64_t n,
                          uint32_t top_flags) {
  d->tokens = ingot_tensor_1d(o->tokens, INGOT_DTYPE_I32, B);
  d->status = ingot_tensor_1d(o->status, INGOT_DTYPE_U32, B);
  d->lp = ingot_tensor_1d(o->lp, INGOT_DTYPE_F32, B);
  d->raw = ingot_tensor_1d(o->raw, INGOT_DTYPE_F32, B);
  d->top_ids = ingot_tensor_2d(o->top_ids, INGOT_DTYPE_I32, B, n, n);
  d->top_lp = ingot_tensor_2d(o->top_lp, INGOT_DTYPE_F32, B, n, n);
  ingot_sampling_logprobs lp = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  lp.flags = top_flags;
  lp.token_logprob = &d->lp, lp.token_raw_logprob = &d->raw;
  if (n > 0) lp.top_ids = &d->top_ids, lp.top_logprobs = &d->top_lp;
  d->logprobs = lp;
}

static void free_outs(outs *o, int device) {
  void *p[6] = {o->tokens, o->top_ids, o->status, o->lp, o->raw, o->top_lp};
  for (int k = 0; k < 6; k++) device ? (void)cudaFree(p[k]) : free(p[k]);
}

static void download_outs(outs *h, const outs *d, int64_t B, int64_t n) {
  download(h->tokens, d->tokens, (size_t)B * 4), download(h->status, d->status, (size_t)B * 4);
  download(h->lp, d->lp, (size_t)B * 4), download(h->raw, d->raw, (size_t)B * 4);
  download(h->top_ids, d->top_ids, (size_t)(B * n) * 4);
  download(h->top_lp, d->top_lp, (size_t)(B * n) * 4);
}

/* Bit-for-bit equality of the sample outputs; prints the first difference. */
static int same_outs(const outs *want, const outs *got, int64_t B, int64_t n, const char *what) {
  for (int64_t r = 0; r < B; r++) {
    if (want->tokens[r] != got->tokens[r] || want->status[r] != got->status[r] ||
        f_bits(want->lp[r]) != f_bits(got->lp[r]) || f_bits(want->raw[r]) != f_bits(got->raw[r])) {
      test_fail_at(__FILE__, __LINE__,
                   "%s row %" PRId64 ": CUDA token %d status %u lp %.9g raw %.9g; CPU %d %u %.9g %.9g",
                   what, r, got->tokens[r], got->status[r], (double)got->lp[r], (double)got->raw[r],
                   want->tokens[r], want->status[r], (double)want->lp[r], (double)want->raw[r]);
      return 0;
    }
    for (int64_t j = 0; j < n; j++) {
      int64_t at = r * n + j;
      if (want->top_ids[at] != got->top_ids[at] || f_bits(want->top_lp[at]) != f_bits(got->top_lp[at])) {
        test_fail_at(__FILE__, __LINE__, "%s row %" PRId64 " top %" PRId64 ": CUDA (%d, %.9g), CPU (%d, %.9g)",
                     what, r, j, got->top_ids[at], (double)got->top_lp[at], want->top_ids[at],
                     (double)want->top_lp[at]);
        return 0;
      }
    }
  }
  return 1;
}

#endif /* INGOT_WITH_CUDA */

#endif /* INGOT_TESTS_SAMPLING_SHARD_BATCH_H */
