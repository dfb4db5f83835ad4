package group

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var update = flag.Bool("update", false, "rewrite testdata/*.trace from the current behaviour")

// fakeClock fires timers only when Advance says so, on the caller's
// goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves time forward by d, firing due timers in time order.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		var next *fakeTimer
		for i, t := range c.timers {
			if t.stopped {
				continue
			}
			if !t.at.After(end) {
				next = t
				t.stopped = true
				c.timers = append(c.timers[:i:i], c.timers[i+1:]...)
			}
			break
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		c.now = next.at
		c.mu.Unlock()
		next.f()
	}
}

// memLog is an in-memory OffsetLog: every partition a list of batches.
type memLog struct {
	mu    sync.Mutex
	parts map[int32][][]byte
	fail  error
}

func (l *memLog) Append(_ context.Context, p int32, batch []byte) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return 0, l.fail
	}
	if l.parts == nil {
		l.parts = map[int32][][]byte{}
	}
	var base int64
	for _, b := range l.parts[p] {
		_, _ = eachBatch(b, func(h batchInfo, _ []byte) error { base = h.baseOffset + int64(h.lastDelta) + 1; return nil })
	}
	b := append([]byte(nil), batch...)
	for i := range 8 {
		b[i] = byte(base >> (56 - 8*i))
	}
	l.parts[p] = append(l.parts[p], b)
	return base, nil
}

func (l *memLog) Read(dst []byte, p int32, offset int64) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.parts[p] {
		var last int64
		eachBatch(b, func(h batchInfo, _ []byte) error { last = h.baseOffset + int64(h.lastDelta); return nil })
		if last >= offset {
			dst = append(dst, b...)
		}
	}
	return dst, nil
}

// harness drives one coordinator and writes a trace of what happens, with
// member ids replaced by the names the script gave them.
type harness struct {
	t     *testing.T
	clock *fakeClock
	log   *memLog
	c     *Coordinator
	trace strings.Builder
	names map[string]string // member id -> name
	ids   map[string]string // name -> member id
	gens  map[string]int32  // name -> generation last learned
	// instances are the group.instance.ids heartbeats send, by name.
	instances map[string]string
}

func newHarness(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, clock: &fakeClock{now: time.Unix(1_700_000_000, 0)}, log: &memLog{},
		names: map[string]string{}, ids: map[string]string{}, gens: map[string]int32{}, instances: map[string]string{}}
	h.start(cfg)
	return h
}

func (h *harness) start(cfg Config) {
	cfg.Partitions = 3
	cfg.Clock = h.clock
	cfg.Log = h.log
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = time.Second
	}
	c, err := New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	for p := range int32(3) {
		if err := c.Load(context.Background(), p); err != nil {
			h.t.Fatal(err)
		}
	}
	h.c = c
	h.t.Cleanup(c.Close)
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(&h.trace, format+"\n", args...)
}

func (h *harness) name(id string) string {
	if n, ok := h.names[id]; ok {
		return n
	}
	if id == "" {
		return `""`
	}
	return "?" + id
}

func code(c int16) string {
	if c == 0 {
		return "OK"
	}
	return kerr.ErrorForCode(c).(*kerr.Error).Message
}

const testGroup = "g"

// join sends a JoinGroup and returns a function that waits for its answer;
// it returns once the request is answered or parked at the barrier.
func (h *harness) join(name, instance, protocolType string, protos ...string) func() {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 9
	req.Group, req.ProtocolType = testGroup, protocolType
	req.MemberID = h.ids[name]
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10_000, 30_000
	if instance != "" {
		req.InstanceID = kmsg.StringPtr(instance)
	}
	for _, p := range protos {
		req.Protocols = append(req.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: []byte(name + "/" + p)})
	}
	ch := make(chan *kmsg.JoinGroupResponse, 1)
	go func() { ch <- h.c.JoinGroup(context.Background(), req, name, "/test") }()
	report := func(r *kmsg.JoinGroupResponse) {
		if _, ok := h.names[r.MemberID]; !ok && r.MemberID != "" {
			if old, ok := h.ids[name]; ok && old != r.MemberID {
				delete(h.names, old)
			}
			h.names[r.MemberID], h.ids[name] = name, r.MemberID
		}
		var members []string
		for _, m := range r.Members {
			members = append(members, h.name(m.MemberID)+"="+string(m.ProtocolMetadata))
		}
		h.gens[name] = r.Generation
		proto := ""
		if r.Protocol != nil {
			proto = *r.Protocol
		}
		h.logf("  join %s -> %s gen=%d protocol=%q leader=%s members=%v skip=%v", name, code(r.ErrorCode), r.Generation, proto, h.name(r.LeaderID), members, r.SkipAssignment)
	}
	if r := h.waitParked(ch, func(g *group) bool {
		id := h.ids[name]
		m := g.members[id]
		if m == nil && instance != "" {
			m = g.members[g.statics[instance]]
		}
		return m != nil && m.join != nil && h.isWaiting(m)
	}); r != nil {
		report(r)
		return func() {}
	}
	h.logf("  join %s parked", name)
	return func() { report(<-ch) }
}

