"""ProducerStateManager: idempotent-producer de-duplication for one partition (Kafka's ProducerStateManager,
reduced to what de-duplication needs).

For each producer id it keeps the last five batches appended (producer epoch, first and last sequence, first
and last offset), taken from batch headers only.  A retried batch whose producer epoch and sequence range match
one of those is a duplicate: the broker answers with the offsets it was first written at and appends nothing
(Kafka's behaviour, so a producer retry after a lost acknowledgement does not write a record twice).  The
state is rebuilt from the batch headers in the log when a replica is opened and after a truncation; there are
no ``.snapshot`` files.  Out-of-order sequences are not rejected (see docs/differences.md).
"""
from __future__ import annotations

import os
import threading
from collections import deque

import attrs

from kafkatier.log.record_batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, iter_batches

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
_SCAN_CHUNK = 1 << 20


@attrs.frozen
class BatchMetadata:
    producer_epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


def _entry(base_offset: int, last_offset_delta: int, producer_epoch: int, base_sequence: int) -> BatchMetadata:
    return BatchMetadata(producer_epoch, base_sequence, base_sequence + last_offset_delta, base_offset,
                         base_offset + last_offset_delta)


class ProducerStateManager:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._producers: dict[int, deque[BatchMetadata]] = {}

    def find_duplicate(self, records) -> BatchMetadata | None:
        """If the first batch of ``records`` was already appended by its producer, its original metadata."""
        for _, h in iter_batches(records):
            if h.producer_id == NO_PRODUCER_ID or h.base_sequence < 0:
                return None
            first, last = h.base_sequence, h.base_sequence + h.last_offset_delta
            with self._lock:
                for b in self._producers.get(h.producer_id, ()):
                    if b.producer_epoch == h.producer_epoch and b.first_seq == first and b.last_seq == last:
                        return b
            return None
        return None

    def update(self, records) -> None:
        """Record the batches of an append (``records`` with their final offsets)."""
        with self._lock:
            for _, h in iter_batches(records):
                self._add(h.producer_id, _entry(h.base_offset, h.last_offset_delta, h.producer_epoch,
                                                h.base_sequence))

    def _add(self, producer_id: int, entry: BatchMetadata) -> None:
        if producer_id == NO_PRODUCER_ID or entry.first_seq < 0:
            return
        q = self._producers.get(producer_id)
        if q is None or (q and q[-1].producer_epoch != entry.producer_epoch):
            q = self._producers[producer_id] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        q.append(entry)

    def rebuild(self, log) -> None:
        """Re-read the producer batches from the log's segments (batch headers only)."""
        with self._lock:
            self._producers.clear()
            end = log.log_end_offset
            for seg in log.log_segments():
                for base, delta, pid, epoch, seq in _scan_headers(seg.log_path):
                    if base + delta >= end:
                        break
                    if pid != NO_PRODUCER_ID:
                        self._add(pid, _entry(base, delta, epoch, seq))

    def producers(self) -> int:
        with self._lock:
            return len(self._producers)


def _scan_headers(path: str):
    """(base offset, last offset delta, producer id, producer epoch, base sequence) of each whole batch."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos + HEADER_SIZE <= size:
            head = os.pread(fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                return
            h = HEADER.unpack(head)
            length = h[1] + LOG_OVERHEAD
            if length < HEADER_SIZE or pos + length > size or h[3] != MAGIC_V2:
                return
            yield h[0], h[6], h[9], h[10], h[11]
            pos += length
    finally:
        os.close(fd)
