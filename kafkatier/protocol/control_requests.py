"""Message classes for the ZooKeeper-mode control-plane APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown), plus an exact dict form of any message for storing in znodes.

The classes are kafka-python ``ApiMessage`` subclasses generated from the JSON specs in
:mod:`kafkatier.protocol.messages`, so they behave like kafka-python's own: ``StopReplicaRequest[5](...)``,
``.encode(version=...)``, ``StopReplicaRequest.decode(data, version=...)``, nested struct classes as attributes
(``StopReplicaRequest.StopReplicaTopicState.StopReplicaPartitionState``) and snake_case field names
(``isKRaftController`` becomes ``is_k_raft_controller``).

LeaderAndIsr and UpdateMetadata have a top-level field named ``Type``; its slot shadows kafka-python's ``type``
class property, so these classes answer ``is_request()`` / ``header_class`` from the spec instead.  Read a
class's kind with ``Cls.json["type"]``, never ``Cls.type``.

:func:`to_body` / :func:`from_body` convert between a message and its JSON-friendly snake_case dict (the shape
of ``msg.to_dict()``, limited to the fields of the message's version at every level) with an exact round trip.
The control plane itself uses the typed messages of :mod:`kafkatier.protocol.control_messages`.
"""
from __future__ import annotations

import uuid
from typing import Any, Mapping

from kafka.protocol.api_header import RequestHeader, ResponseHeader
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.base import BaseField
from kafka.protocol.schemas.fields.simple import SimpleField
from kafka.protocol.schemas.fields.struct import StructField

from kafka.util import classproperty

from kafkatier.protocol import messages as _specs
from kafkatier.protocol.build import primary
from kafkatier.protocol.api_keys import ApiKeys


class _SpecKind:
    """Mixin that reads request/response from the spec, so a top-level ``Type`` field cannot shadow it."""
    __slots__ = ()

    @classmethod
    def is_request(cls) -> bool:
        return cls.json["type"] == "request"

    @classproperty
    def header_class(cls):  # pylint: disable=E0213
        return RequestHeader if cls.json["type"] == "request" else ResponseHeader


class LeaderAndIsrRequest(_SpecKind, ApiMessage, load_json=_specs):
    """Controller -> broker: become leader or follower (apiKey 4, v0-7)."""


class LeaderAndIsrResponse(_SpecKind, ApiMessage, load_json=_specs):
    """Per-partition results of a LeaderAndIsr request."""


class StopReplicaRequest(_SpecKind, ApiMessage, load_json=_specs):
    """Controller -> broker: stop (and maybe delete) replicas (apiKey 5, v0-5; v5 adds
    ``disable_remote_partition`` per partition, from KIP-950's ZooKeeper design)."""


class StopReplicaResponse(_SpecKind, ApiMessage, load_json=_specs):
    """Per-partition results of a StopReplica request."""


class UpdateMetadataRequest(_SpecKind, ApiMessage, load_json=_specs):
    """Controller -> broker: live brokers and partition states (apiKey 6, v0-8)."""


class UpdateMetadataResponse(_SpecKind, ApiMessage, load_json=_specs):
    """Result of an UpdateMetadata request."""


class ControlledShutdownRequest(_SpecKind, ApiMessage, load_json=_specs):
    """Broker -> controller: move leadership away before shutting down (apiKey 7, v0-3)."""


class ControlledShutdownResponse(_SpecKind, ApiMessage, load_json=_specs):
    """Partitions the shutting-down broker still leads."""


CONTROL_MESSAGES: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = {
    ApiKeys.LEADER_AND_ISR: (LeaderAndIsrRequest, LeaderAndIsrResponse),
    ApiKeys.STOP_REPLICA: (StopReplicaRequest, StopReplicaResponse),
    ApiKeys.UPDATE_METADATA: (UpdateMetadataRequest, UpdateMetadataResponse),
    ApiKeys.CONTROLLED_SHUTDOWN: (ControlledShutdownRequest, ControlledShutdownResponse),
}


#: StopReplica v5's per-partition KIP-950 flag (``DisableRemotePartition`` in the spec), by its one name: the
#: controller writes it, :class:`~kafkatier.server.control_apis.ControlApis` and the replica manager read it.
DISABLE_REMOTE_PARTITION = "disable_remote_partition"
assert DISABLE_REMOTE_PARTITION in StopReplicaRequest.fields["topic_states"].array_of.fields[
    "partition_states"].array_of.fields


# ---------------------------------------------------------------------------------------------------------
# dict form
# ---------------------------------------------------------------------------------------------------------

#: The range of each integer type of the message specs.
INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


def _fields_for(fields: Mapping[str, BaseField], version: int) -> list[BaseField]:
    return [f for f in fields.values() if f.for_version_q(version)]


def to_body(msg: ApiMessage) -> dict[str, Any]:
    """The message as a JSON-friendly dict: snake_case keys, the fields of its version only (at every nesting
    level), UUIDs as strings.  Raises ``ValueError`` if the message has no version."""
    version = msg.version if msg.version is not None else getattr(msg, "_class_version", None)
    if version is None:
        raise ValueError(f"{type(msg).__name__} has no version; construct it with version= or Cls[version]")
    return _struct_to_body(type(msg).fields, msg, version)


