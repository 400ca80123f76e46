/*
 * `ingot quantize IN.safetensors OUT.safetensors [options]`: copies a
 * safetensors file, replacing the chosen 2-D BF16 / F16 / F32 weights by
 * NVFP4 (values, 128x4-swizzled E4M3 scales, fp32 global scale), and merging
 * gate/up pairs into the interleaved weight of the fused GeGLU MLP. The
 * output format is documented in docs/quantize.md.
 *
 * How it works:
 *   1. parse    read the 8-byte header length and the JSON header (cJSON),
 *               check everything a reader relies on: UTF-8, JSON, dtypes,
 *               shapes, offsets in range and covering the data section
 *               exactly, byte lengths, unique names. Nothing is written
 *               before the whole input has been checked.
 *   2. plan     choose the tensors to quantize (--pattern, --gate-up), name
 *               the outputs, lay them out (decreasing alignment, then input
 *               order, so every tensor stays naturally aligned), build the
 *               output header.
 *   3. write    into OUT.tmp-XXXXXX beside OUT: the header, then tensor by
 *               tensor (copied ones in 16 MiB chunks; quantized ones read
 *               whole, quantized on the CUDA backend when there is one, else
 *               the CPU reference, which give identical bytes), fsync,
 *               rename to OUT. Any failure (or SIGINT / SIGTERM / SIGHUP)
 *               removes the temporary file: there is never a partial OUT.
 *
 * Built only with a JSON library (cJSON); without it the subcommand says so
 * and exits 2 (tools/CMakeLists.txt).
 */
#define _POSIX_C_SOURCE 200809L

#include "quantize.h"

#include <stdio.h>
#include <string.h>

#include "ingot/ingot.h"

static void print_usage(FILE *f) {
  fprintf(f,
          "usage: ingot quantize IN.safetensors OUT.safetensors [options]\n"
          "\n"
          "Copies IN to OUT, replacing the chosen weights by NVFP4: a 2-D BF16/F16/F32\n"
          "tensor NAME [rows, cols] (cols %% 16 == 0) becomes\n"
          "  NAME.nvfp4_values        U8 [rows, cols/2]: E2M1 codes, even element in\n"
          "                           the low nibble\n"
          "  NAME.nvfp4_scales        F8_E4M3 [round_up(rows,128), round_up(cols/16,4)]:\n"
          "                           one scale per 16 elements, 128x4 swizzled\n"
          "  NAME.nvfp4_global_scale  F32 [1]: gs (x ~ e2m1 * scale / gs)\n"
          "Every other tensor is copied byte for byte; __metadata__ is kept, plus an\n"
          "\"ingot.quantize\" entry. Without --pattern or --gate-up nothing is quantized.\n"
          "\n"
          "options:\n"
          "  -p, --pattern GLOB     quantize the 2-D BF16/F16/F32 tensors whose name\n"
          "                         matches GLOB (fnmatch: * ? [..]; '*' also matches\n"
          "                         '.'); repeatable. Matched tensors of another rank\n"
          "                         or dtype are copied.\n"
          "  --gate-up GATE UP OUT  interleave the [H, K] tensors GATE and UP (row 2j =\n"
          "                         GATE row j, row 2j+1 = UP row j) into one NVFP4\n"
          "                         [2H, K] tensor OUT with one global scale; GATE and\n"
          "                         UP are not copied. Repeatable.\n"
          "  --cpu                  use the CPU backend even when CUDA is available\n"
          "  --device N             CUDA device (default 0). The default backend is CUDA\n"
          "                         when a usable GPU is present, else the CPU.\n"
          "  --dry-run              check IN and print what would be done; write nothing\n"
          "  -q, --quiet            print only warnings and errors\n"
          "  -h, --help             this text\n"
          "\n"
          "OUT is written to a temporary file beside it and renamed when complete; on any\n"
          "error nothing is left behind. Exit status: 0 done, 1 failed, 2 usage error.\n");
}

#ifndef INGOT_HAVE_CJSON

int quantize_main(int argc, char **argv) {
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    print_usage(stdout);
    printf("\n(this ingot was built without JSON support: the command is not available)\n");
    return 0;
  }
  fprintf(stderr,
          "ingot quantize: built without JSON support (install libcjson-dev and rebuild)\n");
  return 2;
}

#else /* INGOT_HAVE_CJSON */

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef INGOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_HEADER_BYTES 100000000u /* the limit safetensors readers enforce */
#define COPY_CHUNK ((size_t)16 << 20)
#define MAX_JSON_INT 9007199254740992.0 /* 2^53: the integers a double holds exactly */
#define METADATA_KEY "ingot.quantize"
#define SUFFIX_VALUES ".nvfp4_values"
#define SUFFIX_SCALES ".nvfp4_scales"
#define SUFFIX_GS ".nvfp4_global_scale"
#define TMP_SUFFIX ".tmp-XXXXXX"

/* ---- safetensors dtypes ---------------------------------------------------------- */

typedef struct {
  const char *name;
  unsigned bits;     /* bits per element */
  ingot_dtype ingot; /* what ingot can quantize from; INVALID otherwise */
} st_dtype;

/* Every dtype of the safetensors format (including the sub-byte ones of
 * recent versions: their tensors are copied, never quantized). */
