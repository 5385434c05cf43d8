"""Ready-made Spark batch jobs on kafkatier topics, used by ``kafkatier spark produce|read``.

* :func:`spark_session` starts (or reuses) a session with the ``kafkatier`` data source registered.  With a
  local master the Python workers run this interpreter, so they import the same installed ``kafkatier``;
  with a cluster master the executors import the package from their own installation.
* :func:`generated_rows` / :func:`file_rows` build the DataFrame a producer job writes;
  :func:`produce` and :func:`read` run the jobs while :class:`StageProgress` shows Spark's task progress as a
  tqdm bar.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.spark.class_archive import ArchivePlan, ClassArchive
from kafkatier.spark.source import NAME, register

log = get_logger("spark.jobs")

INPUT_FORMATS = {".csv": "csv", ".parquet": "parquet", ".json": "json", ".jsonl": "json", ".ndjson": "json"}
OUTPUT_FORMATS = {".csv": "csv", ".parquet": "parquet", ".json": "json"}
PROGRESS_INTERVAL_S = 0.25
# Digits of the largest row number (a long).
MAX_ID_DIGITS = 19


class JobInputError(ValueError):
    """A bad input or output file name or content (the command line prints it as a usage error)."""


# A local session's JVM lives for one command or test run, and on a busy machine its start-up CPU is most of a
# short job's wall time: the client compiler only (no C2 compile threads; JIT work is most of the start-up CPU)
# and one serial collector cut it by about a third.  Only when the caller gives no driver JVM options.
LOCAL_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# spark-submit first runs a small JVM of its own (org.apache.spark.launcher.Main) that prints the driver's
# command line (any master); it reads SPARK_LAUNCHER_OPTS.  The same two options, unless the environment sets them.
LAUNCHER_ENV = "SPARK_LAUNCHER_OPTS"
LOCAL_ADDRESSES = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
# Settings of every session this module starts unless the caller's ``conf`` says otherwise.
SESSION_DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    # The data source's error message first (kafkatier.spark.errors).
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
    # No web UI: the jobs report their own progress, and Jetty's start-up is CPU a short job pays for.
    "spark.ui.enabled": "false",
}


def session_conf(master: str, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings :func:`spark_session` starts a session with: :data:`SESSION_DEFAULTS`, the quick-start JVM
    options for a local master, then ``conf`` (which wins)."""
    out = dict(SESSION_DEFAULTS)
    if master.startswith("local"):
        out["spark.driver.extraJavaOptions"] = LOCAL_DRIVER_JAVA_OPTIONS
        # Everything of a local session stays on the loopback interface (Spark would otherwise resolve the
        # host name and pick the first non-loopback address).
        out.update(LOCAL_ADDRESSES)
    out.update(conf or {})
    return out


def spark_session(master: str | None = None, app_name: str = "kafkatier", conf: Mapping[str, str] | None = None,
                  class_archive: bool = False):
    """A SparkSession on ``master`` (default ``local[*]``).  With ``class_archive`` a local session's driver JVM
    maps (or, the first time, records) a class archive (:mod:`kafkatier.spark.class_archive`) unless ``conf``
    sets the driver's JVM options."""
    import pyspark
    from pyspark.sql import SparkSession

    master = master or "local[*]"
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = session_conf(master, conf)
    if master.startswith("local"):
        if not os.environ.get("PYSPARK_PYTHON"):
            # Local workers (tasks, and the planner workers that call the data source's reader() and writer())
            # must import this very environment's kafkatier and confluent-kafka.  The environment variable
            # reaches both; the spark.pyspark.python setting does not reach the planner workers.
            os.environ["PYSPARK_PYTHON"] = sys.executable
        # spark-submit would otherwise resolve the host name and look through the network interfaces (and warn
        # that the name resolves to a loopback address).
        os.environ.setdefault("SPARK_LOCAL_IP", LOCAL_ADDRESSES["spark.driver.host"])
        if class_archive and "spark.driver.extraJavaOptions" not in (conf or {}):
            spark_home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
            plan = _class_archive_plan(os.path.join(spark_home, "jars"))
            if plan is not None and plan.java_options:
                settings["spark.driver.extraJavaOptions"] += " " + plan.java_options
                log.info("driver class archive %s", kv(archive=plan.archive, recording=plan.recording))
    # The launcher runs on this machine whatever the master.
    os.environ.setdefault(LAUNCHER_ENV, LOCAL_DRIVER_JAVA_OPTIONS)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    threading.Thread(target=_look_up_data_sources, args=(spark,), name="spark-data-source-lookup",
                     daemon=True).start()
    return spark


