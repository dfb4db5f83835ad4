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
// # Transactions
//
// TxnOffsetCommit (KIP-98, with KIP-447's generation and member checks)
// writes a transaction's offsets as one transactional batch of its
// producer. They are pending, per producer, and OffsetFetch does not show
// them (with RequireStable it answers UNSTABLE_OFFSET_COMMIT) until the
// broker, once the transaction's marker is committed to the partition,
// calls CompleteTxn: a commit applies each offset unless a plain commit
// was written after it, an abort drops them. The loader does the same
// from the markers in the log, and leaves a transaction still open at the
// end pending. Retention keeps a partition with a pending offset, and a
// tombstone (a deleted group, OffsetDelete) drops the pending offsets it
// covers, so a later commit cannot bring them back.
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
