"""The link process: one asyncio process per cluster serving every link of ``<data-dir>/links/links.json``
(``python -m kafkatier cluster links serve --data-dir D``; value types and fault semantics in
``cluster/link_faults.py``).  No Kafka counterpart: Toxiproxy's proxy, reduced to what a cluster needs.

- One listening socket per link on ``127.0.0.1``: the port recorded in the state file, or port 0 on the first
  start, the bound port then written back (never "find a free port, close it, bind it later").  A restarted
  process binds the same ports (``SO_REUSEADDR``) and serves the recorded faults.
- Healthy bytes are forwarded in chunks of up to 256 KiB with ``sock_recv_into`` (one buffer per direction, so no
  allocation per chunk) / ``sock_sendall``, and nothing else per chunk but one lookup of the direction's
  behaviour.  Under latency or bandwidth a chunk goes through a
  bounded queue to the direction's writer task (order kept; the bound is the back-pressure).
- The state file is the truth: a command (``cluster/link_manager.py``) changes it under ``links.json.lock`` and
  sends ``{"op": "reload"}`` to the control port (JSON lines on ``127.0.0.1``); the answer comes once the new
  faults are in force.  A change made while the process is down is served when it starts again.
- A killed process takes every listener with it: each path through it is refused like a cut cable.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import struct
import time

import attrs

from kafkatier.cluster.link_faults import (BACKWARD, FORWARD, HEALTHY, DirectionBehaviour, Link, LinkTable,
                                           behaviour, fixed_upstream_port, resolve_upstream)
from kafkatier.cluster.link_state import LinkStateFile
from kafkatier.logsetup import get_logger, kv

log = get_logger("links")

CHUNK = 256 * 1024
QUEUE_CHUNKS = 64
CONNECT_TIMEOUT_S = 5.0


def reset_socket(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets an RST (ECONNRESET), not a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class TokenBucket:
    """A bandwidth cap shared by a link's connections in one direction: each slice of bytes may start once the
    ones before it have drained at ``rate`` bytes/s (no burst beyond one slice)."""

    def __init__(self):
        self.next_free = 0.0

    async def take(self, n: int, rate: int) -> None:
        now = time.monotonic()
        start = max(now, self.next_free)
        self.next_free = start + n / rate
        if start > now:
            await asyncio.sleep(start - now)


@attrs.define
class LinkRuntime:
    """One served link: its listener, its live connections and each direction's behaviour."""
    link: Link
    listener: socket.socket
    forward: DirectionBehaviour = HEALTHY
    backward: DirectionBehaviour = HEALTHY
    connections: set = attrs.field(factory=set)
    buckets: dict = attrs.field(factory=lambda: {FORWARD: TokenBucket(), BACKWARD: TokenBucket()})
    accepted: int = 0
    reset: int = 0
    bytes: dict = attrs.field(factory=lambda: {FORWARD: 0, BACKWARD: 0})
    dropped: dict = attrs.field(factory=lambda: {FORWARD: 0, BACKWARD: 0})

    def behaviour(self, direction: str) -> DirectionBehaviour:
        return self.forward if direction == FORWARD else self.backward

    @property
    def cut(self) -> bool:
        return self.forward.cut


