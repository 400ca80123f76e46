/*
 * Hashed n-gram embeddings: argument validation and dispatch (every backend),
 * and the constants derivation of docs/ple.md.
 */
#include <inttypes.h>
#include <math.h>

#include "core/check.h"

#define I32_OR_I64 (INGOT_DTYPE_BIT(INGOT_DTYPE_I32) | INGOT_DTYPE_BIT(INGOT_DTYPE_I64))
#define TABLE_DTYPES                                                         \
  (INGOT_DTYPE_BIT(INGOT_DTYPE_F8_E4M3) | INGOT_DTYPE_BIT(INGOT_DTYPE_BF16) | \
   INGOT_DTYPE_BIT(INGOT_DTYPE_F32))

/* ---- constants derivation ------------------------------------------------ */

static uint64_t splitmix64(uint64_t v) {
  v += 0x9E3779B97F4A7C15ull;
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

__extension__ typedef unsigned __int128 u128;

static uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) {
  return (uint64_t)(((u128)a * b) % m);
}

static uint64_t pow_mod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  a %= m;
  while (e) {
    if (e & 1) r = mul_mod(r, a, m);
    a = mul_mod(a, a, m);
    e >>= 1;
  }
  return r;
}

/* Deterministic Miller-Rabin for every 64-bit n (first 12 prime bases). */
static int is_prime(uint64_t n) {
  static const uint64_t bases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return 0;
  for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
    if (n == bases[i]) return 1;
    if (n % bases[i] == 0) return 0;
  }
  uint64_t d = n - 1;
  int r = 0;
  while ((d & 1) == 0) d >>= 1, r++;
  for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
    uint64_t x = pow_mod(bases[i], d, n);
    if (x == 1 || x == n - 1) continue;
    int composite = 1;
    for (int j = 1; j < r && composite; j++) {
      x = mul_mod(x, x, n);
      if (x == n - 1) composite = 0;
    }
    if (composite) return 0;
  }
  return 1;
}

ingot_status ingot_ngram_config_derive(int64_t vocab_size, int32_t n, int32_t heads_per_order,
                                       int64_t base, int64_t seed, int32_t layer_index,
                                       int64_t boundary_token, ingot_ngram_config *out) {
  static const char op[] = "ingot_ngram_config_derive";
  ingot_core_clear_error(NULL);
  if (out == NULL) return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "out: NULL");
  if (vocab_size < 1)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "vocab_size: %" PRId64 " < 1", vocab_size);
  if (n < 2 || n > INGOT_NGRAM_MAX_N)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "n: %d outside [2, %d]", (int)n, INGOT_NGRAM_MAX_N);
  if (heads_per_order < 1 || (int64_t)heads_per_order * (n - 1) > INGOT_NGRAM_MAX_HEADS)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "heads_per_order: %d gives H = %d * (n - 1) outside [1, %d]",
                           (int)heads_per_order, (int)heads_per_order, INGOT_NGRAM_MAX_HEADS);
  if (base < 2 || base > (INT64_C(1) << 61))
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "base: %" PRId64 " outside [2, 2^61]", base);
  if (layer_index < 0 || layer_index > INGOT_NGRAM_MAX_LAYER_INDEX)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "layer_index: %d outside [0, %d] (each layer skips H primes)",
                           (int)layer_index, INGOT_NGRAM_MAX_LAYER_INDEX);

  ingot_ngram_config cfg = {0};
  cfg.n = n;
  cfg.heads_per_order = heads_per_order;
  cfg.num_heads = heads_per_order * (n - 1);
  cfg.boundary_token = boundary_token;

  uint64_t half_bound = (uint64_t)(INT64_MAX / vocab_size) / 2;
  if (half_bound < 1) half_bound = 1;
  uint64_t base_seed = (uint64_t)seed + UINT64_C(10007) * (uint64_t)layer_index;
  for (int i = 0; i < n; i++) {
    uint64_t v = splitmix64(base_seed + UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(i + 1));
    cfg.multipliers[i] = (int64_t)(2 * (v % half_bound) + 1);
  }

  /* P[h] = the (L*H + h + 1)-th prime >= base. */
  int64_t skip = (int64_t)layer_index * cfg.num_heads;
  uint64_t candidate = (uint64_t)base;
  int64_t offset = 0;
  for (int64_t found = 0; found < skip + cfg.num_heads; candidate++) {
    if (candidate > (UINT64_C(1) << 62))
      return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "base: primes past 2^62 needed");
    if (!is_prime(candidate)) continue;
    if (found >= skip) {
      int h = (int)(found - skip);
      cfg.primes[h] = (int64_t)candidate;
      cfg.offsets[h] = offset;
      if (__builtin_add_overflow(offset, (int64_t)candidate, &offset))
        return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "base: table rows overflow int64");
    }
    found++;
  }
  *out = cfg;
  return INGOT_STATUS_SUCCESS;
}

