package loadtest_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"strata/loadtest"
)

// flagError marks what a root command's flag error function returned.
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }

// runUnder runs `root loadtest args...` where root classifies flag errors
// as a binary mounting loadtest does.
func runUnder(t *testing.T, opts loadtest.Options, args ...string) (stdout string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "root", SilenceErrors: true, SilenceUsage: true}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &flagError{err} })
	root.AddCommand(loadtest.Command(opts))
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(append([]string{"loadtest"}, args...))
	err = root.ExecuteContext(t.Context())
	return out.String(), err
}

// Every bad flag value reaches the binary's flag error function, so the
// binary reports it as the usage error it is, whichever verb it is in.
func TestBadFlagValuesAreUsageErrors(t *testing.T) {
	const bs = "127.0.0.1:1" // never dialled: the flags are refused first
	for _, args := range [][]string{
		{"produce", "--bootstrap", bs},
		{"consume", "--bootstrap", bs},
		{"e2e", "--bootstrap", bs},
		{"produce", "--bootstrap", bs, "--records", "1", "--acks", "2"},
		{"produce", "--bootstrap", bs, "--records", "1", "--acks", "1", "--idempotent"},
		{"produce", "--bootstrap", bs, "--records", "1", "--rate", "1", "--rate-mb", "1"},
		{"produce", "--bootstrap", bs, "--records", "1", "--compression", "brotli"},
		{"produce", "--bootstrap", bs, "--records", "1", "--topic-config", "novalue"},
		{"produce", "--bootstrap", bs, "--records", "1", "--producers", "0"},
		{"produce", "--bootstrap", bs, "--records", "1", "--size", "-1"},
		{"produce", "--bootstrap", "nocolon", "--records", "1"},
		{"produce", "--bootstrap", bs, "--records", "x"},
		{"consume", "--bootstrap", bs, "--records", "1", "--from", "yesterday"},
		{"consume", "--bootstrap", bs, "--records", "1", "--topic", ""},
		{"e2e", "--bootstrap", bs, "--duration", "-1s"},
		{"e2e", "--bootstrap", bs, "--duration", "1s", "--acks", "0", "--idempotent"},
		{"produce", "--bootstrap", bs, "--records", "1", "--transactional-id", "x", "--acks", "1"},
		{"produce", "--bootstrap", bs, "--records", "1", "--transactional-id", "x", "--idempotent=false"},
		{"produce", "--bootstrap", bs, "--records", "1", "--transactional-id", "x", "--txn-records", "0"},
		{"produce", "--bootstrap", bs, "--records", "1", "--transactional-id", "x", "--txn-abort-every", "-1"},
		{"produce", "--bootstrap", bs, "--records", "1", "--txn-records", "10"},
		{"produce", "--bootstrap", bs, "--records", "1", "--txn-abort-every", "2"},
		{"e2e", "--bootstrap", bs, "--records", "1", "--transactional-id", "x", "--acks", "0"},
		{"consume", "--bootstrap", bs, "--records", "1", "--isolation", "serializable"},
	} {
		out, err := runUnder(t, loadtest.Options{}, args...)
		var fe *flagError
		if !errors.As(err, &fe) {
			t.Errorf("loadtest %q: err %v (%T), want a flag error", args, err, err)
		}
		if out != "" {
			t.Errorf("loadtest %q printed %q", args, out)
		}
	}
}

// --bootstrap defaults to what the mounting binary passes (its
// environment), and --help says where it comes from.
func TestBootstrapDefaultFromOptions(t *testing.T) {
	c := newCluster(t)
	opts := loadtest.Options{Bootstrap: c.ListenAddrs()[0], BootstrapEnv: "X_BOOTSTRAP"}
	help, err := runUnder(t, opts, "produce", "--help")
	if err != nil || !strings.Contains(help, "X_BOOTSTRAP") || !strings.Contains(help, c.ListenAddrs()[0]) {
		t.Fatalf("help (err %v) does not name the default and its variable:\n%s", err, help)
	}
	if _, err := runUnder(t, opts, "produce", "--topic", "t", "--create", "--records", "50", "--size", "10"); err != nil {
		t.Fatalf("produce without --bootstrap: %v", err)
	}
}

// --idempotent's help agrees with its default: on with --acks all, off
// with other acks, and never "(default true)" next to "off".
func TestIdempotentHelp(t *testing.T) {
	help, err := runUnder(t, loadtest.Options{}, "produce", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(help, "\n") {
		if strings.Contains(line, "--idempotent") {
			if strings.Contains(line, "(default true)") || strings.Contains(line, "(default false)") {
				t.Errorf("--idempotent help states one default, but it depends on --acks: %q", line)
			}
			if !strings.Contains(line, "acks") {
				t.Errorf("--idempotent help does not say how --acks decides it: %q", line)
			}
			return
		}
	}
	t.Fatalf("no --idempotent in:\n%s", help)
}
