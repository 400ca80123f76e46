/*
 * NVFP4: argument validation and dispatch (every backend), and the shape
 * helper. The format and the arithmetic are stated in include/ingot/ingot.h.
 */
#include <inttypes.h>

#include "core/check.h"
#include "core/nvfp4_check.h"

#define SOURCE_DTYPES                                                    \
  (INGOT_DTYPE_BIT(INGOT_DTYPE_BF16) | INGOT_DTYPE_BIT(INGOT_DTYPE_F16) | \
   INGOT_DTYPE_BIT(INGOT_DTYPE_F32))
#define SCALE_DTYPES (INGOT_DTYPE_BIT(INGOT_DTYPE_U8) | INGOT_DTYPE_BIT(INGOT_DTYPE_F8_E4M3))
#define OUT_DTYPES (INGOT_DTYPE_BIT(INGOT_DTYPE_BF16) | INGOT_DTYPE_BIT(INGOT_DTYPE_F32))

/* ---- shapes ----------------------------------------------------------------- */

/* Fills the padded scale shape; fails (on ctx, or thread-local if NULL). */
static ingot_status scale_shape(struct ingot_context *ctx, const char *op, const char *name,
                                int64_t rows, int64_t cols, int64_t *scale_rows,
                                int64_t *scale_cols) {
  if (rows < 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "%s: rows = %" PRId64 " < 0",
                           name, rows);
  if (cols < 0 || cols % 16 != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: cols = %" PRId64 ", expected a non-negative multiple of 16",
                           name, cols);
  int64_t sr, sc = (cols / 16 + 3) / 4 * 4, bytes;
  if (ingot_core_size_round_up(rows, 128, &sr))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: rows = %" PRId64 " overflows when padded to 128", name, rows);
  if (ingot_core_size_mul(sr, sc, &bytes) || ingot_core_size_mul(bytes, 2, &bytes))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: rows = %" PRId64 ", cols = %" PRId64
                           ": the scale buffer round_up(rows, 128) x round_up(cols/16, 4) = %" PRId64
                           " x %" PRId64 " bytes overflows int64",
                           name, rows, cols, sr, sc);
  *scale_rows = sr;
  *scale_cols = sc;
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_core_nvfp4_check_extent(struct ingot_context *ctx, const char *op,
                                           const char *matrix, const char *rows_name,
                                           int64_t rows, const char *cols_name, int64_t cols) {
  int64_t values, sr, scales;
  if (ingot_core_size_mul(rows, cols / 2, &values))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s = %" PRId64 ", %s = %" PRId64 ": %s.values [%s, %s / 2] (%s * %s / 2 "
                           "bytes) overflow int64",
                           rows_name, rows, cols_name, cols, matrix, rows_name, cols_name,
                           rows_name, cols_name);
  if (ingot_core_size_round_up(rows, 128, &sr) ||
      ingot_core_size_mul(sr, (cols / 16 + 3) / 4 * 4, &scales))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s = %" PRId64 ", %s = %" PRId64 ": %s.scales (round_up(%s, 128) * "
                           "round_up(%s / 16, 4) bytes) overflow int64",
                           rows_name, rows, cols_name, cols, matrix, rows_name, cols_name);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_nvfp4_scale_shape(int64_t rows, int64_t cols, int64_t *scale_rows,
                                     int64_t *scale_cols) {
  static const char op[] = "ingot_nvfp4_scale_shape";
  ingot_core_clear_error(NULL);
  if (scale_rows == NULL)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "scale_rows: NULL");
  if (scale_cols == NULL)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "scale_cols: NULL");
  return scale_shape(NULL, op, "shape", rows, cols, scale_rows, scale_cols);
}

/* ---- tensor checks -------------------------------------------------------------- */

ingot_status ingot_core_nvfp4_check_global_scale(struct ingot_context *ctx, const char *op,
                                                 const char *name, const ingot_tensor *t,
                                                 int writable, ingot_span *span) {
  const ingot_tensor_rule rule = {name, 1, INGOT_DTYPE_BIT(INGOT_DTYPE_F32), writable};
  ingot_status st = ingot_core_check_tensor(ctx, op, t, &rule, span);
  if (st) return st;
  return ingot_core_check_dim(ctx, op, name, t, 0, 1, "1 (one fp32 scalar)");
}

