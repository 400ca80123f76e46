/*
 * `ingot bench` cases for the hashed n-gram embeddings (docs/ple.md):
 * ingot_ngram_row_ids, ingot_ngram_commit_context, ingot_ngram_gather and the
 * fused ingot_ngram_embed.
 *
 * Configs (ingot_ngram_config_derive, seed 1234, layer 0):
 *   toy       V=512, n=3, hpn=2 (H=4), base=1000, E=7 (the documented worked example)
 *   real      V=248320, n=3, hpn=8 (H=16), base=20000000, E=248044
 *   real-fit  the real V/n/hpn with base = R/H * 15/16, so that every row id
 *             falls inside the benchmark table (R rows) -- the real config's
 *             table (320001536 rows x 160 B = 51 GB) does not fit
 * Batches (int32 ids and cu_seqlens): decode B = 1, 8, 64, 256 (one token per
 * request) and prefill 1 x 512, 8 x 512, 1 x 4096 tokens. Ids are uniform in
 * [0, V) with 1 in 32 a boundary token; contexts likewise, and 1 request in 8
 * is fresh (all E).
 * Tables: fp8-e4m3, D = 160, random bytes without the NaN codes 0x7f/0xff,
 * scale 0.5; R = 2^24 rows (2.7 GB, far past L2) on the GPU, 2^20 on the CPU;
 * the toy config uses its own 4096-row table. "dev-table" lives in device
 * memory, "host-table" in pinned host memory (cudaHostAlloc) read over UVA;
 * "small-host-table" is a 2^21-row (335 MB) pinned table: random reads from
 * pinned host memory slow down ~4x once the table is much larger than that
 * (GPU address translation of host pages; measured on an H200, 2026-11-30).
 * Gather cases feed the real config's row ids taken modulo R.
 *
 * Host-table strategies (ingot_host_table_create; docs/ple.md, "Host
 * tables"): "host-table/<strategy>" and "small-host-table/<strategy>" gather
 * from a table of the same sizes allocated by one strategy (hugetlb-1g,
 * hugetlb-2m, thp, pinned) and registered with the GPU, at decode B = 64,
 * 256 and prefill 1 x 4096; "real-size-host-table/<strategy>" (only with
 * --large) from a table of the real configuration's 320001536 rows x 160 B
 * = 51.2 GB (47.7 GiB), whose row ids need no modulo. A strategy the machine
 * does not allow (no huge pages reserved, THP off) or a table larger than
 * MemAvailable skips its rows with the reason. The floor is the pinned
 * host-to-device copy rate measured at the start of the run (header line
 * "floors"); each row's note adds the copy rate from that very table and
 * how much of it huge pages back. One such table exists at a time.
 *
 * Every check is byte-identical (memcmp) against the CPU reference backend.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { OP_ROW_IDS, OP_COMMIT, OP_GATHER, OP_EMBED, OP_COUNT };
enum { CFG_TOY, CFG_REAL, CFG_FIT };
enum { TAB_NONE, TAB_DEVICE, TAB_HOST, TAB_HOST_SMALL, TAB_HOST_TABLE };
/* sizes of the TAB_HOST_TABLE cases */
enum { HT_BIG, HT_SMALL, HT_REAL };

static const char *const op_names[OP_COUNT] = {"row_ids", "commit_context", "gather", "embed"};
static const char *const cfg_names[] = {"toy", "real", "real-fit"};
static const char *const table_names[] = {"", "dev-table", "host-table", "small-host-table", ""};
static const char *const host_table_sizes[] = {"host-table", "small-host-table",
                                               "real-size-host-table"};

#define NGRAM_D 160
#define NGRAM_SCALE 0.5f
#define NGRAM_REAL_EOS INT64_C(248044)
#define NGRAM_TOY_EOS INT64_C(7)
#define NGRAM_BIG_ROWS_GPU (INT64_C(1) << 24)
#define NGRAM_BIG_ROWS_CPU (INT64_C(1) << 20)
/* 335 MB: small enough that the GPU's translation of pinned host pages keeps
 * up (random rows from a 2.7 GB host table read ~4x slower, measured) */
#define NGRAM_SMALL_ROWS_GPU (INT64_C(1) << 21)
#define NGRAM_SMALL_ROWS_CPU (INT64_C(1) << 18)

