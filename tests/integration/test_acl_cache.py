"""The started AclAuthorizer answers from its cache, which follows ``/kafka-acl-changes`` and
``/kafka-acl-extended-changes`` (Kafka's ZkNodeChangeNotificationListener) on a real ZooKeeper."""
from __future__ import annotations

import pytest

from kafkatier.server.acl import (AclAuthorizer, AclBinding, AclBindingFilter, AclEntry, ResourcePattern, add_acls,
                                  encode_acls, remove_acls)
from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_cache_follows_change_notifications(zk):
    add_acls(zk, "Topic", "before", [AclEntry("User:alice", "Allow", "Read")])
    a = AclAuthorizer(zk)
    a.start()
    try:
        assert a.authorize("User:alice", "h", "Read", "Topic", "before")  # loaded at start

        def sees(op: str, name: str, expected: bool) -> None:
            wait_for(lambda: a.authorize("User:alice", "h", op, "Topic", name) == expected, 10, interval=0.01,
                     message=f"{op} {name} -> {expected}")
        add_acls(zk, "Topic", "orders", [AclEntry("User:alice", "Allow", "Write")])  # another writer
        sees("Write", "orders", True)
        add_acls(zk, "Topic", "pay", [AclEntry("User:alice", "Allow", "Read")], pattern_type="PREFIXED")
        sees("Read", "payments", True)
        remove_acls(zk, "Topic", "orders")
        sees("Write", "orders", False)

        # A znode changed without a notification stays unseen (the cache is what answers) ...
        zk.set("/kafka-acl/Topic/before", encode_acls([AclEntry("User:alice", "Deny", "Read")]))
        add_acls(zk, "Topic", "marker", [AclEntry("User:x", "Allow", "Read")])
        wait_for(lambda: a.authorize("User:x", "h", "Read", "Topic", "marker"), 10, interval=0.01,
                 message="marker")
        assert a.authorize("User:alice", "h", "Read", "Topic", "before")
        # ... and a malformed notification is skipped without stopping the listener.
        zk.create("/kafka-acl-changes/acl_changes_", b"no-colon", sequence=True)
        zk.create("/kafka-acl-changes/acl_changes_", b"TOPIC:before", sequence=True)
        sees("Read", "before", False)

        # This broker's own writes (CreateAcls / DeleteAcls) are in its cache at once.
        a.create_acls([AclBinding(ResourcePattern("Group", "g"), AclEntry("User:alice", "Allow", "Read"))])
        assert a.authorize("User:alice", "h", "Read", "Group", "g")
        assert [b.pattern.name for b in a.delete_acls(AclBindingFilter("Group", "g", "LITERAL"))] == ["g"]
        assert not a.authorize("User:alice", "h", "Read", "Group", "g")
        assert not zk.exists("/kafka-acl/Group/g")
    finally:
        a.close()
