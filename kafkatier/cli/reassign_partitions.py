"""``kafkatier reassign-partitions``: Kafka's ``kafka-reassign-partitions``
(docs/kip-113-jbod.md#kafka-reassign-partitions), its options, files and messages.  The computations are in
:mod:`kafkatier.admin.reassignment`; this module talks to the cluster and prints.

Actions (exactly one), with the options Kafka permits for each (another is refused:
``Option "[throttle]" can't be used with action "[verify]"``):

- ``--generate --topics-to-move-json-file F --broker-list 5,6 [--disable-rack-aware]``: prints
  ``Current partition replica assignment`` and ``Proposed partition reassignment configuration``, each followed
  by a reassignment JSON (Kafka's ``assignReplicasToBrokers`` over the live brokers of the list).
- ``--execute --reassignment-json-file F [--throttle B/s] [--replica-alter-log-dirs-throttle B/s] [--additional]
  [--timeout MS]``: refuses to start while a reassignment runs unless ``--additional``; prints the current
  assignment (for rollback); ``--throttle`` sets ``leader/follower.replication.throttled.replicas`` on each
  topic and both rates on every broker involved; ``--replica-alter-log-dirs-throttle`` the move throttle on each
  broker with a log-dir move.  Then, in the order of docs/kip-113-jbod.md#reassignment-with-log-dirs:
  AlterReplicaLogDirs for every replica with a path, AlterPartitionReassignments (key 45), and AlterReplicaLogDirs
  again every 100 ms for the replicas not created yet (REPLICA_NOT_AVAILABLE) until ``--timeout``.
- ``--verify --reassignment-json-file F [--preserve-throttles]``: ``Status of partition reassignment:``, one
  line per partition and per log-dir move; when no reassignment runs in the cluster and no move of the file is
  left, removes every throttle (broker rates on every live broker, throttled-replica lists on the file's topics).
- ``--cancel --reassignment-json-file F [--preserve-throttles] [--timeout MS]``: cancels the file's running
  reassignments (AlterPartitionReassignments with no replicas) and log-dir moves (each replica sent back to its
  current dir), then removes the throttles.
- ``--list``: the running reassignments, ``t-0: replicas: 1,2,3. adding: 3. removing: 1.``

``--wait`` (project, with ``--execute`` / ``--verify``): a tqdm bar per partition being reassigned (bytes on its
adding replicas against the leader's size) and per log-dir move (bytes in the future log), until all are done.

Differences from Kafka: ``--execute`` sends AlterPartitionReassignments only for partitions whose replica list
changes (Kafka also sends unchanged ones, which the controller completes at once), so a file of log-dir moves
only needs no controller round trip; ``--cancel`` cancels every running reassignment of the file (Kafka skips
those that only add replicas); the move throttle is set as ``intra.broker.throttled.rate``, KIP-113's synonym
of Kafka's ``replica.alter.log.dirs.io.max.bytes.per.second`` (both are removed).

Bad input (files, broker list, options, unknown broker ids) prints one line and exits 2 before anything is
sent; a failed request prints Kafka's error name and message and exits 1.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Iterable, Mapping

import attrs
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_exponential

from kafkatier.admin import reassignment as plan
from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminClient, AdminError, error_name, to_admin_error
from kafkatier.admin.reassignment import OngoingReassignment, ReassignmentEntry, ReassignmentJsonError, Replica
from kafkatier.admin.replica_assignment import BrokerMetadata
from kafkatier.cli import common
from kafkatier.cli.main import UsageError
from kafkatier.common.structs import TopicPartition
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.dynamic_broker_config import ALTER_LOG_DIRS_THROTTLE_NAMES

COMMAND = "reassign-partitions"
RETRY_INTERVAL_S = 0.1       # Kafka's fixed retry of AlterReplicaLogDirs for replicas not created yet
POLL_S = 0.5                 # --wait
METADATA_SETTLE_S = 5.0      # --verify: how long a finished partition's replica set may lag in brokers' metadata

#: Every broker-level throttle --verify / --cancel remove (Kafka's BROKER_LEVEL_THROTTLES plus KIP-113's name).
BROKER_LEVEL_THROTTLES = (plan.LEADER_THROTTLED_RATE, plan.FOLLOWER_THROTTLED_RATE, *ALTER_LOG_DIRS_THROTTLE_NAMES)

CANNOT_EXECUTE_BECAUSE_OF_EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used "
    "to change the throttle by resubmitting the current reassignment.")
YOU_MUST_RUN_VERIFY_PERIODICALLY = ("Warning: You must run --verify periodically, until the reassignment "
                                    "completes, to ensure the throttle is removed.")

ACTIONS = ("generate", "execute", "verify", "cancel", "list")
#: Options of each action besides the connection ones: (required, permitted).
ACTION_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "generate": (("topics_to_move_json_file", "broker_list"), ("disable_rack_aware",)),
    "execute": (("reassignment_json_file",),
                ("additional", "throttle", "replica_alter_log_dirs_throttle", "timeout", "wait")),
    "verify": (("reassignment_json_file",), ("preserve_throttles", "wait")),
    "cancel": (("reassignment_json_file",), ("preserve_throttles", "timeout")),
    "list": ((), ()),
}
#: The defaults of the options above (argparse defaults are None so that a given option can be told apart).
DEFAULTS = {"throttle": -1, "replica_alter_log_dirs_throttle": -1, "timeout": 10000}


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, COMMAND, run,
                                  help="move replicas between brokers and log dirs (kafka-reassign-partitions)",
                                  description="Kafka's kafka-reassign-partitions: --generate a reassignment, "
                                              "--execute it (with throttles and log-dir moves), --verify or --cancel "
                                              "it, --list the running ones.")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true", help="propose a reassignment of topics onto brokers")
    mode.add_argument("--execute", action="store_true", help="start the reassignment in the file")
    mode.add_argument("--verify", action="store_true", help="report the reassignment's status; remove the "
                                                            "throttles when it is done")
    mode.add_argument("--cancel", action="store_true", help="cancel the reassignment in the file")
    mode.add_argument("--list", action="store_true", help="list the running reassignments")
    p.add_argument("--reassignment-json-file", metavar="FILE", help="Kafka's reassignment JSON")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='--generate: {"topics":[{"topic":"t"}]}')
    p.add_argument("--broker-list", metavar="IDS", help='--generate: brokers to place the topics on, "5,6"')
    p.add_argument("--disable-rack-aware", action="store_true", default=None,
                   help="--generate: place replicas without rack information")
    p.add_argument("--throttle", type=int, default=None, metavar="B/S",
                   help="--execute: limit inter-broker movement to B/S bytes per second (default -1: none)")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=None, metavar="B/S",
                   help="--execute: limit the log-dir moves of each broker involved (default -1: none)")
    p.add_argument("--additional", action="store_true", default=None,
                   help="--execute: start while another reassignment runs, or change its throttle")
    p.add_argument("--preserve-throttles", action="store_true", default=None,
                   help="--verify/--cancel: keep the throttles")
    p.add_argument("--timeout", type=int, default=None, metavar="MS",
                   help="how long to retry log-dir moves of replicas not created yet (default 10000)")
    p.add_argument("--wait", action="store_true", default=None,
                   help="--execute/--verify (project): show a progress bar per partition until all are done")


def check_options(args: argparse.Namespace) -> str:
    """The action; a missing or a foreign option is a :class:`UsageError` (Kafka's messages)."""
    action = next(a for a in ACTIONS if getattr(args, a))
    required, permitted = ACTION_OPTIONS[action]
    for name in required:
        if getattr(args, name) is None:
            raise UsageError(f'Missing required argument "[{name.replace("_", "-")}]"')
    for name in {n for _, (r, p) in ACTION_OPTIONS.items() for n in r + p}:
        if getattr(args, name) is not None and name not in required and name not in permitted:
            raise UsageError(f'Option "[{name.replace("_", "-")}]" can\'t be used with action "[{action}]"')
    for name, default in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    return action


def _read(path: str, parse: Callable[[str], Any]) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return parse(f.read())
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    except ReassignmentJsonError as e:
        raise UsageError(str(e)) from None


class CommandFailed(Exception):
    """The command cannot go on (Kafka's message, after ``kafkatier reassign-partitions:``), exit status 1."""


def run(args: argparse.Namespace) -> int:
    action = check_options(args)
    entries: list[ReassignmentEntry] = []
    topics: list[str] = []
    brokers: list[int] = []
    if action == "generate":
        topics = _read(args.topics_to_move_json_file, plan.parse_topics_to_move_json)
        try:
            brokers = plan.parse_broker_list(args.broker_list)
        except ReassignmentJsonError as e:
            raise UsageError(str(e)) from None
    elif action != "list":
        entries = _read(args.reassignment_json_file, plan.parse_reassignment_json)
    try:
        conn = common.connection_from_args(args)
        with common.open_admin(conn) as admin:
            if action == "generate":
                return generate(admin, topics, brokers, not args.disable_rack_aware)
            if action == "list":
                print(list_text(list_reassignments(admin)))
                return 0
            if action == "execute":
                return execute(admin, entries, args)
            if action == "verify":
                return verify(admin, entries, args)
            return cancel(admin, entries, args)
    except CommandFailed as e:
        return common.print_error(COMMAND, str(e))
    except (AdminError, NoReachableBrokerError) as e:
        return common.print_error(COMMAND, e)


# ------------------------------------------------------------------------------------------------ cluster

def list_reassignments(admin: AdminClient, partitions: Iterable[TopicPartition] | None = None
                       ) -> dict[TopicPartition, OngoingReassignment]:
    """ListPartitionReassignments (key 46): the running reassignments (of ``partitions``, or all)."""
    found = admin.list_partition_reassignments(None if partitions is None else list(partitions))
    return {TopicPartition(*tp): OngoingReassignment(tuple(r.replicas), tuple(r.adding_replicas),
                                                     tuple(r.removing_replicas))
            for tp, r in found.items()}


def alter_reassignments(admin: AdminClient, targets: Mapping[TopicPartition, list[int] | None]
                        ) -> dict[TopicPartition, str]:
    """AlterPartitionReassignments (key 45; None cancels): the failed partitions with their error text."""
    results = admin.alter_partition_reassignments(dict(targets))
    return {TopicPartition(*tp): str(err) for tp, err in results.items() if err is not None}


def current_assignment(admin: AdminClient, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, list[int]]:
    """Kafka's ``getReplicaAssignmentForPartitions``; a missing topic or partition fails."""
    partitions = set(partitions)
    out: dict[TopicPartition, list[int]] = {}
    for t in _describe_topics(admin, sorted({tp.topic for tp in partitions})):
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition)
            if tp in partitions:
                out[tp] = list(p.replicas)
    missing = sorted(partitions - set(out))
    if missing:
        raise CommandFailed(f"UNKNOWN_TOPIC_OR_PARTITION: Unable to find partition: "
                            f"{', '.join(map(str, missing))}")
    return out


