"""Control-plane message classes: every version survives the znode dict form and the Kafka wire encoding."""
from __future__ import annotations

import json
import uuid

import pytest

from kafka.protocol.schemas.fields.codecs import Boolean, Int8, Int16, Int32, Int64, String, UUID

from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.control_messages import CONTROL_DATA, ControlMessageError, StopReplicaRequestData
from kafkatier.protocol.control_requests import (
    ControlledShutdownRequest, ControlledShutdownResponse, LeaderAndIsrRequest, LeaderAndIsrResponse,
    StopReplicaRequest, StopReplicaResponse, UpdateMetadataRequest, UpdateMetadataResponse, from_body,
    to_body,
)

_CASES = [
    (StopReplicaRequest, range(0, 6)),
    (StopReplicaResponse, range(0, 6)),
    (LeaderAndIsrRequest, range(0, 8)),
    (LeaderAndIsrResponse, range(0, 8)),
    (UpdateMetadataRequest, range(0, 9)),
    (UpdateMetadataResponse, range(0, 9)),
    (ControlledShutdownRequest, range(0, 4)),
    (ControlledShutdownResponse, range(0, 4)),
]
_PARAMS = [pytest.param(cls, v, id=f"{cls.__name__}-v{v}") for cls, versions in _CASES for v in versions]


def _sample(struct, version: int, seed: list[int]) -> dict:
    """A body with every field of ``version`` set to a non-default value (distinct numbers throughout)."""
    body = {}
    for field in struct._fields:
        if not field.for_version_q(version):
            continue
        seed[0] += 1
        n = seed[0]
        if field.is_struct_array():
            body[field.name] = [_sample(field.array_of, version, seed) for _ in range(2)]
        elif field.is_struct():
            body[field.name] = _sample(field, version, seed)
        elif field.is_array():
            body[field.name] = [n, n + 1, n + 2]
        else:
            kind = field._type
            if kind is Boolean:
                body[field.name] = True
            elif kind in (Int8, Int16):
                body[field.name] = n % 100 + 1
            elif kind in (Int32, Int64):
                body[field.name] = 1000 + n
            elif isinstance(kind, String):
                body[field.name] = f"s{n}"
            elif kind is UUID:
                body[field.name] = str(uuid.UUID(int=n))
            else:
                raise AssertionError(f"sample has no value for {field.name}")
    return body


@pytest.mark.parametrize("cls,version", _PARAMS)
def test_every_version_round_trips_through_dict_json_and_wire(cls, version):
    body = _sample(cls._struct, version, [0])

    msg = from_body(cls, version, json.loads(json.dumps(body)))
    assert to_body(msg) == body

    wire = bytes(msg.encode(version=version))
    decoded = cls.decode(wire, version=version)
    assert decoded == msg
    assert to_body(decoded) == body
    assert json.loads(json.dumps(to_body(decoded))) == body


def _stop_replica(version: int, disable: bool):
    P = StopReplicaRequest.StopReplicaTopicState.StopReplicaPartitionState
    T = StopReplicaRequest.StopReplicaTopicState
    return StopReplicaRequest(version=version, controller_id=1, controller_epoch=7, broker_epoch=25,
                              topic_states=[T(topic_name="orders", partition_states=[
                                  P(partition_index=0, leader_epoch=-2, delete_partition=False,
                                    disable_remote_partition=disable)])])


def test_stop_replica_v5_carries_disable_remote_partition_on_the_wire():
    msg = _stop_replica(5, True)
    decoded = StopReplicaRequest.decode(bytes(msg.encode(version=5)), version=5)
    state = decoded.topic_states[0].partition_states[0]
    assert state.disable_remote_partition is True
    assert state.delete_partition is False
    assert state.leader_epoch == -2
    assert to_body(decoded)["topic_states"][0]["partition_states"][0]["disable_remote_partition"] is True


def test_disable_remote_partition_defaults_false_and_is_absent_before_v5():
    P = StopReplicaRequest.StopReplicaTopicState.StopReplicaPartitionState
    assert P(partition_index=0, delete_partition=True).disable_remote_partition is False
    v4 = to_body(_stop_replica(4, True))
    assert "disable_remote_partition" not in v4["topic_states"][0]["partition_states"][0]
    # The flag is simply not representable in v4: asking for it is an error, not a silent drop.
    v4["topic_states"][0]["partition_states"][0]["disable_remote_partition"] = True
    with pytest.raises(ValueError, match="disable_remote_partition.*not part of version 4"):
        from_body(StopReplicaRequest, 4, v4)


def test_nested_objects_built_without_version_still_give_the_message_versions_fields():
    msg = _stop_replica(3, False)
    body = to_body(msg)
    assert set(body["topic_states"][0]["partition_states"][0]) == {"partition_index", "leader_epoch",
                                                                   "delete_partition"}
    assert from_body(StopReplicaRequest, 3, body) == msg


