"""Listener settings: ``listener.security.protocol.map``, the inter-broker listener, one-line errors."""
from __future__ import annotations

import pytest

from kafkatier.server.config import (ListenerConfigError, extra_listeners, inter_broker_listener_name,
                                     security_protocol_map)
from kafkatier.server.ssl_transport import SslConfigError


def test_default_map_names_each_protocol_after_itself():
    spm = security_protocol_map({})
    assert spm == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}
    assert security_protocol_map({"listener.security.protocol.map": "INTERNAL:ssl, EXTERNAL:SASL_SSL"})[
        "INTERNAL"] == "SSL"


def test_extra_listeners_carry_their_protocol():
    o = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:9093,INTERNAL://127.0.0.1:9094,GROUP://127.0.0.1:9095",
         "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SASL_SSL"}
    got = {e.name: e.security_protocol for e in extra_listeners(o)}
    assert got == {"SSL": "SSL", "INTERNAL": "SASL_SSL", "GROUP": "PLAINTEXT"}  # a name the map lacks: PLAINTEXT


def test_inter_broker_listener_name():
    o = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:9093"}
    assert inter_broker_listener_name(o) is None
    assert inter_broker_listener_name({**o, "security.inter.broker.protocol": "SSL"}) == "SSL"
    assert inter_broker_listener_name({**o, "inter.broker.listener.name": "ssl"}) == "SSL"
    assert inter_broker_listener_name({**o, "inter.broker.listener.name": "PLAINTEXT"}) is None
    with pytest.raises(ListenerConfigError, match="not in listeners"):
        inter_broker_listener_name({**o, "inter.broker.listener.name": "NOPE"})


def test_bad_map_entry_is_one_line():
    with pytest.raises(ListenerConfigError, match="listener.security.protocol.map"):
        security_protocol_map({"listener.security.protocol.map": "SSL:TLS"})
    assert issubclass(SslConfigError, ListenerConfigError)


def test_command_config_with_a_missing_pem_file_is_one_line(tmp_path):
    from kafkatier.admin.bootstrap import BootstrapConfigError, load_command_config
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SSL\nssl.keystore.type=PEM\nssl.keystore.location=/nonexistent.pem\n")
    with pytest.raises(BootstrapConfigError, match="ssl.keystore.location=/nonexistent.pem: no such file"):
        load_command_config(props)
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    props.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={ca}\n")
    assert load_command_config(props) == {"security_protocol": "SSL", "ssl_cafile": str(ca)}
