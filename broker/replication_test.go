package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/replica"
	"strata/meta"
)

// An AlterPartition answer is read as Kafka's
// Partition.handleAlterPartitionError reads it: only INELIGIBLE_REPLICA and
// OPERATION_NOT_ATTEMPTED drop the change; a stale epoch waits for the
// metadata (an earlier attempt whose answer was lost may have committed);
// a lost answer, or raft losing its leadership mid-commit, is asked again.
func TestAlterPartitionOutcome(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want replica.Outcome
	}{
		{"ineligible replica (local)", fmt.Errorf("x: %w", meta.ErrIneligibleReplica), replica.NotApplied},
		{"ineligible replica (controller)", kerr.IneligibleReplica, replica.NotApplied},
		{"operation not attempted", kerr.OperationNotAttempted, replica.NotApplied},
		{"stale partition epoch (local)", fmt.Errorf("x: %w", meta.ErrInvalidUpdateVersion), replica.AwaitMetadata},
		{"stale partition epoch (controller)", kerr.InvalidUpdateVersion, replica.AwaitMetadata},
		{"fenced leader epoch", fmt.Errorf("x: %w", meta.ErrFencedLeaderEpoch), replica.AwaitMetadata},
		{"unknown topic", kerr.UnknownTopicID, replica.AwaitMetadata},
		{"raft leadership lost mid-commit", fmt.Errorf("%w: %w: leadership lost", meta.ErrNotController, meta.ErrOutcomeUnknown), replica.Unknown},
		{"controller moved", kerr.NotController, replica.Unknown},
		{"timeout", fmt.Errorf("meta: %w: %w", meta.ErrOutcomeUnknown, context.DeadlineExceeded), replica.Unknown},
		{"no answer", context.DeadlineExceeded, replica.Unknown},
		{"stale broker epoch (this node re-registers)", kerr.StaleBrokerEpoch, replica.Unknown},
		{"anything else", errors.New("connection reset"), replica.Unknown},
	} {
		if got := alterOutcome(c.err); got != c.want {
			t.Errorf("%s: outcome %d, want %d", c.name, got, c.want)
		}
	}
}
