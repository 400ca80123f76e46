/*
 * The n-gram (PLE) table loader on files the safetensors reader has opened
 * (ple_load.c): what ingot_ngram_table_probe / ingot_ngram_table_load run
 * once they have opened the caller's paths, and what
 * tests/fuzz/fuzz_ple_load.c runs on files held in memory. Not installed.
 *
 * The layout of a checkpoint's table: tensors
 * "<prefix>ngram_embedding.shard_<i>.weight", F8_E4M3 [rows_i, D], i = 0..S-1
 * (any files, any order), and the scalar "<prefix>ngram_embedding.weight_scale"
 * (F32 or BF16, shape [] or [1]). The table is the shards concatenated in
 * index order.
 */
#ifndef INGOT_IO_PLE_LOAD_H
#define INGOT_IO_PLE_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors_read.h"

typedef struct {
  int64_t index; /* i of shard_<i> */
  size_t file;   /* index into the files */
  size_t tensor; /* index into that file's tensors */
} ple_shard;

/* A table found and checked in a set of files. */
typedef struct {
  char *prefix;      /* the names' prefix, owned */
  ple_shard *shards; /* [num_shards] in index order, owned */
  int32_t num_shards;
  int64_t rows;      /* sum of the shards' rows */
  int64_t row_bytes; /* D */
  float weight_scale;
} ple_layout;

/* Whether a file has a tensor of a table with this prefix (NULL: any
 * prefix): files without one can be closed early. */
int ple_file_has_table(const st_file *f, const char *prefix);

/* Finds the table in files[0, n) (every one accepted by st_open or
 * st_open_memory; `scanned` >= n is how many files the caller looked at, for
 * messages) and checks it: one prefix (or the one given), shards 0..S-1 each
 * exactly once, F8_E4M3, 2-D, one D for all (row_bytes when > 0), the rows'
 * total and bytes within int64, a weight_scale of a valid dtype and shape
 * whose value (read here) is finite. Writes nothing else. Returns 0 with
 * *out filled (ple_layout_free it), or -1 with the reason in *err. */
int ple_layout_find(st_file *files, size_t n, size_t scanned, const char *prefix,
                    int64_t row_bytes, ple_layout *out, st_error *err);

/* Copies the table into dst (l->rows * l->row_bytes bytes, host-writable):
 * each shard's bytes read in chunks straight into place, progress(done,
 * total, user) after each chunk when progress is not NULL. On a read error
 * the bytes written so far are set to zero and -1 is returned with the
 * reason in *err. */
int ple_layout_copy(st_file *files, const ple_layout *l, unsigned char *dst,
                    ingot_ngram_table_progress_fn progress, void *progress_user,
                    st_error *err);

void ple_layout_free(ple_layout *l);

#endif /* INGOT_IO_PLE_LOAD_H */
