/*
 * What the NVFP4 GEMM main loops share (nvfp4_gemm.cu: the sm_80 / sm_90a
 * kernel that decodes both operands into shared memory; nvfp4_gemm_sm90.cu:
 * the Hopper kernel that decodes the weight into wgmma's register operand):
 * the kernel parameters, the NVFP4 -> bf16 decode, and the epilogue
 * arithmetic, so that every main loop ends in the same epilogue bits.
 */
#ifndef INGOT_CUDA_NVFP4_GEMM_COMMON_CUH
#define INGOT_CUDA_NVFP4_GEMM_COMMON_CUH

#include <cuda_bf16.h>

#include "common/nvfp4_ref.h"
#include "cuda/common.cuh"
#include "cuda/nvfp4/nvfp4_epilogue_math.cuh"

// wgmma where the device code is built for sm_90a, mma.sync elsewhere.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define INGOT_NVFP4_WGMMA 1
#else
#define INGOT_NVFP4_WGMMA 0
#endif

namespace ingot_nvfp4 {

// What the epilogue writes: the GEMM output, or GeGLU's NVFP4 h and its scales.
enum { kEpiGemm = 0, kEpiGeglu = 1 };

struct GemmParams {
  const uint8_t *a_val, *a_sf, *b_val, *b_sf;
  int64_t a_stride, b_stride;       // bytes between value rows
  int64_t a_sf_block, b_sf_block;   // bytes of scales per 128 rows (scale_cols * 128)
  const float *gs_a, *gs_b;
  int m, n, k;
  int k_tiles_per_split;
  int splits;
  // GEMM output
  void *d;
  int64_t d_stride; // elements
  int d_bf16;
  int d_vec; // 1: 8-byte (f32) / 4-byte (bf16) pair stores are aligned
  float *ws;
  unsigned *counters;
  // GeGLU output
  uint8_t *h_val, *h_sf;
  int64_t h_stride;   // bytes
  int64_t h_sf_cols;  // padded scale columns of h
  int h_vec;          // 1: 8-byte aligned h value blocks
  const float *gs_h;
  // sm90 weight-in-registers paths: A decoded to bf16, as tile images (rows of A a tile:
  // xb_nx; nvfp4_gemm_sm90.cu) or rows of xb_stride bytes (nvfp4_gemm_sm90_lockstep.cu)
  uint8_t *xb;
  int xb_nx;
  int64_t xb_stride;
};

// ---- PTX helpers ---------------------------------------------------------------------

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// a * b (+ -0.0) on bf16x2, one rounding (exact here)
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

// The accumulator operands of a wgmma m64nN: "+f" for each of the N / 8 fragments of
// 4 floats of d, in order (PTX takes every accumulator register as its own operand).
#define INGOT_WGMMA_F1(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define INGOT_WGMMA_F2(d, i) INGOT_WGMMA_F1(d, i), INGOT_WGMMA_F1(d, i + 1)
#define INGOT_WGMMA_F4(d, i) INGOT_WGMMA_F2(d, i), INGOT_WGMMA_F2(d, i + 2)
#define INGOT_WGMMA_F8(d, i) INGOT_WGMMA_F4(d, i), INGOT_WGMMA_F4(d, i + 4)
#define INGOT_WGMMA_F16(d, i) INGOT_WGMMA_F8(d, i), INGOT_WGMMA_F8(d, i + 8)
#define INGOT_WGMMA_ACC1(d) INGOT_WGMMA_F1(d, 0)
#define INGOT_WGMMA_ACC2(d) INGOT_WGMMA_F2(d, 0)
#define INGOT_WGMMA_ACC4(d) INGOT_WGMMA_F4(d, 0)
#define INGOT_WGMMA_ACC8(d) INGOT_WGMMA_F8(d, 0)
#define INGOT_WGMMA_ACC16(d) INGOT_WGMMA_F16(d, 0)
#define INGOT_WGMMA_ACC20(d) INGOT_WGMMA_F16(d, 0), INGOT_WGMMA_F4(d, 16)
#define INGOT_WGMMA_ACC24(d) INGOT_WGMMA_F16(d, 0), INGOT_WGMMA_F8(d, 16)
#define INGOT_WGMMA_ACC26(d) INGOT_WGMMA_ACC24(d), INGOT_WGMMA_F2(d, 24)
#define INGOT_WGMMA_ACC28(d) INGOT_WGMMA_ACC24(d), INGOT_WGMMA_F4(d, 24)
#define INGOT_WGMMA_ACC31(d) INGOT_WGMMA_ACC28(d), INGOT_WGMMA_F2(d, 28), INGOT_WGMMA_F1(d, 30)
#define INGOT_WGMMA_ACC32(d) INGOT_WGMMA_F16(d, 0), INGOT_WGMMA_F16(d, 16)

#if INGOT_NVFP4_WGMMA
// Shared-memory matrix descriptor: K-major, 128-byte swizzle (8 rows x 128 B atoms,
// 1024 B apart), start address 16-byte units; LBO unused for this layout.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3ffffu) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait1() {
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
// Generic-proxy shared-memory writes (the decode) made visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accumulator accesses across wgmma issue / wait.
template <class A>
__device__ __forceinline__ void fence_acc(A &acc) {
  float *f = reinterpret_cast<float *>(&acc);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(A) / sizeof(float)); i++)
    asm volatile("" : "+f"(f[i])::"memory");
}
#endif

