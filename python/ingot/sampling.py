"""Sampling: masks and logit bias, temperature, top-k / top-p / min-p, a
seeded Gumbel-max draw or greedy, log-probabilities (docs/sampling.md; the
rules are stated in the Sampling section of ingot.h).

Per row r of ``logits [B, V]`` (float32, bfloat16 or float16; any row
stride), with x_i the logit:

  1. l_i = x_i + the row's logit-bias entries for i (fp32, in list order).
     Token i is allowed iff its bit in ``allowed[r]`` is 1 (xgrammar's
     [B, ceil(V/32)] int32 bitmask, token t = bit t & 31 of word t >> 5), no
     ``banned`` pair (r, i) exists and l_i is finite. NaN / +Inf count as
     masked and set SAMPLING_ROW_NAN. Nothing allowed: token -1,
     SAMPLING_ROW_EMPTY, probabilities 0, log-probabilities -inf.
  2. temperature T == 0: greedy (the lowest id among the maxima).
     T > 0: s_i = (l_i - max l) / T, w_i = ingot.sampling_exp(s_i).
  3. top-k (exactly k, lowest ids win ties), then top-p (shortest rank-order
     prefix whose mass reaches p of the top-k mass), then min-p (drop
     s_i < ingot.sampling_log(min_p)); the maximum token always stays.
  4. token = argmax over the kept set of s_i + g_i,
     g_i = ingot.sampling_gumbel(seed[r], position[r], i): the same token for
     the same (seed, position, row), whatever the batch.

The generator: Philox-4x32-10 (counter {i, 0, position lo, position hi},
key {seed lo, seed hi}), u = (1 + (x0 >> 9) 2^-23) 2^-(1 + clz(x1)), never 0
or 1, and g = -log(-log(1 - u)) with ingot's portable fp32 log.

Parameters (the conversion rule). Each per-row parameter, and each sparse
list, has one exact dtype: temperature, top_p, min_p, bias_values float32;
top_k, banned, bias_ids int32; seed, position int64 or uint64 (the same
bits). An array of its exact dtype on the logits' device (or, for CUDA
logits, in pinned host memory) is used as it is: the kernel reads it, and a
captured CUDA graph reads what is there at each replay. Anything else is
converted into a new array of the exact dtype on the logits' device:

  - a Python number (or a 0-d numpy value) is broadcast to [B];
  - a list or tuple is copied (banned / bias_ids: of (row, token) pairs);
  - an array of another dtype or device (numpy, torch) is copied and cast:
    floats and integers to float32; integers to int32 saturating at the int32
    range (a top_k >= V is off and a negative one is rejected either way;
    a (row, token) outside the batch or vocabulary stays outside); other
    integers to int64 for seed / position. Floats are never taken as top_k,
    seeds or ids (TypeError).

While the op's stream is capturing a CUDA graph nothing is converted (a
host value would be frozen into the graph, a copy from host memory cannot
be captured): a parameter that needs a conversion raises TypeError naming
it, its dtype and device, and the exact dtype to pass. ``allowed`` (int32 /
uint32 [B, ceil(V/32)]) is never converted. None means absent (T = 1,
filters off, seed 0, position 0).

The context comes from the logits' device when ``ctx`` is not given
(ingot.default_context); outputs and the workspace are allocated like
``logits`` when not given (torch: torch.empty on the op's stream, which a
CUDA graph captures). ingot.torch has these ops as PyTorch custom ops (for
torch.compile). Errors raise IngotError with the library's text. On CUDA a
row whose parameter breaks its rule gets token -1 and
SAMPLING_ROW_BAD_PARAMETER (no value is read on the host).
"""

import ctypes
import numbers
import operator
import sys
from typing import NamedTuple

