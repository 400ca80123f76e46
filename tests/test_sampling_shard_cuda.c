/*
 * Sharded sampling on CUDA against the sharded steps on the CPU
 * (tests/test_sampling_shard.c checks those against the unsharded CPU
 * calls). Fresh random batches every run, every feature (greedy / tiny /
 * huge temperatures, top-k below and above the candidates, top-p with and
 * without top-k, min-p, bitmask, banned and bias lists in global ids with
 * bad entries, NaN / +Inf, empty rows, ties, underflowing weights, f32 /
 * bf16 / f16, raw and final top-n), split into 1, 2, 3, 4 and 8 uneven
 * shards (empty and one-token shards, slots out of v0 order), each with
 * candidates and with radix selection only, sample and softmax plans. The
 * two backends run in lockstep, and after EVERY step:
 *   - every shard's record is compared byte for byte (the first differing
 *     byte is printed with its step, kind, slot, row and field offset);
 *   - the exchanged buffer too (CUDA's gather / sum against the CPU's);
 * then every finish's outputs bit for bit (tokens, statuses, both
 * log-probabilities, top-n ids and log-probabilities, each shard's probs).
 * Records cross backends: in some calls the CUDA steps read the CPU's
 * exchanged records, in others the CPU steps read CUDA's.
 * Also: rows with a bad per-row value (or a selection the plan lacks) on
 * CUDA: token -1, BAD_PARAMETER, the other rows unaffected. Built with
 * NCCL (INGOT_TEST_NCCL): the one-call form on a one-rank communicator
 * against the step functions (same outputs bit for bit, eager and
 * captured), and its argument errors (rank count, workspace, NULL comm,
 * CPU context) with the outputs untouched.
 * Skipped (exit 77) without a CUDA device.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#ifndef INGOT_WITH_CUDA
static int skip_no_cuda(void) { return TEST_SKIP_CODE; }
int main(void) {
  test_init("test_sampling_shard_cuda");
  test_run("sampling_shard_cuda", skip_no_cuda);
  return test_finish();
}
#else

#include <cuda_runtime_api.h>

#include "common/sampling_shard.h" /* the steps, to name them in messages */
#include "sampling_shard_batch.h"
#include "test_cuda.h"

static ingot_context_t cpu, gpu;
static cudaStream_t stream;

/* ---- the lockstep run ------------------------------------------------------------------- */

static const char *kind_name(int kind) {
  static const char *names[] = {"STATS", "CANDIDATES", "TOPK", "TOPP", "DRAW", "MASS"};
  return kind >= 0 && kind < 6 ? names[kind] : "?";
}

/* Compares a CUDA record buffer (downloaded) with the CPU's over `bytes`
 * (the whole buffer: both backends write the same bytes at every step, so
 * a write past the step's record shows too); prints the first difference:
 * which step, slot, row and offset in the row. */
static int same_record(const unsigned char *want, const unsigned char *got, size_t bytes,
                       size_t record_bytes, const ingot_shard_steps *steps, int step,
                       int32_t slot, int64_t B, const char *what) {
  if (memcmp(want, got, bytes) == 0) return 1;
  size_t at = 0;
  while (want[at] == got[at]) at++;
  const int64_t header = ingot_shard_header_bytes(steps->exchange[step]);
  const int64_t row_bytes = steps->row_bytes[step];
  char where[96];
  if (at >= record_bytes)
    snprintf(where, sizeof where, "byte %zu past the record's %zu", at, record_bytes);
  else if ((int64_t)at < header)
    snprintf(where, sizeof where, "header byte %zu", at);
  else if ((int64_t)at < header + B * row_bytes)
    snprintf(where, sizeof where, "row %" PRId64 " byte %" PRId64, ((int64_t)at - header) / row_bytes,
             ((int64_t)at - header) % row_bytes);
  else
    snprintf(where, sizeof where, "padding byte %zu", at);
  uint32_t w = 0, c = 0;
  size_t word = at & ~(size_t)3;
  memcpy(&w, want + word, word + 4 <= bytes ? 4 : 1);
  memcpy(&c, got + word, word + 4 <= bytes ? 4 : 1);
  test_fail_at(__FILE__, __LINE__,
               "%s: step %d (%s round %d) slot %d: %s differs: CUDA word 0x%08x, CPU 0x%08x", what,
               step, kind_name(steps->kind[step]), steps->round[step], (int)slot, where, c, w);
  return 0;
}

typedef struct run_bufs {
  ingot_sampling_shard_plan plan;
  void *h_rec[8], *h_ws[8], *h_gathered;     /* CPU */
  void *d_rec[8], *d_ws[8], *d_gathered;     /* CUDA */
  unsigned char *back;                       /* a downloaded record / exchange */
} run_bufs;

static void free_run(run_bufs *u, int32_t S) {
  for (int32_t j = 0; j < S; j++) free(u->h_rec[j]), free(u->h_ws[j]), cudaFree(u->d_rec[j]), cudaFree(u->d_ws[j]);
  free(u->h_gathered), cudaFree(u->d_gathered), free(u->back);
}

/* cross: 0 each backend reads its own exchange; 1 the CUDA steps read the
 * CPU's (uploaded); 2 the CPU steps read CUDA's (downloaded). Returns 1 if
 * every step ran and matched. */
