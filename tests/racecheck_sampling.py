"""A few dense sampling launches for compute-sanitizer's racecheck (shared
memory hazards: the in-place 16-bit staging, the candidate lists' segments),
small enough to finish under it:
  INGOT_LIBRARY=build/libingot.so PYTHONPATH=python \\
    compute-sanitizer --tool racecheck --racecheck-report all python3 tests/racecheck_sampling.py
Each dtype at V = 151936 (a warp's window is not a multiple of 128 tokens)
and 262144: a softmax, a masked step with both log-probabilities, and the
same with a bias and a ban (the lists' load loop). All of them take longer
than two minutes under racecheck; arguments choose a part, e.g.
  ... python3 tests/racecheck_sampling.py f16 262144
(dtypes among f32 bf16 f16, vocabularies as numbers; default: all)."""
import sys

import torch

import ingot

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
dtypes = [DTYPES[a] for a in sys.argv[1:] if a in DTYPES] or list(DTYPES.values())
vocabs = [int(a) for a in sys.argv[1:] if a.isdigit()] or [151936, 262144]
unknown = [a for a in sys.argv[1:] if a not in DTYPES and not a.isdigit()]
if unknown:
    sys.exit(f"racecheck_sampling.py: unknown argument(s) {unknown}")

with ingot.Context("cuda") as ctx:
    g = torch.Generator(device="cuda").manual_seed(1)
    for dt in dtypes:
        for V in vocabs:
            B = 2
            logits = (3.0 * torch.randn(B, V, device="cuda", generator=g)).to(dt)
            words = (V + 31) // 32
            allowed = torch.randint(-2**31, 2**31 - 1, (B, words), device="cuda",
                                    dtype=torch.int32, generator=g)
            ingot.sampling_softmax(ctx, logits, temperature=0.8)
            for lists in (False, True):
                cuda = dict(device="cuda")
                extra = dict(banned=torch.tensor([[0, 5], [1, 7]], dtype=torch.int32, **cuda),
                             bias_ids=torch.tensor([[0, 9]], dtype=torch.int32, **cuda),
                             bias_values=torch.tensor([2.0], dtype=torch.float32, **cuda)
                             ) if lists else {}
                ingot.sample(ctx, logits, temperature=0.8, seed=7, position=3, allowed=allowed,
                             logprobs=True, raw_logprobs=True, **extra)
    torch.cuda.synchronize()
print("racecheck_sampling: done", [str(d) for d in dtypes], vocabs)
