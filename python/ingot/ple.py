"""Loading a checkpoint's n-gram (PLE) table into host memory:
``ingot_ngram_table_load`` / ``ingot_ngram_table_probe`` (ingot.h,
docs/ple.md "Loading a checkpoint").

The checkpoint stores the table as safetensors tensors, in any files and in
any order::

    <prefix>ngram_embedding.shard_<i>.weight   F8_E4M3 [rows_i, D], i = 0..S-1
    <prefix>ngram_embedding.weight_scale       F32 or BF16, [] or [1]

The table [R, D] is the shards in index order (R = sum rows_i); the scale is
the ``scale`` of ngram_gather / ngram_embed. Everything is checked before
the destination is written (the library's error names the file, tensor and
value); a read that fails midway zeroes what it wrote.

    cfg = ingot.NgramConfig.derive(248320, 3, 8, 20000000, boundary_token=eos)
    table, scale = ingot.ngram_table_load("ckpt/", cfg.table_rows(128), 160,
                                          framework="torch")   # pinned if CUDA
    out = ingot.ngram_embed(cfg, ids, cu, context, table, scale=scale)

``out=ingot.HostTable.create(...)`` loads into host memory mapped with huge
pages where the system has them (host_table.py).
"""

import ctypes
import os
from typing import NamedTuple

from ._core import DType, Status, check
from ._lib import lib
from ._tensor import describe
from ._tensor import int64_arg as _int64
from .host_table import HostTable

_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_PATHS = ctypes.POINTER(ctypes.c_char_p)

lib.ingot_ngram_table_probe.restype = ctypes.c_int
lib.ingot_ngram_table_probe.argtypes = [
    _PATHS, ctypes.c_int32, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64),
    ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_float)]
lib.ingot_ngram_table_load.restype = ctypes.c_int
lib.ingot_ngram_table_load.argtypes = [
    _PATHS, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
    ctypes.c_int64, ctypes.POINTER(ctypes.c_float), _PROGRESS, ctypes.c_void_p]


class NgramTableInfo(NamedTuple):
    """What ``ngram_table_probe`` found: R, D, S and the scale."""
    rows: int
    row_bytes: int
    num_shards: int
    weight_scale: float


class NgramTable(NamedTuple):
    """What ``ngram_table_load`` returns: the [R, D] table and its scale."""
    table: object
    weight_scale: float


def _paths_arg(paths):
    """A path (str, bytes, os.PathLike) or a list of them -> (C array, count)."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    encoded = [os.fsencode(p) for p in paths]
    if not encoded:
        raise ValueError("paths: empty (pass .safetensors files or a directory)")
    return (ctypes.c_char_p * len(encoded))(*encoded), len(encoded)


def _prefix_arg(prefix):
    return None if prefix is None else os.fsencode(prefix)


def _probe(array, n, c_prefix):
    rows, row_bytes = ctypes.c_int64(), ctypes.c_int64()
    shards, scale = ctypes.c_int32(), ctypes.c_float()
    check(lib.ingot_ngram_table_probe(array, n, c_prefix, ctypes.byref(rows),
                                      ctypes.byref(row_bytes), ctypes.byref(shards),
                                      ctypes.byref(scale)))
    return NgramTableInfo(rows.value, row_bytes.value, shards.value, scale.value)


def ngram_table_probe(paths, prefix=None):
    """Finds and checks the table in ``paths`` (files or directories of
    *.safetensors files), reading only headers and the scale. ``prefix``:
    the text before "ngram_embedding." in the names ("" for none); None
    finds the one prefix of the shards. Returns NgramTableInfo(rows,
    row_bytes, num_shards, weight_scale); IngotError on any broken file."""
    array, n = _paths_arg(paths)
    return _probe(array, n, _prefix_arg(prefix))


def _numpy_fp8(numpy):
    try:
        import ml_dtypes

        return ml_dtypes.float8_e4m3fn
    except ImportError:
        return numpy.uint8  # ingot.reinterpret(table, "f8_e4m3") for the gather


def _allocate(framework, rows, row_bytes, pin_memory, host=None):
    """A new [rows, row_bytes] table, or a view of the HostTable ``host``."""
    if framework == "torch":
        import torch

        dtype = getattr(torch, "float8_e4m3fn", torch.uint8)
        if host is not None:
            return host.torch(rows, row_bytes, dtype=dtype)
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
        return torch.empty((rows, row_bytes), dtype=dtype, pin_memory=bool(pin_memory))
    if framework != "numpy":
        raise ValueError(f"framework: {framework!r}, expected 'numpy' or 'torch'")
    import numpy

    if host is not None:
        return host.numpy(rows, row_bytes).view(_numpy_fp8(numpy))
    if pin_memory:
        raise ValueError("pin_memory: numpy arrays cannot be pinned here (use framework='torch', "
                         "or pass out= of pinned memory, or out=ingot.HostTable)")
    return numpy.empty((rows, row_bytes), dtype=_numpy_fp8(numpy))


def _check_out(out, rows, row_bytes):
    """out's [rows, D] shape, 1-byte dtype, host memory and contiguity."""
    d = describe(out, "out", writable=True)
    if d.device[0] != "cpu":
        raise ValueError(f"out: on {d.device[0]}; the table is loaded into host memory "
                         "(pinned for the GPU: torch.empty(..., pin_memory=True))")
    if DType(d.tensor.dtype) not in (DType.U8, DType.F8_E4M3):
        raise TypeError(f"out: dtype {DType(d.tensor.dtype)}, expected float8_e4m3fn or uint8")
    shape = d.shape
    if len(shape) != 2:
        raise ValueError(f"out: shape {shape}, expected [rows, row_bytes]")
    if rows is not None and shape[0] != rows or row_bytes is not None and shape[1] != row_bytes:
        raise ValueError(f"out: shape {shape}, expected [{rows}, {row_bytes}]")
    if tuple(d.tensor.stride[:2]) != (shape[1], 1):
        raise ValueError(f"out: strides {tuple(d.tensor.stride[:2])}, the table must be "
                         "contiguous")
    return d, shape[0], shape[1]