def _describe_topics(admin: AdminClient, topics: list[str]) -> list:
    out = []
    for topic in topics:  # one by one, to name the missing topic as Kafka does
        try:
            out += admin.describe_topics([topic])
        except AdminError as e:
            if e.name == "UNKNOWN_TOPIC_OR_PARTITION":
                raise CommandFailed(f"UNKNOWN_TOPIC_OR_PARTITION: Topic {topic} not found.") from None
            raise
    return out


def _broker_metadata(admin: AdminClient) -> list[BrokerMetadata]:
    try:
        cluster = admin.kafka_admin.describe_cluster()
    except Exception as e:
        err = to_admin_error(e)
        if err is None:
            raise
        raise err from e
    return sorted(BrokerMetadata(int(b["broker_id"]), b.get("rack") or None) for b in cluster.get("brokers") or ())


# ------------------------------------------------------------------------------------------------ --generate

def generate(admin: AdminClient, topics: list[str], broker_list: list[int], rack_aware: bool) -> int:
    current = {TopicPartition(t.name, p.partition): list(p.replicas)
               for t in _describe_topics(admin, topics) for p in t.partitions}
    wanted = set(broker_list)
    brokers = [b if rack_aware else BrokerMetadata(b.id) for b in _broker_metadata(admin) if b.id in wanted]
    racks = [b.rack for b in brokers]
    if rack_aware and any(r is None for r in racks) and any(r is not None for r in racks):
        raise CommandFailed("Not all brokers have rack information. Add --disable-rack-aware in command "
                            "line to make replica assignment without rack information.")
    try:
        proposed = plan.calculate_assignment(current, brokers)
    except KafkaError as e:
        raise CommandFailed(f"{e.error.name}: {e}") from None
    print("Current partition replica assignment")
    print(plan.format_reassignment_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan.format_reassignment_json(proposed))
    return 0


