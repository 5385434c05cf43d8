"""Typed control messages: Kafka's generated ``*Data`` classes (``LeaderAndIsrRequestData``,
``StopReplicaRequestData.StopReplicaPartitionState``, ...) for the control APIs, built from the message specs in
:mod:`kafkatier.protocol.messages`.

Every struct of a spec becomes one frozen attrs class with slots, named as Kafka names it
(``LeaderAndIsrPartitionState``, ``StopReplicaTopicState``, ``UpdateMetadataBroker``; the top level is
``<Message>Data``), with kafka-python's snake_case field names (``isKRaftController`` is
``is_k_raft_controller``), the spec's defaults, and arrays as tuples.  A message covers every version of its
spec, as Kafka's ``Data`` classes do; the version is chosen when it is written or read:

- ``msg.to_json(version)``: the JSON-friendly dict of the fields of ``version`` (at every level) that the
  control channel stores (``zk/codecs.ControlRequest.body``); a field set away from its default that
  ``version`` lacks raises :class:`ControlMessageError` (Kafka's ``UnsupportedVersionException``), never
  dropped silently.
- ``Cls.from_json(version, raw)``: the message a body stands for, checked against the spec on the way: a key
  that matches no field of ``version``, a value of the wrong type or out of its integer range, a null where
  none is allowed, each raises :class:`ControlMessageError` naming the path; missing keys take the default.
- Constructing a class with a keyword that matches no field is a ``TypeError`` (attrs).

Speed (a 20,000-partition LeaderAndIsr is one message): the per-(struct, version) readers and writers are
generated once as straight-line code (no per-field closure), and :meth:`from_json` fills the slots without
attrs' frozen ``__setattr__`` round trip.  ``benchmarks/control_messages.py`` measures the cost against the
earlier dict bodies checked by a compiled validator.

Difference from Kafka: values of ``uuid`` fields stay in their JSON form (the canonical string) because the
control channel is JSON in ZooKeeper (docs/architecture.md#control-channel-over-zookeeper).
"""
from __future__ import annotations

import uuid
from typing import Any, Callable, ClassVar, Mapping

import attrs
from kafka.protocol.api_message import ApiMessage

from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import primary
from kafkatier.protocol.control_requests import (INT_RANGES, ControlledShutdownRequest, ControlledShutdownResponse,
                                                 LeaderAndIsrRequest, LeaderAndIsrResponse, StopReplicaRequest,
                                                 StopReplicaResponse, UpdateMetadataRequest, UpdateMetadataResponse,
                                                 from_body, to_body)


class ControlMessageError(ValueError):
    """A control message body that does not match its spec, or a message written at a version lacking one of
    its set fields.  The text names the path (``LeaderAndIsrRequest.topic_states[].partition_states[].isr``)."""


_MISSING = object()


class ControlStruct:
    """Base of every generated struct class: :meth:`to_json` and :meth:`from_json` by version."""

    __slots__ = ()
    #: the spec's struct name (``LeaderAndIsrPartitionState``)
    STRUCT: ClassVar[str]
    #: field name -> kafka-python field (its spec entry: type, versions, default)
    FIELDS: ClassVar[Mapping[str, Any]]
    #: the kafka-python message class of the spec this struct belongs to
    MESSAGE: ClassVar[type[ApiMessage]]
    _writers: ClassVar[dict[int, Callable[[Any], dict]]]
    _readers: ClassVar[dict[int, Callable[[Any], Any]]]

    def to_json(self, version: int, memo: dict[int, tuple] | None = None) -> dict[str, Any]:
        """The fields of ``version`` as a JSON-friendly dict: nested structs as dicts, arrays of structs as
        lists, arrays of simple values as the tuples they are (JSON writes both as arrays; the tuples are
        not copied: a 20,000-partition request holds 80,000 of them).

        ``memo`` (``id(struct) -> (struct, its written form)``, start with ``{}``), shared by the messages of
        one round of requests, writes a struct that several messages hold (a partition's state sent to each of
        its replicas) once; the written forms are then shared too, so neither may be changed while the memo
        lives."""
        writer = type(self)._writers.get(version)
        if writer is None:
            cls = type(self)
            writer = _writer(cls, version, cls.MESSAGE.__name__ if isinstance(self, ControlMessage) else cls.STRUCT)
        return writer(self, memo)

    @classmethod
    def from_json(cls, version: int, raw: Any):
        """The message ``raw`` stands for at ``version``; :class:`ControlMessageError` if it does not match."""
        reader = cls._readers.get(version) if type(version) is int else None
        if reader is None:
            reader = _reader(cls, version, cls.MESSAGE.__name__ if issubclass(cls, ControlMessage) else cls.STRUCT)
            cls._readers[version] = reader
        return reader(raw)


