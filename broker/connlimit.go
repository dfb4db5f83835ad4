package broker

import (
	"net"
	"sync"
)

// connsPerIP counts the open Kafka connections of each client address, so
// that one address cannot hold unbounded connections
// (max.connections.per.ip). A connection over the bound is closed as soon
// as it is accepted, before anything is read from it.
type connsPerIP struct {
	mu struct {
		sync.Mutex
		n map[string]int // by remote IP; entries at zero are deleted
	}
}

// acquire counts a new connection from ip and reports whether it is
// within max (0: no bound). A connection refused is not counted.
func (p *connsPerIP) acquire(ip string, max int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if max > 0 && p.mu.n[ip] >= max {
		return false
	}
	if p.mu.n == nil {
		p.mu.n = map[string]int{}
	}
	p.mu.n[ip]++
	return true
}

// release forgets a closed connection from ip.
func (p *connsPerIP) release(ip string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.n[ip]--; p.mu.n[ip] <= 0 {
		delete(p.mu.n, ip)
	}
}

// remoteIP is a connection's client address without its port.
func remoteIP(c net.Conn) string {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}
