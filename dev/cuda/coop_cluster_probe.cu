// Playground: can a grid of thread-block clusters be launched COOPERATIVELY
// (every block co-resident, so that clusters may wait for each other through
// global memory without a deadlock), how large may it be, and what does an
// exchange between all its clusters cost? For the dense sampling kernel's
// next design (docs/perf-notes.md, session 18): a persistent grid whose
// clusters split the rows of the last partial wave. Standalone:
//   nvcc -O2 -gencode=arch=compute_90a,code=sm_90a dev/cuda/coop_cluster_probe.cu -o /tmp/cc
//   /tmp/cc
// Prints, for clusters of 16 blocks of 512 threads with 66 KB of shared
// memory each: the launch's status at the occupancy API's cluster count and
// one more, and the microseconds an all-cluster barrier costs (cluster
// leaders meet on a global counter; the cluster's other blocks wait at a
// cluster barrier) and a cooperative_groups grid.sync() cost, from the
// kernel's time with R and with 0 rounds.
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

__global__ void meet(unsigned *arrived, int rounds, int clusters) {
  extern __shared__ int smem[];
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  for (int i = 0; i < rounds; i++) {
    if (rank == 0 && threadIdx.x == 0) {
      const unsigned target = (unsigned)((i + 1) * clusters);
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(arrived) : "memory");
      unsigned seen = 0;
      do
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(arrived) : "memory");
      while (seen < target);
    }
    asm volatile("barrier.cluster.arrive.aligned; barrier.cluster.wait.aligned;" ::: "memory");
  }
  if (threadIdx.x == 1u << 20) smem[0] = 0;
}

/* The same meeting by the runtime's grid barrier (its state is the launch's,
 * so no workspace has to start a call zeroed). */
__global__ void meet_grid(unsigned *arrived, int rounds, int clusters) {
  extern __shared__ int smem[];
  for (int i = 0; i < rounds; i++) cooperative_groups::this_grid().sync();
  if (threadIdx.x == 1u << 20) smem[0] = (int)*arrived + clusters;
}

template <class K>
static cudaError_t launch(K kernel, int clusters, int rounds, unsigned *arrived, float *us) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  cfg.gridDim = dim3((unsigned)(clusters * 16));
  cfg.blockDim = dim3(512);
  cfg.dynamicSmemBytes = 66 * 1024;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 16;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeCooperative;
  attr[1].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  cudaMemset(arrived, 0, 4);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, arrived, rounds, clusters);
  cudaEventRecord(b);
  if (e == cudaSuccess) e = cudaEventSynchronize(b);
  if (e == cudaSuccess) cudaEventElapsedTime(us, a, b), *us *= 1000.0f;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return e;
}

int main() {
  cudaFuncSetAttribute(meet, cudaFuncAttributeMaxDynamicSharedMemorySize, 66 * 1024);
  cudaFuncSetAttribute(meet, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(meet_grid, cudaFuncAttributeMaxDynamicSharedMemorySize, 66 * 1024);
  cudaFuncSetAttribute(meet_grid, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr;
  cfg.gridDim = dim3(16 * 64);
  cfg.blockDim = dim3(512);
  cfg.dynamicSmemBytes = 66 * 1024;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 16;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  cudaOccupancyMaxActiveClusters(&n, meet, &cfg);
  unsigned *arrived;
  cudaMalloc(&arrived, 4);
  printf("max active clusters of 16 x 512 threads, 66 KB: %d\n", n);
  for (int c : {n, n + 1}) {
    float us = 0;
    const cudaError_t e = launch(meet, c, 0, arrived, &us);
    printf("cooperative launch of %d clusters: %s\n", c, cudaGetErrorString(e));
    cudaGetLastError();
  }
  for (int grid = 0; grid < 2; grid++)
    for (int c : {1, 2, 7, n}) {
      std::vector<float> t0, t1;
      for (int rep = 0; rep < 7; rep++) {
        float a = 0, b = 0;
        cudaError_t e = grid ? launch(meet_grid, c, 0, arrived, &a)
                             : launch(meet, c, 0, arrived, &a);
        if (e == cudaSuccess)
          e = grid ? launch(meet_grid, c, 1000, arrived, &b)
                   : launch(meet, c, 1000, arrived, &b);
        if (e != cudaSuccess) {
          printf("%d clusters: %s\n", c, cudaGetErrorString(e));
          cudaGetLastError();
          break;
        }
        t0.push_back(a), t1.push_back(b);
      }
      if (t0.empty()) continue;
      std::sort(t0.begin(), t0.end());
      std::sort(t1.begin(), t1.end());
      printf("%2d clusters: %s %.2f us (kernel %.1f us with 0 rounds)\n", c,
             grid ? "a grid.sync()" : "an all-cluster barrier", (t1[3] - t0[3]) / 1000.0f,
             t0[3]);
    }
  return 0;
}
