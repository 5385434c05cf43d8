"""A sweep on Spark: each seed of a scenario is one Spark task, run on an executor in its own temporary directory
with its own embedded ZooKeeper and brokers (``kafkatier scenario run`` in a child process, so a run's clients,
threads and signals never touch the Python worker).  An executor runs as many seeds at once as it has task slots
(``local[N]``: N; a standalone cluster: ``--per-executor K`` sets ``spark.executor.cores``).

The result is one row per seed (:data:`ROW_FIELDS`) as a DataFrame written to ``<output>/results.parquet``, a
summary table, ``<output>/index.html`` and, for every seed that did not pass, its run directory copied to
``<output>/runs/<scenario>-<seed>/`` by the executor (the output location is shared by the driver and the
executors, as Spark's own output is).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from urllib.parse import urlparse

import attrs

from kafkatier.common.atomic_file import atomic_write
from kafkatier.logsetup import get_logger, kv
from kafkatier.scenario.seed_process import SEED_TIMEOUT_S, run_seed_process
from kafkatier.waiting import WaitTimeout, wait_for

log = get_logger("scenario.spark_sweep")

EXECUTORS_TIMEOUT_S = 60.0       # a standalone master with no worker registering executors
MASTER_CONNECT_TIMEOUT_S = 5.0

ROW_FIELDS = ("seed", "outcome", "exit_code", "anomalies", "reason", "duration_s", "faults", "schedule_digest",
              "executor", "replay", "run_dir", "zookeeper")


class SweepSetupError(RuntimeError):
    """The sweep could not start or could not run any seed (unreachable master, no executors, no Java on the
    executors); the CLI prints it as one line and exits 3."""


@attrs.frozen
class SeedTask:
    """What an executor needs to run one seed: the scenario as text (or a library name), and where to copy the run
    directory of a seed that did not pass."""

    name: str
    library: bool                  # run the installed library's scenario of that name
    text: str | None               # else the scenario file's text
    seed: int
    quick: bool
    output: str
    replay: str
    shared_zookeeper: str | None = None   # the sweep's id when its seeds share their executor's ZooKeeper
    reports: str = "failing"              # scenario run --reports: a valid seed's directory is not kept


def _outcome(rc: int) -> str:
    return {0: "valid", 1: "anomalies"}.get(rc, "error")


def run_seed(task: SeedTask) -> dict:
    """One seed on this executor (a Spark task): a row of :data:`ROW_FIELDS`.  Never raises: whatever goes wrong
    on the executor is this seed's ``error`` row with its reason (a raising task would fail the whole Spark job,
    and with it every other seed's row).  The row is also written to ``<output>/rows/seed-<N>.json`` as soon as
    the seed ends, so the driver shows progress and keeps the rows of a job that Spark aborts."""
    executor = f"{socket.gethostname()}/{os.getppid()}"   # the executor's Python daemon: one per executor
    started = time.monotonic()
    row = error_row(task, executor)
    tmp = None
    try:
        tmp = tempfile.mkdtemp(prefix=f"kafkatier-sweep-{task.name}-{task.seed}-")
        _run_seed_in(task, tmp, row)
    except Exception as e:  # noqa: BLE001 - the seed's error row, never the job's failure
        log.exception("sweep task failed %s", kv(seed=task.seed))
        row.update(outcome="error", exit_code=3,
                   reason=f"the sweep task failed on {executor}: {type(e).__name__}: "
                          f"{(str(e).splitlines() or [''])[0][:250]}")
    finally:
        row["duration_s"] = round(time.monotonic() - started, 1)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    _write_row(task.output, row)
    return row


def _run_seed_in(task: SeedTask, tmp: str, row: dict) -> None:
    from kafkatier.scenario.report import drawn_faults
    from kafkatier.scenario.schedule import derive
    from kafkatier.scenario.spec import load, resolve
    from kafkatier.cluster.embedded_zookeeper import JavaNotFoundError, find_java
    try:
        find_java()
    except JavaNotFoundError:
        row["reason"] = f"no Java on executor {row['executor']} (the embedded ZooKeeper needs Java 17+)"
        return
    if task.library:
        target = task.name
        spec = load(resolve(task.name))
    else:
        target = os.path.join(tmp, f"{task.name}.toml")
        with open(target, "w") as f:
            f.write(task.text)
        spec = load(target)
    row["schedule_digest"] = derive(spec.profile(task.quick), task.seed).digest()
    runs = os.path.join(tmp, "runs")
    os.makedirs(runs)
    log_path = os.path.join(runs, "sweep-run.log")
    run_dir = os.path.join(runs, f"{task.name}-{task.seed}")
    cmd = [sys.executable, "-m", "kafkatier", "--log-level", "WARNING", "scenario", "run", target, "--seed",
           str(task.seed), "--runs-dir", runs, "--no-progress", "--reports", task.reports] + (
               ["--quick"] if task.quick else [])
    with contextlib.ExitStack() as stack:
        if task.shared_zookeeper:
            from kafkatier.scenario.executor_zookeeper import ExecutorZooKeeper
            try:
                chroot = stack.enter_context(ExecutorZooKeeper(task.shared_zookeeper).lease(task.seed))
            except Exception as e:  # noqa: BLE001 - reported in the row; the seed could not run
                row["reason"] = f"the executor's ZooKeeper did not start: {str(e).splitlines()[0][:250]}"
                return
            cmd += ["--zookeeper", chroot]
        rc = _run_child(cmd, log_path, os.path.join(run_dir, "cluster"))
    results = _results(run_dir)
    if results is None and rc in (0, 1):
        rc = 3          # no verdict: never counted as valid
    row.update(exit_code=rc, outcome=_outcome(rc))
    if results is not None:
        row["anomalies"] = [f"{a['checker']}/{a['type']}" for a in results.get("anomalies", [])] + [
            f"unmet: {u}" for u in results.get("unmet_expectations", [])]
        row["faults"] = {k: int(v) for k, v in drawn_faults(results).items()}
    if rc != 0:
        row["reason"] = _last_line(log_path) if results is None else ""
        dest = os.path.join(task.output, "runs", f"{task.name}-{task.seed}")
        shutil.rmtree(dest, ignore_errors=True)
        if os.path.isdir(run_dir):
            # A broker killed mid-write may leave a socket or a vanished file: copy what can be copied.
            try:
                shutil.copytree(run_dir, dest, symlinks=True, ignore_dangling_symlinks=True)
            except shutil.Error as e:
                log.warning("some files of a failing run were not copied %s", kv(seed=task.seed,
                                                                                   missed=len(e.args[0])))
        os.makedirs(dest, exist_ok=True)
        shutil.copyfile(log_path, os.path.join(dest, "sweep-run.log"))
        row["run_dir"] = dest


ROWS_DIR = "rows"


def _row_path(output: str, seed: int) -> str:
    return os.path.join(output, ROWS_DIR, f"seed-{seed}.json")


def _write_row(output: str, row: dict) -> None:
    try:
        path = _row_path(output, row["seed"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, json.dumps(row).encode(), sync=False)
    except OSError as e:   # the row still reaches the driver through Spark
        log.warning("could not write a seed's row %s", kv(seed=row["seed"], error=repr(e)))


def read_rows(output: str, seeds) -> dict[int, dict]:
    """The rows executors wrote so far for ``seeds`` (missing or unreadable ones left out)."""
    rows = {}
    for s in seeds:
        try:
            with open(_row_path(output, s)) as f:
                row = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(row, dict) and set(ROW_FIELDS) <= set(row):
            rows[s] = {k: row[k] for k in ROW_FIELDS}
    return rows


def _run_child(cmd: list[str], log_path: str, cluster_dir: str) -> int:
    # The Python worker's PYTHONPATH points at pyspark's zip (no jars/ there); the run imports the installed
    # pyspark, whose jars the embedded ZooKeeper runs from.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return run_seed_process(cmd, log_path, cluster_dir, SEED_TIMEOUT_S, env)


def _results(run_dir: str) -> dict | None:
    try:
        with open(os.path.join(run_dir, "results.json")) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def _last_line(path: str) -> str:
    try:
        with open(path) as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


# ------------------------------------------------------------------------------------------------ the driver

def check_master(master: str) -> None:
    """A ``spark://host:port`` master must accept connections (else Spark retries for a minute, then hangs)."""
    if not master.startswith("spark://"):
        return
    for hostport in master[len("spark://"):].split(","):
        url = urlparse(f"spark://{hostport}")
        try:
            with socket.create_connection((url.hostname, url.port or 7077), timeout=MASTER_CONNECT_TIMEOUT_S):
                return
        except (OSError, ValueError) as e:
            last = e
    raise SweepSetupError(f"Spark master {master} is unreachable ({getattr(last, 'strerror', None) or last})")


