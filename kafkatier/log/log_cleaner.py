"""The log cleaner: Kafka's ``LogCleaner`` and its ``CleanerThread``s (docs/log-compaction.md).

``log.cleaner.threads`` threads each loop: ask the :class:`LogCleanerManager` for the dirtiest compacted log,
clean it with their :class:`Cleaner`, record the new first dirty offset in ``cleaner-offset-checkpoint``, log
Kafka's summary (logger ``log.cleaner``, as ``log-cleaner.log``), and back off ``log.cleaner.backoff.ms`` when
there is nothing to clean.  :meth:`LogCleaner.describe` is what ``cluster describe`` shows per cleaner thread.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

import attrs

from kafkatier.log.cleaner import BYTES_PER_ENTRY, Cleaner, CleanerAbortedError, CleanerStats
from kafkatier.log.cleaner_throttle import DutyCycle, Throttler
from kafkatier.log.log import Log
from kafkatier.log.log_cleaner_manager import LogCleanerManager, PreCleanStats
from kafkatier.logsetup import get_logger, kv

log = get_logger("log.cleaner")

_MB = 1024.0 * 1024.0
#: Project addition: the share of time each cleaner thread may work (cleaner.DutyCycle); 1.0 = as Kafka.
DUTY_CYCLE_CONFIG = "kafkatier.log.cleaner.duty.cycle"


@attrs.frozen
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (Kafka's ``CleanerConfig``), with Kafka's defaults; the broker
    reads them through their definitions (``server/kafka_server.cleaner_config``)."""
    num_threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    max_io_bytes_per_second: float = float("inf")
    backoff_ms: int = 15000
    enable_cleaner: bool = True
    duty_cycle: float = 0.2  # project addition: see cleaner.DutyCycle

    @property
    def map_slots_per_thread(self) -> int:
        return int(self.dedupe_buffer_size / max(1, self.num_threads) / BYTES_PER_ENTRY
                   * self.dedupe_buffer_load_factor)


def _mb(n: float) -> str:
    """Java's ``%,.1f``: one decimal, thousands grouped."""
    return f"{n:,.1f}"


def format_cleaning(thread_id: int, name: str, first_dirty: int, end: int, s: CleanerStats) -> str:
    """The summary Kafka's ``CleanerThread.recordStats`` writes to ``log-cleaner.log`` after each cleaning, line
    for line (a leading line break, ``%,.1f`` numbers, Kafka's own ``MB/sec`` / ``Mb/sec`` spellings)."""
    elapsed = max(1e-6, s.end_ms - s.start_ms)
    index_s = max(1e-6, s.map_complete_ms - s.start_ms)
    clean_s = max(1e-6, elapsed - index_s)
    read, written, mapped = s.bytes_read / _MB, s.bytes_written / _MB, s.map_bytes_read / _MB
    red = 100.0 * (1 - s.bytes_written / s.bytes_read) if s.bytes_read else 0.0
    fewer = 100.0 * (1 - s.messages_written / s.messages_read) if s.messages_read else 0.0
    return (f"\n\tLog cleaner thread {thread_id} cleaned log {name} (dirty section = [{first_dirty}, {end}])\n"
            f"\t{_mb(read)} MB of log processed in {_mb(elapsed)} seconds ({_mb(read / elapsed)} MB/sec).\n"
            f"\tIndexed {_mb(mapped)} MB in {index_s:.1f} seconds ({_mb(mapped / index_s)} Mb/sec, "
            f"{100 * index_s / elapsed:.1f}% of total time)\n"
            f"\tBuffer utilization: {100 * s.buffer_utilization:.1f}%\n"
            f"\tCleaned {_mb(read)} MB in {clean_s:.1f} seconds ({_mb(read / clean_s)} Mb/sec, "
            f"{100 * clean_s / elapsed:.1f}% of total time)\n"
            f"\tStart size: {_mb(read)} MB ({s.messages_read:,d} messages)\n"
            f"\tEnd size: {_mb(written)} MB ({s.messages_written:,d} messages)\n"
            f"\t{red:.1f}% size reduction ({fewer:.1f}% fewer messages)\n")


