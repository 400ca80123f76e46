/*
 * NVFP4 GEMM and the fused gate/up GEMM + GeGLU + NVFP4 re-quantize on CUDA
 * (the contract is include/ingot/ingot.h, "NVFP4 GEMM and the fused gate/up
 * + GeGLU MLP"; the epilogue arithmetic is common/nvfp4_ref.h, shared with
 * the CPU reference).
 *
 * On an sm_90a device with the kernels' sm_90a code, operands laid out for
 * vector loads go to the Hopper path (nvfp4_gemm_sm90.cu: the weight decoded
 * into wgmma's register operand); everything else to this file's kernel,
 * nvfp4_gemm_kernel<kEpi, kAsync, BN>, main loop + epilogue:
 *
 *   CTA tile 128 (M) x BN (N, 256 or 128) x 64 (K), 256 threads = 8 warps.
 *   sm_90a: two warpgroups, each wgmma m64nBNk16 on 64 rows (asynchronous,
 *   the decode of the next K-tile runs while it computes). Elsewhere (sm_80):
 *   2 (M) x 4 (N) warps of mma.sync m16n8k16 from ldmatrix, warp tile 64 x
 *   BN/4. bf16 operands, fp32 accumulation. BN = 128 fits two CTAs on an SM
 *   (twice the warps to hide latency, and one CTA's epilogue overlaps the
 *   other's main loop); BN = 256 decodes a third less per FLOP. The GeGLU
 *   uses 128, the GEMM 256 for M > 64 and 128 below (pick_bn, measured).
 *
 *   Main loop. A K-tile of 64 is 32 value bytes per row and exactly one
 *   4-column group of the 128x4 scale layout, i.e. one contiguous 512-byte
 *   chunk of scales per 128 rows. The packed bytes and scales of A (128 rows)
 *   and B (BN rows) go through a 4-stage cp.async pipeline (13.5 / 9 KiB a
 *   stage). One stage ahead of the tensor cores, the CTA decodes the packed
 *   stage into a 2- or 3-buffered bf16 tile in shared memory (each element
 *   decoded once per CTA; rows 128 B, 16-byte chunks XOR-swizzled by row & 7
 *   the 128-byte swizzle that wgmma's descriptors name, and conflict-free
 *   for ldmatrix). One __syncthreads per K-tile. The E4M3 -> bf16 scale
 *   conversion is a 256-entry table in shared memory.
 *
 *   Decode: a thread takes one (row, 16-element block): 8 value bytes and one
 *   scale byte (rows of A at or beyond M are not decoded: their
 *   accumulator rows are never stored). For the pair of nibbles (i, i+4) of a 32-bit word x, the
 *   bf16x2 word ((x << a) & 0x01C001C0) | ((x << b) & 0x80008000) holds the
 *   two E2M1 magnitudes in the low exponent bits + mantissa msb and the signs
 *   in the sign bits: as bf16 that is exactly e2m1 * 2^-126 (code 1 = 0.5 is
 *   the subnormal 2^-127). One fma.rn.bf16x2 with (sf * 2^119, exact in bf16)
 *   gives e2m1 * sf * 2^-7, exact; the accumulator is therefore acc * 2^-14
 *   and the epilogue multiplies by 2^14 first (exact: every product is a
 *   multiple of 2^-34, far from fp32 underflow). The K order inside a block is
 *   permuted (smem position 2i, 2i+1 <- elements i, i+4 of each 8), the same
 *   for A and B, so the dot products are unchanged.
 *
 *   The main loop hands the epilogue only the accumulator fragments (the
 *   m16n8 C layout: thread (g = lane/4, t = lane%4) of a warp holds rows g,
 *   g+8 and columns 2t, 2t+1 of each 16x8 tile, from the warp's origin
 *   acc_row0 / acc_col0). wgmma's m64nNk16 accumulator has exactly that
 *   ownership per warp, so the mma.sync and wgmma main loops share the
 *   epilogues unchanged. The epilogue arithmetic (nvfp4_gemm_common.cuh) is
 *   the Hopper path's too.
 *
 *   Epilogues (kEpi):
 *     kEpiGemm   d = (acc * 2^14) * alpha, alpha = 1 / (gsA * gsB) computed on
 *                the device, stored F32 or BF16 (any row stride; vector
 *                stores when aligned). Split-K (grid.z > 1): each CTA writes
 *                its fp32 partial tile into the workspace in fragment order
 *                (coalesced), the last CTA of a tile (a counter per tile,
 *                zeroed by a memset in the same call and reset by that CTA)
 *                adds the partials in split order 0, 1, ... (deterministic,
 *                independent of which CTA is last) and runs the epilogue.
 *     kEpiGeglu  columns 2j / 2j+1 are gate / up of h column j. The
 *                accumulator is staged through shared memory so that one
 *                thread owns a whole h block (one row, 16 gate/up pairs):
 *                h = gelu_tanh(g) * u with the CPU's operations
 *                (ingot_gelu_tanh; a branch-free copy of the same operation
 *                sequence when every |y| of the warp is <= 69, checked bit
 *                for bit against the CPU in the test), amax over finite
 *                values, sf / r / codes by ingot_nvfp4_ref_block's rule
 *                (fast-path IEEE divisions when the operands are in range,
 *                the reference otherwise), 8 value bytes and the scale byte
 *                stored straight away. Rows >= M get scale 0 and no value
 *                bytes; the CTA of the last N tile also writes the padding
 *                scale columns.
 *
 *   kAsync = false is the path for values / scales whose address or row
 *   stride is not 16-byte aligned: the same kernel with plain byte loads
 *   into shared memory instead of cp.async (slower, same results).
 *
 * The library is built with -fmad=false; every float operation of the
 * epilogues is an explicit _rn intrinsic (through common/numeric.h).
 */
