package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// segment is one .log file with its indexes. Its file descriptor is
// reference counted so that retention or Close can drop a segment while a
// reader is still preading it: the last release closes the file.
type segment struct {
	base int64
	dir  string
	f    *os.File

	refs          atomic.Int32
	corruptLogged atomic.Bool // one error-level report per segment
	rewriting     atomic.Bool // a Rewrite holds it as a source

	// size is the number of published bytes of .log. Readers read it under
	// Log.mu; the writer, holding Log.writeMu, reads it freely and changes
	// it under Log.mu.
	size int64
	// created is when the segment got its first batch (SegmentMs); owned by
	// the writer.
	created time.Time

	imu sync.Mutex // guards ix; taken after Log.mu when both are held
	ix  indexState

	// cut is held shared by a reader (pin) from the moment it takes the
	// segment's size under Log.mu until it is done reading, and
	// exclusively by TruncateTo while it shortens the file: a reader
	// never reads past a size that no longer holds, nor bytes appended
	// after the cut at positions it thought were the old ones. Taken
	// under Log.mu (read) by readers; never held while waiting for
	// Log.mu.
	cut sync.RWMutex
	// cuts are the positions the file was truncated to, in order,
	// appended under cut held exclusively and read under it shared: a
	// FileRange taken before a cut below its end is no longer the file's.
	cuts []int64
	// verified is what of the file passed its CRC check in this process
	// (filerange.go).
	verified spans
}

// indexState is a segment's in-memory index. The active segment's is always
// loaded; a closed segment's is loaded from its files on first use.
type indexState struct {
	indexer
	loaded bool
	// end bounds the offsets of the segment (exclusive): the next segment's
	// base, or math.MaxInt64 for the active segment.
	end int64
	// offFlushed and timeFlushed count the entries already in the files.
	offFlushed, timeFlushed int
	// maxTsRecord is the offset of the first record carrying maxTs, -1 if
	// not known yet (found lazily by MaxTimestamp).
	maxTsRecord int64
	// removed is set once the files are unlinked or belong to another
	// segment: the index is then rebuilt from the descriptor, never read
	// from or written to the files.
	removed bool
	// replaced is set once a rewrite's swap gave the file names to the
	// outputs: remove leaves them alone.
	replaced bool
}

// install makes x the loaded index, with every entry already in the files.
func (ix *indexState) install(x indexer) {
	ix.indexer, ix.loaded = x, true
	ix.offFlushed, ix.timeFlushed = len(x.offsets), len(x.times)
}

func (s *segment) logPath() string       { return offsetName(s.dir, s.base, logSuffix) }
func (s *segment) indexPath() string     { return offsetName(s.dir, s.base, indexSuffix) }
func (s *segment) timeIndexPath() string { return offsetName(s.dir, s.base, timeIndexSuffix) }

func openSegment(dir string, base int64, create bool) (*segment, error) {
	s := &segment{base: base, dir: dir}
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(s.logPath(), flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening segment: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening segment: %w", err)
	}
	s.f, s.size = f, fi.Size()
	s.refs.Store(1)
	s.ix.maxTsRecord = -1
	s.ix.end = math.MaxInt64
	return s, nil
}

// createSegment creates an empty segment at base with empty index files,
// fsyncing the directory.
func createSegment(dir string, base int64, interval int) (*segment, error) {
	s, err := openSegment(dir, base, true)
	if err != nil {
		return nil, err
	}
	s.ix.install(newIndexer(base, interval))
	if err := s.writeIndexes(&s.ix.indexer); err != nil {
		s.remove()
		s.release()
		return nil, err
	}
	return s, nil
}

func (s *segment) acquire() { s.refs.Add(1) }

// pin is acquire for a reader, which also holds off truncation of the
// file until unpin. Call it under Log.mu.
func (s *segment) pin() {
	s.acquire()
	s.cut.RLock()
}

