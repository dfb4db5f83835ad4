package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawBatch encodes a v2 record batch the way a producer would.
func rawBatch(pid int64, epoch int16, seq int32, ts int64, values ...string) []byte {
	rb := kmsg.RecordBatch{
		Magic:                2,
		LastOffsetDelta:      int32(len(values) - 1),
		FirstTimestamp:       ts,
		MaxTimestamp:         ts,
		ProducerID:           pid,
		ProducerEpoch:        epoch,
		FirstSequence:        seq,
		NumRecords:           int32(len(values)),
		PartitionLeaderEpoch: -1,
	}
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		// Length counts the bytes after itself: encode once with a zero
		// length (one varint byte) to measure them.
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	rb.Records = recs
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	crc := crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli))
	binary.BigEndian.PutUint32(raw[17:], crc)
	return raw
}

// produceRaw sends one Produce request with records to topic/partition 0
// and returns the partition response.
func produceRaw(t *testing.T, cl *kgo.Client, topic string, records []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	return resp.Topics[0].Partitions[0]
}

// TestIdempotentSequences checks the broker side of KIP-98 idempotence: a
// retried batch is acknowledged with its original offset and written once,
// a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, and the state survives a restart.
func TestIdempotentSequences(t *testing.T) {
	dir := t.TempDir()
	b := testBroker(t, dir)
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "idem", 1, nil)

	pidResp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(context.Background(), cl)
	if err != nil || pidResp.ErrorCode != 0 {
		t.Fatalf("init producer id: %v %v", err, kerr.ErrorForCode(pidResp.ErrorCode))
	}
	pid := pidResp.ProducerID
	now := time.Now().UnixMilli()

	first := produceRaw(t, cl, "idem", rawBatch(pid, 0, 0, now, "a", "b"))
	if first.ErrorCode != 0 || first.BaseOffset != 0 {
		t.Fatalf("first batch: %v at %d", kerr.ErrorForCode(first.ErrorCode), first.BaseOffset)
	}
	second := produceRaw(t, cl, "idem", rawBatch(pid, 0, 2, now, "c"))
	if second.ErrorCode != 0 || second.BaseOffset != 2 {
		t.Fatalf("second batch: %v at %d", kerr.ErrorForCode(second.ErrorCode), second.BaseOffset)
	}
	retry := produceRaw(t, cl, "idem", rawBatch(pid, 0, 0, now, "a", "b"))
	if retry.ErrorCode != 0 || retry.BaseOffset != 0 {
		t.Fatalf("retried batch: %v at %d, want its original offset 0", kerr.ErrorForCode(retry.ErrorCode), retry.BaseOffset)
	}
	gap := produceRaw(t, cl, "idem", rawBatch(pid, 0, 5, now, "x"))
	if gap.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("gap: got %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", kerr.ErrorForCode(gap.ErrorCode))
	}
	if end := listOffset(t, cl, "idem", -1); end != 3 {
		t.Fatalf("log end %d after a duplicate and a gap, want 3", end)
	}

	// Restart: the producer's sequence state comes back from disk.
	cl.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := testBroker(t, dir)
	cl2 := testClient(t, b2)
	retry = produceRaw(t, cl2, "idem", rawBatch(pid, 0, 2, now, "c"))
	if retry.ErrorCode != 0 || retry.BaseOffset != 2 {
		t.Fatalf("retry after restart: %v at %d, want the original offset 2", kerr.ErrorForCode(retry.ErrorCode), retry.BaseOffset)
	}
	next := produceRaw(t, cl2, "idem", rawBatch(pid, 0, 3, now, "d"))
	if next.ErrorCode != 0 || next.BaseOffset != 3 {
		t.Fatalf("next batch after restart: %v at %d", kerr.ErrorForCode(next.ErrorCode), next.BaseOffset)
	}
	// A new producer id after restart is never one handed out before.
	pid2, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(context.Background(), cl2)
	if err != nil || pid2.ProducerID == pid {
		t.Fatalf("producer id after restart: %v, %d (before: %d)", err, pid2.ProducerID, pid)
	}
}

// TestCorruptBatchRejected: a batch whose CRC does not match is refused
// with CORRUPT_MESSAGE and nothing is written.
func TestCorruptBatchRejected(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "crc", 1, nil)
	batch := rawBatch(-1, -1, -1, time.Now().UnixMilli(), "hello")
	batch[len(batch)-1] ^= 0xff
	resp := produceRaw(t, cl, "crc", batch)
	if resp.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("got %v, want CORRUPT_MESSAGE", kerr.ErrorForCode(resp.ErrorCode))
	}
	if end := listOffset(t, cl, "crc", -1); end != 0 {
		t.Fatalf("log end %d after a rejected batch", end)
	}
}

