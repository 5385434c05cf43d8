"""kazoo clients with bounded retries, and a retry helper for ZooKeeper calls.

kazoo retries nothing by itself: a plain ``client.create(...)`` raises ``ConnectionLoss`` when the connection
drops.  ``client.retry(fn, ...)`` uses the client's *command retry* policy, which kazoo leaves unbounded by
default; :func:`make_client` bounds it (and the reconnect loop).  :func:`zk_retry` is the tenacity-based
equivalent for code that wants its own bound.

Session expiry is never retried here: ephemerals are gone and the caller must re-register.
"""
from __future__ import annotations

import collections
import functools
import logging
import sys
import time
from typing import Any, Callable, Iterable, Sequence, TypeVar

import attrs
from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (AuthFailedError, ConnectionDropped, ConnectionLoss, NodeExistsError, NoNodeError,
                              OperationTimeoutError, SessionClosedRequireSaslError, UnimplementedError)
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.states import KeeperState
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay, stop_never
from tenacity import wait_exponential, wait_random

from kafkatier.logsetup import get_logger, kv
from kafkatier.zk.multi_read import MultiReadError, multi_read_async
from kafkatier.zk.security import ZkSecurity, default_acls, zk_security

log = get_logger("zk")

T = TypeVar("T")

DEFAULT_SESSION_TIMEOUT_S = 6.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0

# The connection-loss class of errors: the request may or may not have been applied; the session lives on.
RETRYABLE_ERRORS: tuple[type[BaseException], ...] = (ConnectionLoss, OperationTimeoutError)


class ZooKeeperUnavailableError(ConnectionError):
    """No ZooKeeper server could be reached in time."""


class ZooKeeperAuthError(ConnectionError):
    """ZooKeeper refused the client's SASL login (wrong user or password, or SASL not enabled on the server)."""


def _not_auth_failed(record: logging.LogRecord) -> bool:
    """kazoo's own AUTH_FAILED warning: :func:`start_client` reports a refused login as one clear line instead."""
    return not str(record.msg).startswith("AUTH_FAILED")


logging.getLogger("kazoo.client").addFilter(_not_auth_failed)


class _ConnectionHandler(ConnectionHandler):
    """kazoo's connection, with two differences:

    * a server that answers a SASL login by closing the session (``SessionClosedRequireSaslError``: ZooKeeper
      3.7+'s ``enforce.auth.schemes=sasl`` refusing a wrong password) is a refused login like any other -- kazoo's
      AUTH_FAILED, after which its connection thread stops connecting and ends.  kazoo itself lets that error
      escape its connection loop, and the thread dies with a traceback;
    * an answer out of order (its xid not the oldest pending request's) drops the connection, which then
      reconnects, as ZooKeeper's Java client does ("Xid out of order": an IOException, a connection loss).  kazoo
      raises a RuntimeError that ends its connection thread: the client never connects again, and a broker whose
      session then expired never re-registered (seen on an ensemble while a second connection attached to the
      broker's session)."""

    def _read_response(self, header, buffer, offset):
        try:
            return super()._read_response(header, buffer, offset)
        except RuntimeError as e:
            if not (e.args and "xids do not match" in str(e.args[0])):
                raise
            raise ConnectionDropped("answer out of order: xid %r expected, %r received" % e.args[1:3]) from e

    def _authenticate_with_sasl(self, host, timeout):
        try:
            super()._authenticate_with_sasl(host, timeout)
        except SessionClosedRequireSaslError as e:
            raise AuthFailedError("the server closed the session: SASL login refused") from e


