"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / RFC 7677): Kafka's ``ScramFormatter``,
``ScramCredentialUtils``, ``ScramSaslServer`` and ``ScramSaslClient``, for the broker and its inter-broker clients.

Credentials are stored as Kafka stores them in ``/config/users/<name>``: one config per mechanism,
``"SCRAM-SHA-256": "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"``; the password itself is never
stored.  The exchange is Kafka's: client-first ``n,,n=<user>,r=<nonce>`` (an authorization id must equal the user),
server-first ``r=<nonce>,s=<salt>,i=<iterations>``, client-final ``c=biws,r=<nonce>,p=<proof>``, server-final
``v=<signature>``.  Failures raise :class:`ScramError` with Kafka's messages.

Deliberate differences: no token authentication (``tokenauth`` extension) and no SASLprep of passwords (Kafka's
formatter does not normalise either beyond UTF-8).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from typing import Callable

import attrs

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's ScramMechanism ids (AlterUserScramCredentials / DescribeUserScramCredentials).
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
DEFAULT_ITERATIONS = 4096
INVALID_CREDENTIALS = "Authentication failed: Invalid user credentials"

_CLIENT_FIRST = re.compile(r"^n,(a=(?P<authzid>[^,]*))?,n=(?P<user>[^,]*),r=(?P<nonce>[^,]*)(?P<ext>,.*)?$")
_CLIENT_FINAL = re.compile(r"^c=(?P<channel>[^,]*),r=(?P<nonce>[^,]*)(?P<ext>,[^p].*?)?,p=(?P<proof>[^,]*)$")
_SERVER_FIRST = re.compile(r"^r=(?P<nonce>[^,]*),s=(?P<salt>[^,]*),i=(?P<iterations>[0-9]+)(,.*)?$")
_SERVER_FINAL = re.compile(r"^(e=(?P<error>[^,]*)|v=(?P<signature>[^,]*))(,.*)?$")


class ScramError(Exception):
    """A failed SCRAM exchange; the text is Kafka's message."""


@attrs.frozen
class ScramCredential:
    """What the broker keeps for one user and mechanism (Kafka's ``ScramCredential``)."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_config(cls, text: str) -> ScramCredential:
        """Parse the stored form; ValueError if malformed."""
        fields = dict(part.split("=", 1) for part in str(text).split(",") if "=" in part)
        try:
            iterations = int(fields["iterations"])
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), iterations)
        except (KeyError, ValueError) as e:
            raise ValueError(f"malformed SCRAM credential ({type(e).__name__})") from None


# --- ScramFormatter -----------------------------------------------------------------------------------------

def _hmac(algorithm: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, algorithm).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    algorithm = MECHANISMS[mechanism]
    client_key = _hmac(algorithm, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(algorithm, client_key).digest(),
                           _hmac(algorithm, salted, b"Server Key"), iterations)


def new_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
    """A fresh salted credential for ``password`` (Kafka's ``ScramFormatter.generateCredential``)."""
    salt = salt if salt is not None else os.urandom(32)
    return credential_from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations), salt,
                                           iterations)


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Does ``password`` match the stored credential (SASL/PLAIN against SCRAM-stored users)."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    return hmac.compare_digest(credential_from_salted_password(mechanism, salted, credential.salt,
                                                               credential.iterations).stored_key,
                               credential.stored_key)


def _username(saslname: str) -> str:
    """RFC 5802 ``saslname``: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is invalid."""
    if re.search(r"=(?!2C|3D)", saslname):
        raise ScramError("Authentication failed: Invalid user name")
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


# --- server -------------------------------------------------------------------------------------------------

