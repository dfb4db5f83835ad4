package format

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The cold tier's compaction state rides in the root: written when set,
// absent (and zero) in manifests that never saw compaction, and carried by
// every later version until a compaction changes it.
func TestRootCompactionState(t *testing.T) {
	ctx := context.Background()
	src := newMemPages()
	r := buildRoot(t, src, 12, testPaging)

	plain, err := EncodeRoot(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), "cleanedOffset") || strings.Contains(string(plain), "lastCompactionMs") {
		t.Fatalf("a never compacted root names compaction fields: %s", plain)
	}
	if got, err := DecodeRoot(plain); err != nil || got.CleanedOffset != 0 || got.LastCompactionMs != 0 {
		t.Fatalf("older root decodes as %+v, %v", got, err)
	}

	ch, err := r.Replace(ctx, src, []RemoteSegment{pseg(20, 39, 1005, 2, 9)}, 2, testPaging)
	if err != nil {
		t.Fatal(err)
	}
	c := ch.Root
	c.CleanedOffset, c.LastCompactionMs = 40, 1_700_000_000_123
	src.apply(t, ch)
	b, err := EncodeRoot(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"logStartOffset":0,"cleanedOffset":40,"lastCompactionMs":1700000000123,"pages":`) {
		t.Fatalf("compacted root: %s", b)
	}
	if c.CleanedEnd() != 40 {
		t.Fatalf("cleaned end %d, want 40", c.CleanedEnd())
	}

	// Every later change keeps it.
	app, err := c.Append(pseg(120, 129, 1200, 2, 0), 2, testPaging)
	if err != nil {
		t.Fatal(err)
	}
	src.apply(t, app)
	ret, err := app.Root.WithLogStart(ctx, src, 50, 3, testPaging)
	if err != nil {
		t.Fatal(err)
	}
	src.apply(t, ret)
	rep, err := ret.Root.Replace(ctx, src, []RemoteSegment{pseg(100, 119, 1011, 3, 8)}, 3, testPaging)
	if err != nil {
		t.Fatal(err)
	}
	src.apply(t, rep)
	for name, got := range map[string]*Root{"append": app.Root, "retention": ret.Root, "replace": rep.Root} {
		if got.CleanedOffset != 40 || got.LastCompactionMs != 1_700_000_000_123 {
			t.Errorf("%s: compaction state %d, %d", name, got.CleanedOffset, got.LastCompactionMs)
		}
	}
	// Retention passed the cleaned offset: what is cleaned starts at the
	// log start.
	if got := ret.Root.CleanedEnd(); got != 50 {
		t.Fatalf("cleaned end after retention to 50: %d", got)
	}

	body := string(b[:len(b)-trailerSize])
	for name, c := range map[string]string{
		"negative cleaned offset":  strings.Replace(body, `"cleanedOffset":40`, `"cleanedOffset":-1`, 1),
		"negative compaction time": strings.Replace(body, `"lastCompactionMs":1700000000123`, `"lastCompactionMs":-5`, 1),
	} {
		if got, err := DecodeRoot(withCRC(c)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
	}
	bad := *c
	bad.CleanedOffset = -1
	if _, err := EncodeRoot(&bad); err == nil {
		t.Fatal("root with a negative cleaned offset encoded")
	}
}
