/*
 * `ingot bench` cases for the NVFP4 GEMM and the fused gate/up + GeGLU +
 * re-quantize (include/ingot/ingot.h, "NVFP4 GEMM and the fused gate/up +
 * GeGLU MLP"), with cuBLAS bf16 GEMMs of the same shapes as the baseline.
 *
 * Shapes (pi0.5's Gemma-2B language MLP, hidden K = 2048, H = 16384):
 *   gemm  gate/up  [M, 2048] x [32768, 2048]^T -> bf16 [M, 32768]
 *   geglu          [M, 2048] x [32768, 2048]^T -> NVFP4 h [M, 16384]
 *   gemm  down     [M, 16384] x [2048, 16384]^T -> bf16 [M, 2048]
 *   cublas_bf16    the same two GEMMs in bf16 (cublasGemmEx, TN, fp32
 *                  compute, bf16 out), when the tool is built with cuBLAS
 * for M in {1, 16, 64, 128, 256, 784, 816, 880, 968}.
 *
 * Inputs: random value bytes (every E2M1 code), random block scales in
 * [0x28, 0x48] (E4M3 0.25 .. 4), global scales 4 and sqrt(605 K) / 6, so that
 * alpha * acc has a standard deviation of about 1.5 (GeGLU's realistic range),
 * h's global scale 2688 / 16; cuBLAS inputs
 * random bf16 in +-[1, 2). Each slot has its own A and B (the weights do not
 * sit in L2 between calls).
 *
 * Floors: bytes = A and B values + scales read once, the output written
 * once; FLOPs = 2 M N K over the bf16 matrix rate measured in the same run
 * (cuBLAS bf16 [8192]^3, random data; without cuBLAS no FLOP floor). The
 * table's %floor is therefore the fraction of the measured bf16 matrix rate
 * (compute-bound shapes) or of the copy rate (M = 1, 16).
 *
 * Checks: the op on the GPU against the CPU reference on a sample (the first,
 * the last and 4 random rows of A, 64 random rows of B, as sub-matrices):
 * GEMM relative L2 < 1e-3 against the CPU result rounded to bf16; GeGLU:
 * >= 99.9% identical codes on those rows. CPU mode (--cpu) skips these
 * shapes (minutes per reference call).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef INGOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef INGOT_BENCH_CUBLAS
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef" /* cuda_fp16.h tests __cplusplus in C */
#endif
#include <cublas_v2.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#endif

enum { OP_GEMM, OP_GEGLU, OP_CUBLAS, OP_COUNT };

static const char *const op_names[OP_COUNT] = {"gemm", "geglu", "cublas_bf16"};

typedef struct gemm_params {
  int op;
  int64_t m, n, k; /* geglu: n = 2H */
} gemm_params;

/* ---- the measured matrix rate (cuBLAS bf16 8192^3), once per run ------------------------ */

static double matrix_rate; /* FLOP/s; 0 unknown */

#ifdef INGOT_BENCH_CUBLAS
static cublasHandle_t cublas;
static void *cublas_ws;
#define CUBLAS_WS_BYTES (32u << 20)

static int cublas_init(bench_env *env) {
  if (cublas) return BENCH_OK;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return bench_fail(env, "cublasCreate failed");
  cublas_ws = bench_alloc_run(env, BENCH_MEM_DEVICE, CUBLAS_WS_BYTES);
  if (!cublas_ws) return BENCH_FAIL;
  return BENCH_OK;
}

/* D [m, n] bf16 = A [m, k] x B [n, k]^T, row-major (cuBLAS: column-major TN). */
static cublasStatus_t cublas_gemm(bench_env *env, const void *a, const void *b, void *d, int64_t m,
                                  int64_t n, int64_t k) {
  const float alpha = 1.0f, beta = 0.0f;
  cublasSetStream(cublas, (cudaStream_t)env->stream);
  cublasSetWorkspace(cublas, cublas_ws, CUBLAS_WS_BYTES); /* SetStream resets it */
  return cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, b,
                      CUDA_R_16BF, (int)k, a, CUDA_R_16BF, (int)k, &beta, d, CUDA_R_16BF, (int)n,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static void fill_bf16(bench_rng *rng, uint16_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = bench_rand(rng);
    p[i] = (uint16_t)(0x3f80u | (r & 0x7fu) | ((r >> 8) & 1u) << 15); /* +-[1, 2) */
  }
}

