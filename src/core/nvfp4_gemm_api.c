/*
 * NVFP4 GEMM, fused gate/up + GeGLU + re-quantize, and the whole gated MLP:
 * argument validation and dispatch (every backend). The arithmetic is stated
 * in include/ingot/ingot.h ("NVFP4 GEMM and the fused gate/up + GeGLU MLP").
 *
 * The MLP is composed here, not in a backend: geglu writes the NVFP4 h into
 * the front of the caller's workspace, then the GEMM reads it as operand A,
 * both backend calls sharing the rest of the workspace. So the MLP gives
 * exactly the bytes of the two separate calls on every backend.
 */
#include <inttypes.h>

#include "core/check.h"
#include "core/nvfp4_check.h"

#define OUT_DTYPES (INGOT_DTYPE_BIT(INGOT_DTYPE_BF16) | INGOT_DTYPE_BIT(INGOT_DTYPE_F32))

/* The argument names of one NVFP4 matrix, for error texts. */
typedef struct matrix_names {
  const char *self, *values, *scales, *global_scale;
} matrix_names;

static const matrix_names kA = {"a", "a.values", "a.scales", "a.global_scale"};
static const matrix_names kB = {"b", "b.values", "b.scales", "b.global_scale"};
static const matrix_names kX = {"x", "x.values", "x.scales", "x.global_scale"};
static const matrix_names kW = {"w_gate_up", "w_gate_up.values", "w_gate_up.scales",
                                "w_gate_up.global_scale"};
static const matrix_names kH = {"h", "h.values", "h.scales", "h.global_scale"};
static const matrix_names kDown = {"w_down", "w_down.values", "w_down.scales",
                                   "w_down.global_scale"};

/* ---- shapes ----------------------------------------------------------------------- */

/* A positive multiple of `multiple`, else "<what> = v, expected ...". */
static ingot_status check_multiple(struct ingot_context *ctx, const char *op, const char *what,
                                   int64_t v, int64_t multiple, const char *why) {
  if (v <= 0 || v % multiple != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s = %" PRId64 ", expected a positive multiple of %" PRId64 "%s", what,
                           v, multiple, why);
  return INGOT_STATUS_SUCCESS;
}

static ingot_status check_m(struct ingot_context *ctx, const char *op, const char *what,
                            int64_t m) {
  if (m < 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "%s = %" PRId64 " < 0", what,
                           m);
  return INGOT_STATUS_SUCCESS;
}

/* The [rows, cols] an NVFP4 matrix's values tensor describes (checked as a
 * U8 matrix first). */
static ingot_status matrix_shape(struct ingot_context *ctx, const char *op,
                                 const matrix_names *nm, const ingot_nvfp4_matrix *mat,
                                 int writable, int64_t *rows, int64_t *cols) {
  if (mat == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "%s: NULL", nm->self);
  const ingot_tensor_rule rule = {nm->values, 2, INGOT_DTYPE_BIT(INGOT_DTYPE_U8), writable};
  ingot_status st = ingot_core_check_tensor(ctx, op, mat->values, &rule, NULL);
  if (st) return st;
  *rows = mat->values->shape[0];
  return ingot_core_mul(ctx, op, nm->values, 2, mat->values->shape[1], cols);
}

/* Every tensor of an NVFP4 [rows, cols] matrix. values and scales are
 * written when `writable`; the global scale is always read. spans: values,
 * scales, global scale. */
