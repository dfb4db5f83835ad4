package broker

import (
	"net"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/partition"
	"strata/meta"
)

// Authorization: each API's file asks the helpers below what Kafka's
// KafkaApis asks its authorizer for that API (docs/security.md has the
// table), and answers a refusal with the API's own error code; the
// decisions are broker/acl's. Without an authorizer (Config.Authorizer
// off), b.authz is nil and everything is allowed.
//
// A request the broker passes on to the controller (forwarded) reaches it
// on the forwarding broker's own connection, as that broker's principal:
// such APIs are authorized where the client connected, before forwarding,
// by a gate (registerGate), which runs again on the controller against the
// forwarding broker, a super user.

// testHookPrincipal, when set by a test, gives the principal of a request
// from its client id, in place of its connection's: so that clients with
// different client ids act as different principals without
// authenticating. An empty answer keeps the connection's.
var testHookPrincipal func(clientID string) string

// newAuthorizer returns the authorizer cfg asks for, or nil for none.
func (b *Broker) newAuthorizer() *acl.Authorizer {
	if !b.cfg.Authorizer {
		return nil
	}
	supers := b.cfg.SuperUsers
	if p := b.cfg.InterBrokerPrincipal(); p != "" {
		// Other brokers (replica fetches, forwarded requests, the
		// controller's requests): Kafka's operators list the brokers'
		// principal in super.users; here the brokers' principal is
		// Strata's choice, so it is added.
		supers = append(slices.Clip(supers), p)
	}
	return acl.New(acl.Config{
		SuperUsers:                supers,
		AllowEveryoneIfNoACLFound: b.cfg.AllowEveryoneIfNoACLFound,
		Logger:                    b.log.With("component", "authorizer"),
		Registerer:                b.metrics.reg,
	}, func() []meta.ACL { return b.meta.State().ACLs })
}

// client is who sent req, for the authorizer.
func (req *request) client() acl.Client {
	if req.conn == nil { // fuzz tests decode requests without a connection
		return acl.Client{Principal: anonymous, API: apiName(req.kreq.Key())}
	}
	p := req.conn.principal
	if testHookPrincipal != nil {
		if tp := testHookPrincipal(req.clientID); tp != "" {
			p = tp
		}
	}
	host, _, err := net.SplitHostPort(req.conn.remote)
	if err != nil {
		host = req.conn.remote
	}
	return acl.Client{Principal: p, Host: host, API: apiName(req.kreq.Key())}
}

// authorized reports whether req's principal may do op on the resource,
// logging a refusal: for resources the request names.
func (b *Broker) authorized(req *request, op acl.Operation, rt acl.ResourceType, name string) bool {
	if b.authz == nil {
		return true
	}
	return b.authz.Authorize(req.client(), op, rt, name)
}

// allowed is authorized without the log: for what the request did not
// name (filtering listings) and for second thoughts Kafka does not log
// (CREATE on the cluster before CREATE on each topic).
func (b *Broker) allowed(req *request, op acl.Operation, rt acl.ResourceType, name string) bool {
	if b.authz == nil {
		return true
	}
	return b.authz.Allowed(req.client(), op, rt, name)
}

// authorizedCluster is authorized on the cluster resource.
func (b *Broker) authorizedCluster(req *request, op acl.Operation) bool {
	return b.authorized(req, op, acl.Cluster, acl.ClusterName)
}

// authorizedOps is a resource's authorized-operations field (KIP-430).
func (b *Broker) authorizedOps(req *request, rt acl.ResourceType, name string) int32 {
	return b.authz.AuthorizedOperations(req.client(), rt, name) // all of them when nil
}

// topicAuth remembers one request's answers per topic name: a request
// names a topic once per partition list, and asks once.
type topicAuth struct {
	b    *Broker
	req  *request
	op   acl.Operation
	seen map[string]bool
}

func (b *Broker) topicAuth(req *request, op acl.Operation) *topicAuth {
	return &topicAuth{b: b, req: req, op: op}
}

