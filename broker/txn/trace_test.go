package txn

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

var update = flag.Bool("update", false, "rewrite testdata/*.trace from the current behaviour")

// tracer runs coordinator steps on a harness and records what each one
// answered, for comparison with testdata/<name>.trace.
type tracer struct {
	*harness
	out     strings.Builder
	markers map[string]*Markers // decided, not yet written, by id
}

func newTracer(t *testing.T) *tracer {
	return &tracer{harness: newHarness(t), markers: map[string]*Markers{}}
}

func (tr *tracer) logf(format string, args ...any) {
	fmt.Fprintf(&tr.out, format+"\n", args...)
}

func errName(err *kerr.Error) string {
	if err == nil {
		return "NONE"
	}
	return err.Message
}

func fmtParts(ps []TopicPartition) string {
	var b []string
	for _, p := range ps {
		b = append(b, fmt.Sprintf("%s-%d", p.Topic, p.Partition))
	}
	return "[" + strings.Join(b, " ") + "]"
}

func fmtMarkers(m *Markers) string {
	kind := "abort"
	if m.Commit {
		kind = "commit"
	}
	return fmt.Sprintf("markers %s pid=%d epoch=%d coordinator_epoch=%d %s", kind, m.ProducerID, m.ProducerEpoch, m.CoordinatorEpoch, fmtParts(m.Partitions))
}

// wrote completes t, as the broker does once its record is written, and
// traces the record.
func (tr *tracer) wrote(t *Transition) {
	tr.complete(t)
	tr.logf("    wrote %s pid=%d epoch=%d %s", t.To.State, t.To.ProducerID, t.To.ProducerEpoch, fmtParts(t.To.Partitions))
	if m := t.Markers(); m != nil {
		tr.markers[m.TransactionalID] = m
		tr.logf("    %s", fmtMarkers(m))
	}
}

func (tr *tracer) init(id string, pid int64, epoch int16) {
	r := tr.c.InitProducerID(context.Background(), InitProducerIDRequest{TransactionalID: id, TimeoutMs: testTimeoutMs, ProducerID: pid, ProducerEpoch: epoch, Version: 5})
	tr.logf("init %s %d/%d -> %s %d/%d", id, pid, epoch, errName(r.Err), r.ProducerID, r.ProducerEpoch)
	if r.Transition != nil {
		tr.wrote(r.Transition)
	}
}

func (tr *tracer) add(id string, pid int64, epoch int16, version int16, parts ...TopicPartition) {
	r := tr.c.AddPartitions(AddPartitionsRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Partitions: parts, Version: version})
	tr.logf("add v%d %s %d/%d %s -> %s", version, id, pid, epoch, fmtParts(parts), errName(r.Err))
	if r.Transition != nil {
		tr.wrote(r.Transition)
	}
}

func (tr *tracer) end(id string, pid int64, epoch int16, commit bool, version int16) {
	r := tr.c.EndTxn(context.Background(), EndTxnRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Commit: commit, Version: version})
	kind := "abort"
	if commit {
		kind = "commit"
	}
	tr.logf("end v%d %s %s %d/%d -> %s %d/%d", version, kind, id, pid, epoch, errName(r.Err), r.ProducerID, r.ProducerEpoch)
	if r.Transition != nil {
		tr.wrote(r.Transition)
	}
}

// written reports the markers of id written.
func (tr *tracer) written(id string) {
	m := tr.markers[id]
	delete(tr.markers, id)
	t, err := tr.c.CompleteMarkers(m)
	if err != nil {
		tr.t.Fatalf("CompleteMarkers(%s): %v", id, err)
	}
	tr.logf("markers written %s", id)
	tr.wrote(t)
}

func (tr *tracer) advance(d time.Duration) {
	tr.clock.Advance(d)
	tr.logf("advance %s", d)
}

