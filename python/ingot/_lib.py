"""Finding libingot.so and declaring its C functions (ctypes).

The library is looked for, in order:

1. the environment variable INGOT_LIBRARY (a path to libingot.so; if set, it
   must load: there is no fallback past it);
2. the copy bundled in the package, ingot/lib/libingot.so (``pip install``
   builds it with cmake and copies it there);
3. the repository's build folder, ../build/libingot.so relative to the
   package source (development: ``cmake -S . -B build && cmake --build build``);
4. ``ctypes.util.find_library("ingot")`` (an installed libingot).
"""

import ctypes
import ctypes.util
import os
from pathlib import Path

# The C library version this package was written against. version.h: the same
# major version is ABI compatible; before 1.0.0 every minor may break the ABI.
EXPECTED_VERSION_MAJOR = 0
EXPECTED_VERSION_MINOR = 1

# Limits from ingot.h.
TENSOR_MAX_DIMS = 4
NGRAM_MAX_N = 8
NGRAM_MAX_HEADS = 64


class ingot_tensor(ctypes.Structure):
    """Mirror of the C ``ingot_tensor``: data, dtype, ndim, shape[4], stride[4]
    (strides in elements). 80 bytes on LP64: the two 4-byte fields fill the
    8 bytes after ``data``, so there is no padding."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),  # ingot_dtype (a C enum: int)
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * TENSOR_MAX_DIMS),
        ("stride", ctypes.c_int64 * TENSOR_MAX_DIMS),
    ]


class ingot_ngram_config(ctypes.Structure):
    """Mirror of the C ``ingot_ngram_config`` (1112 bytes, no padding)."""

    _fields_ = [
        ("n", ctypes.c_int32),
        ("heads_per_order", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("boundary_token", ctypes.c_int64),
        ("multipliers", ctypes.c_int64 * NGRAM_MAX_N),
        ("primes", ctypes.c_int64 * NGRAM_MAX_HEADS),
        ("offsets", ctypes.c_int64 * NGRAM_MAX_HEADS),
    ]


class ingot_nvfp4_matrix(ctypes.Structure):
    """Mirror of the C ``ingot_nvfp4_matrix``: three ``const ingot_tensor *``
    (values, scales, global_scale)."""

    _fields_ = [
        ("values", ctypes.POINTER(ingot_tensor)),
        ("scales", ctypes.POINTER(ingot_tensor)),
        ("global_scale", ctypes.POINTER(ingot_tensor)),
    ]


SAMPLING_STRUCT_VERSION = 1
SAMPLING_MAX_TOP = 1024


class ingot_sampling_params(ctypes.Structure):
    """Mirror of the C ``ingot_sampling_params``: struct_size, struct_version,
    then ten ``const ingot_tensor *`` (NULL: absent). 88 bytes on LP64."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("struct_version", ctypes.c_uint32),
        ("temperature", ctypes.POINTER(ingot_tensor)),
        ("top_k", ctypes.POINTER(ingot_tensor)),
        ("top_p", ctypes.POINTER(ingot_tensor)),
        ("min_p", ctypes.POINTER(ingot_tensor)),
        ("seed", ctypes.POINTER(ingot_tensor)),
        ("position", ctypes.POINTER(ingot_tensor)),
        ("allowed", ctypes.POINTER(ingot_tensor)),
        ("banned", ctypes.POINTER(ingot_tensor)),
        ("bias_ids", ctypes.POINTER(ingot_tensor)),
        ("bias_values", ctypes.POINTER(ingot_tensor)),
    ]

    def __init__(self):
        super().__init__(ctypes.sizeof(ingot_sampling_params), SAMPLING_STRUCT_VERSION)


