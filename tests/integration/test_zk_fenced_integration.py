"""Fenced controller writes and the controller election against a real ZooKeeper; tree validation."""
from __future__ import annotations

import pytest

from kafkatier.zk import codecs, paths
from kafkatier.zk.client import start_client
from kafkatier.zk.errors import NodeExistsError
from kafkatier.zk.fenced import (Check, ControllerMovedError, Create, Delete, FencedZkWriter, SetData,
                                 register_controller_and_increment_epoch)
from kafkatier.zk.validate import validate_tree

from zk_support import snapshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
def other_session(zk_root):
    """A second client (another 'broker') on the same chroot."""
    client = start_client(zk_root[0])
    yield client
    client.stop()
    client.close()


def test_election_epochs_and_fencing_of_the_old_controller(zk, other_session):
    epoch, version = register_controller_and_increment_epoch(zk, 1, 1700000000000)
    assert (epoch, version) == (1, 1)
    assert zk.get(paths.CONTROLLER_EPOCH)[0] == b"1"
    assert codecs.ControllerZNode.decode(zk.get(paths.CONTROLLER)[0]).broker_id == 1
    old = FencedZkWriter(zk, version)
    old.create("/brokers/topics/t", codecs.TopicAssignment({0: (1,)}).encode(), create_parents=True)

    # Broker 2 cannot elect itself while /controller exists, and the attempt changes nothing.
    with pytest.raises(ControllerMovedError):
        register_controller_and_increment_epoch(other_session, 2, 1700000000001)
    assert zk.get(paths.CONTROLLER_EPOCH)[0] == b"1"

    # Broker 1 resigns (fenced delete of /controller); broker 2 wins epoch 2.
    old.delete(paths.CONTROLLER)
    assert register_controller_and_increment_epoch(other_session, 2, 1700000000002) == (2, 2)

    before = snapshot(zk)
    with pytest.raises(ControllerMovedError):
        old.set_data("/brokers/topics/t", codecs.TopicAssignment({0: (1, 2)}).encode())
    with pytest.raises(ControllerMovedError):
        old.create("/brokers/topics/t/partitions/0/state",
                   codecs.LeaderIsrAndControllerEpoch(1, 0, (1,), 1).encode(), create_parents=True)
    with pytest.raises(ControllerMovedError):
        old.delete_recursive("/brokers/topics/t")
    with pytest.raises(ControllerMovedError):
        old.multi([Create("/admin/preferred_replica_election"), Delete(paths.CONTROLLER)])
    assert snapshot(zk) == before                                     # the stale controller changed nothing

    new = FencedZkWriter(other_session, 2)
    new.set_data("/brokers/topics/t", codecs.TopicAssignment({0: (1, 2)}).encode())
    assert codecs.TopicAssignment.decode(zk.get("/brokers/topics/t")[0]).partitions == {0: (1, 2)}


def test_session_loss_of_the_controller_lets_another_broker_win(zk_root, other_session):
    first = start_client(zk_root[0])
    try:
        assert register_controller_and_increment_epoch(first, 1, 1) == (1, 1)
    finally:
        first.stop()
        first.close()                                                  # ephemeral /controller goes away
    assert register_controller_and_increment_epoch(other_session, 2, 2) == (2, 2)


