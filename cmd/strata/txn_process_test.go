package main

import (
	"context"
	be "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The done-when tests of issue 14 that need real processes: a
// consume-transform-produce pipeline of member processes killed and
// restarted under it, and strata nodes killed in the middle of
// transactions. What a user checks afterwards is what a read_committed
// consumer sees: every input record transformed exactly once, every
// committed transaction whole, nothing aborted, nothing left hanging.

// memberEnv carries a pipeline member's settings (JSON) to the test binary
// re-executed as that member.
const memberEnv = "STRATA_TXN_PIPELINE_MEMBER"

type memberConfig struct {
	Bootstrap     string
	TransactionID string
	Group         string
	Input, Output string
}

func pipelineInput(i uint64) []byte {
	return fmt.Appendf(nil, "input %d %s", i, strings.Repeat(string(rune('a'+i%26)), int(20+i%80)))
}

// pipelineTransform is what a member writes for an input value.
func pipelineTransform(v []byte) []byte {
	return append([]byte("transformed "), v...)
}

// TestTxnPipelineMember is not a test: it is the member process of
// TestTxnPipelineExactlyOnce, which runs the test binary again with
// memberEnv set. A member reads the input read_committed in a
// GroupTransactSession, writes each record transformed to the output, and
// commits the output and its input offsets in one transaction, as a
// stream processor does, until it is killed (or ten minutes have passed,
// should its parent die without killing it).
func TestTxnPipelineMember(t *testing.T) {
	spec := os.Getenv(memberEnv)
	if spec == "" {
		t.Skip("the member process of TestTxnPipelineExactlyOnce; runs only when that test starts it")
	}
	var c memberConfig
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		t.Fatalf("%s: %v", memberEnv, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(strings.Split(c.Bootstrap, ",")...),
		kgo.TransactionalID(c.TransactionID),
		kgo.TransactionTimeout(10*time.Second),
		kgo.ConsumerGroup(c.Group),
		kgo.ConsumeTopics(c.Input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(6*time.Second),
		kgo.DefaultProduceTopic(c.Output),
		kgo.MaxBufferedRecords(20_000),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		// Transactions of at most 100 records: many of them, so that
		// the kills land in the middle of the stream.
		fs := sess.PollRecords(pctx, 100)
		pcancel()
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "member %s: fetch %s-%d: %v\n", c.TransactionID, topic, p, err)
			}
		})
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatalf("member %s: begin: %v", c.TransactionID, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Key: r.Key, Value: pipelineTransform(r.Value)}, func(_ *kgo.Record, err error) {
				if err != nil && !errors.Is(err, kgo.ErrAborting) {
					fmt.Fprintf(os.Stderr, "member %s: produce: %v\n", c.TransactionID, err)
				}
			})
		})
		if _, err := sess.End(ctx, kgo.TryCommit); err != nil {
			// The session is unusable after an error End does not absorb:
			// exit, and let the supervisor (the test) start a new member.
			t.Fatalf("member %s: end: %v", c.TransactionID, err)
		}
	}
}

// member is one running member process.
type member struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

func startMember(t *testing.T, c memberConfig) *member {
	t.Helper()
	spec, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{out: &syncBuffer{}, exited: make(chan struct{})}
	m.cmd = exec.Command(os.Args[0], "-test.run=^TestTxnPipelineMember$", "-test.count=1", "-test.v")
	m.cmd.Env = append(os.Environ(), memberEnv+"="+string(spec))
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		m.cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(func() { m.kill() })
	return m
}

// kill sends SIGKILL and waits for the process to be gone.
func (m *member) kill() {
	select {
	case <-m.exited:
	default:
		m.cmd.Process.Signal(syscall.SIGKILL)
		<-m.exited
	}
}

