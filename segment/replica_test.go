package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// leaderLog builds a leader log of n single-batch appends over several
// leader epochs, some of them from idempotent producers, and returns it.
func leaderLog(t *testing.T, dir string, clock *fakeClock, n int) *Log {
	t.Helper()
	l := mustOpen(t, dir, smallCfg(clock))
	rng := rand.New(rand.NewPCG(7, 8))
	epochs := []int32{0, 0, 2, 5}
	seq := map[int64]int32{}
	for i := range n {
		spec := batchSpec{
			codec:   max(0, rng.IntN(12)-8),
			values:  values(1+rng.IntN(10), rng.IntN(300), byte(i)),
			firstTs: clock.Millis() + int64(i),
		}
		if rng.IntN(3) == 0 {
			pid := int64(1 + rng.IntN(2))
			spec.idem, spec.pid, spec.seq = true, pid, seq[pid]
			seq[pid] += int32(len(spec.values))
		}
		mustAppend(t, l, encodeBatch(t, spec), epochs[i*len(epochs)/n])
	}
	return l
}

// batchesOf splits concatenated batches.
func batchesOf(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		h, err := ParseBatchHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b[:h.Size()])
		b = b[h.Size():]
	}
	return out
}

// dirFiles returns the contents of every file in dir by name.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

