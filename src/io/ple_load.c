/*
 * Loading a checkpoint's n-gram (PLE) table into one host buffer:
 * ingot_ngram_table_probe and ingot_ngram_table_load (ingot.h), on the
 * safetensors reader of safetensors_read.c.
 *
 * Steps: the paths are expanded (a directory gives its *.safetensors files)
 * and every file is opened (once: a file reached twice is refused) and
 * checked by the reader; files without a tensor of the table are closed at
 * once. ple_layout_find then finds the shards
 * and the scale and checks them (ple_load.h); the arguments that depend on
 * the files (expected_rows, dst_bytes) are compared; only then is dst
 * written, shard after shard, each read in chunks straight into its place
 * (no second copy of the table, memory bounded by the headers).
 *
 * Trust: none in the files (the reader checks them; names, dtypes, shapes
 * and offsets are checked again here for what the table needs). No global
 * state: several loads may run at once on different threads.
 */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64 /* files over 2 GiB where off_t would be 32-bit */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "io/ple_load.h"

#define TABLE_PART "ngram_embedding."
#define SHARD_PART "shard_"
#define SHARD_SUFFIX ".weight"
#define SCALE_PART "weight_scale"
#define MAX_INDEX_DIGITS 9                    /* shard indices below 10^9 */
#define COPY_CHUNK ((size_t)64 << 20)         /* bytes per read */
#define SAFETENSORS_SUFFIX ".safetensors"

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* items (count used, *cap allocated, of `size` bytes each) with room for one
 * more: items itself, or a larger copy (*cap updated); NULL when out of
 * memory, items then unchanged. */
static void *reserve_one(void *items, size_t count, size_t *cap, size_t size) {
  if (count < *cap) return items;
  const size_t grown_cap = *cap ? 2 * *cap : 16;
  void *grown = realloc(items, size * grown_cap);
  if (grown != NULL) *cap = grown_cap;
  return grown;
}

/* ---- names -------------------------------------------------------------------------------- */

/* For "<P>ngram_embedding.shard_<digits>.weight": the length of P; else -1.
 * Only for finding the prefix: the index is checked later. */
static ptrdiff_t shard_prefix_length(const char *name) {
  size_t n = strlen(name), suffix = strlen(SHARD_SUFFIX), mid = strlen(TABLE_PART SHARD_PART);
  if (n < suffix || strcmp(name + n - suffix, SHARD_SUFFIX) != 0) return -1;
  size_t digits_end = n - suffix, d = digits_end;
  while (d > 0 && is_digit(name[d - 1])) d--;
  if (d == digits_end || d < mid || memcmp(name + d - mid, TABLE_PART SHARD_PART, mid) != 0)
    return -1;
  return (ptrdiff_t)(d - mid);
}

enum { NAME_OTHER, NAME_SHARD, NAME_SCALE, NAME_BAD_SHARD };

/* What `name` is to the table of this prefix; *index for NAME_SHARD. */
static int classify(const char *name, const char *prefix, int64_t *index) {
  size_t plen = strlen(prefix);
  if (strncmp(name, prefix, plen) != 0) return NAME_OTHER;
  const char *rest = name + plen;
  if (strncmp(rest, TABLE_PART, strlen(TABLE_PART)) != 0) return NAME_OTHER;
  rest += strlen(TABLE_PART);
  if (strcmp(rest, SCALE_PART) == 0) return NAME_SCALE;
  if (strncmp(rest, SHARD_PART, strlen(SHARD_PART)) != 0) return NAME_OTHER;
  rest += strlen(SHARD_PART);
  int64_t v = 0;
  const char *d = rest;
  while (is_digit(*d) && d - rest < MAX_INDEX_DIGITS) v = v * 10 + (*d++ - '0');
  /* one spelling per index: no leading zeros, no sign, no more digits */
  if (d == rest || is_digit(*d) || (rest[0] == '0' && d - rest > 1) ||
      strcmp(d, SHARD_SUFFIX) != 0)
    return NAME_BAD_SHARD;
  *index = v;
  return NAME_SHARD;
}

