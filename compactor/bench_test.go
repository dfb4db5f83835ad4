//go:build unix

package compactor

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"strata/tier"
	"strata/tier/objstore"
)

// BenchmarkCompaction measures issue 13's figures: how fast one full
// compaction (every pass until nothing is dirty) gets through a history,
// locally and in the bucket, over the same generated history (the same
// bytes, the same keys), and how much heap it takes against the key map's
// budget, compactor.memory_bytes.
//
// The history's size, key count and the rest come from the environment,
// so that `go test -bench` stays quick while the recorded run uses 1 GiB
// over a million keys (docs/benchmarks.md, "Compaction"):
//
//	STRATA_BENCH_COMPACT_BYTES    log bytes of the history (64 MiB)
//	STRATA_BENCH_COMPACT_KEYS     distinct keys (100,000)
//	STRATA_BENCH_COMPACT_UPDATES  records per key on average (4)
//	STRATA_BENCH_COMPACT_MEMORY   compactor.memory_bytes, for both (64 MiB)
//	STRATA_BENCH_COMPACT_SEGMENT  segment.bytes, input and output (16 MiB)
//
// Values are sized so the bytes come out right: 1 GiB over 1M keys with 4
// updates each is 4M records of about 256 bytes (1 KiB of history per
// key). Keys are drawn at random, so the survivors are spread over every
// segment, denser towards the end, as in a changelog.
//
// Metrics: MB/s of history (input bytes over the pass's wall time, 1e6
// bytes a MB), peak-heap-B (the most heap in use above the baseline taken
// before the pass, sampled every 10 ms: live data and garbage not yet
// collected), peak-live-B (the most live heap above the baseline, as the
// collector measured it at each cycle), budget-B, passes, user-s and
// sys-s (the process's CPU time during the passes), and for cold the GETs
// and PUTs of the passes.
func BenchmarkCompaction(b *testing.B) {
	cfg := benchConfig{
		bytes:   benchEnv(b, "STRATA_BENCH_COMPACT_BYTES", 64<<20),
		keys:    int(benchEnv(b, "STRATA_BENCH_COMPACT_KEYS", 100_000)),
		updates: int(benchEnv(b, "STRATA_BENCH_COMPACT_UPDATES", 4)),
		memory:  benchEnv(b, "STRATA_BENCH_COMPACT_MEMORY", DefaultMemoryBytes),
		segment: benchEnv(b, "STRATA_BENCH_COMPACT_SEGMENT", 16<<20),
	}
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	// The generated history lives in the parent's temporary directory,
	// removed when the benchmark ends.
	hist := writeBenchHistory(b, b.TempDir(), cfg, clk)
	b.Logf("history: %d bytes in %d segments, %d records, %d distinct keys, %d-byte values",
		hist.bytes, hist.segments, hist.records, hist.distinct, hist.valueSize)

	b.Run("local", func(b *testing.B) {
		var passes int
		var mem passUsage
		for range b.N {
			b.StopTimer()
			dir := b.TempDir()
			copyDir(b, hist.dir, dir)
			l := openLog(b, dir, cfg.segment, clk.now)
			p := localPartition(l, Policy{SegmentBytes: cfg.segment})
			c := newTestCompactor(b, &fakeHost{}, clk, Config{MemoryBytes: cfg.memory})
			mem = mem.add(measurePass(func() {
				b.StartTimer()
				m := newKeyMap(cfg.memory)
				for {
					pl, segs, err := localPlan(&p, clk.now())
					if err != nil {
						b.Fatal(err)
					}
					if pl.firstDirty >= pl.cleanEnd {
						break
					}
					st, err := c.compactLocal(context.Background(), m, &p, pl, segs)
					if err != nil {
						b.Fatal(err)
					}
					logPass(b, "local", st)
					passes++
				}
				b.StopTimer()
				runtime.KeepAlive(m)
			}))
			hist.check(b, readLog(b, l), l.ActiveBase())
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			os.RemoveAll(dir)
		}
		report(b, hist.bytes, cfg.memory, passes, mem)
	})

	b.Run("cold", func(b *testing.B) {
		ctx := context.Background()
		var passes int
		var gets, puts int64
		var mem passUsage
		for range b.N {
			b.StopTimer()
			tr := uploadBenchHistory(b, hist, clk)
			host := &fakeHost{cold: []ColdPartition{{TP: testTP, Policy: Policy{SegmentBytes: cfg.segment}}}}
			c, err := New(Config{MemoryBytes: cfg.memory, SpoolDir: b.TempDir(), Now: clk.now}, host, tr, nil)
			if err != nil {
				b.Fatal(err)
			}
			p := &host.cold[0]
			mem = mem.add(measurePass(func() {
				b.StartTimer()
				m := newKeyMap(cfg.memory)
				for {
					pl, segs, err := c.coldPlan(ctx, p, clk.now())
					if err != nil {
						b.Fatal(err)
					}
					if pl.firstDirty >= pl.cleanEnd {
						break
					}
					st, err := c.compactCold(ctx, m, p, pl, segs)
					if err != nil {
						b.Fatal(err)
					}
					logPass(b, "cold", st)
					passes++
					gets += st.Gets
					puts += st.Puts
				}
				b.StopTimer()
				runtime.KeepAlive(m)
			}))
			root, err := tr.Manifest(ctx, testTP)
			if err != nil {
				b.Fatal(err)
			}
			recs := readBatches(b, root.LogStartOffset, root.EndOffset(), func(off int64) ([]byte, error) {
				return tr.Read(ctx, testTP, nil, off, 1<<20)
			})
			hist.check(b, recs, root.EndOffset())
			if err := tr.Close(); err != nil {
				b.Fatal(err)
			}
		}
		report(b, hist.bytes, cfg.memory, passes, mem)
		b.ReportMetric(float64(gets)/float64(b.N), "GETs")
		b.ReportMetric(float64(puts)/float64(b.N), "PUTs")
	})
}

