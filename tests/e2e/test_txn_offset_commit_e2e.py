"""Transactional offset commits (KIP-98 TxnOffsetCommit, KIP-447) against real broker processes: offsets
materialised only when the transaction commits and discarded when it aborts, pending ones answered
UNSTABLE_OFFSET_COMMIT to an OffsetFetch with ``require_stable``, a fenced producer epoch (INVALID_PRODUCER_EPOCH,
as Kafka 3.9 answers once KIP-890's verification turns the coordinator's PRODUCER_FENCED into it) and a commit for
a transaction the group's partition was never added to (INVALID_TXN_STATE) refused without leaving anything
pending; with confluent-kafka, ``send_offsets_to_transaction`` with the group metadata of a past generation
refused with ILLEGAL_GENERATION, and a read_committed consumer never reading a pending offset.  Raw requests through the repo's own client where exact error codes matter.
"""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatier.protocol.errors import Errors
from kafkatier.waiting import wait_for

import wire_support

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

OVERRIDES = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
             "group.initial.rebalance.delay.ms": "0"}
FIND_COORDINATOR, OFFSET_FETCH, INIT_PRODUCER_ID = 10, 9, 22
ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 25, 26, 28


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    c = module_cluster_factory(brokers=3, log_dirs=1, overrides=OVERRIDES)
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.create_topics([NewTopic("src", 2, 2)])["src"].result(30)
    wait_for(lambda: all(p.leader >= 0 for p in admin.list_topics("src", timeout=5).topics["src"].partitions.values())
             and len(admin.list_topics("src", timeout=5).topics["src"].partitions) == 2, 30, interval=0.2,
             ignore=(Exception,), message="src online")
    return c


def _send(host_port: str, api_key: int, version: int, body: dict):
    return wire_support.send_once(host_port, api_key, version, body, client_id="txn-offsets-e2e")