int ple_file_has_table(const st_file *f, const char *prefix) {
  for (size_t i = 0; i < f->nt; i++) {
    const char *at = strstr(f->t[i].name, TABLE_PART);
    if (at == NULL) continue;
    if (prefix == NULL) return 1;
    size_t plen = strlen(prefix);
    if (strncmp(f->t[i].name, prefix, plen) == 0 &&
        strncmp(f->t[i].name + plen, TABLE_PART, strlen(TABLE_PART)) == 0)
      return 1;
  }
  return 0;
}

/* "[a, b, c]" of a shape (the first 4 dimensions; values <= 2^53). */
static void format_shape(const st_tensor *t, char out[96]) {
  size_t used = 1;
  out[0] = '[';
  out[1] = '\0';
  for (int d = 0; d < t->ndim && d < 4; d++)
    used += (size_t)snprintf(out + used, 96 - used, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
  snprintf(out + used, 96 - used, "%s]", t->ndim > 4 ? ", ..." : "");
}

/* ---- finding the table -------------------------------------------------------------------- */

/* The prefix of the one table in the files (malloc'd in *out), or -1. */
static int find_prefix(const st_file *files, size_t n, size_t scanned, char **out,
                       st_error *err) {
  const char *first = NULL, *first_path = NULL;
  ptrdiff_t first_len = -1;
  for (size_t f = 0; f < n; f++)
    for (size_t i = 0; i < files[f].nt; i++) {
      const char *name = files[f].t[i].name;
      ptrdiff_t len = shard_prefix_length(name);
      if (len < 0) continue;
      if (first == NULL) {
        first = name, first_len = len, first_path = files[f].path;
      } else if (len != first_len || memcmp(name, first, (size_t)len) != 0) {
        return st_fail(err,
                       "the files hold shards of two tables: '%s' (in %s) and '%s' (in %s); "
                       "pass the prefix ('%.*s' or '%.*s')",
                       first, first_path, name, files[f].path, (int)first_len, first,
                       (int)len, name);
      }
    }
  if (first == NULL)
    return st_fail(err,
                   "no n-gram table in the %zu file%s: no tensor is named "
                   "'<prefix>" TABLE_PART SHARD_PART "<i>" SHARD_SUFFIX "'",
                   scanned, scanned == 1 ? "" : "s");
  *out = malloc((size_t)first_len + 1);
  if (*out == NULL) return st_fail_oom(err, "out of memory");
  memcpy(*out, first, (size_t)first_len);
  (*out)[first_len] = '\0';
  return 0;
}

static int cmp_shard(const void *a, const void *b) {
  const ple_shard *x = a, *y = b;
  if (x->index != y->index) return x->index < y->index ? -1 : 1;
  return x->file < y->file ? -1 : x->file > y->file;
}

/* Every shard and the scale of the table `prefix` (l->shards, *scale_file,
 * *scale_tensor), each exactly once, shards sorted by index. */
static int collect(const st_file *files, size_t n, size_t scanned, ple_layout *l,
                   size_t *scale_file, size_t *scale_tensor, st_error *err) {
  size_t count = 0, cap = 0, scale_count = 0;
  for (size_t f = 0; f < n; f++)
    for (size_t i = 0; i < files[f].nt; i++) {
      const char *name = files[f].t[i].name;
      int64_t index = -1;
      switch (classify(name, l->prefix, &index)) {
        case NAME_OTHER: continue;
        case NAME_BAD_SHARD:
          return st_fail(err,
                         "%s: tensor '%s' is not a shard name: expected '%s" TABLE_PART
                         SHARD_PART "<i>" SHARD_SUFFIX
                         "', i in decimal without leading zeros, below 10^%d",
                         files[f].path, name, l->prefix, MAX_INDEX_DIGITS);
        case NAME_SCALE:
          if (scale_count++ > 0)
            return st_fail(err, "tensor '%s' appears twice: in %s and in %s", name,
                           files[*scale_file].path, files[f].path);
          *scale_file = f, *scale_tensor = i;
          continue;
        default: break;
      }
      ple_shard *grown = reserve_one(l->shards, count, &cap, sizeof *l->shards);
      if (grown == NULL) return st_fail_oom(err, "out of memory");
      l->shards = grown;
      l->shards[count++] = (ple_shard){index, f, i};
    }
  if (count == 0)
    return st_fail(err,
                   "no tensor '%s" TABLE_PART SHARD_PART "0" SHARD_SUFFIX "' in the %zu file%s",
                   l->prefix, scanned, scanned == 1 ? "" : "s");
  qsort(l->shards, count, sizeof *l->shards, cmp_shard);
  for (size_t k = 0; k < count; k++) {
    const ple_shard *s = &l->shards[k];
    if (k > 0 && s->index == s[-1].index)
      return st_fail(err, "shard_%" PRId64 " appears twice: tensor '%s' in %s and in %s",
                     s->index, files[s->file].t[s->tensor].name, files[s[-1].file].path,
                     files[s->file].path);
    if (s->index != (int64_t)k)
      return st_fail(err,
                     "shard_%zu is missing: no tensor '%s" TABLE_PART SHARD_PART "%zu" SHARD_SUFFIX
                     "' in the %zu file%s (%zu shards found, the highest shard_%" PRId64 ")",
                     k, l->prefix, k, scanned, scanned == 1 ? "" : "s", count,
                     l->shards[count - 1].index);
  }
  l->num_shards = (int32_t)count; /* indices 0..count-1, all below 10^9 */
  if (scale_count == 0)
    return st_fail(err,
                   "no tensor '%s" TABLE_PART SCALE_PART "' (the table's scale) in the %zu file%s",
                   l->prefix, scanned, scanned == 1 ? "" : "s");
  return 0;
}

/* Dtype, rank, D and the rows' total of every shard. */
static int check_shards(const st_file *files, ple_layout *l, int64_t row_bytes, st_error *err) {
  int e4m3 = st_dtype_find("F8_E4M3");
  int64_t rows = 0, width = row_bytes;
  for (int32_t k = 0; k < l->num_shards; k++) {
    const st_file *f = &files[l->shards[k].file];
    const st_tensor *t = &f->t[l->shards[k].tensor];
    char shape[96];
    format_shape(t, shape);
    if (t->dtype != e4m3)
      return st_fail(err, "%s: tensor '%s': dtype %s, a table shard must be F8_E4M3", f->path,
                     t->name, st_dtypes[t->dtype].name);
    if (t->ndim != 2)
      return st_fail(err, "%s: tensor '%s': shape %s is not 2-D (a shard is [rows, D])",
                     f->path, t->name, shape);
    if (t->shape[1] == 0)
      return st_fail(err, "%s: tensor '%s': shape %s has D = 0", f->path, t->name, shape);
    if (width <= 0) width = (int64_t)t->shape[1]; /* shard_0's, when not given */
    if (t->shape[1] != (uint64_t)width)
      return st_fail(err, "%s: tensor '%s': shape %s has D = %" PRIu64 ", but %s = %" PRId64,
                     f->path, t->name, shape, t->shape[1],
                     row_bytes > 0 ? "row_bytes" : "shard_0 has D", width);
    /* shape values are at most 2^53 (the reader's rule) */
    if (__builtin_add_overflow(rows, (int64_t)t->shape[0], &rows))
      return st_fail(err, "the shards' rows overflow int64 (at tensor '%s' in %s)", t->name,
                     f->path);
  }
  int64_t bytes;
  if (__builtin_mul_overflow(rows, width, &bytes))
    return st_fail(err, "the table's %" PRId64 " rows x %" PRId64 " bytes overflow int64", rows,
                   width);
  l->rows = rows;
  l->row_bytes = width;
  return 0;
}

/* The scale's dtype, shape and value. */
static int read_scale(st_file *files, size_t file, size_t tensor, float *scale, st_error *err) {
  st_file *f = &files[file];
  const st_tensor *t = &f->t[tensor];
  char shape[96];
  format_shape(t, shape);
  int is_f32 = t->dtype == st_dtype_find("F32"), is_bf16 = t->dtype == st_dtype_find("BF16");
  if (!is_f32 && !is_bf16)
    return st_fail(err, "%s: tensor '%s': dtype %s, the table's scale must be F32 or BF16",
                   f->path, t->name, st_dtypes[t->dtype].name);
  if (!(t->ndim == 0 || (t->ndim == 1 && t->shape[0] == 1)))
    return st_fail(err, "%s: tensor '%s': shape %s, the table's scale must be [] or [1]",
                   f->path, t->name, shape);
  unsigned char b[4] = {0, 0, 0, 0};
  size_t nbytes = is_f32 ? 4 : 2;
  if (st_read_at(f, b, nbytes, 8 + f->header_len + t->begin, t->name))
    return f->err != err ? st_fail(err, "%s", f->err->msg) : -1;
  /* safetensors data is little-endian; bf16 is the top half of an f32 */
  uint32_t bits = is_f32 ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                               (uint32_t)b[3] << 24
                         : ((uint32_t)b[0] | (uint32_t)b[1] << 8) << 16;
  float v;
  memcpy(&v, &bits, sizeof v);
  if (!isfinite(v))
    return st_fail(err, "%s: tensor '%s': the table's scale is %s (bits 0x%08" PRIx32 ")",
                   f->path, t->name, isnan(v) ? "NaN" : "infinite", bits);
  *scale = v;
  return 0;
}

int ple_layout_find(st_file *files, size_t n, size_t scanned, const char *prefix,
                    int64_t row_bytes, ple_layout *out, st_error *err) {
  memset(out, 0, sizeof *out);
  if (prefix == NULL) {
    if (find_prefix(files, n, scanned, &out->prefix, err)) return -1;
  } else {
    out->prefix = malloc(strlen(prefix) + 1);
    if (out->prefix == NULL) return st_fail_oom(err, "out of memory");
    strcpy(out->prefix, prefix);
  }
  size_t scale_file = 0, scale_tensor = 0;
  if (collect(files, n, scanned, out, &scale_file, &scale_tensor, err)) return -1;
  if (check_shards(files, out, row_bytes, err)) return -1;
  return read_scale(files, scale_file, scale_tensor, &out->weight_scale, err);
}

void ple_layout_free(ple_layout *l) {
  free(l->prefix);
  free(l->shards);
  memset(l, 0, sizeof *l);
}

/* ---- copying ------------------------------------------------------------------------------ */

int ple_layout_copy(st_file *files, const ple_layout *l, unsigned char *dst,
                    ingot_ngram_table_progress_fn progress, void *progress_user,
                    st_error *err) {
  const int64_t total = l->rows * l->row_bytes; /* no overflow: checked */
  int64_t done = 0;
  if (progress != NULL) progress(0, total, progress_user);
  for (int32_t k = 0; k < l->num_shards; k++) {
    st_file *f = &files[l->shards[k].file];
    const st_tensor *t = &f->t[l->shards[k].tensor];
    const uint64_t start = 8 + f->header_len + t->begin, bytes = t->end - t->begin;
#ifdef POSIX_FADV_SEQUENTIAL
    if (f->fd >= 0) (void)posix_fadvise(f->fd, (off_t)start, (off_t)bytes, POSIX_FADV_SEQUENTIAL);
#endif
    for (uint64_t at = 0; at < bytes;) {
      size_t chunk = bytes - at < COPY_CHUNK ? (size_t)(bytes - at) : COPY_CHUNK;
      if (st_read_at(f, dst + done, chunk, start + at, t->name)) {
        /* what was written is zeroed: never a half-loaded table */
        memset(dst, 0, (size_t)done + chunk);
        return f->err != err ? st_fail(err, "%s", f->err->msg) : -1;
      }
      at += chunk;
      done += (int64_t)chunk;
      if (progress != NULL) progress(done, total, progress_user);
    }
  }
  return 0;
}

/* ---- the public functions ----------------------------------------------------------------- */

/* Which file a path opened (st_file.device, inode), for refusing a file
 * named twice. */
typedef struct {
  uint64_t device, inode;
  const char *path;
} file_identity;

typedef struct {
  st_file *files; /* the opened files that hold a tensor of the table */
  size_t n, cap;
  file_identity *seen; /* every file opened and checked, kept or not */
  size_t scanned, seen_cap;
  char **dir_paths; /* the paths of the directories' files (the files point at them) */
  size_t num_dir_paths, dir_paths_cap;
  st_error err;
} open_set;

static void open_set_close(open_set *s) {
  for (size_t i = 0; i < s->n; i++) st_close(&s->files[i]);
  free(s->files);
  free(s->seen);
  for (size_t i = 0; i < s->num_dir_paths; i++) free(s->dir_paths[i]);
  free(s->dir_paths);
  memset(s, 0, sizeof *s);
}

/* Opens and checks one file; keeps it when it holds a tensor of the table. */
static int open_one(open_set *s, const char *path, const char *prefix) {
  st_file *files = reserve_one(s->files, s->n, &s->cap, sizeof *s->files);
  if (files == NULL) return st_fail_oom(&s->err, "out of memory");
  s->files = files;
  file_identity *seen = reserve_one(s->seen, s->scanned, &s->seen_cap, sizeof *s->seen);
  if (seen == NULL) return st_fail_oom(&s->err, "out of memory");
  s->seen = seen;
  st_file *f = &s->files[s->n];
  memset(f, 0, sizeof *f);
  f->fd = -1;
  int rc = st_open(f, path, &s->err);
  /* the same file twice (two names, a directory and a file in it, a link)
   * would show every tensor twice: refused, naming both paths */
  for (size_t i = 0; i < s->scanned && rc == 0; i++)
    if (s->seen[i].device == f->device && s->seen[i].inode == f->inode)
      rc = st_fail(&s->err, "%s and %s are the same file (a file may be named only once)",
                   s->seen[i].path, path);
  if (rc == 0) s->seen[s->scanned++] = (file_identity){f->device, f->inode, path};
  if (rc == 0 && ple_file_has_table(f, prefix))
    s->n++;
  else
    st_close(f); /* failed, or no tensor of the table: only its header was read */
  return rc;
}

static int cmp_cstr(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Opens the *.safetensors files of a directory, in name order. */
static int open_directory(open_set *s, const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return st_fail(&s->err, "%s: cannot open the directory: %s", dir, strerror(errno));
  const size_t first = s->num_dir_paths, dir_len = strlen(dir);
  const char *separator = dir[dir_len - 1] == '/' ? "" : "/";
  int rc = 0;
  errno = 0; /* readdir returns NULL at the end and on an error, which sets errno */
  for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL; errno = 0) {
    if (e->d_name[0] == '.' || !ends_with(e->d_name, SAFETENSORS_SUFFIX)) continue;
    char **grown = reserve_one(s->dir_paths, s->num_dir_paths, &s->dir_paths_cap,
                               sizeof *s->dir_paths);
    if (grown == NULL) {
      rc = st_fail_oom(&s->err, "out of memory");
      break;
    }
    s->dir_paths = grown;
    size_t len = dir_len + strlen(separator) + strlen(e->d_name) + 1;
    char *path = malloc(len);
    if (path == NULL) {
      rc = st_fail_oom(&s->err, "out of memory");
      break;
    }
    snprintf(path, len, "%s%s%s", dir, separator, e->d_name);
    s->dir_paths[s->num_dir_paths++] = path;
  }
  if (rc == 0 && errno != 0)
    rc = st_fail(&s->err, "%s: cannot read the directory: %s", dir, strerror(errno));
  closedir(d);
  if (rc) return rc;
  if (s->num_dir_paths == first)
    return st_fail(&s->err, "%s: no *" SAFETENSORS_SUFFIX " file in the directory", dir);
  char **paths = s->dir_paths + first;
  const size_t count = s->num_dir_paths - first;
  qsort(paths, count, sizeof *paths, cmp_cstr);
  for (size_t i = 0; rc == 0 && i < count; i++) rc = open_one(s, paths[i], prefix);
  return rc;
}

/* Opens every file of the paths (checked; a directory: its *.safetensors
 * files) and finds the table. On failure the text is recorded for op and
 * the status returned; s and layout are for the caller to free. */
static ingot_status open_and_find(const char *op, const char *const *paths, int32_t num_paths,
                                  const char *prefix, int64_t row_bytes, open_set *s,
                                  ple_layout *layout) {
  int rc = 0;
  for (int32_t i = 0; i < num_paths && rc == 0; i++) {
    struct stat st;
    if (stat(paths[i], &st) == 0 && S_ISDIR(st.st_mode))
      rc = open_directory(s, paths[i], prefix);
    else
      rc = open_one(s, paths[i], prefix);
  }
  if (rc == 0) rc = ple_layout_find(s->files, s->n, s->scanned, prefix, row_bytes, layout, &s->err);
  if (rc == 0) return INGOT_STATUS_SUCCESS;
  return ingot_core_fail(NULL,
                         s->err.out_of_memory ? INGOT_STATUS_ALLOC_FAILED
                                              : INGOT_STATUS_INVALID_ARGUMENT,
                         op, "%s", s->err.msg);
}

static ingot_status check_paths(const char *op, const char *const *paths, int32_t num_paths) {
  if (num_paths < 1)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "num_paths: %d (at least one file or directory)", (int)num_paths);
  if (paths == NULL)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "paths: NULL");
  for (int32_t i = 0; i < num_paths; i++)
    if (paths[i] == NULL || paths[i][0] == '\0')
      return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "paths[%d]: %s", (int)i,
                             paths[i] == NULL ? "NULL" : "empty");
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_ngram_table_probe(const char *const *paths, int32_t num_paths,
                                     const char *prefix, int64_t *rows, int64_t *row_bytes,
                                     int32_t *num_shards, float *weight_scale) {
  static const char op[] = "ingot_ngram_table_probe";
  ingot_core_clear_error(NULL);
  ingot_status st = check_paths(op, paths, num_paths);
  if (st) return st;
  open_set s;
  memset(&s, 0, sizeof s);
  ple_layout layout;
  memset(&layout, 0, sizeof layout);
  st = open_and_find(op, paths, num_paths, prefix, 0, &s, &layout);
  if (st == INGOT_STATUS_SUCCESS) {
    if (rows) *rows = layout.rows;
    if (row_bytes) *row_bytes = layout.row_bytes;
    if (num_shards) *num_shards = layout.num_shards;
    if (weight_scale) *weight_scale = layout.weight_scale;
  }
  open_set_close(&s);
  ple_layout_free(&layout);
  return st;
}

