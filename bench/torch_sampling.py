"""Sampling side by side with PyTorch, same shapes and data as `ingot bench`'s
sampling rows (tools/bench_sampling.c), one process, one GPU.

  softmax   torch.softmax(logits / T) vs ingot.sampling_softmax; both timed as
            replays of a CUDA graph of 20 calls (median over 50 replays / 20).
  masked    the masked step with both log-probabilities: PyTorch unpacks the
            xgrammar bitmask, masks, divides by T, takes both log_softmax,
            adds Gumbel noise of torch.rand, argmax, gathers the two
            log-probabilities; ingot.sample with the bitmask and both
            log-probability outputs. Both timed as graph replays as above
            (random normal logits times 3: where ingot's draw evaluates the
            most noise, the bench's "stress" rows).
  top-8     the masked step above plus the raw distribution's 8 most
            probable (token, logprob) pairs (torch.topk of the raw
            log_softmax) against ingot.sample with num_top = 8 (the dense
            kernel's top-n); graph replays.
  sample    top-k 50 + top-p 0.9: a sort-based PyTorch sampler (the usual
            engine code: topk, softmax, cumsum mask, multinomial) vs
            ingot.sample; both timed eagerly (median of 200 calls between CUDA
            events), since the PyTorch sampler is not graph-capturable as
            written (multinomial with a generator). Then top-p 0.9 alone (a
            full sort), timed the same way: on the normal logits times 3
            (ingot's nucleus is thousands of tokens deep: its dense kernel
            hands every row to the general one) and on logits shaped like a
            language model's (llm_like, as `ingot bench`: the nucleus lies in
            the top 64, which ingot's dense kernel draws from).

Usage: INGOT_LIBRARY=build/libingot.so PYTHONPATH=python python3 bench/torch_sampling.py
Prints a table; --json FILE also writes it.
"""

import argparse
import json

import torch

from gpu_timing import eager_time, graph_time  # bench/gpu_timing.py (the script's folder)
import ingot


def torch_topk_topp(logits, k, p, gen):
    vals, idx = torch.topk(logits, k, dim=-1)
    probs = torch.softmax(vals, dim=-1)
    cum = torch.cumsum(probs, dim=-1)
    probs = probs.masked_fill(cum - probs > p, 0.0)
    choice = torch.multinomial(probs, 1, generator=gen)
    return idx.gather(-1, choice).squeeze(-1)


def torch_topp(logits, p, gen):
    vals, idx = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(vals, dim=-1)
    cum = torch.cumsum(probs, dim=-1)
    probs = probs.masked_fill(cum - probs > p, 0.0)
    choice = torch.multinomial(probs, 1, generator=gen)
    return idx.gather(-1, choice).squeeze(-1)


def llm_like(B, V):
    """Logits shaped like a language model's, as bench_sampling.c's llm_logit:
    a bulk of 2.5 x a normal variate, and one token in 256 raised by 8 to 24."""
    x = torch.randn(B, V, device="cuda") * 2.5
    head = torch.rand(B, V, device="cuda") < 1.0 / 256
    return x + head * (8.0 + 16.0 * torch.rand(B, V, device="cuda"))


def torch_masked_step(logits, words, t, bits, num_top=0):
    """Token and its log-probabilities under the masked and the raw
    distribution; words [B, W] int32 xgrammar bitmask, bits = arange(32)."""
    V = logits.shape[1]
    allowed = ((words[:, :, None] >> bits) & 1).reshape(words.shape[0], -1)[:, :V].bool()
    scaled = logits / t
    final = torch.log_softmax(scaled.masked_fill(~allowed, float("-inf")), dim=-1)
    raw = torch.log_softmax(scaled, dim=-1)
    noise = -torch.log(-torch.log(torch.rand_like(final).clamp_(1e-10, 1.0 - 1e-7)))
    token = torch.argmax(final + noise, dim=-1, keepdim=True)
    top = torch.topk(raw, num_top, dim=-1) if num_top else None
    return token, final.gather(-1, token), raw.gather(-1, token), top


