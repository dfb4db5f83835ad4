package broker

import (
	"testing"

	"strata/loadtest/loadtesttest"
)

// TestLoadtestAgainstStrata runs strata loadtest's acceptance suite (the
// same one it passes against kfake) against an in-process Strata broker:
// produce, consume, group consume and e2e, each verified record by record.
func TestLoadtestAgainstStrata(t *testing.T) {
	b := testBroker(t, "") // auto.create.topics.enable, as strata dev runs
	loadtesttest.Run(t, b.Addr().String(), true)
}
