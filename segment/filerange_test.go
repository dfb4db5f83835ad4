package segment

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// rangeHistory appends n batches of every kind a log holds, with gaps
// between and inside batches as compaction leaves them: plain and
// compressed data, transactional data, commit and abort markers, and
// batches whose records skip offsets. It returns the log's bytes.
func rangeHistory(t *testing.T, l *Log, rng *rand.Rand, n int) []byte {
	t.Helper()
	var hist []byte
	next := l.EndOffset()
	for i := range n {
		var b []byte
		switch rng.IntN(6) {
		case 0, 1: // data, sometimes compressed
			b = encodeBatch(t, batchSpec{codec: max(0, rng.IntN(10)-5), values: values(1+rng.IntN(10), rng.IntN(400), byte(i)), firstTs: int64(1000 + i)})
		case 2: // transactional data
			b = encodeBatch(t, batchSpec{attrs: attrTransactional, idem: true, pid: int64(100 + i%3), seq: int32(i), values: values(1+rng.IntN(4), rng.IntN(200), byte(i)), firstTs: int64(1000 + i)})
		case 3: // a marker, commit or abort
			b = encodeMarkerBatch(int64(100+i%3), 0, TxnMarker{Commit: rng.IntN(2) == 0, CoordinatorEpoch: 1}, int64(1000+i))
		default: // compacted: records that skip offsets
			last := int32(7)
			b = encodeBatch(t, batchSpec{values: values(3, 50, byte(i)), offDeltas: []int64{0, 2, 5}, lastDelta: &last, firstTs: int64(1000 + i)})
		}
		next += int64(rng.IntN(3)) // a gap compaction left between batches
		b = stamped(b, next, 1)
		if _, err := l.AppendReplica(b); err != nil {
			t.Fatalf("append batch %d at %d: %v", i, next, err)
		}
		next = decodeHeader(b).LastOffset() + 1
		hist = append(hist, b...)
	}
	return hist
}

// sendOver sends r with SendTo over a loopback TCP connection and returns
// what the other end received, and SendTo's error.
func sendOver(t *testing.T, r *FileRange) ([]byte, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n, serr := r.SendTo(rc)
	c.Close()
	b := <-got
	if serr == nil && n != int64(len(b)) {
		t.Errorf("SendTo reported %d bytes, the peer got %d", n, len(b))
	}
	return b, serr
}

// spanOf is what a fetch needs of the batches in b: the offset after the
// last one and whether any is a transactional data batch.
func spanOf(b []byte) (next int64, transactional bool) {
	for len(b) > 0 {
		h := decodeHeader(b)
		next = h.LastOffset() + 1
		transactional = transactional || (h.IsTransactional() && !h.IsControl())
		b = b[h.Size():]
	}
	return next, transactional
}

// A FileRange is the batches Read returns for the same arguments, byte
// for byte, whether read back (AppendTo) or sent with sendfile (SendTo),
// over every kind of batch and every starting offset.
func TestReadRangeMatchesRead(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, smallCfg(clock))
	rng := rand.New(rand.NewPCG(7, 7))
	hist := rangeHistory(t, l, rng, 150)
	if got := readAll(t, l, 1<<20); !bytes.Equal(got, hist) {
		t.Fatal("the log does not read back as appended")
	}
	t.Run("written by this process", func(t *testing.T) { rangesMatchReads(t, l, rng) })
	// Reopened, nothing is checked yet: each range is read and checked
	// once on the way.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	t.Run("reopened", func(t *testing.T) { rangesMatchReads(t, l, rng) })
}

