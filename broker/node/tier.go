package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"strata/broker/partition"
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
	// CheckpointInterval is tier.metadata_checkpoint_interval: how often
	// the controller reads every tiered partition's newest manifest for
	// its metadata checkpoint, and so the longest a new manifest version
	// waits to be named in one (default 1 minute). CheckpointRetention is
	// tier.metadata_checkpoint_retention: checkpoints older are deleted,
	// the newest few always kept (default 7 days). CheckpointDebounce is
	// the shortest time between two checkpoints, which coalesces a burst
	// of metadata changes into one (default 2 s). See checkpoint.go.
	CheckpointInterval, CheckpointRetention, CheckpointDebounce time.Duration
}

// WithDefaults fills in the defaults of the fields left zero.
func (c TierConfig) WithDefaults() TierConfig {
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
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.CheckpointRetention <= 0 {
		c.CheckpointRetention = DefaultCheckpointRetention
	}
	if c.CheckpointDebounce <= 0 {
		c.CheckpointDebounce = DefaultCheckpointDebounce
	}
	return c
}

// ClaimTimeout bounds how long a start waits on the store for the
// bucket's claim (a GET, and a conditional PUT the first time): long
// enough for any store that answers, short enough that a silent one
// does not hold the start, which does not wait for the bucket otherwise.
const ClaimTimeout = 2 * time.Second

// TierWhere names the object store for messages.
func (n *Node) TierWhere() string {
	if n.cfg.Tier.Where == "" {
		return "the object store"
	}
	return n.cfg.Tier.Where
}

// OpenTier starts the cold tier when a store is configured, for the
// cluster named id (empty when not named yet).
func (n *Node) OpenTier(ctx context.Context, id string) error {
	if n.cfg.Tier.Store == nil {
		return nil
	}
	// The bucket is this cluster's, or becomes it: a bucket (or prefix)
	// another cluster uses holds topics whose ids mean nothing here. A
	// store that is down now does not stop the start (an outage is the
	// uploader's to wait out), nor does one that does not answer for
	// ClaimTimeout; the first write claims it then. Nor does a cluster
	// with no id yet: awaitClusterID gives the store the id once the
	// controller names the cluster, and nothing is written before.
	store := tier.NewClaimedStore(n.cfg.Tier.Store, format.Cluster{ClusterID: id, CreatedMs: time.Now().UnixMilli(), CreatedBy: n.cfg.NodeID})
	n.tierStore = store
	if id != "" {
		cctx, cancel := context.WithTimeout(ctx, ClaimTimeout)
		err := store.Claim(cctx)
		cancel()
		if err != nil {
			var foreign *tier.ForeignBucketError
			if errors.As(err, &foreign) {
				return fmt.Errorf("bucket %s belongs to cluster %s, not to this node's cluster %s: each cluster needs a bucket or prefix of its own (to restore cluster %[2]s from it, start a fresh node with --restore)",
					n.TierWhere(), foreign.Bucket, foreign.Cluster)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("claim bucket %s for cluster %s: %w", n.TierWhere(), id, err)
			}
			n.log.Warn("bucket not claimed yet: nothing is written to it until it is", "store", n.TierWhere(), "err", err)
		}
	}
	t, err := tier.Open(tier.Config{
		Store:              store,
		CacheDir:           filepath.Join(n.cfg.DataDir, "tier-cache"),
		ChunkBytes:         n.cfg.Tier.ChunkBytes,
		MemoryBytes:        n.cfg.Tier.MemoryBytes,
		CacheBytes:         n.cfg.Tier.CacheBytes,
		ReadAhead:          n.cfg.Tier.ReadAhead,
		ReadWorkers:        n.cfg.Tier.ReadWorkers,
		Logger:             n.log.With("component", "tier"),
		Now:                n.cfg.Tier.Now,
		ManifestCacheBytes: n.cfg.Tier.ManifestCacheBytes,
	})
	if err != nil {
		return err
	}
	n.tier = t
	n.cfg.Metrics.WatchTierCache(t.CacheStats)
	if err := n.collector.init(filepath.Join(n.cfg.DataDir, "tier-deletes"), n.cfg.Tier.CollectInterval); err != nil {
		return err
	}
	return nil
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
func (n *Node) tiers(configs map[string]string) bool {
	if n.tier == nil || IsReadReplica(configs) {
		return false // a read replica's bucket is its source's, read-only
	}
	v, _ := n.TopicConfigValue(configs, "remote.storage.enable")
	return v == "true"
}

// tierLoop uploads closed segments of the partitions this broker leads,
// applies local retention once they are safe in the bucket, and keeps the
// local-disk figure that produce backpressure reads. It starts the
// collector on a goroutine of its own (collectLoop), so that collection,
// however slow, never holds uploads back.
func (n *Node) tierLoop() {
	n.cfg.Go(n.collectLoop)
	n.cfg.Go(n.checkpointLoop)
	upload := time.NewTicker(n.cfg.Tier.UploadInterval)
	defer upload.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-upload.C:
			n.UploadPass()
		}
	}
}

