"""SASL/PLAIN on the broker's single listener (project route; Kafka would configure a separate
``SASL_PLAINTEXT`` listener).

Enabling: broker property ``listener.security.protocol=SASL_PLAINTEXT`` (default ``PLAINTEXT``: no SASL, every
connection is ``User:ANONYMOUS``).  Then a client must send SaslHandshake (API 17, version 1 only: the v0 raw
token exchange is not supported) with mechanism ``PLAIN`` and SaslAuthenticate (API 36, v0-2) with the PLAIN
token ``authzid NUL username NUL password``; the connection's principal becomes ``User:<username>``.  Before
that, only ApiVersions, the two SASL APIs and follower Fetch requests (replica id >= 0) are accepted; any other
request closes the connection, as Kafka does.  Follower fetches are exempt because the brokers' replica fetchers
do not authenticate: this stands in for Kafka's separate inter-broker PLAINTEXT listener.

Credentials (project choice): ``/config/users/<name>`` = ``{"version":1,"config":{"plain.password":"..."}}``
in ZooKeeper (read at each authentication, so changes apply to the next login; see :func:`set_user_password`),
plus Kafka's static JAAS users: ``user_<name>="<password>"`` options of the broker property
``listener.name.sasl_plaintext.plain.sasl.jaas.config`` (or ``sasl.jaas.config``), which win over ZooKeeper.

Failures answer SASL_AUTHENTICATION_FAILED with Kafka's message (``Authentication failed: Invalid username or
password``); the connection stays unauthenticated (Kafka closes it after the answer).
"""
from __future__ import annotations

import hmac
import json
from typing import Any, Mapping

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors
from kafkatier.zk import paths

log = get_logger("server.sasl")

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS, FETCH = 17, 36, 18, 1
HANDSHAKE_VERSIONS = (1, 1)
AUTHENTICATE_VERSIONS = (0, 2)
MECHANISMS = ("PLAIN",)
PASSWORD_KEY = "plain.password"
JAAS_KEYS = ("listener.name.sasl_plaintext.plain.sasl.jaas.config", "sasl.jaas.config")
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"


class SaslAuthenticationError(Exception):
    """A PLAIN token that does not authenticate; the text is Kafka's message."""


def sasl_enabled(overrides: Mapping[str, Any]) -> bool:
    return str(overrides.get("listener.security.protocol", "PLAINTEXT")).strip().upper() == "SASL_PLAINTEXT"


def parse_plain_token(token: bytes) -> tuple[str, str]:
    """RFC 4616 ``[authzid] NUL authcid NUL passwd`` -> (username, password), with Kafka's checks."""
    try:
        parts = bytes(token).decode("utf-8").split("\x00")
    except UnicodeDecodeError:
        raise SaslAuthenticationError("Authentication failed: Invalid SASL/PLAIN response: not UTF-8") from None
    if len(parts) != 3:
        raise SaslAuthenticationError("Authentication failed: Invalid SASL/PLAIN response: expected 3 tokens, got "
                                      f"{len(parts)}")
    authzid, username, password = parts
    if not username:
        raise SaslAuthenticationError("Authentication failed: username not specified")
    if not password:
        raise SaslAuthenticationError("Authentication failed: password not specified")
    if authzid and authzid != username:
        raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                      "different from username")
    return username, password


def static_users(overrides: Mapping[str, Any]) -> dict[str, str]:
    """``user_<name>="<password>"`` options of the broker's PlainLoginModule JAAS config."""
    from kafkatier.admin.bootstrap import BootstrapConfigError, parse_jaas_config

    for key in JAAS_KEYS:
        value = overrides.get(key)
        if not value:
            continue
        try:
            _, opts = parse_jaas_config(str(value))
        except BootstrapConfigError as e:
            log.error("ignoring a malformed JAAS config %s", kv(key=key, error=str(e).replace(" ", "_")))
            return {}
        return {k[len("user_"):]: v for k, v in opts.items() if k.startswith("user_") and len(k) > len("user_")}
    return {}


class PlainCredentialStore:
    """Checks PLAIN credentials against the static JAAS users, then ``/config/users/<name>`` in ZooKeeper."""

    def __init__(self, zk, static: Mapping[str, str] | None = None):
        self.zk = zk
        self.static = dict(static or {})

    def password_of(self, username: str) -> str | None:
        if username in self.static:
            return self.static[username]
        if self.zk is None or "/" in username:
            return None
        try:
            data, _ = self.zk.get(paths.entity_config("users", username))
            body = json.loads(data)
            value = body["config"].get(PASSWORD_KEY)
            return value if isinstance(value, str) else None
        except NoNodeError:
            return None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("malformed user config skipped %s", kv(user=username, error=type(e).__name__))
            return None

    def verify(self, username: str, password: str) -> bool:
        expected = self.password_of(username)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())