from ._core import DType, IngotError
from ._lib import (
    SAMPLING_MAX_TOP,
    ingot_sampling_logprobs,
    ingot_sampling_params,
    lib,
)
from ._tensor import allocate as _empty
from ._tensor import context_for as _context
from ._tensor import dtype_arg as _dtype
from ._tensor import float_arg as _float
from ._tensor import int64_arg as _int64
from ._tensor import op_arg as _arg
from ._tensor import optional_context as _optional_context
from ._tensor import query_context as _query_context
from ._tensor import ref as _ref
from ._tensor import refuse_new_tensor_while_capturing as _refuse_while_capturing
from ._tensor import required_arg as _required
from ._tensor import run as _run
from ._tensor import torch_on_stream as _torch_on_stream
from ._tensor import workspace as _workspace

SAMPLING_ROW_EMPTY = 1 << 0
"""Row status bit: no allowed token (token -1)."""
SAMPLING_ROW_NAN = 1 << 1
"""Row status bit: a NaN or +Inf logit was seen (treated as masked)."""
SAMPLING_ROW_BAD_ENTRY = 1 << 2
"""Row status bit: a banned / bias entry of this row had a token outside [0, V) (ignored)."""
SAMPLING_ROW_BAD_PARAMETER = 1 << 3
"""Row status bit (CUDA): a per-row parameter broke its rule (token -1)."""
SAMPLING_TOP_FINAL = 1 << 0
"""Top-n pairs from the final distribution instead of the raw one."""

_LOGIT_DTYPES = (DType.F32, DType.BF16, DType.F16)
_U64 = (1 << 64) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


class SampleResult(NamedTuple):
    """What :func:`sample` returns when more than the tokens is asked for;
    fields not asked for are None."""

    tokens: object  # int32 [B]: the drawn token, -1 for an empty row
    row_status: object  # int32 [B]: SAMPLING_ROW_* bits
    token_logprob: object  # float32 [B]: log p of the token, final distribution
    token_raw_logprob: object  # float32 [B]: under softmax(logits / T') as given
    top_ids: object  # int32 [B, n]: most probable first, -1 padding
    top_logprobs: object  # float32 [B, n]: their log-probabilities, -inf padding


# ---- the generator, on the host ------------------------------------------------------------


def _u64(name, value):
    v = int(value)
    if not -(1 << 63) <= v <= _U64:
        raise OverflowError(f"{name}: {v} does not fit in 64 bits")
    return v & _U64


def _token(value):
    v = int(value)
    if not -(1 << 31) <= v < 1 << 31:
        raise OverflowError(f"token: {v} does not fit in int32")
    return v


def sampling_uniform(seed, position, token):
    """The uniform u in (0, 1) of (seed, position, token) (``ingot_sampling_uniform``),
    bit for bit what every backend uses: a Python float holding an fp32."""
    return lib.ingot_sampling_uniform(_u64("seed", seed), _u64("position", position),
                                      _token(token))


def sampling_gumbel(seed, position, token):
    """The Gumbel noise g = -log(-log(1 - u)) of (seed, position, token)
    (``ingot_sampling_gumbel``; ingot's portable fp32 log)."""
    return lib.ingot_sampling_gumbel(_u64("seed", seed), _u64("position", position),
                                     _token(token))


def sampling_exp(x):
    """ingot's portable fp32 e^x for x <= 0 (x > 0 counts as 0)."""
    return lib.ingot_sampling_exp(float(x))


def sampling_log(x):
    """ingot's portable fp32 log (the min-p threshold is sampling_log(min_p))."""
    return lib.ingot_sampling_log(float(x))


# ---- workspace ------------------------------------------------------------------------------


# The library's name of the logits dtype argument of the queries.
_QUERY_NAMES = {"logits_dtype": "dtype"}


@_optional_context()
def sample_workspace_size(batch, vocab_size, dtype="f32", num_top=0, *, device=None, ctx=None):
    """Bytes of workspace :func:`sample` needs (``ingot_sample_workspace_size``)
    for logits [batch, vocab_size] of ``dtype`` and ``num_top`` top-n columns
    on ``device`` ("cpu", "cuda", "cuda:N", a torch.device) or ``ctx``.
    IngotError for a shape whose byte counts overflow."""
    ctx = _query_context(ctx, device)
    n = ctypes.c_size_t()
    _run(ctx, lib.ingot_sample_workspace_size, _int64("batch", batch),
         _int64("vocab_size", vocab_size), int(_dtype("dtype", dtype)),
         _int64("num_top", num_top), ctypes.byref(n), names=_QUERY_NAMES)
    return n.value