// ok reports whether the request may do the operation on topic.
func (a *topicAuth) ok(topic string) bool {
	if a.b.authz == nil {
		return true
	}
	if v, done := a.seen[topic]; done {
		return v
	}
	if a.seen == nil {
		a.seen = map[string]bool{}
	}
	v := a.b.authz.Authorize(a.req.client(), a.op, acl.Topic, topic)
	a.seen[topic] = v
	return v
}

// mayCreateTopic reports whether req may create topic: CREATE on the
// cluster, else on the topic (Kafka's CreateTopics and auto-creation).
func (b *Broker) mayCreateTopic(req *request, topic string) bool {
	return b.allowed(req, acl.Create, acl.Cluster, acl.ClusterName) || b.authorized(req, acl.Create, acl.Topic, topic)
}

// autoCreateFor is autoCreate for a request: a topic the request's
// principal may not create is unknown to it.
func (b *Broker) autoCreateFor(req *request, name string) (*meta.Topic, error) {
	if t, ok := b.meta.State().Topics[name]; ok {
		return t, nil
	}
	// A topic created a moment ago through another node, whose creation
	// this node has not applied yet: the producer was told it exists, and
	// must find it at its first attempt (broker/node/metasync.go).
	b.syncMetadataAndReconcile()
	if t, ok := b.meta.State().Topics[name]; ok {
		return t, nil
	}
	if !b.mayCreateTopic(req, name) {
		return nil, kerr.UnknownTopicOrPartition
	}
	return b.autoCreate(b.ctx, name)
}

// configResourceAuth is the operation's resource for a config resource
// (Describe/AlterConfigs, IncrementalAlterConfigs) and the error a
// refusal answers, or ok false for a type with no authorization of its
// own (its handler refuses it).
func configResourceAuth(t kmsg.ConfigResourceType, name string) (rt acl.ResourceType, rname string, refused *kerr.Error, ok bool) {
	switch t {
	case kmsg.ConfigResourceTypeTopic:
		return acl.Topic, name, kerr.TopicAuthorizationFailed, true
	case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger, kmsg.ConfigResourceType(16): // 16: CLIENT_METRICS
		return acl.Cluster, acl.ClusterName, kerr.ClusterAuthorizationFailed, true
	case kmsg.ConfigResourceType(32): // GROUP
		return acl.Group, name, kerr.GroupAuthorizationFailed, true
	}
	return 0, "", nil, false
}

// A gate authorizes a request before it is forwarded or handled. It may
// take out of the request what the principal may not do, and returns
// refuse, which puts those parts' refusals into the response whoever
// answers it, and answer, a whole response to send instead of handling
// the request at all.
type gateFunc func(b *Broker, req *request) (refuse func(kmsg.Response), answer kmsg.Response)

// gates are the APIs' gates by key; filled by registerGate from the API
// files' init and only read afterwards.
var gates = map[int16]gateFunc{}

func registerGate(key kmsg.Key, g gateFunc) { gates[int16(key)] = g }

// gate runs req's API's gate, if it has one.
func (b *Broker) gate(req *request) (refuse func(kmsg.Response), answer kmsg.Response) {
	g, ok := gates[req.kreq.Key()]
	if !ok {
		return nil, nil
	}
	return g(b, req)
}

// groupRefused is resp (a group API's empty response) carrying
// GROUP_AUTHORIZATION_FAILED as its error: JoinGroup, SyncGroup,
// Heartbeat and LeaveGroup answer a principal without READ on the group
// so, whatever else they ask.
func (b *Broker) groupRefused(api kmsg.Key, resp kmsg.Response) kmsg.Response {
	code := kerr.GroupAuthorizationFailed.Code
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		r.ErrorCode = code
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = code
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = code
	case *kmsg.OffsetDeleteResponse:
		r.ErrorCode = code
	}
	b.metrics.countError(api, code)
	return resp
}

// splitTopics leaves in *topics those whose name ok allows, in order, and
// returns the others: the parts of a request refused before it goes on.
func splitTopics[T any](topics *[]T, name func(*T) string, ok func(string) bool) (refused []T) {
	kept := (*topics)[:0:0]
	for i := range *topics {
		if ok(name(&(*topics)[i])) {
			kept = append(kept, (*topics)[i])
		} else {
			refused = append(refused, (*topics)[i])
		}
	}
	*topics = kept
	return refused
}

