package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// The checker judges a produce history against what was read back, the
// way a user of a replicated log judges it (issue 11): every acknowledged
// record is there exactly once, at the offset its acknowledgement named,
// and in the order each producer had it acknowledged; a record whose
// produce failed or never got an answer may be there or not, but never
// twice. It knows nothing of processes or clients, so it is tested on
// hand-made histories.

// sentRecord is one record a producer sent and what became of it.
type sentRecord struct {
	partition int32
	value     string // unique across the whole history
	// acked is true when the producer got an acknowledgement naming
	// offset; otherwise err (possibly nil: no answer yet) says why not.
	acked  bool
	offset int64
	err    error
}

// readRecord is one record read back.
type readRecord struct {
	partition int32
	offset    int64
	value     string
}

// checkResult counts what check found; problems describes each finding.
type checkResult struct {
	sent, acked, read                       int
	lost, duplicated, misplaced, unexpected int
	problems                                []string
}

// ok reports a history with nothing wrong in it.
func (r checkResult) ok() bool {
	return r.lost == 0 && r.duplicated == 0 && r.misplaced == 0 && r.unexpected == 0
}

// String is the summary a test prints, followed by the first problems.
func (r checkResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d, acked %d, read %d: lost %d, duplicated %d, misplaced %d, unexpected %d",
		r.sent, r.acked, r.read, r.lost, r.duplicated, r.misplaced, r.unexpected)
	const show = 20
	for i, p := range r.problems {
		if i == show {
			fmt.Fprintf(&b, "\n  ... and %d more", len(r.problems)-show)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(p)
	}
	return b.String()
}

// check compares the histories of the producers (by producer name, each
// in the order the producer sent) with the records read back.
func check(history map[string][]sentRecord, read []readRecord) checkResult {
	var r checkResult
	r.read = len(read)
	type place struct {
		partition int32
		offset    int64
	}
	where := map[string][]place{}
	for _, rec := range read {
		where[rec.value] = append(where[rec.value], place{rec.partition, rec.offset})
	}
	sent := map[string]bool{}
	producers := make([]string, 0, len(history))
	for p := range history {
		producers = append(producers, p)
	}
	sort.Strings(producers)
	for _, p := range producers {
		// The offset at which this producer's last acknowledged record of
		// each partition was read: acknowledgements in order mean offsets
		// in order.
		last := map[int32]struct {
			value  string
			offset int64
		}{}
		for _, s := range history[p] {
			r.sent++
			sent[s.value] = true
			found := where[s.value]
			if len(found) > 1 {
				r.duplicated++
				r.problems = append(r.problems, fmt.Sprintf("duplicated: %s (%s) read %d times at %v", s.value, outcome(s), len(found), found))
			}
			if !s.acked {
				continue
			}
			r.acked++
			if len(found) == 0 {
				r.lost++
				r.problems = append(r.problems, fmt.Sprintf("lost: %s acknowledged at partition %d offset %d, not read back", s.value, s.partition, s.offset))
				continue
			}
			at := found[0]
			if at.partition != s.partition || at.offset != s.offset {
				r.misplaced++
				r.problems = append(r.problems, fmt.Sprintf("misplaced: %s acknowledged at partition %d offset %d, read at partition %d offset %d",
					s.value, s.partition, s.offset, at.partition, at.offset))
				continue
			}
			if prev, ok := last[s.partition]; ok && at.offset <= prev.offset {
				r.misplaced++
				r.problems = append(r.problems, fmt.Sprintf("misplaced: %s (partition %d offset %d) acknowledged after %s, read before it (offset %d)",
					s.value, s.partition, at.offset, prev.value, prev.offset))
			}
			last[s.partition] = struct {
				value  string
				offset int64
			}{s.value, at.offset}
		}
	}
	// Records nobody sent: reported in read order, once per value.
	for _, rec := range read {
		if !sent[rec.value] {
			sent[rec.value] = true // report once
			r.unexpected++
			r.problems = append(r.problems, fmt.Sprintf("unexpected: %q at partition %d offset %d was never sent", rec.value, rec.partition, rec.offset))
		}
	}
	return r
}

func outcome(s sentRecord) string {
	switch {
	case s.acked:
		return fmt.Sprintf("acknowledged at partition %d offset %d", s.partition, s.offset)
	case s.err != nil:
		return "failed: " + s.err.Error()
	default:
		return "unanswered"
	}
}

