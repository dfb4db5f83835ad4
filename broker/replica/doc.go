// Package replica owns replication by fetch: a follower's fetchers, which
// copy the leader's record batches byte for byte and truncate where the
// follower's log diverges from the leader's, and a leader's view of its
// followers, which decides the high watermark and the ISR changes to ask
// the controller for. It knows partitions only through the small Log
// interface and talks to other brokers only through Client, so its
// decisions are tested without a network.
package replica
