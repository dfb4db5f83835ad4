// Package node owns what this node is in the cluster: its registration
// with the controller under a fresh incarnation, its heartbeats and
// controlled shutdown, the cluster's id (checked at start, handed to the
// bucket once the controller names the cluster) (cluster.go); catching up
// with the controller's metadata before a read that must not go back in
// time (metasync.go); forwarding writes to the controller (AtController);
// topic creation and its validation (topics.go), topic configs
// (topicconfig.go) and producer-id allocation (producerids.go).
//
// It also owns the partitions this node hosts: the lookups requests make
// (Led, LedNow, Hosted) and the ISR and maintenance loops
// (partitions.go); the reconcile that opens, stops and deletes them and
// sets their roles from the metadata (reconcile.go); a leader's way to
// the controller for ISR changes (isr.go); the cold tier with its upload
// and collection loops (tier.go, collect.go); and the compactor
// (compaction.go). Each partition itself is broker/partition's.
//
// And it hosts the group and transaction coordinators (broker/group,
// broker/txn) on the internal partitions it leads: it creates
// __consumer_offsets and __transaction_state, loads and unloads their
// partitions as leadership moves, and carries out the coordinators'
// writes and the transaction markers (groups.go, txns.go,
// txn_markers.go); markers for other brokers' partitions go out through
// Config.WriteMarkers.
//
// It talks to a controller on another node only through the Controller
// interface, which the Kafka edge implements with the inter-broker
// requests; on the controller itself it goes straight to the metadata
// store. Its loops run on Config.Go.
//
// It must never import strata/broker (the edge depends on it, not the
// reverse) nor kmsg's request and response types; kerr's error values
// are its vocabulary for the errors a controller answers with.
package node
