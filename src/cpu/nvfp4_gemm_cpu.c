/*
 * NVFP4 GEMM and fused gate/up + GeGLU + re-quantize, CPU reference backend.
 *
 * Exact accumulation. decode(x) = e2m1(code) * e4m3(sf), and
 * 2 * e2m1 is an integer in [-12, 12], 512 * e4m3 an integer in
 * [-229376, 229376] (E4M3's smallest step is 2^-9), so
 *   acc * 2^20 = sum_blocks (sum_{16 i} qa_i * qb_i) * sa * sb
 * with qa = 2 * e2m1(a), sa = 512 * e4m3(sfa) (likewise b) is a sum of
 * integers: |16-element dot| <= 2304, |dot * sa| < 2^30, one block's term
 * < 2^47. It is summed exactly (int64 within a K chunk of <= 2048, __int128
 * across chunks) and the exact value is rounded ONCE to fp32 (nearest even),
 * then scaled by 2^-20 (exact: every nonzero |acc| >= 2^-20). So the result
 * is the correctly rounded dot product, independent of summation order,
 * blocking and thread count. A NaN scale byte (0x7F / 0xFF) anywhere in the
 * K range of a row makes that row's every dot product NaN, as it would in
 * floating point (NaN * 0 = NaN). Then, with single IEEE fp32 operations
 * (common/nvfp4_ref.h):
 *   alpha = 1 / (gsA * gsB)   (NaN if either global scale is unusable)
 *   gemm:  d = acc * alpha    (F32, NaN written as 0x7FC00000; or BF16)
 *   geglu: h = gelu_tanh(acc[2j] * alpha) * (acc[2j+1] * alpha), quantized
 *          per block of 16 by ingot_nvfp4_ref_block with h's global scale.
 *
 * Work split. D is cut into tiles of TILE_M rows x TILE_N columns (TILE_N
 * = 64 divides N; for geglu a tile's 64 W rows give 32 h columns = two
 * whole NVFP4 blocks). Tiles are numbered column-tile-major and each thread
 * takes one contiguous range of them, so it decodes a B (weight) tile once
 * for every run of row tiles that share it (when K fits one chunk). Per
 * thread the workspace holds the tile's operands decoded to small integers
 * (int8 codes, int32 block scales) for one K chunk, and the tile's int128
 * accumulators. Threads: min(online CPUs, 64, tiles); one thread runs
 * inline, no thread when the work is a single tile.
 */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "common/nvfp4_ref.h"
#include "cpu/cpu.h"

enum { TILE_M = 32, TILE_N = 64, CHUNK_K = 2048, MAX_THREADS = 64 };

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

/* ---- workspace layout ------------------------------------------------------------ */

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

typedef struct thread_layout {
  size_t a_codes, a_scales, b_codes, b_scales, acc, a_nan, b_nan, bytes; /* offsets, size */
} thread_layout;

static thread_layout layout_for(int64_t k) {
  size_t kc = (size_t)(k < CHUNK_K ? k : CHUNK_K), blocks = kc / 16;
  thread_layout l;
  size_t at = 0;
  l.acc = at, at += align16(sizeof(i128) * TILE_M * TILE_N);
  l.a_codes = at, at += align16(TILE_M * kc);
  l.b_codes = at, at += align16(TILE_N * kc);
  l.a_scales = at, at += align16(sizeof(int32_t) * TILE_M * blocks);
  l.b_scales = at, at += align16(sizeof(int32_t) * TILE_N * blocks);
  l.a_nan = at, at += align16(TILE_M);
  l.b_nan = at, at += align16(TILE_N);
  l.bytes = at;
  return l;
}

/* Core checked that every byte count of the shape fits int64 (m * n * 2
 * among them, core/nvfp4_gemm_api.c), so neither m + 31 nor the product
 * overflows. */
static int64_t tile_count(int64_t m, int64_t n) {
  return (m + TILE_M - 1) / TILE_M * (n / TILE_N);
}

