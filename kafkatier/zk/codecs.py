"""Znode payload codecs: Kafka 3.x ZooKeeper-mode formats (docs/zookeeper.md) plus the project's KIP-950 and
control-channel payloads.

Each value type has ``encode() -> bytes`` and a classmethod ``decode(data, path=None) -> value``.  Every decode
validates the parsed payload against its JSON Schema in ``zk_schemas/``; whatever is wrong with the bytes (None,
bad UTF-8, bad JSON, schema violation, unsupported version) surfaces as one error type,
:class:`MalformedZNodeError`, which callers log and skip (see :func:`try_decode`).  Encoding also validates, so
a bug in a writer fails loudly (``ValueError``) instead of writing a payload other tools cannot read.

JSON is written compactly with keys in the order shown in docs/zookeeper.md; readers must compare parsed JSON.
"""
from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import re
import uuid
from typing import Any, Callable, ClassVar, Iterable, Mapping, TypeVar

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.zk import paths
from kafkatier.zk.limits import check_znode_size
from kafkatier.zk.schemas import match_path, schema_errors

log = get_logger("zk.codecs")

T = TypeVar("T")


class MalformedZNodeError(ValueError):
    """A znode payload that cannot be decoded.  ``what`` is the znode path when known, else the payload kind."""

    def __init__(self, what: str, reason: str):
        super().__init__(f"malformed znode {what}: {reason}")
        self.what = what
        self.reason = reason


# ------------------------------------------------------------------------------------------------ generic helpers

def _what(path: str | None, kind: str) -> str:
    return path or kind