@_optional_context()
def sampling_softmax_workspace_size(batch, vocab_size, dtype="f32", *, device=None, ctx=None):
    """Bytes of workspace :func:`sampling_softmax` needs
    (``ingot_sampling_softmax_workspace_size``) on ``device`` or ``ctx``.
    IngotError for a shape whose byte counts overflow."""
    ctx = _query_context(ctx, device)
    n = ctypes.c_size_t()
    _run(ctx, lib.ingot_sampling_softmax_workspace_size, _int64("batch", batch),
         _int64("vocab_size", vocab_size), int(_dtype("dtype", dtype)), ctypes.byref(n),
         names=_QUERY_NAMES)
    return n.value


def _need(query, *args, ctx):
    """The workspace size for the logits the caller passed, or 0 when the
    query rejects their shape (the op then reports ``logits`` by name)."""
    try:
        return query(*args, ctx=ctx)
    except IngotError:
        return 0


# ---- the conversion rule (module docstring) --------------------------------------------------

# kind -> what a parameter of that kind is, for messages
_KIND_TEXT = {"f32": "float32", "i32": "int32", "u64": "int64 (or uint64)"}


def _is_scalar(value):
    return isinstance(value, numbers.Number) or (
        hasattr(value, "shape") and getattr(value, "shape", None) == () and
        not hasattr(value, "__dlpack_device__") and not hasattr(value, "data_ptr"))


def _require_array(name, value):
    """TypeError unless ``value`` (not a number or a sequence) is an array."""
    if not any(hasattr(value, a) for a in ("__array__", "__array_interface__", "__dlpack__",
                                           "__cuda_array_interface__")):
        raise TypeError(f"{name}: {value!r} is not a number, a sequence or an array")


def _python_value(name, value, kind):
    """A number, or a (nested) sequence of numbers, as values of ``kind``:
    floats; ints saturated to int32; ints as the signed 64 bits of a seed."""
    if isinstance(value, (list, tuple)):
        return [_python_value(name, v, kind) for v in value]
    if kind == "f32":
        return _float(name, value)
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: {value!r} is not an integer") from None
    if kind == "i32":
        return min(max(v, _INT32_MIN), _INT32_MAX)
    v = _u64(name, v)
    return v - (1 << 64) if v >= 1 << 63 else v


def _wrong_dtype(name, dtype, kind):
    accepted = "integer or float" if kind == "f32" else "integer"
    return TypeError(f"{name}: dtype {dtype}, expected {_KIND_TEXT[kind]} (or another "
                     f"{accepted} dtype, converted)")


_NUMPY_EXACT = {}  # kind -> the numpy dtypes used as they are (filled on first use)


def _numpy_param(name, value, kind, shape):
    """``value`` as a host array of ``kind`` (the conversion rule)."""
    import numpy

    if not _NUMPY_EXACT:
        _NUMPY_EXACT.update({k: tuple(numpy.dtype(n) for n in names) for k, names in (
            ("f32", ("float32",)), ("i32", ("int32",)), ("u64", ("int64", "uint64")))})
    if type(value) is numpy.ndarray and value.dtype in _NUMPY_EXACT[kind]:
        return value  # the hot path: already what the library takes (native byte order)
    exact = {"f32": ("float32",), "i32": ("int32",), "u64": ("int64", "uint64")}[kind]
    if _is_scalar(value):
        if shape is None:
            raise TypeError(f"{name}: {value!r} is not an array")
        return numpy.full(shape, _python_value(name, value, kind), dtype=exact[0])
    if isinstance(value, (list, tuple)):
        return numpy.array(_python_value(name, value, kind), dtype=exact[0])
    _require_array(name, value)
    try:
        array = numpy.asarray(value)  # no copy for CPU tensors and array-interface objects
    except Exception:  # e.g. CUDA memory: the library names it
        return value
    if array.dtype.name in exact and array.dtype.isnative:
        return array
    letter = array.dtype.kind
    if kind == "f32" and letter in "fiu":
        return array.astype(numpy.float32)
    if kind == "i32" and letter in "iu":
        return (numpy.clip(array, _INT32_MIN, _INT32_MAX) if letter == "i"
                else numpy.minimum(array, _INT32_MAX)).astype(numpy.int32)
    if kind == "u64" and letter in "iu":
        return array.astype(numpy.int64)
    raise _wrong_dtype(name, array.dtype, kind)


