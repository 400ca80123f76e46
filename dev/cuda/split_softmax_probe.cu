// dev playground (not in the library or CTest): a temperature softmax split
// over the whole GPU for small batches, exact in the library's sense (the
// row maximum first, then the mass of e^((x - max) / T) in fixed point, so
// the bits do not depend on the split), as THREE kernels chained by
// programmatic dependent launch:
//   1. each (row, chunk) block: the chunk's argmax key -> keys[row][chunk]
//   2. each block loads its chunk BEFORE waiting for 1 (the logits are ready
//      once 1 has passed its own wait), then the row's maximum from keys,
//      the chunk's fixed-point mass -> mass[row][chunk]
//   3. each block loads its chunk and the maximum before waiting for 2 (2
//      passed its wait: 1 is complete), then the row's mass, the writes.
// f32 logits, V a multiple of 4, no masks: the timing of the structure,
// against the library's one-cluster-a-row kernel (ingot bench: 5.11 us at
// B = 1, V = 151936 on the H200). Session 27 wrote a TWO-kernel form (k_stats,
// k_write2 below), session 28 ran both (docs/perf-notes.md: H100, 4.28 against
// 3.80 us at B = 1; thread_best as here) and then moved the kernels' other
// shared steps into helpers (session 29 ran them on an H100: 4.27 / 3.78 us).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//     dev/cuda/split_softmax_probe.cu -o build/split_softmax_probe
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "graph_timing.cuh"

constexpr int kThreads = 256;
constexpr float kUnit = 0x1p40f;

struct Args {
  const float *x;
  float *p;
  unsigned long long *keys, *mass;
  int V, chunk, nch;
  float T;
};

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_go() { asm volatile("griddepcontrol.launch_dependents;"); }

__device__ __forceinline__ unsigned long long key_of(float v, int id) {
  uint32_t u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : u | 0x80000000u;
  return ((unsigned long long)u << 32) | (uint32_t)~id;
}
__device__ __forceinline__ float value_of(unsigned long long k) {
  uint32_t u = (uint32_t)(k >> 32);
  u = (u & 0x80000000u) ? u & 0x7fffffffu : ~u;
  return __uint_as_float(u);
}

template <bool kMax>
__device__ unsigned long long block_fold(unsigned long long v) {
  __shared__ unsigned long long part[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? (w > v ? w : v) : v + w;
  }
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  v = part[0];
  for (int i = 1; i < kThreads / 32; i++) v = kMax ? (part[i] > v ? part[i] : v) : v + part[i];
  return v;
}

struct Chunk {
  int row, c, lo, n;
};
__device__ __forceinline__ Chunk chunk_of(const Args &a) {
  Chunk k;
  k.row = blockIdx.x / a.nch, k.c = blockIdx.x % a.nch;
  k.lo = k.c * a.chunk;
  k.n = min(a.chunk, a.V - k.lo);
  return k;
}

template <int kMaxGroups>
__device__ __forceinline__ void load(const Args &a, const Chunk &k, float4 v[kMaxGroups]) {
  const float *row = a.x + (size_t)k.row * a.V + k.lo;
#pragma unroll
  for (int g = 0; g < kMaxGroups; g++) {
    const int j = 4 * threadIdx.x + g * 4 * kThreads;
    v[g] = j < k.n ? *reinterpret_cast<const float4 *>(row + j)
                   : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  }
}

/* the row's maximum: keys of every chunk, folded */
__device__ __forceinline__ float row_max(const Args &a, const Chunk &k) {
  unsigned long long best = 0;
  for (int i = threadIdx.x; i < a.nch; i += kThreads) {
    const unsigned long long q = a.keys[(size_t)k.row * a.nch + i];
    best = q > best ? q : best;
  }
  return value_of(block_fold<true>(best));
}

template <int kMaxGroups>
__device__ __forceinline__ void weights(const Args &a, float m, float4 v[kMaxGroups]) {
  const float inv_t = 1.0f / a.T;
#pragma unroll
  for (int g = 0; g < kMaxGroups; g++) {
    v[g].x = __expf((v[g].x - m) * inv_t), v[g].y = __expf((v[g].y - m) * inv_t);
    v[g].z = __expf((v[g].z - m) * inv_t), v[g].w = __expf((v[g].w - m) * inv_t);
  }
}

/* the thread's argmax key over its groups (0: none finite) */
template <int kMaxGroups>
__device__ __forceinline__ unsigned long long thread_best(const Chunk &k,
                                                          const float4 v[kMaxGroups]) {
  unsigned long long best = 0;
#pragma unroll
  for (int g = 0; g < kMaxGroups; g++) {
    const int j = k.lo + 4 * threadIdx.x + g * 4 * kThreads;
    const float e[4] = {v[g].x, v[g].y, v[g].z, v[g].w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const unsigned long long q = e[i] > -INFINITY ? key_of(e[i], j + i) : 0ull;
      best = q > best ? q : best;
    }
  }
  return best;
}

/* After the wait: the block's chunk into v, and the chunk's argmax key
 * (valid in thread 0: block_fold) */
