package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/partition"
	"strata/meta"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// Read replicas (docs/operations.md, Read replicas): a topic created with
// strata.read.replica.source serves another cluster's topic, read-only,
// from that cluster's bucket. This file holds the topic configs, the
// checks at creation and at every later change, the source tiers the node
// opens (one per source URI), and the loop that polls the sources'
// manifests.

// The read-replica topic configs. Source and Topic are the operator's;
// TopicID is the broker's, set at creation from the source bucket, so
// that a source topic deleted and re-created under the same name is never
// served in its place.
const (
	ReadReplicaSourceKey  = "strata.read.replica.source"
	ReadReplicaTopicKey   = "strata.read.replica.source.topic"
	ReadReplicaTopicIDKey = "strata.read.replica.source.topic.id"
)

// readReplicaKeys are the configs fixed at a read replica's creation.
var readReplicaKeys = []string{ReadReplicaSourceKey, ReadReplicaTopicKey, ReadReplicaTopicIDKey}

// DefaultReadReplicaPollInterval is how often a read replica reads its
// source's manifests when the setting is not given.
const DefaultReadReplicaPollInterval = 10 * time.Second

// ReadReplicaConfig configures the read replicas this node hosts.
type ReadReplicaConfig struct {
	// PollInterval is how often each read-replica partition reads its
	// source's newest manifest (read_replica.poll_interval; default
	// DefaultReadReplicaPollInterval).
	PollInterval time.Duration
	// Open opens the object store a source URI names (objstore.ParseURI),
	// read-only: cmd gives S3 sources the node's endpoint and credentials.
	// Nil opens directory stores only.
	Open func(ctx context.Context, uri string) (objstore.Store, error)
	// Notify, when set, follows the objects a source creates
	// (objstore.ListenMinIO, for a MinIO source and
	// read_replica.notifications on): a partition polls as soon as its
	// source writes a manifest, besides every PollInterval. It returns
	// when ctx ends (nil) or it fails; polling goes on meanwhile and a
	// failed listen is tried again after NotifyRetry, unless its error is
	// errors.ErrUnsupported (a source without notifications).
	Notify func(ctx context.Context, uri string, fn func(key string)) error
}

// NotifyRetry is how long a read replica's source whose notifications
// failed is followed by polling alone before they are tried again.
var NotifyRetry = time.Minute

// WithDefaults fills in the defaults of the fields left zero.
func (c ReadReplicaConfig) WithDefaults() ReadReplicaConfig {
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultReadReplicaPollInterval
	}
	if c.Open == nil {
		c.Open = OpenDirSource
	}
	return c
}

// OpenDirSource opens a file:/// (or dir:///) source read-only; an S3
// source needs the node's S3 settings, which only cmd has.
func OpenDirSource(_ context.Context, uri string) (objstore.Store, error) {
	loc, err := objstore.ParseURI(uri)
	if err != nil {
		return nil, err
	}
	if loc.Dir == "" {
		return nil, fmt.Errorf("%s: this broker opens directory stores only (file:///dir); S3 sources need strata serve's S3 settings", uri)
	}
	return objstore.OpenDirReadOnly(loc.Dir)
}

func validSourceURI(v string) error {
	_, err := objstore.ParseURI(v)
	return err
}

func validSourceTopic(v string) error {
	if v == "" {
		return nil
	}
	return ValidateTopicName(v)
}

func validSourceTopicID(v string) error {
	b, err := hex.DecodeString(v)
	if err != nil || len(b) != 16 {
		return errors.New("want 32 hex digits")
	}
	return nil
}

// readReplicas is the node's state for the read replicas it hosts.
type readReplicas struct {
	mu struct {
		sync.Mutex
		// sources are the source tiers, by URI, opened on first use and
		// kept until the node closes; an entry is there from the start of
		// its open, so that one open at a time is in flight per URI.
		sources map[string]*sourceTier
		// closed is set by closeSources: an open that ends after it
		// closes what it opened.
		closed bool
		// due are the read-replica partitions the loop is to poll now
		// (pollSoon), besides its ticks.
		due []*partition.Partition
		// seen is the newest manifest key each partition was seen at,
		// and lag when that became visible here.
		seen map[tp]seenManifest
		// gone are the partitions whose source deleted its topic
		// (partition.SourceGone), as last reported.
		gone map[tp]bool
	}
	lag        *prometheus.GaugeVec
	goneSeries *prometheus.GaugeVec
	pollErrors prometheus.Counter
	metricOnce sync.Once
	// wake asks readReplicaLoop to poll the due partitions and start
	// the listeners of new read replicas now (wakeCh).
	wake     chan struct{}
	wakeOnce sync.Once
}

