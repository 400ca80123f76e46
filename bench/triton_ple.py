"""PLE row ids side by side with a fused Triton hash kernel (the design
engines run today), written here from that description, with ingot in the
same process, on the same inputs.

  triton   one program per token, vectorised over the H heads (tl.arange
           over the next power of two >= H, masked). The engine precomputes,
           and memoises per batch shape, two int32 arrays req[T] (the
           request of token t) and local[T] (t's offset in its request);
           the program reads them, gathers x_0..x_{n-1} from ids (local >= s)
           or the request's context row, replaces every x_s (s >= 1) from the
           first boundary token on by E, mixes in wrapping int64 products
           and xor (head h of order k = 2 + h // hpn takes x_0..x_{k-1}),
           takes the remainder by P[h] with the sign fixed (Triton's % is
           C's) and adds off[h]: rows [T, H] int64, as include/ingot/ingot.h
           (PLE section) defines them. The number of warps (1, 2, 4) is
           tuned per shape: the fastest is reported.
  + index  the same kernel after req / local are built by torch ops each
           call (torch.searchsorted over cu_seqlens, index_select, sub):
           what an engine that does not memoise them pays.
  ingot    ingot.ngram_row_ids (one launch that reads cu_seqlens itself).

Config `real` (bench/torch_ple.py's): V=248320, n=3, hpn=8 (H=16),
base=20000000, E=248044. Timed batches: decode B = 1, 64, 256 (one token a
request) and prefill 1 x 512, 1 x 4096; int32 ids, cu_seqlens and context,
drawn by torch_ple.make_inputs (ids uniform in [0, V), 1 in 32 the boundary
token, contexts likewise, 1 request in 8 fresh). All of one row's input sets
share their cu_seqlens (one batch shape), so the memoised req / local are one
pair, built once before timing.

Timing: each path as replays of a CUDA graph of 20 calls, median over
--replays (200) replays / 20 (bench/gpu_timing.py's graph_time). Call i reads
input set i % slots and writes output set i % slots; slots as torch_ple.py's
row_ids: ceil(3 x L2 / bytes of one set's ids, cu, context and rows), at most
20. ingot/triton = ingot us / triton us (memoised): < 1, ingot is faster.

Check, before timing: every input set through ingot and both Triton paths;
rows equal exactly (torch.equal). Also checked, not timed: the worked example
of the row-id definition (V=512, n=3, hpn=2, base=1000, E=7: the rows
themselves); a ragged batch with empty requests and boundary tokens dense in
ids and contexts; ids across the whole int32 range (negative ones included);
int64 ids across the whole int64 range with n=4, hpn=3 (H=9, a masked head
block) and a negative E; n=2; and a decode step of every position of a
prefill, which must give the prefill's rows. The check column says "ok" or
"MISMATCH"; a mismatched row is not timed and the exit status is 1.

--device cpu: the Triton kernel through Triton's interpreter
(TRITON_INTERPRET=1, numpy on the CPU; 1-element arrays even for scalars, so
int64 products wrap as on the GPU) against ingot's CPU backend, on the check
cases and the --smoke batches: checks only, nothing timed.
--smoke: small shapes (decode B = 1, 8; a ragged batch with empty and short
requests; prefill 1 x 64), fewer replays.
Without torch, Triton or a GPU (and no --device cpu) it prints
"triton_ple: skipped: <why>" and exits 0.

Usage: INGOT_LIBRARY=build/libingot.so PYTHONPATH=python python3 bench/triton_ple.py
Prints a table; --json FILE also writes it.
"""

from __future__ import annotations  # the kernel's tl.constexpr: read by Triton as text

import argparse
import json
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
NAME = "triton_ple"
WARPS = (1, 2, 4)  # the Triton kernel's configurations, tuned per shape

# the worked example of the row-id definition: config, context, ids, rows
WORKED = dict(V=512, n=3, hpn=2, base=1000, E=7, context=[[7, 7]], ids=[3, 4, 7, 5, 6, 8],
              rows=[[883, 1988, 2795, 3714], [105, 1826, 2064, 3895], [365, 2017, 2662, 3065],
                    [131, 1966, 2423, 3454], [364, 1785, 2045, 3807], [210, 1630, 2777, 3529]])

