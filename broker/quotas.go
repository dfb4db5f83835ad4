package broker

import (
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/quota"
)

// Client quotas are enforced Kafka's way (KIP-219): broker/quota says how
// long a client over its quota must wait, the response carries that in
// throttle_time_ms and is sent at once, and then the connection reads no
// further request until the time has passed, so a client that ignores
// the field is held back all the same. Versions that predate KIP-219
// (Produce before v6, Fetch before v8: kmsg's ThrottleResponse says which
// versions the client backs off itself) get their response only after
// the throttle time instead, as Kafka does for them.
//
// What is measured, per request:
//
//   - Produce: the bytes of the request's record batches, once appended
//     (whether they were accepted or not, as Kafka counts the request);
//   - Fetch from a consumer: the record bytes of the response; a fetch
//     over the quota is answered empty, throttled, and not counted, and
//     no fetch reads more than the quota allows over Samples-1 windows;
//   - every request: the time its handler took (request_percentage),
//     less the time it waited on others: the long poll of a Fetch that
//     may wait (its reading is then not charged either, since one call
//     does both), the replication wait of an acks=all Produce in a
//     cluster (its append likewise), a request forwarded to the
//     controller. Kafka counts the request thread's time, which excludes
//     purgatory waits by construction.
//
// Brokers' own requests are not measured: replica fetches and the APIs
// only brokers send (exemptFromQuotas), nor are ApiVersions and the SASL
// exchange, which come before a client knows who it is.

// requestQuota is what a request's handler tells the quota hook.
type requestQuota struct {
	// throttle is the byte-rate throttle the handler was given.
	throttle time.Duration
	// waited is the handling time spent waiting on others, not charged to
	// the request quota.
	waited time.Duration
	// exempt marks a broker's own request (a replica fetch).
	exempt bool
	// until is when a throttled connection may read its next request.
	until time.Time
}

// exemptFromQuotas are the APIs that only brokers send, and those a
// client sends before it is authenticated.
var exemptFromQuotas = map[int16]bool{
	int16(kmsg.ApiVersions):         true,
	int16(kmsg.SASLHandshake):       true,
	int16(kmsg.SASLAuthenticate):    true,
	int16(kmsg.WriteTxnMarkers):     true,
	int16(kmsg.AlterPartition):      true,
	int16(kmsg.BrokerRegistration):  true,
	int16(kmsg.BrokerHeartbeat):     true,
	int16(kmsg.AllocateProducerIDs): true,
}

// quotaUser is the name a request's user quotas are looked up under.
func (req *request) quotaUser() string { return quota.User(req.conn.principal) }

// handleWithQuotas handles req, charges its handling time to the
// client's request quota, and sets the response's throttle time to the
// longer of that quota's throttle and the byte-rate throttle the handler
// was given. A response from a version before KIP-219 is held back for
// that time; otherwise the connection is muted for it (mute).
func (b *Broker) handleWithQuotas(req *request) (kmsg.Response, error) {
	start := time.Now()
	resp, err := b.handle(req)
	if err != nil {
		return resp, err
	}
	q := &req.quota
	throttle := q.throttle
	key := req.kreq.Key()
	if st := b.meta.State(); st.HasClientQuotas() && !q.exempt && !exemptFromQuotas[key] {
		took := time.Since(start) - q.waited
		if forwarded[key] && b.node.Clustered() {
			took = 0 // the controller did the work (and charged no one)
		}
		throttle = max(throttle, b.quotas.Record(st, quota.Request, req.quotaUser(), req.clientID, max(took, 0).Seconds()))
	}
	if throttle <= 0 {
		return resp, nil
	}
	clientBacksOff := true
	if tr, ok := resp.(kmsg.ThrottleResponse); ok {
		resp.(kmsg.SetThrottleResponse).SetThrottle(int32(min(throttle.Milliseconds(), math.MaxInt32)))
		_, clientBacksOff = tr.Throttle()
	}
	if resp == nil || clientBacksOff {
		q.until = time.Now().Add(throttle)
		return resp, nil
	}
	// An old client would send its next request at once: hold this
	// response back instead, after sending the ones already answered.
	if req.conn.w.Buffered() > 0 {
		if err := req.conn.w.Flush(); err != nil {
			return nil, err
		}
	}
	t := time.NewTimer(throttle)
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.ctx.Done():
	}
	return resp, nil
}

// mute holds a throttled connection's next read until its throttle time
// has passed, once the responses answered so far are sent. It returns
// false when the broker is closing or the connection broke.
func (c *conn) mute(req *request) bool {
	d := time.Until(req.quota.until)
	if d <= 0 {
		return true
	}
	if c.w.Buffered() > 0 {
		if err := c.w.Flush(); err != nil {
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.b.ctx.Done():
		return false
	}
}

// recordProduce charges a produce request's record bytes to the client's
// producer_byte_rate and keeps the throttle for the response.
func (b *Broker) recordProduce(req *request, r *kmsg.ProduceRequest) {
	st := b.meta.State()
	if !st.HasClientQuotas() {
		return
	}
	n := 0
	for i := range r.Topics {
		for j := range r.Topics[i].Partitions {
			n += len(r.Topics[i].Partitions[j].Records)
		}
	}
	req.quota.throttle = b.quotas.Record(st, quota.Produce, req.quotaUser(), req.clientID, float64(n))
}

// fetchQuotaBytes bounds what a consumer's fetch may read to what its
// consumer_byte_rate allows over the quota's windows, as Kafka does.
func (b *Broker) fetchQuotaBytes(req *request, replicaID int32, maxBytes int) int {
	if replicaID >= 0 {
		return maxBytes
	}
	st := b.meta.State()
	if limit, ok := b.quotas.MaxInWindow(st, quota.Fetch, req.quotaUser(), req.clientID); ok {
		return min(maxBytes, int(min(limit, math.MaxInt32)))
	}
	return maxBytes
}

// fetchThrottled charges a consumer fetch's record bytes to its
// consumer_byte_rate and reports whether it is over: then it is answered
// empty, and the bytes are not counted (broker/quota takes them back).
// A replica fetch is exempt from both quotas.
func (b *Broker) fetchThrottled(req *request, replicaID int32, bytes int) bool {
	if replicaID >= 0 {
		req.quota.exempt = true
		return false
	}
	st := b.meta.State()
	if !st.HasClientQuotas() {
		return false
	}
	req.quota.throttle = b.quotas.Record(st, quota.Fetch, req.quotaUser(), req.clientID, float64(bytes))
	return req.quota.throttle > 0
}
