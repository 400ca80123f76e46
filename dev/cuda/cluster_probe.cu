// Playground: how many clusters of C blocks (512 threads, S bytes of shared
// memory each) this GPU co-schedules. The dense sampling kernel holds a row
// in one cluster's shared memory, so this count is its rows in flight; the
// counts over C also give the sizes of the SM groups (GPCs) a cluster must
// fit in (docs/perf-notes.md, session 18). Where the clusters of the real
// kernel land: dev/stamp_device.sh. Standalone:
//   nvcc -O2 -gencode=arch=compute_90a,code=sm_90a dev/cuda/cluster_probe.cu -o /tmp/cp && /tmp/cp
// Prints cudaOccupancyMaxActiveClusters for C = 1..16 and a few S.
#include <cstdio>

__global__ void noop(int *sink) {
  extern __shared__ int s[];
  if (threadIdx.x == 1u << 20) sink[0] = s[0];
}

static void config(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, unsigned grid, int c,
                   size_t smem) {
  *cfg = cudaLaunchConfig_t{};
  cfg->gridDim = dim3(grid);
  cfg->blockDim = dim3(512);
  cfg->dynamicSmemBytes = smem;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = (unsigned)c;
  attr->val.clusterDim.y = attr->val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
}

int main() {
  cudaFuncSetAttribute(noop, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
  cudaFuncSetAttribute(noop, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  const size_t sizes[] = {200 * 1024, 110 * 1024, 74 * 1024, 66 * 1024, 50 * 1024, 40 * 1024};
  printf("max active clusters (512 threads a block); columns: C, then per S (KB)\n  C");
  for (size_t s : sizes) printf(" %7zu", s / 1024);
  printf("\n");
  for (int c = 1; c <= 16; c++) {
    printf("%3d", c);
    for (size_t s : sizes) {
      cudaLaunchConfig_t cfg;
      cudaLaunchAttribute attr;
      config(&cfg, &attr, (unsigned)(c * 64), c, s);
      int n = -1;
      if (cudaOccupancyMaxActiveClusters(&n, noop, &cfg) != cudaSuccess) cudaGetLastError();
      printf(" %7d", n);
    }
    printf("\n");
  }
  return 0;
}
