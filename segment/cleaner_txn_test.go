package segment

import (
	"bytes"
	"os"
	"slices"
	"testing"
)

// A read_committed consumer drops a producer's batches from an aborted
// transaction's first offset until it meets the ABORT marker (KIP-98).
// An index entry whose marker compaction removed would make it drop that
// producer's later, committed batches: so an entry goes with its marker,
// and a marker emptied by compaction (no record left) counts as gone.
func TestRewriteDropsIndexEntryWithItsMarker(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 1})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0) // 0-1
	mustMarker(t, l, 1, 0, false, 0)                    // 2
	mustAppend(t, l, txnBatch(t, clock, 2, 0, 0, 2), 0) // 3-4
	mustMarker(t, l, 2, 0, false, 0)                    // 5
	mustAppend(t, l, txnBatch(t, clock, 3, 0, 0, 2), 0) // 6-7
	mustMarker(t, l, 3, 0, false, 0)                    // 8
	mustAppend(t, l, idemBatch(t, clock, 9, 0, 0, 1), 0)
	all := l.AbortedTransactions(0, l.EndOffset())
	if len(all) != 3 {
		t.Fatalf("aborted %+v", all)
	}
	// Transactions 1 and 2 lose their data and their markers (2's is
	// kept empty, as a producer's last batch would be); 3 keeps both.
	plan := func(h BatchHeader) (keep, empty bool) {
		switch h.BaseOffset {
		case 0, 2, 3:
			return false, false
		case 5:
			return true, true
		}
		return true, false
	}
	if err := rewriteWith(t, l, 0, 9, plan, 1<<30); err != nil {
		t.Fatal(err)
	}
	want := all[2:]
	if got := l.AbortedTransactions(0, l.EndOffset()); !slices.Equal(got, want) {
		t.Fatalf("after the rewrite: %+v, want %+v", got, want)
	}
	l.Close()
	l = mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 1})
	if got := l.AbortedTransactions(0, l.EndOffset()); !slices.Equal(got, want) {
		t.Fatalf("after reopening: %+v, want %+v", got, want)
	}
}

func markerBatch(t testing.TB, pid int64, commit bool, ts int64) []byte {
	t.Helper()
	return stamped(encodeMarkerBatch(pid, 0, TxnMarker{Commit: commit, CoordinatorEpoch: 7}, ts), 40, 3)
}

// Kafka's cleaner stamps a delete horizon on a marker whose transaction
// has no batch left (KIP-534, as for tombstones) and removes its record
// once the horizon has passed, keeping the header when the producer's
// last batch it is.
func TestFilterBatchMarkers(t *testing.T) {
	const horizon = 1_700_000_099_000
	marker := markerBatch(t, 5, true, 1_700_000_000_000)
	noKeep := func(*Record) bool { t.Fatal("keep called for a control batch"); return false }

	// Unmarked options: the marker is copied byte for byte.
	out, res, err := FilterBatch(nil, marker, noKeep, FilterOptions{DeleteHorizonMs: horizon})
	if err != nil || !bytes.Equal(out, marker) || res.Rewritten {
		t.Fatalf("plain filter: %+v, %v", res, err)
	}

	// StampMarker: the horizon goes in, the marker stays readable.
	out, res, err = FilterBatch(nil, marker, noKeep, FilterOptions{DeleteHorizonMs: horizon, StampMarker: true})
	if err != nil || !res.Rewritten || res.Kept != 1 {
		t.Fatalf("stamping: %+v, %v", res, err)
	}
	h, err := checkStoredBatch(out)
	if err != nil {
		t.Fatal(err)
	}
	if hz, ok := h.DeleteHorizon(); !ok || hz != horizon || !h.IsControl() || !h.IsTransactional() || h.ProducerID != 5 || h.BaseOffset != 40 || h.LeaderEpoch != 3 {
		t.Fatalf("stamped header %+v", h)
	}
	if m, ok, err := TxnMarkerOf(out); err != nil || !ok || !m.Commit || m.CoordinatorEpoch != 7 {
		t.Fatalf("stamped marker %+v ok=%v err=%v", m, ok, err)
	}
	// A marker stamped already keeps its horizon, byte for byte.
	again, res, err := FilterBatch(nil, out, noKeep, FilterOptions{DeleteHorizonMs: horizon + 5, StampMarker: true})
	if err != nil || res.Rewritten || !bytes.Equal(again, out) {
		t.Fatalf("restamping: %+v, %v", res, err)
	}

	// Discard: the record goes; the batch too, or its header stays.
	out, res, err = FilterBatch([]byte("d"), marker, noKeep, FilterOptions{Discard: true})
	if err != nil || !res.Dropped || string(out) != "d" {
		t.Fatalf("discarding: %+v, %q, %v", res, out, err)
	}
	out, res, err = FilterBatch(nil, marker, noKeep, FilterOptions{Discard: true, RetainEmpty: true})
	if err != nil || res.Kept != 0 || res.Removed != 1 {
		t.Fatalf("discarding, retaining empty: %+v, %v", res, err)
	}
	if h, err = checkStoredBatch(out); err != nil || h.NumRecords != 0 || !h.IsControl() || h.LastOffset() != 40 {
		t.Fatalf("empty marker %+v, %v", h, err)
	}
	if _, ok, err := TxnMarkerOf(out); ok || err != nil {
		t.Fatalf("an emptied marker still reads as one (err %v)", err)
	}
}

