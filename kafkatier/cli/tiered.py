"""``kafkatier tiered``: inspect a topic's remote tier.

``tiered describe --topic T`` prints the topic's KIP-950 state (``tiered_epoch``, ``state``) and, per
partition, every remote segment recorded in the remote log metadata (ZooKeeper)::

    Topic: orders	TopicId: LWgrMmVrT0a__7a4SasuPA	TieredEpoch: 0	TieredState: ENABLED	RemoteSegments: 2	RemoteBytes: 160
    	Partition: 0	RemoteSegments: 2	RemoteBytes: 160	RemoteStartOffset: 0	RemoteEndOffset: 1
    	Partition: 0	StartOffset: 0	EndOffset: 0	Size: 80	State: COPY_SEGMENT_FINISHED	TieredEpoch: 0	LeaderEpochs: 0:0	MaxTimestamp: 1700000000000	Broker: 1	SegmentId: bCqX9U--S-6U8XUM9II25Q

A topic never tiered shows ``TieredEpoch: -`` and ``TieredState: -``.  ``--json`` prints the same as one JSON
document.  The metadata lives in ZooKeeper: ``--zookeeper`` is used as is, ``--data-dir`` reads it from the
local cluster's ``cluster.json``, ``--bootstrap-server`` asks a broker for its ``zookeeper.connect``
(DescribeConfigs).  Exit status: 0, 1 for an unknown topic or unreachable cluster, 2 for usage errors.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kazoo.exceptions import NoNodeError

from kafkatier.cli import common
from kafkatier.cli.main import UsageError

CLUSTER_FILE = "cluster.json"


def register(subparsers) -> None:
    p = subparsers.add_parser("tiered", help="inspect tiered storage (remote segments, tiered epoch and state)",
                              description="Inspect a topic's tiered storage (KIP-405 / KIP-950).")
    sub = p.add_subparsers(dest="tiered_command", metavar="ACTION")
    sub.required = True
    d = sub.add_parser("describe", help="remote segments per partition: offsets, size, state, tiered epoch",
                       description="Describe a topic's remote segments and its tiered epoch and state.")
    common.add_connection_options(d)
    d.add_argument("--topic", required=True, help="the topic")
    d.add_argument("--partition", type=int, default=None, help="only this partition")
    d.add_argument("--json", action="store_true", help="print one JSON document")
    d.set_defaults(func=run_describe)


# ------------------------------------------------------------------------------------------- connection

def zookeeper_from_args(args: argparse.Namespace) -> str:
    if args.zookeeper:
        return args.zookeeper
    if args.data_dir:
        path = Path(args.data_dir) / CLUSTER_FILE
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"{path} not found: no local cluster in {args.data_dir}") from None
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read {path}: {e}") from None
        zk = state.get("zookeeper") if isinstance(state, dict) else None
        if not isinstance(zk, str) or not zk:
            raise UsageError(f"{path} has no \"zookeeper\" string")
        return zk
    if args.bootstrap_server:
        return _zookeeper_from_broker(args)
    raise UsageError("one of --bootstrap-server, --zookeeper or --data-dir is required")


def _zookeeper_from_broker(args: argparse.Namespace) -> str:
    conn = common.connection_from_args(args)
    with common.open_admin(conn) as admin:
        ids = admin.broker_ids()
        for bid in ids:
            for entry in admin.describe_configs("brokers", [str(bid)])[str(bid)]:
                if entry.name == "zookeeper.connect" and entry.value:
                    return entry.value
    raise UsageError("the brokers do not report zookeeper.connect; use --zookeeper")


# --------------------------------------------------------------------------------------------- describe

def describe_topic(zk, topic: str, partition: int | None = None) -> dict[str, Any]:
    """The description as a dict (``--json`` output).  Raises LookupError for an unknown topic."""
    from kafkatier.log.remote.remote_log_metadata_manager import ZkRemoteLogMetadataManager
    from kafkatier.log.remote.tiered_znodes import read_tiered_state
    from kafkatier.zk import codecs, paths

    rlmm = ZkRemoteLogMetadataManager(zk)
    try:
        data, _ = zk.get(paths.topic(topic))
        assignment = codecs.TopicAssignment.decode(data, path=paths.topic(topic))
        topic_id, partitions = assignment.topic_id, sorted(assignment.partitions)
    except NoNodeError:
        leftovers = rlmm.list_partitions(topic)
        if not leftovers:
            raise LookupError(f"Topic '{topic}' does not exist.") from None
        topic_id, partitions = leftovers[0].topic_id, sorted({t.partition for t in leftovers})
    state = read_tiered_state(zk, topic)
    tips = {t.partition: t for t in rlmm.list_partitions(topic) if topic_id is None or t.topic_id == topic_id}
    out_parts = []
    for p in partitions:
        if partition is not None and p != partition:
            continue
        tip = tips.get(p)
        segs = rlmm.list_remote_log_segments(tip) if tip is not None else []
        out_parts.append({
            "partition": p,
            "remote_segments": len(segs),
            "remote_bytes": sum(s.segment_size_in_bytes for s in segs),
            "remote_start_offset": min((s.start_offset for s in segs), default=None),
            "remote_end_offset": max((s.end_offset for s in segs), default=None),
            "segments": [{"segment_id": s.segment_id, "start_offset": s.start_offset, "end_offset": s.end_offset,
                          "size": s.segment_size_in_bytes, "state": s.state.name, "tiered_epoch": s.tiered_epoch,
                          "leader_epochs": [[e, o] for e, o in s.segment_leader_epochs],
                          "max_timestamp_ms": s.max_timestamp_ms, "broker_id": s.broker_id,
                          "event_timestamp_ms": s.event_timestamp_ms} for s in segs],
        })
    return {"topic": topic, "topic_id": topic_id,
            "tiered_epoch": state.tiered_epoch if state else None, "tiered_state": state.state if state else None,
            "remote_segments": sum(p["remote_segments"] for p in out_parts),
            "remote_bytes": sum(p["remote_bytes"] for p in out_parts),
            "partitions": out_parts}


def _v(x: Any) -> str:
    return "-" if x is None else str(x)


def format_text(desc: dict[str, Any]) -> str:
    lines = [f"Topic: {desc['topic']}\tTopicId: {_v(desc['topic_id'])}\tTieredEpoch: {_v(desc['tiered_epoch'])}\t"
             f"TieredState: {_v(desc['tiered_state'])}\tRemoteSegments: {desc['remote_segments']}\t"
             f"RemoteBytes: {desc['remote_bytes']}"]
    for p in desc["partitions"]:
        lines.append(f"\tPartition: {p['partition']}\tRemoteSegments: {p['remote_segments']}\t"
                     f"RemoteBytes: {p['remote_bytes']}\tRemoteStartOffset: {_v(p['remote_start_offset'])}\t"
                     f"RemoteEndOffset: {_v(p['remote_end_offset'])}")
        for s in p["segments"]:
            epochs = ",".join(f"{e}:{o}" for e, o in s["leader_epochs"])
            lines.append(f"\tPartition: {p['partition']}\tStartOffset: {s['start_offset']}\t"
                         f"EndOffset: {s['end_offset']}\tSize: {s['size']}\tState: {s['state']}\t"
                         f"TieredEpoch: {s['tiered_epoch']}\tLeaderEpochs: {epochs}\t"
                         f"MaxTimestamp: {s['max_timestamp_ms']}\tBroker: {s['broker_id']}\t"
                         f"SegmentId: {s['segment_id']}")
    return "\n".join(lines)


def run_describe(args: argparse.Namespace) -> int:
    from kafkatier.admin.bootstrap import NoReachableBrokerError
    from kafkatier.admin.client import AdminError
    from kafkatier.zk.client import ZooKeeperUnavailableError, start_client

    try:
        connect = zookeeper_from_args(args)
    except (NoReachableBrokerError, AdminError) as e:
        return common.print_error("tiered", e)
    try:
        zk = start_client(connect, connect_timeout=15.0)
    except (ZooKeeperUnavailableError, ValueError) as e:
        return common.print_error("tiered", str(e))
    try:
        desc = describe_topic(zk, args.topic, args.partition)
    except LookupError as e:
        return common.print_error("tiered", f"UNKNOWN_TOPIC_OR_PARTITION: {e.args[0]}")
    finally:
        zk.stop()
        zk.close()
    if args.json:
        json.dump(desc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_text(desc))
    return 0
