package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/cmd/internal/config"
	"strata/tier"
	"strata/tier/archive"
	"strata/tier/format"
)

// The bucket verbs read a bucket with no broker at all (package
// tier/archive): the metadata checkpoint and the manifests say what it
// holds, the segment objects hold the records. Nothing is ever written
// to the bucket; read-only credentials are enough.

func newBucketCmd(environ []string, stdout, stderr io.Writer) *cobra.Command {
	b := &bucket{environ: environ}
	cmd := &cobra.Command{
		Use:   "bucket",
		Short: "Read a bucket's topics and records without a broker",
		Long: `Read the bucket a cluster tiers to, with no broker running: list its topics
(ls), print their records (cat), or copy them to files (export). The bucket
is found like a node finds it: --bucket-dir (or --data-dir, whose bucket is
<data-dir>/bucket) for the directory store, or --s3-bucket and the other
--s3-* flags, STRATA_S3_* variables or a config file (--config) for S3.
Read-only credentials are enough: nothing is written to the bucket.`,
	}
	b.flags = config.AddFlagsFor(cmd.PersistentFlags(), true, "node.data_dir", "tier.bucket_dir", "s3")
	cmd.AddCommand(
		newBucketLsCmd(b, stdout),
		newBucketCatCmd(b, stdout),
		newBucketExportCmd(b, stdout, stderr),
	)
	asGroup(cmd)
	return cmd
}

// openArchive opens the bucket read-only and says where it is, and whose.
func (b *bucket) openArchive(ctx context.Context) (*archive.Archive, string, error) {
	st, where, err := b.open(ctx)
	if err != nil {
		return nil, "", err
	}
	if !strings.HasPrefix(where, "s3://") {
		where = "dir " + where
	}
	a := archive.Open(st)
	mark, marked, err := tier.BucketCluster(ctx, st)
	if err != nil {
		return nil, "", fmt.Errorf("bucket %s: %w", where, err)
	}
	if marked {
		where += " (cluster " + mark.ClusterID + ")"
	} else {
		where += " (no cluster id)"
	}
	return a, where, nil
}

// topicFlags are the flags that pick a topic's partitions.
type topicFlags struct {
	partition int32
	topicID   string
}

func (f *topicFlags) add(cmd *cobra.Command) {
	cmd.Flags().Int32VarP(&f.partition, "partition", "p", -1, "only this partition (default: every partition)")
	cmd.Flags().StringVar(&f.topicID, "topic-id", "", "the topic's id (32 hex digits or Kafka's base64), when the bucket holds several topics of that name")
}

// partitions finds topic and the partitions the flags pick.
func (f *topicFlags) partitions(ctx context.Context, cmd *cobra.Command, a *archive.Archive, topic string) ([]archive.Partition, error) {
	id := ""
	if f.topicID != "" {
		raw, err := parseTopicID(f.topicID)
		if err != nil {
			return nil, &usageError{err: fmt.Errorf("--topic-id: %w", err), cmd: cmd.CommandPath()}
		}
		id = format.HexID(raw)
	}
	t, err := a.FindTopic(ctx, topic, id)
	if err != nil {
		return nil, err
	}
	if f.partition >= 0 {
		found := false
		for _, p := range t.Partitions {
			found = found || p == f.partition
		}
		if !found {
			return nil, fmt.Errorf("topic %s has no partition %d in the bucket (it has %s)", topic, f.partition, plural(len(t.Partitions), "partition"))
		}
		t.Partitions = []int32{f.partition}
	}
	return topicPartitions(ctx, a, t)
}

// topicPartitions reads what the bucket holds of t's partitions.
func topicPartitions(ctx context.Context, a *archive.Archive, t archive.Topic) ([]archive.Partition, error) {
	var out []archive.Partition
	for _, p := range t.Partitions {
		tp := format.TopicPartition{Topic: t.Name, TopicID: t.ID, Partition: p}
		info, ok, err := a.Partition(ctx, tp)
		if err != nil {
			return nil, err
		}
		if !ok {
			info = archive.Partition{TopicPartition: tp, FirstTimestamp: -1, MaxTimestamp: -1}
		}
		out = append(out, info)
	}
	return out, nil
}

// lsRow is one row of `bucket ls`, and its JSON.
type lsRow struct {
	Topic          string `json:"topic"`
	TopicID        string `json:"topic_id"`
	Partition      int32  `json:"partition"`
	Manifest       string `json:"manifest,omitempty"`
	LogStart       int64  `json:"log_start"`
	End            int64  `json:"end"`
	FirstTimestamp int64  `json:"first_timestamp"`
	MaxTimestamp   int64  `json:"max_timestamp"`
	Bytes          int64  `json:"bytes"`
	Segments       int64  `json:"segments"`
	LastUpload     string `json:"last_upload,omitempty"`
}

