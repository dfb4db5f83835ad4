package compactor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"strata/segment"
	"strata/tier"
	"strata/tier/format"
)

// Host is what the compactor asks of the node it runs in: the partitions
// to look after, each time it looks.
type Host interface {
	// LocalPartitions returns the compacted partitions with a log on this
	// node.
	LocalPartitions() []LocalPartition
	// ColdPartitions returns the compacted, tiered partitions this node
	// leads.
	ColdPartitions() []ColdPartition
}

// Compactor compacts the local logs and the bucket histories of compacted
// partitions in the background.
type Compactor struct {
	cfg     Config
	host    Host
	tier    *tier.Tier // nil without a cold tier
	limiter *rate.Limiter
	metrics *metrics

	// maps holds the workers' key maps, allocated on first use and kept:
	// the budget is the compactor's whole footprint, and reusing the
	// maps keeps the heap from growing and shrinking with every pass.
	maps chan *keyMap

	mu struct {
		sync.Mutex
		// due is when a kept tombstone's delete horizon passes, per
		// partition: a pass is due then, dirty or not.
		due map[string]int64
		// seen marks partitions checked since start.
		seen map[string]bool
		last map[string]Status
	}
}

// Status is a partition's compaction as this node last saw it.
type Status struct {
	Tier       string // "local" or "cold"
	Topic      string
	Partition  int32
	CleanedTo  int64
	DirtyRatio float64
	LastPass   time.Time
	LastStats  Stats
	LastError  string
}

// New returns a compactor for host's partitions; t may be nil when the
// node has no bucket. Its metrics are registered with reg (if not nil).
func New(cfg Config, host Host, t *tier.Tier, reg prometheus.Registerer) (*Compactor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Compactor{cfg: cfg, host: host, tier: t, maps: make(chan *keyMap, cfg.Workers)}
	if cfg.IOBytesPerSec > 0 {
		// A burst of one second, and at least a large batch, so that
		// WaitN never refuses a batch for being larger than the bucket.
		c.limiter = rate.NewLimiter(rate.Limit(cfg.IOBytesPerSec), int(max(cfg.IOBytesPerSec, 16<<20)))
	}
	for range cfg.Workers {
		c.maps <- nil
	}
	c.mu.due = map[string]int64{}
	c.mu.seen = map[string]bool{}
	c.mu.last = map[string]Status{}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	c.metrics = m
	return c, nil
}

// Run compacts what is due every Interval until ctx ends, and returns
// once every pass has stopped.
func (c *Compactor) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("compaction round", "err", err)
		}
	}
}

type job struct {
	key   string
	ratio float64
	local *LocalPartition
	cold  *ColdPartition
	plan  plan
	lsegs []segment.SegmentInfo
	csegs []format.RemoteSegment
}

