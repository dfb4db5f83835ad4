package auth

import (
	"context"
	"testing"
)

// FuzzExchanges feeds arbitrary client messages, as a connection that has
// not authenticated may send them, to every mechanism's exchange: two
// steps each, so SCRAM's client-final parser is reached with a valid
// first message too. A message is accepted or refused with an error,
// never a panic.
func FuzzExchanges(f *testing.F) {
	f.Add([]byte("n,,n=alice,r=abc"), []byte("c=biws,r=abcXYZ,p=AAAA"))
	f.Add([]byte("\x00alice\x00secret"), []byte(""))
	f.Add([]byte("n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.\x01\x01"), []byte("\x01"))
	f.Add([]byte("n,a=bob,n=alice,r=x,tokenauth=true"), []byte("c=,r=,p="))
	cred, err := NewScramCredential("SCRAM-SHA-256", "secret", MinScramIterations)
	if err != nil {
		f.Fatal(err)
	}
	creds := credMap{"SCRAM-SHA-256": {"alice": cred}}
	var mechs []Mechanism
	for _, name := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		m, err := NewScram(name, creds)
		if err != nil {
			f.Fatal(err)
		}
		mechs = append(mechs, m)
	}
	plain, err := NewPlain("", creds)
	if err != nil {
		f.Fatal(err)
	}
	mechs = append(mechs, plain, NewOAuthBearer(UnsecuredValidator{}))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, first, second []byte) {
		for _, m := range mechs {
			e := m.Start()
			_, done, err := e.Step(ctx, first)
			if err != nil || done {
				continue
			}
			e.Step(ctx, second)
		}
	})
}
