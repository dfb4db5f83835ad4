package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Log is a partition's local log. See the package documentation for its
// concurrency contract.
type Log struct {
	// Lock order: writeMu, then mu, then a segment's imu. A segment's cut
	// lock is taken shared under mu (pin) and exclusively under writeMu
	// alone, never with mu held; imu may be taken inside it.

	dir    string
	logger *slog.Logger
	now    func() time.Time

	// writeMu serializes the operations that change the log: Append,
	// AppendReplica, TruncateTo, TruncateFullyAndStartAt, Maintain,
	// SetConfig, Sync, Close and Delete.
	writeMu sync.Mutex
	w       struct { // guarded by writeMu
		cfg       Config
		producers map[int64]*producerEntry
		snapshots []int64 // offsets of the .snapshot files, ascending
		// Scratch reused by Append.
		pending []pendingProducer
		buf     []byte
		// failed is set when a write left the active segment in an unknown
		// state; the log then refuses appends.
		failed error
		// tiered is the offset below which every record is safely in the
		// cold tier (SetTieredOffset).
		tiered int64
		// completed collects the transactions an append's markers end.
		completed  []completedTxn
		txnChanged bool // an append opened or completed a transaction
		// txnDirty: the active segment's .txnindex has unsynced entries.
		txnDirty bool
	}

	// mu guards what readers see. The writer holds writeMu as well when it
	// changes any of it, so it may read these fields without mu.
	mu struct {
		sync.RWMutex
		segs     []*segment // ascending base offsets; the last is active
		start    int64      // log start offset
		end      int64      // log end offset
		epochs   []epochEntry
		interval int // IndexIntervalBytes, for reads and lazy index rebuilds
		closed   bool
	}

	size atomic.Int64 // total bytes of .log files

	// unstable is the first unstable offset plus one, 0 with no
	// transaction ongoing (FirstUnstableOffset): fetches read it often,
	// the writer changes it rarely.
	unstable atomic.Int64

	// unreplicated holds the transactions completed by markers that may
	// be above the high watermark (Kafka's unreplicatedTxns): until the
	// high watermark passes its marker a transaction is unstable for
	// read_committed readers (FirstUnstableOffsetBelow).
	unreplicated struct {
		sync.Mutex
		txns []completedTxn // in marker order
	}

	// cleaner is the cleaner checkpoint (cleaner.go), nil if never cleaned.
	cleaner atomic.Pointer[cleanerMark]

	// cfg is w.cfg for Prepare, which validates without writeMu.
	cfg atomic.Pointer[Config]

	// testHook, when set, is called at each step of a truncation where a
	// crash would leave the files in a different state: the crash tests
	// copy the directory there.
	testHook func(point string)
}

// AppendInfo describes a completed Append.
type AppendInfo struct {
	BaseOffset, LastOffset int64 // offsets assigned (for a duplicate: the original offsets of that batch)
	MaxTimestamp           int64
	LogStartOffset         int64
	Duplicate              bool // idempotent retry recognised; nothing was written
	Batches                int
	Records                int
	// Bytes is how much of the records given was written: all of them for
	// Append (none for a duplicate); for AppendReplica, the whole batches
	// before a partial last one.
	Bytes int
}

type pendingProducer struct {
	id    int64
	known bool
	e     producerEntry
}

func (l *Log) active() *segment { return l.mu.segs[len(l.mu.segs)-1] }

// StartOffset returns the log start offset.
func (l *Log) StartOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.mu.start
}

// EndOffset returns the log end offset: the offset the next record gets.
func (l *Log) EndOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.mu.end
}

// Size returns the total size of the .log files in bytes.
func (l *Log) Size() int64 { return l.size.Load() }

// LatestEpoch returns the latest leader epoch in the epoch history, -1 if
// there is none.
func (l *Log) LatestEpoch() int32 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n := len(l.mu.epochs); n > 0 {
		return l.mu.epochs[n-1].epoch
	}
	return -1
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch (KIP-101, KIP-279) as a
// Kafka leader does: the largest known epoch <= epoch and the start offset
// of the next higher one; for the latest epoch or any above it, the latest
// epoch and the log end offset (a Kafka leader's history holds its current
// epoch from its election on; here it enters with the first batch); for an
// epoch below every known one, the requested epoch and the first known
// start offset; (-1, -1) for -1 or with no history. The caller fences an
// epoch above the partition's current leader epoch.
func (l *Log) EndOffsetForEpoch(epoch int32) (endOffset int64, epochOut int32) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return endOffsetForEpoch(l.mu.epochs, epoch, l.mu.end)
}