// ---- decode -------------------------------------------------------------------------

// bf16x2 of (sf * 2^119), exact (E4M3 has 3 mantissa bits; 448 * 2^119 < 2^128).
// A NaN byte gives a NaN.
__device__ __forceinline__ uint32_t scale_bf16x2(uint8_t sf) {
  const float s = ingot_fmul_rn(ingot_e4m3_to_f32(sf), 6.64613997892457936451903530140172288e35f);
  const uint32_t h = __float_as_uint(s) >> 16;
  return h | (h << 16);
}

// 8 nibbles of x -> 4 bf16x2 words of e2m1 * 2^-126 (pairs (0,4) (1,5) (2,6) (3,7)),
// each multiplied by s2.
__device__ __forceinline__ void decode8(uint32_t x, uint32_t s2, uint32_t w[4]) {
  const uint32_t kMag = 0x01C001C0u, kSign = 0x80008000u;
  w[0] = bf16x2_mul(((x << 6) & kMag) | ((x << 12) & kSign), s2);
  w[1] = bf16x2_mul(((x << 2) & kMag) | ((x << 8) & kSign), s2);
  w[2] = bf16x2_mul(((x >> 2) & kMag) | ((x << 4) & kSign), s2);
  w[3] = bf16x2_mul(((x >> 6) & kMag) | (x & kSign), s2);
}

