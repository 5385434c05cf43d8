"""A broker under garbage (issue #16): seeded, bounded fuzzing of request frames for several APIs and of record
batches inside valid Produce requests; a frame larger than the memory the broker has.  The broker must stay up
(registered, answering), serve a normal client afterwards, and never append a batch a consumer cannot read."""
from __future__ import annotations

import json
import random
import socket
import struct
import time

import pytest
from crc32c import crc32c
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.protocol.admin import DescribeClusterRequest, DescribeConfigsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SEED = 16
FRAMES_PER_API = 1500
BATCHES = 3000
TOPIC = "fuzz"
HEADROOM = 256 * 1024 * 1024  # address space the broker may still take after start-up


@pytest.fixture(scope="module")
def broker(module_cluster_factory):
    cluster = module_cluster_factory(brokers=1, log_dirs=1, overrides={
        "auto.create.topics.enable": "false", "socket.request.max.bytes": "2000000000",
        "kafkatier.test.memory.headroom.bytes": str(HEADROOM)})
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)], timeout_ms=30000)
    finally:
        admin.close()
    wait_for(lambda: json.loads(cluster.zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")[0])["leader"] == 1,
             30, interval=0.1, ignore=(Exception,), message="topic online")
    return cluster


def address(cluster) -> tuple[str, int]:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    return host, int(port)


class Conn:
    """A raw connection that reconnects after the broker closes it."""

    def __init__(self, addr):
        self.addr = addr
        self.sock: socket.socket | None = None
        self.closed_by_broker = 0
        self.silent = 0  # no answer in time (e.g. a mutated acks=0 Produce, or a long fetch wait)

    def exchange(self, data: bytes) -> bytes | None:
        """Send ``data``; the response frame, or None when the broker closed the connection."""
        if self.sock is None:
            self.sock = socket.create_connection(self.addr, timeout=1)
        try:
            self.sock.sendall(data)
            size = self._exact(4)
            return self._exact(struct.unpack(">i", size)[0])
        except (ConnectionError, OSError) as e:
            if isinstance(e, socket.timeout):
                self.silent += 1
            self.sock.close()
            self.sock = None
            self.closed_by_broker += 1
            return None

    def send_and_hang_up(self, data: bytes) -> None:
        self.close()
        with socket.create_connection(self.addr, timeout=2) as s:
            s.sendall(data)

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def batch(rnd: random.Random, n: int) -> bytes:
    b = MemoryRecordsBuilder(2, rnd.choice((0, 0, 0, 1)), 1 << 20)
    now = int(time.time() * 1000)
    for i in range(n):
        b.append(now + i, rnd.choice((None, b"k%d" % i)), rnd.randbytes(rnd.randrange(0, 40)),
                 headers=[("h", b"v")] if rnd.random() < 0.3 else [])
    b.close()
    return bytes(b.buffer())


def produce_frame(records: bytes, corr: int = 1) -> bytes:
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        T(name=TOPIC, partition_data=[T.PartitionProduceData(index=0, records=records)])])
    req.with_header(correlation_id=corr, client_id="fuzz")
    return req.encode(version=9, header=True, framed=True)


