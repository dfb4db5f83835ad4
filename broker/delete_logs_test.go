package broker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// logBuffer collects the text logs of several brokers.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Deleting a topic is an operator's request, not a failure: the followers'
// fetches and consumers' long polls that meet its closed logs are told to
// refresh their metadata, and nothing is logged as a warning or an error.
func TestDeleteTopicLogsNoErrors(t *testing.T) {
	var logs logBuffer
	c := testCluster(t, 3, func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)).With("node", cfg.NodeID)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const topic = "doomed"
	c.createTopic(topic, 3, 3, nil)
	cl := c.client(kgo.DefaultProduceTopic(topic))
	for range 20 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Consumers long-polling at the log end, as followers do.
	cons := c.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		pctx, stop := context.WithTimeout(ctx, 2*time.Second)
		defer stop()
		cons.PollFetches(pctx)
	}()
	time.Sleep(200 * time.Millisecond)
	resp, err := kadm.NewClient(cl).DeleteTopics(ctx, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	c.waitFor("every node to drop the topic", 10*time.Second, func() bool {
		for id := int32(1); id <= 3; id++ {
			for p := range int32(3) {
				if c.node(id).partition(topic, p) != nil {
					return false
				}
			}
		}
		return true
	})
	<-polled
	time.Sleep(300 * time.Millisecond) // fetches in flight finish
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, topic) && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
			t.Errorf("deleting a topic logged: %s", line)
		}
	}
}
