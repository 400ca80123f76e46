/*
 * Sharded sampling: argument validation and dispatch (every backend). The
 * rules are the Sharded sampling section of include/ingot/ingot.h; the
 * steps and the record layout are common/sampling_shard.h. The parameter
 * checks are the whole-row ops' own (core/sampling_check.h), with V the
 * whole vocabulary.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/sampling_shard.h"
#include "core/sampling_check.h"

#define LOGIT_DTYPES                                                     \
  (INGOT_DTYPE_BIT(INGOT_DTYPE_F32) | INGOT_DTYPE_BIT(INGOT_DTYPE_BF16) | \
   INGOT_DTYPE_BIT(INGOT_DTYPE_F16))
#define WORD32_DTYPES (INGOT_DTYPE_BIT(INGOT_DTYPE_I32) | INGOT_DTYPE_BIT(INGOT_DTYPE_U32))
#define I32_ONLY INGOT_DTYPE_BIT(INGOT_DTYPE_I32)
#define F32_ONLY INGOT_DTYPE_BIT(INGOT_DTYPE_F32)

#define KNOWN_FLAGS                                                            \
  (INGOT_SAMPLING_SHARD_TOP_FINAL | INGOT_SAMPLING_SHARD_SOFTMAX |             \
   INGOT_SAMPLING_SHARD_SELECT_TOP_K | INGOT_SAMPLING_SHARD_SELECT_TOP_P)

typedef ingot_sampling_spans span_list;

/* ---- the shard descriptor ------------------------------------------------------- */

/* shard -> the shard fields of `call` (in.vocab = V). */
static ingot_status check_shard(struct ingot_context *ctx, const char *op,
                                const ingot_sampling_shard *shard,
                                ingot_sampling_shard_call *call) {
  if (shard == NULL) return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "shard: NULL");
  if (shard->struct_size != sizeof(ingot_sampling_shard))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: struct_size = %u, expected sizeof(ingot_sampling_shard) = %u "
                           "(start from INGOT_SAMPLING_SHARD_INITIALIZER)",
                           (unsigned)shard->struct_size, (unsigned)sizeof(ingot_sampling_shard));
  if (shard->struct_version != INGOT_SAMPLING_STRUCT_VERSION)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: struct_version = %u, expected %d",
                           (unsigned)shard->struct_version, INGOT_SAMPLING_STRUCT_VERSION);
  const int64_t V = shard->vocab_size;
  if (V < 1 || V > INT32_MAX)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: vocab_size = %" PRId64 ", expected 1 <= V <= 2^31 - 1", V);
  if (shard->vocab_begin < 0 || shard->vocab_begin > V)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: vocab_begin = %" PRId64 ", expected 0 <= v0 <= vocab_size = %" PRId64,
                           shard->vocab_begin, V);
  if (shard->vocab_count < 0 || shard->vocab_count > V - shard->vocab_begin)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: vocab_count = %" PRId64 ", expected 0 <= Vr <= vocab_size - "
                           "vocab_begin = %" PRId64,
                           shard->vocab_count, V - shard->vocab_begin);
  if (shard->num_shards < 1 || shard->num_shards > INGOT_SAMPLING_SHARD_MAX_SHARDS)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: num_shards = %d, expected 1 <= S <= "
                           "INGOT_SAMPLING_SHARD_MAX_SHARDS = %d",
                           (int)shard->num_shards, INGOT_SAMPLING_SHARD_MAX_SHARDS);
  if (shard->shard_index < 0 || shard->shard_index >= shard->num_shards)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: shard_index = %d, expected 0 <= index < num_shards = %d",
                           (int)shard->shard_index, (int)shard->num_shards);
  if (shard->max_top_k < 0 || shard->max_top_k > INGOT_SAMPLING_MAX_TOP)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: max_top_k = %d, expected 0 <= kc <= INGOT_SAMPLING_MAX_TOP = %d",
                           (int)shard->max_top_k, INGOT_SAMPLING_MAX_TOP);
  if (shard->num_top < 0 || shard->num_top > INGOT_SAMPLING_MAX_TOP)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: num_top = %d, expected 0 <= n <= INGOT_SAMPLING_MAX_TOP = %d",
                           (int)shard->num_top, INGOT_SAMPLING_MAX_TOP);
  if (shard->flags & ~(uint32_t)KNOWN_FLAGS)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: flags = 0x%x has unknown bits 0x%x", (unsigned)shard->flags,
                           (unsigned)(shard->flags & ~(uint32_t)KNOWN_FLAGS));
  if ((shard->flags & INGOT_SAMPLING_SHARD_SOFTMAX) &&
      (shard->num_top != 0 || (shard->flags & INGOT_SAMPLING_SHARD_TOP_FINAL)))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: num_top = %d with flags = 0x%x: the softmax's plan has no "
                           "top-n (num_top 0, no INGOT_SAMPLING_SHARD_TOP_FINAL)",
                           (int)shard->num_top, (unsigned)shard->flags);
  if (shard->reserved != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: reserved = %u, must be 0", (unsigned)shard->reserved);
  call->in.vocab = V;
  call->vocab_begin = shard->vocab_begin;
  call->vocab_count = shard->vocab_count;
  call->num_shards = shard->num_shards;
  call->shard_index = shard->shard_index;
  call->max_top_k = shard->max_top_k;
  call->num_top = shard->num_top;
  call->flags = shard->flags;
  return INGOT_STATUS_SUCCESS;
}

static ingot_shard_steps steps_of(const ingot_sampling_shard_call *call) {
  return ingot_shard_steps_of(call->max_top_k, call->num_top, call->flags);
}

static int64_t record_bytes_of(const ingot_sampling_shard_call *call, const ingot_shard_steps *s,
                               int step) {
  return ingot_shard_record_bytes(call->in.batch, s->row_bytes[step], s->exchange[step]);
}

