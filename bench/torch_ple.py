"""Hashed n-gram embeddings (PLE) side by side with PyTorch, same shapes and
data as `ingot bench`'s row_ids, gather and embed rows with the table in
device memory (tools/bench_ngram.c), one process, one GPU.

  row_ids  rows [T, H] int64 of a ragged batch in int64 torch ops, as
           include/ingot/ingot.h (PLE section) defines them: each token's
           request by torch.searchsorted over cu_seqlens, its n-gram window
           gathered from ids and context, boundary tokens as walls (cumprod),
           wrapping int64 products, xor, torch.remainder (floored) + offsets;
           vs ingot.ngram_row_ids. Config `real`: V=248320, n=3, hpn=8
           (H=16), base=20000000.
  gather   given rows [T, H] (the real config's, modulo R, as the bench):
           torch   table[rows] -> float -> * scale -> bf16 [T, H*D]
                   (gather, .float(), torch.mul into the bf16 output);
           tuned   the same gather on the table viewed as int64 (20 words per
                   160-byte row instead of 160 bytes), then fp8 -> bf16 into
                   the output (exact: every e4m3 value is a bf16 value) and
                   mul_(scale) there (fp32 product, rounded once: same bits);
           vs ingot.ngram_gather.
  embed    the torch row ids above, then either gather (torch / tuned): what
           an engine does without ingot; vs ingot.ngram_embed (one launch).
           Config `real-fit`: the real V, n, hpn with base = R/16 * 15/16, so
           that every row id falls inside the table.

Table: fp8-e4m3 (torch.float8_e4m3fn) [R, D = 160], R = 2^24 rows (2.7 GB, far
past L2) in device memory, allocated once; random bytes without the NaN codes
0x7f / 0xff; scale 0.5. Batches: decode B = 1, 64, 256 (one token per
request) and prefill 1 x 4096; int32 ids, cu_seqlens and context; ids uniform
in [0, V) with 1 in 32 the boundary token, contexts likewise, 1 request in 8
fresh (all boundary tokens). Every path writes into preallocated outputs
(the torch embed's row ids are an intermediate, as ingot's are never written).

Timing: each path as replays of a CUDA graph of 20 calls, median over
--replays (200) replays / 20 (bench/gpu_timing.py's graph_time). Each replay is
timed on its own, where `ingot bench` queues them back to back, so its numbers
can differ by the graph launch: compare within this table. Call i reads input
set i % slots and writes output set i % slots; slots as `ingot bench`:
ceil(3 x L2 / bytes of one set's inputs and outputs), at most 20.
Check, before timing: every input set through every path; rows equal exactly
(torch.equal), bf16 outputs equal bit for bit. The check column says "ok" or
"MISMATCH"; a mismatched row is not timed and the exit status is 1.

--device cpu: the same against ingot's CPU backend (R = 2^20 rows, as
`ingot bench --cpu`), timed by wall clock (median of --reps calls).
--smoke: small shapes (decode B = 1, 8; a ragged batch with empty and short
requests; prefill 1 x 64), R = 2^16 rows on the CPU, fewer replays.

Usage: INGOT_LIBRARY=build/libingot.so PYTHONPATH=python python3 bench/torch_ple.py
Prints a table; --json FILE also writes it.
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch

from gpu_timing import graph_time  # bench/gpu_timing.py (the script's folder)
import ingot

V, N, HPN, BASE, E = 248320, 3, 8, 20000000, 248044  # the bench's real config
D, GRAPH_CALLS, MAX_SLOTS = 160, 20, 20
NAN_FILL = 0x7FC1  # bf16 bits no path writes here (the table has no NaN codes)


class TorchNgram:
    """Row ids in plain PyTorch for one config: the constants live on the
    device once, so that a call launches only capturable kernels (no host
    copies, no synchronisation)."""

    def __init__(self, cfg, device, max_tokens):
        self.n, self.E = cfg.n, cfg.boundary_token
        i64 = dict(dtype=torch.int64, device=device)
        self.mult = torch.tensor(cfg.multipliers, **i64)
        self.P = torch.tensor(cfg.primes, **i64)
        self.off = torch.tensor(cfg.offsets, **i64)
        # head h belongs to order k = 2 + order[h] (2-gram heads first)
        self.order = torch.arange(cfg.n - 1, **i64).repeat_interleave(cfg.heads_per_order)
        self.shifts = torch.arange(cfg.n, **i64)
        self.pos = torch.arange(max_tokens, **i64)

    def row_ids(self, ids, cu, context, out=None):
        """out [T, H] int64 <- the rows of ids [T], cu [B+1], context [B, n-1]."""
        n, T = self.n, ids.shape[0]
        ids, cu, context = ids.long(), cu.long(), context.long()
        pos = self.pos[:T]
        req = torch.searchsorted(cu[1:], pos, right=True)  # b with cu[b] <= t < cu[b+1]
        local = (pos - cu[req])[:, None]  # offset of t in its request
        # x[t, s]: ids[t-s] if local >= s, else context[b][n-1+local-s]
        from_ids = ids[(pos[:, None] - self.shifts).clamp_(min=0)]
        from_context = context[req[:, None], (n - 1 + local - self.shifts).clamp_(0, n - 2)]
        x = torch.where(local >= self.shifts, from_ids, from_context)
        # x_s (s >= 1) is valid iff none of x_1..x_s is the boundary token
        alive = torch.cumprod(x[:, 1:] != self.E, dim=1)
        x[:, 1:] = torch.where(alive != 0, x[:, 1:], self.E)
        prod = x * self.mult  # wrapping int64 products
        mix = [prod[:, 0] ^ prod[:, 1]]
        for k in range(3, n + 1):
            mix.append(mix[-1] ^ prod[:, k - 1])
        mix = torch.stack(mix, dim=1)[:, self.order]  # [T, H]: mix_k of each head's order
        return torch.add(torch.remainder(mix, self.P), self.off, out=out)


def gather_torch(table, rows, scale, out):
    """out [T, H*D] bf16 <- bf16(float(table[rows]) * scale)."""
    T, H = rows.shape
    torch.mul(table[rows].float(), scale, out=out.view(T, H, table.shape[1]))


def gather_tuned(table_words, rows, scale, out):
    """The same bits: the gather in 8-byte words of the table, fp8 -> bf16
    (exact), then the scale in place (fp32 product, one rounding to bf16)."""
    T, H = rows.shape
    o = out.view(T, H, -1)
    o.copy_(table_words[rows].view(torch.float8_e4m3fn))
    o.mul_(scale)


def make_table(rows, device, seed=1):
    """fp8-e4m3 [rows, D]: random bytes, NaN codes S.1111.111 -> S.1111.110."""
    t = torch.empty(rows, D, dtype=torch.uint8, device=device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    step = 1 << 20
    for lo in range(0, rows, step):
        part = t[lo:lo + step]
        part.random_(0, 256, generator=gen)
        part.sub_(((part & 0x7F) == 0x7F).to(torch.uint8))
    return t.view(torch.float8_e4m3fn)


def make_inputs(gen, lengths, device):
    """ids [T], cu [B+1], context [B, n-1], int32, as the bench draws them."""
    B, T = len(lengths), sum(lengths)

    def tokens(shape):
        x = torch.randint(0, V, shape, generator=gen, dtype=torch.int32)
        x[torch.randint(0, 32, shape, generator=gen) == 0] = E
        return x

    ids, context = tokens((T,)), tokens((B, N - 1))
    context[torch.randint(0, 8, (B,), generator=gen) == 0] = E
    cu = torch.zeros(B + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths, dtype=torch.int32).cumsum(0)
    return ids.to(device), cu.to(device), context.to(device)


def slots_for(l2_bytes, set_bytes):
    return max(1, min(MAX_SLOTS, math.ceil(3 * l2_bytes / set_bytes)))


def poison(buf):
    """Fills an output with values no path writes: -1 rows, a NaN pattern."""
    if buf.dtype == torch.bfloat16:
        buf.view(torch.int16).fill_(NAN_FILL)
    else:
        buf.fill_(-1)


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def equal(a, b):
    """Exact equality; bf16 compared bit for bit."""
    return a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def first_difference(a, b):
    bad = bits(a) != bits(b)
    idx = bad.nonzero()
    return f"{int(bad.sum())} of {a.numel()} differ, first at {idx[0].tolist()}" if len(idx) else ""


def wall_time(fn, reps):
    """CPU: median wall clock of one call (after 3 untimed ones), us."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a = time.perf_counter()
        fn()
        times.append((time.perf_counter() - a) * 1e6)
    return statistics.median(times)


