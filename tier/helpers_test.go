package tier

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// getRecord is one GetRange a recordingStore saw.
type getRecord struct {
	key    string
	off, n int64
}

// recordingStore passes every call to a store and remembers the ranged
// GETs, how many ran at once at most, and, with delay set, holds each GET
// that long first so that concurrent ones overlap.
type recordingStore struct {
	objstore.Store
	delay time.Duration

	mu       sync.Mutex
	gets     []getRecord
	inFlight atomic.Int64
	maxIn    atomic.Int64
}

func (s *recordingStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	s.mu.Lock()
	s.gets = append(s.gets, getRecord{key, off, n})
	s.mu.Unlock()
	in := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxIn.Load()
		if in <= m || s.maxIn.CompareAndSwap(m, in) {
			break
		}
	}
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.GetRange(ctx, key, off, n)
}

// getsOf returns the GETs of key seen so far.
func (s *recordingStore) getsOf(key string) []getRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []getRecord
	for _, g := range s.gets {
		if g.key == key {
			out = append(out, g)
		}
	}
	return out
}

// reset forgets the GETs seen so far.
func (s *recordingStore) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets = nil
	s.maxIn.Store(0)
}

// timedBatch encodes a v2 record batch of one record per value, every
// record stamped ts.
func timedBatch(ts int64, values ...[]byte) []byte {
	rb := kmsg.RecordBatch{Magic: 2, LastOffsetDelta: int32(len(values) - 1), NumRecords: int32(len(values)),
		FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1}
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: v}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		rb.Records = r.AppendTo(rb.Records)
	}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// testTP is the partition the tier tests upload to.
var testTP = format.TopicPartition{Topic: "t", TopicID: [16]byte{1}, Partition: 0}

// uploadedLog writes batches of one 1 KiB record each, record i stamped
// ts(i), into a local log with segments of segBytes, uploads every closed
// segment to a Tier over a recordingStore, and returns the log, the tier
// and the store. cfg's Store and CacheDir are filled in.
func uploadedLog(t *testing.T, n int, segBytes int64, ts func(i int) int64, cfg Config) (*segment.Log, *Tier, *recordingStore) {
	t.Helper()
	ctx := context.Background()
	l, err := segment.Open(t.TempDir(), segment.Config{SegmentBytes: segBytes, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	value := make([]byte, 1<<10)
	for i := range n {
		binary.BigEndian.PutUint64(value, uint64(i))
		if _, err := l.Append(timedBatch(ts(i), value), 0); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &recordingStore{Store: dir}
	cfg.Store, cfg.CacheDir = store, t.TempDir()
	tr, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	return l, tr, store
}
