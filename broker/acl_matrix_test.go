package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"strata/broker/acl"
)

// Until clients authenticate, a client of these tests says who it is in
// its client id, "as:User:name" (testHookPrincipal); every other client
// keeps its connection's principal, User:ANONYMOUS. asPrincipal is the
// one place a test picks its principal.
func init() {
	testHookPrincipal = func(clientID string) string {
		p, _ := strings.CutPrefix(clientID, "as:")
		if p == clientID {
			return ""
		}
		return p
	}
}

// asPrincipal is a client of b acting as principal.
func asPrincipal(t testing.TB, b *Broker, principal string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return testClient(t, b, append([]kgo.Opt{kgo.ClientID("as:" + principal)}, opts...)...)
}

const aclAdmin = "User:admin"

// aclBroker is a broker with the authorizer on and User:admin its super
// user, and an admin client.
func aclBroker(t testing.TB, mutate ...func(*Config)) (*Broker, *kadm.Client) {
	b := testBroker(t, "", append([]func(*Config){func(c *Config) {
		c.SuperUsers = []string{aclAdmin}
		c.GroupInitialRebalanceDelay = -1
	}}, mutate...)...)
	return b, kadm.NewClient(asPrincipal(t, b, aclAdmin))
}

// need is one operation on one resource that an API checks, and the code
// a request lacking it gets.
type need struct {
	rt   acl.ResourceType
	name string
	op   acl.Operation
	code int16
}

