"""ControlApis: the control requests applied beside KafkaApis (the coordinators' leadership, KIP-950's config
re-read before a StopReplica v5 disablement, UpdateMetadata into the cache)."""
import types

import pytest

from kafkatier.protocol.build import UnknownFieldError, build
from kafkatier.protocol.codec import response_class
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.control_messages import (ControlMessageError, LeaderAndIsrRequestData, StopReplicaRequestData,
                                                 UpdateMetadataRequestData, UpdateMetadataResponseData)
from kafkatier.protocol.control_requests import DISABLE_REMOTE_PARTITION
from kafkatier.protocol.errors import Errors
from kafkatier.server.control_apis import ControlApis


class Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name, *a)) or {"error_code": 0}


class ReplicaManager(Recorder):
    def __init__(self, leaders):
        super().__init__()
        self.leaders = leaders

    def get_partition(self, topic, p):
        return types.SimpleNamespace(is_leader=(topic, p) in self.leaders, leader_epoch=7)


def _apis(leaders=(), tiered=True):
    rm, cache, configs, group, txn = ReplicaManager(set(leaders)), Recorder(), Recorder(), Recorder(), Recorder()
    configs.refresh_for_disablement = lambda topics: configs.calls.append(("refresh", list(topics))) or {}
    apis = ControlApis(rm, cache, configs, tiered=tiered,
                       coordinators={"__consumer_offsets": group, "__transaction_state": txn})
    return apis, rm, cache, configs, group, txn


def _states(cls, topic, *parts, **flags):
    return cls.from_json(cls.MAX_VERSION, {"topic_states": [{"topic_name": topic, "partition_states": [
        {"partition_index": p, "leader_epoch": 3, **flags} for p in parts]}]})


def test_leader_and_isr_loads_led_coordinator_partitions_and_unloads_followed_ones():
    apis, rm, _, _, group, txn = _apis(leaders={("__consumer_offsets", 0)})
    apis.handle_leader_and_isr(_states(LeaderAndIsrRequestData, "__consumer_offsets", 0, 1))
    assert group.calls == [("on_election", 0, 7), ("on_resignation", 1, 3)]
    assert txn.calls == [] and rm.calls[0][0] == "handle_leader_and_isr"


def test_stop_replica_unloads_coordinator_partitions_without_an_epoch():
    apis, _, _, _, _, txn = _apis(leaders={("__transaction_state", 2)})
    apis.handle_stop_replica(_states(StopReplicaRequestData, "__transaction_state", 2))
    assert txn.calls == [("on_resignation", 2, None)]


def test_stop_replica_v5_rereads_the_config_of_disabled_topics_once():
    apis, rm, _, configs, _, _ = _apis()
    apis.handle_stop_replica(_states(StopReplicaRequestData, "t", 0, 1, **{DISABLE_REMOTE_PARTITION: True, "delete_partition": False}))
    assert configs.calls == [("refresh", ["t"])]
    assert rm.calls[0][0] == "handle_stop_replica"


def test_stop_replica_v5_without_tiering_does_not_reread():
    apis, _, _, configs, _, _ = _apis(tiered=False)
    apis.handle_stop_replica(_states(StopReplicaRequestData, "t", 0, **{DISABLE_REMOTE_PARTITION: True}))
    assert configs.calls == []


def test_update_metadata_goes_to_the_cache_then_the_replica_manager():
    apis, rm, cache, _, _, _ = _apis()
    request = UpdateMetadataRequestData()
    assert apis.handle_update_metadata(request) == UpdateMetadataResponseData(error_code=0)
    assert cache.calls == [("update", request)] and rm.calls == [("on_metadata_update",)]


def test_the_v5_flag_has_one_name_from_the_spec_to_the_check():
    body = {"controller_id": 1, "controller_epoch": 1, "broker_epoch": -1, "topic_states": [
        {"topic_name": "t", "partition_states": [{"partition_index": 0, "leader_epoch": -1,
                                                  "delete_partition": False, DISABLE_REMOTE_PARTITION: True}]}]}
    assert StopReplicaRequestData.from_json(5, body).topic_states[0].partition_states[0].disable_remote_partition
    with pytest.raises(ControlMessageError, match="not part of version 4"):
        StopReplicaRequestData.from_json(4, body)
    body["topic_states"][0]["partition_states"][0]["disable"] = True
    with pytest.raises(ControlMessageError, match="unknown field 'disable'"):
        StopReplicaRequestData.from_json(5, body)


def test_build_refuses_a_key_that_matches_no_field():
    cls = response_class(ApiKeys.STOP_REPLICA)
    assert build(cls, 3, {"error_code": 0, "partition_errors": []}).error_code == 0
    with pytest.raises(UnknownFieldError, match="partition_errors.*'eror_code'"):
        build(cls, 3, {"error_code": 0, "partition_errors": [
            {"topic_name": "t", "partition_index": 0, "eror_code": int(Errors.NONE)}]})


def test_build_drops_a_field_of_another_version():
    cls = response_class(ApiKeys.DESCRIBE_CLUSTER)
    msg = build(cls, 0, {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "cluster_id": "c",
                         "controller_id": 1, "brokers": [], "authorized_operations": 0,
                         "endpoint_type": 1})   # endpoint_type is v1+
    assert msg.cluster_id == "c"


def test_broker_setting_is_typed_and_checked_by_its_one_definition():
    from kafkatier.server.config import BrokerSettingError, broker_setting
    assert broker_setting({}, "auto.create.topics.enable") is True
    assert broker_setting({"auto.create.topics.enable": "False"}, "auto.create.topics.enable") is False
    assert broker_setting({"log.initial.task.delay.ms": "0"}, "log.initial.task.delay.ms") == 0
    assert broker_setting({}, "num.replica.alter.log.dirs.threads") is None      # one per log dir
    with pytest.raises(BrokerSettingError, match="num.recovery.threads.per.data.dir: Value must be at least 1"):
        broker_setting({"num.recovery.threads.per.data.dir": "0"}, "num.recovery.threads.per.data.dir")
    with pytest.raises(BrokerSettingError, match="auto.create.topics.enable: Expected value to be either true or false"):
        broker_setting({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable")
    with pytest.raises(KeyError):
        broker_setting({}, "no.such.setting")


def test_build_refuses_the_metadata_key_it_once_dropped():
    """An auto-created topic's Metadata entry once carried ``topic_authorized_operations`` (no such field): the
    client saw the default.  The strict build names the path."""
    cls = response_class(ApiKeys.METADATA)
    topic = {"error_code": 5, "name": "t", "is_internal": False, "partitions": [], "authorized_operations": None}
    assert build(cls, 9, {"topics": [topic]}).topics[0].error_code == 5
    with pytest.raises(UnknownFieldError, match=r"MetadataResponse\.topics: no field 'topic_authorized_operations'"):
        build(cls, 9, {"topics": [{**topic, "topic_authorized_operations": -2147483648}]})
