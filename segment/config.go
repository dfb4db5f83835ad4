package segment

import (
	"log/slog"
	"math"
	"time"
)

// Config holds a Log's settings. The zero value of every field means "use
// the default"; to switch off a bound whose default is on, set it negative.
// With Explicit, the bounds Kafka allows to be 0 take 0 literally.
type Config struct {
	// KeysRequired refuses, on Append, records without a key: a compacted
	// topic keeps the latest record of each key, and a record without one
	// could never be compacted (Kafka refuses it too). Followers' appends
	// are not checked: their leader did it.
	KeysRequired bool
	// SegmentBytes: roll before an append would make the active segment
	// exceed this (segment.bytes; default 1 GiB, at most 2 GiB - 1 because
	// index positions are 32-bit). A single append larger than it still
	// goes, alone, into a fresh segment.
	SegmentBytes int64
	// SegmentMs: roll when the active segment's first append is older than
	// this (segment.ms; default 7 days). Checked on Append and Maintain.
	// After a restart the age is taken from the segment's first batch
	// timestamp, as Kafka does.
	SegmentMs time.Duration
	// IndexIntervalBytes: bytes between sparse index entries
	// (index.interval.bytes; default 4096).
	IndexIntervalBytes int
	// RetentionBytes bounds the whole log (retention.bytes): as in Kafka,
	// the oldest closed segment is deleted while the log would still hold
	// at least RetentionBytes without it. Default and any negative value:
	// unlimited; an explicit 0 keeps no closed segment.
	RetentionBytes int64
	// RetentionMs: delete closed segments whose largest timestamp is older
	// than this (retention.ms; default 7 days, negative: unlimited; an
	// explicit 0 deletes every closed segment).
	RetentionMs time.Duration
	// MaxBatchBytes: largest accepted batch (message.max.bytes; default
	// 1048588).
	MaxBatchBytes int
	// TimestampBeforeMax rejects record timestamps older than now minus
	// this (message.timestamp.before.max.ms; default and negative:
	// unlimited; an explicit 0 refuses any timestamp before now).
	TimestampBeforeMax time.Duration
	// TimestampAfterMax rejects record timestamps newer than now plus this
	// (message.timestamp.after.max.ms; default 1h, negative: unlimited; an
	// explicit 0 refuses any timestamp after now).
	TimestampAfterMax time.Duration
	// Explicit takes RetentionBytes, RetentionMs, TimestampBeforeMax and
	// TimestampAfterMax as given, so that 0 means what it means in Kafka
	// instead of "the default". Whoever resolves Kafka settings (the
	// broker's topic configs) sets it: a topic's 0 must mean the same on
	// the local log as on the cold tier, which reads these fields too.
	Explicit bool
	// ProducerIDExpiration forgets, on Maintain, an idempotent producer
	// that has not appended for this long by the log's clock, whatever its
	// records' timestamps (producer.id.expiration.ms; default 24h,
	// negative: never). A forgotten producer may resume at any sequence
	// (KIP-360).
	ProducerIDExpiration time.Duration
	// Tiered marks a log whose closed segments are copied to the cold tier.
	// Retention then deletes a local segment only once it is wholly below
	// the tiered offset (SetTieredOffset), bounded by LocalRetentionBytes
	// and LocalRetentionMs; RetentionBytes and RetentionMs, which bound the
	// whole log, are the tier's to apply.
	Tiered bool
	// LocalRetentionBytes bounds the tiered local log
	// (local.retention.bytes). Only with Tiered; taken literally: negative
	// is unlimited and 0 keeps no closed segment once it is uploaded.
	LocalRetentionBytes int64
	// LocalRetentionMs bounds the age of tiered local segments
	// (local.retention.ms). Only with Tiered; negative is unlimited.
	LocalRetentionMs time.Duration
	// Now is the clock; nil means time.Now. Fixed at Open.
	Now func() time.Time
	// Logger receives recovery and corruption reports; nil discards them.
	// Fixed at Open.
	Logger *slog.Logger
}

// Defaults, as in Kafka.
const (
	DefaultSegmentBytes         = 1 << 30
	DefaultSegmentMs            = 7 * 24 * time.Hour
	DefaultIndexIntervalBytes   = 4096
	DefaultRetentionMs          = 7 * 24 * time.Hour
	DefaultMaxBatchBytes        = 1048588
	DefaultTimestampAfterMax    = time.Hour
	DefaultProducerIDExpiration = 24 * time.Hour
)

// maxSegmentBytes keeps every position representable in an index entry.
const maxSegmentBytes = math.MaxInt32

// WithDefaults returns c with zero fields replaced by their defaults (but
// for those Explicit keeps) and out-of-range values clamped.
func (c Config) WithDefaults() Config {
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	c.SegmentBytes = min(c.SegmentBytes, maxSegmentBytes)
	if c.SegmentMs <= 0 {
		c.SegmentMs = DefaultSegmentMs
	}
	if c.IndexIntervalBytes <= 0 {
		c.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if !c.Explicit {
		if c.RetentionBytes == 0 {
			c.RetentionBytes = -1
		}
		if c.RetentionMs == 0 {
			c.RetentionMs = DefaultRetentionMs
		}
		if c.TimestampBeforeMax == 0 {
			c.TimestampBeforeMax = -1
		}
		if c.TimestampAfterMax == 0 {
			c.TimestampAfterMax = DefaultTimestampAfterMax
		}
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.ProducerIDExpiration == 0 {
		c.ProducerIDExpiration = DefaultProducerIDExpiration
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
