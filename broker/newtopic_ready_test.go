package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/tier/objstore"
)

// A new topic is ready before it is announced (issue 25, item 3): once
// CreateTopics has answered, the Metadata of every broker names a leader
// for each partition, and that leader takes a produce at the first
// attempt. Before, the answer came before the leaders had opened their
// partitions, and a client's first produce met NOT_LEADER_OR_FOLLOWER or
// LEADER_NOT_AVAILABLE and backed off for its metadata refresh.

// firstProduceChecker creates topics through one broker and checks, at
// once, the Metadata of another and a produce to each partition's leader.
type firstProduceChecker struct {
	t       *testing.T
	clients []*kgo.Client // one per broker, seeded with it alone
	ids     []int32       // the node id of each client's broker
}

func newFirstProduceChecker(t *testing.T, brokers []*Broker) *firstProduceChecker {
	c := &firstProduceChecker{t: t}
	for _, b := range brokers {
		c.clients = append(c.clients, testClient(t, b, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite()))
		c.ids = append(c.ids, b.cfg.NodeID)
	}
	return c
}

// createThenProduce creates topic with partitions and rf through broker
// via, asks broker ask for its metadata, and produces one record, acks=all,
// to every partition's leader: each must succeed at once.
func (c *firstProduceChecker) createThenProduce(via, ask int, topic string, partitions int32, rf int16, configs map[string]string) (slowest time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 15000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, rf
	for k, v := range configs {
		rc := kmsg.NewCreateTopicsRequestTopicConfig()
		rc.Name, rc.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, rc)
	}
	req.Topics = append(req.Topics, rt)
	// Sent to the broker itself, not redirected to the controller, so
	// that a broker that is not the controller answers too.
	cresp, err := c.clients[via].Broker(int(c.ids[via])).Request(ctx, req)
	if err != nil {
		c.t.Fatalf("create %s through node %d: %v", topic, c.ids[via], err)
	}
	if err := kerr.ErrorForCode(cresp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode); err != nil {
		c.t.Fatalf("create %s through node %d: %v", topic, c.ids[via], err)
	}
	return c.produceFirst(ctx, via, ask, topic, partitions)
}

// autoCreateThenProduce has broker via create topic on first use, from a
// Metadata request that allows it, then checks it as createThenProduce
// does.
func (c *firstProduceChecker) autoCreateThenProduce(via, ask int, topic string, partitions int32) time.Duration {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = true
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := c.clients[via].Broker(int(c.ids[via])).Request(ctx, req)
	if err != nil {
		c.t.Fatalf("auto-create %s through node %d: %v", topic, c.ids[via], err)
	}
	if err := kerr.ErrorForCode(resp.(*kmsg.MetadataResponse).Topics[0].ErrorCode); err != nil {
		c.t.Fatalf("auto-create %s through node %d: %v", topic, c.ids[via], err)
	}
	return c.produceFirst(ctx, via, ask, topic, partitions)
}

