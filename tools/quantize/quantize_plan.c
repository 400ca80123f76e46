/*
 * The plan of `ingot quantize`: matches --pattern globs against the tensor
 * names, pairs the --gate-up tensors, decides what each tensor becomes (copy
 * or NVFP4), names the outputs and checks they are unique, lays out the data
 * section (decreasing alignment, then input order, so every tensor stays
 * naturally aligned) and builds the output header with its "ingot.quantize"
 * metadata record.
 *
 * Trust: the input file was checked by src/io/safetensors_read.c (shapes, dtypes,
 * offsets, unique names); the patterns and --gate-up names come from the
 * command line and are checked here against the file. Reads no data.
 */
#define _POSIX_C_SOURCE 200809L

#include "quantize_plan.h"

#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define METADATA_KEY "ingot.quantize"
#define SUFFIX_VALUES ".nvfp4_values"
#define SUFFIX_SCALES ".nvfp4_scales"
#define SUFFIX_GS ".nvfp4_global_scale"

static char *concat(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *s = malloc(na + nb + 1);
  if (s == NULL) return NULL;
  memcpy(s, a, na);
  memcpy(s + na, b, nb + 1);
  return s;
}

/* Natural alignment of a dtype's elements in bytes (1 for sub-byte dtypes). */
static unsigned st_dtype_align(int d) { return st_dtypes[d].bits >= 8 ? st_dtypes[d].bits / 8 : 1; }

static int quantizable(const st_tensor *t) {
  return t->ndim == 2 && st_dtypes[t->dtype].ingot != INGOT_DTYPE_INVALID;
}

/* ---- jobs --------------------------------------------------------------------------------- */

static int add_job(qplan *p, int src0, int src1, const char *name) {
  const st_tensor *t = &p->in->t[src0];
  qjob *j = &p->jobs[p->nj];
  memset(j, 0, sizeof *j);
  j->src[0] = src0;
  j->src[1] = src1;
  j->name = malloc(strlen(name) + 1);
  if (j->name == NULL) return st_fail(p->err, "out of memory");
  strcpy(j->name, name);
  p->nj++;
  if (t->shape[0] > (uint64_t)INT64_MAX / 2 || t->shape[1] > (uint64_t)INT64_MAX)
    return st_fail(p->err, "%s: tensor '%s': shape too large", p->in->path, t->name);
  j->rows = (int64_t)t->shape[0] * (src1 >= 0 ? 2 : 1);
  j->cols = (int64_t)t->shape[1];
  if (ingot_nvfp4_scale_shape(j->rows, j->cols, &j->scale_rows, &j->scale_cols) != INGOT_OK)
    return st_fail(p->err, "%s: tensor '%s': %s", p->in->path, t->name, ingot_last_error(NULL));
  j->values_bytes = (uint64_t)j->rows * (uint64_t)(j->cols / 2);
  j->scales_bytes = (uint64_t)j->scale_rows * (uint64_t)j->scale_cols;
  return 0;
}