func rangesMatchReads(t *testing.T, l *Log, rng *rand.Rand) {
	end := l.EndOffset()
	sends := 0
	for off := int64(0); off <= end; off++ {
		maxOffset := off + 1 + rng.Int64N(end-off+1)
		maxBytes := rng.IntN(8 << 10)
		want, werr := l.Read(nil, off, maxOffset, maxBytes)
		r, rerr := l.ReadRange(off, maxOffset, maxBytes)
		if (werr == nil) != (rerr == nil) {
			t.Fatalf("offset %d: Read error %v, ReadRange error %v", off, werr, rerr)
		}
		got, err := r.AppendTo(nil)
		if err != nil {
			t.Fatalf("offset %d: AppendTo: %v", off, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("offset %d (to %d, %d bytes): the range holds %d bytes, Read returned %d", off, maxOffset, maxBytes, len(got), len(want))
		}
		if next, txn := spanOf(want); len(want) > 0 && (r.Next != next || r.Transactional != txn) {
			t.Errorf("offset %d: range says next %d transactional %v, the batches say %d %v", off, r.Next, r.Transactional, next, txn)
		}
		if ZeroCopy && (off%7 == 0 || r.Len() > 4<<10) {
			sent, err := sendOver(t, &r)
			if err != nil {
				t.Fatalf("offset %d: SendTo: %v", off, err)
			}
			if !bytes.Equal(sent, want) {
				t.Fatalf("offset %d: sendfile sent %d bytes unlike Read's %d", off, len(sent), len(want))
			}
			sends++
		}
		r.Release()
	}
	t.Logf("%d offsets compared, %d of them sent with sendfile", end+1, sends)
}

// A range keeps its bytes when its segment is deleted (retention, here
// DeleteRecords) or rolled past while it is held: the file stays open
// until Release.
func TestFileRangeOutlivesItsSegment(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), smallCfg(clock))
	defer l.Close()
	rng := rand.New(rand.NewPCG(8, 8))
	rangeHistory(t, l, rng, 60)
	want, err := l.Read(nil, 0, l.EndOffset(), 4<<10)
	if err != nil || len(want) == 0 {
		t.Fatalf("Read: %d bytes, %v", len(want), err)
	}
	r, err := l.ReadRange(0, l.EndOffset(), 4<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	rangeHistory(t, l, rng, 60) // rolls more segments
	if _, err := l.DeleteRecordsBefore(l.EndOffset()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(nil, 0, l.EndOffset(), 4<<10); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("offset 0 after DeleteRecords: %v, want out of range", err)
	}
	got, err := r.AppendTo(nil)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the range after its segment was deleted: %d bytes (%v), want the %d it had", len(got), err, len(want))
	}
	if ZeroCopy {
		sent, err := sendOver(t, &r)
		if err != nil || !bytes.Equal(sent, want) {
			t.Fatalf("sendfile after the segment was deleted: %d bytes (%v), want the %d it had", len(sent), err, len(want))
		}
	}
}

// A truncation while a send is in flight (the peer not reading, the
// socket full) goes ahead without waiting for the send. A range below the
// cut is sent whole, byte for byte, though other bytes are appended after
// the cut meanwhile; a range above the cut stops with ErrRangeCut, and
// every byte the peer got below the cut is the range's.
func TestFileRangeCutUnderSend(t *testing.T) {
	if !ZeroCopy {
		t.Skip("no sendfile on this platform")
	}
	// In batches of 20 records, about 20 KiB each: where the range
	// starts, where it ends (0 for the log end), and where the log is cut.
	for _, c := range []struct {
		name               string
		from, to, cutAfter int
	}{
		{"range below the cut", 0, 300, 350},
		{"range across the cut", 0, 0, 5},
		// The cut past a 2 MiB boundary: the folios below it stay.
		{"range across a cut past 2 MiB", 140, 0, 150},
	} {
		t.Run(c.name, func(t *testing.T) { cutUnderSend(t, int64(c.from*20), int64(c.to*20), int64(c.cutAfter*20)) })
	}
}

func cutUnderSend(t *testing.T, from, sendTo, cutAt int64) {
	clock := newClock()
	cfg := Config{SegmentBytes: 64 << 20, IndexIntervalBytes: 4096, Now: clock.Now}
	l := mustOpen(t, t.TempDir(), cfg)
	defer l.Close()
	var hist []byte
	for i := range 400 { // about 8 MiB in one segment
		b := stamped(encodeBatch(t, batchSpec{values: values(20, 1000, byte(i)), firstTs: int64(i)}), l.EndOffset(), 1)
		if _, err := l.AppendReplica(b); err != nil {
			t.Fatal(err)
		}
		hist = append(hist, b...)
	}
	batchBytes := len(hist) / 400
	if sendTo == 0 {
		sendTo = l.EndOffset()
	}
	below := cutAt >= sendTo
	first := int(from/20) * batchBytes
	want := hist[first : int(sendTo/20)*batchBytes]
	cutPos := int(cutAt/20)*batchBytes - first // in want
	r, err := l.ReadRange(from, sendTo, len(hist))
	if err != nil || r.Len() != len(want) {
		t.Fatalf("ReadRange: %d bytes (%v), want %d", r.Len(), err, len(want))
	}
	defer r.Release()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-accepted
	defer peer.Close()
	c.(*net.TCPConn).SetWriteBuffer(64 << 10)
	peer.(*net.TCPConn).SetReadBuffer(64 << 10)
	rc, _ := c.(*net.TCPConn).SyscallConn()
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := r.SendTo(rc)
		c.Close()
		done <- result{n, err}
	}()
	// Read a little, so the send is under way, then stop reading: the
	// send waits on a full socket.
	head := make([]byte, 32<<10)
	if _, err := io.ReadFull(peer, head); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)

	start := time.Now()
	if _, err := l.TruncateTo(cutAt); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the truncation waited %v for the send", took)
	}
	// Other bytes where the old ones were.
	for i := range 200 {
		b := stamped(encodeBatch(t, batchSpec{values: values(20, 1000, byte(i+77)), firstTs: int64(i)}), l.EndOffset(), 2)
		if _, err := l.AppendReplica(b); err != nil {
			t.Fatal(err)
		}
	}
	rest, _ := io.ReadAll(peer)
	got := append(head, rest...)
	res := <-done
	if below {
		if res.err != nil || !bytes.Equal(got, want) {
			t.Fatalf("the send ended with %v after the peer got %d bytes, want all %d of the range's, unchanged", res.err, len(got), len(want))
		}
		return
	}
	if !errors.Is(res.err, ErrRangeCut) {
		t.Errorf("the send ended with %v after %d bytes, want ErrRangeCut", res.err, res.n)
	}
	if len(got) >= len(want) {
		t.Errorf("the peer got all %d bytes of a range cut at %d", len(got), cutPos)
	}
	// Every byte the peer got is the range's, those the socket had queued
	// beyond the cut too: the truncation dropped their pages whole
	// (cutFile) and the appends after it went to new ones.
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("the peer's byte %d of %d is not the range's (cut at %d): a truncation changed bytes a send had queued", i, len(got), cutPos)
	}
	if len(got) <= cutPos {
		t.Logf("the socket had queued no bytes beyond the cut: the test did not look at them")
	}
	t.Logf("the peer got %d of %d bytes, %d beyond the cut at %d, before the cut stopped the send", len(got), len(want), max(len(got)-cutPos, 0), cutPos)
}

