"""Sharded sampling: one sampling step from VOCABULARY-SHARDED logits, bit for
bit what :func:`ingot.sample` / :func:`ingot.sampling_softmax` give on the
whole logits (docs/sampling.md, "Sharded sampling"; the manual is the
Sharded sampling section of ingot.h).

Shard j holds ``logits[:, v0_j : v0_j + Vr_j]`` of a vocabulary of V. Every
shard runs the same steps on its slice; after each step the shards exchange
their small records (an all-gather over NCCL or any transport; in one
process :func:`sampling_shard_gather`) or an all-reduce (a uint64 sum; in
one process :func:`sampling_shard_sum`), as ``plan.exchange[i]`` says, and
the last exchange feeds a finish that writes the outputs::

    plan = ingot.sampling_shard_get_plan(B, V, v0, Vr, num_shards=S, shard_index=rank,
                                         dtype="bf16", max_top_k=64)
    ws, record = plan.new_workspace(logits), plan.new_record(logits)
    gathered = plan.new_gathered(logits)
    for i in range(plan.num_steps):
        ingot.sampling_shard_step(plan, i, logits, gathered if i else None, ws,
                                  record=record, top_k=top_k, temperature=t, seed=seed)
        n = plan.record_bytes[i]  # the caller's transport:
        if plan.exchange[i] == ingot.SAMPLING_SHARD_EXCHANGE_SUM:
            all_reduce_sum(record[:n].view(uint64), gathered[:n].view(uint64))
        else:
            all_gather(record[:n], gathered[:plan.exchanged_bytes[i]])
    tokens = ingot.sampling_shard_finish_sample(plan, gathered, ws)

The parameters (temperature, top_k, top_p, min_p, seed, position, allowed,
banned, bias_ids, bias_values) are the unsharded call's, identical on every
shard, converted as :func:`ingot.sample` converts them: the bitmask covers
the whole vocabulary, banned and bias lists hold global ids. The same
workspace, untouched in between, goes from step 0 to the finish. Records,
gathered buffers and workspaces are contiguous 1-D arrays (any dtype; uint8
from the ``new_*`` helpers), 16-byte aligned, in the context's memory.

:func:`sample_sharded` and :func:`sampling_softmax_sharded` run all shards
in one process with the local exchange: the way tests and engines without
a collective library use it.
"""

import ctypes
import operator
import sys

from ._core import DType
from ._lib import (  # SAMPLING_SHARD_MAX_STEPS: the most steps (exchanges) of a call
    SAMPLING_MAX_TOP,
    SAMPLING_SHARD_MAX_STEPS,
    ingot_sampling_shard,
    ingot_sampling_shard_plan,
    lib,
)
from ._tensor import allocate as _empty
from ._tensor import context_for as _context
from ._tensor import dtype_arg as _dtype
from ._tensor import int64_arg as _int64
from ._tensor import op_arg as _arg
from ._tensor import optional_context as _optional_context
from ._tensor import query_context as _query_context
from ._tensor import ref as _ref
from ._tensor import required_arg as _required
from ._tensor import run as _run
from .sampling import SampleResult, check_logits_shape, logprobs_struct, softmax_outputs
from .sampling import num_top_arg
from .sampling import _params

SAMPLING_SHARD_MAX_SHARDS = 256
"""The most shards a call may have (S)."""
SAMPLING_SHARD_TOP_FINAL = 1 << 0
"""Plan flag: top-n of the final distribution (as SAMPLING_TOP_FINAL)."""
SAMPLING_SHARD_SOFTMAX = 1 << 1
"""Plan flag: the steps of sampling_softmax (finish: sampling_shard_finish_softmax)."""
SAMPLING_SHARD_SELECT_TOP_K = 1 << 2
"""Plan flag: the radix rounds of a top-k larger than max_top_k."""
SAMPLING_SHARD_SELECT_TOP_P = 1 << 3
"""Plan flag: the radix rounds of a top-p the candidates do not serve."""
SAMPLING_SHARD_EXCHANGE_GATHER = 0
"""plan.exchange[i]: the records of step i are all-gathered (slot order)."""
SAMPLING_SHARD_EXCHANGE_SUM = 1
"""plan.exchange[i]: the records of step i are summed as uint64 words (an all-reduce)."""

_ALIGN = 16


# ---- arguments ----------------------------------------------------------------------------


def _int_arg(name, value, lo, hi):
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: {value!r} is not an integer") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name}: {v}, expected {lo} <= {name} <= {hi}")
    return v