// SetConfig applies new roll, retention and validation settings. Now and
// Logger keep the values given to Open.
func (l *Log) SetConfig(cfg Config) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	cfg.Now, cfg.Logger = l.now, l.logger
	l.w.cfg = cfg.WithDefaults()
	published := l.w.cfg // a copy: Prepare reads it without writeMu
	l.cfg.Store(&published)
	l.mu.Lock()
	l.mu.interval = l.w.cfg.IndexIntervalBytes
	l.mu.Unlock()
}

// Batches are a Produce request's records, validated by Prepare for one
// AppendPrepared.
type Batches struct {
	records []byte
	facts   []batchFacts
	origin  appendOrigin
}

// Append validates records (one or more concatenated v2 batches, a Produce
// request's records field), assigns them offsets from the log end offset,
// stamps leaderEpoch into them and appends them to the active segment.
// Either every batch is appended or none is; readers see all of them at
// once. Nothing is fsynced (see Sync). It is Prepare then AppendPrepared.
func (l *Log) Append(records []byte, leaderEpoch int32) (AppendInfo, error) {
	b, err := l.Prepare(records)
	if err != nil {
		return AppendInfo{}, err
	}
	return l.AppendPrepared(b, leaderEpoch)
}

// Prepare validates records for AppendPrepared: lengths, magic, size,
// CRC-32C, the records themselves (decompressed as they are walked) and
// their timestamps against the log's clock and settings. It takes no lock
// of the log's, so callers run it before whatever serializes their appends
// and a costly batch holds up nobody else. records must stay unchanged
// until AppendPrepared returns.
func (l *Log) Prepare(records []byte) (*Batches, error) {
	if len(records) == 0 {
		return nil, fmt.Errorf("%w: no record batches", ErrInvalidRecord)
	}
	cfg := l.cfg.Load()
	now := l.now()
	bounds := tsBounds{keysRequired: cfg.KeysRequired}
	if cfg.TimestampBeforeMax >= 0 {
		bounds.min, bounds.hasMin = now.Add(-cfg.TimestampBeforeMax).UnixMilli(), true
	}
	if cfg.TimestampAfterMax >= 0 {
		bounds.max, bounds.hasMax = now.Add(cfg.TimestampAfterMax).UnixMilli(), true
	}
	b := &Batches{records: records, facts: make([]batchFacts, 0, 1)}
	for p := 0; p < len(records); {
		if len(records)-p < logOverhead {
			return nil, fmt.Errorf("%w: %d stray bytes after batch %d", ErrCorruptMessage, len(records)-p, len(b.facts))
		}
		n := int64(logOverhead) + int64(int32(binary.BigEndian.Uint32(records[p+offLength:])))
		if n < headerSize || n > int64(len(records)-p) {
			return nil, fmt.Errorf("%w: batch %d claims %d bytes, %d remain", ErrCorruptMessage, len(b.facts), n, len(records)-p)
		}
		f, err := validateBatch(records[p:p+int(n)], cfg.MaxBatchBytes, &bounds)
		if err != nil {
			return nil, fmt.Errorf("batch %d: %w", len(b.facts), err)
		}
		b.facts = append(b.facts, f)
		p += int(n)
	}
	if len(records) > maxSegmentBytes {
		return nil, fmt.Errorf("%w: append of %d bytes", ErrMessageTooLarge, len(records))
	}
	return b, nil
}

