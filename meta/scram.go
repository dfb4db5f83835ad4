package meta

import (
	"context"
	"errors"
	"fmt"
	"maps"
)

// SCRAM credentials (KIP-554): per user and mechanism, the salt, the
// iteration count and the two keys a SCRAM server checks a client's proof
// with, never the password. AlterUserScramCredentials and the
// bootstrap user write them through the controller; every broker reads
// them from its State to authenticate connections.

// ScramCredential is one user's credential for one mechanism.
type ScramCredential struct {
	Salt       []byte
	StoredKey  []byte
	ServerKey  []byte
	Iterations int32
}

// ScramUpsertion sets user's credential for mechanism (SCRAM-SHA-256 or
// SCRAM-SHA-512). The proposer computes it: the salt is random, and the
// keys come from the salted password, which never reaches the log.
type ScramUpsertion struct {
	User       string
	Mechanism  string
	Credential ScramCredential
}

// ScramDeletion removes user's credential for mechanism.
type ScramDeletion struct {
	User      string
	Mechanism string
}

// The refusals of AlterScramCredentials, per user; each maps to the Kafka
// error code of the same name.
var (
	ErrScramCredentialNotFound     = errors.New("meta: attempt to delete a user credential that does not exist")       // RESOURCE_NOT_FOUND
	ErrDuplicateScramCredential    = errors.New("meta: a user credential cannot be altered twice in the same request") // DUPLICATE_RESOURCE
	ErrUnsupportedScramMechanism   = errors.New("meta: unknown SCRAM mechanism")                                       // UNSUPPORTED_SASL_MECHANISM
	ErrUnacceptableScramCredential = errors.New("meta: unacceptable SCRAM credential")                                 // UNACCEPTABLE_CREDENTIAL
)

// Iteration bounds of a stored credential, Kafka's.
const (
	MinScramIterations = 4096
	MaxScramIterations = 16384
)

// scramKeySize is each mechanism's key size: its hash's output.
var scramKeySize = map[string]int{"SCRAM-SHA-256": 32, "SCRAM-SHA-512": 64}

// alterScramCmd is one AlterUserScramCredentials request, or the bootstrap
// user's creation.
type alterScramCmd struct {
	Deletions  []ScramDeletion  `json:",omitempty"`
	Upsertions []ScramUpsertion `json:",omitempty"`
}

// ScramCredential returns user's credential for mechanism.
func (s *State) ScramCredential(user, mechanism string) (ScramCredential, bool) {
	c, ok := s.ScramCredentials[user][mechanism]
	return c, ok
}

// AlterScramCredentials deletes and upserts SCRAM credentials in one
// command, with KIP-554's per-user outcome: the returned map has an entry
// for every user named, nil when all of that user's changes were applied.
// A user whose changes include an unknown mechanism
// (ErrUnsupportedScramMechanism), an empty name or iterations outside
// 4096..16384 (ErrUnacceptableScramCredential), the same mechanism twice
// (ErrDuplicateScramCredential) or the deletion of a credential it does not
// have (ErrScramCredentialNotFound) has none of them applied; the other
// users' changes are. The error is for the command as a whole (not the
// controller, raft).
func (s *Store) AlterScramCredentials(ctx context.Context, dels []ScramDeletion, ups []ScramUpsertion) (map[string]error, error) {
	res, err := s.propose(ctx, kindAlterScramCredentials, alterScramCmd{Deletions: dels, Upsertions: ups})
	if err != nil {
		return nil, err
	}
	return res.scram, nil
}

func applyAlterScramCredentials(s *State, _ uint64, payload []byte) (*State, result) {
	var c alterScramCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	outcome := checkScram(s, c)
	var next *State
	change := func(user string) map[string]ScramCredential {
		if next == nil {
			next = s.clone()
		}
		creds := maps.Clone(next.ScramCredentials[user])
		if creds == nil {
			creds = map[string]ScramCredential{}
		}
		next.ScramCredentials[user] = creds
		return creds
	}
	for _, d := range c.Deletions {
		if outcome[d.User] == nil {
			creds := change(d.User)
			delete(creds, d.Mechanism)
			if len(creds) == 0 {
				delete(next.ScramCredentials, d.User)
			}
		}
	}
	for _, u := range c.Upsertions {
		if outcome[u.User] == nil {
			change(u.User)[u.Mechanism] = u.Credential
		}
	}
	return next, result{scram: outcome}
}

// checkScram decides each user's outcome, as Kafka's ZooKeeper-era
// AlterUserScramCredentials did (KIP-554): malformed changes first, then
// the same user and mechanism named twice, then deletions of what does not
// exist.
func checkScram(s *State, c alterScramCmd) map[string]error {
	outcome := map[string]error{}
	// Every user named has an entry, nil until something fails it.
	name := func(user string) {
		if _, ok := outcome[user]; !ok {
			outcome[user] = nil
		}
	}
	fail := func(user string, err error) {
		if outcome[user] == nil {
			outcome[user] = err
		}
	}
	type pair struct{ user, mech string }
	seen := map[pair]int{}
	for _, d := range c.Deletions {
		name(d.User)
		switch {
		case d.User == "":
			fail(d.User, fmt.Errorf("%w: user name must not be empty", ErrUnacceptableScramCredential))
		case scramKeySize[d.Mechanism] == 0:
			fail(d.User, fmt.Errorf("%w %q", ErrUnsupportedScramMechanism, d.Mechanism))
		}
		seen[pair{d.User, d.Mechanism}]++
	}
	for _, u := range c.Upsertions {
		name(u.User)
		cr := u.Credential
		switch size := scramKeySize[u.Mechanism]; {
		case u.User == "":
			fail(u.User, fmt.Errorf("%w: user name must not be empty", ErrUnacceptableScramCredential))
		case size == 0:
			fail(u.User, fmt.Errorf("%w %q", ErrUnsupportedScramMechanism, u.Mechanism))
		case cr.Iterations < MinScramIterations:
			fail(u.User, fmt.Errorf("%w: too few iterations (%d, at least %d)", ErrUnacceptableScramCredential, cr.Iterations, MinScramIterations))
		case cr.Iterations > MaxScramIterations:
			fail(u.User, fmt.Errorf("%w: too many iterations (%d, at most %d)", ErrUnacceptableScramCredential, cr.Iterations, MaxScramIterations))
		case len(cr.Salt) == 0 || len(cr.StoredKey) != size || len(cr.ServerKey) != size:
			fail(u.User, fmt.Errorf("%w: salt or keys of the wrong size", ErrUnacceptableScramCredential))
		}
		seen[pair{u.User, u.Mechanism}]++
	}
	for p, n := range seen {
		if n > 1 && outcome[p.user] == nil {
			outcome[p.user] = ErrDuplicateScramCredential
		}
	}
	for _, d := range c.Deletions {
		if _, ok := s.ScramCredential(d.User, d.Mechanism); !ok {
			fail(d.User, fmt.Errorf("%w: %s of %q", ErrScramCredentialNotFound, d.Mechanism, d.User))
		}
	}
	return outcome
}

// checkScramState checks a snapshot's credentials.
func checkScramState(creds map[string]map[string]ScramCredential) error {
	for user, byMech := range creds {
		for mech, c := range byMech {
			if size := scramKeySize[mech]; size == 0 || len(c.StoredKey) != size || len(c.ServerKey) != size {
				return fmt.Errorf("SCRAM credential %s of %q is malformed", mech, user)
			}
		}
	}
	return nil
}
