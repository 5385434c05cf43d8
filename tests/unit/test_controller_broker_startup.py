"""A broker's start-up (Kafka's ``onBrokerStartup``) as one coalesced round: each new broker gets one
UpdateMetadata of every partition queued before its one LeaderAndIsr, the other brokers one UpdateMetadata of
the changed partitions, from the states in the context (no ZooKeeper read)."""
from __future__ import annotations

from kafkatier.common.structs import BrokerInfo, LeaderAndIsr, PartitionAndReplica, TopicPartition
from kafkatier.controller.context import PartitionState, ReplicaAssignment, ReplicaState
from kafkatier.controller.kafka_controller import KafkaController
from kafkatier.protocol.control_messages import LeaderAndIsrRequestData, UpdateMetadataRequestData
from kafkatier.zk.codecs import new_topic_id


class _Channel:
    def __init__(self):
        self.sent = []

    def send(self, broker_id, api_key, api_name, api_version, body, callback=None):
        self.sent.append((broker_id, api_name, api_version, body))
        return True


class _NoZk:
    """Any ZooKeeper access fails the test: the start-up round works from the context."""

    def __getattr__(self, name):
        raise AssertionError(f"ZooKeeper used: {name}")


def _controller(topics: dict[str, tuple[int, ...]], partitions: int = 4):
    """Broker 1 controls; brokers 1 and 2 are live; broker 3 (down) is in every ISR-less replica set."""
    c = KafkaController(1, _NoZk())
    ctx = c.ctx
    ctx.epoch, ctx.epoch_zk_version = 2, 2
    c.active_controller_id = 1
    for b in (1, 2):
        ctx.live_brokers[b] = BrokerInfo(b, "127.0.0.1", 9090 + b, epoch=100 + b)
    for t, replicas in topics.items():
        ctx.all_topics.add(t)
        ctx.topic_ids[t] = new_topic_id()
        for p in range(partitions):
            tp = TopicPartition(t, p)
            ctx.update_assignment(tp, ReplicaAssignment(replicas))
            live = [r for r in replicas if r in ctx.live_brokers]
            ctx.partition_leadership[tp] = LeaderAndIsr(live[0], 3, tuple(live), 2, partition_epoch=5)
            ctx.partition_states[tp] = PartitionState.ONLINE
            for r in replicas:
                ctx.replica_states[PartitionAndReplica(tp, r)] = (ReplicaState.ONLINE if r in ctx.live_brokers
                                                                  else ReplicaState.OFFLINE)
    c.channel = _Channel()
    return c


def _start(c: KafkaController, broker: int) -> list:
    c.ctx.live_brokers[broker] = BrokerInfo(broker, "127.0.0.1", 9090 + broker, epoch=200 + broker)
    c.on_broker_startup([broker])
    return c.channel.sent


def _um_partitions(body) -> set:
    um = UpdateMetadataRequestData.from_json(8, body)
    return {(t.topic_name, p.partition_index) for t in um.topic_states for p in t.partition_states}


def test_a_restarted_broker_gets_one_update_metadata_then_one_leader_and_isr():
    c = _controller({"a": (1, 2, 3), "b": (2, 3, 1)})
    sent = _start(c, 3)
    per_broker = {b: [s[1] for s in sent if s[0] == b] for b in (1, 2, 3)}
    assert per_broker == {1: ["UpdateMetadata"], 2: ["UpdateMetadata"], 3: ["UpdateMetadata", "LeaderAndIsr"]}
    everything = {(t, p) for t in ("a", "b") for p in range(4)}
    for b in (1, 2, 3):
        assert _um_partitions(next(s[3] for s in sent if s[0] == b)) == everything
    lai = LeaderAndIsrRequestData.from_json(7, next(s[3] for s in sent if s[1] == "LeaderAndIsr"))
    assert lai.broker_epoch == 203
    assert {(t.topic_name, p.partition_index) for t in lai.topic_states for p in t.partition_states} == everything
    assert all(c.ctx.replica_states[PartitionAndReplica(TopicPartition(t, p), 3)] is ReplicaState.ONLINE
               for t, p in everything)


def test_the_other_brokers_get_only_the_partitions_the_round_changed():
    """A broker holding some partitions: the others' UpdateMetadata names those only, while the new broker's
    names every partition (Kafka sends it a separate UpdateMetadata of all of them)."""
    c = _controller({"on3": (1, 3), "not3": (1, 2)})
    sent = _start(c, 3)
    ums = {s[0]: _um_partitions(s[3]) for s in sent if s[1] == "UpdateMetadata"}
    on3 = {("on3", p) for p in range(4)}
    assert ums[1] == ums[2] == on3
    assert ums[3] == on3 | {("not3", p) for p in range(4)}
    assert [s[1] for s in sent if s[0] == 3] == ["UpdateMetadata", "LeaderAndIsr"]


def test_a_broker_without_replicas_gets_every_partition_and_the_others_only_the_live_brokers():
    c = _controller({"t": (1, 2)})
    sent = _start(c, 3)
    ums = {s[0]: s[3] for s in sent if s[1] == "UpdateMetadata"}
    assert sorted(ums) == [1, 2, 3] and not [s for s in sent if s[1] == "LeaderAndIsr"]
    assert _um_partitions(ums[1]) == _um_partitions(ums[2]) == set()
    assert _um_partitions(ums[3]) == {("t", p) for p in range(4)}
    assert [b.id for b in UpdateMetadataRequestData.from_json(8, ums[1]).live_brokers] == [1, 2, 3]