func TestCheckHistories(t *testing.T) {
	acked := func(p int32, v string, off int64) sentRecord {
		return sentRecord{partition: p, value: v, acked: true, offset: off}
	}
	failed := func(p int32, v string) sentRecord {
		return sentRecord{partition: p, value: v, err: errors.New("NOT_ENOUGH_REPLICAS")}
	}
	rd := func(p int32, off int64, v string) readRecord { return readRecord{p, off, v} }

	tests := []struct {
		name    string
		history map[string][]sentRecord
		read    []readRecord
		want    checkResult // counts only
		problem string      // in the first problem, if any
	}{
		{
			name: "everything acknowledged is there, failures absent or present once",
			history: map[string][]sentRecord{
				"a": {acked(0, "a-0", 0), acked(1, "a-1", 0), failed(0, "a-2"), acked(0, "a-3", 2)},
				"b": {acked(0, "b-0", 1), failed(1, "b-1"), {partition: 1, value: "b-2"}},
			},
			read: []readRecord{rd(0, 0, "a-0"), rd(0, 1, "b-0"), rd(0, 2, "a-3"), rd(1, 0, "a-1"), rd(1, 1, "b-1")},
			want: checkResult{sent: 7, acked: 4, read: 5},
		},
		{
			name:    "an acknowledged record missing is lost",
			history: map[string][]sentRecord{"a": {acked(0, "a-0", 0), acked(0, "a-1", 1)}},
			read:    []readRecord{rd(0, 0, "a-0")},
			want:    checkResult{sent: 2, acked: 2, read: 1, lost: 1},
			problem: "lost: a-1 acknowledged at partition 0 offset 1",
		},
		{
			name:    "an acknowledged record read twice is duplicated",
			history: map[string][]sentRecord{"a": {acked(0, "a-0", 0)}},
			read:    []readRecord{rd(0, 0, "a-0"), rd(0, 1, "a-0")},
			want:    checkResult{sent: 1, acked: 1, read: 2, duplicated: 1},
			problem: "duplicated: a-0",
		},
		{
			name:    "a failed record read twice is duplicated too",
			history: map[string][]sentRecord{"a": {acked(0, "a-0", 0), failed(0, "a-1")}},
			read:    []readRecord{rd(0, 0, "a-0"), rd(0, 1, "a-1"), rd(0, 2, "a-1")},
			want:    checkResult{sent: 2, acked: 1, read: 3, duplicated: 1},
			problem: "duplicated: a-1 (failed: NOT_ENOUGH_REPLICAS)",
		},
		{
			name:    "an acknowledged record at another offset is misplaced",
			history: map[string][]sentRecord{"a": {acked(0, "a-0", 0), acked(0, "a-1", 1)}},
			read:    []readRecord{rd(0, 0, "a-0"), rd(0, 1, "x"), rd(0, 2, "a-1")},
			want:    checkResult{sent: 2, acked: 2, read: 3, misplaced: 1, unexpected: 1},
			problem: "misplaced: a-1 acknowledged at partition 0 offset 1, read at partition 0 offset 2",
		},
		{
			name:    "an acknowledged record in another partition is misplaced",
			history: map[string][]sentRecord{"a": {acked(0, "a-0", 0)}},
			read:    []readRecord{rd(1, 0, "a-0")},
			want:    checkResult{sent: 1, acked: 1, read: 1, misplaced: 1},
			problem: "read at partition 1 offset 0",
		},
		{
			// The acknowledgements themselves named offsets out of order:
			// each record is where its acknowledgement said, but the log
			// holds them in the reverse of the producer's order.
			name:    "records acknowledged in one order and stored in the other are misplaced",
			history: map[string][]sentRecord{"a": {acked(0, "a-0", 1), acked(0, "a-1", 0)}},
			read:    []readRecord{rd(0, 0, "a-1"), rd(0, 1, "a-0")},
			want:    checkResult{sent: 2, acked: 2, read: 2, misplaced: 1},
			problem: "misplaced: a-1 (partition 0 offset 0) acknowledged after a-0, read before it (offset 1)",
		},
		{
			name:    "a record nobody sent is unexpected",
			history: map[string][]sentRecord{"a": {acked(0, "a-0", 0)}},
			read:    []readRecord{rd(0, 0, "a-0"), rd(0, 1, "ghost"), rd(0, 2, "ghost")},
			want:    checkResult{sent: 1, acked: 1, read: 3, unexpected: 1},
			problem: `unexpected: "ghost" at partition 0 offset 1`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(tt.history, tt.read)
			counts := got
			counts.problems = nil
			if fmt.Sprint(counts) != fmt.Sprint(tt.want) {
				t.Errorf("got %v\nwant %v", got, tt.want)
			}
			if got.ok() != (tt.problem == "") {
				t.Errorf("ok() = %v with problems %q", got.ok(), got.problems)
			}
			if tt.problem != "" && (len(got.problems) == 0 || !strings.Contains(got.problems[0], tt.problem)) {
				t.Errorf("first problem %q, want it to contain %q", got.problems, tt.problem)
			}
		})
	}
}
