"""The NVFP4 GEMM, fused GeGLU and MLP against their baselines, same shapes, same run.

Shapes: K = 2048, H = 16384, M in {1, 16, 64, 128, 256, 784, 816, 880, 968} (--m).
  gate_up  x [M, 2048] x W [32768, 2048]^T (gate/up rows interleaved), NVFP4 operands:
           ingot.nvfp4_gemm -> bf16 [M, 32768]
  geglu    the same GEMM fused with GeGLU and the re-quantize: ingot.nvfp4_geglu -> NVFP4
           h [M, 16384]; staged = what an engine does without the fused op, every call:
           dequantize x (ingot) -> cuBLAS bf16 GEMM -> GeGLU (torch, tanh GELU) -> quantize
           h (ingot)
  down     h [M, 16384] x W_down [2048, 16384]^T: ingot.nvfp4_gemm -> bf16 [M, 2048]
  mlp      ingot.nvfp4_mlp (geglu then down, one call); its baselines are the sums of the
           gate_up and down baselines
Baselines of each GEMM: cublas = torch.matmul of the bf16 operands (the NVFP4 ones
dequantized once beforehand); fp8 = torch._scaled_mm of e4m3 operands with per-tensor
scales (x row-major, W column-major, bf16 out, fast accumulation), skipped with the reason
printed where torch or the device lacks it.

Timing: replays of a CUDA graph of `calls` calls, median of 30 replays / calls
(bench/gpu_timing.py). Every weight operand (NVFP4 values + scales, bf16, fp8) has
`copies` distinct copies, together more than 2x L2 even for the smallest (the NVFP4
W_down); call i uses copy i % copies, calls a multiple of copies, so weights come from
DRAM. Activations and outputs are one fixed set per M.

Floor: the ingot op's bytes (NVFP4 weight values + padded scale buffers, the activation
read, the output written; the MLP's h counts as neither) / the device-to-device copy rate
of a 1 GiB torch copy_ in the same run (bytes read + written). Ratios: ingot/floor,
ingot/cublas, ingot/fp8, fused/staged (geglu). TF/s = 2 M N K / ingot time. Check: gate_up,
down: relative L2 error of ingot against cuBLAS on the same decoded operands; geglu: the
fraction of h value bytes equal to the staged path's; mlp: the fraction of outputs equal to
nvfp4_geglu then nvfp4_gemm.
Usage: INGOT_LIBRARY=build/libingot.so PYTHONPATH=python python3 bench/torch_nvfp4_mlp.py
       [--m 1,16,968] [--json out.json]
"""

import argparse
import json
import math
import sys

import torch

from gpu_timing import graph_time  # bench/gpu_timing.py (the script's folder)
import ingot

K, H = 2048, 16384  # W_gate_up [2H, K], W_down [K, H]
M_DEFAULT = "1,16,64,128,256,784,816,880,968"
MIN_CALLS = 20  # graph calls: the smallest multiple of copies >= this
REPLAYS = 30
COPY_BYTES = 1 << 30


class Rotating:
    """fn(i % copies) as a call of no arguments; i moves on at each call."""

    def __init__(self, fn, copies):
        self.fn, self.copies, self.i = fn, copies, 0

    def __call__(self):
        self.fn(self.i % self.copies)
        self.i += 1


def nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def nvfp4_bytes(rows, cols):
    """Values + padded scale buffer of an NVFP4 [rows, cols] matrix."""
    sr, sc = ingot.nvfp4_scale_shape(rows, cols)
    return rows * cols // 2 + sr * sc


def workspace(size):
    return torch.empty(max(size, 16), dtype=torch.uint8, device="cuda")


def d2d_rate():
    """Bytes read + written per second of a 1 GiB device-to-device copy_."""
    src = torch.ones(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = graph_time(lambda: dst.copy_(src), calls=4, replays=20, warm=2)
    return 2.0 * COPY_BYTES / (us * 1e-6)


def scaled_mm(a, b, scale_a, scale_b):
    """(a * scale_a) @ (b * scale_b) -> bf16: a [M, K] e4m3 row-major, b [K, N] e4m3
    column-major, per-tensor float32 scales."""
    out = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                           use_fast_accum=True)
    return out[0] if isinstance(out, tuple) else out  # older torch also returns amax


