/*
 * The epilogue of both Hopper main loops (nvfp4_gemm_sm90.cu, warp-specialised;
 * nvfp4_gemm_sm90_lockstep.cu, small tiles): the two loops leave the same
 * accumulator layout in the same two consumer warpgroups, so one epilogue
 * stages it through shared memory and writes the GEMM output (summing split-K
 * partials in split order) or the GeGLU output with its scales. The loops
 * differ only in which threads take part: `Sync` is their barrier over the
 * 256 consumer threads (tid 0..255).
 */
#ifndef INGOT_CUDA_NVFP4_SM90_EPILOGUE_CUH
#define INGOT_CUDA_NVFP4_SM90_EPILOGUE_CUH

#include "cuda/nvfp4/nvfp4_gemm_common.cuh"

namespace ingot_nvfp4 {

constexpr int kSm90RowsB = 128;              // rows of B (output columns) a CTA: 64 a warpgroup
constexpr int kSm90Stride = kSm90RowsB + 4;  // staging floats a row of A (conflict-free)
constexpr int kSm90EpiThreads = 256;         // the two consumer warpgroups

// The staging tile [NX rows of A][128 rows of B] of fp32.
template <int NX>
constexpr int sm90_staging_bytes() { return NX * kSm90Stride * 4; }

// accs: this thread's m64nNX fragments (rows wr0 and wr0 + 8 of B, columns 2t, 2t + 1 of
// each n8 block), one set a chain of wgmma, summed here in chain order; stage: shared
// memory the main loop no longer reads once `sync` returns.
template <int NX, int kEpi, int kChains, class Sync>
__device__ __forceinline__ void sm90_epilogue(const GemmParams &p,
                                              float (&accs)[kChains][NX / 8][4], float *stage,
                                              int tid, int wr0, int t, int m0, int n0, Sync sync) {
  constexpr int kRowsB = kSm90RowsB, kStride = kSm90Stride, kThreads = kSm90EpiThreads;
  static_assert(kChains == 1 || kChains == 2, "one or two accumulator chains");
  float(&acc)[NX / 8][4] = accs[0];
  if constexpr (kChains == 2) {
#pragma unroll
    for (int j = 0; j < NX / 8; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) acc[j][q] = ingot_fadd_rn(acc[j][q], accs[1][j][q]);
  }
  sync(); // both warpgroups' wgmma have read the ring
#pragma unroll
  for (int j = 0; j < NX / 8; j++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      stage[(8 * j + 2 * t + e) * kStride + wr0] = acc[j][e];
      stage[(8 * j + 2 * t + e) * kStride + wr0 + 8] = acc[j][2 + e];
    }
  sync();
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
      sync();
      if (tid == 0) {
        const unsigned old = atomicAdd(p.counters + tile, 1u);
        last = old == static_cast<unsigned>(p.splits - 1);
        if (last) p.counters[tile] = 0; // ready for the next call / graph replay
      }
      sync();
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
      sync();
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
}

} // namespace ingot_nvfp4

#endif
