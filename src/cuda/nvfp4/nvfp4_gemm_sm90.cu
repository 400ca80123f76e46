/*
 * NVFP4 GEMM and the fused gate/up GEMM + GeGLU + re-quantize on Hopper
 * (sm_90a), with the weight decoded straight into wgmma's register operand.
 *
 * The product is computed transposed: D^T [n, m] = B [n, k] A [m, k]^T, so
 * that the weight B (the large operand: N x K, read once from memory) is
 * wgmma's A operand, which may come from registers, and the activations A are
 * the shared-memory operand. This file plans every call; tiles of NX <= 64
 * rows of A (M <= 64) run the lock-step kernel of nvfp4_gemm_sm90_lockstep.cu
 * (two CTAs an SM: a decode-sized call in one wave), wider ones the
 * warp-specialised kernel here. Two launches:
 *
 *   nvfp4_decode_a_kernel  A (NVFP4) -> bf16 in the workspace, each element
 *                 decoded once (the sm_80 kernel decodes a row tile of A again
 *                 in every column tile), written as the shared-memory images of
 *                 the main loop's A tiles: NX rows x one K-tile of 64, rows
 *                 padded with zeros to whole tiles, 16-byte chunks swizzled as
 *                 wgmma's 128-byte swizzle wants, and the columns of each
 *                 K-tile permuted to the order in which the main loop's
 *                 register decode delivers the weight's K (below); the dot
 *                 products are unchanged.
 *   nvfp4_sm90_kernel<NX, kEpi>  CTA tile 128 rows of B x NX rows of A (NX =
 *                 128 ... 256 by M, wgmma m64nNXk16), one CTA an SM, three
 *                 warpgroups, warp-specialised:
 *                 - one producer warp fills a ring of kStages buffers: each
 *                   K-tile's A image by one bulk copy (cp.async.bulk) and B's
 *                   packed values [128][32] and 512 scale bytes by cp.async,
 *                   all completing on the buffer's `full` mbarrier; it refills
 *                   a buffer once its `empty` mbarrier says the consumers are
 *                   done with it. Its warpgroup gives registers to the
 *                   consumers (setmaxnreg).
 *                 - two consumer warpgroups of 64 rows of B each: per K-tile,
 *                   each thread takes the 8 value bytes and the scale byte of
 *                   one 16-element block of each of its two weight rows (g,
 *                   g + 8 of its warp's 16) and decodes them
 *                   (nvfp4_gemm_common.cuh's decode8: shifts, masks and one
 *                   bf16x2 multiply by the block scale) into the four k16 A
 *                   fragments of the K-tile, issues four wgmma with A from
 *                   registers, waits for the previous K-tile's wgmma (two
 *                   fragment sets alternate) and releases that K-tile's buffer.
 *                   No CTA-wide barrier in the main loop.
 *                 K-tile order inside a thread: block t (= lane % 4) of the
 *                 K-tile gives the pairs (i, i + 4) of its two 8-element
 *                 words, W[0..7]; k16 step s takes W[2s] at fragment columns
 *                 (2t, 2t+1) and W[2s + 1] at (2t + 8, 2t + 9). The decode of
 *                 A writes its bf16 columns in that same order.
 *                 Epilogue (consumers): the accumulator (rows of B x rows of
 *                 A) is staged transposed in shared memory as fp32
 *                 [NX][128 + 4], then the common epilogue arithmetic
 *                 (nvfp4_gemm_common.cuh) stores D (split-K: partials summed in
 *                 split order, deterministic) or quantizes the GeGLU's h
 *                 blocks, exactly as the sm_80 kernel.
 */
#include "cuda/cuda.cuh"
#include "cuda/nvfp4/nvfp4_gemm_common.cuh"
#include "cuda/nvfp4/nvfp4_sm90_epilogue.cuh"
#include "cuda/nvfp4/nvfp4_wgmma_rs.cuh"

