package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// AppendReplica appends batches copied from the partition leader as they
// are: their base offsets, leader epochs, producer ids, epochs and
// sequences and timestamps are kept, and the bytes stored are the bytes
// given. records is one or more concatenated v2 batches (the records of a
// Fetch response).
//
// The first batch must start at or above EndOffset and each next one
// above the previous one's last offset, else ErrOffsetMismatch and nothing
// is appended: a compacted leader log has gaps where whole batches went,
// which the follower keeps (as Kafka's appendAsFollower does). Each batch
// is checked as the log stores it (checkStoredBatch: length, magic,
// CRC-32C, a record count within its offset span, so compacted and empty
// batches go in), not against timestamp bounds, MaxBatchBytes or the
// idempotence rules: the leader applied those, and a replica that judged
// them again by its own clock or settings would diverge from its leader.
// Producer state is updated from the batches as recovery does, so a
// follower that becomes leader recognises retries. A leader epoch higher
// than the latest known is recorded in the epoch history before its
// first batch is written; a lower one is refused (ErrInvalidRecord), as
// a leader never writes one.
//
// A Fetch response may end in a partial batch: only the whole batches
// before it are appended, and AppendInfo.Bytes says how many bytes they
// took. With no whole batch nothing is appended and there is no error.
// Like Append it rolls segments, is all-or-nothing, publishes the batches
// to readers at once and syncs nothing.
func (l *Log) AppendReplica(records []byte) (AppendInfo, error) {
	// The CRCs are checked before the lock, as Prepare does for Append.
	hdrs, used, err := replicaBatches(records)
	if err != nil {
		return AppendInfo{}, err
	}
	records = records[:used]
	if used > maxSegmentBytes {
		return AppendInfo{}, fmt.Errorf("%w: replica append of %d bytes", ErrMessageTooLarge, used)
	}

	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.mu.closed {
		return AppendInfo{}, ErrClosed
	}
	if l.w.failed != nil {
		return AppendInfo{}, fmt.Errorf("segment: log %s failed earlier: %w", l.dir, l.w.failed)
	}
	base := l.mu.end
	info := AppendInfo{BaseOffset: base, LastOffset: base - 1, MaxTimestamp: -1, LogStartOffset: l.mu.start, Batches: len(hdrs), Bytes: used}
	if len(hdrs) == 0 {
		return info, nil
	}

	// Offsets and epochs.
	latest := int32(-1)
	if n := len(l.mu.epochs); n > 0 {
		latest = l.mu.epochs[n-1].epoch
	}
	var newEpochs []epochEntry
	next := base
	for i := range hdrs {
		h := &hdrs[i]
		if h.BaseOffset < next {
			return AppendInfo{}, fmt.Errorf("%w: batch %d starts at offset %d, below where the log continues, %d", ErrOffsetMismatch, i, h.BaseOffset, next)
		}
		switch {
		case h.LeaderEpoch < latest:
			return AppendInfo{}, fmt.Errorf("%w: batch %d at offset %d has leader epoch %d, below the latest %d", ErrInvalidRecord, i, h.BaseOffset, h.LeaderEpoch, latest)
		case h.LeaderEpoch > latest:
			newEpochs = append(newEpochs, epochEntry{h.LeaderEpoch, h.BaseOffset})
			latest = h.LeaderEpoch
		}
		if i == 0 {
			info.BaseOffset = h.BaseOffset
		}
		next = h.LastOffset() + 1
		info.Records += int(h.NumRecords)
		info.MaxTimestamp = max(info.MaxTimestamp, h.MaxTimestamp)
	}
	now := l.now()

	seg := l.active()
	rollAt := l.mu.end
	if first := hdrs[0].BaseOffset; first > rollAt && next-1-seg.base > math.MaxInt32 {
		// A gap longer than a segment's relative offsets reach, left by
		// the leader's compaction: the new segment starts where the
		// batches do, as Kafka's follower rolls at the append's first
		// offset. Even an empty active segment rolls, left behind empty.
		rollAt = first
	}
	if rollAt != l.mu.end || l.shouldRollLocked(seg, int64(used), next-1, now) {
		if err := l.rollAtLocked(rollAt); err != nil {
			return AppendInfo{}, err
		}
		seg = l.active()
	}
	if next-1-seg.base > math.MaxInt32 {
		// Only a claimed record count can span this far: the relative
		// offsets of the index would not hold it.
		return AppendInfo{}, fmt.Errorf("%w: batches span offsets %d to %d, more than one segment can index", ErrInvalidRecord, base, next-1)
	}

	var epochs []epochEntry
	if newEpochs != nil {
		epochs = append(slices.Clip(l.mu.epochs), newEpochs...)
		if err := writeFileAtomic(l.epochPath(), encodeEpochs(epochs)); err != nil {
			return AppendInfo{}, fmt.Errorf("segment: recording leader epoch %d: %w", latest, err)
		}
	}

	pos := seg.size
	if _, err := seg.f.WriteAt(records, pos); err != nil {
		err = fmt.Errorf("segment: appending to %s: %w", seg.logPath(), err)
		if terr := seg.f.Truncate(pos); terr != nil {
			l.w.failed = errors.Join(err, terr)
		}
		return AppendInfo{}, err
	}
	seg.verified.add(pos, pos+int64(len(records))) // checked before the lock
	if seg.created.IsZero() {
		seg.created = now
	}

	seg.imu.Lock()
	p := pos
	for i := range hdrs {
		h := &hdrs[i]
		prevMax := seg.ix.maxTs
		seg.ix.add(p, h.LastOffset(), h.MaxTimestamp, h.Size())
		if seg.ix.maxTs > prevMax {
			seg.ix.maxTsRecord = -1 // found lazily: the records were not walked
		}
		p += int64(h.Size())
	}
	seg.imu.Unlock()
	if err := l.applyReplicaProducersLocked(seg, records, hdrs, now.UnixMilli()); err != nil {
		l.w.failed = err // recovery rebuilds the transaction index
	}

	l.mu.Lock()
	seg.size += int64(used)
	l.mu.end = next
	if epochs != nil {
		l.mu.epochs = epochs
	}
	info.LogStartOffset = l.mu.start
	l.mu.Unlock()
	l.size.Add(int64(used))

	info.LastOffset = next - 1
	return info, nil
}

