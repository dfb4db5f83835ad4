package segment

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func idemBatch(t *testing.T, clock *fakeClock, pid int64, epoch int16, seq int32, n int) []byte {
	return encodeBatch(t, batchSpec{values: values(n, 20, byte(seq)), idem: true, pid: pid, pepoch: epoch, seq: seq, firstTs: clock.Millis()})
}

func TestIdempotentProducer(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()

	first := mustAppend(t, l, idemBatch(t, clock, 7, 0, 0, 3), 0)  // seq 0-2, offsets 0-2
	second := mustAppend(t, l, idemBatch(t, clock, 7, 0, 3, 2), 0) // seq 3-4, offsets 3-4
	mustAppend(t, l, idemBatch(t, clock, 8, 0, 0, 1), 0)           // another producer

	// A retry of either cached batch returns its original offsets.
	for _, c := range []struct {
		seq  int32
		n    int
		want AppendInfo
	}{{0, 3, first}, {3, 2, second}} {
		info, err := l.Append(idemBatch(t, clock, 7, 0, c.seq, c.n), 0)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Duplicate || info.BaseOffset != c.want.BaseOffset || info.LastOffset != c.want.LastOffset {
			t.Fatalf("retry of seq %d: %+v, want offsets of %+v", c.seq, info, c.want)
		}
	}
	if l.EndOffset() != 6 {
		t.Fatalf("duplicates were written: end %d", l.EndOffset())
	}

	for _, c := range []struct {
		name    string
		batch   []byte
		wantErr error
	}{
		{"gap", idemBatch(t, clock, 7, 0, 6, 1), ErrOutOfOrderSequence},
		{"overlap that is not a cached batch", idemBatch(t, clock, 7, 0, 4, 1), ErrOutOfOrderSequence},
		{"new epoch not at 0", idemBatch(t, clock, 7, 1, 5, 1), ErrOutOfOrderSequence},
	} {
		if _, err := l.Append(c.batch, 0); !errors.Is(err, c.wantErr) {
			t.Fatalf("%s: err = %v, want %v", c.name, err, c.wantErr)
		}
	}
	// Bump the epoch, then the old epoch is fenced.
	mustAppend(t, l, idemBatch(t, clock, 7, 1, 0, 1), 0)
	if _, err := l.Append(idemBatch(t, clock, 7, 0, 5, 1), 0); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("old epoch: %v", err)
	}
	// In sequence under the new epoch.
	mustAppend(t, l, idemBatch(t, clock, 7, 1, 1, 4), 0)
}

// Only the last five batches are remembered, as in Kafka.
func TestIdempotentCacheDepth(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	for i := range 7 {
		mustAppend(t, l, idemBatch(t, clock, 1, 0, int32(i), 1), 0)
	}
	if info, err := l.Append(idemBatch(t, clock, 1, 0, 2, 1), 0); err != nil || !info.Duplicate || info.BaseOffset != 2 {
		t.Fatalf("fifth-newest batch: %+v, %v", info, err)
	}
	if _, err := l.Append(idemBatch(t, clock, 1, 0, 1, 1), 0); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("sixth-newest batch: %v", err)
	}
}

// Sequence numbers wrap at MaxInt32.
func TestIdempotentSequenceWrap(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	mustAppend(t, l, idemBatch(t, clock, 1, 0, 0, 1), 0)
	l.writeMu.Lock()
	l.w.producers[1].batches[0].lastSeq = 1<<31 - 2
	l.writeMu.Unlock()
	mustAppend(t, l, idemBatch(t, clock, 1, 0, 1<<31-1, 3), 0) // seq MaxInt32, 0, 1
	mustAppend(t, l, idemBatch(t, clock, 1, 0, 2, 1), 0)
}

