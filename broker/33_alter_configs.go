package broker

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
)

// AlterConfigs: v0-2
//
// The older, non-incremental way to change topic configs, which admin
// tools still call: a resource's configs become exactly those in the
// request, and every key left out goes back to its default. Every key and
// value is validated before anything is written (an unknown key is
// INVALID_CONFIG, a null value INVALID_REQUEST, as in Kafka); ValidateOnly
// writes nothing. Open partitions apply the new settings before the
// response. A resource named twice in one request is INVALID_REQUEST for
// each.
//
// Authorization (Kafka's), before the request is forwarded (gateAlterConfigs):
// ALTER_CONFIGS on the topic, or on the cluster for BROKER resources, else
// that resource is TOPIC_ or CLUSTER_AUTHORIZATION_FAILED.
//
// Version notes: v1 throttle behaviour only; v2 flexible.
//
// Not done: BROKER resources (broker settings are static: flags, file and
// environment). IncrementalAlterConfigs (KIP-339) is the API to prefer.
func init() {
	register(kmsg.AlterConfigs, 0, 2, (*Broker).handleAlterConfigs)
	registerGate(kmsg.AlterConfigs, gateAlterConfigs)
}

func (b *Broker) handleAlterConfigs(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.AlterConfigsRequest)
	resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
	type resource struct {
		typ  int8
		name string
	}
	count := make(map[resource]int)
	for _, rr := range r.Resources {
		count[resource{int8(rr.ResourceType), rr.ResourceName}]++
	}
	changed := false
	for _, rr := range r.Resources {
		sr := kmsg.NewAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		err := func() error {
			if count[resource{int8(rr.ResourceType), rr.ResourceName}] > 1 {
				return fmt.Errorf("%w: resource %q is named more than once", kerr.InvalidRequest, rr.ResourceName)
			}
			if rr.ResourceType != resourceTopic {
				return fmt.Errorf("%w: only topic configs can be altered", kerr.InvalidRequest)
			}
			t, ok := b.node.TopicByName(rr.ResourceName)
			if !ok {
				return fmt.Errorf("%w: topic %q does not exist", kerr.UnknownTopicOrPartition, rr.ResourceName)
			}
			set := make(map[string]string, len(rr.Configs))
			for _, c := range rr.Configs {
				if _, known := node.TopicConfigs[c.Name]; !known {
					return fmt.Errorf("%w: unknown topic config %q", kerr.InvalidConfig, c.Name)
				}
				if c.Value == nil {
					return fmt.Errorf("%w: %s: null values are not allowed; leave the key out to reset it", kerr.InvalidRequest, c.Name)
				}
				if err := node.ValidateTopicConfig(c.Name, *c.Value); err != nil {
					return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
				}
				set[c.Name] = *c.Value
			}
			if rr.ResourceName == offsetsTopic {
				// A key left out goes back to its default, and the offsets
				// topic's defaults are its own (compacted, large segments).
				for k, v := range node.OffsetsTopicConfigs {
					if _, ok := set[k]; !ok {
						set[k] = v
					}
				}
			}
			if err := node.CheckReadReplicaConfigs(set, t.Configs); err != nil {
				return err
			}
			if err := b.node.CheckMinInsync(set, t.Configs, node.ReplicationFactor(t)); err != nil {
				return err
			}
			if r.ValidateOnly {
				return nil
			}
			if err := b.alterTopicConfigs(rr.ResourceName, set, nil, true); err != nil {
				return err
			}
			changed = true
			return nil
		}()
		if err != nil {
			sr.ErrorCode, sr.ErrorMessage = b.answerError(kmsg.AlterConfigs, err)
		}
		resp.Resources = append(resp.Resources, sr)
	}
	if changed {
		b.applyConfigChanges()
	}
	return resp, nil
}
