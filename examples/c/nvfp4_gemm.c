/*
 * NVFP4 GEMM: quantize two fp32 matrices to NVFP4 and multiply them.
 *
 *   1. gs = ingot_nvfp4_global_scale(x): the encode multiplier 448*6/amax,
 *      written into a 1-element tensor in the context's memory;
 *   2. ingot_nvfp4_quantize(x, gs): values [rows, cols/2] (two E2M1 codes a
 *      byte) and the E4M3 block scales in the 128x4 swizzled layout
 *      (ingot_nvfp4_scale_shape gives the buffer's shape);
 *   3. ingot_nvfp4_gemm_workspace_size, then ingot_nvfp4_gemm:
 *      D [M, N] = A [M, K] x B [N, K]^T (B is a linear layer's [out, in]
 *      weight), fp32 out.
 *
 * Checks: matrix A decoded by hand from its bytes equals
 * ingot_nvfp4_dequantize; D equals a plain matmul of the two dequantized
 * matrices within fp32 rounding; D is within NVFP4's quantization error of
 * the unquantized product.
 *
 *   nvfp4_gemm [cpu|cuda]
 */
#include <math.h>

#include "example_util.h"

enum { M = 48, N = 128, K = 256 }; /* N and K multiples of 64 */

/* One quantized matrix, every buffer in the context's memory. */
typedef struct nvfp4 {
  int64_t rows, cols;
  void *values, *scales, *gs;
  size_t scale_bytes;
  ingot_tensor t_values, t_scales, t_gs;
} nvfp4;

static void quantize(ingot_context_t ctx, const float *host, int64_t rows, int64_t cols, nvfp4 *q) {
  int64_t scale_rows, scale_cols;
  CHECK(NULL, ingot_nvfp4_scale_shape(rows, cols, &scale_rows, &scale_cols));
  q->rows = rows, q->cols = cols;
  q->scale_bytes = (size_t)(scale_rows * scale_cols);
  q->values = example_alloc(ctx, (size_t)(rows * cols / 2));
  q->scales = example_alloc(ctx, q->scale_bytes);
  q->gs = example_alloc(ctx, sizeof(float));
  q->t_values = ingot_tensor_2d(q->values, INGOT_DTYPE_U8, rows, cols / 2, cols / 2);
  q->t_scales = ingot_tensor_2d(q->scales, INGOT_DTYPE_U8, scale_rows, scale_cols, scale_cols);
  q->t_gs = ingot_tensor_1d(q->gs, INGOT_DTYPE_F32, 1);

  void *x = example_upload(ctx, host, (size_t)(rows * cols) * sizeof(float));
  ingot_tensor t_x = ingot_tensor_2d(x, INGOT_DTYPE_F32, rows, cols, cols);
  CHECK(ctx, ingot_nvfp4_global_scale(ctx, &t_x, &q->t_gs, NULL));
  CHECK(ctx, ingot_nvfp4_quantize(ctx, &t_x, &q->t_gs, &q->t_values, &q->t_scales, NULL, NULL));
  example_free(ctx, x);
}

/* The fp32 matrix the NVFP4 one stands for (ingot_nvfp4_dequantize). */
static float *dequantize(ingot_context_t ctx, const nvfp4 *q) {
  size_t bytes = (size_t)(q->rows * q->cols) * sizeof(float);
  void *out = example_alloc(ctx, bytes);
  ingot_tensor t_out = ingot_tensor_2d(out, INGOT_DTYPE_F32, q->rows, q->cols, q->cols);
  CHECK(ctx, ingot_nvfp4_dequantize(ctx, &q->t_values, &q->t_scales, &q->t_gs, &t_out, NULL));
  float *host = malloc(bytes);
  example_read(ctx, host, out, bytes);
  example_free(ctx, out);
  return host;
}

static void nvfp4_free(ingot_context_t ctx, nvfp4 *q) {
  example_free(ctx, q->values);
  example_free(ctx, q->scales);
  example_free(ctx, q->gs);
}

/* E4M3 byte -> float (finite codes; 0x7F / 0xFF are NaN). */
static float e4m3_to_float(uint8_t b) {
  int e = (b >> 3) & 15, m = b & 7;
  float v = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
  if ((b & 0x7F) == 0x7F) v = NAN;
  return (b & 0x80) ? -v : v;
}

/* Roughly normal random values (the sum of four uniforms). */
static float *random_matrix(int64_t rows, int64_t cols) {
  float *x = malloc((size_t)(rows * cols) * sizeof(float));
  for (int64_t i = 0; i < rows * cols; i++)
    x[i] = example_uniform() + example_uniform() + example_uniform() + example_uniform() - 2.0f;
  return x;
}

