package broker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier/objstore"
)

// TestTieredWholeLogRetention: retention.bytes bounds the whole log, bucket
// included. The oldest remote segments leave the manifest (the earliest
// offset moves up), a consumer from the earliest offset reads a contiguous
// tail that ends at the log end, and the collector then deletes the
// dropped objects.
func TestTieredWholeLogRetention(t *testing.T) {
	const segBytes = 64 << 10
	store := tierStores[0].open(t)
	b := tieredBroker(t, "", store, func(c *Config) {
		shortOrphanGrace(c, time.Nanosecond)
		c.Tier.CollectInterval = 50 * time.Millisecond
	})
	createTopic(t, testAdmin(t, b), "bounded", 1, map[string]*string{
		"segment.bytes":         ptr("65536"),
		"retention.bytes":       ptr("524288"), // 8 segments
		"local.retention.bytes": ptr("131072"),
	})
	const n = 3000 // ~3 MB
	// Small batches, so segments are the size segment.bytes says.
	produceKeyed(t, b, "bounded", n, 1024, kgo.ProducerBatchMaxBytes(8<<10))
	waitUploaded(t, b, "bounded", 1)
	p := b.partition("bounded", 0)

	deadline := time.Now().Add(30 * time.Second)
	for {
		start := p.LogStartOffset()
		m, err := b.tier.Manifest(context.Background(), p.BucketName())
		if err != nil {
			t.Fatal(err)
		}
		remote := m.Totals().Bytes
		// Retention may keep one segment more than the bound, never less.
		if start > 0 && remote <= 524288+2*segBytes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention did not apply: log start %d, %d bytes in the bucket", start, remote)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cl := testClient(t, b)
	earliest := listOffset(t, cl, "bounded", -2)
	if earliest == 0 || earliest >= n {
		t.Fatalf("earliest offset %d after retention", earliest)
	}
	cons := testClient(t, b, kgo.ConsumeTopics("bounded"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := int64(-1)
	for next != n {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read up to %d of %d", next, n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		fs.EachRecord(func(r *kgo.Record) {
			if next == -1 {
				if r.Offset < earliest {
					t.Fatalf("first record at %d, below the earliest offset %d", r.Offset, earliest)
				}
			} else if r.Offset != next {
				t.Fatalf("offset %d after %d", r.Offset, next-1)
			}
			next = r.Offset + 1
		})
	}

	// The objects retention dropped are gone from the bucket once the
	// collector has run; the ones still listed are all there.
	deadline = time.Now().Add(30 * time.Second)
	for {
		m, _ := b.tier.Manifest(context.Background(), p.BucketName())
		objects := 0
		store.List(context.Background(), p.BucketName().SegmentsPrefix(), func(objstore.Attrs) error { objects++; return nil })
		if objects == int(m.Totals().Segments) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d objects in the bucket, manifest lists %d", objects, m.Totals().Segments)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
