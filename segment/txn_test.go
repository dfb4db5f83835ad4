package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// txnBatch is a transactional producer's data batch.
func txnBatch(t testing.TB, clock *fakeClock, pid int64, epoch int16, seq int32, n int) []byte {
	return encodeBatch(t, batchSpec{values: values(n, 20, byte(seq)), idem: true, attrs: attrTransactional, pid: pid, pepoch: epoch, seq: seq, firstTs: clock.Millis()})
}

func mustMarker(t testing.TB, l *Log, pid int64, epoch int16, commit bool, coordEpoch int32) AppendInfo {
	t.Helper()
	info, err := l.AppendMarker(pid, epoch, commit, coordEpoch, 0)
	if err != nil {
		t.Fatalf("AppendMarker(%d, commit=%v): %v", pid, commit, err)
	}
	return info
}

func wantUnstable(t testing.TB, l *Log, want int64) {
	t.Helper()
	got, ok := l.FirstUnstableOffset()
	if want < 0 && ok {
		t.Fatalf("first unstable offset %d, want none", got)
	}
	if want >= 0 && (!ok || got != want) {
		t.Fatalf("first unstable offset %d (ok=%v), want %d", got, ok, want)
	}
}

// The LSO rule of KIP-98: a read_committed consumer may read up to the
// first offset of the earliest transaction still open, and an ABORT
// marker leaves an entry for the range it voids.
func TestTxnLastStableOffsetAndAbortIndex(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()

	wantUnstable(t, l, -1)
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 3), 0) // 0-2, txn of 1 opens at 0
	wantUnstable(t, l, 0)
	mustAppend(t, l, idemBatch(t, clock, 2, 0, 0, 2), 0) // 3-4, not transactional
	mustAppend(t, l, txnBatch(t, clock, 3, 0, 0, 1), 0)  // 5, txn of 3 opens at 5
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 3, 1), 0)  // 6, same txn of 1
	wantUnstable(t, l, 0)

	commit := mustMarker(t, l, 1, 0, true, 0) // 7
	if commit.BaseOffset != 7 || commit.LastOffset != 7 {
		t.Fatalf("marker at %+v, want offset 7", commit)
	}
	wantUnstable(t, l, 5)
	abort := mustMarker(t, l, 3, 0, false, 0) // 8
	wantUnstable(t, l, -1)
	if got, want := l.AbortedTransactions(0, l.EndOffset()), []AbortedTxn{{ProducerID: 3, FirstOffset: 5, LastOffset: abort.BaseOffset, LastStableOffset: 9}}; !slices.Equal(got, want) {
		t.Fatalf("aborted transactions %+v, want %+v", got, want)
	}
	// A fetch range that ends before the aborted data, or starts after
	// its marker, does not need the entry.
	if got := l.AbortedTransactions(0, 5); len(got) != 0 {
		t.Fatalf("aborted in [0, 5): %+v", got)
	}
	if got := l.AbortedTransactions(9, 10); len(got) != 0 {
		t.Fatalf("aborted in [9, 10): %+v", got)
	}

	// The marker is a control batch holding one END_TXN record, as Kafka
	// writes it.
	all := readAll(t, l, 1<<20)
	batches := batchesOf(t, all)
	h := decodeHeader(batches[len(batches)-1])
	if !h.IsControl() || !h.IsTransactional() || h.ProducerID != 3 || h.BaseSequence != -1 || h.NumRecords != 1 {
		t.Fatalf("marker batch header %+v", h)
	}
	if m, ok, err := markerOf(&h, batches[len(batches)-1]); err != nil || !ok || m.Commit || m.CoordinatorEpoch != 0 {
		t.Fatalf("marker record %+v ok=%v err=%v", m, ok, err)
	}
}

// An abort whose stable offset is held back by an older open transaction
// records that offset, not the one after the marker: a fetch that stops
// there has not seen everything the abort covers.
func TestTxnAbortBehindOpenTransaction(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0) // 0-1
	mustAppend(t, l, txnBatch(t, clock, 2, 0, 0, 2), 0) // 2-3
	abort := mustMarker(t, l, 2, 0, false, 0)           // 4
	want := []AbortedTxn{{ProducerID: 2, FirstOffset: 2, LastOffset: abort.BaseOffset, LastStableOffset: 0}}
	if got := l.AbortedTransactions(0, 5); !slices.Equal(got, want) {
		t.Fatalf("aborted %+v, want %+v", got, want)
	}
	wantUnstable(t, l, 0)
}

