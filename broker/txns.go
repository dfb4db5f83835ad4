package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
	"strata/broker/txn"
	"strata/meta"
	"strata/segment"
)

// txnStateTopic holds the transaction coordinator's state: one record per
// change of a transactional id (broker/txn/records.go).
const txnStateTopic = "__transaction_state"

// txnStateTopicConfigs are the transaction state topic's settings: Kafka's
// (compacted, 100 MiB segments), and tiered with the same local bounds as
// __consumer_offsets so that the bucket holds a cluster's transaction
// state too.
var txnStateTopicConfigs = map[string]string{
	"cleanup.policy":        "compact",
	"segment.bytes":         "104857600",
	"remote.storage.enable": "true",
	"local.retention.bytes": "209715200",
	"local.retention.ms":    "86400000",
}

// txnWriteTimeout bounds one write to __transaction_state, replication
// included (Kafka's request.timeout.ms for the coordinator's appends).
const txnWriteTimeout = 10 * time.Second

// txns is the broker's side of the transaction coordinator: which
// __transaction_state partitions it has loaded, and the goroutines writing
// markers.
type txns struct {
	c *txn.Coordinator

	// createMu serialises the creation of __transaction_state on a single
	// node.
	createMu sync.Mutex
	// syncMu serialises syncTxnCoordinator: the reconcile loop and txnLoop
	// both call it, and two loads of one partition must not overlap (the
	// slower would replace, with the log as it read it, state the faster
	// one had already served and changed).
	syncMu sync.Mutex

	// completed is closed, and replaced, whenever a transaction this node
	// coordinates completes: AddPartitionsToTxn and AddOffsetsToTxn that
	// found the producer's previous transaction completing wait on it.
	completedMu sync.Mutex
	completed   chan struct{}

	mu sync.Mutex
	// sending holds the transactions whose markers a goroutine is writing,
	// so a reload does not start a second one for the same end.
	sending map[string]bool
}

// startTxns starts the transaction coordinator. A single node creates
// __transaction_state the first time a transactional producer looks for its
// coordinator (ensureTxnTopic), as Kafka does, so that a node that never
// sees a transaction never pays for 50 more partitions; in a cluster the
// controller creates it once __consumer_offsets exists, with the same
// replication factor (txnTopicLoop). Until it exists FindCoordinator
// answers COORDINATOR_NOT_AVAILABLE for transactional ids, which clients
// retry.
func (b *Broker) startTxns(ctx context.Context) error {
	partitions := b.cfg.TransactionStatePartitions
	if t, ok := b.topicByName(txnStateTopic); ok {
		// As for the offsets topic: the existing count wins, or every
		// transactional id would move.
		partitions = int32(len(t.Partitions))
	} else if b.node.Clustered() {
		b.goFunc(b.txnTopicLoop)
	}
	offsetsPartitions := b.cfg.OffsetsPartitions
	if t, ok := b.topicByName(offsetsTopic); ok {
		offsetsPartitions = int32(len(t.Partitions))
	}
	c, err := txn.New(txn.Config{
		Partitions:        partitions,
		OffsetsPartitions: offsetsPartitions,
		MaxTimeout:        b.cfg.TransactionMaxTimeout,
		IDExpiration:      b.cfg.TransactionalIDExpiration,
		ProducerIDs:       txnProducerIDs{b},
	})
	if err != nil {
		return err
	}
	b.txns = &txns{c: c, sending: make(map[string]bool), completed: make(chan struct{})}
	b.metrics.reg.MustRegister(&txnCollector{b: b})
	b.syncTxnCoordinator(ctx)
	b.goFunc(b.txnLoop)
	return nil
}

// ensureTxnTopic creates __transaction_state on a single node if it does
// not exist yet, and loads its partitions. In a cluster the controller
// creates it (txnTopicLoop), and until then the answer is
// COORDINATOR_NOT_AVAILABLE.
func (b *Broker) ensureTxnTopic(ctx context.Context) error {
	if _, ok := b.topicByName(txnStateTopic); ok {
		return nil
	}
	if b.node.Clustered() {
		return fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, txnStateTopic)
	}
	b.txns.createMu.Lock()
	defer b.txns.createMu.Unlock()
	if _, ok := b.topicByName(txnStateTopic); ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := b.createTxnTopic(ctx, 1); err != nil {
		return fmt.Errorf("%w: %v", kerr.CoordinatorNotAvailable, err)
	}
	b.syncTxnCoordinator(ctx)
	return nil
}

