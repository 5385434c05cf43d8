"""Transactions (issue 23) through real clients against real broker processes: confluent-kafka's (librdkafka)
and kafka-python's transactional producers, read_committed and read_uncommitted consumers; fencing, timeouts,
transactional offsets, a consume-transform-produce job under kill -9, coordinator failover (kill -9 with a
transaction open, a crash right after PrepareCommit), KIP-890's refusal of a produce outside the transaction,
``kafkatier transactions``, and raw requests with bad input.

One 3-broker cluster for the module, with 3 ``__transaction_state`` partitions (Kafka's default is 50) so it
starts quickly; ``__transaction_state`` gets replication min(3, brokers) = 3 and min ISR 2, as in Kafka.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafkatier.coordinator.transaction.transaction_log import partition_for
from kafkatier.log.record_batch import end_transaction_marker
from kafkatier.waiting import wait_for

import wire_support

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

OVERRIDES = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
             "group.initial.rebalance.delay.ms": "0", "transaction.max.timeout.ms": "120000",
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module")
def txn_cluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, log_dirs=1, overrides=OVERRIDES)


def create_topic(bootstrap: str, topic: str, partitions: int = 2, rf: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(30)

    def ready() -> bool:
        md = admin.list_topics(topic, timeout=5).topics[topic]
        return md.error is None and len(md.partitions) == partitions and all(
            p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values())
    wait_for(ready, 30, interval=0.2, ignore=(Exception,), message=f"{topic} online")


def transactional_producer(bootstrap: str, txn_id: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int | None = None,
                timeout_s: float = 30.0) -> list[tuple[int, bytes]]:
    """Every record of ``topic`` up to each partition's end (for read_committed: its last stable offset)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple[int, bytes]] = []
    eof: set[int] = set()

    def done() -> bool:
        msg = c.poll(0.2)
        if msg is not None:
            if msg.error() is None:
                out.append((msg.partition(), msg.value()))
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                eof.add(msg.partition())
        return len(eof) == partitions and (expected is None or len(out) >= expected)
    try:
        wait_for(done, timeout_s, interval=0, message=f"consume {topic} ({isolation})")
    finally:
        c.close()
    return out


def test_confluent_commit_is_read_committed_and_abort_is_not(txn_cluster):
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    p = transactional_producer(bs, f"tx-{uuid.uuid4().hex[:8]}")
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(10):
        for part in (0, 1):
            p.produce(topic, value=f"committed-{part}-{i}".encode(), partition=part)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(5):
        for part in (0, 1):
            p.produce(topic, value=f"aborted-{part}-{i}".encode(), partition=part)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"last", partition=0)
    p.commit_transaction(30)

    committed = consume_all(bs, topic, 2, "read_committed", expected=21)
    values = sorted(v for _, v in committed)
    assert len(values) == 21 and not any(v.startswith(b"aborted") for v in values)
    assert b"last" in values
    uncommitted = consume_all(bs, topic, 2, "read_uncommitted", expected=31)
    assert len(uncommitted) == 31
    assert sum(v.startswith(b"aborted") for _, v in uncommitted) == 10


def test_confluent_open_transaction_holds_back_read_committed(txn_cluster):
    """Records of an open transaction are past the last stable offset: a read_committed consumer stops before
    them, a read_uncommitted one reads them."""
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-open-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=1)
    plain = Producer({"bootstrap.servers": bs})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(30)
    p = transactional_producer(bs, f"tx-open-{uuid.uuid4().hex[:8]}")
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(30)
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(30)
    assert [v for _, v in consume_all(bs, topic, 1, "read_committed")] == [b"before"]
    assert [v for _, v in consume_all(bs, topic, 1, "read_uncommitted", expected=3)] == [b"before", b"open", b"after"]
    # ListOffsets(latest) answers the last stable offset to read_committed, the high watermark otherwise.
    assert end_offset(bs, topic, "read_committed") == 1
    assert end_offset(bs, topic, "read_uncommitted") == 3
    p.commit_transaction(30)
    assert [v for _, v in consume_all(bs, topic, 1, "read_committed", expected=3)] == [b"before", b"open", b"after"]


