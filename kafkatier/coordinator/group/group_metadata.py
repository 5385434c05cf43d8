"""GroupMetadata and MemberMetadata: one group's state machine, members and committed offsets (Kafka's
``kafka.coordinator.group.GroupMetadata`` / ``MemberMetadata``).

States and their transitions (Kafka's)::

    Empty ------------------> PreparingRebalance <-------------------+
      ^                         |        ^                           |
      |                         v        |                           |
      +--(no members left)-- CompletingRebalance --(leader's sync)--> Stable
    any state ---> Dead (group deleted, or its partition unloaded)

Not thread safe: the :class:`~kafkatier.coordinator.group.group_coordinator.GroupCoordinator` holds its lock
around every use.  Response callbacks of members waiting in JoinGroup / SyncGroup are kept on the member, as
Kafka does (``awaitingJoinCallback`` / ``awaitingSyncCallback``).
"""
from __future__ import annotations

import enum
import struct
from typing import Callable

import attrs

from kafkatier.coordinator.group.records import GroupRecord, MemberRecord, OffsetAndMetadata


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}

CONSUMER_PROTOCOL_TYPE = "consumer"


@attrs.frozen
class JoinGroupResult:
    error: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()   # (member id, group instance id, metadata)
    skip_assignment: bool = False


@attrs.frozen
class SyncGroupResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@attrs.define(eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: Callable[[JoinGroupResult], None] | None = None
    awaiting_sync: Callable[[SyncGroupResult], None] | None = None
    is_new: bool = False
    session_deadline_ms: int = 0

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def fail_pending(self, error: int) -> list[tuple[Callable, JoinGroupResult | SyncGroupResult]]:
        """Answer a JoinGroup or SyncGroup this member is waiting in with ``error`` (Kafka's
        ``maybeInvokeJoinCallback`` / ``maybeInvokeSyncCallback``): the (callback, result) pairs to run outside
        the group's lock; the member waits in neither afterwards."""
        answers: list[tuple[Callable, JoinGroupResult | SyncGroupResult]] = []
        if self.awaiting_join is not None:
            answers.append((self.awaiting_join, JoinGroupResult(error, self.member_id)))
            self.awaiting_join = None
        if self.awaiting_sync is not None:
            answers.append((self.awaiting_sync, SyncGroupResult(error)))
            self.awaiting_sync = None
        return answers

    def protocols(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(d)) for n, d in protocols] == [(n, bytes(d)) for n, d in self.supported_protocols]

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols (its preference order) among ``candidates``."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def to_record(self, protocol: str | None) -> MemberRecord:
        subscription = self.metadata(protocol) if protocol is not None and protocol in self.protocols() else b""
        return MemberRecord(self.member_id, self.group_instance_id, self.client_id, self.client_host,
                            self.rebalance_timeout_ms, self.session_timeout_ms, subscription, self.assignment)


