package compactor

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"strata/segment"
)

// rec is one record for keyedBatch: a nil value is a tombstone.
type rec struct {
	key, value []byte
}

// keyedBatch encodes an uncompressed v2 batch of recs, as a producer
// would send it (offsets from 0; the log assigns them).
func keyedBatch(ts int64, recs ...rec) []byte {
	var body []byte
	for i, r := range recs {
		var b []byte
		b = append(b, 0)
		b = binary.AppendVarint(b, 0)
		b = binary.AppendVarint(b, int64(i))
		b = binary.AppendVarint(b, int64(len(r.key)))
		b = append(b, r.key...)
		if r.value == nil {
			b = binary.AppendVarint(b, -1)
		} else {
			b = binary.AppendVarint(b, int64(len(r.value)))
			b = append(b, r.value...)
		}
		b = binary.AppendVarint(b, 0)
		body = binary.AppendVarint(body, int64(len(b)))
		body = append(body, b...)
	}
	h := make([]byte, 61)
	binary.BigEndian.PutUint32(h[8:], uint32(49+len(body)))
	h[16] = 2
	binary.BigEndian.PutUint32(h[23:], uint32(len(recs)-1))
	binary.BigEndian.PutUint64(h[27:], uint64(ts))
	binary.BigEndian.PutUint64(h[35:], uint64(ts))
	binary.BigEndian.PutUint64(h[43:], ^uint64(0)) // producer id -1
	binary.BigEndian.PutUint16(h[51:], 0xffff)
	binary.BigEndian.PutUint32(h[53:], 0xffffffff)
	binary.BigEndian.PutUint32(h[57:], uint32(len(recs)))
	b := append(h, body...)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeHost hands the compactor fixed partitions.
type fakeHost struct {
	local []LocalPartition
	cold  []ColdPartition
}

func (h *fakeHost) LocalPartitions() []LocalPartition { return h.local }
func (h *fakeHost) ColdPartitions() []ColdPartition   { return h.cold }

// openLog opens a log that rolls every segBytes.
func openLog(t testing.TB, dir string, segBytes int64, now func() time.Time) *segment.Log {
	t.Helper()
	l, err := segment.Open(filepath.Join(dir, "p-0"), segment.Config{SegmentBytes: segBytes, Now: now, RetentionBytes: -1, RetentionMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// history writes n updates over keys keys to l, ten records a batch:
// the value of update i is "v<i>", and keys (i % keys) cycle. Keys in
// deleted get a tombstone after their last update. It returns each key's
// final value (nil: deleted).
func history(t testing.TB, l *segment.Log, n, keys int, deleted func(k int) bool, ts int64) map[string][]byte {
	t.Helper()
	final := map[string][]byte{}
	var batch []rec
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if _, err := l.Append(keyedBatch(ts, batch...), 0); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range n {
		k := fmt.Sprintf("key-%06d", i%keys)
		v := fmt.Appendf(nil, "v%d", i)
		batch = append(batch, rec{[]byte(k), v})
		final[k] = v
		if len(batch) == 10 {
			flush()
		}
	}
	flush()
	for k := range keys {
		if deleted != nil && deleted(k) {
			key := fmt.Sprintf("key-%06d", k)
			batch = append(batch, rec{[]byte(key), nil})
			final[key] = nil
			if len(batch) == 10 {
				flush()
			}
		}
	}
	flush()
	// Fill (one key) until everything above is in closed segments.
	end := l.EndOffset()
	for l.ActiveBase() < end {
		if _, err := l.Append(keyedBatch(ts, rec{[]byte("roll"), make([]byte, 512)}), 0); err != nil {
			t.Fatal(err)
		}
	}
	return final
}

// readRecord is a record as a consumer sees it.
type readRecord struct {
	offset int64
	key    string
	value  []byte // nil: a tombstone
}

// decodeBatch decodes an uncompressed batch (what keyedBatch writes, after
// compaction), checking offsets ascend.
func decodeBatch(t testing.TB, b []byte) (recs []readRecord) {
	t.Helper()
	h, err := segment.ParseBatchHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	body := b[61:h.Size()]
	varint := func() int64 {
		v, n := binary.Varint(body)
		if n <= 0 {
			t.Fatalf("bad varint in batch at %d", h.BaseOffset)
		}
		body = body[n:]
		return v
	}
	for range h.NumRecords {
		varint() // length
		body = body[1:]
		varint() // timestamp delta
		off := h.BaseOffset + varint()
		kl := varint()
		key := string(body[:kl])
		body = body[kl:]
		var value []byte
		if vl := varint(); vl >= 0 {
			value = append([]byte{}, body[:vl]...)
			body = body[vl:]
		}
		varint() // headers
		recs = append(recs, readRecord{off, key, value})
	}
	return recs
}

// readBatches decodes what read returns from offset on, following gaps,
// until end; offsets must strictly increase.
func readBatches(t testing.TB, start, end int64, read func(offset int64) ([]byte, error)) []readRecord {
	t.Helper()
	var out []readRecord
	last := int64(-1)
	for off := start; off < end; {
		b, err := read(off)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if len(b) == 0 {
			break
		}
		for len(b) > 0 {
			h, err := segment.ParseBatchHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range decodeBatch(t, b[:h.Size()]) {
				if r.offset <= last {
					t.Fatalf("offset %d after %d", r.offset, last)
				}
				last = r.offset
				if r.offset >= off {
					out = append(out, r)
				}
			}
			off = h.LastOffset() + 1
			b = b[h.Size():]
		}
	}
	return out
}

func readLog(t testing.TB, l *segment.Log) []readRecord {
	return readBatches(t, l.StartOffset(), l.EndOffset(), func(off int64) ([]byte, error) {
		return l.Read(nil, off, l.EndOffset(), 1<<20)
	})
}

// checkCompacted checks recs against final: every key's last record holds
// its final value (a deleted key's is a tombstone, or it is gone when
// tombstonesGone), and below end no key appears twice.
func checkCompacted(t testing.TB, recs []readRecord, final map[string][]byte, end int64, tombstonesGone bool) {
	t.Helper()
	last := map[string][]byte{}
	seen := map[string]bool{}
	tombstones := 0
	for _, r := range recs {
		if r.key == "roll" {
			continue
		}
		if r.offset < end {
			if seen[r.key] {
				t.Fatalf("key %s twice below %d (again at %d)", r.key, end, r.offset)
			}
			seen[r.key] = true
		}
		if r.value == nil {
			tombstones++
		}
		last[r.key] = r.value
	}
	for k, v := range final {
		got, ok := last[k]
		switch {
		case v == nil && tombstonesGone:
			if ok {
				t.Fatalf("deleted key %s still has a record (%q)", k, got)
			}
		case !ok:
			t.Fatalf("key %s lost (want %q)", k, v)
		case string(got) != string(v) || (got == nil) != (v == nil):
			t.Fatalf("key %s: %q, want %q", k, got, v)
		}
	}
	if tombstonesGone && tombstones > 0 {
		t.Fatalf("%d tombstones left", tombstones)
	}
}
