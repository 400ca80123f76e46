/*
 * Internal interface between src/core (validation, dispatch) and the backends
 * (src/cpu, src/cuda). Not installed.
 *
 * A public op validates every argument in core, fills one of the plain
 * argument structs below (raw pointers, sizes, element strides), and calls
 * the context's backend through its op table. Backends never re-validate
 * what core checked; they may only reject what is specific to them.
 */
#ifndef INGOT_CORE_INTERNAL_H
#define INGOT_CORE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ingot/ingot.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGOT_ERROR_TEXT_BYTES 512

struct ingot_backend_ops;

struct ingot_context {
  ingot_backend backend;
  int device;
  uint32_t flags; /* INGOT_CONTEXT_FLAG_* */
  /* CUDA device properties, cached at creation (0 on the CPU). */
  int sm_count;
  int cc_major, cc_minor;
  int pageable_memory_access; /* device can read plain host memory (HMM/ATS) */
  int detect_device_pointers; /* CPU context in a CUDA build with a GPU present */
  uint32_t *device_errors;    /* CUDA: one device word of INGOT_DEVICE_ERROR_* bits */
  uint32_t *device_errors_taken; /* CUDA: where the check reads the word out */
  int smem_optin;             /* CUDA: shared memory a block may opt in to (bytes) */
  int sampling_max_cluster;   /* CUDA: blocks per row the sampling kernels may use */
  int sampling_dynamic_smem;  /* CUDA: their dynamic shared memory limit (bytes) */
  int sampling_dense_cluster; /* CUDA: blocks per row of the dense path (0: unusable) */
  int sampling_dense_smem;    /* CUDA: its dynamic shared memory limit (bytes) */
  int sampling_half;          /* CUDA: the 16-bit softmax runs the dense path's clusters */
  int sampling_pdl; /* CUDA: the sampling kernels run their sm_90 code (griddepcontrol): launch
                     * them with programmatic dependent launch, and the wide softmax may run */
  const char *sampling_init_error; /* CUDA: why the sampling kernels could not be set up */
  const struct ingot_backend_ops *ops;
  char last_error[INGOT_ERROR_TEXT_BYTES];
};

/* Bits a kernel sets in ctx->device_errors when it finds an input invalid:
 * one per op, so that the report names the op. */
enum {
  INGOT_DEVICE_ERROR_NGRAM_ROW_IDS_CU_SEQLENS = 1u << 0,
  INGOT_DEVICE_ERROR_NGRAM_COMMIT_CU_SEQLENS = 1u << 1,
  INGOT_DEVICE_ERROR_NGRAM_EMBED_CU_SEQLENS = 1u << 2,
};

/* ---- errors ------------------------------------------------------------ */

/* Records "<op>: <formatted text>" as the last error of ctx (thread-local
 * when ctx is NULL) and returns status. */