func (h *harness) isWaiting(m *member) bool {
	select {
	case <-m.join.done:
		return false
	default:
		return true
	}
}

// waitParked returns the response if the call finished, or nil once cond
// holds for the group (the call is parked).
func (h *harness) waitParked(ch chan *kmsg.JoinGroupResponse, cond func(*group) bool) *kmsg.JoinGroupResponse {
	for {
		select {
		case r := <-ch:
			return r
		default:
		}
		h.c.mu.Lock()
		g := h.c.mu.groups[testGroup]
		h.c.mu.Unlock()
		if g != nil {
			g.mu.Lock()
			ok := cond(g)
			g.mu.Unlock()
			if ok {
				select {
				case r := <-ch:
					return r
				default:
					return nil
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) sync(name string, assign map[string]string) func() {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 5
	req.Group, req.MemberID, req.Generation = testGroup, h.ids[name], h.gens[name]
	for n, a := range assign {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: h.ids[n], MemberAssignment: []byte(a)})
	}
	sort.Slice(req.GroupAssignment, func(i, j int) bool { return req.GroupAssignment[i].MemberID < req.GroupAssignment[j].MemberID })
	ch := make(chan *kmsg.SyncGroupResponse, 1)
	go func() { ch <- h.c.SyncGroup(context.Background(), req) }()
	report := func(r *kmsg.SyncGroupResponse) {
		h.logf("  sync %s -> %s assignment=%q", name, code(r.ErrorCode), r.MemberAssignment)
	}
	for {
		select {
		case r := <-ch:
			report(r)
			return func() {}
		default:
		}
		h.c.mu.Lock()
		g := h.c.mu.groups[testGroup]
		h.c.mu.Unlock()
		g.mu.Lock()
		m := g.members[h.ids[name]]
		parked := m != nil && m.sync != nil
		g.mu.Unlock()
		if parked {
			select {
			case r := <-ch:
				report(r)
				return func() {}
			default:
			}
			h.logf("  sync %s parked", name)
			return func() { report(<-ch) }
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) heartbeat(name string) {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = testGroup, h.ids[name], h.gens[name]
	if inst, ok := h.instances[name]; ok {
		req.InstanceID = kmsg.StringPtr(inst)
	}
	h.logf("  heartbeat %s gen=%d -> %s", name, req.Generation, code(h.c.Heartbeat(req).ErrorCode))
}

func (h *harness) leave(name string) {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 5
	req.Group = testGroup
	req.Members = []kmsg.LeaveGroupRequestMember{{MemberID: h.ids[name]}}
	h.logf("  leave %s -> %s", name, code(h.c.LeaveGroup(req).Members[0].ErrorCode))
}

func (h *harness) commit(name string, offset int64) {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 9
	req.Group, req.Generation = testGroup, -1
	if name != "" {
		req.MemberID, req.Generation = h.ids[name], h.gens[name]
	}
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: offset, LeaderEpoch: 3}}}}
	h.logf("  commit by %q t-0@%d -> %s", name, offset, code(h.c.OffsetCommit(context.Background(), req).Topics[0].Partitions[0].ErrorCode))
}

func (h *harness) fetch() {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: testGroup, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{0}}}}}
	r := h.c.OffsetFetch(req).Groups[0]
	p := r.Topics[0].Partitions[0]
	h.logf("  fetch t-0 -> %s offset=%d epoch=%d", code(r.ErrorCode), p.Offset, p.LeaderEpoch)
}

func (h *harness) state() {
	for _, s := range h.c.Summaries(10) {
		if s.Group == testGroup {
			h.logf("  state %s gen=%d members=%d offsets=%d", s.State, s.Generation, s.Members, len(s.Offsets))
			return
		}
	}
	h.logf("  state (no group)")
}

func (h *harness) advance(d time.Duration) {
	h.logf("  advance %s", d)
	h.clock.Advance(d)
}

// check compares the trace with testdata/name.trace.
func (h *harness) check(name string) {
	path := filepath.Join("testdata", name+".trace")
	got := h.trace.String()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			h.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		h.t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		h.t.Fatalf("trace differs from %s (run with -update if the change is intended)\n--- got\n%s--- want\n%s", path, got, want)
	}
}
