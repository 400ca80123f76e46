"""ingot's ops as PyTorch custom ops (namespace "ingot"), for torch.compile
and CUDA graphs.

    import ingot
    tokens = ingot.torch.sample(logits, top_k, top_p, temperature=t, seed=seeds)
    step = torch.compile(decode_step, fullgraph=True)  # no graph break at ingot's ops

Each function here calls ``torch.ops.ingot.<name>``, registered with
torch.library.custom_op and a fake implementation (the outputs' shapes and
dtypes, no data read), and takes the arguments of the ingot op of the same
name, minus ``ctx``, ``stream``, ``out``-style outputs and ``workspace``:
torch tensors only, outputs and workspaces are new tensors (torch.empty on
the current stream), the context is the default one of the tensors' device.
Ops that write an input say so (``mutates_args``): ngram_commit_context
(context) and nvfp4_quantize (nonfinite_count).

CUDA graphs: the ops launch on the current stream, allocate only through
torch's allocator and never wait for the device, so they can be captured
in a torch.cuda.CUDAGraph (after a warm-up call, as torch recommends, which
also creates the device's ingot context). Parameters follow the conversion
rule of ingot.sampling (numbers, lists and other dtypes become new tensors,
here or inside torch.compile); while a graph is being captured every
parameter must already be a tensor of its exact dtype on the device (else
TypeError naming it). This module imports torch: ``import ingot`` does not.
"""

import functools
from typing import List, Optional, Tuple

import torch

from . import ngram as _ngram
from . import nvfp4 as _nvfp4
from . import sampling as _sampling
from ._core import DType
from ._tensor import float_arg as _float
from ._tensor import refuse_new_tensor_while_capturing as _refuse_while_capturing
from ._tensor import reinterpret
from .nvfp4 import NVFP4Matrix
from .sampling import SampleResult

Tensor = torch.Tensor

__all__ = [
    "ngram_commit_context", "ngram_embed", "ngram_gather", "ngram_row_ids", "nvfp4_dequantize",
    "nvfp4_gemm", "nvfp4_geglu", "nvfp4_global_scale", "nvfp4_mlp", "nvfp4_quantize", "sample",
    "sampling_softmax",
]


def _require_ndim(t, ndim, name, expected):
    """ValueError naming ``name`` unless the tensor ``t`` has ``ndim`` dimensions."""
    if t.dim() != ndim:
        raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {expected}")


# ---- n-gram embeddings -----------------------------------------------------------------------

def _config_fields(cfg):
    """The fields of an NgramConfig as op arguments (plain ints and lists)."""
    if not isinstance(cfg, _ngram.NgramConfig):
        raise TypeError(f"cfg: {type(cfg).__name__}, expected ingot.NgramConfig")
    n, hpn, boundary, multipliers, primes, offsets = cfg._fields
    return n, hpn, boundary, list(multipliers), list(primes), list(offsets)


@functools.lru_cache(maxsize=64)
def _config(n, hpn, boundary, multipliers, primes, offsets):
    return _ngram.NgramConfig(n, hpn, boundary, multipliers, primes, offsets)


def _config_of(n, hpn, boundary, multipliers, primes, offsets):
    return _config(n, hpn, boundary, tuple(multipliers), tuple(primes), tuple(offsets))


def _rows_like(ids, primes):
    _require_ndim(ids, 1, "ids", "[T]")
    return ids.new_empty((ids.shape[0], len(primes)), dtype=torch.int64)


def _embedding_like(tokens, heads, table):
    _require_ndim(table, 2, "table", "[R, D]")
    return tokens.new_empty((tokens.shape[0], heads * table.shape[1]), dtype=torch.bfloat16)


@torch.library.custom_op("ingot::ngram_row_ids", mutates_args=())
def _ngram_row_ids(ids: Tensor, cu_seqlens: Tensor, context: Tensor, n: int,
                   heads_per_order: int, boundary_token: int, multipliers: List[int],
                   primes: List[int], offsets: List[int]) -> Tensor:
    cfg = _config_of(n, heads_per_order, boundary_token, multipliers, primes, offsets)
    return _ngram.ngram_row_ids(cfg, ids, cu_seqlens, context, out=_rows_like(ids, primes))


