"""The DELETE-on-topic authorizer (Kafka's AclAuthorizer rules) and SASL/PLAIN (token, handshake, gate), without
ZooKeeper: ACL znodes come from an in-memory stand-in."""
from __future__ import annotations

import json

import attrs
import pytest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from kafkatier.protocol.errors import Errors
from kafkatier.server.acl import AclAuthorizer, AclEntry, AclFormatError, authorizer_from_config, decode_acls
from kafkatier.server.network import Authenticated, ConnectionContext
from kafkatier.server.sasl import (PlainCredentialStore, SaslAuthenticationError, SaslPlainServer, parse_plain_token,
                                   static_users)
from fakes import FakeZk


def acls(*entries) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": p, "permissionType": perm, "operation": op, "host": host} for p, perm, op, host in entries]}
    ).encode()


def authz(nodes, **kw) -> AclAuthorizer:
    return AclAuthorizer(FakeZk(nodes), **kw)


def allowed(a: AclAuthorizer, principal: str, topic: str, op: str = "Delete", host: str = "127.0.0.1") -> bool:
    return a.authorize(principal, host, op, "Topic", topic)


def test_literal_allow_for_the_principal_only():
    a = authz({"/kafka-acl/Topic/foo": acls(("User:alice", "Allow", "Delete", "*"))})
    assert allowed(a, "User:alice", "foo")
    assert not allowed(a, "User:bob", "foo")
    assert not allowed(a, "User:alice", "bar")  # no ACL at all: allow.everyone.if.no.acl.found=false


def test_describe_alone_is_not_enough_but_all_and_wildcards_are():
    a = authz({"/kafka-acl/Topic/foo": acls(("User:alice", "Allow", "Describe", "*"),
                                            ("User:carol", "Allow", "All", "*")),
               "/kafka-acl/Topic/*": acls(("User:*", "Allow", "Delete", "10.0.0.1"))})
    assert not allowed(a, "User:alice", "foo")
    assert allowed(a, "User:carol", "foo")
    assert allowed(a, "User:anyone", "other", host="10.0.0.1")
    assert not allowed(a, "User:anyone", "other", host="127.0.0.1")


def test_deny_wins_over_allow():
    a = authz({"/kafka-acl/Topic/foo": acls(("User:*", "Allow", "Delete", "*"), ("User:eve", "Deny", "All", "*"))})
    assert allowed(a, "User:alice", "foo")
    assert not allowed(a, "User:eve", "foo")


def test_prefixed_acls_and_implied_describe():
    a = authz({"/kafka-acl-extended/prefixed/Topic/pay": acls(("User:alice", "Allow", "Delete", "*"))})
    assert allowed(a, "User:alice", "payments")
    assert allowed(a, "User:alice", "payments", op="Describe")  # Delete implies Describe
    assert not allowed(a, "User:alice", "orders")


def test_super_users_and_allow_if_no_acl():
    a = authz({}, super_users=["User:admin"], allow_everyone_if_no_acl_found=True)
    assert allowed(a, "User:admin", "x") and allowed(a, "User:nobody", "x")
    assert not allowed(authz({}), "User:nobody", "x")


def test_malformed_znodes_and_entries_are_skipped():
    nodes = {"/kafka-acl/Topic/foo": b"{nope", "/kafka-acl/Topic/bar": json.dumps({"version": 1, "acls": [
        {"principal": "User:alice"}, {"principal": "User:alice", "permissionType": "Allow", "operation": "Delete",
                                      "host": "*"}]}).encode()}
    a = authz(nodes)
    assert not allowed(a, "User:alice", "foo")
    assert allowed(a, "User:alice", "bar")
    assert decode_acls(b"[]") == []


def test_entry_validation():
    with pytest.raises(AclFormatError):
        AclEntry("alice", "Allow", "Delete")
    with pytest.raises(AclFormatError):
        AclEntry("User:alice", "Maybe", "Delete")
    assert AclEntry("User:a", "allow", "DESCRIBE_CONFIGS").operation == "DescribeConfigs"


def test_authorizer_only_with_a_class_name():
    assert authorizer_from_config(None, {}) is None
    assert authorizer_from_config(None, {"authorizer.class.name": ""}) is None
    a = authorizer_from_config(None, {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                      "super.users": "User:a; User:b", "allow.everyone.if.no.acl.found": "true"})
    assert a.super_users == {"User:a", "User:b"} and a.allow_everyone_if_no_acl_found


# ------------------------------------------------------------------------------------------------ SASL

@pytest.mark.parametrize("token, expected", [
    (b"\x00alice\x00secret", ("alice", "secret")),
    (b"alice\x00alice\x00secret", ("alice", "secret")),
])
def test_plain_token(token, expected):
    assert parse_plain_token(token) == expected


@pytest.mark.parametrize("token, message", [
    (b"\x00\x00secret", "username not specified"),
    (b"\x00alice\x00", "password not specified"),
    (b"bob\x00alice\x00secret", "authorization id that is different from username"),
    (b"alice-secret", "expected 3 tokens"),
])
def test_plain_token_errors(token, message):
    with pytest.raises(SaslAuthenticationError, match=message):
        parse_plain_token(token)


