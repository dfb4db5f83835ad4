package broker

import (
	"context"

	"strata/broker/group"
	"strata/broker/node"
	"strata/broker/replica"
	"strata/broker/txn"
	"strata/meta"
)

// This node's membership in the cluster is broker/node's; here is what
// the broker gives it (newNode) and the few calls that files still
// speaking of it by its old names make.

// newNode is this broker's node in the cluster, on the metadata store m.
func (b *Broker) newNode(m *meta.Store) *node.Node {
	return node.New(b.ctx, node.Config{
		NodeID:                   b.cfg.NodeID,
		Voters:                   b.cfg.Voters,
		Host:                     b.advHost,
		Port:                     b.advPort,
		Endpoints:                b.endpoints(),
		Rack:                     b.cfg.Rack,
		ClusterID:                b.cfg.ClusterID,
		DataDir:                  b.cfg.DataDir,
		SessionTimeout:           b.cfg.SessionTimeout,
		HeartbeatInterval:        b.cfg.HeartbeatInterval,
		AutoCreateTopics:         b.cfg.AutoCreateTopics,
		DefaultPartitions:        b.cfg.DefaultPartitions,
		DefaultReplicationFactor: b.cfg.DefaultReplicationFactor,
		Logger:                   b.log,
		TopicDefaults:            b.cfg.TopicDefaults,
		ReplicaLagTimeMax:        b.cfg.ReplicaLagTimeMax,
		MaintenanceInterval:      b.cfg.MaintenanceInterval,
		FlushInterval:            b.cfg.FlushInterval,
		Tier:                     b.cfg.Tier,
		ReadReplica:              b.cfg.ReadReplica,
		Restore:                  b.cfg.Restore,
		Compactor:                b.cfg.Compactor,
		Groups: group.Config{
			Partitions:            b.cfg.OffsetsPartitions,
			MinSessionTimeout:     b.cfg.GroupMinSessionTimeout,
			MaxSessionTimeout:     b.cfg.GroupMaxSessionTimeout,
			InitialRebalanceDelay: b.cfg.GroupInitialRebalanceDelay,
			OffsetsRetention:      b.cfg.OffsetsRetention,
		},
		Metrics: b.metrics.node(),
		Peer:    func(id int32) replica.Client { return peerClient{b, id} },
		Txns: txn.Config{
			Partitions:   b.cfg.TransactionStatePartitions,
			MaxTimeout:   b.cfg.TransactionMaxTimeout,
			IDExpiration: b.cfg.TransactionalIDExpiration,
		},
		TxnAbortInterval: b.cfg.TransactionAbortInterval,
		WriteMarkers:     b.writeMarkersRemote,
		Go:               b.goFunc,
	}, m, controller{b})
}

// Shutdown is a controlled shutdown, what SIGTERM does: the broker asks the
// controller to move its leaderships to other in-sync replicas, waits
// (within ctx) until the controller says it leads nothing that could move,
// and closes. Clients meanwhile get only retriable errors and follow the
// new leaders. A single node, or a broker whose controller cannot be
// reached for a session timeout (the last nodes of a cluster being
// stopped have no quorum left to move anything), just closes
// (node.ControlledShutdown).
func (b *Broker) Shutdown(ctx context.Context) error {
	if b.started {
		b.node.ControlledShutdown(ctx)
	}
	return b.Close()
}

// autoCreate is node.AutoCreate.
func (b *Broker) autoCreate(ctx context.Context, name string) (*meta.Topic, error) {
	return b.node.AutoCreate(ctx, name)
}

// syncMetadataAndReconcile is node.SyncMetadataAndReconcile.
func (b *Broker) syncMetadataAndReconcile() { b.node.SyncMetadataAndReconcile() }

// atController is node.AtController.
func (b *Broker) atController(ctx context.Context, local, remote func() error) error {
	return b.node.AtController(ctx, local, remote)
}