@_ngram_row_ids.register_fake
def _(ids, cu_seqlens, context, n, heads_per_order, boundary_token, multipliers, primes,
      offsets):
    return _rows_like(ids, primes)


def ngram_row_ids(cfg, ids, cu_seqlens, context):
    """rows [T, H] int64 of a ragged batch: ingot.ngram_row_ids."""
    return torch.ops.ingot.ngram_row_ids(ids, cu_seqlens, context, *_config_fields(cfg))


@torch.library.custom_op("ingot::ngram_gather", mutates_args=())
def _ngram_gather(rows: Tensor, table: Tensor, scale: float) -> Tensor:
    _require_ndim(rows, 2, "rows", "[T, H]")
    out = _embedding_like(rows, rows.shape[1], table)
    return _ngram.ngram_gather(rows, table, scale, out=out)


@_ngram_gather.register_fake
def _(rows, table, scale):
    _require_ndim(rows, 2, "rows", "[T, H]")
    return _embedding_like(rows, rows.shape[1], table)


def ngram_gather(rows, table, scale=1.0):
    """out [T, H*D] bfloat16 of table rows: ingot.ngram_gather."""
    return torch.ops.ingot.ngram_gather(rows, table, float(scale))


@torch.library.custom_op("ingot::ngram_embed", mutates_args=())
def _ngram_embed(ids: Tensor, cu_seqlens: Tensor, context: Tensor, table: Tensor, scale: float,
                 n: int, heads_per_order: int, boundary_token: int, multipliers: List[int],
                 primes: List[int], offsets: List[int]) -> Tensor:
    cfg = _config_of(n, heads_per_order, boundary_token, multipliers, primes, offsets)
    _require_ndim(ids, 1, "ids", "[T]")
    out = _embedding_like(ids, len(primes), table)
    return _ngram.ngram_embed(cfg, ids, cu_seqlens, context, table, scale, out=out)


@_ngram_embed.register_fake
def _(ids, cu_seqlens, context, table, scale, n, heads_per_order, boundary_token, multipliers,
      primes, offsets):
    _require_ndim(ids, 1, "ids", "[T]")
    return _embedding_like(ids, len(primes), table)


def ngram_embed(cfg, ids, cu_seqlens, context, table, scale=1.0):
    """Row ids and gather fused, out [T, H*D] bfloat16: ingot.ngram_embed."""
    return torch.ops.ingot.ngram_embed(ids, cu_seqlens, context, table, float(scale),
                                       *_config_fields(cfg))


@torch.library.custom_op("ingot::ngram_commit_context", mutates_args=("context",))
def _ngram_commit_context(ids: Tensor, cu_seqlens: Tensor, context: Tensor, n: int,
                          heads_per_order: int, boundary_token: int, multipliers: List[int],
                          primes: List[int], offsets: List[int]) -> None:
    cfg = _config_of(n, heads_per_order, boundary_token, multipliers, primes, offsets)
    _ngram.ngram_commit_context(cfg, ids, cu_seqlens, context)


@_ngram_commit_context.register_fake
def _(ids, cu_seqlens, context, n, heads_per_order, boundary_token, multipliers, primes,
      offsets):
    return None


def ngram_commit_context(cfg, ids, cu_seqlens, context):
    """Rolls each request's context forward, in place (``context`` is
    written): ingot.ngram_commit_context. Returns None."""
    torch.ops.ingot.ngram_commit_context(ids, cu_seqlens, context, *_config_fields(cfg))


# ---- sampling --------------------------------------------------------------------------------