# ------------------------------------------------------------------------------------------------ --execute

def execute(admin: AdminClient, entries: list[ReassignmentEntry], args) -> int:
    proposed = {e.tp: list(e.replicas) for e in entries}
    targets = plan.log_dir_moves(entries)
    ongoing = list_reassignments(admin)
    if ongoing and not args.additional:
        raise CommandFailed(CANNOT_EXECUTE_BECAUSE_OF_EXISTING)
    live = set(admin.broker_ids())
    unknown = sorted({b for r in proposed.values() for b in r} - live)
    if unknown:
        raise UsageError(f"Unknown broker id {unknown[0]}")
    current = current_assignment(admin, proposed)
    print("Current partition replica assignment\n")
    print(plan.format_reassignment_json(current))
    print("\nSave this to use as the --reassignment-json-file option during rollback")

    if args.throttle >= 0 or args.replica_alter_log_dirs_throttle >= 0:
        print(YOU_MUST_RUN_VERIFY_PERIODICALLY)
        if args.throttle >= 0:
            moves = plan.proposed_move_map(ongoing, proposed, current)
            set_inter_broker_throttle(admin, moves, args.throttle)
            print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
        if args.replica_alter_log_dirs_throttle >= 0:
            for b in sorted({r.broker for r in targets}):
                admin.alter_configs("brokers", str(b), {ALTER_LOG_DIRS_THROTTLE_NAMES[0]:
                                                        str(args.replica_alter_log_dirs_throttle)})
            print(f"The replica-alter-dir throttle limit was set to {args.replica_alter_log_dirs_throttle} B/s")

    # docs/kip-113-jbod.md#reassignment-with-log-dirs: the log dirs first (a broker remembers the destination of
    # a replica it does not host yet) ...
    pending = alter_log_dirs(admin, targets)
    # ... then the reassignment ...
    changed = {tp: r for tp, r in proposed.items() if current.get(tp) != r}
    if changed:
        errors = alter_reassignments(admin, changed)
        if errors:
            raise CommandFailed("Error reassigning partition(s):\n" + "\n".join(
                f"{tp}: {errors[tp]}" for tp in sorted(errors)))
        print(f"Successfully started partition reassignment{'' if len(changed) == 1 else 's'} for "
              f"{','.join(map(str, sorted(changed)))}")
    # ... then the moves of replicas created by the reassignment, retried until they exist.
    if targets:
        deadline = time.monotonic() + args.timeout / 1000.0
        while pending and time.monotonic() < deadline:
            time.sleep(RETRY_INTERVAL_S)
            pending = alter_log_dirs(admin, pending)
        started = sorted(set(targets) - set(pending))
        if started:
            print(f"Successfully started log directory move(s) for: {','.join(map(str, started))}")
        if pending:
            raise CommandFailed("Timed out before log directory move(s) could be started for: "
                                + ",".join(map(str, sorted(pending))))
    if args.wait:
        wait_with_progress(admin, entries, targets)
    return 0