func (m *member) running() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// tail is the last n bytes of what the member printed.
func (m *member) tail(n int) string {
	s := m.out.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// TestTxnPipelineExactlyOnce is issue 14's consume-transform-produce
// promise: three member processes in one GroupTransactSession read an
// input topic of 200,000 records (20,000 under -short) and write each one
// transformed to an output topic, while members are SIGKILLed at random
// moments and restarted. Afterwards the output, read read_committed,
// holds every input record exactly once, and the group's committed
// offsets are the input's end offsets.
func TestTxnPipelineExactlyOnce(t *testing.T) {
	if os.Getenv(memberEnv) != "" {
		t.Skip("inside a member process")
	}
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	node := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	runPipeline(t, node.bootstrap, n)
	node.stop(t)
}

// runPipeline is TestTxnPipelineExactlyOnce against the node at
// bootstrap, with n input records.
func runPipeline(t *testing.T, bootstrap string, n int) {
	t.Helper()
	node := struct{ bootstrap string }{bootstrap}
	const input, output, group = "pipeline-in", "pipeline-out", "pipeline"
	mustCreate(t, node.bootstrap, input, 6, nil)
	mustCreate(t, node.bootstrap, output, 3, nil)

	prod := newClient(t, node.bootstrap, kgo.DefaultProduceTopic(input), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(32<<10))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range uint64(n) {
		prod.Produce(ctx, &kgo.Record{Key: be.BigEndian.AppendUint64(nil, i), Value: pipelineInput(i)}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce input %d: %v", i, err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	adm := kadm.NewClient(newClient(t, node.bootstrap))
	ends, err := adm.ListEndOffsets(ctx, input)
	if err != nil {
		t.Fatal(err)
	}

	members := make([]*member, 3)
	configs := make([]memberConfig, 3)
	for i := range members {
		configs[i] = memberConfig{Bootstrap: node.bootstrap, TransactionID: fmt.Sprintf("pipeline-member-%d", i),
			Group: group, Input: input, Output: output}
		members[i] = startMember(t, configs[i])
	}
	crashes := 0
	// restartExited starts again any member that exited on its own (a
	// member stops on an error its session cannot absorb), as a supervisor
	// would, and logs what it printed.
	restartExited := func() {
		for i, m := range members {
			if !m.running() {
				crashes++
				t.Logf("member %d exited on its own (%v):\n%s", i, m.cmd.ProcessState, m.tail(2000))
				members[i] = startMember(t, configs[i])
			}
		}
	}
	// committed counts the input records whose offsets the group has
	// committed.
	committed := func() (int64, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return 0, err.Error()
		}
		var done, behind int64
		ends.Each(func(e kadm.ListedOffset) {
			if o, ok := offs.Lookup(input, e.Partition); ok && o.At >= 0 {
				done += o.At
				behind += e.Offset - o.At
				return
			}
			behind += e.Offset
		})
		return done, fmt.Sprintf("%d input records committed, %d not", done, behind)
	}
	committedAll := func() (bool, string) {
		done, state := committed()
		return done == int64(n), state
	}

	// The kills are spread over the stream: kill r of k comes once about
	// (r+1)/(k+1) of the input is committed, a little earlier at random,
	// so that every one lands in the middle of the work.
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	rounds := faultRounds(t, 6, 3)
	t.Logf("fault seed %d, %d kills", seed, rounds)
	kills := 0
kill:
	for r := range rounds {
		step := int64(n / (rounds + 1))
		target := int64(r+1)*step - int64(rng.IntN(int(step/2)))
		var state string
		deadline := time.Now().Add(2 * time.Minute)
		for {
			var done int64
			done, state = committed()
			if done == int64(n) {
				// The survivors of a kill go on while it restarts, and
				// can finish the stream before the next kill's turn.
				if kills == 0 {
					t.Fatalf("the input was all committed before the first kill")
				}
				t.Logf("the input was all committed after %d of %d kills", kills, rounds)
				break kill
			}
			if done >= target {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("before kill %d: %s; not %d within 2 minutes", r+1, state, target)
			}
			restartExited()
			time.Sleep(50 * time.Millisecond)
		}
		i := rng.IntN(len(members))
		t.Logf("killing member %d: %s", i, state)
		members[i].kill()
		kills++
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		members[i] = startMember(t, configs[i])
	}
	bound := 4 * time.Minute
	var last string
	for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		done, state := committedAll()
		if done {
			t.Logf("input committed %v after the last kill", time.Since(start).Round(time.Millisecond))
			break
		}
		last = state
		if time.Since(start) > bound {
			for i, m := range members {
				t.Logf("member %d:\n%s", i, m.tail(3000))
			}
			t.Fatalf("the input was not all committed within %v of the last kill: %s", bound, last)
		}
		restartExited()
	}
	for _, m := range members {
		m.kill()
	}
	t.Logf("%d kills, %d members exited on their own", kills, crashes)

	got := readTxnTopic(t, []string{node.bootstrap}, output, true)
	count := make([]int, n)
	for _, recs := range got {
		for _, r := range recs {
			i := be.BigEndian.Uint64(r.Key)
			if i >= uint64(n) {
				t.Fatalf("output record with unknown key %d", i)
			}
			if string(r.Value) != string(pipelineTransform(pipelineInput(i))) {
				t.Fatalf("output of input %d: value differs", i)
			}
			count[i]++
		}
	}
	lost, dup := 0, 0
	for i, c := range count {
		switch {
		case c == 0:
			if lost++; lost <= 5 {
				t.Errorf("input %d is not in the output", i)
			}
		case c > 1:
			if dup++; dup <= 5 {
				t.Errorf("input %d is in the output %d times", i, c)
			}
		}
	}
	if lost > 0 || dup > 0 {
		t.Fatalf("read_committed output: %d of %d inputs lost, %d duplicated", lost, n, dup)
	}
	if done, state := committedAll(); !done {
		t.Fatalf("committed input offsets differ from the input's end offsets: %s", state)
	}
}

// readTxnTopic reads topic from the start to its high watermark, read_committed or not, and returns its data records by
// partition; opts are the clients' security settings, if any. It keeps control records to know when it is past the end
// (the last offset below the high watermark is a marker or a visible
// record once no transaction is open); a read_committed read held back by
// a hanging transaction fails after a minute.
func readTxnTopic(t *testing.T, seeds []string, topic string, committed bool, opts ...kgo.Opt) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := kadm.NewClient(newClient(t, seeds[0], append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want, last := map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s-%d: %v", topic, o.Partition, o.Err)
		}
		want[o.Partition], last[o.Partition] = o.Offset, -1
	})
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	rd := newClient(t, seeds[0], append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(16 << 20)}, opts...)...)
	defer rd.Close()
	out := map[int32][]*kgo.Record{}
	for {
		done := true
		for p, end := range want {
			if end > 0 && last[p] < end-1 {
				done = false
			}
		}
		if done {
			return out
		}
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s (read_committed %v): reached offsets %v of high watermarks %v within a minute", topic, committed, last, want)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Logf("fetch %s-%d: %v (retried)", topic, p, err) })
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
}

