"""Fetch v13-v17: the response codec by topic id with KIP-951's current leader and node endpoints (byte for byte
against kafka-python's encoder), and fetch sessions keyed by topic id (KIP-516): unknown ids, names learnt
later, forgotten topics by id, FETCH_SESSION_TOPIC_ID_ERROR, the v15 replica state."""
from __future__ import annotations

import random
import uuid

import pytest

from kafkatier.common.structs import TopicPartition
from kafkatier.protocol import fetch_codec
from kafkatier.protocol.build import build
from kafkatier.protocol.codec import request_class, response_class
from kafkatier.protocol.errors import Errors
from kafkatier.protocol.fetch_metadata import FetchMetadata
from kafkatier.server.fetch_session import (FetchManager, FetchRequestData, FetchSessionCache, TopicIdKey,
                                            fetch_replica_id, fetch_request_data)
from kafkatier.server.replica_manager import FetchPartitionData, FetchPartitionResult
from kafkatier.zk.codecs import topic_id_str

FOO, BAR = uuid.UUID(int=0x1234), uuid.UUID(int=0x5678)
FOO_ID, BAR_ID = topic_id_str(FOO), topic_id_str(BAR)


def reference(version: int, topics, nodes=()):
    parts = []
    for topic, ps in topics:
        rows = []
        for i, e, hw, lso, ls, ab, rec, pref, leader in ps:
            row = {"partition_index": i, "error_code": e, "high_watermark": hw, "last_stable_offset": lso,
                   "log_start_offset": ls, "aborted_transactions": None if ab is None else [
                       {"producer_id": p, "first_offset": f} for p, f in ab],
                   "preferred_read_replica": pref, "records": rec}
            if leader is not None:
                row["current_leader"] = {"leader_id": leader[0], "leader_epoch": leader[1]}
            rows.append(row)
        parts.append({"topic": topic if isinstance(topic, str) else "",
                      "topic_id": topic if isinstance(topic, uuid.UUID) else uuid.UUID(int=0), "partitions": rows})
    body = {"throttle_time_ms": 3, "error_code": 0, "session_id": 77, "responses": parts}
    if nodes:
        body["node_endpoints"] = [{"node_id": n, "host": h, "port": p, "rack": r} for n, h, p, r in nodes]
    return bytes(build(response_class(1), version, body).encode(version=version))


@pytest.mark.parametrize("version", range(13, 18))
def test_response_by_topic_id_matches_kafka_python(version):
    topics = [(FOO, [(0, 0, 10, 10, 0, None, b"abc", -1, None), (1, 0, 5, 5, 0, [(7, 2)], b"", 2, None)]),
              (BAR, [(3, int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1, -1, None, b"", -1, (2, 9))])]
    nodes = [(2, "127.0.0.1", 9093, "rack-a"), (3, "h\u00e9", 1, None)] if version >= 16 else []
    assert fetch_codec.encode_fetch_response(version, 0, 77, topics, 3, nodes) == reference(version, topics, nodes)


def test_an_unknown_leader_writes_no_current_leader_and_endpoints_wait_for_v16():
    topics = [(FOO, [(0, int(Errors.FENCED_LEADER_EPOCH), -1, -1, -1, None, b"", -1, (-1, -1))])]
    plain = [(FOO, [(0, int(Errors.FENCED_LEADER_EPOCH), -1, -1, -1, None, b"", -1, None)])]
    assert fetch_codec.encode_fetch_response(16, 0, 0, topics) == fetch_codec.encode_fetch_response(16, 0, 0, plain)
    # NodeEndpoints is a v16 field: v15 drops it, as Kafka's generated writer does
    assert fetch_codec.encode_fetch_response(15, 0, 0, plain, 0, [(1, "h", 1, None)]) == \
        fetch_codec.encode_fetch_response(15, 0, 0, plain)


# --- the request ------------------------------------------------------------------------------------------------

def fetch_request(version: int, topics, forgotten=(), session_id=0, epoch=-1, replica=(-1, -1)):
    R = request_class(1)
    wire = build(R, version, {
        "replica_id": replica[0], "replica_state": {"replica_id": replica[0], "replica_epoch": replica[1]},
        "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
        "session_epoch": epoch, "rack_id": "",
        "topics": [{"topic_id": tid, "partitions": [
            {"partition": p, "current_leader_epoch": 4, "fetch_offset": 7, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1024, "replica_directory_id": uuid.UUID(int=9)}
            for p in ps]} for tid, ps in topics],
        "forgotten_topics_data": [{"topic_id": tid, "partitions": ps} for tid, ps in forgotten]})
    return R.decode(bytes(wire.encode(version=version)), version=version)


def names(known: dict[str, str]):
    return known.get


