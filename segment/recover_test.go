package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// buildLog appends n uncompressed batches of `records` records each with
// small segments and returns the log and the stored batches.
func buildLog(t *testing.T, dir string, clock *fakeClock, n, records int) (*Log, [][]byte) {
	t.Helper()
	l := mustOpen(t, dir, smallCfg(clock))
	var stored [][]byte
	for i := range n {
		b := encodeBatch(t, batchSpec{values: values(records, 200, byte(i)), firstTs: clock.Millis() + int64(i)*100})
		info := mustAppend(t, l, b, 0)
		stored = append(stored, stamped(b, info.BaseOffset, 0))
	}
	return l, stored
}

func activePath(t *testing.T, l *Log, suffix string) string {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	return offsetName(l.dir, l.active().base, suffix)
}

func segmentBases(l *Log) []int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var bs []int64
	for _, s := range l.mu.segs {
		bs = append(bs, s.base)
	}
	return bs
}

// A torn write (crash in the middle of a batch) is cut back to the last
// whole batch, and the log carries on from there.
func TestRecoverTornTail(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	l, stored := buildLog(t, dir, clock, 60, 5)
	path := activePath(t, l, logSuffix)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	crash(l)

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	last := stored[len(stored)-1]
	if err := os.Truncate(path, fi.Size()-int64(len(last))/2); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	want := decodeHeader(last)
	if l.EndOffset() != want.BaseOffset {
		t.Fatalf("EndOffset %d, want %d", l.EndOffset(), want.BaseOffset)
	}
	if got := readAll(t, l, 1<<20); !bytes.Equal(got, bytes.Join(stored[:len(stored)-1], nil)) {
		t.Fatal("recovered log differs from the whole batches written")
	}
	info := mustAppend(t, l, encodeBatch(t, batchSpec{values: values(2, 1, 0), firstTs: clock.Millis()}), 0)
	if info.BaseOffset != want.BaseOffset {
		t.Fatalf("next append at %d, want %d", info.BaseOffset, want.BaseOffset)
	}
}

