package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/txn"
)

// writeMarkersRemote sends one WriteTxnMarkers to broker leader for tps.
func (b *Broker) writeMarkersRemote(ctx context.Context, leader int32, m *txn.Markers, tps []txn.TopicPartition) map[txn.TopicPartition]error {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	wm := kmsg.NewWriteTxnMarkersRequestMarker()
	wm.ProducerID, wm.ProducerEpoch, wm.Committed, wm.CoordinatorEpoch = m.ProducerID, m.ProducerEpoch, m.Commit, m.CoordinatorEpoch
	for _, g := range byTopic(tps) {
		t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		t.Topic = g[0].Topic
		for _, tp := range g {
			t.Partitions = append(t.Partitions, tp.Partition)
		}
		wm.Topics = append(wm.Topics, t)
	}
	req.Markers = append(req.Markers, wm)
	errs := make(map[txn.TopicPartition]error, len(tps))
	kresp, err := b.peerRequest(ctx, leader, req)
	if err != nil {
		for _, tp := range tps {
			errs[tp] = fmt.Errorf("%w: write markers at broker %d: %v", kerr.RequestTimedOut, leader, err)
		}
		return errs
	}
	for _, rm := range kresp.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
					errs[txn.TopicPartition{Topic: rt.Topic, Partition: rp.Partition}] = e
				}
			}
		}
	}
	for _, tp := range tps {
		if _, ok := errs[tp]; !ok && !answered(kresp.(*kmsg.WriteTxnMarkersResponse), tp) {
			errs[tp] = fmt.Errorf("%w: broker %d did not answer for %s-%d", kerr.UnknownServerError, leader, tp.Topic, tp.Partition)
		}
	}
	return errs
}

func answered(resp *kmsg.WriteTxnMarkersResponse, tp txn.TopicPartition) bool {
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			if rt.Topic != tp.Topic {
				continue
			}
			for _, rp := range rt.Partitions {
				if rp.Partition == tp.Partition {
					return true
				}
			}
		}
	}
	return false
}

// byTopic groups parts by topic, the topics in the order they first
// appear, as the transaction APIs list partitions.
func byTopic(parts []txn.TopicPartition) [][]txn.TopicPartition {
	var groups [][]txn.TopicPartition
	at := make(map[string]int)
	for _, tp := range parts {
		i, ok := at[tp.Topic]
		if !ok {
			i = len(groups)
			at[tp.Topic] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], tp)
	}
	return groups
}
