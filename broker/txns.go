package broker

import (
	"context"

	"strata/broker/txn"
)

// verifyTxn asks the transaction coordinator of txnID (on this node, or on
// another broker with a verification-only AddPartitionsToTxn, v4+) whether
// each of parts is in producer pid's ongoing transaction at epoch: KIP-890
// part 1, before a partition leader appends a transactional batch that
// would open a transaction on it. The answer has an entry for every
// partition of parts: nil when verified, else an error wrapping the Kafka
// code (TRANSACTION_ABORTABLE for a partition not in the transaction,
// PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING, NOT_COORDINATOR or
// COORDINATOR_NOT_AVAILABLE when the coordinator could not answer).
//
// TODO(issue 14): contract only; the lead wires the coordinator.
func (b *Broker) verifyTxn(ctx context.Context, txnID string, pid int64, epoch int16, parts []txn.TopicPartition) map[txn.TopicPartition]error {
	out := make(map[txn.TopicPartition]error, len(parts))
	for _, p := range parts {
		out[p] = nil
	}
	return out
}