def to_fp8(t):
    """(e4m3 values, float32 scale) with t ~ values * scale, amax mapped to 448."""
    scale = (t.abs().amax().float() / 448.0).clamp_min(1e-12)
    return (t.float() / scale).to(torch.float8_e4m3fn), scale


def fp8_unsupported():
    """None where torch._scaled_mm runs on e4m3 here, else the reason."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no _scaled_mm / float8_e4m3fn"
    cc = torch.cuda.get_device_capability()
    if cc < (8, 9):
        return f"compute capability {cc[0]}.{cc[1]} < 8.9"
    try:
        a = torch.ones(32, 64, device="cuda").to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        scaled_mm(a, a.t(), one, one)
        torch.cuda.synchronize()
    except (RuntimeError, TypeError) as e:
        return f"torch._scaled_mm: {str(e).splitlines()[0]}"
    return None


def rel_err(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def ratio(a, b):
    return a / b if a is not None and b is not None else None


def copies_of(t, n):
    return [t.clone() for _ in range(n)]


def nvfp4_copies(values, scales, gs, n):
    return [(v, s, gs) for v, s in zip(copies_of(values, n), copies_of(scales, n))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", default=M_DEFAULT, help="comma list of M (default %(default)s)")
    ap.add_argument("--json")
    args = ap.parse_args()
    ms = [int(v) for v in args.m.split(",")]
    if not (torch.cuda.is_available() and ingot.backend_available("cuda")):
        sys.exit("needs a CUDA GPU and ingot's CUDA backend")
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 0) or 50 << 20
    copies = max(4, math.ceil(2 * l2 / nvfp4_bytes(K, H)))  # W_down NVFP4: the smallest
    calls = copies * math.ceil(MIN_CALLS / copies)
    rate = d2d_rate()
    torch.cuda.empty_cache()  # the copy's 2 GiB
    fp8_reason = fp8_unsupported()
    print(f"# {props.name}; torch {torch.__version__}; L2 {l2 >> 20} MiB; {copies} copies of "
          f"every weight; graphs of {calls} calls, median of {REPLAYS} replays; D2D copy "
          f"{rate * 1e-9:.0f} GB/s (read + written)")
    if fp8_reason:
        print(f"# fp8 column skipped: {fp8_reason}")

    rows = []
    with ingot.Context("cuda") as ctx:
        # weights: NVFP4, then bf16 (dequantized) and fp8 (of the bf16), `copies` of each
        gate = torch.randn(H, K, device="cuda", dtype=torch.bfloat16) * 0.02
        up = torch.randn(H, K, device="cuda", dtype=torch.bfloat16) * 0.02
        gv, gsc, ggs = ingot.nvfp4_quantize_gate_up(ctx, gate, up, compute_global_scale=True)
        down = torch.randn(K, H, device="cuda", dtype=torch.bfloat16) * 0.02
        dgs = ingot.nvfp4_global_scale(ctx, down)
        dv, dsc = ingot.nvfp4_quantize(ctx, down, dgs)
        del gate, up, down
        g16 = ingot.nvfp4_dequantize(ctx, gv, gsc, ggs, dtype="bf16")
        d16 = ingot.nvfp4_dequantize(ctx, dv, dsc, dgs, dtype="bf16")
        w_gu, w_dn = nvfp4_copies(gv, gsc, ggs, copies), nvfp4_copies(dv, dsc, dgs, copies)
        w_gu16, w_dn16 = copies_of(g16, copies), copies_of(d16, copies)
        if not fp8_reason:
            g8, s_gu8 = to_fp8(g16)
            d8, s_dn8 = to_fp8(d16)
            w_gu8, w_dn8 = copies_of(g8, copies), copies_of(d8, copies)
            del g8, d8
        del gv, gsc, dv, dsc, g16, d16
        torch.cuda.empty_cache()
        w_gu_bytes, w_dn_bytes = nvfp4_bytes(2 * H, K), nvfp4_bytes(K, H)

        for M in ms:
            # activations: x NVFP4 [M, K]; h = the fused op's output for x, NVFP4 [M, H]
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            xgs = ingot.nvfp4_global_scale(ctx, x)
            xv, xsc = ingot.nvfp4_quantize(ctx, x, xgs)
            x_in = (xv, xsc, xgs)
            xd = ingot.nvfp4_dequantize(ctx, xv, xsc, xgs, dtype="bf16")
            acc = torch.matmul(xd, w_gu16[0].t())
            h = torch.nn.functional.gelu(acc[:, 0::2].float(), approximate="tanh") * \
                acc[:, 1::2].float()
            hgs = ingot.nvfp4_global_scale(ctx, h)
            del acc, h
            ws_gu = workspace(ingot.nvfp4_gemm_workspace_size(ctx, M, 2 * H, K))
            ws_geglu = workspace(ingot.nvfp4_geglu_workspace_size(ctx, M, H, K))
            ws_dn = workspace(ingot.nvfp4_gemm_workspace_size(ctx, M, K, H))
            ws_mlp = workspace(ingot.nvfp4_mlp_workspace_size(ctx, M, K, H, K))
            h_in = ingot.nvfp4_geglu(ctx, x_in, w_gu[0], hgs, workspace=ws_geglu)
            hd = ingot.nvfp4_dequantize(ctx, h_in.values, h_in.scales, hgs, dtype="bf16")
            if not fp8_reason:
                x8, s_x8 = to_fp8(xd)
                h8, s_h8 = to_fp8(hd)
            # outputs, one set per M
            gu_out = torch.empty(M, 2 * H, dtype=torch.bfloat16, device="cuda")
            gu_ref = torch.empty_like(gu_out)
            hv, hsc = torch.empty_like(h_in.values), torch.empty_like(h_in.scales)
            hv2, hsc2 = torch.empty_like(hv), torch.empty_like(hsc)
            dn_out = torch.empty(M, K, dtype=torch.bfloat16, device="cuda")
            dn_ref, mlp_out = torch.empty_like(dn_out), torch.empty_like(dn_out)

            def gate_up_ingot(i):
                ingot.nvfp4_gemm(ctx, x_in, w_gu[i], out=gu_out, workspace=ws_gu)

            def gate_up_cublas(i):
                torch.matmul(xd, w_gu16[i].t(), out=gu_ref)

            def gate_up_fp8(i):
                scaled_mm(x8, w_gu8[i].t(), s_x8, s_gu8)

            def geglu_ingot(i):
                ingot.nvfp4_geglu(ctx, x_in, w_gu[i], hgs, values=hv, scales=hsc,
                                  workspace=ws_geglu)

            def geglu_staged(i):
                xdd = ingot.nvfp4_dequantize(ctx, xv, xsc, xgs, dtype="bf16")
                a = torch.matmul(xdd, w_gu16[i].t())
                hh = torch.nn.functional.gelu(a[:, 0::2], approximate="tanh") * a[:, 1::2]
                ingot.nvfp4_quantize(ctx, hh, hgs, values=hv2, scales=hsc2)

            def down_ingot(i):
                ingot.nvfp4_gemm(ctx, h_in, w_dn[i], out=dn_out, workspace=ws_dn)

            def down_cublas(i):
                torch.matmul(hd, w_dn16[i].t(), out=dn_ref)

            def down_fp8(i):
                scaled_mm(h8, w_dn8[i].t(), s_h8, s_dn8)

            def mlp_ingot(i):
                ingot.nvfp4_mlp(ctx, x_in, w_gu[i], hgs, w_dn[i], out=mlp_out, workspace=ws_mlp)

            # checks, on copy 0 (every copy holds the same bytes)
            for fn in (gate_up_ingot, gate_up_cublas, geglu_ingot, geglu_staged, down_ingot,
                       down_cublas, mlp_ingot):
                fn(0)
            mlp_ref = ingot.nvfp4_gemm(ctx, h_in, w_dn[0], workspace=ws_dn)
            torch.cuda.synchronize()
            check = {"gate_up": f"rel {rel_err(gu_out, gu_ref):.1e}",
                     "geglu": f"eq {(hv == hv2).float().mean().item():.4f}",
                     "down": f"rel {rel_err(dn_out, dn_ref):.1e}",
                     "mlp": f"eq {(mlp_out == mlp_ref).float().mean().item():.4f}"}

            def timed(fn):
                return graph_time(Rotating(fn, copies), calls=calls, replays=REPLAYS, warm=3)

            def timed_fp8(fn, op):
                if fp8_reason:
                    return None
                try:
                    fn(0)
                    torch.cuda.synchronize()
                except RuntimeError as e:
                    print(f"# fp8 {op} M={M} skipped: {str(e).splitlines()[0]}")
                    return None
                return timed(fn)

            t = {"gate_up": timed(gate_up_ingot), "geglu": timed(geglu_ingot),
                 "down": timed(down_ingot), "mlp": timed(mlp_ingot)}
            cublas = {"gate_up": timed(gate_up_cublas), "down": timed(down_cublas)}
            fp8 = {"gate_up": timed_fp8(gate_up_fp8, "gate_up"),
                   "down": timed_fp8(down_fp8, "down")}
            staged = timed(geglu_staged)
            ctx.check_device_errors()
            cublas["geglu"], fp8["geglu"] = cublas["gate_up"], fp8["gate_up"]
            cublas["mlp"] = cublas["gate_up"] + cublas["down"]
            fp8["mlp"] = None if None in (fp8["gate_up"], fp8["down"]) else \
                fp8["gate_up"] + fp8["down"]

            x_bytes, h_bytes = nbytes(xv, xsc), nbytes(hv, hsc)
            shapes = {  # op: (N, K, bytes of the ingot op)
                "gate_up": (2 * H, K, w_gu_bytes + x_bytes + nbytes(gu_out)),
                "geglu": (2 * H, K, w_gu_bytes + x_bytes + h_bytes),
                "down": (K, H, w_dn_bytes + h_bytes + nbytes(dn_out)),
                "mlp": (None, None, w_gu_bytes + w_dn_bytes + x_bytes + nbytes(mlp_out)),
            }
            for op, (n, k, op_bytes) in shapes.items():
                flops = 2.0 * M * n * k if n else 2.0 * M * (2 * H * K + K * H)
                floor = op_bytes / rate * 1e6
                rows.append(dict(
                    op=op, M=M, N=n, K=k, ingot_us=t[op], cublas_us=cublas[op], fp8_us=fp8[op],
                    staged_us=staged if op == "geglu" else None, floor_us=floor,
                    ingot_bytes=op_bytes, flops=flops, ingot_tflops=flops / t[op] * 1e-6,
                    ingot_over_floor=t[op] / floor, ingot_over_cublas=ratio(t[op], cublas[op]),
                    ingot_over_fp8=ratio(t[op], fp8[op]),
                    fused_over_staged=t[op] / staged if op == "geglu" else None,
                    check=check[op], device=props.name, d2d_gbps=rate * 1e-9, copies=copies,
                    calls=calls))

    def num(v, width, prec):
        return f"{v:{width}.{prec}f}" if v is not None else f"{'-':>{width}}"

    print(f"{'op':8} {'M':>4} {'ingot us':>9} {'cuBLAS us':>9} {'fp8 us':>9} {'staged us':>9} "
          f"{'floor us':>9} {'/floor':>7} {'/cuBLAS':>7} {'/fp8':>7} {'/staged':>7} "
          f"{'TF/s':>6}  check")
    for r in rows:
        print(f"{r['op']:8} {r['M']:4d} {num(r['ingot_us'], 9, 1)} {num(r['cublas_us'], 9, 1)} "
              f"{num(r['fp8_us'], 9, 1)} {num(r['staged_us'], 9, 1)} {num(r['floor_us'], 9, 1)} "
              f"{num(r['ingot_over_floor'], 7, 2)} {num(r['ingot_over_cublas'], 7, 2)} "
              f"{num(r['ingot_over_fp8'], 7, 2)} {num(r['fused_over_staged'], 7, 2)} "
              f"{num(r['ingot_tflops'], 6, 0)}  {r['check']}")
    print("# ratios: ingot time over the floor / cuBLAS / fp8 / the staged path (geglu); mlp's "
          "cuBLAS and fp8: the sums of gate_up's and down's")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
