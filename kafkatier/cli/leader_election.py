"""``kafkatier leader-election``: kafka-leader-elections (Kafka's ``LeaderElectionCommand``).

Options as Kafka's: ``--election-type preferred|unclean`` and exactly one of ``--topic`` (with ``--partition``),
``--all-topic-partitions`` or ``--path-to-json-file`` (``{"partitions":[{"topic":"foo","partition":1}]}``);
the connection options of the other commands (``--bootstrap-server`` ...; ``--admin.config`` is Kafka's name
for ``--command-config``).  Output lines are Kafka's::

    Successfully completed leader election (PREFERRED) for partitions foo-0, foo-2
    Valid replica already elected for partitions foo-1
    Error completing leader election (PREFERRED) for partition: foo-3: org.apache.kafka.common.errors.<...>: <msg>

Bad options or a bad JSON file: one line on stderr, exit 2, nothing sent.  Any partition that failed, or a
cluster that cannot be reached: exit 1.

The ElectLeaders request goes to the active controller (found with DescribeCluster); NOT_CONTROLLER answers are
retried against the controller found again, bounded by ``request.timeout.ms``.
"""
from __future__ import annotations

import argparse
import json
import sys

from kafka.protocol.admin import ElectLeadersRequest
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_exponential

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminClient, AdminError
from kafkatier.cli import common
from kafkatier.cli.main import UsageError
from kafkatier.protocol.errors import Errors

ELECTION_TYPES = {"preferred": 0, "unclean": 1}

TopicPartition = tuple[str, int]


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "leader-election", run,
                                  help="elect preferred or unclean leaders (kafka-leader-election)",
                                  description="Elect leaders for partitions, as kafka-leader-election does: the "
                                              "preferred replica, or (unclean) any live replica of a partition "
                                              "without a live leader.")
    p.add_argument("--admin.config", dest="command_config", metavar="FILE", help="same as --command-config")
    p.add_argument("--election-type", metavar="preferred|unclean",
                   help="type of election: preferred (the first assigned replica) or unclean")
    p.add_argument("--topic", help="the topic whose partition's leader is elected (with --partition)")
    p.add_argument("--partition", type=_int_arg, help="the partition of --topic")
    p.add_argument("--all-topic-partitions", action="store_true", help="elect leaders for every partition")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='JSON file: {"partitions":[{"topic":"foo","partition":1}]}')


def _int_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


# ------------------------------------------------------------------------------------------------ validation

def validate(args: argparse.Namespace) -> tuple[int, list[TopicPartition] | None]:
    """Kafka's LeaderElectionCommandOptions checks; (election type, partitions or None for all)."""
    if args.election_type is None:
        raise UsageError("Missing required option(s): election-type")
    et = ELECTION_TYPES.get(args.election_type.lower())
    if et is None:
        raise UsageError(f"Unknown election type {args.election_type!r}: expected preferred or unclean")
    given = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(given) != 1:
        raise UsageError("One and only one of the following options is required: topic, all-topic-partitions, "
                         "path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise UsageError("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise UsageError("Option partition is only allowed if topic is used")
    if args.topic is not None:
        return et, [(args.topic, args.partition)]
    if args.all_topic_partitions:
        return et, None
    return et, load_json_file(args.path_to_json_file)


def parse_partitions_json(text: str) -> list[TopicPartition]:
    """``{"partitions":[{"topic":..,"partition":..}]}``; duplicates refused (Kafka's message)."""
    try:
        js = json.loads(text)
    except ValueError:
        raise UsageError("The input string is not a valid JSON") from None
    if not isinstance(js, dict) or not isinstance(js.get("partitions"), list):
        raise UsageError("Replica election data is missing \"partitions\" field")
    out: list[TopicPartition] = []
    for i, e in enumerate(js["partitions"]):
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
                and not isinstance(e.get("partition"), bool)):
            raise UsageError(f"partitions[{i}] must be an object with a string \"topic\" and an integer "
                             f"\"partition\", found {json.dumps(e)}")
        out.append((e["topic"], e["partition"]))
    dups = sorted({tp for tp in out if out.count(tp) > 1})
    if dups:
        raise UsageError("Replica election data contains duplicate partitions: "
                         + ",".join(f"{t}-{p}" for t, p in dups))
    return out


