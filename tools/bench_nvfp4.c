/*
 * `ingot bench` cases for the NVFP4 format ops (include/ingot/ingot.h, NVFP4
 * section): ingot_nvfp4_quantize, ingot_nvfp4_dequantize (to bf16),
 * ingot_nvfp4_global_scale and ingot_nvfp4_quantize_gate_up.
 *
 * Shapes (bf16 inputs, contiguous rows):
 *   [16384, 16384]  a large weight (512 MiB of bf16; GPU only, see below)
 *   [968, 16384]    the pi0.5 activation
 *   [784, 2048]     a small one (launch-bound on a GPU)
 *   gate/up [16384, 2048] each -> W [32768, 2048], the pi0.5 MLP weights,
 *                   with the global scale given ("gs given", one launch) and
 *                   computed on the device first ("gs computed", four; the
 *                   table's launch column counts kernel nodes only, so the
 *                   memset should not show: 3 here, 2 for global_scale).
 * Inputs: bf16 of normal-ish floats (Irwin-Hall sum of four uniforms, unit
 * variance) times a per-column factor 2^u, u uniform in [-2, 2], with 1
 * column in 128 an outlier channel (x 24); gate/up weights are 0.02 x
 * normal-ish x 2^u per row, u uniform in [-1, 1]. Every slot has its own
 * data and its own global scale, computed on the host by the documented rule:
 * gs = 448 * 6 / amax (2688.0f / amax in fp32), amax over the slot's input
 * (over both matrices for gate/up). Dequantize reads what quantize (on the
 * backend under test) made of such inputs, so its block scales are
 * realistic too. nonfinite_count is NULL (the inputs are finite; the
 * counter costs nothing on finite blocks).
 *
 * Floors count bytes read + written once: e.g. quantize reads rows*cols*2
 * and writes rows*cols/2 values + the padded swizzled scale buffer (written
 * in full, padding as 0). The 4-byte global scale is left out.
 *
 * Every check is byte-identical (memcmp) against the CPU reference backend,
 * with the outputs of both sides pre-filled with different garbage so that
 * an unwritten byte shows; global_scale is also compared with the host's gs.
 *
 * CPU mode (no GPU, or --cpu): the [16384, 16384] cases are skipped ("GPU
 * only" in their names): the reference backend takes 0.4-3.3 s per call at
 * that shape on a 2-core EPYC and a case makes six calls (check: 2, timing:
 * warm-up + 3), roughly 40 s for the three. Every other case runs at its
 * real shape (~14 s for the family there).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

enum { OP_QUANTIZE, OP_DEQUANTIZE, OP_GLOBAL_SCALE, OP_GATE_UP, OP_COUNT };

static const char *const op_names[OP_COUNT] = {"quantize", "dequantize", "global_scale",
                                               "quantize_gate_up"};

/* Cases whose matrix has more elements than this are skipped in CPU mode. */
#define NVFP4_CPU_MAX_ELEMS (INT64_C(1) << 27)

typedef struct nvfp4_params {
  int op;
  int64_t rows, cols; /* x; for gate/up: each of gate and up */
  uint32_t flags;     /* gate/up flags */
} nvfp4_params;

/* ---- inputs ---------------------------------------------------------------------------- */

static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}


/* Mean 0, variance 1: four 16-bit uniforms, summed (Irwin-Hall), scaled. */
static float normalish(bench_rng *rng) {
  uint64_t r = bench_rand(rng);
  double s = 0;
  for (int i = 0; i < 4; i++, r >>= 16) s += (double)(r & 0xffffu) + 0.5;
  return (float)((s / 65536.0 - 2.0) * 1.7320508075688772); /* sqrt(12 / 4) */
}

static double uniform(bench_rng *rng, double lo, double hi) {
  return lo + (hi - lo) * (double)(bench_rand(rng) >> 11) * 0x1p-53;
}

/* An activation-like matrix [rows, cols] (bf16, contiguous); returns the
 * largest |x| (bf16 values are finite here). */