template <int kMaxGroups>
__device__ __forceinline__ unsigned long long load_and_fold(const Args &a, const Chunk &k,
                                                            float4 v[kMaxGroups]) {
  pdl_wait();
  pdl_go();
  load<kMaxGroups>(a, k, v);
  return block_fold<true>(thread_best<kMaxGroups>(k, v));
}

/* The chunk into v BEFORE the wait (the kernel before has waited for the
 * logits), then the wait. */
template <int kMaxGroups>
__device__ __forceinline__ void load_then_wait(const Args &a, const Chunk &k,
                                               float4 v[kMaxGroups]) {
  load<kMaxGroups>(a, k, v);
  pdl_wait();
  pdl_go();
}

/* The block's fixed-point mass of its weights v (valid in thread 0) */
template <int kMaxGroups>
__device__ __forceinline__ unsigned long long chunk_mass(const float4 v[kMaxGroups]) {
  unsigned long long s = 0;
#pragma unroll
  for (int g = 0; g < kMaxGroups; g++)
    s += __float2ull_rn(((v[g].x + v[g].y) + (v[g].z + v[g].w)) * kUnit);
  return block_fold<false>(s);
}

template <int kMaxGroups>
__global__ void __launch_bounds__(kThreads) k_max(const Args a) {
  const Chunk k = chunk_of(a);
  float4 v[kMaxGroups];
  const unsigned long long best = load_and_fold<kMaxGroups>(a, k, v);
  if (threadIdx.x == 0) a.keys[blockIdx.x] = best;
}

template <int kMaxGroups>
__global__ void __launch_bounds__(kThreads) k_mass(const Args a) {
  const Chunk k = chunk_of(a);
  float4 v[kMaxGroups];
  load_then_wait<kMaxGroups>(a, k, v); /* k_max waited for the logits */
  weights<kMaxGroups>(a, row_max(a, k), v);
  const unsigned long long s = chunk_mass<kMaxGroups>(v);
  if (threadIdx.x == 0) a.mass[blockIdx.x] = s;
}

/* p = w * inv_z of the block's chunk */
template <int kMaxGroups>
__device__ __forceinline__ void store_chunk(const Args &a, const Chunk &k,
                                            const float4 v[kMaxGroups], float inv_z) {
  float *out = a.p + (size_t)k.row * a.V + k.lo;
#pragma unroll
  for (int g = 0; g < kMaxGroups; g++) {
    const int j = 4 * threadIdx.x + g * 4 * kThreads;
    if (j < k.n)
      *reinterpret_cast<float4 *>(out + j) =
          make_float4(v[g].x * inv_z, v[g].y * inv_z, v[g].z * inv_z, v[g].w * inv_z);
  }
}

template <int kMaxGroups>
__global__ void __launch_bounds__(kThreads) k_write(const Args a) {
  const Chunk k = chunk_of(a);
  float4 v[kMaxGroups];
  load<kMaxGroups>(a, k, v);
  weights<kMaxGroups>(a, row_max(a, k), v); /* k_mass passed its wait: k_max is complete */
  pdl_wait();
  pdl_go();
  unsigned long long z = 0;
  for (int i = threadIdx.x; i < a.nch; i += kThreads) z += a.mass[(size_t)k.row * a.nch + i];
  z = block_fold<false>(z);
  const float inv_z = (float)((double)kUnit / (double)z);
  store_chunk<kMaxGroups>(a, k, v, inv_z);
}

/* The TWO-kernel form (session 27), the shape of the split Triton softmax:
 *   A. each block: its chunk's maximum m_c (as a key) and its mass relative to
 *      it, sum of e^((x - m_c) / T) in fixed point -> keys, mass;
 *   B. each block loads its chunk before its wait, then the row's maximum M
 *      and Z = sum_c mass_c e^((m_c - M) / T) (double), and writes
 *      e^((x - M) / T) / Z.
 * Its Z depends on the chunks (each chunk's terms are rounded relative to its
 * own maximum), so a library form would need chunks fixed by V (canonical
 * segments, also in the dense kernel) to keep a row's bits batch-invariant. */
template <int kMaxGroups>
__global__ void __launch_bounds__(kThreads) k_stats(const Args a) {
  const Chunk k = chunk_of(a);
  float4 v[kMaxGroups];
  const unsigned long long best = load_and_fold<kMaxGroups>(a, k, v);
  __shared__ unsigned long long top;
  if (threadIdx.x == 0) top = best;
  __syncthreads();
  const float mc = value_of(top);
  weights<kMaxGroups>(a, mc, v);
  const unsigned long long s = chunk_mass<kMaxGroups>(v);
  if (threadIdx.x == 0) a.keys[blockIdx.x] = top, a.mass[blockIdx.x] = s;
}

