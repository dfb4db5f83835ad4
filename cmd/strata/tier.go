package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/cmd/internal/config"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// The tier verbs read the bucket directly, as a third party would
// (docs/bucket-format.md): the manifests are the truth about what the
// bucket holds, so the verbs work on a bucket whose broker is gone. Only
// the broker's offsets (status) and a topic's id (ls, when not given) come
// through the Kafka protocol.

// bucket says where the tier verbs find the bucket: the same settings a
// node takes (--data-dir for the directory store, --s3-* and the
// STRATA_S3_* keys for S3), from flags, STRATA_* variables or the node's
// config file.
type bucket struct {
	environ []string
	flags   *config.Flags
}

// open opens the bucket the settings name, without creating it.
func (b *bucket) open(ctx context.Context) (objstore.Store, string, error) {
	c, _, err := config.Load(config.Sources{Env: b.environ, Flags: b.flags, DataDirOptional: true})
	if err != nil {
		return nil, "", fmt.Errorf("config: %w", err)
	}
	return openExistingStore(ctx, c.S3, c.Tier, c.Node.DataDir)
}

// checkedBucket is the bucket a tier verb reads, checked against the
// cluster it talks to.
type checkedBucket struct {
	st    objstore.Store
	where string
	// unreachable is set when no broker answered: the bucket is then read
	// alone, unchecked.
	unreachable *unreachableError
}

// openChecked opens the bucket and asks the cluster at --bootstrap for
// its id: a bucket whose cluster object (docs/bucket-format.md §11) names
// another cluster, or none, is not that cluster's bucket, and reading it
// would mix one cluster's offsets with another's (or with nothing), so it
// is refused, naming both. It says on w which bucket it reads, and whose:
// the first line of a verb's output, or of its stderr when stdout is JSON.
// When no broker answers the bucket is read alone, as that line says.
func (b *bucket) openChecked(ctx context.Context, a *admin, w io.Writer) (*checkedBucket, error) {
	st, where, err := b.open(ctx)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(where, "s3://") {
		where = "dir " + where
	}
	cb := &checkedBucket{st: st, where: where}
	mark, marked, err := tier.BucketCluster(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", where, err)
	}
	var cluster string
	err = a.do(ctx, func(ctx context.Context, adm *kadm.Client) error {
		md, err := adm.BrokerMetadata(ctx)
		cluster = md.Cluster
		return err
	})
	switch {
	case errors.As(err, &cb.unreachable):
	case err != nil:
		return nil, fmt.Errorf("cluster id: %w", err)
	case cluster == "":
		return nil, fmt.Errorf("the broker at %s reports no cluster id to check bucket %s against", a.bootstrap, where)
	case !marked:
		return nil, fmt.Errorf("bucket %s holds no cluster id (%s), so it is not the bucket of cluster %s at %s, whose brokers write theirs at start: give that cluster's bucket (--data-dir, --bucket-dir or --s3-*)",
			where, format.ClusterKey, cluster, a.bootstrap)
	case mark.ClusterID != cluster:
		return nil, fmt.Errorf("bucket %s belongs to cluster %s, but the broker at %s is of cluster %s: give that cluster's bucket (--data-dir, --bucket-dir or --s3-*)",
			where, mark.ClusterID, a.bootstrap, cluster)
	}
	whose := "no cluster id"
	if marked {
		whose = "cluster " + mark.ClusterID
	}
	if cb.unreachable != nil {
		whose += "; no broker answered to check it against"
	}
	fmt.Fprintf(w, "bucket: %s (%s)\n", where, whose)
	return cb, nil
}

// textOut is where a verb's words go beside its output: stdout, unless
// stdout carries JSON for a program to parse.
func textOut(asJSON bool, stdout, stderr io.Writer) io.Writer {
	if asJSON {
		return stderr
	}
	return stdout
}

