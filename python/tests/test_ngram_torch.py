"""Hashed n-gram ops with torch tensors, against a plain-PyTorch
implementation of docs/ple.md: CPU, and CUDA (bit-exact, CUDA graphs) when a
GPU is present. Skipped without torch."""

import pytest

torch = pytest.importorskip("torch")

import ingot  # noqa: E402

E = 7
HAS_CUDA = torch.cuda.is_available() and ingot.backend_available("cuda")
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and ingot's CUDA backend")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
SPEC_ROWS = [[883, 1988, 2795, 3714], [105, 1826, 2064, 3895], [365, 2017, 2662, 3065],
             [131, 1966, 2423, 3454], [364, 1785, 2045, 3807], [210, 1630, 2777, 3529]]


# ---- docs/ple.md in plain PyTorch -----------------------------------------------------------


def torch_row_ids(cfg, ids, cu, context):
    """rows [T, H] int64. int64 products wrap (two's complement) in torch's
    kernels; torch.remainder is the floored modulo."""
    n, hpn, device = cfg.n, cfg.heads_per_order, ids.device
    ids, cu, context = ids.long(), cu.long(), context.long()
    T, B = ids.numel(), cu.numel() - 1
    req = torch.repeat_interleave(torch.arange(B, device=device), cu[1:] - cu[:-1])
    pos = torch.arange(T, device=device)
    local = pos - cu[req]
    x = []
    for s in range(n):  # x_s: ids[t-s] if local >= s, else context[b][n-1+local-s]
        from_ids = ids[(pos - s).clamp(min=0)]
        from_context = context[req, (n - 1 + local - s).clamp(0, n - 2)]
        x.append(torch.where(local >= s, from_ids, from_context))
    x = torch.stack(x, dim=1)
    alive = torch.ones(T, dtype=torch.bool, device=device)
    for s in range(1, n):
        alive &= x[:, s] != cfg.boundary_token
        x[:, s] = torch.where(alive, x[:, s], torch.full_like(x[:, s], cfg.boundary_token))
    prod = x * torch.tensor(cfg.multipliers, dtype=torch.int64, device=device)
    P = torch.tensor(cfg.primes, dtype=torch.int64, device=device)
    off = torch.tensor(cfg.offsets, dtype=torch.int64, device=device)
    mix, blocks = prod[:, 0], []
    for k in range(2, n + 1):
        mix = mix ^ prod[:, k - 1]
        heads = slice((k - 2) * hpn, (k - 1) * hpn)
        blocks.append(torch.remainder(mix[:, None], P[heads]) + off[heads])
    return torch.cat(blocks, dim=1)


def torch_commit_context(cfg, ids, cu, context):
    new = context.clone()
    for b in range(cu.numel() - 1):
        w = torch.cat([context[b], ids[int(cu[b]):int(cu[b + 1])]])
        new[b] = w[w.numel() - (cfg.n - 1):]
    return new


def torch_gather(rows, table, scale):
    """bf16(float(table[rows]) * scale), zero rows outside the table."""
    R = table.shape[0]
    valid = (rows >= 0) & (rows < R)
    values = table.float()[rows.clamp(0, R - 1)] * torch.tensor(scale, dtype=torch.float32)
    values = torch.where(valid[..., None], values, torch.zeros((), device=rows.device))
    return values.to(torch.bfloat16).reshape(rows.shape[0], rows.shape[1] * table.shape[1])


def same_bits(a, b):
    """Bit equality of two bf16 tensors (torch.equal on the raw bits)."""
    return a.dtype == b.dtype and torch.equal(a.view(torch.int16), b.view(torch.int16))


# ---- inputs -----------------------------------------------------------------------------------


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture
def ctx(device):
    with ingot.Context(device, torch.cuda.current_device() if device == "cuda" else 0) as c:
        yield c