#include <algorithm>

#include "cuda/cuda.cuh"
#include "cuda/nvfp4/nvfp4_gemm_common.cuh"

namespace {

using namespace ingot_nvfp4; // params, decode, epilogue math (nvfp4_gemm_common.cuh)

// ---- tile geometry -----------------------------------------------------------------

constexpr int kBM = 128, kBK = 64;
constexpr int kThreads = 256;
constexpr int kStages = 4;
static_assert(kThreads == 256, "one thread per entry of the 256-entry scale table");


template <int BN>
struct Cfg {
  static_assert(BN == 128 || BN == 256, "BN");
  // packed stage: values A [128][32], values B [BN][32], scales A 512, scales B BN/128 x 512
  static constexpr int kPackA = 0;
  static constexpr int kPackB = kPackA + kBM * 32;
  static constexpr int kPackSfA = kPackB + BN * 32;
  static constexpr int kPackSfB = kPackSfA + 512;
  static constexpr int kPackBytes = kPackSfB + BN / 128 * 512; // 13824 / 9216
  // bf16 tiles: A [128][64], B [BN][64], 128 bytes a row
  static constexpr int kTileA = 0;
  static constexpr int kTileB = kBM * 128;
  static constexpr int kTileBytes = kTileB + BN * 128; // 49152 / 32768
  static constexpr int kDecodeItems = (kBM + BN) * 4 / kThreads; // (row, block) items a thread
  static constexpr int kMinBlocks = BN == 128 ? 2 : 1;           // CTAs an SM holds
  // the mma.sync warp tile: 64 x BN/4 of a 2 x 4 warp grid
  static constexpr int kWarpN = BN / 4;
#if INGOT_NVFP4_WGMMA
  // wgmma: a warp holds 16 rows x BN columns; 3 tile buffers for BN = 256 (a K-tile's
  // wgmma may still run while the next is issued and the one after is decoded), 2 for
  // BN = 128 (two CTAs an SM)
  static constexpr int kAccMT = 1, kAccNT = BN / 8;
  static constexpr int kTileBufs = BN == 256 ? 3 : 2;
#else
  static constexpr int kAccMT = 4, kAccNT = kWarpN / 8;
  static constexpr int kTileBufs = 2;
#endif
  typedef float Acc[kAccMT][kAccNT][4];
  static constexpr int kLut = kStages * kPackBytes + kTileBufs * kTileBytes; // 1 KiB table
  // (the dynamic allocation is kLut + 1 KiB + 1 KiB for 1024-byte alignment; see smem_bytes)
  __device__ static int acc_row0() {
    return INGOT_NVFP4_WGMMA ? (threadIdx.x >> 7) * 64 + ((threadIdx.x >> 5) & 3) * 16
                             : (threadIdx.x >> 7) * 64;
  }
  __device__ static int acc_col0() { return INGOT_NVFP4_WGMMA ? 0 : ((threadIdx.x >> 5) & 3) * kWarpN; }
};
static_assert((kBM + 256) * 4 % kThreads == 0 && (kBM + 128) * 4 % kThreads == 0, "items");

// Dynamic shared memory of a launch (host side): tile buffers as the sm_90a code uses them
// on cc >= 9 (more than the sm_80 code needs, should a cc 9 device run that), else 2.
int smem_bytes(int bn, int cc_major) {
  const int pack = (kBM + bn) * 32 + 512 + bn / 128 * 512, tile = (kBM + bn) * 128;
  const int bufs = cc_major >= 9 && bn == 256 ? 3 : 2;
  return kStages * pack + bufs * tile + 1024 + 1024;
}


// ---- small PTX helpers ---------------------------------------------------------------


__device__ __forceinline__ __attribute__((unused)) void ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1,
                                            uint32_t &r2, uint32_t &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ __attribute__((unused)) void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}


#if INGOT_NVFP4_WGMMA
// D (64 x 256 per warpgroup, fp32) += A (64 x 16) * B (256 x 16)^T, both from shared
// memory, K-major, 128-byte swizzled; d[j][0..3] is the m16n8 C fragment of n8 tile j of
// this warp's 16 rows (the same ownership as mma.sync).
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[32][4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : INGOT_WGMMA_ACC32(d)
      : "l"(da), "l"(db), "n"(1));
}

__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[16][4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : INGOT_WGMMA_ACC16(d)
      : "l"(da), "l"(db), "n"(1));
}