static int run_both(const batch *b, const split *sp, int64_t kc, int64_t n, uint32_t flags,
                    int cross, run_bufs *u, const char *what) {
  memset(u, 0, sizeof *u);
  ingot_sampling_shard sh0 = shard_of(b, sp, 0, kc, n, flags);
  ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER, dplan = plan;
  ingot_status st = ingot_sampling_shard_get_plan(cpu, &sh0, b->B, b->dtype, &plan);
  EXPECT_OK(cpu, st);
  if (st) return 0;
  st = ingot_sampling_shard_get_plan(gpu, &sh0, b->B, b->dtype, &dplan);
  EXPECT_OK(gpu, st);
  if (st) return 0;
  for (int i = 0; i < plan.num_steps; i++)
    EXPECT(plan.record_bytes[i] == dplan.record_bytes[i] && plan.exchange[i] == dplan.exchange[i],
           "%s: plans differ at step %d", what, i);
  u->plan = plan;
  const ingot_shard_steps steps = ingot_shard_steps_of((int32_t)kc, (int32_t)n, flags);
  u->h_gathered = xalloc(plan.max_exchanged_bytes, 0x77);
  u->d_gathered = dalloc(plan.max_exchanged_bytes, 0x77);
  u->back = xalloc(plan.max_exchanged_bytes, 0);
  size_t hws[8], dws[8];
  for (int32_t j = 0; j < sp->S; j++) {
    ingot_sampling_shard sh = shard_of(b, sp, j, kc, n, flags);
    ingot_sampling_shard_plan p = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER, q = p;
    ingot_sampling_shard_get_plan(cpu, &sh, b->B, b->dtype, &p);
    ingot_sampling_shard_get_plan(gpu, &sh, b->B, b->dtype, &q);
    hws[j] = p.workspace_bytes, dws[j] = q.workspace_bytes;
    u->h_rec[j] = xalloc(plan.max_record_bytes, 0x66), u->h_ws[j] = xalloc(hws[j], 0x55);
    u->d_rec[j] = dalloc(plan.max_record_bytes, 0x66), u->d_ws[j] = dalloc(dws[j], 0x55);
  }
  int ok = 1;
  for (int i = 0; i < plan.num_steps && ok; i++) {
    const size_t prev = i ? plan.exchanged_bytes[i - 1] : 0;
    for (int32_t j = 0; j < sp->S && ok; j++) {
      ingot_sampling_shard sh = shard_of(b, sp, j, kc, n, flags);
      ingot_tensor hs = slice_of(b, sp, j, 0), ds = slice_of(b, sp, j, 1);
      st = ingot_sampling_shard_step(cpu, i, &hs, &b->params[0], &sh, i ? u->h_gathered : NULL,
                                     prev, u->h_rec[j], plan.record_bytes[i], u->h_ws[j], hws[j],
                                     NULL);
      EXPECT_OK(cpu, st);
      ingot_status sg = ingot_sampling_shard_step(gpu, i, &ds, &b->params[1], &sh,
                                                  i ? u->d_gathered : NULL, prev, u->d_rec[j],
                                                  plan.record_bytes[i], u->d_ws[j], dws[j], stream);
      EXPECT_OK(gpu, sg);
      if (st || sg) ok = 0;
    }
    if (!ok) break;
    if (cudaStreamSynchronize(stream) != cudaSuccess) {
      test_fail_at(__FILE__, __LINE__, "%s: step %d: %s", what, i,
                   cudaGetErrorString(cudaGetLastError()));
      return 0;
    }
    for (int32_t j = 0; j < sp->S && ok; j++) {
      download(u->back, u->d_rec[j], plan.max_record_bytes);
      ok = same_record(u->h_rec[j], u->back, plan.max_record_bytes, plan.record_bytes[i], &steps,
                       i, j, b->B, what);
    }
    if (!ok) break;
    const int sum = plan.exchange[i] == INGOT_SAMPLING_SHARD_EXCHANGE_SUM;
    EXPECT_OK(cpu, (sum ? ingot_sampling_shard_sum : ingot_sampling_shard_gather)(
                       cpu, sp->S, (const void *const *)u->h_rec, plan.record_bytes[i],
                       u->h_gathered, plan.max_exchanged_bytes, NULL));
    EXPECT_OK(gpu, (sum ? ingot_sampling_shard_sum : ingot_sampling_shard_gather)(
                       gpu, sp->S, (const void *const *)u->d_rec, plan.record_bytes[i],
                       u->d_gathered, plan.max_exchanged_bytes, stream));
    /* the whole buffer: a write past the exchange shows too */
    download(u->back, u->d_gathered, plan.max_exchanged_bytes);
    if (memcmp(u->back, u->h_gathered, plan.max_exchanged_bytes) != 0) {
      size_t at = 0;
      while (u->back[at] == ((unsigned char *)u->h_gathered)[at]) at++;
      test_fail_at(__FILE__, __LINE__, "%s: the %s of step %d differs at byte %zu", what,
                   sum ? "CUDA sum" : "CUDA gather", i, at);
      ok = 0;
    }
    if (cross == 1 && test_upload(u->d_gathered, u->h_gathered, plan.exchanged_bytes[i]) != cudaSuccess)
      ok = 0;
    if (cross == 2) memcpy(u->h_gathered, u->back, plan.exchanged_bytes[i]);
  }
  return ok;
}

static ingot_status finish_sample(ingot_context_t c, const ingot_sampling_shard *sh,
                                  const void *gathered, size_t bytes, outs *o, int64_t B,
                                  int64_t n, uint32_t top_flags, void *ws, size_t ws_bytes,
                                  cudaStream_t s) {
  outs_desc d;
  describe_outs(&d, o, B, n, top_flags);
  return ingot_sampling_shard_finish_sample(c, sh, gathered, bytes, &d.tokens, &d.status,
                                            &d.logprobs, ws, ws_bytes, (struct CUstream_st *)s);
}

typedef struct tally {
  int64_t calls, rows, steps, softmax_rows;
} tally;

