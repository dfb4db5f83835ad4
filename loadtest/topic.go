package loadtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// admin is a short-lived admin client for the set-up steps of a run.
type admin struct {
	cl  *kgo.Client
	adm *kadm.Client
}

func openAdmin(bootstrap []string, opts []kgo.Opt) (*admin, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bootstrap...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	return &admin{cl: cl, adm: kadm.NewClient(cl)}, nil
}

func (a *admin) close() { a.cl.Close() }

var errNoTopic = errors.New("no such topic")

// metadataWait bounds how long a newly created topic may take to show up in
// metadata: brokers propagate it asynchronously.
const metadataWait = 10 * time.Second

// createTopic creates topic, treating an existing topic as success so that a
// benchmark script can be re-run as it is.
func (a *admin) createTopic(ctx context.Context, topic string, partitions int32, rf int16, configs map[string]string) error {
	if partitions <= 0 {
		partitions = -1
	}
	if rf <= 0 {
		rf = -1
	}
	var cfgs map[string]*string
	if len(configs) > 0 {
		cfgs = make(map[string]*string, len(configs))
		for k, v := range configs {
			cfgs[k] = &v
		}
	}
	_, err := a.adm.CreateTopic(ctx, partitions, rf, cfgs, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %q: %w", topic, err)
	}
	return nil
}

// partitions returns how many partitions topic has, waiting up to wait for
// a topic that is not known yet. With autoCreate it asks as a producer
// does, letting a broker that creates topics on first use create it; a
// broker that does not answers UNKNOWN_TOPIC_OR_PARTITION at once, which
// is errNoTopic without waiting.
func (a *admin) partitions(ctx context.Context, topic string, wait time.Duration, autoCreate bool) (int32, error) {
	deadline := time.Now().Add(wait)
	if autoCreate {
		// A topic being created answers LEADER_NOT_AVAILABLE until its
		// partitions have leaders (Kafka's behaviour for auto-creation).
		deadline = time.Now().Add(max(wait, metadataWait))
	}
	for {
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = autoCreate
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, a.cl)
		if err != nil {
			return 0, fmt.Errorf("metadata for %q: %w", topic, err)
		}
		var terr error = errNoTopic
		var n int32
		for _, t := range resp.Topics {
			if t.Topic != nil && *t.Topic == topic {
				terr, n = kerr.ErrorForCode(t.ErrorCode), int32(len(t.Partitions))
			}
		}
		switch {
		case terr == nil && n > 0:
			return n, nil
		case errors.Is(terr, kerr.UnknownTopicOrPartition) && autoCreate:
			return 0, fmt.Errorf("topic %q: %w", topic, errNoTopic)
		case terr != nil && !errors.Is(terr, errNoTopic) && !errors.Is(terr, kerr.UnknownTopicOrPartition) && !errors.Is(terr, kerr.LeaderNotAvailable):
			return 0, fmt.Errorf("metadata for %q: %w", topic, terr)
		case !time.Now().Before(deadline):
			return 0, fmt.Errorf("topic %q: %w", topic, errNoTopic)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// prepareTopic creates the topic when asked and returns its partition count.
// Without Create it produces as any Kafka client does: the broker decides
// whether a topic that does not exist is created on first use.
func prepareTopic(ctx context.Context, cfg *ProduceConfig) (int32, error) {
	a, err := openAdmin(cfg.Bootstrap, cfg.ClientOpts)
	if err != nil {
		return 0, err
	}
	defer a.close()
	var wait time.Duration
	if cfg.Create {
		if err := a.createTopic(ctx, cfg.Topic, cfg.Partitions, cfg.ReplicationFactor, cfg.TopicConfigs); err != nil {
			return 0, err
		}
		wait = metadataWait
	}
	n, err := a.partitions(ctx, cfg.Topic, wait, !cfg.Create)
	if errors.Is(err, errNoTopic) && !cfg.Create {
		err = fmt.Errorf("%w, and the broker does not create topics on first use (--create creates it)", err)
	}
	return n, err
}

// endOffsets returns the end offset of every partition of topic: its high
// watermark, or its last stable offset for a read_committed consumer,
// which reads no further.
func (a *admin) endOffsets(ctx context.Context, topic string, readCommitted bool) (map[int32]int64, error) {
	if readCommitted {
		l, err := a.adm.ListCommittedOffsets(ctx, topic)
		return offsetsOf("last stable", l, err)
	}
	l, err := a.adm.ListEndOffsets(ctx, topic)
	return offsetsOf("end", l, err)
}

func offsetsOf(what string, l kadm.ListedOffsets, err error) (map[int32]int64, error) {
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list %s offsets: %w", what, err)
	}
	out := make(map[int32]int64)
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// unread returns, for each partition holding records between where a
// consumer will start and the end offsets now, the end offset it must
// reach, and the offset it starts from. A verifying consumer is not done
// before it has read them all.
func (a *admin) unread(ctx context.Context, topic string, from startPoint, group string, readCommitted bool) (unread, starts map[int32]int64, err error) {
	ends, err := a.endOffsets(ctx, topic, readCommitted)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case from.earliest:
		l, lerr := a.adm.ListStartOffsets(ctx, topic)
		starts, err = offsetsOf("start", l, lerr)
	case from.latest:
		starts = maps.Clone(ends)
	default:
		l, lerr := a.adm.ListOffsetsAfterMilli(ctx, from.milli, topic)
		starts, err = offsetsOf("time", l, lerr)
	}
	if err != nil {
		return nil, nil, err
	}
	if group != "" {
		committed, err := a.adm.FetchOffsets(ctx, group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			err = nil // a new group: it starts where From says
		}
		if err != nil {
			return nil, nil, fmt.Errorf("fetch offsets of group %q: %w", group, err)
		}
		for p := range ends {
			if o, ok := committed.Lookup(topic, p); ok && o.Err == nil && o.At >= 0 {
				starts[p] = o.At
			}
		}
	}
	unread = make(map[int32]int64)
	from0 := make(map[int32]int64)
	for p, end := range ends {
		start, ok := starts[p]
		if !ok || start < 0 {
			start = end
		}
		if end > start {
			unread[p], from0[p] = end, start
		}
	}
	return unread, from0, nil
}
