"""Build kafka-python messages from plain dicts (snake_case), keeping only the fields of the given version.

Handlers write responses as nested dicts; :func:`build` turns them into the message class instance that the
network layer encodes.  ``records`` fields are passed through as bytes (no per-record work).

A key that names no field of the message in any version is a mistake in the caller (a misspelt or renamed
field would otherwise be dropped without a word and the client would see the field's default): it raises
:class:`UnknownFieldError` naming the path.  A key of a field that exists only in other versions is dropped, so
one dict can answer every version a handler supports (Kafka's generated ``Data`` classes do the same when they
write a version without the field).

Only kafka-python's public message surface is read: ``Cls.fields`` and, for nested structs, ``field.fields``
and ``field.array_of``.
"""
from __future__ import annotations

from typing import Any, Mapping

from kafka.protocol.api_message import ApiMessage


class UnknownFieldError(ValueError):
    """A dict key that matches no field of the message (in any version)."""


def primary(cls: type[ApiMessage]) -> type[ApiMessage]:
    """The unversioned class of ``cls`` (``StopReplicaRequest[5]`` -> ``StopReplicaRequest``)."""
    return cls[None] if getattr(cls, "_class_version", None) is not None else cls  # type: ignore[index]


def build(cls: type[ApiMessage], version: int, body: Mapping[str, Any]) -> ApiMessage:
    cls = primary(cls)
    return cls(version=version, **_values(cls.fields, version, body, cls.__name__))


def _values(fields: Mapping[str, Any], version: int, body: Mapping[str, Any], path: str) -> dict[str, Any]:
    out = {}
    for name, raw in body.items():
        field = fields.get(name)
        if field is None:
            raise UnknownFieldError(f"{path}: no field {name!r} (fields: {sorted(fields)})")
        if not field.for_version_q(version):
            continue
        if raw is None:
            out[name] = None
        elif field.is_struct_array():
            inner = field.array_of
            out[name] = [inner.data_class(version=version, **_values(inner.fields, version, item, f"{path}.{name}"))
                         for item in raw]
        elif field.is_struct():
            out[name] = field.data_class(version=version, **_values(field.fields, version, raw, f"{path}.{name}"))
        else:
            out[name] = raw
    return out


__all__ = ["build", "primary", "UnknownFieldError"]