class Connection:
    """One proxied connection: a pump per direction; EOF on one side is passed on as a half-close."""

    def __init__(self, rt: LinkRuntime, client: socket.socket, upstream: socket.socket, rng: random.Random):
        self.rt = rt
        self.client = client
        self.upstream = upstream
        self.rng = rng
        self.tainted = False  # bytes were dropped: the stream's framing is broken, heal resets it
        self.tasks: list[asyncio.Task] = []
        self.closed = False
        self.pending = {FORWARD: 0, BACKWARD: 0}  # chunks queued for a direction's writer, not yet sent

    async def run(self) -> None:
        self.rt.connections.add(self)
        self.tasks = [asyncio.ensure_future(self._pump(self.client, self.upstream, FORWARD)),
                      asyncio.ensure_future(self._pump(self.upstream, self.client, BACKWARD))]
        try:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        finally:
            self.close()

    def close(self, reset: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self.rt.connections.discard(self)
        for t in self.tasks:
            t.cancel()
        loop = asyncio.get_running_loop()
        for s in (self.client, self.upstream):
            # Unregister now: the cancelled reads' own clean-up runs later with the fd number, which a new
            # connection may have taken by then (asyncio skips it once the handle is cancelled here).
            if s.fileno() >= 0:
                loop.remove_reader(s.fileno())
                loop.remove_writer(s.fileno())
        for s in (self.client, self.upstream):
            if reset:
                reset_socket(s)
            else:
                with contextlib.suppress(OSError):
                    s.close()
        if reset:
            self.rt.reset += 1

    async def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        loop = asyncio.get_running_loop()
        rt = self.rt
        queue: asyncio.Queue | None = None
        writer: asyncio.Task | None = None
        buf = bytearray(CHUNK)  # one buffer per direction: no allocation (nor fresh mmap) per chunk
        view = memoryview(buf)
        try:
            while True:
                try:
                    n = await loop.sock_recv_into(src, buf)
                except OSError:
                    self.close(reset=True)  # a reset on one side is passed on to the other
                    return
                if not n:
                    break
                b = rt.behaviour(direction)
                if b.drop:
                    self.tainted = True
                    rt.dropped[direction] += n
                    continue
                rt.bytes[direction] += n
                if b.healthy and not self.pending[direction]:
                    await loop.sock_sendall(dst, view[:n])
                    continue
                if queue is None:
                    queue = asyncio.Queue(QUEUE_CHUNKS)
                    writer = asyncio.ensure_future(self._write(queue, dst, direction))
                    self.tasks.append(writer)
                self.pending[direction] += 1
                await queue.put((time.monotonic() + b.delay_s(self.rng), bytes(view[:n])))
            if queue is not None:
                await queue.put(None)
                await writer
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
        except asyncio.CancelledError:
            raise
        except OSError:
            self.close(reset=True)

    async def _write(self, queue: asyncio.Queue, dst: socket.socket, direction: str) -> None:
        """Delivers queued chunks in order, each at its time, under the direction's bandwidth cap."""
        loop = asyncio.get_running_loop()
        while True:
            item = await queue.get()
            if item is None:
                return
            deliver_at, data = item
            wait = deliver_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            view = memoryview(data)
            while view:
                rate = self.rt.behaviour(direction).rate_bytes_per_s
                if rate:
                    n = max(1024, min(len(view), rate // 50))  # slices of 20 ms at the capped rate
                    await self.rt.buckets[direction].take(min(n, len(view)), rate)
                else:
                    n = len(view)
                try:
                    await loop.sock_sendall(dst, view[:n])
                except OSError:
                    self.close(reset=True)
                    return
                view = view[n:]
            self.pending[direction] -= 1


class LinkServer:
    def __init__(self, state: LinkStateFile):
        self.state = state
        self.runtimes: dict[str, LinkRuntime] = {}
        self.control: socket.socket | None = None
        self.generation = -1
        self.rng = random.Random()
        self.stopping: asyncio.Event | None = None
        self._tasks: set[asyncio.Task] = set()   # connection tasks, referenced until they finish

    # --- start ----------------------------------------------------------------------------------------------
    def bind(self) -> LinkTable:
        """Bind every link's port (its recorded one, else a new one) and the control port; write them back."""
        with self.state.locked():
            table = self.state.read()
            # A new port never lands on a destination's port: those are chosen before their servers bind them.
            upstream_ports = {fixed_upstream_port(li.upstream) for li in table.links} - {None}
            bound = []
            for link in table.links:
                sock = _listen(link.port) if link.port else _listen_avoiding(upstream_ports)
                bound.append(attrs.evolve(link, port=sock.getsockname()[1]))
                self.runtimes[link.name] = LinkRuntime(bound[-1], sock)
            try:
                self.control = _listen(table.control_port)
            except OSError:  # the control port is ours to choose again: commands read it from the file
                self.control = _listen(0)
            table = attrs.evolve(table, links=tuple(bound), control_port=self.control.getsockname()[1],
                                 pid=os.getpid())
            self.state.write(table)
        self._apply(table)
        log.info("links bound %s", kv(links=len(bound), control=table.control_port, pid=os.getpid()))
        return table

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        tasks = [asyncio.ensure_future(self._accept(rt)) for rt in self.runtimes.values()]
        tasks.append(asyncio.ensure_future(self._control_loop()))
        await self.stopping.wait()
        for t in tasks:
            t.cancel()
        for rt in self.runtimes.values():
            for c in list(rt.connections):
                c.close()
            rt.listener.close()
        log.info("links stopped")

    # --- data path ------------------------------------------------------------------------------------------
    async def _accept(self, rt: LinkRuntime) -> None:
        loop = asyncio.get_running_loop()
        while True:
            client, _ = await loop.sock_accept(rt.listener)
            rt.accepted += 1
            if rt.cut:
                reset_socket(client)
                rt.reset += 1
                continue
            task = asyncio.ensure_future(self._connect(rt, client))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, rt: LinkRuntime, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        client.setblocking(False)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        up.setblocking(False)
        up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.wait_for(loop.sock_connect(up, resolve_upstream(rt.link.upstream)), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            up.close()
            reset_socket(client)  # the destination refuses: so does the link
            return
        if rt.cut:  # cut while connecting
            reset_socket(up)
            reset_socket(client)
            return
        await Connection(rt, client, up, self.rng).run()

    # --- faults ---------------------------------------------------------------------------------------------
    def _apply(self, table: LinkTable) -> None:
        for link in table.links:
            rt = self.runtimes.get(link.name)
            if rt is None:
                continue  # links are fixed at start; a new link needs a restart
            before = (rt.forward, rt.backward)
            rt.link = link
            rt.forward, rt.backward = behaviour(link.faults, FORWARD), behaviour(link.faults, BACKWARD)
            if rt.cut and not before[0].cut:
                for c in list(rt.connections):
                    c.close(reset=True)
            if (before[0].drop and not rt.forward.drop) or (before[1].drop and not rt.backward.drop):
                for c in list(rt.connections):
                    if c.tainted:
                        c.close(reset=True)  # healed: a stream that lost bytes cannot be parsed any more
        self.generation = table.generation

    def reload(self) -> int:
        table = self.state.read()
        self._apply(table)
        log.info("links reloaded %s", kv(generation=table.generation, faulty=len(table.faulty())))
        return table.generation

    def stats(self) -> dict:
        return {name: {"port": rt.link.port, "connections": len(rt.connections), "accepted": rt.accepted,
                       "reset": rt.reset, "bytes_forward": rt.bytes[FORWARD], "bytes_backward": rt.bytes[BACKWARD],
                       "dropped_forward": rt.dropped[FORWARD], "dropped_backward": rt.dropped[BACKWARD]}
                for name, rt in self.runtimes.items()}

    async def _control_loop(self) -> None:
        server = await asyncio.start_server(self._control_client, sock=self.control)
        async with server:
            await server.serve_forever()

    async def _control_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    req = json.loads(line)
                    op = req.get("op")
                    if op == "reload":
                        answer = {"ok": True, "generation": self.reload()}
                    elif op == "stats":
                        answer = {"ok": True, "generation": self.generation, "links": self.stats()}
                    elif op == "ping":
                        answer = {"ok": True, "pid": os.getpid(), "generation": self.generation}
                    else:
                        answer = {"ok": False, "error": f"unknown op {op!r}"}
                except Exception as e:  # noqa: BLE001 - one bad request must not stop the links
                    log.exception("control request failed")
                    answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                writer.write((json.dumps(answer) + "\n").encode())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def _listen(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        raise
    s.listen(512)
    s.setblocking(False)
    return s


def _listen_avoiding(ports: set[int], attempts: int = 20) -> socket.socket:
    """A listener on a new port (port 0) that is not one of ``ports``."""
    held = []
    try:
        for _ in range(attempts):
            s = _listen(0)
            if s.getsockname()[1] not in ports:
                return s
            held.append(s)  # kept open while retrying, so the next bind gets another port
        raise OSError(f"no free port outside {sorted(ports)} after {attempts} attempts")
    finally:
        for s in held:
            s.close()


def serve(data_dir: str) -> int:
    """The process's main: bind, serve until SIGTERM/SIGINT."""
    server = LinkServer(LinkStateFile(data_dir))
    try:
        server.bind()
    except OSError as e:
        log.error("cannot bind the links' ports %s", kv(error=e))
        return 1
    asyncio.run(server.serve())
    return 0
