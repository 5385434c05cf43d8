"""A byte range of a log segment file that the network layer sends with ``sendfile`` (Kafka's ``FileRecords`` slice,
written by ``TransportLayer.transferFrom``): the record data of a Fetch answer goes from the page cache to the socket
without being read into the broker.

The range holds its own duplicate of the segment's descriptor (closed when the last range using it is dropped), so a
segment closed, deleted or replaced by the cleaner after the read still sends the bytes that were read.  A log
truncated below the range meanwhile leaves it short: :meth:`FileRecords.send_to` then returns 0 and the connection is
closed (the frame already announced the length), as Kafka does.  Where the bytes must be in memory (a TLS socket,
a response decoded for inspection) :meth:`FileRecords.read` reads them."""
from __future__ import annotations

import os


class _OpenFile:
    """A duplicate of a file descriptor, closed when no range refers to it any more."""

    __slots__ = ("fd",)

    def __init__(self, fd: int):
        self.fd = -1   # a failed ``dup`` (EMFILE) leaves nothing to close
        self.fd = os.dup(fd)

    def __del__(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass


class FileRecords:
    """``size`` bytes of a file from ``position``; ``len()`` is the size, ``records[n:]`` the range past ``n``."""

    __slots__ = ("_file", "position", "size")

    def __init__(self, fd: int, position: int, size: int, *, _file: _OpenFile | None = None):
        self._file = _file if _file is not None else _OpenFile(fd)
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __getitem__(self, key: slice) -> "FileRecords":
        if not isinstance(key, slice) or key.step not in (None, 1) or key.stop is not None:
            raise TypeError("FileRecords takes only [start:] slices")
        start = min(max(key.start or 0, 0), self.size)
        return FileRecords(-1, self.position + start, self.size - start, _file=self._file)

    def __repr__(self) -> str:
        return f"FileRecords(position={self.position}, size={self.size})"

    def read(self) -> bytes:
        """The bytes (``pread``); OSError when the file no longer holds them all."""
        data = os.pread(self._file.fd, self.size, self.position)
        if len(data) != self.size:
            raise OSError(f"file records truncated: {len(data)} of {self.size} bytes at {self.position}")
        return data

    def __bytes__(self) -> bytes:
        return self.read()

    def send_to(self, sock_fd: int) -> int:
        """``sendfile`` as much of the range as the socket takes now; 0 when the file ends before the range does.
        Raises what ``os.sendfile`` raises (``BlockingIOError`` on a full non-blocking socket)."""
        return os.sendfile(sock_fd, self._file.fd, self.position, self.size)


def as_bytes(data) -> bytes:
    """``data`` itself, or a :class:`FileRecords`' bytes."""
    return data.read() if type(data) is FileRecords else data


__all__ = ["FileRecords", "as_bytes"]
