"""``kafkatier transactions``: kafka-transactions.sh (KIP-664) over ListTransactions, DescribeTransactions and
DescribeProducers.

- ``list [--duration-filter MS]``: every broker's transactions -- TransactionalId, Coordinator, ProducerId,
  TransactionState;
- ``describe --transactional-id ID``: CoordinatorId, TransactionalId, ProducerId, ProducerEpoch,
  TransactionState, TransactionTimeoutMs, CurrentTransactionStartTimeMs, TransactionDurationMs, TopicPartitions
  (``None`` when no transaction is open);
- ``describe-producers --topic T --partition P [--broker-id N]``: ProducerId, ProducerEpoch,
  LatestCoordinatorEpoch, LastSequence, LastTimestamp, CurrentTransactionStartOffset (``None`` when none), from
  the partition leader or the given replica.

- ``find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MIN]``: open transactions
  older than the timeout (default 15 minutes) that no coordinator knows of -- no transactional id lists the
  producer, or the producer's transaction does not hold the partition: Topic, Partition, ProducerId,
  ProducerEpoch, CoordinatorEpoch, StartOffset, LastTimestamp, Duration(min);
- ``abort --topic T --partition P (--start-offset N | --producer-id ID --producer-epoch E --coordinator-epoch C)``:
  write an ABORT marker for the producer whose open transaction starts at N (with the epochs DescribeProducers
  shows, as kafka-transactions.sh) or for the given producer (WriteTxnMarkers to the leader; needs ALTER or
  CLUSTER_ACTION on the cluster).

Tables are Kafka's ``ToolsUtils.prettyPrintTable``: each cell padded to its column's width, followed by a tab.
Errors print ``kafkatier transactions: NAME: message`` and exit 1.
"""
from __future__ import annotations

import argparse
import time

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminError, error_name
from kafkatier.cli import common
from kafkatier.cli.main import UsageError
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.coordinator_type import CoordinatorType


def register(subparsers) -> None:
    p = common.add_client_command(subparsers, "transactions", run,
                                  help="list and describe transactions and producers (kafka-transactions)",
                                  description="Transactions as kafka-transactions.sh shows them: list, describe, "
                                              "describe-producers.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = sub.add_parser("list", help="list transactions on every broker")
    lst.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                     help="only transactions running longer than this")
    desc = sub.add_parser("describe", help="describe one transactional id")
    desc.add_argument("--transactional-id", required=True)
    prod = sub.add_parser("describe-producers", help="the active producers of one partition")
    prod.add_argument("--topic", required=True)
    prod.add_argument("--partition", type=int, required=True)
    prod.add_argument("--broker-id", type=int, help="ask this replica instead of the leader")
    hang = sub.add_parser("find-hanging", help="open transactions no coordinator knows of")
    hang.add_argument("--broker-id", type=int, help="the partitions this broker hosts")
    hang.add_argument("--topic")
    hang.add_argument("--partition", type=int)
    hang.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MIN",
                      help="only transactions open longer than this many minutes (default 15)")
    abort = sub.add_parser("abort", help="abort the open transaction starting at an offset")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="the first offset of the open transaction")
    abort.add_argument("--producer-id", type=int, help="instead of --start-offset: the producer ...")
    abort.add_argument("--producer-epoch", type=int, help="... its epoch ...")
    abort.add_argument("--coordinator-epoch", type=int, help="... and the coordinator epoch of the marker")


def pretty_print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [headers] + rows:
        print("".join(cell.ljust(w) + "\t" for cell, w in zip(row, widths)))


