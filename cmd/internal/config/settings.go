package config

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// setting is one configurable value, reachable as a YAML key, a flag and an
// environment variable. Exactly one of set and setEntry is non-nil: set for
// scalar settings, setEntry for map-valued ones (topics.defaults), whose
// entries are merged key by key across sources.
type setting struct {
	key   string // dotted YAML path, e.g. "kafka.listen"
	flag  string // flag name without dashes; the env var is derived from it
	typ   string // shown in --help
	usage string

	set func(c *Config, raw string) error
	get func(c *Config) string

	setEntry func(c *Config, k, v string) error
}

// settings is the single declaration of every setting. Order is the order
// of --help and of the documentation.
var settings = []*setting{
	{
		key: "node.id", flag: "node-id", typ: "int", usage: "this broker's id in the cluster (Kafka's node.id)",
		set: int32Setter(func(c *Config) *int32 { return &c.Node.ID }, 0),
		get: func(c *Config) string { return strconv.Itoa(int(c.Node.ID)) },
	},
	{
		key: "node.data_dir", flag: "data-dir", typ: "dir", usage: "directory for the partition logs and the metadata log",
		set: stringSetter(func(c *Config) *string { return &c.Node.DataDir }),
		get: func(c *Config) string { return c.Node.DataDir },
	},
	{
		key: "node.rack", flag: "rack", typ: "string", usage: "rack advertised to clients (rack-aware consumers)",
		set: stringSetter(func(c *Config) *string { return &c.Node.Rack }),
		get: func(c *Config) string { return c.Node.Rack },
	},
	{
		key: "cluster.id", flag: "cluster-id", typ: "string", usage: "cluster id reported to clients",
		set: stringSetter(func(c *Config) *string { return &c.Cluster.ID }),
		get: func(c *Config) string { return c.Cluster.ID },
	},
	{
		key: "kafka.listen", flag: "listen", typ: "host:port", usage: "Kafka listener address (port 0 picks a free port)",
		set: hostPortSetter(func(c *Config) *string { return &c.Kafka.Listen }, false),
		get: func(c *Config) string { return c.Kafka.Listen },
	},
	{
		key: "kafka.advertised_addr", flag: "advertised-addr", typ: "host:port", usage: "address clients are told to connect to (default: the listener's)",
		set: hostPortSetter(func(c *Config) *string { return &c.Kafka.AdvertisedAddr }, true),
		get: func(c *Config) string { return c.Kafka.AdvertisedAddr },
	},
	{
		key: "kafka.max_request_bytes", flag: "max-request-bytes", typ: "bytes", usage: "largest request accepted (socket.request.max.bytes)",
		set: int32Setter(func(c *Config) *int32 { return &c.Kafka.MaxRequestBytes }, 1024),
		get: func(c *Config) string { return strconv.Itoa(int(c.Kafka.MaxRequestBytes)) },
	},
	{
		key: "http.listen", flag: "http-listen", typ: "host:port", usage: `metrics and health listener ("off" disables it)`,
		set: hostPortSetter(func(c *Config) *string { return &c.HTTP.Listen }, true),
		get: func(c *Config) string { return c.HTTP.Listen },
	},
	{
		key: "topics.auto_create", flag: "auto-create-topics", typ: "bool", usage: "create unknown topics on Metadata and Produce (auto.create.topics.enable)",
		set: boolSetter(func(c *Config) *bool { return &c.Topics.AutoCreate }),
		get: func(c *Config) string { return strconv.FormatBool(c.Topics.AutoCreate) },
	},
	{
		key: "topics.default_partitions", flag: "default-partitions", typ: "int", usage: "partitions of auto-created topics and of creates that leave it to the broker (num.partitions)",
		set: int32Setter(func(c *Config) *int32 { return &c.Topics.DefaultPartitions }, 1),
		get: func(c *Config) string { return strconv.Itoa(int(c.Topics.DefaultPartitions)) },
	},
	{
		key: "topics.offsets_partitions", flag: "offsets-partitions", typ: "int", usage: "partitions of __consumer_offsets when the node creates it; fixes which partition owns each group (offsets.topic.num.partitions)",
		set: int32Setter(func(c *Config) *int32 { return &c.Topics.OffsetsPartitions }, 1),
		get: func(c *Config) string { return strconv.Itoa(int(c.Topics.OffsetsPartitions)) },
	},
	{
		key: "topics.defaults", flag: "topic-default", typ: "key=value", usage: "broker default for a topic config, e.g. retention.ms=86400000 (repeatable)",
		setEntry: func(c *Config, k, v string) error {
			if k == "" {
				return fmt.Errorf("%q: empty topic config name", k+"="+v)
			}
			if c.Topics.Defaults == nil {
				c.Topics.Defaults = make(map[string]string)
			}
			c.Topics.Defaults[k] = v
			return nil
		},
	},
	{
		key: "storage.flush_interval", flag: "flush-interval", typ: "duration", usage: "fsync logs at least this often (0: leave it to the OS, as Kafka does)",
		set: durationSetter(func(c *Config) *time.Duration { return &c.Storage.FlushInterval }),
		get: func(c *Config) string { return c.Storage.FlushInterval.String() },
	},
	{
		key: "logging.level", flag: "log-level", typ: "level", usage: "debug, info, warn or error",
		set: func(c *Config, raw string) error {
			l, err := ParseLevel(raw)
			if err != nil {
				return err
			}
			c.Logging.Level = l
			return nil
		},
		get: func(c *Config) string { return strings.ToLower(c.Logging.Level.String()) },
	},
	{
		key: "logging.format", flag: "log-format", typ: "format", usage: "text or json",
		set: func(c *Config, raw string) error {
			f := strings.ToLower(strings.TrimSpace(raw))
			if f != "text" && f != "json" {
				return fmt.Errorf("%q is not a log format (text or json)", raw)
			}
			c.Logging.Format = f
			return nil
		},
		get: func(c *Config) string { return c.Logging.Format },
	},
}

