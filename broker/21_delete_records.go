package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// DeleteRecords: v0-2
//
// Moves each partition's log start offset to the given offset (-1: the
// high watermark), across both tiers: the local log stops serving what is
// below it and deletes the segments wholly below it, and the bucket's
// manifest gets the new start, its objects wholly below it deleted by the
// collector after the orphan grace. ListOffsets (-2) and fetches honour
// it at once; LowWatermark is the log start after. Only the leader
// answers; an offset above the high watermark is OFFSET_OUT_OF_RANGE.
// Followers take the new start from their next fetch.
//
// Authorization (Kafka's): DELETE on each topic, else its partitions are
// TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
//
// Version notes: v2 flexible.
//
// Differs from Kafka: the answer comes once the leader has moved its own
// log start, not once every replica has (Kafka's low watermark of all
// replicas); followers follow within a fetch.
func init() { register(kmsg.DeleteRecords, 0, 2, (*Broker).handleDeleteRecords) }

func (b *Broker) handleDeleteRecords(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DeleteRecordsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	timeout := time.Duration(r.TimeoutMillis) * time.Millisecond
	if timeout <= 0 || timeout > controlTimeout {
		timeout = controlTimeout
	}
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	deletable := b.topicAuth(req, acl.Delete)
	for _, rt := range r.Topics {
		ot := kmsg.NewDeleteRecordsResponseTopic()
		ot.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			op := kmsg.NewDeleteRecordsResponseTopicPartition()
			op.Partition = rp.Partition
			op.LowWatermark = -1
			low, err := int64(-1), error(kerr.TopicAuthorizationFailed)
			if deletable.ok(rt.Topic) {
				low, err = b.deleteRecords(ctx, rt.Topic, rp.Partition, rp.Offset)
			}
			if err != nil {
				op.ErrorCode, _ = b.answerError(kmsg.DeleteRecords, err)
			} else {
				op.LowWatermark = low
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, nil
}

// deleteRecords moves one partition's log start to offset and returns
// the log start after.
func (b *Broker) deleteRecords(ctx context.Context, topic string, index int32, offset int64) (int64, error) {
	p, err := b.led(topic, index)
	if err != nil {
		return -1, err
	}
	return p.DeleteRecords(ctx, offset)
}
