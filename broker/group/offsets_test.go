package group

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOffsetFetchLayouts: OffsetFetch answers one group before v8 and a
// batch from v8 (KIP-709). A topic named twice is answered once, -1 stands
// where nothing is committed, null topics ask for every committed offset,
// and an error is top-level from v2 but carried by every partition in v1.
func TestOffsetFetchLayouts(t *testing.T) {
	h := newHarness(t, Config{})
	h.commit("", 7)
	single := func(version int16, topics []kmsg.OffsetFetchRequestTopic) string {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group, req.Topics = version, testGroup, topics
		r := h.c.OffsetFetch(req)
		var b strings.Builder
		fmt.Fprintf(&b, "%s:", code(r.ErrorCode))
		for _, rt := range r.Topics {
			fmt.Fprintf(&b, " %s[", rt.Topic)
			for _, rp := range rt.Partitions {
				fmt.Fprintf(&b, " %d@%d/%d%q:%s", rp.Partition, rp.Offset, rp.LeaderEpoch, *rp.Metadata, code(rp.ErrorCode))
			}
			b.WriteString(" ]")
		}
		return b.String()
	}
	batch := func(groups ...kmsg.OffsetFetchRequestGroup) string {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Groups = 8, groups
		var b strings.Builder
		for _, rg := range h.c.OffsetFetch(req).Groups {
			fmt.Fprintf(&b, "%s=%s:", rg.Group, code(rg.ErrorCode))
			for _, rt := range rg.Topics {
				fmt.Fprintf(&b, " %s[", rt.Topic)
				for _, rp := range rt.Partitions {
					fmt.Fprintf(&b, " %d@%d/%d%q", rp.Partition, rp.Offset, rp.LeaderEpoch, *rp.Metadata)
				}
				b.WriteString(" ]")
			}
			b.WriteString("; ")
		}
		return b.String()
	}
	expect := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", what, got, want)
		}
	}
	twice := []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0}}, {Topic: "u", Partitions: []int32{1}}, {Topic: "t", Partitions: []int32{2}}}
	expect("v7, a topic named twice", single(7, twice), `OK: t[ 0@7/3"":OK 2@-1/-1"":OK ] u[ 1@-1/-1"":OK ]`)
	expect("v7, null topics", single(7, nil), `OK: t[ 0@7/3"":OK ]`)
	// "a" lives in the same offsets partition as the test group.
	other := "a"
	if Partition(other, 3) != Partition(testGroup, 3) {
		t.Fatalf("pick another group: %q is in partition %d", other, Partition(other, 3))
	}
	expect("v8", batch(
		kmsg.OffsetFetchRequestGroup{Group: testGroup, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{0, 1}}}},
		kmsg.OffsetFetchRequestGroup{Group: other},
		kmsg.OffsetFetchRequestGroup{Group: other, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{0}}}},
	), `g=OK: t[ 0@7/3"" 1@-1/-1"" ]; a=OK:; a=OK: t[ 0@-1/-1"" ]; `)

	h.c.Unload(Partition(testGroup, 3))
	expect("v1, not the coordinator", single(1, twice[:2]), `OK: t[ 0@-1/-1"":NOT_COORDINATOR ] u[ 1@-1/-1"":NOT_COORDINATOR ]`)
	expect("v2, not the coordinator", single(2, twice[:2]), `NOT_COORDINATOR:`)
	expect("v8, not the coordinator", batch(kmsg.OffsetFetchRequestGroup{Group: testGroup, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{0}}}}), `g=NOT_COORDINATOR:; `)
}