static ingot_status check_matrix(struct ingot_context *ctx, const char *op,
                                 const matrix_names *nm, const ingot_nvfp4_matrix *mat,
                                 int64_t rows, const char *rows_what, int64_t cols,
                                 const char *cols_what, int writable, ingot_nvfp4_operand *out,
                                 ingot_span spans[3]) {
  ingot_status st;
  if ((st = ingot_core_nvfp4_check_values(ctx, op, nm->values, mat->values, rows, rows_what, cols,
                                          cols_what, writable, &spans[0])))
    return st;
  if ((st = ingot_core_nvfp4_check_scales(ctx, op, nm->scales, mat->scales, rows, cols, writable,
                                          &out->m, &spans[1])))
    return st;
  if ((st = ingot_core_nvfp4_check_global_scale(ctx, op, nm->global_scale, mat->global_scale, 0,
                                                &spans[2])))
    return st;
  out->m.values = (uint8_t *)mat->values->data;
  out->m.values_stride = mat->values->stride[0];
  out->global_scale = (const float *)mat->global_scale->data;
  return INGOT_STATUS_SUCCESS;
}

/* A dense [m, n] F32 / BF16 output. */
static ingot_status check_dense(struct ingot_context *ctx, const char *op, const char *name,
                                const ingot_tensor *t, int64_t m, const char *m_what, int64_t n,
                                const char *n_what, ingot_nvfp4_dense *out, ingot_span *span) {
  const ingot_tensor_rule rule = {name, 2, OUT_DTYPES, 1};
  ingot_status st = ingot_core_check_tensor(ctx, op, t, &rule, span);
  if (st) return st;
  if ((st = ingot_core_check_dim(ctx, op, name, t, 0, m, m_what))) return st;
  if ((st = ingot_core_check_dim(ctx, op, name, t, 1, n, n_what))) return st;
  out->data = t->data;
  out->dtype = t->dtype;
  out->stride = t->stride[0];
  return INGOT_STATUS_SUCCESS;
}

/* ---- sizes ------------------------------------------------------------------------- */

/* The argument and matrix names of one GEMM D [m, n] = A [m, k] x B [n, k]^T,
 * for the size errors. */
typedef struct gemm_names {
  const char *m, *n, *k; /* the arguments that give M, N, K */
  const char *a, *b, *d; /* the matrices */
} gemm_names;

static const gemm_names kGemmNames = {"m", "n", "k", "a", "b", "d"};
/* The MLP's down projection: out [m, n] = h [m, hidden] x w_down [n, hidden]^T. */
static const gemm_names kDownNames = {"m", "n", "hidden", "h", "w_down", "out"};

/* Every byte count of a GEMM of this shape fits int64 and size_t (the shape
 * rules checked): the NVFP4 operands and D (2 bytes an element at least).
 * So the backends' queries compute with sizes that fit (core/ops.h). An op
 * whose tensors passed their checks always passes this. */
static ingot_status check_gemm_sizes(struct ingot_context *ctx, const char *op,
                                     const gemm_names *nm, int64_t m, int64_t n, int64_t k) {
  ingot_status st;
  if ((st = ingot_core_nvfp4_check_extent(ctx, op, nm->a, nm->m, m, nm->k, k))) return st;
  if ((st = ingot_core_nvfp4_check_extent(ctx, op, nm->b, nm->n, n, nm->k, k))) return st;
  int64_t elements, bytes;
  if (ingot_core_size_mul(m, n, &elements) || ingot_core_size_mul(elements, 2, &bytes))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s = %" PRId64 ", %s = %" PRId64 ": %s [%s, %s] (%s * %s elements of "
                           "2 or 4 bytes) overflows int64",
                           nm->m, m, nm->n, n, nm->d, nm->m, nm->n, nm->m, nm->n);
  return INGOT_STATUS_SUCCESS;
}

/* The same for the fused GeGLU of x [m, k], w_gate_up [2 * hidden, k] and
 * h [m, hidden]. */
static ingot_status check_geglu_sizes(struct ingot_context *ctx, const char *op, int64_t m,
                                      int64_t hidden, int64_t k) {
  ingot_status st;
  int64_t two_h;
  if ((st = ingot_core_nvfp4_check_extent(ctx, op, "x", "m", m, "k", k))) return st;
  if (ingot_core_size_mul(2, hidden, &two_h))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "hidden = %" PRId64 ": w_gate_up's 2 * hidden rows overflow int64",
                           hidden);
  if ((st = ingot_core_nvfp4_check_extent(ctx, op, "w_gate_up", "2 * hidden", two_h, "k", k)))
    return st;
  return ingot_core_nvfp4_check_extent(ctx, op, "h", "m", m, "hidden", hidden);
}