static float fill_activation(bench_rng *rng, uint16_t *x, int64_t rows, int64_t cols,
                             float *col_scale) {
  for (int64_t c = 0; c < cols; c++) {
    col_scale[c] = (float)exp2(uniform(rng, -2.0, 2.0));
    if (bench_rand_below(rng, 128) == 0) col_scale[c] *= 24.0f;
  }
  uint32_t amax = 0;
  for (int64_t r = 0; r < rows; r++) {
    uint16_t *row = x + r * cols;
    for (int64_t c = 0; c < cols; c++) {
      uint16_t h = bench_bf16_of(normalish(rng) * col_scale[c]);
      row[c] = h;
      if ((uint32_t)(h & 0x7fffu) > amax) amax = h & 0x7fffu;
    }
  }
  return f32_from_bits(amax << 16);
}

/* A weight-like matrix [rows, cols]; returns the largest |x|. */
static float fill_weight(bench_rng *rng, uint16_t *x, int64_t rows, int64_t cols) {
  uint32_t amax = 0;
  for (int64_t r = 0; r < rows; r++) {
    uint16_t *row = x + r * cols;
    float s = 0.02f * (float)exp2(uniform(rng, -1.0, 1.0));
    for (int64_t c = 0; c < cols; c++) {
      uint16_t h = bench_bf16_of(normalish(rng) * s);
      row[c] = h;
      if ((uint32_t)(h & 0x7fffu) > amax) amax = h & 0x7fffu;
    }
  }
  return f32_from_bits(amax << 16);
}

/* The documented global scale: 448 * 6 / amax, one fp32 division (1 for amax 0). */
static float host_global_scale(float amax) {
  if (amax == 0.0f) return 1.0f;
  volatile float q = 2688.0f / amax; /* one fp32 rounding, whatever FLT_EVAL_METHOD says */
  return q;
}

/* ---- a case --------------------------------------------------------------------------------- */

typedef struct nvfp4_state {
  nvfp4_params p;
  int64_t rows, cols;    /* the matrix that is quantized / dequantized ([2H, K] for gate/up) */
  int64_t src_rows;      /* rows of each input matrix (= rows; H for gate/up) */
  int64_t sr, sc;        /* padded scale shape of [rows, cols] */
  int slots;
  /* per-slot strides in bytes (multiples of 256) */
  size_t x_stride, v_stride, s_stride;
  /* bench memory (device memory on the GPU), [slots][...] */
  uint8_t *x;            /* quantize / global scale: input; dequantize: output */
  uint8_t *up;           /* gate/up: the up matrix (x is gate) */
  uint8_t *values, *scales;
  float *gs;             /* [slots] input global scales (host-computed) */
  float *gs_out;         /* [slots] global scales written by the op */
  /* host copies of slot 0 */
  uint16_t *h_x, *h_up;  /* quantize / global scale / gate-up inputs */
  uint8_t *h_values, *h_scales; /* dequantize inputs */
  float h_gs[BENCH_MAX_SLOTS];
} nvfp4_state;

static size_t round256(size_t n) { return (n + 255) / 256 * 256; }
static size_t x_bytes(const nvfp4_state *s) { return (size_t)(s->src_rows * s->cols) * 2; }
static size_t values_bytes(const nvfp4_state *s) { return (size_t)(s->rows * s->cols) / 2; }
static size_t scales_bytes(const nvfp4_state *s) { return (size_t)(s->sr * s->sc); }

static ingot_tensor t_src(const nvfp4_state *s, void *data) {
  return ingot_tensor_2d(data, INGOT_DTYPE_BF16, s->src_rows, s->cols, s->cols);
}
static ingot_tensor t_values(const nvfp4_state *s, void *data) {
  return ingot_tensor_2d(data, INGOT_DTYPE_U8, s->rows, s->cols / 2, s->cols / 2);
}
static ingot_tensor t_scales(const nvfp4_state *s, void *data) {
  return ingot_tensor_2d(data, INGOT_DTYPE_U8, s->sr, s->sc, s->sc);
}
static ingot_tensor t_scalar(float *data) { return ingot_tensor_1d(data, INGOT_DTYPE_F32, 1); }

static void *slot_ptr(void *base, size_t stride, int slot) {
  return (uint8_t *)base + (size_t)slot * stride;
}

