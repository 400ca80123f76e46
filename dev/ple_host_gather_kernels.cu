/*
 * Kernels of the host-table gather probe (dev/ple_host_gather_probe.c).
 *
 *   gather_kernel  copies rows table[ids[i]] -> out[pos[i]] with 16-byte
 *                  loads; a thread owns kInFlight 16-byte pieces (strided by
 *                  the block size) and starts all their loads before any
 *                  store, as ingot's gather does, so that many reads of host
 *                  memory are in flight at once. Grid-stride over the pieces.
 *   wait_kernel    one thread holding the stream until the host raises a
 *                  flag: the timed launches then run back to back on the
 *                  GPU, without the host's enqueue time between them.
 */
#include "ple_host_gather_kernels.h"

namespace {

constexpr int kThreads = 128;
constexpr int kInFlight = 4;

__global__ void __launch_bounds__(kThreads)
    gather_kernel(const uint8_t *__restrict__ table, const int64_t *__restrict__ ids,
                  const int32_t *__restrict__ pos, int64_t n_rows, int vecs_per_row,
                  uint4 *__restrict__ out) {
  const int64_t total = n_rows * vecs_per_row;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads * kInFlight;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kInFlight + threadIdx.x;
       base < total; base += step) {
    uint4 v[kInFlight];
    int64_t dst[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; k++) {
      const int64_t c = base + static_cast<int64_t>(k) * kThreads;
      v[k] = make_uint4(0, 0, 0, 0);
      dst[k] = -1;
      if (c < total) {
        const int64_t i = c / vecs_per_row;
        const int64_t q = c - i * vecs_per_row;
        const int64_t row = ids ? ids[i] : i;
        const int64_t at = pos ? static_cast<int64_t>(pos[i]) : i;
        v[k] = reinterpret_cast<const uint4 *>(table)[row * vecs_per_row + q];
        dst[k] = at * vecs_per_row + q;
      }
    }
#pragma unroll
    for (int k = 0; k < kInFlight; k++)
      if (dst[k] >= 0) out[dst[k]] = v[k];
  }
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void wait_kernel(const volatile int *flag, unsigned long long timeout_ns,
                            int *timed_out) {
  const unsigned long long t0 = global_ns();
  while (*flag == 0) {
    if (global_ns() - t0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(256);
  }
}

}  // namespace

extern "C" cudaError_t probe_launch_gather(const void *table, const int64_t *ids,
                                           const int32_t *pos, int64_t n_rows, int row_bytes,
                                           void *out, int max_blocks, cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (row_bytes <= 0 || row_bytes % 16 != 0 || max_blocks < 1) return cudaErrorInvalidValue;
  const int vecs = row_bytes / 16;
  const int64_t per_block = static_cast<int64_t>(kThreads) * kInFlight;
  int64_t blocks = (n_rows * vecs + per_block - 1) / per_block;
  if (blocks > max_blocks) blocks = max_blocks;
  gather_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint8_t *>(table), ids, pos, n_rows, vecs, static_cast<uint4 *>(out));
  return cudaGetLastError();
}

extern "C" cudaError_t probe_launch_wait(const volatile int *flag, unsigned long long timeout_ns,
                                         int *timed_out, cudaStream_t stream) {
  wait_kernel<<<1, 1, 0, stream>>>(flag, timeout_ns, timed_out);
  return cudaGetLastError();
}