def ngram_table_load(paths, rows=None, row_bytes=None, *, prefix=None, out=None,
                     framework="numpy", pin_memory=None, progress=None):
    """Loads the table of ``paths`` (files or directories of *.safetensors
    files) into one host array: table[R, D] = the shards in index order.

    rows, row_bytes: R (e.g. ``cfg.table_rows(pad)``) and D the files must
        hold exactly; from ``out``'s shape when it is given, else from
        ``ngram_table_probe`` when None (then nothing is checked against a
        configuration).
    prefix: the text before "ngram_embedding." ("" for none; None: the one
        prefix the shards have).
    out: a writable, C-contiguous [R, D] numpy array or CPU torch tensor of
        float8_e4m3fn or uint8 to load into (a view of an ingot.HostTable
        is one); or an ingot.HostTable of at least R * D bytes, loaded from
        its first byte and returned as a [R, D] view of ``framework``;
        else one is allocated: framework="numpy" (ml_dtypes.float8_e4m3fn
        if installed, else uint8) or "torch" (torch.float8_e4m3fn, pinned
        when ``pin_memory`` or, by default, when torch.cuda.is_available()).
    progress: optional callable(bytes_done, bytes_total), called on this
        thread after each chunk read (at most 64 MiB).

    Returns NgramTable(table, weight_scale). IngotError (with the library's
    text naming the file, tensor and value) for a broken or mismatched
    checkpoint: ``out`` is then untouched, or zeroed as far as it was written
    when a read failed midway."""
    array, n = _paths_arg(paths)
    c_prefix = _prefix_arg(prefix)
    host = out if isinstance(out, HostTable) else None
    if out is not None and host is None:
        d, rows, row_bytes = _check_out(out, rows, row_bytes)
    else:
        if rows is None or row_bytes is None:
            info = _probe(array, n, c_prefix)
            rows = info.rows if rows is None else rows
            row_bytes = info.row_bytes if row_bytes is None else row_bytes
        rows, row_bytes = _int64("rows", rows), _int64("row_bytes", row_bytes)
        if rows < 1 or row_bytes < 1:
            raise ValueError(f"rows, row_bytes: {rows}, {row_bytes}; both must be >= 1")
        if host is not None and rows * row_bytes > host.nbytes:
            raise ValueError(f"out: a HostTable of {host.nbytes} bytes, the table needs {rows} x "
                             f"{row_bytes} = {rows * row_bytes}")
        out = _allocate(framework, rows, row_bytes, pin_memory, host)
        d = describe(out, "out", writable=True)
    errors = []

    def report(done, total, _user):
        try:
            progress(done, total)
        except BaseException as e:  # noqa: BLE001 - raised again after the call
            errors.append(e)

    callback = _PROGRESS(report) if progress is not None else _PROGRESS()
    scale = ctypes.c_float()
    status = lib.ingot_ngram_table_load(array, n, c_prefix, rows, row_bytes, d.tensor.data,
                                        rows * row_bytes, ctypes.byref(scale), callback, None)
    if status != Status.SUCCESS:
        check(status)
    if errors:
        raise errors[0]
    return NgramTable(out, scale.value)


__all__ = ["NgramTable", "NgramTableInfo", "ngram_table_load", "ngram_table_probe"]
