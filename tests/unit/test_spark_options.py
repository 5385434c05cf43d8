"""The data source's option parsing and offset planning, without Spark or brokers."""
from __future__ import annotations

import json

import pytest

from kafkatier.spark.options import (SPARE_ATTEMPTS, DataSourceOptionError, OffsetSpec, ReaderOptions,
                                     Subscription, TopicPartition, WriterOptions)
from kafkatier.spark.reader import DataLossError, OffsetRange, resolve_ranges, split_ranges

B = {"kafka.bootstrap.servers": "127.0.0.1:9092, 127.0.0.1:9093"}
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_writer_options_defaults_and_pass_through():
    w = WriterOptions.parse({**B, "topic": "t", "kafka.linger.ms": "20", "KAFKA.acks": "1"})
    assert w.topic == "t"
    assert w.producer_config["bootstrap.servers"] == "127.0.0.1:9092,127.0.0.1:9093"
    assert w.producer_config["linger.ms"] == "20" and w.producer_config["acks"] == "1"
    assert WriterOptions.parse(B).producer_config["acks"] == "all"
    assert WriterOptions.parse(B).producer_config["enable.idempotence"] == "true"


@pytest.mark.parametrize("options, message", [
    ({}, "kafka.bootstrap.servers is required"),
    ({"kafka.bootstrap.servers": "nohost"}, "is not host:port"),
    ({**B, "kafka.group.id": "g"}, "'group.id' is not supported"),
    ({**B, "kafka.value.serializer": "x"}, "'value.serializer' is not supported"),
    ({**B, "topic": " "}, "option topic is empty"),
])
def test_writer_options_refused(options, message):
    with pytest.raises(DataSourceOptionError, match=message):
        WriterOptions.parse(options)


def test_reader_options():
    r = ReaderOptions.parse({**B, "subscribe": "a, b", "failOnDataLoss": "false", "minPartitions": "4"})
    assert r.subscription == Subscription("subscribe", topics=("a", "b"))
    assert (r.starting.kind, r.ending.kind, r.fail_on_data_loss, r.min_partitions) == ("earliest", "latest", False, 4)
    a = ReaderOptions.parse({**B, "assign": '{"t":[1,0]}'}).subscription
    assert a.partitions == (T1, T0)
    with pytest.raises(DataSourceOptionError, match="exactly one of"):
        ReaderOptions.parse({**B, "subscribe": "a", "assign": '{"t":[0]}'})
    with pytest.raises(DataSourceOptionError, match="endingOffsets cannot be earliest"):
        OffsetSpec.parse("endingOffsets", "earliest", "latest")
    with pytest.raises(DataSourceOptionError, match="must be earliest, latest or JSON"):
        OffsetSpec.parse("startingOffsets", "{bad", "earliest")
    with pytest.raises(DataSourceOptionError, match="must be true or false"):
        ReaderOptions.parse({**B, "subscribe": "a", "failOnDataLoss": "maybe"})


def reader_options(**options) -> ReaderOptions:
    return ReaderOptions.parse({**B, "subscribe": "t", **options})


def test_offsets_resolve_against_the_log_start_and_end():
    marks = {T0: (10, 100), T1: (0, 50)}
    assert resolve_ranges(reader_options(), marks) == [OffsetRange(T0, 10, 100), OffsetRange(T1, 0, 50)]
    spec = reader_options(startingOffsets=json.dumps({"t": {"0": 20, "1": -1}}),
                          endingOffsets=json.dumps({"t": {"0": 30, "1": -1}}))
    assert resolve_ranges(spec, marks) == [OffsetRange(T0, 20, 30), OffsetRange(T1, 50, 50)]
    below = json.dumps({"t": {"0": 5, "1": 0}})
    with pytest.raises(DataLossError, match=r"Offsets \[5, 10\) of t-0 are gone"):
        resolve_ranges(reader_options(startingOffsets=below), marks)
    assert resolve_ranges(reader_options(startingOffsets=below, failOnDataLoss="false"), marks)[0] == \
        OffsetRange(T0, 10, 100)
    with pytest.raises(DataSourceOptionError, match="missing: t-1"):
        resolve_ranges(reader_options(startingOffsets=json.dumps({"t": {"0": 20}})), marks)
    with pytest.raises(DataSourceOptionError, match="out of range"):
        resolve_ranges(reader_options(endingOffsets=json.dumps({"t": {"0": 200, "1": -1}})), marks)


def test_min_partitions_splits_ranges_in_proportion():
    ranges = [OffsetRange(T0, 0, 20), OffsetRange(T1, 0, 20)]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges
    split = split_ranges([OffsetRange(T0, 0, 90), OffsetRange(T1, 0, 10)], 7)
    assert len(split) == 7
    assert sum(r.size for r in split) == 100 and all(r.size > 0 for r in split)
    assert [r.tp for r in split].count(T1) == 1
    assert split_ranges([OffsetRange(T0, 0, 2)], 5) == [OffsetRange(T0, 0, 1), OffsetRange(T0, 1, 2)]


