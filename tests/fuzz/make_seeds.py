"""Writes the seed files of the fuzz corpora:

- tests/fuzz/corpus/fuzz_safetensors_header/: the crafted files of
  python/tests/test_quantize_tool.py (the malformed inputs, the strict-JSON
  cases, valid files), so that the fuzzer starts from every case the
  regression tests pin (needs numpy, ml_dtypes and pytest);
- tests/fuzz/corpus/fuzz_op_args/: for every op of fuzz_op_args.c (OPS below,
  in its order), a valid call and two perturbed ones;
- tests/fuzz/corpus/fuzz_ple_load/: small n-gram table checkpoints of
  python/tests/ple_files.py over 1-4 files, good and broken (its BROKEN
  cases), in the input format of fuzz_ple_load.c (pure Python).

Run it again after adding such a case or an op:

    python3 tests/fuzz/make_seeds.py [header|ops|ple]

Existing files of the same name are overwritten; others are left alone."""

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "tests"))

OUT = ROOT / "tests" / "fuzz" / "corpus" / "fuzz_safetensors_header"
OPS_OUT = ROOT / "tests" / "fuzz" / "corpus" / "fuzz_op_args"
PLE_OUT = ROOT / "tests" / "fuzz" / "corpus" / "fuzz_ple_load"

# The op table of fuzz_op_args.c, in order (the first input byte picks one).
OPS = ["gemm_workspace_size", "geglu_workspace_size", "mlp_workspace_size",
       "sample_workspace_size", "softmax_workspace_size", "scale_shape", "ngram_config_derive",
       "ngram_table_rows", "ngram_row_ids", "ngram_commit_context", "ngram_gather",
       "ngram_embed", "nvfp4_quantize", "nvfp4_global_scale", "nvfp4_dequantize",
       "nvfp4_swizzle_scales", "nvfp4_unswizzle_scales", "nvfp4_quantize_gate_up",
       "nvfp4_gemm", "nvfp4_geglu", "nvfp4_mlp", "sample", "sampling_softmax",
       "sampling_shard_get_plan", "sampling_shard_step", "sampling_shard_gather",
       "sampling_shard_finish_sample", "sampling_shard_finish_softmax", "sampling_shard_sum",
       "sampling_sharded_nccl_workspace_size", "sample_sharded_nccl"]


def op_seeds():
    """Byte 0: the op; byte 1: < 0x40 an unperturbed call; the last byte: how
    many 16-byte units before it are tensor contents."""
    OPS_OUT.mkdir(parents=True, exist_ok=True)
    state = 12345
    for k, name in enumerate(OPS):
        body = bytes((7 * i + k) % 251 for i in range(48))       # shapes, flags, values
        content = bytes((37 * i + 11 * k) % 256 for i in range(32))
        (OPS_OUT / f"valid-{name}").write_bytes(bytes([k, 0]) + body + content + b"\x02")
        perturbed = bytearray([k, 0x80])
        for _ in range(64):                                        # a fixed pseudo-random stream
            state = (state * 1103515245 + 12345) % 2**31
            perturbed.append(state >> 16 & 0xff)
        (OPS_OUT / f"perturbed-{name}").write_bytes(bytes(perturbed) + b"\x00")
        wild = bytes([k, 0xff]) + bytes([0xc3, 0x01]) * 40 + bytes([0xff] * 16)
        (OPS_OUT / f"wild-{name}").write_bytes(wild + b"\x00")
    print(f"{3 * len(OPS)} seeds in {OPS_OUT.relative_to(ROOT)}")


def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def header_seeds():
    import numpy as np

    import test_quantize_tool as t

    OUT.mkdir(parents=True, exist_ok=True)
    files = {}
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "f.safetensors"
        for case, (make, _) in t.BAD_INPUTS.items():
            make(p)
            files[f"bad-{slug(case)}"] = p.read_bytes()
        for case, (header, _) in t.STRICT_JSON.items():
            t.write_raw(p, header, bytes(64))
            files[f"strict-{slug(case)}"] = p.read_bytes()
        for case, header in t.STRICT_JSON_OK.items():
            t.write_raw(p, header, bytes(64))
            files[f"ok-{slug(case)}"] = p.read_bytes()
        t._file_from(t._good_header())(p)
        files["ok-good-header"] = p.read_bytes()
        rng = np.random.default_rng(7)
        t.write_safetensors(p, {"w": rng.standard_normal((4, 32)).astype(np.float32),
                                "g": rng.standard_normal((2, 16)).astype(t.BF16),
                                "u": rng.standard_normal((2, 16)).astype(t.BF16),
                                "b": np.arange(3, dtype=np.int64)},
                            {"format": "pt", "ingot.quantize": "{}"})
        files["ok-small-model"] = p.read_bytes()
        t.write_raw(p, t._metadata_header(40, duplicate=17), bytes(64))
        files["bad-duplicate-metadata-key"] = p.read_bytes()
        t.write_raw(p, t._metadata_header(40), bytes(64))
        files["ok-metadata-keys"] = p.read_bytes()
    for name, blob in sorted(files.items()):
        (OUT / name).write_bytes(blob)
    print(f"{len(files)} seeds in {OUT.relative_to(ROOT)}")


def ple_input(files, prefix=None, row_bytes=None):
    """fuzz_ple_load.c's input: flags, row_bytes, the prefix, then the files
    (each but the last behind a 4-byte little-endian length)."""
    import struct

    flags = (len(files) - 1) | (4 if prefix is not None else 0) | (8 if row_bytes else 0)
    p = (prefix or "").encode()
    blob = bytes([flags, row_bytes or 0, len(p)]) + p
    for f in files[:-1]:
        blob += struct.pack("<I", len(f)) + f
    return blob + files[-1]


def ple_seeds():
    from ple_files import BROKEN, Checkpoint

    PLE_OUT.mkdir(parents=True, exist_ok=True)
    files = {}
    for n in range(1, 5):
        c = Checkpoint(seed=n, shards=n + 2, dim=8, files=n, max_rows=5)
        files[f"ok-{n}-files"] = ple_input(c.file_bytes())
        files[f"ok-{n}-files-prefix-d"] = ple_input(c.file_bytes(), "model.", 8)
    c = Checkpoint(seed=9, shards=3, dim=6, files=2, prefix="", max_rows=4)
    files["ok-empty-prefix"] = ple_input(c.file_bytes(), "")
    for case, (edit, _) in BROKEN.items():
        c = Checkpoint(seed=5, shards=6, dim=4, files=3, max_rows=4)
        edit(c)
        files[f"bad-{slug(case)}"] = ple_input(c.file_bytes())
    c = Checkpoint(seed=6, shards=3, dim=4, files=2, max_rows=4)
    blobs = c.file_bytes()
    files["bad-truncated-file"] = ple_input([blobs[0][:-3], blobs[1]])
    files["bad-row-bytes"] = ple_input(blobs, None, 5)
    for name, blob in sorted(files.items()):
        (PLE_OUT / name).write_bytes(blob)
    print(f"{len(files)} seeds in {PLE_OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    if which in ("all", "ops"):
        op_seeds()
    if which in ("all", "header"):
        header_seeds()
    if which in ("all", "ple"):
        ple_seeds()
