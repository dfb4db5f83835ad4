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
		resp.ErrorMessage = kmsg.StringPtr("only broker endpoints (type 1) are served")
		return resp, nil
	}
	resp.EndpointType = 1
	resp.ClusterID = b.cfg.ClusterID
	resp.ControllerID = b.meta.ControllerID()
	resp.ClusterAuthorizedOperations = authorizedOperationsOmitted
	for _, br := range sortedBrokers(b.meta.State()) {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = br.ID, br.Host, br.Port, rack(br)
		resp.Brokers = append(resp.Brokers, rb)
	}
	return resp, nil
}