class CleanerThread(threading.Thread):
    def __init__(self, owner: "LogCleaner", thread_id: int):
        super().__init__(name=f"kafka-log-cleaner-thread-{thread_id}", daemon=True)
        self.owner = owner
        self.id = thread_id
        self.cleaner = Cleaner(thread_id, owner.config.map_slots_per_thread, owner.throttler, owner.clock,
                               check_done=owner.check_done, duty=DutyCycle(owner.config.duty_cycle, owner.stop_event))
        self.logs_cleaned = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.time_spent_s = 0.0
        self.last_stats: CleanerStats | None = None
        self.pre_clean_stats = PreCleanStats()
        self.last_log: str | None = None
        self.errors = 0

    def run(self) -> None:
        stop = self.owner.stop_event
        while not stop.is_set():
            try:
                cleaned = self.try_clean_filthiest_log()
            except Exception:  # noqa: BLE001 - Kafka's thread logs and carries on
                self.errors += 1
                log.exception(kv(event="cleaner_thread_error", thread=self.id))
                cleaned = False
            if not cleaned:
                stop.wait(self.owner.config.backoff_ms / 1000.0)

    def try_clean_filthiest_log(self) -> bool:
        self.pre_clean_stats = PreCleanStats()
        todo = self.owner.manager.grab_filthiest_compacted_log(self.pre_clean_stats)
        if todo is None:
            return False
        lg = todo.log
        end: int | None = None
        horizon: int | None = None
        try:
            end, stats = self.cleaner.clean(todo)
            horizon = stats.next_delete_horizon
            self._record(lg, todo, end, stats)
        except CleanerAbortedError as e:
            log.info(kv(event="cleaning_aborted", partition=lg.name, reason=str(e)))
        except Exception as e:  # noqa: BLE001 - a corrupt segment: this log is skipped, the log stays readable
            if lg.closed or not self.owner.manager.is_current(lg):
                # replaced by a KIP-113 swap (its files renamed away) or deleted meanwhile: given up, not failed
                log.info(kv(event="cleaning_aborted", partition=lg.name, reason=f"the log was replaced: {e!r}"))
            else:
                self.errors += 1
                log.exception(kv(event="cleaning_failed", partition=lg.name))
                self.owner.manager.mark_failed(lg)
        finally:
            self.owner.manager.done_cleaning(lg, end, horizon)
        return end is not None

    def _record(self, lg: Log, todo, end: int, s: CleanerStats) -> None:
        self.logs_cleaned += 1
        self.bytes_read += s.bytes_read
        self.bytes_written += s.bytes_written
        self.time_spent_s += max(1e-6, s.end_ms - s.start_ms)
        self.last_stats = s
        self.last_log = lg.name
        log.info(format_cleaning(self.id, lg.name, todo.first_dirty_offset, end, s))
        pre = self.pre_clean_stats
        if pre.delayed_partitions > 0:
            log.info(f"\tCleanable partitions: {pre.cleanable_partitions}, Delayed partitions: "
                     f"{pre.delayed_partitions}, max delay: {pre.max_compaction_delay_ms}")

    def describe(self) -> dict:
        return {"thread": self.id, "logs_cleaned": self.logs_cleaned, "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written, "time_spent_s": round(self.time_spent_s, 3),
                "last_log": self.last_log, "errors": self.errors,
                "last_buffer_utilization": round(self.last_stats.buffer_utilization, 4) if self.last_stats else None}


class LogCleaner:
    """Owns the cleaner threads, their shared throttler and the :class:`LogCleanerManager`."""

    def __init__(self, config: CleanerConfig, log_dirs: Iterable[str], logs: Callable[[], list[Log]],
                 clock: Callable[[], int]):
        self.config = config
        self.clock = clock
        self.stop_event = threading.Event()
        self.throttler = Throttler(config.max_io_bytes_per_second, self.stop_event)
        self.manager = LogCleanerManager(log_dirs, logs, clock)
        self.threads: list[CleanerThread] = []

    def startup(self) -> None:
        if not self.config.enable_cleaner:
            return
        log.info(kv(event="log_cleaner_starting", threads=self.config.num_threads,
                    map_slots_per_thread=self.config.map_slots_per_thread))
        self.threads = [CleanerThread(self, i) for i in range(self.config.num_threads)]
        for t in self.threads:
            t.start()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def check_done(self, lg: Log) -> None:
        """Raised into a cleaning when the broker stops or the log closes (Kafka's ``checkDone``)."""
        if self.stop_event.is_set():
            raise CleanerAbortedError("the log cleaner is shutting down")
        if lg.closed:
            raise CleanerAbortedError(f"log {lg.name} was closed")

    def pause_cleaning(self, tp: tuple[str, int]) -> None:
        self.manager.pause_cleaning(tp)

    def alter_checkpoint_dir(self, tp: tuple[str, int], source_dir: str, dest_dir: str) -> None:
        self.manager.alter_checkpoint_dir(tp, source_dir, dest_dir)

    def resume_cleaning(self, tp: tuple[str, int]) -> None:
        self.manager.resume_cleaning(tp)

    def describe(self) -> dict:
        return {"enabled": self.config.enable_cleaner,
                "max_dirty_percent": round(100 * self.manager.max_dirty_ratio, 1),
                "throttled_s": round(self.throttler.throttled_s, 3),
                "threads": [t.describe() for t in self.threads]}
