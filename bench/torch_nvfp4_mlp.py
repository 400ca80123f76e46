"""The fused NVFP4 GeGLU against its two baselines, same shapes, same run:

  fused    ingot.nvfp4_geglu: x [M, 2048] NVFP4 x W [32768, 2048] NVFP4
           (interleaved gate/up) -> h [M, 16384] NVFP4, one launch
  cublas   torch.matmul of the bf16 activation and the bf16 weight, dequantized
           once beforehand (3.6x the weight bytes of NVFP4)
  staged   what an engine does without the fused op, every call: dequantize x
           (ingot) -> cuBLAS bf16 GEMM on the dequantized weight -> GeGLU
           (torch, tanh GELU) -> quantize h (ingot)

pi0.5's shapes: M in {784, 816, 880, 968}, K = 2048, 2H = 32768. Each is timed
as replays of a CUDA graph of 20 calls (median of 30 replays / 20).
Usage: INGOT_LIBRARY=build/libingot.so PYTHONPATH=python python3 bench/torch_nvfp4_mlp.py
"""

import argparse
import json

import torch

from gpu_timing import graph_time  # bench/gpu_timing.py (the script's folder)
import ingot


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.manual_seed(0)
    K, H = 2048, 16384
    rows = []
    with ingot.Context("cuda") as ctx:
        gate = torch.randn(H, K, device="cuda", dtype=torch.bfloat16) * 0.02
        up = torch.randn(H, K, device="cuda", dtype=torch.bfloat16) * 0.02
        wv, wsc, wgs = ingot.nvfp4_quantize_gate_up(ctx, gate, up, compute_global_scale=True)
        w_bf16 = ingot.nvfp4_dequantize(ctx, wv, wsc, wgs, dtype="bf16")
        for M in (784, 816, 880, 968):
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            xgs = ingot.nvfp4_global_scale(ctx, x)
            xv, xsc = ingot.nvfp4_quantize(ctx, x, xgs)
            xd = ingot.nvfp4_dequantize(ctx, xv, xsc, xgs, dtype="bf16")
            acc = torch.matmul(xd, w_bf16.t())
            h = torch.nn.functional.gelu(acc[:, 0::2].float(), approximate="tanh") * acc[:, 1::2].float()
            hgs = ingot.nvfp4_global_scale(ctx, h)
            hv = torch.empty(M, H // 2, dtype=torch.uint8, device="cuda")
            hsc = torch.empty(ingot.nvfp4_scale_shape(M, H), dtype=torch.uint8, device="cuda")
            hv2, hsc2 = torch.empty_like(hv), torch.empty_like(hsc)
            ws = torch.empty(max(ingot.nvfp4_geglu_workspace_size(ctx, M, H, K), 16),
                             dtype=torch.uint8, device="cuda")
            acc_buf = torch.empty(M, 2 * H, dtype=torch.bfloat16, device="cuda")

            def fused():
                ingot.nvfp4_geglu(ctx, (xv, xsc, xgs), (wv, wsc, wgs), hgs, values=hv,
                                  scales=hsc, workspace=ws)

            def cublas():
                torch.matmul(xd, w_bf16.t(), out=acc_buf)

            def staged():
                xdd = ingot.nvfp4_dequantize(ctx, xv, xsc, xgs, dtype="bf16")
                a = torch.matmul(xdd, w_bf16.t())
                hh = torch.nn.functional.gelu(a[:, 0::2], approximate="tanh") * a[:, 1::2]
                ingot.nvfp4_quantize(ctx, hh, hgs, values=hv2, scales=hsc2)

            tf, tc, ts = (graph_time(f, replays=30, warm=3) for f in (fused, cublas, staged))
            flops = 2.0 * M * K * 2 * H
            rows.append((M, tf, tc, ts, flops / tf * 1e-6, flops / tc * 1e-6))
            # the fused result against the staged one, as a sanity check
            fused()
            staged()
            torch.cuda.synchronize()
            same = (hv == hv2).float().mean().item()
            rows[-1] += (same,)
    print(f"{'M':>5} {'fused us':>9} {'cuBLAS us':>10} {'staged us':>10} {'fused TF/s':>11} "
          f"{'cuBLAS TF/s':>12} {'fused/cuBLAS':>13} {'fused/staged':>13} {'bytes eq':>9}")
    for M, tf, tc, ts, ff, fc, same in rows:
        print(f"{M:5d} {tf:9.1f} {tc:10.1f} {ts:10.1f} {ff:11.0f} {fc:12.0f} {tf / tc:13.2f} "
              f"{tf / ts:13.2f} {same:9.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(M=r[0], fused_us=r[1], cublas_us=r[2], staged_us=r[3],
                            fused_tflops=r[4], cublas_tflops=r[5], value_bytes_equal=r[6])
                       for r in rows], f, indent=1)


if __name__ == "__main__":
    main()
