"""Request/response class registry and the frame codec the broker's network layer uses.

:data:`REGISTRY` maps every API key with a known message class (all of kafka-python's generated classes plus
our control-plane ones, keys 4-7) to ``(request class, response class)``.  :func:`decode_request` turns one
received frame (the bytes after the 4-byte size) into ``(header, request)``; :func:`encode_response` turns a
response back into a size-prefixed frame.

Header rules (Kafka's):

- request header v2 (tagged fields after the client id) for flexible request versions, v1 otherwise; the
  client id is always a classic int16-length string;
- ControlledShutdown v0 uses request header v0 (no client id);
- response header v1 (tagged fields) for flexible versions, v0 otherwise -- except ApiVersions, whose response
  header is always v0;
- an ApiVersions request of a version we cannot parse still yields its header, so the caller can answer
  UNSUPPORTED_VERSION with an ApiVersionsResponse v0.

The request body is decoded from a memoryview over the frame, so record payloads are not copied here.
"""
from __future__ import annotations

import importlib
import struct
from typing import Iterator

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage

from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.control_requests import CONTROL_MESSAGES
from kafkatier.protocol.errors import Errors

_HEAD = struct.Struct(">hhi")


class FrameError(ValueError):
    """A frame that cannot be decoded; the connection it came from should be closed.

    ``header`` is set when the request header was readable (so the failure can be attributed to an API)."""

    def __init__(self, message: str, header: RequestHeader | None = None):
        super().__init__(message)
        self.header = header


class UnknownApiError(FrameError):
    """The frame names an API key we have no message class for."""


class UnsupportedVersionError(FrameError):
    """The frame's API version is outside what its message class can decode.  ``header`` is always set."""


def _kafka_python_messages() -> Iterator[type[ApiMessage]]:
    # Importing the packages defines (and so registers as subclasses) all generated message classes.
    for package in ("admin", "consumer", "metadata", "producer", "sasl"):
        importlib.import_module(f"kafka.protocol.{package}")

    stack = list(ApiMessage.__subclasses__())
    seen: set[type] = set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and cls.__module__.startswith("kafka.protocol."):
            yield cls


def _build_registry() -> dict[int, tuple[type[ApiMessage], type[ApiMessage]]]:
    requests: dict[int, type[ApiMessage]] = {}
    responses: dict[int, type[ApiMessage]] = {}
    for cls in _kafka_python_messages():
        target = requests if cls.json["type"] == "request" else responses
        if cls.API_KEY in target and target[cls.API_KEY] is not cls:
            raise RuntimeError(f"two kafka-python classes for api key {cls.API_KEY}: {target[cls.API_KEY]}, {cls}")
        target[cls.API_KEY] = cls
    registry = {k: (requests[k], responses[k]) for k in sorted(requests) if k in responses}
    registry.update(CONTROL_MESSAGES)
    return dict(sorted(registry.items()))


REGISTRY: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = _build_registry()


def api_name(api_key: int) -> str:
    """Kafka's name for an API key (``Produce``, ``StopReplica``); the number as text if unknown."""
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def request_class(api_key: int) -> type[ApiMessage] | None:
    entry = REGISTRY.get(api_key)
    return entry[0] if entry else None


def response_class(api_key: int) -> type[ApiMessage] | None:
    entry = REGISTRY.get(api_key)
    return entry[1] if entry else None


def request_header_flexible(api_key: int, api_version: int) -> bool:
    """Whether the request header is v2 (tagged fields).  Versions above the class's maximum count as flexible
    when the API has any flexible version (a newer client speaking a newer flexible version)."""
    cls = request_class(api_key)
    if cls is None or cls._flexible_versions is None:
        return False
    lo, hi = cls._flexible_versions
    if lo < 0:
        return False
    return api_version >= lo if api_version > cls.max_version else lo <= api_version <= hi


def _read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise FrameError("truncated varint in request header")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FrameError("varint too long in request header")


