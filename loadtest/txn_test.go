package loadtest_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/loadtest"
	"strata/loadtest/loadtesttest"
)

// TestTransactionsKfake runs the transactional suite against kfake, whose
// transactions are Kafka's.
func TestTransactionsKfake(t *testing.T) {
	loadtesttest.RunTransactions(t, newCluster(t).ListenAddrs()[0])
}

// A read_committed verifying consumer must notice a broker that serves
// records of aborted transactions (Jepsen's "aborted read"). kfake is made
// to misbehave by answering every read_committed fetch as if it were
// read_uncommitted: without the aborted-transaction list, the client keeps
// the aborted records.
func TestVerifyDetectsAbortedReads(t *testing.T) {
	c := newCluster(t)
	bootstrap := c.ListenAddrs()[0]
	topic := loadtesttest.Topic(t)
	p, err := loadtest.Produce(t.Context(), loadtest.ProduceConfig{
		Bootstrap:       []string{bootstrap},
		Topic:           topic,
		Records:         300,
		Size:            32,
		Create:          true,
		Partitions:      2,
		TransactionalID: topic,
		TxnRecords:      30,
		TxnAbortEvery:   2,
		Verify:          true,
		Seed:            4,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil || p.AbortedRecords != 150 {
		t.Fatalf("produce: %d aborted records, err %v; want 150", p.AbortedRecords, err)
	}

	var downgraded atomic.Int64
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if f := req.(*kmsg.FetchRequest); f.IsolationLevel == 1 {
			f.IsolationLevel = 0
			downgraded.Add(1)
		}
		return nil, nil, false // kfake answers the rewritten request
	})
	got, err := loadtest.Consume(t.Context(), loadtest.ConsumeConfig{
		Bootstrap: []string{bootstrap},
		Topic:     topic,
		Duration:  20 * time.Second,
		Isolation: "read_committed",
		Verify:    true,
		Seed:      4,
	})
	if err != nil {
		t.Fatal(err)
	}
	if downgraded.Load() == 0 {
		t.Fatal("no read_committed fetch reached the broker")
	}
	if got.Verify.AbortedRead != 150 {
		t.Fatalf("verify report %+v, want 150 aborted reads", *got.Verify)
	}
	if err := got.Err(); err == nil || !strings.Contains(err.Error(), "150 aborted reads") {
		t.Fatalf("Result.Err() = %v, want it to say 150 aborted reads", err)
	}
}

// IsAborted tells a benchmark's own consumer which records a loadtest
// producer aborted: exactly those, read read_uncommitted.
func TestIsAborted(t *testing.T) {
	c := newCluster(t)
	bootstrap := c.ListenAddrs()[0]
	topic := loadtesttest.Topic(t)
	p, err := loadtest.Produce(t.Context(), loadtest.ProduceConfig{
		Bootstrap:       []string{bootstrap},
		Topic:           topic,
		Records:         200,
		Size:            16,
		Create:          true,
		Partitions:      2,
		TransactionalID: topic,
		TxnRecords:      20,
		TxnAbortEvery:   3,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil || p.AbortedRecords == 0 {
		t.Fatalf("produce: %d aborted records, err %v", p.AbortedRecords, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var records, aborted int64
	for records < p.Records+p.AbortedRecords {
		fs := cl.PollFetches(t.Context())
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			records++
			if loadtest.IsAborted(r) {
				aborted++
			}
		})
	}
	if aborted != p.AbortedRecords {
		t.Fatalf("IsAborted held for %d records of %d, want %d", aborted, records, p.AbortedRecords)
	}
}
