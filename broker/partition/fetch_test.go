package partition

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/segment"
)

// fetch runs Fetch over parts with a response limit of maxBytes and
// returns what each part got, by the base offsets of its batches.
func fetch(t *testing.T, ctx context.Context, parts []*FetchPart, maxBytes, minBytes int, wait time.Duration) [][]int64 {
	t.Helper()
	return spans(t, parts, Fetch(ctx, parts, nil, maxBytes, minBytes, wait))
}

// spans returns the base offsets of the batches each part got in buf,
// checking that the parts' spans tile it.
func spans(t *testing.T, parts []*FetchPart, buf []byte) [][]int64 {
	t.Helper()
	out := make([][]int64, len(parts))
	prev := 0
	for i, fp := range parts {
		if fp.Start > fp.End || fp.End > len(buf) {
			t.Fatalf("part %d spans [%d, %d) of %d bytes", i, fp.Start, fp.End, len(buf))
		}
		if fp.End > fp.Start && fp.Start != prev {
			t.Fatalf("part %d starts at %d, after %d: parts must follow each other", i, fp.Start, prev)
		}
		prev = max(prev, fp.End)
		out[i] = batchBases(t, buf[fp.Start:fp.End])
	}
	if prev != len(buf) {
		t.Fatalf("parts span %d of %d bytes", prev, len(buf))
	}
	return out
}

// A fetch with minBytes waits until there is that much to read, or its
// wait passes: what wakes it is the high watermark moving, not an append
// the ISR does not have yet.
func TestFetchLongPoll(t *testing.T) {
	cases := []struct {
		name     string
		isr      []int32
		offset   int64
		minBytes int
		wait     time.Duration
		then     func(p *Partition, cancel context.CancelFunc)
		want     []int64
		wantHW   int64
	}{
		{name: "minBytes 0 answers at once", isr: []int32{1}, offset: 3, wait: time.Minute, wantHW: 3},
		{name: "records there answer at once", isr: []int32{1}, offset: 0, minBytes: 1, wait: time.Minute, want: []int64{0}, wantHW: 3},
		{
			name: "an append on a lone leader wakes it", isr: []int32{1}, offset: 3, minBytes: 1, wait: time.Minute,
			then:   func(p *Partition, _ context.CancelFunc) { mustAppend(t, p, batch("d", "e")) },
			want:   []int64{3},
			wantHW: 5,
		},
		{
			name: "an append the ISR does not have yet does not; the follower's fetch does", isr: []int32{1, 2}, offset: 3, minBytes: 1, wait: time.Minute,
			then: func(p *Partition, _ context.CancelFunc) {
				mustAppend(t, p, batch("d", "e"))
				if hw := p.HighWatermark(); hw != 3 {
					t.Errorf("high watermark %d before the follower fetched, want 3", hw)
				}
				must(t, p.ReplicaFetched(2, -1, 5))
			},
			want:   []int64{3},
			wantHW: 5,
		},
		{name: "nothing comes within the wait", isr: []int32{1}, offset: 3, minBytes: 1, wait: 30 * time.Millisecond, wantHW: 3},
		{
			name: "the request ends", isr: []int32{1}, offset: 3, minBytes: 1, wait: time.Minute,
			then:   func(_ *Partition, cancel context.CancelFunc) { cancel() },
			wantHW: 3,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.open(t, batch("a", "b", "c"))
			p.SetRole(leader(0, []int32{1, 2}, c.isr))
			if len(c.isr) > 1 {
				must(t, p.ReplicaFetched(2, -1, 3))
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			fp := NewFetchPart(p, c.offset, 1<<20, false, false)
			parts := []*FetchPart{&fp}
			done := make(chan []byte, 1)
			go func() { done <- Fetch(ctx, parts, nil, 1<<20, c.minBytes, c.wait) }()
			if c.then != nil {
				eventually(t, "the long poll", func() bool { return p.Waiters() == 1 })
				c.then(p, cancel)
			}
			var got [][]int64
			select {
			case buf := <-done:
				got = spans(t, parts, buf)
			case <-time.After(5 * time.Second):
				t.Fatal("Fetch still waiting")
			}
			if !slices.Equal(got[0], c.want) || fp.HighWatermark != c.wantHW || fp.Err != nil {
				t.Fatalf("got batches %v, high watermark %d, error %v; want %v, %d", got[0], fp.HighWatermark, fp.Err, c.want, c.wantHW)
			}
			if w := p.Waiters(); w != 0 {
				t.Fatalf("%d waiters left behind", w)
			}
		})
	}
}

