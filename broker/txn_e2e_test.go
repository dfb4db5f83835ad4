package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
	"strata/tier/objstore"
)

// The done-when tests of issue 14 (exactly-once), with franz-go as the
// client: what a user of transactions checks is that a read_committed
// consumer sees every committed record once and nothing aborted, whether
// the history is on local disk or in the bucket; that a zombie producer is
// fenced; that a dead producer's transaction does not hold consumers back;
// and that a request with a stale epoch, a wrong producer id or a bad
// sequence gets the Kafka error code a client acts on.

// txnBroker is testBroker with a small __transaction_state and
// __consumer_offsets, no initial rebalance delay, and the timeout sweep
// run often enough that a 2 s transaction timeout is acted on promptly.
func txnBroker(t testing.TB, dir string, mutate ...func(*Config)) *Broker {
	return testBroker(t, dir, append([]func(*Config){txnSettings}, mutate...)...)
}

func txnSettings(c *Config) {
	c.TransactionStatePartitions = 3
	c.OffsetsPartitions = 3
	c.TransactionAbortInterval = 100 * time.Millisecond
	c.GroupInitialRebalanceDelay = -1
	c.GroupMinSessionTimeout = 500 * time.Millisecond
}

// txnKey names record r of transaction x of producer p; the value repeats
// it, padded so that a few dozen records fill a small segment.
func txnKey(p, x, r int) string { return fmt.Sprintf("p%d t%03d r%02d", p, x, r) }

func txnValue(key string) []byte { return []byte(key + " " + strings.Repeat("v", 200)) }

// txnWorkload is what runTxnWorkload wrote: every key, and whether the
// transaction (or plain produce) that wrote it committed.
type txnWorkload struct {
	committed map[string]bool // key → committed (false: aborted)
}

// runTxnWorkload runs producers transactional producers concurrently on
// topic, each writing txns transactions of perTxn records spread over the
// topic's partitions, committing or aborting them in an interleaved
// pattern; an idempotent non-transactional producer writes a record
// between transactions. It returns once every producer has ended its last
// transaction.
func runTxnWorkload(t *testing.T, b *Broker, topic string, producers, txns, perTxn int) txnWorkload {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := txnWorkload{committed: map[string]bool{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, producers+1)
	for p := range producers {
		cl := testClient(t, b, kgo.TransactionalID(fmt.Sprintf("%s-producer-%d", topic, p)),
			kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
			kgo.TransactionTimeout(time.Minute), kgo.ProducerBatchCompression(kgo.NoCompression()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for x := range txns {
				if err := cl.BeginTransaction(); err != nil {
					errs <- fmt.Errorf("producer %d: begin %d: %w", p, x, err)
					return
				}
				var recs []*kgo.Record
				for r := range perTxn {
					k := txnKey(p, x, r)
					recs = append(recs, &kgo.Record{Key: []byte(k), Value: txnValue(k)})
				}
				if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					errs <- fmt.Errorf("producer %d: produce in transaction %d: %w", p, x, err)
					return
				}
				commit := (p+x)%3 != 0
				if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
					errs <- fmt.Errorf("producer %d: end transaction %d (commit %v): %w", p, x, commit, err)
					return
				}
				mu.Lock()
				for _, r := range recs {
					w.committed[string(r.Key)] = commit
				}
				mu.Unlock()
			}
		}()
	}
	plain := testClient(t, b, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range txns {
			k := fmt.Sprintf("plain %03d", i)
			if err := plain.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: txnValue(k)}).FirstErr(); err != nil {
				errs <- fmt.Errorf("plain produce %d: %w", i, err)
				return
			}
			mu.Lock()
			w.committed[k] = true
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return w
}

// readIsolated reads every partition of topic from its start to its high
// watermark at the given isolation level and returns the data records
// (control records dropped) by partition. It asks for control records so
// that it knows when it is past the end: the last offset below the high
// watermark is a marker or a record a read_committed consumer sees, once
// no transaction is open. A read_committed read that cannot get there
// (the last stable offset held back) fails the test after a minute.
func readIsolated(t *testing.T, b *Broker, topic string, committed bool) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := testAdmin(t, b).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s-%d: %v", topic, o.Partition, o.Err)
		}
		want[o.Partition] = o.Offset
	})
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl := testClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(), kgo.FetchMaxBytes(16<<20))
	defer cl.Close()
	out := map[int32][]*kgo.Record{}
	last := map[int32]int64{}
	done := func() bool {
		for p, end := range want {
			if end > 0 && last[p] < end-1 {
				return false
			}
		}
		return true
	}
	for p := range want {
		last[p] = -1
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s (read_committed %v): reached offsets %v of high watermarks %v within a minute", topic, committed, last, want)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last[r.Partition] {
				t.Fatalf("%s-%d: offset %d after %d", topic, r.Partition, r.Offset, last[r.Partition])
			}
			last[r.Partition] = r.Offset
			if !r.Attrs.IsControl() {
				out[r.Partition] = append(out[r.Partition], r)
			}
		})
	}
	return out
}