def set_inter_broker_throttle(admin: AdminClient, moves, rate: int) -> None:
    """Kafka's ``modifyReassignmentThrottle``: the throttled-replica lists on each topic, the rates on every
    broker involved."""
    leaders, followers = plan.leader_throttles(moves), plan.follower_throttles(moves)
    for topic in sorted(set(leaders) | set(followers)):
        configs = {}
        if topic in leaders:
            configs[plan.LEADER_THROTTLED_REPLICAS] = leaders[topic]
        if topic in followers:
            configs[plan.FOLLOWER_THROTTLED_REPLICAS] = followers[topic]
        admin.alter_configs("topics", topic, configs)
    for b in plan.reassigning_brokers(moves):
        admin.alter_configs("brokers", str(b), {plan.LEADER_THROTTLED_RATE: str(rate),
                                                plan.FOLLOWER_THROTTLED_RATE: str(rate)})


def alter_log_dirs(admin: AdminClient, moves: Mapping[Replica, str]) -> dict[Replica, str]:
    """AlterReplicaLogDirs for ``moves``: the ones answered REPLICA_NOT_AVAILABLE (to retry); another error
    fails the command."""
    if not moves:
        return {}
    try:
        results = admin.alter_replica_log_dirs({(r.topic, r.partition, r.broker): d for r, d in moves.items()})
    except AdminError as e:
        raise CommandFailed(f"Failed to alter dir for {','.join(map(str, sorted(moves)))}: {e}") from None
    pending = {}
    for r, d in moves.items():
        code = results.get((r.topic, r.partition, r.broker), Errors.UNKNOWN_SERVER_ERROR)
        if code == Errors.REPLICA_NOT_AVAILABLE:
            pending[r] = d
        elif code != Errors.NONE:
            raise CommandFailed(f"Failed to alter dir for {r}: {error_name(code)} (dir {d})")
    return pending


