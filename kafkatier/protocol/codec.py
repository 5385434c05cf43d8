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

Hot path: the header flexibility and the generated body decoder are looked up once per (API key, version);
response headers are written here (correlation id, then an empty tagged-field section when flexible) around
kafka-python's compiled body encoder; an :class:`EncodedResponse` (a body already encoded by a purpose-built
codec, e.g. ``produce_codec``) is framed without any message object.
"""
from __future__ import annotations

import importlib
import struct
from typing import Iterator

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBufferPool

from kafkatier.common.byte_utils import read_unsigned_varint
from kafkatier.common.file_records import FileRecords, as_bytes
from kafkatier.protocol import produce_codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.control_requests import CONTROL_MESSAGES
from kafkatier.protocol.errors import Errors

_HEAD = struct.Struct(">hhi")
_SIZE_CORRELATION = struct.Struct(">ii")


class EncodedResponse:
    """A response whose body a purpose-built codec has already encoded (``protocol/produce_codec.py``).

    The network layer frames ``body`` as the answer to the request; everything else that looks at the
    response (attributes such as ``responses``, or code that edits it) gets kafka-python's object, decoded from
    the body on first use (:meth:`decoded`)."""

    __slots__ = ("API_KEY", "version", "parts", "error", "_decoded")

    def __init__(self, api_key: int, version: int, body: bytes | list, error: int = 0):
        self.API_KEY = api_key
        self.version = version
        # the body, or its pieces in order (joined once, with the frame header, when it is sent)
        self.parts = body if isinstance(body, list) else [body]
        self.error = error   # the top-level error code (0 for responses without one)
        self._decoded = None

    @property
    def body(self) -> bytes:
        return b"".join([as_bytes(p) for p in self.parts])

    def decoded(self) -> ApiMessage:
        if self._decoded is None:
            cls = response_class(self.API_KEY)
            assert cls is not None
            self._decoded = cls.decode(self.body, version=self.version)
        return self._decoded

    def __getattr__(self, name: str):
        if name in _NOT_FIELDS or name.startswith("__"):
            # not a message field: the network layer asks every result whether it is a Future
            # (``hasattr(result, "add_done_callback")``), which must not decode the body it holds ready
            raise AttributeError(name)
        return getattr(self.decoded(), name)


_NOT_FIELDS = frozenset({"add_done_callback", "result", "set_result"})


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


_flexible_cache: dict[tuple[int, int], bool] = {}
_decoder_cache: dict[tuple[int, int], object] = {}
_encoder_cache: dict[tuple[type, int], tuple[object, bool]] = {}


def request_header_flexible(api_key: int, api_version: int) -> bool:
    """Whether the request header is v2 (tagged fields); cached per (API key, version)."""
    key = (api_key, api_version)
    flexible = _flexible_cache.get(key)
    if flexible is None:
        flexible = _flexible_cache[key] = _request_header_flexible(api_key, api_version)
    return flexible


def _request_header_flexible(api_key: int, api_version: int) -> bool:
    """Whether the request header is v2 (tagged fields).  Versions above the class's maximum count as flexible
    when the API has any flexible version (a newer client speaking a newer flexible version)."""
    cls = request_class(api_key)
    if cls is None:
        return False
    # Flexible versions are open-ended ("N+"): a version above the maximum is flexible when the maximum is.
    return cls.flexible_version_q(min(api_version, cls.max_version))


def _read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    try:
        value, end = read_unsigned_varint(buf, pos)
    except IndexError:
        raise FrameError("truncated varint in request header") from None
    if end - pos > 5:
        raise FrameError("varint too long in request header")
    return value, end


def _fast_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> RequestHeader:
    """``RequestHeader(...)`` without kafka-python's generic field loop (10 us of every request, 1 us here)."""
    h = _object_new(RequestHeader)
    h._version = None
    h.tags = None
    h.unknown_tags = None
    h.request_api_key = api_key
    h.request_api_version = api_version
    h.correlation_id = correlation_id
    h.client_id = client_id
    return h


def _slow_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> RequestHeader:
    return RequestHeader(request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id,
                         client_id=client_id)


