"""TransactionMarkerChannelManager alone: markers grouped by leader, Kafka's handling of each partition answer,
completion once every partition answered (a fake broker client, rounds driven by the test)."""
from __future__ import annotations

import threading
import types

import pytest

from kafkatier.cli import transactions as tool
from kafkatier.cli.main import UsageError
from kafkatier.coordinator.transaction.transaction_marker_channel_manager import (PendingMarkers,
                                                                                  TransactionMarkerChannelManager)
from kafkatier.common.structs import TopicPartition
from kafkatier.protocol.errors import Errors


class FakeBrokers:
    """Answers WriteTxnMarkers with the error the test set per partition (default NONE); records requests."""

    def __init__(self) -> None:
        self.errors: dict[tuple[str, int], list[Errors]] = {}
        self.requests: list[tuple[int, list]] = []
        self.down: set[int] = set()

    def send(self, broker: int, request, version: int):
        if broker in self.down:
            raise ConnectionError(f"broker {broker} is down")
        self.requests.append((broker, request.markers))
        markers = []
        for m in request.markers:
            topics = []
            for t in m.topics:
                parts = []
                for p in t.partition_indexes:
                    queue = self.errors.get((t.name, p), [])
                    parts.append(types.SimpleNamespace(partition_index=p,
                                                       error_code=int(queue.pop(0) if queue else Errors.NONE)))
                topics.append(types.SimpleNamespace(name=t.name, partitions=parts))
            markers.append(types.SimpleNamespace(producer_id=m.producer_id, topics=topics))
        return types.SimpleNamespace(markers=markers)


def pending(done: list, partitions, txn_partition: int = 0) -> PendingMarkers:
    return PendingMarkers("tx", txn_partition, 3, 1000, 2, True, set(partitions), done.append)


@pytest.fixture
def channel():
    brokers = FakeBrokers()
    leaders = {("a", 0): 1, ("a", 1): 2, ("b", 0): 1}
    ch = TransactionMarkerChannelManager(9, lambda t, p: leaders.get((t, p)), brokers.send)
    ch.brokers, ch.leaders = brokers, leaders
    yield ch
    ch.shutdown()


def test_markers_are_grouped_by_leader_and_complete_once_all_answered(channel):
    done = []
    channel.add_markers(pending(done, [("a", 0), ("a", 1), ("b", 0)]))
    assert channel._send_round() is False
    assert sorted(b for b, _ in channel.brokers.requests) == [1, 2]
    one = next(m for b, m in channel.brokers.requests if b == 1)[0]
    assert (one.producer_id, one.producer_epoch, one.transaction_result, one.coordinator_epoch) == (1000, 2, True, 3)
    assert {(t.name, tuple(t.partition_indexes)) for t in one.topics} == {("a", (0,)), ("b", (0,))}
    assert len(done) == 1 and channel.pending_count() == 0


def test_retriable_errors_and_lost_connections_are_sent_again(channel):
    done = []
    channel.brokers.errors[("a", 0)] = [Errors.NOT_LEADER_OR_FOLLOWER, Errors.NOT_ENOUGH_REPLICAS]
    channel.brokers.down.add(2)
    channel.add_markers(pending(done, [("a", 0), ("a", 1)]))
    assert channel._send_round() is True and not done
    assert channel._send_round() is True and not done
    channel.brokers.down.clear()
    assert channel._send_round() is False and len(done) == 1


def test_a_deleted_partition_is_dropped_and_a_leaderless_one_waits(channel):
    done = []
    channel.leaders[("a", 1)] = -1
    channel.add_markers(pending(done, [("gone", 0), ("a", 1)]))
    assert channel._send_round() is True and not done
    channel.leaders[("a", 1)] = 2
    assert channel._send_round() is False and len(done) == 1


