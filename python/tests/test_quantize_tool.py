"""`ingot quantize` end to end: safetensors files written by hand with numpy
(8-byte little-endian header length, JSON header, data), the command run on
them, the output parsed and checked against spec_nvfp4.py; malformed inputs
must fail with a clear message and leave no file behind.

The program is $INGOT_CLI, else build/tools/ingot of this repository; the
tests skip when it is missing or was built without JSON support."""

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("ml_dtypes")

import ml_dtypes  # noqa: E402

import spec_nvfp4 as spec  # noqa: E402
from ingot_program import ingot_program  # noqa: E402

BF16 = ml_dtypes.bfloat16
ST_DTYPES = {  # safetensors dtype -> (numpy dtype, element bytes)
    "F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (BF16, 2), "I64": (np.int64, 8),
    "I32": (np.int32, 4), "U8": (np.uint8, 1), "I8": (np.int8, 1), "F64": (np.float64, 8),
    "F8_E4M3": (ml_dtypes.float8_e4m3fn, 1), "U16": (np.uint16, 2), "BOOL": (np.bool_, 1),
}
NUMPY_TO_ST = {np.dtype(v[0]): k for k, v in ST_DTYPES.items()}


def _cli():
    """The ingot program (conftest.ingot_program), skipping without JSON support."""
    path = ingot_program()
    probe = subprocess.run([path, "quantize"], capture_output=True, text=True)
    if "built without JSON support" in probe.stderr:
        pytest.skip("ingot was built without JSON support (libcjson-dev)")
    return path


@pytest.fixture(scope="module")
def cli():
    return _cli()


def run(cli, *args):
    return subprocess.run([cli, "quantize", *map(str, args)], capture_output=True, text=True)


# ---- safetensors by hand ----------------------------------------------------------------


def header_bytes(header, pad=True):
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return h


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: numpy array} (dtype from the array), written in order."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": NUMPY_TO_ST[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = header_bytes(header)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return header


def write_raw(path, header_text, data=b"", length=None):
    """A file from header text as given (no checks), for malformed inputs."""
    h = header_text.encode() if isinstance(header_text, str) else header_text
    n = len(h) if length is None else length
    Path(path).write_bytes(struct.pack("<Q", n) + h + data)


def read_safetensors(path):
    """Parses and validates an output file as a strict reader would:
    -> (metadata, {name: (dtype, shape, bytes)}, names in header order)."""
    blob = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    assert n % 8 == 0, "header length is not a multiple of 8"
    raw = blob[8:8 + n]
    text = raw.decode("utf-8")
    assert text.rstrip(" ").endswith("}"), "header not padded with spaces only"
    pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), "duplicate names"
    header = dict(pairs)
    metadata = dict(header.pop("__metadata__", []))
    data = blob[8 + n:]
    names = [k for k in keys if k != "__metadata__"]
    out, covered = {}, 0
    for name in names:
        info = dict(header[name])
        dtype, shape = info["dtype"], [int(s) for s in info["shape"]]
        begin, end = info["data_offsets"]
        assert begin == covered, f"{name}: offsets not sorted / not contiguous"
        size = ST_DTYPES[dtype][1]
        assert end - begin == int(np.prod(shape, dtype=np.int64)) * size, f"{name}: byte length"
        assert (8 + n + begin) % size == 0, f"{name}: data not aligned to its element size"
        out[name] = (dtype, shape, data[begin:end])
        covered = end
    assert covered == len(data), "data section not covered exactly"
    return metadata, out, names


def as_array(entry):
    dtype, shape, raw = entry
    return np.frombuffer(raw, dtype=ST_DTYPES[dtype][0]).reshape(shape)


def no_leftovers(directory, out_name):
    return [p.name for p in Path(directory).iterdir()
            if p.name == out_name or p.name.startswith(out_name + ".tmp-")]


