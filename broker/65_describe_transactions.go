package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// DescribeTransactions: v0
//
// The state of each named transactional id, from its coordinator: state,
// producer id and epoch, timeout, start time and the partitions of the
// open transaction (KIP-664). An id whose coordinator is another node is
// NOT_COORDINATOR; an unknown one TRANSACTIONAL_ID_NOT_FOUND.
//
// Authorization (Kafka's): DESCRIBE on each transactional id, else
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED; the partitions listed are those
// of topics the principal may DESCRIBE.
func init() { register(kmsg.DescribeTransactions, 0, 0, (*Broker).handleDescribeTransactions) }

func (b *Broker) handleDescribeTransactions(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeTransactionsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range r.TransactionalIDs {
		ts := kmsg.NewDescribeTransactionsResponseTransactionState()
		ts.TransactionalID = id
		ts.ProducerID, ts.ProducerEpoch, ts.StartTimestamp = -1, -1, -1
		if !b.authorized(req, acl.Describe, acl.TransactionalID, id) {
			ts.ErrorCode, _ = b.answerError(kmsg.DescribeTransactions, kerr.TransactionalIDAuthorizationFailed)
			resp.TransactionStates = append(resp.TransactionStates, ts)
			continue
		}
		if b.txns == nil {
			ts.ErrorCode = kerr.CoordinatorNotAvailable.Code
			resp.TransactionStates = append(resp.TransactionStates, ts)
			continue
		}
		md, err := b.txns.Describe(id)
		if err != nil {
			ts.ErrorCode, _ = b.answerError(kmsg.DescribeTransactions, err)
			resp.TransactionStates = append(resp.TransactionStates, ts)
			continue
		}
		ts.State = md.State.String()
		ts.TimeoutMillis = md.TimeoutMs
		ts.StartTimestamp = md.StartTime
		ts.ProducerID, ts.ProducerEpoch = md.ProducerID, md.ProducerEpoch
		describable := b.topicAuth(req, acl.Describe)
		for _, p := range md.Partitions {
			if !describable.ok(p.Topic) {
				continue
			}
			if n := len(ts.Topics); n == 0 || ts.Topics[n-1].Topic != p.Topic {
				t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				t.Topic = p.Topic
				ts.Topics = append(ts.Topics, t)
			}
			ts.Topics[len(ts.Topics)-1].Partitions = append(ts.Topics[len(ts.Topics)-1].Partitions, p.Partition)
		}
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return resp, nil
}
