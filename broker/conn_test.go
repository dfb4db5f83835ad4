package broker

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPipelinedRequestsAnsweredInOrder: the protocol requires responses on
// a connection in request order; several requests written at once come
// back with their correlation ids in the order sent.
func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	b := testBroker(t, "")
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out []byte
	reqs := []kmsg.Request{kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrMetadataRequest(), kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrDescribeClusterRequest(), kmsg.NewPtrMetadataRequest()}
	for i, r := range reqs {
		r.SetVersion(apis[r.Key()].max)
		body := encodeRequest(r, int32(100+i))
		out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if _, err := c.Write(out); err != nil { // all at once
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(c)
	for i := range reqs {
		resp := readFrame(t, rd)
		if corr := int32(binary.BigEndian.Uint32(resp)); corr != int32(100+i) {
			t.Fatalf("response %d has correlation id %d, want %d", i, corr, 100+i)
		}
	}
}

// TestLongPollDoesNotBlockOthers: a fetch parked in its long poll holds
// only its own connection; produce on another connection is answered at
// once, and the parked fetch wakes as soon as the data is committed.
func TestLongPollDoesNotBlockOthers(t *testing.T) {
	b := testBroker(t, "")
	prod := testClient(t, b, kgo.DefaultProduceTopic("poll"))
	createTopic(t, kadmFor(prod), "poll", 1, nil)
	topics, err := kadmFor(prod).ListTopics(context.Background(), "poll")
	if err != nil {
		t.Fatal(err)
	}
	fetcher := testClient(t, b)

	fetched := make(chan time.Time, 1)
	go func() {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 10_000
		req.MinBytes = 1
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = "poll", topics["poll"].ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), fetcher)
		if err == nil && len(resp.Topics) == 1 && len(resp.Topics[0].Partitions[0].RecordBatches) > 0 {
			fetched <- time.Now()
		}
		close(fetched)
	}()
	time.Sleep(300 * time.Millisecond) // let the fetch park

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("wake up")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	produced := time.Now()
	if took := produced.Sub(start); took > 2*time.Second {
		t.Fatalf("produce took %v while a fetch was parked", took)
	}
	select {
	case at, ok := <-fetched:
		if !ok {
			t.Fatal("the parked fetch returned no records")
		}
		if wait := at.Sub(produced); wait > 2*time.Second {
			t.Fatalf("the parked fetch woke %v after the produce", wait)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the parked fetch did not wake on new data")
	}
}

// writeFrames writes reqs to c in one write, as a client pipelining them
// would, with correlation ids from corr on.
func writeFrames(t *testing.T, c net.Conn, corr int32, reqs ...kmsg.Request) {
	t.Helper()
	var out []byte
	for i, r := range reqs {
		body := encodeRequest(r, corr+int32(i))
		out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
}

// acksZeroProduce is an acks=0 Produce of one batch to topic/partition.
func acksZeroProduce(topic string, partition int32) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(apis[req.Key()].max)
	req.Acks = 0
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = rawBatch(-1, -1, -1, time.Now().UnixMilli(), "fire and forget")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// TestResponseBeforeAcksZeroProduceIsSent: a request pipelined in front of
// an acks=0 Produce is answered although the Produce itself gets no
// response; nothing waits in the broker's write buffer for a later
// request that may never come.
func TestResponseBeforeAcksZeroProduceIsSent(t *testing.T) {
	b := testBroker(t, "")
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(apis[av.Key()].max)
	writeFrames(t, c, 7, av, acksZeroProduce("fire", 0))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp := readFrame(t, bufio.NewReader(c))
	if corr := int32(binary.BigEndian.Uint32(resp)); corr != 7 {
		t.Fatalf("response has correlation id %d, want 7 (the ApiVersions)", corr)
	}
}

// TestAcksZeroFailureClosesConnection: an acks=0 producer gets no response,
// so Kafka tells it about a failed partition by closing the connection,
// after which the client refreshes its metadata. Responses to requests
// pipelined before the failed produce are still delivered; a produce that
// succeeds leaves the connection open.
func TestAcksZeroFailureClosesConnection(t *testing.T) {
	b := testBroker(t, "")
	createTopic(t, testAdmin(t, b), "fire", 1, nil)
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(apis[av.Key()].max)

	// Success: the connection stays open and serves the next request.
	writeFrames(t, c, 1, acksZeroProduce("fire", 0), av)
	if corr := int32(binary.BigEndian.Uint32(readFrame(t, rd))); corr != 2 {
		t.Fatalf("response has correlation id %d, want 2", corr)
	}

	// Partition 3 of a one-partition topic fails: the ApiVersions before
	// it is answered, then the connection closes.
	writeFrames(t, c, 3, av, acksZeroProduce("fire", 3), av)
	if corr := int32(binary.BigEndian.Uint32(readFrame(t, rd))); corr != 3 {
		t.Fatalf("response has correlation id %d, want 3", corr)
	}
	if n, err := rd.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after a failed acks=0 produce: read %d bytes, %v; want the connection closed (EOF)", n, err)
	}
}
