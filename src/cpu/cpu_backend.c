/* The CPU backend's op table: every op of core/ops.h, in its order. */
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

#define INGOT_CPU_ENTRY(op, params) ingot_cpu_##op,
const ingot_backend_ops ingot_cpu_backend_ops = {
    /* .name                = */ "cpu",
    /* .context_init        = */ cpu_context_init,
    /* .context_fini        = */ NULL,
    /* .check_device_errors = */ NULL,
    /* .host_register       = */ NULL,
    /* .host_unregister     = */ NULL,
    /* .host_alloc          = */ NULL,
    /* .host_free           = */ NULL,
    INGOT_BACKEND_OPS(INGOT_CPU_ENTRY)};
#undef INGOT_CPU_ENTRY
