"""GroupCoordinator: the classic consumer group protocol (Kafka 3.x's ``kafka.coordinator.group.GroupCoordinator``).

JoinGroup, SyncGroup, Heartbeat, LeaveGroup with static membership (``group.instance.id``), rebalance and
session timeouts; OffsetCommit / OffsetFetch (also for groups that only store offsets: ``assign()`` consumers
commit with generation -1); DescribeGroups, ListGroups, DeleteGroups, OffsetDelete; offset expiration per
``offsets.retention.minutes``.  The order of checks and the error codes follow Kafka's.

Every answer is delivered through a callback (JoinGroup and SyncGroup wait for the rebalance; commits wait for
the ``__consumer_offsets`` append to be replicated).  Callbacks run *outside* the coordinator's lock.

Timers.  Kafka's purgatory operations ``DelayedJoin`` / ``InitialDelayedJoin`` (``delayed_join.py``) and
``DelayedHeartbeat`` (``delayed_heartbeat.py``) run on the injected timer (one ``schedule(name, fn,
delay_ms)``) and call back ``on_expire_*``, which check whether they still apply (the group's rebalance, the
member's session deadline); a rebalance also completes early, as Kafka's ``tryComplete``, when the last expected
member joins.

TxnOffsetCommit (KIP-98): offsets written as a transactional batch of the producer stay pending until the
producer's COMMIT / ABORT marker reaches the group's ``__consumer_offsets`` partition; OffsetFetch with
``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition with one pending (KIP-447).

Deliberate differences from Kafka: one lock for all groups (Kafka locks per group); a committed transactional
offset replaces the stored one even when a plain commit was appended after it (Kafka compares append offsets);
JoinGroup's KIP-814 ``skip_assignment`` is always false; a static member rejoining with changed
metadata triggers a rebalance rather than Kafka's in-place update; no pending-sync timeout (a member that
joined and never sends SyncGroup is removed when its session runs out, not after the rebalance timeout).
"""
from __future__ import annotations

import threading
import time
import uuid
from typing import Callable

import attrs

from kafkatier.coordinator.append_errors import COORDINATOR_APPEND_ERRORS
from kafkatier.coordinator.group.delayed_heartbeat import DelayedHeartbeat
from kafkatier.coordinator.group.delayed_join import DelayedJoin, InitialDelayedJoin, Timer
from kafkatier.coordinator.group.group_metadata import (CONSUMER_PROTOCOL_TYPE, GroupMetadata, GroupState,
                                                         JoinGroupResult, MemberMetadata, SyncGroupResult)
from kafkatier.coordinator.group.group_metadata_manager import (DEFAULT_OFFSETS_TOPIC_PARTITIONS,
                                                                GroupMetadataManager, OffsetsTopicLog)
from kafkatier.coordinator.group.records import OffsetAndMetadata
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors

log = get_logger("coordinator.group")

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@attrs.frozen
class GroupConfig:
    """The broker configs of the group coordinator (Kafka's names and defaults, except the partition count)."""
    offsets_topic_num_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS
    offsets_topic_replication_factor: int = 3
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600000


@attrs.frozen
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str


@attrs.frozen
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@attrs.frozen
class GroupSummary:
    error: int
    group_id: str
    state: str = "Dead"
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[MemberSummary, ...] = ()


@attrs.frozen
class OffsetFetchResult:
    error: int
    offsets: dict          # (topic, partition) -> OffsetAndMetadata | None (None: no committed offset)
    #: (topic, partition) -> error code: UNSTABLE_OFFSET_COMMIT for a partition with a pending transactional
    #: commit when the fetch requires stable offsets (KIP-447)
    partition_errors: dict = attrs.field(factory=dict)


# Append errors as the committer sees them (Kafka's GroupMetadataManager.storeOffsets / storeGroup).
_STORE_ERROR = {
    **COORDINATOR_APPEND_ERRORS,
    Errors.MESSAGE_TOO_LARGE: Errors.INVALID_COMMIT_OFFSET_SIZE,
    Errors.RECORD_LIST_TOO_LARGE: Errors.INVALID_COMMIT_OFFSET_SIZE,
}


def store_error(code: int) -> int:
    if code == 0:
        return 0
    try:
        return int(_STORE_ERROR.get(Errors(code), Errors(code)))
    except ValueError:
        return int(Errors.UNKNOWN_SERVER_ERROR)


