package broker

import (
	"cmp"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
	"strata/meta"
)

// Metadata: v0-12
//
// Brokers, the controller, and topics with their partitions, leaders,
// leader epochs, replicas, ISRs and offline replicas, read from the Raft
// metadata state. Only live (unfenced) brokers are listed; a partition
// without a leader is LEADER_NOT_AVAILABLE.
// Topics are requested by name or, from v10, by id (KIP-516); a null list
// means every topic (v1+). Unknown topics are auto-created when both the
// broker (auto.create.topics.enable) and, from v4, the request allow it.
//
// Not done: authorized operations (no ACLs yet; reported as not requested)
// and v13's top-level error code (KIP-1102).
func init() { register(kmsg.Metadata, 0, 12, (*Broker).handleMetadata) }

// authorizedOperationsOmitted is Kafka's "not requested" marker.
const authorizedOperationsOmitted = -2147483648

func (b *Broker) handleMetadata(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.MetadataRequest)
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	allowAuto := r.Version < 4 || r.AllowAutoTopicCreation

	// A client that was just told a topic was created or changed, by any
	// node, must see it here (broker/node/metasync.go).
	b.node.SyncMetadata()
	st := b.meta.State()
	for _, br := range sortedBrokers(st) {
		if !st.Alive(br.ID) {
			continue // fenced brokers are not offered to clients, as in KRaft
		}
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Rack = br.ID, rack(br)
		mb.Host, mb.Port = req.conn.endpoint(br)
		resp.Brokers = append(resp.Brokers, mb)
	}
	if id := b.node.ClusterID(); id != "" {
		resp.ClusterID = kmsg.StringPtr(id)
	} // else null, Kafka's "not known": the controller has not named the cluster yet
	resp.ControllerID = b.meta.ControllerID()
	resp.AuthorizedOperations = authorizedOperationsOmitted

	addTopic := func(t *meta.Topic) {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = kmsg.StringPtr(t.Name)
		mt.TopicID = t.ID
		mt.IsInternal = t.Internal
		mt.AuthorizedOperations = authorizedOperationsOmitted
		for _, p := range t.Partitions {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition = p.Index
			mp.Leader = p.Leader
			mp.LeaderEpoch = p.LeaderEpoch
			mp.Replicas = p.Replicas
			mp.ISR = p.ISR
			mp.OfflineReplicas = st.OfflineReplicas(p)
			if p.Leader < 0 {
				mp.ErrorCode = kerr.LeaderNotAvailable.Code
			}
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	missing := func(name *string, id [16]byte, err error) {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = name
		mt.TopicID = id
		mt.ErrorCode = errorCode(err)
		mt.AuthorizedOperations = authorizedOperationsOmitted
		b.metrics.countError(kmsg.Metadata, mt.ErrorCode)
		resp.Topics = append(resp.Topics, mt)
	}

	if r.Topics == nil && r.Version >= 1 || r.Version == 0 && len(r.Topics) == 0 {
		for _, name := range st.SortedTopicNames() {
			addTopic(st.Topics[name])
		}
		return resp, nil
	}
	for _, rt := range r.Topics {
		if rt.Topic == nil || *rt.Topic == "" {
			if rt.TopicID == ([16]byte{}) {
				missing(rt.Topic, rt.TopicID, kerr.InvalidRequest)
				continue
			}
			if t, ok := st.TopicByID(rt.TopicID); ok {
				addTopic(t)
			} else {
				missing(nil, rt.TopicID, kerr.UnknownTopicID)
			}
			continue
		}
		name := *rt.Topic
		if t, ok := st.Topics[name]; ok {
			addTopic(t)
			continue
		}
		if err := node.ValidateTopicName(name); err != nil {
			missing(rt.Topic, [16]byte{}, err)
			continue
		}
		if !allowAuto {
			missing(rt.Topic, [16]byte{}, kerr.UnknownTopicOrPartition)
			continue
		}
		if t, err := b.node.AutoCreate(b.ctx, name); err != nil {
			missing(rt.Topic, [16]byte{}, err)
		} else {
			addTopic(t)
		}
	}
	return resp, nil
}

// sortedBrokers returns the registered brokers in node id order.
func sortedBrokers(st *meta.State) []meta.Broker {
	return slices.SortedFunc(maps.Values(st.Brokers), func(a, b meta.Broker) int { return cmp.Compare(a.ID, b.ID) })
}
