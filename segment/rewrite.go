package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ErrRewriteConflict: the log changed under a rewrite (a source segment was
// truncated, deleted by retention or DeleteRecords, or the log closed); nothing was swapped.
var ErrRewriteConflict = errors.New("segment: log changed during rewrite")

// ErrStopScan, returned by a Scan callback, ends the scan early without error.
var ErrStopScan = errors.New("segment: stop scan")

// Rewrite replaces a run of adjacent closed segments with new segments
// holding a subset of their batches at the same offsets (compaction).
//
// The outputs are written beside the sources as <base>.log.cleaned (with
// .index.cleaned and .timeindex.cleaned), which Open discards unless a
// swap was recorded; Commit records the swap in <from>.swap and then
// renames the outputs into place (docs/format.md §13). A Rewrite holds
// references to its sources and no lock of the log's: appends,
// truncation and retention go on meanwhile, and Commit finds out whether
// they touched a source. A Rewrite is used by one goroutine at a time.
type Rewrite struct {
	l        *Log
	from, to int64
	interval int

	srcs  []*segment
	sizes []int64 // the sources' sizes when the rewrite began
	// next is the segment at to: truncation into a source deletes it, so
	// finding it still right after the sources proves they were not cut.
	next *segment

	outs []*segment // in offset order; the last one takes appends unless sealed
	open bool       // the last output takes appends
	// nextOff is the lowest offset the next batch may start at.
	nextOff int64
	// markers holds the offsets of the control batches appended with
	// their record, ascending: an aborted-transaction index entry stays
	// only with its marker (writeTxnIndexes).
	markers []int64
	done    bool
}

// BeginRewrite starts replacing the closed segments covering [from, to):
// from must be a segment's base offset, to a later segment's base offset
// (at most the active segment's). It holds references to them (not the
// truncation lock: TruncateTo and retention must never wait for a rewrite).
func (l *Log) BeginRewrite(from, to int64) (*Rewrite, error) {
	if from >= to {
		return nil, fmt.Errorf("segment: rewriting [%d, %d) of %s: an empty range", from, to, l.dir)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mu.closed {
		return nil, fmt.Errorf("%w: rewriting [%d, %d) of %s: %w", ErrRewriteConflict, from, to, l.dir, ErrClosed)
	}
	segs := l.mu.segs
	i := slices.IndexFunc(segs, func(s *segment) bool { return s.base == from })
	j := slices.IndexFunc(segs, func(s *segment) bool { return s.base == to })
	if i < 0 || j < 0 {
		return nil, fmt.Errorf("%w: rewriting [%d, %d) of %s: no segment starts at %d or %d", ErrRewriteConflict, from, to, l.dir, from, to)
	}
	srcs := slices.Clone(segs[i:j])
	// One rewrite per segment at a time: two swaps of the same files
	// would each think they own them.
	for k, s := range srcs {
		if !s.rewriting.CompareAndSwap(false, true) {
			for _, t := range srcs[:k] {
				t.rewriting.Store(false)
			}
			return nil, fmt.Errorf("%w: rewriting [%d, %d) of %s: segment %d is being rewritten already", ErrRewriteConflict, from, to, l.dir, s.base)
		}
	}
	rw := &Rewrite{l: l, from: from, to: to, interval: l.mu.interval, srcs: srcs, next: segs[j], nextOff: from}
	rw.sizes = make([]int64, len(srcs))
	for k, s := range srcs {
		s.acquire()
		rw.sizes[k] = s.size
	}
	return rw, nil
}

// Sources lists the segments being replaced.
func (rw *Rewrite) Sources() []SegmentInfo {
	out := make([]SegmentInfo, len(rw.srcs))
	for i, s := range rw.srcs {
		end := rw.to
		if i+1 < len(rw.srcs) {
			end = rw.srcs[i+1].base
		}
		ts, _, err := s.maxTimestampShallow(rw.sizes[i], rw.interval, rw.l.logger)
		if err != nil {
			ts = -1
		}
		out[i] = SegmentInfo{
			BaseOffset: s.base, EndOffset: end, Size: rw.sizes[i], MaxTimestamp: ts,
			LogPath: s.logPath(), IndexPath: s.indexPath(), TimeIndexPath: s.timeIndexPath(),
		}
		if snap := offsetName(rw.l.dir, end, snapshotSuffix); fileExists(snap) {
			out[i].SnapshotPath = snap
		}
	}
	return out
}

// Scan calls fn with each whole batch of the sources whose last offset is >= from,
// in offset order, each CRC-checked (a bad one is ErrCorruptSegment naming the file and position); batch is valid only during fn.
// It may be called several times. Reads go through the held file descriptors.
func (rw *Rewrite) Scan(from int64, fn func(batch []byte) error) error {
	if rw.done {
		return fmt.Errorf("segment: scanning a rewrite of %s that has ended", rw.l.dir)
	}
	for i, s := range rw.srcs {
		end := rw.to
		if i+1 < len(rw.srcs) {
			end = rw.srcs[i+1].base
		}
		if end <= from {
			continue
		}
		var pos int64
		if from > s.base {
			p, _, err := s.position(from, rw.sizes[i], rw.interval, rw.l.logger)
			if err != nil {
				return rw.explain(err)
			}
			pos = p
		}
		sc := newScanner(s.f, pos, rw.sizes[i], true)
		for {
			b, p, err := sc.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return rw.explain(s.scanFailure(err))
			}
			h := decodeHeader(b)
			if got := batchCRC(b); got != h.CRC {
				return rw.explain(s.corrupt(p, "CRC-32C mismatch (stored %08x, computed %08x)", h.CRC, got))
			}
			if h.LastOffset() < from {
				continue
			}
			if err := fn(b); err != nil {
				if errors.Is(err, ErrStopScan) {
					return nil
				}
				return err
			}
		}
	}
	return nil
}

// explain reports a failed read or write as a conflict when a source
// changed meanwhile (a truncation cut the file a scan read, Delete removed
// the directory), as the error it is otherwise.
func (rw *Rewrite) explain(err error) error {
	rw.l.mu.RLock()
	cerr := rw.checkLocked()
	rw.l.mu.RUnlock()
	if cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return fmt.Errorf("segment: rewriting segments [%d, %d) of %s: %w", rw.from, rw.to, rw.l.dir, err)
}

// Append adds one whole batch (offsets as stored) to the current output
// segment; batches come in ascending offset order within [from, to).
// It builds the output's offset and time indexes as appends do.
func (rw *Rewrite) Append(batch []byte) error {
	if rw.done {
		return fmt.Errorf("segment: appending to a rewrite of %s that has ended", rw.l.dir)
	}
	h, err := ParseBatchHeader(batch)
	if err != nil {
		return fmt.Errorf("segment: rewriting %s: %w", rw.l.dir, err)
	}
	switch {
	case h.Size() != len(batch):
		return fmt.Errorf("%w: rewriting %s: a batch of %d bytes given %d", ErrCorruptMessage, rw.l.dir, h.Size(), len(batch))
	case h.CRC != batchCRC(batch):
		return fmt.Errorf("%w: rewriting %s: batch at offset %d fails its CRC-32C", ErrCorruptMessage, rw.l.dir, h.BaseOffset)
	case h.LastOffsetDelta < 0 || h.BaseOffset < rw.nextOff || h.LastOffset() >= rw.to:
		return fmt.Errorf("%w: rewriting [%d, %d) of %s: batch offsets [%d, %d] after offset %d", ErrInvalidRecord, rw.from, rw.to, rw.l.dir, h.BaseOffset, h.LastOffset(), rw.nextOff-1)
	}
	s := rw.current()
	// A merged output may not outgrow what a segment can index: its size,
	// and offsets up to 2^31 past its base (an empty output too, which
	// then stays to cover the gap before the batch).
	if s != nil && ((s.size > 0 && s.size+int64(len(batch)) > maxSegmentBytes) || h.LastOffset()-s.base > math.MaxInt32) {
		if err := rw.seal(); err != nil {
			return err
		}
		s = nil
	}
	if s == nil {
		if len(rw.outs) == 0 && h.LastOffset()-rw.from > math.MaxInt32 {
			if _, err := rw.newOutput(rw.from); err != nil {
				return err
			}
			if err := rw.seal(); err != nil {
				return err
			}
		}
		base := h.BaseOffset
		if len(rw.outs) == 0 {
			base = rw.from // the outputs cover the sources' range with no hole
		}
		if s, err = rw.newOutput(base); err != nil {
			return err
		}
	}
	if _, err := s.f.WriteAt(batch, s.size); err != nil {
		return fmt.Errorf("segment: rewriting %s: writing %s: %w", rw.l.dir, s.f.Name(), err)
	}
	s.ix.add(s.size, h.LastOffset(), h.MaxTimestamp, h.Size())
	s.size += int64(len(batch))
	rw.nextOff = h.LastOffset() + 1
	if h.IsControl() && h.NumRecords > 0 {
		rw.markers = append(rw.markers, h.LastOffset())
	}
	return nil
}

// keepsMarker reports whether the outputs hold the marker at offset with
// its record. A read_committed consumer skips an aborted transaction's
// producer from the entry's first offset until it meets the ABORT
// marker: an entry left without its marker would hide that producer's
// later, committed batches.
func (rw *Rewrite) keepsMarker(offset int64) bool {
	_, ok := slices.BinarySearch(rw.markers, offset)
	return ok
}

func (rw *Rewrite) current() *segment {
	if !rw.open {
		return nil
	}
	return rw.outs[len(rw.outs)-1]
}

func cleanedName(dir string, base int64, suffix string) string {
	return offsetName(dir, base, suffix+cleanedSuffix)
}

// newOutput starts an output segment at base. Nobody else sees it until
// Commit, so its fields are the rewrite's alone.
func (rw *Rewrite) newOutput(base int64) (*segment, error) {
	dir := rw.l.dir
	// O_TRUNC: a leftover of an abort that could not clean up is stale.
	f, err := os.OpenFile(cleanedName(dir, base, logSuffix), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("segment: rewriting %s: %w", dir, err)
	}
	s := &segment{base: base, dir: dir, f: f}
	s.refs.Store(1)
	s.ix.install(newIndexer(base, rw.interval))
	s.ix.end = math.MaxInt64
	s.ix.maxTsRecord = -1 // found lazily: the records were not walked
	rw.outs = append(rw.outs, s)
	rw.open = true
	return s, nil
}

// OutputBytes is the size of the current output segment so far.
func (rw *Rewrite) OutputBytes() int64 {
	if s := rw.current(); s != nil {
		return s.size
	}
	return 0
}

// Cut ends the current output segment: the next Append starts a new one at
// its batch's base offset. A no-op while the current output is empty.
func (rw *Rewrite) Cut() error {
	if rw.done {
		return fmt.Errorf("segment: cutting a rewrite of %s that has ended", rw.l.dir)
	}
	s := rw.current()
	if s == nil || s.size == 0 {
		return nil
	}
	return rw.seal()
}

// seal makes the current output durable: its .log and both indexes,
// sealed as a rolled segment is (docs/format.md §8).
func (rw *Rewrite) seal() error {
	s := rw.current()
	rw.open = false
	s.ix.maybeAddTime()
	dir := rw.l.dir
	// A failed write may have left bytes past the last whole batch.
	err := s.f.Truncate(s.size)
	if err == nil {
		err = s.f.Sync()
	}
	if err == nil {
		err = writeFileAtomic(cleanedName(dir, s.base, indexSuffix), encodeOffsets(nil, s.ix.offsets))
	}
	if err == nil {
		err = writeFileAtomic(cleanedName(dir, s.base, timeIndexSuffix), encodeTimes(nil, s.ix.times))
	}
	if err != nil {
		return fmt.Errorf("segment: rewriting %s: sealing output %d: %w", dir, s.base, err)
	}
	s.ix.install(s.ix.indexer)
	return nil
}

// checkLocked reports ErrRewriteConflict unless the sources are still,
// unchanged, the segments of the log from `from` to `to`. Call it with
// Log.mu or Log.writeMu held.
func (rw *Rewrite) checkLocked() error {
	l := rw.l
	conflict := func(why string) error {
		return fmt.Errorf("%w: rewriting [%d, %d) of %s: %s", ErrRewriteConflict, rw.from, rw.to, l.dir, why)
	}
	if l.mu.closed {
		return conflict("the log was closed")
	}
	segs := l.mu.segs
	i := slices.Index(segs, rw.srcs[0])
	if i < 0 {
		return conflict("a source segment was deleted")
	}
	n := len(rw.srcs)
	// The segment at `to` still following the sources means no truncation
	// reached into them: truncation deletes every segment after its cut.
	if i+n >= len(segs) || !slices.Equal(segs[i:i+n], rw.srcs) || segs[i+n] != rw.next {
		return conflict("a source segment was truncated or deleted")
	}
	for k, s := range rw.srcs {
		if s.size != rw.sizes[k] {
			return conflict(fmt.Sprintf("segment %d changed size", s.base))
		}
	}
	return nil
}

// Commit swaps the outputs in place of the sources, atomically for readers
// and crash-safely on disk, and records cleanedTo (the offset below which
// the log is now compacted) and the log clock's now in the cleaner checkpoint in the same step. The first
// output starts at from (even if its first batch is later, or it holds no batch at all: an empty segment covering the range is kept so segment ranges stay contiguous).
// It returns ErrRewriteConflict if a source changed meanwhile.
func (rw *Rewrite) Commit(cleanedTo int64) error {
	if rw.done {
		return fmt.Errorf("segment: committing a rewrite of %s that has ended", rw.l.dir)
	}
	l := rw.l
	// Everything that takes time happens before writeMu: appends go on.
	if err := rw.sealAll(); err != nil {
		// Delete removing the directory fails the writes: a conflict.
		err = rw.explain(err)
		rw.Abort()
		return err
	}
	l.testPoint("outputs written")

	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := rw.checkLocked(); err != nil {
		rw.Abort()
		return err
	}
	if l.w.failed != nil {
		rw.Abort()
		return fmt.Errorf("segment: log %s failed earlier: %w", l.dir, l.w.failed)
	}
	// The time as the checkpoint file keeps it, so a restart reads the same.
	in := swapIntent{mark: cleanerMark{cleanedTo: cleanedTo, at: time.UnixMilli(l.now().UnixMilli())}}
	for _, s := range rw.srcs {
		in.srcs = append(in.srcs, s.base)
	}
	for _, s := range rw.outs {
		in.outs = append(in.outs, s.base)
	}

	// 1. The swap is recorded: from here Open finishes it.
	if err := writeFileAtomic(swapName(l.dir, rw.from), in.encode()); err != nil {
		err = fmt.Errorf("segment: rewriting %s: recording the swap: %w", l.dir, err)
		// The record may have reached the disk (a failed directory fsync):
		// the outputs it names go only once it is surely gone.
		if rerr := errors.Join(removeIfExists(swapName(l.dir, rw.from)), syncDir(l.dir)); rerr != nil {
			l.w.failed = errors.Join(err, rerr)
			rw.finish()
			return err
		}
		rw.Abort()
		return err
	}
	l.testPoint("swap recorded")

	// 2. A source sharing an output's name must never read or unlink the
	// output's files: a reader that still holds it scans its own
	// descriptor for positions, and whoever drops it leaves the names.
	for _, s := range rw.srcs {
		s.imu.Lock()
		s.ix.removed, s.ix.replaced = true, true
		s.imu.Unlock()
	}

	// 3. Files: outputs in, sources out, checkpoint.
	fail := func(err error) error {
		err = fmt.Errorf("segment: swapping rewritten segments [%d, %d) of %s: %w", rw.from, rw.to, l.dir, err)
		l.w.failed = err
		rw.finish()
		return err
	}
	if err := in.rollForward(l.dir, l.testPoint); err != nil {
		return fail(err)
	}

	// 4. Readers switch at once; those that pinned a source finish on it.
	for k, s := range rw.outs {
		end := rw.to
		if k+1 < len(rw.outs) {
			end = rw.outs[k+1].base
		}
		s.ix.end = end
	}
	var delta int64
	for _, s := range rw.outs {
		delta += s.size
	}
	for _, s := range rw.srcs {
		delta -= s.size
	}
	l.mu.Lock()
	segs := l.mu.segs
	i := slices.Index(segs, rw.srcs[0])
	l.mu.segs = slices.Concat(segs[:i], rw.outs, segs[i+len(rw.srcs):])
	l.mu.Unlock()
	l.size.Add(delta)
	l.cleaner.Store(&in.mark)
	rw.outs = nil // the log owns them now
	for _, s := range rw.srcs {
		s.release() // the log's reference; finish drops the rewrite's
	}

	// 5. The swap is done.
	if err := removeIfExists(swapName(l.dir, rw.from)); err != nil {
		return fail(err)
	}
	if err := syncDir(l.dir); err != nil {
		return fail(err)
	}
	l.logger.Info("rewrote segments", "dir", l.dir, "from", rw.from, "to", rw.to,
		"sources", len(in.srcs), "outputs", len(in.outs), "bytesFreed", -delta, "cleanedTo", cleanedTo)
	l.testPoint("done")
	rw.finish()
	return nil
}

// sealAll makes every output durable, creating the first one if the
// rewrite kept nothing, and their names too.
func (rw *Rewrite) sealAll() error {
	if len(rw.outs) == 0 {
		if _, err := rw.newOutput(rw.from); err != nil {
			return err
		}
	}
	if rw.open {
		if err := rw.seal(); err != nil {
			return err
		}
	}
	if err := rw.writeTxnIndexes(); err != nil {
		return err
	}
	// The outputs' names are durable before the swap that names them.
	return syncDir(rw.l.dir)
}

// finish lets go of the sources and of outputs the log did not take.
func (rw *Rewrite) finish() {
	rw.done = true
	for _, s := range rw.outs {
		s.release()
	}
	rw.outs = nil
	for _, s := range rw.srcs {
		s.rewriting.Store(false)
		s.release()
	}
}

// Abort discards the outputs and lets go of the sources. A no-op after Commit; safe to call twice (defer it).
func (rw *Rewrite) Abort() {
	if rw.done {
		return
	}
	for _, s := range rw.outs {
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
			if err := removeIfExists(cleanedName(rw.l.dir, s.base, suffix)); err != nil {
				// Open removes what is left: no swap names it.
				rw.l.logger.Warn("removing an abandoned rewrite output", "dir", rw.l.dir, "err", err)
			}
		}
	}
	rw.finish()
}