func newBucketLsCmd(b *bucket, stdout io.Writer) *cobra.Command {
	var (
		asJSON, internal bool
		tf               topicFlags
	)
	cmd := &cobra.Command{
		Use:   "ls [TOPIC]",
		Short: "List the bucket's topics and partitions: offsets, times, bytes, last upload",
		Long: `List what the bucket holds, per partition: the offsets [first..last], the
time range (the first segment's first timestamp to the largest record
timestamp), the bytes of its segment objects and when the newest one was
uploaded, from the partition's newest manifest. Topics come from the newest
metadata checkpoint, or, in a bucket written before checkpoints existed,
from a listing of the bucket. Internal topics show with --internal.`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ctx := cmd.Context()
			a, where, err := b.openArchive(ctx)
			if err != nil {
				return fmt.Errorf("bucket ls: %w", err)
			}
			var parts []archive.Partition
			source := ""
			if len(argv) == 1 {
				if parts, err = tf.partitions(ctx, cmd, a, argv[0]); err != nil {
					return fmt.Errorf("bucket ls: %w", err)
				}
			} else {
				topics, src, err := a.Topics(ctx)
				if err != nil {
					return fmt.Errorf("bucket ls: %w", err)
				}
				source = "; topics from " + src.String()
				for _, t := range topics {
					if t.Internal && !internal {
						continue
					}
					ps, err := topicPartitions(ctx, a, t)
					if err != nil {
						return fmt.Errorf("bucket ls: %w", err)
					}
					parts = append(parts, ps...)
				}
			}
			rows := make([]lsRow, len(parts))
			for i, p := range parts {
				rows[i] = lsRow{Topic: p.Topic, TopicID: format.HexID(p.TopicID), Partition: p.Partition, Manifest: p.Manifest,
					LogStart: p.LogStart, End: p.End, FirstTimestamp: p.FirstTimestamp, MaxTimestamp: p.MaxTimestamp,
					Bytes: p.Bytes, Segments: p.Segments}
				if !p.LastUpload.IsZero() {
					rows[i].LastUpload = p.LastUpload.UTC().Format(time.RFC3339)
				}
			}
			if asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "bucket: %s%s\n", where, source)
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			fmt.Fprintf(stdout, "bucket: %s%s\n", where, source)
			tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSETS\tTIME RANGE\tBYTES\tLAST UPLOAD")
			for _, r := range rows {
				offsets, times, last := "-", "-", "-"
				if r.Manifest == "" {
					offsets = "(nothing uploaded)"
				} else if r.End > r.LogStart {
					offsets = fmt.Sprintf("%d..%d", r.LogStart, r.End-1)
				} else {
					offsets = fmt.Sprintf("(empty, next %d)", r.End)
				}
				if r.MaxTimestamp >= 0 {
					times = timestamp(r.FirstTimestamp) + ".." + timestamp(r.MaxTimestamp)
				}
				if r.LastUpload != "" {
					last = r.LastUpload
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", r.Topic, r.Partition, offsets, times, humanBytes(r.Bytes), last)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().BoolVar(&internal, "internal", false, "list internal topics too (__consumer_offsets, __transaction_state)")
	cmd.Flags().StringVar(&tf.topicID, "topic-id", "", "with TOPIC: the topic's id, when the bucket holds several topics of that name")
	tf.partition = -1
	return cmd
}

// parseTime accepts RFC 3339 or Unix milliseconds.
func parseTime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither RFC 3339 (2025-01-31T12:00:00Z) nor Unix milliseconds", s)
	}
	return t.UnixMilli(), nil
}

// readFlags are cat's and export's.
type readFlags struct {
	isolation string
	parallel  int
}

func (f *readFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.isolation, "isolation", "read_committed", "read_committed (aborted transactions dropped) or read_uncommitted")
	cmd.Flags().IntVar(&f.parallel, "parallel", archive.DefaultParallel, "segment chunks fetched at once")
}

func (f *readFlags) options(cmd *cobra.Command) (archive.ReadOptions, error) {
	iso, err := archive.ParseIsolation(f.isolation)
	if err != nil {
		return archive.ReadOptions{}, &usageError{err: fmt.Errorf("--isolation: %w", err), cmd: cmd.CommandPath()}
	}
	if f.parallel < 1 {
		return archive.ReadOptions{}, &usageError{err: fmt.Errorf("--parallel %d: must be at least 1", f.parallel), cmd: cmd.CommandPath()}
	}
	return archive.ReadOptions{Isolation: iso, Fetch: archive.Fetch{Parallel: f.parallel}}, nil
}

