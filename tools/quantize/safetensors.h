/*
 * safetensors files for `ingot quantize`: the writer (safetensors_write.c),
 * shared with the planner (quantize_plan.c) and the command line
 * (quantize_cli.c), beside the library's reader (src/io/safetensors_read.h,
 * whose source the tool compiles too: one reader for the library and the
 * tool). The writer needs no JSON library; the planner needs cJSON
 * (tools/CMakeLists.txt).
 */
#ifndef INGOT_TOOLS_SAFETENSORS_H
#define INGOT_TOOLS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors_read.h"

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
