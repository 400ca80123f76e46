/*
 * The CUDA backend: context set-up (device properties, the device error
 * word), pointer residency queries for core, and the op table.
 */
#include <cstdio>
#include <cstdlib>

#include "cuda/common.cuh"
#include "cuda/cuda.cuh"

extern "C" int ingot_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* clear: no driver / no device is not an error here */
    return 0;
  }
  return n;
}

extern "C" ingot_memory_kind ingot_cuda_memory_kind(const void *ptr, int *device) {
  if (device) *device = -1;
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return INGOT_MEMORY_HOST_PAGEABLE;
  }
  switch (attr.type) {
    case cudaMemoryTypeHost: return INGOT_MEMORY_HOST_PINNED;
    case cudaMemoryTypeDevice:
      if (device) *device = attr.device;
      return INGOT_MEMORY_DEVICE;
    case cudaMemoryTypeManaged: return INGOT_MEMORY_MANAGED;
    default: return INGOT_MEMORY_HOST_PAGEABLE;
  }
}

// Moves the error word to `taken` and clears it in one atomic step, so that a
// bit set concurrently by a kernel on another stream is never lost.
__global__ void take_device_errors_kernel(uint32_t *word, uint32_t *taken) {
  *taken = atomicExch(word, 0u);
}

static ingot_status cuda_context_init(struct ingot_context *ctx) {
  static const char op[] = "ingot_context_create";
  int count = ingot_cuda_device_count();
  if (ctx->device >= count)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "device: %d, but %d CUDA device(s) are visible", ctx->device, count);
  ctx->cuda = static_cast<ingot_cuda_state *>(calloc(1, sizeof(ingot_cuda_state)));
  if (ctx->cuda == nullptr)
    return ingot_core_fail(ctx, INGOT_STATUS_ALLOC_FAILED, op, "out of host memory");
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  cudaDeviceProp prop;
  INGOT_CUDA_TRY(ctx, op, cudaGetDeviceProperties(&prop, ctx->device));
  if (prop.major < 8)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "device: %d is %s, compute capability %d.%d; ingot needs 8.0 or newer",
                           ctx->device, prop.name, prop.major, prop.minor);
  ctx->sm_count = prop.multiProcessorCount;
  ctx->cc_major = prop.major;
  ctx->cc_minor = prop.minor;
  int pageable = 0;
  INGOT_CUDA_TRY(ctx, op,
                 cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, ctx->device));
  ctx->pageable_memory_access = pageable;
  ctx->cuda->smem_optin = (int)prop.sharedMemPerBlockOptin;
  ingot_cuda_nvfp4_gemm_init(ctx);
  ingot_cuda_sampling_init(ctx);
  void *word = nullptr;
  INGOT_CUDA_TRY(ctx, op, cudaMalloc(&word, 2 * sizeof(uint32_t)));
  ctx->cuda->device_errors = static_cast<uint32_t *>(word);
  ctx->cuda->device_errors_taken = ctx->cuda->device_errors + 1;
  cudaError_t e = cudaMemset(word, 0, 2 * sizeof(uint32_t));
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    return ingot_core_fail(ctx, INGOT_STATUS_CUDA_ERROR, op, "clearing the error word: %s",
                           cudaGetErrorString(e));
  return INGOT_STATUS_SUCCESS;
}

static void cuda_context_fini(struct ingot_context *ctx) {
  if (ctx->cuda == nullptr) return;
  ingot_device_guard guard;
  if (ctx->cuda->device_errors && guard.enter(ctx->device) == cudaSuccess)
    cudaFree(ctx->cuda->device_errors);
  free(ctx->cuda);
  ctx->cuda = nullptr;
}

static ingot_status cuda_check_device_errors(struct ingot_context *ctx, cudaStream_t stream) {
  static const char op[] = "ingot_context_check_device_errors";
  ingot_device_guard guard;
  INGOT_CUDA_TRY(ctx, op, guard.enter(ctx->device));
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  INGOT_CUDA_TRY(ctx, op, cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "stream: is being captured into a CUDA graph; check after replaying");
  const ingot_cuda_state *cuda = ctx->cuda;
  take_device_errors_kernel<<<1, 1, 0, stream>>>(cuda->device_errors, cuda->device_errors_taken);
  INGOT_CUDA_TRY(ctx, op, cudaGetLastError());
  uint32_t bits = 0;
  INGOT_CUDA_TRY(ctx, op, cudaMemcpyAsync(&bits, cuda->device_errors_taken, sizeof bits,
                                          cudaMemcpyDeviceToHost, stream));
  INGOT_CUDA_TRY(ctx, op, cudaStreamSynchronize(stream));
  if (bits == 0) return INGOT_STATUS_SUCCESS;
  static const struct {
    uint32_t bit;
    const char *op;
  } ops[] = {{INGOT_DEVICE_ERROR_NGRAM_ROW_IDS_CU_SEQLENS, "ingot_ngram_row_ids"},
             {INGOT_DEVICE_ERROR_NGRAM_COMMIT_CU_SEQLENS, "ingot_ngram_commit_context"},
             {INGOT_DEVICE_ERROR_NGRAM_EMBED_CU_SEQLENS, "ingot_ngram_embed"}};
  for (const auto &o : ops)
    if (bits & o.bit)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, o.op,
                             "cu_seqlens: not 0 = cu[0] <= ... <= cu[B] = T (found on the "
                             "device; that call wrote nothing; error bits 0x%x)",
                             bits);
  return ingot_core_fail(ctx, INGOT_STATUS_INTERNAL, op, "unknown device error bits 0x%x", bits);
}

