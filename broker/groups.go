package broker

import (
	"net"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"strata/broker/group"
	"strata/broker/node"
)

// clientHost is what DescribeGroups shows as a member's host, in Kafka's
// "/address" form.
func clientHost(req *request) string {
	if req.conn == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(req.conn.remote)
	if err != nil {
		host = req.conn.remote
	}
	return "/" + host
}

// maxLagSeries bounds the consumer-lag series a scrape returns.
const maxLagSeries = 10000

// groupCollector reports group metrics at scrape time: groups by state,
// the coordinator's counters, and each committed partition's lag against
// the high watermark.
type groupCollector struct{ b *Broker }

var (
	groupsDesc = prometheus.NewDesc("strata_consumer_groups",
		"Consumer groups this node coordinates, by state.", []string{"state"}, nil)
	rebalancesDesc = prometheus.NewDesc("strata_consumer_group_rebalances_total",
		"Rebalances started by this node's group coordinator.", nil, nil)
	commitsDesc = prometheus.NewDesc("strata_consumer_group_offset_commits_total",
		"Partition offsets committed through this node's group coordinator.", nil, nil)
	lagDesc = prometheus.NewDesc("strata_consumer_group_lag",
		"High watermark minus committed offset, per group and partition (at most 10000 series).",
		[]string{"group", "topic", "partition"}, nil)
)

func (gc *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- groupsDesc
	ch <- rebalancesDesc
	ch <- commitsDesc
	ch <- lagDesc
}

func (gc *groupCollector) Collect(ch chan<- prometheus.Metric) {
	b := gc.b
	st := b.groups.Stats()
	ch <- prometheus.MustNewConstMetric(rebalancesDesc, prometheus.CounterValue, float64(st.Rebalances))
	ch <- prometheus.MustNewConstMetric(commitsDesc, prometheus.CounterValue, float64(st.OffsetCommits))
	states := map[string]int{}
	for _, s := range []group.State{group.StateEmpty, group.StatePreparingRebalance, group.StateCompletingRebalance, group.StateStable} {
		states[s.String()] = 0
	}
	for _, s := range b.groups.Summaries(maxLagSeries) {
		states[s.State]++
		for _, o := range s.Offsets {
			p := b.partition(o.Topic, o.Partition)
			if p == nil {
				continue
			}
			lag := max(p.HighWatermark()-o.Offset, 0)
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(lag), s.Group, o.Topic, strconv.Itoa(int(o.Partition)))
		}
	}
	for state, n := range states {
		ch <- prometheus.MustNewConstMetric(groupsDesc, prometheus.GaugeValue, float64(n), state)
	}
}

// offsetsTopic holds committed offsets and group metadata as records.
const offsetsTopic = node.OffsetsTopic
