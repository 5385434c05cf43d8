"""Znode codecs: Kafka 3.x payloads decode, our writes round-trip and match Kafka's shape, and anything
malformed becomes MalformedZNodeError."""
from __future__ import annotations

import base64
import json
import logging
import uuid
from types import SimpleNamespace

import pytest
from jsonschema import Draft202012Validator

from kafkatier.zk import codecs as c
from kafkatier.zk import schemas


def js(data: bytes):
    return json.loads(data)


# ------------------------------------------------------------------------------------------ Kafka's own examples

def test_controller_v2_and_v1_decode():
    v2 = c.ControllerZNode.decode(b'{"version":2,"brokerid":3,"timestamp":"1700000000000","kraftControllerEpoch":-1}')
    assert v2 == c.ControllerZNode(3, 1700000000000, -1)
    v1 = c.ControllerZNode.decode(b'{"version":1,"brokerid":2,"timestamp":"1600000000000"}')
    assert v1 == c.ControllerZNode(2, 1600000000000)


def test_controller_encodes_version_2_with_string_timestamp():
    assert js(c.ControllerZNode(1, 1700000000123).encode()) == {
        "version": 2, "brokerid": 1, "timestamp": "1700000000123", "kraftControllerEpoch": -1}


def test_controller_epoch_is_plain_integer_text():
    assert c.encode_controller_epoch(5) == b"5"
    assert c.decode_controller_epoch(b"5") == 5
    assert c.decode_controller_epoch(b"0") == 0


def test_broker_registration_v5_example():
    data = (b'{"version":5,"host":"127.0.0.1","port":9092,"jmx_port":-1,"timestamp":"1700000000000",'
            b'"endpoints":["PLAINTEXT://127.0.0.1:9092"],"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
            b'"rack":"r1","features":{"metadata.version":{"min_version":1,"max_version":19}}}')
    reg = c.BrokerRegistration.decode(data, path="/brokers/ids/7", stat=SimpleNamespace(czxid=4294967335))
    assert reg.id == 7 and reg.host == "127.0.0.1" and reg.port == 9092 and reg.rack == "r1"
    assert reg.endpoints == ("PLAINTEXT://127.0.0.1:9092",)
    assert reg.features == {"metadata.version": {"min_version": 1, "max_version": 19}}
    assert reg.broker_epoch == 4294967335
    assert reg.endpoint("PLAINTEXT") == c.Endpoint("PLAINTEXT", "127.0.0.1", 9092)
    assert js(reg.encode()) == js(data) | {"timestamp": "1700000000000"}


def test_broker_registration_v4_decodes_without_features():
    data = (b'{"version":4,"host":"h","port":9092,"jmx_port":9999,"timestamp":"1",'
            b'"endpoints":["PLAINTEXT://h:9092"],"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"}}')
    reg = c.BrokerRegistration.decode(data, broker_id=1)
    assert reg.version == 4 and reg.features == {} and reg.rack is None and reg.jmx_port == 9999
    out = js(reg.encode())
    assert out["version"] == 5 and out["features"] == {} and "rack" not in out


def test_broker_registration_host_port_follow_first_plaintext_endpoint():
    reg = c.BrokerRegistration.create(2, ["SSL://h1:9093", "INTERNAL://h2:9094"],
                                      {"SSL": "SSL", "INTERNAL": "PLAINTEXT"}, 5)
    assert (reg.host, reg.port) == ("h2", 9094)
    none = c.BrokerRegistration.create(2, ["SSL://h1:9093"], {"SSL": "SSL"}, 5)
    out = js(none.encode())
    assert out["host"] is None and out["port"] == -1
    assert set(out) == {"version", "host", "port", "jmx_port", "timestamp", "endpoints",
                        "listener_security_protocol_map", "features"}


@pytest.mark.parametrize("text,expected", [
    ("PLAINTEXT://127.0.0.1:9092", ("PLAINTEXT", "127.0.0.1", 9092)),
    ("CLIENT://:9092", ("CLIENT", "", 9092)),
    ("SSL://[::1]:9093", ("SSL", "::1", 9093)),
])
def test_parse_endpoint(text, expected):
    ep = c.parse_endpoint(text)
    assert (ep.listener, ep.host, ep.port) == expected
    assert str(ep) == text


