"""Request-level fault injection on a broker (project addition, in the manner of librdkafka's mock cluster).

librdkafka's mock cluster keeps, per broker and ApiKey, a FIFO of error codes that matching requests pop one at a
time, a per-request round-trip time, and a ``__TRANSPORT`` entry that closes the connection.  Here the same
faults act on a real broker process:

* ``errors``: the next matching requests of an API are answered with the given codes, one code per request, in
  order, the list ``count`` times.  Without a topic-partition the code is the API's error for the whole request: its
  top-level ``error_code`` where the response has one, else every partition's (the network layer's error
  answer, ``KafkaApis.error_response``).  With a topic-partition only that partition's ``error_code`` is set,
  the other partitions of the request are handled normally; for Produce the partition is taken out of the
  request first (never appended), for the read APIs its answer is replaced.  The request is not applied when
  the whole request is refused.  A Produce with ``acks=0`` is refused by closing the connection (as Kafka does).
* ``latency``: the answer to each of the next ``count`` matching requests (all, when no count) leaves
  ``latency_ms`` after the request was read; answers on one connection stay in order, so a delayed answer
  holds back the ones behind it (as in librdkafka's mock and in Kafka).
* ``drop_response``: the ``nth`` matching request is handled but never answered; the connection stays open
  and, since answers are in order, silent: the client times out (a lost response).
* ``close_connection``: at the ``nth`` matching request the connection is closed, the request not handled
  (librdkafka's ``__TRANSPORT``).

A fault with a topic-partition only matches requests naming that partition.  The control channel's APIs
(LeaderAndIsr, StopReplica, UpdateMetadata) take ``errors`` and ``drop_response`` through the same registry,
consulted by ``server/control_request_handler.py`` (``server/control_request_faults.py``): an error answers the
request (or one partition of it) without applying it; a dropped response applies the request and deletes its
request znode instead of answering, which the controller sees after ``request.timeout.ms`` as a lost answer and
resends.

Where faults come from: the znode ``/kafkatier/faults/<brokerId>`` (``zk_schemas/request_faults.json``),
written by ``kafkatier cluster inject-errors`` / ``clock``, the scenario engine and the pytest plugin, watched
by ``server/faults_watcher.py``.  The broker writes what it consumed to ``/kafkatier/fault_state/<brokerId>``
(``zk_schemas/fault_state.json``: the faults znode version applied, the remaining count of each fault, the clock
skew), so tools know when a change is in force and a restarted broker does not replay faults it already
consumed.  A malformed faults znode is logged and skipped (the faults in force stay).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs
from kafka.protocol.api_key import ApiKey

from kafkatier.common.structs import TopicPartition
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.errors import Errors
from kafkatier.server.network import CloseConnection, ConnectionContext, MuteAfterResponse
from kafkatier.zk import codecs

log = get_logger("server.faults")

ERRORS, LATENCY, DROP_RESPONSE, CLOSE_CONNECTION = "errors", "latency", "drop_response", "close_connection"
KINDS = (ERRORS, LATENCY, DROP_RESPONSE, CLOSE_CONNECTION)
CONTROL_APIS = (ApiKeys.LEADER_AND_ISR, ApiKeys.STOP_REPLICA, ApiKeys.UPDATE_METADATA)
MAX_LATENCY_MS = 3_600_000      # librdkafka's mock caps its rtt the same way
MAX_ERRORS = 10_000


class FaultSpecError(ValueError):
    """A fault that cannot be: unknown API or error name, a kind the API does not take, bad numbers."""


# --------------------------------------------------------------------------------------------- names and numbers

def parse_api(value: str | int) -> int:
    """An API key from Kafka's name (``Produce``, ``ListOffsets``, case-insensitive) or its number."""
    text = str(value).strip()
    try:
        key = int(text)
    except ValueError:
        by_name = {k.name.lower(): int(k) for k in ApiKey}
        if text.lower() not in by_name:
            raise FaultSpecError(f"unknown API {text!r} (Kafka's names, e.g. Produce, Fetch, StopReplica, or keys)")
        key = by_name[text.lower()]
    if key not in CONTROL_APIS and key not in codec.REGISTRY:
        raise FaultSpecError(f"unknown API key {key}")
    return key


