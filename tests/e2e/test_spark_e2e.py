"""The ``kafkatier`` PySpark data source against real broker processes (scenario 45 of
docs/acceptance.md and issue 12).

One local SparkSession for the whole test session (``spark`` fixture), one tiered 3-broker cluster for the
module, and a cluster of its own for the test that kills brokers.  What is checked: 100,000 rows written and
read back byte-identical (keys, values, headers, partitions) and identical to what a plain consumer sees; the
``topic`` option against the column; the reader's offsets and subscriptions; every error found before work
leaves the topics untouched; a broker killed mid-write loses no row and a leader killed mid-read loses none;
a tiered topic read from offset 0; ``kafkatier spark produce`` of a JSON file.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from kafkatier.logsetup import get_logger
from kafkatier.waiting import wait_for
from kip950_support import unique

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
log = get_logger("test.spark")

WAIT_S = 60.0
ROWS = 100_000


# ------------------------------------------------------------------------------------------------ helpers

def create_topic(cluster, topic: str, partitions: int = 1, rf: int = 3, configs: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})], request_timeout=30)
    futures[topic].result(timeout=WAIT_S)

    def online() -> bool:
        return all(state(cluster, topic, p)["leader"] >= 0 and len(state(cluster, topic, p)["isr"]) == rf
                   for p in range(partitions))
    wait_for(online, WAIT_S, interval=0.1, ignore=(Exception,), message=f"{topic} online")


def state(cluster, topic: str, partition: int) -> dict:
    return json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])


def end_offsets(cluster, topic: str, partitions: int) -> list[int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused"})
    try:
        return [consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def topic_names(cluster) -> set[str]:
    return set(AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=10).topics)


def plain_consume(cluster, topic: str, partition: int, count: int) -> list:
    """The first ``count`` records of one partition as a plain confluent-kafka consumer sees them."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                                         "enable.auto.commit": False})
    out = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)])

        def done() -> bool:
            out.extend(m for m in consumer.consume(count - len(out), 0.5) if m.error() is None)
            return len(out) >= count
        wait_for(done, WAIT_S, interval=0, message=f"{count} records of {topic}-{partition}")
        return out
    finally:
        consumer.close()


def writer(df, cluster, **options):
    w = df.write.format("kafkatier").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def reader(spark, cluster, **options):
    r = spark.read.format("kafkatier").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


# ------------------------------------------------------------------------------------- write and read back

def rows_df(spark, n: int, partitions: int):
    """Binary keys (every tenth null), values of 32-128 arbitrary bytes, an explicit partition, and two
    headers (one with an empty value) on all rows but every seventh."""
    key = F.unhex(F.sha2(F.concat(F.lit("k"), F.col("id").cast("string")), 256))
    value = F.expr("unhex(repeat(sha2(cast(id as string), 256), 1 + cast(id % 4 as int)))")
    headers = F.array(F.struct(F.lit("seq").alias("key"), F.col("id").cast("string").cast("binary").alias("value")),
                      F.struct(F.lit("empty").alias("key"), F.lit(b"").alias("value")))
    return spark.range(0, n, numPartitions=4).select(
        F.when(F.col("id") % 10 == 0, F.lit(None).cast("binary")).otherwise(key).alias("key"),
        value.alias("value"),
        (F.col("id") % partitions).cast("int").alias("partition"),
        F.when(F.col("id") % 7 == 0, F.lit(None)).otherwise(headers).alias("headers"))


def multiset_hash(df, cols) -> tuple[int, int]:
    """(rows, sum of row hashes): equal for two DataFrames holding the same rows the same number of times."""
    row = df.agg(F.count("*").alias("n"), F.sum(F.xxhash64(*cols).cast("decimal(38,0)")).alias("h")).collect()[0]
    return row["n"], int(row["h"])


