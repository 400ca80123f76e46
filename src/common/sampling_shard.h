/*
 * Sharded sampling (docs/sampling.md, "Sharded sampling"; the public part is
 * the "Sharded sampling" section of include/ingot/ingot.h): the steps of a
 * call and the layout of the records the shards exchange, shared by core
 * (sizes, header checks) and every backend (the same bytes on each).
 *
 * A record is one shard's output of one step: a header, then B rows of the
 * step's row layout, padded to a multiple of 16 bytes. Each step has one of
 * two exchanges (INGOT_SAMPLING_SHARD_EXCHANGE_*):
 *   GATHER  the S records concatenated in slot order (an all-gather); the
 *           next step (or the finish) reads all of them. 64-byte header.
 *   SUM     the S records added word by word as uint64 (an all-reduce); the
 *           next step reads the one sum. Every field is a uint64 whose sum
 *           over the shards cannot overflow (counts; exact masses in the
 *           48-bit limbs of common/sampling_exact_sum.h), and the 128-byte
 *           header is made of such sums too (ingot_shard_sum_header).
 *
 * Steps, in order (the plan of a call depends only on max_top_k, num_top
 * and the flags):
 *   STATS       always: per row the OR of the status flags, the allowed
 *               count, the allowed maximum and the raw maximum, each with
 *               the lowest id holding it;
 *   CANDIDATES  if max_top_k = kc > 0: per row the shard's first kc
 *               allowed tokens of rank order (s, id);
 *   TOPK 0..3   with INGOT_SAMPLING_SHARD_SELECT_TOP_K: a radix round of the
 *               top-k selection. Rounds 0-2 (SUM): per row 256 uint64
 *               counts. Round 3 (GATHER: a shard's share of the tie at the
 *               cut needs the per-shard counts): 128 uint32 counts;
 *   TOPP 0..3   with INGOT_SAMPLING_SHARD_SELECT_TOP_P: a radix round of the
 *               top-p selection. Rounds 0-2 (SUM): per row 256 exact masses
 *               in limbs. Round 3 (GATHER): 128 uint32 counts (every token
 *               of a last-round bucket has the same key, so the same weight:
 *               its mass is count x w, exactly);
 *   DRAW        ingot_sample: per row the best draw key over the shard's
 *               part of the final set, the final and raw masses and the
 *               shard's top-n list;
 *   MASS        ingot_sampling_softmax: per row the final mass.
 * The radix rounds run on the key u = bits of |s| (s <= 0, so ascending u is
 * descending s; -0 and +0 share u = 0), 31 bits cut into digits of 8, 8, 8
 * and 7 bits, most significant first.
 */
#ifndef INGOT_COMMON_SAMPLING_SHARD_H
#define INGOT_COMMON_SAMPLING_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/sampling_exact_sum.h"
#include "core/internal.h"
#include "ingot/ingot.h"

#define INGOT_SHARD_RECORD_MAGIC 0x31485349u /* "ISH1" */
#define INGOT_SHARD_SUM_MAGIC 0x53485349u    /* "ISHS" */
#define INGOT_SHARD_HEADER_BYTES 64
#define INGOT_SHARD_SUM_HEADER_BYTES 128
#define INGOT_SHARD_BUCKETS 256
#define INGOT_SHARD_LAST_BUCKETS 128 /* the last round's digit has 7 bits */
#define INGOT_SHARD_ROUNDS 4
#define INGOT_SHARD_MASS_BYTES (INGOT_EXACT_SUM_LIMBS * 8)

enum {
  INGOT_SHARD_STEP_STATS = 0,
  INGOT_SHARD_STEP_CANDIDATES = 1,
  INGOT_SHARD_STEP_TOPK = 2,
  INGOT_SHARD_STEP_TOPP = 3,
  INGOT_SHARD_STEP_DRAW = 4,
  INGOT_SHARD_STEP_MASS = 5
};

/* The record header: who wrote it, for which call and step. */
typedef struct ingot_shard_header {
  uint32_t magic;      /* INGOT_SHARD_RECORD_MAGIC */
  int32_t step;        /* the step that wrote it */
  int32_t num_shards;  /* S */
  int32_t shard_index; /* the writer's slot */
  int64_t batch;       /* B */
  int64_t vocab_size;  /* V */
  int64_t vocab_begin; /* the writer's first global id */
  int64_t vocab_count; /* the writer's number of tokens, Vr */
  int32_t max_top_k;   /* kc */
  int32_t num_top;     /* n */
  uint32_t flags;      /* INGOT_SAMPLING_SHARD_* */
  uint32_t row_bytes;  /* bytes of one row of this step */
} ingot_shard_header;

/* The header of a SUM record: each shard writes its own values, and the
 * sum over the shards is checked (S, S x magic, S x step, S x the call's
 * tag, V, and the S slot bits all distinct: S powers of two add up to the
 * S-bit mask only if no two are equal). */
