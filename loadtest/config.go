package loadtest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ProduceConfig configures Produce. The zero value of each field is its
// default unless the field says otherwise; Bootstrap, Topic and one of
// Records or Duration are required.
type ProduceConfig struct {
	Bootstrap []string // host:port of one or more brokers
	Topic     string

	// Bounds: the run stops at whichever comes first. At least one is
	// required, so that no run goes on forever.
	Records  int64
	Duration time.Duration

	Size      int   // value size in bytes
	KeySpace  int64 // number of distinct keys; 0 writes records without keys
	Producers int   // producer clients, each its own stream of sequences; default 1

	// Target rate over all producers, split evenly between them; zero
	// means as fast as the broker takes it. Rate and RateMB exclude each
	// other. RateMB counts keys plus values, in MiB.
	Rate   float64
	RateMB float64

	Acks          string        // "all" (default, also "-1"), "1" or "0"
	Idempotent    bool          // requires Acks "all"; implied by TransactionalID
	Compression   string        // "none" (default), "gzip", "snappy", "lz4" or "zstd"
	Linger        time.Duration // how long a partition's batch waits for more records; 0 sends at once
	BatchMaxBytes int32         // largest record batch; 0 keeps the client default (1 MB)

	// Create creates the topic first with the settings below; an existing
	// topic is used as it is. Without it the run produces as any client
	// does, and a missing topic exists if the broker creates it on first
	// use.
	Create            bool
	Partitions        int32 // for Create; 0 or -1 take the broker default
	ReplicationFactor int16 // for Create; 0 or -1 take the broker default
	TopicConfigs      map[string]string

	// TransactionalID makes every producer client transactional, client i
	// with the transactional id "TransactionalID-i": it writes its records
	// in transactions of TxnRecords records (default 100) and commits
	// each, but aborts every TxnAbortEvery'th transaction (0: none) on
	// purpose, to give read_committed consumers something to skip.
	// Requires Acks "all". Records then bounds the records sent, aborted
	// ones included; Result counts committed records as records, and
	// their latency runs from each record's due time to its commit.
	TransactionalID string
	TxnRecords      int
	TxnAbortEvery   int

	// Verify derives every value from Seed (instead of reusing one random
	// payload) and writes the end markers a verifying consumer needs.
	Verify bool
	Seed   int64

	// ClientOpts are appended to every client's options, for TLS, SASL,
	// logging and the like.
	ClientOpts []kgo.Opt

	// OnProgress, if set, is called every ProgressEvery (default 1s) from a
	// goroutine of the run, and once more when the run ends.
	OnProgress    func(Progress)
	ProgressEvery time.Duration
}

// ConsumeConfig configures Consume. Bootstrap, Topic and one of Records or
// Duration are required.
type ConsumeConfig struct {
	Bootstrap []string
	Topic     string

	// Bounds, as in ProduceConfig. Records counts data records. A
	// verifying consumer also stops by itself once it has read up to the
	// end offsets it saw at start and every end marker of every producer
	// run it saw; Duration then serves as its timeout.
	Records  int64
	Duration time.Duration

	// From is where to start without a committed offset: "earliest"
	// (default), "latest" or an RFC 3339 time.
	From  string
	Group string // consume in this consumer group; empty reads partitions directly

	// Isolation is "read_uncommitted" (default: every record, aborted
	// transactions' too, up to the high watermark) or "read_committed"
	// (committed records only, up to the last stable offset). A verifying
	// read_committed consumer counts every record of an aborted
	// transaction it is given as a fault.
	Isolation string

	Verify bool
	Seed   int64 // must match the producer's
	// UnreadableAfter is how long a partition may answer nothing but
	// errors (KAFKA_STORAGE_ERROR: its data is out of the broker's reach)
	// before a verifying consumer gives up on it and counts its unread
	// records, up to the end offsets seen at start, as missing. Default
	// 30s.
	UnreadableAfter time.Duration

	ClientOpts    []kgo.Opt
	OnProgress    func(Progress)
	ProgressEvery time.Duration
}

// E2EConfig configures E2E: its producer side is ProduceConfig, and a
// consumer reads every partition from the end offsets at start.
type E2EConfig struct {
	ProduceConfig

	// Drain bounds how long the consumer waits, after the producer has
	// finished, for records still on their way; default 10s.
	Drain time.Duration
}

const (
	defaultProgressEvery = time.Second
	defaultDrain         = 10 * time.Second
	defaultUnreadable    = 30 * time.Second
	maxValueSize         = 64 << 20
)

