"""Partition reassignment on a real 5-broker cluster (issue #14 item 1): AlterPartitionReassignments and
ListPartitionReassignments, the legacy ``/admin/reassign_partitions`` znode, a move under an acks=all producer
and a consumer, cancel, the controller killed mid-way, a tiered topic and a topic whose tiered storage is being
disabled, and the errors for bad requests.

One cluster serves the module; a test that kills a broker starts it again before it ends.  Moves are kept in
progress deterministically by a target replica on a stopped broker (through the znode, which, as in Kafka,
does not check that the brokers are alive)."""
from __future__ import annotations

import os
import threading

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaProducer

from kafkatier.admin.client import AdminClient, NewTopicSpec
from kafkatier.waiting import wait_for
from kafkatier.zk import codecs, paths
from kafkatier.zk.errors import NoNodeError
from kip950_support import (READ_ONLY, TIERED, TOPIC_CONFIG, WAIT_S, alter, broker_log, broker_status, disabled_events,
                            finished_chain, partition_state, produce, remote, segments, tiered, unique, values,
                            wait_state)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BROKERS = 5


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(brokers=BROKERS, log_dirs=1, overrides=TIERED)


@pytest.fixture(scope="module")
def admin(cluster):
    with AdminClient(cluster.bootstrap_servers.split(",")) as a:
        yield a


def assignment(zk, topic: str) -> codecs.ReplicaAssignment:
    return codecs.TopicAssignment.decode(zk.get(paths.topic(topic))[0]).replica_assignment(0)


def create(cluster, topic: str, replicas, configs: dict | None = None) -> None:
    """One partition on ``replicas``, online with every replica in the ISR."""
    with AdminClient(cluster.bootstrap_servers.split(",")) as a:
        assert a.create_topics([NewTopicSpec(topic, -1, -1, configs=configs or {},
                                             replica_assignment={0: list(replicas)})]) == {topic: None}
    wait_for(lambda: sorted(partition_state(cluster.zk, topic)["isr"]) == sorted(replicas), WAIT_S, interval=0.1,
             ignore=(NoNodeError,), message=f"{topic} online")


def wait_done(cluster, admin, topic: str, target) -> None:
    """The reassignment finished: RS = TRS in ZooKeeper, nothing listed, TRS the ISR."""
    def done():
        a = assignment(cluster.zk, topic)
        return (a == codecs.ReplicaAssignment(tuple(target)) and (topic, 0) not in admin.list_partition_reassignments()
                and sorted(partition_state(cluster.zk, topic)["isr"]) == sorted(target))
    wait_for(done, WAIT_S, interval=0.1, message=f"{topic} reassigned to {list(target)}")


def replica_dirs(cluster, topic: str) -> set[int]:
    """Brokers holding a local log directory of ``topic``-0."""
    out = set()
    for b in cluster.broker_ids():
        for d in cluster.manager.broker(b)["log_dirs"]:
            if os.path.isdir(os.path.join(d, f"{topic}-0")):
                out.add(b)
    return out


