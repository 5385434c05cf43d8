"""What every checker shares: the Anomaly it reports and the helpers that pick entries out of a history."""
from __future__ import annotations

from typing import Callable

import attrs


@attrs.frozen
class Anomaly:
    checker: str
    type: str
    message: str
    witnesses: tuple = ()        # history entries (or their index) that show it
    accepted: str | None = None  # why Kafka accepts it (an allowed unclean election); the run stays valid

    def to_json(self) -> dict:
        out = {"checker": self.checker, "type": self.type, "message": self.message,
               "witnesses": list(self.witnesses)[:10]}
        if self.accepted:
            out["accepted"] = self.accepted
        return out


def witness(entry: dict) -> dict:
    """A compact copy of a history entry for a report (values of large polls cut)."""
    out = {k: v for k, v in entry.items() if k != "value"}
    v = entry.get("value")
    out["value"] = v if len(repr(v)) < 400 else repr(v)[:400] + "..."
    return out


Checker = Callable[[list[dict]], list[Anomaly]]



def final(entries: list[dict], f: str) -> dict:
    """The value of the last ``final`` entry ``f`` (``final-read``, ``final-remote``, ``heal``), or {}."""
    for e in reversed(entries):
        if e["process"] == "final" and e["f"] == f:
            return e.get("value") or {}
    return {}


def observations(entries: list[dict], kind: str) -> list[dict]:
    return [e for e in entries if e["process"] == "observer" and e["f"] == "observe"
            and (e.get("value") or {}).get("kind") == kind]