typedef struct ingot_shard_sum_header {
  uint64_t shards;       /* 1 */
  uint64_t magic;        /* INGOT_SHARD_SUM_MAGIC */
  uint64_t step;         /* the step that wrote it */
  uint64_t call;         /* ingot_shard_call_tag of the call */
  uint64_t vocab_count;  /* Vr */
  uint64_t reserved[3];  /* 0 */
  uint64_t slot_bits[8]; /* bit (slot & 31) of word slot >> 5: 32-bit limbs, carry-safe */
} ingot_shard_sum_header;

/* A 32-bit tag of the call's shape (B, V, kc, n, flags), so that S of them
 * add without overflow. */
static inline uint64_t ingot_shard_call_tag(int64_t batch, int64_t vocab, int32_t max_top_k,
                                            int32_t num_top, uint32_t flags) {
  uint64_t h = 0xcbf29ce484222325u, v[5] = {(uint64_t)batch, (uint64_t)vocab,
                                            (uint64_t)(uint32_t)max_top_k,
                                            (uint64_t)(uint32_t)num_top, flags};
  for (int i = 0; i < 5; i++) h = (h ^ v[i]) * 0x100000001b3u;
  return (h ^ (h >> 32)) & 0xffffffffu;
}

/* This shard's header of `step` for call c (host code: the CPU steps, the
 * CUDA launches, core's check of an NCCL call): a GATHER record's
 * ingot_shard_header (64 bytes, then zeros), or a SUM record's summable
 * words. header: INGOT_SHARD_SUM_HEADER_BYTES. */
static inline void ingot_shard_header_of(const ingot_sampling_shard_call *c, int step,
                                         int64_t row_bytes, int exchange,
                                         uint64_t header[INGOT_SHARD_SUM_HEADER_BYTES / 8]) {
  memset(header, 0, INGOT_SHARD_SUM_HEADER_BYTES);
  if (exchange == INGOT_SAMPLING_SHARD_EXCHANGE_SUM) {
    ingot_shard_sum_header h;
    memset(&h, 0, sizeof h);
    h.shards = 1;
    h.magic = INGOT_SHARD_SUM_MAGIC;
    h.step = (uint64_t)step;
    h.call = ingot_shard_call_tag(c->in.batch, c->in.vocab, c->max_top_k, c->num_top, c->flags);
    h.vocab_count = (uint64_t)c->vocab_count;
    h.slot_bits[c->shard_index >> 5] = UINT64_C(1) << (c->shard_index & 31);
    memcpy(header, &h, sizeof h);
    return;
  }
  ingot_shard_header h;
  memset(&h, 0, sizeof h);
  h.magic = INGOT_SHARD_RECORD_MAGIC;
  h.step = step;
  h.num_shards = c->num_shards;
  h.shard_index = c->shard_index;
  h.batch = c->in.batch;
  h.vocab_size = c->in.vocab;
  h.vocab_begin = c->vocab_begin;
  h.vocab_count = c->vocab_count;
  h.max_top_k = c->max_top_k;
  h.num_top = c->num_top;
  h.flags = c->flags;
  h.row_bytes = (uint32_t)row_bytes;
  memcpy(header, &h, sizeof h);
}

/* STATS row. */
typedef struct ingot_shard_stats {
  uint32_t flags;     /* INGOT_SAMPLING_ROW_NAN | _BAD_ENTRY */
  uint32_t count;     /* allowed tokens */
  float max;          /* the largest allowed l (-Inf: none) */
  int32_t max_id;     /* the lowest global id holding it (-1: none) */
  float raw_max;      /* the largest finite x (-Inf: none) */
  int32_t raw_max_id; /* the lowest global id holding it (-1: none) */
} ingot_shard_stats;

/* CANDIDATES row: kc of these, in rank order; unused ones (-Inf, -1).
 * Also the top-n entries of a DRAW row (value = s or the raw value). */
typedef struct ingot_shard_ranked {
  float value;
  int32_t id;
} ingot_shard_ranked;

/* TOPK row, rounds 0-2: uint64 count[256]; TOPP row, rounds 0-2: mass[256],
 * each INGOT_EXACT_SUM_LIMBS uint64 limbs; round 3 of both: uint32
 * count[128]. */

/* DRAW row, followed by n ingot_shard_ranked (the shard's top-n list). */
typedef struct ingot_shard_draw {
  float key;                /* the best s + g over the shard's part of F */
  int32_t id;               /* its id (-1: none) */
  float s;                  /* its s */
  float raw;                /* its raw value (x - raw max) / T' */
  ingot_exact_sum mass;     /* sum of w over the shard's part of F */
  ingot_exact_sum raw_mass; /* sum of e^raw over the shard's finite x */
} ingot_shard_draw;

/* MASS row: one ingot_exact_sum. */

/* The steps of a call. */
#define INGOT_SHARD_MAX_STEPS INGOT_SAMPLING_SHARD_MAX_STEPS

typedef struct ingot_shard_steps {
  int32_t count;
  int32_t kind[INGOT_SHARD_MAX_STEPS];     /* INGOT_SHARD_STEP_* */
  int32_t round[INGOT_SHARD_MAX_STEPS];    /* 0..3 for the radix rounds */
  int32_t exchange[INGOT_SHARD_MAX_STEPS]; /* INGOT_SAMPLING_SHARD_EXCHANGE_* */
  int64_t row_bytes[INGOT_SHARD_MAX_STEPS];
} ingot_shard_steps;