static void check_sample(const batch *b, const split *sp, int64_t kc, int64_t n, uint32_t flags,
                         uint32_t top_flags, int cross, tally *t, const char *what0) {
  char what[200];
  snprintf(what, sizeof what, "%s S=%d kc %" PRId64 " n %" PRId64 " flags 0x%x cross %d", what0,
           (int)sp->S, kc, n, (unsigned)flags, cross);
  run_bufs u;
  if (run_both(b, sp, kc, n, flags, cross, &u, what)) {
    const size_t last = u.plan.exchanged_bytes[u.plan.num_steps - 1];
    for (int32_t j = 0; j < sp->S; j++) {
      ingot_sampling_shard sh = shard_of(b, sp, j, kc, n, flags);
      ingot_sampling_shard_plan p = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER, q = p;
      ingot_sampling_shard_get_plan(cpu, &sh, b->B, b->dtype, &p);
      ingot_sampling_shard_get_plan(gpu, &sh, b->B, b->dtype, &q);
      outs h, d, back;
      alloc_outs(&h, b->B, n, 0), alloc_outs(&d, b->B, n, 1), alloc_outs(&back, b->B, n, 0);
      EXPECT_OK(cpu, finish_sample(cpu, &sh, u.h_gathered, last, &h, b->B, n, top_flags, u.h_ws[j],
                                   p.workspace_bytes, NULL));
      EXPECT_OK(gpu, finish_sample(gpu, &sh, u.d_gathered, last, &d, b->B, n, top_flags, u.d_ws[j],
                                   q.workspace_bytes, stream));
      download_outs(&back, &d, b->B, n);
      char msg[240];
      snprintf(msg, sizeof msg, "%s: finish of slot %d", what, (int)j);
      same_outs(&h, &back, b->B, n, msg);
      free_outs(&h, 0), free_outs(&d, 1), free_outs(&back, 0);
    }
    t->calls++, t->rows += b->B, t->steps += u.plan.num_steps;
  }
  free_run(&u, sp->S);
}

static void check_softmax(const batch *b, const split *sp, int64_t kc, uint32_t flags, int cross,
                          tally *t, const char *what0) {
  char what[200];
  flags |= INGOT_SAMPLING_SHARD_SOFTMAX;
  snprintf(what, sizeof what, "%s softmax S=%d kc %" PRId64 " flags 0x%x cross %d", what0,
           (int)sp->S, kc, (unsigned)flags, cross);
  run_bufs u;
  if (run_both(b, sp, kc, 0, flags, cross, &u, what)) {
    const size_t last = u.plan.exchanged_bytes[u.plan.num_steps - 1];
    const size_t pbytes = (size_t)(b->B * b->V) * 4;
    float *hp = xalloc(pbytes, 0x5a), *back = xalloc(pbytes, 0), *dp = dalloc(pbytes, 0x5a);
    uint32_t *hs = xalloc((size_t)b->B * 4, 0x5a), *hsb = xalloc((size_t)b->B * 4, 0);
    uint32_t *ds = dalloc((size_t)b->B * 4, 0x5a);
    for (int32_t j = 0; j < sp->S; j++) {
      ingot_sampling_shard sh = shard_of(b, sp, j, kc, 0, flags);
      ingot_sampling_shard_plan p = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER, q = p;
      ingot_sampling_shard_get_plan(cpu, &sh, b->B, b->dtype, &p);
      ingot_sampling_shard_get_plan(gpu, &sh, b->B, b->dtype, &q);
      ingot_tensor hsl = slice_of(b, sp, j, 0), dsl = slice_of(b, sp, j, 1);
      ingot_tensor thp = ingot_tensor_2d(sp->count[j] ? hp + sp->begin[j] : NULL, INGOT_DTYPE_F32,
                                         b->B, sp->count[j], b->V);
      ingot_tensor tdp = ingot_tensor_2d(sp->count[j] ? dp + sp->begin[j] : NULL, INGOT_DTYPE_F32,
                                         b->B, sp->count[j], b->V);
      ingot_tensor ths = ingot_tensor_1d(hs, INGOT_DTYPE_U32, b->B);
      ingot_tensor tds = ingot_tensor_1d(ds, INGOT_DTYPE_U32, b->B);
      EXPECT_OK(cpu, ingot_sampling_shard_finish_softmax(cpu, &hsl, &b->params[0], &sh, u.h_gathered,
                                                         last, &thp, &ths, u.h_ws[j],
                                                         p.workspace_bytes, NULL));
      EXPECT_OK(gpu, ingot_sampling_shard_finish_softmax(gpu, &dsl, &b->params[1], &sh, u.d_gathered,
                                                         last, &tdp, &tds, u.d_ws[j],
                                                         q.workspace_bytes, stream));
      download(hsb, ds, (size_t)b->B * 4);
      for (int64_t r = 0; r < b->B; r++)
        if (hs[r] != hsb[r]) {
          test_fail_at(__FILE__, __LINE__, "%s slot %d row %" PRId64 ": status CUDA %u, CPU %u",
                       what, (int)j, r, hsb[r], hs[r]);
          break;
        }
    }
    download(back, dp, pbytes);
    if (memcmp(back, hp, pbytes) != 0) {
      int64_t at = 0;
      while (f_bits(back[at]) == f_bits(hp[at])) at++;
      test_fail_at(__FILE__, __LINE__, "%s: probs[%" PRId64 ", %" PRId64 "] CUDA %.9g (0x%08x), CPU %.9g (0x%08x)",
                   what, at / b->V, at % b->V, (double)back[at], f_bits(back[at]), (double)hp[at],
                   f_bits(hp[at]));
    }
    free(hp), free(back), free(hs), free(hsb), cudaFree(dp), cudaFree(ds);
    t->softmax_rows += b->B, t->steps += u.plan.num_steps;
  }
  free_run(&u, sp->S);
}