static ingot_status check_global_scale(struct ingot_context *ctx, const char *op,
                                       const ingot_tensor *t, int writable, ingot_span *span) {
  return ingot_core_nvfp4_check_global_scale(ctx, op, "global_scale", t, writable, span);
}

/* NULL, or a 1-element U32 counter. */
static ingot_status check_counter(struct ingot_context *ctx, const char *op,
                                  const ingot_tensor *t, uint32_t **out, ingot_span *span) {
  static const ingot_tensor_rule rule = {"nonfinite_count", 1, INGOT_DTYPE_BIT(INGOT_DTYPE_U32),
                                         1};
  *out = NULL;
  span->begin = span->end = 0;
  if (t == NULL) return INGOT_STATUS_SUCCESS;
  ingot_status st = ingot_core_check_tensor(ctx, op, t, &rule, span);
  if (st) return st;
  if ((st = ingot_core_check_dim(ctx, op, "nonfinite_count", t, 0, 1, "1 (one u32 counter)")))
    return st;
  *out = (uint32_t *)t->data;
  return INGOT_STATUS_SUCCESS;
}

/* A dense [rows, cols] BF16 / F16 / F32 matrix. */
static ingot_status check_source(struct ingot_context *ctx, const char *op, const char *name,
                                 const ingot_tensor *t, int need_blocks, ingot_span *span) {
  const ingot_tensor_rule rule = {name, 2, SOURCE_DTYPES, 0};
  ingot_status st = ingot_core_check_tensor(ctx, op, t, &rule, span);
  if (st) return st;
  if (need_blocks && t->shape[1] % 16 != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: shape[1] = %" PRId64 ", expected a multiple of 16 (the block size)",
                           name, t->shape[1]);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_core_nvfp4_check_values(struct ingot_context *ctx, const char *op,
                                           const char *name, const ingot_tensor *t, int64_t rows,
                                           const char *rows_what, int64_t cols,
                                           const char *cols_what, int writable,
                                           ingot_span *span) {
  const ingot_tensor_rule rule = {name, 2, INGOT_DTYPE_BIT(INGOT_DTYPE_U8), writable};
  ingot_status st = ingot_core_check_tensor(ctx, op, t, &rule, span);
  if (st) return st;
  if ((st = ingot_core_check_dim(ctx, op, name, t, 0, rows, rows_what))) return st;
  return ingot_core_check_dim(ctx, op, name, t, 1, cols / 2, cols_what);
}

static ingot_status check_values(struct ingot_context *ctx, const char *op, const ingot_tensor *t,
                                 int64_t rows, int64_t cols, int writable, ingot_span *span) {
  return ingot_core_nvfp4_check_values(ctx, op, "values", t, rows, "rows", cols, "cols / 2",
                                       writable, span);
}

ingot_status ingot_core_nvfp4_check_scales(struct ingot_context *ctx, const char *op,
                                           const char *name, const ingot_tensor *t, int64_t rows,
                                           int64_t cols, int writable, ingot_nvfp4_packed *layout,
                                           ingot_span *span) {
  int64_t sr = 0, sc = 0;
  ingot_status st = scale_shape(ctx, op, name, rows, cols, &sr, &sc);
  if (st) return st;
  if (t == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "%s: NULL descriptor", name);
  if (t->ndim != 1 && t->ndim != 2)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: ndim = %d, expected 1 ([%" PRId64 "]) or 2 ([%" PRId64
                           ", %" PRId64 "])",
                           name, (int)t->ndim, sr * sc, sr, sc);
  const ingot_tensor_rule rule = {name, t->ndim, SCALE_DTYPES, writable};
  if ((st = ingot_core_check_tensor(ctx, op, t, &rule, span))) return st;
  if (t->ndim == 1) {
    if (t->shape[0] != sr * sc)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: shape[0] = %" PRId64 ", expected round_up(rows, 128) * "
                             "round_up(cols/16, 4) = %" PRId64 " * %" PRId64 " = %" PRId64,
                             name, t->shape[0], sr, sc, sr * sc);
  } else {
    if ((st = ingot_core_check_dim(ctx, op, name, t, 0, sr, "round_up(rows, 128)"))) return st;
    if ((st = ingot_core_check_dim(ctx, op, name, t, 1, sc, "round_up(cols/16, 4)"))) return st;
    if (sr > 1 && sc > 0 && t->stride[0] != sc)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: stride[0] = %" PRId64 ", the swizzled buffer must be contiguous"
                             " (expected %" PRId64 ")",
                             name, t->stride[0], sc);
  }
  layout->scales = (uint8_t *)t->data;
  layout->rows = rows;
  layout->cols = cols;
  layout->scale_rows = sr;
  layout->scale_cols = sc;
  return INGOT_STATUS_SUCCESS;
}

