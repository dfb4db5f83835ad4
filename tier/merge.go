package tier

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"strata/segment"
	"strata/tier/format"
)

// Merge bounds the merging of small remote segments (MergeSmall).
type Merge struct {
	// SegmentBytes is the partition's segment.bytes: segments below half
	// of it are small, and a merged object holds up to SegmentBytes of
	// log.
	SegmentBytes int64
	// LeaderEpoch is the epoch of the merging leader; a manifest of a
	// higher epoch fences it (ErrFenced).
	LeaderEpoch int32
	// Max is the most merges one call makes (at least 1).
	Max int
}

// MergeSmall merges runs of adjacent small remote segments of tp into
// single objects, up to m.Max of them, and returns how many it made.
//
// Idle uploads make a quiet partition a segment every few minutes, each
// a few KB: 52,560 objects a year, each a GET to replay and a line in the
// manifest. A merged object holds the segments' log parts one after the
// other (offsets unchanged, batches byte for byte), their indexes shifted
// to its own base and position, their txn indexes one after the other
// (offsets unchanged, so every entry stays true) and the last one's
// producer snapshot. It
// replaces them in the manifest in one step (format.Root.Replace); the
// replaced objects stay for the orphan grace, for readers holding the
// previous manifest. A run changed meanwhile (retention took part of it)
// is left alone: the merged object becomes an orphan.
func (t *Tier) MergeSmall(ctx context.Context, tp format.TopicPartition, m Merge) (int, error) {
	if m.SegmentBytes <= 0 {
		return 0, nil
	}
	ps := t.state(tp)
	done := 0
	for done < max(m.Max, 1) {
		root, err := t.Manifest(ctx, tp)
		if err != nil {
			return done, err
		}
		run, err := t.smallRun(ctx, ps, root, m.SegmentBytes)
		if err != nil || len(run) < 2 {
			return done, err
		}
		if err := t.mergeRun(ctx, tp, ps, run, m.LeaderEpoch); err != nil {
			return done, err
		}
		done++
	}
	return done, nil
}

