"""SASL on the broker's single listener: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (project route; Kafka would
configure a separate ``SASL_PLAINTEXT`` listener).  Kafka's ``SaslServerAuthenticator`` with its ``PlainSaslServer``
and ``ScramSaslServer`` (``server/scram.py``).

Enabling: broker property ``listener.security.protocol=SASL_PLAINTEXT`` (default ``PLAINTEXT``: no SASL, every
connection is ``User:ANONYMOUS``); ``sasl.enabled.mechanisms`` (default ``PLAIN``; any of PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512).  A client sends SaslHandshake (API 17) and SaslAuthenticate (API 36, v0-2): one round for PLAIN
(``authzid NUL username NUL password``), two for SCRAM.  After a SaslHandshake v0 (Kafka 0.10.0's clients) the
tokens come as bare size-prefixed frames instead, and are answered the same way (no SaslAuthenticate framing; a
failed login closes the connection without an answer, after the delay below), as Kafka's v0 semantics.  The
connection's principal becomes ``User:<username>``.  Before that only ApiVersions and the two SASL APIs are
accepted (any other request -- a Fetch claiming a replica id included -- closes the connection, as Kafka does),
and a frame larger than ``sasl.server.max.receive.size`` (Kafka: 512 KB) closes it before it is read.

Credentials: SCRAM users live in ``/config/users/<name>`` in Kafka's format (``SCRAM-SHA-256`` ->
``salt=...,stored_key=...,server_key=...,iterations=4096``; written by AlterUserScramCredentials /
``kafkatier configs --entity-type users``, read at each login so changes apply to the next one).  PLAIN checks the
static JAAS users first -- ``user_<name>="<password>"`` options of ``listener.name.sasl_plaintext.plain.sasl.jaas.config``
(or ``sasl.jaas.config``) -- then the user's stored SCRAM credential (project choice: Kafka's PLAIN has no store; a
password is never kept in ZooKeeper in clear, and a legacy ``plain.password`` entry is ignored with a warning).

Inter-broker: with SASL on, the brokers' own clients (follower fetchers, forwarding, tiered rebuilds) log in with
``sasl.mechanism.inter.broker.protocol`` (default PLAIN) and the ``username`` / ``password`` options of that
mechanism's JAAS config (:func:`inter_broker_login`), as Kafka's inter-broker listener does.

Failures answer SASL_AUTHENTICATION_FAILED with Kafka's message and close the connection after
``connection.failed.authentication.delay.ms`` (Kafka's default 100 ms), so guessing passwords is slow.
"""
from __future__ import annotations

import hmac
import json
import threading
from concurrent.futures import Future
from typing import Any, Mapping

import attrs
from kafkatier.zk.errors import BadVersionError, NodeExistsError, NoNodeError

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors
from kafkatier.server import scram
from kafkatier.server.config import broker_setting
from kafkatier.server.network import RAW_SASL_HANDLER, Authenticated, CloseAfterResponse, RawSaslToken
from kafkatier.zk import paths

log = get_logger("server.sasl")

HANDSHAKE_VERSIONS = (0, 1)
AUTHENTICATE_VERSIONS = (0, 2)
SUPPORTED_MECHANISMS = ("PLAIN", *scram.MECHANISMS)
#: Kafka stores no PLAIN passwords; an entry under this key (older kafkatier) is ignored.
LEGACY_PASSWORD_KEY = "plain.password"
LISTENER = "sasl_plaintext"
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"
#: Kafka's ``sasl.server.max.receive.size`` and ``connection.failed.authentication.delay.ms`` defaults.
DEFAULT_MAX_RECEIVE_SIZE = 524288
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100


class SaslAuthenticationError(Exception):
    """A PLAIN token that does not authenticate; the text is Kafka's message."""


def sasl_enabled(overrides: Mapping[str, Any]) -> bool:
    return broker_setting(overrides, "listener.security.protocol").strip().upper() == "SASL_PLAINTEXT"


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


@attrs.frozen
class SaslLogin:
    """How a broker's own client logs in (Kafka's inter-broker SASL settings); ``repr`` hides the password."""
    mechanism: str
    username: str
    password: str = attrs.field(repr=False)