template <int BN>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 8][4], uint64_t da, uint64_t db) {
  if constexpr (BN == 256)
    wgmma_m64n256k16(d, da, db);
  else
    wgmma_m64n128k16(d, da, db);
}

#endif

// ---- decode -------------------------------------------------------------------------


// ---- the CTA's main loop -------------------------------------------------------------

struct Tile {
  int m0, n0;        // first row of A / B (= output row / column)
  int kt0, kt_count; // K-tiles of this CTA
  int a_rows;        // rows of A in this tile (<= 128)
};

// Loads 16 bytes from global (or zeros when !valid) into shared memory.
template <bool kAsync>
__device__ __forceinline__ void load16(uint8_t *dst, const uint8_t *src, bool valid) {
  if constexpr (kAsync) {
    cp_async16(smem_u32(dst), src, valid ? 16 : 0);
  } else {
    uint32_t w[4] = {0, 0, 0, 0};
    if (valid)
      for (int i = 0; i < 16; i++) w[i >> 2] |= static_cast<uint32_t>(src[i]) << (8 * (i & 3));
    *reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// Packed stage for K-tile kt: A values (1 chunk a thread), B values (BN / 128), scales.
template <int BN, bool kAsync>
__device__ __forceinline__ void load_stage(const GemmParams &p, const Tile &t, uint8_t *stage,
                                           int kt) {
  typedef Cfg<BN> C;
  const int tid = threadIdx.x;
  {
    const int r = tid >> 1, c = tid & 1;
    const bool ok = r < t.a_rows;
    const uint8_t *src = p.a_val + static_cast<int64_t>(t.m0 + (ok ? r : 0)) * p.a_stride + kt * 32 + c * 16;
    load16<kAsync>(stage + C::kPackA + r * 32 + c * 16, src, ok);
  }
#pragma unroll
  for (int i = 0; i < BN / 128; i++) {
    const int idx = tid + i * kThreads;
    const int r = idx >> 1, c = idx & 1;
    const int row = t.n0 + r;
    const bool ok = row < p.n;
    const uint8_t *src = p.b_val + static_cast<int64_t>(ok ? row : 0) * p.b_stride + kt * 32 + c * 16;
    load16<kAsync>(stage + C::kPackB + r * 32 + c * 16, src, ok);
  }
  if (tid < 32) {
    // A scales: the 512-byte chunk of row block m0/128, column group kt
    const uint8_t *src = p.a_sf + static_cast<int64_t>(t.m0 >> 7) * p.a_sf_block +
                         static_cast<int64_t>(kt) * 512 + tid * 16;
    load16<kAsync>(stage + C::kPackSfA + tid * 16, src, true);
  } else if (tid < 32 + BN / 4) {
    const int j = tid - 32, blk = j >> 5, c = j & 31;
    const int rb = (t.n0 >> 7) + blk;
    const bool ok = rb * 128 < p.n;
    const uint8_t *src = p.b_sf + static_cast<int64_t>(ok ? rb : 0) * p.b_sf_block +
                         static_cast<int64_t>(kt) * 512 + c * 16;
    load16<kAsync>(stage + C::kPackSfB + blk * 512 + c * 16, src, ok);
  }
}

// Decodes item j (0..kDecodeItems-1) of a packed stage into a bf16 tile. Rows of A at
// or beyond a_rows are skipped (their accumulator rows are never stored).
template <int BN>
__device__ __forceinline__ void decode_item(const uint8_t *stage, uint8_t *tile,
                                            const uint32_t *lut, int a_rows, int j) {
  typedef Cfg<BN> C;
  const int idx = threadIdx.x + j * kThreads; // compile-time j: the branches fold
  const int row = idx >> 2, kb = idx & 3;     // row of [A; B]
  const bool is_a = row < kBM;
  const int r = is_a ? row : row - kBM;
  if (is_a && r >= a_rows) return;
  const uint2 x = *reinterpret_cast<const uint2 *>(stage + (is_a ? C::kPackA : C::kPackB) + r * 32 + kb * 8);
  const int sf_off = ((r >> 7) << 9) + ((r & 31) << 4) + (((r >> 5) & 3) << 2) + kb;
  const uint8_t sf = stage[(is_a ? C::kPackSfA : C::kPackSfB) + sf_off];
  const uint32_t s2 = lut[sf];
  uint32_t w[8];
  decode8(x.x, s2, w);
  decode8(x.y, s2, w + 4);
  uint8_t *trow = tile + (is_a ? C::kTileA : C::kTileB) + r * 128;
  const int c0 = (2 * kb) ^ (r & 7), c1 = (2 * kb + 1) ^ (r & 7);
  *reinterpret_cast<uint4 *>(trow + c0 * 16) = make_uint4(w[0], w[1], w[2], w[3]);
  *reinterpret_cast<uint4 *>(trow + c1 * 16) = make_uint4(w[4], w[5], w[6], w[7]);
}

// The decode items spread over the 4 k16 steps of a K-tile.
template <int BN>
__device__ __forceinline__ void decode_step(const uint8_t *next_stage, uint8_t *next_tile,
                                            const uint32_t *lut, int a_rows, int ks) {
  constexpr int n = Cfg<BN>::kDecodeItems; // 6 or 4
#pragma unroll
  for (int j = 0; j < n; j++)
    if (j % 4 == ks) decode_item<BN>(next_stage, next_tile, lut, a_rows, j);
}

#if INGOT_NVFP4_WGMMA
// One K-tile: 4 wgmma (k16 steps) issued on the bf16 tile, the next stage decoded while
// they run, then waited for.
template <int BN>
__device__ __forceinline__ void mma_tile(const uint8_t *tile, typename Cfg<BN>::Acc &acc,
                                         const uint8_t *next_stage, uint8_t *next_tile,
                                         const uint32_t *lut, int a_rows, bool decode_next) {
  typedef Cfg<BN> C;
  const int wg = threadIdx.x >> 7;
  const uint64_t da = wgmma_desc(smem_u32(tile + C::kTileA + wg * 64 * 128));
  const uint64_t db = wgmma_desc(smem_u32(tile + C::kTileB));
  // (issued by every warpgroup: a condition around wgmma, even a uniform one, makes
  // ptxas serialize the pipeline)
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ks++) wgmma_tile<BN>(acc[0], da + 2 * ks, db + 2 * ks);
  wgmma_commit();
  if (decode_next) {
#pragma unroll
    for (int ks = 0; ks < 4; ks++) decode_step<BN>(next_stage, next_tile, lut, a_rows, ks);
    fence_proxy_async();
  }
  // BN = 256 (3 buffers): this K-tile's wgmma may still run, the previous one has
  // finished. BN = 128 (2 buffers): wait for all. (No accumulator access here: a register
  // move while a wgmma is in flight would serialize them.)
  if constexpr (C::kTileBufs == 3)
    wgmma_wait1();
  else
    wgmma_wait0();
}
#else
// One K-tile of mma from a bf16 tile, with the decode of the next stage interleaved.
template <int BN>
__device__ __forceinline__ void mma_tile(const uint8_t *tile, typename Cfg<BN>::Acc &acc,
                                         const uint8_t *next_stage, uint8_t *next_tile,
                                         const uint32_t *lut, int a_rows, bool decode_next) {
  typedef Cfg<BN> C;
  constexpr int MT = C::kAccMT, NT = C::kAccNT;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const uint32_t a_base = smem_u32(tile + C::kTileA);
  const uint32_t b_base = smem_u32(tile + C::kTileB);
#pragma unroll
  for (int ks = 0; ks < 4; ks++) {
    uint32_t a[MT][4];
#pragma unroll
    for (int i = 0; i < MT; i++) {
      const int r = wm * 64 + i * 16 + (lane & 15);
      const int c = (2 * ks + (lane >> 4)) ^ (r & 7);
      ldmatrix_x4(a_base + r * 128 + c * 16, a[i][0], a[i][1], a[i][2], a[i][3]);
    }
#pragma unroll
    for (int jj = 0; jj < NT / 2; jj++) {
      const int r = wn * C::kWarpN + jj * 16 + (lane & 7) + ((lane >> 4) << 3);
      const int c = (2 * ks + ((lane >> 3) & 1)) ^ (r & 7);
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(b_base + r * 128 + c * 16, b0, b1, b2, b3);
#pragma unroll
      for (int i = 0; i < MT; i++) {
        mma_bf16(acc[i][2 * jj], a[i], b0, b1);
        mma_bf16(acc[i][2 * jj + 1], a[i], b2, b3);
      }
    }
    if (decode_next) decode_step<BN>(next_stage, next_tile, lut, a_rows, ks);
  }
}
#endif

template <int BN, bool kAsync>
__device__ __forceinline__ void main_loop(const GemmParams &p, const Tile &t, uint8_t *smem,
                                          typename Cfg<BN>::Acc &acc) {
  typedef Cfg<BN> C;
#pragma unroll
  for (int i = 0; i < C::kAccMT; i++)
#pragma unroll
    for (int j = 0; j < C::kAccNT; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;
  uint8_t *packed = smem;
  uint8_t *tiles = smem + kStages * C::kPackBytes;
  uint32_t *lut = reinterpret_cast<uint32_t *>(smem + C::kLut);
  lut[threadIdx.x] = scale_bf16x2(static_cast<uint8_t>(threadIdx.x)); // kThreads == 256
  const int n = t.kt_count;
#pragma unroll
  for (int s = 0; s < kStages - 1; s++) {
    if (s < n) load_stage<BN, kAsync>(p, t, packed + s * C::kPackBytes, t.kt0 + s);
    cp_async_commit();
  }
  cp_async_wait<kStages - 2>();
  __syncthreads();
#pragma unroll
  for (int j = 0; j < C::kDecodeItems; j++) decode_item<BN>(packed, tiles, lut, t.a_rows, j);
#if INGOT_NVFP4_WGMMA
  fence_proxy_async();
#endif
  // n >= 1 (the plan gives every split at least one K-tile): a do-while, so that no path
  // defines the accumulators after the loop (which would serialize the wgmma pipeline)
  int it = 0;
  do {
    const int ahead = it + kStages - 1;
    if (ahead < n) load_stage<BN, kAsync>(p, t, packed + (ahead % kStages) * C::kPackBytes, t.kt0 + ahead);
    cp_async_commit();
    cp_async_wait<kStages - 2>();
    __syncthreads();
    mma_tile<BN>(tiles + (it % C::kTileBufs) * C::kTileBytes, acc,
                 packed + ((it + 1) % kStages) * C::kPackBytes,
                 tiles + ((it + 1) % C::kTileBufs) * C::kTileBytes, lut, t.a_rows, it + 1 < n);
  } while (++it < n);
  cp_async_wait<0>();
#if INGOT_NVFP4_WGMMA
  wgmma_wait0();
  fence_acc(acc);
#endif
}

// ---- epilogues -------------------------------------------------------------------------


// Split-K: writes this CTA's partial, returns true in the CTA that finishes the
// tile, with acc replaced by the sum of all partials in split order.
template <int BN>
__device__ __forceinline__ bool splitk_reduce(const GemmParams &p, typename Cfg<BN>::Acc &acc) {
  typedef Cfg<BN> C;
  __shared__ unsigned last;
  const int tile = blockIdx.y * gridDim.x + blockIdx.x;
  const int z = blockIdx.z;
  constexpr int kFrag = C::kAccMT * C::kAccNT; // float4 per thread
  float4 *base = reinterpret_cast<float4 *>(p.ws) + static_cast<int64_t>(tile) * p.splits * kFrag * kThreads;
  float4 *mine = base + static_cast<int64_t>(z) * kFrag * kThreads;
#pragma unroll
  for (int i = 0; i < C::kAccMT; i++)
#pragma unroll
    for (int j = 0; j < C::kAccNT; j++)
      __stcg(mine + (i * C::kAccNT + j) * kThreads + threadIdx.x,
             make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]));
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned old = atomicAdd(p.counters + tile, 1u);
    last = old == static_cast<unsigned>(p.splits - 1);
    if (last) p.counters[tile] = 0; // ready for the next call / graph replay
  }
  __syncthreads();
  if (!last) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < C::kAccMT; i++)
