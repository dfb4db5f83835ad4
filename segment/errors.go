package segment

import "errors"

// Errors returned by this package. Callers match them with errors.Is; the
// returned errors wrap them with context. Each maps to one Kafka error code
// at the protocol edge (noted in parentheses).
var (
	// ErrCorruptMessage: bad CRC, inconsistent lengths, bad record encoding
	// or a record count that does not match the records (CORRUPT_MESSAGE).
	ErrCorruptMessage = errors.New("segment: corrupt message")
	// ErrInvalidRecord: well-formed but invalid per the protocol, e.g. an
	// empty append, offset deltas that are not 0..n-1, or
	// lastOffsetDelta != recordCount-1 (INVALID_RECORD).
	ErrInvalidRecord = errors.New("segment: invalid record")
	// ErrUnsupportedMagic: a batch with magic other than 2
	// (UNSUPPORTED_FOR_MESSAGE_FORMAT).
	ErrUnsupportedMagic = errors.New("segment: unsupported message format (magic)")
	// ErrMessageTooLarge: a batch larger than Config.MaxBatchBytes
	// (MESSAGE_TOO_LARGE).
	ErrMessageTooLarge = errors.New("segment: message too large")
	// ErrInvalidTimestamp: a record timestamp outside the configured bounds
	// (INVALID_TIMESTAMP).
	ErrInvalidTimestamp = errors.New("segment: invalid timestamp")
	// ErrOutOfOrderSequence: an idempotent batch whose first sequence does
	// not follow the producer's last one (OUT_OF_ORDER_SEQUENCE_NUMBER).
	ErrOutOfOrderSequence = errors.New("segment: out of order sequence number")
	// ErrInvalidProducerEpoch: an idempotent batch from an older producer
	// epoch than the log has seen (INVALID_PRODUCER_EPOCH).
	ErrInvalidProducerEpoch = errors.New("segment: invalid producer epoch")
	// ErrInvalidTxnState: a non-transactional batch from a producer with
	// a transaction ongoing in the partition (INVALID_TXN_STATE).
	ErrInvalidTxnState = errors.New("segment: invalid transaction state")
	// ErrTransactionCoordinatorFenced: a transaction marker from an older
	// coordinator epoch than the producer's last marker
	// (TRANSACTION_COORDINATOR_FENCED).
	ErrTransactionCoordinatorFenced = errors.New("segment: transaction coordinator fenced")
	// ErrOffsetOutOfRange: a read below the log start offset or above the
	// log end offset (OFFSET_OUT_OF_RANGE).
	ErrOffsetOutOfRange = errors.New("segment: offset out of range")
	// ErrCorruptSegment: stored bytes failed their checksum or structure
	// check while being read (KAFKA_STORAGE_ERROR).
	ErrCorruptSegment = errors.New("segment: corrupt segment data")
	// ErrOffsetMismatch: replicated batches that do not start at the log
	// end offset or do not follow each other (AppendReplica). Only a
	// replica fetcher meets it, never a client: it means the follower's
	// log and its fetch position disagree, and the fetcher truncates or
	// fetches again.
	ErrOffsetMismatch = errors.New("segment: replicated batch offsets do not continue the log")
	// ErrClosed: the Log has been closed.
	ErrClosed = errors.New("segment: log closed")
)