// offsetsAt lists topic's latest offsets at an isolation level (0
// read_uncommitted: the high watermark; 1 read_committed: the last stable
// offset) through cl.
func offsetsAt(ctx context.Context, cl *kgo.Client, topic string, partitions int32, isolation int8) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	shards := cl.RequestSharded(ctx, req)
	out := map[int32]int64{}
	for _, s := range shards {
		if s.Err != nil {
			return nil, s.Err
		}
		for _, t := range s.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("partition %d: %w", p.Partition, err)
				}
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}

// waitStable waits until every partition's last stable offset is its
// high watermark: no transaction is left open.
func waitStable(t *testing.T, cl *kgo.Client, topic string, partitions int32, within time.Duration) {
	t.Helper()
	var last string
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		hw, err1 := offsetsAt(ctx, cl, topic, partitions, 0)
		lso, err2 := offsetsAt(ctx, cl, topic, partitions, 1)
		cancel()
		if err := errors.Join(err1, err2); err != nil {
			last = err.Error()
		} else if fmt.Sprint(hw) == fmt.Sprint(lso) && len(hw) == int(partitions) {
			return
		} else {
			last = fmt.Sprintf("last stable offsets %v, high watermarks %v", lso, hw)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: a transaction is left hanging %v later: %s", topic, within, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// txnOutcome is what a producer learned of one transaction.
type txnOutcome int

const (
	outcomeUnknown   txnOutcome = iota // an error: committed or not, but whole either way
	outcomeCommitted                   // EndTransaction(commit) returned nil
	outcomeAborted                     // EndTransaction(abort) returned nil
)

// txnLedger records every transaction the producers of txnLoad attempted.
type txnLedger struct {
	mu   sync.Mutex
	txns map[string]txnOutcome // "p<producer> t<txn>" → outcome
	keys map[string]string     // record key → its transaction
}

func (l *txnLedger) committed() int { return l.committedBy("") }

// committedBy counts the committed transactions of producer p ("p0"), or
// of all producers for "".
func (l *txnLedger) committedBy(p string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id, o := range l.txns {
		if o == outcomeCommitted && strings.HasPrefix(id, p) {
			n++
		}
	}
	return n
}

// txnLoad runs producers transactional producers on topic until ctx is
// done, each committing three transactions of ten records in four and
// aborting the fourth. A producer that gets an error (its node died)
// records the transaction's outcome as unknown, drops its client and
// starts a new one with the same transactional id, which fences the old
// one, as an application would. wait returns once they all stopped. opts
// are the clients' security settings, if any.
func txnLoad(ctx context.Context, t *testing.T, seeds []string, topic string, producers int, opts ...kgo.Opt) (ledger *txnLedger, wait func()) {
	ledger = &txnLedger{txns: map[string]txnOutcome{}, keys: map[string]string{}}
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cl *kgo.Client
			defer func() {
				if cl != nil {
					cl.Close()
				}
			}()
			for x := 0; ctx.Err() == nil; x++ {
				if cl == nil {
					var err error
					cl, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.TransactionalID(fmt.Sprintf("%s-producer-%d", topic, p)),
						kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
						kgo.TransactionTimeout(5 * time.Second), kgo.RecordDeliveryTimeout(5 * time.Second),
						kgo.RequestTimeoutOverhead(2 * time.Second)}, opts...)...)
					if err != nil {
						t.Errorf("producer %d: %v", p, err)
						return
					}
				}
				id := fmt.Sprintf("p%d t%04d", p, x)
				ledger.mu.Lock()
				ledger.txns[id] = outcomeUnknown
				ledger.mu.Unlock()
				commit := x%4 != 3
				err := func() error {
					tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if err := cl.BeginTransaction(); err != nil {
						return err
					}
					var recs []*kgo.Record
					for r := range 10 {
						k := fmt.Sprintf("%s r%d", id, r)
						recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte("value of " + k)})
					}
					ledger.mu.Lock()
					for _, r := range recs {
						ledger.keys[string(r.Key)] = id
					}
					ledger.mu.Unlock()
					if err := cl.ProduceSync(tctx, recs...).FirstErr(); err != nil {
						return err
					}
					return cl.EndTransaction(tctx, kgo.TransactionEndTry(commit))
				}()
				if err != nil {
					cl.Close()
					cl = nil
					continue
				}
				ledger.mu.Lock()
				ledger.txns[id] = outcomeAborted
				if commit {
					ledger.txns[id] = outcomeCommitted
				}
				ledger.mu.Unlock()
			}
		}()
	}
	return ledger, wg.Wait
}

