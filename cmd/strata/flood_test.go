package main

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	enc "encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/internal/loopback"
)

// Bounds of TestUnauthenticatedFlood.
//
// Memory: before it authenticates, a connection holding a frame whose
// length is below sasl.server.max.receive.size (512 KiB) costs the broker
// a 4 KiB bufio reader and a 4 KiB bufio writer (preAuthBuf in
// broker/server.go; 64 KiB each once authenticated), the first 4 KiB chunk
// of the body (it grows only as bytes arrive, and the trickle sends 4 a
// second), its goroutine's stack (8 KiB) and the conn struct, socket and
// timers (a few KiB): under floodPerConn = 32 KiB. The 1,000 held
// connections may thus add at most 1,000 × 32 KiB ≈ 31 MiB; floodSlack
// (48 MiB) covers the Go runtime's heap headroom, the 100 SCRAM loops'
// sessions and the authenticated producer. A frame of 100 MiB is refused
// from its 4-byte length and the connection closed, so those connections
// hold nothing.
//
// Latency: the authenticated producer's p99 during the flood must stay
// within max(3 × baseline p99, baseline p99 + 50 ms). The held frames
// reserve their 500 KiB of queued.max.request.bytes but may take only half
// of it (broker/reqmem.go), so authenticated requests do not wait behind
// them, however large.
const (
	floodConns   = 1000
	floodSCRAM   = 100
	floodPerConn = 32 << 10
	floodSlack   = 48 << 20
)

