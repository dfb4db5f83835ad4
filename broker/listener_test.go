package broker

import (
	"strings"
	"testing"
)

// TestListenersConfig: the one-listener form still means one PLAINTEXT
// listener, and a listener list that cannot work is refused naming the
// listener at fault.
func TestListenersConfig(t *testing.T) {
	c := Config{DataDir: "x", Listen: "127.0.0.1:0", Advertised: "h:1"}.WithDefaults()
	if len(c.Listeners) != 1 || c.Listeners[0] != (Listener{Name: "PLAINTEXT", Security: Plaintext, Addr: "127.0.0.1:0", Advertised: "h:1"}) || c.InterBrokerListener != "PLAINTEXT" {
		t.Fatalf("Listen became %+v, inter-broker %q", c.Listeners, c.InterBrokerListener)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ls    []Listener
		inter string
		want  string
	}{
		{[]Listener{{Name: "A", Security: Plaintext, Addr: ":0"}, {Name: "A", Security: Plaintext, Addr: ":0"}}, "", "listener A: named twice"},
		{[]Listener{{Name: "A", Security: "TLS", Addr: ":0"}}, "", `listener A: unknown security protocol "TLS"`},
		{[]Listener{{Name: "A", Addr: ":0"}}, "", `listener A: unknown security protocol ""`},
		{[]Listener{{Name: "SSL", Addr: ":0"}}, "", "listener SSL: SSL needs a TLS certificate"},
		{[]Listener{{Name: "A", Security: Plaintext, Addr: "nope"}}, "", `listener A: address "nope"`},
		{[]Listener{{Name: "A", Security: Plaintext, Addr: ":0"}}, "B", `inter-broker listener "B": no listener of that name`},
	} {
		err := Config{DataDir: "x", Listeners: tc.ls, InterBrokerListener: tc.inter}.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v inter %q: got %v, want %q", tc.ls, tc.inter, err, tc.want)
		}
	}
}