static int measure_matrix_rate(bench_env *env) {
  if (matrix_rate > 0 || env->cpu_mode) return BENCH_OK;
  if (cublas_init(env)) return BENCH_FAIL;
  const int64_t s = 8192;
  const size_t bytes = (size_t)(s * s) * 2;
  uint16_t *h = malloc(bytes);
  void *a = bench_alloc_run(env, BENCH_MEM_DEVICE, bytes);
  void *b = bench_alloc_run(env, BENCH_MEM_DEVICE, bytes);
  void *d = bench_alloc_run(env, BENCH_MEM_DEVICE, bytes);
  if (!h || !a || !b || !d) {
    free(h);
    return bench_fail(env, "out of memory for the matrix-rate probe");
  }
  bench_rng rng = bench_rng_seed("matrix rate", 1);
  fill_bf16(&rng, h, (size_t)(s * s));
  int r = bench_upload(env, a, h, bytes);
  fill_bf16(&rng, h, (size_t)(s * s));
  if (!r) r = bench_upload(env, b, h, bytes);
  free(h);
  if (r) return r;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (int i = 0; i < 3; i++) cublas_gemm(env, a, b, d, s, s, s);
  double t[10];
  for (int i = 0; i < 10; i++) {
    cudaEventRecord(e0, (cudaStream_t)env->stream);
    cublas_gemm(env, a, b, d, s, s, s);
    cudaEventRecord(e1, (cudaStream_t)env->stream);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    t[i] = (double)ms * 1e-3;
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  matrix_rate = 2.0 * (double)s * (double)s * (double)s / bench_median(t, 10);
  printf("matrix : cuBLAS bf16 [8192]^3 on random data: %.1f TFLOP/s (the FLOP floor below)\n",
         matrix_rate * 1e-12);
  return BENCH_OK;
}
#endif

/* ---- a case ---------------------------------------------------------------------------------- */

typedef struct gemm_state {
  gemm_params p;
  int slots;
  int64_t a_sr, a_sc, b_sr, b_sc, h_sr, h_sc;
  size_t a_vb, a_sb, b_vb, b_sb, a_slot, b_slot; /* bytes; slot strides (256-aligned) */
  uint8_t *a, *b;      /* [slots] values then scales; cuBLAS: bf16 matrices */
  float *gs;           /* [3]: gsA, gsB, gsH */
  void *d;             /* gemm out bf16 [M, N] / cuBLAS out */
  uint8_t *hv, *hs;    /* geglu out */
  void *ws;
  size_t ws_bytes;
  uint8_t *h_a, *h_b;  /* host copies of slot 0 (values then scales) */
  float h_gs[3];
} gemm_state;

static size_t round256(size_t n) { return (n + 255) / 256 * 256; }

static void mat_tensors(ingot_tensor *v, ingot_tensor *s, ingot_tensor *g, uint8_t *base,
                        int64_t rows, int64_t cols, size_t vb, int64_t sr, int64_t sc, float *gs) {
  *v = ingot_tensor_2d(base, INGOT_DTYPE_U8, rows, cols / 2, cols / 2);
  *s = ingot_tensor_1d(base + round256(vb), INGOT_DTYPE_U8, sr * sc);
  *g = ingot_tensor_1d(gs, INGOT_DTYPE_F32, 1);
}

static int gemm_setup(bench_env *env, const void *params, void **state, bench_info *info) {
  const gemm_params *p = (const gemm_params *)params;
  if (env->cpu_mode) return bench_skip(env, "CPU mode: GPU only (minutes per reference call)");
#ifndef INGOT_BENCH_CUBLAS
  if (p->op == OP_CUBLAS) return bench_skip(env, "built without cuBLAS");
#else
  if (measure_matrix_rate(env)) return BENCH_FAIL;
#endif
  gemm_state *s = (gemm_state *)bench_alloc(env, BENCH_MEM_HOST, sizeof *s);
  if (s == NULL) return BENCH_FAIL;
  memset(s, 0, sizeof *s);
  s->p = *p;
  const int64_t m = p->m, n = p->n, k = p->k;
  const double flops = 2.0 * (double)m * (double)n * (double)k;
  bench_rng rng = bench_rng_seed(op_names[p->op], (uint64_t)(m * 1000003 + n * 31 + k));
  if (p->op == OP_CUBLAS) {
    s->a_slot = round256((size_t)(m * k) * 2);
    s->b_slot = round256((size_t)(n * k) * 2);
    s->slots = bench_slots_for(env, (double)(s->a_slot + s->b_slot));
    s->a = bench_alloc(env, BENCH_MEM_DEVICE, s->a_slot * (size_t)s->slots);
    s->b = bench_alloc(env, BENCH_MEM_DEVICE, s->b_slot * (size_t)s->slots);
    s->d = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)(m * n) * 2);
    if (!s->a || !s->b || !s->d) return BENCH_FAIL;
#ifdef INGOT_BENCH_CUBLAS
    uint16_t *h = malloc(s->b_slot > s->a_slot ? s->b_slot : s->a_slot);
    if (!h) return bench_fail(env, "out of host memory");
    for (int sl = 0; sl < s->slots; sl++) {
      fill_bf16(&rng, h, (size_t)(m * k));
      if (bench_upload(env, s->a + (size_t)sl * s->a_slot, h, (size_t)(m * k) * 2)) break;
      fill_bf16(&rng, h, (size_t)(n * k));
      if (bench_upload(env, s->b + (size_t)sl * s->b_slot, h, (size_t)(n * k) * 2)) break;
    }
    free(h);
    if (cublas_init(env)) return BENCH_FAIL;
#endif
    info->bytes_device = (double)(m * k + n * k + m * n) * 2.0;
    snprintf(info->floor_note, sizeof info->floor_note,
             "bf16 A, B read + bf16 D written; %.3g GFLOP at the measured bf16 matrix rate",
             flops * 1e-9);
  } else {
    ingot_nvfp4_scale_shape(m, k, &s->a_sr, &s->a_sc);
    ingot_nvfp4_scale_shape(n, k, &s->b_sr, &s->b_sc);
    s->a_vb = (size_t)(m * k / 2), s->a_sb = (size_t)(s->a_sr * s->a_sc);
    s->b_vb = (size_t)(n * k / 2), s->b_sb = (size_t)(s->b_sr * s->b_sc);
    s->a_slot = round256(s->a_vb) + round256(s->a_sb);
    s->b_slot = round256(s->b_vb) + round256(s->b_sb);
    s->slots = bench_slots_for(env, (double)(s->a_slot + s->b_slot));
    s->a = bench_alloc(env, BENCH_MEM_DEVICE, s->a_slot * (size_t)s->slots);
    s->b = bench_alloc(env, BENCH_MEM_DEVICE, s->b_slot * (size_t)s->slots);
    s->gs = bench_alloc(env, BENCH_MEM_DEVICE, 3 * sizeof(float));
    s->h_a = bench_alloc(env, BENCH_MEM_HOST, s->a_slot);
    s->h_b = bench_alloc(env, BENCH_MEM_HOST, s->b_slot);
    if (!s->a || !s->b || !s->gs || !s->h_a || !s->h_b) return BENCH_FAIL;
    /* alpha * acc ~ N(0, 1.5^2): acc has a standard deviation of about
     * sqrt(605 K) here (E[a^2] = E[e2m1^2] E[sf^2] = 8.56 * 2.87 for uniform
     * codes and scale bytes 0x28..0x48, i.e. 0.25 .. 4) */
    s->h_gs[0] = 4.0f;
    s->h_gs[1] = (float)(sqrt((double)k * 605.0) / 1.5 / 4.0);
    s->h_gs[2] = 2688.0f / 16.0f;
    if (bench_upload(env, s->gs, s->h_gs, sizeof s->h_gs)) return BENCH_FAIL;
    for (int sl = 0; sl < s->slots; sl++) {
      uint8_t *parts[2] = {s->h_a, s->h_b};
      size_t vbs[2] = {s->a_vb, s->b_vb};
      for (int w = 0; w < 2; w++) {
        memset(parts[w], 0, w ? s->b_slot : s->a_slot);
        bench_rand_fill(&rng, parts[w], vbs[w]);
        uint8_t *sc = parts[w] + round256(vbs[w]);
        const int64_t rows = w ? n : m;
        for (int64_t r = 0; r < rows; r++)
          for (int64_t c = 0; c < k / 16; c++)
            sc[ingot_nvfp4_scale_offset(r, c, k)] = (uint8_t)(0x28 + bench_rand_below(&rng, 0x21));
      }
      if (bench_upload(env, s->a + (size_t)sl * s->a_slot, s->h_a, s->a_slot)) return BENCH_FAIL;
      if (bench_upload(env, s->b + (size_t)sl * s->b_slot, s->h_b, s->b_slot)) return BENCH_FAIL;
    }
    /* slot 0 again in the host copies */
    {
      bench_rng r0 = bench_rng_seed(op_names[p->op], (uint64_t)(m * 1000003 + n * 31 + k));
      uint8_t *parts[2] = {s->h_a, s->h_b};
      size_t vbs[2] = {s->a_vb, s->b_vb};
      for (int w = 0; w < 2; w++) {
        memset(parts[w], 0, w ? s->b_slot : s->a_slot);
        bench_rand_fill(&r0, parts[w], vbs[w]);
        uint8_t *sc = parts[w] + round256(vbs[w]);
        const int64_t rows = w ? n : m;
        for (int64_t r = 0; r < rows; r++)
          for (int64_t c = 0; c < k / 16; c++)
            sc[ingot_nvfp4_scale_offset(r, c, k)] = (uint8_t)(0x28 + bench_rand_below(&r0, 0x21));
      }
    }
    double out_bytes;
    if (p->op == OP_GEMM) {
      s->d = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)(m * n) * 2);
      if (!s->d) return BENCH_FAIL;
      ingot_status st = ingot_nvfp4_gemm_workspace_size(env->ctx, m, n, k, &s->ws_bytes);
      if (st) return bench_status(env, env->ctx, st, "ingot_nvfp4_gemm_workspace_size");
      out_bytes = (double)(m * n) * 2.0;
    } else {
      ingot_nvfp4_scale_shape(m, n / 2, &s->h_sr, &s->h_sc);
      s->hv = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)(m * n / 4));
      s->hs = bench_alloc(env, BENCH_MEM_DEVICE, (size_t)(s->h_sr * s->h_sc));
      if (!s->hv || !s->hs) return BENCH_FAIL;
      ingot_status st = ingot_nvfp4_geglu_workspace_size(env->ctx, m, n / 2, k, &s->ws_bytes);
      if (st) return bench_status(env, env->ctx, st, "ingot_nvfp4_geglu_workspace_size");
      out_bytes = (double)(m * n / 4) + (double)(s->h_sr * s->h_sc);
    }
    if (s->ws_bytes) {
      s->ws = bench_alloc(env, BENCH_MEM_DEVICE, s->ws_bytes);
      if (!s->ws) return BENCH_FAIL;
    }
    info->bytes_device = (double)(s->a_vb + s->a_sb + s->b_vb + s->b_sb) + out_bytes;
    snprintf(info->floor_note, sizeof info->floor_note,
             "NVFP4 A, B (values + scales) read + %s written; %.3g GFLOP at the measured bf16 "
             "matrix rate; workspace %zu B",
             p->op == OP_GEMM ? "bf16 D" : "NVFP4 h", flops * 1e-9, s->ws_bytes);
  }
  info->slots = s->slots;
  info->floor_extra_s = matrix_rate > 0 ? flops / matrix_rate : 0;
  info->flops = flops;
  *state = s;
  return BENCH_OK;
}

