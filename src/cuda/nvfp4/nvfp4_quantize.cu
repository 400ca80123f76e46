/*
 * NVFP4 on CUDA: quantize, dequantize, global scale, scale swizzling
 * (the rules are stated in include/ingot/ingot.h; the reference arithmetic
 * is common/nvfp4_ref.h, shared with the CPU backend).
 *
 * Kernels
 *   quantize_kernel<D, kInterleave, kMode>
 *                           one thread per 16-element block, threads laid out
 *                           (scale column, row) over the PADDED scale grid
 *                           round_up(rows,128) x round_up(cols/16,4), so the
 *                           padding scale bytes are written (0) by the same
 *                           launch. A thread loads its block with 16-byte
 *                           loads (2 for bf16/fp16, 4 for fp32), stores its 8
 *                           code bytes with one 8-byte store (a warp writes
 *                           256 contiguous bytes) and one scale byte. Fast
 *                           path (finite block, finite multiplier): integer
 *                           max of |x| bits (VIMNMX3 on sm_90), E4M3 through
 *                           cvt.rn.satfinite on sm_89+, the branch-free E2M1
 *                           encoder ingot_e2m1_pack8_minmagic and sign bytes
 *                           gathered with byte permutes (common/numeric.h,
 *                           checked against the reference on the CPU). A
 *                           non-finite input or an overflowing multiplier sends
 *                           the block to ingot_nvfp4_ref_block (which counts).
 *                           kMode (QuantizeMode): kQuantizeResident, the
 *                           default, is a grid of resident blocks looping over
 *                           rows with the next row's load issued before the
 *                           current block is encoded. Measured on an H200
 *                           (bf16, % of a D2D copy moving the same bytes):
 *                           [16384,16384] one pass 75.7%, resident 81.9-82.4%,
 *                           resident without prefetch 81.5%; [968,16384]
 *                           75.1%, 79.0-79.3%, 74.0%. kInterleave: gate/up
 *                           rows (row 2j+1 from the second matrix).
 *   dequantize_kernel<D>    one thread per block: one 8-byte value load, one
 *                           scale byte, 16-byte stores. The 8 possible
 *                           magnitudes of the block are computed once (2
 *                           IEEE divisions, scaled by exact powers of two when
 *                           that is provably exact, else 7 divisions) and
 *                           looked up per element with byte permutes
 *                           (bf16 out: 84-85% of copy on an H200).
 *   amax_kernel<V>          max of |x| over finite x, reduced per warp
 *                           (redux.sync) and then per block (shared memory),
 *                           one atomicMax per block on the float bits
 *                           (non-negative floats order like their bits) into
 *                           the global scale's own word, cleared by a memset
 *                           before;
 *   global_scale_finalize_kernel  one thread: word -> 2688 / amax.
 *   swizzle / unswizzle     one thread per 4 swizzled bytes / linear byte.
 *   *_ref_kernel            INGOT_FORCE_REFERENCE, and the fallback for data
 *                           whose alignment rules out the vector accesses:
 *                           element by element through common/nvfp4_ref.h.
 *
 * Every float operation is an explicit IEEE _rn operation (the build also
 * has -fmad=false --ftz=false --prec-div=true): outputs are byte-identical to
 * the CPU backend, fast path or not.
 */
#include "common/nvfp4_ref.h"
#include "cuda/common.cuh"
#include "cuda/cuda.cuh"
#include "cuda/nvfp4/nvfp4_epilogue_math.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxGridY = 65535;
constexpr int kQuantizeDefaultMode = 1; // QuantizeMode used by ingot_nvfp4_quantize

// ---- launch geometry ----------------------------------------------------------

// Threads as (x = column item, y = row); x rounded to a power of two >= 4 so
// that a warp covers contiguous items of one or more rows.
struct Geometry {
  dim3 grid, block;
};

Geometry make_geometry(int64_t x_items, int64_t y_items, int64_t max_blocks) {
  int bx = 4;
  while (bx < kThreads && bx < x_items) bx *= 2;
  int by = kThreads / bx;
  int64_t gx = (x_items + bx - 1) / bx;
  int64_t groups = (y_items + by - 1) / by; // row groups of by rows
  int64_t gy_max = kMaxGridY;
  if (max_blocks > 0 && gx * gy_max > max_blocks) gy_max = max_blocks / gx > 0 ? max_blocks / gx : 1;
  // as few row passes as gy_max allows, spread evenly over the blocks
  int64_t passes = (groups + gy_max - 1) / gy_max;
  if (passes < 1) passes = 1;
  int64_t gy = (groups + passes - 1) / passes;
  if (gy < 1) gy = 1;
  Geometry g;
  g.grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), 1);
  g.block = dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by), 1);
  return g;
}

// ---- sources --------------------------------------------------------------------

