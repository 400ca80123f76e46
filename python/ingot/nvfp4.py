"""NVFP4: E2M1 values, E4M3 block scales, an fp32 global scale (docs/nvfp4.md,
the NVFP4 section of ingot.h).

Format. A [rows, cols] matrix (cols % 16 == 0) is stored as
  values  [rows, cols/2] uint8: E2M1 codes, two per byte, the even element in
          the LOW nibble; code = sign << 3 | index, magnitudes
          {0, 0.5, 1, 1.5, 2, 3, 4, 6} at index 0..7.
  scales  one E4M3 byte sf per 16 consecutive elements of a row, in the
          CUTLASS / FlashInfer "128x4" swizzled layout: a buffer of
          [round_up(rows, 128), round_up(cols/16, 4)] bytes (padding 0),
          uint8 or float8_e4m3fn, 2-D [Rp, Kp] or 1-D [Rp * Kp], contiguous;
          see :func:`nvfp4_scale_offset`.
  gs      the global scale, the ENCODE multiplier (conventionally
          448 * 6 / amax): an F32 array of one element [1] in the context's
          memory (device memory on CUDA).
An element decodes as e2m1 * float(sf) / gs.

Quantization of a block of 16 (every step one IEEE fp32 operation, round to
nearest even, identical on every backend):
  amax = max |x_i| over the block's finite elements (0 if none)
  sf   = E4M3(gs * (amax / 6)), saturating at 448; 0 if gs is not finite or
         not > 0. If sf == 0 every code is 0; else
  code_i = E2M1(x_i * (gs / float(sf))), ties to the even index, |y| > 6
         saturates to 6, sign kept (-0.0 and small negatives give code 8);
         NaN -> code 0, +Inf -> 0x7, -Inf -> 0xF (neither counts in amax).

Arrays are torch tensors, numpy arrays or DLPack / array-interface objects
(see ingot._tensor); the last dimension must be contiguous, rows may be
strided. Each op runs on the default context of its first array's device
(ingot.default_context) unless given ``ctx=`` (or, the older form, an
ingot.Context first). Outputs and workspaces are allocated like the main
input when not given (torch: torch.empty on the op's stream; numpy: bf16 as
ml_dtypes.bfloat16 if installed, else uint16 bits). CUDA ops run on
``stream`` (default: the current torch stream of the device). Errors raise
IngotError with the library's text. ingot.torch has these ops as PyTorch
custom ops.
"""

import ctypes
import numbers
import sys
from typing import NamedTuple

from ._core import DType, IngotError, check
from ._lib import ingot_nvfp4_matrix, lib
from ._tensor import allocate as _empty
from ._tensor import context_for as _context
from ._tensor import dtype_arg as _dtype
from ._tensor import int64_arg as _int64
from ._tensor import op_arg as _arg
from ._tensor import optional_context as _optional_context
from ._tensor import query_context as _query_context
from ._tensor import ref as _ref
from ._tensor import refuse_new_tensor_while_capturing as _refuse_while_capturing
from ._tensor import required_arg as _required
from ._tensor import run as _run
from ._tensor import workspace as _workspace

NVFP4_BLOCK = 16
"""Elements per E4M3 block scale."""
NVFP4_SCALE_ROWS = 128
"""The swizzled scale layout pads rows to a multiple of this."""
NVFP4_SCALE_COLS = 4
"""... and scale columns (cols / 16) to a multiple of this."""
NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE = 1 << 0
"""Flag of ``ingot_nvfp4_quantize_gate_up``: compute the global scale first."""

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0,
               -6.0)
"""The value of each E2M1 code 0..15."""


# ---- shapes ---------------------------------------------------------------------------------