@pytest.mark.parametrize("text", ["127.0.0.1:9092", "PLAINTEXT://host", "PLAINTEXT://h:99999", ""])
def test_parse_endpoint_rejects(text):
    with pytest.raises(ValueError):
        c.parse_endpoint(text)


def test_topic_assignment_v3_example():
    data = (b'{"version":3,"partitions":{"0":[1,2,3],"1":[2,3,1]},"adding_replicas":{"0":[3]},'
            b'"removing_replicas":{"0":[1]},"topic_id":"LWgrMmVrT0a__7a4SasuPA"}')
    ta = c.TopicAssignment.decode(data)
    assert ta.partitions == {0: (1, 2, 3), 1: (2, 3, 1)}
    assert ta.adding == {0: (3,)} and ta.removing == {0: (1,)}
    assert ta.topic_id == "LWgrMmVrT0a__7a4SasuPA"
    assert js(ta.encode()) == js(data)
    ra = ta.replica_assignment(0)
    assert ra.origin == (1, 2) and ra.target == (2, 3) and ra.is_being_reassigned
    assert not ta.replica_assignment(1).is_being_reassigned


def test_topic_assignment_v1_v2_decode_missing_adding_removing_as_empty():
    for v in (1, 2):
        ta = c.TopicAssignment.decode(json.dumps({"version": v, "partitions": {"0": [1, 2]}}).encode())
        assert ta == c.TopicAssignment({0: (1, 2)})
        out = js(ta.encode())
        assert out == {"version": 3, "partitions": {"0": [1, 2]}, "adding_replicas": {}, "removing_replicas": {}}


def test_topic_assignment_writes_only_non_empty_adding_removing():
    ta = c.TopicAssignment.from_replica_assignments(
        {0: c.ReplicaAssignment((1, 2)), 1: c.ReplicaAssignment((1, 2, 3), adding=(3,))})
    assert js(ta.encode()) == {"version": 3, "partitions": {"0": [1, 2], "1": [1, 2, 3]},
                               "adding_replicas": {"1": [3]}, "removing_replicas": {}}


def test_replica_assignment_reassign_to():
    ra = c.ReplicaAssignment((1, 2, 3)).reassign_to((4, 5, 6))
    assert ra.replicas == (4, 5, 6, 1, 2, 3)
    assert ra.adding == (4, 5, 6) and ra.removing == (1, 2, 3)
    assert ra.origin == (1, 2, 3) and ra.target == (4, 5, 6)
    assert ra.complete() == c.ReplicaAssignment((4, 5, 6))
    # Overlapping target keeps shared replicas out of adding/removing.
    ra2 = c.ReplicaAssignment((1, 2, 3)).reassign_to((2, 3, 4))
    assert ra2.replicas == (2, 3, 4, 1) and ra2.adding == (4,) and ra2.removing == (1,)


def test_new_topic_id_shape():
    for _ in range(200):
        tid = c.new_topic_id()
        assert len(tid) == 22 and not tid.startswith("-")
        assert c.topic_id_str(c.parse_topic_id(tid)) == tid
        assert base64.urlsafe_b64decode(tid + "==") == c.parse_topic_id(tid).bytes


def test_new_topic_id_skips_reserved_and_dash(monkeypatch):
    dash = uuid.UUID(bytes=base64.urlsafe_b64decode("-" + "A" * 21 + "=="))
    good = uuid.UUID("12345678-1234-4234-8234-123456789abc")
    draws = iter([uuid.UUID(int=0), uuid.UUID(int=1), dash, good])
    monkeypatch.setattr(c.uuid, "uuid4", lambda: next(draws))
    assert c.new_topic_id() == c.topic_id_str(good)


