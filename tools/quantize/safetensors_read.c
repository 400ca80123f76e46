/*
 * The safetensors reader of `ingot quantize`: opens IN, reads the 8-byte
 * header length and the JSON header (cJSON) and checks everything a reader
 * relies on: UTF-8, JSON, dtypes, shapes, offsets in range and covering the
 * data section exactly, byte lengths, unique names.
 *
 * Trust: none in the file. Every length, count and offset comes from it and
 * is checked before use; the tensors' data bytes are only copied. What it
 * accepts may be used as it is by the planner and the writer.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "safetensors.h"

#define MAX_JSON_INT 9007199254740992.0 /* 2^53: the integers a double holds exactly */

/* Every dtype of the safetensors format (including the sub-byte ones of
 * recent versions: their tensors are copied, never quantized). */
const st_dtype st_dtypes[] = {
    {"BOOL", 8, INGOT_DTYPE_INVALID},    {"U8", 8, INGOT_DTYPE_INVALID},
    {"I8", 8, INGOT_DTYPE_INVALID},      {"F8_E5M2", 8, INGOT_DTYPE_INVALID},
    {"F8_E4M3", 8, INGOT_DTYPE_INVALID}, {"F8_E8M0", 8, INGOT_DTYPE_INVALID},
    {"I16", 16, INGOT_DTYPE_INVALID},    {"U16", 16, INGOT_DTYPE_INVALID},
    {"F16", 16, INGOT_DTYPE_F16},        {"BF16", 16, INGOT_DTYPE_BF16},
    {"I32", 32, INGOT_DTYPE_INVALID},    {"U32", 32, INGOT_DTYPE_INVALID},
    {"F32", 32, INGOT_DTYPE_F32},        {"F64", 64, INGOT_DTYPE_INVALID},
    {"I64", 64, INGOT_DTYPE_INVALID},    {"U64", 64, INGOT_DTYPE_INVALID},
    {"C64", 64, INGOT_DTYPE_INVALID},    {"F4", 4, INGOT_DTYPE_INVALID},
    {"F6_E2M3", 6, INGOT_DTYPE_INVALID}, {"F6_E3M2", 6, INGOT_DTYPE_INVALID},
};
#define N_ST_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static int st_dtype_find(const char *name) {
  for (int i = 0; i < N_ST_DTYPES; i++)
    if (strcmp(st_dtypes[i].name, name) == 0) return i;
  return -1;
}

/* ---- small helpers -------------------------------------------------------------------- */

static uint64_t le64(const unsigned char b[8]) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

int st_read_at(st_file *f, void *buf, size_t n, uint64_t off, const char *what) {
  unsigned char *p = buf;
  while (n > 0) {
    size_t chunk = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
    ssize_t got = pread(f->fd, p, chunk, (off_t)off);
    if (got < 0) {
      if (errno == EINTR) continue;
      return st_fail(f->err, "%s: reading %s: %s", f->path, what, strerror(errno));
    }
    if (got == 0)
      return st_fail(f->err,
                     "%s: reading %s: unexpected end of file at byte %" PRIu64
                     " (was the file changed while being read?)",
                     f->path, what, off);
    p += got;
    n -= (size_t)got;
    off += (uint64_t)got;
  }
  return 0;
}

/* Offset of the first byte that is not valid UTF-8, or n. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return n;
}

/* A JSON number that is a non-negative integer a double holds exactly. */
static int json_u64(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!(d >= 0.0 && d <= MAX_JSON_INT)) return 0;
  uint64_t u = (uint64_t)d;
  if ((double)u != d) return 0;
  *out = u;
  return 1;
}