// ProducerAppendInfo's rules for markers and transactional batches.
func TestTxnMarkerValidation(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, clock, 1, 2, 0, 1), 0)

	// A plain idempotent batch in the middle of the producer's
	// transaction is refused.
	if _, err := l.Append(idemBatch(t, clock, 1, 2, 1, 1), 0); !errors.Is(err, ErrInvalidTxnState) {
		t.Fatalf("non-transactional batch during a transaction: %v", err)
	}
	// A marker from an older producer epoch is refused.
	if _, err := l.AppendMarker(1, 1, true, 0, 0); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("marker with an older epoch: %v", err)
	}
	mustMarker(t, l, 1, 2, false, 5)
	// A marker from an older coordinator is fenced.
	mustAppend(t, l, txnBatch(t, clock, 1, 2, 1, 1), 0)
	if _, err := l.AppendMarker(1, 2, true, 4, 0); !errors.Is(err, ErrTransactionCoordinatorFenced) {
		t.Fatalf("marker from an older coordinator: %v", err)
	}
	wantUnstable(t, l, 2)
	mustMarker(t, l, 1, 2, true, 5)
	wantUnstable(t, l, -1)

	// A marker with nothing ongoing (a retried WriteTxnMarkers) is
	// written and completes nothing: no index entry, no open state.
	before := l.EndOffset()
	info := mustMarker(t, l, 1, 2, false, 5)
	if info.BaseOffset != before || l.EndOffset() != before+1 {
		t.Fatalf("marker without a transaction: %+v, end %d", info, l.EndOffset())
	}
	wantUnstable(t, l, -1)
	if got := l.AbortedTransactions(0, l.EndOffset()); len(got) != 1 || got[0].LastOffset != 1 {
		t.Fatalf("aborted %+v, want only the abort at 1", got)
	}
	// After the transaction ends, plain idempotent batches are fine again.
	mustAppend(t, l, idemBatch(t, clock, 1, 2, 2, 1), 0)
}

// Producer snapshots carry the open transactions, so a clean restart
// keeps the LSO where it was; after a crash, replay finds it again.
func TestTxnStateSurvivesRestart(t *testing.T) {
	for _, clean := range []bool{true, false} {
		clock := newClock()
		dir := t.TempDir()
		l := mustOpen(t, dir, Config{Now: clock.Now})
		mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0) // 0-1
		mustAppend(t, l, txnBatch(t, clock, 2, 0, 0, 2), 0) // 2-3
		mustMarker(t, l, 2, 0, false, 0)                    // 4
		mustAppend(t, l, txnBatch(t, clock, 3, 0, 0, 2), 0) // 5-6
		wantIdx, err := os.ReadFile(offsetName(dir, 0, txnIndexSuffix))
		if err != nil {
			t.Fatal(err)
		}
		if clean {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			crash(l)
			// The index lost its last write as the crash took it.
			if err := os.Remove(offsetName(dir, 0, txnIndexSuffix)); err != nil {
				t.Fatal(err)
			}
		}
		l = mustOpen(t, dir, Config{Now: clock.Now})
		wantUnstable(t, l, 0)
		if got, _ := os.ReadFile(offsetName(dir, 0, txnIndexSuffix)); !bytes.Equal(got, wantIdx) {
			t.Fatalf("clean=%v: .txnindex after reopening %x, want %x", clean, got, wantIdx)
		}
		mustMarker(t, l, 1, 0, true, 0)
		wantUnstable(t, l, 5)
		mustMarker(t, l, 3, 0, true, 0)
		wantUnstable(t, l, -1)
		l.Close()
	}
}

