package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"strata/broker"
	"strata/cmd/internal/config"
	"strata/meta"
)

// maxDevNodes bounds strata dev --nodes: a laptop cluster, with node ids
// that stay one digit in the data directory names.
const maxDevNodes = 9

// devCluster is the cluster `strata dev --nodes N` runs in one process:
// N brokers, all of them voters of the metadata quorum, each with its own
// data directory under the dev data directory and all tiering into one
// bucket, as the nodes of a real cluster share one.
type devCluster struct {
	base    broker.Config // the dev node's settings, shared by every node
	n       int
	s3      config.S3
	tier    config.Tier
	dataDir string
	// announce, if set, prints more for the user after the bootstrap
	// line (strata dev --secure: how to connect).
	announce func(w io.Writer, bootstrap string)
}

// consecutiveAddrs returns n listener addresses from addr: the same host
// on consecutive ports, or n times addr when its port is 0 (each listener
// then picks its own) or addr is empty (off).
func consecutiveAddrs(addr string, n int) ([]string, error) {
	out := make([]string, n)
	if addr == "" {
		return out, nil
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%q is not host:port", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("%q does not have a port number", addr)
	}
	if port != 0 && port+n-1 > 65535 {
		return nil, fmt.Errorf("%d nodes from port %d run past port 65535", n, port)
	}
	for i := range out {
		if port == 0 {
			out[i] = addr
			continue
		}
		out[i] = net.JoinHostPort(host, strconv.Itoa(port+i))
	}
	return out, nil
}

