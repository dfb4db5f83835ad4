package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
	"strata/meta"
)

// alterPartition sends an ISR change to the controller.
func (b *Broker) alterPartition(ctx context.Context, topicID [16]byte, r meta.AlterPartitionRequest) (meta.Partition, error) {
	var out meta.Partition
	err := b.atController(ctx, func() (err error) {
		out, err = b.meta.AlterPartition(ctx, r)
		return err
	}, func() error {
		req := kmsg.NewPtrAlterPartitionRequest()
		req.Version = 3
		req.BrokerID, req.BrokerEpoch = r.BrokerID, r.BrokerEpoch
		rt := kmsg.NewAlterPartitionRequestTopic()
		rt.TopicID = topicID
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.PartitionEpoch, rp.NewISR = r.Partition, r.LeaderEpoch, r.PartitionEpoch, r.ISR
		// Both forms: the client sends the one the controller's version
		// takes (v2 NewISR, v3 NewEpochISR).
		for i, id := range r.ISR {
			bs := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
			bs.BrokerID, bs.BrokerEpoch = id, -1
			if i < len(r.ISREpochs) {
				bs.BrokerEpoch = r.ISREpochs[i]
			}
			rp.NewEpochISR = append(rp.NewEpochISR, bs)
		}
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := b.controllerRequest(ctx, req)
		if err != nil {
			return err
		}
		resp := kresp.(*kmsg.AlterPartitionResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, op := range t.Partitions {
				if op.Partition == r.Partition {
					out = meta.Partition{Index: op.Partition, Leader: op.LeaderID, LeaderEpoch: op.LeaderEpoch, ISR: op.ISR, PartitionEpoch: op.PartitionEpoch}
					return kerr.ErrorForCode(op.ErrorCode)
				}
			}
		}
		return fmt.Errorf("controller did not answer for %s-%d", r.Topic, r.Partition)
	})
	return out, err
}

func isNotController(err error) bool {
	return err != nil && (errorCode(err) == kerr.NotController.Code)
}

// isrLoop asks for the ISR shrinks that followers falling behind call for:
// expansions are asked for as soon as a follower's fetch shows it caught
// up, but a follower that stopped fetching shows nothing.
func (b *Broker) isrLoop() {
	every := min(b.cfg.ReplicaLagTimeMax/4, time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for _, p := range b.partitionList() {
			if p.Leading() {
				p.MaybeAlterISR(now)
			}
		}
	}
}

// led returns the partition if this node leads it, or the error a client
// should see.
//
// The metadata may have made this node the leader a moment before the
// reconcile loop opened the partition or took the leadership: then the
// request reconciles itself rather than send the client away from the
// right broker.
func (b *Broker) led(topic string, index int32) (*partition.Partition, error) {
	return b.ledReconciling(topic, index, true)
}

// ledNow is led without the reconcile: for a follower's fetch, which
// names every partition it copies from this node in one request. A
// reconcile opening a burst of new partitions (a topic with many of them,
// the internal topics at start) takes seconds on a loaded machine; waiting
// for it would hold the fetch for the partitions already served too, and
// their followers would fall out of the ISR. The follower asks again for
// the new partition a moment later.
func (b *Broker) ledNow(topic string, index int32) (*partition.Partition, error) {
	return b.ledReconciling(topic, index, false)
}

func (b *Broker) ledReconciling(topic string, index int32, reconcile bool) (*partition.Partition, error) {
	p, err := b.hosted(topic, index)
	if reconcile && (err != nil || !p.Leading()) && b.namedLeader(topic, index) {
		if rerr := b.reconcile(); rerr != nil {
			b.log.Warn("reconcile for a request", "err", rerr)
		}
		p, err = b.hosted(topic, index)
	}
	if err != nil {
		return nil, err
	}
	if !p.Leading() {
		return nil, fmt.Errorf("%w: %s-%d is led by another broker", kerr.NotLeaderForPartition, topic, index)
	}
	return p, nil
}

