/*
 * Exact, order-free sums of the sampling rules' weights (docs/sampling.md,
 * "Sums"), shared by the CPU reference and whatever backend adopts them.
 *
 * Every weight w = ingot_sampling_exp(s) is an fp32 in [0, 1], so it is an
 * integer multiple of 2^-149 (the smallest subnormal) below 2^150 units. A
 * row sums at most 2^31 of them: the total stays below 2^181 units, which
 * three 64-bit words (192 bits) hold exactly. Integer addition is
 * associative, so a row's sum has the same bits whatever the order of its
 * terms or the way the row is cut (into thread blocks, or into vocabulary
 * shards whose partial sums are added afterwards). A sum is rounded once,
 * to nearest even, when a double is needed (ingot_exact_sum_value).
 *
 * The top-p rule is stated on these sums (ingot_sampling_top_p_target and
 * ingot_sampling_top_p_reached): the rank-order prefix is kept as soon as
 * its exact cumulative sum, rounded to double, reaches p (as a double)
 * times the exact total of the top-k set rounded to double.
 */
#ifndef INGOT_COMMON_SAMPLING_EXACT_SUM_H
#define INGOT_COMMON_SAMPLING_EXACT_SUM_H

#include <stdint.h>

#include "common/numeric.h"

/* value = (word[0] + word[1] 2^64 + word[2] 2^128) 2^-149 */
typedef struct ingot_exact_sum {
  uint64_t word[3];
} ingot_exact_sum;

INGOT_HD void ingot_exact_sum_clear(ingot_exact_sum *a) {
  a->word[0] = a->word[1] = a->word[2] = 0;
}

/* a += v 2^shift units (shift < 192; the sum must stay below 2^192). */
INGOT_HD void ingot_exact_sum_add_shifted(ingot_exact_sum *a, uint64_t v, unsigned shift) {
  unsigned at = shift >> 6, bit = shift & 63u;
  uint64_t lo = v << bit, hi = bit ? v >> (64u - bit) : 0;
  uint64_t old = a->word[at];
  a->word[at] = old + lo;
  uint64_t carry = a->word[at] < old;
  for (unsigned j = at + 1; j < 3; j++) {
    uint64_t add = (j == at + 1 ? hi : 0) + carry; /* hi < 2^63: no overflow */
    old = a->word[j];
    a->word[j] = old + add;
    carry = a->word[j] < old;
  }
}

/* a += n w, for w an fp32 in [0, 1] (its sign bit is ignored) and
 * n < 2^32: n times the mantissa fits 56 bits. */
INGOT_HD void ingot_exact_sum_add_f32_times(ingot_exact_sum *a, float w, uint32_t n) {
  uint32_t bits = ingot_f32_bits(w) & 0x7fffffffu;
  uint32_t field = bits >> 23;
  uint64_t mantissa = bits & 0x7fffffu;
  if (mantissa == 0 && field == 0) return;
  if (field != 0) mantissa |= 0x800000u; /* normal: 1.m 2^(field - 127) = m' 2^(field - 1) units */
  ingot_exact_sum_add_shifted(a, mantissa * (uint64_t)n, field ? field - 1u : 0u);
}

INGOT_HD void ingot_exact_sum_add_f32(ingot_exact_sum *a, float w) {
  ingot_exact_sum_add_f32_times(a, w, 1u);
}

INGOT_HD void ingot_exact_sum_add(ingot_exact_sum *a, const ingot_exact_sum *b) {
  uint64_t carry = 0;
  for (int j = 0; j < 3; j++) {
    uint64_t s = a->word[j] + b->word[j];
    uint64_t c1 = s < a->word[j];
    uint64_t t = s + carry;
    uint64_t c2 = t < s;
    a->word[j] = t;
    carry = c1 | c2;
  }
}

INGOT_HD int ingot_exact_sum_is_zero(const ingot_exact_sum *a) {
  return (a->word[0] | a->word[1] | a->word[2]) == 0;
}

/* The carry-safe form of a sum, for exchanges that add records as plain
 * uint64 words (an all-reduce with a uint64 sum): the 192 bits cut into
 * four 48-bit limbs, each in a 64-bit word, so that up to 2^16 such forms
 * add word by word without losing a carry. ingot_exact_sum_from_limbs
 * normalises a sum of them (whose value must stay below 2^192, as the
 * masses of one row do). */
#define INGOT_EXACT_SUM_LIMBS 4
#define INGOT_EXACT_SUM_LIMB_MASK ((UINT64_C(1) << 48) - 1u)