class SecureKazooClient(KazooClient):
    """A kazoo client that gives every znode it creates Kafka's default ACLs for its path
    (:func:`kafkatier.zk.security.default_acls`) unless the caller names ACLs."""

    def __init__(self, *args: Any, secure_acls: bool = False, **kwargs: Any) -> None:
        self.auth_failed = False
        # kazoo only logs a refused login (AUTH_FAILED) in its connection thread: the client's logger sees the error
        # and flags it for ``start_client``, which reports it as one line
        kwargs["logger"] = _AuthFailureLogger(kwargs.get("logger") or logging.getLogger("kazoo.client"), self)
        super().__init__(*args, **kwargs)
        self.secure_acls = secure_acls
        self.sasl_login = bool(kwargs.get("sasl_options"))
        # KazooClient builds its connection in __init__ and has no parameter for its class: the same one, ours
        self._connection = _ConnectionHandler(self, self._connection.retry_sleeper, logger=self.logger,
                                              sasl_options=self._connection.sasl_options)

    def _session_callback(self, state):
        if state == KeeperState.AUTH_FAILED:
            self.auth_failed = True
        return super()._session_callback(state)

    def create_async(self, path, value=b"", acl=None, *args, **kwargs):
        if acl is None and self.secure_acls:
            acl = default_acls(True, path)
        return super().create_async(path, value, acl, *args, **kwargs)

    def transaction(self):
        return _SecureTransaction(self)


class _AuthFailureLogger(logging.LoggerAdapter):
    """Passes every record on; an error logged while handling ``SessionClosedRequireSaslError`` (or
    ``AuthFailedError``) marks the client's login as refused, and is then not logged as a traceback."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter, client: "SecureKazooClient") -> None:
        super().__init__(logger, {})
        self.client = client

    def log(self, level, msg, *args, **kwargs):
        error = sys.exc_info()[1]
        if isinstance(error, (SessionClosedRequireSaslError, AuthFailedError)):
            self.client.auth_failed = True
            kwargs.pop("exc_info", None)
            level = logging.DEBUG
        super().log(level, msg, *args, **kwargs)

    def exception(self, msg, *args, exc_info=True, **kwargs):
        self.log(logging.ERROR, msg, *args, exc_info=exc_info, **kwargs)


class _SecureTransaction(TransactionRequest):
    """A multi whose creates get the client's per-path default ACLs, as :meth:`SecureKazooClient.create_async`."""

    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False):
        if acl is None and self.client.secure_acls:
            acl = default_acls(True, path)
        return super().create(path, value, acl, ephemeral, sequence)


@attrs.frozen
class RetryPolicy:
    """Exponential backoff for kazoo's ``KazooRetry``; bounded by ``max_tries`` and/or ``deadline``."""

    max_tries: int = 10              # -1 = no limit on tries (then ``deadline`` must be set)
    delay: float = 0.1
    backoff: float = 2.0
    max_delay: float = 1.0
    max_jitter: float = 0.2
    deadline: float | None = None    # seconds from the first failure

    def __attrs_post_init__(self) -> None:
        if self.max_tries < 0 and self.deadline is None:
            raise ValueError("an unlimited number of tries needs a deadline")
        if self.max_tries == 0 or self.delay < 0 or self.max_delay < 0:
            raise ValueError(f"invalid retry policy {self!r}")

    def kazoo_kwargs(self) -> dict[str, Any]:
        return dict(max_tries=self.max_tries, delay=self.delay, backoff=self.backoff, max_delay=self.max_delay,
                    max_jitter=self.max_jitter, deadline=self.deadline, ignore_expire=False)


def default_command_retry(session_timeout: float) -> RetryPolicy:
    """Retries ``client.retry(...)`` calls for at most one session timeout: past that the session is gone."""
    return RetryPolicy(max_tries=10, deadline=session_timeout)


def default_connection_retry(reconnect_deadline: float = 300.0) -> RetryPolicy:
    """Reconnects about once a second; gives up (client CLOSED) after ``reconnect_deadline`` s of failures."""
    return RetryPolicy(max_tries=-1, delay=0.1, max_delay=1.0, deadline=reconnect_deadline)