class Rotating:
    """fn(slot) as a call of no arguments that moves to the next slot."""

    def __init__(self, fn, slots):
        self.fn, self.slots, self.i = fn, slots, 0

    def __call__(self):
        self.fn(self.i % self.slots)
        self.i += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--smoke", action="store_true", help="small shapes (and table on the CPU)")
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--replays", type=int, default=None, help="CUDA: timed graph replays")
    ap.add_argument("--reps", type=int, default=None, help="CPU: timed calls")
    args = ap.parse_args()
    cuda = args.device == "cuda"
    if cuda and not (torch.cuda.is_available() and ingot.backend_available("cuda")):
        sys.exit("needs a CUDA GPU and ingot's CUDA backend (or --device cpu)")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    replays = args.replays or (30 if args.smoke else 200)
    reps = args.reps or (20 if args.smoke else 50)
    if cuda:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 50 << 20
        R = 1 << 24
        name = torch.cuda.get_device_name(device)
    else:
        l2, R, name = 32 << 20, 1 << (16 if args.smoke else 20), "CPU"
    if args.smoke:
        batches = [("decode", [1]), ("decode", [1] * 8), ("ragged", [0, 1, 2, 5, 0, 13, 40, 1]),
                   ("prefill", [64])]
    else:
        batches = [("decode", [1]), ("decode", [1] * 64), ("decode", [1] * 256),
                   ("prefill", [4096])]
    max_tokens = max(sum(lengths) for _, lengths in batches)

    def timed(fn, slots):
        f = Rotating(fn, slots)
        return graph_time(f, calls=GRAPH_CALLS, replays=replays, warm=10) if cuda else \
            wall_time(f, reps)

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    table = make_table(R, device)  # once: [R, D] fp8, R * 160 bytes
    words = table.view(torch.int64)  # [R, D / 8]
    real = ingot.NgramConfig.derive(V, N, HPN, BASE, boundary_token=E)
    fit = ingot.NgramConfig.derive(V, N, HPN, R // 16 * 15 // 16, boundary_token=E)
    assert fit.table_rows() <= R
    H, scale = real.num_heads, args.scale
    t_real, t_fit = TorchNgram(real, device, max_tokens), TorchNgram(fit, device, max_tokens)
    print(f"# {name}; torch {torch.__version__}; table float8_e4m3fn [{R}, {D}] "
          f"({R * D / 1e9:.2f} GB) on {device.type}; scale {scale}; "
          + (f"CUDA graphs of {GRAPH_CALLS} calls, median of {replays} replays" if cuda
             else f"wall clock, median of {reps} calls"))

    rows_out = []
    failed = False
    with ingot.Context(device.type, device.index or 0) as ctx:
        for shape, lengths in batches:
            B, T = len(lengths), sum(lengths)
            case = f"{shape} B={B} T={T}"
            in_bytes = T * 4 + (B + 1) * 4 + B * (N - 1) * 4
            rows_bytes, out_bytes = T * H * 8, T * H * D * 2
            set_bytes = {"row_ids": in_bytes + rows_bytes, "gather": rows_bytes + out_bytes,
                         "embed": in_bytes + out_bytes}  # one input + output set, as the bench
            S = max(slots_for(l2, b) for b in set_bytes.values())
            S_out = max(slots_for(l2, set_bytes[op]) for op in ("gather", "embed"))
            inputs = [make_inputs(gen, lengths, device) for _ in range(S)]
            rows_i = [torch.empty(T, H, dtype=torch.int64, device=device) for _ in range(S)]
            rows_t = [torch.empty_like(r) for r in rows_i]
            out_i = [torch.empty(T, H * D, dtype=torch.bfloat16, device=device)
                     for _ in range(S_out)]
            out_t = [torch.empty_like(o) for o in out_i]
            # the gather's rows: the real config's, modulo R (ingot bench's gather rows)
            grows = []
            for ids, cu, context in inputs:
                r = torch.empty(T, H, dtype=torch.int64, device=device)
                grows.append(t_real.row_ids(ids, cu, context, r).remainder_(R))

            def ingot_rows(s):
                ingot.ngram_row_ids(ctx, real, *inputs[s], out=rows_i[s])

            def torch_rows(s):
                t_real.row_ids(*inputs[s], out=rows_t[s])

            def ingot_gather(s):
                ingot.ngram_gather(ctx, grows[s], table, scale, out=out_i[s])

            def torch_gather(s):
                gather_torch(table, grows[s], scale, out_t[s])

            def tuned_gather(s):
                gather_tuned(words, grows[s], scale, out_t[s])

            def ingot_embed(s):
                ingot.ngram_embed(ctx, fit, *inputs[s], table, scale, out=out_i[s])

            def torch_embed(s):  # the rows: an intermediate
                gather_torch(table, t_fit.row_ids(*inputs[s]), scale, out_t[s])

            def tuned_embed(s):
                gather_tuned(words, t_fit.row_ids(*inputs[s]), scale, out_t[s])

            ops = [("row_ids", "real", ingot_rows, [torch_rows], rows_i, rows_t),
                   ("gather", "real rows % R", ingot_gather, [torch_gather, tuned_gather],
                    out_i, out_t),
                   ("embed", "real-fit", ingot_embed, [torch_embed, tuned_embed], out_i, out_t)]
            for op, cfg_name, ingot_fn, torch_fns, got_i, got_t in ops:
                slots = slots_for(l2, set_bytes[op])
                ok, note = True, ""
                for s in range(slots):
                    poison(got_i[s])
                    ingot_fn(s)
                    for k, fn in enumerate(torch_fns):
                        poison(got_t[s])
                        fn(s)
                        same = equal(got_t[s], got_i[s])
                        if not same and ok:
                            ok = False
                            note = (f"{op} {case}: {('torch', 'tuned')[k]} vs ingot, slot {s}: "
                                    + first_difference(got_t[s], got_i[s]))
                if cuda:
                    torch.cuda.synchronize()
                    ctx.check_device_errors()
                label = f"{op} ({cfg_name})"
                if not ok:
                    print("MISMATCH:", note)
                    failed = True
                    rows_out.append((label, case, slots, None, None, None, "MISMATCH"))
                    continue
                ti = timed(ingot_fn, slots)
                tt = [timed(fn, slots) for fn in torch_fns]
                if cuda:
                    ctx.check_device_errors()
                rows_out.append((label, case, slots, tt[0], tt[1] if len(tt) > 1 else None, ti,
                                 "ok"))

    def us(x):
        return f"{x:10.2f}" if x is not None else f"{'-':>10}"

    print(f"{'op':26} {'case':26} {'slots':>5} {'torch us':>10} {'tuned us':>10} "
          f"{'ingot us':>10} {'ratio':>7} {'check':>8}")
    for op, case, slots, tt, tw, ti, check in rows_out:
        best = min(x for x in (tt, tw) if x is not None) if tt is not None else None
        ratio = f"{best / ti:7.2f}" if best is not None and ti else f"{'-':>7}"
        print(f"{op:26} {case:26} {slots:5d} {us(tt)} {us(tw)} {us(ti)} {ratio} {check:>8}")
    print("# ratio = the faster torch path / ingot; tuned = the gather in 8-byte words, "
          "then fp8 -> bf16 and the scale in place")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(op=o, case=c, slots=s, torch_us=tt, tuned_us=tw, ingot_us=ti,
                            check=ch, device=name, timing="graph" if cuda else "wall",
                            table_rows=R, scale=scale)
                       for o, c, s, tt, tw, ti, ch in rows_out], f, indent=1)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
