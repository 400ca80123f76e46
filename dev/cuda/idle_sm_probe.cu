// Playground: can a row run on the SMs that 16-block clusters leave idle?
// Kernel A stands for the dense softmax at B = 63, V = 262144: 63 clusters of
// 16 blocks (512 threads, 66 KB each, three a SM), each block busy 12 us (a
// row life at B = 64). Kernel B stands for the 64th row in 8 blocks of 1/8 of
// it: one cluster of 8 blocks of 132 KB (or 200 KB), busy 10 us. Both are
// captured on two streams forked from one (a CUDA graph with two parallel
// branches; B launched after A, before A, or after A on a stream of the
// highest priority) and replayed; each block records its SM and its start
// and end (%globaltimer). Per replay: A's span, B's start and end from A's
// start, and whether B shared its SMs with A. H200, session 19: B always on
// SMs 0 1 16 17 32 33 48 49, which A never uses; after A it starts at 25 us
// (once A's last clusters are dispatched), before A at once; priority
// changes nothing; A takes 37.0 us either way (docs/perf-notes.md).
//   nvcc -O2 -gencode=arch=compute_90a,code=sm_90a dev/cuda/idle_sm_probe.cu -o /tmp/isp && /tmp/isp
#include <cstdio>
#include <vector>

struct Stamp {
  unsigned long long start, end;
  unsigned sm;
};

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void busy(Stamp *out, unsigned long long ns) {
  const unsigned long long t0 = now_ns();
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  while (now_ns() - t0 < ns) {
  }
  if (threadIdx.x == 0) out[blockIdx.x] = Stamp{t0, now_ns(), sm};
}

static void launch(cudaStream_t s, Stamp *out, unsigned blocks, unsigned cluster, size_t smem,
                   unsigned long long ns) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(512);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, busy, out, ns);
  if (e != cudaSuccess) printf("launch: %s\n", cudaGetErrorString(e));
}

int main() {
  cudaFuncSetAttribute(busy, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
  cudaFuncSetAttribute(busy, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  const unsigned a_blocks = 63 * 16, b_blocks = 8;
  Stamp *da, *db;
  cudaMalloc(&da, a_blocks * sizeof(Stamp));
  cudaMalloc(&db, b_blocks * sizeof(Stamp));
  std::vector<Stamp> ha(a_blocks), hb(b_blocks);
  cudaStream_t s0, s1, s2;
  int lo = 0, hi = 0;
  cudaDeviceGetStreamPriorityRange(&lo, &hi);
  cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, hi); /* the highest */
  cudaEvent_t fork, join;
  cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
  /* variants: 0 A alone; 1, 2 B (132, 200 KB) launched after A; 3 B (132 KB)
   * launched before A; 4 B (132 KB) after A on a stream of the highest
   * priority */
  const size_t b_smem[5] = {0, 132 * 1024, 200 * 1024, 132 * 1024, 132 * 1024};
  const char *what[5] = {"A alone", "A + B (132 KB) after A", "A + B (200 KB) after A",
                         "A + B (132 KB) before A", "A + B (132 KB) after A, high priority"};
  for (int with_b = 0; with_b < 5; with_b++) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    cudaStream_t sb = with_b == 4 ? s2 : s1;
    cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal);
    cudaEventRecord(fork, s0);
    cudaStreamWaitEvent(sb, fork, 0);
    if (with_b == 3) launch(sb, db, b_blocks, 8, b_smem[with_b], 10000);
    launch(s0, da, a_blocks, 16, 66 * 1024, 12000);
    if (with_b && with_b != 3) launch(sb, db, b_blocks, 8, b_smem[with_b], 10000);
    cudaEventRecord(join, sb);
    cudaStreamWaitEvent(s0, join, 0);
    cudaStreamEndCapture(s0, &g);
    cudaGraphInstantiate(&e, g, 0);
    printf("%s\n", what[with_b]);
    for (int rep = 0; rep < 6; rep++) {
      cudaGraphLaunch(e, s0);
      cudaStreamSynchronize(s0);
      cudaMemcpy(ha.data(), da, a_blocks * sizeof(Stamp), cudaMemcpyDeviceToHost);
      cudaMemcpy(hb.data(), db, b_blocks * sizeof(Stamp), cudaMemcpyDeviceToHost);
      unsigned long long a0 = ~0ull, a1 = 0;
      bool a_sm[1024] = {};
      for (const Stamp &x : ha) {
        a0 = x.start < a0 ? x.start : a0, a1 = x.end > a1 ? x.end : a1;
        a_sm[x.sm & 1023] = true;
      }
      int a_sms = 0;
      for (bool x : a_sm) a_sms += x;
      printf("  A %6.2f us on %d SMs", (a1 - a0) / 1000.0, a_sms);
      if (with_b) {
        unsigned long long b0 = ~0ull, b1 = 0;
        int shared = 0;
        printf("; B on SMs");
        for (const Stamp &x : hb) {
          b0 = x.start < b0 ? x.start : b0, b1 = x.end > b1 ? x.end : b1;
          printf(" %u", x.sm);
          shared += a_sm[x.sm & 1023];
        }
        printf(" (%d of them also ran A); B from A's start: %.2f .. %.2f us", shared,
               ((long long)b0 - (long long)a0) / 1000.0, ((long long)b1 - (long long)a0) / 1000.0);
      }
      printf("\n");
      cudaMemset(db, 0, b_blocks * sizeof(Stamp));
    }
    cudaGraphExecDestroy(e), cudaGraphDestroy(g);
  }
  const cudaError_t err = cudaGetLastError();
  printf("%s\n", err == cudaSuccess ? "no error" : cudaGetErrorString(err));
  return 0;
}