class GroupCoordinator:
    def __init__(self, broker_id: int, config: GroupConfig, offsets_log: OffsetsTopicLog, timer: Timer,
                 time_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.broker_id = broker_id
        self.config = config
        self.timer = timer
        self.time_ms = time_ms
        self.manager = GroupMetadataManager(offsets_log, config.offsets_topic_num_partitions, time_ms)
        self._lock = threading.RLock()
        self._active = False

    # --- lifecycle ----------------------------------------------------------------------------------------
    def startup(self) -> None:
        self._active = True
        if self.config.offsets_retention_check_interval_ms > 0:
            self.timer.schedule("delete-expired-group-metadata", self.cleanup_expired_offsets,
                                self.config.offsets_retention_check_interval_ms,
                                self.config.offsets_retention_check_interval_ms)
        log.info("group coordinator started %s", kv(broker=self.broker_id,
                                                   offsets_partitions=self.manager.num_partitions))

    def shutdown(self) -> None:
        with self._lock:
            self._active = False
            answers = [self._unload(p) for p in list(self.manager.owned)]
        for a in answers:
            _run(a)

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    # --- leadership of __consumer_offsets (Kafka's onElection / onResignation) ------------------------------
    def on_election(self, partition: int, epoch: int) -> None:
        """This broker leads ``partition`` from ``epoch`` on: load its groups (asynchronously)."""
        with self._lock:
            current = self.manager.owned.get(partition)
            if current is not None and current >= epoch:
                return
            if current is not None and partition not in self.manager.loading:
                # Still the leader, only a newer leader epoch (e.g. an ISR change): what we hold in memory is
                # what we wrote, so no reload (Kafka keeps its cached groups over the loaded ones too).
                self.manager.owned[partition] = epoch
                return
            self.manager.owned[partition] = epoch
            self.manager.loading.add(partition)
        self.timer.schedule(f"load-groups-{partition}", lambda: self._load(partition, epoch), 0)

    def on_resignation(self, partition: int, epoch: int | None = None) -> None:
        with self._lock:
            current = self.manager.owned.get(partition)
            if current is None or (epoch is not None and epoch >= 0 and current > epoch):
                return
            answers = self._unload(partition)
        _run(answers)

    def _load(self, partition: int, epoch: int) -> None:
        start = self.time_ms()
        try:
            loaded = self.manager.read_partition(partition)
        except Exception as e:  # noqa: BLE001 - lost leadership meanwhile, or the log is gone
            log.warning("cannot load group partition %s", kv(partition=partition, epoch=epoch, reason=e))
            with self._lock:
                if self.manager.owned.get(partition) == epoch:
                    self.manager.loading.discard(partition)
                    self.manager.owned.pop(partition, None)
            return
        now = self.time_ms()
        with self._lock:
            if self.manager.owned.get(partition) != epoch:
                return
            names = set(loaded.groups) | set(loaded.offsets)
            for name in names:
                record = loaded.groups.get(name)
                offsets = loaded.offsets.get(name, {})
                if record is None:
                    group = GroupMetadata(name, now)
                    group.offsets = dict(offsets)
                else:
                    group = GroupMetadata.load(name, record, offsets, now)
                self.manager.groups[name] = group
                for pid, per_group in loaded.pending_txn_offsets.items():
                    if name in per_group:
                        group.pending_txn_offsets[pid] = dict(per_group[name])
                for pid, group_name, tp in loaded.superseded_txn_offsets:
                    if group_name == name:
                        group.superseded_txn_offsets.setdefault(pid, set()).add(tp)
                for m in group.members.values():
                    self._schedule_heartbeat_expiry(group, m, m.session_timeout_ms)
            self.manager.loading.discard(partition)
        log.info("loaded group partition %s", kv(partition=partition, epoch=epoch, groups=len(names),
                                                 skipped=loaded.skipped, ms=now - start))

    def _unload(self, partition: int) -> list:
        self.manager.owned.pop(partition, None)
        self.manager.loading.discard(partition)
        answers = []
        for group in self.manager.groups_of(partition):
            for m in group.members.values():
                answers.extend(m.fail_pending(int(Errors.NOT_COORDINATOR)))
            group.state = GroupState.DEAD
            del self.manager.groups[group.group_id]
        log.info("unloaded group partition %s", kv(partition=partition, groups=len(answers)))
        return answers

    # --- request validation ---------------------------------------------------------------------------------
    def _group_error(self, group_id: str | None, *, load_error: Errors = Errors.COORDINATOR_LOAD_IN_PROGRESS) -> Errors | None:
        if not group_id:
            return Errors.INVALID_GROUP_ID
        if not self._active:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if self.manager.is_loading(group_id):
            return load_error
        if not self.manager.is_local(group_id):
            return Errors.NOT_COORDINATOR
        return None

    # --- JoinGroup ------------------------------------------------------------------------------------------
    def handle_join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                          require_known_member_id: bool, client_id: str, client_host: str,
                          rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]], callback: Callable[[JoinGroupResult], None]) -> None:
        answers: list = []
        with self._lock:
            err = self._group_error(group_id)
            if err is not None:
                answers.append((callback, JoinGroupResult(int(err), member_id)))
            elif not (self.config.group_min_session_timeout_ms <= session_timeout_ms
                      <= self.config.group_max_session_timeout_ms):
                answers.append((callback, JoinGroupResult(int(Errors.INVALID_SESSION_TIMEOUT), member_id)))
            else:
                unknown = member_id == ""
                group = self.manager.groups.get(group_id)
                if group is None and unknown:
                    group = self.manager.groups[group_id] = GroupMetadata(group_id, self.time_ms())
                if group is None:
                    answers.append((callback, JoinGroupResult(int(Errors.UNKNOWN_MEMBER_ID), member_id)))
                elif (len(group.members) >= self.config.group_max_size and not group.has(member_id)
                      and group.static_member_id(group_instance_id) is None):
                    answers.append((callback, JoinGroupResult(int(Errors.GROUP_MAX_SIZE_REACHED), member_id)))
                else:
                    protocols = [(n, bytes(m)) for n, m in protocols]
                    if unknown:
                        self._join_new_member(group, group_instance_id, require_known_member_id, client_id,
                                              client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                              protocols, callback, answers)
                    else:
                        self._join_current_member(group, member_id, group_instance_id, client_id, client_host,
                                                  rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                                  protocols, callback, answers)
                    if group.is_state(GroupState.PREPARING_REBALANCE):
                        self._try_complete_join(group, answers)
        _run(answers)

    def _join_new_member(self, group, instance_id, require_known, client_id, client_host, rebalance_ms, session_ms,
                         protocol_type, protocols, callback, answers) -> None:
        if group.is_state(GroupState.DEAD):
            answers.append((callback, JoinGroupResult(int(Errors.COORDINATOR_NOT_AVAILABLE))))
            return
        if not group.supports_protocols(protocol_type, protocols):
            answers.append((callback, JoinGroupResult(int(Errors.INCONSISTENT_GROUP_PROTOCOL))))
            return
        new_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                self._replace_static_member(group, instance_id, old_id, new_id, rebalance_ms, session_ms,
                                            protocols, callback, answers)
            else:
                self._add_member_and_rebalance(group, new_id, instance_id, client_id, client_host, rebalance_ms,
                                               session_ms, protocol_type, protocols, callback, answers)
        elif require_known:
            group.pending_members.add(new_id)
            DelayedHeartbeat(self, group, None, new_id, self.time_ms() + session_ms, session_ms).schedule(self.timer)
            answers.append((callback, JoinGroupResult(int(Errors.MEMBER_ID_REQUIRED), new_id)))
        else:
            self._add_member_and_rebalance(group, new_id, None, client_id, client_host, rebalance_ms, session_ms,
                                           protocol_type, protocols, callback, answers)

    def _replace_static_member(self, group, instance_id, old_id, new_id, rebalance_ms, session_ms, protocols,
                               callback, answers) -> None:
        old = group.members[old_id]
        answers.extend(old.fail_pending(int(Errors.FENCED_INSTANCE_ID)))   # the old incarnation is fenced
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_ms, session_ms
        log.info("static member rejoined %s", kv(group=group.group_id, instance=instance_id, old=old_id, new=new_id))
        if group.is_state(GroupState.STABLE) and member.matches(protocols):
            # Known static member, same subscription: no rebalance; it gets its stored assignment on SyncGroup.
            self._schedule_heartbeat_expiry(group, member, session_ms)
            self._store_group(group, group.generation_id, answers)
            answers.append((callback, JoinGroupResult(
                0, new_id, group.generation_id, group.protocol_type, group.protocol_name, group.leader_id or "",
                self._member_list(group) if group.is_leader(new_id) else ())))
            return
        member.supported_protocols = protocols
        member.awaiting_join = callback
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return
        self._prepare_rebalance(group, f"static member {instance_id} rejoined with a new member id", answers)

    def _join_current_member(self, group, member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                             protocol_type, protocols, callback, answers) -> None:
        if group.is_state(GroupState.DEAD):
            answers.append((callback, JoinGroupResult(int(Errors.COORDINATOR_NOT_AVAILABLE), member_id)))
            return
        if not group.supports_protocols(protocol_type, protocols):
            answers.append((callback, JoinGroupResult(int(Errors.INCONSISTENT_GROUP_PROTOCOL), member_id)))
            return
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, member_id, instance_id, client_id, client_host, rebalance_ms,
                                           session_ms, protocol_type, protocols, callback, answers)
            return
        err = self._instance_error(group, member_id, instance_id)
        if err is not None:
            answers.append((callback, JoinGroupResult(int(err), member_id)))
            return
        if not group.has(member_id):
            answers.append((callback, JoinGroupResult(int(Errors.UNKNOWN_MEMBER_ID), member_id)))
            return
        member = group.members[member_id]
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, rebalance_ms, session_ms, protocols, callback, answers)
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # The member missed the JoinGroup answer: send it again.
                answers.append((callback, self._join_result(group, member_id)))
            else:
                self._update_member_and_rebalance(group, member, rebalance_ms, session_ms, protocols, callback,
                                                  answers)
        elif group.is_state(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                self._update_member_and_rebalance(group, member, rebalance_ms, session_ms, protocols, callback,
                                                  answers)
            else:
                answers.append((callback, self._join_result(group, member_id)))
        else:
            answers.append((callback, JoinGroupResult(int(Errors.UNKNOWN_MEMBER_ID), member_id)))

    def _member_error(self, group: GroupMetadata, generation_id: int, member_id: str,
                      instance_id: str | None) -> Errors | None:
        """The member is current (not fenced, known) and of the group's generation (else ILLEGAL_GENERATION)."""
        err = self._instance_error(group, member_id, instance_id)
        if err is not None:
            return err
        if not group.has(member_id):
            return Errors.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        return None

    def _instance_error(self, group: GroupMetadata, member_id: str, instance_id: str | None) -> Errors | None:
        """Kafka's static-membership fencing: an instance id bound to another member id is fenced."""
        if instance_id is None:
            return None
        known = group.static_member_id(instance_id)
        if known is None:
            return Errors.UNKNOWN_MEMBER_ID
        if known != member_id:
            log.info("fenced static member %s", kv(group=group.group_id, instance=instance_id, member=member_id,
                                                   current=known))
            return Errors.FENCED_INSTANCE_ID
        return None

    def _join_result(self, group: GroupMetadata, member_id: str) -> JoinGroupResult:
        return JoinGroupResult(0, member_id, group.generation_id, group.protocol_type, group.protocol_name,
                               group.leader_id or "", self._member_list(group) if group.is_leader(member_id) else ())

    @staticmethod
    def _member_list(group: GroupMetadata) -> tuple:
        return tuple((m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                     for m in group.members.values())

    def _add_member_and_rebalance(self, group, member_id, instance_id, client_id, client_host, rebalance_ms,
                                  session_ms, protocol_type, protocols, callback, answers) -> None:
        member = MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                                protocol_type, protocols, is_new=True)
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        self._schedule_heartbeat_expiry(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}", answers)

    def _update_member_and_rebalance(self, group, member, rebalance_ms, session_ms, protocols, callback,
                                     answers) -> None:
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_ms, session_ms
        member.supported_protocols = protocols
        member.awaiting_join = callback
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}", answers)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str, answers: list) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason, answers)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str, answers: list) -> None:
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            self._reset_assignments(group, Errors.REBALANCE_IN_PROGRESS, answers)
        initial = group.is_state(GroupState.EMPTY)
        group.initial_join = initial
        group.transition_to(GroupState.PREPARING_REBALANCE, self.time_ms())
        group.join_sequence += 1
        log.info("preparing to rebalance %s", kv(group=group.group_id, generation=group.generation_id,
                                                 reason=reason))
        if initial:
            configured = self.config.group_initial_rebalance_delay_ms
            delay = min(configured, group.max_rebalance_timeout_ms())
            InitialDelayedJoin(self, group, configured, delay,
                               max(group.max_rebalance_timeout_ms() - delay, 0)).schedule(self.timer)
        else:
            DelayedJoin(self, group, group.max_rebalance_timeout_ms()).schedule(self.timer)

    def on_expire_initial_join(self, op: InitialDelayedJoin) -> None:
        answers: list = []
        with self._lock:
            if not op.is_current():
                return
            extension = op.extension()
            if extension is not None:
                extension.schedule(self.timer)
                return
            self._complete_join(op.group, answers)
        _run(answers)

    def on_expire_join(self, op: DelayedJoin) -> None:
        answers: list = []
        with self._lock:
            if op.is_current():
                self._complete_join(op.group, answers)
        _run(answers)

    def _try_complete_join(self, group: GroupMetadata, answers: list) -> None:
        """Kafka's DelayedJoin.tryComplete: complete as soon as every known member has rejoined (not during the
        initial delay of a new group, which waits for more members)."""
        if group.initial_join and self.config.group_initial_rebalance_delay_ms > 0:
            return
        if group.all_members_joined():
            self._complete_join(group, answers)

    def _complete_join(self, group: GroupMetadata, answers: list) -> None:
        group.join_sequence += 1       # the pending timer of this rebalance no longer applies
        for m in group.not_yet_rejoined():
            log.info("member did not rejoin in time %s", kv(group=group.group_id, member=m.member_id))
            group.remove(m.member_id)
        if group.is_state(GroupState.DEAD):
            return
        if group.members and not group.maybe_elect_new_joined_leader():
            return
        group.init_next_generation(self.time_ms())
        log.info("rebalance completed %s", kv(group=group.group_id, generation=group.generation_id,
                                              protocol=group.protocol_name, members=len(group.members),
                                              state=group.state.value))
        if group.is_state(GroupState.EMPTY):
            self._store_group(group, group.generation_id, answers)
            return
        for m in group.members.values():
            if m.awaiting_join is not None:
                answers.append((m.awaiting_join, self._join_result(group, m.member_id)))
                m.awaiting_join = None
                m.is_new = False
                self._schedule_heartbeat_expiry(group, m, m.session_timeout_ms)

    # --- SyncGroup ------------------------------------------------------------------------------------------
    def handle_sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                          protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
                          callback: Callable[[SyncGroupResult], None]) -> None:
        answers: list = []
        with self._lock:
            err = self._group_error(group_id, load_error=Errors.REBALANCE_IN_PROGRESS)
            group = self.manager.groups.get(group_id) if err is None else None
            if err is None and group is None:
                err = Errors.UNKNOWN_MEMBER_ID
            if err is None:
                err = self._sync_error(group, generation_id, member_id, group_instance_id, protocol_type,
                                       protocol_name)
            if err is not None:
                answers.append((callback, SyncGroupResult(int(err))))
            elif group.is_state(GroupState.COMPLETING_REBALANCE):
                member = group.members[member_id]
                member.awaiting_sync = callback
                self._heartbeat(group, member)
                if group.is_leader(member_id):
                    full = {m: bytes(assignments.get(m, b"")) for m in group.members}
                    for m, a in full.items():
                        group.members[m].assignment = a
                    self._store_group(group, group.generation_id, answers, assignment=full)
            else:  # Stable
                member = group.members[member_id]
                self._heartbeat(group, member)
                answers.append((callback, SyncGroupResult(0, group.protocol_type, group.protocol_name,
                                                          member.assignment)))
        _run(answers)

    def _sync_error(self, group, generation_id, member_id, instance_id, protocol_type, protocol_name) -> Errors | None:
        if group.is_state(GroupState.DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        err = self._member_error(group, generation_id, member_id, instance_id)
        if err is not None:
            return err
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return Errors.INCONSISTENT_GROUP_PROTOCOL
        if group.is_state(GroupState.EMPTY):
            return Errors.UNKNOWN_MEMBER_ID
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return Errors.REBALANCE_IN_PROGRESS
        return None

    def _reset_assignments(self, group: GroupMetadata, error: Errors, answers: list) -> None:
        for m in group.members.values():
            m.assignment = b""
            if m.awaiting_sync is not None:
                answers.append((m.awaiting_sync, SyncGroupResult(int(error))))
                m.awaiting_sync = None

    def _store_group(self, group: GroupMetadata, generation: int, answers: list,
                     assignment: dict[str, bytes] | None = None) -> None:
        """Write the group (members and assignment) to ``__consumer_offsets``; on success a completing
        rebalance becomes Stable and the members waiting in SyncGroup get their assignment."""
        entry = self.manager.group_entry(group)

        def stored(code: int) -> None:
            out: list = []
            with self._lock:
                if self.manager.groups.get(group.group_id) is not group or group.generation_id != generation:
                    return
                if assignment is None or not group.is_state(GroupState.COMPLETING_REBALANCE):
                    if code:
                        log.warning("storing group metadata failed %s", kv(group=group.group_id, error=code))
                    return
                if code:
                    log.warning("storing the assignment failed %s", kv(group=group.group_id, error=code))
                    self._reset_assignments(group, Errors(store_error(code)), out)
                    self._maybe_prepare_rebalance(group, "storing the assignment failed", out)
                else:
                    group.transition_to(GroupState.STABLE, self.time_ms())
                    for m in group.members.values():
                        if m.awaiting_sync is not None:
                            out.append((m.awaiting_sync, SyncGroupResult(0, group.protocol_type,
                                                                         group.protocol_name, m.assignment)))
                            m.awaiting_sync = None
                    log.info("group stable %s", kv(group=group.group_id, generation=generation,
                                                   members=len(group.members)))
            _run(out)
        answers.append((lambda _: self.manager.store(group.group_id, [entry], stored), None))

    # --- Heartbeat ------------------------------------------------------------------------------------------
    def handle_heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                         generation_id: int) -> int:
        with self._lock:
            err = self._group_error(group_id)
            if err is Errors.COORDINATOR_LOAD_IN_PROGRESS:
                return 0       # Kafka: the group is loading, answer blindly
            if err is not None:
                return int(err)
            group = self.manager.groups.get(group_id)
            if group is None or group.is_state(GroupState.EMPTY) and not group.has(member_id):
                return int(Errors.UNKNOWN_MEMBER_ID)
            if group.is_state(GroupState.DEAD):
                return int(Errors.COORDINATOR_NOT_AVAILABLE)
            err = self._member_error(group, generation_id, member_id, group_instance_id)
            if err is not None:
                return int(err)
            if group.is_state(GroupState.EMPTY):
                return int(Errors.UNKNOWN_MEMBER_ID)
            self._heartbeat(group, group.members[member_id])
            if group.is_state(GroupState.PREPARING_REBALANCE):
                return int(Errors.REBALANCE_IN_PROGRESS)
            return 0

    def _heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._schedule_heartbeat_expiry(group, member, member.session_timeout_ms)

    def _schedule_heartbeat_expiry(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int) -> None:
        deadline = self.time_ms() + timeout_ms
        member.session_deadline_ms = deadline
        DelayedHeartbeat(self, group, member, member.member_id, deadline, timeout_ms).schedule(self.timer)

    def on_expire_heartbeat(self, op: DelayedHeartbeat) -> None:
        """A member silent for a whole session is removed; a pending member id is dropped."""
        answers: list = []
        group = op.group
        with self._lock:
            if op.is_pending:
                if op.member_id in group.pending_members:
                    group.pending_members.discard(op.member_id)
                    if group.is_state(GroupState.PREPARING_REBALANCE):
                        self._try_complete_join(group, answers)
            else:
                member = op.member
                if member.session_deadline_ms != op.deadline_ms or group.members.get(member.member_id) is not member:
                    return
                if (member.awaiting_join is not None or member.awaiting_sync is not None) and not member.is_new:
                    # Waiting in JoinGroup (the rebalance timeout governs it) or in SyncGroup for the leader's
                    # assignment and its write (the leader's own session governs that): clients do not heartbeat
                    # meanwhile, so a slow rebalance must not expel them (Kafka's hasSatisfiedHeartbeat).
                    return
                log.info("member session expired %s", kv(group=group.group_id, member=member.member_id,
                                                         session_timeout_ms=member.session_timeout_ms))
                self._remove_member_and_update_group(group, member, answers)
        _run(answers)

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, answers: list) -> None:
        answers.extend(member.fail_pending(int(Errors.UNKNOWN_MEMBER_ID)))
        group.remove(member.member_id)
        member.session_deadline_ms = -1
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"removing member {member.member_id}", answers)
        elif group.is_state(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, answers)

    # --- LeaveGroup -----------------------------------------------------------------------------------------
    def handle_leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """``leaving``: (member id, group instance id) pairs.  Returns (top-level error, error per member)."""
        answers: list = []
        with self._lock:
            err = self._group_error(group_id)
            if err is not None:
                return int(err), [int(err)] * len(leaving)
            group = self.manager.groups.get(group_id)
            if group is None or group.is_state(GroupState.DEAD):
                code = int(Errors.UNKNOWN_MEMBER_ID if group is None else Errors.COORDINATOR_NOT_AVAILABLE)
                return code, [code] * len(leaving)
            out = []
            for member_id, instance_id in leaving:
                if instance_id is not None:
                    known = group.static_member_id(instance_id)
                    if known is None:
                        out.append(int(Errors.UNKNOWN_MEMBER_ID))
                        continue
                    if member_id and member_id != known:
                        out.append(int(Errors.FENCED_INSTANCE_ID))
                        continue
                    member_id = known
                if member_id in group.pending_members:
                    group.pending_members.discard(member_id)
                    if group.is_state(GroupState.PREPARING_REBALANCE):
                        self._try_complete_join(group, answers)
                    out.append(0)
                    continue
                member = group.members.get(member_id)
                if member is None:
                    out.append(int(Errors.UNKNOWN_MEMBER_ID))
                    continue
                log.info("member left %s", kv(group=group_id, member=member_id, instance=instance_id))
                self._remove_member_and_update_group(group, member, answers)
                out.append(0)
        _run(answers)
        return 0, out

    # --- offsets ---------------------------------------------------------------------------------------------
    def handle_commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                              offsets: dict[tuple[str, int], OffsetAndMetadata],
                              callback: Callable[[dict], None]) -> None:
        """``callback({(topic, partition): error_code})`` once stored (or refused)."""
        answers: list = []
        with self._lock:
            err = self._group_error(group_id)
            if err is None:
                group = self.manager.groups.get(group_id)
                if group is None:
                    if generation_id < 0:    # a group that only stores offsets (assign() consumers)
                        group = self.manager.groups[group_id] = GroupMetadata(group_id, self.time_ms())
                    else:
                        err = Errors.ILLEGAL_GENERATION
                if err is None:
                    err = self._commit_error(group, member_id, group_instance_id, generation_id)
            if err is not None:
                answers.append((callback, {tp: int(err) for tp in offsets}))
            else:
                if group.has(member_id):
                    self._heartbeat(group, group.members[member_id])
                self._store_offsets(group, offsets, callback, answers)
        _run(answers)

    def _commit_error(self, group, member_id, instance_id, generation_id) -> Errors | None:
        if group.is_state(GroupState.DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        err = self._instance_error(group, member_id, instance_id)
        if err is not None:
            return err
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            return None
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            return Errors.REBALANCE_IN_PROGRESS
        if not group.has(member_id):
            return Errors.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        return None

    def _store_offsets(self, group: GroupMetadata, offsets: dict, callback, answers: list) -> None:
        result: dict[tuple[str, int], int] = {}
        accepted = {}
        for tp, o in offsets.items():
            if o.metadata is not None and len(o.metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                result[tp] = int(Errors.OFFSET_METADATA_TOO_LARGE)
            else:
                accepted[tp] = o
        if not accepted:
            answers.append((callback, result))
            return
        entries = [self.manager.offset_entry(group.group_id, tp, o) for tp, o in accepted.items()]

        def stored(code: int) -> None:
            err = store_error(code)
            with self._lock:
                if err == 0 and self.manager.groups.get(group.group_id) is group:
                    group.commit_offsets(accepted)
                elif err:
                    log.warning("offset commit failed %s", kv(group=group.group_id, error=code))
            for tp in accepted:
                result[tp] = err
            callback(result)
        answers.append((lambda _: self.manager.store(group.group_id, entries, stored), None))

    # --- transactional offsets (KIP-98) ----------------------------------------------------------------------
    def handle_txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                  group_instance_id: str | None, generation_id: int,
                                  offsets: dict[tuple[str, int], OffsetAndMetadata],
                                  callback: Callable[[dict], None], transactional_id: str | None = None) -> None:
        """TxnOffsetCommit (Kafka's ``handleTxnCommitOffsets``): the offsets are written as a transactional batch
        of the producer and stay pending (invisible to OffsetFetch) until its marker commits or aborts them
        (:meth:`on_transaction_completed`).  ``callback({(topic, partition): error_code})``.

        First (KIP-890 part 1, with ``transactional_id``) the producer's coordinator confirms that the group's
        partition is in the producer's ongoing transaction: a commit of a fenced epoch answers
        INVALID_PRODUCER_EPOCH, one outside any transaction INVALID_TXN_STATE, instead of opening a transaction
        on ``__consumer_offsets`` that no marker would ever end (its offsets pending for good)."""
        with self._lock:
            err = self._group_error(group_id)
        if err is not None:
            callback({tp: int(err) for tp in offsets})
            return

        def verified(code: int, guard: object | None) -> None:
            if code:
                log.info("transactional offset commit refused by verification %s",
                         kv(group=group_id, producer_id=producer_id, producer_epoch=producer_epoch, error=code))
                callback({tp: store_error(code) for tp in offsets})
                return
            self._txn_commit_offsets(group_id, producer_id, producer_epoch, member_id, group_instance_id,
                                     generation_id, offsets, callback, guard)
        self.manager.verify_transaction(group_id, transactional_id, producer_id, producer_epoch, verified)

    def _txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                            group_instance_id: str | None, generation_id: int,
                            offsets: dict[tuple[str, int], OffsetAndMetadata], callback: Callable[[dict], None],
                            verification_guard: object | None) -> None:
        answers: list = []
        with self._lock:
            err = self._group_error(group_id)
            group = None
            if err is None:
                group = self.manager.groups.get(group_id)
                if group is None:
                    group = self.manager.groups[group_id] = GroupMetadata(group_id, self.time_ms())
                err = self._txn_commit_error(group, member_id, group_instance_id, generation_id)
            if err is not None:
                answers.append((callback, {tp: int(err) for tp in offsets}))
            else:
                too_large = {tp for tp, o in offsets.items() if o.metadata is not None and len(
                    o.metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes}
                accepted = {tp: o for tp, o in offsets.items() if tp not in too_large}
                result = {tp: int(Errors.OFFSET_METADATA_TOO_LARGE) for tp in too_large}
                if not accepted:
                    answers.append((callback, result))
                else:
                    entries = [self.manager.offset_entry(group.group_id, tp, o) for tp, o in accepted.items()]

                    def stored(code: int) -> None:
                        e = store_error(code)
                        with self._lock:
                            if e == 0 and self.manager.groups.get(group.group_id) is group:
                                group.add_pending_txn(producer_id, accepted)
                            elif e:
                                log.warning("transactional offset commit failed %s",
                                            kv(group=group.group_id, producer_id=producer_id, error=code))
                        callback({**result, **{tp: e for tp in accepted}})
                    answers.append((lambda _: self.manager.store_transactional(
                        group.group_id, producer_id, producer_epoch, entries, stored, verification_guard), None))
        _run(answers)

    def _txn_commit_error(self, group, member_id, instance_id, generation_id) -> Errors | None:
        """Kafka's ``validateOffsetCommit`` with ``isTransactional``: without member information (older request
        versions) the commit is allowed; with it, the member must be current (FENCED_INSTANCE_ID,
        UNKNOWN_MEMBER_ID) and of the group's generation (ILLEGAL_GENERATION: KIP-447's fencing of a zombie
        after a rebalance).  Unlike a plain OffsetCommit, a group completing its rebalance is no reason to refuse."""
        if group.is_state(GroupState.DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            return None
        if generation_id < 0 and not member_id and instance_id is None:
            return None     # no member information: allowed for transactional commits (Kafka's rule)
        err = self._member_error(group, generation_id, member_id, instance_id)
        if err is not None:
            return err
        return None

    def on_transaction_completed(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT / ABORT marker of ``producer_id`` was written to ``__consumer_offsets-<partition>``: its
        pending offsets become committed, or are dropped (Kafka's ``scheduleHandleTxnCompletion``)."""
        with self._lock:
            moved = 0
            for group in self.manager.groups_of(partition):
                moved += group.complete_txn(producer_id, commit)
        if moved:
            log.info("transactional offsets committed %s", kv(partition=partition, producer_id=producer_id,
                                                              offsets=moved))

    def handle_fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                             require_stable: bool = False) -> OffsetFetchResult:
        """Committed offsets of ``partitions`` (all of the group's when ``None``).  ``require_stable`` (KIP-447):
        a partition with a transactional commit not yet committed or aborted answers UNSTABLE_OFFSET_COMMIT."""
        with self._lock:
            err = self._group_error(group_id)
            if err is not None:
                return OffsetFetchResult(int(err), {})
            group = self.manager.groups.get(group_id)
            stored = dict(group.offsets) if group is not None else {}
            pending = {tp for per in group.pending_txn_offsets.values() for tp in per} \
                if group is not None and require_stable else set()
        result = stored if partitions is None else {tp: stored.get(tp) for tp in partitions}
        unstable = {tp: int(Errors.UNSTABLE_OFFSET_COMMIT) for tp in (partitions if partitions is not None
                                                                      else pending) if tp in pending}
        if partitions is None:
            result = {**result, **{tp: None for tp in unstable if tp not in result}}
        return OffsetFetchResult(0, result, unstable)

    # --- admin: Describe / List / Delete groups, OffsetDelete ------------------------------------------------
    def handle_describe_group(self, group_id: str) -> GroupSummary:
        with self._lock:
            err = self._group_error(group_id)
            if err is not None:
                return GroupSummary(int(err), group_id)
            group = self.manager.groups.get(group_id)
            if group is None:
                return GroupSummary(0, group_id)
            stable = group.is_state(GroupState.STABLE)
            members = tuple(MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                          m.metadata(group.protocol_name) if stable and group.protocol_name in m.protocols() else b"",
                                          m.assignment if stable else b"") for m in group.members.values())
            return GroupSummary(0, group_id, group.state.value, group.protocol_type or "",
                                group.protocol_name or "" if stable else "", members)

    def handle_list_groups(self, states: set[str] | None = None) -> tuple[int, list[GroupOverview]]:
        with self._lock:
            err = int(Errors.COORDINATOR_LOAD_IN_PROGRESS) if self.manager.any_loading() else 0
            out = [GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
                   for g in self.manager.groups.values()
                   if not g.is_state(GroupState.DEAD) and (not states or g.state.value in states)]
        return err, sorted(out, key=lambda o: o.group_id)

    def handle_delete_groups(self, group_ids: list[str], callback: Callable[[dict[str, int]], None]) -> None:
        answers: list = []
        result: dict[str, int] = {}
        pending: list[str] = []
        with self._lock:
            for gid in group_ids:
                err = self._group_error(gid)
                group = self.manager.groups.get(gid) if err is None else None
                if err is None and (group is None or group.is_state(GroupState.DEAD)):
                    err = Errors.GROUP_ID_NOT_FOUND
                if err is None and not group.is_state(GroupState.EMPTY):
                    err = Errors.NON_EMPTY_GROUP
                if err is not None:
                    result[gid] = int(err)
                    continue
                entries = [self.manager.offset_entry(gid, tp, None) for tp in group.offsets]
                entries.append(self.manager.group_tombstone(gid))
                group.transition_to(GroupState.DEAD, self.time_ms())
                del self.manager.groups[gid]
                pending.append(gid)
                log.info("deleting group %s", kv(group=gid, offsets=len(group.offsets)))
                answers.append((lambda ents, g=gid: self.manager.store(g, ents, lambda code, g=g: done(g, code)),
                                entries))
            remaining = [len(pending)]
        lock = threading.Lock()

        def done(gid: str, code: int) -> None:
            result[gid] = store_error(code)
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                callback(result)
        if not pending:
            answers.append((callback, result))
        _run(answers)

    def handle_delete_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                              callback: Callable[[int, dict], None]) -> None:
        """Kafka's OffsetDelete: ``callback(top_level_error, {tp: error})``."""
        answers: list = []
        with self._lock:
            err = self._group_error(group_id)
            group = self.manager.groups.get(group_id) if err is None else None
            if err is None and (group is None or group.is_state(GroupState.DEAD)):
                err = Errors.GROUP_ID_NOT_FOUND
            if err is not None:
                answers.append((lambda _: callback(int(err), {}), None))
            else:
                subscribed = set() if group.is_state(GroupState.EMPTY) else group.subscribed_topics()
                if subscribed is None and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                    answers.append((lambda _: callback(int(Errors.NON_EMPTY_GROUP), {}), None))
                else:
                    result = {}
                    removed = []
                    for tp in partitions:
                        if subscribed is None or tp[0] in subscribed:
                            result[tp] = int(Errors.GROUP_SUBSCRIBED_TO_TOPIC)
                        else:
                            result[tp] = 0
                            if group.offsets.pop(tp, None) is not None:
                                removed.append(tp)
                    if removed:
                        entries = [self.manager.offset_entry(group_id, tp, None) for tp in removed]
                        answers.append((lambda _: self.manager.store(
                            group_id, entries, lambda code: callback(store_error(code), result)), None))
                    else:
                        answers.append((lambda _: callback(0, result), None))
        _run(answers)

    # --- offset expiration ------------------------------------------------------------------------------------
    def cleanup_expired_offsets(self) -> int:
        """Kafka's ``cleanupGroupMetadata``: drop offsets past ``offsets.retention.minutes`` (for an Empty group
        counted from when it became empty; for an active consumer group only of topics it no longer subscribes
        to, from the commit); a group left Empty with no offsets is deleted.  Returns offsets removed."""
        retention = self.config.offsets_retention_minutes * 60000
        now = self.time_ms()
        writes = []
        removed = 0
        with self._lock:
            for group in list(self.manager.groups.values()):
                if not self.manager.is_local(group.group_id):
                    continue
                if group.is_state(GroupState.EMPTY):
                    expired = [tp for tp, o in group.offsets.items() if _expired(o, now, retention,
                               max(group.current_state_timestamp, o.commit_timestamp))]
                elif group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.is_state(GroupState.STABLE):
                    subscribed = group.subscribed_topics() or set()
                    expired = [tp for tp, o in group.offsets.items()
                               if tp[0] not in subscribed and _expired(o, now, retention, o.commit_timestamp)]
                else:
                    expired = []
                entries = [self.manager.offset_entry(group.group_id, tp, None) for tp in expired]
                for tp in expired:
                    del group.offsets[tp]
                removed += len(expired)
                if group.is_state(GroupState.EMPTY) and not group.offsets and not group.members:
                    group.transition_to(GroupState.DEAD, now)
                    del self.manager.groups[group.group_id]
                    entries.append(self.manager.group_tombstone(group.group_id))
                if entries:
                    writes.append((group.group_id, entries))
        for gid, entries in writes:
            self.manager.store(gid, entries, lambda code, gid=gid: code and log.warning(
                "writing expired offsets' tombstones failed %s", kv(group=gid, error=code)))
        if removed:
            log.info("removed expired offsets %s", kv(count=removed))
        return removed


def _expired(o: OffsetAndMetadata, now: int, retention_ms: int, base_ms: int) -> bool:
    if o.expire_timestamp is not None:
        return now >= o.expire_timestamp
    return now >= base_ms + retention_ms


def _run(answers: list) -> None:
    """Deliver answers collected under the lock: ``(callback, value)`` pairs, in order."""
    for callback, value in answers:
        try:
            callback(value)
        except Exception:  # noqa: BLE001 - one broken callback must not stop the others
            log.exception("group coordinator callback failed")
