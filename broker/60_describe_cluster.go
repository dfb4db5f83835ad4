package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeCluster: v0-1
//
// The cluster id, the controller and the registered brokers (KIP-700).
// EndpointType (v1) 1, brokers, is the only endpoint type served.
//
// Not done: v2's fenced brokers (no fencing until clustering).
func init() { register(kmsg.DescribeCluster, 0, 1, (*Broker).handleDescribeCluster) }

func (b *Broker) handleDescribeCluster(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeClusterRequest)
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	if r.Version >= 1 && r.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		msg := "only broker endpoints (type 1) are served"
		resp.ErrorMessage = &msg
		return resp, nil
	}
	resp.EndpointType = 1
	resp.ClusterID = b.cfg.ClusterID
	resp.ControllerID = b.meta.ControllerID()
	resp.ClusterAuthorizedOperations = authorizedOperationsOmitted
	st := b.meta.State()
	for _, id := range sortedBrokerIDs(st) {
		br := st.Brokers[id]
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port = br.ID, br.Host, br.Port
		if br.Rack != "" {
			rack := br.Rack
			rb.Rack = &rack
		}
		resp.Brokers = append(resp.Brokers, rb)
	}
	return resp, nil
}
