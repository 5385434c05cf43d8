"""The broker's set of partition logs across its log dirs (Kafka's ``LogManager``).

Per log dir it owns ``.lock``, ``meta.properties``, the checkpoint files (``recovery-point-offset-checkpoint``,
``replication-offset-checkpoint``, ``log-start-offset-checkpoint``) and the clean shutdown marker
``.kafka_cleanshutdown``. A background scheduler runs retention, flush and checkpoint tasks.

Start-up: every ``<topic>-<partition>`` directory is loaded; directories marked for deletion (``.<uuid>-delete`` /
``.delete``) are removed after ``file.delete.delay.ms``; JBOD destinations (``.move``, Kafka's ``.<uuid>-future``)
are loaded as future logs and recovered as docs/kip-113-jbod.md#start-up-recovery says (see
:meth:`LogManager._recover_future_logs`); other names are logged and skipped. Without a clean shutdown marker, logs
are recovered from their checkpointed recovery points.  Logs of one dir load in parallel on
``num.recovery.threads.per.data.dir`` threads (:data:`DEFAULT_RECOVERY_THREADS_PER_DATA_DIR`).

At scale (20,000 replicas per broker): no log keeps a file descriptor it does not use.  Segments open their
``.log`` file on first use and indexes load on first use (:mod:`kafkatier.log.segment`); every loaded log
releases its files at once, and the ``kafka-log-file-release`` task releases every log's files each
``file_release_interval_ms``, so open descriptors track the partitions used in the last interval, not the
partitions hosted.  Choosing the dir of a new log counts logs per dir once and keeps the counts up to date,
not once per new log.

JBOD (KIP-113): a partition may have a *current* log and a *future* log (``<tp>.move`` in another dir) while a
move runs. :meth:`create_future_log`, :meth:`abort_and_delete_future_log` and
:meth:`replace_current_with_future_log` are Kafka's ``maybeUpdatePreferredLogDir`` / ``getOrCreateLog(isFuture)``,
``abortAndPauseCleaning`` + ``asyncDelete(isFuture)`` and ``replaceCurrentWithFutureLog``. Differences from
Kafka: KIP-113's names (``.move`` / ``.delete``) are written, and the swap renames the source first (Kafka
renames the future dir first), so a crash between the renames leaves ``.delete`` + ``.move``, which start-up
completes. The log cleaner gives up a cleaning whose log was closed or replaced meanwhile (the swap checks).
"""
from __future__ import annotations

import ctypes
import fcntl
import itertools
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

from kafkatier.common.faults import crash_point
from kafkatier.common.scheduler import KafkaScheduler, ScheduledTask
from kafkatier.log.log_cleaner import CleanerConfig, LogCleaner
from kafkatier.log.broker_metadata import ensure_meta_properties
from kafkatier.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from kafkatier.log.dir_names import (
    REMOTE_INDEX_CACHE_DIR,
    MalformedDirNameError,
    delete_dir_name,
    move_dir_name,
    parse_partition_dir,
    partition_dir_name,
    kip113_delete_dir_name,
    validate_topic_name,
)
from kafkatier.log.errors import KafkaError, KafkaStorageError, LogDirectoryError
from kafkatier.log.log import Log
from kafkatier.log.log_dir_failure_channel import LogDirFailureChannel, is_storage_failure
from kafkatier.log.log_config import LONG_MAX, LogConfig
from kafkatier.logsetup import get_logger, kv

log = get_logger("log-manager")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
# Kafka's default is 1.  Loading a log is mostly Python work under the GIL, so threads only help where a log
# waits on the disk: an unclean start reads and checksums its unflushed segments.  Measured on 10,000 empty logs
# (2 busy cores): a clean load costs ~0.28 ms/partition on 1 or 2 threads and ~0.39 on 4; an unclean one 0.60 on
# 1 thread, 0.49 on 2, 0.62 on 4.  Two threads per dir: never slower, faster when recovery reads data.
DEFAULT_RECOVERY_THREADS_PER_DATA_DIR = 2
DEFAULT_FILE_RELEASE_INTERVAL_MS = 60_000
LOCK_FILE = ".lock"

TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return int(time.time() * 1000)


