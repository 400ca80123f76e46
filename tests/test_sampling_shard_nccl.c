/*
 * Sharded sampling over NCCL on several GPUs: one process a GPU (forked),
 * one communicator of S = 1, 2, 4, 8 ranks (as many as the machine has
 * GPUs; S = 1 runs on any GPU). Every rank builds the same random batches
 * (the RNG state is forked), holds its uneven slice of the vocabulary (slot
 * order shuffled, empty slices too), and checks on its own GPU:
 *   - ingot_sampling_sharded_nccl_verify passes;
 *   - ingot_sample_sharded_nccl's outputs (tokens, statuses, both
 *     log-probabilities, raw or final top-n) equal the reference, the
 *     unsharded ingot_sample on a CPU context, bit for bit, and
 *     ingot_sampling_softmax_sharded_nccl gives the CPU's probs' columns of
 *     the rank's slice (CUDA's unsharded calls agree with the CPU only
 *     within their stated bounds: the fast exp of their dense kernels);
 *   - the call captured in a CUDA graph, replayed after new logits and
 *     parameters are written into its buffers, equals the eager call;
 *   - (S >= 2) a rank that announces another batch size makes verify fail
 *     on EVERY rank with the same named error, and a rank with a bad shard
 *     descriptor gets its own error while the others name it: no hang.
 * After each check the ranks agree (an all-reduce) whether any failed, so
 * that they stop together; a rank that hangs anyway is killed by an alarm,
 * and the parent kills the others once one fails. A rank's failures are its
 * exit status; the parent reports each group.
 * Built where CMake found NCCL (nccl.h and libnccl, which the test links to
 * make its communicators); skipped (77) without a CUDA device.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#if !defined(INGOT_WITH_CUDA) || !defined(INGOT_TEST_NCCL)
static int skip(void) { return TEST_SKIP_CODE; }
int main(void) {
  test_init("test_sampling_shard_nccl");
  test_run("sampling_shard_nccl", skip);
  return test_finish();
}
#else

#include <nccl.h>

#include "sampling_shard_batch.h"

static ingot_context_t gpu, cpu;
static cudaStream_t stream;

/* ---- one rank ------------------------------------------------------------------------- */

typedef struct rank_env {
  int32_t S, rank;
  ncclComm_t comm;
} rank_env;

/* ingot_sample_sharded_nccl of this rank's slice into o (device). */
static ingot_status sharded_sample(const rank_env *e, const batch *b, const split *sp,
                                   const ingot_sampling_shard *sh, outs *o, int64_t n,
                                   uint32_t top_flags, void *ws, size_t ws_bytes) {
  ingot_tensor ds = slice_of(b, sp, e->rank, 1);
  outs_desc d;
  describe_outs(&d, o, b->B, n, top_flags);
  return ingot_sample_sharded_nccl(gpu, e->comm, &ds, &b->params[1], sh, &d.tokens, &d.status,
                                   &d.logprobs, ws, ws_bytes, (struct CUstream_st *)stream);
}

/* The reference: the unsharded ingot_sample of the whole logits on the CPU,
 * into o (host). */
static ingot_status whole_sample(const batch *b, outs *o, int64_t n, uint32_t top_flags) {
  outs_desc d;
  describe_outs(&d, o, b->B, n, top_flags);
  size_t need = 0;
  ingot_status st = ingot_sample_workspace_size(cpu, b->B, b->V, b->dtype, n, &need);
  if (st) return st;
  void *ws = xalloc(need, 0);
  st = ingot_sample(cpu, &b->t_logits[0], &b->params[0], &d.tokens, &d.status, &d.logprobs, ws,
                    need, NULL);
  free(ws);
  return st;
}