/* What the exchange of `step` leaves on every shard. */
static int64_t exchanged_bytes_of(const ingot_sampling_shard_call *call,
                                  const ingot_shard_steps *s, int step) {
  return ingot_shard_exchanged_bytes(record_bytes_of(call, s, step), s->exchange[step],
                                     call->num_shards);
}

/* ---- the slice and the parameters ------------------------------------------------- */

static ingot_status check_slice(struct ingot_context *ctx, const char *op,
                                const ingot_tensor *logits, ingot_sampling_shard_call *call,
                                span_list *ins) {
  static const ingot_tensor_rule rule = {"logits", 2, LOGIT_DTYPES, 0};
  ingot_span span;
  ingot_status st = ingot_core_check_tensor(ctx, op, logits, &rule, &span);
  if (st) return st;
  if ((st = ingot_sampling_check_extent(ctx, op, "logits: shape[0]", logits->shape[0],
                                        "shard: vocab_size", call->in.vocab)))
    return st;
  if ((st = ingot_core_check_dim(ctx, op, "logits", logits, 1, call->vocab_count,
                                 "shard->vocab_count")))
    return st;
  call->in.logits = logits->data;
  call->in.dtype = logits->dtype;
  call->in.logits_stride = logits->stride[0];
  call->in.batch = logits->shape[0];
  ingot_sampling_span_add(ins, "logits", span);
  return INGOT_STATUS_SUCCESS;
}

/* CPU: every row the plan serves (the Sharded sampling section: a row not
 * served by the candidates needs SELECT_TOP_K for 0 < top_k < V and
 * SELECT_TOP_P for top_p < 1). */
static ingot_status check_rows_served(struct ingot_context *ctx, const char *op,
                                      const ingot_sampling_shard_call *call) {
  const ingot_sampling_input *in = &call->in;
  const int64_t V = in->vocab, kc = call->max_top_k;
  for (int64_t r = 0; r < in->batch; r++) {
    float t = in->temperature ? in->temperature[r] : 1.0f;
    int32_t k = in->top_k ? in->top_k[r] : 0;
    float p = in->top_p ? in->top_p[r] : 1.0f;
    if (t == 0.0f) continue; /* greedy: no filter */
    int served = kc > 0 && (V <= kc || (k >= 1 && k <= kc));
    if (served) continue;
    if (k > 0 && k < V && !(call->flags & INGOT_SAMPLING_SHARD_SELECT_TOP_K))
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "top_k: top_k[%" PRId64 "] = %d > shard->max_top_k = %d needs "
                             "INGOT_SAMPLING_SHARD_SELECT_TOP_K in shard->flags",
                             r, (int)k, (int)kc);
    if (p < 1.0f && !(call->flags & INGOT_SAMPLING_SHARD_SELECT_TOP_P))
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "top_p: top_p[%" PRId64 "] = %g with top_k[%" PRId64 "] = %d "
                             "outside [1, shard->max_top_k = %d] needs "
                             "INGOT_SAMPLING_SHARD_SELECT_TOP_P in shard->flags",
                             r, (double)p, r, (int)k, (int)kc);
  }
  return INGOT_STATUS_SUCCESS;
}

/* ---- records -------------------------------------------------------------------------- */

/* A record or gathered buffer: `bytes` >= need, non-NULL, 16-byte aligned,
 * reachable by the context. */
static ingot_status check_buffer(struct ingot_context *ctx, const char *op, const char *name,
                                 const void *data, size_t bytes, int64_t need, int writable,
                                 ingot_span *span) {
  if (data == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "%s: NULL", name);
  if (bytes < (uint64_t)need)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: %zu bytes, ingot_sampling_shard_get_plan gives %" PRId64
                           " for this step",
                           name, bytes, need);
  if ((uintptr_t)data % 16 != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: %p is not 16-byte aligned", name, data);
  const ingot_tensor_rule rule = {name, 1, INGOT_DTYPE_BIT(INGOT_DTYPE_U8), writable};
  ingot_tensor t = ingot_tensor_1d((void *)(uintptr_t)data, INGOT_DTYPE_U8, need);
  return ingot_core_check_tensor(ctx, op, &t, &rule, span);
}

/* CPU: the header of the summed records of a sum step (host memory core
 * may read): the sums of the shards' header words are those of S distinct
 * shards of this call at that step, holding V tokens in all. */
static ingot_status check_summed(struct ingot_context *ctx, const char *op,
                                 const ingot_sampling_shard_call *call, int step,
                                 const void *summed) {
  ingot_shard_sum_header h;
  memcpy(&h, summed, sizeof h);
  const uint64_t S = (uint64_t)call->num_shards;
  if (h.magic != S * INGOT_SHARD_SUM_MAGIC || h.shards != S)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "gathered: not the sum of %d records of a sharded sampling sum step "
                           "(shards %" PRIu64 ", magic 0x%" PRIx64 ")",
                           (int)S, h.shards, h.magic);
  if (h.step != S * (uint64_t)step)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "gathered: the sum of records of other steps (step words sum to "
                           "%" PRIu64 ", expected %d x step %d)",
                           h.step, (int)S, step);
  uint64_t tag = ingot_shard_call_tag(call->in.batch, call->in.vocab, call->max_top_k,
                                      call->num_top, call->flags);
  if (h.call != S * tag || (h.reserved[0] | h.reserved[1] | h.reserved[2]))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "gathered: the sum holds records written for another call (B, V, "
                           "max_top_k, num_top or flags differ)");
  for (int w = 0; w < 8; w++) {
    uint64_t full = 0; /* the bits of slots 32 w .. 32 w + 31 below S */
    if (S > 32u * (uint64_t)w)
      full = S - 32u * (uint64_t)w >= 32 ? UINT64_C(0xffffffff)
                                         : (UINT64_C(1) << (S - 32u * (uint64_t)w)) - 1u;
    if (h.slot_bits[w] != full)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "gathered: the sum is not of one record per slot 0 .. %d (slot bits "
                             "%d-%d sum to 0x%" PRIx64 ")",
                             (int)S - 1, 32 * w, 32 * w + 31, h.slot_bits[w]);
  }
  if (h.vocab_count != (uint64_t)call->in.vocab)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "gathered: the shards hold %" PRIu64
                           " tokens, the vocabulary has %" PRId64 " (ranges must tile [0, V))",
                           h.vocab_count, call->in.vocab);
  return INGOT_STATUS_SUCCESS;
}

