"""Hashed n-gram embeddings (PLE / Engram): docs/ple.md, ingot.h.

Terms:
  n      n-gram size (orders k = 2..n); hpn heads per order;
         H = hpn * (n - 1) heads, 2-gram heads first.
  T, B   tokens and requests of one forward (a ragged batch).
  ids        [T]      int32 or int64, contiguous: token ids.
  cu_seqlens [B + 1]  int32 or int64, contiguous: cu[0] = 0, non-decreasing,
                      cu[B] = T; request b owns tokens [cu[b], cu[b+1]).
  context    [B, n-1] same dtype as ids, any row stride: the n-1 tokens just
                      before each request's first token here, oldest first
                      (all boundary_token for a fresh request).

Arrays are torch tensors, numpy arrays or DLPack / array-interface objects
(see ingot._tensor). Each op runs on the default context of its arrays'
device (ingot.default_context) unless given ``ctx=`` (or, the older form, an
ingot.Context first); CUDA ops run on ``stream`` (default: the current torch
stream of the device). ingot.torch has these ops as PyTorch custom ops.
"""

import ctypes
import operator

from ._core import DType, check
from ._lib import NGRAM_MAX_HEADS, NGRAM_MAX_N, ingot_ngram_config, lib
from ._tensor import allocate
from ._tensor import context_for as _context
from ._tensor import float_arg as _float
from ._tensor import int64_arg as _int64
from ._tensor import op_arg as _arg
from ._tensor import optional_context as _optional_context
from ._tensor import ref as _ref
from ._tensor import required_arg as _required
from ._tensor import run as _run


def _int(name, value, bits):
    v = operator.index(value)
    if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
        raise OverflowError(f"{name}: {v} does not fit in int{bits}")
    return v


def _int32(name, value):
    return _int(name, value, 32)


def _int64_list(name, values, count, limit):
    values = [_int64(f"{name}[{i}]", v) for i, v in enumerate(values)]
    if len(values) != count:
        raise ValueError(f"{name}: {len(values)} values, expected {count}")
    if count > limit:
        raise ValueError(f"{name}: {count} values, ingot supports at most {limit}")
    return values