def _sample_outputs(logits, return_status, logprobs, raw_logprobs, num_top):
    """(tokens, row_status, token_logprob, token_raw_logprob, top_ids,
    top_logprobs) for logits [B, V]; those not asked for have no rows."""
    _sampling.check_logits_shape(logits.shape)
    _sampling.num_top_arg(num_top)
    batch = logits.shape[0]

    def rows(asked):
        return batch if asked else 0

    return (logits.new_empty((batch,), dtype=torch.int32),
            logits.new_empty((rows(return_status),), dtype=torch.int32),
            logits.new_empty((rows(logprobs),), dtype=torch.float32),
            logits.new_empty((rows(raw_logprobs),), dtype=torch.float32),
            logits.new_empty((rows(num_top), num_top), dtype=torch.int32),
            logits.new_empty((rows(num_top), num_top), dtype=torch.float32))


@torch.library.custom_op("ingot::sample", mutates_args=())
def _sample(logits: Tensor, temperature: Optional[Tensor], top_k: Optional[Tensor],
            top_p: Optional[Tensor], min_p: Optional[Tensor], seed: Optional[Tensor],
            position: Optional[Tensor], allowed: Optional[Tensor], banned: Optional[Tensor],
            bias_ids: Optional[Tensor], bias_values: Optional[Tensor], return_status: bool,
            logprobs: bool, raw_logprobs: bool, num_top: int,
            top_final: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    outs = _sample_outputs(logits, return_status, logprobs, raw_logprobs, num_top)
    asked = (True, return_status, logprobs, raw_logprobs, num_top > 0, num_top > 0)
    tokens, row_status, token_logprob, token_raw_logprob, top_ids, top_logprobs = (
        out if wanted else None for out, wanted in zip(outs, asked))
    _sampling.sample(logits, top_k, top_p, temperature=temperature, min_p=min_p, seed=seed,
                     position=position, allowed=allowed, banned=banned, bias_ids=bias_ids,
                     bias_values=bias_values, top_final=top_final, tokens=tokens,
                     row_status=row_status, token_logprob=token_logprob,
                     token_raw_logprob=token_raw_logprob, top_ids=top_ids,
                     top_logprobs=top_logprobs)
    return outs


@_sample.register_fake
def _(logits, temperature, top_k, top_p, min_p, seed, position, allowed, banned, bias_ids,
      bias_values, return_status, logprobs, raw_logprobs, num_top, top_final):
    return _sample_outputs(logits, return_status, logprobs, raw_logprobs, num_top)


def _row_params(logits, **values):
    """The per-row parameters by the conversion rule: tensors of their
    exact dtypes on the logits' device (None stays None)."""
    batch = (logits.shape[0],)
    kinds = dict(_sampling._ROW_PARAMS)
    return [None if value is None
            else _sampling.torch_param(logits, name, value, kinds[name], batch)
            for name, value in values.items()]


def _lists(logits, banned, bias_ids, bias_values):
    """banned, bias_ids, bias_values by the conversion rule."""
    return (None if banned is None else _sampling.torch_pairs(logits, "banned", banned),
            None if bias_ids is None else _sampling.torch_pairs(logits, "bias_ids", bias_ids),
            None if bias_values is None else _sampling.torch_param(logits, "bias_values",
                                                                  bias_values, "f32", None))


def sample(logits, top_k=None, top_p=None, *, temperature=None, min_p=None, seed=None,
           position=None, allowed=None, banned=None, bias_ids=None, bias_values=None,
           return_status=False, logprobs=False, raw_logprobs=False, num_top=0, top_final=False):
    """One sampling step: ingot.sample (the same arguments and results, the
    same tokens), as the custom op ingot::sample. Returns tokens int32 [B],
    or a SampleResult when more is asked for."""
    _sampling.check_logits_shape(logits.shape)
    num_top = _sampling.num_top_arg(num_top)
    temperature, top_k, top_p, min_p, seed, position = _row_params(
        logits, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
        position=position)
    banned, bias_ids, bias_values = _lists(logits, banned, bias_ids, bias_values)
    asked = (bool(return_status), bool(logprobs), bool(raw_logprobs), num_top > 0, num_top > 0)
    outs = torch.ops.ingot.sample(logits, temperature, top_k, top_p, min_p, seed, position,
                                  allowed, banned, bias_ids, bias_values, *asked[:3], num_top,
                                  bool(top_final))
    if not any(asked):
        return outs[0]
    return SampleResult(outs[0], *(out if wanted else None for out, wanted in zip(outs[1:], asked)))


def _softmax_outputs(logits, return_status):
    _sampling.check_logits_shape(logits.shape)
    return (logits.new_empty(logits.shape, dtype=torch.float32),
            logits.new_empty((logits.shape[0] if return_status else 0,), dtype=torch.int32))


@torch.library.custom_op("ingot::sampling_softmax", mutates_args=())
def _sampling_softmax(logits: Tensor, temperature: Optional[Tensor], top_k: Optional[Tensor],
                      top_p: Optional[Tensor], min_p: Optional[Tensor], allowed: Optional[Tensor],
                      banned: Optional[Tensor], bias_ids: Optional[Tensor],
                      bias_values: Optional[Tensor],
                      return_status: bool) -> Tuple[Tensor, Tensor]:
    probs, row_status = _softmax_outputs(logits, return_status)
    _sampling.sampling_softmax(logits, temperature=temperature, top_k=top_k, top_p=top_p,
                               min_p=min_p, allowed=allowed, banned=banned, bias_ids=bias_ids,
                               bias_values=bias_values, probs=probs,
                               row_status=row_status if return_status else None)
    return probs, row_status


@_sampling_softmax.register_fake
def _(logits, temperature, top_k, top_p, min_p, allowed, banned, bias_ids, bias_values,
      return_status):
    return _softmax_outputs(logits, return_status)


def sampling_softmax(logits, *, temperature=None, top_k=None, top_p=None, min_p=None,
                     allowed=None, banned=None, bias_ids=None, bias_values=None,
                     return_status=False):
    """probs [B, V] float32 of the final distribution: ingot.sampling_softmax
    (returns probs, or ``(probs, row_status)`` with ``return_status``)."""
    _sampling.check_logits_shape(logits.shape)
    temperature, top_k, top_p, min_p = _row_params(logits, temperature=temperature, top_k=top_k,
                                                   top_p=top_p, min_p=min_p)
    banned, bias_ids, bias_values = _lists(logits, banned, bias_ids, bias_values)
    probs, row_status = torch.ops.ingot.sampling_softmax(
        logits, temperature, top_k, top_p, min_p, allowed, banned, bias_ids, bias_values,
        bool(return_status))
    return (probs, row_status) if return_status else probs


# ---- NVFP4 -----------------------------------------------------------------------------------


def _global_scale(like, name, value):
    """A global scale as a float32 [1] tensor on the device of ``like``: a
    tensor as it is, a Python number as a new tensor (not during capture)."""
    if isinstance(value, torch.Tensor):
        return value
    device = like.device
    _refuse_while_capturing(name, value, f"a torch.float32 tensor of shape [1] on {device}",
                            device)
    return torch.full((1,), _float(name, value), dtype=torch.float32, device=device)


def _matrix(name, mat):
    """(values, scales, global_scale tensor) of an NVFP4 matrix argument."""
    values, scales, gs = _nvfp4._unpack(mat, name)
    return values, scales, _global_scale(values, f"{name}.global_scale", gs)


def _out_dtype(dtype):
    """torch.float32 or torch.bfloat16 from a torch dtype or ingot's name."""
    if not isinstance(dtype, torch.dtype):
        dtype = {DType.F32: torch.float32, DType.BF16: torch.bfloat16}.get(
            _nvfp4._out_dtype(dtype))
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"dtype: {dtype}, expected torch.float32 or torch.bfloat16")
    return dtype


