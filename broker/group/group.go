package group

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// State is a classic group's state, named as Kafka names it.
type State int8

// States of a classic group.
const (
	StateEmpty State = iota
	StatePreparingRebalance
	StateCompletingRebalance
	StateStable
	StateDead
)

var stateNames = [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}

func (s State) String() string { return stateNames[s] }

// group is one consumer group. Everything in it is guarded by mu.
type group struct {
	c         *Coordinator
	id        string
	partition int32

	mu sync.Mutex

	dead       bool // removed from the coordinator; callers look it up again
	state      State
	stateSince time.Time

	protocolType string
	protocol     string
	generation   int32
	leader       string

	members map[string]*member
	// pending are members told MEMBER_ID_REQUIRED (KIP-394) that have not
	// joined with their id yet; they hold back the join barrier.
	pending map[string]*member
	statics map[string]string // group.instance.id -> member id

	offsets offsetTable
	// txns are offsets written by TxnOffsetCommit whose transaction has
	// not ended; the coordinator's producers index points at them.
	txns txnOffsets

	rebalanceTimer Timer
	timerToken     uint64
	// initialDelay is set while the first rebalance of an empty group
	// waits for more members; delayLeft is what remains of the rebalance
	// timeout, and newMember whether someone joined since the last delay.
	initialDelay bool
	delayLeft    time.Duration
	newMember    bool
}

type offset struct {
	offset      int64
	leaderEpoch int32
	metadata    string
	commitTime  int64 // Unix ms
	// logOffset is where the batch that wrote it begins in
	// __consumer_offsets: a transaction's offset applies on commit only if
	// it was written after the one committed (txnOffsets.complete).
	logOffset int64
}

type protocol struct {
	name     string
	metadata []byte
}

type member struct {
	id         string
	instanceID string // "" for dynamic members
	clientID   string
	clientHost string

	protocols        []protocol
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	assignment       []byte

	join *joinWait // a JoinGroup parked at the barrier
	sync *syncWait // a SyncGroup waiting for the leader

	sessionTimer Timer
	token        uint64 // bumped at every heartbeat; stale timers check it
}

type joinWait struct {
	resp *kmsg.JoinGroupResponse
	done chan struct{}
}

type syncWait struct {
	resp *kmsg.SyncGroupResponse
	done chan struct{}
}

func (w *joinWait) finish() { close(w.done) }
func (w *syncWait) finish() { close(w.done) }

// abortWaitsLocked answers m's parked JoinGroup and SyncGroup, if any,
// with e.
func (m *member) abortWaitsLocked(e *kerr.Error) {
	if m.join != nil {
		m.join.resp.ErrorCode = e.Code
		m.join.finish()
		m.join = nil
	}
	if m.sync != nil {
		m.sync.resp.ErrorCode = e.Code
		m.sync.finish()
		m.sync = nil
	}
}

// stopSessionLocked stops m's session timer; the token bump makes a timer
// that already fired a no-op.
func (m *member) stopSessionLocked() {
	stopTimer(m.sessionTimer)
	m.token++
}

// await waits for done, ctx or Close, and reports whether done closed.
func (c *Coordinator) await(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
	case <-c.closed:
	}
	return false
}

func (m *member) supports(name string) bool {
	return slices.ContainsFunc(m.protocols, func(p protocol) bool { return p.name == name })
}

func (m *member) metadataFor(name string) []byte {
	for _, p := range m.protocols {
		if p.name == name {
			return p.metadata
		}
	}
	return nil
}

func (m *member) sameProtocols(ps []protocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b protocol) bool {
		return a.name == b.name && bytes.Equal(a.metadata, b.metadata)
	})
}

func (g *group) setStateLocked(s State) {
	g.state = s
	g.stateSince = g.c.clock.Now()
}