def seed_frames() -> dict[str, bytes]:
    def enc(req, v):
        req.with_header(correlation_id=7, client_id="fuzz")
        return req.encode(version=v, header=True, framed=True)
    F = FetchRequest.FetchTopic
    L = ListOffsetsRequest.ListOffsetsTopic
    return {
        "ApiVersions": enc(ApiVersionsRequest[3](client_software_name="f", client_software_version="1"), 3),
        "Metadata": enc(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC, topic_id=None)],
                                            allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False), 12),
        "Fetch": enc(FetchRequest[11](
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 16, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[F(version=11, topic=TOPIC, partitions=[F.FetchPartition(
                version=11, partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                partition_max_bytes=1 << 16)])], forgotten_topics_data=[], rack_id=""), 11),
        "ListOffsets": enc(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[L(
            version=7, name=TOPIC, partitions=[L.ListOffsetsPartition(
                version=7, partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 7),
        "DescribeConfigs": enc(DescribeConfigsRequest[4](resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=2, resource_name=TOPIC, configuration_keys=None)], include_synonyms=True,
            include_documentation=False), 4),
        "DescribeCluster": enc(DescribeClusterRequest[0](include_cluster_authorized_operations=False), 0),
        "Produce": produce_frame(batch(random.Random(1), 3)),
    }


def mutate(rnd: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    kind = rnd.randrange(6)
    if kind == 0:  # flip bytes after the size prefix
        for _ in range(rnd.randrange(1, 6)):
            i = rnd.randrange(4, len(buf))
            buf[i] ^= 1 << rnd.randrange(8)
    elif kind == 1:  # random bytes over a stretch
        i = rnd.randrange(4, len(buf))
        buf[i:i + rnd.randrange(1, 16)] = rnd.randbytes(rnd.randrange(1, 16))
        struct.pack_into(">i", buf, 0, len(buf) - 4)
    elif kind == 2:  # truncated body, honest size
        buf = buf[:rnd.randrange(4, len(buf))]
        struct.pack_into(">i", buf, 0, len(buf) - 4)
    elif kind == 3:  # junk appended, honest size
        buf += rnd.randbytes(rnd.randrange(1, 64))
        struct.pack_into(">i", buf, 0, len(buf) - 4)
    elif kind == 4:  # a lying size prefix (then the connection is dropped by us)
        struct.pack_into(">i", buf, 0, rnd.choice((-1, 0, 3, 7, len(buf) + 100, 2 ** 31 - 1)))
    else:  # another api version or key
        struct.pack_into(">hh", buf, 4, rnd.choice((0, 1, 3, 18, 32, 60, 99, -1)), rnd.randrange(-2, 20))
    return bytes(buf)


def reseal(buf: bytearray) -> bytes:
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def mutate_batch(rnd: random.Random, blob: bytes) -> bytes:
    buf = bytearray(blob)
    kind = rnd.randrange(5)
    if kind == 0:  # record bytes flipped, CRC fixed
        for _ in range(rnd.randrange(1, 4)):
            i = rnd.randrange(61, len(buf))
            buf[i] ^= 1 << rnd.randrange(8)
        return reseal(buf)
    if kind == 1:  # header fields after the CRC changed, CRC fixed (count, codec, attributes, deltas)
        i = rnd.randrange(21, 61)
        buf[i] = rnd.randrange(256)
        return reseal(buf)
    if kind == 2:  # random record bytes
        return reseal(buf[:61] + bytearray(rnd.randbytes(rnd.randrange(0, 120))))
    if kind == 3:  # length runs past the end
        struct.pack_into(">i", buf, 8, len(buf) + rnd.randrange(1, 100))
        return bytes(buf)
    return bytes(buf[:rnd.randrange(0, 61)])  # empty or a torn header


def broker_alive(cluster) -> None:
    assert cluster.zk.exists("/brokers/ids/1"), "the broker deregistered"
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks=1, request_timeout_ms=15000)
    try:
        producer.send(TOPIC, value=b"still-alive").get(timeout=30)
    finally:
        producer.close(timeout=10)


def test_frame_larger_than_memory_closes_only_that_connection(broker):
    conn = Conn(address(broker))
    try:
        # 1.5 GB announced: allowed by socket.request.max.bytes here, more than the broker's address space left.
        assert conn.exchange(struct.pack(">i", 1_500_000_000) + b"\x00" * 1024) is None
        assert conn.exchange(struct.pack(">i", 1_500_000_000) + b"\x00" * 1024) is None
        assert conn.exchange(seed_frames()["ApiVersions"]) is not None  # a new connection is served
    finally:
        conn.close()
    broker_alive(broker)


def test_fuzzed_frames_and_batches_never_hurt_the_broker(broker):
    rnd = random.Random(SEED)
    conn = Conn(address(broker))
    accepted_records = 0
    codes: dict[int, int] = {}
    try:
        for name, seed in seed_frames().items():
            started, silent = time.monotonic(), conn.silent
            assert conn.exchange(seed) is not None, f"{name}: the valid request is answered"
            for _ in range(FRAMES_PER_API):
                data = mutate(rnd, seed)
                if struct.unpack(">i", data[:4])[0] > len(data) - 4:
                    conn.send_and_hang_up(data)  # a lying size: the broker waits for bytes that never come
                    continue
                conn.exchange(data)
            print(f"{name}: {FRAMES_PER_API} frames in {time.monotonic() - started:.1f}s, "
                  f"{conn.silent - silent} unanswered")
        started = time.monotonic()
        for _ in range(BATCHES):
            n = rnd.randrange(1, 6)
            blob = mutate_batch(rnd, batch(rnd, n))
            resp = conn.exchange(produce_frame(blob))
            if resp is None:
                continue
            decoded = ProduceResponse.decode(resp, version=9, header=True)
            p = decoded.responses[0].partition_responses[0]
            code = p.error_code
            codes[code] = codes.get(code, 0) + 1
            if code == 0:
                accepted_records += struct.unpack_from(">i", blob, 57)[0]
        print(f"{BATCHES} batches in {time.monotonic() - started:.1f}s: {codes}")
    finally:
        conn.close()
    assert codes.get(87, 0) > BATCHES // 4, codes  # INVALID_RECORD is the usual answer
    broker_alive(broker)

    # Read the whole log back: every appended batch is readable up to the log end, none holds fewer records than
    # were accepted (mutated Produce frames that stayed valid add more).
    from kafka import TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=5000, check_crcs=True)
    tp = TopicPartition(TOPIC, 0)
    try:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        offsets = [m.offset for m in consumer]
    finally:
        consumer.close()
    assert offsets == list(range(end)), "every offset up to the log end is readable"
    assert end >= accepted_records


