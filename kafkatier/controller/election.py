"""Leader election strategies (Kafka's ``Election`` / ``PartitionLeaderElectionAlgorithms``).

Each strategy is a pure function of one partition's assignment, its current leadership and which replicas
are alive; it returns the new leader and ISR, or ``None`` when no replica is eligible (the partition keeps
its leader, or stays offline).  The partition state machine picks the strategy; the caller writes the result
to ZooKeeper with the controller's fenced writer.

- **offline** (a leader died, or a new controller finds a partition without a live leader): the first replica
  in assignment order that is alive and in the ISR; with unclean election enabled, else the first live
  replica, whose ISR becomes just itself.
- **reassign** (the leader is not in the reassignment's target replicas): the first target replica that is
  alive and in the ISR; the ISR is unchanged.
- **preferred** (preferred replica election, auto rebalance): the first assigned replica, if it is alive and in
  the ISR; the ISR is unchanged.
- **controlled shutdown** (a broker asked to shut down): the first replica that is alive, in the ISR and not
  shutting down; the shutting-down brokers leave the ISR.
"""
from __future__ import annotations

import enum
from typing import Collection, Sequence

import attrs


class ElectionStrategy(enum.Enum):
    OFFLINE = "OfflinePartitionLeaderElectionStrategy"
    REASSIGN = "ReassignPartitionLeaderElectionStrategy"
    PREFERRED = "PreferredReplicaPartitionLeaderElectionStrategy"
    CONTROLLED_SHUTDOWN = "ControlledShutdownPartitionLeaderElectionStrategy"


@attrs.frozen
class ElectionResult:
    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


def leader_for_offline(assignment: Sequence[int], isr: Collection[int], live: Collection[int],
                       unclean_enabled: bool) -> ElectionResult | None:
    leader = next((r for r in assignment if r in live and r in isr), None)
    if leader is not None:
        return ElectionResult(leader, tuple(r for r in isr if r in live))
    if unclean_enabled:
        leader = next((r for r in assignment if r in live), None)
        if leader is not None:
            return ElectionResult(leader, (leader,), unclean=True)
    return None


def leader_for_reassign(target: Sequence[int], isr: Collection[int], live: Collection[int]) -> ElectionResult | None:
    leader = next((r for r in target if r in live and r in isr), None)
    return None if leader is None else ElectionResult(leader, tuple(isr))


def leader_for_preferred(assignment: Sequence[int], isr: Collection[int],
                         live: Collection[int]) -> ElectionResult | None:
    if not assignment:
        return None
    preferred = assignment[0]
    return ElectionResult(preferred, tuple(isr)) if preferred in live and preferred in isr else None


def leader_for_controlled_shutdown(assignment: Sequence[int], isr: Collection[int], live_or_shutting_down:
                                   Collection[int], shutting_down: Collection[int]) -> ElectionResult | None:
    leader = next((r for r in assignment if r in live_or_shutting_down and r in isr and r not in shutting_down),
                  None)
    return None if leader is None else ElectionResult(leader, tuple(r for r in isr if r not in shutting_down))