/* ---- tests ------------------------------------------------------------------------------- */

static int test_records_and_outputs(void) {
  static const int64_t vocabs[] = {1, 2, 7, 33, 100, 1000, 4099, 30000};
  static const int32_t splits[] = {1, 2, 3, 4, 8};
  tally t = {0, 0, 0, 0};
  for (int rep = 0; rep < 32; rep++) {
    const int64_t V = vocabs[rep % 8];
    const int64_t B = V >= 30000 ? test_rand_range(1, 4) : test_rand_range(1, 10);
    /* 1024 = INGOT_SAMPLING_MAX_TOP: the CUDA lists' full size (bitonic sort of 1024, merges);
     * rep 7 (V = 30000, every split up to 8 shards) always has full lists */
    const int64_t kc = rep == 7 ? 1024 : (int64_t[]){1, 8, 64, 200, 1024}[test_rand() % 5];
    batch b;
    make_batch(&b, B, V, kc);
    upload_batch(&b);
    const int64_t n = rep == 7 ? 1024 : (int64_t[]){0, 1, 5, 20, 1024}[test_rand() % 5];
    const uint32_t top_flags = test_rand() % 2 ? INGOT_SAMPLING_TOP_FINAL : 0u;
    const uint32_t shard_top = top_flags ? INGOT_SAMPLING_SHARD_TOP_FINAL : 0u;
    const uint32_t all = INGOT_SAMPLING_SHARD_SELECT_TOP_K | INGOT_SAMPLING_SHARD_SELECT_TOP_P;
    char what[96];
    snprintf(what, sizeof what, "rep %d B=%" PRId64 " V=%" PRId64 " dtype %d %s", rep, B, V,
             (int)b.dtype, top_flags ? "final" : "raw");
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
      split sp = make_split(V, splits[s]);
      const int cross = (int)((rep + s) % 3);
      check_sample(&b, &sp, kc, n, select_flags(&b, kc) | shard_top, top_flags, cross, &t, what);
      check_sample(&b, &sp, 0, n, all | shard_top, top_flags, (cross + 1) % 3, &t, what);
      check_softmax(&b, &sp, s % 2 ? kc : 0, s % 2 ? select_flags(&b, kc) : all, cross, &t, what);
      if (test_failures_in_current() > 5) break;
    }
    free_batch(&b);
    if (test_failures_in_current() > 5) break;
  }
  printf("  %" PRId64 " sharded sample calls (%" PRId64 " rows), %" PRId64
         " softmax rows, %" PRId64 " steps: records and outputs identical to the CPU's\n",
         t.calls, t.rows, t.softmax_rows, t.steps);
  return 0;
}

/* Flat rows (ties across every border), greedy / top-k 1 and 3 / top-p,
 * final top-n, every cut inside the first tie group. */
static int test_ties_across_borders(void) {
  tally t = {0, 0, 0, 0};
  batch b;
  make_tie_batch(&b);
  const int64_t V = b.V;
  upload_batch(&b);
  for (int cut = 1; cut < 16; cut += 3) {
    split sp;
    sp.S = 3;
    sp.begin[0] = cut, sp.count[0] = 20;
    sp.begin[1] = 0, sp.count[1] = cut;
    sp.begin[2] = cut + 20, sp.count[2] = V - cut - 20;
    const uint32_t all = INGOT_SAMPLING_SHARD_SELECT_TOP_K | INGOT_SAMPLING_SHARD_SELECT_TOP_P;
    check_sample(&b, &sp, 8, 12, select_flags(&b, 8) | INGOT_SAMPLING_SHARD_TOP_FINAL,
                 INGOT_SAMPLING_TOP_FINAL, cut % 3, &t, "ties");
    check_sample(&b, &sp, 0, 12, all | INGOT_SAMPLING_SHARD_TOP_FINAL, INGOT_SAMPLING_TOP_FINAL,
                 (cut + 1) % 3, &t, "ties, radix");
  }
  free_batch(&b);
  return 0;
}

/* Rows with a bad per-row value, or a top-k / top-p the plan does not
 * serve: on CUDA token -1, BAD_PARAMETER, -Inf log-probabilities, top-n -1
 * / -Inf, zero probabilities; the other rows as the CPU with valid values
 * there (the CPU refuses the call itself). */