func (s *segment) unpin() {
	s.cut.RUnlock()
	s.release()
}

func unpinAll(segs []*segment) {
	for _, s := range segs {
		s.unpin()
	}
}

func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		s.f.Close()
	}
}

// remove unlinks the segment's files; the descriptor stays valid for
// readers that hold a reference. Marking it first keeps a concurrent lazy
// index rebuild from writing the index files back.
func (s *segment) remove() error {
	s.imu.Lock()
	s.ix.removed = true
	replaced := s.ix.replaced
	s.imu.Unlock()
	if replaced {
		return nil
	}
	return errors.Join(
		removeIfExists(s.logPath()),
		removeIfExists(s.indexPath()),
		removeIfExists(s.timeIndexPath()),
		removeIfExists(s.txnIndexPath()))
}

func (s *segment) corrupt(pos int64, format string, args ...any) error {
	return fmt.Errorf("%w: %s at position %d: %s", ErrCorruptSegment, s.logPath(), pos, fmt.Sprintf(format, args...))
}

// scanFailure turns a scanner error into ErrCorruptSegment when it is about
// the data rather than I/O.
func (s *segment) scanFailure(err error) error {
	var se *scanError
	if errors.As(err, &se) {
		return s.corrupt(se.pos, "%s", se.reason)
	}
	return err
}

func (s *segment) reportCorrupt(logger *slog.Logger, err error) {
	if s.corruptLogged.CompareAndSwap(false, true) {
		logger.Error("corrupt batch in segment; serving only the data before it", "segment", s.logPath(), "err", err)
	}
}

// loadLocked loads a closed segment's indexes from its files, rebuilding
// them from the .log (limit bytes) when they fail the full check.
func (s *segment) loadLocked(limit int64, interval int, logger *slog.Logger) error {
	if s.ix.loaded {
		return nil
	}
	span := s.ix.end - s.base
	x := newIndexer(s.base, interval)
	var reason error
	if s.ix.removed {
		reason = errors.New("the segment's files are gone or another segment's")
	} else if b, err := os.ReadFile(s.indexPath()); err != nil {
		reason = err
	} else if x.offsets, err = decodeOffsets(b, limit, span); err != nil {
		reason = fmt.Errorf("%s: %w", s.indexPath(), err)
	}
	if reason == nil {
		if b, err := os.ReadFile(s.timeIndexPath()); err != nil {
			reason = err
		} else if x.times, err = decodeTimes(b, span); err != nil {
			reason = fmt.Errorf("%s: %w", s.timeIndexPath(), err)
		}
	}
	if reason != nil {
		if s.ix.removed {
			// A reader finishing on a deleted or replaced segment: expected.
			logger.Debug("indexing a dropped segment from its descriptor", "segment", s.logPath())
		} else {
			logger.Warn("rebuilding segment indexes", "segment", s.logPath(), "reason", reason)
		}
		var err error
		if x, err = s.scanIndexes(limit, interval, logger); err != nil {
			return err
		}
		if !s.ix.removed {
			if err := s.writeIndexes(&x); err != nil {
				return err
			}
		}
	} else if n := len(x.times); n > 0 {
		// A closed segment's last time entry is its maximum (sealing adds it).
		x.maxTs, x.maxTsLast = x.times[n-1].ts, s.base+int64(x.times[n-1].rel)
	}
	s.ix.install(x)
	return nil
}

// scanIndexes rebuilds the indexes of a closed segment from its batch
// headers, stopping (with a warning) at the first unreadable header.
func (s *segment) scanIndexes(limit int64, interval int, logger *slog.Logger) (indexer, error) {
	x, err := s.indexBatches(limit, interval, logger)
	if err != nil {
		return x, err
	}
	x.maybeAddTime()
	return x, nil
}

