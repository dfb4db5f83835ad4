package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time:
//
//	go build -ldflags "-X main.version=v0.1.0" ./cmd/strata
var version = "dev"

// versionString reports the release, the VCS commit the binary was built
// from (when the build recorded one) and the Go toolchain.
func versionString() string {
	commit := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			commit = rev
			if len(commit) > 12 {
				commit = commit[:12]
			}
			if modified == "true" {
				commit += "-dirty"
			}
		}
	}
	return fmt.Sprintf("strata %s (commit %s, %s %s/%s)", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Args:  args(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(stdout, versionString())
			return err
		},
	}
}