def _buffer(ctx, obj, name, stream, writable):
    """(pointer, bytes, Described) of a contiguous 1-D buffer (any dtype)."""
    d = _required(ctx, obj, name, stream, writable=writable)
    t = d.tensor
    if t.ndim != 1 or (t.shape[0] > 1 and t.stride[0] != 1):
        raise ValueError(f"{name}: pass a contiguous 1-D array (e.g. from the plan's new_* "
                         "helpers)")
    return t.data, t.shape[0] * DType(t.dtype).itemsize, d


def _new_bytes(like, nbytes):
    """A 1-D uint8 buffer of ``nbytes`` (at least 1), 16-byte aligned, allocated
    like ``like`` (an array: torch tensor or numpy array)."""
    torch = sys.modules.get("torch")
    n = max(int(nbytes), 1)
    if torch is not None and isinstance(like, torch.Tensor):
        buf = torch.empty(n + _ALIGN, dtype=torch.uint8, device=like.device)
        off = (-buf.data_ptr()) % _ALIGN
        return buf[off:off + n]
    import numpy

    raw = numpy.empty(n + _ALIGN, dtype=numpy.uint8)
    off = (-raw.ctypes.data) % _ALIGN
    return raw[off:off + n]


class ShardPlan:
    """One shard of a call and what the call costs
    (``ingot_sampling_shard_get_plan``), tuples of ``num_steps``: ``exchange[i]``
    (SAMPLING_SHARD_EXCHANGE_GATHER or _SUM), ``record_bytes[i]`` (this shard's
    record of step i) and ``exchanged_bytes[i]`` (what the exchange leaves on
    every shard: num_shards x record_bytes[i], or record_bytes[i] for a sum);
    every shard of a call gets the same. Also ``max_record_bytes``,
    ``max_exchanged_bytes``, ``workspace_bytes``, ``nccl_workspace_bytes`` (the
    one-call NCCL form's), the shard fields (batch,
    vocab_size, vocab_begin, vocab_count, num_shards, shard_index, max_top_k,
    num_top, flags) and the context."""

    __slots__ = ("ctx", "batch", "dtype", "shard", "num_steps", "exchange", "record_bytes",
                 "exchanged_bytes", "max_record_bytes", "max_exchanged_bytes", "workspace_bytes",
                 "nccl_workspace_bytes")

    def __getattr__(self, name):
        if name in ("vocab_size", "vocab_begin", "vocab_count", "num_shards", "shard_index",
                    "max_top_k", "num_top", "flags"):
            return getattr(self.shard, name)
        raise AttributeError(f"ShardPlan has no attribute {name!r}")

    def new_record(self, like):
        """A record buffer of max_record_bytes, allocated like ``like``."""
        return _new_bytes(like, self.max_record_bytes)

    def new_gathered(self, like):
        """A buffer for any step's exchanged records (max_exchanged_bytes),
        allocated like ``like``."""
        return _new_bytes(like, self.max_exchanged_bytes)

    def new_workspace(self, like):
        """The shard's workspace (workspace_bytes), allocated like ``like``."""
        return _new_bytes(like, self.workspace_bytes)

    def new_nccl_workspace(self, like):
        """The workspace of :func:`sample_sharded_nccl` /
        :func:`sampling_softmax_sharded_nccl` (nccl_workspace_bytes: the
        steps' workspace, one record, one gathered buffer), allocated like
        ``like``."""
        return _new_bytes(like, self.nccl_workspace_bytes)

    def __repr__(self):
        s = self.shard
        return (f"ShardPlan(batch={self.batch}, vocab=[{s.vocab_begin}, "
                f"{s.vocab_begin + s.vocab_count}) of {s.vocab_size}, shard {s.shard_index} of "
                f"{s.num_shards}, max_top_k={s.max_top_k}, num_top={s.num_top}, "
                f"flags=0x{s.flags:x}, num_steps={self.num_steps}, "
                f"exchange={self.exchange}, record_bytes={self.record_bytes}, "
                f"workspace_bytes={self.workspace_bytes})")


