"""Crash-safe file replacement: write ``<file>.tmp``, fsync it, rename it over the file, fsync the directory."""
from __future__ import annotations

import os

TMP_SUFFIX = ".tmp"


def fsync_dir(path: str) -> None:
    """fsync a directory so a rename or create inside it is durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, sync: bool = True, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` so readers see either the old or the new content, never a mix.

    ``sync=False`` skips both fsyncs: still atomic for readers, but a machine crash may leave the old content
    (for files the caller makes durable later or can rebuild, like the leader epoch checkpoint).  ``mode``: exact
    permissions for the file (e.g. 0o600 for one holding secrets), set before a byte is written; default 0o644
    less the umask."""
    tmp = path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # a leftover temp file keeps its old mode through O_CREAT
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))