func (b *Broker) createTxnTopic(ctx context.Context, rf int16) (*meta.Topic, error) {
	created, err := b.meta.CreateTopic(ctx, meta.TopicSpec{
		Name:              txnStateTopic,
		Partitions:        b.cfg.TransactionStatePartitions,
		ReplicationFactor: rf,
		Configs:           maps.Clone(txnStateTopicConfigs),
		Internal:          true,
	})
	if err != nil && !errors.Is(err, meta.ErrTopicExists) {
		return nil, fmt.Errorf("create %s: %w", txnStateTopic, err)
	}
	if err := b.reconcile(); err != nil {
		return nil, err
	}
	t, ok := b.topicByName(txnStateTopic)
	if !ok {
		t = &created
	}
	b.log.Info("created transaction state topic", "partitions", len(t.Partitions), "replication_factor", rf)
	return t, nil
}

// txnTopicLoop creates __transaction_state in a cluster, on whichever node
// is the controller, once __consumer_offsets exists: offsetsTopicLoop has
// then waited for the brokers to register, and the transaction state gets
// the same replication factor.
func (b *Broker) txnTopicLoop() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, ok := b.topicByName(txnStateTopic); ok {
			return
		}
		if t, ok := b.topicByName(offsetsTopic); ok && b.meta.IsLeader() && len(t.Partitions) > 0 {
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			_, err := b.createTxnTopic(ctx, int16(len(t.Partitions[0].Replicas)))
			cancel()
			if err != nil && b.ctx.Err() == nil {
				b.log.Warn("create transaction state topic", "err", err)
			}
		}
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// txnProducerIDs gives the coordinator producer ids from the broker's
// reserved blocks.
type txnProducerIDs struct{ b *Broker }

func (a txnProducerIDs) NextProducerID(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return a.b.node.AllocateProducerID(ctx)
}

// syncTxnCoordinator loads the __transaction_state partitions this node
// leads, again when their leader epoch moved (the coordinator epoch is the
// partition's leader epoch), and unloads those it no longer leads. It runs
// on metadata changes and on txnLoop's tick, which retries failed loads.
func (b *Broker) syncTxnCoordinator(ctx context.Context) {
	if b.txns == nil {
		return
	}
	t, ok := b.topicByName(txnStateTopic)
	if !ok {
		return
	}
	b.txns.syncMu.Lock()
	defer b.txns.syncMu.Unlock()
	c := b.txns.c
	// One line for all the partitions loaded in a pass: a node takes up a
	// third of the 50 at start and after a failover, each with nothing to
	// report but that it is loaded.
	var sum txnLoadSummary
	defer func() {
		if sum.partitions > 0 {
			b.log.Info("loaded transaction state partitions", "partitions", sum.partitions, "records", sum.records, "ending", sum.ending)
		}
	}()
	for _, mp := range t.Partitions {
		epoch, leads := b.leadsTxnPartition(mp.Index)
		loaded, isLoaded := c.Loaded(mp.Index)
		switch {
		case leads && (!isLoaded || loaded != epoch):
			if err := b.loadTxnPartition(ctx, mp.Index, epoch, &sum); errors.Is(err, txn.ErrLoaded) {
				// Loaded meanwhile at this epoch or a newer one: keep it.
			} else if err != nil {
				b.log.Error("load transaction state partition", "partition", mp.Index, "err", err)
				c.Unload(mp.Index)
			} else if e, still := b.leadsTxnPartition(mp.Index); !still || e != epoch {
				c.Unload(mp.Index)
			}
		case !leads && isLoaded:
			c.Unload(mp.Index)
		}
	}
}

// leadsTxnPartition reports whether, by the metadata, this node leads
// __transaction_state partition index and has it open, and at which
// leader epoch.
func (b *Broker) leadsTxnPartition(index int32) (int32, bool) {
	t, ok := b.topicByName(txnStateTopic)
	if !ok || int(index) >= len(t.Partitions) || t.Partitions[index].Leader != b.cfg.NodeID {
		return 0, false
	}
	p := b.partition(txnStateTopic, index)
	if p == nil {
		return 0, false
	}
	return p.LeaderEpochIfLeading()
}