// AppendPrepared appends batches that Prepare validated, as Append does.
// b is used up: it may not be appended again.
func (l *Log) AppendPrepared(b *Batches, leaderEpoch int32) (AppendInfo, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.mu.closed {
		return AppendInfo{}, ErrClosed
	}
	if l.w.failed != nil {
		return AppendInfo{}, fmt.Errorf("segment: log %s failed earlier: %w", l.dir, l.w.failed)
	}
	if b == nil || b.facts == nil {
		return AppendInfo{}, fmt.Errorf("%w: batches not prepared, or appended already", ErrInvalidRecord)
	}
	records, facts := b.records, b.facts
	b.facts = nil
	now := l.now()
	info := AppendInfo{MaxTimestamp: -1, Batches: len(facts)}
	for i := range facts {
		info.Records += int(facts[i].hdr.NumRecords)
	}

	// 2. Offsets.
	base := l.mu.end
	next := base
	for i := range facts {
		f := &facts[i]
		// maxTs is the header's for LogAppendTime, else the records' (step 5).
		f.hdr.BaseOffset, f.hdr.LeaderEpoch, f.hdr.MaxTimestamp = next, leaderEpoch, f.maxTs
		next += int64(f.hdr.LastOffsetDelta) + 1
	}

	// 3. Idempotence: a retry of a recent batch is answered with its
	// original offsets, as Kafka does for the whole request.
	if dup, ok, err := l.checkProducersLocked(records, facts, now.UnixMilli(), b.origin); err != nil {
		return AppendInfo{}, err
	} else if ok {
		info.BaseOffset, info.LastOffset, info.Duplicate = dup.firstOffset, dup.lastOffset, true
		info.LogStartOffset = l.mu.start
		return info, nil
	}

	// Roll first if needed.
	seg := l.active()
	if l.shouldRollLocked(seg, int64(len(records)), next-1, now) {
		if err := l.rollLocked(); err != nil {
			return AppendInfo{}, err
		}
		seg = l.active()
	}

	// 4. A new leader epoch is made durable before its first batch.
	var epochs []epochEntry
	if n := len(l.mu.epochs); leaderEpoch >= 0 && (n == 0 || leaderEpoch > l.mu.epochs[n-1].epoch) {
		epochs = append(slices.Clip(l.mu.epochs), epochEntry{leaderEpoch, base})
		if err := writeFileAtomic(l.epochPath(), encodeEpochs(epochs)); err != nil {
			return AppendInfo{}, fmt.Errorf("segment: recording leader epoch %d: %w", leaderEpoch, err)
		}
	}

	// 5. One buffer, one write.
	buf := append(l.w.buf[:0], records...)
	l.w.buf = buf
	p := 0
	for i := range facts {
		f := &facts[i]
		b := buf[p : p+f.hdr.Size()]
		binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(f.hdr.BaseOffset))
		binary.BigEndian.PutUint32(b[offLeaderEpoch:], uint32(leaderEpoch))
		if int64(binary.BigEndian.Uint64(b[offMaxTimestamp:])) != f.hdr.MaxTimestamp {
			// The producer's maxTimestamp is wrong; fix it as Kafka does.
			binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(f.hdr.MaxTimestamp))
			binary.BigEndian.PutUint32(b[offCRC:], batchCRC(b))
		}
		info.MaxTimestamp = max(info.MaxTimestamp, f.maxTs)
		p += len(b)
	}
	pos := seg.size
	if _, err := seg.f.WriteAt(buf, pos); err != nil {
		err = fmt.Errorf("segment: appending to %s: %w", seg.logPath(), err)
		if terr := seg.f.Truncate(pos); terr != nil {
			l.w.failed = errors.Join(err, terr)
		}
		return AppendInfo{}, err
	}
	seg.verified.add(pos, pos+int64(len(buf))) // Prepare checked every CRC
	if seg.created.IsZero() {
		seg.created = now
	}

	// 6. Indexes, producer state, then publish.
	seg.imu.Lock()
	p = 0
	for i := range facts {
		f := &facts[i]
		prevMax := seg.ix.maxTs
		seg.ix.add(pos+int64(p), f.hdr.LastOffset(), f.hdr.MaxTimestamp, f.hdr.Size())
		if seg.ix.maxTs > prevMax {
			seg.ix.maxTsRecord = f.hdr.BaseOffset + int64(f.maxTsDelta)
		}
		p += f.hdr.Size()
	}
	seg.imu.Unlock()
	l.commitProducersLocked()
	if err := l.completeTxnsLocked(seg); err != nil {
		// The batches are written; an index that misses them is
		// rebuilt by recovery, which the failed state forces.
		l.w.failed = err
	}

	l.mu.Lock()
	seg.size += int64(len(buf))
	l.mu.end = next
	if epochs != nil {
		l.mu.epochs = epochs
	}
	info.LogStartOffset = l.mu.start
	l.mu.Unlock()
	l.size.Add(int64(len(buf)))

	info.BaseOffset, info.LastOffset, info.Bytes = base, next-1, len(buf)
	return info, nil
}