class GroupMetadata:
    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY):
        self.group_id = group_id
        self.state = state
        self.current_state_timestamp = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}     # group instance id -> member id
        self.pending_members: set[str] = set()       # answered MEMBER_ID_REQUIRED, not joined yet
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        # Transactional offset commits not yet committed or aborted: producer id -> offsets (KIP-98).
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = {}
        # Pending ones a plain commit written after them supersedes: producer id -> partitions (see complete_txn).
        self.superseded_txn_offsets: dict[int, set[tuple[str, int]]] = {}
        self.new_member_added = False
        self.join_sequence = 0                       # bumped per rebalance: tells stale join timers apart
        self.initial_join = False                    # this rebalance started from Empty (Kafka's InitialDelayedJoin)

    def __repr__(self) -> str:
        return f"GroupMetadata({self.group_id!r}, {self.state.value}, generation={self.generation_id})"

    # --- state --------------------------------------------------------------------------------------------
    def is_state(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateError(f"group {self.group_id} cannot go from {self.state.value} to {state.value}")
        self.state = state
        self.current_state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # --- transactional offsets (Kafka's GroupMetadata pending offset commits) ---------------------------------
    def add_pending_txn(self, producer_id: int, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        """A transactional offset commit of ``producer_id`` was written: pending until its marker."""
        self.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)
        superseded = self.superseded_txn_offsets.get(producer_id)
        if superseded:
            superseded.difference_update(offsets)    # written after the plain commit: newer again

    def commit_offsets(self, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        """A plain offset commit was written: it is newer than any transactional one still pending."""
        self.offsets.update(offsets)
        for pid, pending in self.pending_txn_offsets.items():
            newer = pending.keys() & offsets.keys()
            if newer:
                self.superseded_txn_offsets.setdefault(pid, set()).update(newer)

    def complete_txn(self, producer_id: int, commit: bool) -> int:
        """The producer's marker: on COMMIT its pending offsets become the committed ones, except where a plain
        commit was written after them (Kafka keeps the newer record: ``completePendingTxnOffsetCommit``); on
        ABORT they are dropped.  Returns how many were committed."""
        pending = self.pending_txn_offsets.pop(producer_id, None) or {}
        superseded = self.superseded_txn_offsets.pop(producer_id, set())
        if not commit:
            return 0
        committed = {tp: o for tp, o in pending.items() if tp not in superseded}
        self.offsets.update(committed)
        return len(committed)

    # --- members ------------------------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def add(self, member: MemberMetadata, join_callback=None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        member.awaiting_join = join_callback
        self.members[member.member_id] = member
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return self.static_members.get(instance_id) if instance_id is not None else None

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Kafka: if the leader did not rejoin, a member that did becomes leader."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join is not None:
            return True
        for m in self.members.values():
            if m.awaiting_join is not None:
                self.leader_id = m.member_id
                return True
        return False

    # --- protocols ----------------------------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        sets = [m.protocols() for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & names)

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol among those all support."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda p: votes[p])

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only); ``None`` when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None if self.members else set()
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics |= consumer_subscription_topics(m.metadata(self.protocol_name))
            except (KeyError, ValueError, struct.error):
                return None
        return topics

    # --- persistence --------------------------------------------------------------------------------------
    def to_record(self) -> GroupRecord:
        return GroupRecord(protocol_type=self.protocol_type or "", generation=self.generation_id,
                           protocol=self.protocol_name, leader=self.leader_id,
                           current_state_timestamp=self.current_state_timestamp,
                           members=tuple(m.to_record(self.protocol_name) for m in self.members.values()))

    @classmethod
    def load(cls, group_id: str, record: GroupRecord, offsets: dict, now_ms: int) -> "GroupMetadata":
        group = cls(group_id, record.current_state_timestamp if record.current_state_timestamp >= 0 else now_ms,
                    GroupState.STABLE if record.members else GroupState.EMPTY)
        group.generation_id = record.generation
        group.protocol_type = record.protocol_type or None
        group.protocol_name = record.protocol
        group.leader_id = record.leader
        for m in record.members:
            member = MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.rebalance_timeout_ms, m.session_timeout_ms, record.protocol_type,
                                    [(record.protocol or "", m.subscription)], assignment=m.assignment)
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.offsets = dict(offsets)
        return group


class IllegalStateError(RuntimeError):
    """A state transition Kafka's state machine does not allow (a coordinator bug)."""


def consumer_subscription_topics(metadata: bytes) -> set[str]:
    """Topics of a consumer protocol Subscription (int16 version, [string topic], ...)."""
    pos = 2
    (count,) = struct.unpack_from(">i", metadata, pos)
    pos += 4
    topics = set()
    for _ in range(max(count, 0)):
        (n,) = struct.unpack_from(">h", metadata, pos)
        pos += 2
        if n < 0 or pos + n > len(metadata):
            raise ValueError("malformed subscription")
        topics.add(bytes(metadata[pos:pos + n]).decode("utf-8"))
        pos += n
    return topics
