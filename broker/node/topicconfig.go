package node

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"strata/broker/partition"
	"strata/segment"
)

// TopicConfigDef describes one topic-level config key: its Kafka default
// and how to validate a value. Keys not listed here are refused with
// INVALID_CONFIG rather than silently stored, so a typo never looks applied.
type TopicConfigDef struct {
	Default  string
	validate func(string) error
	Doc      string
}

var TopicConfigs = map[string]TopicConfigDef{
	"cleanup.policy":                  {Default: "delete", validate: oneOfList("delete", "compact"), Doc: "delete, compact or both (compact,delete): see docs/compaction.md"},
	"retention.ms":                    {Default: "604800000", validate: longAtLeast(-1), Doc: "whole-log time bound, -1 unlimited, 0 keeps no closed segment"},
	"retention.bytes":                 {Default: "-1", validate: longAtLeast(-1), Doc: "whole-log size bound per partition, -1 unlimited, 0 keeps no closed segment"},
	"local.retention.ms":              {Default: "-2", validate: longAtLeast(-2), Doc: "hot-tier time bound, -2 follows retention.ms"},
	"local.retention.bytes":           {Default: "-2", validate: longAtLeast(-2), Doc: "hot-tier size bound, -2 follows retention.bytes"},
	"remote.storage.enable":           {Default: "true", validate: isBool, Doc: "tier closed segments to the object store"},
	"segment.bytes":                   {Default: "1073741824", validate: intAtLeast(1024), Doc: "roll the active segment at this size"},
	"segment.ms":                      {Default: "604800000", validate: longAtLeast(1), Doc: "roll the active segment at this age"},
	"segment.index.bytes":             {Default: "10485760", validate: intAtLeast(4), Doc: "accepted for compatibility; indexes grow as needed"},
	"index.interval.bytes":            {Default: "4096", validate: intAtLeast(0), Doc: "bytes between offset index entries"},
	"max.message.bytes":               {Default: "1048588", validate: intAtLeast(0), Doc: "largest record batch accepted"},
	"message.timestamp.type":          {Default: "CreateTime", validate: oneOf("CreateTime"), Doc: "only CreateTime is supported"},
	"message.timestamp.before.max.ms": {Default: "9223372036854775807", validate: longAtLeast(0), Doc: "reject records older than now minus this (0: any before now)"},
	"message.timestamp.after.max.ms":  {Default: "3600000", validate: longAtLeast(0), Doc: "reject records newer than now plus this (0: any after now)"},
	"min.insync.replicas":             {Default: "1", validate: intAtLeast(1), Doc: "acks=all needs this many in-sync replicas"},
	"unclean.leader.election.enable":  {Default: "false", validate: isBool, Doc: "elect an out-of-sync replica when no in-sync one is left"},
	"delete.retention.ms":             {Default: "86400000", validate: longAtLeast(0), Doc: "how long compaction keeps tombstones"},
	"min.compaction.lag.ms":           {Default: "0", validate: longAtLeast(0), Doc: "records younger than this are not compacted"},
	"max.compaction.lag.ms":           {Default: "9223372036854775807", validate: longAtLeast(1), Doc: "records older than this are eligible for compaction"},
	"min.cleanable.dirty.ratio":       {Default: "0.5", validate: ratio, Doc: "dirty ratio that triggers compaction"},
	"compression.type":                {Default: "producer", validate: oneOf("producer"), Doc: "batches are stored as the producer compressed them"},
	"flush.messages":                  {Default: "9223372036854775807", validate: longAtLeast(1), Doc: "accepted for compatibility; see the broker flush interval"},
	"flush.ms":                        {Default: "9223372036854775807", validate: longAtLeast(0), Doc: "accepted for compatibility; see the broker flush interval"},
	"file.delete.delay.ms":            {Default: "60000", validate: longAtLeast(0), Doc: "accepted for compatibility"},
	"preallocate":                     {Default: "false", validate: isBool, Doc: "accepted for compatibility"},
	// Read replicas (readreplica.go): fixed at creation.
	ReadReplicaSourceKey:  {Default: "", validate: validSourceURI, Doc: "serve this topic read-only from another cluster's bucket (file:///dir or s3://bucket/prefix); set at creation only"},
	ReadReplicaTopicKey:   {Default: "", validate: validSourceTopic, Doc: "the read replica's topic in the source bucket (default: the same name)"},
	ReadReplicaTopicIDKey: {Default: "", validate: validSourceTopicID, Doc: "the source topic's id, set by the broker at creation"},
}

// TopicConfigNames lists the known keys in a stable order for
// DescribeConfigs.
var TopicConfigNames = func() []string {
	names := make([]string, 0, len(TopicConfigs))
	for k := range TopicConfigs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}()

// ValidateTopicConfig checks one key and value, returning an error that
// names both.
func ValidateTopicConfig(key, value string) error {
	def, ok := TopicConfigs[key]
	if !ok {
		return fmt.Errorf("unknown topic config %q", key)
	}
	if err := def.validate(value); err != nil {
		return fmt.Errorf("topic config %s=%q: %v", key, value, err)
	}
	return nil
}