// JoinGroup handles a JoinGroup request. It blocks until the join barrier
// completes, ctx ends or the coordinator closes.
func (c *Coordinator) JoinGroup(ctx context.Context, req *kmsg.JoinGroupRequest, clientID, clientHost string) *kmsg.JoinGroupResponse {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = -1
	resp.MemberID = req.MemberID
	fail := func(e *kerr.Error) *kmsg.JoinGroupResponse {
		resp.ErrorCode = e.Code
		return resp
	}
	session := time.Duration(req.SessionTimeoutMillis) * time.Millisecond
	rebalance := time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	if req.Version == 0 || rebalance <= 0 {
		rebalance = session
	}
	metaBytes := 0
	for _, p := range req.Protocols {
		metaBytes += len(p.Name) + len(p.Metadata)
	}
	switch {
	case req.Group == "":
		return fail(kerr.InvalidGroupID)
	case session < c.cfg.MinSessionTimeout || session > c.cfg.MaxSessionTimeout:
		return fail(kerr.InvalidSessionTimeout)
	case req.ProtocolType == "" || len(req.Protocols) == 0:
		return fail(kerr.InconsistentGroupProtocol)
	case metaBytes > c.cfg.MaxMemberMetadataBytes:
		// Kafka fails the group-metadata write that such a member would
		// need and answers UNKNOWN_SERVER_ERROR; we refuse the member
		// before it joins, so the rest of the group is undisturbed.
		c.log.Warn("join refused: member metadata too large", "group", req.Group, "bytes", metaBytes, "max", c.cfg.MaxMemberMetadataBytes)
		return fail(kerr.UnknownServerError)
	}
	g, kerrr := c.lookup(req.Group, true)
	if kerrr != nil {
		return fail(kerrr)
	}
	protos := make([]protocol, len(req.Protocols))
	for i, p := range req.Protocols {
		protos[i] = protocol{name: p.Name, metadata: bytes.Clone(p.Metadata)}
	}
	j := joinReq{
		ctx: ctx, req: req, resp: resp, clientID: clientID, clientHost: clientHost,
		protocols: protos, session: session, rebalance: rebalance,
	}
	if req.InstanceID != nil {
		j.instanceID = *req.InstanceID
	}
	w, e := g.joinLocked(&j)
	if w == nil {
		// Drops a group made for a join that went nowhere.
		g.maybeRemoveLocked()
	}
	g.mu.Unlock()
	if e != nil {
		return fail(e)
	}
	if w == nil {
		return resp
	}
	if c.await(ctx, w.done) {
		return w.resp
	}
	out := req.ResponseKind().(*kmsg.JoinGroupResponse)
	out.Generation, out.MemberID = -1, resp.MemberID
	out.ErrorCode = kerr.CoordinatorNotAvailable.Code
	return out
}

type joinReq struct {
	ctx                  context.Context
	req                  *kmsg.JoinGroupRequest
	resp                 *kmsg.JoinGroupResponse
	clientID, clientHost string
	instanceID           string
	protocols            []protocol
	session, rebalance   time.Duration
}

// joinLocked runs the join state machine. It returns a wait to park on, or
// nil when resp is already complete, or an error for the response.
func (g *group) joinLocked(j *joinReq) (*joinWait, *kerr.Error) {
	if !g.supportsLocked(j.req.ProtocolType, j.protocols) {
		return nil, kerr.InconsistentGroupProtocol
	}
	if j.req.MemberID == "" {
		if j.instanceID != "" {
			return g.joinStaticLocked(j)
		}
		if g.fullLocked() {
			return nil, kerr.GroupMaxSizeReached
		}
		id := newMemberID(j.clientID)
		if j.req.Version >= 4 {
			// KIP-394: hand out the id first, so a client that times out
			// and retries does not leave a ghost member behind.
			m := g.newMemberLocked(id, j)
			g.pending[id] = m
			g.heartbeatLocked(m)
			j.resp.MemberID = id
			return nil, kerr.MemberIDRequired
		}
		return g.addMemberLocked(g.newMemberLocked(id, j), j), nil
	}

	if m, ok := g.pending[j.req.MemberID]; ok {
		delete(g.pending, m.id)
		g.updateMemberLocked(m, j)
		return g.addMemberLocked(m, j), nil
	}
	m, ok := g.members[j.req.MemberID]
	if !ok {
		return nil, kerr.UnknownMemberID
	}
	if j.instanceID != "" && g.statics[j.instanceID] != m.id || j.instanceID == "" && m.instanceID != "" {
		return nil, kerr.FencedInstanceID
	}
	switch g.state {
	case StatePreparingRebalance:
		g.updateMemberLocked(m, j)
		w := g.parkJoinLocked(m, j)
		g.maybeCompleteJoinLocked()
		return w, nil
	case StateCompletingRebalance:
		if m.sameProtocols(j.protocols) {
			// A retried join for the generation being synced: answer it
			// again as it was answered.
			g.heartbeatLocked(m)
			g.fillJoinLocked(m, j.resp)
			return nil, nil
		}
		g.updateMemberLocked(m, j)
		w := g.parkJoinLocked(m, j)
		g.prepareRebalanceLocked("member changed its protocols")
		return w, nil
	case StateStable:
		if m.id != g.leader && m.sameProtocols(j.protocols) {
			g.heartbeatLocked(m)
			g.fillJoinLocked(m, j.resp)
			return nil, nil
		}
		g.updateMemberLocked(m, j)
		w := g.parkJoinLocked(m, j)
		g.prepareRebalanceLocked("leader rejoined or member changed its protocols")
		return w, nil
	}
	return nil, kerr.UnknownMemberID
}