// TestUnauthenticatedFlood floods a node's SASL_PLAINTEXT listener with
// 1,000 connections announcing 100 MiB frames, 1,000 connections holding
// a 500 KiB frame open with a trickle of bytes, and 100 clients failing
// SCRAM in a loop, while an authenticated producer measures its latency.
// The node's RSS stays within the bound above, the producer never fails,
// its p99 stays within the bound above, a client that logs in during the
// flood produces a 256 KiB record at once, and a new authenticated client
// works afterwards.
//
// The attacking clients run in this process, on the broker's cores, so
// they are written to cost what they cost an attacker's own machines and
// no more: the failing SCRAM logins compute their salted password once
// (floodBadLogin). With franz-go's SCRAM client, which runs PBKDF2 on every
// attempt, they took three quarters of this process's CPU and the
// producer's p99 was 160-400 ms; the broker itself was under a third of a
// core.
func TestUnauthenticatedFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods a real node for about 30 s")
	}
	addr := loopback.Addrs(t, 1)[0]
	n := startNode(t, nil, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--http-listen", "off",
		"--listener", "CLIENTS=SASL_PLAINTEXT://"+addr,
		"--sasl-mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512",
		"--sasl-bootstrap-user", "admin:flood-pw-1")
	pid := n.cmd.Process.Pid
	auth := func(pass string) kgo.Opt {
		return kgo.SASL(scram.Auth{User: "admin", Pass: pass}.AsSha512Mechanism())
	}
	newAuthed := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), auth("flood-pw-1"), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.DefaultProduceTopic("flood"), kgo.ProducerLinger(0), kgo.RecordRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := newAuthed()
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "flood"); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	produce := func(d time.Duration) []time.Duration {
		var lat []time.Duration
		rec := &kgo.Record{Value: []byte("flood-probe-0123456789")}
		for end := time.Now().Add(d); time.Now().Before(end); {
			start := time.Now()
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: rec.Value}).FirstErr(); err != nil {
				t.Errorf("authenticated produce failed: %v", err)
				return lat
			}
			lat = append(lat, time.Since(start))
		}
		return lat
	}
	produce(time.Second) // warm up
	base := produce(5 * time.Second)
	baseRSS := floodRSS(t, pid)
	b50, b99 := floodPct(base, 50), floodPct(base, 99)
	t.Logf("baseline: %d produces, p50 %v p99 %v, RSS %.1f MiB", len(base), b50, b99, floodMiB(baseRSS))

	// The flood.
	floodCtx, stopFlood := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var refused, held, scramFails, scramErrs atomic.Int64
	var connsMu sync.Mutex
	var conns []net.Conn
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil
		}
		connsMu.Lock()
		conns = append(conns, c)
		connsMu.Unlock()
		return c
	}
	prefix := func(size uint32) []byte {
		var b [4]byte
		enc.BigEndian.PutUint32(b[:], size)
		return b[:]
	}
	// Wave 1: 100 MiB lengths, refused before a byte of body is read.
	for i := 0; i < floodConns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial()
			if c == nil {
				return
			}
			c.Write(prefix(100 << 20))
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			var one [1]byte
			if _, err := c.Read(one[:]); err != nil {
				refused.Add(1)
			}
			c.Close()
		}()
	}
	// Wave 2: 500 KiB lengths (allowed before authentication) and a
	// trickle of 4 bytes a second, held until the flood ends.
	for i := 0; i < floodConns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial()
			if c == nil {
				return
			}
			defer c.Close()
			if _, err := c.Write(prefix(500 << 10)); err != nil {
				return
			}
			held.Add(1)
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-floodCtx.Done():
					return
				case <-tick.C:
					if _, err := c.Write([]byte("abcd")); err != nil {
						held.Add(-1)
						return
					}
				}
			}
		}()
	}
	// 100 clients failing SCRAM-SHA-512 in a loop, each attempt on a new
	// connection, as a password-guessing client would (floodBadLogin).
	var salted floodSaltCache
	for i := 0; i < floodSCRAM; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for floodCtx.Err() == nil {
				failed, err := floodBadLogin(floodCtx, addr, "admin", "wrong-password", &salted)
				if failed {
					scramFails.Add(1)
				} else if err != nil && floodCtx.Err() == nil {
					scramErrs.Add(1)
					time.Sleep(10 * time.Millisecond) // no busy loop if the broker refuses
				}
			}
		}()
	}
	var maxRSS atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := floodRSSOf(pid); r > maxRSS.Load() {
				maxRSS.Store(r)
			}
			select {
			case <-floodCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	// Meanwhile a new client logs in and produces a 256 KiB record: a
	// request larger than what the held frames leave of the request
	// memory when they may take all of it.
	bigDone := make(chan error, 1)
	var bigTook time.Duration
	go func() {
		time.Sleep(4 * time.Second)
		big, err := kgo.NewClient(kgo.SeedBrokers(addr), auth("flood-pw-1"), kgo.DefaultProduceTopic("flood"), kgo.RecordRetries(0))
		if err != nil {
			bigDone <- err
			return
		}
		defer big.Close()
		v := make([]byte, 256<<10)
		rand.Read(v) // incompressible: the request is as large as the record
		start := time.Now()
		bctx, bcancel := context.WithTimeout(floodCtx, 5*time.Second)
		defer bcancel()
		err = big.ProduceSync(bctx, &kgo.Record{Value: v}).FirstErr()
		bigTook = time.Since(start) // the login included: the client connects lazily
		bigDone <- err
	}()
	during := produce(15 * time.Second)
	bigErr := <-bigDone
	if bigErr != nil || bigTook > 2*time.Second {
		t.Errorf("a 256 KiB produce by a client that logged in during the flood: %v after %v; want it done within 2 s", bigErr, bigTook)
	}
	heldAtEnd := held.Load()
	stopFlood()
	wg.Wait()
	<-sampled
	for _, c := range conns {
		c.Close()
	}
	d50, d99 := floodPct(during, 50), floodPct(during, 99)
	bound := int64(floodConns*floodPerConn + floodSlack)
	grew := maxRSS.Load() - baseRSS
	t.Logf("flood: %d refused of %d, %d held at end, %d failed SCRAM logins (%d other errors)", refused.Load(), floodConns, heldAtEnd, scramFails.Load(), scramErrs.Load())
	t.Logf("during: %d produces, p50 %v p99 %v; max RSS %.1f MiB (+%.1f MiB, bound %.1f MiB)",
		len(during), d50, d99, floodMiB(maxRSS.Load()), floodMiB(grew), floodMiB(bound))
	fmt.Printf("FLOOD_RESULT base_rss_mib=%.1f max_rss_mib=%.1f growth_mib=%.1f bound_mib=%.1f base_p50=%v base_p99=%v flood_p50=%v flood_p99=%v held=%d refused=%d scram_fails=%d scram_errs=%d big_produce=%v\n",
		floodMiB(baseRSS), floodMiB(maxRSS.Load()), floodMiB(grew), floodMiB(bound), b50, b99, d50, d99, heldAtEnd, refused.Load(), scramFails.Load(), scramErrs.Load(), bigTook.Round(time.Millisecond))

	if refused.Load() < floodConns*9/10 {
		t.Errorf("only %d of %d connections announcing 100 MiB were closed", refused.Load(), floodConns)
	}
	if heldAtEnd < floodConns*9/10 {
		t.Errorf("only %d of %d trickling connections were held open: the flood did not load the broker", heldAtEnd, floodConns)
	}
	if scramFails.Load() < floodSCRAM {
		t.Errorf("only %d failed SCRAM logins", scramFails.Load())
	}
	if grew > bound {
		t.Errorf("RSS grew by %.1f MiB during the flood, above the bound of %.1f MiB", floodMiB(grew), floodMiB(bound))
	}
	if limit := max(3*b99, b99+50*time.Millisecond); d99 > limit {
		t.Errorf("authenticated p99 during the flood %v, above max(3 × %v, %v + 50 ms) = %v", d99, b99, b99, limit)
	}
	// The held connections are gone and a new authenticated client works.
	fresh := newAuthed()
	defer fresh.Close()
	if err := fresh.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Errorf("a new authenticated client after the flood: %v", err)
	}
}

// floodRSS is the process's resident set size in bytes (VmRSS).
func floodRSS(t *testing.T, pid int) int64 {
	t.Helper()
	r := floodRSSOf(pid)
	if r == 0 {
		t.Fatalf("no VmRSS for pid %d", pid)
	}
	return r
}

func floodRSSOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func floodPct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)]
}

func floodMiB(b int64) float64 { return float64(b) / (1 << 20) }

