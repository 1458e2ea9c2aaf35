// kafkajs transactional producer: one committed and one aborted transaction, then a
// second producer with the same transactional id fences the first (its next send fails).
// Usage: node transactions.js BOOTSTRAP TOPIC TXN_ID; prints one JSON line.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, transactionalId] = process.argv.slice(2);
  const kafka = new Kafka({
    brokers: bootstrap.split(","),
    logLevel: logLevel.NOTHING,
    retry: { retries: 2 },
  });
  const options = { transactionalId, idempotent: true, maxInFlightRequests: 1 };
  const first = kafka.producer(options);
  await first.connect();

  const committed = await first.transaction();
  await committed.send({ topic, messages: [0, 1, 2].map((i) => ({ value: `committed-${i}` })) });
  await committed.commit();

  const aborted = await first.transaction();
  await aborted.send({ topic, messages: [0, 1].map((i) => ({ value: `aborted-${i}` })) });
  await aborted.abort();

  const zombie = await first.transaction();
  const second = kafka.producer(options);
  await second.connect();
  // kafkajs sends the transactional InitProducerId at its first transaction(): the epoch
  // bump there fences the first producer
  const last = await second.transaction();
  let fenced = null;
  try {
    await zombie.send({ topic, messages: [{ value: "zombie" }] });
    await zombie.commit();
  } catch (e) {
    fenced = e.type || e.name;
  }
  await last.send({ topic, messages: [{ value: "after-fencing" }] });
  await last.commit();
  await second.disconnect();
  await first.disconnect().catch(() => {});
  console.log(JSON.stringify({ fenced }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
