/*
 * dev playground (not built by CMake, not installed): how fast can a kernel
 * read random 160-byte rows (the PLE fp8 row, D = 160) from pinned host memory
 * over the bus, and from HBM? Copies rows[i] -> out[i] (no conversion) with
 * load variants:
 *   0  plain 16-byte loads, one chunk per thread
 *   1  ld.global.nc (read-only path)
 *   2  ld.global.nc.L2::128B (L2 fetches whole 128-byte lines)
 *   3  ld.global.nc.L2::256B
 *   4  plain loads, 4 chunks in flight per thread
 *   5  L2::128B, 4 chunks in flight per thread
 * Build and run:  nvcc -O3 -arch=sm_90a -o gather_rows dev/cuda/gather_rows.cu && ./gather_rows
 */
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

constexpr int kRowBytes = 160, kChunks = kRowBytes / 16;

template <int V>
__device__ uint4 load16(const uint4 *p) {
  uint4 r;
  if constexpr (V == 0 || V == 4) {
    r = *p;
  } else if constexpr (V == 1) {
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else if constexpr (V == 2 || V == 5) {
    asm volatile("ld.global.nc.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  } else {
    asm volatile("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  }
  return r;
}

template <int V>
__global__ void gather(const uint8_t *table, const int64_t *rows, int64_t n_rows, uint4 *out) {
  constexpr int kIn = (V >= 4) ? 4 : 1;
  int64_t chunks = n_rows * kChunks;
  int64_t stride = (int64_t)gridDim.x * blockDim.x * kIn;
  for (int64_t c0 = (int64_t)blockIdx.x * blockDim.x * kIn + threadIdx.x; c0 < chunks; c0 += stride) {
    uint4 v[kIn];
#pragma unroll
    for (int k = 0; k < kIn; k++) {
      int64_t c = c0 + (int64_t)k * blockDim.x;
      if (c < chunks) {
        int64_t i = c / kChunks, q = c - i * kChunks;
        v[k] = load16<V>(reinterpret_cast<const uint4 *>(table + rows[i] * kRowBytes) + q);
      }
    }
#pragma unroll
    for (int k = 0; k < kIn; k++) {
      int64_t c = c0 + (int64_t)k * blockDim.x;
      if (c < chunks) out[c] = v[k];
    }
  }
}

template <int V>
float time_variant(const uint8_t *table, const int64_t *rows, int64_t n, uint4 *out, int sms) {
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  std::vector<float> t;
  int grid = sms * 16;
  for (int r = 0; r < 25; r++) {
    cudaEventRecord(a);
    gather<V><<<grid, 128>>>(table, rows, n, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (r >= 5) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Pinned host table of `bytes`: cudaHostAlloc, or (huge = 1) an aligned
// allocation advised to use transparent huge pages, then registered.
static uint8_t *host_table(size_t bytes, int huge) {
  void *p = nullptr;
  if (!huge) {
    if (cudaHostAlloc(&p, bytes, cudaHostAllocMapped) != cudaSuccess) return nullptr;
  } else {
    if (posix_memalign(&p, 1 << 21, bytes)) return nullptr;
    madvise(p, bytes, MADV_HUGEPAGE);
    memset(p, 1, bytes);  // fault the pages in (huge where the kernel can)
    if (cudaHostRegister(p, bytes, cudaHostRegisterMapped) != cudaSuccess) return nullptr;
  }
  for (size_t i = 0; i < bytes; i += 4096) static_cast<uint8_t *>(p)[i] = 1;
  return static_cast<uint8_t *>(p);
}

int main() {
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char thp[128] = "?";
  if (f) { if (!fgets(thp, sizeof thp, f)) thp[0] = 0; fclose(f); }
  printf("THP: %s", thp);
  const int64_t n = 65536;
  std::vector<int64_t> h(n);
  uint64_t s = 12345;
  for (auto &x : h) { s = s * 6364136223846793005ull + 1442695040888963407ull; x = (int64_t)(s >> 20); }
  int64_t *rows;
  uint4 *out;
  CK(cudaMalloc(&rows, n * 8));
  CK(cudaMalloc(&out, n * kRowBytes));
  for (int64_t R : {1LL << 18, 1LL << 21, 1LL << 24, 1LL << 26}) {
    for (int huge = 0; huge < 2; huge++) {
      uint8_t *tab = host_table(R * kRowBytes, huge);
      if (!tab) { printf("R=%lld huge=%d: allocation failed\n", (long long)R, huge); continue; }
      std::vector<int64_t> hr = h;
      for (auto &x : hr) x %= R;
      cudaMemcpy(rows, hr.data(), n * 8, cudaMemcpyHostToDevice);
      float t0 = time_variant<0>(tab, rows, n, out, p.multiProcessorCount);
      float t4 = time_variant<4>(tab, rows, n, out, p.multiProcessorCount);
      printf("host table %6.2f GB (%s): 65536 random rows: plain %7.1f GB/s, 4-in-flight %7.1f GB/s\n",
             R * kRowBytes / 1e9, huge ? "THP + cudaHostRegister" : "cudaHostAlloc",
             n * kRowBytes / (t0 * 1e6), n * kRowBytes / (t4 * 1e6));
      if (huge) { cudaHostUnregister(tab); free(tab); } else cudaFreeHost(tab);
    }
  }
  CK(cudaGetLastError());
  return 0;
}
