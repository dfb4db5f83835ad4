package compactor

import (
	"cmp"
	"slices"

	"strata/segment"
)

// txns follows transactions through the batches of a pass, in offset
// order, as Kafka's CleanedTransactionMetadata does. A pass never reaches
// the first unstable offset, so every transaction it meets is decided:
// the aborted ones are known ahead from the aborted-transaction index,
// and the others are committed.
type txns struct {
	// pending holds the aborted transactions not reached yet, by first
	// offset.
	pending []segment.AbortedTxn
	// aborted is the aborted transaction each producer is in, from its
	// first offset until its ABORT marker.
	aborted map[int64]*abortedTxn
	// committed marks the producers with a batch of a committed
	// transaction whose COMMIT marker is still to come.
	committed map[int64]bool
}

// abortedTxn is an aborted transaction being read; seen says the pass met
// a batch of it.
type abortedTxn struct{ seen bool }

// newTxns follows the transactions of a pass that starts at from, given
// the aborted transactions overlapping its range.
func newTxns(aborted []segment.AbortedTxn, from int64) *txns {
	t := &txns{aborted: map[int64]*abortedTxn{}, committed: map[int64]bool{}}
	for _, a := range aborted {
		// One that ended before the pass would otherwise void the
		// producer's batches up to its next ABORT marker.
		if a.LastOffset >= from {
			t.pending = append(t.pending, a)
		}
	}
	slices.SortStableFunc(t.pending, func(a, b segment.AbortedTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return t
}

// reach starts the aborted transactions that begin at or before offset.
func (t *txns) reach(offset int64) {
	for len(t.pending) > 0 && t.pending[0].FirstOffset <= offset {
		a := t.pending[0]
		t.pending = t.pending[1:]
		if _, ok := t.aborted[a.ProducerID]; !ok {
			t.aborted[a.ProducerID] = &abortedTxn{}
		}
	}
}

// onBatch takes a data batch and reports whether it belongs to an aborted
// transaction: its records all go, whatever their keys, and none of them
// is a key's latest value.
func (t *txns) onBatch(h *segment.BatchHeader) bool {
	t.reach(h.LastOffset())
	if !h.IsTransactional() {
		return false
	}
	if a, ok := t.aborted[h.ProducerID]; ok {
		a.seen = true
		return true
	}
	t.committed[h.ProducerID] = true
	return false
}

// onControl takes a control batch, m its marker (ok false when the batch
// is empty), and reports whether the batch may go once its delete horizon
// has passed: an ABORT marker when the pass met no batch of its
// transaction, a COMMIT marker likewise, an empty control batch always
// (an earlier pass emptied it).
func (t *txns) onControl(h *segment.BatchHeader, m segment.TxnMarker, ok bool) bool {
	t.reach(h.LastOffset())
	if !ok {
		return true
	}
	if m.Commit {
		met := t.committed[h.ProducerID]
		delete(t.committed, h.ProducerID)
		return !met
	}
	a, ongoing := t.aborted[h.ProducerID]
	delete(t.aborted, h.ProducerID)
	return !ongoing || !a.seen
}
