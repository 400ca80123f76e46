// dev playgrounds: the median time of one replay of an instantiated CUDA
// graph, in us, divided by `calls` (the launches the graph holds); `warm`
// replays first, untimed, then `reps` timed ones (CUDA events around each).
// CHECK(x): a probe's main returns 1 after printing where a CUDA call failed.
#ifndef INGOT_DEV_GRAPH_TIMING_CUH
#define INGOT_DEV_GRAPH_TIMING_CUH

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

inline float median_replay_us(cudaGraphExec_t exec, cudaStream_t s, int warm, int reps,
                              int calls) {
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  std::vector<float> t;
  for (int r = 0; r < warm + reps; r++) {
    cudaEventRecord(a, s);
    cudaGraphLaunch(exec, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (r >= warm) t.push_back(ms * 1000.f / (float)calls);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

#endif
