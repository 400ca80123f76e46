/*
 * Sampling on CUDA against the CPU reference (tests/test_sampling.c tests the
 * reference itself against independent oracles). Fresh random batches every
 * run: masks, lists, NaN / empty rows, every filter, every dtype, top-n.
 *   - tokens and row statuses identical to the CPU, except top-p rows whose
 *     cumulative mass lands within rounding of p * total (counted, reported,
 *     and bounded);
 *   - log-probabilities and probabilities within 2e-6 relative (the GPU sums
 *     masses in 64-bit fixed point, the CPU in double);
 *   - top-n ids identical, their log-probabilities within the same bound;
 *   - batch invariance on the GPU, bit for bit;
 *   - the known-hard masked rows against a float64 softmax;
 *   - a bad per-row value: token -1 and BAD_PARAMETER on that row only;
 *   - bad arguments: the named error, nothing written (device buffers);
 *   - graph capture and replay with new seeds, positions and masks == eager.
 * Half the random batches pass no top_k / top_p / min_p tensor (and most of
 * those no top-n output): that is the dense kernel
 * (src/cuda/sampling/sampling_dense.cu) alone. With filter tensors and no
 * top-n, rows without a filter go to the dense kernel and the others to the
 * general one (mixed_rows checks that split); with top-n, the general kernel
 * takes every row. The fixed-case tests run on both kernels.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#ifndef INGOT_WITH_CUDA
static int skip_no_cuda(void) { return TEST_SKIP_CODE; }
int main(void) {
  test_init("test_sampling_cuda");
  test_run("sampling_cuda", skip_no_cuda);
  return test_finish();
}
#else

#include <cuda_runtime_api.h>

#include "test_cuda.h"

#include "common/numeric.h" /* 16-bit logits as fp32 */
#include "core/internal.h"   /* to print the kernels' geometry limits */
#include "cuda/cuda_state.h"  /* the sampling paths the context set up */

static ingot_context_t cpu, gpu;
static cudaStream_t stream;
static int quick; /* INGOT_TEST_QUICK=1: one pass of the random batches (for compute-sanitizer) */

static void *xcalloc(size_t n) {
  void *p = calloc(n ? n : 1, 1);
  if (!p) abort();
  return p;
}

/* A device copy of h's n bytes; without h, n bytes of 0x7f (a float 3.4e38,
 * an int 2139062143: no output's value), so that an output a call does not
 * write cannot pass for one, whatever the memory held before. */
static void *dev_copy(const void *h, size_t n) {
  void *d = NULL;
  if (cudaMalloc(&d, n ? n : 1) != cudaSuccess) abort();
  if (h && n) test_upload(d, h, n);
  if (!h) test_fill(d, 0x7f, n ? n : 1);
  return d;
}

/* A device workspace of the bytes ingot_sampling_softmax needs for [B, V] F32 (*bytes). */
static void *softmax_workspace(ingot_context_t c, int64_t B, int64_t V, size_t *bytes) {
  if (ingot_sampling_softmax_workspace_size(c, B, V, INGOT_DTYPE_F32, bytes) != INGOT_OK) abort();
  return dev_copy(NULL, *bytes);
}

/* The same for ingot_sample (no top-n outputs). */
static void *sample_workspace(ingot_context_t c, int64_t B, int64_t V, size_t *bytes) {
  if (ingot_sample_workspace_size(c, B, V, INGOT_DTYPE_F32, 0, bytes) != INGOT_OK) abort();
  return dev_copy(NULL, *bytes);
}

