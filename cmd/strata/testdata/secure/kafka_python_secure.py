# kafka-python over TLS against Strata (cmd/strata/secure_clients_test.go):
# produce 20 records, read them back in a consumer group.
# Usage: python3 kafka_python_secure.py BOOTSTRAP TOPIC scram CA USER PASSWORD
#        python3 kafka_python_secure.py BOOTSTRAP TOPIC mtls CA CERT KEY
# Prints "ok", or a line starting "FAIL:" and exits 1.
import sys, time
from kafka import KafkaProducer, KafkaConsumer

bootstrap, topic, mode, ca = sys.argv[1:5]
if mode == "scram":
    sec = dict(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
               sasl_plain_username=sys.argv[5], sasl_plain_password=sys.argv[6],
               ssl_cafile=ca)
else:
    sec = dict(security_protocol="SSL", ssl_cafile=ca, ssl_certfile=sys.argv[5],
               ssl_keyfile=sys.argv[6])

def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)

try:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **sec)
    futs = [p.send(topic, value=b"py%d" % i) for i in range(20)]
    p.flush(20)
    for f in futs:
        f.get(10)
    p.close(5)
except Exception as e:
    fail("produce: %r" % e)

c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=topic + "-py", auto_offset_reset="earliest",
                  enable_auto_commit=False, **sec)
c.subscribe([topic])
got = []
deadline = time.time() + 30
while len(got) < 20 and time.time() < deadline:
    for batch in c.poll(timeout_ms=200).values():
        got.extend(r.value for r in batch)
c.close()
want = sorted(b"py%d" % i for i in range(20))
if sorted(got) != want:
    fail("read %d records, want 20: %r" % (len(got), sorted(got)[:5]))
print("ok")