def parse_error(value: str | int) -> int:
    """An error code from Kafka's name (``NOT_LEADER_OR_FOLLOWER``, case-insensitive) or its number."""
    text = str(value).strip()
    try:
        code = int(text)
    except ValueError:
        try:
            return int(Errors[text.upper()])
        except KeyError:
            raise FaultSpecError(f"unknown error {text!r} (Kafka's names, e.g. NOT_LEADER_OR_FOLLOWER, or codes)") \
                from None
    try:
        return int(Errors(code))
    except ValueError:
        raise FaultSpecError(f"unknown error code {code}") from None


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


# ------------------------------------------------------------------------------------------------------ values

@attrs.frozen(kw_only=True)
class RequestFault:
    """One fault on one API of one broker; ``id`` names it in the faults znode and in the fault state."""

    id: str
    api_key: int
    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    errors: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    latency_ms: float = 0.0
    count: int | None = None          # errors: times the list is repeated (None: once); latency: requests delayed
                                      # (None: until cleared)
    nth: int = 1                      # drop_response / close_connection: the nth matching request
    topic: str | None = None
    partition: int | None = None

    def __attrs_post_init__(self) -> None:
        if (self.topic is None) != (self.partition is None):
            raise FaultSpecError("a topic needs a partition and a partition a topic")
        if self.kind == ERRORS and not self.errors:
            raise FaultSpecError("an errors fault needs at least one error code")
        if self.kind == LATENCY and not 0 < self.latency_ms <= MAX_LATENCY_MS:
            raise FaultSpecError(f"latency must be positive and at most {MAX_LATENCY_MS} ms")
        if len(self.errors) > MAX_ERRORS:
            raise FaultSpecError(f"at most {MAX_ERRORS} error codes (use count to repeat them)")
        if self.partition is not None and self.partition < 0:
            raise FaultSpecError("partition must be 0 or more")
        if self.count is not None and self.kind not in (ERRORS, LATENCY):
            raise FaultSpecError("count applies to errors and latency faults")
        if self.count is not None and self.count < 1:
            raise FaultSpecError("count must be at least 1")
        if self.nth < 1:
            raise FaultSpecError("nth must be at least 1")
        if self.api_key == ApiKeys.API_VERSIONS:
            raise FaultSpecError("ApiVersions is answered by the network layer before any handler: no faults")
        if self.api_key in CONTROL_APIS and self.kind not in (ERRORS, DROP_RESPONSE):
            raise FaultSpecError(f"{codec.api_name(self.api_key)} (control channel) takes errors and "
                                 f"drop_response only")
        if self.topic is not None and self.kind == ERRORS and self.api_key not in PARTITION_LEVEL_APIS:
            raise FaultSpecError(f"partition-level errors are supported for "
                                 f"{', '.join(codec.api_name(k) for k in sorted(PARTITION_LEVEL_APIS))}")

    @property
    def tp(self) -> TopicPartition | None:
        return None if self.topic is None else TopicPartition(self.topic, self.partition)

    @property
    def total(self) -> int | None:
        """How many requests this fault acts on (None: unbounded)."""
        if self.kind == ERRORS:
            return len(self.errors) * (self.count or 1)
        if self.kind == LATENCY:
            return self.count
        return 1

    def to_json(self) -> dict:
        return {"id": self.id, "api_key": self.api_key, "kind": self.kind, "errors": list(self.errors),
                "latency_ms": self.latency_ms, "count": self.count, "nth": self.nth, "topic": self.topic,
                "partition": self.partition}

    @classmethod
    def from_json(cls, doc: Mapping) -> RequestFault:
        return cls(id=doc["id"], api_key=doc["api_key"], kind=doc["kind"], errors=tuple(doc.get("errors") or ()),
                   latency_ms=float(doc.get("latency_ms") or 0), count=doc.get("count"), nth=doc.get("nth") or 1,
                   topic=doc.get("topic"), partition=doc.get("partition"))

    def describe(self) -> str:
        what = {ERRORS: lambda: ",".join(error_name(e) + (f" x{n}" if n > 1 else "")
                                         for e, n in _runs(self.errors)) + (f" x{self.count}" if (self.count or 1) > 1
                                                                             else ""),
                LATENCY: lambda: f"+{self.latency_ms:g}ms" + (f" x{self.count}" if self.count else ""),
                DROP_RESPONSE: lambda: f"drop response #{self.nth}",
                CLOSE_CONNECTION: lambda: f"close connection #{self.nth}"}[self.kind]()
        where = f" {self.topic}-{self.partition}" if self.topic is not None else ""
        return f"{codec.api_name(self.api_key)}{where} {what}"


