package group

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// compactedBatch is a batch as log compaction leaves it: base offset and
// last offset delta as written, only the records at the given offset
// deltas (none: an empty batch kept as its producer's last).
func compactedBatch(base int64, lastDelta int32, deltas []int32, recs []record) []byte {
	b := buildBatch(recs, time.Now().UnixMilli())
	be := binary.BigEndian
	be.PutUint64(b, uint64(base))
	be.PutUint32(b[23:], uint32(lastDelta))
	be.PutUint32(b[57:], uint32(len(recs)))
	b = b[:batchHeaderLength]
	for i, r := range recs {
		var body []byte
		body = append(body, 0)
		body = kbin.AppendVarlong(body, 0)
		body = kbin.AppendVarint(body, deltas[i])
		body = kbin.AppendVarintBytes(body, r.key)
		body = kbin.AppendVarintBytes(body, r.value)
		body = kbin.AppendVarint(body, 0)
		b = kbin.AppendVarint(b, int32(len(body)))
		b = append(b, body...)
	}
	be.PutUint32(b[batchLengthAt:], uint32(len(b)-12))
	be.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchAttrsAt:], castagnoli))
	return b
}

// batchAtATime is an OffsetLog that returns one batch per Read, the one
// holding offset or else the next one, as a log read across compaction's
// gaps does, and records the offsets it was asked for.
type batchAtATime struct {
	batches [][]byte
	asked   []int64
}

func (l *batchAtATime) Append(context.Context, int32, []byte) (int64, error) {
	panic("batchAtATime is read-only")
}

func (l *batchAtATime) Read(dst []byte, _ int32, offset int64) ([]byte, error) {
	l.asked = append(l.asked, offset)
	for _, b := range l.batches {
		base := int64(binary.BigEndian.Uint64(b))
		if base+int64(binary.BigEndian.Uint32(b[23:])) >= offset {
			return append(dst, b...), nil
		}
	}
	return dst, nil
}

// TestLoadAcrossCompactionGaps: a compacted __consumer_offsets has gaps
// between batches and inside them, and empty batches; the loader moves on
// after each batch's last offset, reads each batch once, and ends with
// the latest value of every key.
func TestLoadAcrossCompactionGaps(t *testing.T) {
	commit := func(p int32, at int64) record {
		return record{key: offsetKey(testGroup, "t", p), value: offsetValue(offset{offset: at, leaderEpoch: -1, commitTime: time.Now().UnixMilli()})}
	}
	tombstone := record{key: offsetKey(testGroup, "t", 1)}
	log := &batchAtATime{batches: [][]byte{
		compactedBatch(0, 4, []int32{0, 4}, []record{commit(0, 5), commit(1, 6)}), // offsets 1-3 compacted away
		compactedBatch(10, 2, nil, nil),                                           // 5-9 gone; an empty batch kept
		compactedBatch(20, 0, []int32{0}, []record{commit(0, 8)}),
		compactedBatch(30, 9, []int32{9}, []record{tombstone}),
	}}
	c, err := New(Config{Partitions: 1, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Load(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	want := []int64{0, 5, 13, 21, 40}
	if len(log.asked) != len(want) {
		t.Fatalf("reads at %v, want %v", log.asked, want)
	}
	for i := range want {
		if log.asked[i] != want[i] {
			t.Fatalf("reads at %v, want %v", log.asked, want)
		}
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.Group = 7, testGroup
	req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0, 1}}}
	got := map[int32]int64{}
	for _, rt := range c.OffsetFetch(req).Topics {
		for _, rp := range rt.Partitions {
			got[rp.Partition] = rp.Offset
		}
	}
	if got[0] != 8 || got[1] != -1 {
		t.Errorf("offsets after the load: %v, want t-0 at 8 and t-1 deleted", got)
	}
}

// stuckLog returns its one batch whatever offset is asked for.
type stuckLog struct{ batch []byte }

func (l stuckLog) Append(context.Context, int32, []byte) (int64, error) {
	panic("stuckLog is read-only")
}

func (l stuckLog) Read(dst []byte, _ int32, _ int64) ([]byte, error) {
	return append(dst, l.batch...), nil
}

// TestLoadRefusesALogThatDoesNotMoveOn: a read that returns nothing past
// the offset asked for fails the load instead of looping on it.
func TestLoadRefusesALogThatDoesNotMoveOn(t *testing.T) {
	c, err := New(Config{Partitions: 1, Log: stuckLog{compactedBatch(0, 4, nil, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Load(ctx, 0); err == nil || ctx.Err() != nil {
		t.Fatalf("load of a log that returns the same batch at every offset: %v (ctx %v)", err, ctx.Err())
	}
}
