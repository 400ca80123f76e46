/* Status strings, version, last-error text. */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"

int ingot_version_number(void) { return INGOT_VERSION_NUMBER; }
const char *ingot_version(void) { return INGOT_VERSION_STRING; }

const char *ingot_status_string(ingot_status status) {
  switch (status) {
    case INGOT_STATUS_SUCCESS: return "success";
    case INGOT_STATUS_INVALID_ARGUMENT: return "invalid argument";
    case INGOT_STATUS_NOT_SUPPORTED: return "not supported";
    case INGOT_STATUS_INSUFFICIENT_WORKSPACE: return "insufficient workspace";
    case INGOT_STATUS_ALLOC_FAILED: return "allocation failed";
    case INGOT_STATUS_CUDA_ERROR: return "CUDA error";
    case INGOT_STATUS_INTERNAL: return "internal error";
    case INGOT_STATUS_COUNT: break;
  }
  return "unknown status";
}

const char *ingot_status_name(ingot_status status) {
  switch (status) {
    case INGOT_STATUS_SUCCESS: return "INGOT_STATUS_SUCCESS";
    case INGOT_STATUS_INVALID_ARGUMENT: return "INGOT_STATUS_INVALID_ARGUMENT";
    case INGOT_STATUS_NOT_SUPPORTED: return "INGOT_STATUS_NOT_SUPPORTED";
    case INGOT_STATUS_INSUFFICIENT_WORKSPACE: return "INGOT_STATUS_INSUFFICIENT_WORKSPACE";
    case INGOT_STATUS_ALLOC_FAILED: return "INGOT_STATUS_ALLOC_FAILED";
    case INGOT_STATUS_CUDA_ERROR: return "INGOT_STATUS_CUDA_ERROR";
    case INGOT_STATUS_INTERNAL: return "INGOT_STATUS_INTERNAL";
    case INGOT_STATUS_COUNT: break;
  }
  return "INGOT_STATUS_UNKNOWN";
}

/* Errors of calls without a context (creation, config helpers). */
static _Thread_local char thread_error[INGOT_ERROR_TEXT_BYTES];

static char *error_buffer(struct ingot_context *ctx) {
  return ctx ? ctx->last_error : thread_error;
}

ingot_status ingot_core_fail(struct ingot_context *ctx, ingot_status status, const char *op,
                             const char *fmt, ...) {
  char *buf = error_buffer(ctx);
  int n = snprintf(buf, INGOT_ERROR_TEXT_BYTES, "%s: ", op);
  if (n < 0 || n >= INGOT_ERROR_TEXT_BYTES) return status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, (size_t)(INGOT_ERROR_TEXT_BYTES - n), fmt, ap);
  va_end(ap);
  return status;
}

void ingot_core_clear_error(struct ingot_context *ctx) { error_buffer(ctx)[0] = '\0'; }

const char *ingot_last_error(ingot_context_t ctx) { return error_buffer(ctx); }
