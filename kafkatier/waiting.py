"""Wait for a condition with a deadline (the only way tests and tools synchronise): :func:`wait_for` raises
:class:`WaitTimeout` when the deadline passes, :func:`poll_until` answers False instead."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    pass


def wait_for(condition: Callable[[], T], timeout: float, interval: float = 0.05, message: str = "condition",
             ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Call ``condition`` until it returns a truthy value (returned) or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except ignore as e:  # noqa: PERF203
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {message}{extra}")
        time.sleep(interval)


def poll_until(predicate: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """Call ``predicate`` every ``interval`` s until it is true (True) or ``timeout`` seconds pass (False)."""
    try:
        wait_for(predicate, timeout, interval)
    except WaitTimeout:
        return False
    return True
