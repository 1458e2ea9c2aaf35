// @platformatic/kafka against the listener: admin (create, list, delete topics), produce,
// a consumer group that reads and commits (a second member of the group resumes after the
// commit), and a transactional producer (one committed, one aborted transaction, read back
// read_committed). Usage: node platformatic.js BOOTSTRAP PREFIX; prints one JSON line.
const {
  Admin,
  Consumer,
  Producer,
  FetchIsolationLevels,
  ProduceAcks,
  stringSerializers,
  stringDeserializers,
} = require("@platformatic/kafka");

const bootstrapBrokers = process.argv[2].split(",");
const prefix = process.argv[3];
const base = { bootstrapBrokers, retries: 5, retryDelay: 200 };

// read from a fresh stream until `count` messages came, committing each when asked
async function readGroup(groupId, topics, mode, count, isolationLevel, commit) {
  const consumer = new Consumer({
    ...base,
    clientId: `${groupId}-reader`,
    groupId,
    deserializers: stringDeserializers,
    sessionTimeout: 10000,
    heartbeatInterval: 500,
    maxWaitTime: 200,
  });
  const stream = await consumer.consume({ topics, mode, autocommit: false, isolationLevel });
  const values = [];
  for await (const message of stream) {
    values.push(message.value);
    if (commit) await message.commit();
    if (values.length >= count) break;
  }
  await stream.close();
  await consumer.close(true);
  return values;
}

async function main() {
  const plain = `${prefix}-plain`;
  const txn = `${prefix}-txn`;
  const scratch = `${prefix}-scratch`;
  const admin = new Admin({ ...base, clientId: `${prefix}-admin` });
  await admin.createTopics({ topics: [plain, txn, scratch], partitions: 2, replicas: 1 });
  const listed = await admin.listTopics();
  await admin.deleteTopics({ topics: [scratch] });
  const afterDelete = await admin.listTopics();

  const producer = new Producer({
    ...base,
    clientId: `${prefix}-producer`,
    serializers: stringSerializers,
    acks: ProduceAcks.ALL,
  });
  const batch = (from, to) =>
    Array.from({ length: to - from }, (_, i) => ({ topic: plain, key: `k${from + i}`, value: `v${from + i}` }));
  await producer.send({ messages: batch(0, 10) });

  // the group reads all ten and commits each; a later member of the group starts after them
  const group = `${prefix}-group`;
  const firstRead = await readGroup(group, [plain], "earliest", 10, FetchIsolationLevels.READ_UNCOMMITTED, true);
  await producer.send({ messages: batch(10, 12) });
  const resumed = await readGroup(group, [plain], "committed", 2, FetchIsolationLevels.READ_UNCOMMITTED, true);
  await producer.close();

  const transactional = new Producer({
    ...base,
    clientId: `${prefix}-txn-producer`,
    serializers: stringSerializers,
    idempotent: true,
    transactionalId: `${prefix}-tid`,
    acks: ProduceAcks.ALL,
  });
  const committed = await transactional.beginTransaction();
  await committed.send({ messages: [0, 1, 2].map((i) => ({ topic: txn, value: `committed-${i}` })) });
  await committed.commit();
  const aborted = await transactional.beginTransaction();
  await aborted.send({ messages: [0, 1].map((i) => ({ topic: txn, value: `aborted-${i}` })) });
  await aborted.abort();
  const last = await transactional.beginTransaction();
  await last.send({ messages: [{ topic: txn, value: "last" }] });
  await last.commit();
  await transactional.close();
  const readCommitted = await readGroup(
    `${prefix}-txn-reader`, [txn], "earliest", 4, FetchIsolationLevels.READ_COMMITTED, false);
  await admin.close();

  console.log(
    JSON.stringify({
      listed: listed.filter((t) => t.startsWith(prefix)).sort(),
      afterDelete: afterDelete.filter((t) => t.startsWith(prefix)).sort(),
      firstRead: firstRead.sort(),
      resumed: resumed.sort(),
      readCommitted: readCommitted.sort(),
    }),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
