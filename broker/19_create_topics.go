package broker

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
)

// CreateTopics: v2-7
//
// Creates topics through the Raft metadata log, validating names, partition
// counts, replication factors and every config key and value first (an
// unknown key is INVALID_CONFIG, never silently stored). ValidateOnly runs
// the same checks and creates nothing. NumPartitions and ReplicationFactor
// of -1 take the broker defaults (KIP-464). A topic named twice in one
// request is INVALID_REQUEST for each.
//
// Version notes: v4 broker defaults for -1; v5 flexible, and configs in
// the response (KIP-525); v7 topic id in the response (KIP-516).
//
// Authorization (Kafka's): CREATE on the cluster, or on each topic (else
// TOPIC_AUTHORIZATION_FAILED); the configs in the response (v5+) need
// DESCRIBE_CONFIGS on the topic, else they are left out and
// TopicConfigErrorCode is TOPIC_AUTHORIZATION_FAILED.
//
// An explicit replica assignment places each partition on the listed
// registered brokers, the first its preferred leader; the lists must be
// equally long and number the partitions 0 to n-1. Without one the
// controller places replicas on alive brokers (docs/replication.md).
func init() { register(kmsg.CreateTopics, 2, 7, (*Broker).handleCreateTopics) }

func (b *Broker) handleCreateTopics(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.CreateTopicsRequest)
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)

	count := make(map[string]int)
	for _, rt := range r.Topics {
		count[rt.Topic]++
	}
	// The checks below read this node's metadata: a topic deleted through
	// another node a moment ago must not be "already there" (broker/node/metasync.go).
	b.node.SyncMetadata()
	clusterCreate := b.allowed(req, acl.Create, acl.Cluster, acl.ClusterName)
	for _, rt := range r.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		st.NumPartitions, st.ReplicationFactor = -1, -1
		var err error
		switch {
		case count[rt.Topic] > 1:
			err = fmt.Errorf("%w: topic %q is named more than once", kerr.InvalidRequest, rt.Topic)
		case !clusterCreate && !b.authorized(req, acl.Create, acl.Topic, rt.Topic):
			err = kerr.TopicAuthorizationFailed
		default:
			err = b.createFromRequest(r, rt, b.allowed(req, acl.DescribeConfigs, acl.Topic, rt.Topic), &st)
		}
		if err != nil {
			st.ErrorCode, st.ErrorMessage = b.answerError(kmsg.CreateTopics, err)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// createFromRequest creates one topic of a request; describeConfigs says
// whether the response may show its configs.
func (b *Broker) createFromRequest(r *kmsg.CreateTopicsRequest, rt kmsg.CreateTopicsRequestTopic, describeConfigs bool, st *kmsg.CreateTopicsResponseTopic) error {
	c := node.TopicCreate{
		Name:              rt.Topic,
		Partitions:        rt.NumPartitions,
		ReplicationFactor: rt.ReplicationFactor,
		Configs:           make(map[string]string),
		ValidateOnly:      r.ValidateOnly,
	}
	if len(rt.ReplicaAssignment) > 0 {
		if rt.NumPartitions != -1 || rt.ReplicationFactor != -1 {
			return fmt.Errorf("%w: with a replica assignment, partitions and replication factor must be -1", kerr.InvalidRequest)
		}
		brokers := b.meta.State().Brokers
		for _, a := range rt.ReplicaAssignment {
			if len(a.Replicas) != len(rt.ReplicaAssignment[0].Replicas) {
				return fmt.Errorf("%w: partitions have different replica counts", kerr.InvalidReplicaAssignment)
			}
			for _, id := range a.Replicas {
				if _, ok := brokers[id]; !ok {
					return fmt.Errorf("%w: broker %d is not registered", kerr.InvalidReplicaAssignment, id)
				}
			}
		}
		c.Partitions = int32(len(rt.ReplicaAssignment))
		c.ReplicationFactor = int16(len(rt.ReplicaAssignment[0].Replicas))
		c.Assignment = make([][]int32, c.Partitions)
		for _, a := range rt.ReplicaAssignment {
			if a.Partition < 0 || a.Partition >= c.Partitions || c.Assignment[a.Partition] != nil {
				return fmt.Errorf("%w: partitions must be numbered 0 to %d, each once", kerr.InvalidReplicaAssignment, c.Partitions-1)
			}
			c.Assignment[a.Partition] = a.Replicas
		}
	}
	for _, kv := range rt.Configs {
		if kv.Value == nil {
			continue // null means "use the default"
		}
		c.Configs[kv.Name] = *kv.Value
	}
	t, err := b.node.CreateTopic(b.ctx, &c)
	if err != nil {
		return err
	}
	st.TopicID = t.ID
	st.NumPartitions, st.ReplicationFactor = c.Partitions, c.ReplicationFactor
	if r.Version >= 5 && !describeConfigs {
		st.ConfigErrorCode = kerr.TopicAuthorizationFailed.Code
	} else if r.Version >= 5 {
		for _, name := range node.TopicConfigNames {
			v, src := b.node.TopicConfigValue(c.Configs, name)
			rc := kmsg.NewCreateTopicsResponseTopicConfig()
			rc.Name = name
			rc.Value = kmsg.StringPtr(v)
			rc.Source = src
			st.Configs = append(st.Configs, rc)
		}
	}
	return nil
}
