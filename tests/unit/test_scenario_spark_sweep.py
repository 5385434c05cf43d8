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


def _task(tmp_path, seed=1, **kw):
    return SeedTask(name="nemesis-broker-faults", library=True, text=None, seed=seed, quick=True,
                    output=str(tmp_path), replay=f"r {seed}", **kw)


def test_a_task_that_raises_is_its_seeds_error_row_not_the_jobs_failure(tmp_path, monkeypatch):
    from kafkatier.scenario import spark_sweep

    def broken(task, tmp, row):
        raise PermissionError(13, "Permission denied", "/shared/out/runs")
    monkeypatch.setattr(spark_sweep, "_run_seed_in", broken)
    row = run_seed(_task(tmp_path, seed=7))
    assert row["outcome"] == "error" and row["exit_code"] == 3
    assert row["reason"].startswith("the sweep task failed on ") and "PermissionError" in row["reason"]
    assert spark_sweep.read_rows(str(tmp_path), [7]) == {7: row}   # written for the driver as the seed ended


def test_rows_of_an_aborted_job_keep_what_executors_wrote(tmp_path):
    from kafkatier.scenario import spark_sweep
    spark_sweep._write_row(str(tmp_path), _row(1, "valid", 0))
    (tmp_path / "rows" / "seed-2.json").write_text("{not json")    # a row half written when the job died
    rows = spark_sweep.rows_after_abort(str(tmp_path), [_task(tmp_path, s) for s in (1, 2)],
                                        RuntimeError("\nJob aborted due to stage failure: executor lost\nmore"))
    assert rows[0] == _row(1, "valid", 0)
    assert rows[1]["seed"] == 2 and rows[1]["exit_code"] == 3 and rows[1]["replay"] == "r 2"
    assert rows[1]["reason"] == "no result: the Spark job failed (Job aborted due to stage failure: executor lost)"
    assert set(rows[1]) == set(ROW_FIELDS)


def test_progress_counts_the_rows_written_and_stays_quiet_without_news(tmp_path):
    from kafkatier.scenario import spark_sweep
    progress = spark_sweep.SweepProgress(str(tmp_path), range(1, 4), out=None)
    spark_sweep._write_row(str(tmp_path), _row(1, "valid", 0))
    spark_sweep._write_row(str(tmp_path), _row(3, "error", 3))
    line = progress.line()
    assert line.startswith("2/3 seeds done in ") and line.endswith(": 1 valid, 0 anomalies, 1 error")
    assert progress.line() is None


def test_a_hung_run_is_stopped_and_the_cluster_it_left_is_stopped_too(tmp_path):
    import json

    from kafkatier.cluster.embedded_zookeeper import pid_alive
    from kafkatier.scenario.seed_process import run_seed_process
    # The "run": leaves a "broker" (a process in a session of its own) in its cluster.json, then hangs and
    # ignores SIGTERM (as a run wedged in a C call would).
    cluster = tmp_path / "cluster"
    script = (f"import json, os, signal, subprocess, sys, time\n"
              f"signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
              f"os.makedirs({str(cluster)!r})\n"
              f"json.dump(dict(zookeeper='127.0.0.1:1', zookeeper_pid=None, brokers=[dict(id=1, pid=p.pid)]),"
              f" open({str(cluster / 'cluster.json')!r}, 'w'))\n"
              f"print('broker-pid', p.pid, flush=True)\n"
              f"time.sleep(600)\n")
    log_path = tmp_path / "run.log"
    rc = run_seed_process([sys.executable, "-c", script], str(log_path), str(cluster), timeout=2.0, stop_s=1.0)
    assert rc == 3
    assert "the run did not finish within 2s" in log_path.read_text()
    broker = json.loads((cluster / "cluster.json").read_text())["brokers"][0]
    assert broker["pid"] is None   # cluster down recorded it stopped
    pid = int(log_path.read_text().split("broker-pid ")[1].split()[0])
    assert not pid_alive(pid)