def check_quantized(out, name, x, what=None):
    """NAME.nvfp4_* in `out` equal the reference quantization of x (the source
    as float32), and decode to within the format's error bound."""
    values = out[f"{name}.nvfp4_values"]
    scales = out[f"{name}.nvfp4_scales"]
    gs_entry = out[f"{name}.nvfp4_global_scale"]
    rows, cols = x.shape
    assert values[0] == "U8" and values[1] == [rows, cols // 2]
    assert scales[0] == "F8_E4M3" and scales[1] == list(spec.scale_shape(rows, cols))
    assert gs_entry[0] == "F32" and gs_entry[1] == [1]
    gs = np.frombuffer(gs_entry[2], dtype=np.float32)[0]
    assert gs == spec.global_scale(x), what
    want_values, want_linear = spec.quantize(x, gs)
    got_values = as_array(values)
    got_scales = np.frombuffer(scales[2], dtype=np.uint8).reshape(scales[1])
    np.testing.assert_array_equal(got_values, want_values, err_msg=f"{name}: values")
    np.testing.assert_array_equal(got_scales, spec.swizzle(want_linear, rows, cols),
                                  err_msg=f"{name}: scales")
    decoded = spec.dequantize(got_values, spec.unswizzle(got_scales, rows, cols), gs)
    xf = x.astype(np.float64)
    sf = np.repeat(spec.e4m3_value(want_linear).astype(np.float64), 16, axis=1)
    bound = (np.abs(xf) / 4 + sf / (4 * np.float64(gs))) * (1 + 2.0**-20)
    p = np.repeat(np.float64(gs) * spec.block_amax(x.astype(np.float32)) / 6, 16, axis=1)
    ok = (p >= 2.0**-6) & (p <= 448)
    assert (np.abs(decoded - xf)[ok] <= bound[ok]).all(), f"{name}: error bound"
    return got_values, got_scales, gs


# ---- the happy path ---------------------------------------------------------------------


def mixed_model(rng):
    def m(rows, cols, dtype):
        return (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 3)).astype(dtype)

    return {
        "embed.weight": m(50, 32, BF16),                      # 2-D bf16, not matched
        "layers.0.attn.q.weight": m(130, 64, BF16),           # matched
        "layers.0.attn.k.weight": m(37, 48, np.float16),      # matched, 48/16 = 3 scale cols
        "layers.0.norm.weight": m(1, 64, np.float32)[0],      # matched, 1-D: copied
        "layers.0.mlp.gate.weight": m(40, 80, BF16),          # --gate-up
        "layers.0.mlp.up.weight": m(40, 80, BF16),            # --gate-up
        "layers.0.mlp.down.weight": m(80, 40, np.float32),    # not matched (40 % 16 != 0)
        "head.weight": m(3, 16, np.float32),                  # matched
        "positions": np.arange(7, dtype=np.int64),
        "mask": (rng.random(5) > 0.5),
        "odd_bytes": rng.integers(0, 255, 3).astype(np.uint8),
        "fp8.table": m(4, 8, np.float32).astype(ml_dtypes.float8_e4m3fn),
        "empty": np.zeros((0, 16), np.float32),
        "scalar": np.array(2.5, np.float64),
        "odd \"name\" \\ \u00fc\n": rng.integers(0, 9, 6).astype(np.int8),  # escapes survive
        "attn.\u00e9.weight": m(2, 32, np.float32),                   # matched, non-ASCII name
    }


