package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/meta"
)

// TestValidateTopicName: Kafka's rules for topic names (Topic.validate),
// each refusal INVALID_TOPIC_EXCEPTION.
func TestValidateTopicName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"orders", true},
		{"a.b_c-D9", true},
		{strings.Repeat("x", maxTopicNameLen), true},
		{"", false},
		{".", false},
		{"..", false},
		{strings.Repeat("x", maxTopicNameLen+1), false},
		{"a/b", false},
		{"a b", false},
		{"é", false},
	} {
		err := ValidateTopicName(tc.name)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, kerr.InvalidTopicException)) {
			t.Errorf("ValidateTopicName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestControllerErrors: what AtController and AutoCreate read in an
// error, whether it came from this node's store or from a controller's
// answer, as the broker's error codes would say it.
func TestControllerErrors(t *testing.T) {
	for _, tc := range []struct {
		err                   error
		notController, exists bool
	}{
		{nil, false, false},
		{meta.ErrNotController, true, false},
		{fmt.Errorf("create topic %q: %w", "t", meta.ErrNotController), true, false},
		{kerr.NotController, true, false},
		{fmt.Errorf("create topic %q: %w", "t", meta.ErrTopicExists), false, true},
		{fmt.Errorf("%w: topic %q already exists", kerr.TopicAlreadyExists, "t"), false, true},
		{kerr.RequestTimedOut, false, false},
		{errors.New("no controller known yet"), false, false},
	} {
		if got := isNotController(tc.err); got != tc.notController {
			t.Errorf("isNotController(%v) = %v", tc.err, got)
		}
		if got := tc.err != nil && alreadyExists(tc.err); got != tc.exists {
			t.Errorf("alreadyExists(%v) = %v", tc.err, got)
		}
	}
}
