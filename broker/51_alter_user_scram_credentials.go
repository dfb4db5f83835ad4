package broker

import (
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/auth"
	"strata/meta"
)

// AlterUserScramCredentials: v0
//
// Creates, replaces and deletes users' SCRAM credentials (KIP-554), in one
// metadata command on the controller; a broker that is not the controller
// forwards the request to it (KIP-590). The client sends the salt and the
// salted password, never the password; the controller derives the stored
// and server keys, and only those are kept. Every user named gets one
// result: a user with an unknown mechanism (UNSUPPORTED_SASL_MECHANISM),
// an empty name or iterations outside 4096..16384
// (UNACCEPTABLE_CREDENTIAL), the same mechanism twice in the request
// (DUPLICATE_RESOURCE) or the deletion of a credential it does not have
// (RESOURCE_NOT_FOUND) is left as it was; the others' changes apply, and
// authenticate on every broker as soon as it has applied the command.
func init() {
	register(kmsg.AlterUserSCRAMCredentials, 0, 0, (*Broker).handleAlterUserSCRAMCredentials)
}

func (b *Broker) handleAlterUserSCRAMCredentials(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	// The acl helper checks ALTER on the cluster here.
	var (
		dels []meta.ScramDeletion
		ups  []meta.ScramUpsertion
	)
	for _, d := range r.Deletions {
		dels = append(dels, meta.ScramDeletion{User: d.Name, Mechanism: scramMechanismName(d.Mechanism)})
	}
	for _, u := range r.Upsertions {
		mech := scramMechanismName(u.Mechanism)
		up := meta.ScramUpsertion{User: u.Name, Mechanism: mech, Credential: meta.ScramCredential{Iterations: u.Iterations}}
		// A salted password of the wrong size leaves the keys empty,
		// which the metadata refuses as an unacceptable credential.
		if c, err := auth.CredentialFromSalted(mech, u.Salt, u.SaltedPassword, int(u.Iterations)); err == nil {
			up.Credential = meta.ScramCredential{Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey, Iterations: u.Iterations}
		}
		ups = append(ups, up)
	}
	ctx, cancel := context.WithTimeout(b.ctx, controlTimeout)
	defer cancel()
	outcome, err := b.meta.AlterScramCredentials(ctx, dels, ups)
	if err != nil {
		// The whole command failed (not the controller any more, no
		// quorum): every user gets its error.
		outcome = map[string]error{}
		for _, d := range dels {
			outcome[d.User] = err
		}
		for _, u := range ups {
			outcome[u.User] = err
		}
	}
	for _, user := range slices.Sorted(maps.Keys(outcome)) {
		rr := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		rr.User = user
		if err := outcome[user]; err != nil {
			rr.ErrorCode, rr.ErrorMessage = b.answerError(kmsg.AlterUserSCRAMCredentials, err)
		}
		resp.Results = append(resp.Results, rr)
	}
	return resp, nil
}
