package compactor

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"strata/segment"
	"strata/tier/format"
)

// ColdPartition is a compacted, tiered partition this node leads: only
// the leader compacts the bucket's copy, under its leader epoch, so a
// leader change in the middle of a pass fences the pass's manifest
// change (tier.ErrFenced) and the manifest stays valid.
type ColdPartition struct {
	TP          format.TopicPartition
	LeaderEpoch int32
	Policy      Policy
	// FirstUnstableOffset, if set, is the leader's: where its earliest
	// open transaction begins (ok false: none). The bucket holds closed
	// segments only, but a transaction may be open across them; a pass
	// stops below it, as it does below what the newest object's producer
	// snapshot shows open.
	FirstUnstableOffset func() (int64, bool)
}

func (p *ColdPartition) name() string { return fmt.Sprintf("%s-%d", p.TP.Topic, p.TP.Partition) }

// coldPlan finds the cleanable section of p's history in the bucket.
func (c *Compactor) coldPlan(ctx context.Context, p *ColdPartition, now time.Time) (plan, []format.RemoteSegment, error) {
	root, err := c.tier.Manifest(ctx, p.TP)
	if err != nil {
		return plan{}, nil, err
	}
	all, err := c.tier.Segments(ctx, root)
	if err != nil {
		return plan{}, nil, err
	}
	var segs []format.RemoteSegment
	for _, s := range all {
		if s.LastOffset >= root.LogStartOffset {
			segs = append(segs, s)
		}
	}
	if len(segs) == 0 {
		return plan{}, nil, nil
	}
	pl := plan{start: segs[0].BaseOffset, firstDirty: max(root.LogStartOffset, root.CleanedOffset, segs[0].BaseOffset)}
	if root.LastCompactionMs > 0 {
		pl.lastPass = time.UnixMilli(root.LastCompactionMs)
	}
	pl.cleanEnd = pl.start
	pl.end = root.EndOffset()
	fuo, unstable := int64(0), false
	if p.FirstUnstableOffset != nil {
		fuo, unstable = p.FirstUnstableOffset()
	}
	n := 0
	for i, s := range segs {
		if p.Policy.MinLag > 0 && s.MaxTimestamp > now.Add(-p.Policy.MinLag).UnixMilli() {
			break
		}
		if unstable && s.LastOffset >= fuo {
			break
		}
		n = i + 1
		pl.cleanEnd = s.LastOffset + 1
		if s.LastOffset < pl.firstDirty {
			pl.clean += s.Log.Len
			continue
		}
		if pl.dirty == 0 && p.Policy.MaxLag > 0 && s.FirstTimestamp >= 0 && s.FirstTimestamp < now.Add(-p.Policy.MaxLag).UnixMilli() {
			pl.overdue = true
		}
		pl.dirty += s.Log.Len
	}
	return pl, segs[:n], nil
}

