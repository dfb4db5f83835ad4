package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

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
	if t, ok := b.node.TopicByName(txnStateTopic); ok {
		// As for the offsets topic: the existing count wins, or every
		// transactional id would move.
		partitions = int32(len(t.Partitions))
	} else if b.node.Clustered() {
		b.goFunc(b.txnTopicLoop)
	}
	offsetsPartitions := b.cfg.OffsetsPartitions
	if t, ok := b.node.TopicByName(offsetsTopic); ok {
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
	if _, ok := b.node.TopicByName(txnStateTopic); ok {
		return nil
	}
	if b.node.Clustered() {
		return fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, txnStateTopic)
	}
	b.txns.createMu.Lock()
	defer b.txns.createMu.Unlock()
	if _, ok := b.node.TopicByName(txnStateTopic); ok {
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
	if err := b.node.Reconcile(); err != nil {
		return nil, err
	}
	t, ok := b.node.TopicByName(txnStateTopic)
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
		if _, ok := b.node.TopicByName(txnStateTopic); ok {
			return
		}
		if t, ok := b.node.TopicByName(offsetsTopic); ok && b.meta.IsLeader() && len(t.Partitions) > 0 {
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
	t, ok := b.node.TopicByName(txnStateTopic)
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
	t, ok := b.node.TopicByName(txnStateTopic)
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