def _runs(codes: Sequence[int]) -> list[tuple[int, int]]:
    """``[6, 6, 7]`` -> ``[(6, 2), (7, 1)]``."""
    out: list[tuple[int, int]] = []
    for c in codes:
        if out and out[-1][0] == c:
            out[-1] = (c, out[-1][1] + 1)
        else:
            out.append((c, 1))
    return out


@attrs.frozen(kw_only=True)
class ClockSkew:
    """How far the broker's wall clock is off: ``offset_ms`` now, growing by ``drift_ppm`` (µs per s)."""

    offset_ms: float = 0.0
    drift_ppm: float = 0.0

    @property
    def is_zero(self) -> bool:
        return self.offset_ms == 0 and self.drift_ppm == 0

    def to_json(self) -> dict:
        return {"offset_ms": self.offset_ms, "drift_ppm": self.drift_ppm}


@attrs.frozen(kw_only=True)
class FaultSpec:
    """The content of ``/kafkatier/faults/<brokerId>``."""

    faults: tuple[RequestFault, ...] = attrs.field(default=(), converter=tuple)
    clock: ClockSkew = ClockSkew()

    def encode(self) -> bytes:
        return codecs.encode_json({"version": 1, "faults": [f.to_json() for f in self.faults],
                                   "clock": self.clock.to_json()}, "request_faults")

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> FaultSpec:
        doc = codecs.decode_json(data, "request_faults", path or "request_faults")
        try:
            faults = tuple(RequestFault.from_json(f) for f in doc["faults"])
        except FaultSpecError as e:
            raise codecs.MalformedZNodeError(path or "request_faults", str(e)) from None
        ids = [f.id for f in faults]
        if len(set(ids)) != len(ids):
            raise codecs.MalformedZNodeError(path or "request_faults", "duplicate fault ids")
        clock = doc.get("clock") or {}
        return cls(faults=faults, clock=ClockSkew(offset_ms=clock.get("offset_ms", 0),
                                                  drift_ppm=clock.get("drift_ppm", 0)))


@attrs.frozen(kw_only=True)
class FaultState:
    """The content of ``/kafkatier/fault_state/<brokerId>``: what the broker has applied and consumed."""

    spec_version: int
    remaining: Mapping[str, int | None] = attrs.field(factory=dict)
    clock: ClockSkew = ClockSkew()

    def encode(self) -> bytes:
        return codecs.encode_json({"version": 1, "spec_version": self.spec_version,
                                   "remaining": dict(self.remaining), "clock": self.clock.to_json()},
                                  "fault_state")

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> FaultState:
        doc = codecs.decode_json(data, "fault_state", path or "fault_state")
        clock = doc.get("clock") or {}
        return cls(spec_version=doc["spec_version"], remaining=doc["remaining"],
                   clock=ClockSkew(offset_ms=clock.get("offset_ms", 0), drift_ppm=clock.get("drift_ppm", 0)))


@attrs.frozen(kw_only=True)
class FaultAction:
    """What the registry decided for one request."""

    error: int | None = None                                     # the whole request
    partition_errors: Mapping[TopicPartition, int] = attrs.field(factory=dict)
    latency_ms: float = 0.0
    drop_response: bool = False
    close_connection: bool = False

    @property
    def is_none(self) -> bool:
        return (self.error is None and not self.partition_errors and not self.latency_ms
                and not self.drop_response and not self.close_connection)


NO_ACTION = FaultAction()


# ----------------------------------------------------------------------------------------- partition layouts

