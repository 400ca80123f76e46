/* dev: the dense sampling kernel's time against the batch (not installed, not in CTest).
 * Graph replays of one call a graph (each time includes a graph launch, ~2.3 us more
 * than `ingot bench`'s 20-call graphs), for a sweep of B at one V: the steps of the
 * curve are the waves of clusters. Logits like the bench's LLM-like
 * rows; softmax (T 0.8) and the masked step (half the tokens allowed, both logprobs).
 *   cc -O2 -std=c11 dev/cuda/wave_probe.c -Iinclude -I/usr/local/cuda/include \
 *      -Lbuild -lingot -L/usr/local/cuda/lib64 -lcudart -lm -o build/wave_probe
 *   LD_LIBRARY_PATH=build build/wave_probe [V [B ...]]
 * WAVE_BF16=1: bf16 logits (the same values rounded) instead of f32.
 * On the device: build the library (dev/final_device.sh's cmake line), then the two
 * commands above, in one call. Session 9's curve is in docs/perf-notes.md. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingot/ingot.h"

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)
#define ICHECK(x)                                                   \
  do {                                                              \
    ingot_status s_ = (x);                                          \
    if (s_ != INGOT_OK) {                                           \
      fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, (int)s_); \
      exit(1);                                                      \
    }                                                               \
  } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
static float unit(void) { return (float)(next() & 0xffffff) / 16777216.0f; }
static float logit(void) {
  float s = 0;
  for (int i = 0; i < 4; i++) s += unit();
  const float bulk = 2.5f * (s - 2.0f) * 1.7320508f;
  return next() % 256 ? bulk : bulk + 8.0f + 16.0f * unit();
}

static int cmp(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

#define SLOTS 6
#define REPS 120

int main(int argc, char **argv) {
  const int64_t V = argc > 1 ? atoll(argv[1]) : 262144, W = (V + 31) / 32;
  /* the batches: the arguments after V, else a default sweep */
  int batches[64] = {1, 2, 4, 8, 12, 14, 15, 16, 17, 18, 20, 21, 22, 24, 28, 32,
                     33, 42, 43, 48, 56, 63, 64, 65, 80, 96, 128};
  int nb = 27;
  const int Bmax = 128;
  if (argc > 2) {
    nb = 0;
    for (int i = 2; i < argc && nb < 64; i++) {
      const int b = atoi(argv[i]);
      if (b < 1 || b > Bmax) return fprintf(stderr, "B must be 1..%d: %s\n", Bmax, argv[i]), 1;
      batches[nb++] = b;
    }
  }
  ingot_context_t ctx;
  ICHECK(ingot_context_create(INGOT_BACKEND_CUDA, 0, &ctx));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int bf16 = getenv("WAVE_BF16") != NULL;
  const ingot_dtype dtype = bf16 ? INGOT_DTYPE_BF16 : INGOT_DTYPE_F32;
  float *h = malloc((size_t)(Bmax * V) * 4);
  uint32_t *hw = malloc((size_t)(Bmax * W) * 4);
  float *logits[SLOTS], *probs, *temp, *lp, *raw;
  uint32_t *allowed[SLOTS], *status;
  uint64_t *seed, *pos;
  int32_t *tokens;
  for (int s = 0; s < SLOTS; s++) {
    for (int64_t i = 0; i < Bmax * V; i++) h[i] = logit();
    if (bf16) { /* packed into the first half of h: round to nearest even */
      uint16_t *hb = (uint16_t *)h;
      for (int64_t i = 0; i < Bmax * V; i++) {
        uint32_t u;
        memcpy(&u, &h[i], 4);
        hb[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      }
    }
    for (int64_t i = 0; i < Bmax * W; i++) hw[i] = next() ^ (next() << 16);
    CHECK(cudaMalloc((void **)&logits[s], (size_t)(Bmax * V) * 4));
    CHECK(cudaMalloc((void **)&allowed[s], (size_t)(Bmax * W) * 4));
    CHECK(cudaMemcpy(logits[s], h, (size_t)(Bmax * V) * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(allowed[s], hw, (size_t)(Bmax * W) * 4, cudaMemcpyHostToDevice));
  }
  CHECK(cudaMalloc((void **)&probs, (size_t)(Bmax * V) * 4));
  CHECK(cudaMalloc((void **)&temp, Bmax * 4));
  CHECK(cudaMalloc((void **)&lp, Bmax * 4));
  CHECK(cudaMalloc((void **)&raw, Bmax * 4));
  CHECK(cudaMalloc((void **)&status, Bmax * 4));
  CHECK(cudaMalloc((void **)&tokens, Bmax * 4));
  CHECK(cudaMalloc((void **)&seed, Bmax * 8));
  CHECK(cudaMalloc((void **)&pos, Bmax * 8));
  size_t ws_bytes, ws_sample; /* the softmax's and the sample's (the same for every batch) */
  ICHECK(ingot_sampling_softmax_workspace_size(ctx, Bmax, V, dtype, &ws_bytes));
  ICHECK(ingot_sample_workspace_size(ctx, Bmax, V, dtype, 0, &ws_sample));
  if (ws_sample > ws_bytes) ws_bytes = ws_sample;
  void *ws = NULL;
  if (ws_bytes) CHECK(cudaMalloc(&ws, ws_bytes));
  for (int i = 0; i < Bmax; i++) h[i] = 0.8f;
  CHECK(cudaMemcpy(temp, h, Bmax * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(seed, 7, Bmax * 8));
  CHECK(cudaMemset(pos, 3, Bmax * 8));
  cudaEvent_t ev[REPS + 1];
  for (int i = 0; i <= REPS; i++) CHECK(cudaEventCreate(&ev[i]));
  printf("V = %lld %s; us a call (median of %d graph replays)\n", (long long)V,
         bf16 ? "bf16" : "f32", REPS);
  printf("%5s %10s %10s\n", "B", "softmax", "masked");
  for (int bi = 0; bi < nb; bi++) {
    const int B = batches[bi];
    float med[2];
    for (int op = 0; op < 2; op++) {
      cudaGraphExec_t exec[SLOTS];
      for (int s = 0; s < SLOTS; s++) {
        ingot_tensor tl = ingot_tensor_2d(logits[s], dtype, B, V, V);
        ingot_tensor tw = ingot_tensor_2d(allowed[s], INGOT_DTYPE_U32, B, W, W);
        ingot_tensor tt = ingot_tensor_1d(temp, INGOT_DTYPE_F32, B);
        ingot_tensor ts = ingot_tensor_1d(seed, INGOT_DTYPE_U64, B);
        ingot_tensor tpos = ingot_tensor_1d(pos, INGOT_DTYPE_U64, B);
        ingot_tensor tp = ingot_tensor_2d(probs, INGOT_DTYPE_F32, B, V, V);
        ingot_tensor ttok = ingot_tensor_1d(tokens, INGOT_DTYPE_I32, B);
        ingot_tensor tst = ingot_tensor_1d(status, INGOT_DTYPE_U32, B);
        ingot_tensor tlp = ingot_tensor_1d(lp, INGOT_DTYPE_F32, B);
        ingot_tensor traw = ingot_tensor_1d(raw, INGOT_DTYPE_F32, B);
        ingot_sampling_params p = INGOT_SAMPLING_PARAMS_INITIALIZER;
        p.temperature = &tt;
        ingot_sampling_logprobs l = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
        l.token_logprob = &tlp;
        l.token_raw_logprob = &traw;
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        if (op == 0) {
          ICHECK(ingot_sampling_softmax(ctx, &tl, &p, &tp, &tst, ws, ws_bytes, stream));
        } else {
          p.seed = &ts, p.position = &tpos, p.allowed = &tw;
          ICHECK(ingot_sample(ctx, &tl, &p, &ttok, &tst, &l, ws, ws_bytes, stream));
        }
        CHECK(cudaStreamEndCapture(stream, &g));
        CHECK(cudaGraphInstantiate(&exec[s], g, 0));
        CHECK(cudaGraphDestroy(g));
      }
      for (int i = 0; i < 2 * SLOTS; i++) CHECK(cudaGraphLaunch(exec[i % SLOTS], stream));
      CHECK(cudaEventRecord(ev[0], stream));
      for (int i = 0; i < REPS; i++) {
        CHECK(cudaGraphLaunch(exec[i % SLOTS], stream));
        CHECK(cudaEventRecord(ev[i + 1], stream));
      }
      CHECK(cudaEventSynchronize(ev[REPS]));
      float t[REPS];
      for (int i = 0; i < REPS; i++) CHECK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
      qsort(t, REPS, sizeof t[0], cmp);
      med[op] = 1000.0f * t[REPS / 2];
      for (int s = 0; s < SLOTS; s++) CHECK(cudaGraphExecDestroy(exec[s]));
    }
    printf("%5d %10.2f %10.2f\n", B, med[0], med[1]);
  }
  ingot_context_destroy(ctx);
  return 0;
}
