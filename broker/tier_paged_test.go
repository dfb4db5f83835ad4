package broker

import (
	"context"
	"testing"

	"strata/tier"
	"strata/tier/format"
)

// remoteSegments lists every segment of m, reading its pages through tr.
func remoteSegments(tb testing.TB, tr *tier.Tier, m *format.Root) []format.RemoteSegment {
	tb.Helper()
	segs, err := tr.Segments(context.Background(), m)
	if err != nil {
		tb.Fatalf("manifest %s: %v", m.Key(), err)
	}
	return segs
}
