package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

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
// The data file is fsynced every exportChunkBytes or exportSyncInterval,
// whichever comes first, and only then the state is replaced (written
// aside, fsynced, renamed over) with what the fsync covers: the data
// file's length and the next offset. A re-run reads the state, cuts the
// data file back to that length (so a line or batch written after the
// last state, possibly partial, is dropped) and goes on from that offset.
// Each record is thus in the file once, whatever the interruptions; and a
// re-run after the bucket has grown appends what is new.
//
// An export is a pipeline, so that the store, the CPU and the disk work
// at once: the segments' chunks are fetched ahead, in parallel (walk);
// the calling goroutine checks and cuts them into batches and writes
// them, or, for JSON, decodes the records and writes their lines, while
// the bytes are still in the CPU's cache; a syncer goroutine does the
// fsyncs and writes the states meanwhile.

var (
	// exportChunkBytes is how much is written at most between two fsyncs
	// and states, and exportSyncInterval how long at most.
	exportChunkBytes   int64 = 16 << 20
	exportSyncInterval       = time.Second
)

// exportBufferBytes is how much JSON is encoded before it is written.
var exportBufferBytes = 256 << 10

// ExportOptions are an export's.
type ExportOptions struct {
	// Dir is the directory the files go to (created if missing).
	Dir string
	// Raw writes the stored batches instead of JSON lines.
	Raw bool
	// Isolation applies to JSON lines (raw batches are copied whole).
	Isolation Isolation
	Fetch     Fetch
	// Progress, if set, is called after each fsync with the partition's
	// progress so far: from a goroutine of the export's, one call at a
	// time.
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
	// The new file's name must last as long as the states that count its
	// bytes: a crash must not keep a state and lose the file it describes.
	if err := syncDir(filepath.Dir(dataPath)); err != nil {
		return res, err
	}
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
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := exportMark{bytes: st.Bytes, records: st.Records, next: st.Next}
	w := &exportWriter{f: f, dataPath: dataPath, pos: st.Bytes, last: start, reqPos: st.Bytes, reqTime: time.Now(),
		syncs: make(chan exportMark)}
	sy := &exportSyncer{f: f, dataPath: dataPath, statePath: statePath, st: st, start: start, p: p, progress: o.Progress, res: &res}
	synced := make(chan error, 1)
	go func() {
		// The syncer owns sy until it has sent on synced.
		var err error
		for m := range w.syncs {
			if err == nil {
				if err = sy.sync(m); err != nil {
					cancel(err)
				}
			}
		}
		synced <- err
	}()
	ro := ReadOptions{Range: Range{From: st.Next}, Isolation: o.Isolation, Fetch: o.Fetch}
	if o.Raw {
		err = a.Batches(ctx, p, ro, func(b Batch) error {
			if err := w.write(b.Bytes); err != nil {
				return err
			}
			w.mark(exportMark{bytes: w.pos, next: b.Last + 1})
			return nil
		})
	} else {
		// Lines are encoded into buf and written when it is full, while
		// it is still in the CPU's cache.
		buf := make([]byte, 0, exportBufferBytes+64<<10)
		records, runEnd := st.Records, start
		err = a.recordRuns(ctx, p, ro, func(r *kgo.Record) error {
			buf = AppendJSON(buf, r)
			records++
			if len(buf) < exportBufferBytes {
				return nil
			}
			err := w.write(buf)
			buf = buf[:0]
			return err
		}, func(next int64) error {
			// Between runs every record below next is encoded: a point
			// to resume from, once written.
			runEnd = exportMark{bytes: w.pos + int64(len(buf)), records: records, next: next}
			if !w.due(runEnd) {
				return nil
			}
			if err := w.write(buf); err != nil {
				return err
			}
			buf = buf[:0]
			w.mark(runEnd)
			return nil
		})
		if err == nil {
			err = w.write(buf)
			w.last = runEnd
		}
	}
	close(w.syncs)
	if serr := <-synced; serr != nil {
		return res, serr
	}
	if err != nil {
		return res, err
	}
	// The syncer has stopped: sy is this goroutine's again, for the last
	// resume point.
	if err := sy.sync(w.last); err != nil {
		return res, err
	}
	res.Next, res.TotalRecords = sy.st.Next, sy.st.Records
	return res, f.Close()
}

// exportMark is a point to resume an export from: the data file's
// length and lines up to it, and the next offset to export.
type exportMark struct {
	bytes, records, next int64
}

// exportWriter writes an export's data file, from the goroutine reading
// the bucket, and asks the syncer for fsyncs and states.
type exportWriter struct {
	f        *os.File
	dataPath string
	pos      int64      // the file's length
	last     exportMark // the last resume point written
	// syncs is the syncer's; unbuffered, so a request finds it idle or
	// is dropped for a later one.
	syncs   chan exportMark
	reqPos  int64 // where the last request stood, and when
	reqTime time.Time
}

func (w *exportWriter) write(b []byte) error {
	n, err := w.f.Write(b)
	w.pos += int64(n)
	if err != nil {
		return fmt.Errorf("write %s: %w", w.dataPath, err)
	}
	return nil
}

// due reports whether a sync is due at m.
func (w *exportWriter) due(m exportMark) bool {
	return m.bytes-w.reqPos >= exportChunkBytes || time.Since(w.reqTime) >= exportSyncInterval
}

// mark records m, written, as the last resume point, and asks the syncer
// to record it if a sync is due and the syncer is idle, or waits for it
// if the last request lies two chunks back: what a crash can cost stays
// bounded.
func (w *exportWriter) mark(m exportMark) {
	w.last = m
	if !w.due(m) {
		return
	}
	if m.bytes-w.reqPos >= 2*exportChunkBytes {
		w.syncs <- m // the syncer receives until the channel closes
	} else {
		select {
		case w.syncs <- m:
		default:
			return
		}
	}
	w.reqPos, w.reqTime = m.bytes, time.Now()
}

// exportSyncer makes resume points durable: it fsyncs the data file,
// then records the point in the state. It runs beside the writer, so
// that the disk works while the next bytes are read and encoded; the
// state only ever names bytes written before the fsync began.
type exportSyncer struct {
	f                   *os.File
	dataPath, statePath string
	st                  exportState // as last written
	start               exportMark  // where this run began
	p                   Partition
	progress            func(ExportProgress)
	res                 *ExportResult
}

func (s *exportSyncer) sync(m exportMark) error {
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", s.dataPath, err)
	}
	s.st.Bytes, s.st.Records, s.st.Next = m.bytes, m.records, m.next
	s.res.Bytes, s.res.Records = m.bytes-s.start.bytes, m.records-s.start.records
	if err := writeState(s.statePath, s.st); err != nil {
		return err
	}
	if s.progress != nil {
		s.progress(ExportProgress{Partition: s.p.Partition, Next: s.st.Next, End: s.p.End, Records: s.res.Records, Bytes: s.res.Bytes})
	}
	return nil
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
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// syncDir fsyncs a directory, so that the names created or renamed in it
// survive a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
