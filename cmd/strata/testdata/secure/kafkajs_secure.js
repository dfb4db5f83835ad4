// kafkajs over TLS against Strata (cmd/strata/secure_clients_test.go):
// produce 20 records, read them back in a consumer group.
// Usage: node kafkajs_secure.js BOOTSTRAP TOPIC scram CA USER PASSWORD
//        node kafkajs_secure.js BOOTSTRAP TOPIC mtls CA CERT KEY
// Prints "ok", or a line starting "FAIL:" and exits 1.
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, mode, ca, a, b] = process.argv.slice(2);
const ssl = { ca: [fs.readFileSync(ca)] };
const conf = { clientId: 'kafkajs-secure', brokers: bootstrap.split(','), ssl, logLevel: logLevel.ERROR };
if (mode === 'scram') {
  conf.sasl = { mechanism: 'scram-sha-512', username: a, password: b };
} else {
  ssl.cert = fs.readFileSync(a);
  ssl.key = fs.readFileSync(b);
}

function fail(msg) {
  console.log('FAIL: ' + msg);
  process.exit(1);
}

async function main() {
  const kafka = new Kafka(conf);
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < 20; i++) messages.push({ value: 'js' + i });
  await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: topic + '-js' });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('read ' + got.length + ' records in 30s')), 30000);
    consumer.run({
      eachMessage: async ({ message }) => {
        got.push(message.value.toString());
        if (got.length >= 20) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  const want = [];
  for (let i = 0; i < 20; i++) want.push('js' + i);
  if (JSON.stringify(got.slice().sort()) !== JSON.stringify(want.sort())) fail('read ' + JSON.stringify(got));
  console.log('ok');
}

main().catch((e) => fail(String(e && e.stack || e)));