// replicaBatches checks the whole batches at the start of records and
// returns their headers and the bytes they take; a partial batch at the
// end is left out.
func replicaBatches(records []byte) ([]BatchHeader, int, error) {
	var hdrs []BatchHeader
	p := 0
	for len(records)-p >= logOverhead {
		n := int64(logOverhead) + int64(int32(binary.BigEndian.Uint32(records[p+offLength:])))
		if n < headerSize {
			return nil, 0, fmt.Errorf("%w: batch %d claims %d bytes", ErrCorruptMessage, len(hdrs), n)
		}
		if n > int64(len(records)-p) {
			break // the partial last batch of a size-limited Fetch
		}
		h, err := checkStoredBatch(records[p : p+int(n)])
		if err != nil {
			return nil, 0, fmt.Errorf("batch %d at offset %d: %w", len(hdrs), h.BaseOffset, err)
		}
		hdrs = append(hdrs, h)
		p += int(n)
	}
	return hdrs, p, nil
}

// TruncateTo removes every batch at or above offset, as a replica that
// becomes follower does where its log diverges from the new leader's
// (KIP-101). Batches are atomic: when offset falls inside one, the whole
// batch goes. It returns the new log end offset, offset or the base of the
// batch holding it. offset >= EndOffset changes nothing; offset below
// StartOffset is ErrOffsetOutOfRange (TruncateFullyAndStartAt is for
// that).
//
// Later segments are deleted and the one holding the new end is cut and
// becomes the active segment; leader epochs from the new end on are
// dropped; producer state is rebuilt from the newest snapshot at or below
// the new end and the batches after it; the tiered offset stays. Readers
// never see bytes from past the new end once it returns, nor a torn
// batch meanwhile. A crash at any point leaves a log that Open recovers
// to a prefix of the old one ending at or above the new end
// (docs/format.md §11).
//
// The tier copies closed segments by path (ClosedSegments), and a cut
// segment changes under it: it copies only segments below the high
// watermark, where replicas agree and truncation does not reach but after
// an unclean leader election.
func (l *Log) TruncateTo(offset int64) (newEnd int64, err error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.mu.closed {
		return 0, ErrClosed
	}
	if l.w.failed != nil {
		return 0, fmt.Errorf("segment: log %s failed earlier: %w", l.dir, l.w.failed)
	}
	end := l.mu.end
	if offset >= end {
		return end, nil
	}
	if offset < l.mu.start {
		return end, fmt.Errorf("%w: truncating to %d, below the log start offset %d", ErrOffsetOutOfRange, offset, l.mu.start)
	}
	segs := l.mu.segs
	k := sort.Search(len(segs), func(i int) bool { return segs[i].base > offset }) - 1
	s := segs[k]
	cut, newEnd, err := l.cutPointLocked(s, offset)
	if err != nil {
		return end, err
	}
	if err := l.lowerCleanerLocked(newEnd); err != nil {
		return end, fmt.Errorf("segment: truncating %s: %w", l.dir, err)
	}

	// 1. Snapshots above the new end describe batches about to go; one left
	// behind would be trusted once new batches reach its offset again.
	for i := len(l.w.snapshots) - 1; i >= 0 && l.w.snapshots[i] > newEnd; i-- {
		if err := removeIfExists(offsetName(l.dir, l.w.snapshots[i], snapshotSuffix)); err != nil {
			return end, fmt.Errorf("segment: truncating %s: %w", l.dir, err)
		}
		l.w.snapshots = l.w.snapshots[:i]
	}
	if err := syncDir(l.dir); err != nil {
		return end, fmt.Errorf("segment: truncating: %w", err)
	}
	l.testPoint("snapshots removed")

	// 2. Readers see the new end before any byte goes.
	victims := slices.Clone(segs[k+1:])
	freed := s.size - cut
	for _, v := range victims {
		freed += v.size
	}
	oldEpochs := l.mu.epochs
	epochs := truncateEpochsFromEnd(oldEpochs, newEnd)
	wasActive := k == len(segs)-1
	l.mu.Lock()
	l.mu.segs = slices.Clone(segs[:k+1])
	l.mu.end = newEnd
	l.mu.epochs = epochs
	s.size = cut
	l.mu.Unlock()
	l.size.Add(-freed)

	// From here a failure leaves the files between the old log and the
	// new one; Open sorts them out, and until then nothing is appended.
	fail := func(err error) (int64, error) {
		err = fmt.Errorf("segment: truncating %s to %d: %w", l.dir, newEnd, err)
		l.w.failed = err
		return newEnd, err
	}

	// 3. Later segments go newest first, so the files left are always a
	// prefix of the log.
	var rerr error
	for i := len(victims) - 1; i >= 0; i-- {
		v := victims[i]
		if rerr == nil {
			rerr = v.remove()
			l.testPoint("segment removed")
		}
		v.release()
	}
	if rerr != nil {
		return fail(rerr)
	}

	// 4. Cut the segment holding the new end; it is the active one now.
	if err := l.cutSegmentLocked(s, cut, wasActive); err != nil {
		return fail(err)
	}
	if err := truncateTxnIndex(s.txnIndexPath(), newEnd); err != nil {
		return fail(err)
	}
	if err := syncDir(l.dir); err != nil {
		return fail(err)
	}

	// 5. Epochs, after the data: a crash in between leaves epochs that
	// recovery trims to the data, never data without its epoch.
	if len(epochs) != len(oldEpochs) {
		if err := writeFileAtomic(l.epochPath(), encodeEpochs(epochs)); err != nil {
			return fail(err)
		}
		l.testPoint("epochs written")
	}

	// 6. Producer state as of the new end.
	if err := l.rebuildProducersLocked(); err != nil {
		return fail(err)
	}
	l.logger.Info("truncated log", "dir", l.dir, "requested", offset, "logEndOffset", newEnd,
		"previousLogEndOffset", end, "segmentsDeleted", len(victims), "bytes", freed)
	l.testPoint("done")
	return newEnd, nil
}

