"""Tiered-storage configuration: broker configs (RemoteLogManagerConfig), topic config rules with Kafka's exact
messages (docs/kip-950-tiered-storage.md#config-validation) and the broker start-up checks."""
from __future__ import annotations

import pytest

from kafkatier.log import log_config as lc
from kafkatier.log.remote import config as rc
from kafkatier.log.remote.remote_log_metadata_manager import ZkRemoteLogMetadataManager
from kafkatier.log.remote.remote_storage_manager import LocalTieredStorage
from kafkatier.zk.tiered_state import creation_ops
from kafkatier.protocol.errors import InvalidConfigurationError
from kafkatier.server.tiered_storage import validate_broker_local_retention

ON = {"remote.log.storage.system.enable": "true"}


# ------------------------------------------------------------------------------------------ broker configs

def test_broker_defaults_and_pool_fallback():
    cfg = rc.RemoteLogManagerConfig.from_props({})
    assert not cfg.remote_log_storage_system_enable
    assert (cfg.thread_pool_size, cfg.copier_thread_pool_size, cfg.expiration_thread_pool_size) == (10, -1, -1)
    assert (cfg.effective_copier_thread_pool_size, cfg.effective_expiration_thread_pool_size) == (10, 10)
    assert cfg.task_interval_ms == 30000 and cfg.custom_metadata_max_bytes == 128
    assert cfg.remote_log_metadata_manager_class_name == rc.KAFKA_TOPIC_BASED_RLMM


def test_split_pools_and_prefixed_plugin_props():
    cfg = rc.RemoteLogManagerConfig.from_props({
        **ON, "remote.log.manager.thread.pool.size": "4", "remote.log.manager.copier.thread.pool.size": "2",
        "remote.log.manager.task.interval.ms": "500", "rsm.config.dir": "/x", "rlmm.config.a": "b"})
    assert cfg.remote_log_storage_system_enable
    assert (cfg.effective_copier_thread_pool_size, cfg.effective_expiration_thread_pool_size) == (2, 4)
    assert cfg.task_interval_ms == 500
    assert cfg.remote_storage_manager_props == {"dir": "/x"} and cfg.remote_log_metadata_manager_props == {"a": "b"}


@pytest.mark.parametrize("name,value,message", [
    ("remote.log.manager.copier.thread.pool.size", "0",
     "Invalid value 0 for configuration remote.log.manager.copier.thread.pool.size: Value can be -1 or greater "
     "than 0"),
    ("remote.log.manager.expiration.thread.pool.size", "-2",
     "Invalid value -2 for configuration remote.log.manager.expiration.thread.pool.size: Value can be -1 or "
     "greater than 0"),
    ("remote.log.manager.thread.pool.size", "0",
     "Invalid value 0 for configuration remote.log.manager.thread.pool.size: Value must be at least 1"),
    ("remote.log.manager.task.interval.ms", "x",
     "Invalid value x for configuration remote.log.manager.task.interval.ms: Not a number of type LONG"),
    ("remote.log.storage.system.enable", "yes",
     "Invalid value yes for configuration remote.log.storage.system.enable: Expected value to be either true "
     "or false"),
])
def test_bad_broker_configs_are_refused_with_kafkas_text(name, value, message):
    with pytest.raises(InvalidConfigurationError) as e:
        rc.RemoteLogManagerConfig.from_props({name: value})
    assert e.value.message == message


def test_plugin_names_kafkas_aliases_and_python_paths():
    assert rc.resolve_class(None, rc.PROJECT_LOCAL_TIERED_STORAGE) is LocalTieredStorage
    assert rc.resolve_class(rc.KAFKA_LOCAL_TIERED_STORAGE, rc.PROJECT_LOCAL_TIERED_STORAGE) is LocalTieredStorage
    assert rc.resolve_class(rc.KAFKA_TOPIC_BASED_RLMM, rc.PROJECT_ZK_RLMM) is ZkRemoteLogMetadataManager
    assert rc.resolve_class("kafkatier.log.remote.remote_storage_manager:LocalTieredStorage", "") is \
        LocalTieredStorage
    with pytest.raises(InvalidConfigurationError, match="cannot be found"):
        rc.resolve_class("no.such.Class", "")


@pytest.mark.parametrize("props,message", [
    ({"log.retention.bytes": "100", "log.local.retention.bytes": "-1"},
     "Invalid value -1 for configuration log.local.retention.bytes: Value must not be -1 as log.retention.bytes "
     "value is set as 100."),
    ({"log.retention.ms": "1000", "log.local.retention.ms": "2000"},
     "Invalid value 2000 for configuration log.local.retention.ms: Value must not be more than log.retention.ms "
     "property value: 1000"),
])
def test_broker_local_retention_against_total(props, message):
    with pytest.raises(InvalidConfigurationError) as e:
        validate_broker_local_retention(props)
    assert e.value.message == message


