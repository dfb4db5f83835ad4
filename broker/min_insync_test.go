package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMinInsyncAboveReplicationFactorRefused (issue 21, item 6): a
// min.insync.replicas no ISR can reach, more than the replication factor,
// would make every acks=all produce time out. Kafka accepts it; Strata
// refuses it with INVALID_CONFIG and a message naming both numbers, at
// CreateTopics (validate-only too), AlterConfigs and
// IncrementalAlterConfigs, whether the value is the topic's own or the
// broker default it would inherit. Nothing refused is created or changed.
// A single broker allows only replication factor 1.
func TestMinInsyncAboveReplicationFactorRefused(t *testing.T) {
	type step struct {
		name string
		// do runs one admin request and returns its per-resource
		// message and error.
		do   func(ctx context.Context, adm *kadm.Client) (string, error)
		want []string // message parts; nil: accepted
	}
	create := func(name string, validate bool, configs map[string]*string) func(context.Context, *kadm.Client) (string, error) {
		return func(ctx context.Context, adm *kadm.Client) (string, error) {
			f := adm.CreateTopics
			if validate {
				f = adm.ValidateCreateTopics
			}
			rs, err := f(ctx, 1, 1, configs, name)
			if err != nil {
				return "", err
			}
			r := rs[name]
			return r.ErrMessage, r.Err
		}
	}
	incremental := func(topic string, cs ...kadm.AlterConfig) func(context.Context, *kadm.Client) (string, error) {
		return func(ctx context.Context, adm *kadm.Client) (string, error) {
			rs, err := adm.AlterTopicConfigs(ctx, cs, topic)
			if err != nil || len(rs) != 1 {
				return "", err
			}
			return rs[0].ErrMessage, rs[0].Err
		}
	}
	replace := func(topic string, cs ...kadm.AlterConfig) func(context.Context, *kadm.Client) (string, error) {
		return func(ctx context.Context, adm *kadm.Client) (string, error) {
			rs, err := adm.AlterTopicConfigsState(ctx, cs, topic)
			if err != nil || len(rs) != 1 {
				return "", err
			}
			return rs[0].ErrMessage, rs[0].Err
		}
	}
	set := func(k, v string) kadm.AlterConfig {
		return kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: ptr(v)}
	}
	del := func(k string) kadm.AlterConfig { return kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k} }
	topicWords := []string{"min.insync.replicas 2", "replication factor 1"}

	tests := []struct {
		name          string
		brokerDefault string // min.insync.replicas broker default; "" none
		steps         []step
		// topic "t", when it exists at the end, has these configs.
		wantTopic map[string]string
		wantNone  []string // topics that must not exist
	}{
		{
			name: "topic config",
			steps: []step{
				{"create min.insync 2", create("bad", false, map[string]*string{"min.insync.replicas": ptr("2")}), topicWords},
				{"validate-only create min.insync 2", create("bad", true, map[string]*string{"min.insync.replicas": ptr("2")}), topicWords},
				{"create min.insync 1", create("t", false, map[string]*string{"min.insync.replicas": ptr("1")}), nil},
				{"incremental set 2", incremental("t", set("min.insync.replicas", "2")), topicWords},
				{"incremental set 3 with another key", incremental("t", set("retention.ms", "1000"), set("min.insync.replicas", "3")), []string{"min.insync.replicas 3", "replication factor 1"}},
				{"replace with 2", replace("t", set("min.insync.replicas", "2")), topicWords},
				{"incremental set retention", incremental("t", set("retention.ms", "2000")), nil},
			},
			wantTopic: map[string]string{"min.insync.replicas": "1", "retention.ms": "2000"},
			wantNone:  []string{"bad"},
		},
		{
			name:          "broker default",
			brokerDefault: "2",
			steps: []step{
				{"create inheriting 2", create("bad", false, nil), []string{"broker default min.insync.replicas 2", "replication factor 1"}},
				{"create overriding with 1", create("t", false, map[string]*string{"min.insync.replicas": ptr("1")}), nil},
				{"incremental delete back to the default", incremental("t", del("min.insync.replicas")), []string{"broker default min.insync.replicas 2", "replication factor 1"}},
				{"replace leaving it out", replace("t", set("retention.ms", "1000")), []string{"broker default min.insync.replicas 2", "replication factor 1"}},
				{"incremental set retention", incremental("t", set("retention.ms", "3000")), nil},
			},
			wantTopic: map[string]string{"min.insync.replicas": "1", "retention.ms": "3000"},
			wantNone:  []string{"bad"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := testBroker(t, "", func(c *Config) {
				if tt.brokerDefault != "" {
					c.TopicDefaults = map[string]string{"min.insync.replicas": tt.brokerDefault}
				}
			})
			adm := testAdmin(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, s := range tt.steps {
				msg, err := s.do(ctx, adm)
				if s.want == nil {
					if err != nil {
						t.Errorf("%s: %v %s", s.name, err, msg)
					}
					continue
				}
				if !errors.Is(err, kerr.InvalidConfig) {
					t.Errorf("%s: err %v (%s), want INVALID_CONFIG", s.name, err, msg)
					continue
				}
				for _, w := range s.want {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: message %q does not say %q", s.name, msg, w)
					}
				}
			}
			for _, name := range tt.wantNone {
				if _, ok := b.node.TopicByName(name); ok {
					t.Errorf("topic %s was created", name)
				}
			}
			tp, ok := b.node.TopicByName("t")
			if !ok {
				t.Fatal("topic t was not created")
			}
			for k, v := range tt.wantTopic {
				if tp.Configs[k] != v {
					t.Errorf("topic t: %s=%q, want %q (configs %v)", k, tp.Configs[k], v, tp.Configs)
				}
			}
		})
	}
}

// Auto-creation takes the broker's defaults as they are, as Kafka's does:
// a broker default min.insync.replicas above the default replication
// factor does not fail a producer that never asked for acks=all. An
// acks=all producer is then answered NOT_ENOUGH_REPLICAS, which names
// the cause.
func TestAutoCreateTakesTheMinInsyncDefault(t *testing.T) {
	b := testBroker(t, "", func(c *Config) {
		c.AutoCreateTopics = true
		c.TopicDefaults = map[string]string{"min.insync.replicas": "2"}
	})
	cl := testClient(t, b, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("acks=1 produce to an auto-created topic: %v", err)
	}
	all := testClient(t, b, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(0))
	if err := all.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("v")}).FirstErr(); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all produce: %v, want NOT_ENOUGH_REPLICAS", err)
	}
}
