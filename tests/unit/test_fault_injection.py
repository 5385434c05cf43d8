"""Request faults (server/fault_injection.py): the registry's pop order, the handler around KafkaApis, control
channel faults, the faults znode codec; the broker's clock (common/time.py)."""
from __future__ import annotations

import time
import types
from concurrent.futures import Future

import pytest

from kafkatier.common.structs import TopicPartition
from kafkatier.common.time import MockTime, SkewedTime
from kafkatier.protocol import codec
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors
from kafkatier.scenario.spec import ScenarioSpecError, from_dict
from kafkatier.server import fault_injection as fi
from kafkatier.server.control_request_faults import apply_control_faults
from kafkatier.server.faults_watcher import FaultsWatcher
from kafkatier.server.network import CloseConnection, MuteAfterResponse
from kafkatier.zk import codecs
from fakes import FakeZk

NLOF, RTO, KSE = int(Errors.NOT_LEADER_OR_FOLLOWER), int(Errors.REQUEST_TIMED_OUT), int(Errors.KAFKA_STORAGE_ERROR)
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def fault(kind="errors", api=0, **kw) -> fi.RequestFault:
    kw.setdefault("id", f"f{id(kw)}")
    return fi.RequestFault(api_key=api, kind=kind, **kw)


def registry(*faults) -> fi.FaultRegistry:
    r = fi.FaultRegistry()
    r.replace(fi.FaultSpec(faults=faults), 0)
    return r


def take(r, api=0, parts=(T0, T1)):
    return r.take(api, lambda: parts)


# ------------------------------------------------------------------------------------------------ names

def test_api_and_error_names_and_numbers():
    assert fi.parse_api("Produce") == 0 and fi.parse_api("listoffsets") == 2 and fi.parse_api("5") == 5
    assert fi.parse_api("StopReplica") == 5 and fi.parse_api(3) == 3
    assert fi.parse_error("NOT_LEADER_OR_FOLLOWER") == 6 and fi.parse_error("6") == 6
    assert fi.parse_error("kafka_storage_error") == 56
    for bad in ("Nope", "99999"):
        with pytest.raises(fi.FaultSpecError, match="unknown API"):
            fi.parse_api(bad)
    for bad in ("NOT_AN_ERROR", "4242"):
        with pytest.raises(fi.FaultSpecError, match="unknown error"):
            fi.parse_error(bad)


def test_fault_validation():
    with pytest.raises(fi.FaultSpecError, match="topic needs a partition"):
        fault(errors=(6,), topic="t")
    with pytest.raises(fi.FaultSpecError, match="at least one error"):
        fault(errors=())
    with pytest.raises(fi.FaultSpecError, match="control channel"):
        fault("latency", api=5, latency_ms=10)
    with pytest.raises(fi.FaultSpecError, match="partition-level errors"):
        fault(api=3, errors=(6,), topic="t", partition=0)     # Metadata has no partition error field to set
    with pytest.raises(fi.FaultSpecError, match="nth"):
        fault("drop_response", nth=0)
    with pytest.raises(fi.FaultSpecError, match="ApiVersions"):
        fault(api=18, errors=(35,))
    with pytest.raises(fi.FaultSpecError, match="at most 3600000"):
        fault("latency", latency_ms=3_600_001)
    with pytest.raises(fi.FaultSpecError, match="partition must be"):
        fault(errors=(6,), topic="t", partition=-1)
    with pytest.raises(fi.FaultSpecError, match="count applies"):
        fault("drop_response", count=2)


# --------------------------------------------------------------------------------------------- registry

def test_errors_pop_in_order_one_per_request_then_stop():
    r = registry(fault(errors=(NLOF, RTO, NLOF), id="a"))
    assert [take(r).error for _ in range(4)] == [NLOF, RTO, NLOF, None]
    assert r.remaining() == {"a": 0}


def test_only_its_api_consumes_a_fault():
    r = registry(fault(errors=(NLOF,), id="a"))
    assert take(r, api=1).is_none and r.remaining() == {"a": 1}
    assert take(r, api=0).error == NLOF


def test_partition_errors_only_for_requests_naming_the_partition():
    r = registry(fault(errors=(KSE, KSE), topic="t", partition=1, id="p"), fault(errors=(NLOF,), id="w"))
    first = take(r, parts=(T0,))
    assert first.partition_errors == {} and first.error == NLOF       # t-1 not named: the partition fault waits
    assert take(r, parts=(T0, T1)).partition_errors == {T1: KSE}
    assert take(r, parts=(T1,)).partition_errors == {T1: KSE}
    assert take(r, parts=(T1,)).is_none
    assert r.remaining() == {"p": 0, "w": 0}


