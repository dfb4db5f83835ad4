package broker

import (
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/auth"
)

// DescribeUserScramCredentials: v0
//
// Which SCRAM mechanisms each user has a credential for, and with how many
// iterations (KIP-554), from this node's metadata; never the salt or the
// keys. No users (null or empty) describes every user. A user named twice
// is DUPLICATE_RESOURCE, a user without credentials RESOURCE_NOT_FOUND.
func init() {
	register(kmsg.DescribeUserSCRAMCredentials, 0, 0, (*Broker).handleDescribeUserSCRAMCredentials)
}

// scramMechanismTypes are KIP-554's mechanism numbers.
var scramMechanismTypes = map[int8]string{1: auth.ScramSHA256, 2: auth.ScramSHA512}

func scramMechanismName(t int8) string {
	if name, ok := scramMechanismTypes[t]; ok {
		return name
	}
	return fmt.Sprintf("mechanism type %d", t)
}

func (b *Broker) handleDescribeUserSCRAMCredentials(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	// The acl helper checks DESCRIBE on the cluster here.
	state := b.meta.State()
	count := map[string]int{}
	var users []string
	for _, u := range r.Users {
		if count[u.Name]++; count[u.Name] == 1 {
			users = append(users, u.Name)
		}
	}
	if len(r.Users) == 0 {
		users = slices.Sorted(maps.Keys(state.ScramCredentials))
	}
	for _, user := range users {
		rr := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		rr.User = user
		for _, t := range []int8{1, 2} {
			if c, ok := state.ScramCredential(user, scramMechanismTypes[t]); ok {
				ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				ci.Mechanism, ci.Iterations = t, c.Iterations
				rr.CredentialInfos = append(rr.CredentialInfos, ci)
			}
		}
		var err error
		switch {
		case count[user] > 1:
			err = fmt.Errorf("%w: Cannot describe SCRAM credentials for the same user twice in a single request: %s", kerr.DuplicateResource, user)
		case len(rr.CredentialInfos) == 0:
			err = fmt.Errorf("%w: Attempt to describe a user credential that does not exist: %s", kerr.ResourceNotFound, user)
		}
		if err != nil {
			rr.CredentialInfos = nil
			rr.ErrorCode, rr.ErrorMessage = b.answerError(kmsg.DescribeUserSCRAMCredentials, err)
		}
		resp.Results = append(resp.Results, rr)
	}
	return resp, nil
}
