/*
 * The entry point every fuzz target defines (libFuzzer's), and what the
 * replay driver (replay.c) calls when the target is built without libFuzzer.
 */
#ifndef INGOT_TESTS_FUZZ_H
#define INGOT_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input; aborts on a finding; returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* INGOT_TESTS_FUZZ_H */
