/*
 * Fuzz target: the argument checks and size queries of every op family, on
 * the CPU backend, through the public API only.
 *
 * The input is decoded into one call: which op (first byte), the shape of a
 * consistent ("as built") call, then, unless the input asks for an
 * unperturbed call, a perturbation of every field: descriptors (ndim, dtype,
 * shape, stride, data pointer; sometimes NULL), scalars, flags, struct sizes,
 * the workspace, the context (sometimes NULL) and the stream. Byte 1 below
 * 0x40 asks for the call as built. The last byte, times 16, is how many bytes
 * before it are tensor contents (repeated over the first FILL_BYTES of every
 * region); builders also write valid index lists, cu_seqlens and per-row
 * parameters unless the input says not to, so that valid calls reach the
 * kernels. INGOT_FUZZ_VERBOSE=1 prints each call's status and error text.
 * Sharded sampling calls (fuzz_op_args_shard.inc) first run the earlier
 * steps of every shard, unperturbed, so that valid calls get valid records.
 *
 * Memory. Every data pointer points into one buffer (g_buf: NREG regions of
 * REG_BYTES for tensors, then WS_BYTES of workspace), or is NULL. A VALID call
 * can never reach past it: before the call, every descriptor whose elements
 * (by the library's own extent rule) would not fit between its data pointer
 * and the end of the buffer gets data = NULL; a non-empty tensor with NULL
 * data is invalid, so such a call must fail (checked below). The workspace
 * size passed never exceeds the bytes left after the workspace pointer.
 * Under AddressSanitizer every byte outside the extents of the call's
 * tensors and its workspace is also poisoned during the call (guard()), so
 * an access past an accepted extent is reported even inside the buffer.
 *
 * Findings (abort): a crash or sanitizer report; a status outside the enum;
 * INTERNAL or CUDA_ERROR (CPU backend); a failure with an empty
 * ingot_last_error(ctx); SUCCESS for a call the harness knows is invalid (a
 * non-empty tensor with NULL data, a stream on a CPU context, a NULL
 * context, descriptor, config or output pointer); SUCCESS from a size query
 * whose implied tensor sizes overflow int64
 * (checked with __builtin_mul_overflow here) or whose result breaks its
 * documented rule (0 bytes for an empty batch, the scale shape's formula,
 * the table rows' formula, a derived n-gram config that is not valid).
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "ingot/ingot.h"

enum { NREG = 12, REG_BYTES = 64 << 10, WS_BYTES = 1 << 20, FILL_BYTES = 4096 };
#define TENSOR_BYTES ((size_t)NREG * REG_BYTES)
#define BUF_BYTES (TENSOR_BYTES + WS_BYTES)

static unsigned char *g_buf;
static ingot_context_t g_ctx;

/* ---- findings ------------------------------------------------------------------------ */

static char g_args[512]; /* the scalar arguments of the call, for the report */

static void finding(const char *op, const char *what) {
  fprintf(stderr, "fuzz_op_args: %s: %s%s%s\n", op, what, g_args[0] ? "; arguments: " : "", g_args);
  abort();
}

#define ARGS(...) snprintf(g_args, sizeof g_args, __VA_ARGS__)

/* ---- the input --------------------------------------------------------------------- */

typedef struct {
  const uint8_t *p;
  size_t n, i;
  int strict;    /* 1: every pick() returns what the builder wants */
  int must_fail; /* the call is invalid in a way the harness knows */
  int next_region;
  const ingot_tensor *tensors[48]; /* every descriptor built, for guard() */
  int nt;
  const void *ws; /* the workspace passed, and its bytes */
  size_t ws_bytes;
} fz;

static uint8_t u8(fz *r) { return r->i < r->n ? r->p[r->i++] : 0; }

static uint64_t u64(fz *r) {
  uint64_t v = 0;
  for (int k = 0; k < 8; k++) v |= (uint64_t)u8(r) << (8 * k);
  return v;
}

/* lo + (a byte or two of the input) mod (hi - lo + 1). */
static int64_t range(fz *r, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1, v = u8(r);
  if (span > 256) v |= (uint64_t)u8(r) << 8;
  return lo + (int64_t)(v % span);
}

static const int64_t interesting[] = {0,
                                      1,
                                      2,
                                      3,
                                      15,
                                      16,
                                      17,
                                      31,
                                      32,
                                      33,
                                      63,
                                      64,
                                      65,
                                      127,
                                      128,
                                      129,
                                      255,
                                      256,
                                      1023,
                                      1024,
                                      4096,
                                      65536,
                                      INT32_MAX,
                                      (int64_t)INT32_MAX + 1,
                                      (int64_t)UINT32_MAX,
                                      (int64_t)1 << 40,
                                      (int64_t)1 << 53,
                                      (int64_t)1 << 61,
                                      (int64_t)1 << 62,
                                      INT64_MAX / 2,
                                      INT64_MAX / 2 + 1,
                                      INT64_MAX / 64,
                                      INT64_MAX / 128 + 1,
                                      INT64_MAX - 1,
                                      INT64_MAX,
                                      -1,
                                      -2,
                                      -16,
                                      -64,
                                      INT32_MIN,
                                      INT64_MIN,
                                      INT64_MIN + 1};
#define N_INTERESTING ((int)(sizeof interesting / sizeof interesting[0]))

/* What the builder wants, or (perturbed calls, 1 in 4) another value. */
static int64_t pick(fz *r, int64_t want) {
  if (r->strict) return want;
  uint8_t sel = u8(r);
  if (sel < 0xc0) return want;
  switch (sel & 3) {
    case 0: {
      int64_t out;
      return __builtin_add_overflow(want, (int8_t)u8(r), &out) ? want : out;
    }
    case 1:
      return interesting[u8(r) % N_INTERESTING];
    case 2: {
      int64_t lo = u8(r);
      return lo | (int64_t)u8(r) << 8;
    }
    default:
      return (int64_t)u64(r);
  }
}

/* A flag: as wanted, or flipped (1 in 8 of the perturbed calls). */
static int pick_bool(fz *r, int want) {
  if (r->strict) return want;
  return u8(r) >= 0xe0 ? !want : want;
}

static ingot_dtype pick_dtype(fz *r, ingot_dtype want) {
  if (r->strict) return want;
  uint8_t sel = u8(r);
  if (sel < 0xd0) return want;
  return (ingot_dtype)(sel % (INGOT_DTYPE_COUNT + 2)); /* 0 and two past the end are invalid */
}

static float pick_float(fz *r, float want) {
  static const float table[] = {1.0f,   0.5f,  2.0f,    448.0f,   2688.0f,   0.0f, -0.0f,  -1.0f,
                                1e-30f, 1e30f, 3.4e38f, INFINITY, -INFINITY, NAN,  1e-45f, 7.0f};
  if (r->strict) return want;
  uint8_t sel = u8(r);
  if (sel < 0xc0) return want;
  return table[sel % (sizeof table / sizeof table[0])];
}

/* ---- tensors ---------------------------------------------------------------------------- */

/* Bytes from p to the end of the buffer. */
static size_t avail(const void *p) {
  return BUF_BYTES - (size_t)((const unsigned char *)p - g_buf);
}

