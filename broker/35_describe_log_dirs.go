package broker

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/partition"
)

// DescribeLogDirs: v1-5
//
// Reports the partitions this broker hosts and their sizes in bytes, for
// every topic (null Topics) or for the named partitions. Two directories
// can appear: the local log directory (DataDir/logs), with the size of
// each partition's local segments and, from v4, the volume's total and
// usable bytes; and, when tiered storage is configured, the object store,
// named "remote:" and the store, with the size of each partition's
// segment objects as its manifest lists them (the volume sizes are -1
// there: a bucket has no fixed size). A record in both tiers is counted
// in both, since it occupies both. A partition whose manifest cannot be
// read makes the remote directory answer KAFKA_STORAGE_ERROR.
//
// Version notes: v1 throttle behaviour only; v2 flexible; v3 top-level
// ErrorCode; v4 TotalBytes and UsableBytes (KIP-827); v5 IsCordoned
// (KIP-1066), always false here.
//
// Not done: v0 (removed by Kafka 4.0, KIP-896); future replicas and
// OffsetLag (there is one log directory per broker, so nothing ever moves
// between them).
//
// Authorization (Kafka's): DESCRIBE on the cluster, else the top-level
// CLUSTER_AUTHORIZATION_FAILED and no directories.
func init() { register(kmsg.DescribeLogDirs, 1, 5, (*Broker).handleDescribeLogDirs) }

func (b *Broker) handleDescribeLogDirs(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeLogDirsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	if !b.authorizedCluster(req, acl.Describe) {
		resp.ErrorCode, _ = b.answerError(kmsg.DescribeLogDirs, kerr.ClusterAuthorizationFailed)
		return resp, nil
	}

	parts := b.describedPartitions(r.Topics)

	local := kmsg.NewDescribeLogDirsResponseDir()
	local.Dir = b.logsDir
	if abs, err := filepath.Abs(b.logsDir); err == nil {
		local.Dir = abs
	}
	local.TotalBytes, local.UsableBytes = -1, -1
	if total, usable, err := diskSpace(b.logsDir); err == nil {
		local.TotalBytes, local.UsableBytes = total, usable
	}
	for _, p := range parts {
		addLogDirPartition(&local, p.Topic(), p.Index(), p.Log().Size())
	}
	resp.Dirs = append(resp.Dirs, local)

	if b.tier != nil {
		remote := kmsg.NewDescribeLogDirsResponseDir()
		remote.Dir = fmt.Sprintf("remote:%v", b.cfg.Tier.Store)
		remote.TotalBytes, remote.UsableBytes = -1, -1
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		for _, p := range parts {
			if !p.Tiered() {
				continue
			}
			m, err := b.tier.Manifest(ctx, p.BucketName())
			if err != nil {
				b.log.Warn("describe log dirs: read manifest", "topic", p.Topic(), "partition", p.Index(), "err", err)
				remote.ErrorCode = kerr.KafkaStorageError.Code
				remote.Topics = nil
				break
			}
			// The root's page summaries carry the total: no page is read.
			addLogDirPartition(&remote, p.Topic(), p.Index(), m.Totals().Bytes)
		}
		b.metrics.countError(kmsg.DescribeLogDirs, remote.ErrorCode)
		resp.Dirs = append(resp.Dirs, remote)
	}
	return resp, nil
}

// describedPartitions returns the hosted partitions a DescribeLogDirs
// request asks about (all of them for null topics), in topic and
// partition order.
func (b *Broker) describedPartitions(topics []kmsg.DescribeLogDirsRequestTopic) []*partition.Partition {
	all := b.partitionList()
	if topics != nil {
		want := make(map[tp]bool)
		for _, t := range topics {
			for _, i := range t.Partitions {
				want[tp{t.Topic, i}] = true
			}
		}
		all = slices.DeleteFunc(all, func(p *partition.Partition) bool { return !want[tp{p.Topic(), p.Index()}] })
	}
	slices.SortFunc(all, func(x, y *partition.Partition) int {
		return cmp.Or(cmp.Compare(x.Topic(), y.Topic()), cmp.Compare(x.Index(), y.Index()))
	})
	return all
}

// addLogDirPartition appends a partition's size to dir, grouping by topic;
// partitions arrive sorted by topic.
func addLogDirPartition(dir *kmsg.DescribeLogDirsResponseDir, topic string, index int32, size int64) {
	if n := len(dir.Topics); n == 0 || dir.Topics[n-1].Topic != topic {
		t := kmsg.NewDescribeLogDirsResponseDirTopic()
		t.Topic = topic
		dir.Topics = append(dir.Topics, t)
	}
	dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
	dp.Partition = index
	dp.Size = size
	t := &dir.Topics[len(dir.Topics)-1]
	t.Partitions = append(t.Partitions, dp)
}
