package broker

import (
	"context"
	"errors"
	"strata/broker/node"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Internal topics cannot be deleted, and the refusal is the code Apache
// Kafka answers for a topic the caller may not delete, not
// INVALID_REQUEST (which clients read as their own bug).
func TestDeleteInternalTopicRefused(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resps, err := adm.DeleteTopics(ctx, offsetsTopic)
	if err != nil {
		t.Fatal(err)
	}
	r := resps[offsetsTopic]
	if !errors.Is(r.Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("delete %s: err %v, want TOPIC_AUTHORIZATION_FAILED", offsetsTopic, r.Err)
	}
	if r.ErrMessage == "" {
		t.Errorf("no error message says why")
	}
	if _, ok := b.node.TopicByName(offsetsTopic); !ok {
		t.Fatalf("%s is gone", offsetsTopic)
	}
}

// Kafka refuses a topic whose name differs from an existing one only by
// '.' against '_' (a.b and a_b): both map to the same metric names.
func TestTopicNameCollision(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	createTopic(t, adm, "a.b", 1, nil)
	createTopic(t, adm, "x_y", 1, nil)
	for _, name := range []string{"a_b", "x.y"} {
		resp, err := adm.CreateTopic(ctx, 1, 1, nil, name)
		if err == nil {
			err = resp.Err
		}
		if !errors.Is(err, kerr.InvalidTopicException) {
			t.Errorf("create %s: err %v, want INVALID_TOPIC_EXCEPTION", name, err)
		}
		if _, ok := b.node.TopicByName(name); ok {
			t.Errorf("%s was created", name)
		}
	}
	// The same name is still "already exists", not a collision.
	resp, err := adm.CreateTopic(ctx, 1, 1, nil, "a.b")
	if err == nil {
		err = resp.Err
	}
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Errorf("create a.b again: err %v, want TOPIC_ALREADY_EXISTS", err)
	}
	// Auto-creation applies the same rule.
	cl := testClient(t, b, kgo.AllowAutoTopicCreation())
	r := cl.ProduceSync(ctx, &kgo.Record{Topic: "a_b", Value: []byte("v")})
	if err := r.FirstErr(); !errors.Is(err, kerr.InvalidTopicException) {
		t.Errorf("produce to a_b: err %v, want INVALID_TOPIC_EXCEPTION", err)
	}
}

