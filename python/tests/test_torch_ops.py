"""ingot.torch: the ops as PyTorch custom ops (namespace "ingot").

CPU: each op equals the ingot op called with an explicit context, byte for
byte; torch.compile(fullgraph=True) of a function calling it (inductor, or
aot_eager where inductor cannot compile: the test prints which) equals the
eager call, so no op breaks the graph; torch.library.opcheck checks the
schemas, the fake implementations and the declared mutations; the
conversion rule gives the tokens of exact-dtype parameters. GPU (skipped
without one): CUDA-graph capture + replay equals eager, and a parameter
that needs a conversion during capture is refused by name.
"""

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import ingot  # noqa: E402
import ingot.torch as itorch  # noqa: E402

E = 7  # the boundary token of the n-gram tests
CUDA = torch.cuda.is_available() and ingot.backend_available("cuda")
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() "
                                                 "and ingot's CUDA backend)")


@pytest.fixture(scope="module")
def backend():
    """inductor where it compiles here, else aot_eager."""
    try:
        torch.compile(lambda t: t * 2 + 1, fullgraph=True, backend="inductor")(torch.ones(4))
        name = "inductor"
    except Exception as e:  # e.g. no C++ compiler
        print(f"inductor cannot compile here ({type(e).__name__}: {e}): aot_eager")
        name = "aot_eager"
    print(f"torch.compile backend: {name}")
    return name


def compile_full(fn, backend, **kw):
    """fn compiled as one graph (a graph break raises)."""
    return torch.compile(fn, fullgraph=True, backend=backend, **kw)


def assert_same(got, want, what=""):
    """Same dtype, shape and bytes (tensors, or tuples of them)."""
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), what
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{what}[{i}]")
        return
    if want is None:
        assert got is None, what
        return
    got = torch.as_tensor(got)
    want = torch.as_tensor(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype,
                                                                 got.shape, want.shape)
    assert torch.equal(got.detach().cpu().contiguous().view(torch.uint8),
                       want.detach().cpu().contiguous().view(torch.uint8)), what


def test_import_ingot_does_not_import_torch():
    code = ("import sys, ingot\n"
            "assert 'torch' not in sys.modules, 'import ingot imported torch'\n"
            "assert callable(ingot.torch.sample) and 'torch' in sys.modules\n"
            "assert hasattr(sys.modules['torch'].ops.ingot, 'sample')\n")
    env = {"PYTHONPATH": str(Path(ingot.__file__).resolve().parents[1]),
           "INGOT_LIBRARY": str(Path(ingot.library_path).resolve())}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ---- n-gram ------------------------------------------------------------------------------------


def ngram_batch(rng):
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=E)
    ids = torch.from_numpy(rng.integers(0, 512, 9)).to(torch.int64)
    cu = torch.tensor([0, 4, 4, 9], dtype=torch.int64)
    context = torch.from_numpy(rng.integers(0, 512, (3, 2))).to(torch.int64)
    context[0] = E
    table = torch.from_numpy(rng.standard_normal((cfg.table_rows(), 8)).astype(np.float32))
    return cfg, ids, cu, context, table


def test_ngram_ops(ctx, rng, backend):
    cfg, ids, cu, context, table = ngram_batch(rng)
    fp8 = table.to(torch.float8_e4m3fn)
    rows = itorch.ngram_row_ids(cfg, ids, cu, context)
    assert_same(rows, ingot.ngram_row_ids(ctx, cfg, ids, cu, context), "row ids")
    assert_same(compile_full(itorch.ngram_row_ids, backend)(cfg, ids, cu, context), rows)
    for t in (table, fp8):
        out = itorch.ngram_gather(rows, t, 0.5)
        assert_same(out, ingot.ngram_gather(ctx, rows, t, 0.5), f"gather {t.dtype}")
        assert_same(compile_full(itorch.ngram_gather, backend)(rows, t, 0.5), out)
        embedded = itorch.ngram_embed(cfg, ids, cu, context, t, 0.5)
        assert_same(embedded, out, f"embed {t.dtype}")
        assert_same(compile_full(lambda *a: itorch.ngram_embed(cfg, *a, 0.5), backend)(
            ids, cu, context, t), out, "compiled embed")