// produceFirst asks broker ask for topic's metadata, which must name a
// leader for each of its partitions, and produces one record, acks=all,
// to every partition's leader: each must succeed at once. via is the
// broker that created the topic, for the messages.
func (c *firstProduceChecker) produceFirst(ctx context.Context, via, ask int, topic string, partitions int32) (slowest time.Duration) {
	c.t.Helper()
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := c.clients[ask].Broker(int(c.ids[ask])).Request(ctx, mreq)
	if err != nil {
		c.t.Fatalf("metadata of %s from node %d: %v", topic, c.ids[ask], err)
	}
	mtopic := mresp.(*kmsg.MetadataResponse).Topics[0]
	if err := kerr.ErrorForCode(mtopic.ErrorCode); err != nil || len(mtopic.Partitions) != int(partitions) {
		c.t.Fatalf("metadata of %s from node %d right after it was created through node %d: %v, %d partitions", topic, c.ids[ask], c.ids[via], err, len(mtopic.Partitions))
	}
	for _, mp := range mtopic.Partitions {
		if err := kerr.ErrorForCode(mp.ErrorCode); err != nil || mp.Leader < 0 {
			c.t.Fatalf("metadata of %s-%d from node %d right after it was created through node %d: %v, leader %d", topic, mp.Partition, c.ids[ask], c.ids[via], err, mp.Leader)
		}
		preq := kmsg.NewPtrProduceRequest()
		preq.Acks, preq.TimeoutMillis = -1, 10000
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic = topic
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Partition = mp.Partition
		pp.Records = rawBatch(-1, -1, -1, time.Now().UnixMilli(), "first")
		pt.Partitions = append(pt.Partitions, pp)
		preq.Topics = append(preq.Topics, pt)
		sent := time.Now()
		presp, err := c.clients[ask].Broker(int(mp.Leader)).Request(ctx, preq)
		slowest = max(slowest, time.Since(sent))
		if err != nil {
			c.t.Fatalf("produce to %s-%d at its leader %d: %v", topic, mp.Partition, mp.Leader, err)
		}
		if err := kerr.ErrorForCode(presp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode); err != nil {
			c.t.Fatalf("first produce to %s-%d at its leader %d, named by node %d right after node %d created it: %v", topic, mp.Partition, mp.Leader, c.ids[ask], c.ids[via], err)
		}
	}
	return slowest
}

func TestCreateTopicsFirstProduceSucceedsSingleNode(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		c := newFirstProduceChecker(t, []*Broker{testBroker(t, "")})
		for i := range 5 {
			c.createThenProduce(0, 0, fmt.Sprintf("new-%d", i), 4, 1, nil)
		}
	})
	t.Run("auto-created", func(t *testing.T) {
		c := newFirstProduceChecker(t, []*Broker{testBroker(t, "", func(cfg *Config) { cfg.DefaultPartitions = 3 })})
		for i := range 5 {
			c.autoCreateThenProduce(0, 0, fmt.Sprintf("auto-%d", i), 3)
		}
	})
	t.Run("tiered", func(t *testing.T) {
		store, err := objstore.NewDir(filepath.Join(t.TempDir(), "bucket"))
		if err != nil {
			t.Fatal(err)
		}
		c := newFirstProduceChecker(t, []*Broker{tieredBroker(t, "", store)})
		for i := range 5 {
			c.createThenProduce(0, 0, fmt.Sprintf("new-%d", i), 4, 1, nil)
		}
	})
}

func TestClusterCreateTopicsFirstProduceSucceeds(t *testing.T) {
	for _, tiered := range []bool{false, true} {
		t.Run(map[bool]string{false: "local", true: "tiered"}[tiered], func(t *testing.T) {
			// Without auto-creation a leader that has not applied the
			// new topic yet cannot lean on creating it again; the
			// tiered cluster creates topics on first use too.
			mutate := []func(*Config){func(cfg *Config) {
				cfg.AutoCreateTopics = tiered
				cfg.DefaultPartitions, cfg.DefaultReplicationFactor = 6, 3
			}}
			if tiered {
				store, err := objstore.NewDir(filepath.Join(t.TempDir(), "bucket"))
				if err != nil {
					t.Fatal(err)
				}
				mutate = append(mutate, func(cfg *Config) { cfg.Tier = TierConfig{Store: store, Where: "shared"} })
			}
			cl := testCluster(t, 3, mutate...)
			c := newFirstProduceChecker(t, cl.nodes)
			// Each broker creates a topic, the controller among them,
			// and the next one is asked for its metadata.
			for via := range 3 {
				ask := (via + 1) % 3
				d := c.createThenProduce(via, ask, fmt.Sprintf("new-%d", via), 6, 3, nil)
				t.Logf("created through node %d, asked node %d: slowest first produce %v", c.ids[via], c.ids[ask], d)
				if tiered {
					d := c.autoCreateThenProduce(via, ask, fmt.Sprintf("auto-%d", via), 6)
					t.Logf("auto-created through node %d, asked node %d: slowest first produce %v", c.ids[via], c.ids[ask], d)
				}
			}
		})
	}
}
