package partition

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/segment"
	"strata/tier"
	"strata/tier/format"
)

// UploadPassTimeout bounds one partition's upload pass (its uploads,
// retention and merges): a pass that runs longer is cut short and
// retried.
const UploadPassTimeout = 5 * time.Minute

// partitionTier is what the tier's passes keep for one partition.
type partitionTier struct {
	// ctx is cancelled when the partition is dropped (its topic deleted
	// or moved away) or the node closes; uploads run under it.
	ctx  context.Context
	stop context.CancelFunc
	// mu is held for a whole upload pass of the partition. Once ctx is
	// cancelled, taking mu waits for the pass under way, and no pass
	// starts after that.
	mu sync.Mutex
	// manifest, under mu, is the manifest as of the last pass, nil when
	// it must be asked of the tier again (at first, and after a failure).
	// Keeping it lets a pass with nothing to upload skip the tier, and a
	// pass after a failure ask the tier again.
	manifest *format.Root
	// stale is set when the partition's leadership changes: another
	// broker may have published manifests since, so the next pass reads
	// the bucket's.
	stale atomic.Bool
}

// ErrRemoteUnknown answers reads and offset lookups of a tiered partition
// whose manifest could not be read yet (the store is down at start-up):
// retriable, so clients wait instead of being sent to the wrong offset.
var ErrRemoteUnknown = fmt.Errorf("%w: the partition's state in the object store is not loaded yet", kerr.KafkaStorageError)

// StopUploads stops the partition's uploads and returns once none is under
// way, so that nothing of it reaches the bucket after its local log or its
// bucket objects are deleted.
func (p *Partition) StopUploads() {
	if p.tier.stop == nil {
		return
	}
	p.tier.stop()
	p.HoldUploads()()
}

// HoldUploads waits for the upload pass under way, if any, and holds off
// the next one until release is called.
func (p *Partition) HoldUploads() (release func()) {
	p.tier.mu.Lock()
	return p.tier.mu.Unlock
}

// BucketName names the partition in the bucket.
func (p *Partition) BucketName() format.TopicPartition {
	return format.TopicPartition{Topic: p.topic, TopicID: p.topicID, Partition: p.index}
}

// Tiered reports whether the partition's topic goes to the cold tier
// (never without one: the node's topic settings see to that).
func (p *Partition) Tiered() bool {
	return p.settings.Load().Log.Tiered
}

// Upload is the partition's upload pass: a leader copies its closed
// segments to the bucket (upload), a follower follows the manifest its
// leader publishes (followRemote). asLeader says which it ran: the role
// as it stood when the pass began, which the pass's errors are about.
func (p *Partition) Upload() (asLeader bool, err error) {
	if p.source != nil {
		return false, nil // a read replica uploads nothing
	}
	if !p.leading.Load() {
		// Only the leader uploads; a follower follows the bucket's
		// manifest, so that its local retention deletes only what is
		// safely there.
		return false, p.followRemote()
	}
	if !p.remoteKnown.Load() {
		// Its manifest could not be read at open, or its log had to
		// restart at the bucket's end and could not yet.
		p.LoadRemote()
	}
	err = p.upload()
	if errors.Is(err, tier.ErrFenced) {
		// Deposed without knowing it yet: the newer leader's manifest
		// is current; the next pass reads the bucket again.
		p.tier.stale.Store(true)
	}
	return true, err
}

// Dropped reports whether the partition was dropped or its node closed:
// an upload error then is not one to report.
func (p *Partition) Dropped() bool { return p.tier.ctx.Err() != nil }

// UploadContext is the context the partition's work on the bucket runs
// under: it ends when the partition is dropped or the node closes.
func (p *Partition) UploadContext() context.Context { return p.tier.ctx }

