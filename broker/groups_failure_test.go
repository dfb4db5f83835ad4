package broker

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// committingConsumer processes each polled batch, commits it synchronously
// and only then allows a rebalance, so a record is committed iff processed.
func committingConsumer(ctx context.Context, t testing.TB, b *Broker, group, topic string, tl *tally, by *atomic.Int64, opts ...kgo.Opt) (*kgo.Client, chan struct{}) {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.BlockRebalanceOnPoll(),
		kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.SessionTimeout(2 * time.Second),
		kgo.HeartbeatInterval(200 * time.Millisecond),
	}, opts...)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr().String())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl, pollLoop(ctx, cl, 200, func(fs kgo.Fetches) {
		fs.EachRecord(func(r *kgo.Record) { tl.addBy(r, by) })
		if err := cl.CommitRecords(ctx, fs.Records()...); err != nil && ctx.Err() == nil {
			t.Logf("commit: %v", err)
		}
	})
}

// TestGroupMemberDeath: when a member dies without leaving (a static
// member's crash: no LeaveGroup) or leaves, the group rebalances within
// the session timeout and the survivor resumes every partition at its
// committed offset, so no committed record is skipped.
func TestGroupMemberDeath(t *testing.T) {
	const n = 20_000
	const session = 2 * time.Second
	for _, tc := range []struct {
		name  string
		leave bool
	}{{"crash", false}, {"leave", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := groupBroker(t, "")
			createTopic(t, testAdmin(t, b), "work", 6, nil)
			tl := newTally(n)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var victimOpts []kgo.Opt
			if !tc.leave {
				// franz-go never sends LeaveGroup for a static member:
				// closing it is a crash as far as the group can tell.
				victimOpts = append(victimOpts, kgo.InstanceID("victim"))
			}
			var byVictim, bySurvivor atomic.Int64
			victim, victimDone := committingConsumer(ctx, t, b, "workers", "work", tl, &byVictim, victimOpts...)
			survivor, survivorDone := committingConsumer(ctx, t, b, "workers", "work", tl, &bySurvivor)
			defer func() { survivor.Close(); <-survivorDone }()
			waitFor(t, 10*time.Second, "two stable members", func() bool {
				st, _, m := groupSummary(t, b, "workers")
				return st == "Stable" && m == 2
			})
			produceSeq(t, b, "work", 0, n)
			waitFor(t, 20*time.Second, "the victim to process records", func() bool { return byVictim.Load() > 1000 })
			victim.Close()
			<-victimDone
			killed := time.Now()
			took := waitFor(t, session+5*time.Second, "the survivor alone in a stable group", func() bool {
				st, _, m := groupSummary(t, b, "workers")
				return st == "Stable" && m == 1
			})
			if took > session+time.Second {
				t.Errorf("rebalance took %s, session timeout is %s", took, session)
			}
			select {
			case <-tl.done:
			case <-ctx.Done():
				missing, _ := tl.check()
				t.Fatalf("%d records never processed after the victim went away", missing)
			}
			missing, dups := tl.check()
			if missing != 0 {
				t.Fatalf("%d committed records skipped", missing)
			}
			t.Logf("victim processed %d, survivor %d, %d reprocessed; group settled %s after the victim closed",
				byVictim.Load(), bySurvivor.Load(), dups, time.Since(killed).Round(time.Millisecond))
		})
	}
}

// TestGroupRestartedConsumerResumes: a consumer restarted after committing
// resumes at its committed offsets: nothing before them is read again.
func TestGroupRestartedConsumerResumes(t *testing.T) {
	const n = 3000
	b := groupBroker(t, "")
	adm := testAdmin(t, b)
	createTopic(t, adm, "resume", 3, nil)
	produceSeq(t, b, "resume", 0, n)

	tl := newTally(n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first consumer polls, processes and commits in small steps and
	// stops by itself after 500 records, so the commit is partial however
	// fast the machine is.
	var first atomic.Int64
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()),
		kgo.ConsumerGroup("resumers"), kgo.ConsumeTopics("resume"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), kgo.Balancers(kgo.RangeBalancer()),
		kgo.FetchMaxPartitionBytes(2048), kgo.FetchMaxBytes(2048))
	if err != nil {
		t.Fatal(err)
	}
	for first.Load() < 500 {
		fs := cl.PollRecords(ctx, 50)
		if ctx.Err() != nil {
			t.Fatal("first consumer timed out")
		}
		fs.EachRecord(func(r *kgo.Record) { tl.addBy(r, &first) })
		if err := cl.CommitRecords(ctx, fs.Records()...); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	cl.Close()
	committed := committedOffsets(t, adm, "resumers")
	var sum int64
	committed.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum == 0 || sum >= n {
		t.Fatalf("committed %d of %d records; want a partial commit", sum, n)
	}

	var second atomic.Int64
	cl2, done2 := committingConsumer(ctx, t, b, "resumers", "resume", tl, &second)
	defer func() { cl2.Close(); <-done2 }()
	select {
	case <-tl.done:
	case <-ctx.Done():
		t.Fatal("restarted consumer did not finish")
	}
	missing, dups := tl.check()
	if missing != 0 || dups != int(first.Load()-sum) {
		t.Fatalf("missing %d, reprocessed %d; the first run processed %d and committed %d", missing, dups, first.Load(), sum)
	}
	if second.Load() != n-sum {
		t.Fatalf("restarted consumer processed %d records; want %d (everything after the committed offsets)", second.Load(), n-sum)
	}
}