def _class_archive_plan(spark_jars: str) -> ArchivePlan | None:
    """The driver's class archive options, None without one; whatever goes wrong, the session runs without it
    and one line says why (a warning for what the user may want to fix)."""
    try:
        archive = ClassArchive.for_session(LOCAL_DRIVER_JAVA_OPTIONS, spark_jars)
        plan = archive.plan() if archive is not None else None
    except OSError as e:
        log.warning("driver class archive unusable, running without it %s", kv(error=e))
        return None
    if plan is not None and plan.note:
        (log.warning if plan.warning else log.info)("driver class archive: %s", plan.note)
    return plan


def _look_up_data_sources(spark) -> None:
    """Spark looks the installed Python data sources up once per driver, in a Python process of its own
    (``pyspark.sql.worker.lookup_data_sources``), when a session first needs one; ``register`` needs it too.
    Run in a thread from :func:`spark_session`, it overlaps the caller's next steps (building the DataFrame is
    the JVM's first query analysis); the first ``format("kafkatier")`` waits for it if it is not done.  A
    failure here is left for that call to report."""
    try:
        register(spark)
    except Exception as e:  # noqa: BLE001 - save() / load() look the source up again and report
        log.debug("data source look-up in the background failed %s", kv(error=e))


# ---------------------------------------------------------------------------------------------- inputs

def generated_rows(spark, rows: int, record_size: int = 100, partitions: int | None = None):
    """``rows`` rows ``key = "key-<n>"``, ``value`` = ``record_size`` bytes (the row number, zero-padded)."""
    from pyspark.sql import functions as F

    df = spark.range(0, rows, numPartitions=partitions or spark.sparkContext.defaultParallelism)
    digits = F.col("id").cast("string")
    if record_size >= MAX_ID_DIGITS:
        # The last record_size bytes of record_size zeros followed by the digits: two copies of a value.
        # Spark's lpad copies its pad one character at a time (an unchecked copy of one byte each), which
        # was most of the driver's CPU per row of a generated job.
        value = F.substring(F.concat(F.lit(b"0" * record_size), digits.cast("binary")), -record_size, record_size)
    else:   # lpad's result, which keeps the leftmost digits when there are more than record_size of them
        value = F.lpad(digits, record_size, "0").cast("binary")
    return df.select(F.concat(F.lit("key-"), digits).alias("key"), value.alias("value"))


def input_format(path: str) -> str:
    """Spark's format name for an input file; a bad name or a missing file raises :class:`JobInputError`."""
    fmt = INPUT_FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise JobInputError(f"--input {path}: unknown file type (use .csv, .parquet or .json)")
    if not os.path.exists(path):
        raise JobInputError(f"--input {path}: no such file")
    return fmt


def output_format(path: str) -> str:
    fmt = OUTPUT_FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise JobInputError(f"--output {path}: unknown file type (use .parquet, .json or .csv)")
    return fmt


def file_rows(spark, path: str, rows: int | None = None):
    """Rows of a CSV (with a header line), Parquet or JSON-lines file.  A file with a ``value`` column is
    written as it is (``key``, ``headers``, ``partition``, ``topic`` columns too); otherwise each row becomes
    a JSON ``value``."""
    from pyspark.sql import functions as F

    fmt = input_format(path)
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    df = reader.load(path)
    if not any(c.lower() == "value" for c in df.columns):
        df = df.select(F.to_json(F.struct(*df.columns)).alias("value"))
    return df.limit(rows) if rows is not None else df


