"""docs/nvfp4.md (and the NVFP4 rules of ingot.h) written out in numpy,
independently of the C code: the oracle of the NVFP4 tests. The two
roundings come from ml_dtypes (float8_e4m3fn for the block scale,
float4_e2m1fn for the codes); everything else is float32 numpy arithmetic,
one IEEE operation at a time (numpy does not contract a*b+c).

Shapes: x [rows, cols] (cols % 16 == 0); values [rows, cols/2] uint8 (even
element in the low nibble); linear scales [rows, cols/16] uint8 (E4M3
bytes); swizzled scales [round_up(rows,128), round_up(cols/16,4)] uint8.
"""

import ml_dtypes
import numpy as np

F4 = ml_dtypes.float4_e2m1fn
F8 = ml_dtypes.float8_e4m3fn
F32_MAX = np.float32(np.finfo(np.float32).max)
CANONICAL_NAN_BITS = np.uint32(0x7FC00000)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                dtype=np.float32)


def round_up(n, m):
    return (n + m - 1) // m * m


def scale_shape(rows, cols):
    return round_up(rows, 128), round_up(cols // 16, 4)


def to_f32(x):
    """bf16 (ml_dtypes) / f16 / f32 -> f32, exactly."""
    return np.asarray(x).astype(np.float32)


def gs_valid(gs):
    gs = np.float32(gs)
    return bool(np.isfinite(gs) and gs > 0)


def e4m3_saturating(p):
    """float32 p >= 0 (or +inf) -> E4M3 byte: round to nearest even,
    p >= 448 -> 448 (0x7E). ml_dtypes turns overflow into NaN: clamp first
    (every p in [448, 464) rounds to 448 anyway)."""
    p = np.minimum(np.asarray(p, dtype=np.float32), np.float32(448))
    return p.astype(F8).view(np.uint8)


def e4m3_value(sf):
    """E4M3 bytes -> float32 (0x7F / 0xFF are NaN)."""
    return np.asarray(sf, dtype=np.uint8).view(F8).astype(np.float32)


def e2m1_code(y):
    """float32 y -> E2M1 code 0..15: nearest magnitude, ties to the even
    index, |y| > 6 (incl. Inf) saturates, sign kept (-0 and small negatives
    give 8), NaN -> 0."""
    y = np.asarray(y, dtype=np.float32)
    codes = np.clip(y, np.float32(-6), np.float32(6)).astype(F4).view(np.uint8) & 0xF
    return np.where(np.isnan(y), np.uint8(0), codes).astype(np.uint8)


def pack_nibbles(codes):
    """codes [rows, cols] -> bytes [rows, cols/2], even element low."""
    codes = np.asarray(codes, dtype=np.uint8)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def unpack_nibbles(values):
    values = np.asarray(values, dtype=np.uint8)
    codes = np.empty((values.shape[0], values.shape[1] * 2), dtype=np.uint8)
    codes[:, 0::2] = values & 0xF
    codes[:, 1::2] = values >> 4
    return codes


def block_amax(x):
    """x [rows, cols] float32 -> amax [rows, cols/16] over finite elements."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 16, 16)
    return np.where(np.isfinite(blocks), np.abs(blocks), np.float32(0)).max(
        axis=2, initial=np.float32(0)).astype(np.float32)


def quantize(x, gs):
    """-> (values [rows, cols/2] uint8, linear scales [rows, cols/16] uint8)."""
    x = to_f32(x)
    gs = np.float32(gs)
    rows, cols = x.shape
    amax = block_amax(x)
    if gs_valid(gs):
        t = amax / np.float32(6)
        p = gs * t
        sf = e4m3_saturating(p)
    else:
        sf = np.zeros(amax.shape, dtype=np.uint8)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.where(sf != 0, gs / e4m3_value(sf), np.float32(0)).astype(np.float32)
        y = x.reshape(rows, cols // 16, 16) * r[:, :, None]
    codes = e2m1_code(y)
    codes[sf == 0] = 0
    return pack_nibbles(codes.reshape(rows, cols)), sf


def scale_offset(row, k, cols):
    """The 128x4 swizzle (docs/nvfp4.md), written out on its own."""
    kt = (cols // 16 + 3) // 4
    return ((row // 128) * (kt * 512) + (k // 4) * 512 + (row % 32) * 16
            + ((row % 128) // 32) * 4 + (k % 4))


def swizzle(linear, rows, cols):
    """linear [rows, cols/16] -> swizzled [Rp, Kp] uint8, padding 0."""
    sr, sc = scale_shape(rows, cols)
    buf = np.zeros(sr * sc, dtype=np.uint8)
    r, k = np.meshgrid(np.arange(rows), np.arange(cols // 16), indexing="ij")
    buf[scale_offset(r, k, cols)] = np.asarray(linear, dtype=np.uint8)
    return buf.reshape(sr, sc)


def unswizzle(swizzled, rows, cols):
    flat = np.asarray(swizzled, dtype=np.uint8).reshape(-1)
    r, k = np.meshgrid(np.arange(rows), np.arange(cols // 16), indexing="ij")
    return flat[scale_offset(r, k, cols)].reshape(rows, cols // 16)


def global_scale(*xs):
    """2688 / amax over the finite elements of all xs; 1 for amax == 0;
    FLT_MAX when the quotient overflows."""
    amax = np.float32(0)
    for x in xs:
        x = to_f32(x)
        if x.size:
            amax = max(amax, np.where(np.isfinite(x), np.abs(x), np.float32(0)).max())
    if amax == 0:
        return np.float32(1)
    with np.errstate(over="ignore"):
        gs = np.float32(2688) / np.float32(amax)
    return gs if np.isfinite(gs) else F32_MAX


def dequantize(values, linear, gs):
    """-> float32 [rows, cols]: (e2m1 * float(sf)) / gs, NaN canonical."""
    e = E2M1[unpack_nibbles(values)]
    s = np.repeat(e4m3_value(linear), 16, axis=1)
    gs = np.float32(gs)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        q = ((e * s) / gs).astype(np.float32)
    if not gs_valid(gs):
        q[...] = np.nan
    bits = q.view(np.uint32).copy()
    bits[np.isnan(q)] = CANONICAL_NAN_BITS
    return bits.view(np.float32)


def dequantize_bf16_bits(values, linear, gs):
    """-> uint16 bf16 bits: the f32 result rounded to nearest even; NaN 0x7FC0."""
    q = dequantize(values, linear, gs)
    bits = q.astype(ml_dtypes.bfloat16).view(np.uint16).copy()
    bits[np.isnan(q)] = 0x7FC0
    return bits


def interleave(gate, up):
    """W [2H, K]: row 2j = gate row j, row 2j+1 = up row j."""
    gate, up = np.asarray(gate), np.asarray(up)
    w = np.empty((2 * gate.shape[0], gate.shape[1]), dtype=gate.dtype)
    w[0::2] = gate
    w[1::2] = up
    return w