// ActiveBase returns the active segment's base offset (the compactor never
// touches it); the log end offset once the log is closed.
func (l *Log) ActiveBase() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.mu.segs) == 0 {
		return l.mu.end
	}
	return l.active().base
}

// TieredOffset returns what SetTieredOffset last set (segments wholly below it are safe in the bucket).
func (l *Log) TieredOffset() int64 {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return l.w.tiered
}

// The swap intent (docs/format.md §13), <from>.swap: magic "SWP1", the
// cleaner checkpoint to record (offset int64, time in Unix ms int64), the
// number of sources (uint32) and their bases (int64 each), the number of
// outputs and their bases, and a CRC-32C of everything before it.
var swapMagic = [4]byte{'S', 'W', 'P', '1'}

type swapIntent struct {
	mark       cleanerMark
	srcs, outs []int64
}

func swapName(dir string, from int64) string { return offsetName(dir, from, swapSuffix) }

func (in *swapIntent) encode() []byte {
	b := append([]byte(nil), swapMagic[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(in.mark.cleanedTo))
	b = binary.BigEndian.AppendUint64(b, uint64(in.mark.at.UnixMilli()))
	for _, list := range [][]int64{in.srcs, in.outs} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(list)))
		for _, off := range list {
			b = binary.BigEndian.AppendUint64(b, uint64(off))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeSwap(b []byte) (swapIntent, bool) {
	var in swapIntent
	if len(b) < 4+16+4+4+4 || [4]byte(b[:4]) != swapMagic ||
		binary.BigEndian.Uint32(b[len(b)-4:]) != crc32.Checksum(b[:len(b)-4], castagnoli) {
		return in, false
	}
	in.mark.cleanedTo = int64(binary.BigEndian.Uint64(b[4:]))
	in.mark.at = time.UnixMilli(int64(binary.BigEndian.Uint64(b[12:])))
	p, body := 20, b[:len(b)-4]
	for _, list := range []*[]int64{&in.srcs, &in.outs} {
		if len(body)-p < 4 {
			return in, false
		}
		n := int(binary.BigEndian.Uint32(body[p:]))
		p += 4
		if n == 0 || (len(body)-p)/8 < n {
			return in, false
		}
		for range n {
			*list = append(*list, int64(binary.BigEndian.Uint64(body[p:])))
			p += 8
		}
	}
	return in, p == len(body)
}

// rollForward does the swap's file steps; each is a no-op when a crash
// let it happen already, so recovery repeats them all. point marks the
// steps for crash tests.
func (in *swapIntent) rollForward(dir string, point func(string)) error {
	// Outputs in: the indexes first and the .log last, so a .log.cleaned
	// still there means this output is not in place yet.
	for _, base := range in.outs {
		if !fileExists(cleanedName(dir, base, logSuffix)) {
			continue
		}
		for _, suffix := range []string{indexSuffix, timeIndexSuffix, txnIndexSuffix, logSuffix} {
			err := os.Rename(cleanedName(dir, base, suffix), offsetName(dir, base, suffix))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			point("output renamed")
		}
	}
	// Sources out, but those an output took the place of, and only once
	// every output is surely in: a swap that lost an output (damage, or an
	// outside hand) must not take the old data with it.
	for _, base := range in.outs {
		if !fileExists(offsetName(dir, base, logSuffix)) {
			return fmt.Errorf("the swap's new segment %d is missing: remove the partition directory or restore the file", base)
		}
	}
	for _, base := range in.srcs {
		if slices.Contains(in.outs, base) {
			continue
		}
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix, txnIndexSuffix} {
			if err := removeIfExists(offsetName(dir, base, suffix)); err != nil {
				return err
			}
		}
		point("source removed")
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := writeCleaner(dir, in.mark); err != nil {
		return err
	}
	point("checkpoint written")
	return nil
}

// finishRewrite completes a swap that a crash interrupted and deletes
// the outputs of rewrites that never recorded one, before Open looks at
// the segments (docs/format.md §10 step 1).
func finishRewrite(dir string) (finished, discarded int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		_, suffix, ok := parseOffsetName(e.Name())
		if !ok || suffix != swapSuffix {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return finished, 0, err
		}
		in, ok := decodeSwap(data)
		if !ok {
			// Written atomically, so this is damage: which segments are
			// the log's cannot be known.
			return finished, 0, fmt.Errorf("%s is unreadable: remove the partition directory or restore the file", path)
		}
		if err := in.rollForward(dir, func(string) {}); err != nil {
			return finished, 0, fmt.Errorf("finishing the swap in %s: %w", path, err)
		}
		if err := removeIfExists(path); err != nil {
			return finished, 0, err
		}
		finished++
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), cleanedSuffix) {
			continue
		}
		err := os.Remove(filepath.Join(dir, e.Name()))
		switch {
		case err == nil:
			discarded++
		case !errors.Is(err, fs.ErrNotExist): // renamed into place by a swap above
			return finished, discarded, err
		}
	}
	if finished+discarded > 0 {
		err = syncDir(dir)
	}
	return finished, discarded, err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
