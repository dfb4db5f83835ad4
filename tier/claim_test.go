package tier

import (
	"context"
	"errors"
	"strings"
	"testing"

	"strata/tier/format"
)

// TestDeposedWriterIsFencedAfterPublishing: a leader deposed without
// knowing it (its cache still at its own epoch) uploads after the new
// leader has written. Its version is published under its own key and
// sorts below the new leader's; it must be told so (ErrFenced), so that it
// deletes nothing locally on the strength of a manifest no reader sees.
func TestDeposedWriterIsFencedAfterPublishing(t *testing.T) {
	ctx := context.Background()
	store := newDirStore(t)
	segs := testSegments(t, 4)
	old := openTierWith(t, store, nil, format.Paging{})
	cur := openTierWith(t, store, nil, format.Paging{})

	if _, err := old.Upload(ctx, testTP, segs[0], 3); err != nil {
		t.Fatal(err)
	}
	// The new leader takes over and uploads the next segment.
	if _, err := cur.Upload(ctx, testTP, segs[1], 4); err != nil {
		t.Fatal(err)
	}
	// The deposed one, which never heard of epoch 4, uploads the same one.
	_, err := old.Upload(ctx, testTP, segs[1], 3)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("deposed writer's upload: %v, want ErrFenced", err)
	}
	if m := old.cachedManifest(testTP); m.LeaderEpoch != 4 {
		t.Errorf("deposed writer's cache at epoch %d after being fenced, want the new leader's 4", m.LeaderEpoch)
	}
	// Every later write of the deposed one is refused before any PUT.
	if _, err := old.Upload(ctx, testTP, segs[2], 3); !errors.Is(err, ErrFenced) {
		t.Fatalf("deposed writer's next upload: %v, want ErrFenced", err)
	}
	m, _, err := ReadManifest(ctx, store, testTP)
	if err != nil {
		t.Fatal(err)
	}
	if m.LeaderEpoch != 4 || m.EndOffset() != segs[1].EndOffset {
		t.Fatalf("bucket's manifest at epoch %d ending at %d, want epoch 4 ending at %d", m.LeaderEpoch, m.EndOffset(), segs[1].EndOffset)
	}
}

// TestClaimKeepsADeposedLeadersLatePublish: the deposed leader publishes
// between the new leader's read of the bucket and its claim. The deposed
// leader's check finds no newer epoch (the claim is not there yet), so it
// may delete local copies of what it uploaded: the new leader must not
// hide that version, but claim over it.
func TestClaimKeepsADeposedLeadersLatePublish(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 4)
	old := openTierWith(t, store, clk.Now, format.Paging{})
	cur := openTierWith(t, store, clk.Now, format.Paging{})

	if _, err := old.Upload(ctx, testTP, segs[0], 3); err != nil {
		t.Fatal(err)
	}
	// The new leader reads the bucket; right before its claim is written,
	// the deposed leader uploads segs[1] and publishes.
	injected := false
	store.beforeWrite = func(ctx context.Context, key string) error {
		if injected || !strings.Contains(key, "/manifests/") {
			return nil
		}
		k, err := format.ParseManifestKey(key)
		if err != nil || k.LeaderEpoch != 4 {
			return nil
		}
		injected = true
		if _, err := old.Upload(ctx, testTP, segs[1], 3); err != nil {
			t.Errorf("deposed leader's upload before the claim: %v", err)
		}
		return nil
	}
	m, err := cur.Upload(ctx, testTP, segs[1], 4)
	if err != nil {
		t.Fatal(err)
	}
	if !injected {
		t.Fatal("the deposed leader's upload was not injected")
	}
	if m.LeaderEpoch != 4 || m.EndOffset() != segs[1].EndOffset {
		t.Fatalf("new leader's manifest at epoch %d ending at %d, want epoch 4 ending at %d", m.LeaderEpoch, m.EndOffset(), segs[1].EndOffset)
	}
	// The object the bucket's manifest names for segs[1] is the deposed
	// leader's (kept referenced), and the claim was made twice at most.
	got, _, err := ReadManifest(ctx, store, testTP)
	if err != nil {
		t.Fatal(err)
	}
	all, err := cur.Segments(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[1].LeaderEpoch != 3 {
		t.Fatalf("bucket lists %d segments (last of epoch %d), want 2 with the deposed leader's epoch-3 object last", len(all), all[len(all)-1].LeaderEpoch)
	}
	readAll(t, store, 0, segs[1].EndOffset)
}

