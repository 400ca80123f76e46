/*
 * NVFP4 on CUDA against the CPU reference, byte for byte: quantize from
 * every input dtype (odd shapes, strided and misaligned rows, special values,
 * unusable / extreme global scales, the non-finite counter), dequantize to
 * bf16 / f32, swizzle / unswizzle, the device-side global scale, gate/up
 * preparation; the same in the INGOT_FORCE_REFERENCE mode; CUDA-graph
 * capture and replay with new inputs equal to eager. Skipped (exit 77)
 * without a GPU. Speed is measured by `ingot bench --filter nvfp4`
 * (tools/bench_nvfp4.c), not here.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/numeric.h"
#include "test_util.h"

#ifndef INGOT_WITH_CUDA
static int skip_no_cuda(void) {
  printf("SKIPPED test_nvfp4_cuda: built without CUDA\n");
  return TEST_SKIP_CODE;
}
int main(void) {
  test_init("test_nvfp4_cuda");
  test_run("nvfp4_cuda", skip_no_cuda);
  return test_finish();
}
#else
#include <cuda_runtime_api.h>

#include "test_cuda.h"

#include "core/internal.h"

/* Development hook in src/cuda/nvfp4.cu: quantize with an explicit launch
 * mode (0 one pass, 1 resident + prefetch, 2 resident loop). */
ingot_status ingot_cuda_nvfp4_quantize_mode(struct ingot_context *ctx,
                                            const ingot_nvfp4_source *x,
                                            const float *global_scale,
                                            const ingot_nvfp4_packed *out,
                                            uint32_t *nonfinite_count, int mode,
                                            struct CUstream_st *stream);
#define QUANTIZE_MODES 3

static ingot_context_t cpu, gpu, gpu_ref;
static cudaStream_t stream;

/* ---- two-sided buffers ------------------------------------------------------------ */

/* The same bytes on the host (for the CPU context) and on the device. */
typedef struct buf {
  void *h, *d;
  size_t bytes;
} buf;

static buf buf_make(size_t bytes) {
  buf b;
  b.bytes = bytes ? bytes : 1;
  b.h = malloc(b.bytes);
  b.d = NULL;
  if (cudaMalloc(&b.d, b.bytes) != cudaSuccess) b.d = NULL;
  return b;
}

static void buf_fill(buf *b, int byte) {
  memset(b->h, byte, b->bytes);
  test_upload(b->d, b->h, b->bytes);
}

static void buf_upload(buf *b) { test_upload(b->d, b->h, b->bytes); }

static void buf_free(buf *b) {
  free(b->h);
  cudaFree(b->d);
}

/* Device bytes == host bytes; names the first difference. */
static int buf_same(const buf *b, const char *what) {
  unsigned char *got = malloc(b->bytes);
  cudaMemcpy(got, b->d, b->bytes, cudaMemcpyDeviceToHost);
  const unsigned char *want = b->h;
  int bad = 0;
  for (size_t i = 0; i < b->bytes; i++)
    if (got[i] != want[i]) {
      test_fail_at(__FILE__, __LINE__, "%s: byte %zu: CUDA 0x%02x, CPU 0x%02x", what, i, got[i],
                   want[i]);
      bad = 1;
      break;
    }
  free(got);
  return bad;
}

/* ---- inputs ---------------------------------------------------------------------- */

static const float kGrid[] = {0.0f,  0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f,
                              2.0f,  2.5f,  3.0f, 3.5f,  4.0f, 5.0f,  6.0f, 0.3f};

static float rand_normalish(void) {
  double u = test_rand_unit() * 2.0 - 1.0, v = test_rand_unit() * 2.0 - 1.0;
  return (float)(u + v + u * v * v);
}

/* One value of a block of the given kind; e = the block's binary exponent. */
static float block_value(int kind, int e, int i) {
  float sign = (test_rand() & 1) ? -1.0f : 1.0f;
  switch (kind) {
    case 0: return ldexpf(rand_normalish(), e);
    case 1: return i == 0 ? 6.0f : sign * kGrid[test_rand() % 16]; /* ties with r == 1 */
    case 2: return sign * 0.0f;
    case 3: {
      uint64_t r = test_rand() % 4;
      return r == 0 ? NAN : r == 1 ? sign * INFINITY : ldexpf(rand_normalish(), e);
    }
    case 4: return ldexpf(rand_normalish(), -130 + (int)(test_rand() % 12)); /* fp32 subnormal */
    default: return sign * ldexpf(1.0f + (float)test_rand_unit(), 100 + (int)(test_rand() % 27));
  }
}

