package broker

import (
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions: v0-4
//
// Advertises exactly the API keys and versions registered by the other
// files of this package, which are the ones implemented and tested.
//
// A request at a version above ours is answered as KIP-511 asks: a v0
// response with UNSUPPORTED_VERSION and the full list, so the client can
// retry with a version we know.
//
// Not done: v5's ClusterID/NodeID checks (KIP-1242); feature flags
// (KIP-584) are empty, since no feature is finalized yet.
func init() { register(kmsg.ApiVersions, 0, 4, (*Broker).handleApiVersions) }

func (b *Broker) handleApiVersions(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.ApiVersionsRequest)
	resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
	if !supported(r.Key(), r.Version) {
		resp.SetVersion(0)
		resp.ErrorCode = kerr.UnsupportedVersion.Code
	}
	for _, k := range slices.Sorted(maps.Keys(apis)) {
		a := apis[k]
		resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: a.min, MaxVersion: a.max})
	}
	// UNSUPPORTED_VERSION is not counted: every connection of a client
	// newer than us starts with that probe, and answering it is the
	// negotiation working, not a failure.
	return resp, nil
}
