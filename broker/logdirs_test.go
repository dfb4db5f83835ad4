package broker

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
	"strata/tier"
	"strata/tier/format"
)

// logFileBytes sums the .log files of a hosted partition's directory:
// what its local segments occupy.
func logFileBytes(t *testing.T, b *Broker, topic string, index int32) int64 {
	t.Helper()
	p := b.partition(topic, index)
	m, err := filepath.Glob(filepath.Join(b.logsDir, node.PartitionDir(topic, p.TopicID(), index), "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range m {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// DescribeLogDirs (what kafka-log-dirs.sh and kadm call) reports each
// partition's bytes on local disk and, for a tiered topic, in the bucket,
// as its manifest lists them.
func TestDescribeLogDirsLocalAndRemote(t *testing.T) {
	store := tierStores[0].open(t)
	b := tieredBroker(t, "", store)
	adm := testAdmin(t, b)
	createTopic(t, adm, "sizes", 2, map[string]*string{"segment.bytes": ptr("4096"), "remote.storage.enable": ptr("true")})
	createTopic(t, adm, "other", 1, nil)
	produceKeyed(t, b, "sizes", 400, 100, kgo.ProducerBatchMaxBytes(2048))
	produceKeyed(t, b, "other", 10, 100)
	// Every closed segment goes up; wait for the last one so the bucket's
	// figures stop moving.
	for i := int32(0); i < 2; i++ {
		p := b.partition("sizes", i)
		segs, err := p.Log().ClosedSegments(0)
		if err != nil || len(segs) == 0 {
			t.Fatalf("sizes-%d: %d closed segments, err %v", i, len(segs), err)
		}
		end := segs[len(segs)-1].EndOffset
		waitFor(t, 20*time.Second, "segments uploaded", func() bool { return p.RemoteEnd() == end })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	remoteBytes := func(index int32) int64 {
		t.Helper()
		p := b.partition("sizes", index)
		m, ok, err := tier.ReadManifest(ctx, store, format.TopicPartition{Topic: "sizes", TopicID: p.TopicID(), Partition: index})
		if err != nil || !ok {
			t.Fatalf("manifest: %v %v", ok, err)
		}
		segs, err := tier.AllSegments(ctx, tier.NewPageSource(store, 0), m)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, s := range segs {
			n += s.Size
		}
		return n
	}

	all, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	dirs := all[b.cfg.NodeID]
	if len(dirs) != 2 {
		t.Fatalf("dirs %v, want local and remote", dirs)
	}
	abs, _ := filepath.Abs(b.logsDir)
	local, ok := dirs[abs]
	if !ok || local.Err != nil {
		t.Fatalf("no local dir %s: %v", abs, dirs)
	}
	if local.TotalBytes <= 0 || local.UsableBytes <= 0 || local.UsableBytes > local.TotalBytes {
		t.Errorf("local volume total %d usable %d", local.TotalBytes, local.UsableBytes)
	}
	for _, tpi := range []struct {
		topic string
		index int32
	}{{"sizes", 0}, {"sizes", 1}, {"other", 0}} {
		d, ok := local.Topics.Lookup(tpi.topic, tpi.index)
		if want := logFileBytes(t, b, tpi.topic, tpi.index); !ok || d.Size != want || want == 0 {
			t.Errorf("local %s-%d: %+v (found %v), want %d bytes", tpi.topic, tpi.index, d, ok, want)
		}
	}
	var remote kadm.DescribedLogDir
	for name, d := range dirs {
		if name != abs {
			remote = d
		}
	}
	if remote.Err != nil || remote.TotalBytes != -1 {
		t.Fatalf("remote dir %q: err %v, total %d", remote.Dir, remote.Err, remote.TotalBytes)
	}
	for i := int32(0); i < 2; i++ {
		d, ok := remote.Topics.Lookup("sizes", i)
		if want := remoteBytes(i); !ok || d.Size != want || want == 0 {
			t.Errorf("remote sizes-%d: %+v (found %v), want %d bytes", i, d, ok, want)
		}
	}

	// The oldest version we serve, as raw frames, naming one partition.
	req := kmsg.NewPtrDescribeLogDirsRequest()
	req.Version = 1
	rt := kmsg.NewDescribeLogDirsRequestTopic()
	rt.Topic, rt.Partitions = "sizes", []int32{1}
	req.Topics = append(req.Topics, rt)
	resp := kmsg.NewPtrDescribeLogDirsResponse()
	resp.Version = 1
	if err := resp.ReadFrom(rawRoundTrip(t, b, req)); err != nil {
		t.Fatal(err)
	}
	if len(resp.Dirs) != 2 {
		t.Fatalf("v1: %d dirs", len(resp.Dirs))
	}
	for _, d := range resp.Dirs {
		if d.ErrorCode != 0 || len(d.Topics) != 1 || d.Topics[0].Topic != "sizes" || len(d.Topics[0].Partitions) != 1 || d.Topics[0].Partitions[0].Partition != 1 {
			t.Errorf("v1 dir %s: %+v", d.Dir, d)
		}
	}
}

// rawRoundTrip sends req on a new connection and returns the response
// body after its header (non-flexible header: correlation id only).
func rawRoundTrip(t *testing.T, b *Broker, req kmsg.Request) []byte {
	t.Helper()
	c, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := encodeRequest(req, 7)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)); err != nil {
		t.Fatal(err)
	}
	resp := readFrame(t, c)
	if corr := binary.BigEndian.Uint32(resp); corr != 7 {
		t.Fatalf("correlation id %d", corr)
	}
	if req.IsFlexible() {
		return resp[5:]
	}
	return resp[4:]
}
