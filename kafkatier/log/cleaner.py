"""One cleaning of one compacted log: Kafka's ``Cleaner`` (docs/log-compaction.md).

1. **Offset map.** The dirty segments ``[first dirty, first uncleanable)`` are read batch by batch and every
   keyed record of a batch that is neither a control batch nor part of an aborted transaction puts
   ``hash(key) -> offset`` in a map bounded by ``log.cleaner.dedupe.buffer.size`` (24 bytes an entry, as Kafka's
   ``SkimpyOffsetMap`` with MD5, times ``log.cleaner.io.buffer.load.factor``); when it is full the dirty range
   ends at the last whole segment mapped.
2. **Cleaning.** Every segment from the first up to the end of the mapped range is rewritten, in groups whose
   total size fits ``segment.bytes`` (and whose offsets fit a segment), into one ``<base>.log.cleaned``: a record
   survives when no later offset of its key is in the map; records of aborted transactions go; a tombstone
   (null value) and a transaction marker whose transaction kept no data get a delete horizon (KIP-534: the
   batch's delete-horizon attribute bit, its base timestamp = cleaning time + ``delete.retention.ms``, record
   timestamp deltas rebased) the first time they are cleaned, and go at the first cleaning after that horizon
   (the manager cleans a log whose horizon passed even when it has no new dirty data); a batch left empty is
   kept (header only) when it is its producer's last batch, so that the idempotent producer state survives a
   reload.  Batches keep their base offset, last offset delta and producer fields; untouched batches are copied
   as they are, filtered ones re-framed (records copied byte for byte unless rebased) and recompressed with their
   codec.
3. **Swap.** The cleaned segment is synced and swapped in by :meth:`Log.replace_segments` (``.cleaned`` ->
   ``.swap`` -> final name; a crash is completed at the next load), its indexes built while writing.

Every batch read is checked (size, magic, CRC): a corrupt segment fails the cleaning with
:class:`CorruptRecordError` before anything is swapped, the log stays as it was and the manager leaves it alone.
Reading and writing go through a :class:`Throttler` (``log.cleaner.io.max.bytes.per.second``).
"""
from __future__ import annotations

import os
import struct
import time
import zlib
from typing import Callable

import attrs
from crc32c import crc32c

from kafkatier.common.byte_utils import write_varint
from kafkatier.log import record_batch as rb
from kafkatier.log.cleaner_throttle import DutyCycle, Throttler
from kafkatier.log.errors import CorruptRecordError
from kafkatier.log.log import Log
from kafkatier.log.log_cleaner_manager import LogToClean
from kafkatier.log.log_validator import decompress
from kafkatier.log.producer_state import ABORT, COMMIT, control_record_type
from kafkatier.log.segment import CLEANED_FILE_SUFFIX, LogSegment, filename_prefix
from kafkatier.log.transaction_index import AbortedTxn
from kafkatier.logsetup import get_logger

log = get_logger("log.cleaner")

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
#: Kafka's SkimpyOffsetMap entry: a 16-byte MD5 and an 8-byte offset.
BYTES_PER_ENTRY = 24
_READ_CHUNK = 256 * 1024
_RECORDS_COUNT_OFFSET = 57
#: KIP-534: the batch's base timestamp is the time after which its tombstones and markers may go.
DELETE_HORIZON_FLAG = 0x40


class CleanerAbortedError(Exception):
    """The log changed under the cleaner (closed, deleted, truncated): this cleaning is dropped."""


