package broker

import "github.com/twmb/franz-go/pkg/kmsg"

// OffsetCommit: v2-9
//
// Writes the offsets as OffsetCommitKey/Value records to the group's
// __consumer_offsets partition and answers once they are committed
// (acks=all). A commit with generation -1 and no member id is allowed for
// an empty or unknown group (manual assignment, admin tools).
//
// Version notes: v2-4 retention time, ignored as Kafka 2.1+ does (offsets
// expire offsets.retention.minutes after the group empties); v6 leader
// epoch (KIP-320); v7 group.instance.id (KIP-345); v8 flexible; v9 no
// change for classic groups (KIP-848).
//
// Not done: v10 (topic ids, KIP-848); offsets of unknown partitions are
// refused with UNKNOWN_TOPIC_OR_PARTITION.
func init() { register(kmsg.OffsetCommit, 2, 9, (*Broker).handleOffsetCommit) }

func (b *Broker) handleOffsetCommit(req *request) (kmsg.Response, error) {
	resp := b.groups.OffsetCommit(b.ctx, req.kreq.(*kmsg.OffsetCommitRequest))
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			b.metrics.countError(kmsg.OffsetCommit, p.ErrorCode)
		}
	}
	return resp, nil
}