def test_static_users_from_jaas():
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
    assert static_users({"listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas}) == {
        "admin": "admin-secret", "alice": "alice-secret"}


class Header:
    def __init__(self, key: int, version: int):
        self.request_api_key, self.request_api_version, self.client_id = key, version, "c"


def test_handshake_authenticate_and_gate():
    from kafkatier.server import scram
    from kafkatier.server.network import CloseAfterResponse

    bob = scram.new_credential("SCRAM-SHA-256", "pw", salt=b"s" * 16).to_config()
    zk = FakeZk({"/config/users/bob": json.dumps({"version": 1, "config": {"SCRAM-SHA-256": bob}}).encode(),
                "/config/users/eve": json.dumps({"version": 1, "config": {"plain.password": "pw"}}).encode()})
    sasl = SaslPlainServer(PlainCredentialStore(zk, {"alice": "secret"}), failed_authentication_delay_ms=50)
    ctx = ConnectionContext("c1", ("127.0.0.1", 1))
    metadata = Header(3, 12)
    assert not sasl.gate(ctx, metadata, object())
    assert sasl.gate(ctx, Header(18, 3), object())
    fetch = type("Fetch", (), {"replica_id": 2})()
    assert not sasl.gate(ctx, Header(1, 11), fetch)  # a replica id proves nothing: brokers log in too

    r = sasl.handle_handshake(Header(17, 1), SaslHandshakeRequest(mechanism="SCRAM-SHA-256", version=1), ctx)
    assert isinstance(r, CloseAfterResponse)  # not enabled on this listener: answered, then closed
    assert r.response.error_code == Errors.UNSUPPORTED_SASL_MECHANISM and list(r.response.mechanisms) == ["PLAIN"]
    r = sasl.handle_authenticate(Header(36, 2), SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00secret", version=2),
                                 ctx)
    assert r.response.error_code == Errors.ILLEGAL_SASL_STATE  # no PLAIN handshake yet

    assert sasl.handle_handshake(Header(17, 1), SaslHandshakeRequest(mechanism="PLAIN", version=1), ctx).error_code == 0
    fut = sasl.handle_authenticate(Header(36, 2), SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00wrong", version=2),
                                   ctx)
    r = fut.result(timeout=5)  # answered after the failed-authentication delay, then the connection closes
    assert isinstance(r, CloseAfterResponse) and r.response.error_code == Errors.SASL_AUTHENTICATION_FAILED
    assert r.response.error_message == "Authentication failed: Invalid username or password"
    assert not ctx.authenticated and not sasl.gate(ctx, metadata, object())

    for user, pw, ok in (("alice", b"secret", True), ("bob", b"pw", True), ("eve", b"pw", False)):
        c = ConnectionContext(f"c-{user}", ("127.0.0.1", 1))
        assert sasl.handle_handshake(Header(17, 1), SaslHandshakeRequest(mechanism="PLAIN", version=1),
                                     c).error_code == 0
        r = sasl.handle_authenticate(Header(36, 1), SaslAuthenticateRequest(
            auth_bytes=b"\x00" + user.encode() + b"\x00" + pw, version=1), c)
        if not ok:  # a clear-text password in ZooKeeper is never used
            assert r.result(timeout=5).response.error_code == Errors.SASL_AUTHENTICATION_FAILED
            continue
        assert isinstance(r, Authenticated) and r.principal == f"User:{user}"
        assert r.response.error_code == 0 and r.response.session_lifetime_ms == 0
        assert sasl.gate(attrs.evolve(c, principal=r.principal, authenticated=True), metadata, object())


def test_scram_exchange_both_mechanisms():
    from kafkatier.server import scram

    for mechanism in scram.MECHANISMS:
        stored = {"carol": scram.new_credential(mechanism, "c-pw")}
        for password, ok in (("c-pw", True), ("nope", False)):
            server = scram.ScramSaslServer(mechanism, lambda u, m: stored.get(u) if m == mechanism else None)
            client = scram.ScramSaslClient(mechanism, "carol", password)
            server_first = server.evaluate(client.first())
            if not ok:
                with pytest.raises(scram.ScramError, match="Invalid user credentials"):
                    server.evaluate(client.final(server_first))
                continue
            client.verify(server.evaluate(client.final(server_first)))
            assert server.complete and server.username == "carol"
        with pytest.raises(scram.ScramError):  # unknown user
            scram.ScramSaslServer(mechanism, lambda u, m: None).evaluate(b"n,,n=nobody,r=abc")
    text = scram.new_credential("SCRAM-SHA-512", "x", iterations=4096).to_config()
    assert text.startswith("salt=") and ",stored_key=" in text and ",server_key=" in text
    assert text.endswith(",iterations=4096") and "x" not in text.split(",")[-1][:0]
    assert scram.ScramCredential.from_config(text).iterations == 4096