def end_offset(bootstrap: str, topic: str, isolation: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eo-{uuid.uuid4()}", "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        c.close()


def test_confluent_timed_out_transaction_is_aborted_and_its_producer_fenced(txn_cluster):
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-timeout-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=1)
    p = transactional_producer(bs, f"tx-timeout-{uuid.uuid4().hex[:8]}", **{"transaction.timeout.ms": 1500})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, value=b"too-slow", partition=0)
    p.flush(30)
    # The coordinator's abort task (every 500 ms here) aborts it: the LSO moves past the aborted record.
    wait_for(lambda: end_offset(bs, topic, "read_committed") == 2, 30, interval=0.3, message="timed out txn aborted")
    assert consume_all(bs, topic, 1, "read_committed") == []
    with pytest.raises(KafkaException) as raised:
        p.commit_transaction(30)
    assert raised.value.args[0].code() in (KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
                                           KafkaError.PRODUCER_FENCED), raised.value


def test_confluent_transaction_timeout_above_the_broker_maximum_is_refused(txn_cluster):
    p = transactional_producer(txn_cluster.bootstrap_servers, f"tx-max-{uuid.uuid4().hex[:8]}",
                               **{"transaction.timeout.ms": 300000})
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(30)
    assert raised.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT, raised.value


def test_confluent_second_instance_fences_the_first(txn_cluster):
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-fence-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    txn_id = f"tx-fence-{uuid.uuid4().hex[:8]}"
    first = transactional_producer(bs, txn_id)
    first.init_transactions(60)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    first.flush(30)
    second = transactional_producer(bs, txn_id)
    second.init_transactions(60)    # aborts the first one's open transaction, bumps the epoch
    second.begin_transaction()
    second.produce(topic, value=b"winner", partition=1)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(30)
    err = raised.value.args[0]
    assert err.fatal() and err.code() == KafkaError._FENCED, err
    values = [v for _, v in consume_all(bs, topic, 2, "read_committed", expected=1)]
    assert values == [b"winner"]


def test_confluent_send_offsets_to_transaction_commits_only_on_commit(txn_cluster):
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-offsets-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=1)
    group = f"txn-group-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        p = transactional_producer(bs, f"tx-offsets-{uuid.uuid4().hex[:8]}")
        p.init_transactions(60)
        p.begin_transaction()
        p.produce(topic, value=b"x", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 42)], consumer.consumer_group_metadata(), 30)
        p.abort_transaction(30)

        def committed() -> int:
            return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
        assert committed() < 0        # aborted: nothing committed
        p.begin_transaction()
        p.produce(topic, value=b"y", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], consumer.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        wait_for(lambda: committed() == 7, 30, interval=0.2, message="transactional offset committed")
    finally:
        consumer.close()


def test_kafka_python_transactional_producer_commit_and_abort(txn_cluster):
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-kp-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=f"tx-kp-{uuid.uuid4().hex[:8]}")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send(topic, value=f"kp-committed-{i}".encode(), partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(4):
            p.send(topic, value=f"kp-aborted-{i}".encode(), partition=i % 2)
        p.flush()
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    committed = sorted(v for _, v in consume_all(bs, topic, 2, "read_committed", expected=4))
    assert committed == [f"kp-committed-{i}".encode() for i in range(4)]
    assert len(consume_all(bs, topic, 2, "read_uncommitted", expected=8)) == 8
    # kafka-python's own read_committed consumer (it skips the aborted batches from the Fetch's list)
    c = KafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed", enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        c.assign([KTopicPartition(topic, 0), KTopicPartition(topic, 1)])
        seen: list[bytes] = []
        wait_for(lambda: seen.extend(m.value for m in c) or len(seen) >= 4, 30, interval=0,
                 message="kafka-python read_committed")
        assert sorted(seen) == [f"kp-committed-{i}".encode() for i in range(4)]
    finally:
        c.close()


def _table(stdout: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("\t")[:-1]] for line in stdout.splitlines() if line.strip()]


