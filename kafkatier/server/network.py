"""The broker's Kafka-protocol TCP server (Kafka's ``SocketServer`` + request channel, in one module).

Design
------
One I/O thread (``kafka-network-thread-<port>``) runs a ``selectors`` loop that accepts connections and does
all socket reads and writes; a small pool of handler threads (``kafka-request-handler-<n>``) decodes frames and
calls the request handler.  Completions from other threads (purgatory, replication) reach the I/O thread
through a queue plus a wake-up socketpair, except an answer that is next in line on a plaintext connection with
nothing queued before it: the completing thread sends it itself (``_send_now``, under the connection's lock), and
the I/O thread hears of it only when the socket did not take it whole, reading must resume or later answers wait.  We chose this over asyncio because the handlers are blocking code
(ZooKeeper calls, file I/O) and their asynchronous completions come from plain threads: a selector loop gives
the same single-I/O-thread model with less machinery, and with 2 cores one I/O thread plus a few mostly-idle
handler threads is the right size.

Data path: a connection reads through a 64 KiB receive buffer, so one ``recv`` takes a size prefix and the frame
after it, or several small frames (each copied out whole).  A larger frame's body is received straight into one
``bytearray`` (``recv_into``) that starts at 64 KiB and grows eightfold up to the frame's size as its bytes
arrive (memory follows what was sent, within a factor of 8, not what a header claims), and is decoded from a
memoryview, so the only copy of a record payload on the way in is the decoder slicing it out as ``bytes``.
A response is encoded once into a frame (kafka-python's thread-local buffer, then one copy out); a ready-encoded
Produce or Fetch answer on a plaintext connection is sent as its pieces, the record data as it was read from the
log, with one ``sendmsg`` (no copy into a frame); a Fetch answer's large reads are ``FileRecords`` ranges of the
segment files, sent with ``sendfile`` between gather-writes of the pieces around them (the records never enter
the broker; a TLS connection gets them read into the frame).  Writes go out from memoryviews, partial sends
included.

Inline dispatch (off unless ``inline_max_bytes`` is set, the broker's ``kafkatier.network.inline.max.bytes``): a
Produce or Fetch frame of at most that size with nothing queued before it on its connection is handled on the I/O
thread itself, and its answer, when ready at once (acks=1, an ISR of one, a fetch with data), is sent from there:
one thread per request instead of a hand-off to a handler thread and back (each hand-off a futex wake-up and a GIL
switch).  Larger frames, other APIs and anything queued behind a request in a handler still go to the pool.  It
costs the network layer a third of the CPU per small request, but on a contended machine it halved 16 KiB produce
throughput (one busy thread gets a smaller share of the CPU than two; docs/benchmarks.md), hence off by default.

Per connection:

- requests are handed to the handler in arrival order, the next only after ``handle()`` returned for the
  previous one (its Future may still be pending), so e.g. two Produce requests on one connection are appended
  in order;
- ``handle()`` returns a response, ``None`` (send nothing: Produce with acks=0), or a Future-like object (has
  ``add_done_callback``; its result is a response or ``None``) completed later from any thread;
- every request takes a slot in a FIFO; responses are written strictly in slot order, so asynchronous
  completion never reorders a connection's responses (Kafka's guarantee);
- reading stops while ``max_in_flight_per_connection`` requests are unanswered or unsent (Kafka itself uses 1;
  this class's default, 5, matches the clients' ``max.in.flight.requests.per.connection``; a broker passes
  ``kafkatier.network.max.in.flight.requests.per.connection``, 64) and resumes once half of them are answered
  (one wake-up of the I/O thread per few requests for a client that keeps the limit busy);
- reading also stops while the requests read and not yet handed to the handler hold ``max_read_ahead_bytes``
  (16 MiB) or more, so a deep window of large requests (64 Produce requests of 1 MiB) costs a bounded amount of
  memory per connection; it resumes with the next answer completed after the handler took one of them.

Errors: a bad frame size (negative, too small, or above ``socket.request.max.bytes`` -- checked before the body
is allocated; before authentication the cap is ``unauthenticated_max_request_bytes``, Kafka's
``sasl.server.max.receive.size``), an undecodable header or body, or an unknown API key closes that connection
only, with a log line.  An unsupported version is answered
with UNSUPPORTED_VERSION when the response can carry it (ApiVersions: always, as an ApiVersionsResponse v0 that
still lists our APIs); otherwise the connection is closed.  A handler exception is answered with
UNKNOWN_SERVER_ERROR the same way.  The handler may supply ``error_response(header, request, code)`` for APIs
without a top-level error code.  A handler may answer ``CloseAfterResponse(response)``: the response is sent,
then the connection closed (failed authentication); ``CloseConnection()``: nothing is sent, the connection is closed
when the answers before it have been handed to the socket.

Failure policy: whatever goes wrong with one connection or one request -- an exception while reading, writing or
dispatching, a ``MemoryError`` allocating a frame -- closes that connection only, with a log line.  A handler
thread that dies is replaced.  If the I/O loop itself fails the listener cannot serve anyone: ``on_fatal`` (given
by the broker) is called, and the broker shuts down and deregisters rather than stay registered serving nothing.

TLS (``SSL`` / ``SASL_SSL`` listeners, given an ``ssl_context`` made by ``server/ssl_transport.py``): an accepted
socket is wrapped without handshaking; the handshake runs non-blocking in the I/O thread, driven by
``SSLWantReadError`` / ``SSLWantWriteError``, before the connection reads any frame.  Then the principal is set from
the client certificate (``ssl_principal``) and reads and writes go through the ``SSLSocket``.  ``select`` does not
see bytes OpenSSL has already decrypted: when reading resumes (after the in-flight limit) on a connection whose
``pending()`` is non-zero, the loop reads it without waiting for the socket.  A failed handshake (a plaintext
client, an untrusted or expired certificate) closes that connection with one line, as Kafka's "Failed authentication
with /ip (SSL handshake failed)".

Queued request memory (Kafka's ``queued.max.request.bytes``, its ``SimpleMemoryPool`` in non-strict mode): when
set, a frame's claimed size is taken from a pool of that many bytes once its size prefix is read, and given back when
the request has been handled (or its connection closed).  While the pool is exhausted (nothing left, the last
frame may overdraw it), connections that have read a size prefix stop reading until memory is given back -- the
muting of Kafka's selector under memory pressure.  The pool must be at least ``socket.request.max.bytes`` (Kafka
refuses a smaller one), so one frame of any allowed size can always be read.

Throttles (a client quota's, KIP-219): a handler answers ``MuteAfterResponse(response, mute_ms)``; the answer is sent
at once and the connection then reads nothing for ``mute_ms``.  Requests already read ahead are not handled while
the mute lasts (``_drain`` holds them, ``_handle_held`` resumes them), as Kafka, which reads one request at a time,
would not have read them.  When ``response`` is a Future (an acks=all Produce waiting for its followers) the mute
starts at once, when the throttle is charged, and has no end yet (``muted_until`` is infinite): nothing behind it is
handled or read while the answer is pending, as in Kafka, where the channel is muted from the request until its
answer is sent; once the Future completes (or fails: its error answer) the mute ends ``mute_ms`` later.  A
connection with no throttle does none of this work.

Connection limits (Kafka's ``max.connections`` and ``max.connections.per.ip``): a connection over either limit is
closed as soon as it is accepted, with a log line (Kafka stops accepting while at ``max.connections`` instead).
"""
from __future__ import annotations