// joinStaticLocked handles a join without member id but with a
// group.instance.id (KIP-345): a known instance gets a new member id and
// fences the old one; in a stable group whose protocols still fit, it
// rejoins without a rebalance.
func (g *group) joinStaticLocked(j *joinReq) (*joinWait, *kerr.Error) {
	newID := newMemberID(j.clientID)
	oldID, known := g.statics[j.instanceID]
	if !known {
		if g.fullLocked() {
			return nil, kerr.GroupMaxSizeReached
		}
		m := g.newMemberLocked(newID, j)
		return g.addMemberLocked(m, j), nil
	}
	old := g.members[oldID]
	// Fence the old incarnation: whatever it waits for ends, and its id
	// stops working.
	old.abortWaitsLocked(kerr.FencedInstanceID)
	old.stopSessionLocked()
	delete(g.members, oldID)
	m := &member{
		id: newID, instanceID: j.instanceID, assignment: old.assignment,
		protocols: old.protocols,
	}
	oldProtocols := old.protocols
	g.updateMemberLocked(m, j)
	g.members[newID] = m
	g.statics[j.instanceID] = newID
	wasLeader := g.leader == oldID
	if wasLeader {
		g.leader = newID
	}

	if g.state == StateStable && slices.EqualFunc(oldProtocols, m.protocols, func(a, b protocol) bool {
		return a.name == b.name
	}) && m.metadataFor(g.protocol) != nil {
		// No rebalance: record the new member id so a coordinator that
		// replays the log knows it, then answer with the current
		// generation.
		if err := g.storeLocked(j.ctx); err != nil {
			// Put the old member back; the client retries.
			delete(g.members, newID)
			g.members[oldID] = old
			g.statics[j.instanceID] = oldID
			if wasLeader {
				g.leader = oldID
			}
			g.heartbeatLocked(old)
			return nil, writeErr(err)
		}
		g.heartbeatLocked(m)
		g.fillJoinLocked(m, j.resp)
		if wasLeader && j.req.Version >= 9 {
			// KIP-814: the leader learns the members but must not
			// compute a new assignment.
			j.resp.SkipAssignment = true
		}
		return nil, nil
	}
	w := g.parkJoinLocked(m, j)
	switch g.state {
	case StatePreparingRebalance:
		g.maybeCompleteJoinLocked()
	default:
		g.prepareRebalanceLocked("static member rejoined with new protocols")
	}
	return w, nil
}

// fullLocked reports whether group.max.size leaves no room for a new member.
func (g *group) fullLocked() bool {
	return g.c.cfg.MaxGroupSize > 0 && len(g.members)+len(g.pending) >= g.c.cfg.MaxGroupSize
}

func (g *group) newMemberLocked(id string, j *joinReq) *member {
	m := &member{id: id, instanceID: j.instanceID}
	g.updateMemberLocked(m, j)
	return m
}

func (g *group) updateMemberLocked(m *member, j *joinReq) {
	m.clientID, m.clientHost = j.clientID, j.clientHost
	m.protocols = j.protocols
	m.sessionTimeout, m.rebalanceTimeout = j.session, j.rebalance
}