/* ---- backend workspace sizes (shape rules checked; 0 for m == 0) ------------------------
 * *bytes is written only on success. */

static ingot_status gemm_need(struct ingot_context *ctx, const char *op, const gemm_names *nm,
                              int64_t m, int64_t n, int64_t k, size_t *bytes) {
  size_t need = 0;
  ingot_status st = check_gemm_sizes(ctx, op, nm, m, n, k);
  if (st) return st;
  if (m > 0 && (st = ctx->ops->nvfp4_gemm_workspace_size(ctx, m, n, k, &need))) return st;
  *bytes = need;
  return INGOT_STATUS_SUCCESS;
}

static ingot_status geglu_need(struct ingot_context *ctx, const char *op, int64_t m,
                               int64_t hidden, int64_t k, size_t *bytes) {
  size_t need = 0;
  ingot_status st = check_geglu_sizes(ctx, op, m, hidden, k);
  if (st) return st;
  if (m > 0 && (st = ctx->ops->nvfp4_geglu_workspace_size(ctx, m, hidden, k, &need))) return st;
  *bytes = need;
  return INGOT_STATUS_SUCCESS;
}

/* The MLP's workspace: h values [m, hidden/2] at 0, h's swizzled scales at
 * *scales_at, the scratch of the two backend calls at *rest_at (each
 * 16-byte aligned). m and hidden passed check_geglu_sizes. */
static ingot_status mlp_layout(struct ingot_context *ctx, const char *op, int64_t m,
                               int64_t hidden, size_t *scales_at, size_t *rest_at) {
  int64_t values_bytes, sr, scale_bytes, scales_off, rest;
  int64_t sc = (hidden / 16 + 3) / 4 * 4;
  if (ingot_core_size_mul(m, hidden / 2, &values_bytes) ||
      ingot_core_size_round_up(m, 128, &sr) || ingot_core_size_mul(sr, sc, &scale_bytes) ||
      ingot_core_size_round_up(values_bytes, 16, &scales_off) ||
      ingot_core_size_add(scales_off, scale_bytes, &rest) ||
      ingot_core_size_round_up(rest, 16, &rest))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "m = %" PRId64 ", hidden = %" PRId64
                           ": the h [m, hidden] buffer in the workspace overflows int64",
                           m, hidden);
  *scales_at = (size_t)scales_off;
  *rest_at = (size_t)rest;
  return INGOT_STATUS_SUCCESS;
}

/* The MLP's layout and workspace size; every output written only on success. */
static ingot_status mlp_need(struct ingot_context *ctx, const char *op, int64_t m, int64_t k,
                             int64_t hidden, int64_t n, size_t *scales_at, size_t *rest_at,
                             size_t *bytes) {
  size_t g = 0, d = 0, s_at = 0, r_at = 0;
  ingot_status st;
  if ((st = check_geglu_sizes(ctx, op, m, hidden, k))) return st;
  if ((st = check_gemm_sizes(ctx, op, &kDownNames, m, n, hidden))) return st;
  if ((st = mlp_layout(ctx, op, m, hidden, &s_at, &r_at))) return st;
  if ((st = geglu_need(ctx, op, m, hidden, k, &g))) return st;
  if ((st = gemm_need(ctx, op, &kDownNames, m, n, hidden, &d))) return st;
  size_t scratch = g > d ? g : d;
  if (m > 0 && scratch > SIZE_MAX - r_at)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "m = %" PRId64 ", hidden = %" PRId64
                           ": the workspace size overflows size_t",
                           m, hidden);
  *scales_at = s_at;
  *rest_at = r_at;
  *bytes = m == 0 ? 0 : r_at + scratch;
  return INGOT_STATUS_SUCCESS;
}

