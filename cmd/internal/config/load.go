package config

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Environment variables read besides the per-setting ones.
const (
	// EnvConfig names the config file when --config is not given.
	EnvConfig = "STRATA_CONFIG"
	// EnvBootstrap is read by the admin commands, not by a node; Load
	// knows it only so that it is not reported as unknown.
	EnvBootstrap = "STRATA_BOOTSTRAP"
	// EnvS3AccessKey and EnvS3SecretKey hold the object store's static
	// keys. They are the only way to give keys: never a flag or a file.
	EnvS3AccessKey = "STRATA_S3_ACCESS_KEY"
	EnvS3SecretKey = "STRATA_S3_SECRET_KEY"
	// EnvTestCompactorPause stops compaction passes at a named point so
	// that a crash test can kill the node there (compactor.Config's
	// TestPauseAt). Not a setting: nothing but tests should set it.
	EnvTestCompactorPause = "STRATA_TEST_COMPACTOR_PAUSE"
	// EnvTestShortOrphanGrace, when "1", lets tier.orphan_grace go below
	// the broker's bound (broker.TierConfig's TestShortOrphanGrace), for
	// tests that watch the collector within seconds. Not a setting.
	EnvTestShortOrphanGrace = "STRATA_TEST_SHORT_ORPHAN_GRACE"
	// The client verbs' SASL credentials and TLS CA (cmd/strata's
	// clientsecurity.go); a node does not read them.
	EnvSASLUsername  = "STRATA_SASL_USERNAME"
	EnvSASLPassword  = "STRATA_SASL_PASSWORD"
	EnvSASLMechanism = "STRATA_SASL_MECHANISM"
	EnvTLSCAFile     = "STRATA_TLS_CA_FILE"
)

// Flags holds the settings given on a command line. AddFlags creates it;
// pflag fills it while parsing; Load applies it last.
type Flags struct {
	configFile string
	given      []given // in command-line order, so a repeated flag's last value wins
}

type given struct {
	s   *setting
	raw string
}

// AddFlags defines --config and one flag per setting on fs.
func AddFlags(fs *pflag.FlagSet) *Flags {
	return addFlags(fs, true, func(*setting) bool { return true })
}

// AddFlagsFor defines flags only for the settings under the given keys or
// sections ("s3", "tier", "node.data_dir"): for commands that take a few
// of a node's settings, such as strata dev (the object store and the tier)
// or the tier inspection verbs (where the bucket is). withSources says the
// command also reads the config file and the STRATA_* variables (Load
// without FlagsOnly): it then gets --config, and each flag's help names its
// variable.
func AddFlagsFor(fs *pflag.FlagSet, withSources bool, keys ...string) *Flags {
	return addFlags(fs, withSources, func(s *setting) bool {
		for _, k := range keys {
			if s.key == k || strings.HasPrefix(s.key, k+".") {
				return true
			}
		}
		return false
	})
}

func addFlags(fs *pflag.FlagSet, withSources bool, want func(*setting) bool) *Flags {
	f := &Flags{}
	if withSources {
		fs.StringVar(&f.configFile, "config", "", "YAML config file (env "+EnvConfig+")")
	}
	def := Defaults()
	for _, s := range settings {
		if !want(s) {
			continue
		}
		v := &flagValue{flags: f, s: s}
		if s.get != nil {
			v.def = s.get(&def)
		}
		usage := s.usage
		if withSources {
			usage += " (env " + s.env() + ")"
		}
		fl := fs.VarPF(v, s.flag, "", usage)
		if s.typ == "bool" {
			fl.NoOptDefVal = "true"
		}
	}
	return f
}

// flagValue adapts a setting to pflag. Set parses the value at once, so a
// bad flag is reported by pflag as a usage error naming the flag, and
// records the raw text for Load.
type flagValue struct {
	flags *Flags
	s     *setting
	def   string
}

func (v *flagValue) String() string { return v.def }
func (v *flagValue) Type() string   { return v.s.typ }

func (v *flagValue) Set(raw string) error {
	var scratch Config
	if err := v.s.setFlag(&scratch, raw); err != nil {
		return err
	}
	v.flags.given = append(v.flags.given, given{v.s, raw})
	return nil
}