def run(args: argparse.Namespace) -> int:
    try:
        conn = common.connection_from_args(args)
        with common.open_admin(conn) as admin:
            if args.action == "list":
                return _list(admin, args.duration_filter)
            if args.action == "describe":
                return _describe(admin, args.transactional_id)
            if args.action == "find-hanging":
                return _find_hanging(admin, args.broker_id, args.topic, args.partition, args.max_transaction_timeout)
            if args.action == "abort":
                return _abort(admin, args.topic, args.partition, args.start_offset,
                              (args.producer_id, args.producer_epoch, args.coordinator_epoch))
            return _describe_producers(admin, args.topic, args.partition, args.broker_id)
    except (AdminError, NoReachableBrokerError) as e:
        return common.print_error("transactions", e)


def _request(api_key: int, version: int, body: dict):
    return build(codec.request_class(api_key), version, body)


def _list(admin, duration_filter: int) -> int:
    rows = []
    for broker in sorted(admin.broker_ids()):
        r = admin.send_request(_request(ApiKeys.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [],
                                                              "duration_filter": duration_filter}), broker)
        if r.error_code:
            raise AdminError.from_code(r.error_code, f"ListTransactions on broker {broker}")
        rows += [[t.transactional_id, str(broker), str(t.producer_id), t.transaction_state]
                 for t in r.transaction_states]
    pretty_print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


def _coordinator(admin, transactional_id: str) -> int:
    r = admin.send_request(_request(ApiKeys.FIND_COORDINATOR, 4, {"key_type": CoordinatorType.TRANSACTION,
                                                          "coordinator_keys": [transactional_id]}))
    c = r.coordinators[0]
    if c.error_code:
        raise AdminError.from_code(c.error_code, c.error_message)
    return c.node_id


def _describe(admin, transactional_id: str) -> int:
    node = _coordinator(admin, transactional_id)
    r = admin.send_request(_request(ApiKeys.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]}), node)
    t = r.transaction_states[0]
    if t.error_code:
        raise AdminError.from_code(t.error_code, f"transactional id {transactional_id}")
    now = int(time.time() * 1000)
    start = t.transaction_start_time_ms
    partitions = ",".join(f"{d.topic}-{p}" for d in t.topics for p in d.partitions)
    pretty_print_table(
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
        [[str(node), t.transactional_id, str(t.producer_id), str(t.producer_epoch), t.transaction_state,
          str(t.transaction_timeout_ms), "None" if start < 0 else str(start),
          "None" if start < 0 else str(now - start), partitions]])
    return 0


def _leader(admin, topic: str, partition: int) -> int:
    info = next((t for t in admin.describe_topics([topic]) if t.name == topic), None)
    leader = next((p.leader for p in info.partitions if p.partition == partition), -1) if info else -1
    if leader < 0:
        raise AdminError.from_code(3 if info is None else 6, f"{topic}-{partition}")
    return leader


