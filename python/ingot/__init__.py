"""ingot: fused GPU kernels for LLM inference, each with an exact CPU
reference beside it. A thin ctypes binding of libingot.so; the C header
ingot/ingot.h is the manual.

    import ingot, torch
    cfg = ingot.NgramConfig.derive(248320, 3, 8, 20000000, boundary_token=eos_id)
    out = ingot.ngram_embed(cfg, ids, cu_seqlens, context, table, scale=1.0)
    ingot.ngram_commit_context(cfg, ids, cu_seqlens, context)
    tokens = ingot.sample(logits, top_k=50, top_p=0.9, temperature=0.7, seed=seeds)

Each op runs on the context of its arrays' device (``default_context``:
one per device, made on first use) unless given ``ctx=`` (or an
ingot.Context first, the older form). ``ingot.torch`` (imported on first
use) has the ops as PyTorch custom ops, for torch.compile and CUDA graphs.

Errors raise IngotError (with the library's text and status). Arrays: torch
tensors (CPU/CUDA), numpy arrays, DLPack / array-interface objects; see
ingot._tensor for dtypes (bf16 and fp8 without ml_dtypes: uint16 arrays and
``reinterpret(uint8_array, "f8_e4m3")``). The shared library is found as
described in ingot._lib (INGOT_LIBRARY, the bundled copy, the repository's
build/, then the system); ``ingot.library_path`` says which one was loaded.
"""

from ._core import (
    FLAG_FORCE_REFERENCE,
    Context,
    DType,
    IngotError,
    Status,
    backend_available,
    default_context,
    last_error,
    status_name,
    status_string,
    version,
    version_number,
)
from ._lib import ingot_ngram_config, ingot_tensor, lib, library_path
from ._lib import ingot_nvfp4_matrix, ingot_sampling_logprobs, ingot_sampling_params
from ._tensor import reinterpret
from .ngram import (
    NgramConfig,
    ngram_commit_context,
    ngram_embed,
    ngram_gather,
    ngram_row_ids,
)
from .nvfp4 import (
    E2M1_VALUES,
    NVFP4_BLOCK,
    NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE,
    NVFP4_SCALE_COLS,
    NVFP4_SCALE_ROWS,
    NVFP4Matrix,
    nvfp4_dequantize,
    nvfp4_geglu,
    nvfp4_geglu_workspace_size,
    nvfp4_gemm,
    nvfp4_gemm_workspace_size,
    nvfp4_global_scale,
    nvfp4_mlp,
    nvfp4_mlp_workspace_size,
    nvfp4_quantize,
    nvfp4_quantize_gate_up,
    nvfp4_scale_offset,
    nvfp4_scale_shape,
    nvfp4_swizzle_scales,
    nvfp4_unswizzle_scales,
)
from .host_table import (
    HOST_TABLE_AUTO,
    HOST_TABLE_HUGETLB_1G,
    HOST_TABLE_HUGETLB_2M,
    HOST_TABLE_PINNED,
    HOST_TABLE_STRATEGIES,
    HOST_TABLE_THP,
    HostTable,
    host_table_strategy_name,
)
from .ple import NgramTable, NgramTableInfo, ngram_table_load, ngram_table_probe
from .sampling import (
    SAMPLING_MAX_TOP,
    SAMPLING_ROW_BAD_ENTRY,
    SAMPLING_ROW_BAD_PARAMETER,
    SAMPLING_ROW_EMPTY,
    SAMPLING_ROW_NAN,
    SAMPLING_TOP_FINAL,
    SampleResult,
    sample,
    sample_workspace_size,
    sampling_exp,
    sampling_gumbel,
    sampling_log,
    sampling_softmax,
    sampling_softmax_workspace_size,
    sampling_uniform,
)
from .sampling_shard import (
    SAMPLING_SHARD_EXCHANGE_GATHER,
    SAMPLING_SHARD_EXCHANGE_SUM,
    SAMPLING_SHARD_MAX_SHARDS,
    SAMPLING_SHARD_MAX_STEPS,
    SAMPLING_SHARD_SELECT_TOP_K,
    SAMPLING_SHARD_SELECT_TOP_P,
    SAMPLING_SHARD_SOFTMAX,
    SAMPLING_SHARD_TOP_FINAL,
    ShardPlan,
    sample_sharded,
    sample_sharded_nccl,
    sampling_shard_exchange,
    sampling_shard_finish_sample,
    sampling_shard_finish_softmax,
    sampling_shard_gather,
    sampling_shard_get_plan,
    sampling_shard_step,
    sampling_shard_sum,
    sampling_softmax_sharded,
    sampling_softmax_sharded_nccl,
    sampling_sharded_nccl_verify,
)

