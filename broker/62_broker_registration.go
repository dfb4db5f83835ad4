package broker

import (
	"context"

	"encoding/hex"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/meta"
)

// BrokerRegistration: v0-4 (inter-broker, KIP-631)
//
// A broker joining the cluster registers its incarnation with the
// controller and gets its broker epoch. Answered only by the controller
// (NOT_CONTROLLER elsewhere, which the sender retries on the new one). A
// node id held by a live broker of another incarnation is
// DUPLICATE_BROKER_REGISTRATION.
//
// Every listener becomes one of the broker's endpoints (what clients of
// that listener are told); the first is its inter-broker address, which
// is how this broker's own controller client sends them.
//
// Not done: features, log directories and the ZooKeeper migration fields
// are ignored.
func init() { register(kmsg.BrokerRegistration, 0, 4, (*Broker).handleBrokerRegistration) }

func (b *Broker) handleBrokerRegistration(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.BrokerRegistrationRequest)
	resp := r.ResponseKind().(*kmsg.BrokerRegistrationResponse)
	ctx, cancel := context.WithTimeout(b.ctx, controlTimeout)
	defer cancel()
	resp.BrokerEpoch = -1
	if len(r.Listeners) == 0 || r.BrokerID < 0 {
		resp.ErrorCode, _ = b.answerError(kmsg.BrokerRegistration, kerr.InvalidRequest)
		return resp, nil
	}
	if r.ClusterID != b.cfg.ClusterID {
		resp.ErrorCode, _ = b.answerError(kmsg.BrokerRegistration, kerr.InconsistentClusterID)
		return resp, nil
	}
	reg := meta.Registration{
		ID:          r.BrokerID,
		Host:        r.Listeners[0].Host,
		Port:        int32(r.Listeners[0].Port),
		Incarnation: hex.EncodeToString(r.IncarnationID[:]),
	}
	for _, l := range r.Listeners {
		reg.Endpoints = append(reg.Endpoints, meta.Endpoint{Name: l.Name, Host: l.Host, Port: int32(l.Port), Security: string(securityName(l.SecurityProtocol))})
	}
	if len(r.Listeners) == 1 && r.Listeners[0].Name == DefaultListenerName {
		// A lone PLAINTEXT listener is what Host and Port already say:
		// registered as before there were several.
		reg.Endpoints = nil
	}
	if r.Rack != nil {
		reg.Rack = *r.Rack
	}
	epoch, err := b.meta.RegisterBroker(ctx, reg)
	if err != nil {
		resp.ErrorCode, _ = b.answerError(kmsg.BrokerRegistration, err)
		return resp, nil
	}
	resp.BrokerEpoch = epoch
	return resp, nil
}
