package partition

import (
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/segment"
)

// DeleteRecords on a partition that does not tier moves its local log
// start: to the offset asked, which must be within [log start, high
// watermark], or, for -1, to the high watermark. Records below it are no
// longer served, and the log start never moves back.
func TestDeleteRecordsUntiered(t *testing.T) {
	// Offsets 0-2 and 3-4 in two batches; follower 2 has fetched up to
	// 3, so the high watermark (3) is below the log end (5).
	cases := []struct {
		name      string
		before    int64 // a DeleteRecords first, unless 0
		offset    int64
		wantErr   error
		wantStart int64
	}{
		{name: "-1 is the high watermark", offset: -1, wantStart: 3},
		{name: "at the high watermark", offset: 3, wantStart: 3},
		{name: "inside a batch", offset: 2, wantStart: 2},
		{name: "at the log start changes nothing", offset: 0, wantStart: 0},
		{name: "above the high watermark", offset: 4, wantErr: kerr.OffsetOutOfRange, wantStart: 0},
		{name: "above the log end", offset: 9, wantErr: kerr.OffsetOutOfRange, wantStart: 0},
		{name: "negative other than -1", offset: -2, wantErr: kerr.OffsetOutOfRange, wantStart: 0},
		{name: "below the log start: it stays", before: 3, offset: 1, wantStart: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.open(t, batch("a", "b", "c"), batch("d", "e"))
			p.SetRole(leader(0, []int32{1, 2}, []int32{1, 2}))
			must(t, p.ReplicaFetched(2, -1, 3))
			if c.before != 0 {
				if _, err := p.DeleteRecords(t.Context(), c.before); err != nil {
					t.Fatal(err)
				}
			}
			start, err := p.DeleteRecords(t.Context(), c.offset)
			if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Fatalf("DeleteRecords(%d): %v, want %v", c.offset, err, c.wantErr)
			}
			if err == nil && start != c.wantStart {
				t.Fatalf("DeleteRecords(%d) = %d, want %d", c.offset, start, c.wantStart)
			}
			if ls, local := p.LogStartOffset(), p.Log().StartOffset(); ls != c.wantStart || local != c.wantStart {
				t.Fatalf("log start %d (local %d), want %d", ls, local, c.wantStart)
			}
			if hw, end := p.HighWatermark(), p.Log().EndOffset(); hw != 3 || end != 5 {
				t.Fatalf("high watermark %d, log end %d; want 3, 5", hw, end)
			}
			// A consumer below the new start is out of range; at it, it
			// reads (the batch that holds it, as Kafka does).
			if c.wantStart > 0 {
				below := NewFetchPart(p, c.wantStart-1, 1<<20, false, false)
				fetch(t, t.Context(), []*FetchPart{&below}, 1<<20, 0, 0)
				if !errors.Is(below.Err, segment.ErrOffsetOutOfRange) || below.LogStartOffset != c.wantStart {
					t.Fatalf("fetch below the log start: %v, log start %d; want out of range, %d", below.Err, below.LogStartOffset, c.wantStart)
				}
			}
			at := NewFetchPart(p, c.wantStart, 1<<20, false, false)
			got := fetch(t, t.Context(), []*FetchPart{&at}, 1<<20, 0, 0)
			want := []int64{0}
			if c.wantStart == 3 {
				want = nil // the high watermark: nothing committed to read yet
			}
			if !slices.Equal(got[0], want) || at.Err != nil {
				t.Fatalf("fetch at the log start %d: batches %v, %v; want %v", c.wantStart, got[0], at.Err, want)
			}
		})
	}
}
