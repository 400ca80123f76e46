"""Sharded sampling through the Python binding on the CPU backend: random
batches split into 1, 2, 3, 4 and 8 uneven shards (empty and one-token
shards, ranges in a random slot order), run with ingot.sample_sharded /
ingot.sampling_softmax_sharded and step by step, every output compared BIT
FOR BIT with ingot.sample / ingot.sampling_softmax on the unsharded logits;
torch tensors where torch is installed; the struct layouts against the C
header; errors that name the argument. The one-call NCCL form: its refusal
on the CPU, and on a GPU (with libnccl) a one-rank communicator against the
step functions, bit for bit."""

import ctypes

import pytest

np = pytest.importorskip("numpy")

import ingot  # noqa: E402
from ingot._lib import ingot_sampling_shard, ingot_sampling_shard_plan  # noqa: E402
from ingot.sampling_shard import select_flags  # noqa: E402


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint32) if a.dtype == np.float32 else a


def same(a, b, what):
    assert a.shape == b.shape, what
    assert np.array_equal(bits(a), bits(b)), f"{what}: {a} != {b}"


def make_split(rng, V, S):
    """S ranges tiling [0, V) in a random slot order: (begins, counts)."""
    cuts = np.sort(rng.integers(0, V + 1, size=S - 1))
    if S > 2 and rng.random() < 0.3:
        cuts[0] = cuts[1]  # an empty shard
    edges = np.concatenate([[0], cuts, [V]])
    order = rng.permutation(S)
    begins, counts = [0] * S, [0] * S
    for j in range(S):
        begins[order[j]] = int(edges[j])
        counts[order[j]] = int(edges[j + 1] - edges[j])
    return begins, counts


def make_logits(rng, B, V):
    x = (rng.standard_normal((B, V)) * rng.choice([0.5, 2.0, 8.0])).astype(np.float32)
    for r in range(B):
        kind = rng.integers(0, 6)
        if kind == 0:
            x[r, rng.random(V) < 0.3] = -np.inf
        elif kind == 1:
            x[r] = np.floor(x[r])  # ties
        elif kind == 2:
            x[r] = -np.inf  # empty
        elif kind == 3 and V > 3:
            x[r, rng.integers(0, V, 2)] = np.nan
    return x


def make_params(rng, B, V, kc):
    t = rng.choice([0.0, 0.7, 1.0, 1.3], size=B).astype(np.float32)
    k = np.where(rng.random(B) < 0.4, 0, rng.integers(1, max(V, 2), size=B)).astype(np.int32)
    k[rng.random(B) < 0.3] = rng.integers(1, kc + 1)
    p = np.where(rng.random(B) < 0.5, 1.0, rng.uniform(0.1, 0.99, B)).astype(np.float32)
    q = np.where(rng.random(B) < 0.7, 0.0, rng.uniform(0, 0.2, B)).astype(np.float32)
    seed = rng.integers(0, 1 << 62, size=B, dtype=np.int64)
    pos = rng.integers(0, 1000, size=B, dtype=np.int64)
    words = (V + 31) // 32
    allowed = rng.integers(0, 1 << 32, size=(B, words), dtype=np.uint64).astype(np.uint32)
    allowed[0] = 0xFFFFFFFF
    banned = np.array([[rng.integers(0, B), rng.integers(0, V)] for _ in range(3)], np.int32)
    bias_ids = np.array([[rng.integers(0, B), rng.integers(-1, V + 1)] for _ in range(4)],
                        np.int32)
    bias_values = rng.standard_normal(4).astype(np.float32)
    return dict(temperature=t, top_k=k, top_p=p, min_p=q, seed=seed, position=pos,
                allowed=allowed if rng.random() < 0.5 else None, banned=banned,
                bias_ids=bias_ids, bias_values=bias_values)


SPLITS = (1, 2, 3, 4, 8)


@pytest.mark.parametrize("V", [1, 7, 100, 1000, 5000])
def test_sample_sharded_bit_identical(rng, V):
    for _ in range(3):
        B = int(rng.integers(1, 8))
        kc = int(rng.choice([1, 8, 64]))
        x = make_logits(rng, B, V)
        prm = make_params(rng, B, V, kc)
        n = int(rng.choice([0, 1, 5]))
        final = bool(rng.integers(0, 2))
        want = ingot.sample(x, return_status=True, logprobs=True, raw_logprobs=True, num_top=n,
                            top_final=final, **prm)
        probs = ingot.sampling_softmax(x, **{k: v for k, v in prm.items()
                                             if k not in ("seed", "position")})
        for S in SPLITS:
            begins, counts = make_split(rng, V, S)
            slices = [x[:, b:b + c] for b, c in zip(begins, counts)]
            for max_top_k in (kc, 0):  # candidates where they serve; radix rounds only
                got = ingot.sample_sharded(slices, begins, max_top_k=max_top_k,
                                           return_status=True, logprobs=True, raw_logprobs=True,
                                           num_top=n, top_final=final, **prm)
                for name in want._fields:
                    w, g = getattr(want, name), getattr(got, name)
                    if w is None:
                        assert g is None, name
                    else:
                        same(w, g, f"{name} S={S} kc={max_top_k} split={begins}/{counts}")
            sm = {k: v for k, v in prm.items() if k not in ("seed", "position")}
            parts, status = ingot.sampling_softmax_sharded(slices, begins, max_top_k=kc,
                                                           return_status=True, **sm)
            same(status, want.row_status, f"softmax row_status S={S}")
            for b, c, part in zip(begins, counts, parts):
                same(part, probs[:, b:b + c], f"softmax probs S={S} [{b}, +{c})")


