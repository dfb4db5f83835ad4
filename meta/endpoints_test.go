package meta

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestBrokerEndpoints: a broker registers one endpoint per listener;
// clients of a listener are told that endpoint, and a broker without it
// (registered before there were several) its Host and Port. Metadata
// written before endpoints existed still decodes.
func TestBrokerEndpoints(t *testing.T) {
	h := newHarness(t)
	eps := []Endpoint{{Name: "INTERNAL", Host: "10.0.0.1", Port: 9092, Security: "SSL"}, {Name: "EXTERNAL", Host: "kafka.example", Port: 19092, Security: "SASL_SSL"}}
	h.must(kindRegisterBroker, registerBrokerCmd{Broker{ID: 1, Host: "10.0.0.1", Port: 9092, Endpoints: eps, Incarnation: "a"}})
	b := h.f.state().Brokers[1]
	if !slices.Equal(b.Endpoints, eps) {
		t.Fatalf("endpoints = %+v", b.Endpoints)
	}
	if host, port := b.Endpoint("EXTERNAL"); host != "kafka.example" || port != 19092 {
		t.Fatalf("EXTERNAL = %s:%d", host, port)
	}
	if host, port := b.Endpoint("OTHER"); host != "10.0.0.1" || port != 9092 {
		t.Fatalf("an unknown listener = %s:%d, want Host and Port", host, port)
	}

	// A new advertised address for one listener is a change.
	ch := h.f.changed()
	moved := slices.Clone(eps)
	moved[1].Port = 29092
	h.must(kindRegisterBroker, registerBrokerCmd{Broker{ID: 1, Host: "10.0.0.1", Port: 9092, Endpoints: moved, Incarnation: "a"}})
	<-ch
	if _, port := h.f.state().Brokers[1].Endpoint("EXTERNAL"); port != 29092 {
		t.Fatalf("re-registered EXTERNAL port = %d", port)
	}

	var old Broker
	if err := json.Unmarshal([]byte(`{"ID":2,"Host":"h","Port":1,"Rack":"","Incarnation":"x","Epoch":3}`), &old); err != nil {
		t.Fatal(err)
	}
	if host, port := old.Endpoint("PLAINTEXT"); host != "h" || port != 1 || old.Endpoints != nil {
		t.Fatalf("old broker = %+v", old)
	}
	if data, _ := json.Marshal(old); string(data) != `{"ID":2,"Host":"h","Port":1,"Rack":"","Incarnation":"x","Epoch":3,"Fenced":false,"ShuttingDown":false}` {
		t.Fatalf("a broker without endpoints encodes as %s", data)
	}
}
