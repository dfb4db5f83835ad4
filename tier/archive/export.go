package archive

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier/format"
)

// An export writes, per partition, one data file and a small state file
// beside it in the export directory:
//
//	<topic>-<partition>.jsonl    one JSONRecord per line (AppendJSON)
//	<topic>-<partition>.batches  with Raw: the stored record batches, concatenated
//	<topic>-<partition>.state    where the export stands (exportState, JSON)
//
// The data file is written in chunks; after each chunk it is fsynced,
// and only then the state is replaced (written aside, fsynced, renamed
// over) with the chunk's end: the data file's length and the next offset.
// A re-run reads the state, cuts the data file back to that length (so a
// line or batch written after the last state, possibly partial, is
// dropped) and goes on from that offset. Each record is thus in the file
// once, whatever the interruptions; and a re-run after the bucket has
// grown appends what is new.

// exportChunkBytes is how much is written between two fsyncs and states.
var exportChunkBytes int64 = 8 << 20

// ExportOptions are an export's.
type ExportOptions struct {
	// Dir is the directory the files go to (created if missing).
	Dir string
	// Raw writes the stored batches instead of JSON lines.
	Raw bool
	// Isolation applies to JSON lines (raw batches are copied whole).
	Isolation Isolation
	Fetch     Fetch
	// Progress, if set, is called after each chunk with the partition's
	// progress so far (from the goroutine that called Export).
	Progress func(ExportProgress)
}

// ExportProgress is how far a partition's export has got.
type ExportProgress struct {
	Partition int32
	// Next is the next offset to export and End the partition's end.
	Next, End int64
	// Records and Bytes are what this run wrote.
	Records, Bytes int64
}

// exportState is the state file.
type exportState struct {
	Version   int    `json:"version"`
	Topic     string `json:"topic"`
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
	Raw       bool   `json:"raw"`
	Isolation string `json:"isolation"`
	// Next is the next offset to export; Bytes the data file's length
	// up to it; Records the records (JSON lines) in it.
	Next    int64 `json:"next_offset"`
	Bytes   int64 `json:"bytes"`
	Records int64 `json:"records"`
}

// ExportFiles returns the data and state file names of p's export.
func ExportFiles(dir string, tp format.TopicPartition, raw bool) (data, state string) {
	base := filepath.Join(dir, tp.Topic+"-"+strconv.Itoa(int(tp.Partition)))
	if raw {
		return base + ".batches", base + ".state"
	}
	return base + ".jsonl", base + ".state"
}

// ExportResult is what one Export call did.
type ExportResult struct {
	// Resumed is the offset a previous run had reached, -1 for a fresh
	// export.
	Resumed int64
	// Next is the next offset to export; Records and Bytes what this run
	// wrote; TotalRecords the records in the file (JSON lines only).
	Next                         int64
	Records, Bytes, TotalRecords int64
}

