"""The client side of a partition reassignment without its I/O (the computations of Kafka's
``ReassignPartitionsCommand``; docs/kip-113-jbod.md#kafka-reassign-partitions): the tool's two JSON files,
the proposed assignment of ``--generate``, and the move map from which ``--throttle`` derives the throttled-replica
topic configs and the brokers whose rates it sets.

Files (a missing ``version`` is 1, any other value is refused):

- topics to move: ``{"topics":[{"topic":"foo"}],"version":1}``;
- reassignment: ``{"version":1,"partitions":[{"topic":"foo","partition":1,"replicas":[1,2,3],
  "log_dirs":["/data/d1","any","any"]}]}`` -- ``log_dirs`` optional (absent = all ``"any"``), each entry
  ``"any"`` or an absolute path, as many as ``replicas``.

Every parse error is a :class:`ReassignmentJsonError` whose text is Kafka's message, on one line.

Throttles (Kafka's ``calculateProposedMoveMap`` and friends): for each partition the *sources* are its current
replicas (or, while a reassignment runs, its replicas minus the adding ones) and the *destinations* the proposed
replicas that are not sources.  ``leader.replication.throttled.replicas`` lists ``partition:source`` and
``follower.replication.throttled.replicas`` ``partition:destination``; the rates go to every broker that is a
source or a destination.
"""
from __future__ import annotations

import json
import random
from typing import Any, Iterable, Mapping, Sequence

import attrs

from kafkatier.admin.json_input import parse_versioned_object
from kafkatier.admin.replica_assignment import BrokerMetadata, assign_replicas_to_brokers
from kafkatier.common.structs import TopicPartition

ANY_LOG_DIR = "any"

LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
#: The topic configs --verify / --cancel remove (Kafka's TOPIC_LEVEL_THROTTLES).
TOPIC_LEVEL_THROTTLES = (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS)


class ReassignmentJsonError(ValueError):
    """An unusable input file or broker list; the text is Kafka's message."""


@attrs.frozen
class ReassignmentEntry:
    """One partition of a reassignment file."""

    tp: TopicPartition
    replicas: tuple[int, ...]
    log_dirs: tuple[str, ...]


@attrs.frozen(order=True)
class Replica:
    """``topic-partition-broker`` (Kafka's TopicPartitionReplica); sorted by broker, topic, partition."""

    broker: int
    topic: str
    partition: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}-{self.broker}"


@attrs.frozen
class OngoingReassignment:
    """A reassignment in progress as ListPartitionReassignments reports it."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@attrs.frozen
class PartitionMove:
    """Kafka's ``PartitionMove``: the brokers a partition's data comes from and the brokers it goes to."""

    sources: frozenset[int]
    destinations: frozenset[int]


# ------------------------------------------------------------------------------------------------ files

def _load(text: str) -> dict:
    return parse_versioned_object(text, ReassignmentJsonError)


def _scala_list(items: Iterable[Any]) -> str:
    return "List(" + ", ".join(str(x) for x in items) + ")"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_reassignment_json(text: str) -> list[ReassignmentEntry]:
    """Kafka's ``parsePartitionReassignmentData`` and ``parseExecuteAssignmentArgs`` checks, in its order."""
    js = _load(text)
    parts = js.get("partitions", [])
    if not isinstance(parts, list):
        raise ReassignmentJsonError("Expected `array` value for `partitions`")
    out: list[ReassignmentEntry] = []
    for i, e in enumerate(parts):
        if not isinstance(e, dict):
            raise ReassignmentJsonError(f"Expected `object` value for partitions[{i}], found {json.dumps(e)}")
        topic, partition, replicas = e.get("topic"), e.get("partition"), e.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise ReassignmentJsonError(f"No such field exists: `topic` (partitions[{i}])")
        if not _is_int(partition) or partition < 0:
            raise ReassignmentJsonError(f"No such field exists: `partition` (partitions[{i}])")
        if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
            raise ReassignmentJsonError(f"Expected `array` of int value for `replicas` (partitions[{i}])")
        tp = TopicPartition(topic, partition)
        log_dirs = e.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
            raise ReassignmentJsonError(f"Expected `array` of string value for `log_dirs` (partitions[{i}])")
        if len(log_dirs) != len(replicas):
            raise ReassignmentJsonError(
                f"Size of replicas list {_scala_list(replicas)} is different from size of log dirs list "
                f"{_scala_list(log_dirs)} for partition {tp}")
        for d in log_dirs:
            if d != ANY_LOG_DIR and not d.startswith("/"):
                raise ReassignmentJsonError(f"Log directory {d!r} of partition {tp} must be \"any\" or an "
                                            f"absolute path")
        out.append(ReassignmentEntry(tp, tuple(replicas), tuple(log_dirs)))
    if not out:
        raise ReassignmentJsonError("Partition reassignment list cannot be empty")
    if any(not e.replicas for e in out):
        raise ReassignmentJsonError("Partition replica list cannot be empty")
    dups = _duplicates(e.tp for e in out)
    if dups:
        raise ReassignmentJsonError("Partition reassignment contains duplicate topic partitions: "
                                    + ",".join(map(str, dups)))
    dup_replicas = [(e.tp, _duplicates(e.replicas)) for e in out if _duplicates(e.replicas)]
    if dup_replicas:
        raise ReassignmentJsonError("Partition replica lists may not contain duplicate entries: " + ". ".join(
            f"{tp} contains multiple entries for {','.join(map(str, d))}" for tp, d in dup_replicas))
    return out