def sample_workspace(ctx, B, V):
    """ingot.sample's workspace for [B, V] f32 logits (the wide sampler's
    partials at B <= 2; the top-n calls need no more)."""
    return torch.empty(ingot.sample_workspace_size(ctx, B, V), dtype=torch.uint8, device="cuda")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    with ingot.Context("cuda") as ctx:
        for B, V in ((1, 151936), (64, 262144)):
            x = torch.randn(B, V, device="cuda") * 3
            t = torch.full((B,), 0.8, device="cuda")
            probs = torch.empty_like(x)
            status = torch.empty(B, dtype=torch.int32, device="cuda")
            tt = graph_time(lambda: torch.softmax(x / 0.8, dim=-1))
            sws = torch.empty(ingot.sampling_softmax_workspace_size(ctx, B, V), device="cuda",
                              dtype=torch.uint8)
            it = graph_time(lambda: ingot.sampling_softmax(ctx, x, temperature=t, probs=probs,
                                                           row_status=status, workspace=sws))
            rows.append(("softmax", f"B={B} V={V} f32", tt, it))
        for B, V in ((1, 151936), (64, 262144)):
            x = torch.randn(B, V, device="cuda") * 3
            ws = sample_workspace(ctx, B, V)
            W = (V + 31) // 32
            words = torch.randint(-2**31, 2**31 - 1, (B, W), dtype=torch.int32, device="cuda")
            bits = torch.arange(32, dtype=torch.int32, device="cuda")
            t = torch.full((B,), 0.8, device="cuda")
            seed = torch.arange(B, dtype=torch.int64, device="cuda")
            pos = torch.zeros(B, dtype=torch.int64, device="cuda")
            tokens = torch.empty(B, dtype=torch.int32, device="cuda")
            status = torch.empty(B, dtype=torch.int32, device="cuda")
            lp = torch.empty(B, device="cuda")
            raw = torch.empty(B, device="cuda")
            tt = graph_time(lambda: torch_masked_step(x, words, 0.8, bits))
            it = graph_time(lambda: ingot.sample(ctx, x, temperature=t, seed=seed, position=pos,
                                                 allowed=words, tokens=tokens, row_status=status,
                                                 token_logprob=lp, token_raw_logprob=raw,
                                                 workspace=ws))
            rows.append(("masked step + both logprobs", f"B={B} V={V} f32", tt, it))
            top_ids = torch.empty(B, 8, dtype=torch.int32, device="cuda")
            top_lp = torch.empty(B, 8, device="cuda")
            tt = graph_time(lambda: torch_masked_step(x, words, 0.8, bits, 8))
            it = graph_time(lambda: ingot.sample(ctx, x, temperature=t, seed=seed, position=pos,
                                                 allowed=words, tokens=tokens, row_status=status,
                                                 token_logprob=lp, token_raw_logprob=raw,
                                                 top_ids=top_ids, top_logprobs=top_lp,
                                                 workspace=ws))
            rows.append(("masked step + both logprobs + raw top-8", f"B={B} V={V} f32", tt, it))
        for B, V in ((1, 151936), (64, 151936)):
            x = torch.randn(B, V, device="cuda") * 3
            ws = sample_workspace(ctx, B, V)
            gen = torch.Generator(device="cuda")
            gen.manual_seed(1)
            k = torch.full((B,), 50, dtype=torch.int32, device="cuda")
            p = torch.full((B,), 0.9, device="cuda")
            seed = torch.arange(B, dtype=torch.int64, device="cuda")
            tokens = torch.empty(B, dtype=torch.int32, device="cuda")
            tt = eager_time(lambda: torch_topk_topp(x, 50, 0.9, gen))
            status = torch.empty(B, dtype=torch.int32, device="cuda")
            it = eager_time(lambda: ingot.sample(ctx, x, top_k=k, top_p=p, seed=seed,
                                                 tokens=tokens, row_status=status, workspace=ws))
            rows.append(("sample top-k 50 + top-p 0.9 (eager)", f"B={B} V={V} f32", tt, it))
            k0 = torch.zeros(B, dtype=torch.int32, device="cuda")
            tt = eager_time(lambda: torch_topp(x, 0.9, gen))
            it = eager_time(lambda: ingot.sample(ctx, x, top_k=k0, top_p=p, seed=seed,
                                                 tokens=tokens, row_status=status, workspace=ws))
            rows.append(("sample top-p 0.9 (eager)", f"B={B} V={V} f32", tt, it))
            x = llm_like(B, V)
            tt = eager_time(lambda: torch_topp(x, 0.9, gen))
            it = eager_time(lambda: ingot.sample(ctx, x, top_k=k0, top_p=p, seed=seed,
                                                 tokens=tokens, row_status=status, workspace=ws))
            rows.append(("sample top-p 0.9, LLM-like logits (eager)", f"B={B} V={V} f32", tt, it))
    print(f"{'op':42} {'case':20} {'torch us':>10} {'ingot us':>10} {'ratio':>7}")
    for op, case, tt, it in rows:
        print(f"{op:42} {case:20} {tt:10.2f} {it:10.2f} {tt / it:7.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(op=o, case=c, torch_us=tt, ingot_us=it) for o, c, tt, it in rows], f,
                      indent=1)


if __name__ == "__main__":
    main()