/* ---- size queries ------------------------------------------------------------------- */

ingot_status ingot_nvfp4_gemm_workspace_size(ingot_context_t ctx, int64_t m, int64_t n, int64_t k,
                                             size_t *bytes) {
  static const char op[] = "ingot_nvfp4_gemm_workspace_size";
  ingot_status st = ingot_core_begin(ctx, op, NULL);
  if (st) return st;
  if (bytes == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "bytes: NULL");
  if ((st = check_m(ctx, op, "m", m))) return st;
  if ((st = check_multiple(ctx, op, "n", n, 64, ""))) return st;
  if ((st = check_multiple(ctx, op, "k", k, 64, ""))) return st;
  return gemm_need(ctx, op, &kGemmNames, m, n, k, bytes);
}

ingot_status ingot_nvfp4_geglu_workspace_size(ingot_context_t ctx, int64_t m, int64_t hidden,
                                              int64_t k, size_t *bytes) {
  static const char op[] = "ingot_nvfp4_geglu_workspace_size";
  ingot_status st = ingot_core_begin(ctx, op, NULL);
  if (st) return st;
  if (bytes == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "bytes: NULL");
  if ((st = check_m(ctx, op, "m", m))) return st;
  if ((st = check_multiple(ctx, op, "hidden", hidden, 32, " (2 * hidden % 64 == 0)"))) return st;
  if ((st = check_multiple(ctx, op, "k", k, 64, ""))) return st;
  return geglu_need(ctx, op, m, hidden, k, bytes);
}

ingot_status ingot_nvfp4_mlp_workspace_size(ingot_context_t ctx, int64_t m, int64_t k,
                                            int64_t hidden, int64_t n, size_t *bytes) {
  static const char op[] = "ingot_nvfp4_mlp_workspace_size";
  ingot_status st = ingot_core_begin(ctx, op, NULL);
  if (st) return st;
  if (bytes == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "bytes: NULL");
  if ((st = check_m(ctx, op, "m", m))) return st;
  if ((st = check_multiple(ctx, op, "k", k, 64, ""))) return st;
  if ((st = check_multiple(ctx, op, "hidden", hidden, 64, " (h is the down GEMM's K)")))
    return st;
  if ((st = check_multiple(ctx, op, "n", n, 64, ""))) return st;
  size_t scales_at, rest_at;
  return mlp_need(ctx, op, m, k, hidden, n, &scales_at, &rest_at, bytes);
}

/* ---- ops ---------------------------------------------------------------------------- */

ingot_status ingot_nvfp4_gemm(ingot_context_t ctx, const ingot_nvfp4_matrix *a,
                              const ingot_nvfp4_matrix *b, const ingot_tensor *d,
                              void *workspace, size_t workspace_bytes,
                              struct CUstream_st *stream) {
  static const char op[] = "ingot_nvfp4_gemm";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  int64_t m = 0, k = 0, n = 0, kb = 0;
  ingot_nvfp4_operand oa = {{0}, 0}, ob = {{0}, 0};
  ingot_nvfp4_dense dd = {0};
  ingot_span in[6], out[2];
  if ((st = matrix_shape(ctx, op, &kA, a, 0, &m, &k))) return st;
  if ((st = check_multiple(ctx, op, "a.values: K = 2 * shape[1]", k, 64, ""))) return st;
  if ((st = matrix_shape(ctx, op, &kB, b, 0, &n, &kb))) return st;
  if ((st = check_multiple(ctx, op, "b.values: N = shape[0]", n, 64, ""))) return st;
  if ((st = check_matrix(ctx, op, &kA, a, m, "M", k, "K / 2", 0, &oa, &in[0]))) return st;
  if ((st = check_matrix(ctx, op, &kB, b, n, "N", k, "a.values.shape[1] = K / 2", 0, &ob,
                         &in[3])))
    return st;
  if ((st = check_dense(ctx, op, "d", d, m, "M (a rows)", n, "N (b rows)", &dd, &out[0])))
    return st;
  size_t need;
  if ((st = gemm_need(ctx, op, &kGemmNames, m, n, k, &need))) return st;
  if ((st = ingot_core_check_workspace(ctx, op, need, workspace, workspace_bytes,
                                       "ingot_nvfp4_gemm_workspace_size", &out[1])))
    return st;
  static const char *const out_names[] = {"d", "workspace"};
  static const char *const in_names[] = {"a.values", "a.scales", "a.global_scale",
                                         "b.values", "b.scales", "b.global_scale"};
  if ((st = ingot_core_check_all_disjoint(ctx, op, 2, out_names, out, 6, in_names, in)))
    return st;
  if (m == 0) return INGOT_STATUS_SUCCESS;
  return ctx->ops->nvfp4_gemm(ctx, &oa, &ob, dd, workspace, workspace_bytes, stream);
}

