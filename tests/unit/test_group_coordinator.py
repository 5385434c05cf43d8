"""GroupCoordinator alone: a fake ``__consumer_offsets`` log and a manual timer (unit test of one class)."""
from __future__ import annotations

import pytest

from kafkatier.coordinator.group import records
from kafkatier.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from kafkatier.coordinator.group.records import OffsetAndMetadata
from kafkatier.log.record_batch import end_transaction_marker
from kafkatier.protocol.errors import Errors
from tests.unit.fakes import ManualTimer

SESSION, REBALANCE = 10000, 30000


class FakeOffsetsLog:
    def __init__(self) -> None:
        self.data: dict[int, list[bytes]] = {}
        self.fail_with = 0
        self.verify_with = 0           # what the producer's coordinator answers a KIP-890 verification
        self.verified: list[tuple] = []
        self.guards: list = []         # the guard each append carried

    def append(self, partition, records_, callback, verification_guard=None):
        if not self.fail_with:
            self.data.setdefault(partition, []).append(records_)
            self.guards.append(verification_guard)
        callback(self.fail_with)

    def verify_transaction(self, partition, transactional_id, producer_id, producer_epoch, callback):
        self.verified.append((partition, transactional_id, producer_id, producer_epoch))
        callback(self.verify_with, ("guard", producer_id))

    def read(self, partition, offset, max_bytes):
        # Re-number the batches as a log would.
        from kafkatier.log.record_batch import rewrite_base_offset
        out, next_offset = bytearray(), 0
        for chunk in self.data.get(partition, []):
            buf = bytearray(chunk)
            rewrite_base_offset(buf, 0, next_offset)
            from kafka.record.memory_records import MemoryRecords
            batch = MemoryRecords(bytes(buf)).next_batch()
            next_offset += batch.last_offset_delta + 1
            out += buf
        return (bytes(out) if offset == 0 else b""), next_offset


def started_coordinator(partitions: int = 4, initial_rebalance_delay_ms: int = 0, log=None):
    """A started coordinator of broker 1, leading every ``__consumer_offsets`` partition (their loads done), on a
    manual timer: ``(coordinator, timer, log)``."""
    timer, log = ManualTimer(), log if log is not None else FakeOffsetsLog()
    coord = GroupCoordinator(1, GroupConfig(offsets_topic_num_partitions=partitions,
                                            group_initial_rebalance_delay_ms=initial_rebalance_delay_ms),
                             log, timer, time_ms=timer.time_ms)
    coord.startup()
    for p in range(partitions):
        coord.on_election(p, 0)
    timer.advance(0)
    return coord, timer, log


@pytest.fixture
def env():
    return started_coordinator()


def join(coord, group, member_id="", instance=None, protocols=(("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t"),)):
    out = []
    coord.handle_join_group(group, member_id, instance, True, "client", "/127.0.0.1", REBALANCE, SESSION, "consumer",
                            list(protocols), out.append)
    return out


def sync(coord, group, generation, member_id, assignments=None):
    out = []
    coord.handle_sync_group(group, generation, member_id, None, "consumer", "range", assignments or {}, out.append)
    return out


def form_group(coord, timer, group, n):
    ids = []
    for _ in range(n):
        r = join(coord, group)
        assert r[0].error == Errors.MEMBER_ID_REQUIRED
        ids.append(r[0].member_id)
    pending = [join(coord, group, m) for m in ids]
    results = [p[0] for p in pending if p]
    assert len(results) == n, "the join completes once every member joined"
    leader = next(r for r in results if r.members)
    generation = leader.generation_id
    outs = {r.member_id: sync(coord, group, generation, r.member_id, None if r.members == () else
                              {m: m.encode() for m, _, _ in leader.members}) for r in results}
    return ids, generation, outs


def test_java_hash_partition():
    assert records.java_string_hash("hello") == 99162322
    assert records.java_string_hash("") == 0
    assert records.partition_for("hello", 50) == 99162322 % 50
    assert records.partition_for("polygenelubricants", 50) == 0   # hashCode == Integer.MIN_VALUE -> Utils.abs = 0
    # a negative hash: Utils.abs (Math.abs), not the partitioner's n & 0x7fffffff (which would give 36)
    assert records.java_string_hash("my-group") == -1906497762
    assert records.partition_for("my-group", 50) == 12


