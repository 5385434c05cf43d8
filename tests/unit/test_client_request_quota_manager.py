"""The request-time quota (KIP-124, ``request_percentage``): thread time as percent of one thread, Kafka's throttle
time bounded by one quota window, and the throttled answer (``throttle_time_ms`` set, channel muted; a throttled
Fetch answered without records)."""
from __future__ import annotations

from concurrent.futures import Future

import pytest

from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol import codec
from kafkatier.server.client_quota_manager import QuotaEntity
from kafkatier.server.client_request_quota_manager import ClientRequestQuotaManager, nanos_to_percentage
from kafkatier.server.kafka_apis import REQUEST_QUOTA_EXEMPT, KafkaApis
from kafkatier.server.network import CloseConnection, MuteAfterResponse
from kafkatier.server.quota_factory import ClientQuotas

from tests.unit.fakes import ManualClock

ALICE = QuotaEntity("alice", "app")


def test_thread_time_is_percent_of_one_second():
    assert nanos_to_percentage(10_000_000) == pytest.approx(1.0)     # 10 ms of a second: 1 %
    assert nanos_to_percentage(1_000_000_000) == pytest.approx(100.0)


def test_over_the_percentage_the_throttle_is_kafkas_formula_bounded_by_one_window():
    clock = ManualClock()
    m = ClientRequestQuotaManager(samples=3, window_s=1.0, clock=clock)
    assert m.record_and_get_throttle_time_ms(ALICE, 10**9) == 0   # no quota: never throttled
    m.update_quota("alice", None, 10.0)                           # 10 % of a thread
    # 30 ms over a 2 s window: 1.5 % < 10 %
    assert m.record_and_get_throttle_time_ms(ALICE, 30_000_000) == 0
    # 300 ms more: 16.5 % -> (16.5 - 10) / 10 * 2 s = 1300 ms, bounded by the 1 s window
    assert m.record_and_get_throttle_time_ms(ALICE, 300_000_000) == 1000
    assert m.throttle_time_ms(ALICE) == 1000 and m.throttle_time_ms(QuotaEntity("bob", "app")) == 0
    clock.now += 10   # the samples expired
    assert m.throttle_time_ms(ALICE) == 0


def test_record_charges_without_throttling_and_a_small_excess_is_not_bounded():
    clock = ManualClock()
    m = ClientRequestQuotaManager(samples=3, window_s=1.0, clock=clock)
    m.update_quota(None, "app", 10.0)
    m.record(ALICE, 240_000_000)   # 12 % over 2 s
    assert m.throttle_time_ms(ALICE) == 400


def test_the_factory_applies_request_percentage_from_the_quota_znode():
    quotas = ClientQuotas(samples=3, window_s=1.0)
    assert not quotas.request.quotas_enabled
    quotas.on_user_change("alice", {"request_percentage": "25"})
    assert quotas.request.quota_for(ALICE) == (("alice", None), 25.0)
    assert not quotas.produce.quotas_enabled and not quotas.fetch.quotas_enabled
    quotas.on_user_change("alice", {})
    assert not quotas.request.quotas_enabled


def test_controller_and_authentication_requests_are_exempt():
    assert {ApiKeys.LEADER_AND_ISR, ApiKeys.STOP_REPLICA, ApiKeys.UPDATE_METADATA, ApiKeys.SASL_HANDSHAKE,
            ApiKeys.SASL_AUTHENTICATE} <= REQUEST_QUOTA_EXEMPT
    assert ApiKeys.METADATA not in REQUEST_QUOTA_EXEMPT


def _apis() -> KafkaApis:
    return KafkaApis.__new__(KafkaApis)   # _throttled uses no collaborator


def test_a_throttled_answer_carries_the_time_and_mutes_the_channel():
    resp = build(codec.response_class(ApiKeys.LIST_GROUPS), 4, {"throttle_time_ms": 0, "error_code": 0,
                                                               "groups": []})
    out = _apis()._throttled(resp, 300)
    assert isinstance(out, MuteAfterResponse) and out.mute_ms == 300 and out.response.throttle_time_ms == 300
    # a byte-rate throttle already there: the larger one wins
    out = _apis()._throttled(MuteAfterResponse(resp, 800), 300)
    assert out.mute_ms == 800 and out.response.throttle_time_ms == 800
    assert isinstance(_apis()._throttled(CloseConnection(), 300), CloseConnection)
    assert _apis()._throttled(None, 300) is None


def test_a_throttled_asynchronous_answer_mutes_the_channel_at_once_and_carries_the_time():
    """The throttle is charged when the handler returns: the network layer is told at once (a ``MuteAfterResponse``
    of the pending answer), and the answer carries ``throttle_time_ms`` when it completes."""
    fut: Future = Future()
    out = _apis()._throttled(fut, 120)
    assert isinstance(out, MuteAfterResponse) and out.mute_ms == 120
    assert isinstance(out.response, Future) and not out.response.done()
    resp = build(codec.response_class(ApiKeys.LIST_GROUPS), 4, {"throttle_time_ms": 0, "error_code": 0,
                                                               "groups": []})
    fut.set_result(resp)
    assert out.response.result().mute_ms == 120 and out.response.result().response.throttle_time_ms == 120
    failed: Future = Future()
    out = _apis()._throttled(failed, 120)
    failed.set_exception(RuntimeError("boom"))
    with pytest.raises(RuntimeError):
        out.response.result()
    # a pending answer already muted by its handler (a Produce's byte rate): the larger throttle
    out = _apis()._throttled(MuteAfterResponse(Future(), 800), 300)
    assert out.mute_ms == 800 and isinstance(out.response, Future)


def test_a_consumer_reads_at_most_its_quota_window():
    from kafkatier.server.client_quota_manager import ClientQuotaManager
    m = ClientQuotaManager("consumer_byte_rate", samples=3, window_s=1.0, clock=ManualClock())
    assert m.max_value_in_quota_window(ALICE) == 2 ** 31 - 1
    m.update_quota(None, "app", 1000.0)
    assert m.max_value_in_quota_window(ALICE) == 2000   # quota * (samples - 1) * window


def test_unrecord_takes_back_a_throttled_fetchs_bytes():
    from kafkatier.server.client_quota_manager import ClientQuotaManager
    clock = ManualClock()
    m = ClientQuotaManager("consumer_byte_rate", samples=3, window_s=1.0, clock=clock)
    m.update_quota(None, "app", 1000.0)
    assert m.record_and_get_throttle_time_ms(ALICE, 10_000) > 0
    m.unrecord(ALICE, 10_000)
    assert m.record_and_get_throttle_time_ms(ALICE, 1_000) == 0
