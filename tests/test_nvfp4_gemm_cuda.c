/*
 * NVFP4 GEMM and fused gate/up + GeGLU + re-quantize on CUDA against the CPU
 * reference backend (which is exact: the correctly rounded dot product).
 *
 *   gelu_bits / div_bits  the GeGLU epilogue's branch-free gelu_tanh and
 *                  fast-path division (the test kernels of
 *                  tests/cuda/nvfp4_epilogue_kernels.cu) bit for bit against the CPU's
 *                  ingot_gelu_tanh and IEEE division, 2^22 inputs each.
 *   gemm_grid      M in {1, 12, 17, 40, 128, 180, 256, 300, 440, 784, 968} (every
 *                  Hopper tile width; lock-step up to 64, warp-specialised beyond) x K in {64, 2048, 16384} x N in {64, 2048, 32768},
 *                  F32 out; relative L2 < 1e-5 over
 *                  the whole output where M*N*K is small, else over a sample
 *                  (a few rows incl. the first and last, 64 columns incl. the
 *                  last) computed by the CPU backend on sub-matrices built
 *                  from those rows. The whole GPU output was poisoned first
 *                  and must be fully written.
 *   gemm_layouts   BF16 and F32 out with a padded row stride (padding must
 *                  stay untouched), values with 8-byte aligned rows (the
 *                  plain-load path), split-K shapes.
 *   geglu          fused GeGLU vs the CPU: fraction of identical codes
 *                  (>= 99.9%), every other code one E2M1 step away (in
 *                  blocks whose scales agree), scale bytes identical, every
 *                  scale byte written (padding rows / columns 0), value bytes
 *                  of rows >= M and of the row-stride padding untouched;
 *                  pi0.5's [968, 2048] x [32768, 2048] sampled by rows.
 *   mlp            geglu -> down GEMM vs the CPU MLP: relative L2 < 1e-3;
 *                  ingot_nvfp4_mlp equal to the two calls.
 *   graph_replay   GEMM (split-K) + GeGLU captured in a CUDA graph, replayed
 *                  with new inputs: bytes equal to eager calls.
 * Measured fractions are printed. INGOT_TEST_SMALL=1 runs small shapes only
 * (for compute-sanitizer). Skipped (exit 77) without a GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/numeric.h"
#include "test_util.h"

#ifndef INGOT_WITH_CUDA
static int skip_no_cuda(void) {
  printf("SKIPPED test_nvfp4_gemm_cuda: built without CUDA\n");
  return TEST_SKIP_CODE;
}
int main(void) {
  test_init("test_nvfp4_gemm_cuda");
  test_run("nvfp4_gemm_cuda", skip_no_cuda);
  return test_finish();
}
#else
#include <cuda_runtime_api.h>

#include "test_cuda.h"

#include "common/nvfp4_ref.h"
#include "core/internal.h"

/* Test kernels (tests/cuda/nvfp4_epilogue_kernels.cu): the GeGLU epilogue's gelu_tanh
 * and its fast division, element by element. */
ingot_status ingot_test_epilogue_gelu(struct ingot_context *ctx, const float *g, float *out,
                                      int64_t n, struct CUstream_st *stream);
ingot_status ingot_test_epilogue_div(struct ingot_context *ctx, const float *n, const float *d,
                                     float *out, int64_t count, struct CUstream_st *stream);

static ingot_context_t cpu, gpu;
static cudaStream_t stream;
static int small_only;

/* ---- NVFP4 matrices on both sides ------------------------------------------------ */

typedef struct mat {
  int64_t rows, cols, vstride; /* vstride: bytes between value rows */
  int64_t sr, sc;              /* swizzled scale buffer shape */
  uint8_t *v, *s;              /* host */
  float gs;
  uint8_t *dv, *ds; /* device (NULL when host only) */
  float *dgs;
  int64_t dv_offset; /* device values start this many bytes into the allocation */
} mat;

static void rand_bytes(uint8_t *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t r = test_rand();
    memcpy(p + i, &r, 8);
  }
  for (; i < n; i++) p[i] = (uint8_t)test_rand();
}

/* Random E4M3 scale byte in [lo, hi] (no NaN). */
static uint8_t rand_sf(int lo, int hi) { return (uint8_t)test_rand_range(lo, hi); }

/* A random [rows, cols] NVFP4 matrix; scales in [sf_lo, sf_hi]; padding scale
 * bytes 0. vpad: extra bytes per value row; voff: device start offset. */
static void mat_make(mat *m, int64_t rows, int64_t cols, int sf_lo, int sf_hi, float gs,
                     int64_t vpad, int64_t voff) {
  memset(m, 0, sizeof *m);
  m->rows = rows, m->cols = cols, m->vstride = cols / 2 + vpad, m->gs = gs;
  ingot_nvfp4_scale_shape(rows, cols, &m->sr, &m->sc);
  m->v = malloc((size_t)(rows * m->vstride));
  m->s = calloc((size_t)(m->sr * m->sc), 1);
  rand_bytes(m->v, (size_t)(rows * m->vstride));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < cols / 16; k++)
      m->s[ingot_nvfp4_scale_offset(r, k, cols)] = rand_sf(sf_lo, sf_hi);
  m->dv_offset = voff;
}

static int mat_upload(mat *m) {
  size_t vb = (size_t)(m->rows * m->vstride), sb = (size_t)(m->sr * m->sc);
  uint8_t *dv = NULL;
  CUDA_OK(cudaMalloc((void **)&dv, vb + (size_t)m->dv_offset + 16));
  m->dv = dv + m->dv_offset;
  CUDA_OK(cudaMalloc((void **)&m->ds, sb));
  CUDA_OK(cudaMalloc((void **)&m->dgs, 4));
  CUDA_OK(test_upload(m->dv, m->v, vb));
  CUDA_OK(test_upload(m->ds, m->s, sb));
  CUDA_OK(test_upload(m->dgs, &m->gs, 4));
  return 0;
}

