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

Per-row parameters are arrays of B (in the context's memory) or Python
numbers (broadcast into a new array like ``logits``: not for CUDA-graph
capture), or None (absent: T = 1, filters off, seed 0, position 0).
Outputs are allocated like ``logits`` when not given; pass them (and
``workspace``) explicitly to capture a CUDA graph. Errors raise IngotError
with the library's text. On CUDA a row whose parameter breaks its rule gets
token -1 and SAMPLING_ROW_BAD_PARAMETER (no value is read on the host).
"""

import ctypes
import numbers
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
from ._tensor import dtype_arg as _dtype
from ._tensor import int64_arg as _int64
from ._tensor import op_arg as _arg
from ._tensor import ref as _ref
from ._tensor import required_arg as _required
from ._tensor import run as _run
from ._tensor import takes_context as _takes_context
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


class SampleResult(NamedTuple):
    """What :func:`sample` returns; fields not asked for are None."""

    tokens: object  # int32 [B]: the drawn token, -1 for an empty row
    row_status: object  # uint32 (numpy) / int32 (torch) [B]: SAMPLING_ROW_* bits
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


@_takes_context
def sample_workspace_size(ctx, batch, vocab_size, dtype="f32", num_top=0):
    """Bytes of workspace :func:`sample` needs (``ingot_sample_workspace_size``)
    for logits [batch, vocab_size] of ``dtype`` and ``num_top`` top-n columns.
    IngotError for a shape whose byte counts overflow."""
    n = ctypes.c_size_t()
    _run(ctx, lib.ingot_sample_workspace_size, _int64("batch", batch),
         _int64("vocab_size", vocab_size), int(_dtype("dtype", dtype)),
         _int64("num_top", num_top), ctypes.byref(n), names=_QUERY_NAMES)
    return n.value


@_takes_context
def sampling_softmax_workspace_size(ctx, batch, vocab_size, dtype="f32"):
    """Bytes of workspace :func:`sampling_softmax` needs
    (``ingot_sampling_softmax_workspace_size``). IngotError for a shape whose
    byte counts overflow."""
    n = ctypes.c_size_t()
    _run(ctx, lib.ingot_sampling_softmax_workspace_size, _int64("batch", batch),
         _int64("vocab_size", vocab_size), int(_dtype("dtype", dtype)), ctypes.byref(n),
         names=_QUERY_NAMES)
    return n.value


def _need(query, *args):
    """The workspace size for the logits the caller passed, or 0 when the
    query rejects their shape (the op then reports ``logits`` by name)."""
    try:
        return query(*args)
    except IngotError:
        return 0


# ---- arguments --------------------------------------------------------------------------------


def _is_scalar(value):
    return isinstance(value, numbers.Number) or (
        hasattr(value, "shape") and getattr(value, "shape", None) == () and
        not hasattr(value, "__dlpack_device__") and not hasattr(value, "data_ptr"))


def _new_array(like, name, values, kind, stream, shape=None):
    """``values`` (a scalar broadcast to ``shape``, or a sequence) as a new
    array like ``like`` (a Described), made on the op's ``stream``. kind:
    "f32", "i32", "u64", "u32"."""
    if like.framework == "torch":
        torch = sys.modules["torch"]
        dtype = {"f32": torch.float32, "i32": torch.int32, "u64": torch.int64,
                 "u32": torch.int32}[kind]
        if kind == "u64":  # torch has no uint64 arithmetic: the same bits as int64
            values = _signed64(values)
        with _torch_on_stream(like.obj.device, stream):
            if shape is not None:
                return torch.full(shape, values, dtype=dtype, device=like.obj.device)
            return torch.tensor(values, dtype=dtype, device=like.obj.device)
    if like.device[0] != "cpu":
        raise TypeError(f"{name}: pass an array in device memory (the wrapper only builds "
                        "arrays for torch tensors and CPU arrays)")
    import numpy

    dtype = {"f32": numpy.float32, "i32": numpy.int32, "u64": numpy.uint64,
             "u32": numpy.uint32}[kind]
    if kind == "u64":
        values = _unsigned64(values)
    if shape is not None:
        return numpy.full(shape, values, dtype=dtype)
    return numpy.asarray(values, dtype=dtype)


def _signed64(values):
    if isinstance(values, (list, tuple)):
        return [_signed64(v) for v in values]
    v = _u64("seed/position", values)
    return v - (1 << 64) if v >= 1 << 63 else v


def _unsigned64(values):
    if isinstance(values, (list, tuple)):
        return [_unsigned64(v) for v in values]
    return _u64("seed/position", values)


def _row_param(ctx, like, name, value, kind, batch, stream, keep):
    """A per-row parameter: None, an array of B, a scalar or a sequence."""
    if value is None:
        return None
    if _is_scalar(value):
        if batch is None:
            raise ValueError(f"logits: shape {like.shape}, expected 2-D [B, V] ({name} given "
                             "as a number is broadcast to B rows)")
        value = _new_array(like, name, value, kind, stream, (batch,))
    elif isinstance(value, (list, tuple)):
        value = _new_array(like, name, list(value), kind, stream)
    d = _arg(ctx, value, name, stream)
    keep.append(d)
    return d


def _pairs(ctx, like, name, value, stream, keep):
    """[N, 2] int32 (row, token) pairs: an array, or a sequence of pairs."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        try:
            pairs = [tuple(p) for p in value]
        except TypeError:
            pairs = None
        if pairs is None or any(len(p) != 2 for p in pairs):
            raise ValueError(f"{name}: expected an int32 [N, 2] array or a list of (row, token) "
                             f"pairs; got {value!r}")
        value = _new_array(like, name, pairs if pairs else [], "i32", stream)
        if not pairs:
            value = value.reshape(0, 2)
    d = _arg(ctx, value, name, stream)
    keep.append(d)
    return d


def _params(ctx, like, batch, stream, keep, temperature, top_k, top_p, min_p, seed, position,
            allowed, banned, bias_ids, bias_values):
    p = ingot_sampling_params()
    fields = (("temperature", temperature, "f32"), ("top_k", top_k, "i32"),
              ("top_p", top_p, "f32"), ("min_p", min_p, "f32"), ("seed", seed, "u64"),
              ("position", position, "u64"))
    for name, value, kind in fields:
        d = _row_param(ctx, like, name, value, kind, batch, stream, keep)
        if d is not None:
            setattr(p, name, ctypes.pointer(d.tensor))
    if allowed is not None:
        d = _arg(ctx, allowed, "allowed", stream)
        keep.append(d)
        p.allowed = ctypes.pointer(d.tensor)
    for name, value in (("banned", banned), ("bias_ids", bias_ids)):
        d = _pairs(ctx, like, name, value, stream, keep)
        if d is not None:
            setattr(p, name, ctypes.pointer(d.tensor))
    if bias_values is not None:
        if isinstance(bias_values, (list, tuple)):
            bias_values = _new_array(like, "bias_values", list(bias_values), "f32", stream)
        d = _arg(ctx, bias_values, "bias_values", stream)
        keep.append(d)
        p.bias_values = ctypes.pointer(d.tensor)
    return p


def _batch(d):
    """B of 2-D logits (whatever their dtype), else None: outputs of B rows
    are then not allocated and the library reports logits by name."""
    return d.shape[0] if d.tensor.ndim == 2 else None


def _shape(d):
    """(B, V) of 2-D logits of a sampling dtype, else None: no workspace
    query (the library then reports the bad input by name)."""
    if d.tensor.ndim != 2 or DType(d.tensor.dtype) not in _LOGIT_DTYPES or d.shape[1] < 1:
        return None
    return d.shape


def _num_top(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TypeError(f"num_top: {value!r} is not an integer") from None


def _status_array(like, name, batch):
    if like.framework == "torch":
        return _empty(like, name, (batch,), DType.I32)
    if like.device[0] != "cpu":
        raise TypeError(f"{name}: pass it explicitly for CUDA arrays that are not torch tensors")
    import numpy

    return numpy.empty(batch, dtype=numpy.uint32)


# ---- ops ----------------------------------------------------------------------------------------


@_takes_context
def sample(ctx, logits, *, temperature=None, top_k=None, top_p=None, min_p=None, seed=None,
           position=None, allowed=None, banned=None, bias_ids=None, bias_values=None,
           logprobs=False, raw_logprobs=False, num_top=0, top_final=False, tokens=None,
           row_status=None, token_logprob=None, token_raw_logprob=None, top_ids=None,
           top_logprobs=None, workspace=None, stream=None):
    """One sampling step (``ingot_sample``), by the rules of the module docstring.

    logits       [B, V] float32 / bfloat16 / float16 (numpy bf16: uint16 bits or
                 ml_dtypes.bfloat16), any row stride.
    temperature  float32 [B] (>= 0, 0: greedy), top_k int32 [B] (0: off),
    top_p        float32 [B] in (0, 1], min_p float32 [B] in [0, 1],
    seed, position  uint64 or int64 [B]; each an array, a number (broadcast) or None.
    allowed      int32 / uint32 [B, ceil(V/32)] bitmask (1 = allowed) or None.
    banned       int32 [N, 2] (row, token) pairs, or a list of pairs.
    bias_ids, bias_values  int32 [M, 2] (row, token) and float32 [M] logit bias.
                 Entries with a row outside [0, B) are ignored (padding: -1).
    logprobs, raw_logprobs  also return the token's log-probability under the
                 final distribution / under softmax(logits / T') as given
                 (T' = T, 1 for greedy rows).
    num_top      n > 0: also return the n most probable (token, logprob) pairs
                 of the raw distribution (the final one if ``top_final``).
    tokens, row_status, token_logprob, token_raw_logprob, top_ids, top_logprobs:
                 output arrays to write (allocated like logits when None).
    workspace    a contiguous 1-D array of >= sample_workspace_size(...) bytes,
                 16-byte aligned (allocated when None; on a Hopper GPU a few
                 KB when V >= 32768 and num_top == 0, to be passed for CUDA
                 arrays that are not torch tensors).
    Returns a :class:`SampleResult`. Nothing of size [B, V] is written.
    """
    s = ctx._stream(stream)
    ld = _required(ctx, logits, "logits", s)
    keep = [ld]
    bv = _shape(ld)
    batch = _batch(ld)
    params = _params(ctx, ld, batch, s, keep, temperature, top_k, top_p, min_p, seed, position,
                     allowed, banned, bias_ids, bias_values)
    n = _num_top(num_top)
    if top_ids is not None or top_logprobs is not None:
        given = top_ids if top_ids is not None else top_logprobs
        shape = getattr(given, "shape", None)  # not an array: reported below by name
        n = int(shape[1]) if shape is not None and len(shape) == 2 else n
    if not 0 <= n <= SAMPLING_MAX_TOP:
        raise ValueError(f"num_top: {n}, expected 0 <= n <= {SAMPLING_MAX_TOP}")
    if batch is not None:
        if tokens is None:
            tokens = _empty(ld, "tokens", (batch,), DType.I32)
        if row_status is None:
            row_status = _status_array(ld, "row_status", batch)
        if token_logprob is None and logprobs:
            token_logprob = _empty(ld, "token_logprob", (batch,), DType.F32)
        if token_raw_logprob is None and raw_logprobs:
            token_raw_logprob = _empty(ld, "token_raw_logprob", (batch,), DType.F32)
        if n > 0 and top_ids is None and top_logprobs is None:
            top_ids = _empty(ld, "top_ids", (batch, n), DType.I32)
            top_logprobs = _empty(ld, "top_logprobs", (batch, n), DType.F32)
    td = _arg(ctx, tokens, "tokens", s, writable=True)
    sd = _arg(ctx, row_status, "row_status", s, writable=True)
    lp = ingot_sampling_logprobs()
    lp.flags = SAMPLING_TOP_FINAL if top_final else 0
    for name, value in (("token_logprob", token_logprob), ("token_raw_logprob", token_raw_logprob),
                        ("top_ids", top_ids), ("top_logprobs", top_logprobs)):
        d = _arg(ctx, value, name, s, writable=True)
        if d is not None:
            keep.append(d)
            setattr(lp, name, ctypes.pointer(d.tensor))
    need = 0
    if bv is not None and workspace is None:
        need = _need(sample_workspace_size, ctx, bv[0], bv[1], DType(ld.tensor.dtype), n)
    ws, ws_bytes, ws_keep = _workspace(ctx, ld, need, workspace, s)
    _run(ctx, lib.ingot_sample, ld.ref(), ctypes.byref(params), _ref(td), _ref(sd),
         ctypes.byref(lp), ws, ws_bytes, s)
    del keep, ws_keep
    return SampleResult(tokens, row_status, token_logprob, token_raw_logprob, top_ids,
                        top_logprobs)


@_takes_context
def sampling_softmax(ctx, logits, *, temperature=None, top_k=None, top_p=None, min_p=None,
                     allowed=None, banned=None, bias_ids=None, bias_values=None, probs=None,
                     row_status=None, workspace=None, stream=None):
    """probs [B, V] float32 <- the final distribution of every row
    (``ingot_sampling_softmax``): the temperature softmax over the allowed
    tokens (finite under any -inf pattern, exactly 0 for masked tokens), the
    renormalised top-k / top-p / min-p distribution when those are given,
    one-hot for T == 0, all zeros (and SAMPLING_ROW_EMPTY) for a row with
    nothing allowed. Arguments as for :func:`sample`. Returns
    ``(probs, row_status)``. On a Hopper GPU a workspace of a few KB is
    needed when V >= 32768 (:func:`sampling_softmax_workspace_size`): made
    here for torch tensors, to be passed for other CUDA arrays.
    """
    s = ctx._stream(stream)
    ld = _required(ctx, logits, "logits", s)
    keep = [ld]
    bv = _shape(ld)
    batch = _batch(ld)
    params = _params(ctx, ld, batch, s, keep, temperature, top_k, top_p, min_p, None, None,
                     allowed, banned, bias_ids, bias_values)
    if batch is not None:
        if probs is None:
            probs = _empty(ld, "probs", ld.shape, DType.F32)
        if row_status is None:
            row_status = _status_array(ld, "row_status", batch)
    pd = _arg(ctx, probs, "probs", s, writable=True)
    sd = _arg(ctx, row_status, "row_status", s, writable=True)
    need = 0
    if bv is not None and workspace is None:
        need = _need(sampling_softmax_workspace_size, ctx, bv[0], bv[1], DType(ld.tensor.dtype))
    ws, ws_bytes, ws_keep = _workspace(ctx, ld, need, workspace, s)
    _run(ctx, lib.ingot_sampling_softmax, ld.ref(), ctypes.byref(params), _ref(pd), _ref(sd), ws,
         ws_bytes, s)
    del keep, ws_keep
    return probs, row_status