def _duplicates(items: Iterable[Any]) -> list[Any]:
    seen: set = set()
    dups: list = []
    for x in items:
        if x in seen and x not in dups:
            dups.append(x)
        seen.add(x)
    return dups


def parse_topics_to_move_json(text: str) -> list[str]:
    """Kafka's ``parseTopicsData`` plus ``parseGenerateAssignmentArgs``' duplicate check."""
    js = _load(text)
    topics = js.get("topics", [])
    if not isinstance(topics, list):
        raise ReassignmentJsonError("Expected `array` value for `topics`")
    out = []
    for i, e in enumerate(topics):
        name = e.get("topic") if isinstance(e, dict) else None
        if not isinstance(name, str) or not name:
            raise ReassignmentJsonError(f"No such field exists: `topic` (topics[{i}])")
        out.append(name)
    dups = _duplicates(out)
    if dups:
        raise ReassignmentJsonError(f"List of topics to reassign contains duplicate entries: [{', '.join(dups)}]")
    if not out:
        raise ReassignmentJsonError("List of topics to reassign cannot be empty")
    return out


def parse_broker_list(text: str) -> list[int]:
    """``--broker-list "5,6"``; duplicates refused with Kafka's message."""
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError:
        raise ReassignmentJsonError(f"--broker-list must be a comma-separated list of broker ids, got {text!r}") from None
    dups = _duplicates(brokers)
    if dups:
        raise ReassignmentJsonError(f"Broker list contains duplicate entries: [{', '.join(map(str, dups))}]")
    return brokers


def format_reassignment_json(assignment: Mapping[TopicPartition, Sequence[int]],
                             log_dirs: Mapping[Replica, str] | None = None) -> str:
    """Kafka's ``formatAsReassignmentJson``: one line, partitions sorted, ``log_dirs`` always present."""
    log_dirs = log_dirs or {}
    parts = [{"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas),
              "log_dirs": [log_dirs.get(Replica(b, tp.topic, tp.partition), ANY_LOG_DIR) for b in replicas]}
             for tp, replicas in sorted(assignment.items())]
    return json.dumps({"version": 1, "partitions": parts}, separators=(",", ":"))


def log_dir_moves(entries: Iterable[ReassignmentEntry]) -> dict[Replica, str]:
    """The replicas with a target log dir (not ``"any"``)."""
    return {Replica(b, e.tp.topic, e.tp.partition): d
            for e in entries for b, d in zip(e.replicas, e.log_dirs) if d != ANY_LOG_DIR}


# ------------------------------------------------------------------------------------------------ --generate

def calculate_assignment(current: Mapping[TopicPartition, Sequence[int]], brokers: Sequence[BrokerMetadata],
                         rng: random.Random | None = None) -> dict[TopicPartition, list[int]]:
    """Kafka's ``calculateAssignment``: each topic placed afresh on ``brokers`` with its partition count and
    the replication factor of its first partition (``assign_replicas_to_brokers``: Kafka's
    ``AdminUtils.assignReplicasToBrokers``; its errors propagate)."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in sorted(current):
        by_topic.setdefault(tp.topic, []).append(tp)
    out: dict[TopicPartition, list[int]] = {}
    for topic, tps in by_topic.items():
        rf = len(current[tps[0]])
        for p, replicas in assign_replicas_to_brokers(sorted(brokers), len(tps), rf, rng=rng).items():
            out[TopicPartition(topic, p)] = list(replicas)
    return out


# ------------------------------------------------------------------------------------------------ throttles

def proposed_move_map(ongoing: Mapping[TopicPartition, OngoingReassignment],
                      proposed: Mapping[TopicPartition, Sequence[int]],
                      current: Mapping[TopicPartition, Sequence[int]]) -> dict[str, dict[int, PartitionMove]]:
    """Kafka's ``calculateProposedMoveMap``: the running reassignments' moves, with the proposed ones over
    them (a partition already moving keeps its sources)."""
    moves: dict[str, dict[int, PartitionMove]] = {}
    for tp, r in ongoing.items():
        sources = frozenset(r.replicas) - frozenset(r.adding_replicas)
        moves.setdefault(tp.topic, {})[tp.partition] = PartitionMove(sources, frozenset(r.adding_replicas))
    for tp, replicas in proposed.items():
        part_moves = moves.setdefault(tp.topic, {})
        if tp.partition in part_moves:
            sources = part_moves[tp.partition].sources
        elif tp in current:
            sources = frozenset(current[tp])
        else:
            raise ValueError(f"Trying to reassign a topic partition {tp} with 0 replicas")
        part_moves[tp.partition] = PartitionMove(sources, frozenset(replicas) - sources)
    return moves


def leader_throttles(moves: Mapping[str, Mapping[int, PartitionMove]]) -> dict[str, str]:
    """``leader.replication.throttled.replicas`` per topic: ``partition:source`` for every source."""
    return {topic: ",".join(sorted(f"{p}:{b}" for p, m in pm.items() for b in m.sources))
            for topic, pm in moves.items()}


def follower_throttles(moves: Mapping[str, Mapping[int, PartitionMove]]) -> dict[str, str]:
    """``follower.replication.throttled.replicas`` per topic: ``partition:destination`` for every destination."""
    return {topic: ",".join(sorted(f"{p}:{b}" for p, m in pm.items() for b in m.destinations if b not in m.sources))
            for topic, pm in moves.items()}


def reassigning_brokers(moves: Mapping[str, Mapping[int, PartitionMove]]) -> list[int]:
    """Every broker that is a source or a destination of a move (they get the throttle rates)."""
    return sorted({b for pm in moves.values() for m in pm.values() for b in m.sources | m.destinations})