def test_ngram_commit_context_mutates_in_the_graph(ctx, rng, backend):
    cfg, ids, cu, context, table = ngram_batch(rng)
    want = context.clone()
    ingot.ngram_commit_context(ctx, cfg, ids, cu, want)
    assert not torch.equal(want, context)

    def step(ids, cu, context, table):
        out = itorch.ngram_embed(cfg, ids, cu, context, table)  # reads the old context
        itorch.ngram_commit_context(cfg, ids, cu, context)
        return out

    eager_context, compiled_context = context.clone(), context.clone()
    eager = step(ids, cu, eager_context, table)
    compiled = compile_full(step, backend)(ids, cu, compiled_context, table)
    assert_same(eager_context, want, "eager context")
    assert_same(compiled_context, want, "compiled context")
    assert_same(compiled, eager, "embedding of the old context")


# ---- sampling ----------------------------------------------------------------------------------


def sampling_inputs(rng, B=6, V=700):
    x = torch.from_numpy((rng.standard_normal((B, V)) * 2).astype(np.float32))
    x[1, :300] = float("-inf")
    params = dict(temperature=torch.tensor([0.7, 1.0, 0.0, 1.3, 0.9, 1.0]),
                  top_k=torch.tensor([20, 0, 0, 5, 0, 50], dtype=torch.int32),
                  top_p=torch.tensor([0.9, 1.0, 1.0, 0.8, 0.5, 1.0]),
                  min_p=torch.tensor([0.0, 0.0, 0.0, 0.05, 0.0, 0.0]),
                  seed=torch.arange(B, dtype=torch.int64) * 11 + 3,
                  position=torch.full((B,), 5, dtype=torch.int64))
    words = (V + 31) // 32
    allowed = torch.full((B, words), -1, dtype=torch.int32)
    allowed[4, :] = 0x55555555  # row 4: even tokens only
    lists = dict(allowed=allowed, banned=[(0, 3), (5, 9)], bias_ids=[(2, 17), (3, 1)],
                 bias_values=[4.0, -2.5])
    return x, params, lists


def test_sample_equals_the_ingot_op_and_compiles(ctx, rng, backend):
    x, params, lists = sampling_inputs(rng)
    kw = dict(return_status=True, logprobs=True, raw_logprobs=True, num_top=4)
    want = ingot.sample(ctx, x, **params, **lists, **kw)
    got = itorch.sample(x, **params, **lists, **kw)
    assert isinstance(got, ingot.SampleResult)
    assert_same(tuple(got), tuple(want), "eager")
    assert (got.tokens[4] % 2 == 0) and got.tokens[0] != 3

    def step(x, p, allowed):
        return itorch.sample(x, **p, allowed=allowed, banned=lists["banned"],
                             bias_ids=lists["bias_ids"], bias_values=lists["bias_values"], **kw)

    assert_same(tuple(compile_full(step, backend)(x, params, lists["allowed"])), tuple(want),
                "compiled")
    # only the tokens, and the final top-n
    tokens = compile_full(lambda x, p: itorch.sample(x, **p), backend)(x, params)
    assert_same(tokens, ingot.sample(ctx, x, **params).tokens, "tokens alone")
    final = itorch.sample(x, **params, num_top=3, top_final=True)
    assert final.row_status is None and final.token_logprob is None
    assert_same(final.top_ids, ingot.sample(ctx, x, **params, num_top=3, top_final=True).top_ids)


def test_sample_converts_engine_parameters_in_the_graph(ctx, rng, backend):
    x, params, _ = sampling_inputs(rng)
    want = ingot.sample(x, **params, logprobs=True)
    held = dict(temperature=params["temperature"].double(), top_k=params["top_k"].long(),
                top_p=params["top_p"].tolist(), min_p=0.0, seed=params["seed"].tolist(),
                position=5)
    for form in (held, dict(held, temperature=0.7, top_k=20, top_p=0.9),):
        expected = ingot.sample(ctx, x.numpy(), **{k: (v.numpy() if isinstance(v, torch.Tensor)
                                                       else v) for k, v in form.items()},
                                logprobs=True)
        eager = itorch.sample(x, **form, logprobs=True)
        assert_same(eager.tokens, torch.from_numpy(expected.tokens))
        compiled = compile_full(lambda x: itorch.sample(x, **form, logprobs=True), backend)(x)
        assert_same(compiled.tokens, eager.tokens)
        assert_same(compiled.token_logprob, eager.token_logprob)
    assert_same(itorch.sample(x, **held, logprobs=True).tokens, want.tokens, "held == exact")


