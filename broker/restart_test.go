package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestartKeepsTopicsConfigsAndOffsets: after a clean restart the topic
// is there with the same id, partition count and configs, every record is
// still at its offset, and ListOffsets by timestamp finds the right record
// even when the answer is in an older segment.
func TestRestartKeepsTopicsConfigsAndOffsets(t *testing.T) {
	dir := t.TempDir()
	b := testBroker(t, dir)
	cl := testClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadmFor(cl)
	created := createTopic(t, adm, "durable", 2, map[string]*string{
		"segment.bytes": ptr("4096"), // many segments, so lookups cross boundaries
		"retention.ms":  ptr("-1"),
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	const n = 400
	for i := 0; i < n; i++ {
		r := &kgo.Record{
			Topic:     "durable",
			Partition: 0,
			Value:     fmt.Appendf(nil, "record-%04d-%0200d", i, i),
			Timestamp: base.Add(time.Duration(i) * time.Second),
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = testBroker(t, dir)
	cl = testClient(t, b)
	adm = kadmFor(cl)
	td, err := adm.ListTopics(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	got := td["durable"]
	if got.Err != nil || got.ID != created.ID || len(got.Partitions) != 2 {
		t.Fatalf("after restart: %+v (id %v, want %v)", got, got.ID, created.ID)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rc.On("durable", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	for _, c := range cfg.Configs {
		found[c.Key] = c.MaybeValue()
	}
	if found["segment.bytes"] != "4096" || found["retention.ms"] != "-1" {
		t.Fatalf("configs after restart: segment.bytes=%q retention.ms=%q", found["segment.bytes"], found["retention.ms"])
	}

	ends, err := adm.ListEndOffsets(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	if end, _ := ends.Lookup("durable", 0); end.Offset != n {
		t.Fatalf("end offset after restart %d, want %d", end.Offset, n)
	}
	if files := segmentFiles(t, b, "durable", 0); files < 5 {
		t.Fatalf("only %d segments; the test wants lookups across segment boundaries", files)
	}

	// By timestamp: each probe lands in a different segment.
	for _, i := range []int{0, 1, 57, 150, 151, 299, 399} {
		offs, err := adm.ListOffsetsAfterMilli(ctx, base.Add(time.Duration(i)*time.Second).UnixMilli(), "durable")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup("durable", 0)
		if o.Err != nil || o.Offset != int64(i) {
			t.Fatalf("offset for timestamp of record %d: %d (%v)", i, o.Offset, o.Err)
		}
	}
	// Between two records' timestamps: the later one.
	offs, _ := adm.ListOffsetsAfterMilli(ctx, base.Add(99*time.Second+500*time.Millisecond).UnixMilli(), "durable")
	if o, _ := offs.Lookup("durable", 0); o.Offset != 100 {
		t.Fatalf("offset for a timestamp between records 99 and 100: %d", o.Offset)
	}
	// After the last record: none (-1, Kafka's "no such offset").
	offs, _ = adm.ListOffsetsAfterMilli(ctx, base.Add(time.Hour).UnixMilli(), "durable")
	if o, _ := offs.Lookup("durable", 0); o.Offset != -1 && o.Offset != n {
		t.Fatalf("offset for a timestamp after every record: %d", o.Offset)
	}

	// And every record reads back at its offset.
	cons := testClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"durable": {0: kgo.NewOffset().At(0)}}))
	for seen := 0; seen < n; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d", seen, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			want := fmt.Sprintf("record-%04d-%0200d", r.Offset, r.Offset)
			if string(r.Value) != want || r.Offset != int64(seen) {
				t.Fatalf("offset %d: %.20q", r.Offset, r.Value)
			}
			if !r.Timestamp.Equal(base.Add(time.Duration(r.Offset) * time.Second)) {
				t.Fatalf("offset %d: timestamp %v", r.Offset, r.Timestamp)
			}
			seen++
		})
	}
}