// A version 1 snapshot (before transactions) still loads.
func TestSnapshotVersion1Decodes(t *testing.T) {
	b := make([]byte, snapshotHeaderSize)
	binary.BigEndian.PutUint16(b, 1)
	binary.BigEndian.PutUint64(b[6:], 10)
	binary.BigEndian.PutUint32(b[14:], 1)
	b = binary.BigEndian.AppendUint64(b, 7)    // id
	b = binary.BigEndian.AppendUint16(b, 3)    // epoch
	b = binary.BigEndian.AppendUint64(b, 1234) // lastWrite
	b = append(b, 1)
	for _, v := range []uint32{0, 4} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = binary.BigEndian.AppendUint64(b, 5)
	b = binary.BigEndian.AppendUint64(b, 9)
	binary.BigEndian.PutUint32(b[2:], crc32.Checksum(b[6:], castagnoli))
	m, err := decodeSnapshot(b, 10)
	if err != nil {
		t.Fatal(err)
	}
	e := m[7]
	if e == nil || e.epoch != 3 || e.lastWrite != 1234 || e.n != 1 || e.batches[0] != (batchMeta{0, 4, 5, 9}) || e.txnOpen {
		t.Fatalf("decoded %+v", e)
	}
	if got := encodeSnapshot(10, m); binary.BigEndian.Uint16(got) != snapshotVersion {
		t.Fatalf("re-encoded as version %d", binary.BigEndian.Uint16(got))
	}
}

// KIP-101 truncation rebuilds transaction state: a transaction begun
// above the cut is gone, one whose marker was cut is open again, and the
// index forgets aborts above the cut.
func TestTxnTruncateTo(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 400})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0) // 0-1
	mustAppend(t, l, txnBatch(t, clock, 2, 0, 0, 2), 0) // 2-3
	mustMarker(t, l, 2, 0, false, 0)                    // 4
	mustMarker(t, l, 1, 0, false, 0)                    // 5
	mustAppend(t, l, txnBatch(t, clock, 3, 0, 0, 2), 0) // 6-7
	wantUnstable(t, l, 6)
	if n := len(l.AbortedTransactions(0, 8)); n != 2 {
		t.Fatalf("%d aborts before truncation", n)
	}

	if _, err := l.TruncateTo(5); err != nil {
		t.Fatal(err)
	}
	// Producer 1's marker went: its transaction is open from 0 again;
	// producer 3's began above the cut.
	wantUnstable(t, l, 0)
	got := l.AbortedTransactions(0, 5)
	if len(got) != 1 || got[0].ProducerID != 2 {
		t.Fatalf("aborts after truncation %+v, want producer 2's only", got)
	}
	mustMarker(t, l, 1, 0, true, 0)
	wantUnstable(t, l, -1)

	if _, err := l.TruncateTo(3); err != nil {
		t.Fatal(err)
	}
	wantUnstable(t, l, 0)
	if got := l.AbortedTransactions(0, 3); len(got) != 0 {
		t.Fatalf("aborts after truncating below the abort: %+v", got)
	}
}

// Segments roll, retention deletes the oldest: its .txnindex goes with
// it, and ClosedSegments names the file of a segment that has one.
func TestTxnIndexFollowsItsSegment(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 1})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0) // 0-1, segment 0
	mustMarker(t, l, 1, 0, false, 0)                    // 2, segment 2
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 2, 1), 0) // 3, segment 3
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 2 || segs[0].TxnIndexPath != "" || segs[1].TxnIndexPath != offsetName(dir, 2, txnIndexSuffix) {
		t.Fatalf("closed segments %+v", segs)
	}
	if got := l.AbortedTransactions(0, 3); len(got) != 1 || got[0].FirstOffset != 0 || got[0].LastOffset != 2 {
		t.Fatalf("aborted %+v", got)
	}
	l.SetConfig(Config{SegmentBytes: 1, RetentionBytes: 1})
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != 3 {
		t.Fatalf("start %d", l.StartOffset())
	}
	if _, err := os.Stat(offsetName(dir, 2, txnIndexSuffix)); !os.IsNotExist(err) {
		t.Fatalf(".txnindex of a deleted segment: %v", err)
	}
	wantUnstable(t, l, 3)
}