func (l *Log) testPoint(point string) {
	if l.testHook != nil {
		l.testHook(point)
	}
}

// cutPointLocked finds where the log truncated to offset ends in segment
// s, which holds offset: the position of the batch holding offset (or
// the first after it) and the new log end offset.
func (l *Log) cutPointLocked(s *segment, offset int64) (cut, newEnd int64, err error) {
	pos, _, err := s.position(offset, s.size, l.w.cfg.IndexIntervalBytes, l.logger)
	if err != nil {
		return 0, 0, fmt.Errorf("segment: finding offset %d to truncate to: %w", offset, err)
	}
	sc := newScanner(s.f, pos, s.size, false)
	for {
		hb, p, err := sc.next()
		if err == io.EOF {
			return s.size, offset, nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("segment: finding offset %d to truncate to: %w", offset, s.scanFailure(err))
		}
		if h := decodeHeader(hb); h.LastOffset() >= offset {
			return p, min(h.BaseOffset, offset), nil
		}
	}
}

// cutSegmentLocked shortens s to cut bytes and rebuilds its indexes for
// them. It waits for the readers that took the segment's old size.
func (l *Log) cutSegmentLocked(s *segment, cut int64, wasActive bool) error {
	s.cut.Lock()
	defer s.cut.Unlock()
	s.cuts = append(s.cuts, cut)
	s.verified.trim(cut)
	if err := cutFile(s.f, cut); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	l.testPoint("segment cut")
	x, err := s.indexBatches(cut, l.w.cfg.IndexIntervalBytes, l.logger)
	if err != nil {
		return err
	}
	if err := s.writeIndexes(&x); err != nil {
		return err
	}
	s.imu.Lock()
	s.ix.install(x)
	s.ix.end = math.MaxInt64
	s.ix.maxTsRecord = -1
	s.imu.Unlock()
	switch {
	case cut == 0:
		s.created = time.Time{}
	case !wasActive:
		hdr := make([]byte, headerSize)
		if _, err := s.f.ReadAt(hdr, 0); err != nil {
			return err
		}
		s.created = createdFrom(decodeHeader(hdr).MaxTimestamp, l.now())
	}
	l.testPoint("indexes written")
	return nil
}