static double rand_normal(void) {
  double u1 = (test_rand_unit() + 1e-12), u2 = test_rand_unit();
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* ---- a batch: host arrays, their device copies, tensors for both ------------------ */

typedef struct batch {
  int64_t B, V, stride, words;
  ingot_dtype dtype;
  void *logits;
  float *temperature, *top_p, *min_p;
  int32_t *top_k;
  uint64_t *seed, *position;
  uint32_t *allowed; /* NULL: no bitmask */
  int32_t *banned, *bias_ids;
  float *bias_values;
  int64_t nbanned, nbias;
  int64_t num_top;
  uint32_t flags;
  int want_logprobs; /* kWantFinal | kWantRaw: the drawn token's log-probabilities asked for */
  int no_filters; /* top_k / top_p / min_p tensors absent (the dense kernel) */
} batch;

enum { kWantFinal = 1, kWantRaw = 2, kWantBoth = 3 };

typedef struct result {
  int32_t *tokens;
  uint32_t *status;
  float *lp, *raw_lp, *top_lp, *probs;
  int32_t *top_ids;
} result;

static size_t elem(ingot_dtype d) { return d == INGOT_DTYPE_F32 ? 4 : 2; }

static void set_logit(batch *b, int64_t r, int64_t i, float v) {
  size_t at = (size_t)(r * b->stride + i);
  if (b->dtype == INGOT_DTYPE_F32)
    ((float *)b->logits)[at] = v;
  else if (b->dtype == INGOT_DTYPE_BF16)
    ((uint16_t *)b->logits)[at] = bf16_of(v);
  else {
    /* f16: a value on the grid k/64, |k| <= 2047, or +-Inf / NaN */
    uint16_t h;
    if (v != v) h = 0x7e00;
    else if (isinf(v)) h = v > 0 ? 0x7c00 : 0xfc00;
    else {
      double g = nearbyint((double)v * 64.0);
      if (g > 2047) g = 2047;
      if (g < -2047) g = -2047;
      if (g == 0) h = 0;
      else {
        int e;
        double m = frexp(fabs(g / 64.0), &e);
        h = (uint16_t)((g < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) | (int)((2 * m - 1) * 1024));
      }
    }
    ((uint16_t *)b->logits)[at] = h;
  }
}

/* No top_k / top_p / min_p tensor at all (rows keep the "off" values). */
static void set_no_filters(batch *b) {
  b->no_filters = 1;
  for (int64_t r = 0; r < b->B; r++) b->top_k[r] = 0, b->top_p[r] = 1.0f, b->min_p[r] = 0.0f;
}

/* Random batch. kind: 0 mixed (row kinds: -Inf prefix, NaN / +Inf sprinkles,
 * empty, ties, all masked, ~5 tokens, descending, slowly ascending, plain),
 * 1 plain (no masks, no NaN), 2 top-k 50 + top-p 0.9. */
static void make_batch(batch *b, int64_t B, int64_t V, ingot_dtype dtype, int kind,
                       int64_t num_top) {
  memset(b, 0, sizeof *b);
  b->B = B, b->V = V, b->dtype = dtype;
  b->stride = V + (test_rand() % 2) * 8;
  b->words = (V + 31) / 32;
  b->logits = xcalloc((size_t)(B * b->stride) * elem(dtype));
  b->temperature = xcalloc(B * 4), b->top_p = xcalloc(B * 4), b->min_p = xcalloc(B * 4);
  b->top_k = xcalloc(B * 4), b->seed = xcalloc(B * 8), b->position = xcalloc(B * 8);
  b->num_top = num_top;
  b->flags = test_rand() % 2 ? INGOT_SAMPLING_TOP_FINAL : 0;
  b->want_logprobs = kWantBoth;
  if (kind == 0 && test_rand() % 2) {
    b->allowed = xcalloc((size_t)(B * b->words) * 4);
  }
  for (int64_t r = 0; r < B; r++) {
    double sigma = (double[]){0.3, 1.0, 3.0, 8.0}[test_rand() % 4];
    double shift = rand_normal() * 20.0;
    int row_kind = kind == 0 ? (int)(test_rand() % 10) : 9;
    for (int64_t i = 0; i < V; i++) {
      float v = (float)(shift + sigma * rand_normal());
      if (row_kind == 0 && i < V / 3) v = -INFINITY;         /* -Inf prefix */
      if (row_kind == 1 && test_rand() % 997 == 0)           /* NaN and +Inf sprinkles */
        v = test_rand() % 2 ? NAN : INFINITY;
      if (row_kind == 2) v = -INFINITY;                      /* empty row */
      if (row_kind == 3) v = (float)(int)(v * 2) / 2;        /* many ties */
      if (row_kind == 5 && i % (V / 5 + 1) != 0) v = -INFINITY; /* ~5 tokens: fewer than k */
      if (row_kind == 6) v = (float)(shift - 0.01 * (double)i); /* descending: top in 1 block */
      /* a slow ascent: every group raises its thread's running maximum, so the
       * online sums are rescaled at every group with near-equal weights */
      if (row_kind == 7) v = (float)(shift + 2e-5 * (double)i);
      set_logit(b, r, i, v);
    }
    if (b->allowed)
      for (int64_t w = 0; w < b->words; w++)
        b->allowed[r * b->words + w] =
            row_kind == 4 ? 0u : (uint32_t)test_rand() | (uint32_t)test_rand();
    b->seed[r] = test_rand();
    b->position[r] = test_rand() % 100000;
    if (kind == 2) {
      b->temperature[r] = 1.0f, b->top_k[r] = 50, b->top_p[r] = 0.9f, b->min_p[r] = 0.0f;
      continue;
    }
    /* 1e-3: most masses underflow; 3e-10 and 5e9 lie outside [2^-30, 2^30),
     * where the dense kernel divides with __fdiv_rn */
    b->temperature[r] =
        (float[]){0.0f, 0.5f, 1.0f, 1.0f, 1.7f, 0.8f, 1e-3f, 3e-10f, 5e9f}[test_rand() % 9];
    b->top_k[r] = (int32_t[]){0, 0, 1, 7, 50, 1000}[test_rand() % 6];
    b->top_p[r] = (float[]){1.0f, 1.0f, 0.9f, 0.5f, 0.99f}[test_rand() % 5];
    b->min_p[r] = (float[]){0.0f, 0.0f, 0.05f, 0.3f}[test_rand() % 4];
  }
  if (kind != 2 && test_rand() % 2) set_no_filters(b);
  if (kind == 0) {
    b->nbanned = (int64_t)(test_rand() % 40);
    b->banned = xcalloc((size_t)(b->nbanned * 2 + 1) * 4);
    for (int64_t e = 0; e < b->nbanned; e++) {
      b->banned[2 * e] = (int32_t)(test_rand() % (B + 1)) - (test_rand() % 8 == 0);
      b->banned[2 * e + 1] = test_rand() % 10 == 0 ? (int32_t)V + 5 : (int32_t)(test_rand() % V);
    }
    b->nbias = (int64_t)(test_rand() % 40);
    b->bias_ids = xcalloc((size_t)(b->nbias * 2 + 1) * 4);
    b->bias_values = xcalloc((size_t)(b->nbias + 1) * 4);
    for (int64_t e = 0; e < b->nbias; e++) {
      b->bias_ids[2 * e] = (int32_t)(test_rand() % B);
      /* repeated tokens test the list order */
      b->bias_ids[2 * e + 1] = (int32_t)(test_rand() % (e % 3 == 0 ? 4 : V));
      b->bias_values[e] = (float)(rand_normal() * 5.0);
    }
  }
}

static void free_batch(batch *b) {
  free(b->logits), free(b->temperature), free(b->top_p), free(b->min_p), free(b->top_k);
  free(b->seed), free(b->position), free(b->allowed), free(b->banned), free(b->bias_ids);
  free(b->bias_values);
}

static void alloc_result(result *o, const batch *b) {
  o->tokens = xcalloc(b->B * 4), o->status = xcalloc(b->B * 4);
  o->lp = xcalloc(b->B * 4), o->raw_lp = xcalloc(b->B * 4);
  o->top_ids = xcalloc((size_t)(b->B * b->num_top + 1) * 4);
  o->top_lp = xcalloc((size_t)(b->B * b->num_top + 1) * 4);
  o->probs = xcalloc((size_t)(b->B * b->V) * 4);
}

static void free_result(result *o) {
  free(o->tokens), free(o->status), free(o->lp), free(o->raw_lp), free(o->top_ids);
  free(o->top_lp), free(o->probs);
}

/* Runs ingot_sample (softmax = 0) or ingot_sampling_softmax (1) on ctx
 * (device copies of everything for the GPU). Returns the status. */
/* The buffers of one call for batch b: its host arrays (CPU), or device
 * copies of them (CUDA), which a captured graph keeps reading. */
typedef struct call_buffers {
  int dev;
  void *logits, *temp, *tk, *tp, *mp, *seed, *pos, *allowed, *banned, *bias_ids, *bias_v;
  void *tokens, *status, *lp, *raw, *tids, *tlp, *probs, *ws;
  size_t need;
} call_buffers;

static size_t logits_bytes(const batch *b) { return (size_t)(b->B * b->stride) * elem(b->dtype); }

/* b's inputs into f's device buffers (a replay's new values). */
static void upload(const call_buffers *f, const batch *b) {
  const int64_t B = b->B;
  test_upload(f->logits, b->logits, logits_bytes(b));
  test_upload(f->temp, b->temperature, B * 4);
  test_upload(f->tk, b->top_k, B * 4);
  test_upload(f->tp, b->top_p, B * 4);
  test_upload(f->mp, b->min_p, B * 4);
  test_upload(f->seed, b->seed, B * 8);
  test_upload(f->pos, b->position, B * 8);
  if (f->allowed)
    test_upload(f->allowed, b->allowed, (size_t)(B * b->words) * 4);
  if (f->banned) test_upload(f->banned, b->banned, (size_t)b->nbanned * 8);
  if (f->bias_ids) {
    test_upload(f->bias_ids, b->bias_ids, (size_t)b->nbias * 8);
    test_upload(f->bias_v, b->bias_values, (size_t)b->nbias * 4);
  }
}

static void buffers_make(call_buffers *f, ingot_context_t c, const batch *b, int softmax,
                         result *o) {
  const int64_t B = b->B, n = b->num_top;
  memset(f, 0, sizeof *f);
  f->dev = c == gpu;
  if (!f->dev) {
    f->logits = b->logits, f->temp = b->temperature, f->tk = b->top_k, f->tp = b->top_p;
    f->mp = b->min_p, f->seed = b->seed, f->pos = b->position, f->allowed = b->allowed;
    f->banned = b->nbanned ? b->banned : NULL, f->bias_ids = b->nbias ? b->bias_ids : NULL;
    f->bias_v = b->nbias ? b->bias_values : NULL;
    f->tokens = o->tokens, f->status = o->status, f->lp = o->lp, f->raw = o->raw_lp;
    f->tids = o->top_ids, f->tlp = o->top_lp, f->probs = o->probs;
  } else {
    f->logits = dev_copy(NULL, logits_bytes(b));
    f->temp = dev_copy(NULL, B * 4), f->tk = dev_copy(NULL, B * 4);
    f->tp = dev_copy(NULL, B * 4), f->mp = dev_copy(NULL, B * 4);
    f->seed = dev_copy(NULL, B * 8), f->pos = dev_copy(NULL, B * 8);
    f->allowed = b->allowed ? dev_copy(NULL, (size_t)(B * b->words) * 4) : NULL;
    f->banned = b->nbanned ? dev_copy(NULL, (size_t)b->nbanned * 8) : NULL;
    f->bias_ids = b->nbias ? dev_copy(NULL, (size_t)b->nbias * 8) : NULL;
    f->bias_v = b->nbias ? dev_copy(NULL, (size_t)b->nbias * 4) : NULL;
    f->tokens = dev_copy(NULL, B * 4), f->status = dev_copy(NULL, B * 4);
    f->lp = dev_copy(NULL, B * 4), f->raw = dev_copy(NULL, B * 4);
    f->tids = dev_copy(NULL, (size_t)(B * n) * 4 + 4);
    f->tlp = dev_copy(NULL, (size_t)(B * n) * 4 + 4);
    f->probs = dev_copy(NULL, (size_t)(B * b->V) * 4);
    upload(f, b);
  }
  if ((softmax ? ingot_sampling_softmax_workspace_size(c, B, b->V, b->dtype, &f->need)
               : ingot_sample_workspace_size(c, B, b->V, b->dtype, n, &f->need)) != INGOT_OK)
    abort();
  if (f->need)
    f->ws = f->dev ? dev_copy(NULL, f->need) : aligned_alloc(64, (f->need + 63) / 64 * 64);
}

/* The op on f's buffers: the CPU runs it, CUDA enqueues it on `stream`. */
static ingot_status buffers_call(ingot_context_t c, const call_buffers *f, const batch *b,
                                 int softmax) {
  const int64_t B = b->B, n = b->num_top;
  ingot_tensor tl = ingot_tensor_2d(f->logits, b->dtype, B, b->V, b->stride);
  ingot_tensor tT = ingot_tensor_1d(f->temp, INGOT_DTYPE_F32, B),
               tK = ingot_tensor_1d(f->tk, INGOT_DTYPE_I32, B),
               tP = ingot_tensor_1d(f->tp, INGOT_DTYPE_F32, B),
               tM = ingot_tensor_1d(f->mp, INGOT_DTYPE_F32, B),
               tS = ingot_tensor_1d(f->seed, INGOT_DTYPE_U64, B),
               tPos = ingot_tensor_1d(f->pos, INGOT_DTYPE_U64, B),
               tA = ingot_tensor_2d(f->allowed, INGOT_DTYPE_U32, B, b->words, b->words),
               tBan = ingot_tensor_2d(f->banned, INGOT_DTYPE_I32, b->nbanned, 2, 2),
               tBi = ingot_tensor_2d(f->bias_ids, INGOT_DTYPE_I32, b->nbias, 2, 2),
               tBv = ingot_tensor_1d(f->bias_v, INGOT_DTYPE_F32, b->nbias),
               tTok = ingot_tensor_1d(f->tokens, INGOT_DTYPE_I32, B),
               tSt = ingot_tensor_1d(f->status, INGOT_DTYPE_U32, B),
               tLp = ingot_tensor_1d(f->lp, INGOT_DTYPE_F32, B),
               tRaw = ingot_tensor_1d(f->raw, INGOT_DTYPE_F32, B),
               tIds = ingot_tensor_2d(f->tids, INGOT_DTYPE_I32, B, n, n),
               tTlp = ingot_tensor_2d(f->tlp, INGOT_DTYPE_F32, B, n, n),
               tProbs = ingot_tensor_2d(f->probs, INGOT_DTYPE_F32, B, b->V, b->V);
  ingot_sampling_params prm = INGOT_SAMPLING_PARAMS_INITIALIZER;
  prm.temperature = &tT;
  if (!b->no_filters) prm.top_k = &tK, prm.top_p = &tP, prm.min_p = &tM;
  prm.seed = &tS, prm.position = &tPos;
  if (f->allowed) prm.allowed = &tA;
  if (f->banned) prm.banned = &tBan;
  if (f->bias_ids) prm.bias_ids = &tBi, prm.bias_values = &tBv;
  ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  lps.flags = b->flags;
  if (b->want_logprobs & kWantFinal) lps.token_logprob = &tLp;
  if (b->want_logprobs & kWantRaw) lps.token_raw_logprob = &tRaw;
  if (n) lps.top_ids = &tIds, lps.top_logprobs = &tTlp;
  struct CUstream_st *s = f->dev ? (struct CUstream_st *)stream : NULL;
  return softmax ? ingot_sampling_softmax(c, &tl, &prm, &tProbs, &tSt, f->ws, f->need, s)
                 : ingot_sample(c, &tl, &prm, &tTok, &tSt, &lps, f->ws, f->need, s);
}

/* Waits for the stream and copies the outputs to o; CUDA_ERROR if the
 * stream failed. */
static ingot_status download(const call_buffers *f, const batch *b, int softmax, result *o) {
  const int64_t B = b->B, n = b->num_top;
  cudaStreamSynchronize(stream);
  ingot_status st = cudaGetLastError() == cudaSuccess ? INGOT_OK : INGOT_STATUS_CUDA_ERROR;
  cudaMemcpy(o->tokens, f->tokens, B * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o->status, f->status, B * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o->lp, f->lp, B * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o->raw_lp, f->raw, B * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o->top_ids, f->tids, (size_t)(B * n) * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(o->top_lp, f->tlp, (size_t)(B * n) * 4, cudaMemcpyDeviceToHost);
  if (softmax) cudaMemcpy(o->probs, f->probs, (size_t)(B * b->V) * 4, cudaMemcpyDeviceToHost);
  return st;
}

static void buffers_free(call_buffers *f) {
  if (f->dev) {
    void *all[] = {f->logits, f->temp, f->tk, f->tp, f->mp, f->seed, f->pos,
                   f->allowed, f->banned, f->bias_ids, f->bias_v, f->tokens, f->status,
                   f->lp, f->raw, f->tids, f->tlp, f->probs, f->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cudaFree(all[i]);
  } else {
    free(f->ws);
  }
}

/* One eager call of b on context c; the outputs in o. */
static ingot_status run_batch(ingot_context_t c, const batch *b, int softmax, result *o) {
  call_buffers f;
  buffers_make(&f, c, b, softmax, o);
  ingot_status st = buffers_call(c, &f, b, softmax);
  if (f.dev) {
    ingot_status done = download(&f, b, softmax, o);
    if (st == INGOT_OK) st = done;
  }
  buffers_free(&f);
  return st;
}

static int close_to(float got, float want, double rel) {
  if (got == want) return 1;
  if (isinf(got) || isinf(want) || got != got || want != want) return 0;
  return fabs((double)got - (double)want) <= rel * (1.0 + fabs((double)want));
}

typedef struct tally {
  int64_t rows, topp_rows, token_diffs, other_diffs;
} tally;

/* Compares GPU with CPU row by row; a token difference is tolerated only on
 * a row with top-p active (the boundary case), and counted. */
static void compare(const batch *b, const result *c, const result *g, tally *t, const char *what) {
  for (int64_t r = 0; r < b->B; r++) {
    t->rows++;
    int topp = b->top_p[r] < 1.0f && b->temperature[r] > 0.0f;
    t->topp_rows += topp;
    EXPECT(g->tokens[r] >= -1, "%s row %lld: token %d (a hand-off left behind?)", what,
           (long long)r, g->tokens[r]);
    if (c->tokens[r] != g->tokens[r] || c->status[r] != g->status[r]) {
      if (topp && c->status[r] == g->status[r]) {
        t->token_diffs++;
        continue;
      }
      t->other_diffs++;
      test_fail_at(__FILE__, __LINE__,
                   "%s row %lld: token %d status %u on CUDA, %d %u on the CPU (T %g k %d p %g "
                   "q %g)",
                   what, (long long)r, g->tokens[r], g->status[r], c->tokens[r], c->status[r],
                   (double)b->temperature[r], b->top_k[r], (double)b->top_p[r], (double)b->min_p[r]);
      continue;
    }
    if (b->want_logprobs & kWantFinal)
      EXPECT(close_to(g->lp[r], c->lp[r], 2e-6), "%s row %lld: logprob %.9g vs CPU %.9g", what,
             (long long)r, (double)g->lp[r], (double)c->lp[r]);
    if (b->want_logprobs & kWantRaw)
      EXPECT(close_to(g->raw_lp[r], c->raw_lp[r], 2e-6), "%s row %lld: raw logprob %.9g vs %.9g",
             what, (long long)r, (double)g->raw_lp[r], (double)c->raw_lp[r]);
    int final_top = (b->flags & INGOT_SAMPLING_TOP_FINAL) != 0;
    for (int64_t j = 0; j < b->num_top; j++) {
      int64_t at = r * b->num_top + j;
      if (final_top && topp && c->top_ids[at] != g->top_ids[at]) break; /* set may differ */
      if (g->top_ids[at] != c->top_ids[at] || !close_to(g->top_lp[at], c->top_lp[at], 2e-6)) {
        test_fail_at(__FILE__, __LINE__, "%s row %lld top %lld: (%d, %.9g) vs CPU (%d, %.9g)",
                     what, (long long)r, (long long)j, g->top_ids[at], (double)g->top_lp[at],
                     c->top_ids[at], (double)c->top_lp[at]);
        break;
      }
    }
  }
}

/* ingot_sample of b on both backends, compared (compare). */
static void sample_compared(const batch *b, tally *t, const char *what) {
  result c, g;
  alloc_result(&c, b), alloc_result(&g, b);
  EXPECT_OK(cpu, run_batch(cpu, b, 0, &c));
  EXPECT_OK(gpu, run_batch(gpu, b, 0, &g));
  compare(b, &c, &g, t, what);
  free_result(&c), free_result(&g);
}

/* ---- tests ------------------------------------------------------------------------------ */

static int test_sample_vs_cpu(void) {
  static const int64_t shapes[][2] = {{1, 151936}, {3, 201088}, {8, 262144}, {64, 4096},
                                      {5, 1000},   {2, 33},     {1, 1},      {40, 151936}};
  static const ingot_dtype dts[] = {INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16};
  tally t = {0, 0, 0, 0};
  for (int rep = 0; rep < (quick ? 1 : 3); rep++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      batch b;
      int64_t num_top = (int64_t[]){0, 1, 5, 20, 1024}[test_rand() % 5];
      make_batch(&b, shapes[s][0], shapes[s][1], dts[test_rand() % 3], (int)(test_rand() % 3),
                 num_top);
      if (b.no_filters && test_rand() % 4) b.num_top = num_top = 0;
      /* a third: tokens only; a sixth each: one log-probability */
      b.want_logprobs = (int[]){0, 0, kWantFinal, kWantRaw, kWantBoth, kWantBoth}[test_rand() % 6];
      char what[96];
      snprintf(what, sizeof what, "sample B=%lld V=%lld dtype %d top %lld%s", (long long)b.B,
               (long long)b.V, (int)b.dtype, (long long)num_top,
               b.no_filters ? " (no filter tensors)" : "");
      sample_compared(&b, &t, what);
      free_batch(&b);
    }
  printf("  sample: %lld rows, %lld with top-p, tokens differing from the CPU: %lld (%.3g%% of "
         "top-p rows)\n",
         (long long)t.rows, (long long)t.topp_rows, (long long)t.token_diffs,
         t.topp_rows ? 100.0 * (double)t.token_diffs / (double)t.topp_rows : 0.0);
  EXPECT(t.token_diffs * 100 <= t.topp_rows + 1, "too many top-p boundary differences: %lld",
         (long long)t.token_diffs);
  return 0;
}

/* The CPU / CUDA agreement over many draws, reported as a fraction of all
 * draws: rows of normal logits (a shift and a spread of their own, no masks),
 * every temperature make_batch picks (greedy to 5e9), top-k / top-p / min-p
 * mixes, f32 / bf16 / f16, both kernels. A token may differ only on a top-p
 * row whose cumulative mass lands within rounding of p (compare); every
 * other draw must be the CPU's. */
static int test_agreement(void) {
  static const ingot_dtype dts[] = {INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16};
  tally t = {0, 0, 0, 0};
  for (int rep = 0; rep < (quick ? 1 : 12); rep++) {
    batch b;
    make_batch(&b, 256, 32768, dts[rep % 3], 1, 0);
    b.want_logprobs = kWantBoth;
    sample_compared(&b, &t, "agreement");
    free_batch(&b);
  }
  printf("  agreement: %lld draws (%lld on top-p rows), %lld tokens differ from the CPU: %.3g%% "
         "of all draws\n",
         (long long)t.rows, (long long)t.topp_rows, (long long)t.token_diffs,
         100.0 * (double)t.token_diffs / (double)t.rows);
  EXPECT(t.token_diffs * 100 <= t.topp_rows + 1, "too many top-p boundary differences: %lld",
         (long long)t.token_diffs);
  return 0;
}

/* The largest relative difference of the GPU's probabilities from the
 * CPU's, over rows whose final sets agree (a top-p boundary row may
 * differ); *bad counts those above 2e-6. Statuses must agree. */
static double softmax_diff(const batch *b, const result *c, const result *g, int64_t *bad) {
  double worst = 0;
  *bad = 0;
  for (int64_t r = 0; r < b->B; r++) {
    int topp = b->top_p[r] < 1.0f && b->temperature[r] > 0.0f;
    EXPECT(c->status[r] == g->status[r], "softmax row %lld: status %u vs CPU %u", (long long)r,
           g->status[r], c->status[r]);
    int set_differs = 0;
    for (int64_t i = 0; i < b->V; i++) {
      float pc = c->probs[r * b->V + i], pg = g->probs[r * b->V + i];
      if ((pc == 0.0f) != (pg == 0.0f)) set_differs = 1;
    }
    if (set_differs && topp) continue; /* a top-p boundary row */
    for (int64_t i = 0; i < b->V; i++) {
      float pc = c->probs[r * b->V + i], pg = g->probs[r * b->V + i];
      /* the dense kernel flushes masses below 2^-126 to 0 (checked from 2^-125): such a
       * probability may be 0 on CUDA */
      double e = pc >= 0x1p-125f ? fabs((double)pg - (double)pc) / (double)pc
                 : fabs((double)pg - (double)pc) <= 0x1p-125 ? 0.0 : 1.0;
      if (e > worst) worst = e;
      if (e > 2e-6) ++*bad;
    }
  }
  return worst;
}

/* The softmax of b on both backends: *g gets the GPU's (the caller frees
 * it), checked against the CPU's by softmax_diff. */
static void softmax_checked(const batch *b, result *g) {
  result c;
  alloc_result(&c, b), alloc_result(g, b);
  EXPECT_OK(cpu, run_batch(cpu, b, 1, &c));
  EXPECT_OK(gpu, run_batch(gpu, b, 1, g));
  int64_t bad;
  const double worst = softmax_diff(b, &c, g, &bad);
  printf("  softmax B=%lld V=%lld (%s): max relative difference from the CPU %.3g\n",
         (long long)b->B, (long long)b->V, ingot_dtype_name(b->dtype), worst);
  EXPECT(bad == 0, "softmax B=%lld V=%lld: %lld probabilities off by > 2e-6 (worst %.3g)",
         (long long)b->B, (long long)b->V, (long long)bad, worst);
  free_result(&c);
}

static int test_softmax_vs_cpu(void) {
  static const int64_t shapes[][2] = {{1, 151936}, {3, 201088}, {8, 262144}, {17, 5000},
                                      {5, 1001}}; /* odd V: unaligned rows, scalar tails */
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    batch b;
    make_batch(&b, shapes[s][0], shapes[s][1],
               (ingot_dtype[]){INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16}[s % 3],
               (int)(test_rand() % 3), 0);
    result g;
    softmax_checked(&b, &g);
    free_result(&g), free_batch(&b);
  }
  return 0;
}

/* The online sums' worst case: rows that rise slowly, so that every group of
 * four raises its thread's running maximum (a rescale by the fast exp each
 * time) while all groups weigh about the same. The CPU sums in double. */
static int test_softmax_slow_ascent(void) {
  static const double slope[4] = {1e-6, 2e-5, 1e-4, 1e-3}; /* per token, T = 1 */
  static const float temps[4] = {1.0f, 0.5f, 1.0f, 2.0f};
  batch b;
  make_batch(&b, 4, 262144, INGOT_DTYPE_F32, 1, 0);
  set_no_filters(&b);
  for (int64_t r = 0; r < b.B; r++) {
    b.temperature[r] = temps[r];
    for (int64_t i = 0; i < b.V; i++) set_logit(&b, r, i, (float)(-3.0 + slope[r] * (double)i));
  }
  result g;
  softmax_checked(&b, &g);
  free_result(&g), free_batch(&b);
  return 0;
}

/* Row r of big as a batch of its own (pointers into big; the lists copied
 * to *ban and *bias, rewritten to row 0, other rows' entries to -1). */
static batch row_alone(const batch *big, int64_t r, int32_t **ban, int32_t **bias) {
  batch one = *big;
  one.B = 1;
  one.logits = (char *)big->logits + (size_t)(r * big->stride) * elem(big->dtype);
  one.temperature = big->temperature + r, one.top_k = big->top_k + r;
  one.top_p = big->top_p + r, one.min_p = big->min_p + r;
  one.seed = big->seed + r, one.position = big->position + r;
  one.allowed = big->allowed ? big->allowed + r * big->words : NULL;
  *ban = xcalloc((size_t)(big->nbanned * 2 + 1) * 4);
  *bias = xcalloc((size_t)(big->nbias * 2 + 1) * 4);
  for (int64_t e = 0; e < big->nbanned; e++)
    (*ban)[2 * e] = big->banned[2 * e] == r ? 0 : -1, (*ban)[2 * e + 1] = big->banned[2 * e + 1];
  for (int64_t e = 0; e < big->nbias; e++)
    (*bias)[2 * e] = big->bias_ids[2 * e] == r ? 0 : -1,
    (*bias)[2 * e + 1] = big->bias_ids[2 * e + 1];
  one.banned = *ban, one.bias_ids = *bias;
  return one;
}

/* Row r of g (b's softmax on the GPU) must be, bit for bit, what the row gives alone. */
static void expect_softmax_row_alone(const batch *b, const result *g, int64_t r) {
  int32_t *ban, *bias;
  batch one = row_alone(b, r, &ban, &bias);
  result g1;
  alloc_result(&g1, &one);
  EXPECT_OK(gpu, run_batch(gpu, &one, 1, &g1));
  EXPECT(g1.status[0] == g->status[r] &&
             memcmp(g1.probs, g->probs + r * b->V, (size_t)b->V * 4) == 0,
         "B=%lld V=%lld %s row %lld: differs from the row alone (status %u vs %u)",
         (long long)b->B, (long long)b->V, ingot_dtype_name(b->dtype), (long long)r, g->status[r],
         g1.status[0]);
  free_result(&g1), free(ban), free(bias);
}

/* The softmax of many rows without sparse lists (a batch that fills the
 * GPU several times over; 16-bit logits; small V with one or two blocks a
 * row): each row must be the CPU's (within 2e-6) and, bit for bit, what
 * the row gives alone. */
static int test_softmax_rows_alone(void) {
  static const struct {
    int64_t B, V;
    ingot_dtype dtype;
  } cases[] = {{64, 262144, INGOT_DTYPE_F32},
               {48, 151936, INGOT_DTYPE_BF16},
               {140, 5000, INGOT_DTYPE_F16},
               {300, 1001, INGOT_DTYPE_F32}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    batch b;
    make_batch(&b, cases[k].B, cases[k].V, cases[k].dtype, 0, 0);
    b.nbanned = b.nbias = 0; /* batch_invariance has a row with lists */
    result g;
    softmax_checked(&b, &g);
    const int64_t rows[3] = {0, 37, b.B - 1};
    for (int i = 0; i < 3; i++) expect_softmax_row_alone(&b, &g, rows[i]);
    free_result(&g), free_batch(&b);
  }
  return 0;
}

/* b with its logits as fp32 (the same values; a 16-bit batch's copy). */
static batch as_f32(const batch *b) {
  batch w = *b;
  w.dtype = INGOT_DTYPE_F32;
  w.logits = xcalloc((size_t)(b->B * b->stride) * 4);
  for (size_t i = 0; i < (size_t)(b->B * b->stride); i++) {
    const uint16_t h = ((const uint16_t *)b->logits)[i];
    ((float *)w.logits)[i] =
        b->dtype == INGOT_DTYPE_BF16 ? ingot_bf16_to_f32(h) : ingot_f16_to_f32(h);
  }
  return w;
}

/* The kernels that one call of b launches (softmax: ingot_sampling_softmax,
 * else ingot_sample), captured in a graph: their number, and the block size
 * of the first in *threads. */
static size_t captured_kernels(const batch *b, int softmax, unsigned *threads) {
  *threads = 0;
  result o;
  alloc_result(&o, b);
  call_buffers f;
  buffers_make(&f, gpu, b, softmax, &o);
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const ingot_status st = buffers_call(gpu, &f, b, softmax);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  EXPECT_OK(gpu, st);
  cudaGraphNode_t node[4];
  size_t nodes = 0;
  struct cudaKernelNodeParams kp;
  if (cudaGraphGetNodes(graph, NULL, &nodes) == cudaSuccess && nodes >= 1 && nodes <= 4 &&
      cudaGraphGetNodes(graph, node, &nodes) == cudaSuccess &&
      cudaGraphKernelNodeGetParams(node[0], &kp) == cudaSuccess)
    *threads = kp.blockDim.x;
  cudaGraphDestroy(graph);
  buffers_free(&f);
  free_result(&o);
  return nodes;
}

/* The block size of the one kernel a softmax call of b launches (0: not one). */
static unsigned softmax_block_threads(const batch *b) {
  unsigned threads = 0;
  return captured_kernels(b, 1, &threads) == 1 ? threads : 0;
}

/* The 16-bit softmax (bf16 / f16 logits, no filter tensors, no lists, B > 2,
 * more blocks than three a SM (396 on the H200), or any B at 61441 <= V <=
 * 237568 on 16-block clusters; the chunk kept as 16-bit values, the weights
 * computed twice): each batch against the CPU, and bit for bit against the
 * same values as f32 (the dense kernel's) and against the rows alone (the
 * wide path's); mixed rows (-Inf prefixes, NaN / +Inf, empty, ties, all
 * masked, tiny and huge temperatures), a bitmask or none, V from one block a
 * row (4096) to 16, partial last units, a block with no token (66000),
 * unaligned rows; then a bad temperature on one row. B = 0 in the table: just
 * more blocks than three a SM on this device. Each call must launch the
 * 16-bit kernel (its 256-thread blocks). */
static int test_softmax_half(void) {
  static const struct {
    int64_t B, V, pad; /* pad: the row stride is V + pad */
  } cases[] = {{64, 262144, 0}, {40, 151936, 8}, {0, 4096, 0}, {0, 5000, 1},
               {30, 100003, 3}, {0, 32771, 0},   {0, 1001, 1}, {8, 66000, 2}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int64_t B = cases[k].B;
    if (B == 0) { /* the dense kernel's blocks a row (dense_geometry) */
      int64_t c = (cases[k].V + 4095) / 4096;
      if (c > gpu->cuda->sampling.dense_cluster) c = gpu->cuda->sampling.dense_cluster;
      B = 3 * gpu->sm_count / c + 1;
    }
    if (quick && B * cases[k].V > 2000000) continue;
    const ingot_dtype dtype = k % 2 ? INGOT_DTYPE_F16 : INGOT_DTYPE_BF16;
    batch b;
    make_batch(&b, B, cases[k].V, dtype, 0, 0);
    set_no_filters(&b);
    b.nbanned = b.nbias = 0;
    if (cases[k].pad) { /* the same rows at stride V + pad (odd: 2-byte aligned only) */
      uint16_t *rows = xcalloc((size_t)(b.B * (b.V + cases[k].pad)) * 2);
      for (int64_t r = 0; r < b.B; r++)
        memcpy(rows + r * (b.V + cases[k].pad), (uint16_t *)b.logits + r * b.stride,
               (size_t)b.V * 2);
      free(b.logits);
      b.logits = rows;
      b.stride = b.V + cases[k].pad;
    }
    EXPECT(softmax_block_threads(&b) == 256, "B=%lld V=%lld: not the 16-bit kernel",
           (long long)b.B, (long long)b.V);
    for (int round = 0; round < 2; round++) {
      if (round) b.temperature[1] = -1.0f; /* the CPU refuses it; CUDA flags row 1 */
      batch w = as_f32(&b);
      result g, g32;
      if (round) {
        alloc_result(&g, &b);
        EXPECT_OK(gpu, run_batch(gpu, &b, 1, &g));
        EXPECT(g.status[1] == INGOT_SAMPLING_ROW_BAD_PARAMETER, "row 1: status %u", g.status[1]);
      } else {
        softmax_checked(&b, &g);
      }
      alloc_result(&g32, &w);
      EXPECT_OK(gpu, run_batch(gpu, &w, 1, &g32));
      EXPECT(memcmp(g.status, g32.status, (size_t)b.B * 4) == 0 &&
                 memcmp(g.probs, g32.probs, (size_t)(b.B * b.V) * 4) == 0,
             "B=%lld V=%lld %s: differs from the same values as f32", (long long)b.B,
             (long long)b.V, ingot_dtype_name(dtype));
      if (!round) { /* the wide path, or the dense kernel */
        expect_softmax_row_alone(&b, &g, 0);
        expect_softmax_row_alone(&b, &g, b.B - 1);
      }
      free_result(&g), free_result(&g32), free(w.logits);
    }
    free_batch(&b);
  }
  return 0;
}

/* Row r of b made one of the rows that must take the wide path's special
 * branches (its logits and temperature; kind 1 needs a bitmask; kind -1
 * leaves the row as it is). */
static void special_row(batch *b, int64_t r, int kind) {
  if (kind < 0) return; /* the row as made */
  int64_t top = 0; /* kind 7: the raw argmax */
  float top_v = -INFINITY;
  for (int64_t i = 0; i < b->V; i++) {
    float v = (float)(rand_normal() * 3.0);
    if (kind == 0 && test_rand() % 997 == 0) v = test_rand() % 2 ? NAN : INFINITY;
    if (kind == 2) v = 2.0f; /* greedy over ties: the lowest allowed id */
    if (kind == 3) v = -INFINITY;
    /* a language model's (bench_sampling.c's llm_logit): a bulk ~25 below
     * a head of one token in 256, so that few tokens are draw candidates */
    if (kind == 7) {
      v = (float)(rand_normal() * 2.5);
      if (test_rand() % 256 == 0) v += 8.0f + 16.0f * (float)(test_rand() % 4096) / 4096.0f;
    }
    if (v > top_v) top_v = v, top = i;
    set_logit(b, r, i, v);
  }
  if (kind == 1)
    for (int64_t w = 0; w < b->words; w++) b->allowed[r * b->words + w] = 0u;
  if (kind == 7 && b->allowed) { /* the raw argmax allowed on even rows, masked on odd ones */
    uint32_t *w = &b->allowed[r * b->words + top / 32];
    *w = r % 2 == 0 ? *w | 1u << (top % 32) : *w & ~(1u << (top % 32));
  }
  b->temperature[r] = (float[]){0.8f, 1.0f, 0.0f, 1.0f, 3e-10f, 5e9f, 1e-3f, 0.8f}[kind];
}

/* The batch of 8 rows of V tokens that the wide-path tests compare with:
 * make_batch's mixed rows without filters or lists, a random dtype; case k
 * of a test: a bitmask for even k (rows 2, 3 and the plain ones of 0, 1
 * with a logit of 30, allowed or masked), unaligned plain rows for k = 1;
 * rows 0 and 1 then made special_row's kind[0] and kind[1]. */
static void wide_batch(batch *big, int64_t V, int k, const int kind[2]) {
  const ingot_dtype dtype = (ingot_dtype[]){INGOT_DTYPE_F32, INGOT_DTYPE_BF16,
                                            INGOT_DTYPE_F16}[(k + test_rand()) % 3];
  make_batch(big, 8, V, dtype, 0, 0);
  set_no_filters(big);
  big->nbanned = big->nbias = 0;
  free(big->allowed);
  big->allowed = NULL;
  if (k % 2 == 0) {
    big->allowed = xcalloc((size_t)(big->B * big->words) * 4);
    for (int64_t w = 0; w < big->B * big->words; w++)
      big->allowed[w] = (uint32_t)test_rand() | (uint32_t)test_rand();
    /* the raw argmax allowed (the draw's two sums share one exp a token)
     * or masked, in turn, on rows 2 and 3 and on a plain row 0 or 1 */
    for (int r = 0; r < 4; r++) {
      if (r < 2 && kind[r] >= 0) continue;
      const int64_t t = (int64_t)(test_rand() % (uint64_t)big->V);
      uint32_t *w = &big->allowed[r * big->words + t / 32];
      set_logit(big, r, t, 30.0f);
      *w = (r + k) % 2 == 0 ? *w | 1u << (t % 32) : *w & ~(1u << (t % 32));
    }
  }
  if (k == 1) { /* rows unaligned (16-bit: odd 2-byte offsets) */
    big->stride = big->V + 1;
    free(big->logits);
    big->logits = xcalloc((size_t)(big->B * big->stride) * elem(dtype));
    for (int64_t r = 0; r < big->B; r++)
      for (int64_t i = 0; i < big->V; i++) set_logit(big, r, i, (float)(rand_normal() * 3.0));
  }
  special_row(big, 0, kind[0]);
  special_row(big, 1, kind[1]);
}

/* The WIDE softmax (B <= 2, V >= 32768, no filter tensors, no lists: each
 * row over many blocks, partials in the workspace, three launches): its
 * rows against the CPU's, and bit for bit against the same rows in a batch
 * of 8, which the dense kernel takes (mixed rows: NaN / +Inf, empty, ties,
 * greedy, tiny and huge temperatures; a bad temperature on one row; B = 3
 * and 4, the dense kernel's again); V not a multiple of 4 and row strides
 * that leave rows unaligned; all dtypes; a bitmask on two vocabularies.
 * Then the workspace: its size is the same for every batch, and one byte
 * less is refused with nothing written. */
static int test_softmax_wide(void) {
  /* 32771: a partial last group; 600000: 8 groups a thread at B = 2 */
  static const int64_t vocab[4] = {32771, 151936, 262144, 600000};
  /* the special rows 0 and 1 of each vocabulary (special_row) */
  static const int kinds[4][2] = {{0, 1}, {2, 3}, {4, 1}, {5, 6}};
  for (int k = 0; k < 4; k++) {
    batch big;
    wide_batch(&big, vocab[k], k, kinds[k]);
    const ingot_dtype dtype = big.dtype;
    /* round 1: the CPU's check too; round 2: a bad temperature on row 1
     * (the CPU refuses the call; both kernels give zeros and the flag) */
    for (int round = 0; round < 2; round++) {
      if (round) big.temperature[1] = -1.0f;
      result all;
      alloc_result(&all, &big);
      EXPECT_OK(gpu, run_batch(gpu, &big, 1, &all));
      for (int64_t B = 1 + round; B <= 4; B += 1 + round) {
        batch b = big;
        b.B = B;
        result g;
        if (round) {
          alloc_result(&g, &b);
          EXPECT_OK(gpu, run_batch(gpu, &b, 1, &g));
          EXPECT(g.status[1] == INGOT_SAMPLING_ROW_BAD_PARAMETER, "row 1: status %u",
                 g.status[1]);
        } else {
          softmax_checked(&b, &g);
        }
        for (int64_t r = 0; r < B; r++)
          EXPECT(g.status[r] == all.status[r] &&
                     memcmp(g.probs + r * b.V, all.probs + r * b.V, (size_t)b.V * 4) == 0,
                 "V=%lld %s B=%lld row %lld: differs from the dense kernel's (status %u vs %u)",
                 (long long)b.V, ingot_dtype_name(dtype), (long long)B, (long long)r,
                 g.status[r], all.status[r]);
        free_result(&g);
      }
      free_result(&all);
    }
    free_batch(&big);
  }
  size_t need1, need64;
  EXPECT_OK(gpu, ingot_sampling_softmax_workspace_size(gpu, 1, 151936, INGOT_DTYPE_F32, &need1));
  /* the wide path runs: three kernels at B = 1 and 2, the dense kernel alone at B = 3 */
  for (int64_t B = 1; B <= 3; B++) {
    const int64_t Vn = 151936;
    void *dl = dev_copy(NULL, (size_t)(B * Vn) * 4), *dp = dev_copy(NULL, (size_t)(B * Vn) * 4),
         *ws = dev_copy(NULL, need1);
    ingot_tensor tl = ingot_tensor_2d(dl, INGOT_DTYPE_F32, B, Vn, Vn),
                 tp = ingot_tensor_2d(dp, INGOT_DTYPE_F32, B, Vn, Vn);
    ingot_sampling_params prm = INGOT_SAMPLING_PARAMS_INITIALIZER;
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const ingot_status st =
        ingot_sampling_softmax(gpu, &tl, &prm, &tp, NULL, ws, need1, (struct CUstream_st *)stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    EXPECT_OK(gpu, st);
    size_t nodes = 0;
    CUDA_OK(cudaGraphGetNodes(graph, NULL, &nodes));
    EXPECT(nodes == (B <= 2 ? 3u : 1u), "B=%lld: the softmax captured %zu kernels", (long long)B,
           nodes);
    cudaGraphDestroy(graph);
    cudaFree(dl), cudaFree(dp), cudaFree(ws);
  }
  EXPECT_OK(gpu,
            ingot_sampling_softmax_workspace_size(gpu, 64, 151936, INGOT_DTYPE_BF16, &need64));
  EXPECT(need1 > 0 && need1 == need64, "workspace %zu at B = 1, %zu at B = 64", need1, need64);
  const int64_t V = 151936;
  float *h = xcalloc((size_t)V * 4), *back = xcalloc((size_t)V * 4);
  for (int64_t i = 0; i < V; i++) h[i] = (float)rand_normal();
  void *dl = dev_copy(h, (size_t)V * 4), *dp = dev_copy(NULL, (size_t)V * 4),
       *ws = dev_copy(NULL, need1);
  CUDA_OK(test_fill(dp, 0x7f, (size_t)V * 4));
  ingot_tensor tl = ingot_tensor_2d(dl, INGOT_DTYPE_F32, 1, V, V),
               tp = ingot_tensor_2d(dp, INGOT_DTYPE_F32, 1, V, V);
  ingot_sampling_params prm = INGOT_SAMPLING_PARAMS_INITIALIZER;
  EXPECT(ingot_sampling_softmax(gpu, &tl, &prm, &tp, NULL, ws, need1 - 1,
                                (struct CUstream_st *)stream) ==
             INGOT_STATUS_INSUFFICIENT_WORKSPACE,
         "one byte short: %s", ingot_last_error(gpu));
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaMemcpy(back, dp, (size_t)V * 4, cudaMemcpyDeviceToHost);
  int64_t written = 0;
  for (int64_t i = 0; i < V; i++) written += ((uint32_t *)back)[i] != 0x7f7f7f7fu;
  EXPECT(written == 0, "a refused call wrote %lld probabilities", (long long)written);
  cudaFree(dl), cudaFree(dp), cudaFree(ws);
  free(h), free(back);
  return 0;
}

/* Token, status and the log-probabilities b asks for of g's rows, bit for
 * bit those of ref (the same rows, maybe in a larger batch). */
static void same_draws(const batch *b, const result *g, const result *ref, const char *what) {
  for (int64_t r = 0; r < b->B; r++)
    EXPECT(g->tokens[r] == ref->tokens[r] && g->status[r] == ref->status[r] &&
               (!(b->want_logprobs & kWantFinal) || memcmp(&g->lp[r], &ref->lp[r], 4) == 0) &&
               (!(b->want_logprobs & kWantRaw) || memcmp(&g->raw_lp[r], &ref->raw_lp[r], 4) == 0),
           "%s row %lld: token %d status %u lp %.9g raw %.9g; expected %d %u %.9g %.9g", what,
           (long long)r, g->tokens[r], g->status[r], (double)g->lp[r], (double)g->raw_lp[r],
           ref->tokens[r], ref->status[r], (double)ref->lp[r], (double)ref->raw_lp[r]);
}

/* b (no filter tensors, no lists, no top-n; all: its draws on the plain
 * dense kernel) through the dense kernel's other forms, which must give the
 * same bits: with filter tensors all off (the filter kernel beside the
 * general one), with a top-1 output (the top-n kernel, whose raw sum runs
 * in a pass of its own), and with a bias of 0 on a token of every row (lists:
 * the raw logits read again in the blocks they touch). */
static void dense_forms_agree(const batch *b, const result *all, const char *what) {
  if (b->B > 8) abort(); /* ids and zero below */
  for (int form = 0; form < 3; form++) {
    batch v = *b;
    int32_t ids[16];
    float zero[8] = {0};
    if (form == 0) v.no_filters = 0;
    if (form == 1) v.num_top = 1;
    if (form == 2) {
      v.nbias = v.B;
      v.bias_ids = ids, v.bias_values = zero;
      for (int64_t r = 0; r < v.B; r++)
        ids[2 * r] = (int32_t)r, ids[2 * r + 1] = (int32_t)((r * 7919 + 13) % v.V);
    }
    /* the general kernel (launched beside the filter kernel, and taking a
     * top-n at V > 262144 where the top-n kernel does not fit) holds at
     * most 400k tokens a row with the raw outputs on an H200 */
    if (form < 2 && v.V > 262144) continue;
    result g;
    alloc_result(&g, &v);
    EXPECT_OK(gpu, run_batch(gpu, &v, 0, &g));
    char w[128];
    snprintf(w, sizeof w, "%s, %s", what,
             (const char *[]){"filter tensors off", "top-1", "bias 0"}[form]);
    same_draws(&v, &g, all, w);
    free_result(&g);
  }
}

/* The WIDE sampler (ingot_sample at B <= 2, V >= 32768, no filter tensors,
 * no lists, no top-n outputs: each row over many blocks, partials in the
 * workspace, two launches, counted in a captured graph): its rows against
 * the CPU's, and token, status and the log-probabilities asked for (both,
 * one or none) bit for bit against the same rows in a batch of 8, which the
 * dense kernel takes (mixed rows: NaN / +Inf, all masked, greedy ties,
 * empty, tiny and huge temperatures, a language model's logits whose raw
 * argmax the bitmask allows or masks, make_batch's rows; a bad temperature on
 * one row; B = 3 and 4, the dense kernel's again); V not a multiple of 4,
 * unaligned rows, more chunks than SMs; all dtypes. The batch of 8 also
 * through the dense kernel's other forms (dense_forms_agree). Then the
 * workspace, as for the wide softmax. */
static int test_sample_wide(void) {
  /* 32771: 9 blocks a row of the dense kernel, a partial last group;
   * 201088: the last block's last warps hold no token; 600000: more
   * chunks a row than SMs at B = 2 (8192 tokens a block at most) */
  static const int64_t vocab[5] = {32771, 151936, 201088, 262144, 600000};
  /* rows 0 and 1 (the rows B <= 2 take wide): special_row's kinds, -1 a
   * row as make_batch made it (or plain, unaligned) */
  static const int kinds[5][2] = {{0, 1}, {-1, 2}, {4, 7}, {5, 6}, {7, 3}};
  tally t = {0, 0, 0, 0};
  for (int k = 0; k < 5; k++) {
    batch big;
    wide_batch(&big, vocab[k], k, kinds[k]);
    const ingot_dtype dtype = big.dtype;
    /* round 1: against the CPU too; round 2: a bad temperature on row 1
     * (the CPU refuses the call; both kernels give token -1 and the flag) */
    for (int round = 0; round < 2; round++) {
      if (round) big.temperature[1] = -1.0f;
      big.want_logprobs = round == 0 ? kWantBoth : (int)(test_rand() % 4);
      result all;
      alloc_result(&all, &big);
      EXPECT_OK(gpu, run_batch(gpu, &big, 0, &all));
      if (round == 0) { /* the dense kernel's other forms give the same bits */
        char what[96];
        snprintf(what, sizeof what, "dense forms V=%lld %s", (long long)big.V,
                 ingot_dtype_name(dtype));
        dense_forms_agree(&big, &all, what);
      }
      for (int64_t B = 1 + round; B <= 4; B += 1 + round) {
        batch b = big;
        b.B = B;
        result g;
        alloc_result(&g, &b);
        EXPECT_OK(gpu, run_batch(gpu, &b, 0, &g));
        char what[96];
        snprintf(what, sizeof what, "wide sample V=%lld %s B=%lld", (long long)b.V,
                 ingot_dtype_name(dtype), (long long)B);
        unsigned threads = 0;
        const size_t kernels = captured_kernels(&b, 0, &threads);
        EXPECT(B <= 2 ? kernels == 2 && threads == 256 : kernels == 1 && threads == 512,
               "%s: %zu kernels of %u threads", what, kernels, threads);
        if (round) {
          EXPECT(g.status[1] == INGOT_SAMPLING_ROW_BAD_PARAMETER && g.tokens[1] == -1,
                 "%s row 1: status %u token %d", what, g.status[1], g.tokens[1]);
        } else {
          result c;
          alloc_result(&c, &b);
          EXPECT_OK(cpu, run_batch(cpu, &b, 0, &c));
          compare(&b, &c, &g, &t, what);
          free_result(&c);
        }
        same_draws(&b, &g, &all, what);
        free_result(&g);
      }
      free_result(&all);
    }
    free_batch(&big);
  }
  EXPECT(t.token_diffs == 0, "%lld tokens differ from the CPU's", (long long)t.token_diffs);
  size_t need1, need64;
  EXPECT_OK(gpu, ingot_sample_workspace_size(gpu, 1, 151936, INGOT_DTYPE_F32, 0, &need1));
  EXPECT_OK(gpu, ingot_sample_workspace_size(gpu, 64, 151936, INGOT_DTYPE_BF16, 0, &need64));
  EXPECT(need1 > 0 && need1 == need64, "workspace %zu at B = 1, %zu at B = 64", need1, need64);
  size_t need0 = 1, need0_softmax = 1; /* B = 0: no call runs, nothing needed */
  EXPECT_OK(gpu, ingot_sample_workspace_size(gpu, 0, 151936, INGOT_DTYPE_F32, 0, &need0));
  EXPECT_OK(gpu, ingot_sampling_softmax_workspace_size(gpu, 0, 151936, INGOT_DTYPE_F32,
                                                       &need0_softmax));
  EXPECT(need0 == 0 && need0_softmax == 0, "workspace at B = 0: %zu, softmax %zu", need0,
         need0_softmax);
  const int64_t V = 151936;
  /* two kernels at B = 1 and 2, the dense kernel alone at B = 3; a call
   * one byte short is refused and writes nothing */
  for (int64_t B = 1; B <= 3; B++) {
    void *dl = dev_copy(NULL, (size_t)(B * V) * 4), *dt = dev_copy(NULL, (size_t)B * 4),
         *ws = dev_copy(NULL, need1);
    CUDA_OK(test_fill(dl, 0, (size_t)(B * V) * 4));
    CUDA_OK(test_fill(dt, 0x7f, (size_t)B * 4));
    ingot_tensor tl = ingot_tensor_2d(dl, INGOT_DTYPE_F32, B, V, V),
                 tt = ingot_tensor_1d(dt, INGOT_DTYPE_I32, B);
    ingot_sampling_params prm = INGOT_SAMPLING_PARAMS_INITIALIZER;
    struct CUstream_st *s = (struct CUstream_st *)stream;
    EXPECT(ingot_sample(gpu, &tl, &prm, &tt, NULL, NULL, ws, need1 - 1, s) ==
               INGOT_STATUS_INSUFFICIENT_WORKSPACE,
           "one byte short: %s", ingot_last_error(gpu));
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const ingot_status st = ingot_sample(gpu, &tl, &prm, &tt, NULL, NULL, ws, need1, s);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    EXPECT_OK(gpu, st);
    size_t nodes = 0;
    CUDA_OK(cudaGraphGetNodes(graph, NULL, &nodes));
    EXPECT(nodes == (B <= 2 ? 2u : 1u), "B=%lld: the sample captured %zu kernels", (long long)B,
           nodes);
    cudaGraphDestroy(graph);
    int32_t back[3];
    cudaMemcpy(back, dt, (size_t)B * 4, cudaMemcpyDeviceToHost);
    for (int64_t r = 0; r < B; r++)
      EXPECT((uint32_t)back[r] == 0x7f7f7f7fu, "a refused call wrote token %d", back[r]);
    cudaFree(dl), cudaFree(dt), cudaFree(ws);
  }
  return 0;
}

/* Filter tensors given, half the rows with every filter off: those rows run
 * on the dense kernel, the others on the general one (two launches); every
 * row must equal the CPU, for the sample and the softmax. */
/* Small-k rows where a thread holds more tokens than chunk / 512: V <= 512
 * (one block, lanes 0-7 of each warp hold 4 tokens), so the dense kernel
 * takes top_k <= 32 only; flat and descending rows fill the candidate
 * lists. Tokens must equal the CPU's. */
static int test_small_vocab_topk(void) {
  const int64_t vocabs[3] = {200, 512, 1000};
  for (int vi = 0; vi < 3; vi++) {
    batch b;
    make_batch(&b, 8, vocabs[vi], INGOT_DTYPE_F32, 1, 0);
    b.no_filters = 0;
    for (int64_t r = 0; r < b.B; r++) {
      b.top_k[r] = (int32_t[]){64, 40, 33, 32, 20, 5, 64, 1}[r];
      b.top_p[r] = r % 2 ? 0.9f : 1.0f;
      b.min_p[r] = r % 3 == 2 ? 0.05f : 0.0f;
      b.temperature[r] = 1.0f;
      for (int64_t i = 0; i < b.V; i++)
        set_logit(&b, r, i, r % 4 == 0 ? 1.0f : r % 4 == 1 ? (float)(-0.01 * (double)i)
                                                            : (float)rand_normal());
    }
    result c, g;
    alloc_result(&c, &b), alloc_result(&g, &b);
    EXPECT_OK(cpu, run_batch(cpu, &b, 0, &c));
    EXPECT_OK(gpu, run_batch(gpu, &b, 0, &g));
    tally t = {0, 0, 0, 0};
    compare(&b, &c, &g, &t, "small vocabulary top-k");
    free_result(&c), free_result(&g), free_batch(&b);
  }
  return 0;
}

static int test_mixed_rows(void) {
  batch b;
  make_batch(&b, 16, 50000, INGOT_DTYPE_F32, 0, 0);
  b.no_filters = 0;
  for (int64_t r = 0; r < b.B; r++) {
    const int plain = r % 2 == 0;
    /* filtered rows: a top-k of 20 (the dense kernel's small-k path), or
     * rows 3, 11: top-p alone (the dense kernel's nucleus rows, in ingot_sample)
     * and rows 7, 15: a top-k of 100 (the general kernel), so all paths share
     * the launches */
    b.top_k[r] = plain ? (r % 4 == 0 ? 0 : (int32_t)b.V + 3) : r % 8 == 3 ? 0 : r % 8 == 7 ? 100 : 20;
    b.top_p[r] = plain || r % 4 == 1 ? 1.0f : 0.9f; /* rows 1, 5, ...: top-k only */
    b.min_p[r] = plain || r % 3 ? 0.0f : 0.1f;
  }
  for (int softmax = 0; softmax < 2; softmax++) {
    result c, g;
    alloc_result(&c, &b), alloc_result(&g, &b);
    EXPECT_OK(cpu, run_batch(cpu, &b, softmax, &c));
    EXPECT_OK(gpu, run_batch(gpu, &b, softmax, &g));
    if (!softmax) {
      tally t = {0, 0, 0, 0};
      compare(&b, &c, &g, &t, "mixed rows");
      /* a bad value on a plain row and on a filtered row: flagged there only */
      const float t2 = b.temperature[2], p3 = b.top_p[3];
      b.temperature[2] = NAN, b.top_p[3] = 0.0f;
      result g2;
      alloc_result(&g2, &b);
      EXPECT_OK(gpu, run_batch(gpu, &b, 0, &g2));
      b.temperature[2] = t2, b.top_p[3] = p3;
      for (int64_t r = 0; r < b.B; r++) {
        if (r == 2 || r == 3)
          EXPECT(g2.tokens[r] == -1 && g2.status[r] == INGOT_SAMPLING_ROW_BAD_PARAMETER,
                 "mixed rows, bad row %lld: token %d status %u", (long long)r, g2.tokens[r],
                 g2.status[r]);
        else
          EXPECT(g2.tokens[r] == g.tokens[r] && g2.status[r] == g.status[r],
                 "mixed rows: row %lld changed by the bad rows", (long long)r);
      }
      free_result(&g2);
    } else {
      int64_t bad = 0;
      for (int64_t r = 0; r < b.B; r++) {
        EXPECT(c.status[r] == g.status[r], "softmax row %lld: status %u vs CPU %u",
               (long long)r, g.status[r], c.status[r]);
        for (int64_t i = 0; i < b.V; i++) {
          double pc = c.probs[r * b.V + i], pg = g.probs[r * b.V + i];
          double e = pc >= 0x1p-125 ? fabs(pg - pc) / pc : fabs(pg - pc) <= 0x1p-125 ? 0.0 : 1.0;
          bad += e > 2e-6 && b.top_p[r] == 1.0f; /* top-p rows: their set may differ */
        }
      }
      EXPECT(bad == 0, "mixed rows softmax: %lld probabilities differ", (long long)bad);
    }
    free_result(&c), free_result(&g);
  }
  free_batch(&b);
  return 0;
}

/* The dense softmax at a batch of more than one wave of clusters (f32 and
 * bf16; greedy, empty, NaN and masked rows among them; one row with a bad
 * temperature, which must get zeros and its flag while every other row
 * equals the CPU's). */
static int test_softmax_many_rows(void) {
  for (int d = 0; d < 2; d++) {
    batch b;
    make_batch(&b, 40, 262144, d ? INGOT_DTYPE_BF16 : INGOT_DTYPE_F32, 0, 0);
    set_no_filters(&b);
    result c, g;
    alloc_result(&c, &b), alloc_result(&g, &b);
    EXPECT_OK(cpu, run_batch(cpu, &b, 1, &c));
    const float keep = b.temperature[7];
    b.temperature[7] = NAN;
    EXPECT_OK(gpu, run_batch(gpu, &b, 1, &g));
    b.temperature[7] = keep;
    int64_t bad = 0;
    for (int64_t r = 0; r < b.B; r++) {
      if (r == 7) {
        EXPECT(g.status[r] == INGOT_SAMPLING_ROW_BAD_PARAMETER, "row 7 status %u", g.status[r]);
        for (int64_t i = 0; i < b.V; i++) bad += g.probs[r * b.V + i] != 0.0f;
        continue;
      }
      EXPECT(c.status[r] == g.status[r], "row %lld: status %u vs CPU %u", (long long)r,
             g.status[r], c.status[r]);
      for (int64_t i = 0; i < b.V; i++) {
        double pc = c.probs[r * b.V + i], pg = g.probs[r * b.V + i];
        double e = pc >= 0x1p-125 ? fabs(pg - pc) / pc : fabs(pg - pc) <= 0x1p-125 ? 0.0 : 1.0;
        bad += e > 2e-6;
      }
    }
    EXPECT(bad == 0, "dtype %d: %lld probabilities differ", (int)b.dtype, (long long)bad);
    free_result(&c), free_result(&g), free_batch(&b);
  }
  return 0;
}

/* The known-hard masks against float64: first 16384 columns -Inf; all but 3 ids;
 * a 20000-column block in the middle. */
static int test_seed_rows_vs_float64(void) {
  static const int64_t Vs[] = {151936, 201088, 262144};
  static const int64_t Bs[] = {1, 3, 8};
  double worst = 0;
  /* row r takes mask (r + shift) % 3: B = 1 runs once per mask */
  for (int vi = 0; vi < 3; vi++)
    for (int bi = 0; bi < 3; bi++)
      for (int shift = 0; shift < (Bs[bi] == 1 ? 3 : 1); shift++) {
      batch b;
      make_batch(&b, Bs[bi], Vs[vi], INGOT_DTYPE_F32, 1, 0);
      if ((vi + bi) % 2) set_no_filters(&b); else b.no_filters = 0;
      int64_t V = b.V;
      int64_t three[3] = {(int64_t)(test_rand() % V), (int64_t)(test_rand() % V),
                          (int64_t)(test_rand() % V)};
      for (int64_t r = 0; r < b.B; r++) {
        b.temperature[r] = 1.0f, b.top_k[r] = 0, b.top_p[r] = 1.0f, b.min_p[r] = 0.0f;
        int kind = (int)((r + shift) % 3);
        float *row = (float *)b.logits + r * b.stride;
        for (int64_t i = 0; i < V; i++) {
          int masked = kind == 0 ? i < 16384
                     : kind == 1 ? (i != three[0] && i != three[1] && i != three[2])
                                 : (i >= V / 2 - 10000 && i < V / 2 + 10000);
          if (masked) row[i] = -INFINITY;
        }
      }
      result g;
      alloc_result(&g, &b);
      EXPECT_OK(gpu, run_batch(gpu, &b, 1, &g));
      for (int64_t r = 0; r < b.B; r++) {
        const float *row = (const float *)b.logits + r * b.stride;
        double m = -INFINITY, z = 0;
        for (int64_t i = 0; i < V; i++)
          if ((double)row[i] > m) m = (double)row[i];
        for (int64_t i = 0; i < V; i++)
          if (row[i] != -INFINITY) z += exp((double)row[i] - m);
        double sum = 0;
        for (int64_t i = 0; i < V; i++) {
          double want = row[i] == -INFINITY ? 0.0 : exp((double)row[i] - m) / z;
          double got = g.probs[r * V + i];
          sum += got;
          if (want == 0.0) {
            if (got != 0.0) {
              test_fail_at(__FILE__, __LINE__, "masked token %lld has p = %g", (long long)i, got);
              break;
            }
          } else if (want > 1e-6) {
            double e = fabs(got - want) / want;
            if (e > worst) worst = e;
          }
        }
        EXPECT(fabs(sum - 1.0) < 1e-5, "row %lld sums to %.9g", (long long)r, sum);
      }
      free_result(&g), free_batch(&b);
    }
  printf("  the known-hard masked rows on CUDA: max relative error vs float64 over p > 1e-6: %.3g\n",
         worst);
  EXPECT(worst < 4e-6, "max relative error %.3g", worst);
  return 0;
}

static int three_ids_always(int no_filters) {
  batch b;
  make_batch(&b, 64, 151936, INGOT_DTYPE_BF16, 1, 0);
  b.no_filters = no_filters;
  int64_t three[3] = {7, 70000, 151935};
  for (int64_t r = 0; r < b.B; r++) {
    b.temperature[r] = 1.5f, b.top_k[r] = 0, b.top_p[r] = 1.0f, b.min_p[r] = 0.0f;
    for (int64_t i = 0; i < b.V; i++)
      if (i != three[0] && i != three[1] && i != three[2]) set_logit(&b, r, i, -INFINITY);
    set_logit(&b, r, three[r % 3], 2.0f);
  }
  int hits[3] = {0, 0, 0};
  for (int rep = 0; rep < 8; rep++) {
    for (int64_t r = 0; r < b.B; r++) b.seed[r] = test_rand();
    result g;
    alloc_result(&g, &b);
    EXPECT_OK(gpu, run_batch(gpu, &b, 0, &g));
    for (int64_t r = 0; r < b.B; r++) {
      int which = g.tokens[r] == three[0] ? 0 : g.tokens[r] == three[1] ? 1
                : g.tokens[r] == three[2] ? 2 : -1;
      EXPECT(which >= 0, "row %lld drew %d", (long long)r, g.tokens[r]);
      if (which >= 0) hits[which]++;
    }
    free_result(&g);
  }
  EXPECT(hits[0] && hits[1] && hits[2], "ids drawn %d %d %d", hits[0], hits[1], hits[2]);
  free_batch(&b);
  return 0;
}

/* The masked decode step as engines run it and `ingot bench` times it: a
 * bitmask, both log-probabilities, no lists (the random batches almost always
 * carry some), no filter tensors: the dense kernel. Rows whose allowed tokens
 * sit 100 below the masked-out ones (masses far below the raw maximum), 20
 * below, or among them; NaN sprinkles; T from 1e-3 to 2. Tokens, statuses
 * and log-probabilities against the CPU; row 5 bit for bit against itself
 * alone. */
static int test_masked_step_masses(void) {
  static const struct {
    int64_t B, V;
    ingot_dtype dtype;
  } cases[] = {{12, 151936, INGOT_DTYPE_F32}, {9, 4096, INGOT_DTYPE_BF16},
               {7, 1001, INGOT_DTYPE_F32}};
  static const float temps[6] = {1.0f, 0.8f, 1e-3f, 2.0f, 0.5f, 1.0f};
  tally t = {0, 0, 0, 0};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    batch b;
    make_batch(&b, cases[k].B, cases[k].V, cases[k].dtype, 1, 0);
    set_no_filters(&b);
    b.allowed = xcalloc((size_t)(b.B * b.words) * 4);
    for (int64_t r = 0; r < b.B; r++) {
      const double gap = (double[]){100.0, 20.0, 0.0}[r % 3];
      const double shift = rand_normal() * 20.0, sigma = (double[]){1.0, 3.0}[r % 2];
      b.temperature[r] = temps[r % 6];
      for (int64_t w = 0; w < b.words; w++)
        b.allowed[r * b.words + w] = (uint32_t)test_rand() & (uint32_t)test_rand();
      for (int64_t i = 0; i < b.V; i++) {
        const int allowed = (b.allowed[r * b.words + (i >> 5)] >> (i & 31)) & 1u;
        float v = (float)(shift + sigma * rand_normal() - (allowed ? gap : 0.0));
        if (r % 4 == 3 && test_rand() % 499 == 0) v = NAN;
        set_logit(&b, r, i, v);
      }
    }
    result c, g;
    alloc_result(&c, &b), alloc_result(&g, &b);
    EXPECT_OK(cpu, run_batch(cpu, &b, 0, &c));
    EXPECT_OK(gpu, run_batch(gpu, &b, 0, &g));
    char what[80];
    snprintf(what, sizeof what, "masked step B=%lld V=%lld", (long long)b.B, (long long)b.V);
    compare(&b, &c, &g, &t, what);
    int32_t *ban, *bias;
    batch one = row_alone(&b, 5, &ban, &bias);
    result g1;
    alloc_result(&g1, &one);
    EXPECT_OK(gpu, run_batch(gpu, &one, 0, &g1));
    EXPECT(g1.tokens[0] == g.tokens[5] && memcmp(&g1.lp[0], &g.lp[5], 4) == 0 &&
               memcmp(&g1.raw_lp[0], &g.raw_lp[5], 4) == 0,
           "%s: row 5 alone differs (token %d vs %d, logprob %.9g vs %.9g)", what, g1.tokens[0],
           g.tokens[5], (double)g1.lp[0], (double)g.lp[5]);
    free(ban), free(bias), free_result(&g1);
    free_result(&c), free_result(&g), free_batch(&b);
  }
  EXPECT(t.token_diffs == 0 && t.other_diffs == 0, "tokens differ from the CPU");
  return 0;
}

/* The draw's candidate lists in segments (kDenseSample lists kCandCap = 256
 * candidates a warp, draws the whole rounds of 64 and moves the rest to the
 * front): rows where every token is a candidate (flat), where two of three
 * are (each segment leaves a rest), and where a few are (one segment);
 * tokens and log-probabilities equal the CPU's, row for row. */
static int test_draw_segments(void) {
  static const struct {
    int64_t V;
    ingot_dtype dtype;
  } cases[] = {{262144, INGOT_DTYPE_F32}, {151936, INGOT_DTYPE_BF16}, {4096, INGOT_DTYPE_F16}};
  tally t = {0, 0, 0, 0};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    batch b;
    make_batch(&b, 6, cases[k].V, cases[k].dtype, 1, 0);
    set_no_filters(&b);
    for (int64_t r = 0; r < b.B; r++) {
      b.temperature[r] = (float[]){1.0f, 0.7f, 1.0f, 1.3f, 1.0f, 0.9f}[r];
      const double sigma = (double[]){0.3, 1.0, 3.0}[r % 3];
      for (int64_t i = 0; i < b.V; i++) {
        float v = (float)(sigma * rand_normal());
        if (r / 3 == 1 && i % 3 == 2) v = -INFINITY;       /* two of three tokens */
        if (r == 5 && (i * 7919) % 1000 != 0) v = -60.0f; /* ~0.1% candidates */
        set_logit(&b, r, i, v);
      }
    }
    char what[80];
    snprintf(what, sizeof what, "draw segments V=%lld dtype %d", (long long)b.V, (int)b.dtype);
    sample_compared(&b, &t, what);
    free_batch(&b);
  }
  EXPECT(t.token_diffs == 0 && t.other_diffs == 0, "tokens differ from the CPU");
  return 0;
}

/* The dense kernels differ in shared memory: kDenseSample keeps 8 KB of
 * candidate lists, the selection kernels (top-n, small top-k) a 16-bit
 * scratch as long as the block's chunk. At V = 700000 with the raw
 * log-probability (too large for the general kernel), a plain f32 step
 * fits kDenseSample (185 KB a block) on a device with 16-block clusters
 * and at least 200 KB a block for the dense kernels (H100, H200: 224064
 * bytes) and equals the CPU; its top-n and top-k forms (263 KB) fit
 * neither kernel there: NOT_SUPPORTED before launch, never a failed launch
 * of a kernel chosen by the wrong kernel's size. */
static int test_dense_kernel_fits(void) {
  const int big = gpu->cuda->sampling.dense_cluster == 16 && gpu->cuda->sampling.dense_smem >= 200 * 1024;
  tally t = {0, 0, 0, 0};
  for (int form = 0; form < 3; form++) { /* plain, top-n 8, top-k 50 + top-p 0.9 */
    batch b;
    make_batch(&b, 2, 700000, INGOT_DTYPE_F32, form == 2 ? 2 : 1, form == 1 ? 8 : 0);
    if (form < 2) set_no_filters(&b);
    result c, g;
    alloc_result(&c, &b), alloc_result(&g, &b);
    EXPECT_OK(cpu, run_batch(cpu, &b, 0, &c));
    const ingot_status st = run_batch(gpu, &b, 0, &g);
    EXPECT(st == (form == 0 && big ? INGOT_STATUS_SUCCESS : INGOT_STATUS_NOT_SUPPORTED) ||
               (st == INGOT_STATUS_SUCCESS && !big),
           "V=700000 form %d: status %s", form, ingot_status_string(st));
    char what[80];
    snprintf(what, sizeof what, "V=700000 form %d", form);
    if (st == INGOT_STATUS_SUCCESS) compare(&b, &c, &g, &t, what);
    free_result(&c), free_result(&g), free_batch(&b);
  }
  EXPECT(t.other_diffs == 0 && t.token_diffs * 100 <= t.topp_rows + 1,
         "tokens differ from the CPU");
  return 0;
}

/* Three blocks a SM of the softmax and of the plain sampler at the documented
 * vocabularies, on a device with 16-block clusters and 228 KB of shared
 * memory a SM (H100, H200): the B = 64 rows run 21 rows at once, not 14.
 * The budget is tight (at V = 262144: 3 x (75776 dynamic + 816 static +
 * 1024 reserved) of 233472 bytes for the sampler), so a few more bytes of
 * static shared memory or registers silently drop a block a SM and cost
 * 2-6% at B = 64; only this test notices. Elsewhere: at least one. */
static int test_dense_blocks_per_sm(void) {
  int device = 0, sm_smem = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  const int want = gpu->cuda->sampling.dense_cluster == 16 && sm_smem >= 233472 ? 3 : 1;
  static const ingot_dtype dts[] = {INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16};
  static const int64_t vocabs[] = {151936, 262144};
  for (int softmax = 0; softmax < 2; softmax++)
    for (size_t d = 0; d < 3; d++)
      for (size_t v = 0; v < 2; v++) {
        const int n = ingot_cuda_sampling_dense_blocks_per_sm(gpu, softmax, dts[d], vocabs[v]);
        EXPECT(n >= want, "%s %s V=%lld: %d blocks a SM, want %d",
               softmax ? "softmax" : "sampler", ingot_dtype_name(dts[d]),
               (long long)vocabs[v], n, want);
      }
  /* the 16-bit softmax: six (34 KB a block at V = 262144) */
  const int want_half = want == 3 ? 6 : 1;
  for (size_t d = 1; d < 3; d++)
    for (size_t v = 0; v < 2; v++) {
      const int n = ingot_cuda_sampling_dense_blocks_per_sm(gpu, 2, dts[d], vocabs[v]);
      EXPECT(n >= want_half, "16-bit softmax %s V=%lld: %d blocks a SM, want %d",
             ingot_dtype_name(dts[d]), (long long)vocabs[v], n, want_half);
    }
  EXPECT(gpu->cuda->sampling.half || !gpu->cuda->sampling.dense_cluster, "the 16-bit softmax is not set up");
  printf("  dense kernels at V = 151936 and 262144: >= %d blocks a SM (16-bit softmax: >= %d)\n",
         want, want_half);
  return 0;
}

/* Logit i of row r as fp32 (f32 and bf16 batches). */
static float logit_at(const batch *b, int64_t r, int64_t i) {
  const size_t at = (size_t)(r * b->stride + i);
  if (b->dtype == INGOT_DTYPE_F32) return ((const float *)b->logits)[at];
  const uint32_t u = (uint32_t)((const uint16_t *)b->logits)[at] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The row's largest logit and a bias of +100 on one token a row make it the
 * drawn one (whatever the random logits' spread), so the raw
 * log-probability must come from the logit as given, not from the biased
 * value the kernel holds (the dense kernel reloads it only for rows with
 * lists); more biases and a ban around it. Dense kernel (no filter tensors)
 * and general kernel (top_k 1000), f32 and bf16, greedy and soft rows. */
static int test_biased_draw_raw_logprob(void) {
  static const struct {
    int64_t B, V;
    ingot_dtype dtype;
  } cases[] = {{6, 151936, INGOT_DTYPE_F32}, {5, 3000, INGOT_DTYPE_BF16}};
  static const float temps[3] = {1.0f, 0.0f, 1.7f};
  tally t = {0, 0, 0, 0};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int dense = 0; dense < 2; dense++) {
      batch b;
      make_batch(&b, cases[k].B, cases[k].V, cases[k].dtype, 1, 0);
      if (dense) set_no_filters(&b);
      const int per = 4;
      b.nbias = b.B * per, b.nbanned = b.B;
      b.bias_ids = xcalloc((size_t)(b.nbias * 2) * 4);
      b.bias_values = xcalloc((size_t)b.nbias * 4);
      b.banned = xcalloc((size_t)(b.nbanned * 2) * 4);
      int32_t *favoured = xcalloc((size_t)b.B * 4);
      for (int64_t r = 0; r < b.B; r++) {
        b.temperature[r] = temps[r % 3];
        if (!dense) b.top_k[r] = 1000, b.top_p[r] = 1.0f, b.min_p[r] = 0.0f;
        favoured[r] = (int32_t)(test_rand() % b.V);
        /* the favoured token takes the row's largest logit and +100: its key
         * then beats every other's by more than the Gumbel range (25.7) at
         * T = 1.7, even past the other biases (|N(0, 5^2)| < 30) */
        float top = -INFINITY;
        for (int64_t i = 0; i < b.V; i++) top = fmaxf(top, logit_at(&b, r, i));
        set_logit(&b, r, favoured[r], top);
        for (int e = 0; e < per; e++) {
          const int64_t at = r * per + e;
          int32_t other = (int32_t)(test_rand() % b.V);
          if (other == favoured[r]) other = (other + 2) % (int32_t)b.V;
          b.bias_ids[2 * at] = (int32_t)r;
          b.bias_ids[2 * at + 1] = e == 0 ? favoured[r] : other;
          b.bias_values[at] = e == 0 ? 100.0f : (float)(rand_normal() * 5.0);
        }
        b.banned[2 * r] = (int32_t)r;
        b.banned[2 * r + 1] = (int32_t)((favoured[r] + 1) % b.V);
      }
      result c, g;
      alloc_result(&c, &b), alloc_result(&g, &b);
      EXPECT_OK(cpu, run_batch(cpu, &b, 0, &c));
      EXPECT_OK(gpu, run_batch(gpu, &b, 0, &g));
      char what[96];
      snprintf(what, sizeof what, "biased draw B=%lld V=%lld %s", (long long)b.B,
               (long long)b.V, dense ? "dense" : "general");
      for (int64_t r = 0; r < b.B; r++)
        EXPECT(c.tokens[r] == favoured[r], "%s row %lld: the CPU drew %d, not the favoured %d",
               what, (long long)r, c.tokens[r], favoured[r]);
      compare(&b, &c, &g, &t, what);
      free(favoured);
      free_result(&c), free_result(&g), free_batch(&b);
    }
  EXPECT(t.token_diffs == 0 && t.other_diffs == 0, "tokens differ from the CPU");
  return 0;
}

/* Top-n outputs on the dense kernel (rows without a filter, n <= its small
 * k; the final distribution, or the raw one, read again from the logits) and
 * on the general kernel (n past small k, rows with filters): == CPU, top ids
 * exactly, log-probabilities within 2e-6. Rows: greedy (T = 0: one-hot final
 * list, raw list at T' = 1), soft, all -Inf (empty), NaN sprinkles, and (with
 * a bitmask) rows the bitmask may empty while their raw list stays; V = 300
 * takes n <= 32 on the dense kernel. Variant 4's rows descend, so that the
 * largest logits crowd into the first block: the raw selection's lists
 * overflow and its second attempt (exact thread maxima of the logits read
 * again) runs. */
static int test_top_n(void) {
  static const struct {
    int64_t B, V;
    ingot_dtype dtype;
  } shapes[] = {{5, 151936, INGOT_DTYPE_F32}, {6, 3000, INGOT_DTYPE_BF16},
                {4, 300, INGOT_DTYPE_F16}};
  static const int64_t ns[] = {1, 8, 64};
  static const float temps[4] = {0.0f, 0.7f, 1.0f, 1.5f};
  tally t = {0, 0, 0, 0};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
      for (int variant = 0; variant < 5; variant++) {
        /* 0: raw, no mask; 1: final, bitmask; 2: raw, bitmask (row 3 all
         * masked); 3: final, filter tensors with row 0 on top-p 0.9 (split);
         * 4: raw, bitmask, descending rows */
        batch b;
        make_batch(&b, shapes[s].B, shapes[s].V, shapes[s].dtype, 1, ns[k]);
        set_no_filters(&b);
        b.flags = variant == 1 || variant == 3 ? INGOT_SAMPLING_TOP_FINAL : 0;
        if (variant == 4)
          for (int64_t r = 0; r < b.B; r++)
            for (int64_t i = 0; i < b.V; i++) set_logit(&b, r, i, (float)(3.0 - 0.01 * (double)i));
        if (variant == 1 || variant == 2 || variant == 4) {
          b.allowed = xcalloc((size_t)(b.B * b.words) * 4);
          for (int64_t w = 0; w < b.B * b.words; w++)
            b.allowed[w] = w / b.words == 3 && variant == 2
                               ? 0u
                               : (uint32_t)test_rand() | (uint32_t)test_rand();
        }
        if (variant == 3) b.no_filters = 0, b.top_p[0] = 0.9f;
        for (int64_t r = 0; r < b.B; r++) {
          b.temperature[r] = temps[(r + (int64_t)k) % 4];
          for (int64_t i = 0; i < b.V; i++) {
            if (r == 1) set_logit(&b, r, i, -INFINITY); /* empty */
            if (r == 2 && test_rand() % 97 == 0) set_logit(&b, r, i, NAN);
          }
        }
        char what[96];
        snprintf(what, sizeof what, "top-n V=%lld n=%lld variant %d", (long long)b.V,
                 (long long)ns[k], variant);
        sample_compared(&b, &t, what);
        free_batch(&b);
      }
  EXPECT(t.token_diffs == 0 && t.other_diffs == 0, "tokens differ from the CPU");
  return 0;
}

/* Nucleus rows (top-p and / or min-p without a top-k): the dense kernel
 * draws such a row in its top-k set K (k = 64; 32 at V = 300) when the final
 * set F lies in K, and hands the others to the general kernel of the same
 * call. Rows built for each way (K: drawn in K; H: handed off; at V = 300
 * some K rows are H):
 *   0 peaked (sigma 8), top-p 0.9: K          1  the same with min-p 0.1: K
 *   2 a head of 40 near-equal tokens, top-p 0.9: K (F ~36 deep)
 *   3 a head of 63 near-equal tokens, top-p 0.97: K (F ends at K's end)
 *   4 one token at s = 0, 300 at s = -1.5, top-p 0.9: H after the selection
 *     (p * mass ~61 <= 64, K's mass ~15)
 *   5 row 4 with min-p 0.3: K (min-p cuts F to the first token)
 *   6 flat (sigma 0.3), top-p 0.9: H at once (p * mass > 64)
 *   7 flat, min-p 0.5 alone: H after the selection (F is thousands deep)
 *   8 peaked, min-p 0.2 alone: K
 *   9 10 tokens allowed by the bitmask, top-p 0.99999994: K (K is the row)
 *  10 greedy (T = 0), top-p 0.5   11 empty (all -Inf), top-p 0.9
 *  12 peaked with NaN sprinkles, top-p 0.9
 *  13-15 random sigma, T, top-p and min-p
 * Everything equals the CPU (a drawn token may differ only at a top-p
 * boundary: counted, at most 1%); a dense draw of an H row from K alone
 * would miss the CPU's token most of the time (K holds a quarter of row
 * 4's F). */
static int test_nucleus_rows(void) {
  static const struct {
    int64_t V;
    ingot_dtype dtype;
  } shapes[] = {{151936, INGOT_DTYPE_F32}, {3000, INGOT_DTYPE_BF16}, {300, INGOT_DTYPE_F16}};
  const int64_t B = 16;
  tally t = {0, 0, 0, 0};
  for (int rep = 0; rep < (quick ? 1 : 3); rep++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      batch b;
      make_batch(&b, B, shapes[s].V, shapes[s].dtype, 1, 0);
      const int64_t V = b.V;
      b.no_filters = 0;
      b.allowed = xcalloc((size_t)(B * b.words) * 4);
      for (int64_t w = 0; w < B * b.words; w++) b.allowed[w] = w / b.words == 9 ? 0u : ~0u;
      for (int64_t i = 0; i < 10; i++) {
        const int64_t id = (i * 7919 + rep) % V;
        b.allowed[9 * b.words + (id >> 5)] |= 1u << (id & 31);
      }
      for (int64_t r = 0; r < B; r++) {
        const double sigmas[4] = {0.3, 1.0, 3.0, 8.0};
        const double sigma = r == 6 || r == 7 ? 0.3 : r >= 13 ? sigmas[test_rand() % 4] : 8.0;
        const int64_t head = r == 2 ? 40 : r == 3 ? 63 : r == 4 || r == 5 ? 301 : 0;
        for (int64_t i = 0; i < V; i++) {
          double v = sigma * rand_normal();
          if (head) /* a head at 10 (row 4, 5: one token, then 300 at 8.5), the rest -30 */
            v = i >= head ? -30.0 : (r >= 4 && i > 0 ? 8.5 : 10.0) + 0.01 * rand_normal();
          if (r == 11 || (r == 12 && test_rand() % 97 == 0)) v = r == 11 ? -INFINITY : NAN;
          set_logit(&b, r, i, (float)v);
        }
        const float temps[4] = {0.5f, 0.8f, 1.0f, 1.5f};
        b.temperature[r] = r == 10 ? 0.0f : r >= 13 ? temps[test_rand() % 4] : 1.0f;
        b.top_k[r] = r % 5 == 0 ? 0 : (int32_t)V + (int32_t)r; /* off: 0 or >= V */
        b.top_p[r] = (float[]){0.9f, 0.9f, 0.9f, 0.97f, 0.9f, 0.9f, 0.9f, 1.0f, 1.0f,
                               0.99999994f, 0.5f, 0.9f, 0.9f, 0.9f, 0.5f, 1.0f}[r];
        b.min_p[r] = (float[]){0.0f, 0.1f, 0.0f, 0.0f, 0.0f, 0.3f, 0.0f, 0.5f, 0.2f, 0.0f, 0.0f,
                               0.0f, 0.0f, 0.05f, 0.0f, 0.3f}[r];
      }
      char what[64];
      snprintf(what, sizeof what, "nucleus rows V=%lld", (long long)V);
      sample_compared(&b, &t, what);
      free_batch(&b);
    }
  printf("  nucleus rows: %lld, %lld with top-p, tokens differing from the CPU: %lld\n",
         (long long)t.rows, (long long)t.topp_rows, (long long)t.token_diffs);
  EXPECT(t.token_diffs * 100 <= t.topp_rows + 1, "too many top-p boundary differences: %lld",
         (long long)t.token_diffs);
  return 0;
}

/* Top-n sets and top-k draws whose boundary lies in a run of logits one ulp
 * apart that the division by T maps pairwise onto the same s (the reference
 * breaks such ties by the lower id). The dense kernel's selection starts
 * from each thread's largest x, whose key is not the thread's largest when
 * a lower id holds a smaller x of the same s, and computes s only above a
 * floor of x derived from the threshold: tied pairs placed that way in one
 * group of four tokens (one thread) check both. m = 24, the run from 8.1
 * down (x - m in [-16, -8): consecutive x give consecutive x - m), T = 1.95
 * (s ~ -8.15, an ulp of s about half the run's step: every other pair ties);
 * 10 tokens above the run, so ranks 33, 50 and 64 fall inside it. Variants:
 * final top-64 (no filter), raw top-64 with a bitmask (the logits read
 * again), raw top-50 without one, and top-k 33 / 50 / 64 draws. */
static int64_t free_group(unsigned char *used, int64_t groups) {
  int64_t g;
  do g = (int64_t)(test_rand() % (uint64_t)groups);
  while (used[g]);
  used[g] = 1;
  return g;
}

static int test_rounding_ties(void) {
  const int64_t B = 6, V = 151936, run = 160, groups = V / 4;
  const float T = 1.95f;
  tally t = {0, 0, 0, 0};
  int64_t ties = 0;
  unsigned char *used = xcalloc((size_t)groups);
  for (int variant = 0; variant < 4; variant++) {
    batch b;
    make_batch(&b, B, V, INGOT_DTYPE_F32, 1, variant == 3 ? 0 : variant == 2 ? 50 : 64);
    if (variant < 3) set_no_filters(&b);
    b.flags = variant == 0 ? INGOT_SAMPLING_TOP_FINAL : 0;
    if (variant == 1) {
      b.allowed = xcalloc((size_t)(B * b.words) * 4);
      memset(b.allowed, 0xff, (size_t)(B * b.words) * 4);
    }
    for (int64_t r = 0; r < B; r++) {
      memset(used, 0, (size_t)groups);
      for (int64_t i = 0; i < V; i++) set_logit(&b, r, i, (float)(-30.0 + rand_normal()));
      for (int64_t i = 0; i < 10; i++) {
        const int64_t g = free_group(used, groups);
        set_logit(&b, r, 4 * g + 3, i == 0 ? 24.0f : (float)(23.0 + 0.5 * test_rand_unit()));
      }
      float x = 8.1f;
      for (int64_t i = 0; i < run;) {
        const float next = nextafterf(x, 0.0f);
        const int64_t g = free_group(used, groups);
        if (i + 1 < run && (x - 24.0f) / T == (next - 24.0f) / T) {
          set_logit(&b, r, 4 * g, next); /* the lower id holds the lower x */
          set_logit(&b, r, 4 * g + 1, x);
          ties++;
          x = nextafterf(next, 0.0f), i += 2;
        } else {
          set_logit(&b, r, 4 * g + 2, x);
          x = next, i++;
        }
      }
      b.temperature[r] = T;
      if (variant == 3) b.top_k[r] = (int32_t[]){33, 50, 64}[r % 3], b.top_p[r] = 1.0f;
    }
    char what[64];
    snprintf(what, sizeof what, "rounding ties, variant %d", variant);
    sample_compared(&b, &t, what);
    free_batch(&b);
  }
  free(used);
  EXPECT(ties >= 4 * B * 20, "only %lld tied pairs: the run no longer ties", (long long)ties);
  EXPECT(t.token_diffs == 0 && t.other_diffs == 0, "tokens differ from the CPU");
  return 0;
}

static int test_three_ids_always(void) { return three_ids_always(0) || three_ids_always(1); }

static int batch_invariance(int no_filters) {
  batch big;
  make_batch(&big, 64, 151936, INGOT_DTYPE_F32, 0, no_filters ? 0 : 8);
  if (no_filters) set_no_filters(&big); else big.no_filters = 0;
  big.flags = 0;
  big.banned[0] = 37, big.banned[1] = 5; /* at least one list entry for row 37 */
  result g64;
  alloc_result(&g64, &big);
  EXPECT_OK(gpu, run_batch(gpu, &big, 0, &g64));
  /* row 37 alone, at B = 1 (lists rewritten to row 0) */
  int32_t *ban, *bias;
  batch one = row_alone(&big, 37, &ban, &bias);
  result g1;
  alloc_result(&g1, &one);
  EXPECT_OK(gpu, run_batch(gpu, &one, 0, &g1));
  EXPECT(g1.tokens[0] == g64.tokens[37] && g1.status[0] == g64.status[37],
         "row 37 of B = 64: token %d status %u; alone: %d %u", g64.tokens[37], g64.status[37],
         g1.tokens[0], g1.status[0]);
  EXPECT(memcmp(&g1.lp[0], &g64.lp[37], 4) == 0 && memcmp(&g1.raw_lp[0], &g64.raw_lp[37], 4) == 0,
         "logprobs differ: %.9g %.9g vs %.9g %.9g", (double)g1.lp[0], (double)g1.raw_lp[0], (double)g64.lp[37],
         (double)g64.raw_lp[37]);
  EXPECT(no_filters || (memcmp(g1.top_ids, g64.top_ids + 37 * 8, 32) == 0 &&
                         memcmp(g1.top_lp, g64.top_lp + 37 * 8, 32) == 0),
         "top-n differ");
  if (no_filters) {
    /* and the softmax of row 37, every probability bit for bit */
    result p64, p1;
    alloc_result(&p64, &big), alloc_result(&p1, &one);
    EXPECT_OK(gpu, run_batch(gpu, &big, 1, &p64));
    EXPECT_OK(gpu, run_batch(gpu, &one, 1, &p1));
    EXPECT(memcmp(p1.probs, p64.probs + 37 * big.V, (size_t)big.V * 4) == 0,
           "softmax of row 37 differs from the row alone");
    free_result(&p64), free_result(&p1);
  }
  free(ban), free(bias), free_result(&g1), free_result(&g64), free_batch(&big);
  return 0;
}

static int test_batch_invariance(void) { return batch_invariance(0) || batch_invariance(1); }

static int bad_parameter_row(int no_filters) {
  batch b;
  make_batch(&b, 6, 5000, INGOT_DTYPE_F32, 1, no_filters ? 0 : 4);
  if (no_filters) set_no_filters(&b); else b.no_filters = 0;
  result c, g;
  alloc_result(&c, &b), alloc_result(&g, &b);
  EXPECT_OK(cpu, run_batch(cpu, &b, 0, &c));
  static const struct {
    int field;
    float value;
  } cases[] = {{0, -1.0f}, {0, NAN}, {0, INFINITY}, {1, -3.0f}, {2, 0.0f}, {2, 1.5f}, {3, 2.0f}};
  for (size_t k = 0; k < (no_filters ? 3 : sizeof cases / sizeof cases[0]); k++) {
    batch bb = b;
    float T = b.temperature[2], P = b.top_p[2], Q = b.min_p[2];
    int32_t K = b.top_k[2];
    if (cases[k].field == 0) b.temperature[2] = cases[k].value;
    if (cases[k].field == 1) b.top_k[2] = (int32_t)cases[k].value;
    if (cases[k].field == 2) b.top_p[2] = cases[k].value;
    if (cases[k].field == 3) b.min_p[2] = cases[k].value;
    EXPECT_OK(gpu, run_batch(gpu, &bb, 0, &g));
    EXPECT(g.tokens[2] == -1 && g.status[2] == INGOT_SAMPLING_ROW_BAD_PARAMETER,
           "case %zu: row 2 token %d status %u", k, g.tokens[2], g.status[2]);
    EXPECT(g.lp[2] == -INFINITY && g.raw_lp[2] == -INFINITY,
           "case %zu: row 2 log-probabilities %g %g, not -Inf", k, (double)g.lp[2],
           (double)g.raw_lp[2]);
    for (int64_t j = 0; j < b.num_top; j++)
      EXPECT(g.top_ids[2 * b.num_top + j] == -1 && g.top_lp[2 * b.num_top + j] == -INFINITY,
             "case %zu: row 2 top-n slot %lld holds %d %g, not -1 -Inf", k, (long long)j,
             g.top_ids[2 * b.num_top + j], (double)g.top_lp[2 * b.num_top + j]);
    for (int64_t r = 0; r < b.B; r++)
      if (r != 2)
        EXPECT(g.tokens[r] == c.tokens[r] || b.top_p[r] < 1.0f, "case %zu: row %lld changed", k,
               (long long)r);
    b.temperature[2] = T, b.top_p[2] = P, b.min_p[2] = Q, b.top_k[2] = K;
  }
  free_result(&c), free_result(&g), free_batch(&b);
  return 0;
}

static int test_bad_parameter_row(void) { return bad_parameter_row(0) || bad_parameter_row(1); }

/* New values in every input of b (shapes and list capacities unchanged)
 * for replay `rep`: logits, bitmask (row 4 all masked in replay 1),
 * temperature (row 0 greedy in replay 1), seed, position, the filters
 * (rows cycling through off, small top-k + top-p, min-p alone, top-k 1000 +
 * top-p, top-k 50, top-p alone: min-p and top-p alone are nucleus rows, each
 * drawn by the dense kernel or handed to the general one by its values) and
 * the lists (rows -1 .. B, so some entries are padding
 * and some out of range, tokens anywhere). */
static void new_inputs(batch *b, int rep) {
  static const int32_t ks[6] = {0, 20, 0, 1000, 50, 0};
  static const float ps[6] = {1.0f, 0.9f, 1.0f, 0.5f, 1.0f, 0.9f};
  static const float qs[6] = {0, 0, 0.05f, 0, 0, 0};
  for (int64_t r = 0; r < b->B; r++) {
    for (int64_t i = 0; i < b->V; i++) set_logit(b, r, i, (float)(rand_normal() * 3.0));
    for (int64_t w = 0; w < b->words; w++)
      b->allowed[r * b->words + w] =
          rep == 1 && r == 4 ? 0u : (uint32_t)test_rand() | (uint32_t)test_rand();
    b->seed[r] = test_rand(), b->position[r] = test_rand() % 1000;
    b->temperature[r] = rep == 1 && r == 0 ? 0.0f : 0.7f + 0.3f * (float)rep;
    const int64_t c = (r + rep) % 6;
    b->top_k[r] = ks[c], b->top_p[r] = ps[c], b->min_p[r] = qs[c];
  }
  for (int64_t e = 0; e < b->nbanned; e++) {
    b->banned[2 * e] = (int32_t)((e + rep) % (b->B + 2)) - 1;
    b->banned[2 * e + 1] = (int32_t)(test_rand() % b->V);
  }
  for (int64_t e = 0; e < b->nbias; e++) {
    b->bias_ids[2 * e] = (int32_t)((e + 2 * rep) % (b->B + 2)) - 1;
    b->bias_ids[2 * e + 1] = (int32_t)(test_rand() % b->V);
    b->bias_values[e] = (float)(rand_normal() * 5.0);
  }
}

/* Capture one call into a graph and replay it with new values written into
 * EVERY input buffer (new_inputs); each replay must equal an eager call on
 * the same inputs, bit for bit. n: top-n columns (> 0: every filtered row
 * on the general kernel). filters: top_k / top_p / min_p tensors given
 * (without top-n the two kernels split the rows: plain, small top-k and
 * nucleus rows dense, unless a nucleus row is handed off, the others
 * general). softmax: ingot_sampling_softmax instead of ingot_sample. B rows,
 * bias and ban lists of `lists` entries each (B = 2 without lists or filters:
 * the three launches of the wide softmax or the two of the wide sampler). */
static int graph_replay(int64_t n, int filters, int softmax, int64_t B, int64_t lists) {
  const int64_t V = 151936;
  batch b;
  make_batch(&b, B, V, INGOT_DTYPE_BF16, 1, n);
  b.no_filters = !filters;
  b.allowed = xcalloc((size_t)(B * b.words) * 4);
  b.nbanned = b.nbias = lists;
  b.banned = xcalloc(lists * 8 + 8), b.bias_ids = xcalloc(lists * 8 + 8);
  b.bias_values = xcalloc(lists * 4 + 4);
  new_inputs(&b, 0);
  result o, e;
  alloc_result(&o, &b), alloc_result(&e, &b);
  call_buffers f;
  buffers_make(&f, gpu, &b, softmax, &o);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ingot_status st = buffers_call(gpu, &f, &b, softmax);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  EXPECT_OK(gpu, st);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; rep++) {
    new_inputs(&b, rep);
    upload(&f, &b);
    CUDA_OK(cudaGraphLaunch(exec, stream));
    EXPECT_OK(gpu, download(&f, &b, softmax, &o));
    EXPECT_OK(gpu, run_batch(gpu, &b, softmax, &e));
    const char *what = softmax ? "softmax" : "sample";
    for (int64_t r = 0; r < B; r++) {
      EXPECT(o.status[r] == e.status[r], "%s replay %d row %lld: status %u, eager %u", what, rep,
             (long long)r, o.status[r], e.status[r]);
      if (softmax) {
        EXPECT(memcmp(o.probs + r * V, e.probs + r * V, (size_t)V * 4) == 0,
               "softmax replay %d row %lld: probabilities differ from eager", rep, (long long)r);
        continue;
      }
      EXPECT(o.tokens[r] == e.tokens[r] && memcmp(&o.lp[r], &e.lp[r], 4) == 0 &&
                 memcmp(&o.raw_lp[r], &e.raw_lp[r], 4) == 0,
             "sample replay %d row %lld: token %d lp %.9g raw %.9g, eager %d %.9g %.9g", rep,
             (long long)r, o.tokens[r], (double)o.lp[r], (double)o.raw_lp[r], e.tokens[r],
             (double)e.lp[r], (double)e.raw_lp[r]);
      EXPECT(memcmp(o.top_ids + r * n, e.top_ids + r * n, (size_t)n * 4) == 0 &&
                 memcmp(o.top_lp + r * n, e.top_lp + r * n, (size_t)n * 4) == 0,
             "sample replay %d row %lld: top-n differs", rep, (long long)r);
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  buffers_free(&f);
  free_result(&o), free_result(&e), free_batch(&b);
  return 0;
}

static int test_graph_replay(void) {
  return graph_replay(5, 1, 0, 6, 12) || graph_replay(0, 0, 0, 6, 12) ||
         graph_replay(0, 1, 0, 6, 12) || graph_replay(0, 0, 1, 6, 12) ||
         graph_replay(0, 1, 1, 6, 12) || graph_replay(0, 0, 1, 2, 0) ||
         graph_replay(0, 0, 0, 2, 0);
}

/* Calls that depend on each other through memory, queued back to back in a
 * CUDA graph: a softmax writes P, ingot_sample reads P as its logits, a
 * second softmax overwrites P. The tokens must be the CPU's draw on the
 * first P (read after write) and P the second softmax's (write after read).
 * P starts as zeros each round. With programmatic dependent launch each
 * kernel is scheduled while the previous one runs, so this is where a wait
 * placed too late would show (docs/decisions/0007-programmatic-dependent-launch.md). A
 * fourth call, a softmax of P into Q, reads what the kernel before it has
 * just written (the wide softmax's second kernel reads its logits before
 * its own wait). B = 4: the dense kernel; B = 2: the wide softmax and the
 * wide sampler (whose second kernel reads P before its wait too). */
static int chained_calls(int64_t B) {
  const int64_t V = 262144;
  const size_t bytes = (size_t)(B * V) * 4;
  float *h1 = xcalloc(bytes), *h2 = xcalloc(bytes), *p1 = xcalloc(bytes), *p2 = xcalloc(bytes),
        *q = xcalloc(bytes), *got = xcalloc(bytes), temp[4], one[4];
  uint64_t seed[4], pos[4];
  int32_t tok[4], want[4];
  for (int64_t r = 0; r < B; r++) temp[r] = 0.8f, one[r] = 1e-6f;
  float *d1 = dev_copy(NULL, bytes), *d2 = dev_copy(NULL, bytes), *dp = dev_copy(NULL, bytes),
        *dq = dev_copy(NULL, bytes), *dT = dev_copy(temp, sizeof temp),
        *dOne = dev_copy(one, sizeof one);
  void *dS = dev_copy(NULL, sizeof seed), *dPos = dev_copy(NULL, sizeof pos),
       *dTok = dev_copy(NULL, sizeof tok);
  size_t swsb, dwsb;
  void *sws = softmax_workspace(gpu, B, V, &swsb), *dws = sample_workspace(gpu, B, V, &dwsb);
  ingot_tensor t1 = ingot_tensor_2d(d1, INGOT_DTYPE_F32, B, V, V),
               t2 = ingot_tensor_2d(d2, INGOT_DTYPE_F32, B, V, V),
               tp = ingot_tensor_2d(dp, INGOT_DTYPE_F32, B, V, V),
               tq = ingot_tensor_2d(dq, INGOT_DTYPE_F32, B, V, V),
               tT = ingot_tensor_1d(dT, INGOT_DTYPE_F32, B),
               tOne = ingot_tensor_1d(dOne, INGOT_DTYPE_F32, B),
               tS = ingot_tensor_1d(dS, INGOT_DTYPE_U64, B),
               tPos = ingot_tensor_1d(dPos, INGOT_DTYPE_U64, B),
               tTok = ingot_tensor_1d(dTok, INGOT_DTYPE_I32, B);
  /* the draw on P: temperature 1e-6, so that probabilities' differences decide */
  ingot_sampling_params soft = INGOT_SAMPLING_PARAMS_INITIALIZER, draw = soft;
  soft.temperature = &tT;
  draw.temperature = &tOne, draw.seed = &tS, draw.position = &tPos;
  struct CUstream_st *s = (struct CUstream_st *)stream;
  for (int round = 0; round < (quick ? 1 : 3); round++) {
    for (size_t i = 0; i < (size_t)(B * V); i++)
      h1[i] = (float)(rand_normal() * 3.0), h2[i] = (float)(rand_normal() * 3.0);
    for (int64_t r = 0; r < B; r++) seed[r] = test_rand(), pos[r] = test_rand() % 1000;
    test_upload(d1, h1, bytes);
    test_upload(d2, h2, bytes);
    test_upload(dS, seed, sizeof seed);
    test_upload(dPos, pos, sizeof pos);
    /* each softmax alone, for the expected values */
    EXPECT_OK(gpu, ingot_sampling_softmax(gpu, &t1, &soft, &tp, NULL, sws, swsb, s));
    CUDA_OK(cudaStreamSynchronize(stream));
    cudaMemcpy(p1, dp, bytes, cudaMemcpyDeviceToHost);
    EXPECT_OK(gpu, ingot_sampling_softmax(gpu, &t2, &soft, &tp, NULL, sws, swsb, s));
    CUDA_OK(cudaStreamSynchronize(stream));
    cudaMemcpy(p2, dp, bytes, cudaMemcpyDeviceToHost);
    EXPECT_OK(gpu, ingot_sampling_softmax(gpu, &tp, &soft, &tq, NULL, sws, swsb, s));
    CUDA_OK(cudaStreamSynchronize(stream));
    cudaMemcpy(q, dq, bytes, cudaMemcpyDeviceToHost);
    /* the chain, in a graph so that each kernel is queued before the previous
     * one ends (eager calls from the host would come too late to overlap) */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CUDA_OK(cudaMemsetAsync(dp, 0, bytes, stream));
    CUDA_OK(cudaMemsetAsync(dq, 0, bytes, stream));
    ingot_status st[4] = {ingot_sampling_softmax(gpu, &t1, &soft, &tp, NULL, sws, swsb, s),
                          ingot_sample(gpu, &tp, &draw, &tTok, NULL, NULL, dws, dwsb, s),
                          ingot_sampling_softmax(gpu, &t2, &soft, &tp, NULL, sws, swsb, s),
                          ingot_sampling_softmax(gpu, &tp, &soft, &tq, NULL, sws, swsb, s)};
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    for (int i = 0; i < 4; i++) EXPECT_OK(gpu, st[i]);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaMemcpy(tok, dTok, sizeof tok, cudaMemcpyDeviceToHost);
    cudaMemcpy(got, dp, bytes, cudaMemcpyDeviceToHost);
    /* the CPU's draw on the first P */
    ingot_tensor c1 = ingot_tensor_2d(p1, INGOT_DTYPE_F32, B, V, V),
                 cOne = ingot_tensor_1d(one, INGOT_DTYPE_F32, B),
                 cS = ingot_tensor_1d(seed, INGOT_DTYPE_U64, B),
                 cPos = ingot_tensor_1d(pos, INGOT_DTYPE_U64, B),
                 cTok = ingot_tensor_1d(want, INGOT_DTYPE_I32, B);
    ingot_sampling_params cdraw = INGOT_SAMPLING_PARAMS_INITIALIZER;
    cdraw.temperature = &cOne, cdraw.seed = &cS, cdraw.position = &cPos;
    size_t need = 0;
    EXPECT_OK(cpu, ingot_sample_workspace_size(cpu, B, V, INGOT_DTYPE_F32, 0, &need));
    void *ws = need ? aligned_alloc(64, (need + 63) / 64 * 64) : NULL;
    EXPECT_OK(cpu, ingot_sample(cpu, &c1, &cdraw, &cTok, NULL, NULL, ws, need, NULL));
    free(ws);
    int64_t differ = 0;
    for (int64_t r = 0; r < B; r++) differ += tok[r] != want[r];
    EXPECT(differ == 0, "round %d: %lld of %lld tokens differ from the CPU's draw on the first P",
           round, (long long)differ, (long long)B);
    EXPECT(memcmp(got, p2, bytes) == 0, "B=%lld round %d: P is not the second softmax's",
           (long long)B, round);
    cudaMemcpy(got, dq, bytes, cudaMemcpyDeviceToHost);
    EXPECT(memcmp(got, q, bytes) == 0, "B=%lld round %d: Q is not the softmax of the second P",
           (long long)B, round);
  }
  void *all[] = {d1, d2, dp, dq, dT, dOne, dS, dPos, dTok, sws, dws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cudaFree(all[i]);
  free(h1), free(h2), free(p1), free(p2), free(q), free(got);
  return 0;
}

static int test_chained_calls(void) { return chained_calls(4) || chained_calls(2); }

/* A fresh context whose first calls are captured into a graph (global
 * mode): nothing a first call sets up may be illegal during a capture (the
 * kernels' attributes are set when the context is created). B = 48 rows of
 * V = 262144, more than run at once; the replay must equal the shared
 * context's eager calls, bit for bit. */
static int test_capture_first_call(void) {
  const int64_t B = 48, V = 262144, W = (V + 31) / 32;
  const size_t n = (size_t)(B * V);
  float *h = xcalloc(n * 4), *temp = xcalloc(B * 4), *p_graph = xcalloc(n * 4),
        *p_eager = xcalloc(n * 4);
  uint32_t *allowed = xcalloc((size_t)(B * W) * 4);
  uint64_t *seed = xcalloc(B * 8);
  int32_t *tok_graph = xcalloc(B * 4), *tok_eager = xcalloc(B * 4);
  for (size_t i = 0; i < n; i++) h[i] = (float)(rand_normal() * 3.0);
  for (int64_t i = 0; i < B * W; i++) allowed[i] = (uint32_t)test_rand();
  for (int64_t r = 0; r < B; r++) temp[r] = 0.8f, seed[r] = test_rand();
  float *dl = dev_copy(h, n * 4), *dT = dev_copy(temp, B * 4), *dp = dev_copy(NULL, n * 4);
  void *dA = dev_copy(allowed, (size_t)(B * W) * 4), *dS = dev_copy(seed, B * 8),
       *dTok = dev_copy(NULL, B * 4);
  size_t wsb, dwsb;
  void *ws = softmax_workspace(gpu, B, V, &wsb), *dws = sample_workspace(gpu, B, V, &dwsb);
  ingot_tensor tl = ingot_tensor_2d(dl, INGOT_DTYPE_F32, B, V, V),
               tp = ingot_tensor_2d(dp, INGOT_DTYPE_F32, B, V, V),
               tT = ingot_tensor_1d(dT, INGOT_DTYPE_F32, B),
               tA = ingot_tensor_2d(dA, INGOT_DTYPE_U32, B, W, W),
               tS = ingot_tensor_1d(dS, INGOT_DTYPE_U64, B),
               tTok = ingot_tensor_1d(dTok, INGOT_DTYPE_I32, B);
  ingot_sampling_params prm = INGOT_SAMPLING_PARAMS_INITIALIZER;
  prm.temperature = &tT, prm.seed = &tS, prm.allowed = &tA;
  struct CUstream_st *s = (struct CUstream_st *)stream;
  ingot_context_t fresh;
  EXPECT(ingot_context_create(INGOT_BACKEND_CUDA, 0, &fresh) == INGOT_OK, "context");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ingot_status st[2] = {ingot_sampling_softmax(fresh, &tl, &prm, &tp, NULL, ws, wsb, s),
                        ingot_sample(fresh, &tl, &prm, &tTok, NULL, NULL, dws, dwsb, s)};
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  for (int i = 0; i < 2; i++) EXPECT_OK(fresh, st[i]);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(test_fill(dp, 0, n * 4)); /* so that a replay that writes nothing fails */
  CUDA_OK(test_fill(dTok, 0xff, B * 4));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaMemcpy(p_graph, dp, n * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(tok_graph, dTok, B * 4, cudaMemcpyDeviceToHost);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  ingot_context_destroy(fresh);
  CUDA_OK(test_fill(dp, 0, n * 4));
  EXPECT_OK(gpu, ingot_sampling_softmax(gpu, &tl, &prm, &tp, NULL, ws, wsb, s));
  EXPECT_OK(gpu, ingot_sample(gpu, &tl, &prm, &tTok, NULL, NULL, dws, dwsb, s));
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaMemcpy(p_eager, dp, n * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(tok_eager, dTok, B * 4, cudaMemcpyDeviceToHost);
  EXPECT(memcmp(p_graph, p_eager, n * 4) == 0, "captured softmax != eager");
  EXPECT(memcmp(tok_graph, tok_eager, B * 4) == 0, "captured tokens != eager");
  void *all[] = {dl, dT, dp, dA, dS, dTok, ws, dws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cudaFree(all[i]);
  free(h), free(temp), free(p_graph), free(p_eager), free(allowed), free(seed);
  free(tok_graph), free(tok_eager);
  return 0;
}

/* Bad arguments on the CUDA backend, with device buffers: each call returns
 * the named error before any launch, and no output (tokens, statuses, both
 * log-probabilities, top-n ids and log-probabilities, probabilities) nor the
 * workspace holds anything but the 0x7f fill afterwards. tests/test_sampling.c
 * covers every check on the CPU backend; the checks are the backend-agnostic
 * ones of src/core, this confirms them with device memory. (A bad per-row
 * value in a device array is not an error but a row flag: bad_parameter_row.) */
static int test_rejects_bad_input(void) {
  /* V >= 32768: the CUDA workspaces are not empty (below it they are 0 bytes) */
  const int64_t B = 3, V = 40000, W = (V + 31) / 32, N = 4;
  float *h = xcalloc((size_t)(B * V) * 4), temp[3] = {1.0f, 0.5f, 0.0f};
  uint32_t *words = xcalloc((size_t)(B * W) * 4);
  for (int64_t i = 0; i < B * V; i++) h[i] = (float)rand_normal();
  memset(words, 0xff, (size_t)(B * W) * 4);
  float *dl = dev_copy(h, (size_t)(B * V) * 4), *dT = dev_copy(temp, sizeof temp);
  void *dA = dev_copy(words, (size_t)(B * W) * 4);
  size_t need = 0, need_sm = 0;
  /* (a call with top-n outputs needs none: the wide sampler does not take it) */
  EXPECT_OK(gpu, ingot_sample_workspace_size(gpu, B, V, INGOT_DTYPE_F32, 0, &need));
  EXPECT_OK(gpu, ingot_sampling_softmax_workspace_size(gpu, B, V, INGOT_DTYPE_F32, &need_sm));
  REQUIRE(need > 0 && need_sm > 0, "workspace sizes %zu %zu: nothing to cut short", need, need_sm);
  const size_t ws_bytes = (need > need_sm ? need : need_sm) + 64;
  /* outputs and workspace: the 0x7f fill */
  void *out[] = {dev_copy(NULL, B * 4), dev_copy(NULL, B * 4),       dev_copy(NULL, B * 4),
                 dev_copy(NULL, B * 4), dev_copy(NULL, B * N * 4),   dev_copy(NULL, B * N * 4),
                 dev_copy(NULL, (size_t)(B * V) * 4), dev_copy(NULL, ws_bytes)};
  const size_t out_bytes[] = {B * 4, B * 4, B * 4, B * 4, B * N * 4, B * N * 4,
                              (size_t)(B * V) * 4, ws_bytes};
  char *ws = out[7];
  ingot_tensor tl = ingot_tensor_2d(dl, INGOT_DTYPE_F32, B, V, V),
               tT = ingot_tensor_1d(dT, INGOT_DTYPE_F32, B),
               tA = ingot_tensor_2d(dA, INGOT_DTYPE_U32, B, W, W),
               tTok = ingot_tensor_1d(out[0], INGOT_DTYPE_I32, B),
               tSt = ingot_tensor_1d(out[1], INGOT_DTYPE_U32, B),
               tLp = ingot_tensor_1d(out[2], INGOT_DTYPE_F32, B),
               tRaw = ingot_tensor_1d(out[3], INGOT_DTYPE_F32, B),
               tIds = ingot_tensor_2d(out[4], INGOT_DTYPE_I32, B, N, N),
               tTop = ingot_tensor_2d(out[5], INGOT_DTYPE_F32, B, N, N),
               tP = ingot_tensor_2d(out[6], INGOT_DTYPE_F32, B, V, V), t;
  ingot_sampling_params pr = INGOT_SAMPLING_PARAMS_INITIALIZER, pb;
  pr.temperature = &tT, pr.allowed = &tA;
  ingot_sampling_logprobs lps = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  lps.token_logprob = &tLp, lps.token_raw_logprob = &tRaw;
  const ingot_sampling_logprobs plain = lps; /* without top-n: the workspace counts */
  lps.top_ids = &tIds, lps.top_logprobs = &tTop;
  struct CUstream_st *s = (struct CUstream_st *)stream;
  float host_logits[8] = {0};
#define REJECTS(call, want, needle) EXPECT_ERROR(gpu, call, want, needle)
#define SAMPLE(l, p, tok, ws_, bytes) ingot_sample(gpu, l, p, tok, &tSt, &lps, ws_, bytes, s)
#define SOFTMAX(l, p, probs, ws_, bytes) ingot_sampling_softmax(gpu, l, p, probs, &tSt, ws_, bytes, s)
  const ingot_status bad = INGOT_STATUS_INVALID_ARGUMENT, short_ws = INGOT_STATUS_INSUFFICIENT_WORKSPACE;
  /* V = 0 */
  t = ingot_tensor_2d(dl, INGOT_DTYPE_F32, B, 0, V);
  REJECTS(SAMPLE(&t, &pr, &tTok, ws, need), bad, "logits: shape[1] = 0");
  REJECTS(SOFTMAX(&t, &pr, &tP, ws, need_sm), bad, "logits: shape[1] = 0");
  /* bitmask width != ceil(V / 32) */
  pb = pr, t = ingot_tensor_2d(dA, INGOT_DTYPE_U32, B, W - 1, W), pb.allowed = &t;
  REJECTS(SAMPLE(&tl, &pb, &tTok, ws, need), bad, "allowed: shape[1]");
  REJECTS(SOFTMAX(&tl, &pb, &tP, ws, need_sm), bad, "allowed: shape[1]");
  /* shape mismatches */
  pb = pr, t = ingot_tensor_1d(dT, INGOT_DTYPE_F32, B - 1), pb.temperature = &t;
  REJECTS(SAMPLE(&tl, &pb, &tTok, ws, need), bad, "temperature: shape[0] = 2");
  t = ingot_tensor_1d(out[0], INGOT_DTYPE_I32, B - 1);
  REJECTS(SAMPLE(&tl, &pr, &t, ws, need), bad, "tokens: shape[0] = 2");
  t = ingot_tensor_2d(out[6], INGOT_DTYPE_F32, B, V - 1, V);
  REJECTS(SOFTMAX(&tl, &pr, &t, ws, need_sm), bad, "probs: shape[1]");
  /* workspace too small, NULL */
  REJECTS(ingot_sample(gpu, &tl, &pr, &tTok, &tSt, &plain, ws, need - 1, s), short_ws,
          "workspace");
  REJECTS(SOFTMAX(&tl, &pr, &tP, ws, need_sm - 1), short_ws, "workspace");
  REJECTS(ingot_sample(gpu, &tl, &pr, &tTok, &tSt, &plain, NULL, need, s), bad,
          "workspace: NULL");
  /* null pointers */
  REJECTS(SAMPLE(NULL, &pr, &tTok, ws, need), bad, "logits: NULL");
  REJECTS(SAMPLE(&tl, &pr, NULL, ws, need), bad, "tokens: NULL");
  REJECTS(SOFTMAX(&tl, &pr, NULL, ws, need_sm), bad, "probs: NULL");
  t = ingot_tensor_2d(NULL, INGOT_DTYPE_F32, B, V, V);
  REJECTS(SAMPLE(&t, &pr, &tTok, ws, need), bad, "logits: data is NULL");
  /* pageable host memory on a CUDA context */
  t = ingot_tensor_2d(host_logits, INGOT_DTYPE_F32, 2, 4, 4);
  {
    ingot_tensor t2 = ingot_tensor_1d(out[0], INGOT_DTYPE_I32, 2);
    REJECTS(ingot_sample(gpu, &t, NULL, &t2, NULL, NULL, ws, need, s), bad, "pageable host memory");
  }
  /* outputs that overlap each other or an input */
  t = ingot_tensor_1d(out[0], INGOT_DTYPE_U32, B);
  REJECTS(ingot_sample(gpu, &tl, &pr, &tTok, &t, &lps, ws, need, s), bad, "row_status: overlaps tokens");
  t = ingot_tensor_2d(dl, INGOT_DTYPE_F32, B, V, V);
  REJECTS(SOFTMAX(&tl, &pr, &t, ws, need_sm), bad, "probs: overlaps logits");
#undef SAMPLE
#undef SOFTMAX
#undef REJECTS
  CUDA_OK(cudaDeviceSynchronize());
  for (size_t k = 0; k < sizeof out / sizeof out[0]; k++) {
    unsigned char *back = xcalloc(out_bytes[k]);
    CUDA_OK(cudaMemcpy(back, out[k], out_bytes[k], cudaMemcpyDeviceToHost));
    size_t i = 0;
    while (i < out_bytes[k] && back[i] == 0x7f) i++;
    EXPECT(i == out_bytes[k], "buffer %zu written at byte %zu by a rejected call", k, i);
    free(back);
  }
  for (size_t k = 0; k < sizeof out / sizeof out[0]; k++) cudaFree(out[k]);
  cudaFree(dl), cudaFree(dT), cudaFree(dA);
  free(h), free(words);
  return 0;
}

int main(void) {
  test_init("test_sampling_cuda");
  const char *q = getenv("INGOT_TEST_QUICK");
  quick = q != NULL && q[0] != '\0' && strcmp(q, "0") != 0;
  if (!ingot_backend_available(INGOT_BACKEND_CUDA) ||
      ingot_context_create(INGOT_BACKEND_CUDA, 0, &gpu) != INGOT_OK) {
    printf("SKIPPED test_sampling_cuda: no CUDA device\n");
    return TEST_SKIP_CODE;
  }
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &cpu) != INGOT_OK) return 1;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  printf("  CUDA sampling: up to %d blocks per row (cluster), %d bytes of shared memory each; "
         "dense kernel: %d blocks, %d bytes\n",
         gpu->cuda->sampling.max_cluster, gpu->cuda->sampling.dynamic_smem, gpu->cuda->sampling.dense_cluster,
         gpu->cuda->sampling.dense_smem);
  test_run("sample_vs_cpu", test_sample_vs_cpu);
  test_run("agreement", test_agreement);
  test_run("softmax_vs_cpu", test_softmax_vs_cpu);
  test_run("mixed_rows", test_mixed_rows);
  test_run("small_vocab_topk", test_small_vocab_topk);
  test_run("softmax_many_rows", test_softmax_many_rows);
  test_run("softmax_rows_alone", test_softmax_rows_alone);
  test_run("softmax_wide", test_softmax_wide);
  test_run("sample_wide", test_sample_wide);
  test_run("softmax_half", test_softmax_half);
  test_run("softmax_slow_ascent", test_softmax_slow_ascent);
  test_run("seed_rows_vs_float64", test_seed_rows_vs_float64);
  test_run("masked_step_masses", test_masked_step_masses);
  test_run("draw_segments", test_draw_segments);
  test_run("dense_kernel_fits", test_dense_kernel_fits);
  test_run("dense_blocks_per_sm", test_dense_blocks_per_sm);
  test_run("biased_draw_raw_logprob", test_biased_draw_raw_logprob);
  test_run("top_n", test_top_n);
  test_run("nucleus_rows", test_nucleus_rows);
  test_run("rounding_ties", test_rounding_ties);
  test_run("three_ids_always", test_three_ids_always);
  test_run("batch_invariance", test_batch_invariance);
  test_run("bad_parameter_row", test_bad_parameter_row);
  test_run("graph_replay", test_graph_replay);
  test_run("chained_calls", test_chained_calls);
  test_run("capture_first_call", test_capture_first_call);
  test_run("rejects_bad_input", test_rejects_bad_input);
  cudaStreamDestroy(stream);
  ingot_context_destroy(cpu);
  ingot_context_destroy(gpu);
  return test_finish();
}
#endif