/* ---- config validation ---------------------------------------------------- */

static ingot_status check_config(struct ingot_context *ctx, const char *op,
                                 const ingot_ngram_config *cfg) {
  if (cfg == NULL) return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "cfg: NULL");
  if (cfg->n < 2 || cfg->n > INGOT_NGRAM_MAX_N)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "cfg->n: %d outside [2, %d]", (int)cfg->n, INGOT_NGRAM_MAX_N);
  if (cfg->heads_per_order < 1)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "cfg->heads_per_order: %d < 1", (int)cfg->heads_per_order);
  int64_t expected = (int64_t)cfg->heads_per_order * (cfg->n - 1);
  if (cfg->num_heads != expected)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "cfg->num_heads: %d != heads_per_order * (n - 1) = %d * %d = %" PRId64,
                           (int)cfg->num_heads, (int)cfg->heads_per_order, (int)cfg->n - 1,
                           expected);
  if (cfg->num_heads > INGOT_NGRAM_MAX_HEADS)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "cfg->num_heads: %d > INGOT_NGRAM_MAX_HEADS = %d",
                           (int)cfg->num_heads, INGOT_NGRAM_MAX_HEADS);
  if (cfg->reserved != 0)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "cfg->reserved: %d, must be 0", (int)cfg->reserved);
  for (int h = 0; h < cfg->num_heads; h++) {
    int64_t end;
    if (cfg->primes[h] < 1)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "cfg->primes[%d]: %" PRId64 " < 1", h, cfg->primes[h]);
    if (cfg->offsets[h] < 0)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "cfg->offsets[%d]: %" PRId64 " < 0", h, cfg->offsets[h]);
    if (__builtin_add_overflow(cfg->offsets[h], cfg->primes[h], &end))
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "cfg->offsets[%d] + cfg->primes[%d] = %" PRId64 " + %" PRId64
                             " overflows int64",
                             h, h, cfg->offsets[h], cfg->primes[h]);
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_ngram_table_rows(const ingot_ngram_config *cfg, int64_t pad_multiple,
                                    int64_t *rows) {
  static const char op[] = "ingot_ngram_table_rows";
  ingot_core_clear_error(NULL);
  ingot_status st = check_config(NULL, op, cfg);
  if (st) return st;
  if (rows == NULL) return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "rows: NULL");
  if (pad_multiple < 1)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "pad_multiple: %" PRId64 " < 1", pad_multiple);
  int64_t total = 0;
  for (int h = 0; h < cfg->num_heads; h++) {
    int64_t end = cfg->offsets[h] + cfg->primes[h]; /* no overflow: checked */
    if (end > total) total = end;
  }
  int64_t padded;
  if (ingot_core_size_round_up(total, pad_multiple, &padded))
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "pad_multiple = %" PRId64 ": the table's %" PRId64
                           " rows rounded up to a multiple of it overflow int64",
                           pad_multiple, total);
  *rows = padded;
  return INGOT_STATUS_SUCCESS;
}

/* ---- batch (ids, cu_seqlens, context) --------------------------------------- */

typedef struct batch_spans {
  ingot_span ids, cu, context;
} batch_spans;

