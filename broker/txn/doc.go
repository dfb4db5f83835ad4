// Package txn is the transaction coordinator's state machine: per
// transactional id, the producer id and epoch, the open transaction's
// partitions and its state (Kafka's TransactionMetadata), and the decisions
// of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and the
// timeout abort, with the Kafka error code each one answers and the
// transaction markers it asks for.
//
// It owns no network and no storage, and starts no goroutine. A decision
// that changes state returns a Transition: the caller writes its record to
// the transactional id's partition of __transaction_state and then calls
// Complete (or Abandon if the write failed); until then the id refuses
// other changes with CONCURRENT_TRANSACTIONS, as Kafka's pending state
// does. Markers are returned as data; the caller writes them to the
// partition leaders and reports back with CompleteMarkers. Time comes from
// an injected Clock and new producer ids from an injected allocator, so a
// test drives every rule without a broker.
//
// records.go encodes the records of __transaction_state (Kafka's
// TransactionLogKey and TransactionLogValue) and batch.go the record
// batches that carry them in the log: EncodeBatch for the record of a
// Transition, ReadBatches for a partition's log read back when it loads.
//
// # Concurrency
//
// Methods may be called from any goroutine; one mutex, Coordinator.mu,
// guards all state and is held for whole decisions. It calls out only to
// the Clock and the ProducerIDs allocator, which must not call back into
// the Coordinator. Writes to __transaction_state happen outside it, between
// a decision and its Complete.
package txn
