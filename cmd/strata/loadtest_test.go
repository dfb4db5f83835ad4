package main

import (
	"strings"
	"testing"
)

// loadtest reads STRATA_BOOTSTRAP as every other verb does.
func TestLoadtestBootstrapFromEnv(t *testing.T) {
	code, stdout, _ := runCLI(t, []string{"STRATA_BOOTSTRAP=10.9.8.7:9999"}, "loadtest", "produce", "--help")
	if code != 0 || !strings.Contains(stdout, `"10.9.8.7:9999"`) || !strings.Contains(stdout, "STRATA_BOOTSTRAP") {
		t.Fatalf("exit %d; --help does not show STRATA_BOOTSTRAP as --bootstrap's default:\n%s", code, stdout)
	}
}

// Bad flag values of the loadtest verbs are usage errors like any other:
// exit status 2 and a --help hint.
func TestLoadtestUsageErrorsExitTwo(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"loadtest", "produce", "--records", "1", "--acks", "2"}, `acks "2"`},
		{[]string{"loadtest", "produce", "--records", "1", "--topic-config", "novalue"}, "--topic-config"},
		{[]string{"loadtest", "produce"}, "unbounded run"},
		{[]string{"loadtest", "consume", "--records", "1", "--from", "yesterday"}, `from "yesterday"`},
		{[]string{"loadtest", "e2e", "--duration", "1s", "--compression", "brotli"}, "brotli"},
		{[]string{"loadtest", "produce", "--records", "1", "--txn-records", "0", "--transactional-id", "t"}, "--txn-records 0"},
		{[]string{"loadtest", "produce", "--records", "1", "--txn-records", "5"}, "--transactional-id"},
		{[]string{"loadtest", "consume", "--records", "1", "--isolation", "serializable"}, `isolation "serializable"`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, []string{"STRATA_BOOTSTRAP=127.0.0.1:1"}, tt.args...)
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout: %q", stdout)
			}
			assertOneLineError(t, stderr, tt.want, "strata "+strings.Join(tt.args[:2], " ")+" --help")
		})
	}
}