class ScramSaslServer:
    """One SCRAM exchange on the broker: :meth:`evaluate` the client's first and final messages in turn.

    ``lookup(username, mechanism) -> ScramCredential | None``.  After success :attr:`username` is set."""

    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None]):
        if mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SCRAM mechanism {mechanism}")
        self.mechanism = mechanism
        self.algorithm = MECHANISMS[mechanism]
        self.lookup = lookup
        self.state = "RECEIVE_CLIENT_FIRST"
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE"

    def evaluate(self, response: bytes) -> bytes:
        try:
            text = bytes(response).decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("Authentication failed: SCRAM message is not UTF-8") from None
        if self.state == "RECEIVE_CLIENT_FIRST":
            return self._client_first(text)
        if self.state == "RECEIVE_CLIENT_FINAL":
            return self._client_final(text)
        raise ScramError(f"Authentication failed: unexpected SCRAM message in state {self.state}")

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.match(text)
        if m is None:
            self.state = "FAILED"
            raise ScramError("Authentication failed: Invalid SCRAM client first message")
        username = _username(m["user"])
        if m["authzid"] and _username(m["authzid"]) != username:
            self.state = "FAILED"
            raise ScramError("Authentication failed: Authorization id does not match the authentication id")
        if m["ext"] and "tokenauth=true" in m["ext"]:
            self.state = "FAILED"
            raise ScramError("Authentication failed: delegation tokens are not supported")
        credential = self.lookup(username, self.mechanism)
        if credential is None or not m["nonce"]:
            self.state = "FAILED"
            raise ScramError(INVALID_CREDENTIALS)
        self.username = username
        self._credential = credential
        self._nonce = m["nonce"] + base64.b64encode(os.urandom(18)).decode()
        self._client_first_bare = text[text.index("n=", 2):]
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self.state = "RECEIVE_CLIENT_FINAL"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        self.state = "FAILED"
        m = _CLIENT_FINAL.match(text)
        if m is None:
            raise ScramError("Authentication failed: Invalid SCRAM client final message")
        if m["nonce"] != self._nonce:
            raise ScramError("Authentication failed: Invalid client nonce in the final client message.")
        credential = self._credential
        assert credential is not None
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(m["proof"], validate=True)
        except ValueError:
            raise ScramError(INVALID_CREDENTIALS) from None
        signature = _hmac(self.algorithm, credential.stored_key, auth_message)
        client_key = _xor(proof, signature)
        if len(proof) != len(signature) or not hmac.compare_digest(
                hashlib.new(self.algorithm, client_key).digest(), credential.stored_key):
            raise ScramError(INVALID_CREDENTIALS)
        self.state = "COMPLETE"
        server_signature = _hmac(self.algorithm, credential.server_key, auth_message)
        return f"v={base64.b64encode(server_signature).decode()}".encode()


# --- client (inter-broker) ----------------------------------------------------------------------------------

class ScramSaslClient:
    """The client side, for the brokers' own connections: :meth:`first`, :meth:`final`, :meth:`verify`."""

    def __init__(self, mechanism: str, username: str, password: str):
        self.mechanism, self.algorithm = mechanism, MECHANISMS[mechanism]
        self.username, self.password = username, password
        self._nonce = base64.b64encode(os.urandom(18)).decode()
        self._client_first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = bytes(server_first).decode("utf-8")
        m = _SERVER_FIRST.match(text)
        if m is None or not m["nonce"].startswith(self._nonce):
            raise ScramError("Invalid SCRAM server first message")
        salt, iterations = base64.b64decode(m["salt"]), int(m["iterations"])
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        without_proof = f"c=biws,r={m['nonce']}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.algorithm, salted, b"Client Key")
        stored_key = hashlib.new(self.algorithm, client_key).digest()
        proof = _xor(client_key, _hmac(self.algorithm, stored_key, auth_message))
        self._server_signature = _hmac(self.algorithm, _hmac(self.algorithm, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        m = _SERVER_FINAL.match(bytes(server_final).decode("utf-8", "replace"))
        if m is None or m["error"] is not None or \
                base64.b64decode(m["signature"] or "") != self._server_signature:
            raise ScramError("Invalid SCRAM server final message: the server's signature does not match")