// Row m, K-tile kt of A (32 value bytes, 4 scale bytes of the swizzled layout) decoded
// for the Hopper loops' decode kernels: w[t] are the decode8 pairs of block t, and
// row_word(w, q) the q-th 16 bytes of the row in the main loops' K order.
__device__ __forceinline__ void decode_a_ktile(const GemmParams &p, int m, int kt,
                                               uint32_t (&w)[4][8]) {
  const uint4 *src = reinterpret_cast<const uint4 *>(p.a_val + static_cast<int64_t>(m) * p.a_stride + kt * 32);
  const uint4 v0 = __ldg(src), v1 = __ldg(src + 1);
  const uint32_t sf4 = __ldg(reinterpret_cast<const uint32_t *>(
      p.a_sf + static_cast<int64_t>(m >> 7) * p.a_sf_block + static_cast<int64_t>(kt) * 512 +
      (m & 31) * 16 + ((m >> 5) & 3) * 4));
  const uint32_t words[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
  for (int t = 0; t < 4; t++) {
    const uint32_t s2 = scale_bf16x2(static_cast<uint8_t>(sf4 >> (8 * t)));
    decode8(words[2 * t], s2, w[t]);
    decode8(words[2 * t + 1], s2, w[t] + 4);
  }
}
__device__ __forceinline__ uint4 row_word(const uint32_t (&w)[4][8], int q) {
  const int j = 2 * (q >> 1) + (q & 1);
  return make_uint4(w[0][j], w[1][j], w[2][j], w[3][j]);
}

// This thread's register operand of a K-tile of the weight for the Hopper loops: rows
// wr0 and wr0 + 8 of the tile's 128 (packed values at wt, 32 bytes a row; the 512
// swizzled scale bytes at wt + 4096; lut: the bf16x2 of every scale byte), block t of
// each, as the four k16 fragments a[s] of wgmma's A operand.
__device__ __forceinline__ void decode_w_fragment(const uint8_t *wt, const uint32_t *lut, int wr0,
                                                  int t, uint32_t (&a)[4][4]) {
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
}

// ---- epilogue arithmetic ---------------------------------------------------------------

// alpha = 1 / (gsA * gsB); NaN when either global scale is unusable (not
// finite or not > 0), the header's rule, as on the CPU.
__device__ __forceinline__ float alpha_of(const GemmParams &p) {
  const float ga = *p.gs_a, gb = *p.gs_b;
  if (!ingot_nvfp4_gs_valid(ga) || !ingot_nvfp4_gs_valid(gb))
    return ingot_bits_f32(INGOT_NVFP4_CANONICAL_NAN);
  return ingot_fdiv_rn(1.0f, ingot_fmul_rn(ga, gb));
}

// The accumulator carries 2^-14 (two decoded operands of 2^-7 each).
__device__ __forceinline__ float unscale(float acc) { return ingot_fmul_rn(acc, 16384.0f); }

__device__ __forceinline__ void store_pair(const GemmParams &p, int row, int col, float v0,
                                           float v1) {
  if (p.d_bf16) {
    uint16_t *d = static_cast<uint16_t *>(p.d) + static_cast<int64_t>(row) * p.d_stride + col;
    const uint16_t h0 = ingot_f32_to_bf16(v0), h1 = ingot_f32_to_bf16(v1);
    if (p.d_vec) {
      *reinterpret_cast<uint32_t *>(d) = static_cast<uint32_t>(h0) | (static_cast<uint32_t>(h1) << 16);
    } else {
      d[0] = h0, d[1] = h1;
    }
  } else {
    // NaN as the canonical 0x7FC00000, like the CPU backend
    if (!(v0 == v0)) v0 = __uint_as_float(INGOT_NVFP4_CANONICAL_NAN);
    if (!(v1 == v1)) v1 = __uint_as_float(INGOT_NVFP4_CANONICAL_NAN);
    float *d = static_cast<float *>(p.d) + static_cast<int64_t>(row) * p.d_stride + col;
    if (p.d_vec) {
      *reinterpret_cast<float2 *>(d) = make_float2(v0, v1);
    } else {
      d[0] = v0, d[1] = v1;
    }
  }
}

// |x| if finite, else 0 (the block amax ignores NaN / Inf)
__device__ __forceinline__ float finite_abs(float x) {
  return ingot_f32_finite(x) ? fabsf(x) : 0.0f;
}


// One h block of the GeGLU epilogue: src holds the 16 (gate, up) accumulator pairs of
// output row `row`, h block column hb; h = gelu_tanh(g) * u with the CPU's operations
// (ingot_gelu_tanh; a branch-free copy of the same operation sequence when every |y| of
// the warp is <= 69), quantized by ingot_nvfp4_ref_block's rule with gs (fast-path IEEE
// divisions when the operands are in range), 8 value bytes and the scale byte stored.
// Rows >= M (!row_ok) get scale 0 and no value bytes; sf_ok: the scale row exists (rows
// below the padded scale height). Every lane of the warp calls it (__all_sync).
__device__ __forceinline__ void geglu_block(const GemmParams &p, const float4 *src, int row,
                                            bool row_ok, bool sf_ok, int hb, float alpha, float gs,
                                            bool gs_nice) {
  float gv[16], uv[16];
#pragma unroll
  for (int v = 0; v < 8; v++) {
    float4 x = src[v];
    if (!row_ok) x = make_float4(0.0f, 0.0f, 0.0f, 0.0f); // rows >= M: never stored
    gv[2 * v] = ingot_fmul_rn(unscale(x.x), alpha), uv[2 * v] = ingot_fmul_rn(unscale(x.y), alpha);
    gv[2 * v + 1] = ingot_fmul_rn(unscale(x.z), alpha);
    uv[2 * v + 1] = ingot_fmul_rn(unscale(x.w), alpha);
  }
  // h = gelu(g) * u: branch-free unless some |y| > 69 in the warp (the branch is
  // warp-uniform and outside the 16 independent chains)
  bool fast = true;
#pragma unroll
  for (int e = 0; e < 16; e++) fast = fast && gelu_fast_ok(gelu_y(gv[e]));
  float h[16];
  if (__all_sync(0xffffffffu, fast)) {
#pragma unroll
    for (int e = 0; e < 16; e++) h[e] = ingot_fmul_rn(gelu_fast(gv[e], gelu_y(gv[e])), uv[e]);
  } else {
#pragma unroll
    for (int e = 0; e < 16; e++) h[e] = ingot_fmul_rn(ingot_gelu_tanh(gv[e]), uv[e]);
  }
  // the block: ingot_nvfp4_ref_block with gs
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 16; e++) amax = fmaxf(amax, finite_abs(h[e]));
  // sf = E4M3(gs * (amax / 6)), r = gs / sf: fast-path divisions when amax is 0 or in
  // [2^-100, 2^100] and gs in [2^-60, 2^60] for the whole warp, the reference otherwise
  const bool nice = gs_nice && (amax == 0.0f || (amax >= 0x1p-100f && amax <= 0x1p100f));
  uint8_t sf;
  float rr;
  if (__all_sync(0xffffffffu, nice)) {
    sf = e4m3_from_f32(ingot_fmul_rn(gs, fdiv_fast(amax, 6.0f)));
    rr = fdiv_fast(gs, e4m3_to_f32(sf ? sf : 0x38)); // unused when sf == 0
  } else {
    sf = ingot_nvfp4_block_scale(gs, amax);
    rr = sf ? ingot_fdiv_rn(gs, ingot_e4m3_to_f32(sf)) : 0.0f;
  }
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int e = 0; e < 16; e++)
    w[e >> 3] |= static_cast<uint32_t>(ingot_f32_to_e2m1(ingot_fmul_rn(h[e], rr))) << (4 * (e & 7));
  if (sf == 0) w[0] = w[1] = 0u;
  if (row_ok) {
    uint8_t *dst = p.h_val + static_cast<int64_t>(row) * p.h_stride + hb * 8;
    if (p.h_vec) {
      *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; i++) dst[i] = static_cast<uint8_t>(w[i >> 2] >> (8 * (i & 3)));
    }
  }
  if (sf_ok) p.h_sf[ingot_nvfp4_swizzle_offset(row, hb, p.h_sf_cols)] = row_ok ? sf : 0;
}