// A follower that copies the leader's batches one by one ends up with the
// leader's log: the same bytes served, the same files on disk, the same
// epoch history.
func TestAppendReplicaCopiesLeader(t *testing.T) {
	clock := newClock()
	leaderDir, followerDir := t.TempDir(), t.TempDir()
	leader := leaderLog(t, leaderDir, clock, 120)
	follower := mustOpen(t, followerDir, smallCfg(clock))

	all := readAll(t, leader, 1<<20)
	for _, b := range batchesOf(t, all) {
		h := decodeHeader(b)
		info, err := follower.AppendReplica(b)
		if err != nil {
			t.Fatalf("AppendReplica(batch at %d): %v", h.BaseOffset, err)
		}
		if info.BaseOffset != h.BaseOffset || info.LastOffset != h.LastOffset() || info.Bytes != len(b) ||
			info.Batches != 1 || info.Records != int(h.NumRecords) || info.MaxTimestamp != h.MaxTimestamp {
			t.Fatalf("AppendReplica(batch at %d) = %+v", h.BaseOffset, info)
		}
	}
	if got := readAll(t, follower, 1<<20); !bytes.Equal(got, all) {
		t.Fatalf("follower serves %d bytes, leader %d: not the same", len(got), len(all))
	}
	if follower.EndOffset() != leader.EndOffset() || follower.Size() != leader.Size() || follower.LatestEpoch() != 5 {
		t.Fatalf("follower end %d size %d epoch %d, leader end %d size %d", follower.EndOffset(), follower.Size(), follower.LatestEpoch(), leader.EndOffset(), leader.Size())
	}
	for ep := int32(-1); ep <= 6; ep++ {
		le, lep := leader.EndOffsetForEpoch(ep)
		fe, fep := follower.EndOffsetForEpoch(ep)
		if le != fe || lep != fep {
			t.Fatalf("EndOffsetForEpoch(%d): leader %d,%d follower %d,%d", ep, le, lep, fe, fep)
		}
	}
	ts, off := leader.MaxTimestamp()
	if fts, foff := follower.MaxTimestamp(); fts != ts || foff != off {
		t.Fatalf("MaxTimestamp: leader %d@%d follower %d@%d", ts, off, fts, foff)
	}
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	if err := follower.Close(); err != nil {
		t.Fatal(err)
	}
	lf, ff := dirFiles(t, leaderDir), dirFiles(t, followerDir)
	if !slices.Equal(slices.Sorted(mapKeys(lf)), slices.Sorted(mapKeys(ff))) {
		t.Fatalf("files differ: leader %v follower %v", slices.Sorted(mapKeys(lf)), slices.Sorted(mapKeys(ff)))
	}
	for name, b := range lf {
		if !bytes.Equal(b, ff[name]) {
			t.Fatalf("%s differs between leader and follower", name)
		}
	}
	if len(lf) < 20 {
		t.Fatalf("only %d files: the test wants several segments", len(lf))
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// A Fetch response may end in a partial batch; the follower takes the
// whole ones and fetches the rest again from where they end.
func TestAppendReplicaPartialLastBatch(t *testing.T) {
	clock := newClock()
	leader := leaderLog(t, t.TempDir(), clock, 80)
	defer leader.Close()
	follower := mustOpen(t, t.TempDir(), smallCfg(clock))
	defer follower.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	end := leader.EndOffset()
	for off := int64(0); off < end; {
		resp, err := leader.Read(nil, off, end, 1+rng.IntN(4000))
		if err != nil {
			t.Fatal(err)
		}
		whole := len(resp)
		// Cut anywhere after the first batch, as a size-limited Fetch does.
		if first := decodeHeader(resp).Size(); len(resp) > first && rng.IntN(2) == 0 {
			resp = resp[:first+rng.IntN(len(resp)-first)]
		}
		want := 0
		for _, b := range batchesOf(t, resp[:wholePrefix(resp)]) {
			want += len(b)
		}
		info, err := follower.AppendReplica(resp)
		if err != nil {
			t.Fatalf("AppendReplica at %d: %v", off, err)
		}
		if info.Bytes != want || info.Bytes > whole {
			t.Fatalf("used %d of %d bytes, want %d", info.Bytes, len(resp), want)
		}
		if follower.EndOffset() != info.LastOffset+1 {
			t.Fatalf("end %d after %+v", follower.EndOffset(), info)
		}
		off = follower.EndOffset()
	}
	if !bytes.Equal(readAll(t, follower, 1<<20), readAll(t, leader, 1<<20)) {
		t.Fatal("follower differs from leader")
	}
	// Nothing but a partial batch: nothing used, nothing written.
	b := encodeBatch(t, batchSpec{values: values(2, 10, 0)})
	binary.BigEndian.PutUint64(b, uint64(end))
	fixCRC(b)
	for _, cut := range []int{0, 5, logOverhead, headerSize, len(b) - 1} {
		info, err := follower.AppendReplica(b[:cut])
		if err != nil || info.Bytes != 0 || info.Batches != 0 || follower.EndOffset() != end {
			t.Fatalf("%d bytes of a batch: %+v, %v, end %d", cut, info, err, follower.EndOffset())
		}
	}
}

// wholePrefix is the length of the whole batches at the start of b.
func wholePrefix(b []byte) int {
	p := 0
	for len(b)-p >= logOverhead {
		n := logOverhead + int(int32(binary.BigEndian.Uint32(b[p+offLength:])))
		if n > len(b)-p {
			break
		}
		p += n
	}
	return p
}

// replicaBatch is a batch as a leader stores it: at base, in epoch.
func replicaBatch(t testing.TB, base int64, epoch int32, spec batchSpec) []byte {
	return stamped(encodeBatch(t, spec), base, epoch)
}

func TestAppendReplicaRefuses(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	spec := batchSpec{values: values(3, 10, 0), firstTs: clock.Millis()}
	if _, err := l.AppendReplica(replicaBatch(t, 0, 4, spec)); err != nil {
		t.Fatal(err)
	}
	end, size := l.EndOffset(), l.Size() // 3
	badCRC := replicaBatch(t, end, 4, spec)
	badCRC[len(badCRC)-1] ^= 1
	magic := replicaBatch(t, end, 4, spec)
	magic[offMagic] = 1
	shortLen := replicaBatch(t, end, 4, spec)
	binary.BigEndian.PutUint32(shortLen[offLength:], 20)
	lastDelta := replicaBatch(t, end, 4, batchSpec{values: values(3, 10, 0), lastDelta: func() *int32 { v := int32(-1); return &v }()})
	tests := []struct {
		name    string
		records []byte
		wantErr error
	}{
		// Gaps are what compaction leaves: TestAppendReplicaAcceptsCompactedBatches.
		{"overlap", replicaBatch(t, end-1, 4, spec), ErrOffsetMismatch},
		{"rewrite from the start", replicaBatch(t, 0, 4, spec), ErrOffsetMismatch},
		{"second batch overlaps", append(replicaBatch(t, end, 4, spec), replicaBatch(t, end+2, 4, spec)...), ErrOffsetMismatch},
		{"second batch starts inside the first", append(replicaBatch(t, end+3, 4, spec), replicaBatch(t, end+5, 4, spec)...), ErrOffsetMismatch},
		{"bad CRC", badCRC, ErrCorruptMessage},
		{"bad CRC in the second batch", append(replicaBatch(t, end, 4, spec), func() []byte { b := replicaBatch(t, end+3, 4, spec); b[70] ^= 1; return b }()...), ErrCorruptMessage},
		{"magic 1", magic, ErrUnsupportedMagic},
		{"length below a header", shortLen, ErrCorruptMessage},
		{"negative lastOffsetDelta", lastDelta, ErrInvalidRecord},
		{"lower leader epoch", replicaBatch(t, end, 3, spec), ErrInvalidRecord},
		{"epoch going down inside the append", append(replicaBatch(t, end, 6, spec), replicaBatch(t, end+3, 5, spec)...), ErrInvalidRecord},
		{"no epoch after epochs", replicaBatch(t, end, -1, spec), ErrInvalidRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := l.AppendReplica(tt.records)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if l.EndOffset() != end || l.Size() != size || l.LatestEpoch() != 4 {
				t.Fatalf("something changed: end %d size %d epoch %d", l.EndOffset(), l.Size(), l.LatestEpoch())
			}
		})
	}
	// The log is unharmed: the right batch still goes in, a new epoch too.
	good := append(replicaBatch(t, end, 4, spec), replicaBatch(t, end+3, 7, spec)...)
	if info, err := l.AppendReplica(good); err != nil || info.LastOffset != end+5 || info.Batches != 2 {
		t.Fatalf("good append after refusals: %+v, %v", info, err)
	}
	if e, ep := l.EndOffsetForEpoch(4); e != end+3 || ep != 4 || l.LatestEpoch() != 7 {
		t.Fatalf("epochs after the good append: %d %d latest %d", e, ep, l.LatestEpoch())
	}
	want := append(replicaBatch(t, 0, 4, spec), good...)
	if got := readAll(t, l, 1<<20); !bytes.Equal(got, want) {
		t.Fatal("stored bytes differ from the replicated ones")
	}
}

// A replica does not judge what its leader accepted: timestamps far out
// of bounds, LogAppendTime and batches over MaxBatchBytes are copied as
// they are.
func TestAppendReplicaSkipsLeaderChecks(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, MaxBatchBytes: 100})
	defer l.Close()
	old := clock.Now().AddDate(-10, 0, 0).UnixMilli()
	b := append(
		replicaBatch(t, 0, 0, batchSpec{values: values(3, 100, 0), firstTs: old}),
		replicaBatch(t, 3, 0, batchSpec{values: values(1, 1, 0), attrs: attrLogAppendTime, firstTs: old, maxTs: i64(old + 5)})...)
	if info, err := l.AppendReplica(b); err != nil || info.Bytes != len(b) {
		t.Fatalf("AppendReplica: %+v, %v", info, err)
	}
	if got := readAll(t, l, 1<<20); !bytes.Equal(got, b) {
		t.Fatal("stored bytes differ")
	}
}

