// kafkajs: admin.resetOffsets({earliest: true}) on a group with commits, then the
// group's committed offsets as kafkajs' admin reads them.
// Usage: node reset_offsets.js BOOTSTRAP TOPIC GROUP; prints one JSON line.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, groupId] = process.argv.slice(2);
  const kafka = new Kafka({ brokers: bootstrap.split(","), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  await admin.resetOffsets({ groupId, topic, earliest: true });
  const committed = await admin.fetchOffsets({ groupId, topics: [topic] });
  await admin.disconnect();
  const offsets = committed[0].partitions.map((p) => [p.partition, p.offset]);
  console.log(JSON.stringify({ offsets }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
