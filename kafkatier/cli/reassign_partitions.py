"""``kafkatier reassign-partitions``: kafka-reassign-partitions, the log-dir part (KIP-113; jbod.md §8,
tools_and_formats.md §5).

The reassignment file is Kafka's::

    {"version":1,"partitions":[{"topic":"foo","partition":1,"replicas":[1,2,3],"log_dirs":["/data/d1","any","any"]}]}

``log_dirs`` is optional (absent = all ``"any"``); each entry is ``"any"`` or an absolute path; its length must
equal ``replicas``.  A bad file prints Kafka's message on one line and exits 2 before anything is sent.

- ``--execute``: prints the current assignment (for rollback), sets the move throttle if
  ``--replica-alter-log-dirs-throttle`` is given (``intra.broker.throttled.rate`` on each broker with a
  move, as a dynamic broker config), then sends AlterReplicaLogDirs for every replica with a path, retrying the
  ones answered REPLICA_NOT_AVAILABLE every 100 ms until ``--timeout`` (default 10000 ms).  ``--wait`` (project)
  then shows a progress bar of bytes moved per replica until every move is done.
- ``--verify``: ``Status of partition reassignment:``, one line per partition and one per log-dir move (Kafka's
  wording); when nothing is left in progress and ``--preserve-throttles`` is absent, the move throttles are
  removed.
- ``--cancel``: re-sends AlterReplicaLogDirs with each moving replica's current dir.

**Not supported yet:** moving replicas between brokers (a ``replicas`` list different from the current
assignment, ``--throttle``, ``--generate``, ``--list``).  Such a file is refused with a clear message and exit
status 1, and nothing is sent; the reassignment work extends this command (``/admin/reassign_partitions``,
which never carries ``log_dirs``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import attrs

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminClient, AdminError, error_name
from kafkatier.cli import common
from kafkatier.cli.main import UsageError
from kafkatier.protocol.errors import Errors
from kafkatier.server.dynamic_broker_config import ALTER_LOG_DIRS_THROTTLE_NAMES

ANY = "any"
RETRY_INTERVAL_S = 0.1


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "reassign-partitions", help="move replicas between log dirs (kafka-reassign-partitions; log_dirs part)",
        description="Kafka's kafka-reassign-partitions for the log-dir part of a reassignment (KIP-113): "
                    "--execute, --verify and --cancel with a reassignment JSON file whose replicas stay on "
                    "their brokers. Moving replicas between brokers is not supported yet.")
    common.add_connection_options(p)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--execute", action="store_true", help="start the moves in the file")
    mode.add_argument("--verify", action="store_true", help="report the moves' status; remove throttles when done")
    mode.add_argument("--cancel", action="store_true", help="cancel the moves in the file")
    mode.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    mode.add_argument("--list", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--reassignment-json-file", metavar="FILE", help="Kafka's reassignment JSON")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1, metavar="B/S",
                   help="limit the log-dir moves of each broker involved to B/S bytes per second (-1: unchanged)")
    p.add_argument("--throttle", type=int, default=-1, metavar="B/S", help="inter-broker throttle (not supported yet)")
    p.add_argument("--additional", action="store_true", help="change the throttle of a running reassignment")
    p.add_argument("--preserve-throttles", action="store_true", help="--verify/--cancel: keep the throttles")
    p.add_argument("--timeout", type=int, default=10000, metavar="MS",
                   help="how long to retry replicas not created yet (default 10000)")
    p.add_argument("--wait", action="store_true",
                   help="--execute/--verify: show the bytes moved per replica until every move is done")
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------------------------ the file

class ReassignmentJsonError(UsageError):
    """The reassignment file is unusable (one line, exit status 2)."""


@attrs.frozen
class PartitionMove:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    log_dirs: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@attrs.frozen(order=True)
class Replica:
    """``topic-partition-broker`` (Kafka's TopicPartitionReplica); sorted by broker, topic, partition."""

    broker: int
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}-{self.broker}"


