/*
 * The CUDA backend: context set-up (device properties, the device error
 * word), pointer residency queries for core, and the op table.
 */
#include <cstdio>

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
  ctx->smem_optin = (int)prop.sharedMemPerBlockOptin;
  ingot_cuda_nvfp4_gemm_init(ctx);
  ingot_cuda_sampling_init(ctx);
  void *word = nullptr;
  INGOT_CUDA_TRY(ctx, op, cudaMalloc(&word, 2 * sizeof(uint32_t)));
  ctx->device_errors = static_cast<uint32_t *>(word);
  ctx->device_errors_taken = ctx->device_errors + 1;
  cudaError_t e = cudaMemset(word, 0, 2 * sizeof(uint32_t));
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    cudaFree(word);
    ctx->device_errors = nullptr;
    return ingot_core_fail(ctx, INGOT_STATUS_CUDA_ERROR, op, "clearing the error word: %s",
                           cudaGetErrorString(e));
  }
  return INGOT_STATUS_SUCCESS;
}

static void cuda_context_fini(struct ingot_context *ctx) {
  ingot_device_guard guard;
  if (guard.enter(ctx->device) == cudaSuccess && ctx->device_errors) cudaFree(ctx->device_errors);
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
  take_device_errors_kernel<<<1, 1, 0, stream>>>(ctx->device_errors, ctx->device_errors_taken);
  INGOT_CUDA_TRY(ctx, op, cudaGetLastError());
  uint32_t bits = 0;
  INGOT_CUDA_TRY(ctx, op, cudaMemcpyAsync(&bits, ctx->device_errors_taken, sizeof bits,
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

const ingot_backend_ops ingot_cuda_backend_ops = {
    /* .name                 = */ "cuda",
    /* .context_init         = */ cuda_context_init,
    /* .context_fini         = */ cuda_context_fini,
    /* .check_device_errors  = */ cuda_check_device_errors,
    /* .ngram_row_ids        = */ ingot_cuda_ngram_row_ids,
    /* .ngram_commit_context = */ ingot_cuda_ngram_commit_context,
    /* .ngram_gather         = */ ingot_cuda_ngram_gather,
    /* .ngram_embed          = */ ingot_cuda_ngram_embed,
    /* .nvfp4_global_scale   = */ ingot_cuda_nvfp4_global_scale,
    /* .nvfp4_quantize       = */ ingot_cuda_nvfp4_quantize,
    /* .nvfp4_dequantize     = */ ingot_cuda_nvfp4_dequantize,
    /* .nvfp4_swizzle_scales = */ ingot_cuda_nvfp4_swizzle_scales,
    /* .nvfp4_unswizzle_scales = */ ingot_cuda_nvfp4_unswizzle_scales,
    /* .nvfp4_gemm_workspace_size = */ ingot_cuda_nvfp4_gemm_workspace_size,
    /* .nvfp4_gemm           = */ ingot_cuda_nvfp4_gemm,
    /* .nvfp4_geglu_workspace_size = */ ingot_cuda_nvfp4_geglu_workspace_size,
    /* .nvfp4_geglu          = */ ingot_cuda_nvfp4_geglu,
    /* .sampling_softmax_workspace_size = */ ingot_cuda_sampling_softmax_workspace_size,
    /* .sampling_softmax     = */ ingot_cuda_sampling_softmax,
    /* .sample_workspace_size = */ ingot_cuda_sample_workspace_size,
    /* .sample               = */ ingot_cuda_sample,
};