typedef struct ngram_params {
  int op, cfg, table;
  int32_t requests, tokens_per_request;
  int ht_size;          /* TAB_HOST_TABLE: HT_* */
  uint32_t ht_strategy; /* TAB_HOST_TABLE: one INGOT_HOST_TABLE_* bit */
} ngram_params;

/* ---- configs ---------------------------------------------------------------------- */

static int64_t vocab_of(int kind) { return kind == CFG_TOY ? 512 : 248320; }

static int make_config(bench_env *env, int kind, int64_t table_rows, ingot_ngram_config *cfg) {
  ingot_status st;
  if (kind == CFG_TOY)
    st = ingot_ngram_config_derive(512, 3, 2, 1000, 1234, 0, NGRAM_TOY_EOS, cfg);
  else if (kind == CFG_REAL)
    st = ingot_ngram_config_derive(248320, 3, 8, 20000000, 1234, 0, NGRAM_REAL_EOS, cfg);
  else
    st = ingot_ngram_config_derive(248320, 3, 8, table_rows / 16 * 15 / 16, 1234, 0,
                                   NGRAM_REAL_EOS, cfg);
  if (st) return bench_status(env, NULL, st, "ingot_ngram_config_derive");
  if (kind == CFG_FIT) {
    int64_t need = 0;
    if ((st = ingot_ngram_table_rows(cfg, 1, &need)))
      return bench_status(env, NULL, st, "ingot_ngram_table_rows");
    if (need > table_rows)
      return bench_fail(env, "real-fit config needs %" PRId64 " rows > table %" PRId64, need,
                        table_rows);
  }
  return BENCH_OK;
}

/* ---- tables (shared by the family's cases, allocated once per run) --------------------- */

typedef struct ngram_table {
  int64_t rows;
  uint8_t *host; /* pinned on the GPU (the host-table case and the reference) */
  void *dev;     /* device copy (GPU); == host on the CPU */
} ngram_table;

/* The one host table of the TAB_HOST_TABLE cases (size, strategy). */
typedef struct ngram_host_table {
  ingot_host_table_t table;
  int size;
  uint32_t strategy;
  int64_t rows;
  char note[160]; /* strategy, huge pages obtained, copy rate from it */
  int failed;     /* creation failed: the reason, for the other rows */
  int skip;
  char reason[400];
} ngram_host_table;

static struct {
  const bench_env *env;
  ngram_table big, toy, small;
  ngram_host_table ht;
  int at_end; /* release registered with bench_at_end */
} tables;

enum { TABLE_TOY, TABLE_BIG, TABLE_SMALL };

/* Random e4m3 bytes without the NaN codes S.1111.111 (0x7f, 0xff). */
static void fill_e4m3(bench_rng *rng, uint8_t *p, size_t n) {
  bench_rand_fill(rng, p, n);
  for (size_t i = 0; i < n; i++)
    if ((p[i] & 0x7f) == 0x7f) p[i] ^= 1;
}

static int get_table(bench_env *env, int which, int where, const ngram_table **out) {
  if (tables.env != env) memset(&tables, 0, sizeof tables), tables.env = env;
  ngram_table *t = which == TABLE_BIG ? &tables.big : which == TABLE_SMALL ? &tables.small : &tables.toy;
  if (t->host == NULL) {
    ingot_ngram_config toy;
    int64_t rows = env->cpu_mode ? NGRAM_BIG_ROWS_CPU : NGRAM_BIG_ROWS_GPU;
    if (which == TABLE_SMALL) rows = env->cpu_mode ? NGRAM_SMALL_ROWS_CPU : NGRAM_SMALL_ROWS_GPU;
    if (which == TABLE_TOY) {
      if (make_config(env, CFG_TOY, 0, &toy)) return BENCH_FAIL;
      ingot_status st = ingot_ngram_table_rows(&toy, 128, &rows);
      if (st) return bench_status(env, NULL, st, "ingot_ngram_table_rows");
    }
    size_t bytes = (size_t)rows * NGRAM_D;
    uint8_t *host = (uint8_t *)bench_alloc_run(env, BENCH_MEM_PINNED, bytes);
    if (host == NULL) return BENCH_SKIP; /* message set: not enough memory here */
    /* one random 16 MiB block, repeated: contents don't matter for speed */
    bench_rng rng = bench_rng_seed("ngram table", (uint64_t)rows);
    size_t block = bytes < ((size_t)16 << 20) ? bytes : ((size_t)16 << 20);
    fill_e4m3(&rng, host, block);
    for (size_t off = block; off < bytes; off += block)
      memcpy(host + off, host, bytes - off < block ? bytes - off : block);
    t->rows = rows;
    t->host = host;
  }
  if (where == TAB_DEVICE && t->dev == NULL) {
    if (env->cpu_mode) {
      t->dev = t->host;
    } else {
      size_t bytes = (size_t)t->rows * NGRAM_D;
      void *dev = bench_alloc_run(env, BENCH_MEM_DEVICE, bytes);
      if (dev == NULL) return BENCH_SKIP;
      if (bench_upload(env, dev, t->host, bytes)) return BENCH_FAIL;
      t->dev = dev;
    }
  }
  *out = t;
  return BENCH_OK;
}

