package segment

import "slices"

// Producer-state queries for the partition leader: whether a transactional
// produce needs the coordinator's word (KIP-890 part 1), and what
// DescribeProducers reports.

// ProducerState is one producer's state in the log, after Kafka's
// ProducerStateEntry as DescribeProducers shows it.
type ProducerState struct {
	ProducerID int64
	Epoch      int16
	// LastSequence is the last sequence of the producer's last data batch
	// at Epoch, -1 when it has none (only markers since the epoch began).
	LastSequence int32
	// LastTimestamp is when the producer last appended (Unix ms, the log's
	// clock): what its expiry goes by, where Kafka keeps the last batch's
	// record timestamp.
	LastTimestamp int64
	// CoordinatorEpoch is the coordinator epoch of the producer's last
	// transaction marker, 0 before any.
	CoordinatorEpoch int32
	// TxnStartOffset is the first offset of the producer's ongoing
	// transaction, -1 when none is ongoing.
	TxnStartOffset int64
}

// Producers returns the state of every producer the log knows, by
// producer id.
func (l *Log) Producers() []ProducerState {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	out := make([]ProducerState, 0, len(l.w.producers))
	for id, e := range l.w.producers {
		s := ProducerState{
			ProducerID:       id,
			Epoch:            e.epoch,
			LastSequence:     -1,
			LastTimestamp:    e.lastWrite,
			CoordinatorEpoch: e.coordEpoch,
			TxnStartOffset:   -1,
		}
		if seq, ok := e.lastSeq(); ok {
			s.LastSequence = seq
		}
		if e.txnOpen {
			s.TxnStartOffset = e.txnFirst
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b ProducerState) int {
		switch {
		case a.ProducerID < b.ProducerID:
			return -1
		case a.ProducerID > b.ProducerID:
			return 1
		}
		return 0
	})
	return out
}

// OngoingTxn reports whether producerID has a transaction ongoing in the
// log at epoch. A transactional batch that would open one instead must be
// verified with the transaction coordinator first: a batch of a
// transaction the coordinator has already ended would otherwise open a
// transaction nobody will ever end.
func (l *Log) OngoingTxn(producerID int64, epoch int16) bool {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	e, ok := l.w.producers[producerID]
	return ok && e.txnOpen && e.epoch == epoch
}
