"""Test setup: import ingot from this source tree (python/), unless
INGOT_TEST_INSTALLED=1 asks to test the installed package."""

import os
import sys
from pathlib import Path

if os.environ.get("INGOT_TEST_INSTALLED", "") in ("", "0"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


import pytest  # noqa: E402


@pytest.fixture
def ctx():
    """A CPU context (test modules that need others define their own)."""
    import ingot

    with ingot.Context("cpu") as c:
        yield c


@pytest.fixture
def rng():
    """Fresh inputs per test; INGOT_TEST_SEED=<n> replays a run (the seed is
    printed, and pytest shows it when the test fails)."""
    np = pytest.importorskip("numpy")
    seed = int(os.environ.get("INGOT_TEST_SEED") or np.random.SeedSequence().entropy)
    print(f"INGOT_TEST_SEED={seed}")
    return np.random.default_rng(seed)
