/*
 * NVFP4 GEMM and the fused gate/up GEMM + GeGLU + re-quantize on Hopper
 * (sm_90a), with the weight decoded straight into wgmma's register operand.
 *
 * The product is computed transposed: D^T [n, m] = B [n, k] A [m, k]^T, so
 * that the weight B (the large operand: N x K, read once from memory) is
 * wgmma's A operand, which may come from registers, and the activations A are
 * the shared-memory operand. Two launches:
 *
 *   nvfp4_decode_a_kernel  A (NVFP4) -> bf16 [M, K] in the workspace, each
 *                 element decoded once (the sm_80 kernel decodes a row tile of
 *                 A again in every column tile). Within each K-tile of 64 the
 *                 columns are permuted to the order in which the main loop's
 *                 register decode delivers the weight's K (below); the dot
 *                 products are unchanged.
 *   nvfp4_sm90_kernel<NX, kEpi>  CTA tile 128 rows of B x NX rows of A (NX =
 *                 8 ... 256 by M, wgmma m64nNXk16), 256 threads = two
 *                 warpgroups of 64 rows of B each. Per K-tile of 64:
 *                 - the bf16 A tile [NX][64] (128-byte rows, 16-byte chunks
 *                   XOR-swizzled by row & 7: the layout of wgmma's 128-byte
 *                   swizzle) and B's packed values [128][32] and scales (one
 *                   512-byte chunk) come through a cp.async ring of kStages
 *                   buffers, kStages - 2 K-tiles ahead (5 to 12 by NX: deep
 *                   enough at small M to keep HBM busy);
 *                 - each thread takes the 8 value bytes and the scale byte of
 *                   one 16-element block of each of its two weight rows (g,
 *                   g + 8 of its warp's 16) from the ring and decodes them
 *                   (nvfp4_gemm_common.cuh's decode8: shifts,
 *                   masks and one bf16x2 multiply by the block scale) into the
 *                   four k16 A fragments of the K-tile and issues four wgmma
 *                   with A from registers, then waits for the previous
 *                   K-tile's wgmma (two A fragment sets alternate).
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

namespace ingot_nvfp4 {
namespace {

constexpr int kThreads = 256;   // two warpgroups
constexpr int kRowsB = 128;     // rows of B (output columns) a CTA: 64 a warpgroup
constexpr int kUnroll = 2;      // K-tiles a loop step: the two A fragment sets alternate
constexpr int kStride = kRowsB + 4; // epilogue staging floats a row of A (conflict-free)
enum { kEpiGemm = 0, kEpiGeglu = 1 };

template <int NX>
struct Cfg {
  static_assert(NX == 8 || NX == 16 || NX == 32 || NX == 64 || NX == 128 || NX == 256, "NX");
  // a stage: the bf16 A tile [NX][64], then B's packed values [128][32] and its 512 scale
  // bytes, padded to 1 KiB (the next A tile stays 1024-byte aligned)
  static constexpr int kStages = NX >= 256 ? 5 : NX >= 64 ? 8 : 12; // K-tiles in flight + 2
  static constexpr int kTileA = NX * 128;
  static constexpr int kStageBytes = kTileA + 5120;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kStagingBytes = NX * kStride * 4;
  static constexpr int kLut = kPipeBytes > kStagingBytes ? kPipeBytes : kStagingBytes;
  static constexpr int kSmem = kLut + 1024 + 1024; // + the scale table + 1024-byte alignment
  static constexpr int kMinBlocks = NX >= 128 ? 1 : 2;
  typedef float Acc[NX / 8][4];
};

int nx_of(int64_t m) {
  return m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : m <= 128 ? 128 : 256;
}
int min_blocks_of(int nx) { return nx >= 128 ? 1 : 2; }

// ---- decode of A ---------------------------------------------------------------------

// One thread a (row, K-tile): 32 value bytes and 4 scale bytes in, 64 bf16 out, in the
// main loop's K order: bf16x2 word 8s + 4h + t of the K-tile = W_t[2s + h], where W_t
// are the decode8 pairs of block t.
__global__ void __launch_bounds__(256) nvfp4_decode_a_kernel(const GemmParams p) {
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
    const uint4 *src = reinterpret_cast<const uint4 *>(p.a_val + static_cast<int64_t>(m) * p.a_stride + kt * 32);
    const uint4 v0 = __ldg(src), v1 = __ldg(src + 1);
    const uint32_t sf4 = __ldg(reinterpret_cast<const uint32_t *>(
        p.a_sf + static_cast<int64_t>(m >> 7) * p.a_sf_block + static_cast<int64_t>(kt) * 512 +
        (m & 31) * 16 + ((m >> 5) & 3) * 4));
    const uint32_t words[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    uint32_t w[4][8];
#pragma unroll
    for (int t = 0; t < 4; t++) {
      const uint32_t s2 = scale_bf16x2(static_cast<uint8_t>(sf4 >> (8 * t)));
      decode8(words[2 * t], s2, w[t]);
      decode8(words[2 * t + 1], s2, w[t] + 4);
    }
    uint4 *dst = reinterpret_cast<uint4 *>(p.xb + static_cast<int64_t>(m) * p.xb_stride + kt * 128);
#pragma unroll
    for (int q = 0; q < 8; q++) {
      const int j = 2 * (q >> 1) + (q & 1);
      dst[q] = make_uint4(w[0][j], w[1][j], w[2][j], w[3][j]);
    }
  }
}

// ---- the main loop -------------------------------------------------------------------

#if INGOT_NVFP4_WGMMA
// D (64 x N per warpgroup, fp32) += A (64 x 16, registers: the m16n8k16 A fragment of
// each warp's 16 rows) * B (N x 16, shared memory, K-major, 128-byte swizzle)^T.
__device__ __forceinline__ void wgmma_rs(float (&d)[32][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]),
        "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]),
        "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]),
        "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]),
        "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]),
        "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]),
        "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]),
        "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]),
        "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]),
        "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]),
        "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]),
        "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]),
        "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]),
        "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]),
        "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]),
        "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]),
        "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}

__device__ __forceinline__ void wgmma_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}

__device__ __forceinline__ void wgmma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}

__device__ __forceinline__ void wgmma_rs(float (&d)[4][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}

__device__ __forceinline__ void wgmma_rs(float (&d)[2][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7"
      "}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}

__device__ __forceinline__ void wgmma_rs(float (&d)[1][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3"
      "}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}
#endif

template <int NX, int kEpi>
__global__ void __launch_bounds__(kThreads, Cfg<NX>::kMinBlocks) nvfp4_sm90_kernel(const GemmParams p) {
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
      const uint8_t *wt = smem + slot * C::kStageBytes + C::kTileA;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = wr0 + 8 * h;
        const uint2 v = *reinterpret_cast<const uint2 *>(wt + r * 32 + 8 * t);
        const uint32_t s2 = lut[wt[4096 + (r & 31) * 16 + ((r >> 5) & 3) * 4 + t]];
        uint32_t w[8];
        decode8(v.x, s2, w);
        decode8(v.y, s2, w + 4);
#pragma unroll
        for (int s = 0; s < 4; s++) a[s][h] = w[2 * s], a[s][2 + h] = w[2 * s + 1];
      }
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
  typename C::Acc &acc = accs[0];
  if constexpr (kChains == 2) {
#pragma unroll
    for (int j = 0; j < NX / 8; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[j][q] = ingot_fadd_rn(acc[j][q], accs[1][j][q]);
  }

  // ---- epilogue: stage the accumulator as fp32 [NX rows of A][128 rows of B] ----
  float *stage = reinterpret_cast<float *>(smem);
  __syncthreads(); // every warpgroup's wgmma has read the ring
  {
    const int wc = (tid >> 7) * 64 + ((tid >> 5) & 3) * 16 + g;
#pragma unroll
    for (int j = 0; j < NX / 8; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        stage[(8 * j + 2 * t + e) * kStride + wc] = acc[j][e];
        stage[(8 * j + 2 * t + e) * kStride + wc + 8] = acc[j][2 + e];
      }
  }
  __syncthreads();
  const float alpha = alpha_of(p);
  if constexpr (kEpi == kEpiGemm) {
    constexpr int kVec = NX * kRowsB / 4; // float4 of the staged tile
    if (p.splits > 1) {
      // write this split's partial; the CTA that finishes the tile sums them in split order
      __shared__ unsigned last;
      const int tile = blockIdx.y * gridDim.x + blockIdx.x;
      float4 *base = reinterpret_cast<float4 *>(p.ws) + static_cast<int64_t>(tile) * p.splits * kVec;
      float4 *mine = base + static_cast<int64_t>(blockIdx.z) * kVec;
      for (int i = tid; i < kVec; i += kThreads)
        __stcg(mine + i, *reinterpret_cast<const float4 *>(stage + (i >> 5) * kStride + 4 * (i & 31)));
      __threadfence();
      __syncthreads();
      if (tid == 0) {
        const unsigned old = atomicAdd(p.counters + tile, 1u);
        last = old == static_cast<unsigned>(p.splits - 1);
        if (last) p.counters[tile] = 0; // ready for the next call / graph replay
      }
      __syncthreads();
      if (!last) return;
      __threadfence();
      for (int i = tid; i < kVec; i += kThreads) {
        float4 s = __ldcg(base + i);
        for (int z = 1; z < p.splits; z++) {
          const float4 v = __ldcg(base + static_cast<int64_t>(z) * kVec + i);
          s.x = ingot_fadd_rn(s.x, v.x), s.y = ingot_fadd_rn(s.y, v.y);
          s.z = ingot_fadd_rn(s.z, v.z), s.w = ingot_fadd_rn(s.w, v.w);
        }
        *reinterpret_cast<float4 *>(stage + (i >> 5) * kStride + 4 * (i & 31)) = s;
      }
      __syncthreads();
    }
    for (int i = tid; i < NX * kRowsB / 2; i += kThreads) {
      const int r = i >> 6, c = 2 * (i & 63);
      const int row = m0 + r, col = n0 + c;
      if (row < p.m && col < p.n) {
        const float2 v = *reinterpret_cast<const float2 *>(stage + r * kStride + c);
        store_pair(p, row, col, ingot_fmul_rn(unscale(v.x), alpha), ingot_fmul_rn(unscale(v.y), alpha));
      }
    }
  } else {
    const float gs = *p.gs_h;
    const bool gs_nice = gs >= 0x1p-60f && gs <= 0x1p60f; // also false for NaN
    const int rp = (p.m + 127) & ~127;                    // scale rows of h
    constexpr int kItems = NX * 4;                         // (row, h block): 4 h blocks a tile
    static_assert(kItems % 32 == 0, "whole warps");
#pragma unroll 1
    for (int i = tid; i < kItems; i += kThreads) {
      const int r = i % NX, b = i / NX;
      const int row = m0 + r, hb = (n0 >> 5) + b;
      const bool col_ok = n0 + 32 * b < p.n; // N % 64 == 0: whole h blocks
      geglu_block(p, reinterpret_cast<const float4 *>(stage + r * kStride + 32 * b), row,
                  col_ok && row < p.m, col_ok && row < rp, hb, alpha, gs, gs_nice);
    }
    // scale rows no tile covers (NX < 128: [x_tiles * NX, rp)) are zero; so are the
    // padding scale columns
    const bool last_x = blockIdx.x + 1 == gridDim.x;
    const int row_end = last_x ? rp : min(m0 + NX, rp);
    if (last_x && m0 + NX < rp) {
      const int extra = rp - (m0 + NX), blocks = min(4, (p.n - n0) / 32);
      for (int i = tid; i < extra * blocks; i += kThreads)
        p.h_sf[ingot_nvfp4_swizzle_offset(m0 + NX + i / blocks, (n0 >> 5) + i % blocks, p.h_sf_cols)] = 0;
    }
    if (n0 + kRowsB >= p.n) {
      const int h_blocks = p.n / 32, pad = static_cast<int>(p.h_sf_cols) - h_blocks;
      const int rows = row_end - m0;
      for (int i = tid; i < rows * pad; i += kThreads)
        p.h_sf[ingot_nvfp4_swizzle_offset(m0 + i / pad, h_blocks + i % pad, p.h_sf_cols)] = 0;
    }
  }
#else
  (void)p; // sm90_usable() keeps launches of this kernel to its sm_90a code
#endif
}

} // namespace

// ---- host side ---------------------------------------------------------------------------

bool sm90_usable(const struct ingot_context *ctx) { return ctx->cuda->nvfp4_sm90 != 0; }

Sm90Plan sm90_plan(const struct ingot_context *ctx, int64_t m, int64_t n, int64_t k, bool geglu) {
  Sm90Plan pl;
  pl.nx = nx_of(m);
  pl.x_tiles = static_cast<int>((m + pl.nx - 1) / pl.nx);
  pl.w_tiles = static_cast<int>((n + kRowsB - 1) / kRowsB);
  const int k_tiles = static_cast<int>(k / 64);
  const int64_t tiles = static_cast<int64_t>(pl.x_tiles) * pl.w_tiles;
  const int64_t slots = static_cast<int64_t>(ctx->sm_count > 0 ? ctx->sm_count : 1) * min_blocks_of(pl.nx);
  int splits = 1;
  // split K (the plain GEMM) while a wave is less than ~80% full and each split keeps
  // >= 8 K-tiles
  while (!geglu && splits < 16 && tiles * splits * 5 < slots * 4 && k_tiles / (splits * 2) >= 8)
    splits *= 2;
  const int per = (k_tiles + splits - 1) / splits;
  pl.k_tiles_per_split = (per + kUnroll - 1) / kUnroll * kUnroll;
  pl.splits = (k_tiles + pl.k_tiles_per_split - 1) / pl.k_tiles_per_split;
  pl.xb_bytes = (static_cast<size_t>(m) * static_cast<size_t>(k) * 2 + 255) & ~size_t(255);
  pl.ws_bytes = pl.xb_bytes;
  if (pl.splits > 1)
    pl.ws_bytes += static_cast<size_t>(tiles) * pl.splits * pl.nx * kRowsB * sizeof(float) +
                   ((static_cast<size_t>(tiles) * sizeof(unsigned) + 255) & ~size_t(255));
  return pl;
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
  // a programmatic dependent of the decode of A (the kernel waits for it before reading A)
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3(pl.x_tiles, pl.w_tiles, pl.splits);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = Cfg<NX>::kSmem;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  INGOT_CUDA_TRY(ctx, op, cudaLaunchKernelEx(&cfg, geglu ? nvfp4_sm90_kernel<NX, kEpiGeglu>
                                                         : nvfp4_sm90_kernel<NX, kEpiGemm>, p));
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status sm90_launch(struct ingot_context *ctx, const char *op, GemmParams p, const Sm90Plan &pl,
                         bool geglu, void *workspace, cudaStream_t stream) {
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
  nvfp4_decode_a_kernel<<<ingot_cuda_grid(ctx, items, 256, 8), 256, 0, stream>>>(p);
  ingot_status st = ingot_cuda_check_launch(ctx, op);
  if (st) return st;
  switch (pl.nx) {
  case 8: return launch_nx<8>(ctx, op, p, pl, geglu, stream);
  case 16: return launch_nx<16>(ctx, op, p, pl, geglu, stream);
  case 32: return launch_nx<32>(ctx, op, p, pl, geglu, stream);
  case 64: return launch_nx<64>(ctx, op, p, pl, geglu, stream);
  case 128: return launch_nx<128>(ctx, op, p, pl, geglu, stream);
  default: return launch_nx<256>(ctx, op, p, pl, geglu, stream);
  }
}

template <int NX>
cudaError_t set_limits() {
  cudaError_t e = cudaFuncSetAttribute(nvfp4_sm90_kernel<NX, kEpiGemm>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<NX>::kSmem);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(nvfp4_sm90_kernel<NX, kEpiGeglu>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<NX>::kSmem);
  return e;
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
  cudaError_t e = set_limits<8>();
  if (e == cudaSuccess) e = set_limits<16>();
  if (e == cudaSuccess) e = set_limits<32>();
  if (e == cudaSuccess) e = set_limits<64>();
  if (e == cudaSuccess) e = set_limits<128>();
  if (e == cudaSuccess) e = set_limits<256>();
  cudaGetLastError();
  ctx->cuda->nvfp4_sm90 = e == cudaSuccess;
}

} // namespace ingot_nvfp4
