/*
 * The safetensors reader of the library's PLE table loader and of `ingot
 * quantize`: opens a file, reads the 8-byte header length and the JSON
 * header and checks everything a reader relies on: UTF-8, strict JSON,
 * dtypes, shapes, offsets in range and covering the data section exactly,
 * byte lengths, unique names and keys.
 *
 * Trust: none in the file. Every length, count and offset comes from it and
 * is checked before use; the tensors' data bytes are only copied. What it
 * accepts may be used as it is by its callers.
 *
 * JSON in two passes. First a strict check of the raw header bytes
 * (json_check below, which builds nothing), then a reader of the checked
 * text (the r_* functions below) that decodes what the format defines: the
 * tensor entries and the string metadata. The check accepts only RFC 8259 JSON
 * within the rules of the reference reader (safetensors' serde_json):
 * whitespace is space, tab, LF, CR; strings escape every control character
 * and pair their \u surrogates; numbers follow the RFC grammar (no leading
 * zeros, '+', bare '.' or 'e'); nesting is at most 128 deep (serde_json's
 * limit). Lenient readers differ exactly there (a raw NUL cuts a C string
 * short: another name; strtod reads -0, 1.000, 1e3 and 9007199254740993 as
 * integers, the last one rounded; duplicate keys answer lookups with the
 * first), so a file could otherwise mean one thing here and another to other
 * readers. Where the format needs an integer (shape and data_offsets) the
 * check also demands plain digits, at most 2^53. Duplicate keys are refused
 * after the check: in the top level, __metadata__ and each tensor entry
 * (sort + adjacent compare, O(n log n)). \u0000 is refused too (a C string
 * cannot carry it). The second pass never meets a syntax error, so it is
 * short: it only walks tokens the check has accepted.
 *
 * No global state: two threads may read two files at once.
 */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64 /* files over 2 GiB where off_t would be 32-bit */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "safetensors_read.h"

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
const int st_n_dtypes = N_ST_DTYPES;

