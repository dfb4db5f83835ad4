package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestTxnUsageErrors: a txn command line that cannot name what to do is
// refused before any broker is contacted, with one line and status 2.
func TestTxnUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"txn", "bogus"}, []string{`unknown command "bogus" for "strata txn"`}},
		{[]string{"txn", "describe"}, []string{"requires at least 1 arg", "strata txn describe --help"}},
		{[]string{"txn", "list", "--state", "Ongoin"}, []string{`--state "Ongoin": want one of Empty, Ongoing`}},
		{[]string{"txn", "list", "--min-duration", "-1s"}, []string{"--min-duration -1s: must not be negative"}},
		{[]string{"txn", "list", "--producer-id", "x"}, []string{"--producer-id"}},
		{[]string{"txn", "find-hanging", "--partition", "1"}, []string{"--partition 1 needs --topic"}},
		{[]string{"txn", "find-hanging", "--max-transaction-timeout", "0s"}, []string{"--max-transaction-timeout 0s: must be positive"}},
		{[]string{"txn", "abort", "--topic", "t"}, []string{"--topic and --partition are required", "strata txn abort --help"}},
		{[]string{"txn", "abort", "--partition", "0", "--start-offset", "3"}, []string{"--topic and --partition are required"}},
		{[]string{"txn", "abort", "--topic", "t", "--partition", "0"}, []string{"name the transaction with --start-offset, or with --producer-id"}},
		{[]string{"txn", "abort", "--topic", "t", "--partition", "0", "--start-offset", "5", "--producer-id", "1"}, []string{"--start-offset cannot be combined with --producer-id"}},
		{[]string{"txn", "abort", "--topic", "t", "--partition", "0", "--producer-id", "1", "--producer-epoch", "0"}, []string{"go together: give all three"}},
		{[]string{"txn", "abort", "--topic", "t", "--partition", "0", "--start-offset", "-2"}, []string{"--start-offset -2: not an offset"}},
		{[]string{"txn", "abort", "--topic", "t", "--partition", "-1", "--start-offset", "2"}, []string{"--partition -1: not a partition number"}},
		{[]string{"txn", "abort", "--topic", "t", "--partition", "0", "--producer-id", "-1", "--producer-epoch", "0", "--coordinator-epoch", "0"}, []string{"neither may be negative"}},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			// Nothing listens on port 1: a command that got as far as the
			// network would fail with status 1, not 2.
			code, stdout, stderr := runCLI(t, []string{"STRATA_BOOTSTRAP=127.0.0.1:1"}, tt.args...)
			if code != 2 || stdout != "" {
				t.Errorf("exit %d (want 2), stdout %q", code, stdout)
			}
			assertOneLineError(t, stderr, tt.want...)
		})
	}
}