func TestRecoverGarbageTail(t *testing.T) {
	for _, garbage := range [][]byte{
		{1, 2, 3},
		bytes.Repeat([]byte{0}, 200),    // zeroed preallocation
		bytes.Repeat([]byte{0xff}, 100), // negative lengths
		encodeBatch(t, batchSpec{values: values(1, 10, 0)})[:70], // a torn batch
	} {
		dir := t.TempDir()
		clock := newClock()
		l, stored := buildLog(t, dir, clock, 20, 3)
		path := activePath(t, l, logSuffix)
		end := l.EndOffset()
		if err := l.Close(); err != nil { // clean, but the marker won't match the size
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(garbage)
		f.Close()
		l = mustOpen(t, dir, smallCfg(clock))
		if l.EndOffset() != end {
			t.Fatalf("EndOffset %d, want %d", l.EndOffset(), end)
		}
		if got := readAll(t, l, 1<<20); !bytes.Equal(got, bytes.Join(stored, nil)) {
			t.Fatal("log differs after truncating garbage")
		}
		fi, _ := os.Stat(path)
		if l.Size() != int64(len(bytes.Join(stored, nil))) {
			t.Fatalf("Size %d after recovery (file %d)", l.Size(), fi.Size())
		}
		l.Close()
	}
}

// Missing or damaged indexes are rebuilt from the .log, for closed and
// active segments, and lookups still work.
func TestRecoverRebuildsIndexes(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	l, stored := buildLog(t, dir, clock, 80, 4)
	end := l.EndOffset()
	bases := segmentBases(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Remove some, corrupt others in each way Open must catch.
	for i, b := range bases {
		idx, tidx := offsetName(dir, b, indexSuffix), offsetName(dir, b, timeIndexSuffix)
		switch i % 4 {
		case 0:
			os.Remove(idx)
			os.Remove(tidx)
		case 1:
			os.WriteFile(idx, []byte{0, 0, 0}, 0o644) // not a multiple of 8
		case 2:
			os.WriteFile(idx, []byte{0, 0, 0, 1, 0x7f, 0, 0, 0}, 0o644) // past the end of .log
		case 3:
			os.WriteFile(tidx, bytes.Repeat([]byte{0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 1}, 2), 0o644) // not increasing
		}
	}
	os.WriteFile(filepath.Join(dir, "00000000000000000000.index.tmp"), []byte("x"), 0o644)
	os.WriteFile(offsetName(dir, 999999, indexSuffix), nil, 0o644) // orphan

	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	if l.EndOffset() != end {
		t.Fatalf("EndOffset %d, want %d", l.EndOffset(), end)
	}
	if got := readAll(t, l, 1); !bytes.Equal(got, bytes.Join(stored, nil)) {
		t.Fatal("reads differ after index rebuild")
	}
	for _, name := range []string{"00000000000000000000.index.tmp", "00000000000000999999.index"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Fatalf("%s not removed", name)
		}
	}
	// Every record is found by timestamp (records are 1 ms apart, batches
	// 100 ms), and a timestamp between batches finds the next batch.
	for i, b := range stored {
		h := decodeHeader(b)
		for _, q := range []struct{ ts, off, gotTs int64 }{
			{h.FirstTimestamp, h.BaseOffset, h.FirstTimestamp},
			{h.FirstTimestamp + 2, h.BaseOffset + 2, h.FirstTimestamp + 2},
			{h.FirstTimestamp - 50, h.BaseOffset, h.FirstTimestamp},
		} {
			off, ts, ok, err := l.OffsetForTimestamp(q.ts)
			if err != nil || !ok || off != q.off || ts != q.gotTs {
				t.Fatalf("batch %d: OffsetForTimestamp(%d) = %d, %d, %v, %v; want %d, %d", i, q.ts, off, ts, ok, err, q.off, q.gotTs)
			}
		}
	}
	last := decodeHeader(stored[len(stored)-1])
	if _, _, ok, err := l.OffsetForTimestamp(last.MaxTimestamp + 1); ok || err != nil {
		t.Fatalf("OffsetForTimestamp past the max: ok=%v err=%v", ok, err)
	}
	if ts, off := l.MaxTimestamp(); ts != last.MaxTimestamp || off != last.LastOffset() {
		t.Fatalf("MaxTimestamp() = %d, %d; want %d, %d", ts, off, last.MaxTimestamp, last.LastOffset())
	}
	// Rebuilt files pass the full check.
	for _, b := range bases {
		data, err := os.ReadFile(offsetName(dir, b, indexSuffix))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(offsetName(dir, b, logSuffix))
		if _, err := decodeOffsets(data, fi.Size(), 1<<31); err != nil {
			t.Fatalf("index of %d: %v", b, err)
		}
	}
}

// A byte flipped in a closed segment is never served: the read of that
// batch fails with ErrCorruptSegment, a read starting before it returns the
// valid prefix, and other data stays readable.
func TestReadCorruptClosedSegment(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	l, stored := buildLog(t, dir, clock, 60, 5)
	bases := segmentBases(l)
	if len(bases) < 3 {
		t.Fatalf("want at least 3 segments, have %d", len(bases))
	}
	end := l.EndOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Flip a byte in the second batch of the second segment.
	seg := bases[1]
	var victim []byte
	var pos int64
	for i, b := range stored {
		if decodeHeader(b).BaseOffset == seg {
			victim = stored[i+1]
			pos = int64(len(b)) + 100
			break
		}
	}
	path := offsetName(dir, seg, logSuffix)
	data, _ := os.ReadFile(path)
	data[pos] ^= 0x55
	os.WriteFile(path, data, 0o644)

	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	vh := decodeHeader(victim)
	if _, err := l.Read(nil, vh.BaseOffset, end, 1<<20); !errors.Is(err, ErrCorruptSegment) {
		t.Fatalf("Read of the corrupt batch: %v, want ErrCorruptSegment", err)
	}
	got, err := l.Read(nil, seg, end, 1<<20)
	if err != nil {
		t.Fatalf("Read before the corrupt batch: %v", err)
	}
	if h := decodeHeader(got); h.BaseOffset != seg || h.Size() != len(got) {
		t.Fatalf("expected exactly the batch before the corruption, got %d bytes from %d", len(got), h.BaseOffset)
	}
	// Other segments are fine.
	if _, err := l.Read(nil, 0, end, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(nil, bases[2], end, 1<<20); err != nil {
		t.Fatal(err)
	}
}

// Closed-segment header damage that breaks the batch structure is caught
// too (not only CRC mismatches).
func TestReadCorruptLength(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	l, _ := buildLog(t, dir, clock, 40, 5)
	bases := segmentBases(l)
	end := l.EndOffset()
	l.Close()
	path := offsetName(dir, bases[0], logSuffix)
	data, _ := os.ReadFile(path)
	data[offLength] = 0x7f // first batch claims ~2 GiB
	os.WriteFile(path, data, 0o644)
	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	if _, err := l.Read(nil, 0, end, 1000); !errors.Is(err, ErrCorruptSegment) {
		t.Fatalf("got %v, want ErrCorruptSegment", err)
	}
	if _, err := l.Read(nil, bases[1], end, 1000); err != nil {
		t.Fatal(err)
	}
}

// After an unclean stop the leader-epoch history is repaired from the
// recovered tail and trimmed to the log end.
func TestRecoverEpochs(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	l := mustOpen(t, dir, smallCfg(clock))
	b := func() []byte { return encodeBatch(t, batchSpec{values: values(2, 10, 0), firstTs: clock.Millis()}) }
	mustAppend(t, l, b(), 1)
	mustAppend(t, l, b(), 1)
	mustAppend(t, l, b(), 4) // offset 4
	info := mustAppend(t, l, b(), 7)
	if l.LatestEpoch() != 7 {
		t.Fatalf("LatestEpoch %d", l.LatestEpoch())
	}
	path := activePath(t, l, logSuffix)
	crash(l)
	// Lose the epoch-7 batch.
	fi, _ := os.Stat(path)
	os.Truncate(path, fi.Size()-10)
	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	if l.EndOffset() != info.BaseOffset || l.LatestEpoch() != 4 {
		t.Fatalf("EndOffset %d LatestEpoch %d; want %d, 4", l.EndOffset(), l.LatestEpoch(), info.BaseOffset)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, epochCheckpointName)); string(data) != "0\n2\n1 0\n4 4\n" {
		t.Fatalf("checkpoint %q", data)
	}
	// A missing checkpoint is rebuilt from the batch headers.
	l.Close()
	os.Remove(filepath.Join(dir, epochCheckpointName))
	l2 := mustOpen(t, dir, smallCfg(clock))
	defer l2.Close()
	if end, ep := l2.EndOffsetForEpoch(1); end != 4 || ep != 1 {
		t.Fatalf("EndOffsetForEpoch(1) after rebuild = %d, %d", end, ep)
	}
}

func FuzzRecover(f *testing.F) {
	var seed []byte
	for i := range 4 {
		b := encodeBatch(f, batchSpec{values: values(1+i, 20, byte(i)), codec: i % 5, firstTs: 1000})
		seed = append(seed, stamped(b, int64(i*(i+1)/2), 0)...)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)-5])
	f.Add(append(bytes.Clone(seed), 0, 0, 0, 0))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 80))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(offsetName(dir, 0, logSuffix), data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, Config{IndexIntervalBytes: 64})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer l.Close()
		end := l.EndOffset()
		off := l.StartOffset()
		for off < end {
			out, err := l.Read(nil, off, end, 1<<20)
			if err != nil {
				t.Fatalf("Read(%d) after recovery: %v", off, err)
			}
			if len(out) == 0 {
				t.Fatalf("Read(%d) empty below end %d", off, end)
			}
			for p := 0; p < len(out); {
				h, err := ParseBatchHeader(out[p:])
				if err != nil || p+h.Size() > len(out) {
					t.Fatalf("returned bytes do not parse: %v", err)
				}
				if batchCRC(out[p:p+h.Size()]) != h.CRC {
					t.Fatal("returned batch fails its CRC")
				}
				off = h.LastOffset() + 1
				p += h.Size()
			}
		}
		l.OffsetForTimestamp(0)
		l.MaxTimestamp()
		if _, err := l.Append(encodeBatch(t, batchSpec{values: values(1, 1, 0), firstTs: -1, tsDeltas: []int64{0}}), 0); err != nil {
			t.Fatalf("Append after recovery: %v", err)
		}
	})
}