// TestGroupOffsetsSurviveBrokerRestart: committed offsets are records in
// __consumer_offsets, replayed at start-up; a second group reads the same
// topic from the start independently; committing an older offset rewinds.
func TestGroupOffsetsSurviveBrokerRestart(t *testing.T) {
	const n = 2000
	dir := t.TempDir()
	b := groupBroker(t, dir)
	createTopic(t, testAdmin(t, b), "durable", 4, nil)
	produceSeq(t, b, "durable", 0, n)

	consumeAll := func(b *Broker, group string) int64 {
		tl := newTally(n)
		var by atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, done := committingConsumer(ctx, t, b, group, "durable", tl, &by)
		defer func() { cl.Close(); <-done }()
		select {
		case <-tl.done:
		case <-ctx.Done():
			t.Fatalf("group %s consumed %d of %d", group, tl.total.Load(), n)
		}
		return by.Load()
	}
	if got := consumeAll(b, "g1"); got != n {
		t.Fatalf("g1 consumed %d, want %d", got, n)
	}
	before := committedOffsets(t, testAdmin(t, b), "g1")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = groupBroker(t, dir)
	adm := testAdmin(t, b)
	after := committedOffsets(t, adm, "g1")
	var total int64
	before.Each(func(o kadm.OffsetResponse) {
		a, ok := after.Lookup(o.Topic, o.Partition)
		if !ok || a.At != o.At {
			t.Errorf("%s-%d: committed %d before the restart, %v after", o.Topic, o.Partition, o.At, a.At)
		}
		total += o.At
	})
	if total != n {
		t.Fatalf("committed offsets sum to %d, want %d", total, n)
	}

	// A second group starts from the beginning, whatever g1 did.
	if got := consumeAll(b, "g2"); got != n {
		t.Fatalf("g2 consumed %d, want %d", got, n)
	}

	// Rewind g1 to the start of partition 0 only.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rewind := kadm.Offsets{}
	rewind.Add(kadm.Offset{Topic: "durable", Partition: 0, At: 0, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, "g1", rewind); err != nil {
		t.Fatalf("rewind: %v", err)
	}
	p0, _ := after.Lookup("durable", 0)
	tl := newTally(n)
	var by atomic.Int64
	cl, done := committingConsumer(ctx, t, b, "g1", "durable", tl, &by)
	waitFor(t, 10*time.Second, "the rewound partition to be re-read", func() bool { return by.Load() >= p0.At })
	time.Sleep(300 * time.Millisecond)
	cl.Close()
	<-done
	if by.Load() != p0.At {
		t.Fatalf("after rewinding partition 0, g1 read %d records; want %d", by.Load(), p0.At)
	}
}

// TestGroupStaticMemberRestart: KIP-345. A static member restarted with the
// same group.instance.id within its session timeout takes its place back
// without a rebalance: the generation does not change.
func TestGroupStaticMemberRestart(t *testing.T) {
	b := groupBroker(t, "")
	createTopic(t, testAdmin(t, b), "static", 4, nil)
	produceSeq(t, b, "static", 0, 400)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(tl *tally, by *atomic.Int64) (*kgo.Client, chan struct{}) {
		return committingConsumer(ctx, t, b, "statics", "static", tl, by,
			kgo.InstanceID("instance-1"), kgo.SessionTimeout(10*time.Second))
	}
	var other atomic.Int64
	otherCl, otherDone := committingConsumer(ctx, t, b, "statics", "static", newTally(400), &other,
		kgo.InstanceID("instance-2"), kgo.SessionTimeout(10*time.Second))
	defer func() { otherCl.Close(); <-otherDone }()

	var first atomic.Int64
	cl, done := start(newTally(400), &first)
	waitFor(t, 10*time.Second, "two stable members", func() bool {
		st, _, m := groupSummary(t, b, "statics")
		return st == "Stable" && m == 2
	})
	_, gen, _ := groupSummary(t, b, "statics")
	rebalances := b.groups.Stats().Rebalances
	cl.Close()
	<-done

	produceSeq(t, b, "static", 400, 0)
	var second atomic.Int64
	cl2, done2 := start(newTally(400), &second)
	defer func() { cl2.Close(); <-done2 }()
	// The restarted member is back when its client has its assignment.
	waitFor(t, 10*time.Second, "the restarted member to be assigned", func() bool {
		return len(cl2.GetConsumeTopics()) > 0 && func() bool {
			st, _, m := groupSummary(t, b, "statics")
			return st == "Stable" && m == 2
		}()
	})
	time.Sleep(500 * time.Millisecond)
	st, gen2, members := groupSummary(t, b, "statics")
	if gen2 != gen || b.groups.Stats().Rebalances != rebalances {
		t.Fatalf("restart moved the group from generation %d to %d (%d rebalances)", gen, gen2, b.groups.Stats().Rebalances-rebalances)
	}
	if st != "Stable" || members != 2 {
		t.Fatalf("group is %s with %d members", st, members)
	}
}

// TestGroupBadInput: each malformed or stale request gets the error Kafka
// gives it, and the group stays usable.
func TestGroupBadInput(t *testing.T) {
	b := groupBroker(t, "")
	cl := testClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const g = "bad-input"
	consumerMeta := func(topics ...string) []byte {
		m := kmsg.NewConsumerMemberMetadata()
		m.Topics = topics
		return m.AppendTo(nil)
	}
	join := func(memberID, protocolType string, meta []byte, instance *string) *kmsg.JoinGroupResponse {
		t.Helper()
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType, req.InstanceID = g, memberID, protocolType, instance
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30000, 5000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", meta
		req.Protocols = append(req.Protocols, p)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("join: %v", err)
		}
		return resp
	}
	heartbeat := func(member string, gen int32, instance *string) error {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation, req.InstanceID = g, member, gen, instance
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}
	expect := func(what string, got, want error) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
	}

	// KIP-394: a new dynamic member first gets its id.
	r := join("", "consumer", consumerMeta("t"), nil)
	expect("first join", kerr.ErrorForCode(r.ErrorCode), kerr.MemberIDRequired)
	id := r.MemberID
	r = join(id, "consumer", consumerMeta("t"), nil)
	expect("join with id", kerr.ErrorForCode(r.ErrorCode), nil)
	if r.LeaderID != id || r.Generation != 1 || len(r.Members) != 1 {
		t.Fatalf("join: leader %q generation %d members %d", r.LeaderID, r.Generation, len(r.Members))
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = g, id, 1
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: id, MemberAssignment: []byte("mine")}}
	sr, err := sync.RequestWith(ctx, cl)
	if err != nil || sr.ErrorCode != 0 || !bytes.Equal(sr.MemberAssignment, []byte("mine")) {
		t.Fatalf("sync: %v %v %q", err, kerr.ErrorForCode(sr.ErrorCode), sr.MemberAssignment)
	}

	expect("stale generation", heartbeat(id, 0, nil), kerr.IllegalGeneration)
	expect("unknown member", heartbeat("nobody", 1, nil), kerr.UnknownMemberID)
	expect("wrong protocol type", kerr.ErrorForCode(join("", "connect", consumerMeta("t"), nil).ErrorCode), kerr.InconsistentGroupProtocol)
	expect("oversized metadata", kerr.ErrorForCode(join("", "consumer", make([]byte, 2<<20), nil).ErrorCode), kerr.UnknownServerError)
	sync.Generation = 0
	sr, _ = sync.RequestWith(ctx, cl)
	expect("sync with a stale generation", kerr.ErrorForCode(sr.ErrorCode), kerr.IllegalGeneration)

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.MemberID, commit.Generation = g, id, 0
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "t"
	ct.Partitions = []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}
	commit.Topics = append(commit.Topics, ct)
	createTopic(t, testAdmin(t, b), "t", 1, nil)
	cr, err := commit.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	expect("commit with a stale generation", kerr.ErrorForCode(cr.Topics[0].Partitions[0].ErrorCode), kerr.IllegalGeneration)

	// Still usable: the member heartbeats and commits at its generation.
	expect("heartbeat after the bad requests", heartbeat(id, 1, nil), nil)
	commit.Generation = 1
	cr, _ = commit.RequestWith(ctx, cl)
	expect("commit at the current generation", kerr.ErrorForCode(cr.Topics[0].Partitions[0].ErrorCode), nil)
	if st, gen, m := groupSummary(t, b, g); st != "Stable" || gen != 1 || m != 1 {
		t.Fatalf("group is %s, generation %d, %d members", st, gen, m)
	}

	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{g, "no-such-group"}
	dr, err := del.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	expect("delete a group with members", kerr.ErrorForCode(dr.Groups[0].ErrorCode), kerr.NonEmptyGroup)
	expect("delete an unknown group", kerr.ErrorForCode(dr.Groups[1].ErrorCode), kerr.GroupIDNotFound)

	// KIP-345 fencing: a second incarnation of a static member fences the
	// first.
	inst := kmsg.StringPtr("fence-me")
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = g
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: id}}
	if lr, err := leave.RequestWith(ctx, cl); err != nil || lr.Members[0].ErrorCode != 0 {
		t.Fatalf("leave: %v", err)
	}
	old := join("", "consumer", consumerMeta("t"), inst)
	expect("static join", kerr.ErrorForCode(old.ErrorCode), nil)
	newer := join("", "consumer", consumerMeta("t"), inst)
	expect("second static join", kerr.ErrorForCode(newer.ErrorCode), nil)
	expect("fenced heartbeat", heartbeat(old.MemberID, newer.Generation, inst), kerr.FencedInstanceID)
}