def make_client(hosts: str, timeout: float = DEFAULT_SESSION_TIMEOUT_S, read_only: bool = False, *,
                command_retry: RetryPolicy | None = None, connection_retry: RetryPolicy | None = None,
                logger: logging.Logger | None = None, security: ZkSecurity | None = None,
                **kazoo_kwargs: Any) -> KazooClient:
    """A not-yet-started ``KazooClient`` for ``hosts`` (``h:p[,h:p][/chroot]``).

    ``timeout`` is the session timeout in seconds (the server clamps it to its min/max).  ``security`` (default:
    from the environment, as Kafka's tools, :func:`~kafkatier.zk.security.zk_security`) sets SASL and ACLs.
    """
    if not hosts or not isinstance(hosts, str):
        raise ValueError(f"ZooKeeper connect string must be a non-empty 'host:port' string, got {hosts!r}")
    if timeout <= 0:
        raise ValueError(f"session timeout must be positive, got {timeout}")
    command_retry = command_retry or default_command_retry(timeout)
    connection_retry = connection_retry or default_connection_retry()
    security = zk_security() if security is None else security
    return SecureKazooClient(
        hosts=hosts, timeout=timeout, read_only=read_only,
        command_retry=command_retry.kazoo_kwargs(), connection_retry=connection_retry.kazoo_kwargs(),
        logger=logger, secure_acls=security.set_acl, **security.kazoo_kwargs(), **kazoo_kwargs,
    )


def start_client(hosts: str, timeout: float = DEFAULT_SESSION_TIMEOUT_S,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S, read_only: bool = False,
                 **kwargs: Any) -> KazooClient:
    """:func:`make_client` + ``start()``; ZooKeeperUnavailableError if no connection within ``connect_timeout``."""
    client = make_client(hosts, timeout=timeout, read_only=read_only, **kwargs)
    event = client.start_async()
    deadline = time.monotonic() + connect_timeout
    # kazoo reports CONNECTED before its SASL exchange and, when the server refuses the login, waits out the
    # whole timeout: a first request's answer (or AUTH_FAILED) tells the login's outcome -- and, without a login,
    # whether the server requires one
    probe = None
    while not client.auth_failed and time.monotonic() < deadline:
        if event.wait(0.05):
            probe = probe or client.exists_async("/")
            if probe.ready():
                if isinstance(probe.exception, (SessionClosedRequireSaslError, AuthFailedError)):
                    client.auth_failed = True
                break
    if client.auth_failed:
        client.stop()
        client.close()
        if not getattr(client, "sasl_login", False):
            raise ZooKeeperAuthError(f"ZooKeeper at {hosts} requires a SASL login: give a JAAS file with a Client "
                                     "section (java.security.auth.login.config, $KAFKATIER_JAAS_CONFIG or "
                                     "-Djava.security.auth.login.config= in $KAFKA_OPTS)")
        raise ZooKeeperAuthError(f"ZooKeeper at {hosts} refused the SASL login (wrong username or password in the "
                                 "JAAS Client section, or SASL not enabled on the server)")
    if not client.connected:
        client.stop()
        client.close()
        reason = tls_failure(hosts, client) if getattr(client, "use_ssl", False) else None
        if reason:
            raise ZooKeeperUnavailableError(f"TLS to ZooKeeper at {hosts} failed: {reason}")
        if not getattr(client, "use_ssl", False) and speaks_tls(hosts):
            raise ZooKeeperUnavailableError(
                f"ZooKeeper at {hosts} serves TLS only: set zookeeper.ssl.client.enable=true and zookeeper.ssl.* "
                "(a broker), or KAFKATIER_ZK_TLS_CONFIG to a file of them (a tool)")
        raise ZooKeeperUnavailableError(
            f"could not connect to ZooKeeper at {hosts} within {connect_timeout:g}s "
            "(is it running? start one with: kafkatier zookeeper start)"
        )
    return client


def tls_failure(hosts: str, client: KazooClient, timeout: float = 3.0) -> str | None:
    """Why a TLS connection with ``client``'s settings to the first server of ``hosts`` fails (kazoo only logs it
    and retries): the handshake's error, or the alert the server sends after it (TLS 1.3 refuses a client
    certificate after the client's side of the handshake is done).  None if it succeeds or the port is closed."""
    import socket
    import ssl
    host, _, port = hosts.split("/", 1)[0].split(",")[0].strip().rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = bool(client.check_hostname)
    ctx.verify_mode = ssl.CERT_REQUIRED if client.verify_certs else ssl.CERT_NONE
    try:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if client.ca:
            ctx.load_verify_locations(client.ca)
        if client.certfile and client.keyfile:
            ctx.load_cert_chain(client.certfile, client.keyfile, client.keyfile_password)
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw:
            with ctx.wrap_socket(raw, server_hostname=host.strip("[]")) as sock:
                sock.settimeout(timeout)
                sock.sendall(b"\0\0\0\0")  # not a valid ZooKeeper frame: the server's answer is an alert or a close
                sock.recv(1)
    except ssl.SSLError as e:
        return str(e.reason or e).replace("_", " ").lower() if e.reason else str(e)
    except (OSError, ValueError):
        return None
    return None