def random_batch(gen, n, device, dtype=torch.int32, B=5, max_len=9, full_range=False):
    lengths = torch.randint(0, max_len + 1, (B,), generator=gen)
    lengths[torch.rand(B, generator=gen) < 0.2] = 0
    cu = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    T = int(cu[-1])

    def tokens(shape):
        if full_range:  # every value of the dtype: random bytes viewed as it
            size = torch.empty(0, dtype=dtype).element_size()
            raw = torch.randint(0, 256, (*shape, size), generator=gen, dtype=torch.uint8)
            x = raw.view(dtype).reshape(shape)
            x[torch.rand(shape, generator=gen) < 0.1] = E
            return x
        return torch.randint(0, 12, shape, generator=gen).to(dtype)

    ids, context = tokens((T,)), tokens((B, n - 1))
    context[torch.rand(B, generator=gen) < 0.3] = E
    return ids.to(device), cu.to(dtype).to(device), context.to(device)


def random_table(gen, kind, R, D, device):
    if kind == "f32":
        return (torch.randn(R, D, generator=gen) * 100).to(device)
    if kind == "bf16":
        return (torch.randn(R, D, generator=gen) * 100).to(torch.bfloat16).to(device)
    bytes_ = torch.randint(0, 256, (R, D), generator=gen, dtype=torch.int32)
    bytes_[(bytes_ & 0x7F) == 0x7F] = 0x3C  # no NaN: torch.equal compares bits of finite values
    return bytes_.to(torch.uint8).view(torch.float8_e4m3fn).to(device)


@pytest.fixture
def gen():
    g = torch.Generator()
    seed = g.seed()
    print(f"torch seed {seed}")
    return g


# ---- tests ------------------------------------------------------------------------------------


def test_worked_check(ctx, device):
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    ids = torch.tensor([3, 4, 7, 5, 6, 8], dtype=torch.int32, device=device)
    cu = torch.tensor([0, 6], dtype=torch.int32, device=device)
    context = torch.tensor([[7, 7]], dtype=torch.int32, device=device)
    rows = ingot.ngram_row_ids(ctx, cfg, ids, cu, context)
    assert rows.device == ids.device and rows.dtype == torch.int64
    assert rows.tolist() == SPEC_ROWS
    assert torch_row_ids(cfg, ids, cu, context).tolist() == SPEC_ROWS


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("n,hpn", [(2, 1), (3, 8), (5, 3), (8, 9)])
@pytest.mark.parametrize("full_range", [False, True])
def test_row_ids(ctx, device, gen, dtype, n, hpn, full_range):
    cfg = ingot.NgramConfig.derive(248320, n, hpn, 20000000 if n == 3 else 1000,
                                   boundary_token=E)
    for _ in range(3):
        ids, cu, context = random_batch(gen, n, device, dtype, full_range=full_range)
        rows = ingot.ngram_row_ids(ctx, cfg, ids, cu, context)
        assert torch.equal(rows, torch_row_ids(cfg, ids, cu, context))
        if device == "cuda":  # byte-identical to the CPU reference
            with ingot.Context("cpu") as cpu:
                assert torch.equal(rows.cpu(), ingot.ngram_row_ids(cpu, cfg, ids.cpu(), cu.cpu(),
                                                                   context.cpu()))


@pytest.mark.parametrize("kind", ["f32", "bf16", "f8"])
def test_gather_and_embed(ctx, device, gen, kind):
    cfg = ingot.NgramConfig.derive(5000, 3, 4, 100, boundary_token=E)
    R = cfg.table_rows()
    table = random_table(gen, kind, R, 16, device)
    ids, cu, context = random_batch(gen, 3, device, B=7)
    rows = ingot.ngram_row_ids(ctx, cfg, ids, cu, context)
    rows[::3, 1] = -1  # out-of-range ids: zero rows
    rows[1::4, 2] = R
    for scale in (1.0, 0.37, -3.0):
        out = ingot.ngram_gather(ctx, rows, table, scale)
        assert out.dtype == torch.bfloat16 and out.device == table.device
        assert same_bits(out, torch_gather(rows, table, scale))
        fused = ingot.ngram_embed(ctx, cfg, ids, cu, context, table, scale)
        assert same_bits(fused, torch_gather(torch_row_ids(cfg, ids, cu, context), table, scale))
        if device == "cuda":
            with ingot.Context("cpu") as cpu:
                assert same_bits(out.cpu(), ingot.ngram_gather(cpu, rows.cpu(), table.cpu(), scale))