// grant creates, through kadm, an ACL of principal for n.
func grant(t *testing.T, adm *kadm.Client, principal string, n need, pattern kadm.ACLPattern, perm acl.Permission) {
	t.Helper()
	b := kadm.NewACLs().ResourcePatternType(pattern).Operations(n.op)
	name := n.name
	if pattern == kadm.ACLPatternPrefixed {
		name = name[:max(1, len(name)-2)]
	}
	switch n.rt {
	case acl.Topic:
		b.Topics(name)
	case acl.Group:
		b.Groups(name)
	case acl.TransactionalID:
		b.TransactionalIDs(name)
	case acl.Cluster:
		if pattern == kadm.ACLPatternPrefixed {
			t.Fatal("kadm's builder names the cluster literally")
		}
		b.Clusters()
	}
	if perm == acl.Allow {
		b.Allow(principal).AllowHosts("*")
	} else {
		b.Deny(principal).DenyHosts("*")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := adm.CreateACLs(ctx, b)
	if err != nil {
		t.Fatalf("create ACL: %v", err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create ACL %+v: %v", r, r.Err)
		}
	}
}

// matrixCase is one API: what it needs, how to call it as the client
// cl, and which code means it got through (ok; -1 for "anything but a
// refusal").
type matrixCase struct {
	api   string
	needs []need
	setup func(t *testing.T)
	call  func(t *testing.T, cl *kgo.Client) int16
	ok    int16
	opts  []kgo.Opt // the client's, e.g. to send an older version
}

func send[R kmsg.Response](t *testing.T, cl *kgo.Client, req kmsg.Request) R {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp.(R)
}

const (
	taf  = 29 // TOPIC_AUTHORIZATION_FAILED
	gaf  = 30 // GROUP_AUTHORIZATION_FAILED
	caf  = 31 // CLUSTER_AUTHORIZATION_FAILED
	tiaf = 53 // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
	any_ = -1
)

func topicNeed(name string, op acl.Operation) need { return need{acl.Topic, name, op, taf} }
func groupNeed(name string, op acl.Operation) need { return need{acl.Group, name, op, gaf} }
func txnNeed(name string, op acl.Operation) need   { return need{acl.TransactionalID, name, op, tiaf} }
func clusterNeed(op acl.Operation) need            { return need{acl.Cluster, acl.ClusterName, op, caf} }

// firstCode is the first non-zero code among codes, else 0.
func firstCode(codes ...int16) int16 {
	for _, c := range codes {
		if c != 0 {
			return c
		}
	}
	return 0
}

// TestACLMatrix: every API that touches a resource, called by principals
// with and without the operations it needs, granted literally and by
// prefix, and denied: Kafka's authorizer table, request by request. The
// ACLs are created through kadm, and each applies to the request right
// after.
func TestACLMatrix(t *testing.T) {
	b, adm := aclBroker(t)
	ctx := context.Background()
	createTopic(t, adm, "mxtopic", 1, nil)
	admin := asPrincipal(t, b, aclAdmin)
	if err := admin.ProduceSync(ctx, &kgo.Record{Topic: "mxtopic", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	commit := func(group string) {
		t.Helper()
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: "mxtopic", Partition: 0, At: 1})
		if _, err := adm.CommitOffsets(ctx, group, os); err != nil {
			t.Fatal(err)
		}
	}
	commit("mxgroup")
	batch := keyedBatch(-1, -1, -1, time.Now().UnixMilli(), "k", "v")

	cases := []matrixCase{
		{api: "Produce", needs: []need{topicNeed("mxtopic", acl.Write)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrProduceRequest()
			req.Acks, req.TimeoutMillis = 1, 5000
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = "mxtopic"
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = batch
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.ProduceResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
		}},
		{api: "Produce transactional", needs: []need{txnNeed("mxtxn-p", acl.Write), topicNeed("mxtopic", acl.Write)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrProduceRequest()
			req.Acks, req.TimeoutMillis, req.TransactionID = 1, 5000, kmsg.StringPtr("mxtxn-p")
			raw := keyedBatch(5000, 0, 0, time.Now().UnixMilli(), "k", "v")
			raw[22] |= 0x10 // transactional; the CRC is not checked before authorization
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = "mxtopic"
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = raw
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.ProduceResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
		}},
		{api: "Fetch", needs: []need{topicNeed("mxtopic", acl.Read)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrFetchRequest()
			req.ReplicaID, req.MaxBytes = -1, 1<<20
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = "mxtopic"
			ft.TopicID = b.meta.State().Topics["mxtopic"].ID
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.PartitionMaxBytes = 1 << 20
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
			return send[*kmsg.FetchResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
		}},
		{api: "ListOffsets", needs: []need{topicNeed("mxtopic", acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrListOffsetsRequest()
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = "mxtopic"
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Timestamp = -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.ListOffsetsResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
		}},
		{api: "Metadata", needs: []need{topicNeed("mxtopic", acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr("mxtopic")
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.MetadataResponse](t, cl, req).Topics[0].ErrorCode
		}},
		{api: "OffsetForLeaderEpoch", needs: []need{topicNeed("mxtopic", acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrOffsetForLeaderEpochRequest()
			req.ReplicaID = -1
			rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
			rt.Topic = "mxtopic"
			rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
			rp.CurrentLeaderEpoch = -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.OffsetForLeaderEpochResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
		}},
		{api: "DescribeProducers", needs: []need{topicNeed("mxtopic", acl.Read)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrDescribeProducersRequest()
			rt := kmsg.NewDescribeProducersRequestTopic()
			rt.Topic, rt.Partitions = "mxtopic", []int32{0}
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.DescribeProducersResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
		}},
		{api: "DeleteRecords", needs: []need{topicNeed("mxtopic", acl.Delete)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrDeleteRecordsRequest()
			req.TimeoutMillis = 5000
			rt := kmsg.NewDeleteRecordsRequestTopic()
			rt.Topic = "mxtopic"
			rp := kmsg.NewDeleteRecordsRequestTopicPartition()
			rp.Offset = 0
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.DeleteRecordsResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
		}},
		{api: "CreateTopics", needs: []need{topicNeed("mxcreate", acl.Create)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrCreateTopicsRequest()
			req.ValidateOnly, req.TimeoutMillis = true, 5000
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "mxcreate", 1, 1
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.CreateTopicsResponse](t, cl, req).Topics[0].ErrorCode
		}},
		{api: "CreatePartitions", needs: []need{topicNeed("mxtopic", acl.Alter)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrCreatePartitionsRequest()
			req.ValidateOnly, req.TimeoutMillis = true, 5000
			rt := kmsg.NewCreatePartitionsRequestTopic()
			rt.Topic, rt.Count = "mxtopic", 2
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.CreatePartitionsResponse](t, cl, req).Topics[0].ErrorCode
		}},
		{api: "DeleteTopics", needs: []need{topicNeed("mxdelete", acl.Delete)}, ok: 0,
			setup: func(t *testing.T) {
				if _, ok := b.meta.State().Topics["mxdelete"]; !ok {
					createTopic(t, adm, "mxdelete", 1, nil)
				}
			},
			call: func(t *testing.T, cl *kgo.Client) int16 {
				req := kmsg.NewPtrDeleteTopicsRequest()
				req.TimeoutMillis = 5000
				rt := kmsg.NewDeleteTopicsRequestTopic()
				rt.Topic = kmsg.StringPtr("mxdelete")
				req.Topics = append(req.Topics, rt)
				req.TopicNames = []string{"mxdelete"}
				return send[*kmsg.DeleteTopicsResponse](t, cl, req).Topics[0].ErrorCode
			}},
		{api: "DescribeConfigs", needs: []need{topicNeed("mxtopic", acl.DescribeConfigs)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrDescribeConfigsRequest()
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "mxtopic"
			req.Resources = append(req.Resources, rr)
			return send[*kmsg.DescribeConfigsResponse](t, cl, req).Resources[0].ErrorCode
		}},
		{api: "DescribeConfigs broker", needs: []need{clusterNeed(acl.DescribeConfigs)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrDescribeConfigsRequest()
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBroker, "0"
			req.Resources = append(req.Resources, rr)
			return send[*kmsg.DescribeConfigsResponse](t, cl, req).Resources[0].ErrorCode
		}},
		{api: "AlterConfigs", needs: []need{topicNeed("mxtopic", acl.AlterConfigs)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrAlterConfigsRequest()
			req.ValidateOnly = true
			rr := kmsg.NewAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "mxtopic"
			c := kmsg.NewAlterConfigsRequestResourceConfig()
			c.Name, c.Value = "retention.ms", kmsg.StringPtr("100000")
			rr.Configs = append(rr.Configs, c)
			req.Resources = append(req.Resources, rr)
			return send[*kmsg.AlterConfigsResponse](t, cl, req).Resources[0].ErrorCode
		}},
		{api: "IncrementalAlterConfigs", needs: []need{topicNeed("mxtopic", acl.AlterConfigs)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			req.ValidateOnly = true
			rr := kmsg.NewIncrementalAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "mxtopic"
			c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			c.Name, c.Value = "retention.ms", kmsg.StringPtr("100000")
			rr.Configs = append(rr.Configs, c)
			req.Resources = append(req.Resources, rr)
			return send[*kmsg.IncrementalAlterConfigsResponse](t, cl, req).Resources[0].ErrorCode
		}},
		{api: "FindCoordinator group", needs: []need{groupNeed("mxgroup", acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorKeys = []string{"mxgroup"}
			return send[*kmsg.FindCoordinatorResponse](t, cl, req).Coordinators[0].ErrorCode
		}},
		{api: "FindCoordinator transaction", needs: []need{txnNeed("mxtxn", acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorType, req.CoordinatorKeys = 1, []string{"mxtxn"}
			return send[*kmsg.FindCoordinatorResponse](t, cl, req).Coordinators[0].ErrorCode
		}},
		{api: "JoinGroup", needs: []need{groupNeed("mxjoin", acl.Read)}, ok: kerr.MemberIDRequired.Code, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis, req.ProtocolType = "mxjoin", 10000, 10000, "consumer"
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name, p.Metadata = "range", []byte{}
			req.Protocols = append(req.Protocols, p)
			return send[*kmsg.JoinGroupResponse](t, cl, req).ErrorCode
		}},
		{api: "Heartbeat", needs: []need{groupNeed("mxgroup", acl.Read)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrHeartbeatRequest()
			req.Group, req.MemberID, req.Generation = "mxgroup", "m", 1
			return send[*kmsg.HeartbeatResponse](t, cl, req).ErrorCode
		}},
		{api: "SyncGroup", needs: []need{groupNeed("mxgroup", acl.Read)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrSyncGroupRequest()
			req.Group, req.MemberID, req.Generation = "mxgroup", "m", 1
			return send[*kmsg.SyncGroupResponse](t, cl, req).ErrorCode
		}},
		{api: "LeaveGroup", needs: []need{groupNeed("mxgroup", acl.Read)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrLeaveGroupRequest()
			req.Group = "mxgroup"
			m := kmsg.NewLeaveGroupRequestMember()
			m.MemberID = "m"
			req.Members = append(req.Members, m)
			resp := send[*kmsg.LeaveGroupResponse](t, cl, req)
			return resp.ErrorCode
		}},
		{api: "OffsetCommit", needs: []need{groupNeed("mxcommit", acl.Read), topicNeed("mxtopic", acl.Read)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrOffsetCommitRequest()
			req.Group, req.Generation = "mxcommit", -1
			rt := kmsg.NewOffsetCommitRequestTopic()
			rt.Topic = "mxtopic"
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Offset = 1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.OffsetCommitResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
		}},
		{api: "OffsetFetch", needs: []need{groupNeed("mxgroup", acl.Describe), topicNeed("mxtopic", acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrOffsetFetchRequest()
			g := kmsg.NewOffsetFetchRequestGroup()
			g.Group = "mxgroup"
			gt := kmsg.NewOffsetFetchRequestGroupTopic()
			gt.Topic, gt.Partitions = "mxtopic", []int32{0}
			g.Topics = append(g.Topics, gt)
			req.Groups = append(req.Groups, g)
			resp := send[*kmsg.OffsetFetchResponse](t, cl, req)
			rg := resp.Groups[0]
			if rg.ErrorCode != 0 {
				return rg.ErrorCode
			}
			if p := rg.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 1 {
				return firstCode(p.ErrorCode, -2)
			}
			return 0
		}},
		{api: "DescribeGroups", needs: []need{groupNeed("mxgroup", acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrDescribeGroupsRequest()
			req.Groups = []string{"mxgroup"}
			return send[*kmsg.DescribeGroupsResponse](t, cl, req).Groups[0].ErrorCode
		}},
		{api: "DeleteGroups", needs: []need{groupNeed("mxdelgroup", acl.Delete)}, ok: 0,
			setup: func(t *testing.T) { commit("mxdelgroup") },
			call: func(t *testing.T, cl *kgo.Client) int16 {
				req := kmsg.NewPtrDeleteGroupsRequest()
				req.Groups = []string{"mxdelgroup"}
				return send[*kmsg.DeleteGroupsResponse](t, cl, req).Groups[0].ErrorCode
			}},
		{api: "OffsetDelete", needs: []need{groupNeed("mxgroup", acl.Delete), topicNeed("mxtopic", acl.Read)}, ok: 0,
			setup: func(t *testing.T) { commit("mxgroup") },
			call: func(t *testing.T, cl *kgo.Client) int16 {
				req := kmsg.NewPtrOffsetDeleteRequest()
				req.Group = "mxgroup"
				rt := kmsg.NewOffsetDeleteRequestTopic()
				rt.Topic, rt.Partitions = "mxtopic", []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}
				req.Topics = append(req.Topics, rt)
				resp := send[*kmsg.OffsetDeleteResponse](t, cl, req)
				if resp.ErrorCode != 0 {
					return resp.ErrorCode
				}
				return resp.Topics[0].Partitions[0].ErrorCode
			}},
		{api: "InitProducerId transactional", needs: []need{txnNeed("mxtxn", acl.Write)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrInitProducerIDRequest()
			req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr("mxtxn"), 10000
			return send[*kmsg.InitProducerIDResponse](t, cl, req).ErrorCode
		}},
		{api: "InitProducerId idempotent", needs: []need{clusterNeed(acl.IdempotentWrite)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			return send[*kmsg.InitProducerIDResponse](t, cl, kmsg.NewPtrInitProducerIDRequest()).ErrorCode
		}},
		{api: "InitProducerId idempotent, WRITE on a topic", needs: []need{{acl.Topic, "mxtopic", acl.Write, caf}}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			return send[*kmsg.InitProducerIDResponse](t, cl, kmsg.NewPtrInitProducerIDRequest()).ErrorCode
		}},
		{api: "AddPartitionsToTxn", needs: []need{txnNeed("mxtxn", acl.Write), topicNeed("mxtopic", acl.Write)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrAddPartitionsToTxnRequest()
			req.Version = 3
			req.TransactionalID, req.ProducerID, req.ProducerEpoch = "mxtxn", 12345, 0
			rt := kmsg.NewAddPartitionsToTxnRequestTopic()
			rt.Topic, rt.Partitions = "mxtopic", []int32{0}
			req.Topics = append(req.Topics, rt)
			resp := send[*kmsg.AddPartitionsToTxnResponse](t, cl, req)
			return resp.Topics[0].Partitions[0].ErrorCode
		}, opts: []kgo.Opt{kgo.MaxVersions(func() *kversion.Versions {
			v := kversion.Stable()
			v.SetMaxKeyVersion(int16(kmsg.AddPartitionsToTxn), 3) // v4+ is brokers' (CLUSTER_ACTION)
			return v
		}())}},
		{api: "AddOffsetsToTxn", needs: []need{txnNeed("mxtxn", acl.Write), groupNeed("mxgroup", acl.Read)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrAddOffsetsToTxnRequest()
			req.TransactionalID, req.ProducerID, req.Group = "mxtxn", 12345, "mxgroup"
			return send[*kmsg.AddOffsetsToTxnResponse](t, cl, req).ErrorCode
		}},
		{api: "EndTxn", needs: []need{txnNeed("mxtxn", acl.Write)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrEndTxnRequest()
			req.TransactionalID, req.ProducerID = "mxtxn", 12345
			return send[*kmsg.EndTxnResponse](t, cl, req).ErrorCode
		}},
		{api: "TxnOffsetCommit", needs: []need{txnNeed("mxtxn", acl.Write), groupNeed("mxgroup", acl.Read), topicNeed("mxtopic", acl.Read)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrTxnOffsetCommitRequest()
			req.TransactionalID, req.Group, req.ProducerID, req.Generation = "mxtxn", "mxgroup", 12345, -1
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = "mxtopic"
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Offset = 1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.TxnOffsetCommitResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
		}},
		{api: "DescribeTransactions", needs: []need{txnNeed("mxtxn", acl.Describe)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrDescribeTransactionsRequest()
			req.TransactionalIDs = []string{"mxtxn"}
			return send[*kmsg.DescribeTransactionsResponse](t, cl, req).TransactionStates[0].ErrorCode
		}},
		{api: "DescribeLogDirs", needs: []need{clusterNeed(acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			return send[*kmsg.DescribeLogDirsResponse](t, cl, kmsg.NewPtrDescribeLogDirsRequest()).ErrorCode
		}},
		{api: "DescribeQuorum", needs: []need{clusterNeed(acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			return send[*kmsg.DescribeQuorumResponse](t, cl, kmsg.NewPtrDescribeQuorumRequest()).ErrorCode
		}},
		{api: "ElectLeaders", needs: []need{clusterNeed(acl.Alter)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrElectLeadersRequest()
			req.TimeoutMillis = 5000
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic, rt.Partitions = "mxtopic", []int32{0}
			req.Topics = append(req.Topics, rt)
			return send[*kmsg.ElectLeadersResponse](t, cl, req).ErrorCode
		}},
		{api: "DescribeAcls", needs: []need{clusterNeed(acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrDescribeACLsRequest()
			req.ResourceType, req.ResourcePatternType, req.Operation, req.PermissionType = 1, 1, 1, 1
			return send[*kmsg.DescribeACLsResponse](t, cl, req).ErrorCode
		}},
		{api: "CreateAcls", needs: []need{clusterNeed(acl.Alter)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrCreateACLsRequest()
			c := kmsg.NewCreateACLsRequestCreation()
			c.ResourceType, c.ResourceName, c.ResourcePatternType = acl.Topic, "mxother", acl.Literal
			c.Principal, c.Host, c.Operation, c.PermissionType = "User:nobody", "*", acl.Read, acl.Allow
			req.Creations = append(req.Creations, c)
			return send[*kmsg.CreateACLsResponse](t, cl, req).Results[0].ErrorCode
		}},
		{api: "DeleteAcls", needs: []need{clusterNeed(acl.Alter)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrDeleteACLsRequest()
			f := kmsg.NewDeleteACLsRequestFilter()
			f.ResourceType, f.ResourceName, f.ResourcePatternType = acl.Topic, kmsg.StringPtr("mxother"), acl.Literal
			f.Operation, f.PermissionType = 1, 1
			req.Filters = append(req.Filters, f)
			return send[*kmsg.DeleteACLsResponse](t, cl, req).Results[0].ErrorCode
		}},
		{api: "DescribeUserScramCredentials", needs: []need{clusterNeed(acl.Describe)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			return send[*kmsg.DescribeUserSCRAMCredentialsResponse](t, cl, kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()).ErrorCode
		}},
		{api: "AlterUserScramCredentials", needs: []need{clusterNeed(acl.Alter)}, ok: kerr.ResourceNotFound.Code, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
			d := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
			d.Name, d.Mechanism = "nobody", 1
			req.Deletions = append(req.Deletions, d)
			return send[*kmsg.AlterUserSCRAMCredentialsResponse](t, cl, req).Results[0].ErrorCode
		}},
		{api: "DescribeClientQuotas", needs: []need{clusterNeed(acl.DescribeConfigs)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			return send[*kmsg.DescribeClientQuotasResponse](t, cl, kmsg.NewPtrDescribeClientQuotasRequest()).ErrorCode
		}},
		{api: "AlterClientQuotas", needs: []need{clusterNeed(acl.AlterConfigs)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrAlterClientQuotasRequest()
			req.ValidateOnly = true
			e := kmsg.NewAlterClientQuotasRequestEntry()
			ec := kmsg.NewAlterClientQuotasRequestEntryEntity()
			name := "matrix-client"
			ec.Type, ec.Name = "client-id", &name
			e.Entity = append(e.Entity, ec)
			op := kmsg.NewAlterClientQuotasRequestEntryOp()
			op.Key, op.Value = "producer_byte_rate", 1024
			e.Ops = append(e.Ops, op)
			req.Entries = append(req.Entries, e)
			return send[*kmsg.AlterClientQuotasResponse](t, cl, req).Entries[0].ErrorCode
		}},
		{api: "WriteTxnMarkers", needs: []need{clusterNeed(acl.ClusterAction)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrWriteTxnMarkersRequest()
			m := kmsg.NewWriteTxnMarkersRequestMarker()
			m.ProducerID = 777
			mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			mt.Topic, mt.Partitions = "mxnowhere", []int32{0}
			m.Topics = append(m.Topics, mt)
			req.Markers = append(req.Markers, m)
			return send[*kmsg.WriteTxnMarkersResponse](t, cl, req).Markers[0].Topics[0].Partitions[0].ErrorCode
		}},
		{api: "BrokerHeartbeat", needs: []need{clusterNeed(acl.ClusterAction)}, ok: any_, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrBrokerHeartbeatRequest()
			req.BrokerID, req.BrokerEpoch = 99, 1
			return send[*kmsg.BrokerHeartbeatResponse](t, cl, req).ErrorCode
		}},
		{api: "BrokerRegistration", needs: []need{clusterNeed(acl.ClusterAction)}, ok: kerr.InconsistentClusterID.Code, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrBrokerRegistrationRequest()
			req.BrokerID, req.ClusterID = 99, "not-this-cluster"
			l := kmsg.NewBrokerRegistrationRequestListener()
			l.Name, l.Host, l.Port = "PLAINTEXT", "127.0.0.1", 1
			req.Listeners = append(req.Listeners, l)
			return send[*kmsg.BrokerRegistrationResponse](t, cl, req).ErrorCode
		}},
		{api: "AllocateProducerIds", needs: []need{clusterNeed(acl.ClusterAction)}, ok: kerr.StaleBrokerEpoch.Code, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrAllocateProducerIDsRequest()
			req.BrokerID, req.BrokerEpoch = 99, 1
			return send[*kmsg.AllocateProducerIDsResponse](t, cl, req).ErrorCode
		}},
		{api: "AlterPartition", needs: []need{clusterNeed(acl.ClusterAction)}, ok: 0, call: func(t *testing.T, cl *kgo.Client) int16 {
			req := kmsg.NewPtrAlterPartitionRequest()
			req.BrokerID, req.BrokerEpoch = 99, 1
			return send[*kmsg.AlterPartitionResponse](t, cl, req).ErrorCode
		}},
	}

	n := 0
	principal := func() string { n++; return fmt.Sprintf("User:p%d", n) }
	run := func(t *testing.T, c matrixCase, variant string, want int16, acls func(p string)) {
		t.Helper()
		if c.setup != nil {
			c.setup(t)
		}
		p := principal()
		acls(p)
		got := c.call(t, asPrincipal(t, b, p, c.opts...))
		switch {
		case want == any_:
			for _, nd := range c.needs {
				if got == nd.code {
					t.Errorf("%s, %s: refused with %s", c.api, variant, kerr.ErrorForCode(got))
				}
			}
		case got != want:
			t.Errorf("%s, %s: code %d (%v), want %d (%v)", c.api, variant, got, kerr.ErrorForCode(got), want, kerr.ErrorForCode(want))
		}
	}
	for _, c := range cases {
		t.Run(c.api, func(t *testing.T) {
			patterns := []kadm.ACLPattern{kadm.ACLPatternLiteral, kadm.ACLPatternPrefixed}
			for _, pat := range patterns {
				run(t, c, "all granted "+pat.String(), c.ok, func(p string) {
					for _, nd := range c.needs {
						pp := pat
						if nd.rt == acl.Cluster {
							pp = kadm.ACLPatternLiteral
						}
						grant(t, adm, p, nd, pp, acl.Allow)
					}
				})
			}
			for i, missing := range c.needs {
				others := func(p string) {
					for j, nd := range c.needs {
						if j != i {
							grant(t, adm, p, nd, kadm.ACLPatternLiteral, acl.Allow)
						}
					}
				}
				run(t, c, fmt.Sprintf("without %s on %s", missing.op, missing.rt), missing.code, others)
				run(t, c, fmt.Sprintf("%s on %s allowed and denied", missing.op, missing.rt), missing.code, func(p string) {
					others(p)
					grant(t, adm, p, missing, kadm.ACLPatternLiteral, acl.Allow)
					pat := kadm.ACLPatternPrefixed
					if missing.rt == acl.Cluster {
						pat = kadm.ACLPatternLiteral
					}
					grant(t, adm, p, missing, pat, acl.Deny)
				})
			}
		})
	}
}

// Metadata lists only the topics the principal may DESCRIBE, and answers
// a named topic it may not describe with TOPIC_AUTHORIZATION_FAILED
// whether or not it exists; auto-creation needs CREATE.
func TestACLMetadataListsOnlyDescribable(t *testing.T) {
	b, adm := aclBroker(t)
	ctx := context.Background()
	for _, name := range []string{"alpha", "beta-1", "beta-2", "gamma"} {
		createTopic(t, adm, name, 1, nil)
	}
	grant(t, adm, "User:reader", topicNeed("alpha", acl.Read), kadm.ACLPatternLiteral, acl.Allow)
	grant(t, adm, "User:reader", topicNeed("beta-x", acl.Describe), kadm.ACLPatternPrefixed, acl.Allow) // "beta"
	grant(t, adm, "User:reader", topicNeed("beta-2", acl.Describe), kadm.ACLPatternLiteral, acl.Deny)
	grant(t, adm, "User:reader", topicNeed("delta", acl.Describe), kadm.ACLPatternLiteral, acl.Allow)
	cl := asPrincipal(t, b, "User:reader")

	all := send[*kmsg.MetadataResponse](t, cl, kmsg.NewPtrMetadataRequest())
	var names []string
	for _, mt := range all.Topics {
		names = append(names, *mt.Topic)
	}
	slices.Sort(names)
	if want := []string{"alpha", "beta-1"}; !slices.Equal(names, want) {
		t.Fatalf("all topics: %v, want %v", names, want)
	}

	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = true
	for _, name := range []string{"alpha", "gamma", "nonexistent", "delta"} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	req.IncludeTopicAuthorizedOperations = true
	named := send[*kmsg.MetadataResponse](t, cl, req)
	got := map[string]kmsg.MetadataResponseTopic{}
	for _, mt := range named.Topics {
		got[*mt.Topic] = mt
	}
	if mt := got["alpha"]; mt.ErrorCode != 0 || mt.AuthorizedOperations != 1<<acl.Read|1<<acl.Describe {
		t.Errorf("alpha: code %d, authorized operations %b", mt.ErrorCode, mt.AuthorizedOperations)
	}
	for _, name := range []string{"gamma", "nonexistent"} {
		if mt := got[name]; mt.ErrorCode != taf || mt.TopicID != ([16]byte{}) {
			t.Errorf("%s: code %d id %x, want TOPIC_AUTHORIZATION_FAILED without id", name, mt.ErrorCode, mt.TopicID)
		}
	}
	// DESCRIBE but not CREATE: not auto-created.
	if mt := got["delta"]; mt.ErrorCode != taf {
		t.Errorf("delta: code %d, want TOPIC_AUTHORIZATION_FAILED", mt.ErrorCode)
	}
	if _, ok := b.meta.State().Topics["delta"]; ok {
		t.Error("delta was auto-created without CREATE")
	}
	grant(t, adm, "User:reader", topicNeed("delta", acl.Create), kadm.ACLPatternLiteral, acl.Allow)
	named = send[*kmsg.MetadataResponse](t, cl, req)
	for _, mt := range named.Topics {
		if *mt.Topic == "delta" && mt.ErrorCode != 0 {
			t.Errorf("delta with CREATE: code %d", mt.ErrorCode)
		}
	}

	// ListGroups likewise shows the groups the principal may describe.
	for _, g := range []string{"g-seen", "g-hidden"} {
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: "alpha", Partition: 0, At: 0})
		if _, err := adm.CommitOffsets(ctx, g, os); err != nil {
			t.Fatal(err)
		}
	}
	grant(t, adm, "User:reader", groupNeed("g-seen", acl.Describe), kadm.ACLPatternLiteral, acl.Allow)
	lg := send[*kmsg.ListGroupsResponse](t, cl, kmsg.NewPtrListGroupsRequest())
	if len(lg.Groups) != 1 || lg.Groups[0].Group != "g-seen" {
		t.Errorf("ListGroups: %+v, want g-seen only", lg.Groups)
	}
	if n := len(send[*kmsg.ListGroupsResponse](t, asPrincipal(t, b, aclAdmin), kmsg.NewPtrListGroupsRequest()).Groups); n < 2 {
		t.Errorf("the super user lists %d groups", n)
	}
}

