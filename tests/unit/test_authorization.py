"""Kafka's authorization rules without a broker: AclAuthorizer.authorize_by_resource_type (KIP-679), ACL binding
filters (ANY / MATCH / literal / prefixed), change notifications, AuthHelper (Kafka's per-API rules, failing
closed) and the ``kafkatier acls`` option handling and output format."""
from __future__ import annotations

import argparse
import json

import pytest

from kafkatier.cli.acls import bindings, block, check_args
from kafkatier.cli.main import UsageError, build_parser
from kafkatier.protocol.errors import Errors, KafkaError
from kafkatier.server.acl import (ACL_CHANGES, EXTENDED_CHANGES, AclAuthorizer, AclBinding, AclBindingFilter,
                                  AclEntry, AclFormatError, ResourcePattern, parse_change_notification)
from kafkatier.server.auth_helper import API_ACL_TABLE, AuthHelper
from kafkatier.server.transaction_apis import VERSIONS as TRANSACTION_API_VERSIONS
from kafkatier.server.kafka_apis import KafkaApis
from kafkatier.server.network import ConnectionContext
from fakes import FakeZk


def acls(*entries) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": p, "permissionType": perm, "operation": op, "host": "*"} for p, perm, op in entries]}).encode()


def by_type(nodes, **kw) -> bool:
    return AclAuthorizer(FakeZk(nodes), **kw).authorize_by_resource_type("User:alice", "10.0.0.1", "Write", "Topic")


def test_authorize_by_resource_type_follows_kip_679():
    assert not by_type({})
    assert by_type({}, allow_everyone_if_no_acl_found=True)
    assert by_type({"/kafka-acl/Topic/orders": acls(("User:alice", "Allow", "Write"))})
    assert by_type({"/kafka-acl/Topic/orders": acls(("User:alice", "Allow", "All"))})
    assert not by_type({"/kafka-acl/Topic/orders": acls(("User:alice", "Allow", "Read"))})  # no implication
    assert not by_type({"/kafka-acl/Topic/orders": acls(("User:alice", "Allow", "Write"),
                                                        ("User:alice", "Deny", "Write"))})
    assert not by_type({"/kafka-acl/Topic/orders": acls(("User:alice", "Allow", "Write")),
                        "/kafka-acl-extended/prefixed/Topic/ord": acls(("User:*", "Deny", "Write"))})
    assert by_type({"/kafka-acl-extended/prefixed/Topic/pay": acls(("User:alice", "Allow", "Write")),
                    "/kafka-acl/Topic/other": acls(("User:alice", "Deny", "Write"))})
    assert not by_type({"/kafka-acl/Topic/*": acls(("User:alice", "Deny", "Write"))},
                       allow_everyone_if_no_acl_found=True)  # a deny on the wildcard denies everything
    assert AclAuthorizer(FakeZk({}), super_users=["User:alice"]).authorize_by_resource_type(
        "User:alice", "h", "Write", "Topic")


def test_binding_filters_match_as_kafka():
    lit, pre, star = (ResourcePattern("Topic", "orders"), ResourcePattern("Topic", "ord", "PREFIXED"),
                      ResourcePattern("Topic", "*"))
    match = AclBindingFilter("Topic", "orders", "MATCH")
    assert [match.matches_pattern(p) for p in (lit, pre, star)] == [True, True, True]
    assert [AclBindingFilter("Topic", "orders", "ANY").matches_pattern(p) for p in (lit, pre, star)] == [
        True, False, False]
    assert [AclBindingFilter("Topic", "ord", "PREFIXED").matches_pattern(p) for p in (lit, pre, star)] == [
        False, True, False]
    assert AclBindingFilter().matches_pattern(ResourcePattern("Group", "g"))
    assert not AclBindingFilter("Group").matches_pattern(lit)
    e = AclEntry("User:alice", "Allow", "Read", "*")
    assert AclBindingFilter(principal="User:alice", operation="READ").matches_entry(e)
    assert not AclBindingFilter(principal="User:bob").matches_entry(e)
    assert not AclBindingFilter(permission_type="Deny").matches_entry(e)
    with pytest.raises(AclFormatError):
        AclBindingFilter(pattern_type="SOMETIMES")


