// dev playgrounds: the median time of one replay of an instantiated CUDA
// graph, in us, divided by `calls` (the launches the graph holds); `warm`
// replays first, untimed, then `reps` timed ones (CUDA events around each).
#ifndef INGOT_DEV_GRAPH_TIMING_CUH
#define INGOT_DEV_GRAPH_TIMING_CUH

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

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
