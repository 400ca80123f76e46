/*
 * NCCL for the CUDA backend: the communicator queries and the two
 * collectives of sharded sampling (include/ingot/ingot.h, "The whole sharded
 * call over NCCL").
 *
 * libnccl is not linked: libingot loads on machines without it, and it
 * must call the very NCCL that made the caller's communicator (a second copy
 * would misread it). So the functions are looked up in the file that
 * INGOT_NCCL_LIBRARY names when it is set, and else, in this order, in the
 * process's global scope (an executable linked with NCCL, a library loaded
 * RTLD_GLOBAL) and in a libnccl.so.2 the process has already loaded
 * (RTLD_NOLOAD: PyTorch's wheel, an engine's own); never in a fresh copy the
 * loader would find, since a communicator cannot come from an NCCL the
 * process has not loaded (INGOT_NCCL_LIBRARY too must name a loaded one). Built only when CMake found nccl.h
 * (INGOT_WITH_NCCL) for the declarations; without it every entry returns
 * NOT_SUPPORTED.
 */
#include "cuda/common.cuh"
#include "cuda/cuda.cuh"

#if defined(INGOT_WITH_NCCL)

#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

namespace {

struct NcclApi {
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclCommCount) comm_count;
  decltype(&ncclCommUserRank) comm_user_rank;
  decltype(&ncclCommCuDevice) comm_cu_device;
  decltype(&ncclGetErrorString) error_string;
  bool loaded;
  char why[256]; /* why not loaded */
};

// Zero-initialised, filled once by load_nccl (pthread_once: the host code
// has no C++ runtime, so no guarded statics).
NcclApi g_nccl;
pthread_once_t g_nccl_once = PTHREAD_ONCE_INIT;

template <typename Fn>
bool find_symbol(void *lib, const char *where, const char *name, Fn *fn) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr)
    snprintf(g_nccl.why, sizeof g_nccl.why, "%s has no %s (NCCL too old?)", where, name);
  return *fn != nullptr;
}

bool find_api(void *lib, const char *where) {
  return find_symbol(lib, where, "ncclAllGather", &g_nccl.all_gather) &&
         find_symbol(lib, where, "ncclAllReduce", &g_nccl.all_reduce) &&
         find_symbol(lib, where, "ncclCommCount", &g_nccl.comm_count) &&
         find_symbol(lib, where, "ncclCommUserRank", &g_nccl.comm_user_rank) &&
         find_symbol(lib, where, "ncclCommCuDevice", &g_nccl.comm_cu_device) &&
         find_symbol(lib, where, "ncclGetErrorString", &g_nccl.error_string);
}

void load_nccl() {
  const char *path = getenv("INGOT_NCCL_LIBRARY");
  if (path != nullptr && path[0] != '\0') { /* the caller names it: that one only, loaded */
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib != nullptr)
      g_nccl.loaded = find_api(lib, path);
    else
      snprintf(g_nccl.why, sizeof g_nccl.why,
               "INGOT_NCCL_LIBRARY: %s is not loaded in this process (it must be the NCCL "
               "that made the communicator)",
               path);
    return;
  }
  if (dlsym(RTLD_DEFAULT, "ncclAllGather") != nullptr) {
    g_nccl.loaded = find_api(RTLD_DEFAULT, "the process's global scope");
    return;
  }
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (lib != nullptr) {
    g_nccl.loaded = find_api(lib, "libnccl.so.2");
    return;
  }
  snprintf(g_nccl.why, sizeof g_nccl.why,
           "no NCCL in this process (no libnccl.so.2 loaded, no NCCL symbols in its global "
           "scope); set INGOT_NCCL_LIBRARY to the file of the NCCL that made the communicator");
}

ingot_status nccl_ready(struct ingot_context *ctx, const char *op) {
  pthread_once(&g_nccl_once, load_nccl);
  if (g_nccl.loaded) return INGOT_STATUS_SUCCESS;
  return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op, "comm: %s", g_nccl.why);
}

ingot_status nccl_check(struct ingot_context *ctx, const char *op, const char *call,
                        ncclResult_t r) {
  if (r == ncclSuccess) return INGOT_STATUS_SUCCESS;
  return ingot_core_fail(ctx, INGOT_STATUS_CUDA_ERROR, op, "%s: %s (ncclResult_t %d)", call,
                         g_nccl.error_string(r), static_cast<int>(r));
}

}  // namespace

