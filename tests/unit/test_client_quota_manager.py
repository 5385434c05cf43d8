"""Client quotas (KIP-55): Kafka's sampled rate and throttle time, KIP-55's precedence, the quota znode handlers,
and kafka-configs' quota options (users / clients)."""
from __future__ import annotations

import argparse

import pytest

from kafkatier.cli import configs
from kafkatier.cli.main import UsageError
from kafkatier.server.client_quota_apis import ClientQuotaApis, QuotaEntityError, entity_path
from kafkatier.server.quota_factory import ClientQuotas
from kafkatier.server.client_quota_manager import (DEFAULT, ClientQuotaManager, QuotaEntity, Rate,
                                                   parse_quota_value, throttle_time_ms)
from kafkatier.server.network import MuteAfterResponse
from tests.unit.fakes import FakeZk, ManualClock


def test_rate_window_is_at_least_num_minus_one_samples():
    rate = Rate(samples=11, window_s=1.0)
    rate.record(1000, 0.0)
    assert rate.window_size(0.5) == pytest.approx(10.5)
    assert rate.measure(0.5) == pytest.approx(1000 / 10.5)
    rate.record(1000, 20.0)   # the first sample expired (older than 11 windows)
    assert rate.measure(20.0) == pytest.approx(100.0)


def test_throttle_time_is_kafkas_formula():
    assert throttle_time_ms(2_000_000, 1_000_000, 10.0) == 10_000
    assert throttle_time_ms(900_000, 1_000_000, 10.0) == 0


def test_long_run_rate_matches_the_quota():
    """A client that waits out every throttle moves bytes at the quota in the long run."""
    clock = ManualClock()
    mgr = ClientQuotaManager("producer_byte_rate", clock=clock)
    mgr.update_quota("alice", None, 1_000_000)
    entity = QuotaEntity("alice", "app")
    sent, start = 0, clock.now
    while clock.now - start < 60:
        throttle = mgr.record_and_get_throttle_time_ms(entity, 100_000)
        sent += 100_000
        clock.now += 0.01 + throttle / 1000
    # the first window may burst (10 s of quota), afterwards the rate holds
    assert sent / (clock.now - start) == pytest.approx(1_000_000, rel=0.2)
    assert mgr.throttled_count > 0


def test_kip55_precedence_and_defaults():
    mgr = ClientQuotaManager("producer_byte_rate")
    mgr.update_quota(None, DEFAULT, 10)
    assert mgr.quota_for(QuotaEntity("bob", "c1"))[1] == 10
    mgr.update_quota(None, "c1", 20)
    assert mgr.quota_for(QuotaEntity("bob", "c1"))[1] == 20
    mgr.update_quota(DEFAULT, None, 30)
    assert mgr.quota_for(QuotaEntity("bob", "c1"))[1] == 30
    mgr.update_quota("bob", None, 40)
    assert mgr.quota_for(QuotaEntity("bob", "c1"))[1] == 40
    mgr.update_quota("bob", "c1", 50)
    assert mgr.quota_for(QuotaEntity("bob", "c1"))[1] == 50
    assert mgr.quota_for(QuotaEntity("eve", "c2"))[1] == 30
    mgr.update_quota("bob", "c1", None)
    assert mgr.quota_for(QuotaEntity("bob", "c1"))[1] == 40


def test_unlimited_without_quotas():
    mgr = ClientQuotaManager("consumer_byte_rate")
    assert mgr.record_and_get_throttle_time_ms(QuotaEntity("a", "b"), 10**12) == 0


def test_config_handlers_apply_user_client_and_nested_entities():
    quotas = ClientQuotas()
    quotas.on_user_change("alice", {"producer_byte_rate": "1024", "SCRAM-SHA-256": "x"})
    quotas.on_client_change("app", {"consumer_byte_rate": "2048"})
    quotas.on_user_change("alice/clients/app", {"producer_byte_rate": "512"})
    assert quotas.produce.quota_for(QuotaEntity("alice", "other"))[1] == 1024
    assert quotas.produce.quota_for(QuotaEntity("alice", "app"))[1] == 512
    assert quotas.fetch.quota_for(QuotaEntity("bob", "app"))[1] == 2048
    quotas.on_user_change("alice", {})
    assert quotas.produce.quota_for(QuotaEntity("alice", "other")) is None


def test_load_reads_every_quota_znode():
    zk = FakeZk({"/config/users/alice": b'{"version":1,"config":{"producer_byte_rate":"100"}}',
                 "/config/users/alice/clients/app": b'{"version":1,"config":{"producer_byte_rate":"50"}}',
                 "/config/clients/<default>": b'{"version":1,"config":{"consumer_byte_rate":"70"}}'})
    quotas = ClientQuotas()
    quotas.load(zk)
    assert quotas.produce.quota_for(QuotaEntity("alice", "x"))[1] == 100
    assert quotas.produce.quota_for(QuotaEntity("alice", "app"))[1] == 50
    assert quotas.fetch.quota_for(QuotaEntity("zed", "any"))[1] == 70


def test_quota_values_and_keys_validated_as_kafka():
    assert parse_quota_value("producer_byte_rate", "1048576") == 1048576
    with pytest.raises(ValueError, match="Invalid configuration key bogus_rate"):
        parse_quota_value("bogus_rate", "1")
    with pytest.raises(ValueError, match="must be an integer"):
        parse_quota_value("producer_byte_rate", 1.5)
    with pytest.raises(ValueError):
        parse_quota_value("request_percentage", -1)