// smallRun returns the first run of two or more adjacent segments of root,
// at or above its log start and from ps's merge cursor on, each smaller
// than half of segmentBytes and together holding at most segmentBytes of
// log. The cursor moves past what cannot be merged, so that a pass does
// not read the whole history again; it stays at a small segment that ends
// the history, which the next uploads may join.
//
// A page whose segments average half of segmentBytes or more is skipped
// unread: merging is worth it where small segments are the rule (idle
// uploads), and a restart must not read a long history's every page to
// find the few small segments scattered in it.
func (t *Tier) smallRun(ctx context.Context, ps *partitionState, root *format.Root, segmentBytes int64) ([]format.RemoteSegment, error) {
	from := max(root.LogStartOffset, ps.mergeFrom.Load())
	var run []format.RemoteSegment
	var logBytes int64
	page := func(p *format.PageRef) (skip, more bool) {
		if p.Bytes/p.Segments < segmentBytes/2 {
			return false, true
		}
		if len(run) >= 2 {
			return true, false
		}
		run, logBytes = nil, 0
		ps.mergeFrom.Store(p.LastOffset + 1)
		return true, true
	}
	err := root.ScanPages(ctx, t.pages, from, page, func(s *format.RemoteSegment) (bool, error) {
		if s.BaseOffset < root.LogStartOffset {
			return true, nil
		}
		small := s.Size < segmentBytes/2
		if small && logBytes+s.Log.Len <= segmentBytes {
			run = append(run, *s)
			logBytes += s.Log.Len
			return true, nil
		}
		if len(run) >= 2 {
			return false, nil
		}
		// Nothing to merge before s: start again at s, or after it.
		run, logBytes = nil, 0
		if small {
			run, logBytes = append(run, *s), s.Log.Len
		} else {
			ps.mergeFrom.Store(s.LastOffset + 1)
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("find small segments: %w", err)
	}
	if len(run) == 1 {
		ps.mergeFrom.Store(run[0].BaseOffset)
	}
	return run, nil
}

// mergeRun writes the object that merges run, then replaces run with it
// in the manifest.
func (t *Tier) mergeRun(ctx context.Context, tp format.TopicPartition, ps *partitionState, run []format.RemoteSegment, epoch int32) error {
	var log, index, timeIndex, txnIndex bytes.Buffer
	first, last := run[0], run[len(run)-1]
	records, maxTs := int64(0), int64(-1)
	lastRel, lastTs := int64(-1), int64(-1)
	var snapshot []byte
	for _, s := range run {
		obj, err := t.getObject(ctx, s)
		if err != nil {
			return err
		}
		shift, pos := s.BaseOffset-first.BaseOffset, int64(log.Len())
		seglog := obj[s.Log.Offset:s.Log.End()]
		// An entry for the segment's first batch, so that a lookup in the
		// merged object never walks a previous segment's batches.
		if h, err := segment.ParseBatchHeader(seglog); err == nil {
			lastRel = appendIndexEntry(&index, h.LastOffset()-first.BaseOffset, pos, lastRel)
		}
		for b := obj[s.Index.Offset:s.Index.End()]; len(b) >= format.OffsetEntrySize; b = b[format.OffsetEntrySize:] {
			rel := int64(binary.BigEndian.Uint32(b)) + shift
			lastRel = appendIndexEntry(&index, rel, int64(binary.BigEndian.Uint32(b[4:]))+pos, lastRel)
		}
		// Time index entries hold the largest timestamp so far: across
		// segments, only the entries that raise it stay.
		for b := obj[s.TimeIndex.Offset:s.TimeIndex.End()]; len(b) >= format.TimeEntrySize; b = b[format.TimeEntrySize:] {
			ts := int64(binary.BigEndian.Uint64(b))
			if ts <= lastTs {
				continue
			}
			lastTs = ts
			timeIndex.Write(binary.BigEndian.AppendUint64(nil, uint64(ts)))
			timeIndex.Write(binary.BigEndian.AppendUint32(nil, uint32(int64(binary.BigEndian.Uint32(b[8:]))+shift)))
		}
		log.Write(seglog)
		snapshot = obj[s.ProducerSnapshot.Offset:s.ProducerSnapshot.End()]
		if s.TxnIndex.Present {
			txnIndex.Write(obj[s.TxnIndex.Offset:s.TxnIndex.End()])
		}
		if records >= 0 && s.RecordCount >= 0 {
			records += s.RecordCount
		} else {
			records = -1
		}
		maxTs = max(maxTs, s.MaxTimestamp)
	}
	var obj bytes.Buffer
	footer, crc, err := format.WriteSegmentObject(&obj, format.SegmentParts{
		Log: bytes.NewReader(log.Bytes()), LogSize: int64(log.Len()),
		Index: index.Bytes(), TimeIndex: timeIndex.Bytes(), ProducerSnapshot: snapshot,
		TxnIndex:   txnIndex.Bytes(),
		BaseOffset: first.BaseOffset, LastOffset: last.LastOffset,
		FirstTimestamp: first.FirstTimestamp, MaxTimestamp: maxTs, RecordCount: records, LeaderEpoch: epoch,
	})
	if err != nil {
		return fmt.Errorf("merge segments %d..%d of %s-%d: %w", first.BaseOffset, last.LastOffset, tp.Topic, tp.Partition, err)
	}
	key := format.SegmentKey{TopicPartition: tp, BaseOffset: first.BaseOffset, LeaderEpoch: epoch, UID: format.NewUID()}.String()
	merged := footer.Segment(key, crc)
	defer ps.hold(key)()
	if err := t.store.Put(ctx, key, bytes.NewReader(obj.Bytes()), int64(obj.Len())); err != nil {
		return fmt.Errorf("upload merged segment %d of %s-%d: %w", first.BaseOffset, tp.Topic, tp.Partition, err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	_, err = t.updateLocked(ctx, tp, ps, epoch, func(m *format.Root) (*format.Change, error) {
		return m.Replace(ctx, t.pages, []format.RemoteSegment{merged}, epoch, t.cfg.Paging)
	})
	if err != nil {
		return fmt.Errorf("merge segments %d..%d of %s-%d: %w", first.BaseOffset, last.LastOffset, tp.Topic, tp.Partition, err)
	}
	t.log.Debug("small segments merged", "topic", tp.Topic, "partition", tp.Partition, "base", first.BaseOffset, "last", last.LastOffset, "segments", len(run), "key", key)
	return nil
}

// appendIndexEntry appends the offset index entry (rel, pos) unless it does
// not come after the last one, and returns the last relative offset.
func appendIndexEntry(index *bytes.Buffer, rel, pos, lastRel int64) int64 {
	if rel <= lastRel {
		return lastRel
	}
	index.Write(binary.BigEndian.AppendUint32(nil, uint32(rel)))
	index.Write(binary.BigEndian.AppendUint32(nil, uint32(pos)))
	return rel
}

// getObject downloads a whole segment object and checks it against its
// manifest entry.
func (t *Tier) getObject(ctx context.Context, s format.RemoteSegment) ([]byte, error) {
	rc, err := t.store.GetRange(ctx, s.Key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", s.Key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, s.Size+1))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", s.Key, err)
	}
	if err := s.VerifyObject(bytes.NewReader(b)); err != nil {
		return nil, err
	}
	return b, nil
}