def _on_this_machine(master: str) -> bool:
    if master.startswith("local"):
        return True
    host = urlparse(master.split(",")[0]).hostname or ""
    return host == "localhost" or host.startswith("127.")


def _session(master: str, per_executor: int | None, conf: dict[str, str]):
    from pyspark.sql import SparkSession
    if _on_this_machine(master) and not os.environ.get("PYSPARK_PYTHON"):
        # Workers on this machine import this environment's kafkatier (on a cluster: set PYSPARK_PYTHON to the
        # executors' Python, which has kafkatier installed).
        os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")   # the driver listens on loopback unless told otherwise
    builder = (SparkSession.builder.master(master).appName("kafkatier-scenario-sweep")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.task.maxFailures", "1").config("spark.locality.wait", "0")
               .config("spark.python.worker.reuse", "true"))
    if per_executor is not None:
        builder = builder.config("spark.executor.cores", str(per_executor)).config("spark.task.cpus", "1")
    for k, v in conf.items():
        builder = builder.config(k, v)
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # noqa: BLE001 - the JVM did not start (no Java on the driver...): one line
        raise SweepSetupError(f"Spark did not start on {master}: {str(e).strip().splitlines()[0]}") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _wait_for_executors(spark, master: str) -> None:
    if not master.startswith("spark://"):
        return
    # The JVM SparkContext knows its registered executors (the driver is one of the entries).
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus  # noqa: SLF001 - no public Python API for it
    try:
        wait_for(lambda: status().size() > 1, EXECUTORS_TIMEOUT_S, interval=0.5,
                 message="an executor to register")
    except WaitTimeout:
        raise SweepSetupError(f"no executor registered with {master} within {EXECUTORS_TIMEOUT_S:g}s (are its "
                              f"workers running, with free cores?)") from None