/* Whether t is non-empty by the library's rule (1..4 dims, none 0); an
 * invalid ndim counts as non-empty (the call is invalid either way). */
static int non_empty(const ingot_tensor *t) {
  if (t->ndim < 1 || t->ndim > INGOT_TENSOR_MAX_DIMS) return 1;
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] == 0) return 0;
  return 1;
}

/* Whether the elements of a descriptor the library could accept fit between
 * its data pointer and the end of the buffer (library's extent: the last
 * dimension contiguous, each other one stepping by its stride). A
 * descriptor the library must refuse anyway (bad ndim or dtype, a negative
 * shape or stride) or an empty one counts as fitting. */
static int fits(const ingot_tensor *t) {
  if (t->ndim < 1 || t->ndim > INGOT_TENSOR_MAX_DIMS) return 1;
  size_t es = ingot_dtype_size(t->dtype);
  if (es == 0) return 1;
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] < 0 || t->stride[i] < 0) return 1;
  if (!non_empty(t)) return 1;
  int last = t->ndim - 1;
  uint64_t reach = (uint64_t)t->shape[last], step, bytes;
  for (int i = 0; i < last; i++)
    if (__builtin_mul_overflow((uint64_t)(t->shape[i] - 1), (uint64_t)t->stride[i], &step) ||
        __builtin_add_overflow(reach, step, &reach))
      return 0;
  if (__builtin_mul_overflow(reach, (uint64_t)es, &bytes)) return 0;
  return bytes <= avail(t->data);
}

/* Bytes a descriptor the library could accept spans from its data pointer
 * (its extent); 0 for an empty, NULL or refused one. */
static size_t extent_bytes(const ingot_tensor *t) {
  if (t->data == NULL || t->ndim < 1 || t->ndim > INGOT_TENSOR_MAX_DIMS) return 0;
  size_t es = ingot_dtype_size(t->dtype);
  if (es == 0 || !non_empty(t)) return 0;
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] < 0 || t->stride[i] < 0) return 0;
  int last = t->ndim - 1;
  uint64_t reach = (uint64_t)t->shape[last], step, bytes;
  for (int i = 0; i < last; i++)
    if (__builtin_mul_overflow((uint64_t)(t->shape[i] - 1), (uint64_t)t->stride[i], &step) ||
        __builtin_add_overflow(reach, step, &reach))
      return 0;
  if (__builtin_mul_overflow(reach, (uint64_t)es, &bytes) || bytes > avail(t->data)) return 0;
  return (size_t)bytes;
}

/* Under AddressSanitizer, guard() makes every byte of the buffer that is not
 * inside a tensor's extent or the workspace unaddressable for the call: a
 * kernel or check that reads or writes past an extent it accepted is
 * reported even where the buffer goes on. */
#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#ifdef FUZZ_ASAN
#include <sanitizer/asan_interface.h>
static void guard(const fz *r) {
  ASAN_POISON_MEMORY_REGION(g_buf, BUF_BYTES);
  for (int i = 0; i < r->nt; i++) {
    size_t n = extent_bytes(r->tensors[i]);
    if (n > 0) ASAN_UNPOISON_MEMORY_REGION(r->tensors[i]->data, n);
  }
  if (r->ws != NULL && r->ws_bytes > 0) ASAN_UNPOISON_MEMORY_REGION(r->ws, r->ws_bytes);
}
static void unguard(void) { ASAN_UNPOISON_MEMORY_REGION(g_buf, BUF_BYTES); }
#else
static void guard(const fz *r) { (void)r; }
static void unguard(void) {}
#endif

/* A data pointer: the tensor's own region, or (perturbed) NULL, a misaligned
 * one, another region, the workspace, or the last bytes of the buffer. */
static void *pick_data(fz *r, unsigned char *want) {
  if (r->strict) return want;
  uint8_t sel = u8(r);
  if (sel < 0xd0) return want;
  switch (sel % 6) {
    case 0:
      return NULL;
    case 1:
      return want + 1 + u8(r) % 15;
    case 2:
      return g_buf + (size_t)(u8(r) % NREG) * REG_BYTES;
    case 3:
      return g_buf + TENSOR_BYTES;
    case 4:
      return g_buf + BUF_BYTES - 1 - u8(r) % 64;
    default:
      return want + 2 * (1 + u8(r) % 7);
  }
}

/* A contiguous tensor [shape] of dtype in the next region, then perturbed
 * field by field, then made safe (data = NULL when it does not fit). */
static ingot_tensor *mk(fz *r, ingot_tensor *t, ingot_dtype dtype, int ndim, const int64_t *shape) {
  memset(t, 0, sizeof *t);
  unsigned char *region = g_buf + (size_t)(r->next_region++ % NREG) * REG_BYTES;
  t->dtype = pick_dtype(r, dtype);
  t->ndim = (int32_t)pick(r, ndim);
  int64_t stride = 1;
  for (int i = INGOT_TENSOR_MAX_DIMS - 1; i >= 0; i--) {
    int64_t s = i < ndim ? shape[i] : 1;
    t->shape[i] = pick(r, s);
    t->stride[i] = pick(r, i < ndim ? stride : 0);
    if (i < ndim && __builtin_mul_overflow(stride, s > 0 ? s : 1, &stride)) stride = 1;
  }
  t->data = pick_data(r, region);
  if (t->data != NULL && !fits(t)) t->data = NULL;
  if (t->data == NULL && non_empty(t)) r->must_fail = 1;
  if (r->nt < (int)(sizeof r->tensors / sizeof r->tensors[0])) r->tensors[r->nt++] = t;
  return t;
}

static ingot_tensor *mk1(fz *r, ingot_tensor *t, ingot_dtype dtype, int64_t n0) {
  int64_t shape[1] = {n0};
  return mk(r, t, dtype, 1, shape);
}

static ingot_tensor *mk2(fz *r, ingot_tensor *t, ingot_dtype dtype, int64_t n0, int64_t n1) {
  int64_t shape[2] = {n0, n1};
  return mk(r, t, dtype, 2, shape);
}

/* A required descriptor, or (perturbed calls, rarely) NULL: then the call
 * must fail. */
static const ingot_tensor *opt(fz *r, ingot_tensor *t) {
  if (pick_bool(r, 1)) return t;
  r->must_fail = 1;
  return NULL;
}

/* Any other required pointer, the same way. */
static const void *req(fz *r, const void *p) {
  if (pick_bool(r, 1)) return p;
  r->must_fail = 1;
  return NULL;
}

/* Address of element [i] (1-D) or [i, j] of t when it is inside the buffer
 * and inside the tensor, else NULL. */
static void *elem(const ingot_tensor *t, int64_t i, int64_t j) {
  if (t == NULL || t->data == NULL || t->ndim < 1 || t->ndim > 2) return NULL;
  size_t es = ingot_dtype_size(t->dtype);
  if (es == 0 || i < 0 || i >= t->shape[0] || t->stride[0] < 0) return NULL;
  int64_t off, add;
  if (__builtin_mul_overflow(i, t->stride[0], &off)) return NULL;
  if (t->ndim == 2) {
    if (j < 0 || j >= t->shape[1] || t->stride[1] < 0) return NULL;
    if (__builtin_mul_overflow(j, t->stride[1], &add) || __builtin_add_overflow(off, add, &off))
      return NULL;
  }
  uint64_t byte;
  size_t room = avail(t->data);
  if (__builtin_mul_overflow((uint64_t)off, (uint64_t)es, &byte) || room < es || byte > room - es)
    return NULL;
  return (unsigned char *)t->data + byte;
}

