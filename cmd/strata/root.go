package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// newRootCmd builds the command tree. environ stands in for os.Environ so
// tests control the environment without touching the process's.
func newRootCmd(environ []string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "strata",
		Short: "Strata: a Kafka-compatible message broker with tiered storage",
		Long: `Strata is a Kafka-compatible message broker with tiered storage.
Ordinary Kafka clients produce to and consume from it.

Start a single local node with 'strata dev'.`,
		Version: versionString(),
		// main prints the one error line; cobra must print nothing.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{err: err, cmd: c.CommandPath()}
	})
	root.AddCommand(
		newDevCmd(environ, stdout, stderr),
		newServeCmd(environ, stdout, stderr),
		newTopicCmd(environ, stdout),
		newClusterCmd(environ, stdout),
		newGroupCmd(environ, stdout),
		newTierCmd(environ, stdout),
		newBucketCmd(environ, stdout, stderr),
		newTxnCmd(environ, stdout),
		newUserCmd(environ, stdout),
		newACLCmd(environ, stdout),
		newQuotaCmd(environ, stdout),
		newLocalstackCmd(environ, stdout, stderr),
		newVersionCmd(stdout),
		newLoadtestCmd(environ),
	)
	asGroup(root)
	return root
}

// asGroup makes a command that only holds subcommands print its help when
// run bare and fail with a usage error, not a help page and status 0, when
// given a subcommand that does not exist.
func asGroup(cmd *cobra.Command) {
	cmd.SuggestionsMinimumDistance = 2
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		err := fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath())
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			err = fmt.Errorf("%w; did you mean %q?", err, s[0])
		}
		return &usageError{err: err, cmd: c.CommandPath()}
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
}

// args wraps a cobra positional-argument check so that a wrong count is a
// usage error.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, a []string) error {
		err := check(c, a)
		var ue *usageError
		if err != nil && !errors.As(err, &ue) {
			err = &usageError{err: err, cmd: c.CommandPath()}
		}
		return err
	}
}

// mount adapts a command tree built by a library package (loadtest) to this
// binary's conventions: wrong arguments anywhere in it are usage errors.
func mount(cmd *cobra.Command) *cobra.Command {
	if cmd.Args != nil {
		cmd.Args = args(cmd.Args)
	}
	for _, sub := range cmd.Commands() {
		mount(sub)
	}
	return cmd
}

// lookupEnv finds name in an os.Environ-style list.
func lookupEnv(environ []string, name string) (string, bool) {
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}