# ---------------------------------------------------------------------------------------------- progress

class StageProgress:
    """A tqdm bar of the tasks of the jobs Spark runs in this thread's job group, polled from Spark's status
    tracker until :meth:`close`."""

    def __init__(self, spark, description: str, enabled: bool = True):
        self.spark = spark
        self.group = f"kafkatier-{id(self)}"
        self.description = description
        self.enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StageProgress:
        self.spark.sparkContext.setJobGroup(self.group, self.description)
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _tasks(self) -> tuple[int, int]:
        tracker = self.spark.sparkContext.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in (job.stageIds if job else []):
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def _run(self) -> None:
        from tqdm import tqdm

        with tqdm(desc=self.description, unit="task", file=sys.stderr, leave=True) as bar:
            while True:
                stopping = self._stop.wait(PROGRESS_INTERVAL_S)
                done, total = self._tasks()
                if total and bar.total != total:
                    bar.total = total
                bar.update(done - bar.n)
                if stopping:
                    break


# ---------------------------------------------------------------------------------------------- jobs

@attrs.frozen
class ProduceResult:
    topic: str
    rows: int
    seconds: float


@attrs.frozen
class ReadResult:
    topic: str
    rows: int
    value_bytes: int
    per_partition: dict[int, tuple[int, int, int]]  # partition -> (rows, first offset, last offset)
    output: str | None
    seconds: float


def produce(spark, df, bootstrap_servers: str, topic: str, options: Mapping[str, str] | None = None,
            progress: bool = True, rows: int | None = None) -> ProduceResult:
    """Write ``df`` to ``topic`` through the data source (``mode("append")``); ``rows`` is ``df``'s row count
    when known (otherwise counting it costs one more Spark job over the input)."""
    start = time.monotonic()
    writer = (df.write.format(NAME).mode("append").option("kafka.bootstrap.servers", bootstrap_servers)
              .option("topic", topic))
    for k, v in (options or {}).items():
        writer = writer.option(k, v)
    with StageProgress(spark, f"writing {topic}", enabled=progress):
        rows = df.count() if rows is None else rows
        writer.save()
    seconds = time.monotonic() - start
    log.info("spark produce done %s", kv(topic=topic, rows=rows, seconds=round(seconds, 2)))
    return ProduceResult(topic, rows, seconds)


def read(spark, bootstrap_servers: str, topic: str, output: str | None = None,
         options: Mapping[str, str] | None = None, progress: bool = True) -> ReadResult:
    """Read ``topic`` from the earliest to the latest offset; write it to ``output`` (format by extension)
    when given; count rows and value bytes per partition."""
    from pyspark.sql import functions as F

    fmt = output_format(output) if output is not None else None
    start = time.monotonic()
    reader = spark.read.format(NAME).option("kafka.bootstrap.servers", bootstrap_servers).option("subscribe", topic)
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    with StageProgress(spark, f"reading {topic}", enabled=progress):
        df = reader.load()
        if output is not None:
            df = df.cache()
            out = df.withColumn("key", F.col("key").cast("string")).withColumn("value", F.col("value").cast("string")) \
                if fmt == "csv" else df
            out = out.drop("headers") if fmt == "csv" else out
            out.write.format(fmt).mode("overwrite").save(output)
        stats = (df.groupBy("partition")
                 .agg(F.count("*").alias("rows"), F.sum(F.length("value")).alias("bytes"),
                      F.min("offset").alias("first"), F.max("offset").alias("last"))
                 .collect())
        if output is not None:
            df.unpersist()
    per_partition = {r["partition"]: (r["rows"], r["first"], r["last"]) for r in stats}
    rows = sum(r["rows"] for r in stats)
    seconds = time.monotonic() - start
    log.info("spark read done %s", kv(topic=topic, rows=rows, seconds=round(seconds, 2)))
    return ReadResult(topic, rows, sum(r["bytes"] or 0 for r in stats), per_partition, output, seconds)
