package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/partition"
	"strata/broker/txn"
	"strata/meta"
	"strata/segment"
)

// sendMarkers writes m's markers in the background, then records the
// transaction complete. Its goroutine stops when the broker closes or
// this node stops coordinating the transactional id at m's coordinator
// epoch (the next coordinator writes them again from the log).
func (n *Node) sendMarkers(m *txn.Markers) {
	tx := n.txns
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
	n.cfg.Go(func() {
		defer release()
		n.writeAllMarkers(m, release)
	})
}

// writeAllMarkers calls release before it records the transaction
// complete: from then on the producer may end its next transaction, under
// the same key when its epoch is not bumped (clients without KIP-890 part
// 2), and those markers must not be taken for these, already being sent.
func (n *Node) writeAllMarkers(m *txn.Markers, release func()) {
	pending := slices.Clone(m.Partitions)
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if n.ctx.Err() != nil || !n.txns.c.Coordinates(m) {
			return
		}
		if len(pending) > 0 {
			var fenced bool
			pending, fenced = n.writeMarkersOnce(m, pending)
			if fenced {
				// A newer coordinator wrote a marker for this producer:
				// this one's decisions are stale.
				n.log.Warn("transaction markers fenced", "transactional_id", m.TransactionalID, "coordinator_epoch", m.CoordinatorEpoch)
				return
			}
		}
		if len(pending) == 0 {
			t, err := n.txns.c.CompleteMarkers(m)
			if err != nil {
				return // stale or moved: nothing left for this node to do
			}
			release()
			ctx, cancel := context.WithTimeout(n.ctx, TxnWriteTimeout)
			err = n.WriteTxnTransition(ctx, t)
			cancel()
			if err == nil {
				n.txns.signalCompleted()
				return
			}
			n.log.Warn("complete transaction", "transactional_id", m.TransactionalID, "err", err)
		}
		if attempt > 0 && attempt%20 == 0 {
			n.log.Warn("transaction markers not written yet", "transactional_id", m.TransactionalID, "partitions", len(pending))
		}
		t := time.NewTimer(backoff)
		select {
		case <-n.ctx.Done():
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
func (n *Node) writeMarkersOnce(m *txn.Markers, parts []txn.TopicPartition) (left []txn.TopicPartition, fenced bool) {
	st := n.meta.State()
	byLeader := make(map[int32][]txn.TopicPartition)
	for _, tp := range parts {
		t, ok := st.Topics[tp.Topic]
		if !ok || int(tp.Partition) >= len(t.Partitions) {
			n.log.Info("transaction marker for a deleted partition dropped", "transactional_id", m.TransactionalID, "topic", tp.Topic, "partition", tp.Partition)
			continue
		}
		leader := t.Partitions[tp.Partition].Leader
		if leader < 0 {
			left = append(left, tp)
			continue
		}
		byLeader[leader] = append(byLeader[leader], tp)
	}
	ctx, cancel := context.WithTimeout(n.ctx, TxnWriteTimeout)
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
			if leader == n.cfg.NodeID {
				errs = n.WriteMarkersLocal(ctx, m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch, tps)
			} else {
				errs = n.cfg.WriteMarkers(ctx, leader, m, tps)
			}
			for _, tp := range tps {
				results <- result{tp, errs[tp]}
			}
		}()
	}
	go func() { wg.Wait(); close(results) }()
	for r := range results {
		switch {
		case r.err == nil:
		case markerFenced(r.err):
			fenced = true
		case unknownPartition(r.err) && !n.topicExists(r.tp.Topic):
		default:
			left = append(left, r.tp)
		}
	}
	return left, fenced
}

func (n *Node) topicExists(name string) bool {
	_, ok := n.TopicByName(name)
	return ok
}

// WriteMarkersLocal appends the marker of producer pid's transaction to
// each of tps that this node leads and waits until each is committed (a
// marker is written with acks=all, as Kafka's). A committed marker on a
// __consumer_offsets partition makes the group coordinator apply (or drop)
// the producer's pending offsets there.
func (n *Node) WriteMarkersLocal(ctx context.Context, pid int64, epoch int16, commit bool, coordinatorEpoch int32, tps []txn.TopicPartition) map[txn.TopicPartition]error {
	errs := make(map[txn.TopicPartition]error, len(tps))
	type appended struct {
		tp    txn.TopicPartition
		p     *partition.Partition
		last  int64
		epoch int32
	}
	var waits []appended
	for _, tp := range tps {
		p, err := n.Led(tp.Topic, tp.Partition)
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
		if w.tp.Topic == OffsetsTopic && n.groups != nil {
			n.groups.CompleteTxn(w.tp.Partition, pid, commit)
		}
	}
	return errs
}

// markerFenced reports whether a marker write failed because a newer
// coordinator or producer epoch wrote for the producer: on this node the
// log's errors, from another the Kafka codes they map to.
func markerFenced(err error) bool {
	for _, t := range []error{kerr.TransactionCoordinatorFenced, segment.ErrTransactionCoordinatorFenced,
		kerr.InvalidProducerEpoch, segment.ErrInvalidProducerEpoch} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// unknownPartition reports whether a marker write failed because the
// partition is unknown where it was sent.
func unknownPartition(err error) bool {
	for _, t := range []error{kerr.UnknownTopicOrPartition, meta.ErrUnknownTopic, meta.ErrUnknownTopicOrPartition} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