// A torn .txnindex of a closed segment is rebuilt from the log at Open.
func TestTxnIndexTornRebuilt(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 1})
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0) // 0-1
	mustAppend(t, l, txnBatch(t, clock, 2, 0, 0, 2), 0) // 2-3
	mustMarker(t, l, 1, 0, false, 0)                    // 4
	mustMarker(t, l, 2, 0, false, 0)                    // 5
	mustAppend(t, l, idemBatch(t, clock, 9, 0, 0, 1), 0)
	want := l.AbortedTransactions(0, l.EndOffset())
	if len(want) != 2 {
		t.Fatalf("aborted %+v", want)
	}
	l.Close()
	path := offsetName(dir, 4, txnIndexSuffix)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 1})
	defer l.Close()
	if got := l.AbortedTransactions(0, l.EndOffset()); !slices.Equal(got, want) {
		t.Fatalf("after rebuilding: %+v, want %+v", got, want)
	}
}

// A follower copying the leader's batches ends with the same transaction
// state and the same .txnindex files, byte for byte.
func TestTxnReplicaMatchesLeader(t *testing.T) {
	clock := newClock()
	ldir, fdir := t.TempDir(), t.TempDir()
	leader := mustOpen(t, ldir, Config{Now: clock.Now})
	defer leader.Close()
	follower := mustOpen(t, fdir, Config{Now: clock.Now})
	defer follower.Close()
	mustAppend(t, leader, txnBatch(t, clock, 1, 0, 0, 2), 0)
	mustAppend(t, leader, txnBatch(t, clock, 2, 0, 0, 2), 0)
	mustMarker(t, leader, 1, 0, false, 0)
	mustAppend(t, leader, txnBatch(t, clock, 3, 0, 0, 1), 0)
	mustMarker(t, leader, 2, 0, false, 0)
	mustMarker(t, leader, 3, 0, true, 0)
	mustAppend(t, leader, txnBatch(t, clock, 1, 0, 2, 1), 0)

	if _, err := follower.AppendReplica(readAll(t, leader, 1<<20)); err != nil {
		t.Fatal(err)
	}
	lu, lok := leader.FirstUnstableOffset()
	fu, fok := follower.FirstUnstableOffset()
	if lu != fu || lok != fok || !lok {
		t.Fatalf("first unstable: leader %d/%v, follower %d/%v", lu, lok, fu, fok)
	}
	lb, err := os.ReadFile(filepath.Join(ldir, "00000000000000000000.txnindex"))
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.ReadFile(filepath.Join(fdir, "00000000000000000000.txnindex"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(lb, fb) || len(lb) != 2*txnEntrySize {
		t.Fatalf(".txnindex differs: leader %x, follower %x", lb, fb)
	}
}

// Kafka never expires a producer with a transaction open: its state is
// what holds the LSO back and what its marker completes.
func TestTxnOpenProducerNotExpired(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, ProducerIDExpiration: time.Hour})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0)
	mustAppend(t, l, idemBatch(t, clock, 2, 0, 0, 1), 0)
	clock.Advance(2 * time.Hour)
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	wantUnstable(t, l, 0)
	if _, ok := l.ProducerLastOffsets()[2]; ok {
		t.Fatal("the idle producer without a transaction was kept")
	}
	abort := mustMarker(t, l, 1, 0, false, 0)
	want := []AbortedTxn{{ProducerID: 1, FirstOffset: 0, LastOffset: abort.BaseOffset, LastStableOffset: abort.BaseOffset + 1}}
	if got := l.AbortedTransactions(0, l.EndOffset()); !slices.Equal(got, want) {
		t.Fatalf("aborted %+v, want %+v", got, want)
	}
}