def _decode_header(frame: memoryview) -> tuple[RequestHeader, int]:
    if len(frame) < _HEAD.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    pos = _HEAD.size
    client_id: str | None = None
    if not (api_key == ApiKeys.CONTROLLED_SHUTDOWN and api_version == 0):
        if pos + 2 > len(frame):
            raise FrameError("truncated client id in request header")
        (n,) = struct.unpack_from(">h", frame, pos)
        pos += 2
        if n >= 0:
            if pos + n > len(frame):
                raise FrameError("truncated client id in request header")
            try:
                client_id = bytes(frame[pos:pos + n]).decode("utf-8")
            except UnicodeDecodeError:
                raise FrameError("client id is not UTF-8") from None
            pos += n
        elif n != -1:
            raise FrameError(f"invalid client id length {n}")
    header = RequestHeader(request_api_key=api_key, request_api_version=api_version,
                           correlation_id=correlation_id, client_id=client_id)
    if request_header_flexible(api_key, api_version):
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
            if pos > len(frame):
                raise FrameError("truncated tagged fields in request header", header)
    return header, pos


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, ApiMessage]:
    """Decode one frame (without its size prefix) into ``(header, request)``.

    Raises :class:`UnknownApiError` for an API key without classes, :class:`UnsupportedVersionError` for a
    version the class cannot decode (header attached), and :class:`FrameError` for anything undecodable."""
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    header, pos = _decode_header(view)
    cls = request_class(header.request_api_key)
    if cls is None:
        raise UnknownApiError(f"unknown api key {header.request_api_key}", header)
    version = header.request_api_version
    if not 0 <= version <= cls.max_version:
        raise UnsupportedVersionError(
            f"{api_name(header.request_api_key)} v{version} is outside 0..{cls.max_version}", header)
    body = view[pos:]
    flexible = cls.flexible_version_q(version)
    # kafka-python's public ``decode`` does not say where the body ended (needed to refuse a truncated frame), so
    # the frame is decoded with the compiled decoder behind it: the one private member this package reads.
    decoder = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls)
    try:
        request, end = decoder(body, 0)
    except Exception as e:  # the generated decoders raise struct.error, IndexError, UnicodeDecodeError, ...
        raise FrameError(f"cannot decode {api_name(header.request_api_key)} v{version} body: "
                         f"{type(e).__name__}: {e}", header) from e
    if end > len(body):  # a bytes/string slice ran past the end: the frame is truncated
        raise FrameError(f"{api_name(header.request_api_key)} v{version} body is truncated "
                         f"({len(body)} bytes, needs {end})", header)
    request._header = header
    return header, request


def encode_response(header: RequestHeader, response: ApiMessage, version: int | None = None) -> bytearray:
    """Encode ``response`` as a size-prefixed frame answering ``header``; ``version`` defaults to the
    request's version (ApiVersions error answers pass 0)."""
    v = header.request_api_version if version is None else version
    # Set the version before attaching the header: kafka-python's version setter assumes a request header.
    response._header = None
    response.API_VERSION = v
    response.with_header(correlation_id=header.correlation_id)
    return response.encode(header=True, framed=True)


def top_level_error(response: ApiMessage) -> int:
    """The response's top-level ``error_code`` for its version, or 0 when it has none."""
    field = type(response).fields.get("error_code")
    if field is None or response.version is None or not field.for_version_q(response.version):
        return 0
    return getattr(response, "error_code", 0) or 0


def error_response(header: RequestHeader, error: int = Errors.UNKNOWN_SERVER_ERROR) -> ApiMessage | None:
    """A generic error answer: the response class at the request's version with its top-level ``error_code``
    set and every other field at its default.  ``None`` when the response has no top-level error code (or
    cannot be built), in which case the request cannot be answered generically."""
    cls = response_class(header.request_api_key)
    version = header.request_api_version
    if cls is None or not 0 <= version <= cls.max_version:
        return None
    field = cls.fields.get("error_code")
    if field is None or not field.for_version_q(version):
        return None
    try:
        return cls(version=version, error_code=int(error))
    except Exception:  # a required nested struct without default: not answerable generically
        return None


__all__ = [
    "REGISTRY", "FrameError", "UnknownApiError", "UnsupportedVersionError", "api_name", "request_class",
    "response_class", "request_header_flexible", "decode_request", "encode_response", "error_response",
    "top_level_error",
]
