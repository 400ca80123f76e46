/*
 * Shared by the PLE tests (CPU and CUDA): random ragged batches, an
 * independent oracle for the row ids (the "packed window" formulation of the
 * spec, not the walk the library uses), and small tensor helpers.
 */
#ifndef INGOT_TESTS_NGRAM_CASES_H
#define INGOT_TESTS_NGRAM_CASES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ingot/ingot.h"
#include "test_util.h"

/* A host-side ragged batch with int64 storage; converted to the dtype under
 * test when the tensors are made. */
typedef struct ngram_case {
  int64_t B, T;
  int64_t *ids;     /* [T] */
  int64_t *cu;      /* [B + 1] */
  int64_t *context; /* [B, n-1] */
  int n;
} ngram_case;

static inline void ngram_case_free(ngram_case *c) {
  free(c->ids);
  free(c->cu);
  free(c->context);
  memset(c, 0, sizeof *c);
}

/* A token id for dtype `dtype`: boundary tokens often, small ids often, and
 * the whole range of the dtype (extremes included) the rest of the time. */
static inline int64_t ngram_random_token(ingot_dtype dtype, int64_t boundary) {
  int64_t lo = dtype == INGOT_DTYPE_I32 ? INT32_MIN : INT64_MIN;
  int64_t hi = dtype == INGOT_DTYPE_I32 ? INT32_MAX : INT64_MAX;
  switch (test_rand() % 8) {
    case 0: return boundary;
    case 1: return test_rand_range(0, 300000);
    case 2: return (test_rand() & 1) ? lo : hi;
    case 3: return test_rand_range(-3, 3);
    default: return test_rand_range(lo, hi);
  }
}

/* B requests whose lengths are 0, 1 or up to max_len (roughly a third each),
 * with contexts that are fresh (all boundary) or random. */
static inline ngram_case ngram_random_case(int n, int64_t B, int64_t max_len, ingot_dtype dtype,
                                           int64_t boundary) {
  ngram_case c;
  c.n = n;
  c.B = B;
  c.cu = (int64_t *)malloc((size_t)(B + 1) * sizeof(int64_t));
  c.cu[0] = 0;
  for (int64_t b = 0; b < B; b++) {
    int64_t len;
    switch (test_rand() % 3) {
      case 0: len = 0; break;
      case 1: len = 1; break;
      default: len = test_rand_range(0, max_len); break;
    }
    c.cu[b + 1] = c.cu[b] + len;
  }
  c.T = c.cu[B];
  c.ids = (int64_t *)malloc((size_t)(c.T > 0 ? c.T : 1) * sizeof(int64_t));
  for (int64_t t = 0; t < c.T; t++) c.ids[t] = ngram_random_token(dtype, boundary);
  c.context = (int64_t *)malloc((size_t)(B > 0 ? B : 1) * (size_t)(n - 1) * sizeof(int64_t));
  for (int64_t b = 0; b < B; b++) {
    int fresh = test_rand() % 4 == 0;
    for (int i = 0; i < n - 1; i++)
      c.context[b * (n - 1) + i] = fresh ? boundary : ngram_random_token(dtype, boundary);
  }
  return c;
}

/* A config with random multipliers and random (not necessarily prime) moduli
 * in [1, max_p], a quarter of them tiny. */
static inline ingot_ngram_config ngram_random_config(int n, int hpn, int64_t boundary,
                                                     int64_t max_p) {
  ingot_ngram_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.n = n;
  cfg.heads_per_order = hpn;
  cfg.num_heads = hpn * (n - 1);
  cfg.boundary_token = boundary;
  for (int i = 0; i < n; i++) cfg.multipliers[i] = (int64_t)(test_rand() | 1u);
  int64_t off = 0;
  for (int h = 0; h < cfg.num_heads; h++) {
    int64_t p = test_rand() % 4 == 0 ? test_rand_range(1, 7) : test_rand_range(1, max_p);
    cfg.primes[h] = p;
    cfg.offsets[h] = off;
    off += p;
  }
  return cfg;
}

/* Copies int64 values to a buffer of `dtype` (I32 truncates: values were
 * drawn in range). Returns a malloc'd buffer. */
static inline void *ngram_pack(const int64_t *v, int64_t count, ingot_dtype dtype) {
  size_t es = dtype == INGOT_DTYPE_I32 ? 4 : 8;
  void *p = malloc((size_t)(count > 0 ? count : 1) * es);
  for (int64_t i = 0; i < count; i++) {
    if (dtype == INGOT_DTYPE_I32)
      ((int32_t *)p)[i] = (int32_t)v[i];
    else
      ((int64_t *)p)[i] = v[i];
  }
  return p;
}

