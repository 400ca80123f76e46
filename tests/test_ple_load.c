/*
 * ingot_ngram_table_load / ingot_ngram_table_probe on small synthetic
 * checkpoints written here: shards spread over several files in shuffled
 * order must load byte for byte as their concatenation; every broken set is
 * refused with the error that names it and leaves the destination
 * untouched; a read that fails midway zeroes what was written.
 */
#define _XOPEN_SOURCE 700

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

#define MAX_TENSORS 48
#define MAX_FILES 6
#define CANARY 0xa5
#define SLACK 64 /* bytes past the table that must stay untouched */

typedef struct {
  char name[160];
  char dtype[16];
  int ndim;
  uint64_t shape[3];
  unsigned char *data;
  size_t bytes;
  int file;
} spec_tensor;

/* A checkpoint before it is written: tensors in file order. */
typedef struct {
  spec_tensor t[MAX_TENSORS];
  int nt, num_files;
  int64_t rows, dim;
  unsigned char *table; /* the shards concatenated */
  float scale;
} ckpt;

static char base_dir[64];
static int case_counter;

static void add_tensor(ckpt *c, const char *name, const char *dtype, int ndim,
                       const uint64_t *shape, size_t elem_bytes, int file) {
  spec_tensor *t = &c->t[c->nt++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
  t->ndim = ndim;
  t->bytes = elem_bytes;
  for (int d = 0; d < ndim; d++) t->shape[d] = shape[d], t->bytes *= (size_t)shape[d];
  t->data = malloc(t->bytes ? t->bytes : 1);
  for (size_t i = 0; i < t->bytes; i++) t->data[i] = (unsigned char)test_rand();
  t->file = file;
}

static int find_tensor(const ckpt *c, const char *name) {
  for (int i = 0; i < c->nt; i++)
    if (strcmp(c->t[i].name, name) == 0) return i;
  return -1;
}

static void remove_tensor(ckpt *c, int i) {
  free(c->t[i].data);
  memmove(&c->t[i], &c->t[i + 1], sizeof c->t[0] * (size_t)(c->nt - i - 1));
  c->nt--;
}

static void set_scale(ckpt *c, const char *dtype, int ndim, float value) {
  int i = find_tensor(c, "model.ngram_embedding.weight_scale");
  spec_tensor *t = &c->t[i];
  uint32_t bits;
  memcpy(&bits, &value, 4);
  snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
  t->ndim = ndim;
  t->shape[0] = 1;
  if (strcmp(dtype, "BF16") == 0) {
    t->bytes = 2;
    t->data[0] = (unsigned char)(bits >> 16), t->data[1] = (unsigned char)(bits >> 24);
  } else {
    t->bytes = 4;
    for (int b = 0; b < 4; b++) t->data[b] = (unsigned char)(bits >> (8 * b));
  }
}

/* A good checkpoint of `shards` shards of D = dim bytes over `files` files,
 * prefix "model.", in shuffled order, with an unrelated tensor and an
 * ignored one under the prefix. */
static void make_good(ckpt *c, int shards, int64_t dim, int files) {
  memset(c, 0, sizeof *c);
  c->num_files = files;
  c->dim = dim;
  uint64_t rows[32];
  for (int k = 0; k < shards; k++) {
    rows[k] = (uint64_t)test_rand_range(k == 0 ? 1 : 0, 40); /* an empty shard is allowed */
    c->rows += (int64_t)rows[k];
  }
  c->table = malloc((size_t)(c->rows * dim));
  size_t at = 0;
  for (int k = 0; k < shards; k++) {
    char name[64];
    snprintf(name, sizeof name, "model.ngram_embedding.shard_%d.weight", k);
    uint64_t shape[2] = {rows[k], (uint64_t)dim};
    add_tensor(c, name, "F8_E4M3", 2, shape, 1, (int)test_rand_range(0, files - 1));
    memcpy(c->table + at, c->t[c->nt - 1].data, c->t[c->nt - 1].bytes);
    at += c->t[c->nt - 1].bytes;
  }
  uint64_t one[1] = {1}, other[2] = {3, 4};
  add_tensor(c, "model.ngram_embedding.weight_scale", "F32", 0, one, 4,
             (int)test_rand_range(0, files - 1));
  c->scale = (float)test_rand_range(1, 1000) / 1024.0f;
  set_scale(c, "F32", 0, c->scale);
  add_tensor(c, "model.embed_tokens.weight", "F32", 2, other, 4, (int)test_rand_range(0, files - 1));
  add_tensor(c, "model.ngram_embedding.norm", "F32", 1, other, 4, (int)test_rand_range(0, files - 1));
  for (int i = c->nt - 1; i > 0; i--) { /* shuffle: no file holds the shards in order */
    int j = (int)test_rand_range(0, i);
    spec_tensor tmp = c->t[i];
    c->t[i] = c->t[j];
    c->t[j] = tmp;
  }
}

static void free_ckpt(ckpt *c) {
  for (int i = 0; i < c->nt; i++) free(c->t[i].data);
  free(c->table);
}

/* Writes the files into a new directory: paths[f] = <dir>/part-<f>.safetensors. */
static int write_ckpt(const ckpt *c, char dir[128], char paths[MAX_FILES][192]) {
  snprintf(dir, 128, "%s/case-%d", base_dir, case_counter++);
  if (mkdir(dir, 0700) != 0) return -1;
  for (int f = 0; f < c->num_files; f++) {
    char header[8192];
    size_t len = (size_t)snprintf(header, sizeof header, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < c->nt; i++) {
      const spec_tensor *t = &c->t[i];
      if (t->file != f) continue;
      len += (size_t)snprintf(header + len, sizeof header - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                              t->name, t->dtype);
      for (int d = 0; d < t->ndim; d++)
        len += (size_t)snprintf(header + len, sizeof header - len, "%s%llu", d ? "," : "",
                                (unsigned long long)t->shape[d]);
      len += (size_t)snprintf(header + len, sizeof header - len,
                              "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                              (unsigned long long)(off + t->bytes));
      off += t->bytes;
    }
    len += (size_t)snprintf(header + len, sizeof header - len, "}");
    while (len % 8) header[len++] = ' ';
    snprintf(paths[f], 192, "%s/part-%d.safetensors", dir, f);
    FILE *fp = fopen(paths[f], "wb");
    if (fp == NULL) return -1;
    unsigned char len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)len >> (8 * b));
    fwrite(len8, 1, 8, fp);
    fwrite(header, 1, len, fp);
    for (int i = 0; i < c->nt; i++)
      if (c->t[i].file == f) fwrite(c->t[i].data, 1, c->t[i].bytes, fp);
    if (fclose(fp) != 0) return -1;
  }
  return 0;
}

