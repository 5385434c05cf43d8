// KafkaJS group consumer (see docs/consumer-groups.md).  NODE_PATH points at the project-local node_modules.
const { Kafka, logLevel } = require('kafkajs')
const [bootstrap, group, topic, clientId, sessionMs] = process.argv.slice(2)
const kafka = new Kafka({ clientId, brokers: bootstrap.split(','), logLevel: logLevel.NOTHING })
const consumer = kafka.consumer({ groupId: group, sessionTimeout: Number(sessionMs), heartbeatInterval: 1000,
                                  rebalanceTimeout: 20000 })
const run = async () => {
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      const next = (BigInt(message.offset) + 1n).toString()
      // A failed commit throws: KafkaJS does not resolve the offset and reads the record again (or, after a
      // rebalance, its next owner does).
      await consumer.commitOffsets([{ topic, partition, offset: next }])
      process.stdout.write(JSON.stringify({ p: partition, o: Number(message.offset) }) + '\n')
    },
  })
}
run().catch((e) => { console.error(e); process.exit(1) })