// Producer state follows the replicated batches, so a follower that
// becomes leader recognises a producer's retry (KIP-98 across a leader
// change) and keeps checking its sequences, also after a restart.
func TestAppendReplicaProducerState(t *testing.T) {
	clock := newClock()
	leader := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer leader.Close()
	dir := t.TempDir()
	follower := mustOpen(t, dir, Config{Now: clock.Now})
	first := mustAppend(t, leader, idemBatch(t, clock, 7, 2, 0, 3), 1)
	mustAppend(t, leader, idemBatch(t, clock, 9, 0, 0, 1), 1)
	second := mustAppend(t, leader, idemBatch(t, clock, 7, 2, 3, 2), 1)
	if _, err := follower.AppendReplica(readAll(t, leader, 1<<20)); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log) {
		t.Helper()
		for _, c := range []struct {
			seq  int32
			n    int
			want AppendInfo
		}{{0, 3, first}, {3, 2, second}} {
			info, err := l.Append(idemBatch(t, clock, 7, 2, c.seq, c.n), 2)
			if err != nil || !info.Duplicate || info.BaseOffset != c.want.BaseOffset || info.LastOffset != c.want.LastOffset {
				t.Fatalf("retry of seq %d on the new leader: %+v, %v; want offsets of %+v", c.seq, info, err, c.want)
			}
		}
		if _, err := l.Append(idemBatch(t, clock, 7, 2, 9, 1), 2); !errors.Is(err, ErrOutOfOrderSequence) {
			t.Fatalf("sequence gap: %v", err)
		}
		if _, err := l.Append(idemBatch(t, clock, 7, 1, 0, 1), 2); !errors.Is(err, ErrInvalidProducerEpoch) {
			t.Fatalf("older producer epoch: %v", err)
		}
		if l.EndOffset() != 6 {
			t.Fatalf("retries were written: end %d", l.EndOffset())
		}
	}
	check(follower)
	crash(follower) // no snapshot at the end: state comes back from the batches
	follower = mustOpen(t, dir, Config{Now: clock.Now})
	defer follower.Close()
	check(follower)
	info, err := follower.Append(idemBatch(t, clock, 7, 2, 5, 1), 2)
	if err != nil || info.Duplicate || info.BaseOffset != 6 {
		t.Fatalf("next sequence on the new leader: %+v, %v", info, err)
	}
}