@_optional_context()
def sampling_shard_get_plan(batch, vocab_size, vocab_begin, vocab_count, *, num_shards=1,
                            shard_index=0, dtype="f32", max_top_k=0, num_top=0, top_final=False,
                            softmax=False, select_top_k=False, select_top_p=False, device=None,
                            ctx=None):
    """The plan of one shard (``ingot_sampling_shard_get_plan``): this shard
    holds global ids [vocab_begin, vocab_begin + vocab_count) of a vocabulary
    of ``vocab_size``, is slot ``shard_index`` of ``num_shards``, and its
    logits slice is [batch, vocab_count] of ``dtype``. Every shard of a call
    shares max_top_k (the candidates a shard sends: top-k <= max_top_k
    rows need no radix rounds), num_top (top-n columns, of the final
    distribution with ``top_final``), and the flags: ``softmax`` (the steps
    of sampling_softmax), ``select_top_k`` / ``select_top_p`` (the radix
    rounds a row with top_k > max_top_k, or top_p < 1 not served by the
    candidates, needs). Context: ``ctx`` or ``device``. Returns a
    :class:`ShardPlan`; IngotError names a bad field."""
    ctx = _query_context(ctx, device)
    sh = ingot_sampling_shard()
    sh.vocab_size = _int64("vocab_size", vocab_size)
    sh.vocab_begin = _int64("vocab_begin", vocab_begin)
    sh.vocab_count = _int64("vocab_count", vocab_count)
    sh.num_shards = _int_arg("num_shards", num_shards, 1, SAMPLING_SHARD_MAX_SHARDS)
    sh.shard_index = _int_arg("shard_index", shard_index, 0, SAMPLING_SHARD_MAX_SHARDS - 1)
    sh.max_top_k = _int_arg("max_top_k", max_top_k, 0, SAMPLING_MAX_TOP)
    sh.num_top = num_top_arg(num_top)
    sh.flags = ((SAMPLING_SHARD_TOP_FINAL if top_final else 0) |
                (SAMPLING_SHARD_SOFTMAX if softmax else 0) |
                (SAMPLING_SHARD_SELECT_TOP_K if select_top_k else 0) |
                (SAMPLING_SHARD_SELECT_TOP_P if select_top_p else 0))
    dt = _dtype("dtype", dtype)
    plan = ingot_sampling_shard_plan()
    _run(ctx, lib.ingot_sampling_shard_get_plan, ctypes.byref(sh), _int64("batch", batch),
         int(dt), ctypes.byref(plan), names={"logits_dtype": "dtype"})
    p = ShardPlan()
    p.ctx, p.batch, p.dtype, p.shard = ctx, int(batch), dt, sh
    p.num_steps = plan.num_steps
    steps = range(plan.num_steps)
    p.exchange = tuple(plan.exchange[i] for i in steps)
    p.record_bytes = tuple(plan.record_bytes[i] for i in steps)
    p.exchanged_bytes = tuple(plan.exchanged_bytes[i] for i in steps)
    p.max_record_bytes = plan.max_record_bytes
    p.max_exchanged_bytes = plan.max_exchanged_bytes
    p.workspace_bytes = plan.workspace_bytes
    nccl_bytes = ctypes.c_size_t(0)
    _run(ctx, lib.ingot_sampling_sharded_nccl_workspace_size, ctypes.byref(sh),
         _int64("batch", batch), int(dt), ctypes.byref(nccl_bytes),
         names={"logits_dtype": "dtype"})
    p.nccl_workspace_bytes = nccl_bytes.value
    return p


def _plan_arg(plan):
    if not isinstance(plan, ShardPlan):
        raise TypeError(f"plan: {type(plan).__name__}, expected an ingot.ShardPlan "
                        "(from ingot.sampling_shard_get_plan)")
    return plan


def _gathered_arg(plan, gathered, stream, keep):
    """(pointer, bytes) of ``gathered`` (None: NULL, 0)."""
    if gathered is None:
        return None, 0
    ptr, nbytes, d = _buffer(plan.ctx, gathered, "gathered", stream, False)
    keep.append(d)
    return ptr, nbytes


def _slice_params(plan, logits, stream, keep, values, allowed, banned, bias_ids, bias_values):
    ld = _required(plan.ctx, logits, "logits", stream)
    check_logits_shape(ld.shape)
    keep.append(ld)
    return ld, _params(plan.ctx, ld, stream, keep, values, allowed, banned, bias_ids,
                       bias_values)


# ---- steps and finishes ---------------------------------------------------------------------