def torch_param(logits, name, value, kind, shape):
    """``value`` as a torch tensor of ``kind`` on the device of ``logits`` (a
    torch tensor), by the conversion rule; ``shape`` is what a number is
    broadcast to (None: numbers are refused). Only torch operations: also
    traced by torch.compile in ingot.torch."""
    torch = sys.modules["torch"]
    int64 = (torch.int64, torch.uint64) if hasattr(torch, "uint64") else (torch.int64,)
    exact = {"f32": (torch.float32,), "i32": (torch.int32,), "u64": int64}[kind]
    device = logits.device
    if isinstance(value, torch.Tensor) and value.dtype in exact and (
            value.device == device or (device.type == "cuda" and value.device.type == "cpu"
                                       and value.is_pinned())):
        return value
    new_dtype = exact[0]
    what = "[B]" if shape is not None else "[N, 2]" if kind == "i32" else "[M]"
    _refuse_while_capturing(name, value, f"a {new_dtype} tensor of shape {what} on {device}",
                            device)
    if _is_scalar(value):
        if shape is None:
            raise TypeError(f"{name}: {value!r} is not an array")
        return torch.full(shape, _python_value(name, value, kind), dtype=new_dtype, device=device)
    if isinstance(value, (list, tuple)):
        return torch.tensor(_python_value(name, value, kind), dtype=new_dtype, device=device)
    if not isinstance(value, torch.Tensor):
        _require_array(name, value)
        try:
            value = torch.as_tensor(value)  # numpy arrays, array-interface objects
        except Exception:  # e.g. an unknown dtype: the library names it
            return value
    dtype = value.dtype
    is_int = not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool
    if not (is_int or (kind == "f32" and dtype.is_floating_point)):
        raise _wrong_dtype(name, dtype, kind)
    value = value.to(device)
    if kind == "i32" and dtype.itemsize >= 4 and dtype != torch.int32:  # saturate
        if dtype.is_signed:
            value = value.clamp(_INT32_MIN, _INT32_MAX)
        else:  # through int64 (some torch builds lack uint64 arithmetic); >= 2^63 wraps below 0
            value = value.to(torch.int64)
            value = value.masked_fill(value < 0, _INT32_MAX).clamp(max=_INT32_MAX)
    return value if dtype in exact else value.to(new_dtype)


def _convert(like, name, value, kind, shape, stream):
    """``value`` by the conversion rule of the module docstring, as an array
    like ``like`` (a Described)."""
    if like.framework == "torch":
        with _torch_on_stream(like.obj.device, stream):
            return torch_param(like.obj, name, value, kind, shape)
    if like.device[0] == "cpu":
        return _numpy_param(name, value, kind, shape)
    if _is_scalar(value) or isinstance(value, (list, tuple)):
        raise TypeError(f"{name}: pass an array in device memory (the wrapper only builds "
                        "arrays for torch tensors and CPU arrays)")
    return value


def _param(ctx, like, name, value, kind, shape, stream, keep):
    """The descriptor of a parameter (None stays None), converted."""
    if value is None:
        return None
    d = _arg(ctx, _convert(like, name, value, kind, shape, stream), name, stream)
    keep.append(d)
    return d