class LogManager:
    """Creates, loads, retains, checkpoints and deletes partition logs."""

    def __init__(self, log_dirs: list[str], *, default_config: LogConfig | None = None,
                 topic_configs: Mapping[str, LogConfig | Mapping[str, Any]]
                 | Callable[[str], LogConfig | Mapping[str, Any] | None] | None = None,
                 broker_id: int | None = None, cluster_id: str | None = None, broker_epoch: int = -1,
                 retention_check_interval_ms: int = 300000,
                 flush_check_interval_ms: int = LONG_MAX,
                 flush_recovery_offset_checkpoint_interval_ms: int = 60000,
                 flush_start_offset_checkpoint_interval_ms: int = 60000,
                 initial_task_delay_ms: int = 30000,
                 remote_log_system_enabled: bool = False,
                 scheduler: KafkaScheduler | None = None,
                 log_dir_failure_channel: LogDirFailureChannel | None = None,
                 log_dir_health_check_interval_ms: int = 1000,
                 num_recovery_threads_per_data_dir: int = DEFAULT_RECOVERY_THREADS_PER_DATA_DIR,
                 file_release_interval_ms: int = DEFAULT_FILE_RELEASE_INTERVAL_MS,
                 cleaner_config: CleanerConfig | None = None,
                 clock: Callable[[], int] = _now_ms):
        if not log_dirs:
            raise ValueError("At least one log dir is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise LogDirectoryError(f"Duplicate log directory found: {', '.join(self.log_dirs)}")
        self.default_config = default_config or LogConfig()
        self._parsed_configs: dict[str, tuple[dict, LogConfig]] = {}
        self._topic_configs = topic_configs
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.broker_epoch = broker_epoch
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_check_interval_ms = flush_check_interval_ms
        self.flush_recovery_offset_checkpoint_interval_ms = flush_recovery_offset_checkpoint_interval_ms
        self.flush_start_offset_checkpoint_interval_ms = flush_start_offset_checkpoint_interval_ms
        self.initial_task_delay_ms = initial_task_delay_ms
        self.remote_log_system_enabled = remote_log_system_enabled
        self.log_dir_failure_channel = log_dir_failure_channel or LogDirFailureChannel()
        self.log_dir_health_check_interval_ms = log_dir_health_check_interval_ms
        if num_recovery_threads_per_data_dir < 1:
            raise ValueError(f"num.recovery.threads.per.data.dir must be at least 1, got "
                             f"{num_recovery_threads_per_data_dir}")
        self.num_recovery_threads_per_data_dir = num_recovery_threads_per_data_dir
        self.file_release_interval_ms = file_release_interval_ms
        self._dir_counts: dict[str, int] | None = None  # logs per dir for placing new logs; None = recount
        self._clock = clock
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self._logs: dict[TopicPartition, Log] = {}
        self._lock_fds: dict[str, int] = {}
        self.offline_dirs: set[str] = set()
        self._future_logs: dict[TopicPartition, Log] = {}
        self._pending_deletions: list[tuple[str, int]] = []  # (dir, delay ms) found at start-up
        self._preferred_dirs: dict[TopicPartition, str] = {}
        # Idle work proportional to change: a new number after anything a checkpoint holds may have changed (a
        # log's high watermark, recovery point or log start offset -- each log calls :meth:`_offsets_changed`
        # -- or the set and place of the logs); each checkpoint file remembers the number it was written at,
        # and the periodic tasks skip a dir whose file is still current (:meth:`_dirs_to_write`).
        self._offsets_seq = itertools.count(1)
        self.offsets_version = 0
        self._written_at: dict[tuple[str, str], int] = {}   # (checkpoint name, dir) -> offsets_version then
        self._listener = self._offsets_changed   # one bound method shared by every log (not one per log)
        # The broker's scheduler (started and stopped by its owner), or one of our own.
        self._owns_scheduler = scheduler is None
        self.scheduler = scheduler if scheduler is not None else KafkaScheduler(1, "kafka-scheduler-")
        self._tasks: list[ScheduledTask] = []
        self._started = False
        self._shut_down = False
        self._prepare_dirs()
        self._load_logs()
        # Kafka's LogCleaner (docs/log-compaction.md); None: no cleaner (tools and tests that load logs only).
        # It cleans no further than each log's last stable offset (Log.last_stable_offset).
        self.cleaner = (LogCleaner(cleaner_config, self.live_log_dirs, self.all_logs, clock)
                        if cleaner_config is not None else None)

    # --- start-up ------------------------------------------------------------------------------------
    @property
    def live_log_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def _prepare_dirs(self) -> None:
        for d in self.log_dirs:
            try:
                os.makedirs(d, exist_ok=True)
                if not os.path.isdir(d) or not os.access(d, os.R_OK | os.W_OK):
                    raise OSError(f"{d} is not a readable and writable directory")
            except OSError as e:
                log.error(kv(event="log_dir_offline", dir=d, error=e))
                self.offline_dirs.add(d)
                continue
            self._lock_dir(d)
            if self.broker_id is not None:
                ensure_meta_properties(d, self.broker_id, self.cluster_id)
        if not self.live_log_dirs:
            raise KafkaStorageError(f"Shutdown broker because all log dirs in {', '.join(self.log_dirs)} have failed")

    def _lock_dir(self, d: str) -> None:
        fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            self._release_locks()
            raise LogDirectoryError(f"Failed to acquire lock on file {LOCK_FILE} in {d}. A Kafka instance in "
                                    f"another process or thread is using this directory.") from None
        self._lock_fds[d] = fd

    def _release_locks(self) -> None:
        for fd in self._lock_fds.values():
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._lock_fds.clear()

    def _read_checkpoint(self, d: str, name: str, fallback: str) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(os.path.join(d, name)).read()
        except (KafkaStorageError, OSError) as e:
            log.warning(kv(event="checkpoint_unreadable", file=os.path.join(d, name), error=e, fallback=fallback))
            return {}

    def _load_logs(self) -> None:
        for d in self.live_log_dirs:
            started = time.monotonic()
            marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(marker)
            if clean:
                log.info(kv(event="clean_shutdown_found", dir=d, action="skipping recovery"))
            recovery_points = self._read_checkpoint(d, RECOVERY_POINT_CHECKPOINT, "recovery point 0")
            start_offsets = self._read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT, "first segment base offset")
            high_watermarks = self._read_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT, "log start offset")
            try:  # the entries' types come with the listing: no stat per partition dir
                with os.scandir(d) as it:
                    entries = sorted((e.name, e.path) for e in it if e.is_dir())
            except OSError as e:
                log.error(kv(event="log_dir_offline", dir=d, error=e))
                self.offline_dirs.add(d)
                continue
            jobs = []  # (tp, kind, path) of the logs to load from this dir
            seen: dict[tuple[TopicPartition, bool], str] = {}
            for name, path in entries:
                if name == REMOTE_INDEX_CACHE_DIR:
                    continue
                try:
                    parsed = parse_partition_dir(path)
                except MalformedDirNameError as e:
                    log.error(kv(event="malformed_log_dir_skipped", dir=path, error=str(e).replace("\n", " ")))
                    continue
                tp = parsed.topic_partition
                if parsed.kind == "delete":
                    self._pending_deletions.append((path, self._loaded_config(parsed.topic).file_delete_delay_ms))
                    continue
                existing = self._logs.get(tp) if parsed.kind == "current" else None
                if existing is not None:
                    self._release_locks()
                    raise LogDirectoryError(
                        f"Duplicate log directories for {parsed.topic}-{parsed.partition} are found in both "
                        f"{existing.dir} and {path}. It is likely because log directory failure happened while "
                        f"broker was replacing current replica with future replica. Recover broker from this "
                        f"failure by manually deleting one of the two directories for this partition. It is "
                        f"recommended to delete the partition in the log directory that is known to have failed "
                        f"recently.")
                if parsed.kind == "future":
                    other = self._future_logs.get(tp)
                    other_dir = other.dir if other is not None else seen.get((tp, True))
                    if other_dir is not None:
                        self._release_locks()
                        raise LogDirectoryError(f"Duplicate log directories found: {other_dir}, {path}")
                    seen[(tp, True)] = path
                jobs.append((tp, parsed.kind, path))

            def load(job) -> Log:
                tp, _, path = job
                cfg = self._loaded_config(tp[0])
                lg = Log(path, cfg, log_start_offset=start_offsets.get(tp, 0),
                         recovery_point=recovery_points.get(tp, 0), high_watermark=high_watermarks.get(tp),
                         had_clean_shutdown=clean, scheduler=self.scheduler, clock=self._clock,
                         default_config=self.default_config, remote_log_enabled=self._remote_enabled(tp[0], cfg))
                lg.release_files()
                return lg

            loaded: list[tuple[tuple, Log]] = []
            failure: tuple[tuple, BaseException] | None = None
            with ThreadPoolExecutor(max_workers=self.num_recovery_threads_per_data_dir,
                                    thread_name_prefix="log-recovery-") as pool:
                futures = [(job, pool.submit(load, job)) for job in jobs]
                for job, fut in futures:
                    try:
                        loaded.append((job, fut.result()))
                    except Exception as e:  # noqa: BLE001 - handled below: the dir goes offline
                        if failure is None:
                            failure = (job, e)
                            for _, later in futures:
                                later.cancel()
            if failure is not None:  # an I/O error (or worse) takes the dir offline; nothing is deleted
                (tp, _, _), e = failure
                log.error(kv(event="log_dir_offline", dir=d, partition=f"{tp[0]}-{tp[1]}", error=e),
                          exc_info=e)
                self.offline_dirs.add(d)
                for _, lg in loaded:
                    lg.close()
                for logs in (self._logs, self._future_logs):
                    for other in [k for k, v in logs.items() if v.parent_dir == d]:
                        logs.pop(other).close()
            else:
                for (tp, kind, _), lg in loaded:
                    (self._future_logs if kind == "future" else self._logs)[tp] = self._track(lg)
                # Kafka's "Loaded N logs in X ms": one line per dir, not one per log.
                log.info(kv(event="logs_loaded", dir=d, logs=len(loaded), clean_shutdown=clean,
                            threads=self.num_recovery_threads_per_data_dir,
                            ms=round((time.monotonic() - started) * 1000)))
            if clean:
                try:
                    os.unlink(marker)
                except FileNotFoundError:
                    pass
        if not self.live_log_dirs:
            raise KafkaStorageError(f"Shutdown broker because all log dirs in {', '.join(self.log_dirs)} have failed")
        self._recover_future_logs()

    def startup(self) -> None:
        """Start the background tasks (Kafka's names: kafka-log-retention, kafka-log-flusher, ...)."""
        if self._started:
            return
        self._started = True
        s = self.scheduler
        if self._owns_scheduler:
            s.startup()
        delay = self.initial_task_delay_ms
        tasks = [s.schedule("kafka-log-retention", self._safe(self.cleanup_logs), delay,
                            self.retention_check_interval_ms)]
        if self.flush_check_interval_ms < LONG_MAX:
            tasks.append(s.schedule("kafka-log-flusher", self._safe(self.flush_dirty_logs), delay,
                                    self.flush_check_interval_ms))
        tasks.append(s.schedule("kafka-recovery-point-checkpoint",
                                self._safe(lambda: self.checkpoint_recovery_points(only_if_changed=True)), delay,
                                self.flush_recovery_offset_checkpoint_interval_ms))
        tasks.append(s.schedule("kafka-log-start-offset-checkpoint",
                                self._safe(lambda: self.checkpoint_log_start_offsets(only_if_changed=True)),
                                delay, self.flush_start_offset_checkpoint_interval_ms))
        if self.log_dir_health_check_interval_ms < LONG_MAX:
            tasks.append(s.schedule("kafka-log-dir-health-check", self._safe(self.check_log_dirs),
                                    self.log_dir_health_check_interval_ms, self.log_dir_health_check_interval_ms))
        if self.file_release_interval_ms < LONG_MAX:
            tasks.append(s.schedule("kafka-log-file-release", self._safe(self.release_files),
                                    self.file_release_interval_ms, self.file_release_interval_ms))
        # Epoch checkpoints the load truncated in memory only (LeaderEpochFileCache): a log in use writes its own
        # first, so this pass waits until a restarted broker has likely caught up (one file replacement per log).
        tasks.append(s.schedule("leader-epoch-cache-flush", self._safe(self.write_leader_epoch_checkpoints),
                                delay + self.flush_recovery_offset_checkpoint_interval_ms))
        self._tasks = tasks
        if self.cleaner is not None:
            self.cleaner.startup()
        for path, delay_ms in self._pending_deletions:
            self._schedule_dir_deletion(path, delay_ms)
        self._pending_deletions.clear()

    def write_leader_epoch_checkpoints(self) -> None:
        """Write every epoch checkpoint left unwritten (each log's own write happens first when it is used)."""
        for lg in self.all_logs() + self.all_future_logs():
            try:
                lg.write_leader_epoch_checkpoint()
            except OSError as e:  # the log's next flush writes it again, or fails the dir
                log.warning(kv(event="leader_epoch_checkpoint_write_failed", partition=lg.name, error=e))

    def _safe(self, fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            if not self._shut_down:
                fn()
        return run

    # --- configs -------------------------------------------------------------------------------------
    def _config_for(self, topic: str) -> LogConfig | Mapping[str, Any]:
        src = self._topic_configs
        cfg = None
        if callable(src):
            cfg = src(topic)
        elif src is not None:
            cfg = src.get(topic)
        return cfg or self.default_config

    def _parsed(self, topic: str, cfg: LogConfig | Mapping[str, Any] | None) -> LogConfig:
        """``cfg`` as a LogConfig over the defaults, parsed once per topic and overrides (a topic with a
        thousand partitions is not parsed a thousand times).  Raises KafkaError for a bad config."""
        if isinstance(cfg, LogConfig):
            return cfg
        overrides = dict(cfg or {})
        cached = self._parsed_configs.get(topic)
        if cached is not None and cached[0] == overrides:
            return cached[1]
        parsed = LogConfig.from_props(overrides, defaults=self.default_config)
        self._parsed_configs[topic] = (overrides, parsed)
        return parsed

    def _loaded_config(self, topic: str) -> LogConfig:
        """The topic's config for a log found at start-up; a bad stored config falls back to the defaults."""
        try:
            return self._parsed(topic, self._config_for(topic))
        except KafkaError as e:
            log.error(kv(event="topic_config_invalid", topic=topic, error=e, action="using broker defaults"))
            return self.default_config

    def _remote_enabled(self, topic: str, cfg) -> bool:
        """Tiering is effective with the system flag on, ``remote.storage.enable=true``, no compaction and a
        non-internal topic (docs/kip-950-tiered-storage.md#configuration)."""
        if not self.remote_log_system_enabled or topic.startswith("__"):
            return False
        cfg = self._parsed(topic, cfg)
        return cfg.remote_storage_enable and not cfg.compact

    def update_topic_config(self, topic: str, config: LogConfig | Mapping[str, Any]) -> None:
        """Apply a changed topic config (LogConfig or Kafka topic config strings) to the topic's logs."""
        parsed = self._parsed(topic, config)
        for lg in self.all_logs():
            if lg.topic == topic:
                lg.update_config(parsed)
        self._offsets_changed()   # remote storage on or off: which logs log-start-offset-checkpoint lists

    def update_broker_defaults(self, default_config: LogConfig,
                               topic_overrides: Callable[[str], Mapping[str, Any]]) -> None:
        """Dynamic broker config (``log.retention.*`` and the other topic defaults): every log takes its topic
        overrides over the new defaults."""
        self.default_config = default_config
        for lg in self.all_logs():
            lg.update_config(dict(topic_overrides(lg.topic) or {}), default_config=default_config)
        self._offsets_changed()

    # --- lookup and creation -------------------------------------------------------------------------
    def release_files(self) -> int:
        """Close the descriptors (and drop the index entries) every log holds; they reopen on next use."""
        closed = sum(lg.release_files() for lg in self.all_logs() + self.all_future_logs())
        if closed:
            log.debug(kv(event="log_files_released", descriptors=closed))
        return closed

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def logs_by_dir(self) -> dict[str, list[Log]]:
        """Current and future logs per log dir (checkpoints cover both, as in Kafka)."""
        out: dict[str, list[Log]] = {d: [] for d in self.log_dirs}
        for lg in self.all_logs() + self.all_future_logs():
            out.setdefault(lg.parent_dir, []).append(lg)
        return out

    def set_preferred_log_dir(self, topic: str, partition: int, log_dir: str) -> None:
        """Hook for AlterReplicaLogDirs: where the next new log of this partition should go."""
        self._preferred_dirs[(topic, partition)] = os.path.abspath(log_dir)

    def _next_log_dirs(self, tp: TopicPartition) -> list[str]:
        live = self.live_log_dirs
        preferred = self._preferred_dirs.get(tp)
        if self._dir_counts is None:
            self._dir_counts = {}
            for lg in self.all_logs() + self.all_future_logs():
                self._dir_counts[lg.parent_dir] = self._dir_counts.get(lg.parent_dir, 0) + 1
        counts = {d: self._dir_counts.get(d, 0) for d in live}
        ordered = sorted(live, key=lambda d: counts[d])  # stable: ties keep the configured order
        if preferred in counts:
            ordered.remove(preferred)
            ordered.insert(0, preferred)
        return ordered

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | Mapping[str, Any] | None = None,
                          is_new: bool = False, topic_id: str | None = None) -> Log:
        """The partition's log, created in the dir with the fewest logs when it does not exist yet.

        ``config`` is a LogConfig or a dict of Kafka topic config strings (over the manager's defaults);
        None uses the manager's topic configs."""
        tp = (topic, partition)
        with self._lock:
            existing = self._logs.get(tp)
            if existing is not None:
                if topic_id is not None:
                    existing.assign_topic_id(topic_id)
                return existing
            validate_topic_name(topic)
            if partition < 0:
                raise ValueError(f"Invalid partition {partition} for topic {topic}")
            if self.offline_dirs and not is_new:
                raise KafkaStorageError(f"Can not create log for {topic}-{partition} because log directories "
                                        f"{', '.join(sorted(self.offline_dirs))} are offline")
            errors = []
            for d in self._next_log_dirs(tp):
                path = os.path.join(d, partition_dir_name(topic, partition))
                try:
                    cfg = self._parsed(topic, config if config is not None else self._config_for(topic))
                    lg = Log(path, cfg, had_clean_shutdown=not os.path.exists(path), scheduler=self.scheduler,
                             clock=self._clock,
                             topic_id=topic_id, default_config=self.default_config,
                             remote_log_enabled=self._remote_enabled(topic, cfg))
                except OSError as e:
                    self.report_failure(d, f"Error while creating log for {topic}-{partition} in dir {d}", e)
                    errors.append(f"{d}: {e}")
                    continue
                self._logs[tp] = self._track(lg)
                if self._dir_counts is not None:
                    self._dir_counts[d] = self._dir_counts.get(d, 0) + 1
                self._preferred_dirs.pop(tp, None)
                log.info(kv(event="log_created", partition=f"{topic}-{partition}", dir=d, topic_id=topic_id,
                            overrides=",".join(sorted(lg.config.overridden)) or "-"))
                return lg
            raise KafkaStorageError(f"Can not create log for {topic}-{partition} because log directories "
                                    f"{', '.join(self.log_dirs)} are offline ({'; '.join(errors)})")

    def delete_log(self, topic: str, partition: int) -> Log | None:
        """Remove a partition's log: its dir is renamed ``<topic>-<partition>.<uuid>-delete`` at once and
        removed after ``file.delete.delay.ms`` (immediately if that is 0 or the scheduler is not running)."""
        lg = self._remove_and_close(self._logs, (topic, partition))
        if lg is None:
            return None
        try:
            lg.rename_dir(delete_dir_name(topic, partition))
        except OSError as e:
            log.error(kv(event="log_rename_for_delete_failed", partition=lg.name, error=e))
        delay = lg.config.file_delete_delay_ms
        path = lg.dir
        if self.scheduler.is_running and delay > 0:
            self.scheduler.schedule("kafka-delete-logs", lambda: shutil.rmtree(path, ignore_errors=True), delay)
        else:
            shutil.rmtree(path, ignore_errors=True)
        log.info(kv(event="log_deleted", partition=lg.name, dir=path))
        self.checkpoint_recovery_points(lg.parent_dir)
        self.checkpoint_log_start_offsets(lg.parent_dir)
        return lg

    # --- log dir failures (KIP-112) ----------------------------------------------------------------------
    def report_failure(self, log_dir: str, message: str, exc: BaseException | None = None) -> None:
        """An I/O error in ``log_dir``: no new log goes there from now on; the failure channel's handler takes
        it offline (:meth:`handle_log_dir_failure`)."""
        log_dir = os.path.abspath(log_dir)
        if log_dir in self.log_dirs:
            self.offline_dirs.add(log_dir)
            self.log_dir_failure_channel.maybe_add_offline_log_dir(log_dir, message, exc)

    def check_log_dirs(self) -> None:
        """Periodic health check (project addition): a dir that stopped being a readable, writable directory
        is reported without waiting for the next segment I/O."""
        for d in self.live_log_dirs:
            if not (os.path.isdir(d) and os.access(d, os.R_OK | os.W_OK | os.X_OK)):
                self.report_failure(d, f"Log dir {d} is no longer a readable and writable directory")

    def handle_log_dir_failure(self, log_dir: str) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """Take ``log_dir`` offline: its current and future logs are dropped and closed (nothing is deleted).
        Returns (partitions whose current log was there, partitions whose future log was there)."""
        log_dir = os.path.abspath(log_dir)
        with self._lock:
            self.offline_dirs.add(log_dir)
            self._dir_counts = None
            current = [tp for tp, lg in self._logs.items() if lg.parent_dir == log_dir]
            future = [tp for tp, lg in self._future_logs.items() if lg.parent_dir == log_dir]
            closing = [self._logs.pop(tp) for tp in current] + [self._future_logs.pop(tp) for tp in future]
            self._offsets_changed()
            for tp, d in list(self._preferred_dirs.items()):
                if d == log_dir:
                    del self._preferred_dirs[tp]
        for lg in closing:
            try:
                lg.close()
            except Exception:  # noqa: BLE001 - the dir is broken; closing is best effort
                log.warning(kv(event="close_failed", partition=lg.name, dir=log_dir))
        log.error(kv(event="log_dir_offline", dir=log_dir, partitions=len(current), future_logs=len(future),
                     live_dirs=",".join(self.live_log_dirs) or "-"))
        return sorted(current), sorted(future)

    # --- JBOD: future logs (KIP-113) -------------------------------------------------------------------
    def get_future_log(self, topic: str, partition: int) -> Log | None:
        return self._future_logs.get((topic, partition))

    def all_future_logs(self) -> list[Log]:
        with self._lock:
            return list(self._future_logs.values())

    def preferred_log_dir(self, topic: str, partition: int) -> str | None:
        return self._preferred_dirs.get((topic, partition))

    def forget_preferred_log_dir(self, topic: str, partition: int) -> None:
        self._preferred_dirs.pop((topic, partition), None)

    def _recover_future_logs(self) -> None:
        """docs/kip-113-jbod.md#start-up-recovery: a future log next to a current log is kept (the move resumes
        when the partition becomes a replica again); a future log with no current log anywhere is renamed ``<tp>``
        and becomes the current log when every dir is good (a crash between the two renames of a swap), and is left
        untouched, unloaded, when some dir is offline (the current log may be in it: the partition is offline)."""
        for tp, future in sorted(self._future_logs.items()):
            if tp in self._logs:
                log.info(kv(event="future_log_found", partition=future.name, dir=future.dir,
                            current_dir=self._logs[tp].dir, log_end_offset=future.log_end_offset))
                continue
            del self._future_logs[tp]
            if self.offline_dirs:
                log.warning(kv(event="future_log_left_untouched", partition=future.name, dir=future.dir,
                               offline_dirs=",".join(sorted(self.offline_dirs)),
                               reason="no current log in a good dir and some dir is offline"))
                future.close()
                continue
            future.rename_dir(partition_dir_name(*tp))
            self._logs[tp] = self._track(future)
            log.info(kv(event="future_log_promoted", partition=future.name, dir=future.dir,
                        reason="no current log in any dir"))

    def create_future_log(self, topic: str, partition: int, log_dir: str) -> Log:
        """The partition's future log in ``log_dir`` (``<tp>.move``), created if needed.

        Raises KafkaStorageError when any dir is offline or the dir cannot be written, and ValueError when the
        current log is already there (Kafka: "without having a preferred log directory")."""
        tp = (topic, partition)
        log_dir = os.path.abspath(log_dir)
        with self._lock:
            existing = self._future_logs.get(tp)
            if existing is not None and existing.parent_dir == log_dir:
                return existing
            if existing is not None:
                raise ValueError(f"The future log of {topic}-{partition} is in {existing.parent_dir}, not {log_dir}")
            current = self._logs.get(tp)
            if current is None or current.parent_dir == log_dir:
                raise ValueError(f"Can not create the future log for {topic}-{partition} without having a "
                                 f"preferred log directory")
            if self.offline_dirs:
                raise KafkaStorageError(f"Can not create log for {topic}-{partition} because log directories "
                                        f"{', '.join(sorted(self.offline_dirs))} are offline")
            if log_dir not in self.live_log_dirs:
                raise KafkaStorageError(f"Log dir {log_dir} is offline")
            path = os.path.join(log_dir, move_dir_name(topic, partition))
            try:
                if os.path.exists(path):  # a leftover nobody tracks (e.g. an abandoned move); never data we serve
                    shutil.rmtree(path)
                lg = Log(path, current.config, had_clean_shutdown=True, scheduler=self.scheduler, clock=self._clock,
                         topic_id=current.topic_id, default_config=self.default_config,
                         remote_log_enabled=current.remote_log_enabled)
            except OSError as e:
                log.error(kv(event="future_log_create_failed", dir=log_dir, error=e))
                raise KafkaStorageError(f"Error while creating the future log of {topic}-{partition} in dir "
                                        f"{log_dir}: {e}") from e
            self._future_logs[tp] = self._track(lg)
            self._dir_counts = None
            self._preferred_dirs.pop(tp, None)
        log.info(kv(event="future_log_created", partition=f"{topic}-{partition}", dir=lg.dir,
                    current_dir=current.dir))
        return lg

    def abort_and_delete_future_log(self, topic: str, partition: int) -> Log | None:
        """Drop the partition's future log (a cancelled or failed move): renamed ``<tp>.delete`` at once,
        removed after ``file.delete.delay.ms``."""
        lg = self._remove_and_close(self._future_logs, (topic, partition))
        if lg is None:
            return None
        self._rename_for_deletion(lg)
        self._schedule_dir_deletion(lg.dir, lg.config.file_delete_delay_ms)
        log.info(kv(event="future_log_deleted", partition=lg.name, dir=lg.dir))
        return lg

    def replace_current_with_future_log(self, topic: str, partition: int) -> Log:
        """The swap at the end of a move (the caller holds the partition lock, LEOs are equal): rename the
        source ``<tp>`` to ``<tp>.delete``, then ``<tp>.move`` to ``<tp>`` (source first); the new log takes the
        old one's high watermark and log start offset. The old log stays open for readers that still hold it
        and is deleted after ``file.delete.delay.ms``. Returns the new current log."""
        tp = (topic, partition)
        with self._lock:
            source = self._logs[tp]
            dest = self._future_logs[tp]
            if dest.log_end_offset != source.log_end_offset:
                raise KafkaError(f"The future log of {topic}-{partition} is not caught up: log end offset "
                                 f"{dest.log_end_offset} vs {source.log_end_offset}")
            dest.update_high_watermark(source.high_watermark)
            if source.log_start_offset > dest.log_start_offset:
                dest.maybe_increment_log_start_offset(source.log_start_offset)
            dest.flush()
            self._rename_for_deletion(source)
            crash_point("jbod-between-renames")
            dest.rename_dir(partition_dir_name(topic, partition))
            self._logs[tp] = dest
            del self._future_logs[tp]
            self._dir_counts = None
            self._offsets_changed()
        if self.cleaner is not None:   # Kafka's alterCheckpointDir (outside our lock: the cleaner's is taken first)
            self.cleaner.alter_checkpoint_dir(tp, source.parent_dir, dest.parent_dir)
        log.info(kv(event="future_log_swapped_in", partition=dest.name, dir=dest.dir, old_dir=source.dir,
                    log_end_offset=dest.log_end_offset, high_watermark=dest.high_watermark))
        delay = source.config.file_delete_delay_ms

        def delete_source() -> None:
            source.close()
            shutil.rmtree(source.dir, ignore_errors=True)
            log.info(kv(event="deleted_log_dir", dir=source.dir))
        if self.scheduler.is_running and delay > 0:
            self.scheduler.schedule("kafka-delete-logs", delete_source, delay)
        else:
            delete_source()
        for d in {source.parent_dir, dest.parent_dir}:
            try:
                self.checkpoint_recovery_points(d)
                self.checkpoint_log_start_offsets(d)
            except KafkaStorageError:
                log.exception(kv(event="checkpoint_after_swap_failed", dir=d))
        return dest

    def _remove_and_close(self, logs: dict[tuple[str, int], Log], tp: tuple[str, int]) -> Log | None:
        """Take ``tp``'s log out of ``logs`` (the current or the future logs) and close it; None if absent."""
        with self._lock:
            lg = logs.pop(tp, None)
            self._dir_counts = None
        if lg is not None:
            lg.offsets_listener = None
            self._offsets_changed()
            lg.close()
        return lg

    def _rename_for_deletion(self, lg: Log) -> None:
        """Rename to KIP-113's ``<tp>.delete``.  An older directory of that name (a move A->B->A before the
        first deletion ran, or a re-created topic) is first renamed to Kafka's unique ``.<uuid>-delete`` name and
        removed in the background (renames only here: the caller may hold the partition lock)."""
        target = os.path.join(lg.parent_dir, kip113_delete_dir_name(lg.topic, lg.partition))
        if os.path.exists(target):
            aside = os.path.join(lg.parent_dir, delete_dir_name(lg.topic, lg.partition))
            os.rename(target, aside)
            log.info(kv(event="older_delete_dir_renamed", dir=target, to=aside))
            self._schedule_dir_deletion(aside, 0)
        lg.rename_dir(os.path.basename(target))

    def _schedule_dir_deletion(self, path: str, delay_ms: int) -> None:
        def remove() -> None:
            shutil.rmtree(path, ignore_errors=True)
            log.info(kv(event="deleted_log_dir", dir=path))
        if self.scheduler.is_running:
            self.scheduler.schedule("kafka-delete-logs", remove, max(delay_ms, 0))
        else:
            remove()

    # --- periodic work -------------------------------------------------------------------------------
    def cleanup_logs(self) -> int:
        """Retention pass over every log; returns the number of segments deleted."""
        total = 0
        for lg in self.all_logs():
            try:
                total += lg.delete_old_segments()
            except Exception:
                log.exception(kv(event="retention_failed", partition=lg.name))
        if total:
            log.info(kv(event="retention_done", segments_deleted=total))
        return total

    def flush_dirty_logs(self) -> None:
        """Flush logs whose ``flush.ms`` has elapsed since their last flush."""
        now = self._clock()
        for lg in self.all_logs():
            if now - lg.last_flush_time_ms >= lg.config.flush_ms:
                try:
                    lg.flush()
                except Exception as e:
                    log.exception(kv(event="flush_failed", partition=lg.name))
                    if is_storage_failure(e):
                        self.report_failure(lg.parent_dir, f"Error while flushing {lg.name}", e)

    # --- checkpoints ---------------------------------------------------------------------------------
    def _dirs(self, log_dir: str | None) -> list[str]:
        if log_dir is None:
            return self.live_log_dirs
        return [os.path.abspath(log_dir)] if os.path.abspath(log_dir) not in self.offline_dirs else []

    def _offsets_changed(self, lg: Log | None = None) -> None:
        """A log's checkpointed offsets may have moved (its ``offsets_listener``), or the set of logs changed."""
        self.offsets_version = next(self._offsets_seq)   # itertools.count: atomic, never a number seen before

    def _track(self, lg: Log) -> Log:
        """A log joining the manager: its offset changes now mark the checkpoints stale."""
        lg.offsets_listener = self._listener
        self._offsets_changed()
        return lg

    def _dirs_to_write(self, name: str, log_dir: str | None, only_if_changed: bool) -> tuple[int, list[str]]:
        """The version the snapshot about to be taken reflects at least (read *before* the snapshot: a change
        racing with it makes the next pass write again), and the dirs to write: with ``only_if_changed``
        (the periodic tasks) those whose ``name`` file was not written at this version.  Kafka rewrites every
        file each interval; an unchanged file here is already on disk (written atomically and fsynced)."""
        version = self.offsets_version
        dirs = self._dirs(log_dir)
        if only_if_changed:
            dirs = [d for d in dirs if self._written_at.get((name, d)) != version]
        return version, dirs

    def _write_checkpoint(self, d: str, name: str, offsets: dict[TopicPartition, int],
                          version: int | None = None) -> None:
        try:
            with self._checkpoint_lock:
                OffsetCheckpointFile(os.path.join(d, name)).write(offsets)
                if version is not None:
                    self._written_at[(name, d)] = version
        except OSError as e:
            self._written_at.pop((name, d), None)
            self.report_failure(d, f"Error while writing {name} in dir {d}", e)
            raise KafkaStorageError(f"Error while writing {name} in dir {d}: {e}") from e

    def checkpoint_recovery_points(self, log_dir: str | None = None, only_if_changed: bool = False) -> None:
        """Write ``recovery-point-offset-checkpoint`` (every log's recovery point) per dir; with
        ``only_if_changed`` only where a recovery point or the dir's logs changed since the last write."""
        version, dirs = self._dirs_to_write(RECOVERY_POINT_CHECKPOINT, log_dir, only_if_changed)
        if not dirs:
            return
        by_dir = self.logs_by_dir()
        for d in dirs:
            self._write_checkpoint(d, RECOVERY_POINT_CHECKPOINT,
                                   {lg.topic_partition: lg.recovery_point for lg in by_dir.get(d, [])}, version)

    def checkpoint_log_start_offsets(self, log_dir: str | None = None, only_if_changed: bool = False) -> None:
        """Write ``log-start-offset-checkpoint``: logs whose start offset is above their first segment's base
        (and every tiered log), as Kafka does; ``only_if_changed`` as :meth:`checkpoint_recovery_points`."""
        version, dirs = self._dirs_to_write(LOG_START_OFFSET_CHECKPOINT, log_dir, only_if_changed)
        if not dirs:
            return
        by_dir = self.logs_by_dir()
        for d in dirs:
            offsets = {}
            for lg in by_dir.get(d, []):
                segs = lg.log_segments()
                if lg.remote_log_enabled or (segs and lg.log_start_offset > segs[0].base_offset):
                    offsets[lg.topic_partition] = lg.log_start_offset
            self._write_checkpoint(d, LOG_START_OFFSET_CHECKPOINT, offsets, version)

    def checkpoint_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        """Write ``replication-offset-checkpoint`` per dir, from ``high_watermarks`` (only partitions hosted
        here are written) or from the logs' own high watermarks.  Always writes: the caller
        (``ReplicaManager.checkpoint_high_watermarks``) skips the pass when neither :attr:`offsets_version` nor
        its partitions changed."""
        by_dir = self.logs_by_dir()
        for d in self._dirs(None):
            offsets = {}
            for lg in by_dir.get(d, []):
                if high_watermarks is None or lg.is_future:
                    offsets[lg.topic_partition] = lg.high_watermark
                elif lg.topic_partition in high_watermarks:
                    offsets[lg.topic_partition] = high_watermarks[lg.topic_partition]
            self._write_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT, offsets)

    def read_high_watermarks(self, log_dir: str) -> dict[TopicPartition, int]:
        """The stored ``replication-offset-checkpoint`` of a dir ({} with a warning if malformed)."""
        return self._read_checkpoint(os.path.abspath(log_dir), REPLICATION_OFFSET_CHECKPOINT, "empty")

    # --- shutdown ------------------------------------------------------------------------------------
    def shutdown(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        """Stop tasks, flush and close every log, write the checkpoints (high watermarks from
        ``high_watermarks``, else from the logs) and the clean shutdown markers."""
        if self._shut_down:
            return
        self._shut_down = True
        if self.cleaner is not None:
            self.cleaner.shutdown()
        for task in self._tasks:
            task.cancel()
        if self._owns_scheduler:
            self.scheduler.shutdown()
        by_dir = self.logs_by_dir()
        for d in self.live_log_dirs:
            # Close every log writing without fsync, make the dir's file system durable with one syncfs, and
            # only then write the checkpoints and, last, the clean shutdown marker (Kafka fsyncs each log on
            # per-dir threads; one syncfs gives the same guarantee without an fsync per file).
            ok = True
            logs = by_dir.get(d, [])
            for lg in logs:
                try:
                    lg.close(sync=False)
                except Exception:
                    ok = False
                    log.exception(kv(event="close_at_shutdown_failed", partition=lg.name))
            try:
                sync_file_system(d)
            except OSError as e:
                ok = False
                log.error(kv(event="sync_at_shutdown_failed", dir=d, error=e))
            else:
                for lg in logs:
                    lg.mark_synced()
            try:
                self.checkpoint_recovery_points(d)
                self.checkpoint_log_start_offsets(d)
            except KafkaStorageError:
                ok = False
            hws = {lg.topic_partition: (high_watermarks.get(lg.topic_partition, lg.high_watermark)
                                        if high_watermarks is not None and not lg.is_future else lg.high_watermark)
                   for lg in by_dir.get(d, [])}
            try:
                self._write_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT, hws)
            except KafkaStorageError:
                ok = False
            if ok:
                self._write_clean_shutdown_marker(d)
        self._release_locks()
        log.info(kv(event="log_manager_shutdown", logs=len(self._logs)))

    def _write_clean_shutdown_marker(self, d: str) -> None:
        # Kafka 3.6+ content (CleanShutdownFileHandler); older brokers wrote an empty file. Both mean "clean".
        path = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        payload = json.dumps({"version": "0", "broker_epoch": str(self.broker_epoch)}, separators=(",", ":"))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, payload.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)


def sync_file_system(path: str) -> None:
    """Make everything written to the file system holding ``path`` durable: Linux ``syncfs(2)``, elsewhere
    ``sync(2)`` (which also waits for the data on other file systems).  Raises OSError."""
    fd = os.open(path, os.O_RDONLY)
    try:
        syncfs = getattr(_libc(), "syncfs", None)
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)


_LIBC: list = []


def _libc():
    if not _LIBC:
        try:
            _LIBC.append(ctypes.CDLL(None, use_errno=True))
        except OSError:
            _LIBC.append(None)
    return _LIBC[0]
