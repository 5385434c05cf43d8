"""The broker's network layer against real sockets on 127.0.0.1 and real Kafka clients."""
from __future__ import annotations

import concurrent.futures
import os
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest
from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from kafkatier.common.file_records import FileRecords
from kafkatier.protocol import codec
from kafkatier.protocol.control_requests import ControlledShutdownRequest, StopReplicaRequest
from kafkatier.server.api_versions import SUPPORTED, ApiVersionsTable
from kafkatier.server.network import MemoryPool, MuteAfterResponse, SocketServer
from kafkatier.waiting import wait_for

DEADLINE = 10.0  # seconds; every wait below is bounded by it


class StubBroker:
    """A broker that knows nothing: ApiVersions, Metadata (just itself, no topics), plus hooks for tests."""

    def __init__(self, extra: dict[int, tuple[int, int]] | None = None):
        self.port = 0
        self.ranges = {18: (0, 3), 3: (0, 12), **(extra or {})}
        self.seen: list[tuple[int, int]] = []  # (api_key, correlation_id) in handle() order
        self.pending: dict[int, concurrent.futures.Future] = {}
        self.deferred: set[int] = set()  # correlation ids answered later through a Future
        self.handled = threading.Condition()
        self.contexts = []

    def supported_versions(self):
        return self.ranges

    def handle(self, header, request, context):
        with self.handled:
            self.seen.append((header.request_api_key, header.correlation_id))
            self.contexts.append(context)
            self.handled.notify_all()
        key, version = header.request_api_key, header.request_api_version
        if header.correlation_id in self.deferred:
            fut = concurrent.futures.Future()
            self.pending[header.correlation_id] = fut
            return fut
        if key == 18:
            return ApiVersionsTable(self.ranges).response(version)
        if key == 3:
            broker = MetadataResponse.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port,
                                                             rack=None)
            return MetadataResponse(version=version, throttle_time_ms=0, brokers=[broker],
                                    cluster_id="kafkatier-unit", controller_id=0, topics=[])
        if key == 0:
            if request.acks == 0:
                return None
            return ProduceResponse(version=version, responses=[], throttle_time_ms=0)
        if key == 60:
            raise RuntimeError("boom")
        raise AssertionError(f"unexpected api {key}")

    def wait_seen(self, correlation_id: int) -> None:
        with self.handled:
            assert self.handled.wait_for(lambda: any(c == correlation_id for _, c in self.seen), DEADLINE)


@pytest.fixture
def broker():
    stub = StubBroker(extra={0: (0, 9), 60: (0, 1)})
    server = SocketServer("127.0.0.1", 0, stub, num_handler_threads=2).start()
    stub.port = server.port
    yield stub, server
    server.shutdown()


# ---- raw client helpers ---------------------------------------------------------------------------------------

def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    s.settimeout(DEADLINE)
    return s


def _frame(request, correlation_id: int, version: int, client_id: str = "unit") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _recv_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(s, 4))
    return _recv_exact(s, size)


def _assert_closed(s: socket.socket) -> None:
    """The server closed this connection (EOF or reset), within the deadline."""
    try:
        assert s.recv(1) == b""
    except ConnectionResetError:
        pass


# ---- real clients ---------------------------------------------------------------------------------------------

def test_kafka_python_admin_client_bootstraps_and_lists_no_topics(broker):
    from kafka import KafkaAdminClient

    stub, server = broker
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{server.port}", request_timeout_ms=5000,
                             client_id="kp-admin")
    try:
        assert admin.list_topics() == []
    finally:
        admin.close()
    assert any(c.client_id == "kp-admin" for c in stub.contexts)
    assert server.metrics["Metadata"]["requests"] >= 1


def test_kafka_python_consumer_bootstraps(broker):
    from kafka import KafkaConsumer

    _, server = broker
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.port}",
                             request_timeout_ms=5000)
    try:
        assert consumer.topics() == set()
    finally:
        consumer.close()