def _text(data: bytes | None, what: str) -> str:
    if data is None or len(data) == 0:
        raise MalformedZNodeError(what, "no data")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedZNodeError(what, f"expected bytes, got {type(data).__name__}")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedZNodeError(what, f"invalid UTF-8: {e}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


# One decoder for every payload: ``json.loads`` with a keyword builds a new decoder (and its scanner) per call,
# which cost as much as the parse of a partition state.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _parse_json(text: str) -> Any:
    """``json.loads(text)`` refusing NaN and Infinity; a payload without surrounding whitespace (every payload
    written here) skips the decoder's two whitespace scans."""
    try:
        value, end = _DECODER.raw_decode(text)
        if end == len(text):
            return value
    except ValueError:
        pass
    return _DECODER.decode(text)  # whitespace around the value, or the error with its position


def _check(schema: str, value: Any, what: str) -> None:
    problems = schema_errors(schema, value)
    if problems:
        raise MalformedZNodeError(what, f"does not match {schema}.json: " + "; ".join(problems))


@functools.lru_cache(maxsize=4096)
def _cached_payload_problems(schema: str, text: str) -> tuple[str, ...]:
    return tuple(schema_errors(schema, _parse_json(text)))


# Texts longer than this are validated without being remembered: they do not repeat (a control request's part,
# a large request or answer) and 4,096 of them kept up to 4 GB alive.
_REMEMBERED_TEXT_MAX = 65536


def _payload_problems(schema: str, text: str) -> tuple[str, ...]:
    """Schema violations of the JSON text ``text``, remembered per (schema, text) for short texts.  Validation
    dominates reading and writing many znodes, and payloads repeat: a cluster's 20,000 partition states are a
    few dozen distinct texts (leader, ISR, epochs), so each is validated once.  Only texts that parse reach this
    function."""
    if len(text) > _REMEMBERED_TEXT_MAX:
        return tuple(schema_errors(schema, _parse_json(text)))
    return _cached_payload_problems(schema, text)


def decode_json(data: bytes | None, schema: str, what: str) -> Any:
    """Parse ``data`` as UTF-8 JSON and validate it against ``schema``; the single decode path for JSON znodes."""
    text = _text(data, what)
    try:
        value = _parse_json(text)
    except ValueError as e:
        raise MalformedZNodeError(what, f"invalid JSON: {e}") from None
    fast = _FAST_VALID.get(schema)
    problems = () if fast is not None and fast(value) else _payload_problems(schema, text)
    if problems:
        raise MalformedZNodeError(what, f"does not match {schema}.json: " + "; ".join(problems))
    return value


_PARTITION_KEY_RE = re.compile(r"(0|[1-9][0-9]{0,9})")
_TOPIC_ID_RE = re.compile(r"[A-Za-z0-9_-]{22}")


def _replica_map_valid(m: Any) -> bool:
    """``{"<partition>": [broker ids, unique]}`` as topic_assignment.json's maps require."""
    if type(m) is not dict:
        return False
    seen: set[tuple] = set()
    for k, v in m.items():
        if not _PARTITION_KEY_RE.fullmatch(k) or type(v) is not list:
            return False
        t = tuple(v)
        if t in seen:
            continue
        if len(set(t)) != len(t) or any(type(r) is not int or not 0 <= r <= 2147483647 for r in t):
            return False
        seen.add(t)
    return True


def _topic_assignment_valid(js: Any) -> bool:
    """A sufficient check of topic_assignment.json (True only for payloads the schema accepts; False: ask
    jsonschema, which also words the error).  jsonschema walks every partition of a topic's map, whose text is
    unique per topic, so the per-text cache does not help: 1,000 partitions cost ~70 ms; this check ~1 ms."""
    return (type(js) is dict and type(js.get("version")) is int and js["version"] in (1, 2, 3)
            and "partitions" in js and _replica_map_valid(js["partitions"])
            and all(_replica_map_valid(js[k]) for k in ("adding_replicas", "removing_replicas") if k in js)
            and ("topic_id" not in js or (type(js["topic_id"]) is str and _TOPIC_ID_RE.fullmatch(js["topic_id"])
                                          is not None)))


_INT32_MAX = 2147483647


def _broker_ids_valid(isr: Any) -> bool:
    """A list of distinct broker ids (0..2^31-1), as partition_state.json's ``isr`` requires."""
    if type(isr) is not list:
        return False
    for r in isr:
        if type(r) is not int or not 0 <= r <= _INT32_MAX:
            return False
    return len(set(isr)) == len(isr)


def _partition_state_valid(js: Any) -> bool:
    """A sufficient check of partition_state.json (True only for payloads the schema accepts; False: ask
    jsonschema).  Read in bulk (every state znode at a controller failover): one dict walk instead of a
    jsonschema call per distinct text."""
    if type(js) is not dict:
        return False
    v, leader, epoch, c_epoch = js.get("version"), js.get("leader"), js.get("leader_epoch"), js.get("controller_epoch")
    recovery = js.get("leader_recovery_state", 0)
    return (type(v) is int and v == 1 and type(leader) is int and -2 <= leader <= _INT32_MAX
            and type(epoch) is int and -2 <= epoch <= _INT32_MAX
            and type(c_epoch) is int and -1 <= c_epoch <= _INT32_MAX
            and type(recovery) is int and recovery in (0, 1) and _broker_ids_valid(js.get("isr")))


def _in_range(v: Any, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


_INT16, _INT32, _INT64 = (-(1 << 15), (1 << 15) - 1), (-(1 << 31), (1 << 31) - 1), (-(1 << 63), (1 << 63) - 1)
_CONTROL_REQUEST_KEYS = frozenset({"version", "api_key", "api_name", "api_version", "controller_id",
                                   "controller_epoch", "broker_epoch", "body"})
_CONTROL_RESPONSE_KEYS = frozenset({"version", "api_key", "api_version", "broker_id", "broker_epoch", "error_code",
                                    "body"})


def _control_request_valid(js: Any) -> bool:
    """A sufficient check of control_request.json for an envelope that carries its body (jsonschema would parse
    a body of up to a megabyte again only to check that it is an object); envelopes with ``body_parts`` are
    small and go to jsonschema."""
    return (type(js) is dict and js.keys() == _CONTROL_REQUEST_KEYS and _in_range(js["version"], 1, 1)
            and _in_range(js["api_key"], 0, 32767) and _in_range(js["api_version"], 0, 32767)
            and type(js["api_name"]) is str and js["api_name"] != "" and _in_range(js["controller_id"], 0, _INT32[1])
            and _in_range(js["controller_epoch"], *_INT32) and _in_range(js["broker_epoch"], *_INT64)
            and type(js["body"]) is dict)


def _control_response_valid(js: Any) -> bool:
    """As :func:`_control_request_valid`, for control_response.json."""
    return (type(js) is dict and js.keys() == _CONTROL_RESPONSE_KEYS and _in_range(js["version"], 1, 1)
            and _in_range(js["api_key"], 0, 32767) and _in_range(js["api_version"], 0, 32767)
            and _in_range(js["broker_id"], 0, _INT32[1]) and _in_range(js["broker_epoch"], *_INT64)
            and _in_range(js["error_code"], *_INT16) and type(js["body"]) is dict)


# Schemas with a fast sufficient check of a parsed payload, tried before jsonschema when decoding.
_FAST_VALID: dict[str, Callable[[Any], bool]] = {"topic_assignment": _topic_assignment_valid,
                                                 "partition_state": _partition_state_valid,
                                                 "control_request": _control_request_valid,
                                                 "control_response": _control_response_valid}


def dump_body(body: Mapping[str, Any]) -> str:
    """A control body as the compact JSON text the channel stores (in the envelope or, compressed, in parts):
    serialised once per request, whichever way it is stored."""
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"refusing to encode an invalid control body: {e}") from None


def _encode_envelope(head: dict[str, Any], body: Mapping[str, Any], parts: BodyParts | None, schema: str,
                     body_text: str | None) -> bytes:
    """A control envelope (``body`` last): the head is validated with an empty body and the body's text (an
    object by construction) spliced in, so a large body is neither serialised twice nor parsed back."""
    if parts is not None:
        return encode_json({**head, "body_parts": parts.to_json()}, schema)
    if not isinstance(body, Mapping):
        raise ValueError(f"refusing to encode an invalid {schema} payload: body is a {type(body).__name__}")
    empty = encode_json({**head, "body": {}}, schema)
    data = empty[:-3] + (dump_body(body) if body_text is None else body_text).encode("utf-8") + b"}"
    check_znode_size(data, schema)
    return data


def encode_json(value: Mapping[str, Any], schema: str) -> bytes:
    """Serialise ``value`` compactly as UTF-8 JSON after validating the text against ``schema``."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"refusing to encode an invalid {schema} payload: {e}") from None
    data = text.encode("utf-8")
    check_znode_size(data, schema)  # first: a payload too large is split or refused whatever its content
    problems = _payload_problems(schema, text)
    if problems:
        raise ValueError(f"refusing to encode an invalid {schema} payload: " + "; ".join(problems))
    return data


_INT_RE = re.compile(r"-?[0-9]+")


def encode_int(n: int) -> bytes:
    """A plain decimal integer as UTF-8 bytes (``/controller_epoch``, ``tiered_epoch``)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"expected an int, got {n!r}")
    return str(n).encode("ascii")


