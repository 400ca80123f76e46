"""Sampling side by side with FlashInfer's header-only CUDA sampling kernels,
in one process, on the same f32 logits, both timed as replays of a CUDA graph
of 20 calls (median over 50 replays / 20, gpu_timing.graph_time).

FlashInfer stays outside the repository. Its include/ directory is taken
from FLASHINFER_INCLUDE (the folder holding flashinfer/sampling.cuh), else
from an installed flashinfer / flashinfer-python package (its data/include);
with neither the script says so and exits 0. It compiles
bench/flashinfer_sampling.cu (ingot's harness: FlashInfer's entry points
behind plain C functions) with nvcc into a cache folder, not the source tree
($INGOT_BENCH_CACHE, else $XDG_CACHE_HOME/ingot, else ~/.cache/ingot; keyed
by the harness, the headers, nvcc's version and the architecture), loads it
with ctypes and times it beside ingot.

Rows (FlashInfer path -> ingot call), logits "stress" (torch.randn x 3, as
torch_sampling.py: almost every token needs its noise in ingot's draw) and
"LLM-like" (torch_sampling.llm_like: the nucleus lies in the top 64):

  softmax T=0.8   OnlineSoftmax, per-row temperature -> ingot.sampling_softmax;
                  B=1/4/16/64, V=151936/151936/201088/262144, stress logits.
  top-k 50 + top-p 0.9 (T = 1, per-row top_k / top_p arrays),
                  B=1, 16, 64 at V=151936 and B=64 at V=262144, both kinds
                  -> ingot.sample(top_k=, top_p=, seed=, position=):
      joint       OnlineSoftmax, then TopKTopPSamplingFromProb (the package's
                  filter_apply_order="joint").
      top_k_first RadixTopKMaskLogitsMultiCTA, OnlineSoftmax of the masked
                  logits, TopPSamplingFromProb (the package's default order
                  with a top_k tensor).
      fast        TopKDispatch (sorted, deterministic) into [B, 50], the
                  softmax and TopPSamplingFromProb over those 50, the ids
                  gathered (the package's default order for a scalar k <= 256
                  and V >= 65536).
  sample          SamplingFromLogits (Gumbel-max) -> ingot.sample(seed=,
                  position=), T = 1; B=1 V=151936 and B=64 V=262144, both kinds.

Where the package composes a torch.softmax, the harness uses FlashInfer's
own OnlineSoftmax (with PDL on compute capability >= 9, as its softmax does
by default). FlashInfer's "joint" order applies top-p to the full
distribution together with top-k; ingot (like the "top_k_first" paths)
applies it after the top-k renormalisation: the kept sets can differ, the
work is the same. Every FlashInfer draw is deterministic (the package
default) with its seed and offset in device arrays (FlashInfer 0.6.17 reads
their first element: one seed for the batch), ingot's with per-row seed and
position arrays: a graph replays the same draws on both sides.

Checks, once per row before timing: softmax probabilities of the two within
1e-4 relative (probabilities > 1e-6) and 1e-6 absolute; tokens in [0, V),
and inside the row's top 50 logits on the top-k rows. A failed check marks
the row FAILED and makes the exit status 1.

Usage: INGOT_LIBRARY=build/libingot.so PYTHONPATH=python \\
       [FLASHINFER_INCLUDE=.../include] python3 bench/flashinfer_sampling.py
       [--json FILE] [--filter TEXT] [--arch sm_90a] [--rebuild] [--build-only]
Prints a table (ratio = FlashInfer us / ingot us: > 1, ingot is faster).
--build-only compiles the harness and exits (no GPU needed).
"""

import argparse
import ctypes
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE / "flashinfer_sampling.cu"
WRITTEN_AGAINST = "0.6.17"  # the FlashInfer whose header signatures the harness calls
NAME = "flashinfer_sampling"

# fi_path in bench/flashinfer_sampling.cu
FI_SOFTMAX, FI_SAMPLE, FI_TOPK_TOPP_JOINT, FI_TOPK_TOPP_MASK, FI_TOPK_TOPP_FAST = range(5)
TOPK_PATHS = (("joint", FI_TOPK_TOPP_JOINT), ("top_k_first", FI_TOPK_TOPP_MASK),
              ("fast", FI_TOPK_TOPP_FAST))

SOFTMAX_SHAPES = ((1, 151936), (4, 151936), (16, 201088), (64, 262144))
TOPK_SHAPES = ((1, 151936), (16, 151936), (64, 151936), (64, 262144))
SAMPLE_SHAPES = ((1, 151936), (64, 262144))
TOP_K, TOP_P, SOFTMAX_T = 50, 0.9, 0.8


def skip(why):
    print(f"{NAME}: skipped: {why}")
    sys.exit(0)