def test_broker_local_retention_defaults_pass():
    validate_broker_local_retention({})
    validate_broker_local_retention({"log.retention.hours": "1", "log.local.retention.ms": "1000"})


# -------------------------------------------------------------------------------------------- topic rules

def validate(props, existing=None, system="true"):
    return lc.validate_topic_config(props, existing=existing or {},
                                    broker_config={"remote.log.storage.system.enable": system})


@pytest.mark.parametrize("props,system,message", [
    ({"remote.storage.enable": "true"}, "false",
     "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."),
    ({"remote.storage.enable": "true", "cleanup.policy": "compact"}, "true",
     "Remote log storage is unsupported for the compacted topics"),
    ({"remote.storage.enable": "true", "cleanup.policy": "delete,compact"}, "true",
     "Remote log storage is unsupported for the compacted topics"),
    ({"remote.storage.enable": "true", "retention.bytes": "100", "local.retention.bytes": "-1"}, "true",
     "Invalid value -1 for configuration local.retention.bytes: Value must not be -1 as retention.bytes value is "
     "set as 100."),
    ({"remote.storage.enable": "true", "retention.bytes": "100", "local.retention.bytes": "101"}, "true",
     "Invalid value 101 for configuration local.retention.bytes: Value must not be more than retention.bytes "
     "property value: 100"),
    ({"remote.storage.enable": "true", "retention.ms": "1000", "local.retention.ms": "-1"}, "true",
     "Invalid value -1 for configuration local.retention.ms: Value must not be -1 as retention.ms value is set "
     "as 1000."),
    ({"remote.storage.enable": "true", "retention.ms": "1000", "local.retention.ms": "1001"}, "true",
     "Invalid value 1001 for configuration local.retention.ms: Value must not be more than retention.ms property "
     "value: 1000"),
    ({"remote.storage.enable": "true", "remote.log.copy.disable": "true", "retention.bytes": "100",
      "local.retention.bytes": "50"}, "true", lc.COPY_DISABLED_BYTES),
    ({"remote.storage.enable": "true", "remote.log.copy.disable": "true", "retention.ms": "1000",
      "local.retention.ms": "100"}, "true", lc.COPY_DISABLED_MS),
])
def test_tiered_topic_rules(props, system, message):
    with pytest.raises(InvalidConfigurationError) as e:
        validate(props, system=system)
    assert e.value.message == message


def test_copy_disabled_message_is_the_seeds():
    assert lc.COPY_DISABLED_MS.startswith("When `remote.log.copy.disable` is set to true, the "
                                                     "`local.retention.ms` and `retention.ms` must be set to the "
                                                     "identical value")


@pytest.mark.parametrize("props", [
    {"remote.storage.enable": "true"},
    {"remote.storage.enable": "true", "retention.bytes": "100", "local.retention.bytes": "100"},
    {"remote.storage.enable": "true", "local.retention.bytes": "-1"},           # retention.bytes is -1
    {"remote.storage.enable": "true", "remote.log.copy.disable": "true", "local.retention.ms": "-2"},
    {"remote.storage.enable": "true", "remote.log.copy.disable": "true", "retention.ms": "1000",
     "local.retention.ms": "1000"},
    {"cleanup.policy": "compact"},                                                # not tiered
])
def test_valid_configs_pass(props):
    validate(props)


def test_switching_off_needs_delete_on_disable():
    old = {"remote.storage.enable": "true"}
    with pytest.raises(InvalidConfigurationError) as e:
        validate({"remote.storage.enable": "false"}, existing=old)
    assert e.value.message == lc.DISABLE_WITHOUT_DELETE
    assert e.value.message.startswith("It is invalid to disable remote storage without deleting remote data.")
    with pytest.raises(InvalidConfigurationError):
        validate({}, existing=old)  # AlterConfigs replacing everything drops the flag too
    validate({"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}, existing=old)


def test_creation_ops_make_the_tieredstorage_nodes_with_the_right_state():
    ops = creation_ops(None, "t", {"remote.storage.enable": "true"}, creating_topic=True)
    assert [o.path for o in ops] == ["/brokers/topics/t/tieredstorage", "/brokers/topics/t/tieredstorage/tiered_epoch",
                                     "/brokers/topics/t/tieredstorage/state"]
    assert ops[1].data == b"0" and b'"ENABLED"' in ops[2].data
    ops = creation_ops(None, "t", {"remote.storage.enable": "true", "remote.log.copy.disable": "true"},
                       creating_topic=True)
    assert b'"DISABLED"' in ops[2].data
    ops = creation_ops(None, "t", {"retention.ms": "1"}, creating_topic=True)
    assert ops == []
