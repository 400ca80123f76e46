/*
 * NVFP4 GEMM and GeGLU on Hopper (sm_90a) for small M (tiles of NX <= 64 rows of
 * A): the lock-step main loop. nvfp4_gemm_sm90.cu plans every call and hands
 * these tiles here (sm90_small_*); wider tiles run its warp-specialised loop.
 *
 * Why two loops: the warp-specialised kernel holds one CTA an SM (its ring and
 * setmaxnreg need the SM), so a decode-sized call's 256 column tiles run in two
 * waves; this kernel runs two CTAs an SM with a cp.async ring that the two
 * consumer warpgroups fill themselves, and holds the same 256 tiles in one
 * wave (docs/decisions/0044).
 *
 * The product is computed transposed: D^T [n, m] = B [n, k] A [m, k]^T, so
 * that the weight B (the large operand: N x K, read once from memory) is
 * wgmma's A operand, which may come from registers, and the activations A are
 * the shared-memory operand. Two launches:
 *
 *   nvfp4_decode_a_rows_kernel  A (NVFP4) -> bf16 [M, K] in the workspace (rows of
 *                 K * 2 bytes), each element decoded once. Within each K-tile
 *                 of 64 the columns are permuted to the order in which the
 *                 main loop's register decode delivers the weight's K (below);
 *                 the dot products are unchanged.
 *   nvfp4_sm90_lockstep_kernel<NX, kEpi>  CTA tile 128 rows of B x NX rows of A (NX =
 *                 8 ... 64, wgmma m64nNXk16), 256 threads = two warpgroups of
 *                 64 rows of B each, two CTAs an SM. Per K-tile of 64:
 *                 - the bf16 A tile [NX][64] (128-byte rows, 16-byte chunks
 *                   XOR-swizzled by row & 7: the layout of wgmma's 128-byte
 *                   swizzle) and B's packed values [128][32] and scales (one
 *                   512-byte chunk) come through a cp.async ring of kStages
 *                   buffers, kStages - 2 K-tiles ahead (8 or 12 by NX: deep
 *                   enough at small M to keep HBM busy);
 *                 - each thread takes the 8 value bytes and the scale byte of
 *                   one 16-element block of each of its two weight rows (g,
 *                   g + 8 of its warp's 16) from the ring and decodes them
 *                   (nvfp4_gemm_common.cuh's decode8: shifts,
 *                   masks and one bf16x2 multiply by the block scale) into the
 *                   four k16 A fragments of the K-tile and issues four wgmma
 *                   (nvfp4_wgmma_rs.cuh) with A from registers, then waits for
 *                   the previous K-tile's wgmma (two A fragment sets alternate).
 *                 K-tile order inside a thread: block t (= lane % 4) of the
 *                 K-tile gives the pairs (i, i + 4) of its two 8-element
 *                 words, W[0..7]; k16 step s takes W[2s] at fragment columns
 *                 (2t, 2t+1) and W[2s + 1] at (2t + 8, 2t + 9). The decode of
 *                 A writes its bf16 columns in that same order.
 *                 Epilogue: the accumulator (rows of B x rows of A) is staged
 *                 transposed in shared memory as fp32 [NX][128 + 4], then the
 *                 common epilogue arithmetic (nvfp4_gemm_common.cuh) stores D
 *                 (split-K: partials summed in split order, deterministic) or
 *                 quantizes the GeGLU's h blocks, exactly as the sm_80 kernel.
 *
 * A K range whose K-tile count is not a multiple of kUnroll runs the last
 * step with zero tiles (zero values, scale 0: they add +0 to accumulators
 * that are never -0).
 */
#include "cuda/cuda.cuh"
#include "cuda/nvfp4/nvfp4_gemm_common.cuh"
#include "cuda/nvfp4/nvfp4_sm90_epilogue.cuh"
#include "cuda/nvfp4/nvfp4_wgmma_rs.cuh"