ingot_status ingot_nvfp4_geglu(ingot_context_t ctx, const ingot_nvfp4_matrix *x,
                               const ingot_nvfp4_matrix *w_gate_up, const ingot_nvfp4_matrix *h,
                               void *workspace, size_t workspace_bytes,
                               struct CUstream_st *stream) {
  static const char op[] = "ingot_nvfp4_geglu";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  int64_t m = 0, k = 0, two_h = 0, kw = 0;
  ingot_nvfp4_operand ox = {{0}, 0}, ow = {{0}, 0}, oh = {{0}, 0};
  ingot_span in[7], out[3];
  if ((st = matrix_shape(ctx, op, &kX, x, 0, &m, &k))) return st;
  if ((st = check_multiple(ctx, op, "x.values: K = 2 * shape[1]", k, 64, ""))) return st;
  if ((st = matrix_shape(ctx, op, &kW, w_gate_up, 0, &two_h, &kw))) return st;
  if ((st = check_multiple(ctx, op, "w_gate_up.values: 2H = shape[0]", two_h, 64, ""))) return st;
  int64_t hidden = two_h / 2;
  if ((st = check_matrix(ctx, op, &kX, x, m, "M", k, "K / 2", 0, &ox, &in[0]))) return st;
  if ((st = check_matrix(ctx, op, &kW, w_gate_up, two_h, "2H", k, "x.values.shape[1] = K / 2", 0,
                         &ow, &in[3])))
    return st;
  if (h == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "h: NULL");
  if ((st = check_matrix(ctx, op, &kH, h, m, "M (x rows)", hidden,
                         "H / 2 (w_gate_up rows / 4)", 1, &oh, out)))
    return st;
  in[6] = out[2]; /* h.global_scale is an input */
  size_t need;
  if ((st = geglu_need(ctx, op, m, hidden, k, &need))) return st;
  if ((st = ingot_core_check_workspace(ctx, op, need, workspace, workspace_bytes,
                                       "ingot_nvfp4_geglu_workspace_size", &out[2])))
    return st;
  static const char *const out_names[] = {"h.values", "h.scales", "workspace"};
  static const char *const in_names[] = {"x.values",         "x.scales",
                                         "x.global_scale",   "w_gate_up.values",
                                         "w_gate_up.scales", "w_gate_up.global_scale",
                                         "h.global_scale"};
  if ((st = ingot_core_check_all_disjoint(ctx, op, 3, out_names, out, 7, in_names, in)))
    return st;
  if (m == 0) return INGOT_STATUS_SUCCESS;
  return ctx->ops->nvfp4_geglu(ctx, &ox, &ow, &oh.m, oh.global_scale, workspace, workspace_bytes,
                               stream);
}

