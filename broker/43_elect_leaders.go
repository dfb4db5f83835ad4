package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/meta"
)

// ElectLeaders: v0-2 (KIP-460)
//
// Preferred election (type 0) makes each named partition's first replica
// its leader when it is alive and in the ISR: ELECTION_NOT_NEEDED when it
// leads already, PREFERRED_LEADER_NOT_AVAILABLE when it cannot. Unclean
// election (type 1) gives a partition without a leader the first live
// replica, in the ISR or not, and may lose records: it is for an operator
// who chose availability. A null topic list means every partition.
// Answered by the controller (NOT_CONTROLLER elsewhere; clients send it
// there).
//
// Version notes: v1 ElectionType and the top-level error; v2 flexible.
//
// Authorization (Kafka's): ALTER on the cluster, else
// CLUSTER_AUTHORIZATION_FAILED (top-level from v1, and for every
// partition named).
func init() { register(kmsg.ElectLeaders, 0, 2, (*Broker).handleElectLeaders) }

func (b *Broker) handleElectLeaders(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.ElectLeadersRequest)
	resp := r.ResponseKind().(*kmsg.ElectLeadersResponse)
	timeout := time.Duration(r.TimeoutMillis) * time.Millisecond
	if timeout <= 0 || timeout > controlTimeout {
		timeout = controlTimeout
	}
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()

	var parts []meta.TopicPartition
	if r.Topics != nil {
		parts = []meta.TopicPartition{}
		for _, rt := range r.Topics {
			for _, p := range rt.Partitions {
				parts = append(parts, meta.TopicPartition{Topic: rt.Topic, Partition: p})
			}
		}
	}
	var results map[meta.TopicPartition]error
	err := error(kerr.ClusterAuthorizationFailed)
	if b.authorizedCluster(req, acl.Alter) {
		results, err = b.meta.ElectLeaders(ctx, r.ElectionType == 1, parts)
	} else {
		results = map[meta.TopicPartition]error{}
		for _, p := range parts {
			results[p] = err
		}
		if r.Version >= 1 {
			resp.ErrorCode, _ = b.answerError(kmsg.ElectLeaders, err)
		}
		err = nil
	}
	if err != nil {
		code, _ := b.answerError(kmsg.ElectLeaders, err)
		if r.Version >= 1 {
			resp.ErrorCode = code
			return resp, nil
		}
		// v0 has no top-level error: every partition gets it.
		results = map[meta.TopicPartition]error{}
		for _, p := range parts {
			results[p] = err
		}
	}
	byTopic := map[string]int{}
	for tp, perr := range results {
		i, ok := byTopic[tp.Topic]
		if !ok {
			t := kmsg.NewElectLeadersResponseTopic()
			t.Topic = tp.Topic
			resp.Topics = append(resp.Topics, t)
			i = len(resp.Topics) - 1
			byTopic[tp.Topic] = i
		}
		op := kmsg.NewElectLeadersResponseTopicPartition()
		op.Partition = tp.Partition
		if perr != nil {
			op.ErrorCode, op.ErrorMessage = b.answerError(kmsg.ElectLeaders, perr)
		}
		resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, op)
	}
	return resp, nil
}