namespace ingot_nvfp4 {
namespace {

constexpr int kThreads = 256;   // two warpgroups
constexpr int kRowsB = kSm90RowsB;
constexpr int kUnroll = 2;      // K-tiles a loop step: the two A fragment sets alternate

template <int NX>
struct Cfg {
  static_assert(NX == 8 || NX == 16 || NX == 32 || NX == 64, "NX: the small tiles");
  // a stage: the bf16 A tile [NX][64], then B's packed values [128][32] and its 512 scale
  // bytes, padded to 1 KiB (the next A tile stays 1024-byte aligned)
  static constexpr int kStages = NX >= 64 ? 8 : 12; // K-tiles in flight + 2
  static constexpr int kTileA = NX * 128;
  static constexpr int kStageBytes = kTileA + 5120;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kStagingBytes = sm90_staging_bytes<NX>();
  static constexpr int kLut = kPipeBytes > kStagingBytes ? kPipeBytes : kStagingBytes;
  static constexpr int kSmem = kLut + 1024 + 1024; // + the scale table + 1024-byte alignment
  static constexpr int kMinBlocks = 2;
  typedef float Acc[NX / 8][4];
};

constexpr int kMinBlocks = 2; // CTAs an SM, every NX here

// ---- decode of A ---------------------------------------------------------------------

// One thread a (row, K-tile): 32 value bytes and 4 scale bytes in, 64 bf16 out, in the
// main loop's K order: bf16x2 word 8s + 4h + t of the K-tile = W_t[2s + h], where W_t
// are the decode8 pairs of block t.
__global__ void __launch_bounds__(256) nvfp4_decode_a_rows_kernel(const GemmParams p) {
#if INGOT_NVFP4_WGMMA
  // the GEMM (launched as this kernel's programmatic dependent) may start now: it loads
  // its first weight tiles, then waits for this grid to finish before it reads A
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int k_tiles = p.k / 64;
  const int64_t items = static_cast<int64_t>(p.m) * k_tiles;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < items;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(i / k_tiles), kt = static_cast<int>(i % k_tiles);
    uint32_t w[4][8];
    decode_a_ktile(p, m, kt, w);
    uint4 *dst = reinterpret_cast<uint4 *>(p.xb + static_cast<int64_t>(m) * p.xb_stride + kt * 128);
#pragma unroll
    for (int q = 0; q < 8; q++) dst[q] = row_word(w, q);
  }
}

// ---- the main loop -------------------------------------------------------------------


template <int NX, int kEpi>
__global__ void __launch_bounds__(kThreads, Cfg<NX>::kMinBlocks) nvfp4_sm90_lockstep_kernel(const GemmParams p) {
#if INGOT_NVFP4_WGMMA
  typedef Cfg<NX> C;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // the 128-byte swizzle is on address bits: 1024-byte aligned tiles
  uint8_t *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  uint32_t *lut = reinterpret_cast<uint32_t *>(smem + C::kLut);
  const int tid = threadIdx.x, lane = tid & 31, t = lane & 3, g = lane >> 2;
  lut[tid] = scale_bf16x2(static_cast<uint8_t>(tid)); // kThreads == 256 entries
  const int m0 = blockIdx.x * NX, n0 = blockIdx.y * kRowsB;
  const int k_tiles = p.k / 64;
  const int kt0 = blockIdx.z * p.k_tiles_per_split;
  const int kt_end = min(kt0 + p.k_tiles_per_split, k_tiles);
  const int steps = (kt_end - kt0 + kUnroll - 1) / kUnroll;

  // B's packed K-tile kt into ring buffer `slot`: one 16-byte chunk of values a thread
  // (zeros for rows >= N or beyond the K range), and the 512-byte scale chunk of the 128
  // rows (it exists for every row: the scale buffer is padded to 128 rows)
  const uint8_t *wsrc = p.b_val + static_cast<int64_t>(min(n0 + (tid >> 1), p.n - 1)) * p.b_stride + (tid & 1) * 16;
  const bool w_row_ok = n0 + (tid >> 1) < p.n;
  const uint8_t *sfsrc = p.b_sf + static_cast<int64_t>(n0 >> 7) * p.b_sf_block + (tid & 31) * 16;
  auto load_w = [&](int slot, int kt) {
    uint8_t *dst = smem + slot * C::kStageBytes + C::kTileA;
    const bool in = kt < kt_end;
    cp_async16(smem_u32(dst + tid * 16), wsrc + static_cast<int64_t>(in ? kt : 0) * 32,
               in && w_row_ok ? 16 : 0);
    if (tid < 32)
      cp_async16(smem_u32(dst + 4096 + tid * 16), sfsrc + static_cast<int64_t>(in ? kt : 0) * 512,
                 in ? 16 : 0);
  };
  // this thread's weight rows in the tile: g and g + 8 of its warp's 16; block t of each
  const int wr0 = (tid >> 7) * 64 + ((tid >> 5) & 3) * 16 + g;
  // the bf16 A tile of K-tile kt into ring buffer `slot` (zeros beyond M or the K range)
  auto load_a = [&](int slot, int kt) {
    uint8_t *dst = smem + slot * C::kStageBytes;
    constexpr int kChunks = NX * 8;
#pragma unroll
    for (int j = 0; j < (kChunks + kThreads - 1) / kThreads; j++) {
      const int i = tid + j * kThreads;
      if (kChunks % kThreads == 0 || i < kChunks) {
        const int r = i >> 3, c = i & 7;
        const bool ok = kt < kt_end && m0 + r < p.m;
        const uint8_t *src = p.xb + static_cast<int64_t>(ok ? m0 + r : 0) * p.xb_stride +
                             static_cast<int64_t>(ok ? kt : 0) * 128 + c * 16;
        cp_async16(smem_u32(dst + r * 128 + ((c ^ (r & 7)) << 4)), src, ok ? 16 : 0);
      }
    }
  };

  // small tiles: the k16 steps alternate between two accumulators, so that a K-tile's
  // wgmma are two dependent chains of 2, not one of 4 (summed in a fixed order at the end)
  constexpr int kChains = NX <= 64 ? 2 : 1;
  typename C::Acc accs[kChains];
#pragma unroll
  for (int c = 0; c < kChains; c++)
#pragma unroll
    for (int j = 0; j < NX / 8; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) accs[c][j][q] = 0.0f;
#pragma unroll
  for (int s = 0; s < C::kStages - 2; s++) load_w(s, kt0 + s);
  // the decoded A is written by the previous grid (programmatic dependent launch)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#pragma unroll
  for (int s = 0; s < C::kStages - 2; s++) {
    load_a(s, kt0 + s);
    cp_async_commit();
  }
  uint32_t frag[2][4][4]; // two K-tiles of A fragments: one in flight, one being decoded
  int slot = 0;           // ring buffer of K-tile `it`
  for (int step = 0; step < steps; step++) {
#pragma unroll
    for (int j = 0; j < kUnroll; j++) {
      const int kt = kt0 + step * kUnroll + j;
      cp_async_wait<C::kStages - 3>(); // this thread's part of tile kt has landed
      fence_proxy_async();             // visible to wgmma (the async proxy)
      __syncthreads(); // everyone's part; and every warpgroup's wgmma of kt - 2 is done
      int next = slot + C::kStages - 2;
      if (next >= C::kStages) next -= C::kStages;
      load_a(next, kt + C::kStages - 2); // into the buffer of kt - 2
      load_w(next, kt + C::kStages - 2);
      cp_async_commit();
      uint32_t(&a)[4][4] = frag[j & 1]; // last read by the wgmma of kt - 2
      decode_w_fragment(smem + slot * C::kStageBytes + C::kTileA, lut, wr0, t, a);
      const uint64_t db = wgmma_desc(smem_u32(smem + slot * C::kStageBytes));
      wgmma_fence();
#pragma unroll
      for (int s = 0; s < 4; s++) wgmma_rs(accs[s % kChains], a[s], db + 2 * s);
      wgmma_commit();
      wgmma_wait1();
      slot = slot + 1 == C::kStages ? 0 : slot + 1;
    }
  }
  wgmma_wait0();
  fence_acc(accs);
  cp_async_wait<0>();

  // ---- epilogue (nvfp4_sm90_epilogue.cuh) ----
  sm90_epilogue<NX, kEpi>(p, accs, reinterpret_cast<float *>(smem), tid, wr0, t, m0, n0,
                          [] { __syncthreads(); });
#else
  (void)p; // sm90_usable() keeps launches of this kernel to its sm_90a code
#endif
}

} // namespace