__version__ = "0.1.0"

__all__ = [
    "Context", "DType", "FLAG_FORCE_REFERENCE", "IngotError", "NgramConfig", "Status",
    "backend_available", "default_context", "ingot_ngram_config", "ingot_nvfp4_matrix",
    "ingot_tensor", "last_error", "lib", "library_path", "ngram_commit_context", "ngram_embed",
    "ngram_gather", "ngram_row_ids",
    # Loading a checkpoint's n-gram table
    "NgramTable", "NgramTableInfo", "ngram_table_load", "ngram_table_probe",
    # Host tables
    "HOST_TABLE_AUTO", "HOST_TABLE_HUGETLB_1G", "HOST_TABLE_HUGETLB_2M", "HOST_TABLE_PINNED",
    "HOST_TABLE_STRATEGIES", "HOST_TABLE_THP", "HostTable", "host_table_strategy_name",
    "reinterpret", "status_name", "status_string", "version", "version_number",
    # NVFP4
    "E2M1_VALUES", "NVFP4_BLOCK", "NVFP4_GATE_UP_COMPUTE_GLOBAL_SCALE", "NVFP4_SCALE_COLS",
    "NVFP4_SCALE_ROWS", "NVFP4Matrix", "nvfp4_dequantize", "nvfp4_geglu",
    "nvfp4_geglu_workspace_size", "nvfp4_gemm", "nvfp4_gemm_workspace_size", "nvfp4_global_scale",
    "nvfp4_mlp", "nvfp4_mlp_workspace_size", "nvfp4_quantize", "nvfp4_quantize_gate_up",
    "nvfp4_scale_offset", "nvfp4_scale_shape", "nvfp4_swizzle_scales", "nvfp4_unswizzle_scales",
    # Sampling
    "SAMPLING_MAX_TOP", "SAMPLING_ROW_BAD_ENTRY", "SAMPLING_ROW_BAD_PARAMETER",
    "SAMPLING_ROW_EMPTY", "SAMPLING_ROW_NAN", "SAMPLING_TOP_FINAL", "SampleResult",
    "ingot_sampling_logprobs", "ingot_sampling_params", "sample",
    "sample_workspace_size", "sampling_exp", "sampling_gumbel", "sampling_log",
    "sampling_softmax", "sampling_softmax_workspace_size", "sampling_uniform",
    # Sharded sampling
    "SAMPLING_SHARD_EXCHANGE_GATHER", "SAMPLING_SHARD_EXCHANGE_SUM", "SAMPLING_SHARD_MAX_SHARDS",
    "SAMPLING_SHARD_MAX_STEPS", "SAMPLING_SHARD_SELECT_TOP_K", "SAMPLING_SHARD_SELECT_TOP_P",
    "SAMPLING_SHARD_SOFTMAX", "SAMPLING_SHARD_TOP_FINAL", "ShardPlan", "sample_sharded",
    "sampling_shard_exchange", "sampling_shard_finish_sample", "sampling_shard_finish_softmax",
    "sampling_shard_gather", "sampling_shard_get_plan", "sampling_shard_step",
    "sampling_shard_sum", "sampling_softmax_sharded", "sample_sharded_nccl",
    "sampling_softmax_sharded_nccl", "sampling_sharded_nccl_verify",
]


def __getattr__(name):
    """``ingot.torch`` is imported on first use, so that importing ingot
    never imports torch."""
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'ingot' has no attribute {name!r}")