def test_transactions_tool_lists_and_describes_an_open_transaction(txn_cluster, kafkatier_cli):
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-tool-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=1)
    txn_id = f"tx-tool-{uuid.uuid4().hex[:8]}"
    p = transactional_producer(bs, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(30)
    tool = lambda *a: kafkatier_cli.run("transactions", "--bootstrap-server", bs, *a)  # noqa: E731

    out = tool("describe", "--transactional-id", txn_id)
    assert out.returncode == 0, out.stderr
    header, row = _table(out.stdout)
    assert header[:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState"]
    assert row[1] == txn_id and row[4] == "Ongoing" and row[8] == f"{topic}-0"
    producer_id = row[2]
    listed = _table(tool("list").stdout)
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [txn_id, row[0], producer_id, "Ongoing"] in listed[1:]
    producers = _table(tool("describe-producers", "--topic", topic, "--partition", "0").stdout)
    assert producers[0][0] == "ProducerId"
    [mine] = [r for r in producers[1:] if r[0] == producer_id]
    assert mine[5] == "0"                                   # the open transaction starts at offset 0
    p.commit_transaction(30)
    wait_for(lambda: _table(tool("describe", "--transactional-id", txn_id).stdout)[1][4] == "CompleteCommit", 30,
             interval=0.3, message="CompleteCommit")
    producers = _table(tool("describe-producers", "--topic", topic, "--partition", "0").stdout)
    assert [r for r in producers[1:] if r[0] == producer_id][0][5] == "None"
    missing = tool("describe", "--transactional-id", "no-such-id")
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr


def test_confluent_commit_survives_a_killed_transaction_coordinator(cluster_factory):
    """kill -9 the leader of the transactional id's ``__transaction_state`` partition with a transaction open:
    the new leader loads the id's state, and the producer's commit completes there."""
    c = cluster_factory(brokers=3, log_dirs=1, overrides=OVERRIDES)
    bs = c.bootstrap_servers
    topic = f"txn-fo-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=2, rf=3)
    txn_id = f"tx-fo-{uuid.uuid4().hex[:8]}"
    p = transactional_producer(bs, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=f"fo-{i}".encode(), partition=i % 2)
    p.flush(30)
    state_path = f"/brokers/topics/__transaction_state/partitions/{partition_for(txn_id, 3)}/state"
    coordinator = json.loads(c.zk.get(state_path)[0])["leader"]
    c.manager.stop_broker(coordinator, kill=True)
    p.commit_transaction(90)
    survivors = ",".join(b for b in bs.split(",") if not b.endswith(f":{c.manager.broker(coordinator)['port']}"))
    values = sorted(v for _, v in consume_all(survivors, topic, 2, "read_committed", expected=10, timeout_s=60))
    assert values == sorted(f"fo-{i}".encode() for i in range(10))
    new_leader = json.loads(c.zk.get(state_path)[0])["leader"]
    assert new_leader not in (-1, coordinator)


def test_transaction_requests_with_bad_input_get_kafka_error_codes(txn_cluster):
    """Raw requests (kafka-python's protocol classes) with bad input: Kafka's error codes, nothing applied."""
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-bad-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=1)

    txn_id = f"tx-bad-{uuid.uuid4().hex[:8]}"
    first = bs.split(",")[0]
    found = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(
        _send(first, 10, 3, {"key": txn_id, "key_type": 1})), 30, interval=0.2, message="coordinator")
    coordinator = f"{found.host}:{found.port}"
    init = lambda **kw: _send(coordinator, 22, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 60000,  # noqa: E731
                                                  "producer_id": -1, "producer_epoch": -1, **kw})
    assert init(transactional_id="").error_code == 42                  # INVALID_REQUEST
    assert init(producer_id=5).error_code == 42                        # producer id without an epoch
    assert init(transaction_timeout_ms=0).error_code == 50             # INVALID_TRANSACTION_TIMEOUT
    end = lambda v, **kw: _send(coordinator, 26, v, {"transactional_id": txn_id, "producer_id": 1,  # noqa: E731
                                                    "producer_epoch": 0, "committed": True, **kw}).error_code
    assert end(3) == 49                                                # INVALID_PRODUCER_ID_MAPPING: unknown id
    r = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(init()), 30, interval=0.2, message="init")
    pid, epoch = r.producer_id, r.producer_epoch
    assert end(3, producer_id=pid, producer_epoch=epoch) == 48         # INVALID_TXN_STATE: nothing to commit
    assert init().producer_epoch == epoch + 1                          # a second instance bumps the epoch
    assert end(3, producer_id=pid, producer_epoch=epoch) == 90         # PRODUCER_FENCED
    assert end(1, producer_id=pid, producer_epoch=epoch) == 47         # ... INVALID_PRODUCER_EPOCH before v2
    add = _send(coordinator, 24, 3, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                                    "v3_and_below_producer_epoch": epoch + 1, "v3_and_below_topics": [
                                        {"name": topic, "partitions": [0]}, {"name": "no-such-topic", "partitions": [0]}]})
    codes = {t.name: t.results_by_partition[0].partition_error_code for t in add.results_by_topic_v3_and_below}
    assert codes == {topic: 55, "no-such-topic": 3}                    # OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC
    # A client may not write a control batch; a marker for a producer the partition never saw changes nothing.
    leader = next(b for b in bs.split(",") if _send(b, 2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}).topics[0].partitions[0].error_code == 0)
    produced = _send(leader, 0, 7, {"acks": 1, "timeout_ms": 5000, "topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": end_transaction_marker(77, 0, 0, True, 0)}]}]})
    assert produced.responses[0].partition_responses[0].error_code == 87   # INVALID_RECORD
    markers = _send(leader, 27, 1, {"markers": [{"producer_id": 424242, "producer_epoch": 0, "transaction_result": False,
                                               "coordinator_epoch": 0, "topics": [
                                                   {"name": topic, "partition_indexes": [0]},
                                                   {"name": "no-such-topic", "partition_indexes": [0]}]}]})
    codes = {t.name: t.partitions[0].error_code for t in markers.markers[0].topics}
    assert codes == {topic: 0, "no-such-topic": 3}
    assert end_offset(bs, topic, "read_committed") == end_offset(bs, topic, "read_uncommitted") == 1


