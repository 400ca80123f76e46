// dev playground (not in the library or CTest): what bounds a softmax of
// B = 64 rows of V = 262144 f32 (session 27)? Every softmax variant runs the
// same block: 512 threads, three a SM, a 64 KB chunk of a row copied into
// shared memory, the chunk's maximum, an exchange of a row's 16 maxima,
// w = 2^((x - m) k) kept in place and summed, an exchange of the 16 sums,
// p = w / Z written. Not the library's exact arithmetic, the same traffic.
// What differs:
//   cluster  : a 16-block cluster a row, the values read from the peers'
//              shared memory after a cluster barrier (the library's shape,
//              with its older exchange);
//   global   : 1024 plain blocks, row = blockIdx / 16, the values through
//              global memory (a store, a release add on the row's counter, an
//              acquire poll): three blocks on EVERY SM, a block starts as soon
//              as a slot frees. Safe only if blocks start in index order (a
//              row's blocks wait for each other), which CUDA does not promise;
//   ticket   : global, a block's (row, chunk) from an atomic ticket, so that
//              it waits only for blocks that have started: the safe form;
//   +tmaL/S  : the chunk loaded (L) by 16 bulk copies of 4 KB (TMA) and / or
//              the probabilities stored (S) by bulk copies from shared memory;
//   cluster1 : cluster, with ONE exchange: each block's maximum and its mass
//              relative to it, combined once (session 28);
//   reg/reg1 : cluster / cluster1 with 256-thread blocks, four a SM, a quarter
//              of each chunk in registers (session 28); reg5/reg5_1: five a
//              SM, 6144 of the 16384 tokens in registers;
//   copy     : the same blocks, loads and stores, no arithmetic, no exchange;
//   plain    : a grid-stride float4 copy of the same bytes: the copy rate of
//              this size in this harness (graph replays of 10 calls, PDL).
// Counters clean themselves (the last user of a call puts them back to 0).
// H200: docs/perf-notes.md, session 27; H100 (cluster1, reg*): session 28.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a
//     dev/cuda/exchange_probe.cu -o build/exchange_probe
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "graph_timing.cuh"

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
constexpr int kC = 16;
constexpr int kChunk = 16384;
constexpr int kSmem = kChunk * 4;
enum Exchange { kCluster, kGlobal, kTicket, kCopy, kCluster1 };

struct Args {
  const float *x;
  float *p;
  float *part;       /* [B][16][2] */
  unsigned *cnt;     /* [B] */
  unsigned *ticket;  /* [1] */
  int B, V;
  float k;           /* log2(e) / T */
};

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_go() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void red_release(unsigned *p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <bool kMax>
__device__ __forceinline__ float warp_fold(float v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, u) : v + u;
  }
  return v;
}

/* the block's value -> warp 0 lane 0 (others: garbage) */
template <bool kMax, int kW = kThreads / 32>
__device__ __forceinline__ float block_fold(float v, float *red) {
  v = warp_fold<kMax>(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = threadIdx.x < kW ? red[threadIdx.x] : (kMax ? -INFINITY : 0.f);
  if (threadIdx.x < 32) v = warp_fold<kMax>(v);
  return v;
}

/* the row's value from the 16 blocks' ones; every thread gets it */
template <int kV, bool kMax, int kR = kC, int kW = kThreads / 32>
__device__ __forceinline__ float exchange(const Args &a, int row, int c, int phase, float v,
                                          float *red, float *xch) {
  v = block_fold<kMax, kW>(v, red);
  if (kV == kCluster) {
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) xch[phase] = v;
    cl.sync();
    if (threadIdx.x < 32) {
      float u = threadIdx.x < kC ? *cl.map_shared_rank(&xch[phase], threadIdx.x)
                                 : (kMax ? -INFINITY : 0.f);
      u = warp_fold<kMax>(u);
      if (threadIdx.x == 0) red[16] = u;
    }
  } else {
    float *slots = a.part + ((size_t)row * kR) * 2 + phase * kR;
    if (threadIdx.x == 0) {
      slots[c] = v;
      red_release(&a.cnt[row], 1);
    }
    if (threadIdx.x < 32) {
      const unsigned want = kR * (phase + 1);
      if (threadIdx.x == 0) {
        long long spins = 0;
        while (ld_acquire(&a.cnt[row]) < want)
          if (++spins > (1ll << 26)) __trap(); /* a probe must not hang the device */
      }
      __syncwarp();
      float u = threadIdx.x < kR ? __ldcg(&slots[threadIdx.x]) : (kMax ? -INFINITY : 0.f);
      u = warp_fold<kMax>(u);
      if (threadIdx.x == 0) red[16] = u;
    }
  }
  __syncthreads();
  return red[16];
}

