"""StepLedger: what became of each step of a run's schedule, the account the verdict is made from.

A scheduled fault that never happened must show in the verdict, as Jepsen records a nemesis operation that could
not be done instead of dropping it.  Every step ends in exactly one status:

- ``done``: applied;
- ``skipped: REASON``: tried, and could not be applied (its target was excluded, a broker did not come back, an
  admin operation failed...);
- ``not reached: REASON``: its time, condition, delay or client phase did not come (a condition's ``timeout_s``
  passed, or heal began first);
- ``unfinished: REASON``: still being applied when heal began and stopped waiting for it.

A step the scenario file names (origin ``schedule[i]``) that ends anything but ``done`` is an unmet expectation:
the run did not show what the scenario claims, so it is not valid (exit 1) -- whether heal cut it short or not.
A nemesis step that is not done is part of a random schedule (its random target may be gone); it shows in the
schedule's statuses and the summary's step counts only.

A step waits (for its time, its condition, its delay, its client's phase) until a deadline it declares; the
runner keeps the workload phase going while a named step still waits (:meth:`wait_for_named`), bounded by those
deadlines, so a step whose condition comes late still happens under load.  After :meth:`close` (heal began) the
verdict is fixed: a step thread that reports afterwards changes nothing.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from kafkatier.scenario.history import History
from kafkatier.scenario.schedule import Step

DONE = "done"
SKIPPED = "skipped"
NOT_REACHED = "not reached"
UNFINISHED = "unfinished"
WAITING = "waiting"
RUNNING = "running"
FINAL = (DONE, SKIPPED, NOT_REACHED, UNFINISHED)


class StepNotReached(Exception):
    """Raised by an action whose step never came to its fault (its client never reached the phase)."""


def named(step: Step) -> bool:
    """A step the scenario file names (not drawn by the nemesis)."""
    return step.origin != "nemesis"


class StepLedger:
    """The status of every step of one schedule; thread-safe (each step runs in its own thread)."""

    def __init__(self, steps: tuple[Step, ...], history: History, clock: Callable[[], float] = time.monotonic):
        self._steps = {s.number: s for s in steps}
        self._history = history
        self._clock = clock
        self._cond = threading.Condition()
        self._state: dict[int, str] = {s.number: WAITING for s in steps}
        self._deadline: dict[int, float | None] = {s.number: None for s in steps}
        self._shown: dict[int, dict] = {}     # step number -> {"happened_at", "status"} for results.json
        self._unmet: list[tuple[int, str]] = []
        self._closed = False

    # -- what a step thread reports ------------------------------------------------------------------------------
    def waiting(self, step: Step, deadline: float | None) -> None:
        """The step waits (for its time, condition, delay or client phase) until ``deadline`` (the clock's time;
        None: no bound of its own)."""
        with self._cond:
            if self._closed or self._state[step.number] in FINAL:
                return
            self._state[step.number] = WAITING
            self._deadline[step.number] = deadline
            self._cond.notify_all()

    def started(self, step: Step, happened_at: float) -> None:
        """The step's fault is being applied (``happened_at``: seconds after the workload started)."""
        with self._cond:
            if self._closed or self._state[step.number] in FINAL:
                return
            self._state[step.number] = RUNNING
            self._shown[step.number] = {"happened_at": round(happened_at, 3), "status": RUNNING}
            self._cond.notify_all()

    def done(self, step: Step) -> None:
        self._end(step, DONE, None)

    def skipped(self, step: Step, reason: str) -> None:
        self._end(step, SKIPPED, reason)

    def not_reached(self, step: Step, reason: str) -> None:
        self._end(step, NOT_REACHED, reason)

    def _end(self, step: Step, status: str, reason: str | None) -> None:
        with self._cond:
            if self._closed or self._state[step.number] in FINAL:
                return
            self._finish(step, status, reason)

    def _finish(self, step: Step, status: str, reason: str | None) -> None:
        """Under the lock: the step's final status, its history entry and, for a named step, its unmet line."""
        self._state[step.number] = status
        shown = self._shown.setdefault(step.number, {})
        if status == NOT_REACHED:
            shown.pop("happened_at", None)   # it never happened
        line = (reason or "").splitlines()[0] if reason else ""
        shown["status"] = status + (f": {line}" if line else "")
        self._cond.notify_all()
        if status == DONE:
            return
        self._history.info("nemesis", "skipped", {"step": step.number, "status": status, "reason": reason,
                                                  "origin": step.origin})
        if named(step):
            self._unmet.append((step.number, f"step #{step.number} ({step.origin}) {step.action.action} "
                                             f"{_verb(status)}: {line}"))

    # -- what the runner asks ------------------------------------------------------------------------------------
    def wait_for_named(self, cap: float) -> list[int]:
        """Until no named step waits any more, each bounded by its own deadline and all by ``cap`` (the clock's
        time).  Returns the named steps that were still waiting when called (what the workload phase went on
        for)."""
        with self._cond:
            first = self._named_waiting()
            while True:
                left = [n for n in self._named_waiting() if self._deadline[n] is not None]
                if not left:
                    return first
                until = min(cap, max(self._deadline[n] for n in left))
                now = self._clock()
                if now >= until:
                    return first
                self._cond.wait(min(until - now, 0.5))

    def _named_waiting(self) -> list[int]:
        return sorted(n for n, st in self._state.items() if st == WAITING and named(self._steps[n]))

    def close(self, event: str = "heal began") -> None:
        """``event`` (heal began): a step still waiting is ``not reached``, one still being applied
        ``unfinished``; the verdict is fixed from now on."""
        with self._cond:
            if self._closed:
                return
            for n in sorted(self._state):
                if self._state[n] == WAITING:
                    self._finish(self._steps[n], NOT_REACHED, f"{event} first")
                elif self._state[n] == RUNNING:
                    self._finish(self._steps[n], UNFINISHED, f"still being applied when {event}")
            self._closed = True

    def unmet(self) -> list[str]:
        """One line per named step that did not happen, in step order."""
        with self._cond:
            return [line for _, line in sorted(self._unmet)]

    def shown(self) -> dict[int, dict]:
        """Step number -> ``{"happened_at": s, "status": ...}`` for the report (a step never started has no
        ``happened_at``)."""
        with self._cond:
            return {n: dict(v) for n, v in self._shown.items()}

    def status(self, step: Step) -> str:
        with self._cond:
            return self._state[step.number]


def _verb(status: str) -> str:
    return {SKIPPED: "did not happen", NOT_REACHED: "was not reached", UNFINISHED: "did not finish"}[status]