/* ---- host tables by strategy (ingot_host_table_create) ------------------------------------ */

static void release_host_table(bench_env *env) {
  (void)env;
  ingot_host_table_destroy(tables.ht.table);
  memset(&tables.ht, 0, sizeof tables.ht);
}

/* MemAvailable of /proc/meminfo in bytes; -1 where unknown. */
static int64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  long long kb = -1;
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : (int64_t)kb * 1024;
}

static int64_t host_table_rows(bench_env *env, int size) {
  if (size == HT_REAL) {
    ingot_ngram_config real;
    int64_t rows = 0;
    if (make_config(env, CFG_REAL, 0, &real) ||
        ingot_ngram_table_rows(&real, 128, &rows) != INGOT_STATUS_SUCCESS)
      return -1;
    return rows; /* 320001536 */
  }
  if (size == HT_SMALL) return env->cpu_mode ? NGRAM_SMALL_ROWS_CPU : NGRAM_SMALL_ROWS_GPU;
  return env->cpu_mode ? NGRAM_BIG_ROWS_CPU : NGRAM_BIG_ROWS_GPU;
}

/* The table of (size, strategy), created on first use (the previous one is
 * destroyed first: a real-size table is 51 GB). */
static int get_host_table(bench_env *env, int size, uint32_t strategy,
                          const ngram_host_table **out) {
  ngram_host_table *h = &tables.ht;
  if (h->table == NULL && !h->failed) memset(h, 0, sizeof *h);
  if (h->size != size || h->strategy != strategy || (h->table == NULL && !h->failed)) {
    if (bench_sync(env)) return BENCH_FAIL;
    release_host_table(env);
    h->size = size;
    h->strategy = strategy;
    if (!tables.at_end) {
      if (bench_at_end(env, release_host_table)) return BENCH_FAIL;
      tables.at_end = 1;
    }
    int64_t rows = host_table_rows(env, size);
    if (rows < 1) return bench_fail(env, "the real configuration's table rows");
    int64_t bytes = rows * NGRAM_D, avail = mem_available();
    int hugetlb = strategy == INGOT_HOST_TABLE_HUGETLB_1G || strategy == INGOT_HOST_TABLE_HUGETLB_2M;
    /* hugetlb pages come from their reserved pool (outside MemAvailable;
     * the library names a pool that is too small) */
    if (!hugetlb && avail >= 0 && bytes + (INT64_C(4) << 30) > avail) {
      h->failed = h->skip = 1;
      snprintf(h->reason, sizeof h->reason,
               "a %.1f GB table needs %.1f GB of host memory with 4 GiB to spare; "
               "MemAvailable is %.1f GB",
               (double)bytes * 1e-9, (double)bytes * 1e-9, (double)avail * 1e-9);
    } else {
      double t0 = bench_now();
      ingot_status st = ingot_host_table_create(env->ctx, bytes, strategy, &h->table);
      if (st != INGOT_STATUS_SUCCESS) {
        h->failed = 1;
        h->skip = st == INGOT_STATUS_NOT_SUPPORTED || st == INGOT_STATUS_ALLOC_FAILED;
        snprintf(h->reason, sizeof h->reason, "%s: %s", ingot_status_name(st),
                 ingot_last_error(env->ctx));
      } else {
        double t_create = bench_now() - t0;
        uint8_t *p = (uint8_t *)ingot_host_table_data(h->table);
        size_t block = (size_t)16 << 20;
        if ((size_t)bytes < block) block = (size_t)bytes;
        bench_rng rng = bench_rng_seed("ngram table", (uint64_t)rows);
        fill_e4m3(&rng, p, block);
        for (size_t off = block; off < (size_t)bytes; off += block)
          memcpy(p + off, p, (size_t)bytes - off < block ? (size_t)bytes - off : block);
        int64_t huge = -1;
        if (ingot_host_table_huge_page_bytes(h->table, &huge)) huge = -1;
        double rate = 0;
        size_t probe = (size_t)bytes < ((size_t)512 << 20) ? (size_t)bytes : ((size_t)512 << 20);
        if (bench_h2d_rate(env, p, probe, &rate)) { /* later cases fail too, not with R = 0 */
          h->failed = 1;
          snprintf(h->reason, sizeof h->reason, "the copy-rate probe from this table failed");
          return BENCH_FAIL;
        }
        h->rows = rows;
        snprintf(h->note, sizeof h->note,
                 "%s table (created in %.1f s), %.3f of %.3f GB in huge pages, H2D copy from "
                 "it %.1f GB/s",
                 ingot_host_table_strategy_name(strategy), t_create, (double)huge * 1e-9,
                 (double)ingot_host_table_mapped_bytes(h->table) * 1e-9, rate * 1e-9);
        printf("  %s/%s: %s\n", host_table_sizes[size], ingot_host_table_strategy_name(strategy),
               h->note);
      }
    }
  }
  if (h->failed) {
    if (h->skip) return bench_skip(env, "%s", h->reason);
    return bench_fail(env, "%s", h->reason);
  }
  *out = h;
  return BENCH_OK;
}

