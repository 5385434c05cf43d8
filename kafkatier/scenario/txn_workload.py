"""TxnProducerWorkload (process ``txn_producer-N``): Jepsen's transactional Kafka workload for the scenario engine.

A transactional producer (``transactional.id`` = the process name) runs transactions of ``txn_sends`` sends of
unique values (``"<process>:<txn>:<i>"``) to seeded partitions of the topic, then commits them (or aborts them,
with probability ``abort_ratio``).  One ``txn`` operation per transaction: ``invoke`` with the planned sends and
the decision, then ``ok`` (committed: commit_transaction returned), ``fail`` (certainly aborted: the decision was
abort, or commit was never asked) or ``info`` (unknown: commit asked and not confirmed), with ``writes``
``[[partition, offset, value], ...]`` from the delivery reports and ``end_invoked`` (when EndTxn was asked).

With ``zombie_at_s`` the producer leaves a transaction open that long after the workload started (its sends
delivered), a new instance with the same transactional id fences it, and ``zombie_pause_s`` later the old
instance wakes up, sends once more and tries to commit: it must fail (``zombie = true`` on that operation).
Read_committed consumers are ``workloads.ConsumerWorkload`` (``isolation_level``); the checkers are
``checkers/transactions.py``.  Jepsen's workload also polls inside its transactions (consume-transform-produce);
this one does not (see docs/transactions.md).
"""
from __future__ import annotations

import random
import time

from confluent_kafka import KafkaException, Producer

from kafkatier.scenario.history import FAIL, INFO, INVOKE, OK, History
from kafkatier.scenario.spec import WorkloadSpec
from kafkatier.scenario.workloads import Workload, client_config, error_name


