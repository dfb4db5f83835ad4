package loadtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/loadtest"
	"strata/loadtest/loadtesttest"
)

// produceForeign writes n records that loadtest did not write (no loadtest
// header) to topic, spread over its partitions.
func produceForeign(t *testing.T, bootstrap, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		r := &kgo.Record{Value: []byte("someone else's record " + strings.Repeat("x", i))}
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// A verifying consumer on a topic that also holds records other clients
// wrote says so (once, as a count) instead of calling them corrupt, and
// still stops by itself at the end offsets rather than running to
// --duration.
func TestVerifySkipsForeignRecords(t *testing.T) {
	bootstrap := newCluster(t).ListenAddrs()[0]
	for _, withRun := range []bool{true, false} {
		topic := loadtesttest.Topic(t)
		verified := int64(0)
		if withRun {
			p, err := loadtest.Produce(t.Context(), loadtest.ProduceConfig{
				Bootstrap: []string{bootstrap}, Topic: topic, Records: 200, Size: 16,
				Idempotent: true, Create: true, Partitions: 2, Verify: true, Seed: 4,
			})
			if err != nil || p.Err() != nil {
				t.Fatalf("produce: %v %v", err, p.Err())
			}
			verified = 200
		} else {
			cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
			if err != nil {
				t.Fatal(err)
			}
			_, err = kadm.NewClient(cl).CreateTopic(t.Context(), 2, 1, nil, topic)
			cl.Close()
			if err != nil {
				t.Fatalf("create: %v", err)
			}
		}
		produceForeign(t, bootstrap, topic, 7)

		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		got, err := loadtest.Consume(ctx, loadtest.ConsumeConfig{
			Bootstrap: []string{bootstrap}, Topic: topic,
			Duration: time.Hour, // far beyond the test: it must stop by itself
			Verify:   true, Seed: 4,
		})
		stoppedItself := ctx.Err() == nil
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !stoppedItself {
			t.Fatalf("with a run %v: the verifying consumer did not stop at the end offsets", withRun)
		}
		v := got.Verify
		if v.Foreign != 7 || v.Corrupt != 0 || got.Err() != nil {
			t.Errorf("with a run %v: report %+v (err %v), want 7 foreign records and nothing wrong", withRun, *v, got.Err())
		}
		var inParts int64
		for _, pr := range v.Partitions {
			inParts += pr.Records
		}
		if inParts != verified {
			t.Errorf("with a run %v: %d records verified, want %d", withRun, inParts, verified)
		}

		// The command says so in one line of its summary.
		out, err := loadtesttest.RunCommand(t, "consume", "--bootstrap", bootstrap, "--topic", topic,
			"--duration", "1h", "--verify", "--seed", "4")
		if err != nil {
			t.Fatalf("consume command: %v\n%s", err, out)
		}
		if n := strings.Count(out, "not written by"); n != 1 {
			t.Errorf("summary mentions the foreign records %d times:\n%s", n, out)
		}
	}
}
