"""Request faults on the control channel (LeaderAndIsr, StopReplica, UpdateMetadata): what
``server/control_request_handler.py`` does with the broker's :class:`~kafkatier.server.fault_injection.FaultRegistry`.

An injected error answers the whole request (top-level and every partition's code, as Kafka fills both when it
refuses a request) without applying it, or takes the faulted partitions out of the body, applies the rest and
adds their codes to the answer.  A dropped answer applies the request; the handler then removes the request
znode instead of answering (see its module docstring).
"""
from __future__ import annotations

from typing import Callable, Mapping

from kafkatier.common.structs import TopicPartition
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.server.fault_injection import (FaultRegistry,
                                              control_request_partitions)


def apply_control_faults(registry: FaultRegistry | None, api_key: int, body: dict,
                         handle: Callable[[dict], dict]) -> tuple[dict | None, bool]:
    """Run a control request body through the registry: ``(answer body, dropped)``.

    ``handle(body)`` applies a body.  A whole-request error answers without applying; partition errors take
    those partitions out of the body, apply the rest and add the partitions' errors to the answer; a dropped
    response applies the body and returns ``(body, True)``: the caller does not answer."""
    if registry is None or not registry.has_faults(api_key):
        return handle(body), False
    action = registry.take(api_key, lambda: control_request_partitions(body))
    if action.error is not None:
        answer = control_error_body(api_key, body, action.error)
    elif action.partition_errors:
        kept = _without_partitions(body, action.partition_errors)
        answer = handle(kept) if control_request_partitions(kept) else {"error_code": 0}
        answer = _add_control_partition_errors(api_key, body, dict(answer), action.partition_errors)
    else:
        answer = handle(body)
    return answer, action.drop_response


def control_error_body(api_key: int, body: Mapping, code: int) -> dict:
    """A LeaderAndIsr / StopReplica / UpdateMetadata answer with ``code`` at the top level and for every
    partition (Kafka fills both when it refuses a whole request)."""
    if api_key == ApiKeys.STOP_REPLICA:
        return {"error_code": code, "partition_errors": [
            {"topic_name": tp.topic, "partition_index": tp.partition, "error_code": code}
            for tp in control_request_partitions(body)]}
    if api_key == ApiKeys.LEADER_AND_ISR:
        return _add_control_partition_errors(api_key, body, {"error_code": code, "topics": []},
                                             {tp: code for tp in control_request_partitions(body)})
    return {"error_code": code}


def _without_partitions(body: Mapping, drop: Mapping[TopicPartition, int]) -> dict:
    out = dict(body)
    topics = []
    for t in body.get("topic_states") or []:
        parts = [p for p in t.get("partition_states") or []
                 if TopicPartition(t.get("topic_name"), p.get("partition_index")) not in drop]
        if parts:
            topics.append(dict(t, partition_states=parts))
    out["topic_states"] = topics
    if "ungrouped_partition_states" in body:
        out["ungrouped_partition_states"] = [
            p for p in body["ungrouped_partition_states"]
            if TopicPartition(p.get("topic_name"), p.get("partition_index")) not in drop]
    return out


def _add_control_partition_errors(api_key: int, body: Mapping, answer: dict,
                                  errors: Mapping[TopicPartition, int]) -> dict:
    if api_key == ApiKeys.STOP_REPLICA:
        entries = [e for e in answer.get("partition_errors") or []
                   if TopicPartition(e["topic_name"], e["partition_index"]) not in errors]
        entries += [{"topic_name": tp.topic, "partition_index": tp.partition, "error_code": code}
                    for tp, code in errors.items()]
        answer["partition_errors"] = entries
        return answer
    # LeaderAndIsr v5+: per topic (with its id); older versions: a flat list.
    ids = {t.get("topic_name"): t.get("topic_id") for t in body.get("topic_states") or []}
    if "partition_errors" in answer and "topics" not in answer:
        entries = [e for e in answer["partition_errors"]
                   if TopicPartition(e.get("topic_name"), e["partition_index"]) not in errors]
        entries += [{"topic_name": tp.topic, "partition_index": tp.partition, "error_code": code}
                    for tp, code in errors.items()]
        answer["partition_errors"] = entries
        return answer
    topics = [dict(t) for t in answer.get("topics") or []]
    for tp, code in errors.items():   # v5+ names a topic by its id only
        topic = next((t for t in topics if t.get("topic_id") == ids.get(tp.topic)), None)
        if topic is None:
            topic = {"topic_id": ids.get(tp.topic), "partition_errors": []}
            topics.append(topic)
        topic["partition_errors"] = [e for e in topic.get("partition_errors") or []
                                     if e["partition_index"] != tp.partition]
        topic["partition_errors"].append({"partition_index": tp.partition, "error_code": code})
    answer["topics"] = topics
    return answer


__all__ = ["apply_control_faults", "control_error_body"]
