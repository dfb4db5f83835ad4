package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// KIP-554 through kadm: users created, listed with their mechanisms and
// iterations, refused per user (duplicate, missing, bad iterations), and
// deleted.
func TestUserScramCredentialsAPIs(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "a"},
		{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "a"},
		{User: "bob", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil {
			t.Fatalf("%s: %v %s", r.User, r.Err, r.ErrMessage)
		}
	}
	described, err := adm.DescribeUserSCRAMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := described["alice"]; len(a.CredInfos) != 2 || a.CredInfos[1].Mechanism != kadm.ScramSha512 || a.CredInfos[1].Iterations != 8192 {
		t.Fatalf("alice: %+v", a)
	}
	if len(described) != 2 {
		t.Fatalf("described %d users, want 2", len(described))
	}
	described, err = adm.DescribeUserSCRAMs(ctx, "bob", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if described["bob"].Err != nil || !errors.Is(described["nobody"].Err, kerr.ResourceNotFound) {
		t.Fatalf("bob %v, nobody %v", described["bob"].Err, described["nobody"].Err)
	}
	described, _ = adm.DescribeUserSCRAMs(ctx, "bob", "bob")
	if !errors.Is(described["bob"].Err, kerr.DuplicateResource) {
		t.Fatalf("bob twice: %v", described["bob"].Err)
	}

	// Bob's deletion of a 256 he lacks fails him; carol's iterations are
	// refused; alice's deletion applies.
	res, err = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{
		{User: "alice", Mechanism: kadm.ScramSha256},
		{User: "bob", Mechanism: kadm.ScramSha256},
	}, []kadm.UpsertSCRAM{
		{User: "carol", Mechanism: kadm.ScramSha256, Iterations: 4096, Salt: []byte("s"), SaltedPassword: make([]byte, 31)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res["alice"].Err != nil || !errors.Is(res["bob"].Err, kerr.ResourceNotFound) || !errors.Is(res["carol"].Err, kerr.UnacceptableCredential) {
		t.Fatalf("results %+v", res)
	}
	described, _ = adm.DescribeUserSCRAMs(ctx, "alice")
	if a := described["alice"]; a.Err != nil || len(a.CredInfos) != 1 || a.CredInfos[0].Mechanism != kadm.ScramSha512 {
		t.Fatalf("alice after deleting her 256: %+v", a)
	}
	// Deleting and upserting the same user and mechanism is a duplicate.
	res, _ = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "bob", Mechanism: kadm.ScramSha512}},
		[]kadm.UpsertSCRAM{{User: "bob", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "x"}})
	if !errors.Is(res["bob"].Err, kerr.DuplicateResource) {
		t.Fatalf("bob deleted and upserted at once: %v", res["bob"].Err)
	}
}