import collections
import errno
import itertools
import logging
import math
import queue
import selectors
import socket
import ssl
import struct
import threading
import time
from typing import Any, Callable, Mapping, Protocol

import attrs
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_message import ApiMessage

from kafkatier.common.file_records import FileRecords
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.errors import Errors
from kafkatier.server.api_versions import ApiVersionsTable
from kafkatier.server.ssl_transport import WOULD_BLOCK

log = get_logger("network")

#: A frame's body buffer starts at most this large and grows eightfold as its bytes arrive.
_FIRST_BODY_CHUNK = 64 * 1024
#: Kafka's ``socket.request.max.bytes`` default.
DEFAULT_MAX_REQUEST_BYTES = 104857600
#: api key + api version + correlation id: the smallest possible request.
_MIN_FRAME = 8
_SIZE = struct.Struct(">i")
#: Produce and Fetch frames up to this size are handled on the I/O thread (see the module's "Inline dispatch"; off).
DEFAULT_INLINE_MAX_BYTES = 0
_INLINE_APIS = frozenset({ApiKeys.PRODUCE, ApiKeys.FETCH})
#: At most this many buffers are handed to one ``sendmsg`` (below the kernel's IOV_MAX of 1024).
_MAX_GATHER = 64
#: A connection's receive buffer: size prefixes and whole small frames are read through it.
_READ_BUFFER = _FIRST_BODY_CHUNK
#: Reading pauses while a connection's requests read and not yet handled hold this many bytes (see the module doc).
DEFAULT_MAX_READ_AHEAD_BYTES = 16 * 1024 * 1024


@attrs.frozen
class CloseAfterResponse:
    """A handler's answer meaning: send ``response``, then close the connection."""
    response: Any


@attrs.frozen
class MuteAfterResponse:
    """A handler's answer meaning: send ``response``, then read nothing more from the connection for
    ``mute_ms`` (a client quota's throttle: Kafka 2.0+ mutes the channel, KIP-219).  ``response`` may be a Future
    (an answer that waits for followers): the connection then handles none of its later requests from now on, and
    ``mute_ms`` counts from the moment the Future completes (see the module's "Throttles")."""
    response: Any
    mute_ms: int


@attrs.frozen
class Authenticated:
    """A handler's answer meaning: send ``response``; the connection is authenticated as ``principal`` from its
    next request on (the SASL handshake's result, handed to the network layer that owns the connection)."""
    response: Any
    principal: str


@attrs.frozen
class RawSaslToken:
    """The answer to a raw SASL token (SaslHandshake v0: after the handshake the client sends its SASL tokens as
    bare size-prefixed frames, without SaslAuthenticate): ``token`` is sent back the same way (None: nothing), then
    the connection is authenticated as ``principal`` (when given) or closed (``close``)."""
    token: bytes | None
    principal: str | None = None
    close: bool = False


#: ``ConnectionContext.session`` key: ``handler(context, token) -> RawSaslToken`` (or a future of one) takes the
#: connection's next frame as a raw SASL token (set by a SaslHandshake v0 handler, see server/sasl.py).
RAW_SASL_HANDLER = "raw_sasl_handler"


@attrs.frozen
class CloseConnection:
    """A handler's answer meaning: send nothing and close the connection when this request's turn comes (an
    error on a Produce with acks=0; an injected connection failure, server/fault_injection.py)."""


@attrs.frozen
class ConnectionContext:
    """Who is on the other end of a connection, as seen by a request handler."""
    connection_id: str
    client_address: tuple[str, int]
    listener_name: str = "PLAINTEXT"
    client_id: str | None = None
    principal: str | None = None
    #: True once a handler answered :class:`Authenticated` on this connection (SASL).
    authenticated: bool = False
    #: Per-connection scratch space for handlers (e.g. SASL state), shared by every context of the connection.
    session: dict = attrs.field(factory=dict, eq=False, repr=False)


class RequestHandler(Protocol):
    """What :class:`SocketServer` dispatches to.

    Optionally also ``error_response(header, request, error_code) -> response | None`` for error answers to
    APIs whose response has no top-level ``error_code``."""

    def supported_versions(self) -> Mapping[int, tuple[int, int]]:
        """``{api_key: (min, max)}`` for every API this handler serves; exactly what gets advertised."""

    def handle(self, header: RequestHeader, request: ApiMessage, context: ConnectionContext) -> Any:
        """Return a response, ``None`` (no response), or a Future-like completed later with one of those."""


class _Slot:
    __slots__ = ("done", "data", "close", "close_after")

    def __init__(self) -> None:
        self.done = False
        self.data: bytearray | None = None
        self.close = False
        self.close_after = False  # send data, then close