def test_quantize_mixed_file(cli, rng, tmp_path):
    src = mixed_model(rng)
    write_safetensors(tmp_path / "in.safetensors", src, {"format": "pt", "note": "a \"q\" \u00e9"})
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors",
            "--pattern", "layers.*.attn.*.weight", "-p", "*norm*", "-p", "head.weight",
            "-p", "attn.*.weight",
            "--gate-up", "layers.0.mlp.gate.weight", "layers.0.mlp.up.weight",
            "layers.0.mlp.gate_up")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.safetensors", "out.safetensors"]
    metadata, out, _ = read_safetensors(tmp_path / "out.safetensors")

    # metadata: kept, plus the tool's record
    assert metadata["format"] == "pt" and metadata["note"] == "a \"q\" \u00e9"
    record = json.loads(metadata["ingot.quantize"])
    assert record["tool"] == "ingot quantize" and record["format"] == "nvfp4"
    assert sorted(record["quantized"]) == ["attn.\u00e9.weight", "head.weight",
                                           "layers.0.attn.k.weight", "layers.0.attn.q.weight"]
    assert record["gate_up"] == [{"out": "layers.0.mlp.gate_up", "gate": "layers.0.mlp.gate.weight",
                                  "up": "layers.0.mlp.up.weight"}]

    # copies: byte for byte, same dtype and shape
    quantized = {"layers.0.attn.q.weight", "layers.0.attn.k.weight", "head.weight",
                 "attn.\u00e9.weight"}
    consumed = {"layers.0.mlp.gate.weight", "layers.0.mlp.up.weight"}
    for name, a in src.items():
        if name in quantized | consumed:
            assert name not in out
            continue
        dtype, shape, raw = out[name]
        assert dtype == NUMPY_TO_ST[a.dtype] and shape == list(a.shape), name
        assert raw == np.ascontiguousarray(a).tobytes(), f"{name}: not a byte-identical copy"

    # quantized tensors
    for name in quantized:
        check_quantized(out, name, src[name].astype(np.float32))
    w = spec.interleave(src["layers.0.mlp.gate.weight"], src["layers.0.mlp.up.weight"])
    check_quantized(out, "layers.0.mlp.gate_up", w.astype(np.float32))
    expected = set(src) - quantized - consumed
    for name in sorted(quantized) + ["layers.0.mlp.gate_up"]:
        expected |= {f"{name}.nvfp4_values", f"{name}.nvfp4_scales", f"{name}.nvfp4_global_scale"}
    assert set(out) == expected


def test_output_decodes_with_the_binding(cli, rng, tmp_path):
    """The library's own dequantize reads the file's tensors as stored."""
    ingot = pytest.importorskip("ingot")
    x = (rng.standard_normal((200, 96)) * 0.05).astype(BF16)
    write_safetensors(tmp_path / "in.safetensors", {"w": x})
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "-p", "w", "-q")
    assert r.returncode == 0 and r.stdout == "", r.stderr
    _, out, _ = read_safetensors(tmp_path / "out.safetensors")
    values, scales = as_array(out["w.nvfp4_values"]), as_array(out["w.nvfp4_scales"])
    gs = as_array(out["w.nvfp4_global_scale"])
    with ingot.Context("cpu") as ctx:
        y = ingot.nvfp4_dequantize(ctx, values, ingot.reinterpret(scales.view(np.uint8), "f8_e4m3"),
                                   gs)
        v2, s2 = ingot.nvfp4_quantize(ctx, x, ingot.nvfp4_global_scale(ctx, x))
    np.testing.assert_array_equal(values, v2)
    np.testing.assert_array_equal(scales.view(np.uint8), s2)
    want = spec.dequantize(values, spec.unswizzle(scales.view(np.uint8), 200, 96), gs[0])
    np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))


def test_cpu_and_default_backend_identical(cli, rng, tmp_path):
    """--cpu and the default backend (CUDA when there is a GPU) write the same
    bytes."""
    src = {"a": rng.standard_normal((300, 256)).astype(BF16),
           "g": rng.standard_normal((64, 128)).astype(np.float32),
           "u": rng.standard_normal((64, 128)).astype(np.float32)}
    src["a"][5, 7] = np.nan
    write_safetensors(tmp_path / "in.safetensors", src)
    args = ["-p", "a", "--gate-up", "g", "u", "gu", "-q"]
    r1 = run(cli, tmp_path / "in.safetensors", tmp_path / "cpu.safetensors", "--cpu", *args)
    r2 = run(cli, tmp_path / "in.safetensors", tmp_path / "dflt.safetensors", *args)
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    assert "NaN/Inf" in r1.stderr  # the non-finite warning
    assert (tmp_path / "cpu.safetensors").read_bytes() == (tmp_path / "dflt.safetensors").read_bytes()


