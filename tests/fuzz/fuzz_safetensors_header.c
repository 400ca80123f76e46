/*
 * Fuzz target: the safetensors reader of the library and `ingot quantize`
 * (src/io/safetensors_read.c) on a whole file held in memory (st_open_memory:
 * header length, UTF-8, strict JSON, entries, offsets), then the planner and the output header it builds: once
 * with --pattern '*', once also with a --gate-up pair of the first two
 * tensors whose OUT name is the first bytes of the data section.
 *
 * Findings (abort): a crash or sanitizer report; a result and an error text
 * that disagree (0 with a message, -1 without); an accepted file that breaks
 * what the reader promises (unique sorted names, dtypes, byte lengths,
 * offsets covering the data exactly, string metadata); an accepted file that
 * a second, independent strict reader written here (the model: RFC 8259,
 * the \u rules of serde_json, plain integers up to 2^53 for shape and
 * data_offsets, no field twice in a tensor entry) refuses or reads
 * differently (names, dtypes, shapes, offsets, metadata); a plan whose
 * output header the reader itself (or the model) refuses, or that lists
 * other tensors than planned. The input is the file's bytes; the corpus holds real files.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "quantize_plan.h"
#include "safetensors.h"

static void finding(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_safetensors_header: %s%s%s\n", what, detail ? ": " : "",
          detail ? detail : "");
  abort();
}

static void check_result(int rc, const st_error *err, const char *what) {
  if (rc == 0 && err->msg[0] != '\0') finding(what, "succeeded with an error text");
  if (rc != 0 && err->msg[0] == '\0') finding(what, "failed without an error text");
  if (rc != 0 && rc != -1) finding(what, "returned neither 0 nor -1");
}

/* What st_open promises about a file it accepted. */
static void check_accepted(const st_file *f) {
  uint64_t covered = 0;
  for (size_t i = 0; i < f->nt; i++) {
    const st_tensor *t = &f->t[i];
    if (t->name == NULL) finding("accepted", "a tensor without a name");
    if (t->dtype < 0 || t->dtype >= st_n_dtypes) finding("accepted", "a dtype index out of range");
    if (t->ndim < 0) finding("accepted", "a negative ndim");
    if (t->begin > t->end || t->end > f->data_len) finding("accepted", "offsets out of range");
    if (t->order >= f->nt) finding("accepted", "an order out of range");
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
      if (__builtin_mul_overflow(n, t->shape[d], &n)) finding("accepted", "a shape that overflows");
    uint64_t bits;
    if (__builtin_mul_overflow(n, (uint64_t)st_dtypes[t->dtype].bits, &bits) || bits % 8 != 0 ||
        bits / 8 != t->end - t->begin)
      finding("accepted", "shape x dtype is not the byte length");
    covered += t->end - t->begin;
  }
  if (covered != f->data_len) finding("accepted", "the tensors do not cover the data section");
  for (size_t i = 1; i < f->nt; i++)
    if (strcmp(f->t[f->by_name[i - 1]].name, f->t[f->by_name[i]].name) >= 0)
      finding("accepted", "names not unique or not sorted in by_name");
  for (size_t i = 0; i < f->nt; i++)
    if (st_find(f, f->t[i].name) != (int)i) finding("accepted", "st_find misses a tensor");
  for (size_t k = 0; k < f->n_meta; k++)
    if (f->meta[k].key == NULL || f->meta[k].value == NULL)
      finding("accepted", "metadata without a key or value");
  if (f->n_meta > 0 && !f->metadata_seen) finding("accepted", "metadata without __metadata__");
}

/* ---- the model: an independent strict reading of the header --------------------------- */

typedef struct {
  char *name, *dtype;
  uint64_t *shape, begin, end;
  int ndim;
} m_tensor;

typedef struct {
  const unsigned char *s;
  size_t n, i;
  int depth;
  m_tensor *t;
  size_t nt, cap;
  char **meta; /* key, value, key, value, ... */
  size_t nmeta, meta_cap;
  int has_meta;
} model;

static void m_free(model *m) {
  for (size_t k = 0; k < m->nt; k++) {
    free(m->t[k].name);
    free(m->t[k].dtype);
    free(m->t[k].shape);
  }
  free(m->t);
  for (size_t k = 0; k < m->nmeta; k++) free(m->meta[k]);
  free(m->meta);
}

