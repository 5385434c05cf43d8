"""A JBOD move under load with crashes (KIP-113; scenarios D36, D38, D39): RF 3, an ``acks=all`` idempotent
producer and a consumer running while the leader's and a follower's replicas move to their other dirs; the
leader's broker is killed -9 mid-move and restarted (the move resumes); the follower's broker is killed -9
mid-move, then crashes between the two renames of its swap, is started once with the source dir unreadable
(the partition is offline there, ``.move`` untouched) and once healthy (``.move`` becomes the replica).  At
the end every acknowledged record is read exactly once, the three replicas are byte-identical and no
``.move`` / ``.delete`` is left after ``file.delete.delay.ms``."""
from __future__ import annotations

import os
import threading
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import NoError

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

CONVERGE_S = 45.0
VALUE_PAD = b"x" * 1000
DELETE_DELAY_MS = 2000
THROTTLE = 200_000  # B/s: a few seconds per move, so the kills land mid-move


def dirs_of(cluster, b: int) -> list[str]:
    return [os.path.abspath(d) for d in cluster.manager.broker(b)["log_dirs"]]


def where(cluster, b: int, name: str) -> list[str]:
    return [d for d in dirs_of(cluster, b) if os.path.isdir(os.path.join(d, name))]


def dir_bytes(path: str) -> int:
    try:
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".log"))
    except OSError:
        return 0


def log_bytes(path: str) -> bytes:
    return b"".join(open(os.path.join(path, f), "rb").read() for f in sorted(os.listdir(path)) if f.endswith(".log"))


def state(cluster, topic: str) -> dict:
    import json
    return json.loads(cluster.zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0])


def set_throttle(cluster, b: int, rate: int) -> None:
    """Set the broker's move throttle and wait until it applied it (DescribeConfigs shows the value)."""
    from kafkatier.admin.client import AdminClient
    name = "intra.broker.throttled.rate"
    with AdminClient(cluster.bootstrap_servers.split(",")) as a:
        a.alter_configs("brokers", str(b), {name: str(rate)})
        wait_for(lambda: any(e.name == name and e.value == str(rate)
                             for e in a.describe_configs("brokers", [str(b)])[str(b)]),
                 CONVERGE_S, interval=0.1, message=f"broker {b} applying {name}={rate}")


def restart(cluster, b: int, **kw) -> None:
    wait_for(lambda: cluster.zk.exists(f"/brokers/ids/{b}") is None, 30, message=f"broker {b} deregistered")
    cluster.manager.start_broker(b, **kw)


class Load:
    """An idempotent ``acks=all`` producer (confluent-kafka: librdkafka's own threads keep producing whatever
    the test process is doing) and a tailing kafka-python consumer on its own thread."""

    def __init__(self, cluster, topic: str):
        from confluent_kafka import Producer
        self.cluster, self.topic = cluster, topic
        self.stop = threading.Event()
        self.sent = 0
        self.acked: dict[int, int] = {}  # sequence number -> offset it was acknowledged at
        self.failed = 0
        self.consumed = 0
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5, "retry.backoff.ms": 200,
                                  "batch.size": 65536,  # below segment.bytes (a larger batch is refused)
                                  "message.timeout.ms": 120000, "topic.metadata.refresh.interval.ms": 3000})
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def start(self, preload: int) -> None:
        for _ in range(preload):
            self._send()
        self.producer.flush(60)
        assert len(self.acked) == preload, f"preload: {len(self.acked)} of {preload} acknowledged, {self.failed} failed"
        for t in self.threads:
            t.start()

    def _send(self) -> None:
        seq = self.sent
        self.sent += 1

        def delivered(err, msg, seq=seq) -> None:
            if err is None:
                self.acked[seq] = msg.offset()
            else:
                self.failed += 1
        while True:
            try:
                self.producer.produce(self.topic, value=b"%08d" % seq + VALUE_PAD, partition=0, on_delivery=delivered)
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)

    def _produce(self) -> None:
        while not self.stop.wait(0.005):
            self._send()

    def _consume(self) -> None:
        c = KafkaConsumer(bootstrap_servers=self.cluster.bootstrap_servers, group_id=None,
                          enable_auto_commit=False, auto_offset_reset="earliest", request_timeout_ms=30000,
                          metadata_max_age_ms=3000)
        c.assign([TopicPartition(self.topic, 0)])
        try:
            while not self.stop.is_set():
                for recs in c.poll(timeout_ms=200).values():
                    self.consumed += len(recs)
        finally:
            c.close()

    def finish(self) -> dict[int, int]:
        """Stop producing; wait (bounded) for the outstanding acknowledgements; every record either acknowledged
        (returned: sequence -> offset) or not, and only acknowledged ones are promised."""
        self.stop.set()
        for t in self.threads:
            t.join(60)
        self.producer.flush(120)
        return dict(self.acked)


