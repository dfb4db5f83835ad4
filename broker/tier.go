package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/segment"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// TierConfig configures tiered storage. With a nil Store the broker keeps
// everything on local disk, as Kafka without tiered storage does.
type TierConfig struct {
	// Store is the object store closed segments go to (already prefixed
	// and decorated by the caller).
	Store objstore.Store
	// Where names the store in messages ("s3://b/prefix", a directory),
	// never with keys.
	Where string
	// ChunkBytes, MemoryBytes, CacheBytes, ReadAhead and ReadWorkers shape
	// remote reads (see tier.Config); zero takes the tier package's
	// defaults.
	ChunkBytes, MemoryBytes, CacheBytes int64
	ReadAhead, ReadWorkers              int
	// ManifestCacheBytes bounds the manifest pages held in memory, all
	// partitions together (tier.Config); zero takes the default.
	ManifestCacheBytes int64
	// UploadInterval is how often hosted partitions are checked for closed
	// segments to upload (default 1s).
	UploadInterval time.Duration
	// IdleUpload rolls an active segment older than this so a quiet
	// partition's data still reaches the bucket (default 10 minutes).
	IdleUpload time.Duration
	// OrphanGrace is how old an unreferenced object must be before the
	// collector deletes it (default 1 hour, at least MinOrphanGrace);
	// CollectInterval is how long one collection pass over the partitions
	// that need one is spread over (default 10 minutes).
	OrphanGrace, CollectInterval time.Duration
	// TestShortOrphanGrace accepts an OrphanGrace below MinOrphanGrace:
	// for tests only, which collect within seconds.
	TestShortOrphanGrace bool
	// Now is the clock of the orphan grace and of the collector's record
	// of when objects were dropped; nil is time.Now.
	Now func() time.Time
	// LocalDiskLimit: when the hosted logs exceed this many bytes (uploads
	// are behind, e.g. the store is down), produce fails with a retriable
	// error instead of filling the disk. Zero means no limit.
	LocalDiskLimit int64
}

