package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDevNodes: `strata dev --nodes 3` is a whole local cluster in one
// command (issue 11, "Operating it"): one bootstrap line with every
// address, each address a broker that answers, one data directory per
// node and one shared bucket, a client on that line that sees three
// brokers and creates a topic with replication factor 3, and a clean exit
// on SIGTERM.
func TestDevNodes(t *testing.T) {
	dataDir := t.TempDir()
	n, line := startProcess(t, nil, "dev", "--nodes", "3", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http-listen", "off")
	n.readBootstrap(t, line)
	addrs := strings.Split(n.bootstrap, ",")
	if len(addrs) != 3 {
		t.Fatalf("bootstrap line names %d addresses, want 3: %q", len(addrs), line)
	}
	for i, a := range addrs {
		if strings.HasSuffix(a, ":0") {
			t.Errorf("address %d is port 0, not the port chosen: %s", i, a)
		}
		// Each one is a broker of the same cluster, naming one controller.
		if resp := metadataOf(t, a); resp.ControllerID < 0 || resp.ControllerID > 2 {
			t.Errorf("%s names controller %d", a, resp.ControllerID)
		}
	}
	for _, d := range []string{"node-0", "node-1", "node-2", "bucket"} {
		if _, err := os.Stat(filepath.Join(dataDir, d)); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}

	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		adm := kadm.NewClient(newClient(t, n.bootstrap, kgo.SeedBrokers(addrs...)))
		var brokers kadm.BrokerDetails
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if brokers, err = adm.ListBrokers(ctx); err != nil {
				t.Fatalf("list brokers: %v", err)
			}
			if len(brokers) == 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(brokers) != 3 {
			t.Fatalf("%d of 3 brokers registered", len(brokers))
		}
		if ids := brokers.NodeIDs(); !reflect.DeepEqual(ids, []int32{0, 1, 2}) {
			t.Errorf("broker ids %v, want 0 1 2", ids)
		}
		resp, err := adm.CreateTopic(ctx, 3, 3, nil, "replicated")
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create with replication factor 3: %v", err)
		}
	}()
	n.stop(t)
}

// TestDevNodesAddresses: node i listens on the listener's port plus i,
// its metrics on the HTTP port plus i; port 0 stays 0 for every node (each
// picks a free one), and a count that runs past the last port is refused.
func TestDevNodesAddresses(t *testing.T) {
	tests := []struct {
		listen, http string
		n            int
		kafka, web   []string
		err          string
	}{
		{"127.0.0.1:9092", "127.0.0.1:9644", 3, []string{"127.0.0.1:9092", "127.0.0.1:9093", "127.0.0.1:9094"}, []string{"127.0.0.1:9644", "127.0.0.1:9645", "127.0.0.1:9646"}, ""},
		{"127.0.0.1:0", "", 2, []string{"127.0.0.1:0", "127.0.0.1:0"}, []string{"", ""}, ""},
		{"[::1]:19092", "127.0.0.1:0", 2, []string{"[::1]:19092", "[::1]:19093"}, []string{"127.0.0.1:0", "127.0.0.1:0"}, ""},
		{"127.0.0.1:65535", "", 2, nil, nil, "65535"},
	}
	for _, tt := range tests {
		kafka, err := consecutiveAddrs(tt.listen, tt.n)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s x%d: error %v, want %q", tt.listen, tt.n, err, tt.err)
			}
			continue
		}
		web, err2 := consecutiveAddrs(tt.http, tt.n)
		if err != nil || err2 != nil {
			t.Errorf("%s x%d: %v %v", tt.listen, tt.n, err, err2)
			continue
		}
		if !reflect.DeepEqual(kafka, tt.kafka) || !reflect.DeepEqual(web, tt.web) {
			t.Errorf("%s, %s x%d: kafka %v http %v", tt.listen, tt.http, tt.n, kafka, web)
		}
	}
}

// TestDevNodesUsage: the node count is 1 to 9, and a bad one is a usage
// error found before anything starts.
func TestDevNodesUsage(t *testing.T) {
	for _, bad := range []string{"0", "10", "-1", "many"} {
		dir := filepath.Join(t.TempDir(), "data")
		code, stdout, stderr := runCLI(t, nil, "dev", "--nodes", bad, "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "off")
		if code != 2 || stdout != "" {
			t.Errorf("--nodes %s: exit %d, stdout %q", bad, code, stdout)
		}
		assertOneLineError(t, stderr, "--nodes", "strata dev --help")
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("--nodes %s: data dir created", bad)
		}
	}
}

// TestDevDataDirShape: strata dev and strata dev --nodes N lay out their
// data dir differently but tier into the same <data-dir>/bucket, so one
// shape run over the other's data showed topics vanish and come back
// (issue 21). Each refuses the other's data dir with one line naming it;
// a local cluster run again on its own data dir starts on the raft
// addresses its quorum stored and still has its topics, and one of
// another size is refused.
func TestDevDataDirShape(t *testing.T) {
	quiet := []string{"--listen", "127.0.0.1:0", "--http-listen", "off"}
	single := t.TempDir()
	n := startNode(t, nil, append([]string{"dev", "--data-dir", single}, quiet...)...)
	n.stop(t)
	stderr := runFails(t, append([]string{"dev", "--nodes", "2", "--data-dir", single}, quiet...)...)
	assertOneLineError(t, stderr, single, "single strata dev node", "without --nodes")

	cluster := t.TempDir()
	n = startNode(t, nil, append([]string{"dev", "--nodes", "2", "--data-dir", cluster}, quiet...)...)
	mustCreate(t, strings.Split(n.bootstrap, ",")[0], "kept", 1, nil)
	n.stop(t)
	stderr = runFails(t, append([]string{"dev", "--data-dir", cluster}, quiet...)...)
	assertOneLineError(t, stderr, cluster, "local cluster", "--nodes 2")
	stderr = runFails(t, append([]string{"dev", "--nodes", "3", "--data-dir", cluster}, quiet...)...)
	assertOneLineError(t, stderr, cluster, "2-node local cluster", "--nodes 2")

	n = startNode(t, nil, append([]string{"dev", "--nodes", "2", "--data-dir", cluster}, quiet...)...)
	found := false
	for _, tp := range metadataOf(t, strings.Split(n.bootstrap, ",")[0]).Topics {
		found = found || (tp.Topic != nil && *tp.Topic == "kept" && tp.ErrorCode == 0)
	}
	if !found {
		t.Errorf("topic kept is gone after the local cluster restarted")
	}
	n.stop(t)
}
