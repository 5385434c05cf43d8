"""Broker configuration of tiered storage (Kafka's ``RemoteLogManagerConfig``), parsed from broker properties
with Kafka's names, defaults and validation messages
(docs/kip-950-tiered-storage.md#configuration).

Plugin class names: unset storage manager = the project's :class:`LocalTieredStorage` (Kafka requires one);
Kafka's ``LocalTieredStorage`` and ``TopicBasedRemoteLogMetadataManager`` names are accepted as aliases of the
project's file-based storage manager and ZooKeeper-backed metadata manager; anything else is a Python class
path (``package.module.Class`` or ``package.module:Class``).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

import attrs

from kafkatier.protocol.errors import InvalidConfigurationError

LONG_MAX = 2**63 - 1

REMOTE_LOG_STORAGE_SYSTEM_ENABLE = "remote.log.storage.system.enable"
RSM_CLASS_NAME = "remote.log.storage.manager.class.name"
RLMM_CLASS_NAME = "remote.log.metadata.manager.class.name"
RSM_PREFIX = "remote.log.storage.manager.impl.prefix"
RLMM_PREFIX = "remote.log.metadata.manager.impl.prefix"
THREAD_POOL_SIZE = "remote.log.manager.thread.pool.size"
COPIER_THREAD_POOL_SIZE = "remote.log.manager.copier.thread.pool.size"
EXPIRATION_THREAD_POOL_SIZE = "remote.log.manager.expiration.thread.pool.size"
TASK_INTERVAL_MS = "remote.log.manager.task.interval.ms"
TASK_RETRY_BACKOFF_MS = "remote.log.manager.task.retry.backoff.ms"
TASK_RETRY_BACKOFF_MAX_MS = "remote.log.manager.task.retry.backoff.max.ms"
TASK_RETRY_JITTER = "remote.log.manager.task.retry.jitter"
READER_THREADS = "remote.log.reader.threads"
READER_MAX_PENDING_TASKS = "remote.log.reader.max.pending.tasks"
CUSTOM_METADATA_MAX_BYTES = "remote.log.metadata.custom.metadata.max.bytes"
INDEX_FILE_CACHE_TOTAL_SIZE_BYTES = "remote.log.index.file.cache.total.size.bytes"
COPY_MAX_BYTES_PER_SECOND = "remote.log.manager.copy.max.bytes.per.second"
FETCH_MAX_BYTES_PER_SECOND = "remote.log.manager.fetch.max.bytes.per.second"
REMOTE_FETCH_MAX_WAIT_MS = "remote.fetch.max.wait.ms"
LOG_LOCAL_RETENTION_MS = "log.local.retention.ms"
LOG_LOCAL_RETENTION_BYTES = "log.local.retention.bytes"

KAFKA_LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
KAFKA_TOPIC_BASED_RLMM = "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
PROJECT_LOCAL_TIERED_STORAGE = "kafkatier.log.remote.remote_storage_manager.LocalTieredStorage"
PROJECT_ZK_RLMM = "kafkatier.log.remote.remote_log_metadata_manager.ZkRemoteLogMetadataManager"

_ALIASES = {
    KAFKA_LOCAL_TIERED_STORAGE: PROJECT_LOCAL_TIERED_STORAGE,
    KAFKA_TOPIC_BASED_RLMM: PROJECT_ZK_RLMM,
}


def _exc(name: str, value: Any, reason: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(f"Invalid value {value} for configuration {name}: {reason}")


def _int(name: str, raw: Any, lo: int, hi: int, type_name: str) -> int:
    s = str(raw).strip()
    try:
        v = int(s)
    except ValueError:
        raise _exc(name, raw, f"Not a number of type {type_name}") from None
    if not lo <= v <= hi:
        raise _exc(name, raw, f"Not a number of type {type_name}")
    return v


def _at_least(minimum: int) -> Callable[[str, int], None]:
    def check(name: str, v: int) -> None:
        if v < minimum:
            raise _exc(name, v, f"Value must be at least {minimum}")
    return check


def _minus_one_or_positive(name: str, v: int) -> None:
    if v == 0 or v < -1:
        raise _exc(name, v, "Value can be -1 or greater than 0")


def _parse(props: Mapping[str, Any], name: str, default: int, check: Callable[[str, int], None] | None,
           long: bool = False) -> int:
    raw = props.get(name)
    if raw is None:
        return default
    v = _int(name, raw, -(2**63) if long else -(2**31), (2**63 - 1) if long else (2**31 - 1),
             "LONG" if long else "INT")
    if check is not None:
        check(name, v)
    return v


def _bool(props: Mapping[str, Any], name: str, default: bool) -> bool:
    raw = props.get(name)
    if raw is None:
        return default
    s = str(raw).strip().lower()
    if s not in ("true", "false"):
        raise _exc(name, raw, "Expected value to be either true or false")
    return s == "true"


@attrs.frozen
class RemoteLogManagerConfig:
    """The broker's tiered-storage settings.  ``copier_thread_pool_size`` / ``expiration_thread_pool_size``
    keep the configured value (-1 = fall back); use the ``effective_*`` properties for the pool sizes."""

    remote_log_storage_system_enable: bool = False
    remote_storage_manager_class_name: str | None = None
    remote_log_metadata_manager_class_name: str = KAFKA_TOPIC_BASED_RLMM
    remote_storage_manager_props: dict = attrs.field(factory=dict)
    remote_log_metadata_manager_props: dict = attrs.field(factory=dict)
    thread_pool_size: int = 10
    copier_thread_pool_size: int = -1
    expiration_thread_pool_size: int = -1
    task_interval_ms: int = 30000
    task_retry_backoff_ms: int = 500
    task_retry_backoff_max_ms: int = 30000
    task_retry_jitter: float = 0.2
    reader_threads: int = 10
    reader_max_pending_tasks: int = 100
    custom_metadata_max_bytes: int = 128
    index_file_cache_total_size_bytes: int = 1024 * 1024 * 1024
    copy_max_bytes_per_second: int = LONG_MAX
    fetch_max_bytes_per_second: int = LONG_MAX
    remote_fetch_max_wait_ms: int = 500
    log_local_retention_ms: int = -2
    log_local_retention_bytes: int = -2

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> RemoteLogManagerConfig:
        """Parse broker properties (strings); raises InvalidConfigurationError with Kafka's messages."""
        rsm_prefix = str(props.get(RSM_PREFIX, "rsm.config."))
        rlmm_prefix = str(props.get(RLMM_PREFIX, "rlmm.config."))
        jitter_raw = props.get(TASK_RETRY_JITTER)
        try:
            jitter = 0.2 if jitter_raw is None else float(str(jitter_raw).strip())
        except ValueError:
            raise _exc(TASK_RETRY_JITTER, jitter_raw, "Not a number of type DOUBLE") from None
        if not 0.0 <= jitter <= 0.5:
            raise _exc(TASK_RETRY_JITTER, jitter_raw,
                       "Value must be at least 0.0" if jitter < 0 else "Value must be no more than 0.5")
        return cls(
            remote_log_storage_system_enable=_bool(props, REMOTE_LOG_STORAGE_SYSTEM_ENABLE, False),
            remote_storage_manager_class_name=(str(props[RSM_CLASS_NAME]).strip() or None)
            if props.get(RSM_CLASS_NAME) is not None else None,
            remote_log_metadata_manager_class_name=str(props.get(RLMM_CLASS_NAME, KAFKA_TOPIC_BASED_RLMM)).strip(),
            remote_storage_manager_props={k[len(rsm_prefix):]: v for k, v in props.items()
                                          if k.startswith(rsm_prefix)},
            remote_log_metadata_manager_props={k[len(rlmm_prefix):]: v for k, v in props.items()
                                               if k.startswith(rlmm_prefix)},
            thread_pool_size=_parse(props, THREAD_POOL_SIZE, 10, _at_least(1)),
            copier_thread_pool_size=_parse(props, COPIER_THREAD_POOL_SIZE, -1, _minus_one_or_positive),
            expiration_thread_pool_size=_parse(props, EXPIRATION_THREAD_POOL_SIZE, -1, _minus_one_or_positive),
            task_interval_ms=_parse(props, TASK_INTERVAL_MS, 30000, _at_least(1), long=True),
            task_retry_backoff_ms=_parse(props, TASK_RETRY_BACKOFF_MS, 500, _at_least(1), long=True),
            task_retry_backoff_max_ms=_parse(props, TASK_RETRY_BACKOFF_MAX_MS, 30000, _at_least(1), long=True),
            task_retry_jitter=jitter,
            reader_threads=_parse(props, READER_THREADS, 10, _at_least(1)),
            reader_max_pending_tasks=_parse(props, READER_MAX_PENDING_TASKS, 100, _at_least(1)),
            custom_metadata_max_bytes=_parse(props, CUSTOM_METADATA_MAX_BYTES, 128, _at_least(0)),
            index_file_cache_total_size_bytes=_parse(props, INDEX_FILE_CACHE_TOTAL_SIZE_BYTES, 1024 ** 3,
                                                     _at_least(1), long=True),
            copy_max_bytes_per_second=_parse(props, COPY_MAX_BYTES_PER_SECOND, LONG_MAX, _at_least(1), long=True),
            fetch_max_bytes_per_second=_parse(props, FETCH_MAX_BYTES_PER_SECOND, LONG_MAX, _at_least(1),
                                              long=True),
            remote_fetch_max_wait_ms=_parse(props, REMOTE_FETCH_MAX_WAIT_MS, 500, _at_least(1)),
            log_local_retention_ms=_parse(props, LOG_LOCAL_RETENTION_MS, -2, _at_least(-2), long=True),
            log_local_retention_bytes=_parse(props, LOG_LOCAL_RETENTION_BYTES, -2, _at_least(-2), long=True),
        )

    @property
    def effective_copier_thread_pool_size(self) -> int:
        return self.thread_pool_size if self.copier_thread_pool_size == -1 else self.copier_thread_pool_size

    @property
    def effective_expiration_thread_pool_size(self) -> int:
        return self.thread_pool_size if self.expiration_thread_pool_size == -1 else self.expiration_thread_pool_size


def resolve_class(name: str | None, default: str) -> type:
    """The plugin class for a configured name (aliases and Python class paths, see module docstring)."""
    path = _ALIASES.get(name or default, name or default)
    module_name, sep, cls_name = path.partition(":")
    if not sep:
        module_name, _, cls_name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, cls_name)
    except (ImportError, AttributeError, ValueError) as e:
        raise InvalidConfigurationError(f"Class {name} cannot be found: {e}") from None
