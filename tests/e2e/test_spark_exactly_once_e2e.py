"""Exactly-once Spark batch writes and a data source found without registration (issue 28).

One shared SparkSession (``local[2,3]``: a failed task is retried) and one 3-broker cluster for the module.
Checked: writing from a thread pool through new sessions that never called ``register()``; an exactly-once job
that a read_committed reader sees once; a job that fails after its tasks wrote leaving nothing visible; a task
that fails on its first attempt after writing and is retried leaving no duplicate; a re-run of the same job id
fencing the open transactions a previous run left behind; bad input refused before work.
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from kafkatier.logsetup import get_logger
from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
log = get_logger("test.spark.eos")

WAIT_S = 60.0
ROWS = 10_000


@pytest.fixture(scope="module")
def eos_cluster(module_cluster_factory):
    # Few transaction-state partitions: the first InitProducerId creates the topic, 50 partitions by default.
    return module_cluster_factory(brokers=3, log_dirs=1, overrides={"transaction.state.log.num.partitions": "4"})


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(cluster, topic: str, partitions: int = 2, rf: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, rf)], request_timeout=30)[topic].result(timeout=WAIT_S)


def write(df, cluster, topic: str, **options):
    w = (df.write.format("kafkatier").mode("append").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
         .option("topic", topic))
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def read_keys(spark, cluster, topic: str, isolation: str = "read_committed") -> list[str]:
    df = (spark.read.format("kafkatier").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
          .option("subscribe", topic).option("isolation.level", isolation).option("kafkaConsumer.pollTimeoutMs", "20000")
          .option("metadataTimeoutMs", "60000")                     # leaders re-elected after a broker kill
          .load())
    return [r["key"].decode() for r in df.select("key").collect()]


def rows(spark, n: int = ROWS, partitions: int = 4):
    return spark.range(0, n, numPartitions=partitions).select(
        F.col("id").cast("string").alias("key"), F.lpad(F.col("id").cast("string"), 50, "v").alias("value"))


def exactly_once_each(keys: list[str], n: int, prefix: str = "") -> None:
    assert len(keys) == n and set(keys) == {f"{prefix}{i}" for i in range(n)}


def slow_rows(spark, n: int, partitions: int, key_prefix: str, pause_s: float):
    """Rows whose value UDF pauses ``pause_s`` per row, so a job's tasks run for a while."""
    def value(i):
        time.sleep(pause_s)
        return str(i).rjust(50, "v")
    udf = F.udf(value, "string")
    return spark.range(0, n, numPartitions=partitions).select(
        F.concat(F.lit(key_prefix), F.col("id").cast("string")).alias("key"), udf(F.col("id")).alias("value"))


def test_found_without_register_from_a_thread_pool(spark, eos_cluster):
    """New sessions (no register() in them) on two threads write two DataFrames at once."""
    c = eos_cluster
    topics = [unique("pool-a"), unique("pool-b")]
    for t in topics:
        create_topic(c, t, partitions=1, rf=1)

    def job(topic: str) -> None:
        session = spark.newSession()                   # its own data source registry: nothing registered
        write(rows(session, 500, 2), c, topic)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(job, topics))
    for t in topics:
        exactly_once_each(read_keys(spark.newSession(), c, t), 500)


def test_exactly_once_job_commits_every_row_once(spark, eos_cluster):
    c, t = eos_cluster, unique("eos")
    create_topic(c, t)
    write(rows(spark), c, t, exactlyOnce="true", transactionalIdPrefix=unique("job"))
    exactly_once_each(read_keys(spark, c, t), ROWS)
    exactly_once_each(read_keys(spark, c, t, "read_uncommitted"), ROWS)   # committed: nothing else in the log


def failing_values(marker: str | None, fail_at: int):
    """A value column whose UDF raises at row ``fail_at`` (every attempt, or only until ``marker`` exists)."""
    def value(i):
        if i == fail_at and (marker is None or not os.path.exists(marker)):
            if marker is not None:
                open(marker, "w").close()
            raise RuntimeError(f"injected failure at row {i}")
        return str(i).rjust(50, "v")
    return F.udf(value, "string")


def test_a_failed_job_leaves_nothing_visible(spark, eos_cluster):
    c, t = eos_cluster, unique("eos-fail")
    create_topic(c, t)
    udf = failing_values(None, ROWS - 10)                 # the last partition fails near its end, every attempt
    df = spark.range(0, ROWS, numPartitions=4).select(F.col("id").cast("string").alias("key"),
                                                      udf(F.col("id")).alias("value"))
    with pytest.raises(Exception, match="injected failure"):
        write(df, c, t, exactlyOnce="true", transactionalIdPrefix=unique("job"))
    assert read_keys(spark, c, t) == []
    written = read_keys(spark, c, t, "read_uncommitted")
    log.info("failed exactly-once job: %d records in the log, none visible to read_committed", len(written))


