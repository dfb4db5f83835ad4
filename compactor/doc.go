// Package compactor owns retention and log compaction on the cold tier:
// it advances a partition's remote log start offset in the bucket manifest
// by time and size, deletes the objects that fall below it after a grace
// period, and, for cleanup.policy=compact topics, rewrites remote segments
// so only the latest record per key survives, with memory bounded whatever
// the length of the history.
//
// It is built on the tier package's bucket format and object store; until
// tiered storage lands it has no code.
package compactor