static void mat_free(mat *m) {
  free(m->v), free(m->s);
  if (m->dv) cudaFree(m->dv - m->dv_offset);
  if (m->ds) cudaFree(m->ds);
  if (m->dgs) cudaFree(m->dgs);
  memset(m, 0, sizeof *m);
}

/* Rows idx[0..n-1] of m as a new host matrix (own swizzled scales). */
static void mat_rows(mat *out, const mat *m, const int64_t *idx, int64_t n) {
  memset(out, 0, sizeof *out);
  out->rows = n, out->cols = m->cols, out->vstride = m->cols / 2, out->gs = m->gs;
  ingot_nvfp4_scale_shape(n, m->cols, &out->sr, &out->sc);
  out->v = malloc((size_t)(n * out->vstride));
  out->s = calloc((size_t)(out->sr * out->sc), 1);
  for (int64_t i = 0; i < n; i++) {
    memcpy(out->v + i * out->vstride, m->v + idx[i] * m->vstride, (size_t)(m->cols / 2));
    for (int64_t k = 0; k < m->cols / 16; k++)
      out->s[ingot_nvfp4_scale_offset(i, k, m->cols)] =
          m->s[ingot_nvfp4_scale_offset(idx[i], k, m->cols)];
  }
}

typedef struct tens3 {
  ingot_tensor v, s, g;
  ingot_nvfp4_matrix m;
} tens3;

static void tens_host(tens3 *t, mat *m) {
  t->v = ingot_tensor_2d(m->v, INGOT_DTYPE_U8, m->rows, m->cols / 2, m->vstride);
  t->s = ingot_tensor_1d(m->s, INGOT_DTYPE_U8, m->sr * m->sc);
  t->g = ingot_tensor_1d(&m->gs, INGOT_DTYPE_F32, 1);
  t->m.values = &t->v, t->m.scales = &t->s, t->m.global_scale = &t->g;
}

static void tens_dev(tens3 *t, mat *m) {
  t->v = ingot_tensor_2d(m->dv, INGOT_DTYPE_U8, m->rows, m->cols / 2, m->vstride);
  t->s = ingot_tensor_1d(m->ds, INGOT_DTYPE_U8, m->sr * m->sc);
  t->g = ingot_tensor_1d(m->dgs, INGOT_DTYPE_F32, 1);
  t->m.values = &t->v, t->m.scales = &t->s, t->m.global_scale = &t->g;
}

/* ---- CPU oracle ------------------------------------------------------------------- */

/* CPU d [a.rows, b.rows] F32 = a x b^T. */
static int cpu_gemm(mat *a, mat *b, float *d) {
  tens3 ta, tb;
  tens_host(&ta, a), tens_host(&tb, b);
  ingot_tensor td = ingot_tensor_2d(d, INGOT_DTYPE_F32, a->rows, b->rows, b->rows);
  size_t wb = 0;
  EXPECT_OK(cpu, ingot_nvfp4_gemm_workspace_size(cpu, a->rows, b->rows, a->cols, &wb));
  void *ws = wb ? malloc(wb) : NULL;
  ingot_status st = ingot_nvfp4_gemm(cpu, &ta.m, &tb.m, &td, ws, wb, NULL);
  free(ws);
  EXPECT_OK(cpu, st);
  return st != INGOT_STATUS_SUCCESS;
}

/* GPU d = a x b^T (out dtype, row stride ds elements, into dd). */
static ingot_status gpu_gemm(mat *a, mat *b, void *dd, ingot_dtype dtype, int64_t dstride,
                             void *ws, size_t wb) {
  tens3 ta, tb;
  tens_dev(&ta, a), tens_dev(&tb, b);
  ingot_tensor td = ingot_tensor_2d(dd, dtype, a->rows, b->rows, dstride);
  return ingot_nvfp4_gemm(gpu, &ta.m, &tb.m, &td, ws, wb, stream);
}

static int64_t *sample_idx(int64_t n, int64_t count) {
  int64_t *idx = malloc(sizeof *idx * (size_t)count);
  for (int64_t i = 0; i < count; i++)
    idx[i] = i == 0 ? 0 : i == 1 ? n - 1 : test_rand_range(0, n - 1);
  return idx;
}

/* global scales that keep alpha * acc around 1 */
static void pick_scales(int64_t k, float *gsa, float *gsb) {
  *gsa = 4.0f;
  *gsb = (float)(sqrt((double)k) * 10.0 / 1.5 / 4.0) * (float)(1.0 + 0.1 * test_rand_unit());
}

/* ---- GEMM grid --------------------------------------------------------------------- */

static double worst_rel_l2 = 0.0;

static int check_gemm_shape(mat *a, mat *b, const float *got_full, const char *what) {
  const int64_t m = a->rows, n = b->rows, k = a->cols;
  double num = 0, den = 0;
  int64_t unwritten = 0;
  const uint32_t *gu = (const uint32_t *)got_full;
  for (int64_t i = 0; i < m * n; i++) unwritten += gu[i] == 0xffffffffu;
  EXPECT(unwritten == 0, "%s: %lld output elements not written", what, (long long)unwritten);
  if (m * n * k <= (INT64_C(1) << 27)) {
    float *want = malloc(sizeof(float) * (size_t)(m * n));
    if (cpu_gemm(a, b, want) == 0)
      for (int64_t i = 0; i < m * n; i++) {
        double e = (double)got_full[i] - (double)want[i];
        num += e * e, den += (double)want[i] * (double)want[i];
      }
    free(want);
  } else {
    const int64_t nr = m < 6 ? m : 6, nc = n < 64 ? n : 64;
    int64_t *ri = sample_idx(m, nr), *ci = sample_idx(n, nc);
    mat as, bs;
    mat_rows(&as, a, ri, nr), mat_rows(&bs, b, ci, nc);
    float *want = malloc(sizeof(float) * (size_t)(nr * nc));
    if (cpu_gemm(&as, &bs, want) == 0)
      for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++) {
          double w = want[i * nc + j], g = got_full[ri[i] * n + ci[j]];
          num += (g - w) * (g - w), den += w * w;
        }
    free(want), free(ri), free(ci);
    mat_free(&as), mat_free(&bs);
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  if (rel > worst_rel_l2) worst_rel_l2 = rel;
  EXPECT(rel < 1e-5, "%s: relative L2 %.3g >= 1e-5", what, rel);
  return 0;
}

