"""One log segment: ``<base offset, 20 digits>.log`` with its ``.index`` and ``.timeindex``.

The ``.log`` file holds v2 record batches back to back, exactly as they are served to consumers. Appends
and reads move whole byte ranges; batch headers are read only to find batch boundaries.

File descriptors: a broker may hold 20,000 replicas, more than a usual ``ulimit -n``.  The ``.log`` file is
opened on first use (any access to ``_fd``) and closed again by :meth:`LogSegment.release_files`, which the
log manager calls for every log once it is loaded and then every ``file_release_interval_ms`` (so descriptors
stay open only for segments used since the last sweep); the indexes hold no descriptor and load lazily
(:mod:`kafkatier.log.abstract_index`).  Difference from Kafka: Kafka keeps every
segment's ``FileChannel`` open and asks for a large ``ulimit -n`` instead.
"""
from __future__ import annotations

import errno
import os
import random
import struct
import time
from typing import Callable, Iterator

import attrs

from kafkatier.common.file_records import FileRecords
from kafkatier.log.errors import LogSegmentOffsetOverflowError, MissingIndexFileError
from kafkatier.log.offset_index import OffsetIndex
from kafkatier.log.record_batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    whole_batches_size,
)
from kafkatier.log.time_index import TimeIndex
from kafkatier.log.transaction_index import TransactionIndex
from kafkatier.logsetup import get_logger, kv

log = get_logger("log")

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"

_INT32 = struct.Struct(">i")
_SCAN_CHUNK = 64 * 1024
#: A read of at least this many bytes for a fetch is answered as a range of the segment file (``sendfile``); below
#: it the copy costs less than the descriptor and the extra system call.
FILE_RECORDS_MIN_BYTES = 64 * 1024
#: At most this many batch headers are read to find where the whole batches of such a read end.
_MAX_HEADER_READS = 128
_RECOVER_CHUNK = 1024 * 1024


class SourceReadError(OSError):
    """Reading the source of a copy failed (the error is the source's dir's, not the destination's)."""


_NO_COPY_FILE_RANGE = {errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF, errno.ETXTBSY}


def copy_file_range(src_fd: int, src_pos: int, dst_fd: int, dst_pos: int, n: int) -> None:
    """Copy ``n`` bytes between files in the kernel; falls back to ``pread``/``pwrite`` (1 MiB at a time)
    when ``copy_file_range`` cannot do it.  Any other error is retried once that way, so a failure comes out
    as :class:`SourceReadError` (reading) or a plain ``OSError`` (writing)."""
    done = 0
    use_kernel = hasattr(os, "copy_file_range")
    while done < n:
        if use_kernel:
            try:
                k = os.copy_file_range(src_fd, dst_fd, n - done, src_pos + done, dst_pos + done)
            except OSError as e:
                if e.errno not in _NO_COPY_FILE_RANGE:
                    log.warning(kv(event="copy_file_range_failed", error=e, fallback="pread/pwrite"))
                use_kernel = False
                continue
            if k <= 0:
                use_kernel = False
                continue
            done += k
            continue
        want = min(n - done, _RECOVER_CHUNK)
        try:
            data = os.pread(src_fd, want, src_pos + done)
        except OSError as e:
            raise SourceReadError(e.errno, f"reading the source of a copy: {e.strerror}") from e
        if not data:
            raise SourceReadError(errno.EIO, f"the source of a copy ended at {src_pos + done}, {n - done} bytes short")
        written = 0
        while written < len(data):
            written += os.pwrite(dst_fd, memoryview(data)[written:], dst_pos + done + written)
        done += len(data)


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's ``sync_file_range`` (not in ``os``), or None where libc has none."""
    try:
        import ctypes
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, position: int, n: int) -> None:
    """Ask the kernel to start writing ``n`` bytes at ``position`` of ``fd`` to disk, without waiting
    (``sync_file_range(SYNC_FILE_RANGE_WRITE)``): a copy that is fsynced at its end (a KIP-113 move) then finds
    most of its data already written, the disk working while the copy goes on.  Durability still comes from the
    fsync; where the call is missing or fails nothing happens."""
    fn = _SYNC_FILE_RANGE
    if fn is not None and n > 0:
        fn(fd, position, n, _SYNC_FILE_RANGE_WRITE)