def test_an_unexpected_error_is_sent_again_never_dropped(channel):
    """Dropping the partition would complete the transaction without its marker there (a hanging transaction)."""
    done = []
    channel.brokers.errors[("a", 0)] = [Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.CORRUPT_MESSAGE]
    channel.add_markers(pending(done, [("a", 0)]))
    assert channel._send_round() is True and not done
    assert channel._send_round() is True and not done
    assert channel._send_round() is False and len(done) == 1
    assert sum(1 for b, _ in channel.brokers.requests if b == 1) == 3


def test_a_fenced_marker_gives_the_transaction_up(channel):
    done = []
    channel.brokers.errors[("a", 0)] = [Errors.TRANSACTION_COORDINATOR_FENCED]
    channel.add_markers(pending(done, [("a", 0), ("a", 1)]))
    channel._send_round()
    assert done == [] and channel.pending_count() == 0


def test_markers_of_an_unloaded_partition_are_dropped(channel):
    done = []
    channel.leaders[("a", 0)] = -1
    channel.add_markers(pending(done, [("a", 0)], txn_partition=4))
    channel.remove_markers_for_txn_partition(4)
    channel.leaders[("a", 0)] = 1
    assert channel._send_round() is False and done == [] and channel.brokers.requests == []


def test_a_started_sender_sends_at_once_and_again_after_errors():
    """Once started, markers leave from the adding call (no wait for the sender thread); an error answer and a
    leaderless partition are sent again by the sender thread after the backoff, and the transaction completes."""
    brokers = FakeBrokers()
    leaders = {("a", 0): 1, ("a", 1): 2}
    ch = TransactionMarkerChannelManager(9, lambda t, p: leaders.get((t, p)), brokers.send, retry_backoff_ms=10)
    ch.startup()
    try:
        first = threading.Event()
        ch.add_markers(PendingMarkers("tx", 0, 3, 1000, 2, True, {("a", 0), ("a", 1)}, lambda _p: first.set()))
        assert first.wait(10) and sorted(b for b, _ in brokers.requests) == [1, 2]
        brokers.requests.clear()
        brokers.errors[("a", 1)] = [Errors.NOT_ENOUGH_REPLICAS]
        leaders[("a", 0)] = -1
        second = threading.Event()
        ch.add_markers(PendingMarkers("tx", 0, 3, 1000, 2, True, {("a", 0), ("a", 1)}, lambda _p: second.set()))
        assert not second.wait(0.05)          # a,0 has no leader: nothing completes
        leaders[("a", 0)] = 1
        assert second.wait(10) and ch.pending_count() == 0
        assert sum(1 for b, _ in brokers.requests if b == 2) >= 2 and any(b == 1 for b, _ in brokers.requests)
    finally:
        ch.shutdown()


def test_tool_tables_and_usage_errors(capsys):
    tool.pretty_print_table(["A", "Long"], [["xyz", "1"]])
    assert capsys.readouterr().out.splitlines() == ["A  \tLong\t", "xyz\t1   \t"]
    with pytest.raises(UsageError):
        tool._find_hanging(None, None, None, None, 15)
    with pytest.raises(UsageError):
        tool._find_hanging(None, 1, "t", None, 15)
    with pytest.raises(UsageError):
        tool._find_hanging(None, 1, None, 0, 15)
    for start, producer in ((None, (None, None, None)), (5, (1, 0, 0)), (None, (1, None, 0))):
        with pytest.raises(UsageError):
            tool._abort(None, "t", 0, start, producer)


def test_an_injected_write_txn_markers_error_is_answered_per_partition():
    """Request faults (``inject_errors api=WriteTxnMarkers``) answer every partition with the error: the API has no
    top-level error code, and closing the connection instead would only test a lost connection."""
    from kafkatier.protocol import codec
    from kafkatier.protocol.build import build
    from kafkatier.server.kafka_apis import KafkaApis
    req = build(codec.request_class(27), 1, {"markers": [
        {"producer_id": 5, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 1,
         "topics": [{"name": "t", "partition_indexes": [0, 2]}]}]})
    header = types.SimpleNamespace(request_api_key=27, request_api_version=1)
    r = KafkaApis.error_response(types.SimpleNamespace(_resp=KafkaApis._resp), header, req,
                                 int(Errors.NOT_LEADER_OR_FOLLOWER))
    [m] = r.markers
    assert m.producer_id == 5
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in m.topics] == [
        ("t", [(0, 6), (2, 6)])]