/* CPU: the headers of the exchanged records of step `step` (host memory
 * core may read). All-gather: each slot written by that step of this call,
 * by the shard of that slot, and the slots' ranges tiling [0, V). */
/* S records of `stride` bytes gathered in slot order (host memory core may
 * read), each the header of this call at `step`: one shard per slot, the
 * call's shape, ranges that tile [0, V). Errors name `what` (the argument)
 * and each record by `unit` ("slot", or "rank" for an NCCL communicator). */
static ingot_status check_gathered_records(struct ingot_context *ctx, const char *op,
                                           const ingot_sampling_shard_call *call,
                                           const ingot_shard_steps *steps, int step,
                                           const void *gathered, int64_t stride,
                                           const char *what, const char *unit,
                                           const char *ref_name) {
  const int S = call->num_shards;
  int64_t covered = 0;
  for (int slot = 0; slot < S; slot++) {
    ingot_shard_header h;
    memcpy(&h, (const char *)gathered + slot * stride, sizeof h);
    if (h.magic != INGOT_SHARD_RECORD_MAGIC)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: %s %d holds no record of a sharded sampling step "
                             "(magic 0x%08x)",
                             what, unit, slot, (unsigned)h.magic);
    if (h.step != step)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: %s %d holds the record of step %d, expected step %d", what,
                             unit, slot, (int)h.step, step);
    if (h.shard_index != slot || h.num_shards != S)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: %s %d holds the record of shard %d of %d, expected "
                             "shard %d of %d (gather in shard_index order)",
                             what, unit, slot, (int)h.shard_index, (int)h.num_shards, slot, S);
    if (h.batch != call->in.batch || h.vocab_size != call->in.vocab ||
        h.max_top_k != call->max_top_k || h.num_top != call->num_top || h.flags != call->flags ||
        (int64_t)h.row_bytes != steps->row_bytes[step])
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: %s %d was written for another call (B %" PRId64
                             ", V %" PRId64 ", max_top_k %d, num_top %d, flags 0x%x; %s: "
                             "%" PRId64 ", %" PRId64 ", %d, %d, 0x%x)",
                             what, unit, slot, h.batch, h.vocab_size, (int)h.max_top_k,
                             (int)h.num_top, (unsigned)h.flags, ref_name, call->in.batch,
                             call->in.vocab,
                             (int)call->max_top_k, (int)call->num_top, (unsigned)call->flags);
    if (h.vocab_begin < 0 || h.vocab_count < 0 || h.vocab_begin > call->in.vocab - h.vocab_count)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: %s %d: range [%" PRId64 ", %" PRId64
                             ") outside the vocabulary [0, %" PRId64 ")",
                             what, unit, slot, h.vocab_begin, h.vocab_begin + h.vocab_count,
                             call->in.vocab);
    if (slot == call->shard_index &&
        (h.vocab_begin != call->vocab_begin || h.vocab_count != call->vocab_count))
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "%s: %s %d (this shard) holds the range [%" PRId64 ", %" PRId64
                             "), shard describes [%" PRId64 ", %" PRId64 ")",
                             what, unit, slot, h.vocab_begin, h.vocab_begin + h.vocab_count,
                             call->vocab_begin, call->vocab_begin + call->vocab_count);
    covered += h.vocab_count;
    /* disjoint from every earlier slot (S <= 256: the pairs are cheap) */
    for (int other = 0; other < slot; other++) {
      ingot_shard_header o;
      memcpy(&o, (const char *)gathered + other * stride, sizeof o);
      if (h.vocab_count > 0 && o.vocab_count > 0 &&
          h.vocab_begin < o.vocab_begin + o.vocab_count &&
          o.vocab_begin < h.vocab_begin + h.vocab_count)
        return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "%s: the ranges of %ss %d [%" PRId64 ", %" PRId64
                               ") and %d [%" PRId64 ", %" PRId64 ") overlap",
                               what, unit, other, o.vocab_begin, o.vocab_begin + o.vocab_count,
                               slot, h.vocab_begin, h.vocab_begin + h.vocab_count);
    }
  }
  if (covered != call->in.vocab)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "%s: the shards hold %" PRId64
                           " tokens, the vocabulary has %" PRId64 " (ranges must tile [0, V))",
                           what, covered, call->in.vocab);
  return INGOT_STATUS_SUCCESS;
}

static ingot_status check_gathered(struct ingot_context *ctx, const char *op,
                                   const ingot_sampling_shard_call *call,
                                   const ingot_shard_steps *steps, int step,
                                   const void *gathered) {
  if (steps->exchange[step] == INGOT_SAMPLING_SHARD_EXCHANGE_SUM)
    return check_summed(ctx, op, call, step, gathered);
  return check_gathered_records(ctx, op, call, steps, step, gathered,
                                record_bytes_of(call, steps, step), "gathered", "slot",
                                "this call");
}

/* gathered of the step before `step` (NULL at step 0). */
static ingot_status check_gathered_arg(struct ingot_context *ctx, const char *op,
                                       const ingot_sampling_shard_call *call,
                                       const ingot_shard_steps *steps, int step,
                                       const void *gathered, size_t gathered_bytes,
                                       span_list *ins) {
  if (step == 0) {
    if (gathered != NULL || gathered_bytes != 0)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "gathered: %p (%zu bytes) at step 0, expected NULL and 0",
                             gathered, gathered_bytes);
    return INGOT_STATUS_SUCCESS;
  }
  ingot_span span;
  int64_t need = exchanged_bytes_of(call, steps, step - 1);
  ingot_status st = check_buffer(ctx, op, "gathered", gathered, gathered_bytes, need, 0, &span);
  if (st) return st;
  ingot_sampling_span_add(ins, "gathered", span);
  return INGOT_STATUS_SUCCESS;
}