#pragma unroll
    for (int j = 0; j < C::kAccNT; j++) {
      float4 s = __ldcg(base + (i * C::kAccNT + j) * kThreads + threadIdx.x);
      for (int zz = 1; zz < p.splits; zz++) {
        const float4 v = __ldcg(base + (static_cast<int64_t>(zz) * kFrag + i * C::kAccNT + j) * kThreads +
                                threadIdx.x);
        s.x = ingot_fadd_rn(s.x, v.x), s.y = ingot_fadd_rn(s.y, v.y);
        s.z = ingot_fadd_rn(s.z, v.z), s.w = ingot_fadd_rn(s.w, v.w);
      }
      acc[i][j][0] = s.x, acc[i][j][1] = s.y, acc[i][j][2] = s.z, acc[i][j][3] = s.w;
    }
  return true;
}


template <int BN>
__device__ __forceinline__ void epilogue_gemm(const GemmParams &p, const Tile &t,
                                              typename Cfg<BN>::Acc &acc) {
  typedef Cfg<BN> C;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int row0 = t.m0 + C::acc_row0(), col0 = t.n0 + C::acc_col0();
  const float alpha = alpha_of(p);
#pragma unroll
  for (int i = 0; i < C::kAccMT; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int row = row0 + i * 16 + g + 8 * h;
      if (row >= p.m) continue;
#pragma unroll
      for (int j = 0; j < C::kAccNT; j++) {
        const int col = col0 + j * 8 + 2 * q;
        if (col0 + j * 8 >= p.n) break; // N % 64 == 0: whole n8 tiles are in or out
        store_pair(p, row, col, ingot_fmul_rn(unscale(acc[i][j][2 * h]), alpha),
                   ingot_fmul_rn(unscale(acc[i][j][2 * h + 1]), alpha));
      }
    }
}


