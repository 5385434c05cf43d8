"""FencedZkWriter logic against an in-memory ZooKeeper double: fencing, error mapping, and what happens when a
commit's reply is lost.  (The same behaviour against a real ZooKeeper is in the integration tests.)"""
from __future__ import annotations

import posixpath
from types import SimpleNamespace

import pytest
from kazoo.exceptions import (BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, NotEmptyError,
                              RolledBackError, RuntimeInconsistency)

from kafkatier.protocol.errors import Errors, NotControllerError
from kafkatier.zk import fenced as f
from kafkatier.zk.codecs import ControllerZNode
from kafkatier.zk.fenced import (Check, ControllerMovedError, Create, Delete, FencedZkWriter, SetData,
                                 register_controller_and_increment_epoch)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    real = f._retrying
    monkeypatch.setattr(f, "_retrying", lambda attempts, retry_on=None: real(attempts, retry_on).copy(
        wait=lambda retry_state: 0))


class FakeZk:
    """Just enough of kazoo's client for the writer: versions, ephemeral owners, sequences, atomic multis."""

    def __init__(self, session=1):
        self.nodes = {"/": [b"", 0, 0, 0]}        # path -> [data, version, ephemeral_owner, child_seq]
        self.client_id = (session, b"pw")
        self.fail_next = []                         # "before" / "after": raise ConnectionLoss around a commit
        self.commits = 0

    # reads
    def exists(self, path):
        n = self.nodes.get(path)
        return None if n is None else SimpleNamespace(version=n[1], ephemeralOwner=n[2], czxid=0)

    def get(self, path):
        if path not in self.nodes:
            raise NoNodeError()
        return self.nodes[path][0], self.exists(path)

    def get_children(self, path):
        if path not in self.nodes:
            raise NoNodeError()
        return [p.rsplit("/", 1)[1] for p in self.nodes if p != "/" and posixpath.dirname(p) == path]

    def create(self, path, value=b"", ephemeral=False):
        return self.transaction_apply([("create", path, value, ephemeral, False)])[0]

    def transaction(self):
        zk = self

        class T:
            def __init__(self):
                self.ops = []

            def check(self, path, version):
                self.ops.append(("check", path, version))

            def create(self, path, value=b"", ephemeral=False, sequence=False):
                self.ops.append(("create", path, value, ephemeral, sequence))

            def set_data(self, path, value, version=-1):
                self.ops.append(("set", path, value, version))

            def delete(self, path, version=-1):
                self.ops.append(("delete", path, version))

            def commit(self):
                zk.commits += 1
                mode = zk.fail_next.pop(0) if zk.fail_next else None
                if mode == "before":
                    raise ConnectionLoss()
                results = zk.transaction_apply(self.ops, raise_errors=False)
                if mode == "after":
                    raise ConnectionLoss()
                return results
        return T()

    def transaction_apply(self, ops, raise_errors=True):
        nodes = {k: list(v) for k, v in self.nodes.items()}
        results = []
        for i, op in enumerate(ops):
            try:
                results.append(self._apply(nodes, op))
            except Exception as e:  # noqa: BLE001 (mirror ZooKeeper: first failing op aborts the multi)
                if raise_errors:
                    raise
                return [RolledBackError() for _ in range(i)] + [e] + \
                    [RuntimeInconsistency() for _ in range(len(ops) - i - 1)]
        self.nodes = nodes
        return results

    def _apply(self, nodes, op):
        kind, path = op[0], op[1]
        if kind == "check":
            if path not in nodes:
                raise NoNodeError()
            if op[2] != -1 and nodes[path][1] != op[2]:
                raise BadVersionError()
            return True
        if kind == "create":
            parent = posixpath.dirname(path)
            if parent not in nodes:
                raise NoNodeError()
            if op[4]:
                path = f"{path}{nodes[parent][3]:010d}"
                nodes[parent][3] += 1
            if path in nodes:
                raise NodeExistsError()
            nodes[path] = [op[2], 0, self.client_id[0] if op[3] else 0, 0]
            return path
        if path not in nodes:
            raise NoNodeError()
        if op[-1] != -1 and nodes[path][1] != op[-1]:
            raise BadVersionError()
        if kind == "set":
            nodes[path][0] = op[2]
            nodes[path][1] += 1
            return SimpleNamespace(version=nodes[path][1], ephemeralOwner=nodes[path][2])
        if any(posixpath.dirname(p) == path for p in nodes if p != "/"):
            raise NotEmptyError()
        del nodes[path]
        return True


@pytest.fixture
def zk():
    z = FakeZk()
    z.create("/controller_epoch", b"1")
    z.transaction_apply([("set", "/controller_epoch", b"1", -1)])   # version 1
    return z


def test_controller_moved_error_is_kafka_not_controller():
    e = ControllerMovedError("moved")
    assert isinstance(e, NotControllerError) and e.code == Errors.NOT_CONTROLLER == 41


def test_every_write_is_prefixed_by_the_epoch_check(zk):
    seen = []
    real = zk.transaction

    def spy():
        t = real()
        seen.append(t)
        return t
    zk.transaction = spy
    FencedZkWriter(zk, 1).create("/a", b"x")
    assert seen[0].ops[0] == ("check", "/controller_epoch", 1)


def test_stale_epoch_version_raises_controller_moved_and_changes_nothing(zk):
    before = {k: list(v) for k, v in zk.nodes.items()}
    w = FencedZkWriter(zk, 0)
    with pytest.raises(ControllerMovedError):
        w.create("/a", b"x")
    with pytest.raises(ControllerMovedError):
        w.multi([Create("/b"), SetData("/controller_epoch", b"9")])
    assert zk.nodes == before