/* Sample, or softmax, of one random batch: sharded over NCCL == unsharded. */
static int check_batch(const rank_env *e, int rep) {
  static const int64_t vocabs[] = {7, 1000, 30000, 151936};
  const int softmax = rep % 5 == 4;
  const int64_t V = vocabs[softmax ? 2 + rep / 5 % 2 : rep % 4];
  const int64_t B = test_rand_range(1, V > 30000 ? 4 : 12);
  const int64_t kc = (int64_t[]){0, 8, 64, 1024}[test_rand() % 4];
  const int64_t n = softmax || rep % 3 == 0 ? 0 : test_rand_range(1, 6);
  batch b;
  make_batch(&b, B, V, kc);
  upload_batch(&b);
  const split sp = make_split(V, e->S);
  uint32_t flags = select_flags(&b, kc);
  const uint32_t top_flags = n > 0 && rep % 2 ? INGOT_SAMPLING_TOP_FINAL : 0;
  if (top_flags) flags |= INGOT_SAMPLING_SHARD_TOP_FINAL;
  if (softmax) flags |= INGOT_SAMPLING_SHARD_SOFTMAX;
  const ingot_sampling_shard sh = shard_of(&b, &sp, e->rank, kc, n, flags);
  size_t ws_bytes = 0;
  EXPECT_OK(gpu, ingot_sampling_sharded_nccl_workspace_size(gpu, &sh, B, b.dtype, &ws_bytes));
  void *ws = dalloc(ws_bytes, 0x33);
  EXPECT_OK(gpu, ingot_sampling_sharded_nccl_verify(gpu, e->comm, &sh, B, b.dtype,
                                                    (struct CUstream_st *)stream));
  char what[200];
  snprintf(what, sizeof what,
           "rank %d of %d: V %" PRId64 " [%" PRId64 ", +%" PRId64 ") B %" PRId64 " kc %" PRId64
           " n %" PRId64 " flags 0x%x",
           (int)e->rank, (int)e->S, V, sp.begin[e->rank], sp.count[e->rank], B, kc, n,
           (unsigned)flags);
  if (softmax) {
    const size_t whole = (size_t)(B * V) * 4, mine = (size_t)(B * sp.count[e->rank]) * 4;
    float *hw = xalloc(whole, 0x5a), *dm = dalloc(mine, 0x5a);
    ingot_tensor tw = ingot_tensor_2d(hw, INGOT_DTYPE_F32, B, V, V);
    size_t need = 0;
    EXPECT_OK(cpu, ingot_sampling_softmax_workspace_size(cpu, B, V, b.dtype, &need));
    void *sws = xalloc(need, 0);
    EXPECT_OK(cpu, ingot_sampling_softmax(cpu, &b.t_logits[0], &b.params[0], &tw, NULL, sws, need,
                                          NULL));
    ingot_tensor ds = slice_of(&b, &sp, e->rank, 1);
    ingot_tensor tm = ingot_tensor_2d(sp.count[e->rank] ? dm : NULL, INGOT_DTYPE_F32, B,
                                      sp.count[e->rank], sp.count[e->rank]);
    EXPECT_OK(gpu, ingot_sampling_softmax_sharded_nccl(gpu, e->comm, &ds, &b.params[1], &sh, &tm,
                                                       NULL, ws, ws_bytes,
                                                       (struct CUstream_st *)stream));
    float *hm = xalloc(mine, 1);
    download(hm, dm, mine);
    for (int64_t r = 0; r < B; r++)
      for (int64_t j = 0; j < sp.count[e->rank]; j++) {
        const float want = hw[r * V + sp.begin[e->rank] + j], got = hm[r * sp.count[e->rank] + j];
        if (f_bits(want) != f_bits(got)) {
          test_fail_at(__FILE__, __LINE__,
                       "%s: probs[%" PRId64 ", %" PRId64 "] %.9g, unsharded %.9g", what, r,
                       sp.begin[e->rank] + j, (double)got, (double)want);
          r = B;
          break;
        }
      }
    free(hw), free(hm), cudaFree(dm), free(sws);
  } else {
    outs dg, hw, hg;
    alloc_outs(&dg, B, n, 1), alloc_outs(&hw, B, n, 0), alloc_outs(&hg, B, n, 0);
    EXPECT_OK(cpu, whole_sample(&b, &hw, n, top_flags));
    EXPECT_OK(gpu, sharded_sample(e, &b, &sp, &sh, &dg, n, top_flags, ws, ws_bytes));
    download_outs(&hg, &dg, B, n);
    same_outs(&hw, &hg, B, n, what);
    free_outs(&dg, 1), free_outs(&hw, 0), free_outs(&hg, 0);
  }
  cudaFree(ws);
  free_batch(&b);
  return test_failures_in_current() ? 1 : 0;
}

/* The call captured in a CUDA graph, replayed on new logits and parameters
 * written into the captured buffers == the eager call on them. */