static ingot_status check_scales(struct ingot_context *ctx, const char *op, const char *name,
                                 const ingot_tensor *t, int64_t rows, int64_t cols, int writable,
                                 ingot_nvfp4_packed *layout, ingot_span *span) {
  return ingot_core_nvfp4_check_scales(ctx, op, name, t, rows, cols, writable, layout, span);
}

static void fill_source(ingot_nvfp4_source *src, const ingot_tensor *a, const ingot_tensor *b) {
  src->data[0] = a->data;
  src->stride[0] = a->stride[0];
  src->dtype = a->dtype;
  if (b != NULL) {
    src->data[1] = b->data;
    src->stride[1] = b->stride[0];
    src->interleave = 1;
    src->rows = 2 * a->shape[0];
  } else {
    src->data[1] = a->data;
    src->stride[1] = a->stride[0];
    src->interleave = 0;
    src->rows = a->shape[0];
  }
  src->cols = a->shape[1];
}

/* ---- ops ------------------------------------------------------------------------- */

ingot_status ingot_nvfp4_quantize(ingot_context_t ctx, const ingot_tensor *x,
                                  const ingot_tensor *global_scale, const ingot_tensor *values,
                                  const ingot_tensor *scales, const ingot_tensor *nonfinite_count,
                                  struct CUstream_st *stream) {
  static const char op[] = "ingot_nvfp4_quantize";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  ingot_span x_span, gs_span, v_span, s_span, c_span;
  ingot_nvfp4_packed out = {0};
  uint32_t *counter;
  if ((st = check_source(ctx, op, "x", x, 1, &x_span))) return st;
  int64_t rows = x->shape[0], cols = x->shape[1];
  if ((st = check_global_scale(ctx, op, global_scale, 0, &gs_span))) return st;
  if ((st = check_values(ctx, op, values, rows, cols, 1, &v_span))) return st;
  if ((st = check_scales(ctx, op, "scales", scales, rows, cols, 1, &out, &s_span))) return st;
  if ((st = check_counter(ctx, op, nonfinite_count, &counter, &c_span))) return st;
  static const char *const out_names[] = {"values", "scales", "nonfinite_count"};
  static const char *const in_names[] = {"x", "global_scale"};
  const ingot_span outs[] = {v_span, s_span, c_span}, ins[] = {x_span, gs_span};
  if ((st = ingot_core_check_all_disjoint(ctx, op, 3, out_names, outs, 2, in_names, ins)))
    return st;
  if (rows == 0 || cols == 0) return INGOT_STATUS_SUCCESS;
  out.values = (uint8_t *)values->data;
  out.values_stride = values->stride[0];
  ingot_nvfp4_source src;
  fill_source(&src, x, NULL);
  return ctx->ops->nvfp4_quantize(ctx, &src, (const float *)global_scale->data, &out, counter,
                                  stream);
}

ingot_status ingot_nvfp4_global_scale(ingot_context_t ctx, const ingot_tensor *x,
                                      const ingot_tensor *global_scale,
                                      struct CUstream_st *stream) {
  static const char op[] = "ingot_nvfp4_global_scale";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  ingot_span x_span, gs_span;
  if ((st = check_source(ctx, op, "x", x, 0, &x_span))) return st;
  if ((st = check_global_scale(ctx, op, global_scale, 1, &gs_span))) return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "global_scale", gs_span, "x", x_span))) return st;
  ingot_nvfp4_source src;
  fill_source(&src, x, NULL);
  if (src.rows == 0 || src.cols == 0) src.rows = src.cols = 0;
  return ctx->ops->nvfp4_global_scale(ctx, &src, (float *)global_scale->data, stream);
}

