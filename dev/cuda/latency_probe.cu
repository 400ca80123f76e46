// Playground: the fixed costs of a small-batch sampling kernel on this GPU,
// replayed in CUDA graphs as `ingot bench` does (20 calls a graph, median of
// replays / 20): an empty launch, a cluster launch, one row of V floats read
// and written by G blocks, with 0-2 grid-wide barriers (a row split over
// more SMs than a cluster holds), each plain, cooperative, or with
// programmatic dependent launch (PDL; timing only: the sampling kernels'
// PDL attempt failed tests/test_sampling_cuda's chained_calls, see
// docs/perf-notes.md, session 5); and how many clusters of the dense
// softmax's shape run at once (`lp occupancy` prints only that). Standalone:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a dev/cuda/latency_probe.cu -o /tmp/lp && /tmp/lp
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
      cudaGraph_t dropped_;                                                       \
      if (cudaStreamEndCapture(s, &dropped_) == cudaSuccess) cudaGraphDestroy(dropped_); \
      cudaGetLastError();                                                         \
      return -1.0;                                                                \
    }                                                                             \
  } while (0)

struct Args {
  const float *in;
  float *out;
  unsigned *counter; /* grid barrier: monotonic arrivals */
  float *partial;    /* one value a block */
  int vocab, barriers, pdl;
};

__device__ __forceinline__ unsigned load_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* Every block arrives once; waits until all blocks of this launch arrived. */
__device__ void grid_barrier(unsigned *counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned old = atomicAdd(counter, 1u);
    const unsigned target = (old / gridDim.x + 1u) * gridDim.x;
    while ((int)(load_acquire(counter) - target) < 0) {
    }
  }
  __syncthreads();
}

__device__ float block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  return v;
}

__global__ void empty_kernel(Args a) {
  if (a.pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (a.pdl) asm volatile("griddepcontrol.launch_dependents;");
}

/* The row [0, vocab) split over the grid: block b owns a contiguous chunk,
 * every value loaded at once (up to 8 float4 a thread), a block max, then
 * `barriers` rounds of (publish, grid barrier, combine all partials), then
 * out = in - max. */
__global__ void __launch_bounds__(512) row_kernel(Args a) {
  if (a.pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (a.pdl) asm volatile("griddepcontrol.launch_dependents;");
  const int per = (a.vocab / gridDim.x + 2047) / 2048 * 2048;
  const int lo = blockIdx.x * per;
  float4 v[8];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const int j = lo + 4 * (threadIdx.x + i * blockDim.x);
    if (j + 3 < a.vocab && j < lo + per)
      v[i] = *reinterpret_cast<const float4 *>(a.in + j);
    else
      v[i] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  }
#pragma unroll
  for (int i = 0; i < 8; i++) m = fmaxf(m, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)));
  m = block_max(m);
  for (int b = 0; b < a.barriers; b++) {
    if (threadIdx.x == 0) a.partial[b * gridDim.x + blockIdx.x] = m;
    grid_barrier(a.counter);
    float x = -INFINITY;
    for (int i = threadIdx.x; i < (int)gridDim.x; i += blockDim.x)
      x = fmaxf(x, a.partial[b * gridDim.x + i]);
    m = block_max(x);
  }
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const int j = lo + 4 * (threadIdx.x + i * blockDim.x);
    if (j + 3 < a.vocab && j < lo + per)
      *reinterpret_cast<float4 *>(a.out + j) =
          make_float4(v[i].x - m, v[i].y - m, v[i].z - m, v[i].w - m);
  }
}

enum Kind { kPlain, kCooperative, kCluster16 };

static double time_graph(void (*kernel)(Args), Args a, int blocks, int threads, Kind kind) {
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return -1.0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (kind == kCooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n++].val.cooperative = 1;
  }
  if (kind == kCluster16) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = 16, attr[n].val.clusterDim.y = 1, attr[n++].val.clusterDim.z = 1;
  }
  if (a.pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  cudaGraph_t g;
  cudaGraphExec_t x;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 20; i++) CK(cudaLaunchKernelEx(&cfg, kernel, a));
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&x, g, 0));
  cudaEvent_t ev[61];
  for (auto &e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < 5; i++) CK(cudaGraphLaunch(x, s));
  CK(cudaEventRecord(ev[0], s));
  for (int i = 0; i < 60; i++) {
    CK(cudaGraphLaunch(x, s));
    CK(cudaEventRecord(ev[i + 1], s));
  }
  CK(cudaStreamSynchronize(s));
  CK(cudaGetLastError());
  std::vector<float> t(60);
  for (int i = 0; i < 60; i++) CK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
  std::sort(t.begin(), t.end());
  for (auto &e : ev) cudaEventDestroy(e);
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return t[30] * 1000.0 / 20.0;
}

int main(int argc, char **argv) {
  (void)argv;
  Args a = {};
  const int V = 151936;
  float *in, *out, *partial;
  unsigned *counter;
  cudaMalloc(&in, V * 4);
  cudaMalloc(&out, V * 4);
  cudaMalloc(&partial, 4096 * 4);
  cudaMalloc(&counter, 4);
  cudaMemset(in, 0, V * 4);
  cudaMemset(counter, 0, 4);
  a.in = in, a.out = out, a.partial = partial, a.counter = counter;
  cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(row_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  /* how many 16-block clusters of the dense softmax's shape (512 threads,
   * 66 KB of shared memory, three blocks an SM) run at once: B = 64 rows
   * take ceil(64 / that) waves */
  for (int smem_kb : {66, 100, 130}) {
    cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1024);
    cfg.blockDim = dim3(512);
    cfg.dynamicSmemBytes = (size_t)smem_kb * 1024;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 16, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    for (int c : {16, 8, 4}) {
      attr.val.clusterDim.x = c;
      int clusters = 0;
      cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, empty_kernel, &cfg);
      printf("clusters of %d x 512 threads, %d KB smem: %d at once (%s)\n", c, smem_kb, clusters,
             cudaGetErrorString(e));
    }
  }
  if (argc > 1) return 0; /* any argument: the occupancy only */
  const char *kinds[] = {"plain", "cooperative", "cluster16"};
  for (int pdl = 0; pdl < 2; pdl++) {
    a.pdl = pdl;
    printf("empty <<<1, 32>>> pdl %d: %.2f us\n", pdl, time_graph(empty_kernel, a, 1, 32, kPlain));
    printf("empty <<<16, 512>>> cluster16 pdl %d: %.2f us\n", pdl,
           time_graph(empty_kernel, a, 16, 512, kCluster16));
    a.vocab = 4096, a.barriers = 0;
    printf("row V=4096 <<<1, 512>>> pdl %d: %.2f us\n", pdl,
           time_graph(row_kernel, a, 1, 512, kPlain));
    a.vocab = V;
    for (int blocks : {16, 32, 64, 128}) {
      for (int k = 0; k < 3; k++) {
        for (int b = 0; b < 3; b++) {
          if (k == kCluster16 && b > 0) continue;
          a.barriers = b;
          printf("row V=%d <<<%d, 512>>> %s barriers %d pdl %d: %.2f us\n", V, blocks, kinds[k], b,
                 pdl, time_graph(row_kernel, a, blocks, 512, (Kind)k));
        }
      }
    }
  }
  return 0;
}
