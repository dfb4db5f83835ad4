package meta

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
)

// Voter is one member of the metadata quorum's voting set.
type Voter struct {
	ID int32
	// Addr is the host:port of the voter's raft listener, as the other
	// nodes reach it. It is written into the raft configuration, so every
	// node must be given the same string.
	Addr string
}

func (v Voter) String() string { return strconv.Itoa(int(v.ID)) + "@" + v.Addr }

// Server is a member of the raft configuration: a voter, or a node that
// applies the log without voting.
type Server struct {
	ID    int32
	Addr  string
	Voter bool
}

// ParseVoters parses the voters setting, ID@HOST:PORT entries separated by
// commas, and checks it as Config.validate does. The empty string is no
// voters: a one-node store.
func ParseVoters(s string) ([]Voter, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var vs []Voter
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		idText, addr, ok := strings.Cut(e, "@")
		if !ok {
			return nil, fmt.Errorf("voter %q is not ID@HOST:PORT", e)
		}
		id, err := strconv.ParseInt(idText, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("voter %q: node id %q is not a 32-bit number", e, idText)
		}
		vs = append(vs, Voter{ID: int32(id), Addr: addr})
	}
	if err := checkVoters(vs); err != nil {
		return nil, err
	}
	return vs, nil
}

// checkVoters checks what every node can check alone: well-formed entries
// that name each node and each address once.
func checkVoters(vs []Voter) error {
	ids := make(map[int32]bool, len(vs))
	addrs := make(map[string]bool, len(vs))
	for _, v := range vs {
		if v.ID < 0 {
			return fmt.Errorf("voter %s: node id %d is negative", v, v.ID)
		}
		if err := checkPeerAddr(v.Addr); err != nil {
			return fmt.Errorf("voter %s: %w", v, err)
		}
		if ids[v.ID] {
			return fmt.Errorf("voters name node %d twice", v.ID)
		}
		if addrs[v.Addr] {
			return fmt.Errorf("voters name address %s twice", v.Addr)
		}
		ids[v.ID], addrs[v.Addr] = true, true
	}
	return nil
}

// checkPeerAddr checks that addr is a host:port other nodes could dial.
func checkPeerAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q is not host:port", addr)
	}
	if host == "" || isUnspecified(host) {
		return fmt.Errorf("address %q has no host other nodes can reach", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("address %q needs a port from 1 to 65535", addr)
	}
	return nil
}

func isUnspecified(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// CheckQuorum checks the quorum settings of node id, as Open will: Voters
// as ParseVoters does, a raft listen address, and for a voter one that is
// its own entry's (or the same port on an unspecified host). It is for
// configuration front ends, to refuse bad settings before anything
// starts; no voters is the one-node store and always passes.
func CheckQuorum(id int32, raftListen string, voters []Voter) error {
	if len(voters) == 0 {
		return nil
	}
	if err := checkVoters(voters); err != nil {
		return err
	}
	if raftListen == "" {
		return fmt.Errorf("node %d has no raft listen address; with voters, nodes talk raft over TCP", id)
	}
	lhost, lport, err := net.SplitHostPort(raftListen)
	if err != nil {
		return fmt.Errorf("raft listen address %q is not host:port", raftListen)
	}
	c := Config{NodeID: id, Voters: voters}
	self, ok := c.selfVoter()
	if !ok {
		// A non-voter's address is handed to the controller by whoever
		// adds it, so any listen address (port 0 included) will do.
		return nil
	}
	ehost, eport, _ := net.SplitHostPort(self.Addr)
	if lport != eport || (lhost != ehost && lhost != "" && !isUnspecified(lhost)) {
		return fmt.Errorf("raft listen address %s does not match node %d's voter entry %s", raftListen, id, self)
	}
	return nil
}

// selfVoter returns this node's entry in Voters.
func (c *Config) selfVoter() (Voter, bool) {
	i := slices.IndexFunc(c.Voters, func(v Voter) bool { return v.ID == c.NodeID })
	if i < 0 {
		return Voter{}, false
	}
	return c.Voters[i], true
}

// bootstrapConfiguration is the raft configuration a node without state
// starts from, or false if it must wait to be added by a leader. Every
// voter of a quorum bootstraps the identical configuration, all of Voters,
// so the quorum needs no separate bootstrap step: whichever voters come up
// first elect a leader among themselves, and their first log entries agree.
func (c *Config) bootstrapConfiguration(self raft.ServerAddress) (raft.Configuration, bool) {
	if len(c.Voters) == 0 {
		if !c.Bootstrap {
			return raft.Configuration{}, false
		}
		return raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: serverID(c.NodeID), Address: self}}}, true
	}
	if _, ok := c.selfVoter(); !ok {
		return raft.Configuration{}, false
	}
	var conf raft.Configuration
	for _, v := range c.Voters {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: serverID(v.ID), Address: raft.ServerAddress(v.Addr)})
	}
	return conf, true
}

