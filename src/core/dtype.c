/* dtype sizes and names. */
#include "core/internal.h"

size_t ingot_dtype_size(ingot_dtype dtype) {
  switch (dtype) {
    case INGOT_DTYPE_F32: return 4;
    case INGOT_DTYPE_F16: return 2;
    case INGOT_DTYPE_BF16: return 2;
    case INGOT_DTYPE_F8_E4M3: return 1;
    case INGOT_DTYPE_I32: return 4;
    case INGOT_DTYPE_I64: return 8;
    case INGOT_DTYPE_U8: return 1;
    case INGOT_DTYPE_U32: return 4;
    case INGOT_DTYPE_U64: return 8;
    default: return 0;
  }
}

const char *ingot_dtype_name(ingot_dtype dtype) {
  switch (dtype) {
    case INGOT_DTYPE_F32: return "f32";
    case INGOT_DTYPE_F16: return "f16";
    case INGOT_DTYPE_BF16: return "bf16";
    case INGOT_DTYPE_F8_E4M3: return "f8_e4m3";
    case INGOT_DTYPE_I32: return "i32";
    case INGOT_DTYPE_I64: return "i64";
    case INGOT_DTYPE_U8: return "u8";
    case INGOT_DTYPE_U32: return "u32";
    case INGOT_DTYPE_U64: return "u64";
    default: return "invalid";
  }
}
