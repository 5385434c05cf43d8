"""ControlledShutdown (apiKey 7) typed end to end: the handler and the shutting-down broker use
``ControlledShutdownRequestData`` / ``ControlledShutdownResponseData``; the bytes on the wire are those the
kafka-python classes of the same spec wrote before."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from kafkatier.common.structs import TopicPartition
from kafkatier.protocol.control_messages import (ControlledShutdownRemainingPartition, ControlledShutdownRequestData,
                                                 ControlledShutdownResponseData, ControlMessageError)
from kafkatier.protocol.control_requests import ControlledShutdownRequest, ControlledShutdownResponse
from kafkatier.protocol.errors import Errors, StaleBrokerEpochError
from kafkatier.server.config import BrokerSettingError
from kafkatier.server.controlled_shutdown import ControlledShutdownApis, ControlledShutdownConfig
from kafkatier.server.fetch_session import FetchSessionCache
from kafkatier.server.quota_factory import ClientQuotas

REMAINING = (TopicPartition("orders", 0), TopicPartition("orders", 2), TopicPartition("z", 1))


def _old_request(v: int) -> bytes:
    kw = {"broker_id": 3, "broker_epoch": 4711} if v >= 2 else {"broker_id": 3}
    return bytes(ControlledShutdownRequest[v](**kw).encode(version=v))


def _old_response(v: int, error: int, remaining) -> bytes:
    return bytes(ControlledShutdownResponse[v](error_code=error, remaining_partitions=[
        ControlledShutdownResponse.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
        for tp in remaining]).encode(version=v))


@pytest.mark.parametrize("v", [0, 1, 2, 3])
def test_the_typed_request_encodes_as_before(v):
    data = ControlledShutdownRequestData(broker_id=3, broker_epoch=4711 if v >= 2 else -1)
    assert bytes(data.to_wire(v).encode(version=v)) == _old_request(v)


@pytest.mark.parametrize("v", [0, 1, 2, 3])
def test_the_typed_response_encodes_as_before_and_reads_back(v):
    data = ControlledShutdownResponseData(error_code=0, remaining_partitions=tuple(
        ControlledShutdownRemainingPartition(topic_name=tp.topic, partition_index=tp.partition) for tp in REMAINING))
    wire = bytes(data.to_wire(v).encode(version=v))
    assert wire == _old_response(v, 0, REMAINING)
    assert ControlledShutdownResponseData.from_wire(ControlledShutdownResponse.decode(wire, version=v)) == data


def test_a_request_decoded_from_the_wire_is_typed():
    req = ControlledShutdownRequest.decode(_old_request(3), version=3)
    assert ControlledShutdownRequestData.from_wire(req) == ControlledShutdownRequestData(broker_id=3,
                                                                                         broker_epoch=4711)


def test_an_epoch_set_at_a_version_without_one_is_refused_not_dropped():
    with pytest.raises(ControlMessageError, match="broker_epoch"):
        ControlledShutdownRequestData(broker_id=3, broker_epoch=7).to_wire(1)


def test_from_wire_refuses_another_spec_message():
    with pytest.raises(ControlMessageError, match="expected a ControlledShutdownResponse"):
        ControlledShutdownResponseData.from_wire(ControlledShutdownRequest[3](broker_id=1))


class _Controller:
    def __init__(self, result=None, error=None):
        self.asked = []
        self.result, self.error = result, error

    def controlled_shutdown(self, broker_id, broker_epoch):
        self.asked.append((broker_id, broker_epoch))
        f: Future = Future()
        f.set_exception(self.error) if self.error else f.set_result(self.result)
        return f


def _handle(apis, v):
    req = ControlledShutdownRequest.decode(_old_request(v), version=v)
    out = apis.handle_controlled_shutdown(SimpleNamespace(request_api_version=v), req, None)
    assert out.done()
    return bytes(out.result().encode(version=v))


@pytest.mark.parametrize("v", [1, 3])
def test_the_handler_answers_the_same_bytes_as_before(v):
    controller = _Controller(result={REMAINING[2], REMAINING[0], REMAINING[1]})
    assert _handle(ControlledShutdownApis(controller), v) == _old_response(v, 0, REMAINING)
    assert controller.asked == [(3, 4711 if v >= 2 else -1)]


def test_the_handler_answers_the_controllers_error_with_no_partitions():
    apis = ControlledShutdownApis(_Controller(error=StaleBrokerEpochError("old epoch")))
    assert _handle(apis, 3) == _old_response(3, int(Errors.STALE_BROKER_EPOCH), ())


def test_the_handler_refuses_a_broker_without_cluster_action():
    class Deny:
        def authorize_cluster(self, context, operation):
            return False
    controller = _Controller(result=set())
    assert _handle(ControlledShutdownApis(controller, Deny()), 3) == \
        _old_response(3, int(Errors.CLUSTER_AUTHORIZATION_FAILED), ())
    assert controller.asked == []


def test_settings_are_read_through_their_definitions():
    assert ControlledShutdownConfig.from_props({"controlled.shutdown.enable": "False",
                                                "controlled.shutdown.max.retries": "0"}) == \
        ControlledShutdownConfig(False, 1, 5000, 30000)
    with pytest.raises(BrokerSettingError, match="controlled.shutdown.retry.backoff.ms"):
        ControlledShutdownConfig.from_props({"controlled.shutdown.retry.backoff.ms": "soon"})
    cache = FetchSessionCache.from_props({"max.incremental.fetch.session.cache.slots": "5"})
    assert (cache.max_entries, cache.eviction_ms) == (5, 120000)
    with pytest.raises(BrokerSettingError, match="at least 0"):
        FetchSessionCache.from_props({"max.incremental.fetch.session.cache.slots": "-1"})
    with pytest.raises(BrokerSettingError, match="quota.window.num"):
        ClientQuotas.from_props({"quota.window.num": "0"})
    assert ClientQuotas.from_props({}).produce is not None
