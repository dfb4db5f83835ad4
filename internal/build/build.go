// Package build says which Strata this is: the release, the commit and the
// Go toolchain, for `strata version`, the start-up log and the
// strata_build_info metric, so the three always agree.
package build

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is the release, set at link time by release builds:
//
//	go build -ldflags "-X strata/internal/build.version=v0.1.0" ./cmd/strata
var version string

// Info describes a build.
type Info struct {
	// Version is the release: the link-time version, else the module
	// version Go recorded (a tag or pseudo-version, when the binary was
	// built from a module version rather than a checkout), else "(devel)".
	Version string
	// Revision is the VCS commit, "" when the build recorded none (go
	// run, go test, -buildvcs=false, a tree without .git).
	Revision string
	// Modified says the working tree had uncommitted changes.
	Modified bool
	// Time is the commit time (RFC 3339), "" when not recorded.
	Time      string
	GoVersion string
}

// Current describes the running binary.
func Current() Info {
	info, _ := debug.ReadBuildInfo()
	return fromBuildInfo(version, info)
}

func fromBuildInfo(linked string, bi *debug.BuildInfo) Info {
	in := Info{Version: linked, GoVersion: runtime.Version()}
	if bi == nil {
		if in.Version == "" {
			in.Version = "(devel)"
		}
		return in
	}
	if in.Version == "" {
		in.Version = bi.Main.Version
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "vcs.time":
			in.Time = s.Value
		}
	}
	return in
}

// ShortRevision is the commit abbreviated as git does, with "-dirty" for a
// modified tree, or "unknown".
func (in Info) ShortRevision() string {
	if in.Revision == "" {
		return "unknown"
	}
	r := in.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	if in.Modified {
		r += "-dirty"
	}
	return r
}

// String is the one line `strata version` prints. A build from source
// says so rather than inventing a release name, and names its commit when
// Go recorded one.
func (in Info) String() string {
	release := in.Version
	if release == "(devel)" {
		release = "built from source"
	}
	commit := "commit " + in.ShortRevision()
	if in.Revision == "" {
		commit = "commit not recorded"
	} else if in.Time != "" {
		commit += " of " + in.Time
	}
	return fmt.Sprintf("strata %s (%s, %s %s/%s)", release, commit, in.GoVersion, runtime.GOOS, runtime.GOARCH)
}
