package broker

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"strata/tier/objstore"
)

// TestUploadStopsAtTheLastStableOffset: a segment holding a transaction
// still open is not uploaded (so local retention cannot delete it and
// leave read_committed readers only a bucket copy without the abort that
// follows), however many segments roll after it; once the transaction
// ends, uploads catch up and the bucket's copy carries the abort.
func TestUploadStopsAtTheLastStableOffset(t *testing.T) {
	store, err := objstore.NewDir(filepath.Join(t.TempDir(), "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	b := tieredBroker(t, "", store)
	cl := testClient(t, b)
	id := createTopic(t, kadmFor(cl), "lsoup", 1, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"remote.storage.enable": ptr("true"),
		"local.retention.bytes": ptr("1"),
	}).ID
	p := b.partition("lsoup", 0)
	now := time.Now().UnixMilli()
	mustAppendTo(t, p, rawBatch(-1, -1, -1, now, "plain0"))          // 0
	mustAppendTo(t, p, txnRawBatch(7, 0, 0, now, "OPEN-TXN-RECORD")) // 1: left open
	big := strings.Repeat("x", 1000)
	for i := range 60 { // several segments roll past the open transaction
		mustAppendTo(t, p, rawBatch(-1, -1, -1, now, fmt.Sprint(i, big)))
	}
	if lso := p.LastStableOffset(); lso != 1 {
		t.Fatalf("LSO %d, want 1", lso)
	}
	// Several upload passes (every 50 ms in tests) go by.
	time.Sleep(20 * b.cfg.Tier.UploadInterval)
	if end := p.RemoteEnd(); end > 1 {
		t.Fatalf("bucket ends at %d with a transaction open at 1: a segment holding it was uploaded", end)
	}
	if start := p.Log().StartOffset(); start > 1 {
		t.Fatalf("local log starts at %d: the open transaction's segment was deleted", start)
	}
	mustMarkerTo(t, p, 7, 0, false)
	waitUploaded(t, b, "lsoup", 1)
	waitFor(t, time.Minute, "local retention after the uploads", func() bool { return p.Log().StartOffset() > 1 })
	rc := fetchIsolated(t, cl, id, 0, 1, 0)
	for _, o := range batchOffsets(rc.RecordBatches) {
		if o == 1 {
			aborted := false
			for _, a := range rc.AbortedTransactions {
				aborted = aborted || a.ProducerID == 7 && a.FirstOffset <= 1
			}
			if !aborted {
				t.Fatalf("read_committed from the bucket returns the aborted record at 1 without naming its transaction aborted: %+v", rc.AbortedTransactions)
			}
		}
	}
}