def sampling_shard_step(plan, step, logits, gathered, workspace, *, temperature=None, top_k=None,
                        top_p=None, min_p=None, seed=None, position=None, allowed=None,
                        banned=None, bias_ids=None, bias_values=None, record=None, stream=None):
    """Step ``step`` of one shard (``ingot_sampling_shard_step``).

    logits     [B, Vr] this shard's slice (float32 / bfloat16 / float16, any row
               stride); column j is global token vocab_begin + j.
    gathered   None at step 0; else what the exchange of step - 1 left
               (exchanged_bytes[step - 1] bytes).
    workspace  plan.workspace_bytes, the same from step 0 to the finish.
    record     written: this shard's record (>= record_bytes[step] bytes;
               allocated with plan.new_record when None).
    The parameters are the unsharded call's (see :func:`ingot.sample`).
    Returns ``record``; exchange its first record_bytes[step] bytes."""
    plan = _plan_arg(plan)
    step = _int_arg("step", step, -(1 << 31), (1 << 31) - 1)
    ctx = plan.ctx
    s = ctx._stream(stream)
    keep = []
    ld, params = _slice_params(plan, logits, s, keep, dict(
        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
        position=position), allowed, banned, bias_ids, bias_values)
    g, g_bytes = _gathered_arg(plan, gathered, s, keep)
    if record is None:
        record = plan.new_record(ld.obj)
    r, r_bytes, rd = _buffer(ctx, record, "record", s, True)
    w, w_bytes, wd = _buffer(ctx, workspace, "workspace", s, True)
    _run(ctx, lib.ingot_sampling_shard_step, step, ld.ref(), ctypes.byref(params),
         ctypes.byref(plan.shard), g, g_bytes, r, r_bytes, w, w_bytes, s)
    del keep, rd, wd
    return record


class _SampleOutputs:
    """The outputs of a finish of :func:`ingot.sample` (those not given are
    allocated like ``like``, named ``like_name`` in the error when there is
    nothing to allocate like), their descriptors (td, sd) and the logprobs
    struct (lp); result() is what the caller gets back."""

    def __init__(self, plan, s, keep, like, like_name, return_status, logprobs, raw_logprobs,
                 tokens, row_status, token_logprob, token_raw_logprob, top_ids, top_logprobs):
        ctx, batch, n = plan.ctx, plan.batch, plan.num_top

        def new(name, shape, dtype):
            if like is None:
                raise TypeError(f"{name}: pass it (or {like_name}, to allocate it like)")
            return _empty(like, name, shape, dtype)

        if tokens is None:
            tokens = new("tokens", (batch,), DType.I32)
        if row_status is None and return_status:
            row_status = new("row_status", (batch,), DType.I32)
        if token_logprob is None and logprobs:
            token_logprob = new("token_logprob", (batch,), DType.F32)
        if token_raw_logprob is None and raw_logprobs:
            token_raw_logprob = new("token_raw_logprob", (batch,), DType.F32)
        if n > 0 and top_ids is None and top_logprobs is None:
            top_ids = new("top_ids", (batch, n), DType.I32)
            top_logprobs = new("top_logprobs", (batch, n), DType.F32)
        self.tokens, self.row_status = tokens, row_status
        self.td = _arg(ctx, tokens, "tokens", s, writable=True)
        self.sd = _arg(ctx, row_status, "row_status", s, writable=True)
        self.extra = (token_logprob, token_raw_logprob, top_ids, top_logprobs)
        self.lp = logprobs_struct(ctx, s, keep, plan.flags & SAMPLING_SHARD_TOP_FINAL, self.extra)

    def result(self):
        if self.row_status is None and all(x is None for x in self.extra):
            return self.tokens
        return SampleResult(self.tokens, self.row_status, *self.extra)


def sampling_shard_finish_sample(plan, gathered, workspace, *, return_status=False,
                                 logprobs=False, raw_logprobs=False, tokens=None, row_status=None,
                                 token_logprob=None, token_raw_logprob=None, top_ids=None,
                                 top_logprobs=None, stream=None):
    """The outputs of :func:`ingot.sample` for the whole logits, from the
    exchanged records of the last step (``ingot_sampling_shard_finish_sample``;
    a plan without ``softmax``). Outputs as for :func:`ingot.sample` (top-n:
    plan.num_top columns, of the final distribution when the plan has
    ``top_final``), allocated like ``gathered`` when not given. Every shard
    may call it: all get the same outputs. Returns tokens, or a
    :class:`ingot.SampleResult` when anything else is asked for."""
    plan = _plan_arg(plan)
    ctx = plan.ctx
    s = ctx._stream(stream)
    keep = []
    g, g_bytes = _gathered_arg(plan, gathered, s, keep)
    out = _SampleOutputs(plan, s, keep, keep[0] if keep else None, "gathered", return_status,
                         logprobs, raw_logprobs, tokens, row_status, token_logprob,
                         token_raw_logprob, top_ids, top_logprobs)
    w, w_bytes, wd = _buffer(ctx, workspace, "workspace", s, True)
    _run(ctx, lib.ingot_sampling_shard_finish_sample, ctypes.byref(plan.shard), g, g_bytes,
         _ref(out.td), _ref(out.sd), ctypes.byref(out.lp), w, w_bytes, s)
    del keep, wd
    return out.result()