def _pair_list(name, value):
    """``value``, a sequence of (row, token) pairs, as a list of 2-tuples."""
    try:
        pairs = [tuple(p) for p in value]
    except TypeError:
        pairs = None
    if pairs is None or any(len(p) != 2 for p in pairs):
        raise ValueError(f"{name}: expected an int32 [N, 2] array or a list of (row, token) "
                         f"pairs; got {value!r}")
    return pairs


def torch_pairs(logits, name, value):
    """torch_param for a list of (row, token) pairs: int32 [N, 2]."""
    if isinstance(value, (list, tuple)):
        return torch_param(logits, name, _pair_list(name, value), "i32", None).reshape(-1, 2)
    return torch_param(logits, name, value, "i32", None)


def _pairs(ctx, like, name, value, stream, keep):
    """[N, 2] int32 (row, token) pairs: an array, or a sequence of pairs."""
    if isinstance(value, (list, tuple)):
        pairs = _pair_list(name, value)
        value = _convert(like, name, pairs, "i32", None, stream).reshape(-1, 2)
    return _param(ctx, like, name, value, "i32", None, stream, keep)


_ROW_PARAMS = (("temperature", "f32"), ("top_k", "i32"), ("top_p", "f32"), ("min_p", "f32"),
               ("seed", "u64"), ("position", "u64"))


def _params(ctx, like, stream, keep, values, allowed, banned, bias_ids, bias_values):
    """The ingot_sampling_params of ``values`` (the per-row parameters by
    name) and the masks."""
    p = ingot_sampling_params()
    batch = (like.shape[0],)
    for name, kind in _ROW_PARAMS:
        d = _param(ctx, like, name, values.get(name), kind, batch, stream, keep)
        if d is not None:
            setattr(p, name, ctypes.pointer(d.tensor))
    if allowed is not None:
        d = _arg(ctx, allowed, "allowed", stream)
        keep.append(d)
        p.allowed = ctypes.pointer(d.tensor)
    for name, value in (("banned", banned), ("bias_ids", bias_ids)):
        if value is not None:
            d = _pairs(ctx, like, name, value, stream, keep)
            setattr(p, name, ctypes.pointer(d.tensor))
    d = _param(ctx, like, "bias_values", bias_values, "f32", None, stream, keep)
    if d is not None:
        p.bias_values = ctypes.pointer(d.tensor)
    return p


def softmax_outputs(ctx, s, ld, probs, row_status, return_status):
    """(probs, row_status, their descriptors) of a softmax over the logits
    ``ld`` (Described): probs [B, V] float32 and, with ``return_status``,
    row_status [B] allocated like the logits when not given."""
    if probs is None:
        probs = _empty(ld, "probs", ld.shape, DType.F32)
    if row_status is None and return_status:
        row_status = _empty(ld, "row_status", (ld.shape[0],), DType.I32)
    pd = _arg(ctx, probs, "probs", s, writable=True)
    sd = _arg(ctx, row_status, "row_status", s, writable=True)
    return probs, row_status, pd, sd


def check_logits_shape(shape):
    """ValueError unless ``shape`` is 2-D: logits are [B, V], one row of a
    batch each (a single row is logits[None])."""
    if len(shape) != 2:
        raise ValueError(f"logits: shape {tuple(shape)}, expected 2-D [B, V] (batch, vocabulary; "
                         "one row: logits[None])")


def _query_shape(d):
    """(B, V) of logits of a sampling dtype, else None: no workspace query
    (the library then reports the bad input by name)."""
    if DType(d.tensor.dtype) not in _LOGIT_DTYPES or d.shape[1] < 1:
        return None
    return d.shape