func serverID(id int32) raft.ServerID { return raft.ServerID(strconv.Itoa(int(id))) }

// sameVoters reports whether conf's voters are exactly vs.
func sameVoters(conf raft.Configuration, vs []Voter) bool {
	var got, want []string
	for _, srv := range conf.Servers {
		if srv.Suffrage == raft.Voter {
			got = append(got, string(srv.ID)+"@"+string(srv.Address))
		}
	}
	for _, v := range vs {
		want = append(want, v.String())
	}
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// AddNonvoter makes node id, whose raft listener is at addr, a non-voting
// member of the quorum: it receives and applies the metadata log but never
// votes nor leads. Only the controller can add it (ErrNotController
// elsewhere). Adding a member again at the same address does nothing; a
// non-voter that comes back at a new address is moved there. Voters are
// fixed by the voters setting and are never changed here.
//
// Nothing in Strata calls it yet: broker registration will, for nodes
// outside the voters.
func (s *Store) AddNonvoter(ctx context.Context, id int32, addr string) error {
	if id < 0 {
		return fmt.Errorf("meta: non-voter node id %d is negative", id)
	}
	if err := checkPeerAddr(addr); err != nil {
		return fmt.Errorf("meta: non-voter %d: %w", id, err)
	}
	if !s.IsLeader() {
		return fmt.Errorf("%w: adding node %d", ErrNotController, id)
	}
	f := s.raft.GetConfiguration()
	if err := s.wait(ctx, f); err != nil {
		return err
	}
	sid := serverID(id)
	for _, srv := range f.Configuration().Servers {
		switch {
		case srv.ID != sid && srv.Address == raft.ServerAddress(addr):
			return fmt.Errorf("meta: cannot add node %d at %s: node %s is there", id, addr, srv.ID)
		case srv.ID != sid:
		case srv.Address == raft.ServerAddress(addr):
			return nil
		case srv.Suffrage == raft.Voter:
			return fmt.Errorf("meta: node %d is a voter at %s, not %s; voters change only with the voters setting", id, srv.Address, addr)
		}
	}
	if err := s.wait(ctx, s.raft.AddNonvoter(sid, raft.ServerAddress(addr), 0, timeoutOf(ctx))); err != nil {
		return fmt.Errorf("adding non-voter %d at %s: %w", id, addr, err)
	}
	return nil
}

// Servers returns the raft configuration as this node knows it: voters
// and non-voters, in configuration order.
func (s *Store) Servers() ([]Server, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, raftError(err)
	}
	var out []Server
	for _, srv := range f.Configuration().Servers {
		id, err := strconv.ParseInt(string(srv.ID), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("meta: raft server id %q is not a node id", srv.ID)
		}
		out = append(out, Server{ID: int32(id), Addr: string(srv.Address), Voter: srv.Suffrage == raft.Voter})
	}
	return out, nil
}

// RaftAddr returns the address raft listens on: with port 0 in
// Config.RaftAddr, the port chosen. It is "inmem:ID" on the in-memory
// transport.
func (s *Store) RaftAddr() string { return string(s.trans.LocalAddr()) }
