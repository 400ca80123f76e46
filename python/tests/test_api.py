"""The binding itself: loading, version, statuses, contexts, struct layouts."""

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ingot

PACKAGE_DIR = Path(ingot.__file__).resolve().parent
INCLUDE_DIR = Path(__file__).resolve().parents[2] / "include"


def run_python(code, env=None, cwd=None):
    full_env = {k: v for k, v in os.environ.items() if k != "INGOT_LIBRARY"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, cwd=cwd,
                          capture_output=True, text=True)


def test_version_matches_package():
    number = ingot.version_number()
    assert number // 10000 == 0 and number // 100 % 100 == 1
    assert ingot.version() == f"{number // 10000}.{number // 100 % 100}.{number % 100}"
    assert ingot.__version__.split(".")[:2] == ingot.version().split(".")[:2]
    assert Path(ingot.library_path).is_file() or "/" not in ingot.library_path


def test_status_texts():
    assert ingot.status_name(ingot.Status.INVALID_ARGUMENT) == "INGOT_STATUS_INVALID_ARGUMENT"
    assert ingot.status_string(0)
    for s in ingot.Status:
        assert ingot.status_name(s) == "INGOT_STATUS_" + s.name
    err = ingot.IngotError(1, "op: arg: bad")
    assert err.status is ingot.Status.INVALID_ARGUMENT and err.message == "op: arg: bad"
    assert "op: arg: bad" in str(err) and "INVALID_ARGUMENT" in str(err)


def test_dtypes():
    assert str(ingot.DType.BF16) == "bf16" and ingot.DType.F8_E4M3.itemsize == 1
    assert ingot.DType.parse("f8_e4m3") is ingot.DType.F8_E4M3
    assert ingot.DType.parse("I64") is ingot.DType.I64
    with pytest.raises(ValueError):
        ingot.DType.parse("f64")


def test_describe_numpy():
    np = pytest.importorskip("numpy")
    from ingot._tensor import describe

    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, 1:5]  # a strided view
    d = describe(x, "x")
    assert d.shape == (4, 4) and list(d.tensor.stride[:2]) == [6, 1]
    assert d.tensor.dtype == int(ingot.DType.F32) and d.tensor.data == x.ctypes.data
    for _ in range(2):  # the second time from the dtype cache
        with pytest.raises(TypeError, match="x: dtype >f4 has no ingot equivalent"):
            describe(np.zeros(3, dtype=">f4"), "x")
        with pytest.raises(TypeError, match="x: dtype <f8 has no ingot equivalent"):
            describe(np.zeros(3), "x")
    raw = np.zeros(16, dtype=np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw[:12].view(np.int32), shape=(3,), strides=(2,))
    with pytest.raises(ValueError, match=r"y: byte strides \(2,\) are not multiples of the "
                                         "element size 4"):
        describe(odd, "y")
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros(3, dtype=np.float32)
        ro.flags.writeable = False
        describe(ro, "z", writable=True)


def test_backend_available():
    assert ingot.backend_available("cpu") is True
    assert isinstance(ingot.backend_available("cuda"), bool)
    with pytest.raises(ValueError, match="backend"):
        ingot.backend_available("tpu")


def test_context_lifecycle():
    with ingot.Context("cpu") as ctx:
        assert ctx.backend == "cpu" and ctx.device == 0 and not ctx.closed
        assert isinstance(ctx.flags, int)
        ctx.check_device_errors()  # always fine on the CPU
        assert "cpu" in repr(ctx)
    assert ctx.closed
    ctx.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        ctx.flags
    ingot.Context().__del__()


def test_context_errors_are_context_free():
    with pytest.raises(ingot.IngotError, match="device") as e:
        ingot.Context("cpu", device=1)
    assert e.value.status == ingot.Status.INVALID_ARGUMENT
    assert "ingot_context_create" in e.value.message
    with pytest.raises(ValueError, match="backend"):
        ingot.Context("gpu")


@pytest.mark.skipif(ingot.backend_available("cuda"), reason="a CUDA device is present")
def test_cuda_context_without_device():
    with pytest.raises(ingot.IngotError) as e:
        ingot.Context("cuda")
    assert e.value.status == ingot.Status.NOT_SUPPORTED


def test_force_reference_flag(monkeypatch):
    monkeypatch.setenv("INGOT_FORCE_REFERENCE", "1")
    with ingot.Context() as ctx:
        assert ctx.force_reference and ctx.flags & ingot.FLAG_FORCE_REFERENCE
    monkeypatch.setenv("INGOT_FORCE_REFERENCE", "0")
    with ingot.Context() as ctx:
        assert not ctx.force_reference


def test_cpu_context_rejects_a_stream():
    np = pytest.importorskip("numpy")
    cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=7)
    ids, cu, context = np.zeros(2, np.int32), np.array([0, 2], np.int32), np.zeros((1, 2), np.int32)
    with ingot.Context() as ctx, pytest.raises(ingot.IngotError, match="stream"):
        ingot.ngram_row_ids(ctx, cfg, ids, cu, context, stream=0x1234)


def _c_compiler():
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None or not (INCLUDE_DIR / "ingot" / "ingot.h").is_file():
        pytest.skip("needs a C compiler and the repository's include/")
    return cc