class OffsetMap:
    """Key hash -> last offset, bounded by a number of entries."""

    def __init__(self, slots: int):
        self.slots = max(1, slots)
        self._map: dict[int, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.slots

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots

    def get(self, key: bytes) -> int:
        return self._map.get(hash(key), -1)


@attrs.define
class CleanerStats:
    """What one cleaning did (Kafka's ``CleanerStats``)."""
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    buffer_utilization: float = 0.0
    start_ms: float = attrs.field(factory=time.monotonic)
    map_complete_ms: float = 0.0
    end_ms: float = 0.0
    next_delete_horizon: int = 2**63 - 1  # the earliest delete horizon left in the log


def iter_records(buf, p: int, end: int) -> list[tuple]:
    """(start, stop, offset delta, key or None, value is null, timestamp delta, attributes position, position
    after the timestamp delta) of every record in ``buf[p:end]``.  Varints are decoded inline: this loop is the
    cleaner's hot path (one call per record costs more than the rest of the work)."""
    out = []
    append = out.append
    while p < end:
        b = buf[p]
        q = p + 1
        if b < 0x80:
            length = b >> 1
        else:
            v, sh = b & 0x7F, 7
            while True:
                b = buf[q]
                q += 1
                v |= (b & 0x7F) << sh
                if b < 0x80:
                    break
                sh += 7
            length = v >> 1
        stop = q + length
        attrs_at = q
        q += 1
        b = buf[q]
        q += 1
        if b < 0x80:
            ts = b
        else:
            ts, sh = b & 0x7F, 7
            while True:
                b = buf[q]
                q += 1
                ts |= (b & 0x7F) << sh
                if b < 0x80:
                    break
                sh += 7
        ts_end = q
        b = buf[q]
        q += 1
        if b < 0x80:
            od = b
        else:
            od, sh = b & 0x7F, 7
            while True:
                b = buf[q]
                q += 1
                od |= (b & 0x7F) << sh
                if b < 0x80:
                    break
                sh += 7
        b = buf[q]
        q += 1
        if b < 0x80:
            kl = b
        else:
            kl, sh = b & 0x7F, 7
            while True:
                b = buf[q]
                q += 1
                kl |= (b & 0x7F) << sh
                if b < 0x80:
                    break
                sh += 7
        if kl & 1:  # zig-zag negative: -1, a null key
            key = None
        else:
            kl >>= 1
            key = bytes(buf[q:q + kl])
            q += kl
        # the value length's sign (zig-zag: odd = negative = a null value) is in its first byte's low bit
        append((p, stop, od >> 1, key, bool(buf[q] & 1), (ts >> 1) ^ -(ts & 1), attrs_at, ts_end))
        p = stop
    return out


def map_keys(buf, p: int, end: int, base: int, m: dict) -> int:
    """The offset map's pass over one batch's records: ``m[hash(key)] = offset`` for every keyed record of
    ``buf[p:end]``; returns the number of records.  Only the length, offset delta and key are decoded (the
    timestamp varint is skipped), the rest as :func:`iter_records`."""
    n = 0
    while p < end:
        b = buf[p]
        q = p + 1
        if b < 0x80:
            length = b >> 1
        else:
            v, sh = b & 0x7F, 7
            while True:
                b = buf[q]
                q += 1
                v |= (b & 0x7F) << sh
                if b < 0x80:
                    break
                sh += 7
            length = v >> 1
        stop = q + length
        q += 1              # attributes
        while buf[q] >= 0x80:   # timestamp delta: skipped
            q += 1
        q += 1
        b = buf[q]
        q += 1
        if b < 0x80:
            od = b
        else:
            od, sh = b & 0x7F, 7
            while True:
                b = buf[q]
                q += 1
                od |= (b & 0x7F) << sh
                if b < 0x80:
                    break
                sh += 7
        b = buf[q]
        q += 1
        if b < 0x80:
            kl = b
        else:
            kl, sh = b & 0x7F, 7
            while True:
                b = buf[q]
                q += 1
                kl |= (b & 0x7F) << sh
                if b < 0x80:
                    break
                sh += 7
        if not kl & 1:
            kl >>= 1
            m[hash(buf[q:q + kl])] = base + (od >> 1)
        n += 1
        p = stop
    return n


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 1:  # gzip
        c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    from kafka import codec as kc
    if codec == 2:
        return kc.snappy_encode(data, xerial_compatible=True)
    if codec == 3:
        return kc.lz4_encode(data)
    if codec == 4:
        return kc.zstd_encode(data)
    raise ValueError(f"unknown compression codec {codec}")


def _read_batches(fd: int, size: int, throttler: Throttler, stats_add: Callable[[int], None],
                  duty: DutyCycle | None = None):
    """(buffer, position, header) of every whole batch of a segment file, read in chunks."""
    pos = 0
    tick = duty.tick if duty is not None else None
    while pos < size:
        head = os.pread(fd, min(max(_READ_CHUNK, rb.HEADER_SIZE), size - pos), pos)
        if len(head) < rb.HEADER_SIZE:
            raise CorruptRecordError(f"Record batch at position {pos} is truncated ({len(head)} bytes)")
        first = _I32.unpack_from(head, rb.LENGTH_OFFSET)[0] + rb.LOG_OVERHEAD
        if first < rb.HEADER_SIZE or pos + first > size:
            raise CorruptRecordError(f"Record batch at position {pos} has an invalid size {first}")
        if first > len(head):
            head = os.pread(fd, first, pos)
        throttler.maybe_throttle(len(head))
        stats_add(len(head))
        p = 0
        while p + rb.HEADER_SIZE <= len(head):
            n = _I32.unpack_from(head, p + rb.LENGTH_OFFSET)[0] + rb.LOG_OVERHEAD
            if n < rb.HEADER_SIZE or p + n > len(head):
                break
            if head[p + rb.MAGIC_OFFSET] != rb.MAGIC_V2:
                raise CorruptRecordError(f"unsupported record batch magic {head[p + rb.MAGIC_OFFSET]} at position "
                                         f"{pos + p}")
            h = rb.BatchHeader.parse(head, p)
            if rb.compute_crc(head, p, n) != h.crc & 0xFFFFFFFF:
                raise CorruptRecordError(f"Record batch at position {pos + p} is corrupt (CRC mismatch)")
            if tick is not None:
                tick()
            yield head, p, h
            p += n
        if p == 0:
            return
        pos += p


class Cleaner:
    """Cleans one log at a time; one per cleaner thread (Kafka's ``Cleaner``)."""

    def __init__(self, thread_id: int, map_slots: int, throttler: Throttler, clock: Callable[[], int],
                 check_done: Callable[[Log], None] = lambda lg: None, duty: DutyCycle | None = None):
        self.id = thread_id
        self.map_slots = map_slots
        self.throttler = throttler
        self._clock = clock
        self._check_done = check_done
        self.duty = duty

    def clean(self, cleanable: LogToClean) -> tuple[int, CleanerStats]:
        """Clean ``cleanable``; return the new first dirty offset and the stats."""
        stats = CleanerStats()
        if self.duty is not None:
            self.duty.begin()   # the back-off before this cleaning was not work
        lg = cleanable.log
        segs = lg.cleanable_segments()
        offset_map = OffsetMap(self.map_slots)
        end = self._build_offset_map(lg, segs, cleanable.first_dirty_offset, cleanable.first_uncleanable_offset,
                                     offset_map, stats)
        stats.map_complete_ms = time.monotonic()
        stats.buffer_utilization = offset_map.utilization
        now = self._clock()
        last_batches = self._last_batch_of_producers(lg)
        aborted = self._aborted_txns(lg, end)
        to_clean = [s for s in segs if s.next_offset() <= end]
        txn_has_data: dict[int, bool] = {}  # producer id -> its open transaction kept some data
        for group in self._group_segments(to_clean, lg.config.segment_bytes):
            self._clean_segments(lg, group, offset_map, now, last_batches, aborted, txn_has_data, stats)
        stats.end_ms = time.monotonic()
        return end, stats

    # --- offset map ----------------------------------------------------------------------------------
    def _build_offset_map(self, lg: Log, segs: list[LogSegment], start: int, stop: int, offset_map: OffsetMap,
                          stats: CleanerStats) -> int:
        """Map the dirty segments whole, stopping when the map is full; return the end of the mapped range."""
        aborted = self._aborted_txns(lg, stop)
        mapped_end = start
        m = offset_map._map
        for seg in segs:
            nxt = seg.next_offset()
            if nxt <= start:
                continue
            if nxt > stop:
                break
            if mapped_end > start and len(m) + _record_count(seg.log_path, seg.size) > offset_map.slots:
                break  # this segment might not fit: the range ends before it (the first one is always mapped)
            fd = os.open(seg.log_path, os.O_RDONLY)
            try:
                for buf, p, h in _read_batches(fd, seg.size, self.throttler, self._add_map_read(stats), self.duty):
                    self._check_done(lg)
                    if h.attributes & rb.CONTROL_FLAG_MASK or _is_aborted(h, aborted):
                        continue
                    data, lo, hi = self._records_of(buf, p, h, lg)
                    if type(data) is not bytes:
                        data = bytes(data)   # keys hashed as bytes, as the cleaning pass hashes them
                    stats.map_messages_read += map_keys(data, lo, hi, h.base_offset, m)
            finally:
                os.close(fd)
            mapped_end = nxt
            if len(m) >= offset_map.slots:
                break
        offset_map.latest_offset = mapped_end - 1
        return mapped_end

    @staticmethod
    def _add_map_read(stats: CleanerStats) -> Callable[[int], None]:
        def add(n: int) -> None:
            stats.map_bytes_read += n
        return add

    def _records_of(self, buf, p: int, h: rb.BatchHeader, lg: Log):
        """(buffer, start, end) of a batch's records, decompressed when needed."""
        start, end = p + rb.HEADER_SIZE, p + h.size_in_bytes
        codec = h.compression_type
        if codec == 0:
            return buf, start, end
        data = decompress(codec, buf, start, end, lg.name)
        return data, 0, len(data)

    # --- transactions and producers ------------------------------------------------------------------
    @staticmethod
    def _aborted_txns(lg: Log, upper: int) -> dict[int, list[AbortedTxn]]:
        out: dict[int, list[AbortedTxn]] = {}
        for t in lg.collect_aborted_transactions(lg.log_start_offset, upper):
            out.setdefault(t.producer_id, []).append(t)
        return out

    @staticmethod
    def _last_batch_of_producers(lg: Log) -> dict[int, int]:
        """Producer id -> base offset of its last data batch in the log (these batches are always kept)."""
        out: dict[int, int] = {}
        for seg in lg.log_segments():
            fd = os.open(seg.log_path, os.O_RDONLY)
            try:
                pos, size = 0, seg.size
                while pos + rb.HEADER_SIZE <= size:
                    hdr = os.pread(fd, rb.HEADER_SIZE, pos)
                    if len(hdr) < rb.HEADER_SIZE:
                        break
                    h = rb.BatchHeader.parse(hdr)
                    if h.producer_id >= 0 and not h.attributes & rb.CONTROL_FLAG_MASK:
                        out[h.producer_id] = h.base_offset
                    pos += h.size_in_bytes
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)
        return out

    # --- cleaning ------------------------------------------------------------------------------------
    @staticmethod
    def _group_segments(segs: list[LogSegment], max_size: int) -> list[list[LogSegment]]:
        groups: list[list[LogSegment]] = []
        cur: list[LogSegment] = []
        size = 0
        for seg in segs:
            fits = (cur and size + seg.size <= max_size
                    and seg.next_offset() - 1 - cur[0].base_offset <= 2**31 - 1)
            if cur and not fits:
                groups.append(cur)
                cur, size = [], 0
            cur.append(seg)
            size += seg.size
        if cur:
            groups.append(cur)
        return groups

    def _clean_segments(self, lg: Log, group: list[LogSegment], offset_map: OffsetMap, now: int,
                        last_batches: dict[int, int], aborted: dict[int, list[AbortedTxn]],
                        txn_has_data: dict[int, bool], stats: CleanerStats) -> None:
        base = group[0].base_offset
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            leftover = os.path.join(lg.dir, filename_prefix(base) + suffix + CLEANED_FILE_SUFFIX)
            if os.path.exists(leftover):
                os.unlink(leftover)
        cleaned = LogSegment(lg.dir, base, index_interval_bytes=lg.config.index_interval_bytes,
                             max_index_size=lg.config.segment_index_bytes, file_suffix=CLEANED_FILE_SUFFIX)
        swapped = False
        try:
            for seg in group:
                fd = os.open(seg.log_path, os.O_RDONLY)
                try:
                    self._clean_into(lg, fd, seg.size, cleaned, offset_map, now, last_batches, aborted,
                                     txn_has_data, stats)
                finally:
                    os.close(fd)
                for t in seg.txn_index.entries:
                    if t.last_offset < cleaned.next_offset():
                        cleaned.txn_index.append(t)
            if cleaned.max_timestamp_so_far != rb.NO_TIMESTAMP:
                cleaned.on_become_inactive()
            else:  # nothing survived: an empty segment keeps the group's offsets
                cleaned.offset_index.ensure_file()
                cleaned.time_index.ensure_file()
            cleaned.flush()
            cleaned.set_last_modified_ms(group[-1].last_modified_ms)  # as Kafka
            self._check_done(lg)
            swapped = lg.replace_segments(cleaned, group)
            if not swapped:
                raise CleanerAbortedError(f"log {lg.name} changed during cleaning")
        finally:
            # Once renamed .swap the cleaned data is to be swapped in (at the next load if not now).
            if not swapped and cleaned.log_path.endswith(CLEANED_FILE_SUFFIX):
                cleaned.delete()

    def _clean_into(self, lg: Log, fd: int, size: int, out: LogSegment, offset_map: OffsetMap,
                    now: int, last_batches: dict[int, int], aborted: dict[int, list[AbortedTxn]],
                    txn_has_data: dict[int, bool], stats: CleanerStats) -> None:
        pending = bytearray()
        largest = max_ts = offset_of_max_ts = -1
        map_get = offset_map._map.get
        latest = offset_map.latest_offset

        def add(n: int) -> None:
            stats.bytes_read += n

        def flush_pending() -> None:
            nonlocal pending, largest, max_ts, offset_of_max_ts
            if pending:
                out.append(largest, max_ts, offset_of_max_ts, bytes(pending))
                self.throttler.maybe_throttle(len(pending))
                stats.bytes_written += len(pending)
                pending = bytearray()
                largest = max_ts = offset_of_max_ts = -1

        for buf, p, h in _read_batches(fd, size, self.throttler, add, self.duty):
            self._check_done(lg)
            n = h.size_in_bytes
            stats.messages_read += h.records_count
            keep_raw: bytes | None = None
            new_batch: bytes | None = None
            has_horizon = bool(h.attributes & DELETE_HORIZON_FLAG)
            horizon_passed = has_horizon and now >= h.base_timestamp
            new_horizon = now + lg.config.delete_retention_ms
            if h.attributes & rb.CONTROL_FLAG_MASK:
                kind = control_record_type(buf, p)
                pid = h.producer_id
                txn_marker = kind in (ABORT, COMMIT) and not txn_has_data.get(pid, False)
                txn_has_data.pop(pid, None)
                if txn_marker and horizon_passed:
                    continue
                if txn_marker and not has_horizon:
                    recs = [(r[0], r[1], r[6], r[7], r[5]) for r in iter_records(buf, p + rb.HEADER_SIZE, p + n)]
                    new_batch = _rebuild(buf, p, h, recs, buf, None, new_horizon)
                    stats.next_delete_horizon = min(stats.next_delete_horizon, new_horizon)
                else:
                    keep_raw = bytes(buf[p:p + n])
                    if has_horizon:
                        stats.next_delete_horizon = min(stats.next_delete_horizon, h.base_timestamp)
            elif _is_aborted(h, aborted):
                if last_batches.get(h.producer_id) == h.base_offset:
                    new_batch = _rebuild(buf, p, h, [], b"", None, None)
            else:
                data, lo, hi = self._records_of(buf, p, h, lg)
                base = h.base_offset
                kept: list[tuple[int, int, int, int, int]] = []
                total = 0
                tombstones = 0
                batch_max_ts = -(2**62)
                for start, stop, delta, key, null_value, ts_delta, attrs_at, ts_end in iter_records(data, lo, hi):
                    total += 1
                    off = base + delta
                    if key is not None and off <= latest:
                        if map_get(hash(key), -1) > off:
                            continue
                    if null_value:
                        if horizon_passed:
                            continue
                        tombstones += 1
                    kept.append((start, stop, attrs_at, ts_end, ts_delta))
                    if ts_delta > batch_max_ts:
                        batch_max_ts = ts_delta
                if h.is_transactional and kept:
                    txn_has_data[h.producer_id] = True
                set_horizon = new_horizon if tombstones and not has_horizon else None
                if tombstones and has_horizon:
                    stats.next_delete_horizon = min(stats.next_delete_horizon, h.base_timestamp)
                kept_max_ts = h.base_timestamp + batch_max_ts if kept else None
                if len(kept) == total and set_horizon is None:
                    keep_raw = bytes(buf[p:p + n])
                elif kept or last_batches.get(h.producer_id) == h.base_offset:
                    new_batch = _rebuild(buf, p, h, kept, data, kept_max_ts, set_horizon)
                if set_horizon is not None:
                    stats.next_delete_horizon = min(stats.next_delete_horizon, set_horizon)
            batch = keep_raw if keep_raw is not None else new_batch
            if batch is None:
                continue
            stats.messages_written += _I32.unpack_from(batch, _RECORDS_COUNT_OFFSET)[0]
            pending += batch
            bh = rb.BatchHeader.parse(batch)
            largest = bh.last_offset
            if bh.max_timestamp > max_ts:
                max_ts, offset_of_max_ts = bh.max_timestamp, bh.last_offset
            if len(pending) >= out.index_interval_bytes:
                flush_pending()
        flush_pending()