def test_cli_prints_one_line_of_the_data_source_error():
    from kafkatier.cli.spark import source_error
    planner = Exception("[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: Traceback\n"
                        "  File x\nkafkatier.spark.metadata.BrokerCheckError: topic 't' does not exist\n SQLSTATE: 38000")
    assert source_error(planner) == ("BrokerCheckError", "topic 't' does not exist")
    task = Exception("An error occurred while calling o65.save.\n: org.apache.spark.SparkException: Job aborted\n"
                     "RuntimeError: kafkatier sink: task 0 (attempt 0): 3 record(s) not delivered\n\tat x")
    assert source_error(task) == ("RuntimeError", "kafkatier sink: task 0 (attempt 0): 3 record(s) not delivered")
    assert source_error(Exception("\nsomething else\nmore")) == (None, "something else")


# ------------------------------------------------------------------------------------------- exactly once

def test_each_task_attempt_has_its_own_transactional_id():
    """A failed attempt's Python worker can initialise its producer after the retry did: with one id per
    partition it would fence the attempt Spark keeps.  The driver fences the other attempts' ids instead."""
    eos = WriterOptions.parse({**B, "exactlyOnce": "true", "transactionalIdPrefix": "job"}).exactly_once
    assert eos.transactional_id(1, 0) != eos.transactional_id(1, 1)
    ids = eos.attempt_ids(range(2), highest_attempt=1)
    assert {eos.transactional_id(p, a) for p in range(2) for a in range(2)} <= set(ids)
    assert len(ids) == len(set(ids)) == 2 * (2 + SPARE_ATTEMPTS)       # the spares: later or speculative attempts


def test_exactly_once_options():
    w = WriterOptions.parse({**B, "exactlyOnce": "true", "transactionalIdPrefix": " job-7 "})
    assert w.exactly_once.prefix == "job-7" and w.exactly_once.transactional_id(3, 0) == "job-7-3-0"
    assert w.exactly_once.timeout_ms == 900_000 and w.producer_config["transaction.timeout.ms"] == "900000"
    assert w.flush_timeout_s == 300 + 30                              # message.timeout.ms below the txn timeout
    short = WriterOptions.parse({**B, "exactlyOnce": "true", "kafka.transaction.timeout.ms": "60000"})
    assert short.exactly_once.timeout_ms == 60_000 and short.flush_timeout_s == 60 + 30
    assert short.exactly_once.prefix.startswith("kafkatier-spark-")  # random per job without a prefix
    assert WriterOptions.parse(B).exactly_once is None


@pytest.mark.parametrize("options, message", [
    ({**B, "transactionalIdPrefix": "x"}, "transactionalIdPrefix needs exactlyOnce=true"),
    ({**B, "exactlyOnce": "yes"}, "exactlyOnce must be true or false"),
    ({**B, "exactlyOnce": "true", "transactionalIdPrefix": " "}, "transactionalIdPrefix is empty"),
    ({**B, "exactlyOnce": "true", "kafka.transactional.id": "t"}, "'transactional.id' is not supported"),
    ({**B, "exactlyOnce": "true", "kafka.acks": "1"}, "exactlyOnce needs kafka.acks=all"),
    ({**B, "exactlyOnce": "true", "kafka.transaction.timeout.ms": "10"}, "must be >= 1000"),
])
def test_exactly_once_bad_options(options, message):
    with pytest.raises(DataSourceOptionError, match=message):
        WriterOptions.parse(options)


def test_reader_isolation_level():
    base = {**B, "subscribe": "t"}
    assert ReaderOptions.parse(base).consumer_config["isolation.level"] == "read_committed"
    assert ReaderOptions.parse({**base, "isolation.level": "read_uncommitted"}).consumer_config[
        "isolation.level"] == "read_uncommitted"
    assert ReaderOptions.parse({**base, "kafka.isolation.level": "read_uncommitted"}).consumer_config[
        "isolation.level"] == "read_uncommitted"
    with pytest.raises(DataSourceOptionError, match="isolation.level must be read_committed or read_uncommitted"):
        ReaderOptions.parse({**base, "isolation.level": "committed"})


