"""LogDirFailureChannel: where the log layer reports a log dir that failed (Kafka's ``LogDirFailureChannel``,
KIP-112; docs/kip-113-jbod.md#offline-log-dirs).

Whoever hits an I/O error on a dir (a segment append or roll, a flush, a checkpoint write, creating a log, a
move's future log, the periodic health check) calls :meth:`maybe_add_offline_log_dir`.  Each dir is reported
**once**: the first report queues it, later ones only log.  The replica manager's ``LogDirFailureHandler``
thread takes queued dirs (:meth:`take_next_offline_log_dir`) and takes them offline: the log manager drops their
logs, the partitions in them go offline (KAFKA_STORAGE_ERROR), a ``/log_dir_event_notification`` node tells the
controller, and the broker halts when no dir is left.

:func:`is_storage_failure` decides what counts: an ``OSError``, or a ``KafkaStorageError`` caused by one (the log
wraps its I/O errors so); a ``KafkaStorageError`` without an ``OSError`` cause (say, a log closed because its
partition was deleted) is not a dir failure.
"""
from __future__ import annotations

import queue
import threading

from kafkatier.log.errors import KafkaStorageError
from kafkatier.logsetup import get_logger, kv

log = get_logger("log-dir-failure")


def is_storage_failure(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return True
    return isinstance(exc, KafkaStorageError) and isinstance(exc.__cause__, OSError)


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offline: set[str] = set()
        self._queue: queue.Queue[str] = queue.Queue()

    def has_offline_log_dir(self, log_dir: str) -> bool:
        with self._lock:
            return log_dir in self._offline

    def maybe_add_offline_log_dir(self, log_dir: str, message: str, exc: BaseException | None = None) -> None:
        with self._lock:
            first = log_dir not in self._offline
            self._offline.add(log_dir)
        log.error("log dir failure %s", kv(dir=log_dir, message=message, error=repr(exc) if exc else None,
                                           first_report=first))
        if first:
            self._queue.put(log_dir)

    def take_next_offline_log_dir(self, timeout_s: float | None = None) -> str | None:
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None


__all__ = ["LogDirFailureChannel", "is_storage_failure"]
