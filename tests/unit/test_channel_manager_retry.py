"""The controller's send thread never drops a request: an error while sending is logged and the request
resent (bounded backoff) until the broker answers; a body too large for one znode goes through parts."""
from __future__ import annotations

import threading

from kafkatier.controller.channel_manager import ControllerChannelManager
from kafkatier.zk import codecs, control_parts, paths
from kafkatier.zk.errors import NoNodeError
from kafkatier.zk.limits import MAX_ZNODE_BYTES


class _Answered:
    """An async call's result, answered when asked (kazoo's ``IAsyncResult.get``)."""

    def __init__(self, call):
        self.call = call

    def get(self):
        return self.call()


class FakeZk:
    """A dict of znodes; the 'broker' answers every request znode at once."""

    def __init__(self, fail_creates: int):
        self.nodes: dict[str, bytes] = {}
        self.fail_creates = fail_creates
        self.seq = 0
        self.largest = 0

    # writer interface
    def create(self, path, data=b"", sequence=False, **_):
        if self.fail_creates:
            self.fail_creates -= 1
            raise RuntimeError("injected failure")
        self.largest = max(self.largest, len(data))
        assert len(data) <= MAX_ZNODE_BYTES
        if sequence:
            path = f"{path}{self.seq:010d}"
            self.seq += 1
            req = codecs.ControlRequest.decode(data)
            if req.body_parts is not None:
                body = control_parts.join_body(req.body_parts,
                                               control_parts.read_parts(self.get, 1, req.body_parts))
                assert len(body["blob"]) == len(BIG["blob"])
            name = path.rsplit("/", 1)[1]
            self.nodes[paths.control_responses(1) + "/" + name] = codecs.ControlResponse(
                api_key=req.api_key, api_version=req.api_version, error_code=0, body={"error_code": 0},
                broker_id=1, broker_epoch=5).encode()
        self.nodes[path] = data
        return path

    def delete(self, path, version=-1):
        if self.nodes.pop(path, None) is None:
            raise NoNodeError(path)

    # reader interface
    def exists(self, path, watch=None):
        # a broker's queue paths are there (the broker creates them at start-up)
        queue_path = path.startswith(paths.CONTROL_ROOT) and path.rsplit("/", 1)[1] in ("requests", "responses", "parts")
        return object() if path in self.nodes or queue_path else None

    def get(self, path):
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path], None

    def ensure_path(self, path):
        pass

    def exists_async(self, path):
        return _Answered(lambda: self.exists(path))

    def get_children_async(self, path):
        return _Answered(lambda: self.get_children(path))

    def get_children(self, path):
        raise NoNodeError(path)


BIG = {"blob": "".join(f"{i:08x}" for i in range(300_000))}   # 2.4 MB of JSON


def _send(zk: FakeZk, body: dict) -> codecs.ControlResponse:
    mgr = ControllerChannelManager(zk, controller_id=1, writer=lambda: zk, controller_epoch=lambda: 1,
                                   on_controller_moved=lambda e: None, request_timeout_s=5.0)
    answered = threading.Event()
    got = []
    mgr.add_broker(1, 5)
    mgr.send(1, 6, "UpdateMetadata", 8, body, callback=lambda r: (got.append(r), answered.set()))
    try:
        assert answered.wait(20), "the request was dropped"
    finally:
        mgr.shutdown()
    return got[0]


def test_errors_while_sending_are_retried_not_dropped():
    zk = FakeZk(fail_creates=3)
    assert _send(zk, {"x": 1}).error_code == 0
    assert zk.fail_creates == 0


def test_a_body_over_the_znode_limit_goes_through_parts_and_everything_is_cleaned_up():
    zk = FakeZk(fail_creates=0)
    assert _send(zk, BIG).error_code == 0
    assert 0 < zk.largest <= MAX_ZNODE_BYTES
    assert not [p for p in zk.nodes if p.startswith(paths.control_broker(1))]


class SlowBrokerZk(FakeZk):
    """The broker (registered, czxid 5) answers only after the controller's request timeout passed three times."""

    def __init__(self):
        super().__init__(fail_creates=0)
        self.checks = 0
        self.requests_written = 0
        self.nodes[paths.broker(1)] = b"{}"

    def create(self, path, data=b"", sequence=False, **_):
        if not sequence:
            return super().create(path, data)
        self.requests_written += 1
        path = f"{path}{self.seq:010d}"
        self.seq += 1
        self.nodes[path] = data
        return path

    def exists(self, path, watch=None):
        if path == paths.broker(1):
            return _Stat(czxid=5)
        if path.startswith(paths.control_requests(1) + "/") and path in self.nodes:
            self.checks += 1
            if self.checks == 3:
                req = codecs.ControlRequest.decode(self.nodes[path])
                name = path.rsplit("/", 1)[1]
                self.nodes[paths.control_responses(1) + "/" + name] = codecs.ControlResponse(
                    api_key=req.api_key, api_version=req.api_version, error_code=0, body={"error_code": 0},
                    broker_id=1, broker_epoch=5).encode()
        return super().exists(path)


class _Stat:
    def __init__(self, czxid):
        self.czxid = czxid


def test_a_slow_answer_from_a_live_broker_is_waited_for_not_resent():
    zk = SlowBrokerZk()
    mgr = ControllerChannelManager(zk, controller_id=1, writer=lambda: zk, controller_epoch=lambda: 1,
                                   on_controller_moved=lambda e: None, request_timeout_s=0.05)
    answered = threading.Event()
    mgr.add_broker(1, 5)
    mgr.send(1, 4, "LeaderAndIsr", 7, {"x": 1}, callback=lambda r: answered.set())
    try:
        assert answered.wait(20), "the request was never answered"
    finally:
        mgr.shutdown()
    assert zk.requests_written == 1
    assert not [p for p in zk.nodes if p.startswith(paths.control_broker(1))]