def test_from_body_rebuilds_nested_struct_instances():
    body = to_body(_stop_replica(5, True))
    msg = from_body(StopReplicaRequest, 5, body)
    topic = msg.topic_states[0]
    assert isinstance(topic, StopReplicaRequest.StopReplicaTopicState)
    assert isinstance(topic.partition_states[0], StopReplicaRequest.StopReplicaTopicState.StopReplicaPartitionState)
    assert msg.version == 5


@pytest.mark.parametrize("mutate,message,typed", [
    (lambda b: b.update(bogus=1), "unknown field 'bogus'", "StopReplicaRequest: unknown field 'bogus'"),
    (lambda b: b["topic_states"][0].update(nope=True), r"topic_states\[0\]: unknown field 'nope'",
     r"topic_states\[\]: unknown field 'nope'"),
    (lambda b: b.update(controller_id="1"), "controller_id: expected an integer", "controller_id: expected an int32"),
    (lambda b: b.update(controller_id=True), "controller_id: expected an integer", "controller_id: expected an int32"),
    (lambda b: b.update(controller_epoch=2**31), "out of range", "controller_epoch: expected an int32"),
    (lambda b: b["topic_states"][0]["partition_states"][0].update(delete_partition=1), "expected true/false",
     "delete_partition: expected true/false"),
    (lambda b: b.update(topic_states={}), "expected a list", "topic_states: expected a list"),
    (lambda b: b["topic_states"][0].update(topic_name=None), "null is not allowed", "topic_name: null is not allowed"),
    (lambda b: b.update(delete_partitions=True), "not part of version 5", "'delete_partitions' is not part of version 5"),
])
def test_bad_bodies_are_rejected_with_a_clear_error(mutate, message, typed):
    body = to_body(_stop_replica(5, True))
    mutate(body)
    with pytest.raises(ValueError, match=message):
        from_body(StopReplicaRequest, 5, body)
    # The broker reads the body into its typed message and refuses it too, naming the path.
    with pytest.raises(ControlMessageError, match=typed):
        StopReplicaRequestData.from_json(5, body)


@pytest.mark.parametrize("cls,version", _PARAMS)
def test_the_typed_messages_read_every_valid_body_of_every_version(cls, version):
    body = json.loads(json.dumps(_sample(cls._struct, version, [0])))
    data = CONTROL_DATA[ApiKeys(cls.API_KEY)][0 if cls.json["type"] == "request" else 1]
    msg = data.from_json(version, body)
    assert json.loads(json.dumps(msg.to_json(version))) == body   # the same body back, at every version
    with pytest.raises(ControlMessageError, match="version"):
        data.from_json(cls.max_version + 1, body)
    with pytest.raises(ControlMessageError, match="expected an object"):
        data.from_json(version, [body])


def test_from_body_rejects_unknown_versions_and_non_mapping_bodies():
    with pytest.raises(ValueError, match="version 6"):
        from_body(StopReplicaRequest, 6, {})
    with pytest.raises(ValueError, match="mapping"):
        from_body(StopReplicaRequest, 5, [])


def test_to_body_needs_a_version():
    with pytest.raises(ValueError, match="no version"):
        to_body(StopReplicaRequest(controller_id=1))


def test_missing_keys_take_spec_defaults():
    msg = from_body(StopReplicaRequest, 5, {"controller_id": 3, "controller_epoch": 4})
    assert msg.broker_epoch == -1
    assert msg.is_k_raft_controller is False
    assert msg.topic_states == []


def test_leader_and_isr_type_field_does_not_break_the_class():
    # A top-level field named Type shadows kafka-python's `type` class property; the class still knows it
    # is a request, and its response class registers under api key 4.
    from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry

    assert LeaderAndIsrRequest.is_request() and UpdateMetadataRequest.is_request()
    assert LeaderAndIsrRequest.header_class is RequestHeader
    assert not LeaderAndIsrResponse.is_request()
    assert ResponseClassRegistry._response_class_registry[4].__name__ == "LeaderAndIsrResponse"
    assert ResponseClassRegistry._response_class_registry[6].__name__ == "UpdateMetadataResponse"


def test_versioned_class_works_with_from_body_and_leader_and_isr_v7_fields():
    T = LeaderAndIsrRequest.LeaderAndIsrTopicState
    P = T.LeaderAndIsrPartitionState
    tid = uuid.uuid4()
    msg = LeaderAndIsrRequest[7](controller_id=0, controller_epoch=3, broker_epoch=99, type=0,
                                 topic_states=[T(topic_name="t", topic_id=tid, partition_states=[
                                     P(partition_index=1, controller_epoch=3, leader=0, leader_epoch=5,
                                       isr=[0, 1], partition_epoch=8, replicas=[0, 1], adding_replicas=[],
                                       removing_replicas=[], is_new=True, leader_recovery_state=0)])],
                                 live_leaders=[LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
                                     broker_id=0, host_name="127.0.0.1", port=9092)])
    body = to_body(msg)
    assert body["topic_states"][0]["topic_id"] == str(tid)
    assert body["topic_states"][0]["partition_states"][0]["partition_epoch"] == 8
    again = from_body(LeaderAndIsrRequest[7], 7, body)
    assert again == msg
    assert LeaderAndIsrRequest.decode(bytes(again.encode()), version=7) == msg