def sampling_shard_finish_softmax(plan, logits, gathered, workspace, *, temperature=None,
                                  top_k=None, top_p=None, min_p=None, allowed=None, banned=None,
                                  bias_ids=None, bias_values=None, return_status=False,
                                  probs=None, row_status=None, stream=None):
    """probs [B, Vr] float32 <- this shard's columns of the probs
    :func:`ingot.sampling_softmax` gives for the whole logits on the CPU, bit for bit
    (``ingot_sampling_shard_finish_softmax``; a plan with ``softmax``). The
    slice and parameters are the steps' own. Returns probs, or (probs,
    row_status) with ``return_status`` (or a row_status passed)."""
    plan = _plan_arg(plan)
    ctx = plan.ctx
    s = ctx._stream(stream)
    keep = []
    ld, params = _slice_params(plan, logits, s, keep, dict(
        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p), allowed, banned,
        bias_ids, bias_values)
    g, g_bytes = _gathered_arg(plan, gathered, s, keep)
    probs, row_status, pd, sd = softmax_outputs(ctx, s, ld, probs, row_status, return_status)
    w, w_bytes, wd = _buffer(ctx, workspace, "workspace", s, True)
    _run(ctx, lib.ingot_sampling_shard_finish_softmax, ld.ref(), ctypes.byref(params),
         ctypes.byref(plan.shard), g, g_bytes, pd.ref(), _ref(sd), w, w_bytes, s)
    del keep, wd
    return probs if row_status is None else (probs, row_status)


def sampling_shard_gather(plan, step, records, gathered=None, *, stream=None):
    """The local exchange of an all-gather step (``ingot_sampling_shard_gather``):
    ``gathered`` <- the first record_bytes[step] bytes of records[0], ...,
    records[S - 1] back to back, as an all-gather leaves them, for shards in
    one process. ``records``: one buffer per shard, in shard_index order.
    Returns ``gathered`` (allocated like records[0] when None)."""
    return _exchange(plan, step, records, gathered, stream, lib.ingot_sampling_shard_gather,
                     "gathered")


def sampling_shard_sum(plan, step, records, summed=None, *, stream=None):
    """The local exchange of a sum step (``ingot_sampling_shard_sum``):
    ``summed`` <- the first record_bytes[step] bytes of records[0] + ... +
    records[S - 1] as uint64 words, as an all-reduce leaves them. Returns
    ``summed`` (allocated like records[0] when None)."""
    return _exchange(plan, step, records, summed, stream, lib.ingot_sampling_shard_sum, "summed")


def sampling_shard_exchange(plan, step, records, out=None, *, stream=None):
    """The local exchange the plan gives ``step``: :func:`sampling_shard_sum`
    for a sum step, else :func:`sampling_shard_gather`."""
    plan = _plan_arg(plan)
    step = _int_arg("step", step, 0, plan.num_steps - 1)
    fn = (sampling_shard_sum if plan.exchange[step] == SAMPLING_SHARD_EXCHANGE_SUM
          else sampling_shard_gather)
    return fn(plan, step, records, out, stream=stream)


def _exchange(plan, step, records, out, stream, fn, out_name):
    plan = _plan_arg(plan)
    step = _int_arg("step", step, 0, plan.num_steps - 1)
    ctx = plan.ctx
    s = ctx._stream(stream)
    records = list(records)
    if len(records) != plan.num_shards:
        raise ValueError(f"records: {len(records)} buffers, the plan has num_shards = "
                         f"{plan.num_shards}")
    keep, ptrs = [], (ctypes.c_void_p * len(records))()
    for j, rec in enumerate(records):
        ptr, _, d = _buffer(ctx, rec, f"records[{j}]", s, False)
        keep.append(d)
        ptrs[j] = ptr
    if out is None:
        out = plan.new_gathered(keep[0].obj)
    g, g_bytes, gd = _buffer(ctx, out, out_name, s, True)
    _run(ctx, fn, plan.num_shards, ptrs, plan.record_bytes[step], g, g_bytes, s)
    del keep, gd
    return out


# ---- all shards in one process ----------------------------------------------------------------