static ingot_status check_workspace(struct ingot_context *ctx, const char *op,
                                    const ingot_sampling_shard_call *call, void *workspace,
                                    size_t workspace_bytes, span_list *outs) {
  size_t need = 0;
  ingot_status st = ctx->ops->sampling_shard_workspace_size(ctx, call, &need);
  if (st) return st;
  ingot_span span;
  if ((st = ingot_core_check_workspace(ctx, op, need, workspace, workspace_bytes,
                                       "ingot_sampling_shard_get_plan", &span)))
    return st;
  ingot_sampling_span_add(outs, "workspace", span);
  return INGOT_STATUS_SUCCESS;
}

/* The arguments of the size queries (a call of `batch` rows of
 * logits_dtype under shard's plan) -> call, with ingot_core_begin. */
static ingot_status begin_query(ingot_context_t ctx, const char *op,
                                const ingot_sampling_shard *shard, int64_t batch,
                                ingot_dtype logits_dtype, struct CUstream_st *stream,
                                ingot_sampling_shard_call *call) {
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  memset(call, 0, sizeof *call);
  if ((st = check_shard(ctx, op, shard, call))) return st;
  if ((st = ingot_sampling_check_extent(ctx, op, "batch", batch, "shard: vocab_size",
                                        call->in.vocab)))
    return st;
  if ((st = ingot_sampling_check_logits_dtype(ctx, op, logits_dtype))) return st;
  call->in.batch = batch;
  call->in.dtype = logits_dtype;
  return INGOT_STATUS_SUCCESS;
}

/* ---- ops ------------------------------------------------------------------------------ */

ingot_status ingot_sampling_shard_get_plan(ingot_context_t ctx, const ingot_sampling_shard *shard,
                                           int64_t batch, ingot_dtype logits_dtype,
                                           ingot_sampling_shard_plan *plan) {
  static const char op[] = "ingot_sampling_shard_get_plan";
  ingot_sampling_shard_call call;
  ingot_status st = begin_query(ctx, op, shard, batch, logits_dtype, NULL, &call);
  if (st) return st;
  if (plan == NULL) return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "plan: NULL");
  if (plan->struct_size != sizeof(ingot_sampling_shard_plan))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "plan: struct_size = %u, expected sizeof(ingot_sampling_shard_plan) = "
                           "%u (start from INGOT_SAMPLING_SHARD_PLAN_INITIALIZER)",
                           (unsigned)plan->struct_size,
                           (unsigned)sizeof(ingot_sampling_shard_plan));
  if (plan->struct_version != INGOT_SAMPLING_STRUCT_VERSION)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "plan: struct_version = %u, expected %d",
                           (unsigned)plan->struct_version, INGOT_SAMPLING_STRUCT_VERSION);
  size_t workspace = 0;
  if ((st = ctx->ops->sampling_shard_workspace_size(ctx, &call, &workspace))) return st;
  ingot_shard_steps steps = steps_of(&call);
  ingot_sampling_shard_plan out = *plan;
  out.num_steps = steps.count;
  out.reserved = 0;
  out.reserved2 = 0;
  out.max_record_bytes = out.max_exchanged_bytes = 0;
  for (int i = 0; i < INGOT_SAMPLING_SHARD_MAX_STEPS; i++) {
    int used = i < steps.count;
    out.record_bytes[i] = used ? (size_t)record_bytes_of(&call, &steps, i) : 0;
    out.exchanged_bytes[i] = used ? (size_t)exchanged_bytes_of(&call, &steps, i) : 0;
    out.exchange[i] = used ? steps.exchange[i] : INGOT_SAMPLING_SHARD_EXCHANGE_GATHER;
    if (out.record_bytes[i] > out.max_record_bytes) out.max_record_bytes = out.record_bytes[i];
    if (out.exchanged_bytes[i] > out.max_exchanged_bytes)
      out.max_exchanged_bytes = out.exchanged_bytes[i];
  }
  out.workspace_bytes = workspace;
  *plan = out;
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_sampling_shard_step(ingot_context_t ctx, int32_t step,
                                       const ingot_tensor *logits,
                                       const ingot_sampling_params *params,
                                       const ingot_sampling_shard *shard, const void *gathered,
                                       size_t gathered_bytes, void *record, size_t record_bytes,
                                       void *workspace, size_t workspace_bytes,
                                       struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_step";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  span_list ins = {{0}, {{0, 0}}, 0}, outs = {{0}, {{0, 0}}, 0};
  ingot_sampling_shard_call call;
  memset(&call, 0, sizeof call);
  if ((st = check_shard(ctx, op, shard, &call))) return st;
  ingot_shard_steps steps = steps_of(&call);
  if (step < 0 || step >= steps.count)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "step = %d, expected 0 <= step < %d (the plan's num_steps)", (int)step,
                           steps.count);
  if ((st = check_slice(ctx, op, logits, &call, &ins))) return st;
  if ((st = ingot_sampling_check_params(ctx, op, params, &call.in, &ins))) return st;
  if (ctx->backend == INGOT_BACKEND_CPU && (st = check_rows_served(ctx, op, &call))) return st;
  if ((st = check_gathered_arg(ctx, op, &call, &steps, step, gathered, gathered_bytes, &ins)))
    return st;
  ingot_span span;
  if ((st = check_buffer(ctx, op, "record", record, record_bytes,
                         record_bytes_of(&call, &steps, step), 1, &span)))
    return st;
  ingot_sampling_span_add(&outs, "record", span);
  if ((st = check_workspace(ctx, op, &call, workspace, workspace_bytes, &outs))) return st;
  if ((st = ingot_sampling_check_overlaps(ctx, op, &outs, &ins))) return st;
  if (call.in.batch == 0) return INGOT_STATUS_SUCCESS;
  if (ctx->backend == INGOT_BACKEND_CPU && step > 0 &&
      (st = check_gathered(ctx, op, &call, &steps, step - 1, gathered)))
    return st;
  return ctx->ops->sampling_shard_step(ctx, &call, step, gathered, record, workspace,
                                       workspace_bytes, stream);
}

