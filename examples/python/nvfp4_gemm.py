"""NVFP4 GEMM with ingot: quantize two float32 matrices to NVFP4 (global
scale, E2M1 values, swizzled E4M3 block scales) and multiply them (the
Python twin of examples/c/nvfp4_gemm.c).

    python examples/python/nvfp4_gemm.py [cpu|cuda]

torch tensors (on the GPU when there is one), or numpy arrays on the CPU
when torch is not installed (or INGOT_EXAMPLE_FRAMEWORK=numpy). Checks: A
decoded by hand from its bytes equals nvfp4_dequantize; D equals a plain
matmul of the dequantized inputs within fp32 rounding; D is within NVFP4's
quantization error of the unquantized product. Exits 1 on a mismatch.
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

M, N, K = 48, 128, 256  # N and K multiples of 64


def to_device(a):
    """A numpy array as an array ingot can use on DEVICE."""
    return a if torch is None else torch.from_numpy(a).to(DEVICE)


def to_numpy(x):
    return np.asarray(x) if torch is None else x.cpu().numpy()


def empty_bytes(n):
    """A uint8 buffer of n bytes on DEVICE (the GEMM's workspace)."""
    if torch is None:
        return np.empty(n, dtype=np.uint8)
    return torch.empty(n, dtype=torch.uint8, device=DEVICE)


def quantize(ctx, x):
    """x [rows, cols] float32 -> NVFP4Matrix(values [rows, cols/2] uint8, the
    swizzled E4M3 scales, the global scale float32 [1])."""
    gs = ingot.nvfp4_global_scale(ctx, x)  # 448 * 6 / amax, computed where x lives
    values, scales = ingot.nvfp4_quantize(ctx, x, gs)
    return ingot.NVFP4Matrix(values, scales, gs)


def e4m3_to_float(b):
    """E4M3 bytes -> float32 (0x7F / 0xFF are NaN)."""
    b = b.astype(np.int32)
    e, m = (b >> 3) & 15, (b & 7).astype(np.float32)
    v = np.where(e == 0, np.ldexp(m, -9), np.ldexp(1 + m / 8, e - 7)).astype(np.float32)
    v = np.where((b & 0x7F) == 0x7F, np.float32(np.nan), v)
    return np.where(b & 0x80, -v, v)


def main():
    failures = []

    def verify(ok, what):
        if not ok:
            print("FAILED:", what)
            failures.append(what)

    ctx = ingot.Context(DEVICE)
    print(f"ingot {ingot.version()}, {DEVICE} backend, {FRAMEWORK} arrays")
    rng = np.random.default_rng(0)
    x_a = rng.standard_normal((M, K), dtype=np.float32)
    x_b = rng.standard_normal((N, K), dtype=np.float32)  # a linear layer's [out, in] weight

    # ---- quantize: global scale (on the device), then values + swizzled scales -------------
    a, b = quantize(ctx, to_device(x_a)), quantize(ctx, to_device(x_b))
    print(f"A: values {tuple(a.values.shape)} uint8, scales {tuple(a.scales.shape)} "
          f"(128x4 swizzled), global scale {float(to_numpy(a.global_scale)[0]):.2f}")

    # ---- the GEMM: D [M, N] = A [M, K] x B [N, K]^T ------------------------------------------
    # The workspace is allocated for you when omitted; passing it (sized by the
    # query) is what a CUDA graph needs.
    ws = empty_bytes(ingot.nvfp4_gemm_workspace_size(ctx, M, N, K))
    d = to_numpy(ingot.nvfp4_gemm(ctx, a, b, dtype="f32", workspace=ws))
    print(f"D {d.shape} float32, workspace {ws.shape[0]} bytes; D[0, 0:4] = {d[0, :4]}")

    # ---- check 1: A's bytes decoded by hand = nvfp4_dequantize ---------------------------------
    deq_a = to_numpy(ingot.nvfp4_dequantize(ctx, a.values, a.scales, a.global_scale))
    deq_b = to_numpy(ingot.nvfp4_dequantize(ctx, b.values, b.scales, b.global_scale))
    values, scales = to_numpy(a.values), to_numpy(a.scales).reshape(-1)
    gs = to_numpy(a.global_scale)[0]
    codes = np.stack([values & 15, values >> 4], axis=-1).reshape(M, K)  # even k: low nibble
    m_idx, k_idx = np.meshgrid(np.arange(M), np.arange(K), indexing="ij")
    sf = e4m3_to_float(scales[ingot.nvfp4_scale_offset(m_idx, k_idx // 16, K)])
    by_hand = (np.array(ingot.E2M1_VALUES, dtype=np.float32)[codes] * sf) / gs
    verify(np.array_equal(by_hand, deq_a), "A decoded by hand differs from nvfp4_dequantize")

    # ---- check 2: D = dequant(A) dequant(B)^T up to fp32 rounding ---------------------------
    ref = deq_a.astype(np.float64) @ deq_b.astype(np.float64).T
    mag = np.abs(deq_a.astype(np.float64)) @ np.abs(deq_b.astype(np.float64)).T
    err = np.abs(d - ref)
    print(f"max |D - dequant(A) dequant(B)^T| = {err.max():.3g} (bound used: 1e-4 * sum_k |a b|)")
    verify((err <= 1e-4 * mag).all(), "D differs from the matmul of the dequantized inputs")

    # ---- check 3: D is close to the unquantized product -----------------------------------------
    exact = x_a.astype(np.float64) @ x_b.astype(np.float64).T
    rel = np.linalg.norm(d - exact) / np.linalg.norm(exact)
    print(f"relative error of D against the float32 product (quantization): {rel:.4f}")
    verify(rel < 0.2, f"quantization error {rel:.3f}: far more than NVFP4's")

    ctx.close()
    if failures:
        print(f"{len(failures)} check(s) FAILED")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