class ingot_sampling_logprobs(ctypes.Structure):
    """Mirror of the C ``ingot_sampling_logprobs``: struct_size,
    struct_version, flags, reserved, then four ``const ingot_tensor *``."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("struct_version", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("token_logprob", ctypes.POINTER(ingot_tensor)),
        ("token_raw_logprob", ctypes.POINTER(ingot_tensor)),
        ("top_ids", ctypes.POINTER(ingot_tensor)),
        ("top_logprobs", ctypes.POINTER(ingot_tensor)),
    ]

    def __init__(self):
        super().__init__(ctypes.sizeof(ingot_sampling_logprobs), SAMPLING_STRUCT_VERSION)


SAMPLING_SHARD_MAX_STEPS = 11


class ingot_sampling_shard(ctypes.Structure):
    """Mirror of the C ``ingot_sampling_shard`` (56 bytes on LP64)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("struct_version", ctypes.c_uint32),
        ("vocab_size", ctypes.c_int64),
        ("vocab_begin", ctypes.c_int64),
        ("vocab_count", ctypes.c_int64),
        ("num_shards", ctypes.c_int32),
        ("shard_index", ctypes.c_int32),
        ("max_top_k", ctypes.c_int32),
        ("num_top", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]

    def __init__(self):
        super().__init__(ctypes.sizeof(ingot_sampling_shard), SAMPLING_STRUCT_VERSION)
        self.num_shards = 1