// Random damage anywhere in a multi-segment log never yields a panic or
// unchecked bytes.
func TestRandomDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for round := range 8 {
		dir := t.TempDir()
		clock := newClock()
		l, _ := buildLog(t, dir, clock, 30, 3)
		bases := segmentBases(l)
		if round%2 == 0 {
			l.Close()
		} else {
			crash(l)
		}
		for range 3 {
			b := bases[rng.IntN(len(bases))]
			suffix := []string{logSuffix, indexSuffix, timeIndexSuffix, snapshotSuffix}[rng.IntN(4)]
			data, err := os.ReadFile(offsetName(dir, b, suffix))
			if err != nil || len(data) == 0 {
				continue
			}
			data[rng.IntN(len(data))] ^= byte(1 + rng.IntN(255))
			os.WriteFile(offsetName(dir, b, suffix), data, 0o644)
		}
		l = mustOpen(t, dir, smallCfg(clock))
		end := l.EndOffset()
		for off := l.StartOffset(); off < end; off++ {
			out, err := l.Read(nil, off, end, 4096)
			if err != nil {
				if !errors.Is(err, ErrCorruptSegment) {
					t.Fatalf("Read(%d): %v", off, err)
				}
				continue
			}
			for p := 0; p < len(out); {
				h, err := ParseBatchHeader(out[p:])
				if err != nil || batchCRC(out[p:p+h.Size()]) != h.CRC {
					t.Fatal("served bytes fail their CRC")
				}
				p += h.Size()
			}
		}
		l.Close()
	}
}