def test_v13_request_resolves_ids_and_keeps_unknown_ones_nameless():
    req = fetch_request_data(fetch_request(13, [(FOO, [0]), (BAR, [1])], forgotten=[(FOO, [2])], session_id=5,
                                           epoch=3), 13, names({FOO_ID: "foo"}))
    assert req.uses_topic_ids and req.metadata == FetchMetadata(5, 3)
    assert req.partitions == [
        FetchPartitionData(TopicPartition("foo", 0), 7, 1024, current_leader_epoch=4, topic_id=FOO_ID),
        FetchPartitionData(TopicPartition(None, 1), 7, 1024, current_leader_epoch=4, topic_id=BAR_ID)]
    assert req.forgotten == [TopicIdKey(FOO_ID, 2)]


@pytest.mark.parametrize("version,expected", [(14, 2), (15, 3), (17, -1)])
def test_replica_id_moves_into_replica_state_at_v15(version, expected):
    replica = (-1, -1) if expected < 0 else (expected, 42)
    assert fetch_replica_id(fetch_request(version, [(FOO, [0])], replica=replica), version) == expected


# --- sessions by id ---------------------------------------------------------------------------------------------

def manager() -> FetchManager:
    return FetchManager(FetchSessionCache(10, 120000, rng=random.Random(3)))


def by_id(tid: str, name: str | None, partition: int, offset: int = 0) -> FetchPartitionData:
    return FetchPartitionData(TopicPartition(name, partition), offset, 1024, topic_id=tid)


def ok(hw: int = 10) -> FetchPartitionResult:
    return FetchPartitionResult(Errors.NONE, hw, 0)


def test_an_id_session_forgets_by_id_and_learns_a_name_later():
    m, known = manager(), {FOO_ID: "foo"}
    full = m.new_context(FetchRequestData(FetchMetadata(0, 0), [by_id(FOO_ID, "foo", 0), by_id(BAR_ID, None, 0)],
                                          [], uses_topic_ids=True), False, known.get)
    sid = full.response({TopicIdKey(FOO_ID, 0): ok(), TopicIdKey(BAR_ID, 0): FetchPartitionResult(
        Errors.UNKNOWN_TOPIC_ID)}).session_id
    assert sid > 0
    known[BAR_ID] = "bar"   # the metadata learnt the id
    inc = m.new_context(FetchRequestData(FetchMetadata(sid, 1), [], [], uses_topic_ids=True), False, known.get)
    assert [p.tp for p in inc.partitions()] == [TopicPartition("foo", 0), TopicPartition("bar", 0)]
    answer = inc.response({TopicIdKey(FOO_ID, 0): ok(), TopicIdKey(BAR_ID, 0): ok()})
    assert list(answer.partitions) == [TopicIdKey(BAR_ID, 0)]   # foo has nothing new; bar recovered
    inc = m.new_context(FetchRequestData(FetchMetadata(sid, 2), [], [TopicIdKey(FOO_ID, 0)], uses_topic_ids=True),
                        False, known.get)
    assert [p.topic_id for p in inc.partitions()] == [BAR_ID]


def test_a_session_and_a_request_that_differ_in_topic_id_use_are_error_106():
    m = manager()
    ids = m.new_context(FetchRequestData(FetchMetadata(0, 0), [by_id(FOO_ID, "foo", 0)], [], uses_topic_ids=True),
                        False).response({TopicIdKey(FOO_ID, 0): ok()}).session_id
    names_ = m.new_context(FetchRequestData(FetchMetadata(0, 0), [FetchPartitionData(TopicPartition("foo", 0), 0)],
                                            []), False).response({TopicPartition("foo", 0): ok()}).session_id
    for sid, uses_ids in ((ids, False), (names_, True)):
        ctx = m.new_context(FetchRequestData(FetchMetadata(sid, 1), [], [], uses_topic_ids=uses_ids), False)
        assert ctx.response({}).error == Errors.FETCH_SESSION_TOPIC_ID_ERROR
    # the refused request did not move the epoch: the right kind of request still continues each session
    assert m.new_context(FetchRequestData(FetchMetadata(ids, 1), [], [], uses_topic_ids=True), False).kind \
        == "incremental"


# --- injected partition faults on a Fetch by topic id -------------------------------------------------------------

