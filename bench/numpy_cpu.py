"""ingot's CPU backend beside numpy (and torch on the CPU, when installed), on
the `ingot bench --cpu` rows that have a plain numpy / torch formulation:

  ngram/gather   rows [T, H] int64 (the real config's, modulo R) -> bf16 out:
                 numpy   a 256-entry table of bf16(e4m3 value * scale), then
                         np.take of the table rows and of that table;
                 torch   bench/torch_ple.py's gather_torch (table[rows], .float(),
                         torch.mul into the bf16 output).
  ngram/embed    row ids of a ragged batch + the gather (config real-fit):
                 numpy   the row ids in int64 numpy ops (searchsorted, cumprod of
                         the boundary walls, wrapping products, xor.accumulate,
                         floored np.remainder), then the gather above;
                 torch   bench/torch_ple.py's TorchNgram.row_ids + gather_torch.
  sampling/softmax   softmax((x - max) / T) in numpy; torch.softmax(x / T).
  sampling/sample    top-k 50 + top-p 0.9 (T = 1) and top-p 0.9 alone (T = 1,
                 logits shaped like a language model's): the usual sort-based
                 sampler (top-k or a full sort, softmax, cumsum mask, one draw:
                 numpy inverse CDF, torch.multinomial).
  nvfp4/quantize, nvfp4/dequantize   bf16 [784, 2048]: the NVFP4 rules of
                 include/ingot/ingot.h in fp32 numpy / torch ops (E4M3 scales
                 by round-to-nearest-even on the fp32 bits in numpy,
                 .to(torch.float8_e4m3fn) in torch; E2M1 codes by comparisons
                 with the rounding midpoints; the 128x4 scale swizzle as a
                 reshape + swapaxes).

Shapes and data follow tools/bench_ngram.c, bench_sampling.c and
bench_nvfp4.c (fp8 table of 2^20 rows x 160 as `ingot bench --cpu` uses, ids
with 1 in 32 a boundary token, 1 request in 8 fresh; logits 3 x a normal-ish
variate; NVFP4 inputs with per-column scales and outlier columns), drawn
with numpy from a fixed seed; one input set per row, the same for every
path.

Check, before timing: gathers, embeds, quantize values + scales and
dequantize outputs bit for bit; softmax probabilities within 2e-6 relative
(ingot bench's own tolerance between backends; 1e-4 for torch.softmax, whose
CPU kernel's exp is off by ~2e-5); for sampling, the kept set
(ingot's from ingot.sampling_softmax with the same filters) equal, its
probabilities within the same tolerances, and every drawn token inside it. A
mismatch marks the row and makes the exit status 1.

Timing: time.perf_counter around one call, median of repeats (enough for
~0.2 s, at least 5) after warm-up calls. ingot is called through the Python
binding with every output and workspace preallocated (the ctypes call
costs a few us); numpy and torch write into preallocated outputs where
their API allows. ingot's CPU ops and numpy run on one thread; torch uses
its intra-op threads (printed; --torch-threads N sets them).
speed-up = the faster alternative's time / ingot's (> 1: ingot is faster).
If numpy is missing the script says so and exits 0; without torch its
column shows "-".

Usage: INGOT_LIBRARY=build/libingot.so PYTHONPATH=python python3 bench/numpy_cpu.py
       [--quick] [--no-torch] [--torch-threads N] [--filter TEXT]
`make bench` runs it after `ingot bench` whenever that timed the CPU.
"""

import argparse
import os
import platform
import statistics
import sys
import time

try:
    import numpy as np
except ImportError:
    print(f"numpy_cpu.py: SKIPPED: numpy is not installed for {sys.executable} "
          "(`make python-env` makes a venv with it)")
    sys.exit(0)

import ingot

