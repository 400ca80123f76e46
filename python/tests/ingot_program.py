"""Where the tests find the `ingot` command-line program."""

import os
from pathlib import Path

import pytest


def ingot_program():
    """The `ingot` command-line program: $INGOT_CLI; else tools/ingot beside
    $INGOT_LIBRARY (the build folder the other tests use); else this
    repository's build/tools/ingot. Skips the test when it is missing."""
    candidates = [Path(__file__).resolve().parents[2] / "build" / "tools" / "ingot"]
    if os.environ.get("INGOT_LIBRARY"):
        candidates.insert(0, Path(os.environ["INGOT_LIBRARY"]).resolve().parent / "tools" / "ingot")
    path = os.environ.get("INGOT_CLI") or next(
        (str(c) for c in candidates if c.is_file()), str(candidates[-1]))
    if not Path(path).is_file():
        pytest.skip(f"no ingot program at {path} (build it, or set INGOT_CLI)")
    return path
