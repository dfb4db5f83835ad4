package auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// PLAIN (RFC 4616): one message, authzid NUL authcid NUL password. The
// password is checked against a users file when it names the user, and
// otherwise against the user's SCRAM credential in the metadata, so a
// user created with `strata user create` can use PLAIN too (over TLS: the
// password crosses the wire as it is).

// PlainName is the mechanism's name.
const PlainName = "PLAIN"

type plainMechanism struct {
	file  *usersFile // nil: no file
	creds ScramCredentials
}

// NewPlain returns the server side of PLAIN. usersPath, when not empty,
// holds one "user:password" a line ('#' starts a comment); it is read again
// whenever it changes. creds, when not nil, checks users the file does not
// name.
func NewPlain(usersPath string, creds ScramCredentials) (Mechanism, error) {
	m := &plainMechanism{creds: creds}
	if usersPath != "" {
		m.file = &usersFile{path: usersPath}
		if _, err := m.file.users(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *plainMechanism) Name() string { return PlainName }

func (m *plainMechanism) Start() Exchange { return &plainExchange{m: m} }

type plainExchange struct {
	m    *plainMechanism
	user string
	done bool
}

func (e *plainExchange) Session() Session { return Session{User: e.user} }

func (e *plainExchange) Step(_ context.Context, in []byte) ([]byte, bool, error) {
	if e.done {
		return nil, false, errStepAfterEnd
	}
	e.done = true
	parts := bytes.Split(in, []byte{0})
	if len(parts) != 3 {
		return nil, false, badMessage("PLAIN message must be authzid NUL user NUL password")
	}
	authzid, user, password := string(parts[0]), string(parts[1]), string(parts[2])
	if user == "" || password == "" {
		return nil, false, badMessage("PLAIN user name and password must not be empty")
	}
	if authzid != "" && authzid != user {
		return nil, false, &Failure{Reason: "Authentication failed: Client requested an authorization id that is different from username"}
	}
	if !e.m.check(user, password) {
		return nil, false, fmt.Errorf("invalid password for user %q", user)
	}
	e.user = user
	// The empty answer Kafka sends; with SaslHandshake v0 it is an
	// empty frame the client reads.
	return []byte{}, true, nil
}

func (m *plainMechanism) check(user, password string) bool {
	if m.file != nil {
		users, err := m.file.users()
		if err == nil {
			if want, ok := users[user]; ok {
				return subtle.ConstantTimeCompare([]byte(want), []byte(password)) == 1
			}
		}
		// A file that cannot be read now still leaves the metadata's
		// users: it was readable at start, so this is an edit in
		// progress, and its users are refused until it is whole again.
	}
	if m.creds == nil {
		return false
	}
	for _, mech := range []string{ScramSHA512, ScramSHA256} {
		if cred, ok := m.creds.ScramCredential(user, mech); ok {
			return CheckPassword(mech, cred, password)
		}
	}
	return false
}

// usersFile is a PLAIN users file, read again when its size or
// modification time changes.
type usersFile struct {
	path string

	mu struct {
		sync.Mutex
		mod   time.Time
		size  int64
		users map[string]string
	}
}

func (f *usersFile) users() (map[string]string, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return nil, fmt.Errorf("PLAIN users file: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.users != nil && st.ModTime().Equal(f.mu.mod) && st.Size() == f.mu.size {
		return f.mu.users, nil
	}
	users, err := readUsersFile(f.path)
	if err != nil {
		return nil, err
	}
	f.mu.users, f.mu.mod, f.mu.size = users, st.ModTime(), st.Size()
	return users, nil
}

func readUsersFile(path string) (map[string]string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("PLAIN users file: %w", err)
	}
	defer fh.Close()
	users := map[string]string{}
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, password, ok := strings.Cut(line, ":")
		if !ok || user == "" || password == "" {
			// The line is not quoted: it may hold a password.
			return nil, fmt.Errorf("PLAIN users file %s line %d: want user:password", path, n)
		}
		users[user] = password
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("PLAIN users file %s: %w", path, err)
	}
	return users, nil
}