@attrs.frozen
class PartitionLayout:
    """Where an API's request and response keep their topics and partitions (field names)."""

    req_topics: str
    req_topic: str
    req_partitions: str
    req_index: str
    resp_topics: str
    resp_topic: str
    resp_partitions: str
    resp_index: str
    #: the field naming a topic by id in versions without a name (Fetch v13+, KIP-516); None: never by id
    topic_id: str | None = None

    def request_partitions(self, request, topic_name: Callable[[object], str | None] | None = None
                           ) -> list[TopicPartition]:
        """The partitions ``request`` names; a topic named by id gets the name ``topic_name`` gives it."""
        out = []
        for t in getattr(request, self.req_topics) or []:
            name = getattr(t, self.req_topic, None)
            if not name and self.topic_id is not None and topic_name is not None:
                name = topic_name(getattr(t, self.topic_id, None))
            out.extend(TopicPartition(name, getattr(p, self.req_index)) for p in getattr(t, self.req_partitions) or [])
        return out


PARTITION_LAYOUTS: dict[int, PartitionLayout] = {
    ApiKeys.PRODUCE: PartitionLayout("topic_data", "name", "partition_data", "index",
                             "responses", "name", "partition_responses", "index"),
    ApiKeys.FETCH: PartitionLayout("topics", "topic", "partitions", "partition",
                           "responses", "topic", "partitions", "partition_index", topic_id="topic_id"),
    ApiKeys.LIST_OFFSETS: PartitionLayout("topics", "name", "partitions", "partition_index",
                                  "topics", "name", "partitions", "partition_index"),
    ApiKeys.DELETE_RECORDS: PartitionLayout("topics", "name", "partitions", "partition_index",
                                    "topics", "name", "partitions", "partition_index"),
    ApiKeys.OFFSET_FOR_LEADER_EPOCH: PartitionLayout("topics", "topic", "partitions", "partition",
                                             "topics", "topic", "partitions", "partition"),
}
PARTITION_LEVEL_APIS = frozenset(PARTITION_LAYOUTS) | {ApiKeys.LEADER_AND_ISR, ApiKeys.STOP_REPLICA}


def control_request_partitions(body: Mapping) -> list[TopicPartition]:
    """The partitions a LeaderAndIsr / StopReplica body names (``topic_states``; LeaderAndIsr before v2 keeps
    ``ungrouped_partition_states``)."""
    out = [TopicPartition(t.get("topic_name"), p.get("partition_index"))
           for t in body.get("topic_states") or [] for p in t.get("partition_states") or []]
    out += [TopicPartition(p.get("topic_name"), p.get("partition_index"))
            for p in body.get("ungrouped_partition_states") or []]
    return out


# ----------------------------------------------------------------------------------------------- registry

