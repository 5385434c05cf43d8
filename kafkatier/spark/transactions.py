"""The driver's side of exactly-once writes: transactions the tasks opened, ended by the driver over the Kafka
protocol (Flink's ``KafkaCommitter`` resuming a ``FlinkKafkaInternalProducer`` by producer id and epoch).

librdkafka cannot resume another client's transaction, so the driver speaks the protocol itself (kafka-python's
connection manager through :class:`kafkatier.admin.client.AdminClient`): FindCoordinator(TRANSACTION) for each
transactional id, then

* before any task runs, InitProducerId for ``<prefix>-0-0`` (:meth:`TransactionEnder.check`): the coordinator
  is reachable and the transaction timeout is within the brokers' ``transaction.max.timeout.ms``;
* on ``commit()``, DescribeTransactions of every task's id (each must still be Ongoing with the task's producer id
  and epoch, or nothing is committed), then EndTxn(commit) for each, then waiting until each is CompleteCommit
  (the markers written, so a read_committed reader that starts next sees every row);
* on ``abort()``, EndTxn(abort) for the tasks that reported a transaction;
* after either, InitProducerId (fencing, which aborts) for every other id of the job whose transaction is still
  open (:meth:`TransactionEnder.fence_open`): a failed or speculative attempt's, a previous run's.  The ids'
  states come from one FindCoordinator and one DescribeTransactions per coordinator, whatever their number.

The coordinator checks only the transactional id, producer id and epoch of an EndTxn, not which connection it
comes from (as Kafka's ``TransactionCoordinator.handleEndTransaction``).
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

import attrs
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from kafkatier.admin.client import AdminClient, AdminError
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.coordinator_type import CoordinatorType
from kafkatier.protocol.errors import Errors

log = get_logger("spark.transactions")

# Ask again: the coordinator moved, is loading, or a transition of this id is still being written.
RETRIABLE = frozenset({Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS,
                       Errors.CONCURRENT_TRANSACTIONS, Errors.NETWORK_EXCEPTION, Errors.REQUEST_TIMED_OUT})
FENCED = frozenset({Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH, Errors.INVALID_PRODUCER_ID_MAPPING})
OPEN_STATES = frozenset({"Ongoing", "PrepareAbort", "PrepareCommit"})

# librdkafka security settings -> kafka-python's keyword arguments.
_SECURITY = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
             "sasl.mechanisms": "sasl_mechanism", "sasl.username": "sasl_plain_username",
             "sasl.password": "sasl_plain_password", "ssl.ca.location": "ssl_cafile",
             "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile",
             "ssl.key.password": "ssl_password"}


class TransactionError(RuntimeError):
    """A transaction of the job could not be checked, committed or aborted."""


@attrs.frozen
class TaskTransaction:
    """One task's open transaction, as its commit message reports it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def _retriable(e: BaseException) -> bool:
    return (isinstance(e, AdminError) and (e.retriable or e.code in RETRIABLE)) or isinstance(e, _Retry)


class _Retry(Exception):
    pass


def client_kwargs(producer_config: Mapping[str, str]) -> dict:
    out = {_SECURITY[k]: v for k, v in producer_config.items() if k in _SECURITY}
    if "security_protocol" in out:
        out["security_protocol"] = str(out["security_protocol"]).upper()
    return out