/* Writes an integer (I32/U32/I64/U64 tensors) or a float (F32) element. */
static void put_i(const ingot_tensor *t, int64_t i, int64_t j, int64_t v) {
  void *p = elem(t, i, j);
  if (p == NULL) return;
  if (t->dtype == INGOT_DTYPE_I32 || t->dtype == INGOT_DTYPE_U32) {
    int32_t x = (int32_t)v;
    memcpy(p, &x, 4);
  } else if (t->dtype == INGOT_DTYPE_I64 || t->dtype == INGOT_DTYPE_U64) {
    memcpy(p, &v, 8);
  }
}

static void put_f(const ingot_tensor *t, int64_t i, int64_t j, float v) {
  void *p = elem(t, i, j);
  if (p != NULL && t->dtype == INGOT_DTYPE_F32) memcpy(p, &v, 4);
}

/* ---- results ---------------------------------------------------------------------------- */

static ingot_context_t pick_ctx(fz *r) {
  if (!r->strict && u8(r) == 0xff) {
    r->must_fail = 1;
    return NULL;
  }
  return g_ctx;
}

static struct CUstream_st *pick_stream(fz *r) {
  if (!r->strict && u8(r) == 0xff) {
    r->must_fail = 1;
    return (struct CUstream_st *)(uintptr_t)0x1000; /* never dereferenced by a CPU context */
  }
  return NULL;
}

static int g_verbose; /* INGOT_FUZZ_VERBOSE set: one line per call on stderr */

static void check_status(fz *r, const char *op, ingot_context_t ctx, ingot_status st) {
  unguard();
  if ((int)st < 0 || st >= INGOT_STATUS_COUNT) finding(op, "status outside the enum");
  if (g_verbose)
    fprintf(stderr, "fuzz_op_args: %s -> %s%s%s\n", op, ingot_status_name(st),
            st != INGOT_STATUS_SUCCESS ? ": " : "",
            st != INGOT_STATUS_SUCCESS ? ingot_last_error(ctx) : "");
  if (st == INGOT_STATUS_INTERNAL) finding(op, "INTERNAL status");
  if (st == INGOT_STATUS_CUDA_ERROR) finding(op, "CUDA_ERROR on the CPU backend");
  if (st != INGOT_STATUS_SUCCESS) {
    const char *text = ingot_last_error(ctx);
    if (text == NULL || text[0] == '\0') finding(op, "failed with an empty ingot_last_error");
  } else if (r->must_fail) {
    finding(op, "SUCCESS for a call with a NULL context, a CPU stream or NULL data");
  }
}

/* a * b * ... over int64, 1 if it overflows. */
static int overflows(int n, const int64_t *v) {
  int64_t acc = 1;
  for (int i = 0; i < n; i++)
    if (__builtin_mul_overflow(acc, v[i], &acc)) return 1;
  return 0;
}

