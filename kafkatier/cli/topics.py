"""``kafkatier topics``: kafka-topics' ``--create``, ``--list``, ``--describe`` and ``--delete``, with its
options, output and messages.

``--topic`` is a name for ``--create`` and, as in kafka-topics, a regular expression (whole-name match; commas
separate alternatives) for the other actions.  Request failures print ``Error while executing topic command :
<ERROR_NAME>: <message>`` on stderr and exit 1.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Iterable, Mapping, Sequence

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminClient, AdminError, ConfigEntry, NewTopicSpec, PartitionInfo, TopicInfo
from kafkatier.cli import common
from kafkatier.cli.main import UsageError
from kafkatier.common import structs
from kafkatier.protocol.errors import Errors

COLLISION_WARNING = ("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
                     "could collide. To avoid issues it is best to use either, but not both.")


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "topics", run,
                                  help="create, list, describe and delete topics (kafka-topics)",
                                  description="Create, list, describe and delete topics, as kafka-topics does.")
    actions = p.add_argument_group("actions (exactly one)").add_mutually_exclusive_group(required=True)
    actions.add_argument("--create", action="store_true", help="create a topic")
    actions.add_argument("--list", action="store_true", help="list topic names")
    actions.add_argument("--describe", action="store_true", help="partitions, leaders, replicas, ISR and configs")
    actions.add_argument("--delete", action="store_true", help="delete topics")
    actions.add_argument("--alter", action="store_true", help="add partitions (--partitions N) to topics")
    p.add_argument("--topic", help="the topic to create; for the other actions a regular expression of names")
    p.add_argument("--partitions", type=int, help="number of partitions (--create; default: the broker's)")
    p.add_argument("--replication-factor", type=int,
                   help="replicas per partition (--create; default: the broker's)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config override for --create (repeatable)")
    p.add_argument("--replica-assignment", metavar="B1:B2,B3:B4",
                   help="broker ids per partition, partitions separated by commas (--create; replaces "
                        "--partitions and --replication-factor)")
    p.add_argument("--if-not-exists", action="store_true", help="--create: no error if the topic exists")
    p.add_argument("--if-exists", action="store_true", help="--describe/--delete: no error if no topic matches")
    p.add_argument("--exclude-internal", action="store_true", help="leave internal topics out of --list/--describe")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="--describe: only partitions whose ISR is smaller than their replica set")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="--describe: only partitions without a leader")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="--describe: only partitions whose ISR is smaller than min.insync.replicas (or leaderless)")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="--describe: only partitions whose ISR size equals min.insync.replicas")


# ------------------------------------------------------------------------------------------------ parsing

def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules; :class:`UsageError` with Kafka's message."""
    structs.validate_topic_name(name, UsageError)


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def parse_replica_assignment(text: str) -> dict[int, tuple[int, ...]]:
    """``1:2:3,2:3:1`` -> ``{0: (1, 2, 3), 1: (2, 3, 1)}``: partition i gets the i-th list.  Every partition
    needs the same number of distinct broker ids."""
    out: dict[int, tuple[int, ...]] = {}
    for i, part in enumerate(text.split(",")):
        try:
            brokers = tuple(int(b.strip()) for b in part.split(":"))
        except ValueError:
            raise UsageError(f"invalid --replica-assignment {text!r}: partition {i} has a broker id that is not "
                             f"an integer: {part!r}") from None
        if any(b < 0 for b in brokers):
            raise UsageError(f"invalid --replica-assignment {text!r}: negative broker id in partition {i}")
        dups = sorted({b for b in brokers if brokers.count(b) > 1})
        if dups:
            raise UsageError("Partition replica lists may not contain duplicate entries: "
                             + ",".join(map(str, dups)))
        if out and len(brokers) != len(out[0]):
            raise UsageError(f"Partition {i} has different replication factor: {','.join(map(str, brokers))}")
        out[i] = brokers
    return out


def parse_topic_configs(items: Iterable[str]) -> dict[str, str]:
    """``--config k=v`` items (kafka-topics splits on ``=`` and wants exactly two parts)."""
    out: dict[str, str] = {}
    for item in items:
        parts = re.split(r"\s*=\s*", item.strip())
        if len(parts) != 2 or not parts[0]:
            raise UsageError('Invalid topic config: all configs to be added must be in the format "key=val".')
        out[parts[0]] = parts[1]
    return out


def topic_filter(pattern: str | None) -> re.Pattern | None:
    """kafka-topics' topic filter: a regex matched against the whole name; commas separate alternatives."""
    if pattern is None:
        return None
    text = pattern.strip().replace(",", "|").replace(" ", "")
    try:
        return re.compile(text)
    except re.error:
        raise UsageError(f"{pattern} is an invalid regex.") from None