// ---- host tables (core/host_table.c) -------------------------------------------

// The ops take the host pointer itself: the device must reach registered host
// memory at the same address (true with UVA on 64-bit Linux hosts; checked).
static ingot_status check_same_address(void *ptr, char *why, size_t why_size) {
  void *dev = nullptr;
  cudaError_t e = cudaHostGetDevicePointer(&dev, ptr, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    snprintf(why, why_size, "cudaHostGetDevicePointer: %s", cudaGetErrorString(e));
    return INGOT_STATUS_CUDA_ERROR;
  }
  if (dev != ptr) {
    snprintf(why, why_size,
             "the GPU maps host memory %p at device address %p; ingot's ops need the same "
             "address (UVA with cudaDevAttrCanUseHostPointerForRegisteredMem)",
             ptr, dev);
    return INGOT_STATUS_NOT_SUPPORTED;
  }
  return INGOT_STATUS_SUCCESS;
}

static ingot_status cuda_host_register(struct ingot_context *ctx, void *ptr, size_t bytes,
                                       char *why, size_t why_size) {
  ingot_device_guard guard;
  cudaError_t e = guard.enter(ctx->device);
  if (e == cudaSuccess)
    e = cudaHostRegister(ptr, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    snprintf(why, why_size, "cudaHostRegister(%zu bytes): %s (%s)", bytes, cudaGetErrorString(e),
             cudaGetErrorName(e));
    return INGOT_STATUS_CUDA_ERROR;
  }
  ingot_status st = check_same_address(ptr, why, why_size);
  if (st != INGOT_STATUS_SUCCESS) cudaHostUnregister(ptr);
  return st;
}

/* The registration is portable (every device): no device switch, which
 * could fail, or make a context, after the table's context is gone. */
static void cuda_host_unregister(int device, void *ptr) {
  (void)device;
  if (cudaHostUnregister(ptr) != cudaSuccess) cudaGetLastError(); /* a destructor: no report */
}

static ingot_status cuda_host_alloc(struct ingot_context *ctx, size_t bytes, void **out,
                                    char *why, size_t why_size) {
  ingot_device_guard guard;
  void *p = nullptr;
  cudaError_t e = guard.enter(ctx->device);
  if (e == cudaSuccess) e = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    snprintf(why, why_size, "cudaHostAlloc(%zu bytes): %s (%s)", bytes, cudaGetErrorString(e),
             cudaGetErrorName(e));
    return INGOT_STATUS_CUDA_ERROR;
  }
  ingot_status st = check_same_address(p, why, why_size);
  if (st != INGOT_STATUS_SUCCESS) {
    cudaFreeHost(p);
    return st;
  }
  *out = p;
  return INGOT_STATUS_SUCCESS;
}

static void cuda_host_free(int device, void *ptr) {
  ingot_device_guard guard;
  if (guard.enter(device) == cudaSuccess && cudaFreeHost(ptr) == cudaSuccess) return;
  cudaGetLastError();
}

#define INGOT_CUDA_ENTRY(op, params) ingot_cuda_##op,
const ingot_backend_ops ingot_cuda_backend_ops = {
    /* .name                = */ "cuda",
    /* .context_init        = */ cuda_context_init,
    /* .context_fini        = */ cuda_context_fini,
    /* .check_device_errors = */ cuda_check_device_errors,
    /* .host_register       = */ cuda_host_register,
    /* .host_unregister     = */ cuda_host_unregister,
    /* .host_alloc          = */ cuda_host_alloc,
    /* .host_free           = */ cuda_host_free,
    INGOT_BACKEND_OPS(INGOT_CUDA_ENTRY)};
#undef INGOT_CUDA_ENTRY