@pytest.mark.parametrize("name, meant", [
    ("startingOffset", "startingOffsets"), ("endingoffsets ", "endingOffsets"), ("subscibe", "subscribe"),
    ("failOnDataloss", None), ("exactlyonce", None), ("exactly-once", "exactlyOnce"),
    ("transactionalIdPrefx", "transactionalIdPrefix"), ("includeHeader", "includeHeaders"),
    ("kafka_bootstrap.servers", "kafka.bootstrap.servers"), ("kafkaConsumer.pollTimeout", "kafkaConsumer.pollTimeoutMs"),
    ("bootstrap.servers", "kafka.bootstrap.servers"),
])
def test_misspelt_options_are_refused_with_the_option_meant(name, meant):
    """Spark ignores options a source does not know; a name close to one of ours is a typo."""
    options = {**B, "subscribe": "t", name: "x"}
    if meant is None:                                    # options are case-insensitive: the same option
        with pytest.raises(DataSourceOptionError, match="must be true or false"):
            ReaderOptions.parse(options) if "loss" in name.lower() else WriterOptions.parse(options)
        return
    with pytest.raises(DataSourceOptionError, match=f"unknown option '{name}': did you mean '{meant}'"):
        ReaderOptions.parse(options)
    with pytest.raises(DataSourceOptionError, match="did you mean"):
        WriterOptions.parse({**B, name: "x"})


def test_unrelated_unknown_options_are_ignored_as_spark_does():
    assert WriterOptions.parse({**B, "path": "/x", "checkpointLocation": "/c"}).topic is None
    assert ReaderOptions.parse({**B, "subscribe": "t", "someOtherSetting": "1"}).subscription.topics == ("t",)


def test_metadata_timeout_follows_the_request_timeout():
    from kafkatier.spark.options import metadata_timeout_s
    assert metadata_timeout_s(B, 10.0) == 10.0
    assert metadata_timeout_s({**B, "kafka.request.timeout.ms": "4000"}, 10.0) == 4.0
    assert metadata_timeout_s({**B, "kafka.request.timeout.ms": "4000", "metadataTimeoutMs": "2500"}, 10.0) == 2.5


def test_refused_bootstrap_addresses_fail_at_once():
    import socket
    import time

    from kafkatier.spark.metadata import BrokerCheckError, probe_bootstrap
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    start = time.monotonic()
    with pytest.raises(BrokerCheckError, match=f"cannot reach the Kafka brokers at {closed}.*connection refused"):
        probe_bootstrap(closed, 10.0)
    assert time.monotonic() - start < 2.0
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        probe_bootstrap(f"{closed},127.0.0.1:{listening.getsockname()[1]}", 10.0)   # one broker answers


def test_the_message_is_the_first_line_of_the_formatted_error():
    """PySpark shows a data source's error as traceback.TracebackException(...).format() of it."""
    import traceback

    from kafkatier.spark.errors import message_first
    try:
        with message_first(Exception):
            WriterOptions.parse({**B, "startingOffset": "x"})
    except DataSourceOptionError as e:
        text = "".join(traceback.TracebackException(type(e), e, e.__traceback__, compact=True).format())
    assert text.splitlines()[0] == "kafkatier: unknown option 'startingOffset': did you mean 'startingOffsets'?"
    assert text.splitlines()[-1].startswith("kafkatier.spark.options.DataSourceOptionError: unknown option")


def test_messages_become_one_arrow_batch_with_sparks_kafka_columns():
    import pyarrow as pa
    from confluent_kafka import Message

    from kafkatier.spark.reader import _arrow_schema, _to_arrow

    msgs = [Message(topic="t", partition=3, offset=7, key=b"k", value=b"v1", timestamp=(1, 1_700_000_000_123),
                    headers=[("h", b"x")]),
            Message(topic="t", partition=3, offset=9, key=None, value=b"v2", timestamp=(2, 1_700_000_000_456))]
    batch = _to_arrow(msgs, TopicPartition("t", 3), _arrow_schema(True), True, pa).to_pydict()
    assert batch["key"] == [b"k", None] and batch["value"] == [b"v1", b"v2"] and batch["offset"] == [7, 9]
    assert batch["topic"] == ["t", "t"] and batch["partition"] == [3, 3]
    assert [t.timestamp() for t in batch["timestamp"]] == [1_700_000_000.123, 1_700_000_000.456]
    assert batch["timestampType"] == [0, 1]                           # Spark's: 0 CreateTime, 1 LogAppendTime
    assert batch["headers"] == [[{"key": "h", "value": b"x"}], None]  # null, not [], without headers


def test_error_events_are_split_from_the_records_of_a_consume():
    from confluent_kafka import KafkaError, Message

    from kafkatier.spark.reader import _split_errors

    records = [Message(topic="t", partition=0, offset=i, value=b"v") for i in range(3)]
    eof = Message(topic="t", partition=0, offset=3, error=KafkaError(KafkaError._PARTITION_EOF))
    assert _split_errors(records) == (records, [])
    assert _split_errors(records + [eof]) == (records, [eof])
    assert _split_errors([]) == ([], [])


