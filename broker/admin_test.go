package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
