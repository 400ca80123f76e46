/*
 * PLE on CUDA against the CPU reference, byte for byte: row ids, context
 * roll, gather (every table dtype, device and pinned-host residency,
 * vectorized and scalar paths) and the fused op; the same in the
 * INGOT_FORCE_REFERENCE mode; CUDA-graph capture and replay with new inputs;
 * cu_seqlens checked on the device; residency errors. Skipped (exit 77)
 * without a GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ngram_cases.h"
#include "test_util.h"

#ifndef INGOT_WITH_CUDA
int main(void) {
  test_init("test_ngram_cuda");
  printf("SKIPPED test_ngram_cuda: built without CUDA\n");
  return TEST_SKIP_CODE;
}
#else
#include <cuda_runtime_api.h>

#include "test_cuda.h"

static ingot_context_t cpu, gpu, gpu_ref;
static cudaStream_t stream;

static void *dev_copy(const void *host, size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) return NULL;
  if (bytes) test_upload(d, host, bytes);
  return d;
}

static void *host_copy(const void *dev, size_t bytes) {
  void *h = malloc(bytes ? bytes : 1);
  if (bytes) cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost);
  return h;
}

/* A batch on both sides: host buffers for the CPU context, device copies. */
typedef struct two_sided {
  ingot_dtype id_dt, cu_dt;
  int64_t T, B, w;
  void *h_ids, *h_cu, *h_ctx, *d_ids, *d_cu, *d_ctx;
  ingot_tensor h_tids, h_tcu, h_tctx, d_tids, d_tcu, d_tctx;
} two_sided;

static void two_sided_make(two_sided *s, const ngram_case *c, ingot_dtype id_dt,
                           ingot_dtype cu_dt) {
  memset(s, 0, sizeof *s);
  s->id_dt = id_dt;
  s->cu_dt = cu_dt;
  s->T = c->T;
  s->B = c->B;
  s->w = c->n - 1;
  size_t es = ingot_dtype_size(id_dt), cs = ingot_dtype_size(cu_dt);
  s->h_ids = ngram_pack(c->ids, c->T, id_dt);
  s->h_cu = ngram_pack(c->cu, c->B + 1, cu_dt);
  s->h_ctx = ngram_pack(c->context, c->B * s->w, id_dt);
  s->d_ids = dev_copy(s->h_ids, (size_t)c->T * es);
  s->d_cu = dev_copy(s->h_cu, (size_t)(c->B + 1) * cs);
  s->d_ctx = dev_copy(s->h_ctx, (size_t)(c->B * s->w) * es);
  s->h_tids = ingot_tensor_1d(s->h_ids, id_dt, c->T);
  s->h_tcu = ingot_tensor_1d(s->h_cu, cu_dt, c->B + 1);
  s->h_tctx = ingot_tensor_2d(s->h_ctx, id_dt, c->B, s->w, s->w);
  s->d_tids = ingot_tensor_1d(s->d_ids, id_dt, c->T);
  s->d_tcu = ingot_tensor_1d(s->d_cu, cu_dt, c->B + 1);
  s->d_tctx = ingot_tensor_2d(s->d_ctx, id_dt, c->B, s->w, s->w);
}

static void two_sided_free(two_sided *s) {
  free(s->h_ids), free(s->h_cu), free(s->h_ctx);
  cudaFree(s->d_ids), cudaFree(s->d_cu), cudaFree(s->d_ctx);
}

/* ---- row ids ------------------------------------------------------------------ */