// watchCommitted consumes topic read_committed from the start, as a live
// consumer does while the nodes are killed, until stop is called; stop
// returns the keys it saw. What it saw must agree with the final read: a
// record it saw whose transaction is not visible at the end is an aborted
// read. opts are the client's security settings, if any.
func watchCommitted(t *testing.T, seeds []string, topic string, opts ...kgo.Opt) (stop func() map[string]bool) {
	t.Helper()
	cl := newClient(t, seeds[0], append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted())}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = true })
		}
	}()
	return func() map[string]bool {
		cancel()
		<-done
		cl.Close()
		return seen
	}
}

// checkLedger reads topic read_committed and checks it against l: every
// committed transaction whole and once, no aborted one, a transaction of
// unknown outcome whole or not at all, and nothing else; and every record
// a live read_committed consumer saw (live) belongs to a transaction
// visible in the end.
func checkLedger(t *testing.T, seeds []string, topic string, l *txnLedger, live map[string]bool) {
	t.Helper()
	got := readTxnTopic(t, seeds, topic, true)
	count := map[string]int{}
	perTxn := map[string]int{}
	for _, recs := range got {
		for _, r := range recs {
			k := string(r.Key)
			id, ok := l.keys[k]
			if !ok {
				t.Fatalf("record %q was never produced", k)
			}
			if string(r.Value) != "value of "+k {
				t.Fatalf("record %q: value differs", k)
			}
			count[k]++
			perTxn[id]++
		}
	}
	for k, c := range count {
		if c > 1 {
			t.Errorf("record %q read %d times", k, c)
		}
	}
	var committed, aborted, unknownIn, unknownOut int
	for id, o := range l.txns {
		n := perTxn[id]
		switch o {
		case outcomeCommitted:
			committed++
			if n != 10 {
				t.Errorf("committed transaction %s: %d of its 10 records visible", id, n)
			}
		case outcomeAborted:
			aborted++
			if n != 0 {
				t.Errorf("aborted transaction %s: %d records visible", id, n)
			}
		case outcomeUnknown:
			switch n {
			case 0:
				unknownOut++
			case 10:
				unknownIn++
			default:
				t.Errorf("transaction %s (outcome unknown to its producer): %d of its 10 records visible; want all or none", id, n)
			}
		}
	}
	t.Logf("%d transactions committed, %d aborted, %d of unknown outcome (%d visible, %d not)",
		committed, aborted, unknownIn+unknownOut, unknownIn, unknownOut)
	bad := 0
	for k := range live {
		id, ok := l.keys[k]
		switch {
		case !ok:
			t.Errorf("the live consumer saw %q, which was never produced", k)
		case perTxn[id] == 0:
			if bad++; bad <= 5 {
				t.Errorf("the live consumer saw %q of transaction %s (%v), which is not visible in the end: an aborted read", k, id, l.txns[id])
			}
		}
	}
	t.Logf("the live read_committed consumer saw %d records, %d of them of transactions not visible in the end", len(live), bad)
}