static int64_t load_index(const void *p, ingot_dtype dtype, int64_t i) {
  return dtype == INGOT_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static ingot_status check_batch(struct ingot_context *ctx, const char *op,
                                const ingot_ngram_config *cfg, const ingot_tensor *ids,
                                const ingot_tensor *cu_seqlens, const ingot_tensor *context,
                                ingot_ngram_batch *batch, batch_spans *spans) {
  static const ingot_tensor_rule ids_rule = {"ids", 1, I32_OR_I64, 0};
  static const ingot_tensor_rule cu_rule = {"cu_seqlens", 1, I32_OR_I64, 0};
  static const ingot_tensor_rule context_rule = {"context", 2, I32_OR_I64, 1};
  ingot_status st = check_config(ctx, op, cfg);
  if (st) return st;
  if ((st = ingot_core_check_tensor(ctx, op, ids, &ids_rule, &spans->ids))) return st;
  if ((st = ingot_core_check_tensor(ctx, op, cu_seqlens, &cu_rule, &spans->cu))) return st;
  if (cu_seqlens->shape[0] < 1)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "cu_seqlens: shape[0] = 0, expected B + 1 >= 1");
  if ((st = ingot_core_check_tensor(ctx, op, context, &context_rule, &spans->context))) return st;
  int64_t B = cu_seqlens->shape[0] - 1;
  if ((st = ingot_core_check_dim(ctx, op, "context", context, 0, B, "B (cu_seqlens length - 1)")))
    return st;
  if ((st = ingot_core_check_dim(ctx, op, "context", context, 1, cfg->n - 1, "n - 1")))
    return st;
  if (context->dtype != ids->dtype)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "context: dtype %s differs from ids dtype %s",
                           ingot_dtype_name(context->dtype), ingot_dtype_name(ids->dtype));
  int64_t T = ids->shape[0];
  /* The CPU backend reads cu_seqlens here; CUDA kernels check it on the
   * device (no host read) and report through the context's error word. */
  if (ctx->backend == INGOT_BACKEND_CPU) {
    int64_t first = load_index(cu_seqlens->data, cu_seqlens->dtype, 0);
    if (first != 0)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "cu_seqlens: cu_seqlens[0] = %" PRId64 ", expected 0", first);
    int64_t prev = 0;
    for (int64_t b = 1; b <= B; b++) {
      int64_t v = load_index(cu_seqlens->data, cu_seqlens->dtype, b);
      if (v < prev)
        return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                               "cu_seqlens: cu_seqlens[%" PRId64 "] = %" PRId64
                               " < cu_seqlens[%" PRId64 "] = %" PRId64
                               " (must be non-decreasing)",
                               b, v, b - 1, prev);
      prev = v;
    }
    if (prev != T)
      return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                             "cu_seqlens: cu_seqlens[%" PRId64 "] = %" PRId64
                             ", expected T = %" PRId64 " (the length of ids)",
                             B, prev, T);
  }
  batch->ids = ids->data;
  batch->ids_dtype = ids->dtype;
  batch->num_tokens = T;
  batch->cu_seqlens = cu_seqlens->data;
  batch->cu_dtype = cu_seqlens->dtype;
  batch->num_requests = B;
  batch->context = context->data;
  batch->context_stride = context->stride[0];
  return INGOT_STATUS_SUCCESS;
}

static ingot_status check_table(struct ingot_context *ctx, const char *op,
                                const ingot_tensor *table, float scale,
                                ingot_ngram_table *out, ingot_span *span) {
  static const ingot_tensor_rule table_rule = {"table", 2, TABLE_DTYPES, 0};
  ingot_status st = ingot_core_check_tensor(ctx, op, table, &table_rule, span);
  if (st) return st;
  if (table->shape[1] < 1)
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "table: shape[1] = %" PRId64 ", expected D >= 1", table->shape[1]);
  if (!isfinite(scale))
    return ingot_core_fail(ctx, INGOT_STATUS_INVALID_ARGUMENT, op, "scale: %g is not finite",
                           (double)scale);
  out->data = table->data;
  out->dtype = table->dtype;
  out->num_rows = table->shape[0];
  out->dim = table->shape[1];
  out->stride = table->stride[0];
  out->scale = scale;
  return INGOT_STATUS_SUCCESS;
}

/* out [T, H*D] bf16 */
static ingot_status check_embedding_out(struct ingot_context *ctx, const char *op,
                                        const ingot_tensor *out, int64_t T, int64_t H,
                                        int64_t D, ingot_bf16_matrix *m, ingot_span *span) {
  static const ingot_tensor_rule out_rule = {"out", 2, INGOT_DTYPE_BIT(INGOT_DTYPE_BF16), 1};
  int64_t cols;
  ingot_status st = ingot_core_mul(ctx, op, "out: H * D", H, D, &cols);
  if (st) return st;
  if ((st = ingot_core_check_tensor(ctx, op, out, &out_rule, span))) return st;
  if ((st = ingot_core_check_dim(ctx, op, "out", out, 0, T, "T"))) return st;
  if ((st = ingot_core_check_dim(ctx, op, "out", out, 1, cols, "H * D"))) return st;
  m->data = (uint16_t *)out->data;
  m->stride = out->stride[0];
  return INGOT_STATUS_SUCCESS;
}

/* ---- ops ---------------------------------------------------------------------- */