// TopicConfigValue resolves key for a topic: the topic's own setting, then
// the broker default, then Kafka's default.
func (n *Node) TopicConfigValue(configs map[string]string, key string) (value string, source int8) {
	if v, ok := configs[key]; ok {
		return v, ConfigSourceTopic
	}
	if v, ok := n.cfg.TopicDefaults[key]; ok {
		return v, ConfigSourceStaticBroker
	}
	return TopicConfigs[key].Default, ConfigSourceDefault
}

// DescribeConfigs config sources (Kafka's ConfigSource enum).
const (
	ConfigSourceTopic        int8 = 1
	ConfigSourceStaticBroker int8 = 4
	ConfigSourceDefault      int8 = 5
)

// settingsFor resolves a topic's configs for one of its partitions.
func (n *Node) settingsFor(configs map[string]string, internal bool) *partition.Settings {
	s := &partition.Settings{
		Configs:  configs,
		Log:      n.segmentConfig(configs),
		MinISR:   1,
		Internal: internal,
	}
	if v, _ := n.TopicConfigValue(configs, "min.insync.replicas"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			s.MinISR = n
		}
	}
	if compact, _ := n.cleanupPolicy(configs); compact {
		policy := n.compactionPolicy(configs)
		s.Compaction = &policy
	}
	return s
}

// segmentConfig turns a topic's configs into the log's settings.
func (n *Node) segmentConfig(configs map[string]string) segment.Config {
	num := func(key string) int64 {
		v, _ := n.TopicConfigValue(configs, key)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil { // validated on the way in; fall back to Kafka's default
			n, _ = strconv.ParseInt(TopicConfigs[key].Default, 10, 64)
		}
		return n
	}
	ms := func(key string) time.Duration {
		n := num(key)
		if n < 0 {
			return -1
		}
		if n > math.MaxInt64/int64(time.Millisecond) {
			return -1 // effectively unlimited
		}
		return time.Duration(n) * time.Millisecond
	}
	cfg := segment.Config{
		SegmentBytes:       num("segment.bytes"),
		SegmentMs:          ms("segment.ms"),
		IndexIntervalBytes: int(num("index.interval.bytes")),
		RetentionBytes:     num("retention.bytes"),
		RetentionMs:        ms("retention.ms"),
		MaxBatchBytes:      int(num("max.message.bytes")),
		TimestampBeforeMax: ms("message.timestamp.before.max.ms"),
		TimestampAfterMax:  ms("message.timestamp.after.max.ms"),
		// Every value above is resolved here, Kafka's default included, so
		// a 0 is the topic's 0 (retention.ms=0 deletes every closed segment).
		Explicit: true,
		Logger:   n.log,
	}
	if cfg.IndexIntervalBytes == 0 {
		cfg.IndexIntervalBytes = 1 // every batch
	}
	compact, deletes := n.cleanupPolicy(configs)
	cfg.KeysRequired = compact
	if lag := ms("max.compaction.lag.ms"); compact && lag > 0 && lag < cfg.SegmentMs {
		// As Kafka's LogConfig.maxSegmentMs: the active segment, which
		// compaction never touches, rolls in time for the lag to hold.
		cfg.SegmentMs = lag
	}
	cfg = n.tierSegmentConfig(cfg, configs)
	if !deletes {
		// compact alone deletes nothing by age or size; a tiered log
		// still lets go of local copies once they are in the bucket
		// (LocalRetention*, derived above).
		cfg.RetentionBytes, cfg.RetentionMs = -1, -1
	}
	return cfg
}

// cleanupPolicy reads cleanup.policy: whether it compacts, and whether it
// deletes by retention.ms and retention.bytes.
func (n *Node) cleanupPolicy(configs map[string]string) (compact, deletes bool) {
	policy, _ := n.TopicConfigValue(configs, "cleanup.policy")
	for _, p := range strings.Split(policy, ",") {
		switch strings.TrimSpace(p) {
		case "compact":
			compact = true
		case "delete":
			deletes = true
		}
	}
	return compact, deletes
}

func longAtLeast(min int64) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		if n < min {
			return fmt.Errorf("must be at least %d", min)
		}
		return nil
	}
}

func intAtLeast(min int64) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return fmt.Errorf("not a 32-bit integer")
		}
		if n < min {
			return fmt.Errorf("must be at least %d", min)
		}
		return nil
	}
}

func isBool(s string) error {
	if s != "true" && s != "false" {
		return fmt.Errorf("must be true or false")
	}
	return nil
}

func ratio(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 {
		return fmt.Errorf("must be a number between 0 and 1")
	}
	return nil
}

func oneOf(allowed ...string) func(string) error {
	return func(s string) error {
		for _, a := range allowed {
			if s == a {
				return nil
			}
		}
		return fmt.Errorf("must be one of %s", strings.Join(allowed, ", "))
	}
}

func oneOfList(allowed ...string) func(string) error {
	one := oneOf(allowed...)
	return func(s string) error {
		for _, part := range strings.Split(s, ",") {
			if err := one(strings.TrimSpace(part)); err != nil {
				return err
			}
		}
		return nil
	}
}