// checkTxnRead checks what readIsolated returned against w: each record
// once, read_committed exactly the committed ones and read_uncommitted all
// of them, and within a partition each producer's records in the order it
// wrote them.
func checkTxnRead(t *testing.T, what string, got map[int32][]*kgo.Record, w txnWorkload, committed bool) {
	t.Helper()
	seen := map[string]bool{}
	aborted := 0
	for p, recs := range got {
		lastOf := map[string]string{} // producer → its last key in p
		for _, r := range recs {
			k := string(r.Key)
			c, ok := w.committed[k]
			switch {
			case !ok:
				t.Fatalf("%s: partition %d offset %d: record %q was never written", what, p, r.Offset, k)
			case seen[k]:
				t.Fatalf("%s: record %q read twice (again at partition %d offset %d)", what, k, p, r.Offset)
			case string(r.Value) != string(txnValue(k)):
				t.Fatalf("%s: record %q: value differs", what, k)
			case committed && !c:
				if aborted++; aborted <= 5 {
					t.Errorf("%s: partition %d offset %d: record %q of an aborted transaction is visible read_committed", what, p, r.Offset, k)
				}
			}
			seen[k] = true
			prod := strings.Fields(k)[0]
			if prev, ok := lastOf[prod]; ok && prev >= k {
				t.Fatalf("%s: partition %d: %q after %q: out of order", what, p, k, prev)
			}
			lastOf[prod] = k
		}
	}
	missing := 0
	for k, c := range w.committed {
		if !seen[k] && (c || !committed) {
			missing++
			if missing <= 5 {
				t.Errorf("%s: record %q (committed %v) missing", what, k, c)
			}
		}
	}
	if missing > 0 || aborted > 0 {
		t.Fatalf("%s: %d records missing, %d aborted ones visible", what, missing, aborted)
	}
}

// checkTxnTopic reads topic both ways and checks both reads against w.
func checkTxnTopic(t *testing.T, b *Broker, topic, when string, w txnWorkload) {
	t.Helper()
	checkTxnRead(t, when+", read_committed", readIsolated(t, b, topic, true), w, true)
	checkTxnRead(t, when+", read_uncommitted", readIsolated(t, b, topic, false), w, false)
}

// lastStable is the last stable offset of topic's partition: ListOffsets
// latest at read_committed.
func lastStable(t *testing.T, cl *kgo.Client, topic string, partition int32) int64 {
	t.Helper()
	return listLatest(t, cl, topic, partition, 1)
}

// highWatermark is ListOffsets latest at read_uncommitted.
func highWatermark(t *testing.T, cl *kgo.Client, topic string, partition int32) int64 {
	t.Helper()
	return listLatest(t, cl, topic, partition, 0)
}

func listLatest(t *testing.T, cl *kgo.Client, topic string, partition int32, isolation int8) int64 {
	t.Helper()
	return listOffsetAt(t, cl, topic, partition, -1, isolation)
}