def decode_int(data: bytes | None, path: str | None = None, schema: str = "controller_epoch") -> int:
    """Decode a plain UTF-8 decimal integer znode and check it against ``schema`` (default: controller epoch)."""
    what = _what(path, schema)
    text = _text(data, what)
    if not _INT_RE.fullmatch(text):
        raise MalformedZNodeError(what, f"expected a decimal integer, got {text[:40]!r}")
    value = int(text)
    _check(schema, value, what)
    return value


def encode_controller_epoch(epoch: int) -> bytes:
    return encode_int(epoch)


def decode_controller_epoch(data: bytes | None, path: str | None = paths.CONTROLLER_EPOCH) -> int:
    return decode_int(data, path, "controller_epoch")


def encode_tiered_epoch(epoch: int) -> bytes:
    if epoch < 0:
        raise ValueError(f"tiered epoch must be >= 0, got {epoch}")
    return encode_int(epoch)


def decode_tiered_epoch(data: bytes | None, path: str | None = None) -> int:
    return decode_int(data, path, "tiered_epoch")


def _int_keys(m: Mapping[str, list[int]]) -> dict[int, tuple[int, ...]]:
    return {int(k): _int_tuple(tuple(v)) for k, v in m.items()}


def _tp_list(items: Iterable[Mapping[str, Any]]) -> frozenset[tuple[str, int]]:
    return frozenset((i["topic"], int(i["partition"])) for i in items)


def _tp_json(tps: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in sorted(tps)]


def try_decode(decoder: Callable[..., T], data: bytes | None, path: str, *args: Any,
               logger: logging.Logger | None = None, **kwargs: Any) -> T | None:
    """Run ``decoder(data, *args, path=path, **kwargs)``; on :class:`MalformedZNodeError` log a warning and
    return None (the "log and skip" rule for malformed znodes)."""
    try:
        return decoder(data, *args, path=path, **kwargs)
    except MalformedZNodeError as e:
        (logger or log).warning("skipping malformed znode %s", kv(path=path, reason=e.reason))
        return None


# ------------------------------------------------------------------------------------------------------ /controller

@attrs.frozen
class ControllerZNode:
    """``/controller``: written as version 2, versions 1 and 2 decode."""

    broker_id: int
    timestamp_ms: int
    kraft_controller_epoch: int = -1

    SCHEMA: ClassVar[str] = "controller"

    def encode(self) -> bytes:
        return encode_json({"version": 2, "brokerid": self.broker_id, "timestamp": str(self.timestamp_ms),
                            "kraftControllerEpoch": self.kraft_controller_epoch}, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = paths.CONTROLLER) -> ControllerZNode:
        js = decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))
        return cls(broker_id=int(js["brokerid"]), timestamp_ms=int(js["timestamp"]),
                   kraft_controller_epoch=int(js.get("kraftControllerEpoch", -1)))


# -------------------------------------------------------------------------------------------------- /brokers/ids/N

_ENDPOINT_RE = re.compile(r"^([^:/]+)://\[?([0-9a-zA-Z%._:-]*)\]?:([0-9]{1,5})$")


@attrs.frozen
class Endpoint:
    """One advertised listener, ``LISTENER://host:port``."""

    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """Parse ``PLAINTEXT://127.0.0.1:9092`` (IPv6 hosts in brackets); ``ValueError`` if it is not an endpoint."""
    m = _ENDPOINT_RE.match(text)
    if not m or int(m.group(3)) > 65535:
        raise ValueError(f"unable to parse endpoint {text!r}: expected LISTENER://host:port")
    return Endpoint(m.group(1), m.group(2), int(m.group(3)))


def _str_tuple(v: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(x) for x in v)


@attrs.frozen(kw_only=True)
class BrokerRegistration:
    """``/brokers/ids/{id}``: written as version 5, version 4 decodes (without ``features``).

    ``id`` is not in the payload (it is the node name).  ``broker_epoch`` is the znode's czxid, filled in by
    :meth:`decode` when given the stat; it is never written.
    """

    id: int
    host: str | None
    port: int
    endpoints: tuple[str, ...] = attrs.field(converter=_str_tuple)
    listener_security_protocol_map: dict[str, str]
    timestamp_ms: int
    rack: str | None = None
    jmx_port: int = -1
    features: dict[str, dict[str, int]] = attrs.field(factory=dict)
    version: int = 5
    broker_epoch: int = -1

    SCHEMA: ClassVar[str] = "broker_registration"

    @classmethod
    def create(cls, broker_id: int, endpoints: Iterable[str], listener_security_protocol_map: Mapping[str, str],
               timestamp_ms: int, rack: str | None = None, jmx_port: int = -1,
               features: Mapping[str, Mapping[str, int]] | None = None) -> BrokerRegistration:
        """A registration whose ``host``/``port`` repeat the first PLAINTEXT endpoint (or null/-1), as Kafka
        writes it."""
        eps = tuple(endpoints)
        spm = dict(listener_security_protocol_map)
        host, port = None, -1
        for ep in map(parse_endpoint, eps):
            if spm.get(ep.listener, ep.listener) == "PLAINTEXT":
                host, port = ep.host, ep.port
                break
        return cls(id=broker_id, host=host, port=port, endpoints=eps, listener_security_protocol_map=spm,
                   timestamp_ms=timestamp_ms, rack=rack, jmx_port=jmx_port,
                   features={k: dict(v) for k, v in (features or {}).items()})

    def parsed_endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(parse_endpoint(e) for e in self.endpoints)

    def endpoint(self, listener: str) -> Endpoint | None:
        return next((e for e in self.parsed_endpoints() if e.listener == listener), None)

    def encode(self) -> bytes:
        js: dict[str, Any] = {"version": 5, "host": self.host, "port": self.port, "jmx_port": self.jmx_port,
                              "timestamp": str(self.timestamp_ms), "endpoints": list(self.endpoints),
                              "listener_security_protocol_map": dict(self.listener_security_protocol_map)}
        if self.rack is not None:
            js["rack"] = self.rack
        js["features"] = {k: dict(v) for k, v in self.features.items()}
        return encode_json(js, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, broker_id: int | None = None, path: str | None = None,
               stat: Any = None) -> BrokerRegistration:
        what = _what(path, cls.SCHEMA)
        if broker_id is None:
            last = (path or "").rsplit("/", 1)[-1]
            if not last.isdigit():
                raise MalformedZNodeError(what, "broker id unknown: pass broker_id or a /brokers/ids/<id> path")
            broker_id = int(last)
        js = decode_json(data, cls.SCHEMA, what)
        try:
            for e in js["endpoints"]:
                parse_endpoint(e)
        except ValueError as e:
            raise MalformedZNodeError(what, str(e)) from None
        return cls(id=broker_id, host=js["host"], port=int(js["port"]), endpoints=js["endpoints"],
                   listener_security_protocol_map=dict(js["listener_security_protocol_map"]),
                   timestamp_ms=int(js["timestamp"]), rack=js.get("rack"), jmx_port=int(js["jmx_port"]),
                   features={k: {kk: int(vv) for kk, vv in v.items()} for k, v in js.get("features", {}).items()},
                   version=int(js["version"]), broker_epoch=stat.czxid if stat is not None else -1)