// Row r of the (possibly gate/up-interleaved) source, as bytes.
__device__ __forceinline__ const char *source_row(const ingot_nvfp4_source &x, int64_t r,
                                                  int esize) {
  // selects, not a dynamic index: keeps the parameter struct out of local memory
  const bool second = x.interleave && (r & 1);
  const int64_t src_row = x.interleave ? r >> 1 : r;
  const char *base = static_cast<const char *>(second ? x.data[1] : x.data[0]);
  return base + src_row * (second ? x.stride[1] : x.stride[0]) * esize;
}

template <int D>
struct Elem;
template <>
struct Elem<INGOT_DTYPE_BF16> {
  static constexpr int kSize = 2, kWords = 8;
  static constexpr uint32_t kInfBits = 0x7f80u; // |x| bits >= this: Inf or NaN
  __device__ static float to_f32(uint32_t h) { return __uint_as_float(h << 16); }
};
template <>
struct Elem<INGOT_DTYPE_F16> {
  static constexpr int kSize = 2, kWords = 8;
  static constexpr uint32_t kInfBits = 0x7c00u;
  __device__ static float to_f32(uint32_t h) {
    // exact; the hardware conversion (subnormal inputs are not flushed)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(h)));
    return f;
  }
};
template <>
struct Elem<INGOT_DTYPE_F32> {
  static constexpr int kSize = 4, kWords = 16;
  static constexpr uint32_t kInfBits = 0x7f800000u;
  __device__ static float to_f32(uint32_t u) { return __uint_as_float(u); }
};

// The raw 32-bit words of a block at p (16-byte aligned): 2 or 4 16-byte loads.
template <int D>
__device__ __forceinline__ void load_raw(const char *p, uint32_t w[Elem<D>::kWords]) {
  const uint4 *q = reinterpret_cast<const uint4 *>(p);
#pragma unroll
  for (int i = 0; i < Elem<D>::kWords / 4; i++) {
    const uint4 t = __ldg(q + i);
    w[4 * i] = t.x, w[4 * i + 1] = t.y, w[4 * i + 2] = t.z, w[4 * i + 3] = t.w;
  }
}

// Element i of the block, exactly as fp32.
template <int D>
__device__ __forceinline__ float elem(const uint32_t *w, int i) {
  if constexpr (D == INGOT_DTYPE_F32)
    return __uint_as_float(w[i]);
  else
    return Elem<D>::to_f32((i & 1) ? w[i / 2] >> 16 : w[i / 2] & 0xffffu);
}

// The largest |x| bit pattern of the block. Non-negative floats order like
// their bit patterns, and Inf / NaN patterns are above every finite one, so
// the block is finite iff the result is below Elem<D>::kInfBits.
template <int D>
__device__ __forceinline__ uint32_t block_abs_max_bits(const uint32_t *w) {
  if constexpr (D == INGOT_DTYPE_F32) {
    uint32_t m = 0;
#pragma unroll
    for (int i = 0; i < 16; i += 2) m = __vimax3_u32(m, w[i] & 0x7fffffffu, w[i + 1] & 0x7fffffffu);
    return m;
  } else {
    const uint32_t k = 0x7fff7fffu;
    uint32_t m = __vimax3_u16x2(w[0] & k, w[1] & k, w[2] & k);
    m = __vimax3_u16x2(m, w[3] & k, w[4] & k);
    m = __vimax3_u16x2(m, w[5] & k, w[6] & k);
    m = __vmaxu2(m, w[7] & k);
    return max(m & 0xffffu, m >> 16);
  }
}

// E4M3 conversions: nvfp4_epilogue_math.cuh (hardware on sm_89+)
using ingot_nvfp4::e4m3_from_f32;
using ingot_nvfp4::e4m3_to_f32;

__device__ __forceinline__ float load_any(const char *row, ingot_dtype dtype, int64_t i) {
  return ingot_nvfp4_load(row, dtype, i);
}

// ---- quantize ----------------------------------------------------------------------