static const st_dtype st_dtypes[] = {
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

/* Natural alignment of a dtype's elements in bytes (1 for sub-byte dtypes). */
static unsigned st_dtype_align(int d) { return st_dtypes[d].bits >= 8 ? st_dtypes[d].bits / 8 : 1; }

/* ---- state -------------------------------------------------------------------------- */

enum { ROLE_COPY = 0, ROLE_QUANT, ROLE_GATE, ROLE_UP };

typedef struct {
  const char *name; /* in the cJSON tree */
  int dtype;        /* index into st_dtypes */
  int ndim;
  uint64_t *shape;     /* [ndim], owned */
  uint64_t begin, end; /* byte range in the data section */
  int role;            /* ROLE_* */
  int job;             /* the job consuming it when role != ROLE_COPY */
  size_t order;        /* rank by data offset */
} in_tensor;

typedef struct {
  int src[2];         /* x (or gate) and up (-1 unless gate/up) */
  char *name;         /* base name of the outputs (owned) */
  int64_t rows, cols; /* the quantized matrix (2H rows for gate/up) */
  int64_t scale_rows, scale_cols;
  uint64_t values_bytes, scales_bytes;
} qjob;

enum { OUT_COPY = 0, OUT_UNIT };

/* One entry of the output data section: a copied tensor, or a quantized
 * unit (values, scales, global scale, in that order). */
typedef struct {
  int kind;
  int index;      /* in_tensor (OUT_COPY) or job (OUT_UNIT) */
  unsigned align; /* sort key 1 (descending) */
  size_t order;   /* sort key 2 (ascending): the source's rank in IN */
  uint64_t begin; /* data offset */
} out_item;

typedef struct {
  /* options */
  const char *in_path, *out_path;
  const char **patterns;
  int n_patterns;
  const char **gate_up; /* 3 per group: gate, up, out */
  int n_gate_up;
  int force_cpu, device, device_given, dry_run, quiet;
  /* input */
  int fd;
  uint64_t file_size, header_len, data_len;
  char *header;
  cJSON *root;
  const cJSON *metadata; /* NULL when absent or null */
  int metadata_seen;
  in_tensor *t;
  size_t nt;
  size_t *by_name; /* tensor indices sorted by name */
  /* plan */
  qjob *jobs;
  size_t nj;
  out_item *outs;
  size_t no;
  char *out_header; /* padded JSON */
  size_t out_header_len;
  uint64_t out_data_len;
  /* run */
  ingot_context_t ctx;
  int cuda;
  char err[2048];
} quant;

#if defined(__GNUC__) || defined(__clang__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

/* Records the first error (later ones are consequences); returns -1. */
static int PRINTF_LIKE(2, 3) failf(quant *q, const char *fmt, ...) {
  if (q->err[0] == '\0') {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->err, sizeof q->err, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static void PRINTF_LIKE(2, 3) info(const quant *q, const char *fmt, ...) {
  if (q->quiet) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

/* ---- small helpers -------------------------------------------------------------------- */

static uint64_t le64(const unsigned char b[8]) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static void put_le64(unsigned char b[8], uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static int host_is_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* Reads exactly n bytes at offset off of the input. */
static int read_at(quant *q, void *buf, size_t n, uint64_t off, const char *what) {
  unsigned char *p = buf;
  while (n > 0) {
    size_t chunk = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
    ssize_t got = pread(q->fd, p, chunk, (off_t)off);
    if (got < 0) {
      if (errno == EINTR) continue;
      return failf(q, "%s: reading %s: %s", q->in_path, what, strerror(errno));
    }
    if (got == 0)
      return failf(q,
                   "%s: reading %s: unexpected end of file at byte %" PRIu64
                   " (was the file changed while being read?)",
                   q->in_path, what, off);
    p += got;
    n -= (size_t)got;
    off += (uint64_t)got;
  }
  return 0;
}

static int write_all(quant *q, int fd, const void *buf, size_t n, const char *path) {
  const unsigned char *p = buf;
  while (n > 0) {
    ssize_t put = write(fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
    if (put < 0) {
      if (errno == EINTR) continue;
      return failf(q, "%s: write failed: %s", path, strerror(errno));
    }
    p += put;
    n -= (size_t)put;
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

/* ---- growing string ------------------------------------------------------------------- */

typedef struct {
  char *p;
  size_t len, cap;
  int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(strbuf *b, uint64_t v) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
  sb_put(b, tmp, (size_t)n);
}

/* s as a JSON string literal (UTF-8 passes through; ", \ and control
 * characters are escaped). */
static void sb_json_string(strbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char tmp[8];
    switch (*p) {
      case '"': sb_put(b, "\\\"", 2); break;
      case '\\': sb_put(b, "\\\\", 2); break;
      case '\n': sb_put(b, "\\n", 2); break;
      case '\r': sb_put(b, "\\r", 2); break;
      case '\t': sb_put(b, "\\t", 2); break;
      default:
        if (*p < 0x20) {
          snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)*p);
          sb_put(b, tmp, 6);
        } else {
          sb_put(b, (const char *)p, 1);
        }
    }
  }
  sb_put(b, "\"", 1);
}

static char *concat(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *s = malloc(na + nb + 1);
  if (s == NULL) return NULL;
  memcpy(s, a, na);
  memcpy(s + na, b, nb + 1);
  return s;
}

/* ---- 1. parse --------------------------------------------------------------------------- */

static int cmp_name(const void *a, const void *b, const quant *q) {
  return strcmp(q->t[*(const size_t *)a].name, q->t[*(const size_t *)b].name);
}

/* qsort has no context argument: the comparators read this. */
static const quant *sort_ctx;

static int cmp_by_name(const void *a, const void *b) { return cmp_name(a, b, sort_ctx); }

static int cmp_by_offset(const void *a, const void *b) {
  const in_tensor *x = &sort_ctx->t[*(const size_t *)a], *y = &sort_ctx->t[*(const size_t *)b];
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int parse_tensor(quant *q, const cJSON *item, in_tensor *t) {
  t->name = item->string;
  t->job = -1;
  if (!cJSON_IsObject(item))
    return failf(q, "%s: tensor '%s': its header entry is not a JSON object", q->in_path, t->name);
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsString(dtype))
    return failf(q, "%s: tensor '%s': \"dtype\" missing or not a string", q->in_path, t->name);
  if ((t->dtype = st_dtype_find(dtype->valuestring)) < 0)
    return failf(q, "%s: tensor '%s': unknown dtype \"%s\"", q->in_path, t->name,
                 dtype->valuestring);
  if (!cJSON_IsArray(shape))
    return failf(q, "%s: tensor '%s': \"shape\" missing or not an array", q->in_path, t->name);
  t->ndim = cJSON_GetArraySize(shape);
  t->shape = malloc(sizeof *t->shape * (size_t)(t->ndim > 0 ? t->ndim : 1));
  if (t->shape == NULL) return failf(q, "out of memory");
  int d = 0;
  for (const cJSON *v = shape->child; v != NULL; v = v->next, d++)
    if (!json_u64(v, &t->shape[d]))
      return failf(q, "%s: tensor '%s': shape[%d] is not a non-negative integer", q->in_path,
                   t->name, d);
  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
    return failf(q, "%s: tensor '%s': \"data_offsets\" missing or not an array [begin, end]",
                 q->in_path, t->name);
  if (!json_u64(offsets->child, &t->begin) || !json_u64(offsets->child->next, &t->end))
    return failf(q, "%s: tensor '%s': data_offsets are not non-negative integers", q->in_path,
                 t->name);
  if (t->end < t->begin)
    return failf(q,
                 "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                 q->in_path, t->name, t->begin, t->end);
  return 0;
}

/* Byte length of a tensor from its shape and dtype; -1 on overflow or a
 * sub-byte tensor that is not a whole number of bytes. */
static int tensor_bytes(quant *q, const in_tensor *t, uint64_t *bytes) {
  uint64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    if (__builtin_mul_overflow(n, t->shape[d], &n))
      return failf(q, "%s: tensor '%s': the shape's element count overflows", q->in_path, t->name);
  uint64_t bits;
  if (__builtin_mul_overflow(n, (uint64_t)st_dtypes[t->dtype].bits, &bits))
    return failf(q, "%s: tensor '%s': the byte length overflows", q->in_path, t->name);
  if (bits % 8 != 0)
    return failf(q, "%s: tensor '%s': %" PRIu64 " elements of %s are not a whole number of bytes",
                 q->in_path, t->name, n, st_dtypes[t->dtype].name);
  *bytes = bits / 8;
  return 0;
}

static int parse_metadata(quant *q, const cJSON *m) {
  if (q->metadata_seen++) return failf(q, "%s: header: \"__metadata__\" appears twice", q->in_path);
  if (cJSON_IsNull(m)) return 0; /* readers take null for "no metadata" */
  if (!cJSON_IsObject(m))
    return failf(q, "%s: header: \"__metadata__\" is not a JSON object", q->in_path);
  for (const cJSON *e = m->child; e != NULL; e = e->next) {
    if (!cJSON_IsString(e))
      return failf(q,
                   "%s: header: __metadata__ entry '%s' is not a string (safetensors metadata maps "
                   "strings to strings)",
                   q->in_path, e->string);
    for (const cJSON *f = m->child; f != e; f = f->next)
      if (strcmp(f->string, e->string) == 0)
        return failf(q, "%s: header: __metadata__ key '%s' appears twice", q->in_path, e->string);
  }
  q->metadata = m;
  return 0;
}

static int parse_input(quant *q) {
  q->fd = open(q->in_path, O_RDONLY | O_CLOEXEC);
  if (q->fd < 0) return failf(q, "%s: cannot open: %s", q->in_path, strerror(errno));
  struct stat st;
  if (fstat(q->fd, &st) != 0) return failf(q, "%s: cannot stat: %s", q->in_path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return failf(q, "%s: not a regular file", q->in_path);
  q->file_size = (uint64_t)st.st_size;

  // ---- header length and header bytes
  if (q->file_size < 8)
    return failf(
        q,
        "%s: %" PRIu64
        " bytes, too short for a safetensors file (it starts with an 8-byte header length)",
        q->in_path, q->file_size);
  unsigned char len8[8];
  if (read_at(q, len8, 8, 0, "the header length")) return -1;
  q->header_len = le64(len8);
  if (q->header_len > MAX_HEADER_BYTES)
    return failf(q,
                 "%s: header length %" PRIu64
                 " is over the safetensors limit of %u bytes (not a safetensors file?)",
                 q->in_path, q->header_len, MAX_HEADER_BYTES);
  if (q->header_len > q->file_size - 8)
    return failf(q,
                 "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64
                 " bytes follow the length): truncated, or not a safetensors file",
                 q->in_path, q->header_len, q->file_size - 8);
  if (q->header_len < 2)
    return failf(q, "%s: header length %" PRIu64 " is too short for a JSON object", q->in_path,
                 q->header_len);
  q->data_len = q->file_size - 8 - q->header_len;
  size_t hn = (size_t)q->header_len;
  q->header = malloc(hn + 1);
  if (q->header == NULL) return failf(q, "out of memory (header of %zu bytes)", hn);
  if (read_at(q, q->header, hn, 8, "the header")) return -1;
  q->header[hn] = '\0';

  // ---- JSON
  size_t bad = utf8_invalid_at((const unsigned char *)q->header, hn);
  if (bad < hn)
    return failf(q, "%s: header: not valid UTF-8 (byte %zu of %zu)", q->in_path, bad, hn);
  // A \u0000 escape would end a name early (C strings): refuse rather than
  // rename silently. Backslashes only occur in strings; skip escaped pairs.
  for (size_t i = 0; i + 1 < hn; i++)
    if (q->header[i] == '\\') {
      if (i + 5 < hn && memcmp(q->header + i + 1, "u0000", 5) == 0)
        return failf(q,
                     "%s: header: a string holds a NUL character (\\u0000 at byte %zu), which "
                     "ingot quantize cannot carry",
                     q->in_path, i);
      i++;
    }
  const char *end = NULL;
  q->root = cJSON_ParseWithLengthOpts(q->header, hn, &end, 0);
  if (q->root == NULL) {
    size_t at =
        (end != NULL && end >= q->header && end <= q->header + hn) ? (size_t)(end - q->header) : 0;
    size_t last = hn; /* one past the last non-blank byte */
    while (last > 0 && (q->header[last - 1] == ' ' || q->header[last - 1] == '\t' ||
                        q->header[last - 1] == '\n' || q->header[last - 1] == '\r'))
      last--;
    if (at + 1 >= last)
      return failf(
          q,
          "%s: header: invalid JSON: it ends before the top-level object is complete (%zu bytes)",
          q->in_path, hn);
    char near[48];
    excerpt(q->header, hn, at, near);
    return failf(q, "%s: header: invalid JSON at byte %zu of %zu (near \"%s\")", q->in_path, at, hn,
                 near);
  }
  for (const char *p = end; p < q->header + hn; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      char near[48];
      excerpt(q->header, hn, (size_t)(p - q->header), near);
      return failf(q, "%s: header: unexpected bytes after the JSON object at byte %zu (\"%s\")",
                   q->in_path, (size_t)(p - q->header), near);
    }
  if (!cJSON_IsObject(q->root))
    return failf(q, "%s: header: the JSON is not an object", q->in_path);

  // ---- entries
  size_t n = 0;
  for (const cJSON *e = q->root->child; e != NULL; e = e->next)
    if (strcmp(e->string, "__metadata__") != 0) n++;
  q->t = calloc(n ? n : 1, sizeof *q->t);
  q->by_name = calloc(n ? n : 1, sizeof *q->by_name);
  if (q->t == NULL || q->by_name == NULL) return failf(q, "out of memory");
  for (const cJSON *e = q->root->child; e != NULL; e = e->next) {
    if (strcmp(e->string, "__metadata__") == 0) {
      if (parse_metadata(q, e)) return -1;
      continue;
    }
    if (parse_tensor(q, e, &q->t[q->nt++])) return -1;
  }

  // ---- unique names
  for (size_t i = 0; i < q->nt; i++) q->by_name[i] = i;
  sort_ctx = q;
  qsort(q->by_name, q->nt, sizeof *q->by_name, cmp_by_name);
  for (size_t i = 1; i < q->nt; i++)
    if (strcmp(q->t[q->by_name[i]].name, q->t[q->by_name[i - 1]].name) == 0)
      return failf(q, "%s: header: tensor name '%s' appears twice", q->in_path,
                   q->t[q->by_name[i]].name);

  // ---- byte lengths and offsets
  for (size_t i = 0; i < q->nt; i++) {
    const in_tensor *t = &q->t[i];
    if (t->end > q->data_len)
      return failf(q,
                   "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                   "] reach past the end of the data section (%" PRIu64
                   " bytes): the file is truncated or the offsets are wrong",
                   q->in_path, t->name, t->begin, t->end, q->data_len);
    uint64_t bytes = 0;
    if (tensor_bytes(q, t, &bytes)) return -1;
    if (bytes != t->end - t->begin)
      return failf(q,
                   "%s: tensor '%s': shape and dtype %s give %" PRIu64
                   " bytes, but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                   q->in_path, t->name, st_dtypes[t->dtype].name, bytes, t->begin, t->end,
                   t->end - t->begin);
  }
  size_t *by_offset = malloc(sizeof *by_offset * (q->nt ? q->nt : 1));
  if (by_offset == NULL) return failf(q, "out of memory");
  for (size_t i = 0; i < q->nt; i++) by_offset[i] = i;
  qsort(by_offset, q->nt, sizeof *by_offset, cmp_by_offset);
  uint64_t covered = 0;
  int rc = 0;
  for (size_t k = 0; k < q->nt && rc == 0; k++) {
    in_tensor *t = &q->t[by_offset[k]];
    t->order = k;
    if (t->begin < covered)
      rc = failf(q,
                 "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                 "] overlap tensor '%s' [%" PRIu64 ", %" PRIu64 "]",
                 q->in_path, t->name, t->begin, t->end, q->t[by_offset[k - 1]].name,
                 q->t[by_offset[k - 1]].begin, q->t[by_offset[k - 1]].end);
    else if (t->begin > covered)
      rc = failf(
          q,
          "%s: data bytes [%" PRIu64 ", %" PRIu64
          ") belong to no tensor (before tensor '%s'): the offsets do not cover the data section",
          q->in_path, covered, t->begin, t->name);
    covered = t->end;
  }
  free(by_offset);
  if (rc) return rc;
  if (covered != q->data_len)
    return failf(q,
                 "%s: the tensors cover %" PRIu64 " data bytes but the data section has %" PRIu64
                 " (trailing bytes belong to no tensor)",
                 q->in_path, covered, q->data_len);
  return 0;
}

static int find_tensor(const quant *q, const char *name) {
  size_t lo = 0, hi = q->nt;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(q->t[q->by_name[mid]].name, name);
    if (c == 0) return (int)q->by_name[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

/* ---- 2. plan ------------------------------------------------------------------------------ */

static int quantizable(const in_tensor *t) {
  return t->ndim == 2 && st_dtypes[t->dtype].ingot != INGOT_DTYPE_INVALID;
}

static int add_job(quant *q, int src0, int src1, const char *name) {
  const in_tensor *t = &q->t[src0];
  qjob *j = &q->jobs[q->nj];
  memset(j, 0, sizeof *j);
  j->src[0] = src0;
  j->src[1] = src1;
  j->name = malloc(strlen(name) + 1);
  if (j->name == NULL) return failf(q, "out of memory");
  strcpy(j->name, name);
  q->nj++;
  if (t->shape[0] > (uint64_t)INT64_MAX / 2 || t->shape[1] > (uint64_t)INT64_MAX)
    return failf(q, "%s: tensor '%s': shape too large", q->in_path, t->name);
  j->rows = (int64_t)t->shape[0] * (src1 >= 0 ? 2 : 1);
  j->cols = (int64_t)t->shape[1];
  if (ingot_nvfp4_scale_shape(j->rows, j->cols, &j->scale_rows, &j->scale_cols) != INGOT_OK)
    return failf(q, "%s: tensor '%s': %s", q->in_path, t->name, ingot_last_error(NULL));
  j->values_bytes = (uint64_t)j->rows * (uint64_t)(j->cols / 2);
  j->scales_bytes = (uint64_t)j->scale_rows * (uint64_t)j->scale_cols;
  return 0;
}

static int plan_jobs(quant *q) {
  size_t max_jobs = q->nt + (size_t)q->n_gate_up;
  q->jobs = calloc(max_jobs ? max_jobs : 1, sizeof *q->jobs);
  if (q->jobs == NULL) return failf(q, "out of memory");

  // ---- --gate-up groups (first: their tensors are not quantized alone)
  for (int g = 0; g < q->n_gate_up; g++) {
    const char *gn = q->gate_up[3 * g], *un = q->gate_up[3 * g + 1], *on = q->gate_up[3 * g + 2];
    int gi = find_tensor(q, gn), ui = find_tensor(q, un);
    if (gi < 0) return failf(q, "--gate-up: %s has no tensor named '%s'", q->in_path, gn);
    if (ui < 0) return failf(q, "--gate-up: %s has no tensor named '%s'", q->in_path, un);
    if (gi == ui) return failf(q, "--gate-up: '%s' is both the gate and the up tensor", gn);
    for (int k = 0; k < 2; k++) {
      const in_tensor *t = &q->t[k ? ui : gi];
      if (t->role != ROLE_COPY)
        return failf(q, "--gate-up: tensor '%s' is already used by another --gate-up", t->name);
      if (!quantizable(t))
        return failf(q,
                     "--gate-up: tensor '%s' is %s with %d dimensions; expected a 2-D BF16, F16 or "
                     "F32 tensor",
                     t->name, st_dtypes[t->dtype].name, t->ndim);
    }
    const in_tensor *gt = &q->t[gi], *ut = &q->t[ui];
    if (gt->dtype != ut->dtype)
      return failf(q, "--gate-up: '%s' is %s but '%s' is %s; they must have the same dtype", gn,
                   st_dtypes[gt->dtype].name, un, st_dtypes[ut->dtype].name);
    if (gt->shape[0] != ut->shape[0] || gt->shape[1] != ut->shape[1])
      return failf(q,
                   "--gate-up: '%s' is [%" PRIu64 ", %" PRIu64 "] but '%s' is [%" PRIu64
                   ", %" PRIu64 "]; they must have the same shape [H, K]",
                   gn, gt->shape[0], gt->shape[1], un, ut->shape[0], ut->shape[1]);
    if (gt->shape[1] % 16 != 0)
      return failf(
          q, "--gate-up: '%s' has %" PRIu64 " columns, not a multiple of 16 (the NVFP4 block)", gn,
          gt->shape[1]);
    q->t[gi].role = ROLE_GATE;
    q->t[ui].role = ROLE_UP;
    q->t[gi].job = q->t[ui].job = (int)q->nj;
    if (add_job(q, gi, ui, on)) return -1;
  }

  // ---- --pattern matches
  int *hits = calloc((size_t)(q->n_patterns ? q->n_patterns : 1), sizeof *hits);
  if (hits == NULL) return failf(q, "out of memory");
  int rc = 0;
  for (size_t k = 0; k < q->nt && rc == 0; k++) {
    in_tensor *t = &q->t[q->by_name[k]];
    int matched = 0;
    for (int p = 0; p < q->n_patterns; p++)
      if (fnmatch(q->patterns[p], t->name, 0) == 0) {
        hits[p]++;
        matched = 1;
      }
    if (!matched || t->role != ROLE_COPY) continue;
    if (!quantizable(t)) {
      info(q,
           "  copy      %s (matched, but %s with %d dimensions: not a 2-D BF16/F16/F32 tensor)\n",
           t->name, st_dtypes[t->dtype].name, t->ndim);
      continue;
    }
    if (t->shape[1] % 16 != 0) {
      rc = failf(q,
                 "tensor '%s' [%" PRIu64 ", %" PRIu64 "] matches a --pattern but its %" PRIu64
                 " columns are not a multiple of 16 (the NVFP4 block); narrow the pattern",
                 t->name, t->shape[0], t->shape[1], t->shape[1]);
      break;
    }
    t->role = ROLE_QUANT;
    t->job = (int)q->nj;
    rc = add_job(q, (int)q->by_name[k], -1, t->name);
  }
  for (int p = 0; p < q->n_patterns && rc == 0; p++)
    if (hits[p] == 0)
      fprintf(stderr, "ingot quantize: warning: --pattern '%s' matches no tensor of %s\n",
              q->patterns[p], q->in_path);
  free(hits);
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every output name once: copies keep theirs; jobs add three. */
static int check_output_names(quant *q) {
  size_t n = 0, cap = q->nt + 3 * q->nj, nowned = 0;
  const char **names = malloc(sizeof *names * (cap ? cap : 1));
  char **owned = malloc(sizeof *owned * (3 * q->nj + 1));
  int rc = 0;
  if (names == NULL || owned == NULL) rc = failf(q, "out of memory");
  for (size_t i = 0; i < q->nt && rc == 0; i++)
    if (q->t[i].role == ROLE_COPY) names[n++] = q->t[i].name;
  static const char *const suffixes[] = {SUFFIX_VALUES, SUFFIX_SCALES, SUFFIX_GS};
  for (size_t j = 0; j < q->nj && rc == 0; j++)
    for (int s = 0; s < 3 && rc == 0; s++) {
      char *name = concat(q->jobs[j].name, suffixes[s]);
      if (name == NULL) {
        rc = failf(q, "out of memory");
        break;
      }
      owned[nowned++] = name;
      names[n++] = name;
    }
  if (rc == 0) {
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 1; i < n; i++)
      if (strcmp(names[i], names[i - 1]) == 0) {
        rc = failf(q,
                   "output tensor name '%s' would appear twice (an input tensor of that name is "
                   "kept, or two quantized tensors share it): rename, or narrow --pattern",
                   names[i]);
        break;
      }
  }
  for (size_t i = 0; i < nowned; i++) free(owned[i]);
  free(owned);
  free(names);
  return rc;
}

static int cmp_out(const void *a, const void *b) {
  const out_item *x = a, *y = b;
  if (x->align != y->align) return x->align > y->align ? -1 : 1;
  if (x->order != y->order) return x->order < y->order ? -1 : 1;
  return 0;
}

static uint64_t unit_bytes(const qjob *j) { return j->values_bytes + j->scales_bytes + 4; }

/* Lays out the data section. Items are sorted by decreasing alignment (a
 * quantized unit counts as 4: its values and scales are multiples of 8
 * bytes, its global scale is F32), then by the source's position in IN, so
 * every tensor's data stays aligned to its element size. */
static int plan_layout(quant *q) {
  size_t n = 0;
  for (size_t i = 0; i < q->nt; i++) n += q->t[i].role == ROLE_COPY;
  n += q->nj;
  q->outs = calloc(n ? n : 1, sizeof *q->outs);
  if (q->outs == NULL) return failf(q, "out of memory");
  for (size_t i = 0; i < q->nt; i++)
    if (q->t[i].role == ROLE_COPY) {
      out_item *o = &q->outs[q->no++];
      o->kind = OUT_COPY;
      o->index = (int)i;
      o->align = st_dtype_align(q->t[i].dtype);
      o->order = q->t[i].order;
    }
  for (size_t j = 0; j < q->nj; j++) {
    out_item *o = &q->outs[q->no++];
    o->kind = OUT_UNIT;
    o->index = (int)j;
    o->align = 4;
    o->order = q->t[q->jobs[j].src[0]].order;
  }
  qsort(q->outs, q->no, sizeof *q->outs, cmp_out);
  uint64_t off = 0;
  for (size_t k = 0; k < q->no; k++) {
    out_item *o = &q->outs[k];
    o->begin = off;
    uint64_t size = o->kind == OUT_COPY ? q->t[o->index].end - q->t[o->index].begin
                                        : unit_bytes(&q->jobs[o->index]);
    if (__builtin_add_overflow(off, size, &off)) return failf(q, "output too large");
  }
  q->out_data_len = off;
  return 0;
}

/* The "ingot.quantize" metadata value: a JSON object, as a string. */
static char *metadata_record(const quant *q) {
  cJSON *rec = cJSON_CreateObject();
  if (rec == NULL) return NULL;
  int ok =
      cJSON_AddStringToObject(rec, "tool", "ingot quantize") != NULL &&
      cJSON_AddStringToObject(rec, "version", ingot_version()) != NULL &&
      cJSON_AddStringToObject(rec, "format", "nvfp4") != NULL &&
      cJSON_AddStringToObject(
          rec, "values", "U8 [rows, cols/2]: E2M1 codes, the even element in the low nibble") !=
          NULL &&
      cJSON_AddStringToObject(rec, "scales",
                              "F8_E4M3 [round_up(rows,128), round_up(cols/16,4)]: one scale per 16 "
                              "elements of a row, CUTLASS/FlashInfer 128x4 swizzle, padding 0") !=
          NULL &&
      cJSON_AddStringToObject(rec, "global_scale",
                              "F32 [1]: the encode multiplier gs; x = e2m1 * scale / gs") != NULL;
  cJSON *quantized = ok ? cJSON_AddArrayToObject(rec, "quantized") : NULL;
  cJSON *gate_up = quantized ? cJSON_AddArrayToObject(rec, "gate_up") : NULL;
  ok = gate_up != NULL;
  for (size_t j = 0; j < q->nj && ok; j++) {
    const qjob *job = &q->jobs[j];
    if (job->src[1] < 0) {
      cJSON *s = cJSON_CreateString(job->name);
      ok = s != NULL && cJSON_AddItemToArray(quantized, s);
    } else {
      cJSON *g = cJSON_CreateObject();
      ok = g != NULL && cJSON_AddItemToArray(gate_up, g) &&
           cJSON_AddStringToObject(g, "out", job->name) != NULL &&
           cJSON_AddStringToObject(g, "gate", q->t[job->src[0]].name) != NULL &&
           cJSON_AddStringToObject(g, "up", q->t[job->src[1]].name) != NULL;
    }
  }
  char *s = ok ? cJSON_PrintUnformatted(rec) : NULL;
  cJSON_Delete(rec);
  return s;
}

static void header_entry(strbuf *b, const char *name, const char *suffix, const char *dtype,
                         int ndim, const uint64_t *shape, uint64_t begin, uint64_t end) {
  sb_put(b, ",", 1);
  if (suffix != NULL) {
    char *full = concat(name, suffix);
    if (full == NULL) {
      b->oom = 1;
      return;
    }
    sb_json_string(b, full);
    free(full);
  } else {
    sb_json_string(b, name);
  }
  sb_puts(b, ":{\"dtype\":");
  sb_json_string(b, dtype);
  sb_puts(b, ",\"shape\":[");
  for (int d = 0; d < ndim; d++) {
    if (d) sb_put(b, ",", 1);
    sb_u64(b, shape[d]);
  }
  sb_puts(b, "],\"data_offsets\":[");
  sb_u64(b, begin);
  sb_put(b, ",", 1);
  sb_u64(b, end);
  sb_puts(b, "]}");
}

/* The output header: __metadata__ first (IN's entries in order, ours last),
 * then the tensors in data order; padded with spaces to a multiple of 8. */
static int build_header(quant *q) {
  strbuf b = {0};
  char *record = metadata_record(q);
  if (record == NULL) return failf(q, "out of memory");
  sb_puts(&b, "{\"__metadata__\":{");
  int first = 1;
  if (q->metadata != NULL)
    for (const cJSON *e = q->metadata->child; e != NULL; e = e->next) {
      if (strcmp(e->string, METADATA_KEY) == 0) continue; /* replaced below */
      if (!first) sb_put(&b, ",", 1);
      first = 0;
      sb_json_string(&b, e->string);
      sb_put(&b, ":", 1);
      sb_json_string(&b, e->valuestring);
    }
  if (!first) sb_put(&b, ",", 1);
  sb_json_string(&b, METADATA_KEY);
  sb_put(&b, ":", 1);
  sb_json_string(&b, record);
  cJSON_free(record);
  sb_put(&b, "}", 1);
  for (size_t k = 0; k < q->no; k++) {
    const out_item *o = &q->outs[k];
    if (o->kind == OUT_COPY) {
      const in_tensor *t = &q->t[o->index];
      header_entry(&b, t->name, NULL, st_dtypes[t->dtype].name, t->ndim, t->shape, o->begin,
                   o->begin + (t->end - t->begin));
      continue;
    }
    const qjob *j = &q->jobs[o->index];
    uint64_t vshape[2] = {(uint64_t)j->rows, (uint64_t)j->cols / 2};
    uint64_t sshape[2] = {(uint64_t)j->scale_rows, (uint64_t)j->scale_cols};
    uint64_t gshape[1] = {1};
    uint64_t v0 = o->begin, s0 = v0 + j->values_bytes, g0 = s0 + j->scales_bytes;
    header_entry(&b, j->name, SUFFIX_VALUES, "U8", 2, vshape, v0, s0);
    header_entry(&b, j->name, SUFFIX_SCALES, "F8_E4M3", 2, sshape, s0, g0);
    header_entry(&b, j->name, SUFFIX_GS, "F32", 1, gshape, g0, g0 + 4);
  }
  sb_put(&b, "}", 1);
  while (!b.oom && b.len % 8 != 0) sb_put(&b, " ", 1);
  if (b.oom) {
    free(b.p);
    return failf(q, "out of memory (output header)");
  }
  if (b.len > MAX_HEADER_BYTES) {
    free(b.p);
    return failf(q, "the output header would be %zu bytes, over the safetensors limit of %u", b.len,
                 MAX_HEADER_BYTES);
  }
  q->out_header = b.p;
  q->out_header_len = b.len;
  return 0;
}

/* ---- 3. compute ------------------------------------------------------------------------ */

static const char *dtype_label(const quant *q, const qjob *j) {
  return st_dtypes[q->t[j->src[0]].dtype].name;
}

/* Runs the job's ops on q->ctx; every pointer is in the context's memory. */
static int run_ops(quant *q, const qjob *j, void *x0, void *x1, float *gs, uint8_t *values,
                   uint8_t *scales, uint32_t *count) {
  const in_tensor *t = &q->t[j->src[0]];
  ingot_dtype dt = st_dtypes[t->dtype].ingot;
  int64_t h = (int64_t)t->shape[0], k = j->cols;
  ingot_tensor tg = ingot_tensor_1d(gs, INGOT_DTYPE_F32, 1);
  ingot_tensor tv = ingot_tensor_2d(values, INGOT_DTYPE_U8, j->rows, k / 2, k / 2);
  ingot_tensor ts =
      ingot_tensor_2d(scales, INGOT_DTYPE_F8_E4M3, j->scale_rows, j->scale_cols, j->scale_cols);
  ingot_tensor tc = ingot_tensor_1d(count, INGOT_DTYPE_U32, 1);
  ingot_status st;
  if (j->src[1] >= 0) {
    ingot_tensor tgate = ingot_tensor_2d(x0, dt, h, k, k);
    ingot_tensor tup = ingot_tensor_2d(x1, dt, h, k, k);
    st = ingot_nvfp4_quantize_gate_up(
        q->ctx, &tgate, &tup, &tg, INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE, &tv, &ts, &tc, NULL);
  } else {
    ingot_tensor tx = ingot_tensor_2d(x0, dt, h, k, k);
    st = ingot_nvfp4_global_scale(q->ctx, &tx, &tg, NULL);
    if (st == INGOT_OK) st = ingot_nvfp4_quantize(q->ctx, &tx, &tg, &tv, &ts, &tc, NULL);
  }
  if (st != INGOT_OK)
    return failf(q, "quantizing '%s': %s (%s)", j->name, ingot_last_error(q->ctx),
                 ingot_status_name(st));
  return 0;
}

#ifdef INGOT_WITH_CUDA
static int cuda_check(quant *q, cudaError_t e, const char *what, const qjob *j) {
  if (e == cudaSuccess) return 0;
  return failf(q, "quantizing '%s': %s: %s", j->name, what, cudaGetErrorString(e));
}

/* The job on the GPU: copies in, ops on the legacy default stream, copies
 * out (cudaMemcpy waits for the ops). */
static int run_ops_cuda(quant *q, const qjob *j, const void *h0, const void *h1, size_t in_bytes,
                        float *gs, uint8_t *values, uint8_t *scales, uint32_t *count) {
  void *d[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
  size_t sizes[6] = {in_bytes,
                     h1 ? in_bytes : 1,
                     sizeof(float),
                     (size_t)j->values_bytes,
                     (size_t)j->scales_bytes,
                     sizeof(uint32_t)};
  int rc = 0;
  for (int i = 0; i < 6 && rc == 0; i++)
    rc = cuda_check(q, cudaMalloc(&d[i], sizes[i] ? sizes[i] : 1), "cudaMalloc", j);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(d[0], h0, in_bytes, cudaMemcpyHostToDevice), "copy in", j);
  if (rc == 0 && h1 != NULL)
    rc = cuda_check(q, cudaMemcpy(d[1], h1, in_bytes, cudaMemcpyHostToDevice), "copy in", j);
  if (rc == 0) rc = cuda_check(q, cudaMemset(d[5], 0, sizeof(uint32_t)), "cudaMemset", j);
  if (rc == 0) rc = run_ops(q, j, d[0], h1 ? d[1] : NULL, d[2], d[3], d[4], d[5]);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(gs, d[2], sizeof(float), cudaMemcpyDeviceToHost), "copy out", j);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(values, d[3], sizes[3], cudaMemcpyDeviceToHost), "copy out", j);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(scales, d[4], sizes[4], cudaMemcpyDeviceToHost), "copy out", j);
  if (rc == 0)
    rc = cuda_check(q, cudaMemcpy(count, d[5], sizeof(uint32_t), cudaMemcpyDeviceToHost),
                    "copy out", j);
  if (rc == 0) rc = cuda_check(q, cudaGetLastError(), "kernel", j);
  for (int i = 0; i < 6; i++) cudaFree(d[i]);
  return rc;
}
#endif

/* Reads the job's sources, quantizes them and writes values, scales and the
 * global scale to fd. */
static int write_unit(quant *q, const qjob *j, int fd, const char *path) {
  const in_tensor *t0 = &q->t[j->src[0]];
  const in_tensor *t1 = j->src[1] >= 0 ? &q->t[j->src[1]] : NULL;
  uint64_t in_bytes64 = t0->end - t0->begin;
  if (in_bytes64 > SIZE_MAX || j->values_bytes > SIZE_MAX || j->scales_bytes > SIZE_MAX)
    return failf(q, "tensor '%s' is too large for this machine", t0->name);
  size_t in_bytes = (size_t)in_bytes64;
  uint64_t data0 = 8 + q->header_len;
  void *h0 = malloc(in_bytes ? in_bytes : 1);
  void *h1 = t1 ? malloc(in_bytes ? in_bytes : 1) : NULL;
  uint8_t *values = malloc(j->values_bytes ? (size_t)j->values_bytes : 1);
  uint8_t *scales = malloc(j->scales_bytes ? (size_t)j->scales_bytes : 1);
  float gs = 0.0f;
  uint32_t count = 0;
  int rc = 0;
  if (h0 == NULL || (t1 && h1 == NULL) || values == NULL || scales == NULL)
    rc = failf(q, "out of memory (tensor '%s')", t0->name);
  if (rc == 0) rc = read_at(q, h0, in_bytes, data0 + t0->begin, t0->name);
  if (rc == 0 && t1) rc = read_at(q, h1, in_bytes, data0 + t1->begin, t1->name);
  if (rc == 0) {
#ifdef INGOT_WITH_CUDA
    if (q->cuda)
      rc = run_ops_cuda(q, j, h0, h1, in_bytes, &gs, values, scales, &count);
    else
#endif
      rc = run_ops(q, j, h0, h1, &gs, values, scales, &count);
  }
  if (rc == 0) rc = write_all(q, fd, values, (size_t)j->values_bytes, path);
  if (rc == 0) rc = write_all(q, fd, scales, (size_t)j->scales_bytes, path);
  if (rc == 0) {
    unsigned char b[4];
    memcpy(b, &gs, 4); /* little-endian host (checked at start) */
    rc = write_all(q, fd, b, 4, path);
  }
  if (rc == 0) {
    if (t1)
      info(q,
           "  nvfp4     %s <- gate '%s' + up '%s' [%" PRIu64 ", %" PRIu64 "] %s -> [%" PRId64
           ", %" PRId64 "], global scale %.9g\n",
           j->name, t0->name, t1->name, t0->shape[0], t0->shape[1], dtype_label(q, j), j->rows,
           j->cols, (double)gs);
    else
      info(q, "  nvfp4     %s [%" PRId64 ", %" PRId64 "] %s, global scale %.9g\n", j->name, j->rows,
           j->cols, dtype_label(q, j), (double)gs);
    if (count != 0)
      fprintf(stderr,
              "ingot quantize: warning: '%s': %" PRIu32
              " NaN/Inf input elements (NaN encoded as 0, +-Inf as +-6 x the block scale)\n",
              j->name, count);
  }
  free(h0);
  free(h1);
  free(values);
  free(scales);
  return rc;
}

static int copy_tensor(quant *q, const in_tensor *t, int fd, const char *path, unsigned char *buf) {
  uint64_t off = 8 + q->header_len + t->begin, left = t->end - t->begin;
  while (left > 0) {
    size_t n = left > COPY_CHUNK ? COPY_CHUNK : (size_t)left;
    if (read_at(q, buf, n, off, t->name) || write_all(q, fd, buf, n, path)) return -1;
    off += n;
    left -= n;
  }
  return 0;
}

/* ---- 3. write ---------------------------------------------------------------------------- */

/* The temporary file, for the signal handler. */
static char tmp_path[4096];
static volatile sig_atomic_t tmp_live;

static void on_signal(int sig) {
  if (tmp_live) unlink(tmp_path);
  raise(sig); /* SA_RESETHAND: the default action now */
}

static void catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = (int)SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
}

static int open_backend(quant *q) {
  if (!q->force_cpu && ingot_backend_available(INGOT_BACKEND_CUDA)) {
    ingot_status st = ingot_context_create(INGOT_BACKEND_CUDA, q->device, &q->ctx);
    if (st == INGOT_OK) {
#ifdef INGOT_WITH_CUDA
      cudaError_t e = cudaSetDevice(q->device);
      if (e != cudaSuccess)
        return failf(q, "cudaSetDevice(%d): %s", q->device, cudaGetErrorString(e));
      q->cuda = 1;
      return 0;
#else
      ingot_context_destroy(q->ctx); /* a library with CUDA, a CLI without */
      q->ctx = NULL;
#endif
    } else if (q->device_given) {
      return failf(q, "--device %d: %s", q->device, ingot_last_error(NULL));
    } else {
      fprintf(stderr, "ingot quantize: warning: CUDA backend unusable (%s); using the CPU\n",
              ingot_last_error(NULL));
    }
  } else if (q->device_given) {
    return failf(q, "--device %d: the CUDA backend is not available here (see `ingot version`)",
                 q->device);
  }
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &q->ctx) != INGOT_OK)
    return failf(q, "CPU context: %s", ingot_last_error(NULL));
  return 0;
}

static int write_output(quant *q) {
  size_t plen = strlen(q->out_path);
  if (plen + sizeof TMP_SUFFIX > sizeof tmp_path)
    return failf(q, "%s: output path too long", q->out_path);
  memcpy(tmp_path, q->out_path, plen);
  memcpy(tmp_path + plen, TMP_SUFFIX, sizeof TMP_SUFFIX);
  catch_signals();
  int fd = mkstemp(tmp_path);
  if (fd < 0)
    return failf(q, "%s: cannot create the temporary file %s: %s", q->out_path, tmp_path,
                 strerror(errno));
  tmp_live = 1;
  mode_t mask = umask(0);
  umask(mask);
  unsigned char *buf = malloc(COPY_CHUNK);
  int rc = buf == NULL ? failf(q, "out of memory") : 0;
  if (rc == 0 && fchmod(fd, (mode_t)0666 & ~mask) != 0)
    rc = failf(q, "%s: chmod: %s", tmp_path, strerror(errno));
  if (rc == 0) {
    unsigned char len8[8];
    put_le64(len8, (uint64_t)q->out_header_len);
    rc = write_all(q, fd, len8, 8, tmp_path);
  }
  if (rc == 0) rc = write_all(q, fd, q->out_header, q->out_header_len, tmp_path);
  uint64_t written = 0;
  for (size_t k = 0; k < q->no && rc == 0; k++) {
    const out_item *o = &q->outs[k];
    if (o->begin != written) {
      rc = failf(q, "internal error: output item %zu at %" PRIu64 ", expected %" PRIu64, k, written,
                 o->begin);
      break;
    }
    if (o->kind == OUT_COPY) {
      const in_tensor *t = &q->t[o->index];
      rc = copy_tensor(q, t, fd, tmp_path, buf);
      written += t->end - t->begin;
    } else {
      rc = write_unit(q, &q->jobs[o->index], fd, tmp_path);
      written += unit_bytes(&q->jobs[o->index]);
    }
  }
  free(buf);
  if (rc == 0 && fsync(fd) != 0) rc = failf(q, "%s: fsync: %s", tmp_path, strerror(errno));
  if (close(fd) != 0 && rc == 0) rc = failf(q, "%s: close: %s", tmp_path, strerror(errno));
  if (rc == 0 && rename(tmp_path, q->out_path) != 0)
    rc = failf(q, "cannot rename %s to %s: %s", tmp_path, q->out_path, strerror(errno));
  if (rc != 0) {
    unlink(tmp_path);
    tmp_live = 0;
    return rc;
  }
  tmp_live = 0;
  // Make the rename durable: fsync the directory (best effort).
  char *slash = strrchr(tmp_path, '/');
  const char *dir = ".";
  if (slash != NULL) {
    *slash = '\0';
    dir = slash == tmp_path ? "/" : tmp_path;
  }
  int dfd = open(dir, O_RDONLY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return 0;
}

/* ---- main ------------------------------------------------------------------------------- */

static void quant_free(quant *q) {
  if (q->fd >= 0) close(q->fd);
  for (size_t i = 0; i < q->nt; i++) free(q->t[i].shape);
  for (size_t j = 0; j < q->nj; j++) free(q->jobs[j].name);
  free(q->t);
  free(q->by_name);
  free(q->jobs);
  free(q->outs);
  free(q->out_header);
  cJSON_Delete(q->root);
  free(q->header);
  ingot_context_destroy(q->ctx);
  free(q->patterns);
  free(q->gate_up);
}

static int PRINTF_LIKE(1, 2) usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ingot quantize: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(ingot quantize --help for usage)\n");
  va_end(ap);
  return 2;
}

/* Fills q's options; returns 0, or the exit status to return now. */
static int parse_args(quant *q, int argc, char **argv) {
  q->patterns = calloc((size_t)argc, sizeof *q->patterns);
  q->gate_up = calloc((size_t)argc, sizeof *q->gate_up);
  if (q->patterns == NULL || q->gate_up == NULL) {
    fprintf(stderr, "ingot quantize: out of memory\n");
    return 1;
  }
  const char *pos[2];
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      print_usage(stdout);
      return -1;
    } else if (strcmp(a, "-p") == 0 || strcmp(a, "--pattern") == 0) {
      if (i + 1 >= argc) return usage_error("%s needs a GLOB", a);
      q->patterns[q->n_patterns++] = argv[++i];
    } else if (strcmp(a, "--gate-up") == 0) {
      if (i + 3 >= argc) return usage_error("%s needs three names: GATE UP OUT", a);
      for (int k = 0; k < 3; k++) q->gate_up[3 * q->n_gate_up + k] = argv[i + 1 + k];
      q->n_gate_up++;
      i += 3;
    } else if (strcmp(a, "--cpu") == 0) {
      q->force_cpu = 1;
    } else if (strcmp(a, "--device") == 0) {
      if (i + 1 >= argc) return usage_error("%s needs a device number", a);
      char *end;
      errno = 0;
      long v = strtol(argv[++i], &end, 10);
      if (errno || *end || end == argv[i] || v < 0 || v > 1024)
        return usage_error("--device: '%s' is not a device number", argv[i]);
      q->device = (int)v;
      q->device_given = 1;
    } else if (strcmp(a, "--dry-run") == 0) {
      q->dry_run = 1;
    } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
      q->quiet = 1;
    } else if (a[0] == '-' && a[1] != '\0') {
      return usage_error("unknown option '%s'", a);
    } else {
      if (npos == 2) return usage_error("unexpected argument '%s' (IN and OUT already given)", a);
      pos[npos++] = a;
    }
  }
  if (npos != 2) return usage_error("%s", "needs IN.safetensors and OUT.safetensors");
  if (q->force_cpu && q->device_given)
    return usage_error("%s", "--cpu and --device exclude each other");
  q->in_path = pos[0];
  q->out_path = pos[1];
  return 0;
}