def test_commit_context(ctx, device, gen):
    cfg = ingot.NgramConfig.derive(5000, 4, 2, 1000, boundary_token=E)
    for _ in range(3):
        ids, cu, context = random_batch(gen, 4, device, torch.int64)
        expected = torch_commit_context(cfg, ids, cu, context)
        ingot.ngram_commit_context(ctx, cfg, ids, cu, context)
        assert torch.equal(context, expected)


def test_strided_out_and_context(ctx, device, gen):
    cfg = ingot.NgramConfig.derive(5000, 3, 2, 1000, boundary_token=E)
    ids, cu, context = random_batch(gen, 3, device)
    wide = torch.full((context.shape[0], 6), -1, dtype=context.dtype, device=device)
    wide[:, :2] = context
    out = torch.full((ids.numel(), 9), -1, dtype=torch.int64, device=device)
    ingot.ngram_row_ids(ctx, cfg, ids, cu, wide[:, :2], out=out[:, :4])
    assert torch.equal(out[:, :4], torch_row_ids(cfg, ids, cu, context))
    assert (out[:, 4:] == -1).all()


def test_errors(ctx, device):
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    ids = torch.zeros(4, dtype=torch.int32, device=device)
    cu = torch.tensor([0, 4], dtype=torch.int32, device=device)
    with pytest.raises(ingot.IngotError, match="context: shape"):
        ingot.ngram_row_ids(ctx, cfg, ids, cu, torch.zeros(1, 3, dtype=torch.int32, device=device))
    with pytest.raises(ingot.IngotError, match="ids: dtype"):
        ingot.ngram_row_ids(ctx, cfg, ids.float(), cu, torch.zeros(1, 2, device=device))


# ---- CUDA only ------------------------------------------------------------------------------------


@pytest.fixture
def cuda_ctx():
    with ingot.Context("cuda", torch.cuda.current_device()) as c:
        yield c


@needs_cuda
def test_cuda_graph_capture_and_replay(cuda_ctx, gen):
    """Captures row_ids + embed + commit_context once; replays three times with
    new inputs copied into the captured buffers."""
    ctx, dev = cuda_ctx, "cuda"
    cfg = ingot.NgramConfig.derive(248320, 3, 8, 20000, boundary_token=E)
    T, B, D, scale = 40, 6, 32, 0.37
    table = random_table(gen, "f8", cfg.table_rows(), D, dev)
    ids = torch.zeros(T, dtype=torch.int32, device=dev)
    cu = torch.zeros(B + 1, dtype=torch.int32, device=dev)
    cu[-1] = T
    context = torch.full((B, 2), E, dtype=torch.int32, device=dev)
    rows = torch.empty(T, cfg.num_heads, dtype=torch.int64, device=dev)
    emb = torch.empty(T, cfg.num_heads * D, dtype=torch.bfloat16, device=dev)

    def forward():
        ingot.ngram_row_ids(ctx, cfg, ids, cu, context, out=rows)
        ingot.ngram_embed(ctx, cfg, ids, cu, context, table, scale, out=emb)
        ingot.ngram_commit_context(ctx, cfg, ids, cu, context)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture
        forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()

    for _ in range(3):
        cuts = torch.sort(torch.randint(0, T + 1, (B - 1,), generator=gen)).values
        new_cu = torch.cat([torch.tensor([0]), cuts, torch.tensor([T])]).to(torch.int32)
        new_ids = torch.randint(0, 12, (T,), generator=gen, dtype=torch.int32)
        new_context = torch.randint(0, 12, (B, 2), generator=gen, dtype=torch.int32)
        ids.copy_(new_ids)
        cu.copy_(new_cu)
        context.copy_(new_context)
        graph.replay()
        torch.cuda.synchronize()
        ctx.check_device_errors()
        g_ids, g_cu, g_context = new_ids.to(dev), new_cu.to(dev), new_context.to(dev)
        expected_rows = torch_row_ids(cfg, g_ids, g_cu, g_context)
        assert torch.equal(rows, expected_rows)
        assert same_bits(emb, torch_gather(expected_rows, table, scale))
        assert torch.equal(context, torch_commit_context(cfg, g_ids, g_cu, g_context))