type benchConfig struct {
	bytes           int64
	keys, updates   int
	memory, segment int64
}

// benchEnv reads one of the benchmark's settings, a byte count or a count,
// from the environment.
func benchEnv(b *testing.B, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// benchHistory is a generated history in closed segments of a local log,
// and what compaction must leave of it.
type benchHistory struct {
	dir                         string // the log's parent, as openLog takes it
	bytes                       int64
	segments, records, distinct int
	valueSize                   int
	// latest is each key's last offset, -1 for a key never written.
	latest []int64
}

// writeBenchHistory writes up to cfg.bytes of keyed records, cfg.updates
// per key on average over cfg.keys keys drawn at random, in batches of
// about 16 KiB, and closes the log with every record in a closed segment.
func writeBenchHistory(b *testing.B, dir string, cfg benchConfig, clk *clock) *benchHistory {
	b.Helper()
	const keyFormat = "key-%08d"
	// A record costs its value plus about 25 bytes: the key, the varint
	// framing and its share of the batch header.
	valueSize := max(int(cfg.bytes/int64(cfg.keys*cfg.updates))-25, 8)
	perBatch := max(16<<10/(valueSize+25), 1)
	rng := rand.New(rand.NewPCG(13, 13))
	pool := make([]byte, 1<<20+valueSize)
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	h := &benchHistory{dir: dir, valueSize: valueSize, latest: make([]int64, cfg.keys)}
	for i := range h.latest {
		h.latest[i] = -1
	}
	l := openLog(b, dir, cfg.segment, clk.now)
	ts := clk.now().UnixMilli()
	recs := make([]rec, perBatch)
	keys := make([]int, perBatch)
	for {
		for i := range recs {
			keys[i] = rng.IntN(cfg.keys)
			v := rng.IntN(1 << 20)
			recs[i] = rec{key: fmt.Appendf(recs[i].key[:0], keyFormat, keys[i]), value: pool[v : v+valueSize]}
		}
		// Never past the size asked for: 1 GiB of history is exactly what
		// the default spool bound lets one cold pass take.
		batch := keyedBatch(ts, recs...)
		if l.Size()+int64(len(batch)) > cfg.bytes {
			break
		}
		info, err := l.Append(batch, 0)
		if err != nil {
			b.Fatal(err)
		}
		for i, k := range keys {
			if h.latest[k] < 0 {
				h.distinct++
			}
			h.latest[k] = info.BaseOffset + int64(i)
		}
		h.records += len(recs)
	}
	if _, err := l.RollIfOlder(0); err != nil {
		b.Fatal(err)
	}
	segs, err := l.ClosedSegments(0)
	if err != nil {
		b.Fatal(err)
	}
	h.segments = len(segs)
	for _, s := range segs {
		h.bytes += s.Size
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	return h
}

// check asserts what a consumer reading the compacted history from the
// start would: below end, every key written appears exactly once, at the
// offset of its last update.
func (h *benchHistory) check(b *testing.B, recs []readRecord, end int64) {
	b.Helper()
	seen := 0
	for _, r := range recs {
		if r.offset >= end {
			continue
		}
		var k int
		if _, err := fmt.Sscanf(r.key, "key-%d", &k); err != nil || k >= len(h.latest) {
			b.Fatalf("record at %d has key %q", r.offset, r.key)
		}
		if h.latest[k] != r.offset {
			b.Fatalf("key %s at offset %d, its last update is at %d", r.key, r.offset, h.latest[k])
		}
		seen++
	}
	if seen != h.distinct {
		b.Fatalf("%d records after compaction, want one for each of %d keys", seen, h.distinct)
	}
}

// uploadBenchHistory uploads the history's segments to a new directory
// store and returns a tier over it.
func uploadBenchHistory(b *testing.B, h *benchHistory, clk *clock) *tier.Tier {
	b.Helper()
	store, err := objstore.NewDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: b.TempDir(), Now: clk.now})
	if err != nil {
		b.Fatal(err)
	}
	l := openLog(b, h.dir, 1<<30, clk.now)
	defer l.Close()
	segs, err := l.ClosedSegments(0)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range segs {
		if _, err := tr.Upload(context.Background(), testTP, s, 0); err != nil {
			b.Fatal(err)
		}
	}
	return tr
}

