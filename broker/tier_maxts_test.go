package broker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestListOffsetsMaxTimestampIncludesBucket: ListOffsets -3 (KIP-734) is
// the first record carrying the largest timestamp of the whole log, also
// once that record is only in the bucket (issue 9 item 11). A later local
// record with the same timestamp does not win: the first one does, as in
// Kafka.
func TestListOffsetsMaxTimestampIncludesBucket(t *testing.T) {
	store := tierStores[0].open(t)
	b := tieredBroker(t, "", store)
	adm := testAdmin(t, b)
	createTopic(t, adm, "maxts", 1, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"local.retention.bytes": ptr("0"),
		"retention.ms":          ptr("-1"),
	})
	cl := testClient(t, b, kgo.DefaultProduceTopic("maxts"), kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(4096))
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	peak := time.Now().Add(30 * time.Minute).Truncate(time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n, first = 200, 10
	produce := func(ts time.Time) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 1000), Timestamp: ts}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		ts := base.Add(time.Duration(i) * time.Second)
		if i == first {
			ts = peak
		}
		produce(ts)
	}
	waitUploaded(t, b, "maxts", 1)
	p := b.partition("maxts", 0)
	waitFor(t, 10*time.Second, "local deletion", func() bool { return p.Log().StartOffset() > first })
	produce(peak) // the same timestamp again, in the local log

	listed, err := adm.ListMaxTimestampOffsets(ctx, "maxts")
	if err != nil {
		t.Fatal(err)
	}
	o, ok := listed.Lookup("maxts", 0)
	if !ok || o.Err != nil || o.Offset != first || o.Timestamp != peak.UnixMilli() {
		t.Fatalf("max timestamp: offset %d at %d (%v), want offset %d at %d, in the bucket", o.Offset, o.Timestamp, o.Err, first, peak.UnixMilli())
	}
}
