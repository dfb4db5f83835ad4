// Package loadtesttest is the acceptance suite of package loadtest: it runs
// every subcommand, verifying, against a broker given by its bootstrap
// address. loadtest's own tests run it against franz-go's kfake; a broker's
// tests run it against an in-process broker, which is how loadtest is
// checked against Strata without importing any of the server.
package loadtesttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"strata/loadtest"
)

// Run runs the suite against the broker at bootstrap, which must allow
// creating topics; autoCreates says whether it also creates a topic on
// first use (auto.create.topics.enable). Each subtest uses a topic of its
// own and takes about a second against a broker on loopback.
func Run(t *testing.T, bootstrap string, autoCreates bool) {
	t.Run("ProduceConsumeVerify", func(t *testing.T) { produceConsumeVerify(t, bootstrap) })
	t.Run("ProduceWithoutCreate", func(t *testing.T) { produceWithoutCreate(t, bootstrap, autoCreates) })
	t.Run("E2EVerify", func(t *testing.T) { e2eVerify(t, bootstrap) })
	t.Run("CommandJSON", func(t *testing.T) { commandJSON(t, bootstrap) })
	t.Run("CommandBadFlags", func(t *testing.T) { commandBadFlags(t, bootstrap) })
}

// Topic returns a topic name unique to this test run.
func Topic(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("lt-%s-%08x", name, rand.Uint32())
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func produceConsumeVerify(t *testing.T, bootstrap string) {
	topic := Topic(t)
	const records = 2000
	p, err := loadtest.Produce(ctx(t), loadtest.ProduceConfig{
		Bootstrap:  []string{bootstrap},
		Topic:      topic,
		Records:    records,
		Size:       100,
		KeySpace:   50,
		Producers:  2,
		Idempotent: true,
		Create:     true,
		Partitions: 3,
		Verify:     true,
		Seed:       42,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if p.Records != records || p.Bytes < records*100 {
		t.Fatalf("produced %d records, %d bytes; want %d records, at least %d bytes", p.Records, p.Bytes, records, records*100)
	}
	if p.Duration <= 0 || p.RecordsPerSec <= 0 || p.MBPerSec <= 0 || p.Latency.P50 <= 0 || p.Latency.Max < p.Latency.P99 {
		t.Fatalf("implausible figures: %+v", p)
	}

	c, err := loadtest.Consume(ctx(t), loadtest.ConsumeConfig{
		Bootstrap: []string{bootstrap},
		Topic:     topic,
		Duration:  20 * time.Second, // a timeout: verification stops by itself
		Verify:    true,
		Seed:      42,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	if c.Records != records || c.Bytes != p.Bytes {
		t.Fatalf("consumed %d records, %d bytes; want %d, %d", c.Records, c.Bytes, records, p.Bytes)
	}
	var perPartition int64
	for _, pr := range c.Verify.Partitions {
		perPartition += pr.Records
	}
	if len(c.Verify.Partitions) != 3 || perPartition != records {
		t.Fatalf("verify report has %d partitions holding %d records; want 3 holding %d", len(c.Verify.Partitions), perPartition, records)
	}

	// So does a consumer in a (new) group.
	g, err := loadtest.Consume(ctx(t), loadtest.ConsumeConfig{
		Bootstrap: []string{bootstrap},
		Topic:     topic,
		Duration:  20 * time.Second,
		Group:     topic + "-group",
		Verify:    true,
		Seed:      42,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Err(); err != nil || g.Records != records {
		t.Fatalf("group consumer read %d records, err %v; want %d", g.Records, err, records)
	}

	// A record bound stops a consumer at exactly that many.
	b, err := loadtest.Consume(ctx(t), loadtest.ConsumeConfig{
		Bootstrap: []string{bootstrap},
		Topic:     topic,
		Records:   500,
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.Records != 500 {
		t.Fatalf("consumer bounded to 500 records read %d", b.Records)
	}
}

func e2eVerify(t *testing.T, bootstrap string) {
	topic := Topic(t)
	const records = 1000
	r, err := loadtest.E2E(ctx(t), loadtest.E2EConfig{ProduceConfig: loadtest.ProduceConfig{
		Bootstrap:  []string{bootstrap},
		Topic:      topic,
		Records:    records,
		Size:       64,
		Rate:       4000, // paced, as latency runs are
		Idempotent: true,
		Create:     true,
		Partitions: 2,
		Verify:     true,
		Seed:       7,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Records != records || r.Bytes != records*64 {
		t.Fatalf("e2e received %d records, %d bytes; want %d, %d", r.Records, r.Bytes, records, records*64)
	}
	if r.Latency.P50 <= 0 || r.Latency.P50 > 1000 {
		t.Fatalf("implausible e2e latency: %+v", r.Latency)
	}
	// 1000 records at 4000/s take 250ms; far faster means the pacing is off.
	if r.Duration < 200*time.Millisecond {
		t.Fatalf("e2e took %v, want at least 200ms at 4000 records/s", r.Duration)
	}
}

// jsonResult is what --json prints.
type jsonResult struct {
	Mode  string `json:"mode"`
	Topic string `json:"topic"`
	loadtest.Result
}

// RunCommand runs `loadtest args...` and returns its stdout and error.
func RunCommand(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := loadtest.Command(loadtest.Options{})
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx(t))
	return stdout.String(), err
}

func commandJSON(t *testing.T, bootstrap string) {
	topic := Topic(t)
	out, err := RunCommand(t, "produce", "--bootstrap", bootstrap, "--topic", topic,
		"--create", "--partitions", "2", "--topic-config", "retention.ms=3600000",
		"--records", "500", "--size", "64", "--producers", "2", "--verify", "--seed", "9", "--json")
	if err != nil {
		t.Fatalf("produce: %v\n%s", err, out)
	}
	var p jsonResult
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("produce --json printed %q: %v", out, err)
	}
	if p.Mode != "produce" || p.Topic != topic || p.Records != 500 || p.Bytes != 500*64 || p.Errors != 0 {
		t.Fatalf("produce --json: %+v", p)
	}

	out, err = RunCommand(t, "consume", "--bootstrap", bootstrap, "--topic", topic,
		"--duration", "20s", "--verify", "--seed", "9", "--json")
	if err != nil {
		t.Fatalf("consume: %v\n%s", err, out)
	}
	var c jsonResult
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("consume --json printed %q: %v", out, err)
	}
	if c.Records != 500 || c.Verify == nil || c.Verify.Err() != nil {
		t.Fatalf("consume --json: %+v verify %+v", c, c.Verify)
	}

	// The wrong seed makes every record corrupt, and the command fail.
	out, err = RunCommand(t, "consume", "--bootstrap", bootstrap, "--topic", topic,
		"--duration", "20s", "--verify", "--seed", "10", "--json")
	if err == nil || !strings.Contains(err.Error(), "500 corrupt") {
		t.Fatalf("consume with the wrong seed: err %v, want 500 corrupt\n%s", err, out)
	}

	out, err = RunCommand(t, "e2e", "--bootstrap", bootstrap, "--topic", topic,
		"--duration", "300ms", "--rate", "1000", "--size", "10", "--json")
	if err != nil {
		t.Fatalf("e2e: %v\n%s", err, out)
	}
	var e jsonResult
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("e2e --json printed %q: %v", out, err)
	}
	if e.Mode != "e2e" || e.Records < 100 || e.Records > 400 {
		t.Fatalf("e2e for 300ms at 1000/s received %d records: %+v", e.Records, e)
	}
}

func commandBadFlags(t *testing.T, bootstrap string) {
	for _, args := range [][]string{
		{"produce", "--bootstrap", bootstrap}, // unbounded
		{"consume", "--bootstrap", bootstrap}, // unbounded
		{"produce", "--bootstrap", bootstrap, "--records", "1", "--acks", "2"},
		{"produce", "--bootstrap", bootstrap, "--records", "1", "--acks", "1", "--idempotent"},
		{"produce", "--bootstrap", bootstrap, "--records", "1", "--rate", "1", "--rate-mb", "1"},
		{"produce", "--bootstrap", bootstrap, "--records", "1", "--compression", "brotli"},
		{"produce", "--bootstrap", bootstrap, "--records", "1", "--topic-config", "novalue"},
		{"produce", "--bootstrap", bootstrap, "--records", "x"},
		{"consume", "--bootstrap", bootstrap, "--records", "1", "--from", "yesterday"},
		{"e2e", "--bootstrap", bootstrap, "--duration", "-1s"},
	} {
		out, err := RunCommand(t, args...)
		if err == nil {
			t.Errorf("loadtest %q succeeded, want an error", args)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") {
			t.Errorf("loadtest %q: error spans lines: %q", args, msg)
		}
		if out != "" {
			t.Errorf("loadtest %q printed %q on stdout", args, out)
		}
	}
}

// produceWithoutCreate produces to a topic that does not exist, without
// --create, as any Kafka client would: where the broker creates topics on
// first use the run works; elsewhere it fails in one line naming --create.
func produceWithoutCreate(t *testing.T, bootstrap string, autoCreates bool) {
	topic := Topic(t)
	out, err := RunCommand(t, "produce", "--bootstrap", bootstrap, "--topic", topic,
		"--records", "300", "--size", "64", "--json")
	if !autoCreates {
		if err == nil || !strings.Contains(err.Error(), "--create") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("produce to a missing topic on a broker that does not create it: err %v, want one line naming --create\n%s", err, out)
		}
		return
	}
	if err != nil {
		t.Fatalf("produce to a topic the broker creates on first use: %v\n%s", err, out)
	}
	var p jsonResult
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Records != 300 || p.Errors != 0 {
		t.Fatalf("produce --json printed %q (%v), want 300 records", out, err)
	}
}

// RunTransactions runs the transactional part of the suite against the
// broker at bootstrap, which must support transactions and allow creating
// topics: producers that commit every few records and abort some
// transactions on purpose, read back read_committed (no aborted record, and
// every committed one once) and read_uncommitted (the aborted ones too).
func RunTransactions(t *testing.T, bootstrap string) {
	t.Run("ReadCommitted", func(t *testing.T) { txnReadCommitted(t, bootstrap) })
	t.Run("Command", func(t *testing.T) { txnCommand(t, bootstrap) })
}

func txnReadCommitted(t *testing.T, bootstrap string) {
	topic := Topic(t)
	const records, perTxn = 1200, 50
	p, err := loadtest.Produce(ctx(t), loadtest.ProduceConfig{
		Bootstrap:       []string{bootstrap},
		Topic:           topic,
		Records:         records,
		Size:            64,
		Producers:       2,
		Create:          true,
		Partitions:      3,
		TransactionalID: topic,
		TxnRecords:      perTxn,
		TxnAbortEvery:   4,
		Verify:          true,
		Seed:            11,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if p.Records+p.AbortedRecords != records || p.Records == 0 || p.AbortedRecords == 0 {
		t.Fatalf("produced %d committed and %d aborted records, want %d in all, some of each", p.Records, p.AbortedRecords, records)
	}
	// Every transaction holds perTxn records but each producer's last,
	// which the shared record budget may cut short.
	if p.Transactions*perTxn < p.Records || (p.Transactions-2)*perTxn > p.Records ||
		p.AbortedTransactions*perTxn < p.AbortedRecords || (p.AbortedTransactions-2)*perTxn > p.AbortedRecords {
		t.Fatalf("%d records in %d committed transactions and %d in %d aborted ones, of %d records each",
			p.Records, p.Transactions, p.AbortedRecords, p.AbortedTransactions, perTxn)
	}
	if p.Bytes != p.Records*64 || p.Latency.P50 <= 0 {
		t.Fatalf("implausible figures: %+v", p)
	}

	c, err := loadtest.Consume(ctx(t), loadtest.ConsumeConfig{
		Bootstrap: []string{bootstrap},
		Topic:     topic,
		Duration:  20 * time.Second,
		Isolation: "read_committed",
		Verify:    true,
		Seed:      11,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("read_committed: %v", err)
	}
	if c.Records != p.Records || c.Bytes != p.Bytes || c.Verify.AbortedRead != 0 {
		t.Fatalf("read_committed consumer read %d records, %d bytes, %d of aborted transactions; want %d, %d, 0",
			c.Records, c.Bytes, c.Verify.AbortedRead, p.Records, p.Bytes)
	}

	u, err := loadtest.Consume(ctx(t), loadtest.ConsumeConfig{
		Bootstrap: []string{bootstrap},
		Topic:     topic,
		Duration:  20 * time.Second,
		Isolation: "read_uncommitted",
		Verify:    true,
		Seed:      11,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Err(); err != nil {
		t.Fatalf("read_uncommitted: %v", err)
	}
	if u.Verify.Aborted != p.AbortedRecords || u.Records != p.Records+p.AbortedRecords {
		t.Fatalf("read_uncommitted consumer read %d records, %d of aborted transactions; want %d, %d",
			u.Records, u.Verify.Aborted, p.Records+p.AbortedRecords, p.AbortedRecords)
	}
}

func txnCommand(t *testing.T, bootstrap string) {
	topic := Topic(t)
	out, err := RunCommand(t, "produce", "--bootstrap", bootstrap, "--topic", topic,
		"--create", "--partitions", "2", "--records", "400", "--size", "32",
		"--transactional-id", topic, "--txn-records", "20", "--txn-abort-every", "2",
		"--verify", "--seed", "5", "--json")
	if err != nil {
		t.Fatalf("produce: %v\n%s", err, out)
	}
	var p jsonResult
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("produce --json printed %q: %v", out, err)
	}
	// One producer, 20 transactions of 20 records, every second aborted.
	if p.Records != 200 || p.Transactions != 10 || p.AbortedRecords != 200 || p.AbortedTransactions != 10 || p.Errors != 0 {
		t.Fatalf("produce --json: %+v", p)
	}

	for _, iso := range []string{"read_committed", "read_uncommitted"} {
		out, err = RunCommand(t, "consume", "--bootstrap", bootstrap, "--topic", topic,
			"--isolation", iso, "--duration", "20s", "--verify", "--seed", "5", "--json")
		if err != nil {
			t.Fatalf("consume --isolation %s: %v\n%s", iso, err, out)
		}
		var c jsonResult
		if err := json.Unmarshal([]byte(out), &c); err != nil {
			t.Fatalf("consume --json printed %q: %v", out, err)
		}
		want := p.Records
		if iso == "read_uncommitted" {
			want += p.AbortedRecords
		}
		if c.Records != want || c.Verify == nil || c.Verify.Err() != nil {
			t.Fatalf("consume --isolation %s: %d records, want %d; verify %+v", iso, c.Records, want, c.Verify)
		}
	}

	// E2E with transactions reads what is committed, as it is committed.
	out, err = RunCommand(t, "e2e", "--bootstrap", bootstrap, "--topic", topic,
		"--records", "300", "--size", "16", "--transactional-id", topic+"-e2e", "--txn-records", "30",
		"--txn-abort-every", "3", "--verify", "--seed", "6", "--json")
	if err != nil {
		t.Fatalf("e2e: %v\n%s", err, out)
	}
	var e jsonResult
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("e2e --json printed %q: %v", out, err)
	}
	const txns = 300 / 30
	if want := int64(txns-txns/3) * 30; e.Records != want || e.Verify == nil || e.Verify.AbortedRead != 0 {
		t.Fatalf("e2e received %d records (want the %d committed), verify %+v", e.Records, want, e.Verify)
	}
}