// Fast path for one block: the rule of common/nvfp4_ref.h for a finite block
// and a finite multiplier. Returns false when the block needs the reference
// path (an Inf / NaN element, or gs / sf overflowing: 0 * Inf needs the NaN
// rule).
template <int D>
__device__ __forceinline__ bool quantize_block_fast(const uint32_t *w, float gs, uint8_t &sf,
                                                    uint2 &codes) {
  const uint32_t mb = block_abs_max_bits<D>(w);
  if (mb >= Elem<D>::kInfBits) return false;
  const float amax = Elem<D>::to_f32(mb);
  sf = ingot_nvfp4_gs_valid(gs) ? e4m3_from_f32(__fmul_rn(gs, __fdiv_rn(amax, 6.0f))) : 0;
  if (sf == 0) {
    codes = make_uint2(0u, 0u);
    return true;
  }
  const float r = __fdiv_rn(gs, e4m3_to_f32(sf));
  if (!ingot_f32_finite(r)) return false;
  float v[16];
#pragma unroll
  for (int i = 0; i < 16; i++) v[i] = elem<D>(w, i);
  // |y| <= fl(amax * r) < 7 except when sf saturated or is subnormal: only
  // then does the encoder need its clamp at 7 (block-uniform branch)
  uint32_t lo, hi;
  if (__fmul_rn(amax, r) < 7.0f) {
    lo = ingot_e2m1_pack8_minmagic(v, r, 0);
    hi = ingot_e2m1_pack8_minmagic(v + 8, r, 0);
  } else {
    lo = ingot_e2m1_pack8_minmagic(v, r, 1);
    hi = ingot_e2m1_pack8_minmagic(v + 8, r, 1);
  }
  // signs from the raw words (sign(y) = sign(x): r > 0)
  if constexpr (D == INGOT_DTYPE_F32) {
    lo |= ingot_e2m1_signs32(w);
    hi |= ingot_e2m1_signs32(w + 8);
  } else {
    lo |= ingot_e2m1_signs16(w[0], w[1], w[2], w[3]);
    hi |= ingot_e2m1_signs16(w[4], w[5], w[6], w[7]);
  }
  codes = make_uint2(lo, hi);
  return true;
}

// Encodes one block (raw words w) and stores its 8 value bytes at dst;
// returns the scale byte.
template <int D>
__device__ __forceinline__ uint8_t quantize_store_block(const uint32_t *w, float gs,
                                                        uint8_t *dst, uint32_t *nonfinite_count) {
  uint8_t sf = 0;
  uint2 codes;
  if (!quantize_block_fast<D>(w, gs, sf, codes)) {
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; i++) v[i] = elem<D>(w, i);
    uint8_t c[8];
    const uint32_t n = ingot_nvfp4_ref_block(v, gs, &sf, c);
    codes.x = c[0] | c[1] << 8 | c[2] << 16 | static_cast<uint32_t>(c[3]) << 24;
    codes.y = c[4] | c[5] << 8 | c[6] << 16 | static_cast<uint32_t>(c[7]) << 24;
    if (nonfinite_count != nullptr && n != 0) atomicAdd(nonfinite_count, n);
  }
  *reinterpret_cast<uint2 *>(dst) = codes;
  return sf;
}

// Launch modes of quantize_kernel.
enum QuantizeMode {
  kQuantizeOnePass = 0,  // grid covers the rows: one block per thread (up to 65535 row groups)
  kQuantizeResident = 1, // grid of resident blocks, rows looped, next row's load in flight
  kQuantizeLooped = 2,   // grid of resident blocks, rows looped, no prefetch
};

// Thread (k, m0) handles scale column k of rows m0, m0 + step, ... (step =
// gridDim.y * blockDim.y; even when interleaved, so that a thread always
// reads the same one of gate / up and its pointers advance by constants).
template <int D, bool kInterleave, int kMode>
__global__ void __launch_bounds__(kThreads, D == INGOT_DTYPE_F32                         ? 1
                                            : kMode == kQuantizeResident || kInterleave ? 5
                                                                                        : 6)
    quantize_kernel(ingot_nvfp4_source x, const float *__restrict__ global_scale,
                    ingot_nvfp4_packed out, uint32_t *nonfinite_count) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= out.scale_cols) return;
  const float gs = __ldg(global_scale);
  const bool col_ok = k < out.cols / 16;
  const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  int64_t m = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const char *src;
  int64_t src_step;
  if constexpr (kInterleave) {
    const bool up = (m & 1) != 0;
    const int64_t stride = (up ? x.stride[1] : x.stride[0]) * Elem<D>::kSize;
    src = static_cast<const char *>(up ? x.data[1] : x.data[0]) + (m >> 1) * stride;
    src_step = (step >> 1) * stride;
  } else {
    const int64_t stride = x.stride[0] * Elem<D>::kSize;
    src = static_cast<const char *>(x.data[0]) + m * stride;
    src_step = step * stride;
  }
  src += k * (16 * Elem<D>::kSize);
  uint8_t *dst = out.values + m * out.values_stride + k * 8;
  const int64_t dst_step = step * out.values_stride;
  const int64_t k_offset = (k >> 2) * 512 + (k & 3); // the scale offset's column part
  const int64_t tile_bytes = out.scale_cols * 128;
  uint32_t w[Elem<D>::kWords] = {};
  if (kMode == kQuantizeResident && col_ok && m < out.rows) load_raw<D>(src, w);
  for (; m < out.scale_rows; m += step, src += src_step, dst += dst_step) {
    uint8_t sf = 0;
    if constexpr (kMode == kQuantizeResident) {
      uint32_t cur[Elem<D>::kWords];
#pragma unroll
      for (int i = 0; i < Elem<D>::kWords; i++) cur[i] = w[i];
      if (col_ok && m + step < out.rows) load_raw<D>(src + src_step, w);
      if (col_ok && m < out.rows) sf = quantize_store_block<D>(cur, gs, dst, nonfinite_count);
    } else {
      if (col_ok && m < out.rows) {
        load_raw<D>(src, w);
        sf = quantize_store_block<D>(w, gs, dst, nonfinite_count);
      }
    }
    out.scales[(m >> 7) * tile_bytes + (m & 31) * 16 + ((m >> 5) & 3) * 4 + k_offset] = sf;
  }
}

