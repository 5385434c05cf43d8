"""A broker's properties file: Java properties escapes round-trip, mode 0600; PASSWORD-type configs hidden."""
from __future__ import annotations

import os

from kafkatier.admin.bootstrap import parse_properties
from kafkatier.server.config import is_password_config, loggable_configs
from kafkatier.server.server_properties import format_properties, write_server_properties


def test_properties_round_trip_through_kafka_escapes(tmp_path):
    props = {"listener.name.sasl_plaintext.plain.sasl.jaas.config":
             'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="p=w:#!\\";',
             "odd key": " leading space", "multi": "line\nbreak\ttab", "unicode": "pässwörd€", "empty": ""}
    text = format_properties(props, comment="test")
    assert len(text.splitlines()) == 1 + len(props) and text.isascii()   # one line each, as Properties.store
    assert parse_properties(text) == props


def test_file_is_owner_only_even_over_a_leftover_temp_file(tmp_path):
    path = str(tmp_path / "b" / "server.properties")
    os.makedirs(os.path.dirname(path))
    open(path + ".tmp", "w").close()
    os.chmod(path + ".tmp", 0o644)
    write_server_properties(path, {"sasl.jaas.config": "x"})
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_password_type_configs_are_hidden():
    for name in ("sasl.jaas.config", "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config", "ssl.key.password",
                 "listener.name.external.ssl.truststore.password", "password.encoder.secret"):
        assert is_password_config(name), name
    assert not is_password_config("min.insync.replicas")
    assert loggable_configs({"sasl.jaas.config": "s", "min.insync.replicas": "2", "user_admin": "s"}) == \
        {"sasl.jaas.config": "[hidden]", "min.insync.replicas": "2", "user_admin": "[hidden]"}
