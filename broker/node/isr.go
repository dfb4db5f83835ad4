package node

import (
	"context"

	"strata/meta"
)

// partitionCluster is what the partitions' leaders need of the cluster
// (partition.Cluster).
type partitionCluster struct{ n *Node }

func (c partitionCluster) BrokerEpoch() int64 { return c.n.BrokerEpoch() }

func (c partitionCluster) Eligibility() func(id int32, epoch int64) bool {
	st := c.n.meta.State()
	return func(id int32, epoch int64) bool {
		br, ok := st.Brokers[id]
		// KIP-903: only the incarnation the metadata registered; a fetch
		// that named no epoch comes from a peer that predates it.
		return ok && !br.Fenced && !br.ShuttingDown && (epoch < 0 || epoch == br.Epoch)
	}
}

// AlterPartition sends an ISR change to the controller: in-process on the
// controller, by AlterPartition elsewhere.
func (c partitionCluster) AlterPartition(ctx context.Context, topicID [16]byte, r meta.AlterPartitionRequest) (meta.Partition, error) {
	var out meta.Partition
	err := c.n.AtController(ctx, func() (err error) {
		out, err = c.n.meta.AlterPartition(ctx, r)
		return err
	}, func() (err error) {
		out, err = c.n.ctrl.AlterPartition(ctx, topicID, r)
		return err
	})
	return out, err
}
