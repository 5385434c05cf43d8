"""Record batches for unit tests of the log and its producer state: ``n`` small records of one producer, built by
kafka-python's v2 builder as a client would send them."""
from __future__ import annotations

import functools

from kafka.record.default_records import DefaultRecordBatchBuilder


def producer_batch(pid: int = -1, epoch: int = -1, seq: int = -1, n: int = 2, transactional: bool = False) -> bytes:
    """``n`` records ``v0``, ``v1``, ... (no key, timestamps from 1,700,000,000,000 ms) of producer ``pid`` at
    ``epoch``, its first sequence ``seq``."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=b"v%d" % i, headers=[])
    return bytes(b.build())


#: three records a batch, as the producer-state tests count offsets
producer_batch_of_3 = functools.partial(producer_batch, n=3)
