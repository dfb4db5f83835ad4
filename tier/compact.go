package tier

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

// readLogBufs holds ReadLog's buffers between calls.
var readLogBufs sync.Pool

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
// object is segment.ErrCorruptSegment, naming its key. Bytes a batch's CRC
// does not cover (its base offset and length) are only known good once
// the whole part's CRC matched, at the end: after an error, discard what
// fn built from the batches it saw.
func (t *Tier) ReadLog(ctx context.Context, s format.RemoteSegment, chunk int64, fn func(batch []byte) error) error {
	if chunk <= 0 {
		chunk = t.cfg.ChunkBytes
	}
	ctx = t.counted(ctx)
	corrupt := func(pos int64, err error) error {
		return fmt.Errorf("%w: log of %s at position %d: %v", segment.ErrCorruptSegment, s.Key, pos, err)
	}
	sum := crc32.New(castagnoli)
	// One buffer of two chunks serves a whole pass: a chunk plus the cut
	// batch before it, without allocating per chunk or per object.
	pooled, _ := readLogBufs.Get().(*[]byte)
	if pooled == nil || int64(cap(*pooled)) < 2*chunk {
		b := make([]byte, 0, 2*chunk)
		pooled = &b
	}
	defer func() {
		if int64(cap(*pooled)) <= 4*chunk {
			readLogBufs.Put(pooled)
		}
	}()
	var (
		back     = (*pooled)[:0] // holds buf, the bytes fetched and not yet consumed
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
			*pooled = back[:0]
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

// TxnIndex returns s's aborted transactions, in marker order: its txn
// index part, fetched with one ranged GET (none if the part is empty, or
// absent from an object written before it existed) and checked against
// its CRC-32C and the format's rules. A compaction pass hands those of
// the objects it replaces to SegmentWriter.SetAborted.
func (t *Tier) TxnIndex(ctx context.Context, s format.RemoteSegment) ([]segment.AbortedTxn, error) {
	p := s.TxnIndex.Part
	if p.Len == 0 {
		return nil, nil
	}
	if p.Len < 0 || p.End() > s.Size {
		return nil, fmt.Errorf("%w: txn index of %s at [%d, %d) outside the %d-byte object", segment.ErrCorruptSegment, s.Key, p.Offset, p.End(), s.Size)
	}
	b := make([]byte, p.Len)
	if err := t.getRange(t.counted(ctx), s.Key, p.Offset, b); err != nil {
		return nil, fmt.Errorf("read txn index of %s: %w", s.Key, err)
	}
	if err := p.Check(b); err != nil {
		return nil, fmt.Errorf("%w: txn index of %s: %v", segment.ErrCorruptSegment, s.Key, err)
	}
	txns, err := parseTxnIndex(b, s.BaseOffset, s.LastOffset)
	if err != nil {
		return nil, fmt.Errorf("%w: txn index of %s: %v", segment.ErrCorruptSegment, s.Key, err)
	}
	return txns, nil
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
// ProducerSnapshot, TxnIndex, SegmentWriter.Finish and ReplaceCompacted, with the
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

// SegmentWriter builds one segment object from batches, for compaction:
// the batches that survive a pass, offsets as stored. The log bytes go to
// a temporary file in the tier's cache directory (a compacted segment can
// be as large as segment.bytes); the indexes and the epoch history are
// kept in memory. A writer is used by one goroutine.
type SegmentWriter struct {
	t     *Tier
	tp    format.TopicPartition
	base  int64
	epoch int32

	f    *os.File // nil until the first batch
	size int64
	err  error // the first failure; every later call returns it

	index, timeIndex []byte
	sinceIndex       int64 // log bytes since the last offset-index entry
	maxTs, maxTsLast int64 // largest timestamp so far, and its batch's last offset
	timeIndexed      int64 // timestamp of the last time-index entry
	firstTs          int64
	hasFirstTs       bool
	records          int64
	prevLast         int64
	epochs           []format.EpochStart
	aborted          []segment.AbortedTxn // SetAborted's, in marker order
}

// NewSegmentWriter starts an object for tp whose first covered offset is
// base, written by the leader at epoch.
func (t *Tier) NewSegmentWriter(tp format.TopicPartition, base int64, epoch int32) *SegmentWriter {
	return &SegmentWriter{t: t, tp: tp, base: base, epoch: epoch,
		maxTs: -1, maxTsLast: -1, timeIndexed: -1, firstTs: -1, prevLast: base - 1}
}

// Append adds one whole batch: its offsets above those of the batch
// before, at or above the writer's base, and its leader epoch at most the
// writer's. It maintains the offset and time indexes at the local log's
// intervals (an entry for a batch once more than
// segment.DefaultIndexIntervalBytes of log precede it since the last), the
// record count, the timestamps and the leader-epoch history.
func (w *SegmentWriter) Append(batch []byte) error {
	if w.err != nil {
		return w.err
	}
	h, err := segment.ParseBatchHeader(batch)
	switch {
	case err != nil:
		return fmt.Errorf("compacted segment %d of %s-%d: %w", w.base, w.tp.Topic, w.tp.Partition, err)
	case h.Size() != len(batch):
		return fmt.Errorf("compacted segment %d of %s-%d: batch of %d bytes says %d", w.base, w.tp.Topic, w.tp.Partition, len(batch), h.Size())
	case h.BaseOffset <= w.prevLast || h.LastOffsetDelta < 0 || h.LastOffset()-w.base > maxRelOffset:
		return fmt.Errorf("compacted segment %d of %s-%d: batch [%d, %d] after offset %d", w.base, w.tp.Topic, w.tp.Partition, h.BaseOffset, h.LastOffset(), w.prevLast)
	case h.LeaderEpoch > w.epoch:
		return fmt.Errorf("compacted segment %d of %s-%d: batch of leader epoch %d written at epoch %d", w.base, w.tp.Topic, w.tp.Partition, h.LeaderEpoch, w.epoch)
	case w.size+int64(len(batch)) > maxRelOffset:
		return fmt.Errorf("compacted segment %d of %s-%d: log beyond 2 GiB", w.base, w.tp.Topic, w.tp.Partition)
	}
	if n := len(w.epochs); n > 0 && h.LeaderEpoch < w.epochs[n-1].Epoch {
		return fmt.Errorf("compacted segment %d of %s-%d: batch at %d of leader epoch %d after epoch %d", w.base, w.tp.Topic, w.tp.Partition, h.BaseOffset, h.LeaderEpoch, w.epochs[n-1].Epoch)
	}
	if w.f == nil {
		if w.f, err = os.CreateTemp(w.t.cfg.CacheDir, ".compact-*"); err != nil {
			w.err = fmt.Errorf("compacted segment %d of %s-%d: %w", w.base, w.tp.Topic, w.tp.Partition, err)
			return w.err
		}
	}
	if _, err := w.f.Write(batch); err != nil {
		w.err = fmt.Errorf("compacted segment %d of %s-%d: %w", w.base, w.tp.Topic, w.tp.Partition, err)
		return w.err
	}
	// The local log's indexer: an entry names the last offset of the batch
	// at its position, and the time index records the running maximum
	// at each offset-index point. Only batches with records count for
	// timestamps: an empty batch's header keeps the time of records that
	// are gone, which no lookup by time may find.
	if h.NumRecords > 0 {
		if h.MaxTimestamp > w.maxTs {
			w.maxTs, w.maxTsLast = h.MaxTimestamp, h.LastOffset()
		}
		if !w.hasFirstTs {
			// A delete horizon (KIP-534) takes the first timestamp's place
			// in the header; it is no record's time.
			w.firstTs, w.hasFirstTs = h.FirstTimestamp, true
			if h.Attributes&deleteHorizonAttr != 0 {
				w.firstTs = h.MaxTimestamp
			}
		}
	}
	if w.sinceIndex > segment.DefaultIndexIntervalBytes {
		w.index = binary.BigEndian.AppendUint32(w.index, uint32(h.LastOffset()-w.base))
		w.index = binary.BigEndian.AppendUint32(w.index, uint32(w.size))
		w.addTime()
		w.sinceIndex = 0
	}
	w.sinceIndex += int64(len(batch))
	if n := len(w.epochs); n == 0 {
		// The history starts at the object's base, as the manifest
		// requires; nothing below the first batch is in the object.
		w.epochs = append(w.epochs, format.EpochStart{Epoch: h.LeaderEpoch, StartOffset: w.base})
	} else if h.LeaderEpoch > w.epochs[n-1].Epoch {
		w.epochs = append(w.epochs, format.EpochStart{Epoch: h.LeaderEpoch, StartOffset: h.BaseOffset})
	}
	w.records += int64(max(h.NumRecords, 0))
	w.prevLast = h.LastOffset()
	w.size += int64(len(batch))
	return nil
}

// deleteHorizonAttr is the batch attribute bit (6) saying that its first
// timestamp is the delete horizon of its tombstones (KIP-534).
const deleteHorizonAttr = 0x40

// maxRelOffset bounds the relative offsets and positions of an object:
// its indexes hold them in 32 bits.
const maxRelOffset = 1<<31 - 1

// addTime appends a time-index entry for the running maximum if it grew.
func (w *SegmentWriter) addTime() {
	if w.maxTs > w.timeIndexed {
		w.timeIndex = binary.BigEndian.AppendUint64(w.timeIndex, uint64(w.maxTs))
		w.timeIndex = binary.BigEndian.AppendUint32(w.timeIndex, uint32(w.maxTsLast-w.base))
		w.timeIndexed = w.maxTs
	}
}

// Bytes is the log bytes appended so far.
func (w *SegmentWriter) Bytes() int64 { return w.size }

// Discard drops a writer that will not be finished, and its temporary
// file. Finish discards the writer itself; Discard after Finish is a no-op.
func (w *SegmentWriter) Discard() {
	if w.f != nil {
		w.f.Close()
		os.Remove(w.f.Name())
		w.f = nil
	}
	if w.err == nil {
		w.err = errors.New("tier: segment writer discarded")
	}
}

// Finish writes the object with one PUT and returns its manifest entry.
// lastOffset is the last offset the object covers: it may be above its last
// batch (compaction leaves gaps), and the object may hold no batch at all.
// snapshot is the producer snapshot part to carry (nil for none). The key
// stays held from the collector until release is called: call it once
// the manifest names the object (ReplaceCompacted returned) or the attempt
// is abandoned. The writer is done with after Finish, whatever its outcome;
// release is never nil, and a no-op after a failure.
func (w *SegmentWriter) Finish(ctx context.Context, lastOffset int64, snapshot []byte) (seg format.RemoteSegment, release func(), err error) {
	defer w.Discard()
	if w.err != nil {
		return format.RemoteSegment{}, func() {}, w.err
	}
	fail := func(err error) (format.RemoteSegment, func(), error) {
		return format.RemoteSegment{}, func() {}, fmt.Errorf("compacted segment %d of %s-%d: %w", w.base, w.tp.Topic, w.tp.Partition, err)
	}
	if lastOffset < max(w.prevLast, w.base) || lastOffset-w.base > maxRelOffset {
		return fail(fmt.Errorf("last offset %d, batches up to %d", lastOffset, w.prevLast))
	}
	w.addTime()
	// The first batch's times may be rewritten (LogAppendTime, a
	// horizon): the object's first timestamp never exceeds its maximum.
	w.firstTs = min(w.firstTs, w.maxTs)
	var log io.ReaderAt = emptyReader{}
	if w.f != nil {
		log = w.f
	}
	parts := format.SegmentParts{
		Log: io.NewSectionReader(log, 0, w.size), LogSize: w.size,
		Index: w.index, TimeIndex: w.timeIndex, ProducerSnapshot: snapshot,
		TxnIndex:   segment.EncodeTxnIndex(w.aborted),
		BaseOffset: w.base, LastOffset: lastOffset,
		FirstTimestamp: w.firstTs, MaxTimestamp: w.maxTs, RecordCount: w.records, LeaderEpoch: w.epoch,
	}
	// The footer needs the log's checksum: a first pass over the file
	// computes it (from the page cache), the PUT streams the file again.
	tail := &tailWriter{skip: w.size}
	footer, crc, err := format.WriteSegmentObject(tail, parts)
	if err != nil {
		return fail(err)
	}
	key := format.SegmentKey{TopicPartition: w.tp, BaseOffset: w.base, LeaderEpoch: w.epoch, UID: format.NewUID()}.String()
	seg = footer.Segment(key, crc)
	seg.LeaderEpochs = w.epochs
	body := objstore.Concat(io.NewSectionReader(log, 0, w.size), io.NewSectionReader(bytes.NewReader(tail.buf), 0, int64(len(tail.buf))))
	if body.Size() != seg.Size {
		return fail(fmt.Errorf("object of %d bytes, footer says %d", body.Size(), seg.Size))
	}
	release = w.t.state(w.tp).hold(key)
	if err := w.t.store.Put(w.t.counted(ctx), key, body, body.Size()); err != nil {
		release()
		return fail(fmt.Errorf("upload %s: %w", key, err))
	}
	return seg, release, nil
}

type emptyReader struct{}

func (emptyReader) ReadAt([]byte, int64) (int, error) { return 0, io.EOF }

// ReplaceCompacted swaps segs in for the segments covering exactly the
// same offsets, in one manifest step (format.Root.Replace), fenced by
// epoch like uploads (ErrFenced), and records the cold tier's compaction
// state in the new root: CleanedOffset = cleanedTo, LastCompactionMs =
// now. The replaced objects become orphans, deleted after the orphan
// grace by CollectOrphans, so readers holding the previous manifest finish.
//
// It applies to the manifest as it is when the step is taken, under the
// partition's writer lock: uploads meanwhile only add segments after the
// range, and the replacement goes through; a merge or retention that
// changed the range's boundaries makes it fail, the manifest untouched
// (segs become orphans once released). segs hold the same batches as what
// they replace minus what compaction removed, so replacing a merged
// object of the same range loses nothing. segs' objects must still be in
// the bucket (ErrObjectMissing otherwise, the manifest untouched).
func (t *Tier) ReplaceCompacted(ctx context.Context, tp format.TopicPartition, segs []format.RemoteSegment, epoch int32, cleanedTo int64, now time.Time) (*format.Root, error) {
	if len(segs) == 0 {
		return nil, fmt.Errorf("replace compacted segments of %s-%d: none given", tp.Topic, tp.Partition)
	}
	if cleanedTo < 0 {
		return nil, fmt.Errorf("replace compacted segments of %s-%d: cleaned offset %d", tp.Topic, tp.Partition, cleanedTo)
	}
	first, last := segs[0].BaseOffset, segs[len(segs)-1].LastOffset
	ctx = t.counted(ctx)
	ps := t.state(tp)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	// A pass takes minutes, and leadership may move meanwhile. A deposed
	// leader's version would sort below the new leader's anyway, but its
	// swap would look done: reading the bucket first (one LIST and one GET
	// a pass) fences it here, unless the new leader publishes within the
	// instant between this read and the swap.
	cur, err := t.loadManifest(ctx, tp)
	if err != nil {
		return nil, fmt.Errorf("replace compacted segments %d..%d of %s-%d: %w", first, last, tp.Topic, tp.Partition, err)
	}
	ps.advance(cur)
	if err := t.requireObjects(ctx, segs); err != nil {
		return nil, fmt.Errorf("replace compacted segments %d..%d of %s-%d: %w", first, last, tp.Topic, tp.Partition, err)
	}
	next, err := t.updateLocked(ctx, tp, ps, epoch, func(m *format.Root) (*format.Change, error) {
		ch, err := m.Replace(ctx, t.pages, segs, epoch, t.cfg.Paging)
		if err != nil {
			return nil, err
		}
		ch.Root.CleanedOffset, ch.Root.LastCompactionMs = cleanedTo, max(now.UnixMilli(), 0)
		return ch, nil
	})
	if err != nil {
		return nil, fmt.Errorf("replace compacted segments %d..%d of %s-%d: %w", first, last, tp.Topic, tp.Partition, err)
	}
	t.log.Debug("compacted segments swapped in", "topic", tp.Topic, "partition", tp.Partition, "base", first, "last", last, "segments", len(segs), "cleaned", cleanedTo)
	return next, nil
}

// ErrObjectMissing reports a manifest change refused because an object it
// would name is not in the bucket.
var ErrObjectMissing = errors.New("tier: object to publish is missing")

// requireObjects checks with a HEAD each that segs' objects are in the
// bucket, so that a manifest never names a missing one. A pass's outputs
// are held from this tier's collector, but a pass can outlive a leader
// change: the new leader's collector, which knows nothing of them, deletes
// them once they are older than the grace.
func (t *Tier) requireObjects(ctx context.Context, segs []format.RemoteSegment) error {
	for _, s := range segs {
		if _, err := t.store.Stat(ctx, s.Key); errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("%w: %s (deleted by another node's collector?)", ErrObjectMissing, s.Key)
		} else if err != nil {
			return fmt.Errorf("check %s: %w", s.Key, err)
		}
	}
	return nil
}

// SetAborted gives the object the aborted transactions whose ABORT
// markers lie in the offsets it covers (its txn index part), as the local
// log's .txnindex files of the segments it replaces list them. Compaction
// keeps offsets, so they stay true even where the cleaner removed a
// marker or the aborted records. Finish refuses an entry whose marker is
// outside [base, lastOffset]: it would be found with the wrong object, or
// never. A later call replaces the entries of an earlier one.
func (w *SegmentWriter) SetAborted(txns []segment.AbortedTxn) {
	w.aborted = slices.Clone(txns)
	// The part lists entries in marker order, as the local file does.
	slices.SortStableFunc(w.aborted, func(a, b segment.AbortedTxn) int { return cmp.Compare(a.LastOffset, b.LastOffset) })
}