// mayWriteIdempotently reports whether req may have a producer id without
// a transactional id: IDEMPOTENT_WRITE on the cluster, or WRITE on some
// topic (KIP-679, Kafka's InitProducerId).
func (b *Broker) mayWriteIdempotently(req *request) bool {
	if b.authz == nil {
		return true
	}
	c := req.client()
	return b.authz.Allowed(c, acl.IdempotentWrite, acl.Cluster, acl.ClusterName) || b.authz.AuthorizeByResourceType(c, acl.Write, acl.Topic)
}

// configRefused is the refusal of op (DESCRIBE_CONFIGS or ALTER_CONFIGS)
// on a config resource, or nil when it is allowed or its type is left to
// the handler.
func (b *Broker) configRefused(req *request, op acl.Operation, t kmsg.ConfigResourceType, name string) *kerr.Error {
	rt, rname, refused, ok := configResourceAuth(t, name)
	if !ok || b.authorized(req, op, rt, rname) {
		return nil
	}
	return refused
}

// configRefusal is a config resource a gate took out of its request.
type configRefusal struct {
	t    kmsg.ConfigResourceType
	name string
	err  *kerr.Error
}

// refuseConfigs keeps in rs the resources req's principal may
// ALTER_CONFIGS and returns the others' refusals; key reads a resource's
// type and name (AlterConfigs and IncrementalAlterConfigs have a resource
// type each).
func refuseConfigs[T any](b *Broker, req *request, rs *[]T, key func(*T) (kmsg.ConfigResourceType, string)) []configRefusal {
	kept := (*rs)[:0:0]
	var refused []configRefusal
	for i := range *rs {
		t, name := key(&(*rs)[i])
		if e := b.configRefused(req, acl.AlterConfigs, t, name); e != nil {
			refused = append(refused, configRefusal{t, name, e})
		} else {
			kept = append(kept, (*rs)[i])
		}
	}
	*rs = kept
	return refused
}

// gateAlterConfigs takes out of an AlterConfigs or
// IncrementalAlterConfigs request, before it is forwarded, the resources
// the principal may not ALTER_CONFIGS, and answers them with the refusal
// of their type.
func gateAlterConfigs(b *Broker, req *request) (func(kmsg.Response), kmsg.Response) {
	var refused []configRefusal
	switch r := req.kreq.(type) {
	case *kmsg.AlterConfigsRequest:
		refused = refuseConfigs(b, req, &r.Resources, func(rr *kmsg.AlterConfigsRequestResource) (kmsg.ConfigResourceType, string) {
			return rr.ResourceType, rr.ResourceName
		})
	case *kmsg.IncrementalAlterConfigsRequest:
		refused = refuseConfigs(b, req, &r.Resources, func(rr *kmsg.IncrementalAlterConfigsRequestResource) (kmsg.ConfigResourceType, string) {
			return rr.ResourceType, rr.ResourceName
		})
	}
	if len(refused) == 0 {
		return nil, nil
	}
	api := kmsg.Key(req.kreq.Key())
	return func(resp kmsg.Response) {
		for _, f := range refused {
			code, msg := b.answerError(api, f.err)
			switch r := resp.(type) {
			case *kmsg.AlterConfigsResponse:
				sr := kmsg.NewAlterConfigsResponseResource()
				sr.ResourceType, sr.ResourceName, sr.ErrorCode, sr.ErrorMessage = f.t, f.name, code, msg
				r.Resources = append(r.Resources, sr)
			case *kmsg.IncrementalAlterConfigsResponse:
				sr := kmsg.NewIncrementalAlterConfigsResponseResource()
				sr.ResourceType, sr.ResourceName, sr.ErrorCode, sr.ErrorMessage = f.t, f.name, code, msg
				r.Resources = append(r.Resources, sr)
			}
		}
	}, nil
}

// hostedIf is hosted for a request that may see the topic, and
// TOPIC_AUTHORIZATION_FAILED for one that may not.
func (b *Broker) hostedIf(allowed bool, topic string, index int32) (*partition.Partition, error) {
	if !allowed {
		return nil, kerr.TopicAuthorizationFailed
	}
	return b.hosted(topic, index)
}
