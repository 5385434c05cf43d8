"""A small blocking Kafka-protocol client for broker-to-broker requests (follower fetches).

Requests and responses are kafka-python's message classes; one request at a time per connection.  ``login`` says
how to reach the other broker: ``server/sasl.SaslLogin`` (the inter-broker mechanism and credentials), or an
:class:`InterBrokerSecurity` when the inter-broker listener speaks TLS (``SSL``, or ``SASL_SSL`` with a login).
A TLS connection handshakes first (the broker's certificate and host name checked, the broker's own keystore as
its client certificate); then, with a SASL login, each new connection authenticates with SaslHandshake v1 +
SaslAuthenticate (PLAIN, or SCRAM's two rounds); a refused login raises :class:`BrokerAuthenticationError`.
"""
from __future__ import annotations

import io
import itertools
import socket
import ssl
import struct

import attrs
from kafka.protocol.api_message import ApiMessage

from kafkatier.logsetup import get_logger, kv

log = get_logger("server.broker-client")

_SIZE = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">ihhi")   # size, api key, api version, correlation id (then the client id)
_INT16 = struct.Struct(">h")


class BrokerConnectionError(ConnectionError):
    pass


class BrokerAuthenticationError(BrokerConnectionError):
    """The broker refused this client's SASL login."""


@attrs.frozen
class InterBrokerSecurity:
    """How a broker's own clients reach another broker when the inter-broker listener speaks TLS."""
    ssl_context: ssl.SSLContext
    sasl: object | None = None  # server/sasl.SaslLogin, for SASL_SSL


class BrokerClient:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0, login=None):
        self.host, self.port = host, port
        self.ssl_context: ssl.SSLContext | None = None
        if isinstance(login, InterBrokerSecurity):
            self.ssl_context, login = login.ssl_context, login.sasl
        self.login = login
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
            if self.ssl_context is not None:
                try:
                    s = self.ssl_context.wrap_socket(s, server_hostname=self.host)
                except (OSError, ValueError) as e:
                    s.close()
                    raise BrokerConnectionError(f"TLS handshake with {self.host}:{self.port} failed: {e}") from e
            s.settimeout(self.timeout_s)
            self._sock = s
            if self.login is not None:
                try:
                    self._authenticate(self.login)
                except BaseException:
                    self.close()
                    raise

    def _authenticate(self, login) -> None:
        from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse
        from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

        from kafkatier.server import scram

        r = self._exchange(SaslHandshakeRequest(mechanism=login.mechanism), SaslHandshakeResponse, 1)
        if r.error_code:
            raise BrokerAuthenticationError(f"SASL handshake for {login.mechanism} refused by {self.host}:{self.port} "
                                            f"(error {r.error_code})")

        def step(token: bytes) -> bytes:
            resp = self._exchange(SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse, 2)
            if resp.error_code:
                log.warning("inter-broker SASL login refused %s", kv(
                    broker=f"{self.host}:{self.port}", mechanism=login.mechanism, user=login.username,
                    client_id=self.client_id))
                raise BrokerAuthenticationError(f"SASL login as {login.username} refused by {self.host}:{self.port}: "
                                                f"{resp.error_message}")
            return bytes(resp.auth_bytes or b"")
        if login.mechanism == "PLAIN":
            step(b"\x00" + login.username.encode() + b"\x00" + login.password.encode())
            return
        client = scram.ScramSaslClient(login.mechanism, login.username, login.password)
        try:
            server_first = step(client.first())
            client.verify(step(client.final(server_first)))
        except scram.ScramError as e:
            raise BrokerAuthenticationError(f"SCRAM login to {self.host}:{self.port} failed: {e}") from None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def send(self, request: ApiMessage, response_class: type[ApiMessage], version: int) -> ApiMessage:
        self.connect()
        return self._exchange(request, response_class, version)

    def _exchange(self, request: ApiMessage, response_class: type[ApiMessage], version: int) -> ApiMessage:
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

    def send_encoded(self, api_key: int, version: int, body: bytes) -> memoryview:
        """A request whose body a purpose-built codec encoded (non-flexible versions: request header v1,
        response header v0); returns the response body after its header (``protocol/fetch_codec.py`` for the
        follower's fetches)."""
        self.connect()
        corr = next(self._corr)
        client_id = self.client_id.encode("utf-8")
        head = _REQUEST_HEAD.pack(_REQUEST_HEAD.size - 4 + 2 + len(client_id) + len(body), api_key, version, corr)
        try:
            self._sock.sendall(b"".join((head, _INT16.pack(len(client_id)), client_id, body)))
            size = _SIZE.unpack(self._recv_exact(4))[0]
            frame = self._recv_exact(size)
        except (OSError, struct.error) as e:
            self.close()
            raise BrokerConnectionError(f"request to {self.host}:{self.port} failed: {e}") from e
        if size < 4 or _SIZE.unpack_from(frame, 0)[0] != corr:
            self.close()
            raise BrokerConnectionError(f"correlation id mismatch: sent {corr}, got "
                                        f"{_SIZE.unpack_from(frame, 0)[0] if size >= 4 else None}")
        return memoryview(frame)[4:]

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