// indexBatches indexes the batches in the first limit bytes as appends
// would have, stopping (with a warning) at the first unreadable header.
func (s *segment) indexBatches(limit int64, interval int, logger *slog.Logger) (indexer, error) {
	x := newIndexer(s.base, interval)
	next := s.base
	sc := newScanner(s.f, 0, limit, false)
	for {
		b, pos, err := sc.next()
		if err == io.EOF {
			break
		}
		var se *scanError
		if errors.As(err, &se) {
			logger.Warn("stopping index rebuild at an unreadable batch", "segment", s.logPath(), "err", err)
			break
		}
		if err != nil {
			return x, fmt.Errorf("rebuilding indexes of %s: %w", s.logPath(), err)
		}
		h := decodeHeader(b)
		if h.BaseOffset < next || h.LastOffsetDelta < 0 || h.LastOffset()-s.base > math.MaxInt32 {
			logger.Warn("stopping index rebuild at a batch out of offset order", "segment", s.logPath(), "position", pos)
			break
		}
		x.add(pos, h.LastOffset(), h.MaxTimestamp, h.Size())
		next = h.LastOffset() + 1
	}
	return x, nil
}

// writeIndexes replaces both index files with x's entries.
func (s *segment) writeIndexes(x *indexer) error {
	if err := writeFileAtomic(s.indexPath(), encodeOffsets(nil, x.offsets)); err != nil {
		return err
	}
	return writeFileAtomic(s.timeIndexPath(), encodeTimes(nil, x.times))
}

// flushIndexesLocked appends the entries not yet in the index files and
// fsyncs them.
func (s *segment) flushIndexesLocked() error {
	if err := appendEntries(s.indexPath(), offsetEntrySize, s.ix.offFlushed,
		encodeOffsets(nil, s.ix.offsets[s.ix.offFlushed:])); err != nil {
		return err
	}
	s.ix.offFlushed = len(s.ix.offsets)
	if err := appendEntries(s.timeIndexPath(), timeEntrySize, s.ix.timeFlushed,
		encodeTimes(nil, s.ix.times[s.ix.timeFlushed:])); err != nil {
		return err
	}
	s.ix.timeFlushed = len(s.ix.times)
	return nil
}

// appendEntries writes b after the first `have` entries of the file at path,
// cuts anything beyond, and fsyncs.
func appendEntries(path string, entrySize, have int, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("flushing index: %w", err)
	}
	at := int64(have) * int64(entrySize)
	if len(b) > 0 {
		_, err = f.WriteAt(b, at)
	}
	if err == nil {
		err = f.Truncate(at + int64(len(b)))
	}
	if err = syncAndClose(f, err); err != nil {
		return fmt.Errorf("flushing index %s: %w", path, err)
	}
	return nil
}

// position returns where to start scanning for offset and the last offset
// of the batch there according to the index, -1 when it starts at 0.
func (s *segment) position(offset, limit int64, interval int, logger *slog.Logger) (pos, last int64, err error) {
	s.imu.Lock()
	err = s.loadLocked(limit, interval, logger)
	offsets := s.ix.offsets
	s.imu.Unlock()
	if err != nil {
		return 0, -1, err
	}
	pos, last = lookupEntry(offsets, s.base, offset)
	return pos, last, nil
}

// batchScan walks a segment's batches from a position, checking each
// header as it goes: the magic, a length that stays within the file, and
// offsets that increase, stay below the segment's end and, for the first
// batch, match the index. The CRC covers a batch from its attributes on:
// the base offset and the length before it are checked against the
// batches around it, or a flipped bit would serve offsets the segment
// does not hold, or skip records a consumer asked for. Header checks need
// only the header's bytes; the CRC needs the whole batch, and is left to
// the caller that reads it (read), which a zero-copy send does not.
type batchScan struct {
	s                 *segment
	pos, limit, end   int64 // file position scanned from, bytes published, offset bound
	indexed           int64 // the last offset of the batch at pos, by the index; -1 if not known
	prevLast, checked int64 // last offset of the batch at relative position checked, the furthest checked
	// at returns the file bytes at relative position p, at least n of
	// them.
	at func(p, n int64) ([]byte, error)
}