static int nvfp4_setup(bench_env *env, const void *params, void **state, bench_info *info) {
  const nvfp4_params *p = (const nvfp4_params *)params;
  if (env->cpu_mode && p->rows * p->cols > NVFP4_CPU_MAX_ELEMS)
    return bench_skip(env, "CPU mode: [%" PRId64 ", %" PRId64 "] is GPU only (seconds per "
                      "reference call, six calls per case: too slow for a CPU run)",
                      p->rows, p->cols);
  nvfp4_state *s = (nvfp4_state *)bench_alloc(env, BENCH_MEM_HOST, sizeof *s);
  if (s == NULL) return BENCH_FAIL;
  memset(s, 0, sizeof *s);
  s->p = *p;
  s->src_rows = p->rows;
  s->rows = p->op == OP_GATE_UP ? 2 * p->rows : p->rows;
  s->cols = p->cols;
  ingot_status st = ingot_nvfp4_scale_shape(s->rows, s->cols, &s->sr, &s->sc);
  if (st) return bench_status(env, NULL, st, "ingot_nvfp4_scale_shape");

  /* ---- what one call must move, and how many input sets to rotate ---- */
  double xb = (double)x_bytes(s), vb = (double)values_bytes(s), sb = (double)scales_bytes(s);
  double scale_read = (double)(s->rows * (s->cols / 16)); /* dequantize skips the padding */
  double slot_bytes = 0;
  char shape[64];
  snprintf(shape, sizeof shape, "bf16 [%" PRId64 ", %" PRId64 "]", s->rows, s->cols);
  switch (p->op) {
    case OP_QUANTIZE:
      info->bytes_device = xb + vb + sb;
      slot_bytes = info->bytes_device;
      snprintf(info->floor_note, sizeof info->floor_note,
               "x %s read, values [rows, cols/2] u8 + padded swizzled scales [%" PRId64
               ", %" PRId64 "] written",
               shape, s->sr, s->sc);
      break;
    case OP_DEQUANTIZE:
      info->bytes_device = vb + scale_read + xb;
      slot_bytes = info->bytes_device;
      snprintf(info->floor_note, sizeof info->floor_note,
               "values u8 + rows*cols/16 scale bytes (padding not read) read, out %s written",
               shape);
      break;
    case OP_GLOBAL_SCALE:
      info->bytes_device = xb;
      slot_bytes = xb;
      snprintf(info->floor_note, sizeof info->floor_note,
               "x %s read once (the fp32 result is 4 bytes); a read-only stream may beat "
               "the copy rate",
               shape);
      break;
    case OP_GATE_UP: {
      int compute = (p->flags & INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE) != 0;
      info->bytes_device = (compute ? 4.0 : 2.0) * xb + vb + sb;
      slot_bytes = 2.0 * xb + vb + sb;
      char twice[160] = "";
      if (compute)
        snprintf(twice, sizeof twice,
                 " twice (the amax pass ends before any block is encoded; %.0f MiB > L2)",
                 2.0 * xb / 1048576.0);
      snprintf(info->floor_note, sizeof info->floor_note,
               "gate + up bf16 [%" PRId64 ", %" PRId64 "] read%s; W [%" PRId64 ", %" PRId64
               "] values u8 + padded swizzled scales written",
               s->src_rows, s->cols, twice, s->rows, s->cols);
      break;
    }
    default: return bench_fail(env, "unknown op %d", p->op);
  }
  s->slots = bench_slots_for(env, slot_bytes);
  info->slots = s->slots;

  /* ---- bench memory ---- */
  size_t S = (size_t)s->slots;
  s->x_stride = round256(x_bytes(s));
  s->v_stride = round256(values_bytes(s));
  s->s_stride = round256(scales_bytes(s));
  s->x = (uint8_t *)bench_alloc(env, BENCH_MEM_DEVICE, S * s->x_stride);
  s->gs = (float *)bench_alloc(env, BENCH_MEM_DEVICE, S * sizeof(float));
  s->gs_out = (float *)bench_alloc(env, BENCH_MEM_DEVICE, S * sizeof(float));
  s->h_x = (uint16_t *)bench_alloc(env, BENCH_MEM_HOST, x_bytes(s));
  if (!s->x || !s->gs || !s->gs_out || !s->h_x) return BENCH_SKIP;
  if (p->op != OP_GLOBAL_SCALE) {
    s->values = (uint8_t *)bench_alloc(env, BENCH_MEM_DEVICE, S * s->v_stride);
    s->scales = (uint8_t *)bench_alloc(env, BENCH_MEM_DEVICE, S * s->s_stride);
    if (!s->values || !s->scales) return BENCH_SKIP;
  }
  if (p->op == OP_GATE_UP) {
    s->up = (uint8_t *)bench_alloc(env, BENCH_MEM_DEVICE, S * s->x_stride);
    s->h_up = (uint16_t *)bench_alloc(env, BENCH_MEM_HOST, x_bytes(s));
    if (!s->up || !s->h_up) return BENCH_SKIP;
  }
  float *col_scale = (float *)bench_alloc(env, BENCH_MEM_HOST, (size_t)s->cols * sizeof(float));
  if (col_scale == NULL) return BENCH_FAIL;

  /* ---- inputs: generated slot by slot, last to first, so that the host
   * copies end up holding slot 0 ---- */
  char seed[96];
  snprintf(seed, sizeof seed, "nvfp4 %s %" PRId64 "x%" PRId64, op_names[p->op], s->rows, s->cols);
  for (int i = s->slots - 1; i >= 0; i--) {
    bench_rng rng = bench_rng_seed(seed, (uint64_t)i);
    float amax;
    if (p->op == OP_GATE_UP) {
      float a = fill_weight(&rng, s->h_x, s->src_rows, s->cols);
      float b = fill_weight(&rng, s->h_up, s->src_rows, s->cols);
      amax = a > b ? a : b;
      if (bench_upload(env, slot_ptr(s->up, s->x_stride, i), s->h_up, x_bytes(s)))
        return BENCH_FAIL;
    } else {
      amax = fill_activation(&rng, s->h_x, s->src_rows, s->cols, col_scale);
    }
    s->h_gs[i] = host_global_scale(amax);
    if (bench_upload(env, slot_ptr(s->x, s->x_stride, i), s->h_x, x_bytes(s))) return BENCH_FAIL;
  }
  if (bench_upload(env, s->gs, s->h_gs, S * sizeof(float))) return BENCH_FAIL;

  if (p->op == OP_DEQUANTIZE) {
    /* values / scales of every slot: its x quantized on the backend under
     * test (x then becomes the output buffer); slot 0's copied back for the
     * reference */
    for (int i = 0; i < s->slots; i++) {
      ingot_tensor x = t_src(s, slot_ptr(s->x, s->x_stride, i));
      ingot_tensor v = t_values(s, slot_ptr(s->values, s->v_stride, i));
      ingot_tensor sc = t_scales(s, slot_ptr(s->scales, s->s_stride, i));
      ingot_tensor g = t_scalar(s->gs + i);
      st = ingot_nvfp4_quantize(env->ctx, &x, &g, &v, &sc, NULL, env->stream);
      if (st) return bench_status(env, env->ctx, st, "quantize (dequantize's input)");
    }
    s->h_values = (uint8_t *)bench_alloc(env, BENCH_MEM_HOST, values_bytes(s));
    s->h_scales = (uint8_t *)bench_alloc(env, BENCH_MEM_HOST, scales_bytes(s));
    if (!s->h_values || !s->h_scales) return BENCH_FAIL;
    if (bench_download(env, s->h_values, s->values, values_bytes(s)) ||
        bench_download(env, s->h_scales, s->scales, scales_bytes(s)))
      return BENCH_FAIL;
  }
  *state = s;
  return BENCH_OK;
}