static int m_utf8(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len = c >= 0xf0 && c <= 0xf4   ? 4
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xc2 && c <= 0xdf ? 2
                                          : 0;
    if (len == 0 || n - i < len) return 0;
    uint32_t cp = c & (0x7f >> len);
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += len;
  }
  return 1;
}

static void m_ws(model *m) {
  while (m->i < m->n &&
         (m->s[m->i] == ' ' || m->s[m->i] == '\t' || m->s[m->i] == '\n' || m->s[m->i] == '\r'))
    m->i++;
}

static int m_lit(model *m, const char *lit) {
  size_t k = strlen(lit);
  if (m->n - m->i < k || memcmp(m->s + m->i, lit, k) != 0) return 0;
  m->i += k;
  return 1;
}

static int m_hex(model *m, uint32_t *v) {
  if (m->n - m->i < 4) return 0;
  *v = 0;
  for (int k = 0; k < 4; k++) {
    int c = m->s[m->i++];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return 0;
    *v = *v * 16 + (uint32_t)d;
  }
  return 1;
}

/* A string, decoded (malloc'd; NUL-terminated; \u0000 refused: the tool's rule). */
static int m_string(model *m, char **out) {
  *out = NULL;
  if (m->i >= m->n || m->s[m->i] != '"') return 0;
  m->i++;
  size_t cap = 16, len = 0;
  char *b = malloc(cap);
  if (b == NULL) return 0;
  for (;;) {
    if (m->i >= m->n) break;
    unsigned c = m->s[m->i++];
    unsigned char enc[4];
    size_t ne = 1;
    if (c == '"') {
      b[len] = '\0';
      *out = b;
      return 1;
    }
    if (c < 0x20) break;
    if (c != '\\') {
      enc[0] = (unsigned char)c;
    } else {
      if (m->i >= m->n) break;
      unsigned e = m->s[m->i++];
      const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
      const char *hit = e ? strchr(from, (int)e) : NULL;
      if (hit != NULL) {
        enc[0] = (unsigned char)to[hit - from];
      } else if (e == 'u') {
        uint32_t cp, lo;
        if (!m_hex(m, &cp) || cp == 0 || (cp >= 0xdc00 && cp <= 0xdfff)) break;
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (!m_lit(m, "\\u") || !m_hex(m, &lo) || lo < 0xdc00 || lo > 0xdfff) break;
          cp = 0x10000 + ((cp & 0x3ff) << 10 | (lo & 0x3ff));
        }
        if (cp < 0x80) {
          enc[0] = (unsigned char)cp;
        } else if (cp < 0x800) {
          enc[0] = (unsigned char)(0xc0 | cp >> 6), enc[1] = (unsigned char)(0x80 | (cp & 0x3f)),
          ne = 2;
        } else if (cp < 0x10000) {
          enc[0] = (unsigned char)(0xe0 | cp >> 12),
          enc[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
          enc[2] = (unsigned char)(0x80 | (cp & 0x3f)), ne = 3;
        } else {
          enc[0] = (unsigned char)(0xf0 | cp >> 18),
          enc[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
          enc[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f)),
          enc[3] = (unsigned char)(0x80 | (cp & 0x3f));
          ne = 4;
        }
      } else {
        break;
      }
    }
    if (len + ne + 1 > cap) {
      cap = 2 * cap + ne;
      char *grown = realloc(b, cap);
      if (grown == NULL) break;
      b = grown;
    }
    memcpy(b + len, enc, ne);
    len += ne;
  }
  free(b);
  return 0;
}

