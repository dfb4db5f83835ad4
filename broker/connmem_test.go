package broker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rssBytes is the resident set size of this process, which holds the
// broker under test.
func rssBytes(t testing.TB) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("resident memory is not readable here: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Skip("no VmRSS in /proc/self/status")
	return 0
}

// TestRequestMemoryBound is issue 9's connection memory bound: 64
// connections that each announce a 100 MiB request, send 16 MiB of it and
// stall grow the broker's resident memory by less than 400 MiB under the
// default queued.max.request.bytes, and other clients are served
// meanwhile.
func TestRequestMemoryBound(t *testing.T) {
	const (
		conns    = 64
		announce = 100 << 20
		sent     = 16 << 20
		limit    = 400 << 20
	)
	b := testBroker(t, "")
	createTopic(t, testAdmin(t, b), "served", 2, nil)
	body := make([]byte, sent) // shared by every writer, allocated before the baseline
	for i := range body {
		body[i] = byte(i)
	}
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], announce)

	runtime.GC()
	debug.FreeOSMemory()
	base := rssBytes(t)
	var peak atomic.Int64
	sample := func() {
		if r := rssBytes(t); r > peak.Load() {
			peak.Store(r)
		}
	}
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				sample()
			}
		}
	}()

	var writers sync.WaitGroup
	var written atomic.Int32
	open := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range open {
			c.Close() // unblocks the writers the broker no longer reads from
		}
		writers.Wait()
	}()
	for range conns {
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		writers.Add(1)
		go func() {
			defer writers.Done()
			if _, err := c.Write(prefix[:]); err != nil {
				return
			}
			if _, err := c.Write(body); err == nil {
				written.Add(1)
			}
		}()
	}

	// Other clients are served while the stalled requests sit there.
	produceKeyed(t, b, "served", 200, 1000)
	consumeExactlyOnce(t, b, "served", 200, 1000)

	// Give the broker the time to read whatever it is going to read: all
	// the writes go through, or those it does not read from stay blocked.
	deadline := time.Now().Add(5 * time.Second)
	for written.Load() < conns && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	close(stopSampling)
	sampler.Wait()
	sample()
	growth := peak.Load() - base
	t.Logf("resident memory grew by %d MiB (%d of %d connections wrote all %d MiB)", growth>>20, written.Load(), conns, sent>>20)
	if growth >= limit {
		t.Fatalf("resident memory grew by %d MiB with %d stalled %d MiB requests, want less than %d MiB", growth>>20, conns, announce>>20, limit>>20)
	}
}

// TestIdleConnectionsClosed: connections.max.idle.ms. A connection that
// sends nothing, or stops in the middle of a request, is closed after the
// idle timeout and gives back the request memory it held; a connection
// that keeps sending requests stays open.
func TestIdleConnectionsClosed(t *testing.T) {
	const idle = 300 * time.Millisecond
	b := testBroker(t, "", func(c *Config) {
		c.ConnectionsMaxIdle = idle
		c.QueuedMaxRequestBytes, c.MaxRequestBytes = 1<<20, 1<<20
	})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	silent, partial, busy := dial(), dial(), dial()
	// partial announces most of the request memory and sends 10 bytes.
	frame := binary.BigEndian.AppendUint32(nil, 900<<10)
	if _, err := partial.Write(append(frame, make([]byte, 10)...)); err != nil {
		t.Fatal(err)
	}

	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(apis[av.Key()].max)
	rd := bufio.NewReader(busy)
	busy.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range 10 { // three idle timeouts' worth of activity
		writeFrames(t, busy, int32(i), av)
		if corr := int32(binary.BigEndian.Uint32(readFrame(t, rd))); corr != int32(i) {
			t.Fatalf("busy connection: correlation id %d, want %d", corr, i)
		}
		time.Sleep(idle / 3)
	}

	for name, c := range map[string]net.Conn{"silent": silent, "stalled mid-request": partial} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("%s connection: read %d bytes, %v; want it closed (EOF)", name, n, err)
		}
	}

	// The stalled request's memory is free again: a request larger than
	// what was left beside it goes through.
	cl := testClient(t, b, kgo.DefaultProduceTopic("after-idle"))
	createTopic(t, kadmFor(cl), "after-idle", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 300<<10)}).FirstErr(); err != nil {
		t.Fatalf("produce after the stalled connection was closed: %v", err)
	}
}

// TestLargeRequestBuffersLetGo: a connection that sent a large request
// and stays open does not keep the request's memory.
func TestLargeRequestBuffersLetGo(t *testing.T) {
	const (
		conns = 16
		value = 8 << 20
	)
	b := testBroker(t, "")
	createTopic(t, testAdmin(t, b), "large", 1, map[string]*string{"max.message.bytes": ptr("16777216")})
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(apis[req.Key()].max)
	req.Acks = 1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "large"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = rawBatch(-1, -1, -1, time.Now().UnixMilli(), string(make([]byte, value)))
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range conns {
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // open, idle, until the test ends
		c.SetDeadline(time.Now().Add(20 * time.Second))
		writeFrames(t, c, int32(i), req)
		var resp kmsg.ProduceResponse
		resp.SetVersion(req.GetVersion())
		frame := readFrame(t, bufio.NewReader(c))
		if err := resp.ReadFrom(frame[5:]); err != nil { // correlation id, header tags
			t.Fatal(err)
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("produce %d: %v", i, kerr.ErrorForCode(code))
		}
	}
	rp.Records, req = nil, nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d MiB", growth>>20)
	if growth > conns*value/4 {
		t.Fatalf("heap grew by %d MiB after %d connections each sent one %d MiB request, want less than %d MiB",
			growth>>20, conns, value>>20, conns*value/4>>20)
	}
}

// TestCloseWithConnectionsWaitingForMemory: a connection waiting for
// request memory does not hold up the broker's shutdown.
func TestCloseWithConnectionsWaitingForMemory(t *testing.T) {
	b := testBroker(t, "", func(c *Config) { c.QueuedMaxRequestBytes, c.MaxRequestBytes = 1<<20, 1<<20 })
	frame := binary.BigEndian.AppendUint32(nil, 900<<10)
	var conns []net.Conn
	for range 2 { // the first holds 900 KiB of 1 MiB, the second waits
		c, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(append(frame, make([]byte, 10)...)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	waitFor(t, 10*time.Second, "the second connection to wait for memory", func() bool {
		b.reqMem.mu.Lock()
		defer b.reqMem.mu.Unlock()
		return len(b.reqMem.mu.waiters) > 0
	})
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return with a connection waiting for request memory")
	}
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("connection %d after Close: read %d bytes, %v; want EOF", i, n, err)
		}
	}
}