// loadTxnPartition replays partition index of __transaction_state into the
// coordinator under coordinator epoch epoch, and writes the markers of
// the transactions it finds ending (the previous coordinator may not have
// written them all).
func (b *Broker) loadTxnPartition(ctx context.Context, index, epoch int32, sum *txnLoadSummary) error {
	p := b.partition(txnStateTopic, index)
	if p == nil {
		return fmt.Errorf("%s-%d is not open here", txnStateTopic, index)
	}
	if p.Log().StartOffset() > 0 && p.Tiered() && !p.RemoteKnown() {
		p.LoadRemote()
		if err := p.CheckRemoteKnown(); err != nil {
			return fmt.Errorf("%s-%d: %w", txnStateTopic, index, err)
		}
	}
	var recs []txn.Record
	// To the log end, as for the offsets topic: a new leader's high
	// watermark may trail records it already has and will commit.
	end := p.Log().EndOffset()
	var buf []byte
	for offset := p.LogStartOffset(); offset < end; {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var err error
		buf, err = p.ReadAt(buf[:0], offset, end, 1<<20)
		if err != nil {
			return fmt.Errorf("read %s-%d at %d: %w", txnStateTopic, index, offset, err)
		}
		if len(buf) == 0 {
			break
		}
		var next int64
		recs, next, err = txn.ReadBatches(buf, recs)
		if err != nil {
			return fmt.Errorf("%s-%d at %d: %w", txnStateTopic, index, offset, err)
		}
		if next <= offset {
			break
		}
		offset = next
	}
	resend, err := b.txns.c.Load(index, epoch, recs)
	if err != nil {
		return err
	}
	b.log.Debug("loaded transaction state partition", "partition", index, "coordinator_epoch", epoch, "records", len(recs), "ending", len(resend))
	sum.partitions++
	sum.records += len(recs)
	sum.ending += len(resend)
	for _, m := range resend {
		b.sendMarkers(m)
	}
	return nil
}

// txnLoadSummary adds up the partitions one syncTxnCoordinator pass loaded.
type txnLoadSummary struct{ partitions, records, ending int }

// writeTxnTransition appends t's record to its __transaction_state
// partition, waits until it is committed, and applies it. A failure
// abandons t (the state stays as it was) and is the Kafka error the
// client gets: NOT_COORDINATOR when the partition moved, else
// COORDINATOR_NOT_AVAILABLE, both of which clients retry.
func (b *Broker) writeTxnTransition(ctx context.Context, t *txn.Transition) error {
	c := b.txns.c
	err := b.appendTxnRecord(ctx, t)
	if err != nil {
		c.Abandon(t)
		return err
	}
	if err := c.Complete(t); err != nil {
		return fmt.Errorf("%w: %v", kerr.NotCoordinator, err)
	}
	return nil
}

func (b *Broker) appendTxnRecord(ctx context.Context, t *txn.Transition) error {
	p := b.partition(txnStateTopic, t.Partition)
	if p == nil || !p.LeadsAt(t.CoordinatorEpoch) {
		return fmt.Errorf("%w: %s-%d moved", kerr.NotCoordinator, txnStateTopic, t.Partition)
	}
	info, epoch, err := p.Append(txn.EncodeBatch(t.Record(), time.Now().UnixMilli()))
	switch {
	case errors.Is(err, partition.ErrNotLeader), errors.Is(err, segment.ErrClosed):
		return fmt.Errorf("%w: %v", kerr.NotCoordinator, err)
	case err != nil:
		return fmt.Errorf("%w: append to %s-%d: %v", kerr.CoordinatorNotAvailable, txnStateTopic, t.Partition, err)
	case epoch != t.CoordinatorEpoch:
		return fmt.Errorf("%w: %s-%d moved to epoch %d", kerr.NotCoordinator, txnStateTopic, t.Partition, epoch)
	}
	wctx, cancel := context.WithTimeout(ctx, txnWriteTimeout)
	defer cancel()
	if err := p.WaitCommitted(wctx, info.LastOffset, epoch); err != nil {
		if errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, partition.ErrClosed) {
			return fmt.Errorf("%w: %v", kerr.NotCoordinator, err)
		}
		return fmt.Errorf("%w: %s-%d: %v", kerr.CoordinatorNotAvailable, txnStateTopic, t.Partition, err)
	}
	return nil
}

