package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTxnVerbsCluster: on `strata dev --nodes 3`, whose partitions are led
// by different nodes, find-hanging asks every partition's leader and abort
// reaches the leader of the partition it names, whichever broker the
// command was pointed at: each open transaction is found, aborted, and
// its partition's last stable offset moves to the log end.
func TestTxnVerbsCluster(t *testing.T) {
	n := startNode(t, nil, "dev", "--nodes", "3", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	cliOK(t, env, "topic", "create", "ledger", "--partitions", "3", "--replication-factor", "3")
	var desc []topicDescription
	if err := json.Unmarshal([]byte(cliOK(t, env, "topic", "describe", "ledger", "--json")), &desc); err != nil || len(desc) != 1 {
		t.Fatalf("topic describe: %v %+v", err, desc)
	}
	leaders := map[int32]bool{}
	for _, p := range desc[0].Partitions {
		leaders[p.Leader] = true
	}
	if len(leaders) < 2 {
		t.Logf("partitions led by %d node(s) only: %+v", len(leaders), desc[0].Partitions)
	}

	seed, _, _ := strings.Cut(n.bootstrap, ",") // the client finds the other nodes
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for p := range int32(3) {
		prod := newClient(t, seed, kgo.TransactionalID(fmt.Sprintf("ledger-%d", p)), kgo.TransactionTimeout(5*time.Minute),
			kgo.DefaultProduceTopic("ledger"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("open")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond)

	var hanging []hangingTxn
	if err := json.Unmarshal([]byte(cliOK(t, env, "txn", "find-hanging", "--max-transaction-timeout", "1s", "--json")), &hanging); err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, h := range hanging {
		found = append(found, fmt.Sprintf("%s-%d@%d", h.Topic, h.Partition, h.StartOffset))
	}
	sort.Strings(found)
	if fmt.Sprint(found) != "[ledger-0@0 ledger-1@0 ledger-2@0]" {
		t.Fatalf("find-hanging found %v, want the three open transactions at offset 0: %+v", found, hanging)
	}

	adm := kadm.NewClient(newClient(t, seed))
	for p := range int32(3) {
		cliOK(t, env, "txn", "abort", "--topic", "ledger", "--partition", fmt.Sprint(p), "--start-offset", "0")
		// The record and the abort marker: the LSO is the log end, 2.
		deadline := time.Now().Add(10 * time.Second)
		for {
			offs, err := adm.ListCommittedOffsets(ctx, "ledger")
			o, ok := offs.Lookup("ledger", p)
			if err == nil && ok && o.Err == nil && o.Offset == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("partition %d: read_committed end offset %+v (%v) after the abort, want 2", p, o, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	n.stop(t)
}
