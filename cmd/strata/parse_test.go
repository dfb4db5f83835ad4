package main

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestKafkaErrorSaysCodeOnce: however a broker words its message (bare,
// or starting with the code and its description, as Strata's did), the
// line names the code once and keeps the broker's explanation.
func TestKafkaErrorSaysCodeOnce(t *testing.T) {
	for _, tt := range []struct {
		msg, want string
	}{
		{`topic "orders" already exists`, `TOPIC_ALREADY_EXISTS: topic "orders" already exists`},
		{`TOPIC_ALREADY_EXISTS: Topic with this name already exists.: topic "orders" already exists`, `TOPIC_ALREADY_EXISTS: topic "orders" already exists`},
		{`TOPIC_ALREADY_EXISTS: topic "orders" already exists`, `TOPIC_ALREADY_EXISTS: topic "orders" already exists`},
		{`TOPIC_ALREADY_EXISTS: Topic with this name already exists.`, kerr.TopicAlreadyExists.Error()},
		{"", kerr.TopicAlreadyExists.Error()},
	} {
		err := kafkaError(kerr.TopicAlreadyExists, tt.msg)
		if err.Error() != tt.want || !errors.Is(err, kerr.TopicAlreadyExists) {
			t.Errorf("kafkaError(%q) = %q, want %q and the code", tt.msg, err, tt.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"P1DT12H":  36 * time.Hour,
		"PT2H":     2 * time.Hour,
		"PT30M":    30 * time.Minute,
		"PT1.5S":   1500 * time.Millisecond,
		"P2D":      48 * time.Hour,
		"pt15m":    15 * time.Minute,
		"36h":      36 * time.Hour,
		"1h30m10s": time.Hour + 30*time.Minute + 10*time.Second,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "P", "PT", "P1H", "yesterday", "-1h", "P1DT"} {
		if d, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) = %v, want an error", in, d)
		}
	}
}

func TestParseSelection(t *testing.T) {
	sel, err := parseSelection([]string{"a", "b:0,2", "b:5", "a:1"})
	if err != nil {
		t.Fatal(err)
	}
	if sel["a"] != nil || len(sel["b"]) != 3 || sel["b"][2] != 5 {
		t.Errorf("selection %v", sel)
	}
	for _, bad := range []string{":0", "a:", "a:x", "a:-1", "a:0,,1"} {
		if _, err := parseSelection([]string{bad}); err == nil {
			t.Errorf("parseSelection(%q) accepted", bad)
		}
	}
}