static unsigned char *canary_buffer(size_t bytes) {
  unsigned char *p = malloc(bytes + SLACK);
  memset(p, CANARY, bytes + SLACK);
  return p;
}

static int untouched(const unsigned char *p, size_t bytes) {
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != CANARY) return 0;
  return 1;
}

static const char *const *as_paths(char paths[MAX_FILES][192], const char *list[MAX_FILES],
                                   int n) {
  for (int f = 0; f < n; f++) list[f] = paths[f];
  return list;
}

/* ---- good sets ------------------------------------------------------------------------------ */

typedef struct {
  int calls;
  int64_t last, total;
  int monotonic;
} progress_log;

static void log_progress(int64_t done, int64_t total, void *user) {
  progress_log *p = user;
  if (p->calls == 0 && done != 0) p->monotonic = 0;
  if (done < p->last || done > total) p->monotonic = 0;
  p->calls++;
  p->last = done;
  p->total = total;
}

static int test_good_sets(void) {
  for (int iter = 0; iter < 12; iter++) {
    ckpt c;
    int files = (int)test_rand_range(1, 4);
    make_good(&c, (int)test_rand_range(1, 9), test_rand_range(1, 40), files);
    char dir[128], paths[MAX_FILES][192];
    const char *list[MAX_FILES];
    REQUIRE(write_ckpt(&c, dir, paths) == 0, "writing the files");
    size_t bytes = (size_t)(c.rows * c.dim);
    for (int how = 0; how < 3; how++) { /* prefix given, found, and the directory */
      unsigned char *dst = canary_buffer(bytes);
      float scale = -1.0f;
      progress_log log = {0, 0, 0, 1};
      const char *dir_list[1] = {dir};
      ingot_status st =
          how < 2 ? ingot_ngram_table_load(as_paths(paths, list, files), files,
                                           how == 0 ? "model." : NULL, c.rows, c.dim, dst,
                                           (int64_t)bytes + SLACK, &scale, log_progress, &log)
                  : ingot_ngram_table_load(dir_list, 1, NULL, c.rows, c.dim, dst,
                                           (int64_t)bytes + SLACK, &scale, log_progress, &log);
      EXPECT_OK(NULL, st);
      EXPECT(memcmp(dst, c.table, bytes) == 0, "iter %d how %d: the table differs", iter, how);
      EXPECT(untouched(dst + bytes, SLACK), "iter %d: bytes past the table written", iter);
      EXPECT(scale == c.scale, "scale %g, expected %g", (double)scale, (double)c.scale);
      EXPECT(log.calls >= 2 && log.monotonic && log.last == (int64_t)bytes &&
                 log.total == (int64_t)bytes,
             "progress: %d calls, last %lld of %lld", log.calls, (long long)log.last,
             (long long)log.total);
      free(dst);
    }
    int64_t rows = 0, dim = 0;
    int32_t shards = 0;
    float scale = 0.0f;
    EXPECT_OK(NULL, ingot_ngram_table_probe(as_paths(paths, list, files), files, NULL, &rows,
                                            &dim, &shards, &scale));
    EXPECT(rows == c.rows && dim == c.dim && scale == c.scale, "probe: %lld x %lld, %g",
           (long long)rows, (long long)dim, (double)scale);
    free_ckpt(&c);
  }
  return 0;
}