static inline int64_t ngram_unpack(const void *p, int64_t i, ingot_dtype dtype) {
  return dtype == INGOT_DTYPE_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* The oracle: for each request, the packed window W = context ++ ids; token
 * at window position p reads W[p-s]; shift s >= 1 is masked when any of
 * W[p-s .. p-1] is the boundary (a cumulative scan, as the torch reference
 * does), and a masked value enters the mix as the boundary id. */
static inline void ngram_oracle_rows(const ingot_ngram_config *cfg, const ngram_case *c,
                                     int64_t *rows /* [T, H] */) {
  const int w = cfg->n - 1;
  const int64_t E = cfg->boundary_token;
  for (int64_t b = 0; b < c->B; b++) {
    int64_t len = c->cu[b + 1] - c->cu[b];
    int64_t *W = (int64_t *)malloc((size_t)(w + len) * sizeof(int64_t));
    for (int i = 0; i < w; i++) W[i] = c->context[b * w + i];
    for (int64_t i = 0; i < len; i++) W[w + i] = c->ids[c->cu[b] + i];
    for (int64_t i = 0; i < len; i++) {
      int64_t p = w + i;
      int64_t *out = rows + (c->cu[b] + i) * cfg->num_heads;
      for (int k = 2; k <= cfg->n; k++) {
        uint64_t mix = 0;
        for (int s = 0; s < k; s++) {
          int masked = 0;
          for (int64_t q = p - s; q <= p - 1; q++) masked |= W[q] == E;
          int64_t x = masked ? E : W[p - s];
          mix ^= (uint64_t)x * (uint64_t)cfg->multipliers[s];
        }
        for (int j = 0; j < cfg->heads_per_order; j++) {
          int h = (k - 2) * cfg->heads_per_order + j;
          int64_t P = cfg->primes[h];
          /* floored modulo via unsigned arithmetic: a different route
           * from the library's signed remainder */
          int64_t m = (int64_t)mix;
          uint64_t r = m >= 0 ? (uint64_t)m % (uint64_t)P
                              : ((uint64_t)P - 1 - (~(uint64_t)m) % (uint64_t)P);
          out[h] = (int64_t)r + cfg->offsets[h];
        }
      }
    }
    free(W);
  }
}

/* Oracle for the context roll: last n-1 tokens of context ++ ids. */
static inline void ngram_oracle_commit(const ngram_case *c, int64_t *new_context) {
  const int w = c->n - 1;
  for (int64_t b = 0; b < c->B; b++) {
    int64_t len = c->cu[b + 1] - c->cu[b];
    for (int i = 0; i < w; i++) {
      int64_t pos = len + i; /* index into context ++ ids, minus w */
      new_context[b * w + i] =
          pos < w ? c->context[b * w + pos] : c->ids[c->cu[b] + pos - w];
    }
  }
}

/* Independent OCP E4M3 decode (by formula) for gather oracles. */
static inline float ngram_oracle_e4m3(uint8_t v) {
  int sign = v >> 7, e = (v >> 3) & 15, m = v & 7;
  if (e == 15 && m == 7) return sign ? -__builtin_nanf("") : __builtin_nanf("");
  double mag = e == 0 ? m / 8.0 * 0.015625 /* 2^-6 */ : (1.0 + m / 8.0) * __builtin_ldexp(1.0, e - 7);
  return (float)(sign ? -mag : mag);
}

/* Independent fp32 -> bf16 (nearest, ties to even) by comparing the two
 * candidate neighbours in double precision. */
static inline uint16_t ngram_oracle_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* canonical NaN */
  uint16_t lo = (uint16_t)(u >> 16);
  if ((u & 0xffffu) == 0) return lo;
  uint16_t hi = (uint16_t)(lo + 1); /* away from zero in magnitude */
  uint32_t lu = (uint32_t)lo << 16, hu = (uint32_t)hi << 16;
  float lf;
  memcpy(&lf, &lu, 4);
  double hd;
  if ((hu & 0x7fffffffu) == 0x7f800000u) {
    /* rounding up reaches infinity: it stands for 2^128 in the comparison */
    hd = (u >> 31) ? -0x1p128 : 0x1p128;
  } else {
    float hf;
    memcpy(&hf, &hu, 4);
    hd = (double)hf;
  }
  double dl = __builtin_fabs((double)f - (double)lf);
  double dh = __builtin_fabs((double)f - hd);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

#endif
