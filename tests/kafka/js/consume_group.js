// kafkajs: a consumer in GROUP reads TOPIC from the group's committed offsets until it
// has COUNT records or 30 s pass; prints the values read. FROM_BEGINNING is kafkajs'
// subscribe option: it also resolves a committed sentinel (-1, -2), as kafkajs does.
// Usage: node consume_group.js BOOTSTRAP TOPIC GROUP COUNT FROM_BEGINNING (true|false).
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, groupId, count, fromBeginning] = process.argv.slice(2);
  const kafka = new Kafka({ brokers: bootstrap.split(","), logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: fromBeginning === "true" });
  const values = [];
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, 30000);
    consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value.toString());
        if (values.length >= Number(count)) {
          clearTimeout(timer);
          resolve();
        }
      },
    });
  });
  await consumer.disconnect();
  console.log(JSON.stringify({ values }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
