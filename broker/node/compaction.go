package node

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
func (n *Node) startCompactor() error {
	cfg := n.cfg.Compactor
	cfg.Logger = n.log.With("component", "compactor")
	cfg.SpoolDir = filepath.Join(n.cfg.DataDir, "compactor")
	if n.cfg.Tier.ChunkBytes > 0 {
		cfg.ChunkBytes = n.cfg.Tier.ChunkBytes
	}
	if n.tier != nil {
		// The objects a pass replaced are orphans now: the collector
		// visits the partition after the grace.
		cfg.OnReplaced = func(tp format.TopicPartition) { n.collector.dropped(tp, n.cfg.Tier.Now()) }
	}
	// Spool files are unlinked as they are made; a crash leaves none, but
	// an older version's might linger.
	if err := os.RemoveAll(cfg.SpoolDir); err != nil {
		return fmt.Errorf("compactor spool: %w", err)
	}
	if err := os.MkdirAll(cfg.SpoolDir, 0o755); err != nil {
		return fmt.Errorf("compactor spool: %w", err)
	}
	c, err := compactor.New(cfg, compactionHost{n}, n.tier, n.cfg.Metrics.Registerer)
	if err != nil {
		return fmt.Errorf("compactor: %w", err)
	}
	n.cfg.Go(func() { c.Run(n.ctx) })
	return nil
}

// compactionHost shows the compactor the compacted partitions of this
// node: every replica's local log, and the bucket history of those it
// leads.
type compactionHost struct{ n *Node }

var _ compactor.Host = compactionHost{}

func (h compactionHost) LocalPartitions() []compactor.LocalPartition {
	var out []compactor.LocalPartition
	for _, p := range h.n.Partitions() {
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
	for _, p := range h.n.Partitions() {
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
func (n *Node) compactionPolicy(configs map[string]string) compactor.Policy {
	num := func(key string) int64 {
		v, _ := n.TopicConfigValue(configs, key)
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
	ratio, _ := n.TopicConfigValue(configs, "min.cleanable.dirty.ratio")
	r, _ := strconv.ParseFloat(ratio, 64)
	return compactor.Policy{
		DeleteRetention: max(ms("delete.retention.ms"), 0),
		MinLag:          max(ms("min.compaction.lag.ms"), 0),
		MaxLag:          ms("max.compaction.lag.ms"),
		MinDirtyRatio:   r,
		SegmentBytes:    num("segment.bytes"),
	}
}

// CompactionHost is what the compactor sees of this node: its compacted
// partitions, local and cold.
func (n *Node) CompactionHost() compactor.Host { return compactionHost{n} }