func (c TierConfig) withDefaults() TierConfig {
	if c.UploadInterval <= 0 {
		c.UploadInterval = time.Second
	}
	if c.IdleUpload <= 0 {
		c.IdleUpload = 10 * time.Minute
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = time.Hour
	}
	if c.CollectInterval <= 0 {
		c.CollectInterval = 10 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// errDiskFull is returned to producers while uploads are behind and the
// local disk bound is crossed. KAFKA_STORAGE_ERROR is retriable: clients
// back off and try again, and nothing is lost.
var errDiskFull = fmt.Errorf("%w: local log bytes above the configured limit while uploads to the object store are behind", kerr.KafkaStorageError)

// claimTimeout bounds how long a start waits on the store for the
// bucket's claim (a GET, and a conditional PUT the first time): long
// enough for any store that answers, short enough that a silent one
// does not hold the start, which does not wait for the bucket otherwise.
const claimTimeout = 2 * time.Second

// tierWhere names the object store for messages.
func (b *Broker) tierWhere() string {
	if b.cfg.Tier.Where == "" {
		return "the object store"
	}
	return b.cfg.Tier.Where
}

// openTier starts the cold tier when a store is configured, for the
// cluster named id (empty when not named yet).
func (b *Broker) openTier(ctx context.Context, id string) error {
	if b.cfg.Tier.Store == nil {
		return nil
	}
	// The bucket is this cluster's, or becomes it: a bucket (or prefix)
	// another cluster uses holds topics whose ids mean nothing here. A
	// store that is down now does not stop the start (an outage is the
	// uploader's to wait out), nor does one that does not answer for
	// claimTimeout; the first write claims it then. Nor does a cluster
	// with no id yet: awaitClusterID gives the store the id once the
	// controller names the cluster, and nothing is written before.
	store := tier.NewClaimedStore(b.cfg.Tier.Store, format.Cluster{ClusterID: id, CreatedMs: time.Now().UnixMilli(), CreatedBy: b.cfg.NodeID})
	b.tierStore = store
	if id != "" {
		cctx, cancel := context.WithTimeout(ctx, claimTimeout)
		err := store.Claim(cctx)
		cancel()
		if err != nil {
			var foreign *tier.ForeignBucketError
			if errors.As(err, &foreign) {
				return fmt.Errorf("bucket %s belongs to cluster %s, not to this node's cluster %s: each cluster needs a bucket or prefix of its own",
					b.tierWhere(), foreign.Bucket, foreign.Cluster)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("claim bucket %s for cluster %s: %w", b.tierWhere(), id, err)
			}
			b.log.Warn("bucket not claimed yet: nothing is written to it until it is", "store", b.tierWhere(), "err", err)
		}
	}
	t, err := tier.Open(tier.Config{
		Store:              store,
		CacheDir:           filepath.Join(b.cfg.DataDir, "tier-cache"),
		ChunkBytes:         b.cfg.Tier.ChunkBytes,
		MemoryBytes:        b.cfg.Tier.MemoryBytes,
		CacheBytes:         b.cfg.Tier.CacheBytes,
		ReadAhead:          b.cfg.Tier.ReadAhead,
		ReadWorkers:        b.cfg.Tier.ReadWorkers,
		Logger:             b.log.With("component", "tier"),
		Now:                b.cfg.Tier.Now,
		ManifestCacheBytes: b.cfg.Tier.ManifestCacheBytes,
	})
	if err != nil {
		return err
	}
	b.tier = t
	b.metrics.watchTierCache(t.CacheStats)
	if err := b.collector.init(filepath.Join(b.cfg.DataDir, "tier-deletes"), b.cfg.Tier.CollectInterval); err != nil {
		return err
	}
	return nil
}

// partitionTier is what the tier's goroutines keep for one partition.
type partitionTier struct {
	// ctx is cancelled when the partition is dropped (its topic deleted
	// or moved away) or the broker closes; uploads run under it.
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

// stopTier stops p's uploads and returns once none is under way, so that
// nothing of p reaches the bucket after its local log or its bucket
// objects are deleted.
func (p *partition) stopTier() {
	if p.tier.stop == nil {
		return
	}
	p.tier.stop()
	p.tier.mu.Lock()
	p.tier.mu.Unlock() // empty on purpose: taking mu is waiting for the pass
}

// topicPartition names p in the bucket.
func (p *partition) bucketName() format.TopicPartition {
	return format.TopicPartition{Topic: p.topic, TopicID: p.topicID, Partition: p.index}
}

// remoteEnabled reports whether p's topic tiers (never without a tier:
// see tiers).
func (b *Broker) remoteEnabled(p *partition) bool {
	return p.settings.Load().log.Tiered
}

// tiers reports whether a topic with these configs goes to the cold tier:
// whenever remote.storage.enable is set, whatever its cleanup policy.
// Compacted topics tier like the others (unlike in Apache Kafka): offsets
// never change, so the bucket keeps every batch where it was, and a reader
// below the local log start finds every live key there, across the gaps
// compaction leaves. The internal topics are no exception: the group
// coordinator loads what is no longer local from the bucket (offsetsLog),
// and __consumer_offsets is created with the setting on
// (offsetsTopicConfigs), so that a bucket alone holds a cluster's group
// state and the local disk only its recent part.
func (b *Broker) tiers(configs map[string]string) bool {
	if b.tier == nil {
		return false
	}
	v, _ := b.topicConfigValue(configs, "remote.storage.enable")
	return v == "true"
}

// tierLoop uploads closed segments of the partitions this broker leads,
// applies local retention once they are safe in the bucket, and keeps the
// local-disk figure that produce backpressure reads. It starts the
// collector on a goroutine of its own (collectLoop), so that collection,
// however slow, never holds uploads back.
func (b *Broker) tierLoop() {
	b.goFunc(b.collectLoop)
	upload := time.NewTicker(b.cfg.Tier.UploadInterval)
	defer upload.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-upload.C:
			b.uploadPass()
		}
	}
}

func (b *Broker) uploadPass() {
	var local int64
	for _, p := range b.partitionList() {
		if b.remoteEnabled(p) && !p.leading.Load() {
			// Only the leader uploads; a follower follows the bucket's
			// manifest, so that its local retention deletes only what is
			// safely there.
			if err := b.followRemote(p); err != nil && p.tier.ctx.Err() == nil {
				b.log.Debug("tier: follower manifest refresh", "topic", p.topic, "partition", p.index, "err", err)
			}
		} else if b.remoteEnabled(p) {
			if !p.remoteKnown.Load() {
				// Its manifest could not be read at open, or its log had
				// to restart at the bucket's end and could not yet.
				b.loadRemote(p)
			}
			if err := b.uploadPartition(p); errors.Is(err, tier.ErrFenced) {
				// Deposed without knowing it yet: the newer leader's
				// manifest is current, and nothing was deleted here on the
				// strength of this node's version. The metadata will say
				// who leads.
				b.log.Info("tier upload fenced: a newer leader owns the partition's manifest", "topic", p.topic, "partition", p.index, "err", err)
				p.tier.stale.Store(true)
			} else if errors.Is(err, tier.ErrClusterUnnamed) {
				// Nothing was written: the bucket waits for the cluster's
				// id, which awaitClusterID said once.
				b.log.Debug("tier upload waits for the cluster's id", "topic", p.topic, "partition", p.index)
			} else if err != nil && p.tier.ctx.Err() == nil {
				b.metrics.tierUploadErrors.Inc()
				b.log.Warn("tier upload", "topic", p.topic, "partition", p.index, "err", err)
				// A failed PUT may have been applied all the same, and
				// a segment object may be left without its manifest.
				b.collector.dropped(p.bucketName(), b.cfg.Tier.Now())
			}
			// Set whether or not the pass worked: during an outage the log
			// end keeps growing and the lag is how operators see it.
			b.metrics.setUploadLag(p.topic, p.index, p.log.EndOffset()-p.uploadedEnd.Load())
		}
		local += p.log.Size()
	}
	b.localBytes.Store(local)
}

// uploadPartition copies every closed segment of p that is wholly below
// the last stable offset and not yet in the bucket, oldest first; after
// each one the manifest is published and only then may local retention
// delete the local copy. Below the last stable offset, as Kafka's
// RemoteLogManager bounds its copies: a segment holding a transaction
// still open would reach the bucket, local retention would delete it, and
// read_committed readers would meet it there without the abort that
// follows.
func (b *Broker) uploadPartition(p *partition) error {
	p.tier.mu.Lock()
	defer p.tier.mu.Unlock()
	if p.tier.ctx.Err() != nil {
		return nil // dropped: see stopTier
	}
	// The whole pass publishes under the leader epoch it starts in, and
	// stops between steps once this node no longer leads at it: a
	// deposed leader's late manifests then carry its old epoch, which the
	// new leader's manifests fence (docs/bucket-format.md §3).
	epoch, leads := p.leaderEpochIfLeading()
	if !leads {
		return nil
	}
	ctx, cancel := context.WithTimeout(p.tier.ctx, uploadPassTimeout)
	defer cancel()
	tp := p.bucketName()
	m := p.tier.manifest
	p.tier.manifest = nil // until this pass succeeds
	if p.tier.stale.Swap(false) {
		m = nil
		var err error
		if m, err = b.tier.Refresh(ctx, tp); err != nil {
			p.tier.stale.Store(true)
			return err
		}
		// A new leadership claims the manifest at once, not at its
		// first change, so that the deposed leader's writers and
		// collector are fenced from now on.
		if err := b.tier.Claim(ctx, tp, epoch); err != nil {
			p.tier.stale.Store(true)
			return err
		}
		if m, err = b.tier.Manifest(ctx, tp); err != nil {
			return err
		}
	}
	if m == nil {
		var err error
		if m, err = b.tier.Manifest(ctx, tp); err != nil {
			return err
		}
	}
	p.setRemote(m)
	if _, err := p.log.RollIfOlder(b.cfg.Tier.IdleUpload); err != nil {
		return fmt.Errorf("roll idle segment: %w", err)
	}
	segs, err := p.log.ClosedSegments(m.EndOffset())
	if err != nil {
		return err
	}
	stable := p.lastStableOffset()
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
		if !p.leadsAt(epoch) {
			return nil
		}
		m, err = b.tier.Upload(ctx, tp, seg, epoch)
		if err != nil {
			return err
		}
		p.setRemote(m)
		// The previous manifest is superseded: the collector will have it.
		b.collector.dropped(tp, b.cfg.Tier.Now())
		b.metrics.tierUploads.Inc()
		b.metrics.tierUploadBytes.Add(float64(seg.Size))
		b.metrics.tierUploadSeconds.Observe(time.Since(start).Seconds())
	}
	if !p.leadsAt(epoch) {
		return nil
	}
	m, err = b.applyRetention(ctx, p, m, epoch)
	if err != nil {
		return err
	}
	if !p.leadsAt(epoch) {
		return nil
	}
	if m, err = b.mergeSmall(ctx, p, m, epoch); err != nil {
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
func (b *Broker) followRemote(p *partition) error {
	p.tier.mu.Lock()
	defer p.tier.mu.Unlock()
	if p.tier.ctx.Err() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(p.tier.ctx, time.Minute)
	defer cancel()
	m, err := b.tier.Refresh(ctx, p.bucketName())
	if err != nil {
		return err
	}
	p.tier.manifest = m
	p.tier.stale.Store(true) // should it lead next, it reads the bucket again
	p.setRemote(m)
	if err := p.log.Maintain(); err != nil {
		return fmt.Errorf("local retention: %w", err)
	}
	return nil
}

// mergesPerPass bounds the merges of small remote segments an upload pass
// makes per partition, so that a backlog of them (a quiet partition's
// year of idle uploads) is worked off without holding uploads back.
const mergesPerPass = 4

// mergeSmall merges adjacent small remote segments of p (below half of
// segment.bytes, as idle uploads make them) into objects of up to
// segment.bytes, and returns the manifest after.
func (b *Broker) mergeSmall(ctx context.Context, p *partition, m *format.Root, epoch int32) (*format.Root, error) {
	if m.Empty() || p.settings.Load().compaction != nil {
		// Compaction writes its objects up to segment.bytes, merging the
		// small ones on the way; a merge under a pass would only make the
		// pass's replacement fail.
		return m, nil
	}
	merge := tier.Merge{SegmentBytes: p.settings.Load().log.SegmentBytes, LeaderEpoch: epoch, Max: mergesPerPass}
	n, err := b.tier.MergeSmall(ctx, p.bucketName(), merge)
	if n == 0 {
		return m, err
	}
	// The replaced objects are the collector's after the grace.
	b.collector.dropped(p.bucketName(), b.cfg.Tier.Now())
	if m, err = b.tier.Manifest(ctx, p.bucketName()); err != nil {
		return nil, err
	}
	p.setRemote(m)
	return m, nil
}

// setRemote records what the bucket holds for p, and tells the log that
// everything below its end may go under local retention. A leader whose
// log ends below the bucket's end stays unknown (no reads, no appends)
// until startAtBucketEnd has restarted its log there.
func (p *partition) setRemote(m *format.Root) {
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

// errRemoteUnknown answers reads and offset lookups of a tiered partition
// whose manifest could not be read yet (the store is down at start-up):
// retriable, so clients wait instead of being sent to the wrong offset.
var errRemoteUnknown = fmt.Errorf("%w: the partition's state in the object store is not loaded yet", kerr.KafkaStorageError)

// manifestLoaders bounds the manifests read at once when partitions open
// (at start-up, all of them): enough to overlap the store's latency, few
// enough not to set off its request throttling.
const manifestLoaders = 16

// loadRemotes reads the manifests of the tiered partitions among ps in the
// background, manifestLoaders at a time, so that opening partitions (a
// start-up among them) never waits for the bucket and each partition's
// log start is known as soon as its own manifest is in. A manifest that
// could not be read is read again by the upload loop. The channel returned
// is closed once every read has ended.
func (b *Broker) loadRemotes(ps []*partition) <-chan struct{} {
	done := make(chan struct{})
	var tiered []*partition
	for _, p := range ps {
		if b.remoteEnabled(p) {
			tiered = append(tiered, p)
		} else {
			p.remoteKnown.Store(true)
		}
	}
	if len(tiered) == 0 {
		close(done)
		return done
	}
	b.goFunc(func() {
		defer close(done)
		sem := make(chan struct{}, manifestLoaders)
		var wg sync.WaitGroup
		defer wg.Wait()
		for _, p := range tiered {
			select {
			case sem <- struct{}{}:
			case <-b.ctx.Done():
				return
			}
			wg.Go(func() {
				defer func() { <-sem }()
				b.loadRemote(p)
			})
		}
	})
	return done
}

// loadRemote reads p's manifest, so that its log start is right. It holds
// p's upload lock, so that a manifest it read never replaces a newer one
// an upload has just published.
func (b *Broker) loadRemote(p *partition) {
	p.tier.mu.Lock()
	defer p.tier.mu.Unlock()
	if p.tier.ctx.Err() != nil || p.remoteKnown.Load() {
		return // dropped, or the upload loop got there first
	}
	ctx, cancel := context.WithTimeout(p.tier.ctx, 10*time.Second)
	defer cancel()
	m, err := b.tier.Manifest(ctx, p.bucketName())
	if err != nil {
		if p.tier.ctx.Err() == nil {
			b.log.Warn("load manifest", "topic", p.topic, "partition", p.index, "err", err)
		}
		return
	}
	if err := b.startAtBucketEnd(ctx, p, m); err != nil {
		if p.tier.ctx.Err() == nil {
			b.log.Warn("restart local log at the bucket's end", "topic", p.topic, "partition", p.index, "err", err)
		}
		return
	}
	p.tier.manifest = m
	p.setRemote(m)
}

// checkRemoteKnown fails requests that need the log start of a tiered
// partition whose manifest is not loaded.
func (b *Broker) checkRemoteKnown(p *partition) error {
	if !p.remoteKnown.Load() && b.remoteEnabled(p) {
		return errRemoteUnknown
	}
	return nil
}

// logStartOffset is the first offset a consumer can read, locally or from
// the bucket.
func (p *partition) logStartOffset() int64 {
	local := p.log.StartOffset()
	if rs := p.remoteStart.Load(); rs >= 0 && rs < local {
		return rs
	}
	return local
}

// readRemote serves a fetch below the local log start from the bucket,
// batches based below maxOffset only.
func (b *Broker) readRemote(p *partition, dst []byte, offset, maxOffset int64, maxBytes int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	n := len(dst)
	out, err := b.tier.ReadBelow(ctx, p.bucketName(), dst, offset, maxOffset, maxBytes)
	b.metrics.tierReadBytes.Add(float64(len(out) - n))
	return out, storageError(err)
}

// readAt reads batches of p at offset based below limit (the high
// watermark, or the last stable offset for read_committed), from the
// local log or, below the local log start, from the bucket.
func (b *Broker) readAt(p *partition, dst []byte, offset, limit int64, maxBytes int) ([]byte, error) {
	if offset < p.log.StartOffset() {
		if err := b.checkRemoteKnown(p); err != nil {
			return dst, err
		}
	}
	out, err := p.log.Read(dst, offset, limit, maxBytes)
	if err != nil && errors.Is(err, segment.ErrOffsetOutOfRange) && b.tier != nil && offset < p.log.StartOffset() && p.remoteEnd.Load() > offset {
		out, err = b.readRemote(p, dst, offset, limit, maxBytes)
		if err == nil && len(out) == len(dst) {
			// Compaction left nothing in the bucket from offset on (or
			// nothing below limit): the next record is the first one on
			// local disk, if it is below limit.
			return p.log.Read(dst, p.log.StartOffset(), limit, maxBytes)
		}
	}
	return out, err
}

// tierSegmentConfig adds the tiering settings of a topic to its log
// config: a tiered log deletes locally only what is uploaded, bounded by
// local.retention.* (-2: follow retention.*). Internal topics follow the
// same rule as the others (see tiers).
func (b *Broker) tierSegmentConfig(cfg segment.Config, configs map[string]string) segment.Config {
	if !b.tiers(configs) {
		return cfg
	}
	num := func(key string) int64 {
		v, _ := b.topicConfigValue(configs, key)
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	cfg.Tiered = true
	cfg.LocalRetentionBytes = num("local.retention.bytes")
	if cfg.LocalRetentionBytes == -2 {
		cfg.LocalRetentionBytes = cfg.RetentionBytes
	}
	ms := num("local.retention.ms")
	switch {
	case ms == -2:
		cfg.LocalRetentionMs = cfg.RetentionMs
	case ms < 0 || ms > math.MaxInt64/int64(time.Millisecond):
		cfg.LocalRetentionMs = -1 // unlimited, as segmentConfig reads retention.ms
	default:
		cfg.LocalRetentionMs = time.Duration(ms) * time.Millisecond
	}
	return cfg
}

// applyRetention enforces retention.bytes and retention.ms on the whole
// log of a tiered partition: the bucket's oldest segments go first (the
// manifest's log start moves; the objects follow after the orphan grace).
//
// It returns the manifest that holds afterwards.
func (b *Broker) applyRetention(ctx context.Context, p *partition, m *format.Root, epoch int32) (*format.Root, error) {
	if m.Empty() {
		return m, nil
	}
	cfg := p.settings.Load().log
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
	start, err := b.tier.ApplyRetention(ctx, p.bucketName(), r)
	if err != nil {
		return nil, err
	}
	if start != m.LogStartOffset {
		// Segments left the manifest: theirs to delete after the grace.
		b.collector.dropped(p.bucketName(), b.cfg.Tier.Now())
		m, err = b.tier.Manifest(ctx, p.bucketName())
		if err != nil {
			return nil, err
		}
		p.setRemote(m)
	}
	return m, nil
}

// prefetchRemote starts the bucket reads of every partition of a fetch
// that is below its local log start, so that their GETs run side by side
// on the tier's worker pool while the fetch reads partitions in order.
func (b *Broker) prefetchRemote(parts []*fetchPart) {
	if b.tier == nil {
		return
	}
	for _, fp := range parts {
		if fp.p != nil && !fp.errorDone && fp.offset < fp.p.log.StartOffset() && fp.offset < fp.p.remoteEnd.Load() {
			b.tier.Prefetch(fp.p.bucketName(), fp.offset)
		}
	}
}