// header checks the batch at relative position p and returns it.
func (b *batchScan) header(p int64) (BatchHeader, error) {
	s := b.s
	if b.pos+p+headerSize > b.limit {
		return BatchHeader{}, s.corrupt(b.pos+p, "truncated batch header")
	}
	buf, err := b.at(p, headerSize)
	if err != nil {
		return BatchHeader{}, err
	}
	h := decodeHeader(buf)
	switch {
	case h.Magic != 2:
		return h, s.corrupt(b.pos+p, "magic %d", h.Magic)
	case h.Length < minBatchLength || b.pos+p+int64(h.Size()) > b.limit:
		return h, s.corrupt(b.pos+p, "batch length %d", h.Length)
	}
	if p > b.checked {
		if h.BaseOffset <= b.prevLast || h.LastOffsetDelta < 0 || h.BaseOffset >= b.end || h.LastOffset() >= b.end ||
			(p == 0 && b.indexed >= 0 && h.LastOffset() != b.indexed) {
			return h, s.corrupt(b.pos+p, "batch offsets [%d, %d] after offset %d in a segment ending before %d", h.BaseOffset, h.LastOffset(), b.prevLast, b.end)
		}
		b.prevLast, b.checked = h.LastOffset(), p
	}
	return h, nil
}

// skipTo returns the relative position of the batch that contains
// offset, or the first after it; found is false when there is none.
func (b *batchScan) skipTo(offset int64) (p int64, found bool, err error) {
	for {
		if b.pos+p >= b.limit {
			return p, false, nil
		}
		h, err := b.header(p)
		if err != nil {
			return p, false, err
		}
		if h.LastOffset() >= offset {
			return p, true, nil
		}
		p += int64(h.Size())
	}
}

// batchSpan is a run of whole batches a scan took.
type batchSpan struct {
	first, end int64 // relative positions
	// next is the offset after the last batch; transactional reports
	// whether any is a transactional data batch.
	next          int64
	transactional bool
	// stop is the header error that ended the run early, if any.
	stop error
}

// take takes whole batches from relative position first, the batch at
// first always (KIP-74), then those below maxOffset while the run fits in
// maxBytes.
func (b *batchScan) take(first, maxOffset int64, maxBytes int) batchSpan {
	sp := batchSpan{first: first, end: first}
	for b.pos+sp.end < b.limit {
		h, err := b.header(sp.end)
		if err != nil {
			sp.stop = err
			break
		}
		if h.BaseOffset >= maxOffset || (sp.end > first && sp.end-first+int64(h.Size()) > int64(maxBytes)) {
			break
		}
		sp.end += int64(h.Size())
		sp.next = h.LastOffset() + 1
		sp.transactional = sp.transactional || (h.IsTransactional() && !h.IsControl())
	}
	return sp
}

