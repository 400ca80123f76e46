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
struct ingot_cuda_state;

struct ingot_context {
  ingot_backend backend;
  int device;
  uint32_t flags; /* INGOT_CONTEXT_FLAG_* */
  /* CUDA device properties, cached at creation (0 on the CPU). */
  int sm_count;
  int cc_major, cc_minor;
  int pageable_memory_access; /* device can read plain host memory (HMM/ATS) */
  int detect_device_pointers; /* CPU context in a CUDA build with a GPU present */
  struct ingot_cuda_state *cuda; /* the CUDA backend's own state (cuda/cuda_state.h); NULL on the CPU */
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

/* One shard of a sharded sampling call (include/ingot/ingot.h, Sharded
 * sampling; the steps and records: common/sampling_shard.h). in.logits is
 * the shard's slice [B, vocab_count] (NULL for the finish of a sample),
 * in.vocab the WHOLE vocabulary V; params, bitmask and lists speak global
 * ids. */
typedef struct ingot_sampling_shard_call {
  ingot_sampling_input in;
  int64_t vocab_begin;       /* v0 */
  int64_t vocab_count;       /* Vr >= 0 */
  int32_t num_shards;        /* S */
  int32_t shard_index;       /* this shard's slot */
  int32_t max_top_k;         /* kc */
  int32_t num_top;           /* n */
  uint32_t flags;            /* INGOT_SAMPLING_SHARD_* */
} ingot_sampling_shard_call;

/* ---- backend op table ---------------------------------------------------- */

#include "core/ops.h" /* INGOT_BACKEND_OPS: the one op list */

/* A backend: its name, its per-context set-up, and one entry per op of
 * INGOT_BACKEND_OPS, in that order (backends fill it with the same list). */
typedef struct ingot_backend_ops {
  const char *name;
  /* Fills device properties / allocates per-context resources. */
  ingot_status (*context_init)(struct ingot_context *ctx);
  void (*context_fini)(struct ingot_context *ctx);
  ingot_status (*check_device_errors)(struct ingot_context *ctx, struct CUstream_st *stream);
  /* Host tables (core/host_table.c); NULL where host memory needs nothing
   * (the CPU backend). host_register makes [ptr, ptr + bytes) readable by
   * ctx's device at the address ptr (registered, mapped, portable);
   * host_alloc allocates such memory itself. Both return SUCCESS, or a
   * status with the reason written into why[why_size] (no op name; nothing
   * left registered or allocated). The release calls may run after ctx was
   * destroyed, hence the device ordinal. */
  ingot_status (*host_register)(struct ingot_context *ctx, void *ptr, size_t bytes, char *why,
                                size_t why_size);
  void (*host_unregister)(int device, void *ptr);
  ingot_status (*host_alloc)(struct ingot_context *ctx, size_t bytes, void **out, char *why,
                             size_t why_size);
  void (*host_free)(int device, void *ptr);
#define INGOT_OP_ENTRY(op, params) ingot_status(*op) params;
  INGOT_BACKEND_OPS(INGOT_OP_ENTRY)
#undef INGOT_OP_ENTRY
} ingot_backend_ops;

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
