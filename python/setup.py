"""Build step of the ingot Python package (metadata: pyproject.toml).

The package carries libingot.so as ingot/lib/libingot.so, so the wheel is
platform specific (py3-none-<platform>: ctypes only, no Python ABI). The
library comes from a cmake tree of the repository this folder sits in:

1. INGOT_BUILD_DIR=<dir>: that tree (configured here when it has no
   CMakeCache.txt yet, or when INGOT_CMAKE_ARGS is set);
2. else the repository's build/ (the Makefile's), when it is a configured
   tree of this repository without sanitizers: `cmake --build build --target
   ingot` brings it up to date (nothing to do when it is) and its library is
   bundled;
3. else a fresh tree in a temporary folder (library only: no tests, no
   tools), removed afterwards.

cmake's output is not captured (`pip install -v ./python` shows it). Nothing
is written into the source tree: setuptools' build and egg-info folders are
in a temporary folder too. When the library cannot be built (no cmake, a
failed build, not in the repository, e.g. a wheel built from an sdist) the
build fails, unless INGOT_SKIP_CMAKE=1 asks for a pure package without the
library, which then looks for it at import time (see ingot/_lib.py).

Environment:
  INGOT_SKIP_CMAKE=1    no library: a pure (py3-none-any) package
  INGOT_BUILD_DIR=dir   the cmake tree to build the library in (and keep);
                        an absolute path
  INGOT_CMAKE_ARGS=...  extra arguments for the cmake configure step (a tree
                        other than build/: INGOT_BUILD_DIR, else a temporary one)
"""

import atexit
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LIBRARY = "libingot.so"
BUNDLED = Path("ingot") / "lib" / LIBRARY  # inside the package's build folder

# setuptools' working folders (build/, ingot.egg-info/) out of the source tree.
SCRATCH = Path(tempfile.mkdtemp(prefix="ingot-setup-"))
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)


def _flag(name):
    return os.environ.get(name, "") not in ("", "0")


def _say(text):
    print(f"ingot: {text}", flush=True)


def _in_repository():
    return (ROOT / "CMakeLists.txt").is_file() and (ROOT / "include" / "ingot" / "ingot.h").is_file()


SKIP = _flag("INGOT_SKIP_CMAKE")


class LibraryError(RuntimeError):
    pass


def _cache_entry(cache, name):
    """The value of NAME in a CMakeCache.txt, or None."""
    for line in cache.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.split(":")[0] == name:
            return value
    return None


def _foreign(tree):
    """None when TREE is a configured cmake tree of this repository, else why not."""
    cache = tree / "CMakeCache.txt"
    if not cache.is_file():
        return f"{tree} is not a configured cmake tree"
    home = _cache_entry(cache, "CMAKE_HOME_DIRECTORY")
    if home is None or Path(home).resolve() != ROOT:
        return f"{tree} is a cmake tree of {home}, not of {ROOT}"
    return None


def _reusable(tree):
    """None when the library of TREE may be bundled unasked, else why not."""
    why = _foreign(tree)
    if why is None and _cache_entry(tree / "CMakeCache.txt", "INGOT_SANITIZE"):
        why = f"{tree} is built with sanitizers (INGOT_SANITIZE)"
    return why


def _run(step, command):
    _say(" ".join(shlex.quote(str(c)) for c in command))
    try:
        subprocess.run([str(c) for c in command], check=True)
    except OSError as e:
        raise LibraryError(f"the cmake {step} step could not run: {e}") from None
    except subprocess.CalledProcessError as e:
        raise LibraryError(f"the cmake {step} step failed (exit status {e.returncode}; "
                           "its output is above)") from None