/* ---- a case ------------------------------------------------------------------------------ */

typedef struct ngram_state {
  ngram_params p;
  ingot_ngram_config cfg;
  int64_t B, T, H, W, D, R; /* W = n - 1 */
  int slots;
  /* host copies of every slot's inputs: [slots][...] */
  int32_t *h_ids, *h_cu, *h_ctx;
  int64_t *h_rows;
  /* bench memory (device memory on the GPU), [slots][...] */
  int32_t *ids, *cu, *ctx;
  int64_t *rows;
  uint16_t *out;
  void *table;             /* what the op reads */
  const uint8_t *table_ref; /* host-visible copy for the reference */
} ngram_state;

static ingot_tensor t_ids(const ngram_state *s, int32_t *base, int slot) {
  return ingot_tensor_1d(base + (size_t)slot * (size_t)s->T, INGOT_DTYPE_I32, s->T);
}
static ingot_tensor t_cu(const ngram_state *s, int32_t *base, int slot) {
  return ingot_tensor_1d(base + (size_t)slot * (size_t)(s->B + 1), INGOT_DTYPE_I32, s->B + 1);
}
static ingot_tensor t_ctx(const ngram_state *s, int32_t *base, int slot) {
  return ingot_tensor_2d(base + (size_t)slot * (size_t)(s->B * s->W), INGOT_DTYPE_I32, s->B,
                         s->W, s->W);
}
static ingot_tensor t_rows(const ngram_state *s, int64_t *base, int slot) {
  return ingot_tensor_2d(base + (size_t)slot * (size_t)(s->T * s->H), INGOT_DTYPE_I64, s->T,
                         s->H, s->H);
}
static ingot_tensor t_out(const ngram_state *s, uint16_t *base, int slot) {
  int64_t cols = s->H * s->D;
  return ingot_tensor_2d(base + (size_t)slot * (size_t)(s->T * cols), INGOT_DTYPE_BF16, s->T,
                         cols, cols);
}
static ingot_tensor t_table(const ngram_state *s, const void *data) {
  return ingot_tensor_2d((void *)(uintptr_t)data, INGOT_DTYPE_F8_E4M3, s->R, s->D, s->D);
}

static size_t ids_bytes(const ngram_state *s) { return (size_t)s->T * 4; }
static size_t cu_bytes(const ngram_state *s) { return (size_t)(s->B + 1) * 4; }
static size_t ctx_bytes(const ngram_state *s) { return (size_t)(s->B * s->W) * 4; }
static size_t rows_bytes(const ngram_state *s) { return (size_t)(s->T * s->H) * 8; }
static size_t out_bytes(const ngram_state *s) { return (size_t)(s->T * s->H * s->D) * 2; }

static int32_t random_token(bench_rng *rng, int64_t vocab, int64_t eos) {
  if (bench_rand_below(rng, 32) == 0) return (int32_t)eos;
  return (int32_t)bench_rand_below(rng, (uint64_t)vocab);
}

