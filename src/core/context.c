/* Context lifetime and dispatch to a backend. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

int ingot_core_force_reference_requested(void) {
  const char *v = getenv("INGOT_FORCE_REFERENCE");
  return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

static const ingot_backend_ops *backend_ops(ingot_backend backend) {
  switch (backend) {
    case INGOT_BACKEND_CPU: return &ingot_cpu_backend_ops;
#ifdef INGOT_WITH_CUDA
    case INGOT_BACKEND_CUDA: return &ingot_cuda_backend_ops;
#endif
    default: return NULL;
  }
}

int ingot_backend_available(ingot_backend backend) {
  switch (backend) {
    case INGOT_BACKEND_CPU: return 1;
#ifdef INGOT_WITH_CUDA
    case INGOT_BACKEND_CUDA: return ingot_cuda_device_count() > 0;
#endif
    default: return 0;
  }
}

ingot_status ingot_context_create(ingot_backend backend, int device, ingot_context_t *out) {
  static const char op[] = "ingot_context_create";
  ingot_core_clear_error(NULL);
  if (out == NULL) return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "out: NULL");
  *out = NULL;
  if ((int)backend < 0 || backend >= INGOT_BACKEND_COUNT)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "backend: %d is not an ingot_backend", (int)backend);
  const ingot_backend_ops *ops = backend_ops(backend);
  if (ops == NULL)
    return ingot_core_fail(NULL, INGOT_STATUS_NOT_SUPPORTED, op,
                           "backend: CUDA was not compiled into this build of ingot");
  if (backend == INGOT_BACKEND_CPU && device != 0)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "device: %d (the CPU backend has only device 0)", device);
  if (device < 0)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "device: %d < 0", device);

  struct ingot_context *ctx = (struct ingot_context *)calloc(1, sizeof *ctx);
  if (ctx == NULL)
    return ingot_core_fail(NULL, INGOT_STATUS_ALLOC_FAILED, op, "out of host memory");
  ctx->backend = backend;
  ctx->device = device;
  ctx->ops = ops;
  if (ingot_core_force_reference_requested()) ctx->flags |= INGOT_CONTEXT_FLAG_FORCE_REFERENCE;
  ingot_status st = ops->context_init ? ops->context_init(ctx) : INGOT_STATUS_SUCCESS;
  if (st != INGOT_STATUS_SUCCESS) {
    /* context_init wrote "<op>: <reason>" into ctx; move the reason to the
     * thread's text (without a second "<op>: ") */
    const char *reason = ctx->last_error;
    size_t n = strlen(op);
    if (strncmp(reason, op, n) == 0 && reason[n] == ':' && reason[n + 1] == ' ') reason += n + 2;
    ingot_core_fail(NULL, st, op, "%s", reason);
    if (ops->context_fini) ops->context_fini(ctx); /* frees what init made before failing */
    free(ctx);
    return st;
  }
  *out = ctx;
  return INGOT_STATUS_SUCCESS;
}

void ingot_context_destroy(ingot_context_t ctx) {
  if (ctx == NULL) return;
  if (ctx->ops->context_fini) ctx->ops->context_fini(ctx);
  free(ctx);
}

ingot_backend ingot_context_backend(ingot_context_t ctx) {
  return ctx ? ctx->backend : INGOT_BACKEND_COUNT;
}
int ingot_context_device(ingot_context_t ctx) { return ctx ? ctx->device : -1; }
uint32_t ingot_context_flags(ingot_context_t ctx) { return ctx ? ctx->flags : 0u; }

ingot_status ingot_context_check_device_errors(ingot_context_t ctx, struct CUstream_st *stream) {
  if (ctx == NULL)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT,
                           "ingot_context_check_device_errors", "ctx: NULL");
  ingot_core_clear_error(ctx);
  if (ctx->ops->check_device_errors == NULL) return INGOT_STATUS_SUCCESS;
  return ctx->ops->check_device_errors(ctx, stream);
}