// freeRaftAddrs picks n free loopback ports for the raft listeners. Every
// voter must be named, with its address, before any of them starts; the
// ports are held until all are picked so that they differ, and another
// process could take one before the node binds it, which only fails the
// start-up with "address already in use".
func freeRaftAddrs(host string, n int) ([]string, error) {
	if host == "" || isUnspecifiedHost(host) {
		host = "127.0.0.1" // raft peers need an address they can dial
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("raft listener: %w", err)
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	return addrs, nil
}

func isUnspecifiedHost(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// configs plans every node: ids 0..n-1 (node 0 is what a one-node dev
// is), data in <data-dir>/node-<id>, Kafka and HTTP ports consecutive
// from the dev flags' ones, and a default replication factor of three, or
// n when smaller.
func (d *devCluster) configs() ([]broker.Config, error) {
	listens, err := consecutiveAddrs(d.base.Listen, d.n)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	https, err := consecutiveAddrs(d.base.HTTPListen, d.n)
	if err != nil {
		return nil, fmt.Errorf("--http-listen: %w", err)
	}
	voters, err := d.storedVoters()
	if err != nil {
		return nil, err
	}
	// Each listener's ports (and advertised ports) are consecutive too.
	lists, err := d.listenerAddrs()
	if err != nil {
		return nil, err
	}
	if voters == nil {
		first := d.base.Listen
		if len(d.base.Listeners) > 0 {
			first = d.base.Listeners[0].Addr
		}
		host, _, _ := net.SplitHostPort(first)
		raftAddrs, err := freeRaftAddrs(host, d.n)
		if err != nil {
			return nil, err
		}
		voters = make([]meta.Voter, d.n)
		for i := range voters {
			voters[i] = meta.Voter{ID: int32(i), Addr: raftAddrs[i]}
		}
	}
	raftAddrs := make([]string, d.n)
	for i, v := range voters {
		raftAddrs[i] = v.Addr
	}
	cfgs := make([]broker.Config, d.n)
	for i := range cfgs {
		c := d.base
		c.NodeID = int32(i)
		c.DataDir = filepath.Join(d.dataDir, "node-"+strconv.Itoa(i))
		c.Listen, c.HTTPListen = listens[i], https[i]
		if lists != nil {
			c.Listeners = lists[i]
		}
		c.RaftListen, c.Voters = raftAddrs[i], voters
		c.DefaultReplicationFactor = int16(min(3, d.n))
		c.Logger = d.base.Logger.With("node", i)
		cfgs[i] = c
	}
	return cfgs, nil
}

// listenerAddrs are each node's listeners when --listener named them:
// node i listens (and advertises) on each listener's port plus i. Nil
// without listeners.
func (d *devCluster) listenerAddrs() ([][]broker.Listener, error) {
	if len(d.base.Listeners) == 0 {
		return nil, nil
	}
	out := make([][]broker.Listener, d.n)
	for _, l := range d.base.Listeners {
		addrs, err := consecutiveAddrs(l.Addr, d.n)
		if err != nil {
			return nil, fmt.Errorf("--listener %s: %w", l.Name, err)
		}
		advs, err := consecutiveAddrs(l.Advertised, d.n)
		if err != nil {
			return nil, fmt.Errorf("--advertised-listener %s: %w", l.Name, err)
		}
		for i := range out {
			nl := l
			nl.Addr, nl.Advertised = addrs[i], advs[i]
			out[i] = append(out[i], nl)
		}
	}
	return out, nil
}

// storedVoters returns the voters a cluster that ran in this data dir
// before stored, nil if none did. Its raft ports were picked free when it
// first started; they are part of the quorum's stored configuration, so
// every later run listens on them again. A stored cluster of another size
// is refused: it is another cluster.
func (d *devCluster) storedVoters() ([]meta.Voter, error) {
	for i := range d.n {
		dir := filepath.Join(d.dataDir, "node-"+strconv.Itoa(i), "meta")
		vs, ok, err := meta.StoredVoters(dir, nil)
		if err != nil {
			// In use or damaged: the node's start-up says so in its
			// own words.
			return nil, nil
		}
		if !ok {
			continue
		}
		if len(vs) != d.n {
			return nil, fmt.Errorf("data dir %s holds the data of a %d-node local cluster (strata dev --nodes %d), not of a %d-node one; run it with --nodes %d, or give another --data-dir",
				d.dataDir, len(vs), len(vs), d.n, len(vs))
		}
		return vs, nil
	}
	return nil, nil
}

// checkDevShape refuses a data dir laid out for the other shape of strata
// dev: a single node keeps its metadata in <data-dir>/meta, a local
// cluster its nodes' in <data-dir>/node-<id>. Both tier into
// <data-dir>/bucket, so running one shape over the other's data would
// show the bucket's topics without their metadata, or the other way
// round: topics seem to vanish and come back.
func checkDevShape(dataDir string, nodes int) error {
	single := isDir(filepath.Join(dataDir, "meta"))
	var cluster []string
	for i := range maxDevNodes {
		if isDir(filepath.Join(dataDir, "node-"+strconv.Itoa(i), "meta")) {
			cluster = append(cluster, "node-"+strconv.Itoa(i))
		}
	}
	switch {
	case nodes > 1 && single:
		return fmt.Errorf("data dir %s holds the data of a single strata dev node, not of a %d-node local cluster; run strata dev without --nodes, or give another --data-dir", dataDir, nodes)
	case nodes == 1 && len(cluster) > 0:
		return fmt.Errorf("data dir %s holds the data of a local cluster (%s), not of a single node; run strata dev --nodes %d, or give another --data-dir", dataDir, strings.Join(cluster, ", "), len(cluster))
	}
	return nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// run starts every node, prints one bootstrap line naming them all once
// each accepts connections, and stops them all on SIGINT or SIGTERM.
func (d *devCluster) run(ctx context.Context, out io.Writer) error {
	ctx, forced, stopSignals := notifySignals(ctx)
	defer stopSignals()

	cfgs, err := d.configs()
	if err != nil {
		return err
	}
	// One bucket for the cluster: the directory store of the dev data
	// directory unless --bucket-dir or an S3 bucket says otherwise.
	tier := d.tier
	tier.BucketDir = bucketDir(tier, d.dataDir)
	var where string
	for i := range cfgs {
		if cfgs[i], where, err = withStore(ctx, cfgs[i], d.s3, tier); err != nil {
			return err
		}
	}
	broker.RaiseProcs()

	brokers, err := startAll(ctx, cfgs)
	if err != nil {
		return stoppedStarting(ctx, d.base.Logger, err)
	}
	// The whole cluster stops together, so there is nowhere to move
	// leaderships to: each node closes at once rather than going through
	// a controlled shutdown, which the last nodes, left without a quorum,
	// would wait out.
	closeAll := func() error {
		errs := make([]error, len(brokers))
		var wg sync.WaitGroup
		for i, b := range brokers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := b.Close(); err != nil {
					errs[i] = fmt.Errorf("node %d: %w", i, err)
				}
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}

	var addrs, metrics []string
	for _, b := range brokers {
		addrs = append(addrs, b.AdvertisedAddr())
		if a := b.HTTPAddr(); a != nil {
			metrics = append(metrics, fmt.Sprintf("http://%s/metrics", a))
		}
	}
	line := fmt.Sprintf("strata dev: bootstrap %s (%d nodes, data in %s", strings.Join(addrs, ","), d.n, d.dataDir)
	if where != "" {
		line += ", bucket " + where
	}
	if len(metrics) > 0 {
		line += ", metrics " + strings.Join(metrics, " ")
	}
	fmt.Fprintln(out, line+")")
	if d.announce != nil {
		d.announce(out, strings.Join(addrs, ","))
	}

	<-ctx.Done()
	return shutdown(d.base.Logger, forced, closeAll)
}

// startAll starts the brokers together: each waits in start-up for a
// quorum of voters, so one at a time would never finish. If one fails, the
// others are stopped and its error is returned.
func startAll(ctx context.Context, cfgs []broker.Config) ([]*broker.Broker, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	brokers := make([]*broker.Broker, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if brokers[i], errs[i] = broker.Start(ctx, c); errs[i] != nil {
				cancel() // the others would wait for this one forever
			}
		}()
	}
	wg.Wait()
	var first error
	for i, err := range errs {
		// The node that failed first says why; the others only saw
		// their start-up cancelled.
		if err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = fmt.Errorf("node %d: %w", i, err)
		}
	}
	if first == nil {
		return brokers, nil
	}
	for _, b := range brokers {
		if b != nil {
			b.Close()
		}
	}
	return nil, first
}