// copyDir copies the files of the log directory under src into dst.
func copyDir(b *testing.B, src, dst string) {
	b.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		b.Fatal(err)
	}
}

// passUsage is what measurePass found.
type passUsage struct {
	peakInUse, peakLive uint64 // above the baseline
	// user and sys are the CPU time the process spent meanwhile: on a
	// machine whose cores are shared, the pass's cost, which wall time
	// alone does not show.
	user, sys time.Duration
}

var heapSamples = []string{
	"/memory/classes/heap/objects:bytes", // in use: live and not yet swept
	"/memory/classes/heap/unused:bytes",  // in use: free room in spans
	"/gc/heap/live:bytes",                // live at the last cycle
}

// measurePass runs fn while sampling the heap every 10 ms, and returns
// the most it held above what it held before, after a collection, and
// the CPU time spent meanwhile.
func measurePass(fn func()) passUsage {
	s := make([]rtmetrics.Sample, len(heapSamples))
	for i, name := range heapSamples {
		s[i].Name = name
	}
	read := func() (inUse, live uint64) {
		rtmetrics.Read(s)
		return s[0].Value.Uint64() + s[1].Value.Uint64(), s[2].Value.Uint64()
	}
	// The setup wrote gigabytes; their writeback would otherwise land in
	// the pass's time.
	syscall.Sync()
	runtime.GC()
	runtime.GC() // the second publishes the first's live heap
	baseInUse, baseLive := read()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	var peakInUse, peakLive uint64
	sample := func() {
		inUse, live := read()
		peakInUse, peakLive = max(peakInUse, inUse), max(peakLive, live)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Deferred, so that the sampler also stops when fn ends the
	// benchmark (b.Fatal).
	stopSampler := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopSampler()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	fn()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	stopSampler()
	sample()
	above := func(peak, base uint64) uint64 {
		if peak < base {
			return 0
		}
		return peak - base
	}
	return passUsage{peakInUse: above(peakInUse, baseInUse), peakLive: above(peakLive, baseLive),
		user: time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano()), sys: time.Duration(ru1.Stime.Nano() - ru0.Stime.Nano())}
}

func logPass(b *testing.B, tier string, st Stats) {
	b.Logf("%s pass: cleaned to %d, read %d bytes, wrote %d, mapped %d keys, kept %d of %d, %d GETs, %d PUTs",
		tier, st.CleanedTo, st.BytesRead, st.BytesWritten, st.KeysMapped, st.KeysKept, st.KeysSeen, st.Gets, st.Puts)
}

// add combines two measurements: the peaks' maximum, the CPU times' sum.
func (u passUsage) add(v passUsage) passUsage {
	return passUsage{peakInUse: max(u.peakInUse, v.peakInUse), peakLive: max(u.peakLive, v.peakLive),
		user: u.user + v.user, sys: u.sys + v.sys}
}

// report records the figures of b.N full compactions: throughput and CPU
// time over the timed passes only, peaks over all of them.
func report(b *testing.B, inputBytes, budget int64, passes int, mem passUsage) {
	b.ReportMetric(float64(b.N)*float64(inputBytes)/1e6/b.Elapsed().Seconds(), "MB/s")
	b.ReportMetric(float64(mem.peakInUse), "peak-heap-B")
	b.ReportMetric(float64(mem.peakLive), "peak-live-B")
	b.ReportMetric(float64(budget), "budget-B")
	b.ReportMetric(float64(passes)/float64(b.N), "passes")
	b.ReportMetric(mem.user.Seconds()/float64(b.N), "user-s")
	b.ReportMetric(mem.sys.Seconds()/float64(b.N), "sys-s")
}
