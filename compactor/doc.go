// Package compactor owns log compaction: for cleanup.policy=compact
// topics it rewrites the closed segments of each local log, and the
// segment objects of each tiered partition in the bucket, so that only
// the latest record of each key survives, with Kafka's guarantees
// (offsets unchanged, tombstones kept for delete.retention.ms, the
// compaction lags and dirty ratio deciding what is cleanable and when).
//
// Its memory is a fixed budget whatever the length of a history: the key
// map stores hashes in a table of that size, and a history with more keys
// than fit is compacted in several passes. The segment package swaps
// local segments crash-safely and the tier package replaces objects in
// the manifest in one step; this package decides what to keep.
// docs/compaction.md describes the algorithm.
package compactor
