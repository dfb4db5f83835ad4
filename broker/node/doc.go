// Package node owns what this node is in the cluster, apart from the
// partitions it hosts: its registration with the controller under a
// fresh incarnation, its heartbeats and controlled shutdown, the
// cluster's id (checked at start, handed to the bucket once the
// controller names the cluster), catching up with the controller's
// metadata before a read that must not go back in time (metasync.go),
// forwarding writes to the controller (AtController), topic creation and
// its validation, and producer-id allocation.
//
// It talks to a controller on another node only through the Controller
// interface, which the Kafka edge implements with the inter-broker
// requests; on the controller itself it goes straight to the metadata
// store. What it needs of the hosted partitions (opening those of a new
// topic) it reaches through hooks in Config.
//
// It must never import strata/broker (the edge depends on it, not the
// reverse) nor kmsg's request and response types; kerr's error values
// are its vocabulary for the errors a controller answers with.
package node