def test_no_pattern_copies_everything(cli, rng, tmp_path):
    src = {"w": rng.standard_normal((4, 32)).astype(np.float32), "b": np.arange(3, dtype=np.int32)}
    write_safetensors(tmp_path / "in.safetensors", src, {"k": "v"})
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors")
    assert r.returncode == 0, r.stderr
    assert "nothing is quantized" in r.stderr
    metadata, out, _ = read_safetensors(tmp_path / "out.safetensors")
    assert metadata["k"] == "v"
    assert json.loads(metadata["ingot.quantize"])["quantized"] == []
    for name, a in src.items():
        assert out[name][2] == a.tobytes()


def test_requantizing_the_output(cli, rng, tmp_path):
    """The output is itself a valid input; the record is replaced, data kept."""
    write_safetensors(tmp_path / "a.safetensors",
                      {"w": rng.standard_normal((16, 64)).astype(np.float16),
                       "v": rng.standard_normal((16, 32)).astype(np.float16)})
    assert run(cli, tmp_path / "a.safetensors", tmp_path / "b.safetensors", "-p", "w").returncode == 0
    r = run(cli, tmp_path / "b.safetensors", tmp_path / "c.safetensors", "-p", "v")
    assert r.returncode == 0, r.stderr
    _, b, _ = read_safetensors(tmp_path / "b.safetensors")
    meta_c, c, _ = read_safetensors(tmp_path / "c.safetensors")
    for suffix in ("values", "scales", "global_scale"):
        assert c[f"w.nvfp4_{suffix}"] == b[f"w.nvfp4_{suffix}"]
    assert json.loads(meta_c["ingot.quantize"])["quantized"] == ["v"]
    assert "v.nvfp4_values" in c and "v" not in c


def test_matched_tensor_of_other_rank_or_dtype_is_copied(cli, tmp_path):
    src = {"a.w": np.ones((2, 16), np.int32), "b.w": np.ones((2, 2, 16), np.float32),
           "c.w": np.ones(16, np.float32)}
    write_safetensors(tmp_path / "in.safetensors", src)
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "-p", "*.w")
    assert r.returncode == 0, r.stderr
    _, out, _ = read_safetensors(tmp_path / "out.safetensors")
    assert set(out) == set(src)


def test_dry_run_writes_nothing(cli, rng, tmp_path):
    write_safetensors(tmp_path / "in.safetensors", {"w": rng.standard_normal((4, 32)).astype(np.float32)})
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "-p", "w", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "nothing written" in r.stdout
    assert no_leftovers(tmp_path, "out.safetensors") == []


def test_existing_output_is_replaced(cli, rng, tmp_path):
    write_safetensors(tmp_path / "in.safetensors", {"w": rng.standard_normal((4, 32)).astype(np.float32)})
    (tmp_path / "out.safetensors").write_bytes(b"old contents")
    assert run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "-p", "w").returncode == 0
    read_safetensors(tmp_path / "out.safetensors")


def test_safetensors_reader_accepts_the_output(cli, rng, tmp_path):
    """Where the safetensors package is installed, its reader parses the file."""
    safetensors = pytest.importorskip("safetensors")
    x = rng.standard_normal((20, 32)).astype(np.float32)
    write_safetensors(tmp_path / "in.safetensors", {"w": x, "b": np.arange(4, dtype=np.int64)},
                      {"format": "np"})
    assert run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "-p", "w").returncode == 0
    with safetensors.safe_open(str(tmp_path / "out.safetensors"), framework="numpy") as f:
        assert f.metadata()["format"] == "np"
        assert set(f.keys()) == {"b", "w.nvfp4_values", "w.nvfp4_scales", "w.nvfp4_global_scale"}
        np.testing.assert_array_equal(f.get_tensor("b"), np.arange(4))
        assert f.get_tensor("w.nvfp4_values").shape == (20, 16)
        assert f.get_tensor("w.nvfp4_global_scale")[0] == spec.global_scale(x)


# ---- failures: clear message, exit 1, nothing left behind -------------------------------------


def _good_header():
    return {"__metadata__": {"format": "pt"},
            "w": {"dtype": "F32", "shape": [2, 16], "data_offsets": [0, 128]},
            "b": {"dtype": "I64", "shape": [2], "data_offsets": [128, 144]}}