/* tokens [B] I32 (non-NULL), row_status (NULL or [B]) and logprobs of a
 * finish of ingot_sample, B = call->in.batch -> out; their spans -> outs. */
static ingot_status check_sample_outputs(struct ingot_context *ctx, const char *op,
                                         const ingot_sampling_shard_call *call,
                                         const ingot_tensor *tokens,
                                         const ingot_tensor *row_status,
                                         const ingot_sampling_logprobs *logprobs,
                                         ingot_sampling_output *out, span_list *outs) {
  if (tokens == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "tokens: NULL descriptor");
  const void *p;
  ingot_status st = ingot_sampling_check_row_vector(ctx, op, "tokens", tokens, I32_ONLY,
                                                    call->in.batch, 1, &p, outs);
  if (st) return st;
  out->tokens = (int32_t *)(uintptr_t)p;
  if ((st = ingot_sampling_check_row_vector(ctx, op, "row_status", row_status, WORD32_DTYPES,
                                            call->in.batch, 1, &p, outs)))
    return st;
  out->row_status = (uint32_t *)(uintptr_t)p;
  if ((st = ingot_sampling_check_logprobs(ctx, op, logprobs, call->in.batch, out, outs)))
    return st;
  if (out->num_top > 0 && out->num_top != call->num_top)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "logprobs: top-n outputs of %" PRId64
                           " columns, the plan's shard->num_top = %d",
                           out->num_top, (int)call->num_top);
  if (out->num_top > 0 && !(out->flags & INGOT_SAMPLING_TOP_FINAL) !=
                              !(call->flags & INGOT_SAMPLING_SHARD_TOP_FINAL))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "logprobs: flags = 0x%x, shard: flags = 0x%x: the top-n kind (raw or "
                           "INGOT_SAMPLING_TOP_FINAL) must be the plan's",
                           (unsigned)out->flags, (unsigned)call->flags);
  return INGOT_STATUS_SUCCESS;
}

/* probs [B, Vr] F32 and row_status (NULL or [B]) of a finish of
 * ingot_sampling_softmax, B = call->in.batch; their spans -> outs. */
static ingot_status check_softmax_outputs(struct ingot_context *ctx, const char *op,
                                          const ingot_sampling_shard_call *call,
                                          const ingot_tensor *probs,
                                          const ingot_tensor *row_status,
                                          uint32_t **row_status_data, span_list *outs) {
  static const ingot_tensor_rule probs_rule = {"probs", 2, F32_ONLY, 1};
  ingot_span span;
  ingot_status st = ingot_core_check_tensor(ctx, op, probs, &probs_rule, &span);
  if (st) return st;
  if ((st = ingot_core_check_dim(ctx, op, "probs", probs, 0, call->in.batch, "B (logits rows)")))
    return st;
  if ((st = ingot_core_check_dim(ctx, op, "probs", probs, 1, call->vocab_count,
                                 "shard->vocab_count")))
    return st;
  ingot_sampling_span_add(outs, "probs", span);
  const void *p;
  if ((st = ingot_sampling_check_row_vector(ctx, op, "row_status", row_status, WORD32_DTYPES,
                                            call->in.batch, 1, &p, outs)))
    return st;
  *row_status_data = (uint32_t *)(uintptr_t)p;
  return INGOT_STATUS_SUCCESS;
}

/* The plan's last step is the DRAW step (softmax 0) or the MASS step (1). */
static ingot_status check_finish_kind(struct ingot_context *ctx, const char *op,
                                      const ingot_sampling_shard_call *call, int softmax) {
  if (!(call->flags & INGOT_SAMPLING_SHARD_SOFTMAX) != !softmax)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "shard: flags = 0x%x: %s INGOT_SAMPLING_SHARD_SOFTMAX for this finish",
                           (unsigned)call->flags, softmax ? "expected" : "unexpected");
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_sampling_shard_finish_sample(
    ingot_context_t ctx, const ingot_sampling_shard *shard, const void *gathered,
    size_t gathered_bytes, const ingot_tensor *tokens, const ingot_tensor *row_status,
    const ingot_sampling_logprobs *logprobs, void *workspace, size_t workspace_bytes,
    struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_finish_sample";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  span_list ins = {{0}, {{0, 0}}, 0}, outs = {{0}, {{0, 0}}, 0};
  ingot_sampling_shard_call call;
  ingot_sampling_output out;
  memset(&call, 0, sizeof call);
  memset(&out, 0, sizeof out);
  if ((st = check_shard(ctx, op, shard, &call))) return st;
  if ((st = check_finish_kind(ctx, op, &call, 0))) return st;
  ingot_shard_steps steps = steps_of(&call);
  if (tokens == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "tokens: NULL descriptor");
  static const ingot_tensor_rule tokens_rule = {"tokens", 1, I32_ONLY, 1};
  if ((st = ingot_core_check_tensor(ctx, op, tokens, &tokens_rule, NULL))) return st;
  if ((st = ingot_sampling_check_extent(ctx, op, "tokens: shape[0]", tokens->shape[0],
                                        "shard: vocab_size", call.in.vocab)))
    return st;
  call.in.batch = tokens->shape[0];
  if ((st = check_sample_outputs(ctx, op, &call, tokens, row_status, logprobs, &out, &outs)))
    return st;
  if ((st = check_gathered_arg(ctx, op, &call, &steps, steps.count, gathered, gathered_bytes,
                               &ins)))
    return st;
  if ((st = check_workspace(ctx, op, &call, workspace, workspace_bytes, &outs))) return st;
  if ((st = ingot_sampling_check_overlaps(ctx, op, &outs, &ins))) return st;
  if (call.in.batch == 0) return INGOT_STATUS_SUCCESS;
  if (ctx->backend == INGOT_BACKEND_CPU &&
      (st = check_gathered(ctx, op, &call, &steps, steps.count - 1, gathered)))
    return st;
  return ctx->ops->sampling_shard_finish_sample(ctx, &call, gathered, &out, workspace,
                                                workspace_bytes, stream);
}

