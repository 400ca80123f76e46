"""ingot.HostTable (ingot_host_table_*) on the machine's own memory: the
strategies it has (THP and pinned on Linux; the hugetlb pools refused by
name when they are empty), views that read and write the table and keep it
alive past close(), and a synthetic checkpoint (ple_files.py) loaded into a
host table byte for byte as into a plain numpy array. On a CUDA context the
same calls also register the memory with the GPU; that is not run here."""

import gc
import sys
import weakref
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

import ingot  # noqa: E402
from ple_files import Checkpoint  # noqa: E402

MIB = 1 << 20
POOLS = {"hugetlb-1g": ("hugepages-1048576kB", "1 GiB"), "hugetlb-2m": ("hugepages-2048kB", "2 MiB")}


def thp_mode():
    """The bracketed word of the THP setting ("madvise"), or None."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")] if "[" in text else None


def pool_pages(strategy):
    """(free + overcommit pages) of a hugetlb pool, or None without one."""
    folder = Path("/sys/kernel/mm/hugepages") / POOLS[strategy][0]
    try:
        return sum(int((folder / f).read_text()) for f in ("free_hugepages",
                                                            "nr_overcommit_hugepages"))
    except OSError:
        return None


needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


@pytest.fixture
def cpu():
    with ingot.Context("cpu") as c:
        yield c


def test_pinned_on_a_cpu_context(cpu):
    with ingot.HostTable.create(5000, "pinned", ctx=cpu) as t:
        assert t.strategy == "pinned" and t.nbytes == 5000
        assert t.page_bytes >= 4096 and t.mapped_bytes % t.page_bytes == 0
        assert t.mapped_bytes >= 5000 and t.data_ptr % t.page_bytes == 0
        assert "pinned" in repr(t)
    assert t.closed and repr(t) == "ingot.HostTable(closed)"
    with pytest.raises(ValueError, match="closed"):
        t.numpy()
    t.close()  # idempotent


@needs_linux
def test_thp(cpu):
    if thp_mode() in (None, "never"):
        with pytest.raises(ingot.IngotError) as e:
            ingot.HostTable.create(3 * MIB, "thp", ctx=cpu)
        assert e.value.status == ingot.Status.NOT_SUPPORTED and "transparent" in e.value.message
        return
    with ingot.HostTable.create(3 * MIB, ingot.HOST_TABLE_THP, ctx=cpu) as t:
        assert t.strategy == "thp" and t.page_bytes == 2 * MIB
        assert t.mapped_bytes == 4 * MIB and t.data_ptr % (2 * MIB) == 0
        assert t.huge_page_bytes == 0  # a CPU context: nothing touched yet
        t.numpy()[:] = 1  # a CPU context: the pages come on first touch
        assert 0 <= t.huge_page_bytes <= t.mapped_bytes  # the kernel may give 4 KiB pages


@needs_linux
@pytest.mark.parametrize("strategy", list(POOLS))
def test_empty_hugetlb_pool_is_refused_by_name(cpu, strategy):
    pages = pool_pages(strategy)
    if pages:
        pytest.skip(f"the {strategy} pool has {pages} pages: nothing to refuse")
    with pytest.raises(ingot.IngotError) as e:
        ingot.HostTable.create(3 * MIB, strategy, ctx=cpu)
    label = POOLS[strategy][1]
    if pages is None:  # no such pool on this kernel or CPU
        assert e.value.status == ingot.Status.NOT_SUPPORTED
        assert f"no {label} huge pages" in e.value.message
    else:
        assert e.value.status == ingot.Status.ALLOC_FAILED
        assert f"strategy {strategy}: no {label} huge pages reserved" in e.value.message
        assert "nr_hugepages" in e.value.message


@needs_linux
def test_several_strategies_fall_through(cpu):
    if any(pool_pages(s) for s in POOLS):
        pytest.skip("a hugetlb pool has pages")
    with ingot.HostTable.create(3 * MIB, ["hugetlb-1g", "hugetlb-2m", "pinned"], ctx=cpu) as t:
        assert t.strategy == "pinned"
    with ingot.HostTable.create(3 * MIB, ctx=cpu) as t:  # auto: the first that works
        assert t.strategy == ("pinned" if thp_mode() in (None, "never") else "thp")
    with pytest.raises(ingot.IngotError, match="no allowed strategy worked: hugetlb-1g: .*; "
                                               "hugetlb-2m: "):
        ingot.HostTable.create(3 * MIB, ingot.HOST_TABLE_HUGETLB_1G | ingot.HOST_TABLE_HUGETLB_2M,
                               ctx=cpu)


def test_bad_arguments(cpu):
    with pytest.raises(ingot.IngotError, match="bytes: 0, must be >= 1") as e:
        ingot.HostTable.create(0, "pinned", ctx=cpu)
    assert e.value.status == ingot.Status.INVALID_ARGUMENT
    with pytest.raises(ingot.IngotError, match="strategies: 0x10"):
        ingot.HostTable.create(10, 1 << 4, ctx=cpu)
    with pytest.raises(ValueError, match="strategies: 'huge'"):
        ingot.HostTable.create(10, "huge", ctx=cpu)
    with pytest.raises(ValueError, match="strategies: -1"):
        ingot.HostTable.create(10, -1, ctx=cpu)
    with pytest.raises(ValueError, match="strategies: empty"):
        ingot.HostTable.create(10, [], ctx=cpu)
    with pytest.raises(TypeError, match="strategies: 2.5"):
        ingot.HostTable.create(10, 2.5, ctx=cpu)
    with ingot.HostTable.create(10, "pinned", ctx=cpu) as t:
        with pytest.raises(ValueError, match="row_bytes: 3 does not divide"):
            t.numpy(row_bytes=3)
        with pytest.raises(ValueError, match="rows, row_bytes: 6 x 2 bytes do not fit"):
            t.numpy(6, 2)
        with pytest.raises(ValueError, match="rows: 2, given without row_bytes"):
            t.numpy(2)
    assert ingot.host_table_strategy_name(ingot.HOST_TABLE_THP) == "thp"
    assert ingot.host_table_strategy_name(0) == "auto"


def test_views_read_and_write(cpu, rng):
    with ingot.HostTable.create(4096 + 17, "pinned", ctx=cpu) as t:
        flat = t.numpy()
        assert flat.shape == (t.nbytes,) and flat.dtype == np.uint8 and flat.flags.writeable
        assert flat.ctypes.data == t.data_ptr
        data = rng.integers(0, 256, t.nbytes, dtype=np.uint8)
        flat[:] = data
        rows = t.numpy(row_bytes=9)
        assert rows.shape == (457, 9)
        assert rows.tobytes() == data.tobytes()
        head = t.numpy(100, 40)
        assert head.shape == (100, 40) and head.tobytes() == data[:4000].tobytes()
        head[3, 5] = 0x5A ^ data[125]
        assert flat[125] == 0x5A ^ data[125]


def test_torch_view(cpu, rng):
    torch = pytest.importorskip("torch")
    with ingot.HostTable.create(64 * 24, "pinned", ctx=cpu) as t:
        flat = t.numpy()
        flat[:] = rng.integers(0, 256, t.nbytes, dtype=np.uint8)
        x = t.torch(64, 24)
        assert x.shape == (64, 24) and x.dtype == torch.uint8 and x.device.type == "cpu"
        assert x.data_ptr() == t.data_ptr
        assert x.numpy().tobytes() == flat.tobytes()
        x[0, 0] = 0xC3
        assert flat[0] == 0xC3
        if hasattr(torch, "float8_e4m3fn"):
            f8 = t.torch(row_bytes=24, dtype=torch.float8_e4m3fn)
            assert f8.dtype == torch.float8_e4m3fn and f8.view(torch.uint8)[0, 0] == 0xC3
        with pytest.raises(TypeError, match="dtype: torch.float32"):
            t.torch(dtype=torch.float32)


def test_views_keep_the_memory_alive(cpu):
    t = ingot.HostTable.create(8192, "pinned", ctx=cpu)
    memory = weakref.ref(t._memory)
    view = t.numpy(row_bytes=64)[10:20]  # a slice still holds the table's memory
    view[:] = 9
    t.close()
    gc.collect()
    assert memory() is not None, "freed under a live view"
    assert (view == 9).all()
    view[0, 0] = 1  # still writable
    del view
    gc.collect()
    assert memory() is None, "not freed once the last view went"

    t = ingot.HostTable.create(8192, "pinned", ctx=cpu)
    memory = weakref.ref(t._memory)
    del t  # collected without close()
    gc.collect()
    assert memory() is None


def test_checkpoint_into_a_host_table(cpu, tmp_path, rng):
    c = Checkpoint(seed=int(rng.integers(2**31)), shards=6, dim=24, files=3)
    c.write(tmp_path)
    plain, scale = ingot.ngram_table_load(tmp_path, c.rows, c.dim)
    plain = plain.view(np.uint8)
    assert plain.tobytes() == c.table
    # the HostTable itself: loaded from its first byte, returned as a [R, D] view
    with ingot.HostTable.create(c.rows * c.dim + 5, "pinned", ctx=cpu) as t:
        t.numpy()[:] = 0xA5
        r = ingot.ngram_table_load(tmp_path, out=t)
        assert r.weight_scale == scale
        assert r.table.shape == (c.rows, c.dim) and r.table.ctypes.data == t.data_ptr
        assert r.table.view(np.uint8).tobytes() == plain.tobytes()
        assert t.numpy()[-5:].tolist() == [0xA5] * 5  # past the table: untouched
        # a view of it, given as out
        view = t.numpy(c.rows, c.dim)
        view[:] = 0
        assert ingot.ngram_table_load(tmp_path, c.rows, c.dim, out=view).table is view
        assert view.tobytes() == plain.tobytes()
        with pytest.raises(ValueError, match="out: a HostTable of"):
            ingot.ngram_table_load(tmp_path, c.rows + 1, c.dim, out=t)
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with ingot.HostTable.create(c.rows * c.dim, "pinned", ctx=cpu) as t:
        table, _ = ingot.ngram_table_load(tmp_path, out=t, framework="torch")
        assert isinstance(table, torch.Tensor) and table.data_ptr() == t.data_ptr
        assert table.view(torch.uint8).numpy().tobytes() == plain.tobytes()


@needs_linux
def test_checkpoint_into_thp(cpu, tmp_path, rng):
    if thp_mode() in (None, "never"):
        pytest.skip("transparent huge pages are off")
    c = Checkpoint(seed=int(rng.integers(2**31)), shards=4, dim=160, files=2, max_rows=3000)
    c.write(tmp_path)
    with ingot.HostTable.create(c.rows * c.dim, "thp", ctx=cpu) as t:
        table, _ = ingot.ngram_table_load(tmp_path, c.rows, c.dim, out=t)
        assert table.view(np.uint8).tobytes() == c.table
        assert 0 <= t.huge_page_bytes <= t.mapped_bytes


def test_default_context():
    with ingot.HostTable.create(100, "pinned") as t:
        assert t.ctx.backend == ("cuda" if ingot.backend_available("cuda") else "cpu")


def test_gather_from_a_registered_table_on_a_gpu(rng):
    """The GPU reads the host table at its host address (CUDA only)."""
    torch = pytest.importorskip("torch")
    if not (ingot.backend_available("cuda") and torch.cuda.is_available()):
        pytest.skip("no CUDA device")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    R, D = 4096, 160
    with ingot.HostTable.create(R * D, ["thp", "pinned"], ctx="cuda") as t:
        data = rng.integers(0, 256, (R, D), dtype=np.uint8)
        data[(data & 0x7F) == 0x7F] = 0  # no NaN bytes: compare values exactly
        t.numpy(R, D)[:] = data
        table = t.torch(R, D, dtype=torch.float8_e4m3fn)
        assert table.is_pinned()  # registered: the ops take it on a CUDA context
        rows = torch.from_numpy(rng.integers(0, R, (64, 4))).cuda()
        got = ingot.ngram_gather(rows, table, 0.5)
        torch.cuda.synchronize()
        ref = ingot.ngram_gather(rows.cpu(), t.torch(R, D, dtype=torch.float8_e4m3fn), 0.5)
        assert torch.equal(got.cpu().view(torch.int16), ref.view(torch.int16))
