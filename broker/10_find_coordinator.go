package broker

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/group"
	"strata/broker/node"
)

// FindCoordinator: v0-6
//
// A group's coordinator is the leader of its __consumer_offsets partition,
// abs(groupID.hashCode()) mod the partition count, Kafka's formula; a
// transactional id's (key type 1) is the leader of its __transaction_state
// partition, by the same formula. Keys are batched from v4 (KIP-699).
//
// Version notes: v1 key type and error message; v3 flexible; v4 batched
// keys; v5-6 no change for groups (KIP-890, KIP-932 share-group keys).
//
// Not done: share-group keys (type 2) are INVALID_REQUEST.
func init() { register(kmsg.FindCoordinator, 0, 6, (*Broker).handleFindCoordinator) }

func (b *Broker) handleFindCoordinator(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.FindCoordinatorRequest)
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := r.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{r.CoordinatorKey}
	}
	for _, key := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID = key, -1
		if err := b.findCoordinator(key, r.CoordinatorType, &c); err != nil {
			c.ErrorCode, c.ErrorMessage = b.answerError(kmsg.FindCoordinator, err)
		} else if br, ok := b.meta.State().Brokers[c.NodeID]; ok {
			// The coordinator's endpoint on the listener the client came in on.
			c.Host, c.Port = req.conn.endpoint(br)
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	if r.Version < 4 {
		c := resp.Coordinators[0]
		resp.Coordinators = nil
		resp.ErrorCode, resp.ErrorMessage = c.ErrorCode, c.ErrorMessage
		resp.NodeID, resp.Host, resp.Port = c.NodeID, c.Host, c.Port
	}
	return resp, nil
}

func (b *Broker) findCoordinator(key string, typ int8, c *kmsg.FindCoordinatorResponseCoordinator) error {
	var topic string
	switch typ {
	case 0:
		topic = offsetsTopic
		if key == "" {
			return fmt.Errorf("%w: empty group id", kerr.InvalidRequest)
		}
	case 1:
		topic = node.TxnStateTopic
		if key == "" {
			return fmt.Errorf("%w: empty transactional id", kerr.InvalidRequest)
		}
		if b.txns == nil {
			return kerr.CoordinatorNotAvailable
		}
		if err := b.node.EnsureTxnTopic(b.ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: coordinator type %d is not supported", kerr.InvalidRequest, typ)
	}
	st := b.meta.State()
	t, ok := st.Topics[topic]
	if !ok || len(t.Partitions) == 0 {
		return fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, topic)
	}
	p := t.Partitions[group.Partition(key, int32(len(t.Partitions)))]
	br, ok := st.Brokers[p.Leader]
	if !ok {
		return fmt.Errorf("%w: %s-%d has no leader", kerr.CoordinatorNotAvailable, topic, p.Index)
	}
	c.NodeID, c.Host, c.Port = br.ID, br.Host, br.Port
	return nil
}