ingot_status ingot_sampling_shard_finish_softmax(
    ingot_context_t ctx, const ingot_tensor *logits, const ingot_sampling_params *params,
    const ingot_sampling_shard *shard, const void *gathered, size_t gathered_bytes,
    const ingot_tensor *probs, const ingot_tensor *row_status, void *workspace,
    size_t workspace_bytes, struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_finish_softmax";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  span_list ins = {{0}, {{0, 0}}, 0}, outs = {{0}, {{0, 0}}, 0};
  ingot_sampling_shard_call call;
  memset(&call, 0, sizeof call);
  if ((st = check_shard(ctx, op, shard, &call))) return st;
  if ((st = check_finish_kind(ctx, op, &call, 1))) return st;
  ingot_shard_steps steps = steps_of(&call);
  if ((st = check_slice(ctx, op, logits, &call, &ins))) return st;
  if ((st = ingot_sampling_check_params(ctx, op, params, &call.in, &ins))) return st;
  if (ctx->backend == INGOT_BACKEND_CPU && (st = check_rows_served(ctx, op, &call))) return st;
  uint32_t *status_data;
  if ((st = check_softmax_outputs(ctx, op, &call, probs, row_status, &status_data, &outs)))
    return st;
  if ((st = check_gathered_arg(ctx, op, &call, &steps, steps.count, gathered, gathered_bytes,
                               &ins)))
    return st;
  if ((st = check_workspace(ctx, op, &call, workspace, workspace_bytes, &outs))) return st;
  if ((st = ingot_sampling_check_overlaps(ctx, op, &outs, &ins))) return st;
  if (call.in.batch == 0) return INGOT_STATUS_SUCCESS;
  if (ctx->backend == INGOT_BACKEND_CPU &&
      (st = check_gathered(ctx, op, &call, &steps, steps.count - 1, gathered)))
    return st;
  return ctx->ops->sampling_shard_finish_softmax(ctx, &call, gathered, (float *)probs->data,
                                                 probs->stride[0], status_data, workspace,
                                                 workspace_bytes, stream);
}

/* The local exchanges: num_shards records of record_bytes each, and an
 * output (S records for a gather, one for a sum) that overlaps none. */
static ingot_status check_local_exchange(struct ingot_context *ctx, const char *op,
                                         int32_t num_shards, const void *const *records,
                                         size_t record_bytes, size_t min_record_bytes,
                                         const char *out_name, void *out, size_t out_bytes,
                                         int gather) {
  if (num_shards < 1 || num_shards > INGOT_SAMPLING_SHARD_MAX_SHARDS)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "num_shards = %d, expected 1 <= S <= INGOT_SAMPLING_SHARD_MAX_SHARDS "
                           "= %d",
                           (int)num_shards, INGOT_SAMPLING_SHARD_MAX_SHARDS);
  if (records == NULL)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "records: NULL");
  if (record_bytes < min_record_bytes || record_bytes % 16 != 0 ||
      record_bytes > (size_t)INT64_MAX / (size_t)num_shards)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "record_bytes = %zu, expected a record size of "
                           "ingot_sampling_shard_get_plan (a multiple of 16, >= %zu)",
                           record_bytes, min_record_bytes);
  ingot_span out_span;
  ingot_status st = check_buffer(ctx, op, out_name, out, out_bytes,
                                 (int64_t)record_bytes * (gather ? num_shards : 1), 1, &out_span);
  if (st) return st;
  for (int32_t j = 0; j < num_shards; j++) {
    char name[32];
    snprintf(name, sizeof name, "records[%d]", (int)j);
    ingot_span span;
    if ((st = check_buffer(ctx, op, name, records[j], record_bytes, (int64_t)record_bytes, 0,
                           &span)))
      return st;
    if ((st = ingot_core_check_disjoint(ctx, op, out_name, out_span, name, span))) return st;
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_sampling_shard_gather(ingot_context_t ctx, int32_t num_shards,
                                         const void *const *records, size_t record_bytes,
                                         void *gathered, size_t gathered_bytes,
                                         struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_gather";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  if ((st = check_local_exchange(ctx, op, num_shards, records, record_bytes,
                                 INGOT_SHARD_HEADER_BYTES, "gathered", gathered, gathered_bytes,
                                 1)))
    return st;
  return ctx->ops->sampling_shard_gather(ctx, num_shards, records, record_bytes, gathered,
                                         stream);
}

ingot_status ingot_sampling_shard_sum(ingot_context_t ctx, int32_t num_shards,
                                      const void *const *records, size_t record_bytes,
                                      void *summed, size_t summed_bytes,
                                      struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_shard_sum";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  if ((st = check_local_exchange(ctx, op, num_shards, records, record_bytes,
                                 INGOT_SHARD_SUM_HEADER_BYTES, "summed", summed, summed_bytes,
                                 0)))
    return st;
  return ctx->ops->sampling_shard_sum(ctx, num_shards, records, record_bytes, summed, stream);
}

/* ---- the whole call over NCCL ------------------------------------------------------- */

#define NCCL_PART_ALIGN 256

static size_t round_up_part(size_t bytes) {
  return (bytes + NCCL_PART_ALIGN - 1) / NCCL_PART_ALIGN * NCCL_PART_ALIGN;
}

/* The one-call workspace: the steps' workspace, then one record and one
 * gathered buffer, each at a multiple of 256 bytes. */
