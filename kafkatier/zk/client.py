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
from typing import Any, Callable, Iterable, Sequence, TypeVar

import attrs
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, OperationTimeoutError
from kazoo.handlers.threading import KazooTimeoutError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay, stop_never
from tenacity import wait_exponential, wait_random

from kafkatier.logsetup import get_logger, kv

log = get_logger("zk")

T = TypeVar("T")

DEFAULT_SESSION_TIMEOUT_S = 6.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0

# The connection-loss class of errors: the request may or may not have been applied; the session lives on.
RETRYABLE_ERRORS: tuple[type[BaseException], ...] = (ConnectionLoss, OperationTimeoutError)


class ZooKeeperUnavailableError(ConnectionError):
    """No ZooKeeper server could be reached in time."""


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
                logger: logging.Logger | None = None, **kazoo_kwargs: Any) -> KazooClient:
    """A not-yet-started ``KazooClient`` for ``hosts`` (``h:p[,h:p][/chroot]``).

    ``timeout`` is the session timeout in seconds (the server clamps it to its min/max).
    """
    if not hosts or not isinstance(hosts, str):
        raise ValueError(f"ZooKeeper connect string must be a non-empty 'host:port' string, got {hosts!r}")
    if timeout <= 0:
        raise ValueError(f"session timeout must be positive, got {timeout}")
    command_retry = command_retry or default_command_retry(timeout)
    connection_retry = connection_retry or default_connection_retry()
    return KazooClient(
        hosts=hosts, timeout=timeout, read_only=read_only,
        command_retry=command_retry.kazoo_kwargs(), connection_retry=connection_retry.kazoo_kwargs(),
        logger=logger, **kazoo_kwargs,
    )


def start_client(hosts: str, timeout: float = DEFAULT_SESSION_TIMEOUT_S,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S, read_only: bool = False,
                 **kwargs: Any) -> KazooClient:
    """:func:`make_client` + ``start()``; ZooKeeperUnavailableError if no connection within ``connect_timeout``."""
    client = make_client(hosts, timeout=timeout, read_only=read_only, **kwargs)
    try:
        client.start(timeout=connect_timeout)
    except KazooTimeoutError:
        raise ZooKeeperUnavailableError(
            f"could not connect to ZooKeeper at {hosts} within {connect_timeout:g}s "
            "(is it running? start one with: kafkatier zookeeper start)"
        ) from None
    return client


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
    """Create each path (and missing parents) if absent; a path created concurrently is fine."""
    for path in paths:
        if zk_retry(client.exists, path) is not None:
            continue
        try:
            zk_retry(client.create, path, value, makepath=True)
        except NodeExistsError:
            pass


# --- pipelined reads ----------------------------------------------------------------------------------------------

# Reads in flight at once on one session.  Kafka's controller bounds its pipelined reads the same way
# (``zookeeper.max.in.flight.requests``, default 10 there, per request of up to thousands of paths); here each
# in-flight read is one path, and 1,000 keeps the socket busy without queuing 20,000 callbacks in kazoo at once.
MAX_IN_FLIGHT_READS = 1000


def get_many(client: KazooClient, paths: Sequence[str], max_in_flight: int = MAX_IN_FLIGHT_READS,
             attempts: int = 5) -> list[tuple[bytes, Any] | None]:
    """``(data, stat)`` of each path in order, None for a missing node: kazoo's ``get_async`` pipelined with at
    most ``max_in_flight`` reads outstanding, so N znodes cost about one round trip per window instead of N.

    A read that fails with a connection loss is read again on its own with :func:`zk_retry` (bounded); any
    other error is raised.
    """
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
    out: list[tuple[bytes, Any] | None] = [None] * len(paths)
    window: collections.deque = collections.deque()
    retry: list[int] = []

    def collect_oldest() -> None:
        i, result = window.popleft()
        try:
            out[i] = result.get()
        except NoNodeError:
            out[i] = None
        except RETRYABLE_ERRORS:
            retry.append(i)

    for i, path in enumerate(paths):
        if len(window) >= max_in_flight:
            collect_oldest()
        window.append((i, client.get_async(path)))
    while window:
        collect_oldest()
    for i in retry:
        try:
            out[i] = zk_retry(client.get, paths[i], attempts=attempts)
        except NoNodeError:
            out[i] = None
    return out