class MemoryPool:
    """Kafka's ``SimpleMemoryPool`` (non-strict) as accounting only: ``try_allocate`` succeeds while anything is
    left, so the last allocation may overdraw; buffers themselves still grow with the bytes that arrive."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._available = capacity
        self._lock = threading.Lock()

    @property
    def available(self) -> int:
        return self._available

    def try_allocate(self, size: int) -> bool:
        with self._lock:
            if self._available <= 0:
                return False
            self._available -= size
            return True

    def release(self, size: int) -> None:
        with self._lock:
            self._available += size


class _Connection:
    __slots__ = ("sock", "context", "lock", "frames", "slots", "dispatching", "closing", "closed", "out",
                  "events", "rbuf", "rpos", "rend", "body", "body_read", "body_size", "close_when_flushed",
                  "handshake_events", "awaiting_memory", "muted_until", "mutes_pending", "mute_after_pending", "full",
                  "queued_bytes")

    def __init__(self, sock: socket.socket, context: ConnectionContext):
        self.sock = sock
        self.context = context
        self.lock = threading.Lock()
        self.frames: collections.deque[tuple[bytearray, _Slot]] = collections.deque()  # read, not dispatched
        self.queued_bytes = 0  # the bytes of ``frames`` (changed under ``lock``)
        self.slots: collections.deque[_Slot] = collections.deque()  # dispatched or queued, not yet collected
        self.dispatching = False
        self.closing = False  # a fatal error was seen: read no more, close when its slot comes up
        self.closed = False
        self.out: collections.deque[memoryview] = collections.deque()  # I/O thread only
        self.events = 0
        #: Bytes received and not yet taken as a frame: ``rbuf[rpos:rend]`` (one ``recv`` may bring several small
        #: frames, each then copied out whole; a larger frame's start is moved into its own ``body``).
        self.rbuf = bytearray(_READ_BUFFER)
        self.rpos = 0
        self.rend = 0
        self.body: bytearray | None = None
        self.body_size = 0  # the frame's size, as its header claims; ``body`` grows towards it as bytes arrive
        self.body_read = 0
        self.close_when_flushed = False
        #: While a TLS handshake is under way: the selector events it waits for (0: no handshake pending).
        self.handshake_events = 0
        #: A size prefix was read (``body_size``) and the memory pool had nothing left: reading waits for memory.
        self.awaiting_memory = False
        self.muted_until = 0.0   # monotonic time until which a client quota's throttle keeps reads off
        #: Throttled answers still pending (``MuteAfterResponse`` of a Future): ``muted_until`` is ``math.inf`` while
        #: any is, and the latest end another answer asked for meanwhile waits in ``mute_after_pending`` (both
        #: changed under ``lock``; see the module's "Throttles").
        self.mutes_pending = 0
        self.mute_after_pending = 0.0
        #: Reading is paused on the in-flight limit (set by the I/O thread under ``lock``): a completing thread that
        #: sends its answer itself wakes the I/O thread only once the queue is down to half the limit.
        self.full = False


class _HandlerPool:
    """Fixed pool of named daemon threads running submitted callables."""

    def __init__(self, size: int, name_prefix: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stopping = False
        self._threads = [threading.Thread(target=self._run, name=f"{name_prefix}-{i}", daemon=True)
                         for i in range(size)]
        for t in self._threads:
            t.start()
        self.restarted = 0

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self._queue.put((fn, args))

    def _run(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                fn, args = item
                try:
                    fn(*args)
                except Exception:  # a bug in dispatch code must not kill the thread
                    log.exception("request handler task failed")
        except BaseException:
            # Something no task should raise (SystemExit, KeyboardInterrupt...): replace this thread.
            if not self._stopping:
                me = threading.current_thread()
                log.error("request handler thread died; starting a replacement %s", kv(thread=me.name))
                t = threading.Thread(target=self._run, name=me.name, daemon=True)
                t.start()   # before it is published: shutdown() joins every listed thread
                self._threads = [t if x is me else x for x in self._threads]
                self.restarted += 1
            raise

    def shutdown(self, timeout: float) -> None:
        self._stopping = True
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


class SocketServer:
    """Kafka-protocol server on ``host:port`` (port 0 picks a free one) dispatching to ``handler``.

    ``supported`` overrides ``handler.supported_versions()`` as the advertised table; either is read at
    :meth:`start` and again by :meth:`refresh_api_versions`.  If the table lacks ApiVersions (18) the server
    answers ApiVersions itself; otherwise the handler does (unsupported ApiVersions versions are always answered
    here)."""

    def __init__(self, host: str, port: int, handler: RequestHandler, *,
                 supported: Mapping[int, tuple[int, int]] | None = None,
                 num_handler_threads: int = 8,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 max_in_flight_per_connection: int = 5,
                 listener_name: str = "PLAINTEXT",
                 principal: str | None = "User:ANONYMOUS",
                 request_gate: Callable[[ConnectionContext, RequestHeader, ApiMessage], bool] | None = None,
                 unauthenticated_max_request_bytes: int | None = None,
                 max_connections: int | None = None,
                 max_connections_per_ip: int | None = None,
                 on_fatal: Callable[[BaseException], None] | None = None,
                 any_port_if_taken: bool = False,
                 ssl_context: ssl.SSLContext | None = None,
                 ssl_principal: Callable[[ssl.SSLSocket], str] | None = None,
                 memory_pool: MemoryPool | None = None,
                 inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES,
                 max_read_ahead_bytes: int = DEFAULT_MAX_READ_AHEAD_BYTES):
        """``memory_pool``: the broker's ``queued.max.request.bytes`` pool, shared by its listeners (None:
        unbounded, Kafka's default -1).  ``inline_max_bytes``: Produce and Fetch frames up to this size are
        handled on the I/O thread when nothing is queued before them on their connection (0, the default: never)."""
        if num_handler_threads < 1 or max_in_flight_per_connection < 1 or max_request_bytes < _MIN_FRAME:
            raise ValueError("num_handler_threads, max_in_flight_per_connection and max_request_bytes must be "
                             "positive")
        if memory_pool is not None and memory_pool.capacity < max_request_bytes:
            raise ValueError(f"queued.max.request.bytes ({memory_pool.capacity}) must be larger or equal to "
                             f"socket.request.max.bytes ({max_request_bytes})")
        self._host, self._requested_port = host, port
        #: ``port`` is a preference: when another process holds it, bind any free port (a restarted broker keeps
        #: its port when it can; whoever started it reads the port it got, see ``cluster/manager.py``).
        self._any_port_if_taken = any_port_if_taken
        self._handler = handler
        self._supported_override = supported
        self._num_threads = num_handler_threads
        self._max_request_bytes = max_request_bytes
        self._max_in_flight = max_in_flight_per_connection
        self._max_read_ahead_bytes = max_read_ahead_bytes
        self._listener_name = listener_name
        self._principal = principal
        #: Optional ``gate(context, header, request) -> bool`` consulted before dispatch; False closes the
        #: connection (used to require SASL authentication, see kafkatier/server/sasl.py).
        self._request_gate = request_gate
        #: Frame cap while a gated connection has no principal yet (Kafka's ``sasl.server.max.receive.size``).
        self._unauthenticated_max = unauthenticated_max_request_bytes
        self._max_connections = max_connections
        self._max_connections_per_ip = max_connections_per_ip
        self._per_ip: collections.Counter[str] = collections.Counter()
        #: Called (from the I/O thread) when the I/O loop fails for good; the broker shuts down.
        self._on_fatal = on_fatal
        #: TLS listener: the server context and how a handshaken connection's principal is found.
        self._ssl_context = ssl_context
        self._ssl_principal = ssl_principal
        self._pending_reads: collections.deque[_Connection] = collections.deque()  # TLS bytes select cannot see
        self._memory_pool = memory_pool
        self._awaiting_memory: collections.deque[_Connection] = collections.deque()  # I/O thread only
        self._throttled: list[_Connection] = []   # muted by a client quota's throttle; I/O thread only
        self._table: ApiVersionsTable | None = None
        self._handler_serves_api_versions = False
        self._listener: socket.socket | None = None
        self._port = 0
        self._selector: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        # A wake-up byte is in the socketpair and not yet drained: completions queued meanwhile need no other.
        self._wake_pending = False
        self._io_thread: threading.Thread | None = None
        self._io_ident: int | None = None
        self._inline_max_bytes = inline_max_bytes
        self._pool: _HandlerPool | None = None
        self._ready: collections.deque[_Connection] = collections.deque()
        self._conns: dict[int, _Connection] = {}
        self._conn_seq = 0
        self._stopping = threading.Event()
        self._metrics_lock = threading.Lock()
        self._api_metrics: dict[int, list[int]] = {}
        self._conn_metrics = {"accepted": 0, "closed": 0, "malformed": 0, "refused": 0, "failed": 0,
                              "failed_authentication": 0}

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> "SocketServer":
        """Bind, listen and start the I/O and handler threads.  Returns ``self``."""
        if self._listener is not None:
            raise RuntimeError("SocketServer already started")
        self.refresh_api_versions()
        try:
            listener = self._bind(self._requested_port)
        except OSError as e:
            if not (self._any_port_if_taken and self._requested_port and e.errno == errno.EADDRINUSE):
                raise
            log.warning("port taken, listening on any free port %s", kv(host=self._host, port=self._requested_port))
            listener = self._bind(0)
        self._listener = listener
        self._port = listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, "listener")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wakeup")
        self._pool = _HandlerPool(self._num_threads, "kafka-request-handler")
        self._io_thread = threading.Thread(target=self._run, name=f"kafka-network-thread-{self.port}",
                                           daemon=True)
        self._io_thread.start()
        log.info("listening %s", kv(host=self._host, port=self.port, listener=self._listener_name,
                                    apis=len(self._table.supported)))
        return self

    def _bind(self, port: int) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self._host, port))
            listener.listen(128)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        return listener

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection and stop the threads.  Idempotent."""
        if self._listener is None or self._stopping.is_set():
            return
        self._stopping.set()
        self._wakeup()
        if self._io_thread is not None:
            self._io_thread.join(timeout)
        if self._pool is not None:
            self._pool.shutdown(timeout)
        log.info("stopped %s", kv(port=self.port))

    def __enter__(self) -> "SocketServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def refresh_api_versions(self) -> None:
        """Re-read the advertised table (after handlers were registered or removed)."""
        supported = self._supported_override
        if supported is None:
            supported = self._handler.supported_versions()
        table = ApiVersionsTable(supported)
        self._table = table
        self._handler_serves_api_versions = ApiKeys.API_VERSIONS in supported

    # -- introspection ---------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("SocketServer not started")
        return self._port

    @property
    def listener_name(self) -> str:
        return self._listener_name

    @property
    def host(self) -> str:
        return self._host

    @property
    def api_versions(self) -> ApiVersionsTable:
        assert self._table is not None
        return self._table

    @property
    def metrics(self) -> dict[str, dict[str, int]]:
        """Per API name (``Produce``...): ``requests``, ``errors`` (answered with a top-level error code, or
        failed), ``bytes_in`` and ``bytes_out`` (whole frames)."""
        with self._metrics_lock:
            return {codec.api_name(k): dict(zip(("requests", "errors", "bytes_in", "bytes_out"), v))
                    for k, v in sorted(self._api_metrics.items())}

    @property
    def connection_metrics(self) -> dict[str, int]:
        """``active``, ``accepted``, ``closed``, ``malformed`` (connections closed for a bad frame),
        ``failed_authentication`` (TLS handshakes that failed: Kafka's ``failed-authentication-total``) and
        ``throttled`` (connections muted by a client quota's throttle now, a pending one's included)."""
        with self._metrics_lock:
            return dict(self._conn_metrics, active=len(self._conns), throttled=len(self._throttled))

    def _count(self, api_key: int, requests: int = 0, errors: int = 0, bytes_in: int = 0,
               bytes_out: int = 0) -> None:
        with self._metrics_lock:
            m = self._api_metrics.setdefault(api_key, [0, 0, 0, 0])
            m[0] += requests
            m[1] += errors
            m[2] += bytes_in
            m[3] += bytes_out

    # -- I/O thread ------------------------------------------------------------------------------------------

    def _wakeup(self) -> None:
        # Called after queueing work for the I/O thread. The flag is cleared by the I/O thread once it has drained
        # the socketpair, before it serves the queued items, so skipping the send while it is set loses nothing.
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            if self._wake_w is not None:
                self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending, or we are shut down

    def _run(self) -> None:
        assert self._selector is not None
        self._io_ident = threading.get_ident()
        try:
            while not self._stopping.is_set():
                timeout = 0 if self._pending_reads or self._ready else 1.0
                if self._throttled:
                    timeout = min(timeout, max(0.0, min(c.muted_until for c in self._throttled) - time.monotonic()))
                for key, mask in self._selector.select(timeout=timeout):
                    if key.data == "listener":
                        self._accept()
                    elif key.data == "wakeup":
                        self._drain_wakeup()
                    else:
                        conn: _Connection = key.data
                        try:
                            if conn.handshake_events:
                                self._handshake(conn)
                                continue
                            if mask & selectors.EVENT_READ and not conn.closed:
                                self._read(conn)
                            if mask & selectors.EVENT_WRITE and not conn.closed:
                                self._write(conn)
                        except Exception as e:  # MemoryError included: this connection only
                            self._fail(conn, e)
                while self._ready:
                    conn = self._ready.popleft()
                    try:
                        self._collect(conn)
                    except Exception as e:
                        self._fail(conn, e)
                if self._awaiting_memory and self._memory_pool is not None and self._memory_pool.available > 0:
                    self._resume_after_memory()
                if self._throttled:
                    self._unmute_due()
                while self._pending_reads:
                    conn = self._pending_reads.popleft()
                    try:
                        if not conn.closed and conn.events & selectors.EVENT_READ:
                            self._read(conn)
                    except Exception as e:
                        self._fail(conn, e)
        except BaseException as e:
            log.exception("network thread failed; the listener is down %s", kv(port=self.port))
            if self._on_fatal is not None and not self._stopping.is_set():
                try:
                    self._on_fatal(e)
                except Exception:  # noqa: BLE001
                    log.exception("network failure handler failed")
            if not isinstance(e, Exception):
                raise
        finally:
            for conn in list(self._conns.values()):
                self._close(conn, "shutdown")
            self._selector.close()
            for s in (self._listener, self._wake_r, self._wake_w):
                if s is not None:
                    s.close()

    def _unmute_due(self) -> None:
        """Connections whose client quota throttle time is over read again."""
        now = time.monotonic()
        due = [c for c in self._throttled if c.muted_until <= now or c.closed]
        if not due:
            return
        self._throttled = [c for c in self._throttled if c not in due]
        for conn in due:
            if not conn.closed:
                self._update_interest(conn)

    def _fail(self, conn: _Connection, error: BaseException) -> None:
        with self._metrics_lock:
            self._conn_metrics["failed"] += 1
        log.error("closing connection after an error %s", kv(connection=conn.context.connection_id,
                                                             error=type(error).__name__),
                  exc_info=not isinstance(error, MemoryError))
        if conn.body is not None:  # drop a partly received frame before anything else
            conn.body = None
            self._release(conn.body_size)
        self._close(conn, f"error: {type(error).__name__}")

    def _drain_wakeup(self) -> None:
        try:
            while self._wake_r.recv(4096):  # type: ignore[union-attr]
                pass
        except (BlockingIOError, OSError):
            pass
        # Cleared after draining (a byte sent while draining may be drained too: clearing first would leave the
        # flag set with nothing pending); whatever was queued before this point is served in this round.
        self._wake_pending = False

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warning("accept failed %s", kv(error=e))
                return
            ip = addr[0]
            if (self._max_connections is not None and len(self._conns) >= self._max_connections) or \
                    (self._max_connections_per_ip is not None and self._per_ip[ip] >= self._max_connections_per_ip):
                with self._metrics_lock:
                    self._conn_metrics["refused"] += 1
                log.warning("closing connection: too many connections %s",
                            kv(ip=ip, from_ip=self._per_ip[ip], total=len(self._conns),
                               max_connections=self._max_connections,
                               max_connections_per_ip=self._max_connections_per_ip))
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            local = sock.getsockname()
            self._conn_seq += 1
            conn_id = f"{local[0]}:{local[1]}-{addr[0]}:{addr[1]}-{self._conn_seq}"
            conn = _Connection(sock, ConnectionContext(connection_id=conn_id, client_address=(addr[0], addr[1]),
                                                       listener_name=self._listener_name,
                                                       principal=self._principal))
            self._conns[id(conn)] = conn
            self._per_ip[ip] += 1
            with self._metrics_lock:
                self._conn_metrics["accepted"] += 1
            log.debug("accepted %s", kv(connection=conn_id))
            if self._ssl_context is not None:
                try:
                    conn.sock = self._ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError) as e:
                    self._close(conn, f"TLS wrap failed: {e}")
                    continue
                conn.handshake_events = selectors.EVENT_READ
                self._handshake(conn)
            else:
                self._update_interest(conn)

    def _handshake(self, conn: _Connection) -> None:
        """One step of a non-blocking TLS handshake; when it completes, the connection's principal is set and it
        starts reading frames."""
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._set_handshake_interest(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._set_handshake_interest(conn, selectors.EVENT_WRITE)
            return
        except (OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e) or type(e).__name__
            # A peer that connects and leaves without a word (a port probe) is not worth a warning.
            quiet = isinstance(e, (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError))
            log.log(logging.DEBUG if quiet else logging.WARNING,
                    "Failed authentication with /%s (SSL handshake failed) %s", conn.context.client_address[0],
                    kv(connection=conn.context.connection_id, listener=self._listener_name,
                       reason=str(reason).replace(" ", "_")))
            with self._metrics_lock:
                self._conn_metrics["failed_authentication"] += 1
            self._close(conn, "TLS handshake failed")
            return
        principal = conn.context.principal
        if self._ssl_principal is not None:
            try:
                principal = self._ssl_principal(sock)
            except Exception as e:  # noqa: BLE001 - e.g. no principal mapping rule matches the DN
                log.warning("Failed authentication with /%s (%s) %s", conn.context.client_address[0], e,
                            kv(connection=conn.context.connection_id, listener=self._listener_name))
                with self._metrics_lock:
                    self._conn_metrics["failed_authentication"] += 1
                self._close(conn, "no principal")
                return
        conn.context = attrs.evolve(conn.context, principal=principal)
        log.debug("TLS handshake done %s", kv(connection=conn.context.connection_id, principal=principal,
                                               version=sock.version()))
        self._set_handshake_interest(conn, 0)
        self._update_interest(conn)
        if sock.pending() and conn.events & selectors.EVENT_READ:
            self._pending_reads.append(conn)

    def _set_handshake_interest(self, conn: _Connection, events: int) -> None:
        assert self._selector is not None
        conn.handshake_events = events
        if events == 0:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, conn)
        elif events != conn.events:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _read(self, conn: _Connection) -> None:
        while not conn.closed and conn.events & selectors.EVENT_READ:
            try:
                if conn.body is not None:
                    if conn.body_read == len(conn.body):
                        # full, the frame is not: grow it eightfold, so memory follows the bytes that arrived
                        # and not the size a frame header claims (10 connections claiming 99 MB cost nothing
                        # until sent); eightfold, not double: each growth step of a 1 MiB frame cost ~0.1 ms
                        try:
                            conn.body.extend(bytes(min(conn.body_size - len(conn.body), 7 * len(conn.body))))
                        except MemoryError:
                            log.error("closing connection: no memory for the request %s",
                                      kv(connection=conn.context.connection_id, size=conn.body_size))
                            self._close(conn, "out of memory", malformed=True)
                            return
                    n = conn.sock.recv_into(memoryview(conn.body)[conn.body_read:])
                    if n == 0:
                        self._close(conn, "closed by peer")
                        return
                    conn.body_read += n
                    if conn.body_read == conn.body_size:
                        frame, conn.body = conn.body, None
                        self._enqueue(conn, frame)
                    continue
                if conn.rend - conn.rpos >= 4:
                    (size,) = _SIZE.unpack_from(conn.rbuf, conn.rpos)
                    conn.rpos += 4
                    if not self._frame_size_ok(conn, size):
                        return
                    conn.body_size = size
                    if self._memory_pool is not None and not self._memory_pool.try_allocate(size):
                        conn.awaiting_memory = True   # muted until memory is given back (``_resume_after_memory``)
                        self._awaiting_memory.append(conn)
                        self._update_interest(conn)
                        return
                    if not self._start_body(conn):
                        return
                    continue
                # fewer than 4 bytes left: keep them at the start and receive after them
                left = conn.rend - conn.rpos
                if left:
                    conn.rbuf[:left] = conn.rbuf[conn.rpos:conn.rend]
                conn.rpos, conn.rend = 0, left
                n = conn.sock.recv_into(memoryview(conn.rbuf)[left:])
                if n == 0:
                    self._close(conn, "closed by peer")
                    return
                conn.rend += n
            except WOULD_BLOCK:
                return
            except OSError as e:
                self._close(conn, f"read failed: {e}")
                return

    def _frame_size_ok(self, conn: _Connection, size: int) -> bool:
        """Whether a frame of ``size`` may be read; if not, the connection is closed."""
        limit = self._max_request_bytes
        if self._unauthenticated_max is not None and self._request_gate is not None and \
                not conn.context.authenticated:
            limit = min(limit, self._unauthenticated_max)
        if size < _MIN_FRAME and size >= 0 and RAW_SASL_HANDLER in conn.context.session:
            return True   # a bare SASL token (SaslHandshake v0) may be shorter than any request
        if size < _MIN_FRAME or size > limit:
            log.warning("closing connection: invalid receive %s",
                        kv(connection=conn.context.connection_id, size=size, max_request_bytes=limit))
            self._close(conn, "invalid frame size", malformed=True)
            return False
        return True

    def _start_body(self, conn: _Connection) -> bool:
        """A frame whose size was read (and, with a pool, allocated): taken whole from the receive buffer when all of
        it is there, else a buffer for it, starting with the bytes already received."""
        take = min(conn.body_size, conn.rend - conn.rpos)
        if take == conn.body_size:
            frame = conn.rbuf[conn.rpos:conn.rpos + take]
            conn.rpos += take
            self._enqueue(conn, frame)
            return not conn.closed
        try:
            conn.body = bytearray(min(conn.body_size, _FIRST_BODY_CHUNK))
        except MemoryError:
            log.error("closing connection: no memory for the request %s",
                      kv(connection=conn.context.connection_id, size=conn.body_size))
            self._release(conn.body_size)
            self._close(conn, "out of memory", malformed=True)
            return False
        conn.body[:take] = memoryview(conn.rbuf)[conn.rpos:conn.rpos + take]
        conn.rpos += take
        conn.body_read = take
        return True

    def _release(self, size: int) -> None:
        if self._memory_pool is not None:
            self._memory_pool.release(size)
            if self._awaiting_memory:
                self._wakeup()

    def _resume_after_memory(self) -> None:
        """Memory was given back: connections muted on it, oldest first, read on while the pool has any left."""
        assert self._memory_pool is not None
        while self._awaiting_memory:
            conn = self._awaiting_memory[0]
            if conn.closed:
                self._awaiting_memory.popleft()
                continue
            if not self._memory_pool.try_allocate(conn.body_size):
                return
            self._awaiting_memory.popleft()
            conn.awaiting_memory = False
            if self._start_body(conn):
                self._update_interest(conn)

    def _enqueue(self, conn: _Connection, frame: bytearray) -> None:
        slot = _Slot()
        with conn.lock:
            if conn.closing:
                self._release(len(frame))
                return
            conn.slots.append(slot)
            inline = not conn.dispatching and not conn.muted_until and \
                RAW_SASL_HANDLER not in conn.context.session and \
                _MIN_FRAME <= len(frame) <= self._inline_max_bytes and ((frame[0] << 8) | frame[1]) in _INLINE_APIS
            if not inline:
                conn.frames.append((frame, slot))
                conn.queued_bytes += len(frame)
                start = not conn.dispatching
                conn.dispatching = True
        if inline:
            # A small Produce or Fetch with nothing queued before it on this connection: handled here, on the I/O
            # thread, and (when its answer is ready) sent from here too -- no hand-off to a handler thread and back.
            self._dispatch(conn, frame, slot)
        elif start:
            assert self._pool is not None
            self._pool.submit(self._drain, conn)
        self._update_interest(conn)

    def _collect(self, conn: _Connection) -> None:
        """Move completed responses, in slot order, to the connection's output."""
        if conn.closed:
            return
        close = False
        with conn.lock:
            while conn.slots and conn.slots[0].done:
                slot = conn.slots.popleft()
                if slot.close:
                    close = True
                    break
                if type(slot.data) is list:
                    conn.out.extend(map(_view, slot.data))
                elif slot.data is not None:
                    conn.out.append(memoryview(slot.data))
                if slot.close_after:
                    conn.closing = True
                    conn.close_when_flushed = True
                    conn.slots.clear()
                    conn.frames.clear()
                    conn.queued_bytes = 0
                    break
        if close:
            self._close(conn, "request error")
            return
        if conn.out or conn.close_when_flushed:
            self._write(conn)
        else:
            self._update_interest(conn)

    def _write(self, conn: _Connection) -> None:
        gather = not isinstance(conn.sock, ssl.SSLSocket)
        while conn.out:
            try:
                n, offered = _send_some(conn.sock, conn.out, gather)
            except WOULD_BLOCK:
                break
            except OSError as e:
                self._close(conn, f"write failed: {e}")
                return
            _consume_sent(conn.out, n)
            if n < offered:   # the socket is full
                break
        if not conn.out and conn.close_when_flushed:
            self._close(conn, "closed after response")
            return
        self._update_interest(conn)

    def _update_interest(self, conn: _Connection) -> None:
        if conn.closed or conn.handshake_events:
            return
        events = 0
        muted = False
        if conn.muted_until:
            now = time.monotonic()
            if conn.muted_until <= now:
                with conn.lock:   # a handler thread may be setting a pending mute (``_mute_pending``) right now
                    if conn.muted_until <= now:
                        conn.muted_until = 0.0
                if not conn.muted_until:
                    self._handle_held(conn)
            if conn.muted_until:
                muted = True
                if conn not in self._throttled:
                    self._throttled.append(conn)   # read and handle on once the throttle is over (``_unmute_due``)
        if not muted and not conn.closing and not conn.awaiting_memory and self._below_in_flight_limit(conn):
            events |= selectors.EVENT_READ
        if conn.out:
            events |= selectors.EVENT_WRITE
        if events == conn.events:
            return
        assert self._selector is not None
        if conn.events == 0:
            self._selector.register(conn.sock, events, conn)
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        resumed = events & ~conn.events & selectors.EVENT_READ
        conn.events = events
        if resumed and (conn.rend > conn.rpos or isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending()):
            self._pending_reads.append(conn)   # bytes already received (or decrypted) that select cannot see

    def _handle_held(self, conn: _Connection) -> None:
        """A throttle is over: the requests ``_drain`` held back while it lasted are handled now.  Here, where every
        ended mute is seen (``_unmute_due``'s or one already over when the I/O thread first meets it), so none is
        left waiting for the client's next request."""
        with conn.lock:
            start = bool(conn.frames) and not conn.dispatching and not conn.closing
            conn.dispatching = conn.dispatching or start
        if start:
            assert self._pool is not None
            self._pool.submit(self._drain, conn)

    def _below_in_flight_limit(self, conn: _Connection) -> bool:
        """Whether the connection may read another request; at the limit, ``conn.full`` is set under the lock the
        completing threads take, so the completion that brings the queue down to half the limit sees it and
        wakes this thread (``_send_now``)."""
        if len(conn.slots) + len(conn.out) < self._max_in_flight and conn.queued_bytes < self._max_read_ahead_bytes:
            conn.full = False
            return True
        with conn.lock:
            full = conn.full = len(conn.slots) + len(conn.out) >= self._max_in_flight or \
                conn.queued_bytes >= self._max_read_ahead_bytes
        return not full

    def _close(self, conn: _Connection, reason: str, malformed: bool = False) -> None:
        if conn.closed:
            return
        conn.closed = True
        with conn.lock:
            conn.closing = True
            self._release(sum(len(frame) for frame, _ in conn.frames))
            conn.frames.clear()
            conn.queued_bytes = 0
        if conn.body is not None:   # a frame partly read holds its size from the pool
            self._release(conn.body_size)
            conn.body = None
        if conn.events and self._selector is not None:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.events = 0
        conn.out.clear()
        try:
            conn.sock.close()
        except OSError:
            pass
        if self._conns.pop(id(conn), None) is not None:
            ip = conn.context.client_address[0]
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]
        with self._metrics_lock:
            self._conn_metrics["closed"] += 1
            if malformed:
                self._conn_metrics["malformed"] += 1
        log.debug("closed %s", kv(connection=conn.context.connection_id, reason=reason.replace(" ", "_")))

    # -- handler threads -------------------------------------------------------------------------------------

    def _drain(self, conn: _Connection) -> None:
        """Dispatch a connection's queued frames one at a time, in order."""
        while True:
            with conn.lock:
                if conn.closing or not conn.frames:
                    self._release(sum(len(frame) for frame, _ in conn.frames))
                    conn.frames.clear()
                    conn.queued_bytes = 0
                    conn.dispatching = False
                    return
                if conn.muted_until and conn.muted_until > time.monotonic():
                    # A client quota's throttle: Kafka reads nothing from a muted channel, so the requests read
                    # ahead of the mute wait for its end (``_unmute_due`` drains them); else a pipelining client
                    # would pass its quota by its read-ahead.
                    conn.dispatching = False
                    return
                frame, slot = conn.frames.popleft()
                conn.queued_bytes -= len(frame)
            self._dispatch(conn, frame, slot)

    def _dispatch(self, conn: _Connection, frame: bytearray, slot: _Slot) -> None:
        """Handle one frame (on a handler thread, or inline on the I/O thread); a failure closes the connection."""
        try:
            self._process(conn, frame, slot)
        except Exception:
            log.exception("dispatch failed %s", kv(connection=conn.context.connection_id))
            self._complete(conn, slot, close=True)
        finally:
            self._release(len(frame))   # the request was handled: its bytes go back to the pool

    def _process(self, conn: _Connection, frame: bytearray, slot: _Slot) -> None:
        frame_bytes = len(frame) + 4
        raw_sasl = conn.context.session.pop(RAW_SASL_HANDLER, None)
        if raw_sasl is not None:   # SaslHandshake v0: this frame is a bare SASL token, not a request
            try:
                result = raw_sasl(conn.context, bytes(frame))
            except Exception:
                log.exception("raw SASL token failed %s", kv(connection=conn.context.connection_id))
                self._complete(conn, slot, close=True)
                return
            if hasattr(result, "add_done_callback"):
                result.add_done_callback(lambda fut: self._deliver_raw_sasl(conn, slot, fut.result()))
            else:
                self._deliver_raw_sasl(conn, slot, result)
            return
        try:
            header, request = codec.decode_request(frame)
        except codec.UnsupportedVersionError as e:
            header = e.header
            assert header is not None
            self._count(header.request_api_key, requests=1, bytes_in=frame_bytes)
            self._reject_version(conn, slot, header, None)
            return
        except codec.FrameError as e:
            if e.header is not None:
                self._count(e.header.request_api_key, requests=1, errors=1, bytes_in=frame_bytes)
            with self._metrics_lock:
                self._conn_metrics["malformed"] += 1
            log.warning("closing connection: malformed request %s",
                        kv(connection=conn.context.connection_id, error=str(e).replace(" ", "_"),
                           api=codec.api_name(e.header.request_api_key) if e.header else None,
                           client_id=e.header.client_id if e.header else None))
            self._complete(conn, slot, close=True)
            return
        api_key, version = header.request_api_key, header.request_api_version
        self._count(api_key, requests=1, bytes_in=frame_bytes)
        if header.client_id != conn.context.client_id:
            conn.context = attrs.evolve(conn.context, client_id=header.client_id)
        context = conn.context
        table = self._table
        assert table is not None
        if not table.is_supported(api_key, version):
            self._reject_version(conn, slot, header, request)
            return
        gate = self._request_gate
        if gate is not None and not gate(context, header, request):
            log.warning("closing connection: request not allowed before authentication %s",
                        kv(api=codec.api_name(api_key), connection=context.connection_id, client_id=header.client_id))
            self._complete(conn, slot, close=True)
            return
        if api_key == ApiKeys.API_VERSIONS and not self._handler_serves_api_versions:
            self._finish(conn, slot, header, table.response(version))
            return
        try:
            result = self._handler.handle(header, request, context)
        except Exception:
            log.exception("handler failed %s", kv(api=codec.api_name(api_key), version=version,
                                                  connection=context.connection_id, client_id=header.client_id))
            self._answer_error(conn, slot, header, request, Errors.UNKNOWN_SERVER_ERROR)
            return
        if type(result) is codec.EncodedResponse:   # the Produce / Fetch hot path: an answer ready to frame
            self._finish(conn, slot, header, result)
        elif hasattr(result, "add_done_callback"):
            result.add_done_callback(lambda fut: self._on_done(conn, slot, header, request, fut))
        else:
            self._deliver(conn, slot, header, request, result)

    def _on_done(self, conn: _Connection, slot: _Slot, header: RequestHeader, request: ApiMessage,
                 fut: Any) -> None:
        try:
            result = fut.result()
        except Exception as e:
            log.error("asynchronous request failed %s", kv(api=codec.api_name(header.request_api_key),
                                                           connection=conn.context.connection_id, error=repr(e)))
            self._answer_error(conn, slot, header, request, Errors.UNKNOWN_SERVER_ERROR)
            return
        self._deliver(conn, slot, header, request, result)

    def _deliver(self, conn: _Connection, slot: _Slot, header: RequestHeader, request: ApiMessage,
                 result: Any) -> None:
        if isinstance(result, Authenticated):
            conn.context = attrs.evolve(conn.context, principal=result.principal, authenticated=True)
            result = result.response
        if isinstance(result, CloseAfterResponse):
            self._finish(conn, slot, header, result.response, close_after=True)
            return
        if isinstance(result, MuteAfterResponse):
            if result.mute_ms > 0:
                if hasattr(result.response, "add_done_callback"):
                    self._mute_pending(conn, slot, header, request, result.response, result.mute_ms)
                    return
                self._mute(conn, time.monotonic() + result.mute_ms / 1000)
            result = result.response
            if hasattr(result, "add_done_callback"):   # a Future with no throttle after all
                result.add_done_callback(lambda fut: self._on_done(conn, slot, header, request, fut))
                return
        if isinstance(result, CloseConnection):
            self._complete(conn, slot, close_after=True)  # the answers before it are flushed first
            return
        if result is None:
            if request.expect_response():
                log.warning("handler returned no response for a request that expects one %s",
                            kv(api=codec.api_name(header.request_api_key), connection=conn.context.connection_id))
            self._complete(conn, slot)
        else:
            self._finish(conn, slot, header, result)

    def _mute(self, conn: _Connection, until: float) -> None:
        """Mute the connection until ``until`` (monotonic), or later if it already is; while a throttled answer is
        pending, from that answer's end on."""
        with conn.lock:
            if conn.mutes_pending:
                conn.mute_after_pending = max(conn.mute_after_pending, until)
            else:
                conn.muted_until = max(conn.muted_until, until)

    def _mute_pending(self, conn: _Connection, slot: _Slot, header: RequestHeader, request: ApiMessage,
                      response: Any, mute_ms: int) -> None:
        """A throttle charged on an answer still to come (``response`` is a Future): the connection handles none of
        its later requests and reads nothing from now on (``muted_until`` is infinite: ``_drain``, ``_enqueue`` and
        ``_update_interest`` hold them), and once the answer is there it is muted for ``mute_ms`` from then, as a
        throttle on an answer given at once (Kafka mutes a channel from each request until its answer is sent,
        then for the throttle).  A failed Future is answered with an error; the mute is the same."""
        with conn.lock:
            if not conn.mutes_pending:
                conn.mute_after_pending = conn.muted_until   # a mute set meanwhile by an earlier answer is kept
            conn.mutes_pending += 1
            conn.muted_until = math.inf
        self._ready.append(conn)   # the I/O thread stops reading it now (``_collect`` -> ``_update_interest``)
        if threading.get_ident() != self._io_ident:
            self._wakeup()

        def done(fut: Any) -> None:
            until = time.monotonic() + mute_ms / 1000
            with conn.lock:
                conn.mutes_pending -= 1
                until = max(until, conn.mute_after_pending)
                if conn.mutes_pending:
                    conn.mute_after_pending = until
                else:
                    conn.muted_until, conn.mute_after_pending = until, 0.0
            # the answer's completion wakes the I/O thread (the connection is muted, so ``_send_now`` leaves it to
            # the I/O thread), which re-arms its timeout for the mute's end
            self._on_done(conn, slot, header, request, fut)
        response.add_done_callback(done)

    def _deliver_raw_sasl(self, conn: _Connection, slot: _Slot, result: RawSaslToken) -> None:
        if result.principal is not None:
            conn.context = attrs.evolve(conn.context, principal=result.principal, authenticated=True)
        data = None if result.token is None else bytearray(_SIZE.pack(len(result.token)) + result.token)
        self._complete(conn, slot, data, close=result.close and data is None, close_after=result.close and
                       data is not None)

    def _reject_version(self, conn: _Connection, slot: _Slot, header: RequestHeader,
                        request: ApiMessage | None) -> None:
        api_key = header.request_api_key
        # ApiVersions at a newer version is routine client negotiation; anything else is worth a line.
        level = logging.DEBUG if api_key == ApiKeys.API_VERSIONS else logging.INFO
        log.log(level, "unsupported version %s", kv(api=codec.api_name(api_key), version=header.request_api_version,
                                              connection=conn.context.connection_id, client_id=header.client_id))
        if api_key == ApiKeys.API_VERSIONS:
            assert self._table is not None
            self._finish(conn, slot, header, self._table.unsupported_version_response(), version=0)
        else:
            self._answer_error(conn, slot, header, request, Errors.UNSUPPORTED_VERSION)

    def _answer_error(self, conn: _Connection, slot: _Slot, header: RequestHeader,
                      request: ApiMessage | None, error: int) -> None:
        response = None
        hook = getattr(self._handler, "error_response", None)
        if hook is not None and request is not None:
            try:
                response = hook(header, request, int(error))
            except Exception:
                log.exception("error_response hook failed %s", kv(api=codec.api_name(header.request_api_key)))
        if response is None:
            response = codec.error_response(header, error)
        if response is None:
            log.warning("closing connection: cannot answer %s with an error %s",
                        codec.api_name(header.request_api_key),
                        kv(version=header.request_api_version, error=Errors(error).name,
                           connection=conn.context.connection_id))
            self._count(header.request_api_key, errors=1)
            self._complete(conn, slot, close=True)
            return
        self._finish(conn, slot, header, response)

    def _finish(self, conn: _Connection, slot: _Slot, header: RequestHeader, response: Any,
                version: int | None = None, close_after: bool = False) -> None:
        api_key = header.request_api_key
        try:
            if not isinstance(response, (ApiMessage, codec.EncodedResponse)) or response.API_KEY != api_key:
                raise TypeError(f"handler returned {type(response).__name__} for {codec.api_name(api_key)}")
            if type(response) is codec.EncodedResponse and not isinstance(conn.sock, ssl.SSLSocket):
                # record data goes out as it was read: no copy into one frame (one ``sendmsg`` sends the pieces)
                data = codec.response_buffers(header, response, version)
                if len(data) == 1:
                    data = data[0]
            else:
                data = codec.encode_response(header, response, version)
        except Exception:
            log.exception("cannot encode response %s", kv(api=codec.api_name(api_key),
                                                         version=header.request_api_version,
                                                         connection=conn.context.connection_id))
            self._count(api_key, errors=1)
            self._complete(conn, slot, close=True)
            return
        self._count(api_key, errors=1 if codec.top_level_error(response) else 0,
                    bytes_out=sum(map(len, data)) if type(data) is list else len(data))
        self._complete(conn, slot, data, close_after=close_after)

    def _complete(self, conn: _Connection, slot: _Slot, data: bytes | bytearray | list | None = None,
                  close: bool = False, close_after: bool = False) -> None:
        with conn.lock:
            slot.data = data
            slot.close = close
            slot.close_after = close_after
            slot.done = True
            if close or close_after:
                conn.closing = True
            elif data is not None and self._send_now(conn, slot, data):
                return
        self._ready.append(conn)
        if threading.get_ident() != self._io_ident:
            self._wakeup()   # the I/O thread itself collects ``_ready`` before it waits again

    def _send_now(self, conn: _Connection, slot: _Slot, data: bytearray) -> bool:
        """Send a completed answer from the completing thread, under ``conn.lock``, when it is next in line and
        nothing is queued before it: no hand-off to the I/O thread and no wake-up (plaintext sockets, not muted).
        True when the I/O thread need not be told: all of it was sent, no later answer is waiting, and reading is
        not paused on the in-flight limit or more than half the limit is still queued (a later completion wakes it).  A partial send leaves the rest queued first in ``conn.out`` (the I/O thread writes it, and the
        answers after it, once woken).

        Ordering: ``_collect`` moves answers to ``conn.out`` under the same lock and takes them off only once
        written, so an empty ``conn.out`` with this slot at the head means every earlier answer is on the wire.
        Closing: ``_close`` marks the connection closed, then takes this lock before it closes the socket, so a
        send here never meets a closed (or reused) descriptor."""
        if conn.closing or conn.closed or conn.out or conn.muted_until or not conn.slots or conn.slots[0] is not slot \
                or isinstance(conn.sock, ssl.SSLSocket):
            return False
        conn.slots.popleft()
        if type(data) is list:
            # an answer's pieces: gather-writes, and sendfile of the record data that are ranges of segment files
            # (the same writes as the I/O thread's, ``_send_some``)
            conn.out.extend(map(_view, data))
            try:
                while conn.out:
                    n, offered = _send_some(conn.sock, conn.out, True)
                    _consume_sent(conn.out, n)
                    if n < offered:   # the socket is full: the I/O thread writes the rest
                        return False
            except OSError:   # a full socket; a failed or short write is met again by the I/O thread's write
                return False
        else:
            try:
                n = conn.sock.send(data)
            except WOULD_BLOCK:
                n = 0
            except OSError:
                n = 0   # the I/O thread meets the error on its own write and closes the connection
            if n < len(data):
                conn.out.append(memoryview(data)[n:])
                return False
        if conn.slots and conn.slots[0].done:
            return False   # answers completed earlier wait behind this one: the I/O thread collects them
        if conn.full:
            # Reading paused on the in-flight limit: resumed once half the limit is left queued, so a client that
            # keeps the limit busy costs one wake-up of the I/O thread per few requests, not one per request
            # (each wake-up is a socket write and a GIL hand-off), and the handler still has requests queued
            # while the I/O thread reads the next ones.
            if len(conn.slots) > self._max_in_flight // 2:
                return True
            conn.full = False
            return False
        return True


