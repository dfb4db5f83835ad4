package main

import (
	"context"
	encbin "encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// TestTierVerbsReadPages: `tier ls`, `status` and `verify` read a paged
// manifest (root, index pages, leaf pages) from a bucket alone, and
// verify names a damaged page.
func TestTierVerbsReadPages(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	store, err := objstore.NewDir(filepath.Join(dataDir, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir(), Paging: format.Paging{PageSegments: 2, Fanout: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	l, err := segment.Open(t.TempDir(), segment.Config{SegmentBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 60 {
		if _, err := l.Append(pagedTestBatch(fmt.Sprintf("record %d %s", i, strings.Repeat("x", 200))), 0); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := l.ClosedSegments(0)
	if err != nil || len(segs) < 10 {
		t.Fatalf("%d closed segments, %v", len(segs), err)
	}
	tp := format.TopicPartition{Topic: "paged", TopicID: [16]byte{0xab, 15: 1}, Partition: 0}
	for _, s := range segs {
		if _, err := tr.Upload(ctx, tp, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := tr.Manifest(ctx, tp)
	if len(m.Pages) == 0 {
		t.Fatal("no pages: the test needs a paged manifest")
	}
	all, err := tr.Segments(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	noBroker := []string{"--bootstrap", "127.0.0.1:1", "--timeout", "2s", "--data-dir", dataDir}

	out := cliOK(t, nil, append([]string{"tier", "ls", "paged", "0"}, noBroker...)...)
	if !strings.Contains(out, fmt.Sprintf("%d segments", len(segs))) {
		t.Errorf("tier ls:\n%s", out)
	}
	for _, s := range all {
		if !strings.Contains(out, s.Key) {
			t.Errorf("tier ls does not list %s:\n%s", s.Key, out)
		}
	}
	if out := cliOK(t, nil, append([]string{"tier", "status", "paged"}, noBroker...)...); !strings.Contains(out, fmt.Sprintf(" %d ", len(segs))) {
		t.Errorf("tier status does not count %d segments:\n%s", len(segs), out)
	}
	if out := cliOK(t, nil, append([]string{"tier", "verify"}, noBroker...)...); !strings.Contains(out, "manifest page") || !strings.Contains(out, "all good") {
		t.Errorf("tier verify:\n%s", out)
	}

	// A damaged leaf page: verify fails and says which.
	var leaf string
	if err := m.Walk(ctx, tier.NewPageSource(store, 0), func(ref *format.PageRef, _ *format.RemoteSegment) error {
		if ref != nil && ref.Level == 0 && leaf == "" {
			leaf = ref.Key
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if leaf == "" {
		t.Fatalf("no leaf page in the root: %+v", m.Pages)
	}
	path := filepath.Join(dataDir, "bucket", filepath.FromSlash(leaf))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := runCLI(t, nil, append([]string{"tier", "verify"}, noBroker...)...)
	if code == 0 || !strings.Contains(stdout, "FAIL "+m.Key()) || !strings.Contains(stdout, leaf) {
		t.Errorf("tier verify with a damaged page: exit %d\n%s", code, stdout)
	}
}

// pagedTestBatch encodes a v2 record batch of one record.
func pagedTestBatch(value string) []byte {
	rb := kmsg.RecordBatch{Magic: 2, NumRecords: 1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1}
	r := kmsg.Record{Value: []byte(value)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	rb.Records = r.AppendTo(nil)
	raw := rb.AppendTo(nil)
	encbin.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	encbin.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}