/* A short, printable excerpt of the header around byte `at`, for messages. */
static void excerpt(const char *s, size_t n, size_t at, char out[48]) {
  size_t k = 0;
  for (size_t i = at; i < n && k < 40; i++, k++) {
    unsigned char c = (unsigned char)s[i];
    out[k] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  out[k] = '\0';
}

/* ---- checks --------------------------------------------------------------------------- */

/* qsort has no context argument: the comparators read this. */
static const st_file *sort_ctx;

static int cmp_by_name(const void *a, const void *b) {
  return strcmp(sort_ctx->t[*(const size_t *)a].name, sort_ctx->t[*(const size_t *)b].name);
}

static int cmp_by_offset(const void *a, const void *b) {
  const st_tensor *x = &sort_ctx->t[*(const size_t *)a], *y = &sort_ctx->t[*(const size_t *)b];
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int parse_tensor(st_file *f, const cJSON *item, st_tensor *t) {
  t->name = item->string;
  if (!cJSON_IsObject(item))
    return st_fail(f->err, "%s: tensor '%s': its header entry is not a JSON object", f->path,
                   t->name);
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsString(dtype))
    return st_fail(f->err, "%s: tensor '%s': \"dtype\" missing or not a string", f->path,
                   t->name);
  if ((t->dtype = st_dtype_find(dtype->valuestring)) < 0)
    return st_fail(f->err, "%s: tensor '%s': unknown dtype \"%s\"", f->path, t->name,
                   dtype->valuestring);
  if (!cJSON_IsArray(shape))
    return st_fail(f->err, "%s: tensor '%s': \"shape\" missing or not an array", f->path,
                   t->name);
  t->ndim = cJSON_GetArraySize(shape);
  t->shape = malloc(sizeof *t->shape * (size_t)(t->ndim > 0 ? t->ndim : 1));
  if (t->shape == NULL) return st_fail(f->err, "out of memory");
  int d = 0;
  for (const cJSON *v = shape->child; v != NULL; v = v->next, d++)
    if (!json_u64(v, &t->shape[d]))
      return st_fail(f->err, "%s: tensor '%s': shape[%d] is not a non-negative integer", f->path,
                     t->name, d);
  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
    return st_fail(f->err,
                   "%s: tensor '%s': \"data_offsets\" missing or not an array [begin, end]",
                   f->path, t->name);
  if (!json_u64(offsets->child, &t->begin) || !json_u64(offsets->child->next, &t->end))
    return st_fail(f->err, "%s: tensor '%s': data_offsets are not non-negative integers",
                   f->path, t->name);
  if (t->end < t->begin)
    return st_fail(f->err,
                   "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                   "] end before they begin",
                   f->path, t->name, t->begin, t->end);
  return 0;
}

/* Byte length of a tensor from its shape and dtype; -1 on overflow or a
 * sub-byte tensor that is not a whole number of bytes. */
static int tensor_bytes(st_file *f, const st_tensor *t, uint64_t *bytes) {
  uint64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    if (__builtin_mul_overflow(n, t->shape[d], &n))
      return st_fail(f->err, "%s: tensor '%s': the shape's element count overflows", f->path,
                     t->name);
  uint64_t bits;
  if (__builtin_mul_overflow(n, (uint64_t)st_dtypes[t->dtype].bits, &bits))
    return st_fail(f->err, "%s: tensor '%s': the byte length overflows", f->path, t->name);
  if (bits % 8 != 0)
    return st_fail(f->err,
                   "%s: tensor '%s': %" PRIu64 " elements of %s are not a whole number of bytes",
                   f->path, t->name, n, st_dtypes[t->dtype].name);
  *bytes = bits / 8;
  return 0;
}

static int parse_metadata(st_file *f, const cJSON *m) {
  if (f->metadata_seen++)
    return st_fail(f->err, "%s: header: \"__metadata__\" appears twice", f->path);
  if (cJSON_IsNull(m)) return 0; /* readers take null for "no metadata" */
  if (!cJSON_IsObject(m))
    return st_fail(f->err, "%s: header: \"__metadata__\" is not a JSON object", f->path);
  for (const cJSON *e = m->child; e != NULL; e = e->next) {
    if (!cJSON_IsString(e))
      return st_fail(f->err,
                     "%s: header: __metadata__ entry '%s' is not a string (safetensors metadata "
                     "maps strings to strings)",
                     f->path, e->string);
    for (const cJSON *g = m->child; g != e; g = g->next)
      if (strcmp(g->string, e->string) == 0)
        return st_fail(f->err, "%s: header: __metadata__ key '%s' appears twice", f->path,
                       e->string);
  }
  f->metadata = m;
  return 0;
}