/* the chunk -> shared memory: cp.async of 16 bytes a thread (kBulk = 0), or
 * 16 bulk copies of 4 KB (TMA) completing a transaction count on *bar */
template <int kBulk>
__device__ __forceinline__ void load_chunk(const float *src, float *sv, uint64_t *bar) {
  if (kBulk) {
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    if (threadIdx.x < 16) {
      if (threadIdx.x == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b),
                     "r"(kSmem)
                     : "memory");
      __syncwarp(0xffffu);
      const int j = threadIdx.x * (kChunk / 16);
      const unsigned d = (unsigned)__cvta_generic_to_shared(sv + j);
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];" ::"r"(d),
          "l"(src + j), "n"(kSmem / 16), "r"(b)
          : "memory");
    }
    asm volatile(
        "{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0; @!p bra W; }" ::
            "r"(b)
        : "memory");
  } else {
#pragma unroll
    for (int j = threadIdx.x * 4; j < kChunk; j += kThreads * 4) {
      const unsigned d = (unsigned)__cvta_generic_to_shared(sv + j);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src + j)
                   : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
  }
}

/* p = w * inv from shared memory: st.global (kBulk = 0), or written in place
 * and sent by 16 bulk stores, read out before the block leaves */
template <int kBulk>
__device__ __forceinline__ void store_chunk(float *dst, float *sv, float inv) {
  float4 *s4 = reinterpret_cast<float4 *>(sv);
  float4 *out = reinterpret_cast<float4 *>(dst);
#pragma unroll
  for (int j = threadIdx.x; j < kChunk / 4; j += kThreads) {
    const float4 v = s4[j];
    const float4 q = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
    if (kBulk)
      s4[j] = q;
    else
      __stcs(out + j, q);
  }
  if (kBulk) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x < 16) {
      const int j = threadIdx.x * (kChunk / 16);
      const unsigned d = (unsigned)__cvta_generic_to_shared(sv + j);
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + j),
                   "r"(d), "n"(kSmem / 16)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
  }
}

/* w = 2^((x - m) k) = 2^(x k - mk) of four values */
__device__ __forceinline__ float4 weight4(float4 v, float k, float mk) {
  v.x = exp2f(fmaf(v.x, k, -mk)), v.y = exp2f(fmaf(v.y, k, -mk));
  v.z = exp2f(fmaf(v.z, k, -mk)), v.w = exp2f(fmaf(v.w, k, -mk));
  return v;
}

/* weight4 in place over n4 float4 of shared memory; the thread's sum */
template <int kThr>
__device__ __forceinline__ float weights_in_place(float4 *s4, int n4, float k, float m) {
  float s = 0.f;
#pragma unroll
  for (int j = threadIdx.x; j < n4; j += kThr) {
    const float4 v = weight4(s4[j], k, m * k);
    s4[j] = v;
    s += (v.x + v.y) + (v.z + v.w);
  }
  return s;
}

/* The one exchange: the block's maximum m and its sum s of 2^((x - m) k)
 * (block-folded here) through the cluster; returns 2^((m - M) k) / Z, the
 * factor of the block's weights. */
template <int kW>
__device__ __forceinline__ float combine_pairs(const Args &a, float m, float s, float *red,
                                               float *xch) {
  s = block_fold<false, kW>(s, red);
  cg::cluster_group cl = cg::this_cluster();
  if (threadIdx.x == 0) xch[0] = m, xch[1] = s;
  cl.sync();
  if (threadIdx.x < 32) {
    const int q = threadIdx.x < kC ? threadIdx.x : 0;
    const float mq = *cl.map_shared_rank(&xch[0], q);
    const float sq = *cl.map_shared_rank(&xch[1], q);
    const float M = warp_fold<true>(mq);
    float z = threadIdx.x < kC ? sq * exp2f((mq - M) * a.k) : 0.f;
    z = warp_fold<false>(z);
    if (threadIdx.x == 0) red[16] = exp2f((m - M) * a.k) / z;
  }
  __syncthreads();
  return red[16];
}

/* ONE exchange a row (kCluster1): the block's maximum m_b (a block fold),
 * w = 2^((x - m_b) k) in place and its sum s_b, then the 16 pairs (m_b, s_b)
 * through the cluster at once: M = max m_b, Z = sum s_b 2^((m_b - M) k), and
 * p = w 2^((m_b - M) k) / Z. One cluster barrier before the writes instead of
 * two (the online softmax's combine at block level). */
