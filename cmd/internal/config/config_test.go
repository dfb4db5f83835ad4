package config

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"strata/meta"
)

// load runs Load with a config file holding yaml (none if empty), the given
// environment and command-line flags.
func load(t *testing.T, yaml string, env []string, args ...string) (Config, []string, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	flags := AddFlags(fs)
	if yaml != "" {
		path := filepath.Join(t.TempDir(), "strata.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, nil, err
	}
	return Load(Sources{Env: env, Flags: flags})
}

const fullFile = `
node:
  id: 3
  data_dir: /from/file
  rack: file-rack
cluster:
  id: file-cluster
  raft_listen: 0.0.0.0:19093
  voters: 3@node-3.example:19093, 4@node-4.example:19093,5@node-5.example:19093
  broker_session_timeout: 9s
  broker_heartbeat_interval: 2s
  replica_lag_time_max: 30s
kafka:
  listen: 0.0.0.0:19092
  advertised_addr: file.example:19092
  max_request_bytes: 2097152
  queued_max_request_bytes: 64MiB
  connections_max_idle: 90s
  fetch_max_bytes: 16MiB
http:
  listen: 127.0.0.1:19644
topics:
  auto_create: false
  default_partitions: 6
  offsets_partitions: 12
  default_replication_factor: 3
  defaults:
    retention.ms: 1000
    segment.bytes: "1048576"
storage:
  flush_interval: 2s
s3:
  endpoint: http://127.0.0.1:9000
  bucket: events
  prefix: prod
  region: eu-west-1
  path_style: false
tier:
  enabled: off
  chunk_bytes: 4MiB
  memory_bytes: 64MiB
  cache_bytes: 2GiB
  manifest_cache_bytes: 16MiB
  read_ahead: 0
  read_workers: 16
  upload_interval: 5s
  idle_upload: 1m
  orphan_grace: 2h
  collect_interval: 30m
  local_disk_limit: 100GB
  metadata_checkpoint_interval: 30s
  metadata_checkpoint_retention: 72h
compactor:
  memory_bytes: 32MiB
  workers: 2
  io_bytes_per_sec: 50MB
  interval: 30s
read_replica:
  poll_interval: 3s
  allowed_endpoints: http://10.0.0.5:9000,https://s3.eu-west-1.amazonaws.com
transactions:
  state_partitions: 7
  max_timeout: 5m
  id_expiration: 48h
  abort_interval: 3s
logging:
  level: debug
  format: json
`

func TestFileSetsEverySetting(t *testing.T) {
	cfg, warnings, err := load(t, fullFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	want := Config{
		Node: Node{ID: 3, DataDir: "/from/file", Rack: "file-rack"},
		Cluster: Cluster{ID: "file-cluster", RaftListen: "0.0.0.0:19093", Voters: []meta.Voter{
			{ID: 3, Addr: "node-3.example:19093"}, {ID: 4, Addr: "node-4.example:19093"}, {ID: 5, Addr: "node-5.example:19093"},
		}, SessionTimeout: 9 * time.Second, HeartbeatInterval: 2 * time.Second, ReplicaLagTimeMax: 30 * time.Second},
		Kafka: Kafka{Listen: "0.0.0.0:19092", AdvertisedAddr: "file.example:19092", MaxRequestBytes: 2 << 20, QueuedMaxRequestBytes: 64 << 20, ConnectionsMaxIdle: 90 * time.Second, FetchMaxBytes: 16 << 20},
		HTTP:  HTTP{Listen: "127.0.0.1:19644"},
		Topics: Topics{AutoCreate: false, DefaultPartitions: 6, OffsetsPartitions: 12, DefaultReplicationFactor: 3, Defaults: map[string]string{
			"retention.ms": "1000", "segment.bytes": "1048576",
		}},
		Storage: Storage{FlushInterval: 2 * time.Second},
		S3:      S3{Endpoint: "http://127.0.0.1:9000", Bucket: "events", Prefix: "prod", Region: "eu-west-1"},
		Tier: Tier{
			ChunkBytes: 4 << 20, MemoryBytes: 64 << 20, CacheBytes: 2 << 30, ManifestCacheBytes: 16 << 20, ReadWorkers: 16,
			UploadInterval: 5 * time.Second, IdleUpload: time.Minute, OrphanGrace: 2 * time.Hour,
			CollectInterval: 30 * time.Minute, LocalDiskLimit: 100e9,
			MetadataCheckpointInterval: 30 * time.Second, MetadataCheckpointRetention: 72 * time.Hour,
		},
		Compactor:    Compactor{MemoryBytes: 32 << 20, Workers: 2, IOBytesPerSec: 50e6, Interval: 30 * time.Second},
		ReadReplica:  ReadReplica{PollInterval: 3 * time.Second, AllowedEndpoints: []string{"http://10.0.0.5:9000", "https://s3.eu-west-1.amazonaws.com"}},
		Transactions: Transactions{StatePartitions: 7, MaxTimeout: 5 * time.Minute, IDExpiration: 48 * time.Hour, AbortInterval: 3 * time.Second},
		Logging:      Logging{Level: slog.LevelDebug, Format: "json"},
	}
	if !equal(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
}

// TestPrecedence checks the documented order: flags over environment over
// file over defaults, with map entries merged key by key.
func TestPrecedence(t *testing.T) {
	file := `
node:
  id: 1
  data_dir: /file
  rack: file-rack
kafka:
  listen: 127.0.0.1:1001
topics:
  defaults:
    retention.ms: "1"
    segment.bytes: "1024"
    cleanup.policy: delete
`
	env := []string{
		"STRATA_NODE_ID=2",
		"STRATA_DATA_DIR=/env",
		"STRATA_LISTEN=127.0.0.1:2002",
		"STRATA_TOPIC_DEFAULTS=retention.ms=2, segment.bytes=2048",
		"HOME=/root",
	}
	cfg, _, err := load(t, file, env, "--node-id", "3", "--topic-default", "retention.ms=3")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"node id (flag over env over file)", cfg.Node.ID, int32(3)},
		{"data dir (env over file)", cfg.Node.DataDir, "/env"},
		{"listen (env over file)", cfg.Kafka.Listen, "127.0.0.1:2002"},
		{"rack (file over default)", cfg.Node.Rack, "file-rack"},
		{"http listen (default)", cfg.HTTP.Listen, DefaultHTTPListen},
		{"topic default set by all three", cfg.Topics.Defaults["retention.ms"], "3"},
		{"topic default set by env and file", cfg.Topics.Defaults["segment.bytes"], "2048"},
		{"topic default set by file only", cfg.Topics.Defaults["cleanup.policy"], "delete"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestLastRepeatedFlagWins(t *testing.T) {
	cfg, _, err := load(t, "", nil, "--data-dir", "/a", "--data-dir", "/b", "--auto-create-topics=false", "--auto-create-topics")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.DataDir != "/b" || !cfg.Topics.AutoCreate {
		t.Errorf("data dir %q auto create %v", cfg.Node.DataDir, cfg.Topics.AutoCreate)
	}
}

func TestConfigFileFromEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("node: {data_dir: /x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := load(t, "", []string{"STRATA_CONFIG=" + path})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.DataDir != "/x" {
		t.Errorf("data dir %q", cfg.Node.DataDir)
	}
}

func TestOffAndEmptyDisableHTTP(t *testing.T) {
	for _, v := range []string{"off", ""} {
		cfg, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d", "STRATA_HTTP_LISTEN=" + v})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HTTP.Listen != "" {
			t.Errorf("%q: http listen %q", v, cfg.HTTP.Listen)
		}
	}
}

func TestNullValuesLeaveDefaults(t *testing.T) {
	cfg, _, err := load(t, "node:\n  data_dir: /d\n  rack:\nhttp:\nkafka: ~\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Listen != DefaultHTTPListen || cfg.Kafka.Listen != DefaultListen {
		t.Errorf("got %+v", cfg)
	}
}

func TestUnknownEnvironmentIsAWarning(t *testing.T) {
	_, warnings, err := load(t, "", []string{"STRATA_DATA_DIR=/d", "STRATA_LISTN=x", "STRATA_BOOTSTRAP=y"})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "STRATA_LISTN") {
		t.Errorf("warnings %q", warnings)
	}
}

// TestErrorsNameTheProblem checks that every bad input comes back as one
// line naming where it came from, the key and the value.
func TestErrorsNameTheProblem(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		args []string
		want []string // substrings of the error
	}{
		{
			name: "negative size in file",
			yaml: "node:\n  data_dir: /d\ntier:\n  cache_bytes: -5\n",
			want: []string{`strata.yaml:4: tier.cache_bytes: "-5" is negative`},
		},
		{
			name: "size with an unknown unit",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_TIER_CHUNK_BYTES=8 megs"},
			want: []string{`environment STRATA_TIER_CHUNK_BYTES: "8 megs" is not a size`},
		},
		{
			name: "zero interval",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_TIER_UPLOAD_INTERVAL=0"},
			want: []string{`STRATA_TIER_UPLOAD_INTERVAL: "0" is not a positive duration`},
		},
		{
			name: "negative duration flag",
			args: []string{"--data-dir", "/d", "--tier-idle-upload", "-1s"},
			want: []string{`"--tier-idle-upload"`, `"-1s" is not a positive duration`},
		},
		{
			name: "bad metadata checkpoint settings",
			yaml: "node:\n  data_dir: /d\ntier:\n  metadata_checkpoint_retention: 1 week\n",
			want: []string{`strata.yaml:4: tier.metadata_checkpoint_retention: "1 week" is not a positive duration`},
		},
		{
			name: "zero metadata checkpoint interval",
			args: []string{"--data-dir", "/d", "--tier-metadata-checkpoint-interval", "0s"},
			want: []string{`"--tier-metadata-checkpoint-interval"`, `"0s" is not a positive duration`},
		},
		{
			name: "read replica endpoint not a URL",
			args: []string{"--data-dir", "/d", "--read-replica-allowed-endpoints", "http://ok:9000,minio:9000"},
			want: []string{`"--read-replica-allowed-endpoints"`, `"minio:9000" is not an http:// or https:// URL`},
		},
		{
			name: "chunk larger than half the cache",
			args: []string{"--data-dir", "/d", "--tier-chunk-bytes", "16MiB", "--tier-cache-bytes", "16MiB"},
			want: []string{"tier.chunk_bytes 16777216 is more than half of tier.cache_bytes 16777216"},
		},
		{
			name: "chunk larger than half the chunk memory",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_TIER_MEMORY_BYTES=12MiB"},
			want: []string{"tier.chunk_bytes 8388608 is more than half of tier.memory_bytes 12582912"},
		},
		{
			name: "negative chunk memory",
			args: []string{"--data-dir", "/d", "--tier-memory-bytes", "-1"},
			want: []string{`"--tier-memory-bytes"`, `"-1" is negative`},
		},
		{
			name: "unknown tier key",
			yaml: "node:\n  data_dir: /d\ntier:\n  chunk_size: 1MiB\n",
			want: []string{"strata.yaml:4: unknown key tier.chunk_size"},
		},
		{
			name: "key in a file",
			yaml: "node:\n  data_dir: /d\ns3:\n  bucket: b\n  secret_key: hunter2\n",
			want: []string{"strata.yaml:5: s3.secret_key: keys are never read from a file", "STRATA_S3_SECRET_KEY"},
		},
		{
			name: "endpoint without a bucket",
			args: []string{"--data-dir", "/d", "--s3-endpoint", "http://127.0.0.1:9000"},
			want: []string{`s3.endpoint is "http://127.0.0.1:9000" but s3.bucket is not set`},
		},
		{
			name: "endpoint that is not a URL",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_S3_ENDPOINT=127.0.0.1:9000"},
			want: []string{`STRATA_S3_ENDPOINT: "127.0.0.1:9000" is not an http:// or https:// URL`},
		},
		{
			name: "half a key pair",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_S3_SECRET_KEY=hunter2"},
			want: []string{"STRATA_S3_SECRET_KEY is set but STRATA_S3_ACCESS_KEY is not"},
		},
		{
			name: "bad tier switch",
			args: []string{"--data-dir", "/d", "--tier", "sometimes"},
			want: []string{`"sometimes" is not on or off`},
		},
		{
			name: "bad integer in file",
			yaml: "node:\n  data_dir: /d\ntopics:\n  default_partitions: abc\n",
			want: []string{`strata.yaml:4: topics.default_partitions: "abc" is not an integer`},
		},
		{
			name: "unknown key in file",
			yaml: "node:\n  data_dir: /d\nkafka:\n  lisen: 1.2.3.4:9092\n",
			want: []string{"strata.yaml:4: unknown key kafka.lisen (did you mean kafka.listen?)"},
		},
		{
			name: "unknown section in file",
			yaml: "raft:\n  peers: [a]\n",
			want: []string{"strata.yaml:1: unknown key raft"},
		},
		{
			name: "key in the wrong section",
			yaml: "kafka:\n  default_partitions: 3\n",
			want: []string{"unknown key kafka.default_partitions (did you mean topics.default_partitions?)"},
		},
		{
			name: "list where a value belongs",
			yaml: "node:\n  data_dir: [a, b]\n",
			want: []string{"strata.yaml:2: node.data_dir: expected a single value, found a list"},
		},
		{
			name: "value where a section belongs",
			yaml: "kafka: 9092\n",
			want: []string{"strata.yaml:1: kafka: expected a section of settings"},
		},
		{
			name: "duplicate key",
			yaml: "node:\n  data_dir: /a\n  data_dir: /b\n",
			want: []string{"strata.yaml:3: node.data_dir: duplicate key"},
		},
		{
			name: "syntax error",
			yaml: "node:\n  data_dir: /a\n bad indent: [\n",
			want: []string{"strata.yaml:2: did not find expected key"},
		},
		{
			name: "not a mapping",
			yaml: "- a\n- b\n",
			want: []string{"the file must be a mapping"},
		},
		{
			name: "bad duration in environment",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_FLUSH_INTERVAL=soon"},
			want: []string{`environment STRATA_FLUSH_INTERVAL: "soon" is not a duration`},
		},
		{
			name: "bad boolean in environment",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_AUTO_CREATE_TOPICS=maybe"},
			want: []string{`STRATA_AUTO_CREATE_TOPICS: "maybe" is not a boolean`},
		},
		{
			name: "bad pair in environment",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_TOPIC_DEFAULTS=retention.ms"},
			want: []string{`STRATA_TOPIC_DEFAULTS: "retention.ms" is not key=value`},
		},
		{
			name: "bad address flag",
			args: []string{"--data-dir", "/d", "--listen", "localhost"},
			want: []string{`"--listen"`, `"localhost" is not host:port`},
		},
		{
			name: "out of range flag",
			args: []string{"--data-dir", "/d", "--node-id", "99999999999"},
			want: []string{`"--node-id"`, "out of range"},
		},
		{
			name: "zero partitions",
			yaml: "node:\n  data_dir: /d\ntopics:\n  default_partitions: 0\n",
			want: []string{`strata.yaml:4: topics.default_partitions: "0" is less than 1`},
		},
		{
			name: "negative node id",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_NODE_ID=-1"},
			want: []string{`STRATA_NODE_ID: "-1" is less than 0`},
		},
		{
			name: "bad log level flag",
			args: []string{"--data-dir", "/d", "--log-level", "loud"},
			want: []string{`"loud" is not a log level`},
		},
		{
			name: "no data dir",
			want: []string{"node.data_dir is not set", "--data-dir", "STRATA_DATA_DIR"},
		},
		{
			name: "malformed voter",
			args: []string{"--data-dir", "/d", "--voters", "1@127.0.0.1:9093,2-127.0.0.1:9094"},
			want: []string{`--voters`, `"2-127.0.0.1:9094" is not ID@HOST:PORT`},
		},
		{
			name: "duplicate voter id",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_VOTERS=1@127.0.0.1:9093,1@127.0.0.1:9094"},
			want: []string{`environment STRATA_VOTERS`, `node 1 twice`},
		},
		{
			name: "duplicate voter address",
			yaml: "node:\n  data_dir: /d\ncluster:\n  voters: 1@h:9093,2@h:9093\n",
			want: []string{`cluster.voters`, `address h:9093 twice`},
		},
		{
			name: "voters without a raft listener",
			args: []string{"--data-dir", "/d", "--node-id", "2", "--voters", "1@127.0.0.1:9093,2@127.0.0.1:9094"},
			want: []string{`node 2 has no raft listen address`, `--raft-listen`},
		},
		{
			name: "raft listener is not the node's voter entry",
			env:  []string{"STRATA_DATA_DIR=/d", "STRATA_NODE_ID=2", "STRATA_RAFT_LISTEN=127.0.0.1:9093", "STRATA_VOTERS=1@127.0.0.1:9093,2@127.0.0.1:9094"},
			want: []string{`raft listen address 127.0.0.1:9093 does not match node 2's voter entry 2@127.0.0.1:9094`},
		},
		{
			name: "raft listener not host:port",
			args: []string{"--data-dir", "/d", "--raft-listen", "9093"},
			want: []string{`--raft-listen`, `"9093" is not host:port`},
		},
		{
			name: "bad value in file masked by a flag is still reported",
			yaml: "node:\n  id: x\n",
			args: []string{"--node-id", "1", "--data-dir", "/d"},
			want: []string{`node.id: "x" is not an integer`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := load(t, tt.yaml, tt.env, tt.args...)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

// TestQuorumSettings: the voters come from any source, and a node is a
// voter, a non-voter, or (with no voters) the one-node store of old.
func TestQuorumSettings(t *testing.T) {
	cfg, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d", "STRATA_VOTERS=1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"},
		"--node-id", "2", "--raft-listen", "127.0.0.1:9094")
	if err != nil {
		t.Fatal(err)
	}
	want := Cluster{RaftListen: "127.0.0.1:9094", Voters: []meta.Voter{{ID: 1, Addr: "127.0.0.1:9093"}, {ID: 2, Addr: "127.0.0.1:9094"}, {ID: 3, Addr: "127.0.0.1:9095"}}}
	want.SessionTimeout, want.ReplicaLagTimeMax = Defaults().Cluster.SessionTimeout, Defaults().Cluster.ReplicaLagTimeMax
	if !reflect.DeepEqual(cfg.Cluster, want) {
		t.Errorf("voter: %+v, want %+v", cfg.Cluster, want)
	}
	// A node outside the voters is a non-voter on any raft listener.
	if _, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d", "STRATA_VOTERS=1@127.0.0.1:9093"}, "--node-id", "7", "--raft-listen", "127.0.0.1:0"); err != nil {
		t.Errorf("non-voter: %v", err)
	}
	// No voters: the one-node default, with nothing to listen on.
	cfg, _, err = load(t, "", []string{"STRATA_DATA_DIR=/d"})
	if err != nil || cfg.Cluster.Voters != nil || cfg.Cluster.RaftListen != "" {
		t.Errorf("default: %+v, %v", cfg.Cluster, err)
	}
	// A flag overrides the environment's voters, and "" clears them.
	cfg, _, err = load(t, "", []string{"STRATA_DATA_DIR=/d", "STRATA_VOTERS=1@127.0.0.1:9093"}, "--voters", "")
	if err != nil || cfg.Cluster.Voters != nil {
		t.Errorf("cleared voters: %+v, %v", cfg.Cluster, err)
	}
}

// TestEnvNamesFollowFlags pins the documented rule that each variable is
// STRATA_ and the flag name in upper case.
func TestEnvNamesFollowFlags(t *testing.T) {
	for _, s := range settings {
		want := "STRATA_" + strings.ToUpper(strings.ReplaceAll(s.flag, "-", "_"))
		if s.setEntry != nil {
			want += "S"
		}
		if s.env() != want {
			t.Errorf("%s: env %s, want %s", s.key, s.env(), want)
		}
	}
	for _, name := range []string{"STRATA_NODE_ID", "STRATA_DATA_DIR", "STRATA_LISTEN", "STRATA_ADVERTISED_ADDR", "STRATA_HTTP_LISTEN"} {
		if byEnv[name] == nil {
			t.Errorf("%s is not a setting", name)
		}
	}
}

// TestTierDefaults pins the defaults a node tiers with when told nothing:
// on, into the directory store (no bucket), path-style for when a bucket
// is set, and the tier package's own read defaults.
func TestTierDefaults(t *testing.T) {
	cfg, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Tier.Enabled || cfg.S3.Bucket != "" || !cfg.S3.PathStyle {
		t.Errorf("tier %+v s3 %v", cfg.Tier, cfg.S3)
	}
	if cfg.Tier.ChunkBytes != 8<<20 || cfg.Tier.CacheBytes != 1<<30 || cfg.Tier.ReadAhead != 2 || cfg.Tier.ReadWorkers != 8 {
		t.Errorf("read defaults %+v", cfg.Tier)
	}
	if cfg.Tier.MetadataCheckpointInterval != time.Minute || cfg.Tier.MetadataCheckpointRetention != 7*24*time.Hour {
		t.Errorf("metadata checkpoint defaults: interval %s, retention %s", cfg.Tier.MetadataCheckpointInterval, cfg.Tier.MetadataCheckpointRetention)
	}
}

// TestS3KeysOnlyFromEnvironment checks that the keys come from their two
// variables (and from nowhere else: there is no flag for them), and that
// printing a Config does not show them.
func TestS3KeysOnlyFromEnvironment(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	env := []string{"STRATA_DATA_DIR=/d", "STRATA_S3_BUCKET=b", "STRATA_S3_ACCESS_KEY=AKIAEXAMPLE", "STRATA_S3_SECRET_KEY=" + secret}
	cfg, warnings, err := load(t, "", env)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("the key variables are reported as unknown: %v", warnings)
	}
	if cfg.S3.AccessKey != "AKIAEXAMPLE" || cfg.S3.SecretKey != secret || cfg.S3.Bucket != "b" {
		t.Errorf("s3 %v", cfg.S3)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, cfg); strings.Contains(out, secret) || strings.Contains(out, "AKIAEXAMPLE") {
			t.Errorf("%s of a Config shows a key: %s", f, out)
		}
	}
	if _, _, err := load(t, "", env, "--s3-secret-key", "x"); err == nil {
		t.Error("--s3-secret-key is accepted: keys must never be flags")
	}
}