# ------------------------------------------------------------------------------------------------ /brokers/topics/t

_TOPIC_ID_RE = re.compile(r"[A-Za-z0-9_-]{22}")
_RESERVED_TOPIC_IDS = {uuid.UUID(int=0), uuid.UUID(int=1)}   # Kafka's ZERO_UUID and METADATA_TOPIC_ID


def topic_id_str(u: uuid.UUID) -> str:
    """Kafka's string form of a UUID: URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID:
    """Inverse of :func:`topic_id_str`; ``ValueError`` for anything that is not 22 URL-safe base64 chars."""
    if not _TOPIC_ID_RE.fullmatch(text):
        raise ValueError(f"invalid topic id {text!r}: expected 22 URL-safe base64 characters")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def new_topic_id() -> str:
    """A fresh random topic id, following Kafka's ``Uuid.randomUuid`` rule: never a reserved id (all zeros,
    or all zeros but the last bit) and never one whose string form starts with '-'."""
    for _ in range(1000):
        u = uuid.uuid4()
        s = topic_id_str(u)
        if u not in _RESERVED_TOPIC_IDS and not s.startswith("-"):
            return s
    raise RuntimeError("could not draw a valid topic id")  # probability ~ (1/64)**1000


def _distinct(xs: Iterable[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(xs))


@functools.lru_cache(maxsize=4096)
def _interned_int_tuple(xs: tuple) -> tuple[int, ...]:
    return tuple(map(int, xs))


def _int_tuple(xs: Iterable[int]) -> tuple[int, ...]:
    """``xs`` as a tuple of ints.  A tuple's result is interned: replica lists repeat (a 3-broker cluster has six
    orders of three), and a failover builds three of these for each of 20,000 partitions."""
    if not xs:
        return ()
    if type(xs) is tuple:
        try:
            return _interned_int_tuple(xs)
        except TypeError:  # an unhashable item: int() refuses it below
            pass
    return tuple(map(int, xs))


@attrs.frozen
class ReplicaAssignment:
    """In-memory view of one partition's assignment (Kafka's ``ReplicaAssignment``)."""

    replicas: tuple[int, ...] = attrs.field(converter=_int_tuple)
    adding: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)
    removing: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)

    @property
    def origin(self) -> tuple[int, ...]:
        """Replicas before the reassignment: ``replicas - adding``."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """Replicas after the reassignment: ``replicas - removing``."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: Iterable[int]) -> ReplicaAssignment:
        """Start a reassignment from this assignment's origin to ``target``."""
        target = tuple(target)
        origin = self.origin
        full = _distinct(target + origin)
        return ReplicaAssignment(full, tuple(r for r in full if r not in origin),
                                 tuple(r for r in full if r not in target))

    def complete(self) -> ReplicaAssignment:
        """The assignment once the reassignment finished: the target, nothing adding or removing."""
        return ReplicaAssignment(self.target)


def _assignment_map(m: Mapping[int, Iterable[int]] | None) -> dict[int, tuple[int, ...]]:
    return {int(k): _int_tuple(v) for k, v in (m or {}).items()}


