"""Hashed n-gram ops on the CPU backend with numpy arrays, against
spec_numpy.py (docs/ple.md written out independently of the C code)."""

import sys

import pytest

np = pytest.importorskip("numpy")

import ingot  # noqa: E402
import spec_numpy as spec  # noqa: E402

E = 7  # boundary token of the documented worked checks
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

SPEC_ROWS = [[883, 1988, 2795, 3714], [105, 1826, 2064, 3895], [365, 2017, 2662, 3065],
             [131, 1966, 2423, 3454], [364, 1785, 2045, 3807], [210, 1630, 2777, 3529]]


def bits(out):
    """bf16 output (ml_dtypes.bfloat16 or uint16) -> its uint16 bits."""
    return np.asarray(out).view(np.uint16)


def assert_bf16_equal(got, ref):
    """Bit equality, except that any NaN matches any NaN (spec: NaN stays NaN)."""
    got_nan, ref_nan = np.isnan(spec.bf16_to_f32(got)), np.isnan(spec.bf16_to_f32(ref))
    np.testing.assert_array_equal(got_nan, ref_nan)
    np.testing.assert_array_equal(np.where(got_nan, 0, got), np.where(ref_nan, 0, ref))


def spec_rows(cfg, ids, cu, context):
    return spec.row_ids(cfg.n, cfg.heads_per_order, cfg.boundary_token, cfg.multipliers,
                        cfg.primes, cfg.offsets, ids, cu, context)


def random_batch(rng, n, dtype=np.int32, cu_dtype=np.int32, full_range=False, max_len=9, B=None):
    """A ragged batch: empty requests, boundary tokens, fresh contexts."""
    B = int(rng.integers(1, 7)) if B is None else B
    lengths = rng.integers(0, max_len + 1, B)
    lengths[rng.random(B) < 0.2] = 0
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(cu_dtype)
    T = int(cu[-1])

    def tokens(shape):
        if full_range:
            info = np.iinfo(dtype)
            x = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
            x[rng.random(shape) < 0.1] = E
            return x
        return rng.integers(0, 12, shape).astype(dtype)  # E = 7 is frequent

    ids, context = tokens(T), tokens((B, n - 1))
    context[rng.random(B) < 0.3] = E  # fresh requests
    return ids, cu, context


def random_config(rng, n, hpn, explicit):
    if not explicit:
        return ingot.NgramConfig.derive(int(rng.integers(1, 300000)), n, hpn,
                                        int(rng.integers(2, 10**7)), seed=int(rng.integers(0, 10**6)),
                                        layer_index=int(rng.integers(0, 3)), boundary_token=E)
    H = hpn * (n - 1)
    return ingot.NgramConfig(n, hpn, E, rng.integers(INT64_MIN, INT64_MAX, n, dtype=np.int64),
                             rng.integers(1, 2**40, H), rng.integers(0, 2**40, H))


# ---- constants ----------------------------------------------------------------------


def test_derive_worked_check():
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    assert cfg.primes == (1009, 1013, 1019, 1021)
    assert cfg.offsets == (0, 1009, 2022, 3041)
    assert cfg.multipliers == (4295158889763781, 17440218147737327, 1270917961434445)
    assert (cfg.n, cfg.heads_per_order, cfg.num_heads, cfg.boundary_token) == (3, 2, 4, E)
    assert [list(v) for v in (cfg.multipliers, cfg.primes, cfg.offsets)] == \
        [list(v) for v in spec.derive(512, 3, 2, 1000)]
    assert cfg.table_rows() == 1021 + 3041


def test_real_config():
    cfg = ingot.NgramConfig.derive(248320, 3, 8, 20000000, boundary_token=248044)
    assert cfg.num_heads == 16 and cfg.primes[0] == 20000003
    assert sum(cfg.primes) == 320001446
    assert cfg.table_rows() == 320001446
    assert cfg.table_rows(pad_multiple=128) == 320001536
    mult, P, off = spec.derive(248320, 3, 8, 20000000)
    assert (list(cfg.multipliers), list(cfg.primes), list(cfg.offsets)) == (mult, P, off)