def test_at_least_once_processes_do_not_import_the_transaction_client():
    """Spark forks a process per job (planner) and per task that imports the writer: kafka-python and the
    protocol codecs, which only exactly-once needs, cost about a second of start-up there on a loaded machine."""
    import subprocess
    import sys

    code = ("import sys, kafkatier.spark.writer, kafkatier.spark.reader, kafkatier.spark.source; "
            "print(sorted(m for m in ('kafka', 'kafkatier.admin.client', 'kafkatier.protocol.codec') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_read_planners_consumer_checks_the_kafka_options_before_asking_the_brokers():
    from kafkatier.spark.metadata import OffsetReader
    with pytest.raises(DataSourceOptionError, match=r"bad kafka\.\* option: .*fetch\.max\.bytes"):
        OffsetReader({**ReaderOptions.parse({**B, "subscribe": "t"}).consumer_config, "fetch.max.bytes": "x"}, 1.0)
    with OffsetReader(ReaderOptions.parse({**B, "subscribe": "t"}).consumer_config, 1.0) as offsets:
        assert offsets.watermarks([]) == {}                           # nothing to ask: no request


def test_the_read_planner_reports_refused_brokers_at_once():
    import socket
    import time

    from kafkatier.spark.metadata import BrokerCheckError, OffsetReader
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    start = time.monotonic()
    with OffsetReader({"bootstrap.servers": closed}, 10.0) as offsets:
        with pytest.raises(BrokerCheckError, match=f"cannot reach the Kafka brokers at {closed}"):
            offsets.topic_partitions()
    assert time.monotonic() - start < 5.0


def test_a_local_session_starts_its_jvm_quickly_unless_the_caller_says_otherwise():
    from kafkatier.spark.jobs import LOCAL_DRIVER_JAVA_OPTIONS, session_conf

    local = session_conf("local[2]")
    assert local["spark.driver.extraJavaOptions"] == LOCAL_DRIVER_JAVA_OPTIONS
    assert local["spark.ui.enabled"] == "false"
    assert "spark.driver.extraJavaOptions" not in session_conf("spark://h:7077")    # a cluster's driver: untouched
    mine = session_conf("local[*]", {"spark.driver.extraJavaOptions": "-Xmx2g", "spark.ui.enabled": "true"})
    assert mine["spark.driver.extraJavaOptions"] == "-Xmx2g" and mine["spark.ui.enabled"] == "true"


def test_cli_conf_settings_reach_the_session_and_bad_ones_are_usage_errors():
    from kafkatier.cli.main import UsageError, build_parser
    from kafkatier.cli.spark import _conf

    args = build_parser().parse_args(["spark", "produce", "--topic", "t", "--rows", "1",
                                      "--conf", "spark.ui.enabled=true", "--conf", "spark.x = a=b"])
    assert _conf(args) == {"spark.ui.enabled": "true", "spark.x": " a=b"}
    with pytest.raises(UsageError, match="--conf 'spark.ui.enabled': expected KEY=VALUE"):
        _conf(build_parser().parse_args(["spark", "read", "--topic", "t", "--conf", "spark.ui.enabled"]))


@pytest.mark.parametrize("command", [["read"], ["produce", "--rows", "1"]])
def test_cli_without_a_cluster_in_the_data_dir_is_bad_input(tmp_path, capsys, command):
    """A --data-dir without cluster.json is bad input (exit 2, one line), as for every other command: the spark
    commands' catch-all for the data source's errors made it exit 1."""
    from kafkatier.cli.main import main

    rc = main(["spark", *command, "--topic", "t", "--data-dir", str(tmp_path), "--no-class-archive"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "cluster.json not found" in err


@pytest.mark.parametrize("command, option, message", [
    (["read"], "startingOffsets=bogus", "option startingOffsets must be earliest, latest or JSON"),
    (["read"], "startingOffset=earliest", "did you mean 'startingOffsets'"),
    (["produce", "--rows", "1"], "kafka.acks=all", None),
    (["produce", "--rows", "1"], "exactlyOnce=true", None),
])
def test_cli_options_are_checked_before_spark_starts(monkeypatch, capsys, command, option, message):
    """A bad --option is one line and exit 2 in a fraction of a second: the data source's own check ran only
    once the JVM had started (tens of seconds on a loaded machine, and Spark's start-up lines on stderr)."""
    from kafkatier.cli import spark as cli_spark
    from kafkatier.cli.main import main
    from kafkatier.spark import jobs

    def no_spark(*_a, **_k):
        raise RuntimeError("Spark started")
    monkeypatch.setattr(cli_spark, "_bootstrap", lambda args: "127.0.0.1:9092")
    monkeypatch.setattr(jobs, "spark_session", no_spark)
    rc = main(["spark", *command, "--topic", "t", "--option", option, "--no-class-archive"])
    err = capsys.readouterr().err
    if message is None:      # a good option: the job goes on to start Spark
        assert rc == 1 and "Spark started" in err
        return
    assert rc == 2 and err.count("\n") == 1 and message in err