__device__ __forceinline__ void one_exchange(const Args &a, float m, float4 *s4, float *red,
                                             float *xch, float *dst) {
  m = block_fold<true>(m, red);
  if (threadIdx.x == 0) red[16] = m;
  __syncthreads();
  m = red[16];
  const float s = weights_in_place<kThreads>(s4, kChunk / 4, a.k, m);
  __syncthreads(); /* red[16] read by all before block_fold reuses red */
  const float inv = combine_pairs<kThreads / 32>(a, m, s, red, xch);
  store_chunk<0>(dst, reinterpret_cast<float *>(s4), inv);
  cg::this_cluster().sync(); /* the peers read xch */
}

template <int kV, int kLoad, int kStore>
__device__ __forceinline__ void item(const Args &a, int row, int c, float *sv, float *red,
                                     float *xch, uint64_t *bar) {
  const float *src = a.x + (size_t)row * a.V + (size_t)c * kChunk;
  float *dst = a.p + (size_t)row * a.V + (size_t)c * kChunk;
  load_chunk<kLoad>(src, sv, bar);
  if (kV == kCopy) {
    store_chunk<kStore>(dst, sv, 1.f);
    return;
  }
  float4 *s4 = reinterpret_cast<float4 *>(sv);
  float m = -INFINITY;
#pragma unroll
  for (int j = threadIdx.x; j < kChunk / 4; j += kThreads) {
    const float4 v = s4[j];
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  if (kV == kCluster1) {
    one_exchange(a, m, s4, red, xch, dst);
    return;
  }
  m = exchange<kV, true>(a, row, c, 0, m, red, xch);
  const float s = weights_in_place<kThreads>(s4, kChunk / 4, a.k, m);
  store_chunk<kStore>(dst, sv, 1.f / exchange<kV, false>(a, row, c, 1, s, red, xch));
  if (kV == kCluster) {
    cg::this_cluster().sync(); /* the peers read xch */
  } else if (threadIdx.x == 0) {
    /* leave: the row's last block to leave puts the counter back to 0 */
    if (atomicAdd(&a.cnt[row], 1) == 3 * kC - 1) atomicExch(&a.cnt[row], 0);
  }
}

template <int kV, int kLoad, int kStore>
__global__ void __launch_bounds__(kThreads, 3) probe(const Args a) {
  extern __shared__ float4 smem[];
  __shared__ float red[17];
  __shared__ float xch[2];
  __shared__ int tk;
  __shared__ uint64_t bar;
  float *sv = reinterpret_cast<float *>(smem);
  if (kLoad && threadIdx.x == 0) {
    const unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (kLoad) __syncthreads();
  pdl_wait(), pdl_go();
  int i = blockIdx.x;
  if (kV == kTicket) {
    if (threadIdx.x == 0) {
      tk = (int)atomicAdd(a.ticket, 1u);
      if (tk == (int)gridDim.x - 1) atomicExch(a.ticket, 0u); /* every ticket is taken */
    }
    __syncthreads();
    i = tk;
  }
  item<kV, kLoad, kStore>(a, i / kC, i % kC, sv, red, xch, &bar);
}

/* PART OF THE CHUNK IN REGISTERS (session 28): 256-thread blocks, four a SM,
 * each holding the first 4096 tokens of its 16384 in registers (four float4 a
 * thread) and the other 12288 in 48 KB of shared memory, so that 4 x 64 KB of
 * a row's chunks live on a SM instead of 3: more rows in flight. The same
 * arithmetic as cluster (two exchanges) or cluster1 (kOne: one). */
constexpr int kRThreads = 256;
constexpr int reg_smem(int groups) { return (kChunk - 4 * groups * kRThreads) * 4; }

template <bool kOne, int kRGroups, int kBlocks>
__global__ void __launch_bounds__(kRThreads, kBlocks) probe_reg(const Args a) {
  constexpr int kW = kRThreads / 32;
  constexpr int kRegTokens = 4 * kRGroups * kRThreads, kSmemTokens = kChunk - kRegTokens;
  extern __shared__ float4 smem[];
  __shared__ float red[17];
  __shared__ float xch[2];
  float4 *s4 = smem;
  pdl_wait(), pdl_go();
  const int row = blockIdx.x / kC, c = blockIdx.x % kC;
  const float *src = a.x + (size_t)row * a.V + (size_t)c * kChunk;
  float *dst = a.p + (size_t)row * a.V + (size_t)c * kChunk;
#pragma unroll
  for (int j = threadIdx.x * 4; j < kSmemTokens; j += kRThreads * 4) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(reinterpret_cast<float *>(s4) + j);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d),
                 "l"(src + kRegTokens + j)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  float4 r[kRGroups];
#pragma unroll
  for (int g = 0; g < kRGroups; g++)
    r[g] = __ldcs(reinterpret_cast<const float4 *>(src) + threadIdx.x + g * kRThreads);
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  float m = -INFINITY;
#pragma unroll
  for (int g = 0; g < kRGroups; g++) m = fmaxf(m, fmaxf(fmaxf(r[g].x, r[g].y), fmaxf(r[g].z, r[g].w)));
#pragma unroll
  for (int j = threadIdx.x; j < kSmemTokens / 4; j += kRThreads) {
    const float4 v = s4[j];
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  cg::cluster_group cl = cg::this_cluster();
  if (kOne) {
    m = block_fold<true, kW>(m, red);
    if (threadIdx.x == 0) red[16] = m;
    __syncthreads();
    m = red[16];
  } else {
    m = exchange<kCluster, true, kC, kW>(a, row, c, 0, m, red, xch);
  }
  float s = 0.f;
#pragma unroll
  for (int g = 0; g < kRGroups; g++) {
    r[g] = weight4(r[g], a.k, m * a.k);
    s += (r[g].x + r[g].y) + (r[g].z + r[g].w);
  }
  s += weights_in_place<kRThreads>(s4, kSmemTokens / 4, a.k, m);
  float inv;
  if (kOne) {
    __syncthreads(); /* red[16] read by all before block_fold reuses red */
    inv = combine_pairs<kW>(a, m, s, red, xch);
  } else {
    inv = 1.f / exchange<kCluster, false, kC, kW>(a, row, c, 1, s, red, xch);
  }
  float4 *out = reinterpret_cast<float4 *>(dst);
#pragma unroll
  for (int g = 0; g < kRGroups; g++)
    __stcs(out + threadIdx.x + g * kRThreads,
           make_float4(r[g].x * inv, r[g].y * inv, r[g].z * inv, r[g].w * inv));
  out += kRegTokens / 4;
#pragma unroll
  for (int j = threadIdx.x; j < kSmemTokens / 4; j += kRThreads) {
    const float4 v = s4[j];
    __stcs(out + j, make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv));
  }
  cl.sync(); /* the peers read xch */
}

/* the copy rate: a grid-stride float4 copy, 4 loads in flight a thread */
__global__ void __launch_bounds__(kThreads) plain_copy(const Args a) {
  pdl_wait(), pdl_go();
  const size_t n4 = (size_t)a.B * a.V / 4, step = (size_t)gridDim.x * kThreads;
  const float4 *x = reinterpret_cast<const float4 *>(a.x);
  float4 *p = reinterpret_cast<float4 *>(a.p);
  for (size_t i = blockIdx.x * (size_t)kThreads + threadIdx.x; i < n4; i += 4 * step) {
    float4 v[4];
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = i + k * step < n4 ? __ldcs(x + i + k * step) : float4{};
#pragma unroll
    for (int k = 0; k < 4; k++)
      if (i + k * step < n4) __stcs(p + i + k * step, v[k]);
  }
}

struct VariantDesc {
  const char *name;
  void (*k)(const Args);
  bool cluster, plain;
  int threads = kThreads, smem = kSmem;
};
static const VariantDesc kVariants[] = {
    {"cluster", probe<kCluster, 0, 0>, true, false},
    {"cluster1", probe<kCluster1, 0, 0>, true, false},
    {"reg", probe_reg<false, 4, 4>, true, false, kRThreads, reg_smem(4)},
    {"reg1", probe_reg<true, 4, 4>, true, false, kRThreads, reg_smem(4)},
    {"reg5", probe_reg<false, 6, 5>, true, false, kRThreads, reg_smem(6)},
    {"reg5_1", probe_reg<true, 6, 5>, true, false, kRThreads, reg_smem(6)},
    {"global", probe<kGlobal, 0, 0>, false, false},
    {"ticket", probe<kTicket, 0, 0>, false, false},
    {"cl+tmaL", probe<kCluster, 1, 0>, true, false},
    {"copy", probe<kCopy, 0, 0>, false, false},
    {"plain", plain_copy, false, true},
};
constexpr int kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);