__global__ void __launch_bounds__(kThreads)
    quantize_ref_kernel(ingot_nvfp4_source x, const float *__restrict__ global_scale,
                        ingot_nvfp4_packed out, uint32_t *nonfinite_count) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= out.scale_cols) return;
  const float gs = *global_scale;
  const int64_t blocks = out.cols / 16;
  const int esize = x.dtype == INGOT_DTYPE_F32 ? 4 : 2;
  for (int64_t m = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
       m < out.scale_rows; m += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    uint8_t sf = 0;
    if (m < out.rows && k < blocks) {
      const char *row = source_row(x, m, esize);
      float v[16];
      for (int i = 0; i < 16; i++) v[i] = load_any(row, x.dtype, k * 16 + i);
      uint8_t c[8];
      uint32_t n = ingot_nvfp4_ref_block(v, gs, &sf, c);
      uint8_t *dst = out.values + m * out.values_stride + k * 8;
      for (int i = 0; i < 8; i++) dst[i] = c[i];
      if (nonfinite_count != nullptr && n != 0) atomicAdd(nonfinite_count, n);
    }
    out.scales[ingot_nvfp4_swizzle_offset(m, k, out.scale_cols)] = sf;
  }
}


// ---- dequantize ------------------------------------------------------------------

// 4x4 byte transpose: out[j] byte i = in[i] byte j.
__device__ __forceinline__ void transpose4(uint32_t a, uint32_t b, uint32_t c, uint32_t d,
                                           uint32_t out[4]) {
  uint32_t t0 = __byte_perm(a, b, 0x5140), t1 = __byte_perm(c, d, 0x5140);
  uint32_t t2 = __byte_perm(a, b, 0x7362), t3 = __byte_perm(c, d, 0x7362);
  out[0] = __byte_perm(t0, t1, 0x5410);
  out[1] = __byte_perm(t0, t1, 0x7632);
  out[2] = __byte_perm(t2, t3, 0x5410);
  out[3] = __byte_perm(t2, t3, 0x7632);
}