// addMemberLocked adds m to the group, parks its join and starts or
// continues a rebalance.
func (g *group) addMemberLocked(m *member, j *joinReq) *joinWait {
	if len(g.members) == 0 {
		g.protocolType = j.req.ProtocolType
	}
	g.members[m.id] = m
	if m.instanceID != "" {
		g.statics[m.instanceID] = m.id
	}
	if g.leader == "" {
		g.leader = m.id
	}
	g.newMember = true
	w := g.parkJoinLocked(m, j)
	if g.state == StatePreparingRebalance {
		g.maybeCompleteJoinLocked()
	} else {
		g.prepareRebalanceLocked("member joined")
	}
	return w
}

func (g *group) parkJoinLocked(m *member, j *joinReq) *joinWait {
	if m.join != nil {
		// The client gave up on its earlier join and sent another; only
		// the newest one is answered with the result.
		m.join.resp.ErrorCode = kerr.RebalanceInProgress.Code
		m.join.finish()
	}
	m.join = &joinWait{resp: j.resp, done: make(chan struct{})}
	// A member waiting at the barrier is alive; its session timer restarts
	// when the barrier completes.
	m.stopSessionLocked()
	return m.join
}

// supportsLocked reports whether a member with these protocols may join:
// the group's protocol type must match and at least one protocol must be
// supported by every member.
func (g *group) supportsLocked(protocolType string, ps []protocol) bool {
	if len(g.members) == 0 {
		return true
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range ps {
		if g.allSupportLocked(p.name) {
			return true
		}
	}
	return false
}

func (g *group) allSupportLocked(name string) bool {
	for _, m := range g.members {
		if !m.supports(name) {
			return false
		}
	}
	return true
}

// prepareRebalanceLocked moves the group to PreparingRebalance and arms
// the barrier's timer.
func (g *group) prepareRebalanceLocked(reason string) {
	if g.state == StateCompletingRebalance {
		g.resetSyncsLocked(kerr.RebalanceInProgress)
	}
	wasEmpty := g.state == StateEmpty
	g.setStateLocked(StatePreparingRebalance)
	g.c.rebalances.Add(1)
	g.c.log.Debug("rebalance", "group", g.id, "generation", g.generation, "reason", reason)
	timeout := g.maxRebalanceTimeoutLocked()
	if wasEmpty && g.c.cfg.InitialRebalanceDelay > 0 {
		delay := min(g.c.cfg.InitialRebalanceDelay, timeout)
		g.initialDelay, g.delayLeft, g.newMember = true, timeout-delay, false
		g.armRebalanceTimerLocked(delay)
		return
	}
	g.initialDelay = false
	g.armRebalanceTimerLocked(timeout)
	g.maybeCompleteJoinLocked()
}

func (g *group) maxRebalanceTimeoutLocked() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

func (g *group) armRebalanceTimerLocked(d time.Duration) {
	g.stopRebalanceTimerLocked()
	tok := g.timerToken
	g.rebalanceTimer = g.c.clock.AfterFunc(d, func() { g.rebalanceTimerFired(tok) })
}

func (g *group) stopRebalanceTimerLocked() {
	g.timerToken++
	if g.rebalanceTimer != nil {
		g.rebalanceTimer.Stop()
		g.rebalanceTimer = nil
	}
}

func (g *group) rebalanceTimerFired(tok uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead || tok != g.timerToken || g.state != StatePreparingRebalance {
		return
	}
	if g.initialDelay && g.newMember && g.delayLeft > 0 {
		// Members are still arriving: keep the door open a little longer,
		// within the rebalance timeout.
		d := min(g.c.cfg.InitialRebalanceDelay, g.delayLeft)
		g.delayLeft -= d
		g.newMember = false
		g.armRebalanceTimerLocked(d)
		return
	}
	g.completeJoinLocked()
}

// maybeCompleteJoinLocked completes the barrier once every member has
// joined and no member id handed out is still outstanding.
func (g *group) maybeCompleteJoinLocked() {
	if g.state != StatePreparingRebalance || g.initialDelay {
		return
	}
	if len(g.pending) > 0 {
		return
	}
	for _, m := range g.members {
		if m.join == nil {
			return
		}
	}
	g.completeJoinLocked()
}

// completeJoinLocked ends the barrier: members that did not rejoin are
// removed, a new generation starts with the protocol most members prefer,
// and every parked join is answered.
func (g *group) completeJoinLocked() {
	g.stopRebalanceTimerLocked()
	g.initialDelay = false
	for _, m := range g.sortedMembersLocked() {
		if m.join == nil {
			g.c.log.Debug("member did not rejoin in time", "group", g.id, "member", m.id)
			g.dropMemberLocked(m)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.protocol, g.leader = "", ""
		g.setStateLocked(StateEmpty)
		if err := g.storeLocked(context.Background()); err != nil {
			g.c.log.Warn("store empty group", "group", g.id, "err", err)
		}
		g.maybeRemoveLocked()
		return
	}
	g.protocol = g.selectProtocolLocked()
	if _, ok := g.members[g.leader]; !ok {
		g.leader = g.sortedMembersLocked()[0].id
	}
	g.setStateLocked(StateCompletingRebalance)
	for _, m := range g.sortedMembersLocked() {
		g.fillJoinLocked(m, m.join.resp)
		m.join.finish()
		m.join = nil
		g.heartbeatLocked(m)
	}
}

// fillJoinLocked writes the current generation into a join response; the
// leader also gets every member's metadata for the chosen protocol.
func (g *group) fillJoinLocked(m *member, resp *kmsg.JoinGroupResponse) {
	resp.ErrorCode = 0
	resp.Generation = g.generation
	resp.ProtocolType = kmsg.StringPtr(g.protocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.LeaderID = g.leader
	resp.MemberID = m.id
	resp.Members = nil
	if m.id == g.leader {
		for _, o := range g.sortedMembersLocked() {
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID = o.id
			if o.instanceID != "" {
				rm.InstanceID = kmsg.StringPtr(o.instanceID)
			}
			rm.ProtocolMetadata = o.metadataFor(g.protocol)
			resp.Members = append(resp.Members, rm)
		}
	}
}

// selectProtocolLocked picks, among the protocols every member supports,
// the one most members list first (Kafka's vote).
func (g *group) selectProtocolLocked() string {
	var candidates []string
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.allSupportLocked(p.name) && !slices.Contains(candidates, p.name) {
				candidates = append(candidates, p.name)
			}
		}
		break
	}
	votes := make(map[string]int)
	for _, m := range g.members {
		for _, p := range m.protocols {
			if slices.Contains(candidates, p.name) {
				votes[p.name]++
				break
			}
		}
	}
	best := ""
	for _, name := range slices.Sorted(maps.Keys(votes)) {
		if best == "" || votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

func (g *group) sortedMembersLocked() []*member {
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].id < ms[j].id })
	return ms
}

