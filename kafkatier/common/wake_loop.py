"""The loop of a thread that works when woken (Kafka's ``ShutdownableThread`` around an event): a ZooKeeper
watch or a caller sets ``wake``; wake-ups that arrive while a round runs coalesce into one more round."""
from __future__ import annotations

import threading
from typing import Callable


def run_on_wake_ups(wake: threading.Event, stopped: threading.Event, round_: Callable[[], None]) -> None:
    """Run ``round_`` once per (coalesced) wake-up until ``stopped`` is set; ``stop`` sets both events so the
    thread leaves its wait at once.  ``round_`` handles its own errors (and sets ``wake`` again to retry)."""
    while not stopped.is_set():
        wake.wait()
        wake.clear()
        if stopped.is_set():
            return
        round_()
