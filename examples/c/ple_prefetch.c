/*
 * PLE prefill with each layer's rows fetched ahead, on a side stream, from a
 * table in host memory.
 *
 *   1. one host table (ingot_host_table_create, AUTO: huge pages where the
 *      system has them) holds the fp8 tables of LAYERS PLE layers, each
 *      with its own constants (ingot_ngram_config_derive, layer_index l);
 *   2. the step, all enqueued without a host synchronisation:
 *        side stream: the row ids of layer l+1 (ingot_ngram_row_ids) and
 *                     their rows gathered from the host table over the bus
 *                     (ingot_ngram_gather) into one of two buffers;
 *        main stream: layer l's other work (a stand-in: the NVFP4 global
 *                     scale of a [T, 2048] activation), then it waits for
 *                     layer l's rows (an event) and consumes them (copies
 *                     them into that layer's output);
 *      the side stream waits until a buffer was consumed before it refills
 *      it, and the main stream rolls the contexts forward
 *      (ingot_ngram_commit_context) once every row id was computed;
 *   3. after the step: every layer's output equals the CPU backend's fused
 *      ingot_ngram_embed on the same host table, byte for byte, and the
 *      rolled contexts equal the CPU's.
 *
 * On the CPU backend the same calls run one after another (streams NULL),
 * which still checks the separate ops against the fused one.
 *
 *   ple_prefetch [cpu|cuda]
 */
#include <inttypes.h>

#include "example_util.h"

enum {
  VOCAB = 32000,
  EOS = 2,
  NGRAM = 3,
  HPN = 8, /* H = 16 heads, as in the real configuration */
  DIM = 160,
  LAYERS = 4,
  B = 3,
  HIDDEN = 2048 /* width of the stand-in activation */
};
static const int32_t prompt_len[B] = {300, 1, 723};
static const float scale = 0.25f;

#ifdef INGOT_WITH_CUDA
#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)
#endif

/* The streams and events of the step (all NULL on the CPU backend). */
typedef struct pipeline {
  struct CUstream_st *main, *side;
#ifdef INGOT_WITH_CUDA
  cudaEvent_t start, ids_done, ready[LAYERS], consumed[LAYERS];
#endif
} pipeline;

/* `waiter` waits for what `signaller` enqueued so far (CUDA; a no-op on the CPU). */
#ifdef INGOT_WITH_CUDA
static void wait_event(struct CUstream_st *waiter, cudaEvent_t e) {
  CUDA_CHECK(cudaStreamWaitEvent(waiter, e, 0));
}
#endif

