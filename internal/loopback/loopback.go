// Package loopback hands tests loopback addresses that nothing listens on
// yet, for servers that must know each other's addresses before any of
// them listens: raft voters, a cluster's brokers, processes started with
// --voters.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// lowest is the lowest port Addrs hands out: clear of the well-known and
// commonly configured ports below it.
const lowest = 10000

// Addrs returns n distinct 127.0.0.1 addresses whose ports were free when
// it looked.
//
// The ports come from below the kernel's ephemeral range. A port the kernel
// picked for a listener on port 0 goes back to that range when the
// listener closes, and is soon handed out again as the source port of some
// outgoing connection (a client in a test of another package, running in
// parallel); the server that binds it a moment later then fails with
// "address already in use". A port below the range is only ever taken by
// an explicit bind, so the window is another test picking the same one of
// some twenty thousand ports at the same moment.
func Addrs(tb testing.TB, n int) []string {
	tb.Helper()
	highest := ephemeralLow() - 1
	if highest-lowest < 4*n {
		return kernelPicked(tb, n)
	}
	var (
		addrs []string
		lns   []net.Listener
	)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 1000 {
			tb.Fatalf("loopback: no free port below %d after %d tries", highest+1, tries)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lowest+rand.IntN(highest-lowest+1)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken: try another
		}
		lns = append(lns, ln)
		addrs = append(addrs, addr)
	}
	return addrs
}

// ephemeralLow is the first port of the kernel's ephemeral range: Linux's
// setting when it can be read, else the IANA range's start, which BSDs,
// macOS and Windows use.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil {
				return lo
			}
		}
	}
	return 49152
}

// kernelPicked is the fallback when the ephemeral range leaves no room
// below it: ports the kernel picks, with the race Addrs otherwise avoids.
func kernelPicked(tb testing.TB, n int) []string {
	tb.Helper()
	var (
		addrs []string
		lns   []net.Listener
	)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(fmt.Errorf("loopback: %w", err))
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}
