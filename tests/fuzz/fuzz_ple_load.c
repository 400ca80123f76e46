/*
 * Fuzz target: the n-gram (PLE) table loader (src/io/ple_load.c) on up to
 * four safetensors files held in memory: the reader (st_open_memory), then
 * ple_layout_find (the prefix, the shard names and indices, dtypes, shapes,
 * D, the rows' total, the scale) and, when it accepts, ple_layout_copy into
 * a buffer with a guard zone.
 *
 * The input: byte 0 flags (bits 0-1: files - 1; bit 2: pass the prefix
 * below, else find it; bit 3: pass row_bytes = byte 1, else take shard_0's),
 * byte 1 row_bytes, byte 2 the prefix's length P, then P bytes of prefix,
 * then the files: each but the last as a 4-byte little-endian length and
 * that many bytes (cut at the end of the input), the last one the rest.
 *
 * Findings (abort): a crash or sanitizer report; a result and an error text
 * that disagree; an accepted table that an independent check here refuses
 * or reads differently (every shard_<k>.weight of the prefix, k < S, in
 * exactly one file, F8_E4M3 [rows_k, D] with D = row_bytes when given, the
 * rows' total, no other shard_ name, a finite scale of one tensor); a copy
 * that fails, differs from the shards' bytes concatenated, or writes past
 * the table.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "io/ple_load.h"

#define MAX_FILES 4
#define GUARD 64

static void finding(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_ple_load: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

static void check_result(int rc, const st_error *err, const char *what) {
  if (rc == 0 && err->msg[0] != '\0') finding(what, "succeeded with an error text");
  if (rc != 0 && err->msg[0] == '\0') finding(what, "failed without an error text");
  if (rc != 0 && rc != -1) finding(what, "returned neither 0 nor -1");
}

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* The layout the loader accepted, checked against the files by name. */
static void check_layout(const st_file *files, size_t n, const ple_layout *l, int64_t row_bytes) {
  if (l->prefix == NULL || l->num_shards < 1 || l->row_bytes < 1) finding("layout", "empty");
  if (row_bytes > 0 && l->row_bytes != row_bytes) finding("layout", "D is not row_bytes");
  if (!isfinite(l->weight_scale)) finding("layout", "a scale that is not finite");
  size_t plen = strlen(l->prefix);
  char *name = malloc(plen + 64);
  if (name == NULL) finding("out of memory", NULL);
  int64_t rows = 0;
  for (int32_t k = 0; k < l->num_shards; k++) {
    snprintf(name, plen + 64, "%sngram_embedding.shard_%d.weight", l->prefix, (int)k);
    int found = 0;
    for (size_t f = 0; f < n; f++) {
      int i = st_find(&files[f], name);
      if (i < 0) continue;
      found++;
      const st_tensor *t = &files[f].t[i];
      if (strcmp(st_dtypes[t->dtype].name, "F8_E4M3") != 0 || t->ndim != 2 ||
          t->shape[1] != (uint64_t)l->row_bytes)
        finding("layout", "a shard that is not F8_E4M3 [rows, D]");
      if (l->shards[k].index != k || l->shards[k].file != f || l->shards[k].tensor != (size_t)i)
        finding("layout", "a shard at another place than its name says");
      rows += (int64_t)t->shape[0];
    }
    if (found != 1) finding("layout", "a shard index not in exactly one file");
  }
  if (rows != l->rows) finding("layout", "the rows' total");
  /* nothing else under "<prefix>ngram_embedding.shard_"; one scale */
  snprintf(name, plen + 64, "%sngram_embedding.shard_", l->prefix);
  int scales = 0;
  for (size_t f = 0; f < n; f++)
    for (size_t i = 0; i < files[f].nt; i++) {
      const char *tn = files[f].t[i].name;
      if (strncmp(tn, l->prefix, plen) == 0 &&
          strcmp(tn + plen, "ngram_embedding.weight_scale") == 0)
        scales++;
      if (!starts_with(tn, name)) continue;
      char *end;
      long k = strtol(tn + strlen(name), &end, 10);
      if (!(k >= 0 && k < l->num_shards && strcmp(end, ".weight") == 0))
        finding("layout", "a shard name beyond the shards accepted");
      char canonical[32];
      snprintf(canonical, sizeof canonical, "%ld.weight", k);
      if (strcmp(tn + strlen(name), canonical) != 0)
        finding("layout", "a shard name not in canonical form was accepted");
    }
  if (scales != 1) finding("layout", "not exactly one weight_scale");
  free(name);
}

