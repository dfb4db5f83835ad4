package broker

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMetricsAndHealth scrapes /metrics the way Prometheus would after some
// traffic, and checks the series an operator builds dashboards on.
func TestMetricsAndHealth(t *testing.T) {
	b := testBroker(t, "", func(c *Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.AutoCreateTopics = false
	})
	cl := testClient(t, b, kgo.DefaultProduceTopic("m"))
	createTopic(t, kadmFor(cl), "m", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cons := testClient(t, b, kgo.ConsumeTopics("m"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for n := 0; n < 10; {
		n += cons.PollFetches(ctx).NumRecords()
	}
	// An unknown topic with auto-creation off: an error code to count.
	missing := testClient(t, b, kgo.DefaultProduceTopic("missing"), kgo.UnknownTopicRetries(0))
	missing.ProduceSync(ctx, &kgo.Record{Value: []byte("x")})

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + b.HTTPAddr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz: %d", code)
	}
	code, body := get("/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`strata_requests_total{api="Produce"} 10`,
		`strata_requests_total{api="Fetch"}`,
		`strata_request_errors_total{api="Metadata",code="3",error="UNKNOWN_TOPIC_OR_PARTITION"}`,
		`strata_network_received_bytes_total`,
		`strata_network_sent_bytes_total`,
		`strata_produce_duration_seconds_count 10`,
		`strata_fetch_duration_seconds_bucket`,
		`strata_request_duration_seconds_bucket{api="Metadata"`,
		`strata_log_end_offset{partition="0",topic="m"} 10`,
		`strata_produced_records_total 10`,
		`strata_connections `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestTierCacheMetrics: after a replay from the bucket, /metrics shows the
// remote bytes served and the chunk cache's work: chunks read through
// memory and, for a one-pass read, nothing written to the disk cache.
func TestTierCacheMetrics(t *testing.T) {
	b := tieredBroker(t, "", tierStores[0].open(t), func(c *Config) { c.HTTPListen = "127.0.0.1:0" })
	createTopic(t, testAdmin(t, b), "cold", 1, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"local.retention.bytes": ptr("0"),
	})
	const n = 200
	produceKeyed(t, b, "cold", n, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploaded(t, b, "cold", 1)
	p := b.partition("cold", 0)
	waitFor(t, 10*time.Second, "local deletion", func() bool { return p.Log().StartOffset() > 0 })
	consumeCount(t, b, "cold", n)

	resp, err := http.Get("http://" + b.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	value := func(name string) float64 {
		for line := range strings.Lines(string(body)) {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				return f
			}
		}
		t.Fatalf("/metrics lacks %s", name)
		return 0
	}
	for _, name := range []string{"strata_tier_read_bytes_total", "strata_tier_cache_memory_bytes"} {
		if v := value(name); v <= 0 {
			t.Errorf("%s = %v after a replay from the bucket, want > 0", name, v)
		}
	}
	// Whether a read found its chunk already read ahead (a hit) or waited
	// for it (a miss) is a race; that it was one of them is not.
	if hits, misses := value("strata_tier_cache_hits_total"), value("strata_tier_cache_misses_total"); hits+misses <= 0 {
		t.Errorf("%v chunk cache hits and %v misses after a replay from the bucket", hits, misses)
	}
	for _, name := range []string{"strata_tier_cache_disk_writes_total", "strata_tier_cache_disk_bytes"} {
		if v := value(name); v != 0 {
			t.Errorf("%s = %v after a one-pass replay, want 0", name, v)
		}
	}
	value("strata_tier_cache_disk_evictions_total")
}

// scrape returns b's /metrics page.
func scrape(t *testing.T, b *Broker) string {
	t.Helper()
	resp, err := http.Get("http://" + b.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s %v", resp.Status, err)
	}
	return string(body)
}

// TestApiVersionsProbeIsNotAnError: a client newer than the broker opens
// every connection with an ApiVersions it cannot serve and retries at v0
// (KIP-511). That negotiation is the protocol working, so an error-rate
// alert must not fire for every connection of an up-to-date client.
func TestApiVersionsProbeIsNotAnError(t *testing.T) {
	b := testBroker(t, "", func(c *Config) { c.HTTPListen = "127.0.0.1:0" })
	for range 3 {
		if av := probeApiVersions(t, b.Addr().String()); av.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("probe answered with error %d", av.ErrorCode)
		}
	}
	body := scrape(t, b)
	if !strings.Contains(body, `strata_requests_total{api="ApiVersions"} 3`) {
		t.Errorf("the probes are not counted as requests")
	}
	if strings.Contains(body, `strata_request_errors_total{api="ApiVersions"`) {
		t.Errorf("the probes are counted as errors")
	}
}

// TestRuntimeMetrics: /metrics carries what every Go service's dashboards
// start from (the Go runtime and process collectors) and which build is
// running, so a scrape tells apart the nodes of a rolling upgrade.
func TestRuntimeMetrics(t *testing.T) {
	b := testBroker(t, "", func(c *Config) { c.HTTPListen = "127.0.0.1:0" })
	body := scrape(t, b)
	want := []string{"go_goroutines ", "go_memstats_heap_alloc_bytes ", `strata_build_info{goversion="` + runtime.Version() + `",revision=`}
	if runtime.GOOS == "linux" {
		want = append(want, "process_resident_memory_bytes ", "process_open_fds ")
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

// scrapeSeries returns broker b's /metrics as series -> value, where the
// series is the name and labels as Prometheus prints them.
func scrapeSeries(t *testing.T, b *Broker) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(scrape(t, b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestClusterMetrics scrapes every node of a three-node cluster for what
// an operator alerts on: which node is the controller, the partitions with
// no leader, the metadata quorum's progress, each partition's ISR size, the
// ISR shrinks of partitions led here whoever made them, and produce errors
// by name.
func TestClusterMetrics(t *testing.T) {
	var logs logBuffer
	c := testCluster(t, 3, func(cfg *Config) {
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)).With("node", cfg.NodeID)
	})
	minISR := "3"
	c.createTopic("strict", 1, 3, map[string]*string{"min.insync.replicas": &minISR})
	st := c.partitionState("strict", 0)
	leader, follower := st.Leader, c.followerNotController(st)
	// A topic whose only replica is the follower: offline once it is gone.
	c.createTopicOn("solo", []int32{follower})
	ctrl := c.any().meta.ControllerID()

	c.waitFor("every replica of strict in its ISR on the leader's scrape", 10*time.Second, func() bool {
		return scrapeSeries(t, c.node(leader))[`strata_partition_isr_size{partition="0",topic="strict"}`] == 3
	})
	for id := int32(1); id <= 3; id++ {
		// Read before the scrape: the commit index it shows is at least
		// what was applied by then.
		applied := float64(c.node(id).meta.RaftStats().AppliedIndex)
		m := scrapeSeries(t, c.node(id))
		want := 0.0
		if id == ctrl {
			want = 1
		}
		if got := m["strata_active_controller"]; got != want {
			t.Errorf("node %d: strata_active_controller %v, want %v (controller %d)", id, got, want, ctrl)
		}
		if got := m["strata_offline_partitions"]; got != 0 {
			t.Errorf("node %d: strata_offline_partitions %v before any node stopped", id, got)
		}
		if got := m["strata_raft_commit_index"]; got < applied || got == 0 {
			t.Errorf("node %d: strata_raft_commit_index %v, below the applied index %v", id, got, applied)
		}
		if got := m["strata_raft_leader_changes_total"]; got < 1 {
			t.Errorf("node %d: strata_raft_leader_changes_total %v: the first controller's election not counted", id, got)
		}
		if got, ok := m["strata_raft_last_contact_seconds"]; !ok || got < 0 || got > 5 || (id == ctrl && got != 0) {
			t.Errorf("node %d: strata_raft_last_contact_seconds %v (present %v)", id, got, ok)
		}
	}
	shrinks := scrapeSeries(t, c.node(leader))["strata_isr_shrinks_total"]

	// The follower dies: the controller fences it and takes it out of
	// every ISR, which the leader did not ask for.
	c.stop(follower)
	c.waitFor("the controller to fence the follower", 10*time.Second, func() bool {
		return len(c.partitionState("strict", 0).ISR) == 2
	})
	c.waitFor("the leader to count the shrink", 5*time.Second, func() bool {
		return scrapeSeries(t, c.node(leader))["strata_isr_shrinks_total"] > shrinks
	})
	m := scrapeSeries(t, c.node(leader))
	if got := m[`strata_partition_isr_size{partition="0",topic="strict"}`]; got != 2 {
		t.Errorf("leader %d: strata_partition_isr_size of strict %v, want 2", leader, got)
	}
	var offline float64
	for _, tp := range c.any().meta.State().Topics {
		for _, p := range tp.Partitions {
			if p.Leader < 0 {
				offline++
			}
		}
	}
	if offline == 0 {
		t.Fatal("no partition without a leader after the only replica of solo stopped")
	}
	c.waitFor("the controller to report the offline partitions", 5*time.Second, func() bool {
		return scrapeSeries(t, c.node(ctrl))["strata_offline_partitions"] == offline
	})

	// min.insync.replicas=3 with two in sync: acks=all is refused, and
	// the refusal is counted under its name.
	if code := c.rawProduce(leader, "strict", -1, time.Second); code != kerr.NotEnoughReplicas.Code {
		t.Fatalf("acks=all produce with 2 of min.insync 3 in sync: error %d, want NOT_ENOUGH_REPLICAS", code)
	}
	series := `strata_request_errors_total{api="Produce",code="19",error="NOT_ENOUGH_REPLICAS"}`
	if got := scrapeSeries(t, c.node(leader))[series]; got < 1 {
		t.Errorf("leader %d: %s %v", leader, series, got)
	}

	// The follower comes back and catches up: the leader counts the
	// expansion, and logs it at debug only (a node's return expands every
	// ISR it is in, one line each).
	expands := scrapeSeries(t, c.node(leader))["strata_isr_expands_total"]
	c.restart(follower)
	c.waitFor("the follower back in the ISR", 15*time.Second, func() bool {
		return len(c.partitionState("strict", 0).ISR) == 3
	})
	c.waitFor("the leader to count the expansion", 5*time.Second, func() bool {
		return scrapeSeries(t, c.node(leader))["strata_isr_expands_total"] > expands
	})
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `msg="ISR changed"`) && strings.Contains(line, "level=INFO") && strings.Contains(line, "topic=strict") &&
			len(isrField(line, "to")) > len(isrField(line, "from")) {
			t.Errorf("an ISR expansion logged at info: %s", line)
		}
	}
}

// isrField returns the members of the ISR that key="[...]" holds in line.
func isrField(line, key string) []string {
	i := strings.Index(line, key+`="[`)
	if i < 0 {
		return nil
	}
	rest := line[i+len(key)+3:]
	return strings.Fields(rest[:strings.IndexByte(rest, ']')])
}

// TestMetricsDocumented: every series the code names is in the table of
// docs/operations.md, with its name in backquotes, so that an operator
// finds what each one means.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`"(strata_[a-z0-9_]+)"`)
	found := 0
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllSubmatch(src, -1) {
			found++
			if !bytes.Contains(doc, []byte("`"+string(m[1])+"`")) {
				t.Errorf("%s: %s is not in docs/operations.md", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 50 {
		t.Fatalf("found %d metric names in the code: the pattern no longer matches how they are written", found)
	}
}
