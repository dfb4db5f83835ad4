package archive

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"strata/segment"
	"strata/tier/format"
)

// ErrCorrupt is wrapped by every error that reports bytes of the bucket
// failing a check (a batch's CRC-32C, its offsets, a part's CRC-32C); the
// message names the object.
var ErrCorrupt = errors.New("corrupt data in the bucket")

// Defaults of the segment fetches.
const (
	DefaultParallel   = 8
	DefaultChunkBytes = 4 << 20
)

// Fetch sets how the log parts of segments are fetched: in chunks of
// ChunkBytes, up to Parallel at once, ahead of the one being read, so a
// read runs at the store's throughput rather than one GET at a time.
// Memory is about 2 × Parallel × ChunkBytes.
type Fetch struct {
	Parallel   int
	ChunkBytes int64
}

func (f Fetch) withDefaults() Fetch {
	if f.Parallel <= 0 {
		f.Parallel = DefaultParallel
	}
	if f.ChunkBytes <= 0 {
		f.ChunkBytes = DefaultChunkBytes
	}
	return f
}

// run is a run of whole batches of one segment, contiguous, each checked
// (CRC-32C, offsets in order within the segment): the unit the readers
// hand on. Bytes are valid only during the callback.
type run struct {
	seg         *format.RemoteSegment
	bytes       []byte
	first, last int64 // the first batch's base offset, the last batch's last offset
	// logBytes is how far into the segment's log part the run ends.
	logEnd int64
}

// chunkJob is one ranged GET of a segment's log part.
type chunkJob struct {
	seg   *format.RemoteSegment
	off   int64 // within the object
	n     int64
	first bool // the segment's first chunk read
	last  bool // the segment's last chunk
	done  chan struct{}
	data  []byte
	err   error
}

// walk hands fn, in offset order, runs of the batches of p holding
// offsets from `from` on, stopping before the first batch based at or
// above to. Segments' log parts are fetched ahead in chunks, in parallel
// (f), and handed on in order. Batches wholly below from are skipped.
func (a *Archive) walk(ctx context.Context, p Partition, from, to int64, f Fetch, fn func(run) error) error {
	f = f.withDefaults()
	from = max(from, p.LogStart)
	if from >= min(to, p.End) {
		return nil
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan *chunkJob, 2*f.Parallel)
	sem := make(chan struct{}, f.Parallel)
	var wg sync.WaitGroup
	// The planner owns queue: it walks the manifest, starts one GET per
	// chunk (at most Parallel at once) and queues the chunks in order; the
	// queue's capacity bounds how far it runs ahead of the reader.
	planErr := make(chan error, 1)
	go func() {
		defer close(queue)
		err := p.root.Scan(ctx, a.pages, from, func(s *format.RemoteSegment) (bool, error) {
			if s.BaseOffset >= to {
				return false, nil
			}
			seg := *s
			pos := seg.Log.Offset
			if from > seg.BaseOffset {
				var err error
				if pos, err = a.startPosition(ctx, &seg, from); err != nil {
					return false, err
				}
			}
			end := seg.Log.End()
			first := true
			for {
				n := min(f.ChunkBytes, end-pos)
				j := &chunkJob{seg: &seg, off: pos, n: n, first: first, last: pos+n >= end, done: make(chan struct{})}
				first = false
				if n > 0 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer close(j.done)
						select {
						case sem <- struct{}{}:
						case <-ctx.Done():
							j.err = ctx.Err()
							return
						}
						j.data, j.err = a.get(ctx, j.seg.Key, j.off, j.n)
						<-sem
					}()
				} else {
					close(j.done) // a segment compaction left without a batch
				}
				select {
				case queue <- j:
				case <-ctx.Done():
					return false, ctx.Err()
				}
				pos += n
				if pos >= end {
					return true, nil
				}
			}
		})
		planErr <- err
	}()
	err := a.consume(ctx, queue, from, to, fn)
	cancel()
	for range queue { // let the planner finish
	}
	wg.Wait()
	if perr := <-planErr; err == nil && perr != nil && !errors.Is(perr, context.Canceled) {
		err = perr
	}
	if err == nil {
		err = parent.Err()
	}
	if errors.Is(err, errStop) {
		err = nil
	}
	return err
}

// errStop ends a walk early without an error.
var errStop = errors.New("stop")