// TestClaimIsOneManifestPerLeadership: a new leader claims once, then
// writes as before; the claim itself changes nothing readers see.
func TestClaimIsOneManifestPerLeadership(t *testing.T) {
	ctx := context.Background()
	store := newDirStore(t)
	segs := testSegments(t, 4)
	a := openTierWith(t, store, nil, format.Paging{})
	b := openTierWith(t, store, nil, format.Paging{})
	if _, err := a.Upload(ctx, testTP, segs[0], 1); err != nil {
		t.Fatal(err)
	}
	before := manifestKeys(t, store)
	if _, err := b.Upload(ctx, testTP, segs[1], 2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Upload(ctx, testTP, segs[2], 2); err != nil {
		t.Fatal(err)
	}
	after := manifestKeys(t, store)
	// One claim and two uploads.
	if got := len(after) - len(before); got != 3 {
		t.Fatalf("%d manifest versions written by the new leader (%v), want 3: one claim, two uploads", got, after[len(before):])
	}
	claim, err := GetManifest(ctx, store, after[len(before)])
	if err != nil {
		t.Fatal(err)
	}
	if claim.LeaderEpoch != 2 || claim.EndOffset() != segs[0].EndOffset {
		t.Fatalf("claim at epoch %d ending at %d, want epoch 2 ending at %d", claim.LeaderEpoch, claim.EndOffset(), segs[0].EndOffset)
	}
}

// TestClaimCheckIsMadeAgainAfterItFailed: the listing that checks a claim
// fails, right after a deposed leader published between the new leader's
// read and its claim. The claim is in the bucket, but not checked: the
// new leader's next write checks it first, finds the deposed leader's
// version and claims over it, instead of hiding it for good.
func TestClaimCheckIsMadeAgainAfterItFailed(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 4)
	old := openTierWith(t, store, clk.Now, format.Paging{})
	cur := openTierWith(t, store, clk.Now, format.Paging{})
	if _, err := old.Upload(ctx, testTP, segs[0], 3); err != nil {
		t.Fatal(err)
	}
	injected, claimed := false, false
	store.beforeWrite = func(ctx context.Context, key string) error {
		k, err := format.ParseManifestKey(key)
		if err != nil || k.LeaderEpoch != 4 || injected {
			return nil
		}
		injected = true
		if _, err := old.Upload(ctx, testTP, segs[1], 3); err != nil {
			t.Errorf("deposed leader's upload before the claim: %v", err)
		}
		claimed = true
		return nil
	}
	failed := false
	store.listErr = func(prefix string) error {
		if claimed && !failed && strings.HasSuffix(prefix, "/manifests/") {
			failed = true
			return errors.New("injected: LIST fails")
		}
		return nil
	}
	if _, err := cur.Upload(ctx, testTP, segs[1], 4); err == nil {
		t.Fatal("upload succeeded with its claim's check failing")
	}
	if !failed {
		t.Fatal("the claim's check was not failed")
	}
	m, err := cur.Upload(ctx, testTP, segs[2], 4)
	if err != nil {
		t.Fatal(err)
	}
	all, err := cur.Segments(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[1].LeaderEpoch != 3 {
		t.Fatalf("bucket lists %d segments, want 3 with the deposed leader's epoch-3 object second", len(all))
	}
	readAll(t, store, 0, segs[2].EndOffset)
}