// upload copies every closed segment that is wholly below the last stable
// offset and not yet in the bucket, oldest first; after each one the
// manifest is published and only then may local retention delete the
// local copy. Below the last stable offset, as Kafka's RemoteLogManager
// bounds its copies: a segment holding a transaction still open would
// reach the bucket, local retention would delete it, and read_committed
// readers would meet it there without the abort that follows.
func (p *Partition) upload() error {
	b := p.host.Bucket
	p.tier.mu.Lock()
	defer p.tier.mu.Unlock()
	if p.tier.ctx.Err() != nil {
		return nil // dropped: see StopUploads
	}
	// The whole pass publishes under the leader epoch it starts in, and
	// stops between steps once this node no longer leads at it: a
	// deposed leader's late manifests then carry its old epoch, which the
	// new leader's manifests fence (docs/bucket-format.md §3).
	epoch, leads := p.LeaderEpochIfLeading()
	if !leads {
		return nil
	}
	ctx, cancel := context.WithTimeout(p.tier.ctx, UploadPassTimeout)
	defer cancel()
	tp := p.BucketName()
	m := p.tier.manifest
	p.tier.manifest = nil // until this pass succeeds
	if p.tier.stale.Swap(false) {
		m = nil
		var err error
		if m, err = b.Refresh(ctx, tp); err != nil {
			p.tier.stale.Store(true)
			return err
		}
		// A new leadership claims the manifest at once, not at its
		// first change, so that the deposed leader's writers and
		// collector are fenced from now on.
		if err := b.Claim(ctx, tp, epoch); err != nil {
			p.tier.stale.Store(true)
			return err
		}
		if m, err = b.Manifest(ctx, tp); err != nil {
			return err
		}
	}
	if m == nil {
		var err error
		if m, err = b.Manifest(ctx, tp); err != nil {
			return err
		}
	}
	p.SetRemote(m)
	if _, err := p.log.RollIfOlder(p.host.IdleUpload); err != nil {
		return fmt.Errorf("roll idle segment: %w", err)
	}
	segs, err := p.log.ClosedSegments(m.EndOffset())
	if err != nil {
		return err
	}
	stable := p.LastStableOffset()
	for _, seg := range segs {
		if seg.EndOffset > stable {
			break // only committed data, no open transaction, goes up
		}
		// A segment that starts below the bucket's end (this replica rolls
		// at other offsets than the one that uploaded before) goes up from
		// the bucket's end; one that starts above it would leave a gap.
		if !m.Empty() && seg.BaseOffset > m.EndOffset() {
			return fmt.Errorf("local segment %d does not follow the bucket's end %d", seg.BaseOffset, m.EndOffset())
		}
		start := time.Now()
		if !p.LeadsAt(epoch) {
			return nil
		}
		m, err = b.Upload(ctx, tp, seg, epoch)
		if err != nil {
			return err
		}
		p.SetRemote(m)
		// The previous manifest is superseded: the collector will have it.
		p.host.Dropped(tp)
		p.host.Metrics.Uploads.Inc()
		p.host.Metrics.UploadBytes.Add(float64(seg.Size))
		p.host.Metrics.UploadSeconds.Observe(time.Since(start).Seconds())
	}
	if !p.LeadsAt(epoch) {
		return nil
	}
	m, err = p.applyRetention(ctx, m, epoch)
	if err != nil {
		return err
	}
	if !p.LeadsAt(epoch) {
		return nil
	}
	if m, err = p.mergeSmall(ctx, m, epoch); err != nil {
		return err
	}
	p.tier.manifest = m
	if err := p.log.Maintain(); err != nil {
		return fmt.Errorf("local retention: %w", err)
	}
	return nil
}

// followRemote is a follower's upload pass: it reads the manifest its
// leader publishes and applies local retention below it.
func (p *Partition) followRemote() error {
	p.tier.mu.Lock()
	defer p.tier.mu.Unlock()
	if p.tier.ctx.Err() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(p.tier.ctx, time.Minute)
	defer cancel()
	m, err := p.host.Bucket.Refresh(ctx, p.BucketName())
	if err != nil {
		return err
	}
	p.tier.manifest = m
	p.tier.stale.Store(true) // should it lead next, it reads the bucket again
	p.SetRemote(m)
	if err := p.log.Maintain(); err != nil {
		return fmt.Errorf("local retention: %w", err)
	}
	return nil
}

// mergesPerPass bounds the merges of small remote segments an upload pass
// makes per partition, so that a backlog of them (a quiet partition's
// year of idle uploads) is worked off without holding uploads back.
const mergesPerPass = 4

