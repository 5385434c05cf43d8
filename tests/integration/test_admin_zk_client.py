"""AdminZkClient against a real ZooKeeper: topic layout, Kafka's errors, config changes and the hooks."""
from __future__ import annotations

import json
import re

import pytest

from kafkatier.admin.admin_zk_client import AdminZkClient
from kafkatier.admin.replica_assignment import InvalidReplicaAssignmentError
from kafkatier.admin.topic_config import ConfigSource
from kafkatier.protocol.errors import (Errors, InvalidConfigurationError, InvalidReplicationFactorError,
                                       InvalidRequestError, InvalidTopicError, KafkaError, TopicAlreadyExistsError,
                                       UnknownTopicOrPartitionError)
from kafkatier.zk import codecs, paths
from kafkatier.zk.errors import NodeExistsError
from kafkatier.zk.fenced import Create

from zk_support import snapshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

CHANGE_RE = re.compile(r"config_change_\d{10}")


def register_brokers(zk, ids, racks=None):
    for i in ids:
        reg = codecs.BrokerRegistration.create(i, [f"PLAINTEXT://127.0.0.1:{9090 + i}"], {"PLAINTEXT": "PLAINTEXT"},
                                               1700000000000, rack=(racks or {}).get(i))
        zk.create(paths.broker(i), reg.encode(), ephemeral=True, makepath=True)


@pytest.fixture
def admin(zk):
    register_brokers(zk, [1, 2, 3])
    return AdminZkClient(zk)


def changes(zk):
    return sorted(zk.get_children(paths.CONFIG_CHANGES)) if zk.exists(paths.CONFIG_CHANGES) else []


# ----------------------------------------------------------------------------------------------------- create

def test_create_topic_writes_kafkas_layout(admin, zk):
    """Acceptance scenario 7 (docs/acceptance.md; the admin half; partition states are the controller's)."""
    created = admin.create_topic("t", 2, 2, {"retention.ms": "1000"})
    js = json.loads(zk.get(paths.topic("t"))[0])
    assert js["version"] == 3
    assert js["adding_replicas"] == {} and js["removing_replicas"] == {}
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", js["topic_id"]) and js["topic_id"] == created.topic_id
    assert sorted(js["partitions"]) == ["0", "1"]
    for replicas in js["partitions"].values():
        assert len(replicas) == 2 and len(set(replicas)) == 2 and set(replicas) <= {1, 2, 3}
    assert json.loads(zk.get(paths.topic_config("t"))[0]) == {"version": 1, "config": {"retention.ms": "1000"}}
    assert (created.num_partitions, created.replication_factor) == (2, 2)
    assert admin.get_topic_assignment("t") == {int(p): tuple(r) for p, r in js["partitions"].items()}
    assert admin.get_topic_id("t") == created.topic_id
    assert admin.topic_exists("t") and admin.list_topics() == ["t"]


def test_create_without_counts_uses_broker_defaults(zk):
    register_brokers(zk, [1, 2])
    admin = AdminZkClient(zk, default_num_partitions=3, default_replication_factor=2)
    created = admin.create_topic("d")
    assert created.num_partitions == 3 and created.replication_factor == 2
    assert json.loads(zk.get(paths.topic_config("d"))[0])["config"] == {}


def test_manual_assignment(admin, zk):
    admin.create_topic("m", assignment={0: [3, 1], 1: [1, 2]})
    assert admin.get_topic_assignment("m") == {0: (3, 1), 1: (1, 2)}
    with pytest.raises(InvalidReplicaAssignmentError, match="includes broker 7, but no such broker"):
        admin.create_topic("m2", assignment={0: [7]})
    with pytest.raises(InvalidRequestError, match="Both numPartitions or replicationFactor and replicasAssignments"):
        admin.create_topic("m3", 1, -1, assignment={0: [1]})
    assert not admin.topic_exists("m2") and not admin.topic_exists("m3")


