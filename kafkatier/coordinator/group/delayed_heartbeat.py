"""DelayedHeartbeat (Kafka's ``kafka.coordinator.group.DelayedHeartbeat``): a member's session deadline.

Every heartbeat (and a join, a sync, an offset commit) moves the member's deadline to now + its session
timeout and schedules one of these for it; when it fires and the deadline has not moved since, the member has
been silent for a whole session and the coordinator removes it (a rebalance follows).  A member answered
MEMBER_ID_REQUIRED is *pending* until it joins with that id; its operation drops the pending id instead.
"""
from __future__ import annotations

from typing import Protocol

from kafkatier.coordinator.group.delayed_join import Timer
from kafkatier.coordinator.group.group_metadata import GroupMetadata, MemberMetadata


class HeartbeatExpirer(Protocol):
    """The GroupCoordinator, as this operation sees it."""

    def on_expire_heartbeat(self, op: "DelayedHeartbeat") -> None: ...


class DelayedHeartbeat:
    def __init__(self, coordinator: HeartbeatExpirer, group: GroupMetadata, member: MemberMetadata | None,
                 member_id: str, deadline_ms: int, timeout_ms: int):
        self.coordinator = coordinator
        self.group = group
        self.member = member              # None: a pending member id
        self.member_id = member_id
        self.deadline_ms = deadline_ms
        self.timeout_ms = timeout_ms

    @property
    def is_pending(self) -> bool:
        return self.member is None

    def schedule(self, timer: Timer) -> None:
        timer.schedule(f"heartbeat-{self.group.group_id}-{self.member_id}", self.on_expiration, self.timeout_ms)

    def on_expiration(self) -> None:
        self.coordinator.on_expire_heartbeat(self)