# ------------------------------------------------------------------------------------------------ --verify

def partition_states(admin: AdminClient, entries: list[ReassignmentEntry]) -> tuple[list[str], bool]:
    """Kafka's ``findPartitionReassignmentStates`` as lines, and whether any reassignment runs in the cluster
    (in the file or not: throttles stay while one does)."""
    ongoing = list_reassignments(admin)
    finished = [e for e in entries if e.tp not in ongoing]
    current = current_replicas(admin, finished)
    lines = []
    for e in sorted(entries, key=lambda e: e.tp):
        if e.tp in ongoing:
            lines.append(f"Reassignment of partition {e.tp} is still in progress.")
        elif current.get(e.tp, []) == list(e.replicas):
            lines.append(f"Reassignment of partition {e.tp} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {e.tp}, but replica set is "
                         f"{','.join(map(str, current.get(e.tp, [])))} rather than {','.join(map(str, e.replicas))}.")
    return lines, bool(ongoing)


def current_replicas(admin: AdminClient, finished: list[ReassignmentEntry]) -> dict[TopicPartition, list[int]]:
    """The replica sets of partitions the controller no longer lists as reassigning, from Metadata.  Brokers learn
    a completed reassignment from the controller's UpdateMetadata a moment after it leaves the controller's list,
    so a set that differs from its target is read again for up to ``METADATA_SETTLE_S`` before it is reported."""
    def describe() -> dict[TopicPartition, list[int]]:
        current: dict[TopicPartition, list[int]] = {}
        for topic in sorted({e.tp.topic for e in finished}):
            try:
                for t in admin.describe_topics([topic]):
                    current.update({TopicPartition(t.name, p.partition): list(p.replicas) for p in t.partitions})
            except AdminError as e:
                if e.name != "UNKNOWN_TOPIC_OR_PARTITION":
                    raise
        return current

    def unsettled(current: dict[TopicPartition, list[int]]) -> bool:
        return any(e.tp in current and current[e.tp] != list(e.replicas) for e in finished)

    if not finished:
        return {}
    return Retrying(retry=retry_if_result(unsettled), retry_error_callback=lambda state: state.outcome.result(),
                    stop=stop_after_delay(METADATA_SETTLE_S), wait=wait_exponential(multiplier=0.05, max=0.5))(describe)


def verify(admin: AdminClient, entries: list[ReassignmentEntry], args) -> int:
    targets = plan.log_dir_moves(entries)
    if args.wait:
        wait_with_progress(admin, entries, targets)
    lines, parts_ongoing = partition_states(admin, entries)
    print("Status of partition reassignment:")
    for line in lines:
        print(line)
    infos = describe_replica_log_dirs(admin, sorted(targets))
    moves_ongoing = False
    for r in sorted(targets):
        line, done = verify_line(r, targets[r], infos.get(r))
        moves_ongoing = moves_ongoing or not done
        print(line)
    if not parts_ongoing and not moves_ongoing and not args.preserve_throttles:
        clear_all_throttles(admin, entries)
    return 0


