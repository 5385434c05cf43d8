"""The batch sink: ``df.write.format("kafkatier").mode("append")...save()`` (Spark's ``KafkaWriter`` and
``KafkaDataWriter``, told with a Python data source).

Driver (``KafkaBatchWriter.create``, before any task): options parsed, the DataFrame's columns checked against
the sink's rules (:class:`SinkColumns`), the brokers asked whether the ``topic`` option's topic exists (or is
auto-created).  Any failure there is one error and nothing is written.

Tasks (``write``): a librdkafka producer receives Arrow record batches (``DataSourceArrowWriter``); at least
once, it is the Python worker's pooled producer for these settings (:mod:`kafkatier.spark.producer_pool`,
Spark's ``CachedKafkaProducer``), so a reused worker's next task sends at once;
each column is converted once per batch to a Python list of bytes in C (``to_pylist`` on a binary column), and
the only per-row Python work left is the ``produce()`` call itself.  Delivery reports come back for failures
only (``delivery.report.only.error``); the task flushes at its end and fails if any record was not
acknowledged, so Spark's task retry or job failure follows.

Guarantee with ``exactlyOnce=true``: **exactly once** for read_committed readers -- each task attempt writes in
a transaction ``<transactionalIdPrefix>-<partition id>-<attempt>`` that it flushes and leaves open; ``commit()``
on the driver ends the transactions of the attempts Spark kept with EndTxn (:mod:`kafkatier.spark.transactions`),
``abort()`` aborts them, and both fence every other attempt's id still open (a failed or speculative attempt, a
previous run of the same job).  Attempts do not share an id: a failed attempt's Python worker can outlive its
task and initialise its producer after the retried attempt did, which with one id per partition fenced the
attempt whose result Spark keeps.

Guarantee otherwise: **at least once**, as Spark's own Kafka sink.  The producer is idempotent, so librdkafka's retries
(a leader killed mid-write) write nothing twice; but a task that fails after some of its records were
acknowledged, and is run again by Spark, sends those records again.

Differences from Spark: the ``topic`` column's topics are checked by the task, not the driver (the driver
never reads the data); ``overwrite`` is refused as Spark refuses it for Kafka.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import repeat
from typing import TYPE_CHECKING

import attrs
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from kafkatier.logsetup import get_logger, kv
from kafkatier.spark import metadata
from kafkatier.spark.options import DataSourceOptionError, WriterOptions, metadata_timeout_s
from kafkatier.spark.producer_pool import POOL

if TYPE_CHECKING:
    from kafkatier.spark.transactions import TaskTransaction, TransactionEnder

log = get_logger("spark.writer")

POLL_WHEN_FULL_S = 0.1
# The producers' client.id unless kafka.client.id says otherwise (one producer serves every task of a worker).
CLIENT_ID = "kafkatier-spark"


@attrs.frozen
class SinkColumns:
    """Which of the sink's columns the DataFrame has (``value`` always)."""

    key: bool
    topic: bool
    partition: bool
    headers: bool

    @classmethod
    def check(cls, schema: StructType, topic_option: str | None) -> SinkColumns:
        """Spark's ``KafkaWriter.validateQuery``: value required, key/value string or binary, topic string
        (required without the ``topic`` option), partition int, headers array<struct<key string, value
        binary>>; other columns are ignored."""
        fields = {f.name.lower(): f.dataType for f in schema.fields}

        def typed(name: str, allowed: tuple, wanted: str) -> bool:
            t = fields.get(name)
            if t is None:
                return False
            if not isinstance(t, allowed):
                raise DataSourceOptionError(f"{name} attribute type must be {wanted}, got {t.simpleString()}")
            return True

        if "value" not in fields:
            raise DataSourceOptionError("Required attribute 'value' not found (the DataFrame needs a value column, "
                                        "string or binary)")
        typed("value", (StringType, BinaryType), "a string or binary")
        key = typed("key", (StringType, BinaryType), "a string or binary")
        topic = typed("topic", (StringType,), "a string")
        if not topic and topic_option is None:
            raise DataSourceOptionError("topic option required when no 'topic' attribute is present")
        partition = typed("partition", (IntegerType,), "an int")
        headers = typed("headers", (ArrayType,), "array<struct<key:string,value:binary>>")
        if headers:
            element = fields["headers"].elementType
            names = {f.name: f.dataType for f in getattr(element, "fields", [])}
            if not (isinstance(element, StructType) and isinstance(names.get("key"), StringType)
                    and isinstance(names.get("value"), BinaryType)):
                raise DataSourceOptionError("headers attribute type must be array<struct<key:string,value:binary>>, "
                                            f"got {fields['headers'].simpleString()}")
        return cls(key=key, topic=topic, partition=partition, headers=headers)


