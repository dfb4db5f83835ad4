package segment

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// smallCfg rolls often so that tests cross many segments.
func smallCfg(clock *fakeClock) Config {
	return Config{SegmentBytes: 8 << 10, IndexIntervalBytes: 512, Now: clock.Now}
}

// appendRandom appends n random batches (some multi-batch appends, mixed
// codecs) and returns the expected stored log.
func appendRandom(t *testing.T, l *Log, rng *rand.Rand, n int, clock *fakeClock, epoch int32) []byte {
	t.Helper()
	var want []byte
	for i := 0; i < n; {
		k := 1
		if rng.IntN(5) == 0 {
			k = 1 + rng.IntN(3)
		}
		var req [][]byte
		for range k {
			spec := batchSpec{
				codec:   max(0, rng.IntN(12)-7), // mostly uncompressed: codecs are slow under -race
				values:  values(1+rng.IntN(20), rng.IntN(300), byte(i)),
				firstTs: clock.Millis() + int64(i),
			}
			req = append(req, encodeBatch(t, spec))
			i++
		}
		info := mustAppend(t, l, bytes.Join(req, nil), epoch)
		off := info.BaseOffset
		for _, b := range req {
			want = append(want, stamped(b, off, epoch)...)
			off += int64(decodeHeader(b).LastOffsetDelta) + 1
		}
		if off-1 != info.LastOffset {
			t.Fatalf("append info %+v, expected last offset %d", info, off-1)
		}
	}
	return want
}

func TestAppendReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	l := mustOpen(t, dir, smallCfg(clock))
	rng := rand.New(rand.NewPCG(1, 2))
	want := appendRandom(t, l, rng, 150, clock, 0)

	l.mu.RLock()
	nsegs := len(l.mu.segs)
	l.mu.RUnlock()
	if nsegs < 10 {
		t.Fatalf("only %d segments; the test wants many rolls", nsegs)
	}
	check := func(l *Log) {
		t.Helper()
		for _, maxBytes := range []int{1, 1 << 20} {
			if got := readAll(t, l, maxBytes); !bytes.Equal(got, want) {
				t.Fatalf("maxBytes %d: read %d bytes, want %d identical bytes", maxBytes, len(got), len(want))
			}
		}
		if l.Size() != int64(len(want)) {
			t.Fatalf("Size %d, want %d", l.Size(), len(want))
		}
		// Every offset is served by the batch that contains it.
		for off := int64(0); off < l.EndOffset(); off += 13 {
			b, err := l.Read(nil, off, l.EndOffset(), 1)
			if err != nil {
				t.Fatal(err)
			}
			h := decodeHeader(b)
			if h.BaseOffset > off || h.LastOffset() < off || h.Size() != len(b) {
				t.Fatalf("Read(%d) returned batch [%d, %d] of %d bytes (len %d)", off, h.BaseOffset, h.LastOffset(), h.Size(), len(b))
			}
			if _, err := ValidateBatch(b, 0); err != nil {
				t.Fatalf("returned batch does not validate: %v", err)
			}
		}
	}
	check(l)
	end := l.EndOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Read(nil, 0, end, 100); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	if l.EndOffset() != end {
		t.Fatalf("EndOffset after reopen %d, want %d", l.EndOffset(), end)
	}
	check(l)
	// Appends continue where they stopped.
	more := appendRandom(t, l, rng, 20, clock, 0)
	want = append(want, more...)
	check(l)
}

func TestConcurrentReadersSeeWholeAppends(t *testing.T) {
	clock := newClock()
	cfg := smallCfg(clock)
	cfg.SegmentBytes = 64 << 10
	l := mustOpen(t, t.TempDir(), cfg)
	defer l.Close()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(5, 6))
			for {
				select {
				case <-stop:
					return
				default:
				}
				end := l.EndOffset()
				out, err := l.Read(nil, rng.Int64N(end+1), end, 16<<10)
				if err != nil {
					t.Error(err)
					return
				}
				for p := 0; p < len(out); {
					h, err := ParseBatchHeader(out[p:])
					if err != nil || p+h.Size() > len(out) || batchCRC(out[p:p+h.Size()]) != h.CRC {
						t.Errorf("reader saw a partial or bad batch at %d: %v", p, err)
						return
					}
					p += h.Size()
				}
				l.MaxTimestamp()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(3, 4))
	appendRandom(t, l, rng, 120, clock, 0)
	close(stop)
	wg.Wait()
}

