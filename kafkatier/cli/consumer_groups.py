"""``kafkatier consumer-groups``: Kafka's ``kafka-consumer-groups.sh`` (``ConsumerGroupCommand``).

``--list`` prints the group ids; ``--describe --group G`` the table Kafka prints (GROUP TOPIC PARTITION
CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID), one row per partition with a committed offset or
an assigned member, the log end offset being the partition's high watermark as ListOffsets(latest) reports it;
``--reset-offsets`` (``--to-earliest | --to-latest | --to-offset N | --shift-by N | --to-datetime T``, on
``--topic T[:P,P...]`` or ``--all-topics``; ``--dry-run`` by default, ``--execute`` to commit) only while the
group is inactive, as in Kafka; ``--delete --group G`` (repeatable).

Exit status: 2 for bad options (one line on stderr), 1 when a request fails, 0 otherwise.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.cli import common
from kafkatier.cli.main import UsageError

COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
           "CLIENT-ID")
MEMBER_COLUMNS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
STATE_COLUMNS = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
RESET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "consumer-groups", run,
                                  help="list, describe, reset or delete consumer groups",
                                  description="List, describe, delete consumer groups and reset their offsets, as "
                                              "kafka-consumer-groups does.")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list all consumer groups")
    action.add_argument("--describe", action="store_true", help="describe the groups of --group")
    action.add_argument("--reset-offsets", action="store_true", help="reset the committed offsets of --group")
    action.add_argument("--delete", action="store_true", help="delete the groups of --group (must be empty)")
    p.add_argument("--group", action="append", help="the group (repeatable for --describe and --delete)")
    p.add_argument("--all-groups", action="store_true", help="every group (--describe, --delete)")
    p.add_argument("--topic", action="append", help="TOPIC or TOPIC:P,P,... for --reset-offsets")
    p.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--offsets", action="store_true", help="--describe: the offsets table (the default)")
    what.add_argument("--members", action="store_true", help="--describe: the members and their partitions")
    what.add_argument("--state", action="store_true", help="--describe: coordinator, assignor, state, #members")
    p.add_argument("--verbose", action="store_true", help="--describe --members: add each member's ASSIGNMENT")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--shift-by", type=int)
    to.add_argument("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss (UTC unless an offset is given)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")


def check_args(args: argparse.Namespace) -> None:
    groups = [g for g in args.group or []]
    if any(not g.strip() for g in groups):
        raise UsageError("--group must not be empty")
    if (args.describe or args.delete) and not groups and not args.all_groups:
        raise UsageError("Option [describe] and [delete] take one of these options: [all-groups], [group]")
    if (args.offsets or args.members or args.state) and not args.describe:
        raise UsageError("Options [offsets], [members] and [state] need [describe]")
    if args.verbose and not (args.describe and (args.members or args.state)):
        raise UsageError("Option [verbose] needs [describe] with [members] or [state]")
    if args.reset_offsets:
        if len(groups) != 1:
            raise UsageError("Option [reset-offsets] takes exactly one [group]")
        if not args.topic and not args.all_topics:
            raise UsageError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
        if not any((args.to_earliest, args.to_latest, args.to_current, args.to_offset is not None,
                    args.shift_by is not None, args.to_datetime)):
            raise UsageError("Option [reset-offsets] takes one of these options: [to-datetime], [to-earliest], "
                             "[to-latest], [to-current], [to-offset], [shift-by]")
        if args.to_offset is not None and args.to_offset < 0:
            raise UsageError("--to-offset must not be negative")
        if args.to_datetime:
            parse_datetime(args.to_datetime)
    elif any((args.to_earliest, args.to_latest, args.to_current, args.to_offset is not None,
              args.shift_by is not None, args.to_datetime, args.execute, args.dry_run)):
        raise UsageError("the --to-*/--shift-by/--execute/--dry-run options need --reset-offsets")


def parse_datetime(text: str) -> int:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime {text!r} is not YYYY-MM-DDTHH:mm:SS.sss") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


def parse_topics(specs: list[str]) -> list[tuple[str, list[int] | None]]:
    out = []
    for spec in specs:
        topic, _, parts = spec.partition(":")
        if not topic:
            raise UsageError(f"--topic {spec!r}: no topic name")
        if not parts:
            out.append((topic, None))
            continue
        try:
            nums = [int(x) for x in parts.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--topic {spec!r}: partitions must be numbers") from None
        if not nums or any(n < 0 for n in nums):
            raise UsageError(f"--topic {spec!r}: partitions must be non-negative numbers")
        out.append((topic, nums))
    return out


def print_table(rows: list[tuple], columns: tuple[str, ...]) -> None:
    """Kafka's layout: a blank line, then left-aligned columns as wide as their widest cell plus one space."""
    cells = [tuple(str(c) for c in columns)] + [tuple("-" if c is None else str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    print()
    for r in cells:
        print(" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


# ------------------------------------------------------------------------------------------------ actions

def _end_offsets(admin, tps) -> dict:
    from kafka.admin import OffsetSpec
    if not tps:
        return {}
    res = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
    return {tp: r.offset for tp, r in res.items()}


def describe_rows(admin, group: str) -> tuple[str, list[tuple]]:
    """(state, rows) of one group; state ``Dead`` means it does not exist."""
    from kafka import TopicPartition
    d = admin.describe_groups([group])[group]
    if d.get("error"):
        raise RuntimeError(str(d["error"]))
    state = d["group_state"]
    owners: dict = {}
    for m in d.get("members") or []:
        assignment = m.get("member_assignment") or {}
        for entry in assignment.get("assigned_partitions", []) if isinstance(assignment, dict) else []:
            for p in entry["partitions"]:
                owners[TopicPartition(entry["topic"], p)] = m
    committed = admin.list_group_offsets({group: None}).get(group, {}) if state != "Dead" else {}
    tps = sorted(set(committed) | set(owners), key=lambda tp: (tp.topic, tp.partition))
    ends = _end_offsets(admin, tps)
    rows = []
    for tp in tps:
        o = committed.get(tp)
        cur = o.offset if o is not None and o.offset >= 0 else None
        end = ends.get(tp)
        lag = end - cur if cur is not None and end is not None else None
        m = owners.get(tp)
        rows.append((group, tp.topic, tp.partition, cur, end, lag, m["member_id"] if m else None,
                     m["client_host"] if m else None, m["client_id"] if m else None))
    return state, rows


def _assigned(m: dict) -> list[tuple[str, list[int]]]:
    assignment = m.get("member_assignment") or {}
    entries = assignment.get("assigned_partitions", []) if isinstance(assignment, dict) else []
    return sorted((e["topic"], sorted(e["partitions"])) for e in entries)


def member_rows(group: str, d: dict, verbose: bool, with_instance_ids: bool = False) -> list[tuple]:
    """Kafka's --members rows: GROUP CONSUMER-ID [GROUP-INSTANCE-ID] HOST CLIENT-ID #PARTITIONS [ASSIGNMENT]
    (GROUP-INSTANCE-ID when a member of the group has one, KIP-345)."""
    rows = []
    for m in sorted(d.get("members") or [], key=lambda m: m["member_id"]):
        parts = _assigned(m)
        row = (group, m["member_id"]) + ((m.get("group_instance_id") or "",) if with_instance_ids else ()) + (
            m["client_host"], m["client_id"], sum(len(ps) for _, ps in parts))
        if verbose:
            text = ", ".join(f"{t}({','.join(str(p) for p in ps)})" for t, ps in parts)
            row += (text or "-",)
        rows.append(row)
    return rows


def coordinator_text(client, group: str) -> str:
    from kafkatier.protocol import codec
    from kafkatier.protocol.api_keys import ApiKeys
    from kafkatier.protocol.build import build
    from kafkatier.protocol.coordinator_type import CoordinatorType
    r = client.send_request(build(codec.request_class(ApiKeys.FIND_COORDINATOR), 4,
                                  {"key_type": CoordinatorType.GROUP, "coordinator_keys": [group]}))
    c = r.coordinators[0]
    if c.error_code:
        return "-"
    return f"{c.host}:{c.port}  ({c.node_id})"  # two spaces, as Kafka 3.9's ConsumerGroupCommand


def do_describe_members_or_state(client, groups: list[str], args: argparse.Namespace) -> int:
    admin = client.kafka_admin
    rc = 0
    for g in groups:
        d = admin.describe_groups([g])[g]
        if d.get("error"):
            raise RuntimeError(str(d["error"]))
        state = d["group_state"]
        if state == "Dead":
            print(f"Error: Consumer group '{g}' does not exist.", file=sys.stderr)
            rc = 1
            continue
        if state == "Empty":
            print(f"\nConsumer group '{g}' has no active members.")
        elif state in ("PreparingRebalance", "CompletingRebalance"):
            print(f"\nWarning: Consumer group '{g}' is rebalancing.")
        members = d.get("members") or []
        if args.state:
            print_table([(g, coordinator_text(client, g), d.get("protocol_data") or "", state, len(members))],
                        STATE_COLUMNS)
            continue
        with_instance_ids = any(m.get("group_instance_id") for m in members)
        columns = MEMBER_COLUMNS[:2] + (("GROUP-INSTANCE-ID",) if with_instance_ids else ()) + MEMBER_COLUMNS[2:]
        print_table(member_rows(g, d, args.verbose, with_instance_ids),
                    columns + (("ASSIGNMENT",) if args.verbose else ()))
    return rc


def do_describe(admin, groups: list[str]) -> int:
    rc = 0
    for g in groups:
        state, rows = describe_rows(admin, g)
        if state == "Dead":
            print(f"Error: Consumer group '{g}' does not exist.", file=sys.stderr)
            rc = 1
            continue
        if state in ("Empty", "Dead"):
            print(f"\nConsumer group '{g}' has no active members.")
        elif state in ("PreparingRebalance", "CompletingRebalance"):
            print(f"\nWarning: Consumer group '{g}' is rebalancing.")
        print_table(rows, COLUMNS)
    return rc


def do_reset(client, args: argparse.Namespace) -> int:
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec
    admin = client.kafka_admin
    group = args.group[0]
    d = admin.describe_groups([group])[group]
    state = d["group_state"]
    if state not in ("Empty", "Dead"):
        print(f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state is "
              f"{state}.", file=sys.stderr)
        return 1
    committed = admin.list_group_offsets({group: None}).get(group, {}) if state != "Dead" else {}
    if args.all_topics:
        tps = sorted(committed, key=lambda tp: (tp.topic, tp.partition))
    else:
        tps = []
        for topic, parts in parse_topics(args.topic):
            if parts is None:
                try:
                    parts = [p.partition for t in client.describe_topics([topic]) for p in t.partitions]
                except Exception:  # noqa: BLE001 - unknown topic
                    parts = []
                if not parts:
                    print(f"Error: topic '{topic}' does not exist", file=sys.stderr)
                    return 1
            tps += [TopicPartition(topic, p) for p in sorted(parts)]
    earliest = {tp: r.offset for tp, r in admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps}).items()}
    latest = _end_offsets(admin, tps)
    targets = {}
    for tp in tps:
        cur = committed[tp].offset if tp in committed else latest[tp]
        if args.to_earliest:
            new = earliest[tp]
        elif args.to_latest:
            new = latest[tp]
        elif args.to_current:
            new = cur
        elif args.to_offset is not None:
            new = args.to_offset
        elif args.shift_by is not None:
            new = cur + args.shift_by
        else:
            ts = parse_datetime(args.to_datetime)
            found = admin.list_partition_offsets({tp: ts}).get(tp)
            new = found.offset if found is not None and found.offset >= 0 else latest[tp]
        targets[tp] = min(max(new, earliest[tp]), latest[tp])   # Kafka clamps to the log's range
    if args.execute:
        from kafka.structs import OffsetAndMetadata
        result = admin.alter_group_offsets(group, {tp: OffsetAndMetadata(o, "", -1) for tp, o in targets.items()})
        failed = {tp: e for tp, e in (result or {}).items() if e is not None and getattr(e, "errno", 0)}
        if failed:
            for tp, e in failed.items():
                print(f"Error: cannot reset {tp.topic}-{tp.partition}: {_error_text(e)}", file=sys.stderr)
            return 1
    print_table([(group, tp.topic, tp.partition, o) for tp, o in targets.items()], RESET_COLUMNS)
    return 0


def do_delete(admin, groups: list[str]) -> int:
    result = admin.delete_groups(groups)
    # kafka-python answers (group, "OK") or (group, error class name)
    failed = {g: e for g, e in dict(result).items() if e not in (None, "OK")}
    ok = [g for g in groups if g not in failed]
    if ok:
        print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.")
    if failed:
        print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
        for g, e in failed.items():
            print(f"* Group '{g}' could not be deleted due to: {_error_text(e)}", file=sys.stderr)
        return 1
    return 0


def _error_text(e: Any) -> str:
    """Kafka's exception name for an error class or instance (``GroupNotEmptyError``, ...)."""
    if isinstance(e, str):
        return e
    cls = e if isinstance(e, type) else type(e)
    text = "" if isinstance(e, type) else str(e)
    return f"{cls.__name__}: {text}" if text else cls.__name__


def run(args: argparse.Namespace) -> int:
    check_args(args)
    from kafka.errors import KafkaError
    try:
        conn = common.connection_from_args(args)
        client = common.open_admin(conn)
    except (NoReachableBrokerError, KafkaError) as e:
        return common.print_error("consumer-groups", e)
    admin = client.kafka_admin
    try:
        if args.list:
            for g in sorted(x["group_id"] for x in admin.list_groups()):
                print(g)
            return 0
        groups = list(args.group or [])
        if args.all_groups:
            groups = sorted(x["group_id"] for x in admin.list_groups())
        if args.describe and (args.members or args.state):
            return do_describe_members_or_state(client, groups, args)
        if args.describe:
            return do_describe(admin, groups)
        if args.delete:
            return do_delete(admin, groups)
        return do_reset(client, args)
    except (KafkaError, RuntimeError) as e:
        return common.print_error("consumer-groups", e)
    finally:
        client.close()
