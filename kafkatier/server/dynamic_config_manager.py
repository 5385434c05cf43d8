"""DynamicConfigManager: applies dynamic config changes announced under ``/config/changes`` (Kafka's
``ZkConfigManager``, the handler of a ``ZkNodeChangeNotificationListener``).

An admin writes ``/config/<type>/<name>`` and then creates ``/config/changes/config_change_NNNNNNNNNN`` naming the
entity (version 2 ``{"entity_path":"topics/t"}``, or version 1 ``entity_type`` + ``entity_name``).  The listener
(``zk/node_change_notification_listener.py``: children watch, reconnections, sequence order, expiry of
notifications older than ``change_expiration_ms``, its own thread) hands each new notification to this manager,
which re-reads the entity's config znode (absent = no overrides) and calls
``handlers[entity_type](entity_name, config)``.  Notifications carry no values, so a late reader always sees the
newest config.

Start-up: notifications already present are not replayed (the baseline is the highest existing number); callers
read the current configs themselves *after* :meth:`start`, so a change made in between is seen either way.

Failures: a malformed notification or entity config, an unknown entity type, or a handler exception is logged
("error processing change notification") and skipped; the old config stays in force and there is no retry, as in
Kafka.  A ZooKeeper error while listing or reading leaves the notification unprocessed until the next trigger
(a new notification or a reconnect).
"""
from __future__ import annotations

import time
from typing import Callable, Mapping

from kafkatier.zk.errors import NoNodeError

from kafkatier.logsetup import get_logger, kv
from kafkatier.zk import codecs, paths
from kafkatier.zk.node_change_notification_listener import (CHANGE_EXPIRATION_MS, NotificationError,
                                                             ZkNodeChangeNotificationListener)

log = get_logger("server.dynamic_config")

ConfigHandler = Callable[[str, dict[str, str]], None]


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
        self.processed_count = 0
        self._listener = ZkNodeChangeNotificationListener(
            zk, paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX, self, change_expiration_ms=change_expiration_ms,
            clock_ms=clock_ms, process_existing=process_existing, name=name)

    @property
    def last_processed(self) -> int:
        """Sequence number of the last notification processed (-1: none)."""
        return self._listener.last_processed

    @property
    def error_count(self) -> int:
        return self._listener.error_count

    def start(self) -> None:
        log.info("config change handlers %s", kv(entity_types=",".join(sorted(self.handlers))))
        self._listener.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._listener.stop(timeout)

    def trigger(self) -> None:
        """Process pending notifications soon (on the listener's thread)."""
        self._listener.trigger()

    # --- NotificationHandler (the listener's thread) -------------------------------------------------------------
    def process_notification(self, path: str, data: bytes) -> None:
        try:
            note = codecs.ConfigChangeNotification.decode(data, path=path)
            entity_type, entity_name = note.entity_type, note.entity_name
            user, nested, client = entity_name.partition("/clients/")   # users/<u>/clients/<c> (KIP-55)
            if not (_valid_entity_name(user) and _valid_entity_name(client) if nested and entity_type == "users"
                    else _valid_entity_name(entity_name)):
                raise codecs.MalformedZNodeError(path, f"invalid entity name {entity_name!r}")
        except codecs.MalformedZNodeError as e:
            raise NotificationError(e.reason) from None
        handler = self.handlers.get(entity_type)
        if handler is None:
            if entity_type in paths.CONFIG_TYPES:
                log.debug("no handler for config change %s", kv(path=path, entity_path=note.entity_path))
                return
            raise NotificationError(f"unknown entity type {entity_type!r}; expected one of "
                                    + ", ".join(f"'{t}'/" for t in paths.CONFIG_TYPES))
        config = self._read_entity_config(entity_type, entity_name)
        if config is None:
            raise NotificationError(f"unreadable config at {paths.entity_config(entity_type, entity_name)}")
        log.info("processing config change %s", kv(notification=path.rpartition("/")[2],
                                                   entity_path=note.entity_path, config=_loggable(config)))
        handler(entity_name, dict(config))   # its failure: logged and skipped by the listener
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


def _loggable(config: Mapping[str, str]) -> str:
    """Config values for a log line; SCRAM credentials and passwords are hidden."""
    hidden = ("password", "scram", "secret")
    return "{" + ",".join(f"{k}={'[hidden]' if any(h in k.lower() for h in hidden) else v}"
                          for k, v in sorted(config.items())) + "}"