def consume(cluster, topic: str) -> list[tuple[int, bytes]]:
    """Every record of ``topic``-0 from its log start (the remote tier included), with confluent-kafka (the
    kafka-python consumer across leader changes is covered by ``tests/e2e/test_offset_for_leader_epoch_e2e.py``)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": unique("reader"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        # Right after a move a client may still ask a broker whose metadata is a moment old: NOT_LEADER, retried.
        _low, high = wait_for(lambda: consumer.get_watermark_offsets(CTopicPartition(topic, 0), timeout=10), WAIT_S,
                              interval=0.2, ignore=(KafkaException,), message=f"watermarks of {topic}-0")
        consumer.assign([CTopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes]] = []

        def done() -> bool:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                out.append((m.offset(), m.value().rstrip(b".")))
            return bool(out) and out[-1][0] >= high - 1
        wait_for(done, WAIT_S, interval=0, message=f"consuming {topic}-0 up to {high}")
        return out
    finally:
        consumer.close()


def non_controllers(cluster) -> list[int]:
    c = cluster.controller_id()
    return [b for b in cluster.broker_ids() if b != c]


def write_legacy(cluster, topic: str, replicas) -> None:
    data = codecs.ReassignPartitions({(topic, 0): tuple(replicas)}).encode()
    try:
        cluster.zk.create(paths.REASSIGN_PARTITIONS, data, makepath=True)
    except Exception:  # noqa: BLE001 - NodeExists: a previous test's entry is still being processed
        wait_for(lambda: cluster.zk.exists(paths.REASSIGN_PARTITIONS) is None, WAIT_S, message="znode free")
        cluster.zk.create(paths.REASSIGN_PARTITIONS, data, makepath=True)


# ------------------------------------------------------------------------------------------------ a move

def test_move_rf3_to_other_brokers_under_acks_all_producer_and_consumer(cluster, admin):
    topic = unique("move")
    others = non_controllers(cluster)
    origin, target = others[:3], [others[3], others[2], cluster.controller_id()]
    create(cluster, topic, origin)
    stop = threading.Event()
    acked, errors, seen = [], [], []

    def produce_loop():
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5,
                                 enable_idempotence=True, retries=100, request_timeout_ms=30000)
        try:
            i = 0
            while not stop.is_set() or i < 300:
                futures = [(n, producer.send(topic, f"v{n}".encode(), partition=0)) for n in range(i, i + 20)]
                for n, f in futures:
                    try:
                        f.get(timeout=60)
                        acked.append(n)
                    except Exception as e:  # noqa: BLE001
                        errors.append((n, e))
                i += 20
        finally:
            producer.close()

    def consume_loop():
        # confluent-kafka, which validates its position with OffsetForLeaderEpoch after each leader change.
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": topic,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([CTopicPartition(topic, 0, 0)])
        try:
            while True:
                m = consumer.poll(0.2)
                if m is not None and m.error() is None:
                    seen.append((m.offset(), m.value().decode()))
                if stop.is_set() and not producer_thread.is_alive() and len(seen) >= len(acked):
                    return
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(("consumer", e))
            raise
        finally:
            consumer.close()
    producer_thread = threading.Thread(target=produce_loop)
    consumer_thread = threading.Thread(target=consume_loop)
    producer_thread.start()
    consumer_thread.start()
    wait_for(lambda: len(acked) >= 100, WAIT_S, message="producer running")
    assert admin.alter_partition_reassignments({(topic, 0): target}) == {(topic, 0): None}
    wait_done(cluster, admin, topic, target)
    leader = partition_state(cluster.zk, topic)["leader"]
    stop.set()
    producer_thread.join(120)
    consumer_thread.join(30)
    assert not errors
    assert not consumer_thread.is_alive()
    assert leader == target[0]  # the first target replica in the ISR
    offsets = [o for o, _ in seen]
    assert len(offsets) == len(set(offsets))
    assert [v for _, v in seen] == [f"v{n}" for n in acked]  # every acknowledged record, once, in order
    wait_for(lambda: replica_dirs(cluster, topic) == set(target), WAIT_S, message="old replicas deleted")


# ------------------------------------------------------------------------------------------------ bad input

def test_bad_requests_get_kafkas_error_codes(cluster, admin):
    topic = unique("bad")
    b = sorted(cluster.broker_ids())
    create(cluster, topic, b[:2])
    out = admin.alter_partition_reassignments({
        (topic, 0): [b[0], b[0]], (topic, 1): [b[0]], ("no-such-topic", 0): [b[0]]})
    assert out[(topic, 0)].name == "INVALID_REPLICA_ASSIGNMENT"
    assert "Duplicate replica ids" in out[(topic, 0)].message
    assert out[(topic, 1)].name == "UNKNOWN_TOPIC_OR_PARTITION"
    assert out[("no-such-topic", 0)].name == "UNKNOWN_TOPIC_OR_PARTITION"
    out = admin.alter_partition_reassignments({(topic, 0): [], })
    assert out[(topic, 0)].name == "INVALID_REPLICA_ASSIGNMENT" and "Empty replica list" in out[(topic, 0)].message
    out = admin.alter_partition_reassignments({(topic, 0): [b[0], 99]})
    assert out[(topic, 0)].name == "INVALID_REPLICA_ASSIGNMENT" and "not alive" in out[(topic, 0)].message
    out = admin.alter_partition_reassignments({(topic, 0): None})
    assert out[(topic, 0)].name == "NO_REASSIGNMENT_IN_PROGRESS"
    assert assignment(cluster.zk, topic) == codecs.ReplicaAssignment(tuple(b[:2]))  # nothing changed
    assert admin.list_partition_reassignments() == {}


# ------------------------------------------------------------------------------------------------ in flight

def kill(cluster, broker_id: int) -> None:
    cluster.manager.kill_broker(broker_id)
    wait_for(lambda: cluster.zk.exists(paths.broker(broker_id)) is None, WAIT_S, interval=0.1,
             message=f"broker {broker_id} gone")


def restart(cluster, broker_id: int) -> None:
    cluster.manager.start_broker(broker_id)
    wait_for(lambda: cluster.zk.exists(paths.broker(broker_id)) is not None, WAIT_S, interval=0.1,
             message=f"broker {broker_id} back")


def wait_in_progress(cluster, topic: str, adding) -> None:
    wait_for(lambda: assignment(cluster.zk, topic).adding == tuple(adding), WAIT_S, interval=0.1,
             message=f"{topic} adding {list(adding)}")


def test_controller_killed_mid_reassignment_and_the_next_one_finishes_it(cluster, admin):
    """Through the legacy znode: the new replica's broker is down, so the move waits; the controller is
    killed -9; the next controller resumes the move, which finishes when the broker returns; the znode is
    deleted once empty."""
    topic = unique("failover")
    controller = cluster.controller_id()
    others = non_controllers(cluster)
    origin, target, late = others[:3], [others[3], others[1], others[2]], others[3]
    create(cluster, topic, origin)
    produce(cluster, topic, 30)
    kill(cluster, late)
    try:
        write_legacy(cluster, topic, target)
        wait_in_progress(cluster, topic, [late])
        assert admin.list_partition_reassignments()[(topic, 0)].adding_replicas == (late,)
        kill(cluster, controller)
        try:
            wait_for(lambda: cluster.controller_id() not in (None, controller), WAIT_S, message="a new controller")
        finally:
            restart(cluster, controller)
    finally:
        restart(cluster, late)
    wait_done(cluster, admin, topic, target)
    wait_for(lambda: cluster.zk.exists(paths.REASSIGN_PARTITIONS) is None, WAIT_S, message="znode deleted")
    assert partition_state(cluster.zk, topic)["leader"] == late  # origin's leader left; first target in ISR
    assert consume(cluster, topic) == values(0, 30)


def test_cancel_mid_way_restores_the_origin_replicas(cluster, admin):
    topic = unique("cancel")
    others = non_controllers(cluster)
    origin, late = others[:3], others[3]
    create(cluster, topic, origin)
    produce(cluster, topic, 20)
    leader = partition_state(cluster.zk, topic)["leader"]
    kill(cluster, late)
    try:
        write_legacy(cluster, topic, [late, others[1], others[2]])
        wait_in_progress(cluster, topic, [late])
        ongoing = admin.list_partition_reassignments([(topic, 0)])[(topic, 0)]
        assert (ongoing.adding_replicas, ongoing.removing_replicas) == ((late,), (others[0],))
        assert admin.alter_partition_reassignments({(topic, 0): None}) == {(topic, 0): None}
        # As Kafka: the origin replicas come back in their order within RS (TRS first), nothing adding/removing.
        restored = codecs.ReplicaAssignment((others[1], others[2], others[0]))
        wait_for(lambda: assignment(cluster.zk, topic) == restored, WAIT_S, interval=0.1, message="origin restored")
        assert cluster.zk.exists(paths.REASSIGN_PARTITIONS) is None  # the API's cancel wins over the znode
        assert admin.list_partition_reassignments() == {}
        assert partition_state(cluster.zk, topic)["leader"] == leader
    finally:
        restart(cluster, late)
    produce(cluster, topic, 5, first=20)
    assert consume(cluster, topic) == values(0, 25)
    assert replica_dirs(cluster, topic) == set(origin)


def test_garbage_legacy_znode_is_logged_and_removed_and_the_controller_keeps_working(cluster, admin):
    topic = unique("garbage")
    others = non_controllers(cluster)
    create(cluster, topic, others[:2])
    controller = cluster.controller_id()
    cluster.zk.create(paths.REASSIGN_PARTITIONS, b"{not json", makepath=True)
    wait_for(lambda: cluster.zk.exists(paths.REASSIGN_PARTITIONS) is None, WAIT_S, interval=0.1,
             message="garbage znode deleted")
    assert "Ignoring partition reassignment due to invalid json" in broker_log(cluster, controller)
    write_legacy(cluster, topic, others[1:3])
    wait_done(cluster, admin, topic, others[1:3])
    wait_for(lambda: cluster.zk.exists(paths.REASSIGN_PARTITIONS) is None, WAIT_S, message="znode deleted")


# ------------------------------------------------------------------------------------------------ tiered storage

def test_tiered_topic_moves_keeping_its_remote_data_and_the_new_leader_copies_from_the_remote_log_end(cluster,
                                                                                                       admin):
    topic = unique("tiered")
    others = non_controllers(cluster)
    origin, target = others[:3], [others[3], others[1], others[2]]  # the leader moves to a broker without data
    create(cluster, topic, origin, TOPIC_CONFIG)
    produce(cluster, topic, 30)                                      # rolled: [0,6) .. [18,24)
    wait_for(lambda: finished_chain(remote(cluster.zk, topic)) == segments(0, 24), WAIT_S, interval=0.2,
             message="offloaded")
    assert admin.alter_partition_reassignments({(topic, 0): target}) == {(topic, 0): None}
    wait_done(cluster, admin, topic, target)
    assert partition_state(cluster.zk, topic)["leader"] == others[3]
    assert finished_chain(remote(cluster.zk, topic)) == segments(0, 24)  # the removed leader kept the remote tier
    assert consume(cluster, topic) == values(0, 30)                  # [0,24) read from the remote tier
    produce(cluster, topic, 12, first=30)                            # rolls [24,30) and [30,36)
    wait_for(lambda: finished_chain(remote(cluster.zk, topic)) == segments(0, 36), WAIT_S, interval=0.2,
             message="the new leader offloads from the remote log end")
    assert consume(cluster, topic) == values(0, 42)


def test_a_replica_added_while_tiered_storage_is_disabling_is_disabled_before_it_completes(cluster, admin):
    """docs/controller.md#tiered-storage-disablement-manager: a replica on a stopped broker keeps the disablement in
    DISABLING; the reassignment replaces that replica by a new one, which gets StopReplica v5 before the state
    becomes DISABLED."""
    topic = unique("disabling")
    others = non_controllers(cluster)
    origin, late, new = others[:3], others[2], others[3]
    create(cluster, topic, origin, TOPIC_CONFIG)
    produce(cluster, topic, 30)
    wait_for(lambda: finished_chain(remote(cluster.zk, topic)) == segments(0, 24), WAIT_S, interval=0.2,
             message="offloaded")
    kill(cluster, late)
    try:
        assert alter(cluster, topic, READ_ONLY) is None
        assert tiered(cluster.zk, topic) == (1, "DISABLING")         # waits for the stopped broker's replica
        target = [others[0], others[1], new]
        assert admin.alter_partition_reassignments({(topic, 0): target}) == {(topic, 0): None}
        wait_done(cluster, admin, topic, target)
        wait_state(cluster.zk, topic, "DISABLED", 1)
        assert disabled_events(cluster, new, topic) == ["read-only"]
    finally:
        restart(cluster, late)
    assert consume(cluster, topic) == values(0, 30)


def test_topic_deletion_waits_for_a_reassignment_and_a_topic_being_deleted_cannot_be_reassigned(cluster, admin):
    from kafkatier.zk.kafka_zk_client import KafkaZkClient
    topic = unique("deleting")
    others = non_controllers(cluster)
    origin, late = others[:2], others[3]
    create(cluster, topic, origin)
    kill(cluster, late)
    try:
        write_legacy(cluster, topic, [late, others[1]])
        wait_in_progress(cluster, topic, [late])
        assert KafkaZkClient(cluster.zk).mark_topic_for_deletion(topic)
        controller = cluster.controller_id()
        wait_for(lambda: topic in broker_status(cluster, controller)["controller"]["topics_to_be_deleted"], WAIT_S,
                 interval=0.2, ignore=(OSError, ValueError, KeyError, TypeError),
                 message="the controller queued the topic for deletion")
        out = admin.alter_partition_reassignments({(topic, 0): [others[1], others[2]]})
        assert out[(topic, 0)].name == "UNKNOWN_TOPIC_OR_PARTITION"
        assert cluster.zk.exists(paths.topic(topic)) is not None  # deletion waits for the reassignment
    finally:
        restart(cluster, late)
    wait_for(lambda: cluster.zk.exists(paths.topic(topic)) is None
             and cluster.zk.exists(paths.delete_topic(topic)) is None, WAIT_S, interval=0.1,
             message="topic deleted once the reassignment finished")
    wait_for(lambda: not replica_dirs(cluster, topic), WAIT_S, message="every replica deleted")
    assert cluster.zk.exists(paths.REASSIGN_PARTITIONS) is None
