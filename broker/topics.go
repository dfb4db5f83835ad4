package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/meta"
)

// maxTopicNameLen is Kafka's limit: 249 leaves room for the partition
// suffix in a 255-byte directory name.
const maxTopicNameLen = 249

// validateTopicName applies Kafka's rules for topic names.
func validateTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: topic name is empty", kerr.InvalidTopicException)
	case name == "." || name == "..":
		return fmt.Errorf("%w: topic name cannot be %q", kerr.InvalidTopicException, name)
	case len(name) > maxTopicNameLen:
		return fmt.Errorf("%w: topic name is longer than %d characters", kerr.InvalidTopicException, maxTopicNameLen)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: topic name %q contains %q; only ASCII letters, digits, '.', '_' and '-' are allowed", kerr.InvalidTopicException, name, c)
		}
	}
	return nil
}

// collidingTopic returns an existing topic whose name equals name once
// '.' and '_' are treated alike, as Kafka refuses such pairs: metric
// names replace '.' with '_', so a.b and a_b would share their series.
func (b *Broker) collidingTopic(name string) (string, bool) {
	if !strings.ContainsAny(name, "._") {
		return "", false
	}
	key := strings.ReplaceAll(name, ".", "_")
	for other := range b.meta.State().Topics {
		if other != name && strings.ReplaceAll(other, ".", "_") == key {
			return other, true
		}
	}
	return "", false
}

// checkMinInsync refuses a min.insync.replicas larger than the replication
// factor: no ISR could ever be that large, so every acks=all produce would
// wait and time out. Kafka accepts it; refusing is kinder. configs are the
// topic's configs as they will be, old its configs before an alter (nil
// at creation). A broker default counts at creation; at an alter only a
// change of the value in force does, so altering something else on a
// topic made before the default was raised is not refused for it.
func (b *Broker) checkMinInsync(configs, old map[string]string, replicationFactor int) error {
	v, src := b.topicConfigValue(configs, "min.insync.replicas")
	n, err := strconv.Atoi(v)
	if err != nil || n <= replicationFactor {
		return nil
	}
	if old != nil {
		if was, _ := b.topicConfigValue(old, "min.insync.replicas"); was == v {
			return nil
		}
	}
	if src == configSourceTopic {
		return fmt.Errorf("%w: min.insync.replicas %d is larger than the replication factor %d: no acks=all produce could ever succeed", kerr.InvalidConfig, n, replicationFactor)
	}
	return fmt.Errorf("%w: the broker default min.insync.replicas %d is larger than the replication factor %d: no acks=all produce could ever succeed; set min.insync.replicas on the topic to at most %d", kerr.InvalidConfig, n, replicationFactor, replicationFactor)
}

// replicationFactor is the smallest replica count of t's partitions: the
// largest ISR every partition can have.
func replicationFactor(t *meta.Topic) int {
	rf := 0
	for i, p := range t.Partitions {
		if i == 0 || len(p.Replicas) < rf {
			rf = len(p.Replicas)
		}
	}
	return rf
}

// topicCreate is a request to create one topic, from CreateTopics or from
// auto-creation.
type topicCreate struct {
	name              string
	partitions        int32 // -1: broker default
	replicationFactor int16 // -1: broker default
	configs           map[string]string
	validateOnly      bool
	// assignment, when set, places each partition on the listed brokers.
	assignment [][]int32
	// auto is a topic created on first use: it takes the broker's
	// defaults as they are, as Kafka's auto-creation does, rather than
	// fail a producer that never asked for acks=all.
	auto bool
}

