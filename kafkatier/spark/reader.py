"""The batch source: ``spark.read.format("kafkatier")...load()`` (Spark's ``KafkaRelation``,
``KafkaOffsetRangeCalculator`` and ``KafkaSourceRDD``, told with a Python data source).

Driver (``KafkaBatchReader.create``, before any task): the subscription is resolved to partitions, the
starting and ending offsets to numbers (``earliest`` = log start offset, which with tiered storage is the first
offset in the remote tier; ``latest`` = log end offset), offsets below the log start offset follow
``failOnDataLoss``, and the ranges become input partitions: one per Kafka partition, or ranges split further
to reach ``minPartitions`` (sizes proportional to the offsets they hold, as Spark's calculator does).

Tasks (``read``): one librdkafka consumer assigned to one offset range (no consumer group is joined and
nothing is committed) returns Arrow record batches of ``maxRecordsPerBatch`` rows with Spark's Kafka source
columns.  Leader changes are librdkafka's business: it refreshes metadata and fetches from the new leader; a
task only gives up when records it knows exist do not arrive within ``kafkaConsumer.pollTimeoutMs``.  Offsets
that disappear between planning and reading (retention, DeleteRecords) fail the task with
``failOnDataLoss=true`` or are skipped with ``false``.
"""
from __future__ import annotations

import time
import uuid
from itertools import repeat
from operator import is_not

import attrs
from pyspark.sql.datasource import DataSourceReader, InputPartition

from kafkatier.logsetup import get_logger, kv
from kafkatier.spark import metadata
from kafkatier.spark.options import (EARLIEST, LATEST, DataSourceOptionError, ReaderOptions, TopicPartition,
                                     metadata_timeout_s)

log = get_logger("spark.reader")

SOURCE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                 "timestampType int")
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"
CONSUME_BATCH = 10_000
CONSUME_WAIT_S = 0.5


def source_schema(include_headers: bool) -> str:
    return f"{SOURCE_SCHEMA}, {HEADERS_FIELD}" if include_headers else SOURCE_SCHEMA


class DataLossError(RuntimeError):
    """Offsets the job was asked for are gone (below the log start offset) and failOnDataLoss is true."""


@attrs.frozen
class OffsetRange:
    """``[from_offset, until_offset)`` of one Kafka partition."""

    tp: TopicPartition
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


class KafkaInputPartition(InputPartition):
    def __init__(self, index: int, offset_range: OffsetRange):
        super().__init__(index)
        self.offset_range = offset_range