// read appends to dst the batches of this segment starting with the one
// that contains offset (or the first after it), limited as Log.Read
// describes, reading only the first limit bytes of the file. Every offset
// of the segment is below endOffset (the next segment's base, or the log
// end). found reports whether the segment has any batch at or after offset.
func (s *segment) read(dst []byte, offset, maxOffset int64, maxBytes int, limit, endOffset int64, interval int, logger *slog.Logger) (_ []byte, found bool, _ error) {
	pos, indexed, err := s.position(offset, limit, interval, logger)
	if err != nil {
		return dst, false, err
	}
	n0 := len(dst)
	// The first pread covers the scan from the index entry (about an
	// interval) and maxBytes; later ones, rarely needed, only what is
	// missing plus a little.
	budget := int64(max(maxBytes, 0)) + headerSize
	readAhead := budget + 2*int64(interval)
	var win int64 // file bytes [pos, pos+win) are in dst[n0:]
	ensure := func(need int64) error {
		if need <= win {
			return nil
		}
		want := min(max(need, win+readAhead), limit-pos)
		readAhead = 16 << 10
		dst = slices.Grow(dst[:n0+int(win)], int(want-win))[:n0+int(want)]
		n, err := s.f.ReadAt(dst[n0+int(win):], pos+win)
		if int64(n) < want-win {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			dst = dst[:n0+int(win)]
			return fmt.Errorf("reading %s: %w", s.logPath(), err)
		}
		win = want
		return nil
	}
	sc := &batchScan{s: s, pos: pos, limit: limit, end: endOffset, indexed: indexed, prevLast: s.base - 1, checked: -1,
		at: func(p, n int64) ([]byte, error) {
			if err := ensure(p + n); err != nil {
				return nil, err
			}
			return dst[n0+int(p):], nil
		}}
	fail := func(err error) ([]byte, bool, error) {
		if errors.Is(err, ErrCorruptSegment) {
			s.reportCorrupt(logger, err)
		}
		return dst[:n0], false, err
	}

	first, found, err := sc.skipTo(offset)
	if err != nil {
		return fail(err)
	}
	if !found {
		return dst[:n0], false, nil
	}
	if err := ensure(min(first+budget, limit-pos)); err != nil {
		return fail(err)
	}
	sp := sc.take(first, maxOffset, maxBytes)
	stop, q := sp.stop, sp.end
	if q == first {
		if stop != nil {
			return fail(stop)
		}
		return dst[:n0], true, nil // the batch holding offset is at or beyond maxOffset
	}
	if err := ensure(q); err != nil {
		return fail(err)
	}
	// Never hand out bytes that fail their checksum.
	ok, bad := s.checkCRCs(dst[n0+int(first):n0+int(q)], pos+first)
	valid := first + int64(ok)
	if bad != nil {
		stop = bad
	}
	if stop != nil && errors.Is(stop, ErrCorruptSegment) {
		s.reportCorrupt(logger, stop)
	}
	if valid == first {
		return fail(stop)
	}
	if first == 0 {
		return dst[:n0+int(valid)], true, nil
	}
	n := copy(dst[n0:], dst[n0+int(first):n0+int(valid)])
	return dst[:n0+n], true, nil
}

// checkCRCs checks the CRC-32C of each of the whole batches in b, read
// from file position pos, and returns the length of the prefix that
// passes and, if a batch fails, the error naming it.
func (s *segment) checkCRCs(b []byte, pos int64) (int, error) {
	valid := 0
	for valid < len(b) {
		batch := b[valid:]
		batch = batch[:logOverhead+int(int32(binary.BigEndian.Uint32(batch[offLength:])))]
		if want, got := binary.BigEndian.Uint32(batch[offCRC:]), batchCRC(batch); want != got {
			return valid, s.corrupt(pos+int64(valid), "CRC-32C mismatch (stored %08x, computed %08x)", want, got)
		}
		valid += len(batch)
	}
	return valid, nil
}

// readBatchAt returns the whole, CRC-checked batch of size bytes at position
// pos, whose header a scanner has already checked.
func (s *segment) readBatchAt(buf []byte, pos int64, size int) ([]byte, error) {
	buf = slices.Grow(buf[:0], size)[:size]
	if _, err := s.f.ReadAt(buf, pos); err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.logPath(), err)
	}
	if want, got := binary.BigEndian.Uint32(buf[offCRC:]), batchCRC(buf); want != got {
		return nil, s.corrupt(pos, "CRC-32C mismatch (stored %08x, computed %08x)", want, got)
	}
	return buf, nil
}