/* A number by the RFC grammar; *plain: digits only, value in *v (<= 2^53). */
static int m_number(model *m, int *plain, uint64_t *v) {
  size_t start = m->i;
  *plain = 1;
  *v = 0;
  if (m->i < m->n && m->s[m->i] == '-') m->i++, *plain = 0;
  if (m->i >= m->n) return 0;
  if (m->s[m->i] == '0') {
    m->i++;
  } else if (m->s[m->i] >= '1' && m->s[m->i] <= '9') {
    while (m->i < m->n && m->s[m->i] >= '0' && m->s[m->i] <= '9') m->i++;
  } else {
    return 0;
  }
  size_t int_end = m->i;
  if (m->i < m->n && m->s[m->i] == '.') {
    *plain = 0;
    m->i++;
    size_t d = m->i;
    while (m->i < m->n && m->s[m->i] >= '0' && m->s[m->i] <= '9') m->i++;
    if (m->i == d) return 0;
  }
  if (m->i < m->n && (m->s[m->i] == 'e' || m->s[m->i] == 'E')) {
    *plain = 0;
    m->i++;
    if (m->i < m->n && (m->s[m->i] == '+' || m->s[m->i] == '-')) m->i++;
    size_t d = m->i;
    while (m->i < m->n && m->s[m->i] >= '0' && m->s[m->i] <= '9') m->i++;
    if (m->i == d) return 0;
  }
  if (*plain) {
    if (int_end - start > 16) *plain = 0;
    for (size_t k = start; k < int_end && *plain; k++) *v = *v * 10 + (uint64_t)(m->s[k] - '0');
    if (*v > ((uint64_t)1 << 53)) *plain = 0;
  }
  return 1;
}

static int m_value(model *m);

static int m_container(model *m, char open, char close) {
  if (++m->depth > 128) return 0;
  m->i++;
  m_ws(m);
  if (m->i < m->n && m->s[m->i] == close) {
    m->i++;
    m->depth--;
    return 1;
  }
  for (;;) {
    if (open == '{') {
      char *key;
      if (!m_string(m, &key)) return 0;
      free(key);
      m_ws(m);
      if (!m_lit(m, ":")) return 0;
      m_ws(m);
    }
    if (!m_value(m)) return 0;
    m_ws(m);
    if (m_lit(m, ",")) {
      m_ws(m);
      continue;
    }
    char c[2] = {close, '\0'};
    if (!m_lit(m, c)) return 0;
    m->depth--;
    return 1;
  }
}

/* Any value, checked and skipped. */
static int m_value(model *m) {
  if (m->i >= m->n) return 0;
  unsigned char c = m->s[m->i];
  if (c == '{') return m_container(m, '{', '}');
  if (c == '[') return m_container(m, '[', ']');
  if (c == '"') {
    char *s;
    if (!m_string(m, &s)) return 0;
    free(s);
    return 1;
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    int plain;
    uint64_t v;
    return m_number(m, &plain, &v);
  }
  return m_lit(m, "true") || m_lit(m, "false") || m_lit(m, "null");
}

/* [u, u, ...] of plain integers into *out (malloc'd, grown as needed). */
static int m_uints(model *m, uint64_t **out, int *count) {
  int cap = 0;
  *count = 0;
  if (!m_lit(m, "[")) return 0;
  m_ws(m);
  if (m_lit(m, "]")) return 1;
  for (;;) {
    int plain;
    uint64_t v;
    if (!m_number(m, &plain, &v) || !plain) return 0;
    if (*count == cap) {
      cap = cap ? 2 * cap : 8;
      uint64_t *grown = realloc(*out, (size_t)cap * sizeof *grown);
      if (grown == NULL) return 0;
      *out = grown;
    }
    (*out)[(*count)++] = v;
    m_ws(m);
    if (m_lit(m, "]")) return 1;
    if (!m_lit(m, ",")) return 0;
    m_ws(m);
  }
}

