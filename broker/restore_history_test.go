package broker

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/broker/extension"
)

// restoreFrom sends StrataRestore naming a metadata history to b.
func restoreFrom(t testing.TB, b *Broker, history string, dryRun bool, topics ...string) *extension.RestoreResponse {
	t.Helper()
	cl := testClient(t, b, kgo.MaxVersions(extension.ClientVersions()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := cl.Request(ctx, &extension.RestoreRequest{Topics: topics, DryRun: dryRun, History: history, TimeoutMillis: 60_000})
	if err != nil {
		t.Fatalf("StrataRestore: %v", err)
	}
	return resp.(*extension.RestoreResponse)
}

// TestRestoreFromAnotherHistory: the data a partial restore leaves in the
// bucket is not stranded. Cluster A (history a) has orders and payments;
// fresh cluster B restores only orders, and is lost too; fresh cluster C's
// plan is of B's checkpoint, the newest naming a topic, and names history
// a as holding payments; asked for payments it says which history has it;
// restored from history a (by a prefix of its id) payments is back with
// its id and records. A history the bucket does not hold is a one-line
// error naming those it does.
func TestRestoreFromAnotherHistory(t *testing.T) {
	store := tierStores[0].open(t)
	dirA := t.TempDir()
	a := restoreBroker(t, dirA, store)
	adm := testAdmin(t, a)
	tiered := map[string]*string{"remote.storage.enable": ptr("true"), "segment.bytes": ptr("65536"), "retention.ms": ptr("-1")}
	createTopic(t, adm, "orders", 1, tiered)
	createTopic(t, adm, "payments", 2, tiered)
	produceKeyed(t, a, "orders", 100, 50)
	produceKeyed(t, a, "payments", 300, 50)
	waitAllInBucket(t, a, "orders", 1)
	waitAllInBucket(t, a, "payments", 2)
	before := readRestored(t, a, "payments", 300)
	historyA, clusterID := a.meta.State().HistoryID, a.node.ClusterID()
	paymentsID := a.meta.State().Topics["payments"].ID
	writeCheckpoint(t, a, store)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dirA); err != nil {
		t.Fatal(err)
	}

	// B restores orders alone, and its checkpoint names only orders.
	dirB := t.TempDir()
	b := restoreBroker(t, dirB, store, func(c *Config) { c.ClusterID = clusterID })
	if resp := restoreRequest(t, b, false, "orders"); resp.ErrorCode != 0 {
		t.Fatalf("B restores orders: %d %s", resp.ErrorCode, resp.ErrorMessage)
	}
	historyB := b.meta.State().HistoryID
	time.Sleep(2 * time.Millisecond) // B's checkpoint is written after A's
	writeCheckpoint(t, b, store)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dirB); err != nil {
		t.Fatal(err)
	}

	c := restoreBroker(t, t.TempDir(), store, func(cfg *Config) { cfg.ClusterID = clusterID })
	dry := restoreFrom(t, c, "", true)
	if dry.ErrorCode != 0 || dry.Plan == nil {
		t.Fatalf("C's plan: %d %s", dry.ErrorCode, dry.ErrorMessage)
	}
	if dry.Plan.History != historyB || !strings.Contains(dry.Plan.Checkpoint, historyB) {
		t.Fatalf("C's plan is of history %s (%s), want B's %s", dry.Plan.History, dry.Plan.Checkpoint, historyB)
	}
	var noted []string
	for _, o := range dry.Plan.OtherHistories {
		if o.History == historyA {
			noted = o.Topics
			if o.WrittenMs <= 0 || !strings.Contains(o.Checkpoint, historyA) {
				t.Errorf("history a in the plan: %+v", o)
			}
		}
	}
	if !slices.Equal(noted, []string{"payments"}) {
		t.Fatalf("the plan's other histories %+v, want history a (%s) naming payments", dry.Plan.OtherHistories, historyA)
	}

	// payments alone from B's checkpoint: refused, naming history a.
	resp := restoreFrom(t, c, "", true, "payments")
	if resp.ErrorCode != kerr.InvalidRequest.Code || !strings.Contains(resp.ErrorMessage, "--history "+historyA) {
		t.Errorf("payments from B's checkpoint: %d %q, want a refusal naming history %s", resp.ErrorCode, resp.ErrorMessage, historyA)
	}

	// Histories the bucket does not hold, or that are no history ids.
	for _, bad := range []struct{ history, says string }{
		{"deadbeef", "has no metadata history deadbeef; it has " + historyB},
		{"not-hex!", "is not a metadata history id"},
		{historyA[:4], "is not a metadata history id"},
	} {
		resp := restoreFrom(t, c, bad.history, true)
		if resp.ErrorCode != kerr.InvalidRequest.Code || !strings.Contains(resp.ErrorMessage, bad.says) || strings.Contains(resp.ErrorMessage, "\n") {
			t.Errorf("--history %s: %d %q, want one line saying %q", bad.history, resp.ErrorCode, resp.ErrorMessage, bad.says)
		}
	}
	if strings.Contains(strings.Join(c.meta.State().SortedTopicNames(), ","), "payments") {
		t.Fatal("a refused restore created payments")
	}

	// From history a, by a prefix of its id.
	resp = restoreFrom(t, c, strings.ToUpper(historyA[:10]), false, "payments")
	if resp.ErrorCode != 0 || resp.Plan == nil || resp.Plan.History != historyA {
		t.Fatalf("restore payments from history a: %d %q, plan %+v", resp.ErrorCode, resp.ErrorMessage, resp.Plan)
	}
	if mt, ok := c.meta.State().Topics["payments"]; !ok || mt.ID != paymentsID {
		t.Fatalf("payments after the restore: %+v, want id %x", mt, paymentsID)
	}
	after := readRestored(t, c, "payments", 300)
	for p, recs := range before {
		if fmt.Sprint(after[p]) != fmt.Sprint(recs) {
			t.Fatalf("payments-%d differs after the restore from history a", p)
		}
	}
	// Restored, payments is no longer noted.
	dry = restoreFrom(t, c, "", true)
	for _, o := range dry.Plan.OtherHistories {
		if len(o.Topics) > 0 {
			t.Errorf("after payments came back, history %s still notes %v", o.History, o.Topics)
		}
	}
}
