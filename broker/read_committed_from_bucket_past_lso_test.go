package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"strata/tier/objstore"
)

// Proof: a read_committed fetch served from the bucket is not bounded by
// the last stable offset. Segments are uploaded once below the high
// watermark (not the LSO), local retention then deletes them, and
// readAt's bucket path ignores its limit: the consumer gets the records of
// a transaction that is still open (and may later abort).
func TestRV3ReadCommittedFromBucketPastLSO(t *testing.T) {
	store, err := objstore.NewDir(filepath.Join(t.TempDir(), "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	// Uploads are the test's (below): the broker's own stop at the LSO.
	b := tieredBroker(t, "", store, func(c *Config) { c.Tier.UploadInterval = time.Hour })
	cl := testClient(t, b)
	id := createTopic(t, kadmFor(cl), "rclso", 1, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"remote.storage.enable": ptr("true"),
		"local.retention.bytes": ptr("1"),
	}).ID
	p := b.partition("rclso", 0)
	now := time.Now().UnixMilli()
	mustAppendTo(t, p, rawBatch(-1, -1, -1, now, "plain0"))          // 0
	mustAppendTo(t, p, txnRawBatch(7, 0, 0, now, "OPEN-TXN-RECORD")) // 1: transaction left open
	big := strings.Repeat("x", 1000)
	for i := 0; i < 60; i++ { // roll several segments past the open transaction
		mustAppendTo(t, p, rawBatch(-1, -1, -1, now, fmt.Sprint(i, big)))
	}
	if lso := p.LastStableOffset(); lso != 1 {
		t.Fatalf("LSO %d, want 1", lso)
	}
	// A bucket written by a version that bounded uploads by the high
	// watermark alone holds the open transaction.
	segs, err := p.Log().ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, seg := range segs {
		m, err := b.tier.Upload(context.Background(), p.BucketName(), seg, p.LeaderEpoch())
		if err != nil {
			t.Fatal(err)
		}
		p.SetRemote(m)
	}
	if err := p.Log().Maintain(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "segment with the open transaction deleted locally", func() bool { return p.Log().StartOffset() > 1 })

	rc := fetchIsolated(t, cl, id, 0, 1, 0)
	offs := batchOffsets(rc.RecordBatches)
	t.Logf("read_committed at 0: LSO %d, HW %d, batches %v, aborted %+v", rc.LastStableOffset, rc.HighWatermark, offs, rc.AbortedTransactions)
	// The coordinator now aborts producer 7's transaction: what the
	// consumer was handed as committed is an aborted record.
	mustMarkerTo(t, p, 7, 0, false)
	after := fetchIsolated(t, cl, id, 0, 1, 0)
	t.Logf("after the ABORT marker: read_committed at 0 names aborted %+v", after.AbortedTransactions)
	for _, o := range offs {
		if o >= rc.LastStableOffset {
			t.Fatalf("read_committed fetch returned batch at offset %d at or past the LSO %d (open transaction of producer 7 at 1); aborted list %+v",
				o, rc.LastStableOffset, rc.AbortedTransactions)
		}
	}
}
