"""Sampling through the Python binding on the CPU backend, against numpy
written here from the rules of ingot.h: an independent Philox-4x32-10 and
uniform conversion (bit-exact), float64 softmax of the known-hard masked rows,
Gumbel-max draws rebuilt in numpy, sort-based top-k / top-p / min-p sets,
log-probabilities and top-n, empty / NaN rows, batch invariance, errors;
against torch.softmax when torch is installed; the struct layouts against
the C header; the CUDA backend against the CPU and torch.softmax."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

import ingot  # noqa: E402
from ingot._lib import ingot_sampling_logprobs, ingot_sampling_params  # noqa: E402

INCLUDE_DIR = Path(__file__).resolve().parents[2] / "include"
MASK32 = 0xFFFFFFFF


# ---- the generator, written again in numpy ------------------------------------------------


def philox4x32_10(ctr, key):
    """Random123's philox4x32 with 10 rounds on uint64 arrays holding 32-bit words."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in ctr)
    k0, k1 = (np.asarray(k, dtype=np.uint64) for k in key)
    m32 = np.uint64(MASK32)
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & m32
            k1 = (k1 + np.uint64(0xBB67AE85)) & m32
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m32)
    return c0, c1, c2, c3


def uniform_np(seed, position, token):
    """u of (seed, position, token) as float32 (arrays broadcast)."""
    seed = np.asarray(seed, dtype=np.uint64)
    position = np.asarray(position, dtype=np.uint64)
    token = np.asarray(token, dtype=np.uint64)
    m32 = np.uint64(MASK32)
    x0, x1, _, _ = philox4x32_10(
        (token, np.zeros_like(token), position & m32, position >> np.uint64(32)),
        (seed & m32, seed >> np.uint64(32)))
    bit_length = np.frexp(x1.astype(np.float64))[1]  # exact: x1 < 2^32; 0 for x1 = 0
    z = 32 - bit_length
    bits = ((126 - z).astype(np.uint64) << np.uint64(23)) | (x0 >> np.uint64(9))
    return bits.astype(np.uint32).view(np.float32)


def gumbel_np(seed, position, token):
    u = uniform_np(seed, position, token).astype(np.float64)
    return -np.log(-np.log1p(-u))


