/*
 * The two kernels of dev/ple_host_gather_probe.c (dev/ple_host_gather_kernels.cu),
 * callable from C. Not part of libingot.
 */
#ifndef INGOT_DEV_PLE_HOST_GATHER_KERNELS_H
#define INGOT_DEV_PLE_HOST_GATHER_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[pos[i]] = table[ids[i]] for i < n_rows, rows of row_bytes (a multiple
 * of 16; table and out 16-byte aligned). ids NULL: row i (a contiguous copy);
 * pos NULL: position i. At most max_blocks blocks (grid-stride). */
cudaError_t probe_launch_gather(const void *table, const int64_t *ids, const int32_t *pos,
                                int64_t n_rows, int row_bytes, void *out, int max_blocks,
                                cudaStream_t stream);

/* One thread that polls *flag (host memory mapped for the GPU) until it is
 * non-zero, or until timeout_ns have passed, then sets *timed_out (device
 * memory) to 1. Holds the stream while the host enqueues the timed work. */
cudaError_t probe_launch_wait(const volatile int *flag, unsigned long long timeout_ns,
                              int *timed_out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