class FaultRegistry:
    """The faults in force on one broker and what is left of each; thread-safe.

    :meth:`take` is called once per request and pops what applies to it: drop / close when a fault's ``nth``
    matching request is this one (a closed connection consumes nothing else); at most one whole-request error
    (the first errors fault without a partition that has codes left) or else one code per named partition that
    has an errors fault (a refused request cannot also refuse one of its partitions); the largest latency.
    """

    def __init__(self, on_change: Callable[[], None] | None = None):
        self._lock = threading.Lock()
        self._faults: list[RequestFault] = []
        self._used: dict[str, int] = {}       # requests each fault has acted on, or (drop/close) seen
        self._fired: set[str] = set()         # drop / close faults that fired
        self.clock = ClockSkew()
        self.spec_version = -1
        self._on_change = on_change
        self.metrics = {"errors": 0, "partition_errors": 0, "delayed": 0, "dropped": 0, "closed": 0}

    # -- configuration -----------------------------------------------------------------------------------
    def replace(self, spec: FaultSpec, version: int, consumed: Mapping[str, int | None] | None = None) -> None:
        """Put ``spec`` in force.  Faults kept by id keep what they consumed; ``consumed`` (remaining counts from
        the fault state znode, after a restart) restores the others'."""
        with self._lock:
            used = {}
            for f in spec.faults:
                if f.id in self._used:
                    used[f.id] = self._used[f.id]
                elif consumed and f.id in consumed and consumed[f.id] is not None and f.total is not None:
                    used[f.id] = f.total - max(0, int(consumed[f.id]))
                    if used[f.id] >= f.total and f.kind in (DROP_RESPONSE, CLOSE_CONNECTION):
                        self._fired.add(f.id)
                else:
                    used[f.id] = 0
            self._fired &= set(used)
            self._faults = list(spec.faults)
            self._used = used
            self.clock = spec.clock
            self.spec_version = version
        log.info("request faults in force %s", kv(version=version, faults=len(spec.faults),
                                                  clock_offset_ms=spec.clock.offset_ms,
                                                  clock_drift_ppm=spec.clock.drift_ppm))

    def has_faults(self, api_key: int) -> bool:
        faults = self._faults  # a list replaced whole: reading it without the lock is safe
        return any(f.api_key == api_key for f in faults)

    # -- per request -------------------------------------------------------------------------------------
    def take(self, api_key: int, partitions: Callable[[], Iterable[TopicPartition]]) -> FaultAction:
        if not self.has_faults(api_key):
            return NO_ACTION
        named: set[TopicPartition] | None = None
        error: int | None = None
        partition_errors: dict[TopicPartition, int] = {}
        latency = 0.0
        drop = close = False
        changed = False
        with self._lock:
            live = []
            for f in self._faults:
                if f.api_key != api_key or f.id in self._fired:
                    continue
                total, used = f.total, self._used.get(f.id, 0)
                if f.kind in (ERRORS, LATENCY) and total is not None and used >= total:
                    continue
                if f.tp is not None:
                    if named is None:
                        named = set(partitions())
                    if f.tp not in named:
                        continue
                live.append((f, used))
            # 1. Drop / close count every matching request; a closed connection consumes nothing else.
            for f, used in live:
                if f.kind in (DROP_RESPONSE, CLOSE_CONNECTION):
                    self._used[f.id] = used + 1
                    changed = True
                    if used + 1 >= f.nth:
                        self._fired.add(f.id)
                        drop = drop or f.kind == DROP_RESPONSE
                        close = close or f.kind == CLOSE_CONNECTION
            if not close:
                # 2. One whole-request error; 3. else one code per named partition; 4. the largest latency.
                whole = next(((f, used) for f, used in live if f.kind == ERRORS and f.tp is None), None)
                if whole is not None:
                    f, used = whole
                    error = f.errors[used % len(f.errors)]
                    self._used[f.id] = used + 1
                    changed = True
                else:
                    for f, used in live:
                        if f.kind == ERRORS and f.tp not in partition_errors:
                            partition_errors[f.tp] = f.errors[used % len(f.errors)]
                            self._used[f.id] = used + 1
                            changed = True
                for f, used in live:
                    if f.kind == LATENCY:
                        latency = max(latency, f.latency_ms)
                        self._used[f.id] = used + 1
                        changed = changed or f.total is not None
            if error is not None:
                self.metrics["errors"] += 1
            self.metrics["partition_errors"] += len(partition_errors)
            self.metrics["delayed"] += 1 if latency else 0
            self.metrics["dropped"] += 1 if drop else 0
            self.metrics["closed"] += 1 if close else 0
        action = FaultAction(error=error, partition_errors=partition_errors, latency_ms=latency,
                             drop_response=drop, close_connection=close)
        if not action.is_none:
            fields = dict(api=codec.api_name(api_key), error=error_name(error) if error is not None else None,
                          partition_errors=",".join(f"{tp}:{error_name(e)}" for tp, e in partition_errors.items()),
                          latency_ms=latency, drop_response=drop, close_connection=close)
            # Latency alone may act on every request: not worth a line each.
            level = logging.DEBUG if latency and error is None and not (partition_errors or drop or close) \
                else logging.INFO
            log.log(level, "injecting request fault %s", kv(**{k: v for k, v in fields.items() if v}))
        if changed and self._on_change is not None:
            self._on_change()
        return action

    # -- introspection -----------------------------------------------------------------------------------
    def remaining(self) -> dict[str, int | None]:
        """Fault id -> requests it still acts on (None: unbounded)."""
        with self._lock:
            out: dict[str, int | None] = {}
            for f in self._faults:
                total = f.total
                if f.kind in (DROP_RESPONSE, CLOSE_CONNECTION):
                    out[f.id] = 0 if f.id in self._fired else 1
                else:
                    out[f.id] = None if total is None else max(0, total - self._used.get(f.id, 0))
            return out

    def state(self) -> FaultState:
        return FaultState(spec_version=self.spec_version, remaining=self.remaining(), clock=self.clock)

    def describe(self) -> dict:
        remaining = self.remaining()
        with self._lock:
            faults = list(self._faults)
            seen = dict(self._used)
        return {"spec_version": self.spec_version, "clock": self.clock.to_json(), "metrics": dict(self.metrics),
                "faults": [dict(f.to_json(), api=codec.api_name(f.api_key), remaining=remaining.get(f.id),
                                seen=seen.get(f.id, 0), summary=f.describe()) for f in faults]}