var (
	byKey  = make(map[string]*setting)
	byEnv  = make(map[string]*setting)
	groups = make(map[string]bool) // YAML sections: every proper prefix of a key
)

func init() {
	for _, s := range settings {
		byKey[s.key] = s
		byEnv[s.env()] = s
		for i, r := range s.key {
			if r == '.' {
				groups[s.key[:i]] = true
			}
		}
	}
}

// env is the setting's environment variable, STRATA_ and the flag name in
// upper case. Map settings take a comma-separated list of key=value.
func (s *setting) env() string {
	if s.setEntry != nil {
		return envName(s.flag + "s") // STRATA_TOPIC_DEFAULTS
	}
	return envName(s.flag)
}

func envName(flag string) string {
	return "STRATA_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// setPair applies one "key=value" entry of a map setting.
func (s *setting) setPair(c *Config, pair string) error {
	k, v, ok := strings.Cut(pair, "=")
	if !ok {
		return fmt.Errorf("%q is not key=value", pair)
	}
	return s.setEntry(c, strings.TrimSpace(k), strings.TrimSpace(v))
}

func stringSetter(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, raw string) error {
		*field(c) = raw
		return nil
	}
}

// int32Setter parses a 32-bit integer of at least min. The bound is checked
// here, not left to the broker, because the broker reads zero as "unset":
// an explicit 0 would otherwise be silently replaced by a default.
func int32Setter(field func(*Config) *int32, min int32) func(*Config, string) error {
	return func(c *Config, raw string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 32)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return fmt.Errorf("%q is out of range for a 32-bit integer", raw)
			}
			return fmt.Errorf("%q is not an integer", raw)
		}
		if n < int64(min) {
			return fmt.Errorf("%q is less than %d", raw, min)
		}
		*field(c) = int32(n)
		return nil
	}
}

func boolSetter(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, raw string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", raw)
		}
		*field(c) = b
		return nil
	}
}

func durationSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, raw string) error {
		raw = strings.TrimSpace(raw)
		if raw == "0" {
			*field(c) = 0
			return nil
		}
		d, err := time.ParseDuration(raw)
		if err != nil || d < 0 {
			return fmt.Errorf("%q is not a duration (e.g. 500ms, 1s, 5m)", raw)
		}
		*field(c) = d
		return nil
	}
}

// hostPortSetter accepts host:port (an empty host means every interface).
// When optional, "" and "off" clear the address.
func hostPortSetter(field func(*Config) *string, optional bool) func(*Config, string) error {
	return func(c *Config, raw string) error {
		raw = strings.TrimSpace(raw)
		if optional && (raw == "" || strings.EqualFold(raw, "off")) {
			*field(c) = ""
			return nil
		}
		_, port, err := net.SplitHostPort(raw)
		if err != nil {
			return fmt.Errorf("%q is not host:port", raw)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("%q does not have a port number", raw)
		}
		*field(c) = raw
		return nil
	}
}

// ParseLevel parses a log level name: debug, info, warn (or warning) or error.
func ParseLevel(raw string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is not a log level (debug, info, warn or error)", raw)
}
