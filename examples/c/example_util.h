/*
 * What the three C examples share: picking the backend from the command
 * line, creating the context, and moving buffers to and from the memory that
 * context works on (host memory for the CPU backend, cudaMalloc'd device
 * memory for the CUDA backend).
 *
 *   prog [cpu|cuda]    cpu is the default
 *
 * Exit codes: 0 success, 1 a failed call or a wrong result, 2 a bad
 * argument, 77 skipped (built without CUDA, or no usable GPU), which CTest
 * reports as a skipped test.
 */
#ifndef INGOT_EXAMPLE_UTIL_H
#define INGOT_EXAMPLE_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingot/ingot.h"

#ifdef INGOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define EXAMPLE_SKIPPED 77

/* Runs an ingot call; on failure prints the call, its status and the
 * library's text (which names the op, the argument and the bad value), and
 * exits 1. */
#define CHECK(ctx, call)                                                     \
  do {                                                                       \
    ingot_status st_ = (call);                                               \
    if (st_ != INGOT_OK) {                                                   \
      fprintf(stderr, "%s:%d: %s\n  -> %s: %s\n", __FILE__, __LINE__, #call, \
              ingot_status_name(st_), ingot_last_error(ctx));                \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

/* Records a wrong result (the example goes on, and exits 1 at the end). */
static int example_failures = 0;
#define VERIFY(cond, ...)                                     \
  do {                                                        \
    if (!(cond)) {                                            \
      fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                           \
      fputc('\n', stderr);                                    \
      example_failures++;                                     \
    }                                                         \
  } while (0)

/* Creates the context the command line asks for. Returns 0 and sets *ctx,
 * or the exit code the program should return. */
static int example_open(int argc, char **argv, ingot_context_t *ctx) {
  const char *arg = argc > 1 ? argv[1] : "cpu";
  ingot_backend backend;
  *ctx = NULL;
  if (argc > 2 || (strcmp(arg, "cpu") != 0 && strcmp(arg, "cuda") != 0)) {
    fprintf(stderr, "usage: %s [cpu|cuda]\n", argv[0]);
    return 2;
  }
  backend = strcmp(arg, "cuda") == 0 ? INGOT_BACKEND_CUDA : INGOT_BACKEND_CPU;
#ifndef INGOT_WITH_CUDA
  if (backend == INGOT_BACKEND_CUDA) {
    printf("SKIPPED: this example was built without CUDA\n");
    return EXAMPLE_SKIPPED;
  }
#endif
  ingot_status st = ingot_context_create(backend, 0, ctx);
  if (st != INGOT_OK) {
    /* No context yet: the reason is in ingot_last_error(NULL). */
    fprintf(stderr, "ingot_context_create(%s): %s: %s\n", arg, ingot_status_name(st),
            ingot_last_error(NULL));
    if (backend == INGOT_BACKEND_CUDA &&
        (st == INGOT_STATUS_NOT_SUPPORTED || st == INGOT_STATUS_CUDA_ERROR)) {
      printf("SKIPPED: no usable GPU\n");
      return EXAMPLE_SKIPPED;
    }
    return 1;
  }
  printf("ingot %s, %s backend\n", ingot_version(), arg);
  return 0;
}

static int example_on_cuda(ingot_context_t ctx) {
  return ingot_context_backend(ctx) == INGOT_BACKEND_CUDA;
}

/* bytes (0: NULL) of uninitialised memory the context can use: 64-byte
 * aligned host memory, or device memory (256-byte aligned). */
static void *example_alloc(ingot_context_t ctx, size_t bytes) {
  void *p = NULL;
  if (bytes == 0) return NULL;
#ifdef INGOT_WITH_CUDA
  if (example_on_cuda(ctx)) {
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      fprintf(stderr, "cudaMalloc(%zu): %s\n", bytes, cudaGetErrorString(e));
      exit(1);
    }
    return p;
  }
#else
  (void)ctx;
#endif
  p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == NULL) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

static void example_free(ingot_context_t ctx, void *p) {
#ifdef INGOT_WITH_CUDA
  if (example_on_cuda(ctx)) {
    cudaFree(p);
    return;
  }
#else
  (void)ctx;
#endif
  free(p);
}

/* Copies `bytes` of host memory into `dst` (memory from example_alloc). */
static void example_write(ingot_context_t ctx, void *dst, const void *host, size_t bytes) {
  if (bytes == 0) return;
#ifdef INGOT_WITH_CUDA
  if (example_on_cuda(ctx)) {
    cudaError_t e = cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      fprintf(stderr, "cudaMemcpy to the device: %s\n", cudaGetErrorString(e));
      exit(1);
    }
    return;
  }
#else
  (void)ctx;
#endif
  memcpy(dst, host, bytes);
}

/* A new buffer in the context's memory holding a copy of `host`. */
static void *example_upload(ingot_context_t ctx, const void *host, size_t bytes) {
  void *p = example_alloc(ctx, bytes);
  example_write(ctx, p, host, bytes);
  return p;
}

/* Copies `bytes` of `src` (memory from example_alloc) to the host. The ops
 * ran on the legacy default stream (stream NULL), and cudaMemcpy waits for
 * it: the results are complete when this returns. */
static void example_read(ingot_context_t ctx, void *host, const void *src, size_t bytes) {
  if (bytes == 0) return;
#ifdef INGOT_WITH_CUDA
  if (example_on_cuda(ctx)) {
    cudaError_t e = cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
      fprintf(stderr, "cudaMemcpy to the host: %s\n", cudaGetErrorString(e));
      exit(1);
    }
    return;
  }
#else
  (void)ctx;
#endif
  memcpy(host, src, bytes);
}

/* A small deterministic generator (splitmix64), so every run is the same. */
static uint64_t example_rng_state = 0x1234567887654321ull;
static uint64_t example_rand(void) {
  uint64_t z = (example_rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/* Uniform in [0, 1). */
static float example_uniform(void) { return (float)(example_rand() >> 40) * 0x1p-24f; }

/* Ends the example: 0 if every VERIFY held, else 1. */
static int example_finish(ingot_context_t ctx) {
  ingot_context_destroy(ctx);
  if (example_failures) {
    fprintf(stderr, "%d check(s) FAILED\n", example_failures);
    return 1;
  }
  printf("OK\n");
  return 0;
}

#endif /* INGOT_EXAMPLE_UTIL_H */
