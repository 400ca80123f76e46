/*
 * Argument checks shared by every op (core only). Each check records a text
 * "<op>: <argument>: <what is wrong>" in the context and returns its status;
 * callers return the first failure unchanged.
 */
#ifndef INGOT_CORE_CHECK_H
#define INGOT_CORE_CHECK_H

#include "core/internal.h"

/* Dtype sets for ingot_core_check_tensor. */
#define INGOT_DTYPE_BIT(d) (1u << (unsigned)(d))

typedef struct ingot_tensor_rule {
  const char *name;       /* argument name used in error texts */
  int32_t ndim;           /* required number of dimensions */
  uint32_t dtypes;        /* OR of INGOT_DTYPE_BIT(...) allowed */
  int writable;           /* the op writes it (affects residency messages only) */
} ingot_tensor_rule;

/* The extent of a checked tensor, in bytes, for overlap tests. */
typedef struct ingot_span {
  uintptr_t begin, end; /* [begin, end); begin == end for an empty tensor */
} ingot_span;

/* Context present, error text cleared, stream allowed for the backend. */
ingot_status ingot_core_begin(struct ingot_context *ctx, const char *op,
                              struct CUstream_st *stream);

/* Structural checks: non-NULL descriptor, ndim, dtype, shapes >= 0,
 * strides >= 0, contiguous last dimension, rows not overlapping each other,
 * byte extent without overflow, data non-NULL and aligned to the element
 * size when non-empty, and memory the
 * context's backend can reach (where detectable). */
ingot_status ingot_core_check_tensor(struct ingot_context *ctx, const char *op,
                                     const ingot_tensor *t, const ingot_tensor_rule *rule,
                                     ingot_span *span);

/* shape[dim] == expected, else "<name>: shape[dim] = x, expected <what> = e". */
ingot_status ingot_core_check_dim(struct ingot_context *ctx, const char *op, const char *name,
                                  const ingot_tensor *t, int dim, int64_t expected,
                                  const char *what);

/* An output must not share bytes with an input or with another output. */
ingot_status ingot_core_check_disjoint(struct ingot_context *ctx, const char *op,
                                       const char *out_name, ingot_span out,
                                       const char *in_name, ingot_span in);

/* Every output span against every input span and against the earlier
 * outputs (names and spans in parallel arrays; empty spans never overlap). */
ingot_status ingot_core_check_all_disjoint(struct ingot_context *ctx, const char *op, int n_out,
                                           const char *const *out_names, const ingot_span *outs,
                                           int n_in, const char *const *in_names,
                                           const ingot_span *ins);

/* A caller's scratch buffer: workspace_bytes >= need (else
 * INSUFFICIENT_WORKSPACE, the text naming `query`), non-NULL when bytes > 0,
 * 16-byte aligned, reachable by the context. *span gets its extent (empty
 * when bytes == 0) for the overlap checks. */
ingot_status ingot_core_check_workspace(struct ingot_context *ctx, const char *op, size_t need,
                                        void *workspace, size_t workspace_bytes,
                                        const char *query, ingot_span *span);

/* a * b into *out, failing with "<name>: a * b overflows". */
ingot_status ingot_core_mul(struct ingot_context *ctx, const char *op, const char *name,
                            int64_t a, int64_t b, int64_t *out);

/* Overflow-checked arithmetic on sizes and byte counts (operands >= 0):
 * 0 with the result in *out, or 1 when it overflows int64 or exceeds
 * SIZE_MAX (a byte count must fit both); *out is unspecified then. For the
 * size queries and the shapes derived from arguments: the caller words the
 * error, naming its arguments and their values. */
static inline int ingot_core_size_mul(int64_t a, int64_t b, int64_t *out) {
  return __builtin_mul_overflow(a, b, out) || (uint64_t)*out > SIZE_MAX;
}

static inline int ingot_core_size_add(int64_t a, int64_t b, int64_t *out) {
  return __builtin_add_overflow(a, b, out) || (uint64_t)*out > SIZE_MAX;
}

/* a rounded up to a multiple of m (a >= 0, m >= 1). */
static inline int ingot_core_size_round_up(int64_t a, int64_t m, int64_t *out) {
  int64_t t;
  if (__builtin_add_overflow(a, m - 1, &t)) return 1;
  *out = t / m * m;
  return 0;
}

#endif /* INGOT_CORE_CHECK_H */
