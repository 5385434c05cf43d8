"""Replica placement for new topics and partitions (Kafka's ``AdminUtils.assignReplicasToBrokers``), and the
checks a manually supplied assignment must pass.

Rack-unaware placement: the first replica of partition *p* goes to broker ``(p + start) % n`` of the broker list
(round-robin from a start index); each further replica *j* is placed ``1 + (shift + j) % (n - 1)`` brokers after
the first, and ``shift`` grows by one every time the partition id wraps around the broker list.  Leaders are
therefore spread evenly and followers of one broker's partitions are spread over the others.

Rack-aware placement (used when every broker has a rack) walks a broker list that alternates racks and skips a
broker whose rack already holds a replica while some rack holds none.

The caller passes brokers in the order Kafka does (sorted by id); ``fixed_start_index`` pins both the start
index and the initial shift (as in Kafka's tests), otherwise both are random.
"""
from __future__ import annotations

import random
from collections import defaultdict
from typing import Iterable, Iterator, Mapping, Sequence

import attrs

from kafkatier.protocol.errors import (Errors, InvalidPartitionsError, InvalidReplicationFactorError,
                                       KafkaError)


class InvalidReplicaAssignmentError(KafkaError):
    """A manual replica assignment is inconsistent (Kafka's ``InvalidReplicaAssignmentException``)."""

    error = Errors.INVALID_REPLICA_ASSIGNMENT


class AdminOperationError(KafkaError):
    """Kafka's ``AdminOperationException``: reported to clients as UNKNOWN_SERVER_ERROR with its message."""

    error = Errors.UNKNOWN_SERVER_ERROR


@attrs.frozen(order=True)
class BrokerMetadata:
    """A live broker as placement sees it."""

    id: int
    rack: str | None = None


_rng = random.Random()


def _as_metadata(brokers: Iterable[BrokerMetadata | int]) -> list[BrokerMetadata]:
    return [b if isinstance(b, BrokerMetadata) else BrokerMetadata(int(b)) for b in brokers]


def assign_replicas_to_brokers(brokers: Iterable[BrokerMetadata | int], n_partitions: int,
                               replication_factor: int, fixed_start_index: int = -1,
                               start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """``{partition: [replica broker ids]}`` for ``n_partitions`` partitions numbered from
    ``max(0, start_partition_id)``.

    Raises InvalidPartitionsError / InvalidReplicationFactorError with Kafka's messages, and
    AdminOperationError when only some brokers have a rack.
    """
    metas = _as_metadata(brokers)
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(metas):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(metas)}.")
    rng = rng or _rng
    if all(b.rack is None for b in metas):
        return _assign_rack_unaware(n_partitions, replication_factor, [b.id for b in metas], fixed_start_index,
                                    start_partition_id, rng)
    if any(b.rack is None for b in metas):
        raise AdminOperationError("Not all brokers have rack information for replica rack aware assignment.")
    return _assign_rack_aware(n_partitions, replication_factor, metas, fixed_start_index, start_partition_id, rng)


def _replica_index(first_replica_index: int, second_replica_shift: int, replica_index: int, n_brokers: int) -> int:
    shift = 1 + (second_replica_shift + replica_index) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def _start(fixed_start_index: int, n: int, rng: random.Random) -> tuple[int, int]:
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    return rng.randrange(n), rng.randrange(n)


def _first_replicas(n_partitions: int, n: int, fixed_start_index: int, start_partition_id: int,
                    rng: random.Random) -> Iterator[tuple[int, int, int]]:
    """Each partition with the index of its first replica among ``n`` brokers and the shift of its followers
    (Kafka's start index and next-replica shift, the shift growing once per round of ``n`` partitions)."""
    start_index, shift = _start(fixed_start_index, n, rng)
    partition = max(0, start_partition_id)
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        yield partition, (partition + start_index) % n, shift
        partition += 1


