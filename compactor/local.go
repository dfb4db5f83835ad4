package compactor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"strata/segment"
)

// LocalPartition is a compacted partition with a log on this node. Every
// replica compacts its own log, as in Kafka.
type LocalPartition struct {
	Topic     string
	Partition int32
	Log       *segment.Log
	// HighWatermark bounds the pass: records at or above it are not yet
	// committed and may still be truncated away.
	HighWatermark func() int64
	// Tiered confines the pass to segments already in the bucket, which
	// uploads no longer read.
	Tiered bool
	Policy Policy
}

func (p *LocalPartition) name() string { return fmt.Sprintf("%s-%d", p.Topic, p.Partition) }

// plan is what a partition's check found: the cleanable section and how
// dirty it is.
type plan struct {
	start      int64 // base of the first segment (local) or the log start (cold)
	firstDirty int64
	// cleanEnd is where the cleanable section ends: a segment boundary
	// below which everything is closed, committed, older than the
	// minimum lag, and below the first unstable offset (every transaction
	// there decided).
	cleanEnd     int64
	clean, dirty int64 // bytes
	// overdue is set when a dirty record is older than max.compaction.lag.
	overdue bool
	// lastPass is when the last pass was recorded (cleaner checkpoint or
	// manifest), zero if never.
	lastPass time.Time
	// end is where the log's closed section ends: the active segment's
	// base locally, the manifest's end offset in the bucket.
	end int64
}

func (p plan) ratio() float64 {
	if p.clean+p.dirty == 0 {
		return 0
	}
	return float64(p.dirty) / float64(p.clean+p.dirty)
}

// localPlan finds the cleanable section of p's log.
func localPlan(p *LocalPartition, now time.Time) (plan, []segment.SegmentInfo, error) {
	log := p.Log
	segs, err := log.ClosedSegments(0)
	if err != nil || len(segs) == 0 {
		return plan{}, nil, err
	}
	cleaned, at := log.CleanerCheckpoint()
	pl := plan{start: segs[0].BaseOffset, firstDirty: max(cleaned, log.StartOffset(), segs[0].BaseOffset), lastPass: at}
	pl.cleanEnd = pl.start
	pl.end = log.ActiveBase()
	end := min(pl.end, p.HighWatermark())
	if p.Tiered {
		end = min(end, log.TieredOffset())
	}
	// Records of a transaction still open are neither judged nor
	// removed: its outcome decides whether they count at all. Nor are
	// those of one whose marker the replicas may not all have yet.
	if fuo, ok := log.FirstUnstableOffsetBelow(p.HighWatermark()); ok {
		end = min(end, fuo)
	}
	var cleanable []segment.SegmentInfo
	for i, s := range segs {
		if s.EndOffset > end || (p.Policy.MinLag > 0 && s.MaxTimestamp > now.Add(-p.Policy.MinLag).UnixMilli()) {
			break
		}
		cleanable = segs[:i+1]
		pl.cleanEnd = s.EndOffset
		if s.EndOffset <= pl.firstDirty {
			pl.clean += s.Size
			continue
		}
		if pl.dirty == 0 && p.Policy.MaxLag > 0 {
			if ts, ok := firstTimestamp(s.LogPath); ok && ts < now.Add(-p.Policy.MaxLag).UnixMilli() {
				pl.overdue = true
			}
		}
		pl.dirty += s.Size
	}
	return pl, cleanable, nil
}

// firstTimestamp reads the timestamp of a segment file's first batch: the
// age of the oldest dirty record, which max.compaction.lag.ms bounds.
func firstTimestamp(path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var b [61]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return 0, false
	}
	h, err := segment.ParseBatchHeader(b[:])
	if err != nil {
		return 0, false
	}
	// A stamped delete horizon takes the first timestamp's place.
	if _, ok := h.DeleteHorizon(); ok || h.FirstTimestamp < 0 {
		return h.MaxTimestamp, h.MaxTimestamp >= 0
	}
	return h.FirstTimestamp, true
}

// compactLocal runs one pass over p's log.
func (c *Compactor) compactLocal(ctx context.Context, m *keyMap, p *LocalPartition, pl plan, segs []segment.SegmentInfo) (Stats, error) {
	log := p.Log
	now := c.cfg.Now()
	aborted := log.AbortedTransactions(pl.start, pl.cleanEnd)
	cl := newCleaning(m, pl.start, pl.firstDirty, now, p.Policy, log.ProducerLastOffsets(), aborted)
	cl.expire = !p.Tiered

	// Step 1: the key map, from the segment holding firstDirty.
	mapFrom := pl.start
	for _, s := range segs {
		if s.EndOffset > pl.firstDirty {
			mapFrom = s.BaseOffset
			break
		}
	}
	if pl.firstDirty < pl.cleanEnd {
		rw, err := log.BeginRewrite(mapFrom, pl.cleanEnd)
		if err != nil {
			return cl.stats, err
		}
		err = rw.Scan(pl.firstDirty, func(batch []byte) error {
			if err := c.throttle(ctx, len(batch)); err != nil {
				return err
			}
			cl.stats.BytesRead += int64(len(batch))
			if err := cl.mapBatch(batch); err != nil {
				if errors.Is(err, errStopMap) {
					return segment.ErrStopScan
				}
				return err
			}
			return nil
		})
		rw.Abort()
		if err != nil {
			return cl.stats, fmt.Errorf("map keys of %s: %w", p.name(), err)
		}
		if cl.mapEnd == pl.firstDirty {
			return cl.stats, fmt.Errorf("map keys of %s: the first batch at %d does not fit in %d keys (raise compactor memory)", p.name(), pl.firstDirty, m.limit)
		}
	}
	cl.stats.Doubtful = m.doubtful

	// Step 2: rewrite from the first segment up to the one holding
	// mapEnd-1 (or just the clean section, when only tombstones are due).
	to := pl.start
	for _, s := range segs {
		to = s.EndOffset
		if s.EndOffset >= cl.mapEnd {
			break
		}
	}
	if to == pl.end {
		cl.keepLast = to - 1
	}
	rw, err := log.BeginRewrite(pl.start, to)
	if err != nil {
		return cl.stats, err
	}
	defer rw.Abort()
	err = rw.Scan(pl.start, func(batch []byte) error {
		if err := c.throttle(ctx, len(batch)); err != nil {
			return err
		}
		cl.stats.BytesRead += int64(len(batch))
		out, err := cl.filter(batch)
		if err != nil || len(out) == 0 {
			return err
		}
		if n := rw.OutputBytes(); n > 0 && n+int64(len(out)) > p.Policy.SegmentBytes {
			if err := rw.Cut(); err != nil {
				return err
			}
		}
		if err := c.throttle(ctx, len(out)); err != nil {
			return err
		}
		return rw.Append(out)
	})
	if err != nil {
		return cl.stats, fmt.Errorf("rewrite %s [%d, %d): %w", p.name(), pl.start, to, err)
	}
	if err := c.pause(ctx, "local.before-commit"); err != nil {
		return cl.stats, err
	}
	// Step 3: swap, recording where the next pass's map starts.
	if err := rw.Commit(cl.cleanedTo()); err != nil {
		return cl.stats, fmt.Errorf("swap compacted segments of %s: %w", p.name(), err)
	}
	cl.stats.CleanedTo = cl.cleanedTo()
	c.noteTombstones(localKey(p.Topic, p.Partition), cl.horizonDue)
	return cl.stats, nil
}