def test_consume_transform_produce_is_exactly_once_across_kill_9(txn_cluster):
    """The consume-transform-produce job of the scenario engine (``kafkatier/scenario/ctp_worker.py``) is killed
    with SIGKILL twice mid-way and restarted with the same transactional id: the output, read_committed, holds
    every input record's transform exactly once (the restarted job fences the dead one's open transaction, resumes
    at the committed input offsets)."""
    bs = txn_cluster.bootstrap_servers
    source, sink = f"ctp-in-{uuid.uuid4().hex[:6]}", f"ctp-out-{uuid.uuid4().hex[:6]}"
    create_topic(bs, source, partitions=2)
    create_topic(bs, sink, partitions=2)
    n = 300
    plain = Producer({"bootstrap.servers": bs})
    for i in range(n):
        plain.produce(source, key=str(i).encode(), value=f"record-{i}".encode(), partition=i % 2)
    plain.flush(30)
    group, txn_id = f"ctp-{uuid.uuid4().hex[:6]}", f"ctp-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "kafkatier.scenario.ctp_worker", "--bootstrap-server", bs, "--group", group,
            "--input", source, "--output", sink, "--transactional-id", txn_id, "--per-txn", "7"]

    def run_until(committed_at_least: int | None) -> None:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            if committed_at_least is None:
                wait_for(lambda: committed_sum(bs, source, group) >= n, 90, interval=0.5,
                         message="every input offset committed")
                return
            for line in proc.stdout:
                event = json.loads(line)
                if event["ev"] == "committed" and event["records"] >= committed_at_least:
                    break
            for line in proc.stdout:     # killed once the next transaction has its records delivered
                if json.loads(line)["ev"] == "produced":
                    break
        finally:
            proc.kill()
            proc.wait(10)
    run_until(60)
    run_until(60)          # the second incarnation made progress of its own, then died too
    run_until(None)
    out = consume_all(bs, sink, 2, "read_committed", expected=n, timeout_s=60)
    values = sorted(v.decode().rsplit("@", 1)[0] for _, v in out)
    assert len(values) == n and set(values) == {f"RECORD-{i}" for i in range(n)}