def _scale_shape(rows, cols):
    """nvfp4_scale_shape in torch's arithmetic (symbolic sizes too)."""
    return ((rows + 127) // 128 * 128, (cols // 16 + 3) // 4 * 4)


def _values_of(name, values):
    _require_ndim(values, 2, name, "[rows, cols/2] uint8")
    return values.shape[0], 2 * values.shape[1]


def _quantized_like(x, rows, cols):
    """(values, scales) of an NVFP4 [rows, cols] matrix, on the device of ``x``."""
    return (x.new_empty((rows, cols // 2), dtype=torch.uint8),
            x.new_empty(_scale_shape(rows, cols), dtype=torch.uint8))


@torch.library.custom_op("ingot::nvfp4_global_scale", mutates_args=())
def _nvfp4_global_scale(x: Tensor) -> Tensor:
    return _nvfp4.nvfp4_global_scale(x, out=x.new_empty((1,), dtype=torch.float32))


@_nvfp4_global_scale.register_fake
def _(x):
    return x.new_empty((1,), dtype=torch.float32)


def nvfp4_global_scale(x):
    """gs = 2688 / amax(x) as float32 [1] on x's device: ingot.nvfp4_global_scale."""
    return torch.ops.ingot.nvfp4_global_scale(x)


def _quantize_outputs(x):
    _require_ndim(x, 2, "x", "[rows, cols]")
    rows, cols = x.shape
    if cols % 16 != 0:
        raise ValueError(f"x: shape {tuple(x.shape)}, expected [rows, cols] with cols a "
                         "multiple of 16")
    return _quantized_like(x, rows, cols)


@torch.library.custom_op("ingot::nvfp4_quantize", mutates_args=("nonfinite_count",))
def _nvfp4_quantize(x: Tensor, global_scale: Tensor,
                    nonfinite_count: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    values, scales = _quantize_outputs(x)
    if nonfinite_count is not None and nonfinite_count.dtype == torch.int32:
        nonfinite_count = reinterpret(nonfinite_count, "u32")  # torch's uint32 does little
    _nvfp4.nvfp4_quantize(x, global_scale, values=values, scales=scales,
                          nonfinite_count=nonfinite_count)
    return values, scales


@_nvfp4_quantize.register_fake
def _(x, global_scale, nonfinite_count):
    return _quantize_outputs(x)


def nvfp4_quantize(x, global_scale, nonfinite_count=None):
    """(values, scales) of x quantized with the global scale (a float32 [1]
    tensor or a number): ingot.nvfp4_quantize. ``nonfinite_count`` (uint32
    or int32 [1]) is incremented in place when given."""
    gs = _global_scale(x, "global_scale", global_scale)
    return torch.ops.ingot.nvfp4_quantize(x, gs, nonfinite_count)


def _dequantize_output(values, dtype):
    rows, cols = _values_of("values", values)
    return values.new_empty((rows, cols), dtype=dtype)


@torch.library.custom_op("ingot::nvfp4_dequantize", mutates_args=())
def _nvfp4_dequantize(values: Tensor, scales: Tensor, global_scale: Tensor,
                      dtype: torch.dtype) -> Tensor:
    out = _dequantize_output(values, dtype)
    return _nvfp4.nvfp4_dequantize(values, scales, global_scale, out=out)


@_nvfp4_dequantize.register_fake
def _(values, scales, global_scale, dtype):
    return _dequantize_output(values, dtype)


def nvfp4_dequantize(values, scales, global_scale, dtype=torch.float32):
    """The decoded [rows, cols] matrix (float32 or bfloat16): ingot.nvfp4_dequantize."""
    gs = _global_scale(values, "global_scale", global_scale)
    return torch.ops.ingot.nvfp4_dequantize(values, scales, gs, _out_dtype(dtype))


def _gemm_output(a_values, b_values, dtype):
    m, _ = _values_of("a.values", a_values)
    n, _ = _values_of("b.values", b_values)
    return a_values.new_empty((m, n), dtype=dtype)


@torch.library.custom_op("ingot::nvfp4_gemm", mutates_args=())
def _nvfp4_gemm(a_values: Tensor, a_scales: Tensor, a_global_scale: Tensor, b_values: Tensor,
                b_scales: Tensor, b_global_scale: Tensor, dtype: torch.dtype) -> Tensor:
    out = _gemm_output(a_values, b_values, dtype)
    return _nvfp4.nvfp4_gemm((a_values, a_scales, a_global_scale),
                             (b_values, b_scales, b_global_scale), out=out)


@_nvfp4_gemm.register_fake
def _(a_values, a_scales, a_global_scale, b_values, b_scales, b_global_scale, dtype):
    return _gemm_output(a_values, b_values, dtype)


def nvfp4_gemm(a, b, dtype=torch.bfloat16):
    """D = A B^T [M, N] of two NVFP4 matrices ((values, scales,
    global_scale) each): ingot.nvfp4_gemm."""
    return torch.ops.ingot.nvfp4_gemm(*_matrix("a", a), *_matrix("b", b), _out_dtype(dtype))


def _geglu_outputs(x_values, w_values):
    m, _ = _values_of("x.values", x_values)
    two_h, _ = _values_of("w_gate_up.values", w_values)
    return _quantized_like(x_values, m, two_h // 2)


@torch.library.custom_op("ingot::nvfp4_geglu", mutates_args=())
def _nvfp4_geglu(x_values: Tensor, x_scales: Tensor, x_global_scale: Tensor, w_values: Tensor,
                 w_scales: Tensor, w_global_scale: Tensor,
                 h_global_scale: Tensor) -> Tuple[Tensor, Tensor]:
    values, scales = _geglu_outputs(x_values, w_values)
    _nvfp4.nvfp4_geglu((x_values, x_scales, x_global_scale), (w_values, w_scales, w_global_scale),
                       h_global_scale, values=values, scales=scales)
    return values, scales


@_nvfp4_geglu.register_fake
def _(x_values, x_scales, x_global_scale, w_values, w_scales, w_global_scale, h_global_scale):
    return _geglu_outputs(x_values, w_values)


def nvfp4_geglu(x, w_gate_up, h_global_scale):
    """h = NVFP4(gelu_tanh(gate) * up) [M, H]: ingot.nvfp4_geglu. Returns
    NVFP4Matrix(values, scales, h_global_scale as a tensor)."""
    x = _matrix("x", x)
    gs = _global_scale(x[0], "h_global_scale", h_global_scale)
    values, scales = torch.ops.ingot.nvfp4_geglu(*x, *_matrix("w_gate_up", w_gate_up), gs)
    return NVFP4Matrix(values, scales, gs)


@torch.library.custom_op("ingot::nvfp4_mlp", mutates_args=())
def _nvfp4_mlp(x_values: Tensor, x_scales: Tensor, x_global_scale: Tensor, w_values: Tensor,
               w_scales: Tensor, w_global_scale: Tensor, h_global_scale: Tensor,
               d_values: Tensor, d_scales: Tensor, d_global_scale: Tensor,
               dtype: torch.dtype) -> Tensor:
    out = _gemm_output(x_values, d_values, dtype)
    return _nvfp4.nvfp4_mlp((x_values, x_scales, x_global_scale),
                            (w_values, w_scales, w_global_scale), h_global_scale,
                            (d_values, d_scales, d_global_scale), out=out)


@_nvfp4_mlp.register_fake
def _(x_values, x_scales, x_global_scale, w_values, w_scales, w_global_scale, h_global_scale,
      d_values, d_scales, d_global_scale, dtype):
    return _gemm_output(x_values, d_values, dtype)


def nvfp4_mlp(x, w_gate_up, h_global_scale, w_down, dtype=torch.bfloat16):
    """The gated MLP, out [M, N]: ingot.nvfp4_mlp."""
    x = _matrix("x", x)
    gs = _global_scale(x[0], "h_global_scale", h_global_scale)
    return torch.ops.ingot.nvfp4_mlp(*x, *_matrix("w_gate_up", w_gate_up), gs,
                                     *_matrix("w_down", w_down), _out_dtype(dtype))