def select_topics(names: Iterable[str], pattern: re.Pattern | None) -> list[str]:
    return sorted(n for n in names if pattern is None or pattern.fullmatch(n))


def check_args(args: argparse.Namespace) -> None:
    """Option combinations kafka-topics refuses."""
    if (args.create or args.delete or args.alter) and not args.topic:
        action = "create" if args.create else "delete" if args.delete else "alter"
        raise UsageError(f'Missing required argument "[topic]" for --{action}')
    if args.alter and args.partitions is None:
        raise UsageError("--alter needs --partitions (the new partition count)")
    create_only = [("--partitions", args.partitions is not None and not args.alter),
                   ("--replication-factor", args.replication_factor is not None),
                   ("--replica-assignment", args.replica_assignment is not None),
                   ("--config", bool(args.config)), ("--if-not-exists", args.if_not_exists)]
    for name, given in create_only:
        if given and not args.create:
            raise UsageError(f"{name} can only be used with --create")
    if args.if_exists and not (args.describe or args.delete):
        raise UsageError("--if-exists can only be used with --describe or --delete")
    for name in ("--under-replicated-partitions", "--unavailable-partitions", "--under-min-isr-partitions",
                 "--at-min-isr-partitions"):
        if getattr(args, name[2:].replace("-", "_")) and not args.describe:
            raise UsageError(f"{name} can only be used with --describe")
    if args.exclude_internal and not (args.list or args.describe):
        raise UsageError("--exclude-internal can only be used with --list or --describe")
    if args.replica_assignment is not None and (args.partitions is not None or args.replication_factor is not None):
        raise UsageError("--replica-assignment cannot be used with --partitions or --replication-factor")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError("The partitions must be greater than 0")
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise UsageError("The replication factor must be between 1 and 32767")


# ------------------------------------------------------------------------------------------------ output

def format_topic_line(topic: TopicInfo, configs: Sequence[ConfigEntry] | None,
                      marked_for_deletion: bool = False) -> str:
    """kafka-topics' topic line: ``Topic: t\\tTopicId: ..\\tPartitionCount: n\\tReplicationFactor: r\\tConfigs: k=v,..``
    (configs: every entry not at its default)."""
    shown = ",".join(f"{c.name}={_value(c)}" for c in (configs or ()) if c.source != "DEFAULT_CONFIG")
    rf = len(topic.partitions[0].replicas) if topic.partitions else 0
    line = f"Topic: {topic.name}"
    if topic.topic_id:
        line += f"\tTopicId: {topic.topic_id}"
    line += f"\tPartitionCount: {len(topic.partitions)}\tReplicationFactor: {rf}\tConfigs: {shown}"
    if marked_for_deletion:
        line += "\tMarkedForDeletion: true"
    return line


def format_partition_line(topic: str, p: PartitionInfo) -> str:
    """kafka-topics' partition line: ``\\tTopic: t\\tPartition: 0\\tLeader: 1\\tReplicas: 1,2,3\\tIsr: 1,2,3``."""
    leader = str(p.leader) if p.leader >= 0 else "none"
    line = (f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}"
            f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
    if p.offline_replicas:
        line += f"\tOffline: {','.join(map(str, p.offline_replicas))}"
    return line


def _value(c: ConfigEntry) -> str:
    return "null" if c.value is None else c.value


def is_under_replicated(p: PartitionInfo) -> bool:
    return len(p.isr) < len(p.replicas)


def is_unavailable(p: PartitionInfo) -> bool:
    return p.leader < 0


def is_under_min_isr(p: PartitionInfo, min_isr: int | None) -> bool:
    return p.leader < 0 or (min_isr is not None and len(p.isr) < min_isr)


def is_at_min_isr(p: PartitionInfo, min_isr: int | None) -> bool:
    return min_isr is not None and len(p.isr) == min_isr