// cutAlign is the largest folio Linux caches a file's pages in on the
// platforms Strata runs on (x86-64 and arm64 with 4 KiB pages: a PMD, 2
// MiB), and so the alignment at and above which a truncation drops whole
// folios (cutFile).
const cutAlign = 2 << 20

// cutFile truncates f to cut bytes without changing a byte a zero-copy
// send may still have queued. sendfile(2) queues references to the page
// cache's pages, not copies, and truncating into the middle of a folio
// zeroes its tail in place, where the next append then writes: a socket
// that had queued those bytes would send the new ones instead. A
// truncation to a multiple of cutAlign drops whole folios from the
// cache, which the queued sends keep, unchanged, until they are sent; so
// the file is cut there and the bytes between that and cut are written
// back, into new pages. A crash in between loses those bytes, at most
// cutAlign of them, from this replica only: recovery cuts the torn tail
// and the follower fetches them again.
func cutFile(f *os.File, cut int64) error {
	base := cut &^ (cutAlign - 1)
	if base == cut {
		return f.Truncate(cut)
	}
	keep := make([]byte, cut-base)
	if _, err := f.ReadAt(keep, base); err != nil {
		return fmt.Errorf("read the %d bytes below the cut at %d: %w", len(keep), cut, err)
	}
	if err := f.Truncate(base); err != nil {
		return err
	}
	if _, err := f.WriteAt(keep, base); err != nil {
		return fmt.Errorf("write back the %d bytes below the cut at %d: %w", len(keep), cut, err)
	}
	return nil
}

// rebuildProducersLocked rebuilds producer state for the log as it ends
// now: the newest readable snapshot at or below the end, then the batch
// headers after it, counted as written now as in recovery.
func (l *Log) rebuildProducersLocked() error {
	producers := make(map[int64]*producerEntry)
	from := l.mu.start
	for i := len(l.w.snapshots) - 1; i >= 0; i-- {
		off := l.w.snapshots[i]
		if off > l.mu.end {
			continue
		}
		path := offsetName(l.dir, off, snapshotSuffix)
		data, err := os.ReadFile(path)
		var m map[int64]*producerEntry
		if err == nil {
			m, err = decodeSnapshot(data, off)
		}
		if err != nil {
			l.logger.Warn("ignoring unusable producer snapshot", "file", path, "err", err)
			continue
		}
		producers, from = m, max(off, from)
		break
	}
	nowMs := l.now().UnixMilli()
	if err := l.scanProducerBatches(from, func(h *BatchHeader, m TxnMarker, isMarker bool) {
		applyProducerBatch(producers, h, m, isMarker, nowMs)
	}); err != nil {
		return fmt.Errorf("rebuilding producer state: %w", err)
	}
	l.w.producers = producers
	l.dropUnreplicatedFrom(l.mu.end)
	l.publishUnstableLocked()
	return nil
}

// History is what a log restarted at an offset (TruncateFullyAndStartAt)
// is told of the records below it, which it does not hold: Kafka's
// "remote log auxiliary state", read from the bucket object that ends just
// below the restart offset. Without it a restarted follower forgets the
// transactions open across the restart offset: once it leads, their
// records stay unstable for nobody and their ABORT is indexed nowhere.
type History struct {
	// ProducerSnapshot is the producer state as of the restart offset,
	// encoded as a .snapshot file (docs/format.md §5; the producer-snapshot
	// part of a bucket object ending at offset-1); empty for none.
	ProducerSnapshot []byte
	// Epochs is the leader-epoch history of the records below the restart
	// offset, oldest first. Only the epoch in effect at the restart offset
	// is kept, starting there, as a log start move keeps it.
	Epochs []EpochStart
}