def test_bf16_and_strided_slices(rng):
    V, B = 300, 5
    x32 = make_logits(rng, B, V)
    x = (x32.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits
    wide = np.zeros((B, V + 5), np.uint16)
    wide[:, :V] = x
    x = wide[:, :V]  # row stride V + 5
    prm = dict(top_k=np.full(B, 40, np.int32), top_p=0.8, temperature=0.9, seed=7)
    want = ingot.sample(x, logprobs=True, **prm)
    begins = [150, 0]
    slices = [x[:, 150:], x[:, :150]]
    got = ingot.sample_sharded(slices, begins, logprobs=True, max_top_k=16, **prm)
    same(want.tokens, got.tokens, "tokens")
    same(want.token_logprob, got.token_logprob, "token_logprob")


def test_steps_by_hand(rng):
    """The step functions as an engine calls them, one plan per shard."""
    V, B, S = 1000, 4, 3
    x = make_logits(rng, B, V)
    prm = dict(top_p=0.9, temperature=0.8, seed=np.arange(B, dtype=np.int64))
    want = ingot.sample(x, logprobs=True, **prm)
    begins, counts = [0, 400, 401], [400, 1, 599]
    plans = [ingot.sampling_shard_get_plan(B, V, begins[j], counts[j], num_shards=S,
                                           shard_index=j, max_top_k=8, select_top_p=True,
                                           device="cpu") for j in range(S)]
    assert plans[0].num_steps == 7 and plans[1].record_bytes == plans[0].record_bytes
    SUM, GATHER = ingot.SAMPLING_SHARD_EXCHANGE_SUM, ingot.SAMPLING_SHARD_EXCHANGE_GATHER
    assert plans[0].exchange == (GATHER, GATHER, SUM, SUM, SUM, GATHER, GATHER)
    assert plans[0].exchanged_bytes[2] == plans[0].record_bytes[2]
    assert plans[0].exchanged_bytes[1] == S * plans[0].record_bytes[1]
    assert plans[2].vocab_begin == 401 and plans[2].num_shards == S
    ws = [p.new_workspace(x) for p in plans]
    records = [p.new_record(x) for p in plans]
    gathered = None
    for i in range(plans[0].num_steps):
        for j, p in enumerate(plans):
            ingot.sampling_shard_step(p, i, x[:, begins[j]:begins[j] + counts[j]], gathered,
                                      ws[j], record=records[j], **prm)
        if plans[0].exchange[i] == SUM:
            gathered = ingot.sampling_shard_sum(plans[0], i, records)
        else:
            gathered = ingot.sampling_shard_gather(plans[0], i, records)
        assert gathered.nbytes >= plans[0].exchanged_bytes[i]
    for j, p in enumerate(plans):
        got = ingot.sampling_shard_finish_sample(p, gathered, ws[j], logprobs=True)
        same(want.tokens, got.tokens, f"tokens of shard {j}")
        same(want.token_logprob, got.token_logprob, f"token_logprob of shard {j}")


def test_torch_tensors(rng):
    torch = pytest.importorskip("torch")
    V, B = 2000, 6
    x = torch.from_numpy(make_logits(rng, B, V))
    prm = dict(top_k=torch.full((B,), 100, dtype=torch.int32), top_p=0.7,
               temperature=torch.full((B,), 0.9), seed=torch.arange(B))
    want = ingot.sample(x, return_status=True, **prm)
    begins = [0, 700, 1500]
    slices = [x[:, 0:700], x[:, 700:1500], x[:, 1500:]]
    got = ingot.sample_sharded(slices, begins, return_status=True, **prm)
    assert isinstance(got.tokens, torch.Tensor)
    assert torch.equal(want.tokens, got.tokens) and torch.equal(want.row_status, got.row_status)
    probs = ingot.sampling_softmax(x, top_k=prm["top_k"], top_p=0.7)
    parts = ingot.sampling_softmax_sharded(slices, begins, top_k=prm["top_k"], top_p=0.7)
    assert torch.equal(torch.cat(parts, dim=1).view(torch.int32), probs.view(torch.int32))


def test_struct_layouts():
    """The ctypes mirrors have the C sizes (LP64)."""
    assert ctypes.sizeof(ingot_sampling_shard) == 56
    plan = ingot_sampling_shard_plan
    assert plan.record_bytes.offset == 16 and plan.exchanged_bytes.offset == 16 + 8 * 11
    assert plan.exchange.offset == 16 + 16 * 11 and plan.max_record_bytes.offset == 16 + 20 * 11 + 4
    assert ctypes.sizeof(plan) == plan.workspace_bytes.offset + 8


# ---- errors ---------------------------------------------------------------------------------


def test_errors_name_the_argument():
    V, B = 50, 2
    x = np.zeros((B, V), np.float32)
    with pytest.raises(ingot.IngotError, match="vocab_count"):
        ingot.sampling_shard_get_plan(B, V, 30, 30, num_shards=2, device="cpu")
    with pytest.raises(ValueError, match="num_shards"):
        ingot.sampling_shard_get_plan(B, V, 0, 50, num_shards=0, device="cpu")
    with pytest.raises(ValueError, match="shard_index"):
        ingot.sampling_shard_get_plan(B, V, 0, 50, shard_index=-1, device="cpu")
    with pytest.raises(ValueError, match="max_top_k"):
        ingot.sampling_shard_get_plan(B, V, 0, 50, max_top_k=5000, device="cpu")
    with pytest.raises(ingot.IngotError, match="shard_index = 1"):
        ingot.sampling_shard_get_plan(B, V, 0, 50, shard_index=1, device="cpu")
    with pytest.raises(ingot.IngotError, match=r"dtype \(logits_dtype\)"):
        ingot.sampling_shard_get_plan(B, V, 0, 50, dtype="i32", device="cpu")
    with pytest.raises(ValueError, match="dtype"):
        ingot.sampling_shard_get_plan(B, V, 0, 50, dtype="nope", device="cpu")
    with pytest.raises(TypeError, match="device"):
        ingot.sampling_shard_get_plan(B, V, 0, 50)
    plan = ingot.sampling_shard_get_plan(B, V, 0, 50, device="cpu")
    ws, rec = plan.new_workspace(x), plan.new_record(x)
    with pytest.raises(TypeError, match="plan"):
        ingot.sampling_shard_step(None, 0, x, None, ws)
    with pytest.raises(ingot.IngotError, match="step = 5"):
        ingot.sampling_shard_step(plan, 5, x, None, ws, record=rec)
    with pytest.raises(ingot.IngotError, match="logits: shape"):
        ingot.sampling_shard_step(plan, 0, x[:, :40], None, ws, record=rec)
    with pytest.raises(ingot.IngotError, match="workspace"):
        ingot.sampling_shard_step(plan, 0, x, None, ws[:16], record=rec)
    with pytest.raises(ingot.IngotError, match="record"):
        ingot.sampling_shard_step(plan, 0, x, None, ws, record=rec[:16])
    with pytest.raises(ValueError, match="record"):
        ingot.sampling_shard_step(plan, 0, x, None, ws, record=np.zeros((4, 64), np.uint8))
    with pytest.raises(ingot.IngotError, match="top_k"):
        ingot.sampling_shard_step(plan, 0, x, None, ws, record=rec, top_k=10)
    with pytest.raises(ingot.IngotError, match="temperature"):
        ingot.sampling_shard_step(plan, 0, x, None, ws, record=rec, temperature=-1.0)
    with pytest.raises(ingot.IngotError, match="gathered: NULL"):
        ingot.sampling_shard_step(plan, 1, x, None, ws, record=rec)
    ingot.sampling_shard_step(plan, 0, x, None, ws, record=rec)
    with pytest.raises(ValueError, match="records: 2 buffers"):
        ingot.sampling_shard_gather(plan, 0, [rec, rec])
    with pytest.raises(ValueError, match="step"):
        ingot.sampling_shard_gather(plan, 7, [rec])
    with pytest.raises(ingot.IngotError, match="record_bytes = "):  # step 0 is an all-gather
        ingot.sampling_shard_sum(plan, 0, [rec], np.zeros(4096, np.uint8))
    g = ingot.sampling_shard_gather(plan, 0, [rec])
    with pytest.raises(ingot.IngotError, match="gathered"):
        ingot.sampling_shard_finish_sample(plan, g, ws)  # records of step 0, not the last
    with pytest.raises(ingot.IngotError, match="INGOT_SAMPLING_SHARD_SOFTMAX"):
        ingot.sampling_shard_finish_softmax(plan, x, g, ws)
    with pytest.raises(ValueError, match=r"vocab_begins: 1 entries for 2 slices"):
        ingot.sample_sharded([x[:, :20], x[:, 20:]], [0])
    with pytest.raises(ValueError, match=r"slices\[1\]"):
        ingot.sample_sharded([x[:, :20], x[:1, 20:]], [0, 20])
    with pytest.raises(ingot.IngotError, match="tile|overlap|hold"):
        ingot.sample_sharded([x[:, :20], x[:, 20:]], [0, 10])


# ---- the whole call over NCCL ---------------------------------------------------------------


def test_nccl_form_on_the_cpu():
    """The NCCL form's workspace (the plan's three parts, each rounded up to
    256) and its refusal on a CPU context, by name, nothing written; comm
    accepted as an int, a c_void_p or an object with .comm."""
    V, B = 300, 2
    x = np.zeros((B, V), np.float32)
    plan = ingot.sampling_shard_get_plan(B, V, 0, V, max_top_k=8, num_top=2, device="cpu")

    def up(n):
        return (n + 255) // 256 * 256

    assert plan.nccl_workspace_bytes == (up(plan.workspace_bytes) + up(plan.max_record_bytes) +
                                         up(plan.max_exchanged_bytes))
    tokens = np.full(B, -7, np.int32)

    class Communicator:
        comm = ctypes.c_void_p(0x1000)

    for comm in (0x1000, ctypes.c_void_p(0x1000), Communicator()):
        with pytest.raises(ingot.IngotError, match="needs a CUDA context"):
            ingot.sample_sharded_nccl(comm, plan, x, tokens=tokens)
    assert (tokens == -7).all()
    with pytest.raises(TypeError, match="comm"):
        ingot.sample_sharded_nccl("rank0", plan, x)
    soft = ingot.sampling_shard_get_plan(B, V, 0, V, softmax=True, device="cpu")
    with pytest.raises(ingot.IngotError, match="needs a CUDA context"):
        ingot.sampling_softmax_sharded_nccl(0x1000, soft, x)
    with pytest.raises(ingot.IngotError, match="INGOT_SAMPLING_SHARD_SOFTMAX"):
        ingot.sample_sharded_nccl(0x1000, soft, x)
    with pytest.raises(ingot.IngotError, match="needs a CUDA context"):
        ingot.sampling_sharded_nccl_verify(0x1000, plan)


def _nccl_one_rank(torch):
    """A one-rank NCCL communicator on the current GPU, from libnccl.so.2
    through ctypes (the library itself opens the same copy)."""
    try:
        nccl = ctypes.CDLL("libnccl.so.2")
    except OSError as e:
        pytest.skip(f"no libnccl.so.2: {e}")
    comm = ctypes.c_void_p()
    devs = (ctypes.c_int * 1)(torch.cuda.current_device())
    r = nccl.ncclCommInitAll(ctypes.byref(comm), 1, devs)
    assert r == 0, f"ncclCommInitAll: {r}"
    return nccl, comm


def test_nccl_one_rank_matches_the_steps(rng):
    """On one GPU: a one-rank communicator, the NCCL form == the step
    functions with the local exchange, bit for bit."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not ingot.backend_available("cuda"):
        pytest.skip("no CUDA device")
    nccl, comm = _nccl_one_rank(torch)
    try:
        for V in (1000, 151936):
            B = 4
            x = torch.from_numpy(make_logits(rng, B, V)).cuda()
            prm = {k: (torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v)
                   for k, v in make_params(rng, B, V, 64).items()}
            want = ingot.sample_sharded([x], [0], max_top_k=64, return_status=True,
                                        logprobs=True, num_top=3, **prm)
            select = select_flags(B, V, 64, temperature=prm["temperature"],
                                  top_k=prm["top_k"], top_p=prm["top_p"])
            plan = ingot.sampling_shard_get_plan(B, V, 0, V, max_top_k=64, num_top=3,
                                                 select_top_k=select[0], select_top_p=select[1],
                                                 device=x.device)
            try:
                ingot.sampling_sharded_nccl_verify(comm, plan)
            except ingot.IngotError as e:
                if e.status == ingot.Status.NOT_SUPPORTED:
                    pytest.skip(f"ingot without NCCL here: {e}")
                raise
            got = ingot.sample_sharded_nccl(comm, plan, x, return_status=True, logprobs=True,
                                            **prm)
            torch.cuda.synchronize()
            for name in ("tokens", "row_status", "token_logprob", "top_ids", "top_logprobs"):
                a, b = getattr(want, name), getattr(got, name)
                assert torch.equal(a.view(torch.int32), b.view(torch.int32)), name
    finally:
        nccl.ncclCommDestroy(comm)