func newTierCmd(environ []string, stdout io.Writer) *cobra.Command {
	a := &admin{}
	b := &bucket{environ: environ}
	cmd := &cobra.Command{
		Use:   "tier",
		Short: "Inspect and check the cold tier (the bucket)",
		Long: `Inspect tiered storage. The bucket is found like a node finds it: --data-dir
for the directory store (<data-dir>/bucket; default ./strata-data) or
--bucket-dir for one elsewhere, or
--s3-bucket and the other --s3-* flags, STRATA_S3_* variables or the node's
config file (--config) for S3, with the keys in STRATA_S3_ACCESS_KEY and
STRATA_S3_SECRET_KEY or the AWS credential chain.`,
	}
	a.addFlags(cmd, environ)
	b.flags = config.AddFlagsFor(cmd.PersistentFlags(), true, "node.data_dir", "tier.bucket_dir", "s3")
	cmd.AddCommand(
		newTierStatusCmd(a, b, stdout),
		newTierLsCmd(a, b, stdout),
		newTierVerifyCmd(a, b, stdout),
	)
	asGroup(cmd)
	return cmd
}

// partitionStatus is one row of `tier status`. Remote offsets are nil when
// the bucket holds nothing of the partition, local ones and the lag when
// no broker answered, the lag too when the topic never tiers.
type partitionStatus struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	TopicID     string `json:"topic_id"`
	TopicIDHex  string `json:"topic_id_hex"`
	LocalOnly   bool   `json:"local_only,omitempty"` // the topic never tiers
	LocalStart  *int64 `json:"local_start"`
	LocalEnd    *int64 `json:"local_end"`
	RemoteStart *int64 `json:"remote_start"`
	RemoteEnd   *int64 `json:"remote_end"`
	Segments    int    `json:"segments"`
	Bytes       int64  `json:"bytes"`
	UploadLag   *int64 `json:"upload_lag"`
	// The cold tier's compaction, from the manifest: Cleaned holds only
	// the latest record per key, Dirty is not compacted yet, and
	// LastCompaction is when the last pass was published ("never").
	Cleaned        *offsetRange `json:"cleaned"`
	Dirty          *offsetRange `json:"dirty"`
	LastCompaction string       `json:"last_compaction,omitempty"`
	Error          string       `json:"error,omitempty"`

	id [16]byte
}

// offsetRange is the offsets [Start, End).
type offsetRange struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

func (r *offsetRange) String() string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("[%d, %d)", r.Start, r.End)
}