/* Copies and compares with the shards' bytes in the input. */
static void check_copy(st_file *files, const ple_layout *l, const unsigned char *const *bytes) {
  size_t total = (size_t)(l->rows * l->row_bytes);
  unsigned char *dst = malloc(total + GUARD);
  if (dst == NULL) finding("out of memory", NULL);
  memset(dst, 0xa5, total + GUARD);
  st_error err;
  memset(&err, 0, sizeof err);
  int rc = ple_layout_copy(files, l, dst, NULL, NULL, &err);
  check_result(rc, &err, "ple_layout_copy");
  if (rc != 0) finding("a copy from memory failed", err.msg);
  size_t at = 0;
  for (int32_t k = 0; k < l->num_shards; k++) {
    const st_file *f = &files[l->shards[k].file];
    const st_tensor *t = &f->t[l->shards[k].tensor];
    size_t nb = (size_t)(t->end - t->begin);
    if (memcmp(dst + at, bytes[l->shards[k].file] + 8 + f->header_len + t->begin, nb) != 0)
      finding("copy", "the table differs from the shards' bytes");
    at += nb;
  }
  if (at != total) finding("copy", "the shards' bytes are not the table's");
  for (size_t i = 0; i < GUARD; i++)
    if (dst[total + i] != 0xa5) finding("copy", "a write past the table");
  free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  const int num_files = 1 + (data[0] & 3), pass_prefix = data[0] >> 2 & 1;
  const int64_t row_bytes = data[0] >> 3 & 1 ? data[1] : 0;
  size_t plen = data[2], at = 3;
  if (plen > size - at) plen = size - at;
  char prefix[256];
  memcpy(prefix, data + at, plen);
  prefix[plen] = '\0'; /* a NUL inside cuts it short, as a C caller's would */
  at += plen;

  st_file files[MAX_FILES];
  const unsigned char *bytes[MAX_FILES];
  size_t kept = 0;
  st_error err;
  memset(&err, 0, sizeof err);
  int rc = 0;
  for (int f = 0; f < num_files && rc == 0; f++) {
    size_t len = size - at;
    if (f + 1 < num_files) {
      len = 0;
      for (int b = 0; b < 4 && at < size; b++) len |= (size_t)data[at++] << (8 * b);
      if (len > size - at) len = size - at;
    }
    static const char *const names[MAX_FILES] = {"file0", "file1", "file2", "file3"};
    st_file *sf = &files[kept];
    memset(sf, 0, sizeof *sf);
    sf->fd = -1;
    rc = st_open_memory(sf, names[f], data + at, len, &err);
    check_result(rc, &err, "st_open_memory");
    if (rc == 0 && ple_file_has_table(sf, pass_prefix ? prefix : NULL)) {
      bytes[kept++] = data + at;
    } else {
      st_close(sf);
    }
    at += len;
  }
  if (rc == 0) {
    ple_layout l;
    rc = ple_layout_find(files, kept, (size_t)num_files, pass_prefix ? prefix : NULL, row_bytes,
                         &l, &err);
    check_result(rc, &err, "ple_layout_find");
    if (rc == 0) {
      check_layout(files, kept, &l, row_bytes);
      check_copy(files, &l, bytes);
    }
    ple_layout_free(&l);
  }
  for (size_t f = 0; f < kept; f++) st_close(&files[f]);
  return 0;
}