def _host_values(value, batch, default):
    """A per-row parameter as a list of Python numbers (host copy), for the
    plan's selection flags."""
    if value is None:
        return [default] * batch
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu()
    import numpy

    a = numpy.asarray(value, dtype=numpy.float64)
    return list(numpy.broadcast_to(a, (batch,)) if a.ndim == 0 else a.reshape(-1))


def select_flags(batch, vocab_size, max_top_k, *, temperature=None, top_k=None, top_p=None):
    """(select_top_k, select_top_p): the radix rounds a plan of ``max_top_k``
    needs for these rows (the rule of the Sharded sampling section: a row
    not served by the candidates needs select_top_k for 0 < top_k < V and
    select_top_p for top_p < 1; greedy rows need nothing). Reads the values
    on the host."""
    t = _host_values(temperature, batch, 1.0)
    k = _host_values(top_k, batch, 0)
    p = _host_values(top_p, batch, 1.0)
    need_k = need_p = False
    for r in range(batch):
        if t[r] == 0.0:
            continue
        if max_top_k > 0 and (vocab_size <= max_top_k or 1 <= k[r] <= max_top_k):
            continue
        need_k |= 0 < k[r] < vocab_size
        need_p |= p[r] < 1.0
    return need_k, need_p


def _shard_slices(slices, vocab_begins):
    slices = list(slices)
    begins = [_int64(f"vocab_begins[{j}]", v) for j, v in enumerate(vocab_begins)]
    if not slices:
        raise ValueError("slices: empty, expected one [B, Vr] logits slice per shard")
    if len(begins) != len(slices):
        raise ValueError(f"vocab_begins: {len(begins)} entries for {len(slices)} slices")
    for j, x in enumerate(slices):
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != 2:
            raise ValueError(f"slices[{j}]: expected a 2-D [B, Vr] array, got "
                             f"{type(x).__name__}{'' if shape is None else tuple(shape)}")
        if shape[0] != slices[0].shape[0]:
            raise ValueError(f"slices[{j}]: {shape[0]} rows, slices[0] has "
                             f"{slices[0].shape[0]}")
    return slices, begins


def _run_shards(slices, begins, ctx, stream, max_top_k, num_top, top_final, softmax, params,
                select):
    """Plans, workspaces and the steps of every shard with the local
    exchange; returns (plans, workspaces, the last gathered buffer)."""
    S = len(slices)
    batch = slices[0].shape[0]
    V = sum(int(x.shape[1]) for x in slices)
    if select is None:
        select = select_flags(batch, V, max_top_k, temperature=params.get("temperature"),
                              top_k=params.get("top_k"), top_p=params.get("top_p"))
    plans = []
    for j, x in enumerate(slices):
        dtype = _required(ctx, x, f"slices[{j}]", ctx._stream(stream)).tensor.dtype
        plans.append(sampling_shard_get_plan(
            batch, V, begins[j], int(x.shape[1]), num_shards=S, shard_index=j, dtype=dtype,
            max_top_k=max_top_k, num_top=num_top, top_final=top_final, softmax=softmax,
            select_top_k=select[0], select_top_p=select[1], ctx=ctx))
    first = plans[0]
    like = slices[0]
    spaces = [p.new_workspace(like) for p in plans]
    records = [first.new_record(like) for _ in plans]
    gathered = [first.new_gathered(like), first.new_gathered(like)]
    for i in range(first.num_steps):
        prev = gathered[(i + 1) % 2] if i else None
        for j in range(S):
            sampling_shard_step(plans[j], i, slices[j], prev, spaces[j], record=records[j],
                                stream=stream, **params)
        sampling_shard_exchange(first, i, records, gathered[i % 2], stream=stream)
    return plans, spaces, gathered[(first.num_steps - 1) % 2]


_SAMPLE_PARAMS = ("temperature", "top_k", "top_p", "min_p", "seed", "position", "allowed",
                  "banned", "bias_ids", "bias_values")


