package meta

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func cred(size int, iter int32, fill byte) ScramCredential {
	return ScramCredential{Salt: []byte{fill}, StoredKey: bytes.Repeat([]byte{fill}, size), ServerKey: bytes.Repeat([]byte{fill + 1}, size), Iterations: iter}
}

// KIP-554's per-user outcomes in one command: valid users' changes apply,
// a user with any bad change keeps what it had.
func TestAlterScramCredentials(t *testing.T) {
	h := newHarness(t)
	res := h.must(kindAlterScramCredentials, alterScramCmd{Upsertions: []ScramUpsertion{
		{User: "alice", Mechanism: "SCRAM-SHA-256", Credential: cred(32, 4096, 1)},
		{User: "alice", Mechanism: "SCRAM-SHA-512", Credential: cred(64, 8192, 2)},
		{User: "bob", Mechanism: "SCRAM-SHA-512", Credential: cred(64, 4096, 3)},
	}})
	if len(res.scram) != 2 || res.scram["alice"] != nil || res.scram["bob"] != nil {
		t.Fatalf("outcome %v", res.scram)
	}
	s := h.f.state()
	if c, ok := s.ScramCredential("alice", "SCRAM-SHA-512"); !ok || c.Iterations != 8192 {
		t.Fatalf("alice's 512 credential: %+v %v", c, ok)
	}
	before := s

	res = h.must(kindAlterScramCredentials, alterScramCmd{
		Deletions: []ScramDeletion{
			{User: "alice", Mechanism: "SCRAM-SHA-256"},
			{User: "bob", Mechanism: "SCRAM-SHA-256"}, // bob has no 256: not found
			{User: "carol", Mechanism: "SCRAM-SHA-1"},
		},
		Upsertions: []ScramUpsertion{
			{User: "bob", Mechanism: "SCRAM-SHA-512", Credential: cred(64, 4096, 9)},
			{User: "dave", Mechanism: "SCRAM-SHA-256", Credential: cred(32, 4095, 4)},
			{User: "erin", Mechanism: "SCRAM-SHA-256", Credential: cred(32, 16385, 4)},
			{User: "frank", Mechanism: "SCRAM-SHA-256", Credential: cred(32, 4096, 4)},
			{User: "frank", Mechanism: "SCRAM-SHA-256", Credential: cred(32, 4096, 5)},
			{User: "gina", Mechanism: "SCRAM-SHA-256", Credential: cred(31, 4096, 4)},
			{User: "", Mechanism: "SCRAM-SHA-256", Credential: cred(32, 4096, 4)},
			{User: "hank", Mechanism: "SCRAM-SHA-512", Credential: cred(64, 16384, 6)},
		},
	})
	want := map[string]error{
		"alice": nil,
		"bob":   ErrScramCredentialNotFound,
		"carol": ErrUnsupportedScramMechanism,
		"dave":  ErrUnacceptableScramCredential,
		"erin":  ErrUnacceptableScramCredential,
		"frank": ErrDuplicateScramCredential,
		"gina":  ErrUnacceptableScramCredential,
		"":      ErrUnacceptableScramCredential,
		"hank":  nil,
	}
	if len(res.scram) != len(want) {
		t.Fatalf("outcome for %d users, want %d: %v", len(res.scram), len(want), res.scram)
	}
	for user, w := range want {
		if got := res.scram[user]; w == nil && got != nil || w != nil && !errors.Is(got, w) {
			t.Errorf("%q: %v, want %v", user, got, w)
		}
	}
	s = h.f.state()
	if _, ok := s.ScramCredential("alice", "SCRAM-SHA-256"); ok {
		t.Error("alice's 256 credential survived its deletion")
	}
	if c, _ := s.ScramCredential("bob", "SCRAM-SHA-512"); c.StoredKey[0] != 3 {
		t.Error("bob's upsert applied although his deletion failed")
	}
	for _, u := range []string{"dave", "erin", "frank", "gina", ""} {
		if _, ok := s.ScramCredentials[u]; ok {
			t.Errorf("%q got a credential", u)
		}
	}
	if _, ok := s.ScramCredential("hank", "SCRAM-SHA-512"); !ok {
		t.Error("hank's credential is missing")
	}
	// The previous State was not modified (States are immutable).
	if _, ok := before.ScramCredential("alice", "SCRAM-SHA-256"); !ok {
		t.Error("applying modified the previous State")
	}

	// Deleting a user's last credential removes the user.
	h.must(kindAlterScramCredentials, alterScramCmd{Deletions: []ScramDeletion{{User: "alice", Mechanism: "SCRAM-SHA-512"}}})
	if _, ok := h.f.state().ScramCredentials["alice"]; ok {
		t.Error("alice remains without credentials")
	}

	// Snapshots carry the credentials.
	snap, _ := h.f.Snapshot()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	dst := newHarness(t)
	if err := dst.f.Restore(sink.reader()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dst.f.state().ScramCredentials, h.f.state().ScramCredentials) {
		t.Fatalf("restored credentials differ:\n got %v\nwant %v", dst.f.state().ScramCredentials, h.f.state().ScramCredentials)
	}
}