V_REAL, N, HPN, BASE, EOS = 248320, 3, 8, 20000000, 248044  # ingot bench's real config
D, TABLE_ROWS, SCALE = 160, 1 << 20, 0.5
TOP_P = 0.9
# probabilities: ingot bench's tolerance between backends; torch.softmax's CPU
# kernel evaluates exp less exactly (2e-5 relative measured against float64)
RTOL = {"numpy": 2e-6, "torch": 1e-4}
E2M1_F32 = np.array(ingot.E2M1_VALUES, dtype=np.float32)


# ---- numeric helpers ---------------------------------------------------------------------


def e4m3_values():
    """float32 [256]: the value of each E4M3 byte (NaN for S.1111.111)."""
    c = np.arange(256)
    e, m = (c >> 3) & 15, c & 7
    mag = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7))
    mag[(c & 0x7F) == 0x7F] = np.nan
    return np.where(c >> 7, -mag, mag).astype(np.float32)


E4M3_F32 = e4m3_values()


def bf16_bits(f):
    """float32 array -> uint16 bf16 bits, round to nearest even (finite inputs)."""
    u = f.view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def f32_of_bf16(h):
    return (h.astype(np.uint32) << 16).view(np.float32)


def e4m3_code(v):
    """float32 array >= 0 (finite) -> E4M3 bytes: round to nearest even,
    saturating at 448 (0x7E)."""
    u = v.view(np.uint32).astype(np.int64)
    normal = ((u + 0x7FFFF + ((u >> 20) & 1)) >> 20) - ((127 - 7) << 3)  # 3 mantissa bits kept
    sub = np.rint(v * np.float32(512)).astype(np.int64)  # below 2^-6: multiples of 2^-9
    return np.minimum(np.where(v < 2.0 ** -6, sub, normal), 0x7E).astype(np.uint8)


def e2m1_index(a):
    """|y| -> E2M1 magnitude index 0..7: nearest of {0, .5, 1, 1.5, 2, 3, 4, 6},
    ties to the even index, saturating at 6."""
    idx = (a > 0.25).astype(np.uint8)
    for t in (0.75, 1.75, 3.5):  # midpoints whose upper neighbour has the even index
        idx += a >= t
    for t in (1.25, 2.5, 5.0):  # ... whose lower neighbour has it
        idx += a > t
    return idx