// The fp32 bits of (e2m1 magnitude i * sf) / gs for i = 0..7, for a usable gs
// and a non-NaN sf (no NaN result is possible then). The sign of an element
// is applied afterwards by flipping the sign bit: (-v * sf) / gs is exactly
// -((v * sf) / gs).
__device__ __forceinline__ void block_magnitudes(float sff, float gs, uint32_t e[8]) {
  e[0] = __float_as_uint(sff) & 0x80000000u; // (0 * sf) / gs = +-0, sign of sf
  if (sff == 0.0f) {                          // zero block: every magnitude is +-0
#pragma unroll
    for (int i = 1; i < 8; i++) e[i] = e[0];
    return;
  }
  float d1 = __fdiv_rn(sff, gs);
  float d15 = __fdiv_rn(__fmul_rn(1.5f, sff), gs); // 1.5 * sf is exact
  if (fabsf(d1) >= 0x1p-124f && fabsf(d15) < 0x1p125f) {
    // (2^j c sf) / gs == 2^j ((c sf) / gs) exactly while nothing under- or
    // overflows: every scaled value stays normal and finite in this range.
    e[1] = __float_as_uint(__fmul_rn(d1, 0.5f));
    e[2] = __float_as_uint(d1);
    e[3] = __float_as_uint(d15);
    e[4] = __float_as_uint(__fmul_rn(d1, 2.0f));
    e[5] = __float_as_uint(__fmul_rn(d15, 2.0f));
    e[6] = __float_as_uint(__fmul_rn(d1, 4.0f));
    e[7] = __float_as_uint(__fmul_rn(d15, 4.0f));
  } else {
#pragma unroll
    for (int i = 1; i < 8; i++)
      e[i] = __float_as_uint(
          __fdiv_rn(__fmul_rn(ingot_e2m1_to_f32(static_cast<uint8_t>(i)), sff), gs));
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(ingot_nvfp4_packed in, const float *__restrict__ global_scale,
                      ingot_nvfp4_dense out) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t blocks = in.cols / 16;
  if (k >= blocks) return;
  const float gs = __ldg(global_scale);
  const bool gs_ok = ingot_nvfp4_gs_valid(gs);
  for (int64_t m = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; m < in.rows;
       m += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    const uint2 codes =
        __ldg(reinterpret_cast<const uint2 *>(in.values + m * in.values_stride + k * 8));
    const uint8_t sf = __ldg(in.scales + ingot_nvfp4_swizzle_offset(m, k, in.scale_cols));
    const float sff = e4m3_to_f32(sf);
    uint32_t e[8];
    if (!gs_ok || (sf & 0x7fu) == 0x7fu) {
#pragma unroll
      for (int i = 0; i < 8; i++) e[i] = INGOT_NVFP4_CANONICAL_NAN;
    } else {
      block_magnitudes(sff, gs, e);
    }
    const bool nan = !gs_ok || (sf & 0x7fu) == 0x7fu; // canonical NaN ignores the code's sign
    const uint32_t sign_mask = nan ? 0u : 0xffffffffu;
    const uint32_t cw[2] = {codes.x, codes.y};
    if constexpr (D == INGOT_DTYPE_F32) {
      // byte planes: plane[b] = byte b of e[0..3] (.x) and e[4..7] (.y)
      uint32_t lo[4], hi[4];
      transpose4(e[0], e[1], e[2], e[3], lo);
      transpose4(e[4], e[5], e[6], e[7], hi);
      uint4 *dst = reinterpret_cast<uint4 *>(static_cast<float *>(out.data) + m * out.stride +
                                             k * 16);
#pragma unroll
      for (int g = 0; g < 4; g++) {
        const uint32_t c = cw[g / 2] >> (16 * (g % 2)); // 4 codes in the low 16 bits
        const uint32_t sel = c & 0x7777u;
        uint32_t o[4];
        transpose4(__byte_perm(lo[0], hi[0], sel), __byte_perm(lo[1], hi[1], sel),
                   __byte_perm(lo[2], hi[2], sel), __byte_perm(lo[3], hi[3], sel), o);
        uint4 w;
        w.x = o[0] ^ ((c << 28) & 0x80000000u & sign_mask);
        w.y = o[1] ^ ((c << 24) & 0x80000000u & sign_mask);
        w.z = o[2] ^ ((c << 20) & 0x80000000u & sign_mask);
        w.w = o[3] ^ ((c << 16) & 0x80000000u & sign_mask);
        dst[g] = w;
      }
    } else {
      // bf16 entries, then byte planes lo / hi of the 8 entries
      uint32_t b[8];
#pragma unroll
      for (int i = 0; i < 8; i++) b[i] = ingot_f32_to_bf16(__uint_as_float(e[i]));
      const uint32_t w01 = b[0] | b[1] << 16, w23 = b[2] | b[3] << 16;
      const uint32_t w45 = b[4] | b[5] << 16, w67 = b[6] | b[7] << 16;
      const uint32_t plo0 = __byte_perm(w01, w23, 0x6420), plo1 = __byte_perm(w45, w67, 0x6420);
      const uint32_t phi0 = __byte_perm(w01, w23, 0x7531), phi1 = __byte_perm(w45, w67, 0x7531);
      uint32_t o[8];
#pragma unroll
      for (int g = 0; g < 4; g++) {
        const uint32_t c = cw[g / 2] >> (16 * (g % 2));
        const uint32_t sel = c & 0x7777u;
        const uint32_t l4 = __byte_perm(plo0, plo1, sel), h4 = __byte_perm(phi0, phi1, sel);
        o[2 * g] = __byte_perm(l4, h4, 0x5140) ^
                   ((((c << 12) & 0x8000u) | ((c << 24) & 0x80000000u)) & sign_mask);
        o[2 * g + 1] = __byte_perm(l4, h4, 0x7362) ^
                       ((((c << 4) & 0x8000u) | ((c << 16) & 0x80000000u)) & sign_mask);
      }
      uint4 *dst = reinterpret_cast<uint4 *>(static_cast<uint16_t *>(out.data) + m * out.stride +
                                             k * 16);
      dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
      dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    dequantize_ref_kernel(ingot_nvfp4_packed in, const float *__restrict__ global_scale,
                          ingot_nvfp4_dense out) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t blocks = in.cols / 16;
  if (k >= blocks) return;
  const float gs = *global_scale;
  for (int64_t m = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; m < in.rows;
       m += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    const uint8_t sf = in.scales[ingot_nvfp4_swizzle_offset(m, k, in.scale_cols)];
    const uint8_t *v = in.values + m * in.values_stride + k * 8;
    for (int i = 0; i < 16; i++) {
      const uint8_t code = static_cast<uint8_t>((v[i / 2] >> (4 * (i & 1))) & 0xfu);
      const float q = ingot_nvfp4_decode(code, sf, gs);
      const int64_t at = m * out.stride + k * 16 + i;
      if (out.dtype == INGOT_DTYPE_F32)
        static_cast<float *>(out.data)[at] = q;
      else
        static_cast<uint16_t *>(out.data)[at] = ingot_f32_to_bf16(q);
    }
  }
}

// ---- global scale ------------------------------------------------------------------

// |x| bits if x is finite, else 0.
__device__ __forceinline__ uint32_t finite_abs_bits(float v) {
  uint32_t a = __float_as_uint(v) & 0x7fffffffu;
  return a < 0x7f800000u ? a : 0u;
}

// kVec: each x item is one 16-byte vector (needs aligned rows and
// cols % (16 / element size) == 0); else one element.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(ingot_nvfp4_source x, int64_t items_per_row, uint32_t *amax_bits) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int esize = x.dtype == INGOT_DTYPE_F32 ? 4 : 2;
  uint32_t best = 0;
  if (c < items_per_row) {
    for (int64_t m = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; m < x.rows;
         m += static_cast<int64_t>(gridDim.y) * blockDim.y) {
      const char *row = source_row(x, m, esize);
      if constexpr (kVec) {
        const uint4 w = __ldg(reinterpret_cast<const uint4 *>(row + c * 16));
        const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
          if (x.dtype == INGOT_DTYPE_F32) {
            best = max(best, finite_abs_bits(__uint_as_float(ws[i])));
          } else if (x.dtype == INGOT_DTYPE_BF16) {
            best = max(best, finite_abs_bits(Elem<INGOT_DTYPE_BF16>::to_f32(ws[i] & 0xffffu)));
            best = max(best, finite_abs_bits(Elem<INGOT_DTYPE_BF16>::to_f32(ws[i] >> 16)));
          } else {
            best = max(best, finite_abs_bits(Elem<INGOT_DTYPE_F16>::to_f32(ws[i] & 0xffffu)));
            best = max(best, finite_abs_bits(Elem<INGOT_DTYPE_F16>::to_f32(ws[i] >> 16)));
          }
        }
      } else {
        best = max(best, finite_abs_bits(ingot_nvfp4_load(row, x.dtype, c)));
      }
    }
  }
  // Block max, then one atomic per block: each warp reduces in registers
  // (redux.sync), its lane 0 leaves the warp's max in shared memory, and the
  // first warp reduces those. Every thread gets here (no early exit above).
  // Integer max is exact and order-free: the result does not depend on how
  // the threads are grouped.
  constexpr int kWarps = kThreads / 32; // make_geometry: blockDim.x * blockDim.y == kThreads
  __shared__ uint32_t warp_best[kWarps];
  const int t = threadIdx.x + threadIdx.y * blockDim.x;
  best = __reduce_max_sync(0xffffffffu, best);
  if (t % 32 == 0) warp_best[t / 32] = best;
  __syncthreads();
  if (t < 32) {
    best = __reduce_max_sync(0xffffffffu, t < kWarps ? warp_best[t] : 0u);
    if (t == 0 && best != 0) atomicMax(amax_bits, best);
  }
}

__global__ void global_scale_finalize_kernel(float *global_scale) {
  const float amax = __uint_as_float(*reinterpret_cast<const uint32_t *>(global_scale));
  *global_scale = ingot_nvfp4_global_scale_from_amax(amax);
}

// ---- swizzle --------------------------------------------------------------------

// One thread per 4 swizzled bytes (scale columns k..k+3 of one row).
__global__ void __launch_bounds__(kThreads)
    swizzle_kernel(const uint8_t *__restrict__ linear, int64_t linear_stride,
                   ingot_nvfp4_packed layout) {
  const int64_t words = layout.scale_rows * layout.scale_cols / 4;
  const int64_t blocks = layout.cols / 16;
  const int64_t kt = layout.scale_cols / 4;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tile = w / 128, r = (w % 128) * 4; // 512-byte tiles
    const int64_t m = (tile / kt) * 128 + ((r >> 2) & 3) * 32 + (r >> 4);
    const int64_t k0 = (tile % kt) * 4;
    uint8_t *dst = layout.scales + w * 4;
#pragma unroll
    for (int j = 0; j < 4; j++)
      dst[j] = m < layout.rows && k0 + j < blocks ? linear[m * linear_stride + k0 + j] : 0;
  }
}