def resolve_ranges(options: ReaderOptions, marks: dict[TopicPartition, tuple[int, int]]) -> list[OffsetRange]:
    """Starting and ending offsets as numbers for every partition (Spark's ``KafkaOffsetReader`` rules)."""
    starting, ending = options.starting.as_dict(), options.ending.as_dict()
    for name, spec, given in (("startingOffsets", options.starting, starting),
                              ("endingOffsets", options.ending, ending)):
        if spec.kind == "json" and set(given) != set(marks):
            missing = sorted(map(str, set(marks) - set(given)))
            extra = sorted(map(str, set(given) - set(marks)))
            raise DataSourceOptionError(
                f"option {name} must give an offset for every partition read "
                + (f"(missing: {', '.join(missing)})" if missing else f"(not read: {', '.join(extra)})"))
    ranges = []
    for tp, (low, high) in sorted(marks.items(), key=lambda i: (i[0].topic, i[0].partition)):
        start = {"earliest": EARLIEST, "latest": LATEST}.get(options.starting.kind, starting.get(tp))
        end = LATEST if options.ending.kind == "latest" else ending[tp]
        start = low if start == EARLIEST else high if start == LATEST else start
        end = high if end == LATEST else end
        if start < low:
            if options.fail_on_data_loss:
                raise DataLossError(
                    f"Offsets [{start}, {low}) of {tp} are gone: the log start offset is {low} (retention or "
                    "DeleteRecords). Some data may have been lost. If you want the job to continue from the log "
                    "start offset, set the option failOnDataLoss to false.")
            log.warning("offsets below the log start offset skipped %s", kv(partition=tp, requested=start, first=low))
            start = low
        if start > high or end > high:
            raise DataSourceOptionError(f"offsets of {tp} out of range: asked [{start}, {end}), the log ends at {high}")
        if end < start:
            raise DataSourceOptionError(f"endingOffsets {end} of {tp} is before its startingOffsets {start}")
        ranges.append(OffsetRange(tp, start, end))
    return ranges


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """One range per Kafka partition, unless ``minPartitions`` asks for more: then each range gets a share of
    the parts proportional to its size (at least one; largest remainders get the parts left over, so the total
    reaches ``minPartitions`` when there are enough offsets), split into nearly equal pieces.  Spark rounds
    each share and may end a few parts short."""
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    if total == 0:
        return ranges
    shares = [r.size * min_partitions / total for r in ranges]
    parts = [max(1, min(r.size, int(s))) for r, s in zip(ranges, shares)]
    by_remainder = sorted(range(len(ranges)), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    for i in by_remainder:
        if sum(parts) >= min_partitions:
            break
        if parts[i] < ranges[i].size:
            parts[i] += 1
    out = []
    for r, k in zip(ranges, parts):
        bounds = [r.from_offset + (r.size * j) // k for j in range(k + 1)]
        out += [OffsetRange(r.tp, a, b) for a, b in zip(bounds, bounds[1:])]
    return out


class KafkaBatchReader(DataSourceReader):
    """Pickled to the tasks with its planned ranges."""

    def __init__(self, options: ReaderOptions, ranges: list[OffsetRange]):
        self.options = options
        self.ranges = ranges

    @classmethod
    def create(cls, raw_options) -> KafkaBatchReader:
        options = ReaderOptions.parse(raw_options)
        timeout = metadata_timeout_s(raw_options, metadata.DEFAULT_TIMEOUT_S)
        with metadata.OffsetReader(options.consumer_config, timeout) as offsets:
            partitions = metadata.resolve_subscription(options.subscription, offsets.topic_partitions())
            marks = offsets.watermarks(partitions)
        ranges = split_ranges(resolve_ranges(options, marks), options.min_partitions)
        log.info("read planned %s", kv(partitions=len(partitions), tasks=len(ranges),
                                       records=sum(r.size for r in ranges)))
        return cls(options, ranges)

    def partitions(self):
        return [KafkaInputPartition(i, r) for i, r in enumerate(self.ranges)]

    # --- tasks ------------------------------------------------------------------------------------------------
    def read(self, partition: KafkaInputPartition):
        r = partition.offset_range
        if r.size == 0:
            return
        yield from RangeConsumer(self.options, r).batches()


class RangeConsumer:
    """Reads one offset range with one librdkafka consumer and turns messages into Arrow batches."""

    def __init__(self, options: ReaderOptions, offset_range: OffsetRange):
        self.options = options
        self.range = offset_range

    def batches(self):
        import pyarrow as pa
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as CkTopicPartition

        r, opts = self.range, self.options
        config = {**opts.consumer_config, "group.id": f"kafkatier-spark-{uuid.uuid4().hex[:12]}",
                  "auto.offset.reset": "error" if opts.fail_on_data_loss else "earliest"}
        consumer = Consumer(config)
        schema = _arrow_schema(opts.include_headers)
        pending: list = []
        position = r.from_offset
        started = last_progress = time.monotonic()
        try:
            consumer.assign([CkTopicPartition(r.tp.topic, r.tp.partition, r.from_offset)])
            while position < r.until_offset:
                # librdkafka's consume() returns when it has ``num_messages`` or the timeout ran out: ask for
                # no more than the range still holds, so its last records (or the end-of-partition event, when
                # transaction markers take offsets) end the wait instead of the timeout.
                msgs = consumer.consume(num_messages=min(CONSUME_BATCH, r.until_offset - position),
                                        timeout=CONSUME_WAIT_S)
                good, errors = _split_errors(msgs)
                if errors:
                    self._check_errors(m.error() for m in errors)
                    # The end of the partition past the range: the range's last offsets were transaction
                    # markers or aborted records, which a consumer never returns.
                    if any(m.offset() is not None and m.offset() >= r.until_offset for m in errors):
                        position = r.until_offset
                if good and good[-1].offset() >= r.until_offset - 1:
                    good = [m for m in good if m.offset() < r.until_offset]
                    position = r.until_offset                 # records past the range arrived: done
                if good:
                    position = max(position, good[-1].offset() + 1)
                    last_progress = time.monotonic()
                    pending += good
                elif time.monotonic() - last_progress > opts.poll_timeout_s:
                    if opts.fail_on_data_loss:
                        raise DataLossError(f"offsets [{position}, {r.until_offset}) of {r.tp} did not arrive within "
                                            f"{opts.poll_timeout_s:g} s (kafkaConsumer.pollTimeoutMs)")
                    log.warning("range ended early %s", kv(partition=r.tp, position=position, until=r.until_offset))
                    break
                while len(pending) >= opts.batch_rows:
                    chunk, pending = pending[:opts.batch_rows], pending[opts.batch_rows:]
                    yield _to_arrow(chunk, r.tp, schema, opts.include_headers, pa)
            if pending:
                yield _to_arrow(pending, r.tp, schema, opts.include_headers, pa)
            log.info("task read %s", kv(partition=r.tp, offsets=f"{r.from_offset}..{r.until_offset}",
                                        seconds=round(time.monotonic() - started, 3)))
        finally:
            consumer.close()

    def _check_errors(self, errors) -> None:
        """End of partition is expected; a reset means the offsets are gone; anything else not fatal is a
        transient error librdkafka retries itself (a leader change, a broker down)."""
        from confluent_kafka import KafkaError

        for err in errors:
            code = err.code()
            if code == KafkaError._PARTITION_EOF:
                continue
            if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                raise DataLossError(f"offsets of {self.range.tp} from {self.range.from_offset} are gone "
                                    f"(retention or DeleteRecords) while reading: {err}. Set failOnDataLoss to "
                                    "false to skip lost offsets.")
            if err.fatal():
                raise RuntimeError(f"kafkatier source: reading {self.range.tp}: {err}")
            log.info("consumer error (retried by the client) %s", kv(partition=self.range.tp, error=err))


def _split_errors(msgs: list) -> tuple[list, list]:
    """(records, error events) of one consume(); the common case (no error) costs no Python frame per message.
    ``KafkaError`` cannot be compared with ``==`` to None (it raises), hence ``is_not``."""
    from confluent_kafka import Message

    if not any(map(is_not, map(Message.error, msgs), repeat(None))):
        return msgs, []
    good, errors = [], []
    for m in msgs:
        (good if m.error() is None else errors).append(m)
    return good, errors


def _arrow_schema(include_headers: bool):
    import pyarrow as pa

    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
              ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
    return pa.schema(fields)


def _to_arrow(msgs: list, tp: TopicPartition, schema, include_headers: bool, pa):
    """One Arrow batch from messages of one partition: each column a list built by ``map`` over a C method of
    ``Message`` (no Python frame per message), then one conversion per column; the timestamps' (type, ms)
    tuples become an Arrow struct whose fields are converted by Arrow compute."""
    import pyarrow.compute as pc
    from confluent_kafka import Message

    n = len(msgs)
    stamps = pa.array(list(map(Message.timestamp, msgs)), pa.struct([("type", pa.int32()), ("ms", pa.int64())]))
    columns = [
        pa.array(list(map(Message.key, msgs)), pa.binary()),
        pa.array(list(map(Message.value, msgs)), pa.binary()),
        pa.array([tp.topic] * n, pa.string()),
        pa.array([tp.partition] * n, pa.int32()),
        pa.array(list(map(Message.offset, msgs)), pa.int64()),
        pc.multiply(stamps.field(1), 1000).cast(pa.timestamp("us", tz="UTC")),
        # librdkafka: 1 = CreateTime, 2 = LogAppendTime; Spark: 0 = CreateTime, 1 = LogAppendTime.
        pc.subtract(stamps.field(0), 1),
    ]
    if include_headers:
        # Spark's source gives null, not an empty array, for a record without headers.
        columns.append(pa.array([[{"key": k, "value": v} for k, v in h] if (h := m.headers()) else None
                                 for m in msgs], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
