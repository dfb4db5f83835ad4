package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
	"strata/broker/txn"
)

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

// writeAllMarkers calls release before it records the transaction
// complete: from then on the producer may end its next transaction, under
// the same key when its epoch is not bumped (clients without KIP-890 part
// 2), and those markers must not be taken for these, already being sent.
func (b *Broker) writeAllMarkers(m *txn.Markers, release func()) {
	pending := slices.Clone(m.Partitions)
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if b.ctx.Err() != nil || !b.txns.c.Coordinates(m) {
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
	_, ok := b.node.TopicByName(name)
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
