"""docs/ple.md written out in numpy, independently of the C code: the oracle
of the numpy tests. Wrapping int64 products are taken in uint64 (numpy array
arithmetic wraps modulo 2^64); np.remainder is the floored modulo."""

import numpy as np


def derive(vocab_size, n, hpn, base, seed=1234, layer=0):
    """(mult, P, off) as docs/ple.md derives them (Python ints)."""
    mask = (1 << 64) - 1
    golden = 0x9E3779B97F4A7C15

    def splitmix64(v):
        v = (v + golden) & mask
        v = ((v ^ (v >> 30)) * 0xBF58476D1CE4E5B9) & mask
        v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & mask
        return v ^ (v >> 31)

    half_bound = max(1, ((2**63 - 1) // max(vocab_size, 1)) // 2)
    base_seed = seed + 10007 * layer
    mult = [2 * (splitmix64((base_seed + golden * (i + 1)) & mask) % half_bound) + 1
            for i in range(n)]

    def is_prime(p):
        if p < 2:
            return False
        d = 2
        while d * d <= p:
            if p % d == 0:
                return False
            d += 1
        return True

    H = hpn * (n - 1)
    primes, p = [], base
    while len(primes) < layer * H + H:
        if is_prime(p):
            primes.append(p)
        p += 1
    P = primes[layer * H:]
    off = [sum(P[:h]) for h in range(H)]
    return mult, P, off


def windows(n, ids, cu, context):
    """x [T, n] int64: x[t, s] = the token s places left of t (context when
    the request has fewer than s tokens before t)."""
    ids, cu, context = (np.asarray(a, dtype=np.int64) for a in (ids, cu, context))
    x = np.empty((len(ids), n), dtype=np.int64)
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        w = np.concatenate([context[b], ids[lo:hi]])  # w[n-1+l] = token l of the request
        for s in range(n):
            x[lo:hi, s] = w[n - 1 - s: n - 1 - s + hi - lo]
    return x


def row_ids(n, hpn, E, mult, P, off, ids, cu, context):
    """rows [T, H] int64 of docs/ple.md "Row ids"."""
    x = windows(n, ids, cu, context)
    alive = np.ones(len(x), dtype=bool)
    for s in range(1, n):  # a boundary is a wall: it and everything left of it become E
        alive &= x[:, s] != E
        x[:, s] = np.where(alive, x[:, s], E)
    prod = x.view(np.uint64) * np.asarray(mult, dtype=np.int64).view(np.uint64)
    rows = np.empty((len(x), hpn * (n - 1)), dtype=np.int64)
    mix = prod[:, 0]
    for k in range(2, n + 1):
        mix = mix ^ prod[:, k - 1]
        for j in range(hpn):
            h = (k - 2) * hpn + j
            rows[:, h] = np.remainder(mix.view(np.int64), P[h]) + off[h]
    return rows


def commit_context(n, ids, cu, context):
    """The new context [B, n-1]: last n-1 tokens of context[b] ++ request b's ids."""
    new = np.array(context, copy=True)
    for b in range(len(cu) - 1):
        w = np.concatenate([context[b], ids[cu[b]:cu[b + 1]]])
        new[b] = w[len(w) - (n - 1):]
    return new


def e4m3_to_f32(bits):
    """OCP FP8 E4M3 bytes -> float32 (bias 7, no infinities, S.1111.111 = NaN)."""
    bits = np.asarray(bits, dtype=np.uint8).astype(np.int64)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exp, man = (bits >> 3) & 0xF, bits & 0x7
    mag = np.where(exp == 0, np.ldexp(man / 8.0, -6), np.ldexp(1.0 + man / 8.0, exp - 7))
    mag = np.where((exp == 15) & (man == 7), np.nan, mag)
    return (sign * mag).astype(np.float32)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """float32 -> bf16 bits, round to nearest even (NaN: any NaN pattern)."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def gather(rows, table_f32, scale):
    """out bits [T, H*D] uint16: bf16(table[rows] * scale), zero rows outside."""
    rows = np.asarray(rows, dtype=np.int64)
    R, D = table_f32.shape
    valid = (rows >= 0) & (rows < R)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are expected
        vals = table_f32[np.where(valid, rows, 0)] * np.float32(scale)  # fp32 product
    bits = np.where(valid[..., None], f32_to_bf16(vals), np.uint16(0))
    return bits.reshape(rows.shape[0], rows.shape[1] * D)