def test_move_under_load_with_kill_9_mid_move_and_between_renames(cluster_factory):
    c = cluster_factory(brokers=3, log_dirs=2)
    topic = f"jbod-load-{uuid.uuid4().hex[:8]}"
    tp_name = f"{topic}-0"
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30000)
    admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [1, 2, 3]}, topic_configs={
        "min.insync.replicas": "2", "segment.bytes": "262144", "file.delete.delay.ms": str(DELETE_DELAY_MS)})])
    wait_for(lambda: len(state(c, topic)["isr"]) == 3, CONVERGE_S, ignore=(Exception,), message="topic online")
    load = Load(c, topic)
    load.start(preload=3000)
    src = {b: where(c, b, tp_name)[0] for b in (1, 2)}
    dest = {b: [d for d in dirs_of(c, b) if d != src[b]][0] for b in (1, 2)}
    set_throttle(c, 1, THROTTLE)
    set_throttle(c, 2, 1)  # broker 2's move stays in progress (one batch copied) through broker 1's failovers
    res = admin.alter_replica_log_dirs({(topic, 0, 1): dest[1], (topic, 0, 2): dest[2]})
    assert set(res.values()) == {NoError}
    move = {b: os.path.join(dest[b], f"{tp_name}.move") for b in (1, 2)}

    # D36: during the move the destination holds <tp>.move and DescribeLogDirs lists the future replica
    wait_for(lambda: dir_bytes(move[1]) > 300_000, CONVERGE_S, message="broker 1's move under way")
    view = admin.describe_log_dirs(topic_partitions={topic: [0]}, brokers=[1])[0]["log_dirs"]
    future = [p for d in view if d["log_dir"] == dest[1] for t in d["topics"] for p in t["partitions"]
              if p["is_future_key"]]
    assert future and future[0]["offset_lag"] > 0

    # D38: kill -9 the leader mid-move; after the restart the move resumes and completes
    c.manager.kill_broker(1)
    assert os.path.isdir(move[1]) and os.path.isdir(os.path.join(src[1], tp_name))
    restart(c, 1)
    wait_for(lambda: 1 in state(c, topic)["isr"], CONVERGE_S, message="broker 1 back in the ISR")
    set_throttle(c, 1, 50_000_000)
    wait_for(lambda: where(c, 1, tp_name) == [dest[1]] and not os.path.exists(move[1]), CONVERGE_S,
             message="broker 1's move resumed and completed")

    # D39: broker 2 is killed mid-move, then crashes between the two renames of its swap
    assert os.path.isdir(move[2])
    set_throttle(c, 2, THROTTLE)
    wait_for(lambda: dir_bytes(move[2]) > 300_000, CONVERGE_S, message="broker 2's move under way")
    c.manager.kill_broker(2)
    from kafkatier.zk.kafka_zk_client import KafkaZkClient  # broker 2 is down: write its config in ZooKeeper
    kzk = KafkaZkClient(c.zk)
    current, version = kzk.get_entity_config_and_version("brokers", "2")
    kzk.change_entity_config_conditionally("brokers", "2", {**current, "intra.broker.throttled.rate": "50000000"},
                                           version)
    restart(c, 2, wait=False, extra_env={"KAFKATIER_CRASH_AT": "jbod-between-renames"})
    proc = c.manager._procs[2]  # noqa: SLF001 - the broker process this cluster manager started
    wait_for(lambda: proc.poll() is not None, CONVERGE_S, message="broker 2 to crash between the renames")
    assert proc.returncode == 137
    assert where(c, 2, tp_name) == []
    assert os.path.isdir(os.path.join(src[2], f"{tp_name}.delete")) and os.path.isdir(move[2])
    c.manager.stop_broker(2)  # bookkeeping only: the process is gone

    # (b) the source dir unreadable: the partition is offline on broker 2 and <tp>.move is left untouched
    before = log_bytes(move[2])
    c.manager.fail_log_dir(2, src[2])
    restart(c, 2)
    from kafkatier.admin.client import AdminClient
    with AdminClient(c.bootstrap_servers.split(",")) as a:
        wait_for(lambda: 2 in a.describe_topics([topic])[0].partitions[0].offline_replicas, CONVERGE_S,
                 interval=0.2, message="broker 2's replica recorded offline")
    assert os.path.isdir(move[2]) and log_bytes(move[2]) == before and where(c, 2, tp_name) == []
    c.manager.stop_broker(2)
    c.manager.restore_log_dir(2, src[2])

    # (a) all dirs healthy: <tp>.move becomes <tp>, the .delete goes after file.delete.delay.ms
    c.manager.start_broker(2)
    wait_for(lambda: where(c, 2, tp_name) == [dest[2]], CONVERGE_S, message="broker 2 promoted its .move")
    wait_for(lambda: 2 in state(c, topic)["isr"], CONVERGE_S, message="broker 2 back in the ISR")

    acked = load.finish()
    assert load.consumed > 3000, "the consumer kept reading during the moves"
    assert len(acked) >= 0.9 * load.sent and len(acked) > 3500, (len(acked), load.sent, load.failed)
    wait_for(lambda: len(state(c, topic)["isr"]) == 3, CONVERGE_S, message="full ISR")

    # every acknowledged record exactly once, at the offset it was acknowledged with
    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap_servers, group_id=None, enable_auto_commit=False,
                             check_crcs=True)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    seen: dict[int, int] = {}
    dups = []

    def read_all() -> bool:
        for recs in consumer.poll(timeout_ms=500).values():
            for r in recs:
                seq = int(r.value[:8])
                if seq in seen:
                    dups.append(seq)
                seen[seq] = r.offset
        return consumer.position(tp) >= end
    wait_for(read_all, CONVERGE_S, interval=0, message="reading the topic back")
    consumer.close()
    assert not dups
    lost = [(s, o) for s, o in acked.items() if seen.get(s) != o]
    assert not lost, f"acknowledged records lost or moved: {lost[:5]}"

    # replicas byte-identical, in their new dirs for brokers 1 and 2
    def identical() -> bool:
        copies = {b: log_bytes(os.path.join(where(c, b, tp_name)[0], tp_name)) for b in (1, 2, 3)}
        return copies[1] == copies[2] == copies[3]
    wait_for(identical, CONVERGE_S, interval=0.5, message="three identical replicas")
    assert where(c, 1, tp_name) == [dest[1]] and where(c, 2, tp_name) == [dest[2]]

    # nothing left behind once file.delete.delay.ms has passed
    def clean() -> bool:
        return not [n for b in (1, 2, 3) for d in dirs_of(c, b) for n in os.listdir(d)
                    if n.endswith((".move", ".delete", "-delete", "-future"))]
    wait_for(clean, DELETE_DELAY_MS / 1000 + CONVERGE_S, interval=0.5, message="no .move / .delete left")
    admin.close()