def filename_prefix(offset: int) -> str:
    """Kafka's 20-digit zero-padded file name for a base offset."""
    return f"{offset:020d}"


def log_file_path(dir_path: str, offset: int, suffix: str = "") -> str:
    return os.path.join(dir_path, filename_prefix(offset) + LOG_FILE_SUFFIX + suffix)


def index_file_path(dir_path: str, offset: int, suffix: str = "") -> str:
    return os.path.join(dir_path, filename_prefix(offset) + INDEX_FILE_SUFFIX + suffix)


def time_index_file_path(dir_path: str, offset: int, suffix: str = "") -> str:
    return os.path.join(dir_path, filename_prefix(offset) + TIME_INDEX_FILE_SUFFIX + suffix)


def txn_index_file_path(dir_path: str, offset: int, suffix: str = "") -> str:
    return os.path.join(dir_path, filename_prefix(offset) + TXN_INDEX_FILE_SUFFIX + suffix)


def _now_ms() -> int:
    return int(time.time() * 1000)


@attrs.frozen
class LogOffsetMetadata:
    """An offset and where it sits on disk (segment base offset, byte position), -1 when unknown."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1


@attrs.frozen
class FetchDataInfo:
    """Result of a read: whole batches starting with the one that contains the fetch offset."""

    fetch_offset_metadata: LogOffsetMetadata
    records: bytes | FileRecords   # a FileRecords range only when the reader asked for one
    first_entry_incomplete: bool = False
    #: the last offset of the last batch of a ``FileRecords`` read (-1 otherwise: walk ``records`` for it)
    last_offset: int = -1

    @property
    def size(self) -> int:
        return len(self.records)


@attrs.frozen
class TimestampAndOffset:
    """A ListOffsets answer: ``timestamp`` (-1 for earliest/latest), ``offset`` and the epoch if known."""

    timestamp: int
    offset: int
    leader_epoch: int | None = None


@attrs.frozen
class _Hdr:
    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    partition_leader_epoch: int


class LogSegment:
    """A segment of a partition log. Not thread-safe: the owning log serialises access."""

    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10 * 1024 * 1024, roll_jitter_ms: int = 0,
                 clock: Callable[[], int] = _now_ms, file_suffix: str = ""):
        self.dir = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self._clock = clock
        self._suffix = file_suffix
        self.log_path = log_file_path(dir_path, base_offset, file_suffix)
        self._closed = False
        try:
            self._size = os.stat(self.log_path).st_size
        except FileNotFoundError:
            os.close(os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644))
            self._size = 0
        self.offset_index = OffsetIndex(index_file_path(dir_path, base_offset, file_suffix), base_offset,
                                        max_index_size)
        self.time_index = TimeIndex(time_index_file_path(dir_path, base_offset, file_suffix), base_offset,
                                    max_index_size)
        self.txn_index = TransactionIndex(txn_index_file_path(dir_path, base_offset, file_suffix), base_offset)
        self.created_ms = clock()
        self._bytes_since_last_index_entry = 0
        last = self.time_index.last_entry
        self._max_timestamp = last.timestamp
        self._offset_of_max_timestamp = last.offset if last.timestamp != NO_TIMESTAMP else -1
        self._rolling_based_timestamp: int | None = None
        self._next_offset: int | None = None

    def __getattr__(self, name: str):
        # Only called while ``_fd`` is not set: open the .log file on first use after creation or a release.
        if name == "_fd":
            if self.__dict__.get("_closed", True):
                raise OSError(errno.EBADF, f"segment {self.log_path} is closed")
            fd = os.open(self.log_path, os.O_RDWR)
            self.__dict__["_fd"] = fd
            return fd
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def has_open_file(self) -> bool:
        return "_fd" in self.__dict__

    def release_files(self, unload_indexes: bool = True) -> None:
        """Close the .log descriptor (reopened on next use) and, with ``unload_indexes``, drop the in-memory
        index entries (re-read on next use).  The owning log's lock must be held."""
        self._close_fd()
        if unload_indexes:
            self.offset_index.unload()
            self.time_index.unload()

    def _close_fd(self) -> None:
        fd = self.__dict__.pop("_fd", None)
        if fd is not None:
            os.close(fd)

    @classmethod
    def open(cls, dir_path: str, base_offset: int, **kwargs) -> LogSegment:
        return cls(dir_path, base_offset, **kwargs)

    # --- state ----------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._size

    @property
    def index_path(self) -> str:
        return self.offset_index.path

    @property
    def time_index_path(self) -> str:
        return self.time_index.path

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._offset_of_max_timestamp

    @property
    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when no batch carries one (retention.ms uses it)."""
        return self._max_timestamp if self._max_timestamp >= 0 else self.last_modified_ms

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"LogSegment(baseOffset={self.base_offset}, size={self._size}, path={self.log_path})"

    # --- batch scanning -------------------------------------------------------------------------------
    def batch_headers(self) -> Iterator[_Hdr]:
        """Every complete batch header of the segment, first to last (the log rebuilds its epoch cache so)."""
        return self._headers(0)

    def _headers(self, start: int, end: int | None = None) -> Iterator[_Hdr]:
        """Batch headers from ``start`` up to ``end`` (default: file end); stops at a partial or bad batch."""
        end = self._size if end is None else end
        buf = b""
        buf_start = start
        pos = start
        chunk = _SCAN_CHUNK
        while pos + LOG_OVERHEAD <= end:
            rel = pos - buf_start
            if rel < 0 or rel + HEADER_SIZE > len(buf):
                buf = os.pread(self._fd, min(chunk, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            h = HEADER.unpack_from(buf, rel)
            size = h[1] + LOG_OVERHEAD
            if size < HEADER_SIZE or pos + size > end or h[3] != MAGIC_V2:
                return
            yield _Hdr(pos, size, h[0], h[0] + h[6], h[8], h[2])
            pos += size
            # After a batch larger than the scan chunk the next header is past the buffer: read just a header
            # (1 MiB batches: 61 bytes per batch instead of 64 KiB; moves read every header this way).
            chunk = HEADER_SIZE if size >= _SCAN_CHUNK else _SCAN_CHUNK

    def translate_offset(self, offset: int, starting_position: int = 0) -> tuple[int, int] | None:
        """(position, size) of the first batch whose last offset >= ``offset``, or None past the end."""
        start = max(starting_position, self.offset_index.lookup(offset).position)
        for h in self._headers(start):
            if h.last_offset >= offset:
                return h.position, h.size
        return None

    def next_offset(self) -> int:
        """Offset after the last batch in this segment (the base offset when empty)."""
        if self._next_offset is None:
            nxt = self.base_offset
            for h in self._headers(self.offset_index.lookup(2**62).position):
                nxt = h.last_offset + 1
            self._next_offset = nxt
        return self._next_offset

    # --- append / read --------------------------------------------------------------------------------
    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= 2**31 - 1

    def append(self, largest_offset: int, largest_timestamp: int, offset_of_max_timestamp: int,
               records: bytes) -> None:
        """Append whole batches; add index entries every ``index.interval.bytes``."""
        n = len(records)
        if n == 0:
            return
        if not 0 <= largest_offset - self.base_offset <= 2**31 - 1:   # can_convert_to_relative_offset
            raise LogSegmentOffsetOverflowError(
                f"largest offset {largest_offset} cannot be safely converted to relative offset for segment "
                f"with baseOffset {self.base_offset}")
        position = self._size
        if position == 0:
            self._rolling_based_timestamp = largest_timestamp
        written = os.pwrite(self._fd, records, position)
        while written < n:  # regular files rarely short-write; finish the job if they do
            written += os.pwrite(self._fd, memoryview(records)[written:], position + written)
        self._size = position + n
        if largest_timestamp > self._max_timestamp:
            self._max_timestamp = largest_timestamp
            self._offset_of_max_timestamp = offset_of_max_timestamp
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += n
        self._next_offset = largest_offset + 1

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False, *, file_records: bool = False) -> FetchDataInfo | None:
        """Whole batches from the one containing ``start_offset``, at most ``max_size`` bytes
        (or the first batch whole if ``min_one_message``) and not past ``max_position``.
        Returns None when no batch here contains an offset >= ``start_offset``.  With ``file_records`` a read of
        at least :data:`FILE_RECORDS_MIN_BYTES` comes back as a :class:`FileRecords` range of this file (sent
        with ``sendfile``, not read into memory), when its end takes at most a few batch headers to find."""
        if max_size < 0:
            raise ValueError(f"Invalid max size {max_size} for log read from segment {self.log_path}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start_pos, first_size = found
        meta = LogOffsetMetadata(start_offset, self.base_offset, start_pos)
        limit = self._size if max_position is None else min(max_position, self._size)
        available = limit - start_pos
        if available <= 0 or (max_size == 0 and not min_one_message):
            return FetchDataInfo(meta, b"")
        fetch = min(available, max_size)
        if fetch < first_size:
            if not min_one_message or first_size > available:
                return FetchDataInfo(meta, b"")
            fetch = first_size
        if file_records and fetch >= FILE_RECORDS_MIN_BYTES:
            found = self._whole_batches_within(start_pos, fetch)
            if found is not None:
                try:
                    ranged = FileRecords(self._fd, start_pos, found[0])
                except OSError as e:
                    if e.errno not in (errno.EMFILE, errno.ENFILE):
                        raise
                    ranged = None   # no descriptor to spare: the copying read below
                if ranged is not None:
                    return FetchDataInfo(meta, ranged, last_offset=found[1])
        data = os.pread(self._fd, fetch, start_pos)
        cut = whole_batches_size(data)
        return FetchDataInfo(meta, data if cut == len(data) else data[:cut])

    def _whole_batches_within(self, start: int, n: int) -> tuple[int, int] | None:
        """(bytes, last offset) of the whole batches in ``n`` bytes from ``start``, read a batch header at a time;
        None after :data:`_MAX_HEADER_READS` headers (small batches: one read of the data costs less), at a batch
        that is not format v2 or when not even one batch is whole (the copying read answers those as before)."""
        pos, end, last = start, start + n, -1
        for _ in range(_MAX_HEADER_READS):
            if end - pos < HEADER_SIZE:
                break
            head = os.pread(self._fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                break
            h = HEADER.unpack_from(head)
            size = h[1] + LOG_OVERHEAD
            if h[3] != MAGIC_V2 or size < HEADER_SIZE:
                return None
            if pos + size > end:
                break
            pos += size
            last = h[0] + h[6]
        else:
            if end - pos >= HEADER_SIZE:
                return None
        return (pos - start, last) if pos > start else None

    # --- copying batches between segments (JBOD moves) -----------------------------------------------
    def batches_from(self, start_offset: int, max_bytes: int) -> list[_Hdr]:
        """Headers of the whole batches from the one containing ``start_offset``: at most ``max_bytes`` in
        all, and at least one batch; [] when no batch here has an offset >= ``start_offset``."""
        found = self.translate_offset(start_offset)
        if found is None:
            return []
        out: list[_Hdr] = []
        total = 0
        for h in self._headers(found[0]):
            if out and total + h.size > max_bytes:
                break
            out.append(h)
            total += h.size
        return out

    def append_copy(self, src: "LogSegment", headers: list[_Hdr]) -> None:
        """Append ``src``'s contiguous batches ``headers`` with the data copied by the kernel
        (``copy_file_range``; ``pread``/``pwrite`` where that is not possible, e.g. across file systems), and
        the index entries :meth:`append` would make, batch by batch.  Raises :class:`SourceReadError` for a
        failed read of ``src`` and ``OSError`` for a failed write here."""
        if not headers:
            return
        start = headers[0].position
        n = headers[-1].position + headers[-1].size - start
        last = headers[-1].last_offset
        if not self.can_convert_to_relative_offset(last):
            raise LogSegmentOffsetOverflowError(
                f"largest offset {last} cannot be safely converted to relative offset for segment "
                f"with baseOffset {self.base_offset}")
        position = self._size
        copy_file_range(src._fd, start, self._fd, position, n)
        start_writeback(self._fd, position, n)
        if position == 0:
            self._rolling_based_timestamp = headers[0].max_timestamp
        self._size = position + n
        for h in headers:
            if h.max_timestamp > self._max_timestamp:
                self._max_timestamp = h.max_timestamp
                self._offset_of_max_timestamp = h.last_offset
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(h.last_offset, position + h.position - start)
                self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += h.size
        self._next_offset = last + 1

    # --- timestamps -----------------------------------------------------------------------------------
    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None and self._size > 0:
            for h in self._headers(0):
                self._rolling_based_timestamp = h.max_timestamp
                break

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """How long this segment has been open, by record time when the first batch has a timestamp."""
        self._load_first_batch_timestamp()
        t = self._rolling_based_timestamp
        if t is not None and t >= 0:
            return message_timestamp - t
        return now_ms - self.created_ms

    def should_roll(self, segment_bytes: int, max_segment_ms: int, messages_size: int,
                    max_timestamp_in_messages: int, max_offset_in_messages: int, now_ms: int) -> bool:
        """Kafka's roll conditions: size, age, a full index, or an offset too far from the base."""
        size = self._size
        if size > segment_bytes - messages_size:
            return True
        if size > 0:   # time_waited_for_roll, inlined (checked on every append)
            t = self._rolling_based_timestamp
            if t is None:
                self._load_first_batch_timestamp()
                t = self._rolling_based_timestamp
            waited = max_timestamp_in_messages - t if t is not None and t >= 0 else now_ms - self.created_ms
            if waited > max_segment_ms - self.roll_jitter_ms:
                return True
        return (self.offset_index.is_full or self.time_index.is_full
                or not 0 <= max_offset_in_messages - self.base_offset <= 2**31 - 1)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampAndOffset | None:
        """First record with timestamp >= ``timestamp`` and offset >= ``starting_offset`` in this segment.

        Uses the indexes to find the batch, then reads that batch's records (ListOffsets path only)."""
        ts_entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_entry.offset, starting_offset)).position
        for h in self._headers(position):
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                found = self._search_batch(h, timestamp, starting_offset)
                if found is not None:
                    return found
        return None

    def _search_batch(self, h: _Hdr, timestamp: int, starting_offset: int) -> TimestampAndOffset | None:
        epoch = h.partition_leader_epoch if h.partition_leader_epoch >= 0 else None
        data = os.pread(self._fd, h.size, h.position)
        try:
            from kafka.record.default_records import DefaultRecordBatch
            for record in DefaultRecordBatch(data):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return TimestampAndOffset(record.timestamp, record.offset, epoch)
            return None
        except Exception as e:  # e.g. a codec library that is not installed
            log.warning(kv(event="timestamp_search_fallback", segment=self.log_path, position=h.position,
                           error=repr(e)))
            return TimestampAndOffset(h.max_timestamp, max(h.base_offset, starting_offset), epoch)

    # --- maintenance ----------------------------------------------------------------------------------
    def sanity_check(self) -> None:
        """Raise CorruptIndexError if an index cannot be trusted; MissingIndexFileError if the segment holds data
        but an index file does not exist (Kafka's loader rebuilds the indexes then: index files are created
        lazily, so a crash, or a clean stop of a small active segment, can leave none)."""
        if self._size > 0:
            for index in (self.offset_index, self.time_index):
                if not index.file_exists:
                    raise MissingIndexFileError(f"Index file {index.path} does not exist")
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check()

    def recover(self, leader_epoch_cache=None) -> int:
        """Re-scan the log, rebuild both indexes, cut the file at the first torn or invalid batch.

        Returns the number of bytes truncated. Batches that pass are fed to ``leader_epoch_cache``."""
        from crc32c import crc32c

        self.offset_index.reset()
        self.time_index.reset()
        # An empty segment (most of 20,000 replicas after a kill -9) is recovered without opening its file.
        file_size = os.fstat(self._fd).st_size if self.has_open_file else os.stat(self.log_path).st_size
        valid = 0
        last_index_entry = 0
        max_ts, offset_of_max_ts = NO_TIMESTAMP, -1
        next_offset = self.base_offset
        first_ts = None
        problem = None
        buf = b""
        buf_start = 0
        pos = 0
        while pos + LOG_OVERHEAD <= file_size:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(self._fd, min(_RECOVER_CHUNK, file_size - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    problem = "torn batch header at the end of the segment"
                    break
            h = HEADER.unpack_from(buf, rel)
            size = h[1] + LOG_OVERHEAD
            if size < HEADER_SIZE:
                problem = f"Record size {size} is less than the minimum record batch overhead ({HEADER_SIZE})"
                break
            if pos + size > file_size:
                problem = f"torn batch: {size} bytes declared, {file_size - pos} on disk"
                break
            if rel + size > len(buf):
                buf = os.pread(self._fd, max(size, min(_RECOVER_CHUNK, file_size - pos)), pos)
                buf_start, rel = pos, 0
            if h[3] != MAGIC_V2:
                problem = f"unsupported magic {h[3]}"
                break
            computed = crc32c(memoryview(buf)[rel + ATTRIBUTES_OFFSET: rel + size])
            if computed != h[4]:
                problem = f"Record is corrupt (stored crc = {h[4]}, computed crc = {computed})"
                break
            base, last = h[0], h[0] + h[6]
            if h[6] < 0 or base < next_offset or not self.can_convert_to_relative_offset(last):
                problem = f"batch offsets [{base}, {last}] out of order or out of range"
                break
            if first_ts is None:
                first_ts = h[8]
            if h[8] > max_ts:
                max_ts, offset_of_max_ts = h[8], last
            if valid - last_index_entry > self.index_interval_bytes:
                self.offset_index.append(last, valid)
                self.time_index.maybe_append(max_ts, offset_of_max_ts)
                last_index_entry = valid
            valid += size
            next_offset = last + 1
            if leader_epoch_cache is not None and h[2] >= 0:
                latest = leader_epoch_cache.latest_epoch
                if latest is None or h[2] > latest:
                    leader_epoch_cache.assign(h[2], base)
            pos += size
        truncated = file_size - valid
        if truncated > 0:
            log.warning(kv(event="segment_recovered_with_truncation", segment=self.log_path, position=valid,
                           truncated_bytes=truncated, reason=problem or "trailing bytes"))
            os.ftruncate(self._fd, valid)
        self._size = valid
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, offset_of_max_ts
        self.time_index.maybe_append(max_ts, offset_of_max_ts, skip_full_check=True)
        self._bytes_since_last_index_entry = valid - last_index_entry
        self._next_offset = next_offset
        self._rolling_based_timestamp = first_ts
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove the batch containing ``offset`` and everything after it; return bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = 0
        if found is not None:
            removed = self._size - found[0]
            os.ftruncate(self._fd, found[0])
            self._size = found[0]
        if self._size == 0:
            self.created_ms = self._clock()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        last = self.time_index.last_entry
        self._max_timestamp = last.timestamp
        self._offset_of_max_timestamp = last.offset if last.timestamp != NO_TIMESTAMP else -1
        self._next_offset = None
        return removed

    def on_become_inactive(self) -> None:
        """Called on roll: record the final max timestamp in the time index and write buffered entries.  An
        inactive segment always has both index files (Kafka trims them then, which creates them), even empty:
        tiered storage copies them, tools read them; only the active segment's come into being lazily."""
        self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.ensure_file()
        self.time_index.ensure_file()

    def flush(self) -> None:
        if self._closed:
            return
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Close files, leaving the final time index entry behind (as Kafka does)."""
        if self._closed:
            return
        try:
            if self._max_timestamp != NO_TIMESTAMP:
                self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp,
                                             skip_full_check=True)
        except Exception as e:  # closing must not fail on a bad index entry
            log.warning(kv(event="time_index_final_entry_failed", segment=self.log_path, error=repr(e)))
        self._closed = True
        self._close_fd()
        self.offset_index.close()
        self.time_index.close()

    def close_without_index_update(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_fd()
        self.offset_index.close()
        self.time_index.close()

    def _paths(self) -> list[str]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def change_dir(self, new_dir: str) -> None:
        """Follow a rename of the partition directory (open files stay valid)."""
        self.dir = new_dir
        self.log_path = os.path.join(new_dir, os.path.basename(self.log_path))
        self.offset_index.path = os.path.join(new_dir, os.path.basename(self.offset_index.path))
        self.time_index.path = os.path.join(new_dir, os.path.basename(self.time_index.path))
        self.txn_index.path = os.path.join(new_dir, os.path.basename(self.txn_index.path))

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the segment's files from ``old_suffix`` to ``new_suffix`` (Kafka's ``changeFileSuffixes``:
        ``.cleaned`` -> ``.swap`` -> none while the log cleaner swaps a cleaned segment in)."""
        for attr_owner, attr in ((self, "log_path"), (self.offset_index, "path"), (self.time_index, "path"),
                                  (self.txn_index, "path")):
            old = getattr(attr_owner, attr)
            if not old.endswith(old_suffix):
                raise ValueError(f"{old} does not end with {old_suffix!r}")
            new = old[: len(old) - len(old_suffix)] + new_suffix
            try:
                os.replace(old, new)
            except FileNotFoundError:
                pass
            setattr(attr_owner, attr, new)
        self._suffix = new_suffix

    def first_batch_timestamp(self) -> int:
        """The max timestamp of the first batch (-1 when empty): the age the cleaner's max.compaction.lag.ms
        is measured from."""
        self._load_first_batch_timestamp()
        t = self._rolling_based_timestamp
        return -1 if t is None else t

    def set_last_modified_ms(self, ms: int) -> None:
        """Set the .log file's modification time (the cleaner keeps the sources' time on a cleaned segment)."""
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    def rename_to_deleted(self) -> None:
        """Add ``.deleted`` to the file names: the segment is gone for the log, its files go later."""
        for attr_owner, attr in ((self, "log_path"), (self.offset_index, "path"), (self.time_index, "path"),
                                  (self.txn_index, "path")):
            old = getattr(attr_owner, attr)
            new = old + DELETED_FILE_SUFFIX
            try:
                os.replace(old, new)
            except FileNotFoundError:
                pass
            setattr(attr_owner, attr, new)

    def delete(self) -> None:
        """Close and remove the segment's files."""
        self.close_without_index_update()
        for path in self._paths():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def random_roll_jitter(segment_jitter_ms: int, segment_ms: int) -> int:
    """Kafka's per-segment roll jitter in [0, min(jitter, segment.ms))."""
    if segment_jitter_ms <= 0:
        return 0
    return random.randrange(min(segment_jitter_ms, segment_ms))