func newTierStatusCmd(a *admin, b *bucket, stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [TOPIC...]",
		Short: "Show each partition's local and remote offsets, segments in the bucket and upload lag",
		Long: `Show, per partition, the local log's start and end (ListOffsets earliest-local
and latest), the bucket's start and end (earliest, and latest-tiered + 1),
the segments and bytes the partition's manifest lists, and the upload lag:
records at or above the remote end (the whole log when nothing is uploaded).
For the bucket's compaction: the cleaned range (from the remote start to
where the last cold-tier compaction stopped), the dirty range after it, and
when the last compaction was published ("never" if none).
Topics that never tier (internal, compacted or remote.storage.enable=false)
show as local-only. Without topics, every topic but the internal ones.

When no broker answers, the bucket alone is shown: the remote columns of
every partition it holds a manifest of.`,
		Args: args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, topics []string) error {
			ctx := cmd.Context()
			cb, err := b.openChecked(ctx, a, textOut(asJSON, stdout, cmd.ErrOrStderr()))
			if err != nil {
				return fmt.Errorf("tier status: %w", err)
			}
			st := cb.st
			var rows []partitionStatus
			if cb.unreachable != nil {
				err = cb.unreachable
			} else {
				err = a.doClient(ctx, func(ctx context.Context, cl *kgo.Client) error {
					rows, err = partitionOffsets(ctx, cl, a.adminClient(cl), topics)
					return err
				})
			}
			var unreachable *unreachableError
			switch {
			case errors.As(err, &unreachable):
				if rows, err = bucketPartitions(ctx, st, topics); err != nil {
					return fmt.Errorf("tier status: %s; bucket: %w", unreachable.msg, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "strata: %s; showing the bucket alone\n", unreachable.msg)
			case err != nil:
				return fmt.Errorf("tier status: %w", err)
			default:
				for i := range rows {
					r := &rows[i]
					if r.Error != "" {
						continue
					}
					tp := format.TopicPartition{Topic: r.Topic, TopicID: r.id, Partition: r.Partition}
					m, ok, err := tier.ReadManifest(ctx, st, tp)
					if err != nil {
						r.Error = err.Error()
						continue
					}
					if ok {
						r.addManifest(m)
					}
				}
			}
			if asJSON {
				return writeJSON(stdout, rows)
			}
			tw := newTable(stdout)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tLOCAL-START\tLOCAL-END\tREMOTE-START\tREMOTE-END\tSEGMENTS\tBYTES\tCLEANED\tDIRTY\tLAST-COMPACTION\tUPLOAD-LAG")
			for _, r := range rows {
				if r.Error != "" {
					fmt.Fprintf(tw, "%s\t%d\terror: %s\n", r.Topic, r.Partition, r.Error)
					continue
				}
				lag := optOffset(r.UploadLag)
				if r.LocalOnly {
					lag = "local-only"
				}
				last := r.LastCompaction
				if last == "" {
					last = "-"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Topic, r.Partition, optOffset(r.LocalStart), optOffset(r.LocalEnd),
					optOffset(r.RemoteStart), optOffset(r.RemoteEnd), r.Segments, humanBytes(r.Bytes), r.Cleaned, r.Dirty, last, lag)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// addManifest takes the totals from the manifest's root alone: its page
// summaries carry them, so status reads no page.
func (r *partitionStatus) addManifest(m *format.Root) {
	tot := m.Totals()
	r.Segments = int(tot.Segments)
	r.Bytes = tot.Bytes
	// Retention moves the log start on its own: what it passed is no
	// longer cleaned, it is gone.
	cleaned := m.CleanedEnd()
	r.Cleaned = &offsetRange{m.LogStartOffset, cleaned}
	r.Dirty = &offsetRange{cleaned, max(cleaned, m.EndOffset())}
	r.LastCompaction = "never"
	if m.LastCompactionMs > 0 {
		r.LastCompaction = timestamp(m.LastCompactionMs)
	}
}

// bucketPartitions is `tier status` without a broker: a row per partition
// the bucket holds a manifest of (of the named topics, if any), with what
// that manifest says.
func bucketPartitions(ctx context.Context, st objstore.Store, topics []string) ([]partitionStatus, error) {
	newest, _, err := listManifests(ctx, st, topics)
	if err != nil {
		return nil, err
	}
	if err := missingTopics(newest, topics); err != nil {
		return nil, err
	}
	rows := []partitionStatus{}
	for _, tp := range sortedPartitions(newest) {
		r := partitionStatus{Topic: tp.Topic, Partition: tp.Partition, TopicID: topicID(tp.TopicID), TopicIDHex: topicIDHex(tp.TopicID), id: tp.TopicID}
		m, err := tier.GetManifest(ctx, st, newest[tp])
		if err != nil {
			r.Error = err.Error()
		} else {
			start, end := m.LogStartOffset, m.EndOffset()
			r.RemoteStart, r.RemoteEnd = &start, &end
			r.addManifest(m)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// localOnly says which topics never tier, by the rule the broker applies:
// those with remote.storage.enable false never go to the bucket, so their
// whole log is not upload lag. Compacted and internal topics tier.
func localOnly(ctx context.Context, adm *kadm.Client, tds kadm.TopicDetails) (map[string]bool, error) {
	out := make(map[string]bool)
	var names []string
	for name, td := range tds {
		if td.Err != nil {
			continue
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return out, nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("configs: %w", err)
	}
	for _, name := range names {
		rc, err := rcs.On(name, nil)
		if err == nil {
			err = kafkaError(rc.Err, rc.ErrMessage)
		}
		if err != nil {
			return nil, fmt.Errorf("configs of %s: %w", name, err)
		}
		for _, c := range rc.Configs {
			v := c.MaybeValue()
			switch c.Key {
			case "remote.storage.enable":
				out[name] = out[name] || v != "true"
			}
		}
	}
	return out, nil
}

// partitionOffsets lists the topics (all non-internal ones if none are
// named) and asks their leaders for the four offsets of `tier status`.
func partitionOffsets(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topics []string) ([]partitionStatus, error) {
	tds, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, err
	}
	fails := failures{verb: "topic"}
	var rows []partitionStatus
	for _, name := range tds.Names() {
		td := tds[name]
		if td.Err != nil {
			fails.add(name, kafkaError(td.Err, ""))
			continue
		}
		for _, p := range td.Partitions.Numbers() {
			rows = append(rows, partitionStatus{Topic: name, Partition: p, TopicID: topicID(td.ID), TopicIDHex: topicIDHex(td.ID), id: td.ID})
		}
	}
	for _, name := range topics {
		if _, ok := tds[name]; !ok {
			fails.add(name, kerr.UnknownTopicOrPartition)
		}
	}
	if err := fails.err(); err != nil {
		return nil, err
	}
	local, err := localOnly(ctx, adm, tds)
	if err != nil {
		return nil, err
	}
	// One request per position: a request may not name a partition twice.
	const (
		latest, earliest, earliestLocal, latestTiered = -1, -2, -4, -5
	)
	got := make(map[int64]map[tpKey]int64)
	for _, ts := range []int64{latest, earliest, earliestLocal, latestTiered} {
		offs, err := listOffsets(ctx, cl, rows, ts)
		if err != nil {
			return nil, err
		}
		got[ts] = offs
	}
	for i := range rows {
		r := &rows[i]
		k := tpKey{r.Topic, r.Partition}
		var missing []string
		get := func(ts int64, name string) int64 {
			o, ok := got[ts][k]
			if !ok {
				missing = append(missing, name)
			}
			return o
		}
		localEnd := get(latest, "latest")
		localStart := get(earliestLocal, "earliest-local")
		start := get(earliest, "earliest")
		tiered := get(latestTiered, "latest-tiered")
		if len(missing) > 0 {
			r.Error = "no " + strings.Join(missing, ", ") + " offset from the leader"
			continue
		}
		r.LocalStart, r.LocalEnd = &localStart, &localEnd
		if local[r.Topic] {
			r.LocalOnly = true
			continue
		}
		lag := localEnd - start
		if tiered >= 0 {
			end := tiered + 1
			r.RemoteStart, r.RemoteEnd = &start, &end
			lag = localEnd - end
		}
		r.UploadLag = &lag
	}
	return rows, nil
}

type tpKey struct {
	topic     string
	partition int32
}

// listOffsets sends ListOffsets for every row at timestamp ts. The client
// routes each partition to its leader and merges the answers. A partition
// that answers with an error is left out of the result.
func listOffsets(ctx context.Context, cl *kgo.Client, rows []partitionStatus, ts int64) (map[tpKey]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	byTopic := make(map[string]int)
	for _, r := range rows {
		i, ok := byTopic[r.Topic]
		if !ok {
			i = len(req.Topics)
			byTopic[r.Topic] = i
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = r.Topic
			req.Topics = append(req.Topics, t)
		}
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition = r.Partition
		p.Timestamp = ts
		p.CurrentLeaderEpoch = -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	out := make(map[tpKey]int64)
	if len(req.Topics) == 0 {
		return out, nil
	}
	for _, shard := range cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			return nil, fmt.Errorf("ListOffsets(%d): %w", ts, shard.Err)
		}
		for _, t := range shard.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == 0 {
					out[tpKey{t.Topic, p.Partition}] = p.Offset
				}
			}
		}
	}
	return out, nil
}

// listedSegment is one segment of `tier ls --json`.
type listedSegment struct {
	BaseOffset     int64  `json:"base_offset"`
	LastOffset     int64  `json:"last_offset"`
	Records        int64  `json:"records"`
	FirstTimestamp int64  `json:"first_timestamp"`
	MaxTimestamp   int64  `json:"max_timestamp"`
	Size           int64  `json:"size"`
	LeaderEpoch    int32  `json:"leader_epoch"`
	CRC32C         string `json:"crc32c"`
	Key            string `json:"key"`
}

type listedManifest struct {
	Topic          string          `json:"topic"`
	Partition      int32           `json:"partition"`
	TopicID        string          `json:"topic_id"`
	TopicIDHex     string          `json:"topic_id_hex"`
	Manifest       string          `json:"manifest"`
	LeaderEpoch    int32           `json:"leader_epoch"`
	Seq            int64           `json:"seq"`
	LogStartOffset int64           `json:"log_start_offset"`
	EndOffset      int64           `json:"end_offset"`
	Segments       []listedSegment `json:"segments"`
}

func newTierLsCmd(a *admin, b *bucket, stdout io.Writer) *cobra.Command {
	var (
		asJSON bool
		idFlag string
	)
	cmd := &cobra.Command{
		Use:   "ls TOPIC PARTITION",
		Short: "List a partition's remote segments from its current manifest",
		Long: `List the segments of a partition's current manifest in the bucket: offsets,
record count, timestamps, size, the leader epoch that uploaded each, and its
object key, with the remote log start offset. The topic id, part of every
key, comes from --topic-id (base64 as Kafka tools print it, or 32 hex
digits), else from the broker, else (no broker answering) from the bucket
when it holds a single topic of that name.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			topic := argv[0]
			p, err := strconv.ParseInt(argv[1], 10, 32)
			if err != nil || p < 0 {
				return &usageError{err: fmt.Errorf("partition %q is not a partition number", argv[1]), cmd: cmd.CommandPath()}
			}
			tp := format.TopicPartition{Topic: topic, Partition: int32(p)}
			if idFlag != "" {
				if tp.TopicID, err = parseTopicID(idFlag); err != nil {
					return &usageError{err: fmt.Errorf("--topic-id: %w", err), cmd: cmd.CommandPath()}
				}
			}
			cb, err := b.openChecked(cmd.Context(), a, textOut(asJSON, stdout, cmd.ErrOrStderr()))
			if err != nil {
				return fmt.Errorf("tier ls: %w", err)
			}
			st := cb.st
			fail := func(err error) error { return fmt.Errorf("tier ls %s %d: %w", topic, p, err) }
			// The broker knows whether the partition exists, which the
			// bucket cannot tell from "nothing uploaded yet".
			var (
				known     kadm.TopicDetail
				brokerErr error
			)
			if cb.unreachable != nil {
				brokerErr = cb.unreachable
			} else {
				known, brokerErr = brokerTopic(cmd.Context(), a, topic)
			}
			if brokerErr == nil {
				if _, ok := known.Partitions[tp.Partition]; !ok && (idFlag == "" || tp.TopicID == known.ID) {
					return fail(fmt.Errorf("topic %s has no partition %d (it has %s)", topic, p, plural(len(known.Partitions), "partition")))
				}
			}
			if idFlag == "" {
				if brokerErr == nil {
					tp.TopicID = known.ID
				} else if tp.TopicID, err = bucketTopicID(cmd.Context(), st, tp, brokerErr); err != nil {
					return fail(err)
				}
			}
			m, ok, err := tier.ReadManifest(cmd.Context(), st, tp)
			if err != nil {
				return fail(err)
			}
			if !ok {
				return fail(fmt.Errorf("no manifest in the bucket under %s (nothing uploaded yet?)", tp.ManifestsPrefix()))
			}
			key := m.Key()
			segs, err := tier.AllSegments(cmd.Context(), tier.NewPageSource(st, 0), m)
			if err != nil {
				return fail(fmt.Errorf("manifest %s: %w", key, err))
			}
			out := listedManifest{
				Topic: topic, Partition: tp.Partition, TopicID: topicID(tp.TopicID), TopicIDHex: topicIDHex(tp.TopicID), Manifest: key,
				LeaderEpoch: m.LeaderEpoch, Seq: m.Seq, LogStartOffset: m.LogStartOffset, EndOffset: m.EndOffset(),
				Segments: make([]listedSegment, 0, len(segs)),
			}
			var total int64
			for _, s := range segs {
				out.Segments = append(out.Segments, listedSegment{
					BaseOffset: s.BaseOffset, LastOffset: s.LastOffset, Records: s.RecordCount,
					FirstTimestamp: s.FirstTimestamp, MaxTimestamp: s.MaxTimestamp, Size: s.Size,
					LeaderEpoch: s.LeaderEpoch, CRC32C: fmt.Sprintf("%08x", s.CRC), Key: s.Key,
				})
				total += s.Size
			}
			if asJSON {
				return writeJSON(stdout, out)
			}
			fmt.Fprintf(stdout, "%s-%d (topic id %s), manifest %s\n", topic, p, out.TopicID, key)
			fmt.Fprintf(stdout, "remote log start %d, end %d, %s, %s\n\n", m.LogStartOffset, m.EndOffset(),
				plural(len(segs), "segment"), humanBytes(total))
			tw := newTable(stdout)
			fmt.Fprintln(tw, "BASE\tLAST\tRECORDS\tFIRST-TIMESTAMP\tMAX-TIMESTAMP\tSIZE\tEPOCH\tKEY")
			for _, s := range out.Segments {
				fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%d\t%d\t%s\n", s.BaseOffset, s.LastOffset, optCount(s.Records),
					timestamp(s.FirstTimestamp), timestamp(s.MaxTimestamp), s.Size, s.LeaderEpoch, s.Key)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().StringVar(&idFlag, "topic-id", "", "the topic's id, to read a bucket without a broker")
	return cmd
}

// parseTopicID accepts a topic id as Kafka's tools print it (22 characters
// of unpadded base64url) or as the bucket keys spell it (32 hex digits).
func parseTopicID(s string) ([16]byte, error) {
	var id [16]byte
	if b, err := hex.DecodeString(s); err == nil && len(b) == 16 {
		copy(id[:], b)
		return id, nil
	}
	if b, err := base64.RawURLEncoding.DecodeString(s); err == nil && len(b) == 16 {
		copy(id[:], b)
		return id, nil
	}
	return id, fmt.Errorf("%q is neither 32 hex digits nor a 22-character base64 topic id", s)
}

// brokerTopic asks the broker about topic.
func brokerTopic(ctx context.Context, a *admin, topic string) (kadm.TopicDetail, error) {
	var td kadm.TopicDetail
	err := a.do(ctx, func(ctx context.Context, adm *kadm.Client) error {
		tds, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		var ok bool
		switch td, ok = tds[topic]; {
		case !ok:
			return kerr.UnknownTopicOrPartition
		case td.Err != nil:
			return kafkaError(td.Err, "")
		}
		return nil
	})
	return td, err
}

// bucketTopicID looks for tp's topic id in the bucket when the broker
// could not say (brokerErr): the bucket can only decide when it holds one
// topic of that name (a topic deleted and re-created has two ids).
func bucketTopicID(ctx context.Context, st objstore.Store, tp format.TopicPartition, brokerErr error) ([16]byte, error) {
	var id [16]byte
	// Every key of the partition lies under <h>/<topic>-<id>/<partition>/,
	// and <h> depends only on the topic name and the partition.
	found := make(map[[16]byte]bool)
	err := st.List(ctx, tp.HashPrefix()+"/", func(a objstore.Attrs) error {
		if k, err := format.ParseManifestKey(a.Key); err == nil && k.Topic == tp.Topic && k.Partition == tp.Partition {
			found[k.TopicID] = true
		}
		return nil
	})
	if err != nil {
		return id, fmt.Errorf("topic id: broker: %v; bucket: %w", brokerErr, err)
	}
	switch len(found) {
	case 1:
		for k := range found {
			id = k
		}
		return id, nil
	case 0:
		return id, fmt.Errorf("topic id: broker: %v; and the bucket holds no manifest of %s-%d", brokerErr, tp.Topic, tp.Partition)
	}
	ids := make([]string, 0, len(found))
	for k := range found {
		ids = append(ids, topicID(k))
	}
	sort.Strings(ids)
	return id, fmt.Errorf("topic id: broker: %v; and the bucket holds %s-%d under several topic ids (%s): choose one with --topic-id",
		brokerErr, tp.Topic, tp.Partition, strings.Join(ids, ", "))
}

func newTierVerifyCmd(a *admin, b *bucket, stdout io.Writer) *cobra.Command {
	var parallel int
	cmd := &cobra.Command{
		Use:   "verify [TOPIC...]",
		Short: "Download every object the manifests reference and check it against its checksums",
		Long: `Read the current manifest of every partition in the bucket (or of the named
topics' partitions), download every segment object it references and check
the object's size and CRC-32C, each part's CRC-32C and the footer against
the manifest. It needs only the bucket, no broker. Prints one line per
failure and a summary; exits with status 1 if anything failed or there
was nothing to check (no manifest: an empty bucket, or the wrong bucket or
prefix). A whole bucket can take long to read: --timeout bounds the run
only when given.`,
		Args: args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, topics []string) error {
			if parallel < 1 {
				return &usageError{err: fmt.Errorf("--parallel %d: must be at least 1", parallel), cmd: cmd.CommandPath()}
			}
			ctx := cmd.Context()
			if cmd.Flags().Changed("timeout") {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, a.timeout)
				defer cancel()
			}
			cb, err := b.openChecked(ctx, a, stdout)
			if err == nil {
				err = verifyBucket(ctx, cb.st, topics, parallel, stdout)
			}
			if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("tier verify: not done within --timeout %s", a.timeout)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "tier verify") {
				err = fmt.Errorf("tier verify: %w", err)
			}
			return err
		},
	}
	cmd.Flags().IntVar(&parallel, "parallel", 4, "objects downloaded at once")
	return cmd
}

// listManifests lists the whole bucket, which finds every partition with
// no broker's help (the keys name the partition): the newest manifest of
// each partition of the topics (all if none), and the segment objects.
func listManifests(ctx context.Context, st objstore.Store, topics []string) (map[format.TopicPartition]string, map[string]bool, error) {
	want := make(map[string]bool, len(topics))
	for _, t := range topics {
		want[t] = true
	}
	newest := make(map[format.TopicPartition]string)
	objects := make(map[string]bool)
	err := st.List(ctx, "", func(a objstore.Attrs) error {
		if k, err := format.ParseManifestKey(a.Key); err == nil && (len(want) == 0 || want[k.Topic]) {
			newest[k.TopicPartition] = a.Key // List is in key order
		} else if k, err := format.ParseSegmentKey(a.Key); err == nil && (len(want) == 0 || want[k.Topic]) {
			objects[a.Key] = true
		} else if k, err := format.ParsePageKey(a.Key); err == nil && (len(want) == 0 || want[k.Topic]) {
			objects[a.Key] = true
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list the bucket: %w", err)
	}
	return newest, objects, nil
}

// missingTopics fails if the bucket holds no manifest of a named topic or,
// when none is named, no manifest at all: a wrong bucket or prefix looks
// exactly like an empty bucket, and must not pass for a clean one.
func missingTopics(newest map[format.TopicPartition]string, topics []string) error {
	if len(newest) == 0 && len(topics) == 0 {
		return errors.New("the bucket holds no manifest: nothing uploaded yet, or not the bucket or prefix the brokers use")
	}
	for _, t := range topics {
		found := false
		for tp := range newest {
			found = found || tp.Topic == t
		}
		if !found {
			return fmt.Errorf("the bucket holds no manifest of topic %s", t)
		}
	}
	return nil
}

func sortedPartitions(newest map[format.TopicPartition]string) []format.TopicPartition {
	tps := make([]format.TopicPartition, 0, len(newest))
	for tp := range newest {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		if tps[i].Partition != tps[j].Partition {
			return tps[i].Partition < tps[j].Partition
		}
		return bytes.Compare(tps[i].TopicID[:], tps[j].TopicID[:]) < 0
	})
	return tps
}

// verifyBucket is `tier verify`. Segment objects no current manifest
// references are orphans, normal after a crash between upload and
// manifest, deleted by the collector after the grace period.
func verifyBucket(ctx context.Context, st objstore.Store, topics []string, parallel int, w io.Writer) error {
	newest, objects, err := listManifests(ctx, st, topics)
	if err != nil {
		return fmt.Errorf("tier verify: %w", err)
	}
	if err := missingTopics(newest, topics); err != nil {
		return fmt.Errorf("tier verify: %w", err)
	}
	tps := sortedPartitions(newest)

	var (
		segs         []format.RemoteSegment
		pages        int
		failed       int
		checkedBytes int64
	)
	fail := func(key string, err error) {
		failed++
		// format's errors name the segment themselves; say it once.
		msg := strings.TrimPrefix(oneLine(err.Error()), "segment "+key+": ")
		fmt.Fprintf(w, "FAIL %s: %s\n", key, msg)
	}
	for _, tp := range tps {
		key := newest[tp]
		m, err := tier.GetManifest(ctx, st, key)
		if err == nil && m.TopicPartition != tp {
			err = fmt.Errorf("%w: describes %s-%d", format.ErrCorrupt, m.Topic, m.Partition)
		}
		if err != nil {
			fail(key, err)
			continue
		}
		// Every page is fetched and checked against its summary on the
		// way (size, CRC-32C, contents); the first bad one fails the
		// partition's manifest.
		var msegs []format.RemoteSegment
		err = m.Walk(ctx, tier.NewPageSource(st, 0), func(ref *format.PageRef, s *format.RemoteSegment) error {
			if ref != nil {
				delete(objects, ref.Key)
				pages++
			} else {
				msegs = append(msegs, *s)
			}
			return nil
		})
		if err != nil {
			fail(key, err)
			continue
		}
		segs = append(segs, msegs...)
	}
	results := verifyObjects(ctx, st, segs, parallel)
	for i, s := range segs {
		checkedBytes += s.Size
		delete(objects, s.Key)
		if err := results[i]; err != nil {
			fail(s.Key, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier verify: %w", err)
	}
	summary := fmt.Sprintf("checked %s (%s) in %s", plural(len(segs), "segment"), humanBytes(checkedBytes), plural(len(tps), "partition"))
	if pages > 0 {
		summary += fmt.Sprintf(" and %s", plural(pages, "manifest page"))
	}
	if len(objects) > 0 {
		summary += fmt.Sprintf("; %s no manifest references (orphans, deleted after the grace period)", plural(len(objects), "object"))
	}
	if failed > 0 {
		fmt.Fprintf(w, "%s: %d FAILED\n", summary, failed)
		return fmt.Errorf("tier verify: %s (see the FAIL lines)", plural(failed, "failure"))
	}
	if len(segs) == 0 {
		fmt.Fprintf(w, "%s: nothing to check\n", summary)
		return fmt.Errorf("tier verify: the manifests of %s list no segment", plural(len(tps), "partition"))
	}
	fmt.Fprintf(w, "%s: all good\n", summary)
	return nil
}

// verifyObjects downloads and checks segs, at most parallel at a time,
// and returns each one's result at its index.
func verifyObjects(ctx context.Context, st objstore.Store, segs []format.RemoteSegment, parallel int) []error {
	results := make([]error, len(segs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(parallel, len(segs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = verifyObject(ctx, st, segs[i])
			}
		}()
	}
	for i := range segs {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

func verifyObject(ctx context.Context, st objstore.Store, s format.RemoteSegment) error {
	rc, err := st.GetRange(ctx, s.Key, 0, -1)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return errors.New("object missing from the bucket")
		}
		return err
	}
	defer rc.Close()
	return s.VerifyObject(rc)
}

// optCount prints a count the format may not know (-1).
func optCount(n int64) string {
	if n < 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func optOffset(o *int64) string {
	if o == nil {
		return "-"
	}
	return strconv.FormatInt(*o, 10)
}

// timestamp prints Unix milliseconds as UTC; negative means none (Kafka's
// -1 for a batch without timestamps).
func timestamp(ms int64) string {
	if ms < 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// humanBytes prints a size with a binary unit and one decimal.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