def test_a_refused_request_or_a_closed_connection_consumes_nothing_else():
    r = registry(fault(errors=(RTO,), id="w"), fault(errors=(KSE,), topic="t", partition=0, id="p"),
                 fault("close_connection", nth=2, id="c"), fault("latency", latency_ms=5, count=1, id="l"))
    first = take(r)
    assert first.error == RTO and first.partition_errors == {} and first.latency_ms == 5
    assert r.remaining() == {"w": 0, "p": 1, "c": 1, "l": 0}
    second = take(r)
    assert second.close_connection and second.partition_errors == {}
    assert r.remaining() == {"w": 0, "p": 1, "c": 0, "l": 0}
    assert take(r).partition_errors == {T0: KSE}


def test_latency_count_and_unbounded():
    r = registry(fault("latency", latency_ms=50, count=2, id="l"), fault("latency", api=1, latency_ms=20, id="u"))
    assert [take(r).latency_ms for _ in range(3)] == [50, 50, 0]
    assert all(take(r, api=1).latency_ms == 20 for _ in range(5))
    assert r.remaining() == {"l": 0, "u": None}


def test_drop_and_close_fire_once_on_the_nth_request():
    r = registry(fault("drop_response", nth=3, id="d"), fault("close_connection", nth=2, id="c"))
    actions = [take(r) for _ in range(5)]
    assert [a.drop_response for a in actions] == [False, False, True, False, False]
    assert [a.close_connection for a in actions] == [False, True, False, False, False]
    assert r.remaining() == {"d": 0, "c": 0}


def test_replace_keeps_what_kept_faults_consumed_and_restores_after_a_restart():
    a = fault(errors=(NLOF, NLOF, NLOF), id="a")
    r = registry(a)
    take(r)
    r.replace(fi.FaultSpec(faults=(a, fault(errors=(RTO,), id="b"))), 1)
    assert r.remaining() == {"a": 2, "b": 1}
    # A restarted broker: a fresh registry given the remaining counts its previous incarnation recorded.
    fresh = fi.FaultRegistry()
    fresh.replace(fi.FaultSpec(faults=(a, fault("drop_response", id="d"))), 1, consumed={"a": 1, "d": 0})
    assert fresh.remaining() == {"a": 1, "d": 0}
    assert take(fresh).error == NLOF and take(fresh).is_none


def test_on_change_called_when_a_bounded_fault_is_consumed():
    calls = []
    r = fi.FaultRegistry(on_change=lambda: calls.append(1))
    r.replace(fi.FaultSpec(faults=(fault("latency", latency_ms=5, id="u"),)), 0)
    take(r)
    assert calls == []                     # unbounded latency: nothing to record
    r.replace(fi.FaultSpec(faults=(fault(errors=(NLOF,), id="a"),)), 1)
    take(r)
    assert calls == [1]


# ---------------------------------------------------------------------------------------------- codec

def test_spec_and_state_round_trip_and_malformed_rejected():
    spec = fi.FaultSpec(faults=(fault(errors=(NLOF, RTO), topic="t", partition=0, id="x"),
                                fault("latency", api=1, latency_ms=12.5, count=3, id="y")),
                        clock=fi.ClockSkew(offset_ms=600000, drift_ppm=-20))
    assert fi.FaultSpec.decode(spec.encode()) == spec
    assert codecs.decode_path("/kafkatier/faults/1", spec.encode())["version"] == 1
    state = fi.FaultState(spec_version=3, remaining={"x": 1, "y": None}, clock=spec.clock)
    assert fi.FaultState.decode(state.encode()) == state
    for bad in (b"{", b'{"version":1,"faults":[{"id":"a","api_key":0,"kind":"boom"}]}',
                b'{"version":1,"faults":[{"id":"a","api_key":0,"kind":"errors","errors":[]}]}',
                b'{"version":1,"faults":[{"id":"a","api_key":0,"kind":"errors","errors":[6]},'
                b'{"id":"a","api_key":1,"kind":"errors","errors":[6]}]}'):
        with pytest.raises(codecs.MalformedZNodeError):
            fi.FaultSpec.decode(bad, "/kafkatier/faults/1")


