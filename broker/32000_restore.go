package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/extension"
	"strata/broker/node"
	"strata/tier/format"
)

// StrataRestore: v0 (Strata's own API, key 32000; broker/extension)
//
// Restores topics from the bucket's newest metadata checkpoint, or the
// newest of the metadata history the request names
// (broker/node/restore.go), or with DryRun says what it would do. Only
// the controller answers: the metadata changes are its, and a restore
// may take long enough that passing it on would only add a second wait;
// other brokers answer NOT_CONTROLLER, and a client retries on the
// controller (kgo sends it there in the first place, as an admin
// request). A plan with a refused topic is answered INVALID_REQUEST with
// every refusal in the message, and nothing changes.
//
// The request runs synchronously, within its TimeoutMillis (a minute when
// unset): the client that asked waits for the answer, as for CreateTopics.
//
// Authorization: ALTER and CREATE on the cluster (a restore creates
// topics and changes the metadata), else CLUSTER_AUTHORIZATION_FAILED.
func init() {
	register(kmsg.Key(extension.RestoreKey), 0, 0, (*Broker).handleRestore)
}

// restoreDefaultTimeout bounds a request that names no timeout.
const restoreDefaultTimeout = time.Minute

func (b *Broker) handleRestore(req *request) (kmsg.Response, error) {
	r := req.kreq.(*extension.RestoreRequest)
	resp := r.ResponseKind().(*extension.RestoreResponse)
	fail := func(err error) (kmsg.Response, error) {
		code := errorCode(err)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			code = kerr.RequestTimedOut.Code
		case code == kerr.UnknownServerError.Code && errors.Is(err, node.ErrRestore):
			code = kerr.InvalidRequest.Code
		}
		b.metrics.countError(kmsg.Key(extension.RestoreKey), code)
		resp.ErrorCode, resp.ErrorMessage = code, err.Error()
		return resp, nil
	}
	if !b.authorizedCluster(req, acl.Alter) || !b.authorizedCluster(req, acl.Create) {
		return fail(fmt.Errorf("%w: restoring a cluster needs ALTER and CREATE on the cluster", kerr.ClusterAuthorizationFailed))
	}
	if b.node.Clustered() && !b.meta.IsLeader() {
		return fail(fmt.Errorf("%w: node %d is not the controller (node %d is)", kerr.NotController, b.cfg.NodeID, b.meta.ControllerID()))
	}
	timeout := restoreDefaultTimeout
	if r.TimeoutMillis > 0 {
		timeout = time.Duration(r.TimeoutMillis) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	plan, err := b.node.PlanRestore(ctx, r.Topics, r.History)
	if err != nil {
		return fail(err)
	}
	resp.Plan = wirePlan(plan)
	if refused := plan.Refused(); len(refused) > 0 {
		why := make([]string, len(refused))
		for i, t := range refused {
			why[i] = t.Name + ": " + t.Reason
		}
		b.metrics.countError(kmsg.Key(extension.RestoreKey), kerr.InvalidRequest.Code)
		resp.ErrorCode = kerr.InvalidRequest.Code
		resp.ErrorMessage = fmt.Sprintf("%v refused, nothing changed: %s", node.ErrRestore, strings.Join(why, "; "))
		return resp, nil
	}
	if r.DryRun {
		return resp, nil
	}
	if err := b.node.Restore(ctx, plan, nil); err != nil {
		return fail(err)
	}
	return resp, nil
}

// wirePlan is p as StrataRestore answers it.
func wirePlan(p *node.RestorePlan) *extension.RestorePlan {
	out := &extension.RestorePlan{History: p.History, Checkpoint: p.Checkpoint, ClusterID: p.ClusterID, Index: p.Index, WrittenMs: p.WrittenMs}
	for _, o := range p.Others {
		out.OtherHistories = append(out.OtherHistories, extension.RestoreHistory{
			History: o.History, Checkpoint: o.Checkpoint, WrittenMs: o.WrittenMs, Topics: o.Topics, Error: o.Err,
		})
	}
	for _, t := range p.Topics {
		wt := extension.RestoreTopic{
			Name: t.Name, Internal: t.Internal, Action: string(t.Action), Reason: t.Reason,
			ReplicationFactor: t.ReplicationFactor, Configs: t.Configs,
		}
		if t.ID != ([16]byte{}) {
			wt.ID = format.HexID(t.ID)
		}
		for _, pr := range t.Partitions {
			wt.Partitions = append(wt.Partitions, extension.RestorePartition{
				Partition: pr.Partition, LeaderEpoch: pr.LeaderEpoch, Manifest: pr.Manifest,
				LogStart: pr.LogStart, End: pr.End, Bytes: pr.Bytes,
			})
		}
		out.Topics = append(out.Topics, wt)
	}
	return out
}
