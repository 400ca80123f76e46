"""NVFP4 GEMM, fused GeGLU and MLP through the Python binding, against numpy:
operands decoded with spec_nvfp4.py (ml_dtypes' float8_e4m3fn for the scales),
the dot products as a float64 matmul (exact here: the products are
multiples of 2^-20 and the sums stay far below 2^33), rounded once to
float32 — the rounding the C reference promises — then the fp32 epilogue.
CPU with numpy arrays; with torch and a GPU also CUDA against the CPU
(summation-order tolerance) and CUDA-graph capture / replay."""

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("ml_dtypes")

import ml_dtypes  # noqa: E402

import ingot  # noqa: E402
import spec_nvfp4 as spec  # noqa: E402

BF16 = ml_dtypes.bfloat16
CANONICAL_NAN = np.uint32(0x7FC00000)


def random_nvfp4(rng, rows, cols, pad=0):
    """A random NVFP4 matrix: (values [rows, cols/2] with `pad` extra bytes
    per row, swizzled scales with NaN (0x7F) padding, gs float32 [1])."""
    values = rng.integers(0, 256, size=(rows, cols // 2 + pad), dtype=np.uint8)[:, :cols // 2]
    linear = rng.integers(0x28, 0x48, size=(rows, cols // 16), dtype=np.uint8)
    linear[rng.random(linear.shape) < 0.03] = 0
    swz = spec.swizzle(linear, rows, cols)
    sr, sc = spec.scale_shape(rows, cols)
    real = np.zeros(sr * sc, dtype=bool)
    rr, kk = np.meshgrid(np.arange(rows), np.arange(cols // 16), indexing="ij")
    real[spec.scale_offset(rr, kk, cols).ravel()] = True
    flat = swz.reshape(-1).copy()
    flat[~real] = 0x7F  # padding is never read
    gs = np.array([np.ldexp(1.0 + rng.random(), int(rng.integers(-4, 8)))], dtype=np.float32)
    return values, flat.reshape(sr, sc), gs


def decode(values, scales, rows, cols):
    """float64 [rows, cols] of e2m1 * e4m3 (no global scale)."""
    codes = spec.unpack_nibbles(values)
    sf = spec.e4m3_value(spec.unswizzle(scales, rows, cols)).astype(np.float64)
    return spec.E2M1[codes].astype(np.float64) * np.repeat(sf, 16, axis=1)


def acc_ref(a, b):
    """fp32 accumulators acc[m, n] (exact dot products rounded once)."""
    (av, asc, _), (bv, bsc, _) = a, b
    m, n, k = av.shape[0], bv.shape[0], 2 * av.shape[1]
    return (decode(av, asc, m, k) @ decode(bv, bsc, n, k).T).astype(np.float32)


def alpha_ref(ga, gb):
    ga, gb = np.float32(ga[0]), np.float32(gb[0])
    if not (spec.gs_valid(ga) and spec.gs_valid(gb)):
        return np.float32(np.nan)
    return np.float32(1) / (ga * gb)


def gelu_tanh_ref(g):
    """The portable fp32 GeGLU of the C code, through the library itself is
    not available in Python: compare h codes with a tolerance instead."""
    g = g.astype(np.float64)
    return 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))


def f32_bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def canonical(x):
    """float32 with every NaN as 0x7FC00000 (bits)."""
    bits = f32_bits(x).copy()
    bits[np.isnan(x)] = CANONICAL_NAN
    return bits


@pytest.mark.parametrize("m,k,n", [(1, 64, 64), (17, 128, 192), (130, 2048, 64)])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_gemm_matches_numpy(ctx, rng, m, k, n, dtype):
    a = random_nvfp4(rng, m, k, pad=8)
    b = random_nvfp4(rng, n, k)
    out = ingot.nvfp4_gemm(ctx, a, b, dtype=dtype)
    want = acc_ref(a, b) * alpha_ref(a[2], b[2])
    assert out.shape == (m, n)
    if dtype == "f32":
        np.testing.assert_array_equal(f32_bits(out), canonical(want))
    else:
        got = np.asarray(out).view(np.uint16)
        np.testing.assert_array_equal(got, want.astype(BF16).view(np.uint16))


def test_gemm_explicit_out_workspace_and_strides(ctx, rng):
    m, k, n = 40, 256, 128
    a, b = random_nvfp4(rng, m, k), random_nvfp4(rng, n, k, pad=16)
    big = np.full((m, n + 32), 7.0, dtype=np.float32)
    out = big[:, :n]
    need = ingot.nvfp4_gemm_workspace_size(ctx, m, n, k)
    ws = np.empty(need + 64, np.uint8)
    ws = ws[(-ws.ctypes.data) % 16:][:need]
    r = ingot.nvfp4_gemm(ctx, a, b, out=out, workspace=ws)
    assert r is out
    np.testing.assert_array_equal(f32_bits(out), canonical(acc_ref(a, b) * alpha_ref(a[2], b[2])))
    assert (big[:, n:] == 7.0).all()
    # a Python float global scale
    r2 = ingot.nvfp4_gemm(ctx, (a[0], a[1], float(a[2][0])), b, dtype="f32")
    np.testing.assert_array_equal(f32_bits(r2), f32_bits(out))


def test_gemm_nan_rules(ctx, rng):
    m, k, n = 8, 64, 64
    a, b = random_nvfp4(rng, m, k), random_nvfp4(rng, n, k)
    a[1].reshape(-1)[spec.scale_offset(3, 2, k)] = 0xFF
    out = ingot.nvfp4_gemm(ctx, a, b, dtype="f32")
    assert (f32_bits(out[3]) == CANONICAL_NAN).all()
    assert not np.isnan(np.delete(out, 3, axis=0)).any()
    for bad in (0.0, -1.0, np.inf, np.nan):
        out = ingot.nvfp4_gemm(ctx, (a[0], a[1], np.array([bad], np.float32)), b, dtype="bf16")
        assert (np.asarray(out).view(np.uint16) == 0x7FC0).all()


def geglu_ref(x, w, h_gs):
    """h (float32 [M, H]) by numpy, with numpy's tanh GeLU (the library's
    portable one is within 1.1e-5 relative of it)."""
    acc = acc_ref(x, w)
    alpha = alpha_ref(x[2], w[2])
    g, u = acc[:, 0::2] * alpha, acc[:, 1::2] * alpha
    return (gelu_tanh_ref(g) * u.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("m,k,hidden", [(1, 64, 32), (33, 256, 96), (130, 128, 64)])
def test_geglu_matches_numpy(ctx, rng, m, k, hidden):
    x = random_nvfp4(rng, m, k)
    w = random_nvfp4(rng, 2 * hidden, k)
    h = geglu_ref(x, w, None)
    h_gs = np.array([2688.0 / max(np.abs(h).max(), 1e-30)], np.float32)
    values, scales, gs = ingot.nvfp4_geglu(ctx, x, w, h_gs)
    assert gs is h_gs and values.shape == (m, hidden // 2)
    assert scales.shape == ingot.nvfp4_scale_shape(m, hidden)
    want_values, want_scales = spec.quantize(h, h_gs[0])
    # h from numpy's tanh differs from the portable gelu by ~1e-6 relative:
    # codes may move one step on a rounding boundary, scales rarely.
    got_codes = spec.unpack_nibbles(values).astype(int)
    want_codes = spec.unpack_nibbles(want_values).astype(int)
    same = (got_codes == want_codes).mean()
    assert same >= 0.995, same
    sf_same = (spec.unswizzle(np.asarray(scales), m, hidden) == want_scales).mean()
    assert sf_same >= 0.99, sf_same
    # padding bytes are 0
    sr, sc = scales.shape
    rr, kk = np.meshgrid(np.arange(sr), np.arange(sc), indexing="ij")
    pad = (rr >= m) | (kk >= hidden // 16)
    flat = np.asarray(scales).reshape(-1)
    assert (flat[spec.scale_offset(rr[pad], kk[pad], hidden)] == 0).all()


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_mlp_equals_geglu_then_gemm(ctx, rng, dtype):
    m, k, hidden, n = 20, 128, 128, 64
    x, w, d = random_nvfp4(rng, m, k), random_nvfp4(rng, 2 * hidden, k), random_nvfp4(rng, n, hidden)
    h_gs = np.array([0.25], np.float32)
    h = ingot.nvfp4_geglu(ctx, x, w, h_gs)
    two = ingot.nvfp4_gemm(ctx, h, d, dtype=dtype)
    one = ingot.nvfp4_mlp(ctx, x, w, h_gs, d, dtype=dtype)
    assert np.asarray(one).tobytes() == np.asarray(two).tobytes()
    assert ingot.nvfp4_mlp_workspace_size(ctx, m, k, hidden, n) >= m * hidden // 2


def test_empty_batch(ctx, rng):
    b = random_nvfp4(rng, 64, 64)
    a = (np.zeros((0, 32), np.uint8), np.zeros((0, 4), np.uint8), np.ones(1, np.float32))
    out = ingot.nvfp4_gemm(ctx, a, b)
    assert out.shape == (0, 64)
    assert ingot.nvfp4_gemm_workspace_size(ctx, 0, 64, 64) == 0


def test_errors(ctx, rng):
    a = random_nvfp4(rng, 4, 64)
    b = random_nvfp4(rng, 96, 64)
    with pytest.raises(ingot.IngotError, match="N = shape\\[0\\] = 96"):
        ingot.nvfp4_gemm(ctx, a, b)
    b = random_nvfp4(rng, 64, 128)
    with pytest.raises(ingot.IngotError, match="b.values: shape\\[1\\] = 64"):
        ingot.nvfp4_gemm(ctx, a, b)
    with pytest.raises(ingot.IngotError, match="k = 80"):
        ingot.nvfp4_gemm_workspace_size(ctx, 1, 64, 80)
    b = random_nvfp4(rng, 64, 64)
    with pytest.raises(ingot.IngotError) as e:
        ingot.nvfp4_gemm(ctx, a, b, workspace=np.zeros(16, np.uint8))
    assert e.value.status == ingot.Status.INSUFFICIENT_WORKSPACE
    with pytest.raises(TypeError, match="a: pass"):
        ingot.nvfp4_gemm(ctx, a[:2], b)
    with pytest.raises(ValueError, match="dtype"):
        ingot.nvfp4_gemm(ctx, a, b, dtype="f16")


# ---- CUDA ----------------------------------------------------------------------------------


def _cuda_ready():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and ingot.backend_available("cuda")


needs_cuda = pytest.mark.skipif(not _cuda_ready(),
                                reason="needs torch, a CUDA GPU and ingot's CUDA backend")


@pytest.fixture
def cuda_ctx():
    with ingot.Context("cuda", 0) as c:
        yield c


def _to_cuda(mat):
    import torch

    return tuple(torch.from_numpy(np.ascontiguousarray(t)).cuda() for t in mat)


def _rel_l2(got, want):
    got, want = got.astype(np.float64), want.astype(np.float64)
    return np.sqrt(((got - want) ** 2).sum() / max((want ** 2).sum(), 1e-300))


@needs_cuda
@pytest.mark.parametrize("m,k,n", [(1, 64, 64), (130, 2048, 192), (968, 2048, 2048)])
def test_cuda_gemm_matches_cpu(ctx, cuda_ctx, rng, m, k, n):
    a, b = random_nvfp4(rng, m, k), random_nvfp4(rng, n, k)
    want = ingot.nvfp4_gemm(ctx, a, b, dtype="f32")
    got = ingot.nvfp4_gemm(cuda_ctx, _to_cuda(a), _to_cuda(b), dtype="f32").cpu().numpy()
    assert _rel_l2(got, want) < 1e-5


@needs_cuda
def test_cuda_geglu_and_mlp_match_cpu(ctx, cuda_ctx, rng):
    m, k, hidden, n = 130, 512, 256, 128
    x, w, d = random_nvfp4(rng, m, k), random_nvfp4(rng, 2 * hidden, k), random_nvfp4(rng, n, hidden)
    h_gs = np.array([0.5], np.float32)
    hv, hs, _ = ingot.nvfp4_geglu(ctx, x, w, h_gs)
    import torch

    cv, cs, _ = ingot.nvfp4_geglu(cuda_ctx, _to_cuda(x), _to_cuda(w), torch.from_numpy(h_gs).cuda())
    codes_cpu, codes_gpu = spec.unpack_nibbles(hv), spec.unpack_nibbles(cv.cpu().numpy())
    assert (codes_cpu == codes_gpu).mean() >= 0.999
    out_cpu = ingot.nvfp4_mlp(ctx, x, w, h_gs, d, dtype="f32")
    out_gpu = ingot.nvfp4_mlp(cuda_ctx, _to_cuda(x), _to_cuda(w), torch.from_numpy(h_gs).cuda(),
                              _to_cuda(d), dtype="f32").cpu().numpy()
    assert _rel_l2(out_gpu, out_cpu) < 0.05


@needs_cuda
def test_cuda_gemm_graph_capture(ctx, cuda_ctx, rng):
    import torch

    m, k, n = 64, 256, 128
    a, b = random_nvfp4(rng, m, k), random_nvfp4(rng, n, k)
    ad, bd = _to_cuda(a), _to_cuda(b)
    out = torch.empty(m, n, dtype=torch.float32, device="cuda")
    ws = torch.empty(max(ingot.nvfp4_gemm_workspace_size(cuda_ctx, m, n, k), 1),
                     dtype=torch.uint8, device="cuda")

    def step():
        ingot.nvfp4_gemm(cuda_ctx, ad, bd, out=out, workspace=ws)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(2):
        a2 = random_nvfp4(rng, m, k)
        for dst, src in zip(ad, a2):
            dst.copy_(torch.from_numpy(np.ascontiguousarray(src)))
        graph.replay()
        torch.cuda.synchronize()
        want = ingot.nvfp4_gemm(ctx, a2, b, dtype="f32")
        assert _rel_l2(out.cpu().numpy(), want) < 1e-5


# ---- errors name what the caller passed -------------------------------------------------------


def test_workspace_queries_reject_overflowing_sizes(ctx):
    m64 = 2**63 - 1
    with pytest.raises(ingot.IngotError, match=r"m = 9223372036854775807, k = 64: a\.values") as e:
        ingot.nvfp4_gemm_workspace_size(ctx, m64, 1 << 56, 64)
    assert e.value.status == ingot.Status.INVALID_ARGUMENT
    with pytest.raises(ingot.IngotError, match=r"m = 4294967296, n = 4294967296: d \[m, n\]"):
        ingot.nvfp4_gemm_workspace_size(ctx, 1 << 32, 1 << 32, 64)  # 2^64 = SIZE_MAX + 1 elements
    with pytest.raises(ingot.IngotError, match=r"hidden = 9223372036854775776: w_gate_up's "
                                               r"2 \* hidden rows overflow"):
        ingot.nvfp4_geglu_workspace_size(ctx, 1, m64 // 32 * 32, 64)
    with pytest.raises(ingot.IngotError, match=r"m = 72057594037927936, hidden = "
                                               r"72057594037927936: h\.values"):
        ingot.nvfp4_geglu_workspace_size(ctx, 1 << 56, 1 << 56, 64)
    with pytest.raises(ingot.IngotError, match=r"n = 72057594037927936, hidden = "
                                               r"72057594037927936: w_down\.values"):
        ingot.nvfp4_mlp_workspace_size(ctx, 1, 64, 1 << 56, 1 << 56)
    with pytest.raises(ingot.IngotError, match=r"m = 4294967296, n = 4294967296: out \[m, n\]"):
        ingot.nvfp4_mlp_workspace_size(ctx, 1 << 32, 64, 64, 1 << 32)
    with pytest.raises(ingot.IngotError, match=r"m = -1 < 0"):
        ingot.nvfp4_mlp_workspace_size(ctx, -1, 64, 64, 64)
    with pytest.raises(TypeError, match=r"m: 1\.5 is not an integer"):
        ingot.nvfp4_gemm_workspace_size(ctx, 1.5, 64, 64)
    assert ingot.nvfp4_gemm_workspace_size(ctx, 1 << 55, 64, 64) > 0


def test_ops_name_the_context_and_the_arguments(ctx, rng):
    a = random_nvfp4(rng, 4, 64)
    b = random_nvfp4(rng, 64, 64)
    # without a context: the default one of the arrays' device, the same bytes
    np.testing.assert_array_equal(ingot.nvfp4_gemm(a, b, dtype="f32"),
                                  ingot.nvfp4_gemm(ctx, a, b, dtype="f32"))
    for call in (lambda: ingot.nvfp4_gemm(None, a, b), lambda: ingot.nvfp4_geglu(None, a, b, 1.0),
                 lambda: ingot.nvfp4_mlp(None, a, b, 1.0, b),
                 lambda: ingot.nvfp4_gemm_workspace_size(None, 4, 64, 64)):
        with pytest.raises(TypeError, match=r"\(\w+, \.\.\.\): the first argument is None, "
                                            r"expected \w+ \(an ingot\.Context may come before it"):
            call()
    with pytest.raises(TypeError, match=r"^pass device= .* or ctx="):
        ingot.nvfp4_gemm_workspace_size(4, 64, 64)
    assert (ingot.nvfp4_gemm_workspace_size(4, 64, 64, device="cpu")
            == ingot.nvfp4_gemm_workspace_size(ctx, 4, 64, 64))
    with pytest.raises(TypeError, match=r"^a: None, expected an NVFP4 matrix"):
        ingot.nvfp4_gemm(ctx, None, b)
    with pytest.raises(TypeError, match=r"^b\.scales: None"):
        ingot.nvfp4_gemm(ctx, a, (b[0], None, b[2]))
    with pytest.raises(ingot.IngotError, match=r"out \(d\): shape\[1\] = 63, expected N \(b rows\)"):
        ingot.nvfp4_gemm(ctx, a, b, out=np.zeros((4, 63), np.float32))
    with pytest.raises(ValueError, match=r"^dtype: 'f99' is not an ingot dtype"):
        ingot.nvfp4_gemm(ctx, a, b, dtype="f99")
    # geglu: h's values and scales are named as the caller passed them
    w = random_nvfp4(rng, 64, 64)  # 2H = 64
    sr, sc = ingot.nvfp4_scale_shape(4, 32)
    with pytest.raises(ingot.IngotError, match=r"values \(h\.values\): shape\[0\] = 5"):
        ingot.nvfp4_geglu(ctx, a, w, 1.0, values=np.zeros((5, 16), np.uint8))
    with pytest.raises(ingot.IngotError, match=r"scales \(h\.scales\): shape\[0\] = 256"):
        ingot.nvfp4_geglu(ctx, a, w, 1.0, scales=np.zeros((256, sc), np.uint8))
    with pytest.raises(ValueError, match=r"^w_gate_up\.values: shape \(40, 32\), expected \[2H, "
                                         r"K/2\] with 2H a positive multiple of 64"):
        ingot.nvfp4_geglu(ctx, a, random_nvfp4(rng, 40, 64), 1.0)
    with pytest.raises(ValueError, match=r"^x\.values: shape \(128,\), expected 2-D"):
        ingot.nvfp4_geglu(ctx, (a[0].reshape(-1), a[1], a[2]), w, 1.0)
    h = ingot.nvfp4_geglu(ctx, a, w, 1.0)
    assert h.values.shape == (4, 16) and h.scales.shape == (sr, sc)


def test_rename_arguments():
    from ingot._tensor import rename_arguments

    names = {"d": "out"}
    assert (rename_arguments("ingot_nvfp4_gemm: d: shape[0] = 3", names)
            == "ingot_nvfp4_gemm: out (d): shape[0] = 3")
    assert (rename_arguments("ingot_nvfp4_gemm: workspace: overlaps d (an output may ...)", names)
            == "ingot_nvfp4_gemm: workspace: overlaps out (d) (an output may ...)")
    assert (rename_arguments("ingot_nvfp4_gemm: a.values: shape[1] = 3", names)
            == "ingot_nvfp4_gemm: a.values: shape[1] = 3")