@_optional_context()
def sample_sharded(slices, vocab_begins, top_k=None, top_p=None, *, temperature=None, min_p=None,
                   seed=None, position=None, allowed=None, banned=None, bias_ids=None,
                   bias_values=None, max_top_k=64, select=None, return_status=False,
                   logprobs=False, raw_logprobs=False, num_top=0, top_final=False, ctx=None,
                   stream=None):
    """:func:`ingot.sample` of the logits whose columns [vocab_begins[j],
    vocab_begins[j] + Vr_j) are ``slices[j]`` ([B, Vr_j] each; the ranges
    tile [0, V)), run shard by shard with the local exchange, in one
    process. Bit for bit the unsharded call's outputs on the CPU (tokens,
    row_status, both log-probabilities, top-n). ``max_top_k``: the candidates a shard
    sends; ``select``: (select_top_k, select_top_p) of the plan, None to
    read them from the parameters on the host (:func:`select_flags`). Other
    arguments and the result as for :func:`ingot.sample`."""
    slices, begins = _shard_slices(slices, vocab_begins)
    ctx = _context(ctx, slices[0], "slices[0]")
    n = num_top_arg(num_top)
    params = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                  position=position, allowed=allowed, banned=banned, bias_ids=bias_ids,
                  bias_values=bias_values)
    plans, spaces, gathered = _run_shards(slices, begins, ctx, stream, max_top_k, n, top_final,
                                          False, params, select)
    return sampling_shard_finish_sample(plans[0], gathered, spaces[0],
                                        return_status=return_status, logprobs=logprobs,
                                        raw_logprobs=raw_logprobs, stream=stream)


@_optional_context()
def sampling_softmax_sharded(slices, vocab_begins, *, temperature=None, top_k=None, top_p=None,
                             min_p=None, allowed=None, banned=None, bias_ids=None,
                             bias_values=None, max_top_k=64, select=None, return_status=False,
                             ctx=None, stream=None):
    """:func:`ingot.sampling_softmax` of sharded logits (as for
    :func:`sample_sharded`): returns the list of each shard's probs
    [B, Vr_j] (the unsharded CPU probs' columns, bit for bit), or (that list,
    row_status) with ``return_status``."""
    slices, begins = _shard_slices(slices, vocab_begins)
    ctx = _context(ctx, slices[0], "slices[0]")
    params = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                  allowed=allowed, banned=banned, bias_ids=bias_ids, bias_values=bias_values)
    plans, spaces, gathered = _run_shards(slices, begins, ctx, stream, max_top_k, 0, False, True,
                                          params, select)
    out, status = [], None
    for j, x in enumerate(slices):
        res = sampling_shard_finish_softmax(plans[j], x, gathered, spaces[j],
                                            return_status=return_status and j == 0,
                                            stream=stream, **params)
        if return_status and j == 0:
            res, status = res
        out.append(res)
    return (out, status) if return_status else out


__all__ = [
    "SAMPLING_SHARD_EXCHANGE_GATHER", "SAMPLING_SHARD_EXCHANGE_SUM",
    "SAMPLING_SHARD_MAX_SHARDS", "SAMPLING_SHARD_MAX_STEPS", "SAMPLING_SHARD_SELECT_TOP_K",
    "SAMPLING_SHARD_SELECT_TOP_P", "SAMPLING_SHARD_SOFTMAX", "SAMPLING_SHARD_TOP_FINAL",
    "ShardPlan", "ingot_sampling_shard", "ingot_sampling_shard_plan", "sample_sharded",
    "sampling_shard_exchange", "sampling_shard_finish_sample", "sampling_shard_finish_softmax",
    "sampling_shard_gather", "sampling_shard_get_plan", "sampling_shard_step",
    "sampling_shard_sum", "sampling_softmax_sharded", "select_flags",
]


# ---- the whole call over NCCL ----------------------------------------------------------------


def _comm_arg(comm):
    """The ncclComm_t address of ``comm``: an int, a ctypes.c_void_p, or an
    object whose ``comm`` attribute is one (vLLM's PyNcclCommunicator)."""
    if comm is not None and not isinstance(comm, (int, ctypes.c_void_p)) and hasattr(comm, "comm"):
        comm = comm.comm
    if comm is None:
        return None
    if isinstance(comm, ctypes.c_void_p):
        return comm.value
    try:
        return operator.index(comm)
    except TypeError:
        raise TypeError(f"comm: {type(comm).__name__}, expected an ncclComm_t address (an int, "
                        "a ctypes.c_void_p, or an object with a .comm holding one)") from None


def _nccl_workspace(plan, ld, workspace, s):
    """(pointer, bytes, Described) of the NCCL form's workspace, allocated
    like the logits ``ld`` when None."""
    if workspace is None:
        workspace = plan.new_nccl_workspace(ld.obj)
    return _buffer(plan.ctx, workspace, "workspace", s, True)