typedef struct {
  size_t record_at, gathered_at, total; /* the steps' part is [0, record_at) */
} nccl_layout;

static ingot_status nccl_layout_of(struct ingot_context *ctx,
                                   const ingot_sampling_shard_call *call, nccl_layout *l) {
  size_t steps_bytes = 0;
  ingot_status st = ctx->ops->sampling_shard_workspace_size(ctx, call, &steps_bytes);
  if (st) return st;
  ingot_shard_steps steps = steps_of(call);
  size_t record = 0, gathered = 0;
  for (int i = 0; i < steps.count; i++) {
    size_t r = (size_t)record_bytes_of(call, &steps, i);
    size_t g = (size_t)exchanged_bytes_of(call, &steps, i);
    if (r > record) record = r;
    if (g > gathered) gathered = g;
  }
  l->record_at = round_up_part(steps_bytes);
  l->gathered_at = l->record_at + round_up_part(record);
  l->total = l->gathered_at + round_up_part(gathered);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_sampling_sharded_nccl_workspace_size(ingot_context_t ctx,
                                                        const ingot_sampling_shard *shard,
                                                        int64_t batch, ingot_dtype logits_dtype,
                                                        size_t *bytes) {
  static const char op[] = "ingot_sampling_sharded_nccl_workspace_size";
  ingot_sampling_shard_call call;
  ingot_status st = begin_query(ctx, op, shard, batch, logits_dtype, NULL, &call);
  if (st) return st;
  if (bytes == NULL) return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "bytes: NULL");
  nccl_layout l;
  if ((st = nccl_layout_of(ctx, &call, &l))) return st;
  *bytes = call.in.batch == 0 ? 0 : l.total;
  return INGOT_STATUS_SUCCESS;
}

/* comm: a communicator of shard->num_shards ranks in which the caller is
 * rank shard->shard_index, on the context's device. */
static ingot_status check_comm(struct ingot_context *ctx, const char *op, struct ncclComm *comm,
                               const ingot_sampling_shard_call *call) {
  if (ctx->backend != INGOT_BACKEND_CUDA)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "ctx: a CPU context; the NCCL form needs a CUDA context (the step "
                           "functions run on the CPU with any transport)");
  if (comm == NULL) return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "comm: NULL");
  int32_t ranks = 0, rank = 0, device = 0;
  ingot_status st = ctx->ops->nccl_comm_info(ctx, op, comm, &ranks, &rank, &device);
  if (st) return st;
  if (ranks != call->num_shards)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "comm: %d ranks, shard: num_shards = %d", (int)ranks,
                           (int)call->num_shards);
  if (rank != call->shard_index)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "comm: the caller is rank %d, shard: shard_index = %d", (int)rank,
                           (int)call->shard_index);
  if (device != ctx->device)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "comm: on CUDA device %d, the context on device %d", (int)device,
                           (int)ctx->device);
  return INGOT_STATUS_SUCCESS;
}

#define REFUSED_MAGIC 0x52485349u /* "ISHR": a rank's verify record when its own checks failed */

ingot_status ingot_sampling_sharded_nccl_verify(ingot_context_t ctx, struct ncclComm *comm,
                                                const ingot_sampling_shard *shard, int64_t batch,
                                                ingot_dtype logits_dtype,
                                                struct CUstream_st *stream) {
  static const char op[] = "ingot_sampling_sharded_nccl_verify";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  if (ctx->backend != INGOT_BACKEND_CUDA)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "ctx: a CPU context; the NCCL form needs a CUDA context");
  if (comm == NULL) return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "comm: NULL");
  int32_t ranks = 0, rank = 0, device = 0;
  if ((st = ctx->ops->nccl_comm_info(ctx, op, comm, &ranks, &rank, &device))) return st;
  /* From here every rank joins the all-gather, so that one rank's own error
   * reaches the others instead of leaving them waiting in it. */
  ingot_sampling_shard_call call;
  memset(&call, 0, sizeof call);
  ingot_status local = check_shard(ctx, op, shard, &call);
  if (!local)
    local = ingot_sampling_check_extent(ctx, op, "batch", batch, "shard: vocab_size",
                                        call.in.vocab);
  if (!local) local = ingot_sampling_check_logits_dtype(ctx, op, logits_dtype);
  if (!local) {
    call.in.batch = batch;
    call.in.dtype = logits_dtype;
    local = check_comm(ctx, op, comm, &call);
  }
  char why[INGOT_ERROR_TEXT_BYTES];
  uint64_t mine[INGOT_SHARD_SUM_HEADER_BYTES / 8];
  if (local) {
    snprintf(why, sizeof why, "%s", ingot_last_error(ctx) + strlen(op) + 2);
    ingot_shard_header refused;
    memset(&refused, 0, sizeof refused);
    refused.magic = REFUSED_MAGIC;
    refused.num_shards = ranks;
    refused.shard_index = rank;
    memset(mine, 0, sizeof mine);
    memcpy(mine, &refused, sizeof refused);
  } else {
    ingot_shard_header_of(&call, 0, steps_of(&call).row_bytes[0],
                          INGOT_SAMPLING_SHARD_EXCHANGE_GATHER, mine);
  }
  unsigned char all[INGOT_SAMPLING_SHARD_MAX_SHARDS * INGOT_SHARD_HEADER_BYTES];
  if (ranks < 1 || ranks > INGOT_SAMPLING_SHARD_MAX_SHARDS)
    return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                           "comm: %d ranks, at most INGOT_SAMPLING_SHARD_MAX_SHARDS = %d",
                           (int)ranks, INGOT_SAMPLING_SHARD_MAX_SHARDS);
  if ((st = ctx->ops->nccl_all_gather_host(ctx, op, comm, mine, INGOT_SHARD_HEADER_BYTES, ranks,
                                           all, stream)))
    return st;
  if (local) return ingot_core_fail(ctx, local, op, "%s", why);
  for (int32_t r = 0; r < ranks; r++) {
    ingot_shard_header h;
    memcpy(&h, all + (size_t)r * INGOT_SHARD_HEADER_BYTES, sizeof h);
    if (h.magic == REFUSED_MAGIC)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "comm: rank %d refused its own arguments (its error says which)",
                             (int)r);
  }
  /* every rank against rank 0's call, so that all ranks report the same text */
  ingot_shard_header h0;
  memcpy(&h0, all, sizeof h0);
  ingot_sampling_shard_call ref;
  memset(&ref, 0, sizeof ref);
  ref.in.batch = h0.batch, ref.in.vocab = h0.vocab_size;
  ref.vocab_begin = h0.vocab_begin, ref.vocab_count = h0.vocab_count;
  ref.num_shards = ranks, ref.shard_index = 0;
  ref.max_top_k = h0.max_top_k, ref.num_top = h0.num_top, ref.flags = h0.flags;
  const ingot_shard_steps ref_steps = steps_of(&ref);
  return check_gathered_records(ctx, op, &ref, &ref_steps, 0, all, INGOT_SHARD_HEADER_BYTES,
                                "comm", "rank", "rank 0's call");
}