static int m_tensor_entry(model *m, m_tensor *t) {
  int seen_dtype = 0, seen_shape = 0, seen_offsets = 0;
  if (!m_lit(m, "{")) return 0;
  if (++m->depth > 128) return 0;
  m_ws(m);
  if (m_lit(m, "}")) return 0; /* no fields */
  char **other = NULL;         /* unknown field names, for the duplicate rule */
  size_t nother = 0;
  int ok = 0;
  for (;;) {
    char *key;
    if (!m_string(m, &key)) break;
    m_ws(m);
    if (!m_lit(m, ":")) {
      free(key);
      break;
    }
    m_ws(m);
    int good = 1;
    if (strcmp(key, "dtype") == 0) {
      good = !seen_dtype++ && m_string(m, &t->dtype);
    } else if (strcmp(key, "shape") == 0) {
      good = !seen_shape++ && m_uints(m, &t->shape, &t->ndim);
    } else if (strcmp(key, "data_offsets") == 0) {
      uint64_t *two = NULL;
      int cnt;
      good = !seen_offsets++ && m_uints(m, &two, &cnt) && cnt == 2;
      if (good) t->begin = two[0], t->end = two[1];
      free(two);
    } else {
      for (size_t k = 0; k < nother && good; k++) good = strcmp(other[k], key) != 0;
      char **grown = good ? realloc(other, (nother + 1) * sizeof *other) : NULL;
      if (grown == NULL) good = 0;
      if (good) {
        other = grown;
        other[nother++] = key;
        key = NULL;
        good = m_value(m);
      }
    }
    free(key);
    if (!good) break;
    m_ws(m);
    if (m_lit(m, ",")) {
      m_ws(m);
      continue;
    }
    ok = m_lit(m, "}") && seen_dtype && seen_shape && seen_offsets;
    break;
  }
  for (size_t k = 0; k < nother; k++) free(other[k]);
  free(other);
  m->depth--;
  return ok;
}

static int m_push(char ***v, size_t *n, size_t *cap, char *s) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 16;
    char **grown = realloc(*v, c * sizeof **v);
    if (grown == NULL) return 0;
    *v = grown;
    *cap = c;
  }
  (*v)[(*n)++] = s;
  return 1;
}

/* The whole header: accepted (1) with its tensors and metadata, or not (0). */
static int m_read(model *m) {
  if (!m_utf8(m->s, m->n)) return 0;
  m_ws(m);
  if (!m_lit(m, "{")) return 0;
  m->depth = 1;
  m_ws(m);
  if (!m_lit(m, "}")) {
    for (;;) {
      char *key;
      if (!m_string(m, &key)) return 0;
      m_ws(m);
      if (!m_lit(m, ":")) {
        free(key);
        return 0;
      }
      m_ws(m);
      if (strcmp(key, "__metadata__") == 0) {
        free(key);
        if (m->has_meta++) return 0;
        if (!m_lit(m, "null")) {
          if (!m_lit(m, "{")) return 0;
          m_ws(m);
          if (!m_lit(m, "}")) {
            for (;;) {
              char *k, *v;
              if (!m_string(m, &k)) return 0;
              if (!m_push(&m->meta, &m->nmeta, &m->meta_cap, k)) return 0;
              m_ws(m);
              if (!m_lit(m, ":")) return 0;
              m_ws(m);
              if (!m_string(m, &v)) return 0;
              if (!m_push(&m->meta, &m->nmeta, &m->meta_cap, v)) return 0;
              m_ws(m);
              if (m_lit(m, "}")) break;
              if (!m_lit(m, ",")) return 0;
              m_ws(m);
            }
          }
        }
      } else {
        if (m->nt == m->cap) {
          size_t c = m->cap ? 2 * m->cap : 16;
          m_tensor *grown = realloc(m->t, c * sizeof *grown);
          if (grown == NULL) {
            free(key);
            return 0;
          }
          m->t = grown;
          m->cap = c;
        }
        m_tensor *t = &m->t[m->nt++];
        memset(t, 0, sizeof *t);
        t->name = key;
        if (!m_tensor_entry(m, t)) return 0;
      }
      m_ws(m);
      if (m_lit(m, "}")) break;
      if (!m_lit(m, ",")) return 0;
      m_ws(m);
    }
  }
  m_ws(m);
  return m->i == m->n;
}