static ingot_status gemm_run(bench_env *env, void *state, int slot) {
  gemm_state *s = (gemm_state *)state;
  const int64_t m = s->p.m, n = s->p.n, k = s->p.k;
  uint8_t *a = s->a + (size_t)slot * s->a_slot, *b = s->b + (size_t)slot * s->b_slot;
  if (s->p.op == OP_CUBLAS) {
#ifdef INGOT_BENCH_CUBLAS
    return cublas_gemm(env, a, b, s->d, m, n, k) == CUBLAS_STATUS_SUCCESS ? INGOT_STATUS_SUCCESS
                                                                            : INGOT_STATUS_INTERNAL;
#else
    return INGOT_STATUS_NOT_SUPPORTED;
#endif
  }
  ingot_tensor av, as, ag, bv, bs, bg;
  mat_tensors(&av, &as, &ag, a, m, k, s->a_vb, s->a_sr, s->a_sc, s->gs);
  mat_tensors(&bv, &bs, &bg, b, n, k, s->b_vb, s->b_sr, s->b_sc, s->gs + 1);
  ingot_nvfp4_matrix ma = {&av, &as, &ag}, mb = {&bv, &bs, &bg};
  if (s->p.op == OP_GEMM) {
    ingot_tensor d = ingot_tensor_2d(s->d, INGOT_DTYPE_BF16, m, n, n);
    return ingot_nvfp4_gemm(env->ctx, &ma, &mb, &d, s->ws, s->ws_bytes, env->stream);
  }
  ingot_tensor hv = ingot_tensor_2d(s->hv, INGOT_DTYPE_U8, m, n / 4, n / 4);
  ingot_tensor hs = ingot_tensor_1d(s->hs, INGOT_DTYPE_U8, s->h_sr * s->h_sc);
  ingot_tensor hg = ingot_tensor_1d(s->gs + 2, INGOT_DTYPE_F32, 1);
  ingot_nvfp4_matrix mh = {&hv, &hs, &hg};
  return ingot_nvfp4_geglu(env->ctx, &ma, &mb, &mh, s->ws, s->ws_bytes, env->stream);
}