// namedLeader reports whether this node's metadata names it the leader of
// the partition.
func (b *Broker) namedLeader(topic string, index int32) bool {
	t, ok := b.topicByName(topic)
	return ok && index >= 0 && int(index) < len(t.Partitions) && t.Partitions[index].Leader == b.cfg.NodeID
}

// replicationCollector reports, for the partitions this broker leads, how
// many are under-replicated and how far each follower lags.
type replicationCollector struct{ b *Broker }

var (
	underReplicatedDesc = prometheus.NewDesc("strata_under_replicated_partitions",
		"Partitions this broker leads whose ISR is smaller than their replica set.", nil, nil)
	isrSizeDesc = prometheus.NewDesc("strata_partition_isr_size",
		"Replicas in the ISR of each partition this broker leads.", []string{"topic", "partition"}, nil)
	replicaLagDesc = prometheus.NewDesc("strata_replica_fetch_lag_offsets",
		"Offsets a follower is behind the leader's log end, per partition this broker leads and follower (-1: not fetched yet).",
		[]string{"topic", "partition", "replica"}, nil)
)

func (c replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- underReplicatedDesc
	ch <- isrSizeDesc
	ch <- replicaLagDesc
}

func (c replicationCollector) Collect(ch chan<- prometheus.Metric) {
	under := 0
	for _, p := range c.b.partitionList() {
		r, leads := p.ReplicationIfLeading()
		if !leads {
			continue
		}
		if r.ISR < r.Replicas {
			under++
		}
		part := strconv.Itoa(int(p.Index()))
		ch <- prometheus.MustNewConstMetric(isrSizeDesc, prometheus.GaugeValue, float64(r.ISR), p.Topic(), part)
		for id, n := range r.Lag {
			ch <- prometheus.MustNewConstMetric(replicaLagDesc, prometheus.GaugeValue, float64(n), p.Topic(), part, strconv.Itoa(int(id)))
		}
	}
	ch <- prometheus.MustNewConstMetric(underReplicatedDesc, prometheus.GaugeValue, float64(under))
}

// partitionCluster is what the partitions' leaders need of the cluster
// (partition.Cluster).
type partitionCluster struct{ b *Broker }

func (c partitionCluster) BrokerEpoch() int64 { return c.b.node.BrokerEpoch() }

func (c partitionCluster) Eligibility() func(id int32, epoch int64) bool {
	st := c.b.meta.State()
	return func(id int32, epoch int64) bool {
		br, ok := st.Brokers[id]
		// KIP-903: only the incarnation the metadata registered; a fetch
		// that named no epoch comes from a peer that predates it.
		return ok && !br.Fenced && !br.ShuttingDown && (epoch < 0 || epoch == br.Epoch)
	}
}

func (c partitionCluster) AlterPartition(ctx context.Context, topicID [16]byte, r meta.AlterPartitionRequest) (meta.Partition, error) {
	return c.b.alterPartition(ctx, topicID, r)
}

// staleReplica refuses a follower's fetch from an incarnation older than
// the one registered (KIP-903): a process that lost its disk and
// restarted must not be kept in, or added to, the ISR on the strength of
// where its previous life had fetched to, and a paused previous life must
// not speak for the new one. A fetch that names no epoch (before v15, or
// -1) is taken as it is, as Kafka does. A newer epoch than this node's
// metadata knows is the new incarnation ahead of the metadata: its fetch
// offset is its own, and it joins the ISR only once the metadata shows
// its registration (maybeAlterISR).
func staleReplica(st *meta.State, id int32, epoch int64) error {
	if id < 0 || epoch < 0 {
		return nil
	}
	if br, ok := st.Brokers[id]; ok && epoch < br.Epoch {
		return fmt.Errorf("%w: broker %d fetched at epoch %d, registered at %d", kerr.StaleBrokerEpoch, id, epoch, br.Epoch)
	}
	return nil
}
