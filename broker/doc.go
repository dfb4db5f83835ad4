// Package broker owns the Kafka side of a Strata node: the protocol server
// (one file per API key, named after the key as franz-go's kfake does), the
// partitions this node hosts and their high watermarks, idempotent-producer
// id allocation, and the node's metrics and health endpoints.
//
// The broker never holds metadata of its own: topics, partitions and leaders
// live in the meta package's Raft state machine, and the broker reconciles
// the partitions it hosts with that state whenever it changes. Records never
// pass through Raft; they go straight to the segment package's log.
//
// Errors from lower layers are mapped to Kafka error codes here, in
// errors.go, and nowhere else.
package broker