def test_missing_controller_epoch_is_controller_moved(zk):
    del zk.nodes["/controller_epoch"]
    with pytest.raises(ControllerMovedError):
        FencedZkWriter(zk, 1).delete("/x")


def test_failed_op_raises_its_kazoo_error_naming_the_op(zk):
    w = FencedZkWriter(zk, 1)
    w.create("/a", b"1")
    with pytest.raises(NodeExistsError) as ei:
        w.multi([Create("/b"), Create("/a", b"2")])
    assert ei.value.op == Create("/a", b"2") and ei.value.op_index == 1 and "/a" in str(ei.value)
    assert zk.exists("/b") is None                                # atomic: /b rolled back
    with pytest.raises(BadVersionError):
        w.set_data("/a", b"3", version=7)
    with pytest.raises(NoNodeError):
        w.delete("/missing")


def test_results_per_op(zk):
    w = FencedZkWriter(zk, 1)
    w.create("/q")
    results = w.multi([Create("/q/n_", b"", sequence=True), Check("/q", 0), SetData("/q", b"d")])
    assert results[0] == "/q/n_0000000000" and results[1] is True and results[2].version == 1
    assert w.set_data("/q", b"e", version=1).version == 2
    assert w.multi([Delete("/q/n_0000000000", version=0)]) == [True]
    assert zk.get_children("/q") == []
    assert w.multi([]) == []


def test_create_parents_in_the_same_transaction(zk):
    w = FencedZkWriter(zk, 1)
    assert w.create("/brokers/topics/t/partitions/0/state", b"{}", create_parents=True) == \
        "/brokers/topics/t/partitions/0/state"
    assert zk.get("/brokers/topics/t")[0] == b""
    with pytest.raises(NodeExistsError):
        w.create("/brokers/topics/t/partitions/0/state", b"{}", create_parents=True)


def test_create_parents_is_fenced_too(zk):
    with pytest.raises(ControllerMovedError):
        FencedZkWriter(zk, 5).create("/x/y/z", create_parents=True)
    assert zk.exists("/x") is None


def test_delete_recursive_children_first_and_tolerates_missing(zk):
    w = FencedZkWriter(zk, 1)
    w.create("/t/partitions/0/state", b"s", create_parents=True)
    w.create("/t/partitions/1", create_parents=True)
    w.delete_recursive("/t")
    assert zk.exists("/t") is None
    w.delete_recursive("/t")                                          # already gone: no error


def test_lost_reply_of_applied_create_counts_as_success(zk):
    zk.fail_next = ["after"]
    assert FencedZkWriter(zk, 1).create("/a", b"mine") == "/a"
    assert zk.commits == 2 and zk.get("/a")[0] == b"mine"


def test_lost_reply_of_applied_set_data_returns_the_current_stat(zk):
    w = FencedZkWriter(zk, 1)
    w.create("/a", b"v0")
    zk.fail_next = ["after"]
    assert w.set_data("/a", b"v1", version=0).version == 1


def test_lost_reply_of_applied_delete_counts_as_success(zk):
    w = FencedZkWriter(zk, 1)
    w.create("/a")
    zk.fail_next = ["after"]
    w.delete("/a", version=0)
    assert zk.exists("/a") is None


def test_retry_after_loss_reports_a_real_conflict(zk):
    zk.create("/a", b"someone else's")
    zk.fail_next = ["before"]
    with pytest.raises(NodeExistsError):
        FencedZkWriter(zk, 1).create("/a", b"mine")


def test_connection_loss_before_apply_is_retried(zk):
    zk.fail_next = ["before", "before"]
    assert FencedZkWriter(zk, 1).create("/a", b"x") == "/a"
    assert zk.commits == 3


def test_retries_are_bounded(zk):
    zk.fail_next = ["before"] * 10
    with pytest.raises(ConnectionLoss):
        FencedZkWriter(zk, 1, max_attempts=3).create("/a")
    assert zk.commits == 3


def test_sequential_create_is_never_retried_after_connection_loss(zk):
    w = FencedZkWriter(zk, 1)
    w.create("/q")
    zk.fail_next = ["after"]
    with pytest.raises(ConnectionLoss):
        w.create("/q/n_", b"x", sequence=True)
    assert zk.commits == 2                                            # no retry of the sequential create
    assert zk.get_children("/q") == ["n_0000000000"]                  # exactly one node


# ------------------------------------------------------------------------------------------------- election

def test_first_election_creates_epoch_and_returns_epoch_1():
    z = FakeZk(session=10)
    assert register_controller_and_increment_epoch(z, 1, 1700000000000) == (1, 1)
    assert ControllerZNode.decode(z.get("/controller")[0]).broker_id == 1
    assert z.exists("/controller").ephemeralOwner == 10
    assert z.get("/controller_epoch")[0] == b"1"


@pytest.mark.parametrize("session,broker_id", [(11, 2), (99, 1)],
                         ids=["another-broker", "same-broker-id-from-another-session"])
def test_election_lost_when_controller_exists(session, broker_id):
    """The controller znode of another session wins, whoever asks: another broker, or the same broker id from
    another session (a restarted broker while its old session lives)."""
    z = FakeZk(session=10)
    register_controller_and_increment_epoch(z, 1, 1)
    z.client_id = (session, b"")
    with pytest.raises(ControllerMovedError):
        register_controller_and_increment_epoch(z, broker_id, 1)
    assert z.get("/controller_epoch")[0] == b"1"


def test_election_with_lost_reply_is_recognised_as_won():
    z = FakeZk(session=10)
    z.fail_next = ["after"]
    assert register_controller_and_increment_epoch(z, 1, 1) == (1, 1)
