/*
 * Host tables (ingot_host_table_*): every strategy the machine allows
 * (skipped with the library's reason where it does not: no hugetlb pages
 * reserved, THP off, not Linux), sizes that are not a multiple of the page,
 * bad arguments refused by name, writes and reads through the pointer, and
 * the CPU gather from such a table equal, byte for byte, to the gather from
 * a plain malloc'd copy. With CUDA and a GPU, the CUDA gather from each
 * registered table equals the CPU's.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#ifdef INGOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

static ingot_context_t cpu;

static const uint32_t strategies[] = {INGOT_HOST_TABLE_HUGETLB_1G, INGOT_HOST_TABLE_HUGETLB_2M,
                                      INGOT_HOST_TABLE_THP, INGOT_HOST_TABLE_PINNED};

/* Creates a table with exactly `strategy`; on NOT_SUPPORTED / ALLOC_FAILED
 * prints the library's reason and returns NULL (the caller skips). */
static ingot_host_table_t create_or_skip(ingot_context_t ctx, int64_t bytes, uint32_t strategy,
                                         int *failed) {
  ingot_host_table_t t = NULL;
  ingot_status st = ingot_host_table_create(ctx, bytes, strategy, &t);
  *failed = 0;
  if (st == INGOT_STATUS_SUCCESS) return t;
  EXPECT(t == NULL, "out not NULL after a failure");
  if (st == INGOT_STATUS_NOT_SUPPORTED || st == INGOT_STATUS_ALLOC_FAILED) {
    printf("  %s unavailable here: %s\n", ingot_host_table_strategy_name(strategy),
           ingot_last_error(ctx));
  } else {
    test_fail_at(__FILE__, __LINE__, "%s: %s: %s", ingot_host_table_strategy_name(strategy),
                 ingot_status_name(st), ingot_last_error(ctx));
    *failed = 1;
  }
  return NULL;
}

/* ---- arguments ------------------------------------------------------------------- */

static int test_bad_arguments(void) {
  ingot_host_table_t t = (ingot_host_table_t)(uintptr_t)1;
  EXPECT_ERROR(NULL, ingot_host_table_create(NULL, 4096, 0, &t), INGOT_STATUS_INVALID_ARGUMENT,
               "ctx: NULL");
  EXPECT(t == NULL, "out not cleared for a NULL ctx");
  EXPECT_ERROR(cpu, ingot_host_table_create(cpu, 4096, 0, NULL), INGOT_STATUS_INVALID_ARGUMENT,
               "out: NULL");
  EXPECT_ERROR(cpu, ingot_host_table_create(cpu, 0, 0, &t), INGOT_STATUS_INVALID_ARGUMENT,
               "bytes: 0");
  EXPECT_ERROR(cpu, ingot_host_table_create(cpu, -4096, INGOT_HOST_TABLE_PINNED, &t),
               INGOT_STATUS_INVALID_ARGUMENT, "bytes: -4096");
  EXPECT_ERROR(cpu, ingot_host_table_create(cpu, INT64_MAX, 0, &t),
               INGOT_STATUS_INVALID_ARGUMENT, "bytes: 9223372036854775807");
  EXPECT_ERROR(cpu, ingot_host_table_create(cpu, 4096, 1u << 4, &t),
               INGOT_STATUS_INVALID_ARGUMENT, "strategies: 0x10");
  EXPECT_ERROR(cpu, ingot_host_table_create(cpu, 4096, INGOT_HOST_TABLE_THP | (1u << 31), &t),
               INGOT_STATUS_INVALID_ARGUMENT, "strategies");
  EXPECT(t == NULL, "out not NULL after a failure");
  /* NULL handles */
  ingot_host_table_destroy(NULL);
  EXPECT(ingot_host_table_data(NULL) == NULL, "data(NULL)");
  EXPECT(ingot_host_table_bytes(NULL) == 0 && ingot_host_table_mapped_bytes(NULL) == 0 &&
             ingot_host_table_page_bytes(NULL) == 0 && ingot_host_table_strategy(NULL) == 0,
         "getters of NULL");
  int64_t huge = -1;
  EXPECT_ERROR(NULL, ingot_host_table_huge_page_bytes(NULL, &huge),
               INGOT_STATUS_INVALID_ARGUMENT, "table: NULL");
  return 0;
}

