package broker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier/objstore"
)

// TestFailedDeleteRecordsLeavesNoOrphanPage: issue 20 item 10. A
// DeleteRecords whose log start falls inside a manifest page rewrites that
// page, stores it, then publishes the root naming it. When the root's
// publish fails, the page is an orphan: on a partition with nothing more
// to upload, no later change would make the collector look at it again,
// so the failure itself must, and the page goes after the grace.
func TestFailedDeleteRecordsLeavesNoOrphanPage(t *testing.T) {
	hs := &hookStore{Store: tierStores[0].open(t)}
	b := tieredBroker(t, "", hs, func(c *Config) {
		c.Tier.CollectInterval = 20 * time.Millisecond
		shortOrphanGrace(c, 200*time.Millisecond)
	})
	adm := testAdmin(t, b)
	createTopic(t, adm, "drpage", 1, map[string]*string{
		"segment.bytes": ptr("1024"), "retention.ms": ptr("-1"), "retention.bytes": ptr("-1"),
	})
	// Over 32 segments: the oldest are in a manifest page.
	produceKeyed(t, b, "drpage", 500, 100, kgo.ProducerBatchMaxBytes(1024))
	waitUploaded(t, b, "drpage", 1)
	p := b.partition("drpage", 0)
	ctx := context.Background()
	m, err := b.tier.Manifest(ctx, p.BucketName())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Pages) == 0 {
		t.Fatalf("manifest has no page (%d inline segments): the test needs one", len(m.Tail))
	}
	first := m.Pages[0]
	if first.Level != 0 || first.LastOffset-first.BaseOffset < 4 {
		t.Fatalf("first page [%d, %d] at level %d: the test needs a leaf page of several segments", first.BaseOffset, first.LastOffset, first.Level)
	}
	// The uploads' own drops are collected by now.
	time.Sleep(time.Second)
	pages := func() map[string]bool {
		keys := map[string]bool{}
		if err := hs.List(ctx, p.BucketName().PagesPrefix(), func(a objstore.Attrs) error {
			keys[a.Key] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	before := pages()

	var failing atomic.Bool
	failing.Store(true)
	hs.setHook(func(_ context.Context, op, key string) error {
		if failing.Load() && op == "create" && strings.Contains(key, "/drpage-") && strings.Contains(key, "/manifests/") {
			return errors.New("injected: root publish fails")
		}
		return nil
	})
	mid := (first.BaseOffset + first.LastOffset) / 2
	if _, err := deleteRecords(t, adm, "drpage", 0, mid); err == nil {
		t.Fatal("DeleteRecords succeeded with its root's publish failing")
	}
	failing.Store(false)
	var orphans []string
	for k := range pages() {
		if !before[k] {
			orphans = append(orphans, k)
		}
	}
	if len(orphans) == 0 {
		t.Fatal("the failed DeleteRecords stored no page: the test does not reach the case")
	}
	waitFor(t, 30*time.Second, "the page of the unpublished root to be collected", func() bool {
		now := pages()
		for _, k := range orphans {
			if now[k] {
				return false
			}
		}
		return true
	})
	// Nothing the manifest names went with it: every record still reads.
	if got := startOffset(t, adm, "drpage"); got != 0 {
		t.Fatalf("earliest offset %d after a failed DeleteRecords, want 0", got)
	}
}

// TestBucketLogStartReachesTheLocalLog: a replica that reads a manifest
// whose log start is above its own local start (DeleteRecords published it
// to the bucket, and this replica's fetches, capped at what the bucket
// holds, had not moved its start yet) moves its local start there, so that
// as a new leader it never serves the deleted records.
func TestBucketLogStartReachesTheLocalLog(t *testing.T) {
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := tieredBroker(t, "", store)
	adm := testAdmin(t, b)
	createTopic(t, adm, "bls", 1, map[string]*string{"segment.bytes": ptr("4096")})
	produceKeyed(t, b, "bls", 300, 100, kgo.ProducerBatchMaxBytes(1500))
	waitUploaded(t, b, "bls", 1)
	p := b.partition("bls", 0)
	epoch, _ := p.LeaderEpochIfLeading()
	hw := p.HighWatermark()
	// The bucket's log start moves without this replica's local log.
	release := p.HoldUploads()
	m, err := b.tier.AdvanceLogStart(context.Background(), p.BucketName(), hw-10, epoch)
	if err != nil {
		release()
		t.Fatal(err)
	}
	if p.Log().StartOffset() >= hw-10 {
		release()
		t.Fatalf("local start %d already at the new start %d: the test needs it below", p.Log().StartOffset(), hw-10)
	}
	p.SetRemote(m)
	release()
	if got := p.Log().StartOffset(); got != hw-10 {
		t.Fatalf("local log start %d after reading a manifest starting at %d", got, hw-10)
	}
	if got := startOffset(t, adm, "bls"); got != hw-10 {
		t.Fatalf("ListOffsets earliest %d, want the bucket's log start %d", got, hw-10)
	}
}
