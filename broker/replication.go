package broker

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/partition"
	"strata/meta"
)

// tp names a partition by topic name and index.
type tp struct {
	topic     string
	partition int32
}

// led, ledNow and hosted are the node's Led, LedNow and Hosted: the
// partition a request is for, or the error its client gets.
func (b *Broker) led(topic string, index int32) (*partition.Partition, error) {
	return b.node.Led(topic, index)
}

func (b *Broker) ledNow(topic string, index int32) (*partition.Partition, error) {
	return b.node.LedNow(topic, index)
}

func (b *Broker) hosted(topic string, index int32) (*partition.Partition, error) {
	return b.node.Hosted(topic, index)
}

// partition returns the partition this node hosts, or nil.
func (b *Broker) partition(topic string, index int32) *partition.Partition {
	return b.node.Partition(topic, index)
}

// partitionList lists the partitions this node hosts.
func (b *Broker) partitionList() []*partition.Partition { return b.node.Partitions() }

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
	var parts []*partition.Partition
	if n := c.b.nodeReady.Load(); n != nil {
		parts = n.Partitions()
	}
	for _, p := range parts {
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