def jaas_config_key(overrides: Mapping[str, Any], mechanism: str) -> str | None:
    """The property holding ``mechanism``'s JAAS config: Kafka's listener-prefixed name first, then
    ``sasl.jaas.config`` (each defined in ``BROKER_CONFIGS`` as a PASSWORD; None for a mechanism without one)."""
    for key in (f"listener.name.{LISTENER}.{mechanism.lower()}.sasl.jaas.config",
                f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config", "sasl.jaas.config"):
        try:
            if broker_setting(overrides, key):
                return key
        except KeyError:   # a mechanism kafkatier does not support: no listener-prefixed definition
            continue
    return None


def _jaas_options(overrides: Mapping[str, Any], mechanism: str) -> dict[str, str]:
    from kafkatier.admin.bootstrap import BootstrapConfigError, parse_jaas_config

    key = jaas_config_key(overrides, mechanism)
    if key is None:
        return {}
    try:
        return parse_jaas_config(broker_setting(overrides, key))[1]
    except BootstrapConfigError:  # the message quotes the value: never log it
        log.error("ignoring a malformed JAAS config %s", kv(key=key))
        return {}


def static_users(overrides: Mapping[str, Any]) -> dict[str, str]:
    """``user_<name>="<password>"`` options of the broker's PlainLoginModule JAAS config."""
    opts = _jaas_options(overrides, "PLAIN")
    return {k[len("user_"):]: v for k, v in opts.items() if k.startswith("user_") and len(k) > len("user_")}


def enabled_mechanisms(overrides: Mapping[str, Any]) -> tuple[str, ...]:
    listed = [m.strip().upper() for m in broker_setting(overrides, "sasl.enabled.mechanisms").split(",")
              if m.strip()]
    unknown = [m for m in listed if m not in SUPPORTED_MECHANISMS]
    if unknown:
        log.warning("ignoring unsupported SASL mechanisms %s", kv(mechanisms=",".join(unknown),
                                                                  supported=",".join(SUPPORTED_MECHANISMS)))
    return tuple(m for m in listed if m in SUPPORTED_MECHANISMS) or ("PLAIN",)


def inter_broker_login(overrides: Mapping[str, Any], sasl_ssl: bool = False) -> SaslLogin | None:
    """The brokers' own login when SASL is on (or ``sasl_ssl``: the inter-broker listener is SASL_SSL), else None.
    Without credentials in the JAAS config it is logged as an error: replication then cannot authenticate."""
    if not (sasl_enabled(overrides) or sasl_ssl):
        return None
    mechanism = broker_setting(overrides, "sasl.mechanism.inter.broker.protocol").strip().upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        log.error("unsupported sasl.mechanism.inter.broker.protocol %s", kv(mechanism=mechanism))
        return None
    opts = _jaas_options(overrides, mechanism)
    if not opts.get("username") or opts.get("password") is None:
        log.error("no inter-broker credentials: set username and password in the JAAS config %s",
                  kv(mechanism=mechanism, key=f"listener.name.{LISTENER}.{mechanism.lower()}.sasl.jaas.config"))
        return None
    return SaslLogin(mechanism, opts["username"], opts["password"])


class CredentialStore:
    """Static JAAS users (PLAIN) and the SCRAM credentials in ``/config/users/<name>``."""

    def __init__(self, zk, static: Mapping[str, str] | None = None):
        self.zk = zk
        self.static = dict(static or {})

    def _user_config(self, username: str) -> dict:
        if self.zk is None or not username or "/" in username:
            return {}
        try:
            data, _ = self.zk.get(paths.entity_config("users", username))
            config = json.loads(data)["config"]
            return config if isinstance(config, dict) else {}
        except NoNodeError:
            return {}
        except (ValueError, KeyError, TypeError) as e:
            log.warning("malformed user config skipped %s", kv(user=username, error=type(e).__name__))
            return {}

    def scram_credential(self, username: str, mechanism: str) -> scram.ScramCredential | None:
        value = self._user_config(username).get(mechanism)
        if value is None:
            return None
        try:
            return scram.ScramCredential.from_config(value)
        except ValueError:
            log.warning("malformed SCRAM credential skipped %s", kv(user=username, mechanism=mechanism))
            return None

    def verify(self, username: str, password: str) -> bool:
        """A PLAIN login: the static user's password, else the user's stored SCRAM credential."""
        if username in self.static:
            return hmac.compare_digest(self.static[username].encode(), password.encode())
        config = self._user_config(username)
        if LEGACY_PASSWORD_KEY in config:
            log.warning("ignoring a clear-text password stored for the user; set a SCRAM credential instead %s",
                        kv(user=username, key=LEGACY_PASSWORD_KEY))
        for mechanism in scram.MECHANISMS:
            credential = self.scram_credential(username, mechanism)
            if credential is not None:
                return scram.verify_password(mechanism, credential, password)
        return False


#: The name older code and tests use.
PlainCredentialStore = CredentialStore


def set_user_password(zk, username: str, password: str, mechanisms=tuple(scram.MECHANISMS),
                      iterations: int = scram.DEFAULT_ITERATIONS) -> None:
    """Store salted SCRAM credentials for ``username`` in ``/config/users/<name>`` (with a change notification),
    keeping the user's other config keys and dropping any legacy clear-text password."""
    credentials = {m: scram.new_credential(m, password, iterations).to_config() for m in mechanisms}
    alter_user_config(zk, username, credentials, ())


def alter_user_config(zk, username: str, sets: Mapping[str, str], deletes) -> dict:
    """Write ``/config/users/<name>`` (sets and deletes over the current config) and its change notification;
    returns the new config."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

    from kafkatier.zk.kafka_zk_client import KafkaZkClient

    if not username or "/" in username:
        raise ValueError(f"invalid user name {username!r}")
    kzk = KafkaZkClient(zk)
    zk.ensure_path(paths.CONFIG_CHANGES)
    zk.ensure_path(paths.entity_config("users", username).rsplit("/", 1)[0])
    for attempt in Retrying(retry=retry_if_exception_type((BadVersionError, NodeExistsError, NoNodeError)),
                            stop=stop_after_attempt(10), wait=wait_exponential(multiplier=0.01, max=0.5),
                            reraise=True):
        with attempt:
            current, version = kzk.get_entity_config_and_version("users", username)
            config = {k: v for k, v in current.items() if k != LEGACY_PASSWORD_KEY}
            config.update(sets)
            for k in deletes:
                config.pop(k, None)
            kzk.change_entity_config_conditionally("users", username, config, version)
    return config


class SaslServer:
    """SaslHandshake / SaslAuthenticate handlers and the pre-authentication request gate.  Per-connection state
    lives in ``ConnectionContext.session`` (``sasl_mechanism``, ``scram``); a successful SaslAuthenticate answers
    :class:`~kafkatier.server.network.Authenticated`, and the network layer sets the connection's principal."""

    def __init__(self, store: CredentialStore, mechanisms=("PLAIN",),
                 failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS):
        self.store = store
        self.mechanisms = tuple(mechanisms)
        self.failed_authentication_delay_ms = failed_authentication_delay_ms
        self.metrics = {"authenticated": 0, "failed": 0}

    @staticmethod
    def authenticated(context) -> bool:
        return context.authenticated

    def gate(self, context, header, request) -> bool:
        if context.authenticated:
            return True
        return header.request_api_key in (ApiKeys.API_VERSIONS, ApiKeys.SASL_HANDSHAKE, ApiKeys.SASL_AUTHENTICATE)

    def handle_handshake(self, header, request, context):
        v = header.request_api_version
        body = {"mechanisms": list(self.mechanisms)}
        if context.authenticated:
            return CloseAfterResponse(build(codec.response_class(ApiKeys.SASL_HANDSHAKE), v,
                                            {**body, "error_code": int(Errors.ILLEGAL_SASL_STATE)}))
        if request.mechanism not in self.mechanisms:
            log.info("unsupported SASL mechanism %s", kv(mechanism=str(request.mechanism)[:40],
                                                        connection=context.connection_id))
            return CloseAfterResponse(build(codec.response_class(ApiKeys.SASL_HANDSHAKE), v,
                                            {**body, "error_code": int(Errors.UNSUPPORTED_SASL_MECHANISM)}))
        context.session["sasl_mechanism"] = request.mechanism
        if request.mechanism in scram.MECHANISMS:
            context.session["scram"] = scram.ScramSaslServer(request.mechanism, self.store.scram_credential)
        if v == 0:   # the next frame is a bare SASL token (the network layer hands it to handle_raw_token)
            context.session[RAW_SASL_HANDLER] = self.handle_raw_token
        return build(codec.response_class(ApiKeys.SASL_HANDSHAKE), v, {**body, "error_code": 0})

    def handle_raw_token(self, context, token: bytes):
        """SaslHandshake v0: one bare SASL token; the reply goes back bare.  Success authenticates the connection,
        a SCRAM round in between waits for the next token, a failure closes the connection (no answer, after
        ``connection.failed.authentication.delay.ms``)."""
        mechanism = context.session.get("sasl_mechanism")
        if context.authenticated or mechanism is None:
            return RawSaslToken(None, close=True)
        try:
            reply, username = self._evaluate(context, mechanism, token)
        except SaslAuthenticationError as e:
            self._failed(context, mechanism, e)
            fut: Future = Future()
            timer = threading.Timer(self.failed_authentication_delay_ms / 1000.0,
                                    lambda: fut.set_result(RawSaslToken(None, close=True)))
            timer.daemon = True
            timer.start()
            return fut
        if username is None:
            context.session[RAW_SASL_HANDLER] = self.handle_raw_token   # the next SCRAM message
            return RawSaslToken(reply)
        self._succeeded(context, mechanism, username)
        return RawSaslToken(reply, principal=f"User:{username}")

    def _evaluate(self, context, mechanism: str, token: bytes) -> tuple[bytes, str | None]:
        """One SASL step: the reply and, once the exchange is complete, the user name (None: another round)."""
        if mechanism == "PLAIN":
            context.session.pop("sasl_mechanism", None)  # one attempt per connection
            username, password = parse_plain_token(token)
            if not self.store.verify(username, password):
                raise SaslAuthenticationError(INVALID_CREDENTIALS)
            return b"", username
        server: scram.ScramSaslServer = context.session["scram"]
        try:
            reply = server.evaluate(token)
        except scram.ScramError as e:
            raise SaslAuthenticationError(str(e)) from None
        if not server.complete:
            return reply, None
        context.session.pop("scram", None)
        context.session.pop("sasl_mechanism", None)
        return reply, server.username

    def _failed(self, context, mechanism: str, e: Exception) -> None:
        context.session.pop("scram", None)
        context.session.pop("sasl_mechanism", None)
        self.metrics["failed"] += 1
        log.info("SASL authentication failed %s", kv(connection=context.connection_id, mechanism=mechanism,
                                                       reason=str(e).replace(" ", "_")))

    def _succeeded(self, context, mechanism: str, username: str) -> None:
        self.metrics["authenticated"] += 1
        log.info("SASL authenticated %s", kv(connection=context.connection_id, mechanism=mechanism,
                                             principal=f"User:{username}"))

    def handle_authenticate(self, header, request, context):
        v = header.request_api_version

        def answer(err: Errors, message: str | None, auth_bytes: bytes = b""):
            return build(codec.response_class(ApiKeys.SASL_AUTHENTICATE), v, {
                "error_code": int(err), "error_message": message, "auth_bytes": auth_bytes,
                "session_lifetime_ms": 0})
        mechanism = context.session.get("sasl_mechanism")
        if context.authenticated or mechanism is None:
            return CloseAfterResponse(answer(Errors.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request: no "
                                             "SaslHandshake on this connection, or already authenticated"))
        token = bytes(request.auth_bytes or b"")
        try:
            reply, username = self._evaluate(context, mechanism, token)
        except SaslAuthenticationError as e:
            self._failed(context, mechanism, e)
            return self._delayed_close(answer(Errors.SASL_AUTHENTICATION_FAILED, str(e)))
        if username is None:
            return answer(Errors.NONE, None, reply)
        self._succeeded(context, mechanism, username)
        return Authenticated(answer(Errors.NONE, None, reply), f"User:{username}")

    def _delayed_close(self, response) -> Future:
        """Kafka's delayed close after a failed authentication: the answer, then the close, after the delay."""
        fut: Future = Future()
        timer = threading.Timer(self.failed_authentication_delay_ms / 1000.0,
                                lambda: fut.set_result(CloseAfterResponse(response)))
        timer.daemon = True
        timer.start()
        return fut


#: The name older code and tests use.
SaslPlainServer = SaslServer


def sasl_server_from_config(zk, overrides: Mapping[str, Any], sasl_ssl_listener: bool = False) -> SaslServer | None:
    """The SASL server if ``listener.security.protocol=SASL_PLAINTEXT`` or a ``SASL_SSL`` listener exists, else
    None.  ``KafkaApis`` serves APIs 17 and 36 with it and ``SocketServer`` gates those listeners with :meth:`gate`."""
    if not (sasl_enabled(overrides) or sasl_ssl_listener):
        return None
    sasl = SaslServer(CredentialStore(zk, static_users(overrides)), enabled_mechanisms(overrides),
                      broker_setting(overrides, "connection.failed.authentication.delay.ms"))
    log.info("SASL required on the listener %s", kv(mechanisms=",".join(sasl.mechanisms),
                                                   static_users=len(sasl.store.static)))
    return sasl