class TransactionEnder:
    """Ends (or fences) the tasks' transactions from the driver; use as a context manager."""

    def __init__(self, producer_config: Mapping[str, str], timeout_s: float):
        self.timeout_s = timeout_s
        servers = producer_config["bootstrap.servers"].split(",")
        try:
            self.admin = AdminClient(servers, client_kwargs=client_kwargs(producer_config),
                                     request_timeout_ms=int(min(timeout_s, 30) * 1000),
                                     bootstrap_timeout_ms=int(timeout_s * 1000))
        except Exception as e:  # noqa: BLE001 - NoReachableBrokerError, AdminError: one message
            raise TransactionError(f"cannot reach the Kafka brokers at {producer_config['bootstrap.servers']}: "
                                   f"{e}") from None
        self._coordinators: dict[str, int] = {}

    def __enter__(self) -> TransactionEnder:
        return self

    def __exit__(self, *exc) -> None:
        self.admin.close()

    # --- plumbing -----------------------------------------------------------------------------------------
    def _retrying(self) -> Retrying:
        return Retrying(stop=stop_after_delay(self.timeout_s), wait=wait_exponential(multiplier=0.05, max=1.0),
                        retry=retry_if_exception(_retriable), reraise=True)

    def _send(self, api_key: int, version: int, body: dict, node: int | None = None):
        try:
            return self.admin.send_request(build(codec.request_class(api_key), version, body), node)
        except AdminError:
            raise
        except Exception as e:  # noqa: BLE001 - kafka-python connection errors: ask again
            if node is not None:
                # a coordinator that cannot be reached (killed, or gone from the metadata) is found again, as
                # Kafka's clients mark the coordinator unknown on a disconnect: not asked again until the deadline
                self._coordinators = {t: n for t, n in self._coordinators.items() if n != node}
            raise _Retry(str(e)) from e

    def coordinator(self, transactional_id: str) -> int:
        return self.locate([transactional_id])[transactional_id]

    def locate(self, transactional_ids: Iterable[str]) -> dict[str, int]:
        """The coordinator of each id: one FindCoordinator (v4 takes many keys) for the ids not known yet."""
        ids = list(dict.fromkeys(transactional_ids))
        unknown = [t for t in ids if t not in self._coordinators]
        if unknown:
            r = self._send(ApiKeys.FIND_COORDINATOR, 4, {"key_type": CoordinatorType.TRANSACTION,
                                                 "coordinator_keys": unknown})
            for c in r.coordinators:
                if c.error_code:
                    raise AdminError.from_code(c.error_code, c.error_message)
                self._coordinators[c.key] = c.node_id
        return {t: self._coordinators[t] for t in ids}

    def _call(self, transactional_id: str, api_key: int, version: int, body: dict):
        """One request to the id's coordinator; a top-level error code raises (coordinator errors re-find)."""
        def attempt():
            node = self.coordinator(transactional_id)
            r = self._send(api_key, version, body, node)
            code = getattr(r, "error_code", 0)
            if code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
                self._coordinators.pop(transactional_id, None)
            if code:
                raise AdminError.from_code(code, f"transactional id {transactional_id}")
            return r
        return self._retrying()(attempt)

    # --- operations ---------------------------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
        """InitProducerId: fences the id's current producer (aborting its open transaction); retried while the
        fencing abort completes (CONCURRENT_TRANSACTIONS)."""
        r = self._call(transactional_id, ApiKeys.INIT_PRODUCER_ID, 4, {
            "transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms,
            "producer_id": -1, "producer_epoch": -1})
        return r.producer_id, r.producer_epoch

    def describe_many(self, transactional_ids: Iterable[str]) -> dict:
        """Each id's DescribeTransactions state, None for an id the coordinators do not know; one request per
        coordinator."""
        ids = list(dict.fromkeys(transactional_ids))

        def attempt():
            by_node: dict[int, list[str]] = {}
            for tid, node in self.locate(ids).items():
                by_node.setdefault(node, []).append(tid)
            out = {}
            for node, group in by_node.items():
                r = self._send(ApiKeys.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": group}, node)
                for t in r.transaction_states:
                    if t.error_code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
                        self._coordinators.pop(t.transactional_id, None)
                    if t.error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND:
                        out[t.transactional_id] = None
                    elif t.error_code:
                        raise AdminError.from_code(t.error_code, f"transactional id {t.transactional_id}")
                    else:
                        out[t.transactional_id] = t
            return out
        return self._retrying()(attempt)

    def end_txn(self, txn: TaskTransaction, commit: bool) -> None:
        self._call(txn.transactional_id, ApiKeys.END_TXN, 3, {
            "transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch, "committed": commit})

    def check(self, transactional_id: str, timeout_ms: int) -> None:
        """Before any task: the coordinator answers and accepts the timeout."""
        try:
            self.init_producer_id(transactional_id, timeout_ms)
        except AdminError as e:
            hint = (f" (kafka.transaction.timeout.ms={timeout_ms} is above the brokers' "
                    "transaction.max.timeout.ms: lower it)") if e.code == Errors.INVALID_TRANSACTION_TIMEOUT else ""
            raise TransactionError(f"exactlyOnce: the transaction coordinator refused {transactional_id!r}: "
                                   f"{e}{hint}") from None
        except _Retry as e:
            raise TransactionError(f"exactlyOnce: no transaction coordinator answered for {transactional_id!r} "
                                   f"within {self.timeout_s:g} s: {e}") from None

    def commit_all(self, txns: list[TaskTransaction]) -> None:
        """Every transaction still open with the task's producer id and epoch, or none is committed; then
        EndTxn(commit) for each, then wait until each is CompleteCommit."""
        states = self.describe_many(t.transactional_id for t in txns)
        for t in txns:
            d = states[t.transactional_id]
            if d is None:
                raise TransactionError(f"exactlyOnce: the transactional id {t.transactional_id!r} is unknown to the "
                                       "transaction coordinator (expired?); nothing of this job was committed")
            if (d.producer_id, d.producer_epoch, d.transaction_state) != (t.producer_id, t.producer_epoch, "Ongoing"):
                raise TransactionError(
                    f"exactlyOnce: the transaction of {t.transactional_id!r} (producer id {t.producer_id}, epoch "
                    f"{t.producer_epoch}) is no longer open: the coordinator has producer id {d.producer_id}, epoch "
                    f"{d.producer_epoch}, state {d.transaction_state}. It was fenced by a newer producer with the "
                    "same transactional id (another job with the same transactionalIdPrefix running at once) or "
                    "aborted after kafka.transaction.timeout.ms; nothing of this job was committed")
        committed = []
        for t in txns:
            try:
                self.end_txn(t, commit=True)
            except (AdminError, _Retry) as e:
                raise TransactionError(f"exactlyOnce: committing {t.transactional_id!r} failed after "
                                       f"{len(committed)} of {len(txns)} transaction(s) were committed: {e}") from None
            committed.append(t)
        self.wait_complete(txns, "CompleteCommit")

    def wait_complete(self, txns: Iterable[TaskTransaction], state: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        waiting = list(txns)
        while waiting and time.monotonic() < deadline:
            states = self.describe_many(t.transactional_id for t in waiting)
            waiting = [t for t in waiting if states[t.transactional_id] is None
                       or states[t.transactional_id].transaction_state != state]
            if waiting:
                time.sleep(0.02)
        if waiting:
            log.warning("transactions decided, markers not all written yet %s",
                        kv(state=state, ids=[t.transactional_id for t in waiting]))

    def abort_all(self, txns: list[TaskTransaction]) -> list[str]:
        """EndTxn(abort) for ``txns``.  Returns the errors (best effort: an abort must not hide the job's own
        failure; :meth:`fence_open` follows)."""
        errors = []
        for t in txns:
            try:
                self.end_txn(t, commit=False)
            except (AdminError, _Retry) as e:
                if not (isinstance(e, AdminError) and e.code in FENCED | {Errors.INVALID_TXN_STATE}):
                    errors.append(f"{t.transactional_id}: {e}")
        return errors

    def fence_open(self, transactional_ids: Iterable[str], timeout_ms: int) -> tuple[list[str], list[str]]:
        """InitProducerId for each of ``transactional_ids`` whose transaction is open, which aborts it.  Returns
        (the ids fenced, the errors); best effort, as :meth:`abort_all`."""
        try:
            states = self.describe_many(transactional_ids)
        except (AdminError, _Retry) as e:
            return [], [f"describing the job's other transactional ids: {e}"]
        fenced, errors = [], []
        for tid, state in states.items():
            if state is None or state.transaction_state not in OPEN_STATES:
                continue
            try:
                self.init_producer_id(tid, timeout_ms)
                fenced.append(tid)
            except (AdminError, _Retry) as e:
                errors.append(f"{tid}: {e}")
        return fenced, errors

    def known(self, transactional_ids: Iterable[str]) -> bool:
        """Whether the coordinators know any of the ids."""
        try:
            return any(s is not None for s in self.describe_many(transactional_ids).values())
        except (AdminError, _Retry) as e:
            raise TransactionError(str(e)) from None