// checkProducersLocked runs the idempotence checks for every batch against
// the producer state plus the effect of the earlier batches of the same
// append, which it stages in l.w.pending. Duplicates are looked for in the
// committed state only, as Kafka does: a batch repeated within one append
// must not be answered with the offsets of its own unwritten first copy;
// its sequence then fails the check against the staged state instead.
func (l *Log) checkProducersLocked(records []byte, facts []batchFacts, nowMs int64, origin appendOrigin) (batchMeta, bool, error) {
	l.w.pending = l.w.pending[:0]
	l.w.completed = l.w.completed[:0]
	changed := false
	p := 0
	for i := range facts {
		h := &facts[i].hdr
		batch := records[p : p+h.Size()]
		p += h.Size()
		if h.ProducerID < 0 {
			continue
		}
		var m TxnMarker
		isMarker := false
		if h.IsControl() {
			var err error
			if m, isMarker, err = markerOf(h, batch); err != nil {
				return batchMeta{}, false, err
			} else if !isMarker {
				return batchMeta{}, false, fmt.Errorf("%w: control batch without a transaction marker", ErrInvalidRecord)
			}
		}
		if e, ok := l.w.producers[h.ProducerID]; ok && !h.IsControl() && origin == originClient {
			if dup, ok := e.duplicateOf(h); ok {
				return dup, true, nil
			}
		}
		pp := l.pendingLocked(h.ProducerID)
		if err := pp.e.check(pp.known, h, m, origin); err != nil {
			return batchMeta{}, false, err
		}
		open := pp.e.txnOpen
		if c, ok := pp.e.apply(h, m, isMarker, nowMs); ok {
			c.lso = l.stableAfterPendingLocked(c)
			l.w.completed = append(l.w.completed, c)
		}
		changed = changed || open != pp.e.txnOpen
		pp.known = true
	}
	l.w.txnChanged = changed
	return batchMeta{}, false, nil
}

func (l *Log) pendingLocked(id int64) *pendingProducer {
	for i := range l.w.pending {
		if l.w.pending[i].id == id {
			return &l.w.pending[i]
		}
	}
	pp := pendingProducer{id: id}
	if e, ok := l.w.producers[id]; ok {
		pp.known, pp.e = true, *e
	}
	l.w.pending = append(l.w.pending, pp)
	return &l.w.pending[len(l.w.pending)-1]
}

// commitProducersLocked installs the staged producer state of an append
// that was written.
func (l *Log) commitProducersLocked() {
	for i := range l.w.pending {
		pp := &l.w.pending[i]
		if e, ok := l.w.producers[pp.id]; ok {
			*e = pp.e
		} else {
			e := pp.e
			l.w.producers[pp.id] = &e
		}
	}
}

// applyProducerBatch replays a written batch, with the marker it carries
// if any, into m; writeMs stands for when it was written. It returns the
// transaction the batch completed.
func applyProducerBatch(m map[int64]*producerEntry, h *BatchHeader, mk TxnMarker, isMarker bool, writeMs int64) (completedTxn, bool) {
	if h.ProducerID < 0 {
		return completedTxn{}, false
	}
	e, ok := m[h.ProducerID]
	if !ok {
		e = &producerEntry{epoch: h.ProducerEpoch}
		m[h.ProducerID] = e
	}
	return e.apply(h, mk, isMarker, writeMs)
}

func (l *Log) shouldRollLocked(s *segment, n, lastOffset int64, now time.Time) bool {
	if s.size == 0 {
		return false
	}
	cfg := &l.w.cfg
	return s.size+n > cfg.SegmentBytes ||
		(!s.created.IsZero() && now.Sub(s.created) >= cfg.SegmentMs) ||
		lastOffset-s.base > math.MaxInt32
}

func (l *Log) epochPath() string { return filepath.Join(l.dir, epochCheckpointName) }