// listOffset is listOffsetV for a partition that must answer without error.
func listOffset(t *testing.T, cl *kgo.Client, topic string, ts int64) int64 {
	t.Helper()
	off, code := listOffsetV(t, cl, topic, ts)
	if code != 0 {
		t.Fatalf("list offsets: %v", kerr.ErrorForCode(code))
	}
	return off
}

// TestBadFramesCloseOnlyThatConnection sends garbage, truncated frames, an
// unknown API and a 2 GiB length prefix on raw sockets: each connection is
// closed, nothing is allocated for the huge frame, and a client on another
// connection keeps producing and consuming throughout.
func TestBadFramesCloseOnlyThatConnection(t *testing.T) {
	b := testBroker(t, "")
	good := testClient(t, b, kgo.DefaultProduceTopic("steady"), kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := good.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	header := func(key, version int16) []byte {
		h := binary.BigEndian.AppendUint16(nil, uint16(key))
		h = binary.BigEndian.AppendUint16(h, uint16(version))
		h = binary.BigEndian.AppendUint32(h, 7)
		return binary.BigEndian.AppendUint16(h, 0xffff) // null client id
	}
	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	cases := map[string][]byte{
		"garbage":                     bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 64),
		"2GiB length":                 {0x7f, 0xff, 0xff, 0xff, 1, 2, 3},
		"negative length":             {0xff, 0xff, 0xff, 0xf0},
		"truncated length":            {0x00, 0x00},
		"truncated body":              {0x00, 0x00, 0x01, 0x00, 0x00, 0x12},
		"short header":                frame([]byte{0, 3}),
		"unknown api":                 frame(header(9999, 0)),
		"unsupported produce version": frame(append(header(0, 1), 0, 0, 0, 0)),
		"produce body cut":            frame(append(header(0, 9), 0xff)),
		"metadata garbage":            frame(append(header(3, 12), bytes.Repeat([]byte{0xff}, 40)...)),
	}
	for name, payload := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", b.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(payload); err != nil {
				t.Fatal(err)
			}
			if tc, ok := c.(*net.TCPConn); ok && (name == "truncated length" || name == "truncated body") {
				tc.CloseWrite() // the broker sees EOF mid-frame
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := io.Copy(io.Discard, c)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("connection still open after %q", name)
				}
			}
			if n != 0 {
				t.Fatalf("got %d bytes of response to %q, want the connection closed", n, name)
			}
			if err := good.ProduceSync(ctx, &kgo.Record{Value: []byte(name)}).FirstErr(); err != nil {
				t.Fatalf("other client after %q: %v", name, err)
			}
		})
	}
	if end := listOffset(t, good, "steady", -1); end != int64(len(cases)+1) {
		t.Fatalf("steady topic has %d records, want %d", end, len(cases)+1)
	}
}

// readFrame reads one length-prefixed response frame and returns what
// follows the length.
func readFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r, frame); err != nil {
		t.Fatal(err)
	}
	return frame
}

// TestApiVersionsAboveOurs: KIP-511: a client asking with a newer
// ApiVersions than we serve gets a v0 answer with UNSUPPORTED_VERSION and
// our list, rather than a closed connection.
func TestApiVersionsAboveOurs(t *testing.T) {
	b := testBroker(t, "")
	av := probeApiVersions(t, b.Addr().String())
	if av.ErrorCode != kerr.UnsupportedVersion.Code || len(av.ApiKeys) == 0 {
		t.Fatalf("error %d with %d keys", av.ErrorCode, len(av.ApiKeys))
	}
}

// probeApiVersions sends ApiVersions at a version above any we serve, as a
// client newer than the broker does first, and returns the answer.
func probeApiVersions(t *testing.T, addr string) kmsg.ApiVersionsResponse {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := binary.BigEndian.AppendUint16(nil, uint16(kmsg.ApiVersions))
	body = binary.BigEndian.AppendUint16(body, 99)
	body = binary.BigEndian.AppendUint32(body, 42)
	body = binary.BigEndian.AppendUint16(body, 0xffff)
	body = append(body, 0, 0, 0)
	c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp := readFrame(t, c)
	if corr := binary.BigEndian.Uint32(resp); corr != 42 {
		t.Fatalf("correlation id %d", corr)
	}
	var av kmsg.ApiVersionsResponse
	av.SetVersion(0)
	if err := av.ReadFrom(resp[4:]); err != nil {
		t.Fatal(err)
	}
	return av
}