// heartbeatLocked restarts m's session timer.
func (g *group) heartbeatLocked(m *member) {
	m.stopSessionLocked()
	tok := m.token
	m.sessionTimer = g.c.clock.AfterFunc(m.sessionTimeout, func() { g.sessionExpired(m, tok) })
}

func (g *group) sessionExpired(m *member, tok uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead || m.token != tok || m.join != nil {
		return
	}
	if g.pending[m.id] == m {
		delete(g.pending, m.id)
		g.maybeCompleteJoinLocked()
		g.maybeRemoveLocked()
		return
	}
	if g.members[m.id] != m {
		return
	}
	g.c.log.Info("member session expired", "group", g.id, "member", m.id)
	g.removeMemberLocked(m, "session timeout")
}

// dropMemberLocked forgets m without touching the group's state.
func (g *group) dropMemberLocked(m *member) {
	m.stopSessionLocked()
	delete(g.members, m.id)
	if m.instanceID != "" && g.statics[m.instanceID] == m.id {
		delete(g.statics, m.instanceID)
	}
	m.abortWaitsLocked(kerr.UnknownMemberID)
	if g.leader == m.id {
		g.leader = ""
		if ms := g.sortedMembersLocked(); len(ms) > 0 {
			g.leader = ms[0].id
		}
	}
}