// consume reads the chunks in order, cuts them into whole batches,
// checks each, and hands fn the runs. A batch that crosses a chunk's end
// is put together from the two (only its own bytes are copied); the rest
// of each chunk is handed on in place.
func (a *Archive) consume(ctx context.Context, queue <-chan *chunkJob, from, to int64, fn func(run) error) error {
	var (
		carry    []byte // the start of a batch that crosses into the next chunk
		carryPos int64  // its position in the object
		prevLast int64
	)
	for j := range queue {
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if j.err != nil {
			return fmt.Errorf("segment %s: %w", j.seg.Key, j.err)
		}
		if j.first {
			carry, prevLast = carry[:0], j.seg.BaseOffset-1
		}
		data, pos := j.data, j.off
		if len(carry) > 0 {
			// Complete the carried batch from the head of this chunk.
			if len(carry) < 12 {
				k := min(12-len(carry), len(data))
				carry, data, pos = append(carry, data[:k]...), data[k:], pos+int64(k)
			}
			if len(carry) >= 12 {
				size := batchSize(carry)
				k := int(min(max(size-int64(len(carry)), 0), int64(len(data))))
				carry, data, pos = append(carry, data[:k]...), data[k:], pos+int64(k)
			}
			used, err := a.cut(carry, carryPos, j.seg, from, to, &prevLast, fn)
			if err != nil {
				return err
			}
			if used == len(carry) {
				carry = carry[:0]
			} else if len(data) > 0 {
				return fmt.Errorf("%w: segment %s: batch at byte %d not whole after joining two chunks", ErrCorrupt, j.seg.Key, carryPos)
			}
		}
		if len(carry) == 0 {
			used, err := a.cut(data, pos, j.seg, from, to, &prevLast, fn)
			if err != nil {
				return err
			}
			carry = append(carry[:0], data[used:]...)
			carryPos = pos + int64(used)
		}
		if j.last && len(carry) > 0 {
			return fmt.Errorf("%w: segment %s: the log part ends within a batch at byte %d", ErrCorrupt, j.seg.Key, carryPos)
		}
	}
	return nil
}

// batchSize is the whole size of the batch at the start of b (at least
// 12 bytes long), as its length field says.
func batchSize(b []byte) int64 {
	return 12 + int64(int32(binary.BigEndian.Uint32(b[8:])))
}

// maxRunBytes bounds a run (but for a batch longer on its own).
const maxRunBytes = 1 << 20

// cut hands fn the runs of whole batches at the start of buf, which lies
// at pos in seg's object, and returns how many bytes they take; a batch
// cut off by the end of buf is left. prevLast is the last offset of the
// batch before, and is advanced.
func (a *Archive) cut(buf []byte, pos int64, seg *format.RemoteSegment, from, to int64, prevLast *int64, fn func(run) error) (int, error) {
	start, i := 0, 0
	flush := func() error {
		if i == start {
			return nil
		}
		r := run{seg: seg, bytes: buf[start:i], logEnd: pos, last: *prevLast}
		r.first = int64(binary.BigEndian.Uint64(buf[start:]))
		start = i
		return fn(r)
	}
	for len(buf)-i >= 12 {
		if i-start >= maxRunBytes {
			// Handed on while the bytes just checked are still in
			// the CPU's cache.
			if err := flush(); err != nil {
				return 0, err
			}
		}
		size := batchSize(buf[i:])
		if size < 61 || size > math.MaxInt32 {
			return 0, fmt.Errorf("%w: segment %s: batch at byte %d has length %d", ErrCorrupt, seg.Key, pos, size-12)
		}
		if int64(len(buf)-i) < size {
			break
		}
		b := buf[i : i+int(size)]
		h, err := segment.ParseBatchHeader(b)
		if err != nil {
			return 0, fmt.Errorf("%w: segment %s: batch at byte %d: %v", ErrCorrupt, seg.Key, pos, err)
		}
		if !h.CRCMatches(b) {
			return 0, fmt.Errorf("%w: segment %s: batch at byte %d (offsets %d-%d) fails its CRC-32C", ErrCorrupt, seg.Key, pos, h.BaseOffset, h.LastOffset())
		}
		if h.BaseOffset <= *prevLast || h.LastOffset() < h.BaseOffset || h.LastOffset() > seg.LastOffset {
			return 0, fmt.Errorf("%w: segment %s: batch at byte %d holds offsets %d-%d, out of order after %d in a segment of %d-%d",
				ErrCorrupt, seg.Key, pos, h.BaseOffset, h.LastOffset(), *prevLast, seg.BaseOffset, seg.LastOffset)
		}
		if h.BaseOffset >= to {
			if err := flush(); err != nil {
				return 0, err
			}
			return 0, errStop
		}
		if h.LastOffset() < from {
			// Wholly below the read: not handed on.
			if err := flush(); err != nil {
				return 0, err
			}
			start = i + int(size)
		}
		i += int(size)
		pos += size
		*prevLast = h.LastOffset()
	}
	return i, flush()
}

// get reads n bytes of key from off.
func (a *Archive) get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	rc, err := a.st.GetRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, fmt.Errorf("read %d bytes at %d: %w", n, off, err)
	}
	return b, nil
}

