package meta

import (
	"bytes"
	"testing"
)

// TestInitClusterOnce: the cluster's id is set by the first InitCluster
// command and never changed after (two controllers of successive terms
// may both propose one), and it survives a snapshot.
func TestInitClusterOnce(t *testing.T) {
	h := newHarness(t)
	h.wantErr(errBadCommand, kindInitCluster, initClusterCmd{})
	h.must(kindInitCluster, initClusterCmd{ID: "first"})
	h.must(kindInitCluster, initClusterCmd{ID: "second"})
	if got := h.f.state().ClusterID; got != "first" {
		t.Fatalf("cluster id %q, want the first one proposed", got)
	}
	h.brokers(1) // a later command keeps it
	var buf bytes.Buffer
	if err := encodeSnapshot(&buf, h.f.state()); err != nil {
		t.Fatal(err)
	}
	s, err := decodeSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if s.ClusterID != "first" {
		t.Fatalf("restored cluster id %q", s.ClusterID)
	}
}

// TestNewClusterIDs: ids spelled as Kafka's (22 characters of base64url),
// never alike.
func TestNewClusterIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewClusterID()
		if len(id) != 22 || id[0] == '-' || seen[id] {
			t.Fatalf("cluster id %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
}