def test_partition_state_example_and_partition_epoch_from_stat():
    data = b'{"version":1,"leader":1,"leader_epoch":4,"controller_epoch":7,"isr":[1,2]}'
    st = c.decode_partition_state(data, SimpleNamespace(version=9))
    assert st == c.LeaderIsrAndControllerEpoch(1, 4, (1, 2), 7, 0, partition_epoch=9)
    assert c.decode_partition_state(data).partition_epoch == c.UNKNOWN_ZK_VERSION
    assert js(st.encode()) == js(data)


def test_partition_state_writes_leader_recovery_state_only_when_recovering():
    recovering = c.LeaderIsrAndControllerEpoch(1, 4, (1,), 7, leader_recovery_state=1)
    assert js(recovering.encode())["leader_recovery_state"] == 1
    assert c.LeaderIsrAndControllerEpoch.decode(recovering.encode()).leader_recovery_state == 1
    assert "leader_recovery_state" not in js(c.LeaderIsrAndControllerEpoch(1, 4, (1,), 7).encode())


def test_partition_state_delete_sentinels_encode():
    st = c.LeaderIsrAndControllerEpoch(c.LEADER_DURING_DELETE, c.EPOCH_DURING_DELETE, (), 3)
    assert c.LeaderIsrAndControllerEpoch.decode(st.encode()) == st.__class__(-2, -2, (), 3, partition_epoch=-2)


def test_entity_config_values_are_strings():
    data = b'{"version":1,"config":{"retention.ms":"1000","remote.storage.enable":"true"}}'
    cfg = c.EntityConfig.decode(data)
    assert cfg.config == {"retention.ms": "1000", "remote.storage.enable": "true"}
    assert js(cfg.encode()) == js(data)


def test_config_change_notification_v2_write_and_v1_read():
    n = c.ConfigChangeNotification.of("topics", "orders")
    assert js(n.encode()) == {"version": 2, "entity_path": "topics/orders"}
    v1 = c.ConfigChangeNotification.decode(b'{"version":1,"entity_type":"topics","entity_name":"orders"}')
    assert v1 == n and v1.entity_type == "topics" and v1.entity_name == "orders"
    assert c.ConfigChangeNotification.decode(b'{"version":2,"entity_path":"brokers/1"}').entity_name == "1"


def test_reassign_partitions_example():
    data = b'{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2]}]}'
    r = c.ReassignPartitions.decode(data)
    assert r.partitions == {("foo", 0): (1, 2)}
    assert js(r.encode()) == js(data)


def test_reassign_partitions_ignores_log_dirs_with_warning(caplog):
    logger = logging.getLogger("kafkatier.zk.codecs")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="kafkatier.zk.codecs"):
            r = c.ReassignPartitions.decode(
                b'{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],'
                b'"log_dirs":["any","any"]}]}')
    finally:
        logger.removeHandler(caplog.handler)
    assert r.partitions == {("foo", 0): (1, 2)}
    assert "log_dirs" not in r.encode().decode()
    assert any("log_dirs" in rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize("cls", [c.PreferredReplicaElection, c.IsrChangeNotification])
def test_partition_list_payloads(cls):
    data = b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"t","partition":1}]}'
    v = cls.decode(data)
    assert v.partitions == {("t", 0), ("t", 1)}
    assert js(v.encode()) == js(data)


def test_log_dir_event_notification():
    data = b'{"version":1,"broker":3,"event":1}'
    v = c.LogDirEventNotification.decode(data)
    assert v == c.LogDirEventNotification(3)
    assert js(v.encode()) == js(data)


def test_feature_v2_write_and_v1_read():
    f = c.FeatureZNode({"metadata.version": 7})
    assert js(f.encode()) == {"version": 2, "status": 1, "features": {"metadata.version": {"max_version_level": 7}}}
    v1 = c.FeatureZNode.decode(
        b'{"version":1,"status":1,"features":{"f":{"min_version_level":1,"max_version_level":2}}}')
    assert v1 == c.FeatureZNode({"f": 2})
    disabled = c.FeatureZNode.decode(b'{"version":1,"status":0,"features":{}}')
    assert disabled.status == c.FEATURE_STATUS_DISABLED


