package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"strata/internal/build"
)

// versionString reports the release, the VCS commit the binary was built
// from (when the build recorded one) and the Go toolchain; see package
// build for where each comes from.
func versionString() string { return build.Current().String() }

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