static inline ingot_shard_steps ingot_shard_steps_of(int32_t max_top_k, int32_t num_top,
                                                     uint32_t flags) {
  ingot_shard_steps p;
  p.count = 0;
#define INGOT_SHARD_ADD_STEP(k, r, x, bytes)              \
  do {                                                    \
    p.kind[p.count] = (k);                                \
    p.round[p.count] = (r);                               \
    p.exchange[p.count] = (x);                            \
    p.row_bytes[p.count] = (int64_t)(bytes);              \
    p.count++;                                            \
  } while (0)
  const int gather = INGOT_SAMPLING_SHARD_EXCHANGE_GATHER, sum = INGOT_SAMPLING_SHARD_EXCHANGE_SUM;
  const int64_t count_round_bytes = INGOT_SHARD_BUCKETS * (int64_t)sizeof(uint64_t);
  const int64_t mass_round_bytes = INGOT_SHARD_BUCKETS * (int64_t)INGOT_SHARD_MASS_BYTES;
  const int64_t last_round_bytes = INGOT_SHARD_LAST_BUCKETS * (int64_t)sizeof(uint32_t);
  INGOT_SHARD_ADD_STEP(INGOT_SHARD_STEP_STATS, 0, gather, sizeof(ingot_shard_stats));
  if (max_top_k > 0)
    INGOT_SHARD_ADD_STEP(INGOT_SHARD_STEP_CANDIDATES, 0, gather,
                         (int64_t)max_top_k * (int64_t)sizeof(ingot_shard_ranked));
  if (flags & INGOT_SAMPLING_SHARD_SELECT_TOP_K)
    for (int r = 0; r < INGOT_SHARD_ROUNDS; r++)
      INGOT_SHARD_ADD_STEP(INGOT_SHARD_STEP_TOPK, r, r < 3 ? sum : gather,
                           r < 3 ? count_round_bytes : last_round_bytes);
  if (flags & INGOT_SAMPLING_SHARD_SELECT_TOP_P)
    for (int r = 0; r < INGOT_SHARD_ROUNDS; r++)
      INGOT_SHARD_ADD_STEP(INGOT_SHARD_STEP_TOPP, r, r < 3 ? sum : gather,
                           r < 3 ? mass_round_bytes : last_round_bytes);
  if (flags & INGOT_SAMPLING_SHARD_SOFTMAX)
    INGOT_SHARD_ADD_STEP(INGOT_SHARD_STEP_MASS, 0, gather, sizeof(ingot_exact_sum));
  else
    INGOT_SHARD_ADD_STEP(INGOT_SHARD_STEP_DRAW, 0, gather,
                         sizeof(ingot_shard_draw) +
                             (int64_t)num_top * (int64_t)sizeof(ingot_shard_ranked));
#undef INGOT_SHARD_ADD_STEP
  return p;
}

static inline int64_t ingot_shard_header_bytes(int exchange) {
  return exchange == INGOT_SAMPLING_SHARD_EXCHANGE_SUM ? INGOT_SHARD_SUM_HEADER_BYTES
                                                       : INGOT_SHARD_HEADER_BYTES;
}

/* Bytes of one shard's record of a step: header + B rows, rounded to 16
 * (B < 2^31 and rows of at most 8 MB: no overflow in int64). */
static inline int64_t ingot_shard_record_bytes(int64_t batch, int64_t row_bytes, int exchange) {
  return (ingot_shard_header_bytes(exchange) + batch * row_bytes + 15) / 16 * 16;
}

/* Bytes the exchange of a step leaves on every shard. */
static inline int64_t ingot_shard_exchanged_bytes(int64_t record_bytes, int exchange,
                                                  int32_t num_shards) {
  return exchange == INGOT_SAMPLING_SHARD_EXCHANGE_SUM ? record_bytes
                                                       : record_bytes * num_shards;
}

/* The radix digit of round r: shift and width (8, 8, 8, 7 bits). These
 * and the keys below are host-and-device code (INGOT_HD): the CUDA steps
 * use them too. */
INGOT_HD int ingot_shard_digit_shift(int round) { return round == 3 ? 0 : 23 - 8 * round; }
INGOT_HD int ingot_shard_digit_bits(int round) { return round == 3 ? 7 : 8; }

/* The rank key of a scaled value s <= 0 (or -Inf): ascending key is
 * descending s, and -0 / +0 share key 0. */
INGOT_HD uint32_t ingot_shard_rank_key(float s) { return ingot_f32_bits(s) & 0x7fffffffu; }

/* s of a rank key (the negative value; key 0 gives -0, whose weight is 1). */
INGOT_HD float ingot_shard_key_value(uint32_t key) {
  return ingot_bits_f32(key | 0x80000000u);
}

#endif /* INGOT_COMMON_SAMPLING_SHARD_H */
