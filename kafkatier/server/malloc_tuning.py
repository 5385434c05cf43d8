"""glibc's allocator thresholds for the broker process.

Record data passes through buffers of a batch's size or more (a 1 MiB Produce read off the socket, the records
read for a follower's fetch, the fetched records on the follower).  glibc serves such a block from a fresh
``mmap`` until a free raises its dynamic threshold, and gives the top of a thread's arena back to the kernel once
more than twice that threshold is free, so the next block of that size faults in and zeroes every page again:
about 1,300 page faults per MiB replicated under RF3 at 1 MiB batches.  :func:`tune_malloc` fixes both
thresholds (blocks up to 4 MiB from the arenas, up to 8 MiB kept free at the top of an arena), which halves
those faults (docs/benchmarks.md#rf3-small-batches).  A process started with glibc's own ``MALLOC_MMAP_THRESHOLD_`` or
``MALLOC_TRIM_THRESHOLD_`` keeps its settings; without glibc (musl, macOS) nothing changes.
"""
from __future__ import annotations

import ctypes
import os
import sys

from kafkatier.logsetup import get_logger, kv

log = get_logger("server.malloc_tuning")

M_TRIM_THRESHOLD = -1   # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 4 << 20
TRIM_THRESHOLD_BYTES = 8 << 20
ENV_OVERRIDES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune_malloc(mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES,
                environ=os.environ) -> bool:
    """Set glibc's mmap and trim thresholds; whether they were set (False: not glibc, or the environment sets
    them)."""
    if not sys.platform.startswith("linux") or any(name in environ for name in ENV_OVERRIDES):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1 and mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1
    log.info("malloc thresholds %s", kv(set=done, mmap_threshold=mmap_threshold, trim_threshold=trim_threshold))
    return done