def test_acls_lists_bindings_and_change_notifications_name_resources():
    nodes = {"/kafka-acl/Topic/orders": acls(("User:alice", "Allow", "Read")),
             "/kafka-acl-extended/prefixed/Group/g-": acls(("User:bob", "Deny", "All")),
             "/kafka-acl/Bogus/x": acls(("User:x", "Allow", "Read"))}
    a = AclAuthorizer(FakeZk(nodes))
    assert {(b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type) for b in a.bindings()} == {
        ("Topic", "orders", "LITERAL"), ("Group", "g-", "PREFIXED")}  # the unknown type is skipped
    assert a.acls(AclBindingFilter(principal="User:bob")) == [
        AclBinding(ResourcePattern("Group", "g-", "PREFIXED"), AclEntry("User:bob", "Deny", "All", "*"))]
    assert parse_change_notification(ACL_CHANGES, b"TOPIC:orders") == ResourcePattern("Topic", "orders")
    assert parse_change_notification(EXTENDED_CHANGES, json.dumps(
        {"version": 1, "resourceType": "Group", "name": "g-", "patternType": "PREFIXED"}).encode()) == \
        ResourcePattern("Group", "g-", "PREFIXED")
    for root, bad in ((ACL_CHANGES, b"orders"), (ACL_CHANGES, b"PLANET:x"), (EXTENDED_CHANGES, b"{")):
        with pytest.raises(AclFormatError):
            parse_change_notification(root, bad)


class Broken:
    def authorize(self, *a):
        raise ConnectionError("zookeeper is gone")

    def authorize_by_resource_type(self, *a):
        raise ConnectionError("zookeeper is gone")


def ctx(principal: str | None = "User:alice") -> ConnectionContext:
    return ConnectionContext("c1", ("10.0.0.1", 1234), principal=principal, authenticated=principal is not None)


def test_auth_helper_allows_without_authorizer_and_fails_closed():
    assert AuthHelper(None).authorize(ctx(), "Write", "Topic", "t")
    assert AuthHelper(None).readable_topics(ctx(None), 2, ["t"]) == {"t"}
    broken = AuthHelper(Broken())
    assert not broken.authorize(ctx(), "Read", "Topic", "t")
    assert broken.init_producer_id_error(ctx(), None) == Errors.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(KafkaError) as e:
        broken.check_config_resource(ctx(), 4, "1", alter=True)
    assert e.value.error == Errors.CLUSTER_AUTHORIZATION_FAILED


def test_auth_helper_rules():
    nodes = {"/kafka-acl/Topic/t": acls(("User:alice", "Allow", "Read")),
             "/kafka-acl/Topic/new": acls(("User:alice", "Allow", "Describe")),
             "/kafka-acl-extended/prefixed/Topic/auto-": acls(("User:alice", "Allow", "Create"),
                                                             ("User:alice", "Allow", "Describe")),
             "/kafka-acl/Cluster/kafka-cluster": acls(("User:ANONYMOUS", "Allow", "ClusterAction"))}
    auth = AuthHelper(AclAuthorizer(FakeZk(nodes)))
    assert auth.readable_topics(ctx(), -1, ["t", "u"]) == {"t"}
    assert auth.readable_topics(ctx(), 2, ["t", "u"]) == set()  # a replica fetch needs CLUSTER_ACTION
    assert auth.readable_topics(ctx(None), 2, ["t", "u"]) == {"t", "u"}
    shown, denied = auth.metadata_topics(ctx(), ["t", "u", "new", "auto-1"], False, lambda n: n != "t", True)
    assert (shown, denied) == (["t", "auto-1"], ["u", "new"])
    assert auth.metadata_topics(ctx(), ["t", "u"], True, lambda n: False, True) == (["t"], [])
    assert auth.authorized_operations(ctx(), "Topic", "t") == {3, 8}  # READ, and DESCRIBE implied by it
    assert auth.cluster_operations(ctx(), False) is None
    assert auth.cluster_operations(ctx(), True) == set()