static cudaError_t launch(int v, const Args &a, int sms, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  int n = 0;
  cfg.blockDim = dim3(kVariants[v].threads), cfg.dynamicSmemBytes = kVariants[v].smem;
  cfg.stream = s;
  cfg.gridDim = dim3(a.B * kC);
  if (kVariants[v].plain) cfg.gridDim = dim3(4 * sms), cfg.dynamicSmemBytes = 0;
  attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[n++].val.programmaticStreamSerializationAllowed = 1;
  if (kVariants[v].cluster) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = kC, attr[n].val.clusterDim.y = 1, attr[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr, cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kVariants[v].k, a);
}

int main() {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int V = kC * kChunk, Bmax = 128, calls = 10;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int v = 0; v < kNumVariants; v++) {
    const void *k = (const void *)kVariants[v].k;
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kVariants[v].smem));
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    if (!kVariants[v].cluster) continue;
    /* how many 16-block clusters (rows) run at once */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr;
    cfg.gridDim = dim3(64 * kC), cfg.blockDim = dim3(kVariants[v].threads);
    cfg.dynamicSmemBytes = kVariants[v].smem;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kC, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    int clusters = 0, per_sm = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, kVariants[v].k, &cfg));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kVariants[v].k,
                                                        kVariants[v].threads, kVariants[v].smem));
    printf("%-9s %d blocks a SM, %d clusters at once\n", kVariants[v].name, per_sm, clusters);
  }
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kVariants[0].k, kThreads, kSmem));
  printf("SMs %d, blocks a SM %d, V = %d\n", sms, per_sm, V);
  const size_t n = (size_t)Bmax * V;
  std::vector<float> hx(n);
  uint32_t st = 12345u;
  for (size_t i = 0; i < n; i++) {
    st = st * 1664525u + 1013904223u;
    hx[i] = (float)(st >> 8) * 0x1p-24f * 16.f - 8.f;
  }
  float *x, *p, *part;
  unsigned *cnt, *ticket;
  CHECK(cudaMalloc(&x, n * 4));
  CHECK(cudaMalloc(&p, n * 4));
  CHECK(cudaMalloc(&part, (size_t)Bmax * kC * 2 * 4));
  CHECK(cudaMalloc(&cnt, Bmax * 4));
  CHECK(cudaMalloc(&ticket, 4));
  CHECK(cudaMemset(cnt, 0, Bmax * 4));
  CHECK(cudaMemset(ticket, 0, 4));
  CHECK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int Bs[] = {1, 21, 28, 64, 128};
  std::vector<float> hp(V);
  for (int B : Bs) {
    printf("B = %2d (us, TB/s, error):\n", B);
    for (int v = 0; v < kNumVariants; v++) {
      Args a = {x, p, part, cnt, ticket, B, V, 1.4426950408889634f / 0.8f};
      CHECK(cudaMemset(p, 0, (size_t)B * V * 4));
      CHECK(launch(v, a, sms, s));
      CHECK(cudaStreamSynchronize(s));
      /* check the last row against a double softmax */
      CHECK(cudaMemcpy(hp.data(), p + (size_t)(B - 1) * V, V * 4, cudaMemcpyDeviceToHost));
      const float *r = hx.data() + (size_t)(B - 1) * V;
      double mx = -INFINITY, z = 0, err = 0;
      for (int i = 0; i < V; i++) mx = fmax(mx, r[i]);
      for (int i = 0; i < V; i++) z += exp((r[i] - mx) / 0.8);
      for (int i = 0; i < V; i++) {
        const double q = kVariants[v].name[0] == 'c' && kVariants[v].name[1] == 'o'
                             ? r[i]
                             : exp((r[i] - mx) / 0.8) / z;
        err = fmax(err, fabs(hp[i] - q) / fabs(q));
      }
      if (kVariants[v].plain) err = hp[7] == r[7] ? 0 : 1;
      cudaGraph_t g;
      cudaGraphExec_t e;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int c = 0; c < calls; c++) CHECK(launch(v, a, sms, s));
      CHECK(cudaStreamEndCapture(s, &g));
      CHECK(cudaGraphInstantiate(&e, g, 0));
      const float us = median_replay_us(e, s, 5, 30, calls);
      CHECK(cudaGetLastError());
      printf("  %-9s %7.2f %5.2f %.1e\n", kVariants[v].name, us, 8e-6 * B * V / us, err);
      cudaGraphExecDestroy(e);
      cudaGraphDestroy(g);
    }
  }
  return 0;
}