// compactCold runs one pass over p's history in the bucket. It reads each
// object once: the dirty objects go through the key map and into a spool
// file, from which step 2 reads them again; the clean ones are read in
// step 2 only. Each output segment is one PUT, and the outputs replace
// the inputs in one manifest change.
func (c *Compactor) compactCold(ctx context.Context, m *keyMap, p *ColdPartition, pl plan, segs []format.RemoteSegment) (st Stats, err error) {
	now := c.cfg.Now()
	gets0, puts0 := c.tier.RequestCounts()
	defer func() {
		gets, puts := c.tier.RequestCounts()
		st.Gets, st.Puts = gets-gets0, puts-puts0
	}()
	// Claimed before any output is written: from then on a deposed
	// leader's collector, which does not know of this pass, is fenced
	// rather than left to delete its outputs (and a pass by a deposed
	// leader is abandoned here, as ErrFenced).
	if err := c.tier.Claim(ctx, p.TP, p.LeaderEpoch); err != nil {
		return st, err
	}
	// The newest object's producer snapshot says which batches are their
	// producers' last (kept, empty if need be).
	var producers map[int64]int64
	snapEnd := segs[len(segs)-1].LastOffset // where snap was taken
	snap, err := c.tier.ProducerSnapshot(ctx, segs[len(segs)-1])
	if err != nil {
		return st, fmt.Errorf("producer snapshot of %s: %w", p.name(), err)
	}
	if len(snap) > 0 {
		if producers, err = segment.SnapshotLastOffsets(snap); err != nil {
			return st, fmt.Errorf("producer snapshot of %s: %w", p.name(), err)
		}
		// The bucket's own word on open transactions: nothing from the
		// earliest one still open at its newest object on is cleaned,
		// whatever the leader said (a transaction open there and decided
		// since has its marker above, outside the pass).
		fuo, open, err := segment.SnapshotFirstUnstable(snap)
		if err != nil {
			return st, fmt.Errorf("producer snapshot of %s: %w", p.name(), err)
		}
		if open {
			n := 0
			for n < len(segs) && segs[n].LastOffset < fuo {
				n++
			}
			if segs = segs[:n]; n == 0 {
				return st, nil
			}
			pl.cleanEnd = segs[n-1].LastOffset + 1
		}
	}
	aborted, err := c.tier.AbortedTransactions(ctx, p.TP, segs[0].BaseOffset, pl.cleanEnd)
	if err != nil {
		return st, fmt.Errorf("aborted transactions of %s: %w", p.name(), err)
	}
	cl := newCleaning(m, segs[0].BaseOffset, pl.firstDirty, now, p.Policy, producers, aborted)

	spool, err := newSpool(c.cfg.SpoolDir)
	if err != nil {
		return cl.stats, err
	}
	defer spool.close()

	// Step 1: the key map over the dirty objects, which are spooled whole.
	last := -1 // index of the last segment to rewrite
	for i, s := range segs {
		if s.LastOffset < pl.firstDirty {
			last = i
			continue
		}
		full := false
		err := c.tier.ReadLog(ctx, s, c.cfg.ChunkBytes, func(batch []byte) error {
			if err := spool.write(batch); err != nil {
				return err
			}
			cl.stats.BytesRead += int64(len(batch))
			if full {
				return nil
			}
			if spool.n >= c.cfg.SpoolBytes {
				// The spool bounds local disk as the map bounds memory:
				// the rest waits for the next pass.
				full = true
				return nil
			}
			if err := cl.mapBatch(batch); err != nil {
				if !errors.Is(err, errStopMap) {
					return err
				}
				full = true
			}
			return nil
		})
		if err != nil {
			return cl.stats, fmt.Errorf("map keys of %s: %w", p.name(), err)
		}
		last = i
		if full {
			break
		}
	}
	if pl.firstDirty < pl.cleanEnd && cl.mapEnd == pl.firstDirty {
		return cl.stats, fmt.Errorf("map keys of %s: the first batch at %d does not fit in %d keys (raise compactor memory)", p.name(), pl.firstDirty, m.limit)
	}
	if last < 0 {
		return cl.stats, nil
	}
	cl.stats.Doubtful = m.doubtful
	if segs[last].LastOffset+1 == pl.end {
		cl.keepLast = pl.end - 1
	}
	if err := spool.rewind(); err != nil {
		return cl.stats, err
	}

	// Step 2: filter segs[:last+1] into new objects of up to segment.bytes.
	var outs []format.RemoteSegment
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	w, wBase := c.tier.NewSegmentWriter(p.TP, segs[0].BaseOffset, p.LeaderEpoch), segs[0].BaseOffset
	defer func() { w.Discard() }() // after Finish, a no-op
	// finish PUTs the current output, covering offsets up to lastOffset,
	// and starts the next right after it.
	// markers holds the offsets of the markers written with their
	// record, ascending: an output's aborted-transaction index part lists
	// the aborts whose marker it holds, as a local segment's .txnindex
	// does, and never one whose marker the pass removed (a read_committed
	// reader would skip the producer's later batches).
	var markers []int64
	finish := func(lastOffset int64, snap []byte) error {
		var held []segment.AbortedTxn
		for _, a := range aborted {
			if _, ok := slices.BinarySearch(markers, a.LastOffset); ok && a.LastOffset >= wBase && a.LastOffset <= lastOffset {
				held = append(held, a)
			}
		}
		w.SetAborted(held)
		seg, release, err := w.Finish(ctx, lastOffset, snap)
		if err != nil {
			return err
		}
		outs, releases = append(outs, seg), append(releases, release)
		w, wBase = c.tier.NewSegmentWriter(p.TP, lastOffset+1, p.LeaderEpoch), lastOffset+1
		return nil
	}
	emit := func(batch []byte) error {
		out, err := cl.filter(batch)
		if err != nil || len(out) == 0 {
			return err
		}
		h, err := segment.ParseBatchHeader(out)
		if err != nil {
			return err
		}
		if h.IsControl() && h.NumRecords > 0 {
			markers = append(markers, h.LastOffset())
		}
		if n := w.Bytes(); n > 0 && n+int64(len(out)) > p.Policy.SegmentBytes {
			if err := finish(h.BaseOffset-1, nil); err != nil {
				return err
			}
		}
		// An object indexes offsets up to 2^31 past its base: a long gap
		// (a few keys over billions of offsets) takes empty objects.
		for h.LastOffset()-wBase > math.MaxInt32 {
			if err := finish(min(h.BaseOffset-1, wBase+math.MaxInt32), nil); err != nil {
				return err
			}
		}
		return w.Append(out)
	}
	for _, s := range segs[:last+1] {
		if s.LastOffset < pl.firstDirty {
			err = c.tier.ReadLog(ctx, s, c.cfg.ChunkBytes, func(batch []byte) error {
				cl.stats.BytesRead += int64(len(batch))
				return emit(batch)
			})
		} else {
			err = spool.each(s.LastOffset, emit)
		}
		if err != nil {
			return cl.stats, fmt.Errorf("rewrite %s: %w", p.name(), err)
		}
	}
	end := segs[last].LastOffset
	for end-wBase > math.MaxInt32 {
		if err := finish(wBase+math.MaxInt32, nil); err != nil {
			return cl.stats, fmt.Errorf("rewrite %s: %w", p.name(), err)
		}
	}
	if segs[last].LastOffset != snapEnd {
		if snap, err = c.tier.ProducerSnapshot(ctx, segs[last]); err != nil {
			return cl.stats, err
		}
	}
	if err := finish(end, snap); err != nil {
		return cl.stats, fmt.Errorf("rewrite %s: %w", p.name(), err)
	}
	if err := c.pause(ctx, "cold.after-put"); err != nil {
		return cl.stats, err
	}

	// Step 3: one manifest change swaps them in.
	if _, err := c.tier.ReplaceCompacted(ctx, p.TP, outs, p.LeaderEpoch, cl.cleanedTo(), now); err != nil {
		return cl.stats, fmt.Errorf("replace compacted segments of %s: %w", p.name(), err)
	}
	if err := c.pause(ctx, "cold.after-manifest"); err != nil {
		return cl.stats, err
	}
	cl.stats.CleanedTo = cl.cleanedTo()
	if c.cfg.OnReplaced != nil {
		c.cfg.OnReplaced(p.TP)
	}
	c.noteTombstones(coldKey(p.TP.Topic, p.TP.Partition), cl.horizonDue)
	return cl.stats, nil
}