class NgramConfig:
    """The constants of one PLE layer (``ingot_ngram_config``).

    ``NgramConfig(n, heads_per_order, boundary_token, multipliers, primes,
    offsets=None)``: mult[0..n-1], P[0..H-1] and off[0..H-1] (H = hpn * (n-1))
    as ints, lists or arrays; offsets default to the exclusive prefix sum of
    the primes. The library validates the config (IngotError otherwise).
    Or derive the constants as docs/ple.md does: :meth:`derive`.
    """

    def __init__(self, n, heads_per_order, boundary_token, multipliers, primes, offsets=None):
        n, hpn = _int32("n", n), _int32("heads_per_order", heads_per_order)
        primes = list(primes)
        if offsets is None:
            offsets, total = [], 0
            for p in primes:
                offsets.append(total)
                total += operator.index(p)
        c = ingot_ngram_config()
        c.n, c.heads_per_order, c.num_heads = n, hpn, len(primes)
        c.boundary_token = _int64("boundary_token", boundary_token)
        c.multipliers[:n] = _int64_list("multipliers", multipliers, n, NGRAM_MAX_N)
        c.primes[:len(primes)] = _int64_list("primes", primes, len(primes), NGRAM_MAX_HEADS)
        c.offsets[:len(primes)] = _int64_list("offsets", offsets, len(primes), NGRAM_MAX_HEADS)
        self._c = c
        self.table_rows()  # the library's checks: num_heads == hpn * (n-1), P >= 1, ...
        self._fields = self._read_fields()

    @classmethod
    def derive(cls, vocab_size, n, heads_per_order, base, seed=1234, layer_index=0, *,
               boundary_token):
        """``ingot_ngram_config_derive``: splitmix64 multipliers from
        seed + 10007 * layer_index, P[h] the (layer_index*H + h + 1)-th prime
        >= base, off the exclusive prefix sum of P. vocab_size >= 1,
        2 <= n <= 8, heads_per_order >= 1, H <= 64, base >= 2,
        layer_index >= 0. boundary_token is E, the model's end-of-sequence id."""
        c = ingot_ngram_config()
        check(lib.ingot_ngram_config_derive(
            _int64("vocab_size", vocab_size), _int32("n", n),
            _int32("heads_per_order", heads_per_order), _int64("base", base),
            _int64("seed", seed), _int32("layer_index", layer_index),
            _int64("boundary_token", boundary_token), ctypes.byref(c)))
        self = cls.__new__(cls)
        self._c = c
        self._fields = self._read_fields()
        return self

    def _read_fields(self):
        """(n, heads_per_order, boundary_token, multipliers, primes, offsets)
        as plain Python values, read once at creation (what ingot.torch
        passes to its ops, and torch.compile can read)."""
        return (self.n, self.heads_per_order, self.boundary_token, self.multipliers, self.primes,
                self.offsets)

    def table_rows(self, pad_multiple=1):
        """Rows a table for this config needs: off[H-1] + P[H-1], rounded up
        to a multiple of ``pad_multiple`` (>= 1)."""
        rows = ctypes.c_int64()
        check(lib.ingot_ngram_table_rows(ctypes.byref(self._c), _int64("pad_multiple", pad_multiple),
                                         ctypes.byref(rows)))
        return rows.value

    n = property(lambda self: self._c.n, doc="n-gram size")
    heads_per_order = property(lambda self: self._c.heads_per_order, doc="hpn")
    num_heads = property(lambda self: self._c.num_heads, doc="H = hpn * (n - 1)")
    boundary_token = property(lambda self: self._c.boundary_token, doc="E")
    multipliers = property(lambda self: tuple(self._c.multipliers[: self.n]), doc="mult[0..n-1]")
    primes = property(lambda self: tuple(self._c.primes[: self.num_heads]), doc="P[0..H-1]")
    offsets = property(lambda self: tuple(self._c.offsets[: self.num_heads]), doc="off[0..H-1]")

    @property
    def struct(self):
        """The ``ingot_ngram_config`` ctypes structure (shared, not a copy)."""
        return self._c

    def __eq__(self, other):
        if not isinstance(other, NgramConfig):
            return NotImplemented
        return bytes(self._c) == bytes(other._c)

    def __hash__(self):
        return hash(bytes(self._c))

    def __repr__(self):
        return (f"ingot.NgramConfig(n={self.n}, heads_per_order={self.heads_per_order}, "
                f"boundary_token={self.boundary_token}, multipliers={list(self.multipliers)}, "
                f"primes={list(self.primes)}, offsets={list(self.offsets)})")


# ---- ops -------------------------------------------------------------------------------
#
# Each op describes its arrays, allocates out when it is None, and calls the
# library, which validates everything. When out is None but the inputs' shapes
# are too wrong to size it, out goes down as NULL: the library then reports
# the bad input by name.


def _config(cfg):
    if not isinstance(cfg, NgramConfig):
        raise TypeError(f"cfg: {type(cfg).__name__}, expected ingot.NgramConfig")
    return ctypes.byref(cfg.struct)


@_optional_context()
def ngram_row_ids(cfg, ids, cu_seqlens, context, out=None, stream=None, *, ctx=None):
    """Row ids of every token of a ragged batch (``ingot_ngram_row_ids``).

    For token t at offset l = t - cu[b] of request b, x_s is the token s places
    left of t (ids[t-s] if l >= s, else context[b][n-1+l-s]). x_s for s >= 1 is
    valid iff none of x_1..x_s equals boundary_token; an invalid x_s is
    replaced by boundary_token. With wrapping int64 arithmetic,

        mix_2 = x_0*mult[0] ^ x_1*mult[1],  mix_k = mix_{k-1} ^ x_{k-1}*mult[k-1]
        rows[t][h] = floor_mod(mix_k, P[h]) + off[h]   for h in order k's block.

    ids [T], cu_seqlens [B+1], context [B, n-1] as in the module docstring.
    out: rows [T, H] int64 (any row stride; must not overlap the inputs);
    allocated like ``ids`` when None. Returns out. A decode step (one token
    per request) gives exactly the rows of a prefill of the same history.
    """
    config, ctx = _config(cfg), _context(ctx, ids, "ids")
    s = ctx._stream(stream)
    i = _required(ctx, ids, "ids", s)
    c = _required(ctx, cu_seqlens, "cu_seqlens", s)
    x = _required(ctx, context, "context", s)
    if out is None and i.tensor.ndim == 1:
        out = allocate(i, "out", (i.shape[0], cfg.num_heads), DType.I64)
    o = _arg(ctx, out, "out", s, writable=True)
    _run(ctx, lib.ingot_ngram_row_ids, config, i.ref(), c.ref(), x.ref(), _ref(o), s,
         names={"rows": "out"})
    return out