// firstRecordAtOrAfter walks the records of batch b and returns the first
// record with timestamp >= ts and offset >= minOffset.
func firstRecordAtOrAfter(b []byte, ts, minOffset int64) (int64, int64, bool, error) {
	h := decodeHeader(b)
	if h.Attributes&attrLogAppendTime != 0 {
		if h.MaxTimestamp < ts || h.LastOffset() < minOffset || h.NumRecords == 0 {
			return 0, 0, false, nil
		}
		// Every offset of a batch compaction left whole holds a record;
		// in a compacted one, the first at or after minOffset is found
		// below.
		if h.NumRecords == h.LastOffsetDelta+1 {
			return max(h.BaseOffset, minOffset), h.MaxTimestamp, true, nil
		}
	}
	recs := b[headerSize:]
	if codec := h.Codec(); codec != codecNone {
		pooled, out, err := decompress(codec, recs)
		if err != nil {
			return 0, 0, false, fmt.Errorf("%w: decompressing stored batch at offset %d: %v", ErrCorruptSegment, h.BaseOffset, err)
		}
		defer putBuf(pooled)
		recs = out
	}
	it := recordIter{b: recs}
	for i := int32(0); i < h.NumRecords; i++ {
		r, err := it.next()
		if err != nil {
			return 0, 0, false, fmt.Errorf("%w: stored batch at offset %d: %v", ErrCorruptSegment, h.BaseOffset, err)
		}
		off, rts := h.BaseOffset+r.offsetDelta, recordTimestamp(&h, r.timestampDelta)
		if rts >= ts && off >= minOffset {
			return off, rts, true, nil
		}
	}
	return 0, 0, false, nil
}

// findTimestamp returns the first record in the segment with timestamp >=
// ts and offset >= minOffset.
func (s *segment) findTimestamp(ts, minOffset, limit int64, interval int, logger *slog.Logger) (int64, int64, bool, error) {
	s.imu.Lock()
	err := s.loadLocked(limit, interval, logger)
	offsets, times, maxTs := s.ix.offsets, s.ix.times, s.ix.maxTs
	s.imu.Unlock()
	if err != nil || maxTs < ts {
		return 0, 0, false, err
	}
	// Every record up to the batch of the last entry below ts is older.
	pos := lookup(offsets, s.base, minOffset)
	if i := sort.Search(len(times), func(i int) bool { return times[i].ts >= ts }) - 1; i >= 0 {
		pos = max(pos, lookup(offsets, s.base, s.base+int64(times[i].rel)))
	}
	sc := newScanner(s.f, pos, limit, false)
	var buf []byte
	for {
		hb, p, err := sc.next()
		if err == io.EOF {
			return 0, 0, false, nil
		}
		if err != nil {
			return 0, 0, false, s.scanFailure(err)
		}
		h := decodeHeader(hb)
		if h.MaxTimestamp < ts || h.LastOffset() < minOffset {
			continue
		}
		if buf, err = s.readBatchAt(buf, p, h.Size()); err != nil {
			s.reportCorrupt(logger, err)
			return 0, 0, false, err
		}
		off, rts, ok, err := firstRecordAtOrAfter(buf, ts, minOffset)
		if err != nil || ok {
			return off, rts, ok, err
		}
	}
}

// maxTimestampShallow returns the segment's largest timestamp (-1 if none)
// and the last offset of the batch holding it.
func (s *segment) maxTimestampShallow(limit int64, interval int, logger *slog.Logger) (int64, int64, error) {
	s.imu.Lock()
	defer s.imu.Unlock()
	if err := s.loadLocked(limit, interval, logger); err != nil {
		return -1, -1, err
	}
	return s.ix.maxTs, s.ix.maxTsLast, nil
}