def describe_lines(topics: Sequence[TopicInfo], configs: Mapping[str, Sequence[ConfigEntry]], *,
                   under_replicated: bool = False, unavailable: bool = False, under_min_isr: bool = False,
                   at_min_isr: bool = False, min_isr: Mapping[str, int] | None = None) -> list[str]:
    """The ``--describe`` output: per topic its topic line and partition lines; with a partition filter only
    the matching partition lines (as kafka-topics).  ``min_isr``: each topic's min.insync.replicas, for the
    two min-ISR filters."""
    filtered = under_replicated or unavailable or under_min_isr or at_min_isr
    min_isr = min_isr or {}
    lines = []
    for t in sorted(topics, key=lambda t: t.name):
        if not filtered:
            lines.append(format_topic_line(t, configs.get(t.name)))
        for p in t.partitions:
            if filtered and not ((under_replicated and is_under_replicated(p))
                                 or (unavailable and is_unavailable(p))
                                 or (under_min_isr and is_under_min_isr(p, min_isr.get(t.name)))
                                 or (at_min_isr and is_at_min_isr(p, min_isr.get(t.name)))):
                continue
            lines.append(format_partition_line(t.name, p))
    return lines


# ------------------------------------------------------------------------------------------------ actions

def run(args: argparse.Namespace) -> int:
    check_args(args)
    spec = None
    if args.create:
        validate_topic_name(args.topic)
        assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
        spec = NewTopicSpec(name=args.topic, num_partitions=args.partitions if args.partitions else -1,
                            replication_factor=args.replication_factor if args.replication_factor else -1,
                            replica_assignment=assignment, configs=parse_topic_configs(args.config))
    pattern = None if args.create else topic_filter(args.topic)
    try:
        conn = common.connection_from_args(args)
        with common.open_admin(conn) as admin:
            if spec is not None:
                return _create(admin, spec, args.if_not_exists)
            if args.list:
                for name in select_topics(admin.list_topics(not args.exclude_internal), pattern):
                    print(name)
                return 0
            names = _matching(admin, args, pattern)
            if names is None:
                return 1
            if args.alter:
                return _alter(admin, args, names)
            if not names:
                return 0
            return _describe(admin, args, names) if args.describe else _delete(admin, args, names)
    except (AdminError, NoReachableBrokerError) as e:
        return _fail(e)


def _fail(error: BaseException | str) -> int:
    print(f"Error while executing topic command : {error}", file=sys.stderr)
    return 1


def _create(admin: AdminClient, spec: NewTopicSpec, if_not_exists: bool) -> int:
    if has_collision_chars(spec.name):
        print(COLLISION_WARNING)
    err = admin.create_topics([spec])[spec.name]
    if err is not None:
        if err.code == Errors.TOPIC_ALREADY_EXISTS and if_not_exists:
            return 0
        return _fail(err)
    print(f"Created topic {spec.name}.")
    return 0


def _matching(admin: AdminClient, args: argparse.Namespace, pattern: re.Pattern | None) -> list[str] | None:
    """Topics matching ``--topic``; None (after reporting) if a topic was asked for, none matched and
    ``--if-exists`` was not given."""
    include_internal = not getattr(args, "exclude_internal", False)
    names = select_topics(admin.list_topics(include_internal), pattern)
    if not names and args.topic and not args.if_exists:
        _fail(AdminError.from_code(Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"Topic '{args.topic}' does not exist as expected"))
        return None
    return names


def _describe(admin: AdminClient, args: argparse.Namespace, names: list[str]) -> int:
    topics = admin.describe_topics(names)
    by_min_isr = args.under_min_isr_partitions or args.at_min_isr_partitions
    filtered = args.under_replicated_partitions or args.unavailable_partitions or by_min_isr
    configs = admin.describe_configs("topics", [t.name for t in topics]) if not filtered or by_min_isr else {}
    min_isr = {name: int(c.value) for name, entries in configs.items() for c in entries
               if c.name == "min.insync.replicas" and c.value is not None}
    for line in describe_lines(topics, {} if filtered else configs,
                               under_replicated=args.under_replicated_partitions,
                               unavailable=args.unavailable_partitions, under_min_isr=args.under_min_isr_partitions,
                               at_min_isr=args.at_min_isr_partitions, min_isr=min_isr):
        print(line)
    return 0


def _alter(admin: AdminClient, args: argparse.Namespace, names: list[str]) -> int:
    """kafka-topics --alter --partitions N: CreatePartitions for every matching topic."""
    return _report_failures(admin.create_partitions({n: args.partitions for n in names}).values())


def _delete(admin: AdminClient, args: argparse.Namespace, names: list[str]) -> int:
    errors = admin.delete_topics(names).values()
    return _report_failures(e for e in errors if not (args.if_exists and e is not None
                                                       and e.code == Errors.UNKNOWN_TOPIC_OR_PARTITION))


def _report_failures(errors) -> int:
    """Each topic's error (None: success) reported on its own line; 1 if any."""
    failed = [e for e in errors if e is not None]
    for err in failed:
        _fail(err)
    return 1 if failed else 0