/* The batch of slot `slot` in the host copies. */
static void fill_batch(ngram_state *s, bench_rng *rng, int slot) {
  int64_t V = vocab_of(s->p.cfg), E = s->cfg.boundary_token;
  int32_t *ids = s->h_ids + (size_t)slot * (size_t)s->T;
  int32_t *cu = s->h_cu + (size_t)slot * (size_t)(s->B + 1);
  int32_t *ctx = s->h_ctx + (size_t)slot * (size_t)(s->B * s->W);
  for (int64_t b = 0; b <= s->B; b++) cu[b] = (int32_t)(b * s->p.tokens_per_request);
  for (int64_t t = 0; t < s->T; t++) ids[t] = random_token(rng, V, E);
  for (int64_t b = 0; b < s->B; b++) {
    int fresh = bench_rand_below(rng, 8) == 0;
    for (int64_t j = 0; j < s->W; j++)
      ctx[b * s->W + j] = fresh ? (int32_t)E : random_token(rng, V, E);
  }
}

static int ngram_setup(bench_env *env, const void *params, void **state, bench_info *info) {
  const ngram_params *p = (const ngram_params *)params;
  ngram_state *s = (ngram_state *)bench_alloc(env, BENCH_MEM_HOST, sizeof *s);
  if (s == NULL) return BENCH_FAIL;
  memset(s, 0, sizeof *s);
  s->p = *p;
  s->B = p->requests;
  s->T = (int64_t)p->requests * p->tokens_per_request;
  s->D = NGRAM_D;

  const ngram_table *tab = NULL;
  const ngram_host_table *ht = NULL;
  if (p->table == TAB_HOST_TABLE) {
    int r = get_host_table(env, p->ht_size, p->ht_strategy, &ht);
    if (r) return r;
    s->R = ht->rows;
    s->table = ingot_host_table_data(ht->table);
    s->table_ref = (const uint8_t *)s->table;
  } else if (p->table != TAB_NONE) {
    int which = p->cfg == CFG_TOY ? TABLE_TOY : p->table == TAB_HOST_SMALL ? TABLE_SMALL : TABLE_BIG;
    int r = get_table(env, which, p->table, &tab);
    if (r) return r;
    s->R = tab->rows;
    s->table = p->table == TAB_DEVICE ? tab->dev : (void *)tab->host;
    s->table_ref = tab->host;
  }
  if (make_config(env, p->cfg, s->R, &s->cfg)) return BENCH_FAIL;
  s->H = s->cfg.num_heads;
  s->W = s->cfg.n - 1;

  /* ---- what one call must move, and how many input sets to rotate ---- */
  double in = (double)(ids_bytes(s) + cu_bytes(s) + ctx_bytes(s));
  double table_bytes = (double)(s->T * s->H * s->D); /* e4m3: 1 byte per value */
  double slot_bytes = 0;
  switch (p->op) {
    case OP_ROW_IDS:
      info->bytes_device = in + (double)rows_bytes(s);
      slot_bytes = info->bytes_device;
      snprintf(info->floor_note, sizeof info->floor_note,
               "ids + cu_seqlens + context read, rows [T,H] i64 written");
      break;
    case OP_COMMIT:
      info->bytes_device = (double)cu_bytes(s) + 2.0 * (double)ctx_bytes(s);
      slot_bytes = in;
      snprintf(info->floor_note, sizeof info->floor_note,
               "cu_seqlens read, B*(n-1) tokens read and written");
      break;
    case OP_GATHER:
    case OP_EMBED: {
      double other = (p->op == OP_GATHER ? (double)rows_bytes(s) : in) + (double)out_bytes(s);
      slot_bytes = other;
      if (p->table == TAB_HOST || p->table == TAB_HOST_SMALL || p->table == TAB_HOST_TABLE) {
        info->bytes_host = table_bytes;
        info->bytes_device = other;
      } else {
        info->bytes_device = other + table_bytes;
      }
      if (p->table == TAB_HOST_TABLE)
        snprintf(info->floor_note, sizeof info->floor_note,
                 "rows i64 read, T*H*D bytes over the pinned H2D rate, out bf16 written; "
                 "table e4m3 [%" PRId64 ", %" PRId64 "]: %s",
                 s->R, s->D, ht->note);
      else
        snprintf(info->floor_note, sizeof info->floor_note,
                 "%s read, T*H*D table bytes read from %s, out [T,H*D] bf16 written; "
                 "table e4m3 [%" PRId64 ", %" PRId64 "]",
                 p->op == OP_GATHER ? "rows i64" : "ids + cu_seqlens + context",
                 p->table == TAB_DEVICE ? "device memory" : "pinned host memory (H2D rate)",
                 s->R, s->D);
      break;
    }
    default: return bench_fail(env, "unknown op %d", p->op);
  }
  s->slots = bench_slots_for(env, slot_bytes);
  info->slots = s->slots;

  /* ---- inputs: host copies, then bench memory ---- */
  size_t S = (size_t)s->slots;
  s->h_ids = (int32_t *)bench_alloc(env, BENCH_MEM_HOST, S * ids_bytes(s));
  s->h_cu = (int32_t *)bench_alloc(env, BENCH_MEM_HOST, S * cu_bytes(s));
  s->h_ctx = (int32_t *)bench_alloc(env, BENCH_MEM_HOST, S * ctx_bytes(s));
  s->ids = (int32_t *)bench_alloc(env, BENCH_MEM_DEVICE, S * ids_bytes(s));
  s->cu = (int32_t *)bench_alloc(env, BENCH_MEM_DEVICE, S * cu_bytes(s));
  s->ctx = (int32_t *)bench_alloc(env, BENCH_MEM_DEVICE, S * ctx_bytes(s));
  if (!s->h_ids || !s->h_cu || !s->h_ctx || !s->ids || !s->cu || !s->ctx) return BENCH_SKIP;
  bench_rng rng = bench_rng_seed(op_names[p->op], (uint64_t)s->T * 1000003u + (uint64_t)s->B);
  for (int i = 0; i < s->slots; i++) fill_batch(s, &rng, i);
  if (bench_upload(env, s->ids, s->h_ids, S * ids_bytes(s)) ||
      bench_upload(env, s->cu, s->h_cu, S * cu_bytes(s)) ||
      bench_upload(env, s->ctx, s->h_ctx, S * ctx_bytes(s)))
    return BENCH_FAIL;

  if (p->op == OP_ROW_IDS || p->op == OP_GATHER) {
    s->rows = (int64_t *)bench_alloc(env, BENCH_MEM_DEVICE, S * rows_bytes(s));
    if (s->rows == NULL) return BENCH_SKIP;
  }
  if (p->op == OP_GATHER) {
    /* the real config's row ids (computed by the reference), modulo R */
    ingot_ngram_config real;
    if (make_config(env, CFG_REAL, 0, &real)) return BENCH_FAIL;
    s->h_rows = (int64_t *)bench_alloc(env, BENCH_MEM_HOST, S * rows_bytes(s));
    if (s->h_rows == NULL) return BENCH_SKIP;
    for (int i = 0; i < s->slots; i++) {
      ingot_tensor ids = t_ids(s, s->h_ids, i), cu = t_cu(s, s->h_cu, i);
      ingot_tensor ctx = t_ctx(s, s->h_ctx, i), rows = t_rows(s, s->h_rows, i);
      ingot_status st = ingot_ngram_row_ids(env->ref, p->cfg == CFG_TOY ? &s->cfg : &real, &ids,
                                            &cu, &ctx, &rows, NULL);
      if (st) return bench_status(env, env->ref, st, "reference row ids for the gather");
    }
    for (size_t k = 0; k < S * (size_t)(s->T * s->H); k++) s->h_rows[k] %= s->R;
    if (bench_upload(env, s->rows, s->h_rows, S * rows_bytes(s))) return BENCH_FAIL;
  }
  if (p->op == OP_GATHER || p->op == OP_EMBED) {
    s->out = (uint16_t *)bench_alloc(env, BENCH_MEM_DEVICE, S * out_bytes(s));
    if (s->out == NULL) return BENCH_SKIP;
  }
  *state = s;
  return BENCH_OK;
}