func (r *readReplicas) wakeCh() chan struct{} {
	r.wakeOnce.Do(func() { r.wake = make(chan struct{}, 1) })
	return r.wake
}

type seenManifest struct {
	key string
	// lag is -1 for the first manifest seen, which may have been written
	// long before the replica was created: it says nothing of the lag.
	lag time.Duration
}

// sourceTier is one source bucket: its store, read-only, and a tier of
// its own over it (its own chunk cache and manifest pages). store and
// tier are set, or err, when ready is closed.
type sourceTier struct {
	ready chan struct{}
	err   error
	store objstore.Store
	tier  *tier.Tier
}

// source returns the tier of the source uri, opening it the first time.
// The open (which may wait on an unreachable store) runs outside the
// lock, one at a time per URI: callers for a URI being opened wait for
// that open (or their ctx), and a failed open is tried again by the next
// caller.
func (n *Node) source(ctx context.Context, uri string) (*sourceTier, error) {
	r := &n.readReplicas
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil, partition.ErrClosed
	}
	if s := r.mu.sources[uri]; s != nil {
		r.mu.Unlock()
		select {
		case <-s.ready:
			if s.err != nil {
				return nil, s.err
			}
			return s, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("read replica source %s: waiting for its open: %w", uri, ctx.Err())
		}
	}
	if r.mu.sources == nil {
		r.mu.sources = make(map[string]*sourceTier)
	}
	s := &sourceTier{ready: make(chan struct{})}
	r.mu.sources[uri] = s
	r.mu.Unlock()

	st, t, err := n.openSource(ctx, uri)
	// Under the lock, as closeSources: a tier opened after it is closed
	// here, never left open.
	r.mu.Lock()
	if err == nil && r.mu.closed {
		t.Close() // nothing read yet: returns at once
		err = partition.ErrClosed
	}
	if err != nil && r.mu.sources[uri] == s {
		delete(r.mu.sources, uri)
	}
	s.store, s.tier, s.err = st, t, err
	close(s.ready)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openSource opens the store of the source uri, read-only, and a tier