ingot_status ingot_ngram_row_ids(ingot_context_t ctx, const ingot_ngram_config *cfg,
                                 const ingot_tensor *ids, const ingot_tensor *cu_seqlens,
                                 const ingot_tensor *context, const ingot_tensor *rows,
                                 struct CUstream_st *stream) {
  static const char op[] = "ingot_ngram_row_ids";
  static const ingot_tensor_rule rows_rule = {"rows", 2, INGOT_DTYPE_BIT(INGOT_DTYPE_I64), 1};
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  ingot_ngram_batch batch;
  batch_spans spans;
  ingot_span rows_span;
  if ((st = check_batch(ctx, op, cfg, ids, cu_seqlens, context, &batch, &spans))) return st;
  if ((st = ingot_core_check_tensor(ctx, op, rows, &rows_rule, &rows_span))) return st;
  if ((st = ingot_core_check_dim(ctx, op, "rows", rows, 0, batch.num_tokens, "T"))) return st;
  if ((st = ingot_core_check_dim(ctx, op, "rows", rows, 1, cfg->num_heads, "H"))) return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "rows", rows_span, "ids", spans.ids))) return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "rows", rows_span, "cu_seqlens", spans.cu)))
    return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "rows", rows_span, "context", spans.context)))
    return st;
  /* no early return for T = 0: the CUDA backend still checks cu_seqlens */
  ingot_ngram_rows r = {(int64_t *)rows->data, rows->stride[0]};
  return ctx->ops->ngram_row_ids(ctx, cfg, &batch, r, stream);
}

ingot_status ingot_ngram_commit_context(ingot_context_t ctx, const ingot_ngram_config *cfg,
                                        const ingot_tensor *ids, const ingot_tensor *cu_seqlens,
                                        const ingot_tensor *context,
                                        struct CUstream_st *stream) {
  static const char op[] = "ingot_ngram_commit_context";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  ingot_ngram_batch batch;
  batch_spans spans;
  if ((st = check_batch(ctx, op, cfg, ids, cu_seqlens, context, &batch, &spans))) return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "context", spans.context, "ids", spans.ids)))
    return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "context", spans.context, "cu_seqlens",
                                      spans.cu)))
    return st;
  /* no early return for B = 0 or T = 0: the CUDA backend still checks cu_seqlens */
  return ctx->ops->ngram_commit_context(ctx, cfg, &batch, stream);
}

ingot_status ingot_ngram_gather(ingot_context_t ctx, const ingot_tensor *rows,
                                const ingot_tensor *table, float scale, const ingot_tensor *out,
                                struct CUstream_st *stream) {
  static const char op[] = "ingot_ngram_gather";
  static const ingot_tensor_rule rows_rule = {"rows", 2, INGOT_DTYPE_BIT(INGOT_DTYPE_I64), 0};
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  ingot_span rows_span, table_span, out_span;
  ingot_ngram_table tab;
  ingot_bf16_matrix m;
  if ((st = ingot_core_check_tensor(ctx, op, rows, &rows_rule, &rows_span))) return st;
  if ((st = check_table(ctx, op, table, scale, &tab, &table_span))) return st;
  int64_t T = rows->shape[0], H = rows->shape[1];
  if ((st = check_embedding_out(ctx, op, out, T, H, tab.dim, &m, &out_span))) return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "out", out_span, "rows", rows_span))) return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "out", out_span, "table", table_span))) return st;
  if (T == 0 || H == 0) return INGOT_STATUS_SUCCESS;
  return ctx->ops->ngram_gather(ctx, (const int64_t *)rows->data, rows->stride[0], T, H, &tab, m,
                                stream);
}

ingot_status ingot_ngram_embed(ingot_context_t ctx, const ingot_ngram_config *cfg,
                               const ingot_tensor *ids, const ingot_tensor *cu_seqlens,
                               const ingot_tensor *context, const ingot_tensor *table,
                               float scale, const ingot_tensor *out,
                               struct CUstream_st *stream) {
  static const char op[] = "ingot_ngram_embed";
  ingot_status st = ingot_core_begin(ctx, op, stream);
  if (st) return st;
  ingot_ngram_batch batch;
  batch_spans spans;
  ingot_span table_span, out_span;
  ingot_ngram_table tab;
  ingot_bf16_matrix m;
  if ((st = check_batch(ctx, op, cfg, ids, cu_seqlens, context, &batch, &spans))) return st;
  if ((st = check_table(ctx, op, table, scale, &tab, &table_span))) return st;
  if ((st = check_embedding_out(ctx, op, out, batch.num_tokens, cfg->num_heads, tab.dim, &m,
                                &out_span)))
    return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "out", out_span, "ids", spans.ids))) return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "out", out_span, "cu_seqlens", spans.cu)))
    return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "out", out_span, "context", spans.context)))
    return st;
  if ((st = ingot_core_check_disjoint(ctx, op, "out", out_span, "table", table_span))) return st;
  /* no early return for T = 0: the CUDA backend still checks cu_seqlens */
  return ctx->ops->ngram_embed(ctx, cfg, &batch, &tab, m, stream);
}
