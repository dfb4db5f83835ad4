package meta

import (
	"context"
	"fmt"
	"slices"
)

// Restoring a topic from the bucket (broker/node/restore.go) recreates it
// as the metadata checkpoint describes it: its name and id kept, so that
// its partitions find their objects in the bucket (keys carry the id);
// its configs; and each partition at a leader epoch above every epoch its
// manifests were written at, so that the restored leaders' manifests
// fence the old ones. That is not CreateTopic: the id is given, the
// epochs are not 0, the producer-id allocator must not hand out ids the
// restored partitions remember, and an empty internal topic of this
// cluster (its own __consumer_offsets) may be replaced in the same step.

// RestoreSpec is one topic to restore. Topic.ID is required. Which topic
// may be replaced is the caller's decision (it alone sees the logs and
// the bucket); the store only makes the swap atomic and conditional.
type RestoreSpec struct {
	Topic TopicSpec
	// LeaderEpochs is each partition's leader epoch to start at; one per
	// partition.
	LeaderEpochs []int32
	// MinProducerID raises the producer-id allocator to at least this
	// (the checkpoint's next producer id).
	MinProducerID int64
	// Replace allows a topic of the same name to exist: it is deleted in
	// the same command, provided its id is still ReplaceID. Without it a
	// topic of that name is ErrTopicExists.
	Replace   bool
	ReplaceID [16]byte
}

type restoreTopicCmd struct {
	Topic         createTopicCmd
	LeaderEpochs  []int32
	MinProducerID int64
	Replace       bool `json:",omitempty"`
	ReplaceID     [16]byte
}

// RestoreTopic creates the topic spec describes, with its id and leader
// epochs, replacing the topic of the same name if spec says so, and
// raises the producer-id allocator. The same restore again (a retry)
// changes nothing and returns the topic. Errors: ErrTopicExists (a topic
// of that name not to be replaced, or another topic with that id),
// ErrUnknownTopic (the topic to replace is gone), and CreateTopic's.
func (s *Store) RestoreTopic(ctx context.Context, spec RestoreSpec) (Topic, error) {
	if spec.Topic.ID == ([16]byte{}) {
		return Topic{}, fmt.Errorf("meta: restore %q: no topic id", spec.Topic.Name)
	}
	res, err := s.propose(ctx, kindRestoreTopic, restoreTopicCmd{
		Topic: createTopicCmd{
			Name:              spec.Topic.Name,
			ID:                spec.Topic.ID,
			Internal:          spec.Topic.Internal,
			Partitions:        spec.Topic.Partitions,
			ReplicationFactor: spec.Topic.ReplicationFactor,
			Configs:           spec.Topic.Configs,
			Assignment:        spec.Topic.Assignment,
		},
		LeaderEpochs:  spec.LeaderEpochs,
		MinProducerID: spec.MinProducerID,
		Replace:       spec.Replace,
		ReplaceID:     spec.ReplaceID,
	})
	if err != nil {
		return Topic{}, err
	}
	return *res.topic.clone(), nil
}

func applyRestoreTopic(s *State, _ uint64, payload []byte) (*State, result) {
	var c restoreTopicCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	ct := c.Topic
	if ct.ID == ([16]byte{}) {
		return nil, result{err: fmt.Errorf("%w: topic %q has no id", errBadCommand, ct.Name)}
	}
	if int32(len(c.LeaderEpochs)) != ct.Partitions || slices.ContainsFunc(c.LeaderEpochs, func(e int32) bool { return e < 0 }) {
		return nil, result{err: fmt.Errorf("%w: %d leader epochs %v for %d partitions", errBadCommand, len(c.LeaderEpochs), c.LeaderEpochs, ct.Partitions)}
	}
	if c.MinProducerID < 0 {
		return nil, result{err: fmt.Errorf("%w: producer id %d", errBadCommand, c.MinProducerID)}
	}
	old, exists := s.Topics[ct.Name]
	switch {
	case exists && old.ID == ct.ID:
		// Restored already: this is a retry.
		return nil, result{topic: old}
	case exists && (!c.Replace || old.ID != c.ReplaceID):
		return nil, result{err: fmt.Errorf("%w: %q (id %x)", ErrTopicExists, ct.Name, old.ID)}
	case !exists && c.Replace:
		return nil, result{err: fmt.Errorf("%w: %q, to be replaced, is gone", ErrUnknownTopic, ct.Name)}
	}
	if other, ok := s.byID[ct.ID]; ok {
		return nil, result{err: fmt.Errorf("%w: id %x belongs to %q", ErrTopicExists, ct.ID, other.Name)}
	}
	t, err := s.newTopic(ct)
	if err != nil {
		return nil, result{err: err}
	}
	for i := range t.Partitions {
		t.Partitions[i].LeaderEpoch = c.LeaderEpochs[i]
	}
	next := s.clone()
	if exists {
		next.deleteTopic(old)
	}
	next.putTopic(t)
	next.NextProducerID = max(next.NextProducerID, c.MinProducerID)
	return next, result{topic: t}
}