static int plan_jobs(qplan *p) {
  const st_file *in = p->in;
  size_t max_jobs = in->nt + (size_t)p->n_gate_up;
  p->jobs = calloc(max_jobs ? max_jobs : 1, sizeof *p->jobs);
  p->role = calloc(in->nt ? in->nt : 1, sizeof *p->role);
  if (p->jobs == NULL || p->role == NULL) return st_fail(p->err, "out of memory");

  // ---- --gate-up groups (first: their tensors are not quantized alone)
  for (int g = 0; g < p->n_gate_up; g++) {
    const char *gn = p->gate_up[3 * g], *un = p->gate_up[3 * g + 1], *on = p->gate_up[3 * g + 2];
    int gi = st_find(in, gn), ui = st_find(in, un);
    if (gi < 0) return st_fail(p->err, "--gate-up: %s has no tensor named '%s'", in->path, gn);
    if (ui < 0) return st_fail(p->err, "--gate-up: %s has no tensor named '%s'", in->path, un);
    if (gi == ui) return st_fail(p->err, "--gate-up: '%s' is both the gate and the up tensor", gn);
    /* OUT becomes a name in the output header, which must be UTF-8 JSON. */
    if (st_utf8_invalid_at((const unsigned char *)on, strlen(on)) < strlen(on))
      return st_fail(p->err,
                     "--gate-up: the output name '%s' is not valid UTF-8 (a safetensors header "
                     "is UTF-8 JSON)",
                     on);
    for (int k = 0; k < 2; k++) {
      const st_tensor *t = &in->t[k ? ui : gi];
      if (p->role[k ? ui : gi] != ROLE_COPY)
        return st_fail(p->err, "--gate-up: tensor '%s' is already used by another --gate-up",
                       t->name);
      if (!quantizable(t))
        return st_fail(p->err,
                       "--gate-up: tensor '%s' is %s with %d dimensions; expected a 2-D BF16, F16 "
                       "or F32 tensor",
                       t->name, st_dtypes[t->dtype].name, t->ndim);
    }
    const st_tensor *gt = &in->t[gi], *ut = &in->t[ui];
    if (gt->dtype != ut->dtype)
      return st_fail(p->err, "--gate-up: '%s' is %s but '%s' is %s; they must have the same dtype",
                     gn, st_dtypes[gt->dtype].name, un, st_dtypes[ut->dtype].name);
    if (gt->shape[0] != ut->shape[0] || gt->shape[1] != ut->shape[1])
      return st_fail(p->err,
                     "--gate-up: '%s' is [%" PRIu64 ", %" PRIu64 "] but '%s' is [%" PRIu64
                     ", %" PRIu64 "]; they must have the same shape [H, K]",
                     gn, gt->shape[0], gt->shape[1], un, ut->shape[0], ut->shape[1]);
    if (gt->shape[1] % 16 != 0)
      return st_fail(p->err,
                     "--gate-up: '%s' has %" PRIu64
                     " columns, not a multiple of 16 (the NVFP4 block)",
                     gn, gt->shape[1]);
    p->role[gi] = ROLE_GATE;
    p->role[ui] = ROLE_UP;
    if (add_job(p, gi, ui, on)) return -1;
  }

  // ---- --pattern matches
  int *hits = calloc((size_t)(p->n_patterns ? p->n_patterns : 1), sizeof *hits);
  if (hits == NULL) return st_fail(p->err, "out of memory");
  int rc = 0;
  for (size_t k = 0; k < in->nt && rc == 0; k++) {
    size_t i = in->by_name[k];
    const st_tensor *t = &in->t[i];
    int matched = 0;
    for (int q = 0; q < p->n_patterns; q++)
      if (fnmatch(p->patterns[q], t->name, 0) == 0) {
        hits[q]++;
        matched = 1;
      }
    if (!matched || p->role[i] != ROLE_COPY) continue;
    if (!quantizable(t)) {
      if (p->log != NULL)
        fprintf(p->log,
                "  copy      %s (matched, but %s with %d dimensions: not a 2-D BF16/F16/F32 "
                "tensor)\n",
                t->name, st_dtypes[t->dtype].name, t->ndim);
      continue;
    }
    if (t->shape[1] % 16 != 0) {
      rc = st_fail(p->err,
                   "tensor '%s' [%" PRIu64 ", %" PRIu64 "] matches a --pattern but its %" PRIu64
                   " columns are not a multiple of 16 (the NVFP4 block); narrow the pattern",
                   t->name, t->shape[0], t->shape[1], t->shape[1]);
      break;
    }
    p->role[i] = ROLE_QUANT;
    rc = add_job(p, (int)i, -1, t->name);
  }
  for (int q = 0; q < p->n_patterns && rc == 0; q++)
    if (hits[q] == 0)
      fprintf(stderr, "ingot quantize: warning: --pattern '%s' matches no tensor of %s\n",
              p->patterns[q], in->path);
  free(hits);
  return rc;
}

/* ---- output names ----------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every output name once: copies keep theirs; jobs add three. */
static int check_output_names(qplan *p) {
  size_t n = 0, cap = p->in->nt + 3 * p->nj, nowned = 0;
  const char **names = malloc(sizeof *names * (cap ? cap : 1));
  char **owned = malloc(sizeof *owned * (3 * p->nj + 1));
  int rc = 0;
  if (names == NULL || owned == NULL) rc = st_fail(p->err, "out of memory");
  for (size_t i = 0; i < p->in->nt && rc == 0; i++)
    if (p->role[i] == ROLE_COPY) names[n++] = p->in->t[i].name;
  static const char *const suffixes[] = {SUFFIX_VALUES, SUFFIX_SCALES, SUFFIX_GS};
  for (size_t j = 0; j < p->nj && rc == 0; j++)
    for (int s = 0; s < 3 && rc == 0; s++) {
      char *name = concat(p->jobs[j].name, suffixes[s]);
      if (name == NULL) {
        rc = st_fail(p->err, "out of memory");
        break;
      }
      owned[nowned++] = name;
      names[n++] = name;
    }
  if (rc == 0) {
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 1; i < n; i++)
      if (strcmp(names[i], names[i - 1]) == 0) {
        rc = st_fail(p->err,
                     "output tensor name '%s' would appear twice (an input tensor of that name "
                     "is kept, or two quantized tensors share it): rename, or narrow --pattern",
                     names[i]);
        break;
      }
  }
  for (size_t i = 0; i < nowned; i++) free(owned[i]);
  free(owned);
  free(names);
  return rc;
}

/* ---- layout ------------------------------------------------------------------------------ */

static int cmp_out(const void *a, const void *b) {
  const out_item *x = a, *y = b;
  if (x->align != y->align) return x->align > y->align ? -1 : 1;
  if (x->order != y->order) return x->order < y->order ? -1 : 1;
  return 0;
}

uint64_t plan_unit_bytes(const qjob *j) { return j->values_bytes + j->scales_bytes + 4; }

/* Lays out the data section. Items are sorted by decreasing alignment (a
 * quantized unit counts as 4: its values and scales are multiples of 8
 * bytes, its global scale is F32), then by the source's position in IN, so
 * every tensor's data stays aligned to its element size. */
