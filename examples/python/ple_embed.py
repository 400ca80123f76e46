"""PLE / hashed n-gram embeddings with ingot: a prefill of a ragged batch of
three requests, then one decode step, with the context rolled forward
between them (the Python twin of examples/c/ple_embed.c).

    python examples/python/ple_embed.py [cpu|cuda]

torch tensors (on the GPU when there is one), or numpy arrays on the CPU
when torch is not installed (or INGOT_EXAMPLE_FRAMEWORK=numpy). Checks: the
decode step's rows equal a prefill of the whole history; the fused op equals
ngram_row_ids + ngram_gather; one embedding recomputed by hand; every value
finite. Exits 1 on a mismatch.
"""

import os
import sys

import ingot
import numpy as np

# torch tensors when torch is installed, else numpy arrays (numpy either way
# with INGOT_EXAMPLE_FRAMEWORK=numpy).
torch = None
if os.environ.get("INGOT_EXAMPLE_FRAMEWORK", "torch") == "torch":
    try:
        import torch
    except ImportError:
        pass
FRAMEWORK = "numpy" if torch is None else "torch"
if len(sys.argv) > 1:
    DEVICE = sys.argv[1]
else:
    DEVICE = "cuda" if torch is not None and torch.cuda.is_available() else "cpu"
if DEVICE == "cuda" and not ingot.backend_available("cuda"):
    print("this libingot has no CUDA backend (or sees no GPU): running on the CPU")
    DEVICE = "cpu"

VOCAB, EOS = 32000, 2  # EOS: the boundary token, the model's end-of-sequence id
N, HPN, DIM = 3, 4, 32  # n-gram size, heads per order (H = 4 * 2 = 8), table width
PROMPT_LEN = [5, 3, 7]
SCALE = 0.5


# ---- numpy <-> the framework's arrays on DEVICE --------------------------------------------


def to_device(a):
    """A numpy array as an array ingot can use on DEVICE. bf16 goes in as its
    uint16 bits (numpy has no bfloat16; ingot reads uint16 as bf16)."""
    if torch is None:
        return a
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(DEVICE)
    return torch.from_numpy(a).to(DEVICE)


def to_numpy(x):
    """An ingot result on the host; bf16 as its uint16 bits."""
    if torch is None:
        x = np.asarray(x)  # bf16 outputs are ml_dtypes.bfloat16 if installed, else uint16
        return x.view(np.uint16) if x.dtype.name == "bfloat16" else x
    if x.dtype == torch.bfloat16:
        x = x.view(torch.int16)
        return x.cpu().numpy().view(np.uint16)
    return x.cpu().numpy()


