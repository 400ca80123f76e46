// What a launch costs in a CUDA graph: an empty kernel of 336 blocks of 512
// threads with 66 KB of dynamic shared memory (the softmax grid's shape on an
// H200: 21 clusters of 16), launched plain, as clusters, cooperatively, with
// programmatic dependent launch, and combinations; 200 launches a graph,
// replayed 20 times, the median replay / 200.
// nvcc -O3 -gencode=arch=compute_90a,code=sm_90a dev/cuda/coop_launch_probe.cu -o probe
// H200, session 19 (us a launch): plain 0.84, + PDL 0.65; clusters of 16 0.90,
// + PDL 0.71; cooperative 1.17 / 0.90; cooperative clusters 1.20 / 0.97; with
// one grid.sync() 2.37 / 1.95 (docs/perf-notes.md, session 19).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "graph_timing.cuh"

__global__ void empty_kernel(int *p, int sync) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (sync) cooperative_groups::this_grid().sync();
  if (threadIdx.x == 0 && blockIdx.x == 0 && p) p[0]++;
}

static float per_launch(int blocks, int cluster, int coop, int pdl, int sync, size_t smem) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[3];
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(512);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  if (cluster) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs].val.clusterDim.x = cluster;
    attr[cfg.numAttrs].val.clusterDim.y = attr[cfg.numAttrs].val.clusterDim.z = 1;
    cfg.numAttrs++;
  }
  if (coop) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeCooperative;
    attr[cfg.numAttrs].val.cooperative = 1;
    cfg.numAttrs++;
  }
  if (pdl) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs++;
  }
  int *p = nullptr;
  cudaGraph_t g;
  cudaGraphExec_t e;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < 200 && err == cudaSuccess; i++) err = cudaLaunchKernelEx(&cfg, empty_kernel, p, sync);
  cudaStreamEndCapture(s, &g);
  if (err != cudaSuccess) {
    printf("  launch: %s\n", cudaGetErrorString(err));
    cudaGetLastError();
    return -1;
  }
  cudaGraphInstantiate(&e, g, 0);
  const float us = median_replay_us(e, s, 2, 20, 200);
  err = cudaGetLastError();
  if (err != cudaSuccess) printf("  run: %s\n", cudaGetErrorString(err));
  cudaGraphExecDestroy(e), cudaGraphDestroy(g), cudaStreamDestroy(s);
  return us;
}

int main() {
  const size_t smem = 66 * 1024;
  cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  const struct { const char *what; int cluster, coop, pdl, sync; } v[] = {
      {"plain", 0, 0, 0, 0},          {"plain + PDL", 0, 0, 1, 0},
      {"clusters of 16", 16, 0, 0, 0}, {"clusters of 16 + PDL", 16, 0, 1, 0},
      {"cooperative", 0, 1, 0, 0},     {"cooperative + PDL", 0, 1, 1, 0},
      {"cooperative clusters", 16, 1, 0, 0}, {"cooperative clusters + PDL", 16, 1, 1, 0},
      {"cooperative clusters, grid.sync", 16, 1, 0, 1},
      {"cooperative clusters + PDL, grid.sync", 16, 1, 1, 1}};
  for (auto &x : v)
    printf("%-40s %7.2f us a launch (336 blocks)\n", x.what,
           per_launch(336, x.cluster, x.coop, x.pdl, x.sync, smem));
  return 0;
}
