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


@pytest.mark.parametrize("args", [["--only-latency", "--only-consume"], ["--only-rf3", "--only-latency"],
                                  ["--repeats", "0"], ["--latency-seconds", "nan"], ["--rate", "0"]])
def test_peer_table_refuses_conflicting_or_empty_runs(args):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "peer_table.py"), *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "usage:" in out.stderr and "Traceback" not in out.stderr


def test_peer_table_starts_the_peer_in_its_own_session(tmp_path):
    """The peer broker runs in a session of its own, as ClusterManager starts kafkatier's brokers: with the
    kernel's autogroup scheduling a session is one scheduling group, and a peer in the measuring client's session
    was scheduled with it (its p99 at 2,000 msg/s 10-20x lower on a loaded machine than in a session of its own)."""
    saved = list(sys.path)   # the script puts the repository and benchmarks/ on the path when imported
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import peer_table
    finally:
        sys.path[:] = saved
    marker = tmp_path / "sid"
    fake = tmp_path / "tansu"
    fake.write_text(f"#!{sys.executable}\nimport os\nopen({str(marker)!r}, 'w').write(str(os.getsid(0)))\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match="tansu exited"):
        peer_table.start_tansu(str(fake), str(tmp_path / "tansu.log"))
    assert int(marker.read_text()) not in (os.getsid(0), 0)
