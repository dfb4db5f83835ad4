package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
)

// CreatePartitions: v0-3
//
// Raises a topic's partition count through the Raft metadata log (it can
// never shrink: INVALID_PARTITIONS). ValidateOnly checks and changes
// nothing. The new partitions' logs are open before the response.
//
// Version notes: v1 throttle; v2 flexible; v3 no change.
//
// Not done: explicit assignments for the new partitions other than onto
// registered brokers (placement is the controller's).
//
// Authorization (Kafka's): ALTER on each topic, else
// TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
func init() { register(kmsg.CreatePartitions, 0, 3, (*Broker).handleCreatePartitions) }

func (b *Broker) handleCreatePartitions(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.CreatePartitionsRequest)
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	count := make(map[string]int)
	for _, rt := range r.Topics {
		count[rt.Topic]++
	}
	// The checks below read this node's metadata, which must hold every
	// change acknowledged before (broker/node/metasync.go).
	b.node.SyncMetadata()
	changed := false
	for _, rt := range r.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		err := func() error {
			if count[rt.Topic] > 1 {
				return fmt.Errorf("%w: topic %q is named more than once", kerr.InvalidRequest, rt.Topic)
			}
			if !b.authorized(req, acl.Alter, acl.Topic, rt.Topic) {
				return kerr.TopicAuthorizationFailed
			}
			t, ok := b.node.TopicByName(rt.Topic)
			if !ok {
				return fmt.Errorf("%w: topic %q does not exist", kerr.UnknownTopicOrPartition, rt.Topic)
			}
			if err := node.CheckCreatePartitions(t); err != nil {
				return err
			}
			if rt.Count <= int32(len(t.Partitions)) {
				return fmt.Errorf("%w: topic %q has %d partitions; the new count %d must be larger", kerr.InvalidPartitions, rt.Topic, len(t.Partitions), rt.Count)
			}
			if rt.Assignment != nil && len(rt.Assignment) != int(rt.Count)-len(t.Partitions) {
				return fmt.Errorf("%w: %d assignments for %d new partitions", kerr.InvalidReplicaAssignment, len(rt.Assignment), int(rt.Count)-len(t.Partitions))
			}
			brokers := b.meta.State().Brokers
			for _, a := range rt.Assignment {
				for _, id := range a.Replicas {
					if _, ok := brokers[id]; !ok {
						return fmt.Errorf("%w: broker %d is not registered", kerr.InvalidReplicaAssignment, id)
					}
				}
			}
			if r.ValidateOnly {
				return nil
			}
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			defer cancel()
			if err := b.meta.CreatePartitions(ctx, rt.Topic, rt.Count); err != nil {
				return fmt.Errorf("create partitions of %q: %w", rt.Topic, err)
			}
			changed = true
			return nil
		}()
		if err != nil {
			st.ErrorCode, st.ErrorMessage = b.answerError(kmsg.CreatePartitions, err)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if changed {
		if err := b.node.Reconcile(); err != nil {
			b.log.Error("open new partitions", "err", err)
		}
	}
	return resp, nil
}
