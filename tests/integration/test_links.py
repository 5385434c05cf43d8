"""The link process alone (``cluster/links.py``), in front of a small echo server: what a peer observes under each
fault, measured.  No broker, no ZooKeeper: seconds, not minutes."""
from __future__ import annotations

import socket
import statistics
import threading
import time

import pytest

from kafkatier.cluster.link_faults import (BACKWARD, BANDWIDTH, BLACKHOLE, FORWARD, LATENCY, PARTITION, Link,
                                           LinkFault, LinkFaultPlan)
from kafkatier.cluster.link_manager import LinkManager
from kafkatier.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NAME = "client:test->broker:1"


class EchoServer:
    """Echoes every byte back; one thread per connection."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._echo, args=(c,), daemon=True).start()

    @staticmethod
    def _echo(c):
        with c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                while data := c.recv(1 << 18):
                    c.sendall(data)
            except OSError:
                pass

    def close(self):
        self.sock.close()


@pytest.fixture
def echo():
    e = EchoServer()
    yield e
    e.close()


@pytest.fixture
def links(tmp_path, echo):
    lm = LinkManager(str(tmp_path))
    lm.create([Link("client:test", "broker:1", f"127.0.0.1:{echo.port}"),
               Link("client:base", "broker:1", f"127.0.0.1:{echo.port}")])  # a healthy twin, for baselines
    lm.start()
    yield lm
    lm.stop(kill=True)


def dial(lm: LinkManager, timeout: float = 5.0, name: str = NAME) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", lm.table().link(name).port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def round_trip(s: socket.socket, payload: bytes = b"x" * 100) -> bytes:
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = s.recv(1 << 18)
        if not chunk:
            raise ConnectionResetError("closed")
        got += chunk
    return got


def fault(lm, f: LinkFault):
    lm.apply(LinkFaultPlan(((NAME, f),), f.describe()), by="test")


def test_healthy_link_forwards_both_ways(links):
    with dial(links) as s:
        assert round_trip(s, b"hello" * 1000) == b"hello" * 1000
        big = bytes(range(256)) * 8192  # 2 MiB
        assert round_trip(s, big) == big


def test_partition_resets_open_connections_and_new_ones(links):
    s = dial(links)
    round_trip(s)
    fault(links, LinkFault(PARTITION))
    with pytest.raises(OSError):  # the open connection is reset (ECONNRESET, or EOF after it)
        round_trip(s)
    s.close()
    with pytest.raises(OSError):  # a new one is accepted and reset at once (connect() itself may meet the reset)
        with dial(links) as s2:
            round_trip(s2)
    assert links.heal() == [NAME]
    with dial(links) as s3:
        assert round_trip(s3) == b"x" * 100


def test_blackhole_accepts_bytes_and_answers_nothing_then_heal_resets(links):
    fault(links, LinkFault(BLACKHOLE))
    s = dial(links, timeout=1.0)
    s.sendall(b"request")  # accepted
    with pytest.raises(socket.timeout):
        s.recv(100)
    links.heal()
    with pytest.raises(OSError):  # the stream lost bytes: healing resets it
        s.settimeout(5.0)
        round_trip(s)
    s.close()
    with dial(links) as s2:
        assert round_trip(s2) == b"x" * 100


def test_one_way_blackhole_delivers_the_other_direction(links, echo):
    # Answers dropped: the request reaches the echo server (it connects, reads), the answer never comes back.
    fault(links, LinkFault(BLACKHOLE, BACKWARD))
    before = echo.connections
    s = dial(links, timeout=1.0)
    s.sendall(b"ping")
    with pytest.raises(socket.timeout):
        s.recv(10)
    assert echo.connections == before + 1
    s.close()


@pytest.mark.parametrize("mean_ms, jitter_ms", [(50.0, 0.0), (100.0, 20.0)])
def test_latency_within_ten_percent_of_the_mean(links, mean_ms, jitter_ms):
    """Round trips through the slowed link, interleaved with round trips through its healthy twin (the
    difference is what the fault added).  The link's delays are uniform in mean ± jitter; a loaded machine's late
    wake-ups (tens of ms at times on a shared CI runner) only ever add to a sample.  So the mean is estimated
    from the lower quartile, which such outliers do not move: p25 + jitter/2; the median must not be far off."""
    fault(links, LinkFault(LATENCY, FORWARD, latency_ms=mean_ms, jitter_ms=jitter_ms))
    with dial(links) as s, dial(links, name="client:base->broker:1") as base:
        round_trip(s)
        round_trip(base)
        slow, healthy = [], []
        for _ in range(40):
            for sock, out in ((s, slow), (base, healthy)):
                t0 = time.perf_counter()
                round_trip(sock)
                out.append((time.perf_counter() - t0) * 1000)
    baseline = statistics.median(healthy)
    quartiles = statistics.quantiles([x - baseline for x in slow], n=4)
    estimated_mean = quartiles[0] + jitter_ms / 2
    assert abs(estimated_mean - mean_ms) <= 0.1 * mean_ms, (estimated_mean, slow, healthy)
    assert 0.9 * mean_ms <= quartiles[1] <= 1.5 * mean_ms, (quartiles, slow)
    if jitter_ms:
        assert max(slow) - min(slow) > jitter_ms, slow  # the jitter is there


def test_latency_keeps_order(links):
    fault(links, LinkFault(LATENCY, BOTH := "both", latency_ms=20.0, jitter_ms=19.0))
    with dial(links) as s:
        payload = b"".join(i.to_bytes(4, "big") for i in range(2000))
        for i in range(0, len(payload), 40):  # many small writes, each a chunk with its own delay
            s.sendall(payload[i:i + 40])
        got = b""
        while len(got) < len(payload):
            got += s.recv(1 << 16)
    assert got == payload and BOTH


def test_bandwidth_within_ten_percent(links):
    rate = 2_000_000
    fault(links, LinkFault(BANDWIDTH, FORWARD, rate_bytes_per_s=rate))
    payload = b"b" * 3_000_000
    with dial(links, timeout=30) as s:
        t0 = time.perf_counter()
        reader_done = threading.Event()
        got = []

        def read():
            n = 0
            while n < len(payload):
                chunk = s.recv(1 << 18)
                if not chunk:
                    break
                n += len(chunk)
            got.append(n)
            reader_done.set()
        threading.Thread(target=read, daemon=True).start()
        s.sendall(payload)
        assert reader_done.wait(30)
        elapsed = time.perf_counter() - t0
    measured = len(payload) / elapsed
    assert got == [len(payload)]
    assert abs(measured - rate) <= 0.1 * rate, f"{measured:.0f} B/s for {rate} B/s"


def test_killed_link_process_is_a_cut_cable_and_heal_restarts_it(links):
    port = links.table().link(NAME).port
    s = dial(links)
    round_trip(s)
    links.stop(kill=True)
    wait_for(lambda: not links.running(), 10, message="the link process to die")
    with pytest.raises(OSError):
        round_trip(s)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    fault(links, LinkFault(LATENCY, latency_ms=5.0))  # applied while it is down: waits in the state file
    assert links.heal(kinds=["bandwidth"]) == []      # nothing of that kind; but the process is started again
    assert links.table().link(NAME).port == port
    with dial(links) as s2:
        t0 = time.perf_counter()
        assert round_trip(s2) == b"x" * 100
        assert time.perf_counter() - t0 >= 0.009  # 5 ms each way, recorded while it was down
    assert [r["action"] for r in links.state.records()] == ["apply"]


def test_heal_of_a_healthy_link_is_a_no_op(links):
    g = links.table().generation
    assert links.heal() == []
    assert links.table().generation == g