// Several batches of one producer in one append are checked in order.
func TestIdempotentMultiBatchAppend(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	req := append(idemBatch(t, clock, 3, 0, 0, 2), idemBatch(t, clock, 3, 0, 2, 2)...)
	if info := mustAppend(t, l, req, 0); info.Batches != 2 || info.Records != 4 || info.LastOffset != 3 {
		t.Fatalf("%+v", info)
	}
	bad := append(idemBatch(t, clock, 3, 0, 4, 2), idemBatch(t, clock, 3, 0, 7, 2)...)
	if _, err := l.Append(bad, 0); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap inside one append: %v", err)
	}
	if l.EndOffset() != 4 {
		t.Fatal("a rejected append wrote something")
	}
	mustAppend(t, l, idemBatch(t, clock, 3, 0, 4, 1), 0)
}

// Producer state survives a clean restart, an unclean one, a roll, and a
// corrupt snapshot.
func TestProducerStateSurvivesRestart(t *testing.T) {
	for _, mode := range []string{"clean", "crash", "corrupt snapshots", "no snapshots"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock()
			cfg := Config{Now: clock.Now, SegmentBytes: 1000, IndexIntervalBytes: 100}
			l := mustOpen(t, dir, cfg)
			var infos []AppendInfo
			for i := range 30 { // several rolls: snapshots at each
				infos = append(infos, mustAppend(t, l, idemBatch(t, clock, 5, 2, int32(i*2), 2), 0))
			}
			mustAppend(t, l, idemBatch(t, clock, 6, 0, 0, 1), 0)
			switch mode {
			case "crash":
				l.Sync()
				crash(l)
			default:
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			snaps, _ := filepath.Glob(filepath.Join(dir, "*"+snapshotSuffix))
			if len(snaps) < 2 {
				t.Fatalf("only %d snapshots", len(snaps))
			}
			for _, p := range snaps {
				switch mode {
				case "corrupt snapshots":
					data, _ := os.ReadFile(p)
					data[len(data)/2] ^= 1
					os.WriteFile(p, data, 0o644)
				case "no snapshots":
					os.Remove(p)
				}
			}
			l = mustOpen(t, dir, cfg)
			defer l.Close()
			last := infos[len(infos)-1]
			info, err := l.Append(idemBatch(t, clock, 5, 2, 58, 2), 0)
			if err != nil || !info.Duplicate || info.BaseOffset != last.BaseOffset {
				t.Fatalf("retry after restart: %+v, %v; want duplicate of %+v", info, err, last)
			}
			if _, err := l.Append(idemBatch(t, clock, 5, 1, 60, 1), 0); !errors.Is(err, ErrInvalidProducerEpoch) {
				t.Fatalf("old epoch after restart: %v", err)
			}
			if _, err := l.Append(idemBatch(t, clock, 6, 0, 5, 1), 0); !errors.Is(err, ErrOutOfOrderSequence) {
				t.Fatalf("gap after restart: %v", err)
			}
			mustAppend(t, l, idemBatch(t, clock, 5, 2, 60, 1), 0)
			mustAppend(t, l, idemBatch(t, clock, 6, 0, 1, 1), 0)
		})
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	m := map[int64]*producerEntry{
		1: {epoch: 3, lastWrite: 99, n: 2, batches: [5]batchMeta{{0, 4, 10, 14}, {5, 5, 20, 20}}},
		2: {epoch: 0, lastWrite: -1},
	}
	b := encodeSnapshot(77, m)
	got, err := decodeSnapshot(b, 77)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || *got[1] != *m[1] || *got[2] != *m[2] {
		t.Fatalf("round trip: %+v", got)
	}
	if _, err := decodeSnapshot(b, 78); err == nil {
		t.Fatal("offset mismatch accepted")
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		if _, err := decodeSnapshot(c, 77); err == nil {
			t.Fatalf("flip at byte %d accepted", i)
		}
	}
}

