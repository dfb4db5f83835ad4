package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/meta"
)

// maxTopicNameLen is Kafka's limit: 249 leaves room for the partition
// suffix in a 255-byte directory name.
const maxTopicNameLen = 249

// ValidateTopicName applies Kafka's rules for topic names.
func ValidateTopicName(name string) error {
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
func (n *Node) collidingTopic(name string) (string, bool) {
	if !strings.ContainsAny(name, "._") {
		return "", false
	}
	key := strings.ReplaceAll(name, ".", "_")
	for other := range n.meta.State().Topics {
		if other != name && strings.ReplaceAll(other, ".", "_") == key {
			return other, true
		}
	}
	return "", false
}

// CheckMinInsync refuses a min.insync.replicas larger than the replication
// factor: no ISR could ever be that large, so every acks=all produce would
// wait and time out. Kafka accepts it; refusing is kinder. configs are the
// topic's configs as they will be, old its configs before an alter (nil
// at creation). A broker default counts at creation; at an alter only a
// change of the value in force does, so altering something else on a
// topic made before the default was raised is not refused for it.
func (n *Node) CheckMinInsync(configs, old map[string]string, replicationFactor int) error {
	v, source := n.TopicConfigValue(configs, "min.insync.replicas")
	topicLevel := source == ConfigSourceTopic
	minISR, err := strconv.Atoi(v)
	if err != nil || minISR <= replicationFactor {
		return nil
	}
	if old != nil {
		if was, _ := n.TopicConfigValue(old, "min.insync.replicas"); was == v {
			return nil
		}
	}
	if topicLevel {
		return fmt.Errorf("%w: min.insync.replicas %d is larger than the replication factor %d: no acks=all produce could ever succeed", kerr.InvalidConfig, minISR, replicationFactor)
	}
	return fmt.Errorf("%w: the broker default min.insync.replicas %d is larger than the replication factor %d: no acks=all produce could ever succeed; set min.insync.replicas on the topic to at most %d", kerr.InvalidConfig, minISR, replicationFactor, replicationFactor)
}

// ReplicationFactor is the smallest replica count of t's partitions: the
// largest ISR every partition can have.
func ReplicationFactor(t *meta.Topic) int {
	rf := 0
	for i, p := range t.Partitions {
		if i == 0 || len(p.Replicas) < rf {
			rf = len(p.Replicas)
		}
	}
	return rf
}

// TopicCreate is a request to create one topic, from CreateTopics or from
// auto-creation.
type TopicCreate struct {
	Name              string
	Partitions        int32 // -1: broker default
	ReplicationFactor int16 // -1: broker default
	Configs           map[string]string
	ValidateOnly      bool
	// Assignment, when set, places each partition on the listed brokers.
	Assignment [][]int32
	// Auto is a topic created on first use: it takes the broker's
	// defaults as they are, as Kafka's auto-creation does, rather than
	// fail a producer that never asked for acks=all.
	Auto bool
}

// CreateTopic validates and, unless ValidateOnly, creates a topic through
// the metadata log, then opens its local partitions before returning so
// that a produce right after creation finds them. It replaces c's -1
// partition count and replication factor with the defaults it applied.
func (n *Node) CreateTopic(ctx context.Context, c *TopicCreate) (*meta.Topic, error) {
	if err := ValidateTopicName(c.Name); err != nil {
		return nil, err
	}
	if err := n.prepareReadReplica(ctx, c); err != nil {
		return nil, err
	}
	if c.Partitions == -1 {
		c.Partitions = n.cfg.DefaultPartitions
	}
	if c.Partitions < 1 {
		return nil, fmt.Errorf("%w: partition count %d must be at least 1", kerr.InvalidPartitions, c.Partitions)
	}
	if c.ReplicationFactor == -1 {
		c.ReplicationFactor = n.cfg.DefaultReplicationFactor
	}
	st := n.meta.State()
	var brokers int16
	for id := range st.Brokers {
		if st.Alive(id) {
			brokers++
		}
	}
	if c.Assignment == nil && c.ReplicationFactor < 1 {
		return nil, fmt.Errorf("%w: replication factor %d: it must be at least 1", kerr.InvalidReplicationFactor, c.ReplicationFactor)
	}
	if c.Assignment == nil && c.ReplicationFactor > brokers {
		return nil, fmt.Errorf("%w: replication factor %d, but %d broker(s) are alive", kerr.InvalidReplicationFactor, c.ReplicationFactor, brokers)
	}
	for k, v := range c.Configs {
		if err := ValidateTopicConfig(k, v); err != nil {
			return nil, fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
		}
	}
	if !c.Auto {
		if err := n.CheckMinInsync(c.Configs, nil, int(c.ReplicationFactor)); err != nil {
			return nil, err
		}
	}
	if _, exists := n.TopicByName(c.Name); exists {
		return nil, fmt.Errorf("%w: topic %q already exists", kerr.TopicAlreadyExists, c.Name)
	}
	if other, ok := n.collidingTopic(c.Name); ok {
		return nil, fmt.Errorf("%w: topic %q collides with existing topic %q ('.' and '_' are the same in metric names)", kerr.InvalidTopicException, c.Name, other)
	}
	if c.ValidateOnly {
		return &meta.Topic{Name: c.Name, Configs: c.Configs}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	spec := meta.TopicSpec{
		Name:              c.Name,
		Partitions:        c.Partitions,
		ReplicationFactor: c.ReplicationFactor,
		Configs:           maps.Clone(c.Configs),
		Assignment:        c.Assignment,
	}
	t, err := n.meta.CreateTopic(ctx, spec)
	if errors.Is(err, meta.ErrNotController) && n.Clustered() {
		t, err = n.createAtController(ctx, spec)
	}
	if err != nil {
		return nil, fmt.Errorf("create topic %q: %w", c.Name, err)
	}
	if err := n.Reconcile(); err != nil {
		n.log.Error("open partitions of new topic", "topic", c.Name, "err", err)
	}
	if IsReadReplica(t.Configs) {
		n.awaitReadReplica(ctx, c.Name)
	}
	n.log.Info("topic created", "topic", c.Name, "partitions", c.Partitions)
	return &t, nil
}

// createAtController creates a topic through the controller, for the
// topics a broker that is not the controller creates itself (auto-created
// ones), and returns it once this node's metadata has it.
func (n *Node) createAtController(ctx context.Context, spec meta.TopicSpec) (meta.Topic, error) {
	if err := n.ctrl.CreateTopic(ctx, spec); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return meta.Topic{}, err
	}
	for {
		changed := n.meta.Changed()
		if t, ok := n.TopicByName(spec.Name); ok {
			return *t, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return meta.Topic{}, fmt.Errorf("waiting for the new topic's metadata: %w", ctx.Err())
		}
	}
}

// AutoCreate returns the topic name, first creating it with the broker
// defaults if it does not exist and auto-creation is on.
func (n *Node) AutoCreate(ctx context.Context, name string) (*meta.Topic, error) {
	if t, ok := n.TopicByName(name); ok {
		return t, nil
	}
	if !n.cfg.AutoCreateTopics {
		return nil, kerr.UnknownTopicOrPartition
	}
	t, err := n.CreateTopic(ctx, &TopicCreate{Name: name, Partitions: -1, ReplicationFactor: -1, Auto: true})
	if err != nil && alreadyExists(err) {
		// Another request created it first.
		t2, ok := n.TopicByName(name)
		if ok {
			return t2, nil
		}
	}
	return t, err
}

// alreadyExists reports whether err says the topic exists: the error code
// the broker answers with for it is TOPIC_ALREADY_EXISTS.
func alreadyExists(err error) bool {
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return ke.Code == kerr.TopicAlreadyExists.Code
	}
	return errors.Is(err, meta.ErrTopicExists)
}

// TopicByName returns the topic from the current metadata.
func (n *Node) TopicByName(name string) (*meta.Topic, bool) {
	t, ok := n.meta.State().Topics[name]
	return t, ok
}