def test_a_partition_fault_matches_and_answers_a_v13_fetch_by_topic_id():
    import types

    from kafkatier.server import fault_injection as fi
    header = types.SimpleNamespace(request_api_key=1, request_api_version=13, correlation_id=1)
    req = build(request_class(1), 13, {"replica_id": -1, "max_wait_ms": 0, "topics": [
        {"topic_id": FOO, "partitions": [{"partition": p, "fetch_offset": 0} for p in (0, 1)]}]})

    class FetchApis:
        def handle(self, header, request, context):
            return build(response_class(1), 13, {"responses": [{"topic_id": FOO, "partitions": [
                {"partition_index": p, "error_code": 0, "high_watermark": 5, "records": b"xyz"} for p in (0, 1)]}]})

        def topic_name_for_id(self, topic_id):
            return {FOO: "foo"}.get(topic_id)

        def topic_id_for_name(self, name):
            return {"foo": FOO}.get(name)
    nlof = int(Errors.NOT_LEADER_OR_FOLLOWER)
    registry = fi.FaultRegistry()
    registry.replace(fi.FaultSpec(faults=(fi.RequestFault(id="f", api_key=1, kind="errors", errors=(nlof,),
                                                          topic="foo", partition=1),)), 0)
    h = fi.FaultInjectingHandler(FetchApis(), registry)
    r = h.handle(header, req, None)
    got = {(t.topic_id, p.partition_index): (p.error_code, p.high_watermark) for t in r.responses
           for p in t.partitions}
    assert got == {(FOO, 0): (0, 5), (FOO, 1): (nlof, -1)}


def test_an_incremental_session_always_carries_a_preferred_read_replica():
    m = manager()
    tp = TopicPartition("foo", 0)
    sid = m.new_context(FetchRequestData(FetchMetadata(0, 0), [FetchPartitionData(tp, 0)], []), False).response(
        {tp: ok()}).session_id
    ctx = m.new_context(FetchRequestData(FetchMetadata(sid, 1), [], []), False)
    redirected = FetchPartitionResult(Errors.NONE, 10, 0, preferred_read_replica=2)
    assert list(ctx.response({tp: redirected}).partitions) == [tp]   # nothing else changed (KIP-392)


# --- KafkaApis.handle_fetch at v17, against fake collaborators ---------------------------------------------------

def test_handle_fetch_v17_answers_unknown_inconsistent_and_fenced_partitions_as_kafka():
    import types

    from kafkatier.server.auth_helper import AuthHelper
    from kafkatier.server.kafka_apis import KafkaApis
    from kafkatier.server.metadata_cache import BrokerEndpoint
    stale = uuid.UUID(int=0x9999)

    class Rm:
        hosted = {("foo", 0): types.SimpleNamespace(topic_id=topic_id_str(stale), leader_id=1, leader_epoch=2),
                  ("bar", 0): types.SimpleNamespace(topic_id=BAR_ID, leader_id=2, leader_epoch=7)}
        read: list = []

        def get_partition(self, topic, partition):
            return self.hosted.get((topic, partition))

        def fetch_messages(self, replica_id, max_wait_ms, min_bytes, max_bytes, parts, respond, **kw):
            self.read.extend(fp.tp for fp in parts)
            respond({fp.tp: FetchPartitionResult(Errors.FENCED_LEADER_EPOCH) for fp in parts})

    class Cache:
        topic_ids = {"foo": FOO_ID, "bar": BAR_ID}

        def topic_name(self, tid):
            return {v: k for k, v in self.topic_ids.items()}.get(tid)

        def broker(self, broker_id, listener):
            return BrokerEndpoint(broker_id, "127.0.0.1", 9000 + broker_id, "r1") if listener == "PLAINTEXT" else None

    apis = KafkaApis.__new__(KafkaApis)
    apis.rm, apis.cache, apis.auth, apis.client_quotas = Rm(), Cache(), AuthHelper(None), None
    apis.fetch_manager = manager()
    unknown = uuid.UUID(int=0x4242)
    wire = build(request_class(1), 17, {"replica_state": {"replica_id": -1, "replica_epoch": -1}, "max_wait_ms": 0,
                                        "min_bytes": 0, "max_bytes": 1 << 20, "session_id": 0, "session_epoch": -1,
                                        "topics": [{"topic_id": t, "partitions": [{"partition": 0, "fetch_offset": 0}]}
                                                   for t in (FOO, BAR, unknown)]})
    req = request_class(1).decode(bytes(wire.encode(version=17)), version=17)
    header = types.SimpleNamespace(request_api_key=1, request_api_version=17, correlation_id=1)
    ctx = types.SimpleNamespace(listener_name="PLAINTEXT", principal=None, client_id="c")
    resp = apis.handle_fetch(header, req, ctx).decoded()
    got = {t.topic_id: p for t in resp.responses for p in t.partitions}
    assert Rm.read == [TopicPartition("bar", 0)]                      # only the consistent, known partition is read
    assert got[FOO].error_code == Errors.INCONSISTENT_TOPIC_ID and got[FOO].current_leader is None
    assert got[unknown].error_code == Errors.UNKNOWN_TOPIC_ID
    assert got[BAR].error_code == Errors.FENCED_LEADER_EPOCH
    assert (got[BAR].current_leader.leader_id, got[BAR].current_leader.leader_epoch) == (2, 7)
    assert [(n.node_id, n.host, n.port, n.rack) for n in resp.node_endpoints] == [(2, "127.0.0.1", 9002, "r1")]