// mergeSmall merges adjacent small remote segments (below half of
// segment.bytes, as idle uploads make them) into objects of up to
// segment.bytes, and returns the manifest after.
func (p *Partition) mergeSmall(ctx context.Context, m *format.Root, epoch int32) (*format.Root, error) {
	if m.Empty() || p.settings.Load().Compaction != nil {
		// Compaction writes its objects up to segment.bytes, merging the
		// small ones on the way; a merge under a pass would only make the
		// pass's replacement fail.
		return m, nil
	}
	merge := tier.Merge{SegmentBytes: p.settings.Load().Log.SegmentBytes, LeaderEpoch: epoch, Max: mergesPerPass}
	n, err := p.host.Bucket.MergeSmall(ctx, p.BucketName(), merge)
	if n == 0 {
		return m, err
	}
	// The replaced objects are the collector's after the grace.
	p.host.Dropped(p.BucketName())
	if m, err = p.host.Bucket.Manifest(ctx, p.BucketName()); err != nil {
		return nil, err
	}
	p.SetRemote(m)
	return m, nil
}

// applyRetention enforces retention.bytes and retention.ms on the whole
// log of a tiered partition: the bucket's oldest segments go first (the
// manifest's log start moves; the objects follow after the orphan grace).
//
// It returns the manifest that holds afterwards.
func (p *Partition) applyRetention(ctx context.Context, m *format.Root, epoch int32) (*format.Root, error) {
	if m.Empty() {
		return m, nil
	}
	cfg := p.settings.Load().Log
	r := tier.Retention{Bytes: cfg.RetentionBytes, Age: cfg.RetentionMs, LeaderEpoch: epoch}
	if r.Bytes < 0 && r.Age < 0 {
		return m, nil
	}
	if r.Bytes >= 0 {
		// The local bytes count toward the size bound only: listing the
		// closed segments (which loads their indexes) is skipped without
		// one.
		local := p.log.Size()
		segs, err := p.log.ClosedSegments(0)
		if err != nil {
			return nil, err
		}
		for _, s := range segs {
			if s.EndOffset <= m.EndOffset() {
				local -= s.Size // in the bucket too: counted there
			}
		}
		r.LocalBytes = max(local, 0)
	}
	start, err := p.host.Bucket.ApplyRetention(ctx, p.BucketName(), r)
	if err != nil {
		return nil, err
	}
	if start != m.LogStartOffset {
		// Segments left the manifest: theirs to delete after the grace.
		p.host.Dropped(p.BucketName())
		m, err = p.host.Bucket.Manifest(ctx, p.BucketName())
		if err != nil {
			return nil, err
		}
		p.SetRemote(m)
	}
	return m, nil
}

// SetRemote records what the bucket holds, and tells the log that
// everything below its end may go under local retention. A leader whose
// log ends below the bucket's end stays unknown (no reads, no appends)
// until startAtBucketEnd has restarted its log there.
func (p *Partition) SetRemote(m *format.Root) {
	defer func() {
		if !p.leading.Load() || p.log.EndOffset() >= m.EndOffset() {
			p.remoteKnown.Store(true)
		}
	}()
	p.uploadedEnd.Store(m.EndOffset())
	// The bucket's log start is the partition's (DeleteRecords and
	// retention publish it there first): a follower whose fetches have
	// not moved its own start that far yet (its cap, see
	// followerLogStartBound, waits for this manifest), or a new leader
	// that was such a follower, must not serve the records below it. A
	// failure leaves the start where it was; the next manifest read
	// tries again.
	if ls := m.LogStartOffset; ls > p.log.StartOffset() {
		_, _ = p.log.DeleteRecordsBefore(min(ls, p.log.EndOffset()))
	}
	if m.Empty() {
		p.remoteStart.Store(-1)
		p.remoteEnd.Store(-1)
		return
	}
	p.remoteStart.Store(m.LogStartOffset)
	p.remoteEnd.Store(m.EndOffset())
	p.log.SetTieredOffset(m.EndOffset())
}