def test_confluent_kafka_admin_lists_the_broker_and_no_topics(broker):
    from confluent_kafka.admin import AdminClient

    _, server = broker
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.port}"})
    md = admin.list_topics(timeout=DEADLINE)
    assert md.topics == {}
    assert list(md.brokers) == [0]
    assert (md.brokers[0].host, md.brokers[0].port) == ("127.0.0.1", server.port)
    assert md.cluster_id == "kafkatier-unit"
    assert md.controller_id == 0


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not on PATH")
def test_kcat_lists_metadata(broker):
    _, server = broker
    out = subprocess.run(["kcat", "-L", "-b", f"127.0.0.1:{server.port}", "-m", "5"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "1 brokers:" in out.stdout
    assert f"broker 0 at 127.0.0.1:{server.port}" in out.stdout
    assert "0 topics:" in out.stdout


# ---- ApiVersions ----------------------------------------------------------------------------------------------

def test_api_versions_lists_exactly_the_handler_ranges(broker):
    stub, server = broker
    with _connect(server.port) as s:
        s.sendall(_frame(ApiVersionsRequest[3](client_software_name="unit", client_software_version="1"), 5, 3))
        body = _recv_frame(s)
    # Response header is v0 even for flexible ApiVersions v3: correlation id, then the body.
    assert struct.unpack(">i", body[:4])[0] == 5
    resp = ApiVersionsResponse.decode(body[4:], version=3)
    assert resp.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == stub.ranges


@pytest.mark.parametrize("version", [4, 77])
def test_unsupported_api_versions_version_gets_error_35_as_v0_with_the_api_list(broker, version):
    # v4 is decodable but not advertised; v77 is beyond anything we can parse.  Both: UNSUPPORTED_VERSION,
    # encoded as ApiVersionsResponse v0 with header v0, still listing our APIs so the client can downgrade.
    stub, server = broker
    header = struct.pack(">hhih", 18, version, 42, 4) + b"unit" + b"\x00"  # header v2: empty tagged fields
    body = b"\x05kcat\x041.0\x00"  # a v3+-style body; never read
    with _connect(server.port) as s:
        s.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        frame = _recv_frame(s)
    assert struct.unpack(">i", frame[:4])[0] == 42
    resp = ApiVersionsResponse.decode(frame[4:], version=0)
    assert resp.error_code == 35
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == stub.ranges
    # Nothing past the v0 body: error_code, array length, (api_key, min, max) per API.
    assert len(frame) == 4 + 2 + 4 + 6 * len(stub.ranges)
    assert server.metrics["ApiVersions"]["errors"] == 1


def test_server_answers_api_versions_itself_when_the_handler_does_not():
    class MetadataOnly(StubBroker):
        def supported_versions(self):
            return {3: (0, 12)}

    stub = MetadataOnly()
    with SocketServer("127.0.0.1", 0, stub, num_handler_threads=1) as server, _connect(server.port) as s:
        s.sendall(_frame(ApiVersionsRequest[2](), 1, 2))
        resp = ApiVersionsResponse.decode(_recv_frame(s)[4:], version=2)
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == {3: (0, 12), 18: (0, 4)}
    assert stub.seen == []


def test_api_versions_table_rejects_what_we_cannot_decode():
    with pytest.raises(ValueError, match="exceeds"):
        ApiVersionsTable({5: (0, 6)})
    with pytest.raises(ValueError, match="no message classes"):
        ApiVersionsTable({999: (0, 0)})
    with pytest.raises(ValueError, match="invalid version range"):
        ApiVersionsTable({3: (4, 2)})
    assert ApiVersionsTable(SUPPORTED).range(5) == (0, 5)


# ---- ordering, asynchronous completion, acks=0 ---------------------------------------------------------------

def test_responses_keep_request_order_when_completed_out_of_order(broker):
    stub, server = broker
    stub.deferred.add(1)
    with _connect(server.port) as s:
        s.sendall(_frame(MetadataRequest[12](topics=[], allow_auto_topic_creation=False), 1, 12)
                  + _frame(MetadataRequest[12](topics=[], allow_auto_topic_creation=False), 2, 12)
                  + _frame(ApiVersionsRequest[3](), 3, 3))
        stub.wait_seen(3)  # 2 and 3 are answered; 1 is still pending
        resp_1 = MetadataResponse(version=12, throttle_time_ms=0, brokers=[], cluster_id="late",
                                  controller_id=0, topics=[])
        done = threading.Thread(target=stub.pending[1].set_result, args=(resp_1,))
        done.start()
        done.join(DEADLINE)
        frames = [_recv_frame(s) for _ in range(3)]
    assert [struct.unpack(">i", f[:4])[0] for f in frames] == [1, 2, 3]
    # Metadata v12 is flexible: response header v1 carries an (empty) tagged-field byte.
    assert MetadataResponse.decode(frames[0][5:], version=12).cluster_id == "late"
    assert MetadataResponse.decode(frames[1][5:], version=12).cluster_id == "kafkatier-unit"
    assert stub.seen == [(3, 1), (3, 2), (18, 3)]


def test_an_answer_larger_than_the_socket_buffer_sent_by_its_completing_thread_keeps_order(broker):
    """A completing thread sends its answer itself when it is next in line; what the socket does not take at
    once is left to the I/O thread, and the answers after it follow it, in order."""
    stub, server = broker
    stub.deferred.add(1)
    with _connect(server.port) as s:
        s.sendall(_frame(MetadataRequest[12](topics=[], allow_auto_topic_creation=False), 1, 12))
        stub.wait_seen(1)
        big = MetadataResponse(version=12, throttle_time_ms=0, brokers=[], cluster_id="x" * (16 << 20),
                               controller_id=0, topics=[])
        done = threading.Thread(target=stub.pending[1].set_result, args=(big,))
        done.start()
        done.join(DEADLINE)   # returns with most of the 16 MiB still to send: the client has read nothing yet
        assert not done.is_alive()
        s.sendall(_frame(ApiVersionsRequest[3](), 2, 3))
        frames = [_recv_frame(s) for _ in range(2)]
    assert [struct.unpack(">i", f[:4])[0] for f in frames] == [1, 2]
    assert MetadataResponse.decode(frames[0][5:], version=12).cluster_id == "x" * (16 << 20)


def _answer_produce_with_pieces(stub, server, pieces, deferred: bool) -> tuple[bytes, bytes]:
    """Produce (correlation id 7) answered with a ready-encoded response of ``pieces`` (at once, or completed
    later from another thread), then ApiVersions (8): the two frames the client receives."""
    original = stub.handle

    def handle(header, request, context):
        if header.request_api_key != 0:
            return original(header, request, context)
        answer = codec.EncodedResponse(0, header.request_api_version, list(pieces))
        if not deferred:
            return answer
        fut = concurrent.futures.Future()
        threading.Thread(target=fut.set_result, args=(answer,)).start()
        return fut

    stub.handle = handle
    with _connect(server.port) as s:
        s.sendall(_frame(_produce(b"x" * 100), 7, 9) + _frame(ApiVersionsRequest[3](), 8, 3))
        return _recv_frame(s), _recv_frame(s)


@pytest.mark.parametrize("deferred", [False, True], ids=["at-once", "completed-later"])
def test_an_encoded_answer_in_large_pieces_goes_out_whole_and_in_order(broker, deferred):
    """A ready-encoded answer with large pieces (record data) is sent as its pieces (``sendmsg``), partial sends
    included, and the answer after it follows it."""
    stub, server = broker
    pieces = [b"\x00\x00\x00\x00", b"B" * (200 * 1024), b"c" * 5, b"D" * (5 << 20), b"E" * (100 * 1024), b"f"]
    first, second = _answer_produce_with_pieces(stub, server, pieces, deferred)
    assert first == struct.pack(">i", 7) + b"\x00" + b"".join(pieces)   # Produce v9: response header v1
    assert struct.unpack(">i", second[:4])[0] == 8
    assert server.metrics["Produce"]["bytes_out"] == len(first) + 4


def test_produce_with_acks_0_gets_no_response(broker):
    stub, server = broker
    produce = ProduceRequest[9](transactional_id=None, acks=0, timeout_ms=1000, topic_data=[])
    with _connect(server.port) as s:
        s.sendall(_frame(produce, 10, 9) + _frame(ApiVersionsRequest[3](), 11, 3))
        frame = _recv_frame(s)
    assert struct.unpack(">i", frame[:4])[0] == 11
    assert stub.seen == [(0, 10), (18, 11)]


def test_failed_future_and_handler_exception_are_answered_with_unknown_server_error(broker):
    stub, server = broker
    stub.deferred.add(21)
    with _connect(server.port) as s:
        s.sendall(_frame(DescribeClusterRequest[1](include_cluster_authorized_operations=False), 20, 1))
        resp = DescribeClusterResponse.decode(_recv_frame(s)[5:], version=1)
        assert resp.error_code == -1
        s.sendall(_frame(DescribeClusterRequest[1](include_cluster_authorized_operations=False), 21, 1))
        stub.wait_seen(21)
        stub.pending[21].set_exception(RuntimeError("replica fetch failed"))
        resp = DescribeClusterResponse.decode(_recv_frame(s)[5:], version=1)
        assert resp.error_code == -1
    assert server.metrics["DescribeCluster"]["errors"] == 2


# ---- bad input closes one connection only ---------------------------------------------------------------------

def _still_serves(port: int) -> None:
    with _connect(port) as s:
        s.sendall(_frame(ApiVersionsRequest[3](), 99, 3))
        assert struct.unpack(">i", _recv_frame(s)[:4])[0] == 99


@pytest.mark.parametrize("payload", [
    pytest.param(struct.pack(">i", 12) + struct.pack(">hhih", 3, 12, 1, 40) + b"ab", id="truncated-header"),
    pytest.param(struct.pack(">ihhih", 14, 3, 12, 1, 2) + b"ab" + b"\x00\x05", id="undecodable-body"),
    pytest.param(struct.pack(">i", 3) + b"abc", id="frame-too-small"),
    pytest.param(struct.pack(">i", -5), id="negative-size"),
    pytest.param(struct.pack(">i", 104857601), id="above-socket.request.max.bytes"),
    pytest.param(struct.pack(">ihhih", 10, 999, 0, 1, 0), id="unknown-api-key"),
    pytest.param(struct.pack(">ihhih", 10, 3, 99, 1, 0), id="metadata-version-beyond-classes"),
])
def test_malformed_frame_closes_only_that_connection(broker, payload):
    _, server = broker
    with _connect(server.port) as good, _connect(server.port) as bad:
        good.sendall(_frame(ApiVersionsRequest[3](), 1, 3))
        _recv_frame(good)
        bad.sendall(payload)
        _assert_closed(bad)
        good.sendall(_frame(ApiVersionsRequest[3](), 2, 3))
        assert struct.unpack(">i", _recv_frame(good)[:4])[0] == 2
    _still_serves(server.port)
    assert server.connection_metrics["malformed"] >= 1


def _produce(records: bytes, acks: int = 1):
    T = ProduceRequest.TopicProduceData
    return ProduceRequest[9](transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[
        T(name="t", partition_data=[T.PartitionProduceData(index=0, records=records)])])


def test_truncated_record_payload_closes_the_connection(broker):
    stub, server = broker
    frame = _frame(_produce(b"x" * 1000), 1, 9)
    cut = frame[4:-900]
    with _connect(server.port) as s:
        s.sendall(struct.pack(">i", len(cut)) + cut)
        _assert_closed(s)
    assert stub.seen == []
    _still_serves(server.port)


def test_large_request_arrives_whole(broker):
    stub, server = broker
    payload = bytes(range(256)) * (4 * 4096)  # 4 MiB of records
    got = []
    original = stub.handle

    def handle(header, request, context):
        if header.request_api_key == 0:
            got.append(request.topic_data[0].partition_data[0].records)
        return original(header, request, context)

    stub.handle = handle
    with _connect(server.port) as s:
        s.sendall(_frame(_produce(payload), 5, 9))
        assert struct.unpack(">i", _recv_frame(s)[:4])[0] == 5
    assert got == [payload]
    assert server.metrics["Produce"]["bytes_in"] > len(payload)


@pytest.fixture
def inline_broker():
    stub = StubBroker(extra={0: (0, 9), 60: (0, 1)})
    server = SocketServer("127.0.0.1", 0, stub, num_handler_threads=2, inline_max_bytes=256 * 1024).start()
    stub.port = server.port
    yield stub, server
    server.shutdown()


def test_small_produce_is_handled_on_the_network_thread_unless_a_request_is_queued_before_it(inline_broker):
    """Inline dispatch: a small Produce with nothing before it runs on the I/O thread; one behind a pending
    request, or above ``inline_max_bytes``, goes through the handler pool; the answers keep request order."""
    stub, server = inline_broker
    threads: dict[int, str] = {}
    original = stub.handle

    def handle(header, request, context):
        threads[header.correlation_id] = threading.current_thread().name
        return original(header, request, context)

    stub.handle = handle
    stub.deferred.add(1)
    small = _produce(b"x" * 100)
    with _connect(server.port) as s:
        s.sendall(_frame(small, 5, 9))
        assert struct.unpack(">i", _recv_frame(s)[:4])[0] == 5
        s.sendall(_frame(_produce(b"y" * (300 * 1024)), 6, 9))
        assert struct.unpack(">i", _recv_frame(s)[:4])[0] == 6
        # one send: a deferred Metadata, then two small Produces and an ApiVersions queued behind it
        s.sendall(_frame(MetadataRequest[12](topics=[], allow_auto_topic_creation=False), 1, 12)
                  + _frame(small, 2, 9) + _frame(small, 3, 9) + _frame(ApiVersionsRequest[3](), 4, 3))
        stub.wait_seen(1)
        stub.pending[1].set_result(MetadataResponse(version=12, throttle_time_ms=0, brokers=[], cluster_id="c",
                                                    controller_id=0, topics=[]))
        assert [struct.unpack(">i", _recv_frame(s)[:4])[0] for _ in range(4)] == [1, 2, 3, 4]
    assert threads[5].startswith("kafka-network-thread-")
    assert all(threads[c].startswith("kafka-request-handler-") for c in (6, 1, 4))
    assert stub.seen[-4:] == [(3, 1), (0, 2), (0, 3), (18, 4)]


def test_by_default_every_request_goes_to_the_pool():
    stub = StubBroker(extra={0: (0, 9)})
    threads = []
    original = stub.handle

    def handle(header, request, context):
        threads.append(threading.current_thread().name)
        return original(header, request, context)

    stub.handle = handle
    with SocketServer("127.0.0.1", 0, stub) as server, _connect(server.port) as s:
        s.sendall(_frame(_produce(b"x" * 100), 1, 9))
        assert struct.unpack(">i", _recv_frame(s)[:4])[0] == 1
    assert threads and threads[0].startswith("kafka-request-handler-")


@pytest.mark.parametrize("inline", [False, True], ids=["pool", "inline"])
def test_frames_split_and_joined_across_reads_are_answered_in_order(broker, inline_broker, inline):
    """Several frames in one read, and frames (size prefix included) cut into 3-byte pieces."""
    stub, server = inline_broker if inline else broker
    frames = b"".join(_frame(_produce(bytes([c]) * (c * 700)), c, 9) if c % 2 else _frame(ApiVersionsRequest[3](), c, 3)
                      for c in range(1, 41))
    with _connect(server.port) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(frames[:len(frames) // 2])
        for i in range(len(frames) // 2, len(frames), 3):
            s.sendall(frames[i:i + 3])
        assert [struct.unpack(">i", _recv_frame(s)[:4])[0] for _ in range(40)] == list(range(1, 41))
    assert [c for _, c in stub.seen] == list(range(1, 41))


def test_reading_stops_while_max_in_flight_requests_are_unanswered():
    stub = StubBroker()
    stub.deferred.update({1, 2})
    done_when_3_handled = []
    original = stub.handle

    def handle(header, request, context):
        if header.correlation_id == 3:
            done_when_3_handled.append(stub.pending[1].done())
        return original(header, request, context)

    stub.handle = handle
    with SocketServer("127.0.0.1", 0, stub, max_in_flight_per_connection=2) as server, \
            _connect(server.port) as s:
        s.sendall(b"".join(_frame(ApiVersionsRequest[3](), c, 3) for c in (1, 2, 3)))
        stub.wait_seen(2)
        stub.pending[1].set_result(ApiVersionsTable(stub.ranges).response(3))
        stub.wait_seen(3)
        stub.pending[2].set_result(ApiVersionsTable(stub.ranges).response(3))
        assert [struct.unpack(">i", _recv_frame(s)[:4])[0] for _ in range(3)] == [1, 2, 3]
    assert done_when_3_handled == [True]


def test_reading_pauses_while_unhandled_requests_hold_max_read_ahead_bytes():
    """A deep in-flight window of large requests holds at most about ``max_read_ahead_bytes`` of unhandled
    requests per connection, and every request is still answered, in order, once the handler catches up."""
    stub = StubBroker(extra={0: (0, 9)})
    release = threading.Event()
    original = stub.handle

    def handle(header, request, context):
        response = original(header, request, context)
        if header.correlation_id == 1:
            release.wait(DEADLINE)   # the handler is busy: the requests after it queue up
        return response

    stub.handle = handle
    pool = MemoryPool(64 * 1024 * 1024)
    frames = [_frame(_produce(b"x" * 4000), c, 9) for c in range(1, 31)]
    bound = 10_000

    def held() -> int:
        return pool.capacity - pool.available

    with SocketServer("127.0.0.1", 0, stub, max_in_flight_per_connection=64, max_read_ahead_bytes=bound,
                      memory_pool=pool, max_request_bytes=1024 * 1024) as server, _connect(server.port) as s:
        s.sendall(b"".join(frames))
        stub.wait_seen(1)
        wait_for(lambda: held() >= bound, DEADLINE, message="requests read up to the bound")
        window = time.monotonic() + 0.3   # an observation window (nothing to wait for: reading must stay paused)
        peak = 0
        while time.monotonic() < window:
            peak = max(peak, held())
        assert peak < bound + 2 * len(frames[0]), peak   # the bound, the request being handled and one more
        release.set()
        assert [struct.unpack(">i", _recv_frame(s)[:4])[0] for _ in range(30)] == list(range(1, 31))


def test_frame_size_limit_is_configurable():
    stub = StubBroker()
    with SocketServer("127.0.0.1", 0, stub, max_request_bytes=64) as server:
        with _connect(server.port) as s:
            s.sendall(_frame(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name="x" * 100)],
                                                 allow_auto_topic_creation=False),
                             1, 12))
            _assert_closed(s)
        _still_serves(server.port)


def test_unsupported_version_of_an_api_with_a_top_level_error_code_is_answered(broker):
    _, server = broker
    # DescribeCluster v2 is decodable but we advertise 0-1: UNSUPPORTED_VERSION in the v2 response.
    with _connect(server.port) as s:
        s.sendall(_frame(DescribeClusterRequest[2](include_cluster_authorized_operations=False), 7, 2))
        resp = DescribeClusterResponse.decode(_recv_frame(s)[5:], version=2)
    assert resp.error_code == 35


def test_unsupported_version_without_an_error_field_closes_the_connection(broker):
    _, server = broker
    # Produce v10 is decodable but not advertised (0-9), and ProduceResponse has no top-level error code.
    with _connect(server.port) as s:
        s.sendall(_frame(ProduceRequest[10](transactional_id=None, acks=1, timeout_ms=1, topic_data=[]), 1, 10))
        _assert_closed(s)
    _still_serves(server.port)


# ---- codec details ---------------------------------------------------------------------------------------------

def test_controlled_shutdown_v0_uses_request_header_v0():
    body = bytes(ControlledShutdownRequest(version=0, broker_id=3).encode(version=0))
    header, request = codec.decode_request(struct.pack(">hhi", 7, 0, 77) + body)
    assert (header.correlation_id, header.client_id, request.broker_id) == (77, None, 3)


def test_control_requests_decode_through_the_registry():
    P = StopReplicaRequest.StopReplicaTopicState.StopReplicaPartitionState
    msg = StopReplicaRequest(version=5, controller_id=1, controller_epoch=2, broker_epoch=3, topic_states=[
        StopReplicaRequest.StopReplicaTopicState(topic_name="t", partition_states=[
            P(partition_index=0, leader_epoch=-2, delete_partition=False, disable_remote_partition=True)])])
    msg.with_header(correlation_id=4, client_id="controller-1")
    header, request = codec.decode_request(bytes(msg.encode(version=5, header=True)))
    assert header.client_id == "controller-1"
    assert request == msg
    assert {4, 5, 6, 7, 0, 1, 3, 18, 19, 20, 21, 23, 32, 33, 34, 35, 44, 60, 10} <= set(codec.REGISTRY)


def test_shutdown_closes_connections_and_frees_the_port():
    stub = StubBroker()
    server = SocketServer("127.0.0.1", 0, stub).start()
    port = server.port
    s = _connect(port)
    s.sendall(_frame(ApiVersionsRequest[3](), 1, 3))
    _recv_frame(s)
    server.shutdown()
    _assert_closed(s)
    s.close()
    again = SocketServer("127.0.0.1", port, stub).start()
    try:
        _still_serves(port)
    finally:
        again.shutdown()
    assert not [t for t in threading.enumerate() if t.name == f"kafka-network-thread-{port}"]


def test_a_taken_port_is_an_error_unless_any_port_will_do():
    """A restarted broker asks for its previous port as a preference (``any_port_if_taken``): taken by another
    process, it listens on any free port and reports it; without the preference, the bind error stands."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        taken = holder.getsockname()[1]
        with pytest.raises(OSError):
            SocketServer("127.0.0.1", taken, StubBroker()).start()
        server = SocketServer("127.0.0.1", taken, StubBroker(), any_port_if_taken=True).start()
        try:
            assert server.port not in (0, taken)
            with _connect(server.port):
                pass
        finally:
            server.shutdown()
    server = SocketServer("127.0.0.1", taken, StubBroker(), any_port_if_taken=True).start()  # free again: kept
    try:
        assert server.port == taken
    finally:
        server.shutdown()


@pytest.mark.parametrize("deferred", [False, True], ids=["at-once", "completed-later"])
def test_file_records_pieces_go_out_with_sendfile_whole_and_in_order(broker, tmp_path, deferred):
    """Record data as ``FileRecords`` ranges of a file (a Fetch answer's large reads) is sent from the file
    (``sendfile``) between the other pieces, partial sends included, and the answer after it follows it."""
    stub, server = broker
    data = bytes(range(256)) * (24 << 12)   # 6 MiB
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        ranges = [FileRecords(fd, 100, 3 << 20), FileRecords(fd, 5 << 20, 70 * 1024)]
    finally:
        os.close(fd)   # each range keeps its own descriptor
    pieces = [b"\x00\x00\x00\x00", ranges[0], b"c" * 5, ranges[1], b"f"]
    expected = b"".join([b"\x00\x00\x00\x00", data[100:100 + (3 << 20)], b"c" * 5,
                         data[5 << 20:(5 << 20) + 70 * 1024], b"f"])
    first, second = _answer_produce_with_pieces(stub, server, pieces, deferred)
    assert first == struct.pack(">i", 7) + b"\x00" + expected
    assert struct.unpack(">i", second[:4])[0] == 8
    assert server.metrics["Produce"]["bytes_out"] == len(first) + 4


def test_file_records_cut_short_by_a_truncated_file_close_the_connection(broker, tmp_path):
    """A range whose file was truncated after the read cannot send what its frame announced: the connection is
    closed (the client sees it end), never a frame with other bytes in it."""
    stub, server = broker
    path = tmp_path / "segment.log"
    path.write_bytes(b"R" * (1 << 20))
    fd = os.open(path, os.O_RDWR)
    try:
        records = FileRecords(fd, 0, 1 << 20)
        os.ftruncate(fd, 1000)
    finally:
        os.close(fd)
    original = stub.handle

    def handle(header, request, context):
        if header.request_api_key != 0:
            return original(header, request, context)
        return codec.EncodedResponse(0, header.request_api_version, [b"\x00" * 4, records])

    stub.handle = handle
    with _connect(server.port) as s:
        s.sendall(_frame(_produce(b"x" * 100), 7, 9))
        got = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            got += chunk
    assert len(got) < 4 + 5 + 4 + (1 << 20)   # the frame was cut, then the connection closed
    assert got[4:8] == struct.pack(">i", 7)


class _MutingBroker(StubBroker):
    """Answers the ``muted`` correlation ids with a client quota's throttle (the channel muted for ``mute_ms`` after
    the answer)."""
    MUTE_MS = 1000

    def __init__(self, muted=frozenset({1}), mute_ms: int = MUTE_MS):
        super().__init__()
        self.muted, self.mute_ms = muted, mute_ms
        self.handled_at: dict[int, float] = {}

    def handle(self, header, request, context):
        self.handled_at[header.correlation_id] = time.monotonic()
        answer = super().handle(header, request, context)
        return MuteAfterResponse(answer, self.mute_ms) if header.correlation_id in self.muted else answer


def test_requests_read_ahead_of_a_throttle_wait_for_its_end():
    """Kafka reads nothing from a channel muted for a quota's throttle; requests this server already read ahead of
    the mute wait for its end too, or a pipelining client passes its quota by its read-ahead."""
    stub = _MutingBroker()
    server = SocketServer("127.0.0.1", 0, stub, num_handler_threads=2, max_in_flight_per_connection=8).start()
    stub.port = server.port
    try:
        with _connect(server.port) as s:
            s.sendall(b"".join(_frame(MetadataRequest[12](topics=[]), cid, 12) for cid in (1, 2, 3)))
            _recv_frame(s)
            answered = time.monotonic()
            rest = [_recv_frame(s) for _ in range(2)]
        assert [struct.unpack(">i", r[:4])[0] for r in rest] == [2, 3]
        assert stub.handled_at[2] - answered >= 0.8 * _MutingBroker.MUTE_MS / 1000
    finally:
        server.shutdown()


def test_requests_held_behind_short_throttles_are_all_answered():
    """Throttles of 1 ms, each over before or after the network thread first meets it: every request held back
    behind one is handled once it ends, without waiting for the client's next request."""
    stub = _MutingBroker(muted=frozenset(range(1, 41)), mute_ms=1)
    server = SocketServer("127.0.0.1", 0, stub, num_handler_threads=2, max_in_flight_per_connection=64).start()
    stub.port = server.port
    try:
        with _connect(server.port) as s:
            s.sendall(b"".join(_frame(MetadataRequest[12](topics=[]), cid, 12) for cid in range(1, 41)))
            answers = [struct.unpack(">i", _recv_frame(s)[:4])[0] for _ in range(40)]
        assert answers == list(range(1, 41))
    finally:
        server.shutdown()


def _produce_answer(throttle_ms: int = 0) -> ProduceResponse:
    return ProduceResponse(version=9, responses=[], throttle_time_ms=throttle_ms)


@pytest.fixture
def muting_broker():
    """A broker whose Produce answers the ``muted`` correlation ids throttled; ``deferred`` ones wait for the test."""
    stub = _MutingBroker(muted=frozenset({1}), mute_ms=300)
    stub.ranges[0] = (0, 9)
    stub.ranges[60] = (0, 1)
    stub.deferred.add(1)
    server = SocketServer("127.0.0.1", 0, stub, num_handler_threads=2, max_in_flight_per_connection=8).start()
    stub.port = server.port
    yield stub, server
    server.shutdown()


def _muted_while_pending(server: SocketServer) -> None:
    """The connection was muted while its throttled answer is pending (the network thread stopped reading it)."""
    wait_for(lambda: server.connection_metrics["throttled"] == 1, DEADLINE,
             message="the connection muted from the throttle's charge")


def test_a_throttled_answer_still_pending_holds_the_requests_behind_it_until_its_mute_ends(muting_broker):
    """An acks=all Produce over its quota: the throttle is charged when it is handled, its answer waits for the
    followers.  The requests read behind it are not handled before that answer is sent and its mute is over (Kafka
    mutes the channel from the request until its answer is sent, then for the throttle)."""
    stub, server = muting_broker
    mute_s = stub.mute_ms / 1000
    with _connect(server.port) as s:
        s.sendall(b"".join(_frame(_produce(b"r" * 100), cid, 9) for cid in (1, 2, 3)))
        stub.wait_seen(1)
        _muted_while_pending(server)
        assert 2 not in stub.handled_at
        completed = time.monotonic()
        stub.pending[1].set_result(_produce_answer(stub.mute_ms))
        answers = [struct.unpack(">i", _recv_frame(s)[:4])[0] for _ in range(3)]
    assert answers == [1, 2, 3]
    assert stub.handled_at[2] >= completed + 0.99 * mute_s   # the mute counts from the answer, not the charge
    assert stub.handled_at[3] >= stub.handled_at[2]


def test_a_throttled_answer_that_fails_is_answered_with_an_error_then_muted(muting_broker):
    """The pending answer fails: its error answer is sent, then the mute holds the requests behind it as for any
    throttled answer (it is not left muted for good, nor unmuted at once)."""
    stub, server = muting_broker
    mute_s = stub.mute_ms / 1000
    describe = DescribeClusterRequest[1](include_cluster_authorized_operations=False)
    with _connect(server.port) as s:
        s.sendall(_frame(describe, 1, 1) + b"".join(_frame(MetadataRequest[12](topics=[]), cid, 12) for cid in (2, 3)))
        stub.wait_seen(1)
        _muted_while_pending(server)
        assert 2 not in stub.handled_at
        completed = time.monotonic()
        stub.pending[1].set_exception(RuntimeError("the followers did not answer"))
        first = _recv_frame(s)
        rest = [struct.unpack(">i", _recv_frame(s)[:4])[0] for _ in range(2)]
    assert struct.unpack(">i", first[:4])[0] == 1
    assert DescribeClusterResponse.decode(first[5:], version=1).error_code == -1
    assert rest == [2, 3]
    assert stub.handled_at[2] >= completed + 0.99 * mute_s


def test_a_connection_closed_while_its_throttled_answer_is_pending_leaves_nothing_behind(muting_broker):
    """The client goes away while the throttled answer is pending: once it completes and the mute is over, the
    connection is closed and no longer tracked as throttled."""
    stub, server = muting_broker
    with _connect(server.port) as s:
        s.sendall(b"".join(_frame(_produce(b"r" * 100), cid, 9) for cid in (1, 2)))
        stub.wait_seen(1)
        _muted_while_pending(server)
    stub.pending[1].set_result(_produce_answer(stub.mute_ms))
    wait_for(lambda: server.connection_metrics["throttled"] == 0 and server.connection_metrics["active"] == 0,
             DEADLINE, message="the closed connection forgotten")
    _still_serves(server.port)


def test_unthrottled_answers_still_pending_do_not_hold_the_requests_behind_them(broker):
    """No throttle, no mute: requests pipelined behind an answer that waits are handled meanwhile."""
    stub, server = broker
    stub.deferred.add(1)
    with _connect(server.port) as s:
        s.sendall(b"".join(_frame(_produce(b"r" * 100), cid, 9) for cid in (1, 2, 3)))
        stub.wait_seen(3)
        assert server.connection_metrics["throttled"] == 0
        stub.pending[1].set_result(_produce_answer())
        answers = [struct.unpack(">i", _recv_frame(s)[:4])[0] for _ in range(3)]
    assert answers == [1, 2, 3]
