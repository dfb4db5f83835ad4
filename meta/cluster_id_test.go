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

// TestHistoryID: the first InitCluster command sets the history id with
// the cluster id, and later ones change neither; a cluster named before
// history ids existed takes the first one proposed for its own id, and
// the id survives a snapshot. A malformed one is refused.
func TestHistoryID(t *testing.T) {
	first, second := NewIncarnation(), NewIncarnation()

	h := newHarness(t)
	h.wantErr(errBadCommand, kindInitCluster, initClusterCmd{ID: "c", HistoryID: "not hex"})
	h.must(kindInitCluster, initClusterCmd{ID: "c", HistoryID: first})
	h.must(kindInitCluster, initClusterCmd{ID: "c", HistoryID: second})
	if got := h.f.state().HistoryID; got != first {
		t.Fatalf("history id %q, want the first one proposed %q", got, first)
	}

	old := newHarness(t)
	old.must(kindInitCluster, initClusterCmd{ID: "named-before"})
	old.must(kindInitCluster, initClusterCmd{ID: "another", HistoryID: first}) // not its id: ignored
	if got := old.f.state().HistoryID; got != "" {
		t.Fatalf("a command naming another cluster gave it history id %q", got)
	}
	old.must(kindInitCluster, initClusterCmd{ID: "named-before", HistoryID: second})
	old.must(kindInitCluster, initClusterCmd{ID: "named-before", HistoryID: first})
	if got := old.f.state().HistoryID; got != second {
		t.Fatalf("history id %q, want the first one proposed for its id %q", got, second)
	}
	var buf bytes.Buffer
	if err := encodeSnapshot(&buf, old.f.state()); err != nil {
		t.Fatal(err)
	}
	s, err := decodeSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if s.HistoryID != second || s.ClusterID != "named-before" {
		t.Fatalf("restored history id %q, cluster id %q", s.HistoryID, s.ClusterID)
	}
}