@_optional_context()
def ngram_commit_context(cfg, ids, cu_seqlens, context, stream=None, *, ctx=None):
    """Rolls each request's context forward in place (``ingot_ngram_commit_context``):

        context[b] <- the last n-1 tokens of context[b] ++ ids[cu[b] .. cu[b+1])

    A request with fewer than n-1 tokens keeps the tail of its old context;
    one with none keeps it unchanged. ids, cu_seqlens, context as for
    :func:`ngram_row_ids` (context must be writable). Call it after every op
    that reads the old context (CUDA: enqueue it after them). Returns None.
    """
    config, ctx = _config(cfg), _context(ctx, ids, "ids")
    s = ctx._stream(stream)
    i = _required(ctx, ids, "ids", s)
    c = _required(ctx, cu_seqlens, "cu_seqlens", s)
    x = _required(ctx, context, "context", s, writable=True)
    _run(ctx, lib.ingot_ngram_commit_context, config, i.ref(), c.ref(), x.ref(), s)


@_optional_context()
def ngram_gather(rows, table, scale=1.0, out=None, stream=None, *, ctx=None):
    """Gathers table rows (``ingot_ngram_gather``):

        out[t, h*D + d] = bf16(float(table[rows[t, h], d]) * scale)

    (fp32 product, then round to nearest even; NaN stays NaN).
    rows  [T, H] int64, any row stride. A row id outside [0, R) gives a zero
          row; the table is never read outside its bounds.
    table [R, D] float8_e4m3fn, bfloat16 or float32, any row stride. CUDA:
          device memory, or pinned host memory reached over UVA (zero copy).
    scale finite float.
    out   [T, H*D] bfloat16, any row stride; must not overlap the inputs;
          allocated like ``rows`` when None (numpy: ml_dtypes.bfloat16 if
          installed, else a uint16 array holding the bf16 bits). Returns out.
    Results are bit-identical between backends and residencies.
    """
    ctx = _context(ctx, rows, "rows")
    s = ctx._stream(stream)
    r = _required(ctx, rows, "rows", s)
    t = _required(ctx, table, "table", s)
    if out is None and r.tensor.ndim == 2 and t.tensor.ndim == 2:
        (T, H), D = r.shape, t.shape[1]
        out = allocate(r, "out", (T, H * D), DType.BF16)
    o = _arg(ctx, out, "out", s, writable=True)
    _run(ctx, lib.ingot_ngram_gather, r.ref(), t.ref(), ctypes.c_float(_float("scale", scale)),
         _ref(o), s)
    return out


@_optional_context()
def ngram_embed(cfg, ids, cu_seqlens, context, table, scale=1.0, out=None, stream=None, *,
                ctx=None):
    """Row ids and gather fused (``ingot_ngram_embed``): out as
    :func:`ngram_gather` writes it for the rows :func:`ngram_row_ids`
    computes, without materialising the ids (CUDA: one launch).

        out[t, h*D + d] = bf16(float(table[rows[t, h], d]) * scale)

    ids [T], cu_seqlens [B+1], context [B, n-1] as for ngram_row_ids;
    table [R, D] float8_e4m3fn, bfloat16 or float32 (any row stride; CUDA:
    device or pinned host memory); scale finite; out [T, H*D] bfloat16 (any
    row stride), allocated like ``ids`` when None. Returns out. Keep the
    separate ops to compute ids early and prefetch rows on a side stream.
    """
    config, ctx = _config(cfg), _context(ctx, ids, "ids")
    s = ctx._stream(stream)
    i = _required(ctx, ids, "ids", s)
    c = _required(ctx, cu_seqlens, "cu_seqlens", s)
    x = _required(ctx, context, "context", s)
    t = _required(ctx, table, "table", s)
    if out is None and i.tensor.ndim == 1 and t.tensor.ndim == 2:
        out = allocate(i, "out", (i.shape[0], cfg.num_heads * t.shape[1]), DType.BF16)
    o = _arg(ctx, out, "out", s, writable=True)
    _run(ctx, lib.ingot_ngram_embed, config, i.ref(), c.ref(), x.ref(), t.ref(),
         ctypes.c_float(_float("scale", scale)), _ref(o), s)
    return out
