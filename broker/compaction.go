package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"strata/compactor"
	"strata/tier/format"
)

// startCompactor starts compacting this node's compacted partitions in
// the background, until the broker closes.
func (b *Broker) startCompactor() error {
	cfg := b.cfg.Compactor
	cfg.Logger = b.log.With("component", "compactor")
	cfg.SpoolDir = filepath.Join(b.cfg.DataDir, "compactor")
	if b.cfg.Tier.ChunkBytes > 0 {
		cfg.ChunkBytes = b.cfg.Tier.ChunkBytes
	}
	if b.tier != nil {
		// The objects a pass replaced are orphans now: the collector
		// visits the partition after the grace.
		cfg.OnReplaced = func(tp format.TopicPartition) { b.collector.dropped(tp, b.cfg.Tier.Now()) }
	}
	// Spool files are unlinked as they are made; a crash leaves none, but
	// an older version's might linger.
	if err := os.RemoveAll(cfg.SpoolDir); err != nil {
		return fmt.Errorf("compactor spool: %w", err)
	}
	if err := os.MkdirAll(cfg.SpoolDir, 0o755); err != nil {
		return fmt.Errorf("compactor spool: %w", err)
	}
	c, err := compactor.New(cfg, compactionHost{b}, b.tier, b.metrics.reg)
	if err != nil {
		return fmt.Errorf("compactor: %w", err)
	}
	b.compactor = c
	b.goFunc(func() { c.Run(b.ctx) })
	return nil
}

// compactionHost shows the compactor the compacted partitions of this
// node: every replica's local log, and the bucket history of those it
// leads.
type compactionHost struct{ b *Broker }

var _ compactor.Host = compactionHost{}

func (h compactionHost) LocalPartitions() []compactor.LocalPartition {
	var out []compactor.LocalPartition
	for _, p := range h.b.partitionList() {
		s := p.Settings()
		if s.Compaction == nil {
			continue
		}
		out = append(out, compactor.LocalPartition{
			Topic: p.Topic(), Partition: p.Index(), Log: p.Log(),
			HighWatermark: p.HighWatermark,
			Tiered:        s.Log.Tiered,
			Policy:        *s.Compaction,
		})
	}
	return out
}

func (h compactionHost) ColdPartitions() []compactor.ColdPartition {
	var out []compactor.ColdPartition
	for _, p := range h.b.partitionList() {
		s := p.Settings()
		if s.Compaction == nil || !s.Log.Tiered {
			continue
		}
		epoch, leading := p.LeaderEpochIfLeading()
		if !leading {
			continue
		}
		out = append(out, compactor.ColdPartition{TP: p.BucketName(), LeaderEpoch: epoch, Policy: *s.Compaction,
			FirstUnstableOffset: func() (int64, bool) { return p.Log().FirstUnstableOffsetBelow(p.HighWatermark()) }})
	}
	return out
}

// compactionPolicy reads a topic's compaction settings.
func (b *Broker) compactionPolicy(configs map[string]string) compactor.Policy {
	num := func(key string) int64 {
		v, _ := b.topicConfigValue(configs, key)
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	ms := func(key string) time.Duration {
		n := num(key)
		if n < 0 || n > int64(1<<63-1)/int64(time.Millisecond) {
			return -1
		}
		return time.Duration(n) * time.Millisecond
	}
	ratio, _ := b.topicConfigValue(configs, "min.cleanable.dirty.ratio")
	r, _ := strconv.ParseFloat(ratio, 64)
	return compactor.Policy{
		DeleteRetention: max(ms("delete.retention.ms"), 0),
		MinLag:          max(ms("min.compaction.lag.ms"), 0),
		MaxLag:          ms("max.compaction.lag.ms"),
		MinDirtyRatio:   r,
		SegmentBytes:    num("segment.bytes"),
	}
}
