"""ZkNodeChangeNotificationListener: follow one ZooKeeper path of sequential change notifications (Kafka's
``kafka.common.ZkNodeChangeNotificationListener``), for the dynamic configs (``/config/changes``) and the ACLs
(``/kafka-acl-changes``, ``/kafka-acl-extended-changes``).

Contract:

- A writer changes some znode, then creates ``<root>/<prefix>NNNNNNNNNN`` whose data names what changed.  The
  listener hands each notification numbered above the last one it processed, in sequence order and once, to its
  handler's ``process_notification(path, data)``; a notification names what to re-read, it carries no values.
- Triggers: a children watch on ``<root>``, a (re)connection of the ZooKeeper session, and :meth:`trigger`.
  Kazoo's callbacks only set an event; listing, reading and the handler run on the listener's own thread.
- Start-up: with ``process_existing`` (Kafka's behaviour) the notifications already there are processed too;
  without, the highest existing number is the baseline.  A ``resync`` callback (a full reload, e.g. the ACL
  cache) runs in :meth:`start` before it returns and again after every reconnection, each time after a new
  baseline is taken: what it reads covers every notification at or below the baseline.
- Failures: a notification that vanished before it was read, or whose handler raises, is logged ("error
  processing change notification", with :class:`NotificationError`'s reason, or the traceback of anything
  else), counted in :attr:`error_count` and skipped, as in Kafka: there is no retry.  A transient ZooKeeper
  error (connection loss, timeout, expired session) while listing, reading or handling ends the round
  *without* skipping: the next trigger retries from the same notification.
- Expiry: after each full round, notifications older than ``change_expiration_ms`` (by znode ctime; Kafka's
  15 minutes) are deleted; every listener tries, one succeeds, the others see NoNode.
- :meth:`stop` drops the watch and the session listener and joins the thread.

Deliberate differences from Kafka: the resync callback (Kafka's ACL authorizer has none; without it a
listener disconnected longer than the expiry would miss purged notifications); the clock is injected as a
``clock_ms`` function rather than Kafka's ``Time``.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Protocol

from kazoo.exceptions import (ConnectionClosedError, ConnectionLoss, KazooException, NoNodeError,
                              OperationTimeoutError, SessionExpiredError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from kafkatier.common.wake_loop import run_on_wake_ups
from kafkatier.logsetup import get_logger, kv
from kafkatier.zk import paths
from kafkatier.zk.client import ensure_persistent_paths

log = get_logger("zk.notifications")

CHANGE_EXPIRATION_MS = 15 * 60 * 1000

#: ZooKeeper errors after which a notification is retried on the next round instead of being skipped.
TRANSIENT_ERRORS = (ConnectionLoss, OperationTimeoutError, SessionExpiredError, ConnectionClosedError,
                    KazooTimeoutError)


class NotificationError(Exception):
    """A notification its handler cannot act on (malformed, names an unknown entity ...): logged with this
    reason, no traceback, and skipped."""


class NotificationHandler(Protocol):
    def process_notification(self, path: str, data: bytes) -> None:
        """Act on one notification (the listener's thread).  Raise :class:`NotificationError` to have it
        logged and skipped, a ZooKeeper transient error to have it retried."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class ZkNodeChangeNotificationListener:
    def __init__(self, zk, seq_node_root: str, seq_node_prefix: str, handler: NotificationHandler, *,
                 change_expiration_ms: int = CHANGE_EXPIRATION_MS, clock_ms: Callable[[], int] = _now_ms,
                 process_existing: bool = False, resync: Callable[[], None] | None = None,
                 name: str | None = None):
        self.zk = zk
        self.root = seq_node_root
        self.prefix = seq_node_prefix
        self.handler = handler
        self.change_expiration_ms = change_expiration_ms
        self.clock_ms = clock_ms
        self.process_existing = process_existing
        self._resync = resync
        self._resync_pending = False
        self._last = -1
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name or f"change-listener{seq_node_root}",
                                        daemon=True)
        self._started = False
        self.error_count = 0

    @property
    def last_processed(self) -> int:
        """Sequence number of the last notification processed or skipped (-1: none)."""
        return self._last

    # --- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        ensure_persistent_paths(self.zk, (self.root,))
        if not self.process_existing or self._resync is not None:
            self._take_baseline(self.zk.get_children(self.root))
        if self._resync is not None:
            self._resync()   # before the thread runs: nothing newer is processed against an unloaded state
        log.info("starting %s", kv(path=self.root, last_processed=self._last))
        self._thread.start()
        self.zk.add_listener(self._on_state)
        ChildrenWatch(self.zk, self.root, self._on_children)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        self._wake.set()
        try:
            self.zk.remove_listener(self._on_state)
        except Exception:  # noqa: BLE001 - not registered
            pass
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def trigger(self) -> None:
        """Process pending notifications soon (on the listener's thread)."""
        self._wake.set()

    # --- kazoo callbacks (kazoo's thread: only signal) ----------------------------------------------------------
    def _on_children(self, children: list[str]) -> bool | None:
        if self._stopped.is_set():
            return False        # tells kazoo to drop the watch
        self._wake.set()
        return None

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            if self._resync is not None:
                self._resync_pending = True
            self._wake.set()

    # --- the listener's thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        run_on_wake_ups(self._wake, self._stopped, self._process_or_resync)

    def _process_or_resync(self) -> None:
        try:
            self._process_notifications()
        except Exception:  # noqa: BLE001 - the listener must survive anything
            log.exception("error while processing notifications %s", kv(path=self.root))
            if self._resync is not None:
                self._resync_pending = True

    def _take_baseline(self, children: list[str]) -> None:
        existing = paths.sorted_sequential(children, self.prefix)
        if existing:
            self._last = max(self._last, paths.sequence_number(existing[-1]))

    def _process_notifications(self) -> None:
        """One round: (resync,) process new notifications in order, then purge expired ones."""
        try:
            children = self.zk.get_children(self.root)
        except NoNodeError:
            return
        except TRANSIENT_ERRORS as e:
            log.warning("cannot list change notifications %s", kv(path=self.root, error=type(e).__name__))
            return
        if self._resync_pending:
            self._resync_pending = False
            self._take_baseline(children)
            self._resync()
        notifications = paths.sorted_sequential(children, self.prefix)
        now = self.clock_ms()
        for node in notifications:
            seq = paths.sequence_number(node)
            if seq <= self._last:
                continue
            if not self._process_notification(f"{self.root}/{node}"):
                return
            self._last = seq
        self._purge_obsolete(now, notifications)

    def _process_notification(self, path: str) -> bool:
        """Hand one notification to the handler; False if a transient error leaves it for the next round."""
        data = None
        try:
            data, _ = self.zk.get(path)
            self.handler.process_notification(path, data)
        except NoNodeError:
            if data is None:
                log.warning("change notification vanished before it was read %s", kv(path=path))
            else:
                self._error(path, data, "NoNodeError", exc_info=True)
        except TRANSIENT_ERRORS as e:
            log.warning("cannot process change notification now; retried on the next round %s",
                        kv(path=path, error=type(e).__name__))
            return False
        except NotificationError as e:
            self._error(path, data, str(e))
        except Exception as e:  # noqa: BLE001 - anything else is this notification's fault: skip it
            self._error(path, data, f"{type(e).__name__}: {e}", exc_info=True)
        return True

    def _error(self, path: str, data: Any, reason: str, exc_info: bool = False) -> None:
        self.error_count += 1
        text = bytes(data or b"").decode("utf-8", "replace")[:200]
        log.error("error processing change notification %s from %s %s", text, path, kv(reason=reason),
                  exc_info=exc_info)

    def _purge_obsolete(self, now_ms: int, notifications: list[str]) -> None:
        if not notifications:
            return
        node_paths = [f"{self.root}/{n}" for n in notifications]
        asyncs = [self.zk.exists_async(p) for p in node_paths]
        for path, a in zip(node_paths, asyncs):
            try:
                stat = a.get()
            except KazooException:
                continue
            if stat is None or now_ms - stat.ctime <= self.change_expiration_ms:
                continue
            try:
                self.zk.delete(path)
                log.debug("purged change notification %s", kv(path=path))
            except NoNodeError:
                pass            # another listener purged it first
            except KazooException as e:
                log.warning("cannot purge change notification %s", kv(path=path, error=type(e).__name__))