// createTopic validates and, unless validateOnly, creates a topic through
// the metadata log, then opens its local partitions before returning so
// that a produce right after creation finds them. It replaces c's -1
// partition count and replication factor with the defaults it applied.
func (b *Broker) createTopic(ctx context.Context, c *topicCreate) (*meta.Topic, error) {
	if err := validateTopicName(c.name); err != nil {
		return nil, err
	}
	if c.partitions == -1 {
		c.partitions = b.cfg.DefaultPartitions
	}
	if c.partitions < 1 {
		return nil, fmt.Errorf("%w: partition count %d must be at least 1", kerr.InvalidPartitions, c.partitions)
	}
	if c.replicationFactor == -1 {
		c.replicationFactor = b.cfg.DefaultReplicationFactor
	}
	st := b.meta.State()
	var brokers int16
	for id := range st.Brokers {
		if st.Alive(id) {
			brokers++
		}
	}
	if c.assignment == nil && c.replicationFactor < 1 {
		return nil, fmt.Errorf("%w: replication factor %d: it must be at least 1", kerr.InvalidReplicationFactor, c.replicationFactor)
	}
	if c.assignment == nil && c.replicationFactor > brokers {
		return nil, fmt.Errorf("%w: replication factor %d, but %d broker(s) are alive", kerr.InvalidReplicationFactor, c.replicationFactor, brokers)
	}
	for k, v := range c.configs {
		if err := validateTopicConfig(k, v); err != nil {
			return nil, fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
		}
	}
	if !c.auto {
		if err := b.checkMinInsync(c.configs, nil, int(c.replicationFactor)); err != nil {
			return nil, err
		}
	}
	if _, exists := b.topicByName(c.name); exists {
		return nil, fmt.Errorf("%w: topic %q already exists", kerr.TopicAlreadyExists, c.name)
	}
	if other, ok := b.collidingTopic(c.name); ok {
		return nil, fmt.Errorf("%w: topic %q collides with existing topic %q ('.' and '_' are the same in metric names)", kerr.InvalidTopicException, c.name, other)
	}
	if c.validateOnly {
		return &meta.Topic{Name: c.name, Configs: c.configs}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t, err := b.meta.CreateTopic(ctx, meta.TopicSpec{
		Name:              c.name,
		Partitions:        c.partitions,
		ReplicationFactor: c.replicationFactor,
		Configs:           maps.Clone(c.configs),
		Assignment:        c.assignment,
	})
	if errors.Is(err, meta.ErrNotController) && b.clustered() {
		t, err = b.createAtController(ctx, c)
	}
	if err != nil {
		return nil, fmt.Errorf("create topic %q: %w", c.name, err)
	}
	if err := b.reconcile(); err != nil {
		b.log.Error("open partitions of new topic", "topic", c.name, "err", err)
	}
	b.log.Info("topic created", "topic", c.name, "partitions", c.partitions)
	return &t, nil
}

// createAtController creates a topic through the controller, for the
// topics a broker that is not the controller creates itself (auto-created
// ones), and returns it once this node's metadata has it.
func (b *Broker) createAtController(ctx context.Context, c *topicCreate) (meta.Topic, error) {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = c.name, c.partitions, c.replicationFactor
	for i, replicas := range c.assignment {
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Partition, ra.Replicas = int32(i), replicas
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	}
	if c.assignment != nil {
		rt.NumPartitions, rt.ReplicationFactor = -1, -1
	}
	for k, v := range c.configs {
		cfg := kmsg.NewCreateTopicsRequestTopicConfig()
		cfg.Name, cfg.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, cfg)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = int32(controlTimeout / time.Millisecond)
	kresp, err := b.controllerRequest(ctx, req)
	if err != nil {
		return meta.Topic{}, err
	}
	resp := kresp.(*kmsg.CreateTopicsResponse)
	if len(resp.Topics) != 1 {
		return meta.Topic{}, fmt.Errorf("controller answered for %d topics", len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return meta.Topic{}, err
	}
	for {
		changed := b.meta.Changed()
		if t, ok := b.topicByName(c.name); ok {
			return *t, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return meta.Topic{}, fmt.Errorf("waiting for the new topic's metadata: %w", ctx.Err())
		}
	}
}

// autoCreate returns the topic name, first creating it with the broker
// defaults if it does not exist and auto-creation is on.
func (b *Broker) autoCreate(ctx context.Context, name string) (*meta.Topic, error) {
	if t, ok := b.topicByName(name); ok {
		return t, nil
	}
	if !b.cfg.AutoCreateTopics {
		return nil, kerr.UnknownTopicOrPartition
	}
	t, err := b.createTopic(ctx, &topicCreate{name: name, partitions: -1, replicationFactor: -1, auto: true})
	if err != nil && errorCode(err) == kerr.TopicAlreadyExists.Code {
		// Another request created it first.
		t2, ok := b.topicByName(name)
		if ok {
			return t2, nil
		}
	}
	return t, err
}
