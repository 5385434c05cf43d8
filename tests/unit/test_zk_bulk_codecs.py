"""The fast paths of the znode codecs read in bulk (a controller failover reads every partition's state and
writes thousands; the control channel writes bodies of megabytes) give exactly what the schema-checked paths
give, and refuse what they refuse."""
from __future__ import annotations

import json

import pytest

from kafkatier.common.structs import LeaderAndIsr
from kafkatier.zk import codecs, control_parts
from kafkatier.zk.kafka_zk_client import _encode_state, _leader_and_isr
from kafkatier.zk.limits import MAX_ZNODE_BYTES, ZNodeTooLargeError
from kafkatier.zk.schemas import schema_errors


def _schema_form(leader, leader_epoch, isr, controller_epoch, recovery=0) -> bytes:
    js = {"version": 1, "leader": leader, "leader_epoch": leader_epoch, "controller_epoch": controller_epoch,
          "isr": list(isr)}
    if recovery:
        js["leader_recovery_state"] = recovery
    return json.dumps(js, separators=(",", ":")).encode()


@pytest.mark.parametrize("fields", [(1, 0, (1, 2, 3), 0), (-1, -2, (), -1), (2147483647, 2147483647, (0,), 5),
                                    (3, 7, (3, 1), 2, 1), (-2, -2, (4, 5), 9, 0)])
def test_a_partition_state_is_written_byte_for_byte_as_the_schema_path_writes_it(fields):
    data = codecs.encode_partition_state(*fields)
    assert data == _schema_form(*fields)
    assert schema_errors("partition_state", json.loads(data)) == []
    assert codecs.partition_state_fields(data) == (fields[0], fields[1], tuple(fields[2]), fields[3],
                                                   fields[4] if len(fields) > 4 else 0)
    l = LeaderAndIsr(fields[0], fields[1], tuple(fields[2]), fields[3], 4, fields[4] if len(fields) > 4 else 0)
    assert _encode_state(l) == data and _leader_and_isr(data, 4) == l


@pytest.mark.parametrize("fields", [(-3, 0, (1,), 0), (1, 0, (1, 1), 0), (1, 0, (-1,), 0), (1, 0, (1,), -2),
                                    (True, 0, (1,), 0), (1, 0, (1,), 0, 2), (1, 2147483648, (1,), 0)])
def test_a_partition_state_the_schema_refuses_is_refused(fields):
    with pytest.raises(ValueError):
        codecs.encode_partition_state(*fields)
    with pytest.raises(codecs.MalformedZNodeError):
        codecs.partition_state_fields(_schema_form(*fields))


@pytest.mark.parametrize("payload", [b' {"version":1,"leader":1,"leader_epoch":0,"controller_epoch":0,"isr":[1]}\n',
                                     b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":0,"isr":[1],"x":1}',
                                     b'{"version":1,"leader":1,"leader_epoch":0.0,"controller_epoch":0,"isr":[1]}'])
def test_a_state_the_fast_check_does_not_know_is_read_through_the_schema(payload):
    assert codecs.partition_state_fields(payload)[:3] == (1, 0, (1,))


@pytest.mark.parametrize("payload", [b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":0,"isr":[1]} x',
                                     b'{"version":1,"leader":NaN,"leader_epoch":0,"controller_epoch":0,"isr":[1]}',
                                     b'{"version":2,"leader":1,"leader_epoch":0,"controller_epoch":0,"isr":[1]}',
                                     b'', b'[1]'])
def test_a_malformed_state_is_refused(payload):
    with pytest.raises(codecs.MalformedZNodeError):
        codecs.partition_state_fields(payload)


def _request(body) -> codecs.ControlRequest:
    return codecs.ControlRequest(api_key=6, api_version=8, api_name="UpdateMetadata", controller_id=1,
                                 controller_epoch=3, broker_epoch=100, body=body)


def test_a_control_envelope_carries_its_body_serialised_once_as_before():
    body = {"controller_id": 1, "topic_states": [{"topic_name": "t", "partition_states": [{"leader": 2}]}]}
    req = _request(body)
    data = req.encode()
    assert json.loads(data) == {"version": 1, "api_key": 6, "api_name": "UpdateMetadata", "api_version": 8,
                                "controller_id": 1, "controller_epoch": 3, "broker_epoch": 100, "body": body}
    assert req.encode(body_text=codecs.dump_body(body)) == data
    assert codecs.ControlRequest.decode(data) == req
    resp = codecs.ControlResponse(api_key=6, api_version=8, error_code=0, body={"error_code": 0}, broker_id=2,
                                  broker_epoch=7)
    assert codecs.ControlResponse.decode(resp.encode()) == resp


def test_a_control_envelope_the_schema_refuses_is_refused():
    with pytest.raises(ValueError):
        _request({"x": float("nan")}).encode()
    with pytest.raises(ValueError):
        codecs.ControlRequest(api_key=6, api_version=8, api_name="", controller_id=1, controller_epoch=3,
                              broker_epoch=100, body={}).encode()
    bad = json.loads(_request({}).encode())
    for change in ({"extra": 1}, {"api_key": -1}, {"body": []}, {"controller_id": "1"}):
        with pytest.raises(codecs.MalformedZNodeError):
            codecs.ControlRequest.decode(json.dumps({**bad, **change}).encode())


def test_a_body_too_large_for_the_envelope_is_split_from_the_same_text():
    body = {"topic_states": [{"topic_name": f"t{i}", "partition_states": [{"p": j} for j in range(50)]}
                             for i in range(2_500)]}
    text = codecs.dump_body(body)
    assert len(text) > MAX_ZNODE_BYTES
    with pytest.raises(ZNodeTooLargeError):
        _request(body).encode(body_text=text)
    ref, parts = control_parts.split_body(body, text=text)
    assert control_parts.join_body(ref, parts) == body


def test_a_remembered_state_payload_reads_the_same_and_an_error_names_its_path():
    data = codecs.encode_partition_state(2, 4, (2, 3), 1)
    assert codecs.partition_state_fields(data) is codecs.partition_state_fields(data)
    assert codecs.partition_state_fields(bytearray(data)) == (2, 4, (2, 3), 1, 0)
    bad = b'{"version":1,"leader":"x","leader_epoch":0,"controller_epoch":0,"isr":[1]}'
    for path in ("/brokers/topics/a/partitions/0/state", "/brokers/topics/b/partitions/1/state"):
        with pytest.raises(codecs.MalformedZNodeError, match=path):
            codecs.partition_state_fields(bad, path)
