"""``kafkatier tiered``: inspect a topic's remote tier.

``tiered describe --topic T`` prints the topic's KIP-950 state (``tiered_epoch``, ``state``) and, per
partition, every remote segment recorded in the remote log metadata (ZooKeeper)::

    Topic: orders	TopicId: LWgrMmVrT0a__7a4SasuPA	TieredEpoch: 0	TieredState: ENABLED	RemoteSegments: 2	RemoteBytes: 160	ByTieredEpoch: 0:2/160	PendingReplicas: none
    	Partition: 0	RemoteSegments: 2	RemoteBytes: 160	RemoteStartOffset: 0	RemoteEndOffset: 1	ByTieredEpoch: 0:2/160
    	Partition: 0	StartOffset: 0	EndOffset: 0	Size: 80	State: COPY_SEGMENT_FINISHED	TieredEpoch: 0	LeaderEpochs: 0:0	MaxTimestamp: 1700000000000	Broker: 1	SegmentId: bCqX9U--S-6U8XUM9II25Q

The topic line and every partition line end with the remote segments and bytes per tiered epoch
(``ByTieredEpoch: 0:4/4080,1:2/2040``, epoch:segments/bytes).  The topic line also says which replicas a
DISABLING topic still waits for (``PendingReplicas: orders-0-3``, partition-replica): only the active
controller knows, so they come from its status snapshot and need ``--data-dir`` (otherwise
``unknown (use --data-dir)``); the disablement's elapsed time and the last completed one's duration follow
when known.  A topic never tiered shows ``TieredEpoch: -`` and ``TieredState: -``.  ``--json`` prints the same
as one JSON document.  The metadata lives in ZooKeeper: ``--zookeeper`` is used as is, ``--data-dir`` reads it from the
local cluster's ``cluster.json``, ``--bootstrap-server`` asks a broker for its ``zookeeper.connect``
(DescribeConfigs).  Exit status: 0, 1 for an unknown topic or unreachable cluster, 2 for usage errors.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kafkatier.zk.errors import NoNodeError

from kafkatier.cli import common
from kafkatier.cli.main import UsageError

CLUSTER_FILE = "cluster.json"


def register(subparsers) -> None:
    p = subparsers.add_parser("tiered", help="inspect tiered storage (remote segments, tiered epoch and state)",
                              description="Inspect a topic's tiered storage (KIP-405 / KIP-950).")
    sub = p.add_subparsers(dest="tiered_command", metavar="ACTION", required=True)
    d = common.add_client_command(sub, "describe", run_describe,
                                  help="remote segments per partition: offsets, size, state, tiered epoch",
                                  description="Describe a topic's remote segments and its tiered epoch and state.")
    d.add_argument("--topic", required=True, help="the topic")
    d.add_argument("--partition", type=int, default=None, help="only this partition")
    d.add_argument("--json", action="store_true", help="print one JSON document")


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

def _by_epoch(segs) -> dict[str, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for s in segs:
        e = out.setdefault(s.tiered_epoch, {"segments": 0, "bytes": 0})
        e["segments"] += 1
        e["bytes"] += s.segment_size_in_bytes
    return {str(k): v for k, v in sorted(out.items())}


def disablement_status(zk, data_dir: str | None, topic: str, state: str | None) -> dict[str, Any]:
    """Pending replicas of a DISABLING topic, from the active controller's status snapshot
    (``<data-dir>/status/broker-<controller>.json``, rewritten every few seconds); without a data directory
    they are unknown.  Not DISABLING: none pending."""
    out: dict[str, Any] = {"pending_replicas": [], "source": None, "elapsed_ms": None, "last_duration_ms": None}
    snapshot = None
    if data_dir is not None:
        from kafkatier.zk import paths
        try:
            controller = json.loads(zk.get(paths.CONTROLLER)[0])["brokerid"]
            path = Path(data_dir) / "status" / f"broker-{controller}.json"
            snapshot = json.loads(path.read_text(encoding="utf-8")).get("controller") or {}
            out["source"] = str(path)
        except (NoNodeError, OSError, ValueError, KeyError, TypeError, AttributeError):
            snapshot = None
    tsd = (snapshot or {}).get("tiered_storage_disablement") or {}
    done = [c for c in tsd.get("recently_completed", []) if c.get("topic") == topic]
    if done:
        out["last_duration_ms"] = done[-1].get("duration_ms")
    if state != "DISABLING":
        return out
    entry = (tsd.get("topics_to_be_disabled") or {}).get(topic)
    if entry is None:
        out["pending_replicas"] = None  # unknown: no snapshot, or one older than the disablement
        if out["source"] is None:
            out["source"] = "unknown (use --data-dir)"
        return out
    out["pending_replicas"] = list(entry.get("pending_replicas", []))
    out["elapsed_ms"] = entry.get("elapsed_ms")
    return out


def describe_topic(zk, topic: str, partition: int | None = None, data_dir: str | None = None) -> dict[str, Any]:
    """The description as a dict (``--json`` output).  Raises LookupError for an unknown topic."""
    from kafkatier.log.remote.remote_log_metadata_manager import ZkRemoteLogMetadataManager
    from kafkatier.zk.tiered_state import read_tiered_state
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
            "by_tiered_epoch": _by_epoch(segs),
            "segments": [{"segment_id": s.segment_id, "start_offset": s.start_offset, "end_offset": s.end_offset,
                          "size": s.segment_size_in_bytes, "state": s.state.name, "tiered_epoch": s.tiered_epoch,
                          "leader_epochs": [[e, o] for e, o in s.segment_leader_epochs],
                          "max_timestamp_ms": s.max_timestamp_ms, "broker_id": s.broker_id,
                          "event_timestamp_ms": s.event_timestamp_ms} for s in segs],
        })
    by_epoch: dict[str, dict[str, int]] = {}
    for p in out_parts:
        for e, v in p["by_tiered_epoch"].items():
            acc = by_epoch.setdefault(e, {"segments": 0, "bytes": 0})
            acc["segments"] += v["segments"]
            acc["bytes"] += v["bytes"]
    return {"topic": topic, "topic_id": topic_id,
            "tiered_epoch": state.tiered_epoch if state else None, "tiered_state": state.state if state else None,
            "remote_segments": sum(p["remote_segments"] for p in out_parts),
            "remote_bytes": sum(p["remote_bytes"] for p in out_parts),
            "by_tiered_epoch": dict(sorted(by_epoch.items(), key=lambda kv_: int(kv_[0]))),
            "disablement": disablement_status(zk, data_dir, topic, state.state if state else None),
            "partitions": out_parts}


def _v(x: Any) -> str:
    return "-" if x is None else str(x)


def _epochs(by_epoch: dict[str, dict[str, int]]) -> str:
    """``<tiered epoch>:<segments>/<bytes>`` per epoch, or ``-``."""
    return ",".join(f"{e}:{v['segments']}/{v['bytes']}" for e, v in by_epoch.items()) or "-"


def _pending(d: dict[str, Any]) -> str:
    if d["pending_replicas"] is None:
        return "unknown (use --data-dir)" if d["source"] in (None, "unknown (use --data-dir)") else "unknown"
    return ",".join(d["pending_replicas"]) or "none"


def format_text(desc: dict[str, Any]) -> str:
    d = desc["disablement"]
    extra = ""
    if d["elapsed_ms"] is not None:
        extra += f"\tDisablementElapsedMs: {d['elapsed_ms']}"
    if d["last_duration_ms"] is not None:
        extra += f"\tLastDisablementMs: {d['last_duration_ms']}"
    lines = [f"Topic: {desc['topic']}\tTopicId: {_v(desc['topic_id'])}\tTieredEpoch: {_v(desc['tiered_epoch'])}\t"
             f"TieredState: {_v(desc['tiered_state'])}\tRemoteSegments: {desc['remote_segments']}\t"
             f"RemoteBytes: {desc['remote_bytes']}\tByTieredEpoch: {_epochs(desc['by_tiered_epoch'])}\t"
             f"PendingReplicas: {_pending(d)}{extra}"]
    for p in desc["partitions"]:
        lines.append(f"\tPartition: {p['partition']}\tRemoteSegments: {p['remote_segments']}\t"
                     f"RemoteBytes: {p['remote_bytes']}\tRemoteStartOffset: {_v(p['remote_start_offset'])}\t"
                     f"RemoteEndOffset: {_v(p['remote_end_offset'])}\tByTieredEpoch: {_epochs(p['by_tiered_epoch'])}")
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
    from kafkatier.zk.codecs import MalformedZNodeError

    try:
        connect = zookeeper_from_args(args)
    except (NoReachableBrokerError, AdminError) as e:
        return common.print_error("tiered", e)
    try:
        zk = start_client(connect, connect_timeout=15.0)
    except (ZooKeeperUnavailableError, ValueError) as e:
        return common.print_error("tiered", str(e))
    try:
        desc = describe_topic(zk, args.topic, args.partition, data_dir=args.data_dir)
    except LookupError as e:
        return common.print_error("tiered", f"UNKNOWN_TOPIC_OR_PARTITION: {e.args[0]}")
    except MalformedZNodeError as e:  # one line, not a traceback
        return common.print_error("tiered", str(e))
    finally:
        zk.stop()
        zk.close()
    if args.json:
        json.dump(desc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_text(desc))
    return 0
