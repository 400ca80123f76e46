/*
 * Hashed n-gram embeddings on CUDA (docs/ple.md).
 *
 * Kernels
 *   ngram_row_ids_kernel   one thread per (token, head): finds the token's
 *                          request by binary search in cu_seqlens (no host
 *                          index), walks n-1 tokens back, hashes, reduces.
 *   ngram_commit_kernel    one thread per request: rolls its context.
 *   ngram_gather_kernel    a block per tile of kTileRows (token, head) rows:
 *                          phase 1 gets the tile's row ids into shared memory
 *                          (loaded, or computed as above for the fused embed
 *                          op), phase 2 copies the rows with 16-byte loads,
 *                          kChunksInFlight per thread issued before any is
 *                          converted to bf16 and stored. (Measured faster
 *                          than barrier-free warp tiles on an H200.)
 *   ngram_ref_*_kernel     INGOT_FORCE_REFERENCE: one thread per token /
 *                          request / row running common/ngram_ref.h, the very
 *                          code the CPU backend runs.
 *
 * Every kernel that reads cu_seqlens first checks the whole array in each
 * block (0 = cu[0] <= ... <= cu[B] = T); all blocks reach the same verdict,
 * so an invalid batch writes nothing and sets a bit in the context's device
 * error word. The check keeps up to kCuCacheEntries entries in shared memory
 * for the binary searches that follow. Grids are capped and loop over their
 * items so that this check costs O(B) per block for a bounded number of
 * blocks.
 *
 * All arithmetic is integer or a single fp32 multiply (built without fmad
 * contraction or flush-to-zero); the gathers' conversions use the hardware's
 * exact e4m3 -> f16 and round-to-nearest-even f32 -> bf16 instructions with
 * NaN set to numeric.h's canonical pattern: results are byte-identical to
 * the CPU.
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "common/ngram_ref.h"
#include "cuda/common.cuh"
#include "cuda/cuda.cuh"

namespace {

constexpr int kThreads = 256;     // row ids, commit, reference kernels
constexpr int kGatherThreads = 128;
constexpr int kTileRows = 16;      // (token, head) rows per gather tile
constexpr int kChunksInFlight = 2; // table loads a gather thread issues before using any
constexpr int kWaves = 8;         // blocks per SM, at most, for grid-stride kernels
constexpr int kGatherWaves = 16;  // gathers are latency-bound: keep more blocks resident

// ---- cu_seqlens ------------------------------------------------------------

// Up to this many cu_seqlens entries are kept in shared memory by each block
// (loaded once for the validity check), so that finding a token's request is
// a binary search in shared memory rather than a chain of dependent global
// loads. Larger batches search global memory (L2).
constexpr int64_t kCuCacheEntries = 1024;

template <typename CuT>
struct CuSeqlens {
  const CuT *__restrict__ global;
  int64_t *shared;  // kCuCacheEntries entries of block shared memory
  int64_t B;
  __device__ bool cached() const { return B + 1 <= kCuCacheEntries; }
  __device__ int64_t at(int64_t i) const {
    return cached() ? shared[i] : static_cast<int64_t>(global[i]);
  }
};

// True in every thread iff 0 = cu[0] <= cu[1] <= ... <= cu[B] = T; fills the
// shared copy on the way. Ends with a barrier.
template <typename CuT>
__device__ bool block_load_cu_seqlens(const CuSeqlens<CuT> &cu, int64_t T) {
  int bad = 0;
  const bool cache = cu.cached();
  for (int64_t i = threadIdx.x; i <= cu.B; i += blockDim.x) {
    int64_t v = static_cast<int64_t>(cu.global[i]);
    if (i == 0) bad |= v != 0;
    if (i > 0) bad |= v < static_cast<int64_t>(cu.global[i - 1]);
    if (i == cu.B) bad |= v != T;
    if (cache) cu.shared[i] = v;
  }
  return __syncthreads_or(bad) == 0;
}

// The context's device error word and the bit this op reports in it.
struct ErrorSink {
  uint32_t *word;
  uint32_t bit;
};

__device__ void record_cu_seqlens_error(const ErrorSink &errors) {
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicOr(errors.word, errors.bit);
}

// The request owning token t: the largest b with cu[b] <= t (cu validated,
// so cu[b+1] > t and b < B).
template <typename CuT>
__device__ int64_t find_request(const CuSeqlens<CuT> &cu, int64_t t) {
  int64_t lo = 0, hi = cu.B;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) >> 1;
    if (cu.at(mid) <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// ---- row id of one (token, head) ----------------------------------------------

// Non-negative remainder, in unsigned arithmetic (cheaper than signed %):
// for a < 0 write a = -1 - c, then floor_mod(a, m) = m - 1 - c mod m.
__device__ __forceinline__ int64_t floor_mod_fast(int64_t a, int64_t m) {
  uint64_t um = static_cast<uint64_t>(m);
  if (a >= 0) return static_cast<int64_t>(static_cast<uint64_t>(a) % um);
  uint64_t c = ~static_cast<uint64_t>(a);
  return static_cast<int64_t>(um - 1 - c % um);
}

template <typename IdT, typename CuT>
struct BatchView {
  const IdT *__restrict__ ids;
  const CuT *__restrict__ cu;
  const IdT *__restrict__ context;
  int64_t context_stride;
  int64_t num_requests;
  int64_t num_tokens;
  __device__ CuSeqlens<CuT> cu_seqlens(int64_t *shared) const {
    return CuSeqlens<CuT>{cu, shared, num_requests};
  }
};

template <typename IdT, typename CuT>
__device__ int64_t row_id(const ingot_ngram_config &cfg, const BatchView<IdT, CuT> &v,
                          const CuSeqlens<CuT> &cu, uint32_t t, int h) {
  const int64_t b = find_request(cu, t);
  const int64_t local = static_cast<int64_t>(t) - cu.at(b);
  const int order = 2 + h / cfg.heads_per_order;  // k: uses x_0 .. x_{k-1}
  const int64_t E = cfg.boundary_token;
  uint64_t mix = static_cast<uint64_t>(static_cast<int64_t>(v.ids[t])) *
                 static_cast<uint64_t>(cfg.multipliers[0]);
  bool valid = true;
#pragma unroll
  for (int s = 1; s < INGOT_NGRAM_MAX_N; s++) {
    if (s >= order) break;
    int64_t x = local >= s ? static_cast<int64_t>(v.ids[t - s])
                           : static_cast<int64_t>(
                                 v.context[b * v.context_stride + (cfg.n - 1) + local - s]);
    valid = valid && x != E;
    mix ^= static_cast<uint64_t>(valid ? x : E) * static_cast<uint64_t>(cfg.multipliers[s]);
  }
  return floor_mod_fast(static_cast<int64_t>(mix), cfg.primes[h]) + cfg.offsets[h];
}

template <typename IdT, typename CuT>
__global__ void __launch_bounds__(kThreads)
    ngram_row_ids_kernel(const ingot_ngram_config cfg, const BatchView<IdT, CuT> v,
                         int64_t *__restrict__ rows, int64_t rows_stride, const ErrorSink errors) {
  __shared__ int64_t cu_cache[kCuCacheEntries];
  const CuSeqlens<CuT> cu = v.cu_seqlens(cu_cache);
  if (!block_load_cu_seqlens(cu, v.num_tokens)) {
    record_cu_seqlens_error(errors);
    return;
  }
  // 32-bit item arithmetic (a 64-bit division is a long emulated sequence);
  // the launcher guarantees T * H < 2^31.
  const uint32_t H = static_cast<uint32_t>(cfg.num_heads);
  const uint32_t items = static_cast<uint32_t>(v.num_tokens) * H;  // < 2^31
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
    uint32_t t = i / H;
    int h = static_cast<int>(i - t * H);
    rows[static_cast<int64_t>(t) * rows_stride + h] = row_id(cfg, v, cu, t, h);
  }
}

// ---- context roll ---------------------------------------------------------------

template <typename IdT, typename CuT>
__global__ void __launch_bounds__(kThreads)
    ngram_commit_kernel(const int n, const BatchView<IdT, CuT> v, IdT *context,
                        const ErrorSink errors) {
  __shared__ int64_t cu_cache[kCuCacheEntries];
  const CuSeqlens<CuT> cu = v.cu_seqlens(cu_cache);
  if (!block_load_cu_seqlens(cu, v.num_tokens)) {
    record_cu_seqlens_error(errors);
    return;
  }
  const int w = n - 1;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       b < v.num_requests; b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t begin = cu.at(b);
    const int64_t len = cu.at(b + 1) - begin;
    if (len == 0) continue;
    IdT *row = context + b * v.context_stride;
    IdT window[INGOT_NGRAM_MAX_N];
#pragma unroll
    for (int i = 0; i < INGOT_NGRAM_MAX_N - 1; i++) {
      if (i >= w) break;
      int64_t src = len + i - w;  // < 0: still inside the old context
      window[i] = src < 0 ? row[w + src] : v.ids[begin + src];
    }
#pragma unroll
    for (int i = 0; i < INGOT_NGRAM_MAX_N - 1; i++) {
      if (i >= w) break;
      row[i] = window[i];
    }
  }
}

// ---- gather ------------------------------------------------------------------------

// ---- conversions: hardware instructions, results identical to numeric.h ----
//
// bf16(x * scale) for two values, packed low | high << 16. cvt.rn.bf16x2.f32
// rounds to nearest even exactly like ingot_f32_to_bf16 (no flush: built
// without ftz); only its NaN pattern differs, so NaNs are set to numeric.h's
// canonical 0x7fc0 explicitly.
__device__ __forceinline__ uint32_t scaled_bf16x2(float lo, float hi, float scale) {
  lo *= scale;
  hi *= scale;
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t bits = *reinterpret_cast<uint32_t *>(&h);
  if (lo != lo) bits = (bits & 0xffff0000u) | 0x7fc0u;
  if (hi != hi) bits = (bits & 0x0000ffffu) | 0x7fc00000u;
  return bits;
}

// Two table values (elements 2p and 2p+1 of a chunk) as fp32, exactly.
__device__ __forceinline__ float2 table_pair_to_f32(const uint8_t *v) {
  // e4m3 -> f16 is exact (hardware cvt on sm_89+, emulated before), f16 -> f32 too
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(v[0] | (static_cast<uint16_t>(v[1]) << 8)), __NV_E4M3);
  return __half22float2(*reinterpret_cast<__half2 *>(&h));
}
__device__ __forceinline__ float2 table_pair_to_f32(const uint16_t *v) {
  return make_float2(ingot_bf16_to_f32(v[0]), ingot_bf16_to_f32(v[1]));
}
__device__ __forceinline__ float2 table_pair_to_f32(const float *v) { return make_float2(v[0], v[1]); }

__device__ __forceinline__ float table_to_f32(uint8_t v) { return ingot_e4m3_to_f32(v); }
__device__ __forceinline__ float table_to_f32(uint16_t v) { return ingot_bf16_to_f32(v); }
__device__ __forceinline__ float table_to_f32(float v) { return v; }

struct TableView {
  const void *data;
  int64_t num_rows, dim, stride;
  float scale;
};

struct OutView {
  uint16_t *data;
  int64_t stride;
};

// One chunk of a table row: 16 bytes of table when vectorized, else one
// element; load() and store() are split so that a thread can have several
// loads in flight before it converts anything.
template <typename TableT, bool kVector>
struct Chunk {
  static constexpr int kElems = kVector ? 16 / static_cast<int>(sizeof(TableT)) : 1;
  struct alignas(16) Raw {
    TableT v[kElems];
  };

  // Chunk q of `row`; rows outside the table read nothing.
  __device__ static Raw load(const TableView &tab, int64_t row, uint32_t q, bool &in_range) {
    Raw raw;
    in_range = row >= 0 && row < tab.num_rows;
    if (in_range) {
      const TableT *src = static_cast<const TableT *>(tab.data) + row * tab.stride +
                          static_cast<int64_t>(q) * kElems;
      if constexpr (kVector)
        *reinterpret_cast<uint4 *>(raw.v) = *reinterpret_cast<const uint4 *>(src);
      else
        raw.v[0] = *src;
    }
    return raw;
  }

  // Converts to bf16 (zeros for a row outside the table) and stores chunk q.
  __device__ static void store(const TableView &tab, const Raw &raw, bool in_range, uint32_t q,
                               uint16_t *dst_row) {
    alignas(16) uint16_t out[kElems];
    if constexpr (kElems % 2 == 0) {
#pragma unroll
      for (int e = 0; e < kElems; e += 2) {
        float2 f = table_pair_to_f32(raw.v + e);
        uint32_t bits = in_range ? scaled_bf16x2(f.x, f.y, tab.scale) : 0u;
        out[e] = static_cast<uint16_t>(bits);
        out[e + 1] = static_cast<uint16_t>(bits >> 16);
      }
    } else {
      out[0] = in_range ? ingot_f32_to_bf16(table_to_f32(raw.v[0]) * tab.scale) : uint16_t{0};
    }
    uint16_t *d = dst_row + static_cast<int64_t>(q) * kElems;
    if constexpr (kElems == 16) {
      reinterpret_cast<uint4 *>(d)[0] = reinterpret_cast<const uint4 *>(out)[0];
      reinterpret_cast<uint4 *>(d)[1] = reinterpret_cast<const uint4 *>(out)[1];
    } else if constexpr (kElems == 8) {
      *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(out);
    } else if constexpr (kElems == 4) {
      *reinterpret_cast<uint2 *>(d) = *reinterpret_cast<const uint2 *>(out);
    } else {
      *d = out[0];
    }
  }
};

// Row ids come from memory (gather) ...
struct LoadedRows {
  static constexpr bool kUsesCuSeqlens = false;
  const int64_t *__restrict__ rows;
  int64_t stride;
  int heads;
  __device__ int64_t operator()(int64_t *, uint32_t t, int h) const {
    return rows[static_cast<int64_t>(t) * stride + h];
  }
  __device__ bool batch_valid(int64_t *, const ErrorSink &) const { return true; }
};

// ... or are computed on the fly (fused embed).
template <typename IdT, typename CuT>
struct ComputedRows {
  static constexpr bool kUsesCuSeqlens = true;
  ingot_ngram_config cfg;
  BatchView<IdT, CuT> v;
  __device__ int64_t operator()(int64_t *cu_cache, uint32_t t, int h) const {
    return row_id(cfg, v, v.cu_seqlens(cu_cache), t, h);
  }
  __device__ bool batch_valid(int64_t *cu_cache, const ErrorSink &errors) const {
    if (block_load_cu_seqlens(v.cu_seqlens(cu_cache), v.num_tokens)) return true;
    record_cu_seqlens_error(errors);
    return false;
  }
};

template <typename TableT, bool kVector, typename RowSource>
__global__ void __launch_bounds__(kGatherThreads)
    ngram_gather_kernel(const RowSource source, const int64_t num_tokens, const int heads,
                        const TableView tab, const OutView out, const ErrorSink errors) {
  using C = Chunk<TableT, kVector>;
  __shared__ int64_t tile_rows[kTileRows];
  __shared__ int64_t cu_cache[RowSource::kUsesCuSeqlens ? kCuCacheEntries : 1];
  if (!source.batch_valid(cu_cache, errors)) return;
  // 32-bit index arithmetic: the launcher guarantees T * H < 2^31 and D < 2^27.
  const uint32_t H = static_cast<uint32_t>(heads);
  const uint32_t items = static_cast<uint32_t>(num_tokens) * H;
  const uint32_t tiles = (items + kTileRows - 1) / kTileRows;
  const uint32_t chunks_per_row = static_cast<uint32_t>(tab.dim / C::kElems);
  for (uint32_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const uint32_t base = tile * kTileRows;
    const uint32_t rows_here = min(static_cast<uint32_t>(kTileRows), items - base);
    if (threadIdx.x < rows_here) {
      uint32_t i = base + threadIdx.x;
      uint32_t t = i / H;
      tile_rows[threadIdx.x] = source(cu_cache, t, static_cast<int>(i - t * H));
    }
    __syncthreads();
    const uint32_t tile_chunks = rows_here * chunks_per_row;
    for (uint32_t c0 = threadIdx.x; c0 < tile_chunks; c0 += kGatherThreads * kChunksInFlight) {
      typename C::Raw raw[kChunksInFlight];
      bool in_range[kChunksInFlight];
#pragma unroll
      for (int k = 0; k < kChunksInFlight; k++) {  // all loads first ...
        uint32_t c = c0 + k * kGatherThreads;
        if (c < tile_chunks) {
          uint32_t j = c / chunks_per_row;
          raw[k] = C::load(tab, tile_rows[j], c - j * chunks_per_row, in_range[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < kChunksInFlight; k++) {  // ... then convert and store
        uint32_t c = c0 + k * kGatherThreads;
        if (c < tile_chunks) {
          uint32_t j = c / chunks_per_row;
          uint32_t i = base + j;
          uint32_t t = i / H;
          uint16_t *dst = out.data + static_cast<int64_t>(t) * out.stride +
                          static_cast<int64_t>(i - t * H) * tab.dim;
          C::store(tab, raw[k], in_range[k], c - j * chunks_per_row, dst);
        }
      }
    }
    __syncthreads();  // tile_rows is rewritten by the next tile
  }
}

// ---- reference-arithmetic kernels (INGOT_FORCE_REFERENCE) ------------------------------

__device__ int64_t ref_batch_request(const ingot_ngram_batch &batch, int64_t t) {
  int64_t b = 0;
  while (ingot_ref_load_index(batch.cu_seqlens, batch.cu_dtype, b + 1) <= t) b++;
  return b;
}

// The validity check only (same rule as the fast kernels); the reference
// arithmetic itself reads cu_seqlens through common/ngram_ref.h.
__device__ bool ref_batch_valid(const ingot_ngram_batch &batch, const ErrorSink &errors) {
  __shared__ int64_t cu_cache[kCuCacheEntries];
  bool ok = batch.cu_dtype == INGOT_DTYPE_I32
                ? block_load_cu_seqlens(
                      CuSeqlens<int32_t>{static_cast<const int32_t *>(batch.cu_seqlens), cu_cache,
                                         batch.num_requests},
                      batch.num_tokens)
                : block_load_cu_seqlens(
                      CuSeqlens<int64_t>{static_cast<const int64_t *>(batch.cu_seqlens), cu_cache,
                                         batch.num_requests},
                      batch.num_tokens);
  if (!ok) record_cu_seqlens_error(errors);
  return ok;
}

__global__ void ngram_ref_row_ids_kernel(const ingot_ngram_config cfg,
                                         const ingot_ngram_batch batch, ingot_ngram_rows rows,
                                         const ErrorSink errors) {
  if (!ref_batch_valid(batch, errors)) return;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < batch.num_tokens; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t b = ref_batch_request(batch, t);
    int64_t begin = ingot_ref_load_index(batch.cu_seqlens, batch.cu_dtype, b);
    ingot_ref_token_rows(&cfg, &batch, b, t, t - begin, rows.data + t * rows.stride);
  }
}

__global__ void ngram_ref_commit_kernel(const ingot_ngram_config cfg,
                                        const ingot_ngram_batch batch, const ErrorSink errors) {
  if (!ref_batch_valid(batch, errors)) return;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       b < batch.num_requests; b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    ingot_ref_commit_request(&cfg, &batch, b);
}

__global__ void ngram_ref_gather_kernel(const int64_t *rows, int64_t rows_stride,
                                        int64_t num_tokens, int64_t num_heads,
                                        const ingot_ngram_table table, ingot_bf16_matrix out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < num_tokens * num_heads; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t = i / num_heads, h = i % num_heads;
    ingot_ref_gather_row(&table, rows[t * rows_stride + h],
                         out.data + t * out.stride + h * table.dim);
  }
}

__global__ void ngram_ref_embed_kernel(const ingot_ngram_config cfg,
                                       const ingot_ngram_batch batch,
                                       const ingot_ngram_table table, ingot_bf16_matrix out,
                                       const ErrorSink errors) {
  if (!ref_batch_valid(batch, errors)) return;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       t < batch.num_tokens; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t b = ref_batch_request(batch, t);
    int64_t begin = ingot_ref_load_index(batch.cu_seqlens, batch.cu_dtype, b);
    int64_t rows[INGOT_NGRAM_MAX_HEADS];
    ingot_ref_token_rows(&cfg, &batch, b, t, t - begin, rows);
    for (int h = 0; h < cfg.num_heads; h++)
      ingot_ref_gather_row(&table, rows[h], out.data + t * out.stride + h * table.dim);
  }
}

// ---- launchers ---------------------------------------------------------------------------

// The fast kernels index (token, head) items with 32 bits; at most 2^31 - 1
// items, so that a grid-stride step past the last item cannot wrap.
ingot_status check_item_count(ingot_context *ctx, const char *op, const char *name,
                              int64_t tokens, int64_t heads) {
  if (heads > 0 && tokens > static_cast<int64_t>(INT32_MAX) / heads)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "%s: T * H = %lld * %lld rows; the CUDA kernels take at most 2^31 - 1 "
                           "per call",
                           name, static_cast<long long>(tokens), static_cast<long long>(heads));
  return INGOT_STATUS_SUCCESS;
}

bool force_reference(const ingot_context *ctx) {
  return (ctx->flags & INGOT_CONTEXT_FLAG_FORCE_REFERENCE) != 0;
}

// Calls f(IdT{}, CuT{}) with the batch's index types.
template <typename F>
void with_index_types(const ingot_ngram_batch &batch, F &&f) {
  if (batch.ids_dtype == INGOT_DTYPE_I32) {
    if (batch.cu_dtype == INGOT_DTYPE_I32)
      f(int32_t{}, int32_t{});
    else
      f(int32_t{}, int64_t{});
  } else {
    if (batch.cu_dtype == INGOT_DTYPE_I32)
      f(int64_t{}, int32_t{});
    else
      f(int64_t{}, int64_t{});
  }
}

template <typename IdT, typename CuT>
BatchView<IdT, CuT> batch_view(const ingot_ngram_batch &batch) {
  return BatchView<IdT, CuT>{static_cast<const IdT *>(batch.ids),
                             static_cast<const CuT *>(batch.cu_seqlens),
                             static_cast<const IdT *>(batch.context),
                             batch.context_stride,
                             batch.num_requests,
                             batch.num_tokens};
}

// 16-byte chunks are possible when every row start and chunk is aligned.
bool gather_vectorizable(const ingot_ngram_table &tab, const ingot_bf16_matrix &out) {
  const int64_t esize = static_cast<int64_t>(ingot_dtype_size(tab.dtype));
  const int64_t elems = 16 / esize;
  const int64_t out_align = elems * 2;  // bytes of bf16 written per chunk
  return tab.dim % elems == 0 && reinterpret_cast<uintptr_t>(tab.data) % 16 == 0 &&
         (tab.stride * esize) % 16 == 0 && reinterpret_cast<uintptr_t>(out.data) % out_align == 0 &&
         (out.stride * 2) % out_align == 0;
}

// A tile's chunk count must fit 32 bits too.
ingot_status check_table_dim(ingot_context *ctx, const char *op, int64_t dim) {
  if (dim >= (INT64_C(1) << 27))
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "table: D = %lld, the CUDA gather takes D < 2^27",
                           static_cast<long long>(dim));
  return INGOT_STATUS_SUCCESS;
}

template <typename RowSource>
void launch_gather(const ingot_context *ctx, const RowSource &source, int64_t num_tokens,
                   int heads, const ingot_ngram_table &table, ingot_bf16_matrix out,
                   const ErrorSink errors, cudaStream_t stream) {
  const TableView tab{table.data, table.num_rows, table.dim, table.stride, table.scale};
  const OutView o{out.data, out.stride};
  const unsigned grid = ingot_cuda_grid(ctx, num_tokens * heads, kTileRows, kGatherWaves);
  const bool vec = gather_vectorizable(table, out);
  auto go = [&](auto elem, auto vector) {
    using TableT = decltype(elem);
    ngram_gather_kernel<TableT, decltype(vector)::value><<<grid, kGatherThreads, 0, stream>>>(
        source, num_tokens, heads, tab, o, errors);
  };
  switch (table.dtype) {
    case INGOT_DTYPE_F8_E4M3:
      vec ? go(uint8_t{}, std::true_type{}) : go(uint8_t{}, std::false_type{});
      break;
    case INGOT_DTYPE_BF16:
      vec ? go(uint16_t{}, std::true_type{}) : go(uint16_t{}, std::false_type{});
      break;
    default:
      vec ? go(float{}, std::true_type{}) : go(float{}, std::false_type{});
      break;
  }
}

}  // namespace

ingot_status ingot_cuda_ngram_row_ids(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                                      const ingot_ngram_batch *batch, ingot_ngram_rows rows,
                                      cudaStream_t stream) {
  static const char op[] = "ingot_ngram_row_ids";
  ingot_status st = check_item_count(ctx, op, "ids", batch->num_tokens, cfg->num_heads);
  if (st) return st;
  const ErrorSink errors{ctx->cuda->device_errors, INGOT_DEVICE_ERROR_NGRAM_ROW_IDS_CU_SEQLENS};
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  if (force_reference(ctx)) {
    unsigned grid = ingot_cuda_grid(ctx, batch->num_tokens, kThreads, kWaves);
    ngram_ref_row_ids_kernel<<<grid, kThreads, 0, stream>>>(*cfg, *batch, rows, errors);
  } else {
    unsigned grid = ingot_cuda_grid(ctx, batch->num_tokens * cfg->num_heads, kThreads, kWaves);
    with_index_types(*batch, [&](auto id, auto cu) {
      using IdT = decltype(id);
      using CuT = decltype(cu);
      ngram_row_ids_kernel<IdT, CuT><<<grid, kThreads, 0, stream>>>(
          *cfg, batch_view<IdT, CuT>(*batch), rows.data, rows.stride, errors);
    });
  }
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status ingot_cuda_ngram_commit_context(struct ingot_context *ctx,
                                             const ingot_ngram_config *cfg,
                                             const ingot_ngram_batch *batch,
                                             cudaStream_t stream) {
  static const char op[] = "ingot_ngram_commit_context";
  const ErrorSink errors{ctx->cuda->device_errors, INGOT_DEVICE_ERROR_NGRAM_COMMIT_CU_SEQLENS};
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  unsigned grid = ingot_cuda_grid(ctx, batch->num_requests, kThreads, kWaves);
  if (force_reference(ctx)) {
    ngram_ref_commit_kernel<<<grid, kThreads, 0, stream>>>(*cfg, *batch, errors);
  } else {
    with_index_types(*batch, [&](auto id, auto cu) {
      using IdT = decltype(id);
      using CuT = decltype(cu);
      ngram_commit_kernel<IdT, CuT><<<grid, kThreads, 0, stream>>>(
          cfg->n, batch_view<IdT, CuT>(*batch), static_cast<IdT *>(batch->context), errors);
    });
  }
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status ingot_cuda_ngram_gather(struct ingot_context *ctx, const int64_t *rows,
                                     int64_t rows_stride, int64_t num_tokens, int64_t num_heads,
                                     const ingot_ngram_table *table, ingot_bf16_matrix out,
                                     cudaStream_t stream) {
  static const char op[] = "ingot_ngram_gather";
  ingot_status st = check_item_count(ctx, op, "rows", num_tokens, num_heads);
  if (st == INGOT_STATUS_SUCCESS) st = check_table_dim(ctx, op, table->dim);
  if (st) return st;
  if (num_heads > INT32_MAX)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "rows: shape[1] = %lld heads, the CUDA gather takes at most 2^31-1",
                           static_cast<long long>(num_heads));
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  if (force_reference(ctx)) {
    unsigned grid = ingot_cuda_grid(ctx, num_tokens * num_heads, kThreads, kWaves);
    ngram_ref_gather_kernel<<<grid, kThreads, 0, stream>>>(rows, rows_stride, num_tokens,
                                                           num_heads, *table, out);
  } else {
    LoadedRows source{rows, rows_stride, static_cast<int>(num_heads)};
    launch_gather(ctx, source, num_tokens, static_cast<int>(num_heads), *table, out,
                  ErrorSink{ctx->cuda->device_errors, 0u}, stream);
  }
  return ingot_cuda_check_launch(ctx, op);
}

ingot_status ingot_cuda_ngram_embed(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                                    const ingot_ngram_batch *batch,
                                    const ingot_ngram_table *table, ingot_bf16_matrix out,
                                    cudaStream_t stream) {
  static const char op[] = "ingot_ngram_embed";
  ingot_status st = check_item_count(ctx, op, "ids", batch->num_tokens, cfg->num_heads);
  if (st == INGOT_STATUS_SUCCESS) st = check_table_dim(ctx, op, table->dim);
  if (st) return st;
  const ErrorSink errors{ctx->cuda->device_errors, INGOT_DEVICE_ERROR_NGRAM_EMBED_CU_SEQLENS};
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  if (force_reference(ctx)) {
    unsigned grid = ingot_cuda_grid(ctx, batch->num_tokens, kThreads, kWaves);
    ngram_ref_embed_kernel<<<grid, kThreads, 0, stream>>>(*cfg, *batch, *table, out, errors);
  } else {
    with_index_types(*batch, [&](auto id, auto cu) {
      using IdT = decltype(id);
      using CuT = decltype(cu);
      ComputedRows<IdT, CuT> source{*cfg, batch_view<IdT, CuT>(*batch)};
      launch_gather(ctx, source, batch->num_tokens, cfg->num_heads, *table, out, errors, stream);
    });
  }
  return ingot_cuda_check_launch(ctx, op);
}