int st_open(st_file *f, const char *path, st_error *err) {
  f->path = path;
  f->err = err;
  f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) return st_fail(f->err, "%s: cannot open: %s", f->path, strerror(errno));
  struct stat st;
  if (fstat(f->fd, &st) != 0)
    return st_fail(f->err, "%s: cannot stat: %s", f->path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return st_fail(f->err, "%s: not a regular file", f->path);
  f->file_size = (uint64_t)st.st_size;

  // ---- header length and header bytes
  if (f->file_size < 8)
    return st_fail(
        f->err,
        "%s: %" PRIu64
        " bytes, too short for a safetensors file (it starts with an 8-byte header length)",
        f->path, f->file_size);
  unsigned char len8[8];
  if (st_read_at(f, len8, 8, 0, "the header length")) return -1;
  f->header_len = le64(len8);
  if (f->header_len > ST_MAX_HEADER_BYTES)
    return st_fail(f->err,
                   "%s: header length %" PRIu64
                   " is over the safetensors limit of %u bytes (not a safetensors file?)",
                   f->path, f->header_len, ST_MAX_HEADER_BYTES);
  if (f->header_len > f->file_size - 8)
    return st_fail(f->err,
                   "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64
                   " bytes follow the length): truncated, or not a safetensors file",
                   f->path, f->header_len, f->file_size - 8);
  if (f->header_len < 2)
    return st_fail(f->err, "%s: header length %" PRIu64 " is too short for a JSON object",
                   f->path, f->header_len);
  f->data_len = f->file_size - 8 - f->header_len;
  size_t hn = (size_t)f->header_len;
  f->header = malloc(hn + 1);
  if (f->header == NULL) return st_fail(f->err, "out of memory (header of %zu bytes)", hn);
  if (st_read_at(f, f->header, hn, 8, "the header")) return -1;
  f->header[hn] = '\0';

  // ---- JSON
  size_t bad = utf8_invalid_at((const unsigned char *)f->header, hn);
  if (bad < hn)
    return st_fail(f->err, "%s: header: not valid UTF-8 (byte %zu of %zu)", f->path, bad, hn);
  // A \u0000 escape would end a name early (C strings): refuse rather than
  // rename silently. Backslashes only occur in strings; skip escaped pairs.
  for (size_t i = 0; i + 1 < hn; i++)
    if (f->header[i] == '\\') {
      if (i + 5 < hn && memcmp(f->header + i + 1, "u0000", 5) == 0)
        return st_fail(f->err,
                       "%s: header: a string holds a NUL character (\\u0000 at byte %zu), which "
                       "ingot quantize cannot carry",
                       f->path, i);
      i++;
    }
  const char *end = NULL;
  f->root = cJSON_ParseWithLengthOpts(f->header, hn, &end, 0);
  if (f->root == NULL) {
    size_t at =
        (end != NULL && end >= f->header && end <= f->header + hn) ? (size_t)(end - f->header) : 0;
    size_t last = hn; /* one past the last non-blank byte */
    while (last > 0 && (f->header[last - 1] == ' ' || f->header[last - 1] == '\t' ||
                        f->header[last - 1] == '\n' || f->header[last - 1] == '\r'))
      last--;
    if (at + 1 >= last)
      return st_fail(
          f->err,
          "%s: header: invalid JSON: it ends before the top-level object is complete (%zu bytes)",
          f->path, hn);
    char near[48];
    excerpt(f->header, hn, at, near);
    return st_fail(f->err, "%s: header: invalid JSON at byte %zu of %zu (near \"%s\")", f->path,
                   at, hn, near);
  }
  for (const char *p = end; p < f->header + hn; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      char near[48];
      excerpt(f->header, hn, (size_t)(p - f->header), near);
      return st_fail(f->err,
                     "%s: header: unexpected bytes after the JSON object at byte %zu (\"%s\")",
                     f->path, (size_t)(p - f->header), near);
    }
  if (!cJSON_IsObject(f->root))
    return st_fail(f->err, "%s: header: the JSON is not an object", f->path);

  // ---- entries
  size_t n = 0;
  for (const cJSON *e = f->root->child; e != NULL; e = e->next)
    if (strcmp(e->string, "__metadata__") != 0) n++;
  f->t = calloc(n ? n : 1, sizeof *f->t);
  f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
  if (f->t == NULL || f->by_name == NULL) return st_fail(f->err, "out of memory");
  for (const cJSON *e = f->root->child; e != NULL; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) {
      if (parse_metadata(f, e)) return -1;
      continue;
    }
    if (parse_tensor(f, e, &f->t[f->nt++])) return -1;
  }

  // ---- unique names
  for (size_t i = 0; i < f->nt; i++) f->by_name[i] = i;
  sort_ctx = f;
  qsort(f->by_name, f->nt, sizeof *f->by_name, cmp_by_name);
  for (size_t i = 1; i < f->nt; i++)
    if (strcmp(f->t[f->by_name[i]].name, f->t[f->by_name[i - 1]].name) == 0)
      return st_fail(f->err, "%s: header: tensor name '%s' appears twice", f->path,
                     f->t[f->by_name[i]].name);

  // ---- byte lengths and offsets
  for (size_t i = 0; i < f->nt; i++) {
    const st_tensor *t = &f->t[i];
    if (t->end > f->data_len)
      return st_fail(f->err,
                     "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                     "] reach past the end of the data section (%" PRIu64
                     " bytes): the file is truncated or the offsets are wrong",
                     f->path, t->name, t->begin, t->end, f->data_len);
    uint64_t bytes = 0;
    if (tensor_bytes(f, t, &bytes)) return -1;
    if (bytes != t->end - t->begin)
      return st_fail(f->err,
                     "%s: tensor '%s': shape and dtype %s give %" PRIu64
                     " bytes, but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                     f->path, t->name, st_dtypes[t->dtype].name, bytes, t->begin, t->end,
                     t->end - t->begin);
  }
  size_t *by_offset = malloc(sizeof *by_offset * (f->nt ? f->nt : 1));
  if (by_offset == NULL) return st_fail(f->err, "out of memory");
  for (size_t i = 0; i < f->nt; i++) by_offset[i] = i;
  qsort(by_offset, f->nt, sizeof *by_offset, cmp_by_offset);
  uint64_t covered = 0;
  int rc = 0;
  for (size_t k = 0; k < f->nt && rc == 0; k++) {
    st_tensor *t = &f->t[by_offset[k]];
    t->order = k;
    if (t->begin < covered)
      rc = st_fail(f->err,
                   "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                   "] overlap tensor '%s' [%" PRIu64 ", %" PRIu64 "]",
                   f->path, t->name, t->begin, t->end, f->t[by_offset[k - 1]].name,
                   f->t[by_offset[k - 1]].begin, f->t[by_offset[k - 1]].end);
    else if (t->begin > covered)
      rc = st_fail(
          f->err,
          "%s: data bytes [%" PRIu64 ", %" PRIu64
          ") belong to no tensor (before tensor '%s'): the offsets do not cover the data section",
          f->path, covered, t->begin, t->name);
    covered = t->end;
  }
  free(by_offset);
  if (rc) return rc;
  if (covered != f->data_len)
    return st_fail(f->err,
                   "%s: the tensors cover %" PRIu64 " data bytes but the data section has %" PRIu64
                   " (trailing bytes belong to no tensor)",
                   f->path, covered, f->data_len);
  return 0;
}

int st_find(const st_file *f, const char *name) {
  size_t lo = 0, hi = f->nt;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->t[f->by_name[mid]].name, name);
    if (c == 0) return (int)f->by_name[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

void st_close(st_file *f) {
  if (f->fd >= 0) close(f->fd);
  for (size_t i = 0; i < f->nt; i++) free(f->t[i].shape);
  free(f->t);
  free(f->by_name);
  cJSON_Delete(f->root);
  free(f->header);
}