def _file_from(header, data_len=144):
    def make(path):
        write_raw(path, header_bytes(header), bytes(i % 251 for i in range(data_len)))
    return make


def _edit(fn):
    h = _good_header()
    fn(h)
    return _file_from(h)


def _truncate(nbytes):
    def make(path):
        _file_from(_good_header())(path)
        blob = path.read_bytes()
        path.write_bytes(blob[:nbytes] if nbytes >= 0 else blob[:len(blob) + nbytes])
    return make


def _raw(text, data=b"", length=None):
    return lambda path: write_raw(path, text, data, length)


BAD_INPUTS = {  # case: (make the file, a phrase the error must contain)
    "empty file": (lambda p: p.write_bytes(b""), "too short"),
    "short length": (lambda p: p.write_bytes(b"\x10\0\0"), "too short"),
    "header past EOF": (_truncate(40), "past the end of the file"),
    "huge header length": (_raw("{}", length=2**40), "limit"),
    "truncated data": (_truncate(-5), "truncated"),
    "bad JSON": (_raw('{"w": {"dtype": "F32", "shape": [1, 16], "data_offsets": [0, 64]'
                      + " " * 8, b"\0" * 64), "invalid JSON"),
    "JSON not an object": (_raw("[1, 2]  "), "not an object"),
    "trailing garbage": (_raw('{}  xyzw'), "unexpected bytes"),
    "not UTF-8": (_raw(b'{"\xff": 1}   '), "UTF-8"),
    "unknown dtype": (_edit(lambda h: h["w"].update(dtype="F12")), "unknown dtype"),
    "missing dtype": (_edit(lambda h: h["w"].pop("dtype")), "dtype"),
    "bad shape": (_edit(lambda h: h["w"].update(shape=[2, -16])), "shape"),
    "fractional shape": (_edit(lambda h: h["w"].update(shape=[2, 16.5])), "shape"),
    "wrong byte length": (_edit(lambda h: h["w"].update(shape=[2, 15])), "bytes"),
    "offsets past the data": (_edit(lambda h: h["b"].update(data_offsets=[128, 152])),
                              "past the end of the data"),
    "offsets reversed": (_edit(lambda h: h["b"].update(data_offsets=[144, 128])), "end before"),
    "overlapping offsets": (_edit(lambda h: (h["w"].update(shape=[2, 18], data_offsets=[0, 144]))),
                            "overlap"),
    "gap in offsets": (_edit(lambda h: (h["w"].update(shape=[1, 16], data_offsets=[0, 64]))),
                       "belong to no tensor"),
    "trailing data": (_file_from(_good_header(), data_len=150), "belong to no tensor"),
    "offsets not a pair": (_edit(lambda h: h["w"].update(data_offsets=[0])), "data_offsets"),
    "duplicate name": (_raw('{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                            '"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
                            b"\0\0"), "appears twice"),
    "metadata not strings": (_edit(lambda h: h["__metadata__"].update(n=3)), "not a string"),
    "entry not an object": (_edit(lambda h: h.update(b=[1])), "not a JSON object"),
    "NUL in a name": (_raw('{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
                           b"\0"), "NUL character"),
}


# ---- strict JSON: what another reader could take differently is refused ---------------------
# Each header is a whole, otherwise valid file of one U8 tensor "w" (shape [64]) over 64
# data bytes, with one defect. These files are also seeds of the header fuzzer
# (tests/fuzz/corpus/fuzz_safetensors_header/strict-*).

_W = b'"w":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}'


def _w(shape=b"64", offsets=b"0,64", extra=b""):
    return (b'{"w":{"dtype":"U8","shape":[' + shape + b'],"data_offsets":[' + offsets + b"]"
            + extra + b"}}")


