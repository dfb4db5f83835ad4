package objstore_test

import (
	"context"
	"strings"
	"time"

	"testing"

	"strata/localstack"
	"strata/tier/objstore"
	"strata/tier/objstore/objstoretest"
)

// TestS3Versity runs the acceptance suite through aws-sdk-go-v2 against
// versitygw, a second S3 server in a process of its own that, unlike the
// in-process one, checks request signatures. It skips with the install
// command where versitygw is missing; .ci/run installs it.
func TestS3Versity(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newS3(t, localstack.TestVersity(t)) })
}

// TestS3VersityWrongKeys checks what the in-process server cannot: a
// request signed with the wrong secret is refused, and the error says so.
func TestS3VersityWrongKeys(t *testing.T) {
	s := *localstack.TestVersity(t)
	s.SecretKey = "not-the-secret"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := objstore.NewS3(ctx, s.Config())
	if err == nil {
		err = st.Put(ctx, "k", strings.NewReader("v"), 1)
	}
	if err == nil {
		t.Fatal("a store with the wrong secret key wrote an object")
	}
	t.Logf("refused as expected: %v", err)
}