// LoadRemote reads the partition's manifest, so that its log start is
// right. It holds the upload lock, so that a manifest it read never
// replaces a newer one an upload has just published.
func (p *Partition) LoadRemote() {
	p.tier.mu.Lock()
	defer p.tier.mu.Unlock()
	if p.tier.ctx.Err() != nil || p.remoteKnown.Load() {
		return // dropped, or the upload loop got there first
	}
	ctx, cancel := context.WithTimeout(p.tier.ctx, 10*time.Second)
	defer cancel()
	m, err := p.host.Bucket.Manifest(ctx, p.BucketName())
	if err != nil {
		if p.tier.ctx.Err() == nil {
			p.host.Logger.Warn("load manifest", "topic", p.topic, "partition", p.index, "err", err)
		}
		return
	}
	if err := p.startAtBucketEnd(ctx, m); err != nil {
		if p.tier.ctx.Err() == nil {
			p.host.Logger.Warn("restart local log at the bucket's end", "topic", p.topic, "partition", p.index, "err", err)
		}
		return
	}
	p.tier.manifest = m
	p.SetRemote(m)
}

// SetRemoteKnown marks a partition that does not tier as knowing all
// there is to know of the bucket: nothing.
func (p *Partition) SetRemoteKnown() { p.remoteKnown.Store(true) }

// CheckRemoteKnown fails requests that need the log start of a tiered
// partition whose manifest is not loaded.
func (p *Partition) CheckRemoteKnown() error {
	if p.source != nil {
		if !p.source.known.Load() {
			return ErrRemoteUnknown
		}
		return nil
	}
	if !p.remoteKnown.Load() && p.Tiered() {
		return ErrRemoteUnknown
	}
	return nil
}

// LogStartOffset is the first offset a consumer can read, locally or from
// the bucket.
func (p *Partition) LogStartOffset() int64 {
	local := p.log.StartOffset()
	if rs := p.remoteStart.Load(); rs >= 0 && rs < local {
		return rs
	}
	return local
}

// ReadRemote serves a fetch below the local log start from the bucket,
// batches based below maxOffset only.
func (p *Partition) ReadRemote(dst []byte, offset, maxOffset int64, maxBytes int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(p.host.Context, 30*time.Second)
	defer cancel()
	n := len(dst)
	b, name := p.remote()
	var out []byte
	var err error
	if p.source != nil {
		out, err = p.readSource(ctx, b, name, dst, offset, maxOffset, maxBytes)
	} else {
		out, err = b.ReadBelow(ctx, name, dst, offset, maxOffset, maxBytes)
	}
	p.host.Metrics.ReadBytes.Add(float64(len(out) - n))
	return out, StorageError(err)
}

// ReadAt reads batches at offset based below limit (the high watermark,
// or the last stable offset for read_committed), from the local log or,
// below the local log start, from the bucket.
func (p *Partition) ReadAt(dst []byte, offset, limit int64, maxBytes int) ([]byte, error) {
	if offset < p.log.StartOffset() {
		if err := p.CheckRemoteKnown(); err != nil {
			return dst, err
		}
	}
	out, err := p.log.Read(dst, offset, limit, maxBytes)
	if err != nil && errors.Is(err, segment.ErrOffsetOutOfRange) && p.hasRemote() && offset < p.log.StartOffset() && p.remoteEnd.Load() > offset {
		out, err = p.ReadRemote(dst, offset, limit, maxBytes)
		if err == nil && len(out) == len(dst) {
			// Compaction left nothing in the bucket from offset on (or
			// nothing below limit): the next record is the first one on
			// local disk, if it is below limit.
			return p.log.Read(dst, p.log.StartOffset(), limit, maxBytes)
		}
	}
	return out, err
}

// StorageError marks a failure to reach the object store as
// KAFKA_STORAGE_ERROR, which clients retry; out-of-range and corruption
// keep their own meaning. It is applied at the tier boundary, the one place
// that knows an error came from the store.
func StorageError(err error) error {
	if err == nil || errors.Is(err, segment.ErrOffsetOutOfRange) || errors.Is(err, segment.ErrCorruptSegment) {
		return err
	}
	return fmt.Errorf("%w: %w", kerr.KafkaStorageError, err)
}

// hasRemote reports whether reads below the local log may go to a bucket.
func (p *Partition) hasRemote() bool {
	b, _ := p.remote()
	return b != nil
}