// finishTxnTransition writes t and, when it ends a transaction, starts
// writing its markers.
func (b *Broker) finishTxnTransition(ctx context.Context, t *txn.Transition) error {
	if err := b.writeTxnTransition(ctx, t); err != nil {
		return err
	}
	if m := t.Markers(); m != nil {
		b.sendMarkers(m)
	}
	return nil
}

// sendMarkers writes m's markers in the background, then records the
// transaction complete. Its goroutine stops when the broker closes or
// this node stops coordinating the transactional id at m's coordinator
// epoch (the next coordinator writes them again from the log).
func (b *Broker) sendMarkers(m *txn.Markers) {
	tx := b.txns
	tx.mu.Lock()
	key := fmt.Sprintf("%s/%d/%d", m.TransactionalID, m.CoordinatorEpoch, m.ProducerEpoch)
	if tx.sending[key] {
		tx.mu.Unlock()
		return
	}
	tx.sending[key] = true
	tx.mu.Unlock()
	release := sync.OnceFunc(func() {
		tx.mu.Lock()
		delete(tx.sending, key)
		tx.mu.Unlock()
	})
	b.goFunc(func() {
		defer release()
		b.writeAllMarkers(m, release)
	})
}

// completedSignal returns a channel closed when the next transaction
// completes.
func (tx *txns) completedSignal() <-chan struct{} {
	tx.completedMu.Lock()
	defer tx.completedMu.Unlock()
	return tx.completed
}

func (tx *txns) signalCompleted() {
	tx.completedMu.Lock()
	defer tx.completedMu.Unlock()
	close(tx.completed)
	tx.completed = make(chan struct{})
}

// completingWait bounds how long an add waits for the producer's previous
// transaction to complete before answering CONCURRENT_TRANSACTIONS. A
// producer that ends a transaction and begins the next at once finds its
// markers still being written; completing takes a fraction of a
// millisecond on one node, where the client's retry after that error
// would wait 20 ms (franz-go's and the Java client's backoff), half the
// throughput of a transactional producer.
const completingWait = 100 * time.Millisecond

// retryWhileCompleting calls add until it answers something else than
// CONCURRENT_TRANSACTIONS, or completingWait has passed, waking up when a
// transaction completes.
func (b *Broker) retryWhileCompleting(add func() txn.AddPartitionsResult) txn.AddPartitionsResult {
	deadline := time.NewTimer(completingWait)
	defer deadline.Stop()
	for {
		done := b.txns.completedSignal() // before add: no completion is missed
		res := add()
		if res.Err != kerr.ConcurrentTransactions {
			return res
		}
		select {
		case <-done:
		case <-deadline.C:
			return res
		case <-b.ctx.Done():
			return res
		}
	}
}

// stillCoordinates reports whether this node still decides for m's
// transactional id under m's coordinator epoch.
func (b *Broker) stillCoordinates(m *txn.Markers) bool {
	epoch, ok := b.txns.c.Loaded(b.txns.c.PartitionFor(m.TransactionalID))
	return ok && epoch == m.CoordinatorEpoch
}

