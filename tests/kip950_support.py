"""Helpers for the KIP-950 cluster tests (tests/integration/test_kip950*.py, tests/e2e/test_kip950_e2e.py):
topics, records, the remote tier, the ``tieredstorage`` znodes and what brokers logged.  Not a test module."""
from __future__ import annotations

import json
import os
import re
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from kafkatier.admin.client import AdminClient, AdminError
from kafkatier.log.remote.remote_log_metadata_manager import ZkRemoteLogMetadataManager
from kafkatier.log.remote.remote_log_segment_metadata import RemoteLogSegmentState, TopicIdPartition
from kafkatier.log.remote.remote_storage_manager import LocalTieredStorage
from kafkatier.waiting import wait_for
from kafkatier.zk import codecs, paths
from kafkatier.zk.errors import NoNodeError

S = RemoteLogSegmentState
TIERED = {"remote.log.storage.system.enable": "true", "remote.log.manager.task.interval.ms": "500",
          "log.retention.check.interval.ms": "500", "log.initial.task.delay.ms": "0"}
# One 100-byte record per batch: six batches fill a 1024-byte segment.
TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1",
                "file.delete.delay.ms": "0"}
PER_SEGMENT = 6
SEGMENT_BYTES = 1020
WAIT_S = 60.0
READ_ONLY = {"remote.log.copy.disable": "true", "local.retention.bytes": "-2", "local.retention.ms": "-2"}
DELETE = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def segments(first: int, last_exclusive: int, size: int = PER_SEGMENT) -> list[tuple[int, int]]:
    return [(s, s + size - 1) for s in range(first, last_exclusive, size)]


# ------------------------------------------------------------------------------------------ ZooKeeper

def partition_state(zk, topic: str, partition: int = 0) -> dict:
    return json.loads(zk.get(paths.partition_state(topic, partition))[0])


def tiered(zk, topic: str) -> tuple[int, str]:
    """``(tiered_epoch, state)`` from the topic's ``tieredstorage`` znodes."""
    return (codecs.decode_tiered_epoch(zk.get(paths.tiered_epoch(topic))[0]),
            codecs.TieredState.decode(zk.get(paths.tiered_state(topic))[0]).state)


def topic_config(zk, topic: str) -> dict:
    return dict(codecs.EntityConfig.decode(zk.get(paths.topic_config(topic))[0]).config)


def snapshot(zk, topic: str) -> tuple:
    """What a refused change must leave alone: the config, the tiered znodes and the notifications."""
    return topic_config(zk, topic), tiered(zk, topic), sorted(zk.get_children(paths.CONFIG_CHANGES))


def wait_state(zk, topic: str, state: str, epoch: int | None = None, timeout: float = WAIT_S) -> None:
    wait_for(lambda: tiered(zk, topic)[1] == state and (epoch is None or tiered(zk, topic)[0] == epoch), timeout,
             interval=0.1, message=f"{topic} tiered state {state} (epoch {epoch}); now {tiered(zk, topic)}")


def topic_id(zk, topic: str) -> str:
    return codecs.TopicAssignment.decode(zk.get(paths.topic(topic))[0]).topic_id


def remote(zk, topic: str, partition: int = 0, tid: str | None = None) -> list:
    tip = TopicIdPartition(tid or topic_id(zk, topic), topic, partition)
    return ZkRemoteLogMetadataManager(zk).list_remote_log_segments(tip)


def finished_chain(segs, tiered_epoch: int | None = None) -> list[tuple[int, int]]:
    return [(m.start_offset, m.end_offset) for m in segs if m.state == S.COPY_SEGMENT_FINISHED
            and (tiered_epoch is None or m.tiered_epoch == tiered_epoch)]


# ------------------------------------------------------------------------------------------- cluster

def storage(cluster) -> LocalTieredStorage:
    return LocalTieredStorage(cluster.manager.state["remote_storage_dir"], broker_id=-1)


def remote_files(cluster, topic: str, partition: int = 0, tid: str | None = None) -> list[str]:
    return storage(cluster).segment_stems(TopicIdPartition(tid or topic_id(cluster.zk, topic), topic, partition))


def local_bases(cluster, broker_id: int, topic: str, partition: int = 0) -> list[int]:
    for d in cluster.manager.broker(broker_id)["log_dirs"]:
        pdir = os.path.join(d, f"{topic}-{partition}")
        if os.path.isdir(pdir):
            return sorted(int(n[:20]) for n in os.listdir(pdir) if n.endswith(".log"))
    return []


