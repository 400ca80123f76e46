/*
 * The safetensors writer of `ingot quantize`: builds the output header
 * (JSON, padded to a multiple of 8) and writes OUT atomically: into
 * OUT.tmp-XXXXXX beside it, fsync, rename; any failure (or SIGINT / SIGTERM /
 * SIGHUP) removes the temporary file, so there is never a partial OUT.
 *
 * Trust: its callers. Names, dtypes, shapes and offsets come from the planner
 * and from an input that safetensors_read.c has checked; strings are escaped
 * for JSON, nothing else is checked again. Tensor data is copied unread.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "safetensors.h"

#define COPY_CHUNK ((size_t)16 << 20)
#define TMP_SUFFIX ".tmp-XXXXXX"

/* ---- header ------------------------------------------------------------------------------ */

static void sb_put(st_header *b, const char *s, size_t n) {
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

static void sb_puts(st_header *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(st_header *b, uint64_t v) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
  sb_put(b, tmp, (size_t)n);
}

/* s inside a JSON string literal (UTF-8 passes through; ", \ and control
 * characters are escaped). */
static void sb_json_escaped(st_header *b, const char *s) {
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
}

/* s + suffix (suffix may be NULL) as one JSON string literal. */
static void sb_json_string(st_header *b, const char *s, const char *suffix) {
  sb_put(b, "\"", 1);
  sb_json_escaped(b, s);
  if (suffix != NULL) sb_json_escaped(b, suffix);
  sb_put(b, "\"", 1);
}

void st_header_begin(st_header *h) {
  memset(h, 0, sizeof *h);
  sb_puts(h, "{\"__metadata__\":{");
}

void st_header_meta(st_header *h, const char *key, const char *value) {
  if (h->n_meta++) sb_put(h, ",", 1);
  sb_json_string(h, key, NULL);
  sb_put(h, ":", 1);
  sb_json_string(h, value, NULL);
}

static void end_metadata(st_header *h) {
  if (h->tensors) return;
  sb_put(h, "}", 1);
  h->tensors = 1;
}

void st_header_tensor(st_header *h, const char *name, const char *suffix, const char *dtype,
                      int ndim, const uint64_t *shape, uint64_t begin, uint64_t end) {
  end_metadata(h);
  sb_put(h, ",", 1);
  sb_json_string(h, name, suffix);
  sb_puts(h, ":{\"dtype\":");
  sb_json_string(h, dtype, NULL);
  sb_puts(h, ",\"shape\":[");
  for (int d = 0; d < ndim; d++) {
    if (d) sb_put(h, ",", 1);
    sb_u64(h, shape[d]);
  }
  sb_puts(h, "],\"data_offsets\":[");
  sb_u64(h, begin);
  sb_put(h, ",", 1);
  sb_u64(h, end);
  sb_puts(h, "]}");
}

int st_header_end(st_header *h, char **out, size_t *len, st_error *err) {
  end_metadata(h);
  sb_put(h, "}", 1);
  while (!h->oom && h->len % 8 != 0) sb_put(h, " ", 1);
  if (h->oom) {
    free(h->p);
    return st_fail(err, "out of memory (output header)");
  }
  if (h->len > ST_MAX_HEADER_BYTES) {
    free(h->p);
    return st_fail(err, "the output header would be %zu bytes, over the safetensors limit of %u",
                   h->len, ST_MAX_HEADER_BYTES);
  }
  *out = h->p;
  *len = h->len;
  return 0;
}

/* ---- file -------------------------------------------------------------------------------- */

static void put_le64(unsigned char b[8], uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

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

int st_write(st_writer *w, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n > 0) {
    ssize_t put = write(w->fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
    if (put < 0) {
      if (errno == EINTR) continue;
      return st_fail(w->err, "%s: write failed: %s", tmp_path, strerror(errno));
    }
    p += put;
    n -= (size_t)put;
  }
  return 0;
}

int st_write_copy(st_writer *w, st_file *in, const st_tensor *t) {
  uint64_t off = 8 + in->header_len + t->begin, left = t->end - t->begin;
  while (left > 0) {
    size_t n = left > COPY_CHUNK ? COPY_CHUNK : (size_t)left;
    if (st_read_at(in, w->buf, n, off, t->name) || st_write(w, w->buf, n)) return -1;
    off += n;
    left -= n;
  }
  return 0;
}

int st_write_begin(st_writer *w, const char *path, const char *header, size_t header_len,
                   st_error *err) {
  memset(w, 0, sizeof *w);
  w->path = path;
  w->fd = -1;
  w->err = err;
  size_t plen = strlen(path);
  if (plen + sizeof TMP_SUFFIX > sizeof tmp_path)
    return st_fail(err, "%s: output path too long", path);
  memcpy(tmp_path, path, plen);
  memcpy(tmp_path + plen, TMP_SUFFIX, sizeof TMP_SUFFIX);
  catch_signals();
  w->fd = mkstemp(tmp_path);
  if (w->fd < 0)
    return st_fail(err, "%s: cannot create the temporary file %s: %s", path, tmp_path,
                   strerror(errno));
  tmp_live = 1;
  mode_t mask = umask(0);
  umask(mask);
  w->buf = malloc(COPY_CHUNK);
  int rc = w->buf == NULL ? st_fail(err, "out of memory") : 0;
  if (rc == 0 && fchmod(w->fd, (mode_t)0666 & ~mask) != 0)
    rc = st_fail(err, "%s: chmod: %s", tmp_path, strerror(errno));
  if (rc == 0) {
    unsigned char len8[8];
    put_le64(len8, (uint64_t)header_len);
    rc = st_write(w, len8, 8);
  }
  if (rc == 0) rc = st_write(w, header, header_len);
  if (rc != 0) return st_write_end(w, rc);
  return 0;
}

int st_write_end(st_writer *w, int rc) {
  free(w->buf);
  w->buf = NULL;
  if (rc == 0 && fsync(w->fd) != 0)
    rc = st_fail(w->err, "%s: fsync: %s", tmp_path, strerror(errno));
  if (close(w->fd) != 0 && rc == 0)
    rc = st_fail(w->err, "%s: close: %s", tmp_path, strerror(errno));
  w->fd = -1;
  if (rc == 0 && rename(tmp_path, w->path) != 0)
    rc = st_fail(w->err, "cannot rename %s to %s: %s", tmp_path, w->path, strerror(errno));
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