/* fp32 -> bf16 -> fp32, nearest even (finite inputs). */
static float bf16_round(float f) {
  const uint32_t u = (uint32_t)bench_bf16_of(f) << 16;
  memcpy(&f, &u, 4);
  return f;
}

/* Rows idx of a host matrix (values then scales at round256(vb)) as a new one. */
static void sub_rows(const uint8_t *src, size_t vb, int64_t k, const int64_t *idx, int64_t n,
                     uint8_t *dv, uint8_t *ds) {
  for (int64_t i = 0; i < n; i++) {
    memcpy(dv + i * (k / 2), src + idx[i] * (k / 2), (size_t)(k / 2));
    for (int64_t c = 0; c < k / 16; c++)
      ds[ingot_nvfp4_scale_offset(i, c, k)] = src[round256(vb) + (size_t)ingot_nvfp4_scale_offset(idx[i], c, k)];
  }
}

static int gemm_check(bench_env *env, void *state) {
  gemm_state *s = (gemm_state *)state;
  const int64_t m = s->p.m, n = s->p.n, k = s->p.k;
  if (s->p.op == OP_CUBLAS) {
    ingot_status st = gemm_run(env, s, 0);
    if (st) return bench_fail(env, "cublasGemmEx failed");
    return bench_sync(env);
  }
  ingot_status st = gemm_run(env, s, 0);
  if (st) return bench_status(env, env->ctx, st, "op");
  if (bench_sync(env)) return BENCH_FAIL;
  /* the sample: rows of A and of B */
  const int64_t ra = m < 6 ? m : 6, rb = 64;
  int64_t ia[6], ib[64];
  bench_rng rng = bench_rng_seed("check", (uint64_t)(m + n + k));
  for (int64_t i = 0; i < ra; i++) ia[i] = i == 0 ? 0 : i == 1 ? m - 1 : (int64_t)bench_rand_below(&rng, (uint64_t)m);
  /* geglu: B rows in gate/up pairs (h columns 16-aligned blocks: 2 blocks of 16) */
  if (s->p.op == OP_GEGLU) {
    for (int blk = 0; blk < 2; blk++) {
      int64_t j0 = (int64_t)bench_rand_below(&rng, (uint64_t)(n / 32)) * 16;
      for (int64_t j = 0; j < 16; j++) ib[blk * 32 + 2 * j] = 2 * (j0 + j), ib[blk * 32 + 2 * j + 1] = 2 * (j0 + j) + 1;
    }
  } else {
    for (int64_t j = 0; j < rb; j++) ib[j] = j == 0 ? n - 1 : (int64_t)bench_rand_below(&rng, (uint64_t)n);
  }
  int64_t sa_r, sa_c, sb_r, sb_c;
  ingot_nvfp4_scale_shape(ra, k, &sa_r, &sa_c);
  ingot_nvfp4_scale_shape(rb, k, &sb_r, &sb_c);
  uint8_t *av = calloc((size_t)(ra * k / 2), 1), *as = calloc((size_t)(sa_r * sa_c), 1);
  uint8_t *bv = calloc((size_t)(rb * k / 2), 1), *bs = calloc((size_t)(sb_r * sb_c), 1);
  sub_rows(s->h_a, s->a_vb, k, ia, ra, av, as);
  sub_rows(s->h_b, s->b_vb, k, ib, rb, bv, bs);
  ingot_tensor tav = ingot_tensor_2d(av, INGOT_DTYPE_U8, ra, k / 2, k / 2);
  ingot_tensor tas = ingot_tensor_1d(as, INGOT_DTYPE_U8, sa_r * sa_c);
  ingot_tensor tag = ingot_tensor_1d(&s->h_gs[0], INGOT_DTYPE_F32, 1);
  ingot_tensor tbv = ingot_tensor_2d(bv, INGOT_DTYPE_U8, rb, k / 2, k / 2);
  ingot_tensor tbs = ingot_tensor_1d(bs, INGOT_DTYPE_U8, sb_r * sb_c);
  ingot_tensor tbg = ingot_tensor_1d(&s->h_gs[1], INGOT_DTYPE_F32, 1);
  ingot_nvfp4_matrix ma = {&tav, &tas, &tag}, mb = {&tbv, &tbs, &tbg};
  int r = BENCH_OK;
  if (s->p.op == OP_GEMM) {
    float *want = malloc(sizeof(float) * (size_t)(ra * rb));
    ingot_tensor td = ingot_tensor_2d(want, INGOT_DTYPE_F32, ra, rb, rb);
    size_t wb = 0;
    ingot_nvfp4_gemm_workspace_size(env->ref, ra, rb, k, &wb);
    void *ws = wb ? malloc(wb) : NULL;
    st = ingot_nvfp4_gemm(env->ref, &ma, &mb, &td, ws, wb, NULL);
    free(ws);
    r = bench_status(env, env->ref, st, "reference");
    uint16_t *got = malloc((size_t)(m * n) * 2);
    if (!r) r = bench_download(env, got, s->d, (size_t)(m * n) * 2);
    double num = 0, den = 0;
    for (int64_t i = 0; i < ra && !r; i++)
      for (int64_t j = 0; j < rb; j++) {
        uint32_t gb = (uint32_t)got[ia[i] * n + ib[j]] << 16;
        float g;
        memcpy(&g, &gb, 4);
        double w = (double)bf16_round(want[i * rb + j]);
        num += ((double)g - w) * ((double)g - w), den += w * w;
      }
    if (!r && !(sqrt(num / den) < 1e-3))
      r = bench_fail(env, "relative L2 %.3g vs the CPU on the sample", sqrt(num / den));
    free(got), free(want);
  } else {
    const int64_t hid = rb / 2;
    int64_t hr, hc;
    ingot_nvfp4_scale_shape(ra, hid, &hr, &hc);
    uint8_t *cv = malloc((size_t)(ra * hid / 2)), *cs = malloc((size_t)(hr * hc));
    ingot_tensor chv = ingot_tensor_2d(cv, INGOT_DTYPE_U8, ra, hid / 2, hid / 2);
    ingot_tensor chs = ingot_tensor_1d(cs, INGOT_DTYPE_U8, hr * hc);
    ingot_tensor chg = ingot_tensor_1d(&s->h_gs[2], INGOT_DTYPE_F32, 1);
    ingot_nvfp4_matrix mh = {&chv, &chs, &chg};
    size_t wb = 0;
    ingot_nvfp4_geglu_workspace_size(env->ref, ra, hid, k, &wb);
    void *ws = wb ? malloc(wb) : NULL;
    st = ingot_nvfp4_geglu(env->ref, &ma, &mb, &mh, ws, wb, NULL);
    free(ws);
    r = bench_status(env, env->ref, st, "reference");
    uint8_t *gv = malloc((size_t)(m * n / 4));
    if (!r) r = bench_download(env, gv, s->hv, (size_t)(m * n / 4));
    int64_t same = 0, total = 0;
    for (int64_t i = 0; i < ra && !r; i++)
      for (int blk = 0; blk < 2; blk++) {
        const int64_t hcol0 = ib[blk * 32] / 2; /* first h column of the block */
        for (int64_t e = 0; e < 16; e++) {
          unsigned g = (gv[ia[i] * (n / 4) + (hcol0 + e) / 2] >> (4 * ((hcol0 + e) & 1))) & 15u;
          unsigned c = (cv[i * (hid / 2) + (blk * 16 + e) / 2] >> (4 * (e & 1))) & 15u;
          same += g == c, total++;
        }
      }
    if (!r && (double)same < 0.999 * (double)total)
      r = bench_fail(env, "only %" PRId64 " of %" PRId64 " h codes equal the CPU's", same, total);
    free(gv), free(cv), free(cs);
  }
  free(av), free(as), free(bv), free(bs);
  return r;
}

