package broker

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"
)

// TestColdPartitionsCarryFirstUnstableOffset: the bucket holds closed
// segments only, but a transaction may be open across them; the cold
// pass of a partition this node leads is bounded by the leader's first
// unstable offset (docs/compaction.md).
func TestColdPartitionsCarryFirstUnstableOffset(t *testing.T) {
	store := tierStores[0].open(t)
	b := compactingBroker(t, "", nil, func(c *Config) {
		c.Tier = TierConfig{Store: store, UploadInterval: time.Hour, ChunkBytes: 1 << 20, CacheBytes: 8 << 20}
	})
	createTopic(t, testAdmin(t, b), "txn-cold", 1, map[string]*string{
		"cleanup.policy":        ptr("compact"),
		"remote.storage.enable": ptr("true"),
	})
	p := b.partition("txn-cold", 0)
	epoch, leading := p.LeaderEpochIfLeading()
	if !leading {
		t.Fatal("not leading the partition")
	}
	if _, err := p.Log().Append(keyedBatch(-1, -1, -1, time.Now().UnixMilli(), "a", "1"), epoch); err != nil {
		t.Fatal(err)
	}
	// A transaction opens at offset 1, as a transactional produce would
	// leave it.
	tb := keyedBatch(7, 0, 0, time.Now().UnixMilli(), "k", "v")
	binary.BigEndian.PutUint16(tb[21:], binary.BigEndian.Uint16(tb[21:])|0x10)
	binary.BigEndian.PutUint32(tb[17:], crc32.Checksum(tb[21:], crc32.MakeTable(crc32.Castagnoli)))
	info, err := p.Log().Append(tb, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range b.node.CompactionHost().ColdPartitions() {
		if cp.TP.Topic != "txn-cold" {
			continue
		}
		if cp.FirstUnstableOffset == nil {
			t.Fatal("cold partition without the leader's first unstable offset")
		}
		if fuo, ok := cp.FirstUnstableOffset(); !ok || fuo != info.BaseOffset {
			t.Fatalf("first unstable offset %d (%v), want %d", fuo, ok, info.BaseOffset)
		}
		return
	}
	t.Fatal("the partition is not among the cold partitions")
}