namespace ingot_nvfp4 {
namespace {

constexpr int kConsumerThreads = 256; // two warpgroups: decode and wgmma
constexpr int kThreads = kConsumerThreads + 128; // + the producer warpgroup (one warp loads)
constexpr int kRowsB = kSm90RowsB;

template <int NX>
struct Cfg {
  static_assert(NX % 8 == 0 && NX >= 8 && NX <= 256, "NX: a wgmma width");
  // a stage: the bf16 A tile [NX][64], then B's packed values [128][32] and its 512 scale
  // bytes, padded to 1 KiB (the next A tile stays 1024-byte aligned). One CTA an SM, with
  // as many stages as its shared memory holds (6 at NX = 256, 10 at 128).
  static constexpr int kTileA = NX * 128;
  static constexpr int kStageBytes = kTileA + 5120;
  static constexpr int kFit = (227 * 1024 - 1024 - 256 - 1024) / kStageBytes;
  static constexpr int kStages = kFit < 16 ? kFit : 16;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kStagingBytes = sm90_staging_bytes<NX>();
  static constexpr int kLut = kPipeBytes > kStagingBytes ? kPipeBytes : kStagingBytes;
  // + the scale table, the full and empty barriers, the 1024-byte alignment
  static constexpr int kSmem = kLut + 1024 + 256 + 1024;
  static_assert(16 * kStages <= 256 && kSmem <= 227 * 1024, "shared memory");
  // registers a thread after the split: the producer warpgroup gives most of its share to
  // the consumers (65536 a CTA; the kernel starts at 168 a thread)
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = 224;
  static_assert(128 * kProducerRegs + kConsumerThreads * kConsumerRegs <= 65536, "regs");
  typedef float Acc[NX / 8][4];
};

// Tiles of up to kSmallNx rows of A run the lock-step kernel of
// nvfp4_gemm_sm90_lockstep.cu (two CTAs an SM: a decode-sized call in one wave).
constexpr int kSmallNx = 64;

// The tile widths NX the kernels are built for (wgmma takes any multiple of 8 up to 256).
constexpr int kWideNx[] = {160, 192, 208, 224, 248, 256};

// Up to 128 rows, one tile of the next power of two; beyond, the fewest tiles of up to
// 256 rows, each of the narrowest built width that holds its share (M = 784: 4 x 208
// rows, not 4 x 256).
int nx_of(int64_t m) {
  if (m <= 128) return m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : 128;
  const int64_t tiles = (m + 255) / 256, share = (m + tiles - 1) / tiles;
  for (int nx : kWideNx)
    if (nx >= share) return nx;
  return 256;
}

// ---- decode of A ---------------------------------------------------------------------

// One thread a (row, K-tile): 32 value bytes and 4 scale bytes in, 64 bf16 out, in the
// main loop's K order: bf16x2 word 8s + 4h + t of the K-tile = W_t[2s + h], where W_t
// are the decode8 pairs of block t. The output is the shared-memory image of the main
// loop's A tiles, so that one bulk copy brings a tile in: tile (x, kt) holds rows
// [x * NX, x * NX + NX) of K-tile kt at (x * k_tiles + kt) * NX * 128 bytes, row r at
// r * 128, its 16-byte chunk q at ((q ^ (r & 7)) * 16) (wgmma's 128-byte swizzle).
// Rows >= M are zeros.
__global__ void __launch_bounds__(256) nvfp4_decode_a_kernel(const GemmParams p) {
#if INGOT_NVFP4_WGMMA
  // the GEMM (launched as this kernel's programmatic dependent) may start now: it loads
  // its first weight tiles, then waits for this grid to finish before it reads A
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int k_tiles = p.k / 64, nx = p.xb_nx;
  const int rows = (p.m + nx - 1) / nx * nx;
  const int64_t items = static_cast<int64_t>(rows) * k_tiles;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < items;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(i / k_tiles), kt = static_cast<int>(i % k_tiles);
    const int r = m % nx;
    uint4 *dst = reinterpret_cast<uint4 *>(
        p.xb + ((static_cast<int64_t>(m / nx) * k_tiles + kt) * nx + r) * 128);
    if (m >= p.m) {
#pragma unroll
      for (int q = 0; q < 8; q++) dst[q] = make_uint4(0, 0, 0, 0);
      continue;
    }
    uint32_t w[4][8];
    decode_a_ktile(p, m, kt, w);
#pragma unroll
    for (int q = 0; q < 8; q++) dst[q ^ (r & 7)] = row_word(w, q);
  }
}

// ---- the main loop -------------------------------------------------------------------


#if INGOT_NVFP4_WGMMA
// ---- mbarriers and the bulk copy (the ring between the producer warp and the consumers)

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Waits for the completion of the barrier's phase of parity `parity`.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// One arrival on `bar` once this thread's earlier cp.async have landed.
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// `bytes` (a multiple of 16) from global to shared memory; completes on `bar` as transactions.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
template <int R>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
// The consumer warpgroups only (the producer warp does not take part).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory");
}
#endif