class FileRecordsTruncated(OSError):
    """A ``FileRecords`` range whose file ended before the range did (the log was truncated after the read): the
    frame announced bytes that cannot be sent, so the connection is closed (Kafka's ``FileRecords.writeTo``)."""


def _view(buf: Any) -> Any:
    """What ``conn.out`` holds for a piece of an answer: a memoryview, or the ``FileRecords`` range itself."""
    return buf if type(buf) is FileRecords else memoryview(buf)


def _send_some(sock: socket.socket, out: collections.deque, gather: bool) -> tuple[int, int]:
    """One system call's worth of ``out`` from its head: ``sendfile`` of a ``FileRecords`` range, or one gather-write
    of the buffers before the next range (``send`` of the head when ``gather`` is off: TLS).  (bytes sent, bytes
    offered): fewer sent than offered means the socket is full."""
    head = out[0]
    if type(head) is FileRecords:
        n = head.send_to(sock.fileno())
        if n == 0 and len(head):
            raise FileRecordsTruncated(f"{head!r} is past the end of its file")
        return n, len(head)
    if gather and len(out) > 1:   # several buffers, one system call
        bufs = []
        for buf in itertools.islice(out, _MAX_GATHER):
            if type(buf) is FileRecords:
                break
            bufs.append(buf)
        return sock.sendmsg(bufs), sum(map(len, bufs))
    return sock.send(head), len(head)


def _consume_sent(out: collections.deque, n: int) -> bool:
    """Take ``n`` sent bytes off the front of ``out``; False when something is left (the socket took no more: what
    is left of a buffer sent in part stays first)."""
    while out:
        buf = out[0]
        if n < len(buf):
            if n:
                out[0] = buf[n:]
            return False
        n -= len(buf)
        out.popleft()
    return True


__all__ = ["SocketServer", "MemoryPool", "MuteAfterResponse", "RawSaslToken", "RAW_SASL_HANDLER",
           "ConnectionContext", "CloseAfterResponse", "CloseConnection", "RequestHandler", "DEFAULT_MAX_REQUEST_BYTES"]