def test_fenced_writes_results_and_failures(zk):
    _, version = register_controller_and_increment_epoch(zk, 1, 1)
    w = FencedZkWriter(zk, version)

    state = codecs.LeaderIsrAndControllerEpoch(1, 0, (1, 2), 1)
    assert w.create(paths.partition_state("t", 0), state.encode(), create_parents=True) == \
        paths.partition_state("t", 0)
    assert zk.get(paths.topic_partitions("t"))[0] in (b"", None)

    stat = w.set_data(paths.partition_state("t", 0), state.encode(), version=0)
    assert stat.version == 1
    assert codecs.decode_partition_state(*zk.get(paths.partition_state("t", 0))).partition_epoch == 1

    seq = w.create(paths.ISR_CHANGE_NOTIFICATION + "/isr_change_",
                   codecs.IsrChangeNotification({("t", 0)}).encode(), sequence=True, create_parents=True)
    assert seq == paths.ISR_CHANGE_NOTIFICATION + "/isr_change_0000000000"

    # One failing op rolls the whole multi back and names the op.
    with pytest.raises(NodeExistsError) as ei:
        w.multi([Create("/kafkatier"),
                 Create(paths.partition_state("t", 0), b"{}")])
    assert ei.value.op.path == paths.partition_state("t", 0)
    assert zk.exists("/kafkatier") is None

    # A user check inside the multi (e.g. on tiered_epoch) guards the write as well.
    w.create(paths.tiered_epoch("t"), codecs.encode_tiered_epoch(0), create_parents=True)
    w.create(paths.tiered_state("t"), codecs.TieredState("ENABLED").encode())
    results = w.multi([Check(paths.tiered_epoch("t"), 0),
                       SetData(paths.tiered_state("t"), codecs.TieredState("DISABLED").encode())])
    assert results[0] is True and results[1].version == 1

    w.delete_recursive(paths.topic("t"))
    assert zk.exists(paths.topic("t")) is None
    w.delete_recursive(paths.topic("t"))                              # idempotent


def test_validate_tree_accepts_what_we_write_and_flags_malformed(zk):
    _, version = register_controller_and_increment_epoch(zk, 1, 1)
    w = FencedZkWriter(zk, version)
    for p in paths.PERSISTENT_PATHS:
        zk.ensure_path(p)
    zk.create(paths.broker(1), codecs.BrokerRegistration.create(
        1, ["PLAINTEXT://127.0.0.1:9092"], {"PLAINTEXT": "PLAINTEXT"}, 1).encode(), ephemeral=True)
    zk.create(paths.topic("t"), codecs.TopicAssignment({0: (1,)}, topic_id=codecs.new_topic_id()).encode())
    w.create(paths.partition_state("t", 0), codecs.LeaderIsrAndControllerEpoch(1, 0, (1,), 1).encode(),
             create_parents=True)
    w.create(paths.tiered_epoch("t"), codecs.encode_tiered_epoch(0), create_parents=True)
    w.create(paths.tiered_state("t"), codecs.TieredState("ENABLED").encode())
    zk.create(paths.topic_config("t"), codecs.EntityConfig({"remote.storage.enable": "true"}).encode())
    zk.create(paths.CONFIG_CHANGES + "/config_change_", codecs.ConfigChangeNotification.of("topics", "t").encode(),
              sequence=True)
    zk.create(paths.CLUSTER_ID, codecs.ClusterIdZNode("abc").encode(), makepath=True)
    zk.create(paths.FEATURE, codecs.FeatureZNode({}).encode())
    zk.create(paths.delete_topic("t"))
    zk.create(paths.control_requests(1) + "/request_", codecs.ControlRequest(
        api_key=5, api_version=5, api_name="StopReplica", controller_id=1, controller_epoch=1, broker_epoch=1,
        body={}).encode(), sequence=True, makepath=True)
    zk.create("/consumers/legacy-group", b"whatever")                 # not ours: ignored
    assert validate_tree(zk) == []

    zk.set(paths.partition_state("t", 0), b'{"version":1,"leader":"1"}')
    zk.create(paths.topic("t") + "/mystery", b"")
    zk.set(paths.delete_topic("t"), b"data on a null-data znode")
    problems = {p.path: p.reason for p in validate_tree(zk)}
    assert set(problems) == {paths.partition_state("t", 0), paths.topic("t") + "/mystery", paths.delete_topic("t")}
    assert "partition_state" in problems[paths.partition_state("t", 0)]
    assert "unknown znode" in problems[paths.topic("t") + "/mystery"]
