package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"strata/broker"
)

// TestBucketDirSettings: the directory store can live outside the data
// directory (issue 11, "Operating it"), so nodes on one machine share one
// bucket; it is set from any source and cannot be combined with an S3
// bucket.
func TestBucketDirSettings(t *testing.T) {
	cfg, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d"})
	if err != nil || cfg.Tier.BucketDir != "" {
		t.Fatalf("default bucket dir %q, %v (want empty: <data-dir>/bucket)", cfg.Tier.BucketDir, err)
	}
	for _, src := range []struct {
		name string
		yaml string
		env  []string
		args []string
	}{
		{"file", "tier:\n  bucket_dir: /shared/bucket\n", nil, nil},
		{"env", "", []string{"STRATA_BUCKET_DIR=/shared/bucket"}, nil},
		{"flag", "", nil, []string{"--bucket-dir", "/shared/bucket"}},
	} {
		cfg, _, err := load(t, src.yaml, append([]string{"STRATA_DATA_DIR=/d"}, src.env...), src.args...)
		if err != nil {
			t.Errorf("%s: %v", src.name, err)
			continue
		}
		if cfg.Tier.BucketDir != "/shared/bucket" {
			t.Errorf("%s: bucket dir %q", src.name, cfg.Tier.BucketDir)
		}
	}

	_, _, err = load(t, "", []string{"STRATA_DATA_DIR=/d", "STRATA_S3_BUCKET=events"}, "--bucket-dir", "/shared/bucket")
	if err == nil {
		t.Fatal("--bucket-dir with an S3 bucket is accepted")
	}
	msg := err.Error()
	for _, want := range []string{"tier.bucket_dir", "s3.bucket", "events", "/shared/bucket"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
}

// TestClusterSettings: the cluster's timing and replication settings
// default to the broker's, are read from every source under the keys the
// documentation gives, and refuse values that would read as "unset".
func TestClusterSettings(t *testing.T) {
	cfg, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Topics.DefaultReplicationFactor != 1 || cfg.Cluster.SessionTimeout != broker.DefaultSessionTimeout ||
		cfg.Cluster.HeartbeatInterval != 0 || cfg.Cluster.ReplicaLagTimeMax != broker.DefaultReplicaLagTimeMax {
		t.Errorf("defaults: rf %d session %s heartbeat %s lag %s", cfg.Topics.DefaultReplicationFactor,
			cfg.Cluster.SessionTimeout, cfg.Cluster.HeartbeatInterval, cfg.Cluster.ReplicaLagTimeMax)
	}
	for _, src := range []struct {
		name string
		yaml string
		env  []string
		args []string
	}{
		{"file", "topics:\n  default_replication_factor: 3\ncluster:\n  broker_session_timeout: 6s\n  broker_heartbeat_interval: 1s\n  replica_lag_time_max: 30s\n", nil, nil},
		{"env", "", []string{"STRATA_DEFAULT_REPLICATION_FACTOR=3", "STRATA_BROKER_SESSION_TIMEOUT=6s", "STRATA_BROKER_HEARTBEAT_INTERVAL=1s", "STRATA_REPLICA_LAG_TIME_MAX=30s"}, nil},
		{"flags", "", nil, []string{"--default-replication-factor", "3", "--broker-session-timeout", "6s", "--broker-heartbeat-interval", "1s", "--replica-lag-time-max", "30s"}},
	} {
		cfg, _, err := load(t, src.yaml, append([]string{"STRATA_DATA_DIR=/d"}, src.env...), src.args...)
		if err != nil {
			t.Errorf("%s: %v", src.name, err)
			continue
		}
		if cfg.Topics.DefaultReplicationFactor != 3 || cfg.Cluster.SessionTimeout != 6*time.Second ||
			cfg.Cluster.HeartbeatInterval != time.Second || cfg.Cluster.ReplicaLagTimeMax != 30*time.Second {
			t.Errorf("%s: rf %d session %s heartbeat %s lag %s", src.name, cfg.Topics.DefaultReplicationFactor,
				cfg.Cluster.SessionTimeout, cfg.Cluster.HeartbeatInterval, cfg.Cluster.ReplicaLagTimeMax)
		}
	}
	for _, bad := range []struct{ env, want string }{
		{"STRATA_DEFAULT_REPLICATION_FACTOR=0", `STRATA_DEFAULT_REPLICATION_FACTOR: "0" is less than 1`},
		{"STRATA_DEFAULT_REPLICATION_FACTOR=40000", `STRATA_DEFAULT_REPLICATION_FACTOR: "40000" is more than 32767`},
		{"STRATA_BROKER_SESSION_TIMEOUT=0", `STRATA_BROKER_SESSION_TIMEOUT: "0" is not a positive duration`},
		{"STRATA_BROKER_HEARTBEAT_INTERVAL=-1s", `STRATA_BROKER_HEARTBEAT_INTERVAL: "-1s" is not a positive duration`},
		{"STRATA_REPLICA_LAG_TIME_MAX=soon", `STRATA_REPLICA_LAG_TIME_MAX: "soon" is not a positive duration`},
	} {
		_, _, err := load(t, "", []string{"STRATA_DATA_DIR=/d", bad.env})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.env, err, bad.want)
		}
	}
}

// TestEveryKeyIsDocumented: each setting's YAML key, flag and variable
// appear in docs/operations.md's settings table, so a new setting cannot
// ship undocumented.
func TestEveryKeyIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if strings.HasPrefix(s.key, "tier.") && s.key != "tier.enabled" && s.key != "tier.bucket_dir" {
			continue // the tier's tuning knobs are documented in tiered-storage.md
		}
		for _, want := range []string{"`" + s.key + "`", "`--" + s.flag, "`" + s.env()} {
			if !strings.Contains(string(doc), want) {
				t.Errorf("docs/operations.md does not mention %s", want)
			}
		}
	}
}