@attrs.frozen
class TopicAssignment:
    """``/brokers/topics/{t}``: written as version 3, versions 1-3 decode."""

    partitions: dict[int, tuple[int, ...]] = attrs.field(converter=_assignment_map)
    adding: dict[int, tuple[int, ...]] = attrs.field(factory=dict, converter=_assignment_map)
    removing: dict[int, tuple[int, ...]] = attrs.field(factory=dict, converter=_assignment_map)
    topic_id: str | None = None

    SCHEMA: ClassVar[str] = "topic_assignment"

    def __attrs_post_init__(self) -> None:
        if self.topic_id is not None:
            parse_topic_id(self.topic_id)

    @classmethod
    def from_replica_assignments(cls, assignments: Mapping[int, ReplicaAssignment],
                                 topic_id: str | None = None) -> TopicAssignment:
        return cls({p: a.replicas for p, a in assignments.items()},
                   {p: a.adding for p, a in assignments.items() if a.adding},
                   {p: a.removing for p, a in assignments.items() if a.removing}, topic_id)

    def replica_assignment(self, partition: int) -> ReplicaAssignment:
        return ReplicaAssignment(self.partitions[partition], self.adding.get(partition, ()),
                                 self.removing.get(partition, ()))

    def replica_assignments(self) -> dict[int, ReplicaAssignment]:
        return {p: self.replica_assignment(p) for p in sorted(self.partitions)}

    def encode(self) -> bytes:
        def jmap(m: Mapping[int, tuple[int, ...]], only_non_empty: bool) -> dict[str, list[int]]:
            return {str(p): list(m[p]) for p in sorted(m) if m[p] or not only_non_empty}

        js: dict[str, Any] = {"version": 3, "partitions": jmap(self.partitions, False),
                              "adding_replicas": jmap(self.adding, True),
                              "removing_replicas": jmap(self.removing, True)}
        if self.topic_id is not None:
            js["topic_id"] = self.topic_id
        return encode_json(js, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> TopicAssignment:
        js = decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))
        parts = _int_keys(js["partitions"])
        # Like Kafka, entries for partitions absent from "partitions" are ignored; empty lists mean "none".
        adding = {p: r for p, r in _int_keys(js.get("adding_replicas", {})).items() if p in parts and r}
        removing = {p: r for p, r in _int_keys(js.get("removing_replicas", {})).items() if p in parts and r}
        return cls(parts, adding, removing, js.get("topic_id"))


# --------------------------------------------------------------------------------- /brokers/topics/t/partitions/p/state

NO_LEADER = -1
LEADER_DURING_DELETE = -2
NO_EPOCH = -1
EPOCH_DURING_DELETE = -2
INITIAL_LEADER_EPOCH = 0
INITIAL_PARTITION_EPOCH = 0
UNKNOWN_ZK_VERSION = -2           # Kafka's ZkVersion.UnknownVersion
LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1


@attrs.frozen
class LeaderIsrAndControllerEpoch:
    """``/brokers/topics/{t}/partitions/{p}/state``.  ``partition_epoch`` is the znode's version (not in the
    payload): :func:`decode_partition_state` fills it from the stat, or sets ``UNKNOWN_ZK_VERSION`` (-2) when no
    stat is given so that a conditional write with it can never succeed by accident."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...] = attrs.field(converter=_int_tuple)
    controller_epoch: int
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED
    partition_epoch: int = INITIAL_PARTITION_EPOCH

    SCHEMA: ClassVar[str] = "partition_state"

    def encode(self) -> bytes:
        return encode_partition_state(self.leader, self.leader_epoch, self.isr, self.controller_epoch,
                                      self.leader_recovery_state)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None, stat: Any = None) -> LeaderIsrAndControllerEpoch:
        js = decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))
        return cls(leader=int(js["leader"]), leader_epoch=int(js["leader_epoch"]), isr=js["isr"],
                   controller_epoch=int(js["controller_epoch"]),
                   leader_recovery_state=int(js.get("leader_recovery_state", LEADER_RECOVERY_RECOVERED)),
                   partition_epoch=stat.version if stat is not None else UNKNOWN_ZK_VERSION)


def decode_partition_state(data: bytes | None, stat: Any = None, path: str | None = None
                           ) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch.decode(data, path=path, stat=stat)


def partition_state_fields(data: bytes | None, path: str | None = None) -> tuple[int, int, tuple[int, ...], int, int]:
    """``(leader, leader_epoch, isr, controller_epoch, leader_recovery_state)`` of a ``state`` payload, checked
    as :func:`decode_partition_state` checks it, without building the value type: bulk readers (a controller
    failover reads every partition's state) build their own value from these fields.  Remembered per payload:
    a cluster's states are a few hundred distinct texts at most (leader, ISR, epochs), read by the thousand."""
    if type(data) is bytes:
        try:
            return _partition_state_fields(data)
        except MalformedZNodeError:
            pass   # read again below, to name ``path`` in the error
    return _partition_state_fields.__wrapped__(data, path)


@functools.lru_cache(maxsize=8192)
def _partition_state_fields(data: bytes | None, path: str | None = None
                            ) -> tuple[int, int, tuple[int, ...], int, int]:
    js = decode_json(data, LeaderIsrAndControllerEpoch.SCHEMA, _what(path, LeaderIsrAndControllerEpoch.SCHEMA))
    return (int(js["leader"]), int(js["leader_epoch"]), tuple(map(int, js["isr"])), int(js["controller_epoch"]),
            int(js.get("leader_recovery_state", LEADER_RECOVERY_RECOVERED)))


def encode_partition_state(leader: int, leader_epoch: int, isr: Iterable[int], controller_epoch: int,
                           leader_recovery_state: int = LEADER_RECOVERY_RECOVERED) -> bytes:
    """A ``state`` payload, byte for byte what :func:`encode_json` writes for it (keys in docs/zookeeper.md's
    order).  Fields the fast check accepts are formatted directly (a controller writes thousands per election
    round, a leader one per ISR change); anything else goes through :func:`encode_json`, which refuses it."""
    isr = list(isr)
    js: dict[str, Any] = {"version": 1, "leader": leader, "leader_epoch": leader_epoch,
                          "controller_epoch": controller_epoch, "isr": isr}
    if leader_recovery_state != LEADER_RECOVERY_RECOVERED:
        js["leader_recovery_state"] = leader_recovery_state
    if not _partition_state_valid(js):
        return encode_json(js, LeaderIsrAndControllerEpoch.SCHEMA)
    recovery = "" if leader_recovery_state == LEADER_RECOVERY_RECOVERED else \
        f',"leader_recovery_state":{leader_recovery_state}'
    return (f'{{"version":1,"leader":{leader},"leader_epoch":{leader_epoch},"controller_epoch":{controller_epoch},'
            f'"isr":[{",".join(map(str, isr))}]{recovery}}}').encode()


# ------------------------------------------------------------------------------------------------------ /config/...

def _str_dict(m: Mapping[str, str]) -> dict[str, str]:
    return {str(k): v for k, v in m.items()}


@attrs.frozen
class EntityConfig:
    """``/config/<type>/<name>``: ``{"version":1,"config":{...}}``, every value a string."""

    config: dict[str, str] = attrs.field(factory=dict, converter=_str_dict)

    SCHEMA: ClassVar[str] = "entity_config"

    def encode(self) -> bytes:
        return encode_json({"version": 1, "config": dict(self.config)}, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> EntityConfig:
        return cls(decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))["config"])