def test_watcher_skips_a_malformed_znode_and_keeps_the_faults_in_force(caplog):
    r = fi.FaultRegistry()
    clocks = []
    w = FaultsWatcher(FakeZk(), 1, r, on_clock=clocks.append)
    good = fi.FaultSpec(faults=(fault(errors=(NLOF,), id="a"),), clock=fi.ClockSkew(offset_ms=5))
    w._on_data(good.encode(), types.SimpleNamespace(version=4))
    assert r.spec_version == 4 and r.remaining() == {"a": 1} and clocks == [fi.ClockSkew(offset_ms=5)]
    w._on_data(b'{"version":1,"faults":[{"id":"a"}]}', types.SimpleNamespace(version=5))
    assert r.spec_version == 4 and r.remaining() == {"a": 1} and "malformed" in caplog.text
    w._on_data(None, None)          # znode deleted: no faults, no skew
    assert r.remaining() == {} and clocks[-1] == fi.ClockSkew()


# ----------------------------------------------------------------------------------------------- handler

PRODUCE_CLS = codec.REGISTRY[0][0]


class Apis:
    def __init__(self, answer_later: bool = False, mute_ms: int = 0):
        self.seen = []
        self.answer_later = answer_later
        self.mute_ms = mute_ms   # a client quota's throttle: the answer comes as KafkaApis gives it, with its mute

    def supported_versions(self):
        return {0: (3, 9)}

    def handle(self, header, request, context):
        self.seen.append(sorted((t.name, p.index) for t in request.topic_data for p in t.partition_data))
        response = build(codec.response_class(0), header.request_api_version, {"responses": [
            {"name": t.name, "partition_responses": [{"index": p.index, "error_code": 0, "base_offset": 7}
                                                     for p in t.partition_data]} for t in request.topic_data]})
        if self.answer_later:
            f = Future()
            f.set_result(response)
            response = f
        return MuteAfterResponse(response, self.mute_ms) if self.mute_ms else response

    def error_response(self, header, request, code):
        return build(codec.response_class(0), header.request_api_version, {"responses": [
            {"name": t.name, "partition_responses": [{"index": p.index, "error_code": code, "base_offset": -1}
                                                     for p in t.partition_data]}
            for t in request.topic_data]})


def produce(acks=-1, parts=((("t", 0), ("t", 1)))):
    topics = {}
    for t, p in parts:
        topics.setdefault(t, []).append({"index": p, "records": b""})
    req = build(PRODUCE_CLS, 9, {"acks": acks, "timeout_ms": 1000, "topic_data": [
        {"name": t, "partition_data": ps} for t, ps in topics.items()]})
    return types.SimpleNamespace(request_api_key=0, request_api_version=9, correlation_id=1), req


def answers(response):
    if isinstance(response, Future):
        response = response.result(timeout=5)
    return sorted((t.name, p.index, p.error_code, p.base_offset) for t in response.responses
                  for p in t.partition_responses)


@pytest.mark.parametrize("later", [False, True])
def test_partition_error_on_produce_is_not_appended_the_others_are(later):
    apis = Apis(answer_later=later)
    h = fi.FaultInjectingHandler(apis, registry(fault(errors=(NLOF,), topic="t", partition=1, id="p")))
    header, req = produce()
    assert answers(h.handle(header, req, None)) == [("t", 0, 0, 7), ("t", 1, NLOF, -1)]
    assert apis.seen == [[("t", 0)]]
    header, req = produce()
    assert answers(h.handle(header, req, None)) == [("t", 0, 0, 7), ("t", 1, 0, 7)]   # popped once


@pytest.mark.parametrize("later", [False, True])
def test_partition_error_and_latency_keep_a_throttles_mute_around_the_answer(later):
    apis = Apis(answer_later=later, mute_ms=300)
    h = fi.FaultInjectingHandler(apis, registry(fault(errors=(NLOF,), topic="t", partition=1, id="p"),
                                                fault("latency", latency_ms=50, count=1, id="l")))
    header, req = produce()
    merged = h.handle(header, req, None)
    assert isinstance(merged, MuteAfterResponse) and merged.mute_ms == 300
    assert isinstance(merged.response, Future)   # delayed: the network layer mutes at once, then from the send
    assert answers(merged.response) == [("t", 0, 0, 7), ("t", 1, NLOF, -1)]