func newBucketCatCmd(b *bucket, stdout io.Writer) *cobra.Command {
	var (
		tf                       topicFlags
		rf                       readFlags
		offset, toOffset         int64
		fromTime, toTime, layout string
	)
	cmd := &cobra.Command{
		Use:   "cat TOPIC",
		Short: "Print a topic's records from the bucket, as kcat prints them",
		Long: `Print the records of a topic from the bucket, partition after partition
(or only -p's), each in offset order: decompressed, CRC-checked, and
read_committed by default (the records of aborted transactions dropped, using
the bucket's transaction index; --isolation read_uncommitted keeps them).

--offset N starts at offset N, --from-time T at the first record stamped at or
after T; --to-offset N stops before offset N, --to-time T before the first
record stamped at or after T. Times are RFC 3339 or Unix milliseconds.

--format takes kcat's format strings (kcat -f), so that it prints what kcat
prints from a broker:
  %t topic   %p partition   %o offset   %T timestamp (Unix ms)
  %k key     %K key size (-1: null)     %s value   %S value size (-1: null)
  %h headers as name=value,name=value (a null value prints NULL)   %% a %
  escapes \n \t \r \\ and \xHH
The default is kcat's, '%s\n'. --format json prints one JSON object per line:
{"topic","partition","offset","timestamp","key","value","headers":[{"key","value"}]},
keys and values as strings when they are UTF-8, else base64 with
"key_encoding"/"value_encoding" (or a header's "value_encoding") set to
"base64"; null keys and values are null.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ctx := cmd.Context()
			usage := func(err error) error { return &usageError{err: err, cmd: cmd.CommandPath()} }
			ro, err := rf.options(cmd)
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			if fl.Changed("offset") && fl.Changed("from-time") {
				return usage(errors.New("--offset and --from-time both say where to start: give one"))
			}
			if fl.Changed("to-offset") && fl.Changed("to-time") {
				return usage(errors.New("--to-offset and --to-time both say where to stop: give one"))
			}
			if offset < 0 || toOffset < 0 {
				return usage(errors.New("offsets are at least 0"))
			}
			ro.From, ro.To = offset, toOffset
			if fl.Changed("to-offset") && toOffset == 0 {
				return nil // nothing before offset 0
			}
			if fromTime != "" {
				if ro.FromTime, err = parseTime(fromTime); err != nil {
					return usage(fmt.Errorf("--from-time: %w", err))
				}
				ro.HasFromTime = true
			}
			if toTime != "" {
				if ro.ToTime, err = parseTime(toTime); err != nil {
					return usage(fmt.Errorf("--to-time: %w", err))
				}
				ro.HasToTime = true
			}
			var render func([]byte, *kgo.Record) []byte
			if layout == "json" {
				render = archive.AppendJSON
			} else {
				f, err := archive.ParseFormat(layout)
				if err != nil {
					return usage(fmt.Errorf("--format: %w", err))
				}
				render = f.Append
			}
			a, _, err := b.openArchive(ctx)
			if err != nil {
				return fmt.Errorf("bucket cat: %w", err)
			}
			parts, err := tf.partitions(ctx, cmd, a, argv[0])
			if err != nil {
				return fmt.Errorf("bucket cat: %w", err)
			}
			w := bufio.NewWriterSize(stdout, 1<<20)
			var line []byte
			for _, p := range parts {
				if p.Manifest == "" {
					continue
				}
				err := a.Records(ctx, p, ro, func(r *kgo.Record) error {
					line = render(line[:0], r)
					_, err := w.Write(line)
					return err
				})
				if err != nil {
					w.Flush()
					return fmt.Errorf("bucket cat %s-%d: %w", p.Topic, p.Partition, err)
				}
			}
			return w.Flush()
		},
	}
	tf.add(cmd)
	rf.add(cmd)
	cmd.Flags().Int64Var(&offset, "offset", 0, "start at this offset (default: the bucket's first)")
	cmd.Flags().StringVar(&fromTime, "from-time", "", "start at the first record stamped at or after this time (RFC 3339 or Unix ms)")
	cmd.Flags().Int64Var(&toOffset, "to-offset", 0, "stop before this offset (default: the bucket's end)")
	cmd.Flags().StringVar(&toTime, "to-time", "", "stop before the first record stamped at or after this time (RFC 3339 or Unix ms)")
	cmd.Flags().StringVarP(&layout, "format", "f", archive.DefaultFormat, "kcat format string, or json")
	return cmd
}

func newBucketExportCmd(b *bucket, stdout, stderr io.Writer) *cobra.Command {
	var (
		tf  topicFlags
		rf  readFlags
		to  string
		raw bool
	)
	cmd := &cobra.Command{
		Use:   "export TOPIC --to DIR",
		Short: "Copy a topic's records from the bucket to files, resumably",
		Long: `Copy a topic's records (or -p's partition's) from the bucket to files in DIR,
one per partition: <topic>-<partition>.jsonl with one JSON object per record
(as 'bucket cat --format json' prints them; read_committed unless
--isolation read_uncommitted), or with --raw <topic>-<partition>.batches, the
record batches as stored (Kafka's v2 format, compressed as produced, control
batches and aborted transactions included).

Beside each file, <topic>-<partition>.state records how far the export got;
it is updated after every fsynced chunk. Run the same command again after an
interruption and it goes on where it stopped (anything written after the
last state is dropped first, so no record is written twice or half); run it
later and it appends what the bucket gained. Segments are fetched
--parallel at a time while the file is written in order. A progress line
shows on stderr when it is a terminal.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ctx := cmd.Context()
			if to == "" {
				return &usageError{err: errors.New("--to DIR is required"), cmd: cmd.CommandPath()}
			}
			ro, err := rf.options(cmd)
			if err != nil {
				return err
			}
			a, _, err := b.openArchive(ctx)
			if err != nil {
				return fmt.Errorf("bucket export: %w", err)
			}
			parts, err := tf.partitions(ctx, cmd, a, argv[0])
			if err != nil {
				return fmt.Errorf("bucket export: %w", err)
			}
			prog := newExportProgress(stderr, argv[0], parts)
			for _, p := range parts {
				if p.Manifest == "" {
					fmt.Fprintf(stdout, "%s-%d: nothing uploaded\n", p.Topic, p.Partition)
					continue
				}
				prog.curStart = p.LogStart
				res, err := a.Export(ctx, p, archive.ExportOptions{Dir: to, Raw: raw, Isolation: ro.Isolation, Fetch: ro.Fetch, Progress: prog.update})
				prog.clear()
				if err != nil {
					return fmt.Errorf("bucket export %s-%d: %w", p.Topic, p.Partition, err)
				}
				data, _ := archive.ExportFiles(to, p.TopicPartition, raw)
				how := "exported"
				if res.Resumed >= 0 {
					how = fmt.Sprintf("resumed at offset %d,", res.Resumed)
				}
				what := plural(int(res.Records), "record")
				if raw {
					what = humanBytes(res.Bytes) + " of batches"
				}
				fmt.Fprintf(stdout, "%s-%d: %s %s to %s; next offset %d\n", p.Topic, p.Partition, how, what, data, res.Next)
				prog.finished(p, res.Bytes)
			}
			return nil
		},
	}
	tf.add(cmd)
	rf.add(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the directory to write to (created if missing)")
	cmd.Flags().BoolVar(&raw, "raw", false, "write the stored record batches instead of JSON lines")
	return cmd
}

