"""Bad arguments of the benchmarks are refused before a cluster starts: one usage line, exit 2."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_controller_scale_refuses_an_idle_window_that_is_not_positive(value):
    """``--idle-seconds -1`` started a cluster, then failed with a traceback (``sleep length must be
    non-negative``) when the idle window began."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "controller_scale.py"), "--idle-only",
                          "--idle-seconds", value], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--idle-seconds must be above 0" in out.stderr and "Traceback" not in out.stderr
