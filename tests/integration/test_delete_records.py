"""DeleteRecords' ZooKeeper side on a real ZooKeeper: ACLs in Kafka's ``/kafka-acl`` layout with change
notifications, and SASL/PLAIN users in ``/config/users/<name>`` (valid against zk_schemas)."""
from __future__ import annotations

import json

import pytest

from kafkatier.server.acl import AclAuthorizer, AclEntry, add_acls, remove_acls
from kafkatier.server.sasl import PlainCredentialStore, set_user_password
from kafkatier.zk.validate import validate_tree

pytestmark = pytest.mark.integration

ALICE_DELETE = AclEntry("User:alice", "Allow", "Delete", "*")


def test_acls_are_written_in_kafka_layout_with_notifications(zk):
    add_acls(zk, "Topic", "foo", [ALICE_DELETE, AclEntry("User:bob", "Deny", "All", "10.0.0.1")])
    add_acls(zk, "Topic", "foo", [ALICE_DELETE])  # already there: no change, no notification
    body = json.loads(zk.get("/kafka-acl/Topic/foo")[0])
    assert body == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Delete", "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "All", "host": "10.0.0.1"}]}
    changes = zk.get_children("/kafka-acl-changes")
    assert len(changes) == 1 and changes[0].startswith("acl_changes_") and len(changes[0]) == len("acl_changes_") + 10
    assert zk.get(f"/kafka-acl-changes/{changes[0]}")[0] == b"TOPIC:foo"

    add_acls(zk, "Topic", "pay", [ALICE_DELETE], pattern_type="PREFIXED")
    assert json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/pay")[0])["acls"] == [ALICE_DELETE.to_json()]
    note = zk.get_children("/kafka-acl-extended-changes")[0]
    assert json.loads(zk.get(f"/kafka-acl-extended-changes/{note}")[0]) == {
        "version": 1, "resourceType": "Topic", "name": "pay", "patternType": "PREFIXED"}


def test_authorizer_sees_changes_on_the_next_check(zk):
    a = AclAuthorizer(zk)
    assert not a.authorize("User:alice", "127.0.0.1", "Delete", "Topic", "foo")
    add_acls(zk, "Topic", "foo", [ALICE_DELETE])
    assert a.authorize("User:alice", "127.0.0.1", "Delete", "Topic", "foo")
    add_acls(zk, "Topic", "*", [AclEntry("User:*", "Deny", "Delete", "*")])
    assert not a.authorize("User:alice", "127.0.0.1", "Delete", "Topic", "foo")
    remove_acls(zk, "Topic", "*")
    assert zk.exists("/kafka-acl/Topic/*") is None
    assert a.authorize("User:alice", "127.0.0.1", "Delete", "Topic", "foo")
    add_acls(zk, "Topic", "pay", [ALICE_DELETE], pattern_type="PREFIXED")
    assert a.authorize("User:alice", "127.0.0.1", "Delete", "Topic", "payments")
    assert len(zk.get_children("/kafka-acl-changes")) == 3


def test_plain_users_in_zookeeper(zk):
    zk.create("/config/users/carol", json.dumps({"version": 1, "config": {"consumer_byte_rate": "1024"}}).encode(),
              makepath=True)
    set_user_password(zk, "carol", "c-secret")
    set_user_password(zk, "dave", "d-secret")
    stored = json.loads(zk.get("/config/users/carol")[0])["config"]
    assert stored["consumer_byte_rate"] == "1024"  # other keys kept
    assert sorted(stored) == ["SCRAM-SHA-256", "SCRAM-SHA-512", "consumer_byte_rate"]  # salted, never clear text
    assert "c-secret" not in json.dumps(stored) and stored["SCRAM-SHA-256"].endswith(",iterations=4096")
    store = PlainCredentialStore(zk, {"dave": "static-wins"})
    assert store.verify("carol", "c-secret")
    assert not store.verify("carol", "wrong")
    assert store.verify("dave", "static-wins") and not store.verify("dave", "d-secret")
    assert not store.verify("nobody", "x")
    zk.create("/config/users/broken", b"{not json", makepath=True)
    assert not store.verify("broken", "x")  # malformed: logged and refused, never a crash
    zk.delete("/config/users/broken")
    assert validate_tree(zk, "/config") == []
    with pytest.raises(ValueError):
        set_user_password(zk, "a/b", "x")