// part reads part p of seg, checked against its CRC-32C; what names it
// in errors.
func (a *Archive) part(ctx context.Context, seg *format.RemoteSegment, p format.Part, what string) ([]byte, error) {
	if p.Offset < 0 || p.Len < 0 || p.End() > seg.Size {
		return nil, fmt.Errorf("%w: %s of %s at [%d, %d) lies outside the %d-byte object", ErrCorrupt, what, seg.Key, p.Offset, p.End(), seg.Size)
	}
	b, err := a.get(ctx, seg.Key, p.Offset, p.Len)
	if err != nil {
		return nil, fmt.Errorf("%s of %s: %w", what, seg.Key, err)
	}
	if err := p.Check(b); err != nil {
		return nil, fmt.Errorf("%w: %s of %s: %v", ErrCorrupt, what, seg.Key, err)
	}
	return b, nil
}

// startPosition returns where in seg's log part to start reading for
// offset, from its offset index.
func (a *Archive) startPosition(ctx context.Context, seg *format.RemoteSegment, offset int64) (int64, error) {
	if seg.Index.Len == 0 {
		return seg.Log.Offset, nil
	}
	idx, err := a.part(ctx, seg, seg.Index, "offset index")
	if err != nil {
		return 0, err
	}
	pos, err := format.LookupOffset(idx, seg.BaseOffset, offset)
	if err != nil {
		return 0, fmt.Errorf("%w: offset index of %s: %v", ErrCorrupt, seg.Key, err)
	}
	if pos < 0 || pos >= max(seg.Log.Len, 1) {
		return 0, fmt.Errorf("%w: offset index of %s points at byte %d of a %d-byte log", ErrCorrupt, seg.Key, pos, seg.Log.Len)
	}
	return seg.Log.Offset + pos, nil
}

// stableEnd returns the end of what the bucket settles for a
// read_committed reader (docs/bucket-format.md §4.2 step 5): the first
// offset of the earliest transaction still open at the end of the last
// segment, whose outcome the bucket does not hold yet, or the end.
func (a *Archive) stableEnd(ctx context.Context, p Partition) (int64, error) {
	if p.End <= p.LogStart {
		return p.End, nil
	}
	last, ok, err := p.root.Find(ctx, a.pages, p.End-1)
	if err != nil || !ok || !last.TxnIndex.Present || last.ProducerSnapshot.Len == 0 {
		return p.End, err
	}
	snap, err := a.part(ctx, &last, last.ProducerSnapshot, "producer snapshot")
	if err != nil {
		return 0, err
	}
	open, err := segment.SnapshotOpenTransactions(snap)
	if err != nil {
		return 0, fmt.Errorf("%w: producer snapshot of %s: %v", ErrCorrupt, last.Key, err)
	}
	end := p.End
	for _, first := range open {
		end = min(end, first)
	}
	return end, nil
}

// aborted returns the aborted transactions a read_committed read of
// [from, upTo) must know, sorted by first offset, each once: those whose
// ABORT marker is at or after from and whose first offset is below upTo,
// from the segments' txn index parts, walking from the segment holding
// from until no transaction begun below upTo is left undecided (the rule
// of docs/bucket-format.md §4.2, as the broker applies it).
func (a *Archive) aborted(ctx context.Context, p Partition, from, upTo int64) ([]segment.AbortedTxn, error) {
	if upTo <= from {
		return nil, nil
	}
	var out []segment.AbortedTxn
	seen := make(map[segment.AbortedTxn]bool)
	err := p.root.Scan(ctx, a.pages, max(from, p.LogStart), func(s *format.RemoteSegment) (bool, error) {
		if s.TxnIndex.Len > 0 {
			b, err := a.part(ctx, s, s.TxnIndex.Part, "txn index")
			if err != nil {
				return false, err
			}
			if err := format.CheckTxnIndex(b, s.BaseOffset, s.LastOffset); err != nil {
				return false, fmt.Errorf("%w: txn index of %s: %v", ErrCorrupt, s.Key, err)
			}
			entries, err := segment.DecodeTxnIndex(b)
			if err != nil {
				return false, fmt.Errorf("%w: txn index of %s: %v", ErrCorrupt, s.Key, err)
			}
			for _, e := range entries {
				if e.LastOffset >= from && e.FirstOffset < upTo && !seen[e] {
					seen[e] = true
					out = append(out, e)
				}
				if e.LastStableOffset >= upTo {
					return false, nil
				}
			}
		}
		if s.LastOffset+1 < upTo || !s.TxnIndex.Present || s.ProducerSnapshot.Len == 0 {
			return true, nil
		}
		snap, err := a.part(ctx, s, s.ProducerSnapshot, "producer snapshot")
		if err != nil {
			return false, err
		}
		open, err := segment.SnapshotOpenTransactions(snap)
		if err != nil {
			return false, fmt.Errorf("%w: producer snapshot of %s: %v", ErrCorrupt, s.Key, err)
		}
		for _, first := range open {
			if first < upTo {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("aborted transactions of %s-%d: %w", p.Topic, p.Partition, err)
	}
	sortByFirst(out)
	return out, nil
}
