package extension

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzRestoreRequest feeds arbitrary bodies to the StrataRestore request
// decoder: it must never panic, and what it accepts must encode and
// decode again to the same request.
func FuzzRestoreRequest(f *testing.F) {
	for _, r := range []*RestoreRequest{
		{},
		{Topics: []string{"orders", "__consumer_offsets"}, DryRun: true, TimeoutMillis: 3600000},
	} {
		f.Add(r.AppendTo(nil))
	}
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 4, 'n', 'u', 'l', 'l'})
	f.Fuzz(func(t *testing.T, body []byte) {
		var r RestoreRequest
		if err := r.ReadFrom(body); err != nil {
			return
		}
		enc := r.AppendTo(nil)
		var again RestoreRequest
		if err := again.ReadFrom(enc); err != nil {
			t.Fatalf("re-encoded request does not decode: %v", err)
		}
		if !reflect.DeepEqual(r, again) || !bytes.Equal(again.AppendTo(nil), enc) {
			t.Fatalf("decode is not stable: %+v then %+v", r, again)
		}
	})
}

// TestRestoreRoundTrip: a response with a plan reads back as written, and
// bodies that are not one whole JSON document are errors.
func TestRestoreRoundTrip(t *testing.T) {
	resp := &RestoreResponse{ErrorCode: 42, ErrorMessage: "refused", Plan: &RestorePlan{
		Checkpoint: "metadata/checkpoints/x", ClusterID: "c", Index: 7,
		Topics: []RestoreTopic{{Name: "t", ID: "00", Action: "create", ReplicationFactor: 1,
			Partitions: []RestorePartition{{Partition: 0, LeaderEpoch: 3, LogStart: 5, End: 10, Bytes: 99}}}},
	}}
	var got RestoreResponse
	if err := got.ReadFrom(resp.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, resp) {
		t.Fatalf("got %+v, want %+v", got, resp)
	}
	for name, body := range map[string][]byte{
		"empty":      nil,
		"short":      {0, 0, 0, 9, '{', '}'},
		"trailing":   {0, 0, 0, 2, '{', '}', 0},
		"negative":   {0xff, 0xff, 0xff, 0xfe},
		"not json":   {0, 0, 0, 2, 'x', 'y'},
		"wrong type": append([]byte{0, 0, 0, 14}, `{"topics":"a"}`...),
	} {
		var r RestoreRequest
		if err := r.ReadFrom(body); err == nil {
			t.Errorf("%s: decoded %+v", name, r)
		}
	}
	if NameForKey(RestoreKey) != "StrataRestore" || RequestForKey(RestoreKey) == nil || RequestForKey(3) != nil {
		t.Error("key table")
	}
	if v, ok := ClientVersions().LookupMaxKeyVersion(RestoreKey); !ok || v != 0 {
		t.Error("ClientVersions lacks StrataRestore")
	}
}
