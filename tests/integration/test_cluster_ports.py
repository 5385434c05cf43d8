"""Ports (issue 25): nothing picks a port for another process to bind later.  A broker binds its own port (any
free one, or on a restart its previous one unless taken) and publishes it; the embedded ZooKeeper, which cannot
bind port 0, retries with a fresh port when the one it was given is taken -- by anything, another ZooKeeper
included.  Here every port a run is handed is taken on purpose, and the cluster still starts."""
from __future__ import annotations

import contextlib
import json
import os
import socket

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

import kafkatier.cluster.embedded_zookeeper as embedded
from kafkatier.cluster.manager import ClusterManager
from kafkatier.zk.client import start_client
from kafkatier.zk.kafka_zk_client import KafkaZkClient
from kafkatier.waiting import wait_for

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def held_port():
    """A port another process holds (listening, never answering), as on a busy machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def registered_port(zk, broker_id: int) -> int:
    return json.loads(zk.get(f"/brokers/ids/{broker_id}")[0])["port"]


def round_trip(bootstrap: str, topic: str, value: bytes) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        p.send(topic, value, partition=0).get(timeout=30)
    finally:
        p.close(timeout=10)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                      consumer_timeout_ms=10000)
    try:
        c.assign([TopicPartition(topic, 0)])
        assert value in [r.value for r in c]
    finally:
        c.close()


def test_every_port_handed_out_is_taken_and_the_cluster_still_starts(tmp_path, monkeypatch):
    with held_port() as zk_taken:
        # The embedded ZooKeeper is first handed a port someone holds: it must notice and take another.
        handed = iter([zk_taken])
        pick = embedded.free_port
        monkeypatch.setattr(embedded, "free_port", lambda host=embedded.DEFAULT_HOST: next(handed, None) or pick(host))
        m = ClusterManager(str(tmp_path / "c"))
        try:
            state = m.up(brokers=2, log_dirs_per_broker=1, timeout=120)
            assert not state["zookeeper"].endswith(f":{zk_taken}")
            zk = start_client(state["zookeeper"])
            try:
                ports = {b["id"]: b["port"] for b in state["brokers"]}
                assert all(ports.values()) and state["bootstrap_servers"] == ",".join(
                    f"127.0.0.1:{ports[i]}" for i in (1, 2))
                assert {i: registered_port(zk, i) for i in (1, 2)} == ports      # what the brokers really bound
                on_disk = json.load(open(tmp_path / "c" / "cluster.json"))
                assert on_disk["bootstrap_servers"] == state["bootstrap_servers"]
                KafkaZkClient(zk).create_topic("ports", {0: [1, 2]}, {})

                # A restarted broker keeps its port when it is free ...
                m.stop_broker(2)
                m.start_broker(2)
                assert m.broker(2)["port"] == ports[2] == registered_port(zk, 2)

                # ... and when another process took it meanwhile, listens elsewhere and says where.
                m.stop_broker(1)
                with socket.socket() as taker:
                    taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the old one's TIME_WAITs
                    taker.bind(("127.0.0.1", ports[1]))
                    taker.listen(1)
                    m.start_broker(1)
                    moved = m.broker(1)["port"]
                    assert moved != ports[1] and registered_port(zk, 1) == moved
                    on_disk = json.load(open(tmp_path / "c" / "cluster.json"))
                    assert on_disk["bootstrap_servers"] == f"127.0.0.1:{moved},127.0.0.1:{ports[2]}"
                    wait_for(lambda: len(json.loads(zk.get("/brokers/topics/ports/partitions/0/state")[0])["isr"])
                             == 2, 60, interval=0.2, message="both replicas in sync")
                    round_trip(m.bootstrap_servers, "ports", b"after the move")
                    assert os.path.exists(tmp_path / "c" / "status" / "broker-1.port")
            finally:
                zk.stop()
                zk.close()
        finally:
            m.down()