static ingot_status ngram_run(bench_env *env, void *state, int slot) {
  ngram_state *s = (ngram_state *)state;
  ingot_tensor ids = t_ids(s, s->ids, slot), cu = t_cu(s, s->cu, slot);
  ingot_tensor ctx = t_ctx(s, s->ctx, slot);
  switch (s->p.op) {
    case OP_ROW_IDS: {
      ingot_tensor rows = t_rows(s, s->rows, slot);
      return ingot_ngram_row_ids(env->ctx, &s->cfg, &ids, &cu, &ctx, &rows, env->stream);
    }
    case OP_COMMIT:
      return ingot_ngram_commit_context(env->ctx, &s->cfg, &ids, &cu, &ctx, env->stream);
    case OP_GATHER: {
      ingot_tensor rows = t_rows(s, s->rows, slot), tab = t_table(s, s->table);
      ingot_tensor out = t_out(s, s->out, slot);
      return ingot_ngram_gather(env->ctx, &rows, &tab, NGRAM_SCALE, &out, env->stream);
    }
    case OP_EMBED: {
      ingot_tensor tab = t_table(s, s->table), out = t_out(s, s->out, slot);
      return ingot_ngram_embed(env->ctx, &s->cfg, &ids, &cu, &ctx, &tab, NGRAM_SCALE, &out,
                               env->stream);
    }
    default: return INGOT_STATUS_INTERNAL;
  }
}

