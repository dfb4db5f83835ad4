package meta

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"strata/meta/internal/badgerstore"
)

// The voters of a quorum change only through membership changes, which
// are not built: a node started with a voters setting that differs from
// the quorum's would bootstrap a configuration of its own, or run on one
// it does not match, and the quorum's membership would then depend on
// which node leads. Open refuses such a node. It compares the setting with
// the configuration stored in the data directory and with what the other
// voters answer when asked over the raft port: a connection whose first
// byte is votersMagic is answered with one JSON line, votersReply.
const votersMagic = 'V'

type votersReply struct {
	ID     int32    // the answering node
	Known  bool     // false: it has no raft configuration yet
	Voters []string // ID@HOST:PORT, sorted
}

// VotersMismatchError is returned by Open when the voters setting differs
// from the metadata quorum's voters: those of the raft configuration
// stored in the data directory, or those another voter answered with.
type VotersMismatchError struct {
	Setting []Voter // Config.Voters
	Quorum  []string
	// From says where Quorum comes from: "stored in DIR" or "node N at
	// HOST:PORT".
	From string
}

func (e *VotersMismatchError) Error() string {
	return fmt.Sprintf("meta: the voters setting %s differs from the metadata quorum's voters %s (%s); voters cannot change on a running quorum, start the node with the quorum's voters",
		strings.Join(voterStrings(e.Setting), ","), strings.Join(e.Quorum, ","), e.From)
}

func voterStrings(vs []Voter) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.String())
	}
	slices.Sort(out)
	return out
}

// confVoters lists conf's voters as ID@HOST:PORT, sorted.
func confVoters(conf raft.Configuration) []string {
	var out []string
	for _, srv := range conf.Servers {
		if srv.Suffrage == raft.Voter {
			out = append(out, string(srv.ID)+"@"+string(srv.Address))
		}
	}
	slices.Sort(out)
	return out
}

// handleVoters answers a voters query with this node's raft configuration:
// the running one once raft has started, the stored one before.
func (s *Store) handleVoters(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	id, _ := strconv.ParseInt(string(s.nodeID), 10, 32)
	reply := votersReply{ID: int32(id)}
	select {
	case <-s.raftReady:
		if f := s.raft.GetConfiguration(); f.Error() == nil {
			reply.Known, reply.Voters = true, confVoters(f.Configuration())
		}
	default:
		if conf := s.storedConf.Load(); conf != nil {
			reply.Known, reply.Voters = true, confVoters(*conf)
		}
	}
	b, _ := json.Marshal(reply)
	c.Write(append(b, '\n'))
}

// votersQueryTimeout bounds how long Open asks the other voters for
// their configuration: a voter that is down or not yet listening is
// simply not heard from.
const votersQueryTimeout = time.Second

// checkPeerVoters asks every other voter of the setting for the voters of
// its raft configuration and fails with a VotersMismatchError if one
// knows a different set. Voters that do not answer, or have no
// configuration yet (a quorum starting for the first time), prove nothing.
func checkPeerVoters(ctx context.Context, t raftTLS, self int32, setting []Voter) error {
	ctx, cancel := context.WithTimeout(ctx, votersQueryTimeout)
	defer cancel()
	want := voterStrings(setting)
	errs := make([]error, len(setting))
	var wg sync.WaitGroup
	for i, v := range setting {
		if v.ID == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := askVoters(ctx, t, v.Addr)
			if err != nil || !r.Known || r.ID != v.ID || slices.Equal(r.Voters, want) {
				return
			}
			errs[i] = &VotersMismatchError{Setting: setting, Quorum: r.Voters, From: fmt.Sprintf("as node %d at %s knows them", v.ID, v.Addr)}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func askVoters(ctx context.Context, t raftTLS, addr string) (votersReply, error) {
	c, err := t.dial(ctx, addr, 0)
	if err != nil {
		return votersReply{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte{votersMagic}); err != nil {
		return votersReply{}, err
	}
	line, err := bufio.NewReader(io.LimitReader(c, 64<<10)).ReadBytes('\n')
	if err != nil {
		return votersReply{}, err
	}
	var r votersReply
	if err := json.Unmarshal(line, &r); err != nil {
		return votersReply{}, fmt.Errorf("voters answer from %s: %w", addr, err)
	}
	return r, nil
}

// StoredVoters returns the voters of the raft configuration stored in dir
// (a Config.Dir), without starting raft, and false when dir holds no raft
// state. It is for front ends that must start a node on the addresses its
// quorum already has (strata dev --nodes, whose raft ports are its own to
// pick). dir must not be open.
func StoredVoters(dir string, logger *slog.Logger) ([]Voter, bool, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft")); errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	logs, err := badgerstore.Open(filepath.Join(dir, "raft"), logger)
	if err != nil {
		return nil, false, fmt.Errorf("meta: raft log: %w", err)
	}
	defer logs.Close()
	hl := newHCLogAdapter(logger)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, retainSnapshots, hl)
	if err != nil {
		return nil, false, fmt.Errorf("meta: snapshot store: %w", err)
	}
	exists, err := raft.HasExistingState(logs, logs, snaps)
	if err != nil || !exists {
		return nil, false, err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = "probe"
	rc.Logger = hl
	_, trans := raft.NewInmemTransport("")
	conf, err := raft.GetConfiguration(rc, newFSM(), logs, logs, snaps, trans)
	if err != nil {
		return nil, false, fmt.Errorf("meta: read raft configuration in %s: %w", dir, err)
	}
	var vs []Voter
	for _, srv := range conf.Servers {
		if srv.Suffrage != raft.Voter {
			continue
		}
		id, err := strconv.ParseInt(string(srv.ID), 10, 32)
		if err != nil {
			return nil, false, fmt.Errorf("meta: raft server id %q is not a node id", srv.ID)
		}
		vs = append(vs, Voter{ID: int32(id), Addr: string(srv.Address)})
	}
	slices.SortFunc(vs, func(a, b Voter) int { return int(a.ID) - int(b.ID) })
	return vs, true, nil
}
