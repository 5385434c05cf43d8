"""``kafkatier log-dirs --describe``: kafka-log-dirs (docs/kip-113-jbod.md#the-log-dirs-tool).

Default output is Kafka's ``kafka-log-dirs`` output for any number of brokers (default all)::

    Querying brokers for log directories information
    Received log directory information from brokers 0,1
    {"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":"/data/d1","error":null,"partitions":[...]}]}]}

``--format kip113`` prints KIP-113's JSON for one broker (``--broker``, KIP-113's option; or a one-entry
``--broker-list``)::

    {"version":1,"log_dirs":[{"is_live":true,"path":"/data/d1","partitions":[
      {"topic":"foo","partition":0,"size":1234,"offset_lag":0,"is_temporary":false}]}]}

An offline dir is listed with ``is_live`` false and no partitions; a partition the broker hosts (by the cluster
metadata) but found in no live dir is listed under the path ``"*"`` with ``is_live`` false.  ``--log-dirs`` and
``--topics`` (KIP-113) / ``--topic-list`` (Kafka) filter on the client.

Unknown ids in ``--broker-list`` / ``--broker`` print Kafka's
``ERROR: The given brokers do not exist from --broker-list: ...`` and exit 1; bad options exit 2.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminError
from kafkatier.cli import common
from kafkatier.cli.main import UsageError
from kafkatier.protocol.errors import Errors

#: Kafka's exception class names for the per-dir errors DescribeLogDirs can carry.
def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "log-dirs", run,
                                  help="describe brokers' log dirs and the replicas in them (kafka-log-dirs)",
                                  description="List each log dir of the brokers with the partitions in it, their "
                                              "sizes, offset lags and whether they are future (moving) replicas "
                                              "(KIP-113).")
    p.add_argument("--describe", action="store_true", required=True, help="describe the log dirs (required)")
    p.add_argument("--broker", type=int, help="the broker to describe (kip113 format: exactly one broker)")
    p.add_argument("--broker-list", metavar="ID[,ID...]", help="brokers to describe (default: all)")
    p.add_argument("--log-dirs", metavar="DIR[,DIR...]", help="only these log dirs (kip113 format)")
    p.add_argument("--topics", "--topic-list", dest="topics", metavar="TOPIC[,TOPIC...]",
                   help="only these topics (default: all)")
    p.add_argument("--format", choices=("kip113", "kafka"), default="kafka",
                   help="kafka: kafka-log-dirs' output (default); kip113: the KIP-113 JSON for one broker")


def _broker_ids(text: str | None, one: int | None) -> list[int] | None:
    ids: list[int] = []
    for item in common.split_list(text):
        try:
            ids.append(int(item))
        except ValueError:
            raise UsageError(f"--broker-list must be comma-separated broker ids, got {item!r}") from None
    if one is not None:
        ids.append(one)
    return list(dict.fromkeys(ids)) if (ids or text is not None or one is not None) else None


def run(args: argparse.Namespace) -> int:
    wanted = _broker_ids(args.broker_list, args.broker)
    if args.format == "kip113" and (wanted is None or len(wanted) != 1):
        raise UsageError("the kip113 format describes one broker: give --broker ID (or leave out --format kip113)")
    topics = set(common.split_list(args.topics)) or None
    log_dirs = set(common.split_list(args.log_dirs)) or None
    try:
        conn = common.connection_from_args(args)
        with common.open_admin(conn) as admin:
            existing = sorted(admin.broker_ids())
            brokers = wanted if wanted is not None else existing
            missing = [b for b in brokers if b not in existing]
            if missing:
                print(f"ERROR: The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
                      f"Current existent brokers: {','.join(map(str, existing))}")
                return 1
            if args.format == "kafka":
                print("Querying brokers for log directories information")
            described = admin.describe_log_dirs(topic_partitions=None, brokers=brokers)
            hosted = _hosted_partitions(admin, brokers[0], topics) if args.format == "kip113" else set()
    except (AdminError, NoReachableBrokerError) as e:
        return common.print_error("log-dirs", e)
    if args.format == "kafka":
        print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
        print(json.dumps(kafka_format(described, topics), separators=(",", ":")))
    else:
        print(json.dumps(kip113_format(described[0]["log_dirs"] if described else [], topics, log_dirs, hosted),
                         separators=(",", ":")))
    return 0


def _hosted_partitions(admin, broker_id: int, topics: set[str] | None) -> set[tuple[str, int]]:
    out = set()
    for t in admin.describe_topics(sorted(topics) if topics else None):
        for p in t.partitions:
            if broker_id in p.replicas:
                out.add((t.name, p.partition))
    return out


def _partitions(entry: dict[str, Any], topics: set[str] | None):
    for t in entry.get("topics") or []:
        if topics is not None and t["name"] not in topics:
            continue
        for p in t["partitions"]:
            yield t["name"], p


def kip113_format(dirs: list[dict[str, Any]], topics: set[str] | None, log_dirs: set[str] | None,
                hosted: set[tuple[str, int]]) -> dict[str, Any]:
    out = []
    found: set[tuple[str, int]] = set()
    for d in dirs:
        parts = []
        for name, p in _partitions(d, topics):
            if not p["is_future_key"]:
                found.add((name, p["partition_index"]))
            parts.append({"topic": name, "partition": p["partition_index"], "size": p["partition_size"],
                          "offset_lag": p["offset_lag"], "is_temporary": bool(p["is_future_key"])})
        if log_dirs is not None and d["log_dir"] not in log_dirs:
            continue
        out.append({"is_live": d["error_code"] == Errors.NONE, "path": d["log_dir"],
                    "partitions": sorted(parts, key=lambda x: (x["topic"], x["partition"], x["is_temporary"]))})
    lost = sorted(hosted - found)
    if lost and log_dirs is None:
        out.append({"is_live": False, "path": "*", "partitions": [
            {"topic": t, "partition": p, "size": -1, "offset_lag": -1, "is_temporary": False} for t, p in lost]})
    return {"version": 1, "log_dirs": out}


def _exception_name(code: int) -> str | None:
    """Kafka's exception class for an error code (an unknown code is UNKNOWN_SERVER_ERROR, as Kafka's
    ``Errors.forCode``); None for no error."""
    try:
        return Errors(code).exception_name
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR.exception_name


def kafka_format(described: list[dict[str, Any]], topics: set[str] | None) -> dict[str, Any]:
    brokers = []
    for b in described:
        dirs = []
        for d in b["log_dirs"]:
            code = d["error_code"]
            dirs.append({"logDir": d["log_dir"],
                         "error": _exception_name(code),
                         "partitions": [{"partition": f"{name}-{p['partition_index']}", "size": p["partition_size"],
                                         "offsetLag": p["offset_lag"], "isFuture": bool(p["is_future_key"])}
                                        for name, p in _partitions(d, topics)]})
        brokers.append({"broker": b["broker"], "logDirs": dirs})
    return {"version": 1, "brokers": brokers}
