package broker

import (
	"fmt"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/txn"
)

// ListTransactions: v0-2
//
// The transactional ids this node coordinates (KIP-664): admin clients
// ask every broker and merge the answers. Filters: states (a name Kafka
// does not know is returned in UnknownStateFilters and matches nothing),
// producer ids, from v1 a minimum running time (KIP-994), from v2 an RE2
// pattern on the id (KIP-1152; a bad pattern is INVALID_REGULAR_EXPRESSION).
//
// Authorization (Kafka's): only the transactional ids the principal may
// DESCRIBE are listed.
func init() { register(kmsg.ListTransactions, 0, 2, (*Broker).handleListTransactions) }

func (b *Broker) handleListTransactions(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.ListTransactionsRequest)
	resp := r.ResponseKind().(*kmsg.ListTransactionsResponse)
	if b.txns == nil {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil
	}
	var f txn.ListFilter
	for _, name := range r.StateFilters {
		s, ok := txn.ParseState(name)
		if !ok {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
			continue
		}
		f.States = append(f.States, s)
	}
	if len(r.StateFilters) > 0 && len(f.States) == 0 {
		return resp, nil // every filter names a state no transaction is in
	}
	f.ProducerIDs = r.ProducerIDFilters
	if r.Version >= 1 && r.DurationFilterMillis > 0 {
		f.MinDuration = time.Duration(r.DurationFilterMillis) * time.Millisecond
	}
	if r.Version >= 2 && r.TransactionalIDPattern != nil && *r.TransactionalIDPattern != "" {
		var err error
		if f.IDPattern, err = regexp.Compile(*r.TransactionalIDPattern); err != nil {
			resp.ErrorCode, _ = b.answerError(kmsg.ListTransactions, fmt.Errorf("%w: %v", kerr.InvalidRegularExpression, err))
			return resp, nil
		}
	}
	for _, s := range b.txns.List(f) {
		if !b.authorized(req, acl.Describe, acl.TransactionalID, s.TransactionalID) {
			continue
		}
		ts := kmsg.NewListTransactionsResponseTransactionState()
		ts.TransactionalID, ts.ProducerID, ts.TransactionState = s.TransactionalID, s.ProducerID, s.State.String()
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return resp, nil
}