ingot_status ingot_cuda_nccl_comm_info(struct ingot_context *ctx, const char *op,
                                       struct ncclComm *comm, int32_t *ranks, int32_t *rank,
                                       int32_t *device) {
  ingot_status st = nccl_ready(ctx, op);
  if (st) return st;
  int n = 0, r = 0, d = 0;
  if ((st = nccl_check(ctx, op, "ncclCommCount", g_nccl.comm_count(comm, &n)))) return st;
  if ((st = nccl_check(ctx, op, "ncclCommUserRank", g_nccl.comm_user_rank(comm, &r)))) return st;
  if ((st = nccl_check(ctx, op, "ncclCommCuDevice", g_nccl.comm_cu_device(comm, &d)))) return st;
  *ranks = n, *rank = r, *device = d;
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cuda_nccl_exchange(struct ingot_context *ctx, const char *op,
                                      struct ncclComm *comm, int32_t exchange, const void *record,
                                      size_t record_bytes, void *out, struct CUstream_st *stream) {
  ingot_status st = nccl_ready(ctx, op);
  if (st) return st;
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  if (exchange == INGOT_SAMPLING_SHARD_EXCHANGE_SUM)
    return nccl_check(ctx, op, "ncclAllReduce",
                      g_nccl.all_reduce(record, out, record_bytes / sizeof(uint64_t), ncclUint64,
                                        ncclSum, comm, stream));
  return nccl_check(ctx, op, "ncclAllGather",
                    g_nccl.all_gather(record, out, record_bytes, ncclUint8, comm, stream));
}

ingot_status ingot_cuda_nccl_all_gather_host(struct ingot_context *ctx, const char *op,
                                             struct ncclComm *comm, const void *mine,
                                             size_t bytes, int32_t ranks, void *all,
                                             struct CUstream_st *stream) {
  ingot_status st = nccl_ready(ctx, op);
  if (st) return st;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  INGOT_CUDA_TRY(ctx, op, cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "stream: capturing a CUDA graph; this check waits for the stream "
                           "(a setup call: make it before the capture)");
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  uint8_t *send = nullptr;
  const size_t total = bytes * (1 + static_cast<size_t>(ranks));
  INGOT_CUDA_TRY(ctx, op, cudaMalloc(&send, total));
  uint8_t *recv = send + bytes;
  cudaError_t e = cudaMemcpyAsync(send, mine, bytes, cudaMemcpyHostToDevice, stream);
  ncclResult_t r = ncclSuccess;
  if (e == cudaSuccess) r = g_nccl.all_gather(send, recv, bytes, ncclUint8, comm, stream);
  if (e == cudaSuccess && r == ncclSuccess)
    e = cudaMemcpyAsync(all, recv, bytes * static_cast<size_t>(ranks), cudaMemcpyDeviceToHost,
                        stream);
  if (e == cudaSuccess && r == ncclSuccess) e = cudaStreamSynchronize(stream);
  cudaFree(send);
  if ((st = nccl_check(ctx, op, "ncclAllGather", r))) return st;
  INGOT_CUDA_TRY(ctx, op, e);
  return INGOT_STATUS_SUCCESS;
}

#else /* !INGOT_WITH_NCCL */

namespace {
ingot_status no_nccl(struct ingot_context *ctx, const char *op) {
  return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                         "comm: this libingot was built without NCCL (nccl.h not found by "
                         "CMake: set NCCL_HOME, or INGOT_NCCL=ON to require it)");
}
}  // namespace

ingot_status ingot_cuda_nccl_comm_info(struct ingot_context *ctx, const char *op,
                                       struct ncclComm *, int32_t *, int32_t *, int32_t *) {
  return no_nccl(ctx, op);
}

ingot_status ingot_cuda_nccl_exchange(struct ingot_context *ctx, const char *op,
                                      struct ncclComm *, int32_t, const void *, size_t, void *,
                                      struct CUstream_st *) {
  return no_nccl(ctx, op);
}

ingot_status ingot_cuda_nccl_all_gather_host(struct ingot_context *ctx, const char *op,
                                             struct ncclComm *, const void *, size_t, int32_t,
                                             void *, struct CUstream_st *) {
  return no_nccl(ctx, op);
}

#endif
