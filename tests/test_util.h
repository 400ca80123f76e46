/*
 * Tiny test harness: fresh random inputs every run (the seed is printed, and
 * INGOT_TEST_SEED=<n> replays it), EXPECT that records failures without
 * stopping, and the closing line "N passed, N failed, N skipped".
 * INGOT_TEST_ONLY=<text> runs only the tests whose name contains it (none:
 * exit code 1). stdout is line-buffered, so a test killed by a timeout
 * shows how far it got.
 */
#ifndef INGOT_TEST_UTIL_H
#define INGOT_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ingot/ingot.h"

#define TEST_SKIP_CODE 77

typedef int (*test_fn)(void);

/* Returns 0 if the test passed, TEST_SKIP_CODE if skipped, else failed. */
void test_run(const char *name, test_fn fn);
/* Prints the closing line; returns the process exit code. */
int test_finish(void);
/* Seeds the generator from INGOT_TEST_SEED or the clock, prints the seed. */
void test_init(const char *program);

uint64_t test_rand(void);
/* Uniform in [lo, hi] (inclusive). */
int64_t test_rand_range(int64_t lo, int64_t hi);
double test_rand_unit(void);

void test_fail_at(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int test_failures_in_current(void);

#define EXPECT(cond, ...)                                   \
  do {                                                      \
    if (!(cond)) test_fail_at(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/* Expects st == want; prints the library's last error text otherwise. */
#define EXPECT_STATUS(ctx, st, want)                                                      \
  do {                                                                                    \
    ingot_status st_ = (st);                                                              \
    if (st_ != (want))                                                                    \
      test_fail_at(__FILE__, __LINE__, "status %s, expected %s: %s", ingot_status_name(st_), \
                   ingot_status_name(want), ingot_last_error(ctx));                        \
  } while (0)

#define EXPECT_OK(ctx, st) EXPECT_STATUS(ctx, st, INGOT_STATUS_SUCCESS)

/* Expects `call` to fail with status want and an error text (ctx's last)
 * that contains needle: the argument's name and value. */
#define EXPECT_ERROR(ctx, call, want, needle)                                                 \
  do {                                                                                        \
    ingot_status st_ = (call);                                                                \
    const char *msg_ = ingot_last_error(ctx);                                                 \
    EXPECT(st_ == (want), "%s: status %s (%s)", #call, ingot_status_name(st_), msg_);         \
    EXPECT(strstr(msg_, needle) != NULL, "%s: error text \"%s\" does not name \"%s\"", #call, \
           msg_, needle);                                                                     \
  } while (0)

/* Fails the current test and returns from it if the condition is false. */
#define REQUIRE(cond, ...)                                  \
  do {                                                      \
    if (!(cond)) {                                          \
      test_fail_at(__FILE__, __LINE__, __VA_ARGS__);        \
      return 1;                                             \
    }                                                       \
  } while (0)

#endif