// GeGLU epilogue. The accumulator goes through shared memory (the pipeline buffers are
// free by then): fp32 [128][BN + 4], so that one thread owns a whole h block (16 gate/up
// pairs = 32 consecutive accumulator columns of one row) and the accumulator registers
// are dead before the nonlinear part starts. BN / 64 (row, block) items a thread: rows
// tid % 128, blocks tid / 128 + 2 k.
template <int BN>
__device__ __forceinline__ void epilogue_geglu(const GemmParams &p, const Tile &t,
                                               typename Cfg<BN>::Acc &acc, uint8_t *smem) {
  typedef Cfg<BN> C;
  constexpr int kStride = BN + 4; // floats; conflict-free float4 reads (rows 8 apart)
  static_assert(kBM * kStride * 4 <= kStages * C::kPackBytes + 2 * C::kTileBytes, "staging");
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  float *stage = reinterpret_cast<float *>(smem);
  __syncthreads(); // every warp's last wgmma / mma has read the tiles
  {
    const int r0 = C::acc_row0(), c0 = C::acc_col0();
#pragma unroll
    for (int i = 0; i < C::kAccMT; i++)
#pragma unroll
      for (int j = 0; j < C::kAccNT; j++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
          *reinterpret_cast<float2 *>(stage + (r0 + i * 16 + g + 8 * hh) * kStride + c0 + 8 * j +
                                      2 * q) = make_float2(acc[i][j][2 * hh], acc[i][j][2 * hh + 1]);
  }
  __syncthreads();
  const float alpha = alpha_of(p);
  const float gs = *p.gs_h;
  const bool gs_nice = gs >= 0x1p-60f && gs <= 0x1p60f; // also false for NaN
  const int h_blocks = p.n / 32;                        // h columns / 16
  const int r = threadIdx.x & (kBM - 1);
  const int row = t.m0 + r;
  const bool row_ok = row < p.m;
#pragma unroll 1
  for (int k = 0; k < BN / 64; k++) {
    const int b = (threadIdx.x >> 7) + 2 * k; // h block within the tile
    const int hb = (t.n0 >> 5) + b;           // h block column
    if (t.n0 + 32 * b >= p.n) break;          // uniform: N % 64 == 0
    geglu_block(p, reinterpret_cast<const float4 *>(stage + r * kStride + 32 * b), row, row_ok,
                true, hb, alpha, gs, gs_nice);
  }
  // padding scale columns (h blocks h_blocks .. h_sf_cols-1) of this CTA's 128 rows
  if (t.n0 + BN >= p.n) {
    const int pad = static_cast<int>(p.h_sf_cols) - h_blocks;
    for (int i = threadIdx.x; i < kBM * pad; i += kThreads)
      p.h_sf[ingot_nvfp4_swizzle_offset(t.m0 + i / pad, h_blocks + i % pad, p.h_sf_cols)] = 0;
  }
}

template <int kEpi, bool kAsync, int BN>
__global__ void __launch_bounds__(kThreads, Cfg<BN>::kMinBlocks) nvfp4_gemm_kernel(const GemmParams p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // the 128-byte swizzle of the bf16 tiles is on address bits: 1024-byte aligned tiles
  uint8_t *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  Tile t;
  t.m0 = blockIdx.x * kBM;
  t.n0 = blockIdx.y * BN;
  t.a_rows = min(kBM, p.m - t.m0);
  const int k_tiles = p.k / kBK;
  t.kt0 = blockIdx.z * p.k_tiles_per_split;
  t.kt_count = min(p.k_tiles_per_split, k_tiles - t.kt0);
  typename Cfg<BN>::Acc acc;
  main_loop<BN, kAsync>(p, t, smem, acc);
  if constexpr (kEpi == kEpiGemm) {
    if (p.splits > 1 && !splitk_reduce<BN>(p, acc)) return;
    epilogue_gemm<BN>(p, t, acc);
  } else {
    epilogue_geglu<BN>(p, t, acc, smem);
  }
}

// ---- host side ---------------------------------------------------------------------------

struct Plan {
  int bn;
  int m_tiles, n_tiles, splits, k_tiles_per_split;
  size_t ws_bytes;
};

// Column tile, from A/B timings on an H200 (docs/decisions/0040): the GeGLU
// runs best with BN = 128 at every M (two CTAs an SM: one's epilogue overlaps the other's
// main loop), the plain GEMM with BN = 256 once M fills more than half a row tile (a third
// less decode per FLOP) and with BN = 128 below (shorter K-tiles, more CTAs).
int pick_bn(int64_t m, bool geglu) { return geglu || m <= 64 ? 128 : 256; }

// Split-K only for the plain GEMM, when the tiles alone leave SMs idle.
Plan make_plan(const struct ingot_context *ctx, int64_t m, int64_t n, int64_t k, bool geglu) {
  const bool allow_split = !geglu;
  Plan pl;
  pl.bn = pick_bn(m, geglu);
  pl.m_tiles = static_cast<int>((m + kBM - 1) / kBM);
  pl.n_tiles = static_cast<int>((n + pl.bn - 1) / pl.bn);
  const int k_tiles = static_cast<int>(k / kBK);
  const int64_t tiles = static_cast<int64_t>(pl.m_tiles) * pl.n_tiles;
  const int64_t slots = static_cast<int64_t>(ctx->sm_count > 0 ? ctx->sm_count : 1) * (pl.bn == 128 ? 2 : 1);
  int splits = 1;
  if (allow_split) {
    // grow while a wave is less than ~80% full and each split keeps >= 4 K-tiles
    while (splits < 16 && tiles * splits * 5 < slots * 4 && k_tiles / (splits * 2) >= 4) splits *= 2;
  }
  pl.k_tiles_per_split = (k_tiles + splits - 1) / splits;
  pl.splits = (k_tiles + pl.k_tiles_per_split - 1) / pl.k_tiles_per_split;
  pl.ws_bytes = 0;
  if (pl.splits > 1) {
    const size_t partials = static_cast<size_t>(tiles) * pl.splits * kBM * pl.bn * sizeof(float);
    pl.ws_bytes = partials + ((static_cast<size_t>(tiles) * sizeof(unsigned) + 255) & ~size_t(255));
  }
  return pl;
}

bool aligned16(const void *p, int64_t stride) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0 && (stride & 15) == 0;
}