template <int NX, int kEpi>
__global__ void __launch_bounds__(kThreads, 1) nvfp4_sm90_kernel(const GemmParams p) {
#if INGOT_NVFP4_WGMMA
  typedef Cfg<NX> C;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // the 128-byte swizzle is on address bits: 1024-byte aligned tiles
  uint8_t *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  uint32_t *lut = reinterpret_cast<uint32_t *>(smem + C::kLut);
  const uint32_t full0 = smem_u32(smem + C::kLut + 1024);    // full[s]: tile s has landed
  const uint32_t empty0 = full0 + 8 * C::kStages;              // empty[s]: its readers are done
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid < 256) lut[tid] = scale_bf16x2(static_cast<uint8_t>(tid));
  if (tid == 0) {
    for (int s = 0; s < C::kStages; s++) {
      mbar_init(full0 + 8 * s, 33);                  // the producer's 32 lanes + the expect_tx
      mbar_init(empty0 + 8 * s, kConsumerThreads);      // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int m0 = blockIdx.x * NX, n0 = blockIdx.y * kRowsB;
  const int k_tiles = p.k / 64;
  const int kt0 = blockIdx.z * p.k_tiles_per_split;
  const int tiles = min(kt0 + p.k_tiles_per_split, k_tiles) - kt0; // K-tiles of this CTA

  if (tid >= kConsumerThreads) {
    regs_dec<C::kProducerRegs>();
    if (tid >= kConsumerThreads + 32) return;
    // ---- the producer warp: K-tile i into ring slot i % kStages, once its readers are done
    // B's packed values: 8 16-byte chunks a lane, rows lane / 2 + 16 j (zeros for rows
    // >= N); the 512 scale bytes of the 128 rows: one chunk a lane (the scale buffer is
    // padded to 128 rows)
    const uint8_t *wsrc = p.b_val + static_cast<int64_t>(min(n0 + (lane >> 1), p.n - 1)) * p.b_stride + (lane & 1) * 16 +
                          static_cast<int64_t>(kt0) * 32;
    const int rows_left = p.n - n0 - (lane >> 1); // this lane's rows j with 16 j < rows_left exist
    const uint8_t *sfsrc = p.b_sf + static_cast<int64_t>(n0 >> 7) * p.b_sf_block + lane * 16 +
                           static_cast<int64_t>(kt0) * 512;
    // the decoded A: tile images of NX rows x one K-tile, in K-tile order
    const uint8_t *asrc = p.xb + (static_cast<int64_t>(blockIdx.x) * k_tiles + kt0) * C::kTileA;
    auto load_w = [&](int slot, int i) {
      const uint32_t dst = smem_u32(smem + slot * C::kStageBytes + C::kTileA) + lane * 16;
      const uint8_t *src = wsrc + static_cast<int64_t>(i) * 32;
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const bool ok = 16 * j < rows_left;
        cp_async16(dst + 512 * j, ok ? src + 16 * j * p.b_stride : wsrc, ok ? 16 : 0);
      }
      cp_async16(smem_u32(smem + slot * C::kStageBytes + C::kTileA + 4096) + lane * 16,
                 sfsrc + static_cast<int64_t>(i) * 512, 16);
      cp_async_arrive(full0 + 8 * slot);
    };
    auto load_a = [&](int slot, int i) {
      if (lane == 0) {
        mbar_arrive_expect_tx(full0 + 8 * slot, C::kTileA);
        bulk_copy(smem_u32(smem + slot * C::kStageBytes), asrc + static_cast<int64_t>(i) * C::kTileA,
                  C::kTileA, full0 + 8 * slot);
      }
    };
    // the weight does not depend on the previous grid: its first tiles load before the wait
    const int first = min(tiles, C::kStages);
    for (int i = 0; i < first; i++) load_w(i, i);
    // the decoded A is written by the previous grid (programmatic dependent launch)
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int i = 0; i < first; i++) load_a(i, i);
    int slot = 0, round = 1;
    for (int i = first; i < tiles; i++) {
      mbar_wait(empty0 + 8 * slot, (round - 1) & 1); // the consumers' release of this slot
      load_w(slot, i);
      load_a(slot, i);
      if (++slot == C::kStages) slot = 0, round++;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  // ---- the consumer warpgroups: decode the weight into registers, wgmma ----
  regs_inc<C::kConsumerRegs>();
  const int t = lane & 3, g = lane >> 2;
  // this thread's weight rows in the tile: g and g + 8 of its warp's 16; block t of each
  const int wr0 = (tid >> 7) * 64 + ((tid >> 5) & 3) * 16 + g;
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
  // K-tiles a wgmma commit group: at small NX a K-tile's wgmma are short, and waiting
  // for them tile by tile would pace the loop, so several tiles go in one group
  constexpr int kGroup = NX <= 32 ? 4 : NX <= 64 ? 2 : 1;
  static_assert(2 * kGroup + 2 <= C::kStages, "two groups held, more in flight");
  uint32_t frag[2][kGroup][4][4]; // two groups of A fragments: one in flight, one decoded
  int slot = 0, held = 0, held_slot = 0; // held: slots of the group whose wgmma may run
  uint32_t parity = 0;
  // `count` K-tiles from consecutive slots into fragment set a, their wgmma as one
  // group; then the slots of the previous group, whose wgmma have finished, are released
  auto group = [&](uint32_t(&a)[kGroup][4][4], int count) {
    const int first = slot;
    uint64_t db[kGroup];
#pragma unroll
    for (int q = 0; q < kGroup; q++) {
      // kGroup == 1: count is 1 (known here, so ptxas keeps the wgmma unbranched)
      if (kGroup == 1 || q < count) {
        mbar_wait(full0 + 8 * slot, parity);
        decode_w_fragment(smem + slot * C::kStageBytes + C::kTileA, lut, wr0, t, a[q]);
        db[q] = wgmma_desc(smem_u32(smem + slot * C::kStageBytes));
        if (++slot == C::kStages) slot = 0, parity ^= 1;
      }
    }
    wgmma_fence();
#pragma unroll
    for (int q = 0; q < kGroup; q++)
      if (kGroup == 1 || q < count)
#pragma unroll
        for (int s = 0; s < 4; s++) wgmma_rs(accs[s % kChains], a[q][s], db[q] + 2 * s);
    wgmma_commit();
    wgmma_wait1();
    // every consumer thread arrives: each orders its own reads of the slot before the refill
    for (int q = 0, r = held_slot; q < held; q++, r = r + 1 == C::kStages ? 0 : r + 1)
      mbar_arrive(empty0 + 8 * r);
    held = count;
    held_slot = first;
  };
  for (int i = 0; i < tiles; i += 2 * kGroup) {
    group(frag[0], min(kGroup, tiles - i));
    if (i + kGroup < tiles) group(frag[1], min(kGroup, tiles - i - kGroup));
  }
  wgmma_wait0();
  fence_acc(accs);

  // ---- epilogue (nvfp4_sm90_epilogue.cuh) ----
  // every load of the ring has landed (each was waited for) and every wgmma is done
  sm90_epilogue<NX, kEpi>(p, accs, reinterpret_cast<float *>(smem), tid, wr0, t, m0, n0,
                          [] { consumer_sync(); });
#else
  (void)p; // sm90_usable() keeps launches of this kernel to its sm_90a code
#endif
}

} // namespace

