"""ingot.ngram_table_load / ngram_table_probe and `ingot ple load` on small
synthetic checkpoints (ple_files.py): shards spread over several files in
shuffled order load byte for byte as their concatenation, into numpy arrays
and torch tensors given or allocated; every broken set is refused with the
error that names it and the destination untouched."""

import subprocess
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

import ingot  # noqa: E402
from ingot_program import ingot_program  # noqa: E402
from ple_files import BROKEN, Checkpoint  # noqa: E402


def as_bytes(table):
    """The raw bytes of a numpy array or torch tensor."""
    if hasattr(table, "numpy"):  # torch: through uint8 (numpy has no float8)
        import torch

        return table.view(torch.uint8).numpy().tobytes()
    return table.view(np.uint8).tobytes()


@pytest.fixture
def seed(rng):
    return int(rng.integers(2**31))


@pytest.mark.parametrize("files", [1, 2, 4])
def test_good_set_equals_concatenation(tmp_path, seed, files):
    c = Checkpoint(seed=seed, shards=7, dim=24, files=files)
    paths = c.write(tmp_path)
    for how in (paths, [str(p) for p in reversed(paths)], tmp_path, str(tmp_path)):
        r = ingot.ngram_table_load(how, c.rows, c.dim)
        assert r.table.shape == (c.rows, c.dim)
        assert as_bytes(r.table) == c.table
        assert r.weight_scale == c.scale
    table, scale = ingot.ngram_table_load(paths, prefix="model.")  # shape from the probe
    assert as_bytes(table) == c.table and scale == c.scale
    assert ingot.ngram_table_probe(tmp_path) == (c.rows, c.dim, 7, c.scale)


def test_paths_iterator_and_file_named_twice(tmp_path, seed):
    c = Checkpoint(seed=seed, shards=3, dim=8, files=2)
    paths = c.write(tmp_path)
    table, _ = ingot.ngram_table_load(iter(paths))  # probed, then loaded: one pass over paths
    assert as_bytes(table) == c.table
    with pytest.raises(ingot.IngotError, match="are the same file"):
        ingot.ngram_table_probe([tmp_path, paths[0]])


