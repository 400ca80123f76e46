/* dev: host cost of the CUDA runtime calls an op makes (not installed, not in CTest).
 * cc -O2 dev/host_cost.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define REPS 2000
#define TIME(label, stmt)                                   \
  do {                                                      \
    static double t[REPS];                                  \
    for (int r = 0; r < REPS; r++) {                        \
      double t0 = now_us();                                 \
      stmt;                                                 \
      t[r] = now_us() - t0;                                 \
    }                                                       \
    qsort(t, REPS, sizeof t[0], cmp);                       \
    printf("%-40s median %.3f us\n", label, t[REPS / 2]);   \
  } while (0)

int main(void) {
  void *d, *h, *p = malloc(1 << 20);
  cudaMalloc(&d, 1 << 20);
  cudaHostAlloc(&h, 1 << 20, cudaHostAllocMapped);
  struct cudaPointerAttributes a;
  int dev;
  TIME("cudaPointerGetAttributes(device)", cudaPointerGetAttributes(&a, d));
  TIME("cudaPointerGetAttributes(pinned)", cudaPointerGetAttributes(&a, h));
  TIME("cudaPointerGetAttributes(pageable)", cudaPointerGetAttributes(&a, p));
  TIME("cudaGetDevice", cudaGetDevice(&dev));
  TIME("cudaGetLastError", cudaGetLastError());
  return 0;
}
