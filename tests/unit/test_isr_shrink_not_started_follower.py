"""ISR shrink (issue 15): a follower that has not fetched since the leader took over, while nothing was appended in
this epoch, stays in the ISR past replica.lag.time.max.ms (a broker handling a LeaderAndIsr of thousands of new
partitions starts fetching late); a follower behind on records of this epoch, or one that fetched and stopped,
is removed as before."""
from __future__ import annotations

from kafka.record.memory_records import MemoryRecordsBuilder

import kafkatier.server.partition as partition_module
from kafkatier.log.log import Log
from kafkatier.log.log_config import LogConfig
from kafkatier.server.partition import Partition
from kafkatier.protocol.control_messages import LeaderAndIsrPartitionState

LAG_MS = 30_000


class Clock:
    now = 1_000_000


def _leader(tmp_path, monkeypatch) -> tuple[Partition, list]:
    monkeypatch.setattr(partition_module, "now_ms", lambda: Clock.now)
    writes = []

    def isr_writer(batch):
        out = {}
        for w in batch:
            writes.append(w.isr)
            out[w.tp] = len(writes)
        return out
    p = Partition("t", 0, 1, Log(str(tmp_path / "t-0"), LogConfig()), isr_writer, lambda: 1, LAG_MS)
    p.make_leader(LeaderAndIsrPartitionState.from_json(7, {"leader": 1, "leader_epoch": 3, "isr": [1, 2, 3], "replicas": [1, 2, 3], "partition_epoch": 0}),
                  controller_epoch=1)
    return p, writes


def _records() -> bytes:
    b = MemoryRecordsBuilder(2, 0, 1 << 16)
    b.append(1_000, b"k", b"v")
    b.close()
    return bytes(b.buffer())


def test_a_follower_not_started_stays_while_nothing_was_appended(tmp_path, monkeypatch):
    p, writes = _leader(tmp_path, monkeypatch)
    Clock.now += 10 * LAG_MS
    p.maybe_shrink_isr()
    assert p.isr == (1, 2, 3) and writes == []
    # A record is appended; replica 2 keeps up, replica 3 still has not fetched: now it misses data of this epoch.
    p.log.append_as_leader(_records(), p.leader_epoch)
    Clock.now += LAG_MS + 1
    p.update_follower_fetch_state(2, 1, 0, 1)
    p.maybe_shrink_isr()
    assert p.isr == (1, 2) and writes == [(1, 2)]


def test_a_follower_that_fetched_and_stopped_is_removed(tmp_path, monkeypatch):
    p, writes = _leader(tmp_path, monkeypatch)
    p.update_follower_fetch_state(2, 0, 0, 0)
    p.update_follower_fetch_state(3, 0, 0, 0)
    p.log.append_as_leader(_records(), p.leader_epoch)
    Clock.now += LAG_MS + 1
    p.update_follower_fetch_state(3, 1, 0, 1)  # 3 keeps up, 2 stopped fetching at offset 0
    p.maybe_shrink_isr()
    assert p.isr == (1, 3) and writes == [(1, 3)]


def test_a_caught_up_follower_rejoins_the_isr_only_while_its_broker_is_alive(tmp_path, monkeypatch):
    """Kafka's ``isReplicaIsrEligible`` in ZooKeeper mode: a follower that caught up is added back to the ISR only
    while the leader's metadata cache lists its broker as alive (a fenced zombie still fetching is not)."""
    monkeypatch.setattr(partition_module, "now_ms", lambda: Clock.now)
    alive = {1, 2}
    writes = []

    def isr_writer(batch):
        writes.extend(w.isr for w in batch)
        return {w.tp: len(writes) for w in batch}
    p = Partition("t", 0, 1, Log(str(tmp_path / "t-0"), LogConfig()), isr_writer, lambda: 1, LAG_MS,
                  broker_alive=alive.__contains__)
    p.make_leader(LeaderAndIsrPartitionState.from_json(7, {"leader": 1, "leader_epoch": 3, "isr": [1],
                                                            "replicas": [1, 2, 3], "partition_epoch": 0}),
                  controller_epoch=1)
    p.update_follower_fetch_state(3, 0, 0, 0)
    assert p.isr == (1,) and writes == []
    p.update_follower_fetch_state(2, 0, 0, 0)
    assert p.isr == (1, 2) and writes == [(1, 2)]
    alive.add(3)
    p.update_follower_fetch_state(3, 0, 0, 0)
    assert p.isr == (1, 2, 3)
