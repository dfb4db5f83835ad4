package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// DescribeProducers: v0 (KIP-664)
//
// Lists the active producers of each partition asked for: producer id and
// epoch, last sequence (-1 without a data batch at that epoch), when it
// last wrote, the coordinator epoch of its last transaction marker, and
// the first offset of its ongoing transaction (-1 if none). An operator
// finds a hanging transaction by that offset, one far below the log end
// that holds the last stable offset back, and aborts it with
// WriteTxnMarkers (kafka-transactions.sh find-hanging and abort, `strata
// txn abort`).
//
// As in Kafka, any replica this node hosts answers, not only the leader:
// followers replicate producer state, and find-hanging --broker-id asks
// one broker about every partition it holds. A partition this node does
// not host is NOT_LEADER_OR_FOLLOWER, an unknown one
// UNKNOWN_TOPIC_OR_PARTITION.
//
// LastTimestamp is when the producer last appended by the broker's clock
// (what producer expiry goes by), where Kafka reports the record
// timestamp of its last batch; the coordinator epoch is 0, not -1, for a
// producer that never had a marker.
//
// Authorization (Kafka's): READ on each topic, else its partitions are
// TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
func init() { register(kmsg.DescribeProducers, 0, 0, (*Broker).handleDescribeProducers) }

func (b *Broker) handleDescribeProducers(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeProducersRequest)
	resp := r.ResponseKind().(*kmsg.DescribeProducersResponse)
	readable := b.topicAuth(req, acl.Read)
	for _, rt := range r.Topics {
		st := kmsg.NewDescribeProducersResponseTopic()
		st.Topic = rt.Topic
		for _, index := range rt.Partitions {
			sp := kmsg.NewDescribeProducersResponseTopicPartition()
			sp.Partition = index
			p, err := b.hostedIf(readable.ok(rt.Topic), rt.Topic, index)
			if err != nil {
				sp.ErrorCode, sp.ErrorMessage = b.answerError(kmsg.DescribeProducers, err)
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			for _, s := range p.Log().Producers() {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID = s.ProducerID
				ap.ProducerEpoch = int32(s.Epoch)
				ap.LastSequence = s.LastSequence
				ap.LastTimestamp = s.LastTimestamp
				ap.CoordinatorEpoch = s.CoordinatorEpoch
				ap.CurrentTxnStartOffset = s.TxnStartOffset
				sp.ActiveProducers = append(sp.ActiveProducers, ap)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