class ControlMessage(ControlStruct):
    """Base of the top-level ``<Message>Data`` classes: also knows its API key and valid versions.

    A message that travels over the Kafka protocol (ControlledShutdown) crosses the wire through
    :meth:`to_wire` and :meth:`from_wire`: the kafka-python message class of the same spec encodes and decodes
    the bytes, so the typed class and the wire format come from one spec."""

    __slots__ = ()
    API_KEY: ClassVar[ApiKeys]
    MAX_VERSION: ClassVar[int]

    def to_wire(self, version: int) -> ApiMessage:
        """The kafka-python message of ``version`` holding these fields (what the network layer encodes);
        :class:`ControlMessageError` if a set field is not part of ``version``."""
        return from_body(type(self).MESSAGE, version, self.to_json(version))

    @classmethod
    def from_wire(cls, message: ApiMessage):
        """The typed message a decoded kafka-python message of this spec stands for (at its version)."""
        if primary(type(message)) is not cls.MESSAGE:
            raise ControlMessageError(f"{cls.__name__}: expected a {cls.MESSAGE.__name__}, "
                                      f"got {type(message).__name__}")
        try:
            body = to_body(message)
        except ValueError as e:
            raise ControlMessageError(f"{cls.MESSAGE.__name__}: {e}") from e
        return cls.from_json(message.version, body)


# ------------------------------------------------------------------------------------------------- generation

def _default(field) -> Any:
    if field.is_array():
        return ()
    value = field.default
    return value if not isinstance(value, uuid.UUID) else str(value)


def _struct_classes(message: type[ApiMessage]) -> dict[str, type]:
    """One frozen attrs class per struct of ``message``'s spec (by struct name) and ``<Message>Data``."""
    classes: dict[str, type] = {}

    def make(name: str, fields: Mapping[str, Any], base: type) -> type:
        for f in fields.values():
            if f.is_struct_array():
                make(f.array_of.type_str, f.array_of.fields, ControlStruct)
            elif f.is_struct():
                make(f.type_str, f.fields, ControlStruct)
        if name in classes:
            return classes[name]
        cls = attrs.make_class(name, {n: attrs.field(default=_default(f)) for n, f in fields.items()},
                               bases=(base,), frozen=True, slots=True, kw_only=True,
                               weakref_slot=False)
        cls.STRUCT, cls.FIELDS, cls.MESSAGE = name, dict(fields), message
        cls.__init__ = _init(cls)
        cls._writers, cls._readers = {}, {}
        cls.__module__ = __name__
        classes[name] = cls
        return cls

    top = make(message.__name__ + "Data", message.fields, ControlMessage)
    top.API_KEY, top.MAX_VERSION = ApiKeys(message.API_KEY), message.max_version
    for name, cls in classes.items():
        if cls is not top:
            setattr(top, name, cls)   # Kafka's nesting: LeaderAndIsrRequestData.LeaderAndIsrTopicState
    return classes