template <int kEpi, int BN>
ingot_status launch_bn(struct ingot_context *ctx, const char *op, const GemmParams &p, const Plan &pl,
                       bool async, cudaStream_t stream) {
  auto kernel = async ? nvfp4_gemm_kernel<kEpi, true, BN> : nvfp4_gemm_kernel<kEpi, false, BN>;
  const int smem = smem_bytes(BN, ctx->cc_major); /* its limit: ingot_cuda_nvfp4_gemm_init */
  dim3 grid(pl.m_tiles, pl.n_tiles, pl.splits);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status launch_gemm(struct ingot_context *ctx, const char *op, const GemmParams &p,
                         const Plan &pl, bool async, cudaStream_t stream) {
  return pl.bn == 128 ? launch_bn<kEpiGemm, 128>(ctx, op, p, pl, async, stream)
                      : launch_bn<kEpiGemm, 256>(ctx, op, p, pl, async, stream);
}

// Before anything is enqueued: the tiles of this plan must fit the device's
// shared memory per block (cc 8.6 / 8.9 GPUs have ~100 KB).
ingot_status check_smem(struct ingot_context *ctx, const char *op, int bn) {
  const int smem = smem_bytes(bn, ctx->cc_major);
  const int optin = ctx->cuda->smem_optin;
  if (smem > optin)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "device %d allows %d bytes of shared memory per block; this kernel's "
                           "tiles need %d (A100, H100 and H200 have enough; GPUs of compute "
                           "capability 8.6 / 8.9 do not yet)",
                           ctx->device, optin, smem);
  return INGOT_STATUS_SUCCESS;
}