// writeAllMarkers calls release before it records the transaction
// complete: from then on the producer may end its next transaction, under
// the same key when its epoch is not bumped (clients without KIP-890 part
// 2), and those markers must not be taken for these, already being sent.
func (b *Broker) writeAllMarkers(m *txn.Markers, release func()) {
	pending := slices.Clone(m.Partitions)
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if b.ctx.Err() != nil || !b.stillCoordinates(m) {
			return
		}
		if len(pending) > 0 {
			var fenced bool
			pending, fenced = b.writeMarkersOnce(m, pending)
			if fenced {
				// A newer coordinator wrote a marker for this producer:
				// this one's decisions are stale.
				b.log.Warn("transaction markers fenced", "transactional_id", m.TransactionalID, "coordinator_epoch", m.CoordinatorEpoch)
				return
			}
		}
		if len(pending) == 0 {
			t, err := b.txns.c.CompleteMarkers(m)
			if err != nil {
				return // stale or moved: nothing left for this node to do
			}
			release()
			ctx, cancel := context.WithTimeout(b.ctx, txnWriteTimeout)
			err = b.writeTxnTransition(ctx, t)
			cancel()
			if err == nil {
				b.txns.signalCompleted()
				return
			}
			b.log.Warn("complete transaction", "transactional_id", m.TransactionalID, "err", err)
		}
		if attempt > 0 && attempt%20 == 0 {
			b.log.Warn("transaction markers not written yet", "transactional_id", m.TransactionalID, "partitions", len(pending))
		}
		t := time.NewTimer(backoff)
		select {
		case <-b.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// writeMarkersOnce writes m's markers on parts once, each through its
// partition's leader: this node's own partitions directly, the others'
// with one WriteTxnMarkers per leader. It returns the partitions still to
// write (retriable failures), and whether a leader refused the marker as
// coming from a fenced coordinator. Partitions of deleted topics are
// dropped, as Kafka does.
func (b *Broker) writeMarkersOnce(m *txn.Markers, parts []txn.TopicPartition) (left []txn.TopicPartition, fenced bool) {
	st := b.meta.State()
	byLeader := make(map[int32][]txn.TopicPartition)
	for _, tp := range parts {
		t, ok := st.Topics[tp.Topic]
		if !ok || int(tp.Partition) >= len(t.Partitions) {
			b.log.Info("transaction marker for a deleted partition dropped", "transactional_id", m.TransactionalID, "topic", tp.Topic, "partition", tp.Partition)
			continue
		}
		leader := t.Partitions[tp.Partition].Leader
		if leader < 0 {
			left = append(left, tp)
			continue
		}
		byLeader[leader] = append(byLeader[leader], tp)
	}
	ctx, cancel := context.WithTimeout(b.ctx, txnWriteTimeout)
	defer cancel()
	type result struct {
		tp  txn.TopicPartition
		err error
	}
	results := make(chan result)
	var wg sync.WaitGroup
	for leader, tps := range byLeader {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var errs map[txn.TopicPartition]error
			if leader == b.cfg.NodeID {
				errs = b.writeMarkersLocal(ctx, m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch, tps)
			} else {
				errs = b.writeMarkersRemote(ctx, leader, m, tps)
			}
			for _, tp := range tps {
				results <- result{tp, errs[tp]}
			}
		}()
	}
	go func() { wg.Wait(); close(results) }()
	for r := range results {
		switch code := errorCode(r.err); {
		case r.err == nil:
		case code == kerr.TransactionCoordinatorFenced.Code || code == kerr.InvalidProducerEpoch.Code:
			fenced = true
		case code == kerr.UnknownTopicOrPartition.Code && !b.topicExists(r.tp.Topic):
		default:
			left = append(left, r.tp)
		}
	}
	return left, fenced
}

func (b *Broker) topicExists(name string) bool {
	_, ok := b.topicByName(name)
	return ok
}

// byTopic groups parts by topic, the topics in the order they first
// appear, as the transaction APIs list partitions.
func byTopic(parts []txn.TopicPartition) [][]txn.TopicPartition {
	var groups [][]txn.TopicPartition
	at := make(map[string]int)
	for _, tp := range parts {
		i, ok := at[tp.Topic]
		if !ok {
			i = len(groups)
			at[tp.Topic] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], tp)
	}
	return groups
}

// writeMarkersRemote sends one WriteTxnMarkers to broker leader for tps.
func (b *Broker) writeMarkersRemote(ctx context.Context, leader int32, m *txn.Markers, tps []txn.TopicPartition) map[txn.TopicPartition]error {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	wm := kmsg.NewWriteTxnMarkersRequestMarker()
	wm.ProducerID, wm.ProducerEpoch, wm.Committed, wm.CoordinatorEpoch = m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch
	for _, g := range byTopic(tps) {
		t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		t.Topic = g[0].Topic
		for _, tp := range g {
			t.Partitions = append(t.Partitions, tp.Partition)
		}
		wm.Topics = append(wm.Topics, t)
	}
	req.Markers = append(req.Markers, wm)
	errs := make(map[txn.TopicPartition]error, len(tps))
	kresp, err := b.peerRequest(ctx, leader, req)
	if err != nil {
		for _, tp := range tps {
			errs[tp] = fmt.Errorf("%w: write markers at broker %d: %v", kerr.RequestTimedOut, leader, err)
		}
		return errs
	}
	for _, rm := range kresp.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
					errs[txn.TopicPartition{Topic: rt.Topic, Partition: rp.Partition}] = e
				}
			}
		}
	}
	for _, tp := range tps {
		if _, ok := errs[tp]; !ok && !answered(kresp.(*kmsg.WriteTxnMarkersResponse), tp) {
			errs[tp] = fmt.Errorf("%w: broker %d did not answer for %s-%d", kerr.UnknownServerError, leader, tp.Topic, tp.Partition)
		}
	}
	return errs
}