def speaks_tls(hosts: str, timeout: float = 3.0) -> bool:
    """Whether the first server of ``hosts`` answers a TLS ClientHello with a ServerHello (certificate unchecked)."""
    import socket
    import ssl
    host, _, port = hosts.split("/", 1)[0].split(",")[0].strip().rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw:
            with ctx.wrap_socket(raw):
                return True
    except (OSError, ValueError):
        return False


def _retrying(attempts: int, initial_delay: float, max_delay: float, deadline: float | None,
              what: str) -> Retrying:
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")

    def before_sleep(state) -> None:
        log.warning("ZooKeeper call failed, retrying %s", kv(
            call=what, attempt=state.attempt_number, error=type(state.outcome.exception()).__name__,
            sleep_s=f"{state.next_action.sleep:.2f}"))

    return Retrying(
        retry=retry_if_exception_type(RETRYABLE_ERRORS),
        stop=stop_after_attempt(attempts) | (stop_after_delay(deadline) if deadline is not None else stop_never),
        wait=wait_exponential(multiplier=initial_delay, max=max_delay) + wait_random(0, initial_delay),
        before_sleep=before_sleep,
        reraise=True,
    )


def zk_retry(fn: Callable[..., T], *args: Any, attempts: int = 5, initial_delay: float = 0.1,
             max_delay: float = 2.0, deadline: float | None = None, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)``, retrying ``ConnectionLoss``/``OperationTimeoutError`` with exponential
    backoff, at most ``attempts`` calls (and ``deadline`` seconds); the last error is re-raised.

    A retried create may raise ``NodeExistsError`` (the first attempt may have succeeded): keep writes
    idempotent or conditional.
    """
    what = getattr(fn, "__qualname__", repr(fn))
    return _retrying(attempts, initial_delay, max_delay, deadline, what)(fn, *args, **kwargs)


def zk_retrying(*, attempts: int = 5, initial_delay: float = 0.1, max_delay: float = 2.0,
                deadline: float | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorator form of :func:`zk_retry`."""
    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            return zk_retry(fn, *args, attempts=attempts, initial_delay=initial_delay, max_delay=max_delay,
                            deadline=deadline, **kwargs)
        return wrapper
    return decorate


def ensure_persistent_paths(client: KazooClient, paths: Iterable[str], value: bytes = b"") -> None:
    """Create each path (and missing parents) if absent; a path created concurrently is fine.  The existence
    checks are pipelined (one round trip for all paths; a check lost with the connection is asked again alone,
    bounded): the paths are there but for the first broker of a cluster."""
    paths = list(paths)
    for path, exists in zip(paths, _pipelined(client.exists_async, client.exists, paths)):
        if exists is not None:
            continue
        try:
            zk_retry(client.create, path, value, makepath=True)
        except NodeExistsError:
            pass


def get_children_many(client: KazooClient, paths: Sequence[str]) -> list[list[str] | None]:
    """The children of each path, None for a missing node: the getChildren calls pipelined (one round trip for
    all; a call lost with the connection is asked again alone, bounded)."""
    return _pipelined(client.get_children_async, client.get_children, list(paths))


def _pipelined(call_async: Callable[[str], Any], call: Callable[[str], Any], paths: list[str]) -> list[Any]:
    """``call_async(path)`` for every path at once, then the results in order (None for NoNode); a call that
    failed with a retryable error is made again with :func:`zk_retry`."""
    pending = [call_async(p) for p in paths]
    out: list[Any] = []
    for path, result in zip(paths, pending):
        try:
            try:
                out.append(result.get())
            except RETRYABLE_ERRORS:
                out.append(zk_retry(call, path))
        except NoNodeError:
            out.append(None)
    return out


# --- pipelined reads ----------------------------------------------------------------------------------------------

