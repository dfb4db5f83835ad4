package broker

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/partition"
)

// ListOffsets: v1-9
//
// Timestamps, and the special values that stand for positions:
//   - -2 earliest: the log start offset, in the bucket when the oldest
//     data is only there
//   - -1 latest: the high watermark, or under read_committed the last
//     stable offset
//   - -3 max timestamp (KIP-734, v7+): the first record with the largest
//     timestamp, in the bucket or the local log
//   - -4 earliest local (KIP-405, v8+): the local log start offset
//   - -5 latest tiered (KIP-1005, v9+): the highest offset in the bucket,
//     -1 when nothing is uploaded
//   - t >= 0: the first record whose timestamp is at least t, or -1,
//     looked up in the bucket first when it holds the oldest data
//
// Only committed records (below the high watermark) are ever returned,
// and under read_committed only records below the last stable offset, as
// in Kafka (a record of a transaction still open may yet be aborted).
// A new leader whose high watermark has not yet reached the start of its
// leader epoch answers latest, and a timestamp it finds no record for,
// with OFFSET_NOT_AVAILABLE (retriable), as Kafka does: it does not know
// yet how far its predecessor had committed. A
// special value below the version that introduced it, or any other
// negative value, is UNSUPPORTED_VERSION for that partition; a partition
// listed twice is INVALID_REQUEST for both entries.
//
// Authorization (Kafka's): DESCRIBE on each topic, else its partitions
// are TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
//
// Version notes: v2 isolation level; v4 CurrentLeaderEpoch (KIP-320) and
// LeaderEpoch in the response; v6 flexible.
func init() { register(kmsg.ListOffsets, 1, 9, (*Broker).handleListOffsets) }

func (b *Broker) handleListOffsets(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.ListOffsetsRequest)
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)

	seen := make(map[tp]int)
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			seen[tp{rt.Topic, rp.Partition}]++
		}
	}
	// A partition this node does not know it leads may be one of a topic
	// created a moment ago through another node (metasync.go); one that
	// it knows it leads needs no catching up.
	for _, rt := range r.Topics {
		if slices.ContainsFunc(rt.Partitions, func(rp kmsg.ListOffsetsRequestTopicPartition) bool {
			return !b.node.NamedLeader(rt.Topic, rp.Partition)
		}) {
			b.syncMetadataAndReconcile()
			break
		}
	}
	describable := b.topicAuth(req, acl.Describe)
	for _, rt := range r.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			var err error
			if !describable.ok(rt.Topic) {
				err = kerr.TopicAuthorizationFailed
			} else if seen[tp{rt.Topic, rp.Partition}] > 1 {
				err = kerr.InvalidRequest
			} else {
				err = b.listOffset(rt.Topic, rp, r.Version, r.IsolationLevel == 1, &sp)
			}
			if err != nil {
				sp.ErrorCode = errorCode(err)
				sp.Timestamp, sp.Offset = -1, -1
				b.metrics.countError(kmsg.ListOffsets, sp.ErrorCode)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

func (b *Broker) listOffset(topic string, rp kmsg.ListOffsetsRequestTopicPartition, version int16, committed bool, sp *kmsg.ListOffsetsResponseTopicPartition) error {
	p, err := b.led(topic, rp.Partition)
	if err != nil {
		return err
	}
	if err := p.CheckLeaderEpoch(rp.CurrentLeaderEpoch); err != nil {
		return err
	}
	sp.LeaderEpoch = p.LeaderEpoch()
	switch ts := rp.Timestamp; {
	case ts == partition.EarliestLocal && version < 8, ts == partition.MaxTimestamp && version < 7,
		ts == partition.LatestTiered && version < 9, ts < partition.LatestTiered:
		if ts != partition.EarliestLocal {
			// The partition's own checks come first, as for the
			// timestamps this version knows.
			if err := p.CheckRemoteKnown(); err != nil {
				return err
			}
		}
		return fmt.Errorf("%w: timestamp %d at ListOffsets v%d", kerr.UnsupportedVersion, ts, version)
	}
	sp.Offset, sp.Timestamp, err = p.ListOffset(rp.Timestamp, committed)
	return err
}
