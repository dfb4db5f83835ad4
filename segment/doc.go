// Package segment owns a partition's local log: a directory of Kafka-style
// segments holding v2 record batches byte-for-byte as producers sent them,
// with sparse offset and time indexes, per-segment snapshots of idempotent
// producer state, and the leader-epoch history. It validates what is
// appended, assigns offsets, serves reads straight from the files, rolls and
// deletes segments, and recovers a torn tail after a crash.
//
// The on-disk format and the crash-recovery procedure are specified in
// docs/format.md; the code follows that document.
//
// Concurrency: a Log has one writer at a time (Append, AppendPrepared,
// AppendReplica, TruncateTo, TruncateFullyAndStartAt, Maintain, SetConfig,
// Sync, Close and Delete serialize on a mutex) and any number of
// concurrent readers. Prepare, which validates an append's batches, takes
// no lock and may run alongside all of them. Readers take a read lock only
// to find a segment and the extent of its published bytes, then read with
// pread, so a slow read never holds up an append and an append never
// exposes a half-written batch. A reader pins the segment it reads, and
// TruncateTo waits for those pins before it shortens a file, so no reader
// reads past a cut.
//
// A follower's log is filled with AppendReplica and cut back with TruncateTo
// or TruncateFullyAndStartAt (docs/format.md §11).
package segment
