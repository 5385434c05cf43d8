"""Secrets never leave (DescribeConfigs of a broker: sensitive, null) and unknown broker properties are logged by
name, never silently dropped and never with their values (issue #16)."""
from __future__ import annotations

import logging

from kafkatier.server.config_audit import log_unknown_overrides, unknown_configs
from kafkatier.server.dynamic_broker_config import DynamicBrokerConfig
from test_dynamic_broker_config import FakeEntityConfigs

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')


def test_jaas_configs_are_sensitive_and_null():
    d = DynamicBrokerConfig(1, {"broker.id": "1", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                                "sasl.jaas.config": JAAS}, FakeEntityConfigs())
    entries = {e["name"]: e for e in d.describe("1")}
    for name in ("listener.name.sasl_plaintext.plain.sasl.jaas.config", "sasl.jaas.config"):
        e = entries[name]
        assert e["sensitive"] and e["value"] is None and e["source"] == 4  # STATIC_BROKER_CONFIG
        assert all(s["value"] is None for s in e["synonyms"])
    assert "admin-secret" not in repr(d.describe("1"))


def test_unknown_overrides_are_logged_by_name_only(caplog):
    overrides = {"user_admin": "secret-value", "listener.security.protocol": "SASL_PLAINTEXT",
                 "log.retention.hours": "1", "max.connections.per.ip": "10", "no.such.thing": "x",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}
    assert [u.name for u in unknown_configs(overrides)] == ["no.such.thing", "user_admin"]
    with caplog.at_level(logging.WARNING, logger="kafkatier.server.config"):
        log_unknown_overrides(overrides)
    text = caplog.text
    assert "name=user_admin" in text and "name=no.such.thing" in text and "jaas.config" in text
    assert "secret-value" not in text and "admin-secret" not in text