# ------------------------------------------------------------------------------------------- the handler

class _DelayLine:
    """One daemon thread running callables at their due time (``time.monotonic``)."""

    def __init__(self, name: str):
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._name = name
        self._thread: threading.Thread | None = None

    def call_at(self, due: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:  # noqa: BLE001
                log.exception("delayed answer failed")


class FaultInjectingHandler:
    """A :class:`~kafkatier.server.network.RequestHandler` that applies the registry's faults around another
    handler (``KafkaApis``); with no fault on an API it only costs a dictionary scan."""

    def __init__(self, handler, registry: FaultRegistry):
        self._handler = handler
        self._registry = registry
        # Fetch v13+ names topics by id: the handler's id <-> name look-ups, when it has them (``KafkaApis``)
        self._topic_name = getattr(handler, "topic_name_for_id", None)
        self._topic_id = getattr(handler, "topic_id_for_name", None)
        self._delays = _DelayLine("kafka-request-fault-delay")

    def supported_versions(self) -> Mapping[int, tuple[int, int]]:
        return self._handler.supported_versions()

    def error_response(self, header, request, code: int):
        hook = getattr(self._handler, "error_response", None)
        return hook(header, request, code) if hook is not None else None

    def handle(self, header, request, context: ConnectionContext) -> Any:
        api_key = header.request_api_key
        if not self._registry.has_faults(api_key):
            return self._handler.handle(header, request, context)
        arrived = time.monotonic()
        layout = PARTITION_LAYOUTS.get(api_key)
        action = self._registry.take(api_key, lambda: layout.request_partitions(request, self._topic_name)
                                     if layout else ())
        if action.is_none:
            return self._handler.handle(header, request, context)
        if action.close_connection:
            return CloseConnection()
        if action.error is not None:
            if not request.expect_response():
                return CloseConnection()  # acks=0: Kafka closes the connection to signal an error
            result = self._whole_error(header, request, action.error)
        elif action.partition_errors:
            result = self._partition_errors(header, request, context, layout, action.partition_errors)
        else:
            result = self._handler.handle(header, request, context)
        if action.drop_response:
            return Future()  # handled, never answered: the connection's later answers wait behind it
        if action.latency_ms:
            return self._delay(result, arrived + action.latency_ms / 1000.0)
        return result

    def _whole_error(self, header, request, code: int):
        response = self.error_response(header, request, code)
        if response is None:
            response = codec.error_response(header, code)
        if response is None:
            log.warning("cannot answer with an injected error; closing the connection %s",
                        kv(api=codec.api_name(header.request_api_key), version=header.request_api_version))
            return CloseConnection()
        return response

    def _partition_errors(self, header, request, context, layout: PartitionLayout,
                          errors: Mapping[TopicPartition, int]):
        if header.request_api_key == ApiKeys.PRODUCE:
            # Refused partitions are not appended: take them out of the request before it is handled.
            for t in getattr(request, layout.req_topics):
                setattr(t, layout.req_partitions,
                        [p for p in getattr(t, layout.req_partitions)
                         if TopicPartition(getattr(t, layout.req_topic), getattr(p, layout.req_index)) not in errors])
            setattr(request, layout.req_topics,
                    [t for t in getattr(request, layout.req_topics) if getattr(t, layout.req_partitions)])
            if not getattr(request, layout.req_topics):
                if not request.expect_response():
                    return CloseConnection()
                response = codec.response_class(ApiKeys.PRODUCE)(version=header.request_api_version)
                setattr(response, layout.resp_topics, [])
                return _with_partition_errors(response, header.request_api_version, layout, errors)
            if not request.expect_response():
                self._handler.handle(header, request, context)
                return CloseConnection()
        result = self._handler.handle(header, request, context)
        v = header.request_api_version

        def merge(response):
            if response is None or isinstance(response, CloseConnection):
                return response
            if isinstance(response, codec.EncodedResponse):  # a purpose-built codec's bytes: edit the object
                response = response.decoded()
            return _with_partition_errors(response, v, layout, errors, self._topic_id)
        return _then(result, merge)

    def _delay(self, result, due: float) -> Future | MuteAfterResponse:
        if isinstance(result, MuteAfterResponse):   # a client quota's throttle: the mute stays outside the delay
            return MuteAfterResponse(self._delay(result.response, due), result.mute_ms)
        out: Future = Future()

        def release(value=None, error: BaseException | None = None):
            def fire():
                if error is not None:
                    out.set_exception(error)
                else:
                    out.set_result(value)
            self._delays.call_at(due, fire)
        if hasattr(result, "add_done_callback"):
            def done(fut):
                try:
                    release(fut.result())
                except Exception as e:  # noqa: BLE001
                    release(error=e)
            result.add_done_callback(done)
        else:
            release(result)
        return out


def _then(result: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to a handler's answer: at once, or when a pending one completes; a client quota's mute
    (``MuteAfterResponse``, around an answer or a pending one) is kept around ``fn``'s result."""
    if isinstance(result, MuteAfterResponse):
        return MuteAfterResponse(_then(result.response, fn), result.mute_ms)
    if hasattr(result, "add_done_callback"):
        out: Future = Future()

        def done(fut: Future) -> None:
            try:
                out.set_result(_then(fut.result(), fn))
            except Exception as e:  # noqa: BLE001 - handed on as the handler's failure
                out.set_exception(e)
        result.add_done_callback(done)
        return out
    return fn(result)


#: What Kafka answers for the offsets and timestamps of a partition it refused ("unknown").
_UNKNOWN = {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1, "high_watermark": -1,
            "last_stable_offset": -1, "offset": -1, "timestamp": -1, "leader_epoch": -1, "low_watermark": -1,
            "end_offset": -1, "preferred_read_replica": -1}


def _with_partition_errors(response, version: int, layout: PartitionLayout, errors: Mapping[TopicPartition, int],
                           topic_id: Callable[[str], object] | None = None):
    """``response`` with each partition in ``errors`` answered by that code (its other fields at their
    defaults), replacing the partition's answer or added to it.  A version naming topics by id finds the
    topic's id with ``topic_id`` (a topic without one is left out)."""
    topics_field = type(response).fields[layout.resp_topics]
    topic_cls = topics_field.array_of.data_class
    by_id = layout.topic_id is not None and not topics_field.array_of.fields[layout.resp_topic].for_version_q(version)
    part_struct = topics_field.array_of.fields[layout.resp_partitions].array_of
    part_cls = part_struct.data_class
    unknown = {f.name: v for f in part_struct.fields.values() if f.for_version_q(version)
               for name, v in _UNKNOWN.items() if f.name == name}
    topics = getattr(response, layout.resp_topics)
    if topics is None:
        topics = []
        setattr(response, layout.resp_topics, topics)
    for tp, code in errors.items():
        field, value = layout.resp_topic, tp.topic
        if by_id:
            field, value = layout.topic_id, topic_id(tp.topic) if topic_id is not None else None
            if value is None:
                continue
        entry = part_cls(version=version, **unknown, **{layout.resp_index: tp.partition, "error_code": code})
        topic = next((t for t in topics if getattr(t, field) == value), None)
        if topic is None:
            topic = topic_cls(version=version, **{field: value, layout.resp_partitions: []})
            topics.append(topic)
        parts = [p for p in getattr(topic, layout.resp_partitions) or []
                 if getattr(p, layout.resp_index) != tp.partition]
        parts.append(entry)
        setattr(topic, layout.resp_partitions, parts)
    return response


__all__ = ["RequestFault", "ClockSkew", "FaultSpec", "FaultState", "FaultAction", "FaultRegistry",
           "FaultInjectingHandler", "FaultSpecError", "control_request_partitions", "PartitionLayout",
           "parse_api", "parse_error", "error_name", "KINDS", "ERRORS", "LATENCY", "DROP_RESPONSE",
           "CLOSE_CONNECTION", "CONTROL_APIS", "PARTITION_LEVEL_APIS"]