int st_dtype_find(const char *name) {
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
  if (f->fd < 0) { /* st_open_memory (or a header alone: no bytes) */
    if (f->memory == NULL || off > f->file_size || n > f->file_size - off)
      return st_fail(f->err,
                     "%s: reading %s: %zu bytes at byte %" PRIu64 " are past the end (%" PRIu64
                     " bytes)",
                     f->path, what, n, off, f->memory == NULL ? 0 : f->file_size);
    if (n > 0) memcpy(p, f->memory + off, n);
    return 0;
  }
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

size_t st_utf8_invalid_at(const unsigned char *s, size_t n) {
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

/* A short, printable excerpt of the header around byte `at`, for messages. */
static void excerpt(const char *s, size_t n, size_t at, char out[48]) {
  size_t k = 0;
  for (size_t i = at; i < n && k < 40; i++, k++) {
    unsigned char c = (unsigned char)s[i];
    out[k] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  out[k] = '\0';
}

/* ---- strict JSON (the first pass; see the top of the file) ----------------------------- */

#define JSON_MAX_DEPTH 128 /* serde_json's recursion limit */

typedef struct {
  st_file *f;
  const unsigned char *s;
  size_t n;
  int depth;
} jcheck;

/* What a value is to the reader: for the integer rule and the messages. */
enum { J_ANY, J_TOP, J_ENTRY, J_INTS, J_INT };
typedef struct {
  int kind;          /* J_ENTRY: a tensor's entry; J_INTS: its shape or data_offsets;
                        J_INT: an element of those */
  size_t name_at;    /* J_ENTRY, J_INTS, J_INT: the opening quote of the tensor's name */
  const char *field; /* J_INTS, J_INT: "shape" or "data_offsets" */
  int index;         /* J_INT: the element's index */
} jwhere;

static const jwhere j_any = {J_ANY, 0, NULL, 0};

static int j_is_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int j_is_digit(unsigned c) { return c >= '0' && c <= '9'; }

static int j_truncated(const jcheck *j) {
  return st_fail(
      j->f->err,
      "%s: header: invalid JSON: it ends before the top-level object is complete (%zu bytes)",
      j->f->path, j->n);
}

static int j_control(const jcheck *j, size_t at) {
  return st_fail(j->f->err,
                 "%s: header: control byte 0x%02x at byte %zu, outside a string (JSON allows only "
                 "space, tab, line feed and carriage return between tokens)",
                 j->f->path, (unsigned)j->s[at], at);
}

/* The generic syntax error at byte `at`. */
static int j_syntax(const jcheck *j, size_t at) {
  if (at >= j->n) return j_truncated(j);
  if (j->s[at] < 0x20 && !j_is_ws(j->s[at])) return j_control(j, at);
  char near[48];
  excerpt((const char *)j->s, j->n, at, near);
  return st_fail(j->f->err, "%s: header: invalid JSON at byte %zu of %zu (near \"%s\")",
                 j->f->path, at, j->n, near);
}

/* Skips JSON whitespace; any other control byte is an error. */
static int j_ws(const jcheck *j, size_t *pi) {
  size_t i = *pi;
  while (i < j->n && j->s[i] <= 0x20) {
    if (!j_is_ws(j->s[i])) return j_control(j, i);
    i++;
  }
  *pi = i;
  return 0;
}

static int j_hex4(const jcheck *j, size_t at, unsigned *v) {
  if (at > j->n || j->n - at < 4) return 0;
  unsigned x = 0;
  for (size_t k = 0; k < 4; k++) {
    unsigned c = j->s[at + k], d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return 0;
    x = x << 4 | d;
  }
  *v = x;
  return 1;
}

/* The string at *pi (its opening quote); *pi moves past its closing quote. */
static int j_string(const jcheck *j, size_t *pi) {
  const char *path = j->f->path;
  size_t i = *pi + 1;
  for (;;) {
    if (i >= j->n) return j_truncated(j);
    unsigned c = j->s[i];
    if (c == '"') break;
    if (c < 0x20)
      return st_fail(j->f->err,
                     "%s: header: raw control character 0x%02x%s in a string at byte %zu (JSON "
                     "strings must escape it)",
                     path, c, c == 0 ? " (NUL)" : "", i);
    if (c != '\\') {
      i++;
      continue;
    }
    if (i + 1 >= j->n) return j_truncated(j);
    unsigned e = j->s[i + 1], v, w;
    switch (e) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        i += 2;
        continue;
      case 'u':
        break;
      default: {
        char near[48];
        excerpt((const char *)j->s, j->n, i, near);
        return st_fail(j->f->err, "%s: header: invalid escape at byte %zu (near \"%s\")", path, i,
                       near);
      }
    }
    if (!j_hex4(j, i + 2, &v)) {
      if (j->n - i < 6) return j_truncated(j);
      char near[48];
      excerpt((const char *)j->s, j->n, i, near);
      return st_fail(j->f->err,
                     "%s: header: invalid \\u escape at byte %zu (near \"%s\"): four hex digits "
                     "must follow",
                     path, i, near);
    }
    if (v == 0)
      return st_fail(j->f->err,
                     "%s: header: a string holds a NUL character (\\u0000 at byte %zu), which "
                     "ingot cannot carry",
                     path, i);
    if (v >= 0xdc00 && v <= 0xdfff)
      return st_fail(j->f->err,
                     "%s: header: lone low surrogate \\u%04x at byte %zu (not a character; a "
                     "surrogate pair is \\ud800-\\udbff then \\udc00-\\udfff)",
                     path, v, i);
    if (v >= 0xd800 && v <= 0xdbff) {
      if (!(j->n - i >= 12 && j->s[i + 6] == '\\' && j->s[i + 7] == 'u' &&
            j_hex4(j, i + 8, &w) && w >= 0xdc00 && w <= 0xdfff)) {
        if (j->n - i < 12) return j_truncated(j);
        return st_fail(j->f->err,
                       "%s: header: lone high surrogate \\u%04x at byte %zu (not followed by a "
                       "\\udc00-\\udfff escape)",
                       path, v, i);
      }
      i += 12;
    } else {
      i += 6;
    }
  }
  *pi = i + 1;
  return 0;
}

/* Decodes the (checked) string whose opening quote is at `at`: writes at most
 * cap bytes to out and returns the full length in bytes (UTF-8). */
static size_t j_unescape(const unsigned char *s, size_t at, char *out, size_t cap) {
  size_t len = 0;
  for (size_t i = at + 1; s[i] != '"';) {
    unsigned char buf[4];
    size_t nb = 1;
    if (s[i] != '\\') {
      buf[0] = s[i++];
    } else {
      unsigned e = s[i + 1];
      i += 2;
      switch (e) {
        case 'b': buf[0] = '\b'; break;
        case 'f': buf[0] = '\f'; break;
        case 'n': buf[0] = '\n'; break;
        case 'r': buf[0] = '\r'; break;
        case 't': buf[0] = '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          for (int k = 0; k < 4; k++) {
            unsigned c = s[i + (size_t)k];
            cp = cp << 4 | (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
          }
          i += 4;
          if (cp >= 0xd800 && cp <= 0xdbff) { /* the check saw the low half follow */
            uint32_t lo = 0;
            for (int k = 0; k < 4; k++) {
              unsigned c = s[i + 2 + (size_t)k];
              lo = lo << 4 | (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
            }
            i += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          if (cp < 0x80) {
            buf[0] = (unsigned char)cp;
          } else if (cp < 0x800) {
            buf[0] = (unsigned char)(0xc0 | cp >> 6), buf[1] = (unsigned char)(0x80 | (cp & 0x3f));
            nb = 2;
          } else if (cp < 0x10000) {
            buf[0] = (unsigned char)(0xe0 | cp >> 12);
            buf[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
            buf[2] = (unsigned char)(0x80 | (cp & 0x3f));
            nb = 3;
          } else {
            buf[0] = (unsigned char)(0xf0 | cp >> 18);
            buf[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
            buf[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
            buf[3] = (unsigned char)(0x80 | (cp & 0x3f));
            nb = 4;
          }
          break;
        }
        default: buf[0] = (unsigned char)e; break; /* " \ / */
      }
    }
    for (size_t k = 0; k < nb; k++, len++)
      if (len < cap) out[len] = (char)buf[k];
  }
  return len;
}

/* Whether the (checked) string at `at` decodes to `want`. */
static int j_key_is(const jcheck *j, size_t at, const char *want) {
  char buf[16];
  size_t len = j_unescape(j->s, at, buf, sizeof buf), wl = strlen(want);
  return len == wl && memcmp(buf, want, wl) == 0;
}

/* The integer rule broken by the number at [start, end) of tensor w->name_at. */
static int j_not_integer(const jcheck *j, const jwhere *w, size_t start, size_t end,
                         const char *why) {
  size_t len = j_unescape(j->s, w->name_at, NULL, 0);
  char *name = malloc(len + 1);
  char text[48];
  size_t k = end - start < 40 ? end - start : 40;
  memcpy(text, j->s + start, k);
  text[k] = '\0';
  if (name != NULL) {
    j_unescape(j->s, w->name_at, name, len);
    name[len] = '\0';
  }
  int rc = st_fail(j->f->err, "%s: tensor '%s': %s[%d] is %s%s (\"%s\" at byte %zu)", j->f->path,
                   name != NULL ? name : "?", w->field, w->index, why,
                   end - start > 40 ? "..." : "", text, start);
  free(name);
  return rc;
}

/* The number at *pi, by the RFC 8259 grammar; for J_INT also the integer rule. */
static int j_number(const jcheck *j, size_t *pi, const jwhere *w) {
  const unsigned char *s = j->s;
  size_t n = j->n, i = *pi, start = i;
  int plain = 1;
  const char *bad = NULL;
  if (s[i] == '-') {
    plain = 0;
    i++;
  }
  if (i < n && s[i] == '0') {
    i++;
    if (i < n && j_is_digit(s[i])) bad = "a leading zero";
  } else if (i < n && j_is_digit(s[i])) {
    while (i < n && j_is_digit(s[i])) i++;
  } else {
    bad = s[start] == '-' ? "no digit after '-'" : "a number starts with '-' or a digit";
  }
  if (bad == NULL && i < n && s[i] == '.') {
    plain = 0;
    i++;
    if (i >= n || !j_is_digit(s[i])) bad = "no digit after the decimal point";
    while (i < n && j_is_digit(s[i])) i++;
  }
  if (bad == NULL && i < n && (s[i] == 'e' || s[i] == 'E')) {
    plain = 0;
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= n || !j_is_digit(s[i])) bad = "no digit in the exponent";
    while (i < n && j_is_digit(s[i])) i++;
  }
  if (bad != NULL) {
    if (i >= n) return j_truncated(j);
    char text[48];
    size_t k = 0;
    for (size_t p = start; p < n && k < 40; p++, k++) {
      unsigned c = s[p];
      if (!(j_is_digit(c) || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E')) break;
      text[k] = (char)c;
    }
    text[k] = '\0';
    return st_fail(j->f->err, "%s: header: invalid JSON number \"%s\" at byte %zu (%s)",
                   j->f->path, text, start, bad);
  }
  if (w->kind == J_INT) {
    if (!plain)
      return j_not_integer(j, w, start, i, "not a plain non-negative integer");
    uint64_t v = 0;
    for (size_t p = start; p < i; p++)
      if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, s[p] - '0', &v) ||
          v > (uint64_t)1 << 53)
        return j_not_integer(j, w, start, i,
                             "over 2^53 (the largest integer every JSON reader holds exactly)");
  }
  *pi = i;
  return 0;
}

static int j_value(jcheck *j, size_t *pi, const jwhere *w);

/* After an object member or array element (whitespace skipped): 1 past a ','
 * and the whitespace after it (another one follows), 0 past `close`, -1 on
 * a syntax error. */
static int j_after_element(const jcheck *j, size_t *pi, unsigned char close) {
  size_t i = *pi;
  if (i < j->n && j->s[i] == ',') {
    i++;
    if (j_ws(j, &i)) return -1;
    *pi = i;
    return 1;
  }
  if (i < j->n && j->s[i] == close) {
    *pi = i + 1;
    return 0;
  }
  return j_syntax(j, i);
}

/* The object at *pi; w: J_TOP, J_ENTRY or J_ANY. */
static int j_object(jcheck *j, size_t *pi, const jwhere *w) {
  const unsigned char *s = j->s;
  size_t i = *pi + 1;
  if (++j->depth > JSON_MAX_DEPTH)
    return st_fail(j->f->err, "%s: header: JSON nested deeper than %d levels (byte %zu)",
                   j->f->path, JSON_MAX_DEPTH, *pi);
  if (j_ws(j, &i)) return -1;
  if (i < j->n && s[i] == '}') {
    i++;
  } else {
    for (;;) {
      if (i >= j->n || s[i] != '"') return j_syntax(j, i);
      size_t key_at = i;
      if (j_string(j, &i) || j_ws(j, &i)) return -1;
      if (i >= j->n || s[i] != ':') return j_syntax(j, i);
      i++;
      if (j_ws(j, &i)) return -1;
      jwhere cw = j_any;
      if (w->kind == J_TOP && !j_key_is(j, key_at, "__metadata__")) {
        cw.kind = J_ENTRY;
        cw.name_at = key_at;
      } else if (w->kind == J_ENTRY) {
        cw.field = j_key_is(j, key_at, "shape")          ? "shape"
                   : j_key_is(j, key_at, "data_offsets") ? "data_offsets"
                                                         : NULL;
        if (cw.field != NULL) {
          cw.kind = J_INTS;
          cw.name_at = w->name_at;
        }
      }
      if (j_value(j, &i, &cw) || j_ws(j, &i)) return -1;
      const int more = j_after_element(j, &i, '}');
      if (more < 0) return -1;
      if (!more) break;
    }
  }
  j->depth--;
  *pi = i;
  return 0;
}

/* The array at *pi; w: J_INTS (elements J_INT) or J_ANY. */
static int j_array(jcheck *j, size_t *pi, const jwhere *w) {
  const unsigned char *s = j->s;
  size_t i = *pi + 1;
  if (++j->depth > JSON_MAX_DEPTH)
    return st_fail(j->f->err, "%s: header: JSON nested deeper than %d levels (byte %zu)",
                   j->f->path, JSON_MAX_DEPTH, *pi);
  if (j_ws(j, &i)) return -1;
  if (i < j->n && s[i] == ']') {
    i++;
  } else {
    for (int index = 0;; index = index < INT32_MAX ? index + 1 : index) {
      jwhere cw = j_any;
      if (w->kind == J_INTS) {
        cw = *w;
        cw.kind = J_INT;
        cw.index = index;
      }
      if (j_value(j, &i, &cw) || j_ws(j, &i)) return -1;
      const int more = j_after_element(j, &i, ']');
      if (more < 0) return -1;
      if (!more) break;
    }
  }
  j->depth--;
  *pi = i;
  return 0;
}

/* The value at *pi (not whitespace); *pi moves past it. */
static int j_value(jcheck *j, size_t *pi, const jwhere *w) {
  size_t i = *pi;
  if (i >= j->n) return j_truncated(j);
  unsigned c = j->s[i];
  if (c == '{') return j_object(j, pi, w->kind == J_TOP || w->kind == J_ENTRY ? w : &j_any);
  if (c == '[') return j_array(j, pi, w->kind == J_INTS ? w : &j_any);
  if (c == '"') return j_string(j, pi);
  if (c == '-' || c == '+' || c == '.' || j_is_digit(c))
    return j_number(j, pi, w->kind == J_INT ? w : &j_any);
  const char *lit = c == 't' ? "true" : c == 'f' ? "false" : c == 'n' ? "null" : NULL;
  if (lit == NULL) return j_syntax(j, i);
  for (size_t k = 0; lit[k] != '\0'; k++)
    if (i + k >= j->n || j->s[i + k] != (unsigned char)lit[k]) return j_syntax(j, i + k);
  *pi = i + strlen(lit);
  return 0;
}

/* The whole header, strictly: one JSON value and whitespace. */
static int json_check(st_file *f, size_t hn) {
  jcheck j = {f, (const unsigned char *)f->header, hn, 0};
  size_t i = 0;
  static const jwhere top = {J_TOP, 0, NULL, 0};
  if (j_ws(&j, &i)) return -1;
  if (j_value(&j, &i, &top) || j_ws(&j, &i)) return -1;
  if (i < hn) {
    char near[48];
    excerpt(f->header, hn, i, near);
    return st_fail(f->err,
                   "%s: header: unexpected bytes after the JSON object at byte %zu (\"%s\")",
                   f->path, i, near);
  }
  return 0;
}

/* ---- reading the checked JSON (the second pass) ------------------------------------ */

/* A cursor over header text that json_check accepted: no syntax error can
 * occur, and every value ends before the header's terminating NUL. */
typedef struct {
  const unsigned char *s;
  size_t i;
  char *out; /* the next free byte of st_file.strings */
} jread;

/* An object member: its decoded key and where its value starts. */
typedef struct {
  const char *key;
  size_t value_at;
} jmember;

static void r_ws(jread *r) {
  while (j_is_ws(r->s[r->i])) r->i++;
}

/* Moves past the string whose opening quote is at r->i. */
static void r_skip_string(jread *r) {
  size_t i = r->i + 1;
  while (r->s[i] != '"') i += r->s[i] != '\\' ? 1 : r->s[i + 1] == 'u' ? 6 : 2;
  r->i = i + 1;
}

/* Decodes the string at r->i into st_file.strings and moves past it. The
 * decoded text plus its NUL is shorter than the quoted text, and no string
 * is decoded twice, so header_len + 1 bytes hold them all. */
static const char *r_string(jread *r) {
  char *out = r->out;
  size_t len = j_unescape(r->s, r->i, out, SIZE_MAX);
  out[len] = '\0';
  r->out += len + 1;
  r_skip_string(r);
  return out;
}

static int r_ends_scalar(unsigned c) {
  return c == ',' || c == '}' || c == ']' || c == '\0' || j_is_ws(c);
}

/* Moves past the value at r->i, nested ones included. */
static void r_skip_value(jread *r) {
  size_t depth = 0;
  do {
    unsigned c = r->s[r->i];
    if (c == '"') {
      r_skip_string(r);
    } else if (c == '{' || c == '[') {
      depth++, r->i++;
    } else if (c == '}' || c == ']') {
      depth--, r->i++;
    } else if (c == ',' || c == ':' || j_is_ws(c)) {
      r->i++;
    } else { /* a number or a literal */
      while (!r_ends_scalar(r->s[r->i])) r->i++;
    }
  } while (depth > 0);
}

/* The members of the object at r->i, keys decoded, in order: *out
 * (malloc'd, *n of them); r moves past the object. -1 when out of memory. */
static int r_members(st_file *f, jread *r, jmember **out, size_t *n) {
  jmember *m = NULL;
  size_t k = 0, cap = 0;
  r->i++;
  r_ws(r);
  if (r->s[r->i] == '}') {
    r->i++;
  } else {
    for (;;) {
      if (k == cap) {
        cap = cap ? 2 * cap : 8;
        jmember *grown = realloc(m, sizeof *m * cap);
        if (grown == NULL) {
          free(m);
          return st_fail_oom(f->err, "out of memory");
        }
        m = grown;
      }
      m[k].key = r_string(r);
      r_ws(r);
      r->i++; /* ':' */
      r_ws(r);
      m[k].value_at = r->i;
      r_skip_value(r);
      r_ws(r);
      k++;
      if (r->s[r->i++] == '}') break; /* else ',' */
      r_ws(r);
    }
  }
  *out = m;
  *n = k;
  return 0;
}

/* The elements of the array at `at`: their count, and in vals[0, cap) the
 * integers among the first cap of them; *first_bad is the index of the first
 * element (below cap) that is not a number, or -1. The check let numbers
 * through in shape and data_offsets only as plain digits <= 2^53. */
static size_t r_array_u64(const unsigned char *s, size_t at, uint64_t *vals, size_t cap,
                          int *first_bad) {
  jread r = {s, at + 1, NULL};
  size_t k = 0;
  *first_bad = -1;
  r_ws(&r);
  if (s[r.i] == ']') return 0;
  for (;; k++) {
    if (k < cap) {
      if (j_is_digit(s[r.i])) {
        uint64_t v = 0;
        for (; j_is_digit(s[r.i]); r.i++) v = v * 10 + (uint64_t)(s[r.i] - '0');
        vals[k] = v;
      } else {
        if (*first_bad < 0) *first_bad = (int)k;
        r_skip_value(&r);
      }
    } else {
      r_skip_value(&r);
    }
    r_ws(&r);
    if (s[r.i++] == ']') return k + 1; /* else ',' */
    r_ws(&r);
  }
}

static const jmember *member_named(const jmember *m, size_t n, const char *key) {
  for (size_t k = 0; k < n; k++)
    if (strcmp(m[k].key, key) == 0) return &m[k];
  return NULL;
}

/* ---- checks --------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  size_t index;
} name_ref;

typedef struct {
  uint64_t begin, end;
  size_t index;
} range_ref;

static int cmp_name_ref(const void *a, const void *b) {
  const name_ref *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  if (c != 0) return c;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int cmp_range_ref(const void *a, const void *b) {
  const range_ref *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int cmp_cstr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key that appears twice among the members (*dup, NULL if none): sort +
 * adjacent compare. -1 when out of memory. */
static int duplicate_key(st_file *f, const jmember *m, size_t k, const char **dup) {
  *dup = NULL;
  if (k < 2) return 0;
  const char **keys = malloc(sizeof *keys * k);
  if (keys == NULL) return st_fail_oom(f->err, "out of memory");
  for (size_t i = 0; i < k; i++) keys[i] = m[i].key;
  qsort(keys, k, sizeof *keys, cmp_cstr);
  for (size_t i = 1; i < k && *dup == NULL; i++)
    if (strcmp(keys[i], keys[i - 1]) == 0) *dup = keys[i];
  free(keys);
  return 0;
}

/* The entry of tensor t->name, whose value starts at `at`. */
static int parse_tensor_fields(st_file *f, jread *r, const jmember *m, size_t n, st_tensor *t) {
  const char *dup;
  if (duplicate_key(f, m, n, &dup)) return -1;
  if (dup != NULL)
    return st_fail(f->err, "%s: tensor '%s': field \"%s\" appears twice in its header entry",
                   f->path, t->name, dup);
  const jmember *dtype = member_named(m, n, "dtype");
  const jmember *shape = member_named(m, n, "shape");
  const jmember *offsets = member_named(m, n, "data_offsets");
  if (dtype == NULL || r->s[dtype->value_at] != '"')
    return st_fail(f->err, "%s: tensor '%s': \"dtype\" missing or not a string", f->path,
                   t->name);
  r->i = dtype->value_at;
  const char *dtype_name = r_string(r);
  if ((t->dtype = st_dtype_find(dtype_name)) < 0)
    return st_fail(f->err, "%s: tensor '%s': unknown dtype \"%s\"", f->path, t->name, dtype_name);
  if (shape == NULL || r->s[shape->value_at] != '[')
    return st_fail(f->err, "%s: tensor '%s': \"shape\" missing or not an array", f->path,
                   t->name);
  int bad;
  size_t ndim = r_array_u64(r->s, shape->value_at, NULL, 0, &bad);
  t->ndim = (int)ndim; /* < header_len <= ST_MAX_HEADER_BYTES */
  t->shape = malloc(sizeof *t->shape * (ndim > 0 ? ndim : 1));
  if (t->shape == NULL) return st_fail_oom(f->err, "out of memory");
  r_array_u64(r->s, shape->value_at, t->shape, ndim, &bad);
  if (bad >= 0)
    return st_fail(f->err, "%s: tensor '%s': shape[%d] is not a non-negative integer", f->path,
                   t->name, bad);
  uint64_t pair[2];
  if (offsets == NULL || r->s[offsets->value_at] != '[' ||
      r_array_u64(r->s, offsets->value_at, pair, 2, &bad) != 2)
    return st_fail(f->err,
                   "%s: tensor '%s': \"data_offsets\" missing or not an array [begin, end]",
                   f->path, t->name);
  if (bad >= 0)
    return st_fail(f->err, "%s: tensor '%s': data_offsets are not non-negative integers",
                   f->path, t->name);
  t->begin = pair[0];
  t->end = pair[1];
  if (t->end < t->begin)
    return st_fail(f->err,
                   "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                   "] end before they begin",
                   f->path, t->name, t->begin, t->end);
  return 0;
}

static int parse_tensor(st_file *f, jread *r, const char *name, size_t at, st_tensor *t) {
  t->name = name;
  if (r->s[at] != '{')
    return st_fail(f->err, "%s: tensor '%s': its header entry is not a JSON object", f->path,
                   t->name);
  r->i = at;
  jmember *m;
  size_t n;
  if (r_members(f, r, &m, &n)) return -1;
  int rc = parse_tensor_fields(f, r, m, n, t);
  free(m);
  return rc;
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

static int parse_metadata_members(st_file *f, jread *r, const jmember *m, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (r->s[m[k].value_at] != '"')
      return st_fail(f->err,
                     "%s: header: __metadata__ entry '%s' is not a string (safetensors metadata "
                     "maps strings to strings)",
                     f->path, m[k].key);
  const char *dup;
  if (duplicate_key(f, m, n, &dup)) return -1;
  if (dup != NULL)
    return st_fail(f->err, "%s: header: __metadata__ key '%s' appears twice", f->path, dup);
  f->meta = malloc(sizeof *f->meta * (n ? n : 1));
  if (f->meta == NULL) return st_fail_oom(f->err, "out of memory");
  for (size_t k = 0; k < n; k++) {
    r->i = m[k].value_at;
    f->meta[k].key = m[k].key;
    f->meta[k].value = r_string(r);
  }
  f->n_meta = n;
  return 0;
}

static int parse_metadata(st_file *f, jread *r, size_t at) {
  if (f->metadata_seen++)
    return st_fail(f->err, "%s: header: \"__metadata__\" appears twice", f->path);
  if (r->s[at] == 'n') return 0; /* null: readers take it for "no metadata" */
  if (r->s[at] != '{')
    return st_fail(f->err, "%s: header: \"__metadata__\" is not a JSON object", f->path);
  r->i = at;
  jmember *m;
  size_t n;
  if (r_members(f, r, &m, &n)) return -1;
  int rc = parse_metadata_members(f, r, m, n);
  free(m);
  return rc;
}

/* The header length in len8, against the file's size: sets header_len and data_len. */
static int check_length(st_file *f, const unsigned char len8[8]) {
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
  return 0;
}

static int too_short(st_file *f) {
  return st_fail(
      f->err,
      "%s: %" PRIu64
      " bytes, too short for a safetensors file (it starts with an 8-byte header length)",
      f->path, f->file_size);
}

/* Everything after the bytes: f->header holds header_len bytes and a NUL,
 * f->data_len is set. */
static int parse_header(st_file *f) {
  size_t hn = (size_t)f->header_len;

  // ---- JSON
  size_t bad = st_utf8_invalid_at((const unsigned char *)f->header, hn);
  if (bad < hn)
    return st_fail(f->err, "%s: header: not valid UTF-8 (byte %zu of %zu)", f->path, bad, hn);
  if (json_check(f, hn)) return -1;
  f->strings = malloc(hn + 1);
  if (f->strings == NULL) return st_fail_oom(f->err, "out of memory (header of %zu bytes)", hn);
  jread r = {(const unsigned char *)f->header, 0, f->strings};
  r_ws(&r);
  if (r.s[r.i] != '{') return st_fail(f->err, "%s: header: the JSON is not an object", f->path);

  // ---- entries
  jmember *top;
  size_t ntop;
  if (r_members(f, &r, &top, &ntop)) return -1;
  size_t n = 0;
  for (size_t k = 0; k < ntop; k++)
    if (strcmp(top[k].key, "__metadata__") != 0) n++;
  f->t = calloc(n ? n : 1, sizeof *f->t);
  f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
  int rc = f->t == NULL || f->by_name == NULL ? st_fail_oom(f->err, "out of memory") : 0;
  for (size_t k = 0; k < ntop && rc == 0; k++) {
    if (strcmp(top[k].key, "__metadata__") == 0)
      rc = parse_metadata(f, &r, top[k].value_at);
    else
      rc = parse_tensor(f, &r, top[k].key, top[k].value_at, &f->t[f->nt++]);
  }
  free(top);
  if (rc) return rc;

  // ---- unique names
  name_ref *names = malloc(sizeof *names * (f->nt ? f->nt : 1));
  if (names == NULL) return st_fail_oom(f->err, "out of memory");
  for (size_t i = 0; i < f->nt; i++) names[i] = (name_ref){f->t[i].name, i};
  qsort(names, f->nt, sizeof *names, cmp_name_ref);
  for (size_t i = 0; i < f->nt; i++) f->by_name[i] = names[i].index;
  free(names);
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
  range_ref *by_offset = malloc(sizeof *by_offset * (f->nt ? f->nt : 1));
  if (by_offset == NULL) return st_fail_oom(f->err, "out of memory");
  for (size_t i = 0; i < f->nt; i++) by_offset[i] = (range_ref){f->t[i].begin, f->t[i].end, i};
  qsort(by_offset, f->nt, sizeof *by_offset, cmp_range_ref);
  uint64_t covered = 0;
  for (size_t k = 0; k < f->nt && rc == 0; k++) {
    st_tensor *t = &f->t[by_offset[k].index];
    const st_tensor *prev = k > 0 ? &f->t[by_offset[k - 1].index] : NULL;
    t->order = k;
    if (t->begin < covered)
      rc = st_fail(f->err,
                   "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                   "] overlap tensor '%s' [%" PRIu64 ", %" PRIu64 "]",
                   f->path, t->name, t->begin, t->end, prev->name, prev->begin, prev->end);
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

int st_open(st_file *f, const char *path, st_error *err) {
  f->path = path;
  f->err = err;
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
  // below); cleared again for the regular file.
  f->fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f->fd < 0) return st_fail(f->err, "%s: cannot open: %s", f->path, strerror(errno));
  struct stat st;
  if (fstat(f->fd, &st) != 0)
    return st_fail(f->err, "%s: cannot stat: %s", f->path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return st_fail(f->err, "%s: not a regular file", f->path);
  const int flags = fcntl(f->fd, F_GETFL);
  if (flags < 0 || fcntl(f->fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    return st_fail(f->err, "%s: cannot open: %s", f->path, strerror(errno));
  f->device = (uint64_t)st.st_dev;
  f->inode = (uint64_t)st.st_ino;
  f->file_size = (uint64_t)st.st_size;

  // ---- header length and header bytes
  if (f->file_size < 8) return too_short(f);
  unsigned char len8[8];
  if (st_read_at(f, len8, 8, 0, "the header length")) return -1;
  if (check_length(f, len8)) return -1;
  size_t hn = (size_t)f->header_len;
  f->header = malloc(hn + 1);
  if (f->header == NULL) return st_fail_oom(f->err, "out of memory (header of %zu bytes)", hn);
  if (st_read_at(f, f->header, hn, 8, "the header")) return -1;
  f->header[hn] = '\0';
  return parse_header(f);
}

int st_open_memory(st_file *f, const char *name, const void *bytes, size_t size, st_error *err) {
  const unsigned char *b = bytes;
  f->path = name;
  f->err = err;
  f->memory = b;
  f->file_size = (uint64_t)size;
  if (size < 8) return too_short(f);
  if (check_length(f, b)) return -1;
  size_t hn = (size_t)f->header_len;
  f->header = malloc(hn + 1);
  if (f->header == NULL) return st_fail_oom(f->err, "out of memory (header of %zu bytes)", hn);
  memcpy(f->header, b + 8, hn);
  f->header[hn] = '\0';
  return parse_header(f);
}

int st_parse_header(st_file *f, const char *name, const char *header, size_t header_len,
                    uint64_t data_len, st_error *err) {
  f->path = name;
  f->err = err;
  if (header_len > ST_MAX_HEADER_BYTES || data_len > UINT64_MAX - 8 - header_len)
    return st_fail(f->err, "%s: header of %zu bytes over the limit", f->path, header_len);
  f->header_len = header_len;
  f->data_len = data_len;
  f->file_size = 8 + header_len + data_len;
  if (header_len < 2)
    return st_fail(f->err, "%s: header length %zu is too short for a JSON object", f->path,
                   header_len);
  f->header = malloc(header_len + 1);
  if (f->header == NULL)
    return st_fail_oom(f->err, "out of memory (header of %zu bytes)", header_len);
  memcpy(f->header, header, header_len);
  f->header[header_len] = '\0';
  return parse_header(f);
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
  free(f->meta);
  free(f->strings);
  free(f->header);
}