ingot_status ingot_core_fail(struct ingot_context *ctx, ingot_status status, const char *op,
                             const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
void ingot_core_clear_error(struct ingot_context *ctx);

/* ---- n-gram argument bundles ------------------------------------------- */

typedef struct ingot_ngram_batch {
  const void *ids;          /* [T] */
  ingot_dtype ids_dtype;    /* I32 or I64; the context has the same dtype */
  int64_t num_tokens;       /* T */
  const void *cu_seqlens;   /* [B + 1] */
  ingot_dtype cu_dtype;     /* I32 or I64 */
  int64_t num_requests;     /* B */
  void *context;            /* [B, n-1] */
  int64_t context_stride;   /* elements between context rows */
} ingot_ngram_batch;

typedef struct ingot_ngram_table {
  const void *data;         /* [R, D] */
  ingot_dtype dtype;        /* F8_E4M3, BF16 or F32 */
  int64_t num_rows;         /* R */
  int64_t dim;              /* D */
  int64_t stride;           /* elements between table rows */
  float scale;
} ingot_ngram_table;

typedef struct ingot_ngram_rows {
  int64_t *data;            /* [T, H] */
  int64_t stride;
} ingot_ngram_rows;

typedef struct ingot_bf16_matrix {
  uint16_t *data;           /* [T, H*D] bf16 bits */
  int64_t stride;
} ingot_bf16_matrix;

/* ---- NVFP4 argument bundles ------------------------------------------------ */

/* A dense [rows, cols] source matrix. Row r is row r of data[0], or, when
 * interleave is 1, row r >> 1 of data[r & 1] (gate/up weight preparation:
 * data[0] = gate, data[1] = up, rows = 2H). */
typedef struct ingot_nvfp4_source {
  const void *data[2];
  int64_t stride[2];        /* elements between rows of data[0] / data[1] */
  ingot_dtype dtype;        /* BF16, F16 or F32 (both matrices) */
  int32_t interleave;       /* 0 or 1 */
  int64_t rows, cols;       /* of the (interleaved) matrix */
} ingot_nvfp4_source;

/* A packed NVFP4 [rows, cols] matrix (cols % 16 == 0). */
typedef struct ingot_nvfp4_packed {
  uint8_t *values;          /* [rows, cols/2] */
  int64_t values_stride;    /* bytes between rows */
  uint8_t *scales;          /* 128x4 swizzled, scale_rows x scale_cols bytes */
  int64_t rows, cols;
  int64_t scale_rows;       /* round_up(rows, 128) */
  int64_t scale_cols;       /* round_up(cols / 16, 4) */
} ingot_nvfp4_packed;

/* A dense [rows, cols] output matrix. */
typedef struct ingot_nvfp4_dense {
  void *data;
  ingot_dtype dtype;        /* BF16 or F32 */
  int64_t stride;           /* elements between rows */
} ingot_nvfp4_dense;

/* An NVFP4 GEMM operand: a packed matrix and its global scale (one float in
 * the context's memory). */
typedef struct ingot_nvfp4_operand {
  ingot_nvfp4_packed m;
  const float *global_scale;
} ingot_nvfp4_operand;

/* ---- sampling argument bundles ------------------------------------------- */

/* The inputs of one sampling call (softmax or sample). Absent parameters and
 * masks are NULL; every pointer is in the context's memory. */
typedef struct ingot_sampling_input {
  const void *logits;        /* [B, V] */
  ingot_dtype dtype;         /* F32, BF16 or F16 */
  int64_t logits_stride;     /* elements between rows */
  int64_t batch, vocab;      /* B >= 1, 1 <= V <= INT32_MAX */
  const float *temperature;  /* [B] or NULL (1) */
  const int32_t *top_k;      /* [B] or NULL (off) */
  const float *top_p;        /* [B] or NULL (off) */
  const float *min_p;        /* [B] or NULL (off) */
  const uint64_t *seed;      /* [B] or NULL (0) */
  const uint64_t *position;  /* [B] or NULL (0) */
  const uint32_t *allowed;   /* [B, ceil(V/32)] words or NULL */
  int64_t allowed_stride;    /* words between rows */
  const int32_t *banned;     /* [num_banned, 2] (row, token) or NULL */
  int64_t banned_stride;     /* elements between pairs */
  int64_t num_banned;
  const int32_t *bias_ids;   /* [num_bias, 2] (row, token) or NULL */
  int64_t bias_ids_stride;
  const float *bias_values;  /* [num_bias] */
  int64_t num_bias;
} ingot_sampling_input;

/* The outputs of ingot_sample; everything but tokens may be NULL. */
typedef struct ingot_sampling_output {
  int32_t *tokens;           /* [B] */
  uint32_t *row_status;      /* [B] */
  float *token_logprob;      /* [B] */
  float *token_raw_logprob;  /* [B] */
  int32_t *top_ids;          /* [B, num_top] */
  int64_t top_ids_stride;
  float *top_logprobs;       /* [B, num_top] */
  int64_t top_logprobs_stride;
  int64_t num_top;           /* 0 when neither top output is given */
  uint32_t flags;            /* INGOT_SAMPLING_TOP_FINAL */
} ingot_sampling_output;

/* ---- backend op table ---------------------------------------------------- */

typedef struct ingot_backend_ops {
  const char *name;
  /* Fills device properties / allocates per-context resources. */
  ingot_status (*context_init)(struct ingot_context *ctx);
  void (*context_fini)(struct ingot_context *ctx);
  ingot_status (*check_device_errors)(struct ingot_context *ctx, struct CUstream_st *stream);

  ingot_status (*ngram_row_ids)(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                                const ingot_ngram_batch *batch, ingot_ngram_rows rows,
                                struct CUstream_st *stream);
  ingot_status (*ngram_commit_context)(struct ingot_context *ctx,
                                       const ingot_ngram_config *cfg,
                                       const ingot_ngram_batch *batch,
                                       struct CUstream_st *stream);
  /* rows [T, H] -> out [T, H*D] */
  ingot_status (*ngram_gather)(struct ingot_context *ctx, const int64_t *rows,
                               int64_t rows_stride, int64_t num_tokens, int64_t num_heads,
                               const ingot_ngram_table *table, ingot_bf16_matrix out,
                               struct CUstream_st *stream);
  ingot_status (*ngram_embed)(struct ingot_context *ctx, const ingot_ngram_config *cfg,
                              const ingot_ngram_batch *batch, const ingot_ngram_table *table,
                              ingot_bf16_matrix out, struct CUstream_st *stream);

  /* NVFP4. global_scale points at one float in the context's memory. */
  ingot_status (*nvfp4_global_scale)(struct ingot_context *ctx, const ingot_nvfp4_source *x,
                                     float *global_scale, struct CUstream_st *stream);
  /* nonfinite_count may be NULL. Writes every value byte and every byte of
   * the scale buffer (padding 0). */
  ingot_status (*nvfp4_quantize)(struct ingot_context *ctx, const ingot_nvfp4_source *x,
                                 const float *global_scale, const ingot_nvfp4_packed *out,
                                 uint32_t *nonfinite_count, struct CUstream_st *stream);
  ingot_status (*nvfp4_dequantize)(struct ingot_context *ctx, const ingot_nvfp4_packed *in,
                                   const float *global_scale, ingot_nvfp4_dense out,
                                   struct CUstream_st *stream);
  /* linear [rows, scale_cols_used] (byte row stride) <-> swizzled (all of
   * scale_rows x scale_cols written by swizzle). */
  ingot_status (*nvfp4_swizzle_scales)(struct ingot_context *ctx, const uint8_t *linear,
                                       int64_t linear_stride, const ingot_nvfp4_packed *layout,
                                       struct CUstream_st *stream);
  ingot_status (*nvfp4_unswizzle_scales)(struct ingot_context *ctx,
                                         const ingot_nvfp4_packed *layout, uint8_t *linear,
                                         int64_t linear_stride, struct CUstream_st *stream);

  /* NVFP4 GEMM / fused GeGLU. Entries may be NULL (NOT_SUPPORTED). Core has
   * validated the shapes (K % 64, N % 64, 2H % 64) and the workspace size.
   * gemm: d [M, N] <- a [M, K] x b [N, K]^T.
   * geglu: h [M, H] (values + every scale byte) <- a [M, K] x w [2H, K]^T,
   *        quantized with h_global_scale. */
  ingot_status (*nvfp4_gemm_workspace_size)(struct ingot_context *ctx, int64_t m, int64_t n,
                                            int64_t k, size_t *bytes);
  ingot_status (*nvfp4_gemm)(struct ingot_context *ctx, const ingot_nvfp4_operand *a,
                             const ingot_nvfp4_operand *b, ingot_nvfp4_dense d,
                             void *workspace, size_t workspace_bytes,
                             struct CUstream_st *stream);
  ingot_status (*nvfp4_geglu_workspace_size)(struct ingot_context *ctx, int64_t m,
                                             int64_t hidden, int64_t k, size_t *bytes);
  ingot_status (*nvfp4_geglu)(struct ingot_context *ctx, const ingot_nvfp4_operand *a,
                              const ingot_nvfp4_operand *w, const ingot_nvfp4_packed *h,
                              const float *h_global_scale, void *workspace,
                              size_t workspace_bytes, struct CUstream_st *stream);

  /* Sampling. Entries may be NULL: core then returns NOT_SUPPORTED (see
   * ingot_core_require_op). The size queries get validated shapes
   * (batch >= 0, 1 <= vocab <= INT32_MAX, 0 <= num_top <= MAX_TOP); the ops
   * get batch >= 1 and a workspace of at least the size their query gave. */
  ingot_status (*sampling_softmax_workspace_size)(struct ingot_context *ctx, int64_t batch,
                                                  int64_t vocab, ingot_dtype dtype,
                                                  size_t *bytes);
  /* probs [B, V] (row stride probs_stride); row_status may be NULL. */
  ingot_status (*sampling_softmax)(struct ingot_context *ctx, const ingot_sampling_input *in,
                                   float *probs, int64_t probs_stride, uint32_t *row_status,
                                   void *workspace, size_t workspace_bytes,
                                   struct CUstream_st *stream);
  ingot_status (*sample_workspace_size)(struct ingot_context *ctx, int64_t batch, int64_t vocab,
                                        ingot_dtype dtype, int64_t num_top, size_t *bytes);
  ingot_status (*sample)(struct ingot_context *ctx, const ingot_sampling_input *in,
                         const ingot_sampling_output *out, void *workspace,
                         size_t workspace_bytes, struct CUstream_st *stream);
} ingot_backend_ops;

/* Generic dispatch guard for optional op-table entries: returns SUCCESS
 * when the context's backend has the entry (present != 0), else records
 * "<op>: not implemented on the <CPU|CUDA> backend yet" and returns
 * NOT_SUPPORTED. Use: ingot_core_require_op(ctx, op, ctx->ops->entry != NULL). */
static inline ingot_status ingot_core_require_op(struct ingot_context *ctx, const char *op,
                                                 int present) {
  if (present) return INGOT_STATUS_SUCCESS;
  return ingot_core_fail(ctx, INGOT_STATUS_NOT_SUPPORTED, op,
                         "not implemented on the %s backend yet",
                         ctx->backend == INGOT_BACKEND_CUDA ? "CUDA" : "CPU");
}

extern const ingot_backend_ops ingot_cpu_backend_ops;
#ifdef INGOT_WITH_CUDA
extern const ingot_backend_ops ingot_cuda_backend_ops;

/* Where a pointer lives, as far as the CUDA runtime can tell (no sync). */
typedef enum ingot_memory_kind {
  INGOT_MEMORY_HOST_PAGEABLE = 0, /* unknown to CUDA: plain malloc / stack */
  INGOT_MEMORY_HOST_PINNED = 1,   /* cudaHostAlloc / cudaHostRegister: device-readable */
  INGOT_MEMORY_DEVICE = 2,
  INGOT_MEMORY_MANAGED = 3,
} ingot_memory_kind;
/* The kind of ptr; *device gets the owning device for DEVICE memory (else -1). */
ingot_memory_kind ingot_cuda_memory_kind(const void *ptr, int *device);
int ingot_cuda_device_count(void);
/* Tests: blocks of a dense sampling kernel (softmax 0: the plain sampler's;
 * 1: the softmax's; 2: the 16-bit softmax's) that fit a SM at this V and
 * dtype (bf16 / f16 for 2); -1 on a CUDA error or an f32 dtype with 2. */
int ingot_cuda_sampling_dense_blocks_per_sm(const struct ingot_context *ctx, int softmax,
                                            ingot_dtype dtype, int64_t vocab);
#endif

/* 1 if the environment asks for reference kernels (INGOT_FORCE_REFERENCE). */
int ingot_core_force_reference_requested(void);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_CORE_INTERNAL_H */