def test_cluster_id_version_is_a_string():
    data = b'{"version":"1","id":"h6Lb4nwWQ_2bK3AiYjwN3w"}'
    v = c.ClusterIdZNode.decode(data)
    assert v.id == "h6Lb4nwWQ_2bK3AiYjwN3w"
    assert js(v.encode()) == {"version": "1", "id": "h6Lb4nwWQ_2bK3AiYjwN3w"}


@pytest.mark.parametrize("state", ["ENABLED", "DISABLING", "DISABLED"])
def test_tiered_state(state):
    v = c.TieredState(state)
    assert js(v.encode()) == {"version": 1, "state": state}
    assert c.TieredState.decode(v.encode()) == v


def test_tiered_epoch_plain_integer():
    assert c.encode_tiered_epoch(0) == b"0"
    assert c.decode_tiered_epoch(b"3") == 3
    with pytest.raises(ValueError):
        c.encode_tiered_epoch(-1)


def test_control_request_envelope():
    body = {"controller_id": 1, "is_kraft_controller": False, "controller_epoch": 3, "broker_epoch": 4294967335,
            "topic_states": [{"topic_name": "t", "partition_states": [
                {"partition_index": 0, "leader_epoch": -1, "delete_partition": False,
                 "disable_remote_partition": True}]}]}
    req = c.ControlRequest(api_key=5, api_version=5, api_name="StopReplica", controller_id=1, controller_epoch=3,
                           broker_epoch=4294967335, body=body)
    assert js(req.encode()) == {"version": 1, "api_key": 5, "api_name": "StopReplica", "api_version": 5,
                                "controller_id": 1, "controller_epoch": 3, "broker_epoch": 4294967335,
                                "body": body}
    assert c.ControlRequest.decode(req.encode()) == req


def test_control_response_envelope():
    resp = c.ControlResponse(api_key=5, api_version=5, error_code=0, broker_id=2, broker_epoch=4294967335,
                             body={"error_code": 0, "partition_errors": []})
    assert js(resp.encode()) == {"version": 1, "api_key": 5, "api_version": 5, "broker_id": 2,
                                 "broker_epoch": 4294967335, "error_code": 0,
                                 "body": {"error_code": 0, "partition_errors": []}}
    assert c.ControlResponse.decode(resp.encode()) == resp


def test_generic_encode_dispatch():
    assert c.encode(7) == b"7"
    assert c.encode(c.TieredState("ENABLED")) == c.TieredState("ENABLED").encode()


# --------------------------------------------------------------------------------------------- malformed input

GOOD_STATE = {"version": 1, "leader": 1, "leader_epoch": 0, "controller_epoch": 1, "isr": [1]}


def _j(obj) -> bytes:
    return json.dumps(obj).encode()


