# confluent-kafka-python (librdkafka) over TLS against Strata
# (cmd/strata/secure_clients_test.go): produce 20 records, read them back
# in a consumer group.
# Usage: python3 confluent_secure.py BOOTSTRAP TOPIC scram CA USER PASSWORD
#        python3 confluent_secure.py BOOTSTRAP TOPIC mtls CA CERT KEY
# Prints "ok", or a line starting "FAIL:" and exits 1.
import sys, time
from confluent_kafka import Producer, Consumer

bootstrap, topic, mode, ca = sys.argv[1:5]
conf = {"bootstrap.servers": bootstrap, "ssl.ca.location": ca}
if mode == "scram":
    conf.update({"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                 "sasl.username": sys.argv[5], "sasl.password": sys.argv[6]})
else:
    conf.update({"security.protocol": "SSL", "ssl.certificate.location": sys.argv[5],
                 "ssl.key.location": sys.argv[6]})

def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)

errors = []
def delivered(err, msg):
    if err is not None:
        errors.append(err)

p = Producer(dict(conf, acks="all"))
for i in range(20):
    p.produce(topic, value=b"ck%d" % i, on_delivery=delivered)
left = p.flush(30)
if left or errors:
    fail("produce: %d undelivered, errors %r" % (left, errors[:3]))

c = Consumer(dict(conf, **{"group.id": topic + "-ck", "auto.offset.reset": "earliest",
                           "enable.auto.commit": False}))
c.subscribe([topic])
got = []
deadline = time.time() + 30
while len(got) < 20 and time.time() < deadline:
    m = c.poll(0.5)
    if m is None:
        continue
    if m.error():
        fail("consume: %s" % m.error())
    got.append(m.value())
c.close()
if sorted(got) != sorted(b"ck%d" % i for i in range(20)):
    fail("read %d records, want 20" % len(got))
print("ok")
