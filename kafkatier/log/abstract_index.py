"""Shared file handling of a segment's sparse indexes (Kafka's ``AbstractIndex``).

Entries live in memory (for binary search) and in the file (big-endian, fixed-size entries). New entries
are buffered and reach the file on flush, close, truncation, when the segment stops being active, or every
8 KiB of entries. Like Kafka's mmap writes, they are only durable after a flush; after a crash the indexes
of unflushed segments are rebuilt from the log anyway.

Sizing choice: Kafka preallocates an index file to ``segment.index.bytes`` (mmap) and trims it to its
entries when the segment stops being active or is closed. We keep every index file exactly as long as its
entries at all times, so the file is always in the trimmed form Kafka leaves after a clean shutdown (Kafka
reads such files as-is). ``segment.index.bytes`` still bounds the number of entries (``is_full`` makes the
log roll). A crash can leave a partial trailing entry; the sanity check then fails and the index is rebuilt
from the log.
"""
from __future__ import annotations

import os

from kafkatier.log.errors import CorruptIndexError


_PENDING_LIMIT = 8192


class AbstractIndex:
    ENTRY_SIZE = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10 * 1024 * 1024):
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._max_entries = max_index_size // self.ENTRY_SIZE
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._closed = False
        self._pending = bytearray()
        length = os.fstat(self._fd).st_size
        self._file_length = length
        n = length // self.ENTRY_SIZE
        data = os.pread(self._fd, n * self.ENTRY_SIZE, 0) if n else b""
        self._load(data)

    # --- subclass hooks -------------------------------------------------------------------------------
    def _load(self, data: bytes) -> None:
        raise NotImplementedError

    def _truncate_entries(self, n: int) -> None:
        raise NotImplementedError

    @property
    def entries(self) -> int:
        raise NotImplementedError

    # --- common ---------------------------------------------------------------------------------------
    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.ENTRY_SIZE

    def _check_length(self) -> None:
        if self._file_length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(f"Index file {self.path} is corrupt, found {self._file_length} bytes which is "
                                    f"neither positive nor a multiple of {self.ENTRY_SIZE}.")

    def _write_entry(self, data: bytes) -> None:
        """Queue an entry for the file (call before adding it to memory)."""
        self._pending += data
        if len(self._pending) >= _PENDING_LIMIT:
            self.write_pending(self.entries + 1)

    def write_pending(self, total_entries: int | None = None) -> None:
        """Write buffered entries to the file (not fsynced)."""
        if self._pending and not self._closed:
            n = self.entries if total_entries is None else total_entries
            position = n * self.ENTRY_SIZE - len(self._pending)
            os.pwrite(self._fd, bytes(self._pending), position)
            self._file_length = n * self.ENTRY_SIZE
            self._pending.clear()

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > 2**31 - 1:
            raise CorruptIndexError(f"Offset {offset} is out of range for an index with base offset "
                                    f"{self.base_offset} ({self.path})")
        return rel

    def _truncate_to_entries(self, n: int) -> None:
        self.write_pending()
        self._truncate_entries(n)
        self._file_length = n * self.ENTRY_SIZE
        os.ftruncate(self._fd, self._file_length)

    def reset(self) -> None:
        """Remove every entry."""
        self._truncate_to_entries(0)

    def flush(self) -> None:
        if not self._closed:
            self.write_pending()
            os.fsync(self._fd)

    def close(self) -> None:
        if not self._closed:
            self.write_pending()
            self._closed = True
            os.close(self._fd)

    def rename_to(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self._pending.clear()
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