STRICT_JSON = {  # case: (header bytes, phrases the error must contain)
    "NUL between tokens": (_w(shape=b"64,\x0032"), ["control byte 0x00", "byte 31"]),
    "NUL after a value": (_w(shape=b"64\x00"), ["control byte 0x00", "byte 30"]),
    "control byte before the object": (b"\x01" + _w(), ["control byte 0x01", "byte 0"]),
    "NUL padding": (_w() + b"\x00" * 7, ["control byte 0x00", "outside a string"]),
    "NUL in a literal": (_w(extra=b',"x":tr\x00e'), ["control byte 0x00"]),
    "raw NUL in a name": (b'{"a\x00b":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}',
                          ["raw control character 0x00 (NUL)", "byte 3"]),
    "raw NUL in a metadata key": (b'{"__metadata__":{"k\x00":"v"},' + _W + b"}",
                                  ["raw control character 0x00", "byte 19"]),
    "raw NUL in a metadata value": (b'{"__metadata__":{"k":"v\x00w"},' + _W + b"}",
                                    ["raw control character 0x00", "byte 23"]),
    "raw tab in a string": (b'{"__metadata__":{"k":"a\tb"},' + _W + b"}",
                            ["raw control character 0x09", "byte 23"]),
    "raw newline in a name": (b'{"w\n":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}',
                              ["raw control character 0x0a"]),
    "duplicate dtype": (b'{"w":{"dtype":"U8","dtype":"F32","shape":[64],"data_offsets":[0,64]}}',
                        ["tensor 'w'", 'field "dtype" appears twice']),
    "duplicate shape": (b'{"w":{"dtype":"U8","shape":[64],"shape":[16],"data_offsets":[0,64]}}',
                        ["tensor 'w'", 'field "shape" appears twice']),
    "duplicate data_offsets": (_w(extra=b',"data_offsets":[0,64]'),
                               ["tensor 'w'", 'field "data_offsets" appears twice']),
    "duplicate unknown field": (_w(extra=b',"x":1,"x":2'),
                                ["tensor 'w'", 'field "x" appears twice']),
    "negative zero offset": (_w(offsets=b"-0,64"), ["tensor 'w'", "data_offsets[0]", '"-0"']),
    "negative zero dim": (_w(shape=b"64,-0"), ["tensor 'w'", "shape[1]", '"-0"']),
    "1.000 as a dim": (_w(shape=b"64,1.000"), ["tensor 'w'", "shape[1]", "not a plain", '"1.000"']),
    "exponent dim": (_w(shape=b"1e3"), ["tensor 'w'", "shape[0]", '"1e3"']),
    "exponent offset": (_w(offsets=b"0,6.4e1"), ["tensor 'w'", "data_offsets[1]", '"6.4e1"']),
    "2^53 + 1": (_w(shape=b"9007199254740993"), ["tensor 'w'", "shape[0]", "over 2^53"]),
    "trailing point": (_w(shape=b"4."), ["invalid JSON number", '"4."', "byte 28"]),
    "leading zero": (_w(shape=b"064"), ["invalid JSON number", '"064"', "leading zero"]),
    "leading zero offset": (_w(offsets=b"00,64"), ["invalid JSON number", '"00"']),
    "plus sign": (_w(shape=b"+64"), ["invalid JSON number", '"+64"']),
    "bare point": (_w(extra=b',"x":.5'), ["invalid JSON number", '".5"']),
    "empty exponent": (_w(extra=b',"x":1e'), ["invalid JSON number", "exponent"]),
    "escaped field name": (b'{"w":{"dtype":"U8","sh\\u0061pe":[1e3],"data_offsets":[0,64]}}',
                           ["tensor 'w'", "shape[0]", '"1e3"']),
    "lone high surrogate": (b'{"\\ud800x":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}',
                            ["lone high surrogate", "byte 2"]),
    "lone low surrogate": (b'{"\\udc00":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}',
                           ["lone low surrogate", "byte 2"]),
    "high surrogate, no low": (b'{"\\ud800\\u0041":{"dtype":"U8","shape":[64],'
                               b'"data_offsets":[0,64]}}', ["lone high surrogate"]),
    "bad escape": (b'{"\\x":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}',
                   ["invalid escape", "byte 2"]),
    "short \\u escape": (b'{"\\u12g4":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}',
                         ["invalid \\u escape", "byte 2"]),
    "trailing comma": (b'{' + _W + b',}', ["invalid JSON at byte"]),
    "byte order mark": ("\ufeff".encode() + _w(), ["invalid JSON at byte 0"]),
    "nested too deep": (_w(extra=b',"x":' + b"[" * 200 + b"]" * 200), ["nested deeper than 128"]),
}