// EpochStart says that leader epoch Epoch wrote its first batch at
// StartOffset.
type EpochStart struct {
	Epoch       int32
	StartOffset int64
}

// TruncateFullyAndStartAt deletes every segment and snapshot and restarts
// the log empty at offset (StartOffset and EndOffset both offset), as
// Kafka's follower does when the leader's log starts above the follower's
// end or when it must start at the leader's local log start because older
// data is only in the cold tier. Its producer state and leader epochs are
// then those h gives (none with a zero History). The tiered offset stays.
//
// A crash at any point leaves either the old log or the new empty one:
// the restart is first recorded in a small file that Open completes
// (docs/format.md §11); the producer snapshot given survives a crash,
// the epochs given may not. It may be called on a log that failed
// earlier, which it replaces.
func (l *Log) TruncateFullyAndStartAt(offset int64, h History) error {
	if offset < 0 {
		return fmt.Errorf("%w: restarting the log at %d", ErrOffsetOutOfRange, offset)
	}
	producers := make(map[int64]*producerEntry)
	if len(h.ProducerSnapshot) > 0 {
		m, err := decodeSnapshot(h.ProducerSnapshot, offset)
		if err != nil {
			return fmt.Errorf("segment: restarting %s at %d: producer state: %w", l.dir, offset, err)
		}
		producers = m
	}
	var epochs []epochEntry
	for _, e := range h.Epochs {
		if e.Epoch < 0 || e.StartOffset < 0 || e.StartOffset > offset {
			return fmt.Errorf("segment: restarting %s at %d: leader epoch %d at %d", l.dir, offset, e.Epoch, e.StartOffset)
		}
		if n := len(epochs); n > 0 && (e.Epoch <= epochs[n-1].epoch || e.StartOffset < epochs[n-1].start) {
			return fmt.Errorf("segment: restarting %s at %d: leader epochs out of order", l.dir, offset)
		}
		epochs = append(epochs, epochEntry{e.Epoch, e.StartOffset})
	}
	epochs = truncateEpochsFromStart(epochs, offset)
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	l.testPoint("restart begins")
	// A log start checkpoint from an earlier DeleteRecordsBefore must not
	// cut the new log: it is raised to offset before the restart (so the
	// old log, should the restart not finish, only starts later), and set
	// to offset once the new log exists.
	hadLogStart := false
	if b, err := os.ReadFile(l.logStartPath()); err == nil {
		hadLogStart = true
		if v, ok := decodeLogStart(b); !ok || v < offset {
			if err := writeFileAtomic(l.logStartPath(), encodeLogStart(offset)); err != nil {
				return fmt.Errorf("segment: restarting %s at %d: %w", l.dir, offset, err)
			}
		}
	}
	if err := l.lowerCleanerLocked(offset); err != nil {
		return fmt.Errorf("segment: restarting %s at %d: %w", l.dir, offset, err)
	}
	// The snapshot goes first: restartFiles keeps the one at the restart
	// offset, so a crash from here on leaves it to the new log; before the
	// intent, the old log's recovery drops it (it is above that log's end).
	snap := offsetName(l.dir, offset, snapshotSuffix)
	if len(h.ProducerSnapshot) > 0 {
		if err := writeFileAtomic(snap, h.ProducerSnapshot); err != nil {
			return fmt.Errorf("segment: restarting %s at %d: %w", l.dir, offset, err)
		}
	} else if err := removeIfExists(snap); err != nil {
		return fmt.Errorf("segment: restarting %s at %d: %w", l.dir, offset, err)
	}
	intent := filepath.Join(l.dir, restartName)
	if err := writeFileAtomic(intent, encodeRestart(offset)); err != nil {
		return fmt.Errorf("segment: restarting %s at %d: %w", l.dir, offset, err)
	}
	l.testPoint("restart recorded")
	fail := func(err error) error {
		err = fmt.Errorf("segment: restarting %s at %d: %w", l.dir, offset, err)
		l.w.failed = err
		return err
	}
	// A reader's lazy index rebuild must not write the old files back.
	for _, s := range l.mu.segs {
		s.imu.Lock()
		s.ix.removed = true
		s.imu.Unlock()
	}
	s, err := restartFiles(l.dir, offset, l.w.cfg.IndexIntervalBytes, l.testPoint)
	if err != nil {
		return fail(err)
	}
	l.mu.Lock()
	old := l.mu.segs
	l.mu.segs = []*segment{s}
	l.mu.start, l.mu.end, l.mu.epochs = offset, offset, epochs
	l.mu.Unlock()
	releaseAll(old)
	l.size.Store(0)
	l.w.producers = producers
	l.dropUnreplicatedFrom(-1)
	l.publishUnstableLocked()
	l.w.snapshots = nil
	if len(h.ProducerSnapshot) > 0 {
		l.w.snapshots = []int64{offset}
	}
	l.w.failed = nil
	l.testPoint("restarted")
	if len(epochs) > 0 {
		if err := writeFileAtomic(l.epochPath(), encodeEpochs(epochs)); err != nil {
			return fail(err)
		}
	}
	if hadLogStart {
		if err := writeFileAtomic(l.logStartPath(), encodeLogStart(offset)); err != nil {
			return fail(err)
		}
	}
	if err := removeIfExists(intent); err != nil {
		return fail(err)
	}
	if err := syncDir(l.dir); err != nil {
		return fail(err)
	}
	l.logger.Info("restarted log", "dir", l.dir, "logStartOffset", offset, "producers", len(producers), "leaderEpochs", len(epochs))
	l.testPoint("done")
	return nil
}