class TxnProducerWorkload(Workload):
    """See the module docstring.  ``rate`` is transactions per second."""
    INIT_TIMEOUT_S = 30.0
    END_TIMEOUT_S = 30.0

    def __init__(self, name: str, spec: WorkloadSpec, bootstrap: str, partitions: int, history: History,
                 seed: int, on_ack=None):
        super().__init__(name, history)
        self.spec = spec
        self.partitions = partitions
        self.on_ack = on_ack
        self.rng = random.Random(f"{seed}:{name}")
        self.sent = self.acked = self.failed = self.unknown = 0
        self.conf = client_config(bootstrap) | {
            "transactional.id": name, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "transaction.timeout.ms": spec.transaction_timeout_ms,
            "message.timeout.ms": min(spec.delivery_timeout_ms, spec.transaction_timeout_ms),
            "request.timeout.ms": 5000, "retry.backoff.ms": 100, "retry.backoff.max.ms": 500}
        self.producer: Producer | None = None
        self._zombie: tuple | None = None     # (producer, txn value, writes, wake-up time)
        self._zombie_done = not spec.zombie_at_s
        self._began = time.monotonic()

    # -- one producer instance -------------------------------------------------------------------------------
    def _new_producer(self) -> Producer | None:
        """A new instance, initialised (InitProducerId: fences the previous one and completes or aborts its open
        transaction); None if the run ends first."""
        while not self.stopping.is_set():
            producer = Producer(self.conf)
            self.history.record(INVOKE, self.process, "init-transactions", None)
            try:
                producer.init_transactions(self.INIT_TIMEOUT_S)
            except KafkaException as e:
                self.history.record(INFO, self.process, "init-transactions", None, error=error_name(e.args[0]))
                self._discard(producer)
                continue
            self.history.record(OK, self.process, "init-transactions", None)
            return producer
        return None

    @staticmethod
    def _discard(producer: Producer) -> None:
        """Serve what the instance still has to report and let it go (a fatal one raises here)."""
        try:
            producer.flush(0)
        except KafkaException:
            pass

    @staticmethod
    def _delivered(writes: dict):
        def cb(err, msg) -> None:
            v = msg.value().decode()
            writes[v] = (msg.partition(), msg.offset() if err is None else -1, None if err is None else err.name())
        return cb

    def _end(self, producer: Producer, commit: bool) -> str | None:
        """commit_transaction / abort_transaction, retried while the error is retriable.  None on success, else
        ``"abortable:<error>"``, ``"fatal:<error>"`` or ``"unknown:<error>"``."""
        deadline = time.monotonic() + self.END_TIMEOUT_S
        while True:
            try:
                (producer.commit_transaction if commit else producer.abort_transaction)(
                    max(1.0, deadline - time.monotonic()))
                return None
            except KafkaException as e:
                err = e.args[0]
                name = error_name(err)
                if err.fatal():
                    return f"fatal:{name}"
                if err.txn_requires_abort():
                    return f"abortable:{name}"
                if not err.retriable() or time.monotonic() >= deadline:
                    return f"unknown:{name}"

    def _complete(self, txn: dict, writes: dict, commit_asked: bool, end_invoked: int | None, error: str | None,
                  zombie: bool = False) -> None:
        recorded = [[p, o, v] for v, (p, o, _) in writes.items()]
        extra = {"topic": self.spec.topic, "writes": recorded, "end_invoked": end_invoked}
        if zombie:
            extra["zombie"] = True
        if error is not None:
            extra["error"] = error
        if commit_asked and error is None:
            type_ = OK
            self.acked += len(txn["sends"])
            if self.on_ack:
                for _ in txn["sends"]:
                    self.on_ack()
        elif not commit_asked:
            type_ = FAIL                 # never asked to commit: only an abort can end it
            self.failed += 1
        else:
            type_ = INFO
            self.unknown += 1
        self.history.record(type_, self.process, "txn", txn, **extra)

    def _transaction(self, seq: int) -> bool:
        """One transaction; False when the producer instance must be replaced."""
        producer, spec = self.producer, self.spec
        tid = f"{self.process}:{seq}"
        sends = [[self.rng.randrange(self.partitions), f"{tid}:{i}"] for i in range(spec.txn_sends)]
        commit = self.rng.random() >= spec.abort_ratio
        zombie = not self._zombie_done and time.monotonic() - self._began >= spec.zombie_at_s
        txn = {"txn": tid, "sends": sends, "decision": "commit" if commit else "abort"}
        writes: dict[str, tuple] = {}
        self.history.record(INVOKE, self.process, "txn", txn, topic=spec.topic)
        try:
            producer.begin_transaction()
            for p, v in sends:
                producer.produce(spec.topic, value=v, partition=p, on_delivery=self._delivered(writes))
                self.sent += 1
            producer.flush(10.0)
        except (KafkaException, BufferError) as e:
            err = e.args[0] if isinstance(e, KafkaException) and e.args else None
            name = error_name(err) if err is not None else repr(e)
            fatal = err is not None and err.fatal()
            if not fatal:
                self._end(producer, commit=False)
            self._complete(txn, writes, False, None, name)
            return not fatal
        if zombie:   # leave it open; a new instance fences this one (see the module docstring)
            self._zombie_done = True
            self.history.info(self.process, "zombie-pause", {"txn": tid, "pause_s": spec.zombie_pause_s})
            self._zombie = (producer, txn, writes, time.monotonic() + spec.zombie_pause_s)
            return False
        end_invoked = self.history.now()
        error = self._end(producer, commit)
        usable = error is None
        if error is not None and error.startswith("abortable:"):
            usable = self._end(producer, commit=False) is None
            if usable and commit:
                # EndTxn(commit) was refused with an abortable error and the abort went through.
                self._complete(txn, writes, False, end_invoked, error)
                return True
        self._complete(txn, writes, commit, end_invoked, error)
        return usable

    def _wake_zombie(self) -> None:
        producer, txn, writes, _ = self._zombie
        self._zombie = None
        self.history.info(self.process, "zombie-resume", {"txn": txn["txn"]})
        end_invoked = self.history.now()
        try:
            p, v = self.rng.randrange(self.partitions), f"{txn['txn']}:zombie"
            txn["sends"].append([p, v])
            producer.produce(self.spec.topic, value=v, partition=p, on_delivery=self._delivered(writes))
            producer.flush(5.0)
            error = self._end(producer, commit=True)
        except KafkaException as e:
            error = f"fatal:{error_name(e.args[0])}"
        # Fenced before it asked to commit: whatever it was told, the coordinator can only have aborted it, so a
        # commit it reports as successful is recorded as one (the checker flags it: zombie-committed).
        self._complete(txn, writes, error is None, end_invoked, error, zombie=True)
        self._discard(producer)

    def work(self) -> None:
        period = 1.0 / self.spec.rate
        start = self._began = time.monotonic()
        seq = 0
        self.producer = self._new_producer()
        while self.producer is not None and not self.stopping.is_set():
            if self._zombie is not None and time.monotonic() >= self._zombie[3]:
                self._wake_zombie()
            due = start + seq * period
            if due > time.monotonic():
                self.stopping.wait(min(due - time.monotonic(), 0.05))
                continue
            ok = self._transaction(seq)
            seq += 1
            if not ok:
                if self._zombie is None or self._zombie[0] is not self.producer:
                    self._discard(self.producer)
                self.producer = self._new_producer()
        if self._zombie is not None:
            self._wake_zombie()

    def finish(self, timeout: float) -> int:
        """Transactions end inside :meth:`work`: wait for it; 1 if it is still running."""
        self.join(timeout)
        return int(self.is_alive())