static int test_gemm_grid(void) {
  /* M picks the Hopper path's A tile (8 ... 128 rows, then 160 to 256): every width */
  static const int64_t ms_full[] = {1, 12, 17, 40, 128, 180, 256, 300, 440, 784, 968},
                       ks_full[] = {64, 2048, 16384}, ns_full[] = {64, 2048, 32768};
  static const int64_t ms_small[] = {1, 17, 130}, ks_small[] = {64, 128}, ns_small[] = {64, 320};
  const int64_t *ms = small_only ? ms_small : ms_full, *ks = small_only ? ks_small : ks_full,
                *ns = small_only ? ns_small : ns_full;
  const int nm = small_only ? 3 : (int)(sizeof ms_full / sizeof ms_full[0]);
  const int nk = small_only ? 2 : 3, nn = 2 + !small_only;
  worst_rel_l2 = 0;
  int cases = 0;
  for (int ik = 0; ik < nk; ik++)
    for (int in = 0; in < nn; in++) {
      const int64_t k = ks[ik], n = ns[in];
      float gsa, gsb;
      pick_scales(k, &gsa, &gsb);
      mat b;
      mat_make(&b, n, k, 0x28, 0x48, gsb, 0, 0);
      if (mat_upload(&b)) return 1;
      for (int im = 0; im < nm; im++) {
        const int64_t m = ms[im];
        mat a;
        mat_make(&a, m, k, 0x28, 0x48, gsa, 0, 0);
        if (mat_upload(&a)) return 1;
        size_t wb = 0;
        EXPECT_OK(gpu, ingot_nvfp4_gemm_workspace_size(gpu, m, n, k, &wb));
        void *ws = NULL, *dd = NULL;
        if (wb) CUDA_OK(cudaMalloc(&ws, wb));
        if (wb) CUDA_OK(test_fill(ws, 0xAB, wb)); /* contents must not matter */
        size_t db = sizeof(float) * (size_t)(m * n);
        CUDA_OK(cudaMalloc(&dd, db));
        CUDA_OK(test_fill(dd, 0xff, db));
        EXPECT_OK(gpu, gpu_gemm(&a, &b, dd, INGOT_DTYPE_F32, n, ws, wb));
        CUDA_OK(cudaStreamSynchronize(stream));
        float *got = malloc(db);
        CUDA_OK(cudaMemcpy(got, dd, db, cudaMemcpyDeviceToHost));
        char what[96];
        snprintf(what, sizeof what, "gemm M=%lld N=%lld K=%lld", (long long)m, (long long)n,
                 (long long)k);
        check_gemm_shape(&a, &b, got, what);
        free(got);
        cudaFree(dd);
        if (ws) cudaFree(ws);
        mat_free(&a);
        cases++;
      }
      mat_free(&b);
    }
  printf("  gemm grid: %d shapes, worst relative L2 vs CPU %.3g (bar 1e-5)\n", cases, worst_rel_l2);
  return 0;
}

/* ---- layouts: bf16, strides, unaligned values, split-K --------------------------------- */

static int test_gemm_layouts(void) {
  struct {
    int64_t m, n, k, vpad, voff, dpad;
    ingot_dtype dt;
  } cases[] = {
      {33, 192, 256, 8, 8, 3, INGOT_DTYPE_BF16},   /* 8-byte aligned values: plain loads */
      {130, 320, 512, 0, 0, 5, INGOT_DTYPE_F32},   /* odd row stride: scalar stores */
      {5, 128, 4096, 0, 0, 8, INGOT_DTYPE_BF16},   /* split-K */
      {200, 64, 8192, 16, 16, 2, INGOT_DTYPE_F32}, /* split-K, padded rows */
      {7, 256, 128, 4, 1, 1, INGOT_DTYPE_F32},     /* values 1-byte aligned */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const int64_t m = cases[c].m, n = cases[c].n, k = cases[c].k, ds = n + cases[c].dpad;
    const ingot_dtype dt = cases[c].dt;
    const size_t es = dt == INGOT_DTYPE_BF16 ? 2 : 4;
    float gsa, gsb;
    pick_scales(k, &gsa, &gsb);
    mat a, b;
    mat_make(&a, m, k, 0x28, 0x48, gsa, cases[c].vpad, cases[c].voff);
    mat_make(&b, n, k, 0x28, 0x48, gsb, cases[c].vpad, cases[c].voff);
    if (mat_upload(&a) || mat_upload(&b)) return 1;
    size_t wb = 0;
    EXPECT_OK(gpu, ingot_nvfp4_gemm_workspace_size(gpu, m, n, k, &wb));
    void *ws = NULL, *dd = NULL;
    if (wb) CUDA_OK(cudaMalloc(&ws, wb));
    size_t db = es * (size_t)(m * ds);
    CUDA_OK(cudaMalloc(&dd, db));
    CUDA_OK(test_fill(dd, 0xff, db));
    EXPECT_OK(gpu, gpu_gemm(&a, &b, dd, dt, ds, ws, wb));
    CUDA_OK(cudaStreamSynchronize(stream));
    unsigned char *got = malloc(db);
    CUDA_OK(cudaMemcpy(got, dd, db, cudaMemcpyDeviceToHost));
    float *want = malloc(sizeof(float) * (size_t)(m * n));
    cpu_gemm(&a, &b, want);
    double num = 0, den = 0;
    int64_t bad_pad = 0, unwritten = 0;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < ds; j++) {
        const unsigned char *p = got + es * (size_t)(i * ds + j);
        int poison = es == 2 ? (p[0] == 0xff && p[1] == 0xff)
                             : (p[0] == 0xff && p[1] == 0xff && p[2] == 0xff && p[3] == 0xff);
        if (j >= n) {
          bad_pad += !poison;
          continue;
        }
        unwritten += poison;
        float g;
        if (es == 2) {
          uint16_t h;
          memcpy(&h, p, 2);
          g = ingot_bf16_to_f32(h);
        } else {
          memcpy(&g, p, 4);
        }
        double w = want[i * n + j];
        if (es == 2) w = ingot_bf16_to_f32(ingot_f32_to_bf16(want[i * n + j]));
        num += ((double)g - w) * ((double)g - w), den += w * w;
      }
    double rel = sqrt(num / den);
    EXPECT(bad_pad == 0 && unwritten == 0, "layout case %zu: %lld padding written, %lld unwritten",
           c, (long long)bad_pad, (long long)unwritten);
    EXPECT(rel < (es == 2 ? 4e-3 : 1e-5), "layout case %zu: relative L2 %.3g", c, rel);
    printf("  layout case %zu (M=%lld N=%lld K=%lld %s, workspace %zu B): rel L2 %.3g\n", c,
           (long long)m, (long long)n, (long long)k, es == 2 ? "bf16" : "f32", wb, rel);
    free(got), free(want);
    cudaFree(dd);
    if (ws) cudaFree(ws);
    mat_free(&a), mat_free(&b);
  }
  return 0;
}