static int test_bad_parameter_rows(void) {
  const int64_t V = 500, B = 8, n = 4;
  batch b;
  make_batch(&b, B, V, 8);
  for (int64_t r = 0; r < B; r++) b.top_k[r] = 0, b.top_p[r] = 1.0f;
  /* the plan: candidates of 8, no selection */
  const int64_t kc = 8;
  const uint32_t flags = INGOT_SAMPLING_SHARD_TOP_FINAL;
  /* the CPU's reference run: every row valid */
  b.temperature[1] = 0.7f, b.temperature[3] = 1.0f, b.temperature[5] = 1.0f;
  b.top_k[3] = 5; /* served by the candidates */
  upload_batch(&b);
  split sp = make_split(V, 3);
  run_bufs u;
  int ran = run_both(&b, &sp, kc, n, flags, 0, &u, "bad rows (valid reference)");
  outs want;
  alloc_outs(&want, B, n, 0);
  if (ran) {
    ingot_sampling_shard sh = shard_of(&b, &sp, 0, kc, n, flags);
    ingot_sampling_shard_plan p = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
    ingot_sampling_shard_get_plan(cpu, &sh, B, b.dtype, &p);
    EXPECT_OK(cpu, finish_sample(cpu, &sh, u.h_gathered, u.plan.exchanged_bytes[u.plan.num_steps - 1],
                                 &want, B, n, INGOT_SAMPLING_TOP_FINAL, u.h_ws[0], p.workspace_bytes,
                                 NULL));
  }
  free_run(&u, sp.S);
  /* CUDA: row 1 negative temperature, row 3 top_k 50 > kc without
   * SELECT_TOP_K, row 5 top_p 0.5 without SELECT_TOP_P */
  const float bad_t = -1.0f, half = 0.5f;
  const int32_t k50 = 50;
  /* test_upload: complete before the kernels on the non-blocking stream run */
  CUDA_OK(test_upload((float *)b.d_temperature + 1, &bad_t, 4));
  CUDA_OK(test_upload((int32_t *)b.d_top_k + 3, &k50, 4));
  CUDA_OK(test_upload((float *)b.d_top_p + 5, &half, 4));
  ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  ingot_sampling_shard sh0 = shard_of(&b, &sp, 0, kc, n, flags);
  EXPECT_OK(gpu, ingot_sampling_shard_get_plan(gpu, &sh0, B, b.dtype, &plan));
  void *rec[3], *ws[3], *gathered = dalloc(plan.max_exchanged_bytes, 0);
  size_t wsb[3];
  for (int32_t j = 0; j < 3; j++) {
    ingot_sampling_shard sh = shard_of(&b, &sp, j, kc, n, flags);
    ingot_sampling_shard_plan q = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
    ingot_sampling_shard_get_plan(gpu, &sh, B, b.dtype, &q);
    wsb[j] = q.workspace_bytes;
    rec[j] = dalloc(plan.max_record_bytes, 0), ws[j] = dalloc(wsb[j], 0);
  }
  for (int i = 0; i < plan.num_steps; i++) {
    for (int32_t j = 0; j < 3; j++) {
      ingot_sampling_shard sh = shard_of(&b, &sp, j, kc, n, flags);
      ingot_tensor ds = slice_of(&b, &sp, j, 1);
      EXPECT_OK(gpu, ingot_sampling_shard_step(gpu, i, &ds, &b.params[1], &sh, i ? gathered : NULL,
                                               i ? plan.exchanged_bytes[i - 1] : 0, rec[j],
                                               plan.record_bytes[i], ws[j], wsb[j], stream));
    }
    EXPECT_OK(gpu, ingot_sampling_shard_gather(gpu, 3, (const void *const *)rec, plan.record_bytes[i],
                                               gathered, plan.max_exchanged_bytes, stream));
  }
  outs d, got;
  alloc_outs(&d, B, n, 1), alloc_outs(&got, B, n, 0);
  EXPECT_OK(gpu, finish_sample(gpu, &sh0, gathered, plan.exchanged_bytes[plan.num_steps - 1], &d, B,
                               n, INGOT_SAMPLING_TOP_FINAL, ws[0], wsb[0], stream));
  download_outs(&got, &d, B, n);
  for (int64_t r = 0; r < B; r++) {
    if (r == 1 || r == 3 || r == 5) {
      EXPECT(got.tokens[r] == -1 && got.status[r] == INGOT_SAMPLING_ROW_BAD_PARAMETER &&
                 got.lp[r] == -INFINITY && got.raw[r] == -INFINITY,
             "bad row %" PRId64 ": token %d status %u lp %g raw %g", r, got.tokens[r], got.status[r],
             (double)got.lp[r], (double)got.raw[r]);
      for (int64_t j = 0; j < n; j++)
        EXPECT(got.top_ids[r * n + j] == -1 && got.top_lp[r * n + j] == -INFINITY,
               "bad row %" PRId64 " top %" PRId64 ": (%d, %g)", r, j, got.top_ids[r * n + j],
               (double)got.top_lp[r * n + j]);
      continue;
    }
    if (!ran) continue;
    EXPECT(got.tokens[r] == want.tokens[r] && got.status[r] == want.status[r] &&
               f_bits(got.lp[r]) == f_bits(want.lp[r]) && f_bits(got.raw[r]) == f_bits(want.raw[r]),
           "row %" PRId64 " next to bad rows: CUDA token %d status %u, CPU %d %u", r, got.tokens[r],
           got.status[r], want.tokens[r], want.status[r]);
    for (int64_t j = 0; j < n; j++)
      EXPECT(got.top_ids[r * n + j] == want.top_ids[r * n + j] &&
                 f_bits(got.top_lp[r * n + j]) == f_bits(want.top_lp[r * n + j]),
             "row %" PRId64 " next to bad rows, top %" PRId64 ": CUDA (%d, %.9g), CPU (%d, %.9g)",
             r, j, got.top_ids[r * n + j], (double)got.top_lp[r * n + j], want.top_ids[r * n + j],
             (double)want.top_lp[r * n + j]);
  }
  free_outs(&d, 1), free_outs(&got, 0), free_outs(&want, 0);
  for (int32_t j = 0; j < 3; j++) cudaFree(rec[j]), cudaFree(ws[j]);
  cudaFree(gathered);
  free_batch(&b);
  return 0;
}

/* A whole sharded sample (steps, local exchanges, finish) captured in a
 * CUDA graph and replayed == the eager run. */