@pytest.mark.parametrize("case", list(STRICT_JSON))
def test_strict_json(cli, tmp_path, case):
    header, phrases = STRICT_JSON[case]
    write_raw(tmp_path / "in.safetensors", header, bytes(64))
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "--dry-run")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "ingot quantize: error:" in r.stderr, r.stderr
    for phrase in phrases:
        assert phrase in r.stderr, (phrase, r.stderr)


STRICT_JSON_OK = {  # valid JSON the check must not refuse
    "plain": _w(),
    "whitespace everywhere": b' \t\r\n{ "w" :\n{ "dtype" : "U8" ,\t"shape" : [ 64 ] , '
                             b'"data_offsets" : [ 0 , 64 ] } }\r\n ',
    "escapes": b'{"\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\\uFFFF":'
               b'{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}',
    "numbers in an unknown field": _w(extra=b',"x":[-0,0.5,1E+3,-2e-3,0,123]'),
    "literals in an unknown field": _w(extra=b',"x":{"a":true,"b":false,"c":null}'),
    "null metadata": b'{"__metadata__":null,' + _W + b"}",
    "metadata with escapes": b'{"__metadata__":{"k\\u0001":"\\"v\\"","":""},' + _W + b"}",
    "nested 100 deep": _w(extra=b',"x":' + b"[" * 100 + b"]" * 100),
    "2^53": b'{"w":{"dtype":"U8","shape":[64,9007199254740992,0],"data_offsets":[0,0]},'
            b'"v":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}',
}


@pytest.mark.parametrize("case", list(STRICT_JSON_OK))
def test_strict_json_accepts_valid_json(cli, tmp_path, case):
    write_raw(tmp_path / "in.safetensors", STRICT_JSON_OK[case], bytes(64))
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "--dry-run")
    assert r.returncode == 0, r.stderr


def _metadata_header(n, duplicate=None):
    keys = [f'"k{i}":"v{i}"' for i in range(n)]
    if duplicate is not None:
        keys.append(f'"k{duplicate}":"again"')
    return ('{"__metadata__":{' + ",".join(keys) + "}," + _W.decode() + "}").encode()


def test_many_metadata_keys_read_fast(cli, tmp_path):
    """200,000 metadata keys: the duplicate-key check sorts (it used to compare
    every pair: about 90 s here)."""
    import time
    write_raw(tmp_path / "in.safetensors", _metadata_header(200_000), bytes(64))
    start = time.monotonic()
    r = subprocess.run([cli, "quantize", str(tmp_path / "in.safetensors"),
                        str(tmp_path / "out.safetensors"), "--dry-run", "-q"],
                       capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - start
    assert r.returncode == 0, r.stderr
    assert elapsed < 2.0, f"reading 200,000 metadata keys took {elapsed:.2f} s"


def test_duplicate_metadata_key_among_many(cli, tmp_path):
    write_raw(tmp_path / "in.safetensors", _metadata_header(50_000, duplicate=31_337), bytes(64))
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "--dry-run")
    assert r.returncode == 1 and "__metadata__ key 'k31337' appears twice" in r.stderr, r.stderr


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_malformed_input_fails_cleanly(cli, tmp_path, case):
    make, message = BAD_INPUTS[case]
    make(tmp_path / "in.safetensors")
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "-p", "*")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "ingot quantize: error:" in r.stderr and message in r.stderr, r.stderr
    assert no_leftovers(tmp_path, "out.safetensors") == []


def test_good_header_is_good(cli, tmp_path):
    """The base of the malformed cases is itself valid."""
    _file_from(_good_header())(tmp_path / "in.safetensors")
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", "-p", "w")
    assert r.returncode == 0, r.stderr
    _, out, _ = read_safetensors(tmp_path / "out.safetensors")
    assert set(out) == {"b", "w.nvfp4_values", "w.nvfp4_scales", "w.nvfp4_global_scale"}