static int test_strategy_names(void) {
  EXPECT(strcmp(ingot_host_table_strategy_name(INGOT_HOST_TABLE_AUTO), "auto") == 0, "auto");
  EXPECT(strcmp(ingot_host_table_strategy_name(INGOT_HOST_TABLE_HUGETLB_1G), "hugetlb-1g") == 0,
         "1g");
  EXPECT(strcmp(ingot_host_table_strategy_name(INGOT_HOST_TABLE_HUGETLB_2M), "hugetlb-2m") == 0,
         "2m");
  EXPECT(strcmp(ingot_host_table_strategy_name(INGOT_HOST_TABLE_THP), "thp") == 0, "thp");
  EXPECT(strcmp(ingot_host_table_strategy_name(INGOT_HOST_TABLE_PINNED), "pinned") == 0,
         "pinned");
  EXPECT(strcmp(ingot_host_table_strategy_name(3), "invalid") == 0, "two bits");
  return 0;
}

/* ---- each strategy: sizes, alignment, reads and writes ------------------------------ */

static int check_strategy(uint32_t strategy) {
  static const int64_t sizes[] = {1, 4095, 4097, (INT64_C(3) << 20) + 5};
  int ran = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    int64_t bytes = sizes[i];
    int failed;
    ingot_host_table_t t = create_or_skip(cpu, bytes, strategy, &failed);
    if (failed) return 1;
    if (t == NULL) return ran ? 0 : TEST_SKIP_CODE;
    ran = 1;
    uint8_t *p = (uint8_t *)ingot_host_table_data(t);
    int64_t page = ingot_host_table_page_bytes(t), mapped = ingot_host_table_mapped_bytes(t);
    EXPECT(ingot_host_table_strategy(t) == strategy, "strategy %u, asked %u",
           ingot_host_table_strategy(t), strategy);
    EXPECT(ingot_host_table_bytes(t) == bytes, "bytes %" PRId64, ingot_host_table_bytes(t));
    EXPECT(page >= 4096 && (page & (page - 1)) == 0, "page_bytes %" PRId64, page);
    EXPECT(mapped >= bytes && mapped % page == 0 && mapped - bytes < page,
           "mapped %" PRId64 " for %" PRId64 " bytes, page %" PRId64, mapped, bytes, page);
    EXPECT(p != NULL && (uintptr_t)p % (uintptr_t)page == 0, "data %p not aligned to %" PRId64,
           (void *)p, page);
    if (strategy == INGOT_HOST_TABLE_HUGETLB_1G)
      EXPECT(page == INT64_C(1) << 30, "1g page %" PRId64, page);
    if (strategy == INGOT_HOST_TABLE_HUGETLB_2M || strategy == INGOT_HOST_TABLE_THP)
      EXPECT(page == INT64_C(2) << 20, "2m page %" PRId64, page);
    /* every mapped byte is writable and reads back */
    for (int64_t k = 0; k < mapped; k++) p[k] = (uint8_t)(k * 131 + 7);
    int64_t bad = -1;
    for (int64_t k = 0; k < mapped && bad < 0; k++)
      if (p[k] != (uint8_t)(k * 131 + 7)) bad = k;
    EXPECT(bad < 0, "byte %" PRId64 " did not read back", bad);
    int64_t huge = -1;
    ingot_status st = ingot_host_table_huge_page_bytes(t, &huge);
#ifdef __linux__
    EXPECT_OK(NULL, st);
    EXPECT(huge >= 0 && huge <= mapped + (INT64_C(2) << 20), "huge %" PRId64 " of %" PRId64, huge,
           mapped);
    if (strategy == INGOT_HOST_TABLE_HUGETLB_1G || strategy == INGOT_HOST_TABLE_HUGETLB_2M)
      EXPECT(huge == mapped, "hugetlb table: %" PRId64 " of %" PRId64 " bytes in huge pages",
             huge, mapped);
    if (i + 1 == sizeof sizes / sizeof sizes[0])
      printf("  %s, %" PRId64 " bytes: %" PRId64 " mapped, %" PRId64 " in huge pages\n",
             ingot_host_table_strategy_name(strategy), bytes, mapped, huge);
#else
    EXPECT(st == INGOT_STATUS_NOT_SUPPORTED, "huge_page_bytes off Linux: %s",
           ingot_status_name(st));
#endif
    ingot_host_table_destroy(t);
  }
  return 0;
}