static int compare_row_ids(ingot_context_t g, const ingot_ngram_config *cfg, two_sided *s,
                           const char *what) {
  int64_t H = cfg->num_heads, stride = H + (int64_t)(test_rand() % 2);
  size_t bytes = (size_t)(s->T > 0 ? s->T : 1) * (size_t)stride * 8;
  int64_t *h_rows = malloc(bytes);
  memset(h_rows, 0x3c, bytes);
  int64_t *d_rows = dev_copy(h_rows, bytes);
  ingot_tensor th = ingot_tensor_2d(h_rows, INGOT_DTYPE_I64, s->T, H, stride);
  ingot_tensor td = ingot_tensor_2d(d_rows, INGOT_DTYPE_I64, s->T, H, stride);
  EXPECT_OK(cpu, ingot_ngram_row_ids(cpu, cfg, &s->h_tids, &s->h_tcu, &s->h_tctx, &th, NULL));
  EXPECT_OK(g, ingot_ngram_row_ids(g, cfg, &s->d_tids, &s->d_tcu, &s->d_tctx, &td, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  int64_t *got = host_copy(d_rows, bytes);
  int bad = memcmp(got, h_rows, bytes) != 0;
  EXPECT(!bad, "%s: CUDA rows != CPU rows (n=%d hpn=%d B=%" PRId64 " T=%" PRId64 " ids %s cu %s)",
         what, cfg->n, cfg->heads_per_order, s->B, s->T, ingot_dtype_name(s->id_dt),
         ingot_dtype_name(s->cu_dt));
  free(got), free(h_rows);
  cudaFree(d_rows);
  return bad;
}

static int test_row_ids_random(void) {
  for (int iter = 0; iter < 150; iter++) {
    int n = (int)test_rand_range(2, INGOT_NGRAM_MAX_N);
    int max_hpn = INGOT_NGRAM_MAX_HEADS / (n - 1);
    int hpn = (int)test_rand_range(1, max_hpn < 8 ? max_hpn : 8);
    ingot_dtype id_dt = test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64;
    ingot_dtype cu_dt = test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64;
    int64_t E = ngram_random_token(id_dt, 0);
    ingot_ngram_config cfg = ngram_random_config(n, hpn, E, INT64_MAX / 128);
    if (iter % 5 == 0) { /* one head whose modulus may reach INT64_MAX */
      n = 2;
      cfg = ngram_random_config(2, 1, E, INT64_MAX);
    }
    ngram_case c = ngram_random_case(n, test_rand_range(0, 300), 40, id_dt, E);
    two_sided s;
    two_sided_make(&s, &c, id_dt, cu_dt);
    compare_row_ids(iter & 1 ? gpu : gpu_ref, &cfg, &s, iter & 1 ? "row_ids" : "row_ids (reference)");
    two_sided_free(&s);
    ngram_case_free(&c);
  }
  return 0;
}

static int test_row_ids_large(void) {
  /* 65536 tokens, real geometry: prefill + decodes in one batch */
  ingot_ngram_config cfg;
  EXPECT_OK(NULL, ingot_ngram_config_derive(248320, 3, 8, 20000000, 1234, 0, 248044, &cfg));
  for (int d = 0; d < 2; d++) {
    ingot_dtype dt = d ? INGOT_DTYPE_I64 : INGOT_DTYPE_I32;
    ngram_case c = ngram_random_case(3, 2000, 64, dt, 248044);
    /* top up to exactly 65536 tokens with one long last request */
    int64_t extra = 65536 - c.T;
    if (extra > 0) {
      c.cu[c.B] += extra;
      c.T = 65536;
      c.ids = realloc(c.ids, 65536 * sizeof(int64_t));
      for (int64_t t = c.T - extra; t < c.T; t++) c.ids[t] = ngram_random_token(dt, 248044);
    }
    two_sided s;
    two_sided_make(&s, &c, dt, INGOT_DTYPE_I32);
    compare_row_ids(gpu, &cfg, &s, "65536 tokens");
    compare_row_ids(gpu_ref, &cfg, &s, "65536 tokens (reference)");
    two_sided_free(&s);
    ngram_case_free(&c);
  }
  return 0;
}

/* ---- context roll ------------------------------------------------------------------ */

static int test_commit_random(void) {
  for (int iter = 0; iter < 80; iter++) {
    int n = (int)test_rand_range(2, INGOT_NGRAM_MAX_N);
    ingot_dtype id_dt = test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64;
    ingot_dtype cu_dt = test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64;
    ingot_ngram_config cfg = ngram_random_config(n, 1, 0, 1000);
    ngram_case c = ngram_random_case(n, test_rand_range(1, 600), 12, id_dt, 0);
    two_sided s;
    two_sided_make(&s, &c, id_dt, cu_dt);
    ingot_context_t g = iter & 1 ? gpu : gpu_ref;
    EXPECT_OK(cpu, ingot_ngram_commit_context(cpu, &cfg, &s.h_tids, &s.h_tcu, &s.h_tctx, NULL));
    EXPECT_OK(g, ingot_ngram_commit_context(g, &cfg, &s.d_tids, &s.d_tcu, &s.d_tctx, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    size_t bytes = (size_t)(c.B * s.w) * ingot_dtype_size(id_dt);
    void *got = host_copy(s.d_ctx, bytes);
    EXPECT(memcmp(got, s.h_ctx, bytes) == 0, "commit: CUDA context != CPU (n=%d B=%" PRId64 ")", n, c.B);
    free(got);
    two_sided_free(&s);
    ngram_case_free(&c);
  }
  return 0;
}

/* ---- gather ------------------------------------------------------------------------ */

typedef enum { RES_DEVICE, RES_PINNED, RES_REGISTERED } residency;
static const char *residency_name(residency r) {
  return r == RES_DEVICE ? "device" : r == RES_PINNED ? "pinned host" : "registered host";
}

/* A table's bytes on the host (for the CPU) and where the GPU reads it. */
typedef struct table_copy {
  void *host, *gpu_ptr, *owned;
  residency res;
} table_copy;

static int table_make(table_copy *t, residency res, const void *bytes, size_t n) {
  t->res = res;
  t->host = malloc(n + 1);
  memcpy(t->host, bytes, n);
  t->owned = NULL;
  switch (res) {
    case RES_DEVICE: t->gpu_ptr = t->owned = dev_copy(bytes, n); break;
    case RES_PINNED:
      if (cudaHostAlloc(&t->owned, n + 1, cudaHostAllocMapped) != cudaSuccess) return 1;
      memcpy(t->owned, bytes, n);
      t->gpu_ptr = t->owned; /* the host pointer, read over UVA */
      break;
    case RES_REGISTERED:
      t->owned = malloc(n + 4096);
      memcpy(t->owned, bytes, n);
      if (cudaHostRegister(t->owned, n + 1, cudaHostRegisterMapped) != cudaSuccess) return 1;
      t->gpu_ptr = t->owned;
      break;
  }
  return 0;
}

static void table_free(table_copy *t) {
  free(t->host);
  if (t->res == RES_DEVICE) cudaFree(t->owned);
  if (t->res == RES_PINNED) cudaFreeHost(t->owned);
  if (t->res == RES_REGISTERED) {
    cudaHostUnregister(t->owned);
    free(t->owned);
  }
}

static void *random_bytes(size_t n) {
  uint8_t *p = malloc(n + 1);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)test_rand();
  return p;
}

static int test_gather(void) {
  static const ingot_dtype dts[] = {INGOT_DTYPE_F8_E4M3, INGOT_DTYPE_BF16, INGOT_DTYPE_F32};
  static const float scales[] = {1.0f, 0.0625f, 3.7f, 1e-30f, 1e30f, -2.5f, 0.0f};
  for (int iter = 0; iter < 90; iter++) {
    ingot_dtype dt = dts[iter % 3];
    residency res = (residency)((iter / 3) % 3);
    ingot_context_t g = (iter / 9) % 2 ? gpu_ref : gpu;
    float scale = scales[test_rand() % 7];
    /* half the cases on the vectorized path (D = 16k, aligned strides) */
    int vec = test_rand() & 1;
    int64_t D = vec ? 16 * test_rand_range(1, 12) : test_rand_range(1, 70);
    int64_t tstride = vec ? D + 16 * (int64_t)(test_rand() % 2) : D + (int64_t)(test_rand() % 3);
    int64_t R = test_rand_range(1, 5000), T = test_rand_range(1, 300), H = test_rand_range(1, 20);
    int64_t ostride = H * D + (vec ? 16 * (int64_t)(test_rand() % 2) : (int64_t)(test_rand() % 3));
    size_t es = ingot_dtype_size(dt), tbytes = (size_t)(R * tstride) * es;
    void *bytes = random_bytes(tbytes);
    table_copy tab;
    if (table_make(&tab, res, bytes, tbytes)) {
      EXPECT(0, "cannot make a %s table", residency_name(res));
      free(bytes);
      continue;
    }
    int64_t *rows = malloc((size_t)(T * H) * 8);
    for (int64_t i = 0; i < T * H; i++) {
      uint64_t r = test_rand() % 8;
      rows[i] = r == 0 ? -(int64_t)test_rand_range(1, 9) : r == 1 ? R + test_rand_range(0, 2)
                : r == 2 ? INT64_MIN : test_rand_range(0, R - 1);
    }
    int64_t *d_rows = dev_copy(rows, (size_t)(T * H) * 8);
    size_t obytes = (size_t)(T * ostride) * 2;
    uint16_t *h_out = malloc(obytes);
    memset(h_out, 0x77, obytes);
    uint16_t *d_out = dev_copy(h_out, obytes);
    ingot_tensor hr = ingot_tensor_2d(rows, INGOT_DTYPE_I64, T, H, H);
    ingot_tensor dr = ingot_tensor_2d(d_rows, INGOT_DTYPE_I64, T, H, H);
    ingot_tensor ht = ingot_tensor_2d(tab.host, dt, R, D, tstride);
    ingot_tensor dtab = ingot_tensor_2d(tab.gpu_ptr, dt, R, D, tstride);
    ingot_tensor ho = ingot_tensor_2d(h_out, INGOT_DTYPE_BF16, T, H * D, ostride);
    ingot_tensor dout = ingot_tensor_2d(d_out, INGOT_DTYPE_BF16, T, H * D, ostride);
    EXPECT_OK(cpu, ingot_ngram_gather(cpu, &hr, &ht, scale, &ho, NULL));
    EXPECT_OK(g, ingot_ngram_gather(g, &dr, &dtab, scale, &dout, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    uint16_t *got = host_copy(d_out, obytes);
    EXPECT(memcmp(got, h_out, obytes) == 0,
           "gather %s %s table%s D=%" PRId64 " scale %g: CUDA != CPU", ingot_dtype_name(dt),
           residency_name(res), g == gpu_ref ? " (reference)" : "", D, (double)scale);
    free(got), free(h_out), free(rows), free(bytes);
    cudaFree(d_out), cudaFree(d_rows);
    table_free(&tab);
  }
  return 0;
}

static int test_embed(void) {
  static const ingot_dtype dts[] = {INGOT_DTYPE_F8_E4M3, INGOT_DTYPE_BF16, INGOT_DTYPE_F32};
  for (int iter = 0; iter < 60; iter++) {
    ingot_dtype dt = dts[iter % 3];
    residency res = (residency)((iter / 3) % 2); /* device, pinned */
    ingot_context_t g = (iter / 6) % 2 ? gpu_ref : gpu;
    int n = (int)test_rand_range(2, 6);
    ingot_dtype id_dt = test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64;
    int64_t E = ngram_random_token(id_dt, 0);
    ingot_ngram_config cfg = ngram_random_config(n, (int)test_rand_range(1, 4), E, 3000);
    int64_t R = 2000 + test_rand_range(0, 3000); /* some rows beyond the table */
    int64_t D = test_rand() & 1 ? 160 : test_rand_range(1, 50);
    size_t tbytes = (size_t)(R * D) * ingot_dtype_size(dt);
    void *bytes = random_bytes(tbytes);
    table_copy tab;
    if (table_make(&tab, res, bytes, tbytes)) {
      EXPECT(0, "cannot make a table");
      free(bytes);
      continue;
    }
    ngram_case c = ngram_random_case(n, test_rand_range(0, 200), 30, id_dt, E);
    two_sided s;
    two_sided_make(&s, &c, id_dt, test_rand() & 1 ? INGOT_DTYPE_I32 : INGOT_DTYPE_I64);
    int64_t H = cfg.num_heads;
    size_t obytes = (size_t)((c.T > 0 ? c.T : 1) * H * D) * 2;
    uint16_t *h_out = malloc(obytes);
    memset(h_out, 0x66, obytes);
    uint16_t *d_out = dev_copy(h_out, obytes);
    ingot_tensor ht = ingot_tensor_2d(tab.host, dt, R, D, D);
    ingot_tensor dtab = ingot_tensor_2d(tab.gpu_ptr, dt, R, D, D);
    ingot_tensor ho = ingot_tensor_2d(h_out, INGOT_DTYPE_BF16, c.T, H * D, H * D);
    ingot_tensor dout = ingot_tensor_2d(d_out, INGOT_DTYPE_BF16, c.T, H * D, H * D);
    EXPECT_OK(cpu, ingot_ngram_embed(cpu, &cfg, &s.h_tids, &s.h_tcu, &s.h_tctx, &ht, 0.75f, &ho, NULL));
    EXPECT_OK(g, ingot_ngram_embed(g, &cfg, &s.d_tids, &s.d_tcu, &s.d_tctx, &dtab, 0.75f, &dout, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    uint16_t *got = host_copy(d_out, obytes);
    EXPECT(memcmp(got, h_out, obytes) == 0, "embed %s %s D=%" PRId64 " T=%" PRId64 "%s: CUDA != CPU",
           ingot_dtype_name(dt), residency_name(res), D, c.T, g == gpu_ref ? " (reference)" : "");
    free(got), free(h_out), free(bytes);
    cudaFree(d_out);
    table_free(&tab);
    two_sided_free(&s);
    ngram_case_free(&c);
  }
  return 0;
}

/* ---- CUDA graphs ------------------------------------------------------------------- */

/* Captures row_ids + embed + commit for a fixed decode geometry, then replays
 * 3 times with new ids/cu_seqlens written into the captured buffers; each
 * replay must equal the CPU running the same steps. */
static int test_graph_replay(void) {
  ingot_ngram_config cfg;
  EXPECT_OK(NULL, ingot_ngram_config_derive(248320, 3, 8, 1000, 1234, 0, 248044, &cfg));
  const int64_t B = 37, H = cfg.num_heads, D = 160, w = 2;
  int64_t R;
  EXPECT_OK(NULL, ingot_ngram_table_rows(&cfg, 128, &R));
  void *bytes = random_bytes((size_t)(R * D));
  table_copy tab;
  REQUIRE(table_make(&tab, RES_PINNED, bytes, (size_t)(R * D)) == 0, "pinned table");
  /* fixed buffers: B requests, T = 2B tokens (ragged counts vary per replay) */
  const int64_t T = 2 * B;
  int32_t *h_ids = malloc((size_t)T * 4), *h_cu = malloc((size_t)(B + 1) * 4);
  int32_t *h_ctx = malloc((size_t)(B * w) * 4);
  for (int64_t i = 0; i < B * w; i++) h_ctx[i] = 248044;
  int32_t *d_ids, *d_cu, *d_ctx;
  int64_t *d_rows;
  uint16_t *d_out;
  CUDA_OK(cudaMalloc((void **)&d_ids, (size_t)T * 4));
  CUDA_OK(cudaMalloc((void **)&d_cu, (size_t)(B + 1) * 4));
  CUDA_OK(cudaMalloc((void **)&d_ctx, (size_t)(B * w) * 4));
  CUDA_OK(cudaMalloc((void **)&d_rows, (size_t)(T * H) * 8));
  CUDA_OK(cudaMalloc((void **)&d_out, (size_t)(T * H * D) * 2));
  CUDA_OK(test_upload(d_ctx, h_ctx, (size_t)(B * w) * 4));
  ingot_tensor tids = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, T);
  ingot_tensor tcu = ingot_tensor_1d(d_cu, INGOT_DTYPE_I32, B + 1);
  ingot_tensor tctx = ingot_tensor_2d(d_ctx, INGOT_DTYPE_I32, B, w, w);
  ingot_tensor trows = ingot_tensor_2d(d_rows, INGOT_DTYPE_I64, T, H, H);
  ingot_tensor ttab = ingot_tensor_2d(tab.gpu_ptr, INGOT_DTYPE_F8_E4M3, R, D, D);
  ingot_tensor tout = ingot_tensor_2d(d_out, INGOT_DTYPE_BF16, T, H * D, H * D);

  /* the graph must be captured with valid data in the buffers */
  for (int64_t b = 0; b <= B; b++) h_cu[b] = (int32_t)(2 * b);
  for (int64_t t = 0; t < T; t++) h_ids[t] = (int32_t)test_rand_range(0, 248319);
  CUDA_OK(test_upload(d_cu, h_cu, (size_t)(B + 1) * 4));
  CUDA_OK(test_upload(d_ids, h_ids, (size_t)T * 4));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ingot_status s1 = ingot_ngram_row_ids(gpu, &cfg, &tids, &tcu, &tctx, &trows, stream);
  ingot_status s2 = ingot_ngram_embed(gpu, &cfg, &tids, &tcu, &tctx, &ttab, 1.0f, &tout, stream);
  ingot_status s3 = ingot_ngram_commit_context(gpu, &cfg, &tids, &tcu, &tctx, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  EXPECT_OK(gpu, s1);
  EXPECT_OK(gpu, s2);
  EXPECT_OK(gpu, s3);
  size_t nodes = 0;
  CUDA_OK(cudaGraphGetNodes(graph, NULL, &nodes));
  EXPECT(nodes == 3, "graph of 3 ops has %zu nodes (expected one launch each)", nodes);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  int64_t *rows = malloc((size_t)(T * H) * 8), *got_rows = malloc((size_t)(T * H) * 8);
  uint16_t *out = malloc((size_t)(T * H * D) * 2), *got_out = malloc((size_t)(T * H * D) * 2);
  int32_t *got_ctx = malloc((size_t)(B * w) * 4);
  for (int replay = 0; replay < 3; replay++) {
    /* new ragged counts summing to T (some empty, some long), new ids */
    int64_t left = T;
    h_cu[0] = 0;
    for (int64_t b = 0; b < B; b++) {
      int64_t len = b == B - 1 ? left : test_rand_range(0, left < 4 ? left : 4);
      h_cu[b + 1] = h_cu[b] + (int32_t)len;
      left -= len;
    }
    for (int64_t t = 0; t < T; t++) h_ids[t] = (int32_t)ngram_random_token(INGOT_DTYPE_I32, 248044);
    CUDA_OK(cudaMemcpyAsync(d_cu, h_cu, (size_t)(B + 1) * 4, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(d_ids, h_ids, (size_t)T * 4, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    /* the same step on the CPU */
    ingot_tensor hids = ingot_tensor_1d(h_ids, INGOT_DTYPE_I32, T);
    ingot_tensor hcu = ingot_tensor_1d(h_cu, INGOT_DTYPE_I32, B + 1);
    ingot_tensor hctx = ingot_tensor_2d(h_ctx, INGOT_DTYPE_I32, B, w, w);
    ingot_tensor hrows = ingot_tensor_2d(rows, INGOT_DTYPE_I64, T, H, H);
    ingot_tensor htab = ingot_tensor_2d(tab.host, INGOT_DTYPE_F8_E4M3, R, D, D);
    ingot_tensor hout = ingot_tensor_2d(out, INGOT_DTYPE_BF16, T, H * D, H * D);
    EXPECT_OK(cpu, ingot_ngram_row_ids(cpu, &cfg, &hids, &hcu, &hctx, &hrows, NULL));
    EXPECT_OK(cpu, ingot_ngram_embed(cpu, &cfg, &hids, &hcu, &hctx, &htab, 1.0f, &hout, NULL));
    EXPECT_OK(cpu, ingot_ngram_commit_context(cpu, &cfg, &hids, &hcu, &hctx, NULL));
    CUDA_OK(cudaMemcpy(got_rows, d_rows, (size_t)(T * H) * 8, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got_out, d_out, (size_t)(T * H * D) * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got_ctx, d_ctx, (size_t)(B * w) * 4, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(got_rows, rows, (size_t)(T * H) * 8) == 0, "replay %d: rows differ", replay);
    EXPECT(memcmp(got_out, out, (size_t)(T * H * D) * 2) == 0, "replay %d: out differs", replay);
    EXPECT(memcmp(got_ctx, h_ctx, (size_t)(B * w) * 4) == 0, "replay %d: context differs", replay);
  }
  EXPECT_OK(gpu, ingot_context_check_device_errors(gpu, stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  free(rows), free(got_rows), free(out), free(got_out), free(got_ctx);
  free(h_ids), free(h_cu), free(h_ctx), free(bytes);
  cudaFree(d_ids), cudaFree(d_cu), cudaFree(d_ctx), cudaFree(d_rows), cudaFree(d_out);
  table_free(&tab);
  return 0;
}

/* ---- validation ---------------------------------------------------------------------- */

/* A bad cu_seqlens can only be seen on the device: the ops return SUCCESS,
 * write nothing, and the context's device error word reports it once. */
static int test_bad_cu_seqlens_on_device(void) {
  ingot_ngram_config cfg;
  EXPECT_OK(NULL, ingot_ngram_config_derive(512, 3, 2, 1000, 1234, 0, 7, &cfg));
  static const int32_t bad_cus[][4] = {{0, 3, 2, 6}, {1, 2, 3, 6}, {0, 2, 4, 5}, {0, 2, 4, 7}, {0, -1, 4, 6}};
  int32_t ids[6] = {3, 4, 7, 5, 6, 8}, ctx[6] = {7, 7, 1, 2, 3, 4};
  uint8_t table[1024 * 8];
  memset(table, 0x38, sizeof table);
  for (size_t k = 0; k < sizeof bad_cus / sizeof bad_cus[0]; k++) {
    for (int ref = 0; ref < 2; ref++) {
      ingot_context_t g = ref ? gpu_ref : gpu;
      int32_t *d_ids = dev_copy(ids, sizeof ids), *d_cu = dev_copy(bad_cus[k], 16);
      int32_t *d_ctx = dev_copy(ctx, sizeof ctx);
      uint8_t *d_tab = dev_copy(table, sizeof table);
      int64_t poison_rows[24];
      uint16_t poison_out[6 * 4 * 8];
      memset(poison_rows, 0x5d, sizeof poison_rows);
      memset(poison_out, 0x5d, sizeof poison_out);
      int64_t *d_rows = dev_copy(poison_rows, sizeof poison_rows);
      uint16_t *d_out = dev_copy(poison_out, sizeof poison_out);
      ingot_tensor tids = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, 6);
      ingot_tensor tcu = ingot_tensor_1d(d_cu, INGOT_DTYPE_I32, 4);
      ingot_tensor tctx = ingot_tensor_2d(d_ctx, INGOT_DTYPE_I32, 3, 2, 2);
      ingot_tensor trows = ingot_tensor_2d(d_rows, INGOT_DTYPE_I64, 6, 4, 4);
      ingot_tensor ttab = ingot_tensor_2d(d_tab, INGOT_DTYPE_F8_E4M3, 1024, 8, 8);
      ingot_tensor tout = ingot_tensor_2d(d_out, INGOT_DTYPE_BF16, 6, 32, 32);
      for (int op = 0; op < 3; op++) {
        ingot_status st = op == 0 ? ingot_ngram_row_ids(g, &cfg, &tids, &tcu, &tctx, &trows, stream)
                          : op == 1 ? ingot_ngram_embed(g, &cfg, &tids, &tcu, &tctx, &ttab, 1.0f, &tout, stream)
                                    : ingot_ngram_commit_context(g, &cfg, &tids, &tcu, &tctx, stream);
        EXPECT_OK(g, st);
        st = ingot_context_check_device_errors(g, stream);
        EXPECT(st == INGOT_STATUS_INVALID_ARGUMENT, "bad cu_seqlens %zu op %d%s: device check gave %s",
               k, op, ref ? " (reference)" : "", ingot_status_name(st));
        EXPECT(strstr(ingot_last_error(g), "cu_seqlens") != NULL, "message: %s", ingot_last_error(g));
        static const char *const op_names[] = {"ingot_ngram_row_ids", "ingot_ngram_embed",
                                               "ingot_ngram_commit_context"};
        EXPECT(strncmp(ingot_last_error(g), op_names[op], strlen(op_names[op])) == 0,
               "message does not start with %s: %s", op_names[op], ingot_last_error(g));
        EXPECT_OK(g, ingot_context_check_device_errors(g, stream)); /* cleared */
      }
      int64_t got_rows[24];
      uint16_t got_out[6 * 4 * 8];
      int32_t got_ctx[6];
      CUDA_OK(cudaMemcpy(got_rows, d_rows, sizeof got_rows, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got_out, d_out, sizeof got_out, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got_ctx, d_ctx, sizeof got_ctx, cudaMemcpyDeviceToHost));
      EXPECT(memcmp(got_rows, poison_rows, sizeof got_rows) == 0, "case %zu: rows written", k);
      EXPECT(memcmp(got_out, poison_out, sizeof got_out) == 0, "case %zu: out written", k);
      EXPECT(memcmp(got_ctx, ctx, sizeof got_ctx) == 0, "case %zu: context written", k);
      cudaFree(d_ids), cudaFree(d_cu), cudaFree(d_ctx), cudaFree(d_tab), cudaFree(d_rows), cudaFree(d_out);
    }
  }
  return 0;
}

/* T = 0 (and B = 0) still run the device check: a bad cu_seqlens is
 * reported, as the CPU backend rejects it; a good one reports nothing. And
 * the check refuses to run while its stream is being captured. */
static int test_empty_batches_checked_on_device(void) {
  ingot_ngram_config cfg;
  EXPECT_OK(NULL, ingot_ngram_config_derive(512, 3, 2, 1000, 1234, 0, 7, &cfg));
  int32_t bad_cu[2] = {0, 5}, good_cu[3] = {0, 0, 0}, ctx_init[4] = {1, 2, 3, 4};
  int32_t *d_bad = dev_copy(bad_cu, sizeof bad_cu), *d_good = dev_copy(good_cu, sizeof good_cu);
  int32_t *d_ctx = dev_copy(ctx_init, sizeof ctx_init), *d_ids = dev_copy(ctx_init, sizeof ctx_init);
  int64_t *d_rows = dev_copy(ctx_init, 16);
  for (int ref = 0; ref < 2; ref++) {
    ingot_context_t g = ref ? gpu_ref : gpu;
    /* T = 0 with cu = [0, 5]: bad */
    ingot_tensor tids = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, 0);
    ingot_tensor tcu = ingot_tensor_1d(d_bad, INGOT_DTYPE_I32, 2);
    ingot_tensor tctx = ingot_tensor_2d(d_ctx, INGOT_DTYPE_I32, 1, 2, 2);
    ingot_tensor trows = ingot_tensor_2d(d_rows, INGOT_DTYPE_I64, 0, 4, 4);
    EXPECT_OK(g, ingot_ngram_row_ids(g, &cfg, &tids, &tcu, &tctx, &trows, stream));
    EXPECT_STATUS(g, ingot_context_check_device_errors(g, stream), INGOT_STATUS_INVALID_ARGUMENT);
    EXPECT(strstr(ingot_last_error(g), "ingot_ngram_row_ids") != NULL, "%s", ingot_last_error(g));
    EXPECT_OK(g, ingot_ngram_commit_context(g, &cfg, &tids, &tcu, &tctx, stream));
    EXPECT_STATUS(g, ingot_context_check_device_errors(g, stream), INGOT_STATUS_INVALID_ARGUMENT);
    /* B = 0 with T = 3: cu = [0] != T */
    ingot_tensor tids3 = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, 3);
    ingot_tensor tcu0 = ingot_tensor_1d(d_good, INGOT_DTYPE_I32, 1);
    ingot_tensor tctx0 = ingot_tensor_2d(d_ctx, INGOT_DTYPE_I32, 0, 2, 2);
    EXPECT_OK(g, ingot_ngram_commit_context(g, &cfg, &tids3, &tcu0, &tctx0, stream));
    EXPECT_STATUS(g, ingot_context_check_device_errors(g, stream), INGOT_STATUS_INVALID_ARGUMENT);
    EXPECT(strstr(ingot_last_error(g), "ingot_ngram_commit_context") != NULL, "%s", ingot_last_error(g));
    /* T = 0, B = 2, cu = [0, 0, 0]: good, nothing reported, context unchanged */
    ingot_tensor tcu2 = ingot_tensor_1d(d_good, INGOT_DTYPE_I32, 3);
    ingot_tensor tctx2 = ingot_tensor_2d(d_ctx, INGOT_DTYPE_I32, 2, 2, 2);
    EXPECT_OK(g, ingot_ngram_row_ids(g, &cfg, &tids, &tcu2, &tctx2, &trows, stream));
    EXPECT_OK(g, ingot_ngram_commit_context(g, &cfg, &tids, &tcu2, &tctx2, stream));
    EXPECT_OK(g, ingot_context_check_device_errors(g, stream));
    int32_t got[4];
    CUDA_OK(cudaMemcpy(got, d_ctx, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(got, ctx_init, sizeof got) == 0, "an empty commit changed the context");
  }
  /* no check during capture: it would synchronise a capturing stream */
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ingot_status st = ingot_context_check_device_errors(gpu, stream);
  cudaGraph_t graph;
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphDestroy(graph);
  EXPECT(st == INGOT_STATUS_INVALID_ARGUMENT && strstr(ingot_last_error(gpu), "capture"),
         "check during capture: %s, %s", ingot_status_name(st), ingot_last_error(gpu));
  cudaFree(d_bad), cudaFree(d_good), cudaFree(d_ctx), cudaFree(d_ids), cudaFree(d_rows);
  return 0;
}

static int test_residency_errors(void) {
  ingot_ngram_config cfg;
  EXPECT_OK(NULL, ingot_ngram_config_derive(512, 3, 2, 1000, 1234, 0, 7, &cfg));
  int32_t ids[6] = {3, 4, 7, 5, 6, 8}, cu[2] = {0, 6}, ctx[2] = {7, 7};
  int64_t rows[24];
  memset(rows, 0x42, sizeof rows);
  int32_t *d_ids = dev_copy(ids, sizeof ids);
  /* CPU context given device memory */
  ingot_tensor tids = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, 6);
  ingot_tensor tcu = ingot_tensor_1d(cu, INGOT_DTYPE_I32, 2);
  ingot_tensor tctx = ingot_tensor_2d(ctx, INGOT_DTYPE_I32, 1, 2, 2);
  ingot_tensor trows = ingot_tensor_2d(rows, INGOT_DTYPE_I64, 6, 4, 4);
  EXPECT_STATUS(cpu, ingot_ngram_row_ids(cpu, &cfg, &tids, &tcu, &tctx, &trows, NULL),
                INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(cpu), "ids") && strstr(ingot_last_error(cpu), "device memory"),
         "message: %s", ingot_last_error(cpu));
  /* CUDA context given pageable host memory (unless the GPU can read it) */
  int pageable = 0;
  cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0);
  if (!pageable) {
    ingot_tensor hids = ingot_tensor_1d(ids, INGOT_DTYPE_I32, 6);
    EXPECT_STATUS(gpu, ingot_ngram_row_ids(gpu, &cfg, &hids, &tcu, &tctx, &trows, stream),
                  INGOT_STATUS_INVALID_ARGUMENT);
    EXPECT(strstr(ingot_last_error(gpu), "pageable"), "message: %s", ingot_last_error(gpu));
  }
  EXPECT(rows[0] == 0x4242424242424242, "rows written");
  cudaFree(d_ids);
  return 0;
}

/* Decode == prefill on the GPU: chunks 3, 1, 2, 5, then 3 decodes. */
static int test_chunked_decode(void) {
  ingot_ngram_config cfg;
  EXPECT_OK(NULL, ingot_ngram_config_derive(248320, 3, 8, 20000000, 1234, 0, 248044, &cfg));
  static const int chunks[] = {3, 1, 2, 5, 1, 1, 1};
  const int64_t H = 16, total = 14;
  int32_t hist[14];
  for (int i = 0; i < 14; i++) hist[i] = (int32_t)ngram_random_token(INGOT_DTYPE_I32, 248044);
  /* prefill on the GPU */
  int32_t cu_all[2] = {0, 14}, fresh[2] = {248044, 248044};
  int32_t *d_hist = dev_copy(hist, sizeof hist), *d_cu = dev_copy(cu_all, 8), *d_ctx = dev_copy(fresh, 8);
  int64_t *d_rows;
  CUDA_OK(cudaMalloc((void **)&d_rows, (size_t)(total * H) * 8));
  ingot_tensor tids = ingot_tensor_1d(d_hist, INGOT_DTYPE_I32, 14);
  ingot_tensor tcu = ingot_tensor_1d(d_cu, INGOT_DTYPE_I32, 2);
  ingot_tensor tctx = ingot_tensor_2d(d_ctx, INGOT_DTYPE_I32, 1, 2, 2);
  ingot_tensor trows = ingot_tensor_2d(d_rows, INGOT_DTYPE_I64, 14, H, H);
  EXPECT_OK(gpu, ingot_ngram_row_ids(gpu, &cfg, &tids, &tcu, &tctx, &trows, stream));
  CUDA_OK(cudaStreamSynchronize(stream)); /* the stream does not order with cudaMemcpy */
  int64_t want[14 * 16], got[14 * 16];
  CUDA_OK(cudaMemcpy(want, d_rows, sizeof want, cudaMemcpyDeviceToHost));
  /* the same history in chunks, rolling the device context */
  int64_t done = 0;
  for (size_t s = 0; s < sizeof chunks / sizeof chunks[0]; s++) {
    int32_t cu[2] = {0, chunks[s]};
    CUDA_OK(test_upload(d_cu, cu, 8));
    ingot_tensor cids = ingot_tensor_1d(d_hist + done, INGOT_DTYPE_I32, chunks[s]);
    ingot_tensor crows = ingot_tensor_2d(d_rows, INGOT_DTYPE_I64, chunks[s], H, H);
    EXPECT_OK(gpu, ingot_ngram_row_ids(gpu, &cfg, &cids, &tcu, &tctx, &crows, stream));
    EXPECT_OK(gpu, ingot_ngram_commit_context(gpu, &cfg, &cids, &tcu, &tctx, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(got + done * H, d_rows, (size_t)(chunks[s] * H) * 8, cudaMemcpyDeviceToHost));
    done += chunks[s];
  }
  EXPECT(memcmp(got, want, sizeof got) == 0, "chunked decode != prefill on the GPU");
  /* and the prefill equals the CPU oracle */
  int64_t ids64[14], cu64[2] = {0, 14}, ctx64[2] = {248044, 248044}, oracle[14 * 16];
  for (int i = 0; i < 14; i++) ids64[i] = hist[i];
  ngram_case c = {1, 14, ids64, cu64, ctx64, 3};
  ngram_oracle_rows(&cfg, &c, oracle);
  EXPECT(memcmp(oracle, want, sizeof want) == 0, "GPU prefill != oracle");
  cudaFree(d_hist), cudaFree(d_cu), cudaFree(d_ctx), cudaFree(d_rows);
  return 0;
}

int main(void) {
  test_init("test_ngram_cuda");
  if (!ingot_backend_available(INGOT_BACKEND_CUDA)) {
    printf("SKIPPED test_ngram_cuda: no CUDA device\n");
    return TEST_SKIP_CODE;
  }
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &cpu) || ingot_context_create(INGOT_BACKEND_CUDA, 0, &gpu)) {
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
  test_run("row_ids_random", test_row_ids_random);
  test_run("row_ids_65536_tokens", test_row_ids_large);
  test_run("commit_random", test_commit_random);
  test_run("gather", test_gather);
  test_run("embed", test_embed);
  test_run("graph_replay", test_graph_replay);
  test_run("bad_cu_seqlens_on_device", test_bad_cu_seqlens_on_device);
  test_run("empty_batches_checked_on_device", test_empty_batches_checked_on_device);
  test_run("residency_errors", test_residency_errors);
  test_run("chunked_decode", test_chunked_decode);
  cudaStreamDestroy(stream);
  ingot_context_destroy(gpu_ref);
  ingot_context_destroy(gpu);
  ingot_context_destroy(cpu);
  return test_finish();
}
#endif