/* One call on `ctx` with slot `slot` of bench memory. */
static ingot_status nvfp4_run(bench_env *env, void *state, int slot) {
  nvfp4_state *s = (nvfp4_state *)state;
  ingot_tensor x = t_src(s, slot_ptr(s->x, s->x_stride, slot));
  ingot_tensor g = t_scalar(s->gs + slot), g_out = t_scalar(s->gs_out + slot);
  ingot_tensor v = t_values(s, s->values ? slot_ptr(s->values, s->v_stride, slot) : NULL);
  ingot_tensor sc = t_scales(s, s->scales ? slot_ptr(s->scales, s->s_stride, slot) : NULL);
  switch (s->p.op) {
    case OP_QUANTIZE: return ingot_nvfp4_quantize(env->ctx, &x, &g, &v, &sc, NULL, env->stream);
    case OP_DEQUANTIZE:
      return ingot_nvfp4_dequantize(env->ctx, &v, &sc, &g, &x, env->stream);
    case OP_GLOBAL_SCALE: return ingot_nvfp4_global_scale(env->ctx, &x, &g_out, env->stream);
    case OP_GATE_UP: {
      ingot_tensor up = t_src(s, slot_ptr(s->up, s->x_stride, slot));
      int compute = (s->p.flags & INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE) != 0;
      return ingot_nvfp4_quantize_gate_up(env->ctx, &x, &up, compute ? &g_out : &g, s->p.flags,
                                          &v, &sc, NULL, env->stream);
    }
    default: return INGOT_STATUS_INTERNAL;
  }
}