def clear_all_throttles(admin: AdminClient, entries: list[ReassignmentEntry]) -> None:
    """Kafka's ``clearAllThrottles``: broker rates on every live broker and every broker of the file (the
    sources of earlier reassignments are not known), throttled-replica lists on the file's topics."""
    brokers = sorted(set(admin.broker_ids()) | {b for e in entries for b in e.replicas})
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          f"{','.join(map(str, brokers))}")
    for b in brokers:
        admin.alter_configs("brokers", str(b), delete_configs=BROKER_LEVEL_THROTTLES)
    topics = sorted({e.tp.topic for e in entries})
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}")
    for t in topics:
        admin.alter_configs("topics", t, delete_configs=plan.TOPIC_LEVEL_THROTTLES)


# ------------------------------------------------------------------------------------------------ --cancel

def cancel(admin: AdminClient, entries: list[ReassignmentEntry], args) -> int:
    targets = plan.log_dir_moves(entries)
    running = sorted(list_reassignments(admin, [e.tp for e in entries]))
    if running:
        errors = alter_reassignments(admin, {tp: None for tp in running})
        if errors:
            raise CommandFailed(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} for:\n"
                                + "\n".join(f"{tp}: {errors[tp]}" for tp in sorted(errors)))
        print(f"Successfully cancelled partition reassignment{'' if len(running) == 1 else 's'} for: "
              f"{','.join(map(str, running))}")
    else:
        print("None of the specified partition reassignments are active.")
    infos = describe_replica_log_dirs(admin, sorted(targets))
    active = {r: i.current for r, i in infos.items() if i is not None and i.future is not None and i.current}
    if not active:
        print("None of the specified partition moves are active.")
    else:
        deadline = time.monotonic() + args.timeout / 1000.0
        pending = alter_log_dirs(admin, active)
        while pending and time.monotonic() < deadline:
            time.sleep(RETRY_INTERVAL_S)
            pending = alter_log_dirs(admin, pending)
        if pending:
            raise CommandFailed("Timed out before log directory move(s) could be cancelled for: "
                                + ",".join(map(str, sorted(pending))))
        print(f"Successfully cancelled log directory move(s) for: {','.join(map(str, sorted(active)))}")
    if not args.preserve_throttles:
        clear_all_throttles(admin, entries)
    return 0


# ------------------------------------------------------------------------------------------------ --list

def list_text(ongoing: Mapping[TopicPartition, OngoingReassignment]) -> str:
    """Kafka's ``curReassignmentsToString``."""
    if not ongoing:
        return "No partition reassignments found."
    lines = ["Current partition reassignments:"]
    for tp in sorted(ongoing):
        r = ongoing[tp]
        line = f"{tp}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding_replicas:
            line += f" adding: {','.join(map(str, r.adding_replicas))}."
        if r.removing_replicas:
            line += f" removing: {','.join(map(str, r.removing_replicas))}."
        lines.append(line)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ log dirs

@attrs.frozen
class ReplicaLogDirs:
    """Kafka's ``ReplicaLogDirInfo``: where a replica's current and future logs are (None: nowhere), and
    their sizes (-1: none)."""

    current: str | None
    future: str | None
    current_size: int = -1
    future_size: int = -1


