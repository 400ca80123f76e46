/*
 * safetensors files for `ingot quantize`: what the reader
 * (safetensors_read.c) and the writer (safetensors_write.c) share with the
 * planner (quantize_plan.c) and the command line (quantize_cli.c).
 * A safetensors file: an 8-byte little-endian header length, a JSON header
 * (name -> dtype, shape, data_offsets; optional "__metadata__"), the data.
 *
 * Trust: an st_file that st_open() accepted has been checked completely (see
 * safetensors_read.c): its names, dtypes, shapes and offsets may be used as
 * they are. Its data bytes are not checked (any bit pattern is a value).
 * Built only with cJSON (tools/CMakeLists.txt).
 */
#ifndef INGOT_TOOLS_SAFETENSORS_H
#define INGOT_TOOLS_SAFETENSORS_H

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ingot/ingot.h"

#define ST_MAX_HEADER_BYTES 100000000u /* the limit safetensors readers enforce */

#if defined(__GNUC__) || defined(__clang__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

/* ---- errors ------------------------------------------------------------------------- */

/* The first error of a run (later ones are consequences). */
typedef struct {
  char msg[2048];
} st_error;

/* Records the error unless one is already recorded; returns -1. */
static inline int PRINTF_LIKE(2, 3) st_fail(st_error *e, const char *fmt, ...) {
  if (e->msg[0] == '\0') {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* ---- dtypes ------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  unsigned bits;     /* bits per element */
  ingot_dtype ingot; /* what ingot can quantize from; INVALID otherwise */
} st_dtype;

/* Every dtype of the format (safetensors_read.c), st_n_dtypes of them. */
extern const st_dtype st_dtypes[];
extern const int st_n_dtypes;

/* ---- reading (safetensors_read.c) --------------------------------------------------- */

typedef struct {
  const char *name;    /* in the cJSON tree */
  int dtype;           /* index into st_dtypes */
  int ndim;
  uint64_t *shape;     /* [ndim], owned */
  uint64_t begin, end; /* byte range in the data section */
  size_t order;        /* rank by data offset */
} st_tensor;

typedef struct {
  const char *path;
  st_error *err;
  int fd;
  uint64_t file_size, header_len, data_len;
  char *header;
  cJSON *root;
  const cJSON *metadata; /* NULL when absent or null */
  int metadata_seen;
  st_tensor *t; /* in header order */
  size_t nt;
  size_t *by_name; /* tensor indices sorted by name */
} st_file;

/* Opens path and checks all of it but the data bytes; nothing else is read
 * from an unchecked file. f must be zeroed with fd = -1. Returns 0, or -1
 * with the reason in *err; call st_close() in both cases. */
int st_open(st_file *f, const char *path, st_error *err);

/* The same checks on a whole file held in memory, the size bytes at `bytes`
 * (only its length and header are read); `name` stands for the path in
 * messages. f as for st_open (st_close it; fd stays -1). */
int st_open_memory(st_file *f, const char *name, const void *bytes, size_t size, st_error *err);

/* The checks of the header alone: header_len bytes of JSON (copied) for a
 * data section of data_len bytes, as if read from a file. */
int st_parse_header(st_file *f, const char *name, const char *header, size_t header_len,
                    uint64_t data_len, st_error *err);

void st_close(st_file *f);

/* The index of the tensor called name, or -1. */
int st_find(const st_file *f, const char *name);

/* Offset of the first byte of s[0, n) that is not valid UTF-8, or n. */
size_t st_utf8_invalid_at(const unsigned char *s, size_t n);

/* Reads exactly n bytes at byte off of the file (not of the data section);
 * `what` names them in the error message. */
int st_read_at(st_file *f, void *buf, size_t n, uint64_t off, const char *what);

/* ---- writing (safetensors_write.c) -------------------------------------------------- */

/* A header under construction: __metadata__ first, then the tensors. */
typedef struct {
  char *p;
  size_t len, cap;
  int oom;
  int n_meta, tensors; /* metadata entries so far; whether __metadata__ is closed */
} st_header;

void st_header_begin(st_header *h);
void st_header_meta(st_header *h, const char *key, const char *value);
/* The tensor entry "name" + suffix (suffix may be NULL). */
void st_header_tensor(st_header *h, const char *name, const char *suffix, const char *dtype,
                      int ndim, const uint64_t *shape, uint64_t begin, uint64_t end);
/* Closes and pads the header (spaces, to a multiple of 8): *out (malloc'd)
 * and *len, or -1 with the reason in *err (out of memory, over the limit). */
int st_header_end(st_header *h, char **out, size_t *len, st_error *err);

/* An output file being written: OUT.tmp-XXXXXX beside OUT until renamed. */
typedef struct {
  const char *path; /* OUT */
  int fd;
  unsigned char *buf; /* for st_write_copy */
  st_error *err;
} st_writer;

/* Creates the temporary file (removed on SIGINT / SIGTERM / SIGHUP) and
 * writes the header length and header. On failure nothing is left behind
 * and -1 is returned; on success call st_write_end() once. */
int st_write_begin(st_writer *w, const char *path, const char *header, size_t header_len,
                   st_error *err);
int st_write(st_writer *w, const void *buf, size_t n);
/* Copies tensor t of in, byte for byte. */
int st_write_copy(st_writer *w, st_file *in, const st_tensor *t);
/* rc == 0: fsync, close and rename to OUT; else (or if that fails) remove
 * the temporary file. Returns 0 when OUT is complete, else -1. */
int st_write_end(st_writer *w, int rc);

#endif /* INGOT_TOOLS_SAFETENSORS_H */