// TestFindHangingRules pins Kafka's find-hanging rule on made-up answers:
// only transactions whose last write is older than the max timeout are
// looked at, and one of them is hanging when no coordinator has its
// producer id, the coordinator does not know its transactional id, has
// moved it to another producer id, or holds a transaction without the
// partition; and (beyond Kafka) when the coordinator holds it Ongoing for
// longer than the max timeout.
func TestFindHangingRules(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	const maxTimeout = 15 * time.Minute
	producer := func(topic string, partition int32, pid int64, start int64, lastWrite time.Duration) kadm.DescribedProducer {
		return kadm.DescribedProducer{Topic: topic, Partition: partition, ProducerID: pid, ProducerEpoch: 3, CoordinatorEpoch: -1,
			CurrentTxnStartOffset: start, LastTimestamp: ago(lastWrite)}
	}
	producers := []kadm.DescribedProducer{
		producer("a", 0, 1, -1, time.Hour),              // idempotent, no transaction: never a candidate
		producer("a", 0, 2, 10, time.Minute),            // young: in progress
		producer("a", 1, 3, 20, time.Hour),              // no coordinator has producer 3
		producer("a", 2, 4, 30, time.Hour),              // id "four" unknown at its coordinator
		producer("b", 0, 5, 40, time.Hour),              // "five" has moved on to producer 55
		producer("b", 1, 6, 50, time.Hour),              // "six" is in a transaction without b-1
		producer("b", 2, 7, 60, time.Hour),              // "seven" Ongoing with b-2 for an hour
		producer("b", 3, 8, 70, 20*time.Minute),         // "eight" PrepareCommit with b-3: its coordinator is on it
		producer("b", 4, 9, 80, 20*time.Minute),         // "nine" Ongoing with b-4, started 14 minutes ago: not hanging
		producer("c", 0, 10, 0, maxTimeout+time.Second), // just past the bound; "ten" lost it
	}
	open := openTransactions(now, maxTimeout, producers)
	var openPIDs []int64
	for _, p := range open {
		openPIDs = append(openPIDs, p.ProducerID)
	}
	if want := []int64{3, 4, 5, 6, 7, 8, 9, 10}; !reflect.DeepEqual(openPIDs, want) {
		t.Fatalf("candidates: producer ids %v, want %v", openPIDs, want)
	}
	set := func(topic string, ps ...int32) kadm.TopicsSet {
		s := kadm.TopicsSet{}
		s.Add(topic, ps...)
		return s
	}
	ids := map[int64]string{4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
	descs := map[string]kadm.DescribedTransaction{
		"five":  {TxnID: "five", ProducerID: 55, State: "Ongoing", StartTimestamp: ago(time.Minute), Topics: set("b", 0)},
		"six":   {TxnID: "six", ProducerID: 6, State: "Ongoing", StartTimestamp: ago(time.Minute), Topics: set("b", 0, 2)},
		"seven": {TxnID: "seven", ProducerID: 7, State: "Ongoing", StartTimestamp: ago(time.Hour), Topics: set("b", 2)},
		"eight": {TxnID: "eight", ProducerID: 8, State: "PrepareCommit", StartTimestamp: ago(time.Hour), Topics: set("b", 3)},
		"nine":  {TxnID: "nine", ProducerID: 9, State: "Ongoing", StartTimestamp: ago(14 * time.Minute), Topics: set("b", 4)},
		"ten":   {TxnID: "ten", ProducerID: 10, State: "CompleteAbort", StartTimestamp: -1},
	}
	got := findHanging(now, maxTimeout, open, ids, descs)
	want := map[int64]string{
		3:  "no coordinator has this producer id",
		4:  "its coordinator does not know transactional id four",
		5:  "transactional id five has moved on to producer id 55",
		6:  "the coordinator's transaction (Ongoing) does not include this partition",
		7:  "Ongoing at its coordinator for 1h0m0s, beyond --max-transaction-timeout 15m0s",
		10: "the coordinator's transaction (CompleteAbort) does not include this partition",
	}
	if len(got) != len(want) {
		t.Errorf("%d hanging, want %d: %+v", len(got), len(want), got)
	}
	for _, h := range got {
		if h.Reason != want[h.ProducerID] {
			t.Errorf("producer %d: reason %q, want %q", h.ProducerID, h.Reason, want[h.ProducerID])
		}
		if h.TransactionalID != ids[h.ProducerID] {
			t.Errorf("producer %d: transactional id %q, want %q", h.ProducerID, h.TransactionalID, ids[h.ProducerID])
		}
	}
	if len(got) > 0 {
		if h := got[0]; h.Topic != "a" || h.Partition != 1 || h.StartOffset != 20 || h.ProducerEpoch != 3 || h.CoordinatorEpoch != -1 || h.LastTimestamp != ago(time.Hour) {
			t.Errorf("first row does not carry its producer's state: %+v", h)
		}
	}
}

// TestTxnOutput pins the text the verbs print: what an operator reads and
// what the find-hanging hint tells them to run.
func TestTxnOutput(t *testing.T) {
	now := time.Date(2026, 12, 1, 19, 30, 0, 0, time.UTC)
	var b strings.Builder
	if err := printTxnList(&b, []txnSummary{{"pay-1", 4000, "Ongoing", 0}, {"pay-2", 4001, "CompleteCommit", 2}}); err != nil {
		t.Fatal(err)
	}
	want := "TRANSACTIONAL ID  PRODUCER ID  STATE           COORDINATOR\n" +
		"pay-1             4000         Ongoing         0\n" +
		"pay-2             4001         CompleteCommit  2\n"
	if b.String() != want {
		t.Errorf("list:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	descs := []txnDescription{
		{TransactionalID: "pay-1", State: "Ongoing", ProducerID: 4000, ProducerEpoch: 2, TimeoutMillis: 60000, StartTime: now.Add(-90 * time.Second).UnixMilli(),
			Coordinator: 1, Partitions: []txnPartition{{"orders", 0}, {"orders", 3}}},
		{TransactionalID: "pay-2", State: "Empty", ProducerID: 4001, TimeoutMillis: 900000, StartTime: -1, Coordinator: 0, Partitions: []txnPartition{}},
	}
	if err := printTxnDescriptions(&b, descs, now); err != nil {
		t.Fatal(err)
	}
	want = "transactional id pay-1: Ongoing, producer id 4000 epoch 2, timeout 1m0s, started 2026-12-01T19:28:30.000Z (1m30s ago), coordinator 1\n" +
		"TOPIC   PARTITION\n" +
		"orders  0\n" +
		"orders  3\n" +
		"\n" +
		"transactional id pay-2: Empty, producer id 4001 epoch 0, timeout 15m0s, no transaction open, coordinator 0\n"
	if b.String() != want {
		t.Errorf("describe:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	if err := printHanging(&b, []hangingTxn{}, now); err != nil || b.String() != "no hanging transactions\n" {
		t.Errorf("no hanging transactions: %q, %v", b.String(), err)
	}
	b.Reset()
	hanging := []hangingTxn{{Topic: "orders", Partition: 3, ProducerID: 4000, ProducerEpoch: 2, CoordinatorEpoch: -1, StartOffset: 1200,
		LastTimestamp: now.Add(-time.Hour).UnixMilli(), Reason: "no coordinator has this producer id"}}
	if err := printHanging(&b, hanging, now); err != nil {
		t.Fatal(err)
	}
	want = "TOPIC   PARTITION  START OFFSET  PRODUCER ID  EPOCH  COORDINATOR EPOCH  LAST WRITE  TRANSACTIONAL ID  REASON\n" +
		"orders  3          1200          4000         2      -1                 1h0m0s ago  -                 no coordinator has this producer id\n" +
		"abort one with: strata txn abort --topic orders --partition 3 --start-offset 1200\n"
	if b.String() != want {
		t.Errorf("find-hanging:\n%s\nwant:\n%s", b.String(), want)
	}
}