def set_user_password(zk, username: str, password: str) -> None:
    """Store a SASL/PLAIN password in ``/config/users/<name>``, keeping the user's other config keys."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

    if not username or "/" in username:
        raise ValueError(f"invalid user name {username!r}")
    path = paths.entity_config("users", username)
    for attempt in Retrying(retry=retry_if_exception_type((BadVersionError, NodeExistsError, NoNodeError)),
                            stop=stop_after_attempt(10), wait=wait_exponential(multiplier=0.01, max=0.5),
                            reraise=True):
        with attempt:
            try:
                data, stat = zk.get(path)
                body = json.loads(data) if data else {}
                config = dict(body.get("config") or {}) if isinstance(body, dict) else {}
                version = stat.version
            except NoNodeError:
                config, version = {}, None
            config[PASSWORD_KEY] = password
            payload = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
            if version is None:
                zk.create(path, payload, makepath=True)
            else:
                zk.set(path, payload, version=version)


class SaslPlainServer:
    """SaslHandshake / SaslAuthenticate handlers and the pre-authentication request gate.  Per-connection state
    lives in ``ConnectionContext.session`` (``sasl_mechanism``, ``principal``)."""

    def __init__(self, store: PlainCredentialStore):
        self.store = store
        self.metrics = {"authenticated": 0, "failed": 0}

    def gate(self, context, header, request) -> bool:
        if context.session.get("principal") is not None:
            return True
        key = header.request_api_key
        if key in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return True
        return key == FETCH and getattr(request, "replica_id", -1) >= 0

    def handle_handshake(self, header, request, context):
        v = header.request_api_version
        if context.session.get("principal") is not None:
            err = Errors.ILLEGAL_SASL_STATE
        elif request.mechanism not in MECHANISMS:
            err = Errors.UNSUPPORTED_SASL_MECHANISM
            log.info("unsupported SASL mechanism %s", kv(mechanism=request.mechanism,
                                                        connection=context.connection_id))
        else:
            err = Errors.NONE
            context.session["sasl_mechanism"] = request.mechanism
        return build(codec.response_class(SASL_HANDSHAKE), v, {"error_code": int(err), "mechanisms": list(MECHANISMS)})

    def handle_authenticate(self, header, request, context):
        v = header.request_api_version

        def answer(err: Errors, message: str | None):
            return build(codec.response_class(SASL_AUTHENTICATE), v, {
                "error_code": int(err), "error_message": message, "auth_bytes": b"", "session_lifetime_ms": 0})
        if context.session.get("principal") is not None or context.session.get("sasl_mechanism") != "PLAIN":
            return answer(Errors.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request: no SaslHandshake for "
                                                     "PLAIN on this connection, or already authenticated")
        context.session.pop("sasl_mechanism", None)  # one attempt per handshake
        try:
            username, password = parse_plain_token(request.auth_bytes or b"")
            if not self.store.verify(username, password):
                raise SaslAuthenticationError(INVALID_CREDENTIALS)
        except SaslAuthenticationError as e:
            self.metrics["failed"] += 1
            log.info("SASL/PLAIN authentication failed %s", kv(connection=context.connection_id,
                                                                 reason=str(e).replace(" ", "_")))
            return answer(Errors.SASL_AUTHENTICATION_FAILED, str(e))
        context.session["principal"] = f"User:{username}"
        self.metrics["authenticated"] += 1
        log.info("SASL/PLAIN authenticated %s", kv(connection=context.connection_id, principal=f"User:{username}"))
        return answer(Errors.NONE, None)


def sasl_server_from_config(zk, overrides: Mapping[str, Any]) -> SaslPlainServer | None:
    """The listener's SASL/PLAIN server if ``listener.security.protocol=SASL_PLAINTEXT``, else None.
    ``KafkaApis`` serves APIs 17 and 36 with it and ``SocketServer`` gates the listener with :meth:`gate`."""
    if not sasl_enabled(overrides):
        return None
    mechanisms = str(overrides.get("sasl.enabled.mechanisms", "PLAIN"))
    if "PLAIN" not in [m.strip().upper() for m in mechanisms.split(",")]:
        log.warning("sasl.enabled.mechanisms does not list PLAIN; only PLAIN is supported %s", kv(value=mechanisms))
    sasl = SaslPlainServer(PlainCredentialStore(zk, static_users(overrides)))
    log.info("SASL/PLAIN required on the listener %s", kv(static_users=len(sasl.store.static)))
    return sasl
