"""DelayedJoin and InitialDelayedJoin (Kafka's ``kafka.coordinator.group.DelayedJoin`` / ``InitialDelayedJoin``):
the timer side of a rebalance.

A rebalance completes when every expected member has rejoined -- the coordinator checks that on each join and
leave (Kafka's ``tryComplete``) -- or, at the latest, when its DelayedJoin expires after the group's largest
rebalance timeout; members that did not rejoin are then removed.  A group starting from Empty waits with an
InitialDelayedJoin instead: ``group.initial.rebalance.delay.ms``, extended by the same delay while new members
keep arriving, never beyond the rebalance timeout, so a group of several consumers forms in one rebalance.

An operation belongs to one rebalance (``group.join_sequence`` when it was created); expiring after that
rebalance completed is a no-op.  Operations run on the coordinator's injected timer.
"""
from __future__ import annotations

from typing import Callable, Protocol

from kafkatier.coordinator.group.group_metadata import GroupMetadata, GroupState


class Timer(Protocol):
    def schedule(self, name: str, fn: Callable[[], object], delay_ms: float = 0, period_ms: float = -1) -> object: ...


class JoinCompleter(Protocol):
    """The GroupCoordinator, as these operations see it."""

    def on_expire_join(self, op: "DelayedJoin") -> None: ...

    def on_expire_initial_join(self, op: "InitialDelayedJoin") -> None: ...


class DelayedJoin:
    def __init__(self, coordinator: JoinCompleter, group: GroupMetadata, delay_ms: int):
        self.coordinator = coordinator
        self.group = group
        self.sequence = group.join_sequence
        self.delay_ms = delay_ms

    def schedule(self, timer: Timer) -> None:
        timer.schedule(f"delayed-join-{self.group.group_id}", self.on_expiration, self.delay_ms)

    def is_current(self) -> bool:
        """Whether the rebalance this operation belongs to is still in progress."""
        return self.group.join_sequence == self.sequence and self.group.is_state(GroupState.PREPARING_REBALANCE)

    def on_expiration(self) -> None:
        self.coordinator.on_expire_join(self)


class InitialDelayedJoin(DelayedJoin):
    def __init__(self, coordinator: JoinCompleter, group: GroupMetadata, configured_delay_ms: int,
                 delay_ms: int, remaining_ms: int):
        super().__init__(coordinator, group, delay_ms)
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def on_expiration(self) -> None:
        self.coordinator.on_expire_initial_join(self)

    def extension(self) -> "InitialDelayedJoin | None":
        """When new members joined during the delay and rebalance time remains: wait once more."""
        if not self.group.new_member_added or self.remaining_ms <= 0:
            return None
        self.group.new_member_added = False
        step = min(self.configured_delay_ms, self.remaining_ms)
        nxt = InitialDelayedJoin(self.coordinator, self.group, self.configured_delay_ms, step,
                                 self.remaining_ms - step)
        nxt.sequence = self.sequence
        return nxt