/* Fills bench memory with `byte` (through a host buffer). */
static int fill_bench(bench_env *env, void *dst, int byte, size_t bytes) {
  uint8_t *h = (uint8_t *)bench_alloc(env, BENCH_MEM_HOST, bytes);
  if (h == NULL) return BENCH_FAIL;
  memset(h, byte, bytes);
  return bench_upload(env, dst, h, bytes);
}

/* Slot 0 on the backend under test vs the CPU reference on the host copies. */
static int nvfp4_check(bench_env *env, void *state) {
  nvfp4_state *s = (nvfp4_state *)state;
  const char *what = op_names[s->p.op];
  int compute = s->p.op == OP_GLOBAL_SCALE ||
                (s->p.op == OP_GATE_UP && (s->p.flags & INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE));
  size_t vb = values_bytes(s), sb = scales_bytes(s), xb = x_bytes(s);
  int r;

  /* ---- backend under test, outputs pre-filled with 0xA5 ---- */
  if (s->p.op == OP_DEQUANTIZE) {
    if ((r = fill_bench(env, s->x, 0xA5, xb))) return r;
  } else if (s->p.op != OP_GLOBAL_SCALE) {
    if ((r = fill_bench(env, s->values, 0xA5, vb)) || (r = fill_bench(env, s->scales, 0xA5, sb)))
      return r;
  }
  if (compute && (r = fill_bench(env, s->gs_out, 0xA5, sizeof(float)))) return r;
  if ((r = bench_status(env, env->ctx, nvfp4_run(env, s, 0), what))) return r;

  uint8_t *got_v = NULL, *got_s = NULL, *want_v = NULL, *want_s = NULL;
  uint16_t *got_x = NULL, *want_x = NULL;
  float got_gs = 0, want_gs = 0;
  if (compute && (r = bench_download(env, &got_gs, s->gs_out, sizeof got_gs))) return r;
  if (s->p.op == OP_DEQUANTIZE) {
    got_x = (uint16_t *)bench_alloc(env, BENCH_MEM_HOST, xb);
    want_x = (uint16_t *)bench_alloc(env, BENCH_MEM_HOST, xb);
    if (!got_x || !want_x) return BENCH_FAIL;
    if ((r = bench_download(env, got_x, s->x, xb))) return r;
    memset(want_x, 0x5A, xb);
  } else if (s->p.op != OP_GLOBAL_SCALE) {
    got_v = (uint8_t *)bench_alloc(env, BENCH_MEM_HOST, vb);
    got_s = (uint8_t *)bench_alloc(env, BENCH_MEM_HOST, sb);
    want_v = (uint8_t *)bench_alloc(env, BENCH_MEM_HOST, vb);
    want_s = (uint8_t *)bench_alloc(env, BENCH_MEM_HOST, sb);
    if (!got_v || !got_s || !want_v || !want_s) return BENCH_FAIL;
    if ((r = bench_download(env, got_v, s->values, vb)) ||
        (r = bench_download(env, got_s, s->scales, sb)))
      return r;
    memset(want_v, 0x5A, vb);
    memset(want_s, 0x5A, sb);
  }

  /* ---- reference, outputs pre-filled with 0x5A ---- */
  ingot_tensor x = t_src(s, s->h_x);
  float gs_in = s->h_gs[0];
  ingot_tensor g = t_scalar(&gs_in), g_out = t_scalar(&want_gs);
  memset(&want_gs, 0x5A, sizeof want_gs);
  ingot_status st;
  switch (s->p.op) {
    case OP_QUANTIZE: {
      ingot_tensor v = t_values(s, want_v), sc = t_scales(s, want_s);
      st = ingot_nvfp4_quantize(env->ref, &x, &g, &v, &sc, NULL, NULL);
      break;
    }
    case OP_DEQUANTIZE: {
      ingot_tensor v = t_values(s, s->h_values), sc = t_scales(s, s->h_scales);
      ingot_tensor out = t_src(s, want_x);
      st = ingot_nvfp4_dequantize(env->ref, &v, &sc, &g, &out, NULL);
      break;
    }
    case OP_GLOBAL_SCALE: st = ingot_nvfp4_global_scale(env->ref, &x, &g_out, NULL); break;
    default: {
      ingot_tensor up = t_src(s, s->h_up);
      ingot_tensor v = t_values(s, want_v), sc = t_scales(s, want_s);
      st = ingot_nvfp4_quantize_gate_up(env->ref, &x, &up, compute ? &g_out : &g, s->p.flags, &v,
                                        &sc, NULL, NULL);
      break;
    }
  }
  if ((r = bench_status(env, env->ref, st, "reference"))) return r;

  if (compute) {
    if ((r = bench_compare_bytes(env, "global scale", &got_gs, &want_gs, sizeof got_gs, 4)))
      return r;
    /* and the documented rule, computed on the host from the generated data */
    if ((r = bench_compare_bytes(env, "global scale vs host 2688/amax", &got_gs, &s->h_gs[0],
                                 sizeof got_gs, 4)))
      return r;
  }
  if (s->p.op == OP_DEQUANTIZE) return bench_compare_bytes(env, "out bf16", got_x, want_x, xb, 2);
  if (s->p.op == OP_GLOBAL_SCALE) return BENCH_OK;
  if ((r = bench_compare_bytes(env, "values", got_v, want_v, vb, 1))) return r;
  return bench_compare_bytes(env, "scales", got_s, want_s, sb, 1);
}