INGOT_HD void ingot_exact_sum_to_limbs(const ingot_exact_sum *a, uint64_t limb[4]) {
  limb[0] = a->word[0] & INGOT_EXACT_SUM_LIMB_MASK;
  limb[1] = (a->word[0] >> 48 | a->word[1] << 16) & INGOT_EXACT_SUM_LIMB_MASK;
  limb[2] = (a->word[1] >> 32 | a->word[2] << 32) & INGOT_EXACT_SUM_LIMB_MASK;
  limb[3] = a->word[2] >> 16;
}

INGOT_HD void ingot_exact_sum_from_limbs(const uint64_t limb[4], ingot_exact_sum *a) {
  ingot_exact_sum_clear(a);
  for (unsigned i = 0; i < INGOT_EXACT_SUM_LIMBS; i++)
    ingot_exact_sum_add_shifted(a, limb[i], 48u * i);
}

/* The same exact sum, faster for long runs of terms: per fp32 exponent
 * field, a 64-bit integer that the terms' 24-bit mantissas are added to
 * (one addition a term; 2^40 terms cannot overflow it), folded into an
 * ingot_exact_sum at the end; the fold is exact, so both forms give the same
 * bits. Four lanes (a term goes to lane i & 3 of its index i) keep the
 * read-modify-write of one integer off the next token's path. 8 KB: for
 * the CPU, not for registers. */
typedef struct ingot_exact_sum_bins {
  uint64_t bin[4][256];
} ingot_exact_sum_bins;

INGOT_HD void ingot_exact_sum_bins_clear(ingot_exact_sum_bins *b) {
  for (int lane = 0; lane < 4; lane++)
    for (int e = 0; e < 256; e++) b->bin[lane][e] = 0;
}

/* b += w in lane `lane & 3`, for w an fp32 in [0, 1] (its sign bit is
 * ignored). */
INGOT_HD void ingot_exact_sum_bins_add_f32(ingot_exact_sum_bins *b, int64_t lane, float w) {
  uint32_t bits = ingot_f32_bits(w) & 0x7fffffffu;
  uint32_t field = bits >> 23;
  b->bin[lane & 3][field] += (bits & 0x7fffffu) | (field ? 0x800000u : 0u);
}

/* a += the terms of b. */
INGOT_HD void ingot_exact_sum_bins_fold(const ingot_exact_sum_bins *b, ingot_exact_sum *a) {
  for (int lane = 0; lane < 4; lane++)
    for (unsigned e = 0; e <= 128; e++) /* fields above 127 hold no weight <= 1 */
      if (b->bin[lane][e]) ingot_exact_sum_add_shifted(a, b->bin[lane][e], e ? e - 1u : 0u);
}

/* 2^e as a double, for -1022 <= e <= 1023 (exact). */
INGOT_HD double ingot_exact_pow2(int e) {
  uint64_t bits = (uint64_t)(1023 + e) << 52;
  double d;
#if defined(__CUDA_ARCH__)
  d = __longlong_as_double((long long)bits);
#else
  memcpy(&d, &bits, sizeof d);
#endif
  return d;
}

/* The sum rounded to the nearest double (ties to even): the 64 bits below
 * the leading one, with every lower bit ORed into the last (a sticky bit
 * 11 places below double precision, so it only breaks ties), converted
 * once, then scaled by an exact power of two. */
INGOT_HD double ingot_exact_sum_value(const ingot_exact_sum *a) {
  int top = 2;
  while (top > 0 && a->word[top] == 0) top--;
  uint64_t w = a->word[top];
  if (w == 0) return 0.0;
  int lead = 63; /* highest set bit of w */
  while (!((w >> lead) & 1u)) lead--;
  int high = top * 64 + lead; /* highest set bit of the sum */
  uint64_t window;
  int low = high - 63;        /* bit position of window's bit 0 */
  if (low <= 0) {
    window = a->word[0];
    low = 0;
  } else {
    unsigned at = (unsigned)low >> 6, bit = (unsigned)low & 63u;
    window = a->word[at] >> bit;
    if (bit) window |= a->word[at + 1] << (64u - bit);
    uint64_t sticky = bit ? a->word[at] & ((UINT64_C(1) << bit) - 1u) : 0;
    for (unsigned j = 0; j < at; j++) sticky |= a->word[j];
    window |= sticky != 0;
  }
#if defined(__CUDA_ARCH__)
  double d = __ull2double_rn(window);
#else
  double d = (double)window; /* round to nearest even */
#endif
  return d * ingot_exact_pow2(low - 149);
}

/* top-p: the target p * sum_K w, and whether a cumulative sum reaches it. */
INGOT_HD double ingot_sampling_top_p_target(float top_p, const ingot_exact_sum *total) {
  return (double)top_p * ingot_exact_sum_value(total);
}

INGOT_HD int ingot_sampling_top_p_reached(const ingot_exact_sum *cumulative, double target) {
  return ingot_exact_sum_value(cumulative) >= target;
}

#endif /* INGOT_COMMON_SAMPLING_EXACT_SUM_H */