@needs_cuda
def test_cuda_bad_cu_seqlens_is_reported_by_check_device_errors(cuda_ctx):
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    ids = torch.zeros(6, dtype=torch.int32, device="cuda")
    cu = torch.tensor([0, 4, 2], dtype=torch.int32, device="cuda")  # decreasing: device-checked
    context = torch.full((2, 2), E, dtype=torch.int32, device="cuda")
    rows = torch.full((6, 4), -1, dtype=torch.int64, device="cuda")
    ingot.ngram_row_ids(cuda_ctx, cfg, ids, cu, context, out=rows)
    with pytest.raises(ingot.IngotError, match="cu_seqlens"):
        cuda_ctx.check_device_errors()
    assert (rows == -1).all()  # nothing written
    cuda_ctx.check_device_errors()  # the record was cleared


@needs_cuda
def test_cuda_side_stream_and_explicit_stream(cuda_ctx, gen):
    cfg = ingot.NgramConfig.derive(5000, 3, 2, 1000, boundary_token=E)
    ids, cu, context = random_batch(gen, 3, "cuda", B=8, max_len=30)
    expected = torch_row_ids(cfg, ids, cu, context)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the current stream is used
        rows = ingot.ngram_row_ids(cuda_ctx, cfg, ids, cu, context)
        cuda_ctx.check_device_errors()
    side.synchronize()
    assert torch.equal(rows, expected)
    other = torch.cuda.Stream()
    other.wait_stream(torch.cuda.current_stream())
    out = torch.empty_like(rows)
    ingot.ngram_row_ids(cuda_ctx, cfg, ids, cu, context, out=out, stream=other)
    cuda_ctx.check_device_errors(other)
    assert torch.equal(out, expected)


@needs_cuda
def test_cuda_pinned_host_table_is_identical(cuda_ctx, gen):
    cfg = ingot.NgramConfig.derive(5000, 3, 2, 1000, boundary_token=E)
    table = random_table(gen, "bf16", cfg.table_rows(), 24, "cuda")
    ids, cu, context = random_batch(gen, 3, "cuda")
    on_device = ingot.ngram_embed(cuda_ctx, cfg, ids, cu, context, table, 0.5)
    pinned = table.cpu().pin_memory()
    zero_copy = ingot.ngram_embed(cuda_ctx, cfg, ids, cu, context, pinned, 0.5)
    assert zero_copy.device == ids.device
    torch.cuda.synchronize()
    assert same_bits(on_device, zero_copy)


class OnlyDLPack:
    def __init__(self, t):
        self._t = t

    def __dlpack__(self, **kwargs):
        return self._t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


class OnlyCudaArrayInterface:
    def __init__(self, t):
        self._t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


@needs_cuda
def test_cuda_dlpack_and_cuda_array_interface(cuda_ctx, gen):
    cfg = ingot.NgramConfig.derive(5000, 3, 2, 1000, boundary_token=E)
    ids, cu, context = random_batch(gen, 3, "cuda")
    out = torch.empty(ids.numel(), 4, dtype=torch.int64, device="cuda")
    ingot.ngram_row_ids(cuda_ctx, cfg, OnlyDLPack(ids), OnlyCudaArrayInterface(cu),
                        OnlyDLPack(context), out=OnlyCudaArrayInterface(out))
    torch.cuda.synchronize()
    assert torch.equal(out, torch_row_ids(cfg, ids, cu, context))