/* Fills a [rows, cols] matrix (row stride `stride` elements) of dtype with a
 * mix of block kinds. Values are rounded to the dtype (bf16 RNE; f16 via
 * the bit pattern of a nearby value). */
static void fill_matrix(void *data, ingot_dtype dtype, int64_t rows, int64_t cols, int64_t stride,
                        int ties_only) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      uint64_t pick = test_rand() % 100;
      int kind = ties_only ? 1 : pick < 70 ? 0 : pick < 78 ? 1 : pick < 84 ? 2 : pick < 90 ? 3
                                                                   : pick < 95 ? 4 : 5;
      int e = (int)test_rand_range(-40, 40);
      if (dtype == INGOT_DTYPE_F16) {
        e = (int)test_rand_range(-12, 12);
        if (kind >= 4) kind = 0;
      }
      for (int i = 0; i < 16 && c0 + i < cols; i++) {
        float v = block_value(kind, e, i);
        int64_t at = r * stride + c0 + i;
        if (dtype == INGOT_DTYPE_F32) {
          ((float *)data)[at] = v;
        } else if (dtype == INGOT_DTYPE_BF16) {
          ((uint16_t *)data)[at] = ingot_f32_to_bf16(v);
        } else {
          /* f16: build the bits from v's exponent / mantissa (truncating) */
          uint32_t u = ingot_f32_bits(v);
          uint16_t sign = (uint16_t)((u >> 16) & 0x8000u), h;
          int ex = (int)((u >> 23) & 0xff) - 127;
          if (isnan(v))
            h = 0x7e00;
          else if (isinf(v) || ex > 15)
            h = 0x7c00;
          else if (ex < -24 || v == 0.0f)
            h = 0;
          else if (ex < -14)
            h = (uint16_t)(((u & 0x7fffffu) | 0x800000u) >> (13 + (-14 - ex)));
          else
            h = (uint16_t)(((ex + 15) << 10) | ((u >> 13) & 0x3ffu));
          ((uint16_t *)data)[at] = (uint16_t)(sign | h);
        }
      }
    }
}

/* ---- quantize ----------------------------------------------------------------------- */

typedef struct qcase {
  ingot_dtype dtype;
  int64_t rows, cols, stride, vstride;
  float gs;
  int ties_only;
  int offset_elems; /* start x at this element offset (misalignment) */
} qcase;

