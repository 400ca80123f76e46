/*
 * The plan of `ingot quantize` (quantize_plan.c), shared with the command
 * line (quantize_cli.c): which input tensors are copied, which become NVFP4
 * (alone, or as --gate-up pairs), the output names, shapes and layout, and
 * the output header.
 *
 * Trust: the input is an st_file that src/io/safetensors_read.c has checked; the
 * patterns and names come from the command line. Built only with cJSON.
 */
#ifndef INGOT_TOOLS_QUANTIZE_PLAN_H
#define INGOT_TOOLS_QUANTIZE_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "safetensors.h"

enum { ROLE_COPY = 0, ROLE_QUANT, ROLE_GATE, ROLE_UP };

/* One quantized output: the three tensors NAME.nvfp4_{values,scales,global_scale}. */
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
  int index;      /* input tensor (OUT_COPY) or job (OUT_UNIT) */
  unsigned align; /* sort key 1 (descending) */
  size_t order;   /* sort key 2 (ascending): the source's rank in IN */
  uint64_t begin; /* data offset */
} out_item;

typedef struct {
  /* what to do: set by the caller */
  const st_file *in;
  const char **patterns;
  int n_patterns;
  const char **gate_up; /* 3 per group: gate, up, out */
  int n_gate_up;
  FILE *log; /* progress lines (stdout), or NULL when quiet */
  st_error *err;
  /* the plan */
  int *role; /* [in->nt]: ROLE_* */
  qjob *jobs;
  size_t nj;
  out_item *outs; /* in data order */
  size_t no;
  char *out_header; /* padded JSON */
  size_t out_header_len;
  uint64_t out_data_len;
} qplan;

/* Plans everything and builds the output header; 0, or -1 with the reason
 * in *p->err. Call plan_free() in both cases. */
int plan_build(qplan *p);
void plan_free(qplan *p);

/* Bytes of a quantized unit in the data section. */
uint64_t plan_unit_bytes(const qjob *j);

#endif /* INGOT_TOOLS_QUANTIZE_PLAN_H */