@pytest.mark.parametrize("n,hpn,layer,seed", [(2, 1, 0, 0), (4, 3, 1, 99), (8, 2, 2, 1234),
                                              (5, 16, 0, 7)])
def test_derive_matches_spec(n, hpn, layer, seed):
    cfg = ingot.NgramConfig.derive(100000, n, hpn, 5000, seed=seed, layer_index=layer,
                                   boundary_token=1)
    mult, P, off = spec.derive(100000, n, hpn, 5000, seed=seed, layer=layer)
    assert (list(cfg.multipliers), list(cfg.primes), list(cfg.offsets)) == (mult, P, off)


def test_explicit_config():
    derived = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    explicit = ingot.NgramConfig(3, 2, E, np.array(derived.multipliers), [1009, 1013, 1019, 1021])
    assert explicit == derived and hash(explicit) == hash(derived)
    assert explicit.offsets == (0, 1009, 2022, 3041)
    again = ingot.NgramConfig(3, 2, E, derived.multipliers, derived.primes, derived.offsets)
    assert again == derived and "1009" in repr(again)


# ---- row ids -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_rows_worked_check(ctx, dtype):
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    ids = np.array([3, 4, 7, 5, 6, 8], dtype)
    rows = ingot.ngram_row_ids(ctx, cfg, ids, np.array([0, 6], dtype), np.array([[7, 7]], dtype))
    assert rows.dtype == np.int64 and rows.shape == (6, 4)
    assert rows.tolist() == SPEC_ROWS
    assert spec_rows(cfg, ids, [0, 6], [[7, 7]]).tolist() == SPEC_ROWS


@pytest.mark.parametrize("dtype,cu_dtype", [(np.int32, np.int32), (np.int32, np.int64),
                                            (np.int64, np.int32), (np.int64, np.int64)])
@pytest.mark.parametrize("n,hpn", [(2, 1), (3, 2), (3, 8), (5, 3), (8, 9)])
@pytest.mark.parametrize("full_range", [False, True])
@pytest.mark.parametrize("explicit", [False, True])
def test_row_ids_random(ctx, rng, dtype, cu_dtype, n, hpn, full_range, explicit):
    cfg = random_config(rng, n, hpn, explicit)
    for _ in range(3):
        ids, cu, context = random_batch(rng, n, dtype, cu_dtype, full_range)
        rows = ingot.ngram_row_ids(ctx, cfg, ids, cu, context)
        np.testing.assert_array_equal(rows, spec_rows(cfg, ids, cu, context))


def test_row_ids_strided_context_and_out(ctx, rng):
    cfg = ingot.NgramConfig.derive(1000, 4, 2, 3000, boundary_token=E)
    ids, cu, context = random_batch(rng, 4, np.int64, B=5)
    wide = np.full((5, 3 + 4), -99, np.int64)
    wide[:, :3] = context
    out = np.full((len(ids), cfg.num_heads + 3), -1, np.int64)
    result = ingot.ngram_row_ids(ctx, cfg, ids, cu, wide[:, :3], out=out[:, :cfg.num_heads])
    assert result.base is out
    np.testing.assert_array_equal(out[:, :cfg.num_heads], spec_rows(cfg, ids, cu, context))
    assert (out[:, cfg.num_heads:] == -1).all() and (wide[:, 3:] == -99).all()


def test_row_ids_empty_batches(ctx):
    cfg = ingot.NgramConfig.derive(1000, 3, 2, 3000, boundary_token=E)
    none = np.zeros(0, np.int32)
    rows = ingot.ngram_row_ids(ctx, cfg, none, np.zeros(3, np.int32), np.full((2, 2), E, np.int32))
    assert rows.shape == (0, 4)
    rows = ingot.ngram_row_ids(ctx, cfg, none, np.zeros(1, np.int32), np.zeros((0, 2), np.int32))
    assert rows.shape == (0, 4)


