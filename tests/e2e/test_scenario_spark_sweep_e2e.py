"""Scenario sweeps on Spark: each seed a Spark task with its own embedded ZooKeeper and brokers, on ``local[2]``
and on a standalone master with two workers started by the test; rows in Parquet, failing runs copied to the
output, their verdict reproduced from the copy (bad input: tests/unit/test_scenario_spark_sweep.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from kafkatier.testing.spark_standalone import StandaloneCluster
from kafkatier.testing.tiny_scenario import tiny_scenario

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TINY = tiny_scenario("{name}", heal_timeout_s=30)
# ... and one that always fails its expectations (one broker never changes controller): a failing seed to copy.
UNMET = TINY + "[expect]\ncontroller_changes_at_least = 2\n"


def _file(tmp_path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.format(name=name))
    return str(path)


def _sweep(*args, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkatier", "--log-level", "WARNING", "scenario", "sweep", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=800, env=env)


def _rows(output: str) -> list[dict]:
    return sorted(pq.read_table(os.path.join(output, "results.parquet")).to_pylist(), key=lambda r: r["seed"])


def test_sweep_on_local_spark(tmp_path):
    path = _file(tmp_path, "tiny", TINY)
    out = str(tmp_path / "out")
    tmp = tmp_path / "tmp"   # the executor's temporary dirs, its ZooKeeper's among them
    tmp.mkdir()
    p = _sweep(path, "--seeds", "1..2", "--spark", "--master", "local[2]", "--output", out, cwd=tmp_path,
               env=dict(os.environ, TMPDIR=str(tmp)))
    assert p.returncode == 0, p.stdout + p.stderr
    rows = _rows(out)
    assert [r["seed"] for r in rows] == [1, 2]
    for r in rows:
        assert r["outcome"] == "valid" and r["exit_code"] == 0 and r["anomalies"] == []
        assert dict(r["faults"]) == {"pause": 1} and r["duration_s"] > 0 and r["executor"]
        assert r["replay"] == f"kafkatier scenario run {path} --seed {r['seed']}" and r["run_dir"] is None
        assert r["zookeeper"] == "executor"   # one ZooKeeper for the executor's seeds, a chroot each
    assert rows[0]["schedule_digest"] != rows[1]["schedule_digest"]
    assert "one per executor, a chroot per seed" in p.stdout
    # The driver stopped the executor's ZooKeeper and removed its directory.
    assert not [d for d in os.listdir(tmp) if d.startswith("kafkatier-sweep-zk-")]
    assert os.path.isfile(os.path.join(out, "index.html")) and not os.path.exists(os.path.join(out, "runs"))
    assert "outcomes: valid=2" in p.stdout
    # Each executor wrote its seed's row as the seed ended (the driver's progress, and what an aborted job keeps).
    assert sorted(os.listdir(os.path.join(out, "rows"))) == ["seed-1.json", "seed-2.json"]


def test_sweep_on_a_standalone_cluster_copies_failing_runs(tmp_path):
    path = _file(tmp_path, "tiny-unmet", UNMET)
    out = str(tmp_path / "out")
    with StandaloneCluster(str(tmp_path / "spark"), workers=2, cores_per_worker=1) as cluster:
        p = _sweep(path, "--seeds", "3..4", "--spark", "--master", cluster.master_url, "--per-executor", "1",
                   "--output", out, "--no-reuse", cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    rows = _rows(out)
    assert [r["seed"] for r in rows] == [3, 4]
    for r in rows:
        assert r["outcome"] == "anomalies" and any("controller changes" in a for a in r["anomalies"])
        assert r["run_dir"] == os.path.join(out, "runs", f"tiny-unmet-{r['seed']}")
        assert os.path.isfile(os.path.join(r["run_dir"], "history.jsonl"))
        assert os.path.isfile(os.path.join(r["run_dir"], "index.html"))   # a failing seed's pictures are drawn
        assert r["zookeeper"] == "own"
    # The copied run reproduces its verdict on this machine (re-judged from its history, no cluster).
    check = subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "replay", rows[0]["run_dir"], "--check"],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "replay seed 3: kafkatier scenario run" in p.stdout


def test_a_sweep_on_this_machine_shares_one_zookeeper(tmp_path):
    """Without Spark: ``--parallel 2`` seeds at once, one ZooKeeper for the sweep, valid runs not kept."""
    path = _file(tmp_path, "tiny", TINY)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    runs = tmp_path / "runs"
    p = _sweep(path, "--seeds", "5..6", "--parallel", "2", "--runs-dir", str(runs), cwd=tmp_path,
               env=dict(os.environ, TMPDIR=str(tmp)))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "one ZooKeeper (a chroot per seed)" in p.stdout and "2 valid, 0 failing" in p.stdout
    assert not [d for d in os.listdir(runs) if not d.startswith(".")]
    assert not os.listdir(tmp)   # the sweep's ZooKeeper stopped and removed