// maxTimestamp returns the segment's largest timestamp (-1 if none) and
// the offset of the first record carrying it, finding that record lazily.
func (s *segment) maxTimestamp(limit int64, interval int, logger *slog.Logger) (int64, int64, error) {
	s.imu.Lock()
	err := s.loadLocked(limit, interval, logger)
	ts, last, rec := s.ix.maxTs, s.ix.maxTsLast, s.ix.maxTsRecord
	offsets := s.ix.offsets
	s.imu.Unlock()
	if err != nil || ts < 0 {
		return -1, -1, err
	}
	if rec >= 0 {
		return ts, rec, nil
	}
	// Find the batch holding last and, in it, the first record with ts.
	sc := newScanner(s.f, lookup(offsets, s.base, last), limit, false)
	for {
		hb, p, err := sc.next()
		if err == io.EOF {
			return ts, last, nil // index disagrees with the log: fall back to the batch
		}
		if err != nil {
			return -1, -1, s.scanFailure(err)
		}
		h := decodeHeader(hb)
		if h.LastOffset() < last {
			continue
		}
		b, err := s.readBatchAt(nil, p, h.Size())
		if err != nil {
			s.reportCorrupt(logger, err)
			return -1, -1, err
		}
		off, _, ok, err := firstRecordAtOrAfter(b, ts, 0)
		if err != nil {
			return -1, -1, err
		}
		if !ok {
			off = h.LastOffset()
		}
		s.imu.Lock()
		if s.ix.maxTs == ts {
			s.ix.maxTsRecord = off
		}
		s.imu.Unlock()
		return ts, off, nil
	}
}

// scanError reports a batch the scanner cannot step over: a torn or
// malformed header. I/O errors are returned as they are.
type scanError struct {
	pos    int64
	reason string
}

func (e *scanError) Error() string { return fmt.Sprintf("position %d: %s", e.pos, e.reason) }

// scanner iterates over the batches of a .log between two positions,
// reading the file in large chunks.
type scanner struct {
	f      *os.File
	pos    int64
	limit  int64
	full   bool // return whole batches rather than headers
	buf    []byte
	bufPos int64
}

func newScanner(f *os.File, pos, limit int64, full bool) *scanner {
	return &scanner{f: f, pos: pos, limit: limit, full: full}
}

// next returns the next batch (or its header) and its position; io.EOF at
// the limit. The bytes are valid until the following call.
func (sc *scanner) next() ([]byte, int64, error) {
	pos := sc.pos
	if pos >= sc.limit {
		return nil, pos, io.EOF
	}
	if sc.limit-pos < headerSize {
		return nil, pos, &scanError{pos, "truncated batch header"}
	}
	b, err := sc.window(pos, headerSize)
	if err != nil {
		return nil, pos, err
	}
	h := decodeHeader(b)
	switch {
	case h.Length < minBatchLength:
		return nil, pos, &scanError{pos, fmt.Sprintf("batch length %d", h.Length)}
	case pos+int64(h.Size()) > sc.limit:
		return nil, pos, &scanError{pos, "truncated batch"}
	case h.Magic != 2:
		return nil, pos, &scanError{pos, fmt.Sprintf("magic %d", h.Magic)}
	}
	if sc.full {
		if b, err = sc.window(pos, h.Size()); err != nil {
			return nil, pos, err
		}
	}
	sc.pos = pos + int64(h.Size())
	return b, pos, nil
}

func (sc *scanner) window(pos int64, n int) ([]byte, error) {
	if pos >= sc.bufPos && pos+int64(n) <= sc.bufPos+int64(len(sc.buf)) {
		off := pos - sc.bufPos
		return sc.buf[off : off+int64(n)], nil
	}
	chunk := 32 << 10
	if sc.full {
		chunk = 1 << 20
	}
	m := int(min(int64(max(n, chunk)), sc.limit-pos))
	if cap(sc.buf) < m {
		sc.buf = make([]byte, m)
	}
	sc.buf = sc.buf[:m]
	k, err := sc.f.ReadAt(sc.buf, pos)
	if k < m {
		sc.buf = sc.buf[:0]
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading %s: %w", sc.f.Name(), err)
	}
	sc.bufPos = pos
	return sc.buf[:n], nil
}
