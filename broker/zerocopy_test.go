package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/internal/certs"
	"strata/segment"
)

// zeroCopyBroker starts a compacting broker with a PLAINTEXT listener,
// whose fetches send records with sendfile, and an SSL one, whose
// fetches copy them; both serve the same logs.
func zeroCopyBroker(t *testing.T, reg *prometheus.Registry) (*Broker, *tls.Config) {
	t.Helper()
	src, dir := devCerts(t)
	srv, err := src.ServerConfig(certs.ClientAuthNone)
	if err != nil {
		t.Fatal(err)
	}
	b := compactingBroker(t, "", reg, func(c *Config) {
		c.Listen = ""
		c.Listeners = []Listener{
			{Name: "PLAIN", Security: Plaintext, Addr: "127.0.0.1:0"},
			{Name: "SECURE", Security: SSL, Addr: "127.0.0.1:0", Advertised: "localhost:0"},
		}
		c.InterBrokerListener = "PLAIN"
		c.TLS = srv
	})
	return b, clientTLS(t, dir, "")
}

// TestZeroCopyFetchSameBytes (issue 25): a fetch answered with sendfile
// on a plaintext connection is byte for byte the response the copying
// path gives on a TLS connection, over every kind of batch (compressed
// with each codec, transactional with commits and aborts, control
// markers, compacted) and every Fetch version, at both isolation levels
// and from many offsets; and the records did go out by sendfile.
func TestZeroCopyFetchSameBytes(t *testing.T) {
	if !segment.ZeroCopy {
		t.Skip("no sendfile on this platform")
	}
	reg := prometheus.NewRegistry()
	b, tlsCfg := zeroCopyBroker(t, reg)
	adm := testAdmin(t, b)
	createTopic(t, adm, "mixed", 1, map[string]*string{"segment.bytes": ptr("65536")})
	createTopic(t, adm, "table", 1, map[string]*string{
		"cleanup.policy": ptr("compact"), "segment.bytes": ptr("32768"), "min.cleanable.dirty.ratio": ptr("0.01"),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	produceEveryKind(ctx, t, func(opts ...kgo.Opt) *kgo.Client { return testClient(t, b, opts...) }, "mixed", "zc-txn", 6)
	// A compacted topic: updates over few keys, rolled and cleaned.
	produceTable(t, b, "table", 5000, 50, 5, 1)
	produceFiller(t, b, "table", 3*32768)
	p := b.partition("table", 0)
	// Cleaned up to the active segment: no pass is left to change the
	// log between the two fetches compared.
	waitFor(t, 30*time.Second, "compaction of every closed segment", func() bool {
		cleaned, _ := p.Log().CleanerCheckpoint()
		return cleaned > 0 && cleaned >= p.Log().ActiveBase()
	})

	plain, err := net.Dial("tcp", b.ListenerAddr("PLAIN").String())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	secure, err := tls.Dial("tcp", b.ListenerAddr("SECURE").String(), tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer secure.Close()
	ids := map[string][16]byte{}
	for _, topic := range []string{"mixed", "table"} {
		ids[topic] = b.partition(topic, 0).TopicID()
	}
	fetch := func(c net.Conn, corr int32, req *kmsg.FetchRequest) []byte {
		writeFrames(t, c, corr, req)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		return readFrame(t, c)
	}
	sentBefore := counterValue(t, reg, "strata_network_sent_zero_copy_bytes_total", nil)
	compared, withRecords := 0, 0
	corr := int32(1)
	ends := map[string]int64{"mixed": b.partition("mixed", 0).HighWatermark(), "table": b.partition("table", 0).HighWatermark()}
	// One topic per request, and both in one (the second partition's
	// batches are cut to the response's budget, KIP-74: only the first
	// non-empty one may exceed it).
	for _, topics := range [][]string{{"mixed"}, {"table"}, {"mixed", "table"}, {"table", "mixed"}} {
		for _, version := range []int16{4, 7, 11, 12, 13, 16, 17} {
			for _, isolation := range []int8{0, 1} {
				for step := range int64(9) {
					for _, maxBytes := range []int32{1, 3000, 1 << 20} {
						req := kmsg.NewPtrFetchRequest()
						req.SetVersion(version)
						req.ReplicaID = -1
						req.MaxBytes, req.IsolationLevel = maxBytes, isolation
						req.SessionEpoch = -1
						for k, topic := range topics {
							rt := kmsg.NewFetchRequestTopic()
							rt.Topic, rt.TopicID = topic, ids[topic]
							rp := kmsg.NewFetchRequestTopicPartition()
							rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = 0, ends[topic]*((step+int64(k)*4)%9)/9, maxBytes
							rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
							rt.Partitions = append(rt.Partitions, rp)
							req.Topics = append(req.Topics, rt)
						}
						zc, cp := fetch(plain, corr, req), fetch(secure, corr, req)
						corr++
						if !bytes.Equal(zc, cp) {
							t.Fatalf("%v v%d isolation %d step %d max %d: sendfile's response (%d bytes) differs from the copy's (%d bytes)",
								topics, version, isolation, step, maxBytes, len(zc), len(cp))
						}
						compared++
						if len(zc) > 200 {
							withRecords++
						}
					}
				}
			}
		}
	}
	sent := counterValue(t, reg, "strata_network_sent_zero_copy_bytes_total", nil) - sentBefore
	if sent == 0 || withRecords == 0 {
		t.Fatalf("%d responses with records, %v bytes sent with sendfile: the zero-copy path was not taken", withRecords, sent)
	}
	t.Logf("%d fetch responses identical on both paths (%d with records); %.0f record bytes went out by sendfile", compared, withRecords, sent)
}

// TestZeroCopyReplication (issue 25): followers' fetches on a plaintext
// inter-broker listener are answered with sendfile too, and what the
// followers append from them is the leader's log byte for byte, over
// batches of every codec and transactions with their control markers.
func TestZeroCopyReplication(t *testing.T) {
	if !segment.ZeroCopy {
		t.Skip("no sendfile on this platform")
	}
	regs := map[int32]*prometheus.Registry{}
	var mu sync.Mutex
	c := testCluster(t, 3, func(cfg *Config) {
		reg := prometheus.NewRegistry()
		mu.Lock()
		regs[cfg.NodeID] = reg
		mu.Unlock()
		cfg.Registerer, cfg.Gatherer = reg, reg
	})
	c.createTopic("copied", 1, 3, map[string]*string{"segment.bytes": ptr("65536")})
	leader := c.partitionState("copied", 0).Leader
	before := counterValue(t, regs[leader], "strata_network_sent_zero_copy_bytes_total", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	produceEveryKind(ctx, t, c.client, "copied", "zc-replicated", 4)

	lp := c.node(leader).partition("copied", 0)
	end := lp.Log().EndOffset()
	c.waitFor("every follower at the leader's log end", 30*time.Second, func() bool {
		for id := int32(1); id <= 3; id++ {
			if p := c.node(id).partition("copied", 0); p == nil || p.Log().EndOffset() != end {
				return false
			}
		}
		return true
	})
	all := func(id int32) []byte {
		l := c.node(id).partition("copied", 0).Log()
		var out []byte
		for off := l.StartOffset(); off < end; {
			n := len(out)
			var err error
			out, err = l.Read(out, off, end, 1<<20)
			if err != nil {
				t.Fatalf("node %d: read at %d: %v", id, off, err)
			}
			if len(out) == n {
				t.Fatalf("node %d: nothing read at %d of %d", id, off, end)
			}
			off = nextOffset(out[n:])
		}
		return out
	}
	want := all(leader)
	for id := int32(1); id <= 3; id++ {
		if id == leader {
			continue
		}
		if got := all(id); !bytes.Equal(got, want) {
			t.Errorf("follower %d's log (%d bytes) is not the leader's (%d bytes)", id, len(got), len(want))
		}
	}
	sent := counterValue(t, regs[leader], "strata_network_sent_zero_copy_bytes_total", nil) - before
	if sent < float64(2*len(want)) {
		t.Errorf("the leader sent %.0f bytes by sendfile, want at least the %d its two followers copied", sent, 2*len(want))
	}
	t.Logf("%d bytes of batches replicated twice; the leader sent %.0f by sendfile", len(want), sent)
}

// nextOffset is the offset after the last of the record batches in b.
func nextOffset(b []byte) int64 {
	var next int64
	for len(b) >= 61 {
		base := int64(binary.BigEndian.Uint64(b))
		size := int(binary.BigEndian.Uint32(b[8:])) + 12
		lastDelta := int64(int32(binary.BigEndian.Uint32(b[23:])))
		next = base + lastDelta + 1
		b = b[size:]
	}
	return next
}

// produceEveryKind writes to topic batches of several sizes with every
// codec, then txns transactions of 20 records through transactional id
// txnID, every other one aborted, so the log holds control batches too.
func produceEveryKind(ctx context.Context, t *testing.T, client func(...kgo.Opt) *kgo.Client, topic, txnID string, txns int) {
	t.Helper()
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		cl := client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(5*time.Millisecond))
		for i := range 300 {
			cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%17), Value: bytes.Repeat([]byte{byte(i)}, 10+i%400)}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tx := client(kgo.DefaultProduceTopic(topic), kgo.TransactionalID(txnID))
	for i := range txns {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 20 {
			if err := tx.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "txn %d record %d", i, j)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(i%2 == 0)); err != nil {
			t.Fatal(err)
		}
	}
}