class FakeReplicaManager:
    """Hosts the partitions given; each marker append is answered by the test (``answer``), as replication would."""

    def __init__(self, hosted) -> None:
        self.hosted = set(hosted)
        self.appends: list[tuple] = []

    def get_partition(self, topic, partition):
        return object() if (topic, partition) in self.hosted else None

    def append_txn_markers(self, timeout_ms, producer_id, producer_epoch, coordinator_epoch, commit, partitions,
                           respond):
        self.appends.append((producer_id, commit, [tuple(tp) for tp in partitions], respond))

    def answer(self, i: int, errors: dict) -> None:
        from kafkatier.server.replica_manager import ProducePartitionResult
        _pid, _commit, tps, respond = self.appends[i]
        respond({TopicPartition(*tp): ProducePartitionResult(errors.get(tp, Errors.NONE)) for tp in tps})


def _markers_request():
    from kafkatier.protocol import codec
    from kafkatier.protocol.build import build
    return build(codec.request_class(27), 1, {"markers": [
        {"producer_id": 5, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 1,
         "topics": [{"name": "t", "partition_indexes": [0, 1]},
                    {"name": "__consumer_offsets", "partition_indexes": [3]}]},
        {"producer_id": 6, "producer_epoch": 2, "transaction_result": False, "coordinator_epoch": 1,
         "topics": [{"name": "gone", "partition_indexes": [0]}]}]})


def _answers(response) -> dict:
    return {(m.producer_id, t.name, p.partition_index): p.error_code
            for m in response.markers for t in m.topics for p in t.partitions}


def test_write_markers_answers_when_every_append_is_replicated():
    """The body of WriteTxnMarkers: one append per producer on the partitions hosted here,
    UNKNOWN_TOPIC_OR_PARTITION for the others, the answer once the last append is acknowledged; a committed offsets
    partition materialises the producer's offsets."""
    from kafkatier.server.transaction_apis import TransactionApis
    rm = FakeReplicaManager({("t", 0), ("t", 1), ("__consumer_offsets", 3)})
    completed = []
    groups = types.SimpleNamespace(on_transaction_completed=lambda *a: completed.append(a))
    apis = TransactionApis(None, groups, rm, None, None)
    fut = apis.write_markers(1, list(_markers_request().markers))
    assert [(pid, commit, tps) for pid, commit, tps, _r in rm.appends] == [
        (5, True, [("t", 0), ("t", 1), ("__consumer_offsets", 3)])]
    assert not fut.done()
    rm.answer(0, {("t", 1): Errors.NOT_ENOUGH_REPLICAS})
    assert _answers(fut.result(0)) == {(5, "t", 0): 0, (5, "t", 1): int(Errors.NOT_ENOUGH_REPLICAS),
                                       (5, "__consumer_offsets", 3): 0,
                                       (6, "gone", 0): int(Errors.UNKNOWN_TOPIC_OR_PARTITION)}
    assert completed == [(3, 5, True)]


def test_write_txn_markers_without_cluster_action_is_refused_per_partition():
    from kafkatier.server.transaction_apis import TransactionApis
    rm = FakeReplicaManager({("t", 0), ("t", 1)})
    deny = types.SimpleNamespace(authorize_cluster=lambda ctx, op: False)
    apis = TransactionApis(None, None, rm, None, None, auth=deny)
    header = types.SimpleNamespace(request_api_key=27, request_api_version=1)
    r = apis.handle_write_txn_markers(header, _markers_request(), None)
    assert set(_answers(r).values()) == {int(Errors.CLUSTER_AUTHORIZATION_FAILED)}
    assert rm.appends == []
