"""The ZooKeeper retry helpers retry only connection loss, and always give up eventually."""
from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError, OperationTimeoutError, SessionExpiredError
from kazoo.retry import RetryFailedError

from kafkatier.zk.client import RetryPolicy, make_client, zk_retry, zk_retrying

FAST = dict(initial_delay=0.001, max_delay=0.005)


class Flaky:
    """Raises the given errors in turn, then returns ``"ok"``."""

    def __init__(self, *errors: BaseException):
        self.errors = list(errors)
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.last_args = (args, kwargs)
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def test_retries_connection_loss_then_succeeds():
    fn = Flaky(ConnectionLoss(), OperationTimeoutError())
    assert zk_retry(fn, "/a", b"x", attempts=5, makepath=True, **FAST) == "ok"
    assert fn.calls == 3
    assert fn.last_args == (("/a", b"x"), {"makepath": True})


def test_gives_up_after_the_bound_with_the_original_error():
    fn = Flaky(*[ConnectionLoss() for _ in range(10)])
    with pytest.raises(ConnectionLoss):
        zk_retry(fn, attempts=3, **FAST)
    assert fn.calls == 3


def test_deadline_bounds_the_retries():
    fn = Flaky(*[ConnectionLoss() for _ in range(1000)])
    with pytest.raises(ConnectionLoss):
        zk_retry(fn, attempts=1000, deadline=0.05, initial_delay=0.01, max_delay=0.01)
    assert fn.calls < 20


@pytest.mark.parametrize("error", [NoNodeError(), SessionExpiredError(), ValueError("bad")])
def test_other_errors_are_not_retried(error):
    fn = Flaky(error)
    with pytest.raises(type(error)):
        zk_retry(fn, attempts=5, **FAST)
    assert fn.calls == 1


def test_decorator_form():
    fn = Flaky(ConnectionLoss())
    wrapped = zk_retrying(attempts=2, **FAST)(fn)
    assert wrapped() == "ok"
    assert fn.calls == 2


def test_bad_attempts_rejected():
    with pytest.raises(ValueError):
        zk_retry(Flaky(), attempts=0)


def test_client_command_retry_is_bounded():
    client = make_client("127.0.0.1:1", timeout=4.0,
                         command_retry=RetryPolicy(max_tries=3, delay=0.001, max_delay=0.001))
    fn = Flaky(*[ConnectionLoss() for _ in range(10)])
    with pytest.raises(RetryFailedError):
        client.retry(fn)
    assert fn.calls == 3


def test_client_defaults_are_bounded_and_do_not_retry_expiry():
    client = make_client("127.0.0.1:1", timeout=4.0)
    assert client._session_timeout == 4000
    command = client._retry
    assert command.max_tries > 0 and command.deadline == 4.0
    assert SessionExpiredError not in command.retry_exceptions
    assert client._conn_retry.deadline is not None


def test_unlimited_policy_needs_a_deadline():
    with pytest.raises(ValueError):
        RetryPolicy(max_tries=-1)


@pytest.mark.parametrize("hosts", ["", None])
def test_make_client_rejects_empty_hosts(hosts):
    with pytest.raises(ValueError):
        make_client(hosts)


class _Pipelined:
    """Async calls answered from a dict of znodes; the first async call of ``lost`` fails with ConnectionLoss (the
    sync call then answers)."""

    def __init__(self, nodes: dict[str, list[str]], lost: set[str] = frozenset()):
        self.nodes, self.lost, self.created, self.async_calls = dict(nodes), set(lost), [], 0

    def _answer(self, path, sync_call):
        self.async_calls += 1
        test = self

        class Result:
            def get(self):
                if path in test.lost:
                    test.lost.discard(path)
                    raise ConnectionLoss()
                return sync_call(path)
        return Result()

    def get_children(self, path):
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path]

    def exists(self, path):
        return object() if path in self.nodes else None

    def get_children_async(self, path):
        return self._answer(path, self.get_children)

    def exists_async(self, path):
        return self._answer(path, self.exists)

    def create(self, path, value=b"", makepath=False):
        self.created.append(path)
        self.nodes[path] = []


def test_children_of_many_paths_are_read_in_one_pipelined_round_with_missing_ones_none():
    from kafkatier.zk.client import get_children_many
    zk = _Pipelined({"/a": ["x"], "/b": []}, lost={"/b"})
    assert get_children_many(zk, ["/a", "/missing", "/b"]) == [["x"], None, []]
    assert zk.async_calls == 3


def test_persistent_paths_are_checked_in_one_round_and_only_missing_ones_created():
    from kafkatier.zk.client import ensure_persistent_paths
    zk = _Pipelined({"/a": []}, lost={"/a"})
    ensure_persistent_paths(zk, ["/a", "/b/c"])
    assert zk.created == ["/b/c"] and zk.async_calls == 2


def test_an_answer_out_of_order_drops_the_connection_so_it_reconnects():
    """kazoo ends its connection thread on an answer whose xid is not the oldest pending request's (the client
    never connects again); ours drops the connection instead, as ZooKeeper's Java client does, and the request
    gets the error."""
    from kazoo.exceptions import ConnectionDropped
    from kazoo.protocol.serialization import Exists, ReplyHeader
    client = make_client("127.0.0.1:1")
    request, answer = Exists("/a", None), client.handler.async_result()
    client._pending.append((request, answer, 119))   # noqa: SLF001 - kazoo's queue of requests sent
    with pytest.raises(ConnectionDropped, match="xid 119 expected, 120 received"):
        client._connection._read_response(ReplyHeader(120, 0, 0), b"", 0)   # noqa: SLF001 - the class under test
    with pytest.raises(RuntimeError):
        answer.get(timeout=1)