def test_three_members_form_a_stable_group_and_each_gets_its_assignment(env):
    coord, timer, _ = env
    ids, gen, outs = form_group(coord, timer, "g", 3)
    assert gen == 1
    for m in ids:
        assert outs[m][0].error == 0 and outs[m][0].assignment == m.encode()
    assert coord.handle_describe_group("g").state == "Stable"
    assert coord.handle_heartbeat("g", ids[0], None, gen) == 0
    assert coord.handle_heartbeat("g", ids[0], None, gen + 1) == Errors.ILLEGAL_GENERATION
    assert coord.handle_heartbeat("g", "nobody", None, gen) == Errors.UNKNOWN_MEMBER_ID


def test_session_expiry_rebalances_the_rest(env):
    coord, timer, _ = env
    ids, gen, _ = form_group(coord, timer, "g", 3)
    for _ in range(4):            # two keep heartbeating, the third is silent
        timer.advance(3000)
        for m in ids[:2]:
            coord.handle_heartbeat("g", m, None, gen)
    assert coord.handle_heartbeat("g", ids[0], None, gen) == Errors.REBALANCE_IN_PROGRESS
    rejoins = [join(coord, "g", m) for m in ids[:2]]
    results = [r[0] for r in rejoins if r]
    assert len(results) == 2 and {r.generation_id for r in results} == {gen + 1}
    assert len(next(r for r in results if r.members).members) == 2


def test_leave_group_and_fenced_generation_commit(env):
    coord, timer, _ = env
    ids, gen, _ = form_group(coord, timer, "g", 2)
    assert coord.handle_leave_group("g", [(ids[1], None)]) == (0, [0])
    assert coord.handle_leave_group("g", [("ghost", None)]) == (0, [Errors.UNKNOWN_MEMBER_ID])
    out = []
    coord.handle_commit_offsets("g", ids[0], None, gen, {("t", 0): OffsetAndMetadata(5)}, out.append)
    assert out == [{("t", 0): Errors.REBALANCE_IN_PROGRESS}] or out == [{("t", 0): 0}]
    r = join(coord, "g", ids[0])[0]
    assert r.generation_id == gen + 1
    out = []
    coord.handle_commit_offsets("g", ids[0], None, gen, {("t", 0): OffsetAndMetadata(5)}, out.append)
    assert out == [{("t", 0): Errors.REBALANCE_IN_PROGRESS}]      # CompletingRebalance
    sync(coord, "g", gen + 1, ids[0], {ids[0]: b"a"})
    out = []
    coord.handle_commit_offsets("g", ids[0], None, gen, {("t", 0): OffsetAndMetadata(5)}, out.append)
    assert out == [{("t", 0): Errors.ILLEGAL_GENERATION}]
    coord.handle_commit_offsets("g", "stranger", None, gen + 1, {("t", 0): OffsetAndMetadata(5)}, out.append)
    assert out[-1] == {("t", 0): Errors.UNKNOWN_MEMBER_ID}
    coord.handle_commit_offsets("g", ids[0], None, gen + 1, {("t", 0): OffsetAndMetadata(7)}, out.append)
    assert out[-1] == {("t", 0): 0}
    assert coord.handle_fetch_offsets("g", [("t", 0), ("t", 1)]).offsets == {("t", 0): OffsetAndMetadata(7), ("t", 1): None}


def test_simple_consumer_commits_and_offsets_survive_a_reload(env):
    coord, timer, log = env
    out = []
    coord.handle_commit_offsets("simple", "", None, -1, {("t", 0): OffsetAndMetadata(42, 3, "m", timer.now)},
                                out.append)
    assert out == [{("t", 0): 0}]
    coord.handle_commit_offsets("simple", "", None, -1, {("t", 1): OffsetAndMetadata(1, -1, "x" * 5000, timer.now)},
                                out.append)
    assert out[-1] == {("t", 1): Errors.OFFSET_METADATA_TOO_LARGE}
    ids, gen, _ = form_group(coord, timer, "g", 2)
    # A new coordinator (another broker) loads the same partitions.
    timer2 = ManualTimer()
    other = GroupCoordinator(2, coord.config, log, timer2, time_ms=timer2.time_ms)
    other.startup()
    for p in range(4):
        other.on_election(p, 1)
    assert other.handle_fetch_offsets("simple", [("t", 0)]).error == Errors.COORDINATOR_LOAD_IN_PROGRESS
    timer2.advance(0)
    assert other.handle_fetch_offsets("simple", [("t", 0)]).offsets[("t", 0)].offset == 42
    summary = other.handle_describe_group("g")
    assert summary.state == "Stable" and {m.member_id for m in summary.members} == set(ids)
    assert other.handle_heartbeat("g", ids[0], None, gen) == 0   # members carry on with the new coordinator
    coord.on_resignation(coord.partition_for("g"), 1)
    assert coord.handle_heartbeat("g", ids[0], None, gen) == Errors.NOT_COORDINATOR