// Compaction rewrites segments in place of others: each output keeps the
// index entries of the aborts whose markers it covers, and a source's
// file does not outlive it.
func TestTxnIndexKeptByRewrite(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 1})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0) // 0-1, segment 0
	mustMarker(t, l, 1, 0, false, 0)                    // 2, segment 2
	mustAppend(t, l, txnBatch(t, clock, 2, 0, 0, 2), 0) // 3-4, segment 3
	mustMarker(t, l, 2, 0, false, 0)                    // 5, segment 5
	mustAppend(t, l, idemBatch(t, clock, 9, 0, 0, 1), 0)
	want := l.AbortedTransactions(0, l.EndOffset())
	if len(want) != 2 {
		t.Fatalf("aborted %+v", want)
	}
	// Everything kept, in one output covering [0, 6).
	keepAll := func(BatchHeader) (bool, bool) { return true, false }
	if err := rewriteWith(t, l, 0, 6, keepAll, 1<<30); err != nil {
		t.Fatal(err)
	}
	if got := l.AbortedTransactions(0, l.EndOffset()); !slices.Equal(got, want) {
		t.Fatalf("after the rewrite: %+v, want %+v", got, want)
	}
	for _, base := range []int64{2, 5} {
		if _, err := os.Stat(offsetName(dir, base, txnIndexSuffix)); !os.IsNotExist(err) {
			t.Fatalf("source .txnindex %d left behind: %v", base, err)
		}
	}
	l.Close()
	l = mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 1})
	if got := l.AbortedTransactions(0, l.EndOffset()); !slices.Equal(got, want) {
		t.Fatalf("after reopening: %+v, want %+v", got, want)
	}
}

// A follower that restarts its log empty (TruncateFullyAndStartAt) knows
// of the records below the restart offset only what it is given: with no
// history, no transaction; with the history the bucket object below
// carries (Kafka's buildRemoteLogAuxState), the transaction open across
// the restart offset, which then holds the LSO, survives a reopen and a
// crash at any step of the restart, and has its abort indexed once the
// marker comes. (Before the History argument a restarted log always
// forgot it.)
func TestTxnTruncateFully(t *testing.T) {
	clock := newClock()
	leader := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer leader.Close()
	mustAppend(t, leader, txnBatch(t, clock, 1, 0, 0, 2), 0)  // 0-1
	mustMarker(t, leader, 1, 0, false, 0)                     // 2
	mustAppend(t, leader, txnBatch(t, clock, 2, 0, 0, 2), 0)  // 3-4: open
	mustAppend(t, leader, idemBatch(t, clock, 9, 0, 0, 3), 0) // 5-7
	const restart = 8
	wantUnstable(t, leader, 3)

	t.Run("no history", func(t *testing.T) {
		dir := t.TempDir()
		l := mustOpen(t, dir, Config{Now: clock.Now})
		defer l.Close()
		mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0)
		mustMarker(t, l, 1, 0, false, 0)
		mustAppend(t, l, txnBatch(t, clock, 2, 0, 0, 2), 0)
		wantUnstable(t, l, 3)
		if err := l.TruncateFullyAndStartAt(100, History{}); err != nil {
			t.Fatal(err)
		}
		wantUnstable(t, l, -1)
		if got := l.AbortedTransactions(100, 100); len(got) != 0 {
			t.Fatalf("aborted after restarting: %+v", got)
		}
		if _, err := os.Stat(offsetName(dir, 0, txnIndexSuffix)); !os.IsNotExist(err) {
			t.Fatalf(".txnindex after restarting: %v", err)
		}
	})

	t.Run("history from the bucket", func(t *testing.T) {
		dir := t.TempDir()
		l := mustOpen(t, dir, Config{Now: clock.Now})
		mustAppend(t, l, idemBatch(t, clock, 5, 0, 0, 2), 0) // the follower's own 0-1
		var crashes, points []string
		l.testHook = func(point string) {
			points = append(points, point)
			crashes = append(crashes, copyDir(t, dir))
		}
		if err := l.TruncateFullyAndStartAt(restart, historyAt(t, leader, restart)); err != nil {
			t.Fatal(err)
		}
		l.testHook = nil
		wantUnstable(t, l, 3)
		if l.StartOffset() != restart || l.EndOffset() != restart {
			t.Fatalf("log [%d, %d), want empty at %d", l.StartOffset(), l.EndOffset(), restart)
		}
		// Every crash leaves the old log (which knows no transaction) or
		// the new one with the transaction.
		sawOld, sawNew := false, false
		for i, cdir := range crashes {
			c := mustOpen(t, cdir, Config{Now: clock.Now})
			first, open := c.FirstUnstableOffset()
			switch {
			case c.StartOffset() == 0 && c.EndOffset() == 2 && !open:
				sawOld = true
			case c.StartOffset() == restart && c.EndOffset() == restart && open && first == 3:
				sawNew = true
			default:
				t.Fatalf("crash at %q: log [%d, %d), first unstable %d/%v", points[i], c.StartOffset(), c.EndOffset(), first, open)
			}
			c.Close()
		}
		if !sawOld || !sawNew {
			t.Fatalf("crash points saw old %v new %v: %v", sawOld, sawNew, points)
		}
		l.Close()
		l = mustOpen(t, dir, Config{Now: clock.Now})
		defer l.Close()
		wantUnstable(t, l, 3)
		// Promoted, it takes the coordinator's ABORT and indexes it as the
		// leader would.
		info, err := l.AppendMarker(2, 0, false, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		wantUnstable(t, l, -1)
		want := AbortedTxn{ProducerID: 2, FirstOffset: 3, LastOffset: info.BaseOffset, LastStableOffset: info.BaseOffset + 1}
		if got := l.AbortedTransactions(0, l.EndOffset()); len(got) != 1 || got[0] != want {
			t.Fatalf("aborted %+v, want %+v", got, want)
		}
	})
}

