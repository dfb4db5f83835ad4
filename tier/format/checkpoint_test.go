package format

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
)

const testHistory = "5d41402abc4b2a76b9719d911017c592"

func testCheckpoint() *Checkpoint {
	return &Checkpoint{
		ClusterID: "Qpf_INRvSWqY8QWSqDtxRQ", History: testHistory, Index: 42, WrittenMs: 1796216529360, WrittenBy: 1,
		NextProducerID: 3000,
		Topics: []CheckpointTopic{{
			Name: "orders", ID: "0123456789abcdef0123456789abcdef", ReplicationFactor: 3,
			Configs: map[string]string{"retention.ms": "-1"},
			Partitions: []CheckpointPartition{
				{Partition: 0, Replicas: []int32{1, 2, 3}, LeaderEpoch: 4, Manifest: ManifestVersionOf(ManifestKey{LeaderEpoch: 4, Seq: 17}), LogStart: 0, End: 1000},
				{Partition: 1, Replicas: []int32{2, 3, 1}, LeaderEpoch: 0},
			},
		}},
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	c := testCheckpoint()
	b, err := EncodeCheckpoint(c)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n != 2 {
		t.Fatalf("encoded checkpoint has %d lines, want 2:\n%s", n, b)
	}
	got, err := ParseCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 1 || got.Index != 42 || got.NextProducerID != 3000 || len(got.Topics) != 1 {
		t.Fatalf("round trip: %+v", got)
	}
	p := got.Topics[0].Partitions[0]
	if e, s, ok := p.ManifestVersion(); !ok || e != 4 || s != 17 {
		t.Fatalf("manifest version %q parsed as %d %d %v", p.Manifest, e, s, ok)
	}
	if _, _, ok := got.Topics[0].Partitions[1].ManifestVersion(); ok {
		t.Fatal("a partition with no manifest parsed one")
	}
	if got.Topics[0].TopicID() != [16]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef} {
		t.Fatalf("topic id %x", got.Topics[0].TopicID())
	}
}

func TestCheckpointRejects(t *testing.T) {
	good, err := EncodeCheckpoint(testCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	reencode := func(f func(*Checkpoint)) []byte {
		c := testCheckpoint()
		c.Version = 1
		f(c)
		// Bypass EncodeCheckpoint's validation: a reader must not trust
		// the writer.
		b, err := encodeUnchecked(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "no checksum line"},
		{"no trailer", good[:bytes.IndexByte(good, '\n')+1], "no checksum line"},
		{"flipped byte", bytes.Replace(good, []byte("orders"), []byte("ordert"), 1), "checksum mismatch"},
		{"future version", reencode(func(c *Checkpoint) { c.Version = 2 }), "format version 2"},
		{"no cluster", reencode(func(c *Checkpoint) { c.ClusterID = "" }), "no cluster_id"},
		{"no history", reencode(func(c *Checkpoint) { c.History = "" }), "history"},
		{"bad history", reencode(func(c *Checkpoint) { c.History = "5D41402ABC4B2A76B9719D911017C592" }), "history"},
		{"bad topic name", reencode(func(c *Checkpoint) { c.Topics[0].Name = "a/b" }), "illegal character"},
		{"bad id", reencode(func(c *Checkpoint) { c.Topics[0].ID = "xyz" }), "has id"},
		{"zero rf", reencode(func(c *Checkpoint) { c.Topics[0].ReplicationFactor = 0 }), "replication factor 0"},
		{"gap", reencode(func(c *Checkpoint) { c.Topics[0].Partitions[1].Partition = 2 }), "lists partition 2 at position 1"},
		{"offsets", reencode(func(c *Checkpoint) { c.Topics[0].Partitions[0].End = -1 }), "offsets"},
		{"manifest", reencode(func(c *Checkpoint) { c.Topics[0].Partitions[0].Manifest = "x" }), "manifest version"},
		{"twice", reencode(func(c *Checkpoint) { c.Topics = append(c.Topics, c.Topics[0]) }), "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCheckpoint(tc.b)
			if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseCheckpoint = %v, want ErrCheckpoint mentioning %q", err, tc.want)
			}
		})
	}
}

func TestCheckpointKey(t *testing.T) {
	k := CheckpointKey{History: testHistory, Index: 1234, WrittenMs: 1796216529360}
	s := k.String()
	if s != "metadata/checkpoints/"+testHistory+"/00000000000000001234-00000001796216529360.checkpoint" {
		t.Fatalf("key %q", s)
	}
	got, err := ParseCheckpointKey(s)
	if err != nil || got != k {
		t.Fatalf("ParseCheckpointKey(%q) = %+v, %v", s, got, err)
	}
	later := CheckpointKey{History: testHistory, Index: 1235, WrittenMs: 1}
	if !(later.String() > s) {
		t.Fatal("a later index does not sort above")
	}
	for _, bad := range []string{"metadata/checkpoints/1-2.checkpoint", "metadata/checkpoints/x", "cluster.json",
		"metadata/checkpoints/" + testHistory + "/00000000000000001234-00000001796216529360.json",
		"metadata/checkpoints/00000000000000001234-00000001796216529360.checkpoint",
		"metadata/checkpoints/5D41402ABC4B2A76B9719D911017C592/00000000000000001234-00000001796216529360.checkpoint",
		"metadata/checkpoints/5d41402abc/00000000000000001234-00000001796216529360.checkpoint"} {
		if _, err := ParseCheckpointKey(bad); err == nil {
			t.Errorf("ParseCheckpointKey(%q) accepted", bad)
		}
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	good, _ := EncodeCheckpoint(testCheckpoint())
	f.Add(good)
	f.Add([]byte("{}\ncrc32c:00000000\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCheckpoint(b)
		if err != nil {
			return
		}
		// What parses encodes again, and parses to the same.
		b2, err := EncodeCheckpoint(c)
		if err != nil {
			t.Fatalf("parsed checkpoint does not encode: %v", err)
		}
		if _, err := ParseCheckpoint(b2); err != nil {
			t.Fatalf("re-encoded checkpoint does not parse: %v", err)
		}
	})
}

// encodeUnchecked frames c as EncodeCheckpoint does, without validating.
func encodeUnchecked(c *Checkpoint) ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	return fmt.Appendf(b, "%s%08x\n", trailerPrefix, crc32.Checksum(b, castagnoli)), nil
}
