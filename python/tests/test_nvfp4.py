"""NVFP4 ops through the Python binding, against spec_nvfp4.py (the format
written out in numpy with ml_dtypes' float4_e2m1fn / float8_e4m3fn for the
roundings, independently of the C code): CPU with numpy arrays everywhere;
with torch and a GPU also CUDA == CPU byte for byte, and CUDA-graph
capture / replay."""


import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("ml_dtypes")

import ml_dtypes  # noqa: E402

import ingot  # noqa: E402
import spec_nvfp4 as spec  # noqa: E402

BF16 = ml_dtypes.bfloat16
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": BF16}
F32_MAX = np.finfo(np.float32).max


def random_matrix(rng, rows, cols, dtype, spread=True):
    """Values over many binades, some exact ties after scaling, zero blocks."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    if spread and x.size:
        x *= np.exp2(rng.integers(-12, 12, (rows, 1))).astype(np.float32)
        x[rng.random(x.shape) < 0.05] = 0
        blocks = x.reshape(rows, cols // 16, 16) if cols % 16 == 0 else None
        if blocks is not None and blocks.shape[1]:
            blocks[rng.random(blocks.shape[:2]) < 0.1] = 0  # whole zero blocks
    return x.astype(DTYPES[dtype])


def quantize_ref(x, gs):
    values, linear = spec.quantize(x, gs)
    return values, spec.swizzle(linear, x.shape[0], x.shape[1])


def assert_same_bytes(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    g = got.view(np.uint8).reshape(-1)
    w = want.view(np.uint8).reshape(-1)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (f"{what}: {bad.size} bytes differ, first at {bad[:8]}: "
                           f"got {g[bad[:8]]}, want {w[bad[:8]]}")


def f32_scalar(v):
    return np.array([v], dtype=np.float32)


# ---- shapes and layout ------------------------------------------------------------------


@pytest.mark.parametrize("rows,cols", [(0, 0), (1, 16), (127, 48), (128, 64), (129, 80),
                                       (300, 4096), (5, 0)])
def test_scale_shape(rows, cols):
    assert ingot.nvfp4_scale_shape(rows, cols) == spec.scale_shape(rows, cols)


@pytest.mark.parametrize("rows,cols", [(-1, 16), (4, 15), (4, -16), (2**63 - 1, 16)])
def test_scale_shape_rejects(rows, cols):
    with pytest.raises(ingot.IngotError) as e:
        ingot.nvfp4_scale_shape(rows, cols)
    assert e.value.status == ingot.Status.INVALID_ARGUMENT
    assert "ingot_nvfp4_scale_shape" in e.value.message


@pytest.mark.parametrize("rows,cols", [(1, 16), (130, 48), (256, 64), (300, 272)])
def test_scale_offset_is_the_spec_swizzle(rows, cols):
    r, k = np.meshgrid(np.arange(rows), np.arange(cols // 16), indexing="ij")
    offs = ingot.nvfp4_scale_offset(r, k, cols)
    np.testing.assert_array_equal(offs, spec.scale_offset(r, k, cols))
    sr, sc = ingot.nvfp4_scale_shape(rows, cols)
    assert len(np.unique(offs)) == offs.size and offs.max() < sr * sc  # injective, in range
    assert ingot.nvfp4_scale_offset(33, 5, 128) == 512 + 16 + 4 + 1  # a hand-checked point


# ---- quantize ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,cols", [(1, 16), (37, 48), (128, 64), (130, 80), (257, 272)])
def test_quantize_random(ctx, rng, dtype, rows, cols):
    x = random_matrix(rng, rows, cols, dtype)
    gs = ingot.nvfp4_global_scale(ctx, x)
    assert gs.dtype == np.float32 and gs.shape == (1,)
    assert gs[0] == spec.global_scale(x)
    values, scales = ingot.nvfp4_quantize(ctx, x, gs)
    want_values, want_scales = quantize_ref(x, gs[0])
    assert_same_bytes(values, want_values, "values")
    assert_same_bytes(scales, want_scales, "scales (padding included)")


@pytest.mark.parametrize("gs", [1.0, 3.0e-3, 2.0**-8, 0.37, 700.0, 1.0e6, 3.0e30])
def test_quantize_any_global_scale(ctx, rng, gs):
    """Fixed gs over many magnitudes: subnormal block scales, saturated ones."""
    x = random_matrix(rng, 70, 96, "f32")
    values, scales = ingot.nvfp4_quantize(ctx, x, f32_scalar(gs))
    want_values, want_scales = quantize_ref(x, gs)
    assert_same_bytes(values, want_values, "values")
    assert_same_bytes(scales, want_scales, "scales")


def test_quantize_ties_and_magnitudes(ctx):
    """gs = 1 and a block amax of 6 give sf = 1.0, so codes are E2M1(x) itself;
    the expected indices are written out by hand from docs/nvfp4.md."""
    x = np.array([[6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 0.5, 1, 1.5, 2, 3, 4, 0, 0.1],
                  [-6, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, -0.5, -1, -1.5, -2, -3, -4,
                   -0.0, -0.1]], dtype=np.float32)
    values, scales = ingot.nvfp4_quantize(ctx, x, 1.0)
    pos = [7, 0, 2, 2, 4, 4, 6, 6, 1, 2, 3, 4, 5, 6, 0, 0]
    neg = [8 | c for c in pos]  # -0.0 and -0.1 keep the sign: code 8
    np.testing.assert_array_equal(spec.unpack_nibbles(values), [pos, neg])
    linear = ingot.nvfp4_unswizzle_scales(ctx, scales, 2, 16)
    np.testing.assert_array_equal(linear, [[0x38], [0x38]])  # E4M3 1.0


def test_quantize_nibble_order(ctx):
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, 0] = 6  # even element -> low nibble of byte 0
    x[0, 19] = -6  # odd element -> high nibble of byte 9
    values, _ = ingot.nvfp4_quantize(ctx, x, 1.0)
    assert values[0, 0] == 0x07 and values[0, 9] == 0xF0
    assert np.count_nonzero(values) == 2


def test_quantize_saturation(ctx):
    """p = gs * amax / 6 >= 448 gives sf = 448 (0x7E), and codes past 6
    saturate to +-6."""
    x = np.tile(np.array([1, -1, 0.5, 2] * 4, dtype=np.float32), (3, 1))
    values, scales = ingot.nvfp4_quantize(ctx, x, 1.0e6)
    np.testing.assert_array_equal(ingot.nvfp4_unswizzle_scales(ctx, scales, 3, 16), 0x7E)
    codes = spec.unpack_nibbles(values)
    np.testing.assert_array_equal(codes[:, :4], [[7, 15, 7, 7]] * 3)
    assert_same_bytes(values, quantize_ref(x, 1.0e6)[0], "values")


def test_quantize_subnormal_and_underflowing_scales(ctx):
    """gs * amax / 6 = 2^-8 is an E4M3 subnormal (0x02 = 2 * 2^-9); 2^-10 is
    a tie between 0 and 2^-9 and rounds to 0 (even): that block is all 0."""
    x = np.zeros((2, 16), dtype=np.float32)
    x[0, :] = np.linspace(-6, 6, 16, dtype=np.float32)
    x[1, :] = np.linspace(-1.5, 1.5, 16, dtype=np.float32)  # amax 1.5 -> p = 2^-10
    gs = 2.0**-8
    values, scales = ingot.nvfp4_quantize(ctx, x, gs)
    linear = ingot.nvfp4_unswizzle_scales(ctx, scales, 2, 16)
    np.testing.assert_array_equal(linear, [[0x02], [0x00]])
    assert not values[1].any()
    assert_same_bytes(values, quantize_ref(x, gs)[0], "values")


def test_quantize_zero_blocks(ctx):
    x = np.zeros((3, 48), dtype=np.float32)
    x[1] = -0.0  # amax 0 -> sf 0 -> all codes 0 (not the -0 code 8)
    x[2, 16:32] = 1.0
    values, scales = ingot.nvfp4_quantize(ctx, x, 10.0)
    codes = spec.unpack_nibbles(values)
    assert not codes[:2].any() and not codes[2, :16].any() and not codes[2, 32:].any()
    linear = ingot.nvfp4_unswizzle_scales(ctx, scales, 3, 48)
    np.testing.assert_array_equal(linear[:2], 0)
    assert linear[2, 0] == 0 and linear[2, 2] == 0 and linear[2, 1] != 0


def test_quantize_nonfinite(ctx, rng):
    """NaN -> code 0, +Inf -> 0x7, -Inf -> 0xF; neither counts in amax; a block
    of only non-finite values has sf 0 and all codes 0. The counter adds."""
    x = (rng.standard_normal((4, 32)) * 0.01).astype(np.float32)
    x[0, [0, 3, 5]] = [np.nan, np.inf, -np.inf]
    x[1, :16] = [np.nan, np.inf, -np.inf, np.nan] * 4
    x[3, 20] = np.nan
    count = np.array([5], dtype=np.uint32)
    values, scales = ingot.nvfp4_quantize(ctx, x, 448.0, nonfinite_count=count)
    assert count[0] == 5 + 3 + 16 + 1
    codes = spec.unpack_nibbles(values)
    assert list(codes[0, [0, 3, 5]]) == [0, 7, 15]
    assert not codes[1, :16].any()
    assert codes[3, 20] == 0
    assert_same_bytes(values, quantize_ref(x, 448.0)[0], "values")
    assert_same_bytes(scales, quantize_ref(x, 448.0)[1], "scales")


@pytest.mark.parametrize("gs", [0.0, -1.0, -0.0, np.inf, np.nan])
def test_quantize_unusable_global_scale(ctx, rng, gs):
    """A gs that is not finite or not > 0 gives sf = 0 and all codes 0."""
    x = random_matrix(rng, 5, 32, "bf16")
    values, scales = ingot.nvfp4_quantize(ctx, x, f32_scalar(gs))
    assert not values.any() and not scales.any()


def test_quantize_strided_rows_and_outputs(ctx, rng):
    """Any row stride for x and values (last dimension contiguous); 1-D and
    float8_e4m3fn scale buffers."""
    big = random_matrix(rng, 40, 96, "bf16")
    x = big[:, :64]  # row stride 96
    gs = ingot.nvfp4_global_scale(ctx, x)
    values_big = np.full((40, 48), 0xAB, dtype=np.uint8)
    values = values_big[:, 4:36]  # row stride 48
    sr, sc = ingot.nvfp4_scale_shape(40, 64)
    scales = np.full(sr * sc, 0xCD, dtype=np.uint8)
    ingot.nvfp4_quantize(ctx, x, gs, values=values,
                         scales=ingot.reinterpret(scales, "f8_e4m3"))
    want_values, want_scales = quantize_ref(np.ascontiguousarray(x), gs[0])
    assert_same_bytes(values, want_values, "values")
    assert_same_bytes(scales.reshape(sr, sc), want_scales, "scales")
    assert (values_big[:, :4] == 0xAB).all() and (values_big[:, 36:] == 0xAB).all()


def test_quantize_errors(ctx, rng):
    x = random_matrix(rng, 4, 32, "f32")
    with pytest.raises(ingot.IngotError, match="multiple of 16"):
        ingot.nvfp4_quantize(ctx, np.zeros((4, 24), np.float32), 1.0,
                             values=np.zeros((4, 12), np.uint8),
                             scales=np.zeros((128, 4), np.uint8))
    with pytest.raises(ingot.IngotError, match="scales"):
        ingot.nvfp4_quantize(ctx, x, 1.0, scales=np.zeros((128, 3), np.uint8))
    with pytest.raises(ingot.IngotError, match="values"):
        ingot.nvfp4_quantize(ctx, x, 1.0, values=np.zeros((4, 15), np.uint8))
    with pytest.raises(ingot.IngotError, match="global_scale"):
        ingot.nvfp4_quantize(ctx, x, np.ones(2, np.float32))
    with pytest.raises(ingot.IngotError) as e:
        ingot.nvfp4_quantize(ctx, np.zeros((4, 32), np.int32), 1.0)
    assert e.value.status == ingot.Status.INVALID_ARGUMENT


# ---- global scale -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_global_scale(ctx, rng, dtype):
    big = random_matrix(rng, 33, 50, dtype, spread=False)  # any cols
    x = big[:, 3:40]  # strided rows
    x[4, 4] = np.nan
    x[7, 1] = np.inf
    gs = ingot.nvfp4_global_scale(ctx, x)
    assert gs[0] == spec.global_scale(x) == np.float32(2688) / np.abs(
        np.where(np.isfinite(x.astype(np.float32)), x.astype(np.float32), 0)).max()


def test_global_scale_edges(ctx):
    assert ingot.nvfp4_global_scale(ctx, np.zeros((3, 16), np.float32))[0] == 1.0
    assert ingot.nvfp4_global_scale(ctx, np.zeros((0, 16), np.float32))[0] == 1.0
    only_nan = np.full((2, 16), np.nan, np.float32)
    assert ingot.nvfp4_global_scale(ctx, only_nan)[0] == 1.0
    tiny = np.full((1, 4), 1e-38, np.float32)  # 2688 / 1e-38 overflows
    assert ingot.nvfp4_global_scale(ctx, tiny)[0] == F32_MAX
    out = np.zeros(1, np.float32)
    assert ingot.nvfp4_global_scale(ctx, np.array([[-6.0, 2.0]], np.float32), out=out) is out
    assert out[0] == np.float32(448)


# ---- dequantize ---------------------------------------------------------------------------


@pytest.mark.parametrize("rows,cols", [(1, 16), (45, 48), (129, 96)])
def test_dequantize_random_codes(ctx, rng, rows, cols):
    """Every code and scale byte (NaN bytes 0x7F / 0xFF included) against the
    reference, f32 and bf16 bit for bit."""
    values = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
    linear = rng.integers(0, 256, (rows, cols // 16), dtype=np.uint8)
    linear[rng.random(linear.shape) < 0.05] = 0x7F
    scales = spec.swizzle(linear, rows, cols)
    for gs in (1.0, 0.37, 2688.0 / 3.5, 1.0e-30, 3.0e38):
        out = ingot.nvfp4_dequantize(ctx, values, scales, f32_scalar(gs))
        assert out.dtype == np.float32 and out.shape == (rows, cols)
        assert_same_bytes(out, spec.dequantize(values, linear, gs), f"f32 out, gs={gs}")
        out16 = ingot.nvfp4_dequantize(ctx, values, scales, gs, dtype="bf16")
        assert_same_bytes(out16.view(np.uint16), spec.dequantize_bf16_bits(values, linear, gs),
                          f"bf16 out, gs={gs}")


@pytest.mark.parametrize("gs", [0.0, -2.0, np.inf, np.nan])
def test_dequantize_unusable_global_scale(ctx, rng, gs):
    values = rng.integers(0, 256, (3, 8), dtype=np.uint8)
    scales = spec.swizzle(rng.integers(0, 0x7F, (3, 1), dtype=np.uint8), 3, 16)
    out = ingot.nvfp4_dequantize(ctx, values, scales, f32_scalar(gs))
    np.testing.assert_array_equal(out.view(np.uint32), 0x7FC00000)
    out16 = ingot.nvfp4_dequantize(ctx, values, scales, f32_scalar(gs), dtype="bf16")
    np.testing.assert_array_equal(out16.view(np.uint16), 0x7FC0)


def test_dequantize_is_exact_for_power_of_two_gs(ctx, rng):
    values = rng.integers(0, 256, (8, 32), dtype=np.uint8)
    linear = rng.integers(0, 0x7F, (8, 4), dtype=np.uint8)
    out = ingot.nvfp4_dequantize(ctx, values, spec.swizzle(linear, 8, 64), 4.0)
    exact = (spec.E2M1[spec.unpack_nibbles(values)].astype(np.float64)
             * np.repeat(spec.e4m3_value(linear), 16, axis=1).astype(np.float64) / 4.0)
    np.testing.assert_array_equal(out.astype(np.float64), exact)


def test_dequantize_strided_out(ctx, rng):
    x = random_matrix(rng, 20, 64, "f32")
    values, scales = ingot.nvfp4_quantize(ctx, x, 100.0)
    big = np.full((20, 80), -1.0, np.float32)
    out = big[:, 8:72]
    assert ingot.nvfp4_dequantize(ctx, values, scales, 100.0, out=out) is out
    assert_same_bytes(out, spec.dequantize(values, spec.unswizzle(scales, 20, 64), 100.0), "out")
    assert (big[:, :8] == -1).all() and (big[:, 72:] == -1).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_error_bound(ctx, rng, dtype):
    """|dequant(quant(x)) - x| <= (|x|/4 + sf/(4 gs)) * (1 + 2^-20) wherever the
    block's p = gs * amax / 6 lies in [2^-6, 448] (ingot.h)."""
    x = random_matrix(rng, 150, 128, dtype)
    gs = ingot.nvfp4_global_scale(ctx, x)
    values, scales = ingot.nvfp4_quantize(ctx, x, gs)
    y = ingot.nvfp4_dequantize(ctx, values, scales, gs).astype(np.float64)
    xf = x.astype(np.float64)
    linear = ingot.nvfp4_unswizzle_scales(ctx, scales, 150, 128)
    sf = np.repeat(spec.e4m3_value(linear).astype(np.float64), 16, axis=1)
    p = np.repeat(np.float64(gs[0]) * spec.block_amax(x.astype(np.float32)) / 6, 16, axis=1)
    ok = (p >= 2.0**-6) & (p <= 448)
    assert ok.mean() > 0.2
    bound = (np.abs(xf) / 4 + sf / (4 * np.float64(gs[0]))) * (1 + 2.0**-20)
    err = np.abs(y - xf)
    assert (err[ok] <= bound[ok]).all(), f"max excess {(err - bound)[ok].max()}"


