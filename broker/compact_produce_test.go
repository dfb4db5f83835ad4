package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A compacted topic keeps the latest record of each key, so a record
// without a key is refused on produce (INVALID_RECORD), as Kafka does;
// keyed records, and keyless ones on other topics, go in.
func TestProduceToCompactedTopicNeedsKeys(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	createTopic(t, adm, "table", 1, map[string]*string{"cleanup.policy": ptr("compact")})
	createTopic(t, adm, "both", 1, map[string]*string{"cleanup.policy": ptr("compact,delete")})
	createTopic(t, adm, "plain", 1, nil)
	cl := testClient(t, b, kgo.RecordRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, topic := range []string{"table", "both"} {
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("no key")}).FirstErr()
		if !errors.Is(err, kerr.InvalidRecord) {
			t.Errorf("%s: a record without a key: %v, want INVALID_RECORD", topic, err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
			t.Errorf("%s: a keyed record: %v", topic, err)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "plain", Value: []byte("no key")}).FirstErr(); err != nil {
		t.Errorf("plain topic: a record without a key: %v", err)
	}
}