// RunOnce checks every partition and compacts those that are due, the
// dirtiest first, Workers at a time. It returns the first error of a
// pass, after all of them ran.
func (c *Compactor) RunOnce(ctx context.Context) error {
	now := c.cfg.Now()
	var jobs []job
	var errs []error
	for _, p := range c.host.LocalPartitions() {
		pl, segs, err := localPlan(&p, now)
		key := localKey(p.Topic, p.Partition)
		if err != nil {
			errs = append(errs, fmt.Errorf("plan %s: %w", p.name(), err))
			continue
		}
		c.metrics.dirty.WithLabelValues("local", p.Topic, strconv.Itoa(int(p.Partition))).Set(pl.ratio())
		if c.due(key, &p.Policy, pl, now) {
			jobs = append(jobs, job{key: key, ratio: pl.ratio(), local: &p, plan: pl, lsegs: segs})
		}
	}
	if c.tier != nil {
		for _, p := range c.host.ColdPartitions() {
			pl, segs, err := c.coldPlan(ctx, &p, now)
			key := coldKey(p.TP.Topic, p.TP.Partition)
			if err != nil {
				errs = append(errs, fmt.Errorf("plan %s: %w", p.name(), err))
				continue
			}
			c.metrics.dirty.WithLabelValues("cold", p.TP.Topic, strconv.Itoa(int(p.TP.Partition))).Set(pl.ratio())
			if c.due(key, &p.Policy, pl, now) {
				jobs = append(jobs, job{key: key, ratio: pl.ratio(), cold: &p, plan: pl, csegs: segs})
			}
		}
	}
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(b.ratio, a.ratio) })

	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, j := range jobs {
		var m *keyMap
		select {
		case m = <-c.maps:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		if m == nil {
			m = newKeyMap(c.cfg.MemoryBytes / int64(c.cfg.Workers))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { c.maps <- m }()
			if err := c.runJob(ctx, m, j); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// due reports whether a partition needs a pass now.
func (c *Compactor) due(key string, p *Policy, pl plan, now time.Time) bool {
	if pl.cleanEnd <= pl.start {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mu.seen[key] {
		c.mu.seen[key] = true
		// After a restart nobody knows whether the last pass kept
		// tombstones; any it kept expire by its time plus
		// delete.retention.ms (a horizon is stamped at pass time), when
		// one pass finds out and notes the real horizon.
		if pl.clean > 0 && !pl.lastPass.IsZero() {
			c.mu.due[key] = pl.lastPass.Add(p.DeleteRetention).UnixMilli()
		}
	}
	if pl.dirty > 0 && (pl.ratio() >= p.MinDirtyRatio || pl.overdue) {
		return true
	}
	d := c.mu.due[key]
	return d > 0 && now.UnixMilli() >= d
}

func (c *Compactor) noteTombstones(key string, due int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if due > 0 {
		c.mu.due[key] = due
	} else {
		delete(c.mu.due, key)
	}
}

func (c *Compactor) runJob(ctx context.Context, m *keyMap, j job) error {
	start := time.Now()
	var st Stats
	var err error
	var tierName, topic string
	var partition int32
	if j.local != nil {
		tierName, topic, partition = "local", j.local.Topic, j.local.Partition
		st, err = c.compactLocal(ctx, m, j.local, j.plan, j.lsegs)
	} else {
		tierName, topic, partition = "cold", j.cold.TP.Topic, j.cold.TP.Partition
		st, err = c.compactCold(ctx, m, j.cold, j.plan, j.csegs)
	}
	st.Duration = time.Since(start)
	status := Status{Tier: tierName, Topic: topic, Partition: partition, CleanedTo: st.CleanedTo,
		DirtyRatio: j.plan.ratio(), LastPass: c.cfg.Now(), LastStats: st}
	log := c.cfg.Logger.With("tier", tierName, "topic", topic, "partition", partition)
	result := "ok"
	switch {
	case err == nil:
		log.Info("compacted", "cleanedTo", st.CleanedTo, "bytesRead", st.BytesRead, "bytesWritten", st.BytesWritten,
			"keysSeen", st.KeysSeen, "keysKept", st.KeysKept, "tombstonesRemoved", st.TombstonesRemoved,
			"abortedRemoved", st.AbortedRemoved, "markersRemoved", st.MarkersRemoved,
			"gets", st.Gets, "puts", st.Puts, "duration", st.Duration.String())
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, segment.ErrRewriteConflict), errors.Is(err, tier.ErrFenced),
		errors.Is(err, format.ErrRangeChanged), errors.Is(err, tier.ErrPartitionDeleted):
		// The log moved on (truncation, retention, a new leader, the
		// topic's deletion): the next round plans again from what is
		// there.
		log.Debug("compaction pass abandoned", "err", err)
		err, result = nil, "abandoned"
	default:
		result = "error"
		status.LastError = err.Error()
		log.Warn("compaction pass failed", "err", err)
	}
	c.metrics.observe(tierName, st, result)
	c.mu.Lock()
	c.mu.last[j.key] = status
	c.mu.Unlock()
	return err
}

// Statuses returns what the last pass of each partition found, sorted.
func (c *Compactor) Statuses() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Status, 0, len(c.mu.last))
	for _, s := range c.mu.last {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Status) int {
		return cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// throttle waits until n more bytes of I/O are allowed.
func (c *Compactor) throttle(ctx context.Context, n int) error {
	if c.limiter == nil {
		return nil
	}
	return c.limiter.WaitN(ctx, min(n, c.limiter.Burst()))
}

// pause holds a pass at point for a crash test (Config.TestPauseAt).
func (c *Compactor) pause(ctx context.Context, point string) error {
	if c.cfg.TestPauseAt != point {
		return nil
	}
	c.cfg.Logger.Warn("compactor paused for a test", "point", point)
	<-ctx.Done()
	return ctx.Err()
}

func localKey(topic string, p int32) string { return "local/" + topic + "/" + strconv.Itoa(int(p)) }
func coldKey(topic string, p int32) string  { return "cold/" + topic + "/" + strconv.Itoa(int(p)) }