static int test_bf16_scale_and_no_prefix(void) {
  ckpt c;
  make_good(&c, 3, 16, 2);
  set_scale(&c, "BF16", 1, 0.375f); /* shape [1] */
  for (int i = 0; i < c.nt; i++) /* prefix "" */
    if (strncmp(c.t[i].name, "model.", 6) == 0) memmove(c.t[i].name, c.t[i].name + 6, strlen(c.t[i].name) - 5);
  char dir[128], paths[MAX_FILES][192];
  const char *list[MAX_FILES];
  REQUIRE(write_ckpt(&c, dir, paths) == 0, "writing the files");
  size_t bytes = (size_t)(c.rows * c.dim);
  for (int how = 0; how < 2; how++) {
    unsigned char *dst = canary_buffer(bytes);
    float scale = 0.0f;
    EXPECT_OK(NULL, ingot_ngram_table_load(as_paths(paths, list, 2), 2, how ? "" : NULL, c.rows,
                                           c.dim, dst, (int64_t)bytes, &scale, NULL, NULL));
    EXPECT(memcmp(dst, c.table, bytes) == 0 && scale == 0.375f, "bf16 scale %g", (double)scale);
    free(dst);
  }
  free_ckpt(&c);
  return 0;
}

/* ---- broken sets ---------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  void (*mutate)(ckpt *c);
  const char *prefix;      /* NULL: find it */
  int64_t rows_delta;      /* expected_rows = rows + delta */
  int64_t dst_short;       /* dst_bytes = table bytes - this */
  int truncate_file;       /* > 0: cut that many bytes off the file holding shard_0 */
  const char *needle;      /* in the error text */
} broken_case;