@attrs.frozen
class ConfigChangeNotification:
    """``/config/changes/config_change_NNNNNNNNNN``: written as version 2 (``entity_path``); version 1
    (``entity_type`` + ``entity_name``) decodes to the same value."""

    entity_path: str

    SCHEMA: ClassVar[str] = "config_change_notification"

    @classmethod
    def of(cls, entity_type: str, entity_name: str) -> ConfigChangeNotification:
        return cls(f"{entity_type}/{entity_name}")

    @property
    def entity_type(self) -> str:
        return self.entity_path.split("/", 1)[0]

    @property
    def entity_name(self) -> str:
        return self.entity_path.split("/", 1)[1]

    def encode(self) -> bytes:
        return encode_json({"version": 2, "entity_path": self.entity_path}, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> ConfigChangeNotification:
        js = decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))
        if js["version"] == 1:
            return cls.of(js["entity_type"], js["entity_name"])
        return cls(js["entity_path"])


# ------------------------------------------------------------------------------------------------------- /admin/...

@attrs.frozen
class ReassignPartitions:
    """``/admin/reassign_partitions``: ``{(topic, partition): replicas}``.  A ``log_dirs`` key written by
    another tool is ignored with a warning (the project never writes it)."""

    partitions: dict[tuple[str, int], tuple[int, ...]] = attrs.field(
        converter=lambda m: {(str(t), int(p)): _int_tuple(r) for (t, p), r in m.items()})

    SCHEMA: ClassVar[str] = "reassign_partitions"

    def encode(self) -> bytes:
        items = [{"topic": t, "partition": p, "replicas": list(self.partitions[(t, p)])}
                 for t, p in sorted(self.partitions)]
        return encode_json({"version": 1, "partitions": items}, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = paths.REASSIGN_PARTITIONS) -> ReassignPartitions:
        what = _what(path, cls.SCHEMA)
        js = decode_json(data, cls.SCHEMA, what)
        out: dict[tuple[str, int], tuple[int, ...]] = {}
        for item in js["partitions"]:
            if "log_dirs" in item:
                log.warning("ignoring log_dirs in reassignment znode (not a Kafka field; log directories are "
                            "moved with AlterReplicaLogDirs) %s",
                            kv(path=what, topic=item["topic"], partition=item["partition"]))
            out[(item["topic"], int(item["partition"]))] = _int_tuple(item["replicas"])  # last entry wins
        return cls(out)


def _tp_set(tps: Iterable[tuple[str, int]]) -> frozenset[tuple[str, int]]:
    return frozenset((str(t), int(p)) for t, p in tps)


@attrs.frozen
class _PartitionSetZNode:
    """A znode whose JSON is ``{"version":1,"partitions":[{"topic":..,"partition":..}]}``; subclasses name the
    schema."""

    partitions: frozenset[tuple[str, int]] = attrs.field(converter=_tp_set)

    SCHEMA: ClassVar[str]

    def encode(self) -> bytes:
        return encode_json({"version": 1, "partitions": _tp_json(self.partitions)}, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None):
        return cls(_tp_list(decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))["partitions"]))


@attrs.frozen
class PreferredReplicaElection(_PartitionSetZNode):
    """``/admin/preferred_replica_election``: the set of partitions to move back to their preferred leader."""

    SCHEMA: ClassVar[str] = "preferred_replica_election"

    @classmethod
    def decode(cls, data: bytes | None,
               path: str | None = paths.PREFERRED_REPLICA_ELECTION) -> PreferredReplicaElection:
        return super().decode(data, path)


@attrs.frozen
class IsrChangeNotification(_PartitionSetZNode):
    """``/isr_change_notification/isr_change_NNNNNNNNNN``: partitions whose ISR changed (old IBPs only)."""

    SCHEMA: ClassVar[str] = "isr_change_notification"


LOG_DIR_FAILURE_EVENT = 1


@attrs.frozen
class LogDirEventNotification:
    """``/log_dir_event_notification/log_dir_event_NNNNNNNNNN``: ``event`` 1 = LogDirFailure."""

    broker_id: int
    event: int = LOG_DIR_FAILURE_EVENT

    SCHEMA: ClassVar[str] = "log_dir_event_notification"

    def encode(self) -> bytes:
        return encode_json({"version": 1, "broker": self.broker_id, "event": self.event}, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> LogDirEventNotification:
        js = decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))
        return cls(int(js["broker"]), int(js["event"]))


# ---------------------------------------------------------------------------------------------- /feature, /cluster/id

FEATURE_STATUS_DISABLED = 0
FEATURE_STATUS_ENABLED = 1


