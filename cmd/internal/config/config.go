// Package config owns how a Strata node is configured from the outside: a
// YAML file, STRATA_* environment variables and command-line flags, merged
// with flags over environment over file over built-in defaults.
//
// Every setting is declared once, in the settings table, with its YAML key,
// its flag and (derived from the flag) its environment variable, so the
// three sources can never drift apart. This package checks the syntax of
// each value and names the source, the key and the value when one is bad;
// what a value means (a partition count of zero, an unknown topic config) is
// checked by the package that owns it, broker.Config.Validate. Only cmd
// reads flags, files and the environment; the rest of Strata receives
// parsed structs.
package config

import (
	"fmt"
	"log/slog"
	"time"
)

// Config is a node's resolved configuration. It has one nested section per
// concern, mirroring the YAML file, so that later concerns (Raft addresses
// and seed voters under Cluster, the object store under a Tier section) slot
// in without renaming what exists.
type Config struct {
	Node    Node
	Cluster Cluster
	Kafka   Kafka
	HTTP    HTTP
	Topics  Topics
	Storage Storage
	Logging Logging
}

// Node identifies this broker and where it keeps its data.
type Node struct {
	ID      int32  // node.id
	DataDir string // node.data_dir: logs/ and meta/ live under it
	Rack    string // node.rack
}

// Cluster holds settings every node of a cluster shares.
type Cluster struct {
	ID string // cluster.id; empty lets the broker choose its default
}

// Kafka is the client-facing Kafka listener.
type Kafka struct {
	Listen          string // kafka.listen, host:port
	AdvertisedAddr  string // kafka.advertised_addr; empty means the listener's address
	MaxRequestBytes int32  // kafka.max_request_bytes
}

// HTTP is the metrics and health listener.
type HTTP struct {
	Listen string // http.listen; empty turns it off
}

// Topics are the broker-level defaults for topics.
type Topics struct {
	AutoCreate        bool              // topics.auto_create
	DefaultPartitions int32             // topics.default_partitions
	OffsetsPartitions int32             // topics.offsets_partitions: partitions of __consumer_offsets
	Defaults          map[string]string // topics.defaults: topic config name -> value
}

// Storage tunes the local log.
type Storage struct {
	FlushInterval time.Duration // storage.flush_interval; 0 leaves flushing to the OS
}

// Logging configures the node's log output.
type Logging struct {
	Level  slog.Level // logging.level
	Format string     // logging.format: "text" or "json"
}

// Defaults for a node. DefaultHTTPListen is shared with `strata dev`.
const (
	DefaultListen          = "127.0.0.1:9092"
	DefaultHTTPListen      = "127.0.0.1:9644"
	defaultMaxRequestBytes = 100 << 20 // Kafka's socket.request.max.bytes
)

// Defaults returns the configuration a node starts from before the file,
// the environment and flags are applied. The data directory has no default:
// a production node must be told where its data lives.
func Defaults() Config {
	return Config{
		Kafka: Kafka{
			Listen:          DefaultListen,
			MaxRequestBytes: defaultMaxRequestBytes,
		},
		HTTP: HTTP{Listen: DefaultHTTPListen},
		Topics: Topics{
			AutoCreate:        true, // Kafka's auto.create.topics.enable default
			DefaultPartitions: 1,    // Kafka's num.partitions default
			OffsetsPartitions: 50,   // Kafka's offsets.topic.num.partitions default
		},
		Logging: Logging{Level: slog.LevelInfo, Format: "text"},
	}
}

// check reports settings that no source provided but that a node needs.
func (c *Config) check() error {
	if c.Node.DataDir == "" {
		return fmt.Errorf("node.data_dir is not set (use --data-dir, %s or node.data_dir in the config file)", envName("data-dir"))
	}
	return nil
}