#define OVERFLOWS(...) \
  overflows((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

/* Whether the tensors of an NVFP4 [rows, cols] matrix cannot be described:
 * values [rows, cols/2] U8 or the scales [round_up(rows, 128),
 * round_up(cols/16, 4)] overflow int64 bytes. */
static int nvfp4_overflows(int64_t rows, int64_t cols) {
  int64_t sr;
  if (OVERFLOWS(rows, cols / 2) || __builtin_add_overflow(rows, 127, &sr)) return 1;
  return OVERFLOWS(sr / 128 * 128, (cols / 16 + 3) / 4 * 4);
}

/* ---- size queries ------------------------------------------------------------------------- */

static size_t *pick_bytes_out(fz *r, size_t *bytes) {
  *bytes = (size_t)0x5a5a5a5a;
  if (!pick_bool(r, 1)) {
    r->must_fail = 1;
    return NULL;
  }
  return bytes;
}

static void q_gemm(fz *r) {
  static const char op[] = "ingot_nvfp4_gemm_workspace_size";
  int64_t m = pick(r, range(r, 0, 200)), n = pick(r, 64 * range(r, 1, 8)),
          k = pick(r, 64 * range(r, 1, 8));
  size_t bytes, *bp = pick_bytes_out(r, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  ARGS("m = %" PRId64 ", n = %" PRId64 ", k = %" PRId64, m, n, k);
  ingot_status st = ingot_nvfp4_gemm_workspace_size(ctx, m, n, k, bp);
  check_status(r, op, ctx, st);
  if (st != INGOT_STATUS_SUCCESS) return;
  /* a [m, k], b [n, k], d [m, n] (BF16 at least) */
  if (nvfp4_overflows(m, k) || nvfp4_overflows(n, k) || OVERFLOWS(m, n, 2))
    finding(op, "SUCCESS for a shape whose tensors overflow int64 bytes");
  if (m == 0 && bytes != 0) finding(op, "nonzero bytes for m = 0");
}

static void q_geglu(fz *r) {
  static const char op[] = "ingot_nvfp4_geglu_workspace_size";
  int64_t m = pick(r, range(r, 0, 200)), h = pick(r, 32 * range(r, 1, 8)),
          k = pick(r, 64 * range(r, 1, 8));
  size_t bytes, *bp = pick_bytes_out(r, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  ARGS("m = %" PRId64 ", hidden = %" PRId64 ", k = %" PRId64, m, h, k);
  ingot_status st = ingot_nvfp4_geglu_workspace_size(ctx, m, h, k, bp);
  check_status(r, op, ctx, st);
  if (st != INGOT_STATUS_SUCCESS) return;
  /* x [m, k], w_gate_up [2h, k], h [m, h] */
  if (nvfp4_overflows(m, k) || OVERFLOWS(2, h) || nvfp4_overflows(2 * h, k) ||
      nvfp4_overflows(m, h))
    finding(op, "SUCCESS for a shape whose tensors overflow int64 bytes");
  if (m == 0 && bytes != 0) finding(op, "nonzero bytes for m = 0");
}

static void q_mlp(fz *r) {
  static const char op[] = "ingot_nvfp4_mlp_workspace_size";
  int64_t m = pick(r, range(r, 0, 200)), k = pick(r, 64 * range(r, 1, 8)),
          h = pick(r, 64 * range(r, 1, 8)), n = pick(r, 64 * range(r, 1, 8));
  size_t bytes, *bp = pick_bytes_out(r, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  ARGS("m = %" PRId64 ", k = %" PRId64 ", hidden = %" PRId64 ", n = %" PRId64, m, k, h, n);
  ingot_status st = ingot_nvfp4_mlp_workspace_size(ctx, m, k, h, n, bp);
  check_status(r, op, ctx, st);
  if (st != INGOT_STATUS_SUCCESS) return;
  /* x [m, k], w_gate_up [2h, k], w_down [n, h], h [m, h], out [m, n] (BF16 at least) */
  if (nvfp4_overflows(m, k) || OVERFLOWS(2, h) || nvfp4_overflows(2 * h, k) ||
      nvfp4_overflows(n, h) || nvfp4_overflows(m, h) || OVERFLOWS(m, n, 2))
    finding(op, "SUCCESS for a shape whose tensors overflow int64 bytes");
  if (m == 0 && bytes != 0) finding(op, "nonzero bytes for m = 0");
}

static const ingot_dtype logit_dtypes[3] = {INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16};

static void q_sample(fz *r) {
  static const char op[] = "ingot_sample_workspace_size";
  int64_t b = pick(r, range(r, 0, 16)), v = pick(r, range(r, 1, 5000));
  ingot_dtype dt = pick_dtype(r, logit_dtypes[u8(r) % 3]);
  int64_t top = pick(r, range(r, 0, 64));
  size_t bytes, *bp = pick_bytes_out(r, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  ARGS("batch = %" PRId64 ", vocab = %" PRId64 ", dtype = %d, num_top = %" PRId64, b, v, (int)dt,
       top);
  ingot_status st = ingot_sample_workspace_size(ctx, b, v, dt, top, bp);
  check_status(r, op, ctx, st);
  if (st != INGOT_STATUS_SUCCESS) return;
  if (OVERFLOWS(b, v, (int64_t)ingot_dtype_size(dt)) || OVERFLOWS(b, top, 4) || v < 1 || b < 0)
    finding(op, "SUCCESS for a shape whose sizes overflow int64 (or a bad batch / vocab)");
  if (b == 0 && bytes != 0) finding(op, "nonzero bytes for batch = 0");
}

static void q_softmax(fz *r) {
  static const char op[] = "ingot_sampling_softmax_workspace_size";
  int64_t b = pick(r, range(r, 0, 16)), v = pick(r, range(r, 1, 5000));
  ingot_dtype dt = pick_dtype(r, logit_dtypes[u8(r) % 3]);
  size_t bytes, *bp = pick_bytes_out(r, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  ARGS("batch = %" PRId64 ", vocab = %" PRId64 ", dtype = %d", b, v, (int)dt);
  ingot_status st = ingot_sampling_softmax_workspace_size(ctx, b, v, dt, bp);
  check_status(r, op, ctx, st);
  if (st != INGOT_STATUS_SUCCESS) return;
  if (OVERFLOWS(b, v, (int64_t)ingot_dtype_size(dt)) || OVERFLOWS(b, v, 4) || v < 1 || b < 0)
    finding(op, "SUCCESS for a shape whose sizes overflow int64 (or a bad batch / vocab)");
}

static void q_scale_shape(fz *r) {
  static const char op[] = "ingot_nvfp4_scale_shape";
  int64_t rows = pick(r, range(r, 0, 300)), cols = pick(r, 16 * range(r, 0, 40));
  int64_t sr = -7, sc = -7;
  int64_t *psr = pick_bool(r, 1) ? &sr : NULL, *psc = pick_bool(r, 1) ? &sc : NULL;
  if (psr == NULL || psc == NULL) r->must_fail = 1;
  ARGS("rows = %" PRId64 ", cols = %" PRId64, rows, cols);
  ingot_status st = ingot_nvfp4_scale_shape(rows, cols, psr, psc);
  check_status(r, op, NULL, st);
  if (st != INGOT_STATUS_SUCCESS) return;
  int64_t want_r = 0, want_c;
  if (rows < 0 || cols < 0 || cols % 16 != 0 || __builtin_add_overflow(rows, 127, &want_r))
    finding(op, "SUCCESS for bad or overflowing rows / cols");
  want_r = want_r / 128 * 128;
  want_c = (cols / 16 + 3) / 4 * 4;
  if (sr != want_r || sc != want_c)
    finding(op, "result differs from round_up(rows, 128), round_up(cols/16, 4)");
  if (OVERFLOWS(sr, sc)) finding(op, "SUCCESS for a scale buffer whose size overflows int64");
}

/* ---- n-gram ------------------------------------------------------------------------------- */

/* The documented validity of a config; its table rows in *rows (0 if invalid). */
static int config_valid(const ingot_ngram_config *c, int64_t *rows) {
  *rows = 0;
  if (c->n < 2 || c->n > INGOT_NGRAM_MAX_N || c->heads_per_order < 1 || c->reserved != 0 ||
      (int64_t)c->heads_per_order * (c->n - 1) != c->num_heads ||
      c->num_heads > INGOT_NGRAM_MAX_HEADS)
    return 0;
  int64_t total = 0, end;
  for (int h = 0; h < c->num_heads; h++) {
    if (c->primes[h] < 1 || c->offsets[h] < 0 ||
        __builtin_add_overflow(c->offsets[h], c->primes[h], &end))
      return 0;
    if (end > total) total = end;
  }
  *rows = total;
  return 1;
}

/* A derived config of small constants (fast prime search), perturbed or not. */
static void derive_small(fz *r, ingot_ngram_config *cfg, int n, int hpn) {
  ingot_status st = ingot_ngram_config_derive(1000, n, hpn, 2 + range(r, 0, 5000), (int64_t)u8(r),
                                              (int32_t)range(r, 0, 3), 1, cfg);
  if (st != INGOT_STATUS_SUCCESS) finding("ingot_ngram_config_derive", "a small valid call failed");
}

static void perturb_config(fz *r, ingot_ngram_config *cfg) {
  if (r->strict) return;
  cfg->n = (int32_t)pick(r, cfg->n);
  cfg->heads_per_order = (int32_t)pick(r, cfg->heads_per_order);
  cfg->num_heads = (int32_t)pick(r, cfg->num_heads);
  cfg->reserved = (int32_t)pick(r, cfg->reserved);
  cfg->boundary_token = pick(r, cfg->boundary_token);
  for (int k = u8(r) % 4; k > 0; k--) {
    int h = u8(r) % INGOT_NGRAM_MAX_HEADS;
    cfg->primes[h] = pick(r, cfg->primes[h]);
    cfg->offsets[h] = pick(r, cfg->offsets[h]);
    cfg->multipliers[h % INGOT_NGRAM_MAX_N] = pick(r, cfg->multipliers[h % INGOT_NGRAM_MAX_N]);
  }
}

static void q_ngram_derive(fz *r) {
  static const char op[] = "ingot_ngram_config_derive";
  int64_t vocab = pick(r, range(r, 1, 300000));
  int32_t n = (int32_t)pick(r, range(r, 2, INGOT_NGRAM_MAX_N));
  int32_t hpn = (int32_t)pick(r, range(r, 1, 8));
  int64_t base = pick(r, range(r, 2, 60000));
  int64_t seed = pick(r, (int64_t)u64(r));
  int32_t layer = (int32_t)pick(r, range(r, 0, 16));
  int64_t boundary = pick(r, 1);
  /* The prime search grows with layer_index * H and slows near 2^61:
   * documented, but no use to a fuzzer. Keep valid searches short. */
  int64_t heads = (int64_t)hpn * ((int64_t)n - 1);
  if (layer > 0 && heads > 0 && heads <= INGOT_NGRAM_MAX_HEADS &&
      layer <= INGOT_NGRAM_MAX_LAYER_INDEX && (int64_t)layer * heads > 512)
    layer = (int32_t)(512 / heads);
  if (base > 1000000 && layer > 2) layer = 2;
  ingot_ngram_config cfg, *out = pick_bool(r, 1) ? &cfg : NULL;
  if (out == NULL) r->must_fail = 1;
  ARGS("vocab = %" PRId64 ", n = %d, hpn = %d, base = %" PRId64 ", layer = %d", vocab, (int)n,
       (int)hpn, base, (int)layer);
  ingot_status st = ingot_ngram_config_derive(vocab, n, hpn, base, seed, layer, boundary, out);
  check_status(r, op, NULL, st);
  if (st != INGOT_STATUS_SUCCESS) return;
  int64_t rows;
  if (!config_valid(&cfg, &rows)) finding(op, "SUCCESS with a config that breaks the rules");
  int64_t prev_end = 0;
  for (int h = 0; h < cfg.num_heads; h++) {
    if (cfg.offsets[h] != prev_end || cfg.primes[h] < base)
      finding(op, "offsets not the prefix sums of the primes, or a prime below base");
    prev_end = cfg.offsets[h] + cfg.primes[h];
  }
  int64_t got = -1;
  st = ingot_ngram_table_rows(&cfg, 1, &got);
  check_status(r, "ingot_ngram_table_rows", NULL, st);
  if (st != INGOT_STATUS_SUCCESS || got != rows)
    finding(op, "a derived config has no (or the wrong) table rows");
}

static void q_ngram_rows(fz *r) {
  static const char op[] = "ingot_ngram_table_rows";
  ingot_ngram_config cfg;
  derive_small(r, &cfg, (int)range(r, 2, 4), (int)range(r, 1, 4));
  perturb_config(r, &cfg);
  int64_t pad = pick(r, range(r, 1, 256)), rows = -7;
  const ingot_ngram_config *pc = req(r, &cfg);
  int64_t *pr = pick_bool(r, 1) ? &rows : NULL;
  if (pr == NULL) r->must_fail = 1;
  ARGS("pad = %" PRId64, pad);
  ingot_status st = ingot_ngram_table_rows(pc, pad, pr);
  check_status(r, op, NULL, st);
  if (st != INGOT_STATUS_SUCCESS) return;
  int64_t total, padded;
  if (!config_valid(&cfg, &total) || pad < 1) finding(op, "SUCCESS for an invalid config or pad");
  if (__builtin_add_overflow(total, pad - 1, &padded))
    finding(op, "SUCCESS although the rounded row count overflows int64");
  padded = padded / pad * pad;
  if (rows != padded) finding(op, "rows differ from round_up(max(off + P), pad)");
}

/* ids [T], cu_seqlens [B + 1] (valid unless perturbed), context [B, n-1]. */
typedef struct {
  ingot_ngram_config cfg;
  ingot_tensor ids, cu, context;
  int64_t t, b;
} ngram_batch;

static void mk_batch(fz *r, ngram_batch *nb) {
  derive_small(r, &nb->cfg, (int)range(r, 2, 4), (int)range(r, 1, 3));
  perturb_config(r, &nb->cfg);
  nb->b = range(r, 0, 4);
  nb->t = range(r, 0, 24);
  if (nb->b == 0) nb->t = 0; /* no request, no token */
  ingot_dtype ids_dt = u8(r) & 1 ? INGOT_DTYPE_I64 : INGOT_DTYPE_I32;
  ingot_dtype cu_dt = u8(r) & 1 ? INGOT_DTYPE_I64 : INGOT_DTYPE_I32;
  mk1(r, &nb->ids, ids_dt, nb->t);
  mk1(r, &nb->cu, cu_dt, nb->b + 1);
  mk2(r, &nb->context, ids_dt, nb->b, (int64_t)nb->cfg.n - 1);
  if (pick_bool(r, 1)) { /* a valid split of the T tokens */
    int64_t cuts[8], nc = nb->b > 0 ? nb->b - 1 : 0;
    for (int64_t i = 0; i < nc; i++) cuts[i] = range(r, 0, nb->t);
    for (int64_t i = 1; i < nc; i++) /* sort (insertion) */
      for (int64_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
        int64_t x = cuts[j];
        cuts[j] = cuts[j - 1];
        cuts[j - 1] = x;
      }
    put_i(&nb->cu, 0, 0, 0);
    for (int64_t i = 0; i < nc; i++) put_i(&nb->cu, i + 1, 0, cuts[i]);
    if (nb->b > 0) put_i(&nb->cu, nb->b, 0, nb->t);
  }
}

static void op_row_ids(fz *r) {
  static const char op[] = "ingot_ngram_row_ids";
  ngram_batch nb;
  ingot_tensor rows;
  mk_batch(r, &nb);
  mk2(r, &rows, INGOT_DTYPE_I64, nb.t, nb.cfg.num_heads);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  const ingot_ngram_config *pc = req(r, &nb.cfg);
  guard(r);
  ingot_status st = ingot_ngram_row_ids(ctx, pc, opt(r, &nb.ids), opt(r, &nb.cu),
                                        opt(r, &nb.context), opt(r, &rows), stream);
  check_status(r, op, ctx, st);
}

static void op_commit(fz *r) {
  static const char op[] = "ingot_ngram_commit_context";
  ngram_batch nb;
  mk_batch(r, &nb);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  const ingot_ngram_config *pc = req(r, &nb.cfg);
  guard(r);
  ingot_status st = ingot_ngram_commit_context(ctx, pc, opt(r, &nb.ids), opt(r, &nb.cu),
                                               opt(r, &nb.context), stream);
  check_status(r, op, ctx, st);
}

static const ingot_dtype table_dtypes[3] = {INGOT_DTYPE_F8_E4M3, INGOT_DTYPE_BF16, INGOT_DTYPE_F32};

static void op_gather(fz *r) {
  static const char op[] = "ingot_ngram_gather";
  int64_t t = range(r, 0, 16), h = range(r, 1, 8), rr = range(r, 1, 64), d = range(r, 1, 32);
  ingot_tensor rows, table, out;
  mk2(r, &rows, INGOT_DTYPE_I64, t, h);
  mk2(r, &table, table_dtypes[u8(r) % 3], rr, d);
  mk2(r, &out, INGOT_DTYPE_BF16, t, h * d);
  if (pick_bool(r, 1))
    for (int64_t i = 0; i < t; i++)
      for (int64_t j = 0; j < h; j++) put_i(&rows, i, j, range(r, -2, rr + 1));
  float scale = pick_float(r, 1.0f);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st =
      ingot_ngram_gather(ctx, opt(r, &rows), opt(r, &table), scale, opt(r, &out), stream);
  check_status(r, op, ctx, st);
}

static void op_embed(fz *r) {
  static const char op[] = "ingot_ngram_embed";
  ngram_batch nb;
  mk_batch(r, &nb);
  int64_t rr = range(r, 1, 64), d = range(r, 1, 16);
  ingot_tensor table, out;
  mk2(r, &table, table_dtypes[u8(r) % 3], rr, d);
  mk2(r, &out, INGOT_DTYPE_BF16, nb.t, (int64_t)nb.cfg.num_heads * d);
  float scale = pick_float(r, 0.5f);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  const ingot_ngram_config *pc = req(r, &nb.cfg);
  guard(r);
  ingot_status st = ingot_ngram_embed(ctx, pc, opt(r, &nb.ids), opt(r, &nb.cu), opt(r, &nb.context),
                                      opt(r, &table), scale, opt(r, &out), stream);
  check_status(r, op, ctx, st);
}

/* ---- NVFP4 format ------------------------------------------------------------------------ */

static const ingot_dtype source_dtypes[3] = {INGOT_DTYPE_F32, INGOT_DTYPE_BF16, INGOT_DTYPE_F16};

/* The swizzled scale buffer of [rows, cols]: 1-D or 2-D, U8 or F8_E4M3. */
static ingot_tensor *mk_scales(fz *r, ingot_tensor *t, int64_t rows, int64_t cols) {
  int64_t sr = (rows + 127) / 128 * 128, sc = (cols / 16 + 3) / 4 * 4;
  ingot_dtype dt = u8(r) & 1 ? INGOT_DTYPE_F8_E4M3 : INGOT_DTYPE_U8;
  return u8(r) & 1 ? mk1(r, t, dt, sr * sc) : mk2(r, t, dt, sr, sc);
}

/* A global scale F32 [1] holding a chosen value. */
static ingot_tensor *mk_gs(fz *r, ingot_tensor *t) {
  static const float good[4] = {1.0f, 2688.0f, 0.25f, 3.0e4f};
  mk1(r, t, INGOT_DTYPE_F32, 1);
  put_f(t, 0, 0, pick_float(r, good[u8(r) % 4]));
  return t;
}

static void op_quantize(fz *r) {
  static const char op[] = "ingot_nvfp4_quantize";
  int64_t rows = range(r, 0, 40), cols = 16 * range(r, 0, 8);
  ingot_tensor x, gs, values, scales, count;
  mk2(r, &x, source_dtypes[u8(r) % 3], rows, cols);
  mk_gs(r, &gs);
  mk2(r, &values, INGOT_DTYPE_U8, rows, cols / 2);
  mk_scales(r, &scales, rows, cols);
  int with_count = u8(r) & 1;
  if (with_count) mk1(r, &count, INGOT_DTYPE_U32, 1);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st = ingot_nvfp4_quantize(ctx, opt(r, &x), opt(r, &gs), opt(r, &values),
                                         opt(r, &scales), with_count ? &count : NULL, stream);
  check_status(r, op, ctx, st);
}

static void op_global_scale(fz *r) {
  static const char op[] = "ingot_nvfp4_global_scale";
  int64_t rows = range(r, 0, 40), cols = range(r, 0, 100);
  ingot_tensor x, gs;
  mk2(r, &x, source_dtypes[u8(r) % 3], rows, cols);
  mk1(r, &gs, INGOT_DTYPE_F32, 1);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st = ingot_nvfp4_global_scale(ctx, opt(r, &x), opt(r, &gs), stream);
  check_status(r, op, ctx, st);
}

static void op_dequantize(fz *r) {
  static const char op[] = "ingot_nvfp4_dequantize";
  int64_t rows = range(r, 0, 40), cols = 16 * range(r, 0, 8);
  ingot_tensor values, scales, gs, out;
  mk2(r, &values, INGOT_DTYPE_U8, rows, cols / 2);
  mk_scales(r, &scales, rows, cols);
  mk_gs(r, &gs);
  mk2(r, &out, u8(r) & 1 ? INGOT_DTYPE_BF16 : INGOT_DTYPE_F32, rows, cols);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st = ingot_nvfp4_dequantize(ctx, opt(r, &values), opt(r, &scales), opt(r, &gs),
                                           opt(r, &out), stream);
  check_status(r, op, ctx, st);
}

static void op_swizzle(fz *r, int un) {
  const char *op = un ? "ingot_nvfp4_unswizzle_scales" : "ingot_nvfp4_swizzle_scales";
  int64_t rows = range(r, 0, 300), cols = 16 * range(r, 0, 20);
  ingot_tensor linear, swizzled;
  mk2(r, &linear, u8(r) & 1 ? INGOT_DTYPE_F8_E4M3 : INGOT_DTYPE_U8, rows, cols / 16);
  mk_scales(r, &swizzled, rows, cols);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st =
      un ? ingot_nvfp4_unswizzle_scales(ctx, opt(r, &swizzled), opt(r, &linear), stream)
         : ingot_nvfp4_swizzle_scales(ctx, opt(r, &linear), opt(r, &swizzled), stream);
  check_status(r, op, ctx, st);
}

static void op_gate_up(fz *r) {
  static const char op[] = "ingot_nvfp4_quantize_gate_up";
  int64_t h = range(r, 0, 40), k = 16 * range(r, 0, 8);
  ingot_dtype dt = source_dtypes[u8(r) % 3];
  ingot_tensor gate, up, gs, values, scales, count;
  mk2(r, &gate, dt, h, k);
  mk2(r, &up, dt, h, k);
  mk_gs(r, &gs);
  mk2(r, &values, INGOT_DTYPE_U8, 2 * h, k / 2);
  mk_scales(r, &scales, 2 * h, k);
  int with_count = u8(r) & 1;
  if (with_count) mk1(r, &count, INGOT_DTYPE_U32, 1);
  uint32_t flags = (uint32_t)pick(r, u8(r) & 1);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st = ingot_nvfp4_quantize_gate_up(ctx, opt(r, &gate), opt(r, &up), opt(r, &gs),
                                                 flags, opt(r, &values), opt(r, &scales),
                                                 with_count ? &count : NULL, stream);
  check_status(r, op, ctx, st);
}

/* ---- NVFP4 GEMM ------------------------------------------------------------------------- */

typedef struct {
  ingot_tensor values, scales, gs;
  ingot_nvfp4_matrix m;
} matrix;

static const ingot_nvfp4_matrix *mk_matrix(fz *r, matrix *x, int64_t rows, int64_t cols) {
  mk2(r, &x->values, INGOT_DTYPE_U8, rows, cols / 2);
  mk_scales(r, &x->scales, rows, cols);
  mk_gs(r, &x->gs);
  x->m.values = opt(r, &x->values);
  x->m.scales = opt(r, &x->scales);
  x->m.global_scale = opt(r, &x->gs);
  return req(r, &x->m);
}

/* The workspace: `need` bytes at the workspace region, or (perturbed) other
 * sizes and pointers; never more bytes than the buffer holds after it. */
static void *pick_workspace(fz *r, size_t need, size_t *bytes) {
  unsigned char *ws = g_buf + TENSOR_BYTES;
  *bytes = need;
  if (!r->strict) {
    uint8_t sel = u8(r);
    if (sel >= 0xc0) {
      switch (sel % 5) {
        case 0:
          ws = NULL;
          break;
        case 1:
          ws += 1 + u8(r) % 15;
          break;
        case 2:
          ws = g_buf + (size_t)(u8(r) % NREG) * REG_BYTES;
          break; /* overlaps a tensor */
        default:
          break;
      }
      *bytes = (size_t)pick(r, (int64_t)need);
    }
  }
  if (ws == NULL) return NULL;
  if (*bytes > avail(ws)) *bytes = avail(ws);
  r->ws = ws;
  r->ws_bytes = *bytes;
  return ws;
}

static void op_gemm(fz *r) {
  static const char op[] = "ingot_nvfp4_gemm";
  int64_t m = range(r, 0, 34), n = 64 * range(r, 1, 2), k = 64 * range(r, 1, 2);
  matrix a, b;
  ingot_tensor d;
  const ingot_nvfp4_matrix *pa = mk_matrix(r, &a, m, k), *pb = mk_matrix(r, &b, n, k);
  mk2(r, &d, u8(r) & 1 ? INGOT_DTYPE_BF16 : INGOT_DTYPE_F32, m, n);
  size_t need = 0, bytes;
  if (ingot_nvfp4_gemm_workspace_size(g_ctx, m, n, k, &need) != INGOT_STATUS_SUCCESS)
    finding(op, "the workspace query failed for a valid shape");
  void *ws = pick_workspace(r, need, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st = ingot_nvfp4_gemm(ctx, pa, pb, opt(r, &d), ws, bytes, stream);
  check_status(r, op, ctx, st);
}

static void op_geglu(fz *r) {
  static const char op[] = "ingot_nvfp4_geglu";
  int64_t m = range(r, 0, 34), h = 32 * range(r, 1, 2), k = 64 * range(r, 1, 2);
  matrix x, w, hm;
  const ingot_nvfp4_matrix *px = mk_matrix(r, &x, m, k), *pw = mk_matrix(r, &w, 2 * h, k),
                           *ph = mk_matrix(r, &hm, m, h);
  size_t need = 0, bytes;
  if (ingot_nvfp4_geglu_workspace_size(g_ctx, m, h, k, &need) != INGOT_STATUS_SUCCESS)
    finding(op, "the workspace query failed for a valid shape");
  void *ws = pick_workspace(r, need, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st = ingot_nvfp4_geglu(ctx, px, pw, ph, ws, bytes, stream);
  check_status(r, op, ctx, st);
}

static void op_mlp(fz *r) {
  static const char op[] = "ingot_nvfp4_mlp";
  int64_t m = range(r, 0, 34), k = 64 * range(r, 1, 2), h = 64 * range(r, 1, 2),
          n = 64 * range(r, 1, 2);
  matrix x, w, down;
  ingot_tensor hgs, out;
  const ingot_nvfp4_matrix *px = mk_matrix(r, &x, m, k), *pw = mk_matrix(r, &w, 2 * h, k),
                           *pd = mk_matrix(r, &down, n, h);
  mk_gs(r, &hgs);
  mk2(r, &out, u8(r) & 1 ? INGOT_DTYPE_BF16 : INGOT_DTYPE_F32, m, n);
  size_t need = 0, bytes;
  if (ingot_nvfp4_mlp_workspace_size(g_ctx, m, k, h, n, &need) != INGOT_STATUS_SUCCESS)
    finding(op, "the workspace query failed for a valid shape");
  void *ws = pick_workspace(r, need, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st = ingot_nvfp4_mlp(ctx, px, pw, opt(r, &hgs), pd, opt(r, &out), ws, bytes, stream);
  check_status(r, op, ctx, st);
}

/* ---- sampling ----------------------------------------------------------------------------- */

typedef struct {
  ingot_tensor logits, temperature, top_k, top_p, min_p, seed, position, allowed, banned, bias_ids,
      bias_values;
  ingot_sampling_params params;
  int64_t b, v;
  int params_must_fail; /* the parameters alone make the call invalid */
} sampling_call;

static const ingot_sampling_params *mk_sampling_params(fz *r, sampling_call *c);

/* Logits [b, v] and parameters. r->must_fail covers both; the sharded
 * calls, which take slices of the logits (judged by pick_slice), use
 * params_must_fail instead. */
static const ingot_sampling_params *mk_sampling(fz *r, sampling_call *c) {
  c->b = range(r, 0, 5);
  c->v = range(r, 1, 700);
  ingot_dtype dt = logit_dtypes[u8(r) % 3];
  const int before = r->must_fail;
  mk2(r, &c->logits, dt, c->b, c->v);
  const int logits_must_fail = r->must_fail;
  r->must_fail = before;
  const ingot_sampling_params *params = mk_sampling_params(r, c);
  c->params_must_fail = r->must_fail;
  r->must_fail |= logits_must_fail;
  return params;
}

static const ingot_sampling_params *mk_sampling_params(fz *r, sampling_call *c) {
  ingot_sampling_params init = INGOT_SAMPLING_PARAMS_INITIALIZER;
  c->params = init;
  c->params.struct_size = (uint32_t)pick(r, c->params.struct_size);
  c->params.struct_version = (uint32_t)pick(r, c->params.struct_version);
  unsigned present = u8(r);
  present |= (unsigned)u8(r) << 8;
  if (present & 512) return NULL; /* no params: every field absent */
  int valid = pick_bool(r, 1);
  int64_t b = c->b, v = c->v;
  if (present & 1) {
    c->params.temperature = mk1(r, &c->temperature, INGOT_DTYPE_F32, b);
    for (int64_t i = 0; valid && i < b; i++)
      put_f(&c->temperature, i, 0, (float)range(r, 0, 40) / 8.0f);
  }
  if (present & 2) {
    c->params.top_k = mk1(r, &c->top_k, INGOT_DTYPE_I32, b);
    for (int64_t i = 0; valid && i < b; i++) put_i(&c->top_k, i, 0, range(r, 0, v + 2));
  }
  if (present & 4) {
    c->params.top_p = mk1(r, &c->top_p, INGOT_DTYPE_F32, b);
    for (int64_t i = 0; valid && i < b; i++)
      put_f(&c->top_p, i, 0, (float)range(r, 1, 256) / 256.0f);
  }
  if (present & 8) {
    c->params.min_p = mk1(r, &c->min_p, INGOT_DTYPE_F32, b);
    for (int64_t i = 0; valid && i < b; i++)
      put_f(&c->min_p, i, 0, (float)range(r, 0, 255) / 255.0f);
  }
  if (present & 16)
    c->params.seed = mk1(r, &c->seed, u8(r) & 1 ? INGOT_DTYPE_U64 : INGOT_DTYPE_I64, b);
  if (present & 32)
    c->params.position = mk1(r, &c->position, u8(r) & 1 ? INGOT_DTYPE_U64 : INGOT_DTYPE_I64, b);
  if (present & 64)
    c->params.allowed =
        mk2(r, &c->allowed, u8(r) & 1 ? INGOT_DTYPE_U32 : INGOT_DTYPE_I32, b, (v + 31) / 32);
  if (present & 128) {
    int64_t nb = range(r, 0, 6);
    c->params.banned = mk2(r, &c->banned, INGOT_DTYPE_I32, nb, 2);
    for (int64_t i = 0; valid && i < nb; i++) {
      put_i(&c->banned, i, 0, range(r, -1, b));
      put_i(&c->banned, i, 1, range(r, -1, v));
    }
  }
  if (present & 256) {
    int64_t nm = range(r, 0, 6);
    c->params.bias_ids = mk2(r, &c->bias_ids, INGOT_DTYPE_I32, nm, 2);
    c->params.bias_values = mk1(r, &c->bias_values, INGOT_DTYPE_F32, pick(r, nm));
    for (int64_t i = 0; valid && i < nm; i++) {
      put_i(&c->bias_ids, i, 0, range(r, -1, b));
      put_i(&c->bias_ids, i, 1, range(r, -1, v));
    }
    if (!pick_bool(r, 1)) c->params.bias_values = NULL;
  }
  return &c->params;
}

static void op_sample(fz *r) {
  static const char op[] = "ingot_sample";
  sampling_call c;
  memset(&c, 0, sizeof c);
  const ingot_sampling_params *params = mk_sampling(r, &c);
  ingot_tensor tokens, row_status, token_lp, token_raw_lp, top_ids, top_lp;
  unsigned outs = u8(r);
  if (outs & 64) outs &= 64 | 32; /* no logprobs: none of their tensors */
  mk1(r, &tokens, INGOT_DTYPE_I32, c.b);
  if (!(outs & 32)) mk1(r, &row_status, u8(r) & 1 ? INGOT_DTYPE_U32 : INGOT_DTYPE_I32, c.b);
  ingot_sampling_logprobs lp = INGOT_SAMPLING_LOGPROBS_INITIALIZER;
  int64_t ntop = range(r, 0, 12);
  lp.struct_size = (uint32_t)pick(r, lp.struct_size);
  lp.struct_version = (uint32_t)pick(r, lp.struct_version);
  lp.flags = (uint32_t)pick(r, outs & 16 ? INGOT_SAMPLING_TOP_FINAL : 0);
  lp.reserved = (uint32_t)pick(r, 0);
  if (outs & 1) lp.token_logprob = mk1(r, &token_lp, INGOT_DTYPE_F32, c.b);
  if (outs & 2) lp.token_raw_logprob = mk1(r, &token_raw_lp, INGOT_DTYPE_F32, c.b);
  if (outs & 4) lp.top_ids = mk2(r, &top_ids, INGOT_DTYPE_I32, c.b, ntop);
  if (outs & 8) lp.top_logprobs = mk2(r, &top_lp, INGOT_DTYPE_F32, c.b, ntop);
  int64_t n_query = (outs & 12) ? ntop : 0;
  size_t need = 0, bytes;
  if (ingot_sample_workspace_size(
          g_ctx, c.b, c.v,
          c.logits.dtype == INGOT_DTYPE_BF16 || c.logits.dtype == INGOT_DTYPE_F16 ? c.logits.dtype
                                                                                  : INGOT_DTYPE_F32,
          n_query, &need) != INGOT_STATUS_SUCCESS)
    finding(op, "the workspace query failed for a valid shape");
  void *ws = pick_workspace(r, need, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st =
      ingot_sample(ctx, opt(r, &c.logits), params, opt(r, &tokens), outs & 32 ? NULL : &row_status,
                   outs & 64 ? NULL : &lp, ws, bytes, stream);
  check_status(r, op, ctx, st);
}

static void op_softmax(fz *r) {
  static const char op[] = "ingot_sampling_softmax";
  sampling_call c;
  memset(&c, 0, sizeof c);
  const ingot_sampling_params *params = mk_sampling(r, &c);
  ingot_tensor probs, row_status;
  int with_status = u8(r) & 1;
  mk2(r, &probs, INGOT_DTYPE_F32, c.b, c.v);
  if (with_status) mk1(r, &row_status, u8(r) & 1 ? INGOT_DTYPE_U32 : INGOT_DTYPE_I32, c.b);
  size_t need = 0, bytes;
  ingot_dtype dt = c.logits.dtype == INGOT_DTYPE_BF16 || c.logits.dtype == INGOT_DTYPE_F16
                       ? c.logits.dtype
                       : INGOT_DTYPE_F32;
  if (ingot_sampling_softmax_workspace_size(g_ctx, c.b, c.v, dt, &need) != INGOT_STATUS_SUCCESS)
    finding(op, "the workspace query failed for a valid shape");
  void *ws = pick_workspace(r, need, &bytes);
  ingot_context_t ctx = pick_ctx(r);
  struct CUstream_st *stream = pick_stream(r);
  guard(r);
  ingot_status st = ingot_sampling_softmax(ctx, opt(r, &c.logits), params, opt(r, &probs),
                                           with_status ? &row_status : NULL, ws, bytes, stream);
  check_status(r, op, ctx, st);
}

/* ---- sharded sampling ----------------------------------------------------------------------- */

#include "fuzz_op_args_shard.inc"

/* ---- entry ---------------------------------------------------------------------------------- */

static void op_unswizzle(fz *r) { op_swizzle(r, 1); }
static void op_swizzle0(fz *r) { op_swizzle(r, 0); }

static void (*const ops[])(fz *) = {
    q_gemm,         q_geglu,         q_mlp,         q_sample,    q_softmax,    q_scale_shape,
    q_ngram_derive, q_ngram_rows,    op_row_ids,    op_commit,   op_gather,    op_embed,
    op_quantize,    op_global_scale, op_dequantize, op_swizzle0, op_unswizzle, op_gate_up,
    op_gemm,        op_geglu,        op_mlp,        op_sample,   op_softmax,
    /* appended: the seeds of the ops above keep their first byte */
    q_shard_plan,   op_shard_step,   op_shard_gather, op_shard_finish_sample,
    op_shard_finish_softmax, op_shard_sum, q_shard_nccl_workspace, op_shard_nccl,
};
#define N_OPS ((int)(sizeof ops / sizeof ops[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (g_buf == NULL) {
    g_buf = malloc(BUF_BYTES); /* malloc'd: ASan guards both ends */
    g_side = aligned_alloc(64, (size_t)SHARD_MAX * 2 * SIDE_BYTES);
    if (g_buf == NULL || g_side == NULL ||
        ingot_context_create(INGOT_BACKEND_CPU, 0, &g_ctx) != INGOT_STATUS_SUCCESS)
      finding("setup", "no buffer or no CPU context");
    g_verbose = getenv("INGOT_FUZZ_VERBOSE") != NULL;
  }
  /* The tensor contents: the last byte says how many bytes (x 16) before it. */
  size_t content = 0, n = size;
  if (n > 0) {
    n--;
    content = (size_t)data[n] * 16;
    if (content > n / 2) content = n / 2;
    n -= content;
  }
  memset(g_buf, 0, BUF_BYTES);
  if (content > 0)
    for (size_t reg = 0; reg < NREG; reg++) {
      unsigned char *p = g_buf + reg * REG_BYTES;
      for (size_t i = 0; i < FILL_BYTES; i++) p[i] = data[n + (i + reg * 7) % content];
    }
  fz r;
  memset(&r, 0, sizeof r);
  r.p = data;
  r.n = n;
  g_args[0] = '\0';
  int which = u8(&r) % N_OPS;
  r.strict = u8(&r) < 0x40;
  ops[which](&r);
  return 0;
}