def test_static_member_rejoins_without_rebalance_and_old_id_is_fenced(env):
    coord, timer, _ = env
    first = join(coord, "s", instance="i-1")[0]
    assert first.error == 0 and first.generation_id == 1
    assert sync(coord, "s", 1, first.member_id, {first.member_id: b"A"})[0].assignment == b"A"
    again = join(coord, "s", instance="i-1")[0]       # restarted: new member id, same instance
    assert again.error == 0 and again.generation_id == 1 and again.member_id != first.member_id
    assert sync(coord, "s", 1, again.member_id)[0].assignment == b"A"
    assert coord.handle_heartbeat("s", first.member_id, "i-1", 1) == Errors.FENCED_INSTANCE_ID


def test_inconsistent_protocol_and_bad_session_timeout(env):
    coord, timer, _ = env
    form_group(coord, timer, "g", 1)
    r = join(coord, "g", protocols=(("roundrobin", b""),))
    r2 = join(coord, "g", r[0].member_id, protocols=(("roundrobin", b""),)) if r[0].error == Errors.MEMBER_ID_REQUIRED else r
    assert r2[0].error == Errors.INCONSISTENT_GROUP_PROTOCOL
    out = []
    coord.handle_join_group("g", "", None, True, "c", "h", 1000, 1000, "consumer", [("range", b"")], out.append)
    assert out[0].error == Errors.INVALID_SESSION_TIMEOUT
    coord.handle_join_group("", "", None, True, "c", "h", 1000, SESSION, "consumer", [("range", b"")], out.append)
    assert out[-1].error == Errors.INVALID_GROUP_ID


