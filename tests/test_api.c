/*
 * The API's own contract: version, status texts, context life cycle and
 * misuse, dtype helpers, tensor descriptor checks shared by every op.
 */
#include <string.h>

#include "test_util.h"

static int test_version(void) {
  EXPECT(ingot_version_number() == INGOT_VERSION_NUMBER, "library %d != header %d",
         ingot_version_number(), INGOT_VERSION_NUMBER);
  EXPECT(strcmp(ingot_version(), INGOT_VERSION_STRING) == 0, "version string %s", ingot_version());
  return 0;
}

static int test_status_strings(void) {
  for (int s = 0; s < INGOT_STATUS_COUNT; s++) {
    const char *text = ingot_status_string((ingot_status)s);
    const char *name = ingot_status_name((ingot_status)s);
    EXPECT(text && *text && strcmp(text, "unknown status") != 0, "status %d has no text", s);
    EXPECT(name && strncmp(name, "INGOT_STATUS_", 13) == 0, "status %d name %s", s, name);
    for (int t = 0; t < s; t++)
      EXPECT(strcmp(text, ingot_status_string((ingot_status)t)) != 0, "statuses %d, %d share a text", s, t);
  }
  EXPECT(strcmp(ingot_status_string((ingot_status)999), "unknown status") == 0, "unknown status text");
  EXPECT(strcmp(ingot_status_name((ingot_status)-1), "INGOT_STATUS_UNKNOWN") == 0, "unknown status name");
  EXPECT(INGOT_OK == INGOT_STATUS_SUCCESS && INGOT_STATUS_SUCCESS == 0, "success is not 0");
  return 0;
}

static int test_context_lifecycle(void) {
  ingot_context_t ctx = (ingot_context_t)(uintptr_t)1;
  EXPECT_OK(NULL, ingot_context_create(INGOT_BACKEND_CPU, 0, &ctx));
  REQUIRE(ctx != NULL, "no context");
  EXPECT(ingot_context_backend(ctx) == INGOT_BACKEND_CPU, "backend");
  EXPECT(ingot_context_device(ctx) == 0, "device");
  EXPECT(ingot_last_error(ctx)[0] == '\0', "fresh context has an error: %s", ingot_last_error(ctx));
  EXPECT_OK(ctx, ingot_context_check_device_errors(ctx, NULL));
  ingot_context_destroy(ctx);
  ingot_context_destroy(NULL); /* no-op */
  EXPECT(ingot_backend_available(INGOT_BACKEND_CPU), "CPU backend unavailable");
  EXPECT(!ingot_backend_available((ingot_backend)7), "backend 7 available");
  return 0;
}

static int test_context_misuse(void) {
  ingot_context_t ctx = (ingot_context_t)(uintptr_t)1;
  EXPECT_STATUS(NULL, ingot_context_create(INGOT_BACKEND_CPU, 1, &ctx), INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(ctx == NULL, "out not cleared on error");
  EXPECT(strstr(ingot_last_error(NULL), "device") != NULL, "%s", ingot_last_error(NULL));
  EXPECT_STATUS(NULL, ingot_context_create((ingot_backend)42, 0, &ctx), INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(NULL), "backend") != NULL, "%s", ingot_last_error(NULL));
  EXPECT_STATUS(NULL, ingot_context_create(INGOT_BACKEND_CPU, 0, NULL), INGOT_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(ingot_last_error(NULL), "out") != NULL, "%s", ingot_last_error(NULL));
  if (!ingot_backend_available(INGOT_BACKEND_CUDA)) {
    ingot_status st = ingot_context_create(INGOT_BACKEND_CUDA, 0, &ctx);
    EXPECT(st == INGOT_STATUS_NOT_SUPPORTED, "CUDA context without a GPU: %s", ingot_status_name(st));
    EXPECT(ctx == NULL, "context returned on error");
  } else {
    EXPECT_STATUS(NULL, ingot_context_create(INGOT_BACKEND_CUDA, 4096, &ctx), INGOT_STATUS_NOT_SUPPORTED);
    EXPECT(strstr(ingot_last_error(NULL), "device") != NULL, "%s", ingot_last_error(NULL));
    const char *msg = ingot_last_error(NULL);
    EXPECT(strstr(msg + 1, "ingot_context_create") == NULL, "op named twice: %s", msg);
  }
  EXPECT_STATUS(NULL, ingot_context_check_device_errors(NULL, NULL), INGOT_STATUS_INVALID_ARGUMENT);
  return 0;
}

static int test_dtypes(void) {
  static const size_t sizes[INGOT_DTYPE_COUNT] = {0, 4, 2, 2, 1, 4, 8, 1, 4, 8};
  for (int d = 0; d < INGOT_DTYPE_COUNT; d++) {
    EXPECT(ingot_dtype_size((ingot_dtype)d) == sizes[d], "size of dtype %d", d);
    EXPECT(ingot_dtype_name((ingot_dtype)d)[0] != '\0', "name of dtype %d", d);
  }
  EXPECT(strcmp(ingot_dtype_name((ingot_dtype)100), "invalid") == 0, "invalid dtype name");
  ingot_tensor t = ingot_tensor_2d(NULL, INGOT_DTYPE_BF16, 3, 5, 8);
  EXPECT(t.ndim == 2 && t.shape[0] == 3 && t.shape[1] == 5 && t.stride[0] == 8 && t.stride[1] == 1,
         "ingot_tensor_2d");
  return 0;
}

int main(void) {
  test_init("test_api");
  test_run("version", test_version);
  test_run("status_strings", test_status_strings);
  test_run("context_lifecycle", test_context_lifecycle);
  test_run("context_misuse", test_context_misuse);
  test_run("dtypes", test_dtypes);
  return test_finish();
}