ingot_status ingot_nvfp4_mlp(ingot_context_t ctx, const ingot_nvfp4_matrix *x,
                             const ingot_nvfp4_matrix *w_gate_up,
                             const ingot_tensor *h_global_scale,
                             const ingot_nvfp4_matrix *w_down, const ingot_tensor *out,
                             void *workspace, size_t workspace_bytes,
                             struct CUstream_st *stream) {
  static const char op[] = "ingot_nvfp4_mlp";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  int64_t m = 0, k = 0, two_h = 0, kw = 0, n = 0, hd = 0;
  ingot_nvfp4_operand ox = {{0}, 0}, ow = {{0}, 0}, od = {{0}, 0};
  ingot_nvfp4_dense dd = {0};
  ingot_span in[10], outs[2];
  if ((st = matrix_shape(ctx, op, &kX, x, 0, &m, &k))) return st;
  if ((st = check_multiple(ctx, op, "x.values: K = 2 * shape[1]", k, 64, ""))) return st;
  if ((st = matrix_shape(ctx, op, &kW, w_gate_up, 0, &two_h, &kw))) return st;
  if ((st = check_multiple(ctx, op, "w_gate_up.values: 2H = shape[0]", two_h, 128,
                           " (H % 64 == 0: h is the down GEMM's K)")))
    return st;
  int64_t hidden = two_h / 2;
  if ((st = matrix_shape(ctx, op, &kDown, w_down, 0, &n, &hd))) return st;
  if ((st = check_multiple(ctx, op, "w_down.values: N = shape[0]", n, 64, ""))) return st;
  if ((st = check_matrix(ctx, op, &kX, x, m, "M", k, "K / 2", 0, &ox, &in[0]))) return st;
  if ((st = check_matrix(ctx, op, &kW, w_gate_up, two_h, "2H", k, "x.values.shape[1] = K / 2", 0,
                         &ow, &in[3])))
    return st;
  if ((st = ingot_core_nvfp4_check_global_scale(ctx, op, "h_global_scale", h_global_scale, 0,
                                                &in[6])))
    return st;
  if ((st = check_matrix(ctx, op, &kDown, w_down, n, "N", hidden, "H / 2 (w_gate_up rows / 4)", 0,
                         &od, &in[7])))
    return st;
  if ((st = check_dense(ctx, op, "out", out, m, "M (x rows)", n, "N (w_down rows)", &dd,
                        &outs[0])))
    return st;
  size_t scales_at, rest_at, need;
  if ((st = mlp_need(ctx, op, m, k, hidden, n, &scales_at, &rest_at, &need))) return st;
  if ((st = ingot_core_check_workspace(ctx, op, need, workspace, workspace_bytes,
                                       "ingot_nvfp4_mlp_workspace_size", &outs[1])))
    return st;
  static const char *const out_names[] = {"out", "workspace"};
  static const char *const in_names[] = {
      "x.values",       "x.scales",      "x.global_scale", "w_gate_up.values",
      "w_gate_up.scales", "w_gate_up.global_scale", "h_global_scale", "w_down.values",
      "w_down.scales",  "w_down.global_scale"};
  if ((st = ingot_core_check_all_disjoint(ctx, op, 2, out_names, outs, 10, in_names, in)))
    return st;
  if (m == 0) return INGOT_STATUS_SUCCESS;

  /* h [M, H] NVFP4 in the front of the workspace; the rest is scratch. */
  uint8_t *ws = (uint8_t *)workspace;
  ingot_nvfp4_operand oh = {{0}, 0};
  oh.m.values = ws;
  oh.m.values_stride = hidden / 2;
  oh.m.scales = ws + scales_at;
  oh.m.rows = m;
  oh.m.cols = hidden;
  oh.m.scale_rows = (m + 127) / 128 * 128;
  oh.m.scale_cols = (hidden / 16 + 3) / 4 * 4;
  oh.global_scale = (const float *)h_global_scale->data;
  void *scratch = ws + rest_at;
  size_t scratch_bytes = workspace_bytes - rest_at;
  if ((st = ctx->ops->nvfp4_geglu(ctx, &ox, &ow, &oh.m, oh.global_scale, scratch, scratch_bytes,
                                  stream)))
    return st;
  return ctx->ops->nvfp4_gemm(ctx, &oh, &od, dd, scratch, scratch_bytes, stream);
}