func (tr *tracer) timeouts() {
	ts := tr.c.AbortTimedOut()
	tr.logf("abort timed out -> %d", len(ts))
	for _, t := range ts {
		tr.wrote(t)
	}
}

func (tr *tracer) state(id string) {
	m, err := tr.c.Describe(id)
	if err != nil {
		tr.logf("state %s: %s", id, errName(err))
		return
	}
	tr.logf("state %s: %s pid=%d epoch=%d last_pid=%d timeout=%dms %s", id, m.State, m.ProducerID, m.ProducerEpoch, m.LastProducerID, m.TimeoutMs, fmtParts(m.Partitions))
}

// reload replays id's partition from the records written so far, as a new
// leader of that partition does, under the next coordinator epoch.
func (tr *tracer) reload(id string, epoch int32) {
	p := tr.c.PartitionFor(id)
	resend, err := tr.c.Load(p, epoch, tr.log[p])
	if err != nil {
		tr.t.Fatalf("Load: %v", err)
	}
	tr.logf("reload partition %d (%d records) at coordinator epoch %d", p, len(tr.log[p]), epoch)
	for _, m := range resend {
		tr.markers[m.TransactionalID] = m
		tr.logf("    resend %s", fmtMarkers(m))
	}
}

func (tr *tracer) check(name string) {
	tr.t.Helper()
	path := filepath.Join("testdata", name+".trace")
	got := tr.out.String()
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			tr.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			tr.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tr.t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		tr.t.Fatalf("trace differs from %s:\n%s", path, got)
	}
}

// TestTraceLifecycle follows one transactional id through Kafka's
// protocol: transactions before and after KIP-890 part 2, a zombie fenced
// by a new producer, a retried end, a timeout abort, and a coordinator
// failover between a commit decision and its markers.
func TestTraceLifecycle(t *testing.T) {
	tr := newTracer(t)
	tr.logf("# a v3 client commits")
	tr.init("tx", -1, -1)
	tr.add("tx", 1000, 0, 3, tp("a", 1), tp("a", 0))
	tr.add("tx", 1000, 0, 3, tp("a", 0))
	tr.end("tx", 1000, 0, true, 3)
	tr.add("tx", 1000, 0, 3, tp("b", 0))
	tr.written("tx")
	tr.end("tx", 1000, 0, true, 3)

	tr.logf("# a second producer fences the first")
	tr.init("tx", -1, -1)
	tr.add("tx", 1000, 0, 3, tp("a", 0))
	tr.end("tx", 1000, 0, true, 3)

	tr.logf("# a v5 client: every end bumps the epoch")
	tr.add("tx", 1000, 1, 5, tp("b", 0))
	tr.end("tx", 1000, 1, true, 5)
	tr.end("tx", 1000, 1, true, 5)
	tr.written("tx")
	tr.end("tx", 1000, 1, true, 5)
	tr.end("tx", 1000, 2, true, 5)
	tr.end("tx", 1000, 2, false, 5)
	tr.written("tx")

	tr.logf("# a transaction left open times out")
	tr.add("tx", 1000, 3, 5, tp("c", 0))
	tr.advance(testTimeoutMs * time.Millisecond)
	tr.timeouts()
	tr.advance(time.Millisecond)
	tr.timeouts()
	tr.end("tx", 1000, 3, true, 5)
	tr.init("tx", -1, -1)
	tr.written("tx")
	tr.init("tx", -1, -1)
	tr.state("tx")

	tr.logf("# the coordinator fails over between a commit and its markers")
	tr.add("tx", 1000, 6, 3, tp("d", 0), tp("d", 1))
	tr.end("tx", 1000, 6, true, 3)
	tr.reload("tx", 4)
	tr.state("tx")
	tr.add("tx", 1000, 6, 3, tp("e", 0))
	tr.written("tx")
	tr.state("tx")
	tr.reload("tx", 5)
	tr.state("tx")
	tr.check("lifecycle")
}