// sealLocked makes the active segment and its indexes durable, adding the
// final time-index entry (docs/format.md §8, roll steps 1-2).
func (l *Log) sealLocked(s *segment) error {
	s.imu.Lock()
	s.ix.maybeAddTime()
	err := s.flushIndexesLocked()
	s.imu.Unlock()
	if err == nil {
		err = l.syncTxnIndexLocked(s)
	}
	if err != nil {
		return fmt.Errorf("segment: sealing %s: %w", s.logPath(), err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("segment: syncing %s: %w", s.logPath(), err)
	}
	return nil
}

// rollLocked closes the active segment and starts a new one at the log end
// offset (docs/format.md §8).
func (l *Log) rollLocked() error { return l.rollAtLocked(l.mu.end) }

// rollAtLocked is rollLocked starting the new segment at newBase >= the
// log end offset: above it when replicated batches begin past a gap.
func (l *Log) rollAtLocked(newBase int64) error {
	old := l.active()
	if err := l.sealLocked(old); err != nil {
		return err
	}
	if err := l.writeSnapshotLocked(newBase); err != nil {
		return err
	}
	s, err := createSegment(l.dir, newBase, l.w.cfg.IndexIntervalBytes)
	if err != nil {
		return fmt.Errorf("segment: rolling: %w", err)
	}
	old.imu.Lock()
	old.ix.end = newBase
	old.imu.Unlock()
	l.mu.Lock()
	l.mu.segs = append(l.mu.segs, s)
	l.mu.Unlock()
	l.logger.Debug("rolled segment", "dir", l.dir, "base", newBase, "previous", old.base, "previousBytes", old.size)

	// Close-time snapshots inside the sealed segment are superseded.
	for _, off := range l.w.snapshots {
		if off > old.base && off < newBase {
			l.removeSnapshotLocked(off)
		}
	}
	return nil
}

func (l *Log) writeSnapshotLocked(offset int64) error {
	if err := writeFileAtomic(offsetName(l.dir, offset, snapshotSuffix), encodeSnapshot(offset, l.w.producers)); err != nil {
		return fmt.Errorf("segment: writing producer snapshot: %w", err)
	}
	if i, found := slices.BinarySearch(l.w.snapshots, offset); !found {
		l.w.snapshots = slices.Insert(l.w.snapshots, i, offset)
	}
	return nil
}

func (l *Log) removeSnapshotLocked(offset int64) {
	if err := removeIfExists(offsetName(l.dir, offset, snapshotSuffix)); err != nil {
		l.logger.Warn("removing producer snapshot", "dir", l.dir, "offset", offset, "err", err)
		return
	}
	if i, found := slices.BinarySearch(l.w.snapshots, offset); found {
		l.w.snapshots = slices.Delete(l.w.snapshots, i, i+1)
	}
}

// Read appends to dst whole batches, starting with the batch that contains
// offset, and returns the extended slice. It returns only batches whose base
// offset is below maxOffset (the high watermark, or any bound the caller
// chooses) and stops before exceeding maxBytes, except that the first batch
// is returned whole whatever its size (KIP-74). A read stays within one
// segment. offset == EndOffset or >= maxOffset returns dst unchanged; an
// offset below StartOffset or above EndOffset is ErrOffsetOutOfRange.
//
// Every returned batch passed its CRC-32C check. When a stored batch fails
// it, Read returns the batches before it, or, if there are none,
// ErrCorruptSegment. Read may run concurrently with any other method.
func (l *Log) Read(dst []byte, offset, maxOffset int64, maxBytes int) ([]byte, error) {
	for {
		at, err := l.pinAt(offset, maxOffset)
		if err != nil || at.s == nil {
			return dst, err
		}
		out, found, err := at.s.read(dst, offset, maxOffset, maxBytes, at.limit, at.end, at.interval, l.logger)
		at.s.unpin()
		if err != nil || found || at.next < 0 {
			return out, err
		}
		offset = at.next // nothing at or after offset in that segment
	}
}

// segmentAt is the segment a read at some offset starts in, pinned.
type segmentAt struct {
	s        *segment
	limit    int64 // its published size
	end      int64 // the offset its batches end below: the next base, or the log end
	next     int64 // the next segment's base, -1 for the last
	interval int
}

// pinAt pins the segment holding offset for a read below maxOffset; s is
// nil when there is nothing to read (offset at the log end or at
// maxOffset). The caller unpins it.
func (l *Log) pinAt(offset, maxOffset int64) (segmentAt, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return segmentAt{}, ErrClosed
	}
	start, end := l.mu.start, l.mu.end
	if offset < start || offset > end {
		return segmentAt{}, fmt.Errorf("%w: offset %d outside [%d, %d]", ErrOffsetOutOfRange, offset, start, end)
	}
	if offset == end || offset >= maxOffset {
		return segmentAt{}, nil
	}
	segs := l.mu.segs
	i := max(sort.Search(len(segs), func(i int) bool { return segs[i].base > offset })-1, 0)
	at := segmentAt{s: segs[i], limit: segs[i].size, end: end, next: -1, interval: l.mu.interval}
	if i+1 < len(segs) {
		at.next = segs[i+1].base
		at.end = at.next
	}
	at.s.pin()
	return at, nil
}

