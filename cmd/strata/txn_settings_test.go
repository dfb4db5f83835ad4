package main

import (
	"testing"
	"time"

	"github.com/spf13/cobra"

	"strata/broker"
	"strata/cmd/internal/config"
)

// TestTransactionSettingsReachTheBroker: the four transaction settings of
// serve land in the broker's configuration, and strata dev makes a small
// __transaction_state (3 partitions, as its __consumer_offsets) rather
// than Kafka's 50.
func TestTransactionSettingsReachTheBroker(t *testing.T) {
	env := []string{"STRATA_DATA_DIR=/d", "STRATA_TRANSACTION_STATE_PARTITIONS=4", "STRATA_TRANSACTION_MAX_TIMEOUT=2m",
		"STRATA_TRANSACTIONAL_ID_EXPIRATION=36h", "STRATA_TRANSACTION_ABORT_INTERVAL=250ms"}
	c, _, err := config.Load(config.Sources{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	got := brokerConfig(c, nil)
	want := broker.Config{TransactionStatePartitions: 4, TransactionMaxTimeout: 2 * time.Minute,
		TransactionalIDExpiration: 36 * time.Hour, TransactionAbortInterval: 250 * time.Millisecond}
	if got.TransactionStatePartitions != want.TransactionStatePartitions || got.TransactionMaxTimeout != want.TransactionMaxTimeout ||
		got.TransactionalIDExpiration != want.TransactionalIDExpiration || got.TransactionAbortInterval != want.TransactionAbortInterval {
		t.Errorf("serve: broker gets %d partitions, max timeout %s, expiration %s, abort interval %s; want %d, %s, %s, %s",
			got.TransactionStatePartitions, got.TransactionMaxTimeout, got.TransactionalIDExpiration, got.TransactionAbortInterval,
			want.TransactionStatePartitions, want.TransactionMaxTimeout, want.TransactionalIDExpiration, want.TransactionAbortInterval)
	}

	var dev devNode
	dev.logLevel = "info"
	cfg, err := dev.config(&cobra.Command{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TransactionStatePartitions != 3 {
		t.Errorf("dev: %d transaction state partitions, want 3", cfg.TransactionStatePartitions)
	}
}

// TestTransactionSettingErrors: a bad transaction setting stops serve with
// one line naming it, a usage error (status 2) when it is a flag and a
// config error (status 1) when it comes from the environment or the file.
func TestTransactionSettingErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		env  []string
		args []string
		code int
		want []string
	}{
		{nil, []string{"--transaction-max-timeout", "0"}, 2, []string{"--transaction-max-timeout", `"0" is not a duration from 1ms to`, "strata serve --help"}},
		{nil, []string{"--transaction-state-partitions", "-3"}, 2, []string{"--transaction-state-partitions", `"-3" is less than 1`}},
		{[]string{"STRATA_TRANSACTION_ABORT_INTERVAL=often"}, []string{"--data-dir", dir}, 1, []string{"config: environment STRATA_TRANSACTION_ABORT_INTERVAL", `"often"`}},
	} {
		code, stdout, stderr := runCLI(t, tt.env, append([]string{"serve"}, tt.args...)...)
		if code != tt.code || stdout != "" {
			t.Errorf("serve %v: exit %d (want %d), stdout %q", tt.args, code, tt.code, stdout)
		}
		assertOneLineError(t, stderr, tt.want...)
	}
}
