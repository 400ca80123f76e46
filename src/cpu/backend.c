/* The CPU backend's op table. */
#include "cpu/cpu.h"

static ingot_status cpu_context_init(struct ingot_context *ctx) {
#ifdef INGOT_WITH_CUDA
  /* Lets core reject CUDA device pointers given to a CPU context. */
  ctx->detect_device_pointers = ingot_cuda_device_count() > 0;
#else
  (void)ctx;
#endif
  return INGOT_STATUS_SUCCESS;
}

const ingot_backend_ops ingot_cpu_backend_ops = {
    /* .name                 = */ "cpu",
    /* .context_init         = */ cpu_context_init,
    /* .context_fini         = */ NULL,
    /* .check_device_errors  = */ NULL,
    /* .ngram_row_ids        = */ ingot_cpu_ngram_row_ids,
    /* .ngram_commit_context = */ ingot_cpu_ngram_commit_context,
    /* .ngram_gather         = */ ingot_cpu_ngram_gather,
    /* .ngram_embed          = */ ingot_cpu_ngram_embed,
    /* .nvfp4_global_scale   = */ ingot_cpu_nvfp4_global_scale,
    /* .nvfp4_quantize       = */ ingot_cpu_nvfp4_quantize,
    /* .nvfp4_dequantize     = */ ingot_cpu_nvfp4_dequantize,
    /* .nvfp4_swizzle_scales = */ ingot_cpu_nvfp4_swizzle_scales,
    /* .nvfp4_unswizzle_scales = */ ingot_cpu_nvfp4_unswizzle_scales,
    /* .nvfp4_gemm_workspace_size = */ ingot_cpu_nvfp4_gemm_workspace_size,
    /* .nvfp4_gemm           = */ ingot_cpu_nvfp4_gemm,
    /* .nvfp4_geglu_workspace_size = */ ingot_cpu_nvfp4_geglu_workspace_size,
    /* .nvfp4_geglu          = */ ingot_cpu_nvfp4_geglu,
    /* .sampling_softmax_workspace_size = */ ingot_cpu_sampling_softmax_workspace_size,
    /* .sampling_softmax     = */ ingot_cpu_sampling_softmax,
    /* .sample_workspace_size = */ ingot_cpu_sample_workspace_size,
    /* .sample               = */ ingot_cpu_sample,
};