def _init(cls: type) -> Callable[..., None]:
    """attrs' ``__init__`` for the class, keyword-only with the spec's defaults, filling each slot through its
    descriptor: a frozen attrs class sets its fields through ``object.__setattr__``, ~3x slower, and a
    20,000-partition LeaderAndIsr builds 20,000 partition states."""
    env: dict[str, Any] = {}
    params, body = [], []
    for i, name in enumerate(a.name for a in attrs.fields(cls)):
        env[f"d{i}"], env[f"s{i}"] = _default(cls.FIELDS[name]), getattr(cls, name).__set__
        params.append(f"{name}=d{i}")
        body.append(f"    s{i}(self, {name})")
    signature = f"self, *, {', '.join(params)}" if params else "self"
    exec(f"def __init__({signature}):\n" + "\n".join(body or ["    pass"]) + "\n", env)  # noqa: S102
    env["__init__"].__qualname__ = f"{cls.__name__}.__init__"
    return env["__init__"]


def _struct_class(owner: type, field) -> type:
    name = field.array_of.type_str if field.is_struct_array() else field.type_str
    return getattr(_TOP[owner.MESSAGE], name)


def _writer(cls: type, version: int, path: str) -> Callable[[Any], dict]:
    """Generate ``cls``'s writer for ``version``: a dict literal of the version's fields; a field outside the
    version must hold its default."""
    if not 0 <= version <= cls.MESSAGE.max_version:
        raise ControlMessageError(f"{path}: version {version} not in 0..{cls.MESSAGE.max_version}")
    env: dict[str, Any] = {"_absent": _absent, "_memo": _memo}
    items, checks = [], []
    for i, (name, field) in enumerate(cls.FIELDS.items()):
        if not field.for_version_q(version):
            env[f"d{i}"] = _default(field)
            checks.append(f"    if o.{name} != d{i}: _absent(o, {name!r}, {version}, {path!r})\n")
            continue
        if field.is_struct_array() or field.is_struct():
            sub = _struct_class(cls, field)
            env[f"w{i}"] = sub._writers.get(version) or _writer(sub, version, f"{path}.{name}")
            if field.is_struct_array():
                items.append(f"{name!r}: None if o.{name} is None else [w{i}(x, None) for x in o.{name}] "
                             f"if memo is None else _memo(w{i}, o.{name}, memo)")
            else:
                items.append(f"{name!r}: None if o.{name} is None else w{i}(o.{name}, memo)")
        else:   # arrays of simple values stay tuples: JSON writes them as arrays
            items.append(f"{name!r}: o.{name}")
    src = "def write(o, memo):\n" + "".join(checks) + "    return {" + ", ".join(items) + "}\n"
    exec(src, env)  # noqa: S102 - generated from the spec's field names only
    cls._writers[version] = env["write"]
    return env["write"]


def _memo(write: Callable[[Any, Any], dict], items: tuple, memo: dict[int, tuple]) -> list[dict]:
    out = []
    for x in items:
        hit = memo.get(id(x))
        if hit is None:  # the struct is kept beside its written form: its id cannot be reused while memo lives
            hit = memo[id(x)] = (x, write(x, memo))
        out.append(hit[1])
    return out


def _absent(o: Any, name: str, version: int, path: str) -> None:
    raise ControlMessageError(f"{path}.{name}: set to {getattr(o, name)!r} but not part of version {version}")


def _reader(cls: type, version: Any, path: str) -> Callable[[Any], Any]:
    """Generate ``cls``'s reader for ``version``: straight-line checks of each key's value, then the slots;
    ``path`` names the struct in error messages."""
    if type(version) is not int or not 0 <= version <= cls.MESSAGE.max_version:
        raise ControlMessageError(f"{path}: version {version!r} not in 0..{cls.MESSAGE.max_version}")
    in_version = [n for n, f in cls.FIELDS.items() if f.for_version_q(version)]
    env: dict[str, Any] = {"new": object.__new__, "C": cls, "MISSING": _MISSING, "KNOWN": frozenset(in_version),
                           "_refuse": _refuse, "_unknown": _unknown, "_ints": _ints, "_simple": _simple}
    lines = ["def read(raw):",
             "    if type(raw) is not dict: _refuse(PATH, 'expected an object', raw)",
             "    if not KNOWN.issuperset(raw): _unknown(raw, KNOWN, C, PATH, VERSION)",
             "    o = new(C)"]
    env["PATH"], env["VERSION"] = path, version
    for i, (name, field) in enumerate(cls.FIELDS.items()):
        env[f"s{i}"] = getattr(cls, name).__set__   # the slot's own setter: frozen attrs' __setattr__ refuses
        env[f"d{i}"] = _default(field)
        env[f"p{i}"] = f"{path}.{name}"
        if name not in env["KNOWN"]:
            lines.append(f"    s{i}(o, d{i})")
            continue
        nullable = field.is_array() or field.nullable_for_version_q(version)
        lines.append(f"    v = raw.get({name!r}, MISSING)")
        lines.append(f"    if v is MISSING: v = d{i}")
        lines.append("    elif v is None: " + ("pass" if nullable else f"_refuse(p{i}, 'null is not allowed', v)"))
        lines.extend(_value_check(cls, field, version, i, env, f"{path}.{name}"))
        lines.append(f"    s{i}(o, v)")
    lines.append("    return o")
    exec("\n".join(lines) + "\n", env)  # noqa: S102 - generated from the spec's field names only
    return env["read"]


