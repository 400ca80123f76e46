/* Generic argument checks: descriptors, extents, residency, overlap. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>

#include "core/check.h"

ingot_status ingot_core_begin(struct ingot_context *ctx, const char *op,
                              struct CUstream_st *stream) {
  if (ctx == NULL) {
    ingot_core_clear_error(NULL);
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "ctx: NULL");
  }
  ingot_core_clear_error(ctx);
  if (ctx->backend == INGOT_BACKEND_CPU && stream != NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "stream: %p given to a CPU context (must be NULL)", (void *)stream);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_core_mul(struct ingot_context *ctx, const char *op, const char *name,
                            int64_t a, int64_t b, int64_t *out) {
  if (__builtin_mul_overflow(a, b, out))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: %" PRId64 " * %" PRId64 " overflows int64", name, a, b);
  return INGOT_STATUS_SUCCESS;
}

static ingot_status check_residency(struct ingot_context *ctx, const char *op, const char *name,
                                    const void *data) {
#ifdef INGOT_WITH_CUDA
  if (ctx->backend == INGOT_BACKEND_CPU) {
    if (ctx->detect_device_pointers && ingot_cuda_memory_kind(data, NULL) == INGOT_MEMORY_DEVICE)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: %p is CUDA device memory; a CPU context needs host memory",
                             name, data);
  } else if (ctx->backend == INGOT_BACKEND_CUDA) {
    int owner = -1;
    ingot_memory_kind kind = ingot_cuda_memory_kind(data, &owner);
    if (kind == INGOT_MEMORY_HOST_PAGEABLE && !ctx->pageable_memory_access)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: %p is pageable host memory the GPU cannot read; use device "
                             "memory or pinned host memory (cudaHostAlloc/cudaHostRegister)",
                             name, data);
    if (kind == INGOT_MEMORY_DEVICE && owner != ctx->device)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: %p is memory of CUDA device %d, but the context is on device %d",
                             name, data, owner, ctx->device);
  }
#else
  (void)ctx, (void)op, (void)name, (void)data;
#endif
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_core_check_tensor(struct ingot_context *ctx, const char *op,
                                     const ingot_tensor *t, const ingot_tensor_rule *rule,
                                     ingot_span *span) {
  const char *name = rule->name;
  if (t == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "%s: NULL descriptor", name);
  if (t->ndim != rule->ndim)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: ndim = %d, expected %d", name, (int)t->ndim, (int)rule->ndim);
  if ((int)t->dtype <= 0 || t->dtype >= INGOT_DTYPE_COUNT ||
      !(rule->dtypes & INGOT_DTYPE_BIT(t->dtype))) {
    char allowed[128];
    size_t used = 0;
    allowed[0] = '\0';
    for (int d = 1; d < INGOT_DTYPE_COUNT && used < sizeof allowed; d++) {
      if (!(rule->dtypes & INGOT_DTYPE_BIT(d))) continue;
      int n = snprintf(allowed + used, sizeof allowed - used, "%s%s", used ? ", " : "",
                       ingot_dtype_name((ingot_dtype)d));
      if (n < 0) break;
      used += (size_t)n;
    }
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: dtype %s (%d), expected one of: %s", name,
                           ingot_dtype_name(t->dtype), (int)t->dtype, allowed);
  }
  int64_t last_extent = 0; /* elements spanned by dims after the current one */
  int empty = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: shape[%d] = %" PRId64 " < 0", name, i, t->shape[i]);
    if (t->stride[i] < 0)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: stride[%d] = %" PRId64 " < 0 (negative strides unsupported)",
                             name, i, t->stride[i]);
    if (t->shape[i] == 0) empty = 1;
  }
  /* Last dimension contiguous; each outer dimension steps over the whole
   * inner block, so no two elements share an address. */
  int last = t->ndim - 1;
  if (!empty && t->shape[last] > 1 && t->stride[last] != 1)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: stride[%d] = %" PRId64 ", the last dimension must be contiguous",
                           name, last, t->stride[last]);
  int64_t extent = 1; /* elements from the first to one past the last */
  if (!empty) {
    last_extent = t->shape[last];
    extent = last_extent;
    for (int i = last - 1; i >= 0; i--) {
      if (t->shape[i] > 1 && t->stride[i] < last_extent)
        return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "%s: stride[%d] = %" PRId64 " < %" PRId64
                               " (rows would overlap)",
                               name, i, t->stride[i], last_extent);
      int64_t step;
      if (__builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &step) ||
          __builtin_add_overflow(extent, step, &extent))
        return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "%s: shape x stride overflows int64 (shape[%d] = %" PRId64
                               ", stride[%d] = %" PRId64 ")",
                               name, i, t->shape[i], i, t->stride[i]);
      last_extent = extent;
    }
  }
  int64_t bytes = 0;
  if (!empty && ingot_core_size_mul(extent, (int64_t)ingot_dtype_size(t->dtype), &bytes))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: %" PRId64 " elements of %s overflow int64 bytes", name, extent,
                           ingot_dtype_name(t->dtype));
  if (!empty && t->data == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: data is NULL for a non-empty tensor", name);
  /* kernels load whole elements (and the CPU reads them as C types) */
  if (!empty && (uintptr_t)t->data % ingot_dtype_size(t->dtype) != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: data %p is not aligned to its %zu-byte %s elements", name,
                           t->data, ingot_dtype_size(t->dtype), ingot_dtype_name(t->dtype));
  if (!empty && (uintptr_t)t->data > UINTPTR_MAX - (uintptr_t)bytes)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: data + extent wraps the address space", name);
  if (!empty) {
    ingot_status st = check_residency(ctx, op, name, t->data);
    if (st) return st;
  }
  if (span) {
    span->begin = (uintptr_t)t->data;
    span->end = empty ? span->begin : span->begin + (uintptr_t)bytes;
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_core_check_dim(struct ingot_context *ctx, const char *op, const char *name,
                                  const ingot_tensor *t, int dim, int64_t expected,
                                  const char *what) {
  if (t->shape[dim] != expected)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: shape[%d] = %" PRId64 ", expected %s = %" PRId64, name, dim,
                           t->shape[dim], what, expected);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_core_check_disjoint(struct ingot_context *ctx, const char *op,
                                       const char *out_name, ingot_span out,
                                       const char *in_name, ingot_span in) {
  if (out.begin < out.end && in.begin < in.end && out.begin < in.end && in.begin < out.end)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: overlaps %s (an output may share no byte with an input or "
                           "another output)",
                           out_name, in_name);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_core_check_all_disjoint(struct ingot_context *ctx, const char *op, int n_out,
                                           const char *const *out_names, const ingot_span *outs,
                                           int n_in, const char *const *in_names,
                                           const ingot_span *ins) {
  ingot_status st;
  for (int o = 0; o < n_out; o++) {
    for (int i = 0; i < n_in; i++)
      if ((st = ingot_core_check_disjoint(ctx, op, out_names[o], outs[o], in_names[i], ins[i])))
        return st;
    for (int p = 0; p < o; p++)
      if ((st = ingot_core_check_disjoint(ctx, op, out_names[o], outs[o], out_names[p], outs[p])))
        return st;
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_core_check_workspace(struct ingot_context *ctx, const char *op, size_t need,
                                        void *workspace, size_t workspace_bytes,
                                        const char *query, ingot_span *span) {
  span->begin = span->end = 0;
  if (workspace_bytes > 0 && workspace == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "workspace: NULL with workspace_bytes = %zu", workspace_bytes);
  if (workspace_bytes < need)
    return ingot_core_fail(ctx, INGOT_STATUS_INSUFFICIENT_WORKSPACE, op,
                           "workspace: workspace_bytes = %zu, %s gives %zu for this shape",
                           workspace_bytes, query, need);
  if (workspace_bytes == 0) return INGOT_STATUS_SUCCESS;
  if ((uintptr_t)workspace % 16 != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "workspace: %p is not 16-byte aligned", workspace);
  if (workspace_bytes > (size_t)INT64_MAX)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "workspace: workspace_bytes = %zu overflows int64", workspace_bytes);
  static const ingot_tensor_rule rule = {"workspace", 1, INGOT_DTYPE_BIT(INGOT_DTYPE_U8), 1};
  ingot_tensor t = ingot_tensor_1d(workspace, INGOT_DTYPE_U8, (int64_t)workspace_bytes);
  return ingot_core_check_tensor(ctx, op, &t, &rule, span);
}
