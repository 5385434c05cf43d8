"""``queued.max.request.bytes`` on the SocketServer (server/network.py, Kafka's memory pool): a frame's claimed size
is taken from the pool when its size prefix is read and given back once the request was handled; while the pool is
exhausted the connections stop reading, and read on when memory comes back."""
from __future__ import annotations

import socket
import threading

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

from kafkatier.server.network import MemoryPool, SocketServer
from kafkatier.waiting import wait_for
from tests.unit.test_network import DEADLINE, StubBroker, _frame, _recv_frame

POOL = 1 << 20


class BlockingBroker(StubBroker):
    """Holds the requests whose correlation ids are in ``block`` until ``gate`` is set."""

    def __init__(self):
        super().__init__()
        self.block: set[int] = set()
        self.gate = threading.Event()

    def handle(self, header, request, context):
        response = super().handle(header, request, context)
        if header.correlation_id in self.block:
            assert self.gate.wait(DEADLINE)
        return response


def _big_metadata(cid: int) -> bytes:
    topics = [MetadataRequest.MetadataRequestTopic(name=f"t{i:06d}" + "x" * 90) for i in range(6000)]   # ~600 KB
    return _frame(MetadataRequest[1](topics=topics), cid, 1)


def _wait_seen(stub, n):
    with stub.handled:
        assert stub.handled.wait_for(lambda: len(stub.seen) >= n, DEADLINE)


def test_reads_wait_while_the_pool_is_exhausted_and_resume_when_memory_returns():
    stub = BlockingBroker()
    stub.block = {1, 2}
    pool = MemoryPool(POOL)
    with SocketServer("127.0.0.1", 0, stub, num_handler_threads=4, max_request_bytes=POOL,
                      memory_pool=pool) as server:
        a = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
        b = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
        c = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
        try:
            a.sendall(_big_metadata(1))
            _wait_seen(stub, 1)
            b.sendall(_big_metadata(2))   # the pool still had memory: read, and it overdraws the pool
            _wait_seen(stub, 2)
            assert pool.available <= 0
            c.sendall(_frame(ApiVersionsRequest[0](), 3, 0))
            c.settimeout(1.0)
            with pytest.raises(socket.timeout):   # muted: its size was read, its body waits for memory
                c.recv(1)
            assert [cid for _, cid in stub.seen] == [1, 2]
            stub.gate.set()                        # the two big requests are handled: their bytes come back
            c.settimeout(DEADLINE)
            ApiVersionsResponse[0].decode(_recv_frame(c), header=True)
            _recv_frame(a), _recv_frame(b)
        finally:
            for s in (a, b, c):
                s.close()
    wait_for(lambda: pool.available == POOL, DEADLINE, message="every claim to be given back")


def test_a_connection_closed_mid_frame_gives_its_memory_back():
    stub = StubBroker()
    pool = MemoryPool(POOL)
    with SocketServer("127.0.0.1", 0, stub, num_handler_threads=1, max_request_bytes=POOL,
                      memory_pool=pool) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE) as s:
            s.sendall((900_000).to_bytes(4, "big") + b"x")   # claims 900 KB, sends one byte
            with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE) as probe:
                probe.sendall(_frame(ApiVersionsRequest[0](), 1, 0))
                _recv_frame(probe)   # a round trip after the claim: the claim was read
            # the probe's own bytes come back just after its answer was queued
            wait_for(lambda: pool.available == POOL - 900_000, DEADLINE, message="the claim to be taken")
        with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE) as probe:
            probe.sendall(_frame(ApiVersionsRequest[0](), 2, 0))
            _recv_frame(probe)
        wait_for(lambda: pool.available == POOL, DEADLINE, message="the claim to be given back")


def test_the_pool_must_hold_the_largest_request():
    with pytest.raises(ValueError, match="queued.max.request.bytes .* must be larger or equal to "
                                         "socket.request.max.bytes"):
        SocketServer("127.0.0.1", 0, StubBroker(), max_request_bytes=POOL, memory_pool=MemoryPool(POOL - 1))


def test_a_broker_with_a_pool_smaller_than_a_request_stops_with_one_line(kafkatier_cli, tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("queued.max.request.bytes=1000\n")
    r = kafkatier_cli.run("broker", "start", "--id", "5", "--zookeeper", "127.0.0.1:1", "--log-dirs",
                          str(tmp_path / "logs"), "--config", str(props))
    assert r.returncode == 1
    assert "kafkatier: error: queued.max.request.bytes (1000) must be larger or equal to socket.request.max.bytes" \
        in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "logs").exists()   # nothing started