@attrs.frozen
class KafkaWriterCommitMessage(WriterCommitMessage):
    """What one task sent (all of it acknowledged, or the task would have failed)."""

    partition_id: int
    attempt: int
    records: int
    value_bytes: int
    seconds: float
    # exactlyOnce: the task's open transaction, which the driver commits (None: the task wrote nothing).
    transaction: TaskTransaction | None = None


class KafkaBatchWriter(DataSourceArrowWriter):
    """Pickled to the tasks: only frozen options and the column layout travel."""

    def __init__(self, options: WriterOptions, columns: SinkColumns):
        self.options = options
        self.columns = columns

    @classmethod
    def create(cls, raw_options, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        """Everything checked before work (runs on the driver side)."""
        if overwrite:
            raise DataSourceOptionError("Save mode overwrite not allowed for Kafka: records cannot be replaced; "
                                        "use .mode(\"append\")")
        options = WriterOptions.parse(raw_options)
        columns = SinkColumns.check(schema, options.topic)
        timeout = metadata_timeout_s(raw_options, metadata.DEFAULT_TIMEOUT_S)
        metadata.check_topic_writable(options.producer_config, options.topic, timeout)
        eos = options.exactly_once
        if eos is not None:
            from kafkatier.spark.transactions import TransactionError

            with _ender(options, timeout) as ender:
                try:
                    ender.check(eos.transactional_id(0, 0), eos.timeout_ms)
                except TransactionError as e:
                    raise DataSourceOptionError(str(e)) from None
            log.info("exactly-once write planned %s", kv(transactional_id_prefix=eos.prefix,
                                                         transaction_timeout_ms=eos.timeout_ms))
        return cls(options, columns)

    # --- tasks ------------------------------------------------------------------------------------------------
    def write(self, iterator: Iterator) -> KafkaWriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        pid, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)
        config = {**self.options.producer_config,
                  "client.id": self.options.producer_config.get("client.id", CLIENT_ID)}
        eos = self.options.exactly_once
        if eos is not None:
            return self._write_transaction(iterator, pid, attempt,
                                           _TaskTransactionState(eos.transactional_id(pid, attempt), eos.prefix),
                                           config)
        producer, failures = POOL.borrow(config)
        healthy = False
        try:
            message = self._write_rows(iterator, pid, attempt, producer, failures, None)
            healthy = True
            return message
        finally:
            POOL.give_back(config, healthy)

    def _write_transaction(self, iterator, pid: int, attempt: int, txn: _TaskTransactionState,
                           config: dict) -> KafkaWriterCommitMessage:
        from confluent_kafka import Producer

        failures: list = []

        def on_error(err, msg):  # called for failed deliveries only (delivery.report.only.error)
            if err is not None:
                failures.append((err, msg.topic(), msg.partition()))

        producer = Producer({**txn.configure(config), "on_delivery": on_error})
        return self._write_rows(iterator, pid, attempt, producer, failures, txn)

    def _write_rows(self, iterator, pid: int, attempt: int, producer, failures: list,
                    txn: _TaskTransactionState | None) -> KafkaWriterCommitMessage:
        """Send every row, flush, and check that all were acknowledged (raising otherwise)."""
        from confluent_kafka import KafkaException

        start = time.monotonic()
        records = value_bytes = 0
        try:
            if txn is not None:
                txn.begin(producer, self.options.flush_timeout_s)
            for batch in iterator:
                records += batch.num_rows
                value_bytes += self._send(producer, batch)
                producer.poll(0)
                if failures:
                    break
            remaining = producer.flush(self.options.flush_timeout_s)
        except KafkaException as e:
            if txn is None:
                raise
            txn.abort(producer)
            raise RuntimeError(f"kafkatier sink: task {pid} (attempt {attempt}): {txn.describe_failure(e)}") from None
        except BaseException:
            if txn is not None:
                txn.abort(producer)
            raise
        finally:
            producer.poll(0)
        if failures or remaining:
            if txn is not None:
                txn.abort(producer)
            err, topic, part = failures[0] if failures else ("flush timed out", "?", -1)
            raise RuntimeError(f"kafkatier sink: task {pid} (attempt {attempt}): "
                               f"{len(failures)} record(s) not delivered, {remaining} still unacknowledged; "
                               f"first error: {err} (topic {topic}, partition {part})"
                               + (f"; {txn.describe_failure(err)}" if txn is not None else ""))
        try:
            reported = txn.flushed(producer, records) if txn is not None else None
        except KafkaException as e:
            raise RuntimeError(f"kafkatier sink: task {pid} (attempt {attempt}): {txn.describe_failure(e)}") from None
        seconds = time.monotonic() - start
        log.info("task wrote %s", kv(task=pid, attempt=attempt, records=records, value_bytes=value_bytes,
                                     seconds=round(seconds, 3),
                                     transactional_id=reported.transactional_id if reported else None))
        return KafkaWriterCommitMessage(pid, attempt, records, value_bytes, seconds, reported)

    def _send(self, producer, batch) -> int:
        """Queue every row of one Arrow batch; returns the value bytes queued."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = {name.lower(): i for i, name in enumerate(batch.schema.names)}

        def binary(name: str):
            col = batch.column(names[name])
            if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                col = col.cast(pa.binary())
            return col

        value_col = binary("value")
        values = value_col.to_pylist()
        keys = binary("key").to_pylist() if self.columns.key else None
        topic = self.options.topic
        topics = None
        if topic is None:
            column = batch.column(names["topic"])
            if column.null_count:
                raise RuntimeError("kafkatier sink: null in the topic column and no topic option")
            topics = column.to_pylist()
        partitions = (pc.fill_null(batch.column(names["partition"]), -1).to_pylist()
                      if self.columns.partition else None)
        headers = batch.column(names["headers"]).to_pylist() if self.columns.headers else None

        produce = producer.produce
        wait = self._wait_for_room
        topics_it = repeat(topic) if topics is None else topics
        keys_it = repeat(None) if keys is None else keys
        partitions_it = repeat(-1) if partitions is None else partitions
        if headers is None and partitions is None:
            # The common shape; an explicit partition argument, even -1, costs librdkafka time per record.
            for t, value, key in zip(topics_it, values, keys_it):
                try:
                    produce(t, value, key)
                except BufferError:
                    wait(producer, lambda: produce(t, value, key))
        elif headers is None:
            for t, value, key, part in zip(topics_it, values, keys_it, partitions_it):
                try:
                    produce(t, value, key, part)
                except BufferError:
                    wait(producer, lambda: produce(t, value, key, part))
        else:
            for t, value, key, part, hs in zip(topics_it, values, keys_it, partitions_it, headers):
                hs = [(h["key"], h["value"]) for h in hs] if hs else None
                try:
                    produce(t, value, key, part, headers=hs)
                except BufferError:
                    wait(producer, lambda: produce(t, value, key, part, headers=hs))
        return pc.sum(pc.binary_length(value_col)).as_py() or 0

    def _wait_for_room(self, producer, produce_again) -> None:
        """The local queue is full: serve delivery reports until the record fits.  Queued records are
        acknowledged or fail within librdkafka's message.timeout.ms, so the flush timeout bounds the wait."""
        deadline = time.monotonic() + self.options.flush_timeout_s
        while time.monotonic() < deadline:
            producer.poll(POLL_WHEN_FULL_S)
            try:
                produce_again()
                return
            except BufferError:
                continue
        raise RuntimeError(f"kafkatier sink: the producer queue stayed full for {self.options.flush_timeout_s:g} s")

    # --- driver -----------------------------------------------------------------------------------------------
    def commit(self, messages) -> None:
        done = [m for m in messages if m is not None]
        if self.options.exactly_once is not None:
            txns = [m.transaction for m in done if m.transaction is not None]
            with _ender(self.options, self.options.flush_timeout_s) as ender:
                ender.commit_all(txns)
                self._fence_others(ender, messages, txns)
        log.info("write committed %s", kv(tasks=len(done), records=sum(m.records for m in done),
                                          value_bytes=sum(m.value_bytes for m in done),
                                          exactly_once=self.options.exactly_once is not None))

    def abort(self, messages) -> None:
        done = [m for m in messages if m is not None]
        if self.options.exactly_once is not None:
            txns = [m.transaction for m in done if m.transaction is not None]
            with _ender(self.options, self.options.flush_timeout_s) as ender:
                errors = ender.abort_all(txns)
                errors += self._fence_others(ender, messages, txns)
            log.warning("exactly-once write aborted %s", kv(
                tasks_succeeded=len(done), tasks_failed=len(messages) - len(done), abort_errors=errors or None,
                note="read_committed readers see none of its records"))
            return
        log.warning("write aborted %s", kv(
            tasks_succeeded=len(done), tasks_failed=len(messages) - len(done),
            records_already_written=sum(m.records for m in done),
            note="records acknowledged before the failure stay in the topic (at least once)"))

    def _fence_others(self, ender: TransactionEnder, messages, kept: list[TaskTransaction]) -> list[str]:
        """Fence every transactional id of this job other than ``kept`` whose transaction is open: the other
        attempts of this run's partitions, then a previous run's partitions above this run's count (probed
        upwards until a range of them is unknown to the coordinators).  Best effort: returns the errors."""
        eos = self.options.exactly_once
        keep = {t.transactional_id for t in kept}
        highest = max((m.attempt for m in messages if m is not None), default=0)
        n = len(messages)
        ids = [i for i in eos.attempt_ids(range(n), highest) if i not in keep]
        from kafkatier.spark.transactions import TransactionError

        fenced, errors = ender.fence_open(ids, eos.timeout_ms)
        start, width = n, max(n, 1)
        try:
            while ender.known(above := eos.attempt_ids(range(start, start + width), highest)):
                more, more_errors = ender.fence_open(above, eos.timeout_ms)
                fenced += more
                errors += more_errors
                start += width
        except TransactionError as e:
            errors.append(f"probing ids above partition {start - 1}: {e}")
        if fenced or errors:
            log.warning("other transactions of the job fenced %s", kv(
                transactional_ids=fenced, errors=errors or None,
                note="a failed or speculative attempt's, or a previous run's: none of their records is visible"))
        return errors