// The first 21 bytes of a batch (base offset, length, leader epoch, magic)
// are outside its CRC, so a damaged base offset is caught by the offsets
// themselves: a read never serves a batch outside its segment's offsets
// or below the batch before it, and never skips one for that reason
// (issue 9 item 7).
func TestReadCorruptBaseOffset(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte, prevBase int64) // b is the victim batch in the file
	}{
		{"bit flipped high", func(b []byte, _ int64) { b[0] ^= 0x01 }}, // +2^56
		{"repeats the batch before", func(b []byte, prevBase int64) {
			binary.BigEndian.PutUint64(b, uint64(prevBase))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newClock()
			l, stored := buildLog(t, dir, clock, 60, 5)
			bases := segmentBases(l)
			if len(bases) < 3 {
				t.Fatalf("want at least 3 segments, have %d", len(bases))
			}
			end := l.EndOffset()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			seg := bases[1]
			var prev, victim BatchHeader
			var pos int64
			for i, b := range stored {
				if decodeHeader(b).BaseOffset == seg {
					prev, victim = decodeHeader(b), decodeHeader(stored[i+1])
					pos = int64(len(b))
					break
				}
			}
			path := offsetName(dir, seg, logSuffix)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(data[pos:], prev.BaseOffset)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}

			l = mustOpen(t, dir, smallCfg(clock))
			defer l.Close()
			for off := victim.BaseOffset; off <= victim.LastOffset(); off++ {
				got, err := l.Read(nil, off, end, 1<<20)
				if !errors.Is(err, ErrCorruptSegment) {
					var first int64 = -1
					if len(got) >= headerSize {
						first = decodeHeader(got).BaseOffset
					}
					t.Fatalf("Read(%d) of the damaged batch: %d bytes from offset %d, err %v; want ErrCorruptSegment", off, len(got), first, err)
				}
			}
			got, err := l.Read(nil, seg, end, 1<<20)
			if err != nil {
				t.Fatalf("Read before the damaged batch: %v", err)
			}
			if h := decodeHeader(got); h.BaseOffset != seg || h.Size() != len(got) {
				t.Fatalf("want exactly the batch before the damage, got %d bytes from %d", len(got), h.BaseOffset)
			}
			if _, err := l.Read(nil, bases[2], end, 1<<20); err != nil {
				t.Fatal(err)
			}
		})
	}
}
