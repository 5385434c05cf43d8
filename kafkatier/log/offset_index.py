"""A segment's ``.index``: sparse map from offset to the file position of the batch data at or before it.

Each entry is ``relativeOffset int32`` (offset - segment base offset) and ``position int32``, big-endian.
An entry (o, p) means: the bytes appended at position p end with offset o, so any offset >= o starts at or
after p. A lookup returns the greatest entry with offset <= target; the caller scans batch headers from there.
"""
from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

import attrs

from kafkatier.log.abstract_index import AbstractIndex
from kafkatier.log.errors import CorruptIndexError, InvalidOffsetError

_ENTRY = struct.Struct(">ii")


@attrs.frozen
class OffsetPosition:
    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    ENTRY_SIZE = 8
    _ENTRY_ARRAYS = ("_rel", "_pos")

    def _load(self, data: bytes) -> None:
        both = array("i")
        both.frombytes(data)
        if sys.byteorder == "little":
            both.byteswap()
        self._rel = both[0::2]
        self._pos = both[1::2]

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self._max_entries

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty."""
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    def entry(self, n: int) -> OffsetPosition:
        return OffsetPosition(self.base_offset + self._rel[n], self._pos[n])

    def append(self, offset: int, position: int) -> None:
        """Add an entry; the offset must be above the last one and the index must not be full."""
        rels = self._rel
        n = len(rels)
        if n >= self._max_entries:
            raise InvalidOffsetError(f"Attempt to append to a full index (size = {self.entries}).")
        rel = offset - self.base_offset
        if n and rel <= rels[-1]:
            raise InvalidOffsetError(f"Attempt to append an offset {offset} to position {self.entries} no larger "
                                     f"than the last offset appended ({self.last_offset}) to {self.path}.")
        if not 0 <= rel <= 2**31 - 1:
            rel = self._relative(offset)   # raises its error
        self._write_entry(_ENTRY.pack(rel, position))
        rels.append(rel)
        self._pos.append(position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Greatest entry with offset <= target, or (base offset, 0)."""
        i = bisect_right(self._rel, target_offset - self.base_offset) - 1
        if i < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + self._rel[i], self._pos[i])

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        self._truncate_to_entries(bisect_left(self._rel, offset - self.base_offset))

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptIndexError unless entries are whole, increasing, and inside the log."""
        self._check_length()
        if not self._rel:
            return
        if self._rel[-1] < 0:
            raise CorruptIndexError(f"Corrupt index found, index file ({self.path}) has non-zero size but the last "
                                    f"offset is {self.last_offset} which is less than the base offset "
                                    f"{self.base_offset}.")
        rel, pos = self._rel, self._pos
        if self._rel[0] < 0 or pos[0] < 0 or any(rel[i] >= rel[i + 1] or pos[i] > pos[i + 1]
                                                 for i in range(len(rel) - 1)):
            raise CorruptIndexError(f"Corrupt index found, index file ({self.path}) has entries that are not in "
                                    f"increasing order.")
        if log_size is not None and pos[-1] > log_size:
            raise CorruptIndexError(f"Corrupt index found, index file ({self.path}) points to position {pos[-1]} "
                                    f"beyond the end of the log ({log_size} bytes).")