@attrs.frozen
class FeatureZNode:
    """``/feature`` (KIP-584): finalized ``{feature: max_version_level}``.  Written as version 2; version 1
    decodes (its ``min_version_level`` is dropped, as Kafka 3.3+ does)."""

    features: dict[str, int] = attrs.field(factory=dict, converter=lambda m: {str(k): int(v) for k, v in m.items()})
    status: int = FEATURE_STATUS_ENABLED

    SCHEMA: ClassVar[str] = "feature"

    def encode(self) -> bytes:
        return encode_json({"version": 2, "status": self.status,
                            "features": {k: {"max_version_level": v} for k, v in sorted(self.features.items())}},
                           self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = paths.FEATURE) -> FeatureZNode:
        js = decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))
        return cls({k: int(v["max_version_level"]) for k, v in js["features"].items()}, int(js["status"]))


@attrs.frozen
class ClusterIdZNode:
    """``/cluster/id``: ``{"version":"1","id":...}`` (the version is a string here)."""

    id: str

    SCHEMA: ClassVar[str] = "cluster_id"

    def encode(self) -> bytes:
        return encode_json({"version": "1", "id": self.id}, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = paths.CLUSTER_ID) -> ClusterIdZNode:
        return cls(decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))["id"])


# ---------------------------------------------------------------------------------- KIP-950 tieredstorage (Project)

TIERED_ENABLED = "ENABLED"
TIERED_DISABLING = "DISABLING"
TIERED_DISABLED = "DISABLED"


@attrs.frozen
class TieredState:
    """``/brokers/topics/{t}/tieredstorage/state``: ``{"version":1,"state":"ENABLED"}``."""

    state: str = attrs.field(validator=attrs.validators.in_(paths.TIERED_STATES))

    SCHEMA: ClassVar[str] = "tiered_state"

    def encode(self) -> bytes:
        return encode_json({"version": 1, "state": self.state}, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> TieredState:
        return cls(decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))["state"])


# --------------------------------------------------------------------------------- control channel (Project)

BODY_ENCODING = "zlib"


@attrs.frozen(kw_only=True)
class BodyParts:
    """``body_parts`` of a control request or response: its body is in part znodes (see
    :mod:`kafkatier.zk.control_parts`)."""

    token: str
    count: int
    size: int           # compressed bytes, all parts joined
    sha256: str         # of the compressed bytes
    encoding: str = BODY_ENCODING

    def to_json(self) -> dict[str, Any]:
        return {"token": self.token, "count": self.count, "size": self.size, "sha256": self.sha256,
                "encoding": self.encoding}

    @classmethod
    def from_json(cls, js: dict[str, Any]) -> BodyParts:
        return cls(token=js["token"], count=int(js["count"]), size=int(js["size"]), sha256=js["sha256"],
                   encoding=js["encoding"])


@attrs.frozen(kw_only=True)
class BodyPart:
    """``/kafkatier/control/<brokerId>/parts/<token>-NNNNN``: one slice of a compressed control body
    (:mod:`kafkatier.zk.control_parts`)."""

    token: str
    index: int
    data: bytes

    SCHEMA: ClassVar[str] = "control_part"

    def encode(self) -> bytes:
        return encode_json({"version": 1, "token": self.token, "index": self.index,
                            "data": base64.b64encode(self.data).decode("ascii")}, self.SCHEMA)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> BodyPart:
        what = path or cls.SCHEMA
        js = decode_json(data, cls.SCHEMA, what)
        try:
            raw = base64.b64decode(js["data"], validate=True)
        except binascii.Error as e:
            raise MalformedZNodeError(what, f"part data is not base64: {e}") from None
        return cls(token=js["token"], index=int(js["index"]), data=raw)


@attrs.frozen(kw_only=True)
class ControlRequest:
    """``/kafkatier/control/<brokerId>/requests/request_NNNNNNNNNN``: one controller-to-broker request.
    ``body`` holds the request fields in kafka-python's snake_case naming."""

    api_key: int
    api_version: int
    api_name: str
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    body: dict[str, Any] = attrs.field(factory=dict)
    body_parts: BodyParts | None = None     # set: the body is in part znodes and ``body`` is empty

    SCHEMA: ClassVar[str] = "control_request"

    def encode(self, body_text: str | None = None) -> bytes:
        """Raises :class:`~kafkatier.zk.limits.ZNodeTooLargeError` when the body does not fit one znode.
        ``body_text``: the body already serialised (:func:`dump_body`)."""
        return _encode_envelope({"version": 1, "api_key": self.api_key, "api_name": self.api_name,
                                 "api_version": self.api_version, "controller_id": self.controller_id,
                                 "controller_epoch": self.controller_epoch, "broker_epoch": self.broker_epoch},
                                self.body, self.body_parts, self.SCHEMA, body_text)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> ControlRequest:
        js = decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))
        return cls(api_key=int(js["api_key"]), api_version=int(js["api_version"]), api_name=js["api_name"],
                   controller_id=int(js["controller_id"]), controller_epoch=int(js["controller_epoch"]),
                   broker_epoch=int(js["broker_epoch"]), **_body_values(js))