ingot_status ingot_cpu_nvfp4_gemm_workspace_size(struct ingot_context *ctx, int64_t m, int64_t n,
                                                 int64_t k, size_t *bytes) {
  (void)ctx;
  int64_t tiles = tile_count(m, n);
  size_t threads = (size_t)(tiles < MAX_THREADS ? tiles : MAX_THREADS);
  *bytes = threads * layout_for(k).bytes;
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_nvfp4_geglu_workspace_size(struct ingot_context *ctx, int64_t m,
                                                  int64_t hidden, int64_t k, size_t *bytes) {
  return ingot_cpu_nvfp4_gemm_workspace_size(ctx, m, 2 * hidden, k, bytes);
}

/* ---- the job ------------------------------------------------------------------------ */

typedef struct gemm_job {
  const ingot_nvfp4_operand *a, *b;
  int64_t m, n, k;
  float alpha;
  ingot_nvfp4_dense d;         /* gemm output (h == NULL) */
  const ingot_nvfp4_packed *h; /* geglu output, or NULL */
  float h_gs;
  uint8_t *workspace;
  thread_layout layout;
  int64_t tiles_m, tiles;
  int threads;
} gemm_job;

typedef struct gemm_share {
  const gemm_job *job;
  int index;
} gemm_share;

/* Rows [row0, row0 + rows) of an operand, element columns [k0, k0 + kc):
 * codes as 2 * e2m1 (int8), block scales as 512 * e4m3 (int32; 0 for a
 * NaN byte, which sets the row's nan flag). */
static void decode_rows(const ingot_nvfp4_packed *p, int64_t row0, int64_t rows, int64_t k0,
                        int64_t kc, const int8_t lut_lo[256], const int8_t lut_hi[256],
                        int8_t *codes, int32_t *scales, uint8_t *nan_flags) {
  int64_t blocks = kc / 16;
  for (int64_t r = 0; r < rows; r++) {
    int64_t row = row0 + r;
    const uint8_t *v = p->values + row * p->values_stride + k0 / 2;
    int8_t *c = codes + r * kc;
    for (int64_t i = 0; i < kc / 2; i++) {
      c[2 * i] = lut_lo[v[i]];
      c[2 * i + 1] = lut_hi[v[i]];
    }
    for (int64_t blk = 0; blk < blocks; blk++) {
      uint8_t sf = p->scales[ingot_nvfp4_swizzle_offset(row, k0 / 16 + blk, p->scale_cols)];
      float s = ingot_e4m3_to_f32(sf);
      if (s != s) {
        nan_flags[r] = 1;
        s = 0.0f;
      }
      scales[r * blocks + blk] = (int32_t)(s * 512.0f); /* exact */
    }
  }
}

/* acc[i][j] += the exact chunk dot products, times 2^20. Integer
 * arithmetic: any vectorization gives the same bits; an AVX2 clone is picked
 * at load time where the CPU has it (about 2x). */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void tile_dot(const int8_t *ac, const int32_t *as, int64_t rows, const int8_t *bc,
                     const int32_t *bs, int64_t kc, i128 *acc) {
  int64_t blocks = kc / 16;
  for (int64_t i = 0; i < rows; i++) {
    const int8_t *pa = ac + i * kc;
    const int32_t *sa = as + i * blocks;
    for (int j = 0; j < TILE_N; j++) {
      const int8_t *pb = bc + j * kc;
      const int32_t *sb = bs + j * blocks;
      int64_t sum = 0;
      for (int64_t blk = 0; blk < blocks; blk++) {
        int32_t dot = 0;
        for (int e = 0; e < 16; e++) dot += (int32_t)pa[blk * 16 + e] * (int32_t)pb[blk * 16 + e];
        sum += (int64_t)(dot * sa[blk]) * (int64_t)sb[blk];
      }
      acc[i * TILE_N + j] += sum;
    }
  }
}

/* An exact integer rounded once to fp32 (nearest even). */
static float i128_to_f32(i128 v) {
  if (v >= (i128)INT64_MIN && v <= (i128)INT64_MAX) return (float)(int64_t)v;
  u128 u = v < 0 ? -(u128)v : (u128)v;
  int s = 0;
  while ((u >> s) >= ((u128)1 << 62)) s++;
  /* >= 61 significant bits and a sticky bit: rounds like the full value. */
  uint64_t t = (uint64_t)(u >> s) | (uint64_t)((u & (((u128)1 << s) - 1)) != 0);
  float f = ingot_fmul_rn((float)(int64_t)t, ingot_bits_f32((uint32_t)(127 + s) << 23));
  return v < 0 ? -f : f;
}

/* The fp32 accumulator of tile element (i, j). */
static float tile_acc(const i128 *acc, const uint8_t *a_nan, const uint8_t *b_nan, int64_t i,
                      int j) {
  if (a_nan[i] | b_nan[j]) return ingot_bits_f32(INGOT_NVFP4_CANONICAL_NAN);
  return ingot_fmul_rn(i128_to_f32(acc[i * TILE_N + j]), 0x1p-20f);
}

static void store_dense(const gemm_job *job, const i128 *acc, const uint8_t *a_nan,
                        const uint8_t *b_nan, int64_t m0, int64_t rows, int64_t n0) {
  for (int64_t i = 0; i < rows; i++) {
    for (int j = 0; j < TILE_N; j++) {
      float v = ingot_fmul_rn(tile_acc(acc, a_nan, b_nan, i, j), job->alpha);
      int64_t at = (m0 + i) * job->d.stride + n0 + j;
      if (job->d.dtype == INGOT_DTYPE_F32) {
        if (v != v) v = ingot_bits_f32(INGOT_NVFP4_CANONICAL_NAN);
        ((float *)job->d.data)[at] = v;
      } else {
        ((uint16_t *)job->d.data)[at] = ingot_f32_to_bf16(v);
      }
    }
  }
}

/* W rows [n0, n0 + 64) are gate/up pairs of h columns [n0/2, n0/2 + 32):
 * two blocks of 16. */
static void store_geglu(const gemm_job *job, const i128 *acc, const uint8_t *a_nan,
                        const uint8_t *b_nan, int64_t m0, int64_t rows, int64_t n0) {
  const ingot_nvfp4_packed *h = job->h;
  for (int64_t i = 0; i < rows; i++) {
    int64_t row = m0 + i;
    for (int q = 0; q < TILE_N / 32; q++) {
      float hv[16];
      for (int e = 0; e < 16; e++) {
        int j = 32 * q + 2 * e;
        float g = ingot_fmul_rn(tile_acc(acc, a_nan, b_nan, i, j), job->alpha);
        float u = ingot_fmul_rn(tile_acc(acc, a_nan, b_nan, i, j + 1), job->alpha);
        hv[e] = ingot_fmul_rn(ingot_gelu_tanh(g), u);
      }
      int64_t col = n0 / 2 + 16 * q; /* first h column of the block */
      uint8_t sf;
      (void)ingot_nvfp4_ref_block(hv, job->h_gs, &sf, h->values + row * h->values_stride + col / 2);
      h->scales[ingot_nvfp4_swizzle_offset(row, col / 16, h->scale_cols)] = sf;
    }
  }
}

static void *run_share(void *arg) {
  const gemm_share *share = (const gemm_share *)arg;
  const gemm_job *job = share->job;
  const thread_layout *l = &job->layout;
  uint8_t *ws = job->workspace + (size_t)share->index * l->bytes;
  i128 *acc = (i128 *)(void *)(ws + l->acc);
  int8_t *ac = (int8_t *)(ws + l->a_codes), *bc = (int8_t *)(ws + l->b_codes);
  int32_t *as = (int32_t *)(void *)(ws + l->a_scales), *bs = (int32_t *)(void *)(ws + l->b_scales);
  uint8_t *a_nan = ws + l->a_nan, *b_nan = ws + l->b_nan;
  int8_t lut_lo[256], lut_hi[256];
  for (int byte = 0; byte < 256; byte++) {
    lut_lo[byte] = (int8_t)(2.0f * ingot_e2m1_to_f32((uint8_t)(byte & 15)));
    lut_hi[byte] = (int8_t)(2.0f * ingot_e2m1_to_f32((uint8_t)(byte >> 4)));
  }
  int64_t k = job->k, kc_max = k < CHUNK_K ? k : CHUNK_K;
  int64_t first = job->tiles * share->index / job->threads;
  int64_t last = job->tiles * (share->index + 1) / job->threads;
  int64_t b_tile = -1; /* the column tile whose B rows are decoded (single chunk) */
  for (int64_t t = first; t < last; t++) {
    int64_t nt = t / job->tiles_m, mt = t % job->tiles_m;
    int64_t m0 = mt * TILE_M, n0 = nt * TILE_N;
    int64_t rows = job->m - m0 < TILE_M ? job->m - m0 : TILE_M;
    memset(acc, 0, sizeof(i128) * TILE_M * TILE_N);
    memset(a_nan, 0, TILE_M);
    for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
      int64_t kc = k - k0 < kc_max ? k - k0 : kc_max;
      decode_rows(&job->a->m, m0, rows, k0, kc, lut_lo, lut_hi, ac, as, a_nan);
      if (!(kc == k && b_tile == nt)) {
        if (k0 == 0) memset(b_nan, 0, TILE_N);
        decode_rows(&job->b->m, n0, TILE_N, k0, kc, lut_lo, lut_hi, bc, bs, b_nan);
        b_tile = kc == k ? nt : -1;
      }
      tile_dot(ac, as, rows, bc, bs, kc, acc);
    }
    if (job->h == NULL)
      store_dense(job, acc, a_nan, b_nan, m0, rows, n0);
    else
      store_geglu(job, acc, a_nan, b_nan, m0, rows, n0);
  }
  return NULL;
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* Runs every share; shares whose thread cannot be created run here. */
static void run_job(gemm_job *job, size_t workspace_bytes) {
  job->layout = layout_for(job->k);
  job->tiles_m = (job->m + TILE_M - 1) / TILE_M;
  job->tiles = job->tiles_m * (job->n / TILE_N);
  int64_t threads = online_cpus();
  if (threads > job->tiles) threads = job->tiles;
  int64_t fit = (int64_t)(workspace_bytes / job->layout.bytes);
  if (threads > fit) threads = fit;
  if (threads < 1) threads = 1; /* core checked workspace_bytes >= the size query */
  job->threads = (int)threads;
  gemm_share shares[MAX_THREADS];
  pthread_t ids[MAX_THREADS];
  int started[MAX_THREADS] = {0};
  for (int t = 0; t < job->threads; t++) shares[t] = (gemm_share){job, t};
  for (int t = 1; t < job->threads; t++)
    started[t] = pthread_create(&ids[t], NULL, run_share, &shares[t]) == 0;
  run_share(&shares[0]);
  for (int t = 1; t < job->threads; t++) {
    if (started[t])
      pthread_join(ids[t], NULL);
    else
      run_share(&shares[t]);
  }
}

static float job_alpha(const ingot_nvfp4_operand *a, const ingot_nvfp4_operand *b) {
  float ga = *a->global_scale, gb = *b->global_scale;
  if (!ingot_nvfp4_gs_valid(ga) || !ingot_nvfp4_gs_valid(gb))
    return ingot_bits_f32(INGOT_NVFP4_CANONICAL_NAN);
  return ingot_fdiv_rn(1.0f, ingot_fmul_rn(ga, gb));
}

ingot_status ingot_cpu_nvfp4_gemm(struct ingot_context *ctx, const ingot_nvfp4_operand *a,
                                  const ingot_nvfp4_operand *b, ingot_nvfp4_dense d,
                                  void *workspace, size_t workspace_bytes,
                                  struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  gemm_job job;
  memset(&job, 0, sizeof job);
  job.a = a;
  job.b = b;
  job.m = a->m.rows;
  job.n = b->m.rows;
  job.k = a->m.cols;
  job.alpha = job_alpha(a, b);
  job.d = d;
  job.workspace = (uint8_t *)workspace;
  run_job(&job, workspace_bytes);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_nvfp4_geglu(struct ingot_context *ctx, const ingot_nvfp4_operand *a,
                                   const ingot_nvfp4_operand *w, const ingot_nvfp4_packed *h,
                                   const float *h_global_scale, void *workspace,
                                   size_t workspace_bytes, struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  /* The padding of h's scale buffer first (the tiles write the rest). */
  int64_t blocks = h->cols / 16;
  for (int64_t r = 0; r < h->scale_rows; r++)
    for (int64_t c = r < h->rows ? blocks : 0; c < h->scale_cols; c++)
      h->scales[ingot_nvfp4_swizzle_offset(r, c, h->scale_cols)] = 0;
  gemm_job job;
  memset(&job, 0, sizeof job);
  job.a = a;
  job.b = w;
  job.m = a->m.rows;
  job.n = w->m.rows;
  job.k = a->m.cols;
  job.alpha = job_alpha(a, w);
  job.h = h;
  job.h_gs = *h_global_scale;
  job.workspace = (uint8_t *)workspace;
  run_job(&job, workspace_bytes);
  return INGOT_STATUS_SUCCESS;
}
