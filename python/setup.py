"""Build step of the ingot Python package (metadata: pyproject.toml).

Before the package files are collected, libingot.so is built with cmake from
the repository this folder sits in and copied to ingot/lib/libingot.so,
unless a library is already there. When that is impossible (no cmake, not in
the repository, the build fails) the package is built without it and looks
for the library at import time (see ingot/_lib.py). Environment:
  INGOT_SKIP_CMAKE=1    do not build the library
  INGOT_CMAKE_ARGS=...  extra arguments for the cmake configure step
"""

import os
import shlex
import shutil
import subprocess
import warnings
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUNDLED = HERE / "ingot" / "lib" / "libingot.so"


def build_library():
    """Builds libingot.so into ingot/lib/; returns a reason on failure."""
    if os.environ.get("INGOT_SKIP_CMAKE", "") not in ("", "0"):
        return "INGOT_SKIP_CMAKE is set"
    if not (ROOT / "CMakeLists.txt").is_file() or not (ROOT / "include" / "ingot" / "ingot.h").is_file():
        return f"{ROOT} is not the ingot repository"
    cmake = shutil.which("cmake")
    if cmake is None:
        return "cmake is not on PATH"
    build_dir = HERE / "build" / "libingot"
    configure = [cmake, "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 "-DINGOT_BUILD_TESTS=OFF", "-DINGOT_BUILD_TOOLS=OFF"]
    if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    configure += shlex.split(os.environ.get("INGOT_CMAKE_ARGS", ""))
    try:
        subprocess.run(configure, check=True)
        subprocess.run([cmake, "--build", str(build_dir), "--target", "ingot", "--parallel"],
                       check=True)
        BUNDLED.parent.mkdir(exist_ok=True)
        shutil.copyfile(build_dir / "libingot.so", BUNDLED)  # follows the symlink
    except (OSError, subprocess.CalledProcessError) as e:
        return f"the cmake build failed: {e}"
    return None


class BuildPy(build_py):
    def run(self):
        if not BUNDLED.is_file():
            reason = build_library()
            if reason is not None:
                warnings.warn(f"ingot: libingot.so not bundled ({reason}); the package will look "
                              "for it at import time (INGOT_LIBRARY, ../build, the system)")
        super().run()


cmdclass = {"build_py": BuildPy}

try:  # setuptools >= 70.1
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

if bdist_wheel is not None:

    class BdistWheel(bdist_wheel):
        """With a bundled libingot.so the wheel is platform specific, but
        still free of any Python ABI (ctypes only): py3-none-<platform>."""

        def get_tag(self):
            if BUNDLED.is_file():
                self.root_is_pure = False
                return ("py3", "none", super().get_tag()[2])
            return super().get_tag()

    cmdclass["bdist_wheel"] = BdistWheel

setup(
    packages=["ingot"],
    package_data={"ingot": ["lib/libingot.so"]},
    include_package_data=False,
    cmdclass=cmdclass,
)