def _struct_to_body(fields: Mapping[str, BaseField], item: Any, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in _fields_for(fields, version):
        val = getattr(item, field.name)
        if field.is_struct_array():
            out[field.name] = None if val is None else [
                _struct_to_body(field.array_of.fields, v, version) for v in val]
        elif field.is_struct():
            out[field.name] = None if val is None else _struct_to_body(field.fields, val, version)
        else:
            out[field.name] = field.to_json(val)
    return out


def from_body(cls: type[ApiMessage], version: int, body: Mapping[str, Any]) -> ApiMessage:
    """Rebuild a ``cls`` message of ``version`` (with nested struct instances) from :func:`to_body`'s dict.

    Missing keys take the spec default.  Unknown keys, keys of fields absent from ``version``, and values of the
    wrong type raise ``ValueError`` naming the offending path."""
    cls = primary(cls)
    if not isinstance(version, int) or not 0 <= version <= cls.max_version:
        raise ValueError(f"{cls.__name__}: version {version!r} not in 0..{cls.max_version}")
    if not isinstance(body, Mapping):
        raise ValueError(f"{cls.__name__}: body must be a mapping, got {type(body).__name__}")
    values = _struct_values(cls.fields, version, body, cls.__name__)
    return cls(version=version, **values)


def _struct_values(known: Mapping[str, BaseField], version: int, body: Mapping[str, Any],
                   path: str) -> dict[str, Any]:
    in_version = {f.name: f for f in _fields_for(known, version)}
    values: dict[str, Any] = {}
    for key, raw in body.items():
        if key not in known:
            raise ValueError(f"{path}: unknown field {key!r} (v{version} fields: {sorted(in_version)})")
        if key not in in_version:
            raise ValueError(f"{path}: field {key!r} is not part of version {version}")
        values[key] = _value(in_version[key], version, raw, f"{path}.{key}")
    return values


def _value(field: BaseField, version: int, raw: Any, path: str) -> Any:
    if raw is None:
        # Arrays are written as length -1 when None, so a None array survives the wire as well.
        if field.is_array() or field.nullable_for_version_q(version):
            return None
        raise ValueError(f"{path}: null is not allowed in version {version}")
    if field.is_struct_array():
        if not isinstance(raw, list):
            raise ValueError(f"{path}: expected a list, got {type(raw).__name__}")
        inner: StructField = field.array_of
        return [_struct_instance(inner, version, item, f"{path}[{i}]") for i, item in enumerate(raw)]
    if field.is_struct():
        return _struct_instance(field, version, raw, path)
    if field.is_array():
        if not isinstance(raw, list):
            raise ValueError(f"{path}: expected a list, got {type(raw).__name__}")
        return [_simple(field.array_of, item, f"{path}[{i}]") for i, item in enumerate(raw)]
    return _simple(field, raw, path)


def _struct_instance(struct: StructField, version: int, raw: Any, path: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path}: expected an object, got {type(raw).__name__}")
    return struct.data_class(version=version, **_struct_values(struct.fields, version, raw, path))


def _simple(field: SimpleField, raw: Any, path: str) -> Any:
    kind = field.type_str
    if kind in INT_RANGES:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError(f"{path}: expected an integer, got {raw!r}")
        lo, hi = INT_RANGES[kind]
        if not lo <= raw <= hi:
            raise ValueError(f"{path}: {raw} out of range {lo}..{hi}")
        return raw
    if kind == "bool":
        if not isinstance(raw, bool):
            raise ValueError(f"{path}: expected true/false, got {raw!r}")
        return raw
    if kind == "string":
        if not isinstance(raw, str):
            raise ValueError(f"{path}: expected a string, got {raw!r}")
        return raw
    if kind == "uuid":
        if isinstance(raw, uuid.UUID):
            return raw
        try:
            return uuid.UUID(raw)
        except (TypeError, ValueError, AttributeError):
            raise ValueError(f"{path}: expected a UUID string, got {raw!r}") from None
    if kind == "float64":
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ValueError(f"{path}: expected a number, got {raw!r}")
        return float(raw)
    if kind in ("bytes", "records"):
        if isinstance(raw, (bytes, bytearray)):
            return bytes(raw)
        if isinstance(raw, str):
            return raw.encode()
        raise ValueError(f"{path}: expected bytes or a string, got {type(raw).__name__}")
    return raw


__all__ = [
    "LeaderAndIsrRequest", "LeaderAndIsrResponse", "StopReplicaRequest", "StopReplicaResponse",
    "UpdateMetadataRequest", "UpdateMetadataResponse", "ControlledShutdownRequest",
    "ControlledShutdownResponse", "CONTROL_MESSAGES", "DISABLE_REMOTE_PARTITION", "INT_RANGES", "to_body", "from_body",
]
