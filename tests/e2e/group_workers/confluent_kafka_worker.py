import json
import sys

from confluent_kafka import Consumer, KafkaException, TopicPartition

bootstrap, group, topic, client_id, session_ms = sys.argv[1:6]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": 1000})
consumer.subscribe([topic])
while True:
    m = consumer.poll(0.5)
    if m is None or m.error():
        continue
    try:
        consumer.commit(message=m, asynchronous=False)
    except KafkaException:
        try:                        # not committed: read it again (or its next owner will, after a rebalance)
            consumer.seek(TopicPartition(m.topic(), m.partition(), m.offset()))
        except KafkaException:
            pass
        continue
    print(json.dumps({"p": m.partition(), "o": m.offset()}), flush=True)
