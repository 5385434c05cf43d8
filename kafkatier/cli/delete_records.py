"""``kafkatier delete-records``: kafka-delete-records.

``--offset-json-file`` (alias ``--delete-offset-json-file``) holds
``{"partitions":[{"topic":"foo","partition":1,"offset":1}],"version":1}``; the output is Kafka's::

    Executing records delete operation
    Records delete operation completed:
    partition: foo-1	low_watermark: 1
    partition: foo-2	error: <ERROR_NAME>: <message>

A bad file prints one line on stderr and exits with status 2 before anything is sent
(docs/kip-107-delete-records.md#the-command-line-tool).
Partition errors are reported per line and, as in Kafka, do not change the exit status; a cluster that cannot be
reached exits 1.

The DeleteRecords requests go through kafka-python's admin client connection manager, one request per partition
leader with only that leader's partitions (Kafka 3.7.1+).  ``KafkaAdminClient.delete_records`` itself is not
used because it folds per-partition results into one exception, and the tool must print every partition's low
watermark or error; like it, partitions answered NOT_LEADER_OR_FOLLOWER (or without a leader) are retried with
fresh metadata, bounded by ``request.timeout.ms`` (default 30000, from ``--command-config``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from typing import Any, Mapping

import attrs
from kafka.protocol.admin import DeleteRecordsRequest
from tenacity import Retrying, retry_if_result, stop_after_attempt, stop_after_delay, wait_exponential

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminClient, AdminError
from kafkatier.admin.json_input import parse_versioned_object
from kafkatier.cli import common
from kafkatier.cli.main import UsageError
from kafkatier.protocol.errors import Errors

EARLIEST_VERSION = 1
RETRIABLE = frozenset({Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE})

TopicPartition = tuple[str, int]


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "delete-records", run,
                                  help="delete records below given offsets (kafka-delete-records)",
                                  description="Delete the records of partitions below the given offsets (KIP-107), "
                                              "as kafka-delete-records does: the partitions' log start offsets move "
                                              "up and the low watermarks are printed.")
    p.add_argument("--offset-json-file", "--delete-offset-json-file", dest="offset_json_file", required=True,
                   metavar="FILE",
                   help='JSON file: {"partitions":[{"topic":"foo","partition":1,"offset":1}],"version":1}; '
                        "offset -1 means up to the high watermark")


# ------------------------------------------------------------------------------------------------ the file

class OffsetJsonError(UsageError):
    """The offset JSON file is unusable (one line, exit status 2)."""


def _field(entry: Mapping[str, Any], name: str, kind: str, index: int) -> Any:
    if name not in entry:
        raise OffsetJsonError(f"No such field exists: `{name}` (partitions[{index}])")
    value = entry[name]
    ok = isinstance(value, str) if kind == "string" else (isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        raise OffsetJsonError(f"Expected `{kind}` value for `{name}` (partitions[{index}]), found {json.dumps(value)}")
    if kind == "int" and not -2 ** 31 <= value < 2 ** 31 or kind == "long" and not -2 ** 63 <= value < 2 ** 63:
        raise OffsetJsonError(f"Value {value} of `{name}` (partitions[{index}]) does not fit in a {kind}")
    return value


def parse_offset_json(text: str) -> list[tuple[TopicPartition, int]]:
    """Kafka's ``parseOffsetJsonStringWithoutDedup``: (topic-partition, offset) in file order, duplicates kept."""
    js = parse_versioned_object(text, OffsetJsonError, EARLIEST_VERSION)
    if "partitions" not in js:
        raise OffsetJsonError("Missing partitions field")
    parts = js["partitions"]
    if not isinstance(parts, list):
        raise OffsetJsonError(f"Expected `array` value for `partitions`, found {json.dumps(parts)}")
    out = []
    for i, entry in enumerate(parts):
        if not isinstance(entry, dict):
            raise OffsetJsonError(f"Expected `object` value for partitions[{i}], found {json.dumps(entry)}")
        tp = (_field(entry, "topic", "string", i), _field(entry, "partition", "int", i))
        out.append((tp, _field(entry, "offset", "long", i)))
    return out


def dedup(entries: list[tuple[TopicPartition, int]]) -> dict[TopicPartition, int]:
    """The offsets by topic-partition; duplicates are refused with Kafka's message."""
    seen: dict[TopicPartition, int] = {}
    dups: list[TopicPartition] = []
    for tp, off in entries:
        if tp in seen and tp not in dups:
            dups.append(tp)
        seen[tp] = off
    if dups:
        raise OffsetJsonError("Offset json file contains duplicate topic partitions: "
                              + ",".join(f"{t}-{p}" for t, p in dups))
    return seen


