"""The controller's KIP-950 disablement queue without ZooKeeper: one StopReplica v5 batch per broker, DISABLED
written in one fenced multi on the versions of the DISABLING write (read only when they moved), and answers that
complete a topic without walking the whole queue again."""
from __future__ import annotations

from types import SimpleNamespace

from fakes import FakeZk

from kafkatier.common.structs import TopicPartition
from kafkatier.controller.context import ControllerContext, ReplicaAssignment
from kafkatier.controller.tiered_storage_disablement_manager import (INELIGIBLE, SUCCESSFUL,
                                                                    TieredStorageDisablementManager)
from kafkatier.protocol.errors import Errors
from kafkatier.zk import codecs, paths
from kafkatier.zk.errors import BadVersionError
from kafkatier.zk.fenced import Check, SetData
from kafkatier.zk.tiered_state import DISABLED, DISABLING, TieredTopicState

TOPIC = "orders"
BROKERS = (1, 2, 3)


class FakeBatch:
    def __init__(self):
        self.sent: list[dict[int, list[TopicPartition]]] = []

    def new_batch(self):
        self.sent.append({})

    def add_stop_replica(self, brokers, tp, delete, disable_remote_partition=False):
        assert not delete and disable_remote_partition
        for b in brokers:
            self.sent[-1].setdefault(b, []).append(tp)

    def send_requests_to_brokers(self, epoch):
        pass


class FakeWriter:
    """``kafka_zk.writer(v).multi(ops)``: records each multi; ``fail`` makes the next ones raise."""

    def __init__(self):
        self.multis: list[list] = []
        self.fail: list[Exception] = []

    def __call__(self, epoch_zk_version):
        return self

    def multi(self, ops):
        self.multis.append(list(ops))
        if self.fail:
            raise self.fail.pop(0)
        return [None] * len(ops)


def tiered_zk(epoch: int, state: str, epoch_version: int, state_version: int) -> FakeZk:
    """The topic's ``tiered_epoch`` and ``state`` znodes at the given versions."""
    zk = FakeZk({paths.tiered_epoch(TOPIC): codecs.encode_tiered_epoch(epoch),
                 paths.tiered_state(TOPIC): codecs.TieredState(state).encode()})
    zk.versions.update({paths.tiered_epoch(TOPIC): epoch_version, paths.tiered_state(TOPIC): state_version})
    return zk


class Events:
    generation = 1

    def put_active_only(self, name, fn):
        pass


class Scheduler:
    def __init__(self):
        self.scheduled = []

    def schedule_once(self, name, fn, delay_ms):
        self.scheduled.append(name)


def manager(partitions: int, zk=None):
    ctx = ControllerContext()
    ctx.live_brokers = {b: object() for b in BROKERS}
    ctx.all_topics.add(TOPIC)
    for p in range(partitions):
        ctx.partition_assignments[TOPIC][p] = ReplicaAssignment(list(BROKERS))
    writer, batch = FakeWriter(), FakeBatch()
    m = TieredStorageDisablementManager(ctx, batch, zk, SimpleNamespace(writer=writer), Events(), lambda: None,
                                        Scheduler())
    return m, batch, writer


def answer(m, broker, partitions, errors=None):
    entries = {TopicPartition(TOPIC, p): {"delete": False, "disable_remote_partition": True}
               for p in range(partitions)}
    errors = errors or {}
    m.on_stop_replica_response(broker, entries, 0, {tp: errors.get(tp.partition, 0) for tp in entries})


def test_one_batch_per_broker_and_disabled_in_one_multi_without_a_read():
    zk = tiered_zk(1, DISABLING, 5, 7)
    m, batch, writer = manager(50, zk)
    m._enqueue(TOPIC, TieredTopicState(1, DISABLING, 5, 7))
    m.resume_disablements()
    assert len(batch.sent) == 1
    assert {b: len(tps) for b, tps in batch.sent[0].items()} == {1: 50, 2: 50, 3: 50}
    answer(m, 1, 50)
    answer(m, 2, 50)
    assert writer.multis == [] and TOPIC in m.topics_to_be_disabled
    answer(m, 3, 50)
    assert writer.multis == [[Check(paths.tiered_epoch(TOPIC), 5),
                              SetData(paths.tiered_state(TOPIC), codecs.TieredState(DISABLED).encode(), 7)]]
    assert zk.reads == 0 and TOPIC not in m.topics_to_be_disabled
    assert m.completed[-1]["topic"] == TOPIC and len(batch.sent) == 1


def finish_with_moved_versions(zk, partitions: int):
    """Epoch 1's disablement of a topic of ``partitions`` partitions, queued at the versions (5, 7), answered by
    every broker while the znodes moved to ``zk``'s: the fenced write fails once with BADVERSION.  Returns the
    manager and its writer."""
    m, _, writer = manager(partitions, zk)
    m._enqueue(TOPIC, TieredTopicState(1, DISABLING, 5, 7))
    m.resume_disablements()
    writer.fail = [BadVersionError()]
    for b in BROKERS:
        answer(m, b, partitions)
    return m, writer


def test_moved_versions_are_read_and_a_superseded_disablement_is_dropped():
    zk = tiered_zk(2, DISABLING, 6, 8)   # a newer disablement (epoch 2) started meanwhile
    m, writer = finish_with_moved_versions(zk, 2)
    assert len(writer.multis) == 1 and zk.reads == 2
    assert TOPIC not in m.topics_to_be_disabled and not m.completed


def test_moved_versions_of_the_same_disablement_are_written_at_the_read_versions():
    zk = tiered_zk(1, DISABLING, 5, 9)   # state rewritten (same epoch, still DISABLING), e.g. by a lost-answer retry
    m, writer = finish_with_moved_versions(zk, 1)
    assert writer.multis[-1][1].version == 9 and m.completed[-1]["tiered_epoch"] == 1


def test_a_failed_answer_waits_for_its_retry_and_the_others_stay_done():
    m, batch, writer = manager(3)
    m._enqueue(TOPIC, TieredTopicState(1, DISABLING, 5, 7))
    m.resume_disablements()
    answer(m, 1, 3, errors={2: int(Errors.KAFKA_STORAGE_ERROR)})
    answer(m, 2, 3)
    answer(m, 3, 3)
    failed = next(pr for pr, st in m.replica_states.items() if st == INELIGIBLE)
    assert failed.replica == 1 and failed.tp.partition == 2
    assert sum(st == SUCCESSFUL for st in m.replica_states.values()) == 8
    assert writer.multis == [] and len(batch.sent) == 1   # nothing re-sent before the backoff timer
    assert m.scheduler.scheduled == [f"TieredDisablementRetry({failed})"]