// ---- host side ---------------------------------------------------------------------------

bool sm90_usable(const struct ingot_context *ctx) { return ctx->cuda->nvfp4_sm90 != 0; }

Sm90Plan sm90_tiling(int nx, int64_t m, int64_t n, int64_t k, bool geglu, int64_t slots,
                     int unroll, int64_t xb_rows) {
  Sm90Plan pl;
  pl.nx = nx;
  pl.x_tiles = static_cast<int>((m + nx - 1) / nx);
  pl.w_tiles = static_cast<int>((n + kRowsB - 1) / kRowsB);
  const int k_tiles = static_cast<int>(k / 64);
  const int64_t tiles = static_cast<int64_t>(pl.x_tiles) * pl.w_tiles;
  int splits = 1;
  while (!geglu && splits < 16 && tiles * splits * 5 < slots * 4 && k_tiles / (splits * 2) >= 8)
    splits *= 2;
  const int per = (k_tiles + splits - 1) / splits;
  pl.k_tiles_per_split = (per + unroll - 1) / unroll * unroll;
  pl.splits = (k_tiles + pl.k_tiles_per_split - 1) / pl.k_tiles_per_split;
  pl.xb_bytes = (static_cast<size_t>(xb_rows) * static_cast<size_t>(k) * 2 + 255) & ~size_t(255);
  pl.ws_bytes = pl.xb_bytes;
  if (pl.splits > 1)
    pl.ws_bytes += static_cast<size_t>(tiles) * pl.splits * pl.nx * kRowsB * sizeof(float) +
                   ((static_cast<size_t>(tiles) * sizeof(unsigned) + 255) & ~size_t(255));
  return pl;
}