static int plan_layout(qplan *p) {
  const st_file *in = p->in;
  size_t n = 0;
  for (size_t i = 0; i < in->nt; i++) n += p->role[i] == ROLE_COPY;
  n += p->nj;
  p->outs = calloc(n ? n : 1, sizeof *p->outs);
  if (p->outs == NULL) return st_fail(p->err, "out of memory");
  for (size_t i = 0; i < in->nt; i++)
    if (p->role[i] == ROLE_COPY) {
      out_item *o = &p->outs[p->no++];
      o->kind = OUT_COPY;
      o->index = (int)i;
      o->align = st_dtype_align(in->t[i].dtype);
      o->order = in->t[i].order;
    }
  for (size_t j = 0; j < p->nj; j++) {
    out_item *o = &p->outs[p->no++];
    o->kind = OUT_UNIT;
    o->index = (int)j;
    o->align = 4;
    o->order = in->t[p->jobs[j].src[0]].order;
  }
  qsort(p->outs, p->no, sizeof *p->outs, cmp_out);
  uint64_t off = 0;
  for (size_t k = 0; k < p->no; k++) {
    out_item *o = &p->outs[k];
    o->begin = off;
    uint64_t size = o->kind == OUT_COPY ? in->t[o->index].end - in->t[o->index].begin
                                        : plan_unit_bytes(&p->jobs[o->index]);
    if (__builtin_add_overflow(off, size, &off)) return st_fail(p->err, "output too large");
  }
  p->out_data_len = off;
  return 0;
}

/* ---- header ------------------------------------------------------------------------------ */

/* The "ingot.quantize" metadata value: a JSON object, as a string. */
static char *metadata_record(const qplan *p) {
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
  for (size_t j = 0; j < p->nj && ok; j++) {
    const qjob *job = &p->jobs[j];
    if (job->src[1] < 0) {
      cJSON *s = cJSON_CreateString(job->name);
      ok = s != NULL && cJSON_AddItemToArray(quantized, s);
    } else {
      cJSON *g = cJSON_CreateObject();
      ok = g != NULL && cJSON_AddItemToArray(gate_up, g) &&
           cJSON_AddStringToObject(g, "out", job->name) != NULL &&
           cJSON_AddStringToObject(g, "gate", p->in->t[job->src[0]].name) != NULL &&
           cJSON_AddStringToObject(g, "up", p->in->t[job->src[1]].name) != NULL;
    }
  }
  char *s = ok ? cJSON_PrintUnformatted(rec) : NULL;
  cJSON_Delete(rec);
  return s;
}

/* The output header: __metadata__ first (IN's entries in order, ours last),
 * then the tensors in data order. */
static int build_header(qplan *p) {
  char *record = metadata_record(p);
  if (record == NULL) return st_fail(p->err, "out of memory");
  st_header h;
  st_header_begin(&h);
  for (size_t k = 0; k < p->in->n_meta; k++) {
    const st_meta *e = &p->in->meta[k];
    if (strcmp(e->key, METADATA_KEY) == 0) continue; /* replaced below */
    st_header_meta(&h, e->key, e->value);
  }
  st_header_meta(&h, METADATA_KEY, record);
  cJSON_free(record);
  for (size_t k = 0; k < p->no; k++) {
    const out_item *o = &p->outs[k];
    if (o->kind == OUT_COPY) {
      const st_tensor *t = &p->in->t[o->index];
      st_header_tensor(&h, t->name, NULL, st_dtypes[t->dtype].name, t->ndim, t->shape, o->begin,
                       o->begin + (t->end - t->begin));
      continue;
    }
    const qjob *j = &p->jobs[o->index];
    uint64_t vshape[2] = {(uint64_t)j->rows, (uint64_t)j->cols / 2};
    uint64_t sshape[2] = {(uint64_t)j->scale_rows, (uint64_t)j->scale_cols};
    uint64_t gshape[1] = {1};
    uint64_t v0 = o->begin, s0 = v0 + j->values_bytes, g0 = s0 + j->scales_bytes;
    st_header_tensor(&h, j->name, SUFFIX_VALUES, "U8", 2, vshape, v0, s0);
    st_header_tensor(&h, j->name, SUFFIX_SCALES, "F8_E4M3", 2, sshape, s0, g0);
    st_header_tensor(&h, j->name, SUFFIX_GS, "F32", 1, gshape, g0, g0 + 4);
  }
  return st_header_end(&h, &p->out_header, &p->out_header_len, p->err);
}

/* ---- entry points ----------------------------------------------------------------------- */

int plan_build(qplan *p) {
  int rc = plan_jobs(p);
  if (rc == 0) rc = check_output_names(p);
  if (rc == 0) rc = plan_layout(p);
  if (rc == 0) rc = build_header(p);
  return rc;
}

void plan_free(qplan *p) {
  for (size_t j = 0; j < p->nj; j++) free(p->jobs[j].name);
  free(p->jobs);
  free(p->role);
  free(p->outs);
  free(p->out_header);
}