func (n *Node) UploadPass() {
	var local int64
	for _, p := range n.Partitions() {
		if p.Tiered() {
			n.uploadOne(p)
		}
		local += p.Log().Size()
	}
	n.localBytes.Store(local)
}

// uploadOne runs one partition's upload pass and reports how it went.
func (n *Node) uploadOne(p *partition.Partition) {
	asLeader, err := p.Upload()
	if !asLeader {
		if err != nil && !p.Dropped() {
			n.log.Debug("tier: follower manifest refresh", "topic", p.Topic(), "partition", p.Index(), "err", err)
		}
		return
	}
	switch {
	case err == nil:
	case errors.Is(err, tier.ErrFenced):
		// Deposed without knowing it yet: the newer leader's manifest is
		// current, and nothing was deleted here on the strength of this
		// node's version. The metadata will say who leads.
		n.log.Info("tier upload fenced: a newer leader owns the partition's manifest", "topic", p.Topic(), "partition", p.Index(), "err", err)
	case errors.Is(err, tier.ErrClusterUnnamed):
		// Nothing was written: the bucket waits for the cluster's id,
		// which AwaitClusterID said once.
		n.log.Debug("tier upload waits for the cluster's id", "topic", p.Topic(), "partition", p.Index())
	case !p.Dropped():
		n.cfg.Metrics.UploadErrors.Inc()
		n.log.Warn("tier upload", "topic", p.Topic(), "partition", p.Index(), "err", err)
		// A failed PUT may have been applied all the same, and a segment
		// object may be left without its manifest.
		n.collector.dropped(p.BucketName(), n.cfg.Tier.Now())
	}
	// Set whether or not the pass worked: during an outage the log end
	// keeps growing and the lag is how operators see it.
	n.cfg.Metrics.UploadLag(p.Topic(), p.Index(), p.Log().EndOffset()-p.UploadedEnd())
}

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
func (n *Node) loadRemotes(ps []*partition.Partition) <-chan struct{} {
	done := make(chan struct{})
	var tiered []*partition.Partition
	for _, p := range ps {
		if p.Tiered() {
			tiered = append(tiered, p)
		} else {
			p.SetRemoteKnown()
		}
	}
	if len(tiered) == 0 {
		close(done)
		return done
	}
	n.cfg.Go(func() {
		defer close(done)
		sem := make(chan struct{}, manifestLoaders)
		var wg sync.WaitGroup
		defer wg.Wait()
		for _, p := range tiered {
			select {
			case sem <- struct{}{}:
			case <-n.ctx.Done():
				return
			}
			wg.Go(func() {
				defer func() { <-sem }()
				p.LoadRemote()
			})
		}
	})
	return done
}

// tierSegmentConfig adds the tiering settings of a topic to its log
// config: a tiered log deletes locally only what is uploaded, bounded by
// local.retention.* (-2: follow retention.*). Internal topics follow the
// same rule as the others (see tiers).
func (n *Node) tierSegmentConfig(cfg segment.Config, configs map[string]string) segment.Config {
	if !n.tiers(configs) {
		return cfg
	}
	num := func(key string) int64 {
		v, _ := n.TopicConfigValue(configs, key)
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