def _value_check(cls: type, field, version: int, i: int, env: dict, path: str) -> list[str]:
    if field.is_struct_array():
        env[f"r{i}"] = _reader(_struct_class(cls, field), version, path + "[]")
        return [f"    elif type(v) is list or type(v) is tuple: v = tuple([r{i}(x) for x in v])",
                f"    else: _refuse(p{i}, 'expected a list', v)"]
    if field.is_struct():
        env[f"r{i}"] = _reader(_struct_class(cls, field), version, path)
        return [f"    else: v = r{i}(v)"]
    if field.is_array():
        kind = field.array_of.type_str
        if kind in INT_RANGES:
            env[f"lo{i}"], env[f"hi{i}"] = INT_RANGES[kind]
            return [f"    elif (type(v) is list or type(v) is tuple) and _ints(v, lo{i}, hi{i}): v = tuple(v)",
                    f"    else: _refuse(p{i}, 'expected a list of {kind}', v)"]
        env[f"f{i}"] = field.array_of
        return [f"    elif type(v) is list or type(v) is tuple: v = tuple([_simple(f{i}, x, p{i}) for x in v])",
                f"    else: _refuse(p{i}, 'expected a list', v)"]
    kind = field.type_str
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        return [f"    elif type(v) is not int or not {lo} <= v <= {hi}: _refuse(p{i}, 'expected an {kind}', v)"]
    if kind == "bool":
        return [f"    elif type(v) is not bool: _refuse(p{i}, 'expected true/false', v)"]
    if kind == "string":
        return [f"    elif type(v) is not str: _refuse(p{i}, 'expected a string', v)"]
    env[f"f{i}"] = field
    return [f"    else: v = _simple(f{i}, v, p{i})"]


def _ints(values: list, lo: int, hi: int) -> bool:
    for x in values:   # a loop beats set(map(type, ...)) with min/max for the short lists of broker ids
        if type(x) is not int or not lo <= x <= hi:
            return False
    return True


def _simple(field, raw: Any, path: str) -> Any:
    """A value of one of the rarer types (uuid, float64, bytes) or of an array of simple values."""
    kind = field.type_str
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        if type(raw) is not int or not lo <= raw <= hi:
            _refuse(path, f"expected an {kind}", raw)
        return raw
    if kind == "bool" and type(raw) is bool or kind == "string" and type(raw) is str:
        return raw
    if kind == "uuid":
        try:
            return str(uuid.UUID(raw)) if type(raw) is str else str(raw) if isinstance(raw, uuid.UUID) else \
                _refuse(path, "expected a UUID string", raw)
        except ValueError:
            _refuse(path, "expected a UUID string", raw)
    if kind == "float64" and type(raw) in (int, float):
        return float(raw)
    if kind in ("bytes", "records") and isinstance(raw, (bytes, str)):
        return raw
    _refuse(path, f"expected a {kind}", raw)


def _refuse(path: str, what: str, value: Any) -> None:
    shown = repr(value)
    raise ControlMessageError(f"{path}: {what}, got {shown[:80]}")