// Maintain forgets producers that have not written for longer than
// ProducerIDExpiration (producer.id.expiration.ms): a retry of a forgotten
// producer's batch is no longer recognised and is written again.
func TestProducerExpiration(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, ProducerIDExpiration: 10 * time.Minute})
	defer l.Close()
	b := idemBatch(t, clock, 1, 0, 0, 1)
	mustAppend(t, l, b, 0)
	clock.Advance(9 * time.Minute)
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	if info := mustAppend(t, l, b, 0); !info.Duplicate || info.BaseOffset != 0 {
		t.Fatalf("retry within the expiration: %+v, want a duplicate of offset 0", info)
	}
	clock.Advance(11 * time.Minute)
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	if info := mustAppend(t, l, b, 0); info.Duplicate || info.BaseOffset != 1 {
		t.Fatalf("retry after the expiration: %+v, want a new write at offset 1", info)
	}
}

// A producer is forgotten by when it last wrote, not by its records'
// CreateTime: a mirror or backfill writing week-old timestamps keeps its
// state across maintenance passes and restarts (Kafka expires by the last
// write, producer.id.expiration.ms).
func TestProducerExpiresByLastWriteNotCreateTime(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	cfg := Config{Now: clock.Now, ProducerIDExpiration: time.Hour}
	l := mustOpen(t, dir, cfg)
	old := clock.Millis() - (7 * 24 * time.Hour).Milliseconds()
	batch := func(seq int32) []byte {
		return encodeBatch(t, batchSpec{values: values(2, 20, byte(seq)), idem: true, pid: 9, seq: seq, firstTs: old})
	}
	mustAppend(t, l, batch(0), 0)
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	if info := mustAppend(t, l, batch(0), 0); !info.Duplicate {
		t.Fatalf("a live producer with old timestamps was forgotten: retry %+v", info)
	}
	mustAppend(t, l, batch(2), 0)
	clock.Advance(50 * time.Minute)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, cfg)
	defer l.Close()
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(batch(5), 0); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("after a restart the producer's sequence was not checked: %v", err)
	}
	if info := mustAppend(t, l, batch(4), 0); info.Duplicate || info.BaseOffset != 4 {
		t.Fatalf("next batch after restart: %+v", info)
	}
}

// KIP-360: the log accepts any first sequence from a producer it does not
// know (its state may have expired or been deleted with the segments), and
// checks the sequences that follow.
func TestUnknownProducerStartsAtAnySequence(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	if info := mustAppend(t, l, idemBatch(t, clock, 99, 3, 41, 2), 0); info.BaseOffset != 0 {
		t.Fatalf("%+v", info)
	}
	if _, err := l.Append(idemBatch(t, clock, 99, 3, 44, 1), 0); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap after the first batch: %v", err)
	}
	mustAppend(t, l, idemBatch(t, clock, 99, 3, 43, 1), 0)
	// A known producer's new epoch still starts at 0.
	if _, err := l.Append(idemBatch(t, clock, 99, 4, 7, 1), 0); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("new epoch not at 0: %v", err)
	}
}

// The same idempotent batch twice in one append: duplicates are checked
// against what the log has committed, so the second copy is out of order
// (as in Kafka's ProducerStateManager), not a "duplicate" of its own
// unwritten first copy, and nothing is written.
func TestIdempotentSameBatchTwiceInOneAppend(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	mustAppend(t, l, idemBatch(t, clock, 4, 0, 0, 2), 0) // seq 0-1, offsets 0-1
	b := idemBatch(t, clock, 4, 0, 2, 3)
	info, err := l.Append(append(bytes.Clone(b), b...), 0)
	if !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("append of a batch and its copy: %+v, %v; want %v", info, err, ErrOutOfOrderSequence)
	}
	if l.EndOffset() != 2 {
		t.Fatalf("log end %d: a refused append wrote something", l.EndOffset())
	}
	// The batch alone then goes in, and its retry is a duplicate of it.
	if info := mustAppend(t, l, b, 0); info.Duplicate || info.BaseOffset != 2 {
		t.Fatalf("the batch alone: %+v", info)
	}
	if info := mustAppend(t, l, b, 0); !info.Duplicate || info.BaseOffset != 2 || info.LastOffset != 4 {
		t.Fatalf("its retry: %+v", info)
	}
}