func answered(resp *kmsg.WriteTxnMarkersResponse, tp txn.TopicPartition) bool {
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			if rt.Topic != tp.Topic {
				continue
			}
			for _, rp := range rt.Partitions {
				if rp.Partition == tp.Partition {
					return true
				}
			}
		}
	}
	return false
}

// writeMarkersLocal appends the marker of producer pid's transaction to
// each of tps that this node leads and waits until each is committed (a
// marker is written with acks=all, as Kafka's). A committed marker on a
// __consumer_offsets partition makes the group coordinator apply (or drop)
// the producer's pending offsets there.
func (b *Broker) writeMarkersLocal(ctx context.Context, pid int64, epoch int16, commit bool, coordinatorEpoch int32, tps []txn.TopicPartition) map[txn.TopicPartition]error {
	errs := make(map[txn.TopicPartition]error, len(tps))
	type appended struct {
		tp    txn.TopicPartition
		p     *partition.Partition
		last  int64
		epoch int32
	}
	var waits []appended
	for _, tp := range tps {
		p, err := b.led(tp.Topic, tp.Partition)
		if err != nil {
			errs[tp] = err
			continue
		}
		info, lepoch, err := p.AppendMarker(pid, epoch, commit, coordinatorEpoch)
		if err != nil {
			errs[tp] = fmt.Errorf("write marker to %s-%d: %w", tp.Topic, tp.Partition, err)
			continue
		}
		waits = append(waits, appended{tp, p, info.LastOffset, lepoch})
	}
	for _, w := range waits {
		if err := w.p.WaitCommitted(ctx, w.last, w.epoch); err != nil {
			errs[w.tp] = fmt.Errorf("marker on %s-%d: %w", w.tp.Topic, w.tp.Partition, err)
			continue
		}
		if w.tp.Topic == offsetsTopic && b.groups != nil {
			b.groups.CompleteTxn(w.tp.Partition, pid, commit)
		}
	}
	return errs
}

// txnLoop aborts transactions open past their timeout, expires idle
// transactional ids, and retries the loads of __transaction_state
// partitions that failed.
func (b *Broker) txnLoop() {
	tick := time.NewTicker(b.cfg.TransactionAbortInterval)
	defer tick.Stop()
	// Kafka checks expiry hourly (transactional.id.expiration check
	// interval); never less often than the expiry itself.
	expireEvery := min(time.Hour, b.cfg.TransactionalIDExpiration)
	lastExpire := time.Now()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
		}
		b.syncTxnCoordinator(b.ctx)
		for _, t := range b.txns.c.AbortTimedOut() {
			b.log.Info("aborting timed-out transaction", "transactional_id", t.To.TransactionalID, "producer_id", t.To.ProducerID)
			if err := b.finishTxnTransition(b.ctx, t); err != nil {
				b.log.Warn("abort timed-out transaction", "transactional_id", t.To.TransactionalID, "err", err)
			}
		}
		if time.Since(lastExpire) >= expireEvery {
			lastExpire = time.Now()
			for _, t := range b.txns.c.ExpireIDs() {
				if err := b.writeTxnTransition(b.ctx, t); err != nil {
					b.log.Warn("expire transactional id", "transactional_id", t.To.TransactionalID, "err", err)
				}
			}
		}
	}
}

// verifyTxnFunc is Broker.verifyTxn's signature.
type verifyTxnFunc func(b *Broker, ctx context.Context, txnID string, pid int64, epoch int16, parts []txn.TopicPartition) map[txn.TopicPartition]error

// testVerifyTxn, when a test sets it, answers in place of the transaction
// coordinator: tests of the partition and group sides write transactional
// data without running a transaction through the coordinator.
var testVerifyTxn atomic.Pointer[verifyTxnFunc]