// Readers of the transaction state run beside the writer (a fetch asks
// for the LSO and the aborts while produce and markers go on).
func TestTxnReadersConcurrentWithWriter(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, SegmentBytes: 2000})
	defer l.Close()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			end := l.EndOffset()
			if first, ok := l.FirstUnstableOffset(); ok && first > end {
				t.Errorf("first unstable offset %d above the end %d", first, end)
				return
			}
			for _, a := range l.AbortedTransactions(0, end) {
				if a.LastOffset >= end+100 {
					t.Errorf("abort %+v far past the end %d", a, end)
					return
				}
			}
		}
	}()
	for i := range 50 {
		pid := int64(i % 3)
		seq := int32(i/3) * 2
		mustAppend(t, l, txnBatch(t, clock, pid, 0, seq, 2), 0)
		mustMarker(t, l, pid, 0, i%2 == 0, 0)
	}
	close(done)
	wg.Wait()
	if got := l.AbortedTransactions(0, l.EndOffset()); len(got) != 25 {
		t.Fatalf("%d aborts, want 25", len(got))
	}
	wantUnstable(t, l, -1)
}

// TestTxnUnstableUntilMarkerReplicated: a transaction stays unstable for
// a reader bounded by the high watermark until the high watermark passes
// its marker (Kafka's unreplicatedTxns): the marker may not survive a
// change of leader. A truncation that removes the marker forgets it.
func TestTxnUnstableUntilMarkerReplicated(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	mustAppend(t, l, txnBatch(t, clock, 1, 0, 0, 2), 0) // 0-1
	mustAppend(t, l, txnBatch(t, clock, 2, 0, 0, 2), 0) // 2-3
	mustMarker(t, l, 1, 0, true, 0)                     // 4
	mustMarker(t, l, 2, 0, false, 0)                    // 5
	wantUnstable(t, l, -1)                              // every transaction has its marker locally
	below := func(hw, want int64) {
		t.Helper()
		got, ok := l.FirstUnstableOffsetBelow(hw)
		if !ok {
			got = -1
		}
		if got != want {
			t.Fatalf("first unstable offset below high watermark %d: %d, want %d", hw, got, want)
		}
	}
	below(4, 0) // neither marker replicated
	below(5, 2) // producer 1's replicated, producer 2's not
	below(6, -1)
	below(4, -1) // forgotten once passed: the high watermark never goes back

	mustAppend(t, l, txnBatch(t, clock, 3, 0, 0, 2), 0) // 6-7
	mustMarker(t, l, 3, 0, false, 0)                    // 8
	below(8, 6)
	if _, err := l.TruncateTo(8); err != nil {
		t.Fatal(err)
	}
	// The marker went with the truncation: the transaction is open again,
	// and unstable whatever the high watermark.
	wantUnstable(t, l, 6)
	below(100, 6)
}