class ingot_sampling_shard_plan(ctypes.Structure):
    """Mirror of the C ``ingot_sampling_shard_plan``."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("struct_version", ctypes.c_uint32),
        ("num_steps", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("record_bytes", ctypes.c_size_t * SAMPLING_SHARD_MAX_STEPS),
        ("exchanged_bytes", ctypes.c_size_t * SAMPLING_SHARD_MAX_STEPS),
        ("exchange", ctypes.c_int32 * SAMPLING_SHARD_MAX_STEPS),
        ("reserved2", ctypes.c_int32),
        ("max_record_bytes", ctypes.c_size_t),
        ("max_exchanged_bytes", ctypes.c_size_t),
        ("workspace_bytes", ctypes.c_size_t),
    ]

    def __init__(self):
        super().__init__(ctypes.sizeof(ingot_sampling_shard_plan), SAMPLING_STRUCT_VERSION)


_P = ctypes.POINTER
_int, _i32, _i64, _vp = ctypes.c_int, ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
_T, _C = _P(ingot_tensor), _P(ingot_ngram_config)

# name: (restype, argtypes). Enums are C ints; contexts and streams are void *.
_PROTOTYPES = {
    "ingot_version_number": (_int, []),
    "ingot_version": (ctypes.c_char_p, []),
    "ingot_status_string": (ctypes.c_char_p, [_int]),
    "ingot_status_name": (ctypes.c_char_p, [_int]),
    "ingot_backend_available": (_int, [_int]),
    "ingot_context_create": (_int, [_int, _int, _P(_vp)]),
    "ingot_context_destroy": (None, [_vp]),
    "ingot_context_backend": (_int, [_vp]),
    "ingot_context_device": (_int, [_vp]),
    "ingot_context_flags": (ctypes.c_uint32, [_vp]),
    "ingot_last_error": (ctypes.c_char_p, [_vp]),
    "ingot_context_check_device_errors": (_int, [_vp, _vp]),
    "ingot_dtype_size": (ctypes.c_size_t, [_int]),
    "ingot_dtype_name": (ctypes.c_char_p, [_int]),
    "ingot_ngram_config_derive": (_int, [_i64, _i32, _i32, _i64, _i64, _i32, _i64, _C]),
    "ingot_ngram_table_rows": (_int, [_C, _i64, _P(_i64)]),
    "ingot_ngram_row_ids": (_int, [_vp, _C, _T, _T, _T, _T, _vp]),
    "ingot_ngram_commit_context": (_int, [_vp, _C, _T, _T, _T, _vp]),
    "ingot_ngram_gather": (_int, [_vp, _T, _T, ctypes.c_float, _T, _vp]),
    "ingot_ngram_embed": (_int, [_vp, _C, _T, _T, _T, _T, ctypes.c_float, _T, _vp]),
    # Host tables (python/ingot/host_table.py)
    "ingot_host_table_create": (_int, [_vp, _i64, ctypes.c_uint32, _P(_vp)]),
    "ingot_host_table_destroy": (None, [_vp]),
    "ingot_host_table_data": (_vp, [_vp]),
    "ingot_host_table_bytes": (_i64, [_vp]),
    "ingot_host_table_mapped_bytes": (_i64, [_vp]),
    "ingot_host_table_strategy": (ctypes.c_uint32, [_vp]),
    "ingot_host_table_strategy_name": (ctypes.c_char_p, [ctypes.c_uint32]),
    "ingot_host_table_page_bytes": (_i64, [_vp]),
    "ingot_host_table_huge_page_bytes": (_int, [_vp, _P(_i64)]),
    # NVFP4 (python/ingot/nvfp4.py)
    "ingot_nvfp4_scale_shape": (_int, [_i64, _i64, _P(_i64), _P(_i64)]),
    "ingot_nvfp4_quantize": (_int, [_vp, _T, _T, _T, _T, _T, _vp]),
    "ingot_nvfp4_global_scale": (_int, [_vp, _T, _T, _vp]),
    "ingot_nvfp4_dequantize": (_int, [_vp, _T, _T, _T, _T, _vp]),
    "ingot_nvfp4_swizzle_scales": (_int, [_vp, _T, _T, _vp]),
    "ingot_nvfp4_unswizzle_scales": (_int, [_vp, _T, _T, _vp]),
    "ingot_nvfp4_quantize_gate_up": (_int, [_vp, _T, _T, _T, ctypes.c_uint32, _T, _T, _T, _vp]),
    "ingot_nvfp4_gemm_workspace_size": (_int, [_vp, _i64, _i64, _i64, _P(ctypes.c_size_t)]),
    "ingot_nvfp4_gemm": (_int, [_vp, _P(ingot_nvfp4_matrix), _P(ingot_nvfp4_matrix), _T, _vp,
                                ctypes.c_size_t, _vp]),
    "ingot_nvfp4_geglu_workspace_size": (_int, [_vp, _i64, _i64, _i64, _P(ctypes.c_size_t)]),
    "ingot_nvfp4_geglu": (_int, [_vp, _P(ingot_nvfp4_matrix), _P(ingot_nvfp4_matrix),
                                 _P(ingot_nvfp4_matrix), _vp, ctypes.c_size_t, _vp]),
    "ingot_nvfp4_mlp_workspace_size": (_int, [_vp, _i64, _i64, _i64, _i64,
                                              _P(ctypes.c_size_t)]),
    "ingot_nvfp4_mlp": (_int, [_vp, _P(ingot_nvfp4_matrix), _P(ingot_nvfp4_matrix), _T,
                               _P(ingot_nvfp4_matrix), _T, _vp, ctypes.c_size_t, _vp]),
    # Sampling (python/ingot/sampling.py)
    "ingot_sample_workspace_size": (_int, [_vp, _i64, _i64, _int, _i64, _P(ctypes.c_size_t)]),
    "ingot_sampling_softmax_workspace_size": (_int, [_vp, _i64, _i64, _int, _P(ctypes.c_size_t)]),
    "ingot_sample": (_int, [_vp, _T, _P(ingot_sampling_params), _T, _T,
                            _P(ingot_sampling_logprobs), _vp, ctypes.c_size_t, _vp]),
    "ingot_sampling_softmax": (_int, [_vp, _T, _P(ingot_sampling_params), _T, _T, _vp,
                                      ctypes.c_size_t, _vp]),
    "ingot_sampling_uniform": (ctypes.c_float, [ctypes.c_uint64, ctypes.c_uint64, _i32]),
    "ingot_sampling_gumbel": (ctypes.c_float, [ctypes.c_uint64, ctypes.c_uint64, _i32]),
    "ingot_sampling_exp": (ctypes.c_float, [ctypes.c_float]),
    "ingot_sampling_log": (ctypes.c_float, [ctypes.c_float]),
    # Sharded sampling (python/ingot/sampling_shard.py)
    "ingot_sampling_shard_get_plan": (_int, [_vp, _P(ingot_sampling_shard), _i64, _int,
                                             _P(ingot_sampling_shard_plan)]),
    "ingot_sampling_shard_step": (_int, [_vp, _i32, _T, _P(ingot_sampling_params),
                                         _P(ingot_sampling_shard), _vp, ctypes.c_size_t, _vp,
                                         ctypes.c_size_t, _vp, ctypes.c_size_t, _vp]),
    "ingot_sampling_shard_finish_sample": (_int, [_vp, _P(ingot_sampling_shard), _vp,
                                                  ctypes.c_size_t, _T, _T,
                                                  _P(ingot_sampling_logprobs), _vp,
                                                  ctypes.c_size_t, _vp]),
    "ingot_sampling_shard_finish_softmax": (_int, [_vp, _T, _P(ingot_sampling_params),
                                                   _P(ingot_sampling_shard), _vp,
                                                   ctypes.c_size_t, _T, _T, _vp, ctypes.c_size_t,
                                                   _vp]),
    "ingot_sampling_shard_gather": (_int, [_vp, _i32, _P(_vp), ctypes.c_size_t, _vp,
                                           ctypes.c_size_t, _vp]),
    "ingot_sampling_shard_sum": (_int, [_vp, _i32, _P(_vp), ctypes.c_size_t, _vp,
                                        ctypes.c_size_t, _vp]),
    "ingot_sampling_sharded_nccl_workspace_size": (_int, [_vp, _P(ingot_sampling_shard), _i64,
                                                          _int, _P(ctypes.c_size_t)]),
    "ingot_sampling_sharded_nccl_verify": (_int, [_vp, _vp, _P(ingot_sampling_shard), _i64,
                                                  _int, _vp]),
    "ingot_sample_sharded_nccl": (_int, [_vp, _vp, _T, _P(ingot_sampling_params),
                                         _P(ingot_sampling_shard), _T, _T,
                                         _P(ingot_sampling_logprobs), _vp, ctypes.c_size_t,
                                         _vp]),
    "ingot_sampling_softmax_sharded_nccl": (_int, [_vp, _vp, _T, _P(ingot_sampling_params),
                                                   _P(ingot_sampling_shard), _T, _T, _vp,
                                                   ctypes.c_size_t, _vp]),
}


def _load():
    """Returns (CDLL, path) or raises ImportError listing every place tried."""
    env = os.environ.get("INGOT_LIBRARY")
    if env:
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise ImportError(
                f"ingot: cannot load the library named by INGOT_LIBRARY={env!r}: {e}"
            ) from None
    tried = ["INGOT_LIBRARY: not set"]
    package = Path(__file__).resolve().parent
    for where, path in (
        ("bundled copy", package / "lib" / "libingot.so"),
        ("repository build", package.parent.parent / "build" / "libingot.so"),
    ):
        if not path.is_file():
            tried.append(f"{where}: {path}: not found")
            continue
        try:
            return ctypes.CDLL(str(path)), str(path)
        except OSError as e:
            tried.append(f"{where}: {path}: {e}")
    name = ctypes.util.find_library("ingot")
    if name is None:
        tried.append('ctypes.util.find_library("ingot"): not found')
    else:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            tried.append(f'ctypes.util.find_library("ingot") = {name}: {e}')
    raise ImportError(
        "ingot: cannot find the shared library libingot.so. Looked in:\n  - "
        + "\n  - ".join(tried)
        + "\nBuild it (cmake -S . -B build && cmake --build build in the repository), "
        "reinstall the package with cmake available, or set INGOT_LIBRARY=/path/to/libingot.so."
    )


def _check_version(lib, path):
    for name in ("ingot_version_number", "ingot_version"):
        if not hasattr(lib, name):
            raise ImportError(f"ingot: {path} is not an ingot library (no symbol {name})")
        restype, argtypes = _PROTOTYPES[name]
        getattr(lib, name).restype = restype
        getattr(lib, name).argtypes = argtypes
    number = lib.ingot_version_number()
    major, minor = number // 10000, number // 100 % 100
    compatible = major == EXPECTED_VERSION_MAJOR and (
        minor == EXPECTED_VERSION_MINOR if major == 0 else minor >= EXPECTED_VERSION_MINOR
    )
    if not compatible:
        raise ImportError(
            f"ingot: the library at {path} is version {lib.ingot_version().decode()} "
            f"(ingot_version_number() = {number}), but this package needs "
            f"{EXPECTED_VERSION_MAJOR}.{EXPECTED_VERSION_MINOR}.x"
        )


def _declare(lib, path):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError(f"ingot: the library at {path} has no symbol {name}") from None
        fn.restype = restype
        fn.argtypes = argtypes


lib, library_path = _load()
_check_version(lib, library_path)
_declare(lib, library_path)
