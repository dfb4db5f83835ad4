# kafka-python round trip against Strata (cmd/strata/kafkapython_test.go):
# produce, consume in a group, commit, resume from the committed offsets.
# Usage: python3 kafka_python_roundtrip.py BOOTSTRAP TOPIC (3 partitions).
# Prints "ok", or a line starting "FAIL:" and exits 1; progress on stderr.
import sys, time
from kafka import KafkaProducer, KafkaConsumer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
group = topic + "-group"
deadline = time.time() + 30

def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)

def log(msg):
    print("%.2fs %s" % (time.time() - start, msg), file=sys.stderr)

start = time.time()

def produce(first, n):
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=5)
    futs = [p.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(first, first + n)]
    p.flush(10)
    for f in futs:
        f.get(10)
    p.close(5)

def take(c, want, secs):
    got = []
    until = min(deadline, time.time() + secs)
    while len(got) < want and time.time() < until:
        for batch in c.poll(timeout_ms=200).values():
            got.extend(batch)
    return got

# Produce 30, consume them all in a group, commit.
produce(0, 30)
a = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False)
a.subscribe([topic])
got = take(a, 30, 20)
if sorted(r.value for r in got) != sorted(b"v%d" % i for i in range(30)):
    fail("first consumer read %d records: %r" % (len(got), sorted(r.value for r in got)[:5]))
log('first consumer read 30')
a.commit()
a_parts = a.partitions_for_topic(topic)
a.close()

# A second consumer of the group, assigned every partition, resumes at the
# committed offsets: its first fetches (on fresh connections) find
# nothing, then it reads exactly the next 30.
b = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False)
b.assign([TopicPartition(topic, p) for p in a_parts])
if take(b, 1, 0.5):
    fail("second consumer read records below the committed offsets")
log('second consumer at the committed offsets, nothing below them')
produce(30, 30)
got = take(b, 30, 20)
vals = sorted(r.value for r in got)
if vals != sorted(b"v%d" % i for i in range(30, 60)):
    fail("second consumer read %d records, want v30..v59: %r" % (len(got), vals[:5]))
log('second consumer read 30')
b.commit()
parts = b.partitions_for_topic(topic)
tps = [TopicPartition(topic, p) for p in parts]
ends = b.end_offsets(tps)
committed = sum(b.committed(tp) or 0 for tp in tps)
if committed != 60 or sum(ends.values()) != 60:
    fail("committed %d, end offsets %r, want 60" % (committed, ends))
b.close()
print("ok")
