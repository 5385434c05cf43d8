"""AddPartitionsToTxnManager: KIP-890 part 1 on the partition leader (Kafka's ``AddPartitionsToTxnManager``).

Before a transactional produce opens a transaction on a partition (its producer has none open there), the leader
asks the transactional id's coordinator with AddPartitionsToTxn v4, ``VerifyOnly``, whether the partition is part
of the producer's ongoing transaction; a late or stray produce that would open a *hanging* transaction (one no
coordinator will ever close) is refused.  The partition's producer state holds a guard made before the request
(``ProducerStateManager.start_verification``): a marker of the producer arriving meanwhile clears it, and the
append then fails too.

Answers are mapped for the producer as Kafka does (Produce < v11): PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH,
TRANSACTION_ABORTABLE -> INVALID_TXN_STATE, a top-level CLUSTER_AUTHORIZATION_FAILED -> INVALID_TXN_STATE,
CONCURRENT_TRANSACTIONS, NETWORK_EXCEPTION (no answer), COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
(no coordinator known) and NOT_COORDINATOR -> NOT_ENOUGH_REPLICAS (retriable for every client).

When this broker is the id's coordinator the question is answered in process (``local``), in the caller's
thread; otherwise it goes over the network from a small thread pool, each pool thread on its own connection per
coordinator (``send``'s channel), so verifications of concurrent produces do not queue behind one another or
behind the markers.

Differences from Kafka: one request per produce request (Kafka batches the verifications of all producers per
coordinator node and replaces a producer's older pending verification); a verification with this broker's own
coordinator does not go over the network (Kafka sends it to itself), so request faults on AddPartitionsToTxn do
not reach it.
"""
from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping

from kafkatier.common.structs import TopicPartition
from kafkatier.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC, partition_for
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors

log = get_logger("server.add-partitions-to-txn")

VERIFY_VERSION = 4
_RETRIABLE = frozenset({Errors.CONCURRENT_TRANSACTIONS, Errors.NETWORK_EXCEPTION, Errors.COORDINATOR_LOAD_IN_PROGRESS,
                        Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR})


def produce_error(error: Errors) -> Errors:
    """A verification answer as a Produce (< v11) answers it."""
    if error == Errors.PRODUCER_FENCED:
        return Errors.INVALID_PRODUCER_EPOCH
    if error in (Errors.TRANSACTION_ABORTABLE, Errors.CLUSTER_AUTHORIZATION_FAILED):
        return Errors.INVALID_TXN_STATE
    if error in _RETRIABLE:
        return Errors.NOT_ENOUGH_REPLICAS
    return error


#: ``local(transactional_id, producer_id, producer_epoch, partitions)``: the coordinator's answers when this broker
#: coordinates the id, else None.
LocalVerify = Callable[[str, int, int, list[TopicPartition]], Mapping[TopicPartition, Errors] | None]


class AddPartitionsToTxnManager:
    def __init__(self, metadata_cache, send: Callable[[int, object, int, str], object], threads: int = 4,
                 local: LocalVerify | None = None):
        """``send(broker, request, version, channel)``: one request on the connection named ``channel``."""
        self.cache = metadata_cache
        self.send = send
        self.local = local
        self._channel = threading.local()
        slots = itertools.count()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="add-partitions-to-txn",
                                        initializer=lambda: setattr(self._channel, "name",
                                                                    f"txn-verify-{next(slots)}"))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition],
               callback: Callable[[dict[TopicPartition, Errors]], None]) -> None:
        """``callback({partition: produce error})`` once the coordinator answered (or could not be asked); at once,
        in this thread, when this broker is the coordinator."""
        if self.local is not None:
            errors = self.local(transactional_id, producer_id, producer_epoch, partitions)
            if errors is not None:
                callback({tp: produce_error(errors.get(tp, Errors.UNKNOWN_SERVER_ERROR)) for tp in partitions})
                return
        self._pool.submit(self._verify, transactional_id, producer_id, producer_epoch, partitions, callback)

    def _verify(self, transactional_id, producer_id, producer_epoch, partitions, callback) -> None:
        try:
            errors = self._ask(transactional_id, producer_id, producer_epoch, partitions)
        except Exception as e:  # noqa: BLE001 - no answer: retriable for the producer
            log.warning("transaction verification failed %s", kv(transactional_id=transactional_id, reason=e))
            errors = {tp: Errors.NETWORK_EXCEPTION for tp in partitions}
        try:
            callback({tp: produce_error(e) for tp, e in errors.items()})
        except Exception:  # noqa: BLE001 - a pool thread: nothing else would report it
            log.exception("verification callback failed %s", kv(transactional_id=transactional_id))

    def _ask(self, transactional_id, producer_id, producer_epoch, partitions) -> dict[TopicPartition, Errors]:
        parts = self.cache.topic_partitions(TRANSACTION_STATE_TOPIC)
        pm = None
        if parts:
            index = partition_for(transactional_id, len(parts))
            pm = next((p for p in parts if p.partition == index), None)
        alive = {b.id for b in self.cache.alive_brokers()}
        if pm is None or pm.leader < 0 or pm.leader not in alive:
            return {tp: Errors.COORDINATOR_NOT_AVAILABLE for tp in partitions}
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        request = build(codec.request_class(ApiKeys.ADD_PARTITIONS_TO_TXN), VERIFY_VERSION, {"transactions": [
            {"transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
             "verify_only": True, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]})
        response = self.send(pm.leader, request, VERIFY_VERSION, getattr(self._channel, "name", "txn-verify"))
        if response.error_code:
            return {tp: Errors(response.error_code) for tp in partitions}
        got = {(t.name, r.partition_index): Errors(r.partition_error_code)
               for txn in response.results_by_transaction for t in txn.topic_results for r in t.results_by_partition}
        return {tp: got.get((tp[0], tp[1]), Errors.UNKNOWN_SERVER_ERROR) for tp in partitions}