ingot_status ingot_ngram_table_load(const char *const *paths, int32_t num_paths,
                                    const char *prefix, int64_t expected_rows,
                                    int64_t row_bytes, void *dst, int64_t dst_bytes,
                                    float *weight_scale, ingot_ngram_table_progress_fn progress,
                                    void *progress_user) {
  static const char op[] = "ingot_ngram_table_load";
  ingot_core_clear_error(NULL);
  ingot_status st = check_paths(op, paths, num_paths);
  if (st) return st;
  if (expected_rows < 1)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "expected_rows: %" PRId64 " < 1", expected_rows);
  if (row_bytes < 1)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "row_bytes: %" PRId64 " < 1",
                           row_bytes);
  int64_t table_bytes;
  if (ingot_core_size_mul(expected_rows, row_bytes, &table_bytes))
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "expected_rows * row_bytes = %" PRId64 " * %" PRId64
                           " overflows int64 or size_t",
                           expected_rows, row_bytes);
  if (dst == NULL) return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op, "dst: NULL");
  if (dst_bytes < table_bytes)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "dst_bytes: %" PRId64 ", but the table needs expected_rows * "
                           "row_bytes = %" PRId64 " * %" PRId64 " = %" PRId64 " bytes",
                           dst_bytes, expected_rows, row_bytes, table_bytes);