// spool is a temporary file of whole batches, written in offset order and
// read back once.
type spool struct {
	n int64 // bytes written
	f *os.File
	w *bufio.Writer
	r *bufio.Reader
	// held is a batch read past the end of the segment being emitted,
	// which belongs to the next.
	held []byte
	buf  []byte
}

func newSpool(dir string) (*spool, error) {
	f, err := os.CreateTemp(dir, "cold-compaction-*.spool")
	if err != nil {
		return nil, fmt.Errorf("compactor spool: %w", err)
	}
	// Unlinked at once: a crash leaves nothing behind.
	os.Remove(f.Name())
	return &spool{f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (s *spool) write(batch []byte) error {
	n, err := s.w.Write(batch)
	s.n += int64(n)
	return err
}

func (s *spool) rewind() error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("compactor spool: %w", err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("compactor spool: %w", err)
	}
	s.r = bufio.NewReaderSize(s.f, 1<<20)
	return nil
}

// each calls fn with every spooled batch up to lastOffset.
func (s *spool) each(lastOffset int64, fn func([]byte) error) error {
	for {
		if s.held == nil {
			var hdr [12]byte
			if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
				if err == io.EOF {
					return nil
				}
				return fmt.Errorf("compactor spool: %w", err)
			}
			n := 12 + int(int32(binary.BigEndian.Uint32(hdr[8:])))
			if n < 61 {
				return fmt.Errorf("compactor spool: bad batch length %d", n)
			}
			s.buf = slices.Grow(s.buf[:0], n)[:n]
			copy(s.buf, hdr[:])
			if _, err := io.ReadFull(s.r, s.buf[12:]); err != nil {
				return fmt.Errorf("compactor spool: %w", err)
			}
			s.held = s.buf
		}
		if int64(binary.BigEndian.Uint64(s.held)) > lastOffset {
			return nil
		}
		b := s.held
		s.held = nil
		if err := fn(b); err != nil {
			return err
		}
	}
}

func (s *spool) close() { s.f.Close() }
