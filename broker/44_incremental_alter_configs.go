package broker

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
)

// IncrementalAlterConfigs: v0-1
//
// Sets or deletes individual topic configs through the Raft metadata log
// (KIP-339); APPEND and SUBTRACT work on list-valued keys
// (cleanup.policy). Every key and value is validated before anything is
// written; ValidateOnly writes nothing. Open partitions apply the new
// settings before the response.
//
// Authorization (Kafka's), before the request is forwarded (gateAlterConfigs):
// ALTER_CONFIGS on the topic, the group, or the cluster for BROKER and
// BROKER_LOGGER resources, else that resource is TOPIC_, GROUP_ or
// CLUSTER_AUTHORIZATION_FAILED.
//
// Version notes: v1 flexible.
//
// Not done: BROKER resources (broker settings are static: flags, file and
// environment).
func init() {
	register(kmsg.IncrementalAlterConfigs, 0, 1, (*Broker).handleIncrementalAlterConfigs)
	registerGate(kmsg.IncrementalAlterConfigs, gateAlterConfigs)
}

// IncrementalAlterConfigs operations.
const (
	opSet      = 0
	opDelete   = 1
	opAppend   = 2
	opSubtract = 3
)

func (b *Broker) handleIncrementalAlterConfigs(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.IncrementalAlterConfigsRequest)
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	changed := false
	for _, rr := range r.Resources {
		sr := kmsg.NewIncrementalAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		err := func() error {
			if rr.ResourceType != resourceTopic {
				return fmt.Errorf("%w: only topic configs can be altered", kerr.InvalidRequest)
			}
			t, ok := b.node.TopicByName(rr.ResourceName)
			if !ok {
				return fmt.Errorf("%w: topic %q does not exist", kerr.UnknownTopicOrPartition, rr.ResourceName)
			}
			set := make(map[string]string)
			var del []string
			for _, c := range rr.Configs {
				if _, known := node.TopicConfigs[c.Name]; !known {
					return fmt.Errorf("%w: unknown topic config %q", kerr.InvalidConfig, c.Name)
				}
				switch c.Op {
				case opSet:
					if c.Value == nil {
						return fmt.Errorf("%w: %s: SET needs a value", kerr.InvalidConfig, c.Name)
					}
					set[c.Name] = *c.Value
				case opDelete:
					del = append(del, c.Name)
				case opAppend, opSubtract:
					if c.Name != "cleanup.policy" || c.Value == nil {
						return fmt.Errorf("%w: %s is not a list", kerr.InvalidConfig, c.Name)
					}
					cur, _ := b.node.TopicConfigValue(t.Configs, c.Name)
					set[c.Name] = editList(cur, *c.Value, c.Op == opAppend)
				default:
					return fmt.Errorf("%w: unknown operation %d", kerr.InvalidRequest, c.Op)
				}
			}
			for k, v := range set {
				if err := node.ValidateTopicConfig(k, v); err != nil {
					return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
				}
			}
			// The configs as the metadata will apply them: sets, then deletes.
			after := maps.Clone(t.Configs)
			if after == nil {
				after = map[string]string{}
			}
			maps.Copy(after, set)
			for _, k := range del {
				delete(after, k)
			}
			if err := node.CheckReadReplicaConfigs(after, t.Configs); err != nil {
				return err
			}
			if err := b.node.CheckMinInsync(after, t.Configs, node.ReplicationFactor(t)); err != nil {
				return err
			}
			if r.ValidateOnly {
				return nil
			}
			if err := b.alterTopicConfigs(rr.ResourceName, set, del, false); err != nil {
				return err
			}
			changed = true
			return nil
		}()
		if err != nil {
			sr.ErrorCode, sr.ErrorMessage = b.answerError(kmsg.IncrementalAlterConfigs, err)
		}
		resp.Resources = append(resp.Resources, sr)
	}
	if changed {
		b.applyConfigChanges()
	}
	return resp, nil
}

// editList appends or removes the comma-separated items of edit in list.
func editList(list, edit string, add bool) string {
	var items []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			items = append(items, s)
		}
	}
	for _, e := range strings.Split(edit, ",") {
		e = strings.TrimSpace(e)
		idx := -1
		for i, s := range items {
			if s == e {
				idx = i
			}
		}
		switch {
		case add && idx < 0 && e != "":
			items = append(items, e)
		case !add && idx >= 0:
			items = append(items[:idx], items[idx+1:]...)
		}
	}
	return strings.Join(items, ",")
}

// alterTopicConfigs records a change of topic name's configs in the
// metadata: set and del edit them, or with replace set becomes the whole
// set. Both AlterConfigs versions come here.
func (b *Broker) alterTopicConfigs(name string, set map[string]string, del []string, replace bool) error {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := b.meta.AlterConfigs(ctx, name, set, del, replace); err != nil {
		return fmt.Errorf("alter configs of %q: %w", name, err)
	}
	return nil
}

// applyConfigChanges brings the hosted partitions in step with config
// changes just recorded.
func (b *Broker) applyConfigChanges() {
	if err := b.node.Reconcile(); err != nil {
		b.log.Error("apply config change", "err", err)
	}
}