// A batch of an aborted transaction goes whole, whatever its keys.
func TestFilterBatchDiscard(t *testing.T) {
	clock := newClock()
	b := stamped(txnBatch(t, clock, 4, 1, 10, 3), 100, 0)
	noKeep := func(*Record) bool { t.Fatal("keep called for a discarded batch"); return false }
	out, res, err := FilterBatch(nil, b, noKeep, FilterOptions{Discard: true})
	if err != nil || !res.Dropped || len(out) != 0 || res.Removed != 3 {
		t.Fatalf("discard: %+v, %d bytes, %v", res, len(out), err)
	}
	out, _, err = FilterBatch(nil, b, noKeep, FilterOptions{Discard: true, RetainEmpty: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := checkStoredBatch(out)
	if err != nil || h.NumRecords != 0 || h.ProducerID != 4 || h.BaseSequence != 10 || h.LastOffset() != 102 || !h.IsTransactional() {
		t.Fatalf("kept empty: %+v, %v", h, err)
	}
}

// The cleaner reads which transactions were open where a bucket object
// ends from its producer snapshot: it never cleans at or above the first.
func TestSnapshotFirstUnstable(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 1})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0) // 0-1, open
	mustAppend(t, l, txnBatch(t, clock, 2, 0, 0, 2), 0) // 2-3, open
	mustMarker(t, l, 1, 0, true, 0)                     // 4
	mustAppend(t, l, idemBatch(t, clock, 9, 0, 0, 1), 0)
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		snap, err := os.ReadFile(s.SnapshotPath)
		if err != nil {
			t.Fatalf("snapshot of segment %d: %v", s.BaseOffset, err)
		}
		first, ok, err := SnapshotFirstUnstable(snap)
		if err != nil {
			t.Fatal(err)
		}
		var want int64 = -1
		switch {
		case s.EndOffset <= 2:
			want = 0
		case s.EndOffset <= 4:
			want = 0
		default:
			want = 2
		}
		if !ok || first != want {
			t.Fatalf("snapshot at %d: first unstable %d (ok=%v), want %d", s.EndOffset, first, ok, want)
		}
	}
	if _, _, err := SnapshotFirstUnstable([]byte{1, 2}); err == nil {
		t.Fatal("a truncated snapshot decoded")
	}
}

// FuzzFilterBatchTxn: whatever the batch, discarding leaves nothing or a
// valid empty batch with the same header fields, and stamping a marker
// leaves a valid batch whose marker reads as before.
func FuzzFilterBatchTxn(f *testing.F) {
	f.Add(markerBatch(f, 3, false, 10), int64(99), false, true)
	f.Add(markerBatch(f, 3, true, 10), int64(99), true, false)
	f.Add(compactedBatch(f, batchSpec{codec: codecGzip, firstTs: 1_000, attrs: attrTransactional, idem: true, pid: 2, seq: 5}, 10, 2, keyed(6)), int64(0), true, true)
	f.Add(appendEmptyBatch(nil, &BatchHeader{BaseOffset: 5, LastOffsetDelta: 0, ProducerID: 2, Attributes: attrControl | attrTransactional, MaxTimestamp: 9}), int64(1), true, false)
	f.Fuzz(func(t *testing.T, b []byte, horizon int64, retain, discard bool) {
		if len(b) >= headerSize {
			b = bytes.Clone(b)
			fixCRC(b)
		}
		wantMarker, wasMarker, markerErr := TxnMarkerOf(b)
		out, res, err := FilterBatch([]byte("d"), b, func(*Record) bool { return true },
			FilterOptions{Discard: discard, RetainEmpty: retain, StampMarker: true, DeleteHorizonMs: horizon})
		if err != nil {
			if string(out) != "d" {
				t.Fatalf("failed, yet changed dst: %v", err)
			}
			return
		}
		nb := out[1:]
		if res.Dropped {
			if len(nb) != 0 || retain {
				t.Fatalf("dropped: %+v, %d bytes appended", res, len(nb))
			}
			return
		}
		h, err := checkStoredBatch(nb)
		if err != nil {
			t.Fatalf("output is not a valid stored batch: %v", err)
		}
		ih := decodeHeader(b)
		if h.BaseOffset != ih.BaseOffset || h.LastOffsetDelta != ih.LastOffsetDelta || h.ProducerID != ih.ProducerID ||
			h.ProducerEpoch != ih.ProducerEpoch || h.BaseSequence != ih.BaseSequence || h.IsControl() != ih.IsControl() ||
			h.IsTransactional() != ih.IsTransactional() {
			t.Fatalf("header %+v from %+v", h, ih)
		}
		if discard {
			if h.NumRecords != 0 {
				t.Fatalf("discarded, yet %d records left", h.NumRecords)
			}
			return
		}
		if ih.IsControl() && markerErr == nil && wasMarker {
			m, ok, err := TxnMarkerOf(nb)
			if err != nil || !ok || m != wantMarker {
				t.Fatalf("marker %+v (ok %v, %v), was %+v", m, ok, err, wantMarker)
			}
			if _, has := h.DeleteHorizon(); horizon > 0 && !has {
				t.Fatal("a marker kept without a horizon")
			}
		}
	})
}