def nvfp4_scale_shape(rows, cols):
    """Shape of the swizzled scale buffer of a [rows, cols] matrix
    (``ingot_nvfp4_scale_shape``): ``(round_up(rows, 128), round_up(cols/16, 4))``;
    the buffer has their product in bytes. rows >= 0, cols >= 0,
    cols % 16 == 0 (IngotError otherwise, also for a buffer whose byte count
    overflows int64)."""
    sr, sc = ctypes.c_int64(), ctypes.c_int64()
    check(lib.ingot_nvfp4_scale_shape(_int64("rows", rows), _int64("cols", cols),
                                      ctypes.byref(sr), ctypes.byref(sc)))
    return sr.value, sc.value


def nvfp4_scale_offset(row, scale_col, cols):
    """Byte offset of the scale of ``row``, scale column ``scale_col``
    (= element column // 16) in the 128x4 swizzled buffer of a matrix with
    ``cols`` element columns (``ingot_nvfp4_scale_offset``). With
    KT = ceil(cols/16 / 4):

        (row//128)*KT*512 + (scale_col//4)*512 + (row%32)*16 + ((row%128)//32)*4
        + scale_col%4

    Works on ints and elementwise on integer numpy arrays / torch tensors.
    No checks: 0 <= row, 0 <= scale_col < round_up(cols/16, 4)."""
    kt = (cols // 16 + 3) // 4
    return ((row // 128) * kt * 512 + (scale_col // 4) * 512 + (row % 32) * 16
            + ((row % 128) // 32) * 4 + scale_col % 4)


# ---- ops ------------------------------------------------------------------------------------


@_optional_context()
def nvfp4_global_scale(x, out=None, stream=None, *, ctx=None):
    """The conventional encode multiplier of a tensor (``ingot_nvfp4_global_scale``):

        amax = max |x| over the finite elements of x
        gs   = 2688 / amax   (448 * 6; one fp32 division)
        gs   = 1.0 when amax == 0 (or x is empty); FLT_MAX when the division
               overflows (amax < ~7.9e-36)

    x    [rows, cols] bfloat16, float16 or float32, any cols, any row stride.
    out  float32 [1] (written; must not overlap x); allocated like x when None.
    Returns out. CUDA: three launches, no host sync (out stays on the device).
    """
    ctx = _context(ctx, x, "x")
    s = ctx._stream(stream)
    xd = _required(ctx, x, "x", s)
    if out is None:
        out = _empty(xd, "out", (1,), DType.F32)
    o = _arg(ctx, out, "out", s, writable=True)
    _run(ctx, lib.ingot_nvfp4_global_scale, xd.ref(), o.ref(), s, names={"global_scale": "out"})
    return out


@_optional_context()
def nvfp4_quantize(x, global_scale, values=None, scales=None, nonfinite_count=None,
                   stream=None, *, ctx=None):
    """Quantizes x to NVFP4 with the global scale gs (``ingot_nvfp4_quantize``),
    by the rule of the module docstring.

    x             [rows, cols] bfloat16, float16 or float32; cols % 16 == 0;
                  any row stride.
    global_scale  float32 [1] in the context's memory (see
                  :func:`nvfp4_global_scale`), or a Python float (copied into a
                  new array like x: not for CUDA-graph capture).
    values        uint8 [rows, cols/2] (any row stride); allocated when None.
    scales        the swizzled buffer [round_up(rows,128), round_up(cols/16,4)],
                  uint8 or float8_e4m3fn (2-D, or 1-D of the product),
                  contiguous; padding bytes written as 0. Allocated (uint8,
                  2-D) when None.
    nonfinite_count  None, or a uint32 [1] counter: the op ADDS the number of
                  NaN / Inf elements of x (int32 arrays: pass
                  ``ingot.reinterpret(c, "u32")``).
    Outputs must not overlap the inputs or each other. Returns
    ``(values, scales)``. CUDA: one launch.
    """
    ctx = _context(ctx, x, "x")
    s = ctx._stream(stream)
    xd = _required(ctx, x, "x", s)
    g = _required(ctx, _scalar_like(ctx, xd, global_scale, "global_scale"), "global_scale", s)
    rows_cols = _matrix_shape(xd)
    if rows_cols is not None:
        rows, cols = rows_cols
        if values is None:
            values = _empty(xd, "values", (rows, cols // 2), DType.U8)
        if scales is None and cols % NVFP4_BLOCK == 0:
            scales = _empty(xd, "scales", nvfp4_scale_shape(rows, cols), DType.U8)
    v = _arg(ctx, values, "values", s, writable=True)
    sc = _arg(ctx, scales, "scales", s, writable=True)
    c = _arg(ctx, nonfinite_count, "nonfinite_count", s, writable=True)
    _run(ctx, lib.ingot_nvfp4_quantize, xd.ref(), g.ref(), _ref(v), _ref(sc), _ref(c), s)
    return values, scales


@_optional_context()
def nvfp4_dequantize(values, scales, global_scale, out=None, dtype="f32", stream=None, *,
                     ctx=None):
    """Decodes an NVFP4 matrix (``ingot_nvfp4_dequantize``):

        out[r, c] = (e2m1(code[r, c]) * float(sf[r, c // 16])) / gs

    (the product is exact; one fp32 rounding; bfloat16 out rounds once more,
    to nearest even). A NaN result (an sf byte 0x7F / 0xFF) and every element
    when gs is not finite or not > 0 is the quiet NaN 0x7FC00000 (bf16
    0x7FC0). Exact for gs = 1 (or any power of two in range).

    values        uint8 [rows, cols/2], any row stride.
    scales        the swizzled buffer of [rows, cols] (padding not read).
    global_scale  float32 [1] in the context's memory, or a Python float.
    out           [rows, cols] float32 or bfloat16, any row stride; allocated
                  when None with ``dtype`` ("f32" or "bf16"), cols =
                  2 * values.shape[1].
    Returns out. CUDA: one launch.
    """
    ctx = _context(ctx, values, "values")
    s = ctx._stream(stream)
    v = _required(ctx, values, "values", s)
    sc = _required(ctx, scales, "scales", s)
    g = _required(ctx, _scalar_like(ctx, v, global_scale, "global_scale"), "global_scale", s)
    if out is None:
        # out's shape comes from values: check what it is made from here, so
        # that no error blames an out the caller did not pass
        _check_values(v, "values")
        rows, half = v.shape
        out = _empty(v, "out", (rows, 2 * half), _out_dtype(dtype))
    o = _arg(ctx, out, "out", s, writable=True)
    _run(ctx, lib.ingot_nvfp4_dequantize, v.ref(), sc.ref(), g.ref(), _ref(o), s)
    return out


@_optional_context()
def nvfp4_swizzle_scales(linear, out=None, stream=None, *, ctx=None):
    """Linear -> 128x4 swizzled block scales (``ingot_nvfp4_swizzle_scales``):

        out[nvfp4_scale_offset(r, k, cols)] = linear[r, k],   cols = 16 * linear.shape[1]

    linear  [rows, cols/16] uint8 or float8_e4m3fn, any row stride.
    out     the swizzled buffer [round_up(rows,128), round_up(cols/16,4)]
            (uint8 / float8_e4m3fn, 2-D or 1-D, contiguous); every byte is
            written, padding 0. Allocated like linear (uint8) when None.
    Returns out. CUDA: one launch.
    """
    ctx = _context(ctx, linear, "linear")
    s = ctx._stream(stream)
    lin = _required(ctx, linear, "linear", s)
    if out is None:
        rows_cols = _matrix_shape(lin)
        if rows_cols is not None:
            out = _empty(lin, "swizzled", nvfp4_scale_shape(rows_cols[0], 16 * rows_cols[1]),
                         DType.U8)
    o = _arg(ctx, out, "out", s, writable=True)
    _run(ctx, lib.ingot_nvfp4_swizzle_scales, lin.ref(), _ref(o), s, names={"swizzled": "out"})
    return out


@_optional_context()
def nvfp4_unswizzle_scales(swizzled, rows=None, cols=None, out=None, stream=None, *, ctx=None):
    """128x4 swizzled -> linear block scales (``ingot_nvfp4_unswizzle_scales``):

        out[r, k] = swizzled[nvfp4_scale_offset(r, k, cols)]

    swizzled  the swizzled buffer of a [rows, cols] matrix (only non-padding
              bytes are read).
    out       [rows, cols/16] uint8 or float8_e4m3fn, any row stride;
              allocated (uint8) when None, which needs ``rows`` and ``cols``
              (the element columns; the padded buffer does not tell them).
    Returns out. CUDA: one launch.
    """
    ctx = _context(ctx, swizzled, "swizzled")
    s = ctx._stream(stream)
    sw = _required(ctx, swizzled, "swizzled", s)
    if out is None:
        if rows is None or cols is None:
            raise ValueError("nvfp4_unswizzle_scales: pass rows and cols (the matrix's shape), "
                             "or out=")
        rows, cols = _int64("rows", rows), _int64("cols", cols)
        if rows < 0:
            raise ValueError(f"rows: {rows} < 0")
        if cols < 0 or cols % NVFP4_BLOCK != 0:
            raise ValueError(f"cols: {cols}, expected a non-negative multiple of {NVFP4_BLOCK}")
        out = _empty(sw, "out", (rows, cols // NVFP4_BLOCK), DType.U8)
    o = _arg(ctx, out, "out", s, writable=True)
    if rows is not None and o.shape[:1] != (rows,):
        raise ValueError(f"out: shape {o.shape}, expected [{rows}, cols/16]")
    if cols is not None and o.shape[1:] != (cols // NVFP4_BLOCK,):
        raise ValueError(f"out: shape {o.shape}, expected [rows, {cols // NVFP4_BLOCK}]")
    _run(ctx, lib.ingot_nvfp4_unswizzle_scales, sw.ref(), o.ref(), s, names={"linear": "out"})
    return out


@_optional_context()
def nvfp4_quantize_gate_up(gate, up, global_scale=None, compute_global_scale=None,
                           values=None, scales=None, nonfinite_count=None, stream=None, *,
                           ctx=None):
    """Weight preparation for the fused gate/up + GeGLU GEMM
    (``ingot_nvfp4_quantize_gate_up``): interleaves

        W[2j] = gate[j],  W[2j + 1] = up[j]      (W [2H, K])

    and quantizes W exactly as :func:`nvfp4_quantize` would, with ONE global
    scale.

    gate, up      [H, K] of the same dtype (bfloat16, float16 or float32),
                  any row strides; K % 16 == 0.
    global_scale  float32 [1] in the context's memory (or a Python float when
                  it is an input). None: allocated, and computed.
    compute_global_scale  True: first write global_scale[0] <- the rule of
                  :func:`nvfp4_global_scale` over gate and up together
                  (INGOT_NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE); False: read it.
                  Default: True iff global_scale is None.
    values        uint8 [2H, K/2]; scales the swizzled buffer of [2H, K];
                  nonfinite_count as for nvfp4_quantize. Allocated when None.
    Returns ``(values, scales, global_scale)``. CUDA: one launch (four with
    the compute flag).
    """
    ctx = _context(ctx, gate, "gate")
    s = ctx._stream(stream)
    g = _required(ctx, gate, "gate", s)
    u = _required(ctx, up, "up", s)
    if compute_global_scale is None:
        compute_global_scale = global_scale is None
    if global_scale is None:
        if not compute_global_scale:
            raise ValueError("global_scale: None, but compute_global_scale is False")
        global_scale = _empty(g, "global_scale", (1,), DType.F32)
    elif compute_global_scale and not _is_array(global_scale):
        raise TypeError("global_scale: with compute_global_scale it is an output: pass an array")
    global_scale = _scalar_like(ctx, g, global_scale, "global_scale")
    gs = _arg(ctx, global_scale, "global_scale", s, writable=bool(compute_global_scale))
    rows_cols = _matrix_shape(g)
    if rows_cols is not None:
        h, k = rows_cols
        if values is None:
            values = _empty(g, "values", (2 * h, k // 2), DType.U8)
        if scales is None and k % NVFP4_BLOCK == 0:
            scales = _empty(g, "scales", nvfp4_scale_shape(2 * h, k), DType.U8)
    v = _arg(ctx, values, "values", s, writable=True)
    sc = _arg(ctx, scales, "scales", s, writable=True)
    c = _arg(ctx, nonfinite_count, "nonfinite_count", s, writable=True)
    flags = NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE if compute_global_scale else 0
    _run(ctx, lib.ingot_nvfp4_quantize_gate_up, g.ref(), u.ref(), gs.ref(), ctypes.c_uint32(flags),
         _ref(v), _ref(sc), _ref(c), s)
    return values, scales, global_scale


# ---- GEMM, fused GeGLU, MLP ----------------------------------------------------------------


class NVFP4Matrix(NamedTuple):
    """An NVFP4 matrix operand (``ingot_nvfp4_matrix``): values uint8
    [rows, cols/2] (any row stride), the swizzled scale buffer of
    [rows, cols], and the global scale (float32 [1] in the context's memory,
    or a Python float on the CPU / for torch tensors). Any 3-sequence
    ``(values, scales, global_scale)`` is accepted where one is expected."""

    values: object
    scales: object
    global_scale: object


@_optional_context()
def nvfp4_gemm_workspace_size(m, n, k, *, device=None, ctx=None):
    """Bytes of workspace :func:`nvfp4_gemm` needs for D [m, n] = A [m, k] x
    B [n, k]^T (``ingot_nvfp4_gemm_workspace_size``; 0 for m = 0) on
    ``device`` ("cpu", "cuda", "cuda:N", a torch.device) or ``ctx``.
    IngotError for a bad value or a shape whose byte counts overflow."""
    ctx = _query_context(ctx, device)
    out = ctypes.c_size_t()
    _run(ctx, lib.ingot_nvfp4_gemm_workspace_size, _int64("m", m), _int64("n", n),
         _int64("k", k), ctypes.byref(out))
    return out.value


@_optional_context()
def nvfp4_geglu_workspace_size(m, hidden, k, *, device=None, ctx=None):
    """Bytes of workspace :func:`nvfp4_geglu` needs for x [m, k] and
    W [2 * hidden, k] (``ingot_nvfp4_geglu_workspace_size``) on ``device``
    or ``ctx``."""
    ctx = _query_context(ctx, device)
    out = ctypes.c_size_t()
    _run(ctx, lib.ingot_nvfp4_geglu_workspace_size, _int64("m", m), _int64("hidden", hidden),
         _int64("k", k), ctypes.byref(out))
    return out.value


@_optional_context()
def nvfp4_mlp_workspace_size(m, k, hidden, n, *, device=None, ctx=None):
    """Bytes of workspace :func:`nvfp4_mlp` needs (``ingot_nvfp4_mlp_workspace_size``)
    on ``device`` or ``ctx``: the NVFP4 h [m, hidden] plus the larger
    scratch of the two steps."""
    ctx = _query_context(ctx, device)
    out = ctypes.c_size_t()
    _run(ctx, lib.ingot_nvfp4_mlp_workspace_size, _int64("m", m), _int64("k", k),
         _int64("hidden", hidden), _int64("n", n), ctypes.byref(out))
    return out.value


def _matrix(ctx, mat, name, stream, keep, writable=False, names=None):
    """(ingot_nvfp4_matrix, values Described) of a 3-sequence; the
    descriptors are appended to ``keep`` (alive for the call). ``names``:
    the parameters of values, scales and global scale when the caller passed
    them apart (else "<name>.values", ...)."""
    values, scales, gs = _unpack(mat, name)
    vn, sn, gn = names or (f"{name}.values", f"{name}.scales", f"{name}.global_scale")
    v = _required(ctx, values, vn, stream, writable=writable)
    sc = _required(ctx, scales, sn, stream, writable=writable)
    g = _required(ctx, _scalar_like(ctx, v, gs, gn), gn, stream)
    keep.extend((v, sc, g))
    m = ingot_nvfp4_matrix(ctypes.pointer(v.tensor), ctypes.pointer(sc.tensor),
                           ctypes.pointer(g.tensor))
    keep.append(m)
    return m, v


def _unpack(mat, name):
    """(values, scales, global_scale) of the NVFP4 matrix argument ``name``."""
    if mat is None:
        raise TypeError(f"{name}: None, expected an NVFP4 matrix (values, scales, global_scale)")
    try:
        values, scales, gs = mat
    except (TypeError, ValueError):
        raise TypeError(f"{name}: pass (values, scales, global_scale)") from None
    return values, scales, gs


def _matrix_context(ctx, mat, name):
    """``ctx``, or the default context of the device of the matrix's values."""
    return _context(ctx, _unpack(mat, name)[0], f"{name}.values")


def _rows_cols(d):
    """(rows, element cols) of a values Described, or None if not 2-D."""
    return (d.shape[0], 2 * d.shape[1]) if d is not None and d.tensor.ndim == 2 else None


def _need(query, *args, ctx):
    """The workspace size, or 0 when the query rejects the shape (the op
    then reports the bad argument by name)."""
    try:
        return query(*args, ctx=ctx)
    except IngotError:
        return 0


def _out_dtype(dtype):
    out_dtype = _dtype("dtype", dtype)
    if out_dtype not in (DType.F32, DType.BF16):
        raise ValueError(f"dtype: {dtype!r}, expected 'f32' or 'bf16'")
    return out_dtype


@_optional_context()
def nvfp4_gemm(a, b, out=None, dtype="bf16", workspace=None, stream=None, *, ctx=None):
    """NVFP4 GEMM (``ingot_nvfp4_gemm``), D = A B^T:

        acc[m, n] = sum_k decode(a[m, k]) * decode(b[n, k])   (fp32 accumulation;
                    decode = e2m1(code) * float(sf), exact)
        alpha     = 1.0f / (gsA * gsB)
        out[m, n] = acc[m, n] * alpha                        (float32, or rounded to bfloat16)

    The CPU reference rounds the exact dot product once to fp32. A NaN scale
    byte in a row makes that row (of D, or column for B) NaN; an unusable
    global scale (not finite or <= 0) makes every output NaN (canonical).

    a    NVFP4 [M, K] (values [M, K/2]); K a positive multiple of 64.
    b    NVFP4 [N, K], a linear layer's weight [out, in]; N a positive
         multiple of 64.
    out  [M, N] float32 or bfloat16 (any row stride); allocated like
         a's values with ``dtype`` ("bf16" or "f32") when None.
    workspace  a contiguous 1-D array of >= nvfp4_gemm_workspace_size(M, N, K)
         bytes (16-byte aligned), allocated when None (pass it for CUDA-graph
         capture).
    M = 0 is a no-op. Returns out.
    """
    ctx = _matrix_context(ctx, a, "a")
    s = ctx._stream(stream)
    keep = []
    am, av = _matrix(ctx, a, "a", s, keep)
    bm, bv = _matrix(ctx, b, "b", s, keep)
    ar, br = _rows_cols(av), _rows_cols(bv)
    if out is None and ar is not None and br is not None:
        out = _empty(av, "out", (ar[0], br[0]), _out_dtype(dtype))
    o = _arg(ctx, out, "out", s, writable=True)
    need = 0
    if workspace is None and ar is not None and br is not None:
        need = _need(nvfp4_gemm_workspace_size, ar[0], br[0], ar[1], ctx=ctx)
    ws, ws_bytes, ws_keep = _workspace(ctx, av, need, workspace, s)
    _run(ctx, lib.ingot_nvfp4_gemm, _byref(am), _byref(bm), _ref(o), ws, ws_bytes, s,
         names={"d": "out"})
    del keep, ws_keep
    return out


@_optional_context()
def nvfp4_geglu(x, w_gate_up, h_global_scale, values=None, scales=None, workspace=None,
                stream=None, *, ctx=None):
    """Fused gate/up GEMM + GeGLU + NVFP4 re-quantize (``ingot_nvfp4_geglu``):

        g = acc[m, 2j] * alpha,  u = acc[m, 2j+1] * alpha      (fp32; acc, alpha as
                                                               for nvfp4_gemm with W)
        h[m, j] = gelu_tanh(g) * u
        (values, scales) = quantize(h, h_global_scale)          (the nvfp4_quantize rule)

    x              NVFP4 [M, K]; K a positive multiple of 64.
    w_gate_up      NVFP4 [2H, K] with gate/up rows interleaved (row 2j gate
                   j, row 2j+1 up j: see nvfp4_quantize_gate_up); 2H a
                   positive multiple of 64.
    h_global_scale float32 [1] (the caller's calibrated encode multiplier
                   of h), or a Python float (CPU / torch).
    values         uint8 [M, H/2] (any row stride) and
    scales         the swizzled buffer of [M, H] (every byte written,
                   padding 0); both allocated when None.
    Returns NVFP4Matrix(values, scales, h_global_scale): operand A of the
    down projection.
    """
    ctx = _matrix_context(ctx, x, "x")
    s = ctx._stream(stream)
    keep = []
    xm, xv = _matrix(ctx, x, "x", s, keep)
    wm, wv = _matrix(ctx, w_gate_up, "w_gate_up", s, keep)
    xr, wr = _rows_cols(xv), _rows_cols(wv)
    like = xv
    if values is None or scales is None:  # h's shape comes from x and w_gate_up
        for name, d, r in (("x", xv, xr), ("w_gate_up", wv, wr)):
            if r is None:
                raise ValueError(f"{name}.values: shape {d.shape}, expected 2-D [rows, cols/2] "
                                 "(to allocate h)")
    if xr is not None and wr is not None:
        m, hidden = xr[0], wr[0] // 2
        if (values is None or scales is None) and (hidden <= 0 or hidden % 32 != 0):
            raise ValueError(f"w_gate_up.values: shape {wv.shape}, expected [2H, K/2] with 2H a "
                             "positive multiple of 64 (to allocate h)")
        if values is None:
            values = _empty(like, "values", (m, hidden // 2), DType.U8)
        if scales is None:
            scales = _empty(like, "scales", nvfp4_scale_shape(m, hidden), DType.U8)
    h_global_scale = _scalar_like(ctx, like, h_global_scale, "h_global_scale")
    hm, _ = _matrix(ctx, (values, scales, h_global_scale), "h", s, keep, writable=True,
                    names=("values", "scales", "h_global_scale"))
    need = 0
    if workspace is None and xr is not None and wr is not None:
        need = _need(nvfp4_geglu_workspace_size, xr[0], wr[0] // 2, xr[1], ctx=ctx)
    ws, ws_bytes, ws_keep = _workspace(ctx, like, need, workspace, s)
    _run(ctx, lib.ingot_nvfp4_geglu, _byref(xm), _byref(wm), _byref(hm), ws, ws_bytes, s,
         names={"h.values": "values", "h.scales": "scales", "h.global_scale": "h_global_scale"})
    del keep, ws_keep
    return NVFP4Matrix(values, scales, h_global_scale)


@_optional_context()
def nvfp4_mlp(x, w_gate_up, h_global_scale, w_down, out=None, dtype="bf16",
              workspace=None, stream=None, *, ctx=None):
    """The gated MLP in one call (``ingot_nvfp4_mlp``):

        h   = nvfp4_geglu(x, w_gate_up, h_global_scale)   (NVFP4 [M, H], in the workspace)
        out = nvfp4_gemm(h, w_down)                        ([M, N], float32 or bfloat16)

    byte-identical to the two calls. H % 64 == 0 (h is the down GEMM's K);
    w_down NVFP4 [N, H], N a positive multiple of 64. out allocated like x's
    values with ``dtype`` when None; workspace >= nvfp4_mlp_workspace_size
    bytes (allocated when None). Returns out.
    """
    ctx = _matrix_context(ctx, x, "x")
    s = ctx._stream(stream)
    keep = []
    xm, xv = _matrix(ctx, x, "x", s, keep)
    wm, wv = _matrix(ctx, w_gate_up, "w_gate_up", s, keep)
    dm, dv = _matrix(ctx, w_down, "w_down", s, keep)
    xr, wr, dr = _rows_cols(xv), _rows_cols(wv), _rows_cols(dv)
    if out is None and xr is not None and dr is not None:
        out = _empty(xv, "out", (xr[0], dr[0]), _out_dtype(dtype))
    o = _arg(ctx, out, "out", s, writable=True)
    g = _required(ctx, _scalar_like(ctx, xv, h_global_scale, "h_global_scale"), "h_global_scale",
                  s)
    need = 0
    if workspace is None and None not in (xr, wr, dr):
        need = _need(nvfp4_mlp_workspace_size, xr[0], xr[1], wr[0] // 2, dr[0], ctx=ctx)
    ws, ws_bytes, ws_keep = _workspace(ctx, xv, need, workspace, s)
    _run(ctx, lib.ingot_nvfp4_mlp, _byref(xm), _byref(wm), g.ref(), _byref(dm), _ref(o), ws,
         ws_bytes, s)
    del keep, ws_keep
    return out


def _byref(m):
    return ctypes.byref(m) if m is not None else None


# ---- helpers ----------------------------------------------------------------------------------


def _matrix_shape(d):
    """(rows, cols) of a 2-D descriptor, else None (the library then reports
    the bad input by name)."""
    return d.shape if d.tensor.ndim == 2 else None


def _check_values(d, name):
    """``d`` (a Described) is the values of an NVFP4 matrix, uint8
    [rows, cols/2] with cols a multiple of 16, else an error naming ``name``:
    for the wrappers that size an output from it."""
    if d.tensor.ndim != 2:
        raise ValueError(f"{name}: shape {d.shape}, expected 2-D [rows, cols/2] uint8")
    if d.shape[1] % (NVFP4_BLOCK // 2) != 0:
        raise ValueError(f"{name}: shape {d.shape}, expected [rows, cols/2] with cols a multiple "
                         f"of {NVFP4_BLOCK} (shape[1] a multiple of {NVFP4_BLOCK // 2})")
    if d.tensor.dtype != DType.U8:
        raise TypeError(f"{name}: dtype {DType(d.tensor.dtype)}, expected uint8 (two E2M1 codes "
                        "a byte)")


def _is_array(obj):
    return not isinstance(obj, numbers.Real)


def _scalar_like(ctx, like, value, name):
    """``value`` (the argument ``name``) as given when it is an array; a
    Python number becomes a new float32 [1] array in the memory of ``like``
    (a Described)."""
    if _is_array(value):
        return value
    if like.framework == "torch":
        torch = sys.modules["torch"]
        device = like.obj.device
        _refuse_while_capturing(name, value, f"a torch.float32 tensor of shape [1] on {device}",
                                device)
        return torch.tensor([float(value)], dtype=torch.float32, device=device)
    if like.device[0] != "cpu" or ctx.backend != "cpu":
        raise TypeError(f"{name}: pass a float32 [1] device array (a Python float is only "
                        "converted for torch tensors and numpy arrays on the CPU)")
    import numpy

    return numpy.array([value], dtype=numpy.float32)


