"""Runs the Python examples (examples/python/*.py) as a user would, each in
its own interpreter: with numpy arrays on the CPU, and with torch tensors on
the CPU and on the GPU when torch (and a GPU) is there. Each script checks
its own results and exits non-zero on a mismatch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import torch
except ImportError:
    torch = None

PYTHON_DIR = Path(__file__).resolve().parents[1]
EXAMPLES = PYTHON_DIR.parent / "examples" / "python"
SCRIPTS = ["ple_embed.py", "nvfp4_gemm.py", "sample_step.py"]


def _cuda_ready():
    import ingot

    return torch is not None and torch.cuda.is_available() and ingot.backend_available("cuda")


CASES = []
for script in SCRIPTS:
    CASES.append(pytest.param(script, "numpy", "cpu", id=f"{script}-numpy-cpu"))
    for device in ("cpu", "cuda"):
        CASES.append(pytest.param(script, "torch", device, id=f"{script}-torch-{device}"))


@pytest.mark.parametrize("script,framework,device", CASES)
def test_example(script, framework, device):
    pytest.importorskip("numpy", reason="the examples check their results with numpy")
    if framework == "torch" and torch is None:
        pytest.skip("torch is not installed: the examples' torch path is not run here")
    if device == "cuda" and not _cuda_ready():
        pytest.skip("needs torch with a CUDA GPU and ingot's CUDA backend")
    env = dict(os.environ, INGOT_EXAMPLE_FRAMEWORK=framework, PYTHONUNBUFFERED="1")
    if os.environ.get("INGOT_TEST_INSTALLED", "") in ("", "0"):
        # As `make test-python` runs: ingot from this tree, the library named
        # by INGOT_LIBRARY (passed on as it is).
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PYTHON_DIR), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), device], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{script} {device} {framework}: exit {proc.returncode}\n{output}"
    assert f"{device} backend, {framework} arrays" in output, output
    assert output.rstrip().endswith("OK"), output