def bf16_to_float(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def main():
    failures = []

    def verify(ok, what):
        if not ok:
            print("FAILED:", what)
            failures.append(what)

    ctx = ingot.Context(DEVICE)
    print(f"ingot {ingot.version()}, {DEVICE} backend, {FRAMEWORK} arrays")

    # ---- the layer: constants and table -------------------------------------------------
    # base 1000 keeps the table small (a real layer has millions of rows).
    cfg = ingot.NgramConfig.derive(VOCAB, N, HPN, 1000, seed=1234, layer_index=0,
                                   boundary_token=EOS)
    rows = cfg.table_rows(pad_multiple=64)
    print(f"config: n={cfg.n}, H={cfg.num_heads} heads, P[0]={cfg.primes[0]}, "
          f"table {rows} x {DIM} bf16")
    rng = np.random.default_rng(0)
    table_f32 = rng.uniform(-1, 1, size=(rows, DIM)).astype(np.float32)
    table_bits = (table_f32.view(np.uint32) >> 16).astype(np.uint16)  # bf16, truncated
    table = to_device(table_bits)

    # ---- the requests: a prompt each, then one decoded token -----------------------------
    full_len = [n + 1 for n in PROMPT_LEN]
    full = rng.integers(3, VOCAB, size=sum(full_len), dtype=np.int32)
    full_cu = np.concatenate([[0], np.cumsum(full_len)]).astype(np.int32)
    prompt_cu = np.concatenate([[0], np.cumsum(PROMPT_LEN)]).astype(np.int32)
    prompts = np.concatenate([full[full_cu[b]:full_cu[b] + PROMPT_LEN[b]]
                              for b in range(len(PROMPT_LEN))])
    step = full[full_cu[1:] - 1]  # the decoded token of each request
    step_cu = np.arange(len(PROMPT_LEN) + 1, dtype=np.int32)
    fresh = np.full((len(PROMPT_LEN), N - 1), EOS, dtype=np.int32)  # fresh requests

    # ---- prefill, commit, decode -----------------------------------------------------------
    context = to_device(fresh.copy())
    ids, cu = to_device(prompts), to_device(prompt_cu)
    out_prompt = ingot.ngram_embed(ctx, cfg, ids, cu, context, table, scale=SCALE)
    ingot.ngram_commit_context(ctx, cfg, ids, cu, context)  # after every reader of context
    out_step = ingot.ngram_embed(ctx, cfg, to_device(step), to_device(step_cu), context, table,
                                 scale=SCALE)
    ctx.check_device_errors()  # CUDA checks cu_seqlens on the device
    rolled = to_numpy(context)
    for b in range(len(PROMPT_LEN)):
        want = prompts[prompt_cu[b + 1] - (N - 1):prompt_cu[b + 1]]
        verify(np.array_equal(rolled[b], want),
               f"context[{b}] = {rolled[b]} after the commit, expected {want}")
    out_prompt, out_step = to_numpy(out_prompt), to_numpy(out_step)
    print(f"prefill {len(prompts)} tokens -> {out_prompt.shape}, decode {len(step)} tokens -> "
          f"{out_step.shape}, bf16")

    # ---- checks ----------------------------------------------------------------------------
    # (a) The same history as one prefill gives the same rows, byte for byte.
    f_ids, f_cu, f_ctx = to_device(full), to_device(full_cu), to_device(fresh.copy())
    out_full = to_numpy(ingot.ngram_embed(ctx, cfg, f_ids, f_cu, f_ctx, table, scale=SCALE))
    for b in range(len(PROMPT_LEN)):
        verify(np.array_equal(out_prompt[prompt_cu[b]:prompt_cu[b + 1]],
                              out_full[full_cu[b]:full_cu[b + 1] - 1]),
               f"request {b}: the prefill differs from the longer prefill")
        verify(np.array_equal(out_step[b], out_full[full_cu[b + 1] - 1]),
               f"request {b}: the decode step differs from a prefill of the same history")

    # (b) The fused op equals its two parts: row ids, then the gather.
    row_ids = ingot.ngram_row_ids(ctx, cfg, f_ids, f_cu, f_ctx)
    parts = to_numpy(ingot.ngram_gather(ctx, row_ids, table, scale=SCALE))
    ctx.check_device_errors()
    verify(np.array_equal(parts, out_full), "ngram_embed != ngram_row_ids + ngram_gather")

    # (c) By hand: the 2-gram head 0 of request 0's decoded token.
    #   mix = x0 * mult[0] ^ x1 * mult[1]   (wrapping int64)
    #   row = floor_mod(mix, P[0]) + off[0];  out[0, 0:D] = bf16(table[row] * scale)
    x0, x1 = int(step[0]), int(prompts[prompt_cu[1] - 1])
    m0, m1 = cfg.multipliers[0], cfg.multipliers[1]
    mix = ((x0 * m0) ^ (x1 * m1)) & (2**64 - 1)
    mix = mix - 2**64 if mix >= 2**63 else mix  # as int64
    row = mix % cfg.primes[0] + cfg.offsets[0]  # Python's % is the floored modulo
    want = bf16_to_float(table_bits[row]) * np.float32(SCALE)  # exact: scale is 0.5
    got = bf16_to_float(out_step[0, :DIM])
    print(f"request 0, decoded token {x0} after {x1}: head 0 reads table row {row}; "
          f"out[0, 0:4] = {got[:4]}")
    verify(np.array_equal(got, want), f"head 0: {got[:4]}..., by hand {want[:4]}...")

    # (d) Every value finite, and not all zero.
    values = bf16_to_float(out_full)
    verify(np.isfinite(values).all(), "a non-finite output")
    verify((values != 0).any(), "every output is zero")

    ctx.close()
    if failures:
        print(f"{len(failures)} check(s) FAILED")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