/* ---- GeGLU ---------------------------------------------------------------------------------- */

/* E2M1 code -> position on the signed value line (+0 and -0 the same). */
static int e2m1_pos(unsigned code) {
  int idx = (int)(code & 7u);
  return (code & 8u) ? -idx : idx;
}

typedef struct code_stats {
  int64_t codes, same_codes, far_codes, blocks, same_scales, diff_scale_blocks;
} code_stats;

static code_stats total_stats;

/* Compares GPU h (rows gr[i] of the GPU output) with CPU h of the same rows
 * (its own layout, rows 0..n-1). */
static void compare_h(const uint8_t *gv, int64_t gstride, const uint8_t *gs_buf, int64_t g_cols,
                      const int64_t *gr, const uint8_t *cv, int64_t cstride, const uint8_t *cs,
                      int64_t n, int64_t hidden, code_stats *st) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t b = 0; b < hidden / 16; b++) {
      uint8_t sg = gs_buf[ingot_nvfp4_scale_offset(gr[i], b, g_cols)];
      uint8_t sc = cs[ingot_nvfp4_scale_offset(i, b, hidden)];
      st->blocks++;
      int same_sf = sg == sc;
      st->same_scales += same_sf;
      st->diff_scale_blocks += !same_sf;
      for (int64_t e = 0; e < 16; e++) {
        unsigned g = (gv[gr[i] * gstride + b * 8 + e / 2] >> (4 * (e & 1))) & 15u;
        unsigned c = (cv[i * cstride + b * 8 + e / 2] >> (4 * (e & 1))) & 15u;
        st->codes++;
        if (g == c || ((g & 7u) == 0 && (c & 7u) == 0)) {
          st->same_codes += g == c;
          continue;
        }
        if (same_sf && abs(e2m1_pos(g) - e2m1_pos(c)) > 1) st->far_codes++;
      }
    }
}

/* One GeGLU case: x [m, k], W [2h, k]; rows of the output compared: all
 * (sample == 0) or `sample` rows. */
