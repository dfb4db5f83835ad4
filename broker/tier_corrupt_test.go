package broker

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/tier/objstore"
)

// TestCorruptRemoteObjectFailsOnlyItsPartition (issue 9 item 4): while an
// object in the bucket is damaged, fetches of its partition answer
// KAFKA_STORAGE_ERROR with no records, the other partitions of the same
// fetch are served, and /metrics counts the corrupt reads; once the object
// is restored, the next fetch once the damage is no longer believed
// serves it, and a consumer reads every record
// once.
func TestCorruptRemoteObjectFailsOnlyItsPartition(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.NewDir(filepath.Join(t.TempDir(), "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	// The tier's clock runs ahead on demand: a damage a fresh download
	// confirmed is believed for a few seconds, without GETs.
	var ahead atomic.Int64
	b := tieredBroker(t, "", store, func(c *Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.Tier.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	})
	adm := testAdmin(t, b)
	createTopic(t, adm, "rot", 2, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"local.retention.bytes": ptr("0"),
	})
	const n, size = 200, 1000
	produceKeyed(t, b, "rot", n, size, kgo.ProducerBatchMaxBytes(4096), kgo.ProducerBatchCompression(kgo.NoCompression()))
	waitUploaded(t, b, "rot", 2)
	for i := range int32(2) {
		p := b.partition("rot", i)
		waitFor(t, 10*time.Second, "local deletion", func() bool { return p.Log().StartOffset() > 0 })
	}
	p0 := b.partition("rot", 0)
	m, err := b.tier.Manifest(ctx, p0.BucketName())
	if err != nil || m.Empty() {
		t.Fatalf("manifest: %v", err)
	}
	key := remoteSegments(t, b.tier, m)[0].Key
	rc, err := store.GetRange(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	good, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	bad[200] ^= 0x01 // inside the first batch's records
	put := func(b []byte) {
		t.Helper()
		if err := store.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}

	topics, err := adm.ListTopics(ctx, "rot")
	if err != nil {
		t.Fatal(err)
	}
	cl := testClient(t, b)
	fetch := func() map[int32]kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = "rot", topics["rot"].ID
		for i := range int32(2) {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.PartitionMaxBytes = i, 1<<20
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]kmsg.FetchResponseTopicPartition{}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				out[rp.Partition] = rp
			}
		}
		return out
	}

	put(bad)
	const tries = 3
	for range tries {
		got := fetch()
		if p := got[0]; p.ErrorCode != kerr.KafkaStorageError.Code || len(p.RecordBatches) != 0 {
			t.Fatalf("fetch of the damaged partition: %v with %d bytes, want KAFKA_STORAGE_ERROR and none", kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches))
		}
		if p := got[1]; p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
			t.Fatalf("fetch of the sound partition beside it: %v with %d bytes", kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches))
		}
	}
	if v := metricValue(t, b, "strata_tier_corrupt_reads_total"); v < tries {
		t.Fatalf("strata_tier_corrupt_reads_total = %v after %d corrupt reads", v, tries)
	}

	put(good)
	ahead.Add(int64(time.Minute))
	if p := fetch()[0]; p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
		t.Fatalf("fetch after the object was restored: %v with %d bytes", kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches))
	}
	consumeExactlyOnce(t, b, "rot", n, size)
}

// metricValue scrapes b's /metrics for the value of an unlabelled series.
func metricValue(t *testing.T, b *Broker, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + b.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
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
