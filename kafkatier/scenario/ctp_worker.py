"""A consume-transform-produce job with exactly-once semantics (KIP-98, KIP-447), run as a process of its own:
``python -m kafkatier.scenario.ctp_worker --bootstrap-server B --group G --input IN --output OUT
--transactional-id ID``.

It reads ``IN`` in consumer group ``G`` with ``isolation.level=read_committed``, writes each record's
:func:`transform` to ``OUT`` (same partition number, modulo ``OUT``'s partitions) and commits the input offsets in
the same transaction (``send_offsets_to_transaction``: AddOffsetsToTxn + TxnOffsetCommit), at most
``--per-txn`` records per transaction.  Killed with SIGKILL at any point and started again with the same
transactional id, the new instance fences the old one (InitProducerId), whose open transaction is aborted, and
resumes at the group's committed offsets: ``OUT``, read_committed, holds every record of ``IN`` exactly once.

After a transaction is aborted (an abortable error: a rebalance fenced the consumer's generation, a partition
leader moved...) the consumer is rewound to the first offset of the batch on each partition it still owns, so
nothing it read in the aborted transaction is skipped.

Progress is printed on stdout as JSON lines, each with ``t`` (``time.monotonic_ns()``, one clock for every
process of the machine) and ``ev``: ``ready`` (InitProducerId done), ``begin`` (``txn``, ``inputs``:
``{partition: [first, last]}``), ``produced`` (``writes``: ``[[partition, offset, value], ...]`` from the delivery
reports), ``end`` (``offsets``: ``{partition: next offset}``; EndTxn(commit) is asked next), ``committed``
(``records``: how many input records the job has committed in all), ``aborted`` (``error``) and ``fatal``
(``error``; the process exits with status 1, or 3 after a stall).  The scenario engine's ``ctp`` workload
(``kafkatier/scenario/ctp_workload.py``) records them in the run's history.

A call into librdkafka can block past its own timeout: ``send_offsets_to_transaction`` waits for its
TxnOffsetCommit, and librdkafka sends that through a coordinator request that never times out and only moves on
when some broker connection changes state; when the group coordinator it cached was a broker killed and since
dropped from the metadata, nothing changes and the call never returns (librdkafka issues 5456 and 5511 on GitHub,
seen here after a kill -9 of the group coordinator).  A :class:`Watchdog` thread ends the process (``fatal``
``STALLED: ...``, status 3) when a call is still blocked ``STALL_GRACE_S`` after its deadline: the supervisor
starts a new incarnation, which fences this one, the way an operator restarts a wedged application.

Environment variable ``KAFKATIER_CTP_RDKAFKA_DEBUG=DIR`` turns on librdkafka's debug log
(``debug=eos,cgrp,broker,protocol,msg``) for both clients, written by librdkafka's own threads to
``DIR/<transactional id>.<pid>.rdkafka.log`` (the process's stderr), so it is complete even while the Python
thread is blocked in a librdkafka call.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

POLL_S = 0.5
TXN_TIMEOUT_S = 30.0
STALL_GRACE_S = 20.0        # how long past its own deadline a librdkafka call may stay blocked
STALL_EXIT = 3
DEBUG_ENV = "KAFKATIER_CTP_RDKAFKA_DEBUG"
DEBUG_CONTEXTS = "eos,cgrp,broker,protocol,msg"


def transform(value: str, partition: int, offset: int) -> str:
    """The job's transform of one input record: its value upper-cased, tagged with where it was read (so a
    checker maps every output record back to exactly one input record)."""
    return f"{value.upper()}@{partition}/{offset}"


def source_of(output_value: str) -> tuple[int, int] | None:
    """``(partition, offset)`` of the input record ``output_value`` is the transform of, or None."""
    _, sep, where = output_value.rpartition("@")
    p, slash, o = where.partition("/")
    if not sep or not slash or not p.isdigit() or not o.isdigit():
        return None
    return int(p), int(o)


class NotDelivered(Exception):
    """Records of the transaction still undelivered when its time is up: the transaction is aborted."""


_emit_lock = threading.Lock()


def _emit(ev: str, **fields) -> None:
    line = json.dumps({"t": time.monotonic_ns(), "ev": ev, **fields}, separators=(",", ":")) + "\n"
    with _emit_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


class Watchdog:
    """Calls ``on_stall(description)`` once when a :meth:`guard`-ed call is still running ``grace_s`` after its
    deadline (see the module docstring); once started, a daemon thread checks every ``interval_s``."""

    def __init__(self, grace_s: float, on_stall: Callable[[str], None], interval_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self._grace_s, self._on_stall, self._interval_s, self._clock = grace_s, on_stall, interval_s, clock
        self._lock = threading.Lock()
        self._call: tuple[str, float, float] | None = None     # (what, started, deadline)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ctp-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    @contextlib.contextmanager
    def guard(self, what: str, timeout_s: float) -> Iterator[None]:
        now = self._clock()
        with self._lock:
            self._call = (what, now, now + timeout_s)
        try:
            yield
        finally:
            with self._lock:
                self._call = None

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(self._interval_s * 4)

    def check(self) -> bool:
        """One look: True (after ``on_stall``) if the guarded call is ``grace_s`` past its deadline."""
        with self._lock:
            call = self._call
        now = self._clock()
        if call is None or now <= call[2] + self._grace_s:
            return False
        what, started, deadline = call
        self._on_stall(f"STALLED: {what} blocked in librdkafka for {now - started:.1f}s "
                       f"({now - deadline:.1f}s past its timeout)")
        return True

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            if self.check():
                return


def _exit_stalled(description: str) -> None:
    """The watchdog's verdict: report and end the process at once (the main thread is blocked inside librdkafka,
    where neither an exception nor SIGTERM's handler can reach it)."""
    _emit("fatal", error=description)
    os._exit(STALL_EXIT)