static int run_quantize_case(ingot_context_t g, const qcase *qc, const char *what) {
  size_t es = ingot_dtype_size(qc->dtype);
  int64_t sr = 0, sc = 0;
  EXPECT_OK(NULL, ingot_nvfp4_scale_shape(qc->rows, qc->cols, &sr, &sc));
  buf x = buf_make((size_t)((qc->rows - 1) * qc->stride + qc->cols + qc->offset_elems) * es);
  buf v = buf_make((size_t)(qc->rows * qc->vstride));
  buf s = buf_make((size_t)(sr * sc));
  buf gsb = buf_make(4), cnt = buf_make(4);
  memset(x.h, 0, x.bytes);
  fill_matrix((char *)x.h + qc->offset_elems * es, qc->dtype, qc->rows, qc->cols, qc->stride,
              qc->ties_only);
  buf_upload(&x);
  buf_fill(&v, 0xa5);
  buf_fill(&s, 0xcc);
  memcpy(gsb.h, &qc->gs, 4);
  buf_upload(&gsb);
  uint32_t c0 = 7;
  memcpy(cnt.h, &c0, 4);
  buf_upload(&cnt);
  ingot_tensor hx = ingot_tensor_2d((char *)x.h + qc->offset_elems * es, qc->dtype, qc->rows,
                                    qc->cols, qc->stride);
  ingot_tensor dx = hx;
  dx.data = (char *)x.d + qc->offset_elems * es;
  ingot_tensor hv = ingot_tensor_2d(v.h, INGOT_DTYPE_U8, qc->rows, qc->cols / 2, qc->vstride);
  ingot_tensor dv = hv;
  dv.data = v.d;
  ingot_tensor hs = ingot_tensor_1d(s.h, INGOT_DTYPE_U8, sr * sc), ds = hs;
  ds.data = s.d;
  ingot_tensor hg = ingot_tensor_1d(gsb.h, INGOT_DTYPE_F32, 1), dg = hg;
  dg.data = gsb.d;
  ingot_tensor hc = ingot_tensor_1d(cnt.h, INGOT_DTYPE_U32, 1), dc = hc;
  dc.data = cnt.d;
  EXPECT_OK(cpu, ingot_nvfp4_quantize(cpu, &hx, &hg, &hv, &hs, &hc, NULL));
  EXPECT_OK(g, ingot_nvfp4_quantize(g, &dx, &dg, &dv, &ds, &dc, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  char name[160];
  snprintf(name, sizeof name, "%s: %s [%lld, %lld] stride %lld vstride %lld gs %g", what,
           ingot_dtype_name(qc->dtype), (long long)qc->rows, (long long)qc->cols,
           (long long)qc->stride, (long long)qc->vstride, (double)qc->gs);
  int bad = buf_same(&v, name) | buf_same(&s, name) | buf_same(&cnt, name);
  /* every launch mode of the fast kernel, where it applies */
  int aligned = qc->offset_elems == 0 && (qc->stride * (int64_t)es) % 16 == 0 &&
                qc->vstride % 8 == 0;
  for (int mode = 0; mode < QUANTIZE_MODES && aligned && g == gpu && !bad; mode++) {
    ingot_nvfp4_source src = {{dx.data, dx.data}, {qc->stride, qc->stride}, qc->dtype, 0,
                              qc->rows, qc->cols};
    ingot_nvfp4_packed pk = {(uint8_t *)v.d, qc->vstride, (uint8_t *)s.d, qc->rows, qc->cols,
                             sr, sc};
    CUDA_OK(test_fill(v.d, 0xa5, v.bytes));
    CUDA_OK(test_fill(s.d, 0xcc, s.bytes));
    CUDA_OK(test_upload(cnt.d, &c0, 4));
    EXPECT_OK(g, ingot_cuda_nvfp4_quantize_mode(g, &src, (const float *)gsb.d, &pk,
                                                (uint32_t *)cnt.d, mode, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    char mname[200];
    snprintf(mname, sizeof mname, "%s (mode %d)", name, mode);
    bad |= buf_same(&v, mname) | buf_same(&s, mname) | buf_same(&cnt, mname);
  }
  /* dequantize the result both ways too */
  for (int od = 0; od < 2 && !bad; od++) {
    ingot_dtype odt = od ? INGOT_DTYPE_F32 : INGOT_DTYPE_BF16;
    int64_t ostride = qc->cols + (test_rand() & 1 ? 0 : 3);
    buf o = buf_make((size_t)(qc->rows * ostride) * ingot_dtype_size(odt));
    buf_fill(&o, 0x5c);
    ingot_tensor ho = ingot_tensor_2d(o.h, odt, qc->rows, qc->cols, ostride), dO = ho;
    dO.data = o.d;
    EXPECT_OK(cpu, ingot_nvfp4_dequantize(cpu, &hv, &hs, &hg, &ho, NULL));
    EXPECT_OK(g, ingot_nvfp4_dequantize(g, &dv, &ds, &dg, &dO, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    char dname[200];
    snprintf(dname, sizeof dname, "dequantize to %s of %s", ingot_dtype_name(odt), name);
    bad |= buf_same(&o, dname);
    buf_free(&o);
  }
  buf_free(&x), buf_free(&v), buf_free(&s), buf_free(&gsb), buf_free(&cnt);
  return bad;
}

static int test_quantize(void) {
  static const ingot_dtype dtypes[] = {INGOT_DTYPE_BF16, INGOT_DTYPE_F16, INGOT_DTYPE_F32};
  static const int64_t shapes[][2] = {{1, 16},   {5, 48},    {130, 80}, {968, 2048},
                                      {257, 528}, {128, 64}, {3, 16 * 7}};
  const float gss[] = {0, 448.0f, 1.0f, 1e38f, 3e-30f, 0.0f, -1.0f, NAN, INFINITY};
  for (size_t d = 0; d < 3; d++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int variant = 0; variant < 4; variant++) {
        qcase qc;
        memset(&qc, 0, sizeof qc);
        qc.dtype = dtypes[d];
        qc.rows = shapes[s][0];
        qc.cols = shapes[s][1];
        int aligned = variant < 2;
        int64_t per16 = 16 / (int64_t)ingot_dtype_size(qc.dtype);
        qc.stride = qc.cols + (aligned ? per16 * test_rand_range(0, 2) : test_rand_range(1, 3));
        qc.vstride = qc.cols / 2 + (aligned ? 8 * test_rand_range(0, 1) : 1);
        qc.offset_elems = aligned ? 0 : 1;
        qc.gs = variant == 0 ? (float)(test_rand_unit() * 100.0 + 0.01)
                             : gss[test_rand() % (sizeof gss / sizeof gss[0])];
        if (qc.gs == 0 && variant == 1) qc.gs = 448.0f;
        run_quantize_case((variant & 1) && s % 2 ? gpu_ref : gpu, &qc,
                          (variant & 1) && s % 2 ? "quantize (reference)" : "quantize");
      }
  /* exact ties: r == 1 */
  for (size_t d = 0; d < 3; d += 2) {
    qcase qc = {dtypes[d], 300, 256, 256, 128, 448.0f, 1, 0};
    run_quantize_case(gpu, &qc, "ties");
  }
  return 0;
}

/* ---- dequantize of arbitrary bytes ---------------------------------------------------- */

static int test_dequantize_random(void) {
  const float gss[] = {1.0f, 3.7f, 1e-30f, 1e30f, 2688.0f / 1e-3f, 0.0f, -2.0f, NAN, INFINITY,
                       1e-38f, 3e38f};
  for (size_t g = 0; g < sizeof gss / sizeof gss[0]; g++)
    for (int od = 0; od < 2; od++) {
      int64_t rows = test_rand_range(1, 300), cols = 16 * test_rand_range(1, 40);
      int64_t sr = 0, sc = 0;
      EXPECT_OK(NULL, ingot_nvfp4_scale_shape(rows, cols, &sr, &sc));
      int64_t vstride = cols / 2 + (test_rand() & 1 ? 0 : 8);
      ingot_dtype odt = od ? INGOT_DTYPE_F32 : INGOT_DTYPE_BF16;
      int64_t ostride = cols + (test_rand() & 1 ? 0 : 16);
      buf v = buf_make((size_t)(rows * vstride)), s = buf_make((size_t)(sr * sc)), gsb = buf_make(4);
      buf o = buf_make((size_t)(rows * ostride) * ingot_dtype_size(odt));
      for (size_t i = 0; i < v.bytes; i++) ((uint8_t *)v.h)[i] = (uint8_t)test_rand();
      for (size_t i = 0; i < s.bytes; i++) ((uint8_t *)s.h)[i] = (uint8_t)test_rand();
      memcpy(gsb.h, &gss[g], 4);
      buf_upload(&v), buf_upload(&s), buf_upload(&gsb);
      buf_fill(&o, 0x3e);
      ingot_tensor hv = ingot_tensor_2d(v.h, INGOT_DTYPE_U8, rows, cols / 2, vstride), dv = hv;
      dv.data = v.d;
      ingot_tensor hs = ingot_tensor_2d(s.h, INGOT_DTYPE_F8_E4M3, sr, sc, sc), ds = hs;
      ds.data = s.d;
      ingot_tensor hg = ingot_tensor_1d(gsb.h, INGOT_DTYPE_F32, 1), dg = hg;
      dg.data = gsb.d;
      ingot_tensor ho = ingot_tensor_2d(o.h, odt, rows, cols, ostride), dO = ho;
      dO.data = o.d;
      ingot_context_t ctx = g % 3 == 2 ? gpu_ref : gpu;
      EXPECT_OK(cpu, ingot_nvfp4_dequantize(cpu, &hv, &hs, &hg, &ho, NULL));
      EXPECT_OK(ctx, ingot_nvfp4_dequantize(ctx, &dv, &ds, &dg, &dO, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      char name[128];
      snprintf(name, sizeof name, "dequantize random bytes -> %s, gs %g%s", ingot_dtype_name(odt),
               (double)gss[g], ctx == gpu_ref ? " (reference)" : "");
      buf_same(&o, name);
      buf_free(&v), buf_free(&s), buf_free(&gsb), buf_free(&o);
    }
  return 0;
}

/* ---- swizzle ----------------------------------------------------------------------------- */

static int test_swizzle(void) {
  static const int64_t shapes[][2] = {{1, 16}, {129, 80}, {300, 16 * 13}, {1024, 2048}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    int64_t rows = shapes[i][0], nb = shapes[i][1] / 16, lstride = nb + (int64_t)(test_rand() % 3);
    int64_t sr = 0, sc = 0;
    EXPECT_OK(NULL, ingot_nvfp4_scale_shape(rows, nb * 16, &sr, &sc));
    buf l = buf_make((size_t)(rows * lstride)), s = buf_make((size_t)(sr * sc));
    buf back = buf_make((size_t)(rows * lstride));
    for (size_t j = 0; j < l.bytes; j++) ((uint8_t *)l.h)[j] = (uint8_t)test_rand();
    buf_upload(&l);
    buf_fill(&s, 0x99);
    buf_fill(&back, 0x77);
    ingot_tensor hl = ingot_tensor_2d(l.h, INGOT_DTYPE_U8, rows, nb, lstride), dl = hl;
    dl.data = l.d;
    ingot_tensor hs = ingot_tensor_2d(s.h, INGOT_DTYPE_U8, sr, sc, sc), ds = hs;
    ds.data = s.d;
    ingot_tensor hb = ingot_tensor_2d(back.h, INGOT_DTYPE_U8, rows, nb, lstride), db = hb;
    db.data = back.d;
    EXPECT_OK(cpu, ingot_nvfp4_swizzle_scales(cpu, &hl, &hs, NULL));
    EXPECT_OK(gpu, ingot_nvfp4_swizzle_scales(gpu, &dl, &ds, stream));
    EXPECT_OK(cpu, ingot_nvfp4_unswizzle_scales(cpu, &hs, &hb, NULL));
    EXPECT_OK(gpu, ingot_nvfp4_unswizzle_scales(gpu, &ds, &db, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    buf_same(&s, "swizzle");
    buf_same(&back, "unswizzle");
    buf_free(&l), buf_free(&s), buf_free(&back);
  }
  return 0;
}

/* ---- global scale ------------------------------------------------------------------------- */

static int test_global_scale(void) {
  static const ingot_dtype dtypes[] = {INGOT_DTYPE_BF16, INGOT_DTYPE_F16, INGOT_DTYPE_F32};
  for (int iter = 0; iter < 24; iter++) {
    ingot_dtype dt = dtypes[iter % 3];
    size_t es = ingot_dtype_size(dt);
    int64_t rows = test_rand_range(0, 700);
    int64_t cols = iter % 2 ? 16 * test_rand_range(1, 70) : test_rand_range(1, 100);
    int64_t stride = cols + (iter % 4 < 2 ? 0 : test_rand_range(1, 9));
    buf x = buf_make((size_t)((rows > 0 ? rows - 1 : 0) * stride + cols) * es);
    memset(x.h, 0, x.bytes);
    int special = iter % 6;
    if (rows > 0) fill_matrix(x.h, dt, rows, cols - cols % 16, stride, 0);
    if (special == 5) memset(x.h, 0, x.bytes);                                  /* all zero */
    if (special == 4 && rows > 0 && dt == INGOT_DTYPE_F32) ((float *)x.h)[0] = 1e-40f; /* tiny */
    buf_upload(&x);
    buf gsb = buf_make(4);
    buf_fill(&gsb, 0x11);
    ingot_tensor hx = ingot_tensor_2d(x.h, dt, rows, cols, stride), dx = hx;
    dx.data = x.d;
    ingot_tensor hg = ingot_tensor_1d(gsb.h, INGOT_DTYPE_F32, 1), dg = hg;
    dg.data = gsb.d;
    ingot_context_t g = iter % 5 == 4 ? gpu_ref : gpu;
    EXPECT_OK(cpu, ingot_nvfp4_global_scale(cpu, &hx, &hg, NULL));
    EXPECT_OK(g, ingot_nvfp4_global_scale(g, &dx, &dg, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    char name[96];
    snprintf(name, sizeof name, "global scale %s [%lld, %lld] stride %lld", ingot_dtype_name(dt),
             (long long)rows, (long long)cols, (long long)stride);
    buf_same(&gsb, name);
    buf_free(&x), buf_free(&gsb);
  }
  return 0;
}

/* ---- gate / up ------------------------------------------------------------------------------ */

static int test_gate_up(void) {
  for (int iter = 0; iter < 6; iter++) {
    ingot_dtype dt = iter % 3 == 0 ? INGOT_DTYPE_BF16 : iter % 3 == 1 ? INGOT_DTYPE_F16
                                                                      : INGOT_DTYPE_F32;
    size_t es = ingot_dtype_size(dt);
    int64_t H = test_rand_range(1, 150), K = 16 * test_rand_range(1, 40);
    int64_t gstride = K + (iter < 3 ? 0 : 1), ustride = K + 16 / (int64_t)es;
    int64_t sr = 0, sc = 0;
    EXPECT_OK(NULL, ingot_nvfp4_scale_shape(2 * H, K, &sr, &sc));
    buf gt = buf_make((size_t)((H - 1) * gstride + K) * es);
    buf up = buf_make((size_t)((H - 1) * ustride + K) * es);
    fill_matrix(gt.h, dt, H, K, gstride, 0);
    fill_matrix(up.h, dt, H, K, ustride, 0);
    buf_upload(&gt), buf_upload(&up);
    buf v = buf_make((size_t)(2 * H * K / 2)), s = buf_make((size_t)(sr * sc));
    buf gsb = buf_make(4), cnt = buf_make(4);
    buf_fill(&v, 1), buf_fill(&s, 2), buf_fill(&cnt, 0);
    float given = 3.25f;
    memcpy(gsb.h, &given, 4);
    buf_upload(&gsb);
    ingot_tensor hgt = ingot_tensor_2d(gt.h, dt, H, K, gstride), dgt = hgt;
    dgt.data = gt.d;
    ingot_tensor hup = ingot_tensor_2d(up.h, dt, H, K, ustride), dup = hup;
    dup.data = up.d;
    ingot_tensor hv = ingot_tensor_2d(v.h, INGOT_DTYPE_U8, 2 * H, K / 2, K / 2), dv = hv;
    dv.data = v.d;
    ingot_tensor hs = ingot_tensor_1d(s.h, INGOT_DTYPE_U8, sr * sc), ds = hs;
    ds.data = s.d;
    ingot_tensor hg = ingot_tensor_1d(gsb.h, INGOT_DTYPE_F32, 1), dg = hg;
    dg.data = gsb.d;
    ingot_tensor hc = ingot_tensor_1d(cnt.h, INGOT_DTYPE_U32, 1), dc = hc;
    dc.data = cnt.d;
    uint32_t flags = iter % 2 ? 0u : (uint32_t)INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE;
    EXPECT_OK(cpu, ingot_nvfp4_quantize_gate_up(cpu, &hgt, &hup, &hg, flags, &hv, &hs, &hc, NULL));
    EXPECT_OK(gpu, ingot_nvfp4_quantize_gate_up(gpu, &dgt, &dup, &dg, flags, &dv, &ds, &dc, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    char name[96];
    snprintf(name, sizeof name, "gate/up %s H %lld K %lld flags %u", ingot_dtype_name(dt),
             (long long)H, (long long)K, flags);
    buf_same(&v, name), buf_same(&s, name), buf_same(&gsb, name), buf_same(&cnt, name);
    int aligned = (gstride * (int64_t)es) % 16 == 0 && (ustride * (int64_t)es) % 16 == 0 &&
                  (K / 2) % 8 == 0;
    uint32_t zero = 0;
    memcpy(cnt.h, &zero, 4); /* the mode runs count from 0, with the given gs */
    for (int mode = 0; mode < QUANTIZE_MODES && aligned; mode++) {
      ingot_nvfp4_source src = {{gt.d, up.d}, {gstride, ustride}, dt, 1, 2 * H, K};
      ingot_nvfp4_packed pk = {(uint8_t *)v.d, K / 2, (uint8_t *)s.d, 2 * H, K, sr, sc};
      CUDA_OK(test_fill(v.d, 1, v.bytes));
      CUDA_OK(test_fill(s.d, 2, s.bytes));
      CUDA_OK(test_fill(cnt.d, 0, 4));
      memset(cnt.h, 0, 4);
      EXPECT_OK(cpu, ingot_nvfp4_quantize_gate_up(cpu, &hgt, &hup, &hg, 0, &hv, &hs, &hc, NULL));
      EXPECT_OK(gpu, ingot_cuda_nvfp4_quantize_mode(gpu, &src, (const float *)gsb.d, &pk,
                                                    (uint32_t *)cnt.d, mode, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      char mname[128];
      snprintf(mname, sizeof mname, "%s (mode %d)", name, mode);
      buf_same(&v, mname), buf_same(&s, mname), buf_same(&cnt, mname);
    }
    buf_free(&gt), buf_free(&up), buf_free(&v), buf_free(&s), buf_free(&gsb), buf_free(&cnt);
  }
  return 0;
}

/* ---- counter over many blocks -------------------------------------------------------------- */

static int test_counter(void) {
  const int64_t rows = 1000, cols = 1024;
  buf x = buf_make((size_t)(rows * cols) * 4);
  float *f = x.h;
  uint32_t want = 0;
  for (int64_t i = 0; i < rows * cols; i++) {
    uint64_t r = test_rand() % 1000;
    f[i] = r == 0 ? NAN : r == 1 ? -INFINITY : (float)(test_rand_unit() - 0.5);
    want += r < 2;
  }
  buf_upload(&x);
  int64_t sr = 0, sc = 0;
  EXPECT_OK(NULL, ingot_nvfp4_scale_shape(rows, cols, &sr, &sc));
  void *dv = NULL, *ds = NULL, *dg = NULL, *dc = NULL;
  CUDA_OK(cudaMalloc(&dv, (size_t)(rows * cols / 2)));
  CUDA_OK(cudaMalloc(&ds, (size_t)(sr * sc)));
  CUDA_OK(cudaMalloc(&dg, 4));
  CUDA_OK(cudaMalloc(&dc, 4));
  CUDA_OK(test_fill(dc, 0, 4));
  ingot_tensor tx = ingot_tensor_2d(x.d, INGOT_DTYPE_F32, rows, cols, cols);
  ingot_tensor tg = ingot_tensor_1d(dg, INGOT_DTYPE_F32, 1);
  ingot_tensor tv = ingot_tensor_2d(dv, INGOT_DTYPE_U8, rows, cols / 2, cols / 2);
  ingot_tensor ts = ingot_tensor_1d(ds, INGOT_DTYPE_U8, sr * sc);
  ingot_tensor tc = ingot_tensor_1d(dc, INGOT_DTYPE_U32, 1);
  EXPECT_OK(gpu, ingot_nvfp4_global_scale(gpu, &tx, &tg, stream));
  EXPECT_OK(gpu, ingot_nvfp4_quantize(gpu, &tx, &tg, &tv, &ts, &tc, stream));
  EXPECT_OK(gpu, ingot_nvfp4_quantize(gpu, &tx, &tg, &tv, &ts, &tc, stream));
  uint32_t got = 0;
  CUDA_OK(cudaMemcpyAsync(&got, dc, 4, cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT(got == 2 * want, "counter %u, expected 2 * %u", got, want);
  buf_free(&x);
  cudaFree(dv), cudaFree(ds), cudaFree(dg), cudaFree(dc);
  return 0;
}

/* ---- CUDA graph -------------------------------------------------------------------------------- */

static int test_graph_replay(void) {
  const int64_t rows = 333, cols = 512;
  int64_t sr = 0, sc = 0;
  EXPECT_OK(NULL, ingot_nvfp4_scale_shape(rows, cols, &sr, &sc));
  size_t xb = (size_t)(rows * cols) * 2, vb = (size_t)(rows * cols / 2), sb = (size_t)(sr * sc);
  size_t ob = (size_t)(rows * cols) * 4;
  void *dx, *dv, *ds, *dg, *dc, *dout;
  CUDA_OK(cudaMalloc(&dx, xb));
  CUDA_OK(cudaMalloc(&dv, vb));
  CUDA_OK(cudaMalloc(&ds, sb));
  CUDA_OK(cudaMalloc(&dg, 4));
  CUDA_OK(cudaMalloc(&dc, 4));
  CUDA_OK(cudaMalloc(&dout, ob));
  ingot_tensor tx = ingot_tensor_2d(dx, INGOT_DTYPE_BF16, rows, cols, cols);
  ingot_tensor tg = ingot_tensor_1d(dg, INGOT_DTYPE_F32, 1);
  ingot_tensor tv = ingot_tensor_2d(dv, INGOT_DTYPE_U8, rows, cols / 2, cols / 2);
  ingot_tensor ts = ingot_tensor_1d(ds, INGOT_DTYPE_U8, sr * sc);
  ingot_tensor tc = ingot_tensor_1d(dc, INGOT_DTYPE_U32, 1);
  ingot_tensor to = ingot_tensor_2d(dout, INGOT_DTYPE_F32, rows, cols, cols);

  /* capture: global scale -> quantize -> dequantize */
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ingot_status s1 = ingot_nvfp4_global_scale(gpu, &tx, &tg, stream);
  ingot_status s2 = ingot_nvfp4_quantize(gpu, &tx, &tg, &tv, &ts, &tc, stream);
  ingot_status s3 = ingot_nvfp4_dequantize(gpu, &tv, &ts, &tg, &to, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  EXPECT_OK(gpu, s1);
  EXPECT_OK(gpu, s2);
  EXPECT_OK(gpu, s3);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  uint16_t *hx = malloc(xb);
  unsigned char *gv = malloc(vb), *gs_ = malloc(sb), *gout = malloc(ob);
  unsigned char *ev = malloc(vb), *es_ = malloc(sb), *eout = malloc(ob);
  for (int round = 0; round < 3; round++) {
    fill_matrix(hx, INGOT_DTYPE_BF16, rows, cols, cols, 0);
    CUDA_OK(test_upload(dx, hx, xb));
    CUDA_OK(test_fill(dc, 0, 4));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    float ggs;
    uint32_t gcnt;
    CUDA_OK(cudaMemcpy(gv, dv, vb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(gs_, ds, sb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(gout, dout, ob, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&ggs, dg, 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&gcnt, dc, 4, cudaMemcpyDeviceToHost));
    /* eager, same inputs */
    CUDA_OK(test_fill(dv, 0, vb));
    CUDA_OK(test_fill(ds, 0, sb));
    CUDA_OK(test_fill(dout, 0, ob));
    CUDA_OK(test_fill(dc, 0, 4));
    EXPECT_OK(gpu, ingot_nvfp4_global_scale(gpu, &tx, &tg, stream));
    EXPECT_OK(gpu, ingot_nvfp4_quantize(gpu, &tx, &tg, &tv, &ts, &tc, stream));
    EXPECT_OK(gpu, ingot_nvfp4_dequantize(gpu, &tv, &ts, &tg, &to, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    float egs;
    uint32_t ecnt;
    CUDA_OK(cudaMemcpy(ev, dv, vb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(es_, ds, sb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(eout, dout, ob, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&egs, dg, 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&ecnt, dc, 4, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(gv, ev, vb) == 0, "round %d: replayed values != eager", round);
    EXPECT(memcmp(gs_, es_, sb) == 0, "round %d: replayed scales != eager", round);
    EXPECT(memcmp(gout, eout, ob) == 0, "round %d: replayed dequantize != eager", round);
    EXPECT(memcmp(&ggs, &egs, 4) == 0 && gcnt == ecnt, "round %d: gs / count differ", round);
    /* and eager == CPU */
    float cgs = 0.0f;
    uint32_t ccnt = 0;
    unsigned char *cv = malloc(vb), *cs = malloc(sb);
    ingot_tensor hxt = ingot_tensor_2d(hx, INGOT_DTYPE_BF16, rows, cols, cols);
    ingot_tensor hg = ingot_tensor_1d(&cgs, INGOT_DTYPE_F32, 1);
    ingot_tensor hv = ingot_tensor_2d(cv, INGOT_DTYPE_U8, rows, cols / 2, cols / 2);
    ingot_tensor hs = ingot_tensor_1d(cs, INGOT_DTYPE_U8, sr * sc);
    ingot_tensor hc = ingot_tensor_1d(&ccnt, INGOT_DTYPE_U32, 1);
    EXPECT_OK(cpu, ingot_nvfp4_global_scale(cpu, &hxt, &hg, NULL));
    EXPECT_OK(cpu, ingot_nvfp4_quantize(cpu, &hxt, &hg, &hv, &hs, &hc, NULL));
    EXPECT(memcmp(cv, ev, vb) == 0 && memcmp(cs, es_, sb) == 0 && memcmp(&cgs, &egs, 4) == 0 &&
               ccnt == ecnt,
           "round %d: eager CUDA != CPU", round);
    free(cv), free(cs);
  }
  free(hx), free(gv), free(gs_), free(gout), free(ev), free(es_), free(eout);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(dx), cudaFree(dv), cudaFree(ds), cudaFree(dg), cudaFree(dc), cudaFree(dout);
  return 0;
}

static int skip_no_device(void) {
  printf("SKIPPED test_nvfp4_cuda: no CUDA device\n");
  return TEST_SKIP_CODE;
}

int main(void) {
  test_init("test_nvfp4_cuda");
  if (!ingot_backend_available(INGOT_BACKEND_CUDA)) {
    test_run("nvfp4_cuda", skip_no_device);
    return test_finish();
  }
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &cpu) ||
      ingot_context_create(INGOT_BACKEND_CUDA, 0, &gpu)) {
    fprintf(stderr, "context: %s\n", ingot_last_error(NULL));
    return 1;
  }
  setenv("INGOT_FORCE_REFERENCE", "1", 1);
  ingot_status st = ingot_context_create(INGOT_BACKEND_CUDA, 0, &gpu_ref);
  unsetenv("INGOT_FORCE_REFERENCE");
  if (st || !(ingot_context_flags(gpu_ref) & INGOT_CONTEXT_FLAG_FORCE_REFERENCE)) {
    fprintf(stderr, "reference context: %s\n", ingot_last_error(NULL));
    return 1;
  }
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  test_run("quantize_vs_cpu", test_quantize);
  test_run("dequantize_random_bytes", test_dequantize_random);
  test_run("swizzle", test_swizzle);
  test_run("global_scale", test_global_scale);
  test_run("gate_up", test_gate_up);
  test_run("nonfinite_counter", test_counter);
  test_run("graph_replay", test_graph_replay);
  cudaStreamDestroy(stream);
  ingot_context_destroy(gpu_ref);
  ingot_context_destroy(gpu);
  ingot_context_destroy(cpu);
  return test_finish();
}
#endif