static int test_graph_capture(void) {
  const int64_t V = 3000, B = 4, n = 3, kc = 16;
  batch b;
  make_batch(&b, B, V, kc);
  upload_batch(&b);
  split sp = make_split(V, 4);
  const uint32_t flags = select_flags(&b, kc) | INGOT_SAMPLING_SHARD_TOP_FINAL;
  ingot_sampling_shard sh0 = shard_of(&b, &sp, 0, kc, n, flags);
  ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  EXPECT_OK(gpu, ingot_sampling_shard_get_plan(gpu, &sh0, B, b.dtype, &plan));
  void *rec[4], *ws[4], *gathered = dalloc(plan.max_exchanged_bytes, 0);
  size_t wsb[4];
  for (int32_t j = 0; j < 4; j++) {
    ingot_sampling_shard sh = shard_of(&b, &sp, j, kc, n, flags);
    ingot_sampling_shard_plan q = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
    ingot_sampling_shard_get_plan(gpu, &sh, B, b.dtype, &q);
    wsb[j] = q.workspace_bytes;
    rec[j] = dalloc(plan.max_record_bytes, 0), ws[j] = dalloc(wsb[j], 0);
  }
  outs d[2], h[2];
  for (int k = 0; k < 2; k++) alloc_outs(&d[k], B, n, 1), alloc_outs(&h[k], B, n, 0);
  for (int pass = 0; pass < 2; pass++) { /* 0: eager into d[0]; 1: captured into d[1] */
    cudaGraph_t graph = NULL;
    if (pass == 1) CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < plan.num_steps; i++) {
      for (int32_t j = 0; j < 4; j++) {
        ingot_sampling_shard sh = shard_of(&b, &sp, j, kc, n, flags);
        ingot_tensor ds = slice_of(&b, &sp, j, 1);
        EXPECT_OK(gpu, ingot_sampling_shard_step(gpu, i, &ds, &b.params[1], &sh, i ? gathered : NULL,
                                                 i ? plan.exchanged_bytes[i - 1] : 0, rec[j],
                                                 plan.record_bytes[i], ws[j], wsb[j], stream));
      }
      EXPECT_OK(gpu, (plan.exchange[i] == INGOT_SAMPLING_SHARD_EXCHANGE_SUM
                          ? ingot_sampling_shard_sum
                          : ingot_sampling_shard_gather)(gpu, 4, (const void *const *)rec,
                                                         plan.record_bytes[i], gathered,
                                                         plan.max_exchanged_bytes, stream));
    }
    EXPECT_OK(gpu, finish_sample(gpu, &sh0, gathered, plan.exchanged_bytes[plan.num_steps - 1],
                                 &d[pass], B, n, INGOT_SAMPLING_TOP_FINAL, ws[0], wsb[0], stream));
    if (pass == 1) {
      CUDA_OK(cudaStreamEndCapture(stream, &graph));
      cudaGraphExec_t exec;
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    download_outs(&h[pass], &d[pass], B, n);
  }
  same_outs(&h[0], &h[1], B, n, "graph replay against eager");
  for (int k = 0; k < 2; k++) free_outs(&d[k], 1), free_outs(&h[k], 0);
  for (int32_t j = 0; j < 4; j++) cudaFree(rec[j]), cudaFree(ws[j]);
  cudaFree(gathered);
  free_batch(&b);
  return 0;
}

#if defined(INGOT_TEST_NCCL)
#include <nccl.h>

/* The step functions of a one-shard call (the whole vocabulary) on the GPU,
 * the exchanges local: the reference of the NCCL form. Writes o (sample),
 * or probs [B, V] and status (device; softmax: probs non-NULL). */
