import asyncio
import json
import sys

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

bootstrap, group, topic, client_id, session_ms = sys.argv[1:6]


async def main() -> None:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                session_timeout_ms=int(session_ms), heartbeat_interval_ms=1000)
    await consumer.start()
    async for m in consumer:
        try:
            await consumer.commit({TopicPartition(m.topic, m.partition): m.offset + 1})
        except (CommitFailedError, KafkaError):
            try:                    # not committed: read it again (or its next owner will, after a rebalance)
                consumer.seek(TopicPartition(m.topic, m.partition), m.offset)
            except Exception:  # noqa: BLE001 - no longer assigned
                pass
            continue
        print(json.dumps({"p": m.partition, "o": m.offset}), flush=True)

asyncio.run(main())
