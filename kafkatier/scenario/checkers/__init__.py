"""Checkers: each reads a run's history (``history.jsonl`` entries, heal and final reads included) and returns
the anomalies it finds, each with the history entries that witness it.

| module | checks |
|---|---|
| ``kafka_clients`` | Jepsen's Kafka anomalies: lost-write, unseen, duplicate, inconsistent-offsets, nonmonotonic-poll, poll-skip |
| ``controller`` | one controller per epoch, epochs strictly increasing per tenure, no leader election written from a fenced controller epoch |
| ``partitions`` | leader in ISR, ISR within replicas, leader epoch monotonic, no acknowledged acks=all record lost |
| ``tiered`` | KIP-950: tiered epoch monotonic, only ENABLED->DISABLING->DISABLED->ENABLED (and DISABLED->DISABLING), no DISABLING left after heal, no remote data left of a delete-disabled topic or an old epoch below the log start |
| ``delete_records`` | KIP-107: nothing below an acknowledged low watermark served or reported as log start, across restarts |
| ``transactions`` | Jepsen's transactional anomalies: aborted-read (G1a), precommitted-read, read-past-lso, torn-transaction, lost-write, duplicate, zombie-committed |
| ``ctp`` | a consume-transform-produce job's exactly-once: duplicate-output, lost-input (committed offsets ahead of the committed output), phantom-output, aborted-output-read, precommitted-output-read, offset-regressed, not-drained |
| ``unclean`` | no unclean leader election unless the scenario accepts its loss; dates each one, so the checkers above report the loss it causes as *accepted* (``Anomaly.accepted``: the reason) rather than as an anomaly |
| ``log_dirs`` | KIP-113: one current dir per replica, no ``.move`` / ``.delete`` left after heal, moved replicas hold the same batches (offsets, CRCs) as the others |
| ``compaction`` | compacted topics: the latest acknowledged value of every key readable after heal, none shadowed by an older one, the cleaner did run |
"""
from __future__ import annotations

from typing import Iterable

from kafkatier.scenario.checkers import (compaction, controller, ctp, delete_records, kafka_clients, log_dirs,
                                         partitions, tiered, transactions, unclean)
from kafkatier.scenario.checkers.anomaly import Anomaly, Checker, final, observations, witness

__all__ = ["Anomaly", "Checker", "check_all", "checkers", "final", "observations", "witness"]


def checkers() -> dict[str, Checker]:
    return {"kafka_clients": kafka_clients.check, "controller": controller.check, "partitions": partitions.check,
            "tiered": tiered.check, "delete_records": delete_records.check, "log_dirs": log_dirs.check,
            "unclean": unclean.check, "transactions": transactions.check, "compaction": compaction.check,
            "ctp": ctp.check}


def check_all(entries: Iterable[dict]) -> list[Anomaly]:
    """Every checker's anomalies, accepted ones (``accepted`` set) included: see :func:`split`."""
    entries = list(entries)
    out: list[Anomaly] = []
    for name, fn in checkers().items():
        try:
            out.extend(fn(entries))
        except Exception as e:  # noqa: BLE001 - a checker crash is itself reported, never hidden
            out.append(Anomaly(name, "checker-crashed", f"{name} checker failed: {e!r}"))
    return out


def split(anomalies: Iterable[Anomaly]) -> tuple[list[Anomaly], list[Anomaly]]:
    """``(anomalies, accepted)``: what makes a run invalid, and what Kafka accepts (reported, not failing)."""
    anomalies = list(anomalies)
    return [a for a in anomalies if not a.accepted], [a for a in anomalies if a.accepted]

