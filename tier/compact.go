package tier

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sync/atomic"

	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// The cold tier's side of log compaction (the compactor package drives
// it): reading a remote segment's batches (ReadLog, ProducerSnapshot),
// writing the compacted object (SegmentWriter) and swapping it into the
// manifest (ReplaceCompacted). Compaction keeps offsets: a compacted
// object covers exactly the offsets of what it replaces, with gaps between
// and inside its batches, possibly with no batch at all.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// batchHeaderSize is the v2 record batch header; lengthEnd is where its
// length field ends, which is all it takes to know a batch's size.
const (
	batchHeaderSize = 61
	lengthEnd       = 12
)

// ReadLog calls fn with each whole batch of s's log part in offset order.
// It fetches the part with ranged GETs of chunk bytes (the tier's chunk
// size if chunk <= 0), straight from the store, bypassing the chunk cache a
// compaction pass would only flush: a batch cut by a chunk's end is
// completed by the next GET, and one larger than a chunk is fetched whole,
// so that every byte of the object is read once. Every batch is checked
// against its CRC-32C and its offsets against those before it and the
// segment's range, and the whole part against its length and CRC-32C once
// read (format.Part.Check, streamed). fn's batch is valid only during the
// call; an error from fn ends the read and is returned as it is. A bad
// object is segment.ErrCorruptSegment, naming its key.
func (t *Tier) ReadLog(ctx context.Context, s format.RemoteSegment, chunk int64, fn func(batch []byte) error) error {
	if chunk <= 0 {
		chunk = t.cfg.ChunkBytes
	}
	ctx = t.counted(ctx)
	corrupt := func(pos int64, err error) error {
		return fmt.Errorf("%w: log of %s at position %d: %v", segment.ErrCorruptSegment, s.Key, pos, err)
	}
	sum := crc32.New(castagnoli)
	var (
		back     []byte // holds buf, the bytes fetched and not yet consumed
		buf      []byte
		consumed int64 // log position of buf[0]
		next     int64 // log position of the next byte to fetch
		prevLast = s.BaseOffset - 1
	)
	for {
		for len(buf) >= batchHeaderSize {
			h, err := segment.ParseBatchHeader(buf)
			if err != nil {
				return corrupt(consumed, err)
			}
			size := h.Size()
			if size > len(buf) {
				break
			}
			if h.BaseOffset <= prevLast || h.LastOffsetDelta < 0 || h.LastOffset() > s.LastOffset {
				return corrupt(consumed, fmt.Errorf("batch offsets [%d, %d] after offset %d in a segment ending at %d", h.BaseOffset, h.LastOffset(), prevLast, s.LastOffset))
			}
			if !h.CRCMatches(buf[:size]) {
				return corrupt(consumed, fmt.Errorf("batch at offset %d fails its CRC", h.BaseOffset))
			}
			if err := fn(buf[:size]); err != nil {
				return err
			}
			prevLast = h.LastOffset()
			buf = buf[size:]
			consumed += int64(size)
		}
		if next >= s.Log.Len {
			break
		}
		want := chunk
		if len(buf) >= lengthEnd {
			// The batch in hand is cut: fetch at least the rest of it.
			size := lengthEnd + int64(int32(binary.BigEndian.Uint32(buf[8:])))
			want = max(want, size-int64(len(buf)))
		}
		want = min(want, s.Log.Len-next)
		// Keep what is left at the front, then read after it.
		need := len(buf) + int(want)
		if cap(back) < need {
			back = append(make([]byte, 0, need), buf...)
		} else {
			back = back[:copy(back[:cap(back)], buf)]
		}
		back = back[:need]
		if err := t.getRange(ctx, s.Key, s.Log.Offset+next, back[len(buf):]); err != nil {
			return fmt.Errorf("read log of %s: %w", s.Key, err)
		}
		sum.Write(back[len(buf):])
		next += want
		buf = back
	}
	if len(buf) > 0 {
		return corrupt(consumed, fmt.Errorf("%d bytes after the last whole batch", len(buf)))
	}
	if c := sum.Sum32(); c != s.Log.CRC {
		return corrupt(0, fmt.Errorf("log part has CRC-32C %08x, want %08x", c, s.Log.CRC))
	}
	return nil
}

// ProducerSnapshot returns s's producer-snapshot part, fetched with one
// ranged GET (none if it is empty) and checked against its CRC-32C.
func (t *Tier) ProducerSnapshot(ctx context.Context, s format.RemoteSegment) ([]byte, error) {
	p := s.ProducerSnapshot
	if p.Len == 0 {
		return nil, nil
	}
	if p.Len < 0 || p.End() > s.Size {
		return nil, fmt.Errorf("%w: producer snapshot of %s at [%d, %d) outside the %d-byte object", segment.ErrCorruptSegment, s.Key, p.Offset, p.End(), s.Size)
	}
	b := make([]byte, p.Len)
	if err := t.getRange(t.counted(ctx), s.Key, p.Offset, b); err != nil {
		return nil, fmt.Errorf("read producer snapshot of %s: %w", s.Key, err)
	}
	if err := p.Check(b); err != nil {
		return nil, fmt.Errorf("%w: producer snapshot of %s: %v", segment.ErrCorruptSegment, s.Key, err)
	}
	return b, nil
}

// getRange fills b with the bytes of key from off, in one ranged GET.
func (t *Tier) getRange(ctx context.Context, key string, off int64, b []byte) error {
	rc, err := t.store.GetRange(ctx, key, off, int64(len(b)))
	if err != nil {
		return err
	}
	defer rc.Close()
	if n, err := io.ReadFull(rc, b); err != nil {
		return fmt.Errorf("%d of %d bytes at %d: %w", n, len(b), off, err)
	}
	return nil
}

// RequestCounts returns how many GETs and PUTs (conditional creates
// included) the tier has made for compaction so far: ReadLog,
// ProducerSnapshot, SegmentWriter.Finish and ReplaceCompacted, with the
// manifest reads and writes the latter makes. The difference across a
// pass is that pass's bill; reads by consumers and uploads are not in it.
func (t *Tier) RequestCounts() (gets, puts int64) {
	return t.compaction.gets.Load(), t.compaction.puts.Load()
}

// requestCounts counts the requests made under a context marked by
// counted.
type requestCounts struct{ gets, puts atomic.Int64 }

type countedKey struct{}

// counted marks ctx so that the tier's store counts the requests made
// under it in t.compaction.
func (t *Tier) counted(ctx context.Context) context.Context {
	return context.WithValue(ctx, countedKey{}, &t.compaction)
}

// countingStore counts, in the requestCounts its context carries, the GETs
// and PUTs made under a context that carries one; it passes every call
// through unchanged.
type countingStore struct{ objstore.Store }

func countsOf(ctx context.Context) *requestCounts {
	c, _ := ctx.Value(countedKey{}).(*requestCounts)
	return c
}

func (s countingStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if c := countsOf(ctx); c != nil {
		c.gets.Add(1)
	}
	return s.Store.GetRange(ctx, key, off, n)
}

func (s countingStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if c := countsOf(ctx); c != nil {
		c.puts.Add(1)
	}
	return s.Store.Put(ctx, key, r, size)
}

func (s countingStore) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if c := countsOf(ctx); c != nil {
		c.puts.Add(1)
	}
	return s.Store.Create(ctx, key, r, size)
}

func (s countingStore) String() string { return fmt.Sprint(s.Store) }