// snapshotSegments returns the segments with a reference each, the
// published size of each, and the log bounds; release with unpinAll.
func (l *Log) snapshotSegments() ([]*segment, []int64, int64, int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return nil, nil, 0, 0, ErrClosed
	}
	segs := slices.Clone(l.mu.segs)
	sizes := make([]int64, len(segs))
	for i, s := range segs {
		s.pin()
		sizes[i] = s.size
	}
	return segs, sizes, l.mu.start, l.mu.interval, nil
}

func releaseAll(segs []*segment) {
	for _, s := range segs {
		s.release()
	}
}

// OffsetForTimestamp returns the first record whose timestamp is >= ts,
// looking inside batches (ListOffsets by timestamp). ok is false if there
// is none. The result may be at or above the high watermark; the caller
// bounds it.
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, timestamp int64, ok bool, err error) {
	segs, sizes, start, interval, err := l.snapshotSegments()
	if err != nil {
		return -1, -1, false, err
	}
	defer unpinAll(segs)
	for i, s := range segs {
		off, rts, ok, err := s.findTimestamp(ts, start, sizes[i], interval, l.logger)
		if err != nil || ok {
			return off, rts, ok, err
		}
	}
	return -1, -1, false, nil
}

// MaxTimestamp returns the largest record timestamp in the log and the
// offset of the first record carrying it (ListOffsets -3, KIP-734); (-1, -1)
// if the log has no timestamps.
func (l *Log) MaxTimestamp() (timestamp int64, offset int64) {
	segs, sizes, _, interval, err := l.snapshotSegments()
	if err != nil {
		return -1, -1
	}
	defer unpinAll(segs)
	best, bestIdx := int64(-1), -1
	for i, s := range segs {
		ts, _, err := s.maxTimestampShallow(sizes[i], interval, l.logger)
		if err == nil && ts > best {
			best, bestIdx = ts, i
		}
	}
	if bestIdx < 0 {
		return -1, -1
	}
	ts, off, err := segs[bestIdx].maxTimestamp(sizes[bestIdx], interval, l.logger)
	if err != nil {
		return -1, -1
	}
	return ts, off
}

// Maintain rolls an active segment older than SegmentMs, expires idle
// producers, and applies retention: it deletes the oldest closed segments
// while the log is over RetentionBytes or their largest timestamp (file
// modification time if they have none) is older than RetentionMs, and
// advances the log start offset. The active segment is never deleted.
func (l *Log) Maintain() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	cfg := &l.w.cfg
	now := l.now()
	if cfg.ProducerIDExpiration > 0 {
		cutoff := now.Add(-cfg.ProducerIDExpiration).UnixMilli()
		for id, e := range l.w.producers {
			// An ongoing transaction keeps its producer: the LSO
			// waits for its marker, which must find the state.
			if e.lastWrite < cutoff && !e.txnOpen {
				delete(l.w.producers, id)
			}
		}
	}
	if s := l.active(); s.size > 0 && !s.created.IsZero() && now.Sub(s.created) >= cfg.SegmentMs {
		if err := l.rollLocked(); err != nil {
			return err
		}
	}
	segs := l.mu.segs
	total := l.size.Load()
	retBytes, retMs := cfg.RetentionBytes, cfg.RetentionMs
	if cfg.Tiered {
		retBytes, retMs = cfg.LocalRetentionBytes, cfg.LocalRetentionMs
	}
	n := 0
	for ; n < len(segs)-1; n++ {
		s := segs[n]
		if cfg.Tiered && segs[n+1].base > l.w.tiered {
			break // not wholly in the cold tier yet: the only copy is here
		}
		expired := retBytes >= 0 && total-s.size >= retBytes
		if !expired && retMs >= 0 {
			t, err := l.segmentTime(s)
			if err != nil {
				return err
			}
			expired = now.Sub(t) > retMs
		}
		if !expired {
			break
		}
		total -= s.size
	}
	if n == 0 {
		return nil
	}
	return l.deleteOldestLocked(n)
}