def _ender(options: WriterOptions, timeout_s: float) -> TransactionEnder:
    """The driver's transaction client.  Imported here, not at the top: kafka-python and the protocol codecs
    cost about a second of start-up on a loaded machine in every task and planner process, and only
    exactly-once jobs need them."""
    from kafkatier.spark.transactions import TransactionEnder, TransactionError

    try:
        return TransactionEnder(options.producer_config, timeout_s)
    except TransactionError as e:
        raise DataSourceOptionError(str(e)) from None


class _TaskTransactionState:
    """A task's transaction under exactlyOnce: ``init_transactions`` fences an earlier attempt of the same
    partition (its open transaction is aborted), the rows go into one transaction that the task flushes and
    leaves open, and its producer id and epoch (from librdkafka's statistics, ``eos`` section) go back to the
    driver.  Destroying the producer does not abort the transaction."""

    STATS_INTERVAL_MS = 100

    def __init__(self, transactional_id: str, prefix: str):
        self.transactional_id = transactional_id
        self.prefix = prefix
        self._stats: list[dict] = []

    def configure(self, config: dict) -> dict:
        import json

        def on_stats(text: str) -> None:
            self._stats.append(json.loads(text).get("eos", {}))
            del self._stats[:-1]
        return {**config, "transactional.id": self.transactional_id,
                "statistics.interval.ms": self.STATS_INTERVAL_MS, "stats_cb": on_stats}

    def describe_failure(self, error) -> str:
        """What a Kafka error means for the task's transaction, naming the id and, when the producer was
        fenced, the likely reasons."""
        from confluent_kafka import KafkaError

        err = error.args[0] if getattr(error, "args", None) and isinstance(error.args[0], KafkaError) else error
        code = err.code() if isinstance(err, KafkaError) else None
        text = err.str() if isinstance(err, KafkaError) else str(err)
        fenced = code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH) or (
            "fenced" in text.lower())
        if fenced:
            return (f"transactional id {self.transactional_id!r} was fenced by a newer producer with the same id: "
                    f"another job with the same transactionalIdPrefix ({self.prefix!r}) running at once, or the "
                    f"driver ending this job's other attempts; nothing of this attempt is visible ({text})")
        return f"transactional id {self.transactional_id!r}: {text}"

    def begin(self, producer, timeout_s: float) -> None:
        from confluent_kafka import KafkaException

        try:
            producer.init_transactions(timeout_s)
            producer.begin_transaction()
        except KafkaException as e:
            raise RuntimeError(f"kafkatier sink: init_transactions failed: {self.describe_failure(e)}") from None

    def abort(self, producer) -> None:
        try:
            producer.abort_transaction(10)
        except Exception as e:  # noqa: BLE001 - the driver's abort() fences it anyway
            log.warning("task could not abort its transaction %s", kv(transactional_id=self.transactional_id, error=e))

    def flushed(self, producer, records: int) -> TaskTransaction | None:
        """The open transaction to report, or None (no row: nothing to commit, the empty one ends here)."""
        if records == 0:
            producer.abort_transaction(10)
            return None
        deadline = time.monotonic() + 10 * self.STATS_INTERVAL_MS / 1000 + 5
        self._stats.clear()
        while time.monotonic() < deadline:
            producer.poll(self.STATS_INTERVAL_MS / 1000)
            eos = self._stats[-1] if self._stats else {}
            if eos.get("txn_state") == "InTransaction" and eos.get("producer_id", -1) >= 0:
                from kafkatier.spark.transactions import TaskTransaction

                return TaskTransaction(self.transactional_id, eos["producer_id"], eos["producer_epoch"])
        raise RuntimeError(f"kafkatier sink: transactional id {self.transactional_id!r}: librdkafka reported no "
                           "producer id and epoch for the open transaction")