template <int kEpi, int BN>
void set_smem_limit(struct ingot_context *ctx) {
  const int smem = smem_bytes(BN, ctx->cc_major);
  if (smem > ctx->cuda->smem_optin) return; /* check_smem refuses these calls */
  cudaFuncSetAttribute(nvfp4_gemm_kernel<kEpi, true, BN>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(nvfp4_gemm_kernel<kEpi, false, BN>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaGetLastError(); /* a failure here shows as a launch error, named by the op */
}

ingot_status check_arch(struct ingot_context *ctx, const char *op) {
  if (ctx->cc_major < 8)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "device %d has compute capability %d.%d; the NVFP4 GEMM needs bf16 "
                           "tensor cores (8.0 or newer)",
                           ctx->device, ctx->cc_major, ctx->cc_minor);
  if (ctx->sm_count <= 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INTERNAL, op, "context has no SM count");
  return INGOT_STATUS_SUCCESS;
}

void fill_operands(GemmParams &p, const ingot_nvfp4_operand *a, const ingot_nvfp4_operand *b) {
  p.a_val = a->m.values;
  p.a_stride = a->m.values_stride;
  p.a_sf = a->m.scales;
  p.a_sf_block = a->m.scale_cols * 128;
  p.b_val = b->m.values;
  p.b_stride = b->m.values_stride;
  p.b_sf = b->m.scales;
  p.b_sf_block = b->m.scale_cols * 128;
  p.gs_a = a->global_scale;
  p.gs_b = b->global_scale;
  p.m = static_cast<int>(a->m.rows);
  p.n = static_cast<int>(b->m.rows);
  p.k = static_cast<int>(a->m.cols);
}

bool operands_aligned(const ingot_nvfp4_operand *a, const ingot_nvfp4_operand *b) {
  return aligned16(a->m.values, a->m.values_stride) && aligned16(b->m.values, b->m.values_stride) &&
         aligned16(a->m.scales, 0) && aligned16(b->m.scales, 0);
}

// The shapes the kernels' int tile counts and offsets hold (make_plan too).
bool in_int_range(int64_t m, int64_t n, int64_t k) {
  const int64_t lim = INT32_MAX - 1024;
  return m <= lim && n <= lim && k <= lim && (n + 127) / 128 <= 65535;
}

ingot_status check_int_range(struct ingot_context *ctx, const char *op, int64_t m, int64_t n,
                             int64_t k) {
  if (!in_int_range(m, n, k))
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "shape [%lld, %lld] x [%lld, %lld]: dimensions beyond 2^31 (or more "
                           "than 65535 column tiles) are not supported on CUDA",
                           static_cast<long long>(m), static_cast<long long>(k),
                           static_cast<long long>(n), static_cast<long long>(k));
  return INGOT_STATUS_SUCCESS;
}

} // namespace

/* Every instantiation a launch can pick (launch_gemm, the GeGLU), once per
 * context: cudaFuncSetAttribute is host work a call should not repeat. */
extern "C" void ingot_cuda_nvfp4_gemm_init(struct ingot_context *ctx) {
  set_smem_limit<kEpiGemm, 128>(ctx);
  set_smem_limit<kEpiGemm, 256>(ctx);
  set_smem_limit<kEpiGeglu, 128>(ctx);
  sm90_init(ctx);
}

