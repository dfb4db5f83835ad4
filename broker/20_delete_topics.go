package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// DeleteTopics: v1-6
//
// Deletes topics by name (v1-5) or by name or id (v6+, KIP-516) through the
// Raft metadata log; the local logs are removed before the response, and
// long-polling fetches on them are woken.
//
// Internal topics (__consumer_offsets) cannot be deleted: the answer is
// TOPIC_AUTHORIZATION_FAILED with a message saying why. Apache Kafka has no
// check of its own for them (ControllerApis.deleteTopics refuses a topic
// only through the authorizer), so a Kafka cluster that protects its
// internal topics refuses with that code; INVALID_REQUEST would tell the
// client its request was malformed.
//
// Authorization (Kafka's ControllerApis): DELETE on the cluster, or
// DESCRIBE and DELETE on each topic. A topic named without DESCRIBE is
// TOPIC_AUTHORIZATION_FAILED whether it exists or not; one the principal
// may describe but not delete is TOPIC_AUTHORIZATION_FAILED once it is
// known to exist; a topic given by id that may not be deleted is
// TOPIC_AUTHORIZATION_FAILED, without its name unless it may be
// described.
//
// Version notes: v4 flexible; v5 ErrorMessage; v6 topic ids.
func init() { register(kmsg.DeleteTopics, 1, 6, (*Broker).handleDeleteTopics) }

func (b *Broker) handleDeleteTopics(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DeleteTopicsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)

	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if r.Version >= 6 {
		for _, t := range r.Topics {
			targets = append(targets, target{t.Topic, t.TopicID})
		}
	} else {
		for _, name := range r.TopicNames {
			n := name
			targets = append(targets, target{name: &n})
		}
	}
	// A topic created through another node a moment ago is not unknown
	// (broker/node/metasync.go).
	b.node.SyncMetadata()
	clusterDelete := b.allowed(req, acl.Delete, acl.Cluster, acl.ClusterName)
	may := func(op acl.Operation, name string) bool {
		return clusterDelete || b.authorized(req, op, acl.Topic, name)
	}
	deleted := false
	for _, tg := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = tg.name, tg.id
		err := func() error {
			state := b.meta.State()
			var name string
			switch {
			case tg.name != nil && *tg.name != "":
				name = *tg.name
				if !may(acl.Describe, name) {
					return kerr.TopicAuthorizationFailed
				}
				t, ok := state.Topics[name]
				if !ok {
					return fmt.Errorf("%w: topic %q does not exist", kerr.UnknownTopicOrPartition, name)
				}
				if tg.id != ([16]byte{}) && tg.id != t.ID {
					return fmt.Errorf("%w: topic %q has another id", kerr.UnknownTopicID, name)
				}
			case tg.id != ([16]byte{}):
				t, ok := state.TopicByID(tg.id)
				if !ok {
					return kerr.UnknownTopicID
				}
				name = t.Name
				if !may(acl.Delete, name) {
					if may(acl.Describe, name) {
						st.Topic = &t.Name
					}
					return kerr.TopicAuthorizationFailed
				}
				n := name
				st.Topic = &n
			default:
				return fmt.Errorf("%w: neither a topic name nor an id", kerr.InvalidRequest)
			}
			if !may(acl.Delete, name) {
				return kerr.TopicAuthorizationFailed
			}
			if t := state.Topics[name]; t.Internal {
				return fmt.Errorf("%w: %q is an internal topic; it cannot be deleted", kerr.TopicAuthorizationFailed, name)
			}
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			defer cancel()
			t, err := b.meta.DeleteTopic(ctx, name)
			if err != nil {
				return fmt.Errorf("delete topic %q: %w", name, err)
			}
			st.TopicID = t.ID
			deleted = true
			b.log.Info("topic deleted", "topic", name)
			return nil
		}()
		if err != nil {
			// ErrorMessage is sent from v5 on; kmsg leaves it out before.
			st.ErrorCode, st.ErrorMessage = b.answerError(kmsg.DeleteTopics, err)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if deleted {
		if err := b.node.Reconcile(); err != nil {
			b.log.Error("remove deleted partitions", "err", err)
		}
	}
	return resp, nil
}
