"""The size limit of a znode we write, checked in one place.

ZooKeeper refuses any packet larger than ``jute.maxbuffer`` (default 0xfffff = 1,048,575 bytes) and answers by
dropping the client's connection, which a writer sees as ``ConnectionLoss`` and would retry forever.  Every
payload the project writes is therefore checked here first: :func:`codecs.encode_json` (every JSON payload) and
:class:`fenced.Create` / :class:`fenced.SetData` (every fenced write) call :func:`check_znode_size`.

``MAX_ZNODE_BYTES`` leaves 48 KiB of the packet for the path, the transaction header and the fence check.
Payloads that can be larger (control requests and responses) are split by :mod:`kafkatier.zk.control_parts`.
"""
from __future__ import annotations

JUTE_MAX_BUFFER = 0xFFFFF
MAX_ZNODE_BYTES = 1_000_000


class ZNodeTooLargeError(ValueError):
    """A payload larger than :data:`MAX_ZNODE_BYTES`: ZooKeeper would drop the connection instead of storing it."""

    def __init__(self, what: str, size: int):
        super().__init__(f"znode payload for {what} is {size} bytes, over the {MAX_ZNODE_BYTES}-byte limit "
                         f"(ZooKeeper jute.maxbuffer {JUTE_MAX_BUFFER})")
        self.what = what
        self.size = size


def check_znode_size(data: bytes | None, what: str) -> bytes | None:
    """``data`` unchanged, or :class:`ZNodeTooLargeError` when it is over :data:`MAX_ZNODE_BYTES`."""
    if data is not None and len(data) > MAX_ZNODE_BYTES:
        raise ZNodeTooLargeError(what, len(data))
    return data