def _record_count(path: str, size: int) -> int:
    """The number of records in a segment file, from its batch headers."""
    n = pos = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while pos + rb.HEADER_SIZE <= size:
            hdr = os.pread(fd, rb.HEADER_SIZE, pos)
            if len(hdr) < rb.HEADER_SIZE:
                break
            length = _I32.unpack_from(hdr, rb.LENGTH_OFFSET)[0]
            if length < rb.HEADER_SIZE - rb.LOG_OVERHEAD:
                break
            n += _I32.unpack_from(hdr, _RECORDS_COUNT_OFFSET)[0]
            pos += length + rb.LOG_OVERHEAD
    finally:
        os.close(fd)
    return n


def _is_aborted(h: rb.BatchHeader, aborted: dict[int, list[AbortedTxn]]) -> bool:
    if not h.attributes & rb.TRANSACTIONAL_FLAG_MASK:
        return False
    for t in aborted.get(h.producer_id, ()):
        if t.first_offset <= h.base_offset <= t.last_offset:
            return True
    return False


def _rebuild(buf, p: int, h: rb.BatchHeader, kept: list[tuple[int, int, int, int, int]], data, max_ts: int | None,
             delete_horizon: int | None) -> bytes:
    """The batch at ``p`` with only the ``kept`` records of ``data`` (start, stop, attributes position, end of the
    timestamp delta, timestamp delta), recompressed with the batch's codec; base offset, last offset delta and
    producer fields unchanged.  Records are copied byte for byte unless ``delete_horizon`` is set (KIP-534): then
    the base timestamp becomes the horizon, the delete-horizon attribute is set and each record's timestamp delta
    is rebased."""
    if delete_horizon is None:
        records = b"".join(bytes(data[a:b]) for a, b, _, _, _ in kept)
    else:
        shift = h.base_timestamp - delete_horizon
        parts = []
        for _, stop, attrs_at, ts_end, ts_delta in kept:
            body = bytes(data[attrs_at:attrs_at + 1]) + write_varint(ts_delta + shift) + bytes(data[ts_end:stop])
            parts.append(write_varint(len(body)) + body)
        records = b"".join(parts)
    codec = h.compression_type
    if codec and records:
        records = _compress(codec, records)
    out = bytearray(buf[p:p + rb.HEADER_SIZE])
    _I32.pack_into(out, rb.LENGTH_OFFSET, rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(records))
    if max_ts is not None and h.timestamp_type != rb.LOG_APPEND_TIME:
        struct.pack_into(">q", out, rb.MAX_TIMESTAMP_OFFSET, max_ts)
    if delete_horizon is not None:
        struct.pack_into(">h", out, rb.ATTRIBUTES_OFFSET, h.attributes | DELETE_HORIZON_FLAG)
        struct.pack_into(">q", out, rb.BASE_TIMESTAMP_OFFSET, delete_horizon)
    _I32.pack_into(out, _RECORDS_COUNT_OFFSET, len(kept))
    out += records
    _U32.pack_into(out, rb.CRC_OFFSET, crc32c(memoryview(out)[rb.ATTRIBUTES_OFFSET:]))
    return bytes(out)
