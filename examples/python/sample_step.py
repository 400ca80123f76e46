"""One decode sampling step with ingot.sample over a batch of 4 requests and
a 32000-token vocabulary (the Python twin of examples/c/sample_step.c):
per-row temperature, top-k, top-p and min-p, per-row seed and position (the
draw is a pure function of them), a grammar bitmask on one row, and the
log-probabilities an engine returns.

    row 0  greedy (temperature 0)
    row 1  temperature 0.7, top-k 50, top-p 0.9
    row 2  temperature 1, only the tokens whose id is a multiple of 3 allowed (a bitmask)
    row 3  temperature 1.2, top-k 20, top-p 0.95, min-p 0.05

    python examples/python/sample_step.py [cpu|cuda]

torch tensors (on the GPU when there is one), or numpy arrays on the CPU
when torch is not installed (or INGOT_EXAMPLE_FRAMEWORK=numpy). Checks:
every row status 0, every token in range and allowed; the greedy row takes
the argmax; the top-k rows draw from their k best; row 2's token equals the
Gumbel-max draw recomputed here with ingot.sampling_gumbel; the
log-probabilities match a softmax computed here; a second call gives the
same results. Exits 1 on a mismatch.
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

B, V, NTOP = 4, 32000, 3


def to_device(a):
    """A numpy array as an array ingot can use on DEVICE."""
    return a if torch is None else torch.from_numpy(a).to(DEVICE)


def to_numpy(x):
    return np.asarray(x) if torch is None else x.cpu().numpy()


def main():
    failures = []

    def verify(ok, what):
        if not ok:
            print("FAILED:", what)
            failures.append(what)

    ctx = ingot.Context(DEVICE)
    print(f"ingot {ingot.version()}, {DEVICE} backend, {FRAMEWORK} arrays")

    # ---- inputs -----------------------------------------------------------------------------
    rng = np.random.default_rng(0)
    logits = (2 * rng.standard_normal((B, V)) + 6 * (rng.random((B, V)) < 1e-3)).astype(np.float32)
    temperature = np.array([0.0, 0.7, 1.0, 1.2], dtype=np.float32)  # 0: greedy
    top_k = np.array([0, 50, 0, 20], dtype=np.int32)  # 0: off
    top_p = np.array([1.0, 0.9, 1.0, 0.95], dtype=np.float32)  # 1: off
    min_p = np.array([0.0, 0.0, 0.0, 0.05], dtype=np.float32)  # 0: off
    seed = np.array([1001, 1002, 1003, 1004], dtype=np.int64)  # e.g. one per request
    position = np.array([17, 5, 230, 64], dtype=np.int64)  # e.g. the token's index
    # xgrammar's bitmask [B, ceil(V/32)]: token t is bit t % 32 of word t // 32, 1 = allowed.
    allowed = np.ones((B, V), dtype=bool)
    allowed[2] = np.arange(V) % 3 == 0
    mask = np.packbits(allowed, axis=1, bitorder="little").view(np.int32)  # V % 32 == 0 here

    args = dict(temperature=to_device(temperature), top_k=to_device(top_k),
                top_p=to_device(top_p), min_p=to_device(min_p), seed=to_device(seed),
                position=to_device(position), allowed=to_device(mask),
                logprobs=True, raw_logprobs=True, num_top=NTOP)
    d_logits = to_device(logits)

    # ---- the step, twice (the draw depends only on seed and position) -----------------------
    first = ingot.sample(ctx, d_logits, **args)
    again = ingot.sample(ctx, d_logits, **args)
    r1 = [to_numpy(x) for x in first]
    r2 = [to_numpy(x) for x in again]
    verify(all(np.array_equal(x, y) for x, y in zip(r1, r2)), "a second call gave other results")
    tokens, status, logprob, raw_logprob, top_ids, top_logprobs = r1

    # ---- print and check ----------------------------------------------------------------------
    for r in range(B):
        x, tok = logits[r].astype(np.float64), int(tokens[r])
        top = " ".join(f"{i} ({v:.3f})" for i, v in zip(top_ids[r], top_logprobs[r]))
        print(f"row {r}: token {tok:5d}  status {int(status[r])}  logprob {logprob[r]:8.4f}  "
              f"raw logprob {raw_logprob[r]:8.4f}  top: {top}")
        verify(status[r] == 0, f"row {r}: status {status[r]}")
        verify(0 <= tok < V, f"row {r}: token {tok} out of range")
        if not 0 <= tok < V:
            continue
        verify(allowed[r, tok], f"row {r}: token {tok} is not allowed by the mask")

        # The raw distribution softmax(x / T'), T' = T or 1 for greedy.
        t = float(temperature[r]) if temperature[r] > 0 else 1.0
        lse = x.max() / t + np.log(np.exp((x - x.max()) / t).sum())
        raw = x[tok] / t - lse
        verify(abs(raw_logprob[r] - raw) <= 1e-4 * (1 + abs(raw)),
               f"row {r}: raw logprob {raw_logprob[r]}, softmax here {raw}")
        # Masks and filters only remove tokens: the final probability is >= the raw one.
        verify(raw - 1e-4 <= logprob[r] <= 0, f"row {r}: logprob {logprob[r]} (raw {raw})")
        rank_order = np.lexsort((np.arange(V), -x))  # by logit descending, then id
        rank = int(np.nonzero(rank_order == tok)[0][0])
        if top_k[r] > 0:
            verify(rank < top_k[r], f"row {r}: token of rank {rank}, top-k {top_k[r]}")
        if temperature[r] == 0:
            verify(rank == 0 and logprob[r] == 0, f"row {r}: greedy, rank {rank}")
        # The top-n of the raw distribution: the largest logits, lowest id on ties.
        verify(np.array_equal(top_ids[r], rank_order[:NTOP]),
               f"row {r}: top ids {top_ids[r]}, expected {rank_order[:NTOP]}")
        want = x[rank_order[:NTOP]] / t - lse
        verify(np.allclose(top_logprobs[r], want, rtol=1e-4, atol=1e-4),
               f"row {r}: top logprobs {top_logprobs[r]}, softmax here {want}")

    # Row 2 (no filter) by hand: argmax over allowed i of s_i + g_i, with
    # s_i = (x_i - max allowed x) / T in float32 and g_i the generator's Gumbel noise.
    ids = np.nonzero(allowed[2])[0]
    x = logits[2, ids]
    s = (x - x.max()) / temperature[2]
    g = np.array([ingot.sampling_gumbel(seed[2], position[2], i) for i in ids], dtype=np.float32)
    want = int(ids[np.argmax(s + g)])  # argmax: the first (lowest id) on ties
    print(f"row 2 redrawn here with ingot.sampling_gumbel: token {want}")
    verify(tokens[2] == want, f"row 2: token {tokens[2]}, the host draw gives {want}")

    ctx.close()
    if failures:
        print(f"{len(failures)} check(s) FAILED")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
