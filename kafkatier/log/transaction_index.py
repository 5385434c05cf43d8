"""The aborted transaction index of one segment, ``<base offset>.txnindex`` (Kafka's ``TransactionIndex`` and
``AbortedTxn``).

Only aborted transactions are indexed, in the segment that holds their ABORT marker.  Each entry is 34 bytes,
big-endian: int16 version (0), int64 producer id, int64 first offset, int64 last offset (the marker's offset),
int64 last stable offset (the partition's LSO right after the transaction completed).  A read_committed Fetch
lists the entries that overlap the returned range (:meth:`TransactionIndex.collect`); the client skips those
producers' batches from the first offset to their ABORT marker.

The file is created on the first entry (a segment without aborted transactions has no ``.txnindex``, as in
Kafka); entries are appended without fsync and made durable when the segment is flushed.  Not thread safe:
the owning log serialises access.

Differences from Kafka: the entries are also kept in memory (a segment holds few aborted transactions); a
trailing partial entry (a crash mid-write) is dropped on open rather than failing the load.
"""
from __future__ import annotations

import os
import struct

import attrs

from kafkatier.logsetup import get_logger, kv

log = get_logger("log.txn-index")

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
CURRENT_VERSION = 0


@attrs.frozen
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)

    @classmethod
    def decode(cls, buf, position: int = 0) -> "AbortedTxn":
        version, pid, first, last, lso = _ENTRY.unpack_from(buf, position)
        if version != CURRENT_VERSION:
            raise ValueError(f"unknown aborted transaction entry version {version} at position {position}")
        return cls(pid, first, last, lso)


@attrs.frozen
class TxnIndexSearchResult:
    """Entries overlapping a fetch range, and whether the search may stop (an entry's LSO reached the bound)."""
    aborted: tuple[AbortedTxn, ...]
    is_complete: bool


class TransactionIndex:
    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY_SIZE
        if whole != len(data):
            log.warning("dropping a partial aborted transaction entry %s", kv(file=self.path, bytes=len(data) - whole))
        for pos in range(0, whole, ENTRY_SIZE):
            self.entries.append(AbortedTxn.decode(data, pos))

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset < self.entries[-1].last_offset:
            raise ValueError(f"The last offset of appended transaction {txn} is smaller than the last offset "
                             f"{self.entries[-1].last_offset} of the last entry of {self.path}")
        with open(self.path, "ab") as f:
            f.write(txn.encode())
        self.entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or past ``offset``."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        if os.path.exists(self.path):
            with open(self.path, "r+b") as f:
                f.truncate(len(keep) * ENTRY_SIZE)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Kafka's ``collectAbortedTxns``: entries with ``last_offset >= fetch_offset`` and ``first_offset <
        upper_bound_offset``; complete once an entry's LSO is at or past the bound."""
        out = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                out.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(tuple(out), True)
        return TxnIndexSearchResult(tuple(out), False)

    def flush(self) -> None:
        if not self.entries or not os.path.exists(self.path):
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