// removeMemberLocked removes m (it left or its session expired) and lets
// the rest of the group rebalance.
func (g *group) removeMemberLocked(m *member, reason string) {
	g.dropMemberLocked(m)
	switch g.state {
	case StateStable, StateCompletingRebalance:
		g.prepareRebalanceLocked(reason)
	case StatePreparingRebalance:
		g.maybeCompleteJoinLocked()
	}
}

// resetSyncsLocked answers every waiting SyncGroup with e and forgets the
// assignments of the generation that will not be.
func (g *group) resetSyncsLocked(e *kerr.Error) {
	for _, m := range g.members {
		m.assignment = nil
		if m.sync != nil {
			m.sync.resp.ErrorCode = e.Code
			m.sync.finish()
			m.sync = nil
		}
	}
}

// shutdownLocked answers every waiting request with e and stops timers;
// the group is gone from this coordinator.
func (g *group) shutdownLocked(e *kerr.Error) {
	g.dead = true
	g.stopRebalanceTimerLocked()
	for _, m := range g.members {
		m.stopSessionLocked()
		m.abortWaitsLocked(e)
	}
	for _, m := range g.pending {
		m.stopSessionLocked()
	}
}

// maybeRemoveLocked drops an empty group that has nothing left to keep.
func (g *group) maybeRemoveLocked() {
	if g.state == StateEmpty && len(g.members) == 0 && len(g.pending) == 0 && len(g.offsets) == 0 && len(g.txns) == 0 && g.generation == 0 {
		g.c.removeGroupLocked(g)
	}
}

func stopTimer(t Timer) {
	if t != nil {
		t.Stop()
	}
}

// SyncGroup handles a SyncGroup request. A follower blocks until the
// leader's assignment is stored, ctx ends or the coordinator closes.
func (c *Coordinator) SyncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	fail := func(e *kerr.Error) *kmsg.SyncGroupResponse {
		resp.ErrorCode = e.Code
		return resp
	}
	if req.Group == "" {
		return fail(kerr.InvalidGroupID)
	}
	g, e := c.lookup(req.Group, false)
	if e != nil {
		return fail(e)
	}
	if g == nil {
		return fail(kerr.UnknownMemberID)
	}
	w, e := g.syncLocked(ctx, req, resp)
	g.mu.Unlock()
	if e != nil {
		return fail(e)
	}
	if w == nil {
		return resp
	}
	if c.await(ctx, w.done) {
		return w.resp
	}
	out := req.ResponseKind().(*kmsg.SyncGroupResponse)
	out.ErrorCode = kerr.CoordinatorNotAvailable.Code
	return out
}