_object_new = object.__new__
# The fast construction only while it builds what the constructor builds (a kafka-python with other header
# fields gets the constructor).
_new_header = _fast_header if (list(RequestHeader.fields) == [
    "request_api_key", "request_api_version", "correlation_id", "client_id"]
    and _fast_header(1, 2, 3, "c") == _slow_header(1, 2, 3, "c")) else _slow_header


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
    header = _new_header(api_key, api_version, correlation_id, client_id)
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
    decoder = _decoder_cache.get((header.request_api_key, version))
    if decoder is None:
        flexible = cls.flexible_version_q(version)
        # kafka-python's public ``decode`` does not say where the body ended (needed to refuse a truncated frame),
        # so the frame is decoded with the compiled decoder behind it (cached per API and version).
        decoder = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls)
        if header.request_api_key == ApiKeys.PRODUCE and produce_codec.supports(version):
            # the same objects, the records left in the frame (protocol/produce_codec.py)
            decoder = produce_codec.request_decoder(version, cls, decoder)
        _decoder_cache[(header.request_api_key, version)] = decoder
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


def encode_response(header: RequestHeader, response: ApiMessage | EncodedResponse,
                    version: int | None = None) -> bytes | bytearray:
    """Encode ``response`` as a size-prefixed frame answering ``header``; ``version`` defaults to the
    request's version (ApiVersions error answers pass 0)."""
    v = header.request_api_version if version is None else version
    if isinstance(response, EncodedResponse):
        return _frame(header.correlation_id, response.API_KEY, v, response.parts)
    if response.API_KEY == ApiKeys.API_VERSIONS:  # its response header is always v0 (kafka-python's override)
        response._header = None
        response.API_VERSION = v
        response.with_header(correlation_id=header.correlation_id)
        return response.encode(header=True, framed=True)
    cls = type(response)
    entry = _encoder_cache.get((cls, v))
    if entry is None:
        flexible = cls.flexible_version_q(v)
        entry = _encoder_cache[(cls, v)] = (cls._struct.compiled_encode_into(v, compact=flexible, tagged=flexible),
                                            flexible)
    encode, flexible = entry
    response._header = None
    response.API_VERSION = v
    with EncodeBufferPool.acquire() as out:
        start = out.pos
        out.pos += 9 if flexible else 8   # size, correlation id, (empty tagged fields)
        encode(response, out)
        _SIZE_CORRELATION.pack_into(out.buf, start, out.pos - start - 4, header.correlation_id)
        if flexible:
            out.buf[start + 8] = 0
        return out.result()


def _frame(correlation_id: int, api_key: int, version: int, parts: list) -> bytes:
    flexible = api_key != ApiKeys.API_VERSIONS and response_class(api_key).flexible_version_q(version)
    size = sum(map(len, parts)) + (5 if flexible else 4)
    head = _SIZE_CORRELATION.pack(size, correlation_id)
    parts = [as_bytes(p) for p in parts]   # FileRecords read here (a TLS socket takes bytes)
    return b"".join([head, b"\x00", *parts] if flexible else [head, *parts])


#: Pieces of an encoded response at least this large (record data) are sent as they are, not copied into a frame.
_UNCOPIED_PIECE = 64 * 1024


def response_buffers(header: RequestHeader, response: EncodedResponse, version: int | None = None) -> list:
    """:func:`encode_response` of an :class:`EncodedResponse` as buffers to send in order (one ``sendmsg``):
    record data as it was read, the small pieces between them joined; a ``FileRecords`` range stays one piece
    (the network layer sends it with ``sendfile``)."""
    v = header.request_api_version if version is None else version
    api_key = response.API_KEY
    flexible = api_key != ApiKeys.API_VERSIONS and response_class(api_key).flexible_version_q(v)
    parts = response.parts
    head = _SIZE_CORRELATION.pack(sum(map(len, parts)) + (5 if flexible else 4), header.correlation_id)
    out: list = []
    small = [head, b"\x00"] if flexible else [head]
    for piece in parts:
        if len(piece) >= _UNCOPIED_PIECE or type(piece) is FileRecords:
            if small:
                out.append(b"".join(small))
            out.append(piece)
            small = []
        else:
            small.append(piece)
    if small:
        out.append(b"".join(small))
    return out


def top_level_error(response: ApiMessage | EncodedResponse) -> int:
    """The response's top-level ``error_code`` for its version, or 0 when it has none."""
    if isinstance(response, EncodedResponse):
        return response.error
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
    "response_class", "request_header_flexible", "decode_request", "encode_response", "response_buffers",
    "error_response",
    "top_level_error", "EncodedResponse",
]