// ---- host side ---------------------------------------------------------------------------

Sm90Plan sm90_small_plan(const struct ingot_context *ctx, int64_t m, int64_t n, int64_t k,
                         bool geglu) {
  // kMinBlocks CTAs an SM; A decoded as m rows
  const int nx = m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : 64;
  return sm90_tiling(nx, m, n, k, geglu,
                     static_cast<int64_t>(ctx->sm_count > 0 ? ctx->sm_count : 1) * kMinBlocks,
                     kUnroll, m);
}

namespace { // this file's instantiations (nvfp4_gemm_sm90.cu has its own launch_nx)

template <int NX>
ingot_status launch_nx(struct ingot_context *ctx, const char *op, const GemmParams &p,
                       const Sm90Plan &pl, bool geglu, cudaStream_t stream) {
  return sm90_launch_dependent(ctx, op,
                               geglu ? nvfp4_sm90_lockstep_kernel<NX, kEpiGeglu>
                                     : nvfp4_sm90_lockstep_kernel<NX, kEpiGemm>,
                               p, pl, kThreads, Cfg<NX>::kSmem, stream);
}

template <int NX>
cudaError_t set_limits() {
  return sm90_set_smem(nvfp4_sm90_lockstep_kernel<NX, kEpiGemm>,
                       nvfp4_sm90_lockstep_kernel<NX, kEpiGeglu>, Cfg<NX>::kSmem);
}

} // namespace

