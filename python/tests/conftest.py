"""Test setup: import ingot from this source tree (python/), unless
INGOT_TEST_INSTALLED=1 asks to test the installed package."""

import os
import sys
from pathlib import Path

if os.environ.get("INGOT_TEST_INSTALLED", "") in ("", "0"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