def load_json_file(path: str) -> list[TopicPartition]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"Cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    return parse_partitions_json(text)


# ------------------------------------------------------------------------------------------------ the call

def _controller_id(admin: AdminClient) -> int:
    cid = int(admin.kafka_admin.describe_cluster().get("controller_id", -1))
    if cid < 0:
        raise AdminError.from_code(Errors.NOT_CONTROLLER, "no active controller")
    return cid


def elect_leaders(admin: AdminClient, election_type: int, partitions: list[TopicPartition] | None,
                  timeout_ms: int = 30000) -> dict[TopicPartition, AdminError | None]:
    """One ElectLeaders to the controller (again on NOT_CONTROLLER); per partition None or its error."""
    topics: dict[str, list[int]] = {}
    for t, p in partitions or []:
        topics.setdefault(t, []).append(p)
    request = ElectLeadersRequest(election_type=election_type, timeout_ms=timeout_ms, topic_partitions=None
                                  if partitions is None else [ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps)
                                                              for t, ps in topics.items()])
    results: dict[TopicPartition, AdminError | None] = {}

    def attempt() -> bool:
        response = admin.send_request(request, _controller_id(admin))
        top = int(getattr(response, "error_code", 0) or 0)
        if top:
            raise AdminError.from_code(top)
        results.clear()
        for tr in response.replica_election_results:
            for pr in tr.partition_result:
                results[(tr.topic, pr.partition_id)] = (None if pr.error_code == 0 else
                                                        AdminError.from_code(pr.error_code, pr.error_message))
        return any(e is not None and e.code == Errors.NOT_CONTROLLER for e in results.values())
    Retrying(retry=retry_if_result(bool), reraise=True, retry_error_callback=lambda state: None,
             stop=stop_after_delay(timeout_ms / 1000.0), wait=wait_exponential(multiplier=0.1, max=1.0))(attempt)
    return results


def java_exception(err: AdminError) -> str:
    try:
        name = Errors(err.code).exception_name
    except (ValueError, TypeError):
        name = f"org.apache.kafka.common.errors.{err.name}"
    return name + (f": {err.message}" if err.message else "")


def run(args: argparse.Namespace) -> int:
    election_type, partitions = validate(args)
    label = "PREFERRED" if election_type == 0 else "UNCLEAN"
    try:
        conn = common.connection_from_args(args)
        timeout_ms = int(conn.client_kwargs.get("request_timeout_ms", 30000))
        with common.open_admin(conn) as admin:
            results = elect_leaders(admin, election_type, partitions, timeout_ms)
    except (AdminError, NoReachableBrokerError) as e:
        return common.print_error("leader-election", e)
    except Exception as e:  # noqa: BLE001 - kafka-python client failures: one line, not a traceback
        return common.print_error("leader-election", e)
    order = sorted(results)
    succeeded = [tp for tp in order if results[tp] is None]
    noop = [tp for tp in order if results[tp] is not None and results[tp].code == Errors.ELECTION_NOT_NEEDED]
    failed = [tp for tp in order if results[tp] is not None and tp not in noop]
    if succeeded:
        print(f"Successfully completed leader election ({label}) for partitions "
              + ", ".join(f"{t}-{p}" for t, p in succeeded))
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(f"{t}-{p}" for t, p in noop))
    for t, p in failed:
        print(f"Error completing leader election ({label}) for partition: {t}-{p}: {java_exception(results[(t, p)])}")
    sys.stdout.flush()
    if failed:
        print(f"kafkatier leader-election: {len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0