// TestAddFlagsFor checks the subsets strata dev and the tier verbs take,
// and that FlagsOnly ignores the file and STRATA_* settings but not the
// keys.
func TestAddFlagsFor(t *testing.T) {
	fs := pflag.NewFlagSet("dev", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	flags := AddFlagsFor(fs, false, "s3", "tier")
	for _, name := range []string{"s3-endpoint", "s3-bucket", "s3-prefix", "s3-region", "s3-path-style", "tier", "tier-chunk-bytes", "tier-local-disk-limit"} {
		if fs.Lookup(name) == nil {
			t.Errorf("--%s missing", name)
		}
	}
	for _, name := range []string{"config", "data-dir", "listen", "node-id"} {
		if fs.Lookup(name) != nil {
			t.Errorf("--%s defined", name)
		}
	}
	if err := fs.Parse([]string{"--tier-read-ahead", "0", "--s3-bucket", "b"}); err != nil {
		t.Fatal(err)
	}
	env := []string{"STRATA_S3_BUCKET=ignored", "STRATA_TIER=off", "STRATA_CONFIG=/nonexistent", "STRATA_S3_ACCESS_KEY=a", "STRATA_S3_SECRET_KEY=s"}
	cfg, _, err := Load(Sources{Env: env, Flags: flags, FlagsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.S3.Bucket != "b" || !cfg.Tier.Enabled || cfg.Tier.ReadAhead != 0 || cfg.S3.SecretKey != "s" {
		t.Errorf("s3 %v tier %+v", cfg.S3, cfg.Tier)
	}
}

func TestParseBytes(t *testing.T) {
	for raw, want := range map[string]int64{"0": 0, "1024": 1024, "8MiB": 8 << 20, "8 mib": 8 << 20, "1GB": 1e9, "2KiB": 2048, "3b": 3} {
		if got, err := parseBytes(raw); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "MiB", "-1", "1.5GiB", "8 megs", "99999999999TiB"} {
		if _, err := parseBytes(raw); err == nil {
			t.Errorf("parseBytes(%q) accepted", raw)
		}
	}
	for n, want := range map[int64]string{0: "0", 1000: "1000", 8 << 20: "8MiB", 1 << 30: "1GiB", 1536: "1536"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func equal(a, b Config) bool { return reflect.DeepEqual(a, b) }

// TestSizesAcceptShortUnits pins issue 10: "8M", "8MiB" and "8388608" are
// the same size wherever a size is read (flag, variable, file), as in the
// tools operators already use (docker, JVM -Xmx), where a bare K, M, G or
// T is binary.
func TestSizesAcceptShortUnits(t *testing.T) {
	for _, raw := range []string{"8M", "8m", "8MiB", "8388608", "8192K", "8192KiB"} {
		for _, src := range []struct {
			name string
			yaml string
			env  []string
			args []string
		}{
			{"flag", "", nil, []string{"--tier-chunk-bytes", raw}},
			{"env", "", []string{"STRATA_TIER_CHUNK_BYTES=" + raw}, nil},
			{"file", "tier:\n  chunk_bytes: " + raw + "\n", nil, nil},
		} {
			cfg, _, err := load(t, src.yaml, append([]string{"STRATA_DATA_DIR=/d"}, src.env...), src.args...)
			if err != nil {
				t.Errorf("%s %q: %v", src.name, raw, err)
				continue
			}
			if cfg.Tier.ChunkBytes != 8<<20 {
				t.Errorf("%s %q: chunk bytes %d, want %d", src.name, raw, cfg.Tier.ChunkBytes, 8<<20)
			}
		}
		cfg, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d"}, "--max-request-bytes", raw)
		if err != nil || cfg.Kafka.MaxRequestBytes != 8<<20 {
			t.Errorf("--max-request-bytes %q: %d, %v; want %d", raw, cfg.Kafka.MaxRequestBytes, err, 8<<20)
		}
	}
	if _, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d"}, "--max-request-bytes", "2G"); err == nil {
		t.Error("--max-request-bytes 2G (beyond a Kafka request's int32 size) accepted")
	}
	if _, err := parseBytes("8Q"); err == nil {
		t.Error(`"8Q" accepted`)
	}
}

// TestFlagsOnlyWarnsOfIgnoredVariables: strata dev takes flags only; a
// setting variable it ignores is reported, not silently dropped (issue 10),
// while the S3 keys, which it does read, are not.
func TestFlagsOnlyWarnsOfIgnoredVariables(t *testing.T) {
	fs := pflag.NewFlagSet("dev", pflag.ContinueOnError)
	flags := AddFlagsFor(fs, false, "s3", "tier")
	env := []string{"STRATA_LISTEN=127.0.0.1:1", "STRATA_TIER_CHUNK_BYTES=1M", "STRATA_S3_ACCESS_KEY=a", "STRATA_S3_SECRET_KEY=s", "STRATA_BOOTSTRAP=x:1"}
	cfg, warnings, err := Load(Sources{Env: env, Flags: flags, FlagsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.S3.AccessKey != "a" {
		t.Errorf("keys not read")
	}
	got := strings.Join(warnings, "\n")
	for _, want := range []string{"ignoring STRATA_LISTEN", "ignoring STRATA_TIER_CHUNK_BYTES"} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if len(warnings) != 2 {
		t.Errorf("want exactly the two settings warned of:\n%s", got)
	}
}

// TestConnectionSettings: the request memory bound and the idle timeout
// default to Kafka's queued.max.request.bytes as Strata sets it (256 MiB)
// and connections.max.idle.ms (10 minutes), are read from every source,
// and refuse values that would mean "unset" or make no sense.
func TestConnectionSettings(t *testing.T) {
	cfg, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.QueuedMaxRequestBytes != 256<<20 || cfg.Kafka.ConnectionsMaxIdle != 10*time.Minute {
		t.Errorf("defaults: queued %d, idle %s", cfg.Kafka.QueuedMaxRequestBytes, cfg.Kafka.ConnectionsMaxIdle)
	}
	for _, src := range []struct {
		name string
		yaml string
		env  []string
		args []string
	}{
		{"file", "kafka:\n  queued_max_request_bytes: 64MiB\n  connections_max_idle: 90s\n", nil, nil},
		{"env", "", []string{"STRATA_QUEUED_MAX_REQUEST_BYTES=64MiB", "STRATA_CONNECTIONS_MAX_IDLE=90s"}, nil},
		{"flags", "", nil, []string{"--queued-max-request-bytes", "64MiB", "--connections-max-idle", "90s"}},
	} {
		cfg, _, err := load(t, src.yaml, append([]string{"STRATA_DATA_DIR=/d"}, src.env...), src.args...)
		if err != nil {
			t.Errorf("%s: %v", src.name, err)
			continue
		}
		if cfg.Kafka.QueuedMaxRequestBytes != 64<<20 || cfg.Kafka.ConnectionsMaxIdle != 90*time.Second {
			t.Errorf("%s: queued %d, idle %s", src.name, cfg.Kafka.QueuedMaxRequestBytes, cfg.Kafka.ConnectionsMaxIdle)
		}
	}
	for _, env := range []string{"STRATA_QUEUED_MAX_REQUEST_BYTES=0", "STRATA_QUEUED_MAX_REQUEST_BYTES=-1", "STRATA_CONNECTIONS_MAX_IDLE=0", "STRATA_CONNECTIONS_MAX_IDLE=-1s"} {
		if _, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d", env}); err == nil {
			t.Errorf("%s accepted", env)
		}
	}
}

// TestTransactionSettings: the four transaction settings default to
// Kafka's (transaction.state.log.num.partitions 50,
// transaction.max.timeout.ms 15 min, transactional.id.expiration.ms 7
// days, transaction.abort.timed.out.transaction.cleanup.interval.ms 10 s),
// are read from each source, and a bad value is one line naming it.
func TestTransactionSettings(t *testing.T) {
	cfg, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d"})
	if err != nil {
		t.Fatal(err)
	}
	want := Transactions{StatePartitions: 50, MaxTimeout: 15 * time.Minute, IDExpiration: 7 * 24 * time.Hour, AbortInterval: 10 * time.Second}
	if cfg.Transactions != want {
		t.Errorf("defaults %+v, want %+v", cfg.Transactions, want)
	}
	want = Transactions{StatePartitions: 3, MaxTimeout: time.Hour, IDExpiration: 24 * time.Hour, AbortInterval: time.Second}
	for _, src := range []struct {
		name string
		yaml string
		env  []string
		args []string
	}{
		{"file", "transactions:\n  state_partitions: 3\n  max_timeout: 1h\n  id_expiration: 24h\n  abort_interval: 1s\n", nil, nil},
		{"env", "", []string{"STRATA_TRANSACTION_STATE_PARTITIONS=3", "STRATA_TRANSACTION_MAX_TIMEOUT=1h",
			"STRATA_TRANSACTIONAL_ID_EXPIRATION=24h", "STRATA_TRANSACTION_ABORT_INTERVAL=1s"}, nil},
		{"flags", "", nil, []string{"--transaction-state-partitions", "3", "--transaction-max-timeout", "1h",
			"--transactional-id-expiration", "24h", "--transaction-abort-interval", "1s"}},
	} {
		cfg, warnings, err := load(t, src.yaml, append([]string{"STRATA_DATA_DIR=/d"}, src.env...), src.args...)
		if err != nil || len(warnings) != 0 {
			t.Errorf("%s: %v %v", src.name, err, warnings)
			continue
		}
		if cfg.Transactions != want {
			t.Errorf("%s: %+v, want %+v", src.name, cfg.Transactions, want)
		}
	}

	for _, tt := range []struct {
		name string
		yaml string
		env  []string
		args []string
		want []string
	}{
		{name: "zero partitions", env: []string{"STRATA_TRANSACTION_STATE_PARTITIONS=0"},
			want: []string{`environment STRATA_TRANSACTION_STATE_PARTITIONS: "0" is less than 1`}},
		{name: "partitions not a number", yaml: "transactions:\n  state_partitions: many\n",
			want: []string{`strata.yaml:2: transactions.state_partitions: "many" is not an integer`}},
		{name: "max timeout below a millisecond", args: []string{"--transaction-max-timeout", "10us"},
			want: []string{`"--transaction-max-timeout"`, `"10us" is not a duration from 1ms to`}},
		// transaction.timeout.ms is an int32 of milliseconds on the wire:
		// a bound beyond it could never be reached.
		{name: "max timeout beyond int32 milliseconds", env: []string{"STRATA_TRANSACTION_MAX_TIMEOUT=600h"},
			want: []string{`STRATA_TRANSACTION_MAX_TIMEOUT: "600h" is not a duration from 1ms to 596h31m23.647s`}},
		{name: "zero expiration", yaml: "transactions:\n  id_expiration: 0\n",
			want: []string{`strata.yaml:2: transactions.id_expiration: "0" is not a duration of at least 1ms`}},
		{name: "negative abort interval", args: []string{"--transaction-abort-interval", "-1s"},
			want: []string{`"--transaction-abort-interval"`, `"-1s" is not a duration of at least 1ms`}},
		{name: "misplaced key", yaml: "topics:\n  max_timeout: 1m\n",
			want: []string{"unknown key topics.max_timeout (did you mean transactions.max_timeout?)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := load(t, tt.yaml, append([]string{"STRATA_DATA_DIR=/d"}, tt.env...), tt.args...)
			if err == nil {
				t.Fatal("no error")
			}
			if msg := err.Error(); strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