// A byte flipped on disk in a batch no one checked in this process: a
// range over it is cut back before that batch, and a range starting at
// it is ErrCorruptSegment, exactly as Read answers.
func TestReadRangeChecksCRCOnce(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{SegmentBytes: 1 << 20, IndexIntervalBytes: 512, Now: clock.Now})
	var starts []int64
	var size int64
	for i := range 20 {
		b := stamped(encodeBatch(t, batchSpec{values: values(5, 100, byte(i)), firstTs: int64(i)}), l.EndOffset(), 1)
		if _, err := l.AppendReplica(b); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, size)
		size += int64(len(b))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := offsetName(dir, 0, logSuffix)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[starts[10]+70] ^= 0x20 // a value byte of batch 10, offsets 50..54
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Config{SegmentBytes: 1 << 20, IndexIntervalBytes: 512, Now: clock.Now})
	defer l.Close()
	for _, off := range []int64{0, 20, 50, 52, 55} {
		want, werr := l.Read(nil, off, l.EndOffset(), 1<<20)
		r, rerr := l.ReadRange(off, l.EndOffset(), 1<<20)
		got, _ := r.AppendTo(nil)
		r.Release()
		if errors.Is(werr, ErrCorruptSegment) != errors.Is(rerr, ErrCorruptSegment) || !bytes.Equal(got, want) {
			t.Errorf("offset %d: ReadRange gave %d bytes (%v), Read %d bytes (%v)", off, len(got), rerr, len(want), werr)
		}
		if (off == 50 || off == 52) && !errors.Is(rerr, ErrCorruptSegment) {
			t.Errorf("offset %d, in the damaged batch: %v, want ErrCorruptSegment", off, rerr)
		}
		if off < 50 && int64(len(got)) != starts[10]-starts[off/5] {
			t.Errorf("offset %d: %d bytes, want the %d before the damaged batch", off, len(got), starts[10]-starts[off/5])
		}
	}
	// What passed is not read again: the checked spans cover it.
	s := l.mu.segs[0]
	if !s.verified.covers(0, starts[10]) || s.verified.covers(starts[10], starts[11]) {
		t.Errorf("checked spans %v: want [0, %d) and not the damaged batch", s.verified.iv, starts[10])
	}
}

func TestSpans(t *testing.T) {
	var v spans
	for _, s := range [][2]int64{{10, 20}, {30, 40}, {20, 25}, {50, 60}, {24, 31}, {0, 5}, {58, 70}} {
		v.add(s[0], s[1])
	}
	if want := [][2]int64{{0, 5}, {10, 40}, {50, 70}}; !slices.Equal(v.iv, want) {
		t.Fatalf("spans %v, want %v", v.iv, want)
	}
	cases := []struct {
		a, b int64
		want bool
	}{{0, 5, true}, {10, 40, true}, {12, 39, true}, {0, 6, false}, {4, 11, false}, {50, 70, true}, {45, 55, false}, {69, 71, false}, {70, 80, false}}
	for _, c := range cases {
		if got := v.covers(c.a, c.b); got != c.want {
			t.Errorf("covers(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	v.trim(55)
	if want := [][2]int64{{0, 5}, {10, 40}, {50, 55}}; !slices.Equal(v.iv, want) {
		t.Fatalf("after trim(55): %v, want %v", v.iv, want)
	}
}

// firstDiff is the index of the first byte of got that is not want's at
// the same place, or -1 when got is a prefix of want.
func firstDiff(got, want []byte) int {
	for i := range got {
		if i >= len(want) || got[i] != want[i] {
			return i
		}
	}
	return -1
}
