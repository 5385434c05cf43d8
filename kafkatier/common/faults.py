"""Named crash points for crash-recovery tests (project addition, off unless asked for).

A process started with ``KAFKATIER_CRASH_AT=<name>`` dies at once, as a ``kill -9`` would (no cleanup, exit
status 137), when it reaches :func:`crash_point` ``(<name>)``.  Used where a real ``kill -9`` cannot be timed
from outside, e.g. between the two renames of a JBOD swap (``jbod-between-renames``).
"""
from __future__ import annotations

import logging
import os

ENV = "KAFKATIER_CRASH_AT"


def crash_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        logging.getLogger("kafkatier.faults").critical("crash point %s reached: exiting as if killed", name)
        logging.shutdown()
        os._exit(137)