// over it.
func (n *Node) openSource(ctx context.Context, uri string) (objstore.Store, *tier.Tier, error) {
	st, err := n.cfg.ReadReplica.WithDefaults().Open(ctx, uri)
	if err != nil {
		return nil, nil, err
	}
	st = objstore.ReadOnly(st) // whatever Open gave: never a write there
	sum := sha256.Sum256([]byte(uri))
	b := sourceBudget(n.cfg.Tier)
	t, err := tier.Open(tier.Config{
		Store:              st,
		CacheDir:           filepath.Join(n.cfg.DataDir, "read-replica-cache", hex.EncodeToString(sum[:8])),
		ChunkBytes:         b.chunk,
		MemoryBytes:        b.memory,
		CacheBytes:         b.cache,
		ReadAhead:          n.cfg.Tier.ReadAhead,
		ReadWorkers:        n.cfg.Tier.ReadWorkers,
		ManifestCacheBytes: b.manifests,
		Logger:             n.log.With("component", "read-replica", "source", uri),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read replica source %s: %w", uri, err)
	}
	return st, t, nil
}

// SourceShare is the part of the node's tier budgets (chunk memory, disk
// cache, manifest pages) that each read-replica source tier gets: a
// quarter, so that a source or two cost at most half again what the
// node's own tier does, and each source's cost is known in advance.
const SourceShare = 4

// budget is what a tier may hold.
type budget struct{ chunk, memory, cache, manifests int64 }

// sourceBudget is a source tier's share of the node's tier budgets (the
// tier's defaults where the node leaves them zero): 1/SourceShare of
// each, but never below the two chunks a tier needs in memory and on
// disk, nor below 1 MiB of manifest pages.
func sourceBudget(c TierConfig) budget {
	b := budget{chunk: c.ChunkBytes, memory: c.MemoryBytes, cache: c.CacheBytes, manifests: c.ManifestCacheBytes}
	if b.chunk <= 0 {
		b.chunk = tier.DefaultChunkBytes
	}
	if b.memory <= 0 {
		b.memory = tier.DefaultMemoryBytes
	}
	if b.cache <= 0 {
		b.cache = tier.DefaultCacheBytes
	}
	if b.manifests <= 0 {
		b.manifests = tier.DefaultManifestCacheBytes
	}
	b.memory = max(b.memory/SourceShare, 2*b.chunk)
	b.cache = max(b.cache/SourceShare, 2*b.chunk)
	b.manifests = max(b.manifests/SourceShare, 1<<20)
	return b
}

// closeSources closes the source tiers (Close, once the loops are done).
func (n *Node) closeSources() {
	r := &n.readReplicas
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.closed = true
	for _, s := range r.mu.sources {
		select {
		case <-s.ready:
			if s.err == nil {
				s.tier.Close()
			}
		default: // its opener closes it, seeing closed
		}
	}
	r.mu.sources = nil
}

// readReplicaOf returns what partition index of a topic with configs
// serves, nil unless the topic is a read replica.
func readReplicaOf(configs map[string]string, index int32) *partition.ReadReplica {
	uri := configs[ReadReplicaSourceKey]
	if uri == "" {
		return nil
	}
	id, _ := hex.DecodeString(configs[ReadReplicaTopicIDKey])
	rr := &partition.ReadReplica{URI: uri, Name: format.TopicPartition{Topic: configs[ReadReplicaTopicKey], Partition: index}}
	copy(rr.Name.TopicID[:], id)
	return rr
}

// IsReadReplica reports whether a topic with these configs is a read
// replica.
func IsReadReplica(configs map[string]string) bool { return configs[ReadReplicaSourceKey] != "" }

// prepareReadReplica checks a read replica's creation against its source
// bucket, before anything is created: the source opens, holds the topic,
// and has the partition count asked for (-1 takes the source's). It
// completes c's configs with the source topic's name and id.
func (n *Node) prepareReadReplica(ctx context.Context, c *TopicCreate) error {
	uri, ok := c.Configs[ReadReplicaSourceKey]
	if !ok {
		for _, k := range readReplicaKeys[1:] {
			if _, set := c.Configs[k]; set {
				return fmt.Errorf("%w: %s is for read replicas: set %s too", kerr.InvalidConfig, k, ReadReplicaSourceKey)
			}
		}
		return nil
	}
	if err := validSourceURI(uri); err != nil {
		return fmt.Errorf("%w: %s: %v", kerr.InvalidConfig, ReadReplicaSourceKey, err)
	}
	name := c.Configs[ReadReplicaTopicKey]
	if name == "" {
		name = c.Name
	}
	if err := ValidateTopicName(name); err != nil {
		return fmt.Errorf("%w: %s: %v", kerr.InvalidConfig, ReadReplicaTopicKey, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	src, err := n.source(ctx, uri)
	if err != nil {
		return fmt.Errorf("%w: read replica source %s: %v", kerr.InvalidConfig, uri, err)
	}
	id, count, err := findSourceTopic(ctx, src.store, name)
	if err != nil {
		return fmt.Errorf("%w: read replica source %s: %v", kerr.InvalidConfig, uri, err)
	}
	// The id is the broker's to set; a creation forwarded to the
	// controller carries the one its first broker found, which must
	// still be the source's.
	if want, set := c.Configs[ReadReplicaTopicIDKey]; set && want != hex.EncodeToString(id[:]) {
		return fmt.Errorf("%w: %s=%s, but topic %q in %s has id %x", kerr.InvalidConfig, ReadReplicaTopicIDKey, want, name, uri, id)
	}
	switch {
	case c.Partitions == -1:
		c.Partitions = count
	case c.Partitions != count:
		return fmt.Errorf("%w: topic %q has %d partition(s) in %s; a read replica has the same (leave the partition count out)", kerr.InvalidConfig, name, count, uri)
	}
	c.Configs = maps.Clone(c.Configs)
	c.Configs[ReadReplicaTopicKey] = name
	c.Configs[ReadReplicaTopicIDKey] = hex.EncodeToString(id[:])
	return nil
}

// findSourceTopic finds topic name in a source bucket: its id and
// partition count, from the bucket's newest metadata checkpoint when it
// lists the topic, else from the objects (tier.ProbeTopic: a partition
// that never uploaded between two that did is counted, not taken for the
// end; partitions past the last that uploaded are not known). Of several
// incarnations (a topic deleted and created again under the name, the
// old one's objects not collected yet), the one with the newest manifest.
func findSourceTopic(ctx context.Context, st objstore.Store, name string) (id [16]byte, partitions int32, err error) {
	if c, _, err := tier.LatestCheckpoint(ctx, st); err == nil {
		for _, t := range c.Topics {
			if t.Name == name && !t.Internal && len(t.Partitions) > 0 {
				return t.TopicID(), int32(len(t.Partitions)), nil
			}
		}
	} else if ctx.Err() != nil {
		return id, 0, err
	}
	// No checkpoint, or one without the topic (written before it was
	// created, or by a version that writes none): the objects tell.
	found, err := tier.ProbeTopic(ctx, st, name)
	if err != nil {
		return id, 0, err
	}
	var newest time.Time
	picked := false
	for x, parts := range found {
		if len(found) > 1 {
			at, err := lastManifestWrite(ctx, st, format.TopicPartition{Topic: name, TopicID: x, Partition: parts[0]})
			if err != nil {
				return id, 0, err
			}
			if picked && !at.After(newest) {
				continue
			}
			newest = at
		}
		id, partitions, picked = x, parts[len(parts)-1]+1, true
	}
	if !picked {
		return id, 0, fmt.Errorf("the bucket holds no topic %q (no objects of its partitions 0 to %d)", name, tier.ProbeGap-1)
	}
	return id, partitions, nil
}

// lastManifestWrite returns when the newest manifest of tp was written; zero
// without one.
func lastManifestWrite(ctx context.Context, st objstore.Store, tp format.TopicPartition) (time.Time, error) {
	var newest time.Time
	err := st.List(ctx, tp.ManifestsPrefix(), func(a objstore.Attrs) error {
		if _, err := format.ParseManifestKey(a.Key); err == nil && a.LastModified.After(newest) {
			newest = a.LastModified
		}
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("list the manifests of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	return newest, nil
}

// CheckReadReplicaConfigs refuses a config change that would make a
// topic a read replica, stop it being one, or change its source: after
// are the topic's configs as the change leaves them, before as they are.
func CheckReadReplicaConfigs(after, before map[string]string) error {
	for _, k := range readReplicaKeys {
		if after[k] != before[k] {
			if before[ReadReplicaSourceKey] == "" {
				return fmt.Errorf("%w: %s: only a new topic can be a read replica (strata topic create --read-replica-of)", kerr.InvalidConfig, k)
			}
			return fmt.Errorf("%w: %s: a read replica's source is fixed at its creation; delete the topic and create it again to change it", kerr.InvalidConfig, k)
		}
	}
	return nil
}

// CheckCreatePartitions refuses new partitions for a read replica, whose
// partitions are its source's.
func CheckCreatePartitions(t *meta.Topic) error {
	if IsReadReplica(t.Configs) {
		return fmt.Errorf("%w: topic %q is a read replica of %s: its partitions are the source's", kerr.PolicyViolation, t.Name, t.Configs[ReadReplicaSourceKey])
	}
	return nil
}

// CheckTxnWrite refuses a read-replica partition to a transaction
// (AddPartitionsToTxn): the produce would be refused anyway, and the
// transaction's markers, which the coordinator writes to every partition
// of the transaction, would be refused forever, leaving the transactional
// id stuck. Refusing the add makes the producer fail at once.
func CheckTxnWrite(t *meta.Topic) error {
	if IsReadReplica(t.Configs) {
		return fmt.Errorf("%w: topic %q is a read replica of %s: it takes no transactional writes", kerr.PolicyViolation, t.Name, t.Configs[ReadReplicaSourceKey])
	}
	return nil
}

// readReplicaLoop polls the sources of the read replicas this node hosts
// at start and every poll interval after, and the new ones as soon as
// the reconcile opens them (pollSoon), until the node closes; with
// notifications configured it also keeps one listener per source.
//
// The polls run in passes of their own, which the loop waits for only
// when it ends: a source that does not answer (each poll gives up after
// a minute) holds up neither the loop nor a new replica's first poll,
// and at most one tick pass runs at a time.
func (n *Node) readReplicaLoop() {
	tick := time.NewTicker(n.cfg.ReadReplica.WithDefaults().PollInterval)
	defer tick.Stop()
	ls := n.newListeners()
	defer ls.stop()
	var passes sync.WaitGroup
	defer passes.Wait()
	var ticking atomic.Bool
	tickPass := func(ps []*partition.Partition) {
		if ticking.CompareAndSwap(false, true) {
			passes.Go(func() {
				defer ticking.Store(false)
				n.pollReadReplicas(ps)
			})
		}
	}
	// At once first: the read replicas opened at start-up answer with a
	// retriable error until their source's manifest is read.
	ps := n.Partitions()
	ls.sync(ps)
	tickPass(ps)
	for {
		select {
		case <-n.ctx.Done():
			return
		case e := <-ls.ended:
			ls.failed(e)
		case <-n.readReplicas.wakeCh():
			ls.sync(n.Partitions())
			r := &n.readReplicas
			r.mu.Lock()
			due := r.mu.due
			r.mu.due = nil
			r.mu.Unlock()
			if len(due) > 0 {
				passes.Go(func() { n.pollReadReplicas(due) })
			}
		case <-tick.C:
			ps := n.Partitions()
			ls.sync(ps)
			tickPass(ps)
		}
	}
}

// listeners are the notification listeners of readReplicaLoop, one per
// source URI that a hosted read replica names. Only the loop touches
// them; each listener's goroutine reports its end on ended.
type listeners struct {
	n       *Node
	notify  func(ctx context.Context, uri string, fn func(key string)) error
	running map[string]context.CancelFunc
	retryAt map[string]time.Time
	ended   chan listenEnd
	wg      sync.WaitGroup
}

type listenEnd struct {
	uri string
	err error
}

func (n *Node) newListeners() *listeners {
	return &listeners{n: n, notify: n.cfg.ReadReplica.Notify, running: map[string]context.CancelFunc{},
		retryAt: map[string]time.Time{}, ended: make(chan listenEnd)}
}

// sync starts a listener for each source of ps without one (unless it
// failed less than NotifyRetry ago) and stops those no partition names.
func (l *listeners) sync(ps []*partition.Partition) {
	if l.notify == nil {
		return
	}
	uris := map[string]bool{}
	for _, p := range ps {
		if rr := p.ReadReplicaOf(); rr != nil && !p.Dropped() {
			uris[rr.URI] = true
		}
	}
	for uri, cancel := range l.running {
		if !uris[uri] {
			cancel()
			delete(l.running, uri)
		}
	}
	for uri := range l.retryAt {
		if !uris[uri] {
			delete(l.retryAt, uri)
		}
	}
	for uri := range uris {
		if l.running[uri] != nil || time.Now().Before(l.retryAt[uri]) {
			continue
		}
		ctx, cancel := context.WithCancel(l.n.ctx)
		l.running[uri] = cancel
		l.wg.Go(func() {
			err := l.notify(ctx, uri, func(key string) { l.n.sourceWrote(uri, key) })
			if ctx.Err() != nil {
				return // stopped: nobody waits for the end
			}
			if err == nil {
				err = errors.New("the listen ended")
			}
			select {
			case l.ended <- listenEnd{uri, err}:
			case <-ctx.Done():
			}
		})
		l.n.log.Info("read replica: following the source by bucket notifications, and polling", "source", uri)
	}
}

// failed records a listener's failure: its source is polled alone until
// NotifyRetry has passed.
func (l *listeners) failed(e listenEnd) {
	if cancel := l.running[e.uri]; cancel != nil {
		cancel()
		delete(l.running, e.uri)
	}
	if errors.Is(e.err, errors.ErrUnsupported) {
		// A source that has none (a directory): not a failure, and not
		// worth trying again while it is hosted.
		l.retryAt[e.uri] = time.Now().Add(100 * 365 * 24 * time.Hour)
		l.n.log.Info("read replica: the source has no bucket notifications; polling it", "source", e.uri, "err", e.err)
		return
	}
	l.retryAt[e.uri] = time.Now().Add(NotifyRetry)
	l.n.log.Warn("read replica: bucket notifications of the source failed; polling it alone, trying them again later",
		"source", e.uri, "retry_in", NotifyRetry, "err", e.err)
}

// stop ends every listener and waits for them.
func (l *listeners) stop() {
	for _, cancel := range l.running {
		cancel()
	}
	l.wg.Wait()
}

// sourceWrote is a listener's report of an object the source uri
// created: a manifest makes the read-replica partitions it is of poll at
// once.
func (n *Node) sourceWrote(uri, key string) {
	k, err := format.ParseManifestKey(key)
	if err != nil {
		return
	}
	for _, p := range n.Partitions() {
		if rr := p.ReadReplicaOf(); rr != nil && rr.URI == uri && rr.Name == k.TopicPartition {
			n.pollReadReplica(p)
		}
	}
}

// sourcePollers bounds the manifests read at once by a poll pass.
const sourcePollers = 16

// pollSoon asks readReplicaLoop to poll the read replicas among ps now,
// and to start their sources' notifications, without waiting for it:
// the reconcile calls it for the partitions it opened, and must never
// wait on a source bucket (an unreachable one would hold up leadership
// and ISR changes for minutes). Until its first poll a read replica
// answers what needs its source with a retriable error.
func (n *Node) pollSoon(ps []*partition.Partition) {
	r := &n.readReplicas
	r.mu.Lock()
	for _, p := range ps {
		if p.ReadReplicaOf() != nil {
			r.mu.due = append(r.mu.due, p)
		}
	}
	due := len(r.mu.due) > 0
	r.mu.Unlock()
	if due {
		select {
		case r.wakeCh() <- struct{}{}:
		default: // a wake is pending: it takes these too
		}
	}
}

// PollReadReplicas reads the newest manifest of the sources of the read
// replicas among ps, sourcePollers at a time, and returns once all are
// read (or failed: the next pass tries again). For tests and tools: the
// node's own polls are the loop's.
func (n *Node) PollReadReplicas(ps []*partition.Partition) { n.pollReadReplicas(ps) }

// awaitReadReplica waits, up to a few seconds (or ctx), for this node's
// partitions of a new read-replica topic to have read their source once,
// so that the creator's first requests find the source's records rather
// than a retriable error. Only the creation's answer waits: the poll is
// the loop's.
func (n *Node) awaitReadReplica(ctx context.Context, topic string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		pending := false
		for _, p := range n.Partitions() {
			if p.Topic() == topic && p.ReadReplicaOf() != nil && p.CheckRemoteKnown() != nil {
				pending = true
				break
			}
		}
		if !pending {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (n *Node) pollReadReplicas(ps []*partition.Partition) {
	sem := make(chan struct{}, sourcePollers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, p := range ps {
		if p.ReadReplicaOf() == nil {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-n.ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			n.pollReadReplica(p)
		})
	}
}

// pollReadReplica polls one partition's source and records how long its
// newest manifest took to become visible here: from the source's write
// of it to this poll.
func (n *Node) pollReadReplica(p *partition.Partition) {
	rr := p.ReadReplicaOf()
	ctx, cancel := context.WithTimeout(p.UploadContext(), time.Minute)
	defer cancel()
	r := &n.readReplicas
	r.metricOnce.Do(n.registerReadReplicaMetrics)
	fail := func(err error) {
		if p.Dropped() {
			return
		}
		if r.pollErrors != nil {
			r.pollErrors.Inc()
		}
		n.log.Warn("read replica: poll of the source failed; the replica serves what it had", "topic", p.Topic(), "partition", p.Index(), "source", rr.URI, "err", err)
	}
	src, err := n.source(ctx, rr.URI)
	if err != nil {
		fail(err)
		return
	}
	m, err := p.PollSource(ctx, src.tier)
	if err != nil {
		fail(err)
		return
	}
	if m == nil {
		return
	}
	if n.noteSourceGone(p) {
		return
	}
	key := m.Key()
	k := tp{p.Topic(), p.Index()}
	r.mu.Lock()
	prev, known := r.mu.seen[k]
	r.mu.Unlock()
	if known && prev.key == key {
		return
	}
	seenAt := time.Now()
	a, err := src.store.Stat(ctx, key)
	if err != nil {
		return // collected meanwhile: the next manifest tells
	}
	lag := max(seenAt.Sub(a.LastModified), 0)
	if !known {
		lag = -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Under the lock, as forgetReadReplica: a poll that ends after its
	// partition was dropped leaves no series behind.
	if p.Dropped() {
		return
	}
	if r.mu.seen == nil {
		r.mu.seen = make(map[tp]seenManifest)
	}
	r.mu.seen[k] = seenManifest{key: key, lag: lag}
	topicLag := lag
	for other, s := range r.mu.seen {
		if other.topic == k.topic {
			topicLag = max(topicLag, s.lag)
		}
	}
	if topicLag >= 0 && r.lag != nil {
		r.lag.WithLabelValues(p.Topic()).Set(topicLag.Seconds())
	}
}

// noteSourceGone reports whether p's source deleted its topic, and logs
// and counts the change when that is news (or no longer true).
func (n *Node) noteSourceGone(p *partition.Partition) bool {
	gone := p.SourceGone()
	r := &n.readReplicas
	k := tp{p.Topic(), p.Index()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.Dropped() || r.mu.gone[k] == gone {
		return gone
	}
	if r.mu.gone == nil {
		r.mu.gone = make(map[tp]bool)
	}
	r.mu.gone[k] = gone
	rr := p.ReadReplicaOf()
	if gone {
		n.log.Warn("read replica: the source topic was deleted (no manifest of the partition left in its bucket); the replica's log start moved to its end, and it serves nothing more until deleted",
			"topic", p.Topic(), "partition", p.Index(), "source", rr.URI, "source_topic", rr.Name.Topic, "end", p.HighWatermark())
		r.goneSeries.WithLabelValues(p.Topic()).Inc()
	} else {
		n.log.Info("read replica: the source's bucket holds the partition again; following it", "topic", p.Topic(), "partition", p.Index(), "source", rr.URI)
		r.goneSeries.WithLabelValues(p.Topic()).Dec()
	}
	return gone
}

// forgetReadReplica forgets what the polls of a dropped partition saw
// (reconcile, after Stop), and the topic's lag series once none of its
// partitions is left: a deleted read replica leaves no series, and one
// created again under the same name starts afresh.
func (n *Node) forgetReadReplica(p *partition.Partition) {
	if p.ReadReplicaOf() == nil {
		return
	}
	r := &n.readReplicas
	r.metricOnce.Do(n.registerReadReplicaMetrics)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.mu.seen, tp{p.Topic(), p.Index()})
	if r.mu.gone[tp{p.Topic(), p.Index()}] {
		r.goneSeries.WithLabelValues(p.Topic()).Dec()
	}
	delete(r.mu.gone, tp{p.Topic(), p.Index()})
	for k := range r.mu.seen {
		if k.topic == p.Topic() {
			return
		}
	}
	for k := range r.mu.gone {
		if k.topic == p.Topic() {
			return
		}
	}
	if r.lag != nil {
		r.lag.DeleteLabelValues(p.Topic())
	}
	r.goneSeries.DeleteLabelValues(p.Topic())
}

// registerReadReplicaMetrics registers the read replicas' series, once.
func (n *Node) registerReadReplicaMetrics() {
	r := &n.readReplicas
	r.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "strata_read_replica_lag_seconds",
		Help: "Per read-replica topic, the largest delay over its partitions between the source writing its newest manifest and this node serving it (the poll interval's share of a record's upload-to-visibility lag).",
	}, []string{"topic"})
	r.pollErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "strata_read_replica_poll_errors_total",
		Help: "Failed polls of read replicas' source manifests.",
	})
	r.goneSeries = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "strata_read_replica_source_deleted_partitions",
		Help: "Per read-replica topic, its partitions whose source bucket holds them no more (the source topic was deleted): they serve nothing below their end.",
	}, []string{"topic"})
	if reg := n.cfg.Metrics.Registerer; reg != nil {
		for _, c := range []prometheus.Collector{r.lag, r.pollErrors, r.goneSeries} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					n.log.Warn("read replica metrics", "err", err)
				}
			}
		}
	}
}

// ReadReplicaLag is the lag of the newest manifest of topic's source
// that this node saw change, as the lag series reports it; false before
// one changed.
func (n *Node) ReadReplicaLag(topic string) (time.Duration, bool) {
	r := &n.readReplicas
	r.mu.Lock()
	defer r.mu.Unlock()
	var lag time.Duration
	ok := false
	for k, s := range r.mu.seen {
		if k.topic == topic && s.lag >= 0 {
			lag, ok = max(lag, s.lag), true
		}
	}
	return lag, ok
}