def test_entity_paths():
    assert entity_path({"user": "alice"}) == ("users", "alice")
    assert entity_path({"user": None}) == ("users", DEFAULT)
    assert entity_path({"client-id": "app"}) == ("clients", "app")
    assert entity_path({"user": "alice", "client-id": None}) == ("users", f"alice/clients/{DEFAULT}")
    with pytest.raises(QuotaEntityError):
        entity_path({"user": "a/b"})
    with pytest.raises(QuotaEntityError):
        entity_path({})


def test_alter_refuses_an_unknown_key_with_kafkas_message():
    from kafkatier.protocol.errors import Errors
    apis = ClientQuotaApis(FakeZk())
    err, message = apis.alter_entry({"user": "alice"}, [("bogus_rate", 1.0, False)], validate_only=False)
    assert err == Errors.INVALID_REQUEST and message == "Invalid configuration key bogus_rate"


def test_describe_filters_entities():
    zk = FakeZk({"/config/users/alice": b'{"version":1,"config":{"producer_byte_rate":"100"}}',
                 "/config/users/bob": b'{"version":1,"config":{"SCRAM-SHA-256":"x"}}',
                 "/config/clients/app": b'{"version":1,"config":{"consumer_byte_rate":"70"}}'})
    apis = ClientQuotaApis(zk)
    assert apis.describe([("user", 0, "alice")], strict=True) == [({"user": "alice"}, {"producer_byte_rate": 100.0})]
    assert apis.describe([("client-id", 2, None)], strict=False) == [({"client-id": "app"},
                                                                       {"consumer_byte_rate": 70.0})]
    assert apis.describe([("user", 2, None)], strict=True) == [({"user": "alice"}, {"producer_byte_rate": 100.0})]


def test_mute_after_response_carries_the_throttle():
    assert MuteAfterResponse("r", 250).mute_ms == 250


# --- kafkatier configs ------------------------------------------------------------------------------------

def _args(**kw) -> argparse.Namespace:
    base = dict(entity_type="users", entity_name="alice", entity_default=False, describe=False, alter=True,
                all=False, add_config=None, add_config_file=None, delete_config=None, bootstrap_server=None,
                zookeeper=None, data_dir=None, command_config=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_cli_splits_quota_configs():
    quotas, rest = configs.split_quota_configs("users", {"producer_byte_rate": "1048576",
                                                        "SCRAM-SHA-256": "password=x"})
    assert quotas == {"producer_byte_rate": 1048576.0} and rest == {"SCRAM-SHA-256": "password=x"}


@pytest.mark.parametrize("entity_type,config,message", [
    ("clients", "bogus_rate=1", "Invalid configuration key bogus_rate"),
    ("users", "producer_byte_rate=fast", "Invalid value fast for configuration producer_byte_rate"),
    ("users", "consumer_byte_rate=-5", "Value must be positive"),
])
def test_cli_refuses_bad_quota_input(entity_type, config, message):
    with pytest.raises(UsageError, match=message):
        configs.run(_args(entity_type=entity_type, add_config=config))


def test_cli_quota_output_is_kafkas():
    assert configs.quota_lines([({"user": "alice"}, {"producer_byte_rate": 1048576.0,
                                                     "consumer_byte_rate": 2.0})]) == [
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2.0, producer_byte_rate=1048576.0"]
    assert configs.quota_entity_label({"user": None, "client-id": "app"}) == \
        "the default user-principal, client-id 'app'"


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configs.register(parser.add_subparsers())
    args = parser.parse_args(["configs", *argv])
    configs.check_args(args)
    return args


@pytest.mark.parametrize("argv", [
    ("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "app"),
    ("--entity-type", "clients", "--entity-name", "app", "--entity-type", "users", "--entity-name", "alice"),
    ("--user", "alice", "--client", "app"),
    ("--client", "app", "--entity-type", "users", "--entity-name", "alice"),
])
def test_cli_names_a_users_quota_for_one_client_as_kafka_configs_does(argv):
    args = _parse(*argv, "--alter", "--add-config", "request_percentage=50")
    assert configs.quota_entity(args) == {"user": "alice", "client-id": "app"}


def test_cli_user_and_client_defaults_combine():
    args = _parse("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                  "--entity-default", "--alter", "--add-config", "producer_byte_rate=10")
    assert configs.quota_entity(args) == {"user": "alice", "client-id": None}
    args = _parse("--user-defaults", "--client", "app", "--describe")
    assert configs.quota_entity(args) == {"user": None, "client-id": "app"}
    assert configs.quota_entity(_parse("--client", "app", "--describe")) == {"client-id": "app"}
    assert configs.quota_entity(_parse("--entity-type", "users", "--entity-default", "--describe")) == {"user": None}


@pytest.mark.parametrize("argv, message", [
    (("--entity-type", "users", "--entity-name", "a", "--entity-type", "clients", "--alter", "--add-config",
      "request_percentage=5"), "must be specified with each --entity-type for --alter"),
    (("--entity-type", "users", "--entity-name", "a", "--entity-type", "topics", "--entity-name", "t",
      "--describe"), "Only one entity can be given"),
    (("--user", "a", "--topic", "t", "--describe"), "Only one entity can be given"),
    (("--entity-type", "users", "--entity-name", "a", "--entity-default", "--describe"), "cannot be used together"),
    (("--entity-name", "a", "--describe"), "Only one entity can be given"),
])
def test_cli_refuses_bad_entity_combinations(argv, message):
    with pytest.raises(UsageError, match=message):
        _parse(*argv)