def build_library(scratch):
    """Brings libingot.so up to date in a cmake tree; returns its path."""
    if not _in_repository():
        raise LibraryError(
            f"{ROOT} is not the ingot repository, so libingot.so cannot be built (a wheel "
            "built from an sdist?). Build the wheel from the repository "
            "(pip wheel ./python, python -m build --wheel ./python), or set "
            "INGOT_SKIP_CMAKE=1 for a package without the library")
    cmake = shutil.which("cmake")
    if cmake is None:
        raise LibraryError("cmake is not on PATH; install it (and a C compiler), or set "
                           "INGOT_SKIP_CMAKE=1 for a package without the library")
    extra = shlex.split(os.environ.get("INGOT_CMAKE_ARGS", ""))
    configure = bool(extra)
    if os.environ.get("INGOT_BUILD_DIR"):
        tree = Path(os.environ["INGOT_BUILD_DIR"])
        if not tree.is_absolute():  # pip runs this in python/, not where it was called
            raise LibraryError(f"INGOT_BUILD_DIR={tree} must be an absolute path")
        tree = tree.resolve()
        if not (tree / "CMakeCache.txt").is_file():
            configure = True
        elif _foreign(tree) is not None:
            raise LibraryError(f"INGOT_BUILD_DIR: {_foreign(tree)}")
        _say(f"libingot.so from INGOT_BUILD_DIR={tree}")
    else:
        tree = ROOT / "build"
        why = _reusable(tree) if not extra else "INGOT_CMAKE_ARGS is set"
        if why is None:
            _say(f"libingot.so from the repository's build tree {tree}")
        else:
            if tree.exists():
                _say(f"not using {tree}: {why}")
            tree = scratch / "libingot"
            configure = True
            _say(f"libingot.so built in a temporary tree {tree}")
    if configure:
        command = [cmake, "-S", ROOT, "-B", tree]
        if not (tree / "CMakeCache.txt").is_file():
            command += ["-DCMAKE_BUILD_TYPE=Release", "-DINGOT_BUILD_TESTS=OFF",
                        "-DINGOT_BUILD_TOOLS=OFF"]
            if shutil.which("ninja"):
                command += ["-G", "Ninja"]
        _run("configure", command + extra)
    built = tree / LIBRARY
    before = built.resolve().stat().st_mtime_ns if built.exists() else None
    command = [cmake, "--build", tree, "--target", "ingot"]
    if "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
        command += ["--parallel", str(os.cpu_count() or 2)]
    _run("build", command)
    if not built.is_file():
        raise LibraryError(f"the build left no {built}")
    after = built.resolve().stat().st_mtime_ns
    _say(f"{built} {'was up to date' if before == after else 'built'}; bundling it")
    return built


class BuildPy(build_py):
    """Copies the package's Python files, then libingot.so (into the build
    folder only: the source tree is left as it is)."""

    def run(self):
        super().run()
        if SKIP:
            _say("INGOT_SKIP_CMAKE is set: no libingot.so in the package; it is looked "
                 "for at import time (INGOT_LIBRARY, the system)")
            return
        try:
            built = build_library(Path(self.get_finalized_command("build").build_temp))
        except LibraryError as e:
            sys.exit(f"ingot: {e}")
        target = Path(self.build_lib) / BUNDLED
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)  # follows the symlinks to the library file
        os.chmod(target, 0o755)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if not SKIP:
            outputs.append(str(Path(self.build_lib) / BUNDLED))
        return outputs


class BinaryDistribution(Distribution):
    """With the library the package is platform specific: a platlib
    install, Root-Is-Purelib: false."""

    def has_ext_modules(self):
        return not SKIP


cmdclass = {"build_py": BuildPy}

try:  # setuptools >= 70.1
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

if bdist_wheel is not None:

    class BdistWheel(bdist_wheel):
        """py3-none-<platform> with the library (no Python ABI: ctypes only),
        py3-none-any without it."""

        def get_tag(self):
            if self.root_is_pure:
                return super().get_tag()
            return ("py3", "none", super().get_tag()[2])

    cmdclass["bdist_wheel"] = BdistWheel

setup(
    packages=["ingot"],
    include_package_data=False,
    distclass=BinaryDistribution,
    cmdclass=cmdclass,
    options={
        "build": {"build_base": str(SCRATCH / "build")},
        "egg_info": {"egg_base": str(SCRATCH)},
    },
)