__global__ void __launch_bounds__(kThreads)
    unswizzle_kernel(ingot_nvfp4_packed layout, uint8_t *__restrict__ linear,
                     int64_t linear_stride) {
  const int64_t blocks = layout.cols / 16;
  const int64_t total = layout.rows * blocks;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / blocks, k = i % blocks;
    linear[m * linear_stride + k] =
        layout.scales[ingot_nvfp4_swizzle_offset(m, k, layout.scale_cols)];
  }
}

// ---- launchers ----------------------------------------------------------------------

constexpr int kWaves = 16; // resident blocks per SM, at most, for grid-stride kernels

bool force_reference(const struct ingot_context *ctx) {
  return (ctx->flags & INGOT_CONTEXT_FLAG_FORCE_REFERENCE) != 0;
}

bool aligned(const void *p, int64_t stride_bytes, int64_t rows, unsigned align) {
  if (reinterpret_cast<uintptr_t>(p) % align != 0) return false;
  return rows <= 1 || stride_bytes % align == 0;
}

// Both matrices of the source 16-byte aligned (base and row stride).
bool source_aligned(const ingot_nvfp4_source &x) {
  const int esize = static_cast<int>(ingot_dtype_size(x.dtype));
  const int64_t src_rows = x.interleave ? (x.rows + 1) / 2 : x.rows;
  for (int i = 0; i < (x.interleave ? 2 : 1); i++)
    if (!aligned(x.data[i], x.stride[i] * esize, src_rows, 16)) return false;
  return true;
}

