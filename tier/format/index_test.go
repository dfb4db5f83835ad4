package format

import "testing"

func TestLookupOffset(t *testing.T) {
	idx := offsetIndex([2]uint32{9, 0}, [2]uint32{49, 400}, [2]uint32{98, 800})
	for _, c := range []struct {
		index  []byte
		target int64
		want   int64
	}{
		{nil, 150, 0},
		{idx, 50, 0},  // below base
		{idx, 100, 0}, // before the first entry
		{idx, 108, 0}, // still before
		{idx, 109, 0}, // first entry
		{idx, 110, 0}, // after it
		{idx, 149, 400},
		{idx, 150, 400},
		{idx, 198, 800},
		{idx, 199, 800},
		{idx, 1 << 40, 800}, // beyond the segment: the caller checks the range
	} {
		got, err := LookupOffset(c.index, 100, c.target)
		if err != nil || got != c.want {
			t.Errorf("LookupOffset(%d) = %d, %v; want %d", c.target, got, err, c.want)
		}
	}
	if _, err := LookupOffset(idx[:7], 100, 150); err == nil {
		t.Fatal("torn index: no error")
	}
}

func TestLookupTimestamp(t *testing.T) {
	ti := timeIndex(timeEntry{1000, 9}, timeEntry{1500, 49}, timeEntry{2000, 99})
	for _, c := range []struct {
		index  []byte
		ts     int64
		want   int64
		wantOK bool
	}{
		{nil, 0, 0, false},
		{ti, -1, 100, true},
		{ti, 1000, 100, true},
		{ti, 1001, 110, true}, // records up to offset 109 are at most 1000
		{ti, 1500, 110, true},
		{ti, 1501, 150, true},
		{ti, 2000, 150, true},
		{ti, 2001, 0, false},
	} {
		got, ok, err := LookupTimestamp(c.index, 100, c.ts)
		if err != nil || got != c.want || ok != c.wantOK {
			t.Errorf("LookupTimestamp(%d) = %d, %v, %v; want %d, %v", c.ts, got, ok, err, c.want, c.wantOK)
		}
	}
	if _, _, err := LookupTimestamp(ti[:11], 100, 5); err == nil {
		t.Fatal("torn index: no error")
	}
}
