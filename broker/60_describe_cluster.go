package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeCluster: v0-2
//
// The cluster id, the controller and the registered brokers (KIP-700).
// EndpointType (v1) 1, brokers, is the only endpoint type served.
// Fenced brokers (heartbeats stopped) are left out, as Kafka leaves them
// out, unless a v2 request sets IncludeFencedBrokers; they then come with
// IsFenced (KIP-1073), so an operator sees a broker that is down.
func init() { register(kmsg.DescribeCluster, 0, 2, (*Broker).handleDescribeCluster) }

func (b *Broker) handleDescribeCluster(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeClusterRequest)
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	if r.Version >= 1 && r.EndpointType != 1 {
		resp.ErrorCode = kerr.UnsupportedEndpointType.Code
		resp.ErrorMessage = kmsg.StringPtr("only broker endpoints (type 1) are served")
		return resp, nil
	}
	resp.EndpointType = 1
	resp.ClusterID = b.node.ClusterID()
	resp.ControllerID = b.meta.ControllerID()
	resp.ClusterAuthorizedOperations = authorizedOperationsOmitted
	includeFenced := r.Version >= 2 && r.IncludeFencedBrokers
	for _, br := range sortedBrokers(b.meta.State()) {
		if br.Fenced && !includeFenced {
			continue
		}
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Rack = br.ID, rack(br)
		rb.Host, rb.Port = req.conn.endpoint(br)
		rb.IsFenced = br.Fenced
		resp.Brokers = append(resp.Brokers, rb)
	}
	return resp, nil
}