// Export exports p to o.Dir, resuming where a previous export of it
// stopped.
func (a *Archive) Export(ctx context.Context, p Partition, o ExportOptions) (ExportResult, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return ExportResult{}, fmt.Errorf("export directory: %w", err)
	}
	dataPath, statePath := ExportFiles(o.Dir, p.TopicPartition, o.Raw)
	st := exportState{Version: 1, Topic: p.Topic, TopicID: format.HexID(p.TopicID), Partition: p.Partition,
		Raw: o.Raw, Isolation: o.Isolation.String(), Next: p.LogStart}
	if o.Raw {
		st.Isolation = ""
	}
	res := ExportResult{Resumed: -1}
	old, err := readState(statePath)
	switch {
	case err == nil:
		if old.TopicID != st.TopicID || old.Raw != st.Raw || old.Isolation != st.Isolation || old.Partition != st.Partition {
			return res, fmt.Errorf("%s is the state of another export (topic id %s, raw %v, %s): export to another directory",
				statePath, old.TopicID, old.Raw, old.Isolation)
		}
		st = old
		res.Resumed = st.Next
	case errors.Is(err, fs.ErrNotExist):
		if fi, err := os.Stat(dataPath); err == nil && fi.Size() > 0 {
			return res, fmt.Errorf("%s exists without %s, so it is not an export this command can resume: remove it or export to another directory", dataPath, filepath.Base(statePath))
		}
	default:
		return res, err
	}
	if st.Next < p.LogStart {
		return res, fmt.Errorf("%s stops at offset %d, but the bucket now starts at %d (retention deleted the rest): export to a new directory", statePath, st.Next, p.LogStart)
	}
	// The state first, so that the data file never exists without one.
	if res.Resumed < 0 {
		if err := writeState(statePath, st); err != nil {
			return res, err
		}
	}
	f, err := os.OpenFile(dataPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return res, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return res, err
	}
	if fi.Size() < st.Bytes {
		return res, fmt.Errorf("%s holds %d bytes, fewer than the %d its state records: the export is damaged; remove both files to start again", dataPath, fi.Size(), st.Bytes)
	}
	// Drop whatever was written after the last state: it may end in a
	// partial line or batch, and the re-run writes it again.
	if err := f.Truncate(st.Bytes); err != nil {
		return res, err
	}
	if _, err := f.Seek(st.Bytes, io.SeekStart); err != nil {
		return res, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var (
		pending int64 // bytes written since the last state
		next    = st.Next
		records int64
	)
	checkpoint := func() error {
		if err := w.Flush(); err != nil {
			return fmt.Errorf("write %s: %w", dataPath, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", dataPath, err)
		}
		st.Bytes += pending
		st.Records += records
		st.Next = next
		res.Bytes += pending
		res.Records += records
		pending, records = 0, 0
		if err := writeState(statePath, st); err != nil {
			return err
		}
		if o.Progress != nil {
			o.Progress(ExportProgress{Partition: p.Partition, Next: st.Next, End: p.End, Records: res.Records, Bytes: res.Bytes})
		}
		return nil
	}
	ro := ReadOptions{Range: Range{From: st.Next}, Isolation: o.Isolation, Fetch: o.Fetch}
	if o.Raw {
		err = a.Batches(ctx, p, ro, func(b Batch) error {
			n, err := w.Write(b.Bytes)
			pending += int64(n)
			if err != nil {
				return fmt.Errorf("write %s: %w", dataPath, err)
			}
			next = b.Last + 1
			if pending >= exportChunkBytes {
				return checkpoint()
			}
			return nil
		})
	} else {
		var line []byte
		err = a.recordRuns(ctx, p, ro, func(r *kgo.Record) error {
			line = AppendJSON(line[:0], r)
			n, err := w.Write(line)
			pending += int64(n)
			if err != nil {
				return fmt.Errorf("write %s: %w", dataPath, err)
			}
			records++
			return nil
		}, func(runEnd int64) error {
			// Between runs every record below runEnd is written: a
			// point to resume from.
			next = runEnd
			if pending >= exportChunkBytes {
				return checkpoint()
			}
			return nil
		})
	}
	if err != nil {
		return res, err
	}
	if err := checkpoint(); err != nil {
		return res, err
	}
	res.Next, res.TotalRecords = st.Next, st.Records
	return res, f.Close()
}

// recordRuns is Records, with after called once each run's records are
// handed on, with the offset the read has reached (the run's last offset
// + 1, or the read's end): a point a resumed read can start from without
// repeating or missing a record.
func (a *Archive) recordRuns(ctx context.Context, p Partition, o ReadOptions, fn func(*kgo.Record) error, after func(next int64) error) error {
	o.after = after
	return a.Records(ctx, p, o, fn)
}

func readState(path string) (exportState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return exportState{}, err
	}
	var st exportState
	if err := json.Unmarshal(b, &st); err != nil {
		return exportState{}, fmt.Errorf("%s: %w", path, err)
	}
	if st.Version != 1 {
		return exportState{}, fmt.Errorf("%s: unknown version %d", path, st.Version)
	}
	return st, nil
}

// writeState replaces the state file: written aside, fsynced, renamed
// over, so a crash leaves the old state or the new one, never a mix.
func writeState(path string, st exportState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
