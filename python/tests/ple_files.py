"""Synthetic checkpoints of an n-gram (PLE) table, for the loader's tests
(test_ple_load.py) and the seeds of tests/fuzz/corpus/fuzz_ple_load
(tests/fuzz/make_seeds.py). Pure Python, no numpy: a safetensors file is an
8-byte little-endian header length, a JSON header padded with spaces to a
multiple of 8, then the data.

A Checkpoint holds the shards "<prefix>ngram_embedding.shard_<i>.weight"
(F8_E4M3 [rows_i, D], random bytes), the scale
"<prefix>ngram_embedding.weight_scale" and two unrelated tensors, spread over
``files`` files in shuffled order; edit ``tensors`` to break it."""

import json
import math
import random
import struct
from pathlib import Path

ELEMENT_BYTES = {"F8_E4M3": 1, "U8": 1, "I8": 1, "BF16": 2, "F16": 2, "F32": 4, "I64": 8}


class Tensor:
    def __init__(self, name, dtype, shape, data, file):
        self.name, self.dtype, self.shape, self.data, self.file = name, dtype, list(shape), data, file

    def __repr__(self):
        return f"Tensor({self.name!r}, {self.dtype}, {self.shape}, file {self.file})"


def scale_bytes(value, dtype):
    f32 = struct.pack("<f", value)
    return f32 if dtype == "F32" else f32[2:]  # bf16: the high half of the f32


def safetensors_bytes(tensors):
    """One file of ``tensors`` (in order): header, then the data back to back."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape,
                          "data_offsets": [off, off + len(t.data)]}
        off += len(t.data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(t.data for t in tensors)


class Checkpoint:
    def __init__(self, seed=0, shards=5, dim=24, files=3, prefix="model.", scale=0.375,
                 max_rows=40):
        rng = random.Random(seed)
        self.prefix, self.dim, self.num_files, self.scale = prefix, dim, files, scale
        rows = [rng.randint(1 if i == 0 else 0, max_rows) for i in range(shards)]
        self.tensors, chunks = [], []
        for i, r in enumerate(rows):
            data = rng.getrandbits(8 * r * dim).to_bytes(r * dim, "little") if r else b""
            chunks.append(data)
            self.tensors.append(Tensor(self.shard_name(i), "F8_E4M3", [r, dim], data,
                                       rng.randrange(files)))
        self.table = b"".join(chunks)
        self.rows = sum(rows)
        self.tensors.append(Tensor(self.scale_name, "F32", [], scale_bytes(scale, "F32"),
                                   rng.randrange(files)))
        self.tensors.append(Tensor("model.embed_tokens.weight", "F32", [3, 4], bytes(48),
                                   rng.randrange(files)))
        self.tensors.append(Tensor(prefix + "ngram_embedding.norm", "F32", [4], bytes(16),
                                   rng.randrange(files)))
        rng.shuffle(self.tensors)  # no file holds the shards in index order

    def shard_name(self, i):
        return f"{self.prefix}ngram_embedding.shard_{i}.weight"

    @property
    def scale_name(self):
        return f"{self.prefix}ngram_embedding.weight_scale"

    def find(self, name):
        return next(t for t in self.tensors if t.name == name)

    def remove(self, name):
        self.tensors.remove(self.find(name))

    def file_bytes(self):
        return [safetensors_bytes([t for t in self.tensors if t.file == f])
                for f in range(self.num_files)]

    def write(self, folder):
        """Writes part-<f>.safetensors into folder; returns their paths."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for f, blob in enumerate(self.file_bytes()):
            p = folder / f"part-{f}.safetensors"
            p.write_bytes(blob)
            paths.append(p)
        return paths


# ---- broken variants: name -> (edit the checkpoint, a phrase of the error) ---------------------


def _drop_shard(i):
    return lambda c: c.remove(c.shard_name(i))


def _duplicate_shard(i):
    def edit(c):
        t = c.find(c.shard_name(i))
        c.tensors.append(Tensor(t.name, t.dtype, t.shape, t.data, (t.file + 1) % c.num_files))
    return edit


def _retype_shard(i, dtype):
    def edit(c):
        c.find(c.shard_name(i)).dtype = dtype
    return edit


def _widen_shard(i):
    def edit(c):
        t = c.find(c.shard_name(i))
        r = max(t.shape[0], 1)
        t.shape, t.data = [r, c.dim + 1], bytes(r * (c.dim + 1))
    return edit


def _reshape_scale(dtype, shape, value=None):
    def edit(c):
        t = c.find(c.scale_name)
        v = c.scale if value is None else value
        t.dtype, t.shape = dtype, shape
        t.data = scale_bytes(v, "F32" if dtype == "F32" else "BF16") * max(1, math.prod(shape))
    return edit


def _rename_shard(i, new_suffix):
    def edit(c):
        c.find(c.shard_name(i)).name = f"{c.prefix}ngram_embedding.{new_suffix}"
    return edit


def _second_table(c):
    c.tensors.append(Tensor("model.layers.1.ngram_embedding.shard_0.weight", "F8_E4M3",
                            [2, c.dim], bytes(2 * c.dim), 0))


BROKEN = {
    "missing shard": (_drop_shard(3), "shard_3 is missing"),
    "duplicate shard index": (_duplicate_shard(2), "shard_2 appears twice"),
    "wrong dtype": (_retype_shard(1, "U8"), "dtype U8, a table shard must be F8_E4M3"),
    "wrong D in one shard": (_widen_shard(4), "but row_bytes = "),
    "missing weight_scale": (lambda c: c.remove(c.scale_name), "weight_scale' (the table's scale)"),
    "NaN weight_scale": (_reshape_scale("F32", [], float("nan")), "scale is NaN"),
    "weight_scale of two values": (_reshape_scale("F32", [2]), "must be [] or [1]"),
    "leading zero in a shard index": (_rename_shard(2, "shard_02.weight"), "is not a shard name"),
    "shard name with another suffix": (_rename_shard(2, "shard_2.bias"), "is not a shard name"),
    "two prefixes": (_second_table, "shards of two tables"),
}