def test_partition_error_on_the_only_partition_answers_without_handling():
    apis = Apis()
    h = fi.FaultInjectingHandler(apis, registry(fault(errors=(NLOF,), topic="t", partition=0, id="p")))
    header, req = produce(parts=(("t", 0),))
    assert answers(h.handle(header, req, None)) == [("t", 0, NLOF, -1)]
    assert apis.seen == []


def test_whole_request_error_uses_the_apis_error_response_and_acks0_closes():
    apis = Apis()
    h = fi.FaultInjectingHandler(apis, registry(fault(errors=(RTO, RTO), id="w")))
    header, req = produce()
    assert answers(h.handle(header, req, None)) == [("t", 0, RTO, -1), ("t", 1, RTO, -1)]
    header, req = produce(acks=0)
    assert isinstance(h.handle(header, req, None), CloseConnection)
    assert apis.seen == []


def test_latency_drop_and_close():
    apis = Apis()
    h = fi.FaultInjectingHandler(apis, registry(fault("latency", latency_ms=150, count=1, id="l"),
                                                fault("drop_response", nth=2, id="d"),
                                                fault("close_connection", nth=3, id="c")))
    header, req = produce()
    t0 = time.monotonic()
    delayed = h.handle(header, req, None)
    assert isinstance(delayed, Future) and answers(delayed)
    assert 0.14 <= time.monotonic() - t0 < 1.0
    header, req = produce()
    dropped = h.handle(header, req, None)
    assert isinstance(dropped, Future) and not dropped.done() and len(apis.seen) == 2   # handled, never answered
    header, req = produce()
    assert isinstance(h.handle(header, req, None), CloseConnection) and len(apis.seen) == 2  # not handled


# ------------------------------------------------------------------------------------------ control channel

def stop_replica_body():
    return {"controller_id": 1, "controller_epoch": 1, "broker_epoch": 5, "topic_states": [
        {"topic_name": "t", "partition_states": [
            {"partition_index": p, "leader_epoch": 1, "delete_partition": False, "disable_remote_partition": True}
            for p in (0, 1)]}]}


def test_control_whole_error_answers_without_applying():
    applied = []
    r = registry(fault(api=5, errors=(KSE,), id="s"))
    body, dropped = apply_control_faults(r, 5, stop_replica_body(), lambda b: applied.append(b) or {})
    assert not dropped and applied == [] and body["error_code"] == KSE
    assert sorted((e["partition_index"], e["error_code"]) for e in body["partition_errors"]) == [(0, KSE), (1, KSE)]
    body, _ = apply_control_faults(r, 5, stop_replica_body(), lambda b: {"error_code": 0, "partition_errors": []})
    assert body == {"error_code": 0, "partition_errors": []}


def test_control_partition_error_applies_the_rest():
    applied = []

    def apply(b):
        applied.append([p["partition_index"] for t in b["topic_states"] for p in t["partition_states"]])
        return {"error_code": 0, "partition_errors": [{"topic_name": "t", "partition_index": 0, "error_code": 0}]}
    r = registry(fault(api=5, errors=(KSE,), topic="t", partition=1, id="s"))
    body, _ = apply_control_faults(r, 5, stop_replica_body(), apply)
    assert applied == [[0]]
    assert sorted((e["partition_index"], e["error_code"]) for e in body["partition_errors"]) == [(0, 0), (1, KSE)]


def test_control_leader_and_isr_partition_error_per_topic():
    body = {"topic_states": [{"topic_name": "t", "topic_id": "x", "partition_states": [{"partition_index": 0}]}]}
    r = registry(fault(api=4, errors=(KSE,), topic="t", partition=0, id="l"))
    answer, _ = apply_control_faults(r, 4, body, lambda b: pytest.fail("nothing left to apply"))
    assert answer["topics"] == [{"topic_id": "x", "partition_errors": [{"partition_index": 0, "error_code": KSE}]}]


def test_control_dropped_answer_is_applied():
    applied = []
    r = registry(fault("drop_response", api=5, id="d"))
    _, dropped = apply_control_faults(r, 5, stop_replica_body(), lambda b: applied.append(1) or {"error_code": 0})
    assert dropped and applied == [1]
    _, dropped = apply_control_faults(r, 5, stop_replica_body(), lambda b: {"error_code": 0})
    assert not dropped


# ------------------------------------------------------------------------------------------------- clock

