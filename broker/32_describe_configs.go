package broker

import (
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
)

// DescribeConfigs: v1-4
//
// TOPIC resources: every topic config key Strata knows, with the value in
// force and where it comes from (topic override, broker default or Kafka
// default), optionally filtered to the requested keys. BROKER resources:
// the broker settings that shape topics and requests.
//
// Authorization (Kafka's): DESCRIBE_CONFIGS on the topic, or on the
// cluster for BROKER resources, else that resource is TOPIC_ or
// CLUSTER_AUTHORIZATION_FAILED.
//
// Version notes: v1 synonyms (IncludeSynonyms lists the broker default
// under a topic value); v3 config type and documentation; v4 flexible.
func init() { register(kmsg.DescribeConfigs, 1, 4, (*Broker).handleDescribeConfigs) }

// Kafka's ConfigResource types and config types used here.
const (
	resourceTopic  = 2
	resourceBroker = 4

	configTypeBoolean = 1
	configTypeString  = 2
	configTypeInt     = 3
	configTypeLong    = 5
	configTypeDouble  = 6
	configTypeList    = 7
)

func (b *Broker) handleDescribeConfigs(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeConfigsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	if slices.ContainsFunc(r.Resources, func(rr kmsg.DescribeConfigsRequestResource) bool { return rr.ResourceType == resourceTopic }) {
		// A config just altered through any node must read back here
		// (broker/node/metasync.go).
		b.node.SyncMetadata()
	}
	for _, rr := range r.Resources {
		sr := kmsg.NewDescribeConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		if e := b.configRefused(req, acl.DescribeConfigs, rr.ResourceType, rr.ResourceName); e != nil {
			sr.ErrorCode, sr.ErrorMessage = b.answerError(kmsg.DescribeConfigs, e)
			resp.Resources = append(resp.Resources, sr)
			continue
		}
		wanted := func(name string) bool {
			return rr.ConfigNames == nil || slices.Contains(rr.ConfigNames, name)
		}
		switch rr.ResourceType {
		case resourceTopic:
			t, ok := b.node.TopicByName(rr.ResourceName)
			if !ok {
				sr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				break
			}
			for _, name := range node.TopicConfigNames {
				if !wanted(name) {
					continue
				}
				v, src := b.node.TopicConfigValue(t.Configs, name)
				c := describedConfig(name, v, src, r.Version)
				if r.IncludeSynonyms && src == node.ConfigSourceTopic {
					if dv, ok := b.cfg.TopicDefaults[name]; ok {
						c.ConfigSynonyms = append(c.ConfigSynonyms, synonym(name, dv, node.ConfigSourceStaticBroker))
					}
					c.ConfigSynonyms = append(c.ConfigSynonyms, synonym(name, node.TopicConfigs[name].Default, node.ConfigSourceDefault))
				}
				if r.IncludeDocumentation {
					c.Documentation = kmsg.StringPtr(node.TopicConfigs[name].Doc)
				}
				sr.Configs = append(sr.Configs, c)
			}
		case resourceBroker:
			if rr.ResourceName != "" && rr.ResourceName != strconv.Itoa(int(b.cfg.NodeID)) {
				sr.ErrorCode = kerr.InvalidRequest.Code
				sr.ErrorMessage = kmsg.StringPtr("this broker is node " + strconv.Itoa(int(b.cfg.NodeID)))
				break
			}
			for _, kv := range b.brokerConfigs() {
				if wanted(kv[0]) {
					c := describedConfig(kv[0], kv[1], node.ConfigSourceStaticBroker, r.Version)
					c.ReadOnly = true
					sr.Configs = append(sr.Configs, c)
				}
			}
		default:
			sr.ErrorCode = kerr.InvalidRequest.Code
			sr.ErrorMessage = kmsg.StringPtr("only TOPIC and BROKER resources are described")
		}
		b.metrics.countError(kmsg.DescribeConfigs, sr.ErrorCode)
		resp.Resources = append(resp.Resources, sr)
	}
	return resp, nil
}

func describedConfig(name, value string, src int8, version int16) kmsg.DescribeConfigsResponseResourceConfig {
	c := kmsg.NewDescribeConfigsResponseResourceConfig()
	c.Name = name
	c.Value = kmsg.StringPtr(value)
	c.Source = kmsg.ConfigSource(src)
	c.IsDefault = src == node.ConfigSourceDefault
	if version >= 3 {
		c.ConfigType = kmsg.ConfigType(configType(value))
	}
	return c
}

func synonym(name, value string, src int8) kmsg.DescribeConfigsResponseResourceConfigConfigSynonym {
	s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
	s.Name = name
	s.Value = kmsg.StringPtr(value)
	s.Source = kmsg.ConfigSource(src)
	return s
}

// configType guesses Kafka's config type from a value's shape, which is
// enough for clients that only use it for display.
func configType(v string) int8 {
	if v == "true" || v == "false" {
		return configTypeBoolean
	}
	if _, err := strconv.ParseInt(v, 10, 32); err == nil {
		return configTypeInt
	}
	if _, err := strconv.ParseInt(v, 10, 64); err == nil {
		return configTypeLong
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return configTypeDouble
	}
	return configTypeString
}

// brokerConfigs are the broker settings DescribeConfigs reports, as
// Kafka-named key/value pairs.
func (b *Broker) brokerConfigs() [][2]string {
	out := [][2]string{
		{"node.id", strconv.Itoa(int(b.cfg.NodeID))},
		{"auto.create.topics.enable", strconv.FormatBool(b.cfg.AutoCreateTopics)},
		{"num.partitions", strconv.Itoa(int(b.cfg.DefaultPartitions))},
		{"socket.request.max.bytes", strconv.Itoa(int(b.cfg.MaxRequestBytes))},
		{"advertised.listeners", b.advertisedListeners()},
	}
	if b.cfg.Rack != "" {
		out = append(out, [2]string{"broker.rack", b.cfg.Rack})
	}
	for _, name := range node.TopicConfigNames {
		if v, ok := b.cfg.TopicDefaults[name]; ok {
			out = append(out, [2]string{"log." + name, v})
		}
	}
	return out
}
