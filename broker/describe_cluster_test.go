package broker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/meta"
)

// describeClusterAt sends DescribeCluster at version v to the broker at
// addr alone.
func describeClusterAt(t *testing.T, addr string, v int16, includeFenced bool) *kmsg.DescribeClusterResponse {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeClusterRequest()
	req.Version, req.IncludeFencedBrokers = v, includeFenced
	if v >= 1 {
		req.EndpointType = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		t.Fatalf("describe cluster v%d: %v", v, err)
	}
	if resp.ErrorCode != 0 {
		t.Fatalf("describe cluster v%d: error %d", v, resp.ErrorCode)
	}
	return resp
}

// TestDescribeClusterFencedBrokers: a broker whose heartbeats stopped is
// fenced; DescribeCluster leaves it out unless a v2 request sets
// IncludeFencedBrokers, and then marks it IsFenced (KIP-1073).
func TestDescribeClusterFencedBrokers(t *testing.T) {
	b := testBroker(t, "")
	// A second broker registers and never heartbeats: the controller
	// fences it once its session runs out.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.meta.RegisterBroker(ctx, meta.Registration{ID: 9, Host: "127.0.0.1", Port: 1, Incarnation: meta.NewIncarnation()}); err != nil {
		t.Fatal(err)
	}
	for !b.meta.State().Brokers[9].Fenced {
		if ctx.Err() != nil {
			t.Fatal("broker 9 never fenced")
		}
		time.Sleep(20 * time.Millisecond)
	}

	type row struct {
		id     int32
		fenced bool
	}
	rows := func(resp *kmsg.DescribeClusterResponse) []row {
		var out []row
		for _, br := range resp.Brokers {
			out = append(out, row{br.NodeID, br.IsFenced})
		}
		return out
	}
	addr := b.Addr().String()
	for _, tt := range []struct {
		v             int16
		includeFenced bool
		want          []row
	}{
		{0, false, []row{{0, false}}},
		{1, false, []row{{0, false}}},
		{2, false, []row{{0, false}}},
		{2, true, []row{{0, false}, {9, true}}},
	} {
		if got := rows(describeClusterAt(t, addr, tt.v, tt.includeFenced)); !slices.Equal(got, tt.want) {
			t.Errorf("v%d include fenced %t: brokers %+v, want %+v", tt.v, tt.includeFenced, got, tt.want)
		}
	}
}
