package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestQuotaVerbs runs `strata dev` and sets, lists and removes quotas with
// `strata quota`, as an operator would: defaults and named entities, the
// filters of list, a refused value as one line, and a quota set from the
// command line slowing a franz-go producer down (throttle_time_ms).
func TestQuotaVerbs(t *testing.T) {
	n := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	cli := func(args ...string) string { t.Helper(); return cliOK(t, env, args...) }

	if got := cli("quota", "set", "--client-id", "ingest", "--producer-byte-rate", "262144"); got != "set client-id=ingest: producer_byte_rate=262144\n" {
		t.Errorf("set printed %q", got)
	}
	cli("quota", "set", "--user", "alice", "--consumer-byte-rate", "10485760", "--request-percentage", "50")
	cli("quota", "set", "--user", "alice", "--default-client-id", "--producer-byte-rate", "1048576")
	cli("quota", "set", "--default-user", "--producer-byte-rate", "2097152")
	if got := cli("quota", "set", "--user", "bob", "--producer-byte-rate", "1", "--validate-only"); !strings.HasPrefix(got, "valid user=bob") {
		t.Errorf("validate-only printed %q", got)
	}

	lines := func(s string) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
		return out
	}
	want := []string{
		"USER CLIENT-ID PRODUCER_BYTE_RATE CONSUMER_BYTE_RATE REQUEST_PERCENTAGE",
		"<default> - 2097152 - -",
		"alice - - 10485760 50",
		"alice <default> 1048576 - -",
		"- ingest 262144 - -",
	}
	if got := lines(cli("quota", "list")); !reflect.DeepEqual(got, want) {
		t.Errorf("quota list:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := lines(cli("quota", "list", "--user", "alice")); !reflect.DeepEqual(got, []string{
		"USER CLIENT-ID PRODUCER_BYTE_RATE CONSUMER_BYTE_RATE REQUEST_PERCENTAGE",
		"alice - - 10485760 50",
		"alice <default> 1048576 - -",
	}) {
		t.Errorf("quota list --user alice:\n%s", strings.Join(got, "\n"))
	}
	if got := lines(cli("quota", "list", "--user", "alice", "--strict")); len(got) != 2 || got[1] != "alice - 10485760 50" {
		t.Errorf("quota list --user alice --strict:\n%s", strings.Join(got, "\n"))
	}
	var rows []quotaRow
	if err := json.Unmarshal([]byte(cli("quota", "list", "--default-user", "--strict", "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].User == nil || *rows[0].User != "<default>" || rows[0].Quotas["producer_byte_rate"] != 2097152 {
		t.Errorf("quota list --default-user --json: %+v", rows)
	}

	// Mistakes are one line.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"quota", "set", "--producer-byte-rate", "1"}, 2, "name the entity"},
		{[]string{"quota", "set", "--user", "a"}, 2, "nothing to change"},
		{[]string{"quota", "set", "--user", "a", "--default-user", "--producer-byte-rate", "1"}, 2, "--default-user"},
		{[]string{"quota", "list", "--client-id", "a", "--default-client-id"}, 2, "--default-client-id"},
		{[]string{"quota", "set", "--user", "a", "--producer-byte-rate", "0"}, 2, "must be greater than 0"},
		{[]string{"quota", "set", "--user", "a", "--remove", "bytes-per-fortnight"}, 2, "bytes-per-fortnight"},
		{[]string{"quota", "set", "--user", "a", "--request-percentage", "-3"}, 2, "greater than 0"},
	} {
		code, _, stderr := runCLI(t, env, tc.args...)
		if code != tc.code {
			t.Errorf("strata %s: exit %d, want %d (%s)", strings.Join(tc.args, " "), code, tc.code, stderr)
		}
		assertOneLineError(t, stderr, tc.want)
	}

	// The quota set above holds a producer with client id ingest back,
	// once the default user's is gone: a producer without a user of its
	// own (User:ANONYMOUS) is a user, and the default user's quota comes
	// before a client id's in Kafka's order.
	cli("quota", "set", "--default-user", "--remove", "producer-byte-rate")
	cli("topic", "create", "ingested")
	var hook throttleSeen
	cl := newClient(t, n.bootstrap, kgo.ClientID("ingest"), kgo.DefaultProduceTopic("ingested"), kgo.WithHooks(&hook), kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	value := make([]byte, 64<<10)
	start := time.Now()
	for range 64 { // 4 MiB: the 2.75 MiB bucket, then about 5 s at 256 KiB/s
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); !hook.seen.Load() || took < 3*time.Second {
		t.Errorf("4 MiB at 256 KiB/s took %v, throttle_time_ms seen: %v", took, hook.seen.Load())
	}

	// Removing the last key drops the entity.
	cli("quota", "set", "--client-id", "ingest", "--remove", "producer-byte-rate")
	if got := cli("quota", "list", "--client-id", "ingest"); strings.Contains(got, "ingest") {
		t.Errorf("after --remove, list still shows:\n%s", got)
	}
}

type throttleSeen struct{ seen atomic.Bool }

func (h *throttleSeen) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	if d > 0 {
		h.seen.Store(true)
	}
}