# ---- commit_context --------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4])
def test_commit_context_chunks_equal_one_prefill(ctx, rng, n):
    """Chunks 3, 1, 2, 5 then 3 decode steps (1 token each) give the rows of one
    prefill of the whole history, and leave the last n-1 tokens as context."""
    cfg = ingot.NgramConfig.derive(5000, n, 2, 1000, boundary_token=E)
    schedules = [[3, 1, 2, 5, 1, 1, 1], [0, 4, 1, 6, 1, 1, 1], [2, 2, 0, 7, 1, 1, 1]]
    B = len(schedules)
    seqs = [rng.integers(0, 12, sum(s)).astype(np.int32) for s in schedules]
    fresh = np.full((B, n - 1), E, np.int32)
    cu_all = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int32)
    prefill = ingot.ngram_row_ids(ctx, cfg, np.concatenate(seqs), cu_all, fresh)
    np.testing.assert_array_equal(prefill, spec_rows(cfg, np.concatenate(seqs), cu_all, fresh))

    context = np.full((B, n - 1 + 2), -5, np.int32)[:, : n - 1]  # strided, updated in place
    context[:] = E
    got = [[] for _ in range(B)]
    done = [0] * B
    for step in range(len(schedules[0])):
        chunks = [seqs[b][done[b]: done[b] + schedules[b][step]] for b in range(B)]
        ids = np.concatenate(chunks)
        cu = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int32)
        before = context.copy()
        rows = ingot.ngram_row_ids(ctx, cfg, ids, cu, context)
        assert ingot.ngram_commit_context(ctx, cfg, ids, cu, context) is None
        np.testing.assert_array_equal(context, spec.commit_context(n, ids, cu, before))
        for b in range(B):
            got[b].append(rows[cu[b]:cu[b + 1]])
            done[b] += schedules[b][step]
    np.testing.assert_array_equal(np.concatenate([r for g in got for r in g]), prefill)
    for b in range(B):
        history = np.concatenate([fresh[b], seqs[b]])
        np.testing.assert_array_equal(context[b], history[len(history) - (n - 1):])


# ---- gather ------------------------------------------------------------------------------


def make_table(rng, kind, R, D):
    """(argument for ingot, the same values as float32) for a table kind."""
    if kind == "f32":
        t = (rng.standard_normal((R, D)) * 100).astype(np.float32)
        specials = [np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, -0.0, 1.00390625, 1.01171875]
        t.flat[rng.choice(R * D, len(specials), replace=False)] = specials
        return t, t
    if kind == "bf16":  # all bit patterns, NaN and inf included
        t = rng.integers(0, 1 << 16, (R, D), dtype=np.uint16)
        return t, spec.bf16_to_f32(t)
    t = rng.integers(0, 256, (R, D), dtype=np.uint8)  # fp8, NaN included
    return ingot.reinterpret(t, "f8_e4m3"), spec.e4m3_to_f32(t)


def random_rows(rng, R, T, H):
    rows = rng.integers(-3, R + 3, (T, H))
    rows.flat[rng.choice(T * H, 4, replace=False)] = [INT64_MIN, INT64_MAX, -1, R]
    return rows


@pytest.mark.parametrize("kind", ["f32", "bf16", "f8"])
@pytest.mark.parametrize("scale", [1.0, 0.37, -2.5, 1e30])
def test_gather(ctx, rng, kind, scale):
    R, D, T, H = 37, 5, 13, 4
    table, values = make_table(rng, kind, R, D)
    rows = random_rows(rng, R, T, H)
    out = ingot.ngram_gather(ctx, rows, table, scale)
    assert out.shape == (T, H * D) and out.dtype.itemsize == 2
    assert_bf16_equal(bits(out), spec.gather(rows, values, scale))
    out_of_range = (rows < 0) | (rows >= R)
    assert (bits(out).reshape(T, H, D)[out_of_range] == 0).all()