static void drop_shard_3(ckpt *c) { remove_tensor(c, find_tensor(c, "model.ngram_embedding.shard_3.weight")); }
static void duplicate_shard_2(ckpt *c) {
  const spec_tensor *t = &c->t[find_tensor(c, "model.ngram_embedding.shard_2.weight")];
  add_tensor(c, t->name, "F8_E4M3", 2, t->shape, 1, (t->file + 1) % c->num_files);
}
static void shard_1_u8(ckpt *c) {
  snprintf(c->t[find_tensor(c, "model.ngram_embedding.shard_1.weight")].dtype, 16, "U8");
}
static void shard_4_wider(ckpt *c) {
  spec_tensor *t = &c->t[find_tensor(c, "model.ngram_embedding.shard_4.weight")];
  uint64_t shape[2] = {t->shape[0] ? t->shape[0] : 1, t->shape[1] + 1};
  int file = t->file;
  remove_tensor(c, (int)(t - c->t));
  add_tensor(c, "model.ngram_embedding.shard_4.weight", "F8_E4M3", 2, shape, 1, file);
}
static void shard_0_3d(ckpt *c) {
  spec_tensor *t = &c->t[find_tensor(c, "model.ngram_embedding.shard_0.weight")];
  t->ndim = 3, t->shape[2] = t->shape[1], t->shape[1] = 1;
}
static void drop_scale(ckpt *c) { remove_tensor(c, find_tensor(c, "model.ngram_embedding.weight_scale")); }
static void scale_nan(ckpt *c) { set_scale(c, "F32", 0, NAN); }
static void scale_two(ckpt *c) {
  int i = find_tensor(c, "model.ngram_embedding.weight_scale");
  uint64_t shape[1] = {2};
  int file = c->t[i].file;
  remove_tensor(c, i);
  add_tensor(c, "model.ngram_embedding.weight_scale", "F32", 1, shape, 4, file);
}
static void scale_f16(ckpt *c) {
  set_scale(c, "BF16", 0, 1.0f);
  snprintf(c->t[find_tensor(c, "model.ngram_embedding.weight_scale")].dtype, 16, "F16");
}
static void leading_zero_name(ckpt *c) {
  snprintf(c->t[find_tensor(c, "model.ngram_embedding.shard_5.weight")].name, 160,
           "model.ngram_embedding.shard_05.weight");
}
static void second_table(ckpt *c) {
  uint64_t shape[2] = {2, (uint64_t)c->dim};
  add_tensor(c, "model.layers.1.ngram_embedding.shard_0.weight", "F8_E4M3", 2, shape, 1, 0);
}
static void nothing(ckpt *c) { (void)c; }

static const broken_case broken[] = {
    {"missing shard", drop_shard_3, "model.", 0, 0, 0, "shard_3 is missing"},
    {"missing shard, prefix found", drop_shard_3, NULL, 0, 0, 0, "shard_3 is missing"},
    {"duplicate shard", duplicate_shard_2, NULL, 0, 0, 0, "shard_2 appears twice"},
    {"wrong dtype", shard_1_u8, NULL, 0, 0, 0, "shard_1.weight': dtype U8"},
    {"wrong D", shard_4_wider, NULL, 0, 0, 0, "but row_bytes = "},
    {"3-D shard", shard_0_3d, NULL, 0, 0, 0, "is not 2-D"},
    {"rows one more", nothing, NULL, 1, 0, 0, "(-1)"},
    {"rows one fewer", nothing, NULL, -1, 0, 0, "(+1)"},
    {"missing weight_scale", drop_scale, NULL, 0, 0, 0, "no tensor 'model.ngram_embedding.weight_scale'"},
    {"NaN weight_scale", scale_nan, NULL, 0, 0, 0, "scale is NaN"},
    {"weight_scale of two", scale_two, NULL, 0, 0, 0, "must be [] or [1]"},
    {"F16 weight_scale", scale_f16, NULL, 0, 0, 0, "must be F32 or BF16"},
    {"truncated file", nothing, NULL, 0, 0, 5, "truncated"},
    {"bad prefix", nothing, "other.", 0, 0, 0, "no tensor 'other.ngram_embedding.shard_0.weight'"},
    {"prefix without its dot", nothing, "model", 0, 0, 0, "no tensor 'modelngram_embedding."},
    {"two prefixes", second_table, NULL, 0, 0, 0, "shards of two tables"},
    {"leading zero", leading_zero_name, NULL, 0, 0, 0, "shard_05.weight' is not a shard name"},
    {"dst too small", nothing, NULL, 0, 1, 0, "dst_bytes"},
};

static int test_broken_sets(void) {
  for (size_t k = 0; k < sizeof broken / sizeof broken[0]; k++) {
    const broken_case *b = &broken[k];
    ckpt c;
    int files = (int)test_rand_range(2, 4);
    make_good(&c, 6, 24, files);
    b->mutate(&c);
    char dir[128], paths[MAX_FILES][192];
    const char *list[MAX_FILES];
    REQUIRE(write_ckpt(&c, dir, paths) == 0, "writing the files");
    if (b->truncate_file > 0) {
      const spec_tensor *t = &c.t[find_tensor(&c, "model.ngram_embedding.shard_0.weight")];
      struct stat st;
      REQUIRE(stat(paths[t->file], &st) == 0 &&
                  truncate(paths[t->file], st.st_size - b->truncate_file) == 0,
              "truncating");
    }
    int64_t rows = c.rows + b->rows_delta;
    size_t bytes = (size_t)((rows > c.rows ? rows : c.rows) * c.dim);
    unsigned char *dst = canary_buffer(bytes);
    float scale = -7.0f;
    ingot_status st = ingot_ngram_table_load(as_paths(paths, list, files), files, b->prefix, rows,
                                             c.dim, dst, rows * c.dim - b->dst_short, &scale,
                                             NULL, NULL);
    const char *msg = ingot_last_error(NULL);
    EXPECT(st == INGOT_STATUS_INVALID_ARGUMENT, "%s: status %s (%s)", b->name,
           ingot_status_name(st), msg);
    EXPECT(strstr(msg, b->needle) != NULL, "%s: \"%s\" does not say \"%s\"", b->name, msg,
           b->needle);
    EXPECT(strstr(msg, "ingot_ngram_table_load: ") == msg, "%s: \"%s\"", b->name, msg);
    EXPECT(untouched(dst, bytes + SLACK), "%s: dst was written", b->name);
    EXPECT(scale == -7.0f, "%s: weight_scale written", b->name);
    free(dst);
    free_ckpt(&c);
  }
  return 0;
}

