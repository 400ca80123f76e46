/*
 * The safetensors reader (safetensors_read.c), shared by the library's PLE
 * table loader (ple_load.c) and `ingot quantize` (tools/quantize/, which
 * compiles the same file). Not installed.
 * A safetensors file: an 8-byte little-endian header length, a JSON header
 * (name -> dtype, shape, data_offsets; optional "__metadata__"), the data.
 *
 * Trust: an st_file that st_open() accepted has been checked completely (see
 * safetensors_read.c): its names, dtypes, shapes and offsets may be used as
 * they are. Its data bytes are not checked (any bit pattern is a value).
 * No JSON library: the header is checked strictly, then read in a second
 * pass over the checked text.
 */
#ifndef INGOT_IO_SAFETENSORS_READ_H
#define INGOT_IO_SAFETENSORS_READ_H

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
  int out_of_memory; /* msg is an allocation failure (st_fail_oom), not a bad file */
} st_error;

static inline int PRINTF_LIKE(3, 0) st_vfail(st_error *e, int out_of_memory, const char *fmt,
                                                va_list ap) {
  if (e->msg[0] == '\0') {
    e->out_of_memory = out_of_memory;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  }
  return -1;
}

/* Records the error unless one is already recorded; returns -1. */
static inline int PRINTF_LIKE(2, 3) st_fail(st_error *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st_vfail(e, 0, fmt, ap);
  va_end(ap);
  return -1;
}

/* st_fail for an allocation that failed: "out of memory ...", marked so. */
static inline int PRINTF_LIKE(2, 3) st_fail_oom(st_error *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st_vfail(e, 1, fmt, ap);
  va_end(ap);
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

/* The index of the dtype called name in st_dtypes, or -1. */
int st_dtype_find(const char *name);

/* ---- reading ------------------------------------------------------------------------ */

typedef struct {
  const char *name;    /* decoded (UTF-8, no NUL inside), in st_file.strings */
  int dtype;           /* index into st_dtypes */
  int ndim;
  uint64_t *shape;     /* [ndim], owned */
  uint64_t begin, end; /* byte range in the data section */
  size_t order;        /* rank by data offset */
} st_tensor;

/* One "__metadata__" entry, decoded, in header order. */
typedef struct {
  const char *key, *value; /* in st_file.strings */
} st_meta;

typedef struct {
  const char *path;
  st_error *err;
  int fd;                       /* st_open; -1 otherwise */
  uint64_t device, inode;       /* st_open: the file's identity (st_dev, st_ino) */
  const unsigned char *memory;  /* st_open_memory: the file's bytes; NULL otherwise */
  uint64_t file_size, header_len, data_len;
  char *header;                 /* header_len bytes and a NUL, owned */
  char *strings;                /* every decoded string (names, metadata), owned */
  int metadata_seen;            /* "__metadata__" present (null or an object) */
  st_meta *meta;                /* n_meta entries (none when absent or null), owned */
  size_t n_meta;
  st_tensor *t;                 /* in header order */
  size_t nt;
  size_t *by_name;              /* tensor indices sorted by name */
} st_file;

/* Opens path and checks all of it but the data bytes; nothing else is read
 * from an unchecked file. f must be zeroed with fd = -1. Returns 0, or -1
 * with the reason in *err; call st_close() in both cases. */
int st_open(st_file *f, const char *path, st_error *err);

/* The same checks on a whole file held in memory, the size bytes at `bytes`,
 * which must stay valid until st_close() (st_read_at reads them); `name`
 * stands for the path in messages. f as for st_open (st_close it; fd stays
 * -1). */
int st_open_memory(st_file *f, const char *name, const void *bytes, size_t size, st_error *err);

/* The checks of the header alone: header_len bytes of JSON (copied) for a
 * data section of data_len bytes, as if read from a file (st_read_at then
 * fails). */
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

#endif /* INGOT_IO_SAFETENSORS_READ_H */