// exportProgress draws one line on stderr while an export runs, when stderr is
// a terminal: the offsets done over the topic's, the bytes written and
// the rate.
type exportProgress struct {
	w           io.Writer
	on          bool
	topic       string
	total, done int64 // offsets: all partitions', finished partitions'
	bytes       int64 // written by finished partitions
	curStart    int64 // the log start of the partition under way
	start, last time.Time
}

func newExportProgress(w io.Writer, topic string, parts []archive.Partition) *exportProgress {
	f, ok := w.(*os.File)
	p := &exportProgress{w: w, on: ok && isatty.IsTerminal(f.Fd()), topic: topic, start: time.Now()}
	for _, x := range parts {
		p.total += x.End - x.LogStart
	}
	return p
}

func (p *exportProgress) update(e archive.ExportProgress) {
	if !p.on || time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	done := p.done + e.Next - p.curStart
	pct := 100.0
	if p.total > 0 {
		pct = min(100, 100*float64(done)/float64(p.total))
	}
	bytes := p.bytes + e.Bytes
	rate := float64(bytes) / max(time.Since(p.start).Seconds(), 0.001)
	fmt.Fprintf(p.w, "\rexport %s: partition %d, %5.1f%%, %s at %s/s   ", p.topic, e.Partition, pct, humanBytes(bytes), humanBytes(int64(rate)))
}

func (p *exportProgress) clear() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func (p *exportProgress) finished(part archive.Partition, bytes int64) {
	p.done += part.End - part.LogStart
	p.bytes += bytes
}
