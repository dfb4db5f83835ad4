package broker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/broker/node"
)

// testBroker starts a broker on a loopback port in dir (a fresh temp dir
// when empty) and closes it when the test ends.
func testBroker(t testing.TB, dir string, mutate ...func(*Config)) *Broker {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := Config{
		DataDir:          dir,
		Listen:           "127.0.0.1:0",
		AutoCreateTopics: true,
		Logger:           testLogger(),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return b
}

func testLogger() *slog.Logger {
	if os.Getenv("STRATA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testClient returns a franz-go client bootstrapped at b.
func testClient(t testing.TB, b *Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(b.Addr().String())}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func testAdmin(t testing.TB, b *Broker) *kadm.Client {
	return kadm.NewClient(testClient(t, b))
}

func createTopic(t testing.TB, adm *kadm.Client, name string, partitions int32, configs map[string]*string) kadm.CreateTopicResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, name)
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	return resp
}

func ptr[T any](v T) *T { return &v }

func kadmFor(cl *kgo.Client) *kadm.Client { return kadm.NewClient(cl) }

// segmentFiles counts the .log files of a hosted partition.
func segmentFiles(t testing.TB, b *Broker, topic string, partition int32) int {
	t.Helper()
	p := b.partition(topic, partition)
	if p == nil {
		t.Fatalf("%s-%d not hosted", topic, partition)
	}
	dir := filepath.Join(b.logsDir, node.PartitionDir(topic, p.TopicID(), partition))
	m, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}
