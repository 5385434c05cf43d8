"""The network layer survives anything (issue #16): connection limits, the pre-authentication frame cap, a
handler thread that dies, an answer followed by a close, and an I/O loop that fails for good."""
from __future__ import annotations

import threading

import pytest
from kafka.protocol.admin import DescribeClusterRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from kafkatier.server.network import Authenticated, CloseAfterResponse, SocketServer
from kafkatier.waiting import wait_for
from test_network import DEADLINE, StubBroker, _assert_closed, _connect, _frame, _recv_frame


class HardStub(StubBroker):
    """DescribeCluster (60) kills its handler thread once; Metadata with client id "bye" is answered, then closed."""

    def __init__(self):
        super().__init__(extra={60: (0, 1)})
        self.killed = False
        self.dying: threading.Thread | None = None

    def handle(self, header, request, context):
        if header.request_api_key == 60 and not self.killed:
            self.killed = True
            self.dying = threading.current_thread()
            raise SystemExit("a bug that no handler should have")
        if header.request_api_key == 3 and header.client_id == "bye":
            return CloseAfterResponse(super().handle(header, request, context))
        if header.request_api_key == 3 and header.client_id == "login":
            return Authenticated(super().handle(header, request, context), "User:alice")
        return super().handle(header, request, context)


def start(**kw) -> tuple[HardStub, SocketServer]:
    stub = HardStub()
    server = SocketServer("127.0.0.1", 0, stub, num_handler_threads=2, **kw).start()
    stub.port = server.port
    return stub, server


def metadata(correlation_id: int = 1, client_id: str = "unit") -> bytes:
    return _frame(MetadataRequest[12](topics=[], allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False), correlation_id, 12, client_id)


def test_connections_per_ip_and_total_are_limited():
    _, server = start(max_connections_per_ip=2)
    try:
        a, b = _connect(server.port), _connect(server.port)
        for s in (a, b):
            s.sendall(metadata())
            assert _recv_frame(s)
        c = _connect(server.port)
        _assert_closed(c)  # the third from this address
        a.close()
        wait_for(lambda: server.connection_metrics["active"] == 1, DEADLINE, message="the close seen")
        d = _connect(server.port)
        d.sendall(metadata())  # a slot came free
        assert _recv_frame(d)
        assert server.connection_metrics["refused"] == 1
        for s in (b, c, d):
            s.close()
    finally:
        server.shutdown()


def test_unauthenticated_frames_are_capped_until_login():
    _, server = start(request_gate=lambda ctx, header, req: True, unauthenticated_max_request_bytes=64)
    try:
        s = _connect(server.port)
        s.sendall(metadata(client_id="x" * 100))  # over 64 bytes before any principal
        _assert_closed(s)
        s = _connect(server.port)
        s.sendall(metadata(client_id="login"))  # small; the handler sets the principal
        assert _recv_frame(s)
        s.sendall(metadata(2, client_id="x" * 100))  # now the ordinary limit applies
        assert _recv_frame(s)
        s.close()
    finally:
        server.shutdown()


def test_answer_then_close():
    _, server = start()
    try:
        s = _connect(server.port)
        s.sendall(metadata(client_id="bye") + metadata(2))
        assert _recv_frame(s)  # the answer arrives...
        _assert_closed(s)      # ...then the connection is closed; the pipelined request is dropped
    finally:
        server.shutdown()


# The provoked SystemExit ends its handler thread after the replacement starts, as intended: Python's own
# threading.excepthook ignores a thread's SystemExit; pytest's reports every thread's death as a warning.
@pytest.mark.filterwarnings("ignore:Exception in thread kafka-request-handler-"
                            ":pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_handler_thread_is_replaced():
    stub, server = start()
    try:
        s = _connect(server.port)
        s.sendall(_frame(DescribeClusterRequest[1](include_cluster_authorized_operations=False), 1, 1))
        others = [_connect(server.port) for _ in range(4)]  # more connections than threads
        for i, o in enumerate(others):
            o.sendall(_frame(ApiVersionsRequest[3](client_software_name="u", client_software_version="1"), i, 3))
            assert _recv_frame(o)
            o.close()
        # The dying frame and the others travel on different connections: any may be handled first, so wait
        # for the death and the replacement, then check the pool still answers on every thread.
        wait_for(lambda: stub.killed and server._pool.restarted == 1, DEADLINE,  # noqa: SLF001
                 message="the handler thread to die and be replaced")
        # and to be gone: its death is reported while this test runs (and the mark above applies)
        wait_for(lambda: not stub.dying.is_alive(), DEADLINE, message="the dead handler thread to end")
        more = [_connect(server.port) for _ in range(4)]
        for i, o in enumerate(more):
            o.sendall(_frame(ApiVersionsRequest[3](client_software_name="u", client_software_version="1"), i, 3))
        for o in more:
            assert _recv_frame(o)
            o.close()
        assert server._pool.restarted == 1  # noqa: SLF001
        s.close()
    finally:
        server.shutdown()


def test_io_loop_failure_reports_fatal():
    failed = threading.Event()
    _, server = start(on_fatal=lambda e: failed.set())

    def broken_accept():
        raise RuntimeError("selector state corrupted")
    server._accept = broken_accept  # noqa: SLF001 - the next accept fails the loop itself
    try:
        with pytest.raises(OSError):
            s = _connect(server.port)
            s.sendall(metadata())
            _recv_frame(s)
        assert failed.wait(DEADLINE)
    finally:
        server.shutdown()
