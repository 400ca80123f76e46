// Playground: what a thread-block-cluster barrier and a distributed-shared-
// memory load cost on this GPU, for the sampling kernels' design (a row per
// cluster, a barrier per exchange). Standalone:
//   nvcc -O2 -gencode=arch=compute_90a,code=sm_90a dev/cuda/cluster_sync.cu -o /tmp/cs && /tmp/cs
// Prints, per cluster size and block size: us per cluster.sync() and per
// dependent remote shared-memory load (kernel time difference between R and 0
// iterations, one cluster, median of 20 launches).
#include <cooperative_groups.h>
#include <cstdio>
#include <vector>
#include <algorithm>

namespace cg = cooperative_groups;

__global__ void barriers(int reps, int *sink) {
  __shared__ int x[32];
  if (threadIdx.x < 32) x[threadIdx.x] = threadIdx.x;
  for (int i = 0; i < reps; i++) cg::this_cluster().sync();
  if (threadIdx.x == 0) sink[blockIdx.x] = x[0];
}

__global__ void remote_loads(int reps, int *sink) {
  __shared__ int x[32];
  if (threadIdx.x < 32) x[threadIdx.x] = (threadIdx.x + 1) & 31;
  cg::this_cluster().sync();
  int v = 0;
  if (threadIdx.x == 0) {
    unsigned peer = (cg::this_cluster().block_rank() + 1) % cg::this_cluster().num_blocks();
    int *rx = cg::this_cluster().map_shared_rank(x, peer);
    for (int i = 0; i < reps; i++) v = rx[v];  // dependent chain
  }
  cg::this_cluster().sync();
  if (threadIdx.x == 0) sink[blockIdx.x] = v;
}

template <class K>
static float time_us(K kernel, int cluster, int threads, int reps, int *sink) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.gridDim = dim3(cluster);
  cfg.blockDim = dim3(threads);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> t;
  for (int i = 0; i < 21; i++) {
    cudaEventRecord(a);
    cudaLaunchKernelEx(&cfg, kernel, reps, sink);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (i) t.push_back(ms * 1000.0f);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  int *sink;
  cudaMalloc(&sink, 64 * sizeof(int));
  cudaFuncSetAttribute(barriers, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(remote_loads, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  const int R = 1000;
  printf("cluster threads  us/barrier  us/remote-load  (kernel us at R=0)\n");
  for (int c : {1, 2, 8, 16})
    for (int th : {512, 1024}) {
      float b0 = time_us(barriers, c, th, 0, sink), b1 = time_us(barriers, c, th, R, sink);
      float l0 = time_us(remote_loads, c, th, 0, sink), l1 = time_us(remote_loads, c, th, R, sink);
      printf("%7d %7d  %10.3f  %14.3f  (%.2f)\n", c, th, (b1 - b0) / R, (l1 - l0) / R, b0);
    }
  cudaError_t e = cudaGetLastError();
  printf("%s\n", cudaGetErrorString(e));
  return e != cudaSuccess;
}