// waitCommitted waits until the ledger counts at least n committed
// transactions.
func waitCommitted(t *testing.T, l *txnLedger, n int, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for l.committed() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d transactions committed within %v, want %d", what, l.committed(), within, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTxnRestartLosesNoCommit: producers commit and abort transactions
// against a `strata serve` node that is SIGKILLed in the middle and
// restarted on its data dir and port. Every transaction acknowledged as
// committed is visible read_committed, whole and once; no aborted one is;
// one whose producer saw an error is whole or absent; and once the
// coordinator has finished (resent markers, aborted what timed out) no
// transaction holds a partition's last stable offset back.
func TestTxnRestartLosesNoCommit(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddrs(t, 1)[0]
	args := []string{"serve", "--node-id", "1", "--data-dir", dir, "--listen", addr, "--http-listen", "off"}
	n := startNode(t, nil, args...)
	const topic = "txn-restart"
	mustCreate(t, n.bootstrap, topic, 3, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ledger, wait := txnLoad(ctx, t, []string{addr}, topic, 3)
	watch := watchCommitted(t, []string{addr}, topic)
	waitCommitted(t, ledger, 30, time.Minute, "before the kill")
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-n.exited
	before := ledger.committed()
	t.Logf("killed the node with %d transactions committed", before)
	// Down for longer than the producers wait for a record: some of them
	// give up on a transaction without knowing its outcome, and start
	// again with a new client (which fences the old one) once it is back.
	time.Sleep(7 * time.Second)
	n = startNode(t, nil, args...)
	waitCommitted(t, ledger, before+30, 2*time.Minute, "after the restart")
	cancel()
	wait()

	cl := newClient(t, addr)
	waitStable(t, cl, topic, 3, time.Minute)
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	checkLedger(t, []string{addr}, topic, ledger, watch())
	n.stop(t)
}

// TestTxnCoordinatorFailover: the same with three `strata serve` nodes and
// the node that coordinates a producer's transactional id (the leader of
// its __transaction_state partition) SIGKILLed in the middle: another
// node takes the partition over, completes or aborts what was in flight,
// and the checks of TestTxnRestartLosesNoCommit hold.
func TestTxnCoordinatorFailover(t *testing.T) {
	c := startCluster(t, 3, clusterSettings{replicationFactor: 3})
	const topic = "txn-failover"
	c.createTopic(topic, 3, 3, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ledger, wait := txnLoad(ctx, t, c.kafka, topic, 3)
	watch := watchCommitted(t, c.kafka, topic)
	waitCommitted(t, ledger, 30, time.Minute, "before the kill")

	coordinator := func() int32 {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType = 1
		req.CoordinatorKeys = []string{topic + "-producer-0"}
		fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer fcancel()
		resp, err := req.RequestWith(fctx, c.client())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Coordinators) != 1 || resp.Coordinators[0].ErrorCode != 0 {
			t.Fatalf("FindCoordinator: %+v", resp)
		}
		return resp.Coordinators[0].NodeID
	}
	victim := coordinator()
	before, before0 := ledger.committed(), ledger.committedBy("p0 ")
	c.kill(victim)
	t.Logf("killed node %d, the coordinator of %s-producer-0, with %d transactions committed", victim, topic, before)
	waitCommitted(t, ledger, before+30, 2*time.Minute, "after the coordinator's failover")
	// The producer whose coordinator died goes on with the new one.
	for deadline := time.Now().Add(time.Minute); ledger.committedBy("p0 ") < before0+5; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("producer 0 committed %d transactions in the minute after its coordinator died", ledger.committedBy("p0 ")-before0)
		}
	}
	if now := coordinator(); now == victim {
		t.Fatalf("node %d is still named the coordinator", victim)
	}
	c.restart(victim)
	waitCommitted(t, ledger, ledger.committed()+10, time.Minute, "after the old coordinator came back")
	cancel()
	wait()

	cl := c.client()
	waitStable(t, cl, topic, 3, time.Minute)
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	checkLedger(t, c.kafka, topic, ledger, watch())
}