static int check_graph(const rank_env *e) {
  const int64_t V = 50000, B = 8, kc = 64, n = 4;
  batch b, next;
  make_batch(&b, B, V, kc);
  upload_batch(&b);
  make_batch(&next, B, V, kc);
  next.dtype = b.dtype, next.stride = b.stride; /* the captured buffers' layout */
  free(next.logits);
  next.logits = xalloc((size_t)(B * b.stride) * 4, 0);
  for (int64_t r = 0; r < B; r++) make_row(&next, r, (int)(test_rand() % 10));
  const split sp = make_split(V, e->S);
  /* one plan for both: the flags both batches need */
  const uint32_t flags = select_flags(&b, kc) | select_flags(&next, kc) |
                         INGOT_SAMPLING_SHARD_TOP_FINAL;
  const ingot_sampling_shard sh = shard_of(&b, &sp, e->rank, kc, n, flags);
  size_t ws_bytes = 0;
  EXPECT_OK(gpu, ingot_sampling_sharded_nccl_workspace_size(gpu, &sh, B, b.dtype, &ws_bytes));
  void *ws = dalloc(ws_bytes, 0);
  outs dg, de, hg, he;
  alloc_outs(&dg, B, n, 1), alloc_outs(&de, B, n, 1), alloc_outs(&hg, B, n, 0),
      alloc_outs(&he, B, n, 0);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  EXPECT_OK(gpu, sharded_sample(e, &b, &sp, &sh, &dg, n, INGOT_SAMPLING_TOP_FINAL, ws, ws_bytes));
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  /* new inputs into the captured buffers: logits, then the per-row parameters */
  CUDA_OK(test_upload(b.d_logits, next.logits, (size_t)(B * b.stride) * elem_of(b.dtype)));
  CUDA_OK(test_upload(b.d_temperature, next.temperature, (size_t)B * 4));
  CUDA_OK(test_upload(b.d_top_k, next.top_k, (size_t)B * 4));
  CUDA_OK(test_upload(b.d_top_p, next.top_p, (size_t)B * 4));
  CUDA_OK(test_upload(b.d_min_p, next.min_p, (size_t)B * 4));
  CUDA_OK(test_upload(b.d_seed, next.seed, (size_t)B * 8));
  CUDA_OK(test_upload(b.d_position, next.position, (size_t)B * 8));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  EXPECT_OK(gpu, sharded_sample(e, &b, &sp, &sh, &de, n, INGOT_SAMPLING_TOP_FINAL, ws, ws_bytes));
  download_outs(&hg, &dg, B, n), download_outs(&he, &de, B, n);
  char what[96];
  snprintf(what, sizeof what, "rank %d of %d: graph replay against eager", (int)e->rank,
           (int)e->S);
  same_outs(&he, &hg, B, n, what);
  cudaGraphExecDestroy(exec), cudaGraphDestroy(graph);
  free_outs(&dg, 1), free_outs(&de, 1), free_outs(&hg, 0), free_outs(&he, 0);
  cudaFree(ws);
  free_batch(&next);
  free_batch(&b);
  return test_failures_in_current() ? 1 : 0;
}

/* Rank 1 announces another batch size: verify fails on every rank with the
 * same text. Then rank 1's own descriptor is bad (one shard too many): it
 * gets that error, the others name it. Nobody waits for ever. */
static int check_fault(const rank_env *e) {
  ingot_sampling_shard sh = INGOT_SAMPLING_SHARD_INITIALIZER;
  sh.vocab_size = 1000 * e->S, sh.vocab_begin = 1000 * e->rank, sh.vocab_count = 1000;
  sh.num_shards = e->S, sh.shard_index = e->rank, sh.max_top_k = 8;
  ingot_status st = ingot_sampling_sharded_nccl_verify(gpu, e->comm, &sh, e->rank == 1 ? 5 : 4,
                                                       INGOT_DTYPE_F32,
                                                       (struct CUstream_st *)stream);
  const char *text = ingot_last_error(gpu);
  EXPECT(st == INGOT_STATUS_INVALID_ARGUMENT &&
             strstr(text, "comm: rank 1 was written for another call (B 5") != NULL,
         "rank %d: verify of mismatched batches: %s (%s)", (int)e->rank, ingot_status_name(st),
         text);
  if (e->rank == 1) sh.num_shards = e->S + 1;
  st = ingot_sampling_sharded_nccl_verify(gpu, e->comm, &sh, 4, INGOT_DTYPE_F32,
                                          (struct CUstream_st *)stream);
  text = ingot_last_error(gpu);
  char want[96];
  if (e->rank == 1)
    snprintf(want, sizeof want, "comm: %d ranks, shard: num_shards = %d", (int)e->S,
             (int)e->S + 1);
  else
    snprintf(want, sizeof want, "comm: rank 1 refused its own arguments");
  EXPECT(st == INGOT_STATUS_INVALID_ARGUMENT && strstr(text, want) != NULL,
         "rank %d: verify with rank 1's bad descriptor: %s (%s), expected \"%s\"", (int)e->rank,
         ingot_status_name(st), text, want);
  return test_failures_in_current() ? 1 : 0;
}

/* 1 on every rank if `bad` on any rank (an all-reduce of one int), so that
 * the ranks stop together instead of leaving some in a collective. */
static int agree(const rank_env *e, int bad) {
  int *d = NULL, total = 1;
  if (cudaMalloc((void **)&d, sizeof(int)) != cudaSuccess) return 1;
  if (cudaMemcpy(d, &bad, sizeof bad, cudaMemcpyHostToDevice) == cudaSuccess &&
      ncclAllReduce(d, d, 1, ncclInt32, ncclSum, e->comm, stream) == ncclSuccess &&
      cudaStreamSynchronize(stream) == cudaSuccess)
    cudaMemcpy(&total, d, sizeof total, cudaMemcpyDeviceToHost);
  cudaFree(d);
  return total != 0;
}