def test_sample_under_dynamic_shapes(rng, backend):
    step = compile_full(lambda x, seed: itorch.sample(x, 10, 0.9, temperature=0.8, seed=seed),
                        backend, dynamic=True)
    for B in (3, 5, 8):
        x = torch.from_numpy(rng.standard_normal((B, 257)).astype(np.float32))
        seed = torch.arange(B, dtype=torch.int64)
        assert_same(step(x, seed), ingot.sample(x, 10, 0.9, temperature=0.8, seed=seed), f"B={B}")


def test_sampling_softmax_op(ctx, rng, backend):
    x, params, lists = sampling_inputs(rng)
    soft = {k: params[k] for k in ("temperature", "top_k", "top_p", "min_p")}
    want = ingot.sampling_softmax(ctx, x, **soft, **lists)
    got = itorch.sampling_softmax(x, **soft, **lists, return_status=True)
    assert_same(got, want, "eager")
    assert_same(compile_full(lambda x: itorch.sampling_softmax(x, **soft, **lists), backend)(x),
                want[0], "compiled")
    assert_same(compile_full(lambda x: itorch.sampling_softmax(x, temperature=0.5), backend)(x),
                ingot.sampling_softmax(ctx, x, temperature=0.5)[0], "compiled, a number")


def test_logits_shape_is_named_eager_and_compiled(backend):
    x = torch.zeros(8)
    expected = r"^logits: shape \(8,\), expected 2-D \[B, V\]"
    with pytest.raises(ValueError, match=expected):
        itorch.sample(x, temperature=0.5)
    with pytest.raises(ValueError, match=expected):
        itorch.sampling_softmax(x)
    with pytest.raises(Exception, match=r"logits: shape \(8,\), expected 2-D"):
        compile_full(lambda x: itorch.sample(x), backend)(x)


# ---- NVFP4 -------------------------------------------------------------------------------------


def quantized(rng, rows, cols, ctx):
    x = torch.from_numpy(rng.standard_normal((rows, cols)).astype(np.float32))
    gs = ingot.nvfp4_global_scale(ctx, x)
    values, scales = ingot.nvfp4_quantize(ctx, x, gs)
    return ingot.NVFP4Matrix(values, scales, gs)


def test_nvfp4_format_ops(ctx, rng, backend):
    x = torch.from_numpy(rng.standard_normal((20, 64)).astype(np.float32)).to(torch.bfloat16)
    x[3, 5] = float("nan")
    gs = itorch.nvfp4_global_scale(x)
    assert_same(gs, ingot.nvfp4_global_scale(ctx, x), "global scale")
    assert_same(compile_full(itorch.nvfp4_global_scale, backend)(x), gs)
    want = ingot.nvfp4_quantize(ctx, x, gs)
    count = torch.zeros(1, dtype=torch.int32)
    got = itorch.nvfp4_quantize(x, gs, nonfinite_count=count)
    assert_same(got, want, "quantize") and count.item() == 1

    def quantize_counting(x, gs, count):
        return itorch.nvfp4_quantize(x, gs, count)

    assert_same(compile_full(quantize_counting, backend)(x, gs, count), want, "compiled")
    assert count.item() == 2  # the compiled op added in place too
    assert_same(compile_full(lambda x: itorch.nvfp4_quantize(x, 100.0), backend)(x),
                ingot.nvfp4_quantize(ctx, x, 100.0), "a number as the global scale")
    values, scales = want
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        out = itorch.nvfp4_dequantize(values, scales, gs, dtype)
        assert_same(out, ingot.nvfp4_dequantize(ctx, values, scales, gs, dtype=name), name)
        assert_same(itorch.nvfp4_dequantize(values, scales, gs, name), out, "named dtype")
        assert_same(compile_full(itorch.nvfp4_dequantize, backend)(values, scales, gs, dtype), out)
    with pytest.raises(ValueError, match=r"^values: shape \(8,\), expected \[rows, cols/2\]"):
        itorch.nvfp4_dequantize(values.reshape(-1)[:8], scales, gs)
    with pytest.raises(ValueError, match=r"^x: shape \(4, 24\), expected \[rows, cols\] with cols "
                                         r"a multiple of 16"):
        itorch.nvfp4_quantize(torch.zeros(4, 24), gs)


