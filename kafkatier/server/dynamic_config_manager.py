"""DynamicConfigManager: applies dynamic config changes announced under ``/config/changes`` (Kafka's
``ZkConfigManager`` with its ``ZkNodeChangeNotificationListener``).

An admin writes ``/config/<type>/<name>`` and then creates ``/config/changes/config_change_NNNNNNNNNN`` naming the
entity (version 2 ``{"entity_path":"topics/t"}``, or version 1 ``entity_type`` + ``entity_name``).  The manager
keeps a children watch on ``/config/changes``; on every change it processes, in sequence order, each notification
numbered above the last one it processed: it re-reads the entity's config znode (absent = no overrides) and calls
``handlers[entity_type](entity_name, config)``.  Notifications carry no values, so a late reader always sees the
newest config.

Start-up: notifications already present are not replayed (the baseline is the highest existing number); callers
read the current configs themselves *after* :meth:`start`, so a change made in between is seen either way.

Failures: a malformed notification or entity config, an unknown entity type, or a handler exception is logged
("error processing change notification") and skipped; the old config stays in force and there is no retry, as in
Kafka.  A ZooKeeper error while listing or reading leaves the notification unprocessed until the next trigger
(a new notification or a reconnect).

Notifications older than ``change_expiration_ms`` (15 minutes, by znode ctime) are deleted after each round;
every broker tries, one succeeds, the others see NoNode.

Watch callbacks only set an event; the work (reads, handlers) runs on a worker thread, never on kazoo's.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping

from kazoo.exceptions import (ConnectionClosedError, ConnectionLoss, KazooException, NoNodeError,
                              OperationTimeoutError, SessionExpiredError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from kafkatier.logsetup import get_logger, kv
from kafkatier.zk import codecs, paths
from kafkatier.zk.client import ensure_persistent_paths

log = get_logger("server.dynamic_config")

CHANGE_EXPIRATION_MS = 15 * 60 * 1000

ConfigHandler = Callable[[str, dict[str, str]], None]

# ZooKeeper errors after which a notification is retried on the next round instead of being skipped.
TRANSIENT_ERRORS = (ConnectionLoss, OperationTimeoutError, SessionExpiredError, ConnectionClosedError,
                    KazooTimeoutError)


def _valid_entity_name(name: str) -> bool:
    """Entity names in notifications are sanitized by Kafka (printable ASCII, no '/'); anything else could
    address another znode or break the ZooKeeper connection, so it is rejected."""
    return bool(name) and name.isascii() and name.isprintable() and "/" not in name and name not in (".", "..")


def _now_ms() -> int:
    return int(time.time() * 1000)


class DynamicConfigManager:
    """Listens to ``/config/changes`` and calls ``handlers[entity_type](entity_name, config)``.

    ``process_existing=True`` processes the notifications present at start-up too (Kafka's behaviour).
    """

    def __init__(self, zk, handlers: Mapping[str, ConfigHandler], *,
                 change_expiration_ms: int = CHANGE_EXPIRATION_MS, clock_ms: Callable[[], int] = _now_ms,
                 process_existing: bool = False, name: str = "config-change-listener"):
        self.zk = zk
        self.handlers = dict(handlers)
        self.change_expiration_ms = change_expiration_ms
        self.clock_ms = clock_ms
        self.process_existing = process_existing
        self._last = -1
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self.processed_count = 0
        self.error_count = 0

    @property
    def last_processed(self) -> int:
        """Sequence number of the last notification processed (-1: none)."""
        return self._last

    # --- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        ensure_persistent_paths(self.zk, (paths.CONFIG_CHANGES,))
        if not self.process_existing:
            existing = paths.sorted_sequential(self.zk.get_children(paths.CONFIG_CHANGES), paths.CONFIG_CHANGE_PREFIX)
            self._last = paths.sequence_number(existing[-1]) if existing else -1
        log.info("starting %s", kv(path=paths.CONFIG_CHANGES, last_processed=self._last,
                                   entity_types=",".join(sorted(self.handlers))))
        self._thread.start()
        self.zk.add_listener(self._on_state)
        ChildrenWatch(self.zk, paths.CONFIG_CHANGES, self._on_children)

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
        """Process pending notifications soon (on the worker thread)."""
        self._wake.set()

    # --- kazoo callbacks (kazoo's thread: only signal) ----------------------------------------------------------
    def _on_children(self, children: list[str]) -> bool | None:
        if self._stopped.is_set():
            return False        # tells kazoo to drop the watch
        self._wake.set()
        return None

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._wake.set()

    # --- worker -------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait()
            if self._stopped.is_set():
                break
            self._wake.clear()
            try:
                self._process_notifications()
            except Exception:  # noqa: BLE001 - the listener must survive anything
                log.exception("error while processing notifications %s", kv(path=paths.CONFIG_CHANGES))

    def _process_notifications(self) -> None:
        """One round (worker thread only): process new notifications in order, then purge expired ones."""
        try:
            children = self.zk.get_children(paths.CONFIG_CHANGES)
        except NoNodeError:
            return
        except TRANSIENT_ERRORS as e:
            log.warning("cannot list config change notifications %s", kv(error=type(e).__name__))
            return
        notifications = paths.sorted_sequential(children, paths.CONFIG_CHANGE_PREFIX)
        now = self.clock_ms()
        for node in notifications:
            seq = paths.sequence_number(node)
            if seq <= self._last:
                continue
            try:
                self._process_notification(node)
            except TRANSIENT_ERRORS as e:
                # Not applied and not skipped: the next round (new notification or reconnect) retries it.
                log.warning("cannot read config change notification %s",
                            kv(notification=node, error=type(e).__name__))
                return
            except Exception as e:  # noqa: BLE001 - anything else is this notification's fault: skip it
                self._error(f"{paths.CONFIG_CHANGES}/{node}", None, f"{type(e).__name__}: {e}", exc_info=True)
            self._last = seq
        self._purge_obsolete(now, notifications)

    def _process_notification(self, node: str) -> None:
        path = f"{paths.CONFIG_CHANGES}/{node}"
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            log.warning("config change notification vanished before it was read %s", kv(path=path))
            return
        try:
            note = codecs.ConfigChangeNotification.decode(data, path=path)
            entity_type, entity_name = note.entity_type, note.entity_name
            if not _valid_entity_name(entity_name):
                raise codecs.MalformedZNodeError(path, f"invalid entity name {entity_name!r}")
        except codecs.MalformedZNodeError as e:
            self._error(path, data, e.reason)
            return
        handler = self.handlers.get(entity_type)
        if handler is None:
            if entity_type in paths.CONFIG_TYPES:
                log.debug("no handler for config change %s", kv(path=path, entity_path=note.entity_path))
            else:
                self._error(path, data, f"unknown entity type {entity_type!r}; expected one of "
                                        + ", ".join(f"'{t}'/" for t in paths.CONFIG_TYPES))
            return
        config = self._read_entity_config(entity_type, entity_name)
        if config is None:
            self._error(path, data, f"unreadable config at {paths.entity_config(entity_type, entity_name)}")
            return
        log.info("processing config change %s", kv(notification=node, entity_path=note.entity_path,
                                                   config=_loggable(config)))
        try:
            handler(entity_name, dict(config))
        except Exception as e:  # noqa: BLE001 - a handler failure must not stop the listener
            self._error(path, data, f"{type(e).__name__}: {e}", exc_info=True)
            return
        self.processed_count += 1

    def _read_entity_config(self, entity_type: str, entity_name: str) -> dict[str, str] | None:
        path = paths.entity_config(entity_type, entity_name)
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return {}
        try:
            return dict(codecs.EntityConfig.decode(data, path=path).config)
        except codecs.MalformedZNodeError:
            return None

    def _error(self, path: str, data: Any, reason: str, exc_info: bool = False) -> None:
        self.error_count += 1
        text = bytes(data or b"").decode("utf-8", "replace")[:200]
        log.error("error processing change notification %s from %s %s", text, path, kv(reason=reason),
                  exc_info=exc_info)

    def _purge_obsolete(self, now_ms: int, notifications: list[str]) -> None:
        if not notifications:
            return
        node_paths = [f"{paths.CONFIG_CHANGES}/{n}" for n in notifications]
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
                log.debug("purged config change notification %s", kv(path=path))
            except NoNodeError:
                pass            # another broker purged it first
            except KazooException as e:
                log.warning("cannot purge config change notification %s", kv(path=path, error=type(e).__name__))


def _loggable(config: Mapping[str, str]) -> str:
    """Config values for a log line; SCRAM credentials and passwords are hidden."""
    hidden = ("password", "scram", "secret")
    return "{" + ",".join(f"{k}={'[hidden]' if any(h in k.lower() for h in hidden) else v}"
                          for k, v in sorted(config.items())) + "}"