// segmentTime is the retention age reference of a closed segment.
func (l *Log) segmentTime(s *segment) (time.Time, error) {
	ts, _, err := s.maxTimestampShallow(s.size, l.w.cfg.IndexIntervalBytes, l.logger)
	if err != nil {
		return time.Time{}, err
	}
	if ts >= 0 {
		return time.UnixMilli(ts), nil
	}
	fi, err := s.f.Stat()
	if err != nil {
		return time.Time{}, fmt.Errorf("segment: %w", err)
	}
	return fi.ModTime(), nil
}

// deleteOldestLocked deletes the n oldest segments: first the log start
// offset moves (so no reader is sent to them), then the files go.
func (l *Log) deleteOldestLocked(n int) error {
	victims := slices.Clone(l.mu.segs[:n])
	newStart := max(l.mu.start, l.mu.segs[n].base)
	epochs := truncateEpochsFromStart(l.mu.epochs, newStart)
	var err error
	if !slices.Equal(epochs, l.mu.epochs) {
		err = writeFileAtomic(l.epochPath(), encodeEpochs(epochs))
	}
	var freed int64
	l.mu.Lock()
	l.mu.segs = slices.Clone(l.mu.segs[n:])
	l.mu.start = newStart
	l.mu.epochs = epochs
	for _, s := range victims {
		freed += s.size
	}
	l.mu.Unlock()
	l.size.Add(-freed)
	for _, s := range victims {
		if rerr := s.remove(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("segment: deleting %s: %w", s.logPath(), rerr))
		}
		s.release()
	}
	for len(l.w.snapshots) > 0 && l.w.snapshots[0] < newStart {
		before := len(l.w.snapshots)
		l.removeSnapshotLocked(l.w.snapshots[0])
		if len(l.w.snapshots) == before {
			break
		}
	}
	l.logger.Info("deleted segments by retention", "dir", l.dir, "segments", n, "bytes", freed, "logStartOffset", newStart)
	return err
}

// Sync makes everything appended so far durable: the active segment and its
// indexes.
func (l *Log) Sync() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	s := l.active()
	s.imu.Lock()
	err := s.flushIndexesLocked()
	s.imu.Unlock()
	if err == nil {
		err = l.syncTxnIndexLocked(s)
	}
	if err == nil {
		err = s.f.Sync()
	}
	if err != nil {
		return fmt.Errorf("segment: sync %s: %w", l.dir, err)
	}
	return nil
}

// Close makes the log durable, writes a producer snapshot at the log end
// offset and the clean-shutdown marker, and closes the files (once no
// reader holds them). It is idempotent.
func (l *Log) Close() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return l.closeLocked()
}

func (l *Log) closeLocked() error {
	if l.mu.closed {
		return nil
	}
	s := l.active()
	var err error
	if l.w.failed == nil {
		err = l.sealLocked(s)
		if err == nil {
			err = l.writeSnapshotLocked(l.mu.end)
		}
		if err == nil {
			err = writeFileAtomic(filepath.Join(l.dir, cleanShutdownName), encodeMarker(s.base, s.size))
		}
	}
	l.dropSegmentsLocked()
	return err
}

// dropSegmentsLocked marks the log closed and lets go of its segments, making
// nothing durable; each file closes once no reader holds it.
func (l *Log) dropSegmentsLocked() {
	l.mu.Lock()
	l.mu.closed = true
	segs := l.mu.segs
	l.mu.segs = nil
	l.mu.Unlock()
	releaseAll(segs)
}

// Delete closes the log and removes its directory (topic deletion).
func (l *Log) Delete() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	cerr := l.closeLocked()
	if err := os.RemoveAll(l.dir); err != nil {
		return fmt.Errorf("segment: deleting %s: %w", l.dir, err)
	}
	if cerr != nil {
		l.logger.Warn("closing a log being deleted", "dir", l.dir, "err", cerr)
	}
	return nil
}