ingot_status ingot_cuda_nvfp4_gemm_workspace_size(struct ingot_context *ctx, int64_t m, int64_t n,
                                                  int64_t k, size_t *bytes) {
  *bytes = 0;
  if (m <= 0 || n <= 0 || k <= 0) return INGOT_STATUS_SUCCESS;
  /* Beyond the int range the op fails NOT_SUPPORTED before it uses a
   * workspace (as the sampling queries give 0 for a V the device cannot
   * take); make_plan's int tile counts would not hold such a shape. */
  if (!in_int_range(m, n, k)) return INGOT_STATUS_SUCCESS;
  *bytes = make_plan(ctx, m, n, k, false).ws_bytes;
  /* the Hopper path where it runs; the sm_80 kernel takes operands it cannot read */
  if (sm90_usable(ctx)) *bytes = std::max(*bytes, sm90_plan(ctx, m, n, k, false).ws_bytes);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cuda_nvfp4_gemm(struct ingot_context *ctx, const ingot_nvfp4_operand *a,
                                   const ingot_nvfp4_operand *b, ingot_nvfp4_dense d,
                                   void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  static const char op[] = "ingot_nvfp4_gemm";
  ingot_status st = check_arch(ctx, op);
  if (st) return st;
  if ((st = check_int_range(ctx, op, a->m.rows, b->m.rows, a->m.cols))) return st;
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  GemmParams p = {};
  fill_operands(p, a, b);
  p.d = d.data;
  p.d_stride = d.stride;
  p.d_bf16 = d.dtype == INGOT_DTYPE_BF16;
  const int esize = p.d_bf16 ? 2 : 4;
  p.d_vec = (reinterpret_cast<uintptr_t>(d.data) % (2 * esize)) == 0 && (d.stride % 2) == 0;
  if (sm90_usable(ctx) && sm90_aligned(a, b))
    return sm90_launch(ctx, op, p, false, workspace, workspace_bytes, stream);
  const Plan pl = make_plan(ctx, a->m.rows, b->m.rows, a->m.cols, false);
  if ((st = check_smem(ctx, op, pl.bn))) return st;
  if (workspace_bytes < pl.ws_bytes)
    return ingot_core_fail(ctx, INGOT_STATUS_INSUFFICIENT_WORKSPACE, op,
                           "workspace_bytes: %zu, need %zu", workspace_bytes, pl.ws_bytes);
  p.k_tiles_per_split = pl.k_tiles_per_split;
  p.splits = pl.splits;
  if (pl.splits > 1) {
    const size_t partials = pl.ws_bytes - ((static_cast<size_t>(pl.m_tiles) * pl.n_tiles *
                                            sizeof(unsigned) + 255) & ~size_t(255));
    p.ws = static_cast<float *>(workspace);
    p.counters = reinterpret_cast<unsigned *>(static_cast<char *>(workspace) + partials);
    INGOT_CUDA_TRY(ctx, op,
                   cudaMemsetAsync(p.counters, 0,
                                   static_cast<size_t>(pl.m_tiles) * pl.n_tiles * sizeof(unsigned),
                                   stream));
  }
  return launch_gemm(ctx, op, p, pl, operands_aligned(a, b), stream);
}

ingot_status ingot_cuda_nvfp4_geglu_workspace_size(struct ingot_context *ctx, int64_t m,
                                                   int64_t hidden, int64_t k, size_t *bytes) {
  *bytes = 0;
  /* the sm_80 kernel needs none; the Hopper path its decoded x */
  if (m > 0 && sm90_usable(ctx) && in_int_range(m, 2 * hidden, k))
    *bytes = sm90_plan(ctx, m, 2 * hidden, k, true).ws_bytes;
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cuda_nvfp4_geglu(struct ingot_context *ctx, const ingot_nvfp4_operand *a,
                                    const ingot_nvfp4_operand *w, const ingot_nvfp4_packed *h,
                                    const float *h_global_scale, void *workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
  static const char op[] = "ingot_nvfp4_geglu";
  ingot_status st = check_arch(ctx, op);
  if (st) return st;
  if ((st = check_int_range(ctx, op, a->m.rows, w->m.rows, a->m.cols))) return st;
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  GemmParams p = {};
  fill_operands(p, a, w);
  p.h_val = h->values;
  p.h_stride = h->values_stride;
  p.h_sf = h->scales;
  p.h_sf_cols = h->scale_cols;
  p.h_vec = (reinterpret_cast<uintptr_t>(h->values) & 7u) == 0 && (h->values_stride & 7) == 0;
  p.gs_h = h_global_scale;
  if (sm90_usable(ctx) && sm90_aligned(a, w))
    return sm90_launch(ctx, op, p, true, workspace, workspace_bytes, stream);
  const Plan pl = make_plan(ctx, a->m.rows, w->m.rows, a->m.cols, true); // BN = 128
  if ((st = check_smem(ctx, op, 128))) return st;
  p.k_tiles_per_split = pl.k_tiles_per_split;
  p.splits = 1;
  return launch_bn<kEpiGeglu, 128>(ctx, op, p, pl, operands_aligned(a, w), stream);
}