Sm90Plan sm90_plan(const struct ingot_context *ctx, int64_t m, int64_t n, int64_t k, bool geglu) {
  if (nx_of(m) <= kSmallNx) return sm90_small_plan(ctx, m, n, k, geglu);
  const int nx = nx_of(m);
  // one CTA an SM; A's tile images: rows padded to whole tiles
  return sm90_tiling(nx, m, n, k, geglu, ctx->sm_count > 0 ? ctx->sm_count : 1, 1,
                     (m + nx - 1) / nx * nx);
}

ingot_status sm90_launch_dependent(struct ingot_context *ctx, const char *op, Sm90Kernel kernel,
                                   const GemmParams &p, const Sm90Plan &pl, int threads,
                                   int smem, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3(pl.x_tiles, pl.w_tiles, pl.splits);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  INGOT_CUDA_TRY(ctx, op, cudaLaunchKernelEx(&cfg, kernel, p));
  return ingot_cuda_check_launch(ctx, op);
}

cudaError_t sm90_set_smem(Sm90Kernel gemm, Sm90Kernel geglu, int smem) {
  cudaError_t e = cudaFuncSetAttribute(gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(geglu, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  return e;
}

bool sm90_aligned(const ingot_nvfp4_operand *a, const ingot_nvfp4_operand *b) {
  const auto al = [](const void *q, unsigned bytes) {
    return (reinterpret_cast<uintptr_t>(q) & (bytes - 1)) == 0;
  };
  // A: 16-byte loads of values and 4-byte loads of scales; B: 16-byte cp.async
  return al(a->m.values, 16) && a->m.values_stride % 16 == 0 && al(a->m.scales, 4) &&
         al(b->m.values, 16) && b->m.values_stride % 16 == 0 && al(b->m.scales, 16);
}

template <int NX>
ingot_status launch_nx(struct ingot_context *ctx, const char *op, const GemmParams &p,
                       const Sm90Plan &pl, bool geglu, cudaStream_t stream) {
  static_assert(NX > kSmallNx, "the small tiles run nvfp4_gemm_sm90_lockstep.cu");
  return sm90_launch_dependent(ctx, op,
                               geglu ? nvfp4_sm90_kernel<NX, kEpiGeglu> : nvfp4_sm90_kernel<NX, kEpiGemm>,
                               p, pl, kThreads, Cfg<NX>::kSmem, stream);
}

ingot_status sm90_launch(struct ingot_context *ctx, const char *op, GemmParams p, bool geglu,
                         void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  const Sm90Plan pl = sm90_plan(ctx, p.m, p.n, p.k, geglu);
  if (workspace_bytes < pl.ws_bytes)
    return ingot_core_fail(ctx, INGOT_STATUS_INSUFFICIENT_WORKSPACE, op, "workspace_bytes: %zu, need %zu",
                           workspace_bytes, pl.ws_bytes);
  if (pl.nx <= kSmallNx) return sm90_small_launch(ctx, op, p, pl, geglu, workspace, stream);
  p.xb = static_cast<uint8_t *>(workspace);
  p.xb_nx = pl.nx;
  p.k_tiles_per_split = pl.k_tiles_per_split;
  p.splits = pl.splits;
  if (pl.splits > 1) {
    const size_t tiles = static_cast<size_t>(pl.x_tiles) * pl.w_tiles;
    p.ws = reinterpret_cast<float *>(static_cast<uint8_t *>(workspace) + pl.xb_bytes);
    p.counters = reinterpret_cast<unsigned *>(reinterpret_cast<uint8_t *>(p.ws) +
                                              tiles * pl.splits * pl.nx * kRowsB * sizeof(float));
    INGOT_CUDA_TRY(ctx, op, cudaMemsetAsync(p.counters, 0, tiles * sizeof(unsigned), stream));
  }
  const int64_t items = static_cast<int64_t>(pl.x_tiles) * pl.nx * (p.k / 64);
  nvfp4_decode_a_kernel<<<ingot_cuda_grid(ctx, items, 256, 8), 256, 0, stream>>>(p);
  ingot_status st = ingot_cuda_check_launch(ctx, op);
  if (st) return st;
  switch (pl.nx) {
  case 128: return launch_nx<128>(ctx, op, p, pl, geglu, stream);
  case 160: return launch_nx<160>(ctx, op, p, pl, geglu, stream);
  case 192: return launch_nx<192>(ctx, op, p, pl, geglu, stream);
  case 208: return launch_nx<208>(ctx, op, p, pl, geglu, stream);
  case 224: return launch_nx<224>(ctx, op, p, pl, geglu, stream);
  case 248: return launch_nx<248>(ctx, op, p, pl, geglu, stream);
  case 256: return launch_nx<256>(ctx, op, p, pl, geglu, stream);
  default:
    return ingot_core_fail(ctx, INGOT_STATUS_INTERNAL, op, "no warp-specialised kernel of %d rows",
                           pl.nx);
  }
}

template <int NX>
cudaError_t set_limits() {
  return sm90_set_smem(nvfp4_sm90_kernel<NX, kEpiGemm>, nvfp4_sm90_kernel<NX, kEpiGeglu>,
                       Cfg<NX>::kSmem);
}

/* Once per context: the path runs where the kernels hold sm_90a code (the
 * compute_80 PTX that a newer GPU JIT-compiles has no wgmma) and the device
 * gives their shared memory. */
void sm90_init(struct ingot_context *ctx) {
  ctx->cuda->nvfp4_sm90 = 0;
  cudaFuncAttributes fa;
  if (ctx->cc_major != 9 || ctx->cuda->smem_optin < Cfg<256>::kSmem ||
      cudaFuncGetAttributes(&fa, nvfp4_sm90_kernel<256, kEpiGemm>) != cudaSuccess || fa.ptxVersion < 90) {
    cudaGetLastError();
    return;
  }
  cudaError_t e = set_limits<128>();
  if (e == cudaSuccess) e = set_limits<160>();
  if (e == cudaSuccess) e = set_limits<192>();
  if (e == cudaSuccess) e = set_limits<208>();
  if (e == cudaSuccess) e = set_limits<224>();
  if (e == cudaSuccess) e = set_limits<248>();
  if (e == cudaSuccess) e = set_limits<256>();
  cudaGetLastError();
  ctx->cuda->nvfp4_sm90 = e == cudaSuccess && sm90_small_init();
}

} // namespace ingot_nvfp4
