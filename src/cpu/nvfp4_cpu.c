/*
 * NVFP4, CPU reference backend: plain loops over common/nvfp4_ref.h. This is
 * the test oracle; keep it plain.
 */
#include "common/nvfp4_ref.h"
#include "cpu/cpu.h"

/* Row r of the (possibly gate/up-interleaved) source. */
static const void *source_row(const ingot_nvfp4_source *x, int64_t r) {
  int which = x->interleave ? (int)(r & 1) : 0;
  int64_t src_row = x->interleave ? r >> 1 : r;
  size_t bytes = ingot_dtype_size(x->dtype);
  return (const char *)x->data[which] + (size_t)(src_row * x->stride[which]) * bytes;
}

ingot_status ingot_cpu_nvfp4_global_scale(struct ingot_context *ctx, const ingot_nvfp4_source *x,
                                          float *global_scale, struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  float amax = 0.0f;
  for (int64_t r = 0; r < x->rows; r++) {
    const void *row = source_row(x, r);
    for (int64_t c = 0; c < x->cols; c++) {
      float v = ingot_nvfp4_load(row, x->dtype, c);
      if (!ingot_f32_finite(v)) continue;
      float a = ingot_bits_f32(ingot_f32_bits(v) & 0x7fffffffu);
      if (a > amax) amax = a;
    }
  }
  *global_scale = ingot_nvfp4_global_scale_from_amax(amax);
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_nvfp4_quantize(struct ingot_context *ctx, const ingot_nvfp4_source *x,
                                      const float *global_scale, const ingot_nvfp4_packed *out,
                                      uint32_t *nonfinite_count, struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  float gs = *global_scale;
  int64_t blocks = out->cols / 16;
  uint32_t nonfinite = 0;
  for (int64_t m = 0; m < out->scale_rows; m++) {
    const void *row = m < out->rows ? source_row(x, m) : NULL;
    for (int64_t k = 0; k < out->scale_cols; k++) {
      uint8_t sf = 0;
      if (row != NULL && k < blocks) {
        float v[16];
        for (int i = 0; i < 16; i++) v[i] = ingot_nvfp4_load(row, x->dtype, k * 16 + i);
        nonfinite += ingot_nvfp4_ref_block(v, gs, &sf, out->values + m * out->values_stride + k * 8);
      }
      out->scales[ingot_nvfp4_swizzle_offset(m, k, out->scale_cols)] = sf;
    }
  }
  if (nonfinite_count) *nonfinite_count += nonfinite;
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_nvfp4_dequantize(struct ingot_context *ctx, const ingot_nvfp4_packed *in,
                                        const float *global_scale, ingot_nvfp4_dense out,
                                        struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  float gs = *global_scale;
  for (int64_t m = 0; m < in->rows; m++) {
    const uint8_t *v = in->values + m * in->values_stride;
    for (int64_t c = 0; c < in->cols; c++) {
      uint8_t sf = in->scales[ingot_nvfp4_swizzle_offset(m, c / 16, in->scale_cols)];
      uint8_t code = (uint8_t)((v[c / 2] >> (4 * (c & 1))) & 0xfu);
      float q = ingot_nvfp4_decode(code, sf, gs);
      if (out.dtype == INGOT_DTYPE_F32)
        ((float *)out.data)[m * out.stride + c] = q;
      else
        ((uint16_t *)out.data)[m * out.stride + c] = ingot_f32_to_bf16(q);
    }
  }
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_nvfp4_swizzle_scales(struct ingot_context *ctx, const uint8_t *linear,
                                            int64_t linear_stride,
                                            const ingot_nvfp4_packed *layout,
                                            struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  int64_t blocks = layout->cols / 16;
  for (int64_t m = 0; m < layout->scale_rows; m++)
    for (int64_t k = 0; k < layout->scale_cols; k++)
      layout->scales[ingot_nvfp4_swizzle_offset(m, k, layout->scale_cols)] =
          m < layout->rows && k < blocks ? linear[m * linear_stride + k] : 0;
  return INGOT_STATUS_SUCCESS;
}

ingot_status ingot_cpu_nvfp4_unswizzle_scales(struct ingot_context *ctx,
                                              const ingot_nvfp4_packed *layout, uint8_t *linear,
                                              int64_t linear_stride, struct CUstream_st *stream) {
  (void)ctx, (void)stream;
  int64_t blocks = layout->cols / 16;
  for (int64_t m = 0; m < layout->rows; m++)
    for (int64_t k = 0; k < blocks; k++)
      linear[m * linear_stride + k] =
          layout->scales[ingot_nvfp4_swizzle_offset(m, k, layout->scale_cols)];
  return INGOT_STATUS_SUCCESS;
}