// restartFiles deletes every segment, index and snapshot file in dir but
// the snapshot at offset (the new log's producer state, written before the
// restart was recorded), empties the epoch checkpoint and creates an empty
// segment at offset.
func restartFiles(dir string, offset int64, interval int, point func(string)) (*segment, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	// Snapshots first, then segments newest first: the order does not
	// matter to recovery, which finishes the restart, but keeps what a
	// crash leaves easy to read.
	var names []string
	for _, e := range entries {
		if off, suffix, ok := parseOffsetName(e.Name()); ok && (off != offset || suffix != snapshotSuffix) {
			names = append(names, e.Name())
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		as, bs := filepath.Ext(a) == snapshotSuffix, filepath.Ext(b) == snapshotSuffix
		switch {
		case as != bs && as:
			return -1
		case as != bs:
			return 1
		}
		return -strings.Compare(a, b)
	})
	for _, name := range names {
		if err := removeIfExists(filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	if err := removeIfExists(filepath.Join(dir, cleanShutdownName)); err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	point("files removed")
	if err := writeFileAtomic(filepath.Join(dir, epochCheckpointName), encodeEpochs(nil)); err != nil {
		return nil, err
	}
	point("epochs emptied")
	return createSegment(dir, offset, interval)
}

// The restart record (docs/format.md §11): magic, offset, CRC-32C.
const restartSize = 16

var restartMagic = [4]byte{'S', 'T', 'R', 'S'}

func encodeRestart(offset int64) []byte {
	b := make([]byte, restartSize)
	copy(b, restartMagic[:])
	binary.BigEndian.PutUint64(b[4:], uint64(offset))
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
	return b
}

func decodeRestart(b []byte) (int64, bool) {
	if len(b) != restartSize || [4]byte(b[:4]) != restartMagic ||
		binary.BigEndian.Uint32(b[12:]) != crc32.Checksum(b[:12], castagnoli) {
		return 0, false
	}
	off := int64(binary.BigEndian.Uint64(b[4:]))
	return off, off >= 0
}

// finishRestart completes a TruncateFullyAndStartAt that a crash
// interrupted, before Open looks at the segments.
func finishRestart(dir string, interval int) (bool, error) {
	path := filepath.Join(dir, restartName)
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	offset, ok := decodeRestart(data)
	if !ok {
		// Written atomically, so this is damage: guessing an offset
		// could lose or invent data.
		return false, fmt.Errorf("%s is unreadable: remove the partition directory or restore the file", path)
	}
	s, err := restartFiles(dir, offset, interval, func(string) {})
	if err != nil {
		return false, err
	}
	s.release()
	if _, err := os.Stat(filepath.Join(dir, logStartName)); err == nil {
		if err := writeFileAtomic(filepath.Join(dir, logStartName), encodeLogStart(offset)); err != nil {
			return false, err
		}
	}
	if err := removeIfExists(path); err != nil {
		return false, err
	}
	return true, syncDir(dir)
}
