#include "test_util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng_state;
static int passed, failed, skipped;
static int current_failures;
static const char *current_name = "";

void test_init(const char *program) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* a test killed by a timeout keeps its last lines */
  const char *env = getenv("INGOT_TEST_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 0)
                              : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid() << 20;
  rng_state = seed;
  printf("%s: seed %llu (replay with INGOT_TEST_SEED=%llu)\n", program,
         (unsigned long long)seed, (unsigned long long)seed);
}

uint64_t test_rand(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t test_rand_range(int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)hi - (uint64_t)lo + 1u;
  if (span == 0) return (int64_t)test_rand(); /* the whole 64-bit range */
  return (int64_t)((uint64_t)lo + test_rand() % span);
}

double test_rand_unit(void) { return (double)(test_rand() >> 11) * 0x1.0p-53; }

void test_fail_at(const char *file, int line, const char *fmt, ...) {
  current_failures++;
  if (current_failures > 10) return; /* enough to see the pattern */
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "  FAIL %s (%s:%d): ", current_name, file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int test_failures_in_current(void) { return current_failures; }

void test_run(const char *name, test_fn fn) {
  const char *only = getenv("INGOT_TEST_ONLY"); /* run the tests whose name contains it */
  if (only && *only && !strstr(name, only)) return;
  current_name = name;
  current_failures = 0;
  int rc = fn();
  if (rc == TEST_SKIP_CODE && current_failures == 0) {
    skipped++;
    printf("SKIPPED %s\n", name);
  } else if (rc != 0 || current_failures) {
    failed++;
    printf("FAILED  %s (%d failure%s)\n", name, current_failures, current_failures == 1 ? "" : "s");
  } else {
    passed++;
    printf("ok      %s\n", name);
  }
  fflush(stdout);
}

int test_finish(void) {
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  if (failed) return 1;
  const char *only = getenv("INGOT_TEST_ONLY");
  if (only && *only && passed + skipped == 0) {
    printf("no test name contains INGOT_TEST_ONLY=%s\n", only);
    return 1;
  }
  if (passed == 0 && skipped > 0) return TEST_SKIP_CODE;
  return 0;
}