static int gpu_steps_one_shard(const batch *b, const ingot_sampling_shard *sh, outs *o,
                               int64_t n, uint32_t top_flags, float *probs, uint32_t *status) {
  ingot_sampling_shard_plan plan = INGOT_SAMPLING_SHARD_PLAN_INITIALIZER;
  EXPECT_OK(gpu, ingot_sampling_shard_get_plan(gpu, sh, b->B, b->dtype, &plan));
  void *rec = dalloc(plan.max_record_bytes, 0), *gathered = dalloc(plan.max_exchanged_bytes, 0);
  void *ws = dalloc(plan.workspace_bytes, 0);
  const split whole = {1, {0}, {b->V}};
  ingot_tensor ds = slice_of(b, &whole, 0, 1);
  for (int i = 0; i < plan.num_steps; i++) {
    EXPECT_OK(gpu, ingot_sampling_shard_step(gpu, i, &ds, &b->params[1], sh, i ? gathered : NULL,
                                             i ? plan.exchanged_bytes[i - 1] : 0, rec,
                                             plan.record_bytes[i], ws, plan.workspace_bytes,
                                             stream));
    EXPECT_OK(gpu, (plan.exchange[i] == INGOT_SAMPLING_SHARD_EXCHANGE_SUM
                        ? ingot_sampling_shard_sum
                        : ingot_sampling_shard_gather)(gpu, 1, (const void *const *)&rec,
                                                       plan.record_bytes[i], gathered,
                                                       plan.max_exchanged_bytes, stream));
  }
  const size_t last = plan.exchanged_bytes[plan.num_steps - 1];
  if (probs) {
    ingot_tensor tp = ingot_tensor_2d(probs, INGOT_DTYPE_F32, b->B, b->V, b->V);
    ingot_tensor ts = ingot_tensor_1d(status, INGOT_DTYPE_U32, b->B);
    EXPECT_OK(gpu, ingot_sampling_shard_finish_softmax(gpu, &ds, &b->params[1], sh, gathered, last,
                                                       &tp, &ts, ws, plan.workspace_bytes, stream));
  } else {
    EXPECT_OK(gpu, finish_sample(gpu, sh, gathered, last, o, b->B, n, top_flags, ws,
                                 plan.workspace_bytes, stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaFree(rec), cudaFree(gathered), cudaFree(ws);
  return 0;
}

/* ingot_sample_sharded_nccl of the whole vocabulary into o (device). */
static ingot_status nccl_sample(ncclComm_t comm, const batch *b, const ingot_sampling_shard *sh,
                                outs *o, int64_t n, uint32_t top_flags, void *ws, size_t ws_bytes) {
  const split whole = {1, {0}, {b->V}};
  ingot_tensor ds = slice_of(b, &whole, 0, 1);
  outs_desc d;
  describe_outs(&d, o, b->B, n, top_flags);
  return ingot_sample_sharded_nccl(gpu, comm, &ds, &b->params[1], sh, &d.tokens, &d.status,
                                   &d.logprobs, ws, ws_bytes, (struct CUstream_st *)stream);
}

/* Replays what was captured on `stream` since BeginCapture, once. */
static int replay_capture(void) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return 0;
}

static int nccl_comm_one_rank(ncclComm_t *comm) {
  int dev = 0;
  CUDA_OK(cudaGetDevice(&dev));
  ncclResult_t r = ncclCommInitAll(comm, 1, &dev);
  EXPECT(r == ncclSuccess, "ncclCommInitAll of one rank: %s", ncclGetErrorString(r));
  return r == ncclSuccess;
}

/* The NCCL form on a one-rank communicator against the step functions:
 * sample (every feature, raw and final top-n) and softmax, eager and
 * captured in a CUDA graph. */
static int test_nccl_one_rank(void) {
  ncclComm_t comm;
  if (!nccl_comm_one_rank(&comm)) return 1;
  static const int64_t vocabs[] = {1, 33, 1000, 30000, 151936};
  for (int rep = 0; rep < 16; rep++) {
    const int64_t V = vocabs[rep % 5], B = test_rand_range(1, V > 30000 ? 3 : 8);
    const int64_t kc = (int64_t[]){0, 8, 64, 1024}[test_rand() % 4];
    const int softmax = rep % 4 == 3;
    const int64_t n = softmax || rep % 3 == 0 ? 0 : test_rand_range(1, 5);
    batch b;
    make_batch(&b, B, V, kc);
    upload_batch(&b);
    uint32_t flags = select_flags(&b, kc);
    const uint32_t top_flags = n > 0 && rep % 2 ? INGOT_SAMPLING_TOP_FINAL : 0;
    if (top_flags) flags |= INGOT_SAMPLING_SHARD_TOP_FINAL;
    if (softmax) flags |= INGOT_SAMPLING_SHARD_SOFTMAX;
    const split whole = {1, {0}, {V}};
    ingot_sampling_shard sh = shard_of(&b, &whole, 0, kc, n, flags);
    size_t ws_bytes = 0;
    EXPECT_OK(gpu, ingot_sampling_sharded_nccl_workspace_size(gpu, &sh, B, b.dtype, &ws_bytes));
    void *ws = dalloc(ws_bytes, 0x33);
    char what[160];
    snprintf(what, sizeof what,
             "NCCL one rank, V %" PRId64 " B %" PRId64 " kc %" PRId64 " n %" PRId64 " flags 0x%x",
             V, B, kc, n, (unsigned)flags);
    for (int captured = 0; captured < 2; captured++) {
      if (softmax) {
        const size_t pbytes = (size_t)(B * V) * 4, sbytes = (size_t)B * 4;
        float *want = dalloc(pbytes, 0x5a), *got = dalloc(pbytes, 0x5a);
        uint32_t *sw = dalloc(sbytes, 0x5a), *sg = dalloc(sbytes, 0x5a);
        gpu_steps_one_shard(&b, &sh, NULL, 0, 0, want, sw);
        ingot_tensor ds = slice_of(&b, &whole, 0, 1);
        ingot_tensor tp = ingot_tensor_2d(got, INGOT_DTYPE_F32, B, V, V);
        ingot_tensor ts = ingot_tensor_1d(sg, INGOT_DTYPE_U32, B);
        if (captured) CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        EXPECT_OK(gpu, ingot_sampling_softmax_sharded_nccl(gpu, comm, &ds, &b.params[1], &sh, &tp,
                                                           &ts, ws, ws_bytes,
                                                           (struct CUstream_st *)stream));
        if (captured) replay_capture();
        CUDA_OK(cudaStreamSynchronize(stream));
        float *hw = xalloc(pbytes, 0), *hg = xalloc(pbytes, 1);
        uint32_t *hsw = xalloc(sbytes, 0), *hsg = xalloc(sbytes, 1);
        download(hw, want, pbytes), download(hg, got, pbytes);
        download(hsw, sw, sbytes), download(hsg, sg, sbytes);
        EXPECT(memcmp(hw, hg, pbytes) == 0 && memcmp(hsw, hsg, sbytes) == 0,
               "%s%s: probs or status differ from the step functions'", what,
               captured ? " (graph)" : "");
        free(hw), free(hg), free(hsw), free(hsg);
        cudaFree(want), cudaFree(got), cudaFree(sw), cudaFree(sg);
      } else {
        outs dw, dg, hw, hg;
        alloc_outs(&dw, B, n, 1), alloc_outs(&dg, B, n, 1);
        alloc_outs(&hw, B, n, 0), alloc_outs(&hg, B, n, 0);
        gpu_steps_one_shard(&b, &sh, &dw, n, top_flags, NULL, NULL);
        if (captured) CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        EXPECT_OK(gpu, nccl_sample(comm, &b, &sh, &dg, n, top_flags, ws, ws_bytes));
        if (captured) replay_capture();
        CUDA_OK(cudaStreamSynchronize(stream));
        download_outs(&hw, &dw, B, n), download_outs(&hg, &dg, B, n);
        char msg[200];
        snprintf(msg, sizeof msg, "%s%s", what, captured ? " (graph)" : "");
        same_outs(&hw, &hg, B, n, msg);
        free_outs(&dw, 1), free_outs(&dg, 1), free_outs(&hw, 0), free_outs(&hg, 0);
      }
    }
    cudaFree(ws);
    free_batch(&b);
    if (test_failures_in_current()) break;
  }
  ncclCommDestroy(comm);
  return 0;
}

/* Every argument of the NCCL form checked before anything runs: the
 * communicator's rank count against the shard's, the workspace, a NULL
 * comm, a CPU context; the outputs untouched. */
static int test_nccl_errors(void) {
  ncclComm_t comm;
  if (!nccl_comm_one_rank(&comm)) return 1;
  const int64_t V = 500, B = 3;
  batch b;
  make_batch(&b, B, V, 8);
  upload_batch(&b);
  const uint32_t flags = select_flags(&b, 8);
  const split whole = {1, {0}, {V}}, half = {1, {0}, {V / 2}};
  ingot_sampling_shard sh = shard_of(&b, &whole, 0, 8, 0, flags);
  size_t ws_bytes = 0;
  EXPECT_OK(gpu, ingot_sampling_sharded_nccl_workspace_size(gpu, &sh, B, b.dtype, &ws_bytes));
  void *ws = dalloc(ws_bytes, 0);
  outs o, back;
  alloc_outs(&o, B, 0, 1), alloc_outs(&back, B, 0, 0);
  ingot_sampling_shard two = sh; /* shard 0 of a two-shard call */
  two.num_shards = 2, two.vocab_count = V / 2;
  ingot_tensor ds = slice_of(&b, &half, 0, 1);
  ingot_tensor tt = ingot_tensor_1d(o.tokens, INGOT_DTYPE_I32, B);
  EXPECT_ERROR(gpu,
               ingot_sample_sharded_nccl(gpu, comm, &ds, &b.params[1], &two, &tt, NULL, NULL, ws,
                                         ws_bytes, (struct CUstream_st *)stream),
               INGOT_STATUS_INVALID_ARGUMENT, "comm: 1 ranks, shard: num_shards = 2");
  EXPECT_ERROR(gpu, nccl_sample(comm, &b, &sh, &o, 0, 0, ws, ws_bytes - 16),
               INGOT_STATUS_INSUFFICIENT_WORKSPACE, "workspace");
  EXPECT_ERROR(gpu, nccl_sample(NULL, &b, &sh, &o, 0, 0, ws, ws_bytes),
               INGOT_STATUS_INVALID_ARGUMENT, "comm: NULL");
  /* the setup check: one rank agrees with itself (B = 0 too), reports its own bad
   * arguments after joining the exchange, and refuses to wait for a capturing stream */
  EXPECT_OK(gpu, ingot_sampling_sharded_nccl_verify(gpu, comm, &sh, B, b.dtype,
                                                    (struct CUstream_st *)stream));
  EXPECT_OK(gpu, ingot_sampling_sharded_nccl_verify(gpu, comm, &sh, 0, b.dtype,
                                                    (struct CUstream_st *)stream));
  EXPECT_ERROR(gpu,
               ingot_sampling_sharded_nccl_verify(gpu, comm, &two, B, b.dtype,
                                                  (struct CUstream_st *)stream),
               INGOT_STATUS_INVALID_ARGUMENT, "comm: 1 ranks, shard: num_shards = 2");
  EXPECT_ERROR(gpu,
               ingot_sampling_sharded_nccl_verify(gpu, comm, &sh, B, INGOT_DTYPE_I32,
                                                  (struct CUstream_st *)stream),
               INGOT_STATUS_INVALID_ARGUMENT, "logits_dtype");
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ingot_status captured = ingot_sampling_sharded_nccl_verify(gpu, comm, &sh, B, b.dtype,
                                                             (struct CUstream_st *)stream);
  const char *text = ingot_last_error(gpu);
  cudaGraph_t graph = NULL;
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  if (graph) cudaGraphDestroy(graph);
  EXPECT(captured == INGOT_STATUS_INVALID_ARGUMENT && strstr(text, "capturing") != NULL,
         "verify while capturing: %s (%s)", ingot_status_name(captured), text);
  ds = slice_of(&b, &whole, 0, 0); /* host logits for the CPU context */
  EXPECT_ERROR(cpu,
               ingot_sample_sharded_nccl(cpu, comm, &ds, &b.params[0], &sh, &tt, NULL, NULL, NULL,
                                         0, NULL),
               INGOT_STATUS_NOT_SUPPORTED, "CUDA context");
  CUDA_OK(cudaStreamSynchronize(stream));
  download(back.tokens, o.tokens, (size_t)B * 4);
  for (int64_t r = 0; r < B; r++)
    EXPECT(back.tokens[r] == (int32_t)0x5a5a5a5a, "tokens[%" PRId64 "] written by a refused call",
           r);
  free_outs(&o, 1), free_outs(&back, 0);
  cudaFree(ws);
  free_batch(&b);
  ncclCommDestroy(comm);
  return 0;
}
#endif

int main(void) {
  test_init("test_sampling_shard_cuda");
  if (!ingot_backend_available(INGOT_BACKEND_CUDA) ||
      ingot_context_create(INGOT_BACKEND_CUDA, 0, &gpu) != INGOT_OK) {
    printf("SKIPPED test_sampling_shard_cuda: no CUDA device\n");
    return TEST_SKIP_CODE;
  }
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &cpu) != INGOT_OK) return 1;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  test_run("records_and_outputs", test_records_and_outputs);
  test_run("ties_across_borders", test_ties_across_borders);
  test_run("bad_parameter_rows", test_bad_parameter_rows);
  test_run("graph_capture", test_graph_capture);
#if defined(INGOT_TEST_NCCL)
  test_run("nccl_one_rank", test_nccl_one_rank);
  test_run("nccl_errors", test_nccl_errors);
#endif
  cudaStreamDestroy(stream);
  ingot_context_destroy(cpu);
  ingot_context_destroy(gpu);
  return test_finish();
}
#endif
