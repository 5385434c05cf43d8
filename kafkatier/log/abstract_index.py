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

Lazy, without a file descriptor (Kafka's ``LazyIndex``): a broker with 20,000 replicas must not hold 40,000 index
files open nor their entries in memory.  Constructing an index touches nothing on disk: the file is created when
its first entries are written (or by :meth:`ensure_file`, which a segment calls when it stops being active, as
Kafka's trim of an inactive segment's index does), so a new or rolled-to segment has no index files until it
indexes something, and a broker creating 20,000 empty logs creates no index file.  A missing file reads as an
empty index.  The entries are read on first use (any access to the entry arrays named in ``_ENTRY_ARRAYS``,
through ``__getattr__``, so a loaded index pays nothing), and :meth:`unload` drops them again (the segment's
idle-file sweep).  No descriptor is kept: each write of buffered entries, truncation or fsync opens the file,
acts and closes it.  Difference from Kafka: Kafka keeps the mmap of a loaded index until the segment is closed.
"""
from __future__ import annotations

import os

from kafkatier.log.errors import CorruptIndexError


_PENDING_LIMIT = 8192


class AbstractIndex:
    ENTRY_SIZE = 8
    #: The entry arrays ``_load`` sets, one per field of an entry, in the entry's order (parallel arrays).
    _ENTRY_ARRAYS: tuple[str, ...] = ()

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10 * 1024 * 1024):
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._max_entries = max_index_size // self.ENTRY_SIZE
        self._closed = False
        self._pending = bytearray()
        self._loaded = False
        self._unflushed = False  # written since the last fsync

    def __getattr__(self, name: str):
        # Only called for attributes not set yet: the entry arrays of an index not loaded.
        if name in type(self)._ENTRY_ARRAYS and not self.__dict__.get("_loaded", True):
            self._ensure_loaded()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # deleted with its segment: nothing to read
            length, data = 0, b""
        else:
            try:
                length = os.fstat(fd).st_size
                n = length // self.ENTRY_SIZE
                data = os.pread(fd, n * self.ENTRY_SIZE, 0) if n else b""
            finally:
                os.close(fd)
        self._file_length = length
        self._load(data)
        self._loaded = True

    @property
    def is_loaded(self) -> bool:
        return self._loaded

    @property
    def file_exists(self) -> bool:
        return os.path.exists(self.path)

    def ensure_file(self) -> None:
        """Write buffered entries and create the file if it does not exist yet (an empty index)."""
        if self._closed:
            return
        self.write_pending()
        if not os.path.exists(self.path):
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))
            self._unflushed = True

    def unload(self) -> None:
        """Write buffered entries and drop the in-memory entries; the next use reads the file again."""
        if not self._loaded:
            return
        self.write_pending()
        for name in type(self)._ENTRY_ARRAYS:
            self.__dict__.pop(name, None)
        self._loaded = False

    def _write_at(self, data: bytes, position: int) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, position)
        finally:
            os.close(fd)
        self._unflushed = True

    # --- subclass hooks -------------------------------------------------------------------------------
    def _load(self, data: bytes) -> None:
        raise NotImplementedError

    # --- common ---------------------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return len(getattr(self, self._ENTRY_ARRAYS[0]))

    def _truncate_entries(self, n: int) -> None:
        """Keep the first ``n`` entries in memory."""
        for name in self._ENTRY_ARRAYS:
            del getattr(self, name)[n:]

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        """Whether the index holds ``max_entries`` (OffsetIndex and TimeIndex answer it without ``entries``: the
        log asks on every append)."""
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.ENTRY_SIZE

    def _check_length(self) -> None:
        self._ensure_loaded()
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
            self._write_at(bytes(self._pending), position)
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
        try:
            os.truncate(self.path, self._file_length)
        except FileNotFoundError:  # never written: nothing on disk to cut (an index stays lazy through a reset)
            return
        self._unflushed = True

    def reset(self) -> None:
        """Remove every entry."""
        self._truncate_to_entries(0)

    def flush(self) -> None:
        if self._closed:
            return
        self.write_pending()
        if self._unflushed:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:  # deleted (with its segment) since it was written
                self._unflushed = False
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unflushed = False

    def close(self) -> None:
        if not self._closed:
            self.write_pending()
            self._closed = True

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