def sampling_sharded_nccl_verify(comm, plan, *, stream=None):
    """The setup check of a sharded call over NCCL
    (``ingot_sampling_sharded_nccl_verify``), made by every rank with its
    ``plan``: the ranks' call shapes are all-gathered and compared; every rank
    raises IngotError naming the rank and what differs (batch, vocabulary,
    max_top_k, num_top, flags, ranges that overlap or leave a gap; a rank
    whose own arguments are wrong gets their error, the others its rank).
    Waits for the stream: call it at setup and whenever the batch or the
    split changes, not inside a CUDA-graph capture."""
    plan = _plan_arg(plan)
    ctx = plan.ctx
    c = _comm_arg(comm)
    _run(ctx, lib.ingot_sampling_sharded_nccl_verify, c, ctypes.byref(plan.shard),
         _int64("batch", plan.batch), int(plan.dtype), ctx._stream(stream),
         names={"logits_dtype": "dtype"})


def sample_sharded_nccl(comm, plan, logits, top_k=None, top_p=None, *, temperature=None,
                        min_p=None, seed=None, position=None, allowed=None, banned=None,
                        bias_ids=None, bias_values=None, workspace=None, return_status=False,
                        logprobs=False, raw_logprobs=False, tokens=None, row_status=None,
                        token_logprob=None, token_raw_logprob=None, top_ids=None,
                        top_logprobs=None, stream=None):
    """:func:`ingot.sample` of vocabulary-sharded logits on one rank of an
    NCCL communicator, in one call (``ingot_sample_sharded_nccl``): every
    step, the plan's collective after it and the finish, on ``stream``, no
    host synchronisation (CUDA-graph capturable). ``comm``: the ncclComm_t
    (an address, a ctypes.c_void_p, or an object with ``.comm``, e.g. vLLM's
    PyNcclCommunicator); its rank count and this rank must be the plan's
    num_shards and shard_index. ``plan``: this rank's
    :func:`sampling_shard_get_plan` on a CUDA context (not ``softmax``);
    ``logits`` its [B, Vr] slice; the parameters the unsharded call's, the
    same on every rank. ``workspace``: plan.nccl_workspace_bytes
    (allocated like ``logits`` when None). Outputs and result as for
    :func:`sampling_shard_finish_sample`, on every rank."""
    plan = _plan_arg(plan)
    ctx = plan.ctx
    c = _comm_arg(comm)
    s = ctx._stream(stream)
    keep = []
    ld, params = _slice_params(plan, logits, s, keep, dict(
        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
        position=position), allowed, banned, bias_ids, bias_values)
    out = _SampleOutputs(plan, s, keep, ld, "logits", return_status, logprobs, raw_logprobs,
                         tokens, row_status, token_logprob, token_raw_logprob, top_ids,
                         top_logprobs)
    w, w_bytes, wd = _nccl_workspace(plan, ld, workspace, s)
    _run(ctx, lib.ingot_sample_sharded_nccl, c, ld.ref(), ctypes.byref(params),
         ctypes.byref(plan.shard), _ref(out.td), _ref(out.sd), ctypes.byref(out.lp), w, w_bytes,
         s)
    del keep, wd
    return out.result()


def sampling_softmax_sharded_nccl(comm, plan, logits, *, temperature=None, top_k=None,
                                  top_p=None, min_p=None, allowed=None, banned=None,
                                  bias_ids=None, bias_values=None, workspace=None,
                                  return_status=False, probs=None, row_status=None, stream=None):
    """:func:`ingot.sampling_softmax` of vocabulary-sharded logits on one rank
    of an NCCL communicator (``ingot_sampling_softmax_sharded_nccl``; a plan
    with ``softmax``): probs [B, Vr] float32 <- this rank's columns of the
    unsharded CPU probs, bit for bit. ``comm``, ``plan``, ``logits`` and
    ``workspace`` as for :func:`sample_sharded_nccl`. Returns probs, or
    (probs, row_status) with ``return_status`` (or a row_status passed)."""
    plan = _plan_arg(plan)
    ctx = plan.ctx
    c = _comm_arg(comm)
    s = ctx._stream(stream)
    keep = []
    ld, params = _slice_params(plan, logits, s, keep, dict(
        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p), allowed, banned,
        bias_ids, bias_values)
    probs, row_status, pd, sd = softmax_outputs(ctx, s, ld, probs, row_status, return_status)
    w, w_bytes, wd = _nccl_workspace(plan, ld, workspace, s)
    _run(ctx, lib.ingot_sampling_softmax_sharded_nccl, c, ld.ref(), ctypes.byref(params),
         ctypes.byref(plan.shard), pd.ref(), _ref(sd), w, w_bytes, s)
    del keep, wd
    return probs if row_status is None else (probs, row_status)
