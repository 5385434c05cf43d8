"""The parts of a Spark sweep that need no Spark: a seed's task on an executor without Java, the master check,
exit codes and the summary table (the sweeps themselves: tests/e2e/test_scenario_spark_sweep_e2e.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from kafkatier.scenario.spark_sweep import (ROW_FIELDS, SeedTask, SweepResult, SweepSetupError, check_master,
                                            run_seed, setup_failure, summary_table)


def test_a_seed_on_an_executor_without_java_is_an_error_row(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    row = run_seed(SeedTask(name="nemesis-broker-faults", library=True, text=None, seed=1, quick=True,
                            output=str(tmp_path), replay="kafkatier scenario run nemesis-broker-faults --seed 1"))
    assert set(row) == set(ROW_FIELDS)
    assert row["outcome"] == "error" and row["exit_code"] == 3 and "no Java on executor" in row["reason"]


def test_an_unreachable_master_is_one_line():
    with pytest.raises(SweepSetupError, match="unreachable") as e:
        check_master("spark://127.0.0.1:1")
    assert "\n" not in str(e.value)
    check_master("local[2]")   # nothing to check


def _row(seed, outcome, code):
    return dict(seed=seed, outcome=outcome, exit_code=code, anomalies=[], reason="", duration_s=1.0, faults={},
                schedule_digest="abc", executor="h/1", replay="r", run_dir=None, zookeeper="own")


def test_exit_codes_anomalies_first_then_runs_that_could_not_complete():
    assert SweepResult([_row(1, "valid", 0)], "o", 1.0).exit_code == 0
    assert SweepResult([_row(1, "valid", 0), _row(2, "error", 3)], "o", 1.0).exit_code == 3
    assert SweepResult([_row(1, "anomalies", 1), _row(2, "error", 3)], "o", 1.0).exit_code == 1


def test_summary_table_has_a_row_per_seed_and_the_outcomes():
    text = summary_table([_row(1, "valid", 0), dict(_row(2, "error", 3), reason="no Java")])
    assert "no Java" in text and text.splitlines()[-1] == "outcomes: error=1, valid=1"


def test_executors_without_java_end_the_sweep_with_one_line():
    no_java = dict(_row(1, "error", 3), reason="no Java on executor h/1 (the embedded ZooKeeper needs Java 17+)")
    assert setup_failure([no_java, dict(no_java, seed=2)]) == no_java["reason"]
    assert setup_failure([no_java, _row(2, "valid", 0)]) is None


def _sweep(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkatier", "scenario", "sweep", "nemesis-broker-faults", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, code, words", [
    (["--seeds", "5..1", "--spark"], 2, "below"),
    (["--seeds", "1..2", "--spark", "--master", "spark://127.0.0.1:1"], 3, "unreachable"),
    (["--seeds", "1..2", "--spark", "--master", "mesos://x"], 2, "--master"),
    (["--seeds", "1..2", "--master", "local[2]"], 2, "need --spark"),
])
def test_cli_bad_input_is_one_line(args, code, words):
    p = _sweep(*args)
    assert p.returncode == code and len(p.stderr.strip().splitlines()) == 1 and words in p.stderr, p.stderr


def test_a_seed_whose_shared_zookeeper_cannot_start_is_an_error_row(tmp_path, monkeypatch):
    from kafkatier.scenario import executor_zookeeper

    def no_server(self, seed):
        raise RuntimeError("the executor's ZooKeeper keeper exited with status 1 (see keeper.log)")
    monkeypatch.setattr(executor_zookeeper.ExecutorZooKeeper, "lease", no_server)
    monkeypatch.setattr("kafkatier.cluster.embedded_zookeeper.find_java", lambda: "java")
    row = run_seed(SeedTask(name="nemesis-broker-faults", library=True, text=None, seed=1, quick=True,
                            output=str(tmp_path), replay="r", shared_zookeeper="abc"))
    assert row["outcome"] == "error" and row["exit_code"] == 3 and row["zookeeper"] == "executor"
    assert row["reason"].startswith("the executor's ZooKeeper did not start: the executor's ZooKeeper keeper exited")