template <int kMaxGroups>
__global__ void __launch_bounds__(kThreads) k_write2(const Args a) {
  const Chunk k = chunk_of(a);
  float4 v[kMaxGroups];
  load_then_wait<kMaxGroups>(a, k, v); /* k_stats waited for the logits */
  const float m = row_max(a, k);
  double z = 0;
  const double inv_t = 1.0 / (double)a.T;
  for (int i = threadIdx.x; i < a.nch; i += kThreads) {
    const size_t e = (size_t)k.row * a.nch + i;
    z += (double)a.mass[e] * exp(((double)value_of(a.keys[e]) - m) * inv_t);
  }
  __shared__ double zs[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
  if ((threadIdx.x & 31) == 0) zs[threadIdx.x >> 5] = z;
  __syncthreads();
  z = 0;
  for (int i = 0; i < kThreads / 32; i++) z += zs[i];
  weights<kMaxGroups>(a, m, v);
  const float inv_z = (float)((double)kUnit / z);
  store_chunk<kMaxGroups>(a, k, v, inv_z);
}

static cudaError_t launch(void (*kern)(const Args), const Args &a, int blocks, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(kThreads), cfg.stream = s;
  cfg.attrs = attr, cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kern, a);
}

/* one softmax: the three kernels (or the two of the two-kernel form), for
 * `groups` float4 groups a thread */
static bool two_kernels = false;
template <int G>
static cudaError_t call_g(const Args &a, int blocks, cudaStream_t s) {
  if (two_kernels) {
    cudaError_t e = launch(k_stats<G>, a, blocks, s);
    return e == cudaSuccess ? launch(k_write2<G>, a, blocks, s) : e;
  }
  cudaError_t e = launch(k_max<G>, a, blocks, s);
  if (e == cudaSuccess) e = launch(k_mass<G>, a, blocks, s);
  if (e == cudaSuccess) e = launch(k_write<G>, a, blocks, s);
  return e;
}
static cudaError_t call(int groups, const Args &a, int blocks, cudaStream_t s) {
  switch (groups) {
    case 1: return call_g<1>(a, blocks, s);
    case 2: return call_g<2>(a, blocks, s);
    case 3: return call_g<3>(a, blocks, s);
    case 4: return call_g<4>(a, blocks, s);
    case 5: return call_g<5>(a, blocks, s);
    case 6: return call_g<6>(a, blocks, s);
    case 7: return call_g<7>(a, blocks, s);
    default: return call_g<8>(a, blocks, s);
  }
}

int main() {
  const int V = 151936, Bmax = 16, calls = 20;
  std::vector<float> h((size_t)Bmax * V), hp((size_t)Bmax * V);
  uint64_t r = 88172645463325252ull;
  for (auto &e : h) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    e = 3.0f * ((float)(r >> 40) / 16777216.0f - 0.5f) * 3.4f;
  }
  float *x, *p;
  unsigned long long *keys, *mass;
  CHECK(cudaMalloc(&x, h.size() * 4));
  CHECK(cudaMalloc(&p, h.size() * 4));
  CHECK(cudaMalloc(&keys, Bmax * 1024 * 8));
  CHECK(cudaMalloc(&mass, Bmax * 1024 * 8));
  CHECK(cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int kernels : {3, 2}) {
  two_kernels = kernels == 2;
  printf("split softmax, V = %d, %d kernels chained by PDL, %d calls a graph\n", V, kernels,
         calls);
  printf("%3s %5s %6s %7s %9s %12s\n", "B", "nch", "chunk", "blocks", "us/call", "max rel err");
  for (int B : {1, 2, 4}) {
    for (int nch : {66, 132, 264}) {
      if (B * nch > 4096) continue;
      Args a = {x, p, keys, mass, V, 0, 0, 0.8f};
      a.chunk = ((V + nch - 1) / nch + 3) / 4 * 4;
      a.nch = (V + a.chunk - 1) / a.chunk;
      const int groups = (a.chunk + 4 * kThreads - 1) / (4 * kThreads);
      if (groups > 8) continue;
      const int blocks = B * a.nch;
      CHECK(call(groups, a, blocks, s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaMemcpy(hp.data(), p, (size_t)B * V * 4, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (int b = 0; b < B; b++) {
        const float *xr = h.data() + (size_t)b * V;
        double m = -INFINITY, z = 0;
        for (int i = 0; i < V; i++) m = fmax(m, (double)xr[i]);
        for (int i = 0; i < V; i++) z += exp(((double)xr[i] - m) / 0.8);
        for (int i = 0; i < V; i++) {
          const double want = exp(((double)xr[i] - m) / 0.8) / z;
          if (want > 1e-6) worst = fmax(worst, fabs(hp[(size_t)b * V + i] - want) / want);
        }
      }
      cudaGraph_t g;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < calls; i++) {
        CHECK(call(groups, a, blocks, s));
      }
      CHECK(cudaStreamEndCapture(s, &g));
      cudaGraphExec_t exec;
      CHECK(cudaGraphInstantiate(&exec, g, 0));
      const float us = median_replay_us(exec, s, 5, 50, calls);
      printf("%3d %5d %6d %7d %9.2f %12.2e\n", B, a.nch, a.chunk, blocks, us, worst);
      CHECK(cudaGraphExecDestroy(exec));
      CHECK(cudaGraphDestroy(g));
    }
  }
  }
  return 0;
}
