package compactor

import (
	"fmt"
	"log/slog"
	"time"

	"strata/tier/format"
)

// Config holds the compactor's node-wide settings.
type Config struct {
	// MemoryBytes bounds the key maps of all workers together (Kafka's
	// log.cleaner.dedupe.buffer.size); each worker gets an equal share.
	MemoryBytes int64
	// Workers is how many partitions are compacted at once.
	Workers int
	// IOBytesPerSec throttles what local compaction reads and writes
	// (Kafka's log.cleaner.io.max.bytes.per.second); 0 is unlimited.
	IOBytesPerSec int64
	// Interval is how often partitions are checked for work (Kafka's
	// log.cleaner.backoff.ms).
	Interval time.Duration
	// ChunkBytes is the size of the ranged GETs that read segment objects.
	ChunkBytes int64
	// SpoolDir holds the temporary files of cold-tier passes: what a pass
	// reads from the bucket is kept there for its second look, so that
	// each object is fetched once.
	SpoolDir string
	// SpoolBytes bounds a cold pass's spool file: once it holds this
	// much, the key map stops there (a batch boundary) and the rest of the
	// dirty history waits for the next pass. Disk use is at most this plus
	// one segment object.
	SpoolBytes int64
	// OnReplaced, if set, is called after a cold pass replaced objects in
	// tp's manifest: the replaced ones are now orphans to collect.
	OnReplaced func(tp format.TopicPartition)
	// TestPauseAt, if set, makes passes stop at that point until their
	// context ends: a crash test kills the process there. Points:
	// "local.before-commit", "cold.after-put", "cold.after-manifest".
	TestPauseAt string

	Logger *slog.Logger
	Now    func() time.Time
}

// Defaults.
const (
	DefaultMemoryBytes = 64 << 20
	DefaultWorkers     = 1
	DefaultInterval    = 15 * time.Second
	DefaultChunkBytes  = 4 << 20
	DefaultSpoolBytes  = 1 << 30
	// minMemoryBytes keeps a worker's map large enough for a batch.
	minMemoryBytes = 1 << 20
)

// WithDefaults fills in zero fields.
func (c Config) WithDefaults() Config {
	if c.MemoryBytes == 0 {
		c.MemoryBytes = DefaultMemoryBytes
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	if c.SpoolBytes == 0 {
		c.SpoolBytes = DefaultSpoolBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1 || c.Workers > 64:
		return fmt.Errorf("compactor workers %d: must be between 1 and 64", c.Workers)
	case c.MemoryBytes < minMemoryBytes*int64(c.Workers):
		return fmt.Errorf("compactor memory %d bytes: must be at least %d per worker", c.MemoryBytes, minMemoryBytes)
	case c.IOBytesPerSec < 0:
		return fmt.Errorf("compactor I/O limit %d bytes/s: must not be negative", c.IOBytesPerSec)
	case c.Interval <= 0:
		return fmt.Errorf("compactor interval %v: must be positive", c.Interval)
	case c.SpoolBytes < 0:
		return fmt.Errorf("compactor spool %d bytes: must not be negative", c.SpoolBytes)
	case c.ChunkBytes < 64<<10:
		return fmt.Errorf("compactor chunk %d bytes: must be at least 64 KiB", c.ChunkBytes)
	}
	return nil
}

// Policy is what a topic's configs decide about compacting a partition.
type Policy struct {
	// DeleteRetention is delete.retention.ms: how long a tombstone stays
	// after its batch was first cleaned.
	DeleteRetention time.Duration
	// MinLag and MaxLag are min.compaction.lag.ms and
	// max.compaction.lag.ms: records younger than MinLag are not
	// compacted; a dirty record older than MaxLag makes the partition
	// due whatever its dirty ratio. MaxLag <= 0 means no bound.
	MinLag, MaxLag time.Duration
	// MinDirtyRatio is min.cleanable.dirty.ratio.
	MinDirtyRatio float64
	// SegmentBytes caps the segments a pass writes (segment.bytes).
	SegmentBytes int64
}