def wait_offloaded(cluster, topic: str, active_base: int, brokers=(1, 2, 3)) -> None:
    """Every segment below ``active_base`` is in the remote tier (COPY_SEGMENT_FINISHED) and each broker holds
    only the active segment locally."""
    wait_for(lambda: finished_chain(remote(cluster.zk, topic)) == segments(0, active_base)
             and all(local_bases(cluster, b, topic) == [active_base] for b in brokers), WAIT_S, interval=0.2,
             message="offloaded, only the active segment local")


def broker_log(cluster, broker_id: int) -> str:
    with open(os.path.join(cluster.manager.data_dir, "logs", f"broker-{broker_id}.log"), errors="replace") as f:
        return f.read()


def disabled_events(cluster, broker_id: int, topic: str, partition: int = 0) -> list[str]:
    """The policies of the StopReplica v5 disablements the broker performed for the partition."""
    return re.findall(rf"event=remote_partition_disabled partition={re.escape(topic)}-{partition} policy=(\S+)",
                      broker_log(cluster, broker_id))


def broker_status(cluster, broker_id: int) -> dict:
    with open(os.path.join(cluster.manager.data_dir, "status", f"broker-{broker_id}.json")) as f:
        return json.load(f)


def status_log_start_offset(cluster, broker_id: int, topic: str, partition: int = 0) -> int | None:
    """The replica's log start offset in the broker's status snapshot (rewritten every 5 s)."""
    try:
        for p in broker_status(cluster, broker_id)["partitions"]:
            if p["partition"] == f"{topic}-{partition}":
                return p["log_start_offset"]
    except (OSError, ValueError, KeyError):
        pass
    return None


# --------------------------------------------------------------------------------------------- clients

def create_topic(cluster, topic: str, partitions: int = 1, rf: int = 3, configs: dict | None = None,
                 assignment: dict[int, list[int]] | None = None) -> None:
    """Create the topic (``assignment``: its replicas by partition, instead of ``partitions`` x ``rf``) and wait
    until every partition has a leader and a full ISR."""
    if assignment:
        new = NewTopic(topic, -1, -1, replica_assignments=assignment, topic_configs=configs or {})
    else:
        new = NewTopic(topic, partitions, rf, topic_configs=configs or {})

    def attempt() -> bool:  # a young cluster may not list every broker in its metadata yet
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000)
        try:
            admin.create_topics([new], timeout_ms=30000)
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
        return True
    wait_for(attempt, WAIT_S, interval=0.2, ignore=(KafkaError,), message=f"creating {topic}")
    n = len(assignment) if assignment else partitions
    full = len(next(iter(assignment.values()))) if assignment else rf

    def ready():
        return all(partition_state(cluster.zk, topic, p)["leader"] >= 0
                   and len(partition_state(cluster.zk, topic, p)["isr"]) == full for p in range(n))
    wait_for(ready, WAIT_S, interval=0.1, ignore=(NoNodeError,), message=f"{topic} online")


def produce(cluster, topic: str, n: int, first: int = 0, partition: int = 0, timestamp_ms: int | None = None) -> None:
    """``n`` records, one batch each, acknowledged by all in-sync replicas; values ``v<seq>`` padded to 100 B."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=0, retries=10,
                             request_timeout_ms=30000)
    try:
        for i in range(first, first + n):
            producer.send(topic, f"v{i}".encode().ljust(100, b"."), partition=partition,
                          timestamp_ms=timestamp_ms).get(timeout=60)
    finally:
        producer.close()


def consume_records(cluster, topic: str, partition: int = 0, timeout: float = WAIT_S) -> list:
    """Every record (kafka-python's ``ConsumerRecord``) from the log start offset to the end."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out = []

        def done():
            for recs in consumer.poll(timeout_ms=500).values():
                out.extend(recs)
            return consumer.position(tp) >= end
        wait_for(done, timeout, interval=0, message=f"consuming {topic}-{partition} up to {end}")
        return out
    finally:
        consumer.close()


def consume(cluster, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """Every record from the log start offset to the end: ``(offset, value without padding)``."""
    return [(r.offset, r.value.rstrip(b".")) for r in consume_records(cluster, topic, partition)]


def values(first: int, last_exclusive: int) -> list[tuple[int, bytes]]:
    return [(i, f"v{i}".encode()) for i in range(first, last_exclusive)]


def earliest(cluster, topic: str, partition: int = 0) -> int:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None, request_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, partition)
        return consumer.beginning_offsets([tp])[tp]
    finally:
        consumer.close()


def alter(cluster, topic: str, configs: dict, delete: tuple = (), bootstrap: str | None = None) -> AdminError | None:
    """IncrementalAlterConfigs through kafkatier's admin client; the error, or None when accepted."""
    with AdminClient((bootstrap or cluster.bootstrap_servers).split(",")) as admin:
        try:
            admin.alter_configs("topics", topic, configs, delete)
        except AdminError as e:
            return e
    return None