torch = triton = tl = None  # imported by main (the interpreter must be chosen first)


def skip(why):
    print(f"{NAME}: skipped: {why}")
    sys.exit(0)


def die(why):
    print(f"{NAME}: error: {why}", file=sys.stderr)
    sys.exit(1)


# ---- the Triton kernel (jitted by main once triton is imported) -------------------------------


def _row_ids_kernel(ids_ptr, ctx_ptr, ctx_stride, req_ptr, local_ptr, mult_ptr, p_ptr, off_ptr,
                    rows_ptr, rows_stride, E, H,
                    N: tl.constexpr, HPN: tl.constexpr, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    b = tl.load(req_ptr + t).to(tl.int64)
    local = tl.load(local_ptr + t)  # t - cu[b]
    h = tl.arange(0, BLOCK_H)
    live = h < H
    k = 2 + h // HPN  # each head's order: it mixes x_0 .. x_{k-1}
    x = tl.load(ids_ptr + t).to(tl.int64)  # x_0, never masked
    mix = tl.zeros([BLOCK_H], dtype=tl.int64) + x * tl.load(mult_ptr)
    for s in tl.static_range(1, N):
        # x_s: ids[t-s] inside the request, else context[b][n-1+local-s]
        from_ids = tl.load(ids_ptr + (t - s), mask=local >= s, other=0)
        from_ctx = tl.load(ctx_ptr + b * ctx_stride + (N - 1 - s) + local, mask=local < s,
                           other=0)
        x = tl.where(local >= s, from_ids, from_ctx).to(tl.int64)
        if s == 1:
            alive = x != E
        else:
            alive = alive & (x != E)  # from the first boundary token on, every x_s is E
        x = tl.where(alive, x, E)
        mix = tl.where(s < k, mix ^ (x * tl.load(mult_ptr + s)), mix)  # wrapping product
    P = tl.load(p_ptr + h, mask=live, other=1)
    off = tl.load(off_ptr + h, mask=live, other=0)
    r = mix % P  # truncated, as C's: make it the floored remainder
    r = tl.where(r < 0, r + P, r)
    tl.store(rows_ptr + t * rows_stride + h, r + off, mask=live)


class TritonNgram:
    """The engine's side for one config: the constants on the device once,
    req / local built by torch ops (index), the kernel launch (rows)."""

    def __init__(self, cfg, device, max_tokens):
        i64 = dict(dtype=torch.int64, device=device)
        self.n, self.hpn, self.H, self.E = cfg.n, cfg.heads_per_order, cfg.num_heads, \
            cfg.boundary_token
        self.mult = torch.tensor(cfg.multipliers, **i64)
        self.P = torch.tensor(cfg.primes, **i64)
        self.off = torch.tensor(cfg.offsets, **i64)
        self.block = triton.next_power_of_2(self.H)
        self.pos = torch.arange(max_tokens, dtype=torch.int32, device=device)

    def index(self, cu, T):
        """req [T], local [T] int32: b with cu[b] <= t < cu[b+1], and t - cu[b]."""
        pos, cu = self.pos[:T], cu.to(torch.int32)
        req = torch.searchsorted(cu[1:], pos, right=True, out_int32=True)
        return req, pos - cu.index_select(0, req)

    def rows(self, ids, context, req, local, out, warps=4):
        """out [T, H] int64 <- the rows, given the memoised req / local."""
        T = ids.shape[0]
        if T:
            _kernel[(T,)](ids, context, context.stride(0), req, local, self.mult, self.P,
                          self.off, out, out.stride(0), self.E, self.H, N=self.n, HPN=self.hpn,
                          BLOCK_H=self.block, num_warps=warps)
        return out

    def rows_indexed(self, ids, cu, context, out, warps=4):
        """The same, req / local built from cu_seqlens in this call."""
        return self.rows(ids, context, *self.index(cu, ids.shape[0]), out, warps)


_kernel = None


# ---- inputs of the check-only cases ------------------------------------------------------------


def nasty_inputs(gen, lengths, n, E, lo, hi, dtype, device, e_every=4):
    """ids uniform in [lo, hi) with 1 in e_every the boundary token E;
    contexts the same, with E planted at every position in turn (and
    all-E rows); int32 cu_seqlens."""
    B, T = len(lengths), sum(lengths)

    def tokens(shape):
        x = torch.randint(lo, hi, shape, generator=gen, dtype=torch.int64)
        x[torch.randint(0, e_every, shape, generator=gen) == 0] = E
        return x

    ids, context = tokens((T,)), tokens((B, n - 1))
    for b in range(B):
        if b % 3 == 0:
            context[b, (b // 3) % (n - 1)] = E
        elif b % 7 == 1:
            context[b] = E
    cu = torch.zeros(B + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths, dtype=torch.int32).cumsum(0)
    return ids.to(dtype).to(device), cu.to(device), context.to(dtype).to(device)


def decode_of(ids, context, n):
    """One prefill request as a decode batch: one request a position, each
    with the n-1 tokens before it (its context, then the prefill's ids)."""
    L = ids.shape[0]
    history = torch.cat([context[0], ids])
    ctx = torch.stack([history[j:j + n - 1] for j in range(L)])
    return ids.clone(), torch.arange(L + 1, dtype=torch.int32, device=ids.device), ctx


# ---- main -----------------------------------------------------------------------------------


def main():
    global torch, triton, tl, _kernel
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the rows (and the versions) to this file")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: Triton's interpreter against ingot's CPU backend, checks only")
    ap.add_argument("--smoke", action="store_true", help="small shapes, fewer replays")
    ap.add_argument("--replays", type=int, default=None, help="CUDA: timed graph replays")
    args = ap.parse_args()
    cuda = args.device == "cuda"
    # read when the kernel is jitted, below; forced off for the GPU, where it would time numpy
    os.environ["TRITON_INTERPRET"] = "0" if cuda else "1"
    try:
        import torch
    except ImportError:
        skip("no torch (the script makes the inputs and captures the graphs with PyTorch)")
    try:
        import triton
        import triton.language as tl
    except ImportError:
        skip("no triton (pip install triton)")
    if cuda and not torch.cuda.is_available():
        skip("no GPU: torch.cuda.is_available() is False (--device cpu checks the kernel "
             "through Triton's interpreter)")
    try:
        import ingot
    except Exception as e:  # the binding reports a missing or wrong library by raising
        die(f"import ingot failed ({type(e).__name__}: {e}); run with "
            f"INGOT_LIBRARY=<build>/libingot.so PYTHONPATH=python")
    if cuda and not ingot.backend_available("cuda"):
        die(f"ingot's CUDA backend is not available in {ingot.library_path}: INGOT_LIBRARY must "
            f"be a build with CUDA (e.g. build-gpu/libingot.so), or pass --device cpu")
    sys.path.insert(0, str(HERE))
    from gpu_timing import graph_time  # bench/gpu_timing.py
    from torch_ple import (BASE, E, GRAPH_CALLS, HPN, N, V, Rotating, first_difference,
                           make_inputs, poison, slots_for)  # bench/torch_ple.py's
    _kernel = triton.jit(_row_ids_kernel)

    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    replays = args.replays or (30 if args.smoke else 200)
    if cuda:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 50 << 20
        name = torch.cuda.get_device_name(device)
    else:
        l2, name = 32 << 20, "CPU (Triton interpreter)"
    if args.smoke or not cuda:
        batches = [("decode", [1]), ("decode", [1] * 8), ("ragged", [0, 1, 2, 5, 0, 13, 40, 1]),
                   ("prefill", [64])]
    else:
        batches = [("decode", [1]), ("decode", [1] * 64), ("decode", [1] * 256),
                   ("prefill", [512]), ("prefill", [4096])]
    max_tokens = max([sum(lengths) for _, lengths in batches] + [512])  # 512: the check cases'

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    real = ingot.NgramConfig.derive(V, N, HPN, BASE, boundary_token=E)
    w = WORKED
    worked = ingot.NgramConfig.derive(w["V"], w["n"], w["hpn"], w["base"], boundary_token=w["E"])
    wide = ingot.NgramConfig.derive(1 << 40, 4, 3, 5000, boundary_token=-5)  # H = 9
    bigram = ingot.NgramConfig.derive(V, 2, 5, 100000, boundary_token=E)  # n = 2, H = 5
    H = real.num_heads
    print(f"# {name}; torch {torch.__version__}; triton {triton.__version__}; "
          f"ingot {ingot.version()}; config real: V={V} n={N} hpn={HPN} (H={H}) base={BASE} E={E}; "
          + (f"CUDA graphs of {GRAPH_CALLS} calls, median of {replays} replays" if cuda
             else "TRITON_INTERPRET=1: checks only, nothing timed"))

    rows_out = []  # (op, case, slots, ingot us, triton us, + index us, warps, check)
    failed = False
    with ingot.Context(device.type, device.index or 0) as ctx:
        paths = {cfg: TritonNgram(cfg, device, max_tokens) for cfg in (real, worked, wide, bigram)}

        def run_all(cfg, ids, cu, context):
            """(ingot, triton memoised, triton + index) rows of one input set."""
            T, tn = ids.shape[0], paths[cfg]
            got = [torch.empty(T, cfg.num_heads, dtype=torch.int64, device=device)
                   for _ in range(3)]
            for g in got:
                poison(g)
            ingot.ngram_row_ids(cfg, ids, cu, context, out=got[0], ctx=ctx)
            req, local = tn.index(cu, T)  # what the engine memoises
            tn.rows(ids, context, req, local, got[1])
            tn.rows_indexed(ids, cu, context, got[2])
            if cuda:
                torch.cuda.synchronize()
                ctx.check_device_errors()
            return got

        def compare(got, want=None):
            """'' when ingot and both Triton paths (and want, if given) agree."""
            names = ("ingot", "triton", "triton + index")
            if want is not None:
                want = torch.tensor(want, dtype=torch.int64, device=device)
                if want.shape != got[0].shape or not torch.equal(got[0], want):
                    return "ingot vs the worked example: " + (
                        first_difference(got[0], want) if want.shape == got[0].shape else "shape")
            for k in (1, 2):
                if not torch.equal(got[k], got[0]):
                    return f"{names[k]} vs ingot: " + first_difference(got[k], got[0])
            return ""

        def record(op, case, note, slots=None, times=(None, None, None), warps=None):
            nonlocal failed
            if note:
                print("MISMATCH:", f"{op} {case}:", note)
                failed = True
            rows_out.append((op, case, slots, *times, warps, "MISMATCH" if note else "ok"))

        # ---- check-only cases
        wc = torch.tensor(w["context"], dtype=torch.int32, device=device)
        wi = torch.tensor(w["ids"], dtype=torch.int32, device=device)
        wcu = torch.tensor([0, len(w["ids"])], dtype=torch.int32, device=device)
        record("check", "worked example (spec rows)",
               compare(run_all(worked, wi, wcu, wc), w["rows"]))
        ragged = [0, 1, 2, 5, 0, 0, 13, 40, 1, 0, 3, 2, 0]
        for label, cfg, lo, hi, dtype, lengths in (
                ("ragged, empty requests, E dense", real, 0, V, torch.int32, ragged),
                ("ids over all int32", real, -2**31, 2**31, torch.int32, ragged + [300, 7]),
                ("n=4 hpn=3 E=-5, ids over all int64", wide, -2**63, 2**63 - 1, torch.int64,
                 ragged + [100]),
                ("n=2 hpn=5, ids over all int32", bigram, -2**31, 2**31, torch.int32, ragged)):
            for e_every in (4, 64):
                x = nasty_inputs(gen, lengths, cfg.n, cfg.boundary_token, lo, hi, dtype, device,
                                 e_every)
                record("check", f"{label} (1/{e_every} E) T={sum(lengths)}",
                       compare(run_all(cfg, *x)))
        for label, cfg, lo, hi, dtype in (("real", real, 0, V, torch.int32),
                                          ("ids over all int32", real, -2**31, 2**31, torch.int32),
                                          ("n=4 int64", wide, -2**63, 2**63 - 1, torch.int64)):
            L = 48
            ids, cu, context = nasty_inputs(gen, [L], cfg.n, cfg.boundary_token, lo, hi, dtype,
                                            device, 6)
            pre = run_all(cfg, ids, cu, context)
            dec = run_all(cfg, *decode_of(ids, context, cfg.n))
            note = compare(pre) or compare(dec)
            for k, who in enumerate(("ingot", "triton", "triton + index")):
                if not note and not torch.equal(dec[k], pre[k]):
                    note = f"{who}: decode vs prefill: " + first_difference(dec[k], pre[k])
            record("check", f"decode == prefill, {label}, L={L}", note)

        # ---- timed batches (checked first)
        tn = paths[real]
        for shape, lengths in batches:
            B, T = len(lengths), sum(lengths)
            case = f"{shape} B={B} T={T}"
            set_bytes = T * 4 + (B + 1) * 4 + B * (N - 1) * 4 + T * H * 8
            slots = slots_for(l2, set_bytes) if cuda else 2
            inputs = [make_inputs(gen, lengths, device) for _ in range(slots)]
            assert all(torch.equal(cu, inputs[0][1]) for _, cu, _ in inputs)  # one batch shape
            req, local = tn.index(inputs[0][1], T)  # memoised: once per batch shape
            rows_i = [torch.empty(T, H, dtype=torch.int64, device=device) for _ in range(slots)]
            rows_t = [torch.empty_like(r) for r in rows_i]
            note = ""
            for s in range(slots):
                got = run_all(real, *inputs[s])
                note = note or compare(got)
            if note or not cuda:
                record("row_ids (real)", case, note, slots)
                continue

            def ingot_rows(s):
                ingot.ngram_row_ids(real, *inputs[s], out=rows_i[s], ctx=ctx)

            def triton_rows(s, warps):
                ids, cu, context = inputs[s]
                tn.rows(ids, context, req, local, rows_t[s], warps)

            def triton_indexed(s, warps):
                tn.rows_indexed(*inputs[s], rows_t[s], warps)

            def timed(fn, reps=replays):
                return graph_time(Rotating(fn, slots), calls=GRAPH_CALLS, replays=reps, warm=10)

            warps = min(WARPS, key=lambda wp: timed(lambda s: triton_rows(s, wp), 20))
            ti = timed(ingot_rows)
            tt = timed(lambda s: triton_rows(s, warps))
            tx = timed(lambda s: triton_indexed(s, warps))
            ctx.check_device_errors()
            record("row_ids (real)", case, "", slots, (ti, tt, tx), warps)

    def us(x):
        return f"{x:10.2f}" if x is not None else f"{'-':>10}"

    print(f"{'op':16} {'case':50} {'slots':>5} {'ingot us':>10} {'triton us':>10} "
          f"{'+index us':>10} {'ingot/triton':>12} {'warps':>5} {'check':>8}")
    for op, case, slots, ti, tt, tx, warps, check in rows_out:
        ratio = f"{ti / tt:12.2f}" if ti is not None and tt else f"{'-':>12}"
        print(f"{op:16} {case:50} {slots if slots is not None else '-':>5} {us(ti)} {us(tt)} "
              f"{us(tx)} {ratio} {warps if warps is not None else '-':>5} {check:>8}")
    print("# triton = the kernel given memoised req / local; +index = req / local built by torch "
          "ops in each call; ingot/triton = ingot us / triton us (< 1: ingot is faster)"
          if cuda else "# checked only: the interpreter's times say nothing about a GPU")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=name, torch=torch.__version__, triton=triton.__version__,
                           ingot=ingot.version(), timing="graph" if cuda else "none",
                           rows=[dict(op=o, case=c, slots=s, ingot_us=ti, triton_us=tt,
                                      triton_index_us=tx,
                                      ratio=ti / tt if ti is not None and tt else None,
                                      triton_warps=wp, check=ch)
                                 for o, c, s, ti, tt, tx, wp, ch in rows_out]), f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