def test_unadvertised_metadata_v13_is_unsupported_version(broker):
    from kafka.protocol.metadata import MetadataResponse
    req = MetadataRequest[13](topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    req.with_header(correlation_id=3, client_id="v13")
    conn = Conn(address(broker))
    try:
        resp = conn.exchange(req.encode(version=13, header=True, framed=True))
    finally:
        conn.close()
    assert resp is not None
    assert MetadataResponse.decode(resp, version=13, header=True).error_code == 35  # UNSUPPORTED_VERSION


def test_incremental_append_and_subtract_on_a_list_config(broker):
    from kafka.protocol.admin import IncrementalAlterConfigsRequest as Req
    from kafka.protocol.admin import IncrementalAlterConfigsResponse as Resp
    topic = "append-subtract"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)], timeout_ms=30000)
    finally:
        admin.close()
    conn = Conn(address(broker))

    def alter(op: int, name: str, value: str, corr: int) -> int:
        req = Req[1](resources=[Req.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
            Req.AlterConfigsResource.AlterableConfig(name=name, config_operation=op, value=value)])],
            validate_only=False)
        req.with_header(correlation_id=corr, client_id="append")
        return Resp.decode(conn.exchange(req.encode(version=1, header=True, framed=True)), version=1,
                           header=True).responses[0].error_code

    def policy() -> str:
        return json.loads(broker.zk.get(f"/config/topics/{topic}")[0])["config"].get("cleanup.policy")
    try:
        assert alter(2, "cleanup.policy", "compact", 1) == 0  # APPEND to the default "delete"
        assert policy() == "delete,compact"
        assert alter(3, "cleanup.policy", "delete", 2) == 0   # SUBTRACT
        assert policy() == "compact"
        assert alter(2, "retention.ms", "5", 3) == 40          # INVALID_CONFIG: not a list
    finally:
        conn.close()
