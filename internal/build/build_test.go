package build

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "strata", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "3ac7ebf8518c3eac073faa7f43987903f312c5c5"},
			{Key: "vcs.time", Value: "2026-12-01T10:45:25Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name   string
		linked string
		bi     *debug.BuildInfo
		want   []string
		not    []string
	}{
		{"source checkout", "", stamped,
			[]string{"strata built from source", "commit 3ac7ebf8518c-dirty of 2026-12-01T10:45:25Z", "go1.26.8"}, []string{"dev ", "unknown"}},
		{"release", "v0.3.0", stamped,
			[]string{"strata v0.3.0 (commit 3ac7ebf8518c-dirty"}, nil},
		{"go install at a version", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201104525-3ac7ebf8518c"}},
			[]string{"strata v0.0.0-20261201104525-3ac7ebf8518c (commit not recorded"}, nil},
		{"go run", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			[]string{"strata built from source (commit not recorded"}, []string{"dev "}},
		{"no build info", "", nil, []string{"strata built from source"}, nil},
	}
	for _, tt := range tests {
		got := fromBuildInfo(tt.linked, tt.bi).String()
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tt.name, got, w)
			}
		}
		for _, w := range tt.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: %q has %q", tt.name, got, w)
			}
		}
	}
}
