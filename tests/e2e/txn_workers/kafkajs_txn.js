// KafkaJS transactional producer and read_committed consumer (see docs/transactions.md).  NODE_PATH points at the
// project-local node_modules.  Commits the values c0..c4, aborts a0..a4, then reads the topic from the
// beginning with readUncommitted: false until it has the committed ones, and prints every value it read as JSON.
const { Kafka, logLevel } = require('kafkajs')
const [bootstrap, topic, txnId] = process.argv.slice(2)
const kafka = new Kafka({ clientId: txnId, brokers: bootstrap.split(','), logLevel: logLevel.NOTHING })
const run = async () => {
  const producer = kafka.producer({ transactionalId: txnId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const send = async (prefix, commit) => {
    const txn = await producer.transaction()
    await txn.send({ topic, messages: [0, 1, 2, 3, 4].map((i) => ({ value: `${prefix}${i}`, partition: i % 2 })) })
    if (commit) await txn.commit(); else await txn.abort()
  }
  await send('c', true)
  await send('a', false)
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `${txnId}-reader`, readUncommitted: false })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const seen = []
  await new Promise((resolve) => {
    consumer.run({
      eachMessage: async ({ message }) => {
        seen.push(message.value.toString())
        if (seen.filter((v) => v.startsWith('c')).length >= 5) resolve()
      },
    })
  })
  await consumer.disconnect()
  process.stdout.write(JSON.stringify(seen) + '\n')
}
run().catch((e) => { console.error(e); process.exit(1) })