def test_into_given_numpy_array(tmp_path, seed):
    c = Checkpoint(seed=seed, shards=3, dim=16, files=2)
    c.write(tmp_path)
    out = np.full((c.rows, c.dim), 0xA5, dtype=np.uint8)
    r = ingot.ngram_table_load(tmp_path, out=out)
    assert r.table is out and out.tobytes() == c.table
    with pytest.raises(ValueError, match="expected"):
        ingot.ngram_table_load(tmp_path, c.rows + 1, out=out)
    with pytest.raises(TypeError, match="dtype"):
        ingot.ngram_table_load(tmp_path, out=np.zeros((c.rows, c.dim), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        ingot.ngram_table_load(tmp_path, out=np.zeros((c.rows, 2 * c.dim), np.uint8)[:, ::2])
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ingot.ngram_table_load(tmp_path, out=out)


def test_torch_tensor(tmp_path, seed):
    torch = pytest.importorskip("torch")
    c = Checkpoint(seed=seed, shards=4, dim=8, files=3)
    c.write(tmp_path)
    table, scale = ingot.ngram_table_load(tmp_path, c.rows, c.dim, framework="torch")
    assert table.dtype == getattr(torch, "float8_e4m3fn", torch.uint8)
    assert table.is_pinned() == torch.cuda.is_available()
    assert as_bytes(table) == c.table and scale == c.scale
    out = torch.zeros((c.rows, c.dim), dtype=torch.uint8)
    assert ingot.ngram_table_load(tmp_path, out=out).table is out
    assert as_bytes(out) == c.table


@pytest.mark.skipif("not __import__('importlib').util.find_spec('torch')")
def test_pinned_tensor_on_a_gpu(tmp_path, seed):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for pinned memory")
    c = Checkpoint(seed=seed, shards=2, dim=8, files=1)
    c.write(tmp_path)
    out = torch.empty((c.rows, c.dim), dtype=torch.uint8, pin_memory=True)
    ingot.ngram_table_load(tmp_path, out=out)
    assert out.is_pinned() and as_bytes(out) == c.table


def test_progress(tmp_path, seed):
    c = Checkpoint(seed=seed, shards=5, dim=12, files=2)
    c.write(tmp_path)
    calls = []
    ingot.ngram_table_load(tmp_path, c.rows, c.dim, progress=lambda d, t: calls.append((d, t)))
    total = c.rows * c.dim
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)

    def fail(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ingot.ngram_table_load(tmp_path, c.rows, c.dim, progress=fail)


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_set_is_refused(tmp_path, seed, case):
    edit, phrase = BROKEN[case]
    c = Checkpoint(seed=seed, shards=6, dim=24, files=3)
    edit(c)
    c.write(tmp_path)
    out = np.full((c.rows, c.dim), 0xA5, dtype=np.uint8)
    with pytest.raises(ingot.IngotError) as e:
        ingot.ngram_table_load(tmp_path, out=out)
    assert e.value.status == ingot.Status.INVALID_ARGUMENT
    assert phrase in e.value.message and e.value.message.startswith("ingot_ngram_table_load: ")
    assert (out == 0xA5).all(), "the destination was written"


def test_rows_off_by_one(tmp_path, seed):
    c = Checkpoint(seed=seed, shards=3, dim=8, files=2)
    c.write(tmp_path)
    for delta, phrase in ((1, "(-1)"), (-1, "(+1)")):
        with pytest.raises(ingot.IngotError, match=f"expected_rows: {c.rows + delta},.*"
                           + phrase.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
            ingot.ngram_table_load(tmp_path, c.rows + delta, c.dim)


def test_truncated_file(tmp_path, seed):
    c = Checkpoint(seed=seed, shards=4, dim=8, files=2)
    paths = c.write(tmp_path)
    shard0 = c.find(c.shard_name(0))
    blob = paths[shard0.file].read_bytes()
    paths[shard0.file].write_bytes(blob[:-3])
    with pytest.raises(ingot.IngotError, match="truncated"):
        ingot.ngram_table_load(tmp_path, c.rows, c.dim)


def test_prefix_choice(tmp_path, seed):
    c = Checkpoint(seed=seed, shards=3, dim=8, files=2)
    BROKEN["two prefixes"][0](c)
    c.write(tmp_path)
    assert as_bytes(ingot.ngram_table_load(tmp_path, c.rows, c.dim, prefix="model.").table) == c.table
    with pytest.raises(ingot.IngotError, match="no tensor 'other.ngram_embedding.shard_0.weight'"):
        ingot.ngram_table_load(tmp_path, c.rows, c.dim, prefix="other.")


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        ingot.ngram_table_load([], 1, 1)
    with pytest.raises(ingot.IngotError, match="cannot open"):
        ingot.ngram_table_load(tmp_path / "missing.safetensors", 1, 1)
    with pytest.raises(ingot.IngotError, match="no \\*.safetensors file"):
        ingot.ngram_table_probe(tmp_path)
    with pytest.raises(ValueError, match="framework"):
        ingot.ngram_table_load(tmp_path, 1, 1, framework="jax")


# ---- `ingot ple load` ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli():
    return ingot_program()


def run(cli, *args):
    return subprocess.run([cli, "ple", "load", *map(str, args)], capture_output=True, text=True)


def test_cli_load_and_out(cli, tmp_path, seed):
    c = Checkpoint(seed=seed, shards=5, dim=20, files=3)
    c.write(tmp_path / "ckpt")
    r = run(cli, tmp_path / "ckpt", "--rows", c.rows, "--dim", c.dim, "--out", tmp_path / "t.bin")
    assert r.returncode == 0, r.stderr
    assert "GB/s" in r.stdout and f"weight_scale = {c.scale:.9g}" in r.stdout
    assert "loaded 100%" in r.stderr  # progress lines (not a terminal)
    assert (tmp_path / "t.bin").read_bytes() == c.table
    r = run(cli, tmp_path / "ckpt", "--rows", c.rows, "--dim", c.dim, "--dry-run")
    assert r.returncode == 0 and "nothing loaded" in r.stdout, r.stderr


def test_cli_failures(cli, tmp_path, seed):
    c = Checkpoint(seed=seed, shards=5, dim=20, files=2)
    BROKEN["missing shard"][0](c)
    c.write(tmp_path)
    r = run(cli, tmp_path, "--rows", c.rows, "--dim", c.dim)
    assert r.returncode == 1 and "shard_3 is missing" in r.stderr, r.stderr
    good = Checkpoint(seed=seed, shards=2, dim=8, files=1)
    good.write(tmp_path / "good")
    r = run(cli, tmp_path / "good", "--rows", good.rows + 1, "--dim", good.dim)
    assert r.returncode == 1 and f"but the shape given is {good.rows + 1} x" in r.stderr
    r = run(cli, tmp_path / "good", "--n", 3, "--heads-per-order", 2, "--base", 1000,
            "--dim", good.dim)
    assert r.returncode == 1 and "the shape given is 4062 x" in r.stderr, r.stderr
    assert run(cli, tmp_path / "good", "--dim", 8).returncode == 2
    assert run(cli, "--rows", 1, "--dim", 8).returncode == 2
    assert run(cli, tmp_path / "good", "--rows", 1, "--dim", 8, "--n", 3).returncode == 2
    assert run(cli, tmp_path / "good", "--rows", "x", "--dim", 8).returncode == 2
    assert run(cli, "--help").returncode == 0


def test_cli_host_table(cli, tmp_path, seed):
    c = Checkpoint(seed=seed, shards=4, dim=160, files=2, max_rows=1000)
    c.write(tmp_path / "ckpt")
    shape = ("--rows", c.rows, "--dim", c.dim)
    r = run(cli, tmp_path / "ckpt", *shape, "--host-table", "pinned", "--out", tmp_path / "t.bin")
    assert r.returncode == 0, r.stderr
    assert "host table: pinned, " in r.stdout and "loaded into the host table" in r.stdout
    assert "huge pages: " in r.stdout  # cudaHostAlloc memory and 4 KiB pages: 0
    assert (tmp_path / "t.bin").read_bytes() == c.table
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.is_file() and "[never]" not in thp.read_text():
        (tmp_path / "t.bin").unlink()
        r = run(cli, tmp_path / "ckpt", *shape, "--host-table", "thp", "--no-pin",
                "--out", tmp_path / "t.bin")
        assert r.returncode == 0, r.stderr
        assert "host table: thp, 2 MiB pages, " in r.stdout and "not registered" in r.stdout
        assert (tmp_path / "t.bin").read_bytes() == c.table
    r = run(cli, tmp_path / "ckpt", *shape, "--host-table", "auto", "-q")
    assert r.returncode == 0 and r.stdout == "", r.stderr
    free = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
    if free.is_file() and free.read_text().strip() == "0":
        r = run(cli, tmp_path / "ckpt", *shape, "--host-table", "hugetlb-2m")
        assert r.returncode == 1, r.stdout
        assert "--host-table hugetlb-2m: " in r.stderr
        assert "no 2 MiB huge pages reserved" in r.stderr and "loaded" not in r.stdout
    r = run(cli, tmp_path / "ckpt", *shape, "--host-table", "huge")
    assert r.returncode == 2 and "'huge' is not a strategy" in r.stderr
    assert run(cli, tmp_path / "ckpt", *shape, "--host-table").returncode == 2
    r = run(cli, tmp_path / "ckpt", *shape, "--host-table", "thp", "--dry-run")
    assert r.returncode == 0 and "host table" not in r.stdout  # nothing allocated
