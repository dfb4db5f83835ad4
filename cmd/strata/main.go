// Command strata runs a Strata broker and administers one.
//
// It only wires things up: flags, config files and the environment are
// read here (through cmd/internal/config) and handed to the broker as a
// parsed broker.Config; the admin verbs speak the Kafka protocol through
// franz-go's kadm like any other client. Every failure ends as exactly one
// line on stderr, "strata: <what went wrong>", with exit status 1, or 2 when
// the command line itself is wrong.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// run executes one command line and returns the process exit status.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	return execute(ctx, newRootCmd(environ, stdout, stderr), args, stderr)
}

// execute runs root on args and returns the exit status.
func execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "strata: %s\n", oneLine(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// usageError marks a mistake on the command line (unknown command or flag,
// bad flag value, wrong number of arguments): exit status 2, as flag
// parsers traditionally do, and a hint to the command's --help.
//
// Every verb gets one the same way, without importing this package: the
// root's FlagErrorFunc, which cobra hands to every command under it, makes
// one. pflag routes a flag that fails to parse through it; a command that
// finds a bad value only in RunE (a library's, such as loadtest's, or
// serve's topic defaults) returns cmd.FlagErrorFunc()(cmd, err). Run on
// its own, outside strata, cobra's default FlagErrorFunc returns err
// unchanged.
type usageError struct {
	err error
	cmd string // command path for the --help hint
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%v (see '%s --help')", e.err, e.cmd)
}

func (e *usageError) Unwrap() error { return e.err }

// oneLine folds a possibly multi-line message (some libraries wrap lists of
// errors over several lines) into one line.
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}
