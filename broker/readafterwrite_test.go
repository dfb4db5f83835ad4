package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusterReadAfterWrite (issue 21, item 1): a metadata change one node
// acknowledged is what the client's next request reads on any node, at
// once. A topic created through the controller is in the very next
// Metadata answer of each other node; a config altered through one node
// (which passes it on to the controller) is in force on that node's
// partition when it answers, and the very next DescribeConfigs of each
// other node shows it; a topic deleted is gone from the next answer of
// each node. Twenty rounds, never a retry.
func TestClusterReadAfterWrite(t *testing.T) {
	c := testCluster(t, 3)
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	controller := c.any().meta.ControllerID()
	var others []int32
	for id := int32(1); id <= 3; id++ {
		if id != controller {
			others = append(others, id)
		}
	}
	request := func(id int32, req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := cl.Broker(int(id)).Request(ctx, req)
		if err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
		return resp
	}

	for i := range 20 {
		topic := fmt.Sprintf("raw-%d", i)
		create := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 3
		create.Topics = append(create.Topics, rt)
		create.TimeoutMillis = 10_000
		if r := request(controller, create).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != 0 {
			t.Fatalf("create %s: error %d", topic, r.Topics[0].ErrorCode)
		}
		for _, id := range others {
			r := request(id, metadataOf(topic)).(*kmsg.MetadataResponse)
			switch {
			case len(r.Topics) != 1:
				t.Errorf("round %d: node %d answers Metadata for %s with %d topics", i, id, topic, len(r.Topics))
			case r.Topics[0].ErrorCode != 0 || len(r.Topics[0].Partitions) != 1:
				t.Errorf("round %d: node %d answers Metadata for %s just created: %v, %d partitions", i, id, topic, kerr.ErrorForCode(r.Topics[0].ErrorCode), len(r.Topics[0].Partitions))
			}
		}
	}

	// And a topic deleted is gone from the next answer of every node.
	for i := range 5 {
		topic := fmt.Sprintf("raw-%d", i)
		del := kmsg.NewPtrDeleteTopicsRequest()
		dt := kmsg.NewDeleteTopicsRequestTopic()
		dt.Topic = kmsg.StringPtr(topic)
		del.Topics = append(del.Topics, dt)
		del.TopicNames = append(del.TopicNames, topic)
		del.TimeoutMillis = 10_000
		if r := request(controller, del).(*kmsg.DeleteTopicsResponse); r.Topics[0].ErrorCode != 0 {
			t.Fatalf("delete %s: error %d", topic, r.Topics[0].ErrorCode)
		}
		for _, id := range others {
			r := request(id, metadataOf(topic)).(*kmsg.MetadataResponse)
			if len(r.Topics) != 1 || r.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
				t.Errorf("node %d still answers Metadata for %s just deleted", id, topic)
			}
		}
	}

	c.createTopic("configs", 1, 3, nil)
	for i := range 20 {
		via, reader := others[i%2], others[(i+1)%2]
		want := int64(3_600_000 + i)
		alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
		rr := kmsg.NewIncrementalAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "configs"
		rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		rc.Name, rc.Op, rc.Value = "retention.ms", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(fmt.Sprint(want))
		rr.Configs = append(rr.Configs, rc)
		alter.Resources = append(alter.Resources, rr)
		if r := request(via, alter).(*kmsg.IncrementalAlterConfigsResponse); r.Resources[0].ErrorCode != 0 {
			t.Fatalf("alter through node %d: error %d", via, r.Resources[0].ErrorCode)
		}
		if got := c.node(via).partition("configs", 0).Settings().Log.RetentionMs; got != time.Duration(want)*time.Millisecond {
			t.Errorf("round %d: node %d acknowledged retention.ms=%d and its partition has %v", i, via, want, got)
		}
		for _, id := range []int32{via, reader, controller} {
			dc := kmsg.NewPtrDescribeConfigsRequest()
			dr := kmsg.NewDescribeConfigsRequestResource()
			dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeTopic, "configs"
			dr.ConfigNames = []string{"retention.ms"}
			dc.Resources = append(dc.Resources, dr)
			r := request(id, dc).(*kmsg.DescribeConfigsResponse)
			if len(r.Resources) != 1 || len(r.Resources[0].Configs) != 1 || r.Resources[0].Configs[0].Value == nil || *r.Resources[0].Configs[0].Value != fmt.Sprint(want) {
				t.Errorf("round %d: node %d describes retention.ms after node %d acknowledged %d: %+v", i, id, via, want, r.Resources)
			}
		}
	}
}

// metadataOf is a Metadata request for one topic that does not create it.
func metadataOf(topic string) *kmsg.MetadataRequest {
	md := kmsg.NewPtrMetadataRequest()
	md.AllowAutoTopicCreation = false
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = append(md.Topics, mt)
	return md
}
