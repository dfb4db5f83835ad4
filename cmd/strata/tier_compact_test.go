package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"strata/segment"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// TestTierStatusShowsCompaction: `tier status` shows, per partition, the
// cold tier's cleaned range [log start, cleaned offset), the dirty range
// after it and when the last compaction was published, from the bucket
// alone, in the table and in --json; "never" for a partition that was
// never compacted.
func TestTierStatusShowsCompaction(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	store, err := objstore.NewDir(filepath.Join(dataDir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tps := []format.TopicPartition{
		{Topic: "compacted", TopicID: [16]byte{0xcc, 15: 1}, Partition: 0},
		{Topic: "compacted", TopicID: [16]byte{0xcc, 15: 1}, Partition: 1},
	}
	for _, tp := range tps {
		l, err := segment.Open(t.TempDir(), segment.Config{SegmentBytes: 1024})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for i := range 30 {
			if _, err := l.Append(pagedTestBatch(fmt.Sprintf("record %d %s", i, strings.Repeat("x", 200))), 0); err != nil {
				t.Fatal(err)
			}
		}
		segs, err := l.ClosedSegments(0)
		if err != nil || len(segs) < 4 {
			t.Fatalf("%d closed segments, %v", len(segs), err)
		}
		for _, s := range segs {
			if _, err := tr.Upload(ctx, tp, s, 0); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Partition 0: its first two segments compacted into one object that
	// keeps every other batch.
	tp := tps[0]
	m, _ := tr.Manifest(ctx, tp)
	segs, err := tr.Segments(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	w := tr.NewSegmentWriter(tp, segs[0].BaseOffset, 0)
	for _, s := range segs[:2] {
		if err := tr.ReadLog(ctx, s, 0, func(b []byte) error {
			if h, _ := segment.ParseBatchHeader(b); h.BaseOffset%2 == 0 {
				return w.Append(b)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	seg, release, err := w.Finish(ctx, segs[1].LastOffset, nil)
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 11, 30, 12, 34, 56, 789e6, time.UTC)
	cleaned := segs[1].LastOffset + 1
	if _, err := tr.ReplaceCompacted(ctx, tp, []format.RemoteSegment{seg}, 0, cleaned, when); err != nil {
		t.Fatal(err)
	}
	release()
	end := m.EndOffset()

	noBroker := []string{"--bootstrap", "127.0.0.1:1", "--timeout", "2s", "--data-dir", dataDir}
	var rows []partitionStatus
	if err := json.Unmarshal([]byte(cliOK(t, nil, append([]string{"tier", "status", "compacted", "--json"}, noBroker...)...)), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("tier status: %+v", rows)
	}
	r := rows[0]
	if r.Cleaned == nil || *r.Cleaned != (offsetRange{0, cleaned}) || r.Dirty == nil || *r.Dirty != (offsetRange{cleaned, end}) ||
		r.LastCompaction != "2026-11-30T12:34:56.789Z" {
		t.Errorf("compacted partition: cleaned %v, dirty %v, last compaction %q; want [0, %d), [%d, %d) at 2026-11-30T12:34:56.789Z", r.Cleaned, r.Dirty, r.LastCompaction, cleaned, cleaned, end)
	}
	r = rows[1]
	if r.Cleaned == nil || *r.Cleaned != (offsetRange{0, 0}) || r.Dirty == nil || *r.Dirty != (offsetRange{0, *r.RemoteEnd}) || r.LastCompaction != "never" {
		t.Errorf("never compacted partition: cleaned %v, dirty %v, last compaction %q", r.Cleaned, r.Dirty, r.LastCompaction)
	}

	table := cliOK(t, nil, append([]string{"tier", "status", "compacted"}, noBroker...)...)
	for _, want := range []string{"CLEANED", "DIRTY", "LAST-COMPACTION", fmt.Sprintf("[0, %d)", cleaned), fmt.Sprintf("[%d, %d)", cleaned, end), "2026-11-30T12:34:56.789Z", "never"} {
		if !strings.Contains(table, want) {
			t.Errorf("tier status table lacks %q:\n%s", want, table)
		}
	}
}