static int rank_main(int32_t S, int32_t rank, int id_in, const int *id_out) {
  alarm(300); /* a hang (a rank that left early) ends the process */
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
    for (int32_t j = 1; j < S; j++)
      if (write(id_out[j], &id, sizeof id) != (ssize_t)sizeof id) return 2;
  } else if (read(id_in, &id, sizeof id) != (ssize_t)sizeof id) {
    return 2;
  }
  rank_env e = {S, rank, NULL};
  if (cudaSetDevice(rank) != cudaSuccess || ncclCommInitRank(&e.comm, S, id, rank) != ncclSuccess)
    return 2;
  if (ingot_context_create(INGOT_BACKEND_CUDA, rank, &gpu) != INGOT_OK ||
      ingot_context_create(INGOT_BACKEND_CPU, 0, &cpu) != INGOT_OK)
    return 2;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  int bad = 0;
  for (int rep = 0; rep < 10 && !bad; rep++) bad = agree(&e, check_batch(&e, rep));
  if (!bad) bad = agree(&e, check_graph(&e));
  if (!bad && S >= 2) bad = agree(&e, check_fault(&e));
  cudaStreamDestroy(stream);
  ingot_context_destroy(gpu);
  ingot_context_destroy(cpu);
  ncclCommDestroy(e.comm);
  return bad;
}

/* ---- the parent ------------------------------------------------------------------------ */

static int g_group; /* S of the group the next test runs */

/* S processes, one a GPU; fails if any rank fails or dies (the others are
 * then killed: they may wait for it in a collective). */
static int test_group(void) {
  const int32_t S = g_group;
  for (int32_t j = 0; j < S; j++) (void)test_rand(); /* each group its own batches */
  int pipes[8][2];
  for (int32_t j = 0; j < S; j++)
    if (pipe(pipes[j]) != 0) return 1;
  pid_t pids[8];
  int32_t started = 0;
  for (int32_t r = 0; r < S; r++) {
    pids[r] = fork();
    if (pids[r] < 0) break;
    started++;
    if (pids[r] == 0) {
      int out[8];
      for (int32_t j = 0; j < S; j++) { /* keep this rank's ends only */
        if (j != r) close(pipes[j][0]);
        if (r != 0) close(pipes[j][1]);
        out[j] = pipes[j][1];
      }
      _exit(rank_main(S, r, pipes[r][0], out));
    }
  }
  for (int32_t j = 0; j < S; j++) close(pipes[j][0]), close(pipes[j][1]);
  EXPECT(started == S, "S = %d: fork failed after %d ranks", (int)S, (int)started);
  int failed = started != S;
  for (int32_t left = started; left > 0; left--) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    int32_t r = 0;
    while (r < started && pids[r] != pid) r++;
    if (r == started) break;
    pids[r] = 0;
    const int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && !failed) { /* the others may wait for this one in a collective */
      for (int32_t j = 0; j < started; j++)
        if (pids[j] > 0) kill(pids[j], SIGKILL);
      failed = 1;
      EXPECT(0, "S = %d: rank %d %s %d (2: NCCL or CUDA set-up failed; 14: alarm, a hang)",
             (int)S, (int)r, WIFEXITED(status) ? "exited with" : "was killed by signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
  }
  return 0;
}

/* CUDA is never initialised in the parent (its children use it): a child
 * counts the GPUs. */
static int probe(int *gpus) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    _exit(write(fds[1], &n, sizeof n) == (ssize_t)sizeof n ? 0 : 1);
  }
  close(fds[1]);
  int ok = read(fds[0], gpus, sizeof *gpus) == (ssize_t)sizeof *gpus;
  close(fds[0]);
  waitpid(pid, NULL, 0);
  return ok;
}

int main(void) {
  test_init("test_sampling_shard_nccl");
  int gpus = 0;
  if (!probe(&gpus) || gpus == 0) {
    printf("SKIPPED test_sampling_shard_nccl: no CUDA device\n");
    return TEST_SKIP_CODE;
  }
  static const int32_t groups[] = {1, 2, 4, 8};
  static const char *const names[] = {"one_gpu", "two_gpus", "four_gpus", "eight_gpus"};
  for (int i = 0; i < 4; i++) {
    if (groups[i] > gpus) {
      printf("skip    %s: %d GPUs here\n", names[i], gpus);
      continue;
    }
    g_group = groups[i];
    test_run(names[i], test_group);
  }
  return test_finish();
}
#endif
