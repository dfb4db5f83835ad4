package broker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/broker/txn"
)

// txnCollector reports the transaction coordinator's gauges at scrape
// time.
type txnCollector struct{ b *Broker }

var (
	txnStatesDesc = prometheus.NewDesc("strata_transactions",
		"Transactional ids this node coordinates, by state.", []string{"state"}, nil)
	txnOldestDesc = prometheus.NewDesc("strata_transaction_oldest_open_seconds",
		"How long the oldest open transaction this node coordinates has been open (0 when none is).", nil, nil)
)

func (tc *txnCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- txnStatesDesc
	ch <- txnOldestDesc
}

func (tc *txnCollector) Collect(ch chan<- prometheus.Metric) {
	s := tc.b.txns.Stats()
	for _, st := range []txn.State{txn.Empty, txn.Ongoing, txn.PrepareCommit, txn.PrepareAbort, txn.CompleteCommit, txn.CompleteAbort} {
		ch <- prometheus.MustNewConstMetric(txnStatesDesc, prometheus.GaugeValue, float64(s.ByState[st]), st.String())
	}
	oldest := 0.0
	if !s.OldestOngoing.IsZero() {
		oldest = max(time.Since(s.OldestOngoing).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(txnOldestDesc, prometheus.GaugeValue, oldest)
}
