package format

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var testID = [16]byte{0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0}

// The documented example (docs/bucket-format.md, worked example): <h> is
// the first 4 hex digits of `printf 'orders/0' | sha256sum`.
func TestKeyGolden(t *testing.T) {
	tp := TopicPartition{Topic: "orders", TopicID: testID, Partition: 0}
	uid := [16]byte{0xaa, 0xbb, 15: 0x01}
	for _, c := range []struct{ got, want string }{
		{tp.HashPrefix(), "63ed"},
		{tp.Prefix(), "63ed/orders-0f1e2d3c4b5a69788796a5b4c3d2e1f0/0/"},
		{SegmentKey{tp, 4096, 3, uid}.String(),
			"63ed/orders-0f1e2d3c4b5a69788796a5b4c3d2e1f0/0/segments/00000000000000004096-0000000003-aabb0000000000000000000000000001.seg"},
		{ManifestKey{tp, 3, 17}.String(),
			"63ed/orders-0f1e2d3c4b5a69788796a5b4c3d2e1f0/0/manifests/0000000003-00000000000000000017.manifest"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestKeyRoundTrip(t *testing.T) {
	topics := []string{"a", "orders", "orders.v1", "my_topic", "a-b-c", "-", "_", ".a", "..x", "x-0f1e2d3c4b5a69788796a5b4c3d2e1f0",
		strings.Repeat("z", 249), strings.Repeat("a.-_", 62)}
	for _, topic := range topics {
		for _, p := range []int32{0, 1, 10, math.MaxInt32} {
			tp := TopicPartition{Topic: topic, TopicID: testID, Partition: p}
			if err := tp.Validate(); err != nil {
				t.Fatalf("%+v: %v", tp, err)
			}
			for _, base := range []int64{0, 1, 1 << 40, math.MaxInt64} {
				for _, epoch := range []int32{0, 7, math.MaxInt32} {
					sk := SegmentKey{tp, base, epoch, NewUID()}
					s := sk.String()
					got, err := ParseSegmentKey(s)
					if err != nil || got != sk {
						t.Fatalf("ParseSegmentKey(%q) = %+v, %v; want %+v", s, got, err, sk)
					}
					if !strings.HasPrefix(s, tp.SegmentsPrefix()) || !strings.HasPrefix(tp.SegmentsPrefix(), tp.Prefix()) {
						t.Fatalf("%q is not under %q", s, tp.SegmentsPrefix())
					}
					mk := ManifestKey{tp, epoch, base}
					got2, err := ParseManifestKey(mk.String())
					if err != nil || got2 != mk {
						t.Fatalf("ParseManifestKey(%q) = %+v, %v; want %+v", mk.String(), got2, err, mk)
					}
					if !strings.HasPrefix(mk.String(), tp.ManifestsPrefix()) {
						t.Fatalf("%q is not under %q", mk.String(), tp.ManifestsPrefix())
					}
				}
			}
		}
	}
}

// Listing partition 1 must not return partition 10's objects.
func TestPrefixIsolatesPartitions(t *testing.T) {
	p1 := TopicPartition{Topic: "t", TopicID: testID, Partition: 1}
	p10 := TopicPartition{Topic: "t", TopicID: testID, Partition: 10}
	if strings.HasPrefix(SegmentKey{TopicPartition: p10}.String(), p1.Prefix()) {
		t.Fatal("partition 1's prefix matches partition 10's keys")
	}
	// A topic whose name extends another's is a different directory too.
	long := TopicPartition{Topic: "t-x", TopicID: testID, Partition: 1}
	if strings.HasPrefix(long.Prefix(), strings.TrimSuffix(p1.Prefix(), "/")) && long.HashPrefix() == p1.HashPrefix() {
		t.Fatal("topic t's prefix matches topic t-x")
	}
}

func TestTopicPartitionValidate(t *testing.T) {
	for _, tp := range []TopicPartition{
		{Topic: "", TopicID: testID},
		{Topic: ".", TopicID: testID},
		{Topic: "..", TopicID: testID},
		{Topic: strings.Repeat("a", 250), TopicID: testID},
		{Topic: "a/b", TopicID: testID},
		{Topic: "a b", TopicID: testID},
		{Topic: "é", TopicID: testID},
		{Topic: "a"},
		{Topic: "a", TopicID: testID, Partition: -1},
	} {
		if tp.Validate() == nil {
			t.Errorf("%+v: valid, want an error", tp)
		}
	}
}

func TestParseKeyRejects(t *testing.T) {
	tp := TopicPartition{Topic: "orders", TopicID: testID, Partition: 12}
	seg := SegmentKey{tp, 4096, 3, [16]byte{1}}.String()
	man := ManifestKey{tp, 3, 17}.String()
	bad := []string{
		"", "/", seg + "x", "x" + seg, "root/" + seg, strings.Replace(seg, ".seg", ".log", 1),
		strings.Replace(seg, "/segments/", "/manifests/", 1),
		strings.Replace(seg, tp.HashPrefix(), "0000", 1),                        // wrong hash
		strings.Replace(seg, "0f1e2d", "0F1E2D", 1),                             // uppercase topic ID
		strings.Replace(seg, "/12/", "/012/", 1),                                // leading zero
		strings.Replace(seg, "/12/", "/+12/", 1),                                //
		strings.Replace(seg, "-0000000003-", "-000000003x-", 1),                 // bad epoch
		strings.Replace(seg, "-0000000003-", "-9999999999-", 1),                 // epoch > MaxInt32
		strings.Replace(seg, "00000000000000004096", "99999999999999999999", 1), // base > MaxInt64
		strings.Replace(seg, "-0100", "-01", 1),                                 // short uid
		strings.Replace(seg, "orders-", "orders_", 1),                           // no separator
		man,
	}
	for _, k := range bad {
		if got, err := ParseSegmentKey(k); err == nil {
			t.Errorf("ParseSegmentKey(%q) = %+v, want an error", k, got)
		}
	}
	for _, k := range []string{seg, strings.Replace(man, ".manifest", ".json", 1), strings.Replace(man, "-0000", "_0000", 1),
		strings.Replace(man, "0000000003-", "9999999999-", 1)} {
		if got, err := ParseManifestKey(k); err == nil {
			t.Errorf("ParseManifestKey(%q) = %+v, want an error", k, got)
		}
	}
}

// A reader takes the lexically largest manifest key: that must be the
// largest (epoch, seq), so a deposed leader never shadows a newer one.
func TestManifestKeyOrder(t *testing.T) {
	tp := TopicPartition{Topic: "orders", TopicID: testID, Partition: 3}
	r := rand.New(rand.NewPCG(1, 2))
	var keys []ManifestKey
	for range 500 {
		keys = append(keys, ManifestKey{tp, r.Int32N(5) * int32(r.Int64N(1<<20)), r.Int64N(1 << 62)})
	}
	keys = append(keys, ManifestKey{tp, 0, math.MaxInt64}, ManifestKey{tp, 1, 0}, ManifestKey{tp, math.MaxInt32, math.MaxInt64})
	byString := slices.Clone(keys)
	slices.SortFunc(byString, func(a, b ManifestKey) int { return strings.Compare(a.String(), b.String()) })
	slices.SortFunc(keys, func(a, b ManifestKey) int {
		return cmp.Or(cmp.Compare(a.LeaderEpoch, b.LeaderEpoch), cmp.Compare(a.Seq, b.Seq))
	})
	if !slices.Equal(keys, byString) {
		t.Fatal("lexical order of manifest keys differs from (epoch, seq) order")
	}
}
