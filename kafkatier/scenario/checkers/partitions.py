"""Partition invariants over every observed partition ``state`` (docs/controller.md#state-machines):

- **leader-not-in-isr**: a leader (not -1) outside the ISR;
- **isr-not-in-replicas**: an ISR member that is not an assigned replica;
- **leader-epoch-decreased**: a partition's leader epoch going down between two observations;
- **acked-all-lost**: an ``acks=all`` record acknowledged and then missing after heal (the brokers answered it
  only with the ISR at or above ``min.insync.replicas``, so no failure in a scenario may lose it -- except an
  unclean election the scenario accepts: see ``unclean``).
"""
from __future__ import annotations

from kafkatier.scenario.checkers.anomaly import Anomaly, observations, witness
from kafkatier.scenario.checkers import unclean
from kafkatier.scenario.checkers.kafka_clients import lost, send_tp_time

NAME = "partitions"


def check(entries: list[dict]) -> list[Anomaly]:
    not_in_isr, outside, decreased = [], [], []
    last: dict[tuple, dict] = {}
    for e in observations(entries, "partition"):
        v = e["value"]
        if v["leader"] >= 0 and v["leader"] not in v["isr"]:
            not_in_isr.append(e)
        if not set(v["isr"]) <= set(v["replicas"]):
            outside.append(e)
        key = (v["topic"], v["partition"])
        prev = last.get(key)
        if prev is not None and v["leader_epoch"] < prev["value"]["leader_epoch"]:
            decreased.append((prev, e))
        last[key] = e
    out = []
    if not_in_isr:
        v = not_in_isr[0]["value"]
        out.append(Anomaly(NAME, "leader-not-in-isr", f"{len(not_in_isr)} states with the leader outside the ISR, "
                           f"e.g. {v['topic']}/{v['partition']} leader {v['leader']} isr {v['isr']}",
                           tuple(witness(e) for e in not_in_isr[:5])))
    if outside:
        v = outside[0]["value"]
        out.append(Anomaly(NAME, "isr-not-in-replicas", f"{len(outside)} states with an ISR member outside the "
                           f"replicas, e.g. {v['topic']}/{v['partition']} isr {v['isr']} replicas {v['replicas']}",
                           tuple(witness(e) for e in outside[:5])))
    if decreased:
        a, b = decreased[0]
        out.append(Anomaly(NAME, "leader-epoch-decreased",
                           f"{b['value']['topic']}/{b['value']['partition']} leader epoch "
                           f"{a['value']['leader_epoch']} -> {b['value']['leader_epoch']}", (witness(a), witness(b))))
    lost_all, unseen_all = lost(entries, acks="all")
    acc = unclean.Acceptance(entries)
    gone, accepted = acc.split(lost_all + unseen_all, send_tp_time)
    if gone:
        out.append(Anomaly(NAME, "acked-all-lost", f"{len(gone)} acks=all records acknowledged and lost",
                           tuple(witness(e) for e in gone[:10])))
    if accepted:
        out.append(Anomaly(NAME, "acked-all-lost", f"{len(accepted)} acks=all records acknowledged and lost",
                           tuple(witness(e) for e in accepted[:10]),
                           accepted=acc.reason(send_tp_time(e)[0] for e in accepted)))
    return out