def _assign_rack_unaware(n_partitions: int, replication_factor: int, broker_ids: list[int], fixed_start_index: int,
                         start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    n = len(broker_ids)
    out: dict[int, list[int]] = {}
    for partition, first, shift in _first_replicas(n_partitions, n, fixed_start_index, start_partition_id, rng):
        replicas = [broker_ids[first]]
        replicas += [broker_ids[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        out[partition] = replicas
    return out


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Broker ids taking one broker from each rack in turn (racks sorted by name, brokers by id):
    ``{0: a, 1: a, 2: b, 3: c}`` -> ``[0, 2, 3, 1]``."""
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker_id, rack in sorted(broker_racks.items()):
        by_rack[rack].append(broker_id)
    queues = [list(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    depth = max((len(q) for q in queues), default=0)
    for i in range(depth):
        out += [q[i] for q in queues if i < len(q)]
    return out


def _assign_rack_aware(n_partitions: int, replication_factor: int, metas: list[BrokerMetadata],
                       fixed_start_index: int, start_partition_id: int,
                       rng: random.Random) -> dict[int, list[int]]:
    rack_of = {b.id: str(b.rack) for b in metas}
    n_racks = len(set(rack_of.values()))
    arranged = rack_alternated_broker_list(rack_of)
    n = len(arranged)
    out: dict[int, list[int]] = {}
    for partition, first, shift in _first_replicas(n_partitions, n, fixed_start_index, start_partition_id, rng):
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            # At most n candidates in a row can be skipped before one fits (each broker is visited once per
            # round of n), so the search is bounded by n * replication_factor steps.
            for _attempt in range(n * replication_factor + 1):
                broker = arranged[_replica_index(first, shift * n_racks, k, n)]
                rack = rack_of[broker]
                k += 1
                rack_ok = rack not in racks_used or len(racks_used) == n_racks
                broker_ok = broker not in brokers_used or len(brokers_used) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
            else:  # pragma: no cover - impossible with a consistent rack map
                raise AdminOperationError(f"could not place replica {len(replicas) + 1} of partition {partition}")
        out[partition] = replicas
    return out


def _scala_map(assignment: Mapping[int, Sequence[int]]) -> str:
    inner = ", ".join(f"{p} -> List({', '.join(str(r) for r in reps)})" for p, reps in sorted(assignment.items()))
    return f"Map({inner})"


def validate_manual_assignment(assignment: Mapping[int, Sequence[int]],
                               live_brokers: Iterable[int] | None = None) -> dict[int, tuple[int, ...]]:
    """Check a manual ``{partition: replicas}`` assignment as Kafka does at topic creation; returns it
    normalised (int keys, tuple values).  Raises InvalidReplicaAssignmentError.

    Order and messages: empty replica list (AdminZkClient's add-partitions text), differing replica counts,
    duplicate replicas, partitions not ``0..n-1`` (``validateTopicCreate``), then — when ``live_brokers`` is
    given — brokers that are not registered (Kafka's KRaft text; ZooKeeper-mode Kafka does not check this at
    creation and leaves such partitions offline).
    """
    try:
        norm = {int(p): tuple(int(r) for r in reps) for p, reps in assignment.items()}
    except (TypeError, ValueError):
        raise InvalidReplicaAssignmentError(f"Replica assignment must map partition ids to lists of broker ids: "
                                            f"{dict(assignment)!r}") from None
    for p in sorted(norm):
        if not norm[p]:
            raise InvalidReplicaAssignmentError(f"Cannot have replication factor of 0 for partition id {p}.")
    if len({len(r) for r in norm.values()}) != 1:
        raise InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
    if any(len(r) != len(set(r)) for r in norm.values()):
        raise InvalidReplicaAssignmentError("Duplicate replica assignment found: " + _scala_map(norm))
    if sorted(norm) != list(range(len(norm))):
        raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
    if live_brokers is not None:
        live = set(live_brokers)
        for p in sorted(norm):
            for r in norm[p]:
                if r not in live:
                    raise InvalidReplicaAssignmentError(
                        f"The manual partition assignment includes broker {r}, but no such broker is registered.")
    return norm
