package broker

import (
	"context"
	"testing"
	"time"

	"strata/localstack"
	"strata/tier/objstore"
)

// TestTieredReplayVersity is the tiered-storage promise (TestTieredReplay)
// against versitygw, a second S3 server in a process of its own, so S3
// compatibility is not judged by the in-process server alone. It skips
// with the install command where versitygw is missing; .ci/run installs it.
func TestTieredReplayVersity(t *testing.T) {
	s3 := localstack.TestVersity(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store, err := objstore.NewS3(ctx, s3.Config())
	if err != nil {
		t.Fatal(err)
	}
	checkTieredReplay(t, store)
}