def load_offset_json_file(path: str) -> dict[TopicPartition, int]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise OffsetJsonError(f"Cannot read offset json file {path}: {getattr(e, 'strerror', None) or e}") from None
    return dedup(parse_offset_json(text))


# ------------------------------------------------------------------------------------------------ the call

@attrs.frozen
class PartitionResult:
    """A partition's outcome: the low watermark, or the error (Kafka name and message)."""

    low_watermark: int = -1
    error: AdminError | None = None


def _leaders(admin: AdminClient, topics: list[str]) -> dict[TopicPartition, int]:
    """Partition -> leader id (-1 without a leader); partitions of unknown topics are absent."""
    out: dict[TopicPartition, int] = {}
    for t in admin.kafka_admin.describe_topics(topics):
        if int(t.get("error_code") or 0) == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            continue
        for p in t.get("partitions") or ():
            out[(t["name"], int(p["partition_index"]))] = int(p["leader_id"])
    return out


def delete_records(admin: AdminClient, offsets: Mapping[TopicPartition, int], timeout_ms: int = 30000
                   ) -> dict[TopicPartition, PartitionResult]:
    """Send DeleteRecords to each partition's leader; per partition, the low watermark or the error."""
    results: dict[TopicPartition, PartitionResult] = {}
    pending = dict(offsets)
    deadline = time.monotonic() + timeout_ms / 1000.0

    def round_() -> dict:
        leaders = _leaders(admin, sorted({t for t, _ in pending}))
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in list(pending):
            leader = leaders.get(tp)
            if leader is None:
                results[tp] = PartitionResult(error=AdminError.from_code(Errors.UNKNOWN_TOPIC_OR_PARTITION))
                pending.pop(tp)
            elif leader < 0:
                results[tp] = PartitionResult(error=AdminError.from_code(Errors.LEADER_NOT_AVAILABLE))
            else:
                by_leader[leader].append(tp)
        remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
        for leader, tps in sorted(by_leader.items()):
            topics: dict[str, list] = defaultdict(list)
            for t, p in tps:
                topics[t].append(DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
                    partition_index=p, offset=pending[(t, p)]))
            request = DeleteRecordsRequest(topics=[DeleteRecordsRequest.DeleteRecordsTopic(name=t, partitions=ps)
                                                   for t, ps in topics.items()], timeout_ms=remaining_ms)
            response = admin.send_request(request, leader)
            answered = set()
            for tr in response.topics:
                for pr in tr.partitions:
                    tp = (tr.name, pr.partition_index)
                    if tp not in pending or tp in answered:
                        continue
                    answered.add(tp)
                    if pr.error_code == 0:
                        results[tp] = PartitionResult(low_watermark=pr.low_watermark)
                        pending.pop(tp)
                    else:
                        results[tp] = PartitionResult(error=AdminError.from_code(pr.error_code))
                        if pr.error_code not in RETRIABLE:
                            pending.pop(tp)
            for tp in tps:
                if tp not in answered:
                    results[tp] = PartitionResult(error=AdminError(
                        "UNKNOWN_SERVER_ERROR", f"The response from broker {leader} did not contain a result for "
                                                f"topic partition {tp[0]}-{tp[1]}"))
                    pending.pop(tp, None)
        return pending

    retrying = Retrying(retry=retry_if_result(bool), reraise=True, retry_error_callback=lambda state: None,
                        stop=stop_after_attempt(20) | stop_after_delay(timeout_ms / 1000.0),
                        wait=wait_exponential(multiplier=0.1, max=1.0))
    retrying(round_)
    return {tp: results[tp] for tp in offsets}


def run(args: argparse.Namespace) -> int:
    offsets = load_offset_json_file(args.offset_json_file)
    try:
        conn = common.connection_from_args(args)
        timeout_ms = int(conn.client_kwargs.get("request_timeout_ms", 30000))
        with common.open_admin(conn) as admin:
            print("Executing records delete operation", flush=True)
            results = delete_records(admin, offsets, timeout_ms)
    except (AdminError, NoReachableBrokerError) as e:
        return common.print_error("delete-records", e)
    except UsageError:  # a bad address is bad input: exit 2
        raise
    except Exception as e:  # noqa: BLE001 - kafka-python client failures: one line, not a traceback
        return common.print_error("delete-records", e)
    print("Records delete operation completed:")
    for (t, p), r in results.items():
        if r.error is None:
            print(f"partition: {t}-{p}\tlow_watermark: {r.low_watermark}")
        else:
            print(f"partition: {t}-{p}\terror: {r.error}")
    sys.stdout.flush()
    return 0
