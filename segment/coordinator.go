package segment

// appendOrigin says who wrote a batch, as Kafka's AppendOrigin: it decides
// which producer-state checks apply.
type appendOrigin int8

const (
	// originClient is a producer's batch: epoch, sequence and duplicate
	// checks.
	originClient appendOrigin = iota
	// originCoordinator is a batch the broker's group coordinator wrote
	// for a transactional offset commit (TxnOffsetCommit).
	originCoordinator
)

// FromCoordinator marks b as written by the broker's own group coordinator
// (Kafka's AppendOrigin.COORDINATOR). The coordinator writes each
// transactional offset commit of a producer as a new batch with base
// sequence 0, so its batches get neither the sequence check nor duplicate
// detection; the producer epoch is still checked, so a fenced producer's
// commit is refused with ErrInvalidProducerEpoch, and the batches open and
// close transactions like any other. Call it before AppendPrepared.
func (b *Batches) FromCoordinator() { b.origin = originCoordinator }