int main(int argc, char **argv) {
  static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  ingot_context_t ctx;
  int rc = example_open(argc, argv, &ctx);
  if (rc != 0) return rc;

  float *x_a = random_matrix(M, K), *x_b = random_matrix(N, K);
  nvfp4 a, b;
  quantize(ctx, x_a, M, K, &a);
  quantize(ctx, x_b, N, K, &b);

  /* ---- the GEMM -------------------------------------------------------- */
  size_t ws_bytes;
  CHECK(ctx, ingot_nvfp4_gemm_workspace_size(ctx, M, N, K, &ws_bytes));
  void *ws = example_alloc(ctx, ws_bytes);
  void *d = example_alloc(ctx, (size_t)(M * N) * sizeof(float));
  ingot_tensor t_d = ingot_tensor_2d(d, INGOT_DTYPE_F32, M, N, N);
  ingot_nvfp4_matrix ma = {&a.t_values, &a.t_scales, &a.t_gs};
  ingot_nvfp4_matrix mb = {&b.t_values, &b.t_scales, &b.t_gs};
  CHECK(ctx, ingot_nvfp4_gemm(ctx, &ma, &mb, &t_d, ws, ws_bytes, NULL));
  float *h_d = malloc((size_t)(M * N) * sizeof(float));
  example_read(ctx, h_d, d, (size_t)(M * N) * sizeof(float));
  printf("D [%d, %d] = A [%d, %d] x B [%d, %d]^T, workspace %zu bytes\n", M, N, M, K, N, K,
         ws_bytes);

  /* ---- check 1: A's bytes decoded by hand = ingot_nvfp4_dequantize ------ */
  float *deq_a = dequantize(ctx, &a), *deq_b = dequantize(ctx, &b);
  {
    uint8_t *values = malloc((size_t)(M * K / 2)), *scales = malloc(a.scale_bytes);
    float gs;
    example_read(ctx, values, a.values, (size_t)(M * K / 2));
    example_read(ctx, scales, a.scales, a.scale_bytes);
    example_read(ctx, &gs, a.gs, sizeof gs);
    printf("global scale of A: %g (448 * 6 / amax)\n", (double)gs);
    int64_t bad = 0;
    for (int64_t m = 0; m < M; m++)
      for (int64_t k = 0; k < K; k++) {
        int code = (values[m * (K / 2) + k / 2] >> (4 * (k % 2))) & 15; /* even k: low nibble */
        float sf = e4m3_to_float(scales[ingot_nvfp4_scale_offset(m, k / 16, K)]);
        float want = (e2m1[code] * sf) / gs; /* e2m1 * sf / gs */
        if (deq_a[m * K + k] != want && bad++ == 0)
          fprintf(stderr, "A[%d, %d]: dequantized %g, decoded by hand %g\n", (int)m, (int)k,
                  (double)deq_a[m * K + k], (double)want);
      }
    VERIFY(bad == 0, "%d elements of A differ from their hand decoding", (int)bad);
    free(values), free(scales);
  }

  /* ---- check 2: D = dequant(A) x dequant(B)^T up to fp32 rounding --------- *
   * ---- check 3: D is close to the unquantized product x_a x_b^T ----------- */
  double max_err = 0.0, worst_ratio = 0.0, q_err2 = 0.0, ref2 = 0.0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double ref = 0.0, mag = 0.0, exact = 0.0;
      for (int k = 0; k < K; k++) {
        double p = (double)deq_a[m * K + k] * (double)deq_b[n * K + k];
        ref += p;
        mag += fabs(p);
        exact += (double)x_a[m * K + k] * (double)x_b[n * K + k];
      }
      double got = (double)h_d[m * N + n], err = fabs(got - ref);
      if (err > max_err) max_err = err;
      /* fp32 accumulation in any order stays within ~K * 2^-24 of sum |a b|. */
      if (err / (1e-4 * mag + 1e-30) > worst_ratio) worst_ratio = err / (1e-4 * mag + 1e-30);
      q_err2 += (got - exact) * (got - exact);
      ref2 += exact * exact;
    }
  double q_err = sqrt(q_err2 / ref2);
  printf("D[0, 0:4] = %+.4f %+.4f %+.4f %+.4f\n", (double)h_d[0], (double)h_d[1], (double)h_d[2],
         (double)h_d[3]);
  printf("max |D - dequant(A) dequant(B)^T| = %.3g (bound used: 1e-4 * sum_k |a b|)\n", max_err);
  printf("relative error of D against the fp32 product (quantization): %.4f\n", q_err);
  VERIFY(worst_ratio <= 1.0, "D differs from the matmul of the dequantized inputs by %.3g",
         max_err);
  VERIFY(q_err < 0.25, "quantization error %.3f: far more than NVFP4's", q_err);

  free(x_a), free(x_b), free(h_d), free(deq_a), free(deq_b);
  example_free(ctx, ws);
  example_free(ctx, d);
  nvfp4_free(ctx, &a);
  nvfp4_free(ctx, &b);
  return example_finish(ctx);
}