def _debug_config() -> dict:
    """librdkafka's debug contexts when ``KAFKATIER_CTP_RDKAFKA_DEBUG`` names a directory (:func:`main` redirects
    this process's stderr, where librdkafka's threads log, to a file there), else nothing."""
    return {"debug": DEBUG_CONTEXTS} if os.environ.get(DEBUG_ENV) else {}


def _error_name(e: BaseException) -> str:
    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return err.name() if isinstance(err, KafkaError) else repr(e)


class Job:
    def __init__(self, args: argparse.Namespace, watchdog: Watchdog):
        self.args = args
        self.watchdog = watchdog
        common = {"bootstrap.servers": args.bootstrap_server, "socket.timeout.ms": 5000,
                  "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500} | _debug_config()
        self.consumer = Consumer(common | {
            "group.id": args.group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": False,
            "session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 100})
        self.producer = Producer(common | {
            "transactional.id": args.transactional_id, "acks": "all", "linger.ms": 5,
            "transaction.timeout.ms": args.transaction_timeout_ms, "request.timeout.ms": 5000,
            "retry.backoff.ms": 100, "retry.backoff.max.ms": 500})
        self.output_partitions = 0
        self.committed = 0
        self.seq = 0

    def run(self) -> int:
        with self.watchdog.guard("init_transactions", 60):
            self.producer.init_transactions(60)
        with self.watchdog.guard("list_topics", 30):
            md = self.producer.list_topics(self.args.output, timeout=30).topics[self.args.output]
        if md.error is not None or not md.partitions:
            _emit("fatal", error=f"output topic {self.args.output}: {md.error.name() if md.error else 'no partitions'}")
            return 2
        self.output_partitions = len(md.partitions)
        _emit("ready")
        self.consumer.subscribe([self.args.input])
        while True:
            with self.watchdog.guard("consume", POLL_S):
                batch = [m for m in self.consumer.consume(self.args.per_txn, POLL_S) if m.error() is None]
            if batch:
                self._transaction(batch)

    def _transaction(self, batch: list) -> None:
        seq, self.seq = self.seq, self.seq + 1
        inputs: dict[int, list[int]] = {}
        for m in batch:
            lo_hi = inputs.setdefault(m.partition(), [m.offset(), m.offset()])
            lo_hi[1] = max(lo_hi[1], m.offset())
        writes: list[list] = []

        def delivered(err, msg) -> None:
            if err is None:
                writes.append([msg.partition(), msg.offset(), msg.value().decode()])
        self.producer.begin_transaction()
        _emit("begin", txn=seq, inputs=inputs)
        try:
            for m in batch:
                value = transform(m.value().decode(), m.partition(), m.offset())
                self.producer.produce(self.args.output, value=value, key=m.key(),
                                      partition=m.partition() % self.output_partitions, on_delivery=delivered)
            with self.watchdog.guard("flush", TXN_TIMEOUT_S):
                undelivered = self.producer.flush(TXN_TIMEOUT_S)
            if undelivered:
                raise NotDelivered("records not delivered within the transaction timeout")
            _emit("produced", txn=seq, writes=writes)
            offsets = {p: hi + 1 for p, (_, hi) in inputs.items()}
            self._retried("send_offsets_to_transaction", lambda timeout: self.producer.send_offsets_to_transaction(
                [TopicPartition(self.args.input, p, o) for p, o in offsets.items()],
                self.consumer.consumer_group_metadata(), timeout))
            _emit("end", txn=seq, offsets=offsets)
            self._retried("commit_transaction", self.producer.commit_transaction)
        except (KafkaException, NotDelivered) as e:
            err = e.args[0] if e.args else None
            if isinstance(e, KafkaException) and (not isinstance(err, KafkaError) or not err.txn_requires_abort()):
                raise
            self._retried("abort_transaction", self.producer.abort_transaction)
            _emit("aborted", txn=seq, error=_error_name(e), writes=writes)
            self._rewind(inputs)
            return
        self.committed += len(batch)
        _emit("committed", txn=seq, records=self.committed)

    def _retried(self, what: str, call) -> None:
        """``call(timeout)`` again while it fails with a retriable error (librdkafka's rule for the transactional
        calls: the same call is retried), within one transaction timeout (the watchdog's deadline for ``what``)."""
        deadline = time.monotonic() + TXN_TIMEOUT_S
        with self.watchdog.guard(what, TXN_TIMEOUT_S + 1.0):
            while True:
                try:
                    return call(max(1.0, deadline - time.monotonic()))
                except KafkaException as e:
                    err = e.args[0] if e.args else None
                    if not isinstance(err, KafkaError) or not err.retriable() or time.monotonic() >= deadline:
                        raise

    def _rewind(self, inputs: dict[int, list[int]]) -> None:
        """Back to the first record of the aborted batch on each partition the consumer still owns."""
        owned = {tp.partition for tp in self.consumer.assignment()}
        for p, (lo, _) in inputs.items():
            if p in owned:
                self.consumer.seek(TopicPartition(self.args.input, p, lo))


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kafkatier.scenario.ctp_worker", description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap-server", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--per-txn", type=_positive, default=10, help="most input records per transaction")
    ap.add_argument("--transaction-timeout-ms", type=int, default=10000)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # stop between records; an open transaction aborts
    directory = os.environ.get(DEBUG_ENV)
    if directory:
        os.makedirs(directory, exist_ok=True)
        log = os.open(os.path.join(directory, f"{args.transactional_id}.{os.getpid()}.rdkafka.log"),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 2)
        os.close(log)
    watchdog = Watchdog(STALL_GRACE_S, _exit_stalled).start()
    try:
        return Job(args, watchdog).run()
    except KafkaException as e:
        _emit("fatal", error=_error_name(e))
        return 1
    finally:
        watchdog.stop()


if __name__ == "__main__":
    sys.exit(main())
