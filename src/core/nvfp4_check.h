/*
 * NVFP4 operand checks shared by the format ops (core/nvfp4.c) and the GEMM
 * family (core/nvfp4_gemm.c). Same conventions as core/check.h: each names
 * the argument (`name`) in its error text and returns the first failure.
 */
#ifndef INGOT_CORE_NVFP4_CHECK_H
#define INGOT_CORE_NVFP4_CHECK_H

#include "core/check.h"

/* A 1-element F32 [1] global scale. */
ingot_status ingot_core_nvfp4_check_global_scale(struct ingot_context *ctx, const char *op,
                                                 const char *name, const ingot_tensor *t,
                                                 int writable, ingot_span *span);

/* values [rows, cols/2] U8 (last dimension contiguous, any row stride); the
 * shape errors say "expected <rows_what> = rows" / "<cols_what> = cols/2". */
ingot_status ingot_core_nvfp4_check_values(struct ingot_context *ctx, const char *op,
                                           const char *name, const ingot_tensor *t, int64_t rows,
                                           const char *rows_what, int64_t cols,
                                           const char *cols_what, int writable,
                                           ingot_span *span);

/* The swizzled scale buffer of [rows, cols] (cols % 16 == 0): U8 / F8_E4M3,
 * 1-D [Rp * Kp] or 2-D [Rp, Kp] contiguous. Fills layout->scales, rows,
 * cols, scale_rows, scale_cols. */
ingot_status ingot_core_nvfp4_check_scales(struct ingot_context *ctx, const char *op,
                                           const char *name, const ingot_tensor *t, int64_t rows,
                                           int64_t cols, int writable, ingot_nvfp4_packed *layout,
                                           ingot_span *span);

/* The bytes of an NVFP4 [rows, cols] matrix named `matrix` (rows >= 0,
 * cols >= 0, cols % 16 == 0 already checked), for the size queries, whose
 * shapes come as numbers: its values (rows * cols / 2) and its swizzled
 * scales (round_up(rows, 128) * round_up(cols/16, 4)) must fit int64 and
 * size_t. The error text names the arguments the caller passed, as
 * "<rows_name> = r, <cols_name> = c: ...". */
ingot_status ingot_core_nvfp4_check_extent(struct ingot_context *ctx, const char *op,
                                           const char *matrix, const char *rows_name,
                                           int64_t rows, const char *cols_name, int64_t cols);

#endif /* INGOT_CORE_NVFP4_CHECK_H */
