/*
 * dev playground (not built by CMake): where does the row-id kernel's time
 * go? Times, by difference, variants of ngram_row_ids_kernel that each leave
 * one stage out (their results are wrong on purpose; timing only):
 *   bit 1  no modulo (mix & 0xffff instead of floor_mod(mix, P))
 *   bit 2  no loads of the tokens to the left (x_s = t + s)
 *   bit 4  no cu_seqlens check / request search (b = t, offset 0: decode)
 * Each variant: a CUDA graph of 20 dependent launches, median of 50 replays,
 * per launch, for decode batches of the real config (H = 16).
 * Build and run (after building the library in build/):
 *   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
 *     -DINGOT_WITH_CUDA -fmad=false -o row_ids_stages dev/cuda/row_ids_stages.cu \
 *     build/libingot.a && ./row_ids_stages
 */
#include <cstdio>

#include "graph_timing.cuh"

#include "../../src/cuda/ngram.cu"  // the production kernels and helpers, same TU

namespace {

template <int kSkip>
__global__ void __launch_bounds__(kThreads)
    row_ids_variant(const ingot_ngram_config cfg, const BatchView<int32_t, int32_t> v,
                    int64_t *__restrict__ rows, int64_t rows_stride, uint32_t *errors) {
  __shared__ int64_t cu_cache[kCuCacheEntries];
  const CuSeqlens<int32_t> cu = v.cu_seqlens(cu_cache);
  if (!(kSkip & 4) && !block_load_cu_seqlens(cu, v.num_tokens)) {
    record_cu_seqlens_error(ErrorSink{errors, 1u});
    return;
  }
  const uint32_t H = static_cast<uint32_t>(cfg.num_heads);
  const uint32_t items = static_cast<uint32_t>(v.num_tokens) * H;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
    uint32_t t = i / H;
    int h = static_cast<int>(i - t * H);
    int64_t b = t, local = 0;
    if (!(kSkip & 4)) {
      b = find_request(cu, t);
      local = static_cast<int64_t>(t) - cu.at(b);
    }
    const int order = 2 + h / cfg.heads_per_order;
    const int64_t E = cfg.boundary_token;
    uint64_t mix = static_cast<uint64_t>(static_cast<int64_t>(v.ids[t])) *
                   static_cast<uint64_t>(cfg.multipliers[0]);
    bool valid = true;
#pragma unroll
    for (int s = 1; s < INGOT_NGRAM_MAX_N; s++) {
      if (s >= order) break;
      int64_t x;
      if (kSkip & 2)
        x = static_cast<int64_t>(t) + s;
      else
        x = local >= s ? static_cast<int64_t>(v.ids[t - s])
                       : static_cast<int64_t>(v.context[b * v.context_stride + (cfg.n - 1) + local - s]);
      valid = valid && x != E;
      mix ^= static_cast<uint64_t>(valid ? x : E) * static_cast<uint64_t>(cfg.multipliers[s]);
    }
    int64_t r = (kSkip & 1) ? static_cast<int64_t>(mix & 0xffff)
                            : floor_mod_fast(static_cast<int64_t>(mix), cfg.primes[h]);
    rows[static_cast<int64_t>(t) * rows_stride + h] = r + cfg.offsets[h];
  }
}

template <int kSkip>
float time_variant(const ingot_ngram_config &cfg, const BatchView<int32_t, int32_t> &v,
                   int64_t *rows, uint32_t *errors, cudaStream_t s) {
  unsigned grid = (unsigned)((v.num_tokens * cfg.num_heads + kThreads - 1) / kThreads);
  cudaGraph_t g;
  cudaGraphExec_t e;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int k = 0; k < 20; k++)
    row_ids_variant<kSkip><<<grid, kThreads, 0, s>>>(cfg, v, rows, cfg.num_heads, errors);
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&e, g, 0);
  const float us = median_replay_us(e, s, 10, 50, 20);
  cudaGraphExecDestroy(e), cudaGraphDestroy(g);
  return us;
}

}  // namespace

int main() {
  ingot_ngram_config cfg;
  if (ingot_ngram_config_derive(248320, 3, 8, 20000000, 1234, 0, 248044, &cfg)) return 1;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  uint32_t *errors;
  cudaMalloc(&errors, 4);
  cudaMemset(errors, 0, 4);
  printf("per launch, us (graph of 20 dependent launches, median of 50 replays)\n");
  printf("%-8s %8s %8s %8s %8s %8s %8s\n", "B", "full", "-mod", "-loads", "-search", "-all3", "");
  for (int B : {1, 64, 256}) {
    std::vector<int32_t> ids(B), cu(B + 1), ctx(2 * B);
    for (int i = 0; i < B; i++) ids[i] = 1000 + i, ctx[2 * i] = 7 + i, ctx[2 * i + 1] = 9 + i;
    for (int i = 0; i <= B; i++) cu[i] = i;
    int32_t *d_ids, *d_cu, *d_ctx;
    int64_t *d_rows;
    cudaMalloc(&d_ids, B * 4), cudaMalloc(&d_cu, (B + 1) * 4), cudaMalloc(&d_ctx, 2 * B * 4);
    cudaMalloc(&d_rows, (size_t)B * 16 * 8);
    cudaMemcpy(d_ids, ids.data(), B * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_cu, cu.data(), (B + 1) * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_ctx, ctx.data(), 2 * B * 4, cudaMemcpyHostToDevice);
    BatchView<int32_t, int32_t> v{d_ids, d_cu, d_ctx, 2, B, B};
    printf("%-8d %8.2f %8.2f %8.2f %8.2f %8.2f\n", B, time_variant<0>(cfg, v, d_rows, errors, s),
           time_variant<1>(cfg, v, d_rows, errors, s), time_variant<2>(cfg, v, d_rows, errors, s),
           time_variant<4>(cfg, v, d_rows, errors, s), time_variant<7>(cfg, v, d_rows, errors, s));
    cudaFree(d_ids), cudaFree(d_cu), cudaFree(d_ctx), cudaFree(d_rows);
  }
  cudaError_t err = cudaDeviceSynchronize();
  printf("%s\n", cudaGetErrorString(err));
  return err != cudaSuccess;
}