PLAN_ERRORS = {
    "cols % 16": ({"w": np.ones((2, 24), np.float32)}, ["-p", "w"], "multiple of 16"),
    "name collision": ({"w": np.ones((2, 16), np.float32),
                        "w.nvfp4_values": np.ones(3, np.uint8)}, ["-p", "w"], "appear twice"),
    "gate-up missing": ({"g": np.ones((2, 16), np.float32)}, ["--gate-up", "g", "u", "o"],
                        "no tensor named 'u'"),
    "gate-up shapes": ({"g": np.ones((2, 16), np.float32), "u": np.ones((3, 16), np.float32)},
                       ["--gate-up", "g", "u", "o"], "same shape"),
    "gate-up dtypes": ({"g": np.ones((2, 16), np.float32), "u": np.ones((2, 16), np.float16)},
                       ["--gate-up", "g", "u", "o"], "same dtype"),
    "gate-up not float": ({"g": np.ones((2, 16), np.int32), "u": np.ones((2, 16), np.int32)},
                          ["--gate-up", "g", "u", "o"], "2-D BF16, F16 or F32"),
    "gate-up twice": ({"g": np.ones((2, 16), np.float32), "u": np.ones((2, 16), np.float32)},
                      ["--gate-up", "g", "u", "o", "--gate-up", "g", "u", "p"], "already used"),
}


@pytest.mark.parametrize("case", list(PLAN_ERRORS))
def test_bad_request_fails_cleanly(cli, tmp_path, case):
    tensors, args, message = PLAN_ERRORS[case]
    write_safetensors(tmp_path / "in.safetensors", tensors)
    (tmp_path / "out.safetensors").write_bytes(b"keep me")
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "out.safetensors", *args)
    assert r.returncode == 1 and message in r.stderr, r.stderr
    assert (tmp_path / "out.safetensors").read_bytes() == b"keep me"  # untouched
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_gate_up_output_name_must_be_utf8(cli, tmp_path):
    """OUT is written into the header: not UTF-8, the tool would write a file
    that no reader (itself included) accepts."""
    write_safetensors(tmp_path / "in.safetensors",
                      {"g": np.ones((2, 16), np.float32), "u": np.ones((2, 16), np.float32)})
    r = subprocess.run([cli.encode(), b"quantize", bytes(tmp_path / "in.safetensors"),
                        bytes(tmp_path / "out.safetensors"), b"--gate-up", b"g", b"u",
                        b"bad\xffname"], capture_output=True)
    assert r.returncode == 1 and b"not valid UTF-8" in r.stderr, r.stderr
    assert no_leftovers(tmp_path, "out.safetensors") == []


def test_missing_input_and_output_directory(cli, tmp_path):
    r = run(cli, tmp_path / "nope.safetensors", tmp_path / "out.safetensors")
    assert r.returncode == 1 and "cannot open" in r.stderr
    write_safetensors(tmp_path / "in.safetensors", {"w": np.ones((2, 16), np.float32)})
    r = run(cli, tmp_path / "in.safetensors", tmp_path / "no" / "such" / "out.safetensors")
    assert r.returncode == 1 and "temporary file" in r.stderr


@pytest.mark.parametrize("args,message", [
    ([], "needs IN.safetensors and OUT.safetensors"),
    (["a"], "needs IN"),
    (["a", "b", "c"], "unexpected argument"),
    (["a", "b", "--frobnicate"], "unknown option"),
    (["a", "b", "--pattern"], "needs a GLOB"),
    (["a", "b", "--gate-up", "g", "u"], "three names"),
    (["a", "b", "--device", "x"], "not a device number"),
    (["a", "b", "--cpu", "--device", "0"], "exclude each other"),
])
def test_usage_errors(cli, args, message):
    r = run(cli, *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_help(cli):
    r = run(cli, "--help")
    assert r.returncode == 0 and "NAME.nvfp4_values" in r.stdout
    r = subprocess.run([cli, "help", "quantize"], capture_output=True, text=True)
    assert r.returncode == 0 and "--gate-up" in r.stdout