def _producers(admin, broker_id: int, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], list]:
    """DescribeProducers of ``partitions`` on ``broker_id``; raises for the first partition error."""
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    r = admin.send_request(_request(ApiKeys.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": t, "partition_indexes": ps} for t, ps in topics.items()]}), broker_id)
    out = {}
    for t in r.topics:
        for p in t.partitions:
            if p.error_code:
                raise AdminError(error_name(p.error_code), p.error_message or f"{t.name}-{p.partition_index}",
                                 p.error_code)
            out[(t.name, p.partition_index)] = list(p.active_producers)
    return out


def _find_hanging(admin, broker_id: int | None, topic: str | None, partition: int | None, max_minutes: int) -> int:
    if (broker_id is None) == (topic is None):
        raise UsageError("give exactly one of --broker-id and --topic")
    if partition is not None and topic is None:
        raise UsageError("--partition needs --topic")
    if max_minutes < 0:
        raise UsageError("--max-transaction-timeout must not be negative")
    wanted_topics = [topic] if topic is not None else None
    by_broker: dict[int, list[tuple[str, int]]] = {}
    for info in admin.describe_topics(wanted_topics):
        for p in info.partitions:
            if partition is not None and p.partition != partition:
                continue
            if broker_id is not None and broker_id not in p.replicas:
                continue
            target = broker_id if broker_id is not None else p.leader
            if target >= 0:
                by_broker.setdefault(target, []).append((info.name, p.partition))
    now = int(time.time() * 1000)
    candidates = []
    for broker, parts in sorted(by_broker.items()):
        for tp, producers in sorted(_producers(admin, broker, parts).items()):
            for a in producers:
                if a.current_txn_start_offset >= 0 and now - a.last_timestamp > max_minutes * 60000:
                    candidates.append((tp, a))
    known: dict[int, tuple[str, set]] = {}       # producer id -> (transactional id, its partitions)
    if candidates:
        pids = {a.producer_id for _, a in candidates}
        for b in sorted(admin.broker_ids()):
            r = admin.send_request(_request(ApiKeys.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters":
                                                                   sorted(pids), "duration_filter": -1}), b)
            for t in r.transaction_states:
                known[t.producer_id] = (t.transactional_id, set())
        for pid, (tid, parts) in known.items():
            try:
                node = _coordinator(admin, tid)
                d = admin.send_request(_request(ApiKeys.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}), node)
                st = d.transaction_states[0]
                if st.error_code == 0 and st.producer_id == pid:
                    parts.update((t.topic, p) for t in st.topics for p in t.partitions)
            except AdminError:
                pass     # cannot describe it: counted as hanging, as Kafka's tool does
    rows = []
    for (t, p), a in candidates:
        entry = known.get(a.producer_id)
        if entry is not None and (t, p) in entry[1]:
            continue     # its coordinator knows the transaction holds this partition: not hanging
        rows.append([t, str(p), str(a.producer_id), str(a.producer_epoch), str(a.coordinator_epoch),
                     str(a.current_txn_start_offset), str(a.last_timestamp),
                     str((now - a.last_timestamp) // 60000)])
    pretty_print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)"], rows)
    return 0


def _abort(admin, topic: str, partition: int, start_offset: int | None,
           producer: tuple[int | None, int | None, int | None]) -> int:
    given = [x is not None for x in producer]
    if (any(given) if start_offset is not None else not all(given)):
        raise UsageError("give --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch")
    leader = _leader(admin, topic, partition)
    if start_offset is not None:
        producers = _producers(admin, leader, [(topic, partition)])[(topic, partition)]
        match = [a for a in producers if a.current_txn_start_offset == start_offset]
        if not match:
            return common.print_error("transactions", f"Could not find any open transactions starting at offset "
                                                      f"{start_offset} on partition {topic}-{partition}")
        a = match[0]
        pid, epoch, coordinator_epoch = a.producer_id, a.producer_epoch, max(a.coordinator_epoch, 0)
    else:
        pid, epoch, coordinator_epoch = producer
    r = admin.send_request(_request(ApiKeys.WRITE_TXN_MARKERS, 1, {"markers": [
        {"producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
         "coordinator_epoch": coordinator_epoch, "topics": [{"name": topic, "partition_indexes": [partition]}]}]}),
        leader)
    code = r.markers[0].topics[0].partitions[0].error_code
    if code:
        raise AdminError.from_code(code, f"aborting producer {pid}'s transaction on {topic}-{partition}")
    print(f"Aborted the transaction of producer {pid} (epoch {epoch}) on {topic}-{partition}")
    return 0


def _describe_producers(admin, topic: str, partition: int, broker_id: int | None) -> int:
    if broker_id is None:
        broker_id = _leader(admin, topic, partition)
    producers = _producers(admin, broker_id, [(topic, partition)])[(topic, partition)]
    pretty_print_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                        "CurrentTransactionStartOffset"],
                       [[str(a.producer_id), str(a.producer_epoch), str(a.coordinator_epoch), str(a.last_sequence),
                         str(a.last_timestamp),
                         "None" if a.current_txn_start_offset < 0 else str(a.current_txn_start_offset)]
                        for a in producers])
    return 0
