package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/partition"
	"strata/broker/txn"
	"strata/meta"
	"strata/segment"
)

// TxnStateTopic holds the transaction coordinator's state: one record per
// change of a transactional id (broker/txn/records.go).
const TxnStateTopic = "__transaction_state"

// TxnStateTopicConfigs are the transaction state topic's settings: Kafka's
// (compacted, 100 MiB segments), and tiered with the same local bounds as
// __consumer_offsets so that the bucket holds a cluster's transaction
// state too.
var TxnStateTopicConfigs = map[string]string{
	"cleanup.policy":        "compact",
	"segment.bytes":         "104857600",
	"remote.storage.enable": "true",
	"local.retention.bytes": "209715200",
	"local.retention.ms":    "86400000",
}

// TxnWriteTimeout bounds one write to __transaction_state, replication
// included (Kafka's request.timeout.ms for the coordinator's appends).
const TxnWriteTimeout = 10 * time.Second

// txns is the broker's side of the transaction coordinator: which
// __transaction_state partitions it has loaded, and the goroutines writing
// markers.
type txns struct {
	c *txn.Coordinator

	// createMu serialises the creation of __transaction_state on a single
	// node.
	createMu sync.Mutex
	// syncMu serialises SyncTxns: the reconcile loop and txnLoop
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

// StartTxns starts the transaction coordinator. A single node creates
// __transaction_state the first time a transactional producer looks for its
// coordinator (EnsureTxnTopic), as Kafka does, so that a node that never
// sees a transaction never pays for 50 more partitions; in a cluster the
// controller creates it once __consumer_offsets exists, with the same
// replication factor (txnTopicLoop). Until it exists FindCoordinator
// answers COORDINATOR_NOT_AVAILABLE for transactional ids, which clients
// retry.
func (n *Node) StartTxns(ctx context.Context) (*txn.Coordinator, error) {
	partitions := n.cfg.Txns.Partitions
	if t, ok := n.TopicByName(TxnStateTopic); ok {
		// As for the offsets topic: the existing count wins, or every
		// transactional id would move.
		partitions = int32(len(t.Partitions))
	} else if n.Clustered() {
		n.cfg.Go(n.txnTopicLoop)
	}
	offsetsPartitions := n.cfg.Groups.Partitions
	if t, ok := n.TopicByName(OffsetsTopic); ok {
		offsetsPartitions = int32(len(t.Partitions))
	}
	tc := n.cfg.Txns
	tc.Partitions, tc.OffsetsPartitions, tc.ProducerIDs = partitions, offsetsPartitions, txnProducerIDs{n}
	c, err := txn.New(tc)
	if err != nil {
		return nil, err
	}
	n.txns = &txns{c: c, sending: make(map[string]bool), completed: make(chan struct{})}
	n.SyncTxns(ctx)
	n.cfg.Go(n.txnLoop)
	return c, nil
}

// EnsureTxnTopic creates __transaction_state on a single node if it does
// not exist yet, and loads its partitions. In a cluster the controller
// creates it (txnTopicLoop), and until then the answer is
// COORDINATOR_NOT_AVAILABLE.
func (n *Node) EnsureTxnTopic(ctx context.Context) error {
	if _, ok := n.TopicByName(TxnStateTopic); ok {
		return nil
	}
	if n.Clustered() {
		return fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, TxnStateTopic)
	}
	n.txns.createMu.Lock()
	defer n.txns.createMu.Unlock()
	if _, ok := n.TopicByName(TxnStateTopic); ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := n.createTxnTopic(ctx, 1); err != nil {
		return fmt.Errorf("%w: %v", kerr.CoordinatorNotAvailable, err)
	}
	n.SyncTxns(ctx)
	return nil
}

func (n *Node) createTxnTopic(ctx context.Context, rf int16) (*meta.Topic, error) {
	created, err := n.meta.CreateTopic(ctx, meta.TopicSpec{
		Name:              TxnStateTopic,
		Partitions:        n.cfg.Txns.Partitions,
		ReplicationFactor: rf,
		Configs:           maps.Clone(TxnStateTopicConfigs),
		Internal:          true,
	})
	if err != nil && !errors.Is(err, meta.ErrTopicExists) {
		return nil, fmt.Errorf("create %s: %w", TxnStateTopic, err)
	}
	if err := n.Reconcile(); err != nil {
		return nil, err
	}
	t, ok := n.TopicByName(TxnStateTopic)
	if !ok {
		t = &created
	}
	n.log.Info("created transaction state topic", "partitions", len(t.Partitions), "replication_factor", rf)
	return t, nil
}

