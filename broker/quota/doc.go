// Package quota measures clients against their quotas the way Kafka's
// ClientQuotaManager does, and says how long to throttle them.
//
// Three quotas, each set per user, per client id, or per user and client
// id, with default entities (meta/quota.go stores them):
//
//   - producer_byte_rate: bytes of produce requests, per second;
//   - consumer_byte_rate: bytes of fetch responses to consumers, per second;
//   - request_percentage: time spent handling the client's requests, as a
//     percentage of one handler (100 = one full core's worth of handling).
//
// Which quota applies to a (user, client id) pair follows Kafka's order,
// the most specific first:
//
//	/config/users/<user>/clients/<client-id>
//	/config/users/<user>/clients/<default>
//	/config/users/<user>
//	/config/users/<default>/clients/<client-id>
//	/config/users/<default>/clients/<default>
//	/config/users/<default>
//	/config/clients/<client-id>
//	/config/clients/<default>
//
// each kind of quota on its own (a user's byte rate may come from one
// entity and its request percentage from another). The entity that
// applies also decides who shares a measurement: a quota on a user
// (/config/users/alice) is shared by all of alice's client ids, while a
// default (/config/users/<default>) gives every user a measurement of
// its own, as in Kafka.
//
// A measurement is Kafka's TokenBucket (KIP-599), sized by Kafka's quota
// windows: credits refill at the quota per second up to a burst of the
// quota over Samples windows of Window each (quota.window.num 11 ×
// quota.window.size.seconds 1 = 11 s of quota); what a client uses is
// taken out, below zero if need be, and a client in debt is throttled
// for debt / quota: the time the refill takes to pay it back. That is
// Kafka's (observed − quota) / quota × window with the window reaching
// back to when the client was last within its quota.
//
// Kafka's ClientQuotaManager measures with a Rate over a ring of samples
// instead, and throttles for (rate − quota) / quota × (the ring's span).
// A client that sends as fast as it may is held to the quota on average
// by that too, but not evenly: its bytes gather in the sample where it
// burst, and when that sample leaves the ring it may burst again, so its
// rate saws with the ring's period (11 s). A simulated greedy producer
// at 5 MB/s averages anywhere from 3.9 to 5.6 MB/s over 30 s depending on
// where the 30 s fall. Kafka's own TokenBucket documentation describes
// the same flaw; the bucket has none (TestGreedyClientHeldEvenly), and
// clients see no difference: the same throttle_time_ms, the same muting.
// Kafka caps the request-time throttle at one window; byte-rate
// throttles are capped here at Samples windows, so that a single huge
// request cannot stall a client past its request timeout.
//
// The manager only measures and answers; the broker applies the answer
// (KIP-219: throttle_time_ms in the response, then the connection reads
// nothing more until the time has passed). Time comes from Config.Now,
// so tests drive the clock.
package quota
