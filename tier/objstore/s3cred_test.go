package objstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"strata/localstack"
	"strata/tier/objstore"
)

// TestS3NoCredentials: with no keys given and none anywhere the AWS chain
// looks, the error says so and where it looked, not that a running
// endpoint is unreachable (issue 10).
func TestS3NoCredentials(t *testing.T) {
	ls := localstack.TestS3(t)
	// An environment where the default chain finds nothing: no key
	// variables, no shared files, no profile, and no instance metadata
	// service (disabled, so the test does not wait on a link-local
	// address).
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_DEFAULT_PROFILE": "",
		"AWS_SHARED_CREDENTIALS_FILE": none, "AWS_CONFIG_FILE": none,
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	cfg := ls.Config()
	cfg.AccessKey, cfg.SecretKey = "", ""
	_, err := objstore.NewS3(context.Background(), cfg)
	if err == nil {
		t.Fatal("NewS3 without credentials succeeded")
	}
	if !errors.Is(err, objstore.ErrNoCredentials) {
		t.Errorf("error is not ErrNoCredentials: %v", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "unreachable") {
		t.Errorf("error blames the endpoint: %v", err)
	}
	for _, want := range []string{"no credentials", "AWS_ACCESS_KEY_ID", "~/.aws/credentials", "instance metadata"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}