def test_struct_layouts_match_the_header(tmp_path):
    cc = _c_compiler()
    src = tmp_path / "layout.c"
    src.write_text(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"ingot/ingot.h\"\n"
        "#define F(T, m) printf(#T \".\" #m \" %zu %zu\\n\", offsetof(T, m), sizeof(((T *)0)->m));\n"
        "int main(void) {\n"
        "  printf(\"ingot_tensor %zu\\n\", sizeof(ingot_tensor));\n"
        "  F(ingot_tensor, data) F(ingot_tensor, dtype) F(ingot_tensor, ndim)\n"
        "  F(ingot_tensor, shape) F(ingot_tensor, stride)\n"
        "  printf(\"ingot_ngram_config %zu\\n\", sizeof(ingot_ngram_config));\n"
        "  F(ingot_ngram_config, n) F(ingot_ngram_config, heads_per_order)\n"
        "  F(ingot_ngram_config, num_heads) F(ingot_ngram_config, reserved)\n"
        "  F(ingot_ngram_config, boundary_token) F(ingot_ngram_config, multipliers)\n"
        "  F(ingot_ngram_config, primes) F(ingot_ngram_config, offsets)\n"
        "  return 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", str(INCLUDE_DIR), str(src), "-o", str(exe)], check=True)
    expected = {}
    for line in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines():
        name, *numbers = line.split()
        expected[name] = tuple(int(v) for v in numbers)
    for struct in (ingot.ingot_tensor, ingot.ingot_ngram_config):
        assert expected[struct.__name__] == (ctypes.sizeof(struct),)
        for field, _ in struct._fields_:
            member = getattr(struct, field)
            assert expected[f"{struct.__name__}.{field}"] == (member.offset, member.size), field


def test_imports_with_the_standard_library_only():
    code = ("import sys\n"
            "for m in ('numpy', 'torch', 'ml_dtypes'): sys.modules[m] = None\n"
            "import ingot\n"
            "cfg = ingot.NgramConfig.derive(512, 3, 2, 1000, boundary_token=7)\n"
            "with ingot.Context() as ctx: pass\n"
            "assert ingot.default_context('cpu') is ingot.default_context()\n"
            "print(cfg.primes)\n")
    r = run_python(code, env={"PYTHONPATH": str(PACKAGE_DIR.parent),
                              "INGOT_LIBRARY": str(Path(ingot.library_path).resolve())})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(1009, 1013, 1019, 1021)"


def test_bad_INGOT_LIBRARY_is_reported():
    r = run_python("import ingot", env={"PYTHONPATH": str(PACKAGE_DIR.parent),
                                        "INGOT_LIBRARY": "/nonexistent/libingot.so"})
    assert r.returncode != 0
    assert "INGOT_LIBRARY" in r.stderr and "/nonexistent/libingot.so" in r.stderr


def test_INGOT_LIBRARY_is_used():
    r = run_python("import ingot; print(ingot.library_path)",
                   env={"PYTHONPATH": str(PACKAGE_DIR.parent),
                        "INGOT_LIBRARY": str(Path(ingot.library_path).resolve())})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(Path(ingot.library_path).resolve())


def test_missing_library_lists_where_it_looked(tmp_path):
    shutil.copytree(PACKAGE_DIR, tmp_path / "pkg" / "ingot",
                    ignore=shutil.ignore_patterns("lib", "__pycache__"))
    r = run_python("import ingot", env={"PYTHONPATH": str(tmp_path / "pkg")}, cwd=tmp_path)
    if r.returncode == 0:
        pytest.skip('ctypes.util.find_library("ingot") finds an installed libingot')
    for place in ("INGOT_LIBRARY", str(tmp_path / "pkg" / "ingot" / "lib" / "libingot.so"),
                  str(tmp_path / "build" / "libingot.so"), "find_library"):
        assert place in r.stderr, place


# ---- default contexts ----------------------------------------------------------------------------


def test_default_context_is_one_per_device(monkeypatch):
    import threading

    monkeypatch.setattr(ingot._core, "_default_contexts", {})  # made afresh by this test
    barrier = threading.Barrier(8)
    got = []

    def first_use():
        barrier.wait()
        got.append(ingot.default_context("cpu"))

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(c is got[0] for c in got)
    ctx = got[0]
    assert ctx is ingot.default_context() is ingot.default_context(("cpu", 0))
    assert ctx.backend == "cpu" and "default" in repr(ctx)
    with ctx:
        pass
    ctx.close()  # a default context outlives every close
    assert not ctx.closed and ctx.flags == ingot.default_context().flags
    with pytest.raises(ValueError, match=r"^device: 'tpu', ingot runs on 'cpu' and 'cuda'"):
        ingot.default_context("tpu")
    with pytest.raises(TypeError, match=r"^device: 3, expected 'cpu', 'cuda'"):
        ingot.default_context(3)


def test_default_context_of_torch_devices():
    torch = pytest.importorskip("torch")
    assert ingot.default_context(torch.device("cpu")) is ingot.default_context("cpu")
    from ingot._core import device_key

    assert device_key(torch.device("cuda", 1)) == ("cuda", 1)
    assert device_key("cuda:2") == ("cuda", 2)


def test_threads_share_a_context_one_call_at_a_time():
    """Threads calling ops on one context each get their own results and
    their own error text (the library keeps one last-error text a context)."""
    np = pytest.importorskip("numpy")
    import threading

    x = np.random.default_rng(1).standard_normal((4, 500)).astype(np.float32)
    seeds = [np.arange(4, dtype=np.int64) + 10 * i for i in range(8)]
    want = [ingot.sample(x, temperature=1.0, seed=s) for s in seeds]
    problems = []

    def work(i):
        for _ in range(30):
            got = ingot.sample(x, temperature=1.0, seed=seeds[i])
            if not np.array_equal(got, want[i]):
                problems.append(f"thread {i}: tokens {got}, expected {want[i]}")
            name = ("top_p", "min_p")[i % 2]
            try:
                ingot.sample(x, **{name: 7.0})
                problems.append(f"thread {i}: no error for {name} = 7")
            except ingot.IngotError as e:
                if f"{name}: {name}[0] = 7" not in e.message:
                    problems.append(f"thread {i}: error text {e.message!r} for {name}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []
