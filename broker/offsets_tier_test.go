package broker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCompactedTopicsTier: a compacted topic with remote.storage.enable
// tiers like any other (issue 13): its closed segments go to the bucket,
// local retention deletes them once they are there, and a consumer from
// the earliest offset reads every record back, byte-identical and in
// order. Every key is distinct, so whatever compaction runs keeps them all.
func TestCompactedTopicsTier(t *testing.T) {
	for _, policy := range []string{"compact", "compact,delete"} {
		t.Run(policy, func(t *testing.T) {
			const partitions, n, size = 2, 4000, 200
			store := tierStores[0].open(t)
			b := tieredBroker(t, "", store)
			createTopic(t, testAdmin(t, b), "keyed", partitions, map[string]*string{
				"cleanup.policy":        ptr(policy),
				"remote.storage.enable": ptr("true"),
				"segment.bytes":         ptr("32768"),
				"local.retention.bytes": ptr("65536"),
			})
			// Small batches, so that segments roll every few of them.
			produceKeyed(t, b, "keyed", n, size, kgo.ProducerBatchMaxBytes(4<<10))
			waitFor(t, time.Minute, "local retention to delete uploaded segments", func() bool {
				for i := range int32(partitions) {
					if b.partition("keyed", i).log.StartOffset() == 0 {
						return false
					}
				}
				return true
			})
			waitUploaded(t, b, "keyed", partitions)
			for i := range int32(partitions) {
				p := b.partition("keyed", i)
				m, err := b.tier.Manifest(context.Background(), p.bucketName())
				if err != nil {
					t.Fatal(err)
				}
				if m.Empty() || m.LogStartOffset != 0 || m.EndOffset() < p.log.StartOffset() {
					t.Errorf("partition %d: bucket holds [%d, %d), local log starts at %d", i, m.LogStartOffset, m.EndOffset(), p.log.StartOffset())
				}
			}
			consumeExactlyOnce(t, b, "keyed", n, size)
		})
	}
}