static const bench_ops nvfp4_ops = {nvfp4_setup, nvfp4_run, nvfp4_check, NULL};

/* ---- registration ------------------------------------------------------------------------------ */

static void add(bench_registry *reg, int op, int64_t rows, int64_t cols, uint32_t flags,
                const char *note) {
  nvfp4_params p = {op, rows, cols, flags};
  char name[160];
  if (op == OP_GATE_UP)
    snprintf(name, sizeof name, "bf16 gate/up [%" PRId64 ", %" PRId64 "] x2 -> [%" PRId64
             ", %" PRId64 "]%s",
             rows, cols, 2 * rows, cols, note);
  else
    snprintf(name, sizeof name, "bf16 [%" PRId64 ", %" PRId64 "]%s", rows, cols, note);
  bench_add(reg, "nvfp4", op_names[op], name, &nvfp4_ops, &p, sizeof p);
}

void bench_nvfp4_register(bench_registry *reg) {
  static const struct {
    int64_t rows, cols;
    const char *note;
  } shapes[] = {
      {16384, 16384, " (GPU only)"},
      {968, 16384, " pi0.5 act"},
      {784, 2048, ""},
  };
  for (int op = OP_QUANTIZE; op <= OP_DEQUANTIZE; op++)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      add(reg, op, shapes[i].rows, shapes[i].cols, 0, shapes[i].note);
  add(reg, OP_GLOBAL_SCALE, 968, 16384, 0, " pi0.5 act");
  add(reg, OP_GLOBAL_SCALE, 16384, 16384, 0, " (GPU only)");
  add(reg, OP_GATE_UP, 16384, 2048, 0, " gs given");
  add(reg, OP_GATE_UP, 16384, 2048, INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE, " gs computed");
}