// txnTopicLoop creates __transaction_state in a cluster, on whichever node
// is the controller, once __consumer_offsets exists: offsetsTopicLoop has
// then waited for the brokers to register, and the transaction state gets
// the same replication factor.
func (n *Node) txnTopicLoop() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, ok := n.TopicByName(TxnStateTopic); ok {
			return
		}
		if t, ok := n.TopicByName(OffsetsTopic); ok && n.meta.IsLeader() && len(t.Partitions) > 0 {
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			_, err := n.createTxnTopic(ctx, int16(len(t.Partitions[0].Replicas)))
			cancel()
			if err != nil && n.ctx.Err() == nil {
				n.log.Warn("create transaction state topic", "err", err)
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// txnProducerIDs gives the coordinator producer ids from the broker's
// reserved blocks.
type txnProducerIDs struct{ n *Node }

func (a txnProducerIDs) NextProducerID(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return a.n.AllocateProducerID(ctx)
}

// SyncTxns loads the __transaction_state partitions this node
// leads, again when their leader epoch moved (the coordinator epoch is the
// partition's leader epoch), and unloads those it no longer leads. It runs
// on metadata changes and on txnLoop's tick, which retries failed loads.
func (n *Node) SyncTxns(ctx context.Context) {
	if n.txns == nil {
		return
	}
	t, ok := n.TopicByName(TxnStateTopic)
	if !ok {
		return
	}
	n.txns.syncMu.Lock()
	defer n.txns.syncMu.Unlock()
	c := n.txns.c
	// One line for all the partitions loaded in a pass: a node takes up a
	// third of the 50 at start and after a failover, each with nothing to
	// report but that it is loaded.
	var sum txnLoadSummary
	defer func() {
		if sum.partitions > 0 {
			n.log.Info("loaded transaction state partitions", "partitions", sum.partitions, "records", sum.records, "ending", sum.ending)
		}
	}()
	for _, mp := range t.Partitions {
		epoch, leads := n.leadsTxnPartition(mp.Index)
		loaded, isLoaded := c.Loaded(mp.Index)
		switch {
		case leads && (!isLoaded || loaded != epoch):
			if err := n.loadTxnPartition(ctx, mp.Index, epoch, &sum); errors.Is(err, txn.ErrLoaded) {
				// Loaded meanwhile at this epoch or a newer one: keep it.
			} else if err != nil {
				n.log.Error("load transaction state partition", "partition", mp.Index, "err", err)
				c.Unload(mp.Index)
			} else if e, still := n.leadsTxnPartition(mp.Index); !still || e != epoch {
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
func (n *Node) leadsTxnPartition(index int32) (int32, bool) {
	t, ok := n.TopicByName(TxnStateTopic)
	if !ok || int(index) >= len(t.Partitions) || t.Partitions[index].Leader != n.cfg.NodeID {
		return 0, false
	}
	p := n.Partition(TxnStateTopic, index)
	if p == nil {
		return 0, false
	}
	return p.LeaderEpochIfLeading()
}

// loadTxnPartition replays partition index of __transaction_state into the
// coordinator under coordinator epoch epoch, and writes the markers of
// the transactions it finds ending (the previous coordinator may not have
// written them all).
func (n *Node) loadTxnPartition(ctx context.Context, index, epoch int32, sum *txnLoadSummary) error {
	p := n.Partition(TxnStateTopic, index)
	if p == nil {
		return fmt.Errorf("%s-%d is not open here", TxnStateTopic, index)
	}
	if err := p.HistoryKnown(); err != nil {
		return fmt.Errorf("%s-%d: %w", TxnStateTopic, index, err)
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
			return fmt.Errorf("read %s-%d at %d: %w", TxnStateTopic, index, offset, err)
		}
		if len(buf) == 0 {
			break
		}
		var next int64
		recs, next, err = txn.ReadBatches(buf, recs)
		if err != nil {
			return fmt.Errorf("%s-%d at %d: %w", TxnStateTopic, index, offset, err)
		}
		if next <= offset {
			break
		}
		offset = next
	}
	resend, err := n.txns.c.Load(index, epoch, recs)
	if err != nil {
		return err
	}
	n.log.Debug("loaded transaction state partition", "partition", index, "coordinator_epoch", epoch, "records", len(recs), "ending", len(resend))
	sum.partitions++
	sum.records += len(recs)
	sum.ending += len(resend)
	for _, m := range resend {
		n.sendMarkers(m)
	}
	return nil
}

// txnLoadSummary adds up the partitions one SyncTxns pass loaded.
type txnLoadSummary struct{ partitions, records, ending int }

// WriteTxnTransition appends t's record to its __transaction_state
// partition, waits until it is committed, and applies it. A failure
// abandons t (the state stays as it was) and is the Kafka error the
// client gets: NOT_COORDINATOR when the partition moved, else
// COORDINATOR_NOT_AVAILABLE, both of which clients retry.
func (n *Node) WriteTxnTransition(ctx context.Context, t *txn.Transition) error {
	c := n.txns.c
	err := n.appendTxnRecord(ctx, t)
	if err != nil {
		c.Abandon(t)
		return err
	}
	if err := c.Complete(t); err != nil {
		return fmt.Errorf("%w: %v", kerr.NotCoordinator, err)
	}
	return nil
}

func (n *Node) appendTxnRecord(ctx context.Context, t *txn.Transition) error {
	p := n.Partition(TxnStateTopic, t.Partition)
	if p == nil || !p.LeadsAt(t.CoordinatorEpoch) {
		return fmt.Errorf("%w: %s-%d moved", kerr.NotCoordinator, TxnStateTopic, t.Partition)
	}
	info, epoch, err := p.Append(txn.EncodeBatch(t.Record(), time.Now().UnixMilli()))
	switch {
	case errors.Is(err, partition.ErrNotLeader), errors.Is(err, segment.ErrClosed):
		return fmt.Errorf("%w: %v", kerr.NotCoordinator, err)
	case err != nil:
		return fmt.Errorf("%w: append to %s-%d: %v", kerr.CoordinatorNotAvailable, TxnStateTopic, t.Partition, err)
	case epoch != t.CoordinatorEpoch:
		return fmt.Errorf("%w: %s-%d moved to epoch %d", kerr.NotCoordinator, TxnStateTopic, t.Partition, epoch)
	}
	wctx, cancel := context.WithTimeout(ctx, TxnWriteTimeout)
	defer cancel()
	if err := p.WaitCommitted(wctx, info.LastOffset, epoch); err != nil {
		if errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, partition.ErrClosed) {
			return fmt.Errorf("%w: %v", kerr.NotCoordinator, err)
		}
		return fmt.Errorf("%w: %s-%d: %v", kerr.CoordinatorNotAvailable, TxnStateTopic, t.Partition, err)
	}
	return nil
}

// FinishTxnTransition writes t and, when it ends a transaction, starts
// writing its markers.
func (n *Node) FinishTxnTransition(ctx context.Context, t *txn.Transition) error {
	if err := n.WriteTxnTransition(ctx, t); err != nil {
		return err
	}
	if m := t.Markers(); m != nil {
		n.sendMarkers(m)
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

// RetryWhileCompleting calls add until it answers something else than
// CONCURRENT_TRANSACTIONS, or completingWait has passed, waking up when a
// transaction completes.
func (n *Node) RetryWhileCompleting(add func() txn.AddPartitionsResult) txn.AddPartitionsResult {
	deadline := time.NewTimer(completingWait)
	defer deadline.Stop()
	for {
		done := n.txns.completedSignal() // before add: no completion is missed
		res := add()
		if res.Err != kerr.ConcurrentTransactions {
			return res
		}
		select {
		case <-done:
		case <-deadline.C:
			return res
		case <-n.ctx.Done():
			return res
		}
	}
}

// txnLoop aborts transactions open past their timeout, expires idle
// transactional ids, and retries the loads of __transaction_state
// partitions that failed.
func (n *Node) txnLoop() {
	tick := time.NewTicker(n.cfg.TxnAbortInterval)
	defer tick.Stop()
	// Kafka checks expiry hourly (transactional.id.expiration check
	// interval); never less often than the expiry itself.
	expireEvery := min(time.Hour, n.cfg.Txns.IDExpiration)
	lastExpire := time.Now()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		n.SyncTxns(n.ctx)
		for _, t := range n.txns.c.AbortTimedOut() {
			n.log.Info("aborting timed-out transaction", "transactional_id", t.To.TransactionalID, "producer_id", t.To.ProducerID)
			if err := n.FinishTxnTransition(n.ctx, t); err != nil {
				n.log.Warn("abort timed-out transaction", "transactional_id", t.To.TransactionalID, "err", err)
			}
		}
		if time.Since(lastExpire) >= expireEvery {
			lastExpire = time.Now()
			for _, t := range n.txns.c.ExpireIDs() {
				if err := n.WriteTxnTransition(n.ctx, t); err != nil {
					n.log.Warn("expire transactional id", "transactional_id", t.To.TransactionalID, "err", err)
				}
			}
		}
	}
}