@attrs.frozen
class SweepResult:
    rows: list[dict]
    output: str
    elapsed_s: float

    @property
    def exit_code(self) -> int:
        """1 if a seed found anomalies, else 3 if a seed could not complete, else 0."""
        codes = {r["exit_code"] for r in self.rows}
        return 1 if 1 in codes else (3 if codes - {0} else 0)


def spark_sweep(spec, seeds: range, master: str, quick: bool, output: str, per_executor: int | None = None,
                conf: dict[str, str] | None = None, out=print, reuse: bool = True,
                reports: str = "failing") -> SweepResult:
    """Run ``spec`` (a loaded :class:`ScenarioSpec`) for every seed as Spark tasks on ``master``.  ``reuse``: the
    seeds of an executor share one ZooKeeper (a chroot each) when :func:`executor_zookeeper.reuse_refused` allows."""
    from kafkatier.scenario import report
    from kafkatier.scenario.executor_zookeeper import ExecutorZooKeeper, reuse_refused
    from kafkatier.scenario.runner import replay_command
    from kafkatier.scenario.spec import in_library
    check_master(master)
    refused = reuse_refused(spec) if reuse else "--no-reuse"
    sweep_id = None if refused else uuid.uuid4().hex[:12]
    output = os.path.abspath(output)
    os.makedirs(output, exist_ok=True)
    library = in_library(spec.path)
    text = None
    if not library:
        with open(spec.path) as f:
            text = f.read()
    tasks = [SeedTask(name=spec.name, library=library, text=text, seed=s, quick=quick, output=output,
                      replay=replay_command(spec, s, quick), shared_zookeeper=sweep_id, reports=reports) for s in seeds]
    spark = _session(master, per_executor, conf or {})
    t0 = time.monotonic()
    try:
        _wait_for_executors(spark, master)
        out(f"sweep {spec.name}{' (quick)' if quick else ''} on Spark {master}: seeds {seeds.start}.."
            f"{seeds.stop - 1} ({len(tasks)} tasks); ZooKeeper: "
            + ("one per executor, a chroot per seed" if sweep_id else f"one per seed ({refused})"))
        shutil.rmtree(os.path.join(output, ROWS_DIR), ignore_errors=True)   # a previous sweep's rows
        progress = SweepProgress(output, seeds, out)
        progress.start()
        try:
            rows = spark.sparkContext.parallelize(tasks, len(tasks)).map(run_seed).collect()
        except Exception as e:  # noqa: BLE001 - Spark aborted the job (an executor lost...): keep the rows we have
            rows = rows_after_abort(output, tasks, e)
        finally:
            progress.stop()
        rows.sort(key=lambda r: r["seed"])
        try:
            _write_parquet(spark, rows, os.path.join(output, "results.parquet"))
        except Exception as e:  # noqa: BLE001 - Spark itself failed: the table and rows/ still tell the outcome
            out(f"results.parquet not written ({(str(e).strip().splitlines() or [type(e).__name__])[0][:200]}); "
                f"every seed's row is in {output}/{ROWS_DIR}/")
    finally:
        try:
            spark.stop()
        finally:
            if sweep_id and _on_this_machine(master):
                ExecutorZooKeeper(sweep_id).stop()   # elsewhere each keeper stops once idle
    result = SweepResult(rows=rows, output=output, elapsed_s=time.monotonic() - t0)
    why = setup_failure(rows)
    if why is not None:
        raise SweepSetupError(why)
    out(summary_table(rows))
    bad = [r for r in rows if r["exit_code"] != 0]
    out(f"{len(rows)} seeds in {result.elapsed_s:.0f}s ({3600 * len(rows) / max(result.elapsed_s, 1e-9):.0f} "
        f"seeds/hour): {len(rows) - len(bad)} valid, {sum(r['exit_code'] == 1 for r in rows)} with anomalies, "
        f"{sum(r['outcome'] == 'error' for r in rows)} could not complete; rows in {output}/results.parquet"
        + (f"; failing runs in {output}/runs/" if bad else ""))
    for r in bad:
        out(f"  replay seed {r['seed']}: {r['replay']}")
    report.write_sweep_html(os.path.join(output, "index.html"), spec.name, master, rows, result.elapsed_s)
    return result