static int test_hugetlb_1g(void) { return check_strategy(INGOT_HOST_TABLE_HUGETLB_1G); }
static int test_hugetlb_2m(void) { return check_strategy(INGOT_HOST_TABLE_HUGETLB_2M); }
static int test_thp(void) { return check_strategy(INGOT_HOST_TABLE_THP); }
static int test_pinned(void) { return check_strategy(INGOT_HOST_TABLE_PINNED); }

/* Every allowed strategy fails (a table larger than any machine's memory):
 * the error lists each one's reason, none cut off. */
static int test_all_strategies_fail_named(void) {
  ingot_host_table_t t = NULL;
  ingot_status st = ingot_host_table_create(cpu, INT64_C(1) << 46, INGOT_HOST_TABLE_AUTO, &t);
  if (st == INGOT_STATUS_SUCCESS) { /* a machine with 64 TiB to overcommit */
    ingot_host_table_destroy(t);
    printf("  a 64 TiB table was mapped here: nothing to refuse\n");
    return TEST_SKIP_CODE;
  }
  const char *text = ingot_last_error(cpu);
  EXPECT(strstr(text, "no allowed strategy worked") != NULL, "text: %s", text);
  static const char *const names[] = {"hugetlb-1g: ", "hugetlb-2m: ", "thp: ", "pinned: "};
  for (int i = 0; i < 4; i++)
    EXPECT(strstr(text, names[i]) != NULL, "no reason for %s in: %s", names[i], text);
  EXPECT(strlen(text) + 1 < 512, "the text fills the error buffer (cut off?): %s", text);
  EXPECT(t == NULL, "out set");
  return 0;
}

static int test_auto(void) {
  ingot_host_table_t t = NULL;
  EXPECT_OK(cpu, ingot_host_table_create(cpu, 12345, INGOT_HOST_TABLE_AUTO, &t));
  if (t == NULL) return 1;
  uint32_t s = ingot_host_table_strategy(t);
  EXPECT(s == INGOT_HOST_TABLE_HUGETLB_1G || s == INGOT_HOST_TABLE_HUGETLB_2M ||
             s == INGOT_HOST_TABLE_THP || s == INGOT_HOST_TABLE_PINNED,
         "strategy %u", s);
  printf("  auto chose %s (%" PRId64 "-byte pages)\n", ingot_host_table_strategy_name(s),
         ingot_host_table_page_bytes(t));
  memset(ingot_host_table_data(t), 0xab, 12345);
  ingot_host_table_destroy(t);
  /* two allowed: the second is used when the first fails, or the first */
  EXPECT_OK(cpu, ingot_host_table_create(
                     cpu, 100, INGOT_HOST_TABLE_HUGETLB_1G | INGOT_HOST_TABLE_PINNED, &t));
  if (t) {
    s = ingot_host_table_strategy(t);
    EXPECT(s == INGOT_HOST_TABLE_HUGETLB_1G || s == INGOT_HOST_TABLE_PINNED, "strategy %u", s);
    ingot_host_table_destroy(t);
  }
  return 0;
}

