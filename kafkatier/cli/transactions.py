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

Tables are Kafka's ``ToolsUtils.prettyPrintTable``: each cell padded to its column's width, followed by a tab.
Errors print ``kafkatier transactions: NAME: message`` and exit 1.  Not built yet: ``find-hanging`` and
``abort``.
"""
from __future__ import annotations

import argparse
import time

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.admin.client import AdminError, error_name
from kafkatier.cli import common
from kafkatier.protocol import codec
from kafkatier.protocol.build import build

FIND_COORDINATOR, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 10, 61, 65, 66
TRANSACTION_KEY_TYPE = 1


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "transactions", help="list and describe transactions and producers (kafka-transactions)",
        description="Transactions as kafka-transactions.sh shows them: list, describe, describe-producers.")
    common.add_connection_options(p)
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    lst = sub.add_parser("list", help="list transactions on every broker")
    lst.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                     help="only transactions running longer than this")
    desc = sub.add_parser("describe", help="describe one transactional id")
    desc.add_argument("--transactional-id", required=True)
    prod = sub.add_parser("describe-producers", help="the active producers of one partition")
    prod.add_argument("--topic", required=True)
    prod.add_argument("--partition", type=int, required=True)
    prod.add_argument("--broker-id", type=int, help="ask this replica instead of the leader")
    p.set_defaults(func=run)


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
            return _describe_producers(admin, args.topic, args.partition, args.broker_id)
    except (AdminError, NoReachableBrokerError) as e:
        return common.print_error("transactions", e)


def _request(api_key: int, version: int, body: dict):
    return build(codec.request_class(api_key), version, body)


def _list(admin, duration_filter: int) -> int:
    rows = []
    for broker in sorted(admin.broker_ids()):
        r = admin.send_request(_request(LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [],
                                                              "duration_filter": duration_filter}), broker)
        if r.error_code:
            raise AdminError.from_code(r.error_code, f"ListTransactions on broker {broker}")
        rows += [[t.transactional_id, str(broker), str(t.producer_id), t.transaction_state]
                 for t in r.transaction_states]
    pretty_print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


def _coordinator(admin, transactional_id: str) -> int:
    r = admin.send_request(_request(FIND_COORDINATOR, 4, {"key_type": TRANSACTION_KEY_TYPE,
                                                          "coordinator_keys": [transactional_id]}))
    c = r.coordinators[0]
    if c.error_code:
        raise AdminError.from_code(c.error_code, c.error_message)
    return c.node_id


def _describe(admin, transactional_id: str) -> int:
    node = _coordinator(admin, transactional_id)
    r = admin.send_request(_request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]}), node)
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


def _describe_producers(admin, topic: str, partition: int, broker_id: int | None) -> int:
    if broker_id is None:
        info = next((t for t in admin.describe_topics([topic]) if t.name == topic), None)
        leader = next((p.leader for p in info.partitions if p.partition == partition), -1) if info else -1
        if leader < 0:
            raise AdminError.from_code(3 if info is None else 6, f"{topic}-{partition}")
        broker_id = leader
    r = admin.send_request(_request(DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": topic, "partition_indexes": [partition]}]}), broker_id)
    p = r.topics[0].partitions[0]
    if p.error_code:
        raise AdminError(error_name(p.error_code), p.error_message or f"{topic}-{partition}", p.error_code)
    pretty_print_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                        "CurrentTransactionStartOffset"],
                       [[str(a.producer_id), str(a.producer_epoch), str(a.coordinator_epoch), str(a.last_sequence),
                         str(a.last_timestamp),
                         "None" if a.current_txn_start_offset < 0 else str(a.current_txn_start_offset)]
                        for a in p.active_producers])
    return 0