ingot_status sm90_small_launch(struct ingot_context *ctx, const char *op, GemmParams p,
                               const Sm90Plan &pl, bool geglu, void *workspace,
                               cudaStream_t stream) {
  p.xb = static_cast<uint8_t *>(workspace);
  p.xb_stride = static_cast<int64_t>(p.k) * 2;
  p.k_tiles_per_split = pl.k_tiles_per_split;
  p.splits = pl.splits;
  if (pl.splits > 1) {
    const size_t tiles = static_cast<size_t>(pl.x_tiles) * pl.w_tiles;
    p.ws = reinterpret_cast<float *>(static_cast<uint8_t *>(workspace) + pl.xb_bytes);
    p.counters = reinterpret_cast<unsigned *>(reinterpret_cast<uint8_t *>(p.ws) +
                                              tiles * pl.splits * pl.nx * kRowsB * sizeof(float));
    INGOT_CUDA_TRY(ctx, op, cudaMemsetAsync(p.counters, 0, tiles * sizeof(unsigned), stream));
  }
  const int64_t items = static_cast<int64_t>(p.m) * (p.k / 64);
  nvfp4_decode_a_rows_kernel<<<ingot_cuda_grid(ctx, items, 256, 8), 256, 0, stream>>>(p);
  ingot_status st = ingot_cuda_check_launch(ctx, op);
  if (st) return st;
  switch (pl.nx) {
  case 8: return launch_nx<8>(ctx, op, p, pl, geglu, stream);
  case 16: return launch_nx<16>(ctx, op, p, pl, geglu, stream);
  case 32: return launch_nx<32>(ctx, op, p, pl, geglu, stream);
  default: return launch_nx<64>(ctx, op, p, pl, geglu, stream);
  }
}

/* Once per context, from sm90_init (which has checked the device and the
 * sm_90a code): the shared memory of each tile width. */
bool sm90_small_init() {
  cudaError_t e = set_limits<8>();
  if (e == cudaSuccess) e = set_limits<16>();
  if (e == cudaSuccess) e = set_limits<32>();
  if (e == cudaSuccess) e = set_limits<64>();
  cudaGetLastError();
  return e == cudaSuccess;
}

} // namespace ingot_nvfp4