def test_nvfp4_gemm_geglu_mlp(ctx, rng, backend):
    M, K, H, N = 5, 64, 64, 64
    a = quantized(rng, M, K, ctx)
    w = quantized(rng, 2 * H, K, ctx)
    d = quantized(rng, N, H, ctx)
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        want = ingot.nvfp4_gemm(ctx, a, w, dtype=name)
        assert_same(itorch.nvfp4_gemm(a, w, dtype), want, f"gemm {name}")
        assert_same(compile_full(itorch.nvfp4_gemm, backend)(a, w, dtype), want, "compiled gemm")
    h_gs = torch.tensor([30.0])
    want_h = ingot.nvfp4_geglu(ctx, a, w, h_gs)
    h = itorch.nvfp4_geglu(a, w, h_gs)
    assert isinstance(h, ingot.NVFP4Matrix) and h.global_scale is h_gs
    assert_same(tuple(h), tuple(want_h), "geglu")
    assert_same(tuple(compile_full(itorch.nvfp4_geglu, backend)(a, w, h_gs)), tuple(want_h))
    want = ingot.nvfp4_mlp(ctx, a, w, h_gs, d)
    assert_same(want, ingot.nvfp4_gemm(ctx, want_h, d), "mlp == geglu + gemm")
    assert_same(itorch.nvfp4_mlp(a, w, h_gs, d), want, "mlp")
    assert_same(compile_full(itorch.nvfp4_mlp, backend)(a, w, h_gs, d), want, "compiled mlp")
    assert_same(compile_full(lambda a: itorch.nvfp4_mlp(a, w, 30.0, d), backend)(a), want,
                "compiled mlp, a number as h's global scale")


def test_scale_shape_matches_the_library():
    from ingot.torch import _scale_shape

    for rows, cols in ((1, 16), (128, 64), (129, 80), (1000, 2048), (0, 0)):
        assert _scale_shape(rows, cols) == ingot.nvfp4_scale_shape(rows, cols)


# ---- schemas, fake implementations, mutations ------------------------------------------------


def opcheck_cases(rng):
    ctx = ingot.default_context()
    cfg, ids, cu, context, table = ngram_batch(rng)
    fields = itorch._config_fields(cfg)
    rows = itorch.ngram_row_ids(cfg, ids, cu, context)
    x, params, lists = sampling_inputs(rng)
    banned = torch.tensor(lists["banned"], dtype=torch.int32)
    bias_ids = torch.tensor(lists["bias_ids"], dtype=torch.int32)
    bias_values = torch.tensor(lists["bias_values"])
    p = [params[k] for k in ("temperature", "top_k", "top_p", "min_p")]
    xq = torch.from_numpy(rng.standard_normal((6, 64)).astype(np.float32))
    gs = torch.tensor([200.0])
    a, w, d = quantized(rng, 3, 64, ctx), quantized(rng, 128, 64, ctx), quantized(rng, 64, 64, ctx)
    ops = torch.ops.ingot
    return [
        (ops.ngram_row_ids, (ids, cu, context, *fields)),
        (ops.ngram_gather, (rows, table, 2.0)),
        (ops.ngram_embed, (ids, cu, context, table, 1.0, *fields)),
        (ops.ngram_commit_context, (ids, cu, context.clone(), *fields)),
        (ops.sample, (x, *p, params["seed"], params["position"], lists["allowed"], banned,
                      bias_ids, bias_values, True, True, True, 3, False)),
        (ops.sample, (x, None, None, None, None, None, None, None, None, None, None, False, False,
                      False, 0, False)),
        (ops.sampling_softmax, (x, *p, lists["allowed"], banned, bias_ids, bias_values, True)),
        (ops.nvfp4_global_scale, (xq,)),
        (ops.nvfp4_quantize, (xq, gs, torch.zeros(1, dtype=torch.int32))),
        (ops.nvfp4_quantize, (xq, gs, None)),
        (ops.nvfp4_dequantize, (a.values, a.scales, a.global_scale, torch.bfloat16)),
        (ops.nvfp4_gemm, (*a, *w, torch.float32)),
        (ops.nvfp4_geglu, (*a, *w, gs)),
        (ops.nvfp4_mlp, (*a, *w, gs, *d, torch.bfloat16)),
    ]


def test_opcheck(rng):
    """Schemas, fake implementations against the real outputs, declared
    mutations (torch.library.opcheck)."""
    for op, args in opcheck_cases(rng):
        torch.library.opcheck(op, args)


# ---- CUDA graphs ---------------------------------------------------------------------------------