func TestReadLimits(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, IndexIntervalBytes: 100})
	defer l.Close()
	var batches [][]byte
	for i := range 6 {
		b := encodeBatch(t, batchSpec{values: values(4, 250, byte(i)), firstTs: clock.Millis()})
		info := mustAppend(t, l, b, 3)
		batches = append(batches, stamped(b, info.BaseOffset, 3))
	}
	size := len(batches[0]) // all batches have the same size
	end := l.EndOffset()    // 24

	tests := []struct {
		name             string
		offset, maxOff   int64
		maxBytes         int
		wantFirst, wantN int
		wantErr          error
	}{
		{name: "KIP-74: first batch whole even if larger", offset: 0, maxOff: end, maxBytes: 10, wantFirst: 0, wantN: 1},
		{name: "zero maxBytes still returns one batch", offset: 5, maxOff: end, maxBytes: 0, wantFirst: 1, wantN: 1},
		{name: "maxBytes fits two and a half", offset: 0, maxOff: end, maxBytes: size * 5 / 2, wantFirst: 0, wantN: 2},
		{name: "maxBytes exact", offset: 0, maxOff: end, maxBytes: 3 * size, wantFirst: 0, wantN: 3},
		{name: "mid-batch offset starts at its batch", offset: 9, maxOff: end, maxBytes: 1 << 20, wantFirst: 2, wantN: 4},
		{name: "maxOffset stops before its batch", offset: 0, maxOff: 12, maxBytes: 1 << 20, wantFirst: 0, wantN: 3},
		{name: "maxOffset inside a batch includes it", offset: 0, maxOff: 13, maxBytes: 1 << 20, wantFirst: 0, wantN: 4},
		{name: "offset at end", offset: end, maxOff: end, maxBytes: 100, wantN: 0},
		{name: "offset at maxOffset", offset: 8, maxOff: 8, maxBytes: 100, wantN: 0},
		{name: "offset past end", offset: end + 1, maxOff: end + 5, maxBytes: 100, wantErr: ErrOffsetOutOfRange},
		{name: "negative offset", offset: -1, maxOff: end, maxBytes: 100, wantErr: ErrOffsetOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("prefix")
			got, err := l.Read(bytes.Clone(prefix), tt.offset, tt.maxOff, tt.maxBytes)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !bytes.HasPrefix(got, prefix) {
				t.Fatalf("dst prefix lost")
			}
			want := append(bytes.Clone(prefix), bytes.Join(batches[tt.wantFirst:tt.wantFirst+tt.wantN], nil)...)
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d (batches %d..+%d)", len(got), len(want), tt.wantFirst, tt.wantN)
			}
		})
	}
}

func TestAppendRejectsWithoutWriting(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, MaxBatchBytes: 4000, TimestampBeforeMax: time.Hour})
	defer l.Close()
	good := encodeBatch(t, batchSpec{values: values(2, 10, 0), firstTs: clock.Millis()})
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 0xff
	tests := []struct {
		name    string
		records []byte
		wantErr error
	}{
		{"empty", nil, ErrInvalidRecord},
		{"second batch corrupt", append(bytes.Clone(good), bad...), ErrCorruptMessage},
		{"stray bytes after a batch", append(bytes.Clone(good), 1, 2, 3), ErrCorruptMessage},
		{"too large", encodeBatch(t, batchSpec{values: values(5, 1000, 0), firstTs: clock.Millis()}), ErrMessageTooLarge},
		{"timestamp too far in the future", encodeBatch(t, batchSpec{values: values(1, 1, 0), firstTs: clock.Millis() + 2*time.Hour.Milliseconds()}), ErrInvalidTimestamp},
		{"timestamp too old", encodeBatch(t, batchSpec{values: values(1, 1, 0), firstTs: clock.Millis() - 2*time.Hour.Milliseconds()}), ErrInvalidTimestamp},
		{"magic 0", func() []byte { b := bytes.Clone(good); b[offMagic] = 0; return b }(), ErrUnsupportedMagic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := l.Append(tt.records, 0)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if l.EndOffset() != 0 || l.Size() != 0 {
				t.Fatalf("something was written: end %d size %d", l.EndOffset(), l.Size())
			}
		})
	}
	// NO_TIMESTAMP (-1) records are exempt from the bounds, as in Kafka.
	mustAppend(t, l, encodeBatch(t, batchSpec{values: values(1, 1, 0), firstTs: -1, tsDeltas: []int64{0}}), 0)
}

// A producer's wrong maxTimestamp is corrected (and the CRC recomputed), as
// Kafka does, so that the time index is right.
func TestAppendFixesMaxTimestamp(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	ts := clock.Millis()
	b := encodeBatch(t, batchSpec{values: values(3, 5, 0), firstTs: ts, tsDeltas: []int64{0, 50, 10}, maxTs: i64(ts)})
	info := mustAppend(t, l, b, 0)
	if info.MaxTimestamp != ts+50 {
		t.Fatalf("MaxTimestamp %d, want %d", info.MaxTimestamp, ts+50)
	}
	got, err := l.Read(nil, 0, 10, 1000)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ValidateBatch(got, 0)
	if err != nil || h.MaxTimestamp != ts+50 {
		t.Fatalf("stored header %+v, err %v", h, err)
	}
	if mts, off := l.MaxTimestamp(); mts != ts+50 || off != 1 {
		t.Fatalf("MaxTimestamp() = %d, %d; want %d, 1", mts, off, ts+50)
	}
}

func TestDelete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "topic-0")
	l := mustOpen(t, dir, Config{})
	mustAppend(t, l, encodeBatch(t, batchSpec{values: values(1, 1, 0), firstTs: time.Now().UnixMilli()}), 0)
	if err := l.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory still there: %v", err)
	}
	if _, err := l.Append(encodeBatch(t, batchSpec{values: values(1, 1, 0)}), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Delete: %v", err)
	}
}

// Kafka's LogValidator refuses a producer batch that claims LogAppendTime
// ("Producer should not set timestamp type to LogAppendTime"): its
// timestamps would escape the message.timestamp.* bounds, and a batch
// stamped a century ahead would stall time retention and rolling.
func TestAppendRefusesProducerLogAppendTime(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	future := clock.Now().AddDate(100, 0, 0).UnixMilli()
	for _, codec := range []int{codecNone, codecZstd} {
		b := encodeBatch(t, batchSpec{codec: codec, attrs: attrLogAppendTime, values: values(2, 10, 0), firstTs: future, maxTs: i64(future)})
		if _, err := l.Append(b, 0); !errors.Is(err, ErrInvalidTimestamp) {
			t.Fatalf("codec %d: err = %v, want %v", codec, err, ErrInvalidTimestamp)
		}
	}
	if l.EndOffset() != 0 || l.Size() != 0 {
		t.Fatalf("something was written: end %d size %d", l.EndOffset(), l.Size())
	}
	if ts, _ := l.MaxTimestamp(); ts != -1 {
		t.Fatalf("max timestamp %d after refused batches", ts)
	}
}
