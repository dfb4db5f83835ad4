// Package tier owns the cold tier of a partition's log: it copies closed
// segments to the object store as one object each, publishes the
// partition's manifest after every upload (and only then lets local
// retention delete the local copy), serves reads below the local log start
// from the bucket through a bounded on-disk chunk cache with read-ahead, and
// collects orphaned objects after a grace period.
//
// The bucket layout is package format's (docs/bucket-format.md); the object
// store is package objstore's. Only the leader of a partition calls Upload;
// the broker decides who that is.
package tier
