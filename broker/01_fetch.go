package broker

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/partition"
	"strata/segment"
)

// Fetch: v4-17
//
// Serves record batches below the high watermark straight from the log's
// file bytes, never re-encoded. On a plaintext connection records from
// the local log, a consumer's or a follower's, go out with sendfile(2)
// (zerocopy.go, segment.FileRange), never copied through the broker's
// memory; reads from the bucket and TLS connections copy. Honours
// MaxWaitMillis and MinBytes (the
// request long-polls until enough bytes are committed, the wait expires or
// the broker shuts down), MaxBytes for the response and PartitionMaxBytes
// per partition; as KIP-74 requires, the first batch of the first
// non-empty partition is returned whole even when it is larger than both.
// The response limit is also capped by the broker's FetchMaxBytes (Kafka's
// fetch.max.bytes, 55 MiB), and a limit of 0 or less means that first
// batch only, so no request can make one response hold a whole segment.
// Topics are named (v4-12) or identified by topic id (v13+, KIP-516).
//
// Version notes: v4 isolation level and LastStableOffset; v5
// LogStartOffset; v7 fetch sessions (KIP-227); v9 CurrentLeaderEpoch
// (KIP-320); v11 rack-aware preferred replica (KIP-392); v12 flexible, and
// CurrentLeader (KIP-951: a partition refused with NOT_LEADER_OR_FOLLOWER
// or FENCED_LEADER_EPOCH names the leader and epoch this node knows); v13
// topic ids; v15 ReplicaState (KIP-903); v16 NodeEndpoints, those
// leaders' addresses (KIP-951); v17 no change for consumers.
//
// Followers fetch too (ReplicaID, or ReplicaState from v15): only the
// leader answers them, only for a replica of the partition (and, from
// v15, only the incarnation registered: an older ReplicaState epoch gets
// STALE_BROKER_EPOCH, KIP-903), with the
// records up to its log end rather than the high watermark; the fetch
// offset is the follower's log end as far as the leader is concerned
// (docs/replication.md). From v12 a follower names the epoch of its last
// batch (LastFetchedEpoch) and the leader answers a log that diverges from
// its own with DivergingEpoch, where the follower truncates. A follower
// below the leader's local log start (older data is in the bucket) gets
// OFFSET_MOVED_TO_TIERED_STORAGE and the local start, and starts there.
//
// Transactions (KIP-98): a read_committed fetch (IsolationLevel 1) reads
// up to the last stable offset, the first offset of the earliest
// transaction still open, and gets the aborted transactions whose records
// overlap what it returns (producer id and first offset), from the local
// log's .txnindex files and, for a read below the local log start, the
// bucket's; the consumer drops those records. LastStableOffset is sent at
// every isolation level, as Kafka does. A read_committed long poll waits
// for the last stable offset to move: the marker that ends a transaction
// wakes it.
//
// Authorization (Kafka's): a follower needs CLUSTER_ACTION on the
// cluster (else every partition is TOPIC_AUTHORIZATION_FAILED), a
// consumer READ on each topic (else TOPIC_AUTHORIZATION_FAILED, whether
// it exists or not; an unknown topic id stays UNKNOWN_TOPIC_ID).
//
// Quotas (quotas.go): a consumer's fetch reads at most what its
// consumer_byte_rate allows over the quota's windows, and one that would
// take it over the quota is answered empty with throttle_time_ms, as in
// Kafka. Followers are not measured.
//
// Not done: fetch sessions are declined (SessionID 0 in every response, a
// choice the protocol allows: clients then send full fetches); consumers
// fetch from the leader only (no KIP-392 follower fetching).
func init() { register(kmsg.Fetch, 4, 17, (*Broker).handleFetch) }

// noRecords is the record set of a partition answered without data:
// empty, not null. Shared and never written to.
var noRecords = []byte{}