// TestTxnAbortedNeverVisibleLocal: several producers commit and abort
// interleaved transactions over a topic of small segments kept on local
// disk; read_committed sees exactly the committed records (and the plain
// ones), in order, read_uncommitted all of them; after a restart, which
// recovers the logs from their files, the same; and after a restart with
// every aborted-transaction index torn, which rebuilds them, the same.
func TestTxnAbortedNeverVisibleLocal(t *testing.T) {
	dir := t.TempDir()
	b := txnBroker(t, dir)
	createTopic(t, testAdmin(t, b), "txn-local", 2, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"remote.storage.enable": ptr("false"),
	})
	w := runTxnWorkload(t, b, "txn-local", 3, 24, 10)
	if n := segmentFiles(t, b, "txn-local", 0); n < 3 {
		t.Fatalf("partition 0 has %d segments; the test wants transactions across several", n)
	}
	checkTxnTopic(t, b, "txn-local", "local", w)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = txnBroker(t, dir)
	checkTxnTopic(t, b, "txn-local", "local, after a restart", w)

	// With its aborted-transaction indexes torn (a crash in the middle of
	// an append: lengths no longer a multiple of an entry), the log
	// rebuilds them on start-up from the markers (docs/format.md §14).
	var dirs []string
	for p := range int32(2) {
		dirs = append(dirs, filepath.Join(b.logsDir, node.PartitionDir("txn-local", b.partition("txn-local", p).TopicID(), p)))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	torn := 0
	for _, d := range dirs {
		idx, err := filepath.Glob(filepath.Join(d, "*.txnindex"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range idx {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f, fi.Size()-5); err != nil {
				t.Fatal(err)
			}
			torn++
		}
	}
	if torn == 0 {
		t.Fatalf("no .txnindex file in %v", dirs)
	}
	b = txnBroker(t, dir)
	checkTxnTopic(t, b, "txn-local", fmt.Sprintf("local, after a restart with %d torn .txnindex files", torn), w)
}

// TestTxnAbortedNeverVisibleFromBucket is the same promise for history
// that is only in the bucket (issue 14, "across the tiers"): the topic
// tiers with small segments and one byte of local retention, the
// transactions end up in objects whose local copies are deleted, and a
// replay from the start filters the aborted records exactly as from
// local disk; again after a restart with a cold chunk cache.
func TestTxnAbortedNeverVisibleFromBucket(t *testing.T) {
	for _, st := range tierStores {
		t.Run(st.name, func(t *testing.T) { checkTxnFromBucket(t, st.open(t)) })
	}
}

func checkTxnFromBucket(t *testing.T, store objstore.Store) {
	const topic, partitions, segBytes = "txn-tiered", 2, 16384
	dir := t.TempDir()
	b := tieredBroker(t, dir, store, txnSettings)
	createTopic(t, testAdmin(t, b), topic, partitions, map[string]*string{
		"segment.bytes":         ptr(fmt.Sprint(segBytes)),
		"remote.storage.enable": ptr("true"),
		"local.retention.bytes": ptr("1"),
	})
	w := runTxnWorkload(t, b, topic, 3, 24, 10)
	txnEnd := map[int32]int64{}
	cl := testClient(t, b)
	for p := range int32(partitions) {
		txnEnd[p] = highWatermark(t, cl, topic, p)
	}
	// Plain records after the transactions roll their last segment, so
	// that every transactional record is in a closed segment, uploaded
	// and deleted locally.
	filler := testClient(t, b, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	for i := range 2 * partitions * segBytes / 256 {
		k := fmt.Sprintf("plain filler %04d", i)
		w.committed[k] = true
		filler.Produce(context.Background(), &kgo.Record{Key: []byte(k), Value: txnValue(k)}, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := filler.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitUploaded(t, b, topic, partitions)
	waitFor(t, 2*time.Minute, fmt.Sprintf("the transactions' segments (up to offsets %v) deleted locally", txnEnd), func() bool {
		for p := range int32(partitions) {
			if b.partition(topic, p).Log().StartOffset() < txnEnd[p] {
				return false
			}
		}
		return true
	})
	checkTxnTopic(t, b, topic, "from the bucket", w)

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = tieredBroker(t, dir, store, txnSettings)
	checkTxnTopic(t, b, topic, "from the bucket, after a restart", w)
}

// isFencing reports whether err is one of the errors Kafka fences a
// zombie producer with.
func isFencing(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// TestTxnZombieFenced: producer A (transactional id X) begins and writes;
// producer B starts with the same id, which fences A. A's next produce and
// its EndTxn fail with a fencing error, A's records are never visible to
// read_committed, and B's transaction commits.
func TestTxnZombieFenced(t *testing.T) {
	b := txnBroker(t, "")
	createTopic(t, testAdmin(t, b), "fenced", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := []kgo.Opt{kgo.TransactionalID("zombie"), kgo.DefaultProduceTopic("fenced"), kgo.TransactionTimeout(time.Minute)}

	a := testClient(t, b, opts...)
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := a.ProduceSync(ctx, &kgo.Record{Key: []byte("a"), Value: []byte("a1")}).FirstErr(); err != nil {
		t.Fatalf("A's first produce: %v", err)
	}
	aPID, aEpoch, err := a.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	bcl := testClient(t, b, opts...)
	if err := bcl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := bcl.ProduceSync(ctx, &kgo.Record{Key: []byte("b"), Value: []byte("b1")}).FirstErr(); err != nil {
		t.Fatalf("B's produce: %v", err)
	}
	bPID, bEpoch, err := bcl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bPID != aPID || bEpoch <= aEpoch {
		t.Fatalf("B has producer %d epoch %d, A had %d epoch %d: want A's id with a higher epoch", bPID, bEpoch, aPID, aEpoch)
	}
	if err := bcl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("B's commit: %v", err)
	}

	// The zombie: its produce and its commit are refused.
	err = a.ProduceSync(ctx, &kgo.Record{Key: []byte("a"), Value: []byte("a2")}).FirstErr()
	if !isFencing(err) {
		t.Errorf("A's produce after B started: %v, want PRODUCER_FENCED or INVALID_PRODUCER_EPOCH", err)
	}
	if err := a.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Errorf("A's commit after B started succeeded")
	}
	// The same EndTxn on the wire, so the code itself is checked whatever
	// the client made of the produce error.
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "zombie", aPID, aEpoch, true
	resp, err := end.RequestWith(ctx, testClient(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); !isFencing(err) {
		t.Errorf("EndTxn commit with A's epoch %d: %v, want PRODUCER_FENCED or INVALID_PRODUCER_EPOCH", aEpoch, err)
	}

	recs := readIsolated(t, b, "fenced", true)[0]
	if len(recs) != 1 || string(recs[0].Value) != "b1" {
		var vals []string
		for _, r := range recs {
			vals = append(vals, string(r.Value))
		}
		t.Fatalf("read_committed sees %q, want only B's record", vals)
	}
	if all := readIsolated(t, b, "fenced", false)[0]; len(all) < 2 {
		t.Fatalf("read_uncommitted sees %d records, want A's aborted one and B's", len(all))
	}
}

// TestTxnDeadProducerAbortedAtTimeout: a producer that dies with its transaction open
// (transaction.timeout.ms 2 s; the client is closed without ending it)
// holds the last stable offset back only until its timeout; then the
// coordinator aborts the transaction: its records stay invisible to
// read_committed, the last stable offset reaches the high watermark, and
// DescribeTransactions shows CompleteAbort.
func TestTxnDeadProducerAbortedAtTimeout(t *testing.T) {
	b := txnBroker(t, "")
	adm := testAdmin(t, b)
	createTopic(t, adm, "stalled", 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := testClient(t, b)

	dead := testClient(t, b, kgo.TransactionalID("dead"), kgo.DefaultProduceTopic("stalled"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.TransactionTimeout(2*time.Second))
	if err := dead.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "never committed %d", i)})
	}
	if err := dead.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dead.Close() // without ending the transaction

	// A plain record after the open transaction: a read_committed consumer
	// may see it only once the transaction is over.
	plain := testClient(t, b, kgo.DefaultProduceTopic("stalled"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := plain.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if lso, hw := lastStable(t, cl, "stalled", 0), highWatermark(t, cl, "stalled", 0); lso != 0 || hw < 2 {
		t.Fatalf("with the transaction open: last stable offset %d, high watermark %d; want 0 and the records above it", lso, hw)
	}

	took := waitFor(t, 30*time.Second, "the last stable offset to reach the high watermark", func() bool {
		for p := range int32(2) {
			if lastStable(t, cl, "stalled", p) != highWatermark(t, cl, "stalled", p) {
				return false
			}
		}
		return true
	})
	t.Logf("the transaction was aborted %v after the producer died", took)
	// The coordinator records CompleteAbort once every marker is written:
	// a moment after the last one moves the last stable offset.
	waitFor(t, 10*time.Second, "the coordinator to record CompleteAbort", func() bool {
		d, err := adm.DescribeTransactions(ctx, "dead")
		if err != nil {
			t.Fatal(err)
		}
		got := d["dead"]
		if got.Err != nil {
			t.Fatalf("DescribeTransactions: %v", got.Err)
		}
		return got.State == "CompleteAbort"
	})
	got := readIsolated(t, b, "stalled", true)
	if len(got[1]) != 0 || len(got[0]) != 1 || string(got[0][0].Value) != "after" {
		t.Fatalf("read_committed sees %d records on partition 0 and %d on 1; want only the plain one", len(got[0]), len(got[1]))
	}
}

// retriableTxnCode is a code a client retries a transactional request on:
// the coordinator is loading or elsewhere, or the previous step is still
// writing.
func retriableTxnCode(code int16) bool {
	switch code {
	case kerr.ConcurrentTransactions.Code, kerr.CoordinatorLoadInProgress.Code,
		kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code:
		return true
	}
	return false
}

// untilSettled sends a request until its code is not one a client retries
// on, for at most 30 s, and returns the last code.
func untilSettled(t *testing.T, what string, send func() int16) int16 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code := send()
		if !retriableTxnCode(code) {
			return code
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after 30s", what, kerr.ErrorForCode(code))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rawTxn is txnClient (txn_coord_test.go: raw frames, at the version
// each request names) with the requests of these tests, each retried while
// its code is one a client retries on.
type rawTxn struct{ txnClient }

func newRawTxn(t *testing.T, b *Broker) rawTxn { return rawTxn{newTxnClient(t, b)} }

// Highest versions a client sends; the cases that check an older client's
// codes name theirs.
const (
	vInitProducerID  = 5
	vAddPartitions   = 3 // v4+ is the brokers' verification form
	vAddOffsets      = 4
	vEndTxn          = 5
	vTxnOffsetCommit = 4
	vProduce         = 12
)

// coordinator asks for id's coordinator until one is named, which on a
// single node also creates __transaction_state.
func (r rawTxn) coordinator(id string) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version, req.CoordinatorType, req.CoordinatorKeys = 4, 1, []string{id}
	untilSettled(r.t, "FindCoordinator", func() int16 {
		resp := r.req(req).(*kmsg.FindCoordinatorResponse)
		if len(resp.Coordinators) != 1 {
			r.t.Fatalf("FindCoordinator: %d answers", len(resp.Coordinators))
		}
		return resp.Coordinators[0].ErrorCode
	})
}

// initPID is InitProducerId; it returns the code and the producer id and
// epoch.
func (r rawTxn) initPID(version int16, id string, timeoutMs int32, pid int64, epoch int16) (int16, int64, int16) {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = version
	req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = &id, timeoutMs, pid, epoch
	var resp *kmsg.InitProducerIDResponse
	code := untilSettled(r.t, "InitProducerId", func() int16 {
		resp = r.req(req).(*kmsg.InitProducerIDResponse)
		return resp.ErrorCode
	})
	return code, resp.ProducerID, resp.ProducerEpoch
}

func (r rawTxn) mustInit(id string) (int64, int16) {
	r.coordinator(id)
	code, pid, epoch := r.initPID(vInitProducerID, id, 60000, -1, -1)
	if code != 0 {
		r.t.Fatalf("InitProducerId %q: %v", id, kerr.ErrorForCode(code))
	}
	return pid, epoch
}

// addParts is AddPartitionsToTxn of partitions of topic; it returns the
// first partition's code.
func (r rawTxn) addParts(version int16, id string, pid int64, epoch int16, topic string, partitions ...int32) int16 {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = version
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = id, pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = topic, partitions
	req.Topics = append(req.Topics, rt)
	return untilSettled(r.t, "AddPartitionsToTxn", func() int16 {
		resp := r.req(req).(*kmsg.AddPartitionsToTxnResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != len(partitions) {
			r.t.Fatalf("AddPartitionsToTxn: answer for %d topics", len(resp.Topics))
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	})
}

func (r rawTxn) addOffsets(version int16, id string, pid int64, epoch int16, group string) int16 {
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	req.Version = version
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = id, pid, epoch, group
	return untilSettled(r.t, "AddOffsetsToTxn", func() int16 {
		return r.req(req).(*kmsg.AddOffsetsToTxnResponse).ErrorCode
	})
}

// end is EndTxn; it returns the code.
func (r rawTxn) end(version int16, id string, pid int64, epoch int16, commit bool) int16 {
	req := kmsg.NewPtrEndTxnRequest()
	req.Version = version
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, epoch, commit
	return untilSettled(r.t, "EndTxn", func() int16 {
		return r.req(req).(*kmsg.EndTxnResponse).ErrorCode
	})
}

// txnOffsetCommit commits offset 1 of topic's partition 0 for group in
// id's transaction, as member of generation (KIP-447).
func (r rawTxn) txnOffsetCommit(id, group, topic string, pid int64, epoch int16, member string, generation int32) int16 {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version = vTxnOffsetCommit
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = id, group, pid, epoch
	req.MemberID, req.Generation = member, generation
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Offset = 1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return untilSettled(r.t, "TxnOffsetCommit", func() int16 {
		return r.req(req).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	})
}

// produce sends one batch to topic/partition with the request's
// transactional id txnID (nil for none) and returns the partition's code.
func (r rawTxn) produce(txnID *string, topic string, partition int32, batch []byte) int16 {
	req := kmsg.NewPtrProduceRequest()
	req.Version = vProduce
	req.TransactionID = txnID
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return r.req(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
}

// txnBatch is txnRawBatch stamped now.
func txnBatch(pid int64, epoch int16, seq int32, values ...string) []byte {
	return txnRawBatch(pid, epoch, seq, time.Now().UnixMilli(), values...)
}

// TestTxnLateProduceRefused is KIP-890 part 1's case: a producer's
// transaction on partition 0 commits, and then a produce of the same
// producer id and epoch arrives (a retry the network delayed) for a
// partition no ongoing transaction holds. It is refused, nothing is
// written, and no transaction is left open on the partition: its last
// stable offset stays at its high watermark. Run with a pre-KIP-890 end
// (EndTxn v3: the epoch stays, so only the verification stands in the
// way) and a KIP-890 part 2 end (EndTxn v5: the epoch is bumped).
func TestTxnLateProduceRefused(t *testing.T) {
	b := txnBroker(t, "")
	cl := testClient(t, b)
	for _, v := range []int16{3, 5} {
		t.Run(fmt.Sprintf("EndTxn v%d", v), func(t *testing.T) {
			topic := fmt.Sprintf("late-v%d", v)
			createTopic(t, testAdmin(t, b), topic, 2, nil)
			r := newRawTxn(t, b)
			id := topic
			pid, epoch := r.mustInit(id)
			if code := r.addParts(vAddPartitions, id, pid, epoch, topic, 0); code != 0 {
				t.Fatalf("AddPartitionsToTxn: %v", kerr.ErrorForCode(code))
			}
			if code := r.produce(&id, topic, 0, txnBatch(pid, epoch, 0, "committed")); code != 0 {
				t.Fatalf("produce in the transaction: %v", kerr.ErrorForCode(code))
			}
			if code := r.end(v, id, pid, epoch, true); code != 0 {
				t.Fatalf("EndTxn commit: %v", kerr.ErrorForCode(code))
			}
			// EndTxn answers once the commit is decided; the markers are
			// written after, in the background. The high watermarks are
			// read once they are in (a high watermark read before the
			// marker is below the last stable offset the marker makes).
			r.waitState(id, "CompleteCommit")
			hw := []int64{highWatermark(t, cl, topic, 0), highWatermark(t, cl, topic, 1)}
			if lso := lastStable(t, cl, topic, 0); lso != hw[0] {
				t.Fatalf("partition 0: last stable offset %d after the commit marker, high watermark %d", lso, hw[0])
			}

			// The late retries: the next sequence on partition 0, the first
			// on partition 1; neither partition is in a transaction.
			for _, late := range []struct {
				partition int32
				seq       int32
			}{{0, 1}, {1, 0}} {
				code := r.produce(&id, topic, late.partition, txnBatch(pid, epoch, late.seq, "late retry"))
				switch code {
				case kerr.TransactionAbortable.Code, kerr.InvalidProducerEpoch.Code, kerr.InvalidTxnState.Code, kerr.ProducerFenced.Code:
				default:
					t.Errorf("late produce to partition %d: %v, want it refused (TRANSACTION_ABORTABLE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE or PRODUCER_FENCED)",
						late.partition, kerr.ErrorForCode(code))
				}
				if got := highWatermark(t, cl, topic, late.partition); got != hw[late.partition] {
					t.Errorf("partition %d: high watermark %d after the late produce, was %d: it was written", late.partition, got, hw[late.partition])
				}
				if lso, now := lastStable(t, cl, topic, late.partition), highWatermark(t, cl, topic, late.partition); lso != now {
					t.Errorf("partition %d: last stable offset %d, high watermark %d: the late produce left a transaction hanging", late.partition, lso, now)
				}
			}
			got := readIsolated(t, b, topic, true)
			if len(got[0]) != 1 || string(got[0][0].Value) != "committed" || len(got[1]) != 0 {
				t.Fatalf("read_committed sees %d records on partition 0 and %d on 1, want the committed one", len(got[0]), len(got[1]))
			}
		})
	}
}

// codeCase is one request of TestTxnBadRequestCodes: send returns the
// code it got, want the codes Kafka answers with (more than one only where
// Kafka's own versions differ).
type codeCase struct {
	name string
	send func() int16
	want []*kerr.Error
}

// TestTxnBadRequestCodes: every transactional and idempotent request with
// a bad epoch, sequence or id gets the Kafka error code a client acts on
// (docs/transactions.md, "Fencing"; Kafka's TransactionCoordinator,
// ProducerAppendInfo and LogValidator): INVALID_REQUEST and
// INVALID_TRANSACTION_TIMEOUT for a bad InitProducerId;
// INVALID_PRODUCER_ID_MAPPING for an id the coordinator does not know or
// another producer id; PRODUCER_FENCED for an old epoch, and
// INVALID_PRODUCER_EPOCH for clients that predate KIP-588 (v0-1 of
// AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, v3 of InitProducerId);
// INVALID_TXN_STATE for a commit with nothing open; KIP-447's
// UNKNOWN_MEMBER_ID and ILLEGAL_GENERATION for a TxnOffsetCommit of a
// member that is not the group's; on produce, OUT_OF_ORDER_SEQUENCE_NUMBER
// for a gap or a new epoch not starting at 0, INVALID_PRODUCER_EPOCH for an
// old epoch, and INVALID_RECORD for a control batch from a client. None of
// them changes anything: the transaction they tried to disturb commits.
func TestTxnBadRequestCodes(t *testing.T) {
	b := txnBroker(t, "")
	createTopic(t, testAdmin(t, b), "codes", 1, nil)
	cl := testClient(t, b)
	r := newRawTxn(t, b)
	str := func(s string) *string { return &s }

	// "codes-a": a transactional id at its second epoch, with an open
	// transaction on codes-0 and the group's offsets partition.
	pid, e0 := r.mustInit("codes-a")
	_, epoch := r.mustInit("codes-a")
	if epoch != e0+1 {
		t.Fatalf("second InitProducerId: epoch %d after %d", epoch, e0)
	}
	if code := r.addParts(vAddPartitions, "codes-a", pid, epoch, "codes", 0); code != 0 {
		t.Fatalf("AddPartitionsToTxn: %v", kerr.ErrorForCode(code))
	}
	if code := r.addOffsets(vAddOffsets, "codes-a", pid, epoch, "codes-group"); code != 0 {
		t.Fatalf("AddOffsetsToTxn: %v", kerr.ErrorForCode(code))
	}
	if code := r.produce(str("codes-a"), "codes", 0, txnBatch(pid, epoch, 0, "in a")); code != 0 {
		t.Fatalf("produce in the transaction: %v", kerr.ErrorForCode(code))
	}
	// "codes-empty": initialised twice (so it has an old epoch), nothing
	// open.
	r.mustInit("codes-empty")
	ePID, eEpoch := r.mustInit("codes-empty")
	// A live member of "codes-group", for KIP-447's checks.
	member := testClient(t, b, kgo.ConsumerGroup("codes-group"), kgo.ConsumeTopics("codes"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var memberID string
	var generation int32
	waitFor(t, 30*time.Second, "the group member to join", func() bool {
		member.PollRecords(ctx, 1)
		memberID, generation = member.GroupMetadata()
		return generation > 0
	})
	// An idempotent producer at epoch 1 on codes-0.
	idem := initProducerID(t, cl)
	for _, step := range []struct {
		epoch int16
		seq   int32
	}{{0, 0}, {1, 0}} {
		if code := r.produce(nil, "codes", 0, rawBatch(idem, step.epoch, step.seq, time.Now().UnixMilli(), "idem")); code != 0 {
			t.Fatalf("idempotent produce epoch %d: %v", step.epoch, kerr.ErrorForCode(code))
		}
	}

	initCode := func(version int16, id string, timeoutMs int32, p int64, ep int16) int16 {
		code, _, _ := r.initPID(version, id, timeoutMs, p, ep)
		return code
	}
	now := func() int64 { return time.Now().UnixMilli() }
	old := epoch - 1
	mapping := []*kerr.Error{kerr.InvalidProducerIDMapping}
	fence := []*kerr.Error{kerr.ProducerFenced}
	oldFence := []*kerr.Error{kerr.InvalidProducerEpoch}
	cases := []codeCase{
		{"InitProducerId empty id", func() int16 { return initCode(vInitProducerID, "", 60000, -1, -1) }, []*kerr.Error{kerr.InvalidRequest}},
		{"InitProducerId timeout 0", func() int16 { return initCode(vInitProducerID, "codes-t0", 0, -1, -1) }, []*kerr.Error{kerr.InvalidTransactionTimeout}},
		{"InitProducerId timeout above the max", func() int16 {
			return initCode(vInitProducerID, "codes-t1", int32((16 * time.Minute).Milliseconds()), -1, -1)
		}, []*kerr.Error{kerr.InvalidTransactionTimeout}},
		{"InitProducerId old epoch", func() int16 { return initCode(vInitProducerID, "codes-empty", 60000, ePID, eEpoch-1) }, fence},
		{"InitProducerId v3 old epoch", func() int16 { return initCode(3, "codes-empty", 60000, ePID, eEpoch-1) }, oldFence},

		{"AddPartitionsToTxn unknown id", func() int16 { return r.addParts(vAddPartitions, "codes-nobody", pid, epoch, "codes", 0) }, mapping},
		{"AddPartitionsToTxn other producer id", func() int16 { return r.addParts(vAddPartitions, "codes-a", ePID, epoch, "codes", 0) }, mapping},
		{"AddPartitionsToTxn old epoch", func() int16 { return r.addParts(vAddPartitions, "codes-a", pid, old, "codes", 0) }, fence},
		{"AddPartitionsToTxn v1 old epoch", func() int16 { return r.addParts(1, "codes-a", pid, old, "codes", 0) }, oldFence},

		{"AddOffsetsToTxn unknown id", func() int16 { return r.addOffsets(vAddOffsets, "codes-nobody", pid, epoch, "codes-group") }, mapping},
		{"AddOffsetsToTxn other producer id", func() int16 { return r.addOffsets(vAddOffsets, "codes-a", ePID, epoch, "codes-group") }, mapping},
		{"AddOffsetsToTxn old epoch", func() int16 { return r.addOffsets(vAddOffsets, "codes-a", pid, old, "codes-group") }, fence},
		{"AddOffsetsToTxn v1 old epoch", func() int16 { return r.addOffsets(1, "codes-a", pid, old, "codes-group") }, oldFence},

		{"EndTxn unknown id", func() int16 { return r.end(vEndTxn, "codes-nobody", pid, epoch, true) }, mapping},
		{"EndTxn other producer id", func() int16 { return r.end(3, "codes-a", ePID, epoch, true) }, mapping},
		{"EndTxn old epoch", func() int16 { return r.end(3, "codes-a", pid, old, true) }, fence},
		{"EndTxn v1 old epoch", func() int16 { return r.end(1, "codes-a", pid, old, true) }, oldFence},
		{"EndTxn commit with nothing open", func() int16 { return r.end(3, "codes-empty", ePID, eEpoch, true) }, []*kerr.Error{kerr.InvalidTxnState}},

		{"TxnOffsetCommit unknown id", func() int16 {
			return r.txnOffsetCommit("codes-nobody", "codes-group", "codes", pid, epoch, memberID, generation)
		}, []*kerr.Error{kerr.InvalidProducerIDMapping, kerr.InvalidTxnState}},
		{"TxnOffsetCommit other producer id", func() int16 {
			return r.txnOffsetCommit("codes-a", "codes-group", "codes", ePID, epoch, memberID, generation)
		}, []*kerr.Error{kerr.InvalidProducerIDMapping, kerr.InvalidTxnState}},
		{"TxnOffsetCommit old epoch", func() int16 {
			return r.txnOffsetCommit("codes-a", "codes-group", "codes", pid, old, memberID, generation)
		}, []*kerr.Error{kerr.ProducerFenced, kerr.InvalidProducerEpoch}},
		{"TxnOffsetCommit unknown member", func() int16 {
			return r.txnOffsetCommit("codes-a", "codes-group", "codes", pid, epoch, "nobody", generation)
		}, []*kerr.Error{kerr.UnknownMemberID}},
		{"TxnOffsetCommit old generation", func() int16 {
			return r.txnOffsetCommit("codes-a", "codes-group", "codes", pid, epoch, memberID, generation-1)
		}, []*kerr.Error{kerr.IllegalGeneration}},

		{"Produce sequence gap", func() int16 { return r.produce(nil, "codes", 0, rawBatch(idem, 1, 5, now(), "gap")) },
			[]*kerr.Error{kerr.OutOfOrderSequenceNumber}},
		{"Produce old epoch", func() int16 { return r.produce(nil, "codes", 0, rawBatch(idem, 0, 1, now(), "old")) },
			[]*kerr.Error{kerr.InvalidProducerEpoch}},
		{"Produce new epoch not at sequence 0", func() int16 { return r.produce(nil, "codes", 0, rawBatch(idem, 2, 3, now(), "new")) },
			[]*kerr.Error{kerr.OutOfOrderSequenceNumber}},
		{"Produce transactional old epoch", func() int16 { return r.produce(str("codes-a"), "codes", 0, txnBatch(pid, old, 1, "zombie")) },
			[]*kerr.Error{kerr.InvalidProducerEpoch, kerr.ProducerFenced}},
		{"Produce control batch", func() int16 {
			return r.produce(str("codes-a"), "codes", 0, withAttributes(rawBatch(pid, epoch, -1, now(), "\x00\x00\x00\x01"), 0x30))
		}, []*kerr.Error{kerr.InvalidRecord}},
	}
	hw := highWatermark(t, cl, "codes", 0)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code := c.send()
			for _, w := range c.want {
				if code == w.Code {
					return
				}
			}
			t.Errorf("got %v, want %v", kerr.ErrorForCode(code), c.want)
		})
	}
	if got := highWatermark(t, cl, "codes", 0); got != hw {
		t.Errorf("high watermark %d after the refused produces, was %d", got, hw)
	}
	if code := r.end(3, "codes-a", pid, epoch, true); code != 0 {
		t.Fatalf("commit of codes-a after the bad requests: %v", kerr.ErrorForCode(code))
	}
	got := readIsolated(t, b, "codes", true)[0]
	vals := map[string]int{}
	for _, r := range got {
		vals[string(r.Value)]++
	}
	if vals["in a"] != 1 || vals["idem"] != 2 || len(got) != 3 {
		t.Fatalf("read_committed sees %v, want the transaction's record and the two idempotent ones", vals)
	}
}