#ifdef INGOT_WITH_CUDA
  if (ingot_cuda_memory_kind(dst, NULL) == INGOT_MEMORY_DEVICE)
    return ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "dst: %p is CUDA device memory; load into host memory (pinned: "
                           "cudaHostAlloc) and copy it to the device",
                           dst);
#endif

  open_set s;
  memset(&s, 0, sizeof s);
  ple_layout layout;
  memset(&layout, 0, sizeof layout);
  st = open_and_find(op, paths, num_paths, prefix, row_bytes, &s, &layout);
  if (st == INGOT_STATUS_SUCCESS && layout.rows != expected_rows)
    st = ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                         "expected_rows: %" PRId64 ", but the %d shards of '%s" TABLE_PART
                         "shard_<i>" SHARD_SUFFIX "' hold %" PRId64 " rows (%+" PRId64 ")",
                         expected_rows, (int)layout.num_shards, layout.prefix, layout.rows,
                         layout.rows - expected_rows);
  // ---- everything is checked: write dst
  if (st == INGOT_STATUS_SUCCESS) {
    if (ple_layout_copy(s.files, &layout, dst, progress, progress_user, &s.err))
      st = ingot_core_fail(NULL, INGOT_STATUS_INVALID_ARGUMENT, op,
                           "a read failed midway (dst: the bytes written so far are zeroed): %s",
                           s.err.msg);
    else if (weight_scale != NULL)
      *weight_scale = layout.weight_scale;
  }
  open_set_close(&s);
  ple_layout_free(&layout);
  return st;
}