// Sources are the inputs of Load.
type Sources struct {
	// Env is the process environment in os.Environ form.
	Env []string
	// Flags are the parsed command-line flags; nil means none.
	Flags *Flags
	// FlagsOnly ignores the config file (even one named by --config) and
	// the STRATA_* setting variables: strata dev takes its settings from
	// flags alone, and serve checks its flags alone this way. The S3 keys
	// still come from Env, their only source.
	FlagsOnly bool
	// DataDirOptional accepts a configuration without node.data_dir, for
	// commands that are not a node (the tier inspection verbs).
	DataDirOptional bool
}

// Load builds a node's configuration from the defaults, the config file
// (--config, else $STRATA_CONFIG, else none), the environment and the
// flags, each overriding the one before; map settings merge entry by entry.
// Every source is checked in full, even where a later one overrides a
// value: a bad file is reported rather than silently masked. The returned
// warnings (unknown STRATA_* variables) are for the caller to log.
func Load(src Sources) (cfg Config, warnings []string, err error) {
	cfg = Defaults()
	env := parseEnviron(src.Env)
	cfg.S3.AccessKey, cfg.S3.SecretKey = env[EnvS3AccessKey], env[EnvS3SecretKey]
	cfg.Compactor.TestPauseAt = env[EnvTestCompactorPause]
	cfg.Tier.TestShortOrphanGrace = env[EnvTestShortOrphanGrace] == "1"

	path := env[EnvConfig]
	if src.Flags != nil && src.Flags.configFile != "" {
		path = src.Flags.configFile
	}
	if src.FlagsOnly {
		path = ""
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, nil, err // names the path
		}
		if err := applyYAML(&cfg, data); err != nil {
			return Config{}, nil, fmt.Errorf("%s%w", path, err)
		}
	}

	if !src.FlagsOnly {
		warnings, err = applyEnv(&cfg, env)
		if err != nil {
			return Config{}, nil, err
		}
	} else {
		warnings = ignoredEnv(env)
	}

	if src.Flags != nil {
		for _, g := range src.Flags.given {
			// Already parsed once by flagValue.Set; this cannot fail.
			if err := g.s.setFlag(&cfg, g.raw); err != nil {
				return Config{}, nil, fmt.Errorf("--%s: %w", g.s.flag, err)
			}
		}
	}
	if err := cfg.check(!src.FlagsOnly && !src.DataDirOptional); err != nil {
		return Config{}, nil, err
	}
	// Flags alone may lack what the file or environment adds (a voters
	// flag with STRATA_RAFT_LISTEN); the quorum is checked when complete.
	if !src.FlagsOnly {
		if err := cfg.checkQuorum(); err != nil {
			return Config{}, nil, err
		}
	}
	return cfg, warnings, nil
}

// ignoredEnv warns of each setting variable (and STRATA_CONFIG) set for a
// command that takes its settings from flags alone: an operator used to
// serve would otherwise see STRATA_LISTEN silently have no effect.
func ignoredEnv(env map[string]string) []string {
	var warnings []string
	for k := range env {
		if byEnv[k] != nil || k == EnvConfig {
			warnings = append(warnings, "ignoring "+k+": this command takes its settings from flags only (strata serve reads STRATA_* variables)")
		}
	}
	sort.Strings(warnings)
	return warnings
}

// knownEnv are the STRATA_* variables that are not settings.
var knownEnv = map[string]bool{EnvConfig: true, EnvBootstrap: true, EnvS3AccessKey: true, EnvS3SecretKey: true, EnvTestCompactorPause: true, EnvTestShortOrphanGrace: true,
	EnvSASLUsername: true, EnvSASLPassword: true, EnvSASLMechanism: true, EnvTLSCAFile: true}