def describe_replica_log_dirs(admin: AdminClient, replicas: list[Replica]) -> dict[Replica, ReplicaLogDirs | None]:
    """Kafka's ``describeReplicaLogDirs``; None for a replica whose broker could not answer."""
    out: dict[Replica, ReplicaLogDirs | None] = {}
    for broker in sorted({r.broker for r in replicas}):
        mine = [r for r in replicas if r.broker == broker]
        topics: dict[str, list[int]] = {}
        for r in mine:
            topics.setdefault(r.topic, []).append(r.partition)
        try:
            described = admin.describe_log_dirs(topic_partitions=topics, brokers=[broker])
        except AdminError:
            out.update({r: None for r in mine})
            continue
        found: dict[tuple[str, int], dict[str, tuple[str, int]]] = {}
        for b in described:
            for d in b["log_dirs"]:
                if d["error_code"] != Errors.NONE:
                    continue
                for t in d.get("topics") or []:
                    for p in t["partitions"]:
                        slot = found.setdefault((t["name"], p["partition_index"]), {})
                        slot["future" if p["is_future_key"] else "current"] = (d["log_dir"], p["partition_size"])
        for r in mine:
            slot = found.get((r.topic, r.partition), {})
            cur, fut = slot.get("current"), slot.get("future")
            out[r] = ReplicaLogDirs(cur[0] if cur else None, fut[0] if fut else None,
                                    cur[1] if cur else -1, fut[1] if fut else -1)
    return out


def verify_line(r: Replica, target: str, info: ReplicaLogDirs | None) -> tuple[str, bool]:
    """Kafka's log-dir move state line and whether the move is finished
    (docs/kip-113-jbod.md#reassignment-with-log-dirs)."""
    tp = f"{r.topic}-{r.partition}"
    if info is None:
        return f"Partition {tp} cannot be found in any live log directory on broker {r.broker}.", True
    if info.current is None:
        return (f"Partition {tp} is not found in any live log dir on broker {r.broker}. There is likely an "
                f"offline log directory on the broker."), True
    if info.future is None:
        if info.current == target:
            return f"Reassignment of replica {r} completed successfully.", True
        return (f"Partition {tp} on broker {r.broker} is not being moved from log dir {info.current} to "
                f"{target}."), True
    if info.future == target:
        return f"Reassignment of replica {r} is still in progress.", False
    return f"Partition {tp} on broker {r.broker} is being moved to log dir {info.future} instead of {target}.", False


# ------------------------------------------------------------------------------------------------ --wait

def wait_with_progress(admin: AdminClient, entries: list[ReassignmentEntry], targets: Mapping[Replica, str]) -> None:
    """A tqdm bar per partition being reassigned (bytes on its adding replicas against the leader's size times
    their number) and per log-dir move (bytes in the future log against the current one), until all are done."""
    from tqdm import tqdm
    bars: dict[str, Any] = {}

    def bar(name: str, n: int, total: int) -> None:
        if name not in bars:
            bars[name] = tqdm(total=max(total, 1), desc=name, unit="B", unit_scale=True, file=sys.stderr,
                              leave=True, disable=not common.stderr_is_tty())
        b = bars[name]
        b.total = max(total, n, 1)
        b.n = n
        b.refresh()
    try:
        while True:
            ongoing = list_reassignments(admin, [e.tp for e in entries])
            replicas = {Replica(b, tp.topic, tp.partition) for tp, r in ongoing.items() for b in r.replicas}
            infos = describe_replica_log_dirs(admin, sorted(replicas | set(targets)))
            for tp, r in sorted(ongoing.items()):
                sizes = {b: infos.get(Replica(b, tp.topic, tp.partition)) for b in r.replicas}
                source = max((i.current_size for b, i in sizes.items()
                              if i is not None and b not in r.adding_replicas), default=0)
                copied = sum(max(i.current_size, 0) for b, i in sizes.items()
                             if i is not None and b in r.adding_replicas)
                bar(str(tp), copied, source * max(len(r.adding_replicas), 1))
            for e in entries:
                if e.tp not in ongoing and str(e.tp) in bars:
                    bar(str(e.tp), bars[str(e.tp)].total, bars[str(e.tp)].total)
            moving = False
            for rep in sorted(targets):
                info = infos.get(rep)
                if info is None:
                    continue
                if info.future is not None:
                    moving = True
                    bar(str(rep), max(info.future_size, 0), max(info.current_size, info.future_size))
                elif str(rep) in bars or info.current == targets[rep]:
                    bar(str(rep), max(info.current_size, 0), max(info.current_size, 0))
            if not ongoing and not moving:
                return
            time.sleep(POLL_S)
    finally:
        for b in bars.values():
            b.close()