def cuda_graph(fn, *args):
    """(graph, outputs of fn captured into a torch.cuda.CUDAGraph) after a
    warm-up on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    return graph, out


@needs_cuda
def test_cuda_graph_replays_equal_eager(rng):
    B, V = 4, 32000
    x = torch.randn(B, V, device="cuda") * 2
    params = dict(temperature=torch.full((B,), 0.8, device="cuda"),
                  top_k=torch.full((B,), 40, dtype=torch.int32, device="cuda"),
                  top_p=torch.full((B,), 0.9, device="cuda"),
                  seed=torch.zeros(B, dtype=torch.int64, device="cuda"),
                  position=torch.zeros(B, dtype=torch.int64, device="cuda"))

    def step(x):
        res = itorch.sample(x, **params, logprobs=True, return_status=True)
        return res.tokens, res.row_status, res.token_logprob, itorch.sampling_softmax(x)

    graph, out = cuda_graph(step, x)
    for rep in range(3):
        x.copy_(torch.randn(B, V, device="cuda") * 2)
        params["seed"].copy_(torch.randint(0, 2**62, (B,), device="cuda"))
        params["position"].fill_(rep)
        graph.replay()
        torch.cuda.synchronize()
        assert_same(out, step(x), f"replay {rep}")


@needs_cuda
def test_cuda_graph_of_ngram_and_nvfp4_ops(rng):
    cfg, ids, cu, context, table = (t.cuda() if isinstance(t, torch.Tensor) else t
                                    for t in ngram_batch(rng))
    ctx = ingot.default_context("cuda")
    a, w, d = (ingot.NVFP4Matrix(*(t.cuda() for t in quantized(rng, r, c, ingot.Context())))
               for r, c in ((8, 64), (128, 64), (64, 64)))
    h_gs = torch.tensor([30.0], device="cuda")
    x = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)

    def step(ids, context, x):
        out = itorch.ngram_embed(cfg, ids, cu, context, table)
        itorch.ngram_commit_context(cfg, ids, cu, context)
        gs = itorch.nvfp4_global_scale(x)
        values, scales = itorch.nvfp4_quantize(x, gs)
        return (out, gs, values, scales, itorch.nvfp4_dequantize(values, scales, gs),
                itorch.nvfp4_mlp(a, w, h_gs, d), itorch.nvfp4_gemm(a, w))

    start = context.clone()
    graph, out = cuda_graph(step, ids, context, x)
    for rep in range(2):
        ids.copy_(torch.randint(0, 512, ids.shape, device="cuda"))
        x.copy_(torch.randn(16, 64, device="cuda", dtype=torch.bfloat16))
        context.copy_(start)
        graph.replay()
        torch.cuda.synchronize()
        replayed_context = context.clone()
        context.copy_(start)
        assert_same(out, step(ids, context, x), f"replay {rep}")
        assert_same(replayed_context, context, "committed context")
    ctx.check_device_errors()


@needs_cuda
def test_capture_refuses_parameters_that_need_a_conversion():
    B, V = 2, 1000
    x = torch.randn(B, V, device="cuda")
    ingot.default_context("cuda")  # made before the capture, as a warm-up would
    cases = [
        (dict(top_k=torch.full((B,), 5, device="cuda")),  # int64
         r"^top_k: a torch\.int64 tensor on cuda:0 needs a conversion into a new tensor, which "
         r"ingot does not make while a CUDA graph is being captured; pass a torch\.int32 tensor "
         r"of shape \[B\] on cuda:0"),
        (dict(temperature=0.7), r"^temperature: a Python float \(0\.7\) needs a conversion.* "
                                r"pass a torch\.float32 tensor of shape \[B\] on cuda:0"),
        (dict(seed=torch.zeros(B, dtype=torch.int64)),  # host memory
         r"^seed: a torch\.int64 tensor on cpu needs a conversion.*pass a torch\.int64 tensor"),
        (dict(banned=[(0, 1)]), r"^banned: a list needs a conversion.*pass a torch\.int32 tensor "
                                r"of shape \[N, 2\] on cuda:0"),
    ]
    for sample in (itorch.sample, ingot.sample):
        for kw, message in cases:
            graph = torch.cuda.CUDAGraph()
            with pytest.raises(TypeError, match=message):
                with torch.cuda.graph(graph):
                    sample(x, **kw)
    matrix = torch.randn(4, 32, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(TypeError, match=r"^global_scale: a Python float \(2\.0\) needs a "
                                        r"conversion.*torch\.float32 tensor of shape \[1\]"):
        with torch.cuda.graph(graph):
            itorch.nvfp4_quantize(matrix, 2.0)