ingot_status ingot_nvfp4_dequantize(ingot_context_t ctx, const ingot_tensor *values,
                                    const ingot_tensor *scales, const ingot_tensor *global_scale,
                                    const ingot_tensor *out, struct CUstream_st *stream) {
  static const char op[] = "ingot_nvfp4_dequantize";
  static const ingot_tensor_rule out_rule = {"out", 2, OUT_DTYPES, 1};
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  ingot_span v_span, s_span, gs_span, o_span;
  ingot_nvfp4_packed in = {0};
  if ((st = ingot_core_check_tensor(ctx, op, out, &out_rule, &o_span))) return st;
  int64_t rows = out->shape[0], cols = out->shape[1];
  if (cols % 16 != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "out: shape[1] = %" PRId64 ", expected a multiple of 16 (the block "
                           "size)",
                           cols);
  if ((st = check_values(ctx, op, values, rows, cols, 0, &v_span))) return st;
  if ((st = check_scales(ctx, op, "scales", scales, rows, cols, 0, &in, &s_span))) return st;
  if ((st = check_global_scale(ctx, op, global_scale, 0, &gs_span))) return st;
  static const char *const out_names[] = {"out"};
  static const char *const in_names[] = {"values", "scales", "global_scale"};
  const ingot_span outs[] = {o_span}, ins[] = {v_span, s_span, gs_span};
  if ((st = ingot_core_check_all_disjoint(ctx, op, 1, out_names, outs, 3, in_names, ins)))
    return st;
  if (rows == 0 || cols == 0) return INGOT_STATUS_SUCCESS;
  in.values = (uint8_t *)values->data;
  in.values_stride = values->stride[0];
  ingot_nvfp4_dense dense = {out->data, out->dtype, out->stride[0]};
  return ctx->ops->nvfp4_dequantize(ctx, &in, (const float *)global_scale->data, dense, stream);
}

/* linear [rows, cols/16]; returns rows and cols = 16 * shape[1]. */
static ingot_status check_linear(struct ingot_context *ctx, const char *op,
                                 const ingot_tensor *t, int writable, ingot_span *span) {
  const ingot_tensor_rule rule = {"linear", 2, SCALE_DTYPES, writable};
  ingot_status st = ingot_core_check_tensor(ctx, op, t, &rule, span);
  if (st) return st;
  if (t->shape[1] > INT64_MAX / 16)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "linear: shape[1] = %" PRId64 " overflows cols = 16 * shape[1]",
                           t->shape[1]);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_nvfp4_swizzle_scales(ingot_context_t ctx, const ingot_tensor *linear,
                                        const ingot_tensor *swizzled,
                                        struct CUstream_st *stream) {
  static const char op[] = "ingot_nvfp4_swizzle_scales";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  ingot_span l_span, s_span;
  ingot_nvfp4_packed layout = {0};
  if ((st = check_linear(ctx, op, linear, 0, &l_span))) return st;
  int64_t rows = linear->shape[0], cols = 16 * linear->shape[1];
  if ((st = check_scales(ctx, op, "swizzled", swizzled, rows, cols, 1, &layout, &s_span)))
    return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "swizzled", s_span, "linear", l_span))) return st;
  if (layout.scale_rows == 0 || layout.scale_cols == 0) return INGOT_STATUS_SUCCESS;
  return ctx->ops->nvfp4_swizzle_scales(ctx, (const uint8_t *)linear->data, linear->stride[0],
                                        &layout, stream);
}