def test_delete_groups_and_offset_delete(env):
    coord, timer, _ = env
    out = []
    coord.handle_commit_offsets("e", "", None, -1, {("t", 0): OffsetAndMetadata(1), ("u", 0): OffsetAndMetadata(2)},
                                out.append)
    res = []
    coord.handle_delete_offsets("e", [("t", 0)], lambda err, r: res.append((err, r)))
    assert res == [(0, {("t", 0): 0})]
    form_group(coord, timer, "busy", 1)
    got = []
    coord.handle_delete_groups(["e", "busy", "none"], got.append)
    assert got == [{"e": 0, "busy": Errors.NON_EMPTY_GROUP, "none": Errors.GROUP_ID_NOT_FOUND}]
    assert coord.handle_describe_group("e").state == "Dead"
    res = []
    coord.handle_delete_offsets("busy", [("t", 0)], lambda err, r: res.append((err, r)))
    assert res == [(0, {("t", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC})]


def test_offsets_expire_after_retention_for_empty_groups(env):
    coord, timer, _ = env
    out = []
    coord.handle_commit_offsets("old", "", None, -1, {("t", 0): OffsetAndMetadata(1, commit_timestamp=timer.now)},
                                out.append)
    timer.advance(coord.config.offsets_retention_minutes * 60000 - 1)
    assert coord.handle_fetch_offsets("old", [("t", 0)]).offsets[("t", 0)] is not None
    timer.advance(coord.config.offsets_retention_check_interval_ms + 1)
    assert coord.handle_fetch_offsets("old", [("t", 0)]).offsets[("t", 0)] is None
    assert coord.handle_list_groups()[1] == [] or all(g.group_id != "old" for g in coord.handle_list_groups()[1])


def test_failed_append_is_reported_and_not_applied(env):
    coord, timer, log = env
    log.fail_with = int(Errors.NOT_LEADER_OR_FOLLOWER)
    out = []
    coord.handle_commit_offsets("f", "", None, -1, {("t", 0): OffsetAndMetadata(9)}, out.append)
    assert out == [{("t", 0): Errors.NOT_COORDINATOR}]
    assert coord.handle_fetch_offsets("f", [("t", 0)]).offsets[("t", 0)] is None


def test_a_newer_leader_epoch_on_the_same_coordinator_keeps_the_groups_in_memory(env):
    coord, timer, _ = env
    ids, gen, _ = form_group(coord, timer, "g", 2)
    p = coord.partition_for("g")
    coord.on_election(p, 5)           # e.g. a follower left the ISR: same leader, newer epoch
    timer.advance(0)
    assert coord.handle_heartbeat("g", ids[0], None, gen) == 0
    coord.on_resignation(p, 4)        # a stale resignation does not unload
    assert coord.handle_heartbeat("g", ids[0], None, gen) == 0
    coord.on_resignation(p, 6)
    assert coord.handle_heartbeat("g", ids[0], None, gen) == Errors.NOT_COORDINATOR


def test_initial_rebalance_waits_while_new_members_keep_joining():
    coord, timer, _ = started_coordinator(partitions=1, initial_rebalance_delay_ms=3000)
    a = join(coord, "g")[0].member_id
    first = join(coord, "g", a)
    timer.advance(2000)
    b = join(coord, "g")[0].member_id
    second = join(coord, "g", b)
    timer.advance(3500)                # the first delay ended at 3 s, a member had joined: wait 3 s more
    assert first == [] and second == []
    timer.advance(600)
    assert first[0].generation_id == second[0].generation_id == 1
    assert {m for m, _, _ in (first[0].members or second[0].members)} == {a, b}


def test_members_waiting_in_sync_group_outlive_a_slow_assignment_write():
    """Under load the write of the leader's assignment to ``__consumer_offsets`` (acks=all) can take longer than a
    session; the members wait in SyncGroup without heartbeating meanwhile (librdkafka does not heartbeat then) and
    must not be expelled for it (Kafka's hasSatisfiedHeartbeat: awaiting join *or sync* satisfies it).  Before,
    each slow write expelled them and started another rebalance, so the group never became Stable."""
    log, pending = FakeOffsetsLog(), []
    log.append = lambda partition, records_, callback: pending.append((partition, records_, callback))
    coord, timer, _ = started_coordinator(partitions=1, log=log)
    ids = [join(coord, "g")[0].member_id for _ in range(3)]
    joined = [join(coord, "g", m) for m in ids]
    results = [r[0] for r in joined]
    leader = next(r for r in results if r.members)
    followers = [sync(coord, "g", 1, r.member_id) for r in results if r is not leader]
    timer.advance(SESSION // 2)
    leader_sync = sync(coord, "g", 1, leader.member_id, {m: m.encode() for m, _, _ in leader.members})
    assert pending and not leader_sync, "the assignment is being written"
    timer.advance(SESSION * 2)                               # the write takes two sessions; nobody heartbeats
    assert coord.handle_describe_group("g").state == "CompletingRebalance"
    partition, records_, callback = pending.pop()
    log.data.setdefault(partition, []).append(records_)
    callback(0)
    assert coord.handle_describe_group("g").state == "Stable"
    assert [o[0].error for o in followers] == [0, 0] and leader_sync[0].error == 0
    assert all(coord.handle_heartbeat("g", m, None, 1) == 0 for m in ids)


def test_a_leader_that_never_syncs_is_still_expelled():
    """The members waiting in SyncGroup wait on the leader, whose own session still runs out."""
    coord, timer, _ = started_coordinator(partitions=1)
    ids = [join(coord, "g")[0].member_id for _ in range(2)]
    results = [r[0] for r in [join(coord, "g", m) for m in ids]]
    follower = next(r for r in results if not r.members)
    timer.advance(SESSION // 2)
    waiting = sync(coord, "g", 1, follower.member_id)
    timer.advance(SESSION // 2 + 1)                           # the leader's session ends, not the follower's
    assert waiting and waiting[0].error == Errors.REBALANCE_IN_PROGRESS
    assert coord.handle_describe_group("g").state == "PreparingRebalance"


def test_transactional_offsets_are_pending_until_the_commit_marker_and_replayed_on_load(env):
    coord, timer, log = env
    tp = ("t", 0)
    out = []
    o = OffsetAndMetadata(offset=42, leader_epoch=-1, metadata="", commit_timestamp=timer.now, expire_timestamp=None)
    coord.handle_txn_commit_offsets("g-txn", 9000, 0, "", None, -1, {tp: o}, out.append)
    coord.handle_txn_commit_offsets("g-txn", 9001, 0, "", None, -1, {("t", 1): o}, out.append)
    assert out == [{tp: 0}, {("t", 1): 0}]
    assert coord.handle_fetch_offsets("g-txn", [tp]).offsets == {tp: None}           # pending: not visible
    unstable = coord.handle_fetch_offsets("g-txn", [tp], require_stable=True)
    assert unstable.partition_errors == {tp: int(Errors.UNSTABLE_OFFSET_COMMIT)}
    partition = coord.partition_for("g-txn")
    coord.on_transaction_completed(partition, 9000, commit=True)
    coord.on_transaction_completed(partition, 9001, commit=False)
    got = coord.handle_fetch_offsets("g-txn", [tp, ("t", 1)], require_stable=True)
    assert got.offsets[tp].offset == 42 and got.offsets[("t", 1)] is None and not got.partition_errors
    # The log replays the same: the transactional batches and the markers written after them.
    log.data[partition].append(end_transaction_marker(9000, 0, 0, True, timer.now))
    log.data[partition].append(end_transaction_marker(9001, 0, 0, False, timer.now))
    coord.on_resignation(partition)
    coord.on_election(partition, 1)
    timer.advance(0)
    got = coord.handle_fetch_offsets("g-txn", [tp, ("t", 1)])
    assert got.offsets[tp].offset == 42 and got.offsets[("t", 1)] is None


def txn_commit(coord, group, offset, member="", generation=-1, instance=None, producer_id=9000, txn_id=None):
    out = []
    o = OffsetAndMetadata(offset=offset, leader_epoch=-1, metadata="", commit_timestamp=0, expire_timestamp=None)
    coord.handle_txn_commit_offsets(group, producer_id, 0, member, instance, generation, {("t", 0): o}, out.append,
                                    transactional_id=txn_id)
    return out[0][("t", 0)]


def test_transactional_commits_are_fenced_by_member_generation_and_instance(env):
    """KIP-447: a transactional offset commit carries the consumer's member id and generation; Kafka's
    validateOffsetCommit for it (no REBALANCE_IN_PROGRESS, unlike a plain commit)."""
    coord, timer, _ = env
    ids, gen, _ = form_group(coord, timer, "g", 2)
    assert txn_commit(coord, "g", 1, ids[0], gen - 1) == Errors.ILLEGAL_GENERATION       # a zombie of a past generation
    assert txn_commit(coord, "g", 1, "stranger", gen) == Errors.UNKNOWN_MEMBER_ID
    assert txn_commit(coord, "g", 1, "", gen) == Errors.UNKNOWN_MEMBER_ID                 # a generation without a member
    assert txn_commit(coord, "g", 1, ids[0], gen) == 0
    assert txn_commit(coord, "g", 2) == 0                    # no member information (TxnOffsetCommit < v3): allowed
    assert coord.handle_leave_group("g", [(ids[1], None)]) == (0, [0])
    assert join(coord, "g", ids[0])[0].generation_id == gen + 1   # a rebalance, not yet synced
    assert coord.handle_describe_group("g").state == "CompletingRebalance"
    assert txn_commit(coord, "g", 3, ids[0], gen + 1) == 0        # current member and generation: accepted
    assert txn_commit(coord, "g", 3, ids[0], gen) == Errors.ILLEGAL_GENERATION
    static = join(coord, "s", instance="i-1")[0]
    sync(coord, "s", static.generation_id, static.member_id, {static.member_id: b"A"})
    again = join(coord, "s", instance="i-1")[0]               # restarted instance: the old member id is fenced
    assert txn_commit(coord, "s", 1, static.member_id, static.generation_id, "i-1") == Errors.FENCED_INSTANCE_ID
    assert txn_commit(coord, "s", 1, again.member_id, again.generation_id, "i-1") == 0


def test_a_refused_verification_is_answered_and_leaves_nothing_pending(env):
    """KIP-890 part 1: the producer's coordinator is asked first; its refusal (INVALID_PRODUCER_EPOCH for a fenced
    epoch, INVALID_TXN_STATE outside a transaction) is the answer and nothing is written, so no offset is left
    pending; a retriable one becomes COORDINATOR_NOT_AVAILABLE, as Kafka's offset-commit error conversion does."""
    coord, timer, log = env
    partition = coord.partition_for("g-v")
    for code in (Errors.INVALID_PRODUCER_EPOCH, Errors.INVALID_TXN_STATE):
        log.verify_with = int(code)
        assert txn_commit(coord, "g-v", 5, txn_id="tx") == code
    log.verify_with = int(Errors.NOT_ENOUGH_REPLICAS)
    assert txn_commit(coord, "g-v", 5, txn_id="tx") == Errors.COORDINATOR_NOT_AVAILABLE
    assert log.data.get(partition) is None
    assert not coord.handle_fetch_offsets("g-v", [("t", 0)], require_stable=True).partition_errors
    log.verify_with = 0
    assert txn_commit(coord, "g-v", 5, txn_id="tx") == 0
    assert log.verified[-1] == (partition, "tx", 9000, 0) and log.guards[-1] == ("guard", 9000)
    assert coord.handle_fetch_offsets("g-v", [("t", 0)], require_stable=True).partition_errors == {
        ("t", 0): int(Errors.UNSTABLE_OFFSET_COMMIT)}
    assert txn_commit(coord, "g-none", 5) == 0                # no transactional id (a test client): nothing to ask
    assert log.verified[-1][1] == "tx"


def test_an_aborted_commit_leaves_the_earlier_committed_offset(env):
    """Offsets committed by one transaction stay when a later transaction of the same producer aborts, and a
    commit marker of another producer does not touch them."""
    coord, timer, log = env
    partition = coord.partition_for("g-a")
    assert txn_commit(coord, "g-a", 10) == 0
    coord.on_transaction_completed(partition, 9000, commit=True)
    assert txn_commit(coord, "g-a", 20) == 0
    coord.on_transaction_completed(partition, 9001, commit=True)      # someone else's marker
    assert coord.handle_fetch_offsets("g-a", [("t", 0)], require_stable=True).partition_errors
    coord.on_transaction_completed(partition, 9000, commit=False)
    got = coord.handle_fetch_offsets("g-a", [("t", 0)], require_stable=True)
    assert not got.partition_errors and got.offsets[("t", 0)].offset == 10


def test_a_plain_commit_written_after_a_pending_transactional_one_is_kept_when_it_commits(env):
    """Kafka keeps the newer record (``completePendingTxnOffsetCommit``): a transactional commit that was written
    before a plain one does not overwrite it when its marker commits; one written after it does.  Loading the
    partition again gives the same offsets."""
    coord, timer, log = env
    partition = coord.partition_for("g-o")
    plain = []
    assert txn_commit(coord, "g-o", 42) == 0                               # pending (producer 9000)
    coord.handle_commit_offsets("g-o", "", None, -1, {("t", 0): OffsetAndMetadata(50)}, plain.append)
    assert plain == [{("t", 0): 0}]
    assert txn_commit(coord, "g-o", 60, producer_id=9001) == 0             # written after the plain commit
    coord.on_transaction_completed(partition, 9000, commit=True)
    assert coord.handle_fetch_offsets("g-o", [("t", 0)]).offsets[("t", 0)].offset == 50
    log.data[partition].append(end_transaction_marker(9000, 0, 0, True, timer.now))
    coord.on_transaction_completed(partition, 9001, commit=True)
    assert coord.handle_fetch_offsets("g-o", [("t", 0)]).offsets[("t", 0)].offset == 60
    log.data[partition].append(end_transaction_marker(9001, 0, 0, True, timer.now))
    coord.on_resignation(partition)
    coord.on_election(partition, 1)
    timer.advance(0)
    assert coord.handle_fetch_offsets("g-o", [("t", 0)], require_stable=True).offsets[("t", 0)].offset == 60
    # The replay alone: the same two producers, the second marker not yet written.
    log.data[partition].pop()
    coord.on_resignation(partition)
    coord.on_election(partition, 2)
    timer.advance(0)
    got = coord.handle_fetch_offsets("g-o", [("t", 0)], require_stable=True)
    assert got.partition_errors == {("t", 0): int(Errors.UNSTABLE_OFFSET_COMMIT)}     # 9001's still pending
    assert coord.handle_fetch_offsets("g-o", [("t", 0)]).offsets[("t", 0)].offset == 50