def padded_scale_shape(rows, cols):
    return -(-rows // 128) * 128, -(-(cols // 16) // 4) * 4


def swizzled(sf, rows, cols, zeros):
    """Linear scales [rows, cols/16] -> the 128x4 swizzled buffer [Rp, Kp]:
    byte (r, k) at (r//128)*KT*512 + (k//4)*512 + (r%32)*16 + ((r%128)//32)*4 + k%4,
    i.e. [Rp/128, 4, 32, KT, 4] with axes 1 and 3 swapped (numpy or torch)."""
    rp, kp = padded_scale_shape(rows, cols)
    full = zeros((rp, kp))
    full[:rows, :cols // 16] = sf
    return full.reshape(rp // 128, 4, 32, kp // 4, 4).swapaxes(1, 3).reshape(rp, kp)


def unswizzled(buf, rows, cols):
    """The inverse: [Rp, Kp] swizzled -> [rows, cols/16] (numpy or torch)."""
    rp, kp = padded_scale_shape(rows, cols)
    lin = buf.reshape(rp // 128, kp // 4, 32, 4, 4).swapaxes(1, 3).reshape(rp, kp)
    return lin[:rows, :cols // 16]


# ---- numpy formulations --------------------------------------------------------------------


class NumpyNgram:
    """Row ids [T, H] of a ragged batch in int64 numpy ops (ingot.h, PLE section)."""

    def __init__(self, cfg):
        self.n, self.E = cfg.n, cfg.boundary_token
        self.mult = np.array(cfg.multipliers, dtype=np.int64)
        self.P = np.array(cfg.primes, dtype=np.int64)
        self.off = np.array(cfg.offsets, dtype=np.int64)
        self.order = np.repeat(np.arange(cfg.n - 1), cfg.heads_per_order)  # head -> order - 2
        self.shifts = np.arange(cfg.n)

    def row_ids(self, ids, cu, context):
        n, T = self.n, ids.shape[0]
        ids, cu, context = ids.astype(np.int64), cu.astype(np.int64), context.astype(np.int64)
        pos = np.arange(T)
        req = np.searchsorted(cu[1:], pos, side="right")  # b with cu[b] <= t < cu[b+1]
        local = (pos - cu[req])[:, None]
        from_ids = ids[np.maximum(pos[:, None] - self.shifts, 0)]
        from_context = context[req[:, None], np.clip(n - 1 + local - self.shifts, 0, n - 2)]
        x = np.where(local >= self.shifts, from_ids, from_context)
        alive = np.cumprod(x[:, 1:] != self.E, axis=1)  # no boundary token among x_1..x_s
        x[:, 1:] = np.where(alive != 0, x[:, 1:], self.E)
        mix = np.bitwise_xor.accumulate(x * self.mult, axis=1)[:, 1:]  # wrapping; mix_2..mix_n
        return np.remainder(mix[:, self.order], self.P) + self.off


def np_gather(table, rows, scale, tmp, out):
    """out [T, H*D] bf16 bits <- bf16(float(table[rows]) * scale); rows in range."""
    lut = bf16_bits(E4M3_F32 * np.float32(scale))  # every byte's result, fp32 product
    T, H = rows.shape
    np.take(table, rows, axis=0, out=tmp, mode="clip")  # clip: no bounds-check buffer
    np.take(lut, tmp, out=out.reshape(T, H, -1), mode="clip")
    return out


def np_softmax(x, t, out):
    np.subtract(x, x.max(axis=1, keepdims=True), out=out)
    out /= t[:, None]
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def np_filtered(x, k, p):
    """(ids, probs) [B, k or V], most probable first: top-k (k=0: all, a full
    sort), the softmax at T = 1, top-p as the cumsum mask; dropped: prob 0."""
    if k:
        idx = np.argpartition(x, -k, axis=1)[:, -k:]
        idx = np.take_along_axis(idx, np.argsort(-np.take_along_axis(x, idx, 1), axis=1), 1)
    else:
        idx = np.argsort(-x, axis=1)
    vals = np.take_along_axis(x, idx, 1)
    w = np.exp(vals - vals[:, :1])
    probs = w / w.sum(axis=1, keepdims=True)
    cum = np.cumsum(probs, axis=1)
    probs[cum - probs > p] = 0.0
    return idx, probs


def np_sample(x, k, p, rng):
    idx, probs = np_filtered(x, k, p)
    c = np.cumsum(probs, axis=1)
    j = (c < rng.random((len(x), 1)) * c[:, -1:]).sum(axis=1)  # inverse CDF
    return idx[np.arange(len(x)), j]


def np_quantize(x, gs):
    """x [rows, cols] bf16 bits, gs float32 -> (values [rows, cols/2], swizzled scales)."""
    rows, cols = x.shape
    xb = f32_of_bf16(x).reshape(rows, cols // 16, 16)
    sf = e4m3_code(np.abs(xb).max(axis=2) / np.float32(6) * gs)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = xb * (gs / E4M3_F32[sf])[:, :, None]
    codes = e2m1_index(np.abs(y)) | (np.signbit(y).astype(np.uint8) << 3)
    codes[sf == 0] = 0
    codes = codes.reshape(rows, cols)
    values = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return values, swizzled(sf, rows, cols, lambda s: np.zeros(s, np.uint8))


def np_dequantize(values, scales, gs, rows, cols):
    """-> bf16 bits [rows, cols] of (e2m1 * float(sf)) / gs."""
    sf = E4M3_F32[unswizzled(scales, rows, cols)]
    codes = np.stack((values & 15, values >> 4), axis=-1).reshape(rows, cols // 16, 16)
    return bf16_bits((E2M1_F32[codes] * sf[:, :, None] / gs).reshape(rows, cols))


# ---- torch formulations ----------------------------------------------------------------------


def torch_paths():
    """The torch module and the formulations below, or None."""
    try:
        import torch
    except ImportError:
        return None
    from torch_ple import TorchNgram, gather_torch  # bench/torch_ple.py (this folder)

    def filtered(x, k, p):
        vals, idx = torch.topk(x, k, dim=-1) if k else torch.sort(x, dim=-1, descending=True)
        probs = torch.softmax(vals, dim=-1)
        cum = torch.cumsum(probs, dim=-1)
        return idx, probs.masked_fill(cum - probs > p, 0.0)

    def sample(x, k, p, gen):  # bench/torch_sampling.py's torch_topk_topp / torch_topp
        idx, probs = filtered(x, k, p)
        return idx.gather(-1, torch.multinomial(probs, 1, generator=gen)).squeeze(-1)

    strict = torch.tensor([0.25, 1.25, 2.5, 5.0])  # see e2m1_index
    ties_up = torch.tensor([0.75, 1.75, 3.5])
    e2m1 = torch.from_numpy(E2M1_F32)

    def quantize(x, gs):
        rows, cols = x.shape
        xb = x.float().view(rows, cols // 16, 16)
        sf = (xb.abs().amax(dim=2) / 6 * gs).clamp_(max=448).to(torch.float8_e4m3fn)
        y = xb * (gs / sf.float())[:, :, None]
        a = y.abs()
        codes = torch.bucketize(a, strict) + torch.bucketize(a, ties_up, right=True)
        codes = (codes | (torch.signbit(y).long() << 3)).to(torch.uint8)
        codes.masked_fill_((sf.view(torch.uint8) == 0)[:, :, None], 0)
        codes = codes.view(rows, cols)
        values = codes[:, 0::2] | (codes[:, 1::2] << 4)
        return values, swizzled(sf.view(torch.uint8), rows, cols,
                                lambda s: torch.zeros(s, dtype=torch.uint8))

    def dequantize(values, scales, gs, rows, cols):
        sf = unswizzled(scales, rows, cols).view(torch.float8_e4m3fn).float()
        codes = torch.stack((values & 15, values >> 4), dim=-1).view(rows, cols // 16, 16)
        return (e2m1[codes.long()] * sf[:, :, None] / gs).view(rows, cols).to(torch.bfloat16)

    return dict(torch=torch, TorchNgram=TorchNgram, gather=gather_torch, sample=sample,
                filtered=filtered, quantize=quantize, dequantize=dequantize)


def as_numpy(a):
    """A numpy view of a result (torch bf16 as uint16 bits)."""
    if hasattr(a, "numpy"):
        import torch

        if a.dtype == torch.bfloat16:
            return a.view(torch.int16).numpy().view(np.uint16)
        return a.numpy()
    return a


# ---- checks ----------------------------------------------------------------------------------


def check_equal(ref, got):
    ref, got = np.asarray(ref), as_numpy(got)
    if ref.shape != got.shape:
        return f"shape {got.shape}, ingot {ref.shape}"
    bad = ref != got
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        return f"{int(bad.sum())} of {ref.size} differ, first at {where}"
    return None


def rel_error(ref, got):
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    return float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)))


def check_close(ref, got, rtol):
    got = as_numpy(got)
    if ref.shape != got.shape:
        return f"shape {got.shape}, ingot {ref.shape}", None
    err = rel_error(ref, got)
    return (None if err <= rtol else f"relative error {err:.2e} > {rtol:g}"), err


def check_kept(ingot_probs, ids, probs, rtol):
    """ingot_probs [B, V] (0 outside the kept set) against (ids, probs) of an
    alternative; returns (problem or None, max relative error)."""
    ids, probs = as_numpy(ids), as_numpy(probs)
    err = 0.0
    for b in range(len(ids)):
        kept = ids[b][probs[b] > 0]
        want = np.flatnonzero(ingot_probs[b])
        if not np.array_equal(np.sort(kept), want):
            return (f"row {b}: kept {len(kept)} tokens, ingot {len(want)} "
                    f"({len(np.setxor1d(kept, want))} differ)"), None
        mass = probs[b][probs[b] > 0]
        err = max(err, rel_error(ingot_probs[b][kept], mass / mass.sum()))  # renormalised
    return (None if err <= rtol else f"relative error {err:.2e} > {rtol:g}"), err


def check_tokens(ingot_probs, tokens):
    tokens = as_numpy(tokens).reshape(-1)
    outside = [int(t) for b, t in enumerate(tokens) if not ingot_probs[b][t] > 0]
    return f"drawn token(s) {outside} outside ingot's kept set" if outside else None


# ---- timing ----------------------------------------------------------------------------------


def median_us(fn, target_s, min_reps=5, max_reps=500):
    """Median wall clock of one call, us: one warm-up call, a timed one that
    sets the count, then the repeats."""
    fn()
    a = time.perf_counter()
    fn()
    first = time.perf_counter() - a
    reps = int(min(max(target_s / max(first, 1e-7), min_reps), max_reps))
    times = []
    for _ in range(reps):
        a = time.perf_counter()
        fn()
        times.append(time.perf_counter() - a)
    return statistics.median(times) * 1e6


# ---- inputs (as tools/bench_*.c draws them) ----------------------------------------------------


def make_table(rng, rows):
    """fp8-e4m3 bytes [rows, D] without the NaN codes 0x7f / 0xff."""
    t = rng.integers(0, 256, size=(rows, D), dtype=np.uint8)
    t[(t & 0x7F) == 0x7F] ^= 1
    return t


def make_batch(rng, lengths, vocab, eos):
    """ids [T], cu [B+1], context [B, n-1], int32."""
    def tokens(shape):
        x = rng.integers(0, vocab, size=shape, dtype=np.int32)
        x[rng.integers(0, 32, size=shape) == 0] = eos
        return x

    ids, context = tokens((sum(lengths),)), tokens((len(lengths), N - 1))
    context[rng.integers(0, 8, size=len(lengths)) == 0] = eos
    cu = np.zeros(len(lengths) + 1, dtype=np.int32)
    cu[1:] = np.cumsum(lengths)
    return ids, cu, context


def normalish(rng, shape):
    """Irwin-Hall sum of four uniforms, unit variance, float32."""
    s = rng.random(shape + (4,), dtype=np.float32).sum(axis=-1)
    return (s - np.float32(2.0)) * np.float32(np.sqrt(3.0))


def llm_logits(rng, shape):
    """A bulk of 2.5 x normalish, one token in 256 raised by 8 to 24."""
    x = np.float32(2.5) * normalish(rng, shape)
    head = rng.integers(0, 256, size=shape) == 0
    return x + head * (np.float32(8) + np.float32(16) * rng.random(shape, dtype=np.float32))


def activation(rng, rows, cols):
    """bf16 bits [rows, cols]: normalish x 2^u per column (u in [-2, 2]), 1
    column in 128 x 24."""
    col = np.exp2(rng.uniform(-2.0, 2.0, cols)).astype(np.float32)
    col[rng.integers(0, 128, size=cols) == 0] *= 24
    return bf16_bits(normalish(rng, (rows, cols)) * col)


def aligned_bytes(n):
    raw = np.empty(n + 64, dtype=np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + n]


# ---- the rows ----------------------------------------------------------------------------------


class Row:
    """name; ingot() -> result; alts {"numpy" / "torch": fn() -> result};
    check(ingot_result, name, result) -> (problem or None, note)."""

    def __init__(self, name, ingot_fn, alts, check):
        self.name, self.ingot, self.alts, self.check = name, ingot_fn, alts, check


def exact(ref, name, got):
    return check_equal(ref, got), "bit-exact"


def ngram_rows(rng, ctx, tp):
    table = make_table(rng, TABLE_ROWS)
    table_f8 = ingot.reinterpret(table, "f8_e4m3")
    real = ingot.NgramConfig.derive(V_REAL, N, HPN, BASE, boundary_token=EOS)
    fit = ingot.NgramConfig.derive(V_REAL, N, HPN, TABLE_ROWS // 16 * 15 // 16, boundary_token=EOS)
    H = real.num_heads
    np_fit = NumpyNgram(fit)
    if tp:
        torch = tp["torch"]
        table_t = torch.from_numpy(table).view(torch.float8_e4m3fn)
    rows = []
    for op, shape, lengths in (("gather", "decode", [1] * 64), ("gather", "prefill", [4096]),
                               ("embed", "decode", [1]), ("embed", "decode", [1] * 64),
                               ("embed", "prefill", [4096])):
        B, T = len(lengths), sum(lengths)
        ids, cu, context = make_batch(rng, lengths, V_REAL, EOS)
        out_i = np.empty((T, H * D), dtype=np.uint16)
        out_n = np.empty_like(out_i)
        tmp = np.empty((T, H, D), dtype=np.uint8)
        kind = "real" if op == "gather" else "real-fit"
        name = f"ngram/{op} {kind} H={H} D={D} {shape} B={B} T={T}"
        alts = {}
        if op == "gather":
            grows = ingot.ngram_row_ids(real, ids, cu, context, ctx=ctx) % TABLE_ROWS
            ingot_fn = (lambda g=grows, o=out_i:
                        ingot.ngram_gather(g, table_f8, SCALE, out=o, ctx=ctx))
            alts["numpy"] = lambda g=grows, t=tmp, o=out_n: np_gather(table, g, SCALE, t, o)
        else:
            ingot_fn = (lambda i=ids, c=cu, x=context, o=out_i:
                        ingot.ngram_embed(fit, i, c, x, table_f8, SCALE, out=o, ctx=ctx))
            alts["numpy"] = (lambda i=ids, c=cu, x=context, t=tmp, o=out_n:
                             np_gather(table, np_fit.row_ids(i, c, x), SCALE, t, o))
        if tp:
            out_t = torch.empty(T, H * D, dtype=torch.bfloat16)
            if op == "gather":
                g_t = torch.from_numpy(grows)
                alts["torch"] = lambda g=g_t, o=out_t: (tp["gather"](table_t, g, SCALE, o), o)[1]
            else:
                t_fit = tp["TorchNgram"](fit, "cpu", T)
                args = tuple(torch.from_numpy(a) for a in (ids, cu, context))
                alts["torch"] = (lambda a=args, o=out_t, m=t_fit:
                                 (tp["gather"](table_t, m.row_ids(*a), SCALE, o), o)[1])
        rows.append(Row(name, ingot_fn, alts, exact))
    return rows


def sampling_rows(rng, ctx, tp):
    V, rows = 151936, []
    for B in (1, 16):
        x = np.float32(3) * normalish(rng, (B, V))
        t = np.full(B, 0.8, dtype=np.float32)
        probs_i, probs_n = np.empty((B, V), np.float32), np.empty((B, V), np.float32)
        ws = aligned_bytes(ingot.sampling_softmax_workspace_size(B, V, "f32", ctx=ctx))
        ingot_fn = (lambda x=x, t=t, p=probs_i, w=ws:
                    ingot.sampling_softmax(x, temperature=t, probs=p, workspace=w, ctx=ctx))
        alts = {"numpy": lambda x=x, t=t, p=probs_n: np_softmax(x, t, p)}
        if tp:
            torch = tp["torch"]
            alts["torch"] = lambda x=torch.from_numpy(x): torch.softmax(x / 0.8, dim=-1)

        def close(ref, name, got):
            problem, err = check_close(ref, got, RTOL[name])
            return problem, f"rel {err:.1e}" if err is not None else ""

        rows.append(Row(f"sampling/softmax B={B} V={V} f32", ingot_fn, alts, close))

    for label, k, logits in (("top-k 50 + top-p 0.9", 50, normalish),
                             ("top-p 0.9, LLM-like logits", 0, llm_logits)):
        B, p = 1, TOP_P
        x = logits(rng, (B, V))
        if logits is normalish:
            x *= np.float32(3)
        params = dict(temperature=np.ones(B, np.float32), top_k=np.full(B, k, np.int32),
                      top_p=np.full(B, p, np.float32))
        kept = ingot.sampling_softmax(x, **params, ctx=ctx)  # 0 outside the kept set
        seed = np.arange(B, dtype=np.int64) + 1
        tokens = np.empty(B, np.int32)
        ws = aligned_bytes(ingot.sample_workspace_size(B, V, "f32", ctx=ctx))
        ingot_fn = (lambda x=x, pa=params, s=seed, o=tokens, w=ws:
                    ingot.sample(x, **pa, seed=s, tokens=o, workspace=w, ctx=ctx))
        dists = {"numpy": lambda x=x, k=k: np_filtered(x, k, TOP_P)}
        alts = {"numpy": lambda x=x, k=k, g=np.random.default_rng(7): np_sample(x, k, TOP_P, g)}
        if tp:
            torch = tp["torch"]
            x_t, gen = torch.from_numpy(x), torch.Generator().manual_seed(7)
            dists["torch"] = lambda x=x_t, k=k: tp["filtered"](x, k, TOP_P)
            alts["torch"] = lambda x=x_t, k=k, g=gen: tp["sample"](x, k, TOP_P, g)

        def kept_check(ref, name, got, kept=kept, dists=dists):
            problem = check_tokens(kept, ref) or check_tokens(kept, got)
            if problem:
                return problem, ""
            problem, err = check_kept(kept, *dists[name](), RTOL[name])
            n = int(np.count_nonzero(kept))
            return problem, f"{n} kept, rel {err:.1e}" if err is not None else ""

        rows.append(Row(f"sampling/sample {label} B={B} V={V}", ingot_fn, alts, kept_check))
    return rows


def nvfp4_rows(rng, ctx, tp):
    rows_, cols = 784, 2048
    x = activation(rng, rows_, cols)
    gs = np.array([np.float32(2688) / np.abs(f32_of_bf16(x)).max()], dtype=np.float32)
    values = np.empty((rows_, cols // 2), np.uint8)
    scales = np.empty(ingot.nvfp4_scale_shape(rows_, cols), np.uint8)
    ingot.nvfp4_quantize(x, gs, values=values, scales=scales, ctx=ctx)  # dequantize's input
    v_q, s_q = values.copy(), scales.copy()
    out = np.empty((rows_, cols), np.uint16)
    q_alts = {"numpy": lambda: np_quantize(x, gs[0])}
    d_alts = {"numpy": lambda: np_dequantize(v_q, s_q, gs[0], rows_, cols)}
    if tp:
        torch = tp["torch"]
        x_t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
        gs_t, v_t, s_t = (torch.from_numpy(a) for a in (gs, v_q, s_q))
        q_alts["torch"] = lambda: tp["quantize"](x_t, gs_t)
        d_alts["torch"] = lambda: tp["dequantize"](v_t, s_t, gs_t, rows_, cols)

    def quant_check(ref, name, got):
        return (check_equal(ref[0], got[0]) or check_equal(ref[1].reshape(-1), got[1].reshape(-1))
                ), "bit-exact"

    return [
        Row(f"nvfp4/quantize bf16 [{rows_}, {cols}]",
            lambda: ingot.nvfp4_quantize(x, gs, values=values, scales=scales, ctx=ctx),
            q_alts, quant_check),
        Row(f"nvfp4/dequantize bf16 [{rows_}, {cols}]",
            lambda: ingot.nvfp4_dequantize(v_q, s_q, gs, out=out, ctx=ctx),
            d_alts, exact),
    ]


# ---- main --------------------------------------------------------------------------------------


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="time ~0.05 s per path instead of 0.2")
    ap.add_argument("--no-torch", action="store_true", help="numpy only, even with torch")
    ap.add_argument("--filter", default="", help="rows whose name contains TEXT")
    ap.add_argument("--torch-threads", type=int, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args()
    target = 0.05 if args.quick else 0.2
    t0 = time.perf_counter()

    tp = None if args.no_torch else torch_paths()
    if tp and args.torch_threads:
        tp["torch"].set_num_threads(args.torch_threads)
    torch_text = "torch: not installed" if tp is None and not args.no_torch else \
        "torch: not used (--no-torch)" if tp is None else \
        f"torch {tp['torch'].__version__} ({tp['torch'].get_num_threads()} threads)"
    print(f"numpy_cpu.py: ingot {ingot.version()} ({ingot.library_path}), CPU backend, "
          f"through the Python binding")
    print(f"device : {cpu_name()}, {os.cpu_count()} cores; numpy {np.__version__}; {torch_text}")
    print(f"timing : median wall clock of one call (time.perf_counter, ~{target} s of "
          "repeats after warm-up); same inputs for every path")
    print("check  : each alternative against ingot before timing: bit-exact; probabilities "
          f"within {RTOL['numpy']:g} relative (torch.softmax: {RTOL['torch']:g}); sampling: "
          "kept sets equal, drawn tokens inside\n")

    rng = np.random.default_rng(1234)
    ctx = ingot.Context("cpu")
    rows = ngram_rows(rng, ctx, tp) + sampling_rows(rng, ctx, tp) + nvfp4_rows(rng, ctx, tp)
    rows = [r for r in rows if args.filter in r.name]
    width = max([len(r.name) for r in rows] + [4])

    print(f"{'case':{width}}  {'ingot us':>10}  {'numpy us':>10}  {'torch us':>10}  "
          f"{'speed-up':>8}  check")
    problems = []
    for r in rows:
        ref = r.ingot()
        times, notes, bad = {}, {}, []
        for name, fn in r.alts.items():
            try:
                problem, note = r.check(ref, name, fn())
            except Exception as e:  # a formulation this numpy / torch cannot run
                problem, note = f"{type(e).__name__}: {e}", ""
            if problem:
                bad.append(name)
                problems.append(f"{r.name}: {name}: {problem}")
            else:
                notes[name] = note
                times[name] = median_us(fn, target)
        t_ingot = median_us(r.ingot, target)
        best = min(times.values()) if times else None
        speedup = f"{best / t_ingot:7.2f}x" if best else f"{'-':>8}"
        if bad:
            check = f"MISMATCH ({', '.join(bad)})"
        elif len(set(notes.values())) == 1:
            check = next(iter(notes.values()))
        else:
            check = "; ".join(f"{name} {note}" for name, note in notes.items())

        alt_us = [f"{times[n]:10.1f}" if n in times else f"{'-':>10}" for n in ("numpy", "torch")]
        print(f"{r.name:{width}}  {t_ingot:10.1f}  {alt_us[0]}  {alt_us[1]}  {speedup}  {check}",
              flush=True)

    print(f"\nspeed-up = the faster of numpy and torch / ingot (> 1: ingot's CPU backend is "
          f"faster); {len(rows)} rows, {len(problems)} mismatches "
          f"({time.perf_counter() - t0:.1f} s)")
    for p in problems:
        print("MISMATCH:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