// floodBadLogin is one SCRAM-SHA-512 login with a wrong password on a new
// connection, byte for byte the exchange franz-go's client sends (kgo with
// sasl/scram): ApiVersions v4, SaslHandshake v1, then the client-first and
// client-final messages in SaslAuthenticate v2. It differs from that client
// in one way only: the salted password (PBKDF2, thousands of HMAC-SHA-512
// rounds) is computed once per salt and iteration count and then taken from
// salted, because an attacker runs it on its own machines, not on the
// broker's cores, and a guessing client that keeps the same wrong password
// need not compute it twice. It reports whether the broker answered with
// SASL_AUTHENTICATION_FAILED.
func floodBadLogin(ctx context.Context, addr, user, password string, salted *floodSaltCache) (bool, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	// The broker waits connection.failed.authentication.delay.ms (100 ms)
	// before it answers a failure; 5 s is a broker that does not answer.
	c.SetDeadline(time.Now().Add(5 * time.Second))
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("flood"))
	var corr int32
	roundTrip := func(req kmsg.Request) (kmsg.Response, error) {
		corr++
		if _, err := c.Write(f.AppendRequest(nil, req, corr)); err != nil {
			return nil, err
		}
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return nil, err
		}
		body := make([]byte, enc.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(c, body); err != nil {
			return nil, err
		}
		if len(body) < 4 || int32(enc.BigEndian.Uint32(body)) != corr {
			return nil, fmt.Errorf("%s: bad response header", kmsg.NameForKey(req.Key()))
		}
		body = body[4:]
		resp := req.ResponseKind()
		if resp.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) { // response header v1
			rd := kbin.Reader{Src: body}
			kmsg.SkipTags(&rd)
			body = rd.Src
		}
		return resp, resp.ReadFrom(body)
	}
	api := kmsg.NewPtrApiVersionsRequest()
	api.Version, api.ClientSoftwareName, api.ClientSoftwareVersion = 4, "kgo", "unknown"
	if _, err := roundTrip(api); err != nil {
		return false, err
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "SCRAM-SHA-512"
	if r, err := roundTrip(hs); err != nil {
		return false, err
	} else if code := r.(*kmsg.SASLHandshakeResponse).ErrorCode; code != 0 {
		return false, kerr.ErrorForCode(code)
	}
	nonce := make([]byte, 20)
	rand.Read(nonce)
	clientBare := "n=" + user + ",r=" + base64.RawStdEncoding.EncodeToString(nonce)
	authenticate := func(msg string) (*kmsg.SASLAuthenticateResponse, error) {
		a := kmsg.NewPtrSASLAuthenticateRequest()
		a.Version, a.SASLAuthBytes = 2, []byte(msg)
		r, err := roundTrip(a)
		if err != nil {
			return nil, err
		}
		return r.(*kmsg.SASLAuthenticateResponse), nil
	}
	first, err := authenticate("n,," + clientBare)
	if err != nil {
		return false, err
	}
	if first.ErrorCode != 0 {
		return first.ErrorCode == kerr.SaslAuthenticationFailed.Code, kerr.ErrorForCode(first.ErrorCode)
	}
	serverFirst := string(first.SASLAuthBytes)
	attrs := strings.Split(serverFirst, ",")
	if len(attrs) < 3 || !strings.HasPrefix(attrs[0], "r=") || !strings.HasPrefix(attrs[1], "s=") || !strings.HasPrefix(attrs[2], "i=") {
		return false, fmt.Errorf("server-first-message %q", serverFirst)
	}
	salt, err := base64.StdEncoding.DecodeString(attrs[1][2:])
	if err != nil {
		return false, err
	}
	iterations, err := strconv.Atoi(attrs[2][2:])
	if err != nil {
		return false, err
	}
	saltedPassword, err := salted.get(password, salt, iterations)
	if err != nil {
		return false, err
	}
	clientKey := floodHMAC(saltedPassword, "Client Key")
	storedKey := sha512.Sum512(clientKey)
	withoutProof := "c=biws,r=" + attrs[0][2:] // biws: base64 of the GS2 header "n,,"
	proof := floodHMAC(storedKey[:], clientBare+","+serverFirst+","+withoutProof)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	final, err := authenticate(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof))
	if err != nil {
		return false, err
	}
	if final.ErrorCode != kerr.SaslAuthenticationFailed.Code {
		return false, fmt.Errorf("a wrong password was answered with %v", kerr.ErrorForCode(final.ErrorCode))
	}
	return true, nil
}

func floodHMAC(key []byte, msg string) []byte {
	m := hmac.New(sha512.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// floodSaltCache holds SCRAM-SHA-512 salted passwords by password, salt
// and iteration count.
type floodSaltCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *floodSaltCache) get(password string, salt []byte, iterations int) ([]byte, error) {
	key := fmt.Sprintf("%s\x00%x\x00%d", password, salt, iterations)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[key]; ok {
		return v, nil
	}
	v, err := pbkdf2.Key(sha512.New, password, salt, iterations, sha512.Size)
	if err != nil {
		return nil, err
	}
	if s.m == nil {
		s.m = make(map[string][]byte)
	}
	s.m[key] = v
	return v, nil
}