@attrs.frozen(kw_only=True)
class ControlResponse:
    """``/kafkatier/control/<brokerId>/responses/request_NNNNNNNNNN``: the broker's answer to the request
    node with the same name.  ``error_code`` is the top-level Kafka error code."""

    api_key: int
    api_version: int
    error_code: int
    body: dict[str, Any] = attrs.field(factory=dict)
    body_parts: BodyParts | None = None     # set: the body is in part znodes and ``body`` is empty
    broker_id: int
    broker_epoch: int

    SCHEMA: ClassVar[str] = "control_response"

    def encode(self, body_text: str | None = None) -> bytes:
        """Raises :class:`~kafkatier.zk.limits.ZNodeTooLargeError` when the body does not fit one znode.
        ``body_text``: the body already serialised (:func:`dump_body`)."""
        return _encode_envelope({"version": 1, "api_key": self.api_key, "api_version": self.api_version,
                                 "broker_id": self.broker_id, "broker_epoch": self.broker_epoch,
                                 "error_code": self.error_code}, self.body, self.body_parts, self.SCHEMA, body_text)

    @classmethod
    def decode(cls, data: bytes | None, path: str | None = None) -> ControlResponse:
        js = decode_json(data, cls.SCHEMA, _what(path, cls.SCHEMA))
        return cls(api_key=int(js["api_key"]), api_version=int(js["api_version"]),
                   error_code=int(js["error_code"]), **_body_values(js), broker_id=int(js["broker_id"]),
                   broker_epoch=int(js["broker_epoch"]))


def _body_values(js: Mapping[str, Any]) -> dict[str, Any]:
    if "body_parts" in js:
        return {"body": {}, "body_parts": BodyParts.from_json(js["body_parts"])}
    return {"body": js["body"]}


# ------------------------------------------------------------------------------------------- generic entry points

def encode(value: Any) -> bytes:
    """Encode any value type of this module (``value.encode()``); ints encode as plain decimal bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return encode_int(value)
    return value.encode()


def _int_decoder(schema: str) -> Callable[..., int]:
    def dec(data: bytes | None, path: str | None = None, stat: Any = None) -> int:
        return decode_int(data, path, schema)
    return dec


def _plain(cls: Any) -> Callable[..., Any]:
    def dec(data: bytes | None, path: str | None = None, stat: Any = None) -> Any:
        return cls.decode(data, path=path)
    return dec


def _with_stat(cls: Any) -> Callable[..., Any]:
    def dec(data: bytes | None, path: str | None = None, stat: Any = None) -> Any:
        return cls.decode(data, path=path, stat=stat)
    return dec


# Schema name -> decoder(data, path=None, stat=None).  Used to decode a znode by its path (index.json).
DECODERS: dict[str, Callable[..., Any]] = {
    "controller": _plain(ControllerZNode),
    "controller_epoch": _int_decoder("controller_epoch"),
    "tiered_epoch": _int_decoder("tiered_epoch"),
    "broker_registration": _with_stat(BrokerRegistration),
    "topic_assignment": _plain(TopicAssignment),
    "partition_state": _with_stat(LeaderIsrAndControllerEpoch),
    "entity_config": _plain(EntityConfig),
    "config_change_notification": _plain(ConfigChangeNotification),
    "reassign_partitions": _plain(ReassignPartitions),
    "preferred_replica_election": _plain(PreferredReplicaElection),
    "isr_change_notification": _plain(IsrChangeNotification),
    "log_dir_event_notification": _plain(LogDirEventNotification),
    "feature": _plain(FeatureZNode),
    "cluster_id": _plain(ClusterIdZNode),
    "tiered_state": _plain(TieredState),
    "control_request": _plain(ControlRequest),
    "control_response": _plain(ControlResponse),
    "control_part": _plain(BodyPart),
    "remote_log_segment_metadata": lambda data, path=None, stat=None: decode_remote_log_segment(data, path),
    # Project: request faults (server/fault_injection.py reads them into its value types).
    "request_faults": lambda data, path=None, stat=None: decode_json(data, "request_faults", path or "request_faults"),
    "fault_state": lambda data, path=None, stat=None: decode_json(data, "fault_state", path or "fault_state"),
}


def decode_remote_log_segment(data: bytes | None, path: str | None = None) -> dict[str, Any]:
    """A remote log segment metadata znode (``/kafkatier/remote_log_metadata/...``) as its schema-valid JSON
    document; the remote log metadata manager turns it into ``RemoteLogSegmentMetadata`` (Kafka's constructor
    rules)."""
    what = path or "remote_log_segment_metadata"
    try:
        doc = json.loads(data or b"")
    except ValueError as e:
        raise MalformedZNodeError(what, f"not JSON: {e}") from None
    errors = schema_errors("remote_log_segment_metadata", doc)
    if errors:
        raise MalformedZNodeError(what, "; ".join(errors))
    return doc


def decode_path(path: str, data: bytes | None, stat: Any = None) -> Any:
    """Decode the znode at ``path`` with the codec that ``zk_schemas/index.json`` assigns to it.

    Returns None for a null-data znode; raises :class:`MalformedZNodeError` when the data does not decode,
    when a null-data znode carries data, or when the index does not know the path.
    """
    rule = match_path(path)
    if rule is None:
        raise MalformedZNodeError(path, "no schema for this path in zk_schemas/index.json")
    if rule.schema is None:
        if data:
            raise MalformedZNodeError(path, f"expected no data, found {len(data)} bytes")
        return None
    return DECODERS[rule.schema.removesuffix(".json")](data, path=path, stat=stat)


def wire_topic_id(topic_id: str | None) -> str:
    """Kafka's base64 topic id as the canonical UUID string used by message fields of type ``uuid``."""
    if not topic_id:
        return str(uuid.UUID(int=0))
    return str(parse_topic_id(topic_id))


def topic_id_from_wire(value) -> str | None:
    """Inverse of :func:`wire_topic_id` (accepts a UUID, its string form, or an already-base64 id)."""
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        u = value
    elif isinstance(value, str) and "-" in value and len(value) == 36:
        u = uuid.UUID(value)
    else:
        return value or None
    return None if u.int == 0 else topic_id_str(u)