MALFORMED = [
    ("garbage bytes", c.ControllerZNode.decode, b"\xff\xfe\x00garbage"),
    ("not json", c.ControllerZNode.decode, b"{version: 2"),
    ("empty", c.ControllerZNode.decode, b""),
    ("none", c.ControllerZNode.decode, None),
    ("json array", c.ControllerZNode.decode, b"[1,2]"),
    ("NaN", c.LeaderIsrAndControllerEpoch.decode, b'{"version":1,"leader":NaN,"leader_epoch":0,'
                                                   b'"controller_epoch":1,"isr":[1]}'),
    ("controller bad version", c.ControllerZNode.decode, b'{"version":3,"brokerid":1,"timestamp":"1"}'),
    ("controller numeric timestamp", c.ControllerZNode.decode, b'{"version":2,"brokerid":1,"timestamp":1}'),
    ("controller missing brokerid", c.ControllerZNode.decode, b'{"version":2,"timestamp":"1"}'),
    ("epoch text", c.decode_controller_epoch, b"abc"),
    ("epoch negative", c.decode_controller_epoch, b"-1"),
    ("epoch whitespace", c.decode_controller_epoch, b" 5"),
    ("epoch float", c.decode_controller_epoch, b"5.0"),
    ("epoch json", c.decode_controller_epoch, b'{"epoch":5}'),
    ("tiered epoch text", c.decode_tiered_epoch, b"x"),
    ("state missing isr", c.LeaderIsrAndControllerEpoch.decode, _j({k: v for k, v in GOOD_STATE.items()
                                                                   if k != "isr"})),
    ("state isr strings", c.LeaderIsrAndControllerEpoch.decode, _j(GOOD_STATE | {"isr": ["1"]})),
    ("state leader bool", c.LeaderIsrAndControllerEpoch.decode, _j(GOOD_STATE | {"leader": True})),
    ("state version 2", c.LeaderIsrAndControllerEpoch.decode, _j(GOOD_STATE | {"version": 2})),
    ("state bad recovery", c.LeaderIsrAndControllerEpoch.decode, _j(GOOD_STATE | {"leader_recovery_state": 5})),
    ("topic bad partition key", c.TopicAssignment.decode, _j({"version": 3, "partitions": {"a": [1]}})),
    ("topic bad topic id", c.TopicAssignment.decode, _j({"version": 3, "partitions": {}, "topic_id": "short"})),
    ("topic version 4", c.TopicAssignment.decode, _j({"version": 4, "partitions": {}})),
    ("topic duplicate replicas", c.TopicAssignment.decode, _j({"version": 3, "partitions": {"0": [1, 1]}})),
    ("config int value", c.EntityConfig.decode, _j({"version": 1, "config": {"retention.ms": 1000}})),
    ("config no config", c.EntityConfig.decode, _j({"version": 1})),
    ("change v2 without path", c.ConfigChangeNotification.decode, _j({"version": 2, "entity_type": "topics",
                                                                      "entity_name": "t"})),
    ("change v1 without name", c.ConfigChangeNotification.decode, _j({"version": 1, "entity_type": "topics"})),
    ("reassign no replicas", c.ReassignPartitions.decode, _j({"version": 1, "partitions": [{"topic": "t",
                                                                                             "partition": 0}]})),
    ("reassign version 2", c.ReassignPartitions.decode, _j({"version": 2, "partitions": []})),
    ("pre negative partition", c.PreferredReplicaElection.decode,
     _j({"version": 1, "partitions": [{"topic": "t", "partition": -1}]})),
    ("isr change missing", c.IsrChangeNotification.decode, _j({"version": 1})),
    ("log dir event no broker", c.LogDirEventNotification.decode, _j({"version": 1, "event": 1})),
    ("feature status 2", c.FeatureZNode.decode, _j({"version": 2, "status": 2, "features": {}})),
    ("feature v1 missing min", c.FeatureZNode.decode,
     _j({"version": 1, "status": 1, "features": {"f": {"max_version_level": 1}}})),
    ("cluster id int version", c.ClusterIdZNode.decode, _j({"version": 1, "id": "x"})),
    ("tiered bad state", c.TieredState.decode, _j({"version": 1, "state": "ENABLE"})),
    ("tiered extra key", c.TieredState.decode, _j({"version": 1, "state": "ENABLED", "epoch": 1})),
    ("control request body list", c.ControlRequest.decode,
     _j({"version": 1, "api_key": 5, "api_name": "StopReplica", "api_version": 5, "controller_id": 1,
         "controller_epoch": 1, "broker_epoch": 1, "body": []})),
    ("control request extra key", c.ControlRequest.decode,
     _j({"version": 1, "api_key": 5, "api_name": "StopReplica", "api_version": 5, "controller_id": 1,
         "controller_epoch": 1, "broker_epoch": 1, "body": {}, "x": 1})),
    ("control response version 2", c.ControlResponse.decode,
     _j({"version": 2, "api_key": 5, "api_version": 5, "broker_id": 1, "broker_epoch": 1, "error_code": 0,
         "body": {}})),
]