static const bench_ops gemm_ops = {gemm_setup, gemm_run, gemm_check, NULL};

/* ---- registration ------------------------------------------------------------------------------ */

void bench_nvfp4_gemm_register(bench_registry *reg) {
  static const int64_t ms[] = {1, 16, 64, 128, 256, 784, 816, 880, 968};
  char name[160];
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
    const int64_t m = ms[i];
    gemm_params g = {OP_GEGLU, m, 32768, 2048};
    snprintf(name, sizeof name, "[%" PRId64 ", 2048] x W[32768, 2048] -> h[%" PRId64 ", 16384]", m, m);
    bench_add(reg, "nvfp4_gemm", op_names[OP_GEGLU], name, &gemm_ops, &g, sizeof g);
    gemm_params up = {OP_GEMM, m, 32768, 2048};
    snprintf(name, sizeof name, "gate/up [%" PRId64 ", 2048] x [32768, 2048] bf16 out", m);
    bench_add(reg, "nvfp4_gemm", op_names[OP_GEMM], name, &gemm_ops, &up, sizeof up);
    gemm_params cu = {OP_CUBLAS, m, 32768, 2048};
    snprintf(name, sizeof name, "gate/up [%" PRId64 ", 2048] x [32768, 2048] bf16 out", m);
    bench_add(reg, "nvfp4_gemm", op_names[OP_CUBLAS], name, &gemm_ops, &cu, sizeof cu);
    gemm_params dn = {OP_GEMM, m, 2048, 16384};
    snprintf(name, sizeof name, "down [%" PRId64 ", 16384] x [2048, 16384] bf16 out", m);
    bench_add(reg, "nvfp4_gemm", op_names[OP_GEMM], name, &gemm_ops, &dn, sizeof dn);
    gemm_params cd = {OP_CUBLAS, m, 2048, 16384};
    snprintf(name, sizeof name, "down [%" PRId64 ", 16384] x [2048, 16384] bf16 out", m);
    bench_add(reg, "nvfp4_gemm", op_names[OP_CUBLAS], name, &gemm_ops, &cd, sizeof cd);
  }
}
