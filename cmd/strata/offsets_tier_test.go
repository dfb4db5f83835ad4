package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/broker/group"
)

// devOffsetsPartitions is the partition count strata dev gives
// __consumer_offsets.
const devOffsetsPartitions = 3

// offsetsStatus is tier status's row for partition of __consumer_offsets.
func offsetsStatus(t *testing.T, env []string, dataDir string, partition int32) partitionStatus {
	t.Helper()
	var rows []partitionStatus
	out := cliOK(t, env, "tier", "status", "__consumer_offsets", "--json", "--data-dir", dataDir)
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("tier status __consumer_offsets: %v\n%s", err, out)
	}
	for _, r := range rows {
		if r.Partition == partition {
			return r
		}
	}
	t.Fatalf("tier status __consumer_offsets has no partition %d:\n%s", partition, out)
	return partitionStatus{}
}

// TestOffsetsTopicTiers is issue 13's promise for groups: __consumer_offsets
// tiers and is compacted in the bucket, and a group that committed 100,000 times over 10 partitions
// resumes at its last commit after a restart with a cold local disk. Each
// partition's commits come in a phase of their own, so that the last commit
// of nine of them is older than anything the offsets partition keeps
// locally: the restarted coordinator finds those in the bucket only.
func TestOffsetsTopicTiers(t *testing.T) {
	const partitions, records = 10, 100
	const commits = 100_000
	perPartition := commits / partitions
	dataDir := t.TempDir()
	args := []string{"dev", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--tier-upload-interval", "100ms"}
	// The early group commits once, first, in the offsets partition of the
	// main group, which rolls: its commit is soon in the bucket only.
	offsetsPartition := group.Partition("main", devOffsetsPartitions)
	earlyGroup := "early"
	for i := 0; group.Partition(earlyGroup, devOffsetsPartitions) != offsetsPartition; i++ {
		earlyGroup = fmt.Sprint("early-", i)
	}
	n := startNode(t, nil, args...)
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	mustCreate(t, n.bootstrap, "orders", partitions, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Records for the consumer to resume on.
	cl := newClient(t, n.bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var batch []*kgo.Record
	for p := range int32(partitions) {
		for i := range records {
			batch = append(batch, &kgo.Record{Topic: "orders", Partition: p, Key: fmt.Appendf(nil, "%d-%d", p, i), Value: []byte("order")})
		}
	}
	if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The offsets topic rolls every few hundred commits and keeps two
	// segments locally.
	adm := kadm.NewClient(cl)
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Name: "segment.bytes", Value: kadm.StringPtr("65536")},
		{Name: "local.retention.bytes", Value: kadm.StringPtr("131072")},
	}, "__consumer_offsets")
	if err == nil {
		_, err = altered.On("__consumer_offsets", nil)
	}
	if err != nil {
		t.Fatalf("alter __consumer_offsets: %v", err)
	}

	commit := func(group string, p int32, at int64, meta string) error {
		var o kadm.Offsets
		o.Add(kadm.Offset{Topic: "orders", Partition: p, At: at, LeaderEpoch: -1, Metadata: meta})
		resp, err := adm.CommitOffsets(ctx, group, o)
		if err == nil {
			err = resp.Error()
		}
		return err
	}
	// at is what commit i commits: below the partition's end, so that the
	// consumer that resumes there gets a record.
	at := func(i int) int64 { return int64(i*7) % (records - 3) }
	meta := func(i int) string { return fmt.Sprint("commit ", i) }
	if err := commit(earlyGroup, 3, 42, "the first commit"); err != nil {
		t.Fatal(err)
	}
	// Commits of a phase go 32 at a time; its last one alone, after all
	// the others are answered, so it is the one that holds.
	var lastBucketOnly int64 // the offsets partition's end before the last phase
	for p := range int32(partitions) {
		first, last := int(p)*perPartition, (int(p)+1)*perPartition-1
		work := make(chan int)
		errs := make(chan error, 32)
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for i := range work {
					if err := commit("main", p, at(i), meta(i)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	feed:
		for i := first; i < last; i++ {
			select {
			case work <- i:
			case err := <-errs:
				t.Errorf("commit: %v", err)
				break feed
			}
		}
		close(work)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if err := commit("main", p, at(last), meta(last)); err != nil {
			t.Fatal(err)
		}
		if p == partitions-2 {
			ends, err := adm.ListEndOffsets(ctx, "__consumer_offsets")
			if err != nil {
				t.Fatal(err)
			}
			o, _ := ends.Lookup("__consumer_offsets", offsetsPartition)
			lastBucketOnly = o.Offset
		}
	}
	cl.Close()

	// The commits of every phase but the last leave the local disk, and
	// the bucket's copy is compacted.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := offsetsStatus(t, env, dataDir, offsetsPartition)
		if r.LocalOnly {
			t.Fatalf("__consumer_offsets is local-only: %+v", r)
		}
		if r.LocalStart != nil && *r.LocalStart >= lastBucketOnly && r.RemoteEnd != nil && *r.RemoteEnd >= *r.LocalStart && r.Segments > 0 &&
			r.Cleaned != nil && r.Cleaned.End > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("__consumer_offsets never moved below offset %d to the bucket, compacted there: %+v (cleaned %v)", lastBucketOnly, r, r.Cleaned)
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.stop(t)

	objects := 0
	err = filepath.WalkDir(filepath.Join(dataDir, "bucket"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(path, "__consumer_offsets") {
			objects++
		}
		return err
	})
	if err != nil || objects == 0 {
		t.Fatalf("objects of __consumer_offsets in the bucket: %d (%v)", objects, err)
	}
	// Cold: no chunk of the bucket is cached locally.
	if err := os.RemoveAll(filepath.Join(dataDir, "tier-cache")); err != nil {
		t.Fatal(err)
	}

	n = startNode(t, nil, args...)
	env = []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	if r := offsetsStatus(t, env, dataDir, offsetsPartition); r.LocalStart == nil || *r.LocalStart < lastBucketOnly {
		t.Fatalf("after the restart __consumer_offsets starts locally at %v, below %d", r.LocalStart, lastBucketOnly)
	}
	adm = kadm.NewClient(newClient(t, n.bootstrap))
	got, err := adm.FetchOffsets(ctx, "main")
	if err == nil {
		err = got.Error()
	}
	if err != nil {
		t.Fatalf("offsets of main: %v", err)
	}
	want := map[int32]int64{}
	for p := range int32(partitions) {
		last := (int(p)+1)*perPartition - 1
		want[p] = at(last)
		o, ok := got.Lookup("orders", p)
		if !ok || o.At != at(last) || o.Metadata != meta(last) {
			t.Errorf("main orders-%d: %+v (found %v), want %d %q", p, o, ok, at(last), meta(last))
		}
	}
	early, err := adm.FetchOffsets(ctx, earlyGroup)
	if o, ok := early.Lookup("orders", 3); err != nil || !ok || o.At != 42 || o.Metadata != "the first commit" {
		t.Errorf("%s orders-3: %+v (found %v, %v)", earlyGroup, o, ok, err)
	}
	if t.Failed() {
		t.FailNow()
	}

	// A group consumer resumes where the group left off.
	consumer := newClient(t, n.bootstrap, kgo.ConsumerGroup("main"), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(100*time.Millisecond))
	firsts := map[int32]int64{}
	for len(firsts) < partitions {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("first records of %d partitions of %d: %v", len(firsts), partitions, firsts)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := firsts[r.Partition]; !ok {
				firsts[r.Partition] = r.Offset
			}
		})
	}
	for p, off := range firsts {
		if off != want[p] {
			t.Errorf("orders-%d: the consumer resumed at %d, the last commit was %d", p, off, want[p])
		}
	}
	consumer.Close()
	n.stop(t)
}