// The older AlterConfigs replaces a topic's configs as a whole: keys left
// out go back to their defaults (kadm's AlterTopicConfigsState).
func TestLegacyAlterConfigs(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	createTopic(t, adm, "legacy", 1, map[string]*string{"retention.ms": ptr("3600000")})

	describe := func() map[string]kadm.Config {
		t.Helper()
		rcs, err := adm.DescribeTopicConfigs(ctx, "legacy")
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On("legacy", nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("describe: %v %v", err, rc.Err)
		}
		m := make(map[string]kadm.Config)
		for _, c := range rc.Configs {
			m[c.Key] = c
		}
		return m
	}

	// ValidateOnly and bad input change nothing.
	for _, tc := range []struct {
		name    string
		configs []kadm.AlterConfig
		want    error
	}{
		{"unknown key", []kadm.AlterConfig{{Name: "no.such.key", Value: ptr("1")}}, kerr.InvalidConfig},
		{"bad value", []kadm.AlterConfig{{Name: "retention.bytes", Value: ptr("lots")}}, kerr.InvalidConfig},
		{"null value", []kadm.AlterConfig{{Name: "retention.bytes"}}, kerr.InvalidRequest},
	} {
		resps, err := adm.AlterTopicConfigsState(ctx, tc.configs, "legacy")
		if err != nil {
			t.Fatal(err)
		}
		if len(resps) != 1 || !errors.Is(resps[0].Err, tc.want) {
			t.Errorf("%s: %+v, want %v", tc.name, resps, tc.want)
		}
	}
	if _, err := adm.ValidateAlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: ptr("1048576")}}, "legacy"); err != nil {
		t.Fatal(err)
	}
	if got := describe()["retention.ms"]; got.MaybeValue() != "3600000" {
		t.Fatalf("after refused and validate-only alters: retention.ms %q", got.MaybeValue())
	}

	resps, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: ptr("1048576")}}, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if len(resps) != 1 || resps[0].Err != nil {
		t.Fatalf("alter: %+v", resps)
	}
	got := describe()
	if c := got["retention.bytes"]; c.MaybeValue() != "1048576" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("retention.bytes = %q from %v, want 1048576 set on the topic", c.MaybeValue(), c.Source)
	}
	if c := got["retention.ms"]; c.Source == kmsg.ConfigSourceDynamicTopicConfig || c.MaybeValue() == "3600000" {
		t.Errorf("retention.ms = %q from %v, want the default back", c.MaybeValue(), c.Source)
	}
	if rb := b.partition("legacy", 0).Settings().Log.RetentionBytes; rb != 1048576 {
		t.Errorf("partition retention bytes %d, want 1048576", rb)
	}

	// A missing topic is named as such.
	resps, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: ptr("1")}}, "nope")
	if err != nil {
		t.Fatal(err)
	}
	if len(resps) != 1 || !errors.Is(resps[0].Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("missing topic: %+v", resps)
	}

	// The oldest version we serve, as raw frames: retention.ms set, and
	// retention.bytes, left out, back to its default.
	req := kmsg.NewPtrAlterConfigsRequest()
	req.Version = 0
	rr := kmsg.NewAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "legacy"
	rc := kmsg.NewAlterConfigsRequestResourceConfig()
	rc.Name, rc.Value = "retention.ms", ptr("7200000")
	rr.Configs = append(rr.Configs, rc)
	req.Resources = append(req.Resources, rr)
	resp := kmsg.NewPtrAlterConfigsResponse()
	resp.Version = 0
	if err := resp.ReadFrom(rawRoundTrip(t, b, req)); err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 || resp.Resources[0].ResourceName != "legacy" {
		t.Fatalf("v0: %+v", resp.Resources)
	}
	got = describe()
	ms, rb := got["retention.ms"], got["retention.bytes"]
	if ms.MaybeValue() != "7200000" || rb.Source == kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("after v0: retention.ms %q, retention.bytes from %v", ms.MaybeValue(), rb.Source)
	}
}

// TestLegacyAlterConfigsKeepsOffsetsTopicSettings: the older AlterConfigs
// replaces a topic's whole set, but the offsets topic's own settings
// (compaction, large segments) are its defaults: a request that leaves
// them out keeps them.
func TestLegacyAlterConfigsKeepsOffsetsTopicSettings(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resps, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: ptr("86400000")}}, offsetsTopic)
	if err != nil || len(resps) != 1 || resps[0].Err != nil {
		t.Fatalf("alter: %+v %v", resps, err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, offsetsTopic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(offsetsTopic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe: %v %v", err, rc.Err)
	}
	got := map[string]string{}
	for _, c := range rc.Configs {
		got[c.Key] = c.MaybeValue()
	}
	for k, v := range node.OffsetsTopicConfigs {
		if got[k] != v {
			t.Errorf("%s = %q after the alter, want %q", k, got[k], v)
		}
	}
	if got["retention.ms"] != "86400000" {
		t.Errorf("retention.ms = %q, want 86400000", got["retention.ms"])
	}
}

// A replication factor below 1 (other than -1, the default) is refused
// with INVALID_REPLICATION_FACTOR and a message saying it must be at least
// 1, not a comparison with the brokers alive, which reads as if more
// brokers would help (issue 21).
func TestCreateTopicReplicationFactorBelowOne(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, rf := range []int16{0, -5} {
		resp, err := adm.CreateTopic(ctx, 1, rf, nil, "rf-below-one")
		if err == nil {
			err = resp.Err
		}
		if !errors.Is(err, kerr.InvalidReplicationFactor) {
			t.Errorf("replication factor %d: err %v, want INVALID_REPLICATION_FACTOR", rf, err)
		}
		if !strings.Contains(resp.ErrMessage, "at least 1") || strings.Contains(resp.ErrMessage, "alive") {
			t.Errorf("replication factor %d: message %q, want one saying it must be at least 1", rf, resp.ErrMessage)
		}
	}
}