// Blocks of `kernel` (kThreads threads) resident on the whole device.
template <typename Kernel>
int64_t resident_blocks(const struct ingot_context *ctx, Kernel kernel) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    per_sm = 4;
  }
  return static_cast<int64_t>(per_sm) * ctx->sm_count;
}

template <int D, bool kInterleave, int kMode>
void launch_quantize_mode(const struct ingot_context *ctx, const ingot_nvfp4_source &x,
                          const float *global_scale, const ingot_nvfp4_packed &out,
                          uint32_t *nonfinite_count, cudaStream_t stream) {
  auto kernel = quantize_kernel<D, kInterleave, kMode>;
  Geometry g = make_geometry(out.scale_cols, out.scale_rows,
                             kMode == kQuantizeOnePass ? 0 : resident_blocks(ctx, kernel));
  if (kInterleave && g.block.y == 1 && g.grid.y % 2 == 1 && g.grid.y < kMaxGridY) g.grid.y++;
  if (kInterleave && g.block.y == 1 && g.grid.y % 2 == 1) g.grid.y--; // 65535: even below
  kernel<<<g.grid, g.block, 0, stream>>>(x, global_scale, out, nonfinite_count);
}

template <int D, bool kInterleave>
void launch_quantize_dtype(const struct ingot_context *ctx, const ingot_nvfp4_source &x,
                           const float *global_scale, const ingot_nvfp4_packed &out,
                           uint32_t *nonfinite_count, int mode, cudaStream_t stream) {
  if (mode == kQuantizeResident)
    launch_quantize_mode<D, kInterleave, kQuantizeResident>(ctx, x, global_scale, out,
                                                            nonfinite_count, stream);
  else if (mode == kQuantizeLooped)
    launch_quantize_mode<D, kInterleave, kQuantizeLooped>(ctx, x, global_scale, out,
                                                          nonfinite_count, stream);
  else
    launch_quantize_mode<D, kInterleave, kQuantizeOnePass>(ctx, x, global_scale, out,
                                                           nonfinite_count, stream);
}

template <bool kInterleave>
void launch_quantize_interleave(const struct ingot_context *ctx, const ingot_nvfp4_source &x,
                                const float *global_scale, const ingot_nvfp4_packed &out,
                                uint32_t *nonfinite_count, int mode, cudaStream_t stream) {
  if (x.dtype == INGOT_DTYPE_BF16)
    launch_quantize_dtype<INGOT_DTYPE_BF16, kInterleave>(ctx, x, global_scale, out,
                                                         nonfinite_count, mode, stream);
  else if (x.dtype == INGOT_DTYPE_F16)
    launch_quantize_dtype<INGOT_DTYPE_F16, kInterleave>(ctx, x, global_scale, out,
                                                        nonfinite_count, mode, stream);
  else
    launch_quantize_dtype<INGOT_DTYPE_F32, kInterleave>(ctx, x, global_scale, out,
                                                        nonfinite_count, mode, stream);
}

void launch_quantize_fast(const struct ingot_context *ctx, const ingot_nvfp4_source &x,
                          const float *global_scale, const ingot_nvfp4_packed &out,
                          uint32_t *nonfinite_count, int mode, cudaStream_t stream) {
  if (x.interleave)
    launch_quantize_interleave<true>(ctx, x, global_scale, out, nonfinite_count, mode, stream);
  else
    launch_quantize_interleave<false>(ctx, x, global_scale, out, nonfinite_count, mode, stream);
}

ingot_status launch_global_scale(struct ingot_context *ctx, const char *op,
                                 const ingot_nvfp4_source &x, float *global_scale,
                                 cudaStream_t stream) {
  uint32_t *word = reinterpret_cast<uint32_t *>(global_scale);
  INGOT_CUDA_TRY(ctx, op, cudaMemsetAsync(word, 0, sizeof(uint32_t), stream));
  if (x.rows > 0 && x.cols > 0) {
    const int esize = static_cast<int>(ingot_dtype_size(x.dtype));
    const int64_t per_vec = 16 / esize;
    const int64_t max_blocks = static_cast<int64_t>(ctx->sm_count) * kWaves;
    if (!force_reference(ctx) && x.cols % per_vec == 0 && source_aligned(x)) {
      const int64_t items = x.cols / per_vec;
      Geometry g = make_geometry(items, x.rows, max_blocks);
      amax_kernel<true><<<g.grid, g.block, 0, stream>>>(x, items, word);
    } else {
      Geometry g = make_geometry(x.cols, x.rows, max_blocks);
      amax_kernel<false><<<g.grid, g.block, 0, stream>>>(x, x.cols, word);
    }
    ingot_status st = ingot_cuda_check_launch(ctx, op);
    if (st) return st;
  }
  global_scale_finalize_kernel<<<1, 1, 0, stream>>>(global_scale);
  return ingot_cuda_check_launch(ctx, op);
}

}  // namespace