/* Slot 0 on the backend under test vs the CPU reference on the host copies. */
static int ngram_check(bench_env *env, void *state) {
  ngram_state *s = (ngram_state *)state;
  ingot_tensor ids = t_ids(s, s->h_ids, 0), cu = t_cu(s, s->h_cu, 0);
  ingot_tensor ctx = t_ctx(s, s->h_ctx, 0);
  const char *what = op_names[s->p.op];
  size_t bytes = 0, elem = 0;
  void *got = NULL, *want = NULL;
  ingot_status st;
  int r;

  switch (s->p.op) {
    case OP_ROW_IDS: bytes = rows_bytes(s), elem = 8; break;
    case OP_COMMIT: bytes = ctx_bytes(s), elem = 4; break;
    default: bytes = out_bytes(s), elem = 2; break;
  }
  got = bench_alloc(env, BENCH_MEM_HOST, bytes);
  want = bench_alloc(env, BENCH_MEM_HOST, bytes);
  if (got == NULL || want == NULL) return BENCH_FAIL;

  /* ---- backend under test ---- */
  if (s->p.op == OP_COMMIT && (r = bench_upload(env, s->ctx, s->h_ctx, ctx_bytes(s))))
    return r; /* fresh context: run() commits in place */
  if ((r = bench_status(env, env->ctx, ngram_run(env, s, 0), what))) return r;
  const void *result = s->p.op == OP_ROW_IDS  ? (const void *)s->rows
                       : s->p.op == OP_COMMIT ? (const void *)s->ctx
                                              : (const void *)s->out;
  if ((r = bench_download(env, got, result, bytes))) return r;

  /* ---- reference ---- */
  switch (s->p.op) {
    case OP_ROW_IDS: {
      ingot_tensor rows = ingot_tensor_2d(want, INGOT_DTYPE_I64, s->T, s->H, s->H);
      st = ingot_ngram_row_ids(env->ref, &s->cfg, &ids, &cu, &ctx, &rows, NULL);
      break;
    }
    case OP_COMMIT: {
      memcpy(want, s->h_ctx, bytes);
      ingot_tensor c = ingot_tensor_2d(want, INGOT_DTYPE_I32, s->B, s->W, s->W);
      st = ingot_ngram_commit_context(env->ref, &s->cfg, &ids, &cu, &c, NULL);
      break;
    }
    case OP_GATHER: {
      ingot_tensor rows = t_rows(s, s->h_rows, 0), tab = t_table(s, s->table_ref);
      ingot_tensor out = ingot_tensor_2d(want, INGOT_DTYPE_BF16, s->T, s->H * s->D, s->H * s->D);
      st = ingot_ngram_gather(env->ref, &rows, &tab, NGRAM_SCALE, &out, NULL);
      break;
    }
    default: {
      ingot_tensor tab = t_table(s, s->table_ref);
      ingot_tensor out = ingot_tensor_2d(want, INGOT_DTYPE_BF16, s->T, s->H * s->D, s->H * s->D);
      st = ingot_ngram_embed(env->ref, &s->cfg, &ids, &cu, &ctx, &tab, NGRAM_SCALE, &out, NULL);
      break;
    }
  }
  if ((r = bench_status(env, env->ref, st, "reference"))) return r;
  return bench_compare_bytes(env, what, got, want, bytes, elem);
}

