package main

import (
	"bytes"
	"context"
	be "encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// Compaction swaps what a partition holds, on local disk and in the
// bucket, in steps; a crash between any two must lose no live record and
// leave no key twice once compaction has run again (docs/compaction.md,
// "Crash safety"). These tests stop a real `strata serve` process at
// each step with STRATA_TEST_COMPACTOR_PAUSE, kill it with SIGKILL there,
// restart it without the pause and read the topic back.

// compactNode is one `strata serve` node with a bucket directory,
// restarted on the same data dir and raft address.
type compactNode struct {
	t         *testing.T
	dir       string
	bucketDir string
	raft      string
	proc      *node
}

func newCompactNode(t *testing.T) *compactNode {
	t.Helper()
	c := &compactNode{t: t, dir: t.TempDir(), bucketDir: filepath.Join(t.TempDir(), "bucket"), raft: freeAddrs(t, 1)[0]}
	if err := os.MkdirAll(c.bucketDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// start runs the node, with the compactor paused at pause if not empty,
// and waits for its bootstrap line.
func (c *compactNode) start(pause string) {
	c.t.Helper()
	// The 1s orphan grace below the broker's bound lets the test see the
	// collector at work.
	env := []string{"STRATA_TEST_SHORT_ORPHAN_GRACE=1"}
	if pause != "" {
		env = append(env, "STRATA_TEST_COMPACTOR_PAUSE="+pause)
	}
	args := []string{"serve", "--node-id", "1", "--data-dir", c.dir, "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--raft-listen", c.raft, "--voters", "1@" + c.raft, "--bucket-dir", c.bucketDir,
		"--compactor-interval", "100ms", "--tier-upload-interval", "100ms",
		"--tier-orphan-grace", "1s", "--tier-collect-interval", "200ms"}
	c.proc = startNode(c.t, env, args...)
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *compactNode) kill() {
	c.t.Helper()
	if err := c.proc.cmd.Process.Kill(); err != nil {
		c.t.Fatal(err)
	}
	<-c.proc.exited
}

// waitStderr waits for a line of the node's stderr holding every one of
// parts.
func (c *compactNode) waitStderr(timeout time.Duration, parts ...string) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, line := range strings.Split(c.proc.stderr.String(), "\n") {
			if containsAll(line, parts) {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no stderr line with %q within %s", parts, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// cleanerCheckpoint reads the local cleaner checkpoint of topic's
// partition 0 (docs/format.md: "CLN1", then the offset below which the
// log is compacted); 0 when there is none yet.
func (c *compactNode) cleanerCheckpoint(topic string) int64 {
	b, err := os.ReadFile(filepath.Join(partitionDir(c.t, c.dir, topic, 0), "cleaner-checkpoint"))
	if err != nil || len(b) < 12 || string(b[:4]) != "CLN1" {
		return 0
	}
	return int64(be.BigEndian.Uint64(b[4:]))
}

// bucket opens the bucket directory as the tier reads it.
func (c *compactNode) bucket() (*tier.Tier, objstore.Store) {
	c.t.Helper()
	store, err := objstore.NewDir(c.bucketDir)
	if err != nil {
		c.t.Fatal(err)
	}
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: c.t.TempDir()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { tr.Close() })
	return tr, store
}

// topicPartition names topic's partition 0 in the bucket.
func (c *compactNode) topicPartition(topic string) format.TopicPartition {
	c.t.Helper()
	for _, tp := range metadataOf(c.t, c.proc.bootstrap).Topics {
		if tp.Topic != nil && *tp.Topic == topic {
			return format.TopicPartition{Topic: topic, TopicID: tp.TopicID, Partition: 0}
		}
	}
	c.t.Fatalf("no topic %s in the metadata", topic)
	return format.TopicPartition{}
}

// bucketState reads tp's current manifest and the segment objects in the
// bucket, and reports the objects the manifest names that are missing
// and the objects it does not name (orphans).
func bucketState(t *testing.T, tr *tier.Tier, store objstore.Store, tp format.TopicPartition) (root *format.Root, missing, orphans []string) {
	t.Helper()
	ctx := context.Background()
	root, err := tr.Refresh(ctx, tp)
	if err != nil {
		t.Fatalf("manifest of %s-%d: %v", tp.Topic, tp.Partition, err)
	}
	segs, err := tr.Segments(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, s := range segs {
		named[s.Key] = true
	}
	inBucket := map[string]bool{}
	err = store.List(ctx, "", func(a objstore.Attrs) error {
		if strings.Contains(a.Key, "/"+tp.Topic+"-") && strings.Contains(a.Key, "/segments/") {
			inBucket[a.Key] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range named {
		if !inBucket[k] {
			missing = append(missing, k)
		}
	}
	for k := range inBucket {
		if !named[k] {
			orphans = append(orphans, k)
		}
	}
	return root, missing, orphans
}

// produceHistory writes n updates over keys keys (acks=all, idempotent),
// then a tombstone for every tenth key, and then filler under a key of
// its own so that the history's last segment closes. Every record must be
// acknowledged. It returns each key's latest value (nil: deleted) and the
// offset after the history.
func produceHistory(t *testing.T, bootstrap, topic string, n, keys, filler int) (map[string][]byte, int64) {
	t.Helper()
	cl := newClient(t, bootstrap, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(2*time.Millisecond), kgo.ProducerBatchMaxBytes(8<<10), kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var perr error
	done := func(_ *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if perr == nil {
			perr = err
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	latest := map[string][]byte{}
	for i := range n {
		k := fmt.Sprintf("key-%05d", rng.IntN(keys))
		if i < keys {
			k = fmt.Sprintf("key-%05d", i)
		}
		v := fmt.Appendf(nil, "update %d of %s %s", i, k, strings.Repeat("x", 64))
		latest[k] = v
		cl.Produce(ctx, &kgo.Record{Key: []byte(k), Value: v}, done)
	}
	for i := 0; i < keys; i += 10 {
		k := fmt.Sprintf("key-%05d", i)
		latest[k] = nil
		cl.Produce(ctx, &kgo.Record{Key: []byte(k)}, done)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	pad := make([]byte, 1024)
	for range filler / len(pad) {
		cl.Produce(ctx, &kgo.Record{Key: []byte("filler"), Value: pad}, done)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if perr != nil {
		t.Fatalf("produce: %v", perr)
	}
	return latest, end.Offset
}

// checkCompacted reads topic from the start and checks it against latest:
// offsets increasing, every key exactly once with its latest acknowledged
// value (a deleted key as its tombstone: delete.retention.ms is a day).
func checkCompacted(t *testing.T, bootstrap, topic string, latest map[string][]byte) {
	t.Helper()
	recs := readAll(t, bootstrap, topic)[0]
	seen := map[string]int{}
	prev := int64(-1)
	bad := 0
	for _, r := range recs {
		if r.Offset <= prev {
			t.Errorf("offset %d after %d", r.Offset, prev)
			bad++
		}
		prev = r.Offset
		k := string(r.Key)
		want, ok := latest[k]
		if !ok {
			continue
		}
		if seen[k]++; seen[k] > 1 {
			t.Errorf("%s again at offset %d", k, r.Offset)
			bad++
		} else if !bytes.Equal(r.Value, want) || (want == nil) != (r.Value == nil) {
			t.Errorf("%s at offset %d: %.40q, want its latest acknowledged value %.40q", k, r.Offset, r.Value, want)
			bad++
		}
		if bad > 10 {
			t.Fatalf("more errors follow")
		}
	}
	for k := range latest {
		if seen[k] == 0 {
			t.Errorf("%s lost", k)
			if bad++; bad > 10 {
				t.Fatalf("more errors follow")
			}
		}
	}
}

// TestCompactionCrash kills a node in the middle of a compaction pass, at
// each of its steps, and checks what a user of the topic would: after a
// restart and another pass, each key once with its latest acknowledged
// value, at increasing offsets; and for the bucket, that every object
// its manifest names is there, at the crash and after, and that the
// objects left behind are collected after the orphan grace.
func TestCompactionCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("three crashed nodes: not under -short")
	}
	for _, point := range []string{"local.before-commit", "cold.after-put", "cold.after-manifest"} {
		t.Run(point, func(t *testing.T) {
			cold := strings.HasPrefix(point, "cold.")
			const (
				updates, keys = 30_000, 2_000
				segBytes      = 32 << 10
			)
			c := newCompactNode(t)
			c.start(point)
			kv := []string{"cleanup.policy", "compact", "segment.bytes", fmt.Sprint(segBytes), "min.cleanable.dirty.ratio", "0.01"}
			if cold {
				kv = append(kv, "remote.storage.enable", "true", "local.retention.bytes", "1")
			}
			mustCreate(t, c.proc.bootstrap, "crash", 1, configs(kv...))
			latest, end := produceHistory(t, c.proc.bootstrap, "crash", updates, keys, 2*segBytes)
			c.waitStderr(time.Minute, "compactor paused for a test", "point="+point)
			tp := c.topicPartition("crash")
			c.kill()

			// Where the pass stood when it died: the premise of each case.
			tr, store := c.bucket()
			if cold {
				root, missing, orphans := bucketState(t, tr, store, tp)
				t.Logf("killed at %s: manifest cleaned to %d, %d objects it does not name", point, root.CleanedOffset, len(orphans))
				if len(missing) > 0 {
					t.Errorf("killed at %s: the manifest names %d objects not in the bucket, e.g. %s", point, len(missing), missing[0])
				}
				if point == "cold.after-put" && (root.CleanedOffset != 0 || len(orphans) == 0) {
					t.Fatalf("killed after the PUTs, before the manifest: cleaned offset %d and %d unnamed objects, want 0 and some", root.CleanedOffset, len(orphans))
				}
				if point == "cold.after-manifest" && root.CleanedOffset == 0 {
					t.Fatalf("killed after the manifest change, but the manifest has no cleaned offset")
				}
			} else {
				cleaned, _ := filepath.Glob(filepath.Join(partitionDir(t, c.dir, "crash", 0), "*.cleaned"))
				t.Logf("killed at %s: %d rewritten files not yet swapped in, checkpoint %d", point, len(cleaned), c.cleanerCheckpoint("crash"))
				if len(cleaned) == 0 {
					t.Fatalf("killed before the swap, but no rewritten (.cleaned) file is on disk")
				}
			}

			c.start("")
			var cleaned int64
			var last string
			deadline := time.Now().Add(2 * time.Minute)
			for {
				if cold {
					root, _, _ := bucketState(t, tr, store, tp)
					cleaned = root.CleanedOffset
				} else {
					cleaned = c.cleanerCheckpoint("crash")
				}
				if cleaned >= end {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("compacted up to %d within 2 minutes of the restart, want %d %s", cleaned, end, last)
				}
				time.Sleep(100 * time.Millisecond)
			}
			checkCompacted(t, c.proc.bootstrap, "crash", latest)
			if !cold {
				return
			}
			// The operator's view of the same: tier status shows the
			// bucket compacted past the history.
			var rows []partitionStatus
			out := cliOK(t, nil, "tier", "status", "crash", "--json", "--bootstrap", c.proc.bootstrap, "--bucket-dir", c.bucketDir)
			if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
				t.Fatalf("tier status --json: %v\n%s", err, out)
			}
			if r := rows[0]; r.Cleaned == nil || r.Cleaned.End < end || r.LastCompaction == "" || r.LastCompaction == "never" {
				t.Errorf("tier status: cleaned %v, last compaction %q; want cleaned up to at least %d and a time", r.Cleaned, r.LastCompaction, end)
			}
			deadline = time.Now().Add(time.Minute)
			for {
				_, missing, orphans := bucketState(t, tr, store, tp)
				if len(missing) > 0 {
					t.Fatalf("after the restart the manifest names %d objects not in the bucket, e.g. %s", len(missing), missing[0])
				}
				if len(orphans) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d objects no manifest names still in the bucket a minute after compaction (orphan grace 1s), e.g. %s", len(orphans), orphans[0])
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}
