"""Reading a coordinator's partition (``__consumer_offsets``, ``__transaction_state``) from its start to its log
end when a broker becomes its leader: Kafka's ``GroupMetadataManager.doLoadGroupsAndOffsets`` and
``TransactionStateManager.loadTransactionMetadata`` share this loop."""
from __future__ import annotations

from typing import Iterable, Iterator, Protocol

from kafka.record.memory_records import MemoryRecords


class PartitionLog(Protocol):
    def read(self, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Batches from ``offset`` (at most about ``max_bytes``) and the partition's log end offset."""


def batches_of(chunks: Iterable[bytes]) -> Iterator:
    """The record batches of ``chunks`` in order (a chunk's incomplete tail is left out)."""
    for chunk in chunks:
        batches = MemoryRecords(chunk)
        while batches.has_next():
            batch = batches.next_batch()
            if batch is None:
                break
            yield batch


def read_to_log_end(log: PartitionLog, partition: int, buffer_size: int) -> list[bytes]:
    """The partition's batches as chunks of bytes, read ``buffer_size`` at a time until the log end."""
    chunks, offset = [], 0
    while True:
        data, log_end = log.read(partition, offset, buffer_size)
        if not data or offset >= log_end:
            break
        chunks.append(data)
        last = None
        for last in batches_of([data]):
            pass
        if last is None:
            break
        offset = last.base_offset + last.last_offset_delta + 1
        if offset >= log_end:
            break
    return chunks