def test_philox_known_answers():
    kat = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
           ((MASK32,) * 4, (MASK32,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in kat:
        assert tuple(int(w) for w in philox4x32_10(ctr, key)) == want


def test_uniform_and_gumbel_match_numpy(rng):
    seeds = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    seeds[:4] = [0, 1, 2**64 - 1, 2**63]
    pos = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    pos[:3] = [0, 2**32, 2**64 - 1]
    tokens = rng.integers(0, 2**31, 3000)
    want = uniform_np(seeds, pos, tokens)
    got = np.array([ingot.sampling_uniform(int(s), int(p), int(t))
                    for s, p, t in zip(seeds, pos, tokens)], dtype=np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert (got > 0).all() and (got < 1).all()
    g = np.array([ingot.sampling_gumbel(int(s), int(p), int(t))
                  for s, p, t in zip(seeds[:500], pos[:500], tokens[:500])])
    np.testing.assert_allclose(g, gumbel_np(seeds[:500], pos[:500], tokens[:500]), rtol=1e-6,
                               atol=1e-6)
    # signed seeds are the same 64 bits
    assert ingot.sampling_uniform(-1, 0, 5) == ingot.sampling_uniform(2**64 - 1, 0, 5)
    with pytest.raises(OverflowError):
        ingot.sampling_uniform(2**64, 0, 0)


def test_portable_exp_log(rng):
    x = -rng.random(20000, dtype=np.float32) * np.float32(104)
    got = np.array([ingot.sampling_exp(v) for v in x[:2000]])
    np.testing.assert_allclose(got, np.exp(x[:2000].astype(np.float64)), rtol=2.5e-7, atol=3e-45)
    assert ingot.sampling_exp(0.0) == 1.0 and ingot.sampling_exp(float("-inf")) == 0.0
    y = rng.random(2000) * 10
    np.testing.assert_allclose([ingot.sampling_log(v) for v in y],
                               np.log(y.astype(np.float32).astype(np.float64)), rtol=2e-7,
                               atol=1e-7)
    assert ingot.sampling_log(1.0) == 0.0


# ---- softmax ----------------------------------------------------------------------------------


def masked_rows(rng, B, V, kinds):
    """Logits [B, V] (float32, N(0, 3)) with the known-hard masks as -inf:
    0: the first 16384 columns, 1: all but 3 ids, 2: a 20000-column block
    in the middle, 3: none. Returns (x, mask) with mask True = masked."""
    x = (rng.standard_normal((B, V)) * 3).astype(np.float32)
    mask = np.zeros((B, V), dtype=bool)
    for r, kind in enumerate(kinds):
        if kind == 0:
            mask[r, :16384] = True
        elif kind == 1:
            mask[r] = True
            mask[r, rng.choice(V, 3, replace=False)] = False
        elif kind == 2:
            mask[r, V // 2 - 10000:V // 2 + 10000] = True
    x[mask] = -np.inf
    return x, mask


def softmax64(x, temps):
    x = x.astype(np.float64)
    m = np.max(np.where(np.isfinite(x), x, -np.inf), axis=1, keepdims=True)
    e = np.where(np.isfinite(x), np.exp((x - m) / temps[:, None].astype(np.float64)), 0.0)
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("V", [151936, 201088, 262144])
def test_softmax_seed_masked_rows(ctx, rng, V):
    x, mask = masked_rows(rng, 4, V, [0, 1, 2, 3])
    temps = (rng.random(4) * 1.7 + 0.3).astype(np.float32)
    probs, status = ingot.sampling_softmax(ctx, x, temperature=temps)
    assert np.isfinite(probs).all() and (status == 0).all()
    assert (probs[mask] == 0).all()
    want = softmax64(x, temps)
    big = want > 1e-6
    rel = np.max(np.abs(probs[big] - want[big]) / want[big])
    print(f"V={V}: max rel err vs float64 softmax {rel:.3g}")
    assert rel < 1e-5
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-5)


def test_softmax_bf16_and_bitmask(ctx, rng):
    """bf16 logits as uint16 bits; the same masks through the bitmask."""
    B, V = 3, 151936
    x, mask = masked_rows(rng, B, V, [0, 1, 2])
    xf = np.where(mask, 0, x).astype(np.float32)
    bits = (xf.view(np.uint32) >> 16).astype(np.uint16)  # truncation: an exact bf16
    exact = (bits.astype(np.uint32) << 16).view(np.float32)
    words = np.zeros((B, (V + 31) // 32), dtype=np.uint32)
    allowed = ~mask
    padded = np.zeros((B, words.shape[1] * 32), dtype=bool)
    padded[:, :V] = allowed
    words = (padded.reshape(B, -1, 32) * (np.uint64(1) << np.arange(32, dtype=np.uint64))).sum(
        axis=2, dtype=np.uint64).astype(np.uint32)
    probs, status = ingot.sampling_softmax(ctx, bits, allowed=words.view(np.int32))
    want = softmax64(np.where(mask, -np.inf, exact), np.ones(B, dtype=np.float32))
    assert (probs[mask] == 0).all() and (status == 0).all()
    big = want > 1e-6
    assert np.max(np.abs(probs[big] - want[big]) / want[big]) < 1e-5


def test_softmax_matches_torch(ctx, rng):
    torch = pytest.importorskip("torch")
    x, mask = masked_rows(rng, 3, 50000, [0, 1, 3])
    temps = np.array([0.7, 1.0, 1.9], dtype=np.float32)
    xt = torch.from_numpy(x)
    probs, status = ingot.sampling_softmax(ctx, xt, temperature=torch.from_numpy(temps))
    assert isinstance(probs, torch.Tensor) and probs.dtype == torch.float32
    want = torch.softmax(xt.double() / torch.from_numpy(temps).double()[:, None], dim=1)
    assert torch.allclose(probs.double(), want, rtol=1e-5, atol=1e-12)


# ---- draws -------------------------------------------------------------------------------------


def scaled(x, temps):
    """s = (x - max) / T in float32 (the header's step 3; -inf stays -inf)."""
    x = np.asarray(x, dtype=np.float32)
    m = np.max(np.where(np.isfinite(x), x, -np.inf), axis=1, keepdims=True).astype(np.float32)
    with np.errstate(invalid="ignore"):
        s = (x - m) / temps[:, None]
    return np.where(np.isfinite(x), s, -np.inf).astype(np.float32)


def test_draws_are_gumbel_max_in_numpy(ctx, rng):
    B, V = 64, 3000
    x = (rng.standard_normal((B, V)) * 2).astype(np.float32)
    x[rng.random((B, V)) < 0.2] = -np.inf
    temps = (rng.random(B) + 0.3).astype(np.float32)
    seeds = rng.integers(0, 2**64, B, dtype=np.uint64)
    pos = rng.integers(0, 2**40, B, dtype=np.uint64)
    res = ingot.sample(ctx, x, temperature=temps, seed=seeds, position=pos)
    s = scaled(x, temps).astype(np.float64)
    keys = s + gumbel_np(seeds[:, None], pos[:, None], np.arange(V)[None, :])
    want = np.argmax(keys, axis=1)
    top2 = np.sort(keys, axis=1)[:, -2:]
    close = (top2[:, 1] - top2[:, 0]) < 1e-5
    assert np.all((res.tokens == want) | close), (res.tokens, want)
    assert np.isfinite(x[np.arange(B), res.tokens]).all()


def test_three_allowed_ids(ctx, rng):
    """The known-hard sampling case: all but 3 ids masked; every draw is one of them."""
    B, V, draws = 16, 151936, 8
    x = np.full((B, V), -np.inf, dtype=np.float32)
    ids = np.stack([rng.choice(V, 3, replace=False) for _ in range(B)])
    x[np.arange(B)[:, None], ids] = rng.standard_normal((B, 3)).astype(np.float32) * 0.2
    seeds = rng.integers(0, 2**63, B)
    for d in range(draws):
        res = ingot.sample(ctx, x, temperature=0.8, seed=seeds, position=d)
        assert (res.tokens[:, None] == ids).any(axis=1).all()
        assert (res.row_status == 0).all()


def test_batch_invariance(ctx, rng):
    V = 4099
    row = (rng.standard_normal(V) * 2).astype(np.float32)
    big = (rng.standard_normal((64, V)) * 2).astype(np.float32)
    big[37] = row
    big[5] = np.nan  # a poisoned neighbour
    big[9] = -np.inf  # an empty neighbour
    kw = dict(temperature=0.9, top_k=50, top_p=0.95, logprobs=True, raw_logprobs=True, num_top=4)
    seeds = rng.integers(0, 2**64, 64, dtype=np.uint64)
    pos = rng.integers(0, 2**64, 64, dtype=np.uint64)
    many = ingot.sample(ctx, big, seed=seeds, position=pos, **kw)
    one = ingot.sample(ctx, row[None, :], seed=[int(seeds[37])], position=int(pos[37]), **kw)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(b)[37])
    assert many.tokens[5] == -1 and many.row_status[5] == (ingot.SAMPLING_ROW_EMPTY |
                                                          ingot.SAMPLING_ROW_NAN)
    assert many.tokens[9] == -1 and many.row_status[9] == ingot.SAMPLING_ROW_EMPTY


def test_empty_and_nan_rows(ctx, rng):
    x = rng.standard_normal((4, 100)).astype(np.float32)
    x[1] = -np.inf
    x[2, ::2] = np.nan
    x[3, 7] = np.inf
    res = ingot.sample(ctx, x, temperature=1.0, logprobs=True, raw_logprobs=True)
    assert list(res.row_status) == [0, ingot.SAMPLING_ROW_EMPTY, ingot.SAMPLING_ROW_NAN,
                                    ingot.SAMPLING_ROW_NAN]
    assert res.tokens[1] == -1 and res.token_logprob[1] == -np.inf
    assert res.tokens[2] % 2 == 1 and res.tokens[3] != 7
    probs, status = ingot.sampling_softmax(ctx, x)
    assert (probs[1] == 0).all() and (probs[2, ::2] == 0).all() and probs[3, 7] == 0
    np.testing.assert_allclose(probs[[0, 2, 3]].sum(axis=1), 1.0, atol=1e-5)


def test_greedy(ctx):
    x = np.zeros((2, 40), dtype=np.float32)
    x[:, [5, 17, 30]] = 3.0
    res = ingot.sample(ctx, x, temperature=0.0, banned=[(1, 5)], logprobs=True)
    assert list(res.tokens) == [5, 17] and list(res.token_logprob) == [0.0, 0.0]


# ---- filters --------------------------------------------------------------------------------


def filtered_reference(x, T, k, p, q):
    """The final distribution of one row (sort-based; float64 masses)."""
    s = scaled(x[None, :], np.array([T], dtype=np.float32))[0]
    V = len(s)
    allowed = np.isfinite(x)
    count = int(allowed.sum())
    order = np.lexsort((np.arange(V), -s.astype(np.float64)))  # s desc, id asc
    order = order[np.isfinite(s[order])]
    keep = len(order)
    if 0 < k < count:
        keep = min(keep, k)
    ambiguous = False
    if p < 1:
        w = np.exp(s[order[:keep]].astype(np.float64))
        cum = np.cumsum(w)
        target = p * cum[-1]
        j = int(np.searchsorted(cum, target, side="left"))
        j = min(j, keep - 1)
        ambiguous = abs(cum[j] - target) <= 1e-6 * cum[-1] or (
            j > 0 and abs(target - cum[j - 1]) <= 1e-6 * cum[-1])
        keep = j + 1
    kept = order[:keep]
    if q > 0:
        lq = np.log(np.float64(q))
        sk = s[kept].astype(np.float64)
        if lq != 0 and np.any(np.abs(sk - lq) <= 2 ** (np.floor(np.log2(abs(lq))) - 22)):
            ambiguous = True
        kept = kept[sk >= lq]
    prob = np.zeros(V)
    w = np.exp(s[kept].astype(np.float64))
    prob[kept] = w / w.sum()
    return prob, ambiguous


def test_filter_sets_match_a_sort_reference(ctx, rng):
    checked = 0
    for _ in range(60):
        B, V = 4, int(rng.integers(2, 2000))
        x = np.round(rng.standard_normal((B, V)) * 6) / 2  # ties
        x[rng.random((B, V)) < 0.1] = -np.inf
        x = x.astype(np.float32)
        T = (rng.random(B) * 2 + 0.2).astype(np.float32)
        k = rng.integers(0, V + 2, B).astype(np.int32)
        p = np.where(rng.random(B) < 0.3, 1.0, rng.random(B) * 0.95 + 0.04).astype(np.float32)
        q = np.where(rng.random(B) < 0.5, 0.0, rng.random(B) * 0.3).astype(np.float32)
        probs, _ = ingot.sampling_softmax(ctx, x, temperature=T, top_k=k, top_p=p, min_p=q)
        res = ingot.sample(ctx, x, temperature=T, top_k=k, top_p=p, min_p=q,
                           seed=rng.integers(0, 2**63, B), logprobs=True, num_top=5,
                           top_final=True)
        for r in range(B):
            want, ambiguous = filtered_reference(x[r], T[r], int(k[r]), float(p[r]), float(q[r]))
            if ambiguous:
                continue
            checked += 1
            np.testing.assert_array_equal(probs[r] > 0, want > 0)
            np.testing.assert_allclose(probs[r], want, rtol=1e-5, atol=1e-12)
            t = res.tokens[r]
            assert want[t] > 0
            assert abs(res.token_logprob[r] - np.log(want[t])) < 1e-4
            top = np.lexsort((np.arange(V), -want))[:5]
            top = np.where(want[top] > 0, top, -1)
            top = np.concatenate([top, np.full(5 - len(top), -1)])  # V < 5: padding
            np.testing.assert_array_equal(res.top_ids[r], top)
    assert checked > 200


def test_raw_logprobs_and_top(ctx, rng):
    B, V, n = 5, 1000, 7
    x = (rng.standard_normal((B, V)) * 3).astype(np.float32)
    x[0, 10:] = -np.inf  # fewer finite tokens than n would need: padding
    x[0, 3:10] = -np.inf
    T = np.array([1.0, 0.5, 2.0, 0.0, 1.3], dtype=np.float32)
    allowed = np.full((B, (V + 31) // 32), -1, dtype=np.int32)
    allowed[4, :] = 0
    allowed[4, 0] = 0b1010  # only tokens 1 and 3 allowed
    res = ingot.sample(ctx, x, temperature=T, allowed=allowed, seed=[1, 2, 3, 4, 5],
                       raw_logprobs=True, num_top=n)
    Tr = np.where(T > 0, T, 1).astype(np.float32)
    s = scaled(x, Tr).astype(np.float64)
    logz = np.log(np.exp(s).sum(axis=1))
    lsm = s - logz[:, None]
    np.testing.assert_allclose(res.token_raw_logprob, lsm[np.arange(B), res.tokens], atol=1e-5)
    for r in range(B):
        order = np.lexsort((np.arange(V), -s[r]))[:n]
        order = np.where(np.isfinite(s[r][order]), order, -1)
        np.testing.assert_array_equal(res.top_ids[r], order)
        lp = np.where(order >= 0, lsm[r][np.maximum(order, 0)], -np.inf)
        np.testing.assert_allclose(res.top_logprobs[r], lp, atol=1e-5)
    assert res.tokens[4] in (1, 3)


def test_bias_and_banned_lists(ctx, rng):
    B, V = 3, 300
    x = rng.standard_normal((B, V)).astype(np.float32)
    seeds = rng.integers(0, 2**63, B)
    bias_ids = np.array([[0, 5], [2, 7], [0, 5], [-1, 3], [1, 999]], dtype=np.int32)
    bias_values = np.array([1.5, -np.inf, 0.25, 100.0, 1.0], dtype=np.float32)
    banned = [(1, 4), (2, 8), (-1, 0)]
    a = ingot.sample(ctx, x, seed=seeds, bias_ids=bias_ids, bias_values=bias_values,
                     banned=banned, logprobs=True)
    y = x.copy()
    y[0, 5] = np.float32(np.float32(y[0, 5] + np.float32(1.5)) + np.float32(0.25))
    y[2, 7] = -np.inf
    words = np.full((B, (V + 31) // 32), -1, dtype=np.int32)
    words[1, 0] &= ~(1 << 4)
    words[2, 0] &= ~(1 << 8)
    b = ingot.sample(ctx, y, seed=seeds, allowed=words, logprobs=True)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.token_logprob, b.token_logprob)
    assert list(a.row_status) == [0, ingot.SAMPLING_ROW_BAD_ENTRY, 0]


def test_outputs_in_place_and_workspace(ctx, rng):
    B, V = 6, 500
    x = rng.standard_normal((B, V)).astype(np.float32)
    need = ingot.sample_workspace_size(ctx, B, V, "f32", 3)
    assert need == (12 * V + 8 * 3 + 15) // 16 * 16
    assert ingot.sample_workspace_size(ctx, 0, V) == 0
    assert ingot.sampling_softmax_workspace_size(ctx, B, V, "bf16") == (12 * V + 15) // 16 * 16
    ws = np.empty(need, dtype=np.uint8)
    tokens = np.full(B, 99, dtype=np.int32)
    status = np.full(B, 7, dtype=np.int32)
    top_ids = np.zeros((B, 3), dtype=np.int32)
    res = ingot.sample(ctx, x, seed=1, tokens=tokens, row_status=status, top_ids=top_ids,
                       workspace=ws if ws.ctypes.data % 16 == 0 else None)
    assert res.tokens is tokens and res.top_ids is top_ids and (status == 0).all()
    assert res.top_logprobs is None
    # strided logits (a column slice keeps the last dimension contiguous)
    wide = np.zeros((B, V + 9), dtype=np.float32)
    wide[:, :V] = x
    again = ingot.sample(ctx, wide[:, :V], seed=1)
    np.testing.assert_array_equal(again.tokens, tokens)


# ---- errors ------------------------------------------------------------------------------------


def test_errors_name_the_argument(ctx):
    x = np.zeros((3, 40), dtype=np.float32)
    with pytest.raises(ingot.IngotError, match=r"temperature: temperature\[1\] = -1") as e:
        ingot.sample(ctx, x, temperature=[1.0, -1.0, 1.0])
    assert e.value.status == ingot.Status.INVALID_ARGUMENT
    with pytest.raises(ingot.IngotError, match=r"top_p: top_p\[0\] = 0"):
        ingot.sampling_softmax(ctx, x, top_p=0.0)
    with pytest.raises(ingot.IngotError, match=r"min_p: min_p\[2\] = 1.5"):
        ingot.sample(ctx, x, min_p=[0.0, 0.0, 1.5])
    with pytest.raises(ingot.IngotError, match=r"allowed: shape\[1\] = 1, expected ceil\(V / 32\)"):
        ingot.sample(ctx, x, allowed=np.zeros((3, 1), dtype=np.int32))
    with pytest.raises(ingot.IngotError, match=r"logits: shape\[1\] = 0"):
        ingot.sample(ctx, np.zeros((3, 0), dtype=np.float32), tokens=np.zeros(3, np.int32))
    with pytest.raises(ingot.IngotError, match=r"logits: dtype i32"):
        ingot.sample(ctx, np.zeros((3, 4), dtype=np.int32))
    with pytest.raises(ingot.IngotError) as e:
        ingot.sample(ctx, x, workspace=np.empty(16, dtype=np.uint8))
    assert e.value.status == ingot.Status.INSUFFICIENT_WORKSPACE
    with pytest.raises(ingot.IngotError, match="bias_values: NULL while bias_ids"):
        ingot.sample(ctx, x, bias_ids=[(0, 1)])
    empty = ingot.sample(ctx, np.zeros((0, 40), dtype=np.float32))
    assert empty.tokens.shape == (0,)


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not ingot.backend_available("cuda"):
        pytest.skip("no CUDA device")
    return torch


def test_cuda_matches_the_cpu(ctx, rng):
    """CUDA (torch tensors) == CPU (numpy) for tokens and statuses; softmax
    and log-probabilities within 2e-6 relative; top-p rows left out (their
    set may differ by a rounding of the cumulative mass)."""
    torch = _torch_cuda()
    B, V = 6, 50000
    x = (rng.standard_normal((B, V)) * 3).astype(np.float32)
    x[1, : V // 2] = -np.inf
    x[2, 7] = np.nan
    x[3] = -np.inf
    t = np.array([1.0, 0.7, 0.0, 1.0, 1.3, 1.0], dtype=np.float32)
    k = np.array([0, 40, 0, 0, 5, 1000], dtype=np.int32)
    q = np.array([0.0, 0.0, 0.0, 0.0, 0.1, 0.0], dtype=np.float32)
    seed = rng.integers(0, 2**63, size=B, dtype=np.int64)
    args = dict(temperature=t, top_k=k, min_p=q, seed=seed, position=np.arange(B, dtype=np.int64))
    want = ingot.sample(ctx, x, logprobs=True, raw_logprobs=True, num_top=7, **args)
    with ingot.Context("cuda") as cuda:
        dev = {n: torch.from_numpy(v).cuda() for n, v in args.items()}
        got = ingot.sample(cuda, torch.from_numpy(x).cuda(), logprobs=True, raw_logprobs=True,
                           num_top=7, **dev)
        torch.cuda.synchronize()
        assert np.array_equal(got.tokens.cpu().numpy(), want.tokens)
        assert np.array_equal(got.row_status.cpu().numpy().view(np.uint32),
                              np.asarray(want.row_status).view(np.uint32))
        np.testing.assert_allclose(got.token_logprob.cpu().numpy(), want.token_logprob, rtol=2e-6)
        np.testing.assert_allclose(got.token_raw_logprob.cpu().numpy(), want.token_raw_logprob,
                                   rtol=2e-6)
        assert np.array_equal(got.top_ids.cpu().numpy(), want.top_ids)
        soft = ("temperature", "top_k", "min_p")
        p_gpu = ingot.sampling_softmax(cuda, torch.from_numpy(x).cuda(),
                                       **{n: dev[n] for n in soft})[0]
        p_cpu = ingot.sampling_softmax(ctx, x, **{n: args[n] for n in soft})[0]
        np.testing.assert_allclose(p_gpu.cpu().numpy(), p_cpu, rtol=2e-6, atol=1e-30)


def test_cuda_softmax_matches_torch():
    torch = _torch_cuda()
    x = torch.randn(3, 151936, device="cuda") * 4
    x[0, :16384] = float("-inf")
    with ingot.Context("cuda") as cuda:
        p = ingot.sampling_softmax(cuda, x, temperature=0.8)[0]
    want = torch.softmax(x.double() / 0.8, dim=-1)
    assert torch.allclose(p.double(), want, rtol=2e-6, atol=1e-12)


def test_cuda_wide_softmax_on_another_stream():
    """B <= 2 takes the wide softmax, whose partials live in the workspace:
    allocated by the binding for a stream other than the current one, it
    must stay reserved until that stream is done with it."""
    torch = _torch_cuda()
    with ingot.Context("cuda") as cuda:
        for B in (1, 2):
            x = torch.randn(B, 151936, device="cuda") * 3
            x[0, 5000:25000] = float("-inf")
            other = torch.cuda.Stream()
            other.wait_stream(torch.cuda.current_stream())
            p = ingot.sampling_softmax(cuda, x, temperature=0.7, stream=other)[0]
            junk = torch.full((1 << 20,), 7, dtype=torch.uint8, device="cuda")  # reuse bait
            other.synchronize()
            want = torch.softmax(x.double() / 0.7, dim=-1)
            assert torch.allclose(p.double(), want, rtol=2e-6, atol=1e-12)
            del junk


def test_cuda_graph_replay_with_new_seeds():
    torch = _torch_cuda()
    B, V = 4, 30000
    x = torch.randn(B, V, device="cuda") * 2
    seed = torch.zeros(B, dtype=torch.int64, device="cuda")
    tokens = torch.empty(B, dtype=torch.int32, device="cuda")
    with ingot.Context("cuda") as cuda:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the capture
            ingot.sample(cuda, x, seed=seed, tokens=tokens)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # the current (capturing) stream is used
            ingot.sample(cuda, x, seed=seed, tokens=tokens)
        for rep in range(3):
            seed.copy_(torch.randint(0, 2**62, (B,), device="cuda"))
            x.copy_(torch.randn(B, V, device="cuda") * 2)
            g.replay()
            torch.cuda.synchronize()
            eager = ingot.sample(cuda, x, seed=seed).tokens
            torch.cuda.synchronize()
            assert torch.equal(tokens, eager)


def test_struct_layouts_match_the_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "layout.c"
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"ingot/ingot.h\"",
             "#define F(T, m) printf(#T \".\" #m \" %zu %zu\\n\", offsetof(T, m), "
             "sizeof(((T *)0)->m));", "int main(void) {"]
    for struct in (ingot_sampling_params, ingot_sampling_logprobs):
        name = struct.__name__
        lines.append(f"  printf(\"{name} %zu\\n\", sizeof({name}));")
        lines += [f"  F({name}, {field})" for field, _ in struct._fields_]
    lines += ["  ingot_sampling_params p = INGOT_SAMPLING_PARAMS_INITIALIZER;",
              "  ingot_sampling_logprobs l = INGOT_SAMPLING_LOGPROBS_INITIALIZER;",
              "  printf(\"init %u %u %u %u\\n\", p.struct_size, p.struct_version, l.struct_size,"
              " l.struct_version);", "  return 0;", "}"]
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", str(INCLUDE_DIR), str(src), "-o", str(exe)], check=True)
    got = {}
    for line in subprocess.run([str(exe)], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        name, *numbers = line.split()
        got[name] = tuple(int(v) for v in numbers)
    for struct in (ingot_sampling_params, ingot_sampling_logprobs):
        assert got[struct.__name__] == (ctypes.sizeof(struct),)
        for field, _ in struct._fields_:
            member = getattr(struct, field)
            assert got[f"{struct.__name__}.{field}"] == (member.offset, member.size), field
    p, lp = ingot_sampling_params(), ingot_sampling_logprobs()
    assert got["init"] == (p.struct_size, p.struct_version, lp.struct_size, lp.struct_version)


# ---- errors name what the caller passed --------------------------------------------------------


def test_none_first_is_named(ctx):
    x = np.zeros((2, 8), np.float32)
    for call in (lambda: ingot.sample(None, x), lambda: ingot.sample(None),
                 lambda: ingot.sampling_softmax(None, x)):
        with pytest.raises(TypeError, match=r"^\w+\(logits, \.\.\.\): the first argument is None, "
                                            r"expected logits \(an ingot\.Context may come before "
                                            r"it, or pass ctx=\)$"):
            call()
    for call in (lambda: ingot.sample_workspace_size(None, 2, 8),
                 lambda: ingot.sampling_softmax_workspace_size(None, 2, 8)):
        with pytest.raises(TypeError, match=r"the first argument is None, expected batch"):
            call()
    with pytest.raises(TypeError, match="^logits: None, expected an array"):
        ingot.sample(ctx, None)
    with pytest.raises(TypeError, match="^logits: None, expected an array"):
        ingot.sample(logits=None)


def test_context_left_out_uses_the_default_context(ctx):
    x = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)
    kw = dict(temperature=0.8, top_k=10, seed=[4, 5, 6])
    want = ingot.sample(ctx, x, **kw)  # the older form: a SampleResult with row_status
    assert isinstance(want, ingot.SampleResult) and want.row_status.dtype == np.int32
    for tokens in (ingot.sample(x, **kw), ingot.sample(logits=x, **kw),
                   ingot.sample(x, ctx=ctx, **kw), ingot.sample(ctx, logits=x, **kw).tokens):
        np.testing.assert_array_equal(tokens, want.tokens)
    probs = ingot.sampling_softmax(x, temperature=0.8)
    np.testing.assert_array_equal(probs, ingot.sampling_softmax(ctx, x, temperature=0.8)[0])
    assert ingot.sample_workspace_size(3, 64, device="cpu") == ingot.sample_workspace_size(
        ctx, 3, 64)
    assert ingot.sampling_softmax_workspace_size(3, 64, ctx=ctx) == 12 * 64
    with pytest.raises(TypeError, match=r"^sample\(logits, \.\.\.\): argument 2 is an "
                                        r"ingot\.Context: pass it first or as ctx=") as e:
        ingot.sample(x, ctx)
    with pytest.raises(TypeError) as e:
        ingot.sample()
    assert "missing 1 required positional argument: 'logits'" in str(e.value)
    with pytest.raises(TypeError, match=r"^pass ctx or device, not both"):
        ingot.sample_workspace_size(2, 8, ctx=ctx, device="cpu")


def test_logits_must_be_2d(ctx):
    """1-D logits are not taken as one row: every call says the shape it expects."""
    x = np.zeros(8, np.float32)
    expected = (r"^logits: shape \(8,\), expected 2-D \[B, V\] \(batch, vocabulary; one row: "
                r"logits\[None\]\)$")
    for call in (lambda: ingot.sample(ctx, x, temperature=0.5), lambda: ingot.sample(x),
                 lambda: ingot.sample(x, top_k=3), lambda: ingot.sampling_softmax(x, top_k=3)):
        with pytest.raises(ValueError, match=expected):
            call()
    with pytest.raises(ValueError, match=r"^logits: shape \(2, 2, 2\), expected 2-D"):
        ingot.sample(ctx, np.zeros((2, 2, 2), np.float32), seed=1)
    # 2-D logits of a bad dtype: the library names the dtype
    with pytest.raises(ingot.IngotError, match=r"logits: dtype i32"):
        ingot.sample(ctx, np.zeros((2, 8), np.int32), temperature=0.5)
    with pytest.raises(ingot.IngotError, match=r"logits: dtype i32"):
        ingot.sampling_softmax(ctx, np.zeros((2, 8), np.int32), temperature=0.5)
    # one row as [1, V]
    assert ingot.sample(x[None], temperature=0.0).tolist() == [0]


def test_python_side_arguments_are_named(ctx):
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match=r"banned: expected an int32 \[N, 2\] array or a list"):
        ingot.sample(ctx, x, banned=[1, 2])
    with pytest.raises(TypeError, match="num_top: None is not an integer"):
        ingot.sample(ctx, x, num_top=None)
    with pytest.raises(TypeError, match="top_ids: list is not an array"):
        ingot.sample(ctx, x, top_ids=[[1], [2]])
    with pytest.raises(ValueError, match="dtype: 'float99' is not an ingot dtype"):
        ingot.sample_workspace_size(ctx, 2, 8, "float99")
    with pytest.raises(ingot.IngotError, match=r"dtype \(logits_dtype\): i32"):
        ingot.sample_workspace_size(ctx, 2, 8, "i32")
    with pytest.raises(TypeError, match="batch: 2.5 is not an integer"):
        ingot.sampling_softmax_workspace_size(ctx, 2.5, 8)


def test_workspace_queries_reject_overflowing_sizes(ctx):
    big = 2**31 - 1
    with pytest.raises(ingot.IngotError, match=r"batch = 2147483647, vocab_size = 2147483647: "
                                               r"logits \[batch, vocab_size\] of f32") as e:
        ingot.sample_workspace_size(ctx, big, big, "f32")
    assert e.value.status == ingot.Status.INVALID_ARGUMENT
    with pytest.raises(ingot.IngotError, match=r"batch = 2147483647, vocab_size = 2147483647: "
                                               r"probs \[batch, vocab_size\] of f32"):
        ingot.sampling_softmax_workspace_size(ctx, big, big, "bf16")
    with pytest.raises(ingot.IngotError, match=r"batch = 9223372036854775807"):
        ingot.sample_workspace_size(ctx, 2**63 - 1, 8)
    with pytest.raises(ingot.IngotError, match=r"vocab_size = 72057594037927936"):
        ingot.sampling_softmax_workspace_size(ctx, 1, 1 << 56)
    with pytest.raises(ingot.IngotError, match=r"batch = -1 < 0"):
        ingot.sample_workspace_size(ctx, -1, 8)
    with pytest.raises(OverflowError, match=r"batch: 9223372036854775808 does not fit in int64"):
        ingot.sample_workspace_size(ctx, 2**63, 8)
    assert ingot.sample_workspace_size(ctx, big, big, "bf16") == (12 * big + 15) // 16 * 16


# ---- the conversion rule: parameters as engines hold them ------------------------------------


def _exact_params(B):
    return dict(temperature=np.full(B, 0.7, np.float32), top_k=np.full(B, 20, np.int32),
                top_p=np.full(B, 0.9, np.float32), min_p=np.full(B, 0.01, np.float32),
                seed=np.arange(B, dtype=np.int64) * 7 + 1, position=np.full(B, 3, np.int64))


def _engine_forms(B):
    """The parameters of _exact_params as an engine may hold them."""
    seeds = [int(s) for s in np.arange(B) * 7 + 1]
    return {
        "python numbers": dict(temperature=0.7, top_k=20, top_p=0.9, min_p=0.01, seed=seeds,
                               position=3),
        "numpy scalars": dict(temperature=np.float64(0.7), top_k=np.int64(20),
                              top_p=np.float32(0.9), min_p=np.float64(0.01),
                              seed=np.array(seeds, np.uint64), position=np.uint64(3)),
        "float64 / int64 arrays": dict(temperature=np.full(B, 0.7), top_k=np.full(B, 20),
                                       top_p=np.full(B, 0.9), min_p=np.full(B, 0.01),
                                       seed=np.array(seeds, np.uint32),
                                       position=np.full(B, 3, np.int16)),
        "lists": dict(temperature=[0.7] * B, top_k=[20] * B, top_p=(0.9,) * B, min_p=[0.01] * B,
                      seed=seeds, position=[3] * B),
    }


def test_parameters_are_converted_to_the_exact_dtypes(ctx, rng):
    B, V = 6, 400
    x = (rng.standard_normal((B, V)) * 2).astype(np.float32)
    kw = dict(logprobs=True, num_top=3, top_final=True)
    want = ingot.sample(ctx, x, **_exact_params(B), **kw)
    want_probs = ingot.sampling_softmax(x, **{k: v for k, v in _exact_params(B).items()
                                              if k not in ("seed", "position")})
    for form, params in _engine_forms(B).items():
        got = ingot.sample(x, **params, **kw)
        for field in ("tokens", "token_logprob", "top_ids", "top_logprobs"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field),
                                          err_msg=f"{form}: {field}")
        soft = {k: v for k, v in params.items() if k not in ("seed", "position")}
        np.testing.assert_array_equal(ingot.sampling_softmax(x, **soft), want_probs,
                                      err_msg=form)


def test_torch_parameters_are_converted_to_the_exact_dtypes(ctx, rng):
    torch = pytest.importorskip("torch")
    B, V = 5, 300
    x = (rng.standard_normal((B, V)) * 2).astype(np.float32)
    want = ingot.sample(ctx, x, **_exact_params(B), logprobs=True)
    xt = torch.from_numpy(x)
    forms = {name: {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v
                    for k, v in params.items()} for name, params in _engine_forms(B).items()}
    forms["numpy arrays with torch logits"] = _engine_forms(B)["float64 / int64 arrays"]
    forms["exact torch tensors"] = {k: torch.from_numpy(v) for k, v in _exact_params(B).items()}
    for form, params in forms.items():
        got = ingot.sample(xt, **params, logprobs=True)
        assert got.tokens.dtype == torch.int32, form
        np.testing.assert_array_equal(got.tokens.numpy(), want.tokens, err_msg=form)
        np.testing.assert_array_equal(got.token_logprob.numpy(), want.token_logprob,
                                      err_msg=form)


def test_exact_parameters_are_used_as_they_are(rng):
    """An exact-dtype parameter on the logits' device is the array the
    kernel reads: no copy (what a captured CUDA graph relies on)."""
    from ingot import sampling

    torch = pytest.importorskip("torch")
    logits = torch.zeros(3, 10)
    for kind, value in (("f32", torch.ones(3)), ("i32", torch.ones(3, dtype=torch.int32)),
                        ("u64", torch.ones(3, dtype=torch.int64))):
        assert sampling.torch_param(logits, "p", value, kind, (3,)) is value
    value = np.ones(3, np.float32)
    assert sampling._numpy_param("p", value, "f32", (3,)) is value
    converted = sampling.torch_param(logits, "p", torch.ones(3, dtype=torch.float64), "f32", (3,))
    assert converted.dtype == torch.float32 and converted.shape == (3,)


def test_integer_parameters_saturate_to_int32(ctx, rng):
    B, V = 4, 200
    x = rng.standard_normal((B, V)).astype(np.float32)
    off = ingot.sample(x, top_k=0, temperature=1.0, seed=9, logprobs=True)
    for huge in (np.full(B, 2**40), np.full(B, 2**63 + 5, np.uint64), 2**40, [2**40] * B):
        got = ingot.sample(x, top_k=huge, temperature=1.0, seed=9, logprobs=True)
        np.testing.assert_array_equal(got.tokens, off.tokens)
        np.testing.assert_array_equal(got.token_logprob, off.token_logprob)
    with pytest.raises(ingot.IngotError, match=r"top_k: top_k\[0\] = -2147483648"):
        ingot.sample(x, top_k=np.full(B, -2**40))
    torch = pytest.importorskip("torch")
    xt = torch.from_numpy(x)
    for huge in (torch.full((B,), 2**40), torch.full((B,), 2**40, dtype=torch.uint64),
                 torch.full((B,), 2**32 - 1, dtype=torch.uint32)):
        got = ingot.sample(xt, top_k=huge, temperature=1.0, seed=9)
        np.testing.assert_array_equal(got.numpy(), off.tokens, err_msg=str(huge.dtype))
    with pytest.raises(ingot.IngotError, match=r"top_k: top_k\[0\] = -2147483648"):
        ingot.sample(xt, top_k=torch.full((B,), -2**40))
    # a (row, token) pair outside the batch or vocabulary stays outside
    far = np.array([[2**40, 3], [1, 2**40]], np.int64)
    res = ingot.sample(x, banned=far, temperature=0.0, return_status=True)
    np.testing.assert_array_equal(res.tokens, ingot.sample(x, temperature=0.0))
    assert list(res.row_status) == [0, ingot.SAMPLING_ROW_BAD_ENTRY, 0, 0]


def test_seed_bits(rng):
    x = rng.standard_normal((2, 300)).astype(np.float32)
    want = ingot.sample(x, seed=np.array([-1, -5], np.int64), temperature=1.0)
    for seed in (np.array([2**64 - 1, 2**64 - 5], np.uint64), [2**64 - 1, -5],
                 (-1, 2**64 - 5)):
        np.testing.assert_array_equal(ingot.sample(x, seed=seed, temperature=1.0), want)
    with pytest.raises(OverflowError, match="seed: 18446744073709551616 does not fit in 64 bits"):
        ingot.sample(x, seed=2**64)


def test_parameters_of_the_wrong_kind_are_named(rng):
    x = rng.standard_normal((2, 30)).astype(np.float32)
    with pytest.raises(TypeError, match=r"^top_k: dtype float64, expected int32 \(or another "
                                        r"integer dtype, converted\)"):
        ingot.sample(x, top_k=np.array([2.0, 3.0]))
    with pytest.raises(TypeError, match=r"^top_k: 2.5 is not an integer"):
        ingot.sample(x, top_k=2.5)
    with pytest.raises(TypeError, match=r"^seed: dtype bool, expected int64 \(or uint64\)"):
        ingot.sample(x, seed=np.array([True, False]))
    with pytest.raises(TypeError, match=r"^temperature: 'hot' is not a number, a sequence or an "
                                        r"array"):
        ingot.sample(x, temperature="hot")
    with pytest.raises(TypeError, match=r"^bias_values: 1.0 is not an array"):
        ingot.sample(x, bias_ids=[(0, 1)], bias_values=1.0)
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"^min_p: dtype torch.complex64, expected float32"):
        ingot.sample(torch.from_numpy(x), min_p=torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match=r"^top_p: \{\} is not a number, a sequence or an array"):
        ingot.sample(torch.from_numpy(x), top_p={})


def test_row_status_is_int32_for_numpy_and_torch(rng):
    x = rng.standard_normal((3, 40)).astype(np.float32)
    x[1] = -np.inf
    res = ingot.sample(x, return_status=True)
    probs, status = ingot.sampling_softmax(x, return_status=True)
    assert res.row_status.dtype == np.int32 and status.dtype == np.int32
    assert list(res.row_status) == list(status) == [0, ingot.SAMPLING_ROW_EMPTY, 0]
    torch = pytest.importorskip("torch")
    res_t = ingot.sample(torch.from_numpy(x), return_status=True)
    probs_t, status_t = ingot.sampling_softmax(torch.from_numpy(x), return_status=True)
    assert res_t.row_status.dtype == torch.int32 and status_t.dtype == torch.int32
    assert res_t.row_status.tolist() == status_t.tolist() == list(res.row_status)


def test_what_sample_returns(rng):
    x = rng.standard_normal((3, 40)).astype(np.float32)
    tokens = ingot.sample(x, seed=2, temperature=1.0)
    assert isinstance(tokens, np.ndarray) and tokens.dtype == np.int32 and tokens.shape == (3,)
    res = ingot.sample(x, seed=2, temperature=1.0, raw_logprobs=True)
    assert isinstance(res, ingot.SampleResult) and res.row_status is None
    assert res.token_logprob is None and res.top_ids is None
    np.testing.assert_array_equal(res.tokens, tokens)
    status = np.full(3, 9, np.int32)  # an output passed is asked for
    res = ingot.sample(x, seed=2, temperature=1.0, row_status=status)
    assert res.row_status is status and list(status) == [0, 0, 0]
    probs = ingot.sampling_softmax(x)
    assert isinstance(probs, np.ndarray) and probs.shape == (3, 40)
    with ingot.Context() as ctx:  # the older form returns what it always did
        old = ingot.sample(ctx, x, seed=2, temperature=1.0)
        assert isinstance(old, ingot.SampleResult) and old.row_status.dtype == np.int32
        np.testing.assert_array_equal(old.tokens, tokens)
        assert ingot.sample(ctx, x, seed=2, temperature=1.0, return_status=False).shape == (3,)
        old_probs, old_status = ingot.sampling_softmax(ctx, x)
        np.testing.assert_array_equal(old_probs, probs)


def test_sample_reads_like_flashinfer(rng):
    """sample(logits, top_k, top_p): FlashInfer's top_k_top_p_sampling_from_logits,
    top-k applied first: the tokens are drawn from the top-p set of the top-k."""
    B, V = 8, 500
    x = (rng.standard_normal((B, V)) * 3).astype(np.float32)
    k = np.full(B, 10, np.int32)
    p = np.full(B, 0.5, np.float32)
    seeds = np.arange(B, dtype=np.int64)
    tokens = ingot.sample(x, k, p, seed=seeds)
    np.testing.assert_array_equal(
        tokens, ingot.sample(x, top_k=k, top_p=p, seed=seeds, temperature=1.0))
    probs = ingot.sampling_softmax(x, top_k=k, top_p=p)
    for r in range(B):
        want, ambiguous = filtered_reference(x[r], 1.0, 10, 0.5, 0.0)
        if not ambiguous:
            np.testing.assert_array_equal(probs[r] > 0, want > 0)
        assert probs[r, tokens[r]] > 0