static int geglu_case(int64_t m, int64_t hidden, int64_t k, int64_t sample, code_stats *st) {
  float gsa, gsb;
  pick_scales(k, &gsa, &gsb);
  mat x, w;
  mat_make(&x, m, k, 0x28, 0x48, gsa, 0, 0);
  mat_make(&w, 2 * hidden, k, 0x28, 0x48, gsb, 0, 0);
  if (mat_upload(&x) || mat_upload(&w)) return 1;
  float hgs = 2688.0f / 24.0f;
  /* GPU h: rows padded by 16 bytes, 3 extra rows, all poisoned */
  const int64_t hstride = hidden / 2 + 16, hrows = m + 3;
  int64_t sr = 0, sc = 0;
  ingot_nvfp4_scale_shape(m, hidden, &sr, &sc);
  uint8_t *dhv, *dhs;
  float *dhg;
  CUDA_OK(cudaMalloc((void **)&dhv, (size_t)(hrows * hstride)));
  CUDA_OK(cudaMalloc((void **)&dhs, (size_t)(sr * sc)));
  CUDA_OK(cudaMalloc((void **)&dhg, 4));
  CUDA_OK(test_fill(dhv, 0xA5, (size_t)(hrows * hstride)));
  CUDA_OK(test_fill(dhs, 0xA5, (size_t)(sr * sc)));
  CUDA_OK(test_upload(dhg, &hgs, 4));
  tens3 tx, tw;
  tens_dev(&tx, &x), tens_dev(&tw, &w);
  ingot_tensor thv = ingot_tensor_2d(dhv, INGOT_DTYPE_U8, m, hidden / 2, hstride);
  ingot_tensor ths = ingot_tensor_1d(dhs, INGOT_DTYPE_U8, sr * sc);
  ingot_tensor thg = ingot_tensor_1d(dhg, INGOT_DTYPE_F32, 1);
  ingot_nvfp4_matrix th = {&thv, &ths, &thg};
  size_t wb = 0;
  EXPECT_OK(gpu, ingot_nvfp4_geglu_workspace_size(gpu, m, hidden, k, &wb));
  void *ws = NULL;
  if (wb) CUDA_OK(cudaMalloc(&ws, wb));
  EXPECT_OK(gpu, ingot_nvfp4_geglu(gpu, &tx.m, &tw.m, &th, ws, wb, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  uint8_t *gv = malloc((size_t)(hrows * hstride)), *gsb_ = malloc((size_t)(sr * sc));
  CUDA_OK(cudaMemcpy(gv, dhv, (size_t)(hrows * hstride), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gsb_, dhs, (size_t)(sr * sc), cudaMemcpyDeviceToHost));
  /* untouched: row padding and rows >= m */
  int64_t touched = 0;
  for (int64_t r = 0; r < hrows; r++)
    for (int64_t c = r < m ? hidden / 2 : 0; c < hstride; c++) touched += gv[r * hstride + c] != 0xA5;
  EXPECT(touched == 0, "geglu M=%lld H=%lld: %lld bytes outside h written", (long long)m,
         (long long)hidden, (long long)touched);
  /* every scale byte written; padding 0 */
  int64_t pad_bad = 0;
  for (int64_t r = 0; r < sr; r++)
    for (int64_t b = 0; b < sc; b++)
      if (r >= m || b >= hidden / 16) pad_bad += gsb_[ingot_nvfp4_scale_offset(r, b, hidden)] != 0;
  EXPECT(pad_bad == 0, "geglu M=%lld H=%lld: %lld padding scale bytes not 0", (long long)m,
         (long long)hidden, (long long)pad_bad);
  /* CPU reference on the compared rows */
  const int64_t n = sample ? sample : m;
  int64_t *ri = sample ? sample_idx(m, n) : malloc(sizeof(int64_t) * (size_t)m);
  if (!sample)
    for (int64_t i = 0; i < m; i++) ri[i] = i;
  mat xs;
  mat_rows(&xs, &x, ri, n);
  int64_t csr = 0, csc = 0;
  ingot_nvfp4_scale_shape(n, hidden, &csr, &csc);
  uint8_t *cv = malloc((size_t)(n * hidden / 2)), *cs = malloc((size_t)(csr * csc));
  tens3 cx, cw;
  tens_host(&cx, &xs), tens_host(&cw, &w);
  ingot_tensor chv = ingot_tensor_2d(cv, INGOT_DTYPE_U8, n, hidden / 2, hidden / 2);
  ingot_tensor chs = ingot_tensor_1d(cs, INGOT_DTYPE_U8, csr * csc);
  ingot_tensor chg = ingot_tensor_1d(&hgs, INGOT_DTYPE_F32, 1);
  ingot_nvfp4_matrix ch = {&chv, &chs, &chg};
  size_t cwb = 0;
  EXPECT_OK(cpu, ingot_nvfp4_geglu_workspace_size(cpu, n, hidden, k, &cwb));
  void *cws = cwb ? malloc(cwb) : NULL;
  EXPECT_OK(cpu, ingot_nvfp4_geglu(cpu, &cx.m, &cw.m, &ch, cws, cwb, NULL));
  code_stats s = {0, 0, 0, 0, 0, 0};
  compare_h(gv, hstride, gsb_, hidden, ri, cv, hidden / 2, cs, n, hidden, &s);
  double frac = (double)s.same_codes / (double)s.codes;
  printf("  geglu M=%lld H=%lld K=%lld (%lld rows compared): codes identical %.5f%% "
         "(%lld of %lld), >1 step %lld, scale bytes identical %.5f%% (%lld blocks differ)\n",
         (long long)m, (long long)hidden, (long long)k, (long long)n, 100.0 * frac,
         (long long)s.same_codes, (long long)s.codes, (long long)s.far_codes,
         100.0 * (double)s.same_scales / (double)s.blocks, (long long)s.diff_scale_blocks);
  EXPECT(frac >= 0.999, "geglu: only %.5f of codes identical", frac);
  EXPECT(s.far_codes == 0, "geglu: %lld codes more than one E2M1 step away", (long long)s.far_codes);
  st->codes += s.codes, st->same_codes += s.same_codes, st->far_codes += s.far_codes;
  st->blocks += s.blocks, st->same_scales += s.same_scales;
  st->diff_scale_blocks += s.diff_scale_blocks;
  free(cws), free(cv), free(cs), free(ri), free(gv), free(gsb_);
  mat_free(&xs);
  if (ws) cudaFree(ws);
  cudaFree(dhv), cudaFree(dhs), cudaFree(dhg);
  mat_free(&x), mat_free(&w);
  return 0;
}

static int test_geglu(void) {
  code_stats st = {0, 0, 0, 0, 0, 0};
  int r = 0;
  r |= geglu_case(1, 32, 64, 0, &st);     /* H/16 = 2: two padding scale columns */
  r |= geglu_case(17, 96, 128, 0, &st);   /* 2H = 192: a partial N tile */
  r |= geglu_case(130, 160, 256, 0, &st); /* two row tiles, partial */
  r |= geglu_case(9, 96, 128, 0, &st);    /* 16-row tiles (Hopper), scale rows 9..127 */
  r |= geglu_case(40, 64, 192, 0, &st);   /* 64-row tiles, 3 K-tiles */
  if (!small_only) {
    r |= geglu_case(200, 1024, 2048, 0, &st);
    r |= geglu_case(968, 16384, 2048, 12, &st); /* pi0.5 shape, 12 rows compared */
    r |= geglu_case(784, 16384, 2048, 8, &st);
  }
  total_stats = st;
  printf("  geglu total: codes identical %.5f%% of %lld, scale bytes identical %.5f%% of %lld\n",
         100.0 * (double)st.same_codes / (double)st.codes, (long long)st.codes,
         100.0 * (double)st.same_scales / (double)st.blocks, (long long)st.blocks);
  return r;
}

/* ---- MLP: geglu -> down ---------------------------------------------------------------- */

static int test_mlp(void) {
  const int64_t m = small_only ? 19 : 96, k = small_only ? 128 : 2048,
                hidden = small_only ? 128 : 2048, n = small_only ? 64 : 512;
  float gsa, gsb;
  pick_scales(k, &gsa, &gsb);
  mat x, w, wd;
  mat_make(&x, m, k, 0x28, 0x48, gsa, 0, 0);
  mat_make(&w, 2 * hidden, k, 0x28, 0x48, gsb, 0, 0);
  mat_make(&wd, n, hidden, 0x28, 0x48, 7.0f, 0, 0);
  if (mat_upload(&x) || mat_upload(&w) || mat_upload(&wd)) return 1;
  float hgs = 2688.0f / 24.0f;
  int64_t sr = 0, sc = 0;
  ingot_nvfp4_scale_shape(m, hidden, &sr, &sc);
  /* GPU: two calls */
  mat h;
  memset(&h, 0, sizeof h);
  h.rows = m, h.cols = hidden, h.vstride = hidden / 2, h.sr = sr, h.sc = sc, h.gs = hgs;
  h.v = malloc((size_t)(m * hidden / 2)), h.s = malloc((size_t)(sr * sc));
  if (mat_upload(&h)) return 1;
  tens3 tx, tw, twd, th;
  tens_dev(&tx, &x), tens_dev(&tw, &w), tens_dev(&twd, &wd), tens_dev(&th, &h);
  size_t wb1 = 0, wb2 = 0, wb3 = 0;
  EXPECT_OK(gpu, ingot_nvfp4_geglu_workspace_size(gpu, m, hidden, k, &wb1));
  EXPECT_OK(gpu, ingot_nvfp4_gemm_workspace_size(gpu, m, n, hidden, &wb2));
  EXPECT_OK(gpu, ingot_nvfp4_mlp_workspace_size(gpu, m, k, hidden, n, &wb3));
  size_t wb = wb1 > wb2 ? wb1 : wb2;
  void *ws = NULL, *ws3 = NULL;
  if (wb) CUDA_OK(cudaMalloc(&ws, wb));
  if (wb3) CUDA_OK(cudaMalloc(&ws3, wb3));
  float *dout, *dout3;
  CUDA_OK(cudaMalloc((void **)&dout, sizeof(float) * (size_t)(m * n)));
  CUDA_OK(cudaMalloc((void **)&dout3, sizeof(float) * (size_t)(m * n)));
  CUDA_OK(test_fill(dout3, 0xff, sizeof(float) * (size_t)(m * n)));
  ingot_tensor tout = ingot_tensor_2d(dout, INGOT_DTYPE_F32, m, n, n);
  ingot_tensor tout3 = ingot_tensor_2d(dout3, INGOT_DTYPE_F32, m, n, n);
  EXPECT_OK(gpu, ingot_nvfp4_geglu(gpu, &tx.m, &tw.m, &th.m, ws, wb, stream));
  EXPECT_OK(gpu, ingot_nvfp4_gemm(gpu, &th.m, &twd.m, &tout, ws, wb, stream));
  ingot_status s3 = ingot_nvfp4_mlp(gpu, &tx.m, &tw.m, &th.g, &twd.m, &tout3, ws3, wb3, stream);
  EXPECT_OK(gpu, s3);
  CUDA_OK(cudaStreamSynchronize(stream));
  float *got = malloc(sizeof(float) * (size_t)(m * n)), *got3 = malloc(sizeof(float) * (size_t)(m * n));
  CUDA_OK(cudaMemcpy(got, dout, sizeof(float) * (size_t)(m * n), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(got3, dout3, sizeof(float) * (size_t)(m * n), cudaMemcpyDeviceToHost));
  if (s3 == INGOT_STATUS_SUCCESS)
    EXPECT(memcmp(got, got3, sizeof(float) * (size_t)(m * n)) == 0,
           "ingot_nvfp4_mlp != geglu + gemm");
  /* CPU MLP */
  tens3 cx, cw, cwd;
  tens_host(&cx, &x), tens_host(&cw, &w), tens_host(&cwd, &wd);
  float *want = malloc(sizeof(float) * (size_t)(m * n));
  ingot_tensor cout = ingot_tensor_2d(want, INGOT_DTYPE_F32, m, n, n);
  ingot_tensor chg = ingot_tensor_1d(&hgs, INGOT_DTYPE_F32, 1);
  size_t cwb = 0;
  EXPECT_OK(cpu, ingot_nvfp4_mlp_workspace_size(cpu, m, k, hidden, n, &cwb));
  void *cws = cwb ? malloc(cwb) : NULL;
  EXPECT_OK(cpu, ingot_nvfp4_mlp(cpu, &cx.m, &cw.m, &chg, &cwd.m, &cout, cws, cwb, NULL));
  double num = 0, den = 0;
  for (int64_t i = 0; i < m * n; i++) {
    double e = (double)got[i] - (double)want[i];
    num += e * e, den += (double)want[i] * (double)want[i];
  }
  double rel = sqrt(num / den);
  printf("  mlp M=%lld K=%lld H=%lld N=%lld: relative L2 vs CPU MLP %.3g (bar 1e-3)\n",
         (long long)m, (long long)k, (long long)hidden, (long long)n, rel);
  EXPECT(rel < 1e-3, "mlp: relative L2 %.3g", rel);
  free(got), free(got3), free(want), free(cws);
  if (ws) cudaFree(ws);
  if (ws3) cudaFree(ws3);
  cudaFree(dout), cudaFree(dout3);
  mat_free(&x), mat_free(&w), mat_free(&wd), mat_free(&h);
  return 0;
}

/* ---- CUDA graph ------------------------------------------------------------------------------ */

/* M = 17 runs the lock-step kernel, M = 100 the warp-specialised one; both
 * split K. */
static int graph_replay_case(int64_t m) {
  const int64_t n = 2048, k = small_only ? 1024 : 16384; /* split-K */
  const int64_t hidden = 1024;
  float gsa, gsb;
  pick_scales(k, &gsa, &gsb);
  mat a, b, w;
  mat_make(&a, m, k, 0x28, 0x48, gsa, 0, 0);
  mat_make(&b, n, k, 0x28, 0x48, gsb, 0, 0);
  mat_make(&w, 2 * hidden, k, 0x28, 0x48, gsb, 0, 0);
  if (mat_upload(&a) || mat_upload(&b) || mat_upload(&w)) return 1;
  mat h;
  memset(&h, 0, sizeof h);
  h.rows = m, h.cols = hidden, h.vstride = hidden / 2, h.gs = 2688.0f / 24.0f;
  ingot_nvfp4_scale_shape(m, hidden, &h.sr, &h.sc);
  h.v = malloc((size_t)(m * hidden / 2)), h.s = malloc((size_t)(h.sr * h.sc));
  if (mat_upload(&h)) return 1;
  size_t wb1 = 0, wb2 = 0;
  EXPECT_OK(gpu, ingot_nvfp4_gemm_workspace_size(gpu, m, n, k, &wb1));
  EXPECT_OK(gpu, ingot_nvfp4_geglu_workspace_size(gpu, m, hidden, k, &wb2));
  void *ws1 = NULL, *ws2 = NULL;
  if (wb1) CUDA_OK(cudaMalloc(&ws1, wb1));
  if (wb2) CUDA_OK(cudaMalloc(&ws2, wb2));
  EXPECT(wb1 > 0, "expected a split-K workspace for M=%lld N=2048 K=%lld", (long long)m,
         (long long)k);
  float *dd;
  const size_t db = sizeof(float) * (size_t)(m * n), hv = (size_t)(m * hidden / 2),
               hs = (size_t)(h.sr * h.sc);
  CUDA_OK(cudaMalloc((void **)&dd, db));
  tens3 ta, tb, tw, th;
  tens_dev(&ta, &a), tens_dev(&tb, &b), tens_dev(&tw, &w), tens_dev(&th, &h);
  ingot_tensor td = ingot_tensor_2d(dd, INGOT_DTYPE_F32, m, n, n);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ingot_status s1 = ingot_nvfp4_gemm(gpu, &ta.m, &tb.m, &td, ws1, wb1, stream);
  ingot_status s2 = ingot_nvfp4_geglu(gpu, &ta.m, &tw.m, &th.m, ws2, wb2, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  EXPECT_OK(gpu, s1);
  EXPECT_OK(gpu, s2);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  unsigned char *g1 = malloc(db), *e1 = malloc(db), *g2 = malloc(hv), *e2 = malloc(hv),
                *g3 = malloc(hs), *e3 = malloc(hs);
  for (int round = 0; round < 3; round++) {
    rand_bytes(a.v, (size_t)(m * a.vstride));
    CUDA_OK(test_upload(a.dv, a.v, (size_t)(m * a.vstride)));
    CUDA_OK(test_fill(dd, 0xff, db));
    CUDA_OK(test_fill(h.dv, 0xff, hv));
    CUDA_OK(test_fill(h.ds, 0xff, hs));
    if (wb1) CUDA_OK(test_fill(ws1, 0x5A, wb1)); /* workspace contents must not matter */
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaGraphLaunch(exec, stream)); /* twice: the counters must come back clean */
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(g1, dd, db, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(g2, h.dv, hv, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(g3, h.ds, hs, cudaMemcpyDeviceToHost));
    CUDA_OK(test_fill(dd, 0, db));
    CUDA_OK(test_fill(h.dv, 0, hv));
    CUDA_OK(test_fill(h.ds, 0, hs));
    EXPECT_OK(gpu, ingot_nvfp4_gemm(gpu, &ta.m, &tb.m, &td, ws1, wb1, stream));
    EXPECT_OK(gpu, ingot_nvfp4_geglu(gpu, &ta.m, &tw.m, &th.m, ws2, wb2, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(e1, dd, db, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(e2, h.dv, hv, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(e3, h.ds, hs, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(g1, e1, db) == 0, "round %d: replayed GEMM != eager", round);
    EXPECT(memcmp(g2, e2, hv) == 0 && memcmp(g3, e3, hs) == 0, "round %d: replayed GeGLU != eager",
           round);
    /* and the GEMM against the CPU */
    check_gemm_shape(&a, &b, (const float *)e1, "graph gemm");
  }
  free(g1), free(e1), free(g2), free(e2), free(g3), free(e3);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(dd);
  if (ws1) cudaFree(ws1);
  if (ws2) cudaFree(ws2);
  mat_free(&a), mat_free(&b), mat_free(&w), mat_free(&h);
  return 0;
}

static int test_graph_replay(void) { return graph_replay_case(17) | graph_replay_case(100); }

/* ---- the epilogue's gelu == the CPU's, bit for bit ------------------------------------------- */

static int test_gelu_bits(void) {
  const int64_t n = small_only ? (1 << 14) : (1 << 22);
  float *g = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    double u = test_rand_unit() * 2.0 - 1.0;
    switch (i % 5) {
      case 0: g[i] = (float)(u * 12.0); break;                                  /* the bulk */
      case 1: g[i] = (float)ldexp(u, (int)test_rand_range(-40, 4)); break;      /* all scales */
      case 2: g[i] = (float)((u < 0 ? -1 : 1) * (8.5 + fabs(u))); break;        /* |y| ~ 69 */
      case 3: {                                                                  /* random bits */
        uint32_t b = (uint32_t)test_rand();
        memcpy(&g[i], &b, 4);
        break;
      }
      default: g[i] = (float)(u * 3.0); break;
    }
  }
  g[0] = 0.0f, g[1] = -0.0f, g[2] = INFINITY, g[3] = -INFINITY, g[4] = NAN;
  float *dg, *dout;
  CUDA_OK(cudaMalloc((void **)&dg, sizeof(float) * (size_t)n));
  CUDA_OK(cudaMalloc((void **)&dout, sizeof(float) * (size_t)n));
  CUDA_OK(test_upload(dg, g, sizeof(float) * (size_t)n));
  EXPECT_OK(gpu, ingot_test_epilogue_gelu(gpu, dg, dout, n, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(got, dout, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    float want = ingot_gelu_tanh(g[i]);
    uint32_t a, b;
    memcpy(&a, &got[i], 4), memcpy(&b, &want, 4);
    int same = a == b || (want != want && got[i] != got[i]);
    if (!same && bad++ < 5)
      test_fail_at(__FILE__, __LINE__, "gelu(%a): CUDA %a (0x%08x), CPU %a (0x%08x)", (double)g[i],
                   (double)got[i], a, (double)want, b);
  }
  printf("  gelu: %lld values, %lld differ from the CPU\n", (long long)n, (long long)bad);
  free(g), free(got);
  cudaFree(dg), cudaFree(dout);
  return 0;
}

/* The epilogue's fast division == IEEE division for n in {0} U [2^-100, 2^100] and
 * d in [2^-9, 448] (6, E4M3 values, and [1, 2] as in gelu). */
static int test_div_bits(void) {
  const int64_t n = small_only ? (1 << 14) : (1 << 22);
  float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n),
        *got = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    uint32_t m = (uint32_t)test_rand() & 0x7fffffu;
    a[i] = ldexpf(1.0f + (float)m * 0x1p-23f, (int)test_rand_range(-100, 99));
    switch (i % 4) {
      case 0: b[i] = 6.0f; break;
      case 1: b[i] = ingot_e4m3_to_f32((uint8_t)test_rand_range(1, 0x7e)); break;
      case 2: b[i] = 1.0f + (float)((uint32_t)test_rand() & 0x7fffffu) * 0x1p-23f; break;
      default: b[i] = ldexpf(1.0f + (float)((uint32_t)test_rand() & 0x7fffffu) * 0x1p-23f,
                             (int)test_rand_range(-9, 8));
    }
  }
  a[0] = 0.0f;
  float *da, *db, *dout;
  CUDA_OK(cudaMalloc((void **)&da, sizeof(float) * (size_t)n));
  CUDA_OK(cudaMalloc((void **)&db, sizeof(float) * (size_t)n));
  CUDA_OK(cudaMalloc((void **)&dout, sizeof(float) * (size_t)n));
  CUDA_OK(test_upload(da, a, sizeof(float) * (size_t)n));
  CUDA_OK(test_upload(db, b, sizeof(float) * (size_t)n));
  EXPECT_OK(gpu, ingot_test_epilogue_div(gpu, da, db, dout, n, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(got, dout, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    volatile float want = a[i] / b[i];
    float w = want;
    if (memcmp(&w, &got[i], 4) != 0 && bad++ < 5)
      test_fail_at(__FILE__, __LINE__, "%a / %a: CUDA %a, CPU %a", (double)a[i], (double)b[i],
                   (double)got[i], (double)w);
  }
  printf("  division: %lld quotients, %lld differ from the CPU\n", (long long)n, (long long)bad);
  free(a), free(b), free(got);
  cudaFree(da), cudaFree(db), cudaFree(dout);
  return 0;
}

/* An unusable global scale (not finite or not > 0) of A or B makes alpha,
 * and every output, the canonical NaN on both backends: GPU bytes == CPU
 * bytes. (Found by review: the CUDA alpha once ignored the rule.) */
static int test_bad_global_scale(void) {
  static const float bad[] = {-1.0f, 0.0f, -0.0f, INFINITY, NAN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    for (int which = 0; which < 2; which++) {
      mat a, b;
      mat_make(&a, 17, 128, 0x28, 0x48, which == 0 ? bad[i] : 4.0f, 0, 0);
      mat_make(&b, 64, 128, 0x28, 0x48, which == 1 ? bad[i] : 4.0f, 0, 0);
      if (mat_upload(&a) || mat_upload(&b)) return 1;
      float *want = malloc(sizeof(float) * 17 * 64), *got = malloc(sizeof(float) * 17 * 64);
      float *dd = NULL;
      CUDA_OK(cudaMalloc((void **)&dd, sizeof(float) * 17 * 64));
      size_t wb = 0;
      EXPECT_OK(gpu, ingot_nvfp4_gemm_workspace_size(gpu, 17, 64, 128, &wb));
      void *ws = NULL;
      if (wb) CUDA_OK(cudaMalloc(&ws, wb));
      if (cpu_gemm(&a, &b, want) == 0) {
        EXPECT_OK(gpu, gpu_gemm(&a, &b, dd, INGOT_DTYPE_F32, 64, ws, wb));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(got, dd, sizeof(float) * 17 * 64, cudaMemcpyDeviceToHost));
        uint32_t w0;
        memcpy(&w0, want, 4);
        EXPECT(w0 == 0x7fc00000u, "CPU: gs %g on %c gives 0x%08x, not the canonical NaN",
               (double)bad[i], "AB"[which], w0);
        EXPECT(memcmp(got, want, sizeof(float) * 17 * 64) == 0,
               "gs %g on %c: CUDA output differs from the CPU's", (double)bad[i], "AB"[which]);
      }
      if (ws) cudaFree(ws);
      cudaFree(dd), free(want), free(got), mat_free(&a), mat_free(&b);
    }
  return 0;
}

static int skip_no_device(void) {
  printf("SKIPPED test_nvfp4_gemm_cuda: no CUDA device\n");
  return TEST_SKIP_CODE;
}

int main(void) {
  test_init("test_nvfp4_gemm_cuda");
  if (!ingot_backend_available(INGOT_BACKEND_CUDA)) {
    test_run("nvfp4_gemm_cuda", skip_no_device);
    return test_finish();
  }
  const char *sm = getenv("INGOT_TEST_SMALL");
  small_only = sm && sm[0] && strcmp(sm, "0") != 0;
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &cpu) ||
      ingot_context_create(INGOT_BACKEND_CUDA, 0, &gpu)) {
    fprintf(stderr, "context: %s\n", ingot_last_error(NULL));
    return 1;
  }
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  test_run("gelu_bits", test_gelu_bits);
  test_run("div_bits", test_div_bits);
  test_run("gemm_grid", test_gemm_grid);
  test_run("gemm_layouts", test_gemm_layouts);
  test_run("geglu", test_geglu);
  test_run("mlp", test_mlp);
  test_run("graph_replay", test_graph_replay);
  test_run("bad_global_scale", test_bad_global_scale);
  cudaStreamDestroy(stream);
  ingot_context_destroy(gpu);
  ingot_context_destroy(cpu);
  return test_finish();
}
#endif