def test_create_errors_are_kafkas_and_write_nothing(admin, zk):
    admin.create_topic("a.b", 1, 1)
    before = snapshot(zk)
    cases = [
        (("a.b", 1, 1), TopicAlreadyExistsError, "Topic 'a.b' already exists."),
        (("a_b", 1, 1), InvalidTopicError, "Topic 'a_b' collides with existing topics: a.b"),
        (("bad name", 1, 1), InvalidTopicError,
         "Topic name \"bad name\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' "
         "and '-'"),
        ((".", 1, 1), InvalidTopicError, 'Topic name cannot be "." or ".."'),
        (("x" * 250, 1, 1), InvalidTopicError,
         "Topic name is illegal, it can't be longer than 249 characters, Topic name: " + "x" * 250),
        (("ok", 1, 4), InvalidReplicationFactorError, "Replication factor: 4 larger than available brokers: 3."),
        (("ok", 1, 1, {"retention.ms": "soon"}), InvalidConfigurationError,
         "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
        (("ok", 1, 1, {"no.such": "1"}), InvalidConfigurationError, "Unknown topic config name: no.such"),
    ]
    for args, error, message in cases:
        with pytest.raises(error) as e:
            admin.create_topic(*args)
        assert e.value.message == message
    assert snapshot(zk) == before


def test_topic_marked_for_deletion_cannot_be_recreated(admin, zk):
    admin.create_topic("gone", 1, 1)
    assert admin.delete_topic("gone") is True
    assert zk.exists(paths.delete_topic("gone")) is not None
    assert admin.delete_topic("gone") is False          # already marked: success
    with pytest.raises(TopicAlreadyExistsError, match=r"^Topic 'gone' is marked for deletion\.$") as e:
        admin.create_topic("gone", 1, 1)
    assert e.value.error is Errors.TOPIC_ALREADY_EXISTS
    admin.create_topic("kept", 1, 1)
    assert admin.list_topics() == ["gone", "kept"]
    assert admin.list_topics(include_marked_for_deletion=False) == ["kept"]


def test_delete_unknown_topic(admin):
    for name in ("nope", "..", "a/b"):
        with pytest.raises(UnknownTopicOrPartitionError) as e:
            admin.delete_topic(name)
        assert e.value.message == f"Topic `{name}` to delete does not exist"


def test_validate_only_writes_nothing(admin, zk):
    zk.ensure_path(paths.CONFIG_CHANGES)
    admin.create_topic("t", 1, 1)
    before = snapshot(zk)
    created = admin.create_topic("v", 2, 3, {"cleanup.policy": "compact"}, validate_only=True)
    assert created.topic_id is None and created.num_partitions == 2 and created.replication_factor == 3
    change = admin.alter_topic_config("t", {"retention.ms": "5"}, validate_only=True)
    assert change.notification is None and change.new_config == {"retention.ms": "5"}
    assert snapshot(zk) == before


def test_leftover_config_of_a_deleted_topic_is_replaced(admin, zk):
    zk.create(paths.topic_config("again"), codecs.EntityConfig({"retention.ms": "1"}).encode(), makepath=True)
    admin.create_topic("again", 1, 1, {"segment.ms": "100"})
    assert admin.fetch_topic_config("again") == {"segment.ms": "100"}


# ----------------------------------------------------------------------------------------------- config change

def test_alter_config_writes_config_and_v2_notification(admin, zk):
    """Acceptance scenario 8 (docs/acceptance.md; the ZooKeeper half)."""
    admin.create_topic("t", 1, 1)
    before = changes(zk)
    change = admin.alter_topic_config("t", {"retention.ms": "1000"})
    assert json.loads(zk.get(paths.topic_config("t"))[0]) == {"version": 1, "config": {"retention.ms": "1000"}}
    new = [c for c in changes(zk) if c not in before]
    assert len(new) == 1 and CHANGE_RE.fullmatch(new[0])
    assert change.notification == f"{paths.CONFIG_CHANGES}/{new[0]}"
    assert json.loads(zk.get(change.notification)[0]) == {"version": 2, "entity_path": "topics/t"}

    admin.alter_topic_config("t", {"cleanup.policy": "compact"}, delete=["retention.ms", "not.set"])
    assert admin.fetch_topic_config("t") == {"cleanup.policy": "compact"}
    admin.change_topic_config("t", {"segment.ms": "100"})
    assert admin.fetch_topic_config("t") == {"segment.ms": "100"}
    assert len(changes(zk)) == len(before) + 3


def test_invalid_alter_changes_nothing(admin, zk):
    admin.create_topic("t", 1, 1, {"retention.ms": "1000"})
    before = snapshot(zk)
    with pytest.raises(InvalidConfigurationError, match="Value must be at least -1"):
        admin.alter_topic_config("t", {"retention.ms": "-7"})
    with pytest.raises(InvalidConfigurationError, match="conflict topic config setting"):
        admin.alter_topic_config("t", {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    with pytest.raises(InvalidRequestError, match="duplicate config keys"):
        admin.alter_topic_config("t", {"retention.ms": "1"}, delete=["retention.ms"])
    with pytest.raises(UnknownTopicOrPartitionError, match="Topic 'u' does not exist."):
        admin.alter_topic_config("u", {"retention.ms": "1"})
    assert snapshot(zk) == before


def test_extra_ops_share_the_config_change_transaction(admin, zk):
    admin.create_topic("t", 1, 1)
    calls = []

    def extra_ops(client, topic, old, new):
        calls.append((topic, old, new))
        if new.get("retention.ms") == "7":
            raise KafkaError("refused by the caller", Errors.INVALID_CONFIG)
        return [Create(paths.tiered_storage(topic))]

    admin.alter_topic_config("t", {"retention.ms": "5"}, extra_ops=extra_ops)
    assert calls == [("t", {}, {"retention.ms": "5"})]
    assert zk.exists(paths.tiered_storage("t")) is not None

    before = snapshot(zk)
    with pytest.raises(KafkaError, match="refused by the caller"):
        admin.alter_topic_config("t", {"retention.ms": "7"}, extra_ops=extra_ops)
    # An op that fails aborts the config write and the notification too.
    with pytest.raises(NodeExistsError):
        admin.alter_topic_config("t", {"retention.ms": "6"}, extra_ops=extra_ops)  # Create of an existing node
    assert snapshot(zk) == before


def test_a_tiered_topic_gets_its_tieredstorage_znodes_in_the_creating_transaction(zk):
    register_brokers(zk, [1])
    admin = AdminZkClient(zk, broker_config={"remote.log.storage.system.enable": "true"})
    admin.create_topic("tiered", 1, 1, {"remote.storage.enable": "true"})
    assert zk.get(paths.tiered_epoch("tiered"))[0] == b"0"


def test_concurrent_change_is_retried_and_loses_nothing(admin, zk):
    admin.create_topic("t", 1, 1)
    interfered = []

    def interfere(client, topic, old, new):
        # Another admin writes between our read and our conditional write (once).
        if not interfered:
            interfered.append(True)
            client.set(paths.topic_config(topic), codecs.EntityConfig({"segment.ms": "100"}).encode())
        return []

    change = admin.alter_topic_config("t", {"retention.ms": "1000"}, extra_ops=interfere)
    assert change.old_config == {"segment.ms": "100"}
    assert admin.fetch_topic_config("t") == {"segment.ms": "100", "retention.ms": "1000"}


def test_describe_topic_config(admin):
    admin.create_topic("t", 1, 1, {"retention.ms": "1000"})
    es = {e["name"]: e for e in admin.describe_topic_config("t")}
    assert es["retention.ms"] == {"name": "retention.ms", "value": "1000", "source": 1, "read_only": False,
                                  "sensitive": False, "is_default": False, "type": 5,
                                  "synonyms": [{"name": "retention.ms", "value": "1000", "source": 1}]}
    assert (es["cleanup.policy"]["value"], es["cleanup.policy"]["source"]) == ("delete", ConfigSource.DEFAULT_CONFIG)
    assert [e.name for e in admin.describe_topic_config_entries("t", ["segment.ms"])] == ["segment.ms"]
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topic_config("missing")