// Real clients: a producer without WRITE gets TOPIC_AUTHORIZATION_FAILED,
// a consumer group member without READ on the group cannot join, and an
// ACL created through kadm lets the very next attempt through.
func TestACLClients(t *testing.T) {
	b, adm := aclBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	createTopic(t, adm, "orders", 1, nil)

	prod := asPrincipal(t, b, "User:writer", kgo.RecordRetries(1), kgo.RequestRetries(1))
	err := prod.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("x")}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce without WRITE: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	grant(t, adm, "User:writer", topicNeed("orders", acl.Write), kadm.ACLPatternLiteral, acl.Allow)
	grant(t, adm, "User:writer", clusterNeed(acl.IdempotentWrite), kadm.ACLPatternLiteral, acl.Allow)
	prod2 := asPrincipal(t, b, "User:writer")
	if err := prod2.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce with WRITE: %v", err)
	}

	grant(t, adm, "User:reader", topicNeed("orders", acl.Read), kadm.ACLPatternLiteral, acl.Allow)
	grant(t, adm, "User:reader", groupNeed("readers", acl.Describe), kadm.ACLPatternLiteral, acl.Allow) // FindCoordinator, not JoinGroup
	cons := asPrincipal(t, b, "User:reader", kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("readers"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var joinErr error
	for joinErr == nil && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachError(func(_ string, _ int32, err error) { joinErr = err })
		if fs.NumRecords() > 0 {
			t.Fatal("a member without READ on its group consumed records")
		}
	}
	if !errors.Is(joinErr, kerr.GroupAuthorizationFailed) {
		t.Fatalf("join without READ on the group: %v, want GROUP_AUTHORIZATION_FAILED", joinErr)
	}
	cons.Close()

	grant(t, adm, "User:reader", groupNeed("readers", acl.Read), kadm.ACLPatternLiteral, acl.Allow)
	cons2 := asPrincipal(t, b, "User:reader", kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("readers"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := cons2.PollFetches(ctx)
	if err := fs.Err(); err != nil || fs.NumRecords() != 1 {
		t.Fatalf("with READ on the group: %d records, err %v", fs.NumRecords(), err)
	}
}

// Without an authorizer, everything is allowed, and the ACL APIs say so
// with SECURITY_DISABLED, as Kafka's.
func TestACLAuthorizerOff(t *testing.T) {
	b := testBroker(t, "")
	cl := asPrincipal(t, b, "User:anyone", kgo.AllowAutoTopicCreation())
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourcePatternType, req.Operation, req.PermissionType = 1, 1, 1, 1
	if code := send[*kmsg.DescribeACLsResponse](t, cl, req).ErrorCode; code != kerr.SecurityDisabled.Code {
		t.Fatalf("DescribeAcls: code %d, want SECURITY_DISABLED", code)
	}
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType = acl.Topic, "t", acl.Literal
	c.Principal, c.Host, c.Operation, c.PermissionType = "User:a", "*", acl.Read, acl.Allow
	creq := kmsg.NewPtrCreateACLsRequest()
	creq.Creations = append(creq.Creations, c)
	if code := send[*kmsg.CreateACLsResponse](t, cl, creq).Results[0].ErrorCode; code != kerr.SecurityDisabled.Code {
		t.Fatalf("CreateAcls: code %d, want SECURITY_DISABLED", code)
	}
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "anything", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce without an authorizer: %v", err)
	}
}

// CreateAcls validates each creation on its own, and DescribeAcls and
// DeleteAcls apply Kafka's filters.
func TestACLAPIs(t *testing.T) {
	b, adm := aclBroker(t)
	cl := asPrincipal(t, b, aclAdmin)
	mk := func(rt acl.ResourceType, name string, pt acl.PatternType, principal string) kmsg.CreateACLsRequestCreation {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = rt, name, pt
		c.Principal, c.Host, c.Operation, c.PermissionType = principal, "*", acl.Read, acl.Allow
		return c
	}
	creq := kmsg.NewPtrCreateACLsRequest()
	creq.Creations = []kmsg.CreateACLsRequestCreation{
		mk(acl.Topic, "ok", acl.Literal, "User:a"),
		mk(0, "bad-type", acl.Literal, "User:a"),
		mk(acl.Topic, "bad-pattern", kmsg.ACLResourcePatternTypeMatch, "User:a"),
		mk(acl.Topic, "bad-principal", acl.Literal, "alice"),
		mk(acl.Cluster, "not-kafka-cluster", acl.Literal, "User:a"),
		mk(acl.Topic, "ok-pre", acl.Prefixed, "User:a"),
	}
	res := send[*kmsg.CreateACLsResponse](t, cl, creq).Results
	for i, r := range res {
		want := int16(0)
		if i >= 1 && i <= 4 {
			want = kerr.InvalidRequest.Code
		}
		if r.ErrorCode != want {
			t.Errorf("creation %d: code %d, want %d (%v)", i, r.ErrorCode, want, r.ErrorMessage)
		}
	}
	ctx := context.Background()
	described, err := adm.DescribeACLs(ctx, kadm.NewACLs().Topics("ok-prefix-more").ResourcePatternType(kadm.ACLPatternMatch).Operations(kadm.OpAny).Allow().Deny().AllowHosts().DenyHosts())
	if err != nil {
		t.Fatal(err)
	}
	if d := described[0].Described; len(d) != 1 || d[0].Name != "ok-pre" {
		t.Fatalf("MATCH ok-prefix-more: %+v", d)
	}
	deleted, err := adm.DeleteACLs(ctx, kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Operations(kadm.OpAny).Allow("User:a").AllowHosts())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(deleted[0].Deleted); n != 2 {
		t.Fatalf("deleted %d ACLs of User:a, want 2: %+v", n, deleted)
	}
	if n := len(b.meta.State().ACLs); n != 0 {
		t.Fatalf("%d ACLs left", n)
	}
}

// In a cluster, the requests a broker forwards to the controller arrive
// there as the forwarding broker (here User:ANONYMOUS, the brokers' own
// principal on a PLAINTEXT listener, hence a super user): they are
// authorized on the broker the client talks to, before forwarding. An ACL
// created on one node applies on every node.
func TestACLClusterForwarding(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := testCluster(t, 3, func(cfg *Config) { cfg.SuperUsers = []string{aclAdmin, anonymous} })
	var other *Broker
	c.waitFor("a controller", 10*time.Second, func() bool {
		ctrl := c.any().meta.ControllerID()
		for _, b := range c.nodes {
			if ctrl >= 0 && b.cfg.NodeID != ctrl {
				other = b
				return true
			}
		}
		return false
	})
	adm := kadm.NewClient(asPrincipal(t, other, aclAdmin))
	createTopic(t, adm, "fwd", 1, nil)
	alice := asPrincipal(t, other, "User:alice")

	creq := kmsg.NewPtrCreateACLsRequest()
	cr := kmsg.NewCreateACLsRequestCreation()
	cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = acl.Topic, "fwd", acl.Literal
	cr.Principal, cr.Host, cr.Operation, cr.PermissionType = "User:alice", "*", acl.All, acl.Allow
	creq.Creations = append(creq.Creations, cr)
	if code := send[*kmsg.CreateACLsResponse](t, alice, creq).Results[0].ErrorCode; code != caf {
		t.Fatalf("alice's CreateAcls through a non-controller: code %d, want CLUSTER_AUTHORIZATION_FAILED", code)
	}
	if n := len(other.meta.State().ACLs); n != 0 {
		t.Fatalf("%d ACLs stored after a refused CreateAcls", n)
	}
	alter := func() int16 {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		rr := kmsg.NewIncrementalAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "fwd"
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value = "retention.ms", kmsg.StringPtr("123456")
		rr.Configs = append(rr.Configs, cfg)
		req.Resources = append(req.Resources, rr)
		return send[*kmsg.IncrementalAlterConfigsResponse](t, alice, req).Resources[0].ErrorCode
	}
	if code := alter(); code != taf {
		t.Fatalf("alice's IncrementalAlterConfigs through a non-controller: code %d, want TOPIC_AUTHORIZATION_FAILED", code)
	}
	if v := other.meta.State().Topics["fwd"].Configs["retention.ms"]; v != "" {
		t.Fatalf("a refused alter changed retention.ms to %s", v)
	}

	// The super user's CreateAcls, forwarded, applies on every node.
	if code := send[*kmsg.CreateACLsResponse](t, asPrincipal(t, other, aclAdmin), creq).Results[0].ErrorCode; code != 0 {
		t.Fatalf("admin's CreateAcls: code %d", code)
	}
	c.waitFor("the ACL on every node", 5*time.Second, func() bool {
		for _, b := range c.nodes {
			if len(b.meta.State().ACLs) != 1 {
				return false
			}
		}
		return true
	})
	if code := alter(); code != 0 {
		t.Fatalf("alice's IncrementalAlterConfigs with ALL on the topic: code %d", code)
	}
	for _, b := range c.nodes {
		cl := asPrincipal(t, b, "User:alice")
		req := kmsg.NewPtrDescribeConfigsRequest()
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "fwd"
		req.Resources = append(req.Resources, rr)
		if code := send[*kmsg.DescribeConfigsResponse](t, cl, req).Resources[0].ErrorCode; code != 0 {
			t.Errorf("node %d: alice's DescribeConfigs: code %d", b.cfg.NodeID, code)
		}
	}
}