func (b *Broker) handleFetch(req *request) (kmsg.Response, error) {
	start := time.Now()
	defer func() { b.metrics.fetchLatency.Observe(time.Since(start).Seconds()) }()
	r := req.kreq.(*kmsg.FetchRequest)
	resp := r.ResponseKind().(*kmsg.FetchResponse)

	if r.SessionID != 0 {
		// We never hand out sessions, so a client naming one is confused;
		// this error makes it start over with a full fetch.
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		b.metrics.countError(kmsg.Fetch, resp.ErrorCode)
		return resp, nil
	}

	replicaID, replicaEpoch := r.ReplicaID, int64(-1)
	if r.Version >= 15 {
		replicaID, replicaEpoch = r.ReplicaState.ID, r.ReplicaState.Epoch
	}
	st := b.meta.State()
	staleErr := staleReplica(st, replicaID, replicaEpoch)
	// A follower needs CLUSTER_ACTION for all it fetches, a consumer READ
	// on each topic, named or found by id.
	readable := b.topicAuth(req, acl.Read)
	replicaAllowed := replicaID < 0 || b.authorizedCluster(req, acl.ClusterAction)
	// One allocation for every partition's state, not one each.
	n := 0
	for i := range r.Topics {
		n += len(r.Topics[i].Partitions)
	}
	all := make([]partition.FetchPart, n)
	parts := make([]*partition.FetchPart, 0, n)
	// Ranges the response did not take (a throttled answer, a panic)
	// are let go here; those it took, when it is written.
	defer func() { partition.ReleaseRanges(parts) }()
	resp.Topics = make([]kmsg.FetchResponseTopic, 0, len(r.Topics))
	for i := range r.Topics {
		rt := &r.Topics[i]
		name, id := rt.Topic, rt.TopicID
		var topicErr error
		if r.Version >= 13 {
			if t, ok := st.TopicByID(id); ok {
				name = t.Name
			} else {
				topicErr = kerr.UnknownTopicID
			}
		} else if t, ok := st.Topics[name]; ok {
			id = t.ID
		} else {
			topicErr = kerr.UnknownTopicOrPartition
		}
		switch {
		case !replicaAllowed:
			topicErr = kerr.TopicAuthorizationFailed
		case replicaID < 0 && (r.Version < 13 || topicErr == nil) && !readable.ok(name):
			topicErr = kerr.TopicAuthorizationFailed
		}
		ft := kmsg.NewFetchResponseTopic()
		ft.Topic, ft.TopicID = name, id
		ft.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		resp.Topics = append(resp.Topics, ft)
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			replica := replicaID >= 0
			fp := &all[len(parts)]
			parts = append(parts, fp)
			err := topicErr
			var p *partition.Partition
			if err == nil && replica {
				p, err = b.ledNow(name, rp.Partition)
			} else if err == nil {
				p, err = b.led(name, rp.Partition)
			}
			*fp = partition.NewFetchPart(p, rp.FetchOffset, int(rp.PartitionMaxBytes), replica, r.IsolationLevel == 1 && !replica)
			fp.ZeroCopy = req.conn.zc.enabled()
			if err == nil {
				err = p.CheckLeaderEpoch(rp.CurrentLeaderEpoch)
			}
			if err == nil && replica {
				err = staleErr
			}
			if err == nil && replica {
				err = fp.FollowerFetch(replicaID, replicaEpoch, rp.LastFetchedEpoch)
			}
			if err != nil {
				fp.Refuse(err)
			}
		}
	}

	// The broker's cap applies whatever the client asks for; a limit of 0
	// or less still returns the first batch, as in Kafka.
	maxBytes := min(max(int(r.MaxBytes), 0), int(b.cfg.FetchMaxBytes))
	maxBytes = b.fetchQuotaBytes(req, replicaID, maxBytes)
	wait := time.Duration(r.MaxWaitMillis) * time.Millisecond
	ctx := b.ctx
	if replicaID >= 0 && wait > 0 {
		// A follower's long poll ends early when this node begins to
		// lead a partition it replicates (broker/node/newleads.go).
		var done func()
		var named map[fetchKey]bool // made on first use: rarely needed
		ctx, wait, done = b.node.HoldReplicaFetch(b.ctx, replicaID, wait, func(topic string, index int32) bool {
			if named == nil {
				named = fetchNamed(r, resp)
			}
			return named[fetchKey{topic, index}]
		})
		defer done()
	}
	read := time.Now()
	req.conn.scratch = partition.Fetch(ctx, parts, req.conn.scratch, maxBytes, int(r.MinBytes), wait)
	if wait > 0 && r.MinBytes > 0 {
		req.quota.waited = time.Since(read) // a long poll (quotas.go)
	}
	if b.fetchThrottled(req, replicaID, len(req.conn.scratch)+rangesLen(parts)) {
		resp.Topics = nil // over the consumer's quota: answered empty, as Kafka does
		return resp, nil
	}
	fetchResponse(r, resp, parts, req.conn.scratch, req.conn.zc)
	for _, fp := range parts {
		b.metrics.countError(kmsg.Fetch, errorCode(fp.Err))
	}
	if r.Version >= 12 {
		b.fetchLeaderHints(req.conn, resp)
	}
	return resp, nil
}