def test_gather_strided(ctx, rng):
    R, D, T, H = 20, 8, 6, 3
    wide = (rng.standard_normal((R, D + 3))).astype(np.float32)
    rows_wide = np.zeros((T, H + 2), np.int64)
    rows_wide[:, :H] = random_rows(rng, R, T, H)
    out = np.full((T, H * D + 4), 0xABCD, np.uint16)
    ingot.ngram_gather(ctx, rows_wide[:, :H], wide[:, :D], 0.5, out=out[:, : H * D])
    assert_bf16_equal(out[:, : H * D], spec.gather(rows_wide[:, :H], wide[:, :D].copy(), 0.5))
    assert (out[:, H * D:] == 0xABCD).all()


def test_gather_without_ml_dtypes_returns_uint16(ctx, monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes -> ImportError
    table = np.ones((4, 2), np.float32)
    out = ingot.ngram_gather(ctx, np.array([[0, 9]]), table)
    assert out.dtype == np.uint16
    assert out.tolist() == [[0x3F80, 0x3F80, 0, 0]]


def test_ml_dtypes_tables(ctx, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    all_fp8 = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(  # the test's own decoder agrees with ml_dtypes
        spec.e4m3_to_f32(all_fp8), all_fp8.view(ml_dtypes.float8_e4m3fn).astype(np.float32))
    R, D, T, H, scale = 29, 6, 9, 4, 0.37
    rows = random_rows(rng, R, T, H)
    valid = ((rows >= 0) & (rows < R))[..., None]
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        table = rng.standard_normal((R, D)).astype(dtype)
        out = ingot.ngram_gather(ctx, rows, table, scale)
        assert out.dtype == ml_dtypes.bfloat16
        product = table.astype(np.float32)[np.clip(rows, 0, R - 1)] * np.float32(scale)
        ref = np.where(valid, product, np.float32(0)).astype(ml_dtypes.bfloat16)
        assert_bf16_equal(bits(out), bits(ref).reshape(T, H * D))


# ---- embed ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["f32", "bf16", "f8"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_embed_equals_row_ids_then_gather(ctx, rng, kind, dtype):
    cfg = ingot.NgramConfig.derive(5000, 3, 2, 100, boundary_token=E)
    R = cfg.table_rows(pad_multiple=8)
    table, values = make_table(rng, kind, R, 4)
    for full_range in (False, True):
        ids, cu, context = random_batch(rng, 3, dtype, full_range=full_range)
        rows = ingot.ngram_row_ids(ctx, cfg, ids, cu, context)
        separate = ingot.ngram_gather(ctx, rows, table, 0.37)
        fused = ingot.ngram_embed(ctx, cfg, ids, cu, context, table, 0.37)
        np.testing.assert_array_equal(bits(fused), bits(separate))
        assert_bf16_equal(bits(fused), spec.gather(spec_rows(cfg, ids, cu, context), values, 0.37))


def test_embed_out_given(ctx, rng):
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    table = rng.standard_normal((cfg.table_rows(), 3)).astype(np.float32)
    ids = np.array([3, 4, 7, 5, 6, 8], np.int32)
    out = np.empty((6, 12), np.uint16)
    assert ingot.ngram_embed(ctx, cfg, ids, np.array([0, 6], np.int32),
                             np.array([[7, 7]], np.int32), table, out=out) is out
    assert_bf16_equal(out, spec.gather(np.array(SPEC_ROWS), table, 1.0))


# ---- other array objects -------------------------------------------------------------------


class OnlyDLPack:
    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class OnlyArrayInterface:
    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


def test_dlpack_and_array_interface_objects(ctx):
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    ids = np.array([3, 4, 7, 5, 6, 8], np.int64)
    cu = np.array([0, 6], np.int64)
    context = np.full((1, 2 + 3), 7, np.int64)[:, :2]  # strided
    for wrap in (OnlyDLPack, OnlyArrayInterface):
        out = np.zeros((6, 4), np.int64)
        ingot.ngram_row_ids(ctx, cfg, wrap(ids), wrap(cu), wrap(context),
                            out=OnlyArrayInterface(out))
        assert out.tolist() == SPEC_ROWS
    with pytest.raises(ValueError, match="ids: CUDA memory given to a CPU context"):
        ingot.ngram_row_ids(ctx, cfg, _FakeCuda(ids), cu, context)


class _FakeCuda:
    """Something that claims to live on a GPU (never passed to a kernel)."""

    def __init__(self, a):
        iface = dict(a.__array_interface__)
        iface["version"] = 3
        self.__cuda_array_interface__ = iface


def test_cuda_array_interface_descriptor():
    from ingot._tensor import allocate, describe

    a = np.zeros((4, 6), np.float32)[:, 1:5]
    d = describe(_FakeCuda(a), "x")
    assert d.device[0] == "cuda" and d.framework == "other"
    assert d.tensor.data == a.__array_interface__["data"][0]
    assert d.tensor.dtype == ingot.DType.F32 and d.shape == (4, 4)
    assert list(d.tensor.stride[:2]) == [6, 1]
    contiguous = describe(_FakeCuda(np.zeros((2, 3), np.uint16)), "x")
    assert contiguous.tensor.dtype == ingot.DType.BF16
    assert list(contiguous.tensor.stride[:2]) == [3, 1]
    with pytest.raises(TypeError, match="pass out="):  # only torch/numpy outputs are allocated
        allocate(d, "out", (2, 2), ingot.DType.I64)


# ---- errors ---------------------------------------------------------------------------------


def batch3():
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    return (cfg, np.array([3, 4, 7, 5, 6, 8], np.int32), np.array([0, 2, 6], np.int32),
            np.full((2, 2), E, np.int32))


def raises(argument, op="ingot_ngram_row_ids"):
    """Expects IngotError(INVALID_ARGUMENT) naming op and argument."""
    class Check:
        def __enter__(self):
            self.ctx = pytest.raises(ingot.IngotError)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            suppressed = self.ctx.__exit__(*exc)
            err = self.info.value
            assert err.status == ingot.Status.INVALID_ARGUMENT
            assert err.message.startswith(op + ": "), err.message
            assert argument in err.message, err.message
            return suppressed

    return Check()


def test_errors_name_the_argument(ctx):
    cfg, ids, cu, context = batch3()
    with raises("context: shape[1] = 3"):
        ingot.ngram_row_ids(ctx, cfg, ids, cu, np.full((2, 3), E, np.int32))
    with raises("context: shape[0]"):
        ingot.ngram_row_ids(ctx, cfg, ids, cu, np.full((3, 2), E, np.int32))
    with raises("context: dtype"):
        ingot.ngram_row_ids(ctx, cfg, ids, cu, context.astype(np.int64))
    for bad_cu in ([0, 2, 5], [0, 4, 2], [1, 2, 6]):  # wrong T, decreasing, cu[0] != 0
        with raises("cu_seqlens: cu_seqlens["):
            ingot.ngram_row_ids(ctx, cfg, ids, np.array(bad_cu, np.int32), context)
    with raises("ids: dtype f32"):
        ingot.ngram_row_ids(ctx, cfg, ids.astype(np.float32), cu, context)
    with raises("ids: stride"):
        ingot.ngram_row_ids(ctx, cfg, np.repeat(ids, 2)[::2], cu, context)
    # out is the library's rows: the text names both
    with raises("out (rows): shape[1] = 5"):
        ingot.ngram_row_ids(ctx, cfg, ids, cu, context, out=np.empty((6, 5), np.int64))
    with raises("out (rows): dtype"):
        ingot.ngram_row_ids(ctx, cfg, ids, cu, context, out=np.empty((6, 4), np.int32))
    with raises("context", op="ingot_ngram_commit_context"):
        ingot.ngram_commit_context(ctx, cfg, ids, cu, np.full((2, 1), E, np.int32))
    with raises("ids: ndim = 2", op="ingot_ngram_embed"):  # out cannot be sized: NULL
        ingot.ngram_embed(ctx, cfg, ids[None], cu, context, np.zeros((8, 2), np.float32))


def test_gather_errors(ctx):
    rows = np.zeros((3, 2), np.int64)
    table = np.zeros((4, 8), np.float32)
    with raises("table: dtype i32", op="ingot_ngram_gather"):
        ingot.ngram_gather(ctx, rows, table.astype(np.int32))
    with raises("scale", op="ingot_ngram_gather"):
        ingot.ngram_gather(ctx, rows, table, scale=float("inf"))
    with raises("scale", op="ingot_ngram_gather"):
        ingot.ngram_gather(ctx, rows, table, scale=1e39)  # inf as a float
    with raises("rows: ndim = 1", op="ingot_ngram_gather"):
        ingot.ngram_gather(ctx, rows[:, 0].copy(), table)
    with raises("out: shape[1] = 15", op="ingot_ngram_gather"):
        ingot.ngram_gather(ctx, rows, table, out=np.empty((3, 15), np.uint16))
    with raises("out: overlaps rows", op="ingot_ngram_gather"):
        buffer = np.zeros(3 * 16 * 4, np.int64)  # out's bytes cover the rows
        ingot.ngram_gather(ctx, buffer[:6].reshape(3, 2), table,
                           out=buffer.view(np.uint16)[: 3 * 16].reshape(3, 16))


def test_config_errors():
    with raises("n: 1", op="ingot_ngram_config_derive"):
        ingot.NgramConfig.derive(512, 1, 2, 1000, boundary_token=E)
    with raises("base", op="ingot_ngram_config_derive"):
        ingot.NgramConfig.derive(512, 3, 2, 1, boundary_token=E)
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    with raises("pad_multiple: 0", op="ingot_ngram_table_rows"):
        cfg.table_rows(pad_multiple=0)
    with raises("num_heads", op="ingot_ngram_table_rows"):
        ingot.NgramConfig(3, 2, E, [1, 3, 5], [11, 13, 17])
    with raises("primes[1]: 0", op="ingot_ngram_table_rows"):
        ingot.NgramConfig(2, 2, E, [1, 3], [11, 0])
    with pytest.raises(ValueError, match="multipliers"):
        ingot.NgramConfig(3, 2, E, [1, 3], [11, 13, 17, 19])
    with pytest.raises(OverflowError, match="multipliers"):
        ingot.NgramConfig(2, 1, E, [1, 2**64], [11])
    with pytest.raises(TypeError):
        ingot.NgramConfig(2, 1, E, [1.5, 3], [11])


def test_python_side_errors(ctx):
    cfg, ids, cu, context = batch3()
    with pytest.raises(TypeError, match="ids"):
        ingot.ngram_row_ids(ctx, cfg, [3, 4, 7, 5, 6, 8], cu, context)
    with pytest.raises(TypeError, match="cfg"):
        ingot.ngram_row_ids(ctx, None, ids, cu, context)
    with pytest.raises(TypeError, match="ids: dtype"):
        ingot.ngram_row_ids(ctx, cfg, ids.astype(np.float64), cu, context)
    frozen = context.copy()
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="context: the array is read-only"):
        ingot.ngram_commit_context(ctx, cfg, ids, cu, frozen)
    with pytest.raises(ValueError, match="cannot reinterpret"):
        ingot.ngram_gather(ctx, np.zeros((1, 1), np.int64),
                           ingot.reinterpret(np.zeros((2, 2), np.float32), "f8_e4m3"))
    with pytest.raises(ValueError, match="at most 4"):
        ingot.ngram_row_ids(ctx, cfg, np.zeros((1,) * 5, np.int32), cu, context)
    ctx.close()
    with pytest.raises(ValueError, match="closed"):
        ingot.ngram_row_ids(ctx, cfg, ids, cu, context)


def test_ops_without_a_context_equal_the_explicit_context(ctx):
    cfg, ids, cu, context = batch3()
    table = np.arange(cfg.table_rows() * 2, dtype=np.float32).reshape(-1, 2)
    rows = ingot.ngram_row_ids(cfg, ids, cu, context)
    np.testing.assert_array_equal(rows, ingot.ngram_row_ids(ctx, cfg, ids, cu, context))
    np.testing.assert_array_equal(ingot.ngram_row_ids(cfg, ids, cu, context, ctx=ctx), rows)
    out = ingot.ngram_embed(cfg, ids, cu, context, table, 0.5)
    np.testing.assert_array_equal(out.view(np.uint16),
                                  ingot.ngram_embed(ctx, cfg, ids, cu, context, table, 0.5)
                                  .view(np.uint16))
    np.testing.assert_array_equal(ingot.ngram_gather(rows, table, 0.5).view(np.uint16),
                                  out.view(np.uint16))
    rolled, want = context.copy(), context.copy()
    ingot.ngram_commit_context(cfg, ids, cu, rolled)
    ingot.ngram_commit_context(ctx, cfg, ids, cu, want)
    np.testing.assert_array_equal(rolled, want)
    assert not np.array_equal(rolled, context)


def test_context_and_arguments_are_named(ctx):
    cfg, ids, cu, context = batch3()
    with pytest.raises(TypeError, match=r"^ngram_row_ids\(cfg, \.\.\.\): the first argument is "
                                        r"None, expected cfg \(an ingot\.Context may come before "
                                        r"it, or pass ctx=\)$"):
        ingot.ngram_row_ids(None, cfg, ids, cu, context)
    with pytest.raises(TypeError, match=r"^ngram_embed\(cfg, \.\.\.\): argument 6 is an "
                                        r"ingot\.Context: pass it first or as ctx="):
        ingot.ngram_embed(cfg, ids, cu, context, np.zeros((4, 2), np.float32), ctx)
    with pytest.raises(TypeError, match=r"^ngram_gather\(rows, \.\.\.\): ctx given twice"):
        ingot.ngram_gather(ctx, np.zeros((6, 4), np.int64), np.zeros((4, 2), np.float32), ctx=ctx)
    with pytest.raises(TypeError, match=r"^ngram_commit_context\(\) missing 4 required "
                                        r"positional arguments: 'cfg', 'ids'"):
        ingot.ngram_commit_context()
    with pytest.raises(TypeError, match=r"^cfg: int, expected ingot\.NgramConfig"):
        ingot.ngram_row_ids(1, ids, cu, context)
    with pytest.raises(TypeError, match=r"^ids: None, expected an array"):
        ingot.ngram_row_ids(ctx, cfg, None, cu, context)
    with pytest.raises(TypeError, match=r"^scale: 'x' is not a number"):
        ingot.ngram_gather(ctx, np.zeros((6, 4), np.int64), np.zeros((4, 2), np.float32),
                           scale="x")
    with pytest.raises(TypeError, match=r"^pad_multiple: 1\.5 is not an integer"):
        cfg.table_rows(1.5)


def test_table_rows_rejects_overflow():
    cfg, _, _, _ = batch3()
    with pytest.raises(ingot.IngotError, match=r"pad_multiple = 9223372036854775807: the table's "
                                               r"\d+ rows rounded up to a multiple of it overflow"):
        cfg.table_rows(2**63 - 1)
    with pytest.raises(ingot.IngotError, match=r"pad_multiple: -1 < 1"):
        cfg.table_rows(-1)
    assert cfg.table_rows(1 << 56) == 1 << 56