static const bench_ops ngram_ops = {ngram_setup, ngram_run, ngram_check, NULL};

/* ---- registration ------------------------------------------------------------------------------ */

static void add(bench_registry *reg, int op, int cfg, int table, int32_t requests,
                int32_t tokens_per_request) {
  ngram_params p = {op, cfg, table, requests, tokens_per_request, 0, 0};
  char name[160];
  int heads = cfg == CFG_TOY ? 4 : 16;
  int32_t T = requests * tokens_per_request;
  const char *shape = tokens_per_request == 1 ? "decode" : "prefill";
  if (table == TAB_NONE)
    snprintf(name, sizeof name, "%s H=%d %s B=%d T=%d", cfg_names[cfg], heads, shape,
             (int)requests, (int)T);
  else
    snprintf(name, sizeof name, "%s H=%d D=%d %s %s B=%d T=%d", cfg_names[cfg], heads, NGRAM_D,
             table_names[table], shape, (int)requests, (int)T);
  bench_add(reg, "ngram", op_names[op], name, &ngram_ops, &p, sizeof p);
}

static void add_shapes(bench_registry *reg, int op, int cfg, int table) {
  static const int32_t decode[] = {1, 8, 64, 256};
  for (size_t i = 0; i < sizeof decode / sizeof decode[0]; i++)
    add(reg, op, cfg, table, decode[i], 1);
  add(reg, op, cfg, table, 1, 512);
  add(reg, op, cfg, table, 8, 512);
  add(reg, op, cfg, table, 1, 4096);
}

/* Gathers from a host table of one size and strategy: decode B = 64, 256 and
 * prefill 1 x 4096 (65536 rows), the real config's row ids. */
static void add_host_table_rows(bench_registry *reg, int size, uint32_t strategy) {
  static const int32_t shapes[][2] = {{64, 1}, {256, 1}, {1, 4096}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    ngram_params p = {OP_GATHER, CFG_REAL, TAB_HOST_TABLE, shapes[i][0], shapes[i][1], size,
                      strategy};
    char name[160];
    int32_t T = shapes[i][0] * shapes[i][1];
    snprintf(name, sizeof name, "real H=16 D=%d %s/%s %s B=%d T=%d", NGRAM_D,
             host_table_sizes[size], ingot_host_table_strategy_name(strategy),
             shapes[i][1] == 1 ? "decode" : "prefill", (int)shapes[i][0], (int)T);
    if (size == HT_REAL)
      bench_add_large(reg, "ngram", op_names[OP_GATHER], name, &ngram_ops, &p, sizeof p);
    else
      bench_add(reg, "ngram", op_names[OP_GATHER], name, &ngram_ops, &p, sizeof p);
  }
}

void bench_ngram_register(bench_registry *reg) {
  add_shapes(reg, OP_ROW_IDS, CFG_TOY, TAB_NONE);
  add_shapes(reg, OP_ROW_IDS, CFG_REAL, TAB_NONE);
  add_shapes(reg, OP_COMMIT, CFG_TOY, TAB_NONE);
  add_shapes(reg, OP_COMMIT, CFG_REAL, TAB_NONE);
  add_shapes(reg, OP_GATHER, CFG_TOY, TAB_DEVICE);
  add_shapes(reg, OP_GATHER, CFG_REAL, TAB_DEVICE);
  add_shapes(reg, OP_GATHER, CFG_REAL, TAB_HOST);
  add_shapes(reg, OP_GATHER, CFG_REAL, TAB_HOST_SMALL);
  add_shapes(reg, OP_EMBED, CFG_TOY, TAB_DEVICE);
  add_shapes(reg, OP_EMBED, CFG_FIT, TAB_DEVICE);
  add_shapes(reg, OP_EMBED, CFG_FIT, TAB_HOST);
  add_shapes(reg, OP_EMBED, CFG_FIT, TAB_HOST_SMALL);
  /* grouped by table, so that each is created once */
  static const uint32_t strategies[] = {INGOT_HOST_TABLE_HUGETLB_1G, INGOT_HOST_TABLE_HUGETLB_2M,
                                        INGOT_HOST_TABLE_THP, INGOT_HOST_TABLE_PINNED};
  for (int size = HT_BIG; size <= HT_REAL; size++)
    for (size_t i = 0; i < sizeof strategies / sizeof strategies[0]; i++)
      add_host_table_rows(reg, size, strategies[i]);
}
