"""A segment's ``.timeindex``: sparse map from timestamp to offset.

Each entry is ``timestamp int64`` and ``relativeOffset int32`` (12 bytes, big-endian). Timestamps in the
index strictly increase; an entry (t, o) says the largest timestamp seen up to offset o (the last offset of
the batch holding it) is t.
"""
from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right

import attrs

from kafkatier.log.abstract_index import AbstractIndex
from kafkatier.log.errors import CorruptIndexError, InvalidOffsetError

_ENTRY = struct.Struct(">qi")
NO_TIMESTAMP = -1


@attrs.frozen
class TimestampOffset:
    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    ENTRY_SIZE = 12
    _ENTRY_ARRAYS = ("_ts", "_rel")

    def _load(self, data: bytes) -> None:
        self._ts = array("q")
        self._rel = array("i")
        for ts, rel in _ENTRY.iter_unpack(data):
            self._ts.append(ts)
            self._rel.append(rel)

    @property
    def is_full(self) -> bool:
        return len(self._ts) >= self._max_entries

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base offset) when empty (read from the file when not loaded)."""
        if not self.is_loaded:
            return self._last_entry_on_disk()
        if not self._ts:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._ts[-1], self.base_offset + self._rel[-1])

    def _last_entry_on_disk(self) -> TimestampOffset:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        try:
            n = os.fstat(fd).st_size // self.ENTRY_SIZE
            data = os.pread(fd, self.ENTRY_SIZE, (n - 1) * self.ENTRY_SIZE) if n else b""
        finally:
            os.close(fd)
        if len(data) < self.ENTRY_SIZE:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        ts, rel = _ENTRY.unpack(data)
        return TimestampOffset(ts, self.base_offset + rel)

    def entry(self, n: int) -> TimestampOffset:
        return TimestampOffset(self._ts[n], self.base_offset + self._rel[n])

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append (timestamp, offset) if the timestamp is above the last entry's."""
        ts = self._ts
        if not skip_full_check and len(ts) >= self._max_entries:
            raise InvalidOffsetError(f"Attempt to append to a full time index (size = {self.entries}).")
        if ts and timestamp == ts[-1] and offset >= self.base_offset + self._rel[-1]:
            return  # the common case: nothing new
        last = self.last_entry
        if self._ts and offset < last.offset:
            raise InvalidOffsetError(f"Attempt to append an offset ({offset}) to slot {self.entries} no larger than "
                                     f"the last offset appended ({last.offset}) to {self.path}.")
        if self._ts and timestamp < last.timestamp:
            raise InvalidOffsetError(f"Attempt to append a timestamp ({timestamp}) to slot {self.entries} no larger "
                                     f"than the last timestamp appended ({last.timestamp}) to {self.path}.")
        if timestamp > last.timestamp:
            rel = self._relative(offset)
            self._write_entry(_ENTRY.pack(timestamp, rel))
            self._ts.append(timestamp)
            self._rel.append(rel)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Greatest entry with timestamp <= target, or (-1, base offset)."""
        i = bisect_right(self._ts, target_timestamp) - 1
        if i < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._ts[i], self.base_offset + self._rel[i])

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        self._truncate_to_entries(bisect_left(self._rel, offset - self.base_offset))

    def sanity_check(self) -> None:
        self._check_length()
        if not self._ts:
            return
        if self._ts[-1] < self._ts[0]:
            raise CorruptIndexError(f"Corrupt time index found, time index file ({self.path}) has non-zero size "
                                    f"but the last timestamp is {self._ts[-1]} which is less than the first "
                                    f"timestamp {self._ts[0]}")
        if self._rel[-1] < 0:
            raise CorruptIndexError(f"Corrupt time index found, time index file ({self.path}) has non-zero size "
                                    f"but the last offset is {self.last_entry.offset} which is less than the "
                                    f"base offset {self.base_offset}")