/* A forced hugetlb strategy with an empty pool names the pool. */
static int test_empty_pool_named(void) {
#ifdef __linux__
  FILE *f = fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r");
  long long free_pages = -1;
  if (f) {
    if (fscanf(f, "%lld", &free_pages) != 1) free_pages = -1;
    fclose(f);
  }
  f = fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_overcommit_hugepages", "r");
  long long overcommit = 0;
  if (f) {
    if (fscanf(f, "%lld", &overcommit) != 1) overcommit = 0;
    fclose(f);
  }
  if (free_pages != 0 || overcommit != 0) {
    printf("  2 MiB pool not empty (free %lld, overcommit %lld): nothing to refuse\n", free_pages,
           overcommit);
    return TEST_SKIP_CODE;
  }
  ingot_host_table_t t = NULL;
  EXPECT_ERROR(cpu, ingot_host_table_create(cpu, 3 << 20, INGOT_HOST_TABLE_HUGETLB_2M, &t),
               INGOT_STATUS_ALLOC_FAILED, "no 2 MiB huge pages reserved");
  EXPECT(strstr(ingot_last_error(cpu), "nr_hugepages") != NULL, "no hint: %s",
         ingot_last_error(cpu));
  EXPECT(strstr(ingot_last_error(cpu), "needs 2") != NULL, "page count: %s",
         ingot_last_error(cpu));
  EXPECT(t == NULL, "out set");
  return 0;
#else
  return TEST_SKIP_CODE;
#endif
}

/* ---- the gather from a host table equals the gather from malloc'd memory ------------- */

enum { GATHER_D = 37, GATHER_H = 5 };