func (c *ProduceConfig) validate() error {
	if err := validateCommon(c.Bootstrap, c.Topic, c.Records, c.Duration); err != nil {
		return err
	}
	switch {
	case c.Size < 0 || c.Size > maxValueSize:
		return fmt.Errorf("size %d out of range [0, %d]", c.Size, maxValueSize)
	case c.KeySpace < 0:
		return fmt.Errorf("key space %d is negative", c.KeySpace)
	case c.Producers < 0:
		return fmt.Errorf("producers %d is negative", c.Producers)
	case c.Rate < 0 || c.RateMB < 0:
		return errors.New("rates must not be negative")
	case c.Rate > 0 && c.RateMB > 0:
		return errors.New("set a rate in records/s or in MB/s, not both")
	case c.Linger < 0:
		return fmt.Errorf("linger %v is negative", c.Linger)
	case c.BatchMaxBytes < 0:
		return fmt.Errorf("batch max bytes %d is negative", c.BatchMaxBytes)
	case c.TxnRecords < 0:
		return fmt.Errorf("records per transaction %d is negative", c.TxnRecords)
	case c.TxnAbortEvery < 0:
		return fmt.Errorf("abort every %d transactions: negative", c.TxnAbortEvery)
	case c.TransactionalID == "" && (c.TxnRecords > 0 || c.TxnAbortEvery > 0):
		return errors.New("transaction settings without a transactional id")
	}
	acks, err := parseAcks(c.Acks)
	if err != nil {
		return err
	}
	if c.TransactionalID != "" && acks != -1 {
		return fmt.Errorf("transactions require acks=all, not acks=%s", c.Acks)
	}
	if c.Idempotent && acks != -1 {
		return fmt.Errorf("idempotence requires acks=all, not acks=%s", c.Acks)
	}
	if _, err := parseCompression(c.Compression); err != nil {
		return err
	}
	for k := range c.TopicConfigs {
		if k == "" {
			return errors.New("topic config with an empty name")
		}
	}
	return nil
}

func (c *ConsumeConfig) validate() error {
	if err := validateCommon(c.Bootstrap, c.Topic, c.Records, c.Duration); err != nil {
		return err
	}
	if c.UnreadableAfter < 0 {
		return fmt.Errorf("unreadable-after %v is negative", c.UnreadableAfter)
	}
	if _, err := parseIsolation(c.Isolation); err != nil {
		return err
	}
	_, err := parseFrom(c.From)
	return err
}

// parseIsolation reports whether s names read_committed.
func parseIsolation(s string) (readCommitted bool, err error) {
	switch strings.ToLower(s) {
	case "", "read_uncommitted":
		return false, nil
	case "read_committed":
		return true, nil
	}
	return false, fmt.Errorf("isolation %q is not read_committed or read_uncommitted", s)
}

// isolationOpt is the kgo option of a consumer reading at that isolation.
func isolationOpt(readCommitted bool) kgo.Opt {
	if readCommitted {
		return kgo.FetchIsolationLevel(kgo.ReadCommitted())
	}
	return kgo.FetchIsolationLevel(kgo.ReadUncommitted())
}

// defaultTxnRecords is ProduceConfig.TxnRecords' default, the transaction
// size docs/benchmarks.md measures.
const defaultTxnRecords = 100

// txnRecords is the transaction size of a transactional run.
func (c *ProduceConfig) txnRecords() int {
	if c.TxnRecords > 0 {
		return c.TxnRecords
	}
	return defaultTxnRecords
}

func validateCommon(bootstrap []string, topic string, records int64, d time.Duration) error {
	switch {
	case len(bootstrap) == 0:
		return errors.New("no bootstrap address")
	case topic == "":
		return errors.New("no topic")
	case records < 0:
		return fmt.Errorf("records %d is negative", records)
	case d < 0:
		return fmt.Errorf("duration %v is negative", d)
	case records == 0 && d == 0:
		return errors.New("unbounded run: set a record count or a duration")
	}
	for _, b := range bootstrap {
		if b == "" || !strings.Contains(b, ":") {
			return fmt.Errorf("bootstrap address %q is not host:port", b)
		}
	}
	return nil
}

// parseAcks returns the acks as the protocol spells them: -1 for all.
func parseAcks(s string) (int16, error) {
	switch strings.ToLower(s) {
	case "", "all", "-1":
		return -1, nil
	case "1":
		return 1, nil
	case "0":
		return 0, nil
	}
	return 0, fmt.Errorf("acks %q is not 0, 1 or all", s)
}

func parseCompression(s string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("compression %q is not none, gzip, snappy, lz4 or zstd", s)
}

// startPoint is a parsed ConsumeConfig.From: where a consumer without a
// committed offset starts.
type startPoint struct {
	earliest, latest bool
	milli            int64 // neither: the first record at or after this Unix time in ms
}

func parseFrom(s string) (startPoint, error) {
	switch strings.ToLower(s) {
	case "", "earliest":
		return startPoint{earliest: true}, nil
	case "latest":
		return startPoint{latest: true}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return startPoint{}, fmt.Errorf("from %q is not earliest, latest or an RFC 3339 time", s)
	}
	return startPoint{milli: t.UnixMilli()}, nil
}

// offset is the consumer's reset offset.
func (s startPoint) offset() kgo.Offset {
	switch {
	case s.earliest:
		return kgo.NewOffset().AtStart()
	case s.latest:
		return kgo.NewOffset().AtEnd()
	}
	return kgo.NewOffset().AfterMilli(s.milli)
}

// producerOpts are the kgo options of producer client i of a run.
func (c *ProduceConfig) producerOpts(i int) []kgo.Opt {
	acks, _ := parseAcks(c.Acks)
	codec, _ := parseCompression(c.Compression)
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Bootstrap...),
		kgo.DefaultProduceTopic(c.Topic),
		// Partitions are picked by the producer (see stream.partition)
		// so that sequences and derived values can name them.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(c.Linger),
	}
	switch acks {
	case -1:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case 1:
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	case 0:
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	}
	switch {
	case c.TransactionalID != "":
		opts = append(opts, kgo.TransactionalID(fmt.Sprintf("%s-%d", c.TransactionalID, i)))
	case !c.Idempotent:
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	if c.BatchMaxBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(c.BatchMaxBytes))
	}
	return append(opts, c.ClientOpts...)
}
