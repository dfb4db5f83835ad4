package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTxnVerbs runs `strata serve` with transaction settings and two
// transactions left open by franz-go transactional producers: the settings
// are what the broker applies (the state topic's partition count, the
// bound on producers' timeouts); list and describe show a transaction;
// find-hanging lists both once they run past --max-transaction-timeout;
// abort ends each (by start offset, and by producer id and epoch), the
// last stable offset moves to the end of the log, and a read_committed
// consumer sees the committed records only.
func TestTxnVerbs(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, nil, "serve", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--transaction-state-partitions", "2", "--transaction-max-timeout", "10m")
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	cli := func(args ...string) string { t.Helper(); return cliOK(t, env, args...) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli("topic", "create", "payments", "--partitions", "2")

	// transactions.max_timeout reaches the coordinator.
	tooLong := newClient(t, n.bootstrap, kgo.TransactionalID("too-long"), kgo.TransactionTimeout(11*time.Minute), kgo.DefaultProduceTopic("payments"))
	// franz-go asks for its producer id at the first produce or earlier.
	err := tooLong.BeginTransaction()
	if err == nil {
		err = tooLong.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr()
	}
	if !errors.Is(err, kerr.InvalidTransactionTimeout) {
		t.Fatalf("a transaction timeout of 11m with transactions.max_timeout 10m: %v, want INVALID_TRANSACTION_TIMEOUT", err)
	}
	tooLong.Close()

	// One committed transaction, then one left open, on partition 1.
	prod := newClient(t, n.bootstrap, kgo.TransactionalID("pay-1"), kgo.TransactionTimeout(5*time.Minute),
		kgo.DefaultProduceTopic("payments"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(values ...string) {
		t.Helper()
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			if err := prod.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce("c1", "c2", "c3")
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	produce("open1", "open2")
	// A second producer leaves a transaction open on partition 0, to be
	// aborted by its producer id and epoch.
	other := newClient(t, n.bootstrap, kgo.TransactionalID("pay-2"), kgo.TransactionTimeout(5*time.Minute),
		kgo.DefaultProduceTopic("payments"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("open3")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	lastWrite := time.Now()

	// The state topic has the configured partitions.
	var state []topicDescription
	if err := json.Unmarshal([]byte(cli("topic", "describe", "__transaction_state", "--json")), &state); err != nil || len(state) != 1 {
		t.Fatalf("topic describe __transaction_state: %v %+v", err, state)
	}
	if got := len(state[0].Partitions); got != 2 {
		t.Errorf("__transaction_state has %d partitions, want the 2 of --transaction-state-partitions", got)
	}

	// The coordinator's view.
	var listed []txnSummary
	if err := json.Unmarshal([]byte(cli("txn", "list", "--json")), &listed); err != nil {
		t.Fatal(err)
	}
	var pid int64 = -1
	for _, r := range listed {
		if r.TransactionalID == "pay-1" && r.State == "Ongoing" {
			pid = r.ProducerID
		}
	}
	if pid < 0 {
		t.Fatalf("txn list --json has no Ongoing pay-1: %+v", listed)
	}
	if out := cli("txn", "list"); !strings.Contains(out, "pay-1") || !strings.Contains(out, "Ongoing") {
		t.Errorf("txn list:\n%s", out)
	}
	if out := cli("txn", "list", "--state", "completecommit"); strings.Contains(out, "pay-1") {
		t.Errorf("txn list --state CompleteCommit lists the ongoing pay-1:\n%s", out)
	}
	if out := cli("txn", "list", "--producer-id", fmt.Sprint(pid+1000)); strings.Contains(out, "pay-1") {
		t.Errorf("txn list --producer-id of another producer lists pay-1:\n%s", out)
	}
	var descs []txnDescription
	if err := json.Unmarshal([]byte(cli("txn", "describe", "pay-1", "--json")), &descs); err != nil || len(descs) != 1 {
		t.Fatalf("txn describe --json: %v %+v", err, descs)
	}
	d := descs[0]
	if d.State != "Ongoing" || d.ProducerID != pid || d.TimeoutMillis != 300000 || d.StartTime <= 0 ||
		len(d.Partitions) != 1 || d.Partitions[0] != (txnPartition{"payments", 1}) {
		t.Errorf("txn describe pay-1: %+v", d)
	}
	if out := cli("txn", "describe", "pay-1"); !strings.Contains(out, "transactional id pay-1: Ongoing") || !strings.Contains(out, "timeout 5m0s") {
		t.Errorf("txn describe pay-1:\n%s", out)
	}
	code, _, stderr := runCLI(t, env, "txn", "describe", "nobody")
	if code != 1 {
		t.Errorf("txn describe of an unknown id: exit %d", code)
	}
	assertOneLineError(t, stderr, "txn describe nobody", "TRANSACTIONAL_ID_NOT_FOUND")

	// The open transaction holds the last stable offset at its start: 3
	// committed records and their marker come before it.
	const start = 4
	adm := kadm.NewClient(newClient(t, n.bootstrap))
	lso := func(partition int32) int64 {
		t.Helper()
		offs, err := adm.ListCommittedOffsets(ctx, "payments")
		if err != nil {
			t.Fatal(err)
		}
		o, ok := offs.Lookup("payments", partition)
		if !ok || o.Err != nil {
			t.Fatalf("read_committed ListOffsets: %+v", o)
		}
		return o.Offset
	}
	if got := lso(1); got != start {
		t.Fatalf("last stable offset %d with a transaction open at %d", got, start)
	}

	// Not hanging by the default bound: its coordinator will end it.
	if out := cli("txn", "find-hanging"); out != "no hanging transactions\n" {
		t.Errorf("txn find-hanging with the default 15m bound:\n%s", out)
	}
	time.Sleep(time.Until(lastWrite.Add(1500 * time.Millisecond)))
	var hanging []hangingTxn
	if err := json.Unmarshal([]byte(cli("txn", "find-hanging", "--max-transaction-timeout", "1s", "--json")), &hanging); err != nil {
		t.Fatal(err)
	}
	if len(hanging) != 2 || hanging[1].Topic != "payments" || hanging[1].Partition != 1 || hanging[1].StartOffset != start ||
		hanging[1].ProducerID != pid || hanging[1].TransactionalID != "pay-1" ||
		hanging[0].Partition != 0 || hanging[0].StartOffset != 0 || hanging[0].TransactionalID != "pay-2" {
		t.Fatalf("find-hanging --max-transaction-timeout 1s: %+v", hanging)
	}
	h0 := hanging[0]
	// Both transactions have run for over a second, neither for an hour.
	if out := cli("txn", "list", "--min-duration", "1s"); !strings.Contains(out, "pay-1") || !strings.Contains(out, "pay-2") {
		t.Errorf("txn list --min-duration 1s:\n%s", out)
	}
	if out := cli("txn", "list", "--min-duration", "1h"); strings.Contains(out, "pay-") {
		t.Errorf("txn list --min-duration 1h lists transactions a few seconds old:\n%s", out)
	}
	if out := cli("txn", "find-hanging", "--topic", "payments", "--partition", "1", "--max-transaction-timeout", "1s"); !strings.Contains(out,
		fmt.Sprintf("abort one with: strata txn abort --topic payments --partition 1 --start-offset %d", start)) {
		t.Errorf("find-hanging does not say how to abort:\n%s", out)
	}

	// Abort names the transaction by its start offset.
	code, _, stderr = runCLI(t, env, "txn", "abort", "--topic", "payments", "--partition", "1", "--start-offset", "99")
	if code != 1 {
		t.Errorf("abort at an offset no transaction starts at: exit %d", code)
	}
	assertOneLineError(t, stderr, "no transaction starting at offset 99 is open", fmt.Sprintf("open ones start at %d", start))
	out := cli("txn", "abort", "--topic", "payments", "--partition", "1", "--start-offset", fmt.Sprint(start))
	if !strings.Contains(out, fmt.Sprintf("aborted the transaction of producer id %d", pid)) {
		t.Errorf("txn abort:\n%s", out)
	}
	// 3 records, a marker, 2 records, the abort marker.
	if got := lso(1); got != 7 {
		t.Errorf("last stable offset %d after the abort, want the log end 7", got)
	}
	if got := lso(0); got != 0 {
		t.Fatalf("partition 0: last stable offset %d with a transaction open at 0", got)
	}
	var aborted abortSpec
	if err := json.Unmarshal([]byte(cli("txn", "abort", "--topic", "payments", "--partition", "0", "--json", "--producer-id", fmt.Sprint(h0.ProducerID),
		"--producer-epoch", fmt.Sprint(h0.ProducerEpoch), "--coordinator-epoch", fmt.Sprint(h0.CoordinatorEpoch))), &aborted); err != nil {
		t.Fatal(err)
	}
	if aborted.ProducerID != h0.ProducerID || aborted.StartOffset != -1 {
		t.Errorf("txn abort --producer-id --json: %+v", aborted)
	}
	if got := lso(0); got != 2 {
		t.Errorf("partition 0: last stable offset %d after the abort, want the log end 2", got)
	}
	if out := cli("txn", "find-hanging", "--max-transaction-timeout", "1s"); out != "no hanging transactions\n" {
		t.Errorf("txn find-hanging after the abort:\n%s", out)
	}
	cons := newClient(t, n.bootstrap, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"payments": {1: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var got []string
	for len(got) < 3 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read_committed consumer: %v (read %v)", err, got)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	// Anything after the committed three would come before the LSO: a
	// short poll shows nothing more arrives.
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	cons.PollFetches(short).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	cancelShort()
	if strings.Join(got, ",") != "c1,c2,c3" {
		t.Errorf("read_committed consumer read %v, want the committed c1,c2,c3 only", got)
	}
	n.stop(t)
}