def test_skewed_time_offsets_wall_clock_not_monotonic():
    base = MockTime(ms=1_000_000, ns=0)
    clock = SkewedTime(base)
    assert clock.milliseconds() == 1_000_000
    clock.set_skew(offset_ms=600_000)
    assert clock.milliseconds() == 1_600_000 and clock.nanoseconds() == 0
    clock.set_skew(offset_ms=-1000, drift_ppm=1000)     # 1 ms gained per second
    base.sleep(10_000)
    assert clock.milliseconds() == 1_000_000 + 10_000 - 1000 + 10
    assert clock.nanoseconds() == 10_000 * 1_000_000
    clock.set_skew()
    assert clock.milliseconds() == base.milliseconds()


def test_system_skewed_time_is_close_to_the_system_clock():
    clock = SkewedTime()
    assert abs(clock.milliseconds() - time.time() * 1000) < 1000
    clock.set_skew(offset_ms=600_000)
    assert abs(clock.milliseconds() - time.time() * 1000 - 600_000) < 1000


# ---------------------------------------------------------------------------------------------- scenario

def scenario(step: dict) -> dict:
    return {"name": "x", "cluster": {"brokers": 3}, "topics": [{"name": "t"}], "workloads": [],
            "schedule": [dict({"at": 1.0}, **step)]}


def test_scenario_request_fault_actions_validated():
    spec = from_dict(scenario({"action": "inject_errors", "target": 1, "api": "Produce",
                               "errors": ["NOT_LEADER_OR_FOLLOWER"], "count": 3, "topic": "t", "partition": 0}))
    assert spec.schedule[0].errors == ("NOT_LEADER_OR_FOLLOWER",) and spec.schedule[0].count == 3
    assert from_dict(scenario({"action": "clock_skew", "target": 2, "offset_ms": 600000})).schedule[0].offset_ms
    for bad, match in (({"action": "inject_errors", "target": 1, "api": "Nope", "errors": [6]}, "unknown API"),
                       ({"action": "inject_errors", "target": 1, "api": "Produce", "errors": ["BOOM"]},
                        "unknown error"),
                       ({"action": "inject_errors", "target": 1, "api": "Produce"}, "one of"),
                       ({"action": "inject_errors", "target": 1, "api": "Produce", "errors": [6],
                         "latency_ms": 5}, "one of"),
                       ({"action": "clock_skew", "target": 1}, "offset_ms"),
                       ({"action": "kill", "target": 1, "api": "Produce"}, "only for action")):
        with pytest.raises(ScenarioSpecError, match=match):
            from_dict(scenario(bad))


def test_fetch_partition_error_replaces_that_partitions_answer_only():
    header = types.SimpleNamespace(request_api_key=1, request_api_version=12, correlation_id=1)
    req = build(codec.REGISTRY[1][0], 12, {"replica_id": -1, "max_wait_ms": 0, "topics": [
        {"topic": "t", "partitions": [{"partition": p, "fetch_offset": 0} for p in (0, 1)]}]})

    class FetchApis:
        def handle(self, header, request, context):
            return build(codec.response_class(1), 12, {"responses": [{"topic": "t", "partitions": [
                {"partition_index": p, "error_code": 0, "high_watermark": 5, "records": b"xyz"} for p in (0, 1)]}]})
    h = fi.FaultInjectingHandler(FetchApis(), registry(fault(api=1, errors=(NLOF,), topic="t", partition=1, id="f")))
    r = h.handle(header, req, None)
    got = {p.partition_index: (p.error_code, p.high_watermark, p.records) for t in r.responses for p in t.partitions}
    assert got[0] == (0, 5, b"xyz")
    assert got[1][:2] == (NLOF, -1) and not got[1][2]


def test_build_faults_options():
    from kafkatier.cluster.request_faults import build_faults
    from kafkatier.common.errors import UsageError
    [f] = build_faults("Produce", errors="NOT_LEADER_OR_FOLLOWER, 7", count=2)
    assert f.errors == (6, 7) and f.total == 4 and f.describe() == "Produce NOT_LEADER_OR_FOLLOWER,REQUEST_TIMED_OUT x2"
    [f] = build_faults("Fetch", latency_ms=30)
    assert f.kind == "latency" and f.total is None
    [f] = build_faults(5, drop_response_nth=2)
    assert f.api_key == 5 and f.nth == 2
    for kw, match in (({"errors": "6", "count": 0}, "count"), ({"latency_ms": -1}, "positive"),
                      ({"close_connection_nth": 1, "api": "StopReplica"}, "control channel"), ({}, "one of")):
        with pytest.raises(UsageError, match=match):
            build_faults(kw.pop("api", "Produce"), **kw)