static int gather_from(ingot_context_t ctx, uint32_t strategy, int64_t R) {
  size_t bytes = (size_t)(R * GATHER_D);
  int failed;
  ingot_host_table_t t = create_or_skip(ctx, (int64_t)bytes, strategy, &failed);
  if (failed) return 1;
  if (t == NULL) return TEST_SKIP_CODE;
  uint8_t *plain = malloc(bytes);
  int64_t T = 301;
  int64_t *rows = malloc((size_t)(T * GATHER_H) * sizeof *rows);
  size_t out_bytes = (size_t)(T * GATHER_H * GATHER_D) * 2;
  uint16_t *want = malloc(out_bytes), *got = malloc(out_bytes);
  REQUIRE(plain && rows && want && got, "out of memory");
  for (size_t k = 0; k < bytes; k++) plain[k] = (uint8_t)test_rand(); /* NaN codes too */
  memcpy(ingot_host_table_data(t), plain, bytes);
  for (int64_t k = 0; k < T * GATHER_H; k++)
    rows[k] = test_rand() % 16 == 0 ? test_rand_range(-3, R + 3) : test_rand_range(0, R - 1);
  ingot_tensor r = ingot_tensor_2d(rows, INGOT_DTYPE_I64, T, GATHER_H, GATHER_H);
  ingot_tensor tab_plain = ingot_tensor_2d(plain, INGOT_DTYPE_F8_E4M3, R, GATHER_D, GATHER_D);
  ingot_tensor tab = ingot_tensor_2d(ingot_host_table_data(t), INGOT_DTYPE_F8_E4M3, R, GATHER_D,
                                     GATHER_D);
  ingot_tensor o_want =
      ingot_tensor_2d(want, INGOT_DTYPE_BF16, T, GATHER_H * GATHER_D, GATHER_H * GATHER_D);
  EXPECT_OK(cpu, ingot_ngram_gather(cpu, &r, &tab_plain, 0.75f, &o_want, NULL));
  if (ctx == cpu) {
    ingot_tensor o = ingot_tensor_2d(got, INGOT_DTYPE_BF16, T, GATHER_H * GATHER_D,
                                     GATHER_H * GATHER_D);
    EXPECT_OK(cpu, ingot_ngram_gather(cpu, &r, &tab, 0.75f, &o, NULL));
  }
#ifdef INGOT_WITH_CUDA
  else {
    void *d_rows = NULL, *d_out = NULL;
    REQUIRE(cudaMalloc(&d_rows, (size_t)(T * GATHER_H) * 8) == cudaSuccess &&
                cudaMalloc(&d_out, out_bytes) == cudaSuccess,
            "cudaMalloc");
    REQUIRE(cudaMemcpy(d_rows, rows, (size_t)(T * GATHER_H) * 8, cudaMemcpyHostToDevice) ==
                cudaSuccess,
            "upload");
    ingot_tensor dr = ingot_tensor_2d(d_rows, INGOT_DTYPE_I64, T, GATHER_H, GATHER_H);
    ingot_tensor o = ingot_tensor_2d(d_out, INGOT_DTYPE_BF16, T, GATHER_H * GATHER_D,
                                     GATHER_H * GATHER_D);
    EXPECT_OK(ctx, ingot_ngram_gather(ctx, &dr, &tab, 0.75f, &o, NULL));
    EXPECT(cudaMemcpy(got, d_out, out_bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    cudaFree(d_rows);
    cudaFree(d_out);
  }
#endif
  EXPECT(memcmp(got, want, out_bytes) == 0, "%s: the gather from the host table differs",
         ingot_host_table_strategy_name(strategy));
  ingot_host_table_destroy(t);
  free(plain), free(rows), free(want), free(got);
  return 0;
}

static int gather_all(ingot_context_t ctx) {
  int ran = 0;
  int64_t R = test_rand_range(1000, 60000);
  for (size_t i = 0; i < sizeof strategies / sizeof strategies[0]; i++) {
    int rc = gather_from(ctx, strategies[i], R);
    if (rc == 0) ran++;
    else if (rc != TEST_SKIP_CODE) return rc;
  }
  int rc = gather_from(ctx, INGOT_HOST_TABLE_AUTO, R);
  if (rc == 0) ran++;
  else if (rc != TEST_SKIP_CODE) return rc;
  return ran ? 0 : TEST_SKIP_CODE;
}

static int test_gather_cpu(void) { return gather_all(cpu); }

static int test_gather_cuda(void) {
#ifdef INGOT_WITH_CUDA
  if (!ingot_backend_available(INGOT_BACKEND_CUDA)) {
    printf("  no GPU\n");
    return TEST_SKIP_CODE;
  }
  ingot_context_t gpu = NULL;
  ingot_status st = ingot_context_create(INGOT_BACKEND_CUDA, 0, &gpu);
  if (st) {
    printf("  no usable GPU: %s\n", ingot_last_error(NULL));
    return TEST_SKIP_CODE;
  }
  int rc = gather_all(gpu);
  ingot_context_destroy(gpu);
  return rc;
#else
  printf("  built without CUDA\n");
  return TEST_SKIP_CODE;
#endif
}

int main(void) {
  test_init("test_host_table");
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &cpu) != INGOT_STATUS_SUCCESS) {
    fprintf(stderr, "%s\n", ingot_last_error(NULL));
    return 1;
  }
  test_run("bad_arguments", test_bad_arguments);
  test_run("strategy_names", test_strategy_names);
  test_run("hugetlb_1g", test_hugetlb_1g);
  test_run("hugetlb_2m", test_hugetlb_2m);
  test_run("thp", test_thp);
  test_run("pinned", test_pinned);
  test_run("auto", test_auto);
  test_run("empty_pool_named", test_empty_pool_named);
  test_run("all_strategies_fail_named", test_all_strategies_fail_named);
  test_run("gather_cpu", test_gather_cpu);
  test_run("gather_cuda", test_gather_cuda);
  ingot_context_destroy(cpu);
  return test_finish();
}