// maxBytes bounds the whole answer, each part's MaxBytes its own, but the
// first batch of the first partition that has any goes whole whatever its
// size (KIP-74); a later partition is cut back to whole batches.
func TestFetchMaxBytesAcrossParts(t *testing.T) {
	value := strings.Repeat("v", 100)
	B := len(batch(value)) // every batch here is this size
	cases := []struct {
		name       string
		offsets    [2]int64
		partMax    int
		maxBytes   int
		want0      []int64
		want1      []int64
		wantLength int
	}{
		{name: "everything fits", partMax: 10 * B, maxBytes: 10 * B, want0: []int64{0, 1, 2}, want1: []int64{0, 1, 2}},
		{name: "each part's limit", partMax: 2 * B, maxBytes: 10 * B, want0: []int64{0, 1}, want1: []int64{0, 1}},
		{name: "the response limit cuts the later part to whole batches", partMax: 10 * B, maxBytes: 4*B + B/2, want0: []int64{0, 1, 2}, want1: []int64{0}},
		{name: "the first part exceeds the response limit by its first batch", partMax: 10 * B, maxBytes: 10, want0: []int64{0}},
		{name: "the first part exceeds its own limit by its first batch", partMax: 10, maxBytes: 10 * B, want0: []int64{0}},
		{name: "a caught-up first part leaves the exception to the next", offsets: [2]int64{3, 0}, partMax: 10 * B, maxBytes: 10, want1: []int64{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			var parts []*FetchPart
			for i := range 2 {
				p := n.open(t, batch(value), batch(value), batch(value))
				p.SetRole(leader(0, []int32{1}, []int32{1}))
				fp := NewFetchPart(p, c.offsets[i], c.partMax, false, false)
				parts = append(parts, &fp)
			}
			got := fetch(t, t.Context(), parts, c.maxBytes, 1, 0)
			if !slices.Equal(got[0], c.want0) || !slices.Equal(got[1], c.want1) {
				t.Fatalf("got %v and %v, want %v and %v", got[0], got[1], c.want0, c.want1)
			}
		})
	}
}

// A read_committed fetch (KIP-98) reads up to the last stable offset,
// and gets the list of aborted transactions in what it read: never nil
// once the partition is read, empty when none.
func TestFetchReadCommitted(t *testing.T) {
	const pid = int64(7)
	// Offsets: 0-1 plain, 2-3 producer 7's transaction, 4 plain; then,
	// with aborted, 5 the ABORT marker.
	cases := []struct {
		name        string
		aborted     bool
		offset      int64
		committed   bool
		want        []int64
		wantLSO     int64
		wantAborted []int64 // first offsets; nil: no list
	}{
		{name: "read_committed stops at the open transaction", offset: 0, committed: true, want: []int64{0}, wantLSO: 2, wantAborted: []int64{}},
		{name: "read_committed inside the open transaction reads nothing", offset: 3, committed: true, wantLSO: 2, wantAborted: []int64{}},
		{name: "read_uncommitted reads to the high watermark", offset: 0, want: []int64{0, 2, 4}, wantLSO: 2},
		{name: "read_committed after the abort gets the transaction listed", aborted: true, offset: 0, committed: true, want: []int64{0, 2, 4, 5}, wantLSO: 6, wantAborted: []int64{2}},
		{name: "read_committed past the aborted records needs no list", aborted: true, offset: 4, committed: true, want: []int64{4, 5}, wantLSO: 6, wantAborted: []int64{}},
		{name: "read_uncommitted gets no list", aborted: true, offset: 0, want: []int64{0, 2, 4, 5}, wantLSO: 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.open(t)
			p.SetRole(leader(0, []int32{1}, []int32{1}))
			mustAppend(t, p, batch("a", "b"))
			mustAppend(t, p, txnBatch(pid, 0, 0, "t1", "t2"))
			mustAppend(t, p, batch("c"))
			if c.aborted {
				if _, _, err := p.AppendMarker(pid, 0, false, 0); err != nil {
					t.Fatal(err)
				}
			}
			fp := NewFetchPart(p, c.offset, 1<<20, false, c.committed)
			got := fetch(t, t.Context(), []*FetchPart{&fp}, 1<<20, 0, 0)
			if !slices.Equal(got[0], c.want) || fp.LastStableOffset != c.wantLSO || fp.Err != nil {
				t.Fatalf("got %v, last stable offset %d, error %v; want %v, %d", got[0], fp.LastStableOffset, fp.Err, c.want, c.wantLSO)
			}
			if (fp.Aborted == nil) != (c.wantAborted == nil) {
				t.Fatalf("aborted list %v, want %v (nil: none)", fp.Aborted, c.wantAborted)
			}
			var firsts []int64
			for _, a := range fp.Aborted {
				if a.ProducerID != pid {
					t.Fatalf("aborted transaction of producer %d, want %d", a.ProducerID, pid)
				}
				firsts = append(firsts, a.FirstOffset)
			}
			if !slices.Equal(firsts, c.wantAborted) {
				t.Fatalf("aborted transactions from %v, want %v", firsts, c.wantAborted)
			}
		})
	}
}