// rangesLen is the size of the parts' file ranges.
func rangesLen(parts []*partition.FetchPart) int {
	n := 0
	for _, fp := range parts {
		n += fp.Range.Len()
	}
	return n
}

// fetchResponse writes what Fetch read into resp's partitions, in the
// request's order. A part read as a file range hands it to zc, whose
// marker stands in the response for the records sendfile sends.
func fetchResponse(r *kmsg.FetchRequest, resp *kmsg.FetchResponse, parts []*partition.FetchPart, buf []byte, zc *zeroCopy) {
	for i := range r.Topics {
		rt := &r.Topics[i]
		ft := &resp.Topics[i]
		for j := range rt.Partitions {
			fp := parts[0]
			parts = parts[1:]
			sp := &ft.Partitions[j]
			*sp = kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rt.Partitions[j].Partition
			sp.ErrorCode = errorCode(fp.Err)
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = fp.HighWatermark, fp.LastStableOffset, fp.LogStartOffset
			if fp.Diverging {
				sp.DivergingEpoch.Epoch, sp.DivergingEpoch.EndOffset = fp.DivergingEpoch, fp.DivergingEnd
			}
			if fp.Aborted != nil {
				// Kafka sends read_committed consumers a list, empty or
				// not, and the others none.
				sp.AbortedTransactions = make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, 0, len(fp.Aborted))
				for _, a := range fp.Aborted {
					at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
					at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
					sp.AbortedTransactions = append(sp.AbortedTransactions, at)
				}
			}
			// Never nil: Kafka always sends a record set, empty or not,
			// and nil encodes as null (length -1 before v12), which
			// librdkafka refuses and kafka-python crashes on. A slice of
			// the scratch buffer is nil when nothing was read on a
			// connection whose buffer was never allocated or was let go,
			// so an empty answer takes a non-nil empty slice instead.
			sp.RecordBatches = noRecords
			switch {
			case fp.Range.Len() > 0:
				sp.RecordBatches = zc.add(fp.Range)
				fp.Range = segment.FileRange{} // zc's now
			case fp.End > fp.Start:
				sp.RecordBatches = buf[fp.Start:fp.End:fp.End]
			}
		}
	}
}

// fetchKey names a partition of a fetch.
type fetchKey struct {
	topic string
	index int32
}

// fetchNamed is the set of partitions the fetch r names, by the topic
// names resp already resolved for it (from v13, from topic ids).
func fetchNamed(r *kmsg.FetchRequest, resp *kmsg.FetchResponse) map[fetchKey]bool {
	named := make(map[fetchKey]bool)
	for i := range r.Topics {
		for _, rp := range r.Topics[i].Partitions {
			named[fetchKey{resp.Topics[i].Topic, rp.Partition}] = true
		}
	}
	return named
}