func (g *group) syncLocked(ctx context.Context, req *kmsg.SyncGroupRequest, resp *kmsg.SyncGroupResponse) (*syncWait, *kerr.Error) {
	m, e := g.memberLocked(req.MemberID, req.InstanceID, req.Generation)
	if e != nil {
		return nil, e
	}
	if req.ProtocolType != nil && *req.ProtocolType != g.protocolType || req.Protocol != nil && *req.Protocol != g.protocol {
		return nil, kerr.InconsistentGroupProtocol
	}
	resp.ProtocolType = kmsg.StringPtr(g.protocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	switch g.state {
	case StatePreparingRebalance:
		return nil, kerr.RebalanceInProgress
	case StateStable:
		g.heartbeatLocked(m)
		resp.MemberAssignment = m.assignment
		return nil, nil
	case StateCompletingRebalance:
	default:
		return nil, kerr.UnknownMemberID
	}
	g.heartbeatLocked(m)
	if m.sync != nil {
		m.sync.resp.ErrorCode = kerr.RebalanceInProgress.Code
		m.sync.finish()
	}
	m.sync = &syncWait{resp: resp, done: make(chan struct{})}
	w := m.sync
	if m.id != g.leader {
		return w, nil
	}
	for _, o := range g.members {
		o.assignment = nil
	}
	for _, a := range req.GroupAssignment {
		if o, ok := g.members[a.MemberID]; ok {
			o.assignment = bytes.Clone(a.MemberAssignment)
		}
	}
	if err := g.storeLocked(ctx); err != nil {
		// Nothing was agreed: everyone rejoins.
		g.resetSyncsLocked(writeErr(err))
		g.prepareRebalanceLocked("group metadata could not be stored")
		return w, nil
	}
	g.setStateLocked(StateStable)
	for _, o := range g.members {
		if o.sync != nil {
			o.sync.resp.MemberAssignment = o.assignment
			o.sync.finish()
			o.sync = nil
		}
	}
	return w, nil
}

// memberLocked checks a request's member id, instance id and generation
// in Kafka's order.
func (g *group) memberLocked(memberID string, instanceID *string, generation int32) (*member, *kerr.Error) {
	if instanceID != nil {
		if id, ok := g.statics[*instanceID]; ok && id != memberID {
			return nil, kerr.FencedInstanceID
		}
	}
	m, ok := g.members[memberID]
	if !ok {
		return nil, kerr.UnknownMemberID
	}
	if generation != g.generation {
		return nil, kerr.IllegalGeneration
	}
	return m, nil
}

// Heartbeat handles a Heartbeat request.
func (c *Coordinator) Heartbeat(req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	g, e := c.lookup(req.Group, false)
	if e == nil && g == nil {
		e = kerr.UnknownMemberID
	}
	if e == nil {
		e = g.heartbeatRequestLocked(req)
		g.mu.Unlock()
	}
	if e != nil {
		resp.ErrorCode = e.Code
	}
	return resp
}

func (g *group) heartbeatRequestLocked(req *kmsg.HeartbeatRequest) *kerr.Error {
	m, e := g.memberLocked(req.MemberID, req.InstanceID, req.Generation)
	if e != nil {
		if e == kerr.IllegalGeneration && g.state == StatePreparingRebalance {
			// The member still heartbeats its old generation: it must
			// rejoin, and a rebalance is what tells it so.
			if m := g.members[req.MemberID]; m != nil && m.join == nil {
				return kerr.RebalanceInProgress
			}
		}
		return e
	}
	switch g.state {
	case StatePreparingRebalance:
		if m.join == nil {
			g.heartbeatLocked(m)
		}
		return kerr.RebalanceInProgress
	case StateCompletingRebalance, StateStable:
		g.heartbeatLocked(m)
		return nil
	}
	return kerr.UnknownMemberID
}

// LeaveGroup handles a LeaveGroup request: one member before v3, a batch
// of members (possibly by group.instance.id) from v3 (KIP-345).
func (c *Coordinator) LeaveGroup(req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	leaving := req.Members
	if req.Version < 3 {
		leaving = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	var top *kerr.Error
	codes := make([]int16, len(leaving))
	if req.Group == "" {
		top = kerr.InvalidGroupID
	} else if g, e := c.lookup(req.Group, false); e != nil {
		top = e
	} else if g != nil {
		for i, lm := range leaving {
			if e := g.leaveLocked(lm); e != nil {
				codes[i] = e.Code
			}
		}
		g.maybeRemoveLocked()
		g.mu.Unlock()
	} else {
		for i := range codes {
			codes[i] = kerr.UnknownMemberID.Code
		}
	}
	if top != nil {
		resp.ErrorCode = top.Code
		return resp
	}
	if req.Version < 3 {
		resp.ErrorCode = codes[0]
		return resp
	}
	for i, lm := range leaving {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = lm.MemberID, lm.InstanceID, codes[i]
		resp.Members = append(resp.Members, rm)
	}
	return resp
}

func (g *group) leaveLocked(lm kmsg.LeaveGroupRequestMember) *kerr.Error {
	id := lm.MemberID
	if lm.InstanceID != nil {
		sid, ok := g.statics[*lm.InstanceID]
		if !ok {
			return kerr.UnknownMemberID
		}
		if id != "" && id != sid {
			return kerr.FencedInstanceID
		}
		id = sid
	}
	if m, ok := g.pending[id]; ok {
		m.stopSessionLocked()
		delete(g.pending, id)
		g.maybeCompleteJoinLocked()
		return nil
	}
	m, ok := g.members[id]
	if !ok {
		return kerr.UnknownMemberID
	}
	g.removeMemberLocked(m, "member left")
	return nil
}
