package loopback

import (
	"net"
	"strconv"
	"testing"
)

// TestAddrs: the addresses are distinct, below the ephemeral range, and
// free: a server can bind each one.
func TestAddrs(t *testing.T) {
	addrs := Addrs(t, 20)
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if p < lowest || p >= ephemeralLow() {
			t.Errorf("%s: port outside [%d, %d)", a, lowest, ephemeralLow())
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("bind %s: %v", a, err)
		}
		ln.Close()
	}
}