def expected_value(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * (1 + i % 4)


def test_100k_rows_round_trip_byte_identical(spark, tiered_cluster):
    c, topic = tiered_cluster, unique("roundtrip")
    create_topic(c, topic, partitions=3, rf=2)
    df = rows_df(spark, ROWS, 3)
    writer(df, c, topic=topic).mode("append").save()
    assert end_offsets(c, topic, 3) == [ROWS // 3 + 1, ROWS // 3, ROWS // 3]     # each row exactly once

    back = reader(spark, c, subscribe=topic, includeHeaders="true").cache()   # read the topic once
    assert back.rdd.getNumPartitions() == 3                                      # one task per Kafka partition
    cols = ["key", "value", "partition", "headers"]
    assert back.count() == ROWS
    assert multiset_hash(back, cols) == multiset_hash(df, cols)                  # the same rows, each once
    per_partition = {r["partition"]: r for r in back.groupBy("partition").agg(
        F.min("offset").alias("first"), F.max("offset").alias("last"), F.count("*").alias("n"),
        F.countDistinct("topic").alias("topics"), F.max("timestampType").alias("tt")).collect()}
    assert {p: (r["first"], r["last"], r["n"]) for p, r in per_partition.items()} == {
        0: (0, ROWS // 3, ROWS // 3 + 1), 1: (0, ROWS // 3 - 1, ROWS // 3), 2: (0, ROWS // 3 - 1, ROWS // 3)}
    assert all(r["topics"] == 1 and r["tt"] == 0 for r in per_partition.values())  # CreateTime

    # An independent client sees the same bytes: partition 1 holds the rows 1, 4, 7, ...
    plain = plain_consume(c, topic, 1, ROWS // 3)
    assert sorted((m.key() or b"", m.value(), m.headers() or []) for m in plain) == sorted(
        (b"" if i % 10 == 0 else hashlib.sha256(f"k{i}".encode()).digest(), expected_value(i),
         [] if i % 7 == 0 else [("seq", str(i).encode()), ("empty", b"")]) for i in range(1, ROWS, 3))
    back.unpersist()


def test_topic_option_overrides_the_topic_column(spark, tiered_cluster):
    c = tiered_cluster
    a, b = unique("opt-a"), unique("opt-b")
    for t in (a, b):
        create_topic(c, t, partitions=1, rf=1)
    df = spark.range(0, 100, numPartitions=2).select(
        F.col("id").cast("string").alias("value"),
        F.when(F.col("id") < 30, F.lit(a)).otherwise(F.lit(b)).alias("topic"))
    writer(df, c, topic=a).mode("append").save()
    assert (end_offsets(c, a, 1), end_offsets(c, b, 1)) == ([100], [0])       # the option wins
    writer(df, c).mode("append").save()
    assert (end_offsets(c, a, 1), end_offsets(c, b, 1)) == ([130], [70])      # without it, the column routes
    values = {r["value"].decode() for r in reader(spark, c, subscribe=b).collect()}
    assert values == {str(i) for i in range(30, 100)}


def test_reader_subscriptions_offsets_and_min_partitions(spark, tiered_cluster):
    c = tiered_cluster
    t1, t2 = unique("offs-x"), unique("offs-y")
    for t in (t1, t2):
        create_topic(c, t, partitions=3, rf=1)
        df = spark.range(0, 60).select(F.col("id").cast("string").alias("value"),
                                       (F.col("id") % 3).cast("int").alias("partition"))
        writer(df, c, topic=t).mode("append").save()

    both = reader(spark, c, subscribePattern=f"({t1}|{t2})")
    assert both.count() == 120 and both.rdd.getNumPartitions() == 6
    assigned = reader(spark, c, assign=json.dumps({t1: [0, 2]}))
    assert sorted({(r["topic"], r["partition"]) for r in assigned.collect()}) == [(t1, 0), (t1, 2)]

    ranged = reader(spark, c, subscribe=t1,
                    startingOffsets=json.dumps({t1: {"0": 5, "1": -2, "2": -1}}),
                    endingOffsets=json.dumps({t1: {"0": 15, "1": -1, "2": -1}}))
    got = sorted((r["partition"], r["offset"]) for r in ranged.collect())
    assert got == [(0, o) for o in range(5, 15)] + [(1, o) for o in range(20)]

    split = reader(spark, c, subscribe=t1, minPartitions="7")
    assert split.rdd.getNumPartitions() >= 7 and split.count() == 60
    assert split.select("partition", "offset").distinct().count() == 60
    assert reader(spark, c, subscribe=t1, startingOffsets="latest").count() == 0


def test_fail_on_data_loss_for_offsets_below_the_log_start(spark, tiered_cluster):
    c, t = tiered_cluster, unique("loss")
    create_topic(c, t, partitions=1, rf=1)
    writer(spark.range(0, 20).select(F.col("id").cast("string").alias("value")), c, topic=t).mode("append").save()
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    from confluent_kafka import TopicPartition
    admin.delete_records([TopicPartition(t, 0, 10)])[TopicPartition(t, 0, 10)].result(timeout=WAIT_S)

    from_zero = json.dumps({t: {"0": 0}})
    with pytest.raises(AnalysisException, match=r"Offsets \[0, 10\) of .* are gone"):
        reader(spark, c, subscribe=t, startingOffsets=from_zero).count()
    skipped = reader(spark, c, subscribe=t, startingOffsets=from_zero, failOnDataLoss="false")
    assert sorted(r["offset"] for r in skipped.collect()) == list(range(10, 20))
    assert reader(spark, c, subscribe=t).count() == 10                         # earliest = log start offset


# ------------------------------------------------------------------------------------------ errors before work

def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_errors_before_work_write_nothing(spark, tiered_cluster):
    c, t = tiered_cluster, unique("errors")
    create_topic(c, t, partitions=1, rf=1)
    good = spark.range(0, 10).select(F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value"))

    def fails(df, match: str, mode: str | None = "append", **options) -> None:
        w = writer(df, c, **{"topic": t, "metadataTimeoutMs": "3000", **options})
        w = w.mode(mode) if mode else w
        with pytest.raises(AnalysisException, match=match):
            w.save()

    fails(good, "UNSUPPORTED_DATA_SOURCE_SAVE_MODE", mode=None)
    fails(good, "Save mode overwrite not allowed for Kafka", mode="overwrite")
    fails(good.select("key"), "Required attribute 'value' not found")
    fails(good.select(F.col("key"), F.lit(1).alias("value")), "value attribute type must be a string or binary, got int")
    fails(good.withColumn("partition", F.lit("0")), "partition attribute type must be an int, got string")
    fails(good.withColumn("headers", F.lit("h")), "headers attribute type must be array")
    fails(good, "topic option required when no 'topic' attribute is present", topic=None)
    fails(good, "cannot reach the Kafka brokers at 127.0.0.1:", **{"kafka.bootstrap.servers": closed_port()})
    fails(good, "Kafka option 'group.id' is not supported", **{"kafka.group.id": "g"})
    fails(good, "bad kafka.\\* option: .*buffer.memory", **{"kafka.buffer.memory": "1000"})
    missing = unique("missing")
    fails(good, f"topic '{missing}' does not exist and was not auto-created",
          topic=missing, **{"kafka.allow.auto.create.topics": "false"})
    assert end_offsets(c, t, 1) == [0]                                         # nothing half-written
    assert missing not in topic_names(c)

    def read_fails(match: str, **options) -> None:
        with pytest.raises(AnalysisException, match=match):
            reader(spark, c, metadataTimeoutMs="3000", **options).count()
    read_fails("topic\\(s\\) 'nope-[0-9a-f]+' do not exist", subscribe=unique("nope"))
    read_fails("exactly one of the options subscribe, subscribePattern, assign is required")
    read_fails("cannot reach the Kafka brokers", subscribe=t, **{"kafka.bootstrap.servers": closed_port()})
    read_fails("option startingOffsets must give an offset for every partition read",
               subscribe=t, startingOffsets=json.dumps({"other": {"0": 1}}))


def test_the_message_is_the_first_line_and_typos_are_refused(spark, tiered_cluster):
    """The first line Spark shows is the data source's message; a misspelt option names the one meant; a
    refused bootstrap address fails at once rather than after a timeout."""
    c, t = tiered_cluster, unique("first-line")
    create_topic(c, t, partitions=1, rf=1)
    good = spark.range(0, 10).select(F.col("id").cast("string").alias("value"))
    with pytest.raises(AnalysisException) as e:
        reader(spark, c, subscribe=t, startingOffset="latest").count()
    first = str(e.value).splitlines()[0]                  # Spark hands the options over lower-cased
    assert first.startswith("[PYTHON_DATA_SOURCE_ERROR] Failed to ") and first.endswith(
        "kafkatier: unknown option 'startingoffset': did you mean 'startingOffsets'?"), first
    with pytest.raises(AnalysisException) as e:
        writer(good, c, topic=t, exactlyonce="true", transactionalIdPrefx="x").mode("append").save()
    assert str(e.value).splitlines()[0].lower().endswith(
        "kafkatier: unknown option 'transactionalidprefx': did you mean 'transactionalidprefix'?")
    start = time.monotonic()
    with pytest.raises(AnalysisException) as e:
        writer(good, c, topic=t, **{"kafka.bootstrap.servers": closed_port()}).mode("append").save()
    assert "kafkatier: cannot reach the Kafka brokers at 127.0.0.1:" in str(e.value).splitlines()[0]
    assert "connection refused" in str(e.value).splitlines()[0]
    # Spark's planner process start-up is most of it; the driver's check itself answers at once.
    log.info("refused bootstrap address reported in %.1f s", time.monotonic() - start)
    assert end_offsets(c, t, 1) == [0]


# ------------------------------------------------------------------------------------------------ tiered

def local_log_start(cluster, broker_id: int, topic: str) -> int:
    for d in cluster.manager.broker(broker_id)["log_dirs"]:
        pdir = os.path.join(d, f"{topic}-0")
        if os.path.isdir(pdir):
            bases = sorted(int(n[:20]) for n in os.listdir(pdir) if n.endswith(".log"))
            return bases[0] if bases else -1
    return -1


def test_reading_a_tiered_topic_from_offset_0(spark, tiered_cluster):
    c, t = tiered_cluster, unique("tiered")
    create_topic(c, t, partitions=1, rf=2, configs={"remote.storage.enable": "true", "segment.bytes": "1024",
                                                    "local.retention.bytes": "1", "file.delete.delay.ms": "0"})
    values = spark.range(0, 60, numPartitions=1).select(F.lpad(F.col("id").cast("string"), 100, ".").alias("value"))
    # One record per produce request, so the 1 KiB segments roll every few records.
    writer(values, c, topic=t, **{"kafka.linger.ms": "0", "kafka.batch.num.messages": "1",
                                  "kafka.max.in.flight.requests.per.connection": "1"}).mode("append").save()
    leader = state(c, t, 0)["leader"]
    wait_for(lambda: local_log_start(c, leader, t) >= 30, WAIT_S, interval=0.2,
             message="the leader's local log to start past offset 30 (older segments only in remote storage)")

    back = reader(spark, c, subscribe=t, startingOffsets=json.dumps({t: {"0": 0}}))
    got = sorted((r["offset"], r["value"].decode()) for r in back.collect())
    assert got == [(i, str(i).rjust(100, ".")) for i in range(60)]



def test_the_planner_asks_every_partitions_offsets_at_once_as_a_plain_consumer_sees_them(tiered_cluster):
    """The driver's one consumer (no Spark needed): the log start and end offsets of every partition, the end
    being the last stable offset under read_committed while a transaction is open; a task's range that ends
    at a commit marker (which a consumer never returns) reads its records and stops."""
    from kafkatier.spark.metadata import BrokerCheckError, OffsetReader
    from kafkatier.spark.options import ReaderOptions, TopicPartition
    from kafkatier.spark.reader import OffsetRange, RangeConsumer

    c, t = tiered_cluster, unique("offsets")
    create_topic(c, t, partitions=3)
    producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": t})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(t, b"committed-%d" % i, partition=i % 3)
    producer.commit_transaction(WAIT_S)                    # offsets 0-9 records, 10 the commit marker
    producer.begin_transaction()
    producer.produce(t, b"open", partition=0)
    producer.flush(WAIT_S)
    partitions = [TopicPartition(t, p) for p in range(3)]
    try:
        for level, open_txn in (("read_committed", 0), ("read_uncommitted", 1)):
            options = ReaderOptions.parse({"kafka.bootstrap.servers": c.bootstrap_servers, "subscribe": t,
                                           "isolation.level": level})
            with OffsetReader(options.consumer_config, WAIT_S) as offsets:
                assert offsets.topic_partitions()[t] == 3
                marks = offsets.watermarks(partitions)
            assert marks == {tp: (0, 11 + (open_txn if tp.partition == 0 else 0)) for tp in partitions}, level
        with OffsetReader(options.consumer_config, 2.0) as offsets:
            with pytest.raises(BrokerCheckError, match=f"cannot read the offsets of {t}-7 from its leader within 2 s"):
                offsets.watermarks([TopicPartition(t, 7)])

        committed = ReaderOptions.parse({"kafka.bootstrap.servers": c.bootstrap_servers, "subscribe": t,
                                         "kafkaConsumer.pollTimeoutMs": str(int(WAIT_S * 1000))})
        batches = list(RangeConsumer(committed, OffsetRange(TopicPartition(t, 1), 0, 11)).batches())
        assert [v for b in batches for v in b.column("value").to_pylist()] == [
            b"committed-%d" % i for i in range(1, 30, 3)]
    finally:
        producer.abort_transaction(WAIT_S)


# ------------------------------------------------------------------------------------------------ failover

def kill_when(cluster, ready, leader_of, busy: threading.Event, done: list) -> threading.Thread:
    """A thread that waits for ``ready()``, then kill -9s the leader of partition ``leader_of()`` and records
    ``(broker id, whether the job was still busy)`` in ``done`` (or the exception that stopped it).  Spark jobs
    stay on the test's thread."""
    def run():
        try:
            wait_for(ready, WAIT_S, interval=0.02, ignore=(Exception,), message="the job under way")
            victim = leader_of()
            still_busy = busy.is_set()
            cluster.manager.kill_broker(victim)
            done.append((victim, still_busy))
        except Exception as e:  # noqa: BLE001 - reported by the test's assertion
            done.append(e)
    thread = threading.Thread(target=run, name="killer", daemon=True)
    thread.start()
    return thread


def job_running(spark, group: str):
    """``() -> bool``: a job of ``group`` has started its tasks (planning and the driver's checks are done)."""
    tracker = spark.sparkContext.statusTracker()

    def running() -> bool:
        return any((info := tracker.getJobInfo(j)) is not None and info.status == "RUNNING"
                   for j in tracker.getJobIdsForGroup(group))
    return running


def test_broker_kill_mid_write_loses_no_row_and_a_leader_kill_mid_read_none(spark, cluster_factory):
    c, t, n = cluster_factory(brokers=3, log_dirs=1), unique("failover"), ROWS
    create_topic(c, t, partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    df = spark.range(0, n, numPartitions=4).select(F.col("id").cast("string").alias("key"),
                                                   F.lpad(F.col("id").cast("string"), 200, "v").alias("value"))
    sc = spark.sparkContext
    busy, killed = threading.Event(), []
    try:
        # Kill the leader of partition 0 as soon as the write's tasks run.
        sc.setJobGroup("failover-write", "write during a broker kill")
        busy.set()
        killer = kill_when(c, job_running(spark, "failover-write"), lambda: state(c, t, 0)["leader"], busy, killed)
        writer(df, c, topic=t, **{"kafka.request.timeout.ms": "10000"}).mode("append").save()
        busy.clear()
        killer.join(WAIT_S)
        assert killed and killed[0][1] is True, f"the broker was not killed while the write ran: {killed}"

        # Read while the leader of the last partition (its task starts after the first two) is killed.
        sc.setJobGroup("failover-read", "read during a leader kill")
        busy.set()
        killer = kill_when(c, job_running(spark, "failover-read"), lambda: state(c, t, 2)["leader"], busy, killed)
        rows = reader(spark, c, subscribe=t).select("key").collect()
        busy.clear()
        killer.join(WAIT_S)
        assert len(killed) == 2 and killed[1][1] is True, f"the leader was not killed while the read ran: {killed}"
    finally:
        busy.clear()
        sc.setLocalProperty("spark.jobGroup.id", None)

    keys = [r["key"] for r in rows]
    distinct = set(keys)
    missing = n - len({k for k in distinct if 0 <= int(k) < n})
    duplicates = len(keys) - len(distinct)
    log.info("spark failover: %d rows written, %d in the topic, %d missing, %d duplicates (killed %s)",
             n, len(keys), missing, duplicates, killed)
    assert missing == 0                     # at least once: duplicates are possible, counted and logged above


# ------------------------------------------------------------------------------------------------ command line

def test_cli_produce(kafkatier_cli, spark, tiered_cluster, tmp_path):
    c, t = tiered_cluster, unique("cli")
    create_topic(c, t, partitions=2, rf=1)
    data = tmp_path / "rows.json"
    data.write_text("".join(json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n" for i in range(30)))
    ran = kafkatier_cli.run("spark", "produce", "--data-dir", c.data_dir, "--topic", t, "--input", str(data),
                            "--master", "local[1]", timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert f"wrote 30 rows to {t}" in ran.stdout
    got = {(r["key"], r["value"]) for r in reader(spark, c, subscribe=t).collect()}
    assert got == {(f"k{i}".encode(), f"v{i}".encode()) for i in range(30)}

    bad = kafkatier_cli.run("spark", "produce", "--data-dir", c.data_dir, "--topic", t)
    assert (bad.returncode, bad.stderr.strip()) == (2, "kafkatier spark: --rows N or --input FILE is required")


@pytest.mark.parametrize("size", [3, 19, 100])
def test_generated_rows_are_the_row_numbers_zero_padded(spark, size):
    """``spark produce --rows``' values: the row number right-aligned in ``size`` zeros (lpad's leftmost digits
    when there are more digits than bytes), built without lpad from 19 bytes up."""
    from kafkatier.spark.jobs import generated_rows

    ids = [0, 7, 1234, 98765]
    rows = generated_rows(spark, 98766, size, 2).where(F.col("key").isin([f"key-{i}" for i in ids])).collect()
    assert {r["key"]: bytes(r["value"]) for r in rows} == {f"key-{i}": str(i).rjust(size, "0")[:size].encode()
                                                           for i in ids}
