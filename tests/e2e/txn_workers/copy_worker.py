"""A consume-transform-produce job with exactly-once semantics (KIP-98 / KIP-447), for the transactions e2e
tests: reads ``input`` in a consumer group (read_committed), writes each record's value upper-cased to ``output``
and commits its input offsets in the same transaction (``send_offsets_to_transaction``), a few records per
transaction.  Prints ``committed N`` after each commit.  Killed with SIGKILL at any point and restarted with the
same transactional id, the output must hold every input record exactly once."""
import sys

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, group, source, sink, txn_id, per_txn = sys.argv[1:7]
per_txn = int(per_txn)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "isolation.level": "read_committed",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
producer.init_transactions(60)
consumer.subscribe([source])
done = 0
while True:
    batch = [m for m in consumer.consume(per_txn, 1.0) if m.error() is None]
    if not batch:
        continue
    producer.begin_transaction()
    for m in batch:
        producer.produce(sink, key=m.key(), value=m.value().upper(), partition=m.partition())
    offsets = {}
    for m in batch:
        offsets[(m.topic(), m.partition())] = m.offset() + 1
    producer.send_offsets_to_transaction([TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                         consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    done += len(batch)
    print(f"committed {done}", flush=True)
