// Package broker is the Kafka edge of a Strata node: the listener and one
// goroutine per connection, the request memory bound, decoding requests
// and encoding responses (server.go); one adapter file per API key, named
// after the key as franz-go's kfake does, which decodes, checks, calls
// broker/node, broker/partition or a coordinator, and encodes; forwarding
// metadata writes to the controller (KIP-590); the requests this node
// sends to other brokers, through the peer clients of controller.go,
// which implement node.Controller and replica.Client, and the transaction
// coordinator's requests to other brokers (txn_markers.go, txn_verify.go);
// the one place where a request's principal is checked (admit); metrics
// and health endpoints; start-up and Close.
//
// What this node is in the cluster belongs to broker/node, and each
// partition it hosts to broker/partition. Neither the broker nor the node
// holds metadata of its own: topics, partitions and leaders live in the
// meta package's Raft state machine. Records never pass through Raft;
// they go straight to the segment package's log.
//
// Errors from lower layers are mapped to Kafka error codes here, in
// errors.go, and nowhere else.
//
// Only the binary (cmd) imports broker: the packages it uses, broker/node,
// broker/partition, broker/replica, broker/group and broker/txn among
// them, must never import it, and it must never import cmd or loadtest.
package broker