def rows_after_abort(output: str, tasks: list[SeedTask], error: BaseException) -> list[dict]:
    """The rows of a Spark job that did not finish: those the executors wrote, and for every other seed an
    ``error`` row saying the job ended before it (its reason: Spark's first line)."""
    why = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), type(error).__name__)[:250]
    log.warning("the sweep's Spark job failed %s", kv(error=why))
    written = read_rows(output, [t.seed for t in tasks])
    return [written.get(t.seed) or error_row(t, reason=f"no result: the Spark job failed ({why})") for t in tasks]


def error_row(task: SeedTask, executor: str = "", reason: str = "") -> dict:
    """A row of :data:`ROW_FIELDS` for a seed without a verdict (exit 3): the start of every seed's row, and the
    row of a seed the Spark job never ran."""
    return dict(seed=task.seed, outcome="error", exit_code=3, anomalies=[], reason=reason, duration_s=0.0, faults={},
                schedule_digest="", executor=executor, replay=task.replay, run_dir=None,
                zookeeper="executor" if task.shared_zookeeper else "own")


class SweepProgress:
    """Prints how many seeds ended so far (from the rows the executors write), at most every ``every_s``."""

    def __init__(self, output: str, seeds: range, out, every_s: float = 60.0):
        self.output = output
        self.seeds = seeds
        self.out = out
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweep-progress", daemon=True)
        self._t0 = time.monotonic()
        self._last = -1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def line(self) -> str | None:
        """The progress line, or None when no further seed ended since the last one."""
        rows = read_rows(self.output, self.seeds).values()
        if len(rows) == self._last:
            return None
        self._last = len(rows)
        counts = Counter(r["outcome"] for r in rows)
        return (f"{len(rows)}/{len(self.seeds)} seeds done in {time.monotonic() - self._t0:.0f}s: "
                + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("valid", "anomalies", "error")))

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):   # a periodic report, not synchronisation
            try:
                line = self.line()
            except OSError:
                continue
            if line:
                self.out(line)


def setup_failure(rows: list[dict]) -> str | None:
    """Why no seed could run, when every seed failed for the same reason of the executors (no Java): the sweep
    then ends with that one line instead of a table of identical errors."""
    reasons = {r["reason"] for r in rows if r["outcome"] == "error"}
    if len(reasons) == 1 and all(r["outcome"] == "error" for r in rows) and "no Java" in next(iter(reasons)):
        return next(iter(reasons))
    return None


def _write_parquet(spark, rows: list[dict], path: str) -> None:
    from pyspark.sql.types import (ArrayType, DoubleType, IntegerType, LongType, MapType, StringType, StructField,
                                   StructType)
    schema = StructType([
        StructField("seed", LongType(), False), StructField("outcome", StringType(), False),
        StructField("exit_code", IntegerType(), False), StructField("anomalies", ArrayType(StringType()), False),
        StructField("reason", StringType(), True), StructField("duration_s", DoubleType(), False),
        StructField("faults", MapType(StringType(), IntegerType()), False),
        StructField("schedule_digest", StringType(), True), StructField("executor", StringType(), False),
        StructField("replay", StringType(), False), StructField("run_dir", StringType(), True),
        StructField("zookeeper", StringType(), False)])
    spark.createDataFrame([tuple(r[f] for f in ROW_FIELDS) for r in rows], schema) \
        .coalesce(1).write.mode("overwrite").parquet(path)


def summary_table(rows: list[dict]) -> str:
    lines = [f"{'seed':>8}  {'outcome':<9} {'time':>7}  {'digest':<12}  {'executor':<22} faults; anomalies"]
    for r in rows:
        faults = ",".join(f"{k}={v}" for k, v in sorted(r["faults"].items()))
        what = "; ".join(r["anomalies"]) or r["reason"]
        lines.append(f"{r['seed']:>8}  {r['outcome']:<9} {r['duration_s']:>6.1f}s  {r['schedule_digest']:<12}  "
                     f"{r['executor']:<22} {faults}" + (f"; {what}" if what else ""))
    counts = Counter(r["outcome"] for r in rows)
    lines.append("outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return "\n".join(lines)