/* The reader accepted f: the model must accept it too and read the same. */
static void check_against_model(const st_file *f) {
  model m;
  memset(&m, 0, sizeof m);
  m.s = (const unsigned char *)f->header;
  m.n = (size_t)f->header_len;
  if (!m_read(&m)) {
    m_free(&m);
    finding("the reader accepted a header the strict model refuses", NULL);
  }
  const char *bad = NULL;
  if (m.nt != f->nt) bad = "tensor count";
  for (size_t k = 0; k < m.nt && bad == NULL; k++) {
    const st_tensor *t = &f->t[k];
    const m_tensor *mt = &m.t[k];
    if (strcmp(mt->name, t->name) != 0)
      bad = "a tensor name";
    else if (strcmp(mt->dtype, st_dtypes[t->dtype].name) != 0)
      bad = "a dtype";
    else if (mt->ndim != t->ndim)
      bad = "an ndim";
    else if (mt->begin != t->begin || mt->end != t->end)
      bad = "data_offsets";
    for (int d = 0; bad == NULL && d < t->ndim; d++)
      if (mt->shape[d] != t->shape[d]) bad = "a shape";
  }
  size_t nmeta = 0;
  for (size_t k = 0; k < f->n_meta && bad == NULL; k++, nmeta += 2)
    if (nmeta + 1 >= m.nmeta || strcmp(m.meta[nmeta], f->meta[k].key) != 0 ||
        strcmp(m.meta[nmeta + 1], f->meta[k].value) != 0)
      bad = "metadata";
  if (bad == NULL && nmeta != m.nmeta) bad = "the metadata count";
  m_free(&m);
  if (bad != NULL) finding("the reader and the strict model read differently", bad);
}

/* Plans a conversion of f and reads the planned output header back. With
 * gate_up, the first two tensors form a --gate-up pair whose OUT name is
 * gate_up_out (any bytes, as a command line may give). */
static void plan_and_reread(const st_file *f, int gate_up, const char *gate_up_out) {
  st_error err;
  memset(&err, 0, sizeof err);
  const char *patterns[1] = {"*"};
  const char *gu[3];
  qplan p;
  memset(&p, 0, sizeof p);
  p.in = f;
  p.err = &err;
  p.log = NULL;
  if (f->nt > 0) { /* "*" matches every name; with none it would only warn */
    p.patterns = patterns;
    p.n_patterns = 1;
  }
  if (gate_up) {
    if (f->nt < 2) return;
    gu[0] = f->t[0].name;
    gu[1] = f->t[1].name;
    gu[2] = gate_up_out;
    p.gate_up = gu;
    p.n_gate_up = 1;
  }
  int rc = plan_build(&p);
  check_result(rc, &err, "plan_build");
  if (rc == 0) {
    if (p.out_header_len % 8 != 0) finding("plan", "output header not padded to 8 bytes");
    st_file out;
    memset(&out, 0, sizeof out);
    out.fd = -1;
    st_error err2;
    memset(&err2, 0, sizeof err2);
    int rc2 =
        st_parse_header(&out, "output", p.out_header, p.out_header_len, p.out_data_len, &err2);
    check_result(rc2, &err2, "st_parse_header(output)");
    if (rc2 != 0) {
      fprintf(stderr, "output header: %.*s\n",
              (int)(p.out_header_len < 4000 ? p.out_header_len : 4000), p.out_header);
      finding("the planned output header does not read back", err2.msg);
    }
    size_t copies = 0;
    for (size_t k = 0; k < p.no; k++) copies += p.outs[k].kind == OUT_COPY;
    if (out.nt != copies + 3 * p.nj) finding("plan", "output tensor count");
    int record = 0;
    for (size_t k = 0; k < out.n_meta; k++) record += strcmp(out.meta[k].key, "ingot.quantize") == 0;
    if (record != 1) finding("plan", "not one ingot.quantize record in the output metadata");
    check_accepted(&out);
    check_against_model(&out);
    st_close(&out);
  }
  plan_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  st_error err;
  memset(&err, 0, sizeof err);
  st_file f;
  memset(&f, 0, sizeof f);
  f.fd = -1;
  int rc = st_open_memory(&f, "input", data, size, &err);
  check_result(rc, &err, "st_open_memory");
  if (rc == 0) {
    check_accepted(&f);
    check_against_model(&f);
    plan_and_reread(&f, 0, NULL);
    /* The --gate-up OUT name: the first bytes of the data section (up to a
     * NUL), which the reader never looks at, so the fuzzer shapes it freely. */
    char out_name[25] = "fuzz.gate_up";
    size_t at = 8 + (size_t)f.header_len, k = 0;
    while (k < 24 && at + k < size && data[at + k] != 0) k++;
    if (k > 0) {
      memcpy(out_name, data + at, k);
      out_name[k] = '\0';
    }
    plan_and_reread(&f, 1, out_name);
  }
  st_close(&f);
  return 0;
}