def test_a_retried_task_writes_no_duplicate(spark, eos_cluster, tmp_path):
    """The second partition's first attempt fails after its writer received rows (Arrow batches of 500): the
    retry's transaction is the one committed, the first attempt's is aborted (by itself or by the driver)."""
    c, t = eos_cluster, unique("eos-retry")
    create_topic(c, t)
    udf = failing_values(str(tmp_path / "failed-once"), ROWS // 4 * 2 - 100)   # late in the second partition
    df = spark.range(0, ROWS, numPartitions=4).select(F.col("id").cast("string").alias("key"),
                                                      udf(F.col("id")).alias("value"))
    batch = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        write(df, c, t, exactlyOnce="true", transactionalIdPrefix=unique("job"))
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", batch)
    assert (tmp_path / "failed-once").exists()
    exactly_once_each(read_keys(spark, c, t), ROWS)
    log.info("retried task: %d records in the log (the first attempt's aborted)", len(read_keys(spark, c, t,
                                                                                               "read_uncommitted")))


def test_a_rerun_fences_the_previous_runs_open_transactions(spark, eos_cluster):
    """A previous run's tasks died with their transactions open: attempt 0 of this run's partitions (fenced by
    the new tasks), a retried attempt and a partition above this run's count (fenced by the driver)."""
    c, t, job = eos_cluster, unique("eos-rerun"), unique("job")
    create_topic(c, t)
    for tid in (f"{job}-0-0", f"{job}-1-0", f"{job}-1-2", f"{job}-3-0"):
        zombie = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": tid})
        zombie.init_transactions(WAIT_S)
        zombie.begin_transaction()
        for i in range(100):
            zombie.produce(t, b"zombie", b"zombie")
        assert zombie.flush(WAIT_S) == 0
        del zombie
    write(rows(spark, 1000, 2), c, t, exactlyOnce="true", transactionalIdPrefix=job)
    exactly_once_each(read_keys(spark, c, t), 1000)      # the zombies' rows aborted, the LSO not held back


def test_exactly_once_bad_input(spark, eos_cluster):
    c, t = eos_cluster, unique("eos-bad")
    create_topic(c, t, partitions=1, rf=1)
    with pytest.raises(AnalysisException, match="above the brokers' transaction.max.timeout.ms"):
        write(rows(spark, 10, 1), c, t, exactlyOnce="true", **{"kafka.transaction.timeout.ms": "3600000"})
    with pytest.raises(AnalysisException, match="transactionalIdPrefix needs exactlyOnce=true"):
        write(rows(spark, 10, 1), c, t, transactionalIdPrefix="x")
    with pytest.raises(AnalysisException, match="'transactional.id' is not supported"):
        write(rows(spark, 10, 1), c, t, exactlyOnce="true", **{"kafka.transactional.id": "x"})
    assert read_keys(spark, c, t, "read_uncommitted") == []


def leader(cluster, topic: str, partition: int) -> int:
    return json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])["leader"]


def log_end(cluster, topic: str, partition: int) -> int:
    """The partition's high watermark: records of open transactions count (they are in the log)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused"})
    try:
        return consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, partition), timeout=5,
                                              cached=False)[1]
    finally:
        consumer.close()


def test_exactly_once_under_a_broker_kill_9(spark, eos_cluster):
    """The leader of partition 0 is killed with SIGKILL once the tasks' transactions have records in the log:
    the job completes (librdkafka and the driver's EndTxn ride through the leader and coordinator changes)
    and a read_committed reader sees every row once."""
    c, t, n = eos_cluster, unique("eos-kill"), 6000
    create_topic(c, t, partitions=2, rf=3)
    victim = leader(c, t, 0)
    killed: list = []
    writing = threading.Event()

    def kill_when_writing() -> None:
        try:
            # Spark's planning takes minutes on a loaded machine: the deadline is the job's, not a broker's.
            wait_for(lambda: writing.is_set() and log_end(c, t, 0) > 0, 600, interval=0.1, ignore=(Exception,),
                     message="the exactly-once job's first records in the log")
            c.manager.kill_broker(victim)
            killed.append(victim)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            killed.append(e)
    killer = threading.Thread(target=kill_when_writing, name="killer", daemon=True)
    killer.start()
    try:
        writing.set()
        write(slow_rows(spark, n, 2, "", 0.002), c, t, exactlyOnce="true", transactionalIdPrefix=unique("job"),
              **{"kafka.request.timeout.ms": "10000"})
        killer.join(WAIT_S)
        assert killed == [victim], killed
    finally:
        writing.clear()
        killer.join(WAIT_S)
        if victim in killed:
            c.manager.start_broker(victim)                  # the read and the module's later tests: three brokers
    # EndTxn answers once the commit is decided; the markers reach the partitions after it (the killed leader's
    # partition through its new leader), and read_committed readers see the rows once they have.
    seen: list[str] = []

    def all_visible() -> bool:
        seen[:] = read_keys(spark, c, t)
        return len(seen) >= n
    wait_for(all_visible, WAIT_S, interval=1.0, message="every committed row visible to read_committed")
    exactly_once_each(seen, n)


def test_a_job_id_reused_by_two_jobs_at_once(spark, eos_cluster):
    """Two jobs with the same transactionalIdPrefix at once fence each other's transactions: a job that
    fails says why (naming the prefix); read_committed readers see the rows of the jobs that succeeded, each
    once, and none of a failed one."""
    c, t, job = eos_cluster, unique("eos-twice"), unique("job")
    create_topic(c, t)
    n = 1500

    def run(name: str):
        try:
            write(slow_rows(spark, n, 2, f"{name}-", 0.002), c, t, exactlyOnce="true", transactionalIdPrefix=job)
            return None
        except Exception as e:  # noqa: BLE001 - the outcome is checked below
            return e
    with ThreadPoolExecutor(2) as pool:
        outcomes = dict(zip("ab", pool.map(run, "ab")))
    failed = {k: e for k, e in outcomes.items() if e is not None}
    log.info("job id reused at once: failed %s", {k: str(e).splitlines()[0][:300] for k, e in failed.items()})
    for e in failed.values():
        text = str(e)
        assert job in text and "transactionalIdPrefix" in text, text[:3000]
    visible = read_keys(spark, c, t)
    expected = [f"{k}-{i}" for k in "ab" if k not in failed for i in range(n)]
    assert sorted(visible) == sorted(expected)