def parse_reassignment_json(text: str) -> list[PartitionMove]:
    """Kafka's ``parsePartitionReassignmentData`` plus the log-dir checks, with Kafka's messages."""
    try:
        js = json.loads(text)
    except ValueError:
        raise ReassignmentJsonError("The input string is not a valid JSON") from None
    if not isinstance(js, dict):
        raise ReassignmentJsonError("The input string is not a valid JSON object")
    version = js.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise ReassignmentJsonError(f"Not supported version field value {json.dumps(version)}")
    parts = js.get("partitions")
    if not isinstance(parts, list) or not parts:
        raise ReassignmentJsonError("Partition reassignment list cannot be empty")
    out: list[PartitionMove] = []
    seen: set[tuple[str, int]] = set()
    dups: list[str] = []
    for i, e in enumerate(parts):
        if not isinstance(e, dict):
            raise ReassignmentJsonError(f"Expected `object` value for partitions[{i}], found {json.dumps(e)}")
        topic, partition, replicas = e.get("topic"), e.get("partition"), e.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise ReassignmentJsonError(f"No such field exists: `topic` (partitions[{i}])")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise ReassignmentJsonError(f"No such field exists: `partition` (partitions[{i}])")
        if not isinstance(replicas, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise ReassignmentJsonError(f"Expected `array` of int value for `replicas` (partitions[{i}])")
        if not replicas:
            raise ReassignmentJsonError("Partition replica list cannot be empty")
        name = f"{topic}-{partition}"
        if len(set(replicas)) != len(replicas):
            dup = next(r for r in replicas if replicas.count(r) > 1)
            raise ReassignmentJsonError(f"Partition replica lists may not contain duplicate entries: {name} "
                                        f"contains multiple entries for {dup}")
        log_dirs = e.get("log_dirs", [ANY] * len(replicas))
        if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
            raise ReassignmentJsonError(f"Expected `array` of string value for `log_dirs` (partitions[{i}])")
        if len(log_dirs) != len(replicas):
            raise ReassignmentJsonError(
                f"Size of replicas list {_scala_list(replicas)} is different from size of log dirs list "
                f"{_scala_list(log_dirs)} for partition {name}")
        for d in log_dirs:
            if d != ANY and not d.startswith("/"):
                raise ReassignmentJsonError(f"Log directory {d!r} of partition {name} must be \"any\" or an "
                                            f"absolute path")
        if (topic, partition) in seen and name not in dups:
            dups.append(name)
        seen.add((topic, partition))
        out.append(PartitionMove(topic, partition, tuple(replicas), tuple(log_dirs)))
    if dups:
        raise ReassignmentJsonError(f"Partition reassignment contains duplicate topic partitions: {','.join(dups)}")
    return out


def _scala_list(items: list) -> str:
    return "List(" + ", ".join(str(x) for x in items) + ")"


def load_reassignment_file(path: str | None) -> list[PartitionMove]:
    if not path:
        raise UsageError("--reassignment-json-file is required")
    try:
        with open(path, encoding="utf-8") as f:
            return parse_reassignment_json(f.read())
    except (OSError, UnicodeDecodeError) as e:
        raise ReassignmentJsonError(f"cannot read {path}: {e}") from None


def log_dir_moves(moves: list[PartitionMove]) -> dict[Replica, str]:
    return {Replica(b, m.topic, m.partition): d for m in moves for b, d in zip(m.replicas, m.log_dirs) if d != ANY}


# ------------------------------------------------------------------------------------------------ the state

@attrs.frozen
class ReplicaLogDirs:
    """Kafka's ``ReplicaLogDirInfo``: where a replica's current and future logs are (None: nowhere)."""

    current: str | None
    current_lag: int
    future: str | None
    future_lag: int
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
        found: dict[tuple[str, int], dict[str, Any]] = {}
        for b in described:
            for d in b["log_dirs"]:
                if d["error_code"] != Errors.NONE:
                    continue
                for t in d.get("topics") or []:
                    for p in t["partitions"]:
                        slot = found.setdefault((t["name"], p["partition_index"]), {})
                        key = "future" if p["is_future_key"] else "current"
                        slot[key] = (d["log_dir"], p["offset_lag"], p["partition_size"])
        for r in mine:
            slot = found.get((r.topic, r.partition), {})
            cur, fut = slot.get("current"), slot.get("future")
            out[r] = ReplicaLogDirs(cur[0] if cur else None, cur[1] if cur else -1,
                                    fut[0] if fut else None, fut[1] if fut else -1,
                                    cur[2] if cur else -1, fut[2] if fut else -1)
    return out


def verify_line(r: Replica, target: str, info: ReplicaLogDirs | None) -> tuple[str, bool]:
    """Kafka's log-dir move state line and whether the move is finished (jbod.md §8)."""
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


# ------------------------------------------------------------------------------------------------ modes

def run(args: argparse.Namespace) -> int:
    if args.generate or args.list:
        return common.print_error("reassign-partitions", "--generate and --list are not supported yet "
                                                         "(only log-dir moves of the current replicas are)")
    moves = load_reassignment_file(args.reassignment_json_file)
    if args.throttle >= 0:
        raise UsageError("--throttle limits inter-broker movement, which is not supported yet; use "
                         "--replica-alter-log-dirs-throttle for log-dir moves")
    try:
        conn = common.connection_from_args(args)
        with common.open_admin(conn) as admin:
            unsupported = _broker_changes(admin, moves)
            if unsupported:
                return common.print_error("reassign-partitions", unsupported)
            if args.execute:
                return _execute(admin, moves, args)
            if args.verify:
                return _verify(admin, moves, args)
            return _cancel(admin, moves, args)
    except (AdminError, NoReachableBrokerError) as e:
        return common.print_error("reassign-partitions", e)


def _broker_changes(admin: AdminClient, moves: list[PartitionMove]) -> str | None:
    """The message refusing a file that moves replicas between brokers (not supported yet), else None.
    Unknown broker ids are bad input (Kafka's message, exit 2)."""
    live = set(admin.broker_ids())
    unknown = sorted({b for m in moves for b in m.replicas} - live)
    if unknown:
        raise UsageError(f"The proposed assignment contains non-existent brokerIDs: {','.join(map(str, unknown))}")
    topics = sorted({m.topic for m in moves})
    try:
        current = {(t.name, p.partition): p.replicas for t in admin.describe_topics(topics) for p in t.partitions}
    except AdminError as e:
        if e.name == "UNKNOWN_TOPIC_OR_PARTITION":
            return f"{e.name}: {e.message}"
        raise
    for m in moves:
        have = current.get((m.topic, m.partition))
        if have is None:
            return f"UNKNOWN_TOPIC_OR_PARTITION: Partition {m.name} does not exist."
        if sorted(have) != sorted(m.replicas):
            return (f"moving replicas between brokers is not supported yet: partition {m.name} has replicas "
                    f"{list(have)}, the file asks for {list(m.replicas)}; only log_dirs moves of the current "
                    f"replicas are supported")
    return None


def _execute(admin: AdminClient, moves: list[PartitionMove], args) -> int:
    current = {(t.name, p.partition): list(p.replicas)
               for t in admin.describe_topics(sorted({m.topic for m in moves})) for p in t.partitions}
    rollback = {"version": 1, "partitions": [
        {"topic": m.topic, "partition": m.partition, "replicas": current[(m.topic, m.partition)],
         "log_dirs": [ANY] * len(current[(m.topic, m.partition)])} for m in moves]}
    print("Current partition replica assignment\n")
    print(json.dumps(rollback, separators=(",", ":")))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    targets = log_dir_moves(moves)
    if args.replica_alter_log_dirs_throttle >= 0:
        print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
              "throttle is removed.")
        for b in sorted({r.broker for r in targets}):
            admin.alter_configs("brokers", str(b), {ALTER_LOG_DIRS_THROTTLE_NAMES[0]: str(args.replica_alter_log_dirs_throttle)})
        print(f"The replica-alter-dir throttle limit was set to {args.replica_alter_log_dirs_throttle} B/s")
    if not targets:
        return 0
    pending = dict(targets)
    deadline = time.monotonic() + args.timeout / 1000.0
    while True:
        results = admin.alter_replica_log_dirs({(r.topic, r.partition, r.broker): d for r, d in pending.items()})
        for r in list(pending):
            code = results.get((r.topic, r.partition, r.broker), Errors.UNKNOWN_SERVER_ERROR)
            if code == Errors.NONE:
                del pending[r]
            elif code != Errors.REPLICA_NOT_AVAILABLE:
                return common.print_error("reassign-partitions",
                                          f"Failed to alter dir for {r}: {error_name(code)} (dir {pending[r]})")
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(RETRY_INTERVAL_S)  # Kafka's fixed 100 ms retry of replicas not created yet
    started = sorted(set(targets) - set(pending))
    if started:
        print(f"Successfully started log directory move(s) for: {','.join(map(str, started))}")
    if pending:
        print(f"Timed out before log directory move(s) could be started for: {','.join(map(str, sorted(pending)))}")
        return 1
    if args.wait:
        _wait_with_progress(admin, targets)
    return 0