class Txn:
    """One transactional id driven request by request (the wire view of a transactional producer)."""

    def __init__(self, bootstrap: str, txn_id: str, group: str):
        self.bootstrap, self.txn_id, self.group = bootstrap, txn_id, group
        self.coordinator = self._find(txn_id, 1)
        self.group_coordinator = self._find(group, 0)
        self.producer_id, self.epoch = self.init()

    def _find(self, key: str, key_type: int) -> str:
        found = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(
            _send(self.bootstrap.split(",")[0], FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})),
            30, interval=0.2, message=f"coordinator of {key}")
        return f"{found.host}:{found.port}"

    def init(self) -> tuple[int, int]:
        """InitProducerId, again while the coordinator answers a retriable error (an abort being completed)."""
        r = wait_for(lambda: (lambda r: r if r.error_code == 0 else None)(_send(self.coordinator, INIT_PRODUCER_ID, 4, {
            "transactional_id": self.txn_id, "transaction_timeout_ms": 60000, "producer_id": -1,
            "producer_epoch": -1})), 30, interval=0.2, message="InitProducerId")
        return r.producer_id, r.producer_epoch

    def add_offsets(self) -> int:
        def attempt():
            r = _send(self.coordinator, ADD_OFFSETS_TO_TXN, 3, {
                "transactional_id": self.txn_id, "producer_id": self.producer_id, "producer_epoch": self.epoch,
                "group_id": self.group})
            return None if r.error_code == Errors.CONCURRENT_TRANSACTIONS else r.error_code
        return _until_not_concurrent(attempt)

    def commit_offsets(self, offset: int, epoch: int | None = None, generation: int = -1, member: str = "") -> int:
        r = _send(self.group_coordinator, TXN_OFFSET_COMMIT, 3, {
            "transactional_id": self.txn_id, "group_id": self.group, "producer_id": self.producer_id,
            "producer_epoch": self.epoch if epoch is None else epoch, "generation_id": generation,
            "member_id": member, "group_instance_id": None, "topics": [{"name": "src", "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        return r.topics[0].partitions[0].error_code

    def end(self, commit: bool) -> int:
        return _until_not_concurrent(lambda: (lambda r: None if r.error_code == Errors.CONCURRENT_TRANSACTIONS
                                              else r.error_code)(_send(self.coordinator, END_TXN, 3, {
                                                  "transactional_id": self.txn_id, "producer_id": self.producer_id,
                                                  "producer_epoch": self.epoch, "committed": commit})))

    def fetch(self, require_stable: bool) -> tuple[int, int]:
        """``(error code, committed offset)`` of src/0 for the group (OffsetFetch v7)."""
        r = _send(self.group_coordinator, OFFSET_FETCH, 7, {"group_id": self.group, "require_stable": require_stable,
                                                            "topics": [{"name": "src", "partition_indexes": [0]}]})
        p = r.topics[0].partitions[0]
        return p.error_code, p.committed_offset

    def stable(self) -> int:
        """The committed offset once nothing is pending (bounded wait: the markers are written asynchronously)."""
        def settled():
            code, offset = self.fetch(require_stable=True)
            return None if code == Errors.UNSTABLE_OFFSET_COMMIT else (code, offset)
        code, offset = wait_for(settled, 30, interval=0.1, message="stable offsets")
        assert code == 0
        return offset


def _until_not_concurrent(attempt) -> int:
    """``attempt()`` again while it answers None (CONCURRENT_TRANSACTIONS: the last transaction's markers are still
    being written), bounded."""
    box: list[int] = []

    def done() -> bool:
        code = attempt()
        if code is not None:
            box.append(code)
        return code is not None
    wait_for(done, 30, interval=0.1, message="CONCURRENT_TRANSACTIONS to clear")
    return box[0]


def _ids() -> tuple[str, str]:
    return f"txo-{uuid.uuid4().hex[:8]}", f"txo-group-{uuid.uuid4().hex[:8]}"


def test_offsets_are_pending_until_commit_and_discarded_on_abort(cluster):
    t = Txn(cluster.bootstrap_servers, *_ids())
    assert t.add_offsets() == 0
    assert t.commit_offsets(10) == 0
    assert t.fetch(require_stable=True)[0] == Errors.UNSTABLE_OFFSET_COMMIT    # KIP-447: pending
    assert t.fetch(require_stable=False) == (0, -1)                            # not visible before the commit
    assert t.end(commit=True) == 0
    assert t.stable() == 10
    assert t.add_offsets() == 0
    assert t.commit_offsets(20) == 0
    assert t.fetch(require_stable=True)[0] == Errors.UNSTABLE_OFFSET_COMMIT
    assert t.end(commit=False) == 0
    assert t.stable() == 10                                                    # the aborted 20 is discarded


def test_a_fenced_producer_epoch_cannot_commit_offsets(cluster):
    t = Txn(cluster.bootstrap_servers, *_ids())
    assert t.add_offsets() == 0 and t.commit_offsets(5) == 0 and t.end(commit=True) == 0
    assert t.stable() == 5
    assert t.add_offsets() == 0
    assert t.commit_offsets(7) == 0
    zombie_epoch = t.epoch
    t.producer_id, t.epoch = t.init()          # a new instance: the open transaction is aborted, its epoch bumped
    assert t.epoch > zombie_epoch
    assert t.commit_offsets(9, epoch=zombie_epoch) == Errors.INVALID_PRODUCER_EPOCH
    assert t.stable() == 5                     # neither the aborted 7 nor the zombie's 9
    assert t.add_offsets() == 0 and t.commit_offsets(11) == 0 and t.end(commit=True) == 0
    assert t.stable() == 11


def test_a_commit_outside_the_transaction_is_refused_and_leaves_nothing_pending(cluster):
    """KIP-890 part 1 for the group's partition: a TxnOffsetCommit for a transaction that never added the group
    (no AddOffsetsToTxn) would open a transaction on ``__consumer_offsets`` that no marker ever ends, so every
    read_committed consumer of the group would get UNSTABLE_OFFSET_COMMIT forever."""
    t = Txn(cluster.bootstrap_servers, *_ids())
    assert t.commit_offsets(3) == Errors.INVALID_TXN_STATE
    assert t.fetch(require_stable=True) == (0, -1)


def test_confluent_offsets_of_a_past_generation_are_fenced(cluster):
    """KIP-447: the group metadata of a consumer's past generation (a zombie after a rebalance) cannot commit
    offsets in a transaction: ILLEGAL_GENERATION, and the transaction must abort."""
    bs = cluster.bootstrap_servers
    _, group = _ids()
    conf = {"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500}
    first, second = Consumer(conf), Consumer(conf)
    producer = Producer({"bootstrap.servers": bs, "transactional.id": f"txo-{uuid.uuid4().hex[:8]}"})
    try:
        first.subscribe(["src"])
        wait_for(lambda: first.consume(1, 0.2) is not None and bool(first.assignment()), 30, interval=0,
                 message="first consumer assigned")
        stale = first.consumer_group_metadata()
        second.subscribe(["src"])
        # Both poll until the group has rebalanced into a generation with both members.
        wait_for(lambda: first.consume(1, 0.1) is not None and second.consume(1, 0.1) is not None
                 and bool(second.assignment()) and len(first.assignment()) == 1, 60, interval=0,
                 message="a rebalance with both members")
        producer.init_transactions(60)
        producer.begin_transaction()
        with pytest.raises(KafkaException) as e:
            producer.send_offsets_to_transaction([TopicPartition("src", 0, 4)], stale, 30)
        assert e.value.args[0].code() == Errors.ILLEGAL_GENERATION and e.value.args[0].txn_requires_abort()
        producer.abort_transaction(30)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition("src", 0, 6)], first.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        wait_for(lambda: first.committed([TopicPartition("src", 0)], timeout=10)[0].offset == 6, 30, interval=0.2,
                 message="the current generation's offsets committed")
    finally:
        first.close()
        second.close()


def test_confluent_read_committed_consumer_never_reads_a_pending_offset(cluster):
    """librdkafka asks OffsetFetch with ``require_stable`` for a read_committed consumer: while a transaction's
    offsets are pending it gets no answer (UNSTABLE_OFFSET_COMMIT, retried until its timeout) rather than the older
    committed offset, and the new one once the transaction commits."""
    bs = cluster.bootstrap_servers
    _, group = _ids()
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": bs, "transactional.id": f"txo-{uuid.uuid4().hex[:8]}"})
    tp = TopicPartition("src", 1)
    try:
        producer.init_transactions(60)
        for offset in (5, 9):
            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition("src", 1, offset)], consumer.consumer_group_metadata(),
                                                 30)
            if offset == 9:
                with pytest.raises(KafkaException) as e:     # pending: neither 5 nor 9
                    consumer.committed([tp], timeout=3)
                assert e.value.args[0].code() in (KafkaError._TIMED_OUT, Errors.UNSTABLE_OFFSET_COMMIT)
            producer.commit_transaction(30)
            assert consumer.committed([tp], timeout=30)[0].offset == offset
    finally:
        consumer.close()