def committed_sum(bootstrap: str, topic: str, group: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return sum(max(tp.offset, 0) for tp in c.committed([TopicPartition(topic, p) for p in range(2)], timeout=10))
    finally:
        c.close()


def test_a_produce_outside_the_transaction_cannot_open_a_hanging_one(txn_cluster):
    """KIP-890 part 1: the partition leader asks the coordinator before a transactional batch opens a
    transaction; a batch for a partition never added to the transaction is refused (INVALID_TXN_STATE) and the
    partition's last stable offset does not get stuck."""
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-hang-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=1)

    txn_id = f"tx-hang-{uuid.uuid4().hex[:8]}"
    found = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(
        _send(bs.split(",")[0], 10, 3, {"key": txn_id, "key_type": 1})), 30, interval=0.2, message="coordinator")
    coordinator = f"{found.host}:{found.port}"
    r = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(_send(coordinator, 22, 4, {
        "transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1})),
        30, interval=0.2, message="init")
    pid, epoch = r.producer_id, r.producer_epoch
    leader = next(b for b in bs.split(",") if _send(b, 2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}).topics[0].partitions[0].error_code == 0)

    def produce(seq: int) -> int:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=pid,
                                      producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
        b.append(0, timestamp=int(time.time() * 1000), key=None, value=b"late", headers=[])
        resp = _send(leader, 0, 7, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": bytes(b.build())}]}]})
        return resp.responses[0].partition_responses[0].error_code
    assert produce(0) == 48                                   # INVALID_TXN_STATE: not in the transaction
    assert end_offset(bs, topic, "read_committed") == end_offset(bs, topic, "read_uncommitted") == 0
    add = _send(coordinator, 24, 3, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                                    "v3_and_below_producer_epoch": epoch,
                                    "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert produce(0) == 0                                    # added: verified, appended
    assert end_offset(bs, topic, "read_committed") == 0       # the transaction is open
    assert _send(coordinator, 26, 3, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                     "committed": False}).error_code == 0
    wait_for(lambda: end_offset(bs, topic, "read_committed") == 2, 30, interval=0.2, message="aborted")


def test_transactions_tool_finds_and_aborts_a_hanging_transaction(txn_cluster, kafkatier_cli):
    """A transactional batch written without a transactional id in the Produce request (nothing to verify it
    against) opens a transaction no coordinator knows of: ``find-hanging`` lists it, ``abort`` ends it and the
    last stable offset moves on."""
    bs = txn_cluster.bootstrap_servers
    topic = f"txn-hung-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=1)
    leader = next(b for b in bs.split(",") if _send(b, 2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}).topics[0].partitions[0].error_code == 0)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=777001,
                                  producer_epoch=3, base_sequence=0, batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000) - 120000, key=None, value=b"stray", headers=[])
    r = _send(leader, 0, 7, {"acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": bytes(b.build())}]}]})
    assert r.responses[0].partition_responses[0].error_code == 0
    assert end_offset(bs, topic, "read_committed") == 0
    tool = lambda *a: kafkatier_cli.run("transactions", "--bootstrap-server", bs, *a)  # noqa: E731
    out = tool("find-hanging", "--topic", topic, "--max-transaction-timeout", "1")
    assert out.returncode == 0, out.stderr
    rows = _table(out.stdout)
    assert rows[0] == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                       "LastTimestamp", "Duration(min)"]
    assert [r[:6] for r in rows[1:]] == [[topic, "0", "777001", "3", "-1", "0"]]
    missing = tool("abort", "--topic", topic, "--partition", "0", "--start-offset", "5")
    assert missing.returncode == 1 and "Could not find any open transactions" in missing.stderr
    out = tool("abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: end_offset(bs, topic, "read_committed") == 2, 30, interval=0.2, message="LSO after the abort")
    assert consume_all(bs, topic, 1, "read_committed") == []
    assert _table(tool("find-hanging", "--topic", topic, "--max-transaction-timeout", "0").stdout)[1:] == []


def _send(host_port: str, api_key: int, version: int, body: dict):
    return wire_support.send_once(host_port, api_key, version, body, client_id="txn-e2e")


def test_coordinator_dying_in_prepare_commit_is_completed_by_the_next_one(cluster_factory, monkeypatch):
    """The coordinator dies (crash point ``txn-coordinator-after-prepare``, as kill -9) right after writing
    PrepareCommit, before answering EndTxn or sending a marker: the new leader of the ``__transaction_state``
    partition loads PrepareCommit, sends the markers with its own coordinator epoch and writes CompleteCommit; the
    producer's retried commit succeeds and read_committed consumers see the whole transaction."""
    monkeypatch.setenv("KAFKATIER_CRASH_AT", "txn-coordinator-after-prepare")
    c = cluster_factory(brokers=3, log_dirs=1, overrides=OVERRIDES)
    monkeypatch.delenv("KAFKATIER_CRASH_AT")
    bs = c.bootstrap_servers
    topic = f"txn-prep-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=2, rf=3)
    txn_id = f"tx-prep-{uuid.uuid4().hex[:8]}"
    p = transactional_producer(bs, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=f"prep-{i}".encode(), partition=i % 2)
    p.flush(30)
    state_path = f"/brokers/topics/__transaction_state/partitions/{partition_for(txn_id, 3)}/state"
    coordinator = json.loads(c.zk.get(state_path)[0])["leader"]
    p.commit_transaction(90)
    assert "crash point txn-coordinator-after-prepare reached" in c.manager.log_tail(coordinator, 200)
    survivors = ",".join(b for b in bs.split(",") if not b.endswith(f":{c.manager.broker(coordinator)['port']}"))
    values = sorted(v for _, v in consume_all(survivors, topic, 2, "read_committed", expected=10, timeout_s=60))
    assert values == sorted(f"prep-{i}".encode() for i in range(10))
