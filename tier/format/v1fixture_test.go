package format_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
	"strata/tier/format"
)

// The version 1 bucket in testdata/v1bucket was written by the manifest
// version 1 code (testdata/v1bucket.gen.go.txt says how): topic "fixture",
// partition 0, records "v1 fixture record <offset>" in batches of two,
// batch i at timestamp 1760000000000 + 1000*i; retention left offsets
// [32, 80) in the bucket.
const (
	fixtureStart = 32
	fixtureEnd   = 80
	fixtureTs0   = 1760000000000
)

// bucket is a key -> bytes view of a directory store's files, to which
// writes go in memory.
type bucket map[string][]byte

func loadBucket(t *testing.T, dir string) bucket {
	t.Helper()
	b := bucket{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		b[filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// current returns the key of the current manifest of tp: the largest
// under its manifests/ prefix.
func (b bucket) current(tp format.TopicPartition) string {
	var keys []string
	for k := range b {
		if strings.HasPrefix(k, tp.ManifestsPrefix()) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[len(keys)-1]
}

func (b bucket) Page(_ context.Context, ref format.PageRef) (*format.Page, error) {
	data, ok := b[ref.Key]
	if !ok {
		return nil, fmt.Errorf("%s: not found", ref.Key)
	}
	return format.OpenPage(ref, data)
}

var fixtureTP = format.TopicPartition{Topic: "fixture", TopicID: [16]byte{15: 1}, Partition: 0}

// replay reads every offset of the root's range the way a remote reader
// does (root -> page -> segment -> index -> batch) and checks each record.
func replay(t *testing.T, b bucket, r *format.Root) {
	t.Helper()
	ctx := context.Background()
	if r.LogStartOffset != fixtureStart {
		t.Fatalf("log start %d", r.LogStartOffset)
	}
	for o := r.LogStartOffset; o < fixtureEnd; o++ {
		s, ok, err := r.Find(ctx, b, o)
		if err != nil || !ok {
			t.Fatalf("offset %d: %v %v", o, ok, err)
		}
		obj, ok := b[s.Key]
		if !ok {
			t.Fatalf("offset %d: object %s missing", o, s.Key)
		}
		if err := s.VerifyObject(bytes.NewReader(obj)); err != nil {
			t.Fatal(err)
		}
		pos, err := format.LookupOffset(obj[s.Index.Offset:s.Index.End()], s.BaseOffset, o)
		if err != nil {
			t.Fatal(err)
		}
		log := obj[:s.Log.End()]
		var h segment.BatchHeader
		for ; ; pos += int64(h.Size()) {
			if h, err = segment.ParseBatchHeader(log[pos:]); err != nil {
				t.Fatalf("offset %d: %v", o, err)
			}
			if h.LastOffset() >= o {
				break
			}
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(log[pos : pos+int64(h.Size())]); err != nil {
			t.Fatal(err)
		}
		recs := rb.Records
		for i := int64(0); ; i++ {
			l, n := binary.Varint(recs)
			var rec kmsg.Record
			if n <= 0 || rec.ReadFrom(recs[:n+int(l)]) != nil {
				t.Fatalf("offset %d: bad record", o)
			}
			if rb.FirstOffset+int64(rec.OffsetDelta) == o {
				if want := fmt.Sprintf("v1 fixture record %d", o); string(rec.Value) != want {
					t.Fatalf("offset %d: %q, want %q", o, rec.Value, want)
				}
				if ts := rb.FirstTimestamp + rec.TimestampDelta64; ts != fixtureTs0+1000*(o/2) {
					t.Fatalf("offset %d: timestamp %d", o, ts)
				}
				break
			}
			recs = recs[n+int(l):]
		}
	}
	for _, c := range []struct{ ts, base int64 }{{fixtureTs0, 32}, {fixtureTs0 + 1000*20, 32}, {fixtureTs0 + 1000*30, 48}, {fixtureTs0 + 1000*39, 64}} {
		s, ok, err := r.FindTimestamp(ctx, b, c.ts)
		if err != nil || !ok || s.BaseOffset != c.base {
			t.Fatalf("timestamp %d: segment %d %v %v, want %d", c.ts, s.BaseOffset, ok, err, c.base)
		}
	}
}

// A version 1 bucket reads through the paged reader, and after the first
// write (which pages it) every record still reads the same.
func TestV1FixtureUpgrade(t *testing.T) {
	b := loadBucket(t, "testdata/v1bucket")
	key := b.current(fixtureTP)
	r, err := format.DecodeRoot(b[key])
	if err != nil {
		t.Fatal(err)
	}
	if !r.V1 || r.LeaderEpoch != 1 || r.EndOffset() != fixtureEnd {
		t.Fatalf("fixture root: v1 %v epoch %d end %d", r.V1, r.LeaderEpoch, r.EndOffset())
	}
	replay(t, b, r)

	// The next upload, at epoch 1, with small pages so that the fixture's
	// segments move into them.
	last, _, _ := r.Find(context.Background(), b, fixtureEnd-1)
	next := last
	next.BaseOffset, next.LastOffset = fixtureEnd, fixtureEnd+15
	next.Key = format.SegmentKey{TopicPartition: fixtureTP, BaseOffset: fixtureEnd, LeaderEpoch: 1, UID: format.NewUID()}.String()
	next.LeaderEpochs = nil
	ch, err := r.Append(next, 1, format.Paging{PageSegments: 2, Fanout: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Pages) == 0 {
		t.Fatal("the first write left the version 1 segments inline")
	}
	for _, p := range ch.Pages {
		b[p.Ref.Key] = p.Data
	}
	enc, err := format.EncodeRoot(ch.Root)
	if err != nil {
		t.Fatal(err)
	}
	if k := ch.Root.Key(); k <= key {
		t.Fatalf("new root %s does not sort above %s", k, key)
	} else {
		b[k] = enc
	}
	r2, err := format.DecodeRoot(b[b.current(fixtureTP)])
	if err != nil {
		t.Fatal(err)
	}
	if r2.V1 || len(r2.Pages) == 0 || r2.EndOffset() != fixtureEnd+16 {
		t.Fatalf("upgraded root: v1 %v, %d pages, end %d", r2.V1, len(r2.Pages), r2.EndOffset())
	}
	replay(t, b, r2)
}
