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
// the calling goroutine checks and cuts them into batches and, for JSON,
// decodes and encodes the records into a buffer; a writer goroutine
// writes the buffers (or, raw, the fetched chunks themselves, never
// copied) to the file in order and does the fsyncs, while the next ones
// are being made.

var (
	// exportChunkBytes is how much is written at most between two fsyncs
	// and states, and exportSyncInterval how long at most.
	exportChunkBytes   int64 = 64 << 20
	exportSyncInterval       = time.Second
)

const (
	// exportPieceBytes is how much JSON is encoded before it is handed to
	// the writer (at the end of a run of batches, so a little more).
	exportPieceBytes = 1 << 20
	// exportQueue is how many pieces may wait for the writer: what the
	// encoding may run ahead of the disk during an fsync.
	exportQueue = 8
)

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
	// progress so far: from the export's writer goroutine, one call at
	// a time.
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
	w := &exportWriter{f: f, dataPath: dataPath, statePath: statePath, st: st, next: st.Next,
		p: p, progress: o.Progress, res: &res, lastSync: time.Now()}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	in := make(chan exportPiece, exportQueue)
	free := make(chan []byte, exportQueue+2)
	werr := make(chan error, 1)
	go func() {
		// The writer owns w until it has sent on werr.
		var err error
		for pc := range in {
			if err == nil {
				if err = w.write(pc); err != nil {
					cancel(err)
				}
			}
			if pc.pooled {
				select {
				case free <- pc.data[:0]:
				default:
				}
			}
		}
		werr <- err
	}()
	send := func(pc exportPiece) error {
		select {
		case in <- pc:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	ro := ReadOptions{Range: Range{From: st.Next}, Isolation: o.Isolation, Fetch: o.Fetch}
	if o.Raw {
		// Batches, but a run's bytes are the fetched chunk's own, which
		// nothing overwrites (see run): the writer writes them as they
		// are, uncopied.
		err = a.walk(ctx, p, max(ro.From, p.LogStart), ro.end(p), ro.Fetch, func(r run) error {
			return send(exportPiece{data: r.bytes, markAt: len(r.bytes), next: r.last + 1})
		})
	} else {
		pieceBytes := min(exportPieceBytes, int(exportChunkBytes))
		buffer := func() []byte {
			select {
			case b := <-free:
				return b
			default:
				return make([]byte, 0, pieceBytes+64<<10)
			}
		}
		// A piece is handed on once full, between two records, wherever
		// the runs end: it carries the last run end in it, if any.
		pc := exportPiece{data: buffer(), pooled: true, markAt: -1}
		err = a.recordRuns(ctx, p, ro, func(r *kgo.Record) error {
			pc.data = AppendJSON(pc.data, r)
			pc.records++
			if len(pc.data) < pieceBytes {
				return nil
			}
			full := pc
			pc = exportPiece{data: buffer(), pooled: true, markAt: -1}
			return send(full)
		}, func(runEnd int64) error {
			// Between runs every record below runEnd is encoded: a
			// point to resume from.
			pc.markAt, pc.markRecords, pc.next = len(pc.data), pc.records, runEnd
			return nil
		})
		if err == nil && (len(pc.data) > 0 || pc.markAt >= 0) {
			err = send(pc)
		}
	}
	close(in)
	if werr := <-werr; werr != nil {
		return res, werr
	}
	if err != nil {
		return res, err
	}
	// The writer has stopped: w is this goroutine's again.
	if err := w.checkpoint(); err != nil {
		return res, err
	}
	res.Next, res.TotalRecords = w.st.Next, w.st.Records
	return res, f.Close()
}

// exportPiece is what the writer writes next: data, holding records
// JSON lines. If markAt >= 0, the file is, markAt bytes into data (after
// markRecords of the records), where a resumed export can go on from
// offset next: a point the state may record.
type exportPiece struct {
	data        []byte
	pooled      bool // a JSON buffer, to reuse once written
	records     int64
	markAt      int
	markRecords int64
	next        int64
}

// exportWriter writes an export's data file and its state.
type exportWriter struct {
	f                   *os.File
	dataPath, statePath string
	st                  exportState // as fsynced
	p                   Partition
	progress            func(ExportProgress)
	res                 *ExportResult
	// Written since the last state: bytes and records; and of them, those
	// up to the last resume point, and its offset.
	written, records int64
	markBytes        int64
	markRecords      int64
	next             int64
	lastSync         time.Time
}

func (w *exportWriter) write(pc exportPiece) error {
	n, err := w.f.Write(pc.data)
	if err != nil {
		return fmt.Errorf("write %s: %w", w.dataPath, err)
	}
	if pc.markAt < 0 {
		w.written += int64(n)
		w.records += pc.records
		return nil
	}
	w.markBytes, w.markRecords, w.next = w.written+int64(pc.markAt), w.records+pc.markRecords, pc.next
	w.written += int64(n)
	w.records += pc.records
	if w.markBytes >= exportChunkBytes || time.Since(w.lastSync) >= exportSyncInterval {
		return w.checkpoint()
	}
	return nil
}

// checkpoint fsyncs the data file and then records in the state what the
// fsync covers, up to the last resume point. (Bytes after it, if any,
// stay out of the state: a re-run cuts them off and writes them again.)
func (w *exportWriter) checkpoint() error {
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", w.dataPath, err)
	}
	w.lastSync = time.Now()
	w.st.Bytes += w.markBytes
	w.st.Records += w.markRecords
	w.st.Next = w.next
	w.res.Bytes += w.markBytes
	w.res.Records += w.markRecords
	w.written -= w.markBytes
	w.records -= w.markRecords
	w.markBytes, w.markRecords = 0, 0
	if err := writeState(w.statePath, w.st); err != nil {
		return err
	}
	if w.progress != nil {
		w.progress(ExportProgress{Partition: w.p.Partition, Next: w.st.Next, End: w.p.End, Records: w.res.Records, Bytes: w.res.Bytes})
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
	return os.Rename(tmp, path)
}