// verifyTxn asks the transaction coordinator of txnID (on this node, or on
// another broker with a verification-only AddPartitionsToTxn, v4+) whether
// each of parts is in producer pid's ongoing transaction at epoch: KIP-890
// part 1, before a partition leader appends a transactional batch that
// would open a transaction on it. The answer has an entry for every
// partition of parts: nil when verified, else an error wrapping the Kafka
// code (TRANSACTION_ABORTABLE for a partition not in the transaction,
// PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING, NOT_COORDINATOR or
// COORDINATOR_NOT_AVAILABLE when the coordinator could not answer).
func (b *Broker) verifyTxn(ctx context.Context, txnID string, pid int64, epoch int16, parts []txn.TopicPartition) map[txn.TopicPartition]error {
	if f := testVerifyTxn.Load(); f != nil {
		return (*f)(b, ctx, txnID, pid, epoch, parts)
	}
	out := make(map[txn.TopicPartition]error, len(parts))
	all := func(err error) map[txn.TopicPartition]error {
		for _, p := range parts {
			out[p] = err
		}
		return out
	}
	if b.txns == nil {
		return all(kerr.CoordinatorNotAvailable)
	}
	var coord kmsg.FindCoordinatorResponseCoordinator
	if err := b.findCoordinator(txnID, 1, &coord); err != nil {
		return all(err)
	}
	if coord.NodeID == b.cfg.NodeID {
		res, err := b.txns.c.VerifyPartitions(txnID, pid, epoch, parts)
		if err != nil {
			return all(err)
		}
		for _, p := range parts {
			if e := res[p]; e != nil {
				out[p] = e
			} else {
				out[p] = nil
			}
		}
		return out
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 4
	rt := kmsg.NewAddPartitionsToTxnRequestTransaction()
	rt.TransactionalID, rt.ProducerID, rt.ProducerEpoch, rt.VerifyOnly = txnID, pid, epoch, true
	for _, g := range byTopic(parts) {
		t := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		t.Topic = g[0].Topic
		for _, tp := range g {
			t.Partitions = append(t.Partitions, tp.Partition)
		}
		rt.Topics = append(rt.Topics, t)
	}
	req.Transactions = append(req.Transactions, rt)
	kresp, err := b.peerRequest(ctx, coord.NodeID, req)
	if err != nil {
		return all(fmt.Errorf("%w: verify with the coordinator at broker %d: %v", kerr.CoordinatorNotAvailable, coord.NodeID, err))
	}
	resp := kresp.(*kmsg.AddPartitionsToTxnResponse)
	if e := kerr.ErrorForCode(resp.ErrorCode); e != nil {
		return all(e)
	}
	all(fmt.Errorf("%w: the coordinator did not answer for the partition", kerr.UnknownServerError))
	for _, tr := range resp.Transactions {
		for _, t := range tr.Topics {
			for _, p := range t.Partitions {
				tp := txn.TopicPartition{Topic: t.Topic, Partition: p.Partition}
				if _, asked := out[tp]; asked {
					out[tp] = kerr.ErrorForCode(p.ErrorCode)
				}
			}
		}
	}
	return out
}

// txnCollector reports the transaction coordinator's gauges at scrape
// time.
type txnCollector struct{ b *Broker }

var (
	txnStatesDesc = prometheus.NewDesc("strata_transactions",
		"Transactional ids this node coordinates, by state.", []string{"state"}, nil)
	txnOldestDesc = prometheus.NewDesc("strata_transaction_oldest_open_seconds",
		"How long the oldest open transaction this node coordinates has been open (0 when none is).", nil, nil)
)

func (tc *txnCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- txnStatesDesc
	ch <- txnOldestDesc
}

func (tc *txnCollector) Collect(ch chan<- prometheus.Metric) {
	s := tc.b.txns.c.Stats()
	for _, st := range []txn.State{txn.Empty, txn.Ongoing, txn.PrepareCommit, txn.PrepareAbort, txn.CompleteCommit, txn.CompleteAbort} {
		ch <- prometheus.MustNewConstMetric(txnStatesDesc, prometheus.GaugeValue, float64(s.ByState[st]), st.String())
	}
	oldest := 0.0
	if !s.OldestOngoing.IsZero() {
		oldest = max(time.Since(s.OldestOngoing).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(txnOldestDesc, prometheus.GaugeValue, oldest)
}
