"""A small blocking Kafka-protocol client for broker-to-broker requests (follower fetches).

Requests and responses are kafka-python's message classes; one request at a time per connection.
"""
from __future__ import annotations

import io
import itertools
import socket
import struct

from kafka.protocol.api_message import ApiMessage

_SIZE = struct.Struct(">i")


class BrokerConnectionError(ConnectionError):
    pass


class BrokerClient:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0):
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._corr = itertools.count(1)

    def connect(self) -> None:
        if self._sock is None:
            try:
                s = socket.create_connection((self.host, self.port), timeout=min(self.timeout_s, 10.0))
            except OSError as e:
                raise BrokerConnectionError(f"cannot connect to {self.host}:{self.port}: {e}") from e
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(self.timeout_s)
            self._sock = s

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def send(self, request: ApiMessage, response_class: type[ApiMessage], version: int) -> ApiMessage:
        self.connect()
        corr = next(self._corr)
        request.with_header(correlation_id=corr, client_id=self.client_id)
        data = request.encode(version=version, header=True, framed=True)
        try:
            self._sock.sendall(data)
            size = _SIZE.unpack(self._recv_exact(4))[0]
            frame = self._recv_exact(size)
        except (OSError, struct.error) as e:
            self.close()
            raise BrokerConnectionError(f"request to {self.host}:{self.port} failed: {e}") from e
        resp = _decode_response(response_class, frame, version)
        if resp.header is not None and resp.header.correlation_id != corr:
            self.close()
            raise BrokerConnectionError(f"correlation id mismatch: sent {corr}, got {resp.header.correlation_id}")
        return resp

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise BrokerConnectionError("connection closed by peer")
            got += k
        return buf


_HEADER_PREFIX = 256  # bytes handed to the header decoder: a correlation id plus (flexible) tagged fields


def _decode_response(response_class: type[ApiMessage], frame: bytearray, version: int) -> ApiMessage:
    """Decode a response frame (header included) without copying it whole: kafka-python's
    ``decode(header=True)`` copies the entire frame to parse the few header bytes, which for a follower's
    fetch response means one extra copy of every replicated byte."""
    hdr_data = io.BytesIO(bytes(frame[:_HEADER_PREFIX]))
    try:
        hdr = response_class.parse_header(hdr_data, version=version)
    except Exception:  # noqa: BLE001 - e.g. tagged header fields longer than the prefix: the slow path
        return response_class.decode(frame, version=version, header=True)
    resp = response_class.decode(memoryview(frame)[hdr_data.tell():], version=version, header=False)
    resp._header = hdr
    return resp