def die(why):
    print(f"{NAME}: error: {why}", file=sys.stderr)
    sys.exit(1)


# ---- finding FlashInfer, nvcc, building the harness -----------------------------------------


def has_headers(inc):
    return (inc / "flashinfer" / "sampling.cuh").is_file()


def package_version():
    for dist in ("flashinfer-python", "flashinfer"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "unknown"


def find_flashinfer():
    """(include dir, version text, where from); skips when there is none."""
    env = os.environ.get("FLASHINFER_INCLUDE")
    if env:
        inc = pathlib.Path(env).expanduser().resolve()
        if not has_headers(inc):
            die(f"FLASHINFER_INCLUDE={env}: {inc}/flashinfer/sampling.cuh does not exist; point "
                f"it at the folder that holds flashinfer/ (a FlashInfer checkout's include/)")
        vfile = inc.parent / "version.txt"  # a FlashInfer checkout's, or one put beside it
        version = vfile.read_text().split()[0] if vfile.is_file() else "unknown"
        return inc, version, "FLASHINFER_INCLUDE"
    try:
        spec = importlib.util.find_spec("flashinfer")  # locates it without importing it
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        skip("FlashInfer not found: FLASHINFER_INCLUDE is not set and no flashinfer / "
             "flashinfer-python package is installed (set FLASHINFER_INCLUDE to a FlashInfer "
             "include/ folder, e.g. one carried in an ignored folder)")
    for loc in spec.submodule_search_locations:
        for inc in (pathlib.Path(loc) / "data" / "include", pathlib.Path(loc) / "include"):
            if has_headers(inc):
                return inc.resolve(), package_version(), f"the flashinfer package at {loc}"
    skip(f"the flashinfer package at {', '.join(spec.submodule_search_locations)} (version "
         f"{package_version()}) has no data/include/flashinfer/sampling.cuh; set "
         f"FLASHINFER_INCLUDE to a FlashInfer include/ folder")


def find_nvcc():
    candidates = [os.environ.get("NVCC"), shutil.which("nvcc")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(os.path.join(home, "bin", "nvcc"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def cache_dir():
    env = os.environ.get("INGOT_BENCH_CACHE")
    if env:
        return pathlib.Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "ingot"


def build(inc, version, nvcc, arch, rebuild):
    """Path of the harness library for these headers, nvcc and arch (built
    once into the cache folder; nvcc's output is kept in a .log beside it)."""
    try:
        nvcc_version = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                                      check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        die(f"{nvcc} --version failed: {e}")
    h = hashlib.sha256()
    for part in (SOURCE.read_bytes(), nvcc_version.encode(), arch.encode(), str(inc).encode()):
        h.update(part)
    for header in sorted((inc / "flashinfer").glob("*.[ch]*")):  # the top-level headers
        h.update(header.name.encode())
        h.update(header.read_bytes())
    out_dir = cache_dir() / NAME
    out = out_dir / f"{NAME}-{arch}-{h.hexdigest()[:16]}.so"
    if out.is_file() and not rebuild:
        return out
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        die(f"cannot create the build cache folder {out_dir}: {e} (set INGOT_BENCH_CACHE)")
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    log = out.with_suffix(".log")
    cmd = [nvcc, "-O3", f"-arch={arch}", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
           "-I", str(inc), str(SOURCE), "-o", str(tmp)]
    print(f"{NAME}: building the harness against FlashInfer {version} ({inc}), "
          f"{arch}: a few minutes, once", flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    log.write_text(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        head = "\n".join((r.stdout + r.stderr).strip().splitlines()[:20])  # the first errors
        die(f"nvcc failed (exit {r.returncode}) compiling {SOURCE.name} against FlashInfer "
            f"{version} at {inc}. The harness calls the signatures of FlashInfer "
            f"{WRITTEN_AGAINST}'s sampling.cuh / topk.cuh; a version whose entry points differ "
            f"needs the harness updated. Full log: {log}\n{head}")
    os.replace(tmp, out)
    return out


def load_harness(path):
    lib = ctypes.CDLL(str(path))
    lib.fi_setup.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_float, ctypes.c_float, ctypes.POINTER(ctypes.c_void_p)]
    lib.fi_setup.restype = ctypes.c_int
    lib.fi_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.fi_run.restype = ctypes.c_int
    lib.fi_free.argtypes = [ctypes.c_void_p]
    lib.fi_free.restype = None
    lib.fi_last_error.argtypes = []
    lib.fi_last_error.restype = ctypes.c_char_p
    return lib


class FlashInferPath:
    """One fi_setup state: call() enqueues one call on torch's current stream."""

    def __init__(self, lib, device, path, B, V, top_k=0, top_p=1.0, temperature=1.0):
        self.lib = lib
        handle = ctypes.c_void_p()
        if lib.fi_setup(device, path, B, V, top_k, top_p, temperature,
                        ctypes.byref(handle)) != 0:
            raise RuntimeError(lib.fi_last_error().decode())
        self.handle = handle

    def call(self, logits, out):
        import torch
        stream = torch.cuda.current_stream().cuda_stream
        if self.lib.fi_run(self.handle, logits.data_ptr(), out.data_ptr(), stream) != 0:
            raise RuntimeError(self.lib.fi_last_error().decode())

    def close(self):
        if self.handle:
            self.lib.fi_free(self.handle)
            self.handle = None


# ---- checks ---------------------------------------------------------------------------------


def check_probs(fi, ing):
    """'' when the two softmaxes agree, else what differs."""
    big = ing > 1e-6
    rel = ((fi - ing).abs() / ing.clamp_min(1e-30))[big].max().item() if big.any() else 0.0
    ab = (fi - ing).abs().max().item()
    if rel <= 1e-4 and ab <= 1e-6:
        return ""
    return f"probs differ: max rel {rel:.2e} (p > 1e-6), max abs {ab:.2e}"


def check_tokens(who, tokens, x, top_k):
    V = x.shape[1]
    t = tokens.long()
    bad = ((t < 0) | (t >= V)).nonzero()
    if len(bad):
        r = bad[0].item()
        return f"{who} token {t[r].item()} of row {r} is not in [0, {V})"
    if top_k:
        kept = (x.topk(top_k, dim=1).indices == t[:, None]).any(dim=1)
        if not kept.all():
            r = (~kept).nonzero()[0].item()
            return f"{who} token {t[r].item()} of row {r} is outside the row's top {top_k}"
    return ""


# ---- main -----------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the rows (and the versions) to this file")
    ap.add_argument("--filter", default="", help="only rows whose 'op case' contains this text")
    ap.add_argument("--arch", help="nvcc -arch (default: the GPU's, sm_90a on H100 / H200)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the cached harness")
    ap.add_argument("--build-only", action="store_true",
                    help="compile the harness and exit (no GPU needed; --arch, default sm_90a)")
    args = ap.parse_args()

    inc, fi_version, where = find_flashinfer()
    try:
        import torch
    except ImportError:
        torch = None
        if not args.build_only:
            skip("no torch (the script makes the logits and captures the graphs with PyTorch)")
    gpu = torch is not None and torch.cuda.is_available()
    if not gpu and not args.build_only:
        skip("no GPU: torch.cuda.is_available() is False")
    arch = args.arch
    if not arch:
        if gpu:
            major, minor = torch.cuda.get_device_capability()
            arch = f"sm_{major}{minor}" + ("a" if major >= 9 else "")
        else:
            arch = "sm_90a"
    nvcc = find_nvcc()
    if nvcc is None:
        if args.build_only:
            die("nvcc not found (looked at $NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
        skip("nvcc not found (looked at $NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); the "
             "FlashInfer harness is compiled at run time")
    so = build(inc, fi_version, nvcc, arch, args.rebuild)
    if args.build_only:
        print(f"{NAME}: built {so}")
        return

    try:
        import ingot
    except Exception as e:  # the binding reports a missing or wrong library by raising
        die(f"import ingot failed ({type(e).__name__}: {e}); run with "
            f"INGOT_LIBRARY=<CUDA build>/libingot.so PYTHONPATH=python")
    sys.path.insert(0, str(HERE))
    from gpu_timing import graph_time  # bench/gpu_timing.py
    from torch_sampling import llm_like  # the same LLM-like logits as torch_sampling.py
    try:
        lib = load_harness(so)
    except OSError as e:
        die(f"loading the harness {so} failed: {e} (--rebuild rebuilds it)")
    try:
        ctx = ingot.Context("cuda", torch.cuda.current_device())
    except Exception as e:
        die(f"ingot.Context('cuda') failed ({type(e).__name__}: {e}); INGOT_LIBRARY must be a "
            f"build with CUDA (e.g. build-gpu/libingot.so)")

    device = torch.cuda.get_device_name()
    print(f"device: {device}; FlashInfer {fi_version} from {where} ({inc}); "
          f"ingot {ingot.version()}; torch {torch.__version__}; harness {so.name}")
    rows, failed = [], False

    def wanted(op, case):
        return args.filter in f"{op} {case}"

    def add(op, case, path, fi_us, ing_us, *checks):
        nonlocal failed
        check = "; ".join(c for c in checks if c)
        failed |= bool(check)
        ratio = fi_us / ing_us if fi_us is not None else None
        rows.append(dict(op=op, case=case, flashinfer_path=path, flashinfer_us=fi_us,
                         ingot_us=ing_us, ratio=ratio, check=check or "ok"))

    def time_fi(path, x, out, **kw):
        """(output of one eager call, us per call, '') of a FlashInfer path, or
        (None, None, what failed): the row is then marked FAILED."""
        try:
            fi = FlashInferPath(lib, x.device.index, path, x.shape[0], x.shape[1], **kw)
        except RuntimeError as e:
            return None, None, f"FlashInfer: {e}"
        try:
            fi.call(x, out)
            torch.cuda.synchronize()
            first = out.clone()
            us = graph_time(lambda: fi.call(x, out))
            torch.cuda.synchronize()
        except RuntimeError as e:  # a failed launch, eager or while captured
            return None, None, f"FlashInfer: {e}"
        finally:
            fi.close()
        return first, us, ""

    torch.manual_seed(0)
    # ---- softmax
    for B, V in SOFTMAX_SHAPES:
        op, case = f"softmax T={SOFTMAX_T}", f"B={B} V={V} f32 stress"
        if not wanted(op, case):
            continue
        x = torch.randn(B, V, device="cuda") * 3
        t = torch.full((B,), SOFTMAX_T, device="cuda")
        fi_probs, ing_probs = torch.empty_like(x), torch.empty_like(x)
        ws = torch.empty(ingot.sampling_softmax_workspace_size(B, V, ctx=ctx), dtype=torch.uint8,
                         device="cuda")

        def ing():
            ingot.sampling_softmax(x, temperature=t, probs=ing_probs, workspace=ws, ctx=ctx)

        fi_first, fi_us, fi_error = time_fi(FI_SOFTMAX, x, fi_probs, temperature=SOFTMAX_T)
        ing()
        torch.cuda.synchronize()
        check = check_probs(fi_first, ing_probs) if fi_first is not None else ""
        add(op, case, "OnlineSoftmax", fi_us, graph_time(ing), fi_error, check)

    # ---- samplers
    def sampler_rows(op, shapes, paths, top_k):
        for B, V in shapes:
            for kind in ("stress", "LLM-like"):
                case = f"B={B} V={V} f32 {kind}"
                if not wanted(op, case):
                    continue
                x = torch.randn(B, V, device="cuda") * 3 if kind == "stress" else llm_like(B, V)
                seed = torch.arange(B, dtype=torch.int64, device="cuda")
                pos = torch.zeros(B, dtype=torch.int64, device="cuda")
                k = torch.full((B,), top_k, dtype=torch.int32, device="cuda") if top_k else None
                p = torch.full((B,), TOP_P, device="cuda") if top_k else None
                ing_tokens = torch.empty(B, dtype=torch.int32, device="cuda")
                fi_tokens = torch.empty(B, dtype=torch.int32, device="cuda")
                ws = torch.empty(ingot.sample_workspace_size(B, V, ctx=ctx), dtype=torch.uint8,
                                 device="cuda")

                def ing():
                    ingot.sample(x, top_k=k, top_p=p, seed=seed, position=pos, tokens=ing_tokens,
                                 workspace=ws, ctx=ctx)

                ing()
                torch.cuda.synchronize()
                ing_check = check_tokens("ingot", ing_tokens, x, top_k)
                ing_us = graph_time(ing)
                for name, path in paths:
                    kw = dict(top_k=top_k, top_p=TOP_P) if top_k else {}
                    fi_first, fi_us, fi_error = time_fi(path, x, fi_tokens, **kw)
                    fi_check = (check_tokens("FlashInfer", fi_first, x, top_k)
                                if fi_first is not None else "")
                    add(op, case, name, fi_us, ing_us, ing_check, fi_error, fi_check)

    sampler_rows(f"top-k {TOP_K} + top-p {TOP_P}", TOPK_SHAPES, TOPK_PATHS, TOP_K)
    sampler_rows("sample (T = 1)", SAMPLE_SHAPES, (("SamplingFromLogits", FI_SAMPLE),), 0)

    print(f"{'op':24} {'case':30} {'FlashInfer path':20} {'FI us':>9} {'ingot us':>9} "
          f"{'ratio':>6}  check")
    for r in rows:
        fi_us = f"{r['flashinfer_us']:9.2f}" if r["flashinfer_us"] is not None else f"{'-':>9}"
        ratio = f"{r['ratio']:6.2f}" if r["ratio"] is not None else f"{'-':>6}"
        check = "ok" if r["check"] == "ok" else "FAILED: " + r["check"]
        print(f"{r['op']:24} {r['case']:30} {r['flashinfer_path']:20} {fi_us} "
              f"{r['ingot_us']:9.2f} {ratio}  {check}")
    print("ratio = FlashInfer us / ingot us (> 1: ingot is faster); CUDA-graph replays, "
          "median of 50 replays of 20 calls")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=device, flashinfer_version=fi_version,
                           flashinfer_include=str(inc), ingot_version=ingot.version(),
                           torch_version=torch.__version__, rows=rows), f, indent=1)
    ctx.close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