ingot_status ingot_cuda_nvfp4_global_scale(struct ingot_context *ctx, const ingot_nvfp4_source *x,
                                           float *global_scale, cudaStream_t stream) {
  static const char op[] = "ingot_nvfp4_global_scale";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  return launch_global_scale(ctx, op, *x, global_scale, stream);
}

ingot_status ingot_cuda_nvfp4_quantize(struct ingot_context *ctx, const ingot_nvfp4_source *x,
                                       const float *global_scale, const ingot_nvfp4_packed *out,
                                       uint32_t *nonfinite_count, cudaStream_t stream) {
  static const char op[] = "ingot_nvfp4_quantize";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  const bool fast = !force_reference(ctx) && source_aligned(*x) &&
                    aligned(out->values, out->values_stride, out->rows, 8);
  if (!fast) {
    Geometry g = make_geometry(out->scale_cols, out->scale_rows, 0);
    quantize_ref_kernel<<<g.grid, g.block, 0, stream>>>(*x, global_scale, *out, nonfinite_count);
  } else {
    launch_quantize_fast(ctx, *x, global_scale, *out, nonfinite_count, kQuantizeDefaultMode,
                         stream);
  }
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status ingot_cuda_nvfp4_dequantize(struct ingot_context *ctx, const ingot_nvfp4_packed *in,
                                         const float *global_scale, ingot_nvfp4_dense out,
                                         cudaStream_t stream) {
  static const char op[] = "ingot_nvfp4_dequantize";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  const int64_t out_bytes = out.stride * static_cast<int64_t>(ingot_dtype_size(out.dtype));
  const bool fast = !force_reference(ctx) && aligned(in->values, in->values_stride, in->rows, 8) &&
                    aligned(out.data, out_bytes, in->rows, 16);
  if (!fast) {
    Geometry g = make_geometry(in->cols / 16, in->rows, 0);
    dequantize_ref_kernel<<<g.grid, g.block, 0, stream>>>(*in, global_scale, out);
  } else {
    auto kernel = out.dtype == INGOT_DTYPE_F32 ? dequantize_kernel<INGOT_DTYPE_F32>
                                               : dequantize_kernel<INGOT_DTYPE_BF16>;
    Geometry g = make_geometry(in->cols / 16, in->rows, 0);
    kernel<<<g.grid, g.block, 0, stream>>>(*in, global_scale, out);
  }
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status ingot_cuda_nvfp4_swizzle_scales(struct ingot_context *ctx, const uint8_t *linear,
                                             int64_t linear_stride,
                                             const ingot_nvfp4_packed *layout,
                                             cudaStream_t stream) {
  static const char op[] = "ingot_nvfp4_swizzle_scales";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  const int64_t words = layout->scale_rows * layout->scale_cols / 4;
  swizzle_kernel<<<ingot_cuda_grid(ctx, words, kThreads, kWaves), kThreads, 0, stream>>>(
      linear, linear_stride, *layout);
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status ingot_cuda_nvfp4_unswizzle_scales(struct ingot_context *ctx,
                                               const ingot_nvfp4_packed *layout, uint8_t *linear,
                                               int64_t linear_stride, cudaStream_t stream) {
  static const char op[] = "ingot_nvfp4_unswizzle_scales";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  const int64_t total = layout->rows * (layout->cols / 16);
  unswizzle_kernel<<<ingot_cuda_grid(ctx, total, kThreads, kWaves), kThreads, 0, stream>>>(
      *layout, linear, linear_stride);
  return ingot_cuda_check_launch(ctx, op);
}

// Development hook (not API): ingot_nvfp4_quantize with an explicit
// QuantizeMode, for tests/test_nvfp4_cuda.c to compare the launch modes.
// Arguments must have passed the core checks (use the API first).
extern "C" ingot_status ingot_cuda_nvfp4_quantize_mode(struct ingot_context *ctx,
                                            const ingot_nvfp4_source *x,
                                            const float *global_scale,
                                            const ingot_nvfp4_packed *out,
                                            uint32_t *nonfinite_count, int mode,
                                            cudaStream_t stream) {
  static const char op[] = "ingot_cuda_nvfp4_quantize_mode";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  launch_quantize_fast(ctx, *x, global_scale, *out, nonfinite_count, mode, stream);
  return ingot_cuda_check_launch(ctx, op);
}