def _unknown(raw: dict, known: frozenset, cls: type, path: str, version: int) -> None:
    key = sorted(k for k in raw if k not in known)[0]
    if key in cls.FIELDS:
        raise ControlMessageError(f"{path}: field {key!r} is not part of version {version}")
    raise ControlMessageError(f"{path}: unknown field {key!r} (v{version} fields: {sorted(known)})")


# ------------------------------------------------------------------------------------------------- the classes

_TOP: dict[type[ApiMessage], type] = {}


def _data_class(message: type[ApiMessage]) -> type:
    message = primary(message)
    classes = _struct_classes(message)
    top = classes[message.__name__ + "Data"]
    _TOP[message] = top
    return top


LeaderAndIsrRequestData = _data_class(LeaderAndIsrRequest)
LeaderAndIsrResponseData = _data_class(LeaderAndIsrResponse)
StopReplicaRequestData = _data_class(StopReplicaRequest)
StopReplicaResponseData = _data_class(StopReplicaResponse)
UpdateMetadataRequestData = _data_class(UpdateMetadataRequest)
UpdateMetadataResponseData = _data_class(UpdateMetadataResponse)
ControlledShutdownRequestData = _data_class(ControlledShutdownRequest)
ControlledShutdownResponseData = _data_class(ControlledShutdownResponse)

# The structs the controller and the broker name, as Kafka's code does.
LeaderAndIsrPartitionState = LeaderAndIsrRequestData.LeaderAndIsrPartitionState
LeaderAndIsrTopicState = LeaderAndIsrRequestData.LeaderAndIsrTopicState
LeaderAndIsrLiveLeader = LeaderAndIsrRequestData.LeaderAndIsrLiveLeader
LeaderAndIsrTopicError = LeaderAndIsrResponseData.LeaderAndIsrTopicError
LeaderAndIsrPartitionError = LeaderAndIsrResponseData.LeaderAndIsrPartitionError
StopReplicaTopicState = StopReplicaRequestData.StopReplicaTopicState
StopReplicaPartitionState = StopReplicaRequestData.StopReplicaPartitionState
StopReplicaPartitionError = StopReplicaResponseData.StopReplicaPartitionError
UpdateMetadataPartitionState = UpdateMetadataRequestData.UpdateMetadataPartitionState
UpdateMetadataTopicState = UpdateMetadataRequestData.UpdateMetadataTopicState
UpdateMetadataBroker = UpdateMetadataRequestData.UpdateMetadataBroker
UpdateMetadataEndpoint = UpdateMetadataRequestData.UpdateMetadataEndpoint
ControlledShutdownRemainingPartition = ControlledShutdownResponseData.RemainingPartition

#: api key -> (request data class, response data class)
CONTROL_DATA: dict[ApiKeys, tuple[type, type]] = {
    ApiKeys.LEADER_AND_ISR: (LeaderAndIsrRequestData, LeaderAndIsrResponseData),
    ApiKeys.STOP_REPLICA: (StopReplicaRequestData, StopReplicaResponseData),
    ApiKeys.UPDATE_METADATA: (UpdateMetadataRequestData, UpdateMetadataResponseData),
    ApiKeys.CONTROLLED_SHUTDOWN: (ControlledShutdownRequestData, ControlledShutdownResponseData),
}

__all__ = [
    "ControlMessageError", "ControlStruct", "ControlMessage", "CONTROL_DATA",
    "LeaderAndIsrRequestData", "LeaderAndIsrResponseData", "StopReplicaRequestData", "StopReplicaResponseData",
    "UpdateMetadataRequestData", "UpdateMetadataResponseData", "ControlledShutdownRequestData",
    "ControlledShutdownResponseData", "LeaderAndIsrPartitionState", "LeaderAndIsrTopicState",
    "LeaderAndIsrLiveLeader", "LeaderAndIsrTopicError", "LeaderAndIsrPartitionError", "StopReplicaTopicState",
    "StopReplicaPartitionState", "StopReplicaPartitionError", "UpdateMetadataPartitionState",
    "UpdateMetadataTopicState", "UpdateMetadataBroker", "UpdateMetadataEndpoint",
    "ControlledShutdownRemainingPartition",
]
