package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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
	if _, ok := b.topicByName(offsetsTopic); !ok {
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
		if _, ok := b.topicByName(name); ok {
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
