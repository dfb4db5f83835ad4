package broker

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProduceLargeRecordsCompressedSmall: as in Kafka, max.message.bytes
// applies to the batch as sent. franz-go with a batch limit above it
// (ProducerBatchMaxBytes is an uncompressed size) sends three records of
// 1 MiB of zeros in one batch of a few KB; it is accepted, and a consumer
// reads the three records back whole (franz-go's own
// TestConsumeMaxDecompressBatchBytes starts this way).
func TestProduceLargeRecordsCompressedSmall(t *testing.T) {
	b := testBroker(t, "")
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"gzip", kgo.GzipCompression()}, {"zstd", kgo.ZstdCompression()}} {
		t.Run(c.name, func(t *testing.T) {
			topic := "large-" + c.name
			prod := testClient(t, b, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(4<<20),
				kgo.ProducerBatchCompression(c.codec), kgo.ManualFlushing())
			createTopic(t, kadmFor(prod), topic, 1, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			big := make([]byte, 1<<20)
			errs := make(chan error, 3)
			for range 3 {
				prod.Produce(ctx, &kgo.Record{Value: big}, func(_ *kgo.Record, err error) { errs <- err })
			}
			if err := prod.Flush(ctx); err != nil { // one batch of the three
				t.Fatal(err)
			}
			for range 3 {
				if err := <-errs; err != nil {
					t.Fatalf("produce three 1 MiB records compressed with %s: %v", c.name, err)
				}
			}

			cons := testClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
				kgo.FetchMaxBytes(8<<20), kgo.FetchMaxPartitionBytes(8<<20))
			var got []*kgo.Record
			for len(got) < 3 {
				fs := cons.PollFetches(ctx)
				if err := fs.Err0(); err != nil {
					t.Fatalf("consume after %d records: %v", len(got), err)
				}
				got = append(got, fs.Records()...)
			}
			for i, r := range got {
				if r.Offset != int64(i) || !bytes.Equal(r.Value, big) {
					t.Fatalf("record %d: offset %d, %d bytes; want offset %d, 1 MiB of zeros", i, r.Offset, len(r.Value), i)
				}
			}
			if len(got) != 3 {
				t.Fatalf("consumed %d records, want 3", len(got))
			}
		})
	}
}