/* ingot_sample_sharded_nccl (softmax 0: tokens, row_status, logprobs) and
 * ingot_sampling_softmax_sharded_nccl (softmax 1: probs, row_status): every
 * argument checked, then the steps, each followed by its collective, and
 * the finish. */
static ingot_status sharded_nccl(ingot_context_t ctx, const char *op, struct ncclComm *comm,
                                 const ingot_tensor *logits, const ingot_sampling_params *params,
                                 const ingot_sampling_shard *shard, int softmax,
                                 const ingot_tensor *tokens, const ingot_tensor *row_status,
                                 const ingot_sampling_logprobs *logprobs,
                                 const ingot_tensor *probs, void *workspace,
                                 size_t workspace_bytes, struct CUstream_st *stream) {
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  span_list ins = {{0}, {{0, 0}}, 0}, outs = {{0}, {{0, 0}}, 0};
  ingot_sampling_shard_call call;
  ingot_sampling_output out;
  memset(&call, 0, sizeof call);
  memset(&out, 0, sizeof out);
  if ((st = check_shard(ctx, op, shard, &call))) return st;
  if ((st = check_finish_kind(ctx, op, &call, softmax))) return st;
  if ((st = check_comm(ctx, op, comm, &call))) return st;
  if ((st = check_slice(ctx, op, logits, &call, &ins))) return st;
  if ((st = ingot_sampling_check_params(ctx, op, params, &call.in, &ins))) return st;
  uint32_t *status_data = NULL;
  st = softmax ? check_softmax_outputs(ctx, op, &call, probs, row_status, &status_data, &outs)
               : check_sample_outputs(ctx, op, &call, tokens, row_status, logprobs, &out, &outs);
  if (st) return st;
  nccl_layout l;
  if ((st = nccl_layout_of(ctx, &call, &l))) return st;
  ingot_span span;
  if ((st = ingot_core_check_workspace(ctx, op, call.in.batch == 0 ? 0 : l.total, workspace,
                                       workspace_bytes,
                                       "ingot_sampling_sharded_nccl_workspace_size", &span)))
    return st;
  ingot_sampling_span_add(&outs, "workspace", span);
  if ((st = ingot_sampling_check_overlaps(ctx, op, &outs, &ins))) return st;
  if (call.in.batch == 0) return INGOT_STATUS_SUCCESS;
  unsigned char *ws = (unsigned char *)workspace;
  void *record = ws + l.record_at, *gathered = ws + l.gathered_at;
  const size_t steps_bytes = l.record_at; /* the steps' part, >= their size query's */
  ingot_shard_steps steps = steps_of(&call);
  for (int i = 0; i < steps.count; i++) {
    if ((st = ctx->ops->sampling_shard_step(ctx, &call, i, i ? gathered : NULL, record, ws,
                                            steps_bytes, stream)))
      return st;
    if ((st = ctx->ops->nccl_exchange(ctx, op, comm, steps.exchange[i], record,
                                      (size_t)record_bytes_of(&call, &steps, i), gathered,
                                      stream)))
      return st;
  }
  if (softmax)
    return ctx->ops->sampling_shard_finish_softmax(ctx, &call, gathered, (float *)probs->data,
                                                   probs->stride[0], status_data, ws,
                                                   steps_bytes, stream);
  return ctx->ops->sampling_shard_finish_sample(ctx, &call, gathered, &out, ws, steps_bytes,
                                                stream);
}

ingot_status ingot_sample_sharded_nccl(ingot_context_t ctx, struct ncclComm *comm,
                                       const ingot_tensor *logits,
                                       const ingot_sampling_params *params,
                                       const ingot_sampling_shard *shard,
                                       const ingot_tensor *tokens, const ingot_tensor *row_status,
                                       const ingot_sampling_logprobs *logprobs, void *workspace,
                                       size_t workspace_bytes, struct CUstream_st *stream) {
  return sharded_nccl(ctx, "ingot_sample_sharded_nccl", comm, logits, params, shard, 0, tokens,
                      row_status, logprobs, NULL, workspace, workspace_bytes, stream);
}

ingot_status ingot_sampling_softmax_sharded_nccl(ingot_context_t ctx, struct ncclComm *comm,
                                                 const ingot_tensor *logits,
                                                 const ingot_sampling_params *params,
                                                 const ingot_sampling_shard *shard,
                                                 const ingot_tensor *probs,
                                                 const ingot_tensor *row_status, void *workspace,
                                                 size_t workspace_bytes,
                                                 struct CUstream_st *stream) {
  return sharded_nccl(ctx, "ingot_sampling_softmax_sharded_nccl", comm, logits, params, shard, 1,
                      NULL, row_status, NULL, probs, workspace, workspace_bytes, stream);
}
