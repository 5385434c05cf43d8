"""Reading record batches and timestamps out of one remote segment, through the indexes copied with it.

Fetch: the offset index (``.index``, entries ``relativeOffset int32, position int32``) gives the position of
the last indexed batch at or before the fetch offset; batch headers are scanned from there to the batch that
holds the offset, and whole batches are returned from it (KIP-74: the first one whole even if it is larger
than ``max_bytes``).  ListOffsets: the time index (``.timeindex``, entries ``timestamp int64,
relativeOffset int32``) narrows the scan, then the records of the matching batch are read.
"""
from __future__ import annotations

import bisect
import struct

import attrs

from kafkatier.log.record_batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2
from kafkatier.log.remote.remote_log_segment_metadata import RemoteLogSegmentMetadata
from kafkatier.log.remote.remote_storage_manager import IndexType, RemoteStorageManager
from kafkatier.log.segment import TimestampAndOffset
from kafkatier.logsetup import get_logger, kv

log = get_logger("remote.reader")

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_CHUNK = 64 * 1024


@attrs.frozen
class _Batch:
    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    leader_epoch: int


def offset_index_position(index: bytes, base_offset: int, target_offset: int) -> int:
    """Position of the greatest offset-index entry with offset <= target (0 when there is none)."""
    n = len(index) // _OFFSET_ENTRY.size
    rels = [_OFFSET_ENTRY.unpack_from(index, i * _OFFSET_ENTRY.size)[0] for i in range(n)]
    i = bisect.bisect_right(rels, target_offset - base_offset) - 1
    return 0 if i < 0 else _OFFSET_ENTRY.unpack_from(index, i * _OFFSET_ENTRY.size)[1]


def time_index_offset(index: bytes, base_offset: int, target_timestamp: int) -> int:
    """Offset of the greatest time-index entry with timestamp <= target (the base offset when none)."""
    best = base_offset
    for i in range(len(index) // _TIME_ENTRY.size):
        ts, rel = _TIME_ENTRY.unpack_from(index, i * _TIME_ENTRY.size)
        if ts > target_timestamp:
            break
        best = base_offset + rel
    return best


class _SegmentScanner:
    """Sequential batch-header scan of a remote segment's log, reading it in chunks."""

    def __init__(self, rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata):
        self.rsm = rsm
        self.md = metadata
        self.size = metadata.segment_size_in_bytes
        self._buf = b""
        self._buf_start = 0

    def read(self, position: int, length: int) -> bytes:
        end = min(self.size, position + length) - 1
        if end < position:
            return b""
        if self._buf_start <= position and position + length <= self._buf_start + len(self._buf):
            rel = position - self._buf_start
            return self._buf[rel:rel + length]
        data = self.rsm.fetch_log_segment(self.md, position, end)
        self._buf, self._buf_start = data, position
        return data

    def batches(self, start: int):
        pos = start
        while pos + HEADER_SIZE <= self.size:
            head = self.read(pos, max(HEADER_SIZE, _CHUNK))
            if len(head) < HEADER_SIZE:
                return
            h = HEADER.unpack_from(head, 0)
            size = h[1] + LOG_OVERHEAD
            if size < HEADER_SIZE or pos + size > self.size or h[3] != MAGIC_V2:
                log.warning(kv(event="remote_segment_scan_stopped", segment=self.md.segment_id, position=pos))
                return
            yield _Batch(pos, size, h[0], h[0] + h[6], h[8], h[2])
            pos += size


def read_batches(rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, fetch_offset: int,
                 max_bytes: int, max_offset: int | None = None, min_one_message: bool = True) -> bytes:
    """Whole batches of the segment from the one holding ``fetch_offset``: at most ``max_bytes`` (the first
    batch whole with ``min_one_message``) and none at or past ``max_offset``."""
    index = rsm.fetch_index(metadata, IndexType.OFFSET)
    start = offset_index_position(index, metadata.start_offset, fetch_offset)
    scanner = _SegmentScanner(rsm, metadata)
    first: _Batch | None = None
    total = 0
    last: _Batch | None = None
    for b in scanner.batches(start):
        if b.last_offset < fetch_offset:
            continue
        if max_offset is not None and b.base_offset >= max_offset:
            break
        if first is None:
            first = b
            if b.size > max_bytes and not min_one_message:
                return b""
        elif total + b.size > max_bytes:
            break
        total += b.size
        last = b
        if total >= max_bytes:
            break
    if first is None or last is None:
        return b""
    return rsm.fetch_log_segment(metadata, first.position, last.position + last.size - 1)


def find_offset_by_timestamp(rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, timestamp: int,
                             starting_offset: int) -> TimestampAndOffset | None:
    """First record of the segment with timestamp >= ``timestamp`` and offset >= ``starting_offset``."""
    if metadata.max_timestamp_ms < timestamp:
        return None
    time_index = rsm.fetch_index(metadata, IndexType.TIMESTAMP)
    offset = max(time_index_offset(time_index, metadata.start_offset, timestamp), starting_offset)
    index = rsm.fetch_index(metadata, IndexType.OFFSET)
    scanner = _SegmentScanner(rsm, metadata)
    for b in scanner.batches(offset_index_position(index, metadata.start_offset, offset)):
        if b.max_timestamp < timestamp or b.last_offset < starting_offset:
            continue
        data = rsm.fetch_log_segment(metadata, b.position, b.position + b.size - 1)
        epoch = b.leader_epoch if b.leader_epoch >= 0 else None
        try:
            from kafka.record.default_records import DefaultRecordBatch
            for record in DefaultRecordBatch(data):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return TimestampAndOffset(record.timestamp, record.offset, epoch)
        except Exception as e:  # noqa: BLE001 - e.g. a compression codec that is not installed
            log.warning(kv(event="timestamp_search_fallback", segment=metadata.segment_id, error=repr(e)))
            return TimestampAndOffset(b.max_timestamp, max(b.base_offset, starting_offset), epoch)
    return None
