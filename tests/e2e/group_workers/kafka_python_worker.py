import json
import sys

from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.errors import CommitFailedError, KafkaError

bootstrap, group, topic, client_id, session_ms = sys.argv[1:6]
consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                         auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=int(session_ms),
                         heartbeat_interval_ms=1000, max_poll_records=10)
while True:
    for tp, msgs in consumer.poll(500).items():
        for m in msgs:
            try:
                consumer.commit({TopicPartition(m.topic, m.partition): OffsetAndMetadata(m.offset + 1, "", -1)})
            except (CommitFailedError, KafkaError):
                try:                # not committed: read it again (or its next owner will, after a rebalance)
                    consumer.seek(tp, m.offset)
                except Exception:  # noqa: BLE001 - no longer assigned
                    pass
                break
            print(json.dumps({"p": m.partition, "o": m.offset}), flush=True)
