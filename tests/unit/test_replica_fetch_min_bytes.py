"""replica.fetch.min.bytes (Kafka's broker setting): read from the broker's properties (default 1) and sent in
every follower FetchRequest."""
from __future__ import annotations

import types

from kafkatier.cli.broker import build_config
from kafkatier.protocol import fetch_codec
from kafkatier.server.replica_fetcher import ReplicaFetcherManager, ReplicaFetcherThread


def args(*overrides: str):
    return types.SimpleNamespace(id=1, zookeeper="127.0.0.1:2181", log_dirs=["/tmp/x"], port=0, config=None,
                                 override=list(overrides), any_port_if_taken=False, remote_storage_dir=None, rack=None,
                                 session_timeout_ms=6000)


def test_the_setting_is_read_with_kafkas_default():
    assert build_config(args()).replica_fetch_min_bytes == 1
    assert build_config(args("replica.fetch.min.bytes=65536")).replica_fetch_min_bytes == 65536


def test_the_follower_asks_for_it():
    manager = ReplicaFetcherManager(2, lambda _id: None, lambda _t, _p: None, min_bytes=4096)
    assert manager.min_bytes == 4096
    thread = ReplicaFetcherThread(2, 1, lambda: None, lambda _t, _p: None, min_bytes=4096)
    assert thread.min_bytes == 4096
    body = fetch_codec.encode_fetch_request_v11(2, 500, thread.min_bytes, 10 << 20, 0, 0, -1, [], [])
    assert int.from_bytes(body[8:12], "big") == 4096   # replica id, max wait, then min bytes
