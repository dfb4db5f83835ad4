// Package group is the classic consumer-group coordinator: groups, members,
// generations, the join/sync barrier, session and rebalance timeouts, static
// membership (KIP-345) and committed offsets. It speaks in kmsg request and
// response types but owns no network and no storage: the broker hands it
// requests, and an OffsetLog (the partitions of __consumer_offsets) stores
// what it writes.
//
// # Storage
//
// Every commit and every settled group generation is written to the group's
// __consumer_offsets partition as records in Kafka's own formats
// (kmsg.OffsetCommitKey/Value, kmsg.GroupMetadataKey/Value) in an ordinary
// uncompressed v2 batch, and the in-memory state changes only after the
// OffsetLog reports the batch committed. Deletions are tombstones. Load
// replays a partition from its start to rebuild its groups, so the log alone
// is the state: offsets survive restarts and follow partition leadership.
//
// # Concurrency
//
// Request methods may be called from any number of goroutines; JoinGroup and
// SyncGroup block their caller until the barrier completes, the group's
// state moves on, ctx ends or Close is called. Timers run on the injected
// Clock.
//
// Locks, in the only order in which they may nest:
//
//	group.mu → Coordinator.mu
//
// Coordinator.mu guards the partition table and the group map and is held
// only for lookups and inserts; it is never held while taking a group.mu.
// group.mu guards everything about one group, including its offsets; it is
// held across OffsetLog.Append, so a group's writes are ordered, and an
// OffsetLog must never call back into the Coordinator. Functions whose name
// ends in Locked need group.mu held.
package group