func parseEnviron(environ []string) map[string]string {
	m := make(map[string]string)
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// applyEnv applies the STRATA_* variables in the settings table's order,
// and returns a warning for every other STRATA_* variable: likely a typo,
// but not fatal, since the environment is shared with other tools.
func applyEnv(cfg *Config, env map[string]string) ([]string, error) {
	for _, s := range settings {
		raw, ok := env[s.env()]
		if !ok {
			continue
		}
		var err error
		if s.setEntry != nil {
			for _, pair := range strings.Split(raw, ",") {
				if strings.TrimSpace(pair) == "" {
					continue
				}
				if err = s.setPair(cfg, pair); err != nil {
					break
				}
			}
		} else {
			err = s.set(cfg, raw)
		}
		if err != nil {
			return nil, fmt.Errorf("environment %s: %w", s.env(), err)
		}
	}
	var warnings []string
	for k := range env {
		if strings.HasPrefix(k, "STRATA_") && byEnv[k] == nil && !knownEnv[k] {
			warnings = append(warnings, "ignoring unknown environment variable "+k)
		}
	}
	sort.Strings(warnings)
	return warnings, nil
}

// applyYAML applies a config file. It walks the YAML node tree rather than
// decoding into tagged structs so that an unknown key, a value of the wrong
// shape and a bad value all come back as one line naming the line number,
// the full dotted key and the value. Errors start with ":" so that the
// caller can prefix the file name.
func applyYAML(cfg *Config, data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(oneLine(err.Error()), "yaml: ")
		// "line 3: did not find expected key" reads ":3: did not find..."
		// after the file name, like every other error here.
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			return fmt.Errorf(":%s", rest)
		}
		return fmt.Errorf(": %s", msg)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	root := resolve(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf(":%d: the file must be a mapping of keys to values", root.Line)
	}
	return walk(cfg, "", root)
}

func walk(cfg *Config, prefix string, m *yaml.Node) error {
	seen := make(map[string]bool)
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], resolve(m.Content[i+1])
		key := kn.Value
		if prefix != "" {
			key = prefix + "." + kn.Value
		}
		if kn.Kind != yaml.ScalarNode {
			return fmt.Errorf(":%d: %s: keys must be plain strings", kn.Line, prefix)
		}
		if seen[key] {
			return fmt.Errorf(":%d: %s: duplicate key", kn.Line, key)
		}
		seen[key] = true
		if isNull(vn) {
			continue // "key:" with no value leaves the setting alone
		}

		s := byKey[key]
		switch {
		case s != nil && s.setEntry != nil:
			if vn.Kind != yaml.MappingNode {
				return fmt.Errorf(":%d: %s: expected a mapping of names to values", vn.Line, key)
			}
			for j := 0; j+1 < len(vn.Content); j += 2 {
				ek, ev := vn.Content[j], resolve(vn.Content[j+1])
				if ek.Kind != yaml.ScalarNode || ev.Kind != yaml.ScalarNode {
					return fmt.Errorf(":%d: %s: expected name: value", ek.Line, key)
				}
				if err := s.setEntry(cfg, ek.Value, ev.Value); err != nil {
					return fmt.Errorf(":%d: %s.%s: %w", ev.Line, key, ek.Value, err)
				}
			}
		case s != nil:
			if vn.Kind != yaml.ScalarNode {
				return fmt.Errorf(":%d: %s: expected a single value, found %s", vn.Line, key, kindName(vn))
			}
			if err := s.set(cfg, vn.Value); err != nil {
				return fmt.Errorf(":%d: %s: %w", vn.Line, key, err)
			}
		case groups[key]:
			if vn.Kind != yaml.MappingNode {
				return fmt.Errorf(":%d: %s: expected a section of settings, found %s", vn.Line, key, kindName(vn))
			}
			if err := walk(cfg, key, vn); err != nil {
				return err
			}
		case key == "s3.access_key" || key == "s3.secret_key":
			return fmt.Errorf(":%d: %s: keys are never read from a file; set %s and %s, or leave both unset for the AWS credential chain",
				kn.Line, key, EnvS3AccessKey, EnvS3SecretKey)
		default:
			return fmt.Errorf(":%d: unknown key %s%s", kn.Line, key, suggest(key))
		}
	}
	return nil
}

// suggest names the known key a misspelt one most likely meant: one within
// two edits, or one with the same name in another section.
func suggest(key string) string {
	last := key[strings.LastIndex(key, ".")+1:]
	for _, s := range settings {
		if editDistance(s.key, key) <= 2 || strings.HasSuffix(s.key, "."+last) {
			return fmt.Sprintf(" (did you mean %s?)", s.key)
		}
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return "a single value"
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