/* With the prefix named, a second table does not matter. */
static int test_second_table_with_prefix(void) {
  ckpt c;
  make_good(&c, 4, 8, 3);
  second_table(&c);
  char dir[128], paths[MAX_FILES][192];
  const char *list[MAX_FILES];
  REQUIRE(write_ckpt(&c, dir, paths) == 0, "writing the files");
  size_t bytes = (size_t)(c.rows * c.dim);
  unsigned char *dst = canary_buffer(bytes);
  EXPECT_OK(NULL, ingot_ngram_table_load(as_paths(paths, list, 3), 3, "model.", c.rows, c.dim,
                                         dst, (int64_t)bytes, NULL, NULL, NULL));
  EXPECT(memcmp(dst, c.table, bytes) == 0, "the table differs");
  free(dst);
  free_ckpt(&c);
  return 0;
}

static int test_bad_arguments(void) {
  ckpt c;
  make_good(&c, 2, 8, 1);
  char dir[128], paths[MAX_FILES][192];
  const char *list[MAX_FILES];
  REQUIRE(write_ckpt(&c, dir, paths) == 0, "writing the files");
  const char *const *p = as_paths(paths, list, 1);
  unsigned char *dst = canary_buffer(4096);
  const char *none[1] = {NULL}, *empty[1] = {""}, *missing[1] = {"/nonexistent/ple.safetensors"};
  char empty_dir[160];
  snprintf(empty_dir, sizeof empty_dir, "%s/empty", dir);
  REQUIRE(mkdir(empty_dir, 0700) == 0, "mkdir");
  const char *empty_dirs[1] = {empty_dir};
  const int64_t R = c.rows, D = c.dim;
  EXPECT_ERROR(NULL, ingot_ngram_table_load(p, 0, NULL, R, D, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "num_paths: 0");
  EXPECT_ERROR(NULL, ingot_ngram_table_load(NULL, 1, NULL, R, D, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "paths: NULL");
  EXPECT_ERROR(NULL, ingot_ngram_table_load(none, 1, NULL, R, D, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "paths[0]: NULL");
  EXPECT_ERROR(NULL, ingot_ngram_table_load(empty, 1, NULL, R, D, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "paths[0]: empty");
  EXPECT_ERROR(NULL, ingot_ngram_table_load(p, 1, NULL, 0, D, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "expected_rows: 0");
  EXPECT_ERROR(NULL, ingot_ngram_table_load(p, 1, NULL, R, 0, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "row_bytes: 0");
  EXPECT_ERROR(NULL, ingot_ngram_table_load(p, 1, NULL, R, D, NULL, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "dst: NULL");
  EXPECT_ERROR(NULL,
               ingot_ngram_table_load(p, 1, NULL, INT64_MAX / 2, 3, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "overflows");
  EXPECT_ERROR(NULL, ingot_ngram_table_load(missing, 1, NULL, R, D, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "/nonexistent/ple.safetensors: cannot open");
  EXPECT_ERROR(NULL,
               ingot_ngram_table_load(empty_dirs, 1, NULL, R, D, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "no *.safetensors file");
  EXPECT_ERROR(NULL, ingot_ngram_table_load(p, 1, NULL, R, D + 1, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "but row_bytes = ");
  EXPECT_ERROR(NULL, ingot_ngram_table_probe(p, 0, NULL, NULL, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "ingot_ngram_table_probe: num_paths: 0");
  EXPECT(untouched(dst, 4096 + SLACK), "dst was written");
  /* a file that is not safetensors at all, beside a good one */
  char junk[192];
  snprintf(junk, sizeof junk, "%s/junk.safetensors", dir);
  FILE *fp = fopen(junk, "wb");
  REQUIRE(fp != NULL, "fopen");
  fputs("not a safetensors file", fp);
  fclose(fp);
  const char *with_junk[2] = {paths[0], junk};
  EXPECT_ERROR(NULL, ingot_ngram_table_load(with_junk, 2, NULL, R, D, dst, 4096, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "junk.safetensors: header length");
  EXPECT(untouched(dst, 4096 + SLACK), "dst was written");
  free(dst);
  free_ckpt(&c);
  return 0;
}

/* ---- what a path may be ------------------------------------------------------------------ */

/* Links are followed; a file reached twice, an empty file, a FIFO and a
 * directory among the *.safetensors names are refused by name (a FIFO
 * without waiting for a writer); a directory given with a trailing '/'
 * loads. */
static int test_paths(void) {
  ckpt c;
  make_good(&c, 3, 8, 2);
  char dir[128], paths[MAX_FILES][192];
  REQUIRE(write_ckpt(&c, dir, paths) == 0, "writing the files");
  size_t bytes = (size_t)(c.rows * c.dim);
  unsigned char *dst = canary_buffer(bytes);
  const int64_t R = c.rows, D = c.dim;
  char link0[224], link_dir[160], slash_dir[160], other[160], path[224];
  snprintf(link0, sizeof link0, "%s-link0.safetensors", dir);
  snprintf(link_dir, sizeof link_dir, "%s-link", dir);
  snprintf(slash_dir, sizeof slash_dir, "%s/", dir);
  REQUIRE(symlink(paths[0], link0) == 0 && symlink(dir, link_dir) == 0, "symlink");

  const char *linked[2] = {link0, paths[1]}, *through_dir_link[1] = {link_dir},
             *slash[1] = {slash_dir};
  EXPECT_OK(NULL, ingot_ngram_table_load(linked, 2, NULL, R, D, dst, (int64_t)bytes, NULL, NULL,
                                         NULL));
  EXPECT(memcmp(dst, c.table, bytes) == 0, "through a link: the table differs");
  EXPECT_OK(NULL, ingot_ngram_table_load(through_dir_link, 1, NULL, R, D, dst, (int64_t)bytes,
                                         NULL, NULL, NULL));
  EXPECT_OK(NULL, ingot_ngram_table_probe(slash, 1, NULL, NULL, NULL, NULL, NULL));

  memset(dst, CANARY, bytes + SLACK);
  const char *twice[3] = {paths[0], paths[1], paths[0]}, *dir_and_file[2] = {dir, paths[1]},
             *file_and_link[3] = {paths[0], paths[1], link0};
  EXPECT_ERROR(NULL, ingot_ngram_table_load(twice, 3, NULL, R, D, dst, (int64_t)bytes, NULL,
                                            NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "are the same file");
  EXPECT_ERROR(NULL, ingot_ngram_table_load(dir_and_file, 2, NULL, R, D, dst, (int64_t)bytes,
                                            NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "part-1.safetensors are the same file");
  EXPECT_ERROR(NULL, ingot_ngram_table_probe(file_and_link, 3, NULL, NULL, NULL, NULL, NULL),
               INGOT_STATUS_INVALID_ARGUMENT, "-link0.safetensors are the same file");

  /* an empty file, a FIFO and a directory, each alone in a directory of its own */
  static const char *const kinds[3] = {"empty", "fifo", "directory"};
  static const char *const needles[3] = {"too short", "not a regular file", "not a regular file"};
  for (int k = 0; k < 3; k++) {
    snprintf(other, sizeof other, "%s/%s", dir, kinds[k]);
    REQUIRE(mkdir(other, 0700) == 0, "mkdir");
    snprintf(path, sizeof path, "%s/x.safetensors", other);
    int made = -1;
    if (k == 0) {
      FILE *fp = fopen(path, "wb");
      made = fp != NULL && fclose(fp) == 0 ? 0 : -1;
    } else {
      made = k == 1 ? mkfifo(path, 0600) : mkdir(path, 0700);
    }
    REQUIRE(made == 0, "making %s", path);
    const char *in_dir[1] = {other}, *named[1] = {path};
    EXPECT_ERROR(NULL, ingot_ngram_table_load(in_dir, 1, NULL, R, D, dst, (int64_t)bytes, NULL,
                                              NULL, NULL),
                 INGOT_STATUS_INVALID_ARGUMENT, needles[k]);
    if (k != 2) /* a directory named directly stands for its files */
      EXPECT_ERROR(NULL, ingot_ngram_table_probe(named, 1, NULL, NULL, NULL, NULL, NULL),
                   INGOT_STATUS_INVALID_ARGUMENT, needles[k]);
  }
  EXPECT(untouched(dst, bytes + SLACK), "dst was written");
  unlink(link0);
  unlink(link_dir);
  free(dst);
  free_ckpt(&c);
  return 0;
}

/* ---- a read that fails midway --------------------------------------------------------------- */

typedef struct {
  const char *victim; /* truncated at the first progress call after 0 */
  off_t keep;
  int done;
} sabotage;

static void truncate_later(int64_t done, int64_t total, void *user) {
  sabotage *s = user;
  (void)total;
  if (done > 0 && !s->done) {
    s->done = 1;
    if (truncate(s->victim, s->keep) != 0) perror("truncate");
  }
}

static int test_read_fails_midway(void) {
  ckpt c;
  int s0, s1;
  for (;;) { /* shard_1 must have bytes to fail on */
    make_good(&c, 2, 16, 2);
    s0 = find_tensor(&c, "model.ngram_embedding.shard_0.weight");
    s1 = find_tensor(&c, "model.ngram_embedding.shard_1.weight");
    if (c.t[s1].bytes > 0) break;
    free_ckpt(&c);
  }
  /* shard_0 alone in file 0, shard_1 and the rest in file 1 */
  size_t file1_data = 0;
  for (int i = 0; i < c.nt; i++) {
    c.t[i].file = i == s0 ? 0 : 1;
    if (i != s0) file1_data += c.t[i].bytes;
  }
  char dir[128], paths[MAX_FILES][192];
  const char *list[MAX_FILES];
  REQUIRE(write_ckpt(&c, dir, paths) == 0, "writing the files");
  struct stat st;
  REQUIRE(stat(paths[1], &st) == 0, "stat");
  sabotage s = {paths[1], 0, 0};
  s.keep = (off_t)(st.st_size - (off_t)file1_data); /* the header survives, no data */
  size_t bytes = (size_t)(c.rows * c.dim);
  unsigned char *dst = canary_buffer(bytes);
  ingot_status status = ingot_ngram_table_load(as_paths(paths, list, 2), 2, NULL, c.rows, c.dim,
                                               dst, (int64_t)bytes, NULL, truncate_later, &s);
  EXPECT(status == INGOT_STATUS_INVALID_ARGUMENT, "status %s", ingot_status_name(status));
  EXPECT(strstr(ingot_last_error(NULL), "end of file") != NULL &&
             strstr(ingot_last_error(NULL), "zeroed") != NULL,
         "\"%s\"", ingot_last_error(NULL));
  size_t zeros = 0;
  while (zeros < bytes + SLACK && dst[zeros] == 0) zeros++;
  EXPECT(zeros >= c.t[s0].bytes, "only %zu bytes zeroed, shard_0 has %zu", zeros, c.t[s0].bytes);
  EXPECT(untouched(dst + zeros, bytes + SLACK - zeros), "bytes neither zeroed nor untouched");
  free(dst);
  free_ckpt(&c);
  return 0;
}

/* ---- main ----------------------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

int main(void) {
  test_init("test_ple_load");
  const char *tmp = getenv("TMPDIR");
  snprintf(base_dir, sizeof base_dir, "%s/ingot_ple_XXXXXX", tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  if (mkdtemp(base_dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  test_run("good_sets_shuffled_over_files", test_good_sets);
  test_run("bf16_scale_and_no_prefix", test_bf16_scale_and_no_prefix);
  test_run("broken_sets_refused_untouched", test_broken_sets);
  test_run("second_table_with_prefix", test_second_table_with_prefix);
  test_run("bad_arguments", test_bad_arguments);
  test_run("paths_links_twice_and_not_regular", test_paths);
  test_run("read_fails_midway_zeroes", test_read_fails_midway);
  nftw(base_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return test_finish();
}