ingot_status ingot_nvfp4_unswizzle_scales(ingot_context_t ctx, const ingot_tensor *swizzled,
                                          const ingot_tensor *linear,
                                          struct CUstream_st *stream) {
  static const char op[] = "ingot_nvfp4_unswizzle_scales";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  ingot_span l_span, s_span;
  ingot_nvfp4_packed layout = {0};
  if ((st = check_linear(ctx, op, linear, 1, &l_span))) return st;
  int64_t rows = linear->shape[0], cols = 16 * linear->shape[1];
  if ((st = check_scales(ctx, op, "swizzled", swizzled, rows, cols, 0, &layout, &s_span)))
    return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "linear", l_span, "swizzled", s_span))) return st;
  if (rows == 0 || cols == 0) return INGOT_STATUS_SUCCESS;
  return ctx->ops->nvfp4_unswizzle_scales(ctx, &layout, (uint8_t *)linear->data,
                                          linear->stride[0], stream);
}

ingot_status ingot_nvfp4_quantize_gate_up(ingot_context_t ctx, const ingot_tensor *gate,
                                          const ingot_tensor *up,
                                          const ingot_tensor *global_scale, uint32_t flags,
                                          const ingot_tensor *values, const ingot_tensor *scales,
                                          const ingot_tensor *nonfinite_count,
                                          struct CUstream_st *stream) {
  static const char op[] = "ingot_nvfp4_quantize_gate_up";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  if (flags & ~(uint32_t)INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "flags: 0x%x has unknown bits 0x%x", (unsigned)flags,
                           (unsigned)(flags & ~(uint32_t)INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE));
  int compute_gs = (flags & INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE) != 0;
  ingot_span g_span, u_span, gs_span, v_span, s_span, c_span;
  ingot_nvfp4_packed out = {0};
  uint32_t *counter;
  if ((st = check_source(ctx, op, "gate", gate, 1, &g_span))) return st;
  if ((st = check_source(ctx, op, "up", up, 1, &u_span))) return st;
  if ((st = ingot_core_check_dim(ctx, op, "up", up, 0, gate->shape[0], "gate.shape[0] = H")))
    return st;
  if ((st = ingot_core_check_dim(ctx, op, "up", up, 1, gate->shape[1], "gate.shape[1] = K")))
    return st;
  if (up->dtype != gate->dtype)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "up: dtype %s differs from gate dtype %s", ingot_dtype_name(up->dtype),
                           ingot_dtype_name(gate->dtype));
  int64_t rows, cols = gate->shape[1];
  if ((st = ingot_core_mul(ctx, op, "gate: 2 * H", 2, gate->shape[0], &rows))) return st;
  if ((st = check_global_scale(ctx, op, global_scale, compute_gs, &gs_span))) return st;
  if ((st = check_values(ctx, op, values, rows, cols, 1, &v_span))) return st;
  if ((st = check_scales(ctx, op, "scales", scales, rows, cols, 1, &out, &s_span))) return st;
  if ((st = check_counter(ctx, op, nonfinite_count, &counter, &c_span))) return st;
  if (compute_gs) {
    static const char *const out_names[] = {"global_scale", "values", "scales", "nonfinite_count"};
    static const char *const in_names[] = {"gate", "up"};
    const ingot_span outs[] = {gs_span, v_span, s_span, c_span}, ins[] = {g_span, u_span};
    if ((st = ingot_core_check_all_disjoint(ctx, op, 4, out_names, outs, 2, in_names, ins)))
      return st;
  } else {
    static const char *const out_names[] = {"values", "scales", "nonfinite_count"};
    static const char *const in_names[] = {"gate", "up", "global_scale"};
    const ingot_span outs[] = {v_span, s_span, c_span}, ins[] = {g_span, u_span, gs_span};
    if ((st = ingot_core_check_all_disjoint(ctx, op, 3, out_names, outs, 3, in_names, ins)))
      return st;
  }
  ingot_nvfp4_source src;
  fill_source(&src, gate, up);
  if (compute_gs) {
    ingot_nvfp4_source amax_src = src;
    if (rows == 0 || cols == 0) amax_src.rows = amax_src.cols = 0;
    if ((st = ctx->ops->nvfp4_global_scale(ctx, &amax_src, (float *)global_scale->data, stream)))
      return st;
  }
  if (rows == 0 || cols == 0) return INGOT_STATUS_SUCCESS;
  out.values = (uint8_t *)values->data;
  out.values_stride = values->stride[0];
  return ctx->ops->nvfp4_quantize(ctx, &src, (const float *)global_scale->data, &out, counter,
                                  stream);
}