@pytest.mark.parametrize("name,decoder,data", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_payloads_raise_one_error_type(name, decoder, data):
    with pytest.raises(c.MalformedZNodeError) as ei:
        decoder(data)
    assert ei.value.reason


def test_broker_registration_malformed():
    good = js(c.BrokerRegistration.create(1, ["PLAINTEXT://h:1"], {"PLAINTEXT": "PLAINTEXT"}, 1).encode())
    for bad in (good | {"endpoints": ["h:1"]}, good | {"version": 6},
                {k: v for k, v in good.items() if k != "features"}, good | {"port": "9092"}):
        with pytest.raises(c.MalformedZNodeError):
            c.BrokerRegistration.decode(_j(bad), broker_id=1)
    with pytest.raises(c.MalformedZNodeError, match="broker id"):
        c.BrokerRegistration.decode(_j(good), path="/brokers/ids/abc")


def test_error_names_path_when_given():
    with pytest.raises(c.MalformedZNodeError) as ei:
        c.EntityConfig.decode(b"oops", path="/config/topics/t")
    assert ei.value.what == "/config/topics/t" and "/config/topics/t" in str(ei.value)


def test_encoding_an_invalid_value_is_refused():
    with pytest.raises(ValueError):
        c.LeaderIsrAndControllerEpoch(-5, 0, (1,), 1).encode()
    with pytest.raises(ValueError):
        c.TieredState("ENABLE")
    with pytest.raises(ValueError):
        c.TopicAssignment({0: (1,)}, topic_id="not-a-topic-id")


def test_try_decode_logs_and_skips(caplog):
    logger = logging.getLogger("test.zk")
    logger.addHandler(caplog.handler)
    try:
        assert c.try_decode(c.EntityConfig.decode, b"\x00", "/config/topics/t", logger=logger) is None
    finally:
        logger.removeHandler(caplog.handler)
    assert "/config/topics/t" in caplog.text
    assert c.try_decode(c.EntityConfig.decode, b'{"version":1,"config":{}}', "/config/topics/t") == c.EntityConfig()


# -------------------------------------------------------------------------------------------- schemas and index

def test_every_schema_is_valid_draft_2020_12():
    names = schemas.schema_names()
    assert len(names) >= 17
    for name in names:
        doc = schemas.load_schema(name)
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        Draft202012Validator.check_schema(doc)


def test_index_and_decoders_cover_every_schema():
    indexed = {r.schema for r in schemas.load_index().rules if r.schema}
    assert indexed == set(schemas.schema_names())
    assert {f"{k}.json" for k in c.DECODERS} == set(schemas.schema_names())


@pytest.mark.parametrize("path,schema", [
    ("/controller", "controller.json"),
    ("/controller_epoch", "controller_epoch.json"),
    ("/brokers/ids/1", "broker_registration.json"),
    ("/brokers/topics/orders", "topic_assignment.json"),
    ("/brokers/topics/orders/partitions/0/state", "partition_state.json"),
    ("/brokers/topics/orders/tieredstorage/tiered_epoch", "tiered_epoch.json"),
    ("/brokers/topics/orders/tieredstorage/state", "tiered_state.json"),
    ("/config/topics/orders", "entity_config.json"),
    ("/config/brokers/<default>", "entity_config.json"),
    ("/config/users/alice/clients/app", "entity_config.json"),
    ("/config/changes/config_change_0000000042", "config_change_notification.json"),
    ("/isr_change_notification/isr_change_0000000000", "isr_change_notification.json"),
    ("/log_dir_event_notification/log_dir_event_0000000000", "log_dir_event_notification.json"),
    ("/admin/reassign_partitions", "reassign_partitions.json"),
    ("/admin/preferred_replica_election", "preferred_replica_election.json"),
    ("/feature", "feature.json"),
    ("/cluster/id", "cluster_id.json"),
    ("/kafkatier/control/2/requests/request_0000000001", "control_request.json"),
    ("/kafkatier/control/2/responses/request_0000000001", "control_response.json"),
])
def test_schema_for_path(path, schema):
    assert schemas.schema_for_path(path) == schema


@pytest.mark.parametrize("path", ["/brokers/topics/t/partitions", "/brokers/topics/t/partitions/0",
                                  "/brokers/topics/t/tieredstorage", "/admin/delete_topics/t", "/config/changes",
                                  "/config/topics", "/kafkatier/control/1/requests"])
def test_null_data_paths(path):
    rule = schemas.match_path(path)
    assert rule is not None and rule.null_data and schemas.schema_for_path(path) is None


def test_unknown_paths_and_ownership():
    assert schemas.match_path("/zookeeper/quota") is None
    assert schemas.match_path("/brokers/topics/t/partitions/0/state/extra") is None
    assert schemas.is_owned("/brokers/topics/t/x") and schemas.is_owned("/controller")
    assert not schemas.is_owned("/consumers/g") and not schemas.is_owned("/controllerx")


def test_decode_path_dispatches_and_checks_null_data():
    assert c.decode_path("/brokers/topics/t/tieredstorage/tiered_epoch", b"2") == 2
    st = c.decode_path("/brokers/topics/t/partitions/0/state", _j(GOOD_STATE), SimpleNamespace(version=3))
    assert st.partition_epoch == 3
    assert c.decode_path("/admin/delete_topics/t", b"") is None
    assert c.decode_path("/admin/delete_topics/t", None) is None
    with pytest.raises(c.MalformedZNodeError, match="expected no data"):
        c.decode_path("/admin/delete_topics/t", b"x")
    with pytest.raises(c.MalformedZNodeError, match="no schema"):
        c.decode_path("/nowhere", b"x")


def test_topic_assignment_fast_check_accepts_only_what_the_schema_accepts():
    """Decoding a topic's assignment skips jsonschema when a cheap check passes (a 1,000-partition map costs
    jsonschema tens of ms, at every failover); the check must never accept what the schema rejects."""
    good = {"version": 3, "partitions": {str(p): [p % 3 + 1, (p + 1) % 3 + 1] for p in range(1000)},
            "adding_replicas": {}, "removing_replicas": {"7": [1]}, "topic_id": "A" * 22}
    bad = [dict(good, version=4), dict(good, version=True), dict(good, partitions={"01": [1]}),
           dict(good, partitions={"1": [1, 1]}), dict(good, partitions={"1": [-1]}),
           dict(good, partitions={"1": [True]}), dict(good, partitions={"1": [2**31]}), dict(good, topic_id="x"),
           {"version": 1}, dict(good, adding_replicas={"1": "a"}), dict(good, partitions=[])]
    assert c._topic_assignment_valid(good) and not schemas.schema_errors("topic_assignment", good)
    for b in bad:
        assert not c._topic_assignment_valid(b) and schemas.schema_errors("topic_assignment", b), b
        with pytest.raises(c.MalformedZNodeError):
            c.TopicAssignment.decode(json.dumps(b).encode())
    assert len(c.TopicAssignment.decode(json.dumps(good).encode()).partitions) == 1000


def test_a_payload_too_large_for_a_znode_is_refused_before_it_is_validated(monkeypatch):
    """A control request of 20,000 partitions is split into parts (channel_manager.py): the attempt to write it
    whole must not parse and validate megabytes first, nor keep them in the validation cache."""
    from kafkatier.zk.limits import ZNodeTooLargeError
    validated = []
    monkeypatch.setattr(c, "schema_errors", lambda schema, value: validated.append(value) or [])
    request = c.ControlRequest(api_key=4, api_version=7, api_name="LeaderAndIsr", controller_id=1,
                               controller_epoch=2, broker_epoch=3, body={"pad": "x" * 1_200_000})
    with pytest.raises(ZNodeTooLargeError):
        request.encode()
    # Only the envelope's head is validated (with an empty body); the megabyte body is never parsed back.
    assert all(v.get("body") == {} for v in validated)


def test_long_payloads_are_validated_each_time_and_short_ones_once(monkeypatch):
    validated = []
    monkeypatch.setattr(c, "schema_errors", lambda schema, value: validated.append(len(value["pad"])) or [])
    for pad in ("short", "y" * 100_000):
        text = json.dumps({"pad": pad + str(uuid.uuid4())})
        for _ in range(2):
            c._payload_problems("control_request", text)
    assert [n < 100 for n in validated] == [True, False, False]