# ---- scale layout -------------------------------------------------------------------------


@pytest.mark.parametrize("rows,cols", [(1, 16), (100, 48), (128, 64), (300, 208)])
def test_swizzle_round_trip(ctx, rng, rows, cols):
    linear = rng.integers(0, 256, (rows, cols // 16), dtype=np.uint8)
    swizzled = ingot.nvfp4_swizzle_scales(ctx, linear)
    assert_same_bytes(swizzled, spec.swizzle(linear, rows, cols), "swizzled (padding 0)")
    back = ingot.nvfp4_unswizzle_scales(ctx, swizzled, rows, cols)
    assert_same_bytes(back, linear, "unswizzled")
    # float8_e4m3fn views, a strided linear output, a 1-D swizzled buffer
    big = np.zeros((rows, cols // 16 + 3), np.uint8)
    out = big[:, 1:1 + cols // 16]
    ingot.nvfp4_unswizzle_scales(ctx, swizzled.reshape(-1), out=ingot.reinterpret(out, "f8_e4m3"))
    assert_same_bytes(out, linear, "unswizzled into a strided f8 view")
    sw8 = np.full(swizzled.shape, 0xEE, np.uint8)
    ingot.nvfp4_swizzle_scales(ctx, ingot.reinterpret(linear, "f8_e4m3"), out=sw8)
    assert_same_bytes(sw8, swizzled, "swizzled again (every byte written)")


def test_unswizzle_needs_the_shape(ctx):
    with pytest.raises(ValueError, match="rows and cols"):
        ingot.nvfp4_unswizzle_scales(ctx, np.zeros((128, 4), np.uint8))


# ---- gate / up ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h,k", [(1, 16), (70, 48), (64, 128)])
def test_gate_up_interleave(ctx, rng, dtype, h, k):
    gate = random_matrix(rng, h, k, dtype)
    up = random_matrix(rng, h, k, dtype) * DTYPES[dtype](3)
    values, scales, gs = ingot.nvfp4_quantize_gate_up(ctx, gate, up)
    assert gs[0] == spec.global_scale(gate, up)
    w = spec.interleave(gate, up)
    want_values, want_scales = quantize_ref(w, gs[0])
    assert_same_bytes(values, want_values, "values")
    assert_same_bytes(scales, want_scales, "scales")
    # the same as quantizing the interleaved matrix with the library itself
    v2, s2 = ingot.nvfp4_quantize(ctx, w, gs)
    assert_same_bytes(values, v2, "values vs nvfp4_quantize(W)")
    assert_same_bytes(scales, s2, "scales vs nvfp4_quantize(W)")


def test_gate_up_given_global_scale_and_strides(ctx, rng):
    both = random_matrix(rng, 30, 96, "bf16")
    gate, up = both[:, :48], both[:, 48:]  # row stride 96 each
    gs = f32_scalar(123.5)
    values, scales, out_gs = ingot.nvfp4_quantize_gate_up(ctx, gate, up, gs)
    assert out_gs is gs and gs[0] == np.float32(123.5)  # read, not written
    want_values, want_scales = quantize_ref(spec.interleave(gate, up), 123.5)
    assert_same_bytes(values, want_values, "values")
    assert_same_bytes(scales, want_scales, "scales")
    # compute_global_scale=True writes into a given array
    gs2 = f32_scalar(0)
    ingot.nvfp4_quantize_gate_up(ctx, gate, up, gs2, compute_global_scale=True)
    assert gs2[0] == spec.global_scale(gate, up)


def test_gate_up_errors(ctx, rng):
    gate = random_matrix(rng, 4, 32, "f32")
    with pytest.raises(ingot.IngotError, match="up"):
        ingot.nvfp4_quantize_gate_up(ctx, gate, random_matrix(rng, 5, 32, "f32"))
    with pytest.raises(ingot.IngotError, match="dtype"):
        ingot.nvfp4_quantize_gate_up(ctx, gate, gate.astype(np.float16))
    with pytest.raises(ValueError):
        ingot.nvfp4_quantize_gate_up(ctx, gate, gate, compute_global_scale=False)


# ---- CUDA ---------------------------------------------------------------------------------------


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


def _torch_inputs(rng, rows, cols, dtype):
    import torch

    x = random_matrix(rng, rows, cols, dtype)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    bits = np.ascontiguousarray(x).view(np.int32 if dtype == "f32" else np.int16).copy()
    t = torch.from_numpy(bits).view(
        {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype])
    return x, t.cuda()


def test_torch_cpu_tensors(ctx, rng):
    """torch CPU tensors in, torch tensors allocated out (CPU context)."""
    torch = pytest.importorskip("torch")
    x = random_matrix(rng, 70, 64, "f32")
    xt = torch.from_numpy(x.copy()).to(torch.bfloat16)
    xb = xt.view(torch.int16).numpy().view(BF16)  # the same bf16 values in numpy
    gs = ingot.nvfp4_global_scale(ctx, xt)
    assert isinstance(gs, torch.Tensor) and gs.dtype == torch.float32 and gs.shape == (1,)
    values, scales = ingot.nvfp4_quantize(ctx, xt, gs)
    assert values.dtype == torch.uint8 and tuple(scales.shape) == ingot.nvfp4_scale_shape(70, 64)
    want_values, want_scales = quantize_ref(xb, gs.item())
    assert_same_bytes(values.numpy(), want_values, "values")
    assert_same_bytes(scales.numpy(), want_scales, "scales")
    out = ingot.nvfp4_dequantize(ctx, values, scales.view(torch.float8_e4m3fn), float(gs.item()),
                                 dtype="bf16")
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (70, 64)
    v2, s2, g2 = ingot.nvfp4_quantize_gate_up(ctx, xt[:35], xt[35:])
    assert isinstance(g2, torch.Tensor) and g2.item() == spec.global_scale(xb)


@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,cols", [(1, 16), (130, 80), (1000, 2048)])
def test_cuda_matches_cpu(ctx, cuda_ctx, rng, dtype, rows, cols):
    import torch

    x, xt = _torch_inputs(rng, rows, cols, dtype)
    count = torch.zeros(1, dtype=torch.int32, device="cuda")
    gs = ingot.nvfp4_global_scale(cuda_ctx, xt)
    values, scales = ingot.nvfp4_quantize(cuda_ctx, xt, gs,
                                          nonfinite_count=ingot.reinterpret(count, "u32"))
    out = ingot.nvfp4_dequantize(cuda_ctx, values, scales, gs)
    out16 = ingot.nvfp4_dequantize(cuda_ctx, values, scales, gs, dtype="bf16")
    lin = ingot.nvfp4_unswizzle_scales(cuda_ctx, scales, rows, cols)
    sw = ingot.nvfp4_swizzle_scales(cuda_ctx, lin)
    torch.cuda.synchronize()

    cpu_count = np.zeros(1, np.uint32)
    cpu_gs = ingot.nvfp4_global_scale(ctx, x)
    cpu_values, cpu_scales = ingot.nvfp4_quantize(ctx, x, cpu_gs, nonfinite_count=cpu_count)
    assert_same_bytes(gs.cpu().numpy(), cpu_gs, "global scale")
    assert_same_bytes(values.cpu().numpy(), cpu_values, "values")
    assert_same_bytes(scales.cpu().numpy(), cpu_scales, "scales")
    assert count.item() == cpu_count[0] == 3
    assert_same_bytes(out.cpu().numpy(), ingot.nvfp4_dequantize(ctx, cpu_values, cpu_scales,
                                                                 cpu_gs), "dequantize f32")
    assert_same_bytes(out16.view(torch.int16).cpu().numpy(),
                      ingot.nvfp4_dequantize(ctx, cpu_values, cpu_scales, cpu_gs,
                                             dtype="bf16").view(np.int16), "dequantize bf16")
    assert_same_bytes(sw.cpu().numpy(), cpu_scales, "swizzle(unswizzle(scales))")


@needs_cuda
def test_cuda_gate_up_matches_cpu(ctx, cuda_ctx, rng):
    x, xt = _torch_inputs(rng, 192, 256, "bf16")
    gate, up = xt[:96], xt[96:]
    values, scales, gs = ingot.nvfp4_quantize_gate_up(cuda_ctx, gate, up)
    cpu = ingot.nvfp4_quantize_gate_up(ctx, x[:96], x[96:])
    assert_same_bytes(values.cpu().numpy(), cpu[0], "values")
    assert_same_bytes(scales.cpu().numpy(), cpu[1], "scales")
    assert_same_bytes(gs.cpu().numpy(), cpu[2], "global scale")


@needs_cuda
def test_cuda_graph_capture_and_replay(ctx, cuda_ctx, rng):
    """global_scale + quantize + dequantize captured once into static buffers,
    replayed with new inputs copied in; every replay equals the CPU."""
    import torch

    rows, cols = 200, 512
    x = torch.zeros(rows, cols, dtype=torch.bfloat16, device="cuda")
    gs = torch.zeros(1, dtype=torch.float32, device="cuda")
    values = torch.empty(rows, cols // 2, dtype=torch.uint8, device="cuda")
    scales = torch.empty(ingot.nvfp4_scale_shape(rows, cols), dtype=torch.uint8, device="cuda")
    out = torch.empty(rows, cols, dtype=torch.float32, device="cuda")

    def step():
        ingot.nvfp4_global_scale(cuda_ctx, x, out=gs)
        ingot.nvfp4_quantize(cuda_ctx, x, gs, values=values, scales=scales)
        ingot.nvfp4_dequantize(cuda_ctx, values, scales, gs, out=out)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        host, dev = _torch_inputs(rng, rows, cols, "bf16")
        x.copy_(dev)
        graph.replay()
        torch.cuda.synchronize()
        cpu_gs = ingot.nvfp4_global_scale(ctx, host)
        cpu_values, cpu_scales = ingot.nvfp4_quantize(ctx, host, cpu_gs)
        assert_same_bytes(gs.cpu().numpy(), cpu_gs, "global scale")
        assert_same_bytes(values.cpu().numpy(), cpu_values, "values")
        assert_same_bytes(scales.cpu().numpy(), cpu_scales, "scales")
        assert_same_bytes(out.cpu().numpy(),
                          ingot.nvfp4_dequantize(ctx, cpu_values, cpu_scales, cpu_gs), "out")


# ---- errors name what the caller passed ----------------------------------------------------------


def test_dequantize_names_values_not_the_allocated_out(ctx):
    scales = np.zeros((128, 4), np.uint8)
    for context in ((ctx,), ()):  # with and without a context
        with pytest.raises(ValueError, match=r"^values: shape \(8, 15\), expected \[rows, "
                                             r"cols/2\] with cols a multiple of 16") as e:
            ingot.nvfp4_dequantize(*context, np.zeros((8, 15), np.uint8), scales, 1.0)
        assert "out" not in str(e.value)
    with pytest.raises(ValueError, match=r"^values: shape \(16,\), expected 2-D \[rows, cols/2\]"):
        ingot.nvfp4_dequantize(ctx, np.zeros(16, np.uint8), scales, 1.0)
    with pytest.raises(TypeError, match=r"^values: dtype f32, expected uint8"):
        ingot.nvfp4_dequantize(ctx, np.zeros((8, 8), np.float32), scales, 1.0)
    with pytest.raises(TypeError, match=r"^values: None"):
        ingot.nvfp4_dequantize(ctx, None, scales, 1.0)
    with pytest.raises(ValueError, match=r"^dtype: 'f64' is not an ingot dtype"):
        ingot.nvfp4_dequantize(ctx, np.zeros((8, 8), np.uint8), scales, 1.0, dtype="f64")
    # an out the caller passed is still blamed when it is the wrong one
    with pytest.raises(ingot.IngotError, match=r"out: shape\[1\] = 24"):
        ingot.nvfp4_dequantize(ctx, np.zeros((8, 8), np.uint8), scales, 1.0,
                               out=np.zeros((8, 24), np.float32))
    with pytest.raises(ingot.IngotError, match=r"values: shape\[1\] = 15, expected cols / 2 = 8"):
        ingot.nvfp4_dequantize(ctx, np.zeros((8, 15), np.uint8), scales, 1.0,
                               out=np.zeros((8, 16), np.float32))


def test_format_ops_take_the_context_from_their_arrays(ctx, rng):
    x = rng.standard_normal((4, 32)).astype(np.float32)
    gs = ingot.nvfp4_global_scale(x)
    assert_same_bytes(gs, ingot.nvfp4_global_scale(ctx, x), "global scale")
    values, scales = ingot.nvfp4_quantize(x, gs)
    want_values, want_scales = ingot.nvfp4_quantize(ctx, x, gs)
    assert_same_bytes(values, want_values, "values")
    assert_same_bytes(scales, want_scales, "scales")
    assert_same_bytes(ingot.nvfp4_dequantize(values, scales, gs, ctx=ctx),
                      ingot.nvfp4_dequantize(ctx, values, scales, gs), "dequantize")
    linear = ingot.nvfp4_unswizzle_scales(scales, 4, 32)
    assert_same_bytes(linear, ingot.nvfp4_unswizzle_scales(ctx, scales, 4, 32), "unswizzle")
    assert_same_bytes(ingot.nvfp4_swizzle_scales(linear), scales, "swizzle")


def test_format_ops_name_the_first_argument(ctx):
    x = np.zeros((4, 32), np.float32)
    with pytest.raises(TypeError, match=r"^nvfp4_quantize\(x, \.\.\.\): the first argument is "
                                        r"None, expected x \(an ingot\.Context may come before "
                                        r"it, or pass ctx=\)"):
        ingot.nvfp4_quantize(None, x, 1.0)
    for call in (lambda: ingot.nvfp4_global_scale(None),
                 lambda: ingot.nvfp4_swizzle_scales(None, x),
                 lambda: ingot.nvfp4_quantize_gate_up(None, x, x)):
        with pytest.raises(TypeError, match=r"the first argument is None"):
            call()
    with pytest.raises(TypeError, match=r"^swizzled: str is not an array"):
        ingot.nvfp4_unswizzle_scales("cpu", x)
    with pytest.raises(TypeError, match=r"^nvfp4_global_scale\(x, \.\.\.\): argument 2 is an "
                                        r"ingot\.Context: pass it first or as ctx="):
        ingot.nvfp4_global_scale(x, ctx)
    with pytest.raises(TypeError, match=r"^x: None"):
        ingot.nvfp4_global_scale(ctx, None)
    with pytest.raises(TypeError, match=r"^ctx: must be an ingot\.Context; got a str"):
        ingot.nvfp4_global_scale(x, ctx="cpu")


def test_outputs_are_named_as_passed(ctx):
    linear = np.zeros((4, 2), np.uint8)
    with pytest.raises(ingot.IngotError, match=r"out \(swizzled\): shape\[1\] = 3, expected "
                                               r"round_up\(cols/16, 4\) = 4"):
        ingot.nvfp4_swizzle_scales(ctx, linear, out=np.zeros((128, 3), np.uint8))
    with pytest.raises(ingot.IngotError, match=r"out \(linear\): dtype f32"):
        ingot.nvfp4_unswizzle_scales(ctx, np.zeros((128, 4), np.uint8),
                                     out=np.zeros((4, 2), np.float32))
    with pytest.raises(ingot.IngotError, match=r"out \(global_scale\): shape\[0\] = 2"):
        ingot.nvfp4_global_scale(ctx, np.zeros((4, 16), np.float32), out=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"^rows: -1 < 0"):
        ingot.nvfp4_unswizzle_scales(ctx, np.zeros((128, 4), np.uint8), rows=-1, cols=32)
    with pytest.raises(ValueError, match=r"^cols: -16, expected a non-negative multiple of 16"):
        ingot.nvfp4_unswizzle_scales(ctx, np.zeros((128, 4), np.uint8), rows=4, cols=-16)


def test_scale_shape_rejects_overflowing_sizes():
    with pytest.raises(ingot.IngotError, match=r"rows = 9223372036854775807 overflows"):
        ingot.nvfp4_scale_shape(2**63 - 1, 16)
    with pytest.raises(ingot.IngotError, match=r"rows = 4294967296, cols = 68719476736: the scale "
                                               r"buffer"):
        ingot.nvfp4_scale_shape(1 << 32, 1 << 36)  # 2^64 bytes: SIZE_MAX + 1
    with pytest.raises(ingot.IngotError, match=r"rows = 72057594037927936, cols = "
                                               r"72057594037927936"):
        ingot.nvfp4_scale_shape(1 << 56, 1 << 56)
    with pytest.raises(ingot.IngotError, match=r"cols = -16"):
        ingot.nvfp4_scale_shape(4, -16)
    with pytest.raises(OverflowError, match=r"rows: 9223372036854775808 does not fit"):
        ingot.nvfp4_scale_shape(2**63, 16)
    assert ingot.nvfp4_scale_shape(1 << 32, 1 << 33) == (1 << 32, 1 << 29)
