package partition

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/broker/replica"
	"strata/meta"
	"strata/segment"
	"strata/tier"
	"strata/tier/format"
)

// Host is what the node that hosts partitions gives each of them: who it
// is, its fetchers, its way to the controller and to the bucket, and
// where to report. One Host serves every partition of a node.
type Host struct {
	NodeID int32
	Logger *slog.Logger
	// Fetchers copy the partitions this node follows from their leaders.
	Fetchers Fetchers
	// Cluster is what a leader needs to change its ISR.
	Cluster Cluster
	// Bucket is the cold tier; nil when no object store is configured.
	Bucket Bucket
	// ReplicaLagTimeMax is replica.lag.time.max.ms: how long a follower
	// may fall behind before it leaves the ISR.
	ReplicaLagTimeMax time.Duration
	// IdleUpload is how old an active segment may grow before an upload
	// pass rolls it, so that a quiet partition's records reach the
	// bucket too.
	IdleUpload time.Duration
	// Dropped tells the collector that objects of tp may have left its
	// manifest (a replacement, retention, a failed write): they are
	// deleted after the orphan grace.
	Dropped func(tp format.TopicPartition)
	Metrics Metrics
	// Go runs f on a goroutine the node waits for when it closes; ctx
	// ends then.
	Go func(f func(ctx context.Context))
	// Context ends when the node closes; reads from the bucket run under
	// it.
	Context context.Context
}

// Fetchers are the node's replica fetchers (replica.Manager).
type Fetchers interface {
	Follow(leader int32, p replica.Partition)
	Unfollow(key replica.Key)
}

// Cluster is what a partition's leader needs of the cluster to change its
// ISR (MaybeAlterISR).
type Cluster interface {
	// BrokerEpoch is this node's broker epoch.
	BrokerEpoch() int64
	// Eligibility returns, from the current metadata, whether a replica
	// that fetched as incarnation epoch (-1: it named none) may join the
	// ISR: a registered, unfenced broker that is not shutting down, at
	// the epoch it registered (KIP-903).
	Eligibility() func(id int32, epoch int64) bool
	// AlterPartition sends an ISR change to the controller.
	AlterPartition(ctx context.Context, topicID [16]byte, r meta.AlterPartitionRequest) (meta.Partition, error)
}

// Bucket is what a partition needs of the cold tier (tier.Tier).
type Bucket interface {
	Manifest(ctx context.Context, tp format.TopicPartition) (*format.Root, error)
	Refresh(ctx context.Context, tp format.TopicPartition) (*format.Root, error)
	Claim(ctx context.Context, tp format.TopicPartition, epoch int32) error
	Upload(ctx context.Context, tp format.TopicPartition, seg segment.SegmentInfo, epoch int32) (*format.Root, error)
	ApplyRetention(ctx context.Context, tp format.TopicPartition, r tier.Retention) (int64, error)
	MergeSmall(ctx context.Context, tp format.TopicPartition, m tier.Merge) (int, error)
	AdvanceLogStart(ctx context.Context, tp format.TopicPartition, offset int64, epoch int32) (*format.Root, error)
	ReadBelow(ctx context.Context, tp format.TopicPartition, dst []byte, offset, maxOffset int64, maxBytes int) ([]byte, error)
	AbortedTransactions(ctx context.Context, tp format.TopicPartition, from, to int64) ([]segment.AbortedTxn, error)
	HistoryBelow(ctx context.Context, tp format.TopicPartition, offset int64) (int64, segment.History, bool, error)
	Prefetch(tp format.TopicPartition, offset int64)
	OffsetForTimestamp(ctx context.Context, tp format.TopicPartition, ts int64) (offset, timestamp int64, ok bool, err error)
	MaxTimestamp(ctx context.Context, tp format.TopicPartition) (timestamp, offset int64, ok bool, err error)
}

// Metrics are the series a partition updates.
type Metrics struct {
	LeaderElections prometheus.Counter
	// ISRChanged counts an ISR change from one set to another.
	ISRChanged    func(from, to []int32)
	Uploads       prometheus.Counter
	UploadBytes   prometheus.Counter
	UploadSeconds prometheus.Observer
	// ReadBytes counts the bytes read from the bucket.
	ReadBytes prometheus.Counter
}
