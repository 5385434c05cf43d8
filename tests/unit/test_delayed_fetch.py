"""A waiting fetch (``DelayedFetch``) checks offsets before it reads (Kafka's ``tryComplete``): an idle fetch of
many partitions reads no log until something moved or an error is due; then it reads and completes."""
from __future__ import annotations

from kafkatier.common.structs import TopicPartition
from kafkatier.protocol.errors import Errors
from kafkatier.server.replica_manager import DelayedFetch, FetchPartitionData, FetchPartitionResult

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Log:
    def __init__(self, leo: int, hw: int):
        self.log_end_offset, self.high_watermark = leo, hw


class Part:
    def __init__(self, leo: int = 10, hw: int = 10, leader: bool = True, epoch: int = 3):
        self.log, self.is_leader, self.leader_epoch = Log(leo, hw), leader, epoch


class RM:
    """The replica manager as a waiting fetch sees it: partitions, and reads that return what the log has."""

    def __init__(self, **parts: Part):
        self.partitions = {TopicPartition("t", int(k[1:])): p for k, p in parts.items()}
        self.offline_partitions: set = set()
        self.reads = 0

    def _held_back_by_throttle(self, p, replica_id) -> bool:
        return False

    def idle_follower_read(self, fp):
        return None  # every partition read (counted)

    def read_partition(self, replica_id, fp, max_bytes):
        self.reads += 1
        p = self.partitions.get(fp.tp)
        if p is None or not p.is_leader:
            return FetchPartitionResult(Errors.NOT_LEADER_OR_FOLLOWER)
        if fp.current_leader_epoch not in (-1, p.leader_epoch):
            return FetchPartitionResult(Errors.FENCED_LEADER_EPOCH)
        end = p.log.log_end_offset if replica_id >= 0 else p.log.high_watermark
        return FetchPartitionResult(Errors.NONE, p.log.high_watermark, 0, b"x" * (end - fp.fetch_offset))


def fetch(rm: RM, replica_id: int = 2, offset: int = 10, epoch: int = 3) -> tuple[DelayedFetch, list]:
    answers: list = []
    parts = [FetchPartitionData(tp, offset, 1024, current_leader_epoch=epoch) for tp in (T0, T1)]
    return DelayedFetch(500, rm, replica_id, 1, 1 << 20, parts, answers.append), answers


def test_an_idle_fetch_reads_nothing_until_a_log_grows():
    rm = RM(p0=Part(), p1=Part())
    op, answers = fetch(rm)
    assert not op.try_complete() and rm.reads == 0
    rm.partitions[T1].log.log_end_offset = 12
    assert op.try_complete() and rm.reads == 2 and answers[0][T1].records == b"xx"


def test_a_consumer_waits_for_the_high_watermark_not_the_log_end():
    rm = RM(p0=Part(leo=15, hw=10), p1=Part(leo=15, hw=10))
    op, _ = fetch(rm, replica_id=-1, epoch=-1)
    assert not op.try_complete() and rm.reads == 0
    rm.partitions[T0].log.high_watermark = 11
    assert op.try_complete()


def test_a_fetch_that_must_answer_an_error_completes_at_once():
    """Not leader any more, another leader epoch, a partition no longer hosted."""
    for rm, epoch in ((RM(p0=Part(leader=False), p1=Part()), 3), (RM(p0=Part(), p1=Part()), 4),
                      (RM(p1=Part()), 3)):
        op, answers = fetch(rm, epoch=epoch)
        assert op.try_complete() and answers[0][T0].error != Errors.NONE