// A part refused before the read (an unknown partition, a fenced epoch)
// is answered as it is, and, as in Kafka, any error ends a long poll; a
// part that asks past the log end is refused by the read.
func TestFetchRefusedParts(t *testing.T) {
	n := newNode(t)
	p := n.open(t, batch("a", "b", "c"))
	p.SetRole(leader(3, []int32{1}, []int32{1}))
	unknown := NewFetchPart(nil, 0, 1<<20, false, false)
	unknown.Refuse(kerr.UnknownTopicOrPartition)
	fenced := NewFetchPart(p, 0, 1<<20, false, false)
	fenced.Refuse(p.CheckLeaderEpoch(2))
	readable := NewFetchPart(p, 0, 1<<20, false, false)
	past := NewFetchPart(p, 9, 1<<20, false, false)
	parts := []*FetchPart{&unknown, &fenced, &readable, &past}

	start := time.Now()
	got := fetch(t, t.Context(), parts, 1<<20, 1<<20, time.Minute)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a fetch with a refused part waited %v", d)
	}
	if !errors.Is(unknown.Err, kerr.UnknownTopicOrPartition) || len(got[0]) != 0 || unknown.HighWatermark != -1 {
		t.Fatalf("unknown part: %v, batches %v, high watermark %d", unknown.Err, got[0], unknown.HighWatermark)
	}
	if !errors.Is(fenced.Err, kerr.FencedLeaderEpoch) || len(got[1]) != 0 || fenced.HighWatermark != -1 {
		t.Fatalf("fenced part: %v, batches %v, high watermark %d", fenced.Err, got[1], fenced.HighWatermark)
	}
	if !slices.Equal(got[2], []int64{0}) || readable.Err != nil || readable.HighWatermark != 3 {
		t.Fatalf("readable part: batches %v, error %v, high watermark %d", got[2], readable.Err, readable.HighWatermark)
	}
	if !errors.Is(past.Err, segment.ErrOffsetOutOfRange) || len(got[3]) != 0 {
		t.Fatalf("part past the log end: %v, batches %v; want OFFSET_OUT_OF_RANGE", past.Err, got[3])
	}
}

// CheckLeaderEpoch applies KIP-320 to a fetch's current leader epoch.
func TestCheckLeaderEpoch(t *testing.T) {
	n := newNode(t)
	p := n.open(t)
	p.SetRole(leader(5, []int32{1}, []int32{1}))
	for _, c := range []struct {
		epoch int32
		want  error
	}{{-1, nil}, {5, nil}, {4, kerr.FencedLeaderEpoch}, {6, kerr.UnknownLeaderEpoch}} {
		if err := p.CheckLeaderEpoch(c.epoch); err != c.want {
			t.Errorf("CheckLeaderEpoch(%d): %v, want %v", c.epoch, err, c.want)
		}
	}
}

// A follower's fetch reads the leader's local log up to its end, not the
// high watermark: the high watermark moves only once followers have
// what is above it. Its fetch offset is its log end, which the leader
// records (FollowerFetch).
func TestReplicaFetch(t *testing.T) {
	cases := []struct {
		name    string
		offset  int64
		want    []int64
		wantErr error
		wantHW  int64 // the leader's, after the fetch
	}{
		{name: "from the start: up to the log end", offset: 0, want: []int64{0, 3}, wantHW: 0},
		{name: "from the middle", offset: 3, want: []int64{3}, wantHW: 3},
		{name: "at the log end: the high watermark catches up", offset: 5, wantHW: 5},
		{name: "past the log end", offset: 9, wantErr: kerr.OffsetOutOfRange, wantHW: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.open(t)
			p.SetRole(leader(0, []int32{1, 2}, []int32{1, 2}))
			mustAppend(t, p, batch("a", "b", "c"))
			mustAppend(t, p, batch("d", "e"))
			fp := NewFetchPart(p, c.offset, 1<<20, true, false)
			err := fp.FollowerFetch(2, 7, -1)
			if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Fatalf("FollowerFetch: %v, want %v", err, c.wantErr)
			}
			if err != nil {
				if fp.LogStartOffset != 0 || fp.HighWatermark != 0 {
					t.Fatalf("refused follower told log start %d, high watermark %d; want 0, 0", fp.LogStartOffset, fp.HighWatermark)
				}
				return
			}
			got := fetch(t, t.Context(), []*FetchPart{&fp}, 1<<20, 0, 0)
			if !slices.Equal(got[0], c.want) || fp.HighWatermark != c.wantHW || p.HighWatermark() != c.wantHW {
				t.Fatalf("got %v, high watermark %d (leader's %d); want %v, %d", got[0], fp.HighWatermark, p.HighWatermark(), c.want, c.wantHW)
			}
			// A consumer reads only what is committed.
			consumer := NewFetchPart(p, 0, 1<<20, false, false)
			got = fetch(t, t.Context(), []*FetchPart{&consumer}, 1<<20, 0, 0)
			if n := len(got[0]); c.wantHW == 0 && n != 0 || c.wantHW == 5 && n != 2 {
				t.Fatalf("consumer read %v at high watermark %d", got[0], c.wantHW)
			}
		})
	}
}