# Paths per multiRead (:mod:`kafkatier.zk.multi_read`): one reply for 200 getData.  Partition states (~100 bytes)
# make ~20 KB replies; callers reading bigger znodes (topic assignments) pass fewer.
PATHS_PER_READ = 200
# multiReads in flight at once on one session, as Kafka's ``zookeeper.max.in.flight.requests`` (10) bounds its
# pipelined requests: 2,000 znodes on the wire keep the socket busy without queuing every reply in kazoo at once.
MAX_IN_FLIGHT_READS = 10


class MultiReadUnsupportedError(RuntimeError):
    """The ZooKeeper server has no multiRead (it is older than 3.6)."""


def get_many(client: KazooClient, paths: Sequence[str], max_in_flight: int = MAX_IN_FLIGHT_READS,
             attempts: int = 5, paths_per_read: int = PATHS_PER_READ) -> list[tuple[bytes, Any] | None]:
    """``(data, stat)`` of each path in order, None for a missing node: ZooKeeper multiReads of
    ``paths_per_read`` paths, pipelined with at most ``max_in_flight`` outstanding, so N znodes cost about
    N / paths_per_read replies and one round trip per window.

    A multiRead that fails with a connection loss is sent again on its own with :func:`zk_retry` (bounded); an
    op's error other than NoNode (an ACL refusal) and any other error are raised.
    """
    if max_in_flight < 1 or paths_per_read < 1:
        raise ValueError(f"max_in_flight and paths_per_read must be >= 1, got {max_in_flight}, {paths_per_read}")
    out: list[tuple[bytes, Any] | None] = [None] * len(paths)
    window: collections.deque = collections.deque()
    retry: list[int] = []

    def store(start: int, results) -> None:
        for i, res in enumerate(results, start):
            if isinstance(res, MultiReadError):
                if res.code != NoNodeError.code:
                    raise res.exception()
                continue
            out[i] = res

    def collect_oldest() -> None:
        start, result = window.popleft()
        try:
            store(start, result.get())
        except RETRYABLE_ERRORS:
            retry.append(start)

    try:
        for start in range(0, len(paths), paths_per_read):
            if len(window) >= max_in_flight:
                collect_oldest()
            window.append((start, multi_read_async(client, paths[start:start + paths_per_read])))
        while window:
            collect_oldest()
        for start in retry:
            batch = paths[start:start + paths_per_read]
            store(start, zk_retry(lambda: multi_read_async(client, batch).get(), attempts=attempts))
    except UnimplementedError:
        raise MultiReadUnsupportedError(
            "this ZooKeeper server has no multiRead: kafkatier needs ZooKeeper 3.6 or newer") from None
    return out


# Conditional setData calls in flight at once in :func:`set_many` (each is one small request and reply).
MAX_IN_FLIGHT_WRITES = 1000


@attrs.frozen
class ConditionalSet:
    """One ``setData(path, data, version)`` of :func:`set_many` (``version`` -1: unconditional)."""

    path: str
    data: bytes
    version: int = -1


def set_many(client: KazooClient, writes: Sequence[ConditionalSet],
             max_in_flight: int = MAX_IN_FLIGHT_WRITES) -> list[Any]:
    """Pipelined conditional ``setData`` calls, at most ``max_in_flight`` outstanding: N writes cost about one
    round trip per window instead of N (Kafka's ``KafkaZkClient`` sends its batches of conditional updates the
    same way).  Each write succeeds or fails on its own (no atomicity between them); returns, in order, the new
    ``ZnodeStat`` or the exception of that write (``BadVersionError``, ``NoNodeError``, a connection loss:
    the caller decides; a lost write may or may not have been applied)."""
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
    out: list[Any] = [None] * len(writes)
    window: collections.deque = collections.deque()

    def collect_oldest() -> None:
        i, result = window.popleft()
        try:
            out[i] = result.get()
        except Exception as e:  # noqa: BLE001 - handed back per write
            out[i] = e

    for i, w in enumerate(writes):
        if len(window) >= max_in_flight:
            collect_oldest()
        window.append((i, client.set_async(w.path, w.data, version=w.version)))
    while window:
        collect_oldest()
    return out