// ---- host side of the Hopper path (nvfp4_gemm_sm90.cu) ------------------------------

// Its plan for D [m, n] = A [m, k] B [n, k]^T: CTA tiles of nx rows of A by 128 rows
// of B, split-K for the plain GEMM when the tiles leave SMs idle.
struct Sm90Plan {
  int nx, x_tiles, w_tiles, splits, k_tiles_per_split;
  size_t xb_bytes; // the decoded A at the front of the workspace
  size_t ws_bytes; // all of it: decoded A, split-K partials, tile counters
};
// Whether a context runs the Hopper path: an sm_90a device with the kernels' sm_90a code.
bool sm90_usable(const struct ingot_context *ctx);
Sm90Plan sm90_plan(const struct ingot_context *ctx, int64_t m, int64_t n, int64_t k, bool geglu);
// The operands' layouts that the path reads with vector loads.
bool sm90_aligned(const ingot_nvfp4_operand *a, const ingot_nvfp4_operand *b);
// Plans and launches the decode of A and the GEMM (geglu: with the GeGLU epilogue). p
// holds the operands and the outputs; INSUFFICIENT_WORKSPACE below the plan's size.
ingot_status sm90_launch(struct ingot_context *ctx, const char *op, GemmParams p, bool geglu,
                         void *workspace, size_t workspace_bytes, cudaStream_t stream);
void sm90_init(struct ingot_context *ctx);
// What both Hopper loops share (defined in nvfp4_gemm_sm90.cu):
// - the plan of CTA tiles of nx rows of A by 128 rows of B: the plain GEMM splits K
//   while a wave of `slots` CTAs is less than ~80% full and each split keeps >= 8
//   K-tiles, a split being a multiple of `unroll` K-tiles; the workspace holds xb_rows
//   rows of decoded A, then the split-K partials and tile counters;
// - the launch of a kernel as a programmatic dependent of the decode of A (it waits for
//   that grid before it reads A) on the plan's grid;
// - the shared-memory limit of a kernel's GEMM and GeGLU instances.
typedef void (*Sm90Kernel)(const GemmParams);
Sm90Plan sm90_tiling(int nx, int64_t m, int64_t n, int64_t k, bool geglu, int64_t slots,
                     int unroll, int64_t xb_rows);
ingot_status sm90_launch_dependent(struct ingot_context *ctx, const char *op, Sm90Kernel kernel,
                                   const GemmParams &p, const Sm90Plan &pl, int threads,
                                   int smem, cudaStream_t stream);
cudaError_t sm90_set_smem(Sm90Kernel gemm, Sm90Kernel geglu, int smem);
// The small tiles (NX <= 64) of the plan, its launch (workspace checked by the caller)
// and their per-context set-up (nvfp4_gemm_sm90_lockstep.cu).
Sm90Plan sm90_small_plan(const struct ingot_context *ctx, int64_t m, int64_t n, int64_t k,
                         bool geglu);
ingot_status sm90_small_launch(struct ingot_context *ctx, const char *op, GemmParams p,
                               const Sm90Plan &pl, bool geglu, void *workspace,
                               cudaStream_t stream);
bool sm90_small_init();

} // namespace ingot_nvfp4

#endif /* INGOT_CUDA_NVFP4_GEMM_COMMON_CUH */