def _verify(admin: AdminClient, moves: list[PartitionMove], args) -> int:
    targets = log_dir_moves(moves)
    if args.wait:
        _wait_with_progress(admin, targets)
    print("Status of partition reassignment:")
    for m in moves:
        print(f"Reassignment of partition {m.name} is completed.")
    infos = describe_replica_log_dirs(admin, sorted(targets))
    all_done = True
    for r in sorted(targets):
        line, done = verify_line(r, targets[r], infos.get(r))
        all_done = all_done and done
        print(line)
    if all_done and not args.preserve_throttles:
        brokers = sorted({r.broker for r in targets})
        if brokers:
            print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
            for b in brokers:
                admin.alter_configs("brokers", str(b), delete_configs=list(ALTER_LOG_DIRS_THROTTLE_NAMES))
    return 0


def _cancel(admin: AdminClient, moves: list[PartitionMove], args) -> int:
    targets = log_dir_moves(moves)
    infos = describe_replica_log_dirs(admin, sorted(targets))
    active = {r: i.current for r, i in infos.items() if i is not None and i.future is not None and i.current}
    if not active:
        print("None of the specified partition moves are active.")
    else:
        results = admin.alter_replica_log_dirs({(r.topic, r.partition, r.broker): d for r, d in active.items()})
        failed = [r for r in active if results.get((r.topic, r.partition, r.broker)) != Errors.NONE]
        if failed:
            return common.print_error("reassign-partitions", "Failed to cancel log directory move(s) for: "
                                      + ",".join(map(str, sorted(failed))))
        print(f"Successfully cancelled log directory move(s) for: {','.join(map(str, sorted(active)))}")
    if not args.preserve_throttles:
        for b in sorted({r.broker for r in targets}):
            admin.alter_configs("brokers", str(b), delete_configs=list(ALTER_LOG_DIRS_THROTTLE_NAMES))
    return 0


def _wait_with_progress(admin: AdminClient, targets: dict[Replica, str], poll_s: float = 0.5) -> None:
    """A tqdm bar per replica: bytes in its future log against its current log's size."""
    from tqdm import tqdm
    bars: dict[Replica, Any] = {}
    try:
        while True:
            infos = describe_replica_log_dirs(admin, sorted(targets))
            moving = False
            for r in sorted(targets):
                info = infos.get(r)
                if info is None:
                    continue
                if r not in bars:
                    bars[r] = tqdm(total=max(info.current_size, 0), desc=str(r), unit="B", unit_scale=True,
                                   file=sys.stderr, leave=True, disable=not common.stderr_is_tty())
                bar = bars[r]
                if info.future is not None:
                    moving = True
                    bar.total = max(info.current_size, info.future_size, 1)
                    bar.n = max(info.future_size, 0)
                else:
                    bar.n = bar.total
                bar.refresh()
            if not moving:
                return
            time.sleep(poll_s)
    finally:
        for bar in bars.values():
            bar.close()
