// Package partition owns one partition this node hosts (Partition): its
// segment.Log; the high watermark and the last stable offset; appends,
// the KIP-890 verification guards and the waiters of acks=all produces
// and long-poll fetches (partition.go); its role (leader with a
// replica.Leader, follower, none), its leader and partition epochs, the
// wait for commit and the ISR changes a leader asks for (role.go); the
// read path across the bucket and the local log, and the upload pass that
// copies closed segments to the bucket, then applies the whole log's
// retention and merges small objects (bucket.go); ListOffsets' answers
// and DeleteRecords (offsets.go); and Produce and Fetch, which serve one
// request's partitions together (produce.go, fetch.go).
//
// What it needs of the node that hosts it (the replica fetchers, the way
// to the controller for ISR changes, the cold tier, metrics, goroutines)
// comes in a Host, as interfaces (host.go). It has no network and knows
// nothing of connections.
//
// A partition's locks nest in this order: tier.mu (an upload pass),
// appendMu, rep.mu, waitMu; the log's own locks come after them.
//
// It must never import strata/broker or strata/broker/node (they use it),
// nor kmsg's request and response types: the Kafka edge translates.
// kerr's error values are its vocabulary for the errors a client sees.
package partition