int main(int argc, char **argv) {
  ingot_context_t ctx, ref;
  int rc = example_open(argc, argv, &ctx);
  if (rc != 0) return rc;
  CHECK(NULL, ingot_context_create(INGOT_BACKEND_CPU, 0, &ref));
  const int cuda = example_on_cuda(ctx);

  /* ---- the layers' constants and one host table for all of them ---------- */
  ingot_ngram_config cfg[LAYERS];
  int64_t R = 0; /* rows of the largest layer: each layer's table starts at l * R */
  for (int l = 0; l < LAYERS; l++) {
    int64_t rows;
    CHECK(NULL, ingot_ngram_config_derive(VOCAB, NGRAM, HPN, 2000, 1234, l, EOS, &cfg[l]));
    CHECK(NULL, ingot_ngram_table_rows(&cfg[l], 128, &rows));
    if (rows > R) R = rows;
  }
  const int64_t H = cfg[0].num_heads;
  /* A setup call (not inside a step): it allocates and registers the memory. */
  ingot_host_table_t host_table;
  CHECK(ctx, ingot_host_table_create(ctx, LAYERS * R * DIM, INGOT_HOST_TABLE_AUTO, &host_table));
  uint8_t *tables = ingot_host_table_data(host_table);
  for (int64_t i = 0; i < LAYERS * R * DIM; i++) {
    uint8_t v = (uint8_t)example_rand();
    tables[i] = (v & 0x7f) == 0x7f ? (uint8_t)(v ^ 1) : v; /* no e4m3 NaN codes */
  }
  int64_t huge = -1;
  if (ingot_host_table_huge_page_bytes(host_table, &huge) != INGOT_OK) huge = -1;
  printf("host table: %d layers x %" PRId64 " rows x %d fp8 = %.1f MB, strategy %s, "
         "%" PRId64 " bytes in huge pages\n",
         LAYERS, R, DIM, (double)(LAYERS * R * DIM) * 1e-6,
         ingot_host_table_strategy_name(ingot_host_table_strategy(host_table)), huge);
  ingot_tensor table[LAYERS];
  for (int l = 0; l < LAYERS; l++)
    table[l] = ingot_tensor_2d(tables + (size_t)(l * R * DIM), INGOT_DTYPE_F8_E4M3, R, DIM, DIM);

  /* ---- the batch: three fresh requests ----------------------------------------- */
  int32_t cu[B + 1] = {0};
  for (int b = 0; b < B; b++) cu[b + 1] = cu[b] + prompt_len[b];
  const int64_t T = cu[B];
  int32_t *ids = malloc((size_t)T * sizeof *ids);
  for (int64_t t = 0; t < T; t++)
    ids[t] = example_rand() % 40 == 0 ? EOS : (int32_t)(3 + example_rand() % (VOCAB - 3));
  int32_t fresh[B * (NGRAM - 1)];
  for (int i = 0; i < B * (NGRAM - 1); i++) fresh[i] = EOS;
  void *d_ids = example_upload(ctx, ids, (size_t)T * sizeof *ids);
  void *d_cu = example_upload(ctx, cu, sizeof cu);
  void *d_context = example_upload(ctx, fresh, sizeof fresh);
  ingot_tensor t_ids = ingot_tensor_1d(d_ids, INGOT_DTYPE_I32, T);
  ingot_tensor t_cu = ingot_tensor_1d(d_cu, INGOT_DTYPE_I32, B + 1);
  ingot_tensor t_ctx = ingot_tensor_2d(d_context, INGOT_DTYPE_I32, B, NGRAM - 1, NGRAM - 1);

  /* two row-id and row buffers (layer l uses l % 2), one output per layer,
   * and the stand-in activation with one global scale per layer */
  const size_t emb_bytes = (size_t)(T * H * DIM) * 2;
  void *d_rows[2], *d_emb[2], *d_out[LAYERS];
  for (int i = 0; i < 2; i++) {
    d_rows[i] = example_alloc(ctx, (size_t)(T * H) * sizeof(int64_t));
    d_emb[i] = example_alloc(ctx, emb_bytes);
  }
  for (int l = 0; l < LAYERS; l++) d_out[l] = example_alloc(ctx, emb_bytes);
  uint16_t *x = malloc((size_t)(T * HIDDEN) * 2);
  for (int64_t i = 0; i < T * HIDDEN; i++) x[i] = (uint16_t)(0x3c00 + example_rand() % 0x800);
  void *d_x = example_upload(ctx, x, (size_t)(T * HIDDEN) * 2);
  void *d_gs = example_alloc(ctx, LAYERS * sizeof(float));
  ingot_tensor t_x = ingot_tensor_2d(d_x, INGOT_DTYPE_BF16, T, HIDDEN, HIDDEN);

  pipeline p;
  memset(&p, 0, sizeof p);
#ifdef INGOT_WITH_CUDA
  if (cuda) {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    p.main = s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    p.side = s;
    CUDA_CHECK(cudaEventCreateWithFlags(&p.start, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&p.ids_done, cudaEventDisableTiming));
    for (int l = 0; l < LAYERS; l++) {
      CUDA_CHECK(cudaEventCreateWithFlags(&p.ready[l], cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&p.consumed[l], cudaEventDisableTiming));
    }
  }
#endif

  /* ---- the step: no host synchronisation from here ... -------------------------- */
#ifdef INGOT_WITH_CUDA
  /* (set-up, not the step: the uploads above ran on the legacy stream, which
   * the non-blocking streams do not wait for) */
  if (cuda) CUDA_CHECK(cudaDeviceSynchronize());
  if (cuda) { /* the side stream starts after what the main stream did before the step */
    CUDA_CHECK(cudaEventRecord(p.start, p.main));
    wait_event(p.side, p.start);
  }
#endif
  for (int l = -1; l < LAYERS; l++) {
    /* side stream: fetch the rows of layer n = l + 1 while layer l runs */
    int n = l + 1;
    if (n < LAYERS) {
#ifdef INGOT_WITH_CUDA
      if (cuda && n >= 2) wait_event(p.side, p.consumed[n - 2]); /* buffer n % 2 is free */
#endif
      ingot_tensor rows = ingot_tensor_2d(d_rows[n % 2], INGOT_DTYPE_I64, T, H, H);
      ingot_tensor emb = ingot_tensor_2d(d_emb[n % 2], INGOT_DTYPE_BF16, T, H * DIM, H * DIM);
      CHECK(ctx, ingot_ngram_row_ids(ctx, &cfg[n], &t_ids, &t_cu, &t_ctx, &rows, p.side));
      CHECK(ctx, ingot_ngram_gather(ctx, &rows, &table[n], scale, &emb, p.side));
#ifdef INGOT_WITH_CUDA
      if (cuda) {
        CUDA_CHECK(cudaEventRecord(p.ready[n], p.side));
        if (n == LAYERS - 1) CUDA_CHECK(cudaEventRecord(p.ids_done, p.side));
      }
#endif
    }
    if (l < 0) continue;
    /* main stream: layer l's other work, overlapping the side stream ... */
    ingot_tensor gs = ingot_tensor_1d((float *)d_gs + l, INGOT_DTYPE_F32, 1);
    CHECK(ctx, ingot_nvfp4_global_scale(ctx, &t_x, &gs, p.main));
    /* ... then its rows, once they have arrived */
#ifdef INGOT_WITH_CUDA
    if (cuda) {
      wait_event(p.main, p.ready[l]);
      CUDA_CHECK(cudaMemcpyAsync(d_out[l], d_emb[l % 2], emb_bytes, cudaMemcpyDeviceToDevice,
                                 p.main));
      CUDA_CHECK(cudaEventRecord(p.consumed[l], p.main));
    } else
#endif
    {
      memcpy(d_out[l], d_emb[l % 2], emb_bytes);
    }
  }
  /* every row id read the old contexts: roll them forward on the main stream */
#ifdef INGOT_WITH_CUDA
  if (cuda) wait_event(p.main, p.ids_done);
#endif
  CHECK(ctx, ingot_ngram_commit_context(ctx, &cfg[0], &t_ids, &t_cu, &t_ctx, p.main));
  /* ---- ... to here. Now wait for the step and check it. ---------------------------- */
#ifdef INGOT_WITH_CUDA
  if (cuda) CUDA_CHECK(cudaStreamSynchronize(p.main));
#endif
  CHECK(ctx, ingot_context_check_device_errors(ctx, p.main));

  /* every layer: the CPU backend's fused embed on the same host table */
  uint16_t *got = malloc(emb_bytes), *want = malloc(emb_bytes);
  ingot_tensor h_ids = ingot_tensor_1d(ids, INGOT_DTYPE_I32, T);
  ingot_tensor h_cu = ingot_tensor_1d(cu, INGOT_DTYPE_I32, B + 1);
  int32_t h_context[B * (NGRAM - 1)];
  memcpy(h_context, fresh, sizeof fresh);
  ingot_tensor h_ctx = ingot_tensor_2d(h_context, INGOT_DTYPE_I32, B, NGRAM - 1, NGRAM - 1);
  for (int l = 0; l < LAYERS; l++) {
    ingot_tensor w = ingot_tensor_2d(want, INGOT_DTYPE_BF16, T, H * DIM, H * DIM);
    CHECK(ref, ingot_ngram_embed(ref, &cfg[l], &h_ids, &h_cu, &h_ctx, &table[l], scale, &w, NULL));
    example_read(ctx, got, d_out[l], emb_bytes);
    VERIFY(memcmp(got, want, emb_bytes) == 0, "layer %d: the prefetched rows differ from the CPU",
           l);
  }
  CHECK(ref, ingot_ngram_commit_context(ref, &cfg[0], &h_ids, &h_cu, &h_ctx, NULL));
  int32_t rolled[B * (NGRAM - 1)];
  example_read(ctx, rolled, d_context, sizeof rolled);
  VERIFY(memcmp(rolled, h_context, sizeof rolled) == 0, "the rolled contexts differ from the CPU");
  float gs[LAYERS], gs_ref;
  example_read(ctx, gs, d_gs, sizeof gs);
  ingot_tensor h_x = ingot_tensor_2d(x, INGOT_DTYPE_BF16, T, HIDDEN, HIDDEN);
  ingot_tensor h_gs = ingot_tensor_1d(&gs_ref, INGOT_DTYPE_F32, 1);
  CHECK(ref, ingot_nvfp4_global_scale(ref, &h_x, &h_gs, NULL));
  for (int l = 0; l < LAYERS; l++)
    VERIFY(gs[l] == gs_ref, "layer %d: stand-in work gave %g, CPU %g", l, (double)gs[l],
           (double)gs_ref);
  printf("prefill of %" PRId64 " tokens, %d layers: rows of layer l+1 fetched on a side stream "
         "during layer l; every layer equals the CPU\n",
         T, LAYERS);

#ifdef INGOT_WITH_CUDA
  if (cuda) {
    cudaEventDestroy(p.start);
    cudaEventDestroy(p.ids_done);
    for (int l = 0; l < LAYERS; l++) {
      cudaEventDestroy(p.ready[l]);
      cudaEventDestroy(p.consumed[l]);
    }
    cudaStreamDestroy(p.main);
    cudaStreamDestroy(p.side);
  }
#endif
  for (int i = 0; i < 2; i++) example_free(ctx, d_rows[i]), example_free(ctx, d_emb[i]);
  for (int l = 0; l < LAYERS; l++) example_free(ctx, d_out[l]);
  example_free(ctx, d_ids), example_free(ctx, d_cu), example_free(ctx, d_context);
  example_free(ctx, d_x), example_free(ctx, d_gs);
  free(ids), free(x), free(got), free(want);
  ingot_host_table_destroy(host_table); /* after the GPU work that read it */
  ingot_context_destroy(ref);
  (void)cuda;
  return example_finish(ctx);
}
