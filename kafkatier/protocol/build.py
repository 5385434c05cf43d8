"""Build kafka-python messages from plain dicts (snake_case), keeping only the fields of the given version.

Handlers write responses as nested dicts; :func:`build` turns them into the message class instance that the
network layer encodes.  ``records`` fields are passed through as bytes (no per-record work).
"""
from __future__ import annotations

from typing import Any, Mapping

from kafka.protocol.api_message import ApiMessage


def build(cls: type[ApiMessage], version: int, body: Mapping[str, Any]) -> ApiMessage:
    cls = cls[None] if getattr(cls, "_class_version", None) is not None else cls
    return cls(version=version, **_values(cls._struct, version, body))


def _values(struct, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for field in struct._fields:
        if field.name not in body or not field.for_version_q(version):
            continue
        raw = body[field.name]
        if raw is None:
            out[field.name] = None
        elif field.is_struct_array():
            inner = field.array_of
            out[field.name] = [inner.data_class(version=version, **_values(inner, version, item)) for item in raw]
        elif field.is_struct():
            out[field.name] = field.data_class(version=version, **_values(field, version, raw))
        else:
            out[field.name] = raw
    return out