int quantize_main(int argc, char **argv) {
  quant q;
  memset(&q, 0, sizeof q);
  q.fd = -1;
  int status = parse_args(&q, argc, argv);
  if (status != 0) {
    quant_free(&q);
    return status < 0 ? 0 : status;
  }
  int rc = 0;
  if (!host_is_little_endian())
    rc = failf(&q, "this host is big-endian; safetensors is little-endian");
  if (rc == 0) rc = parse_input(&q);
  if (rc == 0) rc = plan_jobs(&q);
  if (rc == 0) rc = check_output_names(&q);
  if (rc == 0) rc = plan_layout(&q);
  if (rc == 0) rc = build_header(&q);
  if (rc == 0 && q.n_patterns == 0 && q.n_gate_up == 0)
    fprintf(stderr,
            "ingot quantize: note: no --pattern or --gate-up given: nothing is quantized (OUT is a "
            "copy of IN)\n");
  if (rc == 0 && q.dry_run) {
    for (size_t j = 0; j < q.nj; j++)
      info(&q, "  nvfp4     %s [%" PRId64 ", %" PRId64 "] %s%s\n", q.jobs[j].name, q.jobs[j].rows,
           q.jobs[j].cols, dtype_label(&q, &q.jobs[j]), q.jobs[j].src[1] >= 0 ? " (gate/up)" : "");
    info(&q,
         "dry run: %s -> %s: %zu tensors quantized, %zu copied, %" PRIu64
         " bytes; nothing written\n",
         q.in_path, q.out_path, q.nj, q.no - q.nj, 8 + (uint64_t)q.out_header_len + q.out_data_len);
  } else if (rc == 0) {
    rc = open_backend(&q);
    if (rc == 0) {
      info(&q, "ingot quantize: %s -> %s (%s backend)\n", q.in_path, q.out_path,
           q.cuda ? "cuda" : "cpu");
      rc = write_output(&q);
    }
    if (rc == 0)
      info(&q, "wrote %s: %zu tensors quantized, %zu copied, %" PRIu64 " bytes\n", q.out_path, q.nj,
           q.no - q.nj, 8 + (uint64_t)q.out_header_len + q.out_data_len);
  }
  if (rc != 0) fprintf(stderr, "ingot quantize: error: %s\n", q.err);
  quant_free(&q);
  return rc == 0 ? 0 : 1;
}

#endif /* INGOT_HAVE_CJSON */
