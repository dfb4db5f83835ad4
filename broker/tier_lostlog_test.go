package broker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceAcked writes n records named prefix-i to topic partition 0 with
// acks=all, one at a time, and records the offset each acknowledgement
// names.
func produceAcked(t *testing.T, b *Broker, topic, prefix string, n int, acked map[int64]string) {
	t.Helper()
	cl := testClient(t, b, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		v := fmt.Sprintf("%s-%d", prefix, i)
		r, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v), Partition: 0}).First()
		if err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
		if old, dup := acked[r.Offset]; dup {
			t.Fatalf("%s acknowledged at offset %d, which %s was acknowledged at", v, r.Offset, old)
		}
		acked[r.Offset] = v
	}
}

// TestLostLocalLogStartsAtBucketEnd (issue 20 item 3): a single node whose
// logs/ directory is lost while its metadata and bucket survive restarts
// the partition's log at the bucket's end, not at 0: new acknowledged
// records get offsets the bucket does not hold, and every record, before
// the loss and after, is read back once at the offset its acknowledgement
// named, the old ones from the bucket.
func TestLostLocalLogStartsAtBucketEnd(t *testing.T) {
	dir := t.TempDir()
	store := tierStores[1].open(t) // in-process S3
	idle := func(c *Config) { c.Tier.IdleUpload = 50 * time.Millisecond }
	b := tieredBroker(t, dir, store, idle)
	createTopic(t, testAdmin(t, b), "lost", 1, map[string]*string{"segment.bytes": ptr("4096")})
	acked := make(map[int64]string)
	produceAcked(t, b, "lost", "before", 200, acked)
	p := b.partition("lost", 0)
	end := p.Log().EndOffset()
	// The idle roll sends the active segment up too: the bucket holds
	// every acknowledged record.
	waitFor(t, time.Minute, "every record uploaded", func() bool { return p.RemoteEnd() == end })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "logs")); err != nil {
		t.Fatal(err)
	}

	b = tieredBroker(t, dir, store, idle)
	before := len(acked)
	produceAcked(t, b, "lost", "after", 50, acked)
	if len(acked) != before+50 {
		t.Fatalf("%d offsets acknowledged twice", before+50-len(acked))
	}
	for off, v := range acked {
		if v[:5] == "after" && off < end {
			t.Fatalf("%s acknowledged at %d, below the bucket's end %d: an offset the bucket holds", v, off, end)
		}
	}
	p = b.partition("lost", 0)
	if p.Log().StartOffset() != end {
		t.Errorf("local log starts at %d, want the bucket's end %d", p.Log().StartOffset(), end)
	}

	cl := testClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"lost": {0: kgo.NewOffset().AtStart()}}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seen := make(map[int64]bool)
	for len(seen) < len(acked) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read back %d of %d records", len(seen), len(acked))
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch: %v", e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			want, ok := acked[r.Offset]
			switch {
			case !ok:
				t.Fatalf("record %q at offset %d, which no acknowledgement named", r.Value, r.Offset)
			case string(r.Value) != want:
				t.Fatalf("offset %d holds %q, acknowledged for %q", r.Offset, r.Value, want)
			case seen[r.Offset]:
				t.Fatalf("offset %d read twice", r.Offset)
			}
			seen[r.Offset] = true
		})
	}
}