def test_the_table_covers_every_api_we_serve():
    served = set(KafkaApis.VERSIONS) | {8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47, 21, 34, 35, 29, 30, 31} | set(
        TRANSACTION_API_VERSIONS)
    assert served <= set(API_ACL_TABLE)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["acls", "--bootstrap-server", "localhost:9092", *argv])


def test_acls_cli_bindings_and_errors():
    got = bindings(parse("--add", "--producer", "--consumer", "--idempotent", "--topic", "t", "--group", "g",
                         "--allow-principal", "User:a", "--allow-host", "10.0.0.1"))
    assert {(p.resource_type, p.name): sorted(e.operation for e in es) for p, es in got.items()} == {
        ("Topic", "t"): ["Create", "Describe", "Read", "Write"], ("Group", "g"): ["Read"],
        ("Cluster", "kafka-cluster"): ["IdempotentWrite"]}
    assert all(e.host == "10.0.0.1" for es in got.values() for e in es)
    deny = bindings(parse("--add", "--deny-principal", "User:b", "--topic", "t", "--resource-pattern-type",
                          "PREFIXED"))
    assert list(deny) == [ResourcePattern("Topic", "t", "PREFIXED")]
    assert deny[ResourcePattern("Topic", "t", "PREFIXED")] == [AclEntry("User:b", "Deny", "All", "*")]
    for argv, message in ((["--add", "--topic", "t"], "You must specify one of: --allow-principal"),
                          (["--remove"], "You must provide at least one resource"),
                          (["--list", "--remove"], "exactly one action"),
                          (["--add", "--consumer", "--topic", "t", "--allow-principal", "User:a"], "--group"),
                          (["--add", "--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type",
                            "any"], "'any' or 'match'")):
        with pytest.raises(UsageError, match=message):
            check_args(parse(*argv))
    with pytest.raises(UsageError, match="ResourceType CLUSTER only supports operations"):
        bindings(parse("--add", "--cluster", "--allow-principal", "User:a", "--operation", "Read"))
    with pytest.raises(UsageError, match="Invalid operation 'Fly'"):
        bindings(parse("--add", "--topic", "t", "--allow-principal", "User:a", "--operation", "Fly"))


def test_acls_cli_output_format():
    text = block("Current ACLs for resource", ResourcePattern("TransactionalId", "tx"),
                 [AclEntry("User:a", "Allow", "Write"), AclEntry("User:b", "Deny", "DescribeConfigs", "1.2.3.4")])
    assert text == ("Current ACLs for resource `ResourcePattern(resourceType=TRANSACTIONAL_ID, name=tx, "
                    "patternType=LITERAL)`: \n \t(principal=User:a, host=*, operation=WRITE, permissionType=ALLOW)\n"
                    "\t(principal=User:b, host=1.2.3.4, operation=DESCRIBE_CONFIGS, permissionType=DENY) \n")


def test_forwarded_config_changes_carry_only_what_the_client_may_alter():
    """A non-controller broker forwards tiered config changes; the controller authorizes the forwarding broker,
    so resources refused locally must not travel with the others."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from kafkatier.protocol import codec
    from kafkatier.protocol.build import build

    api, v = 44, 1
    req = build(codec.REGISTRY[api][0], v, {"validate_only": False, "resources": [
        {"resource_type": 2, "resource_name": name, "configs": [
            {"name": "remote.storage.enable", "config_operation": 0, "value": "false"}]} for name in ("mine", "not")]})
    sent = []

    def forward(api_key, header, request):
        sent.append([r.resource_name for r in request.resources])
        f: Future = Future()
        f.set_result(build(codec.response_class(api_key), v, {"throttle_time_ms": 0, "responses": [
            {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": r.resource_name}
            for r in request.resources]}))
        return f
    apis = KafkaApis.__new__(KafkaApis)
    apis._forward_to_controller = forward
    header = SimpleNamespace(request_api_version=v)
    denied = [{"error_code": 29, "error_message": "Topic authorization failed.", "resource_type": 2,
               "resource_name": "not"}]
    resp = apis._forward_authorized(api, header, req, denied).result(timeout=5)
    assert sent == [["mine"]]
    assert [(r.resource_name, r.error_code) for r in resp.responses] == [("mine", 0), ("not", 29)]