def num_top_arg(value):
    """num_top as an int in [0, SAMPLING_MAX_TOP], else an error naming it."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"num_top: {value!r} is not an integer") from None
    if not 0 <= n <= SAMPLING_MAX_TOP:
        raise ValueError(f"num_top: {n}, expected 0 <= n <= {SAMPLING_MAX_TOP}")
    return n


# ---- ops ----------------------------------------------------------------------------------------


def logprobs_struct(ctx, stream, keep, top_final, outputs):
    """The ingot_sampling_logprobs of outputs = (token_logprob, token_raw_logprob,
    top_ids, top_logprobs), each None or an array; their descriptors go to keep."""
    lp = ingot_sampling_logprobs()
    lp.flags = SAMPLING_TOP_FINAL if top_final else 0
    for name, value in zip(("token_logprob", "token_raw_logprob", "top_ids", "top_logprobs"),
                           outputs):
        d = _arg(ctx, value, name, stream, writable=True)
        if d is not None:
            keep.append(d)
            setattr(lp, name, ctypes.pointer(d.tensor))
    return lp


@_optional_context(legacy_defaults={"return_status": True})
def sample(logits, top_k=None, top_p=None, *, temperature=None, min_p=None, seed=None,
           position=None, allowed=None, banned=None, bias_ids=None, bias_values=None,
           return_status=False, logprobs=False, raw_logprobs=False, num_top=0, top_final=False,
           tokens=None, row_status=None, token_logprob=None, token_raw_logprob=None, top_ids=None,
           top_logprobs=None, workspace=None, ctx=None, stream=None):
    """One sampling step (``ingot_sample``), by the rules of the module
    docstring: ``sample(logits, top_k, top_p, temperature=..., seed=...)``
    has the shape of FlashInfer's top_k_top_p_sampling_from_logits (top-k
    applied first) and returns the int32 [B] token ids.

    logits       [B, V] float32 / bfloat16 / float16 (numpy bf16: uint16 bits or
                 ml_dtypes.bfloat16), any row stride. One row is logits[None].
    top_k        int32 [B] (0: off), top_p float32 [B] in (0, 1],
    temperature  float32 [B] (>= 0, 0: greedy), min_p float32 [B] in [0, 1],
    seed, position  int64 or uint64 [B]: the draw of a row is a function of
                 (seed, position, its logits). Each an array, a number or a
                 sequence (converted: see the module docstring), or None.
    allowed      int32 / uint32 [B, ceil(V/32)] bitmask (1 = allowed) or None.
    banned       int32 [N, 2] (row, token) pairs, or a list of pairs.
    bias_ids, bias_values  int32 [M, 2] (row, token) and float32 [M] logit bias.
                 Entries with a row outside [0, B) are ignored (padding: -1).
    return_status  also return row_status: int32 [B] of SAMPLING_ROW_* bits.
    logprobs, raw_logprobs  also return the token's log-probability under the
                 final distribution / under softmax(logits / T') as given
                 (T' = T, 1 for greedy rows).
    num_top      n > 0: also return the n most probable (token, logprob) pairs
                 of the raw distribution (the final one if ``top_final``).
    tokens, row_status, token_logprob, token_raw_logprob, top_ids, top_logprobs:
                 output arrays to write (allocated like logits when None;
                 passing one asks for it).
    workspace    a contiguous 1-D array of >= sample_workspace_size(...) bytes,
                 16-byte aligned (allocated when None; on a Hopper GPU a few
                 KB when V >= 32768 and num_top == 0, to be passed for CUDA
                 arrays that are not torch tensors).
    ctx          an ingot.Context (also accepted first, before logits: that
                 older form defaults return_status to True); default: the
                 context of the logits' device. stream: see ingot.Context.

    Returns tokens, or a :class:`SampleResult` when anything else is asked
    for (its fields not asked for are None). Nothing of size [B, V] is written.
    """
    ctx = _context(ctx, logits, "logits")
    s = ctx._stream(stream)
    ld = _required(ctx, logits, "logits", s)
    check_logits_shape(ld.shape)
    keep = [ld]
    batch = ld.shape[0]
    params = _params(ctx, ld, s, keep, dict(temperature=temperature, top_k=top_k, top_p=top_p,
                                            min_p=min_p, seed=seed, position=position),
                     allowed, banned, bias_ids, bias_values)
    n = num_top_arg(num_top)
    if top_ids is not None or top_logprobs is not None:
        given = top_ids if top_ids is not None else top_logprobs
        shape = getattr(given, "shape", None)  # not an array: reported below by name
        n = num_top_arg(shape[1]) if shape is not None and len(shape) == 2 else n
    if tokens is None:
        tokens = _empty(ld, "tokens", (batch,), DType.I32)
    if row_status is None and return_status:
        row_status = _empty(ld, "row_status", (batch,), DType.I32)
    if token_logprob is None and logprobs:
        token_logprob = _empty(ld, "token_logprob", (batch,), DType.F32)
    if token_raw_logprob is None and raw_logprobs:
        token_raw_logprob = _empty(ld, "token_raw_logprob", (batch,), DType.F32)
    if n > 0 and top_ids is None and top_logprobs is None:
        top_ids = _empty(ld, "top_ids", (batch, n), DType.I32)
        top_logprobs = _empty(ld, "top_logprobs", (batch, n), DType.F32)
    td = _arg(ctx, tokens, "tokens", s, writable=True)
    sd = _arg(ctx, row_status, "row_status", s, writable=True)
    extra = (token_logprob, token_raw_logprob, top_ids, top_logprobs)
    lp = logprobs_struct(ctx, s, keep, top_final, extra)
    bv = _query_shape(ld)
    need = 0
    if bv is not None and workspace is None:
        need = _need(sample_workspace_size, bv[0], bv[1], DType(ld.tensor.dtype), n, ctx=ctx)
    ws, ws_bytes, ws_keep = _workspace(ctx, ld, need, workspace, s)
    _run(ctx, lib.ingot_sample, ld.ref(), ctypes.byref(params), td.ref(), _ref(sd),
         ctypes.byref(lp), ws, ws_bytes, s)
    del keep, ws_keep
    if row_status is None and all(x is None for x in extra):
        return tokens
    return SampleResult(tokens, row_status, *extra)


@_optional_context(legacy_defaults={"return_status": True})
def sampling_softmax(logits, *, temperature=None, top_k=None, top_p=None, min_p=None,
                     allowed=None, banned=None, bias_ids=None, bias_values=None,
                     return_status=False, probs=None, row_status=None, workspace=None, ctx=None,
                     stream=None):
    """probs [B, V] float32 <- the final distribution of every row
    (``ingot_sampling_softmax``): the temperature softmax over the allowed
    tokens (finite under any -inf pattern, exactly 0 for masked tokens), the
    renormalised top-k / top-p / min-p distribution when those are given,
    one-hot for T == 0, all zeros (and SAMPLING_ROW_EMPTY) for a row with
    nothing allowed. Arguments as for :func:`sample`. Returns probs, or
    ``(probs, row_status)`` with ``return_status`` (or a row_status passed;
    the older form with the context first defaults return_status to True).
    On a Hopper GPU a workspace of a few KB is needed when V >= 32768
    (:func:`sampling_softmax_workspace_size`): made here for torch tensors,
    to be passed for other CUDA arrays.
    """
    ctx = _context(ctx, logits, "logits")
    s = ctx._stream(stream)
    ld = _required(ctx, logits, "logits", s)
    check_logits_shape(ld.shape)
    keep = [ld]
    params = _params(ctx, ld, s, keep, dict(temperature=temperature, top_k=top_k, top_p=top_p,
                                            min_p=min_p), allowed, banned, bias_ids, bias_values)
    probs, row_status, pd, sd = softmax_outputs(ctx, s, ld, probs, row_status, return_status)
    bv = _query_shape(ld)
    need = 0
    if bv is not None and workspace is None:
        need = _need(sampling_softmax_workspace_size, bv[0], bv[1], DType(ld.tensor.dtype),
                     ctx=ctx)
    ws, ws_bytes, ws_keep = _workspace(ctx, ld, need, workspace, s)
    _run(ctx, lib.ingot_sampling_softmax, ld.ref(), ctypes.byref(params), pd.ref(), _ref(sd), ws,
         ws_bytes, s)
    del keep, ws_keep
    return probs if row_status is None else (probs, row_status)
